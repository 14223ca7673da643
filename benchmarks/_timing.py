"""Timing shared by the benchmark scripts (run as ``python benchmarks/<script>.py``, so this is importable)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``repeat`` runs, after one untimed warm-up run.

    The warm-up keeps first-touch page faults, which are expensive on these VMs, out of the measurement.
    """
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3
