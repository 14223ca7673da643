"""The first repeated member name of a JSON text, as the strict readers report it, against the token scan.

``_scan`` (a Python token scan of the whole text) defines the answer: the name whose second appearance in one
object comes first in the text. ``_first_repeat`` reads the text with the stdlib's C parser instead, and
``_repeated_member`` (what ``load_json`` asks) counts colons first; both must give the scan's answer for any
valid text: names repeated at random depths, spelled with escapes (a colon as ``\\u003a``), integers beyond 64
bits and beyond a double, nesting up to 1100 levels (past orjson's 1024 and the stdlib parser's recursion limit,
where the scan decides), as ``str``, ``bytes`` and ``bytearray``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire._jsontext import parse_json
from r3wire._validate import _UNDECIDED, _first_repeat, _repeated_member, _scan, load_json
from r3wire.errors import DecodeError, describe

pytestmark = pytest.mark.property

# Few name characters, so that names repeat; the colon and the quote are the ones a scan could trip on.
NAME_CHARS = 'ab:"\\\u00e9\U0001f600'
STRING_CHARS = 'ab:,"\\{}[] \u00e9\u2028\U0001f600'
WHITESPACE = st.sampled_from(["", " ", "\n", " \t\r\n "])


@st.composite
def json_strings(draw: st.DrawFn, alphabet: str, max_size: int) -> str:
    """A JSON string token of text drawn from ``alphabet``, each character written as itself or as an escape."""
    text = draw(st.text(alphabet=alphabet, max_size=max_size))
    escaped = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    upper = draw(st.booleans())
    out = []
    for char, escape in zip(text, escaped, strict=True):
        if escape:
            units = char.encode("utf-16-be")  # a character beyond the BMP as its surrogate pair
            for i in range(0, len(units), 2):
                code = f"{int.from_bytes(units[i : i + 2], 'big'):04x}"
                out.append("\\u" + (code.upper() if upper else code))  # ':' as \u003a or \u003A
        elif char in '"\\':
            out.append("\\" + char)
        elif char == "\u2028" and upper:
            out.append("\\u2028")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


NAMES = json_strings(NAME_CHARS, 2)
INTEGERS = st.one_of(
    st.integers(-(2**63), 2**64),
    st.integers(-(10**30), 10**30),  # beyond 64 bits: orjson rounds them, parse_json reads them exactly
    st.integers(10**309, 10**400),  # beyond a double: orjson refuses the text, parse_json reads it exactly
)
LEAVES = st.one_of(
    st.sampled_from(["null", "true", "false"]),
    INTEGERS.map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    json_strings(STRING_CHARS, 6),
)
TREES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4).map(lambda items: ("list", items))
        | st.lists(st.tuples(NAMES, children), max_size=4).map(lambda pairs: ("object", pairs))
    ),
    max_leaves=30,
)
# How a level of deep nesting wraps what it holds ("@"); the second group repeats a name, before or after it.
PLAIN_LEVELS = ['["x", @]', "[@, 1]", '{"w": @}', '{"v": [{}], "w": @}', '{"w": @, "v\\u003a": 1}']
REPEATING_LEVELS = [
    '{"w": 0, "w": @}',
    '{"w": @, "w": 0}',
    '{"r": 1, "w": [@], "r": 2}',
    '{"w": {"r": 1, "r": 2}, "v": @}',
    '[{"q": 1, "q": 2}, @]',
    '[[@], {"q": 1, "q": 2}]',
]


def _write(tree: Any, ws: str) -> str:
    """JSON text of ``tree`` (objects as lists of pairs, so a name may repeat), with ``ws`` around every token."""
    if isinstance(tree, str):
        return tree
    kind, items = tree
    if kind == "list":
        return "[" + ws + f"{ws},{ws}".join(_write(item, ws) for item in items) + ws + "]"
    members = (f"{name}{ws}:{ws}{_write(value, ws)}" for name, value in items)
    return "{" + ws + f"{ws},{ws}".join(members) + ws + "}"


@st.composite
def texts(draw: st.DrawFn) -> tuple[str, int]:
    """A valid JSON text, and how deep its nesting levels go around the random tree."""
    ws = draw(WHITESPACE)
    text = _write(draw(TREES), ws)
    depth = draw(st.one_of(st.just(0), st.integers(0, 30), st.integers(250, 1100)))
    if depth:
        plain = draw(st.lists(st.sampled_from(PLAIN_LEVELS), min_size=1, max_size=3))
        levels = [plain[i % len(plain)] for i in range(depth)]
        for _ in range(draw(st.integers(0, 2))):  # a name repeated at one or two random depths
            levels[draw(st.integers(0, depth - 1))] = draw(st.sampled_from(REPEATING_LEVELS))
        opening, closing = [], []
        for level in levels:  # the first level innermost
            before, after = level.split("@")
            opening.append(before)
            closing.append(after)
        text = "".join(reversed(opening)) + text + "".join(closing)
    return text, depth


@given(texts(), st.sampled_from([str, bytes, bytearray]))
def test_the_stdlib_parse_names_what_the_scan_names(case: tuple[str, int], kind: type) -> None:
    text, depth = case
    data: Any = text if kind is str else kind(text.encode())
    want = _scan(data, budget=None)
    found = _first_repeat(data)
    if depth <= 600:  # well inside the stdlib parser's recursion limit: it decides
        assert found is not _UNDECIDED
    assert found is _UNDECIDED or found == want


@given(texts(), st.sampled_from([str, bytes, bytearray]))
def test_the_readers_report_the_first_repeated_name(case: tuple[str, int], kind: type) -> None:
    text, _ = case
    data: Any = text if kind is str else kind(text.encode())
    want = _scan(data, budget=None)
    try:
        parsed = parse_json(data)
    except orjson.JSONDecodeError:  # nested past orjson's 1024 levels: no reader gets as far as the names
        return
    assert _repeated_member(data, parsed) == want
    if want is None:
        load_json(data)
    else:
        with pytest.raises(DecodeError) as info:
            load_json(memoryview(text.encode()) if kind is bytearray else data)
        assert str(info.value).endswith(f"got member {describe(want)} twice")
