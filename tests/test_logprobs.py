"""Sampled logprobs: clamp_logprobs and its request-scoped warning, the r3wire.logprobs envelope, the seed's
``{"content": [{"logprob": x}, ...]}`` shape."""

from __future__ import annotations

import base64
import logging
import struct
from typing import Any

import numpy as np
import orjson
import pytest

from r3wire import (
    LOGPROB_FLOOR,
    LOGPROBS_SCHEMA,
    ClampResult,
    DecodeError,
    EncodeError,
    R3WireError,
    build_logprobs_content,
    clamp_logprobs,
    decode_array,
    decode_logprobs,
    encode_array,
    encode_logprobs,
    read_logprobs_content,
)

FLOAT_DTYPES = ["<f2", "<f4", "<f8", ">f4", ">f8"]


def _bits(array: np.ndarray[Any, Any]) -> bytes:
    return np.ascontiguousarray(array).tobytes()


def _f32_from_bits(*words: int) -> np.ndarray[Any, Any]:
    array: np.ndarray[Any, Any] = np.frombuffer(struct.pack(f"<{len(words)}I", *words), dtype="<f4").copy()
    return array


# --- finite values come back bit for bit ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_finite_values_are_bit_exact(dtype: str) -> None:
    info = np.finfo(np.dtype(dtype))
    source = np.array([-0.0, 0.0, -1.5, float(info.min), -float(info.smallest_subnormal), -2.5e-3], dtype=dtype)
    result = clamp_logprobs(source, floor=-4096.0)
    assert result.num_clamped == 0
    assert result.values.dtype == np.dtype(dtype)
    assert _bits(result.values) == _bits(source)
    assert np.signbit(result.values[0])  # -0.0 stays negative zero


def test_very_negative_finite_values_are_not_floored() -> None:
    # A finite value below the floor is a real (if unlikely) logprob: only non-finite values are replaced.
    source = np.array([-1e300, -20000.0, -9999.5], dtype=np.float64)
    result = clamp_logprobs(source)
    assert result.num_clamped == 0
    assert result.values.tolist() == [-1e300, -20000.0, -9999.5]


def test_float32_subnormal_bits_survive() -> None:
    source = _f32_from_bits(0x80000001, 0x00000001, 0x807FFFFF)
    result = clamp_logprobs(source)
    assert result.values.view("<u4").tolist() == [0x80000001, 0x00000001, 0x807FFFFF]


# --- non-finite values become the floor -------------------------------------------------------------------


def test_nan_with_payload_and_negative_nan_are_clamped() -> None:
    # quiet NaN with payload 1, negative quiet NaN, signalling NaN with payload, +inf, -inf, then a finite value
    source = _f32_from_bits(0x7FC00001, 0xFFC00000, 0x7F800001, 0x7F800000, 0xFF800000, 0xBF800000)
    result = clamp_logprobs(source)
    assert result.num_clamped == 5
    assert result.values.tolist() == [-9999.0] * 5 + [-1.0]
    assert result.values.dtype == np.float32


def test_float64_nan_payloads() -> None:
    words = [0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFFFFFFFFFFFFFFF, 0x3FF0000000000000]
    source = np.frombuffer(struct.pack("<5Q", *words), dtype="<f8")
    result = clamp_logprobs(source)
    assert result.num_clamped == 4
    assert result.values.tolist() == [-9999.0] * 4 + [1.0]


def test_float16_nan_payload_and_inf() -> None:
    source = np.frombuffer(struct.pack("<5H", 0x7E01, 0xFE00, 0x7C01, 0xFC00, 0xBC00), dtype="<f2")
    result = clamp_logprobs(source, floor=-10000.0)
    assert result.num_clamped == 4
    assert result.values.dtype == np.float16
    assert result.values.view("<u2").tolist() == [0xF0E2] * 4 + [0xBC00]  # 0xF0E2 is float16 -10000.0


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [(np.float16, -10000.0), (np.float32, -9999.0), (np.float64, -9999.0), (">f2", -10000.0), (">f4", -9999.0)],
)
def test_default_floor_is_the_dtypes_value_nearest_minus_9999(dtype: Any, expected: float) -> None:
    # float16 holds -10000.0 but not -9999.0 (its neighbours there are 8 apart): the default floor is the dtype's
    # nearest value, so clamping works for every float dtype without passing a floor.
    source = np.array([np.nan, -np.inf, np.inf, -0.5], dtype=dtype)
    result = clamp_logprobs(source)
    assert result.num_clamped == 3
    assert result.values.dtype == np.dtype(dtype)
    assert result.values.tolist() == [expected] * 3 + [-0.5]
    assert result.values[:3].tobytes() == np.full(3, expected, dtype=dtype).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ">f4", "<f8"])
def test_encode_logprobs_clamps_to_the_same_default_floor_as_clamp_logprobs(
    dtype: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # One default for both entry points: encode_logprobs(clamp=True) writes exactly what clamp_logprobs gives.
    source = np.array([np.nan, -np.inf, -0.5, np.inf], dtype=dtype)
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        envelope = encode_logprobs(source, clamp=True)
    expected = clamp_logprobs(source).values
    assert decode_logprobs(envelope).tobytes() == expected.astype(expected.dtype.newbyteorder("=")).tobytes()
    assert decode_logprobs(envelope).tolist() == [-9999.0, -9999.0, -0.5, -9999.0]
    assert len(caplog.records) == 1


def test_encode_logprobs_refuses_float16_by_dtype_not_by_floor() -> None:
    # float16 is not a wire dtype; the refusal names the dtype (with the exact conversion), whatever the floor.
    for floor in (None, -10000.0):
        with pytest.raises(EncodeError, match=r"logprobs\.dtype must be float32 or float64") as info:
            encode_logprobs(np.array([np.nan], dtype=np.float16), clamp=True, floor=floor)
        assert info.value.field == "logprobs.dtype"
    widened = np.array([np.nan], dtype=np.float16).astype(np.float32)
    assert decode_logprobs(encode_logprobs(widened, clamp=True)).tolist() == [-9999.0]


def test_explicit_floor_that_would_round_is_still_refused() -> None:
    # Only the default adapts to the dtype; a floor the caller spelled out is written exactly or refused.
    assert float(np.float16(-9999.0)) == -10000.0
    with pytest.raises(R3WireError, match=r"floor must be a value exactly representable in float16") as info:
        clamp_logprobs(np.zeros(3, dtype=np.float16), floor=-9999.0)  # refused even though nothing needs clamping
    assert info.value.field == "floor"


@pytest.mark.parametrize("floor", [-0.1, -1e-46])
def test_floor_that_rounds_in_float32_is_refused(floor: float) -> None:
    with pytest.raises(R3WireError, match="exactly representable in float32"):
        clamp_logprobs(np.zeros(2, dtype=np.float32), floor=floor)
    assert clamp_logprobs(np.zeros(2), floor=floor).num_clamped == 0  # fine in float64


@pytest.mark.parametrize("floor", [4.0, 1e-300, 1e300, np.float32(0.5)])
def test_a_floor_above_zero_is_refused(floor: Any) -> None:
    # A log-probability is at most 0: a missing one floored to 4.0 reads as a probability of e**4 (review 10a).
    with pytest.raises(R3WireError, match=r"^floor must be a finite float <= 0"):
        clamp_logprobs([-0.5, float("-inf")], floor=floor)
    with pytest.raises(R3WireError, match=r"^floor must be a finite float <= 0"):
        encode_logprobs([-0.5], floor=floor)
    assert clamp_logprobs([-0.5, float("-inf")], floor=0.0).values.tolist() == [-0.5, 0.0]


def test_floor_out_of_float16_range_is_refused() -> None:
    with pytest.raises(R3WireError, match="stored as -inf"):
        clamp_logprobs(np.zeros(2, dtype=np.float16), floor=-1e6)


@pytest.mark.parametrize("floor", [float("nan"), float("-inf"), float("inf"), np.float32("nan")])
def test_non_finite_floor_is_refused(floor: float) -> None:
    with pytest.raises(R3WireError) as info:
        clamp_logprobs([1.0], floor=floor)
    assert info.value.field == "floor"
    assert not isinstance(info.value, EncodeError)


@pytest.mark.parametrize("floor", [True, "-9999", 10**400, [1.0]])  # None is the default floor
def test_floor_of_wrong_type_is_refused(floor: Any) -> None:
    with pytest.raises(R3WireError, match="floor must be a finite float"):
        clamp_logprobs([1.0], floor=floor)


def test_custom_floor() -> None:
    result = clamp_logprobs([float("nan"), -3.0, None, float("-inf")], floor=-100.0)
    assert result.num_clamped == 3
    assert result.values.tolist() == [-100.0, -3.0, -100.0, -100.0]
    assert clamp_logprobs([None], floor=-50).values.tolist() == [-50.0]  # an integer floor is a float


def test_clamped_positions_are_exactly_the_non_finite_ones() -> None:
    rng = np.random.default_rng(3)
    source = rng.normal(-3, 2, size=(7, 11)).astype(np.float32)
    bad = rng.random(source.shape) < 0.2
    source[bad] = rng.choice(np.array([np.nan, np.inf, -np.inf], dtype=np.float32), size=int(bad.sum()))
    result = clamp_logprobs(source)
    assert result.num_clamped == int(bad.sum())
    assert result.values.shape == (7, 11)
    assert np.array_equal(result.values[bad], np.full(int(bad.sum()), -9999.0, dtype=np.float32))
    assert _bits(result.values[~bad]) == _bits(source[~bad])


# --- shapes, dtypes and the input's integrity -------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_output_dtype_is_the_input_dtype(dtype: str) -> None:
    source = np.array([[np.nan, -1.0], [-2.0, np.inf]], dtype=dtype)
    result = clamp_logprobs(source, floor=-4096.0)
    assert result.values.dtype == np.dtype(dtype)
    assert result.values.tolist() == [[-4096.0, -1.0], [-2.0, -4096.0]]


def test_input_array_is_never_mutated_and_never_aliased() -> None:
    source = np.array([np.nan, -1.0, np.inf], dtype=np.float32)
    before = _bits(source)
    result = clamp_logprobs(source)
    assert _bits(source) == before
    assert not np.shares_memory(result.values, source)
    clean = np.array([-1.0, -2.0])
    out = clamp_logprobs(clean).values
    assert not np.shares_memory(out, clean)  # a copy even when nothing was clamped
    out[0] = 5.0
    assert clean[0] == -1.0


def test_read_only_and_strided_input() -> None:
    base = np.array([np.nan, -1.0, -2.0, np.inf, -3.0, -4.0], dtype=np.float64)
    view = base[::-2]
    view.flags.writeable = False
    result = clamp_logprobs(view)
    assert result.values.tolist() == [-4.0, -9999.0, -1.0]
    assert result.values.flags.writeable
    assert result.values.flags.c_contiguous
    assert result.num_clamped == 1


def test_input_list_is_never_mutated() -> None:
    source: list[float | None] = [None, float("nan"), -1.0]
    result = clamp_logprobs(source)
    assert source[0] is None
    assert source[2] == -1.0
    assert result.values.tolist() == [-9999.0, -9999.0, -1.0]


@pytest.mark.parametrize("dtype", [None, "<f2", "<f4", "<f8"])
def test_empty_input(dtype: str | None) -> None:
    source: Any = [] if dtype is None else np.empty((0, 4), dtype=dtype)
    result = clamp_logprobs(source, floor=-8.0)
    assert result.num_clamped == 0
    assert result.values.size == 0
    assert result.values.dtype == np.dtype(dtype or "<f8")


def test_zero_dimensional_array() -> None:
    result = clamp_logprobs(np.array(np.nan, dtype=np.float32))
    assert result.values.shape == ()
    assert result.values.tolist() == -9999.0
    assert result.num_clamped == 1


@pytest.mark.parametrize("source", [[None] * 5, [float("nan"), float("inf"), float("-inf"), None]])
def test_all_bad_input(source: list[float | None]) -> None:
    result = clamp_logprobs(source)
    assert result.num_clamped == len(source)
    assert result.values.tolist() == [-9999.0] * len(source)


def test_all_bad_array() -> None:
    result = clamp_logprobs(np.full((3, 2), np.nan, dtype=np.float32))
    assert result.num_clamped == 6
    assert np.all(result.values == -9999.0)


# --- Python sequences -------------------------------------------------------------------------------------


def test_sequence_gives_float64_and_keeps_float_bits() -> None:
    nan_with_payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]
    values = (-0.0, 5e-324, -1e308, nan_with_payload, np.float32(-0.1), np.float16(-2.5), np.float64(-7.25))
    result = clamp_logprobs(values)
    assert result.values.dtype == np.float64
    assert result.num_clamped == 1
    expected = [-0.0, 5e-324, -1e308, -9999.0, float(np.float32(-0.1)), -2.5, -7.25]
    assert _bits(result.values) == struct.pack("<7d", *expected)


def test_sequence_ints_are_floats_when_exact() -> None:
    result = clamp_logprobs([0, -3, np.int32(-7), -(2**53)])
    assert result.values.tolist() == [0.0, -3.0, -7.0, -(2.0**53)]
    assert result.num_clamped == 0


@pytest.mark.parametrize("big", [2**53 + 1, -(2**63) - 1, 10**400])
def test_sequence_int_that_would_round_is_refused(big: int) -> None:
    with pytest.raises(EncodeError, match=r"values\[1\] must be an integer exactly representable as a float64"):
        clamp_logprobs([-1.0, big])


def test_the_first_inexact_int_among_floats_and_exact_ints_is_named() -> None:
    # Exact ints (a JSON 0, a NumPy int, an int subclass) pass; the first one float64 would round is named.
    class Count(int):
        pass

    values: list[object] = [-0.5] * 1000
    values[10], values[20], values[30] = 0, np.int64(-3), Count(-4)
    values[700], values[900] = np.uint64(2**64 - 1), 2**53 + 1
    with pytest.raises(EncodeError) as caught:
        clamp_logprobs(values)
    assert caught.value.field == "values[700]"
    del values[700]
    with pytest.raises(EncodeError) as caught:
        clamp_logprobs(values)
    assert caught.value.field == "values[899]"
    del values[899]
    result = clamp_logprobs(values)
    assert result.values[[10, 20, 30]].tolist() == [0.0, -3.0, -4.0]


@pytest.mark.parametrize(
    ("source", "field"),
    [
        ([-1.0, True], "values[1]"),
        ([np.bool_(False)], "values[0]"),
        ([-1.0, None, "-2.0"], "values[2]"),
        ([[-1.0, -2.0]], "values[0]"),
        ([-1.0, b"x"], "values[1]"),
        ([1 + 2j], "values[0]"),
        ([np.longdouble(-1)], "values[0]"),
        ([-1.0, {"logprob": -1.0}], "values[1]"),
    ],
)
def test_sequence_of_non_floats_is_refused(source: list[Any], field: str) -> None:
    with pytest.raises(EncodeError) as info:
        clamp_logprobs(source)
    assert info.value.field == field
    assert "a float or None" in str(info.value)


@pytest.mark.parametrize(
    ("source", "field"),
    [
        (np.array([1, 2], dtype=np.int64), "values.dtype"),
        (np.array([True]), "values.dtype"),
        (np.array(["-1.0"]), "values.dtype"),
        (np.array([1 + 1j]), "values.dtype"),
        (np.array([-1.0, "x"], dtype=object), "values[1]"),
        ("-1.0", "values"),
        (b"\x00\x00", "values"),
        (-1.0, "values"),
        (None, "values"),
        ({-1.0}, "values"),
    ],
)
def test_non_float_input_is_refused(source: Any, field: str) -> None:
    with pytest.raises(EncodeError) as info:
        clamp_logprobs(source)
    assert info.value.field == field


def test_object_array_of_floats_and_none() -> None:
    source = np.array([[-1.0, None], [np.nan, -2]], dtype=object)
    result = clamp_logprobs(source)
    assert result.values.dtype == np.float64
    assert result.values.tolist() == [[-1.0, -9999.0], [-9999.0, -2.0]]
    assert result.num_clamped == 2


def test_result_is_a_named_tuple() -> None:
    values, count = clamp_logprobs([None, -1.0])
    assert isinstance(clamp_logprobs([]), ClampResult)
    assert count == 1
    assert values.tolist() == [-9999.0, -1.0]


def test_clamped_values_never_serialise_to_null() -> None:
    result = clamp_logprobs([None, float("nan"), float("inf"), -float("inf"), -0.5])
    text = orjson.dumps(result.values.tolist())
    assert b"null" not in text
    assert orjson.loads(text) == [-9999.0, -9999.0, -9999.0, -9999.0, -0.5]
    assert b"null" in orjson.dumps([float("nan")])  # the failure this guards against


# --- the request-scoped warning ---------------------------------------------------------------------------


def test_warning_names_request_count_and_total(caplog: pytest.LogCaptureFixture) -> None:
    source = np.zeros(4096, dtype=np.float32)
    source[[5, 900]] = [np.nan, -np.inf]
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        result = clamp_logprobs(source, request_id="req-42")
    assert result.num_clamped == 2
    records = [r for r in caplog.records if r.name.startswith("r3wire")]
    assert len(records) == 1
    record = records[0]
    assert record.levelno == logging.WARNING
    assert logging.getLogger(record.name).parent is logging.getLogger("r3wire")
    message = record.getMessage()
    assert "clamped 2/4096" in message
    assert "'req-42'" in message
    assert "-9999.0" in message
    assert record.__dict__["r3wire_request_id"] == "req-42"
    assert record.__dict__["r3wire_num_clamped"] == 2
    assert record.__dict__["r3wire_total"] == 4096


def test_warning_reaches_a_handler_on_the_r3wire_logger() -> None:
    seen: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Collect(level=logging.WARNING)
    root = logging.getLogger("r3wire")
    root.addHandler(handler)
    try:
        clamp_logprobs([None, -1.0], request_id="abc")
    finally:
        root.removeHandler(handler)
    assert [r.getMessage() for r in seen] == [
        "clamped 1/2 sampled logprobs (non-finite or missing) to -9999.0 for request 'abc'"
    ]


def test_no_warning_when_nothing_was_clamped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="r3wire"):
        clamp_logprobs([-1.0, -2.0], request_id="req-1")
        clamp_logprobs([], request_id="req-2")
    assert caplog.records == []


def test_no_warning_without_request_id(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.DEBUG, logger="r3wire"):
        result = clamp_logprobs([None, float("nan")])
    assert result.num_clamped == 2  # the count is how the caller is told
    assert caplog.records == []
    assert capsys.readouterr() == ("", "")


def test_hostile_request_id_is_shown_bounded_and_escaped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        clamp_logprobs([None], request_id="evil\nINFO fake line" + "x" * 500)
    (record,) = caplog.records
    message = record.getMessage()
    assert "\n" not in message
    assert len(message) < 200


@pytest.mark.parametrize("request_id", [42, b"req", ["r"]])
def test_request_id_must_be_a_string(request_id: Any) -> None:
    with pytest.raises(R3WireError) as info:
        clamp_logprobs([-1.0], request_id=request_id)
    assert info.value.field == "request_id"


# --- encode_logprobs / decode_logprobs --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f8"])
def test_envelope_round_trip_keeps_dtype_and_bits(dtype: str) -> None:
    rng = np.random.default_rng(7)
    source = (-rng.exponential(2.0, size=(5, 3))).astype(dtype)
    source[0, 0] = -0.0
    envelope = encode_logprobs(source)
    assert envelope["schema"] == LOGPROBS_SCHEMA.name
    assert envelope["version"] == LOGPROBS_SCHEMA.version
    assert envelope["dtype"] == ("float32" if dtype.endswith("4") else "float64")
    back = decode_logprobs(orjson.dumps(envelope))
    assert back.dtype == np.dtype(dtype).newbyteorder("=")
    assert back.tobytes() == source.astype(back.dtype).tobytes()
    assert back.flags.writeable
    assert back.flags.c_contiguous


def test_sequence_is_sent_as_float64() -> None:
    envelope = encode_logprobs([-0.1, -2, np.float32(-0.5)])
    assert envelope["dtype"] == "float64"
    assert decode_logprobs(envelope).tolist() == [-0.1, -2.0, -0.5]


@pytest.mark.parametrize(
    ("source", "field", "got"),
    [
        ([-1.0, None], "logprobs[1]", "None (missing)"),
        ([-1.0, -2.0, float("-inf")], "logprobs[2]", "-inf"),
        (np.array([[-1.0, np.inf]], dtype=np.float32), "logprobs[0, 1]", "inf"),
        (_f32_from_bits(0xBF800000, 0x7FC00001), "logprobs[1]", "nan (bits 0x7fc00001)"),
        (
            np.frombuffer(struct.pack("<Q", 0xFFF8000000000000), dtype="<f8"),
            "logprobs[0]",
            "nan (bits 0xfff8000000000000)",
        ),
    ],
)
def test_encode_refuses_non_finite_without_clamp(source: Any, field: str, got: str) -> None:
    with pytest.raises(EncodeError) as info:
        encode_logprobs(source)
    assert info.value.field == field
    assert info.value.got == got
    assert "clamp=True" in str(info.value)


def test_encode_with_clamp_replaces_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    source = np.array([np.nan, -1.0, -np.inf], dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        envelope = encode_logprobs(source, clamp=True, request_id="r-7")
    assert decode_logprobs(envelope).tolist() == [-9999.0, -1.0, -9999.0]
    assert np.isnan(source[0])  # the caller's array is untouched
    (record,) = caplog.records
    assert "clamped 2/3" in record.getMessage()
    assert "'r-7'" in record.getMessage()


def test_encode_with_clamp_warns_even_without_request_id(caplog: pytest.LogCaptureFixture) -> None:
    # encode_logprobs has no count to return, so a clamp is always reported.
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        encode_logprobs([None, -1.0], clamp=True, floor=-50.0)
    (record,) = caplog.records
    assert record.getMessage() == (
        "clamped 1/2 sampled logprobs (non-finite or missing) to -50.0 for a request without an id"
    )
    assert record.__dict__["r3wire_request_id"] is None


def test_encode_with_clamp_and_nothing_to_clamp_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="r3wire"):
        envelope = encode_logprobs(np.array([-1.0], dtype=np.float32), clamp=True, request_id="r")
    assert caplog.records == []
    assert decode_logprobs(envelope).tolist() == [-1.0]


@pytest.mark.parametrize(
    ("source", "field"),
    [
        (np.zeros(2, dtype=np.float16), "logprobs.dtype"),
        (np.zeros(2, dtype=np.int32), "logprobs.dtype"),
        (np.zeros(2, dtype=np.complex64), "logprobs.dtype"),
        (["x"], "logprobs[0]"),
        ([True], "logprobs[0]"),
        ("abc", "logprobs"),
    ],
)
def test_encode_refuses_non_logprob_input(source: Any, field: str) -> None:
    with pytest.raises(EncodeError) as info:
        encode_logprobs(source)
    assert info.value.field == field


def test_encode_checks_floor_even_without_clamp() -> None:
    with pytest.raises(R3WireError, match="floor"):
        encode_logprobs([-1.0], floor=float("nan"))
    with pytest.raises(R3WireError, match="clamp must be a bool"):
        encode_logprobs([-1.0], clamp=1)  # type: ignore[arg-type]


def test_decode_refuses_non_finite_on_the_wire() -> None:
    # A producer that bypassed the encoder: the generic array envelope relabelled as logprobs.
    envelope = encode_array(np.array([-1.0, np.nan, -2.0], dtype=np.float32))
    envelope["schema"] = LOGPROBS_SCHEMA.name
    with pytest.raises(DecodeError) as info:
        decode_logprobs(envelope)
    assert info.value.field == "data[1]"
    assert info.value.got == "nan (bits 0x7fc00000)"
    assert "finite" in str(info.value)


def test_decode_limits_and_options() -> None:
    envelope = encode_logprobs(np.zeros((4, 2), dtype=np.float32))
    assert decode_logprobs(envelope, ndim=2, max_elements=8).shape == (4, 2)
    with pytest.raises(DecodeError) as info:
        decode_logprobs(envelope, ndim=1)
    assert info.value.field == "shape"
    with pytest.raises(DecodeError, match="max_elements=7"):
        decode_logprobs(envelope, max_elements=7)
    with pytest.raises(R3WireError) as option:
        decode_logprobs(envelope, ndim=-1)
    assert option.value.field == "ndim"
    assert not isinstance(option.value, DecodeError)


def test_logprobs_and_array_schemas_do_not_mix() -> None:
    logprobs = encode_logprobs([-1.0])
    with pytest.raises(DecodeError) as info:
        decode_array(logprobs)
    assert info.value.field == "schema"
    with pytest.raises(DecodeError) as back:
        decode_logprobs(encode_array(np.array([-1.0])))
    assert back.value.field == "schema"


# --- the seed's {"content": [{"logprob": x}, ...]} shape --------------------------------------------------


def test_build_content_from_clamp_result() -> None:
    clamped = clamp_logprobs(np.array([np.nan, -0.1, -2.5], dtype=np.float32))
    content = build_logprobs_content(clamped)
    assert content == {"content": [{"logprob": -9999.0}, {"logprob": float(np.float32(-0.1))}, {"logprob": -2.5}]}
    text = orjson.dumps(content)
    assert b"null" not in text
    # float32 values survive the decimal text exactly
    back = np.array([e["logprob"] for e in orjson.loads(text)["content"]], dtype=np.float32)
    assert back.tobytes() == clamped.values.tobytes()


def test_build_content_refuses_unclamped_values() -> None:
    with pytest.raises(EncodeError) as info:
        build_logprobs_content([-1.0, None])
    assert info.value.field == "logprobs[1]"
    assert info.value.got == "None (missing)"
    with pytest.raises(EncodeError) as nan:
        build_logprobs_content(np.array([np.nan]))
    assert nan.value.field == "logprobs[0]"
    with pytest.raises(EncodeError, match="1-d"):
        build_logprobs_content(np.zeros((2, 2)))


def test_build_content_empty() -> None:
    assert build_logprobs_content([]) == {"content": []}


def test_read_content_clamps_every_kind_of_missing(caplog: pytest.LogCaptureFixture) -> None:
    text = (
        b'{"content": [{"logprob": -1}, null, {}, {"logprob": null}, {"token": "a", "logprob": -0.25, '
        b'"bytes": [97], "top_logprobs": []}, {"top_logprobs": []}], "refusal": null}'
    )
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        result = read_logprobs_content(text, request_id="req-9")
    assert result.values.dtype == np.float64
    assert result.values.tolist() == [-1.0, -9999.0, -9999.0, -9999.0, -0.25, -9999.0]
    assert result.num_clamped == 4
    (record,) = caplog.records
    assert "clamped 4/6" in record.getMessage()


def test_read_content_in_process_non_finite_and_numpy_scalars() -> None:
    content = {"content": [{"logprob": float("nan")}, {"logprob": np.float32(-0.5)}, {"logprob": -np.inf}]}
    result = read_logprobs_content(content, floor=-30.0)
    assert result.num_clamped == 2
    assert result.values.tolist() == [-30.0, -0.5, -30.0]


def test_build_then_read_round_trip() -> None:
    source = [-0.1, None, -3.5, float("nan")]
    clamped = clamp_logprobs(source)
    back = read_logprobs_content(orjson.dumps(build_logprobs_content(clamped)))
    assert back.num_clamped == 0  # the floor is an ordinary finite value once on the wire
    assert back.values.tobytes() == clamped.values.tobytes()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (b"[]", None),
        (b'{"logprobs": []}', "content"),
        (b'{"content": null}', "content"),
        (b'{"content": {"logprob": -1}}', "content"),
        (b'{"content": [-1.0]}', "content[0]"),
        (b'{"content": [{"logprob": -1}, {"logprob": "-1"}]}', "content[1].logprob"),
        (b'{"content": [{"logprob": true}]}', "content[0].logprob"),
        (b'{"content": [{"logprob": [-1]}]}', "content[0].logprob"),
        (b'{"content": [{"logprob": 9007199254740993}]}', "content[0].logprob"),
        ('{"content": [{"logprob": 1' + "0" * 400 + "}]}", "content[0].logprob"),  # read exactly, as the dict below
        ({"content": [{"logprob": -(10**400)}]}, "content[0].logprob"),
        (b'{"content": [', None),
        (42, None),
    ],
)
def test_read_content_refuses_malformed(payload: Any, field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        read_logprobs_content(payload)
    assert info.value.field == field


def test_read_content_checks_floor() -> None:
    with pytest.raises(R3WireError) as info:
        read_logprobs_content({"content": []}, floor=float("inf"))
    assert info.value.field == "floor"


def test_default_floor_is_vllms() -> None:
    assert LOGPROB_FLOOR == -9999.0


def test_torch_tensor_is_clamped_into_a_new_array() -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.tensor([float("nan"), -1.0, float("-inf")], dtype=torch.float32)
    result = clamp_logprobs(tensor, request_id=None)
    assert result.values.dtype == np.float32
    assert result.values.tolist() == [-9999.0, -1.0, -9999.0]
    assert result.num_clamped == 2
    assert bool(torch.isnan(tensor[0]))  # the tensor's storage is untouched
    assert decode_logprobs(encode_logprobs(tensor, clamp=True)).tolist() == [-9999.0, -1.0, -9999.0]


def test_the_dtype_message_names_what_each_call_takes() -> None:
    half = r"float16, float32 or float64"
    whole = r"float32 or float64 \(float16.astype\(np.float32\) is exact\)"
    for values in (np.zeros(2, np.int32), np.zeros(2, np.float16)):
        with pytest.raises(EncodeError, match=rf"^logprobs.dtype must be {whole}, got {values.dtype}$"):
            encode_logprobs(values)
    with pytest.raises(EncodeError, match=rf"^values.dtype must be {half}, got int32$"):
        clamp_logprobs(np.zeros(2, np.int32))
    assert clamp_logprobs(np.array([np.nan], np.float16)).num_clamped == 1


def test_an_extended_precision_floor_that_float64_would_round_is_refused() -> None:
    if np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps:
        pytest.skip("long double is float64 on this platform")
    below_minus_one: Any = np.longdouble(-1) - np.finfo(np.longdouble).eps  # floor is typed float; any real is taken
    with pytest.raises(R3WireError, match=r"^floor must be a value exactly representable as a float64"):
        encode_logprobs([1.0], floor=below_minus_one)
    exact: Any = np.longdouble(-5.5)
    assert encode_logprobs([1.0], floor=exact)["dtype"] == "float64"


@pytest.mark.parametrize(
    ("bits", "dtype"),
    [(0x7F800001, "<f4"), (0x7FA00000, ">f4"), (0xFF800002, "<f4"), (0x7FF0000000000001, ">f8"), (0x7C01, "<f2")],
)
def test_a_signalling_nan_is_shown_by_its_own_bits(bits: int, dtype: str) -> None:
    # Through a Python float, a float32 or float16 signalling NaN came back quiet (0x7f800001 was shown as 0x7fc00001).
    values = np.zeros(3, dtype)
    values[1:2].view(dtype.replace("f", "u"))[0] = bits
    shown = f"nan (bits 0x{bits:0{2 * values.itemsize}x})"
    with pytest.raises(EncodeError) as caught:
        build_logprobs_content(values)
    assert caught.value.got == shown
    if values.itemsize > 2:  # float16 is no logprobs wire dtype
        with pytest.raises(EncodeError) as caught:
            encode_logprobs(values)
        assert caught.value.got == shown
        little = values.astype(values.dtype.newbyteorder("<"))
        envelope = {
            "data": base64.b64encode(little.tobytes()).decode("ascii"),
            "shape": [3],
            "dtype": f"float{8 * values.itemsize}",
            "schema": "r3wire.logprobs",
            "version": 1,
        }
        with pytest.raises(DecodeError) as decoded:
            decode_logprobs(envelope)
        assert decoded.value.got == shown


@pytest.mark.parametrize(
    ("values", "got"),
    [
        (memoryview(b"\x01\x02"), "memoryview"),  # was read as the logprobs 1.0 and 2.0
        (memoryview(b"\x01\x02\x03\x04").cast("B", (2, 2)), "memoryview"),  # was NotImplementedError
        (range(10**12), "1000000000000 values"),  # was iterated for ever
    ],
)
def test_a_buffer_or_a_huge_sequence_is_no_list_of_logprobs(values: Any, got: str) -> None:
    for call in (clamp_logprobs, encode_logprobs, build_logprobs_content):
        with pytest.raises(EncodeError) as caught:
            call(values)
        assert caught.value.field in ("logprobs", "values")
        assert caught.value.got == got


def test_a_clamp_result_is_read_as_its_values() -> None:
    clamped = clamp_logprobs(np.array([-1.0, np.nan], np.float32))
    # A ClampResult is a tuple: it was read as the sequence (array, count) and refused as "got array([...])".
    assert decode_logprobs(encode_logprobs(clamped)).tolist() == clamped.values.tolist()
    assert clamp_logprobs(clamped).values.tolist() == clamped.values.tolist()


def test_a_missing_value_in_an_object_array_is_named_as_missing() -> None:
    with pytest.raises(EncodeError) as caught:
        encode_logprobs(np.array([-1.0, None], dtype=object))
    assert caught.value.got == "None (missing)"  # was shown as the bits of the NaN it became
