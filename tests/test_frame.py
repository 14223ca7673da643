"""encode_routes_frame / decode_routes_frame: header layout, zero-copy views, and the envelope's rules and errors."""

from __future__ import annotations

import base64
import struct
from typing import Any

import numpy as np
import pytest

from bitref import pack_reference
from r3wire import (
    DecodeError,
    EncodeError,
    R3WireError,
    UnsupportedVersionError,
    decode_routes,
    decode_routes_frame,
    encode_routes,
    encode_routes_frame,
)
from r3wire.frame import FRAME_HEADER_SIZE
from r3wire.synthetic import synthetic_routes


def _routes(rows: int = 6, num_experts: int = 384, seed: int = 0) -> np.ndarray[Any, Any]:
    return synthetic_routes(rows, layers=5, top_k=4, num_experts=num_experts, seed=seed, dtype=np.int32)


def _header(frame: bytes | memoryview) -> tuple[Any, ...]:
    return struct.unpack_from("<4sBBBBQQII", frame)


@pytest.mark.parametrize("pack_bits", [False, True])
def test_header_fields(pack_bits: bool) -> None:
    frame = encode_routes_frame(_routes(), num_experts=384, pack_bits=pack_bits)
    assert _header(frame) == (b"R3WF", 1, 2, 9 if pack_bits else 0, 0, 6, 5, 4, 384)
    assert len(frame) == FRAME_HEADER_SIZE + (6 * 5 * 4 * 9 + 7) // 8 if pack_bits else 32 + 6 * 5 * 4 * 2
    assert _header(encode_routes_frame(_routes(num_experts=100)))[2:] == (1, 0, 0, 6, 5, 4, 0)


@pytest.mark.parametrize(("num_experts", "pack_bits"), [(None, False), (None, True), (384, False), (384, True)])
def test_frame_data_is_the_envelope_data(num_experts: int | None, pack_bits: bool) -> None:
    routes = _routes(seed=1)
    frame = encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack_bits)
    envelope = encode_routes(routes, num_experts=num_experts, pack_bits=pack_bits)
    assert frame[FRAME_HEADER_SIZE:] == base64.b64decode(envelope["data"])
    from_frame = decode_routes_frame(frame, num_experts=num_experts)
    from_envelope = decode_routes(envelope, num_experts=num_experts)
    assert from_frame.dtype == from_envelope.dtype
    assert np.array_equal(from_frame, from_envelope)
    assert np.array_equal(from_frame, routes)


def test_unpacked_decode_is_a_view_of_bytes_read_only() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384)
    routes = decode_routes_frame(frame)
    assert np.shares_memory(routes, np.frombuffer(frame, np.uint8))
    assert not routes.flags.writeable
    assert routes.flags.c_contiguous
    assert routes.flags.aligned


def test_unpacked_decode_is_a_writable_view_of_a_bytearray() -> None:
    buffer = bytearray(encode_routes_frame(_routes(), num_experts=384))
    routes = decode_routes_frame(buffer)
    assert routes.flags.writeable
    routes[0, 0, 0] = 17
    assert struct.unpack_from("<h", buffer, FRAME_HEADER_SIZE)[0] == 17


def test_memoryview_keeps_its_writability() -> None:
    buffer = bytearray(encode_routes_frame(_routes(), num_experts=384))
    assert decode_routes_frame(memoryview(buffer)).flags.writeable
    assert not decode_routes_frame(memoryview(buffer).toreadonly()).flags.writeable
    part = memoryview(b"junk" + bytes(buffer))[4:]  # a frame inside a larger message
    assert np.array_equal(decode_routes_frame(part), decode_routes_frame(buffer))


def test_copy_true_gives_a_new_writable_array() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384)
    routes = decode_routes_frame(frame, copy=True)
    assert routes.flags.writeable
    assert routes.flags.owndata
    assert not np.shares_memory(routes, np.frombuffer(frame, np.uint8))


def test_misaligned_data_is_copied_into_an_aligned_array() -> None:
    ids = np.random.default_rng(0).integers(0, 2**20, size=(6, 5, 4))
    frame = encode_routes_frame(ids, num_experts=2**20)  # int32
    shifted = np.zeros(len(frame) + 1, dtype=np.uint8)
    shifted[1:] = np.frombuffer(frame, np.uint8)
    routes = decode_routes_frame(shifted[1:].data)
    assert routes.dtype == np.int32
    assert routes.flags.aligned
    assert np.array_equal(routes, ids)


def test_packed_decode_is_a_new_writable_array() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384, pack_bits=True)
    routes = decode_routes_frame(frame)
    assert routes.flags.writeable
    assert routes.dtype == np.int16
    assert np.array_equal(routes, _routes())


@pytest.mark.parametrize("shape", [(0, 48, 8), (0, 1, 1)])
@pytest.mark.parametrize("pack_bits", [False, True])
def test_empty_frames(shape: tuple[int, int, int], pack_bits: bool) -> None:
    frame = encode_routes_frame(np.zeros(shape, dtype=np.int64), pack_bits=pack_bits)
    assert len(frame) == FRAME_HEADER_SIZE
    routes = decode_routes_frame(frame)
    assert routes.shape == shape
    assert routes.dtype == np.uint8


def test_encode_errors_are_those_of_encode_routes() -> None:
    cases: list[tuple[np.ndarray[Any, Any], dict[str, Any]]] = [
        (np.array([[[0, 8]]]), {"num_experts": 8}),
        (np.array([[[0, -1]]]), {}),
        (np.zeros((2, 3), dtype=np.int32), {}),
        (np.zeros((1, 1, 1)), {}),
        (np.array([[[0, 2**31]]]), {"pack_bits": True}),
    ]
    for bad, kwargs in cases:
        with pytest.raises(EncodeError) as frame_error:
            encode_routes_frame(bad, **kwargs)
        with pytest.raises(EncodeError) as envelope_error:
            encode_routes(bad, **kwargs)
        assert str(frame_error.value) == str(envelope_error.value)


def _both(routes: np.ndarray[Any, Any], *, wire_experts: int | None, pack_bits: bool) -> tuple[dict[str, Any], bytes]:
    return (
        encode_routes(routes, num_experts=wire_experts, pack_bits=pack_bits),
        bytes(encode_routes_frame(routes, num_experts=wire_experts, pack_bits=pack_bits)),  # bytes: to splice
    )


@pytest.mark.parametrize("pack_bits", [False, True])
def test_decode_errors_are_those_of_decode_routes(pack_bits: bool) -> None:
    # The same broken content, once as an envelope and once as a frame, fails with the same message.
    routes = np.array([[[1, 2], [3, 300]]])
    cases: list[tuple[dict[str, Any], bytes, dict[str, Any]]] = []
    envelope, frame = _both(routes, wire_experts=None, pack_bits=pack_bits)
    cases.append((envelope, frame, {"num_experts": 300}))  # an id not below the caller's num_experts
    envelope, frame = _both(routes, wire_experts=384, pack_bits=pack_bits)
    cases.append((envelope, frame, {"num_experts": 512}))  # the caller disagrees with the wire
    cases.append((envelope, frame, {"max_elements": 3}))
    envelope, frame = _both(routes, wire_experts=384, pack_bits=pack_bits)
    wrong = int(frame[6]) + 1 if pack_bits else 0
    if pack_bits:
        cases.append((envelope | {"bits": wrong}, frame[:6] + bytes([wrong]) + frame[7:], {}))
    envelope, frame = _both(np.array([[[1, 2]]]), wire_experts=None, pack_bits=pack_bits)
    widened = np.array([[[1, 2]]], dtype=np.int16)  # int16 for ids below 256: not canonical
    cases.append(
        (
            envelope | {"dtype": "int16", "data": base64.b64encode(widened.astype("<i2").tobytes()).decode()}
            if not pack_bits
            else envelope | {"dtype": "int16", "bits": 9, "data": base64.b64encode(pack_reference([1, 2], 9)).decode()},
            frame[:5]
            + b"\x02"
            + (b"\x09" if pack_bits else b"\x00")
            + frame[7:32]
            + (pack_reference([1, 2], 9) if pack_bits else widened.astype("<i2").tobytes()),
            {},
        )
    )
    for envelope, frame, kwargs in cases:
        with pytest.raises(DecodeError) as from_envelope:
            decode_routes(envelope, **kwargs)
        with pytest.raises(DecodeError) as from_frame:
            decode_routes_frame(frame, **kwargs)
        assert str(from_frame.value) == str(from_envelope.value)
        assert from_frame.value.field == from_envelope.value.field


def test_frame_checks_in_order() -> None:
    frame = bytes(encode_routes_frame(_routes(), num_experts=384, pack_bits=True))  # bytes: to splice
    with pytest.raises(DecodeError, match=r"magic must be b'R3WF'"):
        decode_routes_frame(b"R3WX" + frame[4:])
    with pytest.raises(UnsupportedVersionError) as info:
        decode_routes_frame(frame[:4] + b"\x07")  # a newer version may have another header size: version first
    assert (info.value.version, info.value.supported, info.value.field) == (7, (1,), "version")
    with pytest.raises(DecodeError, match="header must be 32 bytes, got a frame of 20 bytes"):
        decode_routes_frame(frame[:20])
    with pytest.raises(DecodeError, match=r"reserved must be 0, got 3"):
        decode_routes_frame(frame[:7] + b"\x03" + frame[8:])
    with pytest.raises(DecodeError, match=r"dtype must be a dtype code: 1 \(uint8\), 2 \(int16\), 3 \(int32\), got 7"):
        decode_routes_frame(frame[:5] + b"\x07" + frame[6:])
    with pytest.raises(DecodeError, match=r"data must be 135 bytes after the header \(120 ids as 9 bits\), got 136"):
        decode_routes_frame(frame + b"\x00")


def test_huge_declared_shape_is_refused_without_allocating() -> None:
    header = struct.pack("<4sBBBBQQII", b"R3WF", 1, 3, 0, 0, 2**40, 2**10, 2**8, 0)
    with pytest.raises(DecodeError, match="data must be") as info:
        decode_routes_frame(header + b"\x00" * 8)
    assert info.value.field == "data"
    # Beyond what any array can be (the non-zero dimensions multiply past 2**60 - 1): refused at the shape.
    beyond = struct.pack("<4sBBBBQQII", b"R3WF", 1, 3, 0, 0, 2**40, 2**20, 2**31, 0)
    with pytest.raises(DecodeError, match="non-zero dimensions multiply") as info:
        decode_routes_frame(beyond + b"\x00" * 8)
    assert info.value.field == "shape"
    # The data length is checked before the element limit (docs/wire-format.md §8): a frame whose data is all
    # there is refused by the limit, before anything is read or allocated.
    small = struct.pack("<4sBBBBQQII", b"R3WF", 1, 1, 0, 0, 4, 2, 8, 0)
    with pytest.raises(DecodeError, match="shape must be at most max_elements=63 elements") as info:
        decode_routes_frame(small + bytes(64), max_elements=63)
    assert info.value.field == "shape"


@pytest.mark.parametrize("buffer", ["R3WF", None, 42, [1, 2, 3], np.zeros((4, 4), np.uint8)[:, ::2]])
def test_non_buffers_are_refused(buffer: Any) -> None:
    with pytest.raises(DecodeError) as info:
        decode_routes_frame(buffer)
    assert info.value.field is None


@pytest.mark.parametrize("num_experts", [0, 2**31 + 1, True, "384"])
def test_bad_caller_arguments(num_experts: Any) -> None:
    frame = encode_routes_frame(_routes())
    with pytest.raises(R3WireError, match="num_experts must be an integer"):
        decode_routes_frame(frame, num_experts=num_experts)
    with pytest.raises(R3WireError, match="max_elements must be an integer"):
        decode_routes_frame(frame, max_elements=-1)


def test_frame_is_a_read_only_bytes_like_view() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384)
    assert isinstance(frame, memoryview)
    assert frame.readonly
    assert (frame.format, frame.ndim, frame.contiguous) == ("B", 1, True)
    assert frame[:4] == memoryview(b"R3WF")
    assert bytes(frame) == frame
    assert decode_routes_frame(bytes(frame)).tolist() == _routes().tolist()


@pytest.mark.parametrize("pack_bits", [False, True])
@pytest.mark.parametrize("num_experts", [None, 384])
@pytest.mark.parametrize("dtype", ["<u2", ">u2", "<i4", ">i4", "<i8", "<u8"])
def test_large_sources_of_any_dtype_give_the_envelope_bytes(
    monkeypatch: pytest.MonkeyPatch, dtype: str, num_experts: int | None, pack_bits: bool
) -> None:
    monkeypatch.setattr("r3wire.frame._CHUNK_IDS", 4096)
    routes = _routes(rows=1500, seed=3).astype(dtype)  # 30,000 ids: 8 chunks, the packed kernel's chunked path
    envelope = encode_routes(routes, num_experts=num_experts, pack_bits=pack_bits)
    frame = encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack_bits)
    assert bytes(frame[FRAME_HEADER_SIZE:]) == base64.b64decode(envelope["data"])
    strided = encode_routes_frame(np.asfortranarray(routes), num_experts=num_experts, pack_bits=pack_bits)
    assert bytes(strided) == bytes(frame)


@pytest.mark.parametrize("pack_bits", [False, True])
def test_a_bad_id_in_a_late_chunk_gets_the_error_of_encode_routes(
    monkeypatch: pytest.MonkeyPatch, pack_bits: bool
) -> None:
    monkeypatch.setattr("r3wire.frame._CHUNK_IDS", 64)
    monkeypatch.setattr("r3wire.bitpack._CHUNK_GROUPS", 8)
    monkeypatch.setattr("r3wire.bitpack._SMALL_COUNT", -1)
    for bad, num_experts in [(-1, 384), (384, 384), (-5, None), (2**31, None)]:
        routes = _routes(rows=50).astype(np.int64)
        routes[47, 3, 2] = bad
        with pytest.raises(EncodeError) as want:
            encode_routes(routes, num_experts=num_experts, pack_bits=pack_bits)
        with pytest.raises(EncodeError) as got:
            encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack_bits)
        assert str(got.value) == str(want.value)
        assert got.value.field == "routes[47, 3, 2]"


def test_negative_int8_ids_are_not_mistaken_for_large_uint8_ones() -> None:
    routes = np.array([[[1, -1]]], dtype=np.int8)  # -1 is 255 viewed as unsigned: a valid uint8 id
    for kwargs in [{}, {"num_experts": 256}, {"pack_bits": True}, {"num_experts": 256, "pack_bits": True}]:
        with pytest.raises(EncodeError, match="non-negative"):
            encode_routes_frame(routes, **kwargs)  # type: ignore[arg-type]
