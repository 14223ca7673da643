#!/usr/bin/env python3
"""Developer entry point: one command for the demo, one for the whole test suite.

    python3 scripts/dev.py demo    # make .venv, install r3wire[fast], run `python -m r3wire demo`
    python3 scripts/dev.py test    # make .venv, install r3wire[fast] + dev tools, run ruff, mypy, the docs
                                   # site build (mkdocs build --strict) and pytest

Needs only Python >= 3.10 and access to PyPI. Everything goes into a virtual environment (``.venv`` unless
``R3WIRE_VENV`` names another), which is reused while pyproject.toml and the install settings are unchanged.

Settings (environment variables, so CI runs exactly the same command with a different environment):
    R3WIRE_VENV     the virtual environment to use (default: .venv)
    R3WIRE_PYTHON   the interpreter that creates it (default: the one running this script)
    R3WIRE_INSTALL  "editable" (default) or "wheel": build an sdist and a wheel from it, check both
                    (twine check --strict, scripts/check_dist.py), and test the installed wheel, not src/
    R3WIRE_DEPS     "latest" (default) or "oldest": pin every runtime dependency (and the fast extra's) to the
                    floor its ">=" in pyproject.toml claims
    R3WIRE_WITH     comma-separated optional stacks to add: "torch" (CPU torch), "vllm" (vLLM classes)
    R3WIRE_REQUIRE  comma-separated optional stacks (or tools: "node") whose tests must run, not skip (CI sets it)

Without R3WIRE_WITH the torch and vLLM adapter tests skip (each says why); without Node.js >= 18 on PATH the
JavaScript reference decoder's test skips. CI installs both and makes those skips failures.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CI_DIR = ROOT / ".ci"

PYPROJECT = ROOT / "pyproject.toml"
# Linted when present; benchmarks/ is optional.
LINT_PATHS = ("src", "tests", "benchmarks", "scripts")
# The extras every test environment installs (zstd for Fireworks r3/v1, plot for `inspect --plot`); the floor
# run pins their floors too.
EXTRAS = ("fast", "zstd", "plot")


def _toml_array(text: str, table: str, key: str) -> list[str]:
    """The strings of ``key = [...]`` in ``[table]`` of pyproject.toml (tomllib is Python >= 3.11 only).

    Enough TOML for this file: double-quoted strings without escapes, ``#`` comments outside strings.
    """
    section = re.search(rf"^\[{re.escape(table)}\][ \t]*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    start = section and re.search(rf"^{re.escape(key)}\s*=\s*\[", section.group(1), re.MULTILINE)
    if not section or not start:
        raise SystemExit(f"pyproject.toml: no {key} = [...] in [{table}]")
    values: list[str] = []
    for token in re.finditer(r'"([^"]*)"|#[^\n]*|(\])', section.group(1)[start.end() :]):
        if token.group(2):
            return values
        if token.group(1) is not None:
            values.append(token.group(1))
    raise SystemExit(f"pyproject.toml: {key} = [ in [{table}] is not closed")


def oldest_requirements() -> list[str]:
    """``name==floor`` for every runtime dependency and every tested extra's, read from pyproject.toml.

    pyproject.toml is the single source of the floors: each requirement there must be ``name>=version``, and the
    floor run (R3WIRE_DEPS=oldest) installs exactly that version.
    """
    text = PYPROJECT.read_text(encoding="utf-8")
    requirements = _toml_array(text, "project", "dependencies")
    for extra in EXTRAS:
        requirements += _toml_array(text, "project.optional-dependencies", extra)
    pins: list[str] = []
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9._-]+)\s*>=\s*([0-9][0-9.]*)", requirement)
        if not match:
            raise SystemExit(f"pyproject.toml: {requirement!r} must be 'name>=version' so its floor can be tested")
        pins.append(f"{match.group(1)}=={match.group(2)}")
    return pins


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
    for name in ("pyproject.toml", ".ci/requirements-vllm.txt", "scripts/check_dist.py"):
        path = ROOT / name
        if path.exists():
            digest.update(path.read_bytes())
    if settings["install"] == "wheel":
        # The sdist and wheel are snapshots of the tree: rebuild them whenever a file that goes into them changes.
        for top in ("src", "tests", "README.md", "LICENSE", "CHANGELOG.md"):
            paths = [ROOT / top] if (ROOT / top).is_file() else sorted((ROOT / top).rglob("*"))
            for path in paths:
                if path.is_file() and "__pycache__" not in path.parts:
                    digest.update(str(path.relative_to(ROOT)).encode())
                    digest.update(path.read_bytes())
    digest.update(repr(sorted(settings.items())).encode())
    digest.update(b"dev" if dev else b"demo")
    return digest.hexdigest()


def build_and_check(env_dir: Path) -> Path:
    """Build the sdist, then the wheel from the sdist; check both; return the wheel.

    Building the wheel from the sdist (what ``python -m build`` does by default) means a file missing from the
    sdist makes a broken wheel, which the test run then catches. The build tools live in their own environment
    so the test environment holds only what ``pip install r3wire`` brings plus the test tools.
    """
    tools = env_dir / "build-tools"
    tools_python = _venv_python(tools)
    if not tools_python.exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(tools)
    pip = [str(tools_python), "-m", "pip"]
    _run([*pip, "install", "--quiet", "--upgrade", "pip>=25.1"])
    _run([*pip, "install", "--quiet", "--group", f"{PYPROJECT}:release"])
    dist = env_dir / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _run([str(tools_python), "-m", "build", "--outdir", str(dist), str(ROOT)])
    artifacts = sorted(str(p) for p in dist.iterdir())
    _run([str(tools_python), "-m", "twine", "check", "--strict", *artifacts])
    _run([str(tools_python), str(ROOT / "scripts" / "check_dist.py"), str(dist)])
    return next(dist.glob("r3wire-*.whl"))


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
    # A wheel is tested in a new environment, as a user would install it: nothing left over from an earlier run.
    if not python.exists() or settings["install"] == "wheel":
        if settings["python"] == sys.executable:
            venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
        else:
            _run([settings["python"], "-m", "venv", "--clear", str(env_dir)])
    pip = [str(python), "-m", "pip"]
    # Dependency groups (PEP 735) need pip >= 25.1.
    _run([*pip, "install", "--quiet", "--upgrade", "pip>=25.1"])
    # The suite exercises every light extra; the demo needs only the fast base64.
    extras = ",".join(EXTRAS) if dev else "fast"
    if settings["install"] == "wheel":
        wheel = build_and_check(env_dir)
        _run([*pip, "uninstall", "--quiet", "--yes", "r3wire"])
        target = [f"r3wire[{extras}] @ {wheel.as_uri()}"]
    elif settings["install"] == "editable":
        target = ["--editable", f"{ROOT}[{extras}]"]
    else:
        raise SystemExit(f"R3WIRE_INSTALL must be 'editable' or 'wheel', got {settings['install']!r}")
    group = ["--group", f"{PYPROJECT}:dev"] if dev else []
    if settings["deps"] == "oldest":
        # Resolved together with r3wire, so a floor below what r3wire declares cannot be installed by accident.
        pins = oldest_requirements()
    elif settings["deps"] == "latest":
        pins = []
    else:
        raise SystemExit(f"R3WIRE_DEPS must be 'latest' or 'oldest', got {settings['deps']!r}")
    _run([*pip, "install", "--quiet", *target, *group, *pins])
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


def _report_versions(python: Path) -> None:
    """Print what is under test: the interpreter and the versions the resolver picked."""
    code = (
        "import sys, importlib.metadata as m\n"
        "def v(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return 'absent'\n"
        "print('testing with Python', sys.version.split()[0], *(f'{n}=={v(n)}' for n in sys.argv[1:]))"
    )
    subprocess.run([str(python), "-c", code, "r3wire", "numpy", "orjson", "pybase64", "torch", "vllm"], check=True)


def demo(args: list[str]) -> int:
    python = ensure_env(dev=False)
    return subprocess.run([str(python), "-m", "r3wire", "demo", *args], cwd=ROOT, check=False).returncode


def test(args: list[str]) -> int:
    python = ensure_env(dev=True)
    _report_versions(python)
    settings = _settings()
    lint_paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    # The site is built to a scratch directory: the build is a check (broken links, missing API references and
    # pages left out of the nav fail under --strict), not an artifact.
    site_dir = tempfile.mkdtemp(prefix="r3wire-site-")
    steps = [
        [str(python), "-m", "ruff", "check", *lint_paths],
        [str(python), "-m", "ruff", "format", "--check", *lint_paths],
        [str(python), "-m", "mypy", "--strict", "src", "tests", "scripts", "benchmarks"],
        [str(python), "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", site_dir],
        [str(python), "-m", "pytest", *args],
    ]
    env = dict(os.environ)
    # Material's banner about its successor is advice, not a result of this build.
    env.setdefault("NO_MKDOCS_2_WARNING", "1")
    # The suite must test what was installed (the wheel, in wheel mode), never src/ by accident;
    # tests/test_package.py checks which one it imported, so it must know which was meant.
    env.pop("PYTHONPATH", None)
    env["R3WIRE_INSTALL"] = settings["install"]
    try:
        for step in steps:
            print("+", " ".join(step[2:] if step[1] == "-m" else step), flush=True)
            code = subprocess.run(step, cwd=ROOT, env=env, check=False).returncode
            if code != 0:
                print(f"FAILED: {' '.join(step[2:])} (exit {code})", file=sys.stderr, flush=True)
                return code
    finally:
        shutil.rmtree(site_dir, ignore_errors=True)
    return 0


def main(argv: list[str]) -> int:
    commands = {"demo": demo, "test": test}
    if not argv or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return commands[argv[0]](argv[1:])
    except subprocess.CalledProcessError as exc:
        # A failed install or build step: its own output above says why; no traceback of this script.
        print(f"FAILED: {' '.join(map(str, exc.cmd))} (exit {exc.returncode})", file=sys.stderr, flush=True)
        return exc.returncode or 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
