"""``python -m r3wire demo``: encode a realistic rollout with r3wire and with JSON lists, and compare."""

from __future__ import annotations

import inspect
import json
import math
import statistics
import textwrap
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np
import orjson

from r3wire._base64 import BACKEND
from r3wire._validate import check_int, is_int
from r3wire.errors import R3WireError
from r3wire.frame import decode_routes_frame, encode_routes_frame
from r3wire.response import dumps, loads
from r3wire.routes import decode_routes, encode_routes
from r3wire.schema import MAX_NUM_EXPERTS
from r3wire.synthetic import synthetic_routes

__all__ = [
    "MAX_DRAWS",
    "MAX_IDS",
    "MAX_REPEAT",
    "MAX_ROW_DRAWS",
    "MAX_TOKEN_LAYERS",
    "check_demo_arguments",
    "run_demo",
]

# Limits, so that a typo cannot start a multi-GB allocation or a run of hours. The JSON-lists row dominates memory:
# a Python int per id (ids up to 256 are shared, larger ones are not) and a Python list per token and layer. Measured
# here (2 cores, repeat 1, peak RSS): 32k tokens of Qwen3-30B-A3B (12.6M ids) 0.7 GB in 11 s; at MAX_IDS with 48
# layers 0.9 GB (ids below 128) and 1.4 GB (ids up to 65535); at MAX_TOKEN_LAYERS with top-8 1.1 GB (ids below 128)
# and 1.4 GB (ids up to 511, 58 s), and with top-1 0.6 GB, so 2**24 rows of one id would take about 5 GB. The
# synthetic router draws one random score per token, layer and expert, at ~22 ns each.
MAX_IDS = 1 << 24  # tokens x layers x top_k: 16.8M ids, 64 MiB as int32
MAX_TOKEN_LAYERS = 1 << 21  # tokens x layers: 2.1M lists in the JSON-lists row (32k tokens x 60 layers fit)
MAX_DRAWS = 1 << 30  # tokens x layers x num_experts router scores: about 25 s to draw
# layers x num_experts: one token's scores. Up to this synthetic_routes bounds its scratch at 16 MB by drawing
# several tokens at a time; beyond it the scratch is one token's scores, at 20 bytes each.
MAX_ROW_DRAWS = 1 << 22
MAX_REPEAT = 1000


def check_demo_arguments(*, tokens: object, layers: object, top_k: object, num_experts: object, repeat: object) -> None:
    """Refuse demo arguments out of range, naming the command-line flag, before anything is allocated.

    ``tokens`` and ``layers`` must be at least 1: an empty rollout has nothing to compare, and JSON lists cannot
    carry an empty array's inner dimensions (``[]`` comes back as shape ``[0]``), so that row could not round-trip.

    Raises:
        R3WireError: a value is not an integer in its range, ``top_k`` exceeds ``num_experts``, or the rollout
            exceeds :data:`MAX_IDS`, :data:`MAX_TOKEN_LAYERS`, :data:`MAX_ROW_DRAWS` or :data:`MAX_DRAWS`.
    """
    n_tokens = check_int(tokens, "--tokens", minimum=1, maximum=MAX_TOKEN_LAYERS, error=R3WireError)
    n_layers = check_int(layers, "--layers", minimum=1, maximum=MAX_TOKEN_LAYERS, error=R3WireError)
    # The widest route dtype (int32) holds ids below 2**31.
    experts = check_int(num_experts, "--num-experts", minimum=1, maximum=MAX_NUM_EXPERTS, error=R3WireError)
    if not (is_int(top_k) and 1 <= top_k <= experts):
        raise R3WireError.make("--top-k", f"an integer in 1..{experts} (at most --num-experts)", top_k)
    k = int(top_k)
    check_int(repeat, "--repeat", minimum=1, maximum=MAX_REPEAT, error=R3WireError)
    for field, factors, limit, what in (
        ("--tokens x --layers x --top-k", (n_tokens, n_layers, k), MAX_IDS, "expert ids"),
        ("--tokens x --layers", (n_tokens, n_layers), MAX_TOKEN_LAYERS, "token-layer pairs (JSON lists of ids)"),
        ("--layers x --num-experts", (n_layers, experts), MAX_ROW_DRAWS, "router scores per token"),
        ("--tokens x --layers x --num-experts", (n_tokens, n_layers, experts), MAX_DRAWS, "router scores"),
    ):
        total = math.prod(factors)
        if total > limit:
            shown = " x ".join(str(factor) for factor in factors)
            raise R3WireError.make(field, f"at most {limit:,} {what}", f"{shown} = {total:,}", raw=True)


def _median_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), result


def _timed_lines(fn: Callable[[], Any]) -> list[str]:
    """The body of ``fn``: the exact lines a row of the table timed (empty if the source is not available)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return []
    body = textwrap.dedent("".join(source.splitlines(keepends=True)[1:]))
    return [line for line in body.splitlines() if line.strip()]


# The shape of the workload README.md and docs/performance.md report (benchmarks/run.py's W1).
_README_TOKENS = 8192
_QWEN3_30B = (48, 8, 128)


def run_demo(
    *,
    tokens: int = 4096,
    layers: int = 48,
    top_k: int = 8,
    num_experts: int = 128,
    repeat: int = 5,
    seed: int = 0,
    out: TextIO,
) -> None:
    """Generate a Qwen3-30B-A3B-like rollout, send it through each transport, and print sizes and timings.

    Prints the workload first and, after the table, the lines of code each row timed, so its numbers can be
    compared with the README's (benchmarks/run.py's W1: 8192 tokens of the same model shape).

    Raises:
        R3WireError: an argument is out of range (see :func:`check_demo_arguments`).
        AssertionError: a round trip did not reproduce the routes exactly (a bug: please report it).
    """
    check_demo_arguments(tokens=tokens, layers=layers, top_k=top_k, num_experts=num_experts, repeat=repeat)
    routes = synthetic_routes(tokens, layers=layers, top_k=top_k, num_experts=num_experts, seed=seed)
    model = "Qwen3-30B-A3B" if (layers, top_k, num_experts) == _QWEN3_30B else "custom"
    print(
        f"workload: one rollout, {model} shape: {tokens} tokens x {layers} MoE layers x top-{top_k} of "
        f"{num_experts} experts = {routes.size:,} expert ids ({routes.nbytes / 1e6:.1f} MB as int32 in the engine)"
        f"\n          synthetic routing (r3wire.synthetic.synthetic_routes: skewed per-layer popularity, "
        f"token-to-token reuse, seed {seed})",
        file=out,
    )
    if (tokens, model) != (_README_TOKENS, "Qwen3-30B-A3B"):
        print(
            f"          README.md and docs/performance.md report W1 ({_README_TOKENS} tokens, Qwen3-30B-A3B shape, "
            f"benchmarks/run.py); for that workload: --tokens {_README_TOKENS}",
            file=out,
        )
    print(f"base64 back end: {BACKEND}; timings are medians of {repeat} runs on this machine\n", file=out)

    def json_lists() -> Any:
        text = json.dumps({"routed_experts": routes.tolist()})
        return text, np.asarray(json.loads(text)["routed_experts"], dtype=np.int32)

    def orjson_numpy() -> Any:
        text = orjson.dumps({"routed_experts": routes}, option=orjson.OPT_SERIALIZE_NUMPY)
        return text, np.asarray(orjson.loads(text)["routed_experts"], dtype=np.int32)

    def r3wire_envelope() -> Any:
        text = orjson.dumps({"routed_experts": encode_routes(routes, num_experts=num_experts)})
        return text, decode_routes(orjson.loads(text)["routed_experts"], num_experts=num_experts)

    def r3wire_response() -> Any:
        text = dumps({"routed_experts": routes}, num_experts=num_experts)
        return text, loads(text, num_experts=num_experts)["routed_experts"]

    def r3wire_packed() -> Any:
        text = dumps({"routed_experts": routes}, num_experts=num_experts, pack_bits=True)
        return text, loads(text, num_experts=num_experts)["routed_experts"]

    def r3wire_frame() -> Any:
        frame = encode_routes_frame(routes, num_experts=num_experts)
        return frame, decode_routes_frame(frame, num_experts=num_experts)

    rows = []
    for name, fn, n in (
        ("JSON lists (json.dumps(arr.tolist()))", json_lists, max(1, repeat // 2)),
        ("orjson OPT_SERIALIZE_NUMPY", orjson_numpy, max(1, repeat // 2)),
        ("r3wire envelope (encode_routes)", r3wire_envelope, repeat),
        ("r3wire.dumps / r3wire.loads", r3wire_response, repeat),
        ("r3wire.dumps(pack_bits=True)", r3wire_packed, repeat),
        ("r3wire binary frame (no JSON)", r3wire_frame, repeat),
    ):
        ms, (text, back) = _median_ms(fn, n)
        if not np.array_equal(back, routes):
            raise AssertionError(f"{name}: round trip changed the routes")
        rows.append((name, len(text), ms, _timed_lines(fn)))

    base_bytes, base_ms = rows[0][1], rows[0][2]
    print(f"{'transport':40} {'payload':>12} {'round trip':>12} {'smaller':>8} {'faster':>8}", file=out)
    for name, size, ms, _ in rows:
        print(
            f"{name:40} {size / 1e6:>9.2f} MB {ms:>9.1f} ms {base_bytes / size:>7.1f}x {base_ms / ms:>7.1f}x",
            file=out,
        )
    print(
        "\nround trip = encode -> bytes -> parse -> decode; every transport was checked exact."
        f"\nWhat each row timed (routes: the int32 array above; num_experts = {num_experts}; dumps, loads and"
        " the *_routes* functions are r3wire's):",
        file=out,
    )
    for name, _, _, lines in rows:
        print(f"  {name}:", *(f"      {line}" for line in lines), sep="\n", file=out)
    print("More workloads and baselines: benchmarks/run.py (docs/performance.md).", file=out)
