"""Routed-expert ids ``[rows, layers, top_k]``: the ``r3wire.routes`` schema on top of the array envelope.

Routes differ from a generic array in four ways: the dtype is chosen (the smallest of uint8/int16/int32 that
holds the ids, or fixed by ``num_experts``), ids are checked (non-negative, below ``num_experts``), ids may travel
bit-packed (``bits`` bits each, :mod:`r3wire.bitpack`), and the decoder also reads the seed's unversioned
``{data, shape, dtype}`` envelope that SkyRL servers send today. The rules live in :mod:`r3wire._routecheck`,
shared with the binary frame (:mod:`r3wire.frame`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r3wire import bitpack
from r3wire._envelope import build_envelope, decode_data, read_header
from r3wire._routecheck import (
    ROUTES_NDIM,
    check_ids,
    check_num_experts,
    optional_num_experts,
    prepare_routes,
    wire_ids,
)
from r3wire._validate import load_object, optional_max_elements
from r3wire.errors import R3WireError
from r3wire.schema import (
    KEY_BITS,
    KEY_NUM_EXPERTS,
    KEY_SCHEMA,
    KEY_VERSION,
    ROUTE_DTYPES,
    ROUTES_SCHEMA,
    dtype_for_num_experts,
)

__all__ = ["decode_routes", "encode_routes", "route_dtype"]


def route_dtype(num_experts: int) -> np.dtype[Any]:
    """The NumPy dtype routes of a model with ``num_experts`` experts travel in (uint8, int16 or int32).

    Use it to allocate trainer buffers that match the wire exactly on every rank.

    Raises:
        R3WireError: ``num_experts`` is not an integer in ``1 .. 2**31``.
    """
    n = check_num_experts(num_experts, "num_experts", R3WireError)
    return np.dtype(dtype_for_num_experts(n))


def encode_routes(routes: Any, *, num_experts: int | None = None, pack_bits: bool = False) -> dict[str, Any]:
    """Encode routed-expert ids as a compact ``r3wire.routes`` envelope.

    Args:
        routes: integer ids ``[rows, layers, top_k]``: a NumPy array of any integer dtype, byte order or memory
            order (read-only and empty arrays included), a torch tensor, or nested lists.
        num_experts: the model's expert count. When given, the dtype is fixed by it (uint8 if ≤ 256, int16 if
            ≤ 32768, else int32), identical on every rank and turn, every id must be below it, and it is recorded
            in the envelope. When omitted, the dtype is the smallest that holds the largest id.
        pack_bits: store each id in exactly ``bits`` bits, declared in the envelope: the fewest bits holding
            ``num_experts - 1`` (9 for 384 experts, 7 for 128), or the largest id when ``num_experts`` is
            omitted. ``dtype`` still names the dtype the ids decode to.

    Returns:
        A JSON-ready dict ``{"data", "shape", "dtype", "schema", "version"[, "num_experts"][, "bits"]}``.

    Raises:
        EncodeError: not a 3-d integer array (a nested list whose values NumPy would change, such as a bool
            among ids, is refused), a negative id, an id ≥ ``num_experts``, or an id ≥ 2**31.
    """
    wire, name, extra, shape = routes_wire(routes, num_experts=num_experts, pack_bits=pack_bits)
    return build_envelope(wire, name, ROUTES_SCHEMA, extra, shape=shape)


def routes_wire(
    routes: Any, *, num_experts: int | None, pack_bits: bool
) -> tuple[np.ndarray[Any, Any], str, dict[str, Any], tuple[int, ...] | None]:
    """:func:`encode_routes` without the base64 step, for writers that place the bytes themselves.

    Returns the wire bytes (as an array), the dtype name, the extra envelope fields and the logical shape when
    the wire array has another (bit-packed).

    Raises:
        EncodeError: as :func:`encode_routes`.
    """
    plan = prepare_routes(routes, num_experts=num_experts, pack_bits=pack_bits)
    extra: dict[str, Any] = {}
    if plan.num_experts is not None:
        extra[KEY_NUM_EXPERTS] = plan.num_experts
    if plan.bits is None:
        return wire_ids(plan), plan.dtype, extra, None
    extra[KEY_BITS] = plan.bits
    packed = bitpack.pack_bits(plan.array, plan.bits, checked=True)
    return packed, plan.dtype, extra, plan.array.shape


def decode_routes(
    payload: Any,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
) -> np.ndarray[Any, Any]:
    """Decode an ``r3wire.routes`` envelope, or the seed's unversioned ``{data, shape, dtype}`` one.

    Bit-packed envelopes (a ``bits`` key) are unpacked into the same array the unpacked form gives.

    Args:
        payload: the envelope as a dict, or its JSON text as ``str`` or bytes.
        num_experts: the model's expert count, if the caller knows it: every id must be below it, and it must
            agree with the envelope's ``num_experts`` when that is present.
        max_elements: refuse a payload declaring more ids than this, before decoding anything; ``None`` means
            ``DEFAULT_MAX_ELEMENTS`` (2**30). Pass a larger int to raise it.

    Returns:
        A writable, C-contiguous ``[rows, layers, top_k]`` array of uint8, int16 or int32, native byte order.

    Raises:
        DecodeError: the payload is malformed (JSON text naming a member twice included), inconsistent or breaks
            a limit; the message names the field, what was expected and what was got.
        UnsupportedVersionError: the payload's schema version is not one this release reads.
        R3WireError: ``num_experts`` or ``max_elements`` is invalid.
    """
    expected_experts = optional_num_experts(num_experts)
    max_elements = optional_max_elements(max_elements)
    obj = load_object(payload, what="an r3wire.routes envelope")
    header = read_header(
        obj,
        schema_name=ROUTES_SCHEMA.name,
        dtypes=ROUTE_DTYPES,
        ndim=ROUTES_NDIM,
        optional=(KEY_NUM_EXPERTS, KEY_BITS),
        max_elements=max_elements,
        # The seed's form is the object with neither member; with either one, the payload claims a version.
        legacy=KEY_SCHEMA not in obj and KEY_VERSION not in obj,
        routes=True,
        expected_experts=expected_experts,
    )
    routes = decode_data(header)
    check_ids(
        routes,
        header.dtype,
        bound=header.num_experts or expected_experts,
        canonical=header.num_experts is None,
        bits=header.bits,
    )
    return routes
