"""Every Python example in README.md and docs/*.md runs as written (a document's blocks share one namespace,
in order, as a reader would type them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OPTIONAL = {"torch": "torch", "vllm": "vllm", "zstandard": "zstandard", "fireworks": "zstandard"}


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


@pytest.mark.parametrize("path", [p for p in DOCUMENTS if _blocks(p)], ids=lambda p: p.name)
def test_examples_run(path: Path) -> None:
    blocks = _blocks(path)
    for word, module in OPTIONAL.items():
        if any(word in block for block in blocks):
            pytest.importorskip(module)
    namespace: dict[str, Any] = {"__name__": f"example_{path.stem}"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{path.name}#{i}", "exec"), namespace)
