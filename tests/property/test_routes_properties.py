"""Property tests: round trips over shapes, dtypes, byte orders and strides; the decoder's fuzzing promise.

The promise, in one sentence: any input to a decoder is either accepted or raises DecodeError (or its subclass)
with a message, never another exception, a crash, a hang or an allocation larger than the input implies.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_VALUES, corrupted, decoded_or_none, in_layout
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import decode_array, decode_routes, encode_array, encode_routes

pytestmark = pytest.mark.property

BOUNDARY_IDS = [0, 1, 127, 128, 255, 256, 32767, 32768, 2**31 - 2, 2**31 - 1]
SOURCE_DTYPES = ["u1", "i1", "<u2", ">u2", "<i2", ">i2", "<i4", ">i4", "<u4", "<i8", ">i8", "<u8", ">u8"]


@st.composite
def route_arrays(draw: st.DrawFn) -> np.ndarray[Any, Any]:
    shape = draw(st.tuples(st.integers(0, 6), st.integers(1, 6), st.integers(1, 6)))  # layers, top_k >= 1
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(SOURCE_DTYPES)))
    high = min(int(np.iinfo(dtype.type).max), 2**31 - 1)
    ids = st.one_of(st.sampled_from([b for b in BOUNDARY_IDS if b <= high]), st.integers(0, high))
    array: np.ndarray[Any, Any] = draw(hnp.arrays(dtype, shape, elements=ids))
    return in_layout(draw, array, ("plain", "fortran", "reversed", "transposed", "readonly"))


@given(route_arrays())
def test_round_trip_data_ladder(routes: np.ndarray[Any, Any]) -> None:
    envelope = encode_routes(routes)
    back = decode_routes(orjson.dumps(envelope))
    assert back.shape == routes.shape
    assert np.array_equal(back, routes)
    assert back.flags.c_contiguous
    assert back.flags.writeable
    high = int(routes.max()) if routes.size else 0
    assert envelope["dtype"] == ("uint8" if high < 256 else "int16" if high < 32768 else "int32")
    assert len(base64.b64decode(envelope["data"])) == routes.size * back.dtype.itemsize


@given(route_arrays(), st.integers(1, 2**31))
def test_round_trip_num_experts(routes: np.ndarray[Any, Any], extra: int) -> None:
    high = int(routes.max()) if routes.size else 0
    num_experts = min(2**31, high + extra)
    envelope = encode_routes(routes, num_experts=num_experts)
    back = decode_routes(orjson.dumps(envelope), num_experts=num_experts)
    assert np.array_equal(back, routes)
    assert envelope["num_experts"] == num_experts


@given(
    hnp.arrays(
        st.sampled_from(["?", "u1", "i1", "<u2", ">i2", "<u4", ">i4", "<u8", ">i8", "<f2", ">f4", "<f8", ">f8"]).map(
            np.dtype
        ),
        hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
    )
)
def test_array_round_trip_is_bit_exact(array: np.ndarray[Any, Any]) -> None:
    back = decode_array(orjson.dumps(encode_array(array)))
    assert back.shape == array.shape
    assert back.tobytes() == array.astype(back.dtype).tobytes()


FIELD_VALUES = st.one_of(
    JSON_VALUES,
    st.sampled_from(["uint8", "int16", "int32", "r3wire.routes", "", "AAAA", "AA==", "/w==", "AAE="]),
    st.lists(st.integers(-3, 2**64), min_size=0, max_size=5),
    st.integers(-2, 2**33),
)
KEYS = ["data", "shape", "dtype", "schema", "version", "num_experts", "start", "bits"]


def _valid_routes() -> dict[str, Any]:
    return encode_routes(np.array([[[1, 0], [7, 3]], [[2, 5], [0, 6]]], dtype=np.int32), num_experts=8)


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> Any:
    envelope: dict[Any, Any] = dict(_valid_routes())
    if draw(st.booleans()):
        envelope = {k: envelope[k] for k in ("data", "shape", "dtype")}
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["set", "drop", "add"]))
        key = draw(st.sampled_from(KEYS))
        if action == "drop":
            envelope.pop(key, None)
        else:
            envelope[key] = draw(FIELD_VALUES)
    if draw(st.booleans()):
        return json.dumps(envelope).encode()  # stdlib: it also writes integers beyond 64 bits
    return envelope


def _decoders_only_raise_decode_error(payload: Any) -> None:
    for decode in (decode_routes, decode_array):
        result = decoded_or_none(lambda: decode(payload))  # noqa: B023  # called before the loop moves on
        assert result is None or isinstance(result, np.ndarray)


@given(mutated_envelopes())
def test_mutated_envelopes_raise_only_decode_error(payload: Any) -> None:
    _decoders_only_raise_decode_error(payload)


@given(st.one_of(JSON_VALUES, st.binary(max_size=64), st.text(max_size=64)))
def test_arbitrary_values_raise_only_decode_error(payload: Any) -> None:
    _decoders_only_raise_decode_error(payload)


@given(st.binary(max_size=80), st.integers(0, 79))
def test_corrupted_json_text_raises_only_decode_error(noise: bytes, where: int) -> None:
    _decoders_only_raise_decode_error(corrupted(orjson.dumps(_valid_routes()), noise, where))


@given(st.lists(st.integers(0, 2**62), min_size=3, max_size=3), st.sampled_from(["uint8", "int16", "int32"]))
def test_claimed_shape_never_allocates_beyond_the_text(shape: list[int], dtype: str) -> None:
    payload = {"data": "AAAAAAAA", "shape": shape, "dtype": dtype, "schema": "r3wire.routes", "version": 1}
    _decoders_only_raise_decode_error(payload)
