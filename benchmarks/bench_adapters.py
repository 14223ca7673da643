"""Adapter costs: sampled logprobs from vLLM's two layouts, the completion fragment, decoding into a tensor.

    python benchmarks/bench_adapters.py [--tokens 8192] [--top 5] [--repeat 15] [--json out.json]

Needs torch and vllm (R3WIRE_WITH=torch,vllm python3 scripts/dev.py test installs both). Prints the median of
``--repeat`` runs per case; compare ratios, not absolute times, on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import torch
from _timing import median_ms
from vllm.logprobs import FlatLogprobs, Logprob
from vllm.outputs import CompletionOutput

import r3wire
from r3wire.torch import decode_routes_tensor
from r3wire.vllm import decode_completion, encode_completion, sampled_logprobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--top", type=int, default=5, help="top logprobs per position besides the sampled one")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    n, top = args.tokens, args.top
    tokens = rng.integers(0, 150_000, size=n).tolist()
    positions: list[Any] = []
    for token in tokens:
        ids = [token, *rng.integers(0, 150_000, size=top).tolist()]
        positions.append({i: Logprob(logprob=float(-rng.random() * 5), rank=r + 1) for r, i in enumerate(ids)})
    flat = FlatLogprobs()
    flat.extend(positions)
    routes = rng.integers(0, 128, size=(n + 1024, 48, 8), dtype=np.uint8)  # Qwen3-30B-A3B-like, 1024-token prompt

    def output(logprobs: Any) -> Any:
        return CompletionOutput(
            index=0, text="", token_ids=tokens, cumulative_logprob=None, logprobs=logprobs, routed_experts=routes
        )

    as_list, as_flat = output(positions), output(flat)
    fragment = orjson.dumps(encode_completion(as_list, num_experts=128))
    envelope = r3wire.encode_routes(routes, num_experts=128)
    cases: dict[str, Callable[[], object]] = {
        "sampled_logprobs, list[dict]": lambda: sampled_logprobs(as_list),
        "sampled_logprobs, FlatLogprobs (vectorised)": lambda: sampled_logprobs(as_flat),
        "FlatLogprobs via flat[i] per position (reference)": lambda: [flat[i].get(t) for i, t in enumerate(tokens)],
        "encode_completion + orjson.dumps": lambda: orjson.dumps(encode_completion(as_list, num_experts=128)),
        "decode_completion (from bytes)": lambda: decode_completion(fragment, num_experts=128),
        "decode_routes_tensor (zero-copy)": lambda: decode_routes_tensor(envelope, num_experts=128),
        "decode_routes + torch.tensor (copy)": lambda: torch.tensor(r3wire.decode_routes(envelope)),
    }
    results = {name: median_ms(fn, args.repeat) for name, fn in cases.items()}
    print(f"{n} generated tokens, top-{top} logprobs, routes {list(routes.shape)} uint8; median of {args.repeat}")
    for name, ms in results.items():
        print(f"  {name:<52} {ms:9.2f} ms")
    if args.json:
        meta = {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "torch": torch.__version__,
            "r3wire": r3wire.__version__,
        }
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "tokens": n, "top": top, "median_ms": results}, f, indent=2)


if __name__ == "__main__":
    main()
