"""The ``r3wire`` command line (also ``python -m r3wire``)."""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import re
import stat
import sys
from collections.abc import Sequence
from typing import IO, Any, NoReturn

from r3wire.demo import MAX_DRAWS, MAX_IDS, MAX_REPEAT, MAX_ROW_DRAWS, MAX_TOKEN_LAYERS, run_demo
from r3wire.errors import DecodeError, EncodeError, R3WireError, describe

__all__ = ["main"]

_PROG = "r3wire"
_MAX_MESSAGE = 2000

# The largest input read by default. A whole response for a 128k-token GLM-4.5 rollout (92 layers x top-8) is about
# 0.4 GB even as JSON lists, and parsing JSON lists takes several times the input in memory, so a larger file is
# almost surely not one payload; an endless stream (/dev/zero) stops here, after about a second.
_DEFAULT_MAX_INPUT = 1 << 30
_CHUNK = 1 << 24  # a stream is read 16 MiB at a time, so an endless one stops at the limit, not out of memory
_SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

# The image formats --plot writes, picked by the file's extension: a raster for a quick look and two vector formats
# for documents, written by every matplotlib release the plot extra allows with nothing else installed (JPEG would
# blur the heatmap's cells). A path without one of them is refused, not given ".png" behind the user's back
# (matplotlib's default), so the path reported is always the file written.
_PLOT_FORMATS = ("png", "svg", "pdf")


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage mistake reported the way every other error is: one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(f"{message} (see {self.prog} --help)".split())
        self.exit(2, f"{self.prog}: error: {text[:_MAX_MESSAGE]}\n")


def _demo(args: argparse.Namespace) -> int:
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

    raw = _read_stdin(args.max_input_bytes) if args.file == "-" else _read_file(args.file, args.max_input_bytes)
    # An SGLang payload of zero rows is the empty string (what `convert --to sglang` writes for them).
    _check_text(raw, _input_name(args.file), empty=args.format == "sglang")
    payload = load_payload(raw)
    if args.format == "auto" and isinstance(payload, (str, bytes)) and _is_json(payload):
        # --dtype reaches read_response too: SGLang bodies whose routes come without routed_experts_dtype
        # (sgl_ext, dynamo's nvext) are read in it; other formats carry their own.
        results = formats.read_response(
            payload, num_layers=args.num_layers, top_k=args.top_k, num_experts=args.num_experts, dtype=args.dtype
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
    """JSON text that may be a response body: an object, or a list of them (a batch). A list of anything else is
    a payload (json-lists, fireworks-matrices), which read_response refuses as a batch."""
    head = payload[:66]
    text = head.decode("latin-1") if isinstance(head, bytes) else head
    if text[:1] == "{":
        return True
    if text[:1] != "[":
        return False
    return text[1:65].lstrip(" \t\r\n")[:1] in ("{", "]")


def _input_name(file: str) -> str:
    return "standard input" if file == "-" else f"input {file!r}"


def _read_stdin(limit: int) -> bytes:
    stdin = sys.stdin
    if stdin is None or stdin.closed:  # `r3wire inspect - <&-`: Python starts with no sys.stdin at all
        raise R3WireError.make("standard input", "open (FILE is -)", "a closed stream", raw=True)
    source = getattr(stdin, "buffer", None)
    if source is None:
        raise R3WireError.make("standard input", "a byte stream (FILE is -)", type(stdin).__name__, raw=True)
    return _read_bounded(source, limit, "standard input")


def _read_file(path: str, limit: int) -> bytes:
    if "\0" in path:  # open() would raise ValueError: no file has such a name
        raise R3WireError.make(
            "FILE", "a file name without NUL characters, or - for standard input", repr(path), raw=True
        )
    with open(path, "rb") as handle:
        return _read_bounded(handle, limit, _input_name(path))


def _read_bounded(handle: IO[bytes], limit: int, name: str) -> bytes:
    """All of ``handle``, refused by ``name`` as soon as it holds more than ``limit`` bytes."""
    size = _regular_file_size(handle)
    if size is not None and size > limit:
        raise _too_large(name, limit, f"{size:,} bytes")
    # A regular file is read in one call (one allocation); a stream (pipe, device) in chunks.
    want = size + 1 if size is not None else _CHUNK
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = handle.read(min(want, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_large(name, limit, f"more than {limit:,} bytes")
        want = _CHUNK
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _regular_file_size(handle: IO[bytes]) -> int | None:
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError):  # an in-memory stream has no file descriptor
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _too_large(name: str, limit: int, got: str) -> R3WireError:
    return DecodeError.make(name, f"at most {limit:,} bytes (raise the limit with --max-input-bytes)", got, raw=True)


def _check_text(raw: bytes, name: str, *, empty: bool = False) -> None:
    """Refuse, by name, an input no reader can make sense of before any reader gives a vaguer reason; ``empty``:
    an empty (or whitespace) input is a payload of the format given."""
    if not empty and (not raw or raw.isspace()):
        got = "an empty input" if not raw else "only whitespace"
        raise DecodeError.make(name, "a routes payload or a response body", got, raw=True)
    if raw[:64].lstrip().startswith(codecs.BOM_UTF8):
        raise DecodeError.make(
            name,
            "UTF-8 without a byte order mark (JSON texts carry none: RFC 8259 section 8.1)",
            "a UTF-8 byte order mark (EF BB BF) at its start",
            raw=True,
        )


def _parse_size(text: str) -> int:
    """``--max-input-bytes``: a byte count, optionally with K, M, G or T (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d{1,20})\s*(?:([kmgt])(?:i?b)?|b)?\s*", text.lower())
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"must be a positive byte count such as 4G or 4294967296, got {text!r}")
    return int(match.group(1)) * _SIZE_SUFFIXES[match.group(2) or ""]


def _check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` path that would not get exactly that file, before any input is read."""
    *others, last = (f".{name}" for name in _PLOT_FORMATS)
    expected = f"a file name ending in {', '.join(others)} or {last} (such as load.png: the extension picks the format)"
    if "\0" in path:
        raise R3WireError.make("--plot", "a file name without NUL characters", repr(path), raw=True)
    if os.path.isdir(path):
        raise R3WireError.make("--plot", "a file name, not a directory", repr(path), raw=True)
    if os.path.splitext(path)[1][1:].lower() not in _PLOT_FORMATS:
        raise R3WireError.make("--plot", expected, repr(path), raw=True)
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise R3WireError.make("--plot", "a file in an existing directory", repr(path), raw=True)


def _plot_path(path: str, index: int, count: int) -> str:
    if count == 1:
        return path
    stem, extension = os.path.splitext(path)
    return f"{stem}-{index}{extension}"


def _plot(summary: Any, where: str) -> None:
    from r3wire.formats._inspect import plot_load  # noqa: PLC0415

    try:
        plot_load(summary, where)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise R3WireError.make("--plot", "a file this process can write", f"{where!r} ({reason})", raw=True) from exc


def _write(data: bytes) -> None:
    """Write bytes to standard output (its text stream when an in-process caller replaced it with one)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(data.decode())
    else:
        buffer.write(data)


def _check_stdout(command: str) -> None:
    stdout = sys.stdout
    if stdout is None or stdout.closed:  # `r3wire convert FILE >&-`: Python starts with no sys.stdout at all
        raise R3WireError.make(
            "standard output", f"open ({command} writes its result there)", "a closed stream", raw=True
        )


def _inspect(args: argparse.Namespace) -> int:
    import orjson  # noqa: PLC0415

    from r3wire.formats._inspect import summarize  # noqa: PLC0415

    if args.plot is not None:
        _check_plot_path(args.plot)
    results, size, is_response = _read_input(args)
    summaries = [summarize(result, size) for result in results]
    if args.plot is not None:
        for index, summary in enumerate(summaries):
            where = _plot_path(args.plot, index, len(summaries))
            _plot(summary, where)
            _say(f"{_PROG}: wrote the expert load heatmap of {summary.path or 'the payload'} to {where}")
    if args.json:
        out = [summary.to_json() for summary in summaries] if is_response else summaries[0].to_json()
        _write(orjson.dumps(out) + b"\n")
    else:
        print("\n\n".join(summary.to_text() for summary in summaries))
    return 0


def _convert(args: argparse.Namespace) -> int:
    import orjson  # noqa: PLC0415

    from r3wire import formats  # noqa: PLC0415

    results, _, _ = _read_input(args)
    # One line per routes field: a response with several choices converts to several payloads, in order. All are
    # converted before any is written, so a failure leaves no partial output paired with the wrong choices.
    lines = []
    for result in results:
        try:
            out = formats.write(
                result,
                args.to,
                dtype=args.to_dtype,
                num_experts=args.num_experts,
                pack_bits=True if args.pack_bits else None,
            )
        except EncodeError as exc:
            if result.path is None:
                raise
            # Which routes field could not be converted: the writer names only its own argument.
            raise EncodeError(f"{result.path}: {exc}", field=exc.field, expected=exc.expected, got=exc.got) from None
        lines.append((out.encode("ascii") if isinstance(out, str) else orjson.dumps(out)) + b"\n")
    _write(b"".join(lines))
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
    command.add_argument(
        "--max-input-bytes",
        type=_parse_size,
        default=_DEFAULT_MAX_INPUT,
        metavar="N",
        help="refuse a larger input (default: 1G; K, M, G, T are powers of 1024)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``r3wire`` command."""
    parser = _Parser(prog=_PROG, description="Wire codec for MoE routed-expert arrays.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="compare r3wire with JSON lists on a realistic generated rollout",
        description="Compare r3wire with JSON lists on a realistic generated rollout.",
        epilog=(
            f"Limits, so that a typo cannot start a multi-GB run (at the limits a run needs 1 to 1.5 GB of memory "
            f"and minutes): tokens x layers x top_k at most {MAX_IDS:,} expert ids (32k tokens of "
            f"Qwen3-30B-A3B are 12.6M); tokens x layers at most {MAX_TOKEN_LAYERS:,}; tokens x layers x num_experts "
            f"at most {MAX_DRAWS:,} synthetic router scores; layers x num_experts at most {MAX_ROW_DRAWS:,}; "
            f"num_experts at most 2**31 (int32 ids); repeat at most {MAX_REPEAT}. Every value is at least 1 (JSON "
            "lists cannot carry an empty array's shape), and top_k at most num_experts."
        ),
    )
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
    inspect.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw the layers x experts load heatmap to FILE.png, .svg or .pdf (needs matplotlib; several routes "
        "fields: FILE-0.png, FILE-1.png, ...)",
    )
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
    """Run the command line and return its exit status.

    0 success, 1 the reader of the output went away (``| head``), 2 bad input or out of memory, 130 interrupted.
    Every error is one line on standard error, ``r3wire: error: <field> must be <expected>, got <got>``; "internal
    error ... please report this input" is kept for bugs in r3wire.

    Raises:
        SystemExit: ``--help`` (status 0), or a usage mistake (status 2, one line), as argparse does.
    """
    parser = build_parser()
    if argv is not None:
        given: list[Any] = list(argv)  # typed str, but callers in process may pass anything
        for item in given:
            if not isinstance(item, str):  # argparse would fail on it with a traceback
                parser.error(f"every argument must be a string, got {describe(item)}")
        argv = given
    args = parser.parse_args(argv)
    try:
        _check_stdout(args.command)
        code: int = args.handler(args)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (R3WireError, OSError, ImportError) as exc:
        # Bad input is the user's to fix, not ours to debug: one line, no traceback, argparse's exit status.
        _error(parser.prog, str(exc))
        return 2
    except KeyboardInterrupt:
        _error(parser.prog, "interrupted")
        return 130  # the shell's status for a process stopped by SIGINT
    except MemoryError:
        # Reads are bounded (--max-input-bytes, the decoders' element limit), so this is a payload within them
        # that does not fit this machine, not a bug to report.
        _error(
            parser.prog,
            "out of memory: what this command reads or builds does not fit in this process's memory (an input "
            "is at most --max-input-bytes, each array decoded from it at most 2**30 ids)",
        )
        return 2
    except (Exception, RecursionError) as exc:  # the promise: never a traceback, whatever the file
        _error(parser.prog, f"internal error {type(exc).__name__} (please report this input): {exc}")
        return 2
    return code


def _error(prog: str, message: str) -> None:
    text = " ".join(message.split())
    _say(f"{prog}: error: {text[:_MAX_MESSAGE]}")


def _say(line: str) -> None:
    """Write a line to standard error; with it closed, say nothing.

    ``print(file=None)`` would write to standard output instead, into the result a pipeline reads (`2>&-`).
    """
    stderr = sys.stderr
    if stderr is None:
        return
    # Not writable, or closed by an in-process caller: there is nowhere left to say it.
    with contextlib.suppress(OSError, ValueError):
        print(line, file=stderr)
