"""The spec is implementable in another language: the JavaScript reference decoder in tests/js/ (written from
docs/ alone, no npm packages) decodes every golden vector of r3wire's own formats as the vectors say.

Skipped, with a message, where Node.js is missing; CI's main stage lists ``node`` in R3WIRE_REQUIRE, so a skip
there fails the run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
RUNNER = ROOT / "tests" / "js" / "run_vectors.mjs"
VECTORS = ROOT / "tests" / "vectors"
# Vector files of these kinds (top-level schema/version) are r3wire's own wire format; run_vectors.mjs must run
# every case in them. Of the other engines' formats (top-level "format") it implements SkyRL's, the seed envelope.
KINDS = {
    "r3wire.routes/1",
    "r3wire.array/1",
    "r3wire.logprobs/1",
    "r3wire.routes-frame/1",
    "r3wire.hostile/1",
    "format:skyrl",
}
NODE_MIN_MAJOR = 18


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js (node >= 18) not found on PATH: the JavaScript reference decoder was not run")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < NODE_MIN_MAJOR:
        pytest.skip(f"node >= {NODE_MIN_MAJOR} needed for the JavaScript reference decoder, found {version!r}")
    return node


def _own_cases() -> int:
    total = 0
    for path in VECTORS.glob("*.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        kind = f"format:{doc['format']}" if "format" in doc else f"{doc.get('schema')}/{doc.get('version')}"
        if kind in KINDS:
            total += len(doc.get("valid", [])) + len(doc.get("reject", []))
    return total


def test_javascript_decoder_agrees_with_every_vector() -> None:
    node = _node()
    result = subprocess.run([node, str(RUNNER)], capture_output=True, text=True, check=False, cwd=ROOT, timeout=300)
    output = result.stdout + result.stderr
    summary = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", result.stdout, re.MULTILINE)
    assert summary is not None, output
    passed, failed, skipped = map(int, summary.groups())
    assert result.returncode == 0, output
    assert failed == 0, output
    # Every case of r3wire's own vector files ran: a file the runner failed to recognise would show up here.
    assert passed + skipped == _own_cases(), output
    assert passed > 0, output


def test_runner_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    # The runner is a real check: a vector whose expected field is wrong makes it exit non-zero.
    doc = json.loads((VECTORS / "routes-v1.json").read_text(encoding="utf-8"))
    case = next(c for c in doc["reject"] if c["name"] == "shape-float")
    broken = {"schema": "r3wire.routes", "version": 1, "valid": [], "reject": [{**case, "field": "shape[0]"}]}
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    result = subprocess.run([_node(), str(RUNNER), str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stdout
    assert "0 passed, 1 failed, 0 skipped" in result.stdout
