"""Property tests for bit packing and the routes frame: round trips at every width, shape and source layout, the
kernel against the bit-by-bit reference, and the decoders' fuzzing promise (only DecodeError, never another
exception) for packed envelopes and frames."""

from __future__ import annotations

import base64
import functools
import json
import struct
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import decoded_or_none, in_layout
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bitref import pack_reference, unpack_reference
from r3wire import (
    EncodeError,
    R3WireError,
    bitpack,
    decode_routes,
    decode_routes_frame,
    encode_routes,
    encode_routes_frame,
)
from r3wire import frame as frame_module
from r3wire._base64 import b64decode_range, check_canonical
from r3wire.bitpack import MAX_BITS, pack_bits, unpack_bits, unpack_bits_from

pytestmark = pytest.mark.property

SOURCE_DTYPES = ["u1", "i1", "<u2", ">u2", "<i2", ">i2", "<i4", ">i4", "<u4", "<i8", ">u8"]


@st.composite
def ids_and_bits(draw: st.DrawFn) -> tuple[list[int], int]:
    bits = draw(st.integers(1, MAX_BITS))
    top = (1 << bits) - 1
    value = st.one_of(st.sampled_from([0, 1, top, top >> 1, (top >> 1) + 1]), st.integers(0, top))
    return draw(st.lists(value, max_size=40)), bits


@given(ids_and_bits(), st.sampled_from([-1, 10**9]))
def test_kernel_matches_reference(case: tuple[list[int], int], small_count: int) -> None:
    ids, bits = case
    default = bitpack._SMALL_COUNT
    bitpack._SMALL_COUNT = small_count  # type: ignore[misc]  # -1: the chunked kernel; 10**9: the packbits path
    try:
        stream = pack_bits(np.array(ids, dtype=np.int64), bits)
        back = unpack_bits(stream.tobytes(), len(ids), bits, np.int32)
    finally:
        bitpack._SMALL_COUNT = default  # type: ignore[misc]
    assert stream.tobytes() == pack_reference(ids, bits)
    assert back.tolist() == unpack_reference(stream.tobytes(), len(ids), bits) == ids


@given(st.integers(1, MAX_BITS), st.integers(1, 3), st.data())
def test_chunked_kernel_matches_reference(bits: int, chunk: int, data: Any) -> None:
    """Many chunks of a few groups each: chunk edges, the overlapping loads near the stream's end, the short group."""
    top = (1 << bits) - 1
    ids = data.draw(st.lists(st.one_of(st.sampled_from([0, top]), st.integers(0, top)), min_size=1, max_size=200))
    defaults = bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS
    bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS = -1, chunk  # type: ignore[misc]
    try:
        stream = pack_bits(np.array(ids, dtype=np.int64), bits)
        framed = np.concatenate([stream, np.full(9, 0xFF, np.uint8)])[: stream.size]  # bytes after it: not read
        back = unpack_bits(framed, len(ids), bits, np.int32)
    finally:
        bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS = defaults  # type: ignore[misc]
    assert stream.tobytes() == pack_reference(ids, bits)
    assert back.tolist() == ids


@st.composite
def routes_and_experts(draw: st.DrawFn) -> tuple[np.ndarray[Any, Any], int | None]:
    shape = draw(st.tuples(st.integers(0, 7), st.integers(1, 7), st.integers(1, 7)))  # layers, top_k >= 1
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(SOURCE_DTYPES)))
    limit = min(int(np.iinfo(dtype.type).max), 2**31 - 1)
    high = draw(st.one_of(st.sampled_from([0, 1, 7, 127, 255, 256, 383, 511, 32767, 32768, 2**31 - 1]), st.integers(0)))
    high = min(high, limit)
    boundary = [b for b in (0, high, high >> 1, (high >> 1) + 1) if b <= high]
    ids = st.one_of(st.sampled_from(boundary), st.integers(0, high))
    array: np.ndarray[Any, Any] = draw(hnp.arrays(dtype, shape, elements=ids))
    array = in_layout(draw, array)
    largest = int(array.max()) if array.size else 0
    num_experts = draw(st.one_of(st.none(), st.integers(largest + 1, 2**31)))
    return array, num_experts


@given(routes_and_experts())
def test_packed_envelope_round_trip_gives_the_unpacked_array(case: tuple[np.ndarray[Any, Any], int | None]) -> None:
    routes, num_experts = case
    envelope = encode_routes(routes, num_experts=num_experts, pack_bits=True)
    packed = decode_routes(orjson.dumps(envelope), num_experts=num_experts)
    plain = decode_routes(encode_routes(routes, num_experts=num_experts), num_experts=num_experts)
    assert packed.dtype == plain.dtype
    assert packed.shape == routes.shape
    assert np.array_equal(packed, plain)
    assert np.array_equal(packed, routes)
    assert packed.flags.writeable
    assert packed.flags.c_contiguous


@given(routes_and_experts(), st.booleans(), st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_frame_round_trip(case: tuple[np.ndarray[Any, Any], int | None], pack: bool, form: str) -> None:
    routes, num_experts = case
    frame = encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack)
    buffer: Any = {"bytes": frame, "bytearray": bytearray(frame), "memoryview": memoryview(frame)}[form]
    back = decode_routes_frame(buffer, num_experts=num_experts)
    expected = decode_routes(encode_routes(routes, num_experts=num_experts, pack_bits=pack))
    assert back.dtype == expected.dtype
    assert back.shape == routes.shape
    assert np.array_equal(back, routes)
    assert back.flags.c_contiguous
    assert back.flags.aligned


@given(routes_and_experts(), st.data())
def test_frame_encoder_agrees_with_encode_routes(case: tuple[np.ndarray[Any, Any], int | None], data: Any) -> None:
    """The frame's one-pass, chunked check and copy: the envelope's bytes for valid ids, its error for bad ones."""
    routes, num_experts = case
    if routes.size and data.draw(st.booleans(), label="break an id"):
        routes = np.array(routes)  # a writable copy, same dtype and memory order
        where = tuple(data.draw(st.integers(0, n - 1)) for n in routes.shape)
        info = np.iinfo(routes.dtype)
        candidates = (-1, int(info.min), num_experts, 2**31, int(info.max), 2**63)
        bad = data.draw(st.sampled_from([v for v in candidates if v is not None and info.min <= v <= info.max]))
        routes[where] = bad
    pack = data.draw(st.booleans(), label="pack_bits")
    small = data.draw(st.booleans(), label="tiny chunks")
    defaults = frame_module._CHUNK_IDS, bitpack._CHUNK_GROUPS, bitpack._SMALL_COUNT
    if small:  # many chunks even for hypothesis-sized arrays; an error may be found in any of them
        frame_module._CHUNK_IDS, bitpack._CHUNK_GROUPS, bitpack._SMALL_COUNT = 5, 2, -1  # type: ignore[misc]
    try:
        envelope = _outcome(lambda: encode_routes(routes, num_experts=num_experts, pack_bits=pack))
        frame = _outcome(lambda: encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack))
    finally:
        frame_module._CHUNK_IDS, bitpack._CHUNK_GROUPS, bitpack._SMALL_COUNT = defaults  # type: ignore[misc]
    if isinstance(envelope, tuple):
        assert frame == envelope  # the same field, expected and got
        return
    assert type(frame) is bytes
    assert frame[32:] == base64.b64decode(envelope["data"])


def _outcome(encode: Any) -> Any:
    """What ``encode()`` returns, or its EncodeError as ``(field, expected, got)``."""
    try:
        return encode()
    except EncodeError as error:
        return (error.field, error.expected, error.got)


@given(ids_and_bits(), st.booleans())
def test_pack_into_out_is_pack(case: tuple[list[int], int], chunked: bool) -> None:
    ids, bits = case
    default = bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS
    if chunked:
        bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS = -1, 2  # type: ignore[misc]
    try:
        source = np.array(ids, dtype=np.int64)
        out = np.full(bitpack.packed_nbytes(len(ids), bits), 0xA5, dtype=np.uint8)  # stale bytes must not leak
        written = pack_bits(source, bits, out=out)
    finally:
        bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS = default  # type: ignore[misc]
    assert np.shares_memory(written, out) or not len(ids)
    assert out.tobytes() == pack_reference(ids, bits)


def _only_decode_error(decode: Any, payload: Any) -> None:
    result = decoded_or_none(lambda: decode(payload))
    assert result is None or isinstance(result, np.ndarray)


PACKED = encode_routes(np.array([[[1, 256, 383], [0, 2, 300]]]), num_experts=384, pack_bits=True)
FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**40),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["uint8", "int16", "int32", "", "AAAA", "AQD+Bw==", PACKED["data"]]),
    st.lists(st.integers(-1, 2**64), max_size=4),
)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["set", "drop"]),
            st.sampled_from(["data", "shape", "dtype", "num_experts", "bits", "schema", "version"]),
            FIELD_VALUES,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_packed_envelopes_raise_only_decode_error(changes: list[tuple[str, str, Any]]) -> None:
    envelope = dict(PACKED)
    for action, key, value in changes:
        if action == "drop":
            envelope.pop(key, None)
        else:
            envelope[key] = value
    _only_decode_error(decode_routes, envelope)
    _only_decode_error(decode_routes, json.dumps(envelope).encode())


FRAMES = [
    encode_routes_frame(np.array([[[1, 256, 383], [0, 2, 300]]]), num_experts=384, pack_bits=True),
    encode_routes_frame(np.array([[[1, 256, 383], [0, 2, 300]]]), num_experts=384),
    encode_routes_frame(np.array([[[1, 5, 3]]]), pack_bits=True),
    encode_routes_frame(np.array([[[1, 5, 3]]])),
]


@given(
    st.sampled_from(FRAMES),
    st.lists(st.tuples(st.integers(0, 45), st.integers(0, 255)), max_size=4),
    st.integers(-3, 3),
)
def test_corrupted_frames_raise_only_decode_error(frame: bytes, flips: list[tuple[int, int]], resize: int) -> None:
    data = bytearray(frame)
    for where, value in flips:
        if where < len(data):
            data[where] = value
    if resize < 0:
        del data[resize:]
    else:
        data.extend(b"\x00" * resize)
    _only_decode_error(decode_routes_frame, bytes(data))
    _only_decode_error(decode_routes_frame, data)


@given(st.binary(max_size=80))
def test_arbitrary_bytes_after_the_magic_raise_only_decode_error(tail: bytes) -> None:
    _only_decode_error(decode_routes_frame, b"R3WF\x01" + tail)
    _only_decode_error(decode_routes_frame, tail)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 255))
def test_claimed_frame_shape_never_allocates_beyond_the_buffer(rows: int, layers: int, top_k: int, bits: int) -> None:
    header = struct.pack("<4sBBBBQQII", b"R3WF", 1, 3, bits, 0, rows, layers, top_k, 0)
    _only_decode_error(decode_routes_frame, header + b"\x00" * 16)


@given(st.integers(1, MAX_BITS), st.integers(1, 3), st.data())
def test_packed_envelope_decodes_range_by_range(bits: int, chunk: int, data: Any) -> None:
    """A packed envelope's base64 decoded a few groups at a time (ranges that start mid-quantum, 8 bytes of
    lookahead, the short last group) gives the ids that unpacking the whole decoded stream gives."""
    top = (1 << bits) - 1
    ids = data.draw(st.lists(st.one_of(st.sampled_from([0, top]), st.integers(0, top)), min_size=1, max_size=200))
    text = base64.b64encode(pack_bits(np.array(ids, dtype=np.int64), bits).tobytes()).decode("ascii")
    nbytes = bitpack.packed_nbytes(len(ids), bits)
    read = functools.partial(b64decode_range, check_canonical(text, nbytes), nbytes)
    defaults = bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS
    bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS = -1, chunk  # type: ignore[misc]
    try:
        back = unpack_bits_from(read, len(ids), bits, np.int32)
    finally:
        bitpack._SMALL_COUNT, bitpack._CHUNK_GROUPS = defaults  # type: ignore[misc]
    assert back.tolist() == ids


def _read_only(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    array.flags.writeable = False
    return array


# Arguments of every kind a caller outside the type checker can pass: each public bitpack function either returns
# the right result for them or raises R3WireError naming the argument, never another exception (issue: TypeError,
# ValueError and BufferError from count, buffer, dtype and read; packed_nbytes(2.5, 3) returned 1.0).
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    st.binary(max_size=8),
    st.lists(st.integers(-1, 600), max_size=4),
    st.sampled_from(
        [
            np.int64(3),
            np.uint16(600),
            np.int8(-1),
            np.bool_(True),
            np.float64(3.0),
            np.int16,
            float,
            object(),
            memoryview(bytes(8))[::2],
            *map(
                _read_only,  # shared by every example: none may write into it (a float32 out of 12 bytes would)
                [
                    np.zeros(4, dtype=object),
                    np.zeros(8, dtype=np.uint8)[::2],
                    np.zeros((2, 3), dtype=np.uint8, order="F"),
                    np.zeros(3, dtype=np.float32),
                ],
            ),
        ]
    ),
)
REPLACE = st.sampled_from([False, False, True])  # each argument replaced in a third of the examples


def or_any(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` in two thirds of the examples, anything at all in the rest (st.one_of would weigh each of
    ANY_VALUE's many branches as much as ``valid``)."""
    return REPLACE.flatmap(lambda replace: ANY_VALUE if replace else valid)


DTYPE_VALUES = st.one_of(
    or_any(st.sampled_from(["u1", "i2", "<i2", ">i4", "u4", "<i8", ">u8", np.int16, np.uint32, np.dtype(">i4")])),
    st.sampled_from(["f4", "O", "M8", "V3", "S2", "i4,", "foo", {"names": 1}, [("a", "i4")], [("a", "i4")] * 2]),
)


def _bytes_of(buffer: Any) -> bytes:
    return buffer.tobytes() if isinstance(buffer, np.ndarray) else bytes(memoryview(buffer))


def _argument_outcome(call: Any) -> Any:
    """``call()``'s result, or None when it raised R3WireError with a message and a string field."""
    return decoded_or_none(call, R3WireError, named=True)


@st.composite
def streams(draw: st.DrawFn) -> tuple[Any, Any, Any]:
    """(buffer, count, bits): a valid stream in some bytes-like form, or any of its three parts replaced."""
    bits = draw(st.integers(1, MAX_BITS))
    ids = draw(st.lists(st.integers(0, (1 << bits) - 1), max_size=30))
    stream = pack_reference(ids, bits)
    forms = [stream, bytearray(stream), memoryview(stream), np.frombuffer(stream, np.uint8)]
    if len(stream) % 2 == 0:
        forms.append(np.frombuffer(stream, ">i2").reshape(-1, 1))  # any C-contiguous array is read as its bytes
    buffer: Any = draw(st.sampled_from(forms))
    count: Any = len(ids)
    width: Any = bits
    if draw(REPLACE, label="replace the buffer"):
        buffer = draw(st.one_of(st.binary(max_size=40), ANY_VALUE))
    if draw(REPLACE, label="replace count"):
        count = draw(st.one_of(st.integers(-3, 2**62), ANY_VALUE))
    if draw(REPLACE, label="replace bits"):
        width = draw(ANY_VALUE)
    return buffer, count, width


@given(streams(), DTYPE_VALUES, or_any(st.just("data")))
def test_unpack_bits_gives_the_ids_or_an_r3wire_error(case: tuple[Any, Any, Any], dtype: Any, field: Any) -> None:
    buffer, count, bits = case
    result = _argument_outcome(lambda: unpack_bits(buffer, count, bits, dtype, field=field))
    if result is not None:
        assert result.dtype == np.dtype(dtype).newbyteorder("=")
        assert result.tolist() == unpack_reference(_bytes_of(buffer), int(count), int(bits))


@given(streams(), DTYPE_VALUES, st.data())
def test_unpack_bits_from_gives_the_ids_or_an_r3wire_error(case: tuple[Any, Any, Any], dtype: Any, data: Any) -> None:
    buffer, count, bits = case
    if isinstance(count, int) and count > 10**6:
        count = data.draw(st.integers(10**6 - 8, 10**6))  # the output is allocated before the first read
    kind = data.draw(st.sampled_from(["honest", "constant", "not callable"]))
    read: Any
    if kind == "honest":  # the ranges of buffer's bytes: short past its end
        source = _bytes_of(buffer) if isinstance(buffer, (bytes, bytearray, memoryview, np.ndarray)) else b""
        read = functools.partial(lambda whole, start, stop: whole[start:stop], source)
    elif kind == "constant":
        value = data.draw(st.one_of(st.binary(max_size=40), ANY_VALUE))
        read = functools.partial(lambda value, start, stop: value, value)
    else:
        # Not callable: a callable drawn here (a NumPy type is one) is a read function of the caller's, whose own
        # error unpack_bits_from lets through, as documented.
        read = data.draw(ANY_VALUE.filter(lambda value: not callable(value)))
    result = _argument_outcome(lambda: unpack_bits_from(read, count, bits, dtype))
    if result is not None:
        whole = read(0, bitpack.packed_nbytes(count, bits))
        assert result.tolist() == unpack_reference(_bytes_of(whole), int(count), int(bits))


@given(or_any(st.one_of(st.integers(-3, 1000), st.integers(-3, 2**62))), or_any(st.integers(-1, 33)))
def test_packed_nbytes_gives_the_size_or_an_r3wire_error(count: Any, bits: Any) -> None:
    result = _argument_outcome(lambda: bitpack.packed_nbytes(count, bits))
    if result is not None:
        assert type(result) is int
        assert result == -(-int(count) * int(bits) // 8)


@st.composite
def pack_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """pack_bits' arguments: each valid (ids in or out of range, any integer dtype) or anything at all."""
    bits = draw(st.integers(1, MAX_BITS))
    dtype = draw(st.sampled_from(SOURCE_DTYPES))
    info = np.iinfo(np.dtype(dtype))
    values = st.one_of(st.integers(0, min((1 << bits) - 1, int(info.max))), st.integers(int(info.min), int(info.max)))
    ids: Any = np.array(draw(st.lists(values, max_size=20)), dtype=dtype)
    arguments: dict[str, Any] = {"ids": ids, "bits": bits}
    if draw(REPLACE, label="replace ids"):
        arguments["ids"] = draw(st.one_of(ANY_VALUE, st.just(ids.astype(np.float64))))
    if draw(REPLACE, label="replace bits"):
        arguments["bits"] = draw(ANY_VALUE)
    arguments["checked"] = draw(or_any(st.booleans()))
    arguments["below"] = draw(or_any(st.one_of(st.none(), st.integers(-1, 2**31 + 1))))
    size = (ids.size * bits + 7) // 8
    out = st.sampled_from([None, np.full(size, 0xA5, np.uint8), np.zeros(size + 1, np.uint8), np.zeros(size, object)])
    arguments["out"] = draw(or_any(out))
    return arguments


@given(pack_arguments())
def test_pack_bits_gives_the_stream_or_an_r3wire_error(arguments: dict[str, Any]) -> None:
    result = _argument_outcome(lambda: pack_bits(**arguments))
    if result is None:
        return
    ids, bits, below = arguments["ids"], int(arguments["bits"]), arguments["below"]
    top = min(1 << bits, 1 << 62 if below is None else int(below))
    fits = all(0 <= i < top for i in ids.reshape(-1).tolist())
    assert fits or arguments["checked"]  # out-of-range ids are refused unless the caller vouched for them
    if fits:
        assert result.tobytes() == pack_reference(ids.reshape(-1).tolist(), bits)
