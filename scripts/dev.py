#!/usr/bin/env python3
"""Developer entry point: one command for the demo, one for the whole test suite.

    python3 scripts/dev.py demo    # make .venv, install r3wire[fast], run `python -m r3wire demo`
    python3 scripts/dev.py test    # make .venv, install r3wire[fast] + dev tools, run ruff, mypy and pytest

Needs only Python >= 3.10 and access to PyPI. Everything goes into a virtual environment (``.venv`` unless
``R3WIRE_VENV`` names another), which is reused while pyproject.toml and the install settings are unchanged.

Settings (environment variables, so CI runs exactly the same command with a different environment):
    R3WIRE_VENV     the virtual environment to use (default: .venv)
    R3WIRE_PYTHON   the interpreter that creates it (default: the one running this script)
    R3WIRE_INSTALL  "editable" (default) or "wheel": build a wheel and test the installed wheel, not src/
    R3WIRE_DEPS     "latest" (default) or "oldest": install the oldest numpy/orjson pyproject.toml claims
    R3WIRE_WITH     comma-separated optional stacks to add: "torch" (CPU torch), "vllm" (vLLM classes)
    R3WIRE_REQUIRE  comma-separated optional stacks whose tests must run, not skip (CI sets it)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_DIR = ROOT / ".ci"

# The oldest releases of the runtime dependencies that pyproject.toml claims; CI tests them (R3WIRE_DEPS=oldest).
OLDEST = ["numpy==1.24.4", "orjson==3.9.15", "pybase64==1.3.2"]


# The optional stacks R3WIRE_WITH can add, at the releases the adapter tests run against.
TORCH = "torch==2.13.0"
VLLM = "vllm==0.33.0"
STACKS = ("torch", "vllm")


def _stacks(value: str) -> set[str]:
    stacks = {s.strip() for s in value.split(",") if s.strip()}
    unknown = sorted(stacks - set(STACKS))
    if unknown:
        raise SystemExit(f"R3WIRE_WITH: unknown stack(s) {unknown}; choose from {list(STACKS)}")
    return stacks


def _run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def _venv_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _settings() -> dict[str, str]:
    return {
        "venv": os.environ.get("R3WIRE_VENV", ".venv"),
        "python": os.environ.get("R3WIRE_PYTHON", sys.executable),
        "install": os.environ.get("R3WIRE_INSTALL", "editable"),
        "deps": os.environ.get("R3WIRE_DEPS", "latest"),
        "with": os.environ.get("R3WIRE_WITH", ""),
    }


def _stamp(settings: dict[str, str], dev: bool) -> str:
    digest = hashlib.sha256()
    for name in ("pyproject.toml", ".ci/requirements-vllm.txt"):
        path = ROOT / name
        if path.exists():
            digest.update(path.read_bytes())
    if settings["install"] == "wheel":
        # A wheel is a snapshot of src/: rebuild it whenever any source file changes.
        for path in sorted((ROOT / "src").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(ROOT)).encode())
                digest.update(path.read_bytes())
    digest.update(repr(sorted(settings.items())).encode())
    digest.update(b"dev" if dev else b"demo")
    return digest.hexdigest()


def ensure_env(*, dev: bool) -> Path:
    """Create (or reuse) the virtual environment and install r3wire into it; return its python."""
    settings = _settings()
    _stacks(settings["with"])  # an unknown name fails now, not after minutes of installing
    env_dir = (ROOT / settings["venv"]).resolve()
    python = _venv_python(env_dir)
    stamp_file = env_dir / ".r3wire-stamp"
    stamp = _stamp(settings, dev)
    if python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return python
    if not python.exists():
        if settings["python"] == sys.executable:
            venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        else:
            _run([settings["python"], "-m", "venv", "--clear", str(env_dir)])
    pip = [str(python), "-m", "pip"]
    # Dependency groups (PEP 735) need pip >= 25.1.
    _run([*pip, "install", "--quiet", "--upgrade", "pip>=25.1"])
    # The suite exercises every light extra (zstd for Fireworks r3/v1, plot for `inspect --plot`); the demo needs
    # only the fast base64.
    extras = ["fast", "zstd", "plot"] if dev else ["fast"]
    if settings["install"] == "wheel":
        dist = env_dir / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        _run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(ROOT)])
        wheel = next(dist.glob("r3wire-*.whl"))
        _run([*pip, "uninstall", "--quiet", "--yes", "r3wire"])
        target = [f"r3wire[{','.join(extras)}] @ {wheel.as_uri()}"]
    else:
        target = ["--editable", f"{ROOT}[{','.join(extras)}]"]
    group = ["--group", f"{ROOT / 'pyproject.toml'}:dev"] if dev else []
    _run([*pip, "install", "--quiet", *target, *group])
    if settings["deps"] == "oldest":
        _run([*pip, "install", "--quiet", *OLDEST])
    stacks = _stacks(settings["with"])
    if "torch" in stacks or "vllm" in stacks:
        # The CPU build: this machine's pip configuration provides it; elsewhere point PIP_EXTRA_INDEX_URL at
        # PyTorch's CPU wheel index first, or pip takes the multi-gigabyte CUDA build from PyPI.
        _run([*pip, "install", "--quiet", TORCH])
    if "vllm" in stacks:
        # The adapter tests need only vLLM's Python classes (vllm.outputs, vllm.logprobs). Its declared
        # dependencies pull CUDA kernels and another torch, so vllm goes in with --no-deps, after exactly the
        # distributions its import loads (pinned in .ci/requirements-vllm.txt); in this order pip has no
        # half-installed vllm to complain about.
        _run([*pip, "install", "--quiet", "-r", str(CI_DIR / "requirements-vllm.txt")])
        _run([*pip, "install", "--quiet", "--no-deps", VLLM])
    stamp_file.write_text(stamp)
    return python


def demo(args: list[str]) -> int:
    python = ensure_env(dev=False)
    return subprocess.run([str(python), "-m", "r3wire", "demo", *args], cwd=ROOT, check=False).returncode


def test(args: list[str]) -> int:
    python = ensure_env(dev=True)
    # benchmarks/ may not exist yet on every branch; ruff fails on a missing path.
    lint = [d for d in ("src", "tests", "benchmarks", "scripts") if (ROOT / d).exists()]
    steps = [
        [str(python), "-m", "ruff", "check", *lint],
        [str(python), "-m", "ruff", "format", "--check", *lint],
        [str(python), "-m", "mypy", "--strict", "src", "tests"],
        [str(python), "-m", "pytest", *args],
    ]
    env = dict(os.environ)
    # The suite must test what was installed (the wheel, in wheel mode), never src/ by accident.
    env.pop("PYTHONPATH", None)
    for step in steps:
        print("+", " ".join(step[2:] if step[1] == "-m" else step), flush=True)
        code = subprocess.run(step, cwd=ROOT, env=env, check=False).returncode
        if code != 0:
            print(f"FAILED: {' '.join(step[2:])} (exit {code})", file=sys.stderr, flush=True)
            return code
    return 0


def main(argv: list[str]) -> int:
    commands = {"demo": demo, "test": test}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
