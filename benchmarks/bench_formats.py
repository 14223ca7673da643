"""Write and read one realistic rollout in every engine format r3wire.formats supports; print a table.

    python benchmarks/bench_formats.py [--tokens 8192] [--layers 48] [--top-k 8] [--num-experts 128] [--json]

Times are medians of --repeat runs on whatever machine this is: compare rows, not absolute numbers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import orjson
from _timing import median_ms

from r3wire import _base64
from r3wire.formats import FORMATS, read, write
from r3wire.synthetic import synthetic_routes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--num-experts", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    args = parser.parse_args()
    routes = synthetic_routes(args.tokens, layers=args.layers, top_k=args.top_k, num_experts=args.num_experts)
    shape = {"num_layers": args.layers, "top_k": args.top_k}
    rows: list[dict[str, Any]] = []
    for name, fmt in FORMATS.items():
        if fmt.extra == "zstd":
            try:
                import zstandard  # noqa: F401, PLC0415
            except ImportError:
                print(f"skipping {name}: zstandard not installed", file=sys.stderr)
                continue
        payload: Any = write(routes, name)
        # What is sent: a text payload as it is, a JSON one (an object, or fireworks-matrices' list) as its text.
        wire = payload.encode() if isinstance(payload, str) else orjson.dumps(payload)
        if not np.array_equal(read(payload, name, **shape).routes, routes):
            raise SystemExit(f"{name}: round trip changed the ids")

        def write_once(name: str = name) -> object:
            return write(routes, name)

        def read_once(payload: Any = payload, name: str = name) -> object:
            return read(payload, name, **shape)

        write_ms = median_ms(write_once, args.repeat)
        read_ms = median_ms(read_once, args.repeat)
        rows.append({"format": name, "bytes": len(wire), "write_ms": write_ms, "read_ms": read_ms})
    print(f"{args.tokens} tokens x {args.layers} layers x {args.top_k} top_k, {args.num_experts} experts; "
          f"base64 back end: {_base64.BACKEND}; medians of {args.repeat}")  # fmt: skip
    print(f"{'format':<16} {'payload MB':>10} {'write ms':>9} {'read ms':>8}")
    for row in rows:
        print(f"{row['format']:<16} {row['bytes'] / 1e6:>10.2f} {row['write_ms']:>9.2f} {row['read_ms']:>8.2f}")
    if args.json:
        print(orjson.dumps({"shape": list(routes.shape), "backend": _base64.BACKEND, "results": rows}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
