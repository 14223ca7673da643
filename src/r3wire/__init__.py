"""r3wire: a compact, fast, strictly validated wire codec for MoE routed-expert arrays and logprobs.

The public API, by concern:

- routes: :func:`encode_routes`, :func:`decode_routes`, :func:`route_dtype`
- any per-token side channel: :func:`encode_array`, :func:`decode_array`
- the wire contract: :class:`Schema`, :data:`ROUTES_SCHEMA`, :data:`ARRAY_SCHEMA`, :data:`WIRE_DTYPES`
- errors: :class:`R3WireError`, :class:`EncodeError`, :class:`DecodeError`, :class:`UnsupportedVersionError`

Adapters live in submodules that import their framework only when used: ``r3wire.torch``.
Other engines' formats: ``r3wire.formats`` (imported on first use).
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

from r3wire._version import __version__
from r3wire.arrays import decode_array, encode_array
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
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
    "encode_array",
    "encode_routes",
    "route_dtype",
]


if _TYPE_CHECKING:
    from r3wire import formats as formats


def __getattr__(name: str) -> object:
    # `r3wire.formats` without importing it (and its format tables) at `import r3wire`.
    if name == "formats":
        return _importlib.import_module("r3wire.formats")
    raise AttributeError(f"module 'r3wire' has no attribute {name!r}")
