"""The one writer of the JSONPath-like locations r3wire's errors name (``$.choices[0].routed_experts``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final, NamedTuple

import orjson

from r3wire.errors import describe

__all__ = ["json_path"]

# A path names where a problem is; it must not grow an error message without bound (a 100 KB key, a document
# nested a thousand deep). Longer keys and paths are shortened visibly; ReadResult.parts keeps the exact keys.
_MAX_KEY: Final = 64
_MAX_PARTS: Final = 32


def json_path(parts: Sequence[object], *, exact: bool = False) -> str:
    """A JSONPath-like location: ``$.choices[0].routed_experts``; other keys quoted as JSON, ``$["a b"]``.

    For an error message (the default), a key over 64 characters is cut (``["abc..." (100000 characters)]``) and
    a path over 32 parts keeps its first and last 16 around ``...(n more)``. ``exact`` writes every key in full.
    """
    shown: Sequence[object] = parts
    if len(parts) > _MAX_PARTS and not exact:
        half = _MAX_PARTS // 2
        shown = [*parts[:half], _Elided(len(parts) - 2 * half), *parts[-half:]]
    out = ["$"]
    for part in shown:
        if isinstance(part, _Elided):
            out.append(f"...({part.parts} more)")
        elif isinstance(part, str):
            if len(part) > _MAX_KEY and not exact:
                out.append(f"[{_quoted(part[: _MAX_KEY - 3] + '...')} ({len(part)} characters)]")
            else:
                out.append(f".{part}" if part.isidentifier() else f"[{_quoted(part)}]")
        elif isinstance(part, int) and not isinstance(part, bool):
            out.append(f"[{part}]")
        else:  # a non-string key (orjson.OPT_NON_STR_KEYS)
            out.append(f"[{part!r}]" if exact else f"[{describe(part)}]")
    return "".join(out)


def _quoted(key: str) -> str:
    """``key`` as a JSON string; a key that is not UTF-8 (a lone surrogate) with its surrogates as ``\\u`` escapes."""
    try:
        return orjson.dumps(key).decode()
    except orjson.JSONEncodeError:  # orjson writes UTF-8 only; the stdlib escapes what is not ASCII
        return json.dumps(key)


class _Elided(NamedTuple):
    parts: int
