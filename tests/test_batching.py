"""pad_routes / pack_routes / unpack_routes / validate_routes / RouteTrace: one test per rule."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest

import r3wire
from r3wire import (
    R3WireError,
    RouteTrace,
    decode_routes,
    pack_routes,
    pad_routes,
    pad_sequences,
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
    padded, mask = pad_routes(samples, token_lengths=[5, 2, 0, 4], side=side)  # type: ignore[arg-type]
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
    padded, mask = pad_routes(
        [_routes(1, layers=4, top_k=8), _routes(3, layers=4, top_k=8)], token_lengths=[1, 3], num_experts=16
    )
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
        pad_routes(samples, max_len=-1, side="right")


# --- pad_routes: dtype -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_experts", "expected"), [(16, "uint8"), (256, "uint8"), (257, "int16"), (40000, "int32")])
def test_num_experts_fixes_the_batch_dtype(num_experts: int, expected: str) -> None:
    for dtype in (np.uint8, np.int32, np.int64, ">u2"):
        padded, _ = pad_routes([_routes(2, dtype=dtype)], num_experts=num_experts, side="right")
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
    padded, _ = pad_routes(samples, side="right")
    assert padded.dtype == np.dtype(expected)
    assert padded.dtype.isnative
    assert np.array_equal(padded, np.stack(samples).astype(np.int64))


def test_values_that_need_the_wider_dtype_survive() -> None:
    small = np.zeros((1, 1, 2), dtype=np.uint16)
    small[0, 0] = [65535, 1]
    signed = np.array([[[-0, 32767]]], dtype=np.int16)
    padded, _ = pad_routes([small, signed], side="right")
    assert padded.dtype == np.int32
    assert padded[0, 0, 0].tolist() == [65535, 1]


def test_id_at_or_above_num_experts_names_sample_row_layer_slot() -> None:
    samples = [_routes(3), _routes(4)]
    samples[1][2, 1, 0] = 16
    with pytest.raises(R3WireError) as info:
        pad_routes(samples, num_experts=16, side="right")
    assert info.value.field == "samples[1][row 2, layer 1, slot 0]"
    assert "num_experts=16" in str(info.value)
    assert info.value.got == "16"


def test_an_id_the_fixed_dtype_cannot_hold_is_refused_not_wrapped() -> None:
    sample = np.zeros((2, 1, 2), dtype=np.int64)
    sample[1, 0] = [0, 300]
    with pytest.raises(R3WireError, match=r"samples\[0\]\[row 1, layer 0, slot 1\]"):
        pad_routes([sample], num_experts=256, side="right")  # uint8: 300 would wrap to 44


@pytest.mark.parametrize("num_experts", [None, 128])
def test_negative_ids_are_refused(num_experts: int | None) -> None:
    # NeMo-RL's -1 "missing route" has no meaning here: the mask is the only way to say "do not replay".
    sample = _routes(3, dtype=np.int8)
    sample[1, 2, 1] = -1
    sample[2, 0, 0] = -5
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(1), sample], num_experts=num_experts, side="right")
    assert info.value.field == "samples[1][row 1, layer 2, slot 1]"
    assert info.value.got == "-1"
    assert "non-negative" in str(info.value)
    assert "routes[:, moe_layers]" in str(info.value)  # -1 is a known sentinel: the message says what to do
    with pytest.raises(R3WireError):
        pack_routes([sample], num_experts=num_experts)
    sample[1, 2, 1] = 0
    with pytest.raises(R3WireError) as info:
        RouteTrace().add(sample, start=0)
    assert info.value.got == "-5"
    assert "moe_layers" not in str(info.value)  # any other negative is just out of range


def test_top_k_above_num_experts_is_refused() -> None:
    # Padding rows are arange(top_k): with top_k > num_experts they would hold invalid ids.
    with pytest.raises(R3WireError, match="top_k"):
        pad_routes([np.zeros((0, 2, 5), dtype=np.uint8)], num_experts=4, side="right")


def test_top_k_that_arange_cannot_fill_in_the_batch_dtype_is_refused() -> None:
    with pytest.raises(R3WireError, match="top_k"):
        pad_routes([np.zeros((0, 1, 257), dtype=np.uint8)], side="right")


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
        pad_routes([_routes(2), bad], side="right")
    assert info.value.field == field
    with pytest.raises(R3WireError) as info:
        pack_routes([_routes(2), bad])
    assert info.value.field == field


def test_top_k_must_be_at_least_one() -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([np.zeros((2, 3, 0), dtype=np.uint8)], side="right")
    assert info.value.field == "samples[0].shape[2]"


@pytest.mark.parametrize("samples", ["abc", b"abc", 3, None, {"a": 1}, np.int32(3), np.array(3), iter([])])
def test_samples_must_be_a_sequence(samples: Any) -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes(samples, side="right")
    assert info.value.field == "samples"


def test_num_experts_must_be_valid() -> None:
    for bad in (0, -1, 2**31 + 1, True, 3.0, "8"):
        with pytest.raises(R3WireError):
            pad_routes([_routes(1)], num_experts=bad, side="right")  # type: ignore[arg-type]
        with pytest.raises(R3WireError):
            RouteTrace(num_experts=bad)  # type: ignore[arg-type]


def test_samples_of_any_layout_are_copied_exactly() -> None:
    base = _routes(6, layers=4, top_k=3, dtype=">i4")
    readonly = base.copy()
    readonly.flags.writeable = False
    views = [base[::2], np.asfortranarray(base), base[::-1, :, ::-1], readonly]
    padded, mask = pad_routes([*views, base.tolist()], token_lengths=[3, 6, 6, 6, 6], num_experts=16)
    for i, view in enumerate([*views, base]):
        rows = view.shape[0]
        assert np.array_equal(padded[i, 6 - rows :], view)
        assert mask[i].tolist() == [True] * (6 - rows) + [False] * rows


def test_a_4d_array_is_a_batch_of_samples() -> None:
    stacked = np.stack([_routes(3, seed=1), _routes(3, seed=2)])
    padded, mask = pad_routes(stacked, num_experts=16, side="right")
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
    padded, mask = pad_routes([], side="right")
    assert padded.shape == (0, 0, 0, 0)
    assert padded.dtype == np.uint8
    assert mask.shape == (0, 0)
    padded, mask = pad_routes([], max_len=5, num_experts=300, token_lengths=[])
    assert padded.shape == (0, 5, 0, 0)
    assert padded.dtype == np.int16
    assert mask.shape == (0, 5)


def test_zero_row_samples() -> None:
    padded, mask = pad_routes([_routes(0), _routes(0)], side="right")
    assert padded.shape == (2, 0, 3, 2)
    assert mask.shape == (2, 0)
    padded, mask = pad_routes([_routes(0), _routes(2)], token_lengths=[1, 2])
    assert mask.tolist() == [[True, True], [False, False]]
    assert np.array_equal(padded[0], np.broadcast_to(np.arange(2), (2, 3, 2)))


def test_single_sample() -> None:
    sample = _routes(4, dtype=np.uint8)
    padded, mask = pad_routes([sample], side="right")
    assert padded.shape == (1, 4, 3, 2)
    assert padded.dtype == np.uint8
    assert np.array_equal(padded[0], sample)
    assert not np.shares_memory(padded, sample)
    assert not mask.any()


# --- pad_routes: out= and check= -------------------------------------------------------------------------------


def test_out_is_filled_in_place_and_stale_contents_are_overwritten() -> None:
    samples = [_routes(2), _routes(4)]
    out = np.full((2, 5, 3, 2), 99, dtype=np.uint8)
    padded, mask = pad_routes(samples, num_experts=16, max_len=5, out=out, side="right")
    assert padded is out
    expected, expected_mask = pad_routes(samples, num_experts=16, max_len=5, side="right")
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
        pad_routes([_routes(2), _routes(4)], num_experts=16, max_len=5, out=out, side="right")
    assert info.value.field == field


def test_out_must_be_writable() -> None:
    out = np.empty((1, 2, 3, 2), dtype=np.uint8)
    out.flags.writeable = False
    with pytest.raises(R3WireError, match="writable"):
        pad_routes([_routes(2)], num_experts=16, out=out, side="right")


def test_check_refuses_repeated_ids_within_a_row() -> None:
    sample = _routes(3, top_k=4)
    sample[2, 1] = [5, 7, 5, 1]
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(1, top_k=4), sample], check=True, side="right")
    assert info.value.field == "samples[1][row 2, layer 1]"
    assert "[5, 7, 5, 1]" in str(info.value)
    with pytest.raises(R3WireError):
        pack_routes([sample], check=True)
    # Without check the ids are copied as they are: distinctness costs a sort, so it is opt-in.
    padded, _ = pad_routes([sample], side="right")
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


def test_pack_with_token_lengths_lays_rows_on_the_token_batch() -> None:
    a, b = _routes(3, seed=1), _routes(1, seed=2)
    flat, cu, mask = pack_routes([a, b], token_lengths=[4, 2], num_experts=16)
    assert cu.tolist() == [0, 4, 6]  # the packed token batch's own cu_seqlens, not the rows'
    assert mask.tolist() == [False, False, False, True, False, True]
    assert np.array_equal(flat[0:3], a)
    assert np.array_equal(flat[4:5], b)
    assert (flat[mask] == [0, 1]).all()
    # The same cells as right padding, one trajectory per row of the padded batch.
    padded, padded_mask = pad_routes([a, b], token_lengths=[4, 2], side="right", num_experts=16)
    assert np.array_equal(flat[0:4], padded[0])
    assert np.array_equal(flat[4:6], padded[1, :2])
    assert np.array_equal(mask, np.concatenate([padded_mask[0], padded_mask[1, :2]]))


def test_pack_returns_a_mask_only_when_asked_for_token_positions() -> None:
    assert len(pack_routes([_routes(2)])) == 2
    assert len(pack_routes([_routes(2)], token_lengths=[2])) == 3
    assert len(pack_routes([_routes(2)], replayed=[None])) == 3


def test_pack_token_lengths_must_cover_the_rows() -> None:
    with pytest.raises(R3WireError, match=r"token_lengths\[1\] must be >= the 3 route rows of samples\[1\].*got 2"):
        pack_routes([_routes(1), _routes(3)], token_lengths=[2, 2])
    with pytest.raises(R3WireError, match=r"token_lengths must be 2 integers .*got 1"):
        pack_routes([_routes(1), _routes(3)], token_lengths=[4])
    with pytest.raises(R3WireError, match=r"num_experts must be given with fill='balanced'"):
        pack_routes([_routes(1)], token_lengths=[2], fill="balanced")


def test_replayed_rows_skip_the_checks_and_become_padding() -> None:
    sample = _routes(3, seed=4)
    sample[1] = -1  # NeMo-RL's missing route in every layer; Fireworks sends zeros there
    keep = np.array([True, False, True])
    padded, mask = pad_routes([sample], token_lengths=[4], replayed=[keep], num_experts=16, check=True)
    assert mask.tolist() == [[False, True, False, True]]
    assert np.array_equal(padded[0, [0, 2]], sample[[0, 2]])
    assert (padded[0, 1] == [0, 1]).all()
    flat, _, packed_mask = pack_routes([sample], token_lengths=[4], replayed=[keep], num_experts=16, check=True)
    assert np.array_equal(flat, padded[0])
    assert np.array_equal(packed_mask, mask[0])
    with pytest.raises(R3WireError, match=r"samples\[0\]\[row 1, layer 0, slot 0\] must be a non-negative .*replayed="):
        pad_routes([sample], token_lengths=[4], num_experts=16)


def test_replayed_errors_name_the_sample_row() -> None:
    sample = _routes(4, seed=5)
    sample[0] = 99  # not replayed: never checked
    sample[3, 2] = 50
    keep = np.array([False, True, True, True])
    with pytest.raises(
        R3WireError, match=r"samples\[0\]\[row 3, layer 2, slot 0\] must be an expert id below num_experts=16"
    ):
        pad_routes([sample], side="right", replayed=[keep], num_experts=16)
    sample[3, 2] = 7
    sample[2, 1] = [3, 3]
    with pytest.raises(R3WireError, match=r"samples\[0\]\[row 2, layer 1\] must be distinct expert ids"):
        pack_routes([sample], replayed=[keep], num_experts=16, check=True)


@pytest.mark.parametrize(
    ("replayed", "message"),
    [
        (
            [np.array([1, 0], dtype=np.int64)],
            r"replayed\[0\] must be a bool array of shape \[2\] \(True = replay the row\), got int64 \[2\]",
        ),
        ([np.array([True])], r"replayed\[0\] must be a bool array of shape \[2\].*got bool \[1\]"),
        ([None, None], r"replayed must be 1 row masks \(one per sample\), got 2"),
        ("tt", r"replayed must be a sequence of per-sample row masks .*got str"),
        (3, r"replayed must be a sequence of per-sample row masks .*got int"),
    ],
)
def test_replayed_must_be_one_bool_row_mask_per_sample(replayed: Any, message: str) -> None:
    for call in (pad_routes, pack_routes):
        with pytest.raises(R3WireError, match=message):
            call([_routes(2)], replayed=replayed, token_lengths=[2])


def test_replayed_takes_a_read_results_mask_and_a_torch_mask() -> None:
    torch = pytest.importorskip("torch")
    sample = _routes(3, seed=6)
    from_tensor = pad_routes([sample], token_lengths=[3], replayed=torch.tensor([[True, False, True]]))
    from_array = pad_routes([sample], token_lengths=[3], replayed=[np.array([True, False, True])])
    assert np.array_equal(from_tensor[0], from_array[0])
    assert np.array_equal(from_tensor[1], from_array[1])
    assert from_array[1].tolist() == [[False, True, False]]


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


def test_unpack_bounds_the_samples_before_reading_the_offsets() -> None:
    # A stride-0 cu_seqlens of zeros is valid (all samples empty) and declares any count in 8 bytes: one view per
    # entry took seconds at 2**22 and did not finish at 2**28 (review 13 #10).
    empty = np.zeros((0, 1, 1), np.uint8)
    result, peak = _peak(lambda: unpack_routes(empty, np.broadcast_to(np.int64(0), (2**40,))))
    assert isinstance(result, R3WireError)
    assert result.field == "cu_seqlens"
    assert "max_samples=1048576" in str(result)
    assert peak < 1 << 16
    assert len(unpack_routes(empty, np.zeros(5, np.int64), max_samples=4)) == 4
    with pytest.raises(R3WireError) as info:
        unpack_routes(empty, np.zeros(5, np.int64), max_samples=3)
    assert info.value.field == "cu_seqlens"
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(R3WireError) as info:
            unpack_routes(empty, [0], max_samples=bad)  # type: ignore[arg-type]
        assert info.value.field == "max_samples"
    # Decreasing uint64 offsets are found by comparison (a difference would wrap).
    with pytest.raises(R3WireError) as info:
        unpack_routes(np.zeros((3, 1, 1), np.uint8), np.array([0, 2**64 - 1, 3], dtype=np.uint64))
    assert info.value.field == "cu_seqlens[2]"


def test_unpack_accepts_int32_offsets() -> None:
    flat, cu = pack_routes([_routes(2), _routes(3)])
    parts = unpack_routes(flat, cu.astype(np.int32))
    assert [p.shape[0] for p in parts] == [2, 3]


def test_pack_and_pad_allocate_only_their_output() -> None:
    # "Copy once": converting int32 samples to uint8 must not build an int32 (or any) intermediate batch.
    samples = [_routes(400, layers=8, top_k=4, seed=i) for i in range(8)]
    builds: list[Callable[[], Array]] = [
        lambda: pack_routes(samples, num_experts=16)[0],
        lambda: pad_routes(samples, num_experts=16, side="right")[0],
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


def test_trace_checks_every_row_past_an_agreeing_overlap() -> None:
    # A call in the trace's dtype whose overlap agrees is range-checked past the overlap only (the overlap equals
    # checked rows): an invalid id there is still refused, named by its row in the call, and the trace unchanged.
    for num_experts, bad, match in ((300, -1, "non-negative"), (300, 300, "below num_experts"), (8, 8, "below")):
        routes = np.arange(8, dtype=r3wire.route_dtype(num_experts)).reshape(4, 2, 1) % 8
        trace = RouteTrace(num_experts=num_experts)
        trace.add(routes[:2], start=0)
        call = routes[1:].copy()
        call[2, 1, 0] = bad
        with pytest.raises(R3WireError, match=match) as info:
            trace.add(call, start=1)
        assert info.value.field == "routes[row 2, layer 1, slot 0]"
        assert trace.rows == 2
        trace.add(routes[1:], start=1)
        assert np.array_equal(trace.finalize(4)[0], routes)
    # Likewise token ids: those equal to recorded ones are known valid, those past them are checked.
    trace = RouteTrace(num_experts=8)
    trace.add(np.zeros((2, 1, 1), dtype=np.uint8), start=0, token_ids=np.array([5, 6, 7]))
    with pytest.raises(R3WireError) as info:
        trace.add(np.zeros((3, 1, 1), dtype=np.uint8), start=0, token_ids=np.array([5, 6, 7, -1]))
    assert info.value.field == "token_ids[3]"
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == [5, 6, 7]


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


def test_finalized_view_is_not_changed_by_later_turns() -> None:
    # 15 rows in a 16-row buffer: finalize hands out a view (an eighth or less spare), which neither appends past
    # it nor a "replace" inside it may change.
    full = _routes(17)
    trace = RouteTrace()
    trace.add(full[:8], start=0)
    trace.add(full[:15], start=0)
    out, captured = trace.finalize(15)
    assert captured == 15
    assert out.base is not None
    assert np.array_equal(out, full[:15])
    trace.add(full[14:16], start=14)
    drifted = full[:17].copy()
    drifted[3] += 1
    trace.add(drifted, start=0, on_conflict="replace")
    assert np.array_equal(out, full[:15])
    assert np.array_equal(trace.finalize(17)[0], drifted)


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
    padded, mask = pad_routes(samples, token_lengths=[3, 1], num_experts=16)
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
    pad_routes(samples, num_experts=16, out=buffer.numpy(), side="right")
    expected, _ = pad_routes(samples, num_experts=16, side="right")
    assert np.array_equal(buffer.numpy(), expected)


# --- RouteTrace: token-verified stitching (issue 13.1) -----------------------------------------------------------


def _tokens(n: int, seed: int = 0) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(0, 50_000, size=n)]


def test_trace_rows_not_replayed_are_filled_by_a_later_call_and_masked_until_then() -> None:
    tokens = [5, 6, 7, 8, 9]
    first = np.array([[[1, 2]], [[-1, -1]], [[3, 4]]], dtype=np.int16)  # row 1 not replayed (NeMo-RL's -1 there)
    trace = RouteTrace(num_experts=16)
    trace.add(first, start=0, token_ids=tokens[:4], replayed=np.array([True, False, True]))
    replayed = trace.replayed
    assert replayed is not None
    assert replayed.tolist() == [True, False, True]
    routes, _ = trace.finalize()
    assert routes[:, 0].tolist() == [[1, 2], [0, 1], [3, 4]]  # a padding row, not the payload's -1
    handed_out = routes.copy()
    # A re-prefill replays row 1 (filled in, not a conflict) and differs at row 2 (a conflict, recorded row kept).
    trace.add(np.array([[[9, 8]], [[3, 5]], [[6, 7]]]), start=1, token_ids=tokens)
    assert trace.replayed is None
    assert trace.conflicts == 1
    assert trace.finalize()[0][:, 0].tolist() == [[1, 2], [9, 8], [3, 4], [6, 7]]
    assert np.array_equal(routes, handed_out)  # what finalize handed out earlier is never written into


def test_trace_never_compares_rows_either_call_did_not_replay() -> None:
    trace = RouteTrace(num_experts=16)
    trace.add(np.array([[[1, 2]], [[3, 4]]]), start=0)
    # Without token ids a conflict raises; row 0 differs but this call did not replay it.
    trace.add(np.array([[[0, 0]], [[3, 4]], [[5, 6]]]), start=0, replayed=np.array([False, True, True]))
    assert trace.conflicts == 0
    with pytest.raises(
        R3WireError, match=r"routes\[row 1, layer 0\] must be \[5, 6\], the ids already recorded for trajectory row 2"
    ):
        trace.add(np.array([[[9, 9]], [[5, 7]]]), start=1, replayed=np.array([False, True]))
    with pytest.raises(
        R3WireError, match=r"replayed must be a bool array of shape \[2\] \(True = replay the row\), got int64 \[2\]"
    ):
        trace.add(np.array([[[1, 2]], [[3, 4]]]), start=0, replayed=np.array([1, 1]))
    with pytest.raises(
        R3WireError, match=r"routes\[row 1, layer 0, slot 1\] must be an expert id below num_experts=16, got 16"
    ):
        trace.add(np.array([[[99, 99]], [[3, 16]]]), start=0, replayed=np.array([False, True]))
    branch = trace.fork(3)
    assert branch.replayed is None
    assert branch.finalize(4)[0][:, 0].tolist() == [[1, 2], [3, 4], [5, 6]]


def test_trace_records_token_ids_and_extends_them() -> None:
    full, tokens = _routes(9), _tokens(10)
    assert RouteTrace().token_ids is None
    trace = RouteTrace(num_experts=16)
    trace.add(full[:4], start=0, token_ids=tokens[:5])  # turn 1: 5 tokens, 4 rows (the last token uncaptured)
    recorded = trace.token_ids
    assert recorded is not None
    assert recorded.dtype == np.int64
    assert recorded.tolist() == tokens[:5]
    assert not recorded.flags.writeable
    with pytest.raises(ValueError, match="WRITEABLE"):  # the recorded tokens cannot be made writeable again
        recorded.flags.writeable = True
    trace.add(full[4:], start=4, token_ids=tokens)  # turn 2: the whole conversation
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == tokens
    routes, captured = trace.finalize()  # total_tokens defaults to the recorded tokens
    assert captured == 9
    assert np.array_equal(routes, full)
    assert recorded.tolist() == tokens[:5]  # an earlier view is never rewritten


def test_trace_refuses_a_call_whose_tokens_differ_naming_position_and_tokens() -> None:
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace(num_experts=16)
    trace.add(full[:4], start=0, token_ids=tokens[:5])
    edited = [*tokens[:3], tokens[3] + 1, *tokens[4:]]  # a re-tokenized history: position 3 changed
    with pytest.raises(R3WireError) as info:
        trace.add(full[4:], start=4, token_ids=edited)
    assert info.value.field == "token_ids[3]"
    assert f"must be {tokens[3]}, the token recorded at trajectory position 3" in str(info.value)
    assert str(info.value).endswith(f"got {tokens[3] + 1}")
    assert trace.rows == 4
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == tokens[:5]


def test_trace_routes_must_fit_inside_the_calls_tokens() -> None:
    trace = RouteTrace()
    with pytest.raises(R3WireError) as info:
        trace.add(_routes(5), start=0, token_ids=_tokens(4))  # 5 rows for 4 tokens
    assert info.value.field == "routes"
    trace.add(_routes(4), start=0, token_ids=_tokens(4))  # rows == tokens is allowed (a prefill of the prompt)
    with pytest.raises(R3WireError, match="start=2"):
        trace.add(_routes(3), start=2, token_ids=_tokens(4))


def test_trace_verifies_every_call_or_none() -> None:
    verified = RouteTrace()
    verified.add(_routes(2), start=0, token_ids=_tokens(3))
    with pytest.raises(R3WireError) as info:
        verified.add(_routes(1), start=2)
    assert info.value.field == "token_ids"
    plain = RouteTrace()
    plain.add(_routes(2), start=0)
    with pytest.raises(R3WireError) as info:
        plain.add(_routes(1), start=2, token_ids=_tokens(3))
    assert info.value.field == "token_ids"
    with pytest.raises(R3WireError) as info:
        plain.common_prefix(_tokens(3))
    assert info.value.field == "trace"
    with pytest.raises(R3WireError) as info:
        plain.finalize()
    assert info.value.field == "total_tokens"


@pytest.mark.parametrize("bad", [[1.0, 2.0], [[1, 2]], "12", np.array([2**63], dtype=np.uint64), None])
def test_trace_token_ids_must_be_a_1d_integer_sequence(bad: Any) -> None:
    trace = RouteTrace()
    if bad is None:
        assert trace.common_prefix([]) == 0
        return
    with pytest.raises(R3WireError) as info:
        trace.add(_routes(1), start=0, token_ids=bad)
    assert info.value.field is not None
    assert info.value.field.startswith("token_ids")


def test_common_prefix_and_fork_follow_the_longest_matching_prefix() -> None:
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace(num_experts=16)
    trace.add(full, start=0, token_ids=tokens)
    assert trace.common_prefix(tokens) == 10
    assert trace.common_prefix(tokens[:6]) == 6
    assert trace.common_prefix([*tokens[:6], int(tokens[6]) + 1, *tokens[7:]]) == 6
    assert trace.common_prefix([*tokens, 7, 8]) == 10
    # A branch that rewrote everything after token 6 (a compacted or edited history).
    branch_tokens = [*tokens[:6], *_tokens(5, seed=9)]
    branch_routes = _routes(10, seed=5)
    branch_routes[:6] = full[:6]  # the shared prefix was routed identically
    keep = trace.common_prefix(branch_tokens)
    branch = trace.fork(keep)
    assert branch.rows == 6
    assert branch.token_ids is not None
    assert branch.token_ids.tolist() == tokens[:6]
    branch.add(branch_routes[6:], start=6, token_ids=branch_tokens)
    assert np.array_equal(branch.finalize()[0], branch_routes)
    # The original is untouched, and still refuses the branch's tokens.
    assert np.array_equal(trace.finalize()[0], full)
    with pytest.raises(R3WireError, match=r"token_ids\[6\]"):
        trace.add(branch_routes[6:], start=6, token_ids=branch_tokens)


def test_fork_keeps_tokens_past_the_rows_and_refuses_too_many() -> None:
    full, tokens = _routes(4), _tokens(5)
    trace = RouteTrace()
    trace.add(full, start=0, token_ids=tokens)
    branch = trace.fork(5)  # every token, the 4 rows recorded at them
    assert branch.rows == 4
    assert branch.token_ids is not None
    assert len(branch.token_ids) == 5
    with pytest.raises(R3WireError) as info:
        trace.fork(6)
    assert info.value.field == "rows"
    plain = RouteTrace()
    plain.add(full, start=0)
    assert plain.fork(2).rows == 2
    assert plain.fork(2).token_ids is None
    assert RouteTrace().fork(0).rows == 0


# --- RouteTrace: conflicts (issue 13.2) -------------------------------------------------------------------------


def _drifted(full: Array, rows: list[int]) -> Array:
    """``full`` with the given rows re-routed (a re-prefill that was not batch-invariant)."""
    other: Array = full.copy()
    for row in rows:
        other[row, 0] = (other[row, 0] + 1) % 16
    return other


@pytest.mark.parametrize("policy", [None, "keep"])
def test_conflicts_keep_the_recorded_rows_when_tokens_prove_alignment(policy: Any) -> None:
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace(num_experts=16)
    trace.add(full[:5], start=0, token_ids=tokens[:6])
    second = _drifted(full, [1, 3])
    trace.add(second[:9], start=0, token_ids=tokens, on_conflict=policy)
    assert trace.conflicts == 2
    assert np.array_equal(trace.finalize()[0], full)  # recorded rows 1 and 3 kept; rows 5.. from the second call


def test_conflicts_replace_takes_the_new_rows_and_never_changes_a_finalized_array() -> None:
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace(num_experts=16)
    trace.add(full, start=0, token_ids=tokens)
    finalized, _ = trace.finalize()
    snapshot = finalized.copy()
    second = _drifted(full, [2])
    trace.add(second[2:5], start=2, token_ids=tokens, on_conflict="replace")
    assert trace.conflicts == 1
    assert np.array_equal(finalized, snapshot)
    assert np.array_equal(trace.finalize()[0], second)


def test_a_replace_that_cannot_copy_the_finalized_buffer_changes_nothing() -> None:
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace(num_experts=16)
    trace.add(full, start=0, token_ids=tokens)
    finalized, _ = trace.finalize()  # a view of the buffer: "replace" must copy it first
    snapshot = finalized.copy()

    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError

    with patch("r3wire.batching.np.empty", no_memory), pytest.raises(R3WireError) as info:
        trace.add(_drifted(full, [2])[2:5], start=2, token_ids=tokens, on_conflict="replace")
    assert info.value.field == "trace"
    assert trace.conflicts == 0  # counted only once the copy exists
    assert np.array_equal(finalized, snapshot)
    assert np.array_equal(trace.finalize()[0], full)


@pytest.mark.parametrize(
    "values",
    [
        [[float("nan"), 2**53 + 1]],  # a NaN made the magnitude check miss the int beside it
        [[np.int64(2**53 + 1), 0.5]],  # a NumPy int compared equal to its rounded float
    ],
)
def test_ints_that_float64_rounds_are_refused_even_beside_nan_or_as_numpy_ints(values: Any) -> None:
    with pytest.raises(R3WireError, match=r"^values\[0\] must be numbers float64 holds exactly"):
        pad_sequences(values)


def test_conflicts_raise_without_token_proof_or_when_asked() -> None:
    full = _routes(9)
    trace = RouteTrace(num_experts=16)
    trace.add(full[:5], start=0)
    with pytest.raises(R3WireError) as info:
        trace.add(_drifted(full, [3])[2:], start=2)  # None without token_ids: "raise"
    assert info.value.field == "routes[row 1, layer 0]"
    assert trace.rows == 5
    assert trace.conflicts == 0
    trace.add(_drifted(full, [3])[2:], start=2, on_conflict="keep")  # the caller's explicit choice
    assert trace.conflicts == 1
    assert np.array_equal(trace.finalize(10)[0], full)
    verified = RouteTrace()
    verified.add(full[:5], start=0, token_ids=_tokens(6))
    with pytest.raises(R3WireError, match="on_conflict"):
        verified.add(_drifted(full, [0])[:6], start=0, token_ids=_tokens(7), on_conflict="raise")
    with pytest.raises(R3WireError) as info:
        verified.add(full[:5], start=0, token_ids=_tokens(6), on_conflict="newest")  # type: ignore[arg-type]
    assert info.value.field == "on_conflict"


# --- RouteTrace: prefill/decode split and the uncaptured last row (issue 13.3) ----------------------------------


def test_prefill_and_decode_pieces_assemble_through_add_and_the_last_token_stays_masked() -> None:
    prompt, completion = _tokens(6), _tokens(4, seed=1)
    tokens = prompt + completion  # 10 tokens: rows 0..8 exist, token 9 was sampled and never forwarded
    full = _routes(9)
    trace = RouteTrace(num_experts=16)
    trace.add(full[:6], start=0, token_ids=prompt)  # the prefill node: one row per prompt token
    trace.add(full[6:], start=6, token_ids=tokens)  # the decode node: rows from the first completion token on
    routes, captured = trace.finalize()
    assert captured == 9
    assert np.array_equal(routes, full)
    padded, mask = pad_routes([routes], token_lengths=[len(tokens)], num_experts=16)
    assert mask[0].tolist() == [False] * 9 + [True]
    assert padded[0, 9].tolist() == [[0, 1]] * 3  # the uncaptured row is a masked dummy, not a guess


def test_a_gap_between_pieces_raises_instead_of_being_filled() -> None:
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace()
    trace.add(full[:5], start=0, token_ids=tokens[:6])
    with pytest.raises(R3WireError, match="gap"):
        trace.add(full[6:], start=6, token_ids=tokens)  # the decode node's rows skip row 5


# --- balanced padding (issue 13.4) ------------------------------------------------------------------------------


def _padding_counts(padded: Array, mask: Array, num_experts: int) -> Array:
    """Per layer, how many padding slots each expert receives across the batch: ``[layers, num_experts]``."""
    rows = padded[mask]  # [padding rows, layers, top_k]
    return np.stack([np.bincount(rows[:, layer].ravel(), minlength=num_experts) for layer in range(rows.shape[1])])


@pytest.mark.parametrize(("num_experts", "top_k"), [(16, 2), (128, 8), (10, 4), (7, 7), (5, 1), (300, 3)])
def test_balanced_fill_spreads_padding_over_every_expert(num_experts: int, top_k: int) -> None:
    samples = [
        synthetic_routes(rows, layers=3, top_k=top_k, num_experts=num_experts, seed=rows) for rows in (0, 3, 17, 40, 2)
    ]
    padded, mask = pad_routes(samples, num_experts=num_experts, fill="balanced", token_lengths=[5, 4, 20, 41, 9])
    counts = _padding_counts(padded, mask, num_experts)
    assert counts.sum() == int(mask.sum()) * top_k * 3
    assert (counts.max(axis=1) - counts.min(axis=1) <= 1).all()
    pad_rows = padded[mask]
    assert (np.sort(pad_rows, axis=-1)[..., 1:] != np.sort(pad_rows, axis=-1)[..., :-1]).all()  # distinct
    assert int(pad_rows.max()) < num_experts
    # The captured rows are exactly as with the default fill, and the result is deterministic.
    arange_padded, arange_mask = pad_routes(samples, num_experts=num_experts, token_lengths=[5, 4, 20, 41, 9])
    assert np.array_equal(mask, arange_mask)
    assert np.array_equal(padded[~mask], arange_padded[~mask])
    again, _ = pad_routes(samples, num_experts=num_experts, fill="balanced", token_lengths=[5, 4, 20, 41, 9])
    assert np.array_equal(padded, again)


def test_balanced_fill_with_a_period_longer_than_any_run() -> None:
    # 2**31 experts and top_k 1: the ids only repeat after 2**31 padding rows, so each run is built on its own.
    samples = [np.zeros((1, 2, 1), dtype=np.int32), np.zeros((0, 2, 1), dtype=np.int32)]
    padded, mask = pad_routes(samples, num_experts=2**31, fill="balanced", token_lengths=[4, 3], side="right")
    assert padded[mask][:, 0, 0].tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert (padded[mask][:, 1] == padded[mask][:, 0]).all()


def test_arange_and_balanced_fill_rules() -> None:
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(2)], fill="balanced", side="right")
    assert info.value.field == "num_experts"
    with pytest.raises(R3WireError) as info:
        pad_routes([_routes(2)], fill="random", side="right")  # type: ignore[arg-type]
    assert info.value.field == "fill"
    with pytest.raises(R3WireError, match="top_k"):
        pad_routes([np.zeros((1, 1, 4), dtype=np.uint8)], num_experts=3, fill="balanced", side="right")


# --- pad_sequences (issue 13.5) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_pad_sequences_uses_pad_routes_layout_cell_for_cell(side: Any) -> None:
    routes = [_routes(3), _routes(0, seed=1), _routes(5, seed=2)]
    lengths = [4, 2, 6]
    token_ids = [np.arange(100 * i, 100 * i + n) for i, n in enumerate(lengths)]
    padded_routes, route_mask = pad_routes(routes, token_lengths=lengths, side=side, max_len=7)
    padded_ids, _id_mask = pad_sequences(token_ids, side=side, max_len=7, fill=-1)
    assert padded_ids.shape == (3, 7)
    assert padded_ids.dtype == np.int64
    for i, n in enumerate(lengths):
        first = 7 - n if side == "left" else 0
        assert padded_ids[i, first : first + n].tolist() == token_ids[i].tolist()
        # routes row r and token r share a cell
        for r in range(routes[i].shape[0]):
            assert padded_ids[i, first + r] == token_ids[i][r]
            assert np.array_equal(padded_routes[i, first + r], routes[i][r])
    _, row_mask = pad_sequences([np.zeros(r.shape[0]) for r in routes], token_lengths=lengths, side=side, max_len=7)
    assert np.array_equal(row_mask, route_mask)


def test_pad_sequences_offsets_place_completion_logprobs() -> None:
    prompt_lens, completion_lens = [3, 1], [2, 4]
    logprobs = [np.array([-0.5, -1.5], dtype=np.float32), np.array([-0.25, -2.0, -3.0, -4.0], dtype=np.float32)]
    lengths = [p + c for p, c in zip(prompt_lens, completion_lens, strict=True)]
    padded, mask = pad_sequences(logprobs, token_lengths=lengths, offsets=prompt_lens, side="left")
    assert padded.dtype == np.float32
    assert padded.shape == (2, 5)
    assert padded.tolist() == [[0.0, 0.0, 0.0, -0.5, -1.5], [0.0, -0.25, -2.0, -3.0, -4.0]]
    assert mask.tolist() == [[True, True, True, False, False], [True, False, False, False, False]]
    padded, _ = pad_sequences(logprobs, offsets=prompt_lens, side="right", fill=np.nan)
    assert np.isnan(padded[0, :3]).all()
    assert padded[0, 3:].tolist() == [-0.5, -1.5]
    assert padded.shape == (2, 5)


def test_pad_sequences_multi_dim_values_out_and_empty() -> None:
    topk = [np.ones((2, 3), dtype=np.float16), np.full((1, 3), 2.0, dtype=np.float32)]
    padded, _mask = pad_sequences(topk, side="right")
    assert padded.dtype == np.float32
    assert padded.shape == (2, 2, 3)
    assert padded[1].tolist() == [[2.0] * 3, [0.0] * 3]
    out = np.full((2, 2, 3), 7.0, dtype=np.float32)
    result, _ = pad_sequences(topk, side="right", out=out)
    assert result is out
    assert np.array_equal(out, padded)
    empty, empty_mask = pad_sequences([], max_len=3)
    assert empty.shape == (0, 3)
    assert empty.dtype == np.float64
    assert empty_mask.shape == (0, 3)


@pytest.mark.parametrize(
    ("values", "kwargs", "field"),
    [
        ([np.zeros(2, np.int32), np.zeros(2, np.float32)], {}, "values[1].dtype"),
        ([np.zeros(2, np.uint64), np.zeros(2, np.int64)], {}, "values[1].dtype"),
        ([np.zeros((2, 3)), np.zeros((2, 4))], {}, "values[1].shape"),
        ([np.zeros(2, "U1")], {}, "values[0].dtype"),
        ([np.float32(1.0)], {}, "values[0]"),
        ("ab", {}, "values"),
        ([np.zeros(2, np.float16)], {"fill": 0.1}, "fill"),
        ([np.zeros(2, np.uint8)], {"fill": 256}, "fill"),
        ([np.zeros(2, np.uint8)], {"fill": -1}, "fill"),
        ([np.zeros(2, np.int64)], {"fill": 0.5}, "fill"),
        ([np.zeros(2, np.int64)], {"fill": "0"}, "fill"),
        ([np.zeros(2)], {"offsets": [1], "token_lengths": [2]}, "token_lengths[0]"),
        ([np.zeros(2)], {"offsets": [-1]}, "offsets[0]"),
        ([np.zeros(2)], {"offsets": [0, 1]}, "offsets"),
        ([np.zeros(2)], {"max_len": 1}, "max_len"),
        ([np.zeros(2)], {"side": "middle"}, "side"),
        ([np.zeros(2)], {"out": np.zeros((1, 2), np.float32)}, "out.dtype"),
        ([np.zeros(2)], {"out": np.zeros((1, 3))}, "out.shape"),
    ],
)
def test_pad_sequences_errors(values: Any, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(R3WireError) as info:
        pad_sequences(values, **kwargs)
    assert info.value.field == field


# --- bounds on what batching is given (issue 11.7) --------------------------------------------------------------


def test_zero_layer_routes_from_a_decoded_payload_never_allocate_a_huge_mask() -> None:
    # A 95-byte payload: shape [2**30, 0, 8] passes any max_elements (0 elements), then made pad_routes allocate a
    # 1 GiB [1, 2**30] mask. Routes need layers >= 1, as for the decoders.
    decoded = decode_routes({"data": "", "shape": [2**30, 0, 8], "dtype": "uint8"}) if _decodes_zero_layers() else None
    sample = decoded if decoded is not None else np.empty((2**30, 0, 8), dtype=np.uint8)
    builds: list[Callable[[], object]] = [
        lambda: pad_routes([sample], side="right"),
        lambda: pack_routes([sample]),
        lambda: validate_routes([sample]),
        lambda: RouteTrace().add(sample, start=0),
        lambda: pad_sequences([sample]),
    ]
    for build in builds:
        tracemalloc.start()
        try:
            with pytest.raises(R3WireError) as info:
                build()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert info.value.field is not None
        assert info.value.field.startswith(("samples[0].shape", "routes.shape", "values[0].shape"))
        assert peak < 1 << 20


def _decodes_zero_layers() -> bool:
    # The decoders refuse 0-layer routes once issue 11.1 lands; until then this payload decodes.
    try:
        decode_routes({"data": "", "shape": [1, 0, 8], "dtype": "uint8"})
    except R3WireError:
        return False
    return True


def test_pack_routes_of_huge_row_counts_never_overflows_cu_seqlens() -> None:
    # Eight [2**60, 0, 1] arrays summed past int64 in cu_seqlens; broadcast views give such rows with layers >= 1.
    huge = np.broadcast_to(np.zeros((1, 1, 1), dtype=np.uint8), (2**60, 1, 1))
    with pytest.raises(R3WireError) as info:
        pack_routes([huge] * 8)
    # Refused by the shared shape bound, the int64 bound on the sum, or the element limit, depending on the limits.
    assert info.value.field is not None
    assert info.value.field.startswith(("samples[0].shape", "sum(rows)", "flat"))
    with pytest.raises(R3WireError) as info:
        pack_routes([np.empty((2**60, 0, 1), dtype=np.uint8)] * 8)
    assert info.value.field is not None
    assert info.value.field.startswith("samples[0].shape")


@pytest.mark.parametrize(
    "build",
    [
        lambda: pad_routes([_routes(3)], max_elements=17, side="right"),
        lambda: pad_routes([_routes(3)], token_lengths=[2**40], max_elements=2**30),
        lambda: pad_routes([_routes(1)], side="right", max_len=2**62, max_elements=2**30),
        lambda: pack_routes([_routes(3)], max_elements=17),
        lambda: validate_routes([_routes(2), _routes(1)], max_elements=17),
        lambda: validate_routes([np.broadcast_to(np.uint16(1), (2**33, 1, 2))], max_elements=2**30),
        lambda: pad_sequences([np.zeros(3)], max_len=2**50, max_elements=2**30),
        lambda: pad_sequences([np.zeros((3, 4))], max_elements=11),
    ],
)
def test_batch_outputs_respect_max_elements_before_allocating(build: Callable[[], object]) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(R3WireError, match="max_elements") as info:
            build()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert type(info.value) is R3WireError  # batching's own class, like its other errors: nothing is decoded here
    # Exactly at the limit is allowed.
    assert pad_routes([_routes(3)], max_elements=18, side="right")[0].size == 18
    assert pack_routes([_routes(3)], max_elements=18)[0].size == 18
    validate_routes([_routes(2), _routes(1)], max_elements=18)


def test_trace_respects_max_elements() -> None:
    trace = RouteTrace(max_elements=30)
    trace.add(_routes(5), start=0, token_ids=_tokens(6))  # 30 ids
    with pytest.raises(R3WireError, match="max_elements") as info:
        trace.add(_routes(6), start=0, token_ids=_tokens(7))
    assert type(info.value) is R3WireError
    assert trace.rows == 5
    with pytest.raises(R3WireError, match="max_elements") as info:
        RouteTrace(max_elements=30).add(_routes(1), start=0, token_ids=np.zeros(31, dtype=np.int64))
    assert type(info.value) is R3WireError
    with pytest.raises(R3WireError) as info:
        RouteTrace(max_elements=-1)
    assert info.value.field == "max_elements"


def test_unbounded_requests_hit_the_default_limit() -> None:
    default = r3wire.DEFAULT_MAX_ELEMENTS
    with pytest.raises(R3WireError, match="max_elements"):
        pad_routes([_routes(1)], token_lengths=[default])
    with pytest.raises(R3WireError, match="max_elements"):
        pad_sequences([np.zeros(1, np.uint8)], max_len=default + 1)
    # validate_routes builds nothing, but its distinctness sort copies each sample it reads.
    with pytest.raises(R3WireError, match="max_elements") as info:
        validate_routes([np.broadcast_to(np.uint8(1), (default, 1, 2))])
    assert info.value.field == "samples"


def test_negative_token_ids_are_refused() -> None:
    # A -1 or -100 is a padding / ignore index, never an engine's token: comparing it as a token would hide a
    # misaligned call.
    trace = RouteTrace()
    recorded = RouteTrace()
    recorded.add(_routes(2), start=0, token_ids=[5, 6, 7])
    calls: list[Callable[[], object]] = [
        lambda: trace.add(_routes(2), start=0, token_ids=[5, -100, 7]),
        lambda: recorded.common_prefix([5, -1]),
    ]
    for call in calls:
        with pytest.raises(R3WireError) as info:
            call()
        assert info.value.field == "token_ids[1]"
        assert "non-negative token id" in str(info.value)


# --- review 13: arguments and messages --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.array(["left", "right"]), np.array(["keep"]), np.array(["arange", "x"])])
def test_array_valued_choices_are_refused_by_name(value: Array) -> None:
    # `value in ("left", "right")` asks NumPy for the truth of an array: a ValueError of its own for two
    # elements, and a one-element array was accepted as if it were the string.
    sample = _routes(1)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("side", lambda: pad_routes([sample], side=value)),  # type: ignore[arg-type]
        ("side", lambda: pad_sequences([np.arange(3)], side=value)),  # type: ignore[arg-type]
        ("fill", lambda: pad_routes([sample], fill=value, side="right")),  # type: ignore[arg-type]
        ("on_conflict", lambda: RouteTrace().add(sample, start=0, on_conflict=value)),  # type: ignore[arg-type]
    ]
    for field, call in calls:
        with pytest.raises(R3WireError) as info:
            call()
        assert info.value.field == field


def test_messages_name_what_the_caller_passed() -> None:
    cases: list[tuple[Callable[[], object], str, str]] = [
        (
            lambda: pad_routes(
                [_routes(1, dtype=np.int16)], num_experts=1000, out=np.zeros((1, 1, 3, 2), ">i2"), side="right"
            ),
            "out.dtype",
            "out.dtype must be int16 in native byte order (the batch dtype), got int16 in big-endian byte order",
        ),
        (
            lambda: pad_sequences([np.ones(2)], offsets=[1], token_lengths=[2]),
            "token_lengths[0]",
            "the 3 positions (offset + values) of values[0] (a sample's values lie within",
        ),
        (lambda: pad_sequences([np.ones(2)], token_lengths=[1]), "token_lengths[0]", "the 2 values of values[0]"),
        (lambda: pad_routes([_routes(1)], token_lengths=[2, 3]), "token_lengths", "must be 1 integer (one length"),
        (lambda: RouteTrace().finalize(), "trace", "at least one add() before finalize()"),
        (lambda: RouteTrace().finalize(total_tokens=5), "trace", "at least one add() before finalize()"),
        (
            lambda: RouteTrace(num_experts=3).add(np.zeros((1, 1, 4), np.uint8), start=0),
            "routes.shape[2]",
            "a router picks top_k distinct experts",
        ),
    ]
    for call, field, text in cases:
        with pytest.raises(R3WireError) as info:
            call()
        assert info.value.field == field
        assert text in str(info.value)


# --- review 13: sizes before contents, and a failed add changes nothing -----------------------------------------


def _peak(call: Callable[[], object]) -> tuple[object, int]:
    """What ``call`` returned or raised, and the peak memory it traced."""
    assert np.ma.MaskedArray is not None  # numpy.ma loads lazily (as_numpy checks for it): not traced here
    tracemalloc.start()
    try:
        try:
            result: object = call()
        except R3WireError as exc:
            result = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_trace_checks_sizes_before_reading_or_converting() -> None:
    # A broadcast view declares any length in a few bytes: converting or reading it before the size check cost a
    # MemoryError or seconds (review 13 #3). Here the limit is small, so "before" shows as a small peak.
    long_tokens = np.broadcast_to(np.int32(5), (10**6,))
    row = _routes(1)
    refused, peak = _peak(lambda: RouteTrace(max_elements=1000).add(row, start=0, token_ids=long_tokens))
    assert isinstance(refused, R3WireError)
    assert refused.field == "token_ids"
    assert "max_elements=1000" in str(refused)
    assert peak < 1 << 16
    trace = RouteTrace()
    trace.add(_routes(2), start=0, token_ids=[5, 5, 7])
    answer, peak = _peak(lambda: trace.common_prefix(long_tokens))
    assert answer == 2
    assert peak < 1 << 16  # only the 3 tokens that can agree are converted
    # Too many rows (or tokens) is the error, not what the first of them holds.
    with pytest.raises(R3WireError) as info:
        RouteTrace(max_elements=10).add(np.full((20, 1, 1), -1, np.int16), start=0)
    assert info.value.field == "trace"
    with pytest.raises(R3WireError) as info:
        RouteTrace(max_elements=10).add(np.zeros((1, 1, 1), np.uint8), start=0, token_ids=[-1] * 11)
    assert info.value.field == "token_ids"


@pytest.mark.parametrize("failing", ["token_ids", "trace"])
@pytest.mark.parametrize("fast", [True, False])
def test_a_failed_allocation_leaves_the_trace_unchanged(failing: str, fast: bool) -> None:
    real = r3wire.batching._allocate

    def allocate(shape: tuple[int, ...], dtype: Any, field: str) -> Array:
        if field == failing:
            raise R3WireError.make(field, "an array this process can allocate", f"{list(shape)} (MemoryError)")
        return real(shape, dtype, field)

    trace = RouteTrace(num_experts=16)
    full = _routes(40, dtype=np.uint8)
    tokens = np.arange(41, dtype=np.int64)
    trace.add(full[:2], start=0, token_ids=tokens[:3])
    before = (trace.rows, trace.token_ids.tolist() if trace.token_ids is not None else None, trace.conflicts)
    routes: Any = full[2:40] if fast else full[2:40].astype(np.int64)  # the trace's dtype takes the fast path
    with patch.object(r3wire.batching, "_allocate", allocate), pytest.raises(R3WireError) as info:
        trace.add(routes, start=2, token_ids=tokens if fast else tokens.tolist())
    assert info.value.field == failing
    assert (trace.rows, trace.token_ids.tolist() if trace.token_ids is not None else None, trace.conflicts) == before
    trace.add(routes, start=2, token_ids=tokens)
    assert np.array_equal(trace.finalize()[0], full)


def test_a_failed_copy_for_a_fill_in_leaves_the_trace_unchanged() -> None:
    # The buffer finalize() handed out is copied before a later call writes a gap it fills; a failed copy must
    # leave the trace as it was, conflicts included (found by the multi-turn property under the CI profile).
    real = r3wire.batching._allocate

    def allocate(shape: tuple[int, ...], dtype: Any, field: str) -> Array:
        if field == "trace":
            raise R3WireError.make(field, "an array this process can allocate", f"{list(shape)} (MemoryError)")
        return real(shape, dtype, field)

    trace = RouteTrace(num_experts=16)
    trace.add(np.array([[[5]], [[6]], [[7]]]), start=0, token_ids=[1, 2, 3, 4], replayed=np.array([False, True, True]))
    handed_out = trace.finalize()[0].copy()
    call = np.array([[[4]], [[9]]])  # row 0 fills the gap, row 1 conflicts (kept)
    with patch.object(r3wire.batching, "_allocate", allocate), pytest.raises(R3WireError):
        trace.add(call, start=0, token_ids=[1, 2, 3, 4])
    assert trace.conflicts == 0
    replayed = trace.replayed
    assert replayed is not None
    assert replayed.tolist() == [False, True, True]
    assert np.array_equal(trace.finalize()[0], handed_out)
    trace.add(call, start=0, token_ids=[1, 2, 3, 4])
    assert trace.conflicts == 1
    assert trace.finalize()[0].ravel().tolist() == [4, 6, 7]


def test_out_overlapping_an_input_is_refused() -> None:
    # Re-padding last step's buffer with samples that are views of it: one pass wrote out[0] before reading
    # samples[1] from it, and the result was silently wrong (review 13 #5).
    out = np.arange(12, dtype=np.uint8).reshape(2, 3, 1, 2) % 16
    before = out.copy()
    with pytest.raises(R3WireError) as info:
        pad_routes([out[1], out[0]], num_experts=16, out=out, side="right")
    assert info.value.field == "out"
    assert "samples[0]" in str(info.value)
    assert np.array_equal(out, before)  # refused before anything was written
    buf = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(R3WireError) as info:
        pad_sequences([np.array([9.0, 9.0]), buf[0]], token_lengths=[3, 3], out=buf)
    assert info.value.field == "out"
    assert "values[1]" in str(info.value)
    # Copies are fine, and so is a buffer next to the samples.
    padded, _ = pad_routes([out[1].copy(), out[0].copy()], num_experts=16, out=out, side="right")
    assert np.array_equal(padded, before[::-1])
    pool = np.zeros(6)
    assert pad_sequences([pool[:3]], out=pool[3:].reshape(1, 3))[0].tolist() == [[0.0, 0.0, 0.0]]


# --- review 13: what nested lists and array subclasses become ---------------------------------------------------


def test_an_empty_list_sample_takes_the_batch_kind() -> None:
    # np.asarray([]) is float64: a trajectory with no values was refused for a float dtype nobody passed.
    padded, mask = pad_sequences([[11, 12, 13], []])
    assert padded.dtype == np.int64
    assert padded.tolist() == [[11, 12, 13], [0, 0, 0]]
    assert mask[1].all()
    assert pad_sequences([[True, False], []])[0].dtype == np.bool_
    assert pad_sequences([[], [0.5]], fill=-1)[0].tolist() == [[-1.0], [0.5]]
    assert pad_sequences([[], []])[0].dtype == np.float64  # as an empty batch: out's dtype, else float64
    assert pad_sequences([[], []], out=np.zeros((2, 0), np.int32))[0].dtype == np.int32
    with pytest.raises(R3WireError) as info:
        pad_sequences([[1, 2], [], [0.5]])
    assert info.value.field == "values[2].dtype"
    # For routes an empty list's shape is what is wrong, not NumPy's float64.
    for call, field in (
        (lambda: pad_routes([[]], side="right"), "samples[0]"),
        (lambda: pack_routes([[]]), "samples[0]"),
        (lambda: RouteTrace().add([], start=0), "routes"),
        (lambda: pad_routes([[[[]]]], side="right"), "samples[0].shape[2]"),
    ):
        with pytest.raises(R3WireError) as info:
            call()
        assert info.value.field == field
        assert "dtype" not in str(info.value)


@pytest.mark.parametrize("values", [[-100, 2**64 - 1], [-1, 2**63 + 1], [3, 2**64 - 1], [1, 2**70]])
def test_int_lists_numpy_would_round_through_float64_are_refused(values: list[int]) -> None:
    # NumPy makes these float64 (or object): pad_sequences silently stored 2**64 for 2**64 - 1.
    with pytest.raises(R3WireError) as info:
        pad_sequences([values])
    assert info.value.field == "values[0]"
    assert "integers NumPy converts exactly" in str(info.value)
    assert str(values[-1]) in str(info.value)
    with pytest.raises(R3WireError) as info:
        pad_sequences([[0.5], values])
    assert info.value.field == "values[1]"
    with pytest.raises(R3WireError) as info:
        RouteTrace().add([[[1, 2]]], start=0, token_ids=[5, *values])
    assert info.value.field == "token_ids"
    assert "integers NumPy converts exactly" in str(info.value)
    with pytest.raises(R3WireError) as info:
        pad_routes([[[[values[-1], 3]]]], side="right")
    assert info.value.field == "samples[0]"
    # A float among them: float semantics, but an int float64 cannot hold exactly is still refused.
    with pytest.raises(R3WireError) as info:
        pad_sequences([[0.5, 2**64 - 1]])
    assert info.value.field == "values[0]"
    assert pad_sequences([[0.5, 2**60]])[0].tolist() == [[0.5, 2.0**60]]
    # An explicit dtype is the caller's: np.uint64 holds 2**64 - 1 exactly.
    assert int(pad_sequences([np.array([3, 2**64 - 1], dtype=np.uint64)])[0][0, 1]) == 2**64 - 1


def test_masked_arrays_are_refused_everywhere() -> None:
    # A masked -1 would wrap to 255 in a uint8 batch and a masked 200 pass num_experts=16 (review 13 #1).
    ma: Any = np.ma  # untyped in NumPy 1.24's stubs
    masked = ma.array(np.array([[[1, -1]]], dtype=np.int16), mask=[[[False, True]]])
    calls: list[tuple[str, Callable[[], object]]] = [
        ("samples[0]", lambda: pad_routes([masked], num_experts=16, side="right")),
        ("samples[0]", lambda: pack_routes([masked], num_experts=16)),
        ("samples[0]", lambda: validate_routes([masked], num_experts=16)),
        ("routes", lambda: RouteTrace(num_experts=16).add(masked, start=0)),
        ("values[0]", lambda: pad_sequences([masked[0, 0]])),
    ]
    for field, call in calls:
        with pytest.raises(R3WireError) as info:
            call()
        assert info.value.field == field
        assert "MaskedArray" in str(info.value)


def test_left_padding_needs_token_lengths() -> None:
    # Left padding lines up the last tokens; rows taken for tokens put every row one token late beside the token
    # ids (a trajectory has one more token than rows), with matching shapes and no error.
    samples = [_routes(3), _routes(1)]
    calls: list[Callable[[], object]] = [
        lambda: pad_routes(samples),
        lambda: pad_routes(samples, side="left", num_experts=16, max_len=4),
        lambda: pad_routes([]),
        lambda: pad_sequences([np.zeros(2), np.zeros(1)], offsets=[2, 1]),
    ]
    for call in calls:
        with pytest.raises(R3WireError) as info:
            call()
        assert info.value.field == "token_lengths"
        assert "side='left'" in str(info.value)
        assert "or side='right', got None" in str(info.value)
    # What no token count can misplace: right padding, and values that cover the whole trajectory.
    _, mask = pad_routes(samples, side="right")
    assert mask.tolist() == [[False] * 3, [False, True, True]]
    padded, mask = pad_routes(samples, token_lengths=[4, 2], num_experts=16)
    assert mask.tolist() == [[False, False, False, True], [True, True, False, True]]
    ids, _ = pad_sequences([np.arange(4), np.arange(2)])
    assert ids.tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    assert np.array_equal(padded[1, 2], samples[1][0])  # row 0 beside token 0 of the 2-token trajectory


def test_trace_places_rows_from_the_end_when_start_is_none() -> None:
    # Every engine's rows end at the call's last forwarded token (the one before its last sampled token), so the
    # call's tokens say where they start: no offset for the caller to get wrong.
    full, tokens = _routes(9), _tokens(10)
    trace = RouteTrace(num_experts=16)
    trace.add(full[:4], token_ids=tokens[:5])  # a full first response: rows 0 .. 3 of 5 tokens
    assert trace.rows == 4
    trace.add(full[2:9], start=None, token_ids=tokens)  # re-sent rows 2 and 3, then the new ones
    trace.add(full[6:9], token_ids=np.array(tokens))  # a delta that overlaps (the fast path)
    routes, captured = trace.finalize()
    assert captured == 9
    assert np.array_equal(routes, full)
    assert trace.conflicts == 0

    # The engine left out the rows before the call's first generated token: refused, not stitched at row 0.
    fresh = RouteTrace(num_experts=16)
    with pytest.raises(R3WireError) as info:
        fresh.add(full[6:9], token_ids=tokens)
    assert info.value.field == "start"
    assert str(info.value).startswith("start must be <= 0, the rows recorded so far (derived with start=None as")
    assert "rows 0 .. 5 would be missing" in str(info.value)
    assert fresh.rows == 0
    assert fresh.token_ids is None

    # Rows for every token (a prefill node's) cannot end before the last token: they need start=.
    with pytest.raises(R3WireError) as info:
        fresh.add(full[:5], token_ids=tokens[:5])
    assert info.value.field == "routes"
    assert "need start=" in str(info.value)
    fresh.add(full[:5], start=0, token_ids=tokens[:5])
    assert fresh.rows == 5

    # Without token ids there is nothing to place them by.
    with pytest.raises(R3WireError) as info:
        RouteTrace().add(full[:4])
    assert info.value.field == "start"
    assert "None with token_ids" in str(info.value)

    # Errors in routes or token ids are named as with an explicit start.
    with pytest.raises(R3WireError) as info:
        RouteTrace().add(full[:4].astype(np.float32), token_ids=tokens[:5])
    assert info.value.field == "routes.dtype"
    with pytest.raises(R3WireError) as info:
        RouteTrace().add(full[:4], token_ids=[1.5] * 5)
    assert info.value.field == "token_ids"


def test_too_many_rows_for_the_tokens_says_token_ids_are_the_whole_sequence() -> None:
    # The usual cause: the completion's token ids passed where the call's whole sequence belongs.
    with pytest.raises(R3WireError) as info:
        RouteTrace().add(_routes(6), start=0, token_ids=_tokens(3))
    assert info.value.field == "routes"
    assert "prompt + completion" in str(info.value)


def test_lengths_and_offsets_may_be_integer_tensors() -> None:
    torch = pytest.importorskip("torch")
    samples = [_routes(3), _routes(1)]
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    padded, mask = pad_routes(samples, token_lengths=attention_mask.sum(-1), num_experts=16)
    expected, expected_mask = pad_routes(samples, token_lengths=[4, 2], num_experts=16)
    assert np.array_equal(padded, expected)
    assert np.array_equal(mask, expected_mask)
    values, _ = pad_sequences(
        [np.ones(2), np.ones(1)], token_lengths=torch.tensor([4, 2]), offsets=torch.tensor([2, 1])
    )
    assert values.tolist() == [[0, 0, 1, 1], [0, 0, 0, 1]]
    for bad in (torch.tensor([4.0, 2.0]), torch.tensor([[4, 2]])):
        with pytest.raises(R3WireError) as info:
            pad_routes(samples, token_lengths=bad)
        assert info.value.field == "token_lengths"


def test_a_trace_given_to_pad_sequences_is_named_with_what_to_pad_instead() -> None:
    trace = RouteTrace(num_experts=4)
    trace.add(np.zeros((2, 1, 1), dtype=np.uint8), token_ids=[1, 2, 3])
    with pytest.raises(R3WireError) as caught:
        pad_sequences([np.zeros(3), trace], side="right")
    assert caught.value.field == "values[1]"
    assert caught.value.got == "a RouteTrace"
    assert "pad_sequences([trace.token_ids, ...])" in str(caught.value.expected)


def test_a_later_call_with_other_layers_says_to_pass_the_same_layers() -> None:
    trace = RouteTrace(num_experts=4)
    trace.add(np.zeros((2, 2, 1), dtype=np.uint8), token_ids=[1, 2, 3])
    with pytest.raises(R3WireError) as caught:
        trace.add(np.zeros((3, 3, 1), dtype=np.uint8), token_ids=[1, 2, 3, 4, 5])
    assert caught.value.field == "routes.shape"
    assert "pass the same layers= as the earlier calls" in str(caught.value.expected)


def test_a_first_call_past_row_0_is_refused_with_the_placeholder_way_and_that_way_works() -> None:
    # A call whose engine skipped a cached 4-token prefix: its rows start at 4.
    tokens = list(range(10, 20))
    rows = np.arange(5 * 2, dtype=np.uint8).reshape(5, 2, 1) % 8
    trace = RouteTrace(num_experts=8)
    with pytest.raises(R3WireError) as caught:
        trace.add(rows, start=4, token_ids=tokens)
    assert caught.value.field == "start"
    assert "placeholders with replayed=False" in str(caught.value.expected)
    trace.add(np.zeros((4, 2, 1), dtype=np.uint8), start=0, token_ids=tokens[:5], replayed=np.zeros(4, dtype=bool))
    trace.add(rows, start=4, token_ids=tokens)
    padded, mask = pad_routes([trace], side="right")
    assert mask[0].tolist() == [True] * 4 + [False] * 5 + [True]  # placeholders and the last token masked
    assert np.array_equal(padded[0, 4:9], rows)
