#!/usr/bin/env python3
"""Benchmark: walking a parsed response body (read_response, loads and detect of ``response.json()``).

    python benchmarks/bench_walk.py [--tokens 8192] [--top-logprobs 0] [--repeats 21] [--json PATH]

The body is what a vLLM chat completion returns for one 8k-token call of a Qwen3-30B-like model: routes as a
base64 ``.npy`` string, ``token_ids``, the response's ``prompt_token_ids`` and ``logprobs.content`` (one object per
completion token, with its ``bytes`` and ``top_logprobs`` lists). The walkers guard every in-process document
against reference cycles and shared containers; this measures what that costs on a document that has neither.
``dumps``/``loads`` rows write the body with the routes as an array (the envelope ``dumps`` makes) and read that
text back: their long ``logprobs.content`` list is what ``dumps``/``loads`` first hand to orjson in pieces.
Run it against two checkouts (``PYTHONPATH=<checkout>/src``) to compare. Times are wall-clock medians on a shared
machine, each beside ``orjson.loads`` of the same body in the same run (the ratio is what to compare).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from _timing import describe_machine, median_ms

import r3wire
from r3wire import formats
from r3wire.formats._response import find_routes

LAYERS, TOP_K, EXPERTS = 48, 8, 128


def vllm_chat_body(tokens: int, top_logprobs: int, seed: int = 0) -> dict[str, Any]:
    """A vLLM chat completion for one call of ``tokens`` tokens (one eighth prompt), routes and logprobs on."""
    rng = np.random.default_rng(seed)
    prompt = tokens // 8
    completion = tokens - prompt
    routes = rng.integers(0, EXPERTS, size=(tokens - 1, LAYERS, TOP_K), dtype=np.uint8)
    buffer = io.BytesIO()
    np.save(buffer, routes)
    content = []
    for token_id in rng.integers(0, 150_000, size=completion).tolist():
        text = f"t{token_id}"
        top = [
            {"token": f"a{k}", "logprob": float(-rng.exponential()), "bytes": list(f"a{k}".encode())}
            for k in range(top_logprobs)
        ]
        entry = {"token": text, "logprob": float(-rng.exponential()), "bytes": list(text.encode()), "top_logprobs": top}
        content.append(entry)
    return {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "created": 0,
        "model": "Qwen/Qwen3-30B-A3B",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "x" * (4 * completion), "tool_calls": []},
                "logprobs": {"content": content},
                "finish_reason": "length",
                "stop_reason": None,
                "token_ids": rng.integers(0, 150_000, size=completion).tolist(),
                "routed_experts": base64.b64encode(buffer.getvalue()).decode(),
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": tokens},
        "prompt_logprobs": None,
        "prompt_token_ids": rng.integers(0, 150_000, size=prompt).tolist(),
    }


def _detect(parsed: dict[str, Any]) -> None:
    with contextlib.suppress(r3wire.R3WireError):
        formats.detect(parsed)  # a whole body: refused with the paths of its routes, found by the same walk


def run(tokens: int, top_logprobs: int, repeats: int) -> dict[str, Any]:
    body = vllm_chat_body(tokens, top_logprobs)
    text = orjson.dumps(body)
    parsed = orjson.loads(text)
    (result,) = formats.read_response(parsed, num_experts=EXPERTS)
    assert result.routes.shape == (tokens - 1, LAYERS, TOP_K)
    # What a server writes: the same body with the routes as an array (dumps makes the envelope), and its text.
    served = dict(parsed, choices=[dict(parsed["choices"][0], routed_experts=result.routes)])
    served_text = r3wire.dumps(served, num_experts=EXPERTS)
    cases = [
        ("orjson.loads(text) (reference)", lambda: orjson.loads(text)),
        ("orjson.dumps(parsed)", lambda: orjson.dumps(parsed)),
        ("dumps(parsed, routes array)", lambda: r3wire.dumps(served, num_experts=EXPERTS)),
        ("loads(its text)", lambda: r3wire.loads(served_text)),
        ("find_routes(parsed)", lambda: list(find_routes(parsed))),
        ("detect(parsed)", lambda: _detect(parsed)),
        ("read_response(parsed)", lambda: formats.read_response(parsed, num_experts=EXPERTS)),
        ("loads(parsed)", lambda: r3wire.loads(parsed)),
        ("read_response(text)", lambda: formats.read_response(text, num_experts=EXPERTS)),
    ]
    times = [(name, median_ms(fn, repeats)) for name, fn in cases]
    reference = times[0][1]
    rows = [{"method": name, "median_ms": ms, "vs_orjson_loads": ms / reference} for name, ms in times]
    return {
        "benchmark": "bench_walk",
        "tokens": tokens,
        "top_logprobs": top_logprobs,
        "body_bytes": len(text),
        "repeats": repeats,
        "r3wire_source": str(Path(r3wire.__file__).resolve().parent),
        "rows": rows,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "orjson": orjson.__version__},
        "machine": describe_machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--top-logprobs", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.tokens, args.top_logprobs, args.repeats)
    print(
        f"vLLM chat body: {args.tokens} tokens, top_logprobs={args.top_logprobs}, {result['body_bytes']} bytes; "
        f"r3wire from {result['r3wire_source']}"
    )
    print(f"{'method':34} {'median ms':>10} {'x orjson.loads':>15}")
    for row in result["rows"]:
        print(f"{row['method']:34} {row['median_ms']:10.3f} {row['vs_orjson_loads']:15.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
