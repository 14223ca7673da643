"""The ``r3wire`` command line (also ``python -m r3wire``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    from r3wire.demo import run_demo  # noqa: PLC0415  # keep `r3wire --help` fast

    run_demo(
        tokens=args.tokens,
        layers=args.layers,
        top_k=args.top_k,
        num_experts=args.num_experts,
        repeat=args.repeat,
        out=sys.stdout,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``r3wire`` command."""
    parser = argparse.ArgumentParser(prog="r3wire", description="Wire codec for MoE routed-expert arrays.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="compare r3wire with JSON lists on a realistic generated rollout")
    demo.add_argument("--tokens", type=int, default=4096, help="token positions (default: 4096)")
    demo.add_argument("--layers", type=int, default=48, help="MoE layers (default: 48)")
    demo.add_argument("--top-k", type=int, default=8, help="experts per token and layer (default: 8)")
    demo.add_argument("--num-experts", type=int, default=128, help="experts per layer (default: 128)")
    demo.add_argument("--repeat", type=int, default=5, help="timing repetitions (default: 5)")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code
