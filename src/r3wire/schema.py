"""The wire contract: schema names and versions, the closed list of dtypes, and the envelope's keys.

Everything a payload may contain is named here once; readers and writers import these constants rather than
spelling strings of their own. See ``docs/wire-format.md`` for the language-neutral specification.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from r3wire._validate import is_int, plain_str
from r3wire.errors import DecodeError, UnsupportedVersionError, describe

__all__ = [
    "ARRAY_SCHEMA",
    "LOGPROBS_SCHEMA",
    "LOGPROB_DTYPES",
    "ROUTES_SCHEMA",
    "ROUTE_DTYPES",
    "WIRE_DTYPES",
    "Schema",
    "bits_for_max_id",
    "bits_for_num_experts",
    "dtype_for_max_id",
    "dtype_for_num_experts",
]

# Key names on the wire. ``data`` comes first in every envelope so a reader of the raw text finds the blob at a
# fixed place; the small fields follow.
KEY_DATA: Final = "data"
KEY_SHAPE: Final = "shape"
KEY_DTYPE: Final = "dtype"
KEY_SCHEMA: Final = "schema"
KEY_VERSION: Final = "version"
KEY_NUM_EXPERTS: Final = "num_experts"
KEY_BITS: Final = "bits"  # routes only: ids travel bit-packed, this many bits each (docs/bitpack-and-frame.md)

# The closed list of element types, by wire name. Bytes are little-endian whatever the host; single-byte types
# have no byte order. Platform dtype strings ("<i4", "long") are never accepted on the wire.
WIRE_DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    "bool": np.dtype("?"),
    "uint8": np.dtype("u1"),
    "int8": np.dtype("i1"),
    "uint16": np.dtype("<u2"),
    "int16": np.dtype("<i2"),
    "uint32": np.dtype("<u4"),
    "int32": np.dtype("<i4"),
    "uint64": np.dtype("<u8"),
    "int64": np.dtype("<i8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}

# Routes use only these. int16 rather than uint16 because torch supports uint16 poorly (FACTS §2, seed PR).
ROUTE_DTYPES: Final[tuple[str, ...]] = ("uint8", "int16", "int32")

# Logprobs travel in the dtype they were given in, never converted. Engines compute them in float32; float16 is
# left out because it cannot even hold the standard floor -9999.0 (it rounds to -10000.0).
LOGPROB_DTYPES: Final[tuple[str, ...]] = ("float32", "float64")

# Largest num_experts each route dtype can hold: ids are 0 .. num_experts - 1.
_ROUTE_DTYPE_LIMITS: Final[tuple[tuple[int, str], ...]] = (
    (1 << 8, "uint8"),
    (1 << 15, "int16"),
    (1 << 31, "int32"),
)
MAX_NUM_EXPERTS: Final = 1 << 31


def dtype_for_num_experts(num_experts: int) -> str:
    """The route dtype chosen from the model's expert count: uint8 if ≤ 256, int16 if ≤ 32768, else int32.

    The choice depends only on the model, so every rank and every turn of a trajectory gets the same dtype.

    Raises:
        ValueError: ``num_experts`` is not in ``1 .. 2**31`` (callers wrap this in their own error type).
    """
    for limit, name in _ROUTE_DTYPE_LIMITS:
        if num_experts <= limit:
            return name
    raise ValueError(num_experts)


def dtype_for_max_id(max_id: int) -> str:
    """The seed's data-dependent ladder: max < 2**8 → uint8, < 2**15 → int16, < 2**31 → int32.

    Raises:
        ValueError: ``max_id`` is 2**31 or more.
    """
    for limit, name in _ROUTE_DTYPE_LIMITS:
        if max_id < limit:
            return name
    raise ValueError(max_id)


def bits_for_num_experts(num_experts: int) -> int:
    """Bits per bit-packed id for a model with ``num_experts`` experts: the fewest holding ``num_experts - 1``.

    At least 1 (a one-expert model still sends one bit per id); 9 for Kimi K2's 384 experts, 7 for 128.
    """
    return max(1, (num_experts - 1).bit_length())


def bits_for_max_id(max_id: int) -> int:
    """Bits per bit-packed id chosen from the data: the fewest holding ``max_id`` (at least 1)."""
    return max(1, max_id.bit_length())


@dataclass(frozen=True, slots=True, kw_only=True)
class Schema:
    """A payload kind and its integer version, written into every envelope as ``schema`` and ``version``.

    The wire version is independent of the package version: it changes only when the format does, and a
    reader rejects a version it does not know rather than guess.
    """

    name: str
    version: int

    def to_dict(self) -> dict[str, str | int]:
        """The envelope fields that declare this schema."""
        return {KEY_SCHEMA: self.name, KEY_VERSION: self.version}

    @classmethod
    def from_dict(cls, payload: Mapping[str, object], *, expected: str) -> Schema:
        """Read and check the ``schema`` and ``version`` fields of an envelope.

        Raises:
            DecodeError: a field is missing, has the wrong type, or names another schema.
            UnsupportedVersionError: the version is one this release cannot read.
        """
        if KEY_SCHEMA not in payload:
            raise DecodeError.make(KEY_SCHEMA, f"present (the string {expected!r})", "no such key", raw=True)
        if KEY_VERSION not in payload:
            raise DecodeError.make(KEY_VERSION, "present (an integer)", "no such key", raw=True)
        name = plain_str(payload[KEY_SCHEMA])
        # isinstance first: ``!=`` on a foreign value (an ndarray) may not even return a bool.
        if not isinstance(name, str) or name != expected:
            raise DecodeError.make(KEY_SCHEMA, repr(expected), name)
        version = payload[KEY_VERSION]
        if not is_int(version):
            raise DecodeError.make(KEY_VERSION, "an integer", version)
        supported = SUPPORTED_VERSIONS[name]
        version = int(version)
        if version not in supported:
            raise UnsupportedVersionError(
                f"{KEY_VERSION} {describe(version)} of schema {name!r} is not supported by this release of r3wire, "
                f"which reads versions {list(supported)}; {_version_advice(version, max(supported), 'payloads')}",
                field=KEY_VERSION,
                version=version,
                supported=supported,
            )
        return cls(name=name, version=version)


def _version_advice(version: int, newest: int, what: str) -> str:
    """What a reader can do about an unsupported version: upgrade for a newer one; nothing for one below 1."""
    if version > newest:
        return f"upgrade r3wire to read newer {what}"
    return f"no release of r3wire reads version {describe(version)} (versions start at 1)"


ROUTES_SCHEMA: Final = Schema(name="r3wire.routes", version=1)
"""Routed-expert ids ``[rows, layers, top_k]``."""

ARRAY_SCHEMA: Final = Schema(name="r3wire.array", version=1)
"""Any per-token side channel: an n-dimensional array of one of :data:`WIRE_DTYPES`."""

LOGPROBS_SCHEMA: Final = Schema(name="r3wire.logprobs", version=1)
"""Per-token logprobs: float32 or float64 of any shape, every value finite."""

SUPPORTED_VERSIONS: Final[Mapping[str, tuple[int, ...]]] = {
    ROUTES_SCHEMA.name: (1,),
    ARRAY_SCHEMA.name: (1,),
    LOGPROBS_SCHEMA.name: (1,),
}
