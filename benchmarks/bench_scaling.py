#!/usr/bin/env python3
"""Performance at scale: cost per id from 256 to 131072 rows, page faults and peak memory, as multiples of a memcpy.

    python benchmarks/bench_scaling.py                              # workloads + sweep: 45-85 s on 2 busy cores
    python benchmarks/bench_scaling.py --json out.json --plot docs/img/scaling.png
    python benchmarks/bench_scaling.py --sizes 4096,32768 --workloads K2   # a part of it

Two tables, every method's decoded result checked equal to its source before it is timed:

- Workloads: W1 (Qwen3-30B-A3B, 8192 x 48 x 8, 128 experts), K2 (Kimi K2, 32768 x 60 x 8, 384 experts) from an
  int32 source, and K2-u16, the same ids handed over as uint16 (what vLLM gives above 256 experts).
- Sweep: the Kimi K2 shape (60 layers x top-8 of 384 experts, int32 source) at 256 ... 131072 rows, as ns per id.

Per method and size: encode, decode and round trip (encode + decode of one iteration) medians; the round trip as a
multiple of a memcpy of the int32 source (``np.copyto`` into a warm buffer) at the same size, whose samples are
interleaved with the method's (one memcpy sample, then one encode and one decode), so that both see the same load,
each memcpy and encode sample after one untimed call of its own (see ``_timed``: otherwise an encode pays for
writing back the cache lines the memcpy before it left dirty);
minor page faults per call (``resource.getrusage(RUSAGE_SELF).ru_minflt`` deltas, median); and the peak memory
that one encode and one decode allocate (``tracemalloc``, to which NumPy reports its buffers; not ``ru_maxrss``,
which only ever rises) as a multiple of the wire payload and of the decoded output respectively.

Methods (left out when this r3wire lacks them; ``--json`` records which):

- ``memcpy``: the baseline.
- ``envelope``: ``encode_routes`` -> ``orjson.dumps`` -> ``orjson.loads`` -> ``decode_routes`` (the per-array API).
- ``dumps``: ``r3wire.dumps`` / ``r3wire.loads`` of ``{"choices": [{"index": 0, "routed_experts": arr}]}``.
- ``iter_dumps``: ``r3wire.iter_dumps`` written chunk by chunk into one reused buffer, then ``r3wire.loads`` of it.
- ``floor``: not a way to send routes; the passes ``dumps``/``loads`` cannot avoid (bounds check, narrowing,
  base64 each way, one copy into the output), made bare with no document around them: how much of ``dumps``'s
  cost is structural in NumPy. Its row is the context for the ``dumps`` target line. Like ``dumps`` it returns a
  fresh body-sized ``bytes`` per call, so it is a floor for ``dumps`` only, not for ``iter_dumps`` into a reused
  buffer: above glibc's mmap threshold (K2's 42 MB body) that fresh body page-faults on every call, and the
  ``floor`` row then costs more than ``iter_dumps``.
- ``frame`` / ``frame-packed``: ``encode_routes_frame`` (a new ``bytes`` per call) / ``decode_routes_frame``, ids
  as int16 or bit-packed.
- ``frame-out`` / ``frame-packed-out``: the same frames written with ``out=`` into one buffer reused across calls
  (sized by ``frame_size``), the zero-copy path issue 14's frame target is about.

Ids: 1024 distinct rows from ``r3wire.synthetic`` repeated to length (no method here compresses, so the
repetition changes no size or time). Medians of at least 3 timed runs per cell, more within ``--budget``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import io
import json
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from _timing import describe_machine, package_version

import r3wire
from r3wire._base64 import BACKEND, b64decode_strict, b64encode_bytes
from r3wire.synthetic import synthetic_routes

SWEEP_ROWS = (256, 1024, 4096, 8192, 16384, 32768, 65536, 131072)
POOL_ROWS = 1024
MIN_RUNS = 3


@dataclass(frozen=True)
class Model:
    layers: int
    top_k: int
    num_experts: int


QWEN3 = Model(48, 8, 128)
KIMI_K2 = Model(60, 8, 384)


@dataclass(frozen=True)
class Workload:
    name: str
    rows: int
    model: Model
    dtype: str  # of the source the engine hands over
    note: str


WORKLOADS = {
    "W1": Workload("W1", 8192, QWEN3, "int32", "Qwen3-30B-A3B, 8k tokens"),
    "K2": Workload("K2", 32768, KIMI_K2, "int32", "Kimi K2, 32k tokens"),
    "K2-u16": Workload("K2-u16", 32768, KIMI_K2, "uint16", "Kimi K2, 32k tokens, uint16 source (vLLM > 256 experts)"),
}

_POOLS: dict[Model, np.ndarray[Any, Any]] = {}


def make_routes(model: Model, rows: int, dtype: str) -> np.ndarray[Any, Any]:
    """``rows`` token rows of ``model``'s routes as ``dtype``, deterministic."""
    if model not in _POOLS:
        _POOLS[model] = synthetic_routes(
            POOL_ROWS, layers=model.layers, top_k=model.top_k, num_experts=model.num_experts, seed=7, dtype=np.int32
        )
    pool = _POOLS[model]
    return np.ascontiguousarray(pool[np.arange(rows) % len(pool)].astype(dtype))


# ----------------------------------------------------------------------------------------------------- methods


@dataclass
class Method:
    name: str
    label: str
    encode: Callable[[np.ndarray[Any, Any], int], Any]
    decode: Callable[[Any, int], np.ndarray[Any, Any]]


def _choices(routes: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "routed_experts": routes}]}


def _memcpy() -> Method:
    warm: dict[tuple[int, int], np.ndarray[Any, Any]] = {}

    def encode(routes: np.ndarray[Any, Any], _: int) -> np.ndarray[Any, Any]:
        # The int32 source copied into a buffer already touched: the fastest copy, so ratios to it are conservative.
        key = (id(routes), routes.size)
        if key not in warm:
            warm[key] = np.empty(routes.shape, np.int32)
        out = warm[key]
        np.copyto(out, routes)
        return out

    return Method("memcpy", "memcpy: np.copyto of the int32 source", encode, lambda payload, _: payload)


def _envelope() -> Method:
    return Method(
        "envelope",
        "encode_routes -> orjson -> decode_routes",
        lambda routes, n: orjson.dumps(_choices(r3wire.encode_routes(routes, num_experts=n))),
        lambda payload, n: r3wire.decode_routes(orjson.loads(payload)["choices"][0]["routed_experts"], num_experts=n),
    )


def _dumps() -> Method:
    return Method(
        "dumps",
        "r3wire.dumps / r3wire.loads",
        lambda routes, n: r3wire.dumps(_choices(routes), num_experts=n),
        lambda payload, n: r3wire.loads(payload, num_experts=n)["choices"][0]["routed_experts"],
    )


class _Sink:
    """One buffer reused across calls, grown (and so re-touched) only when a document does not fit."""

    def __init__(self) -> None:
        self.buffer = np.empty(0, dtype=np.uint8)

    def write(self, chunks: Any) -> memoryview:
        end = 0
        for chunk in chunks:
            part = np.frombuffer(chunk, dtype=np.uint8)
            if end + part.size > self.buffer.size:
                grown = np.empty(max(2 * self.buffer.size, end + part.size), dtype=np.uint8)
                grown[:end] = self.buffer[:end]
                self.buffer = grown
            self.buffer[end : end + part.size] = part
            end += part.size
        view: memoryview = self.buffer[:end].data
        return view


def _iter_dumps() -> Method | None:
    iter_dumps = getattr(r3wire, "iter_dumps", None)
    if iter_dumps is None:
        return None
    sink = _Sink()
    return Method(
        "iter_dumps",
        "r3wire.iter_dumps into a reused buffer / loads",
        lambda routes, n: sink.write(iter_dumps(_choices(routes), num_experts=n)),
        lambda payload, n: r3wire.loads(payload, num_experts=n)["choices"][0]["routed_experts"],
    )


def _floor() -> Method:
    """The passes ``dumps`` and ``loads`` cannot avoid, made bare: the reference that says how much of their cost
    is structural in NumPy. Encode: one ``max()`` bounds check of the source viewed as unsigned, one narrowing
    copy into a reused buffer (none when the source already is the wire dtype), one base64 encode and one copy
    into a fresh output between a fixed prefix and suffix. Decode: one base64 decode of the blob (found by
    ``find``), one ``max()`` bounds check. No document is walked, no header written or parsed, nothing else
    validated. The fresh output per call is ``dumps``'s, so this is a floor for ``dumps`` (whose one body-sized
    allocation it shares, page faults included above glibc's mmap threshold), not for ``iter_dumps`` into a
    reused buffer, which allocates nothing body-sized and beats it on K2."""
    scratch: dict[tuple[int, str], np.ndarray[Any, Any]] = {}
    shape: list[tuple[int, ...]] = [()]
    prefix = b'{"choices":[{"index":0,"routed_experts":{"schema":"r3wire.routes","version":1,"data":"'
    suffix = b'"}}]}'

    def encode(routes: np.ndarray[Any, Any], n: int) -> bytes:
        wire = r3wire.route_dtype(n)
        if int(routes.view(f"u{routes.dtype.itemsize}").max()) >= n:
            raise ValueError("an id out of range")
        if routes.dtype == wire:
            narrowed = routes
        else:
            key = (routes.size, wire.str)
            if key not in scratch:
                scratch.clear()
                scratch[key] = np.empty(routes.size, wire)
            narrowed = scratch[key].reshape(routes.shape)
            np.copyto(narrowed, routes, casting="unsafe")
        shape[0] = routes.shape
        blob = b64encode_bytes(narrowed.reshape(-1).view(np.uint8).data)
        out = io.BytesIO()
        out.write(prefix)
        out.write(blob)
        out.write(suffix)
        return out.getvalue()

    def decode(payload: bytes, n: int) -> np.ndarray[Any, Any]:
        start = payload.find(b'"data":"') + len(b'"data":"')
        end = payload.find(b'"', start)
        wire = r3wire.route_dtype(n)
        nbytes = (end - start) // 4 * 3 - (payload[end - 2 : end].count(b"="))
        ids = np.frombuffer(b64decode_strict(memoryview(payload)[start:end], nbytes), wire)
        if int(ids.view(f"u{wire.itemsize}").max()) >= n:
            raise ValueError("an id out of range")
        return ids.reshape(shape[0])

    return Method("floor", "floor of dumps/loads: bare passes, fresh body", encode, decode)


def _frame(pack_bits: bool) -> Method:
    return Method(
        "frame-packed" if pack_bits else "frame",
        f"encode/decode_routes_frame{' (bit-packed)' if pack_bits else ''}, bytes",
        lambda routes, n: r3wire.encode_routes_frame(routes, num_experts=n, pack_bits=pack_bits),
        lambda payload, n: r3wire.decode_routes_frame(payload, num_experts=n),
    )


def _frame_out(pack_bits: bool) -> Method | None:
    """The frame written with ``out=`` into one buffer reused across calls, sized with ``frame_size``."""
    frame_size = getattr(r3wire, "frame_size", None)
    if frame_size is None:
        return None
    buffer = [np.empty(0, dtype=np.uint8)]

    def encode(routes: np.ndarray[Any, Any], n: int) -> memoryview:
        size = frame_size(routes, num_experts=n, pack_bits=pack_bits)  # num_experts given: reads no id
        if buffer[0].size < size:
            buffer[0] = np.empty(size, dtype=np.uint8)
        view: memoryview = r3wire.encode_routes_frame(routes, num_experts=n, pack_bits=pack_bits, out=buffer[0])
        return view

    return Method(
        "frame-packed-out" if pack_bits else "frame-out",
        f"encode/decode_routes_frame{' (bit-packed)' if pack_bits else ''}, out= reused buffer",
        encode,
        lambda payload, n: r3wire.decode_routes_frame(payload, num_experts=n),
    )


def all_methods() -> tuple[list[Method], list[str]]:
    """The methods this r3wire has, and a note for each left out."""
    notes = []
    iter_method = _iter_dumps()
    if iter_method is None:
        notes.append("iter_dumps: left out, this r3wire has no r3wire.iter_dumps")
    frame_out = [_frame_out(False), _frame_out(True)]
    if None in frame_out:
        notes.append("frame-out: left out, this r3wire has no r3wire.frame_size / encode_routes_frame(out=)")
    found = [_memcpy(), _envelope(), _dumps(), iter_method, _floor(), _frame(False), frame_out[0], _frame(True)]
    found.append(frame_out[1])
    return [m for m in found if m is not None], notes


# --------------------------------------------------------------------------------------------------- measuring


@dataclass
class Cell:
    method: str
    label: str
    rows: int
    ids: int
    payload_bytes: int | None
    encode_ms: float
    decode_ms: float
    round_trip_ms: float
    round_trip_cpu_ms: float  # the same in process CPU time
    runs: int
    encode_faults: float  # minor page faults per call, median
    decode_faults: float
    encode_peak_bytes: int | None  # tracemalloc peak of one call
    decode_peak_bytes: int | None
    memcpy_ms: float  # the baseline's median over samples interleaved with this method's
    memcpy_cpu_ms: float
    ratios: dict[str, float] = field(default_factory=dict)

    @property
    def ns_per_id(self) -> float:
        return self.round_trip_ms * 1e6 / self.ids


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@dataclass
class Sample:
    wall: float  # seconds per call
    cpu: float  # process CPU seconds per call: excludes time spent waiting for a core on a shared machine
    faults: float  # minor page faults per call


def _timed(fn: Callable[[], Any], inner: int, *, settle: bool = False) -> tuple[Sample, Any]:
    """Wall time, CPU time and minor page faults per call of ``fn`` over ``inner`` calls, and its last result.

    With ``settle``, one untimed call first. Interleaved samples need it: a call leaves its output's cache lines
    dirty, and whatever runs next pays for writing them back. Without the settling call, each encode sample paid
    for the memcpy sample before it (12.6 MB of dirty lines for W1: a bare ``max()`` over the source took 227 µs
    right after the memcpy, 161 µs right after another ``max()``); with it, every timed call follows a call of
    its own kind, as in a loop that runs only it.
    """
    if settle:
        fn()
    faults = _faults()
    cpu = time.process_time()
    start = time.perf_counter()
    result = None
    for _ in range(inner):
        result = fn()
    wall = time.perf_counter() - start
    return Sample(wall / inner, (time.process_time() - cpu) / inner, (_faults() - faults) / inner), result


def _peak(fn: Callable[[], Any]) -> int:
    gc.collect()
    tracemalloc.start()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return peak


def _size(payload: Any) -> int | None:
    return None if isinstance(payload, np.ndarray) else len(payload)


def measure(
    method: Method, routes: np.ndarray[Any, Any], n: int, *, baseline: Method, repeat: int, budget: float
) -> Cell:
    """Time ``method`` on ``routes``, each sample right after a sample of ``baseline`` (the memcpy), so that both
    see the same load on a shared machine; its round trip is then compared with the baseline's paired median."""
    gc.collect()
    start = time.perf_counter()
    payload = method.encode(routes, n)
    back = method.decode(payload, n)
    first = time.perf_counter() - start
    if back.shape != routes.shape or not np.array_equal(back, routes):
        raise AssertionError(f"{method.name}: the round trip changed the routes")
    del back
    inner = max(1, min(100, int(2e-3 / max(first, 1e-7))))  # small sizes: many calls per sample
    _timed(lambda: method.decode(method.encode(routes, n), n), inner)  # warm-up: allocator, caches, huge pages
    # The baseline's own calls per sample, from its own speed: a memcpy of a few MB is timed over a few calls.
    base_first = _timed(lambda: baseline.encode(routes, n), 1)[0].wall
    base_inner = max(1, min(100, int(2e-3 / max(base_first, 1e-7))))
    _timed(lambda: baseline.encode(routes, n), base_inner)
    encodes: list[Sample] = []
    decodes: list[Sample] = []
    baselines: list[Sample] = []
    started = time.perf_counter()
    while len(encodes) < max(repeat, 1) and not (
        len(encodes) >= min(repeat, MIN_RUNS) and time.perf_counter() - started > budget
    ):
        baselines.append(_timed(lambda: baseline.encode(routes, n), base_inner, settle=True)[0])
        sample, payload = _timed(lambda: method.encode(routes, n), inner, settle=True)
        encodes.append(sample)
        decodes.append(_timed(functools.partial(method.decode, payload, n), inner)[0])
    measured = method.name != "memcpy"
    pairs = list(zip(encodes, decodes, strict=True))
    return Cell(
        method=method.name,
        label=method.label,
        rows=routes.shape[0],
        ids=routes.size,
        payload_bytes=_size(payload),
        encode_ms=statistics.median(e.wall for e in encodes) * 1e3,
        decode_ms=statistics.median(d.wall for d in decodes) * 1e3,
        round_trip_ms=statistics.median(e.wall + d.wall for e, d in pairs) * 1e3,
        round_trip_cpu_ms=statistics.median(e.cpu + d.cpu for e, d in pairs) * 1e3,
        runs=len(encodes),
        encode_faults=statistics.median(e.faults for e in encodes),
        decode_faults=statistics.median(d.faults for d in decodes),
        encode_peak_bytes=_peak(lambda: method.encode(routes, n)) if measured else None,
        decode_peak_bytes=_peak(lambda: method.decode(payload, n)) if measured else None,
        memcpy_ms=statistics.median(b.wall for b in baselines) * 1e3,
        memcpy_cpu_ms=statistics.median(b.cpu for b in baselines) * 1e3,
    )


def add_ratios(cells: list[Cell], output_itemsize: int) -> None:
    """Each time as a multiple of the memcpy of the same size; peaks as multiples of the payload and the output."""
    for cell in cells:
        cell.ratios["round_trip_x_memcpy"] = cell.round_trip_ms / cell.memcpy_ms
        cell.ratios["encode_x_memcpy"] = cell.encode_ms / cell.memcpy_ms
        cell.ratios["round_trip_x_memcpy_cpu"] = cell.round_trip_cpu_ms / cell.memcpy_cpu_ms
        if cell.encode_peak_bytes is not None and cell.payload_bytes:
            cell.ratios["encode_peak_x_payload"] = cell.encode_peak_bytes / cell.payload_bytes
        if cell.decode_peak_bytes is not None and cell.ids:
            cell.ratios["decode_peak_x_output"] = cell.decode_peak_bytes / (cell.ids * output_itemsize)


def run_cells(
    routes: np.ndarray[Any, Any], n: int, methods: Sequence[Method], *, repeat: int, budget: float, tag: str
) -> list[Cell]:
    cells = []
    for method in methods:
        print(f"  {tag:8} {routes.shape[0]:>7} rows  {method.name}", file=sys.stderr, flush=True)
        cells.append(measure(method, routes, n, baseline=methods[0], repeat=repeat, budget=budget))
    return cells


# ---------------------------------------------------------------------------------------------------- reporting


def _fmt_ms(ms: float) -> str:
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.2f}" if ms >= 1 else f"{ms * 1e3:.0f}µ"


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_cells(title: str, cells: list[Cell]) -> str:
    head = (
        f"{'method':46} {'rows':>7} {'payload MB':>10} {'encode ms':>9} {'decode ms':>9} {'round trip':>10} "
        f"{'x memcpy':>8} {'cpu x':>6} {'ns/id':>6} {'faults enc/dec':>14} {'peak enc/dec':>13}"
    )
    lines = [title, head, "-" * len(head)]
    for c in cells:
        size = "-" if c.payload_bytes is None else f"{c.payload_bytes / 1e6:.2f}"
        peaks = "-"
        if "encode_peak_x_payload" in c.ratios or "decode_peak_x_output" in c.ratios:
            peaks = f"{c.ratios.get('encode_peak_x_payload', 0):.2f}/{c.ratios.get('decode_peak_x_output', 0):.2f}"
        decode = "-" if c.method == "memcpy" else _fmt_ms(c.decode_ms)
        lines.append(
            f"{c.label[:46]:46} {c.rows:>7} {size:>10} {_fmt_ms(c.encode_ms):>9} {decode:>9} "
            f"{_fmt_ms(c.round_trip_ms):>10} {c.ratios['round_trip_x_memcpy']:>7.2f}x "
            f"{c.ratios['round_trip_x_memcpy_cpu']:>5.2f}x {c.ns_per_id:>6.2f} "
            f"{f'{c.encode_faults:.0f}/{c.decode_faults:.0f}':>14} {peaks:>13}"
        )
    return "\n".join(lines)


def format_sweep(sweep: list[Cell]) -> str:
    """The sweep as matrices, a row per method and a column per size: ns/id, multiple of memcpy, page faults."""
    sizes = sorted({c.rows for c in sweep})
    cell = {(c.method, c.rows): c for c in sweep}
    methods = {c.method: c.label for c in sweep}
    views: list[tuple[str, Callable[[Cell], str]]] = [
        ("round trip, ns per id", lambda c: f"{c.ns_per_id:.2f}"),
        ("round trip / memcpy of the int32 source", lambda c: f"{c.ratios['round_trip_x_memcpy']:.2f}x"),
        ("the same in process CPU time", lambda c: f"{c.ratios['round_trip_x_memcpy_cpu']:.2f}x"),
        ("minor page faults per call, encode + decode", lambda c: f"{c.encode_faults + c.decode_faults:.0f}"),
    ]
    out = []
    for title, show in views:
        head = f"{'sweep (Kimi K2: 60 x 8 of 384 experts, int32): ' + title:70} " + " ".join(
            f"{rows:>8}" for rows in sizes
        )
        out += [head, "-" * len(head)]
        for method, label in methods.items():
            values = [show(cell[method, rows]) if (method, rows) in cell else "-" for rows in sizes]
            out.append(f"{label[:70]:70} " + " ".join(f"{v:>8}" for v in values))
        out.append("")
    return "\n".join(out)


def plot(sweep: list[Cell], path: Path, subtitle: str) -> None:
    """ns/id and multiple of a memcpy against rows, one line per method, log-scaled rows."""
    import matplotlib  # noqa: PLC0415  # only with --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    labels = {c.method: c.label for c in sweep if c.method != "memcpy"}
    sizes = sorted({c.rows for c in sweep})
    # The memcpy line: the median of every memcpy sample paired with any method at that size.
    baseline = [statistics.median(c.memcpy_ms * 1e6 / c.ids for c in sweep if c.rows == rows) for rows in sizes]
    left.plot(sizes, baseline, label="memcpy of the int32 source", linestyle="--", color="black")
    for method, label in labels.items():
        cells = sorted((c for c in sweep if c.method == method), key=lambda c: c.rows)
        rows = [c.rows for c in cells]
        left.plot(rows, [c.ns_per_id for c in cells], label=label, marker="o")
        right.plot(rows, [c.ratios["round_trip_x_memcpy_cpu"] for c in cells], label=label, marker="o")
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("rows (tokens), 60 layers x top-8 of 384 experts")
        axis.grid(True, which="both", alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("round trip, ns per id (median)")
    left.set_title("Cost per id as payloads grow")
    right.set_ylabel("round trip / memcpy of the int32 source, CPU time")
    right.set_title("Multiple of a memcpy (interleaved samples, process CPU time)")
    right.set_ylim(bottom=0)
    left.legend(fontsize=8)
    figure.suptitle(subtitle, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _load(machine: dict[str, Any]) -> str:
    start, end = machine.get("load_average_at_start"), machine.get("load_average_at_end")
    return f"{start[0]:.1f} -> {end[0]:.1f}" if start and end else "?"


def compare_sources(methods: Sequence[Method], rows: int, *, repeat: int) -> dict[str, float]:
    """Encode time from a uint16 source over that from an int32 source, per method, the two sampled alternately
    (workload tables run seconds apart; on a shared machine the load changes between them)."""
    int32 = make_routes(KIMI_K2, rows, "int32")
    uint16 = int32.astype(np.uint16)
    n = KIMI_K2.num_experts
    ratios = {}
    for method in methods:
        if not method.name.startswith("frame"):
            continue
        times: dict[str, list[float]] = {"int32": [], "uint16": []}
        for source in (int32, uint16):
            method.encode(source, n)  # warm-up
        for _ in range(max(repeat, 1)):
            for name, source in (("int32", int32), ("uint16", uint16)):
                times[name].append(_timed(functools.partial(method.encode, source, n), 1)[0].wall)
        ratios[method.name] = statistics.median(times["uint16"]) / statistics.median(times["int32"])
    return ratios


def check_targets(tables: dict[str, list[Cell]], sweep: list[Cell], sources: dict[str, float]) -> list[dict[str, Any]]:
    """Issue 14's targets that this script measures; a target whose cells were not run is left out."""
    cell = {(name, c.method): c for name, cells in tables.items() for c in cells}
    swept = {(c.method, c.rows): c for c in sweep}
    found: list[dict[str, Any]] = []

    def add(name: str, value: float, threshold: float, cpu: float | None = None) -> None:
        found.append(
            {"target": name, "value": value, "cpu_value": cpu, "threshold": threshold, "passed": value <= threshold}
        )

    for name, method, threshold in [("W1", "frame-out", 1.2), ("W1", "dumps", 2.0), ("K2", "iter_dumps", 3.5)]:
        if (name, method) in cell:
            ratios = cell[name, method].ratios
            label = f"{name} {method} round trip <= {threshold}x memcpy"
            add(label, ratios["round_trip_x_memcpy"], threshold, ratios["round_trip_x_memcpy_cpu"])
    for name in tables:
        if (name, "floor") in cell:
            ratios = cell[name, "floor"].ratios
            found.append(
                {
                    "target": f"{name} floor of dumps (its passes, bare, a fresh body) round trip x memcpy, no target",
                    "value": ratios["round_trip_x_memcpy"],
                    "cpu_value": ratios["round_trip_x_memcpy_cpu"],
                    "threshold": None,
                    "passed": None,
                }
            )
    for method, ratio in sources.items():
        add(f"K2 {method} encode: uint16 source / int32 source <= 1.0 (interleaved)", ratio, 1.0)
    for method in dict.fromkeys(m for m, _ in swept):
        if (method, 4096) in swept and (method, 32768) in swept:
            ratio = swept[method, 32768].ns_per_id / swept[method, 4096].ns_per_id
            if method == "memcpy":  # no target: the step from cache (8 MB of source) to memory every method pays
                found.append(
                    {
                        "target": "sweep memcpy: ns/id at 32768 rows / at 4096 rows",
                        "value": ratio,
                        "cpu_value": None,
                        "threshold": None,
                        "passed": None,
                    }
                )
            else:
                add(f"sweep {method}: ns/id at 32768 rows / at 4096 rows <= 1.5", ratio, 1.5)
    return found


def describe() -> dict[str, Any]:
    machine = describe_machine()
    return {
        "cpu": machine["cpu"],
        "usable_cpus": machine["usable_cpus"] or machine["logical_cpus"],
        "load_average_at_start": machine["load_average_at_start"],
        "python": platform.python_version(),
        "r3wire": r3wire.__version__,
        "numpy": np.__version__,
        "orjson": package_version("orjson"),
        "pybase64": package_version("pybase64"),
        "base64_backend": BACKEND,
        "glibc_tunables": machine["glibc_tunables"],
        "transparent_hugepage": machine["transparent_hugepage"],
    }


# --------------------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated; empty for none")
    parser.add_argument("--sizes", default=",".join(map(str, SWEEP_ROWS)), help="sweep rows; empty for none")
    parser.add_argument("--repeat", type=int, default=11, help="timed runs per cell, at most (default 11)")
    parser.add_argument("--budget", type=float, default=1.5, help="seconds per cell after 3 runs (default 1.5)")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument("--plot", type=Path, help="write the sweep as a PNG here (needs matplotlib)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run: checks the script, not speed")
    args = parser.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    shrink = 512 if args.smoke else 1  # --smoke: every row count divided by this (at least 1 row)
    repeat, budget = (1, 0.0) if args.smoke else (args.repeat, args.budget)

    machine = describe()
    methods, notes = all_methods()
    started = time.perf_counter()
    tables: dict[str, list[Cell]] = {}
    for name in names:
        w = WORKLOADS[name]
        routes = make_routes(w.model, max(1, w.rows // shrink), w.dtype)
        cells = run_cells(routes, w.model.num_experts, methods, repeat=repeat, budget=budget, tag=name)
        add_ratios(cells, r3wire.route_dtype(w.model.num_experts).itemsize)
        tables[name] = cells
        del routes
    sources = {}
    if "K2" in names and "K2-u16" in names:
        print("  K2 int32 vs uint16 source, interleaved", file=sys.stderr, flush=True)
        sources = compare_sources(methods, max(1, WORKLOADS["K2"].rows // shrink), repeat=repeat)
    sweep: list[Cell] = []
    for rows in sizes:
        routes = make_routes(KIMI_K2, max(1, rows // shrink), "int32")
        cells = run_cells(routes, KIMI_K2.num_experts, methods, repeat=repeat, budget=budget, tag="sweep")
        add_ratios(cells, r3wire.route_dtype(KIMI_K2.num_experts).itemsize)
        sweep.extend(cells)
        del routes
    machine["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    machine["seconds"] = round(time.perf_counter() - started, 1)

    print(
        f"\n{machine['cpu']}, {machine['usable_cpus']} usable CPUs, Python {machine['python']}; numpy "
        f"{machine['numpy']}, orjson {machine['orjson']}, pybase64 {machine['pybase64']}, r3wire {machine['r3wire']}; "
        f"load average {machine['load_average_at_start']} -> {machine['load_average_at_end']}; {machine['seconds']} s; "
        f"transparent huge pages {machine['transparent_hugepage']}, GLIBC_TUNABLES {machine['glibc_tunables']}"
    )
    print(
        "medians; x memcpy = round trip / np.copyto of the int32 source (interleaved samples, same size), wall "
        "and process CPU time; faults = minor "
        "page faults per call; peak = tracemalloc peak of one encode / payload size, of one decode / output size\n"
    )
    for note in notes:
        print(f"({note})")
    for name, cells in tables.items():
        w = WORKLOADS[name]
        rows = cells[0].rows
        title = (
            f"{name}: {rows} x {w.model.layers} x {w.model.top_k} of {w.model.num_experts} experts, {w.dtype} "
            f"source = {cells[0].ids:,} ids ({w.note})"
        )
        print(format_cells(title, cells) + "\n")
    if sweep:
        print(format_sweep(sweep))
    targets = check_targets(tables, sweep, sources)
    for target in targets:
        cpu = "" if target["cpu_value"] is None else f" (CPU time: {target['cpu_value']:.2f})"
        verdict = {True: "PASS", False: "MISS", None: "INFO"}[target["passed"]]
        print(f"{verdict}  {target['target']}: {target['value']:.2f}{cpu}")
    if args.plot and sweep:
        subtitle = (
            f"r3wire {machine['r3wire']}, numpy {machine['numpy']}, {machine['cpu']}, {machine['usable_cpus']} shared "
            f"CPUs, load average {_load(machine)}; medians"
        )
        plot(sweep, args.plot, subtitle)
        print(f"wrote {args.plot}")
    if args.json:
        document = {
            "benchmark": "scaling",
            "machine": machine,
            "settings": {"repeat": repeat, "budget_s": budget, "pool_rows": POOL_ROWS, "smoke": args.smoke},
            "notes": notes,
            "workloads": {
                name: {**asdict(WORKLOADS[name]), "cells": [{**asdict(c), "ns_per_id": c.ns_per_id} for c in cells]}
                for name, cells in tables.items()
            },
            "sweep": [{**asdict(c), "ns_per_id": c.ns_per_id} for c in sweep],
            "uint16_over_int32_encode": sources,
            "targets": targets,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
