"""The routes rules every writer and reader applies, whatever carries the ids (JSON envelope or binary frame).

Writers: the ids are a 3-d integer array, non-negative, below ``num_experts``; the dtype and the packed width
follow from ``num_experts`` or the data. Readers: the declared dtype, ``num_experts`` and ``bits`` agree with each
other and with the caller, and the decoded ids obey the same bounds; without ``num_experts``, the dtype and the
width must be the smallest that hold the data (the one encoding a writer produces).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._validate import check_int
from r3wire.bitpack import MAX_BITS
from r3wire.errors import DecodeError, EncodeError, R3WireError
from r3wire.schema import (
    KEY_BITS,
    KEY_DTYPE,
    KEY_NUM_EXPERTS,
    MAX_NUM_EXPERTS,
    WIRE_DTYPES,
    bits_for_max_id,
    bits_for_num_experts,
    dtype_for_max_id,
    dtype_for_num_experts,
)

__all__ = [
    "ROUTES_MIN_DIMS",
    "ROUTES_NDIM",
    "RoutesToWrite",
    "check_bits",
    "check_chunk",
    "check_declared",
    "check_ids",
    "check_num_experts",
    "first_index",
    "optional_num_experts",
    "prepare_routes",
    "same_bytes",
    "wire_ids",
]

ROUTES_NDIM: Final = 3
# [rows, layers, top_k]: no rows is a valid (empty) answer; no layer or no slot is no routing at all.
ROUTES_MIN_DIMS: Final = (0, 1, 1)

_LITTLE: Final = sys.byteorder == "little"


def first_index(mask: np.ndarray[Any, Any]) -> list[int]:
    """The index of the first true element of ``mask``, for error messages that point at one id."""
    return [int(i) for i in np.argwhere(mask)[0]]


def check_num_experts(value: object, field: str, error: type[R3WireError]) -> int:
    """Return ``value`` as an expert count in ``1 .. 2**31``.

    Raises:
        R3WireError: of class ``error``, naming ``field``.
    """
    return check_int(value, field, minimum=1, maximum=MAX_NUM_EXPERTS, error=error)


def optional_num_experts(value: object, error: type[R3WireError] = R3WireError) -> int | None:
    """A caller's ``num_experts``: ``None`` (unknown), or an expert count in ``1 .. 2**31``.

    Raises:
        R3WireError: of class ``error``, naming ``num_experts``.
    """
    return None if value is None else check_num_experts(value, "num_experts", error)


@dataclass(frozen=True, slots=True)
class RoutesToWrite:
    """Routes checked for writing, and how they travel."""

    array: np.ndarray[Any, Any]  # the caller's ids, any integer dtype, byte order and memory order
    dtype: str  # the wire (and decoded) dtype name
    num_experts: int | None
    bits: int | None  # the packed width, or None when the ids travel as ``dtype``
    # Ids not yet checked against this bound (``prepare_routes(defer_bounds=True)``): the writer checks each chunk
    # with :func:`check_chunk` while it is in cache. None when every id has been checked.
    unchecked_bound: int | None = None


def _unsigned(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` viewed as unsigned integers of the same size and byte order: negatives become huge, so one
    ``max()`` checks both bounds (two passes, ``min`` and ``max``, were 45% of a W1 encode)."""
    if arr.dtype.kind == "u":
        return arr
    unsigned = np.dtype(f"u{arr.dtype.itemsize}")
    return arr.view(unsigned.newbyteorder(arr.dtype.byteorder) if arr.dtype.byteorder in "<>" else unsigned)


def _id_error(arr: np.ndarray[Any, Any], bound: int | None, where: list[int]) -> R3WireError:
    """The error for the id at ``where`` (negative, at or above ``bound``, or at or above 2**31)."""
    value = int(arr[tuple(where)])
    if value < 0:
        return EncodeError.make(f"routes{where}", "a non-negative expert id", value)
    if bound is not None:
        return EncodeError.make(f"routes{where}", f"an expert id below num_experts={bound}", value)
    return EncodeError.make(f"routes{where}", "an expert id below 2**31", value)


def _limit(dtype: np.dtype[Any], bound: int) -> int:
    """The limit of the unsigned view of ids of ``dtype`` that means "non-negative and below ``bound``".

    A negative id of a signed dtype is at least 2**(bits - 1) as unsigned, and a non-negative one is below that:
    without this cap a small dtype's negatives (int8 -1 is 255 as uint8) would pass a larger bound.
    """
    return min(bound, 1 << (8 * dtype.itemsize - 1)) if dtype.kind == "i" else bound


def _first_bad(arr: np.ndarray[Any, Any], limit: int) -> list[int]:
    """The index of the first id outside ``0 .. limit - 1`` (the caller knows there is one)."""
    return first_index(_unsigned(arr) >= _limit(arr.dtype, limit))


def check_chunk(
    chunk: np.ndarray[Any, Any], offset: int, shape: tuple[int, ...], bound: int, expected: str | None = None
) -> int:
    """Check a flat, contiguous run of ids starting at flat index ``offset`` of routes of ``shape``: one pass.

    ``expected`` says what an id at or above ``bound`` must be (default: below ``num_experts={bound}``).
    Returns the largest id of the run (0 for an empty one).

    Raises:
        EncodeError: naming the first id that is negative or not below ``bound`` as ``routes[row, layer, slot]``.
    """
    if not chunk.size:
        return 0
    high = int(_unsigned(chunk).max())
    if high >= _limit(chunk.dtype, bound):
        flat = _first_bad(chunk, bound)[0]
        value = int(chunk[flat])
        where = [int(i) for i in np.unravel_index(offset + flat, shape)]
        if value < 0:
            raise EncodeError.make(f"routes{where}", "a non-negative expert id", value)
        raise EncodeError.make(f"routes{where}", expected or f"an expert id below num_experts={bound}", value)
    return high


def prepare_routes(
    routes: Any, *, num_experts: int | None, pack_bits: bool, defer_bounds: bool = False
) -> RoutesToWrite:
    """Check routes for writing and choose their dtype (and packed width when ``pack_bits``).

    Every bound is one pass over the ids: they are viewed as unsigned, so one ``max()`` also catches negatives.
    With ``defer_bounds`` and a ``num_experts`` (which fixes the dtype without looking at the data), the ids are
    not read here at all: the result's ``unchecked_bound`` tells the writer to :func:`check_chunk` each piece.

    Raises:
        EncodeError: not a 3-d integer array, a negative id, an id ≥ ``num_experts``, or an id ≥ 2**31.
    """
    arr = as_numpy(routes, field="routes")
    if arr.dtype.kind not in "iu":
        raise EncodeError.make("routes.dtype", "an integer dtype", str(arr.dtype), raw=True)
    if arr.ndim != ROUTES_NDIM:
        raise EncodeError.make("routes", "a 3-d array [rows, layers, top_k]", f"shape {list(arr.shape)}", raw=True)
    if not arr.shape[1] or not arr.shape[2]:  # ROUTES_MIN_DIMS: the decoder refuses these
        raise EncodeError.make(
            "routes", "a 3-d array [rows, layers >= 1, top_k >= 1]", f"shape {list(arr.shape)}", raw=True
        )
    n_experts = optional_num_experts(num_experts, EncodeError)
    if not isinstance(pack_bits, (bool, np.bool_)):
        raise EncodeError.make("pack_bits", "a bool", pack_bits)
    if n_experts is not None:
        name = dtype_for_num_experts(n_experts)
        bits = bits_for_num_experts(n_experts)
        if defer_bounds and not pack_bits:
            return RoutesToWrite(arr, name, n_experts, None, unchecked_bound=n_experts)
        if arr.size and int(_unsigned(arr).max()) >= _limit(arr.dtype, n_experts):
            raise _id_error(arr, n_experts, _first_bad(arr, n_experts))
        return RoutesToWrite(arr, name, n_experts, bits if pack_bits else None)
    high = int(_unsigned(arr).max()) if arr.size else 0
    if high >= _limit(arr.dtype, MAX_NUM_EXPERTS):  # a negative id (huge as unsigned) or one no dtype holds
        raise _id_error(arr, None, _first_bad(arr, MAX_NUM_EXPERTS))
    return RoutesToWrite(arr, dtype_for_max_id(high), None, bits_for_max_id(high) if pack_bits else None)


@cache
def _bits_range(dtype: str) -> tuple[int, int]:
    """The packed widths whose smallest route dtype is ``dtype``: uint8 1..8, int16 9..15, int32 16..31."""
    widths = [b for b in range(1, MAX_BITS + 1) if dtype_for_max_id((1 << b) - 1) == dtype]
    return widths[0], widths[-1]


def check_declared(dtype: str, *, wire_experts: int | None, expected_experts: int | None) -> None:
    """Check that a header's dtype agrees with its ``num_experts``, and that with the caller's; before any data.

    Raises:
        DecodeError: the first rule that does not hold.
    """
    if wire_experts is not None:
        fixed = dtype_for_num_experts(wire_experts)
        if dtype != fixed:
            raise DecodeError.make(KEY_DTYPE, f"{fixed!r} (fixed by num_experts={wire_experts})", dtype)
        if expected_experts is not None and expected_experts != wire_experts:
            raise DecodeError.make(KEY_NUM_EXPERTS, f"{expected_experts} (the caller's num_experts)", wire_experts)


def check_bits(value: object, dtype: str, *, wire_experts: int | None) -> int:
    """Return a header's declared ``bits`` as an int: fixed by ``num_experts``, else a width ``dtype`` is for.

    The declared dtype is the smallest holding ``bits``-bit ids (uint8 1..8, int16 9..15, int32 16..31), so the
    decoded array is the one the unpacked form gives. Runs before any data is decoded.

    Raises:
        DecodeError: naming ``bits``.
    """
    width = check_int(value, KEY_BITS, minimum=1, maximum=MAX_BITS)
    if wire_experts is not None:
        fixed = bits_for_num_experts(wire_experts)
        if width != fixed:
            raise DecodeError.make(KEY_BITS, f"{fixed} (fixed by num_experts={wire_experts})", width)
    else:
        low, high = _bits_range(dtype)
        if not low <= width <= high:
            raise DecodeError.make(KEY_BITS, f"an integer in {low}..{high} (the widths dtype {dtype!r} holds)", width)
    return width


# Ids per piece of the failure path's search for the first bad id: the mask of a piece stays in cache, and a
# hostile payload of 2**30 ids costs no body-sized mask (np.argwhere of a whole-array mask held 24 bytes per
# bad id).
_SEARCH_IDS: Final = 1 << 18


def check_ids(
    routes: np.ndarray[Any, Any],
    dtype: str,
    *,
    bound: int | None,
    canonical: bool,
    bits: int | None,
) -> None:
    """Check decoded ids: non-negative, below ``bound``; when ``canonical``, dtype and bits the smallest that fit.

    One pass on the success path: the ids are viewed as unsigned (a negative one is then at least
    2**(width - 1)), so one ``max()`` checks both bounds and gives the largest id the canonical rules need. No
    pass at all when no id can break a rule: unpacked uint8 ids without a bound, or with 256 experts or more.
    Only when the pass finds a bad id are the rules applied one by one, to name it. Without ``bound`` ids must be
    below 2**31 (no wire dtype holds more; only an in-process caller's wider array can).

    Raises:
        DecodeError: naming the first offending id as ``data[row, layer, slot]``, or ``dtype`` / ``bits``. When
            several rules fail, the first in the order of docs/wire-format.md §8 step 10 is named: a negative id,
            then an id at or above ``bound``, then the dtype, then bits; each the first in C order.
    """
    if routes.size == 0:
        if canonical and dtype != "uint8":
            raise DecodeError.make(KEY_DTYPE, "'uint8' (the canonical dtype of an empty array)", dtype)
        if canonical and bits is not None and bits != 1:
            raise DecodeError.make(KEY_BITS, "1 (the canonical bits of an empty array)", bits)
        return
    # Viewed as unsigned, an id at or above this is negative or not below the bound.
    limit = _limit(routes.dtype, MAX_NUM_EXPERTS if bound is None else bound)
    # Every unpacked uint8 array is canonical (its dtype names the wire dtype, so one byte means uint8).
    if not canonical or (dtype == "uint8" and bits is None and routes.dtype.itemsize == 1):
        if limit >= 1 << (8 * routes.dtype.itemsize):  # unsigned ids, none of which can reach the bound
            return
        if int(_unsigned(routes).max()) >= limit:
            raise _first_bad_id(routes, bound)
        return
    high = int(_unsigned(routes).max())
    if high >= limit:
        raise _first_bad_id(routes, bound)
    # No id is negative: ``high`` is the largest id.
    smallest = dtype_for_max_id(high)
    if smallest != dtype:
        raise DecodeError.make(
            KEY_DTYPE,
            f"{smallest!r}, the smallest dtype holding the largest id {high} (non-canonical payload)",
            dtype,
        )
    if bits is not None and bits != bits_for_max_id(high):
        raise DecodeError.make(
            KEY_BITS,
            f"{bits_for_max_id(high)}, the fewest bits holding the largest id {high} (non-canonical payload)",
            bits,
        )


def _first_bad_id(routes: np.ndarray[Any, Any], bound: int | None) -> R3WireError:
    """The error for ids the one-pass check refused: the first negative id in C order, else the first at or
    above ``bound`` (2**31 without one). The caller knows there is one or the other."""
    flat = _unsigned(routes.reshape(-1))  # C order; a copy only of an array that is not C-contiguous
    at = _first_at_least(flat, 1 << (8 * flat.dtype.itemsize - 1)) if routes.dtype.kind == "i" else -1
    expected = "a non-negative expert id"
    if at < 0:  # no negative id: the unsigned view holds the ids themselves
        at = _first_at_least(flat, MAX_NUM_EXPERTS if bound is None else bound)
        expected = "an expert id below 2**31" if bound is None else f"an expert id below num_experts={bound}"
    if at < 0:  # pragma: no cover - the one-pass check and this search disagree
        raise AssertionError("check_ids refused ids that break no rule")
    where = [int(i) for i in np.unravel_index(at, routes.shape)]
    return DecodeError.make(f"data{where}", expected, int(routes[tuple(where)]))


def _first_at_least(flat: np.ndarray[Any, Any], limit: int) -> int:
    """The flat index of the first element of the unsigned 1-d ``flat`` that is at least ``limit``, or -1."""
    if limit >= 1 << (8 * flat.dtype.itemsize):
        return -1
    for start in range(0, flat.size, _SEARCH_IDS):
        piece = flat[start : start + _SEARCH_IDS]
        if int(piece.max()) >= limit:
            return start + int(np.argmax(piece >= limit))
    return -1


def wire_ids(plan: RoutesToWrite) -> np.ndarray[Any, Any]:
    """The checked ids of ``plan`` as a C-contiguous array of its little-endian wire dtype.

    No conversion pass when the caller's bytes already are the wire bytes: ids are non-negative and below the
    wire dtype's limit, so a uint16 source (vLLM above 256 experts) is byte for byte the int16 wire, uint32 the
    int32 one and int8 the uint8 one.
    """
    wire = WIRE_DTYPES[plan.dtype]
    arr = plan.array
    if same_bytes(arr.dtype, wire) and arr.flags.c_contiguous:
        return arr.view(wire)
    return np.asarray(arr, dtype=wire, order="C")


def same_bytes(source: np.dtype[Any], wire: np.dtype[Any]) -> bool:
    """True when in-range ids of dtype ``source`` are stored as exactly the bytes of ``wire`` (little-endian)."""
    if source.itemsize != wire.itemsize or source.kind not in "iu":
        return False
    return source.itemsize == 1 or source.byteorder == "<" or (source.byteorder == "=" and _LITTLE)
