"""The decoders' one-pass id check against a straightforward reading of docs/wire-format.md §8 step 10.

``check_ids`` reads the ids once (viewed as unsigned, one ``max()``) and applies the rules one by one only when
that pass fails. Here a reference that applies every rule in order, id by id, must agree with it on every integer
dtype, byte order and memory order, every bound and every placement of bad ids: the same ids accepted, and for
refused ones the same field and the same message. The envelope and the frame readers must name the same field.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import DecodeError, decode_routes, decode_routes_frame
from r3wire._routecheck import check_ids

pytestmark = pytest.mark.property

# Every integer dtype in both byte orders (one-byte ones have none).
INTEGER_DTYPES = list(dict.fromkeys(np.dtype(f"{o}{k}{n}") for k in "iu" for n in (1, 2, 4, 8) for o in "<>"))
WIRE_DTYPES: dict[str, np.dtype[Any]] = {"uint8": np.dtype("u1"), "int16": np.dtype("<i2"), "int32": np.dtype("<i4")}
BOUNDS = [None, 1, 2, 100, 127, 128, 255, 256, 257, 384, 32767, 32768, 32769, 40000, 2**31 - 1, 2**31]
# Ids at the edges of every rule and dtype, negative ones included.
EDGES = [0, 1, -1, -2, 127, 128, -128, 255, 256, 383, 384, 32767, 32768, -32768, 65535, 2**31 - 1, 2**31, -(2**31)]
EDGES += [2**32 - 1, 2**63 - 1, -(2**63), 2**64 - 1]
# One draw in eight has more ids than one piece of the failure path's search (2**18), so that a bad id can be in a
# later piece (and no more: the reference reads ids one by one).
SHAPES = st.integers(0, 7).flatmap(
    lambda k: st.just((1030, 16, 16)) if k == 0 else st.tuples(st.integers(0, 5), st.integers(1, 5), st.integers(1, 5))
)


def reference_error(
    ids: np.ndarray[Any, Any], dtype: str, *, bound: int | None, canonical: bool, bits: int | None
) -> tuple[str, str] | None:
    """The field and message step 10 calls for, or None: each rule in order, each id in C order."""

    def at(flat: int) -> str:
        return f"data{[int(i) for i in np.unravel_index(flat, ids.shape)]}"

    values: list[int] = ids.reshape(-1).tolist()  # Python ints, in C order whatever the memory order
    if not values:
        if canonical and dtype != "uint8":
            return "dtype", f"dtype must be 'uint8' (the canonical dtype of an empty array), got {dtype!r}"
        if canonical and bits is not None and bits != 1:
            return "bits", f"bits must be 1 (the canonical bits of an empty array), got {bits}"
        return None
    for i, value in enumerate(values):
        if value < 0:
            return at(i), f"{at(i)} must be a non-negative expert id, got {value}"
    limit = 2**31 if bound is None else bound
    for i, value in enumerate(values):
        if value >= limit:
            what = "an expert id below 2**31" if bound is None else f"an expert id below num_experts={bound}"
            return at(i), f"{at(i)} must be {what}, got {value}"
    if not canonical:
        return None
    high = max(values)
    smallest = "uint8" if high < 2**8 else "int16" if high < 2**15 else "int32"
    if smallest != dtype:
        return "dtype", (
            f"dtype must be {smallest!r}, the smallest dtype holding the largest id {high} (non-canonical payload), "
            f"got {dtype!r}"
        )
    fewest = max(1, high.bit_length())
    if bits is not None and bits != fewest:
        return "bits", (
            f"bits must be {fewest}, the fewest bits holding the largest id {high} (non-canonical payload), got {bits}"
        )
    return None


def raised(ids: np.ndarray[Any, Any], dtype: str, **rules: Any) -> tuple[str | None, str] | None:
    try:
        check_ids(ids, dtype, **rules)
    except DecodeError as exc:
        return exc.field, str(exc)
    return None


@st.composite
def ids_with_bad_ones(draw: st.DrawFn, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Small ids of ``dtype`` with edge values written at arbitrary places (C order or not in memory)."""
    info = np.iinfo(dtype)
    shape = draw(SHAPES)
    fill = draw(st.sampled_from([0, 1, 5, 100, 127]))
    ids = np.full(shape, fill, dtype=dtype)
    flat = ids.reshape(-1)
    for where, value in draw(st.lists(st.tuples(st.integers(0, 2**40), st.sampled_from(EDGES)), max_size=4)):
        if flat.size and info.min <= value <= info.max:
            flat[where % flat.size] = value
    layout = draw(st.sampled_from(["c", "fortran", "reversed"]))
    if layout == "fortran":
        return np.asfortranarray(ids)
    if layout == "reversed":
        reversed_ids: np.ndarray[Any, Any] = np.ascontiguousarray(ids[::-1, :, ::-1])[::-1, :, ::-1]
        return reversed_ids
    return ids


@given(
    st.sampled_from(INTEGER_DTYPES).flatmap(ids_with_bad_ones),
    st.sampled_from(list(WIRE_DTYPES)),
    st.sampled_from(BOUNDS),
    st.booleans(),
    st.one_of(st.none(), st.integers(1, 31)),
)
def test_one_pass_check_is_the_rules_in_order(
    ids: np.ndarray[Any, Any], dtype: str, bound: int | None, canonical: bool, bits: int | None
) -> None:
    rules: dict[str, Any] = {"bound": bound, "canonical": canonical, "bits": bits}
    assert raised(ids, dtype, **rules) == reference_error(ids, dtype, **rules)


@given(
    st.sampled_from(list(WIRE_DTYPES)).flatmap(
        lambda name: st.tuples(st.just(name), ids_with_bad_ones(np.dtype(name)))
    ),
    st.sampled_from([None, 128, 256, 384, 32768, 40000, 2**31]),
    st.booleans(),
)
def test_envelope_and_frame_name_the_same_bad_id(
    case: tuple[str, np.ndarray[Any, Any]], num_experts: int | None, declared: bool
) -> None:
    """Ids of a wire dtype, carried by an envelope and by a frame (with ``num_experts`` declared in the payload
    or passed by the caller only): both refuse what the reference refuses, naming the same field."""
    dtype, ids = case
    if declared and num_experts is not None and dtype != _dtype_fixed_by(num_experts):
        return  # such a header fails before the ids are read
    wire = np.ascontiguousarray(ids, dtype=WIRE_DTYPES[dtype])
    envelope: dict[str, Any] = {
        "data": base64.b64encode(wire.tobytes()).decode(),
        "shape": list(wire.shape),
        "dtype": dtype,
        "schema": "r3wire.routes",
        "version": 1,
    }
    wire_experts = num_experts if declared else None
    if wire_experts is not None:
        envelope["num_experts"] = wire_experts
    header = struct.pack("<4sBBBBQQII", b"R3WF", 1, {"uint8": 1, "int16": 2, "int32": 3}[dtype], 0, 0, *wire.shape, 0)
    frame = bytearray(header + wire.tobytes())
    struct.pack_into("<I", frame, 28, wire_experts or 0)
    expected = reference_error(wire, dtype, bound=num_experts, canonical=wire_experts is None, bits=None)
    readers: list[Callable[[], np.ndarray[Any, Any]]] = [
        lambda: decode_routes(envelope, num_experts=num_experts),
        lambda: decode_routes_frame(bytes(frame), num_experts=num_experts),
    ]
    for read in readers:
        if expected is None:
            assert np.array_equal(read(), wire)
            continue
        with pytest.raises(DecodeError) as info:
            read()
        assert (info.value.field, str(info.value)) == expected


def _dtype_fixed_by(num_experts: int) -> str:
    return "uint8" if num_experts <= 2**8 else "int16" if num_experts <= 2**15 else "int32"
