"""Which repeated member name the strict JSON readers report, and what finding it costs.

The name is the one whose second appearance in one object comes first in the text (the token scan's answer).
When counting colons cannot prove there is none, the text is read once more by the stdlib's C parser, with one
Python call per object, instead of scanned with Python work per token (seconds for a 26 MB response body).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from _calls import python_calls
from r3wire import formats
from r3wire._validate import _first_repeat, _scan, load_json
from r3wire.errors import DecodeError

# (text, the name reported): the parser closes an object before the one holding it, the text order differs.
CASES = [
    ('{"a": 1, "x": {"b": 1, "b": 2}, "a": 2}', "b"),  # an inner object's repeat, before the outer one's
    ('{"a": 1, "a": 2, "x": {"b": 1, "b": 2}}', "a"),  # the outer repeat first, though the inner closes first
    ('{"a": 1, "a": {"b": 1, "b": 1}}', "a"),  # a name before what its value holds
    ('[{"c": {"d": 1, "d": 1}}, {"e": 1, "e": 1}]', "d"),
    ('[[{"e": 1, "e": 1}], [[{"d": 1, "d": 1}]]]', "e"),  # the first of an array's items, at any depth
    ('{"k": [1, [2, {"z": 0, "z": 0}]], "k": 0}', "z"),
    ('{"b": [{"q": 1, "q": 1}], "a": {"c": 1, "c": 1}}', "q"),
    ('{"x": {"y": [{"p": 1}]}, "w": [[], {"p": 1, "s": {"t": 0, "t\\u003a": 1, "t": 2}}]}', "t"),
    ('{"a": 1, "\\u0061": 2}', "a"),  # one name in two spellings
    ('{"a\\u003a": 1, "a:" : 2}', "a:"),
    ('{"\\ud83d\\ude00": [], "\U0001f600": {}}', "\U0001f600"),
    ('{"n": 123456789012345678901234567890, "m": {"n": 1e300, "n": -1}}', "n"),
    ('{"a": 1, "b": {"a": 2}, "c": [{"a": 3}]}', None),  # one name in several objects is no repeat
    ('{"a\\u003a": 1, "b": [{"a:": 1}], "x": "a:"}', None),
]


@pytest.mark.parametrize(("text", "name"), CASES)
@pytest.mark.parametrize("kind", [str, bytes, bytearray, memoryview])
def test_the_first_repeated_name_in_text_order_is_reported(text: str, name: str | None, kind: type) -> None:
    data: Any = text if kind is str else kind(text.encode())
    if kind is not memoryview:  # load_json hands the others on as they are
        assert _first_repeat(data) == name == _scan(data, budget=None)
    if name is None:
        load_json(data)
        return
    with pytest.raises(DecodeError) as info:
        load_json(data, what="a response body")
    expected = "JSON text naming each member once (a response body)"
    assert str(info.value) == f"payload must be {expected}, got member {name!r} twice"


def _arrays(count: int, tail: str = "") -> str:
    """A body whose values are arrays of strings and numbers, one string spelling a colon ``\\u003a`` (so counting
    colons proves nothing), ending with ``tail``."""
    return '{"x": [' + '["a:b", 1, 2.5, "c\\u003ad", true, null, "e"],' * count + '[]], "y": {"z": 1}' + tail + "}"


@pytest.mark.parametrize("tail", ["", ', "x": 0'])
def test_a_body_counting_colons_cannot_decide_costs_no_python_call_per_value(tail: str) -> None:
    # Both bodies are over 16 KiB: the scan's first 1024 tokens are read in each (an envelope is decided there).
    # Beyond those, the token scan made a Python call per string: 54,000 more for the larger body.
    with pytest.raises(DecodeError) if tail else contextlib.nullcontext():
        load_json(_arrays(20_000, tail))
    small, large = (python_calls(lambda n=n: load_json(_arrays(n, tail)), DecodeError) for n in (2_000, 20_000))
    assert large < 2 * small, (small, large)


def _objects(before: int, after: int) -> str:
    entry = '{"token": "a", "bytes": [97], "top_logprobs": [], "s": ["x", "y", "z", "w"]}'
    repeat = '{"token": "b", "logprob": -1.0, "logprob": -2.0}'
    return '{"choices": [{"logprobs": {"content": [' + ",".join([entry] * before + [repeat] + [entry] * after) + "]}}]}"


def test_a_repeat_among_many_objects_costs_a_python_call_per_object() -> None:
    # The stdlib parser calls the hook once per object; after a repeat, an object also looks through its values,
    # in C for arrays of anything but arrays. The token scan made a Python call per string: 9 per object here.
    with pytest.raises(DecodeError, match="member 'logprob' twice"):
        formats.read_response(_objects(5_000, 5_000))
    for before, after in ((5_000, 5_000), (10_000, 0)):
        calls = python_calls(lambda before=before, after=after: load_json(_objects(before, after)), DecodeError)
        assert calls < 10_000 + 1_000, (before, after, calls)


def test_nesting_past_the_stdlib_parsers_limit_is_still_answered() -> None:
    # orjson reads 1024 levels; the stdlib parser stops near 1000 (its recursion limit is not raised for it): the
    # token scan answers instead, and the same name is reported.
    text = '{"w": [' * 510 + '{"r": 1, "r": 2}' + "]}" * 510
    with pytest.raises(DecodeError, match="got member 'r' twice"):
        load_json(text.encode())
    load_json(text.replace('"r": 2', '"\\u003a": 2'))
