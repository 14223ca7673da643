"""The routes frame: routed-expert ids as raw bytes, for transports that carry bytes (msgpack, ZMQ, Ray, HTTP
``application/octet-stream``): a fixed 32-byte little-endian header, then the ids. No base64, no JSON.

=======  ====  ===========  ===============================================================
offset   size  field        value
=======  ====  ===========  ===============================================================
0        4     magic        ``b"R3WF"``
4        1     version      1
5        1     dtype        1 = uint8, 2 = int16, 3 = int32 (the dtype the ids decode to)
6        1     bits         0 = ids stored as ``dtype``; 1..31 = bit-packed, this many bits each
7        1     reserved     0
8        8     rows         u64
16       8     layers       u64
24       4     top_k        u32
28       4     num_experts  u32; 0 = not declared
32       ...   data         exactly the bytes the header implies; nothing after them
=======  ====  ===========  ===============================================================

The data starts 32 bytes in, so an aligned buffer gives an aligned int32 view. After its own fixed fields
(magic, version, header size, dtype code, reserved) the header goes through the envelope's header reader
(:func:`r3wire._envelope.check_header`): the same rules in the same order, and a failed rule raises the same
error naming the same field. The spec with golden vectors is ``docs/bitpack-and-frame.md``.
"""

from __future__ import annotations

import array
import io
import mmap
import struct
from dataclasses import dataclass
from typing import Any, Final, NoReturn, TypeAlias, overload

import numpy as np

from r3wire import bitpack
from r3wire._arraylike import as_numpy
from r3wire._envelope import ABSENT, check_header
from r3wire._routecheck import (
    ROUTES_NDIM,
    check_ids,
    optional_num_experts,
    prepare_routes,
)
from r3wire._validate import byte_buffer, optional_max_elements
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
from r3wire.schema import (
    KEY_DATA,
    KEY_DTYPE,
    KEY_VERSION,
    ROUTE_DTYPES,
    WIRE_DTYPES,
    _version_advice,
    bits_for_max_id,
    dtype_for_max_id,
)

__all__ = [
    "FRAME_HEADER_SIZE",
    "FRAME_MAGIC",
    "FRAME_VERSION",
    "decode_routes_frame",
    "encode_routes_frame",
    "frame_size",
]

FRAME_MAGIC: Final = b"R3WF"
FRAME_VERSION: Final = 1
FRAME_HEADER_SIZE: Final = 32
_HEADER: Final = struct.Struct("<4sBBBBQQII")
_DTYPE_CODES: Final[dict[str, int]] = {"uint8": 1, "int16": 2, "int32": 3}
_DTYPE_NAMES: Final[dict[int, str]] = {code: name for name, code in _DTYPE_CODES.items()}
_MAX_TOP_K: Final = (1 << 32) - 1
# Ids per chunk of the encoder's check-then-copy: 1 MiB of int32 source, read from memory once, stays in cache
# between the max() that checks it and the copy that narrows it. Encode (out=) / memcpy of the int32 source,
# medians of interleaved rounds, W1 / K2, on two machines: a 2-core EPYC (1 MiB L2, 32 MiB L3): 1 << 16 ids
# 1.47x / 1.26x, 1 << 18 0.89x / 1.06x, 1 << 20 0.77x / 1.06x, unchunked (two passes over memory) 0.79x / 1.42x;
# a 2-core Xeon (2 MiB L2 per core): 1 << 16 0.95x / 0.97x, 1 << 17 0.89x / 0.96x, 1 << 18 0.93x / 0.97x,
# 1 << 19 1.07x / 0.98x, 1 << 20 1.21x / 1.07x. 1 << 18 is within 0.12x of the best on both; 1 << 20 loses 0.3x
# on the Xeon, where a 4 MiB chunk spills out of L2.
_CHUNK_IDS: Final = 1 << 18

assert _HEADER.size == FRAME_HEADER_SIZE


@dataclass(frozen=True)
class _Plan:
    """What the encoder writes for one ``routes``: decided from the header rules, and the ids only when needed."""

    arr: np.ndarray[Any, Any]
    ids: np.ndarray[Any, Any]  # arr's memory as unsigned integers (flat when C-contiguous)
    dtype: str
    bits: int | None
    num_experts: int | None  # as recorded: None = not declared
    limit: int  # ids at or above this break a rule; 0 = already checked
    nbytes: int  # of the data, without the header
    arguments: tuple[int | None, bool]  # the caller's num_experts and pack_bits, to rebuild an error


def _plan(routes: Any, num_experts: int | None, pack_bits: bool) -> _Plan:
    """Check everything but the ids; read the ids (one ``max()``) only when the dtype depends on the largest."""
    arr = as_numpy(routes, field="routes")
    # The argument, dtype and shape rules of encode_routes without reading an id (no rows are given to it).
    declared = prepare_routes(arr[:0] if arr.ndim == ROUTES_NDIM else arr, num_experts=num_experts, pack_bits=pack_bits)
    top_k = arr.shape[2]
    if top_k > _MAX_TOP_K:  # only an empty array can be this wide; the frame's field is 32 bits
        raise EncodeError.make("routes.shape[2]", f"at most {_MAX_TOP_K} in a frame", top_k)
    ids = _unsigned(arr)
    # Ids at or above this break a rule of prepare_routes: below num_experts and 2**31; and, viewed as unsigned,
    # a negative id is at least 2**(width - 1). So one max() per id checks them all.
    limit = min(declared.num_experts or 1 << 31, 1 << (8 * arr.dtype.itemsize - (arr.dtype.kind == "i")))
    if declared.num_experts is not None:
        name, bits = declared.dtype, declared.bits
        if limit == 1 << (8 * arr.dtype.itemsize):  # an unsigned source (vLLM's uint8) can hold no id this large
            limit = 0
    else:  # the dtype and bits follow from the largest id: one pass to find it before writing any
        high = int(ids.max()) if ids.size else 0
        if high >= limit:
            _raise_encode_error(arr, num_experts, pack_bits)
        name = dtype_for_max_id(high)
        bits = bits_for_max_id(high) if pack_bits else None
        limit = 0  # checked
    nbytes = ids.size * WIRE_DTYPES[name].itemsize if bits is None else bitpack.packed_nbytes(ids.size, bits)
    return _Plan(arr, ids, name, bits, declared.num_experts, limit, nbytes, (num_experts, pack_bits))


def frame_size(routes: Any, *, num_experts: int | None = None, pack_bits: bool = False) -> int:
    """The size in bytes of the frame :func:`encode_routes_frame` would return for these arguments.

    For sizing a buffer to pass as ``out=``. With ``num_experts`` it reads no id: the size follows from the shape
    and the expert count, in constant time. Without it the dtype (and bits) depend on the largest id, so it reads
    every id once (one ``max()``, about a memcpy of the source), as the encoder itself must; then
    ``encode_routes_frame`` reads them again. Pass ``num_experts`` when you know it.

    Args:
        routes: integer ids ``[rows, layers, top_k]`` (NumPy array, torch tensor or nested lists).
        num_experts: the model's expert count, as given to :func:`encode_routes_frame`.
        pack_bits: as given to :func:`encode_routes_frame`.

    Returns:
        ``32 + len(data)``: the header and the ids' bytes.

    Raises:
        EncodeError: the arguments, dtype or shape break a rule of :func:`r3wire.encode_routes`, or (without
            ``num_experts``, the only case where ids are read) an id does. With ``num_experts`` the ids are
            checked by the encoder, not here.
    """
    return FRAME_HEADER_SIZE + _plan(routes, num_experts, pack_bits).nbytes


# Writable, C-contiguous buffers ``out=`` takes; at run time any object exporting such a buffer is accepted.
_WritableBuffer: TypeAlias = "bytearray | memoryview | mmap.mmap | array.array[Any] | np.ndarray[Any, Any]"


@overload
def encode_routes_frame(
    routes: Any, *, num_experts: int | None = None, pack_bits: bool = False, out: None = None
) -> bytes: ...


@overload
def encode_routes_frame(
    routes: Any, *, num_experts: int | None = None, pack_bits: bool = False, out: _WritableBuffer
) -> memoryview: ...


def encode_routes_frame(
    routes: Any, *, num_experts: int | None = None, pack_bits: bool = False, out: _WritableBuffer | None = None
) -> bytes | memoryview:
    """Encode routed-expert ids as a routes frame: the 32-byte header, then the ids' bytes.

    Takes the same arguments, applies the same checks and chooses the same dtype and bits as
    :func:`r3wire.encode_routes`; the data is the bytes that envelope's base64 would carry.

    By default the frame is returned as ``bytes`` (picklable, hashable, for any transport). For large frames the
    fresh ``bytes`` object costs page faults on every call (~25 ms for a 42 MB Kimi K2 frame when the allocator
    maps new pages); to avoid them, pass ``out=``, a buffer you own and reuse (size it with :func:`frame_size`):
    the frame is written into its first bytes and a memoryview of exactly those bytes is returned, with no other
    frame-sized allocation.

    Args:
        routes: integer ids ``[rows, layers, top_k]`` (NumPy array, torch tensor or nested lists).
        num_experts: the model's expert count: fixes the dtype (and bits), bounds the ids, and is recorded.
        pack_bits: store each id in exactly ``bits`` bits (9 for 384 experts, 7 for 128).
        out: a writable, C-contiguous buffer (``bytearray``, NumPy array, a memoryview of one, ``mmap``) of at
            least the frame's size, not overlapping ``routes``' memory. Bytes after the frame are left as they
            were. If an id fails a check midway, the bytes the frame would occupy are unspecified, but hold no
            valid header (not even an earlier frame's): the header is cleared first and written last.

    Returns:
        The frame, ``32 + len(data)`` bytes: ``bytes`` without ``out``; with ``out``, a writable 1-d memoryview of
        format ``"B"`` over ``out``'s first bytes (it keeps ``out`` alive and sees later writes to it).

    Raises:
        EncodeError: what :func:`r3wire.encode_routes` raises, ``top_k`` beyond ``2**32 - 1``, or an ``out`` that
            is not a writable C-contiguous buffer, is smaller than the frame, or overlaps ``routes``' memory
            (field ``out``).
    """
    target = None if out is None else _out_buffer(out)
    plan = _plan(routes, num_experts, pack_bits)
    size = FRAME_HEADER_SIZE + plan.nbytes
    if target is None:
        return _frame_bytes(plan, size)
    if target.size < size:
        raise EncodeError.make(
            "out", f"a buffer of at least {size} bytes (the frame)", f"{target.size} bytes", raw=True
        )
    # Bounds only (constant time): a strided routes interleaved with out is refused too, rather than deciding
    # exactly, which can take time exponential in the dimensions.
    if np.may_share_memory(plan.arr, target):
        raise EncodeError.make("out", "a buffer not overlapping the memory of routes", "a buffer that does", raw=True)
    frame = target[:size]
    _write(plan, frame)
    view: memoryview = frame.data
    return view


def _frame_bytes(plan: _Plan, size: int) -> bytes:
    """The frame written straight into the ``bytes`` object returned: the one frame-sized allocation.

    ``BytesIO`` lends its buffer while a view is held and hands it over on ``getvalue()`` without a copy (CPython;
    elsewhere ``getvalue()`` copies, which is still correct). Writing into a NumPy buffer and copying it into
    ``bytes`` cost a second frame-sized buffer and a pass: W1 1.33 -> 1.00 ms, Kimi K2 9.9 -> 7.5 ms (medians of
    15 interleaved with a memcpy), peak 2.0x -> 1.0x the frame.
    """
    body = io.BytesIO()
    body.seek(size - 1)
    body.write(b"\0")
    lent = body.getbuffer()
    frame = np.frombuffer(lent, dtype=np.uint8)  # holds lent itself, no export of it: release() cannot fail
    _write(plan, frame)  # keeps no view; an EncodeError drops body, lent and frame alike
    del frame
    lent.release()
    return body.getvalue()


def _out_buffer(out: object) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """``out``'s memory as a writable 1-d uint8 array, or the EncodeError naming ``out``."""
    expected = "a writable C-contiguous buffer of bytes or numbers (bytearray, NumPy array, memoryview, mmap)"
    return byte_buffer(out, "out", expected, error=EncodeError, writable=True)


def _write(plan: _Plan, frame: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
    """Write the ids, then the header, into ``frame``: a reused ``out`` may hold an earlier frame, whose header must
    not survive over ids half-written when one fails a check midway."""
    arr, ids, bits, limit = plan.arr, plan.ids, plan.bits, plan.limit
    frame[:FRAME_HEADER_SIZE] = 0
    data = frame[FRAME_HEADER_SIZE:]
    if bits is not None:
        try:
            bitpack.pack_bits(ids, bits, checked=not limit, below=limit or None, out=data)
        except EncodeError:
            _raise_encode_error(arr, *plan.arguments)
    elif not _copy_checked(ids, data.view(WIRE_DTYPES[plan.dtype]), limit):
        _raise_encode_error(arr, *plan.arguments)
    rows, layers, top_k = arr.shape
    _HEADER.pack_into(
        frame.data,
        0,
        FRAME_MAGIC,
        FRAME_VERSION,
        _DTYPE_CODES[plan.dtype],
        bits or 0,
        0,
        rows,
        layers,
        top_k,
        plan.num_experts or 0,
    )


def _unsigned(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr``'s memory as unsigned integers of the same width and byte order, flat when it is C-contiguous."""
    flat = arr.reshape(-1) if arr.flags.c_contiguous else arr
    return flat if flat.dtype.kind == "u" else flat.view(flat.dtype.str.replace("i", "u"))


def _copy_checked(ids: np.ndarray[Any, Any], out: np.ndarray[Any, Any], limit: int) -> bool:
    """Copy ``ids`` into ``out`` (narrowing), checking each chunk against ``limit`` (0: checked) while it is in
    cache; False at the first chunk with an id at or above it."""
    if ids.dtype.itemsize == out.dtype.itemsize and ids.dtype.isnative and out.dtype.isnative:
        # Same width: a uint16 source of int16 ids (below 32768, checked) has the wire's bytes; copy, not convert.
        out = out.view(ids.dtype)
    if ids.ndim != 1:  # not C-contiguous: one pass to check, one to copy
        if limit and ids.size and int(ids.max()) >= limit:
            return False
        np.copyto(out.reshape(ids.shape), ids, casting="unsafe")
        return True
    for start in range(0, ids.size, _CHUNK_IDS):
        chunk = ids[start : start + _CHUNK_IDS]
        if limit and int(chunk.max()) >= limit:
            return False
        np.copyto(out[start : start + _CHUNK_IDS], chunk, casting="unsafe")
    return True


def _raise_encode_error(arr: np.ndarray[Any, Any], num_experts: int | None, pack_bits: bool) -> NoReturn:
    """Raise the error :func:`r3wire.encode_routes` gives for ids that failed the one-pass check (a slow path)."""
    prepare_routes(arr, num_experts=num_experts, pack_bits=pack_bits)
    raise AssertionError("prepare_routes accepted ids the frame's bound rejected")  # pragma: no cover


def decode_routes_frame(
    buffer: bytes | bytearray | memoryview,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
    copy: bool = False,
) -> np.ndarray[Any, Any]:
    """Decode a routes frame, checking the whole header and the data length before touching the data.

    Without bit packing the result is a view of ``buffer``'s data region, not a copy: read-only when the buffer
    is (``bytes``, a read-only memoryview), writable when it is (``bytearray``), and alive as long as the array.
    A copy is made only when ``copy`` is true, the region is misaligned for the dtype, or the host is big-endian.
    Bit-packed ids are always unpacked into a new writable array.

    Args:
        buffer: the frame: ``bytes``, ``bytearray``, ``memoryview`` or any C-contiguous buffer.
        num_experts: the model's expert count, if the caller knows it: every id must be below it, and it must
            agree with the frame's ``num_experts`` when that is declared.
        max_elements: refuse a frame declaring more ids than this, before touching the data; ``None`` means
            ``DEFAULT_MAX_ELEMENTS`` (2**30). Pass a larger int to raise it.
        copy: a bool: always return a new writable array.

    Returns:
        A C-contiguous ``[rows, layers, top_k]`` array of uint8, int16 or int32, native byte order, aligned.

    Raises:
        DecodeError: the frame is malformed, inconsistent, has trailing bytes or breaks a limit; the message
            names the field, what was expected and what was got.
        UnsupportedVersionError: the frame's version is one this release cannot read.
        R3WireError: ``num_experts``, ``max_elements`` or ``copy`` is not a value it takes (named as the field).
    """
    expected_experts = optional_num_experts(num_experts)
    max_elements = optional_max_elements(max_elements)
    if not isinstance(copy, (bool, np.bool_)):  # a truthy string ("no") would copy, a falsy 0 or None would not
        raise R3WireError.make("copy", "a bool", copy)
    raw = _bytes_of(buffer)
    if raw[:4].tobytes() != FRAME_MAGIC:
        raise DecodeError.make("magic", f"{FRAME_MAGIC!r} (an r3wire routes frame)", raw[:4].tobytes())
    if raw.size > 4 and raw[4] != FRAME_VERSION:
        raise UnsupportedVersionError(
            f"{KEY_VERSION} {raw[4]} of the routes frame is not supported by this release of r3wire, which reads "
            f"versions [{FRAME_VERSION}]; {_version_advice(int(raw[4]), FRAME_VERSION, 'frames')}",
            field=KEY_VERSION,
            version=int(raw[4]),
            supported=(FRAME_VERSION,),
        )
    if raw.size < FRAME_HEADER_SIZE:
        raise DecodeError.make("header", f"{FRAME_HEADER_SIZE} bytes", f"a frame of {raw.size} bytes", raw=True)
    _, _, code, bits_field, reserved, rows, layers, top_k, experts_field = _HEADER.unpack_from(raw.data)
    dtype = _DTYPE_NAMES.get(code)
    if dtype is None:
        choices = ", ".join(f"{c} ({name})" for c, name in _DTYPE_NAMES.items())
        raise DecodeError.make(KEY_DTYPE, f"a dtype code: {choices}", code)
    if reserved:
        raise DecodeError.make("reserved", "0", reserved)
    # From here on, the frame is read exactly as an envelope is: the same rules, the same order, the same errors.
    data = raw[FRAME_HEADER_SIZE:]
    header = check_header(
        dtype=dtype,
        shape=(rows, layers, top_k),
        data=data,
        dtypes=ROUTE_DTYPES,
        ndim=ROUTES_NDIM,
        max_elements=max_elements,
        routes=True,
        num_experts=ABSENT if experts_field == 0 else experts_field,
        bits=ABSENT if bits_field == 0 else bits_field,
        expected_experts=expected_experts,
        raw=True,
    )
    wire_dtype = WIRE_DTYPES[dtype]
    if header.bits is not None:
        ids = bitpack.unpack_bits(data, header.elements, header.bits, wire_dtype, field=KEY_DATA)
        routes = ids.reshape(header.shape)
    else:
        routes = data.view(wire_dtype).reshape(header.shape)
        if copy or not routes.flags.aligned or not routes.dtype.isnative:
            routes = routes.astype(wire_dtype.newbyteorder("="))  # astype copies: aligned, native, writable
    check_ids(
        routes,
        dtype,
        bound=header.num_experts or expected_experts,
        canonical=header.num_experts is None,
        bits=header.bits,
    )
    return routes


def _bytes_of(buffer: object) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The frame's bytes as a 1-d uint8 array sharing ``buffer``'s memory (and its writability)."""
    expected = "a contiguous bytes-like frame (bytes, bytearray or memoryview)"
    return byte_buffer(buffer, None, expected, error=DecodeError)
