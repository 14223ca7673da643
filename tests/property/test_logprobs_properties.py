"""Property tests for logprobs: clamping is exact for every bit pattern; the wire never carries a non-finite value
and never turns into ``null``; every decoder and reader raises only DecodeError on malformed input."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_LEAVES, JSON_VALUES, NUMPY_SCALARS, corrupted, decoded_or_none
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import (
    DecodeError,
    EncodeError,
    build_logprobs_content,
    clamp_logprobs,
    decode_logprobs,
    encode_logprobs,
    logprobs,
    read_logprobs_content,
)
from r3wire.formats import read_response

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
    """Floors exactly representable in ``dtype``: the usual one, or any finite value of the dtype at most 0 (a
    log-probability)."""
    finite = hnp.from_dtype(dtype.newbyteorder("="), allow_nan=False, allow_infinity=False)
    return st.one_of(st.just(-4096.0), finite.map(lambda x: -abs(float(x))))


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


# --- one rule for a logprob value, in every form ----------------------------------------------------------------

# Every kind of value a logprob may be found as: what a JSON parser gives (floats of every bit pattern, integers
# small and past float64's range, bools, strings, null, objects and arrays) and what an in-process document may
# hold (NumPy scalars of every dtype, np.bool_, np.timedelta64 with explicit units).
LOGPROB_VALUES = st.one_of(
    st.none(),
    st.floats(),
    st.integers(0, 2**64 - 1).map(lambda bits: float(np.array(bits, dtype=np.uint64).view(np.float64))),
    st.floats(width=32).map(np.float32),
    st.floats(width=16).map(np.float16),
    st.floats().map(np.float64),
    st.integers(-(2**60), 2**60),
    st.integers(-(2**1100), 2**1100),
    st.sampled_from([0, -1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, 2**64, 2**1024, -(10**400)]),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.booleans(),
    st.booleans().map(np.bool_),
    st.builds(np.timedelta64, st.integers(-(2**40), 2**40), st.sampled_from(["ns", "s", "D"])),
    st.sampled_from([np.timedelta64("NaT", "ns"), np.timedelta64("NaT", "s")]),
    NUMPY_SCALARS,
    JSON_VALUES,
)
ROUTES = [[[1, 2]]]


def _outcome(read: Callable[[], Any]) -> tuple[Any, ...]:
    """What a reader made of the values: the float64 bytes and the count clamped, or the refusal's field, expected
    and got. Any exception but DecodeError propagates, failing the property."""
    refused: DecodeError | None = None
    try:
        result = read()
    except DecodeError as exc:
        refused = exc
    if refused is not None:
        assert str(refused) == f"{refused.field} must be {refused.expected}, got {refused.got}"
        return refused.field, refused.expected, refused.got
    if isinstance(result, list):  # read_response: one result, for the one routes field
        (found,) = result
        assert found.logprobs is not None
        return found.logprobs.tobytes(), found.num_clamped
    return result.values.tobytes(), result.num_clamped


@given(st.lists(LOGPROB_VALUES, min_size=1, max_size=5))
def test_every_logprob_form_reads_a_value_by_one_rule(values: list[Any]) -> None:
    # read_logprobs_content and read_response's list, token_logprobs and SGLang forms agree on every value: the
    # same float64 bit for bit, or the same refusal at the value's own path.
    outcomes = {
        "content[{}].logprob": _outcome(lambda: read_logprobs_content({"content": [{"logprob": x} for x in values]})),
        "$.choices[0].logprobs[{}]": _outcome(
            lambda: read_response({"choices": [{"routed_experts": ROUTES, "logprobs": values}]})
        ),
        "$.choices[0].logprobs.token_logprobs[{}]": _outcome(
            lambda: read_response({"choices": [{"routed_experts": ROUTES, "logprobs": {"token_logprobs": values}}]})
        ),
        "$.meta_info.output_token_logprobs[{}][0]": _outcome(
            lambda: read_response(
                {"meta_info": {"routed_experts": ROUTES, "output_token_logprobs": [[x, 7, "a"] for x in values]}}
            )
        ),
        "$.output_token_logprobs[{}][0]": _outcome(
            lambda: read_response({"routed_experts": ROUTES, "output_token_logprobs": tuple((x,) for x in values)})
        ),
    }
    first = next(iter(outcomes.values()))
    if len(first) == 2:
        assert all(outcome == first for outcome in outcomes.values()), outcomes
        got = np.frombuffer(first[0], dtype=np.float64)
        missing = [x is None or (isinstance(x, (float, np.floating)) and not np.isfinite(x)) for x in values]
        assert first[1] == sum(missing)
        for x, value, gone in zip(values, got.tolist(), missing, strict=True):
            assert not isinstance(x, (bool, np.bool_, np.timedelta64, str, dict, list))
            assert value == -9999.0 if gone else value == x  # exact: Python compares a float and an int exactly
        # clamp_logprobs takes a sequence by the same rule, and gives the same values.
        assert clamp_logprobs(values).values.tobytes() == first[0]
        return
    index = int(str(first[0]).split("[")[1].split("]")[0])
    for path, outcome in outcomes.items():
        assert outcome == (path.format(index), first[1], first[2]), outcomes
    # clamp_logprobs refuses the same sequences (it looks at every value's type before any integer's exactness, so
    # the value it names may be another one).
    with pytest.raises(EncodeError, match=r"^values\[\d+\] must be "):
        clamp_logprobs(values)


CONTENT_LOGPROBS = st.one_of(
    st.floats(width=64),
    st.none(),
    st.just("absent"),
    st.integers(-(2**60), 2**60),
    st.booleans(),
    st.text(max_size=3),
    NUMPY_SCALARS,
)


@st.composite
def content_lists(draw: st.DrawFn) -> Any:
    """A logprobs ``content`` list: mostly what a parsed body holds (dicts with a float or ``null`` logprob), with at
    times an entry or a logprob of another kind."""
    entries: list[Any] = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["plain", "plain", "plain", "odd", "null", "other"]))
        if kind == "null":
            entries.append(None)
        elif kind == "other":
            entries.append(draw(JSON_LEAVES))
        else:
            value = draw(st.floats(width=64)) if kind == "plain" else draw(CONTENT_LOGPROBS)
            entry: dict[str, Any] = {"token": "t", "bytes": [116]}
            if not (isinstance(value, str) and value == "absent"):
                entry["logprob"] = value
            entries.append(entry)
    return tuple(entries) if draw(st.integers(0, 9)) == 0 else entries  # a tuple: never read in C


@given(content_lists())
def test_content_read_in_c_equals_the_entry_loop(content: Any) -> None:
    """The C read of a parsed body's content (every entry a dict, every logprob a float or ``null``) gives exactly
    the values, the count and the error the per-entry loop gives."""

    def outcome() -> Any:
        try:
            result = read_logprobs_content({"content": content})
        except DecodeError as exc:
            return ("error", exc.field, str(exc))
        return (result.values.tobytes(), result.num_clamped)

    fast = outcome()
    with mock.patch.object(logprobs, "_plain_logprobs", return_value=None):
        slow = outcome()
    assert fast == slow
