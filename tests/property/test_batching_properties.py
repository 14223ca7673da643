"""Property tests for trainer-side batching: pack/unpack round trip, the pad layout, RouteTrace over any split.

Also the library's promise for bad input: any batch either pads/packs/assembles or raises R3WireError.
"""

from __future__ import annotations

import base64
import math
import tracemalloc
from collections.abc import Callable
from itertools import pairwise
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from _fuzzing import JSON_VALUES, decoded_or_none
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import (
    R3WireError,
    RouteTrace,
    batching,
    decode_routes,
    pack_routes,
    pad_routes,
    pad_sequences,
    route_dtype,
    unpack_routes,
    validate_routes,
)

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
        padded, mask = pad_routes(samples, num_experts=num_experts, check=check, side="right")
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


# --- multi-turn trajectories against a reference assembler (issue 13) -------------------------------------------

LAYERS_TOP_K = st.tuples(st.integers(1, 2), st.integers(1, 3))
EXPERTS = 8
TOKENS = st.integers(0, 3)  # a small alphabet, so a branch often shares a prefix with its parent


class _Reference:
    """The obvious assembler: Python lists, one row and one token at a time, the documented rules spelled out."""

    def __init__(self) -> None:
        self.rows: list[list[int]] = []
        self.kept: list[bool] = []  # replayed by some call; the others hold an arange(top_k) padding row
        self.tokens: list[int] = []
        self.conflicts = 0
        self.added = False

    def add(
        self, routes: Array, start: int, tokens: list[int], policy: str | None, replayed: list[bool] | None = None
    ) -> None:
        assert start <= len(self.rows)
        assert start + routes.shape[0] <= len(tokens)
        assert tokens[: len(self.tokens)] == self.tokens[: len(tokens)]
        for offset, row in enumerate(routes):
            position, values = start + offset, _exact(row)
            replay = replayed is None or replayed[offset]
            if position < len(self.rows):
                if not replay:
                    continue
                if not self.kept[position]:
                    self.rows[position], self.kept[position] = values, True  # fills a row no call replayed
                elif self.rows[position] != values:
                    self.conflicts += 1
                    if policy == "replace":
                        self.rows[position] = values
            else:
                self.rows.append(values if replay else list(range(row.shape[1])) * row.shape[0])
                self.kept.append(replay)
        self.tokens = tokens if len(tokens) > len(self.tokens) else self.tokens
        self.added = True

    def fork(self, keep: int) -> _Reference:
        branch = _Reference()
        branch.rows = [list(row) for row in self.rows[:keep]]
        branch.kept = self.kept[:keep]
        branch.tokens = self.tokens[:keep]
        branch.added = self.added
        return branch


def _assert_same(trace: RouteTrace, reference: _Reference, row_shape: tuple[int, int]) -> None:
    assert trace.rows == len(reference.rows)
    assert trace.conflicts == reference.conflicts
    replayed = trace.replayed
    assert (replayed.tolist() if replayed is not None else [True] * trace.rows) == reference.kept
    recorded = trace.token_ids
    assert (recorded.tolist() if recorded is not None else []) == reference.tokens
    if reference.added:
        routes, captured = trace.finalize()
        assert captured == len(reference.rows)
        assert routes.shape == (captured, *row_shape)
        assert [_exact(row) for row in routes] == reference.rows


def _call_routes(data: st.DataObject, reference: _Reference, start: int, end: int, row_shape: tuple[int, int]) -> Array:
    """Rows ``start .. end - 1`` of an engine call: new rows random, overlap rows equal or re-routed (drift)."""
    rows = []
    for position in range(start, end):
        if position < len(reference.rows) and data.draw(st.integers(0, 3)) > 0:
            rows.append(np.array(reference.rows[position]).reshape(row_shape))
        else:
            rows.append(data.draw(hnp.arrays(np.int64, row_shape, elements=st.integers(0, EXPERTS - 1))))
    return np.array(rows, dtype=np.int64).reshape(end - start, *row_shape)


def _refused(
    trace: RouteTrace,
    reference: _Reference,
    *,
    routes: Array,
    start: int,
    tokens: list[int],
    row_shape: tuple[int, int],
) -> str:
    """The field of the error ``trace.add`` raises for this call; the trace is left as it was."""
    with pytest.raises(R3WireError) as info:
        trace.add(routes, start=start, token_ids=tokens)
    _assert_same(trace, reference, row_shape)
    assert info.value.field is not None
    return info.value.field


def _allocations_failing(field: str) -> Any:
    """A patch under which every buffer batching allocates for ``field`` fails, as an exhausted memory would."""
    real = batching._allocate

    def allocate(shape: tuple[int, ...], dtype: Any, name: str) -> Array:
        if name == field:
            raise R3WireError.make(name, "an array this process can allocate", "MemoryError")
        return real(shape, dtype, name)

    return patch.object(batching, "_allocate", allocate)


@given(LAYERS_TOP_K, st.data())
def test_random_multi_turn_trajectories_stitch_like_the_reference(
    row_shape: tuple[int, int], data: st.DataObject
) -> None:
    trace, reference = RouteTrace(num_experts=EXPERTS), _Reference()
    for _ in range(data.draw(st.integers(1, 10), label="calls")):
        op = data.draw(
            st.sampled_from(["call", "call", "call", "fork", "mismatch", "gap", "omitted", "overflow", "no memory"])
        )
        if op == "call":
            # The call's tokens agree with the recorded ones on their common length: a longer conversation, or a
            # re-scored prefix of it.
            shared = data.draw(st.integers(0, len(reference.tokens)))
            tokens = reference.tokens[:shared]
            if shared == len(reference.tokens):
                tokens = tokens + data.draw(st.lists(TOKENS, max_size=6))
            start = data.draw(st.integers(0, min(len(reference.rows), len(tokens))))
            # Often an engine's rows: ending at the call's last forwarded token, where start=None may place them.
            last = len(tokens) - 1
            ends = st.integers(start, len(tokens))
            end = data.draw(ends if last < start else st.one_of(st.just(last), ends))
            routes = _call_routes(data, reference, start, end, row_shape)
            policy = data.draw(st.sampled_from([None, "keep", "replace"]))
            derived = end == last and data.draw(st.booleans())
            # Sometimes rows the engine did not replay (a Fireworks BITMAP): junk there is never read.
            flags = data.draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=len(routes), max_size=len(routes))))
            if flags is not None:
                routes[~np.array(flags, dtype=np.bool_)] = data.draw(st.sampled_from([-1, 0, EXPERTS, 2**40]))
            trace.add(
                routes,
                start=None if derived else start,
                token_ids=tokens,
                on_conflict=policy,  # type: ignore[arg-type]
                replayed=None if flags is None else np.array(flags, dtype=np.bool_),
            )
            reference.add(routes, start, tokens, policy, flags)
        elif op == "fork":
            # "Longest matching prefix" branching: a new continuation forks at its common prefix.
            candidate = reference.tokens[: data.draw(st.integers(0, len(reference.tokens)))]
            candidate = candidate + data.draw(st.lists(TOKENS, max_size=4))
            keep = trace.common_prefix(candidate)
            expected_keep = next(
                (i for i, (a, b) in enumerate(zip(reference.tokens, candidate, strict=False)) if a != b),
                min(len(reference.tokens), len(candidate)),
            )
            assert keep == expected_keep
            parent, parent_reference = trace, reference
            trace, reference = trace.fork(keep), reference.fork(keep)
            _assert_same(parent, parent_reference, row_shape)
        elif op == "mismatch" and reference.tokens:
            position = data.draw(st.integers(0, len(reference.tokens) - 1))
            tokens = list(reference.tokens)
            tokens[position] += 1
            start = data.draw(st.integers(0, min(len(reference.rows), len(tokens))))
            routes = _call_routes(data, reference, start, len(tokens), row_shape)
            field = _refused(trace, reference, routes=routes, start=start, tokens=tokens, row_shape=row_shape)
            assert field == f"token_ids[{position}]"
        elif op == "gap":
            start = len(reference.rows) + data.draw(st.integers(1, 3))
            tokens = reference.tokens + data.draw(st.lists(TOKENS, min_size=start + 1, max_size=start + 1))
            routes = np.zeros((1, *row_shape), dtype=np.uint8)
            assert _refused(trace, reference, routes=routes, start=start, tokens=tokens, row_shape=row_shape) == "start"
        elif op == "omitted":
            # Rows that end at the call's last forwarded token but begin past the recorded ones (an engine that
            # left out the prompt rows): placed from the end with start=None, the gap is refused, naming start.
            tokens = reference.tokens + data.draw(st.lists(TOKENS, min_size=2, max_size=6))
            count = data.draw(st.integers(0, len(tokens) - 2 - len(reference.rows)))
            routes = np.zeros((count, *row_shape), dtype=np.uint8)
            with pytest.raises(R3WireError) as info:
                trace.add(routes, token_ids=tokens)
            assert info.value.field == "start"
            assert "derived with start=None" in str(info.value)
        elif op == "overflow":
            # More rows than the call's tokens: a row without a token.
            start = data.draw(st.integers(0, len(reference.rows)))
            tokens = reference.tokens + [0] * max(0, start - len(reference.tokens))
            routes = np.zeros((len(tokens) - start + 1, *row_shape), dtype=np.uint8)
            assert (
                _refused(trace, reference, routes=routes, start=start, tokens=tokens, row_shape=row_shape) == "routes"
            )
        elif op == "no memory":
            # A valid call whose row or token buffer cannot grow (a memory-limited container): refused, and the
            # trace is as it was; in the trace's dtype with int64 tokens it takes the fast path.
            tokens = reference.tokens + data.draw(st.lists(TOKENS, max_size=6))
            start = data.draw(st.integers(0, min(len(reference.rows), len(tokens))))
            end = data.draw(st.integers(start, len(tokens)))
            routes = _call_routes(data, reference, start, end, row_shape)
            fast = data.draw(st.booleans())
            failing = data.draw(st.sampled_from(["trace", "token_ids"]))
            refused = None
            try:
                with _allocations_failing(failing):
                    trace.add(
                        routes.astype(np.uint8) if fast else routes,
                        start=start,
                        token_ids=np.array(tokens, dtype=np.int64) if fast else tokens,
                    )
            except R3WireError as exc:
                refused = exc.field
            if refused is None:
                reference.add(routes, start, tokens, None)
            else:
                assert refused == failing
        _assert_same(trace, reference, row_shape)


@given(LAYERS_TOP_K, st.data())
def test_drift_without_token_proof_raises_unless_a_policy_is_given(
    row_shape: tuple[int, int], data: st.DataObject
) -> None:
    rows = data.draw(st.integers(1, 8))
    full = data.draw(hnp.arrays(np.uint8, (rows, *row_shape), elements=st.integers(0, EXPERTS - 1)))
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add(full, start=0)
    row = data.draw(st.integers(0, rows - 1))
    drifted = full.copy()
    drifted[row, 0, 0] = (int(drifted[row, 0, 0]) + 1) % EXPERTS
    with pytest.raises(R3WireError):
        trace.add(drifted, start=0)
    assert trace.conflicts == 0
    trace.add(drifted, start=0, on_conflict="replace")
    assert trace.conflicts == 1
    assert _exact(trace.finalize(rows)[0]) == _exact(drifted)


# --- balanced padding and pad_sequences (issue 13.4, 13.5) ------------------------------------------------------


@st.composite
def padded_batches(draw: st.DrawFn) -> tuple[list[Array], list[int], int, int | None, Any]:
    """Samples of one [layers, top_k] with ids below num_experts, token lengths, num_experts, max_len, side."""
    num_experts = draw(st.sampled_from([1, 2, 3, 7, 8, 16, 160, 384, 70000]))
    layers, top_k = draw(st.integers(1, 3)), draw(st.integers(1, min(4, num_experts)))
    samples, lengths = [], []
    for _ in range(draw(st.integers(0, 6))):
        rows = draw(st.integers(0, 9))
        samples.append(draw(hnp.arrays(np.int32, (rows, layers, top_k), elements=st.integers(0, num_experts - 1))))
        lengths.append(rows + draw(st.integers(0, 4)))
    longest = max(lengths, default=0)
    max_len = draw(st.one_of(st.none(), st.integers(longest, longest + 5)))
    return samples, lengths, num_experts, max_len, draw(st.sampled_from(["left", "right"]))


@given(padded_batches())
def test_balanced_padding_gives_every_expert_the_same_share_within_one(
    case: tuple[list[Array], list[int], int, int | None, Any],
) -> None:
    samples, lengths, num_experts, max_len, side = case
    kwargs: dict[str, Any] = {"token_lengths": lengths, "num_experts": num_experts, "max_len": max_len, "side": side}
    padded, mask = pad_routes(samples, fill="balanced", **kwargs)
    plain, plain_mask = pad_routes(samples, **kwargs)
    assert np.array_equal(mask, plain_mask)
    assert np.array_equal(padded[~mask], plain[~mask])
    filler = padded[mask]
    if filler.size == 0:
        return
    assert int(filler.max()) < num_experts
    ordered = np.sort(filler, axis=-1)
    assert (ordered[..., 1:] != ordered[..., :-1]).all()
    for layer in range(filler.shape[1]):
        counts = np.bincount(filler[:, layer].ravel(), minlength=num_experts)
        assert int(np.max(counts)) - int(np.min(counts)) <= 1


@given(padded_batches(), st.data())
def test_pad_sequences_and_pad_routes_agree_cell_for_cell(
    case: tuple[list[Array], list[int], int, int | None, Any], data: st.DataObject
) -> None:
    samples, lengths, num_experts, max_len, side = case
    padded, mask = pad_routes(samples, token_lengths=lengths, num_experts=num_experts, max_len=max_len, side=side)
    # Token ids (one per position) and per-row payloads ([rows, 2] floats) through the same layout.
    ids = [np.arange(1000 * i, 1000 * i + n, dtype=np.int64) for i, n in enumerate(lengths)]
    token_grid, token_mask = pad_sequences(ids, max_len=max_len, side=side, fill=-1)
    row_values = [np.stack([np.arange(s.shape[0]), -np.arange(s.shape[0])], axis=1).astype(np.float32) for s in samples]
    value_grid, value_mask = pad_sequences(
        row_values,
        token_lengths=lengths,
        max_len=max_len,
        side=side,
        fill=np.nan,
    )
    assert np.array_equal(value_mask, mask)
    assert token_grid.shape == mask.shape
    for i, sample in enumerate(samples):
        for cell in np.flatnonzero(~mask[i]):
            row = int(value_grid[i, cell, 0])
            assert _exact(padded[i, cell]) == _exact(sample[row])
            assert token_grid[i, cell] == ids[i][row]  # routes row r sits with token r
        assert np.isnan(value_grid[i][mask[i]]).all()
        assert int((~token_mask[i]).sum()) == lengths[i]
    # Values that start later (completion logprobs) land at their offset inside the same trajectory cells.
    offsets = [data.draw(st.integers(0, n)) for n in lengths]
    tail = [np.full(n - o, 0.5, dtype=np.float32) for n, o in zip(lengths, offsets, strict=True)]
    tail_grid, tail_mask = pad_sequences(tail, token_lengths=lengths, offsets=offsets, max_len=max_len, side=side)
    for i, (n, o) in enumerate(zip(lengths, offsets, strict=True)):
        cells = np.flatnonzero(~token_mask[i])  # the trajectory's positions, in order
        assert np.flatnonzero(~tail_mask[i]).tolist() == cells[o:n].tolist()
        assert (tail_grid[i, cells[o:n]] == 0.5).all()


def _draw_replayed(data: st.DataObject, samples: list[Array], num_experts: int) -> tuple[list[Array], list[Any]]:
    """Row masks (None, all-True or mixed) and samples whose unreplayed rows hold junk: -1, or ids past the model."""
    junk_samples, masks = [], []
    for sample in samples:
        rows = sample.shape[0]
        flags: list[bool] = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
        keep = np.array(flags, dtype=np.bool_)
        junk = sample.copy()
        junk[~keep] = data.draw(st.sampled_from([-1, 0, num_experts, 2**31 - 1]))
        junk_samples.append(junk)
        every_row = bool(keep.all())
        masks.append(None if every_row and data.draw(st.booleans()) else keep)
    return junk_samples, masks


@given(padded_batches(), st.data())
def test_replayed_rows_are_copied_and_the_others_padded(
    case: tuple[list[Array], list[int], int, int | None, Any], data: st.DataObject
) -> None:
    samples, lengths, num_experts, max_len, side = case
    junk, masks = _draw_replayed(data, samples, num_experts)
    kwargs: dict[str, Any] = {"token_lengths": lengths, "num_experts": num_experts, "max_len": max_len, "side": side}
    padded, mask = pad_routes(junk, replayed=masks, **kwargs)
    # The reference: the clean samples padded as before, then every unreplayed row turned into a padding row.
    plain, plain_mask = pad_routes(samples, **kwargs)
    for i, keep in enumerate(masks):
        if keep is None:
            continue
        cells = np.flatnonzero(~plain_mask[i])[~keep]
        plain[i, cells] = np.arange(plain.shape[3])
        plain_mask[i, cells] = True
    assert np.array_equal(mask, plain_mask)
    assert np.array_equal(padded, plain)
    balanced, balanced_mask = pad_routes(junk, replayed=masks, fill="balanced", **kwargs)
    assert np.array_equal(balanced_mask, mask)
    assert np.array_equal(balanced[~mask], padded[~mask])
    filler = balanced[mask]
    for layer in range(filler.shape[1] if filler.size else 0):
        counts = np.bincount(filler[:, layer].ravel(), minlength=num_experts)
        assert int(np.max(counts)) - int(np.min(counts)) <= 1


@given(padded_batches(), st.data())
def test_packed_token_batch_holds_each_trajectory_as_right_padding_does(
    case: tuple[list[Array], list[int], int, int | None, Any], data: st.DataObject
) -> None:
    samples, lengths, num_experts, _, _ = case
    junk, masks = _draw_replayed(data, samples, num_experts)
    fill: Any = data.draw(st.sampled_from(["arange", "balanced"]))
    flat, cu_seqlens, mask = pack_routes(
        junk, token_lengths=lengths, replayed=masks, num_experts=num_experts, fill=fill
    )
    assert cu_seqlens.tolist() == np.cumsum([0, *lengths]).tolist()
    assert flat.shape[0] == mask.shape[0] == sum(lengths)
    assert flat.dtype == route_dtype(num_experts)
    padded, padded_mask = pad_routes(junk, token_lengths=lengths, replayed=masks, num_experts=num_experts, side="right")
    for i, (first, end) in enumerate(pairwise(cu_seqlens.tolist())):
        n = lengths[i]
        assert np.array_equal(mask[first:end], padded_mask[i, :n])
        assert np.array_equal(flat[first:end][~mask[first:end]], padded[i, :n][~padded_mask[i, :n]])
    if fill == "arange":
        assert (flat[mask] == np.arange(flat.shape[2])).all()
    # Split back by the token batch's own cu_seqlens, each piece is one trajectory's token positions.
    assert [part.shape[0] for part in unpack_routes(flat, cu_seqlens)] == lengths
    ordered = np.sort(flat[mask], axis=-1)
    assert (ordered[..., 1:] != ordered[..., :-1]).all()
    assert flat[mask].size == 0 or int(flat[mask].max()) < num_experts


@given(batches_with_experts([4, 256]), JSON_VALUES, st.sampled_from(["token_lengths", "replayed", "fill"]))
def test_hostile_packing_arguments_raise_only_r3wire_errors(
    case: tuple[list[Array], int | None], value: Any, which: str
) -> None:
    samples, num_experts = case
    messages = []
    try:
        result = pack_routes(samples, num_experts=num_experts, **{which: value})
    except R3WireError as exc:
        messages.append(str(exc))
    else:
        assert result[1][-1] == result[0].shape[0]
    try:
        padded, mask = pad_routes(samples, num_experts=num_experts, side="right", **{which: value})
    except R3WireError as exc:
        messages.append(str(exc))
    else:
        assert padded.shape[:2] == mask.shape
    assert all(" must be " in message for message in messages)


# --- decoded payloads fed into the batching helpers (issue 11.7) ------------------------------------------------

LIMIT = 2**16  # max_elements where a caller's token length adds rows beyond the payload's
HUGE_DIMS = st.sampled_from([0, 1, 2, 3, 2**20, 2**30, 2**40, 2**60])


@given(st.lists(HUGE_DIMS, min_size=3, max_size=3), st.binary(max_size=64), st.integers(1, 8))
def test_decoded_payloads_batch_or_raise_without_a_huge_allocation(shape: list[int], noise: bytes, copies: int) -> None:
    count = math.prod(shape)
    data = (noise * (count // max(len(noise), 1) + 1))[:count] if count <= 64 and noise else b""
    payload = {"data": base64.b64encode(data).decode(), "shape": shape, "dtype": "uint8"}
    decoded = decoded_or_none(lambda: decode_routes(payload))
    if decoded is None:
        return
    builds: list[Any] = [
        lambda: pad_routes([decoded] * copies, side="right"),
        lambda: pad_routes(
            [decoded] * copies, token_lengths=[decoded.shape[0] + 1] * copies, side="right", max_elements=LIMIT
        ),
        lambda: pack_routes([decoded] * copies),
        lambda: validate_routes([decoded] * copies),
        lambda: RouteTrace().add(decoded, start=0),
        lambda: pad_sequences([decoded] * copies),
        lambda: pad_sequences([decoded.reshape(decoded.shape[0], decoded.shape[1] * decoded.shape[2])] * copies),
    ]
    for build in builds:
        message = None
        tracemalloc.start()
        try:
            try:
                build()
            except R3WireError as exc:
                message = str(exc)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert message is None or " must be " in message
        assert peak < (1 << 20) + 4 * copies * count + 3 * LIMIT


# Anything JSON can carry, and arrays of the choices' strings (whose `==` is an array, not a bool).
ARGUMENTS = st.one_of(
    JSON_VALUES, st.lists(st.sampled_from(["left", "right", "keep", "raise", "arange", "x"]), max_size=3).map(np.array)
)


@given(ARGUMENTS, ARGUMENTS, ARGUMENTS, st.sampled_from(["token_ids", "on_conflict", "start"]))
def test_hostile_arguments_raise_only_r3wire_errors(first: Any, second: Any, third: Any, which: str) -> None:
    """Anything JSON can carry, as token ids, offsets, lengths, fill, side, check or a policy: accepted or
    R3WireError."""
    trace = RouteTrace(num_experts=EXPERTS)
    routes = np.zeros((1, 1, 1), dtype=np.uint8)
    kwargs: dict[str, Any] = {"start": 0, "token_ids": [5, 6]}
    kwargs[which] = first
    calls: list[Any] = [
        lambda: trace.add(routes, **kwargs),
        lambda: trace.common_prefix(first),
        lambda: trace.fork(first),
        lambda: pad_sequences([np.zeros(2)], offsets=first, token_lengths=second, fill=third),
        lambda: pad_sequences(first, max_len=second),
        lambda: pad_routes([routes], token_lengths=first, max_len=second, fill=third),
        lambda: pad_routes([routes], side=first, fill=second),
        lambda: pad_sequences([np.zeros(2)], side=first),
        lambda: pack_routes([routes], max_elements=first),
        lambda: pad_routes([routes], check=first),
        lambda: pack_routes([routes], check=first),
        lambda: RouteTrace(max_elements=first),
    ]
    for call in calls:
        message = None
        try:
            call()
        except R3WireError as exc:
            message = str(exc)
        assert message is None or " must be " in message


# --- the fast paths against the general ones ---------------------------------------------------------------------


class _GeneralTrace(RouteTrace):
    """A RouteTrace whose every add takes the general path: what the fast path must match exactly."""

    def _add_common(self, routes: object, start: object, token_ids: object, on_conflict: object) -> bool:
        return False


class _CountingTrace(RouteTrace):
    """A RouteTrace that counts the adds its fast path recorded."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fast_adds = 0

    def _add_common(self, routes: object, start: object, token_ids: object, on_conflict: object) -> bool:
        taken = super()._add_common(routes, start, token_ids, on_conflict)
        self.fast_adds += taken
        return taken


def _outcome(call: Callable[[], object]) -> str | None:
    try:
        call()
    except R3WireError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _trace_state(trace: RouteTrace) -> tuple[Any, ...]:
    tokens = trace.token_ids
    return trace.rows, trace.conflicts, trace.dtype, None if tokens is None else tokens.tolist()


def _finalized(trace: RouteTrace) -> Any:
    tokens = trace.token_ids
    total = max(trace.rows, 0 if tokens is None else tokens.shape[0])
    try:
        routes, captured = trace.finalize(total)
    except R3WireError as exc:
        return str(exc)
    return routes.dtype, routes.shape, _exact(routes), captured


def _draw_call_tokens(data: st.DataObject, truth: list[int], end: int, verify: bool) -> Any:
    """A call's token ids: usually valid (covering its rows) in the trace's form; sometimes another form or bad."""
    kind = data.draw(st.sampled_from(["valid"] * 6 + ["other", "list", "int32", "short", "mismatch", "negative"]))
    if (kind == "valid") != verify and kind in ("valid", "other"):
        return None
    count = data.draw(st.integers(min(end, len(truth)), len(truth)))
    if kind == "short":
        count = data.draw(st.integers(0, count))
    tokens = truth[:count]
    if tokens and kind in ("mismatch", "negative"):
        position = data.draw(st.integers(0, len(tokens) - 1))
        tokens = [*tokens[:position], tokens[position] + 1 if kind == "mismatch" else -1, *tokens[position + 1 :]]
    if kind == "list":
        return tokens
    return np.array(tokens, dtype=np.int32 if kind == "int32" else np.int64)


@given(LAYERS_TOP_K, st.data())
def test_trace_fast_path_decides_exactly_as_the_general_path(row_shape: tuple[int, int], data: st.DataObject) -> None:
    """Any sequence of calls, valid or not: the same error (or none), rows, conflicts, dtype, tokens and result."""
    num_experts = data.draw(st.sampled_from([None, 2, 8, 8, 300, 70001]))
    max_elements = data.draw(st.one_of(st.none(), st.integers(0, 30)))
    dtype: np.dtype[Any]
    if num_experts is None:
        dtype = np.dtype(data.draw(st.sampled_from(["u1", "i1", "<i2", "<u4", "<i8"])))
    else:
        dtype = route_dtype(num_experts)
    low, high = (int(x) for x in (np.iinfo(dtype).min, np.iinfo(dtype).max))
    valid = min(high, 7 if num_experts is None else num_experts - 1)
    # The trajectory the calls re-send: overlaps agree unless a call drifts.
    truth: Array = data.draw(hnp.arrays(np.int64, (12, *row_shape), elements=st.integers(0, valid)))
    truth_tokens = data.draw(st.lists(TOKENS, min_size=14, max_size=14))
    verify = data.draw(st.booleans())
    fast = _CountingTrace(num_experts=num_experts, max_elements=max_elements)
    general = _GeneralTrace(num_experts=num_experts, max_elements=max_elements)
    for _ in range(data.draw(st.integers(1, 8))):
        start = general.rows + 1 if not data.draw(st.integers(0, 7)) else data.draw(st.integers(0, general.rows))
        part = truth[start : start + data.draw(st.integers(0, 4))].copy()
        change = data.draw(st.sampled_from(["none", "none", "drift", "negative", "too large"]))
        if part.size and change != "none":
            # An overlap row that drifts (a conflict) or an invalid id, in an overlap row or a new one.
            index = tuple(data.draw(st.integers(0, size - 1)) for size in part.shape)
            if change == "drift":
                part[index] = (part[index] + 1) % (valid + 1)
            else:
                part[index] = max(low, -1) if change == "negative" else min(high, valid + 1)
        form = data.draw(st.sampled_from(["trace dtype"] * 6 + ["int64", "fortran", "strided", "big-endian", "list"]))
        routes: Any = part.astype(dtype)
        if form == "int64":
            routes = part
        elif form == "fortran":
            routes = np.asfortranarray(routes)
        elif form == "strided":
            routes = np.repeat(routes, 2, axis=2)[:, :, ::2]
        elif form == "big-endian":
            routes = routes.astype(dtype.newbyteorder(">"))
        elif form == "list":
            routes = part.tolist()
        if not data.draw(st.integers(0, 11)):
            routes = np.zeros((part.shape[0], row_shape[0], row_shape[1] + 1), dtype=dtype)  # another top_k
        kwargs: dict[str, Any] = {
            "start": data.draw(st.sampled_from([start] * 6 + [np.int64(start), bool(start)])),
            "token_ids": _draw_call_tokens(data, truth_tokens, start + part.shape[0], verify),
            "on_conflict": data.draw(st.sampled_from([None, None, None, "keep", "replace", "raise", "bogus"])),
        }
        expected = _outcome(lambda: general.add(routes, **kwargs))  # noqa: B023  # called right here
        assert _outcome(lambda: fast.add(routes, **kwargs)) == expected  # noqa: B023
        assert _trace_state(fast) == _trace_state(general)
        if data.draw(st.booleans()):
            assert _finalized(fast) == _finalized(general)
    assert _finalized(fast) == _finalized(general)


def test_trace_fast_path_takes_the_common_calls() -> None:
    """The common calls (the trace's dtype, no gap, overlaps that agree) take the fast path, checked above."""
    full = np.arange(6 * 2 * 3, dtype=np.uint8).reshape(6, 2, 3) % 8
    tokens = np.arange(7, dtype=np.int64)
    for token_ids in (None, tokens):
        trace = _CountingTrace(num_experts=8)
        trace.add(full[:2], start=0, token_ids=None if token_ids is None else token_ids[:3])
        trace.add(full[1:4], start=1, token_ids=None if token_ids is None else token_ids[:5])
        trace.add(full[4:6], start=4, token_ids=token_ids)
        assert trace.fast_adds == 3
        routes, captured = trace.finalize(7)
        assert captured == 6
        assert np.array_equal(routes, full)


@st.composite
def per_token_batches(draw: st.DrawFn) -> list[Any]:
    """Per-token value arrays: mostly 1-d arrays of one dtype, sometimes mixed dtypes, shapes, kinds or types."""
    dtype = np.dtype(draw(st.sampled_from(["<f4", ">f4", "<f8", "<i8", "u1", "?", "<c8", "<U1"])))
    samples: list[Any] = []
    two_d, width = draw(st.booleans()), draw(st.integers(0, 2))  # mostly one of each per batch
    for _ in range(draw(st.integers(0, 4))):
        if not draw(st.integers(0, 4)):
            two_d, width = draw(st.booleans()), draw(st.integers(0, 2))
        sample_dtype = dtype if draw(st.integers(0, 4)) else np.dtype(draw(st.sampled_from(["<f4", "<i4", "<U1"])))
        shape = (draw(st.integers(0, 3)), width) if two_d else (draw(st.integers(0, 5)),)
        kinds: dict[str, st.SearchStrategy[Any]] = {"b": st.booleans(), "U": st.sampled_from(["a", "b"])}
        elements = kinds.get(sample_dtype.kind, st.integers(0, 3))
        sample: Any = draw(hnp.arrays(sample_dtype, shape, elements=elements))
        if not draw(st.integers(0, 6)):
            sample = sample.tolist()
        samples.append(sample)
    return samples


@given(per_token_batches(), st.data())
def test_pad_sequences_fast_path_pads_exactly_as_the_general_path(samples: list[Any], data: st.DataObject) -> None:
    lengths = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 8), min_size=len(samples), max_size=len(samples))))
    offsets = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 2), min_size=len(samples), max_size=len(samples))))
    kwargs: dict[str, Any] = {
        "token_lengths": lengths,
        "offsets": offsets,
        "side": data.draw(st.sampled_from(["left", "right"])),
        "fill": data.draw(st.sampled_from([0, -1, 0.5])),
    }
    values = tuple(samples) if data.draw(st.booleans()) else samples

    def padded() -> Any:
        try:
            grid, mask = pad_sequences(values, **kwargs)
        except R3WireError as exc:
            return str(exc)
        return grid.dtype, grid.shape, grid.tobytes(), mask.tobytes()

    expected = padded()
    with patch.object(batching, "_same_vectors", return_value=None):
        assert padded() == expected


@given(
    st.sampled_from(["u1", "<i2", ">i2", "<i4", "<i8"]),
    st.integers(0, 3),
    st.sampled_from(["C", "F", "strided", "last axis strided", "reversed"]),
    st.data(),
)
def test_large_overlaps_are_compared_exactly(dtype: str, extra: int, layout: str, data: st.DataObject) -> None:
    """Past 64 KiB RouteTrace compares in 8-byte words where it can: any one differing id is still found.

    "last axis strided" and "reversed" ([rows, 1, 1]) flatten to a view of one non-unit stride, which cannot be
    viewed as 8-byte words (review 9a, 1): they are compared element by element.
    """
    top_k = 1 if layout == "reversed" else data.draw(st.sampled_from([1, 3, 8]))
    layers = 1 if layout == "reversed" else 4
    itemsize = np.dtype(dtype).itemsize
    rows = (1 << 16) // (layers * top_k * itemsize) + extra  # just past 64 KiB
    recorded = np.arange(rows * layers * top_k, dtype=np.int64).reshape(rows, layers, top_k).astype(dtype) % 100
    call = recorded.copy()
    if layout == "F":
        call = np.asfortranarray(call)
    elif layout == "strided":
        call = np.repeat(call, 2, axis=0)[::2]
    elif layout == "last axis strided":
        call = np.repeat(call, 2, axis=2)[..., ::2]
    elif layout == "reversed":
        call = np.ascontiguousarray(call[::-1])[::-1]
    assert not batching._differs(recorded, call)
    index = tuple(data.draw(st.integers(0, size - 1)) for size in call.shape)
    call[index] = 100
    assert batching._differs(recorded, call)
    trace = RouteTrace()
    trace.add(recorded, start=0)
    trace.add(call, start=0, on_conflict="keep")
    assert trace.conflicts == 1


@given(st.integers(1, 4), st.integers(1, 5), st.data())
def test_out_that_shares_memory_with_a_sample_is_refused_never_half_read(
    batch: int, width: int, data: st.DataObject
) -> None:
    """Samples cut from ``out`` itself (a reused buffer): refused, or (no sample inside out) padded exactly."""
    out = data.draw(hnp.arrays(np.int64, (batch, width), elements=st.integers(0, 9)))
    values: list[Array] = []
    for _ in range(batch):
        row, stop = data.draw(st.integers(0, batch - 1)), data.draw(st.integers(0, width))
        values.append(out[row, :stop] if data.draw(st.booleans()) else out[row, :stop].copy())
    copies = [v.copy() for v in values]
    expected, expected_mask = pad_sequences(copies, max_len=width, fill=-1)
    if any(np.shares_memory(v, out) for v in values):
        with pytest.raises(R3WireError) as info:
            pad_sequences(values, max_len=width, fill=-1, out=out)
        assert info.value.field == "out"
    else:
        padded, mask = pad_sequences(values, max_len=width, fill=-1, out=out)
        assert np.array_equal(padded, expected)
        assert np.array_equal(mask, expected_mask)
    routes_out = np.zeros((batch, width, 1, 1), dtype=np.uint8)
    # A sample with no rows reads nothing: it may be an empty view of out.
    samples = [routes_out[i % batch, : data.draw(st.integers(1, width))] for i in range(batch)]
    with pytest.raises(R3WireError) as info:
        pad_routes(samples, max_len=width, out=routes_out, num_experts=16, side="right")
    assert info.value.field == "out"


# Python ints around the int64 and uint64 edges, where NumPy turns a nested list into float64 or object.
EDGE_INTS = st.one_of(
    st.integers(-3, 3),
    st.integers(2**53 - 2, 2**53 + 2),
    st.integers(2**63 - 2, 2**63 + 2),
    st.integers(2**64 - 2, 2**64 + 2),
    st.integers(-(2**63) - 2, -(2**63) + 2),
)


def _attempt(call: Callable[[], Any]) -> tuple[Any, str | None]:
    """``call()``'s result and None, or None and the R3WireError's field and message."""
    try:
        return call(), None
    except R3WireError as exc:
        return None, f"{exc.field}: {exc}"


@given(st.lists(st.lists(EDGE_INTS, max_size=4), max_size=4))
def test_int_lists_pad_exactly_or_are_refused(samples: list[list[int]]) -> None:
    """Nested lists of ints (empty ones too): every value padded exactly, or R3WireError; never a rounded value.

    A batch whose ints all fit int64 is padded; one that needs uint64 beside small ints may be refused (NumPy
    makes such a list float64), but then the message says so instead of naming a float dtype nobody passed.
    """
    in_int64 = [all(-(2**63) <= v < 2**63 for v in sample) for sample in samples]
    result, refused = _attempt(lambda: pad_sequences(samples, side="right"))
    if refused is None:
        padded, mask = result
        for i, sample in enumerate(samples):
            assert [int(x) for x in padded[i][~mask[i]]] == sample
    else:
        assert not all(in_int64)
        assert refused.startswith("values[")
        assert "got float64" not in refused
    # Lists of [[id]] rows (an empty list is no [rows, layers, top_k] array: its shape is refused).
    routes = [rows for rows in ([[[v]] for v in sample if v >= 0] for sample in samples) if rows]
    result, refused = _attempt(lambda: pad_routes(routes, side="right"))
    if refused is None:
        padded, mask = result
        for i, rows in enumerate(routes):
            assert [int(x) for x in padded[i][~mask[i]].ravel()] == [row[0][0] for row in rows]
    else:
        assert any(row[0][0] >= 2**63 for rows in routes for row in rows)
        assert "got float64" not in refused
    tokens = [v for sample in samples for v in sample if v >= 0]
    trace = RouteTrace()
    _, refused = _attempt(lambda: trace.add(np.zeros((0, 1, 1), np.uint8), start=0, token_ids=tokens))
    if refused is None:
        assert trace.token_ids is not None
        assert trace.token_ids.tolist() == tokens
    else:
        assert max(tokens) >= 2**63
        assert "got float64" not in refused


@given(
    tokens=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    whole=st.lists(st.booleans(), min_size=4, max_size=4),
    side=st.sampled_from(["left", "right"]),
    extra=st.one_of(st.none(), st.integers(0, 3)),
)
def test_whatever_pads_without_token_lengths_puts_row_j_beside_token_j(
    tokens: list[int], whole: list[bool], side: str, extra: int | None
) -> None:
    # A trajectory of n tokens has n - 1 rows (or n, when rows cover every token). Whenever routes and the token ids
    # both pad without token_lengths to the same width, row j must sit beside token j: taking rows for tokens
    # under left padding put every row one token late, with matching shapes and no error.
    rows = [n if full else n - 1 for n, full in zip(tokens, whole, strict=False)]
    routes = [np.full((r, 1, 1), j, dtype=np.uint8) for j, r in enumerate(rows)]
    ids = [np.arange(n, dtype=np.int64) for n in tokens]
    max_len = None if extra is None else max(tokens) + extra
    refused: R3WireError | None = None
    try:
        padded, mask = pad_routes(routes, side=side, max_len=max_len)  # type: ignore[arg-type]
    except R3WireError as exc:
        refused = exc
    if refused is not None:
        assert refused.field in {"token_lengths", "max_len"}, refused
        return
    grid, _ = pad_sequences(ids, side=side, max_len=max_len, fill=-1)  # type: ignore[arg-type]
    if padded.shape[1] != grid.shape[1]:
        return  # a shape mismatch a trainer cannot miss
    for i, r in enumerate(rows):
        replayed = np.flatnonzero(~mask[i])
        assert len(replayed) == r
        assert grid[i, replayed].tolist() == list(range(r))  # row j beside token j
        assert (padded[i, replayed] == i).all()


@given(
    batch=st.integers(0, 4),
    rows=st.integers(0, 3),
    lengths=st.one_of(st.none(), st.lists(st.integers(0, 5), max_size=5)),
    as_array=st.booleans(),
    max_elements=st.one_of(st.none(), st.integers(0, 40)),
    call=st.sampled_from(["pad", "pack", "validate", "values"]),
)
def test_array_batch_pads_as_its_list_of_samples(
    *, batch: int, rows: int, lengths: list[int] | None, as_array: bool, max_elements: int | None, call: str
) -> None:
    """A batch given as one (broadcast) array gives what the list of its samples gives (review 9a, 2 and 5): its
    shape and the count of ``token_lengths`` are checked first, so only where the refusal is named differs."""
    samples = np.broadcast_to(np.arange(2, dtype=np.uint8), (batch, rows, 3, 2))
    given: Any = None if lengths is None else (np.array(lengths, np.int64) if as_array else lengths)

    def run(batch_of: Any) -> Callable[[], Any]:
        if call == "pad":
            return lambda: pad_routes(batch_of, token_lengths=given, side="right", max_elements=max_elements)
        if call == "pack":
            return lambda: pack_routes(batch_of, token_lengths=given, max_elements=max_elements)
        if call == "validate":
            return lambda: validate_routes(batch_of, token_lengths=given, max_elements=max_elements)
        values = batch_of[:, :, 0, 0] if isinstance(batch_of, np.ndarray) else [v[:, 0, 0] for v in batch_of]
        return lambda: pad_sequences(values, token_lengths=given, side="right", max_elements=max_elements)

    whole, whole_error = _attempt(run(samples))
    listed, listed_error = _attempt(run(list(samples)))
    if listed_error is None:
        if whole_error is not None:
            # Zero-row samples: the array's shape is held through its non-zero dimensions, as every empty shape
            # (2**31 of them are 2**31 conversions), where packing or validating them reads no id.
            assert rows == 0
            assert whole_error.startswith(("samples:", "values:"))
            return
        assert repr(whole) == repr(listed)
        return
    assert whole_error is not None
    if whole_error != listed_error:  # refused by the batch's own shape first, where the list's output was named
        whole_field, listed_field = whole_error.split(":")[0], listed_error.split(":")[0]
        assert whole_field in {"samples", "values"}
        assert listed_field in {"padded", "flat", "samples", "values"} or listed_field.startswith("token_lengths")


@given(
    fill_dtype=st.sampled_from(["?", "u1", "i2", "<i4", ">i8", "<u8", "f2", "<f4", ">f8"]),
    out_dtype=st.sampled_from(["?", "u1", "i2", "i8", "u8", "f2", "f4", "f8"]),
    data=st.data(),
)
def test_a_numpy_fill_is_stored_exactly_or_refused(fill_dtype: str, out_dtype: str, data: st.DataObject) -> None:
    """A NumPy scalar ``fill`` is compared with what is stored as Python numbers (review 9a, 6): NumPy compares an
    integer scalar with a float as float64, where ``np.int64(2**53 + 1)`` equals the 2**53 stored."""
    kind = np.dtype(fill_dtype)
    elements = hnp.from_dtype(kind, allow_infinity=False)
    if kind.kind in "iu":  # integers just past what a float's mantissa holds, and the dtype's ends
        low, high = int(np.iinfo(kind).min), int(np.iinfo(kind).max)
        edges = [v for v in (2**11 + 1, 2**24 + 1, 2**53 + 1, high, high - 1, low) if low <= v <= high]
        elements = st.one_of(elements, st.sampled_from(edges))
    fill: Any = np.array(data.draw(elements), dtype=kind)[()]
    refused: R3WireError | None = None
    try:
        padded, _ = pad_sequences([np.zeros(1, dtype=out_dtype)], token_lengths=[2], fill=fill)
    except R3WireError as exc:
        refused = exc
    if refused is not None:
        assert refused.field == "fill"
        return
    stored, given = padded[0, 1].item(), fill.item()
    assert stored == given or (math.isnan(stored) and math.isnan(given))


@given(
    recorded=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    given_ids=st.lists(st.integers(0, 5), max_size=8),
    junk=st.lists(JSON_VALUES, max_size=3),
)
def test_common_prefix_never_reads_past_the_recorded_tokens(
    recorded: list[int], given_ids: list[int], junk: list[Any]
) -> None:
    """Tokens past the recorded ones never change ``common_prefix``'s answer, whatever they are (review 9a, 9)."""
    trace = RouteTrace()
    trace.add(np.zeros((0, 1, 1), np.uint8), start=0, token_ids=recorded)
    expected = next((i for i, (a, b) in enumerate(zip(recorded, given_ids, strict=False)) if a != b), None)
    if expected is None:
        expected = min(len(recorded), len(given_ids))
    assert trace.common_prefix(given_ids) == expected
    if len(given_ids) >= len(recorded):
        assert trace.common_prefix([*given_ids[: len(recorded)], *junk]) == expected


@given(
    rest=st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    dtype=st.sampled_from(["?", "i1", ">u2", "<f4", "f8"]),
    rows=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=1, max_size=5),
    side=st.sampled_from(["left", "right"]),
)
def test_an_empty_list_pads_as_an_empty_array_of_the_others_shape(
    rest: tuple[int, ...], dtype: str, rows: list[int | None], side: str
) -> None:
    """``[]`` is a trajectory with no values: ``[0, *rest]`` of the other samples' kind (review 9a, 10)."""
    arrays: list[Any] = [np.ones((0 if n is None else n, *rest), dtype=dtype) for n in rows]
    listed: list[Any] = [[] if n is None else arr for n, arr in zip(rows, arrays, strict=True)]
    lengths = [3] * len(rows)
    expected = pad_sequences(arrays, token_lengths=lengths, side=side, fill=0)  # type: ignore[arg-type]
    if all(n is None for n in rows):
        if rest:  # no sample to take rest from: the empty lists are 1-d
            return
        expected = (expected[0].astype(np.float64), expected[1])
    padded, mask = pad_sequences(listed, token_lengths=lengths, side=side, fill=0)  # type: ignore[arg-type]
    assert padded.dtype == expected[0].dtype
    assert padded.shape == expected[0].shape
    assert padded.tolist() == expected[0].tolist()
    assert mask.tolist() == expected[1].tolist()


@given(
    turns=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 4), st.booleans(), st.integers(0, 3)), min_size=1, max_size=6
    ),
    data=st.data(),
)
def test_logprobs_of_every_turn_land_on_the_tokens_that_turn_sampled(
    turns: list[tuple[int, int, bool, int]], data: st.DataObject
) -> None:
    # Each turn: a tool/user tail appended, a completion sampled (with its logprobs reported or not), calls that
    # re-send the whole trajectory so far. The reference: a logprob is a function of its position and call.
    trace = RouteTrace(num_experts=8)
    tokens: list[int] = [5]
    want_lp: dict[int, float] = {}
    for tail, completion, reported, _ in turns:
        tokens += [1] * tail
        prompt_len = len(tokens)
        tokens += [2] * completion
        rows = np.zeros((len(tokens) - 1, 1, 1), dtype=np.uint8)
        values = [-(p + 1) / 8 for p in range(prompt_len, len(tokens))]
        trace.add(rows, token_ids=tokens, logprobs=values if reported else None)
        if reported:
            for p, v in zip(range(prompt_len, len(tokens)), values, strict=True):
                want_lp.setdefault(p, v)
    if trace.sampled is None:
        assert not want_lp
        return
    assert trace.logprobs is not None
    assert np.flatnonzero(trace.sampled).tolist() == sorted(want_lp)
    assert trace.logprobs.tolist() == [want_lp.get(p, 0.0) for p in range(len(tokens))]
    keep = data.draw(st.integers(0, len(tokens)), label="fork")
    branch = trace.fork(keep)
    assert branch.logprobs is not None
    assert branch.sampled is not None
    assert branch.logprobs.tolist() == trace.logprobs[:keep].tolist()
    assert branch.sampled.tolist() == trace.sampled[:keep].tolist()
