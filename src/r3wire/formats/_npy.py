"""vLLM's HTTP ``choices[i].routed_experts``: standard base64 of a complete ``.npy`` file (``np.save`` output).

The ``.npy`` header is parsed here, never by ``np.load``: magic, version, header-length cap, the header literal,
its exact key set, an integer ``descr`` from a closed list, ``fortran_order``, a 3-d shape, and the byte count
against the shape, all before the data is decoded. Object and structured dtypes are refused, so nothing is ever
unpickled. Big-endian data is converted to native order; Fortran-ordered data is returned C-contiguous.
"""

from __future__ import annotations

import ast
import base64
import binascii
import io
import struct
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from r3wire._base64 import b64decode_strict, b64encode_text
from r3wire._typeset import is_mapping
from r3wire._validate import check_element_count, check_shape
from r3wire.errors import DecodeError, describe
from r3wire.formats._common import (
    ReadOptions,
    ReadResult,
    WriteOptions,
    array_from_buffer,
    b64_decoded_length,
    check_ids,
    choose_dtype,
    mapping_get,
    prepared_routes,
    text_of,
)

__all__ = ["NPY_DESCRS", "NPY_MAGIC", "VLLM_DTYPES", "read_vllm_npy", "write_vllm_npy"]

NPY_MAGIC: Final = b"\x93NUMPY"
NPY_MAGIC_B64: Final = "k05VTVBZ"  # base64 of NPY_MAGIC: how a reader recognises the format from text
# Preamble = magic + 2 version bytes + header length (u16 in version 1.0, u32 in 2.0 and 3.0).
_PREAMBLE: Final[Mapping[tuple[int, int], tuple[int, str]]] = {
    (1, 0): (10, "<H"),
    (2, 0): (12, "<I"),
    (3, 0): (12, "<I"),
}
# numpy refuses headers above 10000 bytes unless told otherwise (np.lib.format, max_header_size); so do we.
MAX_HEADER_SIZE: Final = 10_000
_HEADER_KEYS: Final = frozenset({"descr", "fortran_order", "shape"})
# Integer element types only, as np.save spells them (dtype.str). Booleans, floats, objects and structs are not
# expert ids; "|O" would also mean pickle.
NPY_DESCRS: Final = frozenset(
    {"|u1", "|i1"} | {f"{order}{kind}{size}" for order in "<>" for kind in "ui" for size in (2, 4, 8)}
)
KEY_ROUTED_EXPERTS: Final = "routed_experts"
# What a vLLM choice carries: uint8 (<= 256 experts), uint16, or int32 in older releases (formats.md §2).
VLLM_DTYPES: Final = ("uint8", "uint16", "int16", "int32")
_VLLM_LADDER: Final = ("uint8", "uint16", "int32")


def _b64_prefix(text: str | bytes | bytearray | memoryview, nbytes: int) -> bytes:
    """The first ``nbytes`` decoded bytes of base64 ``text`` (decoding only the characters needed)."""
    chars = min(len(text), -(-nbytes // 3) * 4)
    chunk = text[:chars]
    try:
        return base64.b64decode(chunk, validate=True)[:nbytes]
    except (binascii.Error, ValueError, TypeError, BufferError) as exc:
        raise DecodeError.make(
            KEY_ROUTED_EXPERTS, "standard base64 (A-Z a-z 0-9 + / with '=' padding)", str(exc), raw=True
        ) from exc


def _parse_header(text: str) -> tuple[np.dtype[Any], bool, tuple[int, ...]]:
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise DecodeError.make("npy header", "a Python dict literal", f"{type(exc).__name__}", raw=True) from exc
    if not isinstance(header, dict):
        raise DecodeError.make("npy header", "a dict", type(header).__name__, raw=True)
    if set(header) != _HEADER_KEYS:
        # describe(), not repr(): a key may be an int too long to print (or any other literal).
        shown = ", ".join(sorted(describe(key) for key in list(header)[:8]))
        raise DecodeError.make("npy header", f"a dict with keys {sorted(_HEADER_KEYS)}", f"keys {shown}", raw=True)
    descr = header["descr"]
    if not isinstance(descr, str):
        raise DecodeError.make("npy header.descr", "an integer dtype string (structured dtypes are refused)", descr)
    if descr not in NPY_DESCRS:
        why = " (object arrays would need pickle, never loaded)" if "O" in descr else ""
        raise DecodeError.make("npy header.descr", f"one of {sorted(NPY_DESCRS)}{why}", descr)
    fortran = header["fortran_order"]
    if not isinstance(fortran, bool):
        raise DecodeError.make("npy header.fortran_order", "True or False", fortran)
    shape = check_shape(header["shape"], "npy header.shape", ndim=3)
    return np.dtype(descr), fortran, shape


def _npy_to_routes(payload: str | bytes | bytearray | memoryview, *, max_elements: int | None) -> np.ndarray[Any, Any]:
    raw = None if isinstance(payload, str) or bytes(payload[: len(NPY_MAGIC)]) != NPY_MAGIC else payload
    total = b64_decoded_length(payload, KEY_ROUTED_EXPERTS) if raw is None else len(raw)

    def head(nbytes: int) -> bytes:
        if nbytes > total:
            raise DecodeError.make(
                KEY_ROUTED_EXPERTS, f"a .npy file of at least {nbytes} bytes", f"{total} bytes", raw=True
            )
        return _b64_prefix(payload, nbytes) if raw is None else bytes(raw[:nbytes])

    start = head(len(NPY_MAGIC) + 2)
    if start[: len(NPY_MAGIC)] != NPY_MAGIC:
        raise DecodeError.make("npy magic", repr(NPY_MAGIC), start[: len(NPY_MAGIC)])
    version = (start[6], start[7])
    if version not in _PREAMBLE:
        raise DecodeError.make("npy version", f"one of {sorted(_PREAMBLE)}", version)
    preamble, length_format = _PREAMBLE[version]
    (header_len,) = struct.unpack(length_format, head(preamble)[len(start) :])
    if header_len > MAX_HEADER_SIZE:
        raise DecodeError.make("npy header length", f"at most {MAX_HEADER_SIZE} bytes", header_len)
    data_offset = preamble + header_len
    raw_header = head(data_offset)[preamble:]
    try:
        header_text = raw_header.decode("utf-8" if version == (3, 0) else "latin1")
    except UnicodeDecodeError as exc:
        raise DecodeError.make("npy header", "UTF-8 text", str(exc), raw=True) from exc
    dtype, fortran, shape = _parse_header(header_text)
    count = check_element_count(shape, max_elements, field="npy header.shape")
    expected = data_offset + count * dtype.itemsize
    if total != expected:
        raise DecodeError.make(
            KEY_ROUTED_EXPERTS,
            f"a .npy file of {expected} bytes (header {data_offset} + {count} x {dtype.itemsize}-byte ids)",
            f"{total} bytes",
            raw=True,
        )
    if raw is None:
        buffer: bytes | bytearray | memoryview = b64decode_strict(payload, total, field=KEY_ROUTED_EXPERTS)
    elif isinstance(raw, bytes):
        buffer = raw  # immutable: array_from_buffer copies it into a writable array
    else:
        # The caller may reuse a bytearray or writable memoryview: the result must never alias it.
        buffer = bytearray(raw)
    if not fortran:
        return array_from_buffer(buffer, dtype, shape, offset=data_offset)
    # Fortran order stores the transpose's C order; hand back the logical array, C-contiguous.
    reversed_array = array_from_buffer(buffer, dtype, shape[::-1], offset=data_offset)
    return np.ascontiguousarray(reversed_array.transpose())


def read_vllm_npy(payload: object, opts: ReadOptions) -> ReadResult:
    """Read the base64 of a ``.npy`` file (vLLM), the raw ``.npy`` bytes, or a mapping holding it under
    ``routed_experts`` (a vLLM choice; other keys are ignored)."""
    value = mapping_get(payload, KEY_ROUTED_EXPERTS) if is_mapping(payload) else payload
    routes = _npy_to_routes(text_of(value, KEY_ROUTED_EXPERTS), max_elements=opts.max_elements)
    check_ids(routes, KEY_ROUTED_EXPERTS, num_experts=opts.num_experts)
    return ReadResult(routes=routes, format="vllm-npy")


def write_vllm_npy(routes: object, opts: WriteOptions) -> str:
    """Write the base64 of ``np.save`` output: uint8 if ``num_experts`` <= 256 (or, without it, every id < 256),
    else uint16, else int32; or the requested dtype."""
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts)
    if opts.num_experts is not None and opts.dtype is None:
        high = max(high, opts.num_experts - 1)  # vLLM's rule depends on the model, not on this batch's ids
    dtype = choose_dtype(
        low, high, requested=opts.dtype, allowed=VLLM_DTYPES, ladder=_VLLM_LADDER, format_name="vllm-npy"
    )
    out = io.BytesIO()
    np.save(out, np.asarray(arr, dtype=np.dtype(dtype).newbyteorder("<"), order="C"), allow_pickle=False)
    return b64encode_text(out.getbuffer())
