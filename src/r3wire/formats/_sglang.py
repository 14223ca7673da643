"""SGLang's ``meta_info["routed_experts"]``: bare base64 of the flattened ids, with no shape.

The legacy form is int32; -1 in a slot means "no routed expert" (sglang-jax documents it; SGLang's dtype change
keeps int32 for these negative sentinels) and is read and written as is. Newer servers add
``meta_info["routed_experts_dtype"]`` (int32, uint16 or uint8; absent or null means int32).
The caller supplies ``num_layers`` and ``top_k``; the row count follows from the length.
"""

from __future__ import annotations

from typing import Any, Final

from r3wire._typeset import is_mapping
from r3wire.errors import DecodeError, R3WireError
from r3wire.formats._common import (
    ReadOptions,
    ReadResult,
    WriteOptions,
    b64_array,
    b64_decoded_length,
    check_ids,
    choose_dtype,
    decode_b64_array,
    mapping_get,
    prepared_routes,
    text_of,
)
from r3wire.schema import WIRE_DTYPES

__all__ = ["SGLANG_DTYPES", "read_sglang", "write_sglang"]

KEY_ROUTED_EXPERTS: Final = "routed_experts"
KEY_ROUTED_EXPERTS_DTYPE: Final = "routed_experts_dtype"
# sglang/srt/state_capturer/routed_experts_wire.py @a6463a10: _WIRE_DTYPES.
SGLANG_DTYPES: Final = ("int32", "uint16", "uint8")
SGLANG_DEFAULT_DTYPE: Final = "int32"


def _dtype_name(value: object, field: str) -> str:
    if value is None:
        return SGLANG_DEFAULT_DTYPE
    if not isinstance(value, str) or value not in SGLANG_DTYPES:
        raise DecodeError.make(field, f"one of {list(SGLANG_DTYPES)} or null", value)
    return value


def read_sglang(payload: object, opts: ReadOptions) -> ReadResult:
    """Read SGLang's bare base64 string, or a ``meta_info``-like mapping holding ``routed_experts`` (and
    optionally ``routed_experts_dtype``; other keys are ignored, so ``meta_info`` can be passed as is)."""
    if is_mapping(payload):
        text = text_of(mapping_get(payload, KEY_ROUTED_EXPERTS), KEY_ROUTED_EXPERTS)
        stated = payload.get(KEY_ROUTED_EXPERTS_DTYPE)
        if stated is None:  # not said (older servers, sgl_ext, dynamo): the caller's dtype, else int32
            dtype = _dtype_name(opts.dtype, "dtype")
        else:
            dtype = _dtype_name(stated, KEY_ROUTED_EXPERTS_DTYPE)
            if opts.dtype is not None and opts.dtype != dtype:
                raise DecodeError.make(KEY_ROUTED_EXPERTS_DTYPE, f"{opts.dtype!r} (the caller's dtype)", dtype)
    else:
        text = text_of(payload, KEY_ROUTED_EXPERTS)
        dtype = _dtype_name(opts.dtype, "dtype")
    if opts.num_layers is None or opts.top_k is None:
        raise R3WireError.make(
            "num_layers, top_k", "given for SGLang's bare base64 (it carries no shape)", "None", raw=True
        )
    row_bytes = opts.num_layers * opts.top_k * WIRE_DTYPES[dtype].itemsize
    nbytes = b64_decoded_length(text, KEY_ROUTED_EXPERTS)
    if nbytes % row_bytes:
        raise DecodeError.make(
            KEY_ROUTED_EXPERTS,
            f"base64 of whole rows ({opts.num_layers} layers x {opts.top_k} top_k x {dtype} = {row_bytes} bytes each)",
            f"{nbytes} bytes",
            raw=True,
        )
    shape = (nbytes // row_bytes, opts.num_layers, opts.top_k)
    routes = decode_b64_array(text, dtype, shape, field=KEY_ROUTED_EXPERTS, max_elements=opts.max_elements)
    # SGLang's -1 placeholder (a slot with no routed expert) is kept; route_mask() excludes it.
    check_ids(routes, KEY_ROUTED_EXPERTS, num_experts=opts.num_experts, missing_slots=True)
    return ReadResult(routes=routes, format="sglang")


def write_sglang(routes: object, opts: WriteOptions) -> str | dict[str, Any]:
    """Write the bare int32 base64 string, or with ``dtype`` the mapping ``{"routed_experts",
    "routed_experts_dtype"}`` (the dtype must travel beside the string). Ids that do not fit the requested dtype
    are an error here; SGLang itself would fall back to int32. -1 placeholders (no routed expert) are written
    as they are, which only int32 can hold."""
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts, missing_slots=True)
    dtype = choose_dtype(
        low, high, requested=opts.dtype, allowed=SGLANG_DTYPES, ladder=(SGLANG_DEFAULT_DTYPE,), format_name="sglang"
    )
    text = b64_array(arr, dtype)
    if opts.dtype is None:
        return text
    return {KEY_ROUTED_EXPERTS: text, KEY_ROUTED_EXPERTS_DTYPE: dtype}
