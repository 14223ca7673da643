"""Counting Python-level work without timing it: a cost assertion that a shared, noisy machine cannot flake."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def python_calls(fn: Callable[..., object], refusal: type[BaseException] = Exception) -> int:
    """How many Python-level function calls ``fn()`` makes (C calls are not counted); a ``refusal`` it raises is
    the behaviour under test (its class asserted by the caller) and is swallowed, anything else propagates."""
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        fn()
    except refusal:
        pass
    finally:
        sys.setprofile(None)
    return calls
