"""Shared by the property tests: arbitrary JSON values, and the check behind every decoder's fuzzing promise
(any input is either accepted or raises DecodeError with a message, never another exception)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from hypothesis import strategies as st

from r3wire import DecodeError, R3WireError

__all__ = ["JSON_LEAVES", "JSON_VALUES", "LAYOUTS", "corrupted", "decoded_or_none", "in_layout"]

T = TypeVar("T")

# Integers beyond 64 bits and floats of every finite size: what a hostile or buggy peer can put in JSON.
JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def decoded_or_none(
    decode: Callable[[], T], error: type[R3WireError] = DecodeError, *, named: bool = False
) -> T | None:
    """``decode()``'s result, or None when it raised ``error`` carrying a message and a string field (or no
    field, unless ``named``).

    Any other exception propagates, failing the property.
    """
    raised: R3WireError | None = None
    try:
        return decode()
    except error as exc:
        raised = exc
    assert raised is not None
    assert str(raised)
    assert raised.field is None or isinstance(raised.field, str)
    assert not named or raised.field is not None
    return None


def corrupted(text: bytes, noise: bytes, where: int) -> bytes:
    """``text`` with ``noise`` written over it from offset ``where`` (growing it when it runs past the end)."""
    damaged = bytearray(text)
    damaged[where : where + len(noise)] = noise
    return bytes(damaged)


LAYOUTS = ("plain", "fortran", "reversed", "readonly")


def in_layout(draw: st.DrawFn, array: np.ndarray[Any, Any], layouts: Sequence[str] = LAYOUTS) -> np.ndarray[Any, Any]:
    """A freshly drawn 3-d ``array`` in a memory layout encoders must read alike: as drawn, Fortran order, both
    outer axes reversed (negative strides, reversed values), axes transposed in memory, or read-only."""
    layout = draw(st.sampled_from(layouts))
    if layout == "fortran":
        return np.asfortranarray(array)
    if layout == "reversed":
        return array[::-1, :, ::-1]
    if layout == "transposed":
        transposed: np.ndarray[Any, Any] = np.ascontiguousarray(array.transpose(2, 1, 0)).transpose(2, 1, 0)
        return transposed
    if layout == "readonly":
        array.flags.writeable = False
    return array
