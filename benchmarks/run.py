#!/usr/bin/env python3
"""The r3wire benchmark: every way of moving routed-expert ids, on realistic workloads, in one run.

    python benchmarks/run.py                       # all workloads, table on stdout (1.5-5 minutes)
    python benchmarks/run.py --quick               # W1 and W4 only, few repeats (~20 seconds)
    python benchmarks/run.py --json results.json   # also write every number, the machine and the versions
    python benchmarks/run.py --workloads W1 --check  # exit 1 if a W1 target of the issue tracker is missed

Run it with the interpreter r3wire is installed in (``.venv/bin/python`` after ``python3 scripts/dev.py test``);
msgpack is optional (``pip install --group bench``). Rows whose method is not available are left out.

What is measured, per workload and method: the payload size; encode (arrays -> bytes), decode (bytes -> arrays)
and round trip (their sum, per iteration) as medians; each round trip as a ratio to the JSON-lists, orjson-numpy
and memcpy round trips of the same run; and the peak memory that decode allocates (tracemalloc, which NumPy
reports to) relative to the size of the arrays it returns. The "stdlib base64" rows of r3wire run in a child
process with ``R3WIRE_NO_PYBASE64=1``, i.e. r3wire installed without the ``fast`` extra.
"""

from __future__ import annotations

import argparse
import base64
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
from r3wire._base64 import BACKEND
from r3wire.synthetic import synthetic_routes

try:
    import msgpack
except ImportError:  # optional: the bench dependency group
    msgpack = None

Arrays = list[np.ndarray[Any, Any]]

# --------------------------------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Workload:
    name: str
    rows: int
    layers: int
    top_k: int
    num_experts: int
    sequences: int = 1
    note: str = ""

    @property
    def ids(self) -> int:
        return self.rows * self.layers * self.top_k * self.sequences

    def describe(self) -> str:
        batch = f"{self.sequences} sequences of " if self.sequences > 1 else ""
        return (
            f"{batch}{self.rows} tokens x {self.layers} layers x top-{self.top_k} of {self.num_experts} experts"
            f" = {self.ids:,} ids, {self.ids * 4 / 1e6:.1f} MB as int32"
        )


WORKLOADS = {
    "W1": Workload("W1", 8192, 48, 8, 128, note="Qwen3-30B-A3B, 8k tokens"),
    "W2": Workload("W2", 16384, 58, 8, 256, note="DeepSeek-V3 (58 MoE layers), 16k tokens"),
    "W3": Workload("W3", 16384, 60, 8, 384, note="Kimi K2 (60 MoE layers), 16k tokens"),
    "K2": Workload("K2", 32768, 60, 8, 384, note="Kimi K2 (60 MoE layers), 32k tokens: issue 14's scale"),
    "W4": Workload("W4", 16, 1, 2, 8, note="tiny: per-call overhead"),
    "batch": Workload("batch", 2048, 48, 8, 128, sequences=256, note="256 W1-shaped 2048-token sequences"),
}

# Distinct token rows generated per workload; longer sequences repeat them. No method here compresses, so the
# repetition changes no size or time, and generating 16k x 60 x 384 Gumbel samples would take longer than the run.
POOL_ROWS = 1024


def make_arrays(workload: Workload) -> Arrays:
    """The workload's int32 routes (the dtype engines hand out), deterministic."""
    pool = synthetic_routes(
        min(POOL_ROWS, workload.rows) + workload.sequences,
        layers=workload.layers,
        top_k=workload.top_k,
        num_experts=workload.num_experts,
        seed=7,
        dtype=np.int32,
    )
    arrays = []
    for s in range(workload.sequences):
        index = (np.arange(workload.rows) + s) % (len(pool) - workload.sequences) + s
        arrays.append(np.ascontiguousarray(pool[index]))
    return arrays


# ----------------------------------------------------------------------------------------------------- methods


@dataclass
class Method:
    name: str
    label: str
    encode: Callable[[Arrays, int], Any]
    decode: Callable[[Any, int], Arrays]
    size: Callable[[Any], int | None] = len
    slow: bool = False  # skipped on the batch workload unless --slow-batch
    base64: bool = False  # uses r3wire's base64: also run with the standard library back end


def _choices(values: list[Any]) -> dict[str, Any]:
    return {"choices": [{"index": i, "routed_experts": v} for i, v in enumerate(values)]}


def _compact(array: np.ndarray[Any, Any], num_experts: int) -> np.ndarray[Any, Any]:
    """The seed's compact dtype for the baselines: uint8 up to 256 experts, int16 beyond (little-endian)."""
    return array.astype(np.uint8 if num_experts <= 256 else np.dtype("<i2"))


def _routes_of(doc: Any) -> list[Any]:
    return [choice["routed_experts"] for choice in doc["choices"]]


def _memcpy_method() -> Method:
    scratch: dict[int, Arrays] = {}

    def encode(arrays: Arrays, _: int) -> Arrays:
        # Into preallocated (warm) buffers: the fastest copy there is, so the ratios to it are conservative.
        outs = scratch.setdefault(id(arrays), [np.empty_like(a) for a in arrays])
        for out, a in zip(outs, arrays, strict=True):
            np.copyto(out, a)
        return outs

    return Method(
        "memcpy",
        "memcpy: one np.copyto of the int32 source",
        encode,
        lambda payload, _: payload,
        size=lambda _: None,
    )


def _json_lists() -> Method:
    return Method(
        "json-lists",
        "JSON lists: json.dumps(arr.tolist())",
        lambda arrays, _: json.dumps(_choices([a.tolist() for a in arrays])).encode(),
        lambda payload, _: [np.asarray(v, dtype=np.int32) for v in _routes_of(json.loads(payload))],
        slow=True,
    )


def _orjson_numpy() -> Method:
    return Method(
        "orjson-numpy",
        "orjson-numpy: orjson OPT_SERIALIZE_NUMPY",
        lambda arrays, _: orjson.dumps(_choices(list(arrays)), option=orjson.OPT_SERIALIZE_NUMPY),
        lambda payload, _: [np.asarray(v, dtype=np.int32) for v in _routes_of(orjson.loads(payload))],
        slow=True,
    )


def _stdlib_base64() -> Method:
    def encode(arrays: Arrays, n: int) -> bytes:
        compact = [_compact(a, n) for a in arrays]
        values = [
            {"data": base64.b64encode(c.tobytes()).decode(), "shape": list(c.shape), "dtype": c.dtype.str}
            for c in compact
        ]
        return json.dumps(_choices(values)).encode()

    def decode(payload: bytes, _: int) -> Arrays:
        return [
            np.frombuffer(base64.b64decode(v["data"]), dtype=v["dtype"]).reshape(v["shape"])
            for v in _routes_of(json.loads(payload))
        ]

    return Method("stdlib-base64", "seed: uint8/int16 + stdlib base64 + json", encode, decode)


def _msgpack() -> Method | None:
    if msgpack is None:
        return None

    def encode(arrays: Arrays, n: int) -> bytes:
        compact = [_compact(a, n) for a in arrays]
        values = [{"data": c.view(np.uint8).data, "shape": list(c.shape), "dtype": c.dtype.str} for c in compact]
        packed: bytes = msgpack.packb(_choices(values))
        return packed

    def decode(payload: bytes, _: int) -> Arrays:
        return [
            np.frombuffer(v["data"], dtype=v["dtype"]).reshape(v["shape"]) for v in _routes_of(msgpack.unpackb(payload))
        ]

    return Method("msgpack", "msgpack: uint8/int16 raw bytes, no base64", encode, decode)


def _r3wire_envelope() -> Method:
    return Method(
        "r3wire-envelope",
        "r3wire envelope: encode_routes + orjson",
        lambda arrays, n: orjson.dumps(_choices([r3wire.encode_routes(a, num_experts=n) for a in arrays])),
        lambda payload, n: [r3wire.decode_routes(v, num_experts=n) for v in _routes_of(orjson.loads(payload))],
        base64=True,
    )


def _r3wire_dumps() -> Method:
    return Method(
        "r3wire-dumps",
        "r3wire.dumps / r3wire.loads",
        lambda arrays, n: r3wire.dumps(_choices(list(arrays)), num_experts=n),
        lambda payload, n: _routes_of(r3wire.loads(payload, num_experts=n)),
        base64=True,
    )


def _r3wire_iter_dumps() -> Method | None:
    iter_dumps = getattr(r3wire, "iter_dumps", None)
    if iter_dumps is None:
        return None
    buffers: dict[int, bytearray] = {}

    # The chunks written into one reused buffer (what a server sending from a pool does), then loads of it.
    def encode(arrays: Arrays, n: int) -> memoryview:
        chunks = list(iter_dumps(_choices(list(arrays)), num_experts=n))
        size = sum(map(len, chunks))
        buffer = buffers.get(id(arrays))
        if buffer is None or len(buffer) < size:
            buffer = buffers[id(arrays)] = bytearray(size)
        view = memoryview(buffer)
        pos = 0
        for chunk in chunks:
            view[pos : pos + len(chunk)] = chunk
            pos += len(chunk)
        return view[:size]

    return Method(
        "r3wire-iter-dumps",
        "r3wire.iter_dumps -> reused buffer / loads",
        encode,
        lambda payload, n: _routes_of(r3wire.loads(payload, num_experts=n)),
        base64=True,
    )


def _r3wire_dumps_packed() -> Method | None:
    try:
        r3wire.dumps({}, pack_bits=True)  # type: ignore[call-arg, unused-ignore]
    except TypeError:
        return None
    return Method(
        "r3wire-packed",
        "r3wire.dumps(pack_bits=True) / loads",
        lambda arrays, n: r3wire.dumps(_choices(list(arrays)), num_experts=n, pack_bits=True),  # type: ignore[call-arg, unused-ignore]
        lambda payload, n: _routes_of(r3wire.loads(payload, num_experts=n)),
        base64=True,
    )


def _frame(pack_bits: bool) -> Method | None:
    encode_frame = getattr(r3wire, "encode_routes_frame", None)
    decode_frame = getattr(r3wire, "decode_routes_frame", None)
    if encode_frame is None or decode_frame is None:
        return None

    # One frame per sequence, as separate messages (ZMQ multipart, HTTP chunks): the payload is their total.
    def encode(arrays: Arrays, n: int) -> list[bytes]:
        return [encode_frame(a, num_experts=n, pack_bits=pack_bits) for a in arrays]

    def decode(payload: list[bytes], n: int) -> Arrays:
        return [decode_frame(frame, num_experts=n) for frame in payload]

    return Method(
        "frame-packed" if pack_bits else "frame",
        "routes frame (binary), bit-packed" if pack_bits else "routes frame (binary): encode/decode_routes_frame",
        encode,
        decode,
        size=lambda payload: sum(len(frame) for frame in payload),
    )


def all_methods(*, base64_only: bool) -> list[Method]:
    """The methods available in this environment; ``base64_only``: those whose speed depends on the back end."""
    found = [
        _memcpy_method(),
        _json_lists(),
        _orjson_numpy(),
        _stdlib_base64(),
        _msgpack(),
        _r3wire_envelope(),
        _r3wire_dumps(),
        _r3wire_iter_dumps(),
        _r3wire_dumps_packed(),
        _frame(False),
        _frame(True),
    ]
    methods = [m for m in found if m is not None]
    return [m for m in methods if m.base64] if base64_only else methods


# --------------------------------------------------------------------------------------------------- measuring


@dataclass
class Row:
    method: str
    label: str
    backend: str
    payload_bytes: int | None
    encode_ms: float
    decode_ms: float
    round_trip_ms: float
    iterations: int
    output_bytes: int
    decode_peak_bytes: int | None
    ratios: dict[str, float] = field(default_factory=dict)


# Fewer runs than this let one scheduler hiccup decide a median. Methods taking over a tenth of the budget per
# run need only 3, and over a third (the slow baselines, the batch) as many as the budget allows, at least one.
MIN_RUNS = 7


def _min_runs(first: float, budget: float) -> int:
    if first < budget / 10:
        return MIN_RUNS
    return 3 if first < budget / 3 else 1


def _timed(fn: Callable[[], Any], inner: int) -> tuple[float, Any]:
    start = time.perf_counter()
    result = None
    for _ in range(inner):
        result = fn()
    return (time.perf_counter() - start) / inner, result


def measure(method: Method, workload: Workload, arrays: Arrays, *, repeat: int, budget: float, memory: bool) -> Row:
    n = workload.num_experts
    gc.collect()
    # The first run checks the result; a slow method's first run is also its first sample.
    enc_start = time.perf_counter()
    payload = method.encode(arrays, n)
    dec_start = time.perf_counter()
    back = method.decode(payload, n)
    dec_end = time.perf_counter()
    for got, want in zip(back, arrays, strict=True):
        if got.shape != want.shape or not np.array_equal(got, want):
            raise AssertionError(f"{method.name} on {workload.name}: the round trip changed the routes")
    output_bytes = sum(a.nbytes for a in back)
    del back
    first = dec_end - enc_start
    encodes: list[float] = []
    decodes: list[float] = []
    # Tiny workloads: time many calls per sample so the clock's resolution does not matter.
    inner = max(1, min(1000, int(1e-3 / max(first, 1e-7))))
    if first < budget / 3:
        _timed(lambda: method.decode(method.encode(arrays, n), n), inner)  # warm-up: allocator, caches
    else:
        encodes.append(dec_start - enc_start)
        decodes.append(dec_end - dec_start)
    start = time.perf_counter()
    while len(encodes) < repeat and not (
        time.perf_counter() - start > budget and len(encodes) >= _min_runs(first, budget)
    ):
        gc.collect()
        seconds, payload = _timed(lambda: method.encode(arrays, n), inner)
        encodes.append(seconds)
        seconds, _ = _timed(functools.partial(method.decode, payload, n), inner)
        decodes.append(seconds)
    peak = None
    # tracemalloc slows Python allocations several times: skipped where one decode already takes the budget.
    if memory and method.name != "memcpy" and dec_end - dec_start < budget:
        gc.collect()
        tracemalloc.start()
        back = method.decode(payload, n)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del back
    return Row(
        method=method.name,
        label=method.label,
        backend=BACKEND if method.base64 else "-",
        payload_bytes=method.size(payload),
        encode_ms=statistics.median(encodes) * 1e3,
        decode_ms=statistics.median(decodes) * 1e3,
        round_trip_ms=statistics.median(e + d for e, d in zip(encodes, decodes, strict=True)) * 1e3,
        iterations=len(encodes),
        output_bytes=output_bytes,
        decode_peak_bytes=peak,
    )


def run_workloads(
    names: Sequence[str], *, base64_only: bool, repeat: int, budget: float, slow_batch: bool, memory: bool
) -> dict[str, list[Row]]:
    results: dict[str, list[Row]] = {}
    for name in names:
        workload = WORKLOADS[name]
        arrays = make_arrays(workload)
        rows = []
        for method in all_methods(base64_only=base64_only):
            if method.slow and workload.sequences > 1 and not slow_batch:
                continue
            print(f"  {workload.name:6} {method.name:16} [{BACKEND}]", file=sys.stderr, flush=True)
            rows.append(measure(method, workload, arrays, repeat=repeat, budget=budget, memory=memory))
        results[name] = rows
        del arrays
        gc.collect()
    return results


def run_without_fast(args: argparse.Namespace, names: Sequence[str]) -> dict[str, list[Row]]:
    """The base64-dependent methods again, in a child process where r3wire uses the standard library."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            str(out),
            "--workloads",
            ",".join(names),
            "--repeat",
            str(args.repeat),
            "--budget",
            str(args.budget),
        ]
        if args.no_memory:
            cmd.append("--no-memory")
        env = dict(os.environ, R3WIRE_NO_PYBASE64="1")
        subprocess.run(cmd, check=True, env=env)
        data = json.loads(out.read_text())
    return {name: [Row(**row) for row in rows] for name, rows in data.items()}


# ---------------------------------------------------------------------------------------------------- reporting


def versions() -> dict[str, str | None]:
    return {
        "r3wire": r3wire.__version__,
        "numpy": np.__version__,
        "orjson": package_version("orjson"),
        "pybase64": package_version("pybase64"),
        "msgpack": package_version("msgpack"),
        "r3wire_base64_backend": BACKEND,
    }


REFERENCES = {"json-lists": "vs_json_lists", "orjson-numpy": "vs_orjson_numpy", "memcpy": "vs_memcpy"}


def add_ratios(rows: list[Row]) -> None:
    """Speed-ups over the two JSON baselines (their time / ours) and the multiple of a memcpy (ours / its)."""
    reference = {row.method: row.round_trip_ms for row in rows if row.method in REFERENCES and row.backend == "-"}
    for row in rows:
        for method, key in REFERENCES.items():
            if method not in reference:
                continue
            if method == "memcpy":
                row.ratios[key] = row.round_trip_ms / reference[method]
            else:
                row.ratios[key] = reference[method] / row.round_trip_ms


def _fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 1:
        return f"{ms:.2f}"
    return f"{ms * 1e3:.1f}µ"


def format_table(workload: Workload, rows: list[Row]) -> str:
    head = (
        f"{'method':54} {'payload MB':>10} {'encode ms':>10} {'decode ms':>10} {'round trip':>10} "
        f"{'/json-lists':>11} {'/orjson-np':>10} {'x memcpy':>8} {'decode peak':>11}"
    )
    lines = [f"{workload.name}: {workload.describe()} ({workload.note})", head, "-" * len(head)]
    for row in rows:
        label = row.label + (" [stdlib b64]" if row.backend == "stdlib" else "")
        size = f"{row.payload_bytes / 1e6:.3f}" if row.payload_bytes is not None else "-"
        ratios = [
            f"{row.ratios[key]:.1f}x" if key in row.ratios else "-"
            for key in ("vs_json_lists", "vs_orjson_numpy", "vs_memcpy")
        ]
        if row.decode_peak_bytes is None or not row.output_bytes:
            peak = "-"
        elif row.decode_peak_bytes < 0.01 * row.output_bytes:
            peak = "0 (view)"  # the result is a view of the payload: decode allocates nothing
        else:
            peak = f"{row.decode_peak_bytes / row.output_bytes:.2f}x"
        decode = "-" if row.method == "memcpy" else _fmt_ms(row.decode_ms)
        lines.append(
            f"{label[:54]:54} {size:>10} {_fmt_ms(row.encode_ms):>10} {decode:>10} "
            f"{_fmt_ms(row.round_trip_ms):>10} {ratios[0]:>11} {ratios[1]:>10} {ratios[2]:>8} {peak:>11}"
        )
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    method: str
    ratio: str
    threshold: float
    at_least: bool
    value: float | None = None

    @property
    def passed(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.threshold if self.at_least else self.value <= self.threshold


# The targets of issues 2 and 7, all on W1 with pybase64 (the [fast] extra), ratios from the same run.
TARGETS = [
    Target("issue 7: r3wire.dumps/loads >= 150x faster than JSON lists", "r3wire-dumps", "vs_json_lists", 150, True),
    Target("issue 7: r3wire.dumps/loads >= 60x faster than orjson-numpy", "r3wire-dumps", "vs_orjson_numpy", 60, True),
    Target("issue 7: r3wire.dumps/loads within 8x of a memcpy", "r3wire-dumps", "vs_memcpy", 8, False),
    Target("issue 7: binary frame within 3x of a memcpy", "frame", "vs_memcpy", 3, False),
    Target("issue 2: envelope + orjson >= 100x faster than JSON lists", "r3wire-envelope", "vs_json_lists", 100, True),
    Target(
        "issue 2: envelope + orjson >= 40x faster than orjson-numpy", "r3wire-envelope", "vs_orjson_numpy", 40, True
    ),
]


def check_targets(rows: list[Row]) -> list[Target]:
    checked = []
    for target in TARGETS:
        # "-" is a method that does not use base64 at all (the frame); "stdlib" rows are not the [fast] install.
        match = [r for r in rows if r.method == target.method and r.backend in ("pybase64", "-")]
        value = match[0].ratios.get(target.ratio) if match else None
        checked.append(Target(**{**asdict(target), "value": value}))
    return checked


# --------------------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--workloads", default="W1,W2,W3,K2,W4,batch", help="comma-separated, from " + ",".join(WORKLOADS)
    )
    parser.add_argument("--repeat", type=int, default=15, help="timed iterations per method (at most)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per method and workload (soft)")
    parser.add_argument("--quick", action="store_true", help="W1 and W4, 7 repeats, 0.5 s budget")
    parser.add_argument("--json", type=Path, help="also write the results, machine and versions here")
    parser.add_argument("--check", action="store_true", help="exit 1 if a W1 target is missed")
    parser.add_argument("--no-stdlib", action="store_true", help="skip the rows without pybase64 (child process)")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc decode run")
    parser.add_argument("--slow-batch", action="store_true", help="also run JSON lists and orjson-numpy on 'batch'")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.workloads, args.repeat, args.budget = "W1,W4", min(args.repeat, MIN_RUNS), 0.5
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    memory = not args.no_memory

    if args.worker is not None:
        done = run_workloads(
            names, base64_only=True, repeat=args.repeat, budget=args.budget, slow_batch=False, memory=memory
        )
        args.worker.write_text(json.dumps({name: [asdict(r) for r in rows] for name, rows in done.items()}))
        return 0

    machine = describe_machine()
    started = time.perf_counter()
    results = run_workloads(
        names, base64_only=False, repeat=args.repeat, budget=args.budget, slow_batch=args.slow_batch, memory=memory
    )
    if not args.no_stdlib and BACKEND == "pybase64":
        for name, extra in run_without_fast(args, names).items():
            results[name].extend(extra)
    machine["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    machine["seconds"] = round(time.perf_counter() - started, 1)

    info = versions()
    print(
        f"\nmachine: {machine['cpu']}, {machine['usable_cpus']} usable of {machine['logical_cpus']} logical CPUs, "
        f"{machine['memory']}, {machine['python']}; load average {machine['load_average_at_start']} at start; "
        f"transparent huge pages {machine['transparent_hugepage']}, GLIBC_TUNABLES {machine['glibc_tunables']}"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(
        "medians; round trip = encode + decode of one iteration; /X = X's round trip / this one; "
        "x memcpy = this round trip / a memcpy's; decode peak = memory decode allocates / size of its output\n"
    )
    order = {m.name: i for i, m in enumerate(all_methods(base64_only=False))}
    for name in names:
        results[name].sort(key=lambda r: (order.get(r.method, 99), r.backend == "stdlib"))
        add_ratios(results[name])
        print(format_table(WORKLOADS[name], results[name]))
        if WORKLOADS[name].sequences > 1 and not args.slow_batch:
            print(
                "(JSON lists and orjson-numpy skipped: minutes per run; orjson-numpy decode alone took 41.8 s "
                "here. --slow-batch runs them.)"
            )
        print()
    targets = check_targets(results["W1"]) if "W1" in results else []
    for target in targets:
        shown = "n/a" if target.value is None else f"{target.value:.1f}x"
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[target.passed]
        print(f"{verdict:4}  {target.name}: {shown}")
    if args.json:
        document = {
            "machine": machine,
            "versions": info,
            "settings": {"workloads": names, "repeat": args.repeat, "budget_s": args.budget, "pool_rows": POOL_ROWS},
            "workloads": {
                name: {**asdict(WORKLOADS[name]), "rows": [asdict(r) for r in results[name]]} for name in names
            },
            "targets": [{**asdict(t), "passed": t.passed} for t in targets],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    if args.check and any(t.passed is False for t in targets):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
