"""Properties of containers whose ``__len__`` lies (review 7, finding H): a list, tuple or dict subclass claiming any
length (0, too few, 10**12, ``sys.maxsize``) or one ``len()`` refuses (negative, past ``sys.maxsize``), anywhere in
a document or as a batching argument, is read as the items it holds, as orjson and NumPy read it:

- ``loads`` of an in-process document (envelopes and their ``shape`` included) gives what the same document of
  plain containers gives;
- ``dumps`` and ``iter_dumps`` write the bytes the plain document gives;
- ``read_response`` of an engine body (its routes, token ids and logprobs included) gives the plain body's outcome;
- ``pad_routes`` / ``pack_routes`` with ``replayed=`` and ``token_lengths=`` give the plain arguments' outcome.

A list or dict subclass whose own ``__iter__``, ``items``, ``keys``, ``values``, ``get`` or ``__getitem__`` raises
or never ends (review 8, finding C) is written by ``dumps`` as orjson writes it, from its storage, also when orjson
refused the document and dumps looks for the value to name (a lone surrogate, an object orjson refuses, an integer
beyond 64 bits elsewhere in it).

Never a bare ``MemoryError`` (``list(value)`` preallocating what ``__len__`` claims), ``ValueError`` or
``OverflowError``: any exception other than r3wire's fails the property.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fuzzing import JSON_LEAVES
from hypothesis import given
from hypothesis import strategies as st

import r3wire
from r3wire import R3WireError, formats

pytestmark = pytest.mark.property


class _LyingList(list[Any]):
    claimed = 0

    def __len__(self) -> int:
        return self.claimed


class _LyingTuple(tuple[Any, ...]):
    claimed = 0

    def __len__(self) -> int:
        return self.claimed


class _LyingDict(dict[Any, Any]):
    claimed = 0

    def __len__(self) -> int:
        return self.claimed


CLAIMS = st.one_of(
    st.sampled_from([0, 1, 2, 10**12, sys.maxsize, -1, 2**64]),
    st.integers(min_value=0, max_value=sys.maxsize),
)

ENVELOPES = [
    r3wire.encode_routes(np.array([[[1, 0], [2, 3]]], np.uint8), num_experts=8),
    r3wire.encode_array(np.arange(4, dtype=np.int32)),
    r3wire.encode_logprobs(np.array([-0.5, -1.25])),
]
ARRAYS = st.sampled_from([np.arange(3, dtype=np.uint8), np.array([[0.5, -1.0]]), np.zeros((1, 2, 2), np.int16)])


def _documents(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
        max_leaves=16,
    )


VECTORS = Path(__file__).resolve().parent.parent / "vectors"
CASES: list[dict[str, Any]] = json.loads((VECTORS / "response-engines-v1.json").read_text(encoding="utf-8"))["cases"]


def _lying(data: st.DataObject, value: Any, *, tuples: bool) -> Any:
    """``value`` with each list and dict (envelopes and their members too) drawn plain or as a lying subclass;
    a list may become a lying tuple when ``tuples``."""
    made: Any
    if isinstance(value, dict):
        items = {key: _lying(data, item, tuples=tuples) for key, item in value.items()}
        if not data.draw(st.booleans()):
            return items
        made = _LyingDict(items)
    elif isinstance(value, list):
        items_list = [_lying(data, item, tuples=tuples) for item in value]
        kind = data.draw(st.sampled_from(["plain", "list", "tuple"] if tuples else ["plain", "list"]))
        if kind == "plain":
            return items_list
        made = _LyingList(items_list) if kind == "list" else _LyingTuple(items_list)
    else:
        return value
    made.claimed = data.draw(CLAIMS)
    return made


def _canonical(value: Any) -> Any:
    """A comparable form: arrays by dtype, shape and values; tuples like lists (JSON has no tuples)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tolist())
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in dict.items(value)}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in (list.copy(value) if isinstance(value, list) else tuple(iter(value)))]
    return value


def _outcome(call: Any) -> tuple[str, Any]:
    """``call()``'s value (canonical), or r3wire's error as its type and message; anything else propagates."""
    try:
        return "value", _canonical(call())
    except R3WireError as exc:
        return type(exc).__name__, str(exc)


@given(st.data(), _documents(JSON_LEAVES | st.sampled_from(ENVELOPES)))
def test_loads_reads_lying_containers_as_the_plain_document(data: st.DataObject, doc: Any) -> None:
    lied = _lying(data, doc, tuples=True)
    assert _outcome(lambda: r3wire.loads(lied)) == _outcome(lambda: r3wire.loads(doc))


@given(st.data(), _documents(JSON_LEAVES | ARRAYS))
def test_dumps_writes_lying_containers_as_the_plain_document(data: st.DataObject, doc: Any) -> None:
    # Lists and dicts only: orjson refuses a tuple subclass whatever its length.
    lied = _lying(data, doc, tuples=False)
    expected = _outcome(lambda: r3wire.dumps(doc))
    assert _outcome(lambda: r3wire.dumps(lied)) == expected
    assert _outcome(lambda: b"".join(r3wire.iter_dumps(lied))) == expected


@given(st.data(), st.sampled_from(CASES))
def test_read_response_reads_a_lying_body_as_the_plain_one(data: st.DataObject, case: dict[str, Any]) -> None:
    body, args = case["body"], case["read_args"]
    lied = _lying(data, body, tuples=False)

    def read(value: Any) -> Any:
        return [
            (result.path, result.routes, result.token_ids, result.logprobs, result.mask)
            for result in formats.read_response(value, **args)
        ]

    assert _outcome(lambda: read(lied)) == _outcome(lambda: read(body))


@given(
    st.data(),
    st.lists(st.integers(0, 3), max_size=4),
    st.integers(0, 2),
    st.booleans(),
)
def test_batching_reads_lying_sequences_as_the_plain_ones(
    data: st.DataObject, rows: list[int], extra: int, miscount: bool
) -> None:
    samples = [np.tile(np.array([[[0, 1]]], np.int8), (n, 1, 1)) for n in rows]
    replayed: list[Any] = [
        None if data.draw(st.booleans()) else np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        for n in rows
    ]
    if miscount:
        replayed.append(None)  # one mask too many: refused, by the count the sequence holds
    lengths = [n + extra for n in rows]

    def lie(items: list[Any]) -> list[Any]:
        made = _LyingList(items)
        made.claimed = data.draw(CLAIMS)
        return made

    lying_replayed, lying_lengths = lie(replayed), lie(lengths)
    for call in (
        lambda m, t: r3wire.pad_routes(samples, side="right", replayed=m, token_lengths=t),
        lambda m, t: r3wire.pack_routes(samples, token_lengths=t, replayed=m),
    ):
        expected = _outcome(lambda call=call: call(replayed, lengths))
        assert _outcome(lambda call=call: call(lying_replayed, lying_lengths)) == expected


class _MisreadError(RuntimeError):
    """What a hostile container's own methods raise: it must never come out of dumps."""


def _hostile(mode: str) -> Iterator[Any]:
    """What a hostile method gives: an error at once (``raise``), or items without end (``endless``), cut off at
    ten thousand with an error so a walk that reads it fails the property instead of hanging it."""
    if mode == "raise":
        raise _MisreadError("read through the subclass's own method")
    yield from itertools.repeat(object(), 10_000)
    raise _MisreadError("an endless iterator read past ten thousand items")


class _HostileList(list[Any]):
    mode = "raise"

    def __iter__(self) -> Iterator[Any]:
        return _hostile(self.mode)

    def __reversed__(self) -> Iterator[Any]:
        return _hostile(self.mode)

    def __getitem__(self, index: Any) -> Any:
        raise _MisreadError("read through __getitem__")


class _HostileDict(dict[Any, Any]):
    mode = "raise"

    def __iter__(self) -> Iterator[Any]:
        return _hostile(self.mode)

    def items(self) -> Any:
        return _hostile(self.mode)

    def keys(self) -> Any:
        return _hostile(self.mode)

    def values(self) -> Any:
        return _hostile(self.mode)

    def get(self, key: Any, default: Any = None) -> Any:
        raise _MisreadError("read through get")

    def __getitem__(self, key: Any) -> Any:
        raise _MisreadError("read through __getitem__")


# What makes orjson refuse a document, so dumps walks it to name the value: a lone surrogate (in a value or a
# key), an object orjson cannot write, an integer beyond 64 bits (written by dumps' own spelling).
_REFUSED = st.sampled_from(["\ud800", "a\udfffb", object(), 2**70, -(2**64) - 1])


def _hostile_copy(data: st.DataObject, value: Any) -> Any:
    """``value`` with each list and dict drawn plain or as a hostile subclass holding the same items."""
    made: Any
    if isinstance(value, dict):
        items = {key: _hostile_copy(data, item) for key, item in value.items()}
        if not data.draw(st.booleans()):
            return items
        made = _HostileDict(items)
    elif isinstance(value, list):
        listed = [_hostile_copy(data, item) for item in value]
        if not data.draw(st.booleans()):
            return listed
        made = _HostileList(listed)
    else:
        return value
    made.mode = data.draw(st.sampled_from(["raise", "endless"]))
    return made


@given(
    st.data(),
    _documents(JSON_LEAVES | ARRAYS | _REFUSED | st.dictionaries(st.just("\udc00"), JSON_LEAVES, max_size=1)),
)
def test_dumps_reads_hostile_containers_from_their_storage(data: st.DataObject, doc: Any) -> None:
    hostile = _hostile_copy(data, doc)
    expected = _outcome(lambda: r3wire.dumps(doc))
    assert _outcome(lambda: r3wire.dumps(hostile)) == expected
    assert _outcome(lambda: b"".join(r3wire.iter_dumps(hostile))) == expected


@pytest.mark.parametrize("mode", ["raise", "endless"])
@pytest.mark.parametrize("refused", ["\ud800", object(), 2**70])
def test_dumps_names_the_refused_value_beside_a_hostile_container(mode: str, refused: Any) -> None:
    items, mapping = _HostileList([1, "x"]), _HostileDict(x=1, schema="not r3wire")
    items.mode = mapping.mode = mode
    doc = {"a": items, "m": mapping, "b": refused}
    plain = {"a": [1, "x"], "m": {"x": 1, "schema": "not r3wire"}, "b": refused}
    assert _outcome(lambda: r3wire.dumps(doc)) == _outcome(lambda: r3wire.dumps(plain))
    if isinstance(refused, int):
        assert r3wire.dumps(doc) == b'{"a":[1,"x"],"m":{"x":1,"schema":"not r3wire"},"b":1180591620717411303424}'
    else:
        with pytest.raises(R3WireError, match=r"^\$\.b must be"):
            r3wire.dumps(doc)
