"""The spec is implementable in another language: the JavaScript reference decoder in tests/js/ (written from
docs/ alone, no npm packages) decodes every golden vector of r3wire's own formats, and of the other engines'
formats it implements, as the vectors say.

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
# Vector files of these kinds (top-level schema/version: r3wire's own wire format; top-level "format": another
# engine's), and whole responses (top-level "cases"), are run by run_vectors.mjs, every case (one superseded by a
# newer file, or a response holding a zstd payload, is counted as skipped). Not here: Fireworks' zstd formats.
KINDS = {
    "r3wire.routes/1",
    "r3wire.array/1",
    "r3wire.logprobs/1",
    "r3wire.routes-frame/1",
    "r3wire.hostile/1",
    "format:skyrl",
    "format:prime-rl",
    "format:prime-rl-b85",
    "format:nemo-rl",
    "format:sglang",
    "format:vllm-npy",
    "format:json-lists",
    "format:fireworks-matrices",
}
# Formats that need zstd, which Node has no decoder for without an npm package.
ZSTD_FORMATS = {"fireworks-r3v1", "fireworks-trace"}
ZSTD_B64 = "KLUv/"  # base64 of the zstd magic: a body holding one is read only with zstd
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


def _own_cases() -> tuple[int, int]:
    """The number of cases in the recognised files (whole responses included), and how many may be skipped:
    those a newer file supersedes, and responses holding a zstd payload."""
    docs = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in VECTORS.glob("*.json")}
    superseded = {
        (file, verdict, name)
        for doc in docs.values()
        for file, verdicts in doc.get("supersedes", {}).items()
        for verdict, names in verdicts.items()
        for name in names
    }
    total = skipped = 0
    for file, doc in docs.items():
        if "schema" not in doc and "format" not in doc and "cases" in doc:
            # Whole responses: a body holding a zstd payload (Fireworks) cannot be read without a package.
            total += len(doc["cases"])
            skipped += sum(
                (file, "cases", case["name"]) in superseded
                or any(r["format"] in ZSTD_FORMATS for r in case.get("results", []))
                or ZSTD_B64 in json.dumps(case["body"])
                for case in doc["cases"]
            )
    for file, doc in docs.items():
        kind = f"format:{doc['format']}" if "format" in doc else f"{doc.get('schema')}/{doc.get('version')}"
        if kind in KINDS:
            for verdict in ("valid", "reject"):
                cases = doc.get(verdict, [])
                total += len(cases)
                skipped += sum((file, verdict, case["name"]) in superseded for case in cases)
    return total, skipped


def test_javascript_decoder_agrees_with_every_vector() -> None:
    node = _node()
    result = subprocess.run([node, str(RUNNER)], capture_output=True, text=True, check=False, cwd=ROOT, timeout=300)
    output = result.stdout + result.stderr
    summary = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", result.stdout, re.MULTILINE)
    assert summary is not None, output
    passed, failed, skipped = map(int, summary.groups())
    assert result.returncode == 0, output
    assert failed == 0, output
    # Every case of the recognised files ran, and only the cases allowed to be skipped were: a file the runner
    # failed to recognise, or a case it could not run, would show up here.
    total, superseded = _own_cases()
    assert (passed + skipped, skipped) == (total, superseded), output
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
