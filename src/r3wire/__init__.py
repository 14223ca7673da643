"""r3wire: a compact, fast, strictly validated wire codec for MoE routed-expert arrays and logprobs.

The public API, by concern:

- routes: :func:`encode_routes`, :func:`decode_routes`, :func:`route_dtype`
- routes as raw bytes (msgpack, ZMQ, Ray, HTTP octet-stream): :func:`encode_routes_frame`, :func:`decode_routes_frame`
- any per-token side channel: :func:`encode_array`, :func:`decode_array`
- whole JSON responses with arrays anywhere in them: :func:`dumps`, :func:`loads`
- the wire contract: :class:`Schema`, :data:`ROUTES_SCHEMA`, :data:`ARRAY_SCHEMA`, :data:`WIRE_DTYPES`
- errors: :class:`R3WireError`, :class:`EncodeError`, :class:`DecodeError`, :class:`UnsupportedVersionError`

Adapters live in submodules that import their framework only when used: ``r3wire.torch``.
"""

from r3wire._version import __version__
from r3wire.arrays import decode_array, encode_array
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
from r3wire.frame import decode_routes_frame, encode_routes_frame
from r3wire.response import dumps, loads
from r3wire.routes import decode_routes, encode_routes, route_dtype
from r3wire.schema import ARRAY_SCHEMA, ROUTE_DTYPES, ROUTES_SCHEMA, WIRE_DTYPES, Schema

__all__ = [
    "ARRAY_SCHEMA",
    "ROUTES_SCHEMA",
    "ROUTE_DTYPES",
    "WIRE_DTYPES",
    "DecodeError",
    "EncodeError",
    "R3WireError",
    "Schema",
    "UnsupportedVersionError",
    "__version__",
    "decode_array",
    "decode_routes",
    "decode_routes_frame",
    "dumps",
    "encode_array",
    "encode_routes",
    "encode_routes_frame",
    "loads",
    "route_dtype",
]
