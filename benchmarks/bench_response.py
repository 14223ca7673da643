"""Whole responses at scale: r3wire.dumps / iter_dumps / loads against a memcpy of the int32 source, same run.

    python benchmarks/bench_response.py                 # table on stdout (about a minute)
    python benchmarks/bench_response.py --json out.json

Rows, per workload (ids uniform below num_experts; the routes are the only large value in the document):
- memcpy: one np.copyto of the int32 source into a warm buffer (the floor every ratio is taken against);
- dumps + loads: bytes out, bytes in;
- iter_dumps -> buffer + loads: the chunks written into one reused bytearray, then loads of that buffer;
- the same from a uint16 source (what vLLM hands over above 256 experts);
and, for each, ns per id, page faults per call (``ru_minflt``) and the peak traced allocation of the encode
relative to the body (tracemalloc sees NumPy's buffers). A last table compares loads of a document of many tiny
envelopes with ``orjson.loads`` plus decoding each envelope on its own.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

import r3wire

# (name, rows, layers, top_k, num_experts)
WORKLOADS = [
    ("W1 Qwen3-30B-A3B 8k", 8192, 48, 8, 128),
    ("K2 Kimi-K2 4k", 4096, 60, 8, 384),
    ("K2 Kimi-K2 8k", 8192, 60, 8, 384),
    ("K2 Kimi-K2 16k", 16384, 60, 8, 384),
    ("K2 Kimi-K2 32k", 32768, 60, 8, 384),
]


@dataclass
class Row:
    workload: str
    method: str
    ms: float
    ratio: float
    ns_per_id: float
    faults_per_call: float
    encode_peak_over_body: float | None


def _median(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median milliseconds over ``repeat`` runs after a warm-up, and minor page faults per run."""
    fn()
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / repeat
    return statistics.median(times) * 1e3, faults


def _peak(fn: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _doc(routes: np.ndarray[Any, Any]) -> dict[str, Any]:
    return {"id": "cmpl-1", "choices": [{"index": 0, "routed_experts": routes, "finish_reason": "stop"}]}


def run_workload(workload: tuple[str, int, int, int, int], *, repeat: int) -> list[Row]:
    name, rows, layers, top_k, experts = workload
    rng = np.random.default_rng(0)
    source = rng.integers(0, experts, (rows, layers, top_k), dtype=np.int32)
    ids = source.size
    warm = np.empty_like(source)
    memcpy_ms, memcpy_faults = _median(lambda: np.copyto(warm, source), repeat)
    out = [Row(name, "memcpy (np.copyto, warm)", memcpy_ms, 1.0, memcpy_ms * 1e6 / ids, memcpy_faults, None)]

    def add(method: str, fn: Callable[[], object], encode: Callable[[], object] | None, body: int) -> None:
        ms, faults = _median(fn, repeat)
        peak = _peak(encode) / body if encode is not None else None
        out.append(Row(name, method, ms, ms / memcpy_ms, ms * 1e6 / ids, faults, peak))

    for label, routes in (("int32", source), ("uint16", source.astype(np.uint16))):
        doc = _doc(routes)
        body = r3wire.dumps(doc, num_experts=experts)
        buffer = bytearray(len(body))

        def streamed(doc: dict[str, Any] = doc, buffer: bytearray = buffer) -> int:
            view = memoryview(buffer)  # slice assignment through a memoryview: a plain memcpy
            pos = 0
            for chunk in r3wire.iter_dumps(doc, num_experts=experts):
                end = pos + len(chunk)
                view[pos:end] = chunk
                pos = end
            return pos

        def round_trip_streamed(buffer: bytearray = buffer, streamed: Callable[[], int] = streamed) -> object:
            size = streamed()
            return r3wire.loads(buffer if size == len(buffer) else memoryview(buffer)[:size], num_experts=experts)

        def round_trip(doc: dict[str, Any] = doc) -> object:
            return r3wire.loads(r3wire.dumps(doc, num_experts=experts), num_experts=experts)

        back = round_trip_streamed()["choices"][0]["routed_experts"]  # type: ignore[index]
        assert np.array_equal(back, source)
        add(f"iter_dumps -> buffer + loads [{label}]", round_trip_streamed, streamed, len(body))
        add(f"  iter_dumps -> buffer [{label}]", streamed, None, len(body))
        dumps = functools.partial(r3wire.dumps, doc, num_experts=experts)
        add(f"  loads(buffer) [{label}]", functools.partial(r3wire.loads, buffer, num_experts=experts), None, 1)
        add(f"dumps + loads [{label}]", round_trip, dumps, len(body))
        add(f"  dumps [{label}]", dumps, None, 1)
    return out


def tiny_envelopes(count: int, repeat: int) -> dict[str, float]:
    """loads of ``count`` tiny envelopes against orjson.loads plus one decode per envelope."""
    routes = np.arange(8, dtype=np.int32).reshape(1, 2, 4)
    body = r3wire.dumps({"items": [{"routed_experts": routes, "i": i} for i in range(count)]})
    envelopes = [item["routed_experts"] for item in orjson.loads(body)["items"]]
    orjson_ms, _ = _median(lambda: orjson.loads(body), repeat)
    decode_ms, _ = _median(lambda: [r3wire.decode_routes(e) for e in envelopes], repeat)
    loads_ms, _ = _median(lambda: r3wire.loads(body), repeat)
    return {
        "envelopes": count,
        "body_mb": len(body) / 1e6,
        "orjson_loads_ms": orjson_ms,
        "per_array_decode_ms": decode_ms,
        "r3wire_loads_ms": loads_ms,
        "ratio_to_orjson_plus_decode": loads_ms / (orjson_ms + decode_ms),
        "ratio_to_orjson": loads_ms / orjson_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--tiny", type=int, default=100_000, help="envelopes in the many-small-envelopes document")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    print(
        f"r3wire {r3wire.__version__}, numpy {np.__version__}, orjson {orjson.__version__}, "
        f"python {sys.version.split()[0]}"
    )
    print(f"{'workload':<22} {'method':<40} {'ms':>8} {'x memcpy':>9} {'ns/id':>7} {'faults':>8} {'peak/body':>9}")
    for workload in WORKLOADS:
        for row in run_workload(workload, repeat=args.repeat):
            rows.append(row)
            peak = f"{row.encode_peak_over_body:.2f}" if row.encode_peak_over_body is not None else "-"
            print(
                f"{row.workload:<22} {row.method:<40} {row.ms:>8.2f} {row.ratio:>9.2f} {row.ns_per_id:>7.2f} "
                f"{row.faults_per_call:>8.0f} {peak:>9}"
            )
    tiny = tiny_envelopes(args.tiny, max(3, args.repeat // 3))
    print()
    print(
        f"{tiny['envelopes']:.0f} tiny envelopes ({tiny['body_mb']:.1f} MB): "
        f"orjson.loads {tiny['orjson_loads_ms']:.0f} ms, per-array decode {tiny['per_array_decode_ms']:.0f} ms, "
        f"r3wire.loads {tiny['r3wire_loads_ms']:.0f} ms = {tiny['ratio_to_orjson_plus_decode']:.2f}x "
        f"(orjson.loads + decode), {tiny['ratio_to_orjson']:.1f}x orjson.loads"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "tiny_envelopes": tiny}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
