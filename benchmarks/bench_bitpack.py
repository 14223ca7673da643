"""Bit packing and the routes frame: payload size and speed on two realistic workloads.

    python benchmarks/bench_bitpack.py [--repeat N] [--json PATH]

Workloads (ids drawn uniformly: the packing cost does not depend on the distribution):
    W3  Kimi-K2-like   16384 tokens x 60 MoE layers x top-8, 384 experts -> int16 canonical, 9 bits packed
    W1  Qwen3-30B-like  8192 tokens x 48 layers x top-8, 128 experts     -> uint8 canonical, 7 bits packed

Speeds are GB/s of int16 ids (2 bytes per id, the issue's yardstick, whatever the canonical dtype), from the
median of ``--repeat`` runs; the table shows wall-clock time (median and fastest) and CPU time (median), since
the machine is shared. "kernel" rows time ``r3wire.bitpack`` alone; "envelope" and "frame" rows time the public
functions end to end (checks included; the envelope is a dict, JSON serialisation is not timed).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import r3wire
from r3wire import bitpack, decode_routes, decode_routes_frame, encode_routes, encode_routes_frame
from r3wire._base64 import BACKEND
from r3wire.schema import bits_for_num_experts

WORKLOADS: dict[str, dict[str, Any]] = {
    "W3": {"rows": 16384, "layers": 60, "top_k": 8, "num_experts": 384, "model": "Kimi-K2-like"},
    "W1": {"rows": 8192, "layers": 48, "top_k": 8, "num_experts": 128, "model": "Qwen3-30B-A3B-like"},
}


def _timed(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    """Median and best wall-clock and CPU (process) times of ``repeat`` runs, in seconds.

    CPU time is reported beside wall time because the machine is shared: it excludes time spent waiting for a
    core, but still counts page faults and everything else this process does.
    """
    fn()  # warm up: first-call allocations and page faults are not what a server sees on its millionth call
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return {"median": statistics.median(wall), "min": min(wall), "cpu_median": statistics.median(cpu)}


def _operations(ids: np.ndarray[Any, Any], num_experts: int) -> dict[str, Callable[[], object]]:
    bits = bits_for_num_experts(num_experts)
    canonical = r3wire.route_dtype(num_experts)
    packed = bitpack.pack_bits(ids, bits)
    envelope = encode_routes(ids, num_experts=num_experts, pack_bits=True)
    plain_envelope = encode_routes(ids, num_experts=num_experts)
    frame = encode_routes_frame(ids, num_experts=num_experts, pack_bits=True)
    plain_frame = encode_routes_frame(ids, num_experts=num_experts)
    assert np.array_equal(decode_routes(envelope), ids)
    assert np.array_equal(decode_routes_frame(frame), ids)
    return {
        "kernel pack": lambda: bitpack.pack_bits(ids, bits, checked=True),
        "kernel unpack": lambda: bitpack.unpack_bits(packed, ids.size, bits, canonical),
        "envelope encode packed": lambda: encode_routes(ids, num_experts=num_experts, pack_bits=True),
        "envelope decode packed": lambda: decode_routes(envelope, num_experts=num_experts),
        "envelope encode unpacked": lambda: encode_routes(ids, num_experts=num_experts),
        "envelope decode unpacked": lambda: decode_routes(plain_envelope, num_experts=num_experts),
        "frame encode packed": lambda: encode_routes_frame(ids, num_experts=num_experts, pack_bits=True),
        "frame decode packed": lambda: decode_routes_frame(frame, num_experts=num_experts),
        "frame encode unpacked": lambda: encode_routes_frame(ids, num_experts=num_experts),
        "frame decode unpacked (view)": lambda: decode_routes_frame(plain_frame, num_experts=num_experts),
    }


def run(repeat: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, spec in WORKLOADS.items():
        num_experts = spec["num_experts"]
        shape = (spec["rows"], spec["layers"], spec["top_k"])
        ids = np.random.default_rng(0).integers(0, num_experts, size=shape).astype(np.int16)
        int16_bytes = ids.size * 2
        canonical = r3wire.route_dtype(num_experts)
        packed_bytes = bitpack.packed_nbytes(ids.size, bits_for_num_experts(num_experts))
        rows = {}
        for label, fn in _operations(ids, num_experts).items():
            t = _timed(fn, repeat)
            rows[label] = {
                "median_ms": t["median"] * 1e3,
                "min_ms": t["min"] * 1e3,
                "cpu_median_ms": t["cpu_median"] * 1e3,
                "median_gbps": int16_bytes / t["median"] / 1e9,
                "cpu_median_gbps": int16_bytes / t["cpu_median"] / 1e9,
            }
        results[name] = {
            **spec,
            "ids": ids.size,
            "bits": bits_for_num_experts(num_experts),
            "canonical_dtype": str(canonical),
            "int16_bytes": int16_bytes,
            "canonical_bytes": ids.size * canonical.itemsize,
            "packed_bytes": packed_bytes,
            "ratio_vs_int16": packed_bytes / int16_bytes,
            "ratio_vs_uint8": packed_bytes / ids.size,
            "timings": rows,
        }
    return results


def _print(results: dict[str, Any]) -> None:
    for name, r in results.items():
        print(
            f"\n{name} {r['model']}: {r['rows']}x{r['layers']}x{r['top_k']} = {r['ids']} ids, "
            f"{r['num_experts']} experts -> {r['bits']} bits (canonical {r['canonical_dtype']})"
        )
        print(
            f"  payload: packed {r['packed_bytes']} B = {r['ratio_vs_int16']:.4f} x int16 ({r['int16_bytes']} B)"
            f" = {r['ratio_vs_uint8']:.4f} x uint8 ({r['ids']} B)"
        )
        print(f"  {'operation':<30} {'median ms':>10} {'min ms':>8} {'cpu ms':>8} {'GB/s':>7} {'GB/s cpu':>9}")
        for label, t in r["timings"].items():
            print(
                f"  {label:<30} {t['median_ms']:>10.2f} {t['min_ms']:>8.2f} {t['cpu_median_ms']:>8.2f} "
                f"{t['median_gbps']:>7.2f} {t['cpu_median_gbps']:>9.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per operation (default 15)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this path")
    args = parser.parse_args(argv)
    results = run(args.repeat)
    _print(results)
    if args.json:
        doc = {
            "benchmark": "bitpack",
            "r3wire": r3wire.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
            "base64_backend": BACKEND,
            "platform": platform.platform(),
            "machine": platform.machine(),
            "repeat": args.repeat,
            "workloads": results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
