"""The command line: `python -m r3wire demo` runs the main job end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from r3wire.cli import main


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
