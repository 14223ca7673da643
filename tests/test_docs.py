"""No Python example in the documentation escapes being run.

tests/test_readme.py runs every block fenced exactly as ```python (at the start of a line) in README.md and the
pages under docs/. A block fenced another way (```py, ```python3, ```pycon, an info string after the language,
an indented fence) would be rendered as Python on GitHub and the docs site but never run; this test rejects
those, so an example is either run or visibly not code to run (```text, ```console)."""

from __future__ import annotations

import importlib.util
import logging
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON_NAMES = {"python", "python3", "py", "py3", "pycon", "ipython", "ipython3"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)$", re.MULTILINE)


def _unrun_python_fences(text: str) -> list[str]:
    problems: list[str] = []
    opening = True
    for match in FENCE.finditer(text):
        if not opening:
            opening = True  # this fence closes the block
            continue
        opening = False
        language = match.group("info").strip().split(" ")[0].lower()
        exact = match.group("indent") == "" and match.group("fence") == "```" and match.group("info") == "python"
        if language.strip("{.}") in PYTHON_NAMES and not exact:
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"line {line}: {match.group(0).strip()!r}")
    return problems


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_are_fenced_to_run(path: Path) -> None:
    problems = _unrun_python_fences(path.read_text(encoding="utf-8"))
    assert not problems, (
        f"{path.relative_to(ROOT)}: Python blocks the tests would not run; fence them exactly ```python "
        f"(tests/test_readme.py runs them) or ```text if they cannot run: {problems}"
    )


def test_the_check_finds_escaping_fences() -> None:
    text = "```python\nx = 1\n```\n\n```py\nx\n```\n\n  ```python\nx\n  ```\n\n```python title='a'\nx\n```\n"
    assert [p.split(":")[0] for p in _unrun_python_fences(text)] == ["line 5", "line 9", "line 13"]


def test_every_docs_page_is_run() -> None:
    # tests/test_readme.py must look at every page here, subfolders (docs/reference/) included.
    from test_readme import DOCUMENTS as RUN

    assert set(DOCUMENTS) <= set(RUN)


def test_every_docs_page_is_in_the_site_nav() -> None:
    # mkdocs build --strict (in the test command) fails on a page left out of the nav; this says so in pytest too.
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - nav == set(), "add these pages to the nav in mkdocs.yml"
    assert nav - pages == set(), "the nav in mkdocs.yml lists pages that do not exist"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_hooks_rewrite_repository_links_and_report_broken_ones(caplog: pytest.LogCaptureFixture) -> None:
    hooks = _hooks()
    page = SimpleNamespace(file=SimpleNamespace(src_uri="wire-format.md"))
    config = {"docs_dir": str(ROOT / "docs"), "repo_url": "https://github.com/r3wire/r3wire"}
    text = (
        "[v](../tests/vectors/) [s](envelope.schema.json) [x](https://example.com) [m](../README.md#the-wire-format)\n"
        "```text\n[f](../tests/vectors/)\n```\n[b](../tests/missing.json)\n"
    )
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.r3wire"):
        out = hooks.on_page_markdown(text, page, config, None)
    assert out.splitlines() == [
        "[v](https://github.com/r3wire/r3wire/tree/main/tests/vectors) [s](envelope.schema.json) "
        "[x](https://example.com) [m](https://github.com/r3wire/r3wire/blob/main/README.md#the-wire-format)",
        "```text",
        "[f](../tests/vectors/)",
        "```",
        "[b](../tests/missing.json)",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "wire-format.md: link to '../tests/missing.json', which is not a file of the repository"
    ]


def test_site_hooks_turn_sphinx_roles_into_references() -> None:
    html = "see :func:<code>~r3wire.encode_routes</code> and :class:<code>DecodeError</code>"
    assert _hooks().on_page_content(html, None, None, None) == (
        'see <autoref identifier="r3wire.encode_routes" optional><code>encode_routes</code></autoref> and '
        '<autoref identifier="r3wire.DecodeError" optional><code>DecodeError</code></autoref>'
    )
