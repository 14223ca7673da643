"""r3wire: a compact, fast, strictly validated wire codec for MoE routed-expert arrays and logprobs.

The public API, by concern:

- routes: :func:`encode_routes`, :func:`decode_routes`, :func:`route_dtype`
- trainer-side batching: :func:`pad_routes`, :func:`pad_sequences`, :func:`pack_routes`, :func:`unpack_routes`,
  :func:`validate_routes`, :class:`RouteTrace`
- routes as raw bytes (msgpack, ZMQ, Ray, HTTP octet-stream): :func:`encode_routes_frame`, :func:`decode_routes_frame`,
  :func:`frame_size`
- any per-token side channel: :func:`encode_array`, :func:`decode_array`
- sampled logprobs: :func:`clamp_logprobs` (:class:`ClampResult`), :func:`encode_logprobs`, :func:`decode_logprobs`,
  and the seed's JSON shape: :func:`build_logprobs_content`, :func:`read_logprobs_content`
- whole JSON responses with arrays anywhere in them: :func:`dumps`, :func:`iter_dumps` (streamed), :func:`loads`
- the wire contract: :class:`Schema`, :data:`ROUTES_SCHEMA`, :data:`ARRAY_SCHEMA`, :data:`LOGPROBS_SCHEMA`,
  :data:`WIRE_DTYPES`
- limits: :data:`DEFAULT_MAX_ELEMENTS` (what every decoder's ``max_elements=None`` means)
- errors: :class:`R3WireError`, :class:`EncodeError`, :class:`DecodeError`, :class:`UnsupportedVersionError`

Adapters live in submodules that import their framework only when used: ``r3wire.torch`` (tensors in and out),
``r3wire.vllm`` (routes and sampled logprobs from vLLM outputs); see ``docs/adapters.md``.
Other engines' formats: ``r3wire.formats`` (imported on first use).
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from r3wire._validate import DEFAULT_MAX_ELEMENTS
from r3wire._version import __version__
from r3wire.arrays import decode_array, encode_array
from r3wire.batching import RouteTrace, pack_routes, pad_routes, pad_sequences, unpack_routes, validate_routes
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
from r3wire.frame import decode_routes_frame, encode_routes_frame, frame_size
from r3wire.logprobs import (
    LOGPROB_FLOOR,
    ClampResult,
    build_logprobs_content,
    clamp_logprobs,
    decode_logprobs,
    encode_logprobs,
    read_logprobs_content,
)
from r3wire.response import dumps, iter_dumps, loads
from r3wire.routes import decode_routes, encode_routes, route_dtype
from r3wire.schema import (
    ARRAY_SCHEMA,
    LOGPROB_DTYPES,
    LOGPROBS_SCHEMA,
    ROUTE_DTYPES,
    ROUTES_SCHEMA,
    WIRE_DTYPES,
    Schema,
)

__all__ = [
    "ARRAY_SCHEMA",
    "DEFAULT_MAX_ELEMENTS",
    "LOGPROBS_SCHEMA",
    "LOGPROB_DTYPES",
    "LOGPROB_FLOOR",
    "ROUTES_SCHEMA",
    "ROUTE_DTYPES",
    "WIRE_DTYPES",
    "ClampResult",
    "DecodeError",
    "EncodeError",
    "R3WireError",
    "RouteTrace",
    "Schema",
    "UnsupportedVersionError",
    "__version__",
    "build_logprobs_content",
    "clamp_logprobs",
    "decode_array",
    "decode_logprobs",
    "decode_routes",
    "decode_routes_frame",
    "dumps",
    "encode_array",
    "encode_logprobs",
    "encode_routes",
    "encode_routes_frame",
    "frame_size",
    "iter_dumps",
    "loads",
    "pack_routes",
    "pad_routes",
    "pad_sequences",
    "read_logprobs_content",
    "route_dtype",
    "unpack_routes",
    "validate_routes",
]


if _TYPE_CHECKING:
    from r3wire import formats as formats


def __getattr__(name: str) -> object:
    # `r3wire.formats` without importing it (and its format tables) at `import r3wire`.
    if name == "formats":
        return _importlib.import_module("r3wire.formats")
    raise AttributeError(f"module 'r3wire' has no attribute {name!r}")
