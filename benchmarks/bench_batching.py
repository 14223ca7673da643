#!/usr/bin/env python3
"""Benchmark trainer-side batching against the plain NumPy operation that moves the same bytes.

    python benchmarks/bench_batching.py                 # 256 samples x 2048 rows x 48 layers x 8 (uint8)
    python benchmarks/bench_batching.py --json out.json # also write every median to a JSON file
    python benchmarks/bench_batching.py --batch 32      # a smaller run

Each line is the median of ``--repeat`` runs after one warm-up, beside the median of a reference run alternately
with it (so both see the same load on a shared machine): ``np.copyto`` of the same output bytes for padding,
``np.concatenate`` for packing and stitching. Fresh allocations cost page faults on these machines, so every case
is compared with a reference in the same allocation state: "warm" writes into a reused buffer
(``pad_routes(..., out=buf)`` vs ``np.copyto(buf, src)``), "fresh" allocates its output each time
(``pad_routes(...)`` vs ``np.copyto(np.empty(...), src)``). The target: padding (routes and per-token values) and
stitching within 3x of the NumPy copy of the same bytes. Ids are uniform random (the values do not change what a
copy costs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import r3wire
from r3wire import RouteTrace, pack_routes, pad_routes, pad_sequences

TARGET = 3.0  # the issues' bound: padding and stitching within 3x of a NumPy copy of the same output bytes
BUDGETED = ("pad_routes", "pad_sequences", "RouteTrace")  # the cases the target applies to


def _run_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    del result  # a fresh output is freed before the next run, as in a training loop
    return elapsed * 1e3


def _paired_medians(fn: Callable[[], object], reference: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Medians of ``fn`` and ``reference``, run alternately so both see the same load on a shared machine."""
    reference()  # warm-up: first-touch page faults of reused buffers, lazy imports
    fn()
    ours, theirs = [], []
    for _ in range(repeat):
        theirs.append(_run_ms(reference))
        ours.append(_run_ms(fn))
    return statistics.median(ours), statistics.median(theirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--num-experts", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    args = parser.parse_args(argv)

    batch, rows, layers, top_k, n_experts = args.batch, args.rows, args.layers, args.top_k, args.num_experts
    rng = np.random.default_rng(0)
    samples = [rng.integers(0, n_experts, size=(rows, layers, top_k), dtype=np.uint8) for _ in range(batch)]
    shape = (batch, rows, layers, top_k)
    source = np.stack(samples)  # the reference copies the same bytes from one contiguous array
    full = [rows] * batch  # token lengths: these rows cover every token (left padding needs them said)
    warm = np.empty(shape, dtype=np.uint8)  # "buf": a reused (e.g. pinned) output buffer
    ragged_rows = [int(r) for r in rng.integers(rows // 2, rows, size=batch)]
    ragged = [s[:r] for s, r in zip(samples, ragged_rows, strict=True)]
    ragged_tokens = [r + 1 for r in ragged_rows]  # the last sampled token is never forwarded
    ragged_shape = (batch, max(ragged_tokens), layers, top_k)
    ragged_source = np.zeros(ragged_shape, dtype=np.uint8)
    ragged_warm = np.empty(ragged_shape, dtype=np.uint8)
    wide = [s.astype(np.int32) for s in samples[: max(1, batch // 4)]]  # a quarter: int32 is 4x the memory

    results: list[dict[str, Any]] = []

    def measure(name: str, fn: Callable[[], object], ref_name: str, reference: Callable[[], object]) -> None:
        ms, ref_ms = _paired_medians(fn, reference, args.repeat)
        results.append(
            {
                "name": name,
                "median_ms": round(ms, 3),
                "reference": ref_name,
                "reference_median_ms": round(ref_ms, 3),
                "ratio": round(ms / ref_ms, 3),
            }
        )

    copy_warm = "np.copyto(buf, batch)"
    copy_fresh = "np.copyto(np.empty(...), batch)"
    measure(
        "pad_routes(out=buf)",
        lambda: pad_routes(samples, token_lengths=full, out=warm),
        copy_warm,
        lambda: np.copyto(warm, source),
    )
    measure(
        "pad_routes(num_experts, out=buf)",
        lambda: pad_routes(samples, token_lengths=full, num_experts=n_experts, out=warm),
        copy_warm,
        lambda: np.copyto(warm, source),
    )

    def copy_into_fresh(src: np.ndarray[Any, Any]) -> Callable[[], object]:
        return lambda: np.copyto(np.empty(src.shape, dtype=src.dtype), src)

    measure("pad_routes", lambda: pad_routes(samples, token_lengths=full), copy_fresh, copy_into_fresh(source))
    measure(
        "pad_routes(num_experts)",
        lambda: pad_routes(samples, token_lengths=full, num_experts=n_experts),
        copy_fresh,
        copy_into_fresh(source),
    )
    measure(
        "pad_routes(ragged, token_lengths, num_experts)",
        lambda: pad_routes(ragged, token_lengths=ragged_tokens, num_experts=n_experts),
        copy_fresh + " (same bytes)",
        copy_into_fresh(ragged_source),
    )
    measure(
        "pad_routes(fill=balanced, num_experts, out=buf)",
        lambda: pad_routes(
            ragged, token_lengths=ragged_tokens, num_experts=n_experts, fill="balanced", out=ragged_warm
        ),
        copy_warm + " (same bytes)",
        lambda: np.copyto(ragged_warm, ragged_source),
    )
    measure(
        "pad_routes(fill=balanced, num_experts)",
        lambda: pad_routes(ragged, token_lengths=ragged_tokens, num_experts=n_experts, fill="balanced"),
        copy_fresh + " (same bytes)",
        copy_into_fresh(ragged_source),
    )

    # Per-token values on the same layout: completion logprobs (float32, placed at an offset) and token ids
    # (int64, one per token); a real batch's side arrays, sized by the ragged token lengths.
    long_rows = [r * 8 for r in ragged_tokens]  # a longer sequence, so the arrays are not trivially small
    logprobs = [rng.standard_normal(n // 2).astype(np.float32) for n in long_rows]
    offsets = [n - n // 2 for n in long_rows]
    logprob_source = np.zeros((batch, max(long_rows)), dtype=np.float32)
    logprob_warm = np.empty_like(logprob_source)
    token_ids = [rng.integers(0, 150_000, size=n, dtype=np.int64) for n in long_rows]
    token_source = np.zeros((batch, max(long_rows)), dtype=np.int64)
    measure(
        "pad_sequences(logprobs, offsets, out=buf)",
        lambda: pad_sequences(logprobs, token_lengths=long_rows, offsets=offsets, out=logprob_warm),
        copy_warm + " (same bytes)",
        lambda: np.copyto(logprob_warm, logprob_source),
    )
    measure(
        "pad_sequences(logprobs, offsets)",
        lambda: pad_sequences(logprobs, token_lengths=long_rows, offsets=offsets),
        copy_fresh + " (same bytes)",
        copy_into_fresh(logprob_source),
    )
    measure(
        "pad_sequences(int64 token ids)",
        lambda: pad_sequences(token_ids),
        copy_fresh + " (same bytes)",
        copy_into_fresh(token_source),
    )

    concat = "np.concatenate(samples)"
    measure("pack_routes", lambda: pack_routes(samples), concat, lambda: np.concatenate(samples))
    measure(
        "pack_routes(num_experts)",
        lambda: pack_routes(samples, num_experts=n_experts),
        concat,
        lambda: np.concatenate(samples),
    )
    token_counts = [s.shape[0] + 1 for s in samples]  # one uncaptured (last sampled) token per trajectory
    measure(
        "pack_routes(token_lengths, num_experts)",
        lambda: pack_routes(samples, token_lengths=token_counts, num_experts=n_experts),
        concat,
        lambda: np.concatenate(samples),
    )
    measure(
        "pack_routes(int32 samples, num_experts)",
        lambda: pack_routes(wide, num_experts=n_experts),
        "np.concatenate(int32 samples, dtype=uint8)",
        lambda: np.concatenate(wide, dtype=np.uint8, casting="unsafe"),
    )

    turns = 8
    chunk = rows // turns

    def assemble() -> object:
        trace = RouteTrace(num_experts=n_experts)
        for t in range(turns):
            # Turn t returns rows from half a chunk before its prompt start (re-forwarded, checked to agree).
            start = max(0, t * chunk - chunk // 2)
            trace.add(samples[0][start : (t + 1) * chunk], start=start)
        return trace.finalize(rows + 1)

    measure(
        f"RouteTrace: {turns} overlapping turns, one {rows}-row trajectory",
        assemble,
        "np.concatenate(turns)",
        lambda: np.concatenate([samples[0][t * chunk : (t + 1) * chunk] for t in range(turns)]),
    )

    def words(block: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        flat = block.reshape(-1)
        return flat.view(np.uint64) if flat.nbytes % 8 == 0 else flat

    def bare_stitch(sample: np.ndarray[Any, Any], chunk_rows: int, tokens: np.ndarray[Any, Any] | None) -> object:
        # Not a way to stitch: the passes a verifying stitcher cannot avoid, made bare into a buffer sized up
        # front (no growth, no argument checks, no conflict handling): per call, compare the tokens it shares
        # with the recorded ones, compare the overlap rows, bounds-check the new rows, copy them.
        buf = np.empty_like(sample)
        held = None if tokens is None else np.empty_like(tokens)
        recorded = 0
        for t in range(turns):
            start = max(0, t * chunk_rows - chunk_rows // 2)
            end = (t + 1) * chunk_rows
            if tokens is not None and held is not None:
                call = tokens[: end + 1]
                common = min(recorded + 1 if recorded else 0, call.shape[0])
                bool(np.count_nonzero(held[:common] != call[:common]))
                held[common : call.shape[0]] = call[common:]
            if recorded > start:
                # 8-byte words: the fastest whole-array comparison measured (RouteTrace uses it too).
                bool(np.count_nonzero(words(buf[start:recorded]) != words(sample[start:recorded])))
            new = sample[recorded:end]
            if int(np.max(new)) >= n_experts:
                raise ValueError("an id out of range")
            buf[recorded:end] = new
            recorded = end
        return buf

    trajectory_tokens = rng.integers(0, 150_000, size=rows + 1, dtype=np.int64)

    def assemble_verified() -> object:
        trace = RouteTrace(num_experts=n_experts)
        for t in range(turns):
            # As above, and each call's full token ids (prompt + completion) are checked against the recorded ones.
            start = max(0, t * chunk - chunk // 2)
            end = (t + 1) * chunk
            trace.add(samples[0][start:end], start=start, token_ids=trajectory_tokens[: end + 1])
        return trace.finalize(rows + 1)

    measure(
        f"RouteTrace(token_ids): {turns} overlapping turns, one {rows}-row trajectory",
        assemble_verified,
        "np.concatenate(turns)",
        lambda: np.concatenate([samples[0][t * chunk : (t + 1) * chunk] for t in range(turns)]),
    )

    measure(
        f"floor (not RouteTrace): the same compare, check and copy, bare; {rows} rows",
        lambda: bare_stitch(samples[0][:rows], chunk, trajectory_tokens),
        "np.concatenate(turns)",
        lambda: np.concatenate([samples[0][t * chunk : (t + 1) * chunk] for t in range(turns)]),
    )

    # The same call pattern on an 8x longer trajectory (16384 rows by default, a long multi-turn rollout): the
    # fixed cost per call weighs less, the bytes moved more.
    long_trajectory = 8 * rows
    long_sample = rng.integers(0, n_experts, size=(long_trajectory, layers, top_k), dtype=np.uint8)
    long_tokens = rng.integers(0, 150_000, size=long_trajectory + 1, dtype=np.int64)
    long_chunk = long_trajectory // turns

    def assemble_long(verify: bool) -> object:
        trace = RouteTrace(num_experts=n_experts)
        for t in range(turns):
            start = max(0, t * long_chunk - long_chunk // 2)
            end = (t + 1) * long_chunk
            trace.add(long_sample[start:end], start=start, token_ids=long_tokens[: end + 1] if verify else None)
        return trace.finalize(long_trajectory + 1)

    def concatenate_long() -> object:
        return np.concatenate([long_sample[t * long_chunk : (t + 1) * long_chunk] for t in range(turns)])

    measure(
        f"RouteTrace: {turns} overlapping turns, one {long_trajectory}-row trajectory",
        lambda: assemble_long(False),
        "np.concatenate(turns)",
        concatenate_long,
    )
    measure(
        f"RouteTrace(token_ids): {turns} overlapping turns, one {long_trajectory}-row trajectory",
        lambda: assemble_long(True),
        "np.concatenate(turns)",
        concatenate_long,
    )

    measure(
        f"floor (not RouteTrace): the same compare, check and copy, bare; {long_trajectory} rows",
        lambda: bare_stitch(long_sample, long_chunk, long_tokens),
        "np.concatenate(turns)",
        concatenate_long,
    )

    def stitch_batch() -> object:
        # Every trajectory of the batch stitched from 4 verified turns, then padded: the whole rollout-to-batch path.
        finished = []
        for sample in samples:
            trace = RouteTrace(num_experts=n_experts)
            quarter = rows // 4
            for t in range(4):
                start = max(0, t * quarter - quarter // 4)
                end = rows if t == 3 else (t + 1) * quarter
                trace.add(sample[start:end], start=start, token_ids=trajectory_tokens[: end + 1])
            finished.append(trace.finalize(rows + 1)[0])
        return pad_routes(finished, token_lengths=[rows + 1] * batch, num_experts=n_experts, out=stitched_warm)

    def concatenate_batch() -> object:
        # The least an assembler must do: concatenate each trajectory's new rows and hold them until the batch is
        # formed (rollouts finish at different times; a trainer keeps every finished trajectory until the last
        # one ends), then copy them into the batch. Holding them is what costs fresh pages, for both sides.
        quarter = rows // 4
        bounds = [(t * quarter, rows if t == 3 else (t + 1) * quarter) for t in range(4)]
        finished = [np.concatenate([sample[a:b] for a, b in bounds]) for sample in samples]
        for i, trajectory in enumerate(finished):
            np.copyto(stitched_warm[i, :rows], trajectory)
        return stitched_warm

    stitched_warm = np.empty((batch, rows + 1, layers, top_k), dtype=np.uint8)
    measure(
        "RouteTrace(token_ids) x batch, 4 turns each, then pad_routes(out=buf)",
        stitch_batch,
        "np.concatenate(turns), held; np.copyto(buf)",
        concatenate_batch,
    )

    mib = batch * rows * layers * top_k / 2**20
    print(f"r3wire {r3wire.__version__}, numpy {np.__version__}, Python {platform.python_version()}, ", end="")
    print(f"{platform.machine()}, {os.cpu_count()} CPUs")
    print(f"batch {batch} x {rows} rows x {layers} layers x {top_k} top_k, uint8: {mib:.0f} MiB per padded batch")
    print(f"medians of {args.repeat} runs; ratio = median / the reference's median, run alternately with it\n")
    print(f"{'case':<72} {'ms':>8}  {'reference':<44} {'ms':>8} {'ratio':>7}")
    for r in results:
        print(
            f"{r['name']:<72} {r['median_ms']:>8.2f}  {r['reference']:<44} {r['reference_median_ms']:>8.2f} "
            f"{r['ratio']:>6.2f}x"
        )
    budgeted = [r for r in results if r["name"].startswith(BUDGETED)]
    worst = max(budgeted, key=lambda r: r["ratio"])
    verdict = "met" if worst["ratio"] <= TARGET else "NOT met"
    print(
        f"\npadding and stitching target (<= {TARGET:g}x a copy of the same bytes): {verdict}; "
        f"worst {worst['ratio']:.2f}x ({worst['name']})"
    )
    for r in results:
        if r["name"].startswith("floor"):
            print(f"context, no target: {r['name']}: {r['ratio']:.2f}x")

    if args.json:
        document = {
            "benchmark": "batching",
            "config": vars(args),
            "versions": {
                "r3wire": r3wire.__version__,
                "numpy": np.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            },
            "target_ratio": TARGET,
            "results": results,
        }
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
