"""Routed-expert ids ``[rows, layers, top_k]``: the ``r3wire.routes`` schema on top of the array envelope.

Routes differ from a generic array in three ways: the dtype is chosen (the smallest of uint8/int16/int32 that
holds the ids, or fixed by ``num_experts``), ids are checked (non-negative, below ``num_experts``), and the
decoder also reads the seed's unversioned ``{data, shape, dtype}`` envelope that SkyRL servers send today.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._envelope import build_envelope, decode_data, read_header, to_wire_bytes
from r3wire._validate import check_int, load_object
from r3wire.errors import DecodeError, EncodeError, R3WireError
from r3wire.schema import (
    KEY_NUM_EXPERTS,
    KEY_SCHEMA,
    KEY_VERSION,
    MAX_NUM_EXPERTS,
    ROUTE_DTYPES,
    ROUTES_SCHEMA,
    dtype_for_max_id,
    dtype_for_num_experts,
)

__all__ = ["decode_routes", "encode_routes", "route_dtype"]

_ROUTES_NDIM = 3


def _first_index(mask: np.ndarray[Any, Any]) -> list[int]:
    return [int(i) for i in np.argwhere(mask)[0]]


def _num_experts(value: object, field: str, error: type[R3WireError]) -> int:
    return check_int(value, field, minimum=1, maximum=MAX_NUM_EXPERTS, error=error)


def route_dtype(num_experts: int) -> np.dtype[Any]:
    """The NumPy dtype routes of a model with ``num_experts`` experts travel in (uint8, int16 or int32).

    Use it to allocate trainer buffers that match the wire exactly on every rank.

    Raises:
        R3WireError: ``num_experts`` is not an integer in ``1 .. 2**31``.
    """
    n = _num_experts(num_experts, "num_experts", R3WireError)
    return np.dtype(dtype_for_num_experts(n))


def encode_routes(routes: Any, *, num_experts: int | None = None) -> dict[str, Any]:
    """Encode routed-expert ids as a compact ``r3wire.routes`` envelope.

    Args:
        routes: integer ids ``[rows, layers, top_k]``: a NumPy array of any integer dtype, byte order or memory
            order (read-only and empty arrays included), a torch tensor, or nested lists.
        num_experts: the model's expert count. When given, the dtype is fixed by it (uint8 if ≤ 256, int16 if
            ≤ 32768, else int32), identical on every rank and turn, every id must be below it, and it is recorded
            in the envelope. When omitted, the dtype is the smallest that holds the largest id.

    Returns:
        A JSON-ready dict ``{"data", "shape", "dtype", "schema", "version"[, "num_experts"]}``.

    Raises:
        EncodeError: not a 3-d integer array, a negative id, an id ≥ ``num_experts``, or an id ≥ 2**31.
    """
    wire, name, extra = routes_wire(routes, num_experts=num_experts)
    return build_envelope(wire, name, ROUTES_SCHEMA, extra)


def routes_wire(routes: Any, *, num_experts: int | None) -> tuple[np.ndarray[Any, Any], str, dict[str, Any] | None]:
    """Check routes and return the wire array, its dtype name and the extra envelope fields.

    This is :func:`encode_routes` without the base64 step, for writers that place the bytes themselves.

    Raises:
        EncodeError: as :func:`encode_routes`.
    """
    arr = as_numpy(routes, field="routes")
    if arr.dtype.kind not in "iu":
        raise EncodeError.make("routes.dtype", "an integer dtype", str(arr.dtype), raw=True)
    if arr.ndim != _ROUTES_NDIM:
        raise EncodeError.make("routes", "a 3-d array [rows, layers, top_k]", f"shape {list(arr.shape)}", raw=True)
    n_experts = None if num_experts is None else _num_experts(num_experts, "num_experts", EncodeError)
    if arr.size:
        if arr.dtype.kind == "i":
            low = int(arr.min())
            if low < 0:
                where = _first_index(arr < 0)
                raise EncodeError.make(f"routes{where}", "a non-negative expert id", low)
        high = int(arr.max())
    else:
        high = 0
    if n_experts is not None:
        if high >= n_experts:
            where = _first_index(arr >= n_experts)
            raise EncodeError.make(f"routes{where}", f"an expert id below num_experts={n_experts}", high)
        name = dtype_for_num_experts(n_experts)
        extra: dict[str, Any] | None = {KEY_NUM_EXPERTS: n_experts}
    else:
        try:
            name = dtype_for_max_id(high)
        except ValueError:
            where = _first_index(arr == high)
            raise EncodeError.make(f"routes{where}", "an expert id below 2**31", high) from None
        extra = None
    return to_wire_bytes(arr, name), name, extra


def decode_routes(
    payload: Any,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
) -> np.ndarray[Any, Any]:
    """Decode an ``r3wire.routes`` envelope, or the seed's unversioned ``{data, shape, dtype}`` one.

    Args:
        payload: the envelope as a dict, or its JSON text as ``str`` or bytes.
        num_experts: the model's expert count, if the caller knows it: every id must be below it, and it must
            agree with the envelope's ``num_experts`` when that is present.
        max_elements: refuse a payload declaring more ids than this, before decoding anything.

    Returns:
        A writable, C-contiguous ``[rows, layers, top_k]`` array of uint8, int16 or int32, native byte order.

    Raises:
        DecodeError: the payload is malformed, inconsistent or breaks a limit; the message names the field,
            what was expected and what was got.
        UnsupportedVersionError: the payload's schema version is newer than this release reads.
    """
    expected_experts = None if num_experts is None else _num_experts(num_experts, "num_experts", R3WireError)
    if max_elements is not None:
        max_elements = check_int(max_elements, "max_elements", minimum=0, maximum=1 << 63, error=R3WireError)
    obj = load_object(payload, what="an r3wire.routes envelope")
    legacy = KEY_SCHEMA not in obj and KEY_VERSION not in obj
    header = read_header(
        obj,
        schema_name=ROUTES_SCHEMA.name,
        dtypes=ROUTE_DTYPES,
        ndim=_ROUTES_NDIM,
        optional=(KEY_NUM_EXPERTS,),
        max_elements=max_elements,
        legacy=legacy,
    )
    wire_experts = None
    if KEY_NUM_EXPERTS in obj:
        wire_experts = _num_experts(obj[KEY_NUM_EXPERTS], KEY_NUM_EXPERTS, DecodeError)
        fixed = dtype_for_num_experts(wire_experts)
        if header.dtype != fixed:
            raise DecodeError.make("dtype", f"{fixed!r} (fixed by num_experts={wire_experts})", header.dtype)
        if expected_experts is not None and expected_experts != wire_experts:
            raise DecodeError.make(KEY_NUM_EXPERTS, f"{expected_experts} (the caller's num_experts)", wire_experts)
    routes = decode_data(header)
    _check_ids(routes, header.dtype, bound=wire_experts or expected_experts, canonical=wire_experts is None)
    return routes


def _check_ids(routes: np.ndarray[Any, Any], dtype: str, *, bound: int | None, canonical: bool) -> None:
    if routes.size == 0:
        if canonical and dtype != "uint8":
            raise DecodeError.make("dtype", "'uint8' (the canonical dtype of an empty array)", dtype)
        return
    if dtype != "uint8":
        low = int(routes.min())
        if low < 0:
            where = _first_index(routes < 0)
            raise DecodeError.make(f"data{where}", "a non-negative expert id", low)
    if bound is None and (not canonical or dtype == "uint8"):  # every uint8 array is canonical
        return
    high = int(routes.max())
    if bound is not None and high >= bound:
        where = _first_index(routes >= bound)
        raise DecodeError.make(f"data{where}", f"an expert id below num_experts={bound}", high)
    if canonical:
        smallest = dtype_for_max_id(high)
        if smallest != dtype:
            raise DecodeError.make(
                "dtype",
                f"{smallest!r}, the smallest dtype holding the largest id {high} (non-canonical payload)",
                dtype,
            )
