"""Properties of r3wire.dumps / r3wire.loads over arbitrary documents.

- loads(dumps(doc)) gives doc back, arrays included (routes compacted by the documented rule, other arrays in
  their own dtype), and any JSON parser reads dumps' output;
- on documents without envelopes, loads agrees with orjson.loads exactly, accepting and rejecting the same
  texts, even when long "data" strings are cut out of the raw bytes before parsing;
- any input to loads is either accepted or raises DecodeError.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import r3wire
from r3wire import DecodeError

pytestmark = pytest.mark.property

TRICKY_TEXT = st.sampled_from(['"data":"', '\\"data\\":\\"', "\\", '"', "r3wire", "é", "\u2028", "data"])
KEYS = st.one_of(st.sampled_from(["data", "shape", "dtype", "schema", "version", 'x"data', "data\\"]), st.text())
# Long strings are what loads cuts out of the raw bytes; these units cover base64, escapes and non-ASCII.
LONG_TEXT = st.builds(
    lambda unit, count, tail: unit * (4100 // len(unit) + count) + tail,
    st.sampled_from(["QUJD", "AA==", "x", "\\", '"', "é", "\x01", '"data":"']),
    st.integers(0, 100),
    st.text(max_size=4),
)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
# Zero rows are an empty turn; routes always have at least one layer and one slot.
ROUTE_SHAPES = st.tuples(st.integers(0, 4), st.integers(1, 4), st.integers(1, 4))
ARRAYS = st.one_of(
    hnp.arrays(st.sampled_from(["?", "u1", "i1", "<u2", ">i2", "<i4", ">u4", "<i8"]).map(np.dtype), SHAPES),
    hnp.arrays(np.dtype("<f2"), SHAPES, elements=st.floats(width=16)),
    hnp.arrays(np.dtype(">f4"), SHAPES, elements=st.floats(width=32)),
    hnp.arrays(np.dtype("<f8"), SHAPES),
    # Large enough to be cut out of the text by loads, and to be spliced in as raw bytes by dumps.
    st.integers(2048, 3000).map(lambda n: np.arange(n, dtype=np.uint16)),
    st.integers(66000, 67000).map(lambda n: np.arange(n, dtype=np.uint16)),
)
ROUTES = st.one_of(
    hnp.arrays(st.sampled_from(["u1", "<i2", ">i4", "<u8"]).map(np.dtype), ROUTE_SHAPES, elements=st.integers(0, 255)),
    hnp.arrays(np.dtype("<i4"), ROUTE_SHAPES, elements=st.integers(0, 40000)),
    st.integers(100, 200).map(lambda rows: np.arange(rows * 24, dtype=np.int32).reshape(rows, 4, 6) % 97),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    TRICKY_TEXT,
    LONG_TEXT,
)


def _documents(leaves: st.SearchStrategy[Any], routes: bool) -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        dicts = st.dictionaries(KEYS, children, max_size=4)
        if routes:
            dicts = st.builds(lambda d, r: d if r is None else {**d, "routed_experts": r}, dicts, st.none() | ROUTES)
        return st.lists(children, max_size=4) | st.tuples(children, children) | dicts

    return st.recursive(leaves, extend, max_leaves=12)


DOCUMENTS = _documents(st.one_of(LEAVES, ARRAYS), routes=True)
PLAIN_DOCUMENTS = _documents(LEAVES, routes=False)


def _route_dtype(routes: np.ndarray[Any, Any]) -> np.dtype[Any]:
    high = int(routes.max()) if routes.size else 0
    return np.dtype(np.uint8 if high < 256 else np.int16 if high < 32768 else np.int32)


def _assert_same(back: Any, sent: Any, *, routes: bool = False) -> None:
    if isinstance(sent, np.ndarray):
        assert isinstance(back, np.ndarray)
        expected = _route_dtype(sent) if routes else sent.dtype.newbyteorder("=")
        assert back.dtype == expected
        assert back.shape == sent.shape
        assert back.tobytes() == sent.astype(expected).tobytes()
    elif isinstance(sent, dict):
        assert isinstance(back, dict)
        assert list(back) == list(sent)
        for key, value in sent.items():
            _assert_same(back[key], value, routes=key == "routed_experts")
    elif isinstance(sent, (list, tuple)):
        assert isinstance(back, list)
        assert len(back) == len(sent)
        for b, s in zip(back, sent, strict=True):
            _assert_same(b, s)
    else:
        assert type(back) is type(sent)
        assert back == sent


@given(DOCUMENTS)
def test_round_trip(doc: Any) -> None:
    text = r3wire.dumps(doc)
    json.loads(text)  # plain JSON, for any parser
    _assert_same(r3wire.loads(text), doc)


@given(PLAIN_DOCUMENTS, st.sampled_from([None, 2]))
def test_loads_agrees_with_orjson_without_envelopes(doc: Any, indent: int | None) -> None:
    # The stdlib writes \uXXXX escapes and other spacing; orjson writes raw UTF-8 and no spaces.
    for text in (json.dumps(doc, indent=indent).encode(), orjson.dumps(doc)):
        assert r3wire.loads(text) == orjson.loads(text)
    assert r3wire.dumps(doc) == orjson.dumps(doc)


def _agrees_with_orjson(text: bytes) -> None:
    try:
        expected = orjson.loads(text)
    except orjson.JSONDecodeError:
        with pytest.raises(DecodeError):
            r3wire.loads(text)
        return
    if b"r3wire" in text:  # a mutation could in principle spell a schema: then only the error class is promised
        with contextlib.suppress(DecodeError):
            r3wire.loads(text)
        return
    assert r3wire.loads(text) == expected


@given(PLAIN_DOCUMENTS, st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=3)), max_size=4))
def test_mutated_documents_agree_with_orjson(doc: Any, edits: list[tuple[int, bytes]]) -> None:
    text = bytearray(orjson.dumps({"data": doc, "k": [doc]}))
    for where, noise in edits:
        at = where % len(text)
        text[at : at + len(noise)] = noise
    _agrees_with_orjson(bytes(text))


@given(st.lists(st.sampled_from([b'"data":"', b'"', b"\\", b"QUJD" * 1100, b"{", b"}", b",", b"[", b"]", b":"])))
def test_token_soup_agrees_with_orjson(tokens: list[bytes]) -> None:
    _agrees_with_orjson(b"".join(tokens))


@given(DOCUMENTS, st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=3)), max_size=3))
def test_mutated_responses_raise_only_decode_error(doc: Any, edits: list[tuple[int, bytes]]) -> None:
    text = bytearray(r3wire.dumps({"choices": [{"routed_experts": np.ones((300, 2, 8), np.int32)}], "x": doc}))
    for where, noise in edits:
        at = where % len(text)
        text[at : at + len(noise)] = noise
    with contextlib.suppress(DecodeError):
        r3wire.loads(bytes(text))
