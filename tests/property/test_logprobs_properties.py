"""Property tests for logprobs: clamping is exact for every bit pattern; the wire never carries a non-finite value
and never turns into ``null``; every decoder and reader raises only DecodeError on malformed input."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_LEAVES, JSON_VALUES, corrupted, decoded_or_none
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import (
    EncodeError,
    build_logprobs_content,
    clamp_logprobs,
    decode_logprobs,
    encode_logprobs,
    read_logprobs_content,
)

pytestmark = pytest.mark.property

FLOAT_DTYPES = ["<f2", ">f2", "<f4", ">f4", "<f8", ">f8"]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6)


@st.composite
def float_arrays(draw: st.DrawFn, dtypes: list[str] = FLOAT_DTYPES) -> np.ndarray[Any, Any]:
    """Float arrays of every kind: drawn as floats (hypothesis's nasty values), or as raw bits, which reach every
    NaN payload and sign and every subnormal."""
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(SHAPES)
    if draw(st.booleans()):
        array: np.ndarray[Any, Any] = draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(dtype)))
    else:
        bits = draw(hnp.arrays(np.dtype(f"u{dtype.itemsize}"), shape))
        array = bits.view(dtype.newbyteorder("=")).astype(dtype)
    if array.ndim and draw(st.booleans()):
        array = array[::-1]
    return array


def floors(dtype: np.dtype[Any]) -> st.SearchStrategy[float]:
    """Floors exactly representable in ``dtype``: the usual one, or any finite value of the dtype."""
    finite = hnp.from_dtype(dtype.newbyteorder("="), allow_nan=False, allow_infinity=False)
    return st.one_of(st.just(-4096.0), finite.map(float))


@given(st.data())
def test_clamp_is_exact_for_every_bit_pattern(data: st.DataObject) -> None:
    source = data.draw(float_arrays())
    floor = data.draw(floors(source.dtype))
    before = source.tobytes()
    result = clamp_logprobs(source, floor=floor)
    assert source.tobytes() == before  # never mutated
    assert result.values.dtype == source.dtype
    assert result.values.shape == source.shape
    finite = np.isfinite(source)
    assert result.num_clamped == int(np.count_nonzero(~finite))
    # equal to the input where finite, bit for bit (so -0.0 and subnormals too)
    assert result.values[finite].tobytes() == source[finite].tobytes()
    # equal to the floor elsewhere, bit for bit
    expected_floor = np.full(result.num_clamped, floor, dtype=source.dtype)
    assert result.values[~finite].tobytes() == expected_floor.tobytes()
    assert np.isfinite(result.values).all()


@given(st.lists(st.one_of(st.none(), st.floats(), st.integers(-(2**53), 2**53)), max_size=40))
def test_clamp_sequences(values: list[float | int | None]) -> None:
    result = clamp_logprobs(values)
    bad = [v is None or not math.isfinite(v) for v in values]
    assert result.num_clamped == sum(bad)
    assert result.values.dtype == np.float64
    expected = [float(v) if v is not None and math.isfinite(v) else -9999.0 for v in values]
    assert result.values.tobytes() == np.array(expected, dtype=np.float64).tobytes()


@given(float_arrays())
def test_clamped_values_never_serialise_to_null(source: np.ndarray[Any, Any]) -> None:
    floor = -10000.0 if source.dtype.itemsize == 2 else -9999.0
    result = clamp_logprobs(source, floor=floor)
    text = orjson.dumps(result.values.tolist())
    assert b"null" not in text
    # and the text gives the values back exactly
    back = np.array(orjson.loads(text), dtype=source.dtype)
    assert back.tobytes() == np.ascontiguousarray(result.values).tobytes()
    if result.values.ndim == 1:
        content = orjson.dumps(build_logprobs_content(result))
        assert b"null" not in content
        assert read_logprobs_content(content).values.astype(source.dtype).tobytes() == result.values.tobytes()


@given(float_arrays(["<f4", ">f4", "<f8", ">f8"]), st.booleans())
def test_envelope_round_trip(source: np.ndarray[Any, Any], clamp: bool) -> None:
    finite = bool(np.isfinite(source).all())
    if not finite and not clamp:
        with pytest.raises(EncodeError, match="finite logprob"):
            encode_logprobs(source)
        return
    envelope = encode_logprobs(source, clamp=clamp)
    back = decode_logprobs(orjson.dumps(envelope))
    assert back.shape == source.shape
    expected = clamp_logprobs(source).values
    assert back.tobytes() == expected.astype(back.dtype).tobytes()


@given(float_arrays(), st.booleans())
def test_encode_and_clamp_share_one_default_floor(source: np.ndarray[Any, Any], clamp: bool) -> None:
    # Every float dtype: encode_logprobs writes what clamp_logprobs gives with its default floor, or refuses the
    # dtype (float16 is not a wire dtype); a floor is never the reason.
    if source.dtype.itemsize == 2:
        with pytest.raises(EncodeError) as info:
            encode_logprobs(source, clamp=clamp)
        assert info.value.field == "logprobs.dtype"
        return
    if clamp or bool(np.isfinite(source).all()):
        back = decode_logprobs(encode_logprobs(source, clamp=clamp))
        expected = clamp_logprobs(source).values
        assert back.tobytes() == expected.astype(back.dtype).tobytes()


# --- the fuzzing promise ----------------------------------------------------------------------------------

FIELD_VALUES = st.one_of(
    JSON_VALUES,
    st.sampled_from(["float32", "float64", "float16", "int32", "r3wire.logprobs", "r3wire.array", "", "AAAA"]),
    st.sampled_from(["AACAvwAAwH8=", "AACAvwAAgH8=", "AAAAAAAA8H8=", "AAAAAAAA+H8=", "AACAvw==", "AAAAAAAA8L8="]),
    st.lists(st.integers(-3, 2**64), min_size=0, max_size=4),
    st.integers(-2, 2**33),
)
KEYS = ["data", "shape", "dtype", "schema", "version", "floor", "content"]


def _valid() -> dict[str, Any]:
    return encode_logprobs(np.array([-1.0, -0.5, -9999.0, -0.0], dtype=np.float32))


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> Any:
    envelope: dict[Any, Any] = dict(_valid())
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["set", "drop", "add"]))
        key = draw(st.sampled_from(KEYS))
        if action == "drop":
            envelope.pop(key, None)
        else:
            envelope[key] = draw(FIELD_VALUES)
    if draw(st.booleans()):
        return json.dumps(envelope).encode()  # stdlib: it writes integers beyond 64 bits, and NaN
    return envelope


@st.composite
def mutated_contents(draw: st.DrawFn) -> Any:
    entries = draw(
        st.lists(
            st.one_of(
                st.none(),
                st.fixed_dictionaries({"logprob": st.one_of(st.none(), st.floats(), JSON_LEAVES)}),
                st.dictionaries(st.sampled_from(["logprob", "token", "bytes"]), JSON_VALUES, max_size=3),
                JSON_VALUES,
            ),
            max_size=8,
        )
    )
    obj: Any = draw(st.sampled_from([{"content": entries}, {"content": entries, "refusal": None}, entries]))
    if draw(st.booleans()):
        return json.dumps(obj).encode()  # may hold NaN/Infinity, which orjson refuses
    return obj


def _only_decode_error(payload: Any) -> None:
    for read in (decode_logprobs, read_logprobs_content):
        result = decoded_or_none(lambda: read(payload))  # noqa: B023  # called before the loop moves on
        if result is not None:
            values = result if isinstance(result, np.ndarray) else result.values
            assert np.isfinite(values).all()


@given(mutated_envelopes())
def test_mutated_envelopes_raise_only_decode_error(payload: Any) -> None:
    _only_decode_error(payload)


@given(mutated_contents())
def test_mutated_contents_raise_only_decode_error(payload: Any) -> None:
    _only_decode_error(payload)


@given(st.one_of(JSON_VALUES, st.binary(max_size=64), st.text(max_size=64)))
def test_arbitrary_values_raise_only_decode_error(payload: Any) -> None:
    _only_decode_error(payload)


@given(st.binary(max_size=40), st.integers(0, 110))
def test_corrupted_json_text_raises_only_decode_error(noise: bytes, where: int) -> None:
    _only_decode_error(corrupted(orjson.dumps(_valid()), noise, where))


@given(st.lists(st.integers(0, 2**62), min_size=0, max_size=3), st.sampled_from(["float32", "float64"]))
def test_claimed_shape_never_allocates_beyond_the_text(shape: list[int], dtype: str) -> None:
    payload = {"data": "AAAAAAAA", "shape": shape, "dtype": dtype, "schema": "r3wire.logprobs", "version": 1}
    _only_decode_error(payload)
