"""Review 9a: alignment of routes to tokens in batching (one test per finding, each failing before its fix)."""

from __future__ import annotations

import base64
import functools
import struct
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from importlib.util import find_spec
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import r3wire
from r3wire import (
    R3WireError,
    RouteTrace,
    batching,
    formats,
    pack_routes,
    pad_routes,
    pad_sequences,
    validate_routes,
)

Array = np.ndarray[Any, Any]


# --- 1: an overlap past 64 KiB given as a strided, reversed or broadcast view --------------------------------


def _overlap_views() -> list[tuple[str, Array]]:
    """Views whose reshape(-1) is a view with one non-unit (or zero) stride, each over 64 KiB."""
    rng = np.random.default_rng(0)
    wide = rng.integers(0, 8, (10000, 4, 4), dtype=np.uint8)
    column = rng.integers(0, 8, (80000, 1, 1), dtype=np.uint8)
    doubled = np.repeat(column, 2, axis=0)
    return [
        ("last axis strided", wide[..., ::2]),
        ("rows strided", doubled[::2]),
        ("rows reversed", np.ascontiguousarray(column[::-1])[::-1]),
        ("broadcast", np.broadcast_to(np.array([[1, 2], [3, 4]], np.uint8), (20000, 2, 2))),
    ]


@pytest.mark.parametrize(("name", "routes"), _overlap_views(), ids=[name for name, _ in _overlap_views()])
def test_large_overlap_given_as_a_view_is_compared(name: str, routes: Array) -> None:
    assert routes.nbytes > 1 << 16
    assert routes.nbytes % 8 == 0
    tokens = np.arange(routes.shape[0] + 1)
    trace = RouteTrace(num_experts=8)
    trace.add(routes.copy(), start=0, token_ids=tokens)
    trace.add(routes, start=0, token_ids=tokens)  # the same rows again: an overlap that agrees
    assert trace.conflicts == 0
    changed = routes.copy()
    changed[-1, 0, 0] = (int(changed[-1, 0, 0]) + 1) % 8
    trace.add(changed, start=0, token_ids=tokens)
    assert trace.conflicts == 1
    assert not batching._differs(routes.copy(), routes)
    assert batching._differs(changed, routes)


def test_large_overlap_view_without_num_experts() -> None:
    column = np.random.default_rng(1).integers(0, 8, (80000, 1, 1), dtype=np.uint8)
    for view in (np.repeat(column, 2, axis=0)[::2], np.ascontiguousarray(column[::-1])[::-1]):
        trace = RouteTrace()
        trace.add(view.copy(), start=0)
        trace.add(view, start=0)
        assert trace.rows == view.shape[0]


# --- 4: uint64 against a signed dtype is compared exactly (NumPy 1.x compares them as float64) ----------------


@pytest.mark.parametrize("order", ["uint64 first", "int64 first"])
def test_uint64_and_int64_overlap_compared_exactly(order: str) -> None:
    big = np.array([[[2**53 + 1]]], np.uint64)
    near = np.array([[[2**53]]], np.int64)
    first, second = (big, near) if order == "uint64 first" else (near, big)
    trace = RouteTrace()
    trace.add(first, start=0)
    # Compared through _unequal, which casts both sides to one exact integer dtype (NumPy 1.x would compare
    # uint64 with int64 as float64, where 2**53 + 1 equals 2**53).
    spy = patch.object(batching, "_unequal", wraps=batching._unequal)
    with spy as unequal, pytest.raises(R3WireError) as info:
        trace.add(second, start=0, on_conflict="raise")
    assert unequal.called
    assert info.value.field == "routes[row 0, layer 0]"
    trace.add(second, start=0, on_conflict="replace")
    assert trace.conflicts == 1
    assert int(trace.finalize(1)[0].ravel()[0]) == int(second.ravel()[0])


def test_unequal_is_exact_for_mixed_dtypes() -> None:
    a = np.array([2**53 + 1, 5, 2**63 - 1], np.uint64)
    b = np.array([2**53, 5, 2**63 - 1], np.int64)
    with patch.object(batching, "_promote", wraps=batching._promote) as promote:
        assert batching._unequal(a, b).tolist() == [True, False, False]
    promote.assert_called_once_with(a.dtype, b.dtype)  # cast explicitly, whatever NumPy's own promotion is
    assert batching._unequal(b, a).tolist() == [True, False, False]


# --- 2: token_lengths / offsets given as a long array are counted before they are read ------------------------


def _peak_bytes(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(R3WireError) as info:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.field in ("token_lengths", "offsets")
    assert "got 4194304" in str(info.value)
    return peak


_LONG = np.broadcast_to(np.int64(3), (1 << 22,))  # 8 bytes of data declaring 2**22 lengths
_ONE = np.zeros((2, 1, 1), np.uint8)


@pytest.mark.parametrize(
    "call",
    [
        lambda: pad_routes([_ONE], token_lengths=_LONG),
        lambda: pack_routes([_ONE], token_lengths=_LONG),
        lambda: validate_routes([_ONE], token_lengths=_LONG),
        lambda: pad_sequences([np.zeros(2)], offsets=_LONG, side="right"),
        lambda: pad_sequences([np.zeros(2)], token_lengths=_LONG),
    ],
    ids=["pad_routes", "pack_routes", "validate_routes", "pad_sequences offsets", "pad_sequences token_lengths"],
)
def test_long_lengths_array_refused_before_it_is_read(call: Callable[[], object]) -> None:
    # A list of 2**22 ints would take over 100 MiB: the count is compared with the array's shape first.
    assert _peak_bytes(call) < 1 << 20


def test_long_lengths_array_refused_with_trace_samples() -> None:
    trace = RouteTrace(num_experts=8)
    trace.add(_ONE, start=0, token_ids=[1, 2, 3])
    assert _peak_bytes(lambda: pad_routes([trace], token_lengths=_LONG)) < 1 << 20


# --- 5: a batch given as one array is bounded by its shape before any sample is converted ---------------------


_MANY = 100_000


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("_as_routes", lambda s: pad_routes(s, side="right", max_elements=10)),
        ("_as_routes", lambda s: pack_routes(s, max_elements=10)),
        ("_as_routes", lambda s: validate_routes(s, max_elements=10)),
        ("_as_routes", lambda s: pad_routes(s, token_lengths=[1, 1, 1])),
        ("_as_routes", lambda s: pack_routes(s, token_lengths=np.ones(3, np.int64))),
        ("_as_values", lambda s: pad_sequences(s[:, :, 0, 0], side="right", max_elements=10)),
        ("_as_values", lambda s: pad_sequences(s[:, :, 0, 0], offsets=[0, 0], side="right")),
    ],
)
def test_array_batch_bounded_before_samples_are_converted(name: str, call: Callable[[Array], object]) -> None:
    samples = np.broadcast_to(np.uint8(0), (_MANY, 1, 1, 1))  # one byte declaring 10**5 samples
    with patch.object(batching, name, wraps=getattr(batching, name)) as convert, pytest.raises(R3WireError) as info:
        call(samples)
    assert info.value.field in ("samples", "values", "token_lengths", "offsets")
    assert convert.call_count == 0


def test_empty_array_batch_of_many_samples_is_bounded() -> None:
    # No element at all, yet 2**31 samples to convert one by one: held to max_elements through its non-zero
    # dimensions, as every empty shape is.
    samples = np.empty((1 << 31, 0, 1, 1), np.uint8)
    with patch.object(batching, "_as_routes", wraps=batching._as_routes) as convert:
        with pytest.raises(R3WireError) as info:
            pad_routes(samples, side="right")
        with pytest.raises(R3WireError):
            pad_sequences(samples[:, :, 0, 0], side="right")
    assert info.value.field == "samples"
    assert convert.call_count == 0


def test_array_batch_within_bounds_still_pads() -> None:
    samples = np.broadcast_to(np.arange(2, dtype=np.uint8), (3, 2, 1, 2))
    padded, mask = pad_routes(samples, token_lengths=np.array([3, 3, 3]), num_experts=4)
    assert padded.shape == (3, 3, 1, 2)
    assert mask[:, :2].sum() == 0
    values, vmask = pad_sequences(np.ones((2, 2)), offsets=np.array([1, 0]), token_lengths=[3, 3])
    assert values.tolist() == [[0, 1, 1], [1, 1, 0]]
    assert vmask.tolist() == [[True, False, False], [False, False, True]]


# --- 3: rows a format places from token 0 go there, whatever token_ids the caller gives -----------------------


def _truth() -> Array:
    rng = np.random.default_rng(0)
    truth: Array = np.stack([np.stack([rng.permutation(16)[:2] for _ in range(2)]) for _ in range(20)])
    return truth.astype(np.uint8)


_TRAJECTORY = list(range(100, 116))  # the finished 16-token trajectory
_ZSTD = pytest.mark.skipif(find_spec("zstandard") is None, reason="fireworks-r3v1 needs zstandard")


def _fireworks(rows: Array, form: str, mask: Array | None = None) -> Any:
    if form == "fireworks-matrices" or mask is not None:
        payload = formats.write(rows, format=form, mask=mask)
    else:
        # r3wire writes rows from 0 as SUFFIX from token 1; an ALL payload, built by hand, holds token 0's entry
        # too (no forward pass produced it: the reader skips it) and then each token's, the rows of positions 0 ..
        zstandard = pytest.importorskip("zstandard")
        body = np.concatenate([np.full((1, 2, 2), 15, dtype=np.uint8), rows]).tobytes()
        n = rows.shape[0] + 1
        header = struct.pack("<4sBBBBIIIIQ", b"R3V1", 1, 0, 1, 1, n, n, 0, 0, len(body))
        payload = base64.b64encode(zstandard.ZstdCompressor().compress(header + body)).decode()
        if form == "fireworks-trace":
            payload = {"manifest": {"PayloadVersion": "r3/v1", "Compression": "zstd"}, "data": payload}
    return formats.read(payload, format=form, num_layers=2, top_k=2)


@pytest.mark.parametrize(
    ("form", "masked"),
    [
        pytest.param("fireworks-r3v1", False, marks=_ZSTD, id="r3v1 ALL"),
        pytest.param("fireworks-r3v1", True, marks=_ZSTD, id="r3v1 BITMAP"),
        pytest.param("fireworks-trace", False, marks=_ZSTD, id="trace ALL"),
        pytest.param("fireworks-matrices", False, id="matrices"),
        pytest.param("fireworks-matrices", True, id="matrices with nulls"),
    ],
)
def test_fireworks_rows_land_at_their_true_positions(form: str, masked: bool) -> None:
    """The review's repro: turn 2's payload holds rows 0..12; the caller passes the whole 16-token trajectory."""
    truth = _truth()
    trace = RouteTrace(num_experts=16)
    trace.add(truth[:7], token_ids=_TRAJECTORY[:8])  # turn 1: 8 tokens, 7 rows
    sent = np.ones(13, dtype=bool)
    if masked:
        sent[[2, 9]] = False  # rows the engine did not replay (zeros in the payload)
    result = _fireworks(truth[:13], form, sent if masked else None)
    assert result.start is None
    if form == "fireworks-matrices":
        # A matrices list says nothing of where it starts (review 11b: Fireworks also makes completion-only ones):
        # with more tokens than its call's it is placed only where the caller says.
        with pytest.raises(R3WireError) as caught:
            trace.add_result(result, token_ids=_TRAJECTORY)
        assert caught.value.field == "start"
        assert trace.rows == 7
        trace.add_result(result, token_ids=_TRAJECTORY, start=0)
    else:
        trace.add_result(result, token_ids=_TRAJECTORY)  # 16 tokens: more than the call's; rows still from 0
    routes, captured = trace.finalize()  # at the 16 recorded tokens
    assert captured == 13
    assert trace.conflicts == 0
    replayed = np.ones(13, dtype=bool) if trace.replayed is None else trace.replayed
    assert replayed.tolist() == [*[True] * 7, *sent[7:].tolist()]  # turn 1 replayed rows 0 .. 6
    assert [p for p in range(13) if replayed[p] and not np.array_equal(routes[p], truth[p])] == []
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == _TRAJECTORY


@pytest.mark.parametrize(
    "form",
    [
        pytest.param("fireworks-r3v1", marks=_ZSTD),
        pytest.param("fireworks-trace", marks=_ZSTD),
        "fireworks-matrices",
    ],
)
def test_fireworks_rows_refused_where_the_tokens_cannot_hold_them(form: str) -> None:
    truth = _truth()
    result = _fireworks(truth[:13], form)
    trace = RouteTrace(num_experts=16)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=_TRAJECTORY[:12])  # 12 tokens for rows 0 .. 12
    assert caught.value.field == "token_ids"
    assert caught.value.got == "12 token ids"
    if result.total_tokens is not None:
        assert "result.total_tokens=14" in str(caught.value)  # 13 rows: positions 0 .. 12 of 14 tokens
    else:
        assert "rows 0 .. 12" in str(caught.value)
    assert trace.rows == 0
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=_TRAJECTORY, start=2)  # not where the format puts row 0, or a gap
    assert caught.value.field == "start"
    # r3/v1 rows are token positions: any other start is refused; a matrices list goes where start says, so start=2
    # on an empty trace leaves a gap.
    assert ("None or 0" if form != "fireworks-matrices" else "without a gap") in str(caught.value)
    # One more token than rows in every form: the last token has no forward pass (r3/v1 counts it in its
    # total_tokens; a matrices list that reached it would still hold token 0's entry, and is refused).
    if form == "fireworks-matrices":
        with pytest.raises(R3WireError) as caught:
            trace.add_result(result, token_ids=_TRAJECTORY[:13], start=0)
        assert caught.value.field == "start"
        assert "routing_matrices[1:]" in str(caught.value)
    trace.add_result(result, token_ids=_TRAJECTORY[:14], start=0)
    assert trace.rows == 13


@_ZSTD
def test_total_tokens_bounds_the_tokens_given_for_a_suffix_payload() -> None:
    truth = _truth()
    payload = formats.write(truth[4:10], format="fireworks-r3v1", start=4, total_tokens=14)
    result = formats.read(payload, format="fireworks-r3v1", num_layers=2, top_k=2)
    assert (result.start, result.total_tokens) == (4, 14)
    trace = RouteTrace(num_experts=16)
    trace.add(truth[:4], start=0, token_ids=_TRAJECTORY[:5])
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=_TRAJECTORY[:12])  # holds rows 4 .. 9, not the 14 tokens declared
    assert caught.value.field == "token_ids"
    assert "result.total_tokens=14" in str(caught.value)
    trace.add_result(result, token_ids=_TRAJECTORY[:14])
    assert np.array_equal(trace.finalize()[0], truth[:10])


def test_a_known_start_bounds_the_tokens_given() -> None:
    # A hand-built result with its own start (prime-rl's sidecar): rows 3 .. 5 need 6 tokens.
    truth = _truth()
    result = formats.ReadResult(routes=truth[3:6], format="prime-rl", start=3)
    trace = RouteTrace(num_experts=16)
    trace.add(truth[:3], start=0, token_ids=_TRAJECTORY[:4])
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=_TRAJECTORY[:5])
    assert caught.value.field == "token_ids"
    assert "rows 3 .. 5" in str(caught.value)
    assert "result.start=3" in str(caught.value)
    trace.add_result(result, token_ids=_TRAJECTORY[:7])
    assert np.array_equal(trace.finalize()[0], truth[:6])


# --- 6: a NumPy scalar fill is compared exactly with what is stored --------------------------------------------


@pytest.mark.parametrize(
    ("fill", "dtype"),
    [
        (np.int64(2**53 + 1), np.float64),
        (np.uint64(2**64 - 1), np.float64),
        (np.int64(2**63 - 1), np.float64),
        (np.int32(2**24 + 1), np.float32),
        (np.float64(0.1), np.float32),
        (np.float64(2.5), np.int64),
    ],
)
def test_numpy_fill_not_stored_exactly_is_refused(fill: Any, dtype: Any) -> None:
    with pytest.raises(R3WireError) as caught:
        pad_sequences([np.array([1], dtype=dtype)], token_lengths=[2], fill=fill)
    assert caught.value.field == "fill"
    assert f"exactly representable in {np.dtype(dtype).name}" in str(caught.value)


@pytest.mark.parametrize(
    ("fill", "dtype"),
    [
        (np.int64(2**53), np.float64),
        (np.uint8(3), np.float64),
        (np.float32(0.1), np.float64),
        (np.bool_(True), np.bool_),  # a bool fill only for bool values
        (np.float64(5.0), np.int64),
        (np.uint64(2**64 - 1), np.uint64),
        (np.float64("nan"), np.float32),
    ],
)
def test_numpy_fill_stored_exactly_is_taken(fill: Any, dtype: Any) -> None:
    padded, _ = pad_sequences([np.array([1], dtype=dtype)], token_lengths=[2], fill=fill)
    stored = padded[0, 1].item()
    expected = fill.item()
    assert stored == expected or (np.isnan(stored) and np.isnan(expected))


# --- 7: check= is a bool -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.array([True, False]), np.array(True), "no", None, 1, np.empty(0, dtype=object)])
@pytest.mark.parametrize("call", [pad_routes, pack_routes])
def test_check_must_be_a_bool(call: Callable[..., object], value: object) -> None:
    with pytest.raises(R3WireError) as caught:
        call([np.zeros((2, 1, 1), np.uint8)], token_lengths=[3], check=value)
    assert caught.value.field == "check"
    assert "a bool" in str(caught.value)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)])
def test_check_takes_bools(value: object) -> None:
    repeated = np.array([[[1, 1]]], np.uint8)
    if value:
        with pytest.raises(R3WireError, match="distinct expert ids"):
            pad_routes([repeated], token_lengths=[2], check=value)  # type: ignore[arg-type]
    else:
        pad_routes([repeated], token_lengths=[2], check=value)  # type: ignore[arg-type]


# --- 8: an out= whose cells alias each other -------------------------------------------------------------------


def test_out_with_a_zero_stride_is_refused() -> None:
    a = np.array([[[1, 2]], [[3, 4]]], np.uint8)
    b = np.array([[[5, 6]]], np.uint8)
    row = np.zeros((3, 1, 2), np.uint8)
    out = as_strided(row, (2, 3, 1, 2), (0, *row.strides), writeable=True)
    with pytest.raises(R3WireError) as caught:
        pad_routes([a, b], token_lengths=[3, 3], num_experts=8, out=out)
    assert caught.value.field == "out"
    assert "zero stride" in str(caught.value)
    assert "axis 0" in str(caught.value)
    cells = np.zeros(3, np.float64)
    grid = as_strided(cells, (2, 3), (cells.strides[0], 0), writeable=True)
    with pytest.raises(R3WireError) as caught:
        pad_sequences([np.ones(3), np.ones(2)], out=grid, max_len=3, side="right")
    assert caught.value.field == "out"
    assert "axis 1" in str(caught.value)


def test_out_with_a_zero_stride_on_a_single_cell_axis_is_taken() -> None:
    cells = np.zeros((3, 1, 2), np.uint8)
    out = as_strided(cells, (1, 3, 1, 2), (0, *cells.strides), writeable=True)  # one sample: nothing aliases
    padded, mask = pad_routes([np.array([[[1, 2]]], np.uint8)], token_lengths=[2], max_len=3, num_experts=8, out=out)
    assert padded is out
    assert padded[0, :, 0].tolist() == [[0, 1], [1, 2], [0, 1]]
    assert mask.tolist() == [[True, False, True]]
    empty = as_strided(np.zeros(1, np.float64), (0, 4), (0, 0), writeable=True)
    values, _ = pad_sequences([], out=empty, max_len=4)
    assert values.shape == (0, 4)


# --- 9: common_prefix converts a list only as far as the recorded tokens --------------------------------------


def _three_tokens() -> RouteTrace:
    trace = RouteTrace(num_experts=8)
    trace.add(np.zeros((2, 1, 1), np.uint8), start=0, token_ids=[1, 2, 3])
    return trace


@pytest.mark.parametrize(
    "given",
    [[1, 2, 3, 2**64], (1, 2, 3, -5), [1, 2, 3, "x"], [1, 2, 3, [4, 5]], range(1, 10**12)],
    ids=["past uint64", "negative", "a string", "nested", "a huge range"],
)
def test_common_prefix_reads_no_token_past_the_recorded_ones(given: Any) -> None:
    assert _three_tokens().common_prefix(given) == 3
    assert _three_tokens().common_prefix([1, 9, 3, given[3]]) == 1  # differs before the unread token


def test_common_prefix_still_checks_the_compared_tokens() -> None:
    trace = _three_tokens()
    for bad, field in (([1, -2, 3], "token_ids[1]"), ([1, "x"], "token_ids[1]"), ("123", "token_ids")):
        with pytest.raises(R3WireError) as caught:
            trace.common_prefix(bad)
        assert caught.value.field == field
    assert trace.common_prefix(np.array([1, 2, 3, 4], dtype=np.uint64)) == 3
    assert trace.common_prefix([1, 2]) == 2


# --- 10: pad_sequences: out's dtype where no sample has one; [] as an empty trajectory with trailing dims -------


@pytest.mark.parametrize("dtype", [object, complex, "M8[s]", "V4", "U2"])
@pytest.mark.parametrize("values", [[[], []], []], ids=["empty lists", "no sample"])
def test_out_dtype_must_be_bool_integer_or_float_without_typed_samples(values: list[Any], dtype: Any) -> None:
    out = np.zeros((len(values), 3), dtype=dtype)
    with pytest.raises(R3WireError) as caught:
        pad_sequences(values, out=out, max_len=3)
    assert caught.value.field == "out.dtype"
    assert caught.value.got == str(np.dtype(dtype))


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.uint64, np.float16])
def test_out_dtype_taken_without_typed_samples(dtype: Any) -> None:
    out = np.empty((2, 3), dtype=dtype)
    padded, mask = pad_sequences([[], []], out=out, max_len=3, fill=1)
    assert padded is out
    assert padded.tolist() == [[1, 1, 1]] * 2
    assert mask.all()


@pytest.mark.parametrize("order", ["empty last", "empty first"])
def test_an_empty_list_stands_for_no_values_with_the_others_trailing_shape(order: str) -> None:
    values: list[Any] = [np.arange(6, dtype=np.int8).reshape(2, 3), []]
    if order == "empty first":
        values.reverse()
    padded, mask = pad_sequences(values, side="right", fill=-1)
    assert padded.shape == (2, 2, 3)
    assert padded.dtype == np.int8
    full = 0 if order == "empty last" else 1
    assert padded[full].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert padded[1 - full].tolist() == [[-1, -1, -1]] * 2
    assert mask[full].tolist() == [False, False]
    assert mask[1 - full].tolist() == [True, True]


def test_a_real_trailing_shape_disagreement_names_the_sample_and_the_one_it_differs_from() -> None:
    with pytest.raises(R3WireError) as caught:
        pad_sequences([[], np.zeros((2, 3)), [], np.zeros((1, 4))], side="right")
    assert caught.value.field == "values[3].shape"
    assert "(the trailing shape of values[1])" in str(caught.value)
    assert caught.value.got == "[1, 4]"
    with pytest.raises(R3WireError) as caught:
        pad_routes([np.zeros((1, 2, 2), np.uint8), np.zeros((1, 2, 3), np.uint8)], side="right")
    assert caught.value.field == "samples[1].shape"
    assert "(layers and top_k of samples[0])" in str(caught.value)


@pytest.mark.parametrize("off_by", [-2, -1, 1])
def test_a_delta_whose_start_disagrees_with_the_calls_tokens_is_refused(off_by: int) -> None:
    # Review 9d, 1: a prime-rl sidecar's rows run from its start to the call's last forwarded token. A start off
    # by one (rows labelled with the wrong offset) was stitched in: one token late with 0 conflicts, or early with 1.
    truth = _truth()
    call = _TRAJECTORY[:14]  # rows 0 .. 12 are routed; token 13 is the last sampled one
    trace = RouteTrace(num_experts=16)
    trace.add(truth[:7], start=0, token_ids=_TRAJECTORY[:8])
    first = 7 + off_by  # the rows really are positions 7 .. 12, labelled as starting at `first`
    side = formats.write(truth[7:13] if off_by >= 0 else truth[first:13][: 13 - 7], format="prime-rl", start=first)
    result = formats.read(side, format="prime-rl")
    assert result.start == first
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=call)
    assert caught.value.field == "result.start"
    assert f"got {first}" in str(caught.value)
    assert trace.rows == 7  # unchanged
    right = formats.read(formats.write(truth[7:13], format="prime-rl", start=7), format="prime-rl")
    trace.add_result(right, token_ids=call)
    assert np.array_equal(trace.finalize()[0], truth[:13])
    assert trace.conflicts == 0


def test_a_multi_dimensional_memoryview_is_not_a_sequence_of_counts() -> None:
    # Iterating one raises NotImplementedError ("multi-dimensional sub-views"), which escaped (review 10a).
    view = np.zeros((2, 3), np.uint8).data
    sample = np.zeros((2, 1, 2), np.uint8)
    calls: list[Callable[[], object]] = [
        lambda: pad_routes([sample], token_lengths=view),
        lambda: pack_routes([sample], token_lengths=view),
        lambda: validate_routes([sample], token_lengths=view),
        lambda: pad_sequences([np.zeros(2)], offsets=view),
    ]
    for call in calls:
        with pytest.raises(R3WireError, match="must be a sequence of integers"):
            call()


def test_a_bool_fill_is_for_bool_values_only() -> None:
    # fill=True padded floats with 1.0 without a word (review 10a); bool values still take a bool fill.
    with pytest.raises(R3WireError, match="not a bool") as caught:
        pad_sequences([np.array([1.0, 2.0]), np.array([3.0])], side="right", fill=True)
    assert caught.value.field == "fill"
    padded, _ = pad_sequences([np.array([True]), np.array([True, False])], fill=False)
    assert padded.tolist() == [[False, True], [True, False]]


class _Rows(Sequence[Any]):
    """A caller's own sequence (not a list or tuple), read through its own iteration; ``broken`` makes it raise."""

    def __init__(self, items: list[Any], *, broken: bool = False) -> None:
        self._items, self._broken = items, broken

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        if self._broken:
            raise TypeError("cannot iterate")
        return iter(self._items)


_R = np.array([[[0, 1]], [[1, 0]]], dtype=np.uint8)
_SEQUENCE_CALLS: dict[str, tuple[str, Callable[[Any], object], list[Any]]] = {
    "pad_routes samples": ("samples", functools.partial(r3wire.pad_routes, side="right"), [_R, _R]),
    "pack_routes samples": ("samples", r3wire.pack_routes, [_R]),
    "pad_sequences values": ("values", functools.partial(r3wire.pad_sequences, side="right"), [np.zeros(2)]),
    "token_lengths": ("token_lengths", lambda s: r3wire.pad_routes([_R, _R], token_lengths=s), [3, 2]),
    "replayed": ("replayed", lambda s: r3wire.pad_routes([_R], side="right", replayed=s), [np.array([True, False])]),
    "clamp_logprobs": ("values", r3wire.clamp_logprobs, [-0.5, None, -1.0]),
    "encode_logprobs": ("logprobs", r3wire.encode_logprobs, [-0.5, -1.0]),
}


@pytest.mark.parametrize("name", sorted(_SEQUENCE_CALLS))
def test_a_callers_own_sequence_is_read_through_its_iteration_and_a_raising_one_is_refused(name: str) -> None:
    # A Sequence that is not a list or tuple is read as it iterates; one whose __iter__ raised leaked its
    # TypeError from the batching and logprobs functions. Now it is refused by name, its exception chained.
    field, call, items = _SEQUENCE_CALLS[name]
    assert repr(call(_Rows(items))) == repr(call(list(items)))
    with pytest.raises(R3WireError) as info:
        call(_Rows(items, broken=True))
    assert info.value.field == field
    assert "_Rows whose __iter__ raised TypeError('cannot iterate')" in str(info.value)
    assert isinstance(info.value.__cause__, TypeError)
