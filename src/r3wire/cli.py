"""The ``r3wire`` command line (also ``python -m r3wire``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from r3wire.errors import DecodeError, R3WireError

__all__ = ["main"]

_PROG = "r3wire"
_MAX_MESSAGE = 2000


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


def _read_input(args: argparse.Namespace) -> tuple[list[Any], int, bool]:
    """The file's routes: every routes field of a whole response (with its path), or the one payload it holds.

    Returns the results, the file size, and whether the file was read as a response body.
    """
    from r3wire import formats  # noqa: PLC0415
    from r3wire.formats._inspect import load_payload  # noqa: PLC0415

    raw = sys.stdin.buffer.read() if args.file == "-" else _read_file(args.file)
    payload = load_payload(raw)
    if args.format == "auto" and args.dtype is None and isinstance(payload, (str, bytes)) and _is_json(payload):
        results = formats.read_response(
            payload, num_layers=args.num_layers, top_k=args.top_k, num_experts=args.num_experts
        )
        # A bare envelope is found at "$": it is one payload, not a response.
        if any(result.path != "$" for result in results):
            return results, len(raw), True
        if not results and not _detectable(formats, payload, args):
            # Nothing anywhere in the document is routes: say that, not why its top object is no payload.
            raise DecodeError.make(
                None,
                "a response body or payload holding routes (was the engine asked to return routed experts?)",
                "a JSON document with no routes field",
                raw=True,
            )
    result = formats.read(
        payload,
        args.format,
        num_layers=args.num_layers,
        top_k=args.top_k,
        dtype=args.dtype,
        num_experts=args.num_experts,
    )
    return [result], len(raw), False


def _detectable(formats: Any, payload: object, args: argparse.Namespace) -> bool:
    try:
        formats.detect(payload, num_layers=args.num_layers, top_k=args.top_k)
    except R3WireError:
        return False
    return True


def _is_json(payload: str | bytes) -> bool:
    head = payload[:1]
    return head in ("{", "[", b"{", b"[")


def _read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _plot_path(path: str, index: int, count: int) -> str:
    if count == 1:
        return path
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}-{index}.{suffix}" if dot and "/" not in suffix else f"{path}-{index}"


def _inspect(args: argparse.Namespace) -> int:
    import orjson  # noqa: PLC0415

    from r3wire.formats._inspect import plot_load, summarize  # noqa: PLC0415

    results, size, is_response = _read_input(args)
    summaries = [summarize(result, size) for result in results]
    if args.plot:
        for index, summary in enumerate(summaries):
            where = _plot_path(args.plot, index, len(summaries))
            plot_load(summary, where)
            print(
                f"{_PROG}: wrote the expert load heatmap of {summary.path or 'the payload'} to {where}", file=sys.stderr
            )
    if args.json:
        out = [summary.to_json() for summary in summaries] if is_response else summaries[0].to_json()
        sys.stdout.buffer.write(orjson.dumps(out) + b"\n")
    else:
        print("\n\n".join(summary.to_text() for summary in summaries))
    return 0


def _convert(args: argparse.Namespace) -> int:
    import orjson  # noqa: PLC0415

    from r3wire import formats  # noqa: PLC0415

    results, _, _ = _read_input(args)
    # One line per routes field: a response with several choices converts to several payloads, in order.
    for result in results:
        out = formats.write(
            result,
            args.to,
            dtype=args.to_dtype,
            num_experts=args.num_experts,
            pack_bits=True if args.pack_bits else None,
        )
        sys.stdout.buffer.write((out.encode("ascii") if isinstance(out, str) else orjson.dumps(out)) + b"\n")
    return 0


def _add_input_arguments(command: argparse.ArgumentParser, format_names: Sequence[str]) -> None:
    command.add_argument("file", metavar="FILE", help="the payload file, or - for standard input")
    command.add_argument(
        "--format",
        default="auto",
        choices=["auto", *format_names],
        help="the input format (default: auto-detect where unambiguous)",
    )
    command.add_argument("--num-layers", type=int, help="layers per row (needed by sglang and fireworks-r3v1)")
    command.add_argument("--top-k", type=int, help="experts per layer (needed by sglang and fireworks-r3v1)")
    command.add_argument("--dtype", help="sglang bare string element type (default: int32)")
    command.add_argument("--num-experts", type=int, help="the model's expert count: ids must be below it")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``r3wire`` command."""
    parser = argparse.ArgumentParser(prog=_PROG, description="Wire codec for MoE routed-expert arrays.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="compare r3wire with JSON lists on a realistic generated rollout")
    demo.add_argument("--tokens", type=int, default=4096, help="token positions (default: 4096)")
    demo.add_argument("--layers", type=int, default=48, help="MoE layers (default: 48)")
    demo.add_argument("--top-k", type=int, default=8, help="experts per token and layer (default: 8)")
    demo.add_argument("--num-experts", type=int, default=128, help="experts per layer (default: 128)")
    demo.add_argument("--repeat", type=int, default=5, help="timing repetitions (default: 5)")
    demo.set_defaults(handler=_demo)

    # Format names are listed here without importing r3wire.formats, so `r3wire --help` stays fast.
    format_names = [
        "r3wire",
        "skyrl",
        "sglang",
        "vllm-npy",
        "nemo-rl",
        "prime-rl",
        "prime-rl-b85",
        "fireworks-r3v1",
        "fireworks-trace",
        "fireworks-matrices",
        "json-lists",
    ]
    inspect = commands.add_parser("inspect", help="show a routed-experts payload's format, shape, ids and load")
    _add_input_arguments(inspect, format_names)
    inspect.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of text (a list, one object per routes field, for a response)",
    )
    inspect.add_argument("--plot", metavar="FILE.png", help="draw the layers x experts load heatmap (needs matplotlib)")
    inspect.set_defaults(handler=_inspect)

    convert = commands.add_parser("convert", help="rewrite a routed-experts payload in another format, to stdout")
    _add_input_arguments(convert, format_names)
    convert.add_argument("--to", default="r3wire", choices=format_names, help="the output format (default: r3wire)")
    convert.add_argument("--to-dtype", help="the output element type, where the format allows a choice")
    convert.add_argument(
        "--pack-bits", action="store_true", help="r3wire output: bit-packed ids (kept anyway when the input was packed)"
    )
    convert.set_defaults(handler=_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (R3WireError, OSError, ImportError) as exc:
        # Bad input is the user's to fix, not ours to debug: one line, no traceback, argparse's exit status.
        _error(parser.prog, str(exc))
        return 2
    except (Exception, RecursionError) as exc:  # the promise: never a traceback, whatever the file
        _error(parser.prog, f"internal error {type(exc).__name__} (please report this input): {exc}")
        return 2
    return code


def _error(prog: str, message: str) -> None:
    text = " ".join(message.split())
    print(f"{prog}: error: {text[:_MAX_MESSAGE]}", file=sys.stderr)
