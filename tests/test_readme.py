"""Every Python example in README.md and docs/*.md runs as written (a document's blocks share one namespace,
in order, as a reader would type them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A page needs an optional package when one of its blocks imports it (or r3wire's adapter for it) at top level; an
# import indented under `try:` has a fallback, and the page must run without the package too.
NEEDS = re.compile(r"^(?:import|from)\s+(?:r3wire\.)?(torch|vllm|zstandard)\b", re.MULTILINE)


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if _blocks(p)], ids=lambda p: p.name)
def test_examples_run(path: Path) -> None:
    blocks = _blocks(path)
    for module in sorted({name for block in blocks for name in NEEDS.findall(block)}):
        pytest.importorskip(module)
    namespace: dict[str, Any] = {"__name__": f"example_{path.stem}"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{path.name}#{i}", "exec"), namespace)
