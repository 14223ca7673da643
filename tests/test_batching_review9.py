"""Review 9a: alignment of routes to tokens in batching (one test per finding, each failing before its fix)."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import numpy as np
import pytest

from r3wire import R3WireError, RouteTrace, batching

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
