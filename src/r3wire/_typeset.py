"""The types of many values at once, for fast paths that sort a long list out by its few distinct types.

``set(map(type, items))`` runs in C, but hashes each type: a class whose metaclass defines ``__eq__`` without
``__hash__`` is unhashable, and the set (or a ``type(x) in frozenset`` test, or ``isinstance`` against an ABC,
whose cache hashes the class) raises ``TypeError``. These helpers give such a value the answer that sends it down
the per-item path, where it is refused like any other unsupported value; the common case costs the same.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, TypeGuard

__all__ = ["distinct_types", "instance_of", "is_mapping", "is_sequence", "types_within"]


def distinct_types(items: Sequence[object]) -> Collection[type]:
    """The distinct types of ``items``: a set, or a list when one of them is unhashable (compare by identity,
    never with ``in``, which calls the metaclass's ``__eq__``)."""
    try:
        return set(map(type, items))
    except TypeError:
        return list({id(cls): cls for cls in map(type, items)}.values())


def types_within(items: Iterable[object], allowed: AbstractSet[object]) -> bool:
    """Whether the type of every item is exactly one of ``allowed`` (False when one is unhashable: it is none)."""
    try:
        return set(map(type, items)) <= allowed
    except TypeError:
        return False


def instance_of(value: object, kinds: Any) -> bool:
    """``isinstance(value, kinds)``, False for a value whose class is unhashable where ``kinds`` holds an ABC."""
    try:
        return isinstance(value, kinds)
    except TypeError:
        return False


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``; False for a value whose class is unhashable and no dict."""
    try:
        return isinstance(value, Mapping)
    except TypeError:
        return isinstance(value, dict)


def is_sequence(value: object) -> TypeGuard[Sequence[Any]]:
    """``isinstance(value, Sequence)``; for a value whose class is unhashable, whether it is a list or tuple. A
    memoryview of more than one dimension is not one: iterating it raises ``NotImplementedError``."""
    if isinstance(value, memoryview):
        return value.ndim == 1
    try:
        return isinstance(value, Sequence)
    except TypeError:
        return isinstance(value, (list, tuple))
