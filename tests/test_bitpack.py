"""r3wire.bitpack: the kernel against the one-bit-at-a-time reference, at every width, count and chunking."""

from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest

from bitref import pack_reference, unpack_reference
from r3wire import DecodeError, EncodeError, R3WireError, bitpack, decode_routes, encode_routes
from r3wire.bitpack import MAX_BITS, pack_bits, packed_nbytes, unpack_bits

ALL_BITS = range(1, MAX_BITS + 1)
COUNTS = [0, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 200]


@pytest.fixture(params=["kernel", "small"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through the chunked kernel and through the few-ids np.packbits path, whatever the count."""
    monkeypatch.setattr(bitpack, "_SMALL_COUNT", -1 if request.param == "kernel" else 10**9)
    return str(request.param)


def _ids(count: int, bits: int, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed * 100 + bits)
    ids = rng.integers(0, 1 << bits, size=count, dtype=np.int64)
    if count >= 2:  # the extremes of the field, where a lost or leaked bit shows
        ids[0], ids[-1] = (1 << bits) - 1, 0
    return ids


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.usefixtures("path")
def test_pack_matches_reference(bits: int) -> None:
    for count in COUNTS:
        ids = _ids(count, bits)
        packed = pack_bits(ids, bits)
        assert packed.dtype == np.uint8
        assert packed.ndim == 1
        assert packed.tobytes() == pack_reference(ids.tolist(), bits), count


@pytest.mark.parametrize("bits", ALL_BITS)
@pytest.mark.usefixtures("path")
def test_unpack_matches_reference(bits: int) -> None:
    dtype = np.uint8 if bits <= 8 else np.int16 if bits <= 15 else np.int32
    for count in COUNTS:
        ids = _ids(count, bits, seed=1)
        stream = pack_reference(ids.tolist(), bits)
        back = unpack_bits(stream, count, bits, dtype)
        assert back.dtype == np.dtype(dtype)
        assert back.tolist() == unpack_reference(stream, count, bits) == ids.tolist()
        assert back.flags.writeable
        assert back.flags.c_contiguous


@pytest.mark.parametrize("bits", [1, 3, 7, 8, 9, 12, 15, 16, 20, 29, 31])
def test_chunk_boundaries(bits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bitpack, "_CHUNK_GROUPS", 3)  # many chunks, a short last chunk and a short last group
    monkeypatch.setattr(bitpack, "_SMALL_COUNT", -1)
    for count in (47, 48, 49, 100):
        ids = _ids(count, bits, seed=2)
        stream = pack_bits(ids, bits)
        assert stream.tobytes() == pack_reference(ids.tolist(), bits)
        assert unpack_bits(stream, count, bits, np.int64).tolist() == ids.tolist()


@pytest.mark.usefixtures("path")
def test_eight_bits_is_the_bytes_themselves() -> None:
    ids = np.arange(256, dtype=np.uint8)
    assert pack_bits(ids, 8).tobytes() == ids.tobytes()


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("source", ["u1", "i1", "<u2", ">u2", "<i2", ">i4", "<u8", ">i8"])
def test_any_integer_source_dtype_and_layout(source: str) -> None:
    ids = _ids(60, 7).astype(source).reshape(3, 4, 5)
    expected = pack_reference(ids.reshape(-1).tolist(), 7)
    assert pack_bits(ids, 7).tobytes() == expected
    assert pack_bits(np.asfortranarray(ids), 7).tobytes() == expected
    assert pack_bits(ids.transpose(2, 1, 0), 7).tobytes() == pack_reference(ids.transpose(2, 1, 0).ravel().tolist(), 7)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("form", ["bytes", "bytearray", "memoryview", "ndarray"])
def test_unpack_buffer_forms(form: str) -> None:
    ids = _ids(30, 9)
    stream = pack_reference(ids.tolist(), 9)
    buffer: Any = {
        "bytes": stream,
        "bytearray": bytearray(stream),
        "memoryview": memoryview(stream),
        "ndarray": np.frombuffer(stream, np.uint8),
    }[form]
    back = unpack_bits(buffer, 30, 9, np.int16)
    assert back.tolist() == ids.tolist()
    assert back.flags.writeable


MA: Any = np.ma  # untyped in the stubs of some NumPy releases


@pytest.mark.parametrize(
    ("buffer", "got"),
    [
        ("abcd", "str"),
        ([1, 0], "list"),
        (None, "NoneType"),
        (memoryview(bytes(8))[::2], "a non-contiguous memoryview"),  # was a BufferError
        (np.zeros(8, np.uint8)[::2], "a non-contiguous ndarray"),  # was silently copied
        (np.zeros((2, 3), np.uint8, order="F"), "a non-contiguous ndarray"),
        (np.array([b"ab", 1], dtype=object), "ndarray of format 'O' (object pointers)"),
        (np.zeros(8, bool), "ndarray of format '?'"),
        (MA.masked_array(np.zeros(8, np.uint8)), "a masked array"),
        (np.uint64(7), "uint64"),
    ],
)
def test_unpack_refuses_a_buffer_that_is_not_a_contiguous_bytes_like(buffer: Any, got: str) -> None:
    with pytest.raises(DecodeError, match=r"frame\.data must be a C-contiguous bytes-like object") as info:
        unpack_bits(buffer, 3, 9, np.int16, field="frame.data")
    assert info.value.field == "frame.data"
    assert info.value.got is not None
    assert info.value.got.startswith(got)


def test_unpack_reads_a_contiguous_array_of_any_dtype_as_its_bytes() -> None:
    ids = _ids(40, 9)
    stream = pack_bits(ids, 9)  # 45 bytes
    wide = np.zeros(48, dtype=np.uint8)
    wide[:45] = stream
    as_int16 = wide.view(">i2").reshape(4, 6)
    assert unpack_bits(as_int16[:, :], 42, 9, np.int16).tolist() == [*ids.tolist(), 0, 0]


def test_packed_nbytes() -> None:
    assert [packed_nbytes(n, 9) for n in (0, 1, 7, 8, 9)] == [0, 2, 8, 9, 11]
    assert packed_nbytes(8192 * 48 * 8, 7) == 8192 * 48 * 7


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("bits", [1, 5, 9, 13, 31])
def test_every_pad_bit_is_checked(bits: int) -> None:
    for count in (1, 3, 5, 7):
        stream = bytearray(pack_reference([0] * count, bits))
        for j in range(count * bits, 8 * len(stream)):
            bad = bytearray(stream)
            bad[j // 8] |= 1 << (j % 8)
            with pytest.raises(DecodeError, match="pad bits") as info:
                unpack_bits(bytes(bad), count, bits, np.int32)
            assert info.value.field == "data"


def test_wrong_length_is_refused_before_unpacking() -> None:
    with pytest.raises(DecodeError, match=r"data must be 9 bytes \(8 ids of 9 bits\), got 8 bytes"):
        unpack_bits(b"\0" * 8, 8, 9, np.int16)
    with pytest.raises(DecodeError) as info:
        unpack_bits(b"\0" * 10, 8, 9, np.int16, field="frame.data")
    assert info.value.field == "frame.data"


@pytest.mark.parametrize("count", ["3", None, 3.0, 1000.0, 2.5, -1, True, np.bool_(True), 2**60 - 7, 2**80])
def test_bad_count(count: Any) -> None:
    # Each was a TypeError (slice indices, sequence of integers), or a DecodeError for a buffer of "-1 bytes".
    nbytes = 1125 if count == 1000.0 else 4
    with pytest.raises(DecodeError, match=r"count must be an integer in 0\.\.1152921504606846968, got ") as info:
        unpack_bits(bytes(nbytes), count, 9, np.int16)
    assert info.value.field == "count"
    with pytest.raises(DecodeError, match=r"count must be an integer in 0\.\.1152921504606846968, got ") as info:
        bitpack.unpack_bits_from(lambda start, stop: bytes(stop - start), count, 9, np.int16)
    assert info.value.field == "count"


def test_count_may_be_a_numpy_integer() -> None:
    ids = _ids(600, 9)
    stream = pack_bits(ids, 9)
    counts: list[Any] = [np.int64(600), np.uint16(600)]  # typed loosely: NumPy 1.24's stubs have no int here
    for count in counts:
        assert unpack_bits(stream, count, 9, np.int16).tolist() == ids.tolist()
    eight: Any = np.int32(8)
    nine: Any = np.uint8(9)
    assert packed_nbytes(eight, nine) == 9


@pytest.mark.parametrize(
    ("count", "bits", "field"),
    [(2.5, 3, "count"), (-1, 3, "count"), (True, 3, "count"), ("8", 9, "count"), (8, 0, "bits"), (8, 9.0, "bits")],
)
def test_packed_nbytes_checks_its_arguments(count: Any, bits: Any, field: str) -> None:
    with pytest.raises(R3WireError, match=f"{field} must be an integer") as info:
        packed_nbytes(count, bits)  # packed_nbytes(2.5, 3) was 1.0
    assert info.value.field == field


@pytest.mark.parametrize("bits", [0, 32, -1, True, 1.0, "9", None])
def test_bad_bits(bits: Any) -> None:
    with pytest.raises(EncodeError) as info:
        pack_bits(np.zeros(3, np.int32), bits)
    assert info.value.field == "bits"
    with pytest.raises(DecodeError) as decode_info:
        unpack_bits(b"", 0, bits, np.int32)
    assert decode_info.value.field == "bits"


def test_pack_refuses_ids_that_do_not_fit() -> None:
    with pytest.raises(EncodeError, match=r"ids must be integers in 0\.\.511 \(9 bits\), got 512"):
        pack_bits(np.array([0, 512]), 9)
    with pytest.raises(EncodeError, match="got -1"):
        pack_bits(np.array([0, -1], dtype=np.int8), 9)
    with pytest.raises(EncodeError, match="an integer NumPy array"):
        pack_bits(np.zeros(3), 9)
    with pytest.raises(EncodeError, match="an integer NumPy array"):
        pack_bits([1, 2], 9)  # type: ignore[arg-type]


def test_unpack_refuses_a_dtype_too_narrow() -> None:
    with pytest.raises(R3WireError, match="holds 9-bit ids"):
        unpack_bits(b"\0" * 9, 8, 9, np.uint8)
    with pytest.raises(R3WireError, match="holds 16-bit ids"):
        unpack_bits(b"\0" * 16, 8, 16, np.int16)
    with pytest.raises(R3WireError, match="holds 3-bit ids"):
        unpack_bits(b"\0" * 3, 8, 3, np.float32)


@pytest.mark.parametrize(
    ("dtype", "got"),
    [
        ("foo", "'foo' (data type 'foo' not understood)"),  # was a TypeError from np.dtype
        ({"names": 1}, "{'names': 1} ("),
        ([("a", "i4"), ("a", "i4")], "[('a', 'i4'), ('a', 'i4')] ("),  # a ValueError from np.dtype
        (None, "None"),  # np.dtype(None) is float64
        (2.5, "2.5 ("),
    ],
)
def test_unpack_refuses_what_is_not_a_dtype(dtype: Any, got: str) -> None:
    with pytest.raises(R3WireError, match="dtype must be an integer dtype that holds 9-bit ids") as info:
        unpack_bits(bytes(4), 3, 9, dtype)
    assert info.value.field == "dtype"
    assert info.value.got is not None
    assert info.value.got.startswith(got)
    with pytest.raises(R3WireError, match="dtype must be an integer dtype") as info:
        bitpack.unpack_bits_from(lambda start, stop: bytes(stop - start), 3, 9, dtype)
    assert info.value.got is not None
    assert info.value.got.startswith(got)


@pytest.mark.parametrize("count", [3, 600])  # the few-ids path and the chunked kernel
@pytest.mark.parametrize(
    ("read", "got"),
    [
        (lambda start, stop: b"", "0 bytes"),  # was a ValueError (cannot reshape) from the kernel
        (lambda start, stop: bytes(stop - start + 1), "{n_plus_1} bytes"),
        (lambda start, stop: bytes(stop - start - 1), "{n_minus_1} bytes"),
        (lambda start, stop: "x" * (stop - start), "str"),
        (lambda start, stop: None, "NoneType ("),
        (lambda start, stop: memoryview(bytes(2 * (stop - start)))[::2], "a non-contiguous memoryview"),
    ],
)
def test_unpack_from_refuses_a_read_that_does_not_return_the_range(read: Any, got: str, count: int) -> None:
    nbytes = packed_nbytes(count, 9)  # the first read asks for the whole stream at these sizes
    with pytest.raises(
        DecodeError, match=rf"envelope\.data must be .*from read for its bytes 0\.\.{nbytes}, got "
    ) as info:
        bitpack.unpack_bits_from(read, count, 9, np.int16, field="envelope.data")
    assert info.value.field == "envelope.data"
    assert info.value.got is not None
    assert info.value.got.startswith(got.format(n_plus_1=nbytes + 1, n_minus_1=nbytes - 1))


@pytest.mark.parametrize("read", [None, b"\0\0\0\0", 3])
def test_unpack_from_refuses_a_read_that_is_not_callable(read: Any) -> None:
    with pytest.raises(DecodeError, match="read must be a callable") as info:
        bitpack.unpack_bits_from(read, 3, 9, np.int16)
    assert info.value.field == "read"


@pytest.mark.parametrize("field", [None, 5, b"data", ["data"]])
def test_field_must_be_a_string(field: Any) -> None:
    # It names the stream in every later error: 5 gave "5 must be 4 bytes", an error whose field was an int.
    with pytest.raises(R3WireError, match="field must be a string") as info:
        unpack_bits(bytes(3), 3, 9, np.int16, field=field)
    assert info.value.field == "field"
    with pytest.raises(R3WireError, match="field must be a string"):
        bitpack.unpack_bits_from(lambda start, stop: bytes(stop - start), 3, 9, np.int16, field=field)


def test_pack_into_a_reused_buffer() -> None:
    ids = np.arange(5000, dtype=np.int32) % 384
    want = pack_bits(ids, 9)
    out = np.full(want.size, 0xFF, dtype=np.uint8)
    written = pack_bits(ids, 9, out=out)
    assert np.shares_memory(written, out)
    assert out.tobytes() == want.tobytes() == pack_reference(ids.tolist(), 9)


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (np.empty(10, dtype=np.uint8), "out must be 12 bytes, got 10 bytes"),
        (np.empty(24, dtype=np.uint8)[::2], "out must be a writable, C-contiguous NumPy array"),
        (bytearray(12), "out must be a writable, C-contiguous NumPy array of numbers, got bytearray"),
        (np.empty(12, dtype=object), "out must be .*NumPy array of numbers, got ndarray of format 'O'"),  # TypeError
        (np.empty(12, dtype=bool), "out must be .*NumPy array of numbers, got ndarray of format '\\?'"),
    ],
)
def test_pack_into_a_wrong_buffer(out: Any, message: str) -> None:
    with pytest.raises(EncodeError, match=message):
        pack_bits(np.arange(12), 8, out=out)


def test_below_bounds_the_ids_more_tightly_than_bits() -> None:
    ids = np.array([0, 383, 384], dtype=np.uint16)
    assert pack_bits(ids[:2], 9, below=384).size == 3
    with pytest.raises(EncodeError, match=r"ids must be integers in 0..383 \(below=384\), got 384"):
        pack_bits(ids, 9, below=384)
    with pytest.raises(EncodeError, match="below must be an integer"):
        pack_bits(ids, 9, below=0)


@pytest.mark.parametrize("checked", ["no", 0, 1, None, np.array([True])])
def test_checked_must_be_a_bool(checked: Any) -> None:
    # "no" is truthy: it skipped the range check, packing 512 as 0 without an error.
    with pytest.raises(EncodeError, match="checked must be a bool") as info:
        pack_bits(np.array([1, 512]), 9, checked=checked)
    assert info.value.field == "checked"


def test_checked_may_be_a_numpy_bool() -> None:
    yes: Any = np.bool_(True)  # Any: typed as bool, as every flag of the API; np.bool_ is accepted at run time
    no: Any = np.bool_(False)
    assert pack_bits(np.array([1, 2]), 9, checked=yes).tolist() == [1, 4, 0]
    with pytest.raises(EncodeError, match="ids must be"):
        pack_bits(np.array([1, 512]), 9, checked=no)


@pytest.mark.parametrize("below", ["x", 0, 2**31 + 1, 3.0, True])
def test_below_is_checked_even_when_the_ids_are_not(below: Any) -> None:
    with pytest.raises(EncodeError, match=r"below must be an integer in 1\.\.2147483648, got ") as info:
        pack_bits(np.array([1, 2]), 9, checked=True, below=below)
    assert info.value.field == "below"


@pytest.mark.parametrize("dtype", ["i1", "<i2", ">i4", "<i8"])
def test_one_pass_check_still_sees_negative_ids(dtype: str) -> None:
    ids = np.zeros(2000, dtype=dtype)
    ids[1234] = -1  # all ones when viewed as unsigned: at least 2**(width - 1), above every bits' limit
    for bits in (1, 8, 9, 31):
        with pytest.raises(EncodeError, match="got -1"):
            pack_bits(ids, bits)
        with pytest.raises(EncodeError, match="got -1"):
            pack_bits(ids[1230:1240], bits)  # the small-count path


def _decode_overhead(rows: int) -> tuple[int, int]:
    """Bytes a packed envelope's decode allocates besides its output (tracemalloc peak), and the stream's size."""
    routes = np.random.default_rng(rows).integers(0, 384, size=(rows, 60, 8), dtype=np.int32)
    envelope = encode_routes(routes, num_experts=384, pack_bits=True)
    gc.collect()
    tracemalloc.start()
    try:
        decoded = decode_routes(envelope, num_experts=384)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(decoded, routes)
    return peak - decoded.nbytes, bitpack.packed_nbytes(routes.size, 9)


def test_packed_envelope_decode_holds_no_stream_sized_buffer() -> None:
    # The base64 is decoded range by range into the unpacker: what a decode holds besides its output is bounded
    # scratch, the same at 4x the size (decoding the whole stream first made it grow by the stream's size).
    small, _ = _decode_overhead(4096)
    large, stream = _decode_overhead(16384)
    assert large < stream
    assert large <= small + (1 << 20)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # NumPy's word on np.matrix itself
def test_subclass_buffers_are_read_as_their_bytes_and_masked_ones_refused() -> None:
    ids = _ids(600, 9)
    stream = pack_bits(ids, 9)
    matrix: Any = np.asmatrix(stream)  # 2-d by its class's rules: reshape(-1) alone keeps it a matrix
    assert unpack_bits(matrix, 600, 9, np.int16).tolist() == ids.tolist()
    out: Any = np.asmatrix(np.zeros(packed_nbytes(600, 9), np.uint8))
    written = pack_bits(ids, 9, out=out)
    assert written.ndim == 1
    assert written.tobytes() == stream.tobytes()
    for count in (3, 600):  # the small path and the chunked one
        assert pack_bits(np.asmatrix(ids[:count]), 9).tobytes() == pack_bits(ids[:count], 9).tobytes()
    ma: Any = np.ma
    with pytest.raises(DecodeError, match="masked array"):
        unpack_bits(ma.masked_array(stream), 600, 9, np.int16)
    with pytest.raises(EncodeError, match="without a mask"):
        pack_bits(ma.masked_array(ids), 9)


def test_a_count_this_process_cannot_hold_is_refused_by_name() -> None:
    def never(start: int, stop: int) -> bytes:  # the output is allocated before anything is read
        raise AssertionError

    with pytest.raises(R3WireError, match=r"^count must be a count whose ids this process can allocate") as info:
        bitpack.unpack_bits_from(never, 2**56, 9, np.int16)
    assert info.value.field == "count"
