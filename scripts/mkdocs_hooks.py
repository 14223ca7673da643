"""MkDocs hooks for the docs site (mkdocs.yml).

1. Links from docs/ to repository files outside it (``../tests/vectors/``) point at the repository. The pages
   are written to read well on GitHub, where such relative links work; on the built site they would be dead.
   Each becomes ``<repo_url>/blob/main/<path>`` (``tree`` for a directory); a link to a file that does not
   exist is as broken on GitHub as on the site, so it is reported as a warning, which ``mkdocs build --strict``
   turns into a failure. Links inside docs/ are left to MkDocs' own validation.
2. The docstrings' Sphinx roles (``:func:`~r3wire.encode_routes```), which the Google-style renderer leaves as
   literal text, become code cross-referenced to the API reference where the object is documented there.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.r3wire")

# An inline Markdown link's target: ](target) or ](target "title").
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def _rewrite_line(line: str, page_dir: Path, root: Path, repo_url: str, page: str) -> str:
    def replace(match: re.Match[str]) -> str:
        target = match.group("target")
        if _EXTERNAL.match(target):
            return match.group(0)
        path, _, anchor = target.partition("#")
        resolved = (page_dir / path).resolve()
        docs_dir = root / "docs"
        if resolved == docs_dir or docs_dir in resolved.parents:
            return match.group(0)
        if not resolved.exists() or root not in resolved.parents:
            log.warning("%s: link to %r, which is not a file of the repository", page, target)
            return match.group(0)
        kind = "tree" if resolved.is_dir() else "blob"
        url = f"{repo_url.rstrip('/')}/{kind}/main/{resolved.relative_to(root).as_posix()}"
        return f"]({url}{'#' + anchor if anchor else ''}{match.group('title') or ''})"

    return _LINK.sub(replace, line)


# What a Sphinx role in a docstring looks like once rendered: :func:<code>~r3wire.x</code>.
_ROLE = re.compile(r":(?:py:)?(?:func|class|data|mod|meth|attr|exc|obj):<code>(?P<tilde>~?)(?P<name>[\w.]+)</code>")


def _role(match: re.Match[str]) -> str:
    name = match.group("name")
    shown = name.rsplit(".", 1)[-1] if match.group("tilde") else name
    identifier = name if "." in name else f"r3wire.{name}"
    # mkdocs-autorefs resolves the element after the page is rendered; "optional" leaves plain code when the
    # object has no reference entry.
    return f'<autoref identifier="{identifier}" optional><code>{shown}</code></autoref>'


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Turn rendered Sphinx roles into cross-references (MkDocs hook; called once per page)."""
    return _ROLE.sub(_role, html)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite links that leave docs/ (MkDocs hook; called once per page)."""
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    page_dir = (docs_dir / page.file.src_uri).parent
    out: list[str] = []
    in_fence = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        out.append(line if in_fence else _rewrite_line(line, page_dir, root, config["repo_url"], page.file.src_uri))
    return "".join(out)
