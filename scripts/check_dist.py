#!/usr/bin/env python3
"""Check the built sdist and wheel before anything installs, tests or publishes them.

    python3 scripts/check_dist.py DIST_DIR

DIST_DIR must hold exactly one sdist and one wheel of r3wire. The checks:

- file names and metadata carry the version in ``src/r3wire/_version.py``, the version's single source;
- the wheel holds exactly the files of ``src/r3wire`` (``py.typed`` included), the license in its dist-info, and
  nothing else: no tests, benchmarks, scripts, caches or bytecode;
- ``pip install r3wire`` brings exactly numpy and orjson; the extras fast, torch, vllm, zstd and plot are declared;
- the sdist holds the package, the test suite with its golden vectors, pyproject.toml, README, CHANGELOG and
  LICENSE, and no caches, bytecode, virtual environments or build output.

Standard library only. Prints one line per artifact; exits 1 listing every problem.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "r3wire"
RUNTIME_REQUIREMENTS = {"numpy", "orjson"}
EXTRAS = {"fast", "torch", "vllm", "zstd", "plot"}
SDIST_TOP_FILES = {"pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "PKG-INFO"}
# Present in a working tree, never in a distribution.
FORBIDDEN_PARTS = {"__pycache__", ".venv", ".git", ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def source_version() -> str:
    text = (ROOT / "src" / NAME / "_version.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if not match:
        raise SystemExit('src/r3wire/_version.py: no __version__ = "..." line')
    return match.group(1)


def tree_files(top: Path) -> set[str]:
    """Files under ``top`` (relative, POSIX), without caches and bytecode."""
    return {
        path.relative_to(top).as_posix()
        for path in top.rglob("*")
        if path.is_file() and not FORBIDDEN_PARTS.intersection(path.parts) and path.suffix != ".pyc"
    }


def forbidden(names: set[str]) -> list[str]:
    return sorted(n for n in names if n.endswith((".pyc", ".pyo")) or any(p in FORBIDDEN_PARTS for p in n.split("/")))


def requirement_name(requirement: str) -> tuple[str, str]:
    """(normalised project name, marker) of a Requires-Dist value."""
    spec, _, marker = requirement.partition(";")
    match = re.match(r"\s*([A-Za-z0-9._-]+)", spec)
    name = match.group(1) if match else spec
    return re.sub(r"[-_.]+", "-", name).lower(), marker.strip()


def check_metadata(metadata: Message, version: str, where: str) -> list[str]:
    problems = []
    if metadata["Name"] != NAME or metadata["Version"] != version:
        problems.append(f"{where}: Name/Version {metadata['Name']} {metadata['Version']}, expected {NAME} {version}")
    if metadata["License-Expression"] != "Apache-2.0":
        problems.append(f"{where}: License-Expression {metadata['License-Expression']!r}, expected 'Apache-2.0'")
    if metadata["Requires-Python"] != ">=3.10":
        problems.append(f"{where}: Requires-Python {metadata['Requires-Python']!r}, expected '>=3.10'")
    unconditional = set()
    for requirement in metadata.get_all("Requires-Dist") or []:
        name, marker = requirement_name(requirement)
        if "extra" not in marker:
            unconditional.add(name)
    if unconditional != RUNTIME_REQUIREMENTS:
        problems.append(f"{where}: requirements without extras {sorted(unconditional)}, expected numpy and orjson")
    extras = set(metadata.get_all("Provides-Extra") or [])
    if extras != EXTRAS:
        problems.append(f"{where}: extras {sorted(extras)}, expected {sorted(EXTRAS)}")
    return problems


def check_wheel(path: Path, version: str) -> list[str]:
    problems = []
    if not path.name.startswith(f"{NAME}-{version}-py3-none-any"):
        problems.append(f"{path.name}: expected a pure-Python wheel of version {version}")
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        dist_info = f"{NAME}-{version}.dist-info"
        metadata = HeaderParser().parsestr(wheel.read(f"{dist_info}/METADATA").decode("utf-8"))
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    package = {n for n in names if n.startswith(f"{NAME}/")}
    expected = {f"{NAME}/{n}" for n in tree_files(ROOT / "src" / NAME)}
    if package != expected:
        problems.append(
            f"{path.name}: package files differ from src/{NAME}: "
            f"missing {sorted(expected - package)}, unexpected {sorted(package - expected)}"
        )
    required = (f"{NAME}/__init__.py", f"{NAME}/py.typed", f"{dist_info}/licenses/LICENSE")
    problems += [f"{path.name}: {n} missing" for n in required if n not in names]
    others = sorted(n for n in names - package if not n.startswith(f"{dist_info}/"))
    if others:
        problems.append(f"{path.name}: files outside the package and its dist-info: {others}")
    problems += [f"{path.name}: must not contain {n}" for n in forbidden(names)]
    if "r3wire = r3wire.cli:main" not in entry_points:
        problems.append(f"{path.name}: the r3wire console script is missing from entry_points.txt")
    problems += check_metadata(metadata, version, path.name)
    return problems


def check_sdist(path: Path, version: str) -> list[str]:
    problems = []
    top = f"{NAME}-{version}"
    if path.name != f"{top}.tar.gz":
        problems.append(f"{path.name}: expected {top}.tar.gz")
    with tarfile.open(path) as sdist:
        members = sdist.getmembers()
        names = {m.name.removeprefix(f"{top}/") for m in members if m.isfile()}
        outside = sorted(m.name for m in members if not m.name.startswith(f"{top}/") and m.name != top)
        pkg_info = sdist.extractfile(f"{top}/PKG-INFO")
        metadata = HeaderParser().parsestr(pkg_info.read().decode("utf-8")) if pkg_info else Message()
    if outside:
        problems.append(f"{path.name}: members outside {top}/: {outside}")
    missing = sorted(SDIST_TOP_FILES - names)
    for tree in (f"src/{NAME}", "tests"):
        missing += sorted(f"{tree}/{n}" for n in tree_files(ROOT / tree) if f"{tree}/{n}" not in names)
    if missing:
        problems.append(f"{path.name}: missing {missing}")
    problems += [f"{path.name}: must not contain {n}" for n in forbidden(names)]
    stray = sorted(n for n in names if n.split("/")[0] in {"dist", "build"} or n.startswith(".venv"))
    if stray:
        problems.append(f"{path.name}: build output or environments included: {stray}")
    problems += check_metadata(metadata, version, f"{path.name} PKG-INFO")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    dist = Path(argv[0])
    version = source_version()
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"{dist}: expected one wheel and one sdist, found {[p.name for p in dist.iterdir()]}", file=sys.stderr)
        return 1
    problems = check_wheel(wheels[0], version) + check_sdist(sdists[0], version)
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    if problems:
        return 1
    for artifact in (sdists[0], wheels[0]):
        print(f"check_dist: {artifact.name} OK ({artifact.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
