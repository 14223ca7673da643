"""Where a document holds a string that is not UTF-8, for errors that name its path.

orjson refuses such a string (a lone surrogate such as ``"\\ud800"``, in a value or a key) without saying where it
is. The search runs only after orjson has refused a document, so documents that are fine never pay for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import NamedTuple

__all__ = ["NotUtf8", "first_leaf", "first_not_utf8", "not_utf8_at"]


class NotUtf8(NamedTuple):
    """A string that is not UTF-8: its path (a key's path ends with the key), the string and its first bad index."""

    parts: list[object]
    text: str
    at: int


def not_utf8_at(text: str) -> int | None:
    """The index of the first character of ``text`` UTF-8 cannot encode (a surrogate), or None if there is none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _text(value: object) -> str | None:
    """The string a JSON writer writes for ``value`` (a str or str subclass, an enum whose value is one), or None."""
    if isinstance(value, str):
        return value
    if isinstance(value, enum.Enum) and isinstance(value.value, str):
        return value.value
    return None


def _children(node: object) -> Iterator[tuple[object, object, str | None]]:
    """Each (key or index, item, the key's string or None) of a dict, list or tuple, in document order.

    A subclass is read from its storage, as orjson writes it: its own ``items()`` or ``__iter__`` may raise or
    never end, and this runs inside dumps after orjson has refused the document."""
    if isinstance(node, dict):
        return ((key, item, _text(key)) for key, item in dict.items(node))
    if isinstance(node, list):
        return ((index, item, None) for index, item in enumerate(list.__iter__(node)))
    assert isinstance(node, tuple)
    return ((index, item, None) for index, item in enumerate(tuple.__iter__(node)))


def first_not_utf8(root: object) -> NotUtf8 | None:
    """The first string (a value, or a dict key) in ``root`` that is not UTF-8, in document order; None if none."""
    found = first_leaf(root, lambda leaf: isinstance(leaf, str) and not_utf8_at(leaf) is not None)
    if found is None:
        return None
    parts, text = found
    assert isinstance(text, str)
    index = not_utf8_at(text)
    assert index is not None
    return NotUtf8(parts, text, index)


def first_leaf(root: object, bad: Callable[[object], bool]) -> tuple[list[object], object] | None:
    """The path to the first leaf or dict key of ``root`` (in document order, each key before its value) for which
    ``bad`` is true, and that leaf (a key or a value as a JSON writer writes it: an enum as its string value).

    Walks dicts, lists and tuples (subclasses too) without recursion; a container reached again is not walked
    again (whatever it holds was seen the first time).
    """
    if not isinstance(root, (dict, list, tuple)):
        text = _text(root)
        leaf: object = root if text is None else text
        return ([], leaf) if bad(leaf) else None
    parts: list[object] = []
    seen = {id(root)}
    stack = [_children(root)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            if stack:
                parts.pop()
            continue
        part, item, name = entry
        if name is not None and bad(name):
            return [*parts, part], name
        if isinstance(item, (dict, list, tuple)):
            if id(item) not in seen:
                seen.add(id(item))
                parts.append(part)
                stack.append(_children(item))
            continue
        text = _text(item)
        leaf = item if text is None else text
        if bad(leaf):
            return [*parts, part], leaf
    return None
