"""Property tests for trainer-side batching: pack/unpack round trip, the pad layout, RouteTrace over any split.

Also the library's promise for bad input: any batch either pads/packs/assembles or raises R3WireError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import R3WireError, RouteTrace, pack_routes, pad_routes, route_dtype, unpack_routes

pytestmark = pytest.mark.property

Array = np.ndarray[Any, Any]
SOURCE_DTYPES = ["u1", "i1", "<u2", ">u2", "<i2", ">i2", "<i4", ">i4", "<u4", "<i8", ">u8"]


@st.composite
def batches(draw: st.DrawFn, *, max_id: int | None = None) -> list[Array]:
    """Ragged samples sharing [layers, top_k], each of its own dtype, memory order and id range."""
    count = draw(st.integers(0, 5))
    layers = draw(st.integers(1, 3))
    top_k = draw(st.integers(1, 4 if max_id is None else min(4, max_id + 1)))
    samples = []
    for _ in range(count):
        dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(SOURCE_DTYPES)))
        high = int(np.iinfo(dtype).max) if max_id is None else min(max_id, int(np.iinfo(dtype).max))
        rows = draw(st.integers(0, 7))
        sample: Array = draw(hnp.arrays(dtype, (rows, layers, top_k), elements=st.integers(0, high)))
        if draw(st.booleans()):
            sample = np.asfortranarray(sample)
        samples.append(sample)
    return samples


@st.composite
def batches_with_experts(draw: st.DrawFn, choices: list[int]) -> tuple[list[Array], int | None]:
    """A batch and the num_experts it is padded with (None: the batch dtype comes from the samples)."""
    num_experts = draw(st.one_of(st.none(), st.sampled_from(choices)))
    return draw(batches(max_id=None if num_experts is None else num_experts - 1)), num_experts


def _exact(values: Array) -> list[Any]:
    return [int(x) for x in values.ravel()]


@given(batches_with_experts([4, 255, 256, 300, 70000]))
def test_unpack_inverts_pack(case: tuple[list[Array], int | None]) -> None:
    samples, num_experts = case
    flat, cu_seqlens = pack_routes(samples, num_experts=num_experts)
    assert cu_seqlens.dtype == np.int64
    assert cu_seqlens[0] == 0
    assert cu_seqlens.tolist() == np.cumsum([0, *(s.shape[0] for s in samples)]).tolist()
    if num_experts is not None:
        assert flat.dtype == route_dtype(num_experts)
    parts = unpack_routes(flat, cu_seqlens)
    assert len(parts) == len(samples)
    for part, sample in zip(parts, samples, strict=True):
        assert part.shape == sample.shape
        assert _exact(part) == _exact(sample)
        assert part.size == 0 or np.shares_memory(part, flat)


@given(batches_with_experts([4, 256, 300, 70000]), st.data(), st.sampled_from(["left", "right"]))
def test_pad_places_samples_in_order_and_fills_the_rest(
    case: tuple[list[Array], int | None], data: st.DataObject, side: str
) -> None:
    samples, num_experts = case
    extra = data.draw(st.lists(st.integers(0, 3), min_size=len(samples), max_size=len(samples)))
    lengths = [s.shape[0] + e for s, e in zip(samples, extra, strict=True)]
    max_len = data.draw(st.one_of(st.none(), st.integers(max(lengths, default=0), max(lengths, default=0) + 3)))
    padded, mask = pad_routes(
        samples,
        token_lengths=lengths,
        side=side,  # type: ignore[arg-type]
        num_experts=num_experts,
        max_len=max_len,
    )
    width = max(lengths, default=0) if max_len is None else max_len
    assert mask.shape == (len(samples), width)
    assert padded.shape[:2] == (len(samples), width)
    if num_experts is not None:
        assert padded.dtype == route_dtype(num_experts)
    for i, sample in enumerate(samples):
        rows = sample.shape[0]
        assert padded.shape[2:] == sample.shape[1:]
        assert int((~mask[i]).sum()) == rows
        assert _exact(padded[i][~mask[i]]) == _exact(sample)
        filled = padded[i][mask[i]]
        assert (filled == np.arange(sample.shape[2])).all()
        # The captured rows are contiguous and sit where the trajectory's first tokens are.
        first = width - lengths[i] if side == "left" else 0
        assert not mask[i, first : first + rows].any()


@st.composite
def split_trajectories(draw: st.DrawFn) -> tuple[Array, list[tuple[int, Array]]]:
    """A trajectory and turns covering it in order: each starts at or before the previous end, in any dtype."""
    rows = draw(st.integers(0, 20))
    layers = draw(st.integers(1, 3))
    top_k = draw(st.integers(1, 3))
    high = draw(st.sampled_from([15, 255, 300, 40000, 70000]))
    full: Array = draw(hnp.arrays(np.int64, (rows, layers, top_k), elements=st.integers(0, high)))
    ends = sorted(draw(st.lists(st.integers(0, rows), max_size=5)))
    ends.append(rows)
    turns = []
    previous = 0
    for end in ends:
        start = draw(st.integers(0, previous))
        part = full[start:end]
        needed = int(part.max()) if part.size else 0
        fits = [d for d in SOURCE_DTYPES if np.iinfo(np.dtype(d)).max >= needed]
        turns.append((start, part.astype(draw(st.sampled_from(fits)))))
        previous = end
    return full, turns


@given(split_trajectories(), st.integers(0, 3))
def test_trace_from_any_split_equals_the_trajectory(
    case: tuple[Array, list[tuple[int, Array]]], uncaptured: int
) -> None:
    full, turns = case
    trace = RouteTrace()
    for start, part in turns:
        trace.add(part, start=start)
    routes, captured = trace.finalize(full.shape[0] + uncaptured)
    assert captured == full.shape[0]
    assert routes.shape == full.shape
    assert _exact(routes) == _exact(full)
    # The documented rule: the smallest dtype holding every turn's dtype (uint64 where NumPy says float64).
    expected = np.dtype(turns[0][1].dtype).newbyteorder("=")
    for _, part in turns:
        promoted = np.promote_types(expected, part.dtype)
        expected = promoted if promoted.kind in "iu" else np.dtype(np.uint64)
    assert routes.dtype == expected


@given(split_trajectories())
def test_trace_with_num_experts_has_a_fixed_dtype(case: tuple[Array, list[tuple[int, Array]]]) -> None:
    full, turns = case
    trace = RouteTrace(num_experts=70001)
    for start, part in turns:
        trace.add(part, start=start)
        assert trace.dtype == np.int32
    routes, _ = trace.finalize(full.shape[0])
    assert routes.dtype == np.int32
    assert _exact(routes) == _exact(full)


ANY_DTYPES = [*SOURCE_DTYPES, "<f4", "?", "<f8"]


@st.composite
def hostile_samples(draw: st.DrawFn) -> list[Any]:
    """Samples with any dtype, any ndim, any ids (negative included), shapes that may disagree."""
    samples: list[Any] = []
    for _ in range(draw(st.integers(0, 4))):
        dtype = np.dtype(draw(st.sampled_from(ANY_DTYPES)))
        shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=3))
        samples.append(draw(hnp.arrays(dtype, shape)))
    return samples


@given(hostile_samples(), st.one_of(st.none(), st.integers(-2, 300)), st.booleans())
def test_bad_batches_raise_only_r3wire_errors(samples: list[Any], num_experts: int | None, check: bool) -> None:
    messages = []
    try:
        padded, mask = pad_routes(samples, num_experts=num_experts, check=check)
    except R3WireError as exc:
        messages.append(str(exc))
    else:
        assert padded.shape[:2] == mask.shape
    try:
        flat, cu = pack_routes(samples, num_experts=num_experts, check=check)
    except R3WireError as exc:
        messages.append(str(exc))
    else:
        assert cu[-1] == flat.shape[0]
    trace = RouteTrace()
    for i, sample in enumerate(samples):
        try:
            trace.add(sample, start=i % 3)
        except R3WireError as exc:
            messages.append(str(exc))
    assert all(" must be " in message for message in messages)
