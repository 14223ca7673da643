"""Property tests for the shortcut ``dumps`` and ``loads`` take over long lists of small objects (a chat
completion's ``logprobs.content``): orjson writes a piece of the list first, and a piece it proves plain is not
walked in Python. The shortcut must never change a result: every document gives exactly the bytes, the decoded
values or the error (type, field, message) the full walk gives, wherever in the list the value that needs the walk
sits (a NaN, an array, a NumPy scalar, an object naming an r3wire schema, an envelope, a member name an envelope
may have, a duplicate member)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
from unittest import mock

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import r3wire
from r3wire import R3WireError, response

pytestmark = pytest.mark.property


class Colour(enum.Enum):
    RED = "r3wire.routes"
    NAN = float("nan")
    ARRAY = 1


@dataclasses.dataclass
class Holder:
    value: Any


# Values the walk must see, change or refuse, and some it need not (strings that spell null or r3wire).
SPECIALS: list[Callable[[], Any]] = [
    lambda: float("nan"),
    lambda: float("-inf"),
    lambda: None,
    lambda: np.float64("nan"),
    lambda: np.float32(1.5),
    lambda: np.int64(-3),
    lambda: np.bool_(True),
    lambda: np.str_("text"),
    lambda: {"routed_experts": np.arange(24, dtype=np.int32).reshape(2, 3, 4) % 5},
    lambda: {"logprobs": np.array([-0.5, float("nan")], dtype=np.float32)},
    lambda: {"logprobs": [None, -0.25]},
    lambda: {"logprobs": [-0.5, -0.25]},
    lambda: {"x": np.arange(5, dtype=np.uint16)},
    lambda: {"schema": "r3wire.routes", "data": "AAAA"},
    lambda: {"schema": "r3wire.array"},
    lambda: {"data": "r3wire.x", "shape": [1]},
    lambda: "null",
    lambda: "r3wire.routes",
    lambda: (1, 2.5, "t"),
    lambda: Colour.RED,
    lambda: Colour.NAN,
    lambda: Holder(np.arange(3)),
    lambda: Holder(float("inf")),
    lambda: datetime.datetime(2026, 1, 2, 3, 4, 5),
    lambda: decimal.Decimal("1.5"),
    lambda: 2**70,
    lambda: "\ud800",
    lambda: b"bytes",
    lambda: {1: "non-str key"},
    lambda: Holder("plain"),
    lambda: {'a"data': 1, "b": 'x"shape":'},
    lambda: _OddList([1, 2]),
    lambda: _OddDict(a=1),
    lambda: _Pair([Colour.ARRAY] * 70, 1),
    lambda: _OddList([Colour.ARRAY] * 70),
    lambda: _LyingInt(2**70),
    lambda: _OddList([None, float("nan")]),
]


class _Pair(NamedTuple):
    first: Any
    second: Any


class _LyingInt(int):
    def __int__(self) -> int:
        return 5


class _OddList(list[Any]):
    pass


class _OddDict(dict[str, Any]):
    pass


def _entry(index: int) -> dict[str, Any]:
    """One logprobs.content entry, as vLLM writes it."""
    text = f"t{index}"
    return {
        "token": text,
        "logprob": -0.5 - index / 1024,
        "bytes": list(text.encode()),
        "top_logprobs": [{"token": "a", "logprob": -1.5, "bytes": [97]}],
    }


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A body with a long content list and, at random entries (nested at random depths), special values."""
    count = draw(st.integers(60, 1300))
    content: list[Any] = [_entry(i) for i in range(count)]
    for _ in range(draw(st.integers(0, 3))):
        special = draw(st.sampled_from(SPECIALS))()
        at = draw(st.integers(0, count - 1))
        where = draw(st.sampled_from(["item", "value", "nested", "key"]))
        if where in ("value", "nested") and not (isinstance(content[at], dict) and "top_logprobs" in content[at]):
            where = "item"  # an earlier special took this entry's place
        if where == "item":
            content[at] = special
        elif where == "value":
            content[at]["extra"] = special
        elif where == "nested":
            content[at]["top_logprobs"][0]["logprob" if isinstance(special, float) else "extra"] = special
        else:
            content[at] = {draw(st.sampled_from(["logprobs", "routed_experts", "data"])): special}
    if draw(st.booleans()):
        return {"choices": _Pair({"index": 0, "logprobs": {"content": content}}, None)}
    return {"choices": [{"index": 0, "logprobs": {"content": content}}], "usage": {"completion_tokens": count}}


@contextmanager
def _no_shortcut() -> Iterator[None]:
    with mock.patch.object(response, "_PROBE_MIN", 1 << 62):
        yield


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except R3WireError as exc:
        return type(exc).__name__, (exc.field, str(exc))


def _same_values(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_values(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same_values, a, b))
    return type(a) is type(b) and a == b


OPTIONS = st.sampled_from(
    [
        None,
        orjson.OPT_SERIALIZE_NUMPY,
        orjson.OPT_NON_STR_KEYS,
        orjson.OPT_PASSTHROUGH_DATACLASS,
        orjson.OPT_SORT_KEYS,
        orjson.OPT_PASSTHROUGH_SUBCLASS,
    ]
)


@given(documents(), st.booleans(), OPTIONS)
def test_dumps_gives_what_the_full_walk_gives(doc: dict[str, Any], clamp: bool, option: int | None) -> None:
    def call() -> bytes:
        return r3wire.dumps(doc, num_experts=8, clamp_logprobs=clamp, option=option)

    fast = _outcome(call)
    with _no_shortcut():
        slow = _outcome(call)
    assert fast == slow


@st.composite
def texts(draw: st.DrawFn) -> bytes:
    """A body's text with a long content list holding envelopes, member names an envelope may have, and (at
    times) an envelope that names a member twice."""
    count = draw(st.integers(60, 1300))
    content: list[Any] = [_entry(i) for i in range(count)]
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, count - 1))
        kind = draw(st.sampled_from(["routes", "array", "names", "shape", "quoted"]))
        if kind == "routes":
            content[at]["routed_experts"] = np.arange(12, dtype=np.uint8).reshape(1, 3, 4) % 7
        elif kind == "array":
            content[at]["x"] = np.arange(3, dtype=np.float32)
        elif kind == "names":
            content[at]["data"] = "text"
            content[at]["version"] = 1
        elif kind == "shape":
            content[at]["top_logprobs"][0]["shape"] = [1, 2]
        else:  # keys and strings that end in a member name: no member name of an object
            content[at]['a"data'] = 'x,"dtype":'
            content[at]["top_logprobs"][0]['"version'] = 1
    text = r3wire.dumps({"choices": [{"logprobs": {"content": content}}]})
    if draw(st.booleans()) and b'"schema":"r3wire.' in text:
        # Name a member of one envelope twice (orjson would keep the last silently).
        position = text.index(b'"schema":"r3wire.')
        text = text[:position] + b'"version":1,' + text[position:]
    return text


@given(texts())
def test_loads_gives_what_the_full_walk_gives(text: bytes) -> None:
    fast = _outcome(lambda: r3wire.loads(text))
    with _no_shortcut():
        slow = _outcome(lambda: r3wire.loads(text))
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        assert _same_values(fast[1], slow[1])
    else:
        assert fast[1] == slow[1]


def _chain(depth: int) -> dict[str, Any]:
    """Long lists nested ``depth`` deep with a ``null`` at the bottom: every probe of them fails."""
    node: list[Any] = [None] * 64
    for _ in range(depth):
        node = ["x" * 200] * 63 + [node]
    return {"a": node}


def test_probes_of_nested_lists_cost_at_most_a_bounded_amount_more_than_one_writing() -> None:
    """A long list is written by orjson again at each level of nesting that holds it: the budget stops probing a
    document that defeats the probes, so what orjson writes stays within a few times the output, not its depth
    times (measured in bytes written, not time)."""
    doc = _chain(60)
    written = [0]
    real = orjson.dumps

    def counting(*args: Any, **kwargs: Any) -> bytes:
        text = real(*args, **kwargs)
        written[0] += len(text)
        return text

    with mock.patch.object(orjson, "dumps", side_effect=counting):
        out = r3wire.dumps(doc)
        text_for_loads = orjson.dumps(doc)
        written[0] = 0
        r3wire.loads(text_for_loads)
        loads_written = written[0]
        written[0] = 0
        r3wire.dumps(doc)
    assert written[0] <= 3 * len(out) + (2 << 20), (written[0], len(out))
    assert loads_written <= 2 * len(text_for_loads) + (2 << 20), (loads_written, len(out))
    with _no_shortcut():
        assert r3wire.dumps(doc) == out
