"""pad_routes / pack_routes / unpack_routes / validate_routes / RouteTrace: one test per rule."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from r3wire import (
    R3WireError,
    RouteTrace,
    pack_routes,
    pad_routes,
    route_dtype,
    unpack_routes,
    validate_routes,
)
from r3wire.synthetic import synthetic_routes

Array = np.ndarray[Any, Any]


def _routes(rows: int, *, layers: int = 3, top_k: int = 2, seed: int = 0, dtype: Any = np.int32) -> Array:
    return synthetic_routes(rows, layers=layers, top_k=top_k, num_experts=16, seed=seed, dtype=dtype)


def _expected_pad(samples: list[Array], lengths: list[int], width: int, side: str) -> tuple[Array, Array]:
    """A slow, obviously-correct reference: one position at a time."""
    layers, top_k = samples[0].shape[1:]
    padded = np.empty((len(samples), width, layers, top_k), dtype=np.int64)
    mask = np.empty((len(samples), width), dtype=bool)
    for i, (sample, length) in enumerate(zip(samples, lengths, strict=True)):
        first = width - length if side == "left" else 0
        for pos in range(width):
            token = pos - first
            if 0 <= token < sample.shape[0]:
                padded[i, pos] = sample[token]
                mask[i, pos] = False
            else:
                padded[i, pos] = np.arange(top_k)
                mask[i, pos] = True
    return padded, mask


# --- pad_routes: layout and mask -------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_pad_layout_and_mask(side: str) -> None:
    samples = [_routes(5, seed=1), _routes(2, seed=2), _routes(0, seed=3), _routes(4, seed=4)]
    padded, mask = pad_routes(samples, side=side)  # type: ignore[arg-type]
    expected, expected_mask = _expected_pad(samples, [5, 2, 0, 4], 5, side)
    assert padded.shape == (4, 5, 3, 2)
    assert mask.dtype == np.bool_
    assert np.array_equal(padded, expected)
    assert np.array_equal(mask, expected_mask)


@pytest.mark.parametrize("side", ["left", "right"])
def test_uncaptured_rows_follow_the_captured_ones(side: str) -> None:
    # A 6-token trajectory whose engine returned 5 rows: token 5 (the last sampled) was never forwarded.
    sample = _routes(5, seed=7)
    padded, mask = pad_routes([sample, _routes(8, seed=8)], token_lengths=[6, 8], side=side)  # type: ignore[arg-type]
    if side == "left":
        assert mask[0].tolist() == [True, True, False, False, False, False, False, True]
        assert np.array_equal(padded[0, 2:7], sample)
    else:
        assert mask[0].tolist() == [False] * 5 + [True] * 3
        assert np.array_equal(padded[0, :5], sample)
    for pos in np.flatnonzero(mask[0]):
        assert np.array_equal(padded[0, pos], np.broadcast_to(np.arange(2), (3, 2)))
    assert not mask[1].any()


def test_padding_rows_are_arange_top_k_in_every_layer() -> None:
    padded, mask = pad_routes([_routes(1, layers=4, top_k=8), _routes(3, layers=4, top_k=8)], num_experts=16)
    assert mask[0].tolist() == [True, True, False]
    for pos in (0, 1):
        for layer in range(4):
            assert padded[0, pos, layer].tolist() == list(range(8))


def test_token_lengths_accepts_numpy_integers_and_arrays() -> None:
    samples = [_routes(2), _routes(3)]
    a, mask_a = pad_routes(samples, token_lengths=np.array([3, 4]))
    lengths: list[Any] = [np.int64(3), np.uint8(4)]  # NumPy 1.x stubs do not type NumPy integers as int
    b, mask_b = pad_routes(samples, token_lengths=lengths)
    assert np.array_equal(a, b)
    assert np.array_equal(mask_a, mask_b)
    assert a.shape[1] == 4


@pytest.mark.parametrize(
    ("lengths", "field"),
    [
        ([3, 3], "token_lengths[1]"),  # sample 1 has 4 rows: more rows than tokens
        ([3], "token_lengths"),
        ([3, 4, 5], "token_lengths"),
        ([3, True], "token_lengths[1]"),
        ([3, 4.0], "token_lengths[1]"),
        ("34", "token_lengths"),
        (np.array([[3, 4]]), "token_lengths"),
        (np.array([3.0, 4.0]), "token_lengths"),
    ],
)
def test_token_lengths_errors(lengths: Any, field: str) -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(3), _routes(4)], token_lengths=lengths)
    assert info.value.field == field


def test_more_rows_than_tokens_names_the_sample() -> None:
    with pytest.raises(R3WireError, match=r"samples\[1\]"):
        pad_routes([_routes(3), _routes(4)], token_lengths=[3, 3])


def test_side_must_be_left_or_right() -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(1)], side="center")  # type: ignore[arg-type]
    assert info.value.field == "side"


def test_max_len_pads_further_and_refuses_too_short() -> None:
    samples = [_routes(2), _routes(3)]
    padded, mask = pad_routes(samples, max_len=6, side="right")
    assert padded.shape[1] == 6
    assert mask.sum(axis=1).tolist() == [4, 3]
    with pytest.raises(R3WireError) as info:
        pad_routes(samples, token_lengths=[2, 5], max_len=4)
    assert info.value.field == "max_len"
    assert "samples[1]" in str(info.value)
    with pytest.raises(R3WireError):
        pad_routes(samples, max_len=-1)


# --- pad_routes: dtype -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_experts", "expected"), [(16, "uint8"), (256, "uint8"), (257, "int16"), (40000, "int32")])
def test_num_experts_fixes_the_batch_dtype(num_experts: int, expected: str) -> None:
    for dtype in (np.uint8, np.int32, np.int64, ">u2"):
        padded, _ = pad_routes([_routes(2, dtype=dtype)], num_experts=num_experts)
        assert padded.dtype == np.dtype(expected) == route_dtype(num_experts)
        flat, _ = pack_routes([_routes(2, dtype=dtype)], num_experts=num_experts)
        assert flat.dtype == np.dtype(expected)


@pytest.mark.parametrize(
    ("dtypes", "expected"),
    [
        ((np.uint8,), np.uint8),
        ((np.uint8, np.int16), np.int16),
        ((np.uint16, np.int16), np.int32),  # holds every value of both
        ((np.int16, ">i4"), np.int32),
        ((">u2",), np.uint16),
        ((np.uint64, np.int8), np.uint64),  # NumPy would say float64; ids are non-negative so uint64 holds all
        ((np.int64, np.uint8), np.int64),
    ],
)
def test_widest_sample_dtype_without_num_experts(dtypes: tuple[Any, ...], expected: Any) -> None:
    samples = [_routes(2, seed=i, dtype=dtype) for i, dtype in enumerate(dtypes)]
    padded, _ = pad_routes(samples)
    assert padded.dtype == np.dtype(expected)
    assert padded.dtype.isnative
    assert np.array_equal(padded, np.stack(samples).astype(np.int64))


def test_values_that_need_the_wider_dtype_survive() -> None:
    small = np.zeros((1, 1, 2), dtype=np.uint16)
    small[0, 0] = [65535, 1]
    signed = np.array([[[-0, 32767]]], dtype=np.int16)
    padded, _ = pad_routes([small, signed])
    assert padded.dtype == np.int32
    assert padded[0, 0, 0].tolist() == [65535, 1]


def test_id_at_or_above_num_experts_names_sample_row_layer_slot() -> None:
    samples = [_routes(3), _routes(4)]
    samples[1][2, 1, 0] = 16
    with pytest.raises(R3WireError) as info:
        pad_routes(samples, num_experts=16)
    assert info.value.field == "samples[1][row 2, layer 1, slot 0]"
    assert "num_experts=16" in str(info.value)
    assert info.value.got == "16"


def test_an_id_the_fixed_dtype_cannot_hold_is_refused_not_wrapped() -> None:
    sample = np.zeros((2, 1, 2), dtype=np.int64)
    sample[1, 0] = [0, 300]
    with pytest.raises(R3WireError, match=r"samples\[0\]\[row 1, layer 0, slot 1\]"):
        pad_routes([sample], num_experts=256)  # uint8: 300 would wrap to 44


@pytest.mark.parametrize("num_experts", [None, 128])
def test_negative_ids_are_refused(num_experts: int | None) -> None:
    # NeMo-RL's -1 "missing route" has no meaning here: the mask is the only way to say "do not replay".
    sample = _routes(3, dtype=np.int8)
    sample[1, 2, 1] = -1
    sample[2, 0, 0] = -5
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(1), sample], num_experts=num_experts)
    assert info.value.field == "samples[1][row 1, layer 2, slot 1]"
    assert info.value.got == "-1"
    assert "non-negative" in str(info.value)
    with pytest.raises(R3WireError):
        pack_routes([sample], num_experts=num_experts)


def test_top_k_above_num_experts_is_refused() -> None:
    # Padding rows are arange(top_k): with top_k > num_experts they would hold invalid ids.
    with pytest.raises(R3WireError, match="top_k"):
        pad_routes([np.zeros((0, 2, 5), dtype=np.uint8)], num_experts=4)


def test_top_k_that_arange_cannot_fill_in_the_batch_dtype_is_refused() -> None:
    with pytest.raises(R3WireError, match="top_k"):
        pad_routes([np.zeros((0, 1, 257), dtype=np.uint8)])


# --- pad_routes: sample structure ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (np.zeros((2, 3), dtype=np.int32), "samples[1]"),
        (np.zeros((2, 3, 2, 1), dtype=np.int32), "samples[1]"),
        (np.zeros((2, 3, 2), dtype=np.float32), "samples[1].dtype"),
        (np.zeros((2, 3, 2), dtype=bool), "samples[1].dtype"),
        (np.zeros((2, 4, 2), dtype=np.int32), "samples[1].shape"),
        (np.zeros((2, 3, 3), dtype=np.int32), "samples[1].shape"),
        ("abc", "samples[1]"),
        (None, "samples[1]"),
    ],
)
def test_bad_samples_name_their_index(bad: Any, field: str) -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(2), bad])
    assert info.value.field == field
    with pytest.raises(R3WireError) as info:
        pack_routes([_routes(2), bad])
    assert info.value.field == field


def test_top_k_must_be_at_least_one() -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([np.zeros((2, 3, 0), dtype=np.uint8)])
    assert info.value.field == "samples[0].shape[2]"


@pytest.mark.parametrize("samples", ["abc", b"abc", 3, None, {"a": 1}, np.int32(3), np.array(3), iter([])])
def test_samples_must_be_a_sequence(samples: Any) -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes(samples)
    assert info.value.field == "samples"


def test_num_experts_must_be_valid() -> None:
    for bad in (0, -1, 2**31 + 1, True, 3.0, "8"):
        with pytest.raises(R3WireError):
            pad_routes([_routes(1)], num_experts=bad)  # type: ignore[arg-type]
        with pytest.raises(R3WireError):
            RouteTrace(num_experts=bad)  # type: ignore[arg-type]


def test_samples_of_any_layout_are_copied_exactly() -> None:
    base = _routes(6, layers=4, top_k=3, dtype=">i4")
    readonly = base.copy()
    readonly.flags.writeable = False
    views = [base[::2], np.asfortranarray(base), base[::-1, :, ::-1], readonly]
    padded, mask = pad_routes([*views, base.tolist()], num_experts=16)
    for i, view in enumerate([*views, base]):
        rows = view.shape[0]
        assert np.array_equal(padded[i, 6 - rows :], view)
        assert mask[i].tolist() == [True] * (6 - rows) + [False] * rows


def test_a_4d_array_is_a_batch_of_samples() -> None:
    stacked = np.stack([_routes(3, seed=1), _routes(3, seed=2)])
    padded, mask = pad_routes(stacked, num_experts=16)
    assert np.array_equal(padded, stacked)
    assert not mask.any()
    flat, _ = pack_routes(stacked)
    assert np.array_equal(flat, stacked.reshape(6, 3, 2))


def test_nested_lists_are_accepted() -> None:
    padded, mask = pad_routes([[[[0, 1]]], [[[2, 3]], [[1, 0]]]], side="right")
    assert padded.tolist() == [[[[0, 1]], [[0, 1]]], [[[2, 3]], [[1, 0]]]]
    assert mask.tolist() == [[False, True], [False, False]]


# --- pad_routes: edge cases ------------------------------------------------------------------------------------


def test_empty_batch() -> None:
    padded, mask = pad_routes([])
    assert padded.shape == (0, 0, 0, 0)
    assert padded.dtype == np.uint8
    assert mask.shape == (0, 0)
    padded, mask = pad_routes([], max_len=5, num_experts=300, token_lengths=[])
    assert padded.shape == (0, 5, 0, 0)
    assert padded.dtype == np.int16
    assert mask.shape == (0, 5)


def test_zero_row_samples() -> None:
    padded, mask = pad_routes([_routes(0), _routes(0)])
    assert padded.shape == (2, 0, 3, 2)
    assert mask.shape == (2, 0)
    padded, mask = pad_routes([_routes(0), _routes(2)], token_lengths=[1, 2])
    assert mask.tolist() == [[True, True], [False, False]]
    assert np.array_equal(padded[0], np.broadcast_to(np.arange(2), (2, 3, 2)))


def test_single_sample() -> None:
    sample = _routes(4, dtype=np.uint8)
    padded, mask = pad_routes([sample])
    assert padded.shape == (1, 4, 3, 2)
    assert padded.dtype == np.uint8
    assert np.array_equal(padded[0], sample)
    assert not np.shares_memory(padded, sample)
    assert not mask.any()


# --- pad_routes: out= and check= -------------------------------------------------------------------------------


def test_out_is_filled_in_place_and_stale_contents_are_overwritten() -> None:
    samples = [_routes(2), _routes(4)]
    out = np.full((2, 5, 3, 2), 99, dtype=np.uint8)
    padded, mask = pad_routes(samples, num_experts=16, max_len=5, out=out)
    assert padded is out
    expected, expected_mask = pad_routes(samples, num_experts=16, max_len=5)
    assert np.array_equal(out, expected)
    assert np.array_equal(mask, expected_mask)


@pytest.mark.parametrize(
    ("out", "field"),
    [
        (np.empty((2, 4, 3, 2), dtype=np.uint8), "out.shape"),
        (np.empty((2, 5, 3, 2), dtype=np.int16), "out.dtype"),
        (np.empty((2, 5, 3, 2), dtype=np.uint8).tolist(), "out"),
    ],
)
def test_out_must_match(out: Any, field: str) -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(2), _routes(4)], num_experts=16, max_len=5, out=out)
    assert info.value.field == field


def test_out_must_be_writable() -> None:
    out = np.empty((1, 2, 3, 2), dtype=np.uint8)
    out.flags.writeable = False
    with pytest.raises(R3WireError, match="writable"):
        pad_routes([_routes(2)], num_experts=16, out=out)


def test_check_refuses_repeated_ids_within_a_row() -> None:
    sample = _routes(3, top_k=4)
    sample[2, 1] = [5, 7, 5, 1]
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(1, top_k=4), sample], check=True)
    assert info.value.field == "samples[1][row 2, layer 1]"
    assert "[5, 7, 5, 1]" in str(info.value)
    with pytest.raises(R3WireError):
        pack_routes([sample], check=True)
    # Without check the ids are copied as they are: distinctness costs a sort, so it is opt-in.
    padded, _ = pad_routes([sample])
    assert padded[0, 2, 1].tolist() == [5, 7, 5, 1]


# --- validate_routes -------------------------------------------------------------------------------------------


def test_validate_accepts_valid_batches() -> None:
    validate_routes([_routes(3), _routes(0)], num_experts=16, token_lengths=[4, 1])
    validate_routes([])
    validate_routes([_routes(2, top_k=1)])


@pytest.mark.parametrize(
    ("where", "value", "kwargs", "field"),
    [
        ((1, 0, 1), 16, {"num_experts": 16}, "samples[1][row 1, layer 0, slot 1]"),
        ((2, 1, 0), -3, {}, "samples[1][row 2, layer 1, slot 0]"),
        ((1, 2, 0), "repeat", {}, "samples[1][row 1, layer 2]"),
        (None, 0, {"token_lengths": [3, 2]}, "token_lengths[1]"),
    ],
)
def test_validate_names_the_broken_rule(
    where: tuple[int, int, int] | None, value: Any, kwargs: dict[str, Any], field: str
) -> None:
    samples = [_routes(3, dtype=np.int16), _routes(3, seed=5, dtype=np.int16)]
    validate_routes(samples, num_experts=16)
    if where is not None:
        row, layer, slot = where
        samples[1][row, layer, slot] = samples[1][row, layer, 1 - slot] if value == "repeat" else value
    with pytest.raises(R3WireError) as info:
        validate_routes(samples, **kwargs)
    assert info.value.field == field


def test_validate_checks_structure() -> None:
    with pytest.raises(R3WireError):
        validate_routes([_routes(2), _routes(2, layers=4)])
    with pytest.raises(R3WireError):
        validate_routes([np.zeros((1, 1, 3), dtype=np.uint8)], num_experts=2)


# --- pack_routes / unpack_routes -------------------------------------------------------------------------------


def test_pack_concatenates_rows_and_prefix_sums() -> None:
    samples = [_routes(3, seed=1), _routes(0, seed=2), _routes(5, seed=3, dtype=np.uint8)]
    flat, cu = pack_routes(samples)
    assert flat.shape == (8, 3, 2)
    assert flat.dtype == np.int32
    assert flat.flags.c_contiguous
    assert cu.dtype == np.int64
    assert cu.tolist() == [0, 3, 3, 8]
    assert np.array_equal(flat, np.concatenate(samples))
    parts = unpack_routes(flat, cu)
    assert len(parts) == 3
    for part, sample in zip(parts, samples, strict=True):
        assert np.array_equal(part, sample)
        assert np.shares_memory(part, flat) or part.size == 0
        assert part.base is flat


def test_pack_empty_batch_and_single_sample() -> None:
    flat, cu = pack_routes([])
    assert flat.shape == (0, 0, 0)
    assert cu.tolist() == [0]
    assert unpack_routes(flat, cu) == []
    sample = _routes(4)
    flat, cu = pack_routes([sample], num_experts=16)
    assert flat.dtype == np.uint8
    assert cu.tolist() == [0, 4]
    (back,) = unpack_routes(flat, cu)
    assert np.array_equal(back, sample)


@pytest.mark.parametrize(
    ("cu", "field"),
    [
        ([1, 3], "cu_seqlens[0]"),
        ([0, 3, 2, 5], "cu_seqlens[2]"),
        ([0, 4], "cu_seqlens[1]"),
        ([0, 6], "cu_seqlens[1]"),
        ([], "cu_seqlens"),
        ([[0, 5]], "cu_seqlens"),
        ([0.0, 5.0], "cu_seqlens"),
        ("05", "cu_seqlens"),
    ],
)
def test_unpack_refuses_bad_offsets(cu: Any, field: str) -> None:
    with pytest.raises(R3WireError) as info:
        unpack_routes(np.zeros((5, 3, 2), dtype=np.uint8), cu)
    assert info.value.field == field


def test_unpack_needs_an_array_with_rows() -> None:
    for bad in ([[1, 2]], np.int32(3), np.zeros(())):
        with pytest.raises(R3WireError) as info:
            unpack_routes(bad, [0])  # type: ignore[arg-type]
        assert info.value.field == "flat"


def test_unpack_accepts_int32_offsets() -> None:
    flat, cu = pack_routes([_routes(2), _routes(3)])
    parts = unpack_routes(flat, cu.astype(np.int32))
    assert [p.shape[0] for p in parts] == [2, 3]


def test_pack_and_pad_allocate_only_their_output() -> None:
    # "Copy once": converting int32 samples to uint8 must not build an int32 (or any) intermediate batch.
    samples = [_routes(400, layers=8, top_k=4, seed=i) for i in range(8)]
    builds: list[Callable[[], Array]] = [
        lambda: pack_routes(samples, num_experts=16)[0],
        lambda: pad_routes(samples, num_experts=16)[0],
    ]
    for build in builds:
        tracemalloc.start()
        try:
            result = build()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < result.nbytes + 64 * 1024, (peak, result.nbytes)


# --- RouteTrace ------------------------------------------------------------------------------------------------


def test_trace_single_turn() -> None:
    routes = _routes(5)
    trace = RouteTrace()
    trace.add(routes, start=0)
    out, captured = trace.finalize(6)
    assert captured == 5
    assert np.array_equal(out, routes)
    assert out.dtype == routes.dtype


def test_trace_turns_with_overlap_assemble_the_trajectory() -> None:
    full = _routes(12, seed=9)
    trace = RouteTrace(num_experts=16)
    trace.add(full[:4], start=0)  # turn 1: prompt + reply
    trace.add(full[2:9], start=2)  # turn 2 re-forwards rows 2..3 (e.g. a shorter prefix-cache hit)
    trace.add(full[9:9], start=9)  # an empty turn is fine
    trace.add(full[9:], start=9)
    assert trace.rows == 12
    out, captured = trace.finalize(13)
    assert out.dtype == np.uint8
    assert captured == 12
    assert np.array_equal(out, full)


def test_trace_overlap_must_agree() -> None:
    full = _routes(6)
    trace = RouteTrace()
    trace.add(full[:4], start=0)
    turn = full[2:].copy()
    turn[1, 2, 0] = (turn[1, 2, 0] + 1) % 16
    with pytest.raises(R3WireError) as info:
        trace.add(turn, start=2)
    assert info.value.field == "routes[row 1, layer 2]"
    assert "trajectory row 3" in str(info.value)
    assert trace.rows == 4  # unchanged
    trace.add(full[2:], start=2)
    assert np.array_equal(trace.finalize(6)[0], full)


def test_trace_gap_is_refused() -> None:
    trace = RouteTrace()
    with pytest.raises(R3WireError) as info:
        trace.add(_routes(2), start=1)
    assert info.value.field == "start"
    trace.add(_routes(2), start=0)
    with pytest.raises(R3WireError, match="gap"):
        trace.add(_routes(2), start=3)
    for bad in (-1, True, 1.0):
        with pytest.raises(R3WireError):
            trace.add(_routes(2), start=bad)  # type: ignore[arg-type]


def test_trace_widens_for_a_wider_turn() -> None:
    trace = RouteTrace()
    first = np.array([[[1, 2]], [[3, 4]]], dtype=np.uint8)
    second = np.array([[[3, 4]], [[300, 5]], [[7, 40000]]], dtype=np.uint16)
    trace.add(first, start=0)
    assert trace.dtype == np.uint8
    trace.add(second, start=1)
    assert trace.dtype == np.uint16
    out, _ = trace.finalize(4)
    assert out.tolist() == [[[1, 2]], [[3, 4]], [[300, 5]], [[7, 40000]]]
    trace.add(np.array([[[2**20, 1]]], dtype=np.int32), start=4)
    assert trace.dtype == np.int32
    assert trace.finalize(5)[0][:, 0, 0].tolist() == [1, 3, 300, 7, 2**20]


def test_trace_with_num_experts_keeps_its_dtype_and_bounds_ids() -> None:
    trace = RouteTrace(num_experts=300)
    assert trace.dtype == np.int16
    trace.add(np.array([[[299, 0]]], dtype=np.int64), start=0)
    assert trace.dtype == np.int16
    with pytest.raises(R3WireError) as info:
        trace.add(np.array([[[1, 300]]], dtype=np.int64), start=1)
    assert info.value.field == "routes[row 0, layer 0, slot 1]"
    with pytest.raises(R3WireError, match="top_k"):
        RouteTrace(num_experts=2).add(np.zeros((0, 1, 3), dtype=np.uint8), start=0)


def test_trace_refuses_negative_ids_and_shape_changes() -> None:
    trace = RouteTrace()
    with pytest.raises(R3WireError, match="non-negative"):
        trace.add(np.array([[[-1, 0]]], dtype=np.int8), start=0)
    trace.add(_routes(2), start=0)
    with pytest.raises(R3WireError) as info:
        trace.add(_routes(2, layers=4), start=2)
    assert info.value.field == "routes.shape"
    with pytest.raises(R3WireError):
        trace.add(np.zeros((2, 3), dtype=np.int32), start=2)


def test_trace_finalize_rules() -> None:
    trace = RouteTrace()
    with pytest.raises(R3WireError):
        trace.finalize(3)  # nothing added
    trace.add(_routes(0), start=0)
    out, captured = trace.finalize(0)
    assert out.shape == (0, 3, 2)
    assert captured == 0
    trace.add(_routes(4), start=0)
    with pytest.raises(R3WireError) as info:
        trace.finalize(3)
    assert info.value.field == "total_tokens"
    with pytest.raises(R3WireError):
        trace.finalize(-1)


def test_finalized_routes_are_not_changed_by_later_turns() -> None:
    full = _routes(9)
    trace = RouteTrace()
    for start in range(0, 6, 2):
        trace.add(full[start : start + 2], start=start)
    out, captured = trace.finalize(6)
    assert out.shape[0] == captured == 6
    snapshot = out.copy()
    trace.add(full[6:], start=6)
    assert np.array_equal(out, snapshot)
    assert np.array_equal(trace.finalize(10)[0], full)


def test_trace_composes_with_pad_routes() -> None:
    # Two trajectories of 7 and 4 tokens; each engine call returned tokens - 1 rows.
    traces = []
    for seed, tokens in ((1, 7), (2, 4)):
        full = _routes(tokens - 1, seed=seed)
        trace = RouteTrace(num_experts=16)
        trace.add(full[:3], start=0)
        trace.add(full[1:], start=1)
        traces.append((trace.finalize(tokens)[0], tokens, full))
    padded, mask = pad_routes([t[0] for t in traces], token_lengths=[t[1] for t in traces], num_experts=16)
    assert mask.tolist() == [[False] * 6 + [True], [True] * 3 + [False] * 3 + [True]]
    assert np.array_equal(padded[0, :6], traces[0][2])
    assert np.array_equal(padded[1, 3:6], traces[1][2])


def test_torch_tensor_samples() -> None:
    torch = pytest.importorskip("torch")
    samples = [torch.tensor(_routes(3)), torch.tensor(_routes(1, seed=4))]
    padded, mask = pad_routes(samples, num_experts=16)
    assert padded.dtype == np.uint8
    assert mask.tolist() == [[False] * 3, [True, True, False]]
    assert np.array_equal(padded[0], samples[0].numpy())
    trace = RouteTrace()
    trace.add(samples[0], start=0)
    assert np.array_equal(trace.finalize(3)[0], samples[0].numpy())


def test_padded_mask_and_flat_become_tensors_without_a_copy() -> None:
    torch = pytest.importorskip("torch")
    from r3wire.torch import routes_to_tensor, to_tensor

    samples = [_routes(3), _routes(1, seed=4)]
    padded, mask = pad_routes(samples, num_experts=16, token_lengths=[4, 2])
    padded_t, mask_t = to_tensor(padded), to_tensor(mask)
    assert padded_t.dtype == torch.uint8
    assert mask_t.dtype == torch.bool
    assert tuple(padded_t.shape) == padded.shape
    assert padded_t.data_ptr() == padded.ctypes.data
    assert mask_t.data_ptr() == mask.ctypes.data
    flat, cu_seqlens = pack_routes(samples, num_experts=16)
    flat_t, cu_t = routes_to_tensor(flat), to_tensor(cu_seqlens)
    assert flat_t.data_ptr() == flat.ctypes.data
    assert cu_t.dtype == torch.int64
    assert cu_t.tolist() == [0, 3, 4]
    flat_t[0, 0, 0] = 9  # one memory: a write through the tensor shows in the array
    assert flat[0, 0, 0] == 9


def test_out_may_be_a_tensor_buffer_viewed_as_numpy() -> None:
    torch = pytest.importorskip("torch")
    samples = [_routes(3), _routes(1, seed=4)]
    buffer = torch.full((2, 3, 3, 2), 99, dtype=torch.uint8)  # e.g. a pinned buffer reused every step
    pad_routes(samples, num_experts=16, out=buffer.numpy())
    expected, _ = pad_routes(samples, num_experts=16)
    assert np.array_equal(buffer.numpy(), expected)
