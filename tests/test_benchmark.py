"""benchmarks/run.py runs: a smoke test on the tiny workload (about two seconds); the numbers are not checked."""

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
