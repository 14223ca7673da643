"""encode_routes / decode_routes: dtype choice, id checks, byte order, memory order, errors."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import (
    DecodeError,
    EncodeError,
    R3WireError,
    UnsupportedVersionError,
    decode_routes,
    encode_routes,
)


def _routes(rows: int = 4, layers: int = 3, top_k: int = 2, high: int = 128, dtype: Any = np.int32) -> Any:
    rng = np.random.default_rng(rows * 1000 + high)
    return rng.integers(0, high, size=(rows, layers, top_k)).astype(dtype)


@pytest.mark.parametrize(
    ("high", "expected"),
    [(1, "uint8"), (255, "uint8"), (256, "int16"), (32767, "int16"), (32768, "int32"), (2**31 - 1, "int32")],
)
def test_dtype_ladder_from_data(high: int, expected: str) -> None:
    routes = np.array([[[0, high]]], dtype=np.int64)
    envelope = encode_routes(routes)
    assert envelope["dtype"] == expected
    assert "num_experts" not in envelope
    back = decode_routes(envelope)
    assert back.dtype == np.dtype(expected)
    assert back.tolist() == routes.tolist()


@pytest.mark.parametrize(
    ("num_experts", "expected"),
    [
        (1, "uint8"),
        (8, "uint8"),
        (256, "uint8"),
        (257, "int16"),
        (32768, "int16"),
        (32769, "int32"),
        (2**31, "int32"),
    ],
)
def test_dtype_fixed_by_num_experts(num_experts: int, expected: str) -> None:
    routes = np.zeros((2, 1, 1), dtype=np.int64)  # the data alone would pick uint8
    envelope = encode_routes(routes, num_experts=num_experts)
    assert envelope["dtype"] == expected
    assert envelope["num_experts"] == num_experts
    assert r3wire.route_dtype(num_experts) == np.dtype(expected)
    back = decode_routes(envelope, num_experts=num_experts)
    assert back.dtype == np.dtype(expected)
    assert not back.any()


def test_envelope_layout() -> None:
    envelope = encode_routes(np.array([[[1, 0], [7, 3]]], dtype=np.uint16), num_experts=8)
    assert list(envelope) == ["data", "shape", "dtype", "schema", "version", "num_experts"]
    assert envelope == {
        "data": base64.b64encode(bytes([1, 0, 7, 3])).decode(),
        "shape": [1, 2, 2],
        "dtype": "uint8",
        "schema": "r3wire.routes",
        "version": 1,
        "num_experts": 8,
    }
    assert orjson.loads(orjson.dumps(envelope)) == envelope


@pytest.mark.parametrize("source", ["<i4", ">i4", "<u2", ">u2", "<i8", ">u8", "u1", "i1", "<i2", ">i2"])
def test_any_integer_dtype_and_byte_order(source: str) -> None:
    routes = _routes(high=100).astype(source)
    back = decode_routes(orjson.dumps(encode_routes(routes)))
    assert back.tolist() == routes.tolist()
    assert back.dtype.isnative


def test_wire_is_little_endian_for_big_endian_input() -> None:
    routes = np.array([[[300, 1]]], dtype=">i4")
    raw = base64.b64decode(encode_routes(routes)["data"])
    assert raw == (300).to_bytes(2, "little") + (1).to_bytes(2, "little")


def test_non_contiguous_read_only_and_fortran_input() -> None:
    base = _routes(rows=10, layers=4, top_k=6)
    views = [base[::2], base[:, ::-1], np.asfortranarray(base), base.transpose(0, 2, 1)]
    base.flags.writeable = False
    for view in views:
        back = decode_routes(encode_routes(view))
        assert back.tolist() == view.tolist()
        assert back.flags.c_contiguous
        assert back.flags.writeable


def test_nested_lists_are_accepted() -> None:
    back = decode_routes(encode_routes([[[1, 2]], [[3, 0]]]))
    assert back.tolist() == [[[1, 2]], [[3, 0]]]


@pytest.mark.parametrize("shape", [(0, 48, 8), (0, 1, 1)])
def test_empty_routes(shape: tuple[int, int, int]) -> None:
    envelope = encode_routes(np.zeros(shape, dtype=np.int32))
    assert envelope["dtype"] == "uint8"
    assert envelope["data"] == ""
    back = decode_routes(envelope)
    assert back.shape == shape
    assert back.dtype == np.uint8


@pytest.mark.parametrize("shape", [(5, 0, 8), (5, 48, 0), (0, 0, 0)])
def test_routes_without_a_layer_or_a_slot_are_refused_both_ways(shape: tuple[int, int, int]) -> None:
    with pytest.raises(EncodeError, match=r"routes must be a 3-d array \[rows, layers >= 1, top_k >= 1\]"):
        encode_routes(np.zeros(shape, dtype=np.int32))
    envelope = {"data": "", "shape": list(shape), "dtype": "uint8", "schema": "r3wire.routes", "version": 1}
    with pytest.raises(DecodeError, match=r"must be an integer in 1\.\.") as info:
        decode_routes(envelope)
    assert info.value.field == ("shape[1]" if shape[1] == 0 else "shape[2]")


def test_decoded_array_is_writable_and_owned_by_nobody_else() -> None:
    envelope = encode_routes(_routes())
    first = decode_routes(envelope)
    first[...] = 0
    second = decode_routes(envelope)
    assert second.any()


@pytest.mark.parametrize("payload_kind", ["dict", "str", "bytes", "bytearray", "memoryview"])
def test_payload_forms(payload_kind: str) -> None:
    routes = _routes()
    envelope = encode_routes(routes)
    text = orjson.dumps(envelope)
    payload: Any = {
        "dict": envelope,
        "str": text.decode(),
        "bytes": text,
        "bytearray": bytearray(text),
        "memoryview": memoryview(text),
    }[payload_kind]
    assert decode_routes(payload).tolist() == routes.tolist()


def test_numpy_integers_accepted_in_process() -> None:
    # Any: NumPy 1.x stubs type np.int64(...) as a non-int (NumPy 2.x stubs as Any); the codec accepts it at run time.
    n64: Any = np.int64(128)
    n32: Any = np.int32(128)
    envelope = encode_routes(_routes(), num_experts=n64)
    envelope["shape"] = tuple(np.int64(n) for n in envelope["shape"])
    assert decode_routes(envelope, num_experts=n32).shape == (4, 3, 2)


@pytest.mark.parametrize(
    ("routes", "field", "fragment"),
    [
        (np.array([[[0, -1]]]), "routes[0, 0, 1]", "non-negative"),
        (np.array([[[0, 2**31]]], dtype=np.int64), "routes[0, 0, 1]", "below 2**31"),
        (np.array([[[0, 2**63]]], dtype=np.uint64), "routes[0, 0, 1]", "below 2**31"),
        (np.zeros((2, 3)), "routes.dtype", "integer dtype"),
        (np.zeros((2, 3), dtype=np.int32), "routes", "3-d array"),
        (np.zeros((1, 1, 1), dtype=bool), "routes.dtype", "integer dtype"),
        ("not routes", "routes", "an array"),
        ([[[1]], [[1, 2]]], "routes", "an array"),
    ],
)
def test_encode_errors(routes: Any, field: str, fragment: str) -> None:
    with pytest.raises(EncodeError) as info:
        encode_routes(routes)
    assert info.value.field == field
    assert fragment in str(info.value)


def test_encode_id_above_num_experts_names_position() -> None:
    routes = np.zeros((3, 2, 2), dtype=np.int32)
    routes[2, 1, 0] = 128
    with pytest.raises(EncodeError, match=r"routes\[2, 1, 0\] must be an expert id below num_experts=128, got 128"):
        encode_routes(routes, num_experts=128)


@pytest.mark.parametrize("num_experts", [0, -1, 2**31 + 1, True, 1.5, "128"])
def test_bad_num_experts(num_experts: Any) -> None:
    with pytest.raises(EncodeError, match="num_experts must be an integer"):
        encode_routes(_routes(), num_experts=num_experts)
    with pytest.raises(R3WireError, match="num_experts must be an integer"):
        decode_routes(encode_routes(_routes()), num_experts=num_experts)


def test_legacy_seed_envelope() -> None:
    routes = _routes(high=300)
    seed = {k: v for k, v in encode_routes(routes).items() if k in ("data", "shape", "dtype")}
    assert seed["dtype"] == "int16"
    assert decode_routes(seed).tolist() == routes.tolist()


def test_unsupported_version_error_carries_versions() -> None:
    envelope = encode_routes(_routes()) | {"version": 7}
    with pytest.raises(UnsupportedVersionError) as info:
        decode_routes(envelope)
    assert info.value.version == 7
    assert info.value.supported == (1,)
    assert info.value.field == "version"
    assert isinstance(info.value, DecodeError)
    assert "reads versions [1]" in str(info.value)


def test_huge_claimed_shape_is_rejected_before_allocation() -> None:
    payload = {
        "data": "AAE=",
        "shape": [10**12, 48, 8],
        "dtype": "int32",
        "schema": "r3wire.routes",
        "version": 1,
    }
    with pytest.raises(DecodeError) as info:
        decode_routes(payload)
    assert info.value.field == "data"
    assert "characters" in str(info.value)


def test_max_elements() -> None:
    envelope = encode_routes(_routes(rows=10))
    assert decode_routes(envelope, max_elements=60).shape == (10, 3, 2)
    with pytest.raises(DecodeError, match="at most max_elements=59 elements"):
        decode_routes(envelope, max_elements=59)


def test_error_message_is_bounded_for_huge_values() -> None:
    envelope = encode_routes(_routes()) | {"dtype": "x" * 1_000_000}
    with pytest.raises(DecodeError) as info:
        decode_routes(envelope)
    assert len(str(info.value)) < 300


def test_errors_are_value_errors() -> None:
    assert issubclass(R3WireError, ValueError)
    assert issubclass(EncodeError, R3WireError)
    assert issubclass(DecodeError, R3WireError)
    assert issubclass(UnsupportedVersionError, DecodeError)
