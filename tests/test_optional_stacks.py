"""Optional stacks (torch, vLLM): the adapters never import them on their own, and CI cannot skip their tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _imported_after(code: str) -> list[str]:
    probe = f"import sys; {code}; print(','.join(m for m in ('torch', 'vllm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_import_r3wire_leaves_torch_and_vllm_out() -> None:
    assert _imported_after("import r3wire") == []


def test_adapter_modules_import_no_framework() -> None:
    # The adapters read vLLM objects by attribute and import torch inside the functions that need it.
    assert _imported_after("import r3wire.torch, r3wire.vllm") == []


def test_encoding_numpy_never_imports_torch() -> None:
    code = (
        "import numpy as np, r3wire, r3wire.vllm;"
        "r3wire.encode_routes(np.zeros((2, 3, 4), np.int32));"
        "r3wire.encode_array(np.zeros(3));"
        "r3wire.vllm.decode_completion({'token_ids': [1]})"
    )
    assert _imported_after(code) == []


def _run_pytest(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("R3WIRE_REQUIRE", "PYTEST_ADDOPTS")}
    if require is not None:
        env["R3WIRE_REQUIRE"] = require
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_required_stack_that_skips_fails_the_run(tmp_path: Path) -> None:
    # The real conftest, next to a test that skips the way an uninstalled stack does.
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_stack.py").write_text(
        "import pytest\n"
        "def test_needs_stack():\n"
        "    pytest.importorskip('r3wire_absent_vllm_stack')\n"
        "def test_other():\n"
        "    pytest.importorskip('r3wire_absent_zstandard')\n"
    )
    relaxed = _run_pytest(tmp_path, None)
    assert relaxed.returncode == 0, relaxed.stdout
    assert "2 skipped" in relaxed.stdout
    strict = _run_pytest(tmp_path, "torch,vllm")
    assert strict.returncode == pytest.ExitCode.TESTS_FAILED, strict.stdout
    assert "R3WIRE_REQUIRE=torch,vllm but these tests skipped" in strict.stdout
    assert "test_needs_stack" in strict.stdout
    assert "test_other" not in strict.stdout.split("these tests skipped")[1]  # not a required stack
