"""The package surface: imports stay light, __all__ is the table of contents, the version has one source."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import r3wire


def test_import_does_not_pull_optional_frameworks() -> None:
    code = (
        "import sys, r3wire;"
        "heavy = sorted(m for m in ('torch', 'vllm', 'pybase64_', 'zstandard', 'matplotlib') if m in sys.modules);"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_all_names_exist_and_are_sorted() -> None:
    for name in r3wire.__all__:
        assert hasattr(r3wire, name), name
    assert len(set(r3wire.__all__)) == len(r3wire.__all__)
    public = {n for n in dir(r3wire) if not n.startswith("_")}
    submodules = {n for n in public if type(getattr(r3wire, n)).__name__ == "module"}
    assert public - submodules <= set(r3wire.__all__) | {"annotations"}


def test_version_single_source() -> None:
    assert r3wire.__version__ == metadata.version("r3wire")
