"""The benchmark scripts run (smoke tests on tiny sizes, a few seconds each); their numbers are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not part of this checkout")
def test_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--workloads", "W4", "--repeat", "1", "--budget", "0", "--no-stdlib", "--json", str(out)]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "W4: 16 tokens x 1 layers x top-2 of 8 experts" in done.stdout
    result = json.loads(out.read_text())
    assert set(result["versions"]) >= {"numpy", "orjson", "pybase64", "r3wire"}
    rows = {row["method"]: row for row in result["workloads"]["W4"]["rows"]}
    assert {"memcpy", "json-lists", "orjson-numpy", "r3wire-envelope", "r3wire-dumps"} <= set(rows)
    assert rows["r3wire-dumps"]["payload_bytes"] > 0
    assert rows["json-lists"]["ratios"]["vs_json_lists"] == 1.0


SCALING = SCRIPT.parent / "bench_scaling.py"


@pytest.mark.skipif(not SCALING.exists(), reason="benchmarks/ is not part of this checkout")
def test_scaling_benchmark_runs_and_writes_json_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "scaling.json", tmp_path / "scaling.png"
    args = ["--smoke", "--sizes", "512,2048", "--json", str(out), "--plot", str(png)]
    done = subprocess.run(
        [sys.executable, str(SCALING), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["workloads"]) == {"W1", "K2", "K2-u16"}
    sweep = {(cell["method"], cell["rows"]) for cell in result["sweep"]}
    methods = {"memcpy", "envelope", "dumps", "frame", "frame-packed"}
    assert {(m, rows) for m in methods for rows in (1, 4)} <= sweep  # --smoke divides rows by 512
    for cell in result["sweep"]:
        assert cell["ns_per_id"] > 0
        assert cell["ratios"]["round_trip_x_memcpy"] > 0
        assert cell["encode_faults"] >= 0
    has_iter = any(cell["method"] == "iter_dumps" for cell in result["sweep"])
    assert has_iter != any("iter_dumps" in note for note in result["notes"])  # a row, or a note saying why not
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "round trip, ns per id" in done.stdout


# Every other benchmark script on tiny sizes: a crash in one (bench_formats.py met a list payload it took for
# text) went unnoticed because none ran. A script may report a missed target on such sizes; it must not fail.
_SMOKE = {
    "bench_adapters.py": ["--tokens", "64", "--repeat", "1"],
    "bench_batching.py": ["--batch", "2", "--rows", "64", "--repeat", "1"],
    "bench_bitpack.py": ["--repeat", "1"],
    "bench_formats.py": ["--tokens", "64", "--repeat", "1"],
    "bench_logprobs.py": ["--n", "1000", "--repeats", "1"],
    "bench_response.py": ["--repeat", "1", "--tiny", "100"],
    "bench_walk.py": ["--tokens", "64", "--repeats", "1"],
}


def test_every_benchmark_script_has_a_smoke_run() -> None:
    scripts = {path.name for path in SCRIPT.parent.glob("bench_*.py")} if SCRIPT.parent.exists() else set()
    assert scripts <= {*_SMOKE, "bench_scaling.py"}


@pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/ is not part of this checkout")
@pytest.mark.parametrize("name", sorted(_SMOKE))
def test_benchmark_script_runs_on_tiny_sizes(name: str) -> None:
    if name == "bench_adapters.py":
        pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, str(SCRIPT.parent / name), *_SMOKE[name]],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.strip()
    if done.returncode:
        assert "MISSES" in done.stdout or "NOT met" in done.stdout, done.stdout  # a target missed, said so
