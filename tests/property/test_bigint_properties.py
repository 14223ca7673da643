"""Integers of any size in JSON text (wire-format.md §13: an integer token's value is the exact integer its digits
spell), at every text entry point:

- ``loads`` of a document without envelopes returns exactly what the stdlib ``json.loads`` (exact ints) gives,
  type and value, or raises DecodeError where the stdlib cannot convert the digits either (over 4300);
- an envelope whose members (``version``, ``shape`` entries, ``num_experts``, ``bits``) are any integer decodes
  from its text exactly as from its exactly parsed dict, or both raise the same error class with the same field,
  through ``decode_routes``, ``loads``, ``read``, ``read_response`` and ``detect``;
- the scan that decides whether a text needs the exact reading never misses an integer orjson would round.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import r3wire
from r3wire import R3WireError, formats
from r3wire._jsontext import _scan

pytestmark = pytest.mark.property


class Digits:
    """An integer token written as these digits (for ones too long for ``str(int)``)."""

    def __init__(self, text: str) -> None:
        self.text = text


# Around every boundary orjson has (its i64 / u64 range, a double's range) and Python's digit limit.
EDGES = [
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    -(2**64),
    10**19,
    -(10**19),
    10**30,
    -(10**30),
    10**309,
    -(10**320),
    10**4299,
]
BIG_INTS = st.one_of(
    st.sampled_from(EDGES),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.integers(min_value=19, max_value=400).map(lambda n: 10 ** (n - 1) + 7),
    st.builds(Digits, st.sampled_from(["9" * 4301, "-" + "1" * 5000, "1" + "0" * 4300])),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**20), max_value=2**20),
    BIG_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.0012345678901234567, 1.2345678901234567e-5, 1e22, -1e300]),
    st.text(max_size=12),
    st.sampled_from(["12345678901234567890", " 123456789012345678901", "-0.00123456789012345678901"]),
)
# Member names the response readers look at, so that big integers land where token ids and routes are read.
KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["choices", "token_ids", "prompt_token_ids", "routed_experts", "logprobs", "meta_info", "start"]),
)
DOCUMENTS = st.recursive(
    LEAVES,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)


def dump(value: Any, spaced: bool) -> str:
    """JSON text of ``value``, Digits written as they are."""
    sep = ", " if spaced else ","
    if isinstance(value, Digits):
        return value.text
    if isinstance(value, dict):
        return "{" + sep.join(f"{json.dumps(k)}:{dump(v, spaced)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + sep.join(dump(v, spaced) for v in value) + "]"
    return json.dumps(value)


FAILED = object()


def exact(text: str) -> Any:
    """The stdlib's reading (exact ints), or FAILED where it cannot convert an integer's digits."""
    try:
        return json.loads(text)
    except ValueError:
        return FAILED


def same(got: Any, want: Any) -> bool:
    """Equal in type and value, all the way down (floats by bits)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, dict):
        return list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float):
        return bool(np.float64(got).tobytes() == np.float64(want).tobytes())
    return bool(got == want)


def outcome(call: Any) -> tuple[str, Any]:
    """("ok", result) or (error class name, field); anything but an R3WireError propagates."""
    try:
        return "ok", call()
    except R3WireError as exc:
        return type(exc).__name__, exc.field


@given(DOCUMENTS, st.booleans(), st.sampled_from(["str", "bytes", "memoryview"]))
def test_loads_reads_every_integer_exactly(doc: Any, spaced: bool, kind: str) -> None:
    text = dump(doc, spaced)
    want = exact(text)
    data: Any = text if kind == "str" else text.encode() if kind == "bytes" else memoryview(text.encode())
    status, got = outcome(lambda: r3wire.loads(data))
    if want is FAILED:  # only the digit limit makes the stdlib fail here: refused, with the integer's path
        assert status == "DecodeError", (text[:200], got)
        assert isinstance(got, str), text[:200]
        assert got.startswith("$"), got
        return
    assert status == "ok", (text[:200], got)
    assert same(got, want), (text[:200], got)


@given(DOCUMENTS)
def test_response_readers_see_the_integers_json_text_spells(doc: Any) -> None:
    text = dump(doc, False)
    want = exact(text)
    for read in (formats.read_response, formats.detect):
        status, got = outcome(lambda read=read: read(text.encode()))
        if want is FAILED:
            assert status == "DecodeError", (read.__name__, text[:200], got)
            continue
        want_status, want_got = outcome(lambda read=read: read(want))
        assert status == want_status, (read.__name__, text[:200], got, want_got)


MEMBERS = ("version", "num_experts", "bits", "shape0", "shape1", "shape2")


@st.composite
def envelopes(draw: st.DrawFn) -> str:
    """A valid routes envelope's text, with some members replaced by any integer."""
    rows, layers, top_k = 2, 3, 2
    ids = np.arange(rows * layers * top_k, dtype=np.uint8).reshape(rows, layers, top_k) % 12
    env: dict[str, Any] = r3wire.encode_routes(ids, num_experts=16)
    shape: list[Any] = list(env["shape"])
    for member in draw(st.lists(st.sampled_from(MEMBERS), max_size=3, unique=True)):
        value = draw(st.one_of(BIG_INTS, st.sampled_from([0, 1, 2, 16, 7])))
        if member.startswith("shape"):
            shape[int(member[-1])] = value
        else:
            env[member] = value
    env["shape"] = shape
    return dump(env, draw(st.booleans()))


@given(envelopes(), st.booleans())
def test_envelope_members_of_any_size(text: str, as_bytes: bool) -> None:
    parsed = exact(text)
    data: Any = text.encode() if as_bytes else text
    status, got = outcome(lambda: r3wire.decode_routes(data))
    if parsed is FAILED:
        assert status == "DecodeError", (text, got)
        return
    want_status, want = outcome(lambda: r3wire.decode_routes(parsed))
    assert status == want_status, (text, got, want)
    if status == "ok":
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want, text
    # The same envelope inside a document read by loads, read, read_response and detect.
    status, got = outcome(lambda: r3wire.loads('{"r": ' + text + "}"))
    assert status == want_status, (text, got, want)
    assert status == "ok" or got in (f"$.r.{want}", "$.r"), (text, got, want)
    read_status, _ = outcome(lambda: formats.read(data))
    assert read_status == outcome(lambda: formats.read(parsed))[0], text
    body = '{"choices": [{"routed_experts": ' + text + "}]}"
    response_status, _ = outcome(lambda: formats.read_response(body))
    assert response_status == outcome(lambda: formats.read_response(json.loads(body)))[0], text
    assert outcome(lambda: formats.detect(data))[0] == outcome(lambda: formats.detect(parsed))[0], text


RUNS = re.compile(r"[0-9]{19,}")


def may_be_rounded(text: str) -> bool:
    """Whether ``text`` has a digit run orjson would not hold exactly as an integer token: 20 digits or more, or
    19 after a minus sign; not a fraction's or an exponent's digits, nor a string's first characters."""
    for run in RUNS.finditer(text):
        start, end = run.span()
        before = text[start - 1] if start else " "
        if before in '.eE+"' or (before == "-" and start >= 2 and text[start - 2] in "eE"):
            continue
        if end - start >= 20 or before == "-":
            return True
    return False


@given(
    st.lists(
        st.one_of(
            st.sampled_from(list('0123456789.-eE+ ,"[]:{}a')),
            st.integers(min_value=17, max_value=24).map(lambda n: "9" * n),
            st.sampled_from(["-", "e-", ".", '"', " "]),
        ),
        max_size=80,
    ),
    st.sampled_from(["str", "bytes", "non-ascii"]),
)
def test_scan_never_misses_a_rounded_integer(pieces: list[str], kind: str) -> None:
    text = "".join(pieces)
    if kind == "non-ascii":
        text = "é" + text
    want = may_be_rounded(text)
    assert _scan(text.encode() if kind == "bytes" else text) is want, text


@given(DOCUMENTS, st.booleans())
def test_dumps_writes_back_every_integer_loads_reads(doc: Any, spaced: bool) -> None:
    """A document loads returns is written by dumps to text loads reads back the same, type and value: integers
    beyond 64 bits included (a proxy reads a body and forwards it). Text no reader accepts is not read at all."""
    text = dump(doc, spaced)
    status, value = outcome(lambda: r3wire.loads(text))
    if status != "ok":
        return  # over 4300 digits: refused by loads (test above)
    written = r3wire.dumps(value)
    assert same(r3wire.loads(written), value), text[:200]
    assert b"".join(r3wire.iter_dumps(value)) == written


@st.composite
def shared_documents(draw: st.DrawFn) -> tuple[Any, Any]:
    """A document whose containers are referenced from several places (one token_ids list in two choices, the one
    empty tuple CPython has), with an integer beyond 64 bits somewhere, and the value JSON gives back for it."""
    built: list[tuple[Any, Any]] = []  # (container, what it reads back as)
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        items: list[tuple[Any, Any]] = []
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            if draw(st.booleans()) and built:
                items.append(draw(st.sampled_from(built)))  # a reference to an earlier container: shared
            else:
                leaf = draw(st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=4), st.none()))
                items.append((leaf, leaf))
        kind = draw(st.sampled_from(["dict", "list", "tuple"]))
        if kind == "dict":
            built.append(
                ({f"k{i}": v for i, (v, _) in enumerate(items)}, {f"k{i}": e for i, (_, e) in enumerate(items)})
            )
        else:
            value = [v for v, _ in items]
            built.append((value if kind == "list" else tuple(value), [e for _, e in items]))
    big = draw(st.sampled_from([2**64, -(2**63) - 1, 10**30]))
    root = {"big": big, "all": [c for c, _ in built], "empty": ((), ())}
    expected = {"big": big, "all": [e for _, e in built], "empty": [[], []]}
    return root, expected


@given(shared_documents())
def test_dumps_writes_every_reference_to_a_shared_container_beside_a_big_integer(case: tuple[Any, Any]) -> None:
    """Integers beyond 64 bits make dumps copy the document's containers; a container referenced from several
    places is written at every one of them (each but the first was written as null)."""
    doc, expected = case
    written = r3wire.dumps(doc)
    assert r3wire.loads(written) == expected, written[:300]
    assert b"".join(r3wire.iter_dumps(doc)) == written
