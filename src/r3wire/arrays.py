"""The generic packed-array codec for any per-token side channel (sample-support ids, values, masks).

An array travels as the same envelope as routes, under the ``r3wire.array`` schema, in its own dtype: nothing
is converted, so every value, NaN payloads and -0.0 included, comes back bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._envelope import build_envelope, decode_data, read_header, to_wire_bytes, wire_dtype_name
from r3wire._validate import MAX_NDIM, check_int, load_object, optional_max_elements, str_collection
from r3wire.errors import DecodeError, EncodeError, R3WireError
from r3wire.schema import ARRAY_SCHEMA, WIRE_DTYPES

__all__ = ["decode_array", "encode_array"]

_MAX_DTYPE_NAMES: Final = 1024  # there are 12 wire dtypes; a caller's collection is read no further than this


def _allowed(dtypes: Iterable[str] | None) -> tuple[str, ...]:
    if dtypes is None:
        return tuple(WIRE_DTYPES)
    expected = f"a non-empty subset of {list(WIRE_DTYPES)}"
    names = str_collection(dtypes, "dtypes", expected, most=_MAX_DTYPE_NAMES)
    if not names or not all(d in WIRE_DTYPES for d in names):
        raise R3WireError.make("dtypes", expected, list(names))
    return names


def encode_array(array: Any, *, dtypes: Iterable[str] | None = None) -> dict[str, Any]:
    """Encode an n-dimensional array as an ``r3wire.array`` envelope, preserving every value bit for bit.

    Args:
        array: a NumPy array (any byte order, memory order or writability) or a torch tensor, whose dtype is
            one of the wire dtypes (bool, u/int8..64, float16/32/64).
        dtypes: the wire dtype names the caller allows, e.g. ``("int32",)`` for sample-support ids; all of them
            when omitted. The array is never cast to fit: a dtype outside this set is an error.

    Returns:
        A JSON-ready dict ``{"data", "shape", "dtype", "schema", "version"}``.

    Raises:
        EncodeError: the value is not an array, has more than 32 dimensions (or an empty shape no reader takes),
            its dtype is not an allowed wire dtype, or it is a nested list whose values NumPy's conversion would
            change (ints past int64, ints beside floats that float64 rounds, a bool among numbers).
        R3WireError: ``dtypes`` is not a non-empty collection of wire dtype names (e.g. ``["float128"]``, ``[]``,
            ``-1``, bytes); checked before the array, and not an :class:`EncodeError`.
    """
    wire, name = array_wire(array, dtypes=dtypes)
    return build_envelope(wire, name, ARRAY_SCHEMA)


def array_wire(array: Any, *, dtypes: Iterable[str] | None = None) -> tuple[np.ndarray[Any, Any], str]:
    """Check an array and return the wire array and its dtype name: :func:`encode_array` without base64.

    Raises:
        EncodeError, R3WireError: as :func:`encode_array`.
    """
    allowed = _allowed(dtypes)
    arr = as_numpy(array, field="array")  # at most 32 dimensions, as every reader (NumPy 1 included) holds
    name = wire_dtype_name(arr.dtype, field="array", allowed=allowed)
    if name == "bool":
        _check_bool_bytes(arr)
    return to_wire_bytes(arr, name), name


def _check_bool_bytes(arr: np.ndarray[Any, Any]) -> None:
    """Refuse a bool array holding a byte other than 0 or 1 (a NumPy or torch view of other bytes can): the wire
    format forbids such bytes, and rewriting them as 1 would change the bits the caller handed over.

    Raises:
        EncodeError: naming the first such element and its byte.
    """
    raw: np.ndarray[Any, Any] = arr.view(np.uint8)  # Any: the stubs of NumPy 2.5 cannot pick a max() overload
    if raw.size and int(raw.max()) > 1:
        flat = int(np.flatnonzero(raw.reshape(-1) > 1)[0])  # reshape copies only a non-contiguous array
        where = [int(i) for i in np.unravel_index(flat, arr.shape)]
        raise EncodeError.make(
            f"array{where}" if where else "array",
            "a bool stored as byte 0 or 1 (arr.view(np.uint8) != 0 makes one)",
            int(raw.reshape(-1)[flat]),
        )


def decode_array(
    payload: Any,
    *,
    dtypes: Iterable[str] | None = None,
    ndim: int | None = None,
    max_elements: int | None = None,
) -> np.ndarray[Any, Any]:
    """Decode an ``r3wire.array`` envelope (a dict, or its JSON text as ``str`` or bytes).

    Args:
        payload: the envelope.
        dtypes: the wire dtype names accepted; all of them when omitted.
        ndim: the number of dimensions required; any when omitted.
        max_elements: refuse a payload declaring more elements than this, before decoding anything; ``None``
            means ``DEFAULT_MAX_ELEMENTS`` (2**30). Pass a larger int to raise it.

    Returns:
        A writable, C-contiguous array in the wire dtype, native byte order.

    Raises:
        DecodeError: the payload is malformed or breaks a limit; the message names the field.
        UnsupportedVersionError: the payload's schema version is not one this release reads.
        R3WireError: ``dtypes`` is not a non-empty collection of wire dtype names, ``ndim`` is not an integer in
            ``0 .. 32``, or ``max_elements`` is not an integer in ``0 .. 2**63`` (bools refused); checked before the
            payload is read, and not a :class:`DecodeError`.
    """
    allowed = _allowed(dtypes)
    if ndim is not None:
        ndim = check_int(ndim, "ndim", minimum=0, maximum=MAX_NDIM, error=R3WireError)
    max_elements = optional_max_elements(max_elements)
    obj = load_object(payload, what="an r3wire.array envelope")
    header = read_header(obj, schema_name=ARRAY_SCHEMA.name, dtypes=allowed, ndim=ndim, max_elements=max_elements)
    array = decode_data(header)
    if header.dtype == "bool" and array.size:
        # Only 0 and 1 are booleans; any other byte would be a value NumPy shows as True but stores differently.
        raw = array.view(np.uint8)
        bad = raw > 1
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise DecodeError.make(f"data{list(index)}", "a bool byte (0 or 1)", int(raw[index]))
    return array
