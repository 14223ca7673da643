"""encode_routes(pack_bits=True) / decode_routes: widths, sizes, the canonical result, and every header rule."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson
import pytest

from bitref import pack_reference
from r3wire import DecodeError, EncodeError, decode_routes, encode_routes
from r3wire.synthetic import synthetic_routes


def _routes(rows: int, layers: int, top_k: int, num_experts: int, seed: int = 0) -> np.ndarray[Any, Any]:
    return synthetic_routes(rows, layers=layers, top_k=top_k, num_experts=num_experts, seed=seed, dtype=np.int32)


def _payload_bytes(envelope: dict[str, Any]) -> int:
    return len(base64.b64decode(envelope["data"]))


@pytest.mark.parametrize(
    ("num_experts", "bits", "dtype"),
    [
        (1, 1, "uint8"),
        (2, 1, "uint8"),
        (3, 2, "uint8"),
        (8, 3, "uint8"),
        (128, 7, "uint8"),
        (160, 8, "uint8"),
        (256, 8, "uint8"),
        (257, 9, "int16"),
        (384, 9, "int16"),
        (512, 9, "int16"),
        (513, 10, "int16"),
        (32768, 15, "int16"),
        (32769, 16, "int32"),
        (2**31, 31, "int32"),
    ],
)
def test_bits_fixed_by_num_experts(num_experts: int, bits: int, dtype: str) -> None:
    routes = np.zeros((3, 2, 1), dtype=np.int64)
    routes[1, 1, 0] = num_experts - 1
    envelope = encode_routes(routes, num_experts=num_experts, pack_bits=True)
    assert envelope["bits"] == bits
    assert envelope["dtype"] == dtype
    assert list(envelope) == ["data", "shape", "dtype", "schema", "version", "num_experts", "bits"]
    assert base64.b64decode(envelope["data"]) == pack_reference(routes.ravel().tolist(), bits)
    back = decode_routes(orjson.dumps(envelope), num_experts=num_experts)
    assert back.dtype == np.dtype(dtype)
    assert back.tolist() == routes.tolist()


@pytest.mark.parametrize(
    ("high", "bits", "dtype"),
    [
        (0, 1, "uint8"),
        (1, 1, "uint8"),
        (2, 2, "uint8"),
        (127, 7, "uint8"),
        (255, 8, "uint8"),
        (256, 9, "int16"),
        (32767, 15, "int16"),
        (32768, 16, "int32"),
        (2**31 - 1, 31, "int32"),
    ],
)
def test_bits_from_data(high: int, bits: int, dtype: str) -> None:
    routes = np.array([[[0, high]]], dtype=np.int64)
    envelope = encode_routes(routes, pack_bits=True)
    assert (envelope["bits"], envelope["dtype"]) == (bits, dtype)
    assert "num_experts" not in envelope
    assert decode_routes(envelope).tolist() == routes.tolist()


def test_payload_ratios_for_the_models_that_need_packing() -> None:
    kimi = _routes(64, 60, 8, 384)  # Kimi K2: 384 experts, 9 bits
    packed = _payload_bytes(encode_routes(kimi, num_experts=384, pack_bits=True))
    plain = _payload_bytes(encode_routes(kimi, num_experts=384))
    assert plain == kimi.size * 2  # int16
    assert packed / plain <= 0.57
    qwen = _routes(64, 48, 8, 128)  # Qwen3-30B-A3B: 128 experts, 7 bits
    packed = _payload_bytes(encode_routes(qwen, num_experts=128, pack_bits=True))
    plain = _payload_bytes(encode_routes(qwen, num_experts=128))
    assert plain == qwen.size  # uint8
    assert packed / plain <= 0.88


@pytest.mark.parametrize("num_experts", [None, 8, 128, 256, 384, 40000])
def test_packed_decodes_to_the_same_canonical_array(num_experts: int | None) -> None:
    routes = _routes(37, 5, 3, num_experts or 300, seed=3)  # 555 ids: the stream ends inside a group
    packed = decode_routes(encode_routes(routes, num_experts=num_experts, pack_bits=True), num_experts=num_experts)
    plain = decode_routes(encode_routes(routes, num_experts=num_experts), num_experts=num_experts)
    assert packed.dtype == plain.dtype
    assert packed.shape == plain.shape == routes.shape
    assert np.array_equal(packed, plain)
    assert packed.flags.c_contiguous
    assert packed.flags.writeable
    assert packed.dtype.isnative


def test_pack_bits_false_is_the_unpacked_envelope() -> None:
    routes = _routes(4, 3, 2, 128)
    assert encode_routes(routes, pack_bits=False) == encode_routes(routes)
    assert "bits" not in encode_routes(routes, num_experts=128)


@pytest.mark.parametrize("shape", [(0, 48, 8), (0, 1, 1)])
def test_empty_routes_packed(shape: tuple[int, int, int]) -> None:
    envelope = encode_routes(np.zeros(shape, dtype=np.int32), pack_bits=True)
    assert (envelope["data"], envelope["dtype"], envelope["bits"]) == ("", "uint8", 1)
    assert decode_routes(envelope).shape == shape
    with_experts = encode_routes(np.zeros(shape, dtype=np.int32), num_experts=384, pack_bits=True)
    assert (with_experts["data"], with_experts["dtype"], with_experts["bits"]) == ("", "int16", 9)
    assert decode_routes(with_experts).dtype == np.int16


def test_any_source_dtype_byte_order_and_layout() -> None:
    routes = _routes(9, 4, 3, 384, seed=5)
    expected = encode_routes(routes, num_experts=384, pack_bits=True)
    for view in (routes.astype(">i4"), routes.astype("<u2"), routes.astype(">i8"), np.asfortranarray(routes)):
        assert encode_routes(view, num_experts=384, pack_bits=True) == expected
    reversed_view = routes[::-1, :, ::-1]
    assert decode_routes(encode_routes(reversed_view, pack_bits=True)).tolist() == reversed_view.tolist()


def test_encode_errors_are_those_of_the_unpacked_form() -> None:
    with pytest.raises(EncodeError, match=r"routes\[0, 0, 1\] must be an expert id below num_experts=384, got 384"):
        encode_routes(np.array([[[0, 384]]]), num_experts=384, pack_bits=True)
    with pytest.raises(EncodeError, match=r"routes\[0, 0, 1\] must be a non-negative expert id"):
        encode_routes(np.array([[[0, -1]]]), pack_bits=True)
    with pytest.raises(EncodeError, match="pack_bits must be a bool"):
        encode_routes(np.array([[[0, 1]]]), pack_bits=1)  # type: ignore[arg-type]


def _envelope(**changes: Any) -> dict[str, Any]:
    routes = np.array([[[1, 256, 300]]], dtype=np.int32)
    envelope = encode_routes(routes, num_experts=384, pack_bits=True)
    envelope.update(changes)
    return {k: v for k, v in envelope.items() if v is not ...}


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"bits": 0}, "bits", "bits must be an integer in 1..31, got 0"),
        ({"bits": 32}, "bits", "bits must be an integer in 1..31, got 32"),
        ({"bits": "9"}, "bits", "bits must be an integer in 1..31, got '9'"),
        ({"bits": None}, "bits", "bits must be an integer in 1..31, got None"),
        ({"bits": 10}, "bits", "bits must be 9 (fixed by num_experts=384), got 10"),
        ({"bits": 8}, "bits", "bits must be 9 (fixed by num_experts=384), got 8"),
        ({"num_experts": ..., "bits": 8}, "bits", "bits must be an integer in 9..15 (the widths dtype 'int16' holds)"),
        ({"num_experts": ..., "bits": 16}, "bits", "bits must be an integer in 9..15"),
        ({"data": "AAAA"}, "data", "data must be 8 base64 characters (4 bytes"),
        ({"dtype": "uint8"}, "dtype", "dtype must be 'int16' (fixed by num_experts=384)"),
    ],
)
def test_header_rules(changes: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_routes(_envelope(**changes))
    assert info.value.field == field
    assert message in str(info.value)


def test_header_rules_run_before_the_data_is_decoded() -> None:
    # A bad bits value is reported even when the data is garbage of the wrong length.
    with pytest.raises(DecodeError, match="bits must be 9"):
        decode_routes(_envelope(bits=12, data="!!!!"))


def test_non_canonical_bits_without_num_experts() -> None:
    routes = np.array([[[5, 0, 1, 2]]])
    envelope = encode_routes(routes, pack_bits=True)
    assert envelope["bits"] == 3
    wider = envelope | {"bits": 4, "data": base64.b64encode(pack_reference([5, 0, 1, 2], 4)).decode()}
    with pytest.raises(DecodeError, match=r"bits must be 3, the fewest bits holding the largest id 5") as info:
        decode_routes(wider)
    assert info.value.field == "bits"
    # With num_experts on the wire the width is the model's, not the data's.
    model = encode_routes(routes, num_experts=16, pack_bits=True)
    assert model["bits"] == 4
    assert decode_routes(model).tolist() == routes.tolist()


def test_caller_num_experts_bounds_packed_ids() -> None:
    routes = np.array([[[1, 300]]])
    envelope = encode_routes(routes, pack_bits=True)  # no num_experts on the wire
    with pytest.raises(DecodeError, match=r"data\[0, 0, 1\] must be an expert id below num_experts=300, got 300"):
        decode_routes(envelope, num_experts=300)
    with pytest.raises(DecodeError, match=r"num_experts must be 300 \(the caller's num_experts\), got 384"):
        decode_routes(encode_routes(routes, num_experts=384, pack_bits=True), num_experts=300)


def test_non_zero_pad_bits_are_refused() -> None:
    envelope = encode_routes(np.array([[[1, 256, 511]]]), num_experts=512, pack_bits=True)
    raw = bytearray(base64.b64decode(envelope["data"]))
    raw[-1] |= 0x08  # stream bit 27: the first pad bit after 3 ids of 9 bits
    with pytest.raises(DecodeError, match="pad bits") as info:
        decode_routes(envelope | {"data": base64.b64encode(raw).decode()})
    assert info.value.field == "data"


def test_max_elements_applies_before_decoding() -> None:
    envelope = encode_routes(_routes(10, 4, 2, 384), num_experts=384, pack_bits=True)
    with pytest.raises(DecodeError, match="max_elements=79") as info:
        decode_routes(envelope, max_elements=79)
    assert info.value.field == "shape"
    assert decode_routes(envelope, max_elements=80).shape == (10, 4, 2)
