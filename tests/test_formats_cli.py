"""`r3wire inspect` and `r3wire convert`: what they print, and a one-line error with exit status 2 on bad input."""

from __future__ import annotations

import base64
import codecs
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from r3wire import decode_routes, encode_routes
from r3wire.cli import build_parser, main
from r3wire.formats import read, write
from r3wire.synthetic import synthetic_routes

ROUTES = synthetic_routes(40, layers=4, top_k=2, num_experts=64, seed=3)


def _run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "r3wire", *args], input=stdin, capture_output=True, check=False)


def _file(tmp_path: Path, payload: Any, name: str = "payload") -> str:
    path = tmp_path / name
    if isinstance(payload, dict):
        path.write_bytes(orjson.dumps(payload))
    elif isinstance(payload, bytes):
        path.write_bytes(payload)
    else:
        path.write_text(payload + "\n")
    return str(path)


def test_inspect_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl", start=9))
    assert main(["inspect", "--json", path]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["format"] == "prime-rl"
    assert report["shape"] == [40, 4, 2]
    assert report["dtype"] == "uint8"
    assert report["start"] == 9
    assert (report["min"], report["max"]) == (int(ROUTES.min()), int(ROUTES.max()))
    assert len(report["layers"]) == 4
    layer0 = ROUTES[:, 0, :].ravel()
    values, counts = np.unique(layer0, return_counts=True)
    most = int(np.max(counts))
    assert report["layers"][0]["distinct"] == len(values)
    top_id, top_share = report["layers"][0]["top"][0]
    assert top_share == pytest.approx(most / layer0.size, abs=1e-6)
    assert counts[list(values).index(top_id)] == most


def test_inspect_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "nemo-rl"))
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "nemo-rl" in out
    assert "[40, 4, 2]" in out
    assert "layer   3:" in out


def test_inspect_counts_missing_routes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mask = np.ones(40, dtype=bool)
    mask[5] = False
    path = _file(tmp_path, write(ROUTES, "nemo-rl", mask=mask))
    assert main(["inspect", "--json", path]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["missing_routes"] == 4  # one token x 4 layers
    assert report["min"] >= 0


def test_inspect_sglang_needs_the_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "sglang"))
    assert main(["inspect", path]) == 2
    assert "num_layers and top_k" in capsys.readouterr().err
    assert main(["inspect", "--json", "--num-layers", "4", "--top-k", "2", path]) == 0
    assert orjson.loads(capsys.readouterr().out)["format"] == "sglang"


@pytest.mark.parametrize(
    "body", [{"id": 1}, {"choices": [{"routed_experts": None, "token_ids": [1, 2]}]}, [{"text": "no routes"}]]
)
def test_inspect_says_when_a_body_holds_no_routes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: Any
) -> None:
    path = tmp_path / "body.json"
    path.write_bytes(orjson.dumps(body))
    for args in (["inspect", str(path)], ["inspect", "--json", str(path)]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert "no routes field" in err[0]
        assert "return routed experts" in err[0]


def test_inspect_raw_npy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = write(ROUTES, "vllm-npy")
    path = _file(tmp_path, base64.b64decode(text), "routes.npy")
    assert main(["inspect", "--json", path]) == 0
    assert orjson.loads(capsys.readouterr().out)["format"] == "vllm-npy"


@pytest.mark.parametrize("target", ["r3wire", "prime-rl", "vllm-npy", "nemo-rl", "sglang", "skyrl", "prime-rl-b85"])
def test_convert_through_stdin_and_stdout(target: str) -> None:
    source = write(ROUTES, "vllm-npy").encode()
    out = _run("convert", "--to", target, "-", stdin=source)
    assert out.returncode == 0, out.stderr
    text = out.stdout.strip()
    payload: Any = orjson.loads(text) if text.startswith(b"{") else text.decode()
    result = read(payload, target, num_layers=4, top_k=2)
    assert np.array_equal(result.routes, ROUTES)


def test_convert_defaults_to_the_r3wire_envelope(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "nemo-rl"))
    assert main(["convert", path]) == 0
    envelope = orjson.loads(capsys.readouterr().out)
    assert envelope["schema"] == "r3wire.routes"


def test_convert_to_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl"))
    assert main(["convert", "--to", "sglang", "--to-dtype", "uint16", path]) == 0
    assert orjson.loads(capsys.readouterr().out)["routed_experts_dtype"] == "uint16"


def test_convert_to_json_lists_refuses_a_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl"))
    assert main(["convert", "--to", "json-lists", "--to-dtype", "foo", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("r3wire: error: dtype must be None (json-lists carries no dtype")
    assert main(["convert", "--to", "json-lists", path]) == 0
    assert orjson.loads(capsys.readouterr().out) == ROUTES.tolist()


def test_convert_refuses_to_drop_a_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl", start=3))
    assert main(["convert", "--to", "vllm-npy", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("r3wire: error: start must be 0 or None")


@pytest.mark.parametrize(
    ("args", "stdin", "needle"),
    [
        (["inspect", "/nonexistent/file"], None, "No such file"),
        (["inspect", "-"], b"nrlre1:int16:1x1x1:AAA", "data must be"),
        (["inspect", "-"], b'{"data": "AA==", "shape": [1, 1], "start": 0}', "shape must be"),
        (["inspect", "-"], b"\xff\xfe", "UTF-8"),
        (["inspect", "--format", "sglang", "-"], b"AAAA", "num_layers"),
        (["convert", "--to", "fireworks-r3v1", "-"], b"nrlre1:int32:1x1x1:AAABAA==", "uint16"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], stdin: bytes | None, needle: str) -> None:
    out = _run(*args, stdin=stdin)
    assert out.returncode == 2
    err = out.stderr.decode()
    assert err.startswith("r3wire: error: ")
    assert err.count("\n") == 1
    assert needle in err
    assert "Traceback" not in err
    assert out.stdout == b""


# matplotlib releases older than pyparsing 3.3 use its old camelCase names; those warnings are not ours to fix.
@pytest.mark.filterwarnings(r"ignore:'\w+' deprecated - use:DeprecationWarning")
def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    path = _file(tmp_path, write(ROUTES, "prime-rl"))
    image = tmp_path / "load.png"
    assert main(["inspect", "--plot", str(image), path]) == 0
    assert image.read_bytes().startswith(b"\x89PNG")
    assert "prime-rl" in capsys.readouterr().out


def _response(routes: Any = ROUTES) -> dict[str, Any]:
    """A two-choice vLLM generate body: the second choice has no token ids or logprobs."""
    return {
        "choices": [
            {
                "index": 0,
                "token_ids": [1, 2, 3],
                "logprobs": {"content": [{"logprob": -0.5}, {"logprob": None}, {"logprob": -1.0}]},
                "routed_experts": write(routes, "vllm-npy"),
            },
            {"index": 1, "routed_experts": write(routes[:5], "skyrl")},
        ]
    }


def test_inspect_a_whole_response_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, _response())
    assert main(["inspect", "--json", path]) == 0
    first, second = orjson.loads(capsys.readouterr().out)
    assert (first["path"], first["format"], first["shape"]) == ("$.choices[0].routed_experts", "vllm-npy", [40, 4, 2])
    assert (first["tokens"], first["logprobs"], first["logprobs_clamped"]) == (3, 3, 1)
    assert (second["path"], second["format"], second["shape"]) == ("$.choices[1].routed_experts", "skyrl", [5, 4, 2])
    assert second["tokens"] is None


def test_inspect_a_whole_response_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, _response())
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "routes at     $.choices[0].routed_experts" in out
    assert "routes at     $.choices[1].routed_experts" in out
    assert "1 clamped" in out


def test_dtype_reads_a_whole_sglang_body_without_routed_experts_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # SGLang's OpenAI sgl_ext (and dynamo's nvext) forward the routes but not routed_experts_dtype.
    routes = ROUTES[:6].astype(np.uint8)
    body = {"choices": [{"index": 0, "sgl_ext": {"routed_experts": base64.b64encode(routes.tobytes()).decode()}}]}
    path = _file(tmp_path, body)
    shape = ["--num-layers", "4", "--top-k", "2"]
    assert main(["inspect", "--json", *shape, "--dtype", "uint8", path]) == 0
    (found,) = orjson.loads(capsys.readouterr().out)
    assert (found["path"], found["shape"]) == ("$.choices[0].sgl_ext.routed_experts", [6, 4, 2])
    assert main(["convert", *shape, "--dtype", "uint8", path]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert np.array_equal(decode_routes(orjson.loads(line)), routes)


def test_inspect_shows_num_experts_and_bits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, encode_routes(ROUTES, num_experts=64, pack_bits=True))
    assert main(["inspect", "--json", path]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert (report["num_experts"], report["bits"]) == (64, 6)
    assert main(["inspect", path]) == 0
    out = capsys.readouterr().out
    assert "num_experts   64" in out
    assert "bits          6" in out


def test_convert_keeps_num_experts_and_packing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, encode_routes(ROUTES, num_experts=64, pack_bits=True))
    assert main(["convert", path]) == 0
    envelope = orjson.loads(capsys.readouterr().out)
    assert (envelope["num_experts"], envelope["bits"]) == (64, 6)
    assert np.array_equal(decode_routes(envelope), ROUTES)


def test_convert_pack_bits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "nemo-rl"))
    assert main(["convert", "--pack-bits", "--num-experts", "64", path]) == 0
    envelope = orjson.loads(capsys.readouterr().out)
    assert envelope["bits"] == 6
    assert np.array_equal(decode_routes(envelope), ROUTES)
    assert main(["convert", "--pack-bits", "--to", "prime-rl", path]) == 2
    assert "pack_bits" in capsys.readouterr().err


def test_convert_a_response_writes_one_line_per_routes_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, _response())
    assert main(["convert", "--to", "prime-rl", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [read(orjson.loads(line), "prime-rl").routes.shape[0] for line in lines] == [40, 5]


def test_zero_rows_as_sglang_are_read_back_by_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang's payload for zero rows is the empty string: what `convert --to sglang` writes, read back when the
    # format and shape are given (without them an empty file is refused, by name).
    empty = np.zeros((0, 2, 3), dtype=np.int32)
    assert main(["convert", "--to", "sglang", _file(tmp_path, write(empty, "prime-rl"))]) == 0
    written = capsys.readouterr().out
    assert written == "\n"
    path = _file(tmp_path, written.strip(), "sglang")
    assert main(["convert", "--to", "prime-rl", "--format", "sglang", "--num-layers", "2", "--top-k", "3", path]) == 0
    assert read(orjson.loads(capsys.readouterr().out), "prime-rl").routes.shape == (0, 2, 3)
    assert main(["inspect", "--format", "sglang", "--num-layers", "2", "--top-k", "3", path]) == 0
    assert "top none (no row routed)" in capsys.readouterr().out
    assert main(["inspect", path]) == 2
    _one_line_error(capsys.readouterr().err, "got only whitespace")


def test_convert_of_a_response_names_the_choice_it_cannot_convert_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {
        "choices": [
            {"routed_experts": write(ROUTES, "prime-rl")},
            {"routed_experts": write(ROUTES, "prime-rl", start=4)},
        ]
    }
    assert main(["convert", "--to", "skyrl", _file(tmp_path, body, "body")]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # not the first choice's line, paired with nothing
    _one_line_error(err, "$.choices[1].routed_experts: start must be 0 or None")


@pytest.mark.filterwarnings(r"ignore:'\w+' deprecated - use:DeprecationWarning")
def test_plot_says_where_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    image = tmp_path / "load.png"
    assert main(["inspect", "--plot", str(image), _file(tmp_path, write(ROUTES, "prime-rl"))]) == 0
    assert str(image) in capsys.readouterr().err
    assert main(["inspect", "--plot", str(image), _file(tmp_path, _response(), "body")]) == 0
    err = capsys.readouterr().err
    for index in (0, 1):
        written = tmp_path / f"load-{index}.png"
        assert str(written) in err
        assert written.read_bytes().startswith(b"\x89PNG")


def _one_line_error(err: str, needle: str) -> None:
    assert err.startswith("r3wire: error: ")
    assert err.count("\n") == 1
    assert needle in err
    assert "internal error" not in err


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("heat", "--plot must be a file name ending in .png, .svg or .pdf"),  # matplotlib would write heat.png
        ("out.weird", "--plot must be a file name ending in .png, .svg or .pdf"),
        (".png", "--plot must be a file name ending in .png, .svg or .pdf"),  # matplotlib would write .png.png
        ("", "--plot must be a file name ending in .png, .svg or .pdf"),  # was silently ignored
        ("no/such/dir/load.png", "--plot must be a file in an existing directory"),
        ("load\0.png", "--plot must be a file name without NUL characters"),  # open() would raise ValueError
    ],
)
def test_plot_refuses_a_path_it_would_not_write_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str, needle: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = _file(tmp_path, write(ROUTES, "prime-rl"), "payload.json")
    assert main(["inspect", "--plot", name, path]) == 2
    out, err = capsys.readouterr()
    _one_line_error(err, needle)
    assert out == ""
    assert sorted(item.name for item in tmp_path.iterdir()) == ["payload.json"]


def test_plot_refuses_a_directory_before_reading_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir.png").mkdir()
    for target in (tmp_path, tmp_path / "dir.png"):
        assert main(["inspect", "--plot", str(target), str(tmp_path / "missing.json")]) == 2
        _one_line_error(capsys.readouterr().err, f"--plot must be a file name, not a directory, got {str(target)!r}")
    assert not tmp_path.with_suffix(".png").exists()  # matplotlib would have written <dir>.png


@pytest.mark.filterwarnings(r"ignore:'\w+' deprecated - use:DeprecationWarning")
@pytest.mark.parametrize(("name", "magic"), [("load.svg", b"<?xml"), ("load.PDF", b"%PDF"), ("load.Png", b"\x89PNG")])
def test_plot_writes_the_format_its_extension_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, magic: bytes
) -> None:
    pytest.importorskip("matplotlib")
    image = tmp_path / name
    assert main(["inspect", "--plot", str(image), _file(tmp_path, write(ROUTES, "prime-rl"))]) == 0
    assert image.read_bytes().startswith(magic)
    assert capsys.readouterr().err == f"r3wire: wrote the expert load heatmap of the payload to {image}\n"
    assert sorted(item.name for item in tmp_path.iterdir()) == sorted([name, "payload"])


@pytest.mark.filterwarnings(r"ignore:'\w+' deprecated - use:DeprecationWarning")
def test_plot_names_the_flag_when_the_file_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    (tmp_path / "load-1.png").mkdir()  # the second routes field's image cannot be written
    image = tmp_path / "load.png"
    assert main(["inspect", "--plot", str(image), _file(tmp_path, _response(), "body")]) == 2
    wrote, refused = capsys.readouterr().err.splitlines(keepends=True)
    assert wrote == f"r3wire: wrote the expert load heatmap of $.choices[0].routed_experts to {tmp_path}/load-0.png\n"
    _one_line_error(
        refused, f"--plot must be a file this process can write, got '{tmp_path}/load-1.png' (Is a directory)"
    )


def test_input_larger_than_the_cap_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl"))
    size = Path(path).stat().st_size
    assert main(["inspect", "--max-input-bytes", str(size), path]) == 0
    capsys.readouterr()
    assert main(["convert", "--max-input-bytes", str(size - 1), path]) == 2
    _one_line_error(
        capsys.readouterr().err,
        f"input {path!r} must be at most {size - 1:,} bytes (raise the limit with --max-input-bytes), "
        f"got {size:,} bytes",
    )
    # The default is 1 GiB; a regular file's size is checked before anything is read (this one is sparse).
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate((1 << 30) + 1)
    assert main(["inspect", str(huge)]) == 2
    _one_line_error(
        capsys.readouterr().err,
        "must be at most 1,073,741,824 bytes (raise the limit with --max-input-bytes), got 1,073,741,825 bytes",
    )


class _Zeros(io.RawIOBase):
    """An endless stream, like /dev/zero, that counts what was read from it."""

    def __init__(self) -> None:
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        view[:] = bytes(len(view))
        self.served += len(view)
        return len(view)


def test_an_endless_stream_stops_at_the_cap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    zeros = _Zeros()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(zeros)))
    assert main(["inspect", "--max-input-bytes", "1M", "-"]) == 2
    _one_line_error(capsys.readouterr().err, "standard input must be at most 1,048,576 bytes")
    assert zeros.served <= (1 << 20) + io.DEFAULT_BUFFER_SIZE + 1


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_inspect_dev_zero_ends_with_a_clean_error() -> None:
    out = _run("inspect", "--max-input-bytes", "4M", "/dev/zero")
    assert out.returncode == 2
    assert out.stderr.decode() == (
        "r3wire: error: input '/dev/zero' must be at most 4,194,304 bytes (raise the limit with --max-input-bytes), "
        "got more than 4,194,304 bytes\n"
    )


@pytest.mark.parametrize(
    ("text", "value"), [("4G", 4 << 30), ("1k", 1024), ("16MiB", 16 << 20), ("2tb", 2 << 40), ("123", 123), ("9b", 9)]
)
def test_max_input_bytes_takes_binary_suffixes(text: str, value: int) -> None:
    assert build_parser().parse_args(["inspect", "--max-input-bytes", text, "f"]).max_input_bytes == value


@pytest.mark.parametrize("text", ["0", "-1", "1x", "", "1.5G", "4ib", "G", "9" * 5000])
def test_max_input_bytes_refuses_a_bad_value_on_one_line(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["inspect", "--max-input-bytes", text, "f"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("r3wire inspect: error: argument --max-input-bytes: must be a positive byte count")
    assert err.count("\n") == 1
    assert len(err) < 2100


@pytest.mark.parametrize(
    ("stdin", "needle"),
    [
        (b"", "standard input must be a routes payload or a response body, got an empty input"),
        (b" \n\t", "standard input must be a routes payload or a response body, got only whitespace"),
        (
            codecs.BOM_UTF8 + orjson.dumps(encode_routes(ROUTES)),
            "standard input must be UTF-8 without a byte order mark (JSON texts carry none",
        ),
    ],
)
def test_empty_input_and_a_bom_are_named(stdin: bytes, needle: str) -> None:
    for command in ("inspect", "convert"):
        out = _run(command, "-", stdin=stdin)
        assert out.returncode == 2
        _one_line_error(out.stderr.decode(), needle)


@pytest.mark.skipif(os.name != "posix", reason="closes a descriptor of the child before it starts")
@pytest.mark.parametrize(
    ("args", "fd", "message"),
    [
        (["inspect", "-"], 0, "standard input must be open (FILE is -), got a closed stream"),
        (["convert", "FILE"], 1, "standard output must be open (convert writes its result there), got a closed stream"),
        (["inspect", "FILE"], 1, "standard output must be open (inspect writes its result there), got a closed stream"),
    ],
)
def test_a_closed_standard_stream_is_named(tmp_path: Path, args: list[str], fd: int, message: str) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl"))
    out = subprocess.run(
        [sys.executable, "-m", "r3wire", *(path if arg == "FILE" else arg for arg in args)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        preexec_fn=lambda: os.close(fd),
    )
    assert out.returncode == 2
    assert out.stderr.decode() == f"r3wire: error: {message}\n"


def test_json_goes_to_a_text_only_stdout(tmp_path: Path) -> None:
    path = _file(tmp_path, write(ROUTES, "prime-rl"))
    out = io.StringIO()  # an in-process caller's stand-in for sys.stdout, without .buffer
    with contextlib.redirect_stdout(out):
        assert main(["inspect", "--json", path]) == 0
        assert main(["convert", "--to", "nemo-rl", path]) == 0
    report, converted = out.getvalue().splitlines()
    assert orjson.loads(report)["shape"] == [40, 4, 2]
    assert np.array_equal(read(converted, "nemo-rl").routes, ROUTES)


@pytest.mark.skipif(os.name != "posix", reason="closes a descriptor of the child before it starts")
def test_with_stderr_closed_nothing_meant_for_it_lands_in_stdout(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "r3wire", *args], capture_output=True, check=False, preexec_fn=lambda: os.close(2)
        )

    refused = run("convert", str(tmp_path / "missing.json"))
    assert (refused.returncode, refused.stdout) == (2, b"")
    if importlib.util.find_spec("matplotlib") is not None:
        plotted = run(
            "inspect", "--json", "--plot", str(tmp_path / "load.png"), _file(tmp_path, write(ROUTES, "skyrl"))
        )
        assert plotted.returncode == 0
        assert orjson.loads(plotted.stdout)["shape"] == [40, 4, 2]  # the "wrote ..." note is not mixed in
        assert (tmp_path / "load.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("payload", "args", "format_name"),
    [
        (b"[[[1, 2]], [[3, 4]]]", [], "json-lists"),
        (b'[\n  ["AQI=", null]\n]', [], None),  # a list of lists that is no payload either: a payload error
        (b'["AQI=", null]', ["--num-layers", "1", "--top-k", "2"], "fireworks-matrices"),
    ],
)
def test_a_json_list_payload_is_read_as_one_payload_not_as_a_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: bytes, args: list[str], format_name: str | None
) -> None:
    # A JSON list is a batch of bodies only when it holds objects; a list payload (json-lists, fireworks-matrices)
    # was refused as a batch once read_response refused lists of non-objects.
    path = _file(tmp_path, payload)
    status = main(["inspect", "--json", *args, path])
    captured = capsys.readouterr()
    if format_name is None:
        assert status == 2
        assert "response body as a JSON object" not in captured.err
        return
    assert status == 0, captured.err
    assert orjson.loads(captured.out)["format"] == format_name


def test_a_json_list_of_bodies_is_read_as_a_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = {"choices": [{"routed_experts": write(ROUTES[:3], "skyrl")}]}
    path = _file(tmp_path, b" [ " + orjson.dumps(body) + b"]")
    assert main(["inspect", "--json", path]) == 0
    assert "$[0].choices[0].routed_experts" in capsys.readouterr().out
