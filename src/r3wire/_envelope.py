"""The JSON envelope shared by every schema: writing one, and reading one in the documented order.

Routes, logprobs and generic side channels are all this envelope with a different schema name, dtype set and
extra header fields; the schema-specific value checks live with each schema, not here.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from r3wire._base64 import b64decode_strict, b64encode_text
from r3wire._validate import check_element_count, check_keys, check_shape
from r3wire.bitpack import packed_nbytes, unpack_bits
from r3wire.errors import DecodeError, EncodeError
from r3wire.schema import KEY_DATA, KEY_DTYPE, KEY_SHAPE, WIRE_DTYPES, Schema

__all__ = [
    "Header",
    "build_envelope",
    "decode_data",
    "read_header",
    "to_wire_bytes",
    "wire_buffer",
    "wire_dtype_name",
]

_LITTLE = sys.byteorder == "little"

_BY_KIND_AND_SIZE: dict[tuple[str, int], str] = {
    (dtype.kind, dtype.itemsize): name for name, dtype in WIRE_DTYPES.items()
}


def wire_dtype_name(dtype: np.dtype[Any], *, field: str, allowed: Collection[str] | None = None) -> str:
    """The wire name of ``dtype`` (any byte order), which must be one of ``allowed``.

    Raises:
        EncodeError: the dtype has no wire name, or its name is not allowed.
    """
    name = _BY_KIND_AND_SIZE.get((dtype.kind, dtype.itemsize)) if dtype.fields is None else None
    if name is None or (allowed is not None and name not in allowed):
        choices = sorted(allowed) if allowed is not None else list(WIRE_DTYPES)
        raise EncodeError.make(f"{field}.dtype", f"one of {choices}", str(dtype), raw=True)
    return name


def to_wire_bytes(array: np.ndarray[Any, Any], name: str) -> np.ndarray[Any, Any]:
    """``array`` as a C-contiguous little-endian array of wire dtype ``name``; no copy when it already is one.

    The caller has checked that every value fits ``name``.
    """
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    return np.asarray(array, dtype=WIRE_DTYPES[name], order="C")


def build_envelope(
    wire: np.ndarray[Any, Any],
    name: str,
    schema: Schema,
    extra: Mapping[str, Any] | None = None,
    *,
    shape: Sequence[int] | None = None,
    data: object = None,
) -> dict[str, Any]:
    """The envelope of ``wire`` (from :func:`to_wire_bytes`): data first, then shape, dtype, schema, extras.

    ``shape`` is the logical shape when ``wire`` holds something else, such as the bytes of bit-packed ids.
    ``data`` replaces the base64 text when given: a writer that splices the bytes in itself passes a placeholder.
    """
    envelope: dict[str, Any] = {
        KEY_DATA: b64encode_text(wire_buffer(wire)) if data is None else data,
        KEY_SHAPE: [int(n) for n in (wire.shape if shape is None else shape)],
        KEY_DTYPE: name,
    }
    envelope.update(schema.to_dict())
    if extra:
        envelope.update(extra)
    return envelope


def wire_buffer(wire: np.ndarray[Any, Any]) -> memoryview:
    """The bytes of ``wire`` (from :func:`to_wire_bytes`) as a flat memoryview, without copying."""
    return wire.reshape(-1).view(np.uint8).data


@dataclass(frozen=True, slots=True)
class Header:
    """What an envelope declares, checked, before its data is decoded."""

    schema: Schema | None  # None for the seed's unversioned routes envelope
    dtype: str
    shape: tuple[int, ...]
    count: int
    data: object
    fields: Mapping[str, Any]


def read_header(
    obj: Mapping[str, Any],
    *,
    schema_name: str,
    dtypes: Collection[str],
    ndim: int | None,
    optional: Sequence[str] = (),
    max_elements: int | None = None,
    legacy: bool = False,
) -> Header:
    """Check an envelope's header in the documented order: keys, schema and version, dtype, shape, size.

    ``legacy`` reads the seed's unversioned ``{data, shape, dtype}`` form (no schema, no optional keys).
    The data field is checked only for its type here; its length is checked by :func:`decode_data`.

    Raises:
        DecodeError: the first rule that does not hold.
        UnsupportedVersionError: the payload's schema version is not one this release reads.
    """
    if legacy:
        check_keys(obj, required=(KEY_DATA, KEY_SHAPE, KEY_DTYPE))
        schema = None
    else:
        check_keys(obj, required=(KEY_DATA, KEY_SHAPE, KEY_DTYPE, "schema", "version"), optional=optional)
        schema = Schema.from_dict(obj, expected=schema_name)
    dtype = obj[KEY_DTYPE]
    if not isinstance(dtype, str) or dtype not in dtypes:
        raise DecodeError.make(KEY_DTYPE, f"one of {list(dtypes)}", dtype)
    shape = check_shape(obj[KEY_SHAPE], KEY_SHAPE, ndim=ndim)
    count = check_element_count(shape, max_elements)
    data = obj[KEY_DATA]
    if not isinstance(data, (str, bytes, bytearray, memoryview)):
        raise DecodeError.make(KEY_DATA, "a base64 string", type(data).__name__, raw=True)
    return Header(schema=schema, dtype=dtype, shape=shape, count=count, data=data, fields=obj)


def decode_data(header: Header, *, bits: int | None = None) -> np.ndarray[Any, Any]:
    """Decode the header's base64 data into a writable, C-contiguous, native-byte-order array.

    With ``bits``, the data is the bit-packed stream of the ids (checked to fit the header's dtype by the caller),
    unpacked into that dtype. The text length is checked against the declared shape before anything is allocated.

    Raises:
        DecodeError: the data is not the canonical base64 of exactly the declared number of bytes, or a packed
            stream's pad bits are not zero.
    """
    wire_dtype = WIRE_DTYPES[header.dtype]
    nbytes = header.count * wire_dtype.itemsize if bits is None else packed_nbytes(header.count, bits)
    data = header.data
    assert isinstance(data, (str, bytes, bytearray, memoryview))  # read_header checked it
    buffer = b64decode_strict(data, nbytes, field=KEY_DATA)
    if bits is not None:
        return unpack_bits(buffer, header.count, bits, wire_dtype, field=KEY_DATA).reshape(header.shape)
    array: np.ndarray[Any, Any] = np.frombuffer(buffer, dtype=wire_dtype)
    if not array.flags.writeable:
        # The stdlib back end returns immutable bytes; pybase64 decodes straight into a bytearray, no copy.
        array = array.copy()
    if not _LITTLE and wire_dtype.itemsize > 1:
        array = array.astype(wire_dtype.newbyteorder("="))
    return array.reshape(header.shape)
