"""Properties of what orjson refuses without saying where: r3wire names the place.

- a document with one string that is not UTF-8 (a lone surrogate, in a ``str`` or ``np.str_`` value or in a key)
  planted anywhere is refused by ``dumps`` and ``iter_dumps`` with an ``EncodeError`` whose field is that place's
  path; its JSON text (the surrogate escaped, raw in a ``str``, or as bytes that are not UTF-8) is refused by
  ``loads`` and ``read_response`` with a ``DecodeError`` at the same path;
- JSON text with one number beyond a double's range (``1e400``) planted anywhere is refused at its path.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from _fuzzing import JSON_LEAVES
from hypothesis import given
from hypothesis import strategies as st

import r3wire
from r3wire import DecodeError, EncodeError, _jsontext
from r3wire._jsonpath import json_path
from r3wire._jsontext import parse_json
from r3wire.formats import read_response

pytestmark = pytest.mark.property

# orjson writes integers of 64 bits (dumps names a wider one at its path too, but one refusal per document here).
_LEAVES = JSON_LEAVES.filter(lambda x: not isinstance(x, int) or -(2**63) <= x < 2**63)
_DOCS = st.recursive(
    _LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=10,
)
# st.text draws no surrogates: the planted one is the only one, and cannot pair with a neighbour.
_BAD = st.tuples(st.text(max_size=4), st.integers(0xD800, 0xDFFF), st.text(max_size=4)).map(
    lambda t: t[0] + chr(t[1]) + t[2]
)


def _sites(doc: Any) -> list[tuple[list[object], str]]:
    """Every place a value or a key can be planted: (path to it, "value" or "key")."""
    out: list[tuple[list[object], str]] = [([], "value")]
    stack: list[tuple[Any, list[object]]] = [(doc, [])]
    while stack:
        node, parts = stack.pop()
        items = (
            list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
        )
        for key, item in items:
            out.append(([*parts, key], "value"))
            if isinstance(node, dict):
                out.append(([*parts, key], "key"))
            stack.append((item, [*parts, key]))
    return out


def _plant(doc: Any, parts: list[object], kind: str, new: object) -> tuple[Any, list[object]]:
    """``doc`` with ``new`` as the value (or the key) at ``parts``, and the path that names it."""
    if not parts:
        return new, []
    *above, last = parts
    node = doc
    for part in above:
        node = node[part]
    if kind == "value":
        node[last] = new
        return doc, parts
    assert isinstance(node, dict)
    # Rebuilt in order, so the renamed member keeps its place in the document.
    items = [(new if key == last else key, value) for key, value in node.items()]
    node.clear()
    node.update(items)
    return doc, [*above, new]


@given(data=st.data(), doc=_DOCS, bad=_BAD, numpy_str=st.booleans())
def test_a_string_that_is_not_utf8_is_named_at_its_path(
    data: st.DataObject, doc: Any, bad: str, numpy_str: bool
) -> None:
    parts, kind = data.draw(st.sampled_from(_sites(doc)))
    planted, path_parts = _plant(doc, parts, kind, np.str_(bad) if numpy_str and kind == "value" else bad)
    field = json_path(path_parts)
    with pytest.raises(EncodeError) as info:
        r3wire.dumps(planted)
    assert info.value.field == field
    assert "no lone surrogate" in str(info.value)
    with pytest.raises(EncodeError) as info:
        b"".join(r3wire.iter_dumps(planted))
    assert info.value.field == field
    plain = str(planted) if isinstance(planted, np.str_) else planted
    escaped = json.dumps(plain, default=str)  # ensure_ascii: the surrogate as a \u escape
    raw = json.dumps(plain, ensure_ascii=False, default=str)  # the surrogate itself, in a str
    # In bytes, the surrogate is 3 bytes that are not UTF-8, each named in a key as U+DC80 + its value (how Python
    # decodes bytes that are not UTF-8 with "surrogateescape").
    as_bytes = [
        p.encode("utf-8", "surrogatepass").decode("utf-8", "surrogateescape") if isinstance(p, str) else p
        for p in path_parts
    ]
    for text, where in ((escaped, field), (raw, field), (raw.encode("utf-8", "surrogatepass"), json_path(as_bytes))):
        with pytest.raises(DecodeError) as decoded:
            r3wire.loads(text)
        assert decoded.value.field == where
        if isinstance(planted, (dict, list)):
            with pytest.raises(DecodeError) as decoded:
                read_response(text)
            assert decoded.value.field == where


@given(data=st.data(), doc=_DOCS, token=st.sampled_from(["1e400", "-1E+309", "1.5e99999", "2" + "0" * 400 + ".0"]))
def test_a_number_beyond_a_double_is_named_at_its_path(data: st.DataObject, doc: Any, token: str) -> None:
    parts, _ = data.draw(st.sampled_from([site for site in _sites(doc) if site[1] == "value"]))
    marker = "r3wire-test-marker"
    planted, _ = _plant(doc, parts, "value", marker)
    text = json.dumps(planted).replace(f'"{marker}"', token)
    for given_text in (text, text.encode()):
        with pytest.raises(DecodeError) as info:
            r3wire.loads(given_text)
        assert info.value.field == json_path(parts)
        assert "number out of range" in str(info.value)
        if parts:
            with pytest.raises(DecodeError) as info:
                read_response(given_text)
            assert info.value.field == json_path(parts)


# A document as its text will be written: ("object", [(name, node)...]) may repeat a name; ("fault", token) is a
# value orjson refuses (a number beyond a double, a string that is not Unicode), written as that token.
_FAULTS = st.sampled_from(["1e400", "-1E+309", '"\\ud800"', '"a\\udfff"', "1" + "0" * 4400])
_NAMES = st.sampled_from(["a", "b", "x"])  # few names: repeats are common
_TREES = st.recursive(
    st.one_of(_LEAVES.map(lambda leaf: ("leaf", leaf)), _FAULTS.map(lambda token: ("fault", token))),
    lambda children: (
        st.lists(children, max_size=4).map(lambda items: ("array", items))
        | st.lists(st.tuples(st.one_of(_NAMES, st.just("\\udc00")), children), max_size=4).map(
            lambda members: ("object", members)
        )
    ),
    max_leaves=12,
)


def _write(tree: Any) -> tuple[str, list[object] | None, bool]:
    """The JSON text of ``tree``, the path of its first fault in text order (None: none), and whether an object in
    it repeats a member name."""
    first: list[list[object]] = []
    repeated = False
    pieces: list[str] = []

    def write(node: Any, parts: list[object]) -> None:
        nonlocal repeated
        kind, body = node
        if kind == "leaf":
            pieces.append(json.dumps(body))
        elif kind == "fault":
            if not first:
                first.append(parts)
            pieces.append(body)
        elif kind == "array":
            pieces.append("[")
            for index, item in enumerate(body):
                pieces.append("," if index else "")
                write(item, [*parts, index])
            pieces.append("]")
        else:
            pieces.append("{")
            seen: set[str] = set()
            for index, (escaped, item) in enumerate(body):
                name: str = json.loads(f'"{escaped}"')
                repeated = repeated or name in seen
                seen.add(name)
                if escaped.startswith("\\ud") and not first:  # a member name that is not Unicode text
                    first.append([*parts, name])
                pieces.append(f'{"," if index else ""}"{escaped}":')
                write(item, [*parts, name])
            pieces.append("}")

    write(tree, [])
    return "".join(pieces), (first[0] if first else None), repeated


@given(tree=_TREES)
def test_of_several_faults_the_first_in_the_text_is_named_before_any_repeated_name(tree: Any) -> None:
    # wire-format.md §13, "Several faults in one text": not JSON first; then the first value (or member name) in
    # text order that orjson refuses, at its path, even where a later member of the same name shadows it; then a
    # repeated name (refused by read_response, kept by loads outside envelopes).
    text, first, repeated = _write(tree)
    for given_text in (text, text.encode("utf-8", "surrogatepass")):
        if first is None:
            r3wire.loads(given_text)
        else:
            with pytest.raises(DecodeError) as info:
                r3wire.loads(given_text)
            assert info.value.field == json_path(first)
        if tree[0] == "object":  # a list is a batch of bodies, each an object
            if first is None and not repeated:
                read_response(given_text)
                continue
            with pytest.raises(DecodeError) as info:
                read_response(given_text)
            if first is None:
                assert info.value.field is None
                assert "twice" in str(info.value)
            else:
                assert info.value.field == json_path(first)


def _outcome(text: str | bytes) -> tuple[type[BaseException] | None, str]:
    try:
        parse_json(text)
    except Exception as exc:  # every refusal is compared, whatever its class
        return type(exc), str(exc)
    return None, ""


# Ways a written text goes wrong: cut short (a truncated body), a character in the wrong place, a fault token.
_DAMAGE = st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from(["}", "]", ",", ":", "x", "1", "-", '"', "\\"])),
    st.tuples(st.just("insert"), st.floats(0, 1), _FAULTS),
)


def _every_entry(node: list[Any]) -> Any:
    if type(node) is _jsontext._Members:
        return ((name, value, name) for name, value in node)
    return ((index, value, None) for index, value in enumerate(node))


@contextlib.contextmanager
def _python_step_per_value() -> Iterator[None]:
    """The reference locator: the stdlib parse after every refusal, a Python call per number keeping its token,
    and a walk that looks at every value."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(_jsontext, "_may_be_located", return_value=True))
        stack.enter_context(
            mock.patch.object(
                _jsontext,
                "_stdlib_parse",
                lambda data, limit, **_: _jsontext._parse_with(data, _jsontext._exact_int(limit), True),
            )
        )
        stack.enter_context(mock.patch.object(_jsontext, "_entries", _every_entry))
        yield


@given(tree=_TREES, damage=st.lists(_DAMAGE, max_size=3))
def test_the_shortcuts_of_placing_a_fault_never_change_a_refusal(tree: Any, damage: list[tuple[Any, ...]]) -> None:
    # Placing a fault takes shortcuts: no stdlib parse when orjson's error shows the text is not JSON, C readers
    # for numbers that cannot be faults, a walk that passes over arrays of numbers. Over texts with faults and
    # damage anywhere, every outcome (the error's class and message) is the reference's.
    text, _, _ = _write(tree)
    for kind, at, *rest in damage:
        cut = int(at * len(text))
        text = text[:cut] if kind == "cut" else text[:cut] + rest[0] + text[cut:]
    for given_text in (text, text.encode("utf-8", "surrogatepass")):
        fast = _outcome(given_text)
        with _python_step_per_value():
            assert _outcome(given_text) == fast
