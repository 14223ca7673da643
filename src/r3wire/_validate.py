"""Checks shared by every reader and writer: integers, shapes, sizes and the JSON object itself.

Each check raises the caller's error class with a message of one shape: ``<field> must be <expected>, got <got>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeGuard

import numpy as np
import orjson

from r3wire.errors import DecodeError, R3WireError

__all__ = [
    "MAX_DIM",
    "MAX_NDIM",
    "check_element_count",
    "check_int",
    "check_shape",
    "load_object",
    "optional_max_elements",
]

# numpy 1.x allows at most 32 dimensions; nothing on the wire needs more.
MAX_NDIM: Final = 32
# A dimension must fit a signed 64-bit integer so every reader can hold it; the data length bounds the product.
MAX_DIM: Final = (1 << 63) - 1


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """True for Python and NumPy integers, false for bools (which are ints in Python but never a count)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(
    value: object,
    field: str,
    *,
    minimum: int,
    maximum: int,
    error: type[R3WireError] = DecodeError,
) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``minimum .. maximum``.

    Raises:
        R3WireError: of class ``error``, naming ``field``.
    """
    if not is_int(value):
        raise error.make(field, f"an integer in {minimum}..{maximum}", value)
    number = int(value)
    if not minimum <= number <= maximum:
        raise error.make(field, f"an integer in {minimum}..{maximum}", number)
    return number


def optional_max_elements(value: object) -> int | None:
    """A caller's ``max_elements`` limit: ``None`` (no limit), or an integer in ``0 .. 2**63``.

    Raises:
        R3WireError: anything else.
    """
    if value is None:
        return None
    return check_int(value, "max_elements", minimum=0, maximum=1 << 63, error=R3WireError)


def check_shape(
    value: object,
    field: str,
    *,
    ndim: int | None,
    error: type[R3WireError] = DecodeError,
) -> tuple[int, ...]:
    """Return ``value`` as a tuple of non-negative ints, with ``ndim`` entries when ``ndim`` is given.

    A JSON array arrives as a ``list``; in-process callers may pass a tuple and NumPy integers.

    Raises:
        R3WireError: of class ``error``, naming ``field`` or the offending ``field[i]``.
    """
    if not isinstance(value, (list, tuple)):
        expected = f"an array of {ndim} non-negative integers" if ndim is not None else "an array of integers"
        raise error.make(field, expected, value)
    if ndim is not None and len(value) != ndim:
        raise error.make(
            field,
            f"an array of {ndim} non-negative integers",
            f"{len(value)} entries: {value!r}"[:120],
            raw=True,
        )
    if len(value) > MAX_NDIM:
        raise error.make(field, f"at most {MAX_NDIM} dimensions", f"{len(value)}", raw=True)
    return tuple(
        check_int(dim, f"{field}[{i}]", minimum=0, maximum=MAX_DIM, error=error) for i, dim in enumerate(value)
    )


def check_element_count(shape: Sequence[int], max_elements: int | None, field: str = "shape") -> int:
    """Return the element count of ``shape``, refusing it when it exceeds ``max_elements``.

    Raises:
        DecodeError: the count exceeds ``max_elements``.
    """
    count = math.prod(shape)
    if max_elements is not None and count > max_elements:
        raise DecodeError.make(
            field,
            f"at most max_elements={max_elements} elements",
            f"{list(shape)} ({count} elements)",
            raw=True,
        )
    return count


def load_object(payload: object, *, what: str = "payload") -> Mapping[str, Any]:
    """Return ``payload`` as a JSON object: a mapping as is, or JSON text (``str`` or bytes-like) parsed.

    Raises:
        DecodeError: the text is not valid JSON, or the value is not a JSON object.
    """
    if isinstance(payload, Mapping):
        return payload
    if isinstance(payload, (str, bytes, bytearray, memoryview)):
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise DecodeError.make(None, f"JSON text of an object ({what})", f"invalid JSON: {exc}", raw=True) from exc
        if not isinstance(parsed, dict):
            raise DecodeError.make(None, f"a JSON object ({what})", f"a JSON {type(parsed).__name__}", raw=True)
        return parsed
    raise DecodeError.make(None, f"a JSON object or its text ({what})", type(payload).__name__, raw=True)


def check_keys(
    obj: Mapping[Any, Any],
    *,
    required: Sequence[str],
    optional: Sequence[str] = (),
) -> None:
    """Require every key in ``required`` and refuse any key outside ``required`` and ``optional``.

    Raises:
        DecodeError: a key is missing, unknown, or not a string.
    """
    for key in required:
        if key not in obj:
            raise DecodeError.make(key, "present", "no such key", raw=True)
    if len(obj) > len(required):
        allowed = set(required).union(optional)
        unknown = [key for key in obj if not (isinstance(key, str) and key in allowed)]
        if unknown:
            shown = ", ".join(repr(k)[:40] for k in unknown[:5])
            raise DecodeError.make(
                None,
                f"an object with keys {sorted(allowed)}",
                f"unknown key(s) {shown}",
                raw=True,
            )
