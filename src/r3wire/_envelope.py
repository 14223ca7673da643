"""The JSON envelope shared by every schema: writing one, and reading one in the documented order.

Routes, logprobs and generic side channels are all this envelope with a different schema name, dtype set and
extra header fields. :func:`check_header` is the one header reader: the envelope and the routes frame
(:mod:`r3wire.frame`) both check their declared fields through it, so the check order is stated in one place
(docs/wire-format.md §8) and cannot drift between them. Value checks after decoding live with each schema.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, NamedTuple

import numpy as np

from r3wire._base64 import b64decode_range, b64decode_strict, b64encode_text, check_canonical, check_encoded_length
from r3wire._routecheck import ROUTES_MIN_DIMS, check_bits, check_declared, check_num_experts
from r3wire._validate import Text, as_text, check_element_count, check_keys, check_shape, plain_str
from r3wire.bitpack import packed_nbytes, unpack_bits_from
from r3wire.errors import DecodeError, EncodeError
from r3wire.schema import (
    KEY_BITS,
    KEY_DATA,
    KEY_DTYPE,
    KEY_NUM_EXPERTS,
    KEY_SCHEMA,
    KEY_SHAPE,
    KEY_VERSION,
    WIRE_DTYPES,
    Schema,
)

__all__ = [
    "ABSENT",
    "Header",
    "build_envelope",
    "check_header",
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


class _Absent:
    """The type of :data:`ABSENT`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""An optional header field that is not there (``None`` is a value a payload can carry: JSON ``null``)."""


class Header(NamedTuple):
    """What an envelope or a frame declares, checked, before its data is decoded.

    A NamedTuple rather than a frozen dataclass: it is built on every decode, and costs a third as much.
    """

    schema: Schema | None  # None for the seed's unversioned routes envelope, and for the frame
    dtype: str
    shape: tuple[int, ...]
    elements: int  # the element count, product of the shape
    nbytes: int  # the decoded data's byte count: count x itemsize, or the packed stream's length
    num_experts: int | None  # routes: declared by the payload
    bits: int | None  # routes: the packed width, None when the ids travel as ``dtype``
    data: object  # base64 text (envelope) or the raw bytes after the header (frame)


def read_header(
    obj: Mapping[str, Any],
    *,
    schema_name: str,
    dtypes: Collection[str],
    ndim: int | None,
    optional: Sequence[str] = (),
    max_elements: int | None = None,
    legacy: bool = False,
    routes: bool = False,
    expected_experts: int | None = None,
) -> Header:
    """Check an envelope's header in the documented order (docs/wire-format.md §8), up to its data.

    The envelope's own steps (members, then schema and version) come first; the rest is :func:`check_header`,
    shared with the routes frame. ``legacy`` reads the seed's unversioned ``{data, shape, dtype}`` form (no
    schema, no optional keys). ``routes`` applies the routes rules (shape ``[rows, layers >= 1, top_k >= 1]``,
    ``num_experts``, ``bits``) with the caller's ``expected_experts``.

    Raises:
        DecodeError: the first rule that does not hold.
        UnsupportedVersionError: the payload's schema version is not one this release reads.
    """
    if legacy:
        check_keys(obj, required=(KEY_DATA, KEY_SHAPE, KEY_DTYPE))
        schema = None
    else:
        check_keys(obj, required=(KEY_DATA, KEY_SHAPE, KEY_DTYPE, KEY_SCHEMA, KEY_VERSION), optional=optional)
        schema = Schema.from_dict(obj, expected=schema_name)
    return check_header(
        dtype=obj[KEY_DTYPE],
        shape=obj[KEY_SHAPE],
        data=obj[KEY_DATA],
        dtypes=dtypes,
        ndim=ndim,
        max_elements=max_elements,
        schema=schema,
        routes=routes,
        num_experts=obj.get(KEY_NUM_EXPERTS, ABSENT),
        bits=obj.get(KEY_BITS, ABSENT),
        expected_experts=expected_experts,
    )


def check_header(
    *,
    dtype: object,
    shape: object,
    data: object,
    dtypes: Collection[str],
    ndim: int | None,
    max_elements: int | None,
    schema: Schema | None = None,
    routes: bool = False,
    num_experts: object = ABSENT,
    bits: object = ABSENT,
    expected_experts: int | None = None,
    raw: bool = False,
) -> Header:
    """Check a header's declared fields in the one documented order; the envelope and the frame both end here.

    The order (docs/wire-format.md §8, steps 4-8): ``dtype``; ``shape`` (entries, then the extent); for routes,
    ``num_experts`` (its range, the dtype it fixes, the caller's value) then ``bits``; the data's length; the
    element limit. Nothing is decoded or allocated: ``data`` is base64 text, or the frame's bytes when ``raw``.

    Raises:
        DecodeError: the first rule that does not hold.
    """
    dtype = plain_str(dtype)
    if not isinstance(dtype, str) or dtype not in dtypes:
        raise DecodeError.make(KEY_DTYPE, f"one of {list(dtypes)}", dtype)
    dims = check_shape(shape, KEY_SHAPE, ndim=ndim, minimums=ROUTES_MIN_DIMS if routes else ())
    wire_experts = width = None
    if routes:
        if num_experts is not ABSENT:
            wire_experts = check_num_experts(num_experts, KEY_NUM_EXPERTS, DecodeError)
        check_declared(dtype, wire_experts=wire_experts, expected_experts=expected_experts)
        if bits is not ABSENT:
            width = check_bits(bits, dtype, wire_experts=wire_experts)
    count = math.prod(dims)
    nbytes = count * WIRE_DTYPES[dtype].itemsize if width is None else packed_nbytes(count, width)
    if raw:
        _check_raw_length(data, nbytes, count, width or dtype)
    else:
        data = _check_text_length(data, nbytes)
    if max_elements is None or count > max_elements or not count:  # else the count is the extent, and within it
        check_element_count(dims, max_elements)
    return Header(
        schema=schema,
        dtype=dtype,
        shape=dims,
        elements=count,
        nbytes=nbytes,
        num_experts=wire_experts,
        bits=width,
        data=data,
    )


def _check_text_length(data: object, nbytes: int) -> Text:
    text = as_text(data, KEY_DATA, "a base64 string", buffers=False)
    check_encoded_length(text, nbytes, KEY_DATA)
    return text


def _check_raw_length(data: object, nbytes: int, count: int, packing: int | str) -> None:
    size = len(data) if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)) else -1
    if size != nbytes:
        shown = f"{packing} bits" if isinstance(packing, int) else packing
        raise DecodeError.make(
            KEY_DATA, f"{nbytes} bytes after the header ({count} ids as {shown})", f"{size} bytes", raw=True
        )


def decode_data(header: Header) -> np.ndarray[Any, Any]:
    """Decode the header's base64 data into a writable, C-contiguous, native-byte-order array.

    A packed header's data is the bit stream of the ids (``header.bits`` each), unpacked into the header's dtype.
    The text length was checked by :func:`check_header` before anything was allocated.

    Raises:
        DecodeError: the data is not the canonical base64 of exactly the declared number of bytes, or a packed
            stream's pad bits are not zero.
    """
    wire_dtype = WIRE_DTYPES[header.dtype]
    data = header.data
    assert isinstance(data, (str, bytes, bytearray, memoryview))  # check_header checked it
    if header.bits is not None:
        # Range by range: the decoded stream never exists whole beside the unpacked ids (issue 14: a packed
        # loads peaked at 2.7x its output for W1 and 1.7x for Kimi K2 with the whole stream decoded first).
        text = check_canonical(data, header.nbytes, field=KEY_DATA)
        read = functools.partial(b64decode_range, text, header.nbytes, field=KEY_DATA)
        ids = unpack_bits_from(read, header.elements, header.bits, wire_dtype, field=KEY_DATA)
        return ids.reshape(header.shape)
    buffer = b64decode_strict(data, header.nbytes, field=KEY_DATA)
    array: np.ndarray[Any, Any] = np.frombuffer(buffer, dtype=wire_dtype)
    if not array.flags.writeable:
        # The stdlib back end returns immutable bytes; pybase64 decodes straight into a bytearray, no copy.
        array = array.copy()
    if not _LITTLE and wire_dtype.itemsize > 1:
        array = array.astype(wire_dtype.newbyteorder("="))
    return array.reshape(header.shape)
