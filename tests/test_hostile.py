"""Hostile input on the decode side (issue 11): the default element limit, overflowing zero-element shapes,
duplicate members, error messages that never fail, foreign values in an envelope mapping, and the one check
order shared by the envelope and the frame."""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any

import numpy as np
import pytest

import r3wire
from r3wire import (
    DEFAULT_MAX_ELEMENTS,
    DecodeError,
    R3WireError,
    UnsupportedVersionError,
    decode_array,
    decode_logprobs,
    decode_routes,
    decode_routes_frame,
)
from r3wire._validate import load_object, optional_max_elements
from r3wire.errors import describe

GIANT = 7**6000  # 5,071 digits: repr() and str() raise ValueError beyond 4,300


def _routes(**changes: Any) -> dict[str, Any]:
    envelope = {"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8", "schema": "r3wire.routes", "version": 1}
    envelope.update(changes)
    return envelope


def _frame(code: int, bits: int, *fields: int) -> bytes:
    rows, layers, top_k, experts = fields
    return struct.pack("<4sBBBBQQII", b"R3WF", 1, code, bits, 0, rows, layers, top_k, experts)


# --- the default element limit ------------------------------------------------------------------------------


def test_default_limit_is_public_and_is_what_none_means() -> None:
    assert DEFAULT_MAX_ELEMENTS == 2**30
    assert "DEFAULT_MAX_ELEMENTS" in r3wire.__all__
    assert optional_max_elements(None) == DEFAULT_MAX_ELEMENTS
    assert optional_max_elements(2**40) == 2**40


@pytest.mark.parametrize(
    ("decode", "envelope"),
    [
        (decode_routes, _routes(data="", shape=[0, 2**31, 1])),
        (decode_array, _routes(data="", shape=[2**31, 0], schema="r3wire.array")),
        (decode_logprobs, _routes(data="", shape=[0, 2**31], dtype="float32", schema="r3wire.logprobs")),
    ],
)
def test_default_limit_applies_and_can_be_raised(decode: Any, envelope: dict[str, Any]) -> None:
    with pytest.raises(
        DecodeError, match=r"at most max_elements=1073741824 elements \(the default; pass a larger"
    ) as info:
        decode(envelope)
    assert info.value.field == "shape"
    assert "no elements, 2147483648 without its zero dimensions" in str(info.value)
    assert decode(envelope, max_elements=2**31).shape == tuple(envelope["shape"])


def test_default_limit_applies_to_frames() -> None:
    frame = _frame(1, 0, 0, 2**31, 1, 0)
    with pytest.raises(DecodeError, match="the default") as info:
        decode_routes_frame(frame)
    assert info.value.field == "shape"
    assert decode_routes_frame(frame, max_elements=2**31).shape == (0, 2**31, 1)


def test_issue_example_zero_element_overflow_is_a_decode_error_naming_shape() -> None:
    for limit in (None, 2**63):
        with pytest.raises(DecodeError, match="non-zero dimensions multiply") as info:
            decode_array(_routes(data="", shape=[2**62, 0, 2], schema="r3wire.array"), max_elements=limit)
        assert info.value.field == "shape"


def test_zero_rows_stays_valid() -> None:
    assert decode_routes(_routes(data="", shape=[0, 94, 8])).shape == (0, 94, 8)
    assert decode_routes_frame(_frame(1, 0, 0, 94, 8, 0)).shape == (0, 94, 8)


# --- one order for the envelope and the frame -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("envelope", "frame", "field"),
    [
        # num_experts (step 6) before the data length (step 7)
        (_routes(data="", num_experts=2**32 - 1), _frame(1, 0, 1, 1, 2, 2**32 - 1), "num_experts"),
        # dtype fixed by num_experts (step 6) before the data length
        (_routes(data="", num_experts=300), _frame(1, 0, 1, 1, 2, 300), "dtype"),
        # bits (step 6) before the data length
        (_routes(data="", bits=9), _frame(1, 9, 1, 1, 2, 0), "bits"),
        # the data length (step 7) before the element limit (step 8)
        (_routes(data="", shape=[2**20, 48, 8]), _frame(1, 0, 2**20, 48, 8, 0), "data"),
        # layers >= 1 (step 5) before anything after it
        (_routes(data="", shape=[1, 0, 2], num_experts=0), _frame(1, 0, 1, 0, 2, 2**32 - 1), "shape[1]"),
    ],
)
def test_envelope_and_frame_fail_alike(envelope: dict[str, Any], frame: bytes, field: str) -> None:
    errors: list[DecodeError] = []
    with pytest.raises(DecodeError) as info:
        decode_routes(envelope)
    errors.append(info.value)
    with pytest.raises(DecodeError) as info:
        decode_routes_frame(frame)
    errors.append(info.value)
    assert [e.field for e in errors] == [field, field]
    if field != "data":  # the data step words its sizes as base64 characters or as bytes
        assert str(errors[0]) == str(errors[1])


# --- duplicate members ------------------------------------------------------------------------------------------

DUPLICATED = (
    '{"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8", "schema": "r3wire.routes", "version": 1, "data": "AQA="}'
)


@pytest.mark.parametrize("kind", [str, bytes, bytearray, memoryview])
def test_duplicate_members_are_refused_in_every_text_type(kind: Any) -> None:
    text = DUPLICATED if kind is str else kind(DUPLICATED.encode())
    with pytest.raises(DecodeError, match=r"naming each member once .* got member 'data' twice") as info:
        decode_routes(text)
    assert info.value.field is None


@pytest.mark.parametrize(
    "text",
    [
        '{"a": {"b": 1, "c": 2}, "c": 1}',  # one name in two objects
        '{"a": "x\\"y", "b": "\\\\", "c": "{\\"a\\": 1}"}',  # escapes, brackets and quotes inside strings
        ' {\n "a" : [ "a" , { "a" : 1 } ] ,\t"b":"}"}\r\n',
        '{"a": [[[], {}], [{"a": {"a": 1}}]], "b": 1}',
    ],
)
def test_no_false_duplicates(text: str) -> None:
    assert set(load_object(text)) <= {"a", "b", "c"}
    assert set(load_object(text.encode())) <= {"a", "b", "c"}


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('{"a": {"b": 1, "b": 2}, "c": 1}', "b"),  # a nested object (an envelope inside a completion)
        ('{"a": [{"b": 1}, {"b": 1, "c": ":", "c": 2}]}', "c"),  # colons in strings: the scan decides
        ('{"a": "\\u003a", "b": 1, "b": 2}', "b"),  # an escaped colon defeats counting: the scan decides
    ],
)
def test_duplicates_are_refused_at_any_depth(text: str, name: str) -> None:
    for payload in (text, text.encode()):
        with pytest.raises(DecodeError, match=f"member '{name}' twice"):
            load_object(payload)


def test_many_small_objects_are_checked_past_the_scan_budget() -> None:
    entries = ", ".join('{"logprob": -0.5}' for _ in range(5000))
    assert len(load_object(f'{{"content": [{entries}]}}')["content"]) == 5000
    with pytest.raises(DecodeError, match="member 'logprob' twice"):
        load_object(f'{{"content": [{entries}, {{"logprob": -1.0, "logprob": -2.0}}]}}')


def test_duplicates_found_after_escapes() -> None:
    with pytest.raises(DecodeError, match="member 'b' twice"):
        load_object('{"a": "\\\\", "b": 1, "\\u0062": 2}')


# --- error messages never fail ------------------------------------------------------------------------------------


def test_describe_bounds_giant_ints_bytes_and_strings() -> None:
    assert describe(GIANT) == f"<int of {GIANT.bit_length()} bits>"
    assert describe(-GIANT).startswith("<negative int of ")
    assert describe(2**64) == str(2**64)
    assert len(describe(b"\x00" * 10**7)) < 200
    assert len(describe("x" * 10**7)) < 200
    assert describe(memoryview(b"abcd")) == "<memoryview of 4 bytes>"
    assert len(describe([[GIANT] * 100] * 100)) <= 300


def test_raw_got_that_is_not_a_string_is_described() -> None:
    error = R3WireError.make("f", "small", GIANT, raw=True)
    assert error.got == f"<int of {GIANT.bit_length()} bits>"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"version": GIANT}, "version"),
        ({"num_experts": GIANT}, "num_experts"),
        ({"bits": -GIANT}, "bits"),
        ({"shape": [1, GIANT, 2]}, "shape[1]"),
        ({"shape": [GIANT] * 5}, "shape"),
        ({"dtype": GIANT}, "dtype"),
        ({"data": GIANT}, "data"),
        ({"schema": GIANT}, "schema"),
        ({GIANT: 1}, None),
    ],
)
def test_giant_ints_anywhere_give_a_short_decode_error(changes: dict[Any, Any], field: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode_routes(_routes(**{k: v for k, v in changes.items() if isinstance(k, str)}) | changes)
    assert info.value.field == field
    assert len(str(info.value)) < 400
    if field == "version":
        assert isinstance(info.value, UnsupportedVersionError)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"data": memoryview(b"AAEAAAEA")[::2]}, "data"),  # non-contiguous
        ({"data": memoryview(bytearray(b"AAE=AAE=")).cast("B", (2, 4))}, "data"),  # 2-d
        ({"data": np.frombuffer(b"AAE=", np.uint8)}, "data"),
        ({"schema": np.array(["r3wire.routes", "r3wire.routes"])}, "schema"),
        ({"dtype": np.array(["uint8", "uint8"])}, "dtype"),
        ({"version": np.array([1, 1])}, "version"),
        ({"num_experts": np.array([8, 8])}, "num_experts"),
        ({"bits": np.array([1, 1])}, "bits"),
        ({"shape": np.array([1, 1, 2])}, "shape"),
        ({"shape": [1, np.float64(1.0), 2]}, "shape[1]"),
    ],
)
def test_foreign_values_in_a_mapping_give_decode_error(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_routes(_routes(**changes))
    assert info.value.field == field


def test_non_contiguous_memoryview_text_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as info:
        decode_routes(memoryview(b'{"data": ""}')[::2])
    assert info.value.field is None


# --- positions --------------------------------------------------------------------------------------------------


def test_zero_d_positions_are_written_data_brackets() -> None:
    nan = {"data": "AADAfw==", "shape": [], "dtype": "float32", "schema": "r3wire.logprobs", "version": 1}
    with pytest.raises(DecodeError) as info:
        decode_logprobs(nan)
    assert info.value.field == "data[]"
    two = {"data": "Ag==", "shape": [], "dtype": "bool", "schema": "r3wire.array", "version": 1}
    with pytest.raises(DecodeError) as info:
        decode_array(two)
    assert info.value.field == "data[]"


def test_a_late_negative_id_is_named_before_an_early_out_of_range_one() -> None:
    # int16 ids [9, -1]: 9 >= num_experts=4 comes first in C order, but negativity is checked first.
    envelope = _routes(data="CQD//w==", dtype="int16")
    with pytest.raises(DecodeError) as info:
        decode_routes(envelope, num_experts=4)
    assert info.value.field == "data[0, 0, 1]"


@pytest.mark.parametrize("payload", ["nrlre1:int16:3x0x2:", "nrlre1:int16:3x2x0:", "nrlre1:int16:0x0x0:"])
def test_formats_refuse_routes_without_a_layer_or_a_slot(payload: str) -> None:
    with pytest.raises(DecodeError, match=r"must be an integer in 1\.\.") as info:
        r3wire.formats.read(payload)
    assert info.value.field in {"shape[1]", "shape[2]"}


def test_one_long_string_among_many_ids_is_refused_without_a_string_per_id() -> None:
    # np.asarray of lists holding one string makes every element a string as wide as it: 100k ids with one
    # 1000-character string would be 400 MB (review 11a measured 3 GB at 786k ids). Refused before, in bounded
    # memory, naming the string's place.
    sample = np.tile(np.arange(8, dtype=np.uint8), (1000, 12, 1)).tolist()
    sample[-1][-1][-1] = "x" * 1000
    tracemalloc.start()
    try:
        with pytest.raises(r3wire.R3WireError) as info:
            r3wire.validate_routes([sample], num_experts=128)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.field == "samples[0][999, 11, 7]"
    assert peak < 8 * 1024 * 1024
