"""Shared by the property tests: arbitrary JSON values, and the check behind every decoder's fuzzing promise
(any input is either accepted or raises DecodeError with a message, never another exception)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import DecodeError, R3WireError

__all__ = ["JSON_LEAVES", "JSON_VALUES", "LAYOUTS", "NUMPY_SCALARS", "corrupted", "decoded_or_none", "in_layout"]

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

# Every kind of NumPy scalar an in-process document may hold (np.timedelta64 is an np.signedinteger: int() of it
# raised TypeError or dropped the unit). timedelta64 and datetime64 carry explicit units (NumPy 2.5 deprecates the
# generic one).
NUMPY_SCALAR_DTYPES = [
    "?", "i1", "u1", "<i2", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8", "g", "c8", "c16",
    "m8[ns]", "m8[s]", "m8[D]", "M8[ns]", "M8[s]", "M8[D]", "S3", "U3",
]  # fmt: skip
NUMPY_SCALARS = st.one_of(
    st.sampled_from(NUMPY_SCALAR_DTYPES).flatmap(
        lambda name: hnp.from_dtype(np.dtype(name)).map(lambda x: np.array(x, dtype=np.dtype(name))[()])
    ),
    st.binary(min_size=1, max_size=4).map(np.void),
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
