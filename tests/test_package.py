"""The package surface: imports stay light, __all__ is the table of contents, the version has one source, and
``pip install r3wire`` alone (numpy and orjson, no extras) gives a working package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import r3wire

SRC = Path(__file__).resolve().parent.parent / "src"

# Run first in a subprocess: from then on only the standard library and the two declared dependencies import.
# Everything else (the extras, and any undeclared dependency that crept in) fails as if it were not installed.
_ONLY_DECLARED_DEPENDENCIES = textwrap.dedent(
    """
    import sys
    ALLOWED = set(sys.stdlib_module_names) | {"numpy", "orjson", "r3wire"}
    PRELOADED = {name.partition(".")[0] for name in sys.modules}

    class OnlyDeclaredDependencies:
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            # _sysconfigdata_* is the standard library's per-platform build data, missing from stdlib_module_names.
            if top not in ALLOWED and top not in PRELOADED and not top.startswith("_sysconfigdata"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, OnlyDeclaredDependencies())
    """
)


def _run_without_extras(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _ONLY_DECLARED_DEPENDENCIES + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_does_not_pull_optional_frameworks() -> None:
    # pybase64 (the fast extra) is imported on purpose when installed; the frameworks must wait until used.
    code = (
        "import sys, r3wire;"
        "heavy = sorted(m for m in ('torch', 'vllm', 'zstandard', 'matplotlib') if m in sys.modules);"
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
    version_file = (Path(r3wire.__file__).parent / "_version.py").read_text(encoding="utf-8")
    assert re.findall(r'^__version__ = "(.+)"$', version_file, re.MULTILINE) == [r3wire.__version__]


def test_requirements_without_extras_are_numpy_and_orjson() -> None:
    unconditional = set()
    extras: set[str] = set()
    for requirement in metadata.requires("r3wire") or []:
        spec, _, marker = requirement.partition(";")
        name = re.split(r"[\s<>=!~\[(@]", spec.strip(), maxsplit=1)[0].lower()
        found = re.findall(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        extras.update(found)
        if not found:
            unconditional.add(name)
    assert unconditional == {"numpy", "orjson"}
    assert extras == {"fast", "torch", "vllm", "zstd", "plot"}
    assert set(metadata.metadata("r3wire").get_all("Provides-Extra") or []) == extras


def test_every_module_and_public_name_imports_without_extras() -> None:
    out = _run_without_extras(
        """
        import importlib, pkgutil
        import numpy as np
        import r3wire
        from r3wire import _base64

        found = pkgutil.walk_packages(r3wire.__path__, "r3wire.")
        modules = sorted(m.name for m in found if m.name != "r3wire.__main__")  # __main__ would run the CLI
        for name in modules:
            importlib.import_module(name)
        for name in r3wire.__all__:
            getattr(r3wire, name)
        routes = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
        back = r3wire.decode_routes(r3wire.encode_routes(routes, num_experts=128), num_experts=128)
        assert np.array_equal(back, routes)
        print(_base64.BACKEND, " ".join(modules))
        """
    )
    backend, *modules = out.split()
    assert backend == "stdlib"
    assert "r3wire.torch" in modules
    assert "r3wire.cli" in modules


def test_torch_adapter_names_the_extra_when_torch_is_missing() -> None:
    out = _run_without_extras(
        """
        import r3wire.torch
        try:
            r3wire.torch.tensor_to_numpy(object())
        except ImportError as exc:
            print(exc)
        """
    )
    assert "pip install 'r3wire[torch]'" in out


def test_suite_imports_the_install_under_test() -> None:
    mode = os.environ.get("R3WIRE_INSTALL")
    if mode is None:
        pytest.skip("R3WIRE_INSTALL unset: scripts/dev.py sets it to the install it made")
    location = Path(r3wire.__file__).resolve()
    direct_url = json.loads(metadata.distribution("r3wire").read_text("direct_url.json") or "{}")
    if mode == "wheel":
        assert not location.is_relative_to(SRC), location
        assert "archive_info" in direct_url, direct_url
        assert direct_url["url"].endswith(".whl"), direct_url
    else:
        assert location.is_relative_to(SRC), location
        assert direct_url.get("dir_info", {}).get("editable") is True, direct_url
