#!/usr/bin/env python3
"""Benchmark: clamping sampled logprobs, and carrying them as an envelope or as the seed's JSON shape.

    python benchmarks/bench_logprobs.py [--n 1000000] [--repeats 7] [--json PATH]

The issue's bar: clamp_logprobs on 1M float32 logprobs at least 50x faster than a pure-Python ``math.isfinite``
loop over the same values (the loop the seed ran on the server). Prints medians; ``--json`` also writes them with
the versions of everything measured. Times are wall-clock medians on a shared machine: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from _timing import median_ms

import r3wire
from r3wire._base64 import BACKEND
from r3wire.logprobs import (
    LOGPROB_FLOOR,
    build_logprobs_content,
    clamp_logprobs,
    decode_logprobs,
    encode_logprobs,
    read_logprobs_content,
)

TARGET_RATIO = 50.0


def _python_loop(values: list[float]) -> tuple[list[float], int]:
    """The pure-Python reference: what a server does without r3wire, given the logprobs as a list."""
    out = []
    clamped = 0
    for x in values:
        if math.isfinite(x):
            out.append(x)
        else:
            out.append(LOGPROB_FLOOR)
            clamped += 1
    return out, clamped


def _logprobs(n: int, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    values = (-rng.exponential(1.5, size=n)).astype(np.float32)
    # A few bad values, as in production (about one per 42 minutes of rollouts; here far more, so both paths clamp).
    bad = rng.choice(n, size=max(1, n // 100_000), replace=False)
    values[bad] = rng.choice(np.array([np.nan, -np.inf, np.inf], dtype=np.float32), size=bad.size)
    return values


def run(n: int, repeats: int) -> dict[str, Any]:
    values = _logprobs(n)
    as_list = values.tolist()
    clamped = clamp_logprobs(values)
    reference, reference_count = _python_loop(as_list)
    assert reference_count == clamped.num_clamped
    assert np.array_equal(np.array(reference, dtype=np.float32), clamped.values)
    envelope_text = orjson.dumps(encode_logprobs(clamped.values))
    content_text = orjson.dumps(build_logprobs_content(clamped))

    slow = max(3, repeats // 2)  # the Python-level paths take ~100x longer; fewer runs keep the total short
    rows: list[tuple[str, str, float, int | None]] = [
        ("python loop (math.isfinite) on a list", "baseline", median_ms(lambda: _python_loop(as_list), slow), None),
        ("clamp_logprobs(float32 array)", "clamp", median_ms(lambda: clamp_logprobs(values), repeats), None),
        ("clamp_logprobs(list of float)", "clamp", median_ms(lambda: clamp_logprobs(as_list), slow), None),
        (
            "encode_logprobs + orjson.dumps",
            "wire",
            median_ms(lambda: orjson.dumps(encode_logprobs(clamped.values)), repeats),
            len(envelope_text),
        ),
        ("decode_logprobs(bytes)", "wire", median_ms(lambda: decode_logprobs(envelope_text), repeats), None),
        (
            "build_logprobs_content + orjson.dumps",
            "seed shape",
            median_ms(lambda: orjson.dumps(build_logprobs_content(clamped)), slow),
            len(content_text),
        ),
        (
            "read_logprobs_content(bytes)",
            "seed shape",
            median_ms(lambda: read_logprobs_content(content_text), slow),
            None,
        ),
    ]
    baseline = rows[0][2]
    results = [
        {"method": name, "group": group, "median_ms": ms, "speedup_vs_loop": baseline / ms, "payload_bytes": size}
        for name, group, ms, size in rows
    ]
    ratio = baseline / rows[1][2]
    return {
        "benchmark": "bench_logprobs",
        "n": n,
        "dtype": "float32",
        "num_non_finite": clamped.num_clamped,
        "repeats": repeats,
        "results": results,
        "clamp_speedup": ratio,
        "target_speedup": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "orjson": orjson.__version__,
            "r3wire": r3wire.__version__,
            "base64_backend": BACKEND,
        },
        "machine": {"platform": platform.platform(), "processor": platform.machine()},
    }


def _print(report: dict[str, Any]) -> None:
    print(f"{report['n']:,} float32 logprobs, {report['num_non_finite']} non-finite; medians of {report['repeats']}")
    print(f"{'method':<42} {'median ms':>10} {'vs loop':>9} {'payload':>12}")
    for row in report["results"]:
        size = f"{row['payload_bytes']:,}" if row["payload_bytes"] is not None else ""
        print(f"{row['method']:<42} {row['median_ms']:>10.2f} {row['speedup_vs_loop']:>8.1f}x {size:>12}")
    verdict = "meets" if report["meets_target"] else "MISSES"
    print(f"clamp speedup {report['clamp_speedup']:.0f}x: {verdict} the {report['target_speedup']:.0f}x target")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=1_000_000, help="number of logprobs (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of the fast paths (default 7)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    report = run(args.n, args.repeats)
    _print(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if report["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
