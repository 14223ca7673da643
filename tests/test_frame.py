"""encode_routes_frame / decode_routes_frame: header layout, bytes or out=, zero-copy views, and the envelope's rules
and errors."""

from __future__ import annotations

import array
import base64
import mmap
import pickle
import struct
import tracemalloc
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
    frame_size,
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


@pytest.mark.parametrize("copy", ["no", "", 0, 1, None, [True]])
def test_copy_must_be_a_bool(copy: Any) -> None:
    # copy="no" was truthy: it copied, silently, where the caller meant a view.
    frame = encode_routes_frame(_routes(), num_experts=384)
    with pytest.raises(R3WireError, match="copy must be a bool") as info:
        decode_routes_frame(frame, copy=copy)
    assert info.value.field == "copy"


@pytest.mark.parametrize("pack_bits", ["no", 0, None])
def test_the_encoders_pack_bits_must_be_a_bool(pack_bits: Any) -> None:
    # The frame's other flag: already checked by prepare_routes, kept so here.
    for encode in (encode_routes_frame, frame_size):
        for num_experts in (None, 384):
            with pytest.raises(EncodeError, match="pack_bits must be a bool") as info:
                encode(_routes(), num_experts=num_experts, pack_bits=pack_bits)
            assert info.value.field == "pack_bits"


def test_copy_may_be_a_numpy_bool() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384)
    yes: Any = np.bool_(True)  # Any: typed as bool; np.bool_ is accepted at run time
    no: Any = np.bool_(False)
    assert decode_routes_frame(frame, copy=yes).flags.owndata
    assert np.shares_memory(decode_routes_frame(frame, copy=no), np.frombuffer(frame, np.uint8))


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


def test_frame_is_bytes_by_default() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384)
    assert type(frame) is bytes  # the 0.1.0 contract: picklable, hashable, concatenable
    assert pickle.loads(pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)) == frame
    assert hash(frame) == hash(bytes(frame))
    assert (frame + b"!")[:-1] == frame
    assert decode_routes_frame(frame).tolist() == _routes().tolist()


def _out_buffers(size: int) -> list[Any]:
    ints = np.zeros(size // 4 + 1, dtype=np.int32)  # not uint8: any writable C-contiguous buffer is bytes to out=
    return [bytearray(size), np.zeros(size, np.uint8), memoryview(bytearray(size)), ints, array.array("b", bytes(size))]


@pytest.mark.parametrize("num_experts", [None, 384])
@pytest.mark.parametrize("pack_bits", [False, True])
def test_out_gets_the_same_bytes(num_experts: int | None, pack_bits: bool) -> None:
    routes = _routes(seed=2)
    want = encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack_bits)
    size = frame_size(routes, num_experts=num_experts, pack_bits=pack_bits)
    assert size == len(want)
    for out in _out_buffers(size + 7):
        before = bytes(memoryview(out).cast("B"))
        got = encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack_bits, out=out)
        assert isinstance(got, memoryview)
        assert (got.format, got.ndim, got.nbytes, got.readonly) == ("B", 1, size, False)
        assert bytes(got) == want
        written = bytes(memoryview(out).cast("B"))
        assert written[:size] == want
        assert written[size:] == before[size:]  # bytes after the frame are left alone
        assert np.shares_memory(np.frombuffer(got, np.uint8), np.frombuffer(out, np.uint8))
        assert np.array_equal(decode_routes_frame(got), routes)


def test_out_is_reused_and_mmap_works() -> None:
    buffer = np.full(4096, 0xAA, dtype=np.uint8)
    for seed in range(3):
        routes = _routes(rows=seed + 1, seed=seed)
        assert bytes(encode_routes_frame(routes, out=buffer)) == encode_routes_frame(routes)
    with mmap.mmap(-1, 4096) as mapped:
        view = encode_routes_frame(_routes(), num_experts=384, pack_bits=True, out=mapped)
        assert bytes(view) == encode_routes_frame(_routes(), num_experts=384, pack_bits=True)
        view.release()  # an mmap with exported views cannot be closed


def test_out_may_be_misaligned() -> None:
    buffer = bytearray(2048)
    routes = np.random.default_rng(0).integers(0, 2**20, size=(6, 5, 4))  # int32 on the wire
    for pack_bits in (False, True):
        got = encode_routes_frame(routes, num_experts=2**20, pack_bits=pack_bits, out=memoryview(buffer)[3:])
        assert bytes(got) == encode_routes_frame(routes, num_experts=2**20, pack_bits=pack_bits)


def test_empty_routes_into_out() -> None:
    out = bytearray(FRAME_HEADER_SIZE)
    got = encode_routes_frame(np.zeros((0, 48, 8), dtype=np.int32), out=out)
    assert bytes(got) == encode_routes_frame(np.zeros((0, 48, 8), dtype=np.int32))


def _out_error(routes: Any, out: Any, **kwargs: Any) -> EncodeError:
    with pytest.raises(EncodeError) as caught:
        encode_routes_frame(routes, out=out, **kwargs)
    assert caught.value.field == "out"
    assert str(caught.value).startswith("out must be ")
    return caught.value


@pytest.mark.parametrize("pack_bits", [False, True])
def test_out_too_small_names_the_sizes(pack_bits: bool) -> None:
    size = frame_size(_routes(), num_experts=384, pack_bits=pack_bits)
    out = bytearray(b"\x55" * (size - 1))
    error = _out_error(_routes(), out, num_experts=384, pack_bits=pack_bits)
    assert str(error) == f"out must be a buffer of at least {size} bytes (the frame), got {size - 1} bytes"
    assert out == b"\x55" * (size - 1)  # refused before anything is written


def test_out_read_only_non_contiguous_or_not_a_buffer() -> None:
    size = frame_size(_routes(), num_experts=384) + 64
    readonly = np.zeros(size, np.uint8)
    readonly.flags.writeable = False
    assert "read-only" in str(_out_error(_routes(), bytes(size)))
    assert "read-only" in str(_out_error(_routes(), memoryview(bytearray(size)).toreadonly()))
    assert "read-only" in str(_out_error(_routes(), readonly))
    assert "non-contiguous" in str(_out_error(_routes(), np.zeros(2 * size, np.uint8)[::2]))
    assert "non-contiguous" in str(_out_error(_routes(), memoryview(bytearray(2 * size))[::2]))
    assert "got list" in str(_out_error(_routes(), [0] * size))
    assert "got str" in str(_out_error(_routes(), "x" * size))
    closed = mmap.mmap(-1, size)
    closed.close()
    assert "got mmap (mmap closed or invalid)" in str(_out_error(_routes(), closed))


def test_out_of_objects_bools_or_a_mask_is_refused_before_anything_is_written() -> None:
    size = frame_size(_routes(), num_experts=384) + 64
    objects: Any = np.array([object() for _ in range(size)], dtype=object)  # written over, it crashed Python
    assert "got ndarray of format 'O' (object pointers)" in str(_out_error(_routes(), objects))
    assert "got memoryview of format 'O'" in str(_out_error(_routes(), memoryview(objects)))
    bools = np.zeros(size, dtype=bool)  # would hold bytes other than 0 and 1
    assert "got ndarray of format '?'" in str(_out_error(_routes(), bools))
    assert not bools.any()
    masked: Any = np.ma  # untyped in NumPy's stubs
    assert "a masked array" in str(_out_error(_routes(), masked.masked_array(np.zeros(size, np.uint8))))
    assert "got ndarray of format 'T{" in str(_out_error(_routes(), np.zeros(size, dtype=[("a", "u1"), ("b", "O")])))


def test_a_frame_is_read_from_np_bytes_but_not_from_another_numpy_scalar() -> None:
    frame = encode_routes_frame(_routes(), num_experts=384)
    assert decode_routes_frame(np.bytes_(frame)).tolist() == _routes().tolist()
    scalar: Any = np.uint64(7)
    with pytest.raises(DecodeError, match=r"got uint64$"):
        decode_routes_frame(scalar)


def test_a_frame_is_never_read_from_object_pointers() -> None:
    objects: Any = np.array([object() for _ in range(64)], dtype=object)
    with pytest.raises(DecodeError) as caught:
        decode_routes_frame(objects)
    assert str(caught.value) == (
        "payload must be a contiguous bytes-like frame (bytes, bytearray or memoryview), got ndarray of format 'O' "
        "(object pointers)"
    )  # before: the error showed the first pointer's bytes as the magic


def test_out_aliasing_routes_is_refused() -> None:
    memory = np.zeros(4096, dtype=np.uint8)
    routes = memory[:480].view(np.int32).reshape(6, 5, 4)
    routes[...] = _routes(num_experts=100)
    kept = routes.copy()
    _out_error(routes, memory)  # routes at the start of out
    _out_error(routes, memory[100:])  # out starts inside routes
    _out_error(memory[1000:1480].view(np.int32).reshape(6, 5, 4), memory[900:])
    strided = memory[::8][:120].reshape(6, 5, 4)  # interleaved with out's bytes: refused too
    _out_error(strided, memory[1:1000])
    assert np.array_equal(routes, kept)
    # Disjoint parts of one arena are fine.
    got = encode_routes_frame(routes, out=memory[480:])
    assert bytes(got) == encode_routes_frame(kept)


def test_a_bad_id_into_out_leaves_no_valid_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("r3wire.frame._CHUNK_IDS", 64)  # the bad id is found after chunks were written
    out = bytearray(4096)
    earlier = encode_routes_frame(_routes(rows=50, seed=9), num_experts=384, out=out)  # a reused buffer
    assert decode_routes_frame(earlier).shape == (50, 5, 4)
    routes = _routes(rows=50).astype(np.int64)
    routes[47, 3, 2] = 384
    with pytest.raises(EncodeError) as caught:
        encode_routes_frame(routes, num_experts=384, out=out)
    assert caught.value.field == "routes[47, 3, 2]"
    assert out[FRAME_HEADER_SIZE : FRAME_HEADER_SIZE + 64] == encode_routes_frame(routes[:3], num_experts=384)[32:96]
    with pytest.raises(DecodeError, match="magic"):  # the earlier frame's header is gone with it
        decode_routes_frame(out)


@pytest.mark.parametrize("pack_bits", [False, True])
def test_frame_size_with_num_experts_reads_no_id(pack_bits: bool) -> None:
    routes = _routes(rows=1000)
    routes[500, 0, 0] = 999  # breaks num_experts: found by the encoder, not by frame_size
    nbytes = (1000 * 5 * 4 * 9 + 7) // 8 if pack_bits else 1000 * 5 * 4 * 2
    assert frame_size(routes, num_experts=384, pack_bits=pack_bits) == FRAME_HEADER_SIZE + nbytes
    with pytest.raises(EncodeError):
        encode_routes_frame(routes, num_experts=384, pack_bits=pack_bits)


def test_frame_size_without_num_experts_follows_the_largest_id() -> None:
    assert frame_size(np.zeros((2, 3, 4), np.int32)) == FRAME_HEADER_SIZE + 24
    assert frame_size(np.full((2, 3, 4), 300, np.int32)) == FRAME_HEADER_SIZE + 48
    assert frame_size(np.full((2, 3, 4), 300, np.int32), pack_bits=True) == FRAME_HEADER_SIZE + 27
    with pytest.raises(EncodeError) as frame_error:
        frame_size(np.array([[[0, -1]]]))
    with pytest.raises(EncodeError) as envelope_error:
        encode_routes(np.array([[[0, -1]]]))
    assert str(frame_error.value) == str(envelope_error.value)


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


def _encode_peak(encode: Any) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        result = encode()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


@pytest.mark.parametrize(("pack_bits", "scratch"), [(False, 64 * 1024), (True, 6 * 1024 * 1024)])
def test_bytes_frame_is_the_one_frame_sized_allocation(pack_bits: bool, scratch: int) -> None:
    # 16384 x 60 x 8 of 384 experts: a 15.7 MB frame (int16), 8.8 MB packed. Beside the frame, only the bit
    # packer's fixed scratch for one chunk (~4.6 MB at 9 bits). The frame used to be written into a NumPy buffer
    # and copied into bytes: twice the frame.
    routes = np.random.default_rng(3).integers(0, 384, size=(16384, 60, 8), dtype=np.int32)
    encode_routes_frame(routes[:64], num_experts=384, pack_bits=pack_bits)  # one-time costs: imports, caches
    peak, frame = _encode_peak(lambda: encode_routes_frame(routes, num_experts=384, pack_bits=pack_bits))
    assert type(frame) is bytes
    assert peak < len(frame) + scratch, (peak, len(frame))
    np.testing.assert_array_equal(decode_routes_frame(frame, num_experts=384), routes)
