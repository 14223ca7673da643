"""Routes as nested JSON int lists ``[[[id, ...] x top_k] x layers] x rows``: NeMo-RL's legacy branch, SkyRL
before its compact envelope, and verifiers.

JSON carries no element type: ids come back as int32 when every id fits, else int64 (values never change).
NeMo-RL's all -1 missing-route rows are kept, as in its ``nrlre1:`` form. The size rule is the one every reader
follows: the element count (from the outer list lengths) is checked against ``max_elements`` before the array is
allocated, and a ragged or non-integer list never allocates more than the parsed text already holds.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

import numpy as np

from r3wire._typeset import types_within
from r3wire._validate import check_element_count, check_shape, is_int
from r3wire._walk import copy_list, own_len
from r3wire.errors import DecodeError, EncodeError, R3WireError
from r3wire.formats._common import (
    ReadOptions,
    ReadResult,
    WriteOptions,
    check_ids,
    load_json,
    prepared_routes,
)

__all__ = ["read_json_lists", "write_json_lists"]

_ROUTES_NDIM: Final = 3
_INT32: Final = np.iinfo(np.int32)
_INT64: Final = np.iinfo(np.int64)

_INT_ONLY: Final = frozenset({int})


def read_json_lists(payload: object, opts: ReadOptions) -> ReadResult:
    """Read ``[rows][layers][top_k]`` nested lists of JSON integers (parsed, or JSON text).

    An empty outer list needs ``num_layers`` and ``top_k`` to have a shape. Every inner list must have the
    length of the first at its level; every element must be an integer (bools, floats and strings are
    refused, never converted).

    Raises:
        DecodeError: not a regular 3-level list of integers, the count above ``max_elements``, a negative id
            other than an all -1 missing-route row, or an id at or above ``num_experts``.
    """
    if isinstance(payload, (str, bytes, bytearray, memoryview)):
        payload = load_json(payload, what="nested lists of expert ids", root="")
    if not isinstance(payload, list):
        raise DecodeError.make(None, "a list of [layers][top_k] lists of expert ids", type(payload).__name__, raw=True)
    if type(payload) is not list:
        payload = copy_list(payload)  # a subclass as the rows it holds: its __len__ may lie
    dims = _first_dims(payload)
    if not payload:
        dims = [0, opts.num_layers or 0, opts.top_k or 0]
        if not (opts.num_layers and opts.top_k):
            raise DecodeError.make(
                None, "a non-empty list, or num_layers and top_k to shape an empty one", "[]", raw=True
            )
    shape = check_shape(dims, "shape", ndim=_ROUTES_NDIM)
    if payload and not (shape[1] and shape[2]):
        # A route row with no layers or no slots carries nothing to replay: a truncated or mis-nested list.
        raise DecodeError.make("shape", "[rows, layers >= 1, top_k >= 1]", list(shape))
    check_element_count(shape, opts.max_elements)
    routes = _to_array(payload, shape)
    check_ids(routes, "routes", num_experts=opts.num_experts, missing_sentinel=True)
    return ReadResult(routes=routes, format="json-lists")


def _first_dims(payload: list[Any]) -> list[int]:
    dims: list[int] = []
    node: Any = payload
    for level in range(_ROUTES_NDIM):
        if not isinstance(node, list):
            where = "".join("[0]" for _ in range(level))
            raise DecodeError.make(
                f"routes{where}", "a list (routes nest [rows][layers][top_k])", type(node).__name__, raw=True
            )
        dims.append(own_len(node))  # an inner subclass by what it holds (the levels below take exact lists only)
        if not dims[-1]:
            break
        node = node[0]
    return dims + [0] * (_ROUTES_NDIM - len(dims))


def _to_array(payload: list[Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    rows, layers, top_k = shape
    # Check the nesting level by level in C (len over map) before NumPy sees it: a ragged list is refused here
    # rather than turned into an object array or a NumPy error.
    level1: list[Any] = payload
    for depth, width in ((1, layers), (2, top_k)):
        if not all(type(item) is list for item in level1):
            raise _irregular(depth, "a list")
        if any(len(item) != width for item in level1):
            raise _irregular(depth, f"lists of {width}")
        level1 = list(itertools.chain.from_iterable(level1))
    ids = level1
    if not types_within(ids, _INT_ONLY):
        # NumPy ints from in-process callers are fine; bools, floats and strings are not ids.
        for x in ids:
            if type(x) is not int and not is_int(x):
                raise DecodeError.make("routes", "integers (expert ids)", x)
    if ids:
        low, high = min(ids), max(ids)
        if low < _INT64.min or high > _INT64.max:
            raise DecodeError.make("routes", f"expert ids in {_INT64.min}..{_INT64.max}", low if low < 0 else high)
        dtype = np.int32 if _INT32.min <= low and high <= _INT32.max else np.int64
    else:
        dtype = np.int32
    return np.array(ids, dtype=dtype).reshape(rows, layers, top_k)


def _irregular(depth: int, expected: str) -> R3WireError:
    level = ("rows", "layers", "top_k")[depth]
    return DecodeError.make(
        "routes",
        f"a regular [rows][layers][top_k] nesting: {expected} at the {level} level",
        "a ragged or mixed list",
        raw=True,
    )


def write_json_lists(routes: object, opts: WriteOptions) -> list[Any]:
    """Write ``routes`` as nested lists of Python ints (all -1 missing-route rows kept).

    Raises:
        EncodeError: a ``dtype`` (JSON integers have no element type to choose), not a 3-d integer array, a
            negative id outside an all -1 row, or an id at or above ``num_experts``.
    """
    if opts.dtype is not None:
        # Accepting one would promise a width (or a range check) that nothing on the wire keeps; num_experts is
        # the bound that is checked.
        raise EncodeError.make("dtype", "None (json-lists carries no dtype; num_experts bounds the ids)", opts.dtype)
    arr, _, _ = prepared_routes(routes, num_experts=opts.num_experts, missing_sentinel=True)
    out: list[Any] = arr.tolist()
    return out
