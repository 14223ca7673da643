"""JSON-object formats: r3wire's own envelope, SkyRL's seed envelope, prime-rl's ``{data, shape, start, dtype}``
and prime-rl's older base85 int32 form.

r3wire and SkyRL are read and written by :func:`r3wire.decode_routes` / :func:`r3wire.encode_routes` (the seed
envelope is the unversioned form those already handle); only the prime-rl forms have readers of their own.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import Any, Final

import numpy as np

from r3wire._validate import check_element_count, check_int, check_keys, check_shape, load_object
from r3wire.errors import DecodeError, EncodeError
from r3wire.formats._common import (
    ReadOptions,
    ReadResult,
    WriteOptions,
    array_from_buffer,
    b64_array,
    check_ids,
    choose_dtype,
    decode_b64_array,
    prepared_routes,
    text_of,
)
from r3wire.routes import decode_routes, encode_routes
from r3wire.schema import (
    KEY_BITS,
    KEY_DATA,
    KEY_DTYPE,
    KEY_NUM_EXPERTS,
    KEY_SCHEMA,
    KEY_SHAPE,
    KEY_VERSION,
    ROUTE_DTYPES,
)

__all__ = [
    "PRIME_RL_DTYPES",
    "read_prime_rl",
    "read_prime_rl_b85",
    "read_r3wire",
    "read_skyrl",
    "write_prime_rl",
    "write_prime_rl_b85",
    "write_r3wire",
    "write_skyrl",
]

KEY_START: Final = "start"

# prime-rl @13e411d6 passes these through as is (formats.md §4); older builds sent only uint8/uint16.
PRIME_RL_DTYPES: Final = ("uint8", "uint16", "int16", "int32")
# A prime-rl payload without "dtype" predates PR prime-rl#3051: verifiers reads it as uint8.
PRIME_RL_DEFAULT_DTYPE: Final = "uint8"
_PRIME_RL_LADDER: Final = ("uint8", "uint16", "int32")
# base85 (Python's b85encode, RFC 1924 alphabet) turns each 4-byte int32 into exactly 5 characters.
_B85_CHARS_PER_INT32: Final = 5
_MAX_START: Final = (1 << 63) - 1


def read_r3wire(payload: object, opts: ReadOptions) -> ReadResult:
    """Read an ``r3wire.routes`` envelope (or the seed's unversioned one) with :func:`r3wire.decode_routes`;
    the envelope's ``num_experts`` and ``bits`` are returned beside the routes."""
    obj = load_object(payload, what="an r3wire.routes envelope")
    routes = decode_routes(obj, num_experts=opts.num_experts, max_elements=opts.max_elements)
    # decode_routes has validated both: ints in range, or absent.
    num_experts, bits = obj.get(KEY_NUM_EXPERTS), obj.get(KEY_BITS)
    return ReadResult(
        routes=routes,
        format="r3wire",
        num_experts=None if num_experts is None else int(num_experts),
        bits=None if bits is None else int(bits),
    )


def write_r3wire(routes: object, opts: WriteOptions) -> dict[str, Any]:
    """Write an ``r3wire.routes`` envelope with :func:`r3wire.encode_routes` (bit-packed with ``pack_bits``)."""
    envelope = encode_routes(routes, num_experts=opts.num_experts, pack_bits=opts.pack_bits)
    _check_requested(opts.dtype, envelope[KEY_DTYPE], "r3wire")
    return envelope


def read_skyrl(payload: object, opts: ReadOptions) -> ReadResult:
    """Read SkyRL's seed envelope: exactly ``{data, shape, dtype}``, canonical dtype, no schema."""
    obj = load_object(payload, what="a SkyRL {data, shape, dtype} envelope")
    check_keys(obj, required=(KEY_DATA, KEY_SHAPE, KEY_DTYPE))
    routes = decode_routes(obj, num_experts=opts.num_experts, max_elements=opts.max_elements)
    return ReadResult(routes=routes, format="skyrl")


def write_skyrl(routes: object, opts: WriteOptions) -> dict[str, Any]:
    """Write SkyRL's seed envelope; its dtype is always the smallest that holds the ids (the seed requires it)."""
    envelope = encode_routes(routes)  # the seed's ladder; it also refuses negative ids
    if opts.num_experts is not None:
        prepared_routes(routes, num_experts=opts.num_experts)
    _check_requested(opts.dtype, envelope[KEY_DTYPE], "skyrl")
    del envelope[KEY_SCHEMA], envelope[KEY_VERSION]
    return envelope


def _check_requested(requested: str | None, chosen: str, name: str) -> None:
    if requested is not None and requested != chosen:
        raise EncodeError.make(
            "dtype", f"{chosen!r} or None ({name} picks the dtype itself: {list(ROUTE_DTYPES)})", requested
        )


def read_prime_rl(payload: object, opts: ReadOptions) -> ReadResult:
    """Read prime-rl's ``{"data", "shape", "start", "dtype"}``: standard base64, missing dtype = uint8,
    missing or null start = 0."""
    obj = load_object(payload, what="a prime-rl {data, shape, start, dtype} object")
    check_keys(obj, required=(KEY_DATA, KEY_SHAPE), optional=(KEY_START, KEY_DTYPE))
    dtype = obj.get(KEY_DTYPE, PRIME_RL_DEFAULT_DTYPE)
    if not isinstance(dtype, str) or dtype not in PRIME_RL_DTYPES:
        raise DecodeError.make(KEY_DTYPE, f"one of {list(PRIME_RL_DTYPES)}", dtype)
    shape = check_shape(obj[KEY_SHAPE], KEY_SHAPE, ndim=3)
    raw_start = obj.get(KEY_START)
    # verifiers reads `payload.get("start", 0) or 0`, so an explicit null means 0 too.
    start = 0 if raw_start is None else check_int(raw_start, KEY_START, minimum=0, maximum=_MAX_START)
    text = text_of(obj[KEY_DATA], KEY_DATA)
    routes = decode_b64_array(text, dtype, shape, field=KEY_DATA, max_elements=opts.max_elements)
    check_ids(routes, KEY_DATA, num_experts=opts.num_experts)
    return ReadResult(routes=routes, format="prime-rl", start=start)


def write_prime_rl(routes: object, opts: WriteOptions) -> dict[str, Any]:
    """Write prime-rl's object: uint8 if the ids fit, else uint16, else int32 (or the requested dtype)."""
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts)
    dtype = choose_dtype(
        low, high, requested=opts.dtype, allowed=PRIME_RL_DTYPES, ladder=_PRIME_RL_LADDER, format_name="prime-rl"
    )
    return {
        KEY_DATA: b64_array(arr, dtype),
        KEY_SHAPE: [int(n) for n in arr.shape],
        KEY_START: 0 if opts.start is None else opts.start,
        KEY_DTYPE: dtype,
    }


# The positions in the stdlib's base85 errors ("bad base85 character at position 12", "hunk starting at byte 10").
_AT_POSITION: Final = re.compile(r"((?:position|byte) )(\d+)")
# Characters of base85 text decoded at a time: 5 per 4 bytes, so pieces end on whole groups (32768 ids each).
_B85_PIECE: Final = _B85_CHARS_PER_INT32 * (1 << 15)


def _shifted(match: re.Match[str], *, by: int) -> str:
    return f"{match.group(1)}{int(match.group(2)) + by}"


def _b85decode_into(text: str | bytes | bytearray | memoryview, count: int) -> np.ndarray[Any, Any]:
    """The bytes of ``count`` int32 ids spelled by ``text`` (``5 * count`` base85 characters), decoded a piece at a
    time into one buffer: the stdlib decoder makes an object per 5-character group before joining them, about 27
    times the text at once for a whole payload (review 11a), a few MiB for a piece.

    Raises:
        DecodeError: a character outside the alphabet or a group beyond 32 bits; the message says where.
    """
    out = np.empty(4 * count, dtype=np.uint8)
    for start in range(0, len(text), _B85_PIECE):
        piece = text[start : start + _B85_PIECE]
        try:
            decoded = base64.b85decode(bytes(piece) if isinstance(piece, memoryview) else piece)
        except (ValueError, TypeError, binascii.Error) as exc:
            # The stdlib counts from the piece's start: the position in the whole text is what the caller can find.
            got = _AT_POSITION.sub(functools.partial(_shifted, by=start), str(exc))
            raise DecodeError.make(KEY_DATA, "base85 text (Python's b85encode alphabet)", got, raw=True) from exc
        first = start // _B85_CHARS_PER_INT32 * 4
        out[first : first + len(decoded)] = np.frombuffer(decoded, dtype=np.uint8)
    return out


def read_prime_rl_b85(payload: object, opts: ReadOptions) -> ReadResult:
    """Read prime-rl's older ``{"data": base85 of int32, "shape"}`` (PR prime-rl#2408)."""
    obj = load_object(payload, what="a prime-rl base85 {data, shape} object")
    check_keys(obj, required=(KEY_DATA, KEY_SHAPE))
    shape = check_shape(obj[KEY_SHAPE], KEY_SHAPE, ndim=3)
    count = check_element_count(shape, opts.max_elements)
    text = text_of(obj[KEY_DATA], KEY_DATA)
    expected = _B85_CHARS_PER_INT32 * count
    if len(text) != expected:
        raise DecodeError.make(
            KEY_DATA,
            f"{expected} base85 characters ({count} int32 ids for the declared shape)",
            f"{len(text)} characters",
            raw=True,
        )
    raw = _b85decode_into(text, count)
    routes = array_from_buffer(raw.data, np.dtype("<i4"), shape)
    check_ids(routes, KEY_DATA, num_experts=opts.num_experts)
    return ReadResult(routes=routes, format="prime-rl-b85")


def write_prime_rl_b85(routes: object, opts: WriteOptions) -> dict[str, Any]:
    """Write prime-rl's older base85 int32 object (for clients that still read it)."""
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts)
    choose_dtype(low, high, requested=opts.dtype, allowed=("int32",), ladder=("int32",), format_name="prime-rl-b85")
    wire = np.asarray(arr, dtype="<i4", order="C")
    return {KEY_DATA: base64.b85encode(wire.tobytes()).decode("ascii"), KEY_SHAPE: [int(n) for n in arr.shape]}
