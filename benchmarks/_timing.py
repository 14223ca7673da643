"""Timing and the machine record shared by the benchmark scripts (run as ``python benchmarks/<script>.py``, so this
is importable)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe_machine() -> dict[str, Any]:
    """The CPU, CPU counts, memory, load average, OS and Python a benchmark ran on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024**2:.1f} GiB"
    except OSError:
        pass
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": affinity,
        "memory": memory,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        # Changes what a fresh large allocation costs (glibc.malloc.hugetlb=1: huge pages, few page faults).
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
        "transparent_hugepage": _thp_mode(),
    }


def _thp_mode() -> str | None:
    """The kernel's transparent huge page mode (the bracketed word of its sysfs setting), None where unknown."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None
