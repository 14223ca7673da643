"""NeMo-RL's routed-experts string ``nrlre1:<dtype>:<S>x<L>x<K>:<base64>`` (``nemo_rl/utils/routed_experts_codec``).

dtype is int8, int16 or int32, little-endian. A (token, layer) whose top-k slots are all -1 is NeMo-RL's
"missing route" sentinel (Megatron falls back to the live router there); readers keep those rows as -1, and a
row only partly negative is refused as corrupt, as NeMo-RL does.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np

from r3wire._validate import MAX_DIM, check_shape
from r3wire.errors import DecodeError
from r3wire.formats._common import (
    MISSING_ROUTE,
    ReadOptions,
    ReadResult,
    WriteOptions,
    b64_array,
    check_ids,
    choose_dtype,
    decode_b64_array,
    prepared_routes,
    text_of,
)

__all__ = ["NEMO_RL_DTYPES", "NEMO_RL_MAGIC", "read_nemo_rl", "write_nemo_rl"]

NEMO_RL_MAGIC: Final = "nrlre1"
NEMO_RL_DTYPES: Final = ("int8", "int16", "int32")
# Decimal digits only: int() would also take "+7", " 7", "7_0" and non-ASCII digits; one text per shape.
_DIM: Final = re.compile(r"0|[1-9][0-9]*")
# More digits than 2**63 - 1 has: out of range, reported without converting (int() of 100k digits is slow).
_DIM_DIGITS: Final = len(str(MAX_DIM))
_PARTS: Final = 4


def read_nemo_rl(payload: object, opts: ReadOptions) -> ReadResult:
    """Read an ``nrlre1:`` string (``str`` or ASCII bytes). Empty arrays (``nrlre1:int16:0x3x2:``) are accepted,
    as NeMo-RL's decoder does (NeMo Gym's refuses zero dimensions)."""
    raw = text_of(payload, "payload")
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = bytes(raw).decode("ascii")
        except UnicodeDecodeError as exc:
            raise DecodeError.make(None, "an ASCII nrlre1: string", str(exc), raw=True) from exc
    parts = text.split(":", _PARTS - 1)
    if parts[0] != NEMO_RL_MAGIC:
        raise DecodeError.make("magic", repr(NEMO_RL_MAGIC), parts[0][:16])
    if len(parts) != _PARTS:
        raise DecodeError.make(
            None, "'nrlre1:<dtype>:<S>x<L>x<K>:<base64>'", f"{len(parts)} ':'-separated parts", raw=True
        )
    _, dtype, dims, data = parts
    if dtype not in NEMO_RL_DTYPES:
        raise DecodeError.make("dtype", f"one of {list(NEMO_RL_DTYPES)}", dtype)
    sizes = dims.split("x")
    if len(sizes) != len(("S", "L", "K")) or not all(_DIM.fullmatch(s) for s in sizes):
        raise DecodeError.make("shape", "'<S>x<L>x<K>' in plain decimal", dims)
    for i, size in enumerate(sizes):
        if len(size) > _DIM_DIGITS:  # the message check_shape gives a shorter number that is too large
            got = size if len(size) <= 40 else f"{size[:20]}... (an integer of {len(size)} digits)"
            raise DecodeError.make(f"shape[{i}]", f"an integer in 0..{MAX_DIM}", got, raw=True)
        if int(size) > MAX_DIM:
            break  # check_shape names it
    shape = check_shape([int(s) for s in sizes], "shape", ndim=3)
    routes = decode_b64_array(data, dtype, shape, field="data", max_elements=opts.max_elements)
    check_ids(routes, "data", num_experts=opts.num_experts, missing_sentinel=True)
    return ReadResult(routes=routes, format="nemo-rl")


def write_nemo_rl(routes: object, opts: WriteOptions) -> str:
    """Write an ``nrlre1:`` string: int8 if ids (or ``num_experts - 1``) fit 127, else int16, else int32.

    All -1 top-k rows are written as they are (missing routes); rows a ``mask`` marks as not replayed are
    written as -1 too, since that is what the sentinel means.
    """
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts, missing_sentinel=True)
    if opts.mask is not None and not opts.mask.all():
        arr = arr.astype(np.int64)  # a copy, signed so it can hold -1
        arr[~opts.mask] = MISSING_ROUTE
        low = min(low, MISSING_ROUTE)
    if opts.num_experts is not None and opts.dtype is None:
        high = max(high, opts.num_experts - 1)  # NeMo-RL picks the dtype from the model's expert count
    dtype = choose_dtype(
        low, high, requested=opts.dtype, allowed=NEMO_RL_DTYPES, ladder=NEMO_RL_DTYPES, format_name="nemo-rl"
    )
    rows, layers, top_k = (int(n) for n in arr.shape)
    return f"{NEMO_RL_MAGIC}:{dtype}:{rows}x{layers}x{top_k}:{b64_array(arr, dtype)}"
