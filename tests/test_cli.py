"""The command line: `python -m r3wire demo` runs the main job end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from r3wire import cli
from r3wire.cli import main
from r3wire.demo import MAX_DRAWS, MAX_IDS, MAX_REPEAT, MAX_ROW_DRAWS, MAX_TOKEN_LAYERS, check_demo_arguments
from r3wire.errors import R3WireError


def test_demo_prints_sizes_and_timings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--tokens", "64", "--layers", "4", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "JSON lists" in out
    assert "r3wire envelope" in out
    assert " MB " in out
    assert " ms " in out
    # The workload is stated, and so is the code each row timed, so its numbers can be compared with others.
    assert "64 tokens x 4 MoE layers x top-8 of 128 experts = 2,048 expert ids" in out
    assert "README.md and docs/performance.md report W1 (8192 tokens" in out
    assert '\n      text = dumps({"routed_experts": routes}, num_experts=num_experts)\n' in out


def test_module_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "r3wire", "demo", "--tokens", "16", "--layers", "2", "--repeat", "1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "checked exact" in out.stdout


def test_usage_error_exits_2() -> None:
    out = subprocess.run([sys.executable, "-m", "r3wire", "nope"], capture_output=True, text=True, check=False)
    assert out.returncode == 2
    assert "invalid choice" in out.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # --tokens 0 is refused, not run: JSON lists cannot carry an empty array's inner dimensions.
        (["--tokens", "0"], "--tokens must be an integer in 1..2097152, got 0"),
        (["--layers", "0"], "--layers must be an integer in 1..2097152, got 0"),
        (["--tokens", "-1"], "--tokens must be an integer in 1..2097152, got -1"),
        (["--top-k", "0"], "--top-k must be an integer in 1..128 (at most --num-experts), got 0"),
        (["--num-experts", "1"], "--top-k must be an integer in 1..1 (at most --num-experts), got 8"),
        (["--num-experts", "0"], "--num-experts must be an integer in 1..2147483648, got 0"),
        (["--num-experts", "99999999999"], "--num-experts must be an integer in 1..2147483648, got 99999999999"),
        (["--repeat", "0"], "--repeat must be an integer in 1..1000, got 0"),
        (["--tokens", "99999999999"], "--tokens must be an integer in 1..2097152"),
        (
            ["--tokens", "1048577", "--layers", "2", "--top-k", "1"],
            "--tokens x --layers must be at most 2,097,152 token-layer pairs (JSON lists of ids), got 1048577 x 2",
        ),
        (["--tokens", "100000"], "--tokens x --layers x --top-k must be at most 16,777,216 expert ids, got 100000 x"),
        (["--num-experts", "100000"], "--layers x --num-experts must be at most 4,194,304 router scores per token"),
        (
            ["--tokens", "100000", "--layers", "10", "--top-k", "1", "--num-experts", "4096"],
            "--tokens x --layers x --num-experts must be at most 1,073,741,824 router scores, got 100000 x 10 x 4096",
        ),
    ],
)
def test_demo_refuses_bad_arguments_by_flag(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before any of the report is printed or any array allocated
    assert err.count("\n") == 1
    assert err.startswith(f"r3wire: error: {needle}")
    assert "internal error" not in err


def test_demo_limits_are_exact_and_stated_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    # At two limits at once: tokens x layers x top_k and tokens x layers.
    check_demo_arguments(tokens=MAX_IDS // 128, layers=16, top_k=8, num_experts=128, repeat=MAX_REPEAT)
    with pytest.raises(R3WireError, match="expert ids"):
        check_demo_arguments(tokens=MAX_IDS // 128 + 1, layers=16, top_k=8, num_experts=128, repeat=1)
    check_demo_arguments(tokens=MAX_TOKEN_LAYERS, layers=1, top_k=1, num_experts=1, repeat=1)
    with pytest.raises(R3WireError, match="token-layer pairs"):
        check_demo_arguments(tokens=MAX_TOKEN_LAYERS // 2 + 1, layers=2, top_k=1, num_experts=1, repeat=1)
    check_demo_arguments(tokens=1, layers=1, top_k=1, num_experts=MAX_ROW_DRAWS, repeat=1)
    with pytest.raises(R3WireError, match="per token"):
        check_demo_arguments(tokens=1, layers=1, top_k=1, num_experts=MAX_ROW_DRAWS + 1, repeat=1)
    check_demo_arguments(tokens=MAX_DRAWS // MAX_ROW_DRAWS, layers=1, top_k=1, num_experts=MAX_ROW_DRAWS, repeat=1)
    with pytest.raises(R3WireError, match="router scores, got"):
        check_demo_arguments(
            tokens=MAX_DRAWS // MAX_ROW_DRAWS + 1, layers=1, top_k=1, num_experts=MAX_ROW_DRAWS, repeat=1
        )
    with pytest.raises(R3WireError, match="--top-k"):
        check_demo_arguments(tokens=1, layers=1, top_k=True, num_experts=2, repeat=1)
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for limit in (
        f"{MAX_IDS:,} expert ids",
        f"tokens x layers at most {MAX_TOKEN_LAYERS:,}",
        f"{MAX_DRAWS:,} synthetic router scores",
        f"layers x num_experts at most {MAX_ROW_DRAWS:,}",
    ):
        assert limit in help_text


def test_demo_smallest_rollout(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--tokens", "1", "--layers", "1", "--top-k", "1", "--num-experts", "1", "--repeat", "1"]
    assert main(["demo", *args]) == 0
    assert "1 tokens x 1 MoE layers x top-1 of 1 experts = 1 expert ids" in capsys.readouterr().out


def test_usage_mistake_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--tokens", "abc"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "r3wire demo: error: argument --tokens: invalid int value: 'abc' (see r3wire demo --help)\n"


@pytest.mark.skipif(os.name != "posix", reason="closes a descriptor of the child before it starts")
def test_demo_with_stdout_closed_says_so() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "r3wire", "demo", "--tokens", "4", "--layers", "1", "--repeat", "1"],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert out.returncode == 2
    assert (
        out.stderr
        == "r3wire: error: standard output must be open (demo writes its result there), got a closed stream\n"
    )


def test_interrupt_is_one_line_and_status_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_demo", interrupted)
    assert main(["demo"]) == 130
    assert capsys.readouterr().err == "r3wire: error: interrupted\n"


def test_out_of_memory_is_one_line_not_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def too_big(**_: object) -> None:
        raise MemoryError

    monkeypatch.setattr(cli, "run_demo", too_big)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("r3wire: error: out of memory: ")
    assert "internal error" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["inspect", "\x00"], "FILE must be a file name without NUL characters"),
        (["inspect", None], "every argument must be a string, got None"),
        (["convert", "x.json", "--max-input-bytes", None], "every argument must be a string"),
        ([b"inspect"], "every argument must be a string, got b'inspect'"),
    ],
)
def test_arguments_no_shell_can_pass_are_one_line_errors(
    argv: list[Any], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # An in-process caller's NUL was an "internal error ... please report this input", a non-string a traceback.
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "internal error" not in err
    assert err.count("\n") <= 2  # argparse prints its usage line first
