"""Turning what callers hand an encoder (NumPy arrays, torch tensors, nested lists) into a NumPy array."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Collection, Sequence
from typing import Any, Final

import numpy as np

from r3wire._typeset import distinct_types, is_sequence, types_within
from r3wire._validate import MAX_EXTENT, MAX_NDIM, extent
from r3wire._walk import copy_list
from r3wire.errors import EncodeError, R3WireError, describe

__all__ = ["as_numpy", "is_tensor", "refuse_masked"]


_EXACT_FLOAT: Final = 1 << 53  # float64 holds every integer of a smaller magnitude exactly


def as_numpy(obj: object, *, field: str, error: type[R3WireError] = EncodeError) -> np.ndarray[Any, Any]:
    """Return ``obj`` as a NumPy array without copying when it already is one (or a contiguous CPU tensor).

    Nested lists and tuples are converted by NumPy, and refused where NumPy would change a value: ints it can hold
    only as float64 (rounded) or as objects, and bools among numbers (read as 0 and 1).
    torch is never imported here: an object can only be a tensor if the caller already imported torch.

    The shape is bounded as every reader bounds it: at most 32 dimensions (NumPy 2 makes up to 64, NumPy 1 and
    every decoder here hold 32), and non-zero dimensions that multiply to at most ``MAX_EXTENT`` (an empty array
    may claim ``[0, 2**40, 2**40]``; no reader can make it, so no writer sends it).

    Raises:
        EncodeError (or ``error``): ``obj`` cannot be viewed as an array, its shape is out of those bounds, or
            NumPy would change one of its values.
    """
    arr = _as_array(obj, field, error)
    if arr.ndim > MAX_NDIM:
        raise error.make(field, f"an array of at most {MAX_NDIM} dimensions", f"{arr.ndim} dimensions", raw=True)
    if not arr.size and extent(arr.shape) > MAX_EXTENT:
        raise error.make(
            f"{field}.shape",
            f"dimensions whose non-zero ones multiply to at most {MAX_EXTENT} (what every reader accepts)",
            f"{list(arr.shape)}",
            raw=True,
        )
    return arr


_UNMASKED: Final = "an array without a mask (send arr.filled(value), or the mask as its own array)"


def refuse_masked(obj: object, field: str, error: type[R3WireError] = EncodeError) -> None:
    """Refuse a ``numpy.ma.MaskedArray``: its hidden values would be read as real ones and its mask lost.

    Raises:
        EncodeError (or ``error``): ``obj`` is a masked array.
    """
    if isinstance(obj, np.ma.MaskedArray):
        raise error.make(field, _UNMASKED, "a numpy.ma.MaskedArray", raw=True)


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor, without importing torch: one can only exist if the caller did."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _as_array(obj: object, field: str, error: type[R3WireError]) -> np.ndarray[Any, Any]:
    if isinstance(obj, np.ndarray):
        refuse_masked(obj, field, error)
        # A subclass may override min(), max() or comparisons: the checks here must see the bytes that are sent.
        return obj if type(obj) is np.ndarray else obj.view(np.ndarray)
    if is_tensor(obj):
        from r3wire.torch import tensor_to_numpy  # noqa: PLC0415  # the adapter is a leaf; load it only when used

        return tensor_to_numpy(obj, field=field)
    if isinstance(obj, (str, bytes, bytearray, memoryview)) or obj is None:
        raise error.make(field, "an array (NumPy array, torch tensor or nested lists)", type(obj).__name__, raw=True)
    # Its storage, as NumPy reads it: a subclass's own __iter__ may raise or differ.
    if isinstance(obj, (list, tuple)) and any(isinstance(item, np.ma.MaskedArray) for item in copy_list(obj)):
        # np.asarray keeps a masked item's hidden values and drops its mask.
        raise error.make(
            field, _UNMASKED, "a sequence holding a numpy.ma.MaskedArray", raw=True,
        )  # fmt: skip
    leaves = _leaf_types(obj, field, error) if isinstance(obj, (list, tuple)) else None
    try:
        arr = np.asarray(obj)
    # MemoryError: range(10**12); RuntimeError: a torch tensor inside a list that .numpy() refuses (requires grad).
    # SystemError: NumPy's own isinstance checks on an int of an unhashable class (see r3wire._typeset) raise
    # TypeError inside np.asarray, which then fails with "returned a result with an exception set" (NumPy 2.x).
    except (ValueError, TypeError, OverflowError, MemoryError, RuntimeError, SystemError) as exc:
        raise error.make(
            field,
            "an array (NumPy array, torch tensor or nested lists)",
            f"{type(obj).__name__} ({str(exc) or type(exc).__name__})",
            raw=True,
        ) from exc
    if arr.size and is_sequence(obj):
        # The scalar types the level walk found, when NumPy made an axis of each level above them.
        types = leaves[0] if leaves is not None and leaves[1] == arr.ndim else None
        _check_converted(obj, arr, field, error, types)
    return arr


_TEXT: Final = (str, bytes)


def _leaf_types(obj: list[Any] | tuple[Any, ...], field: str, error: type[R3WireError]) -> tuple[set[type], int] | None:
    """Refuse nested lists holding a string (or bytes) before NumPy converts them; return the types found below
    the plain lists and tuples, and their depth (what :func:`_scalar_types` would read for that many axes), or
    None where the walk stopped without them.

    NumPy makes every element of such lists a fixed-width string as long as the longest one: 786k ids with one
    1000-character string took 3 GB and 10 s before the dtype was refused (review 11a). The types are read a level
    at a time in C, and the first string's place from the levels' lengths. Lists of anything but plain lists,
    tuples and scalars (arrays, subclasses) are left to NumPy and the checks after it.

    Raises:
        EncodeError (or ``error``): a string or bytes among the values; the field names its place.
    """
    levels: list[list[Any]] = [[obj]]
    while levels[-1]:
        level = levels[-1]
        try:
            kinds = set(map(type, level))
        except TypeError:  # an unhashable class (see r3wire._typeset): NumPy and the later checks decide
            return None
        text = {kind for kind in kinds if issubclass(kind, _TEXT)}
        if text:
            at = next(i for i, kind in enumerate(map(type, level)) if kind in text)
            where = _place(levels, at)
            raise error.make(f"{field}{where}", "a number (nested lists of numbers)", describe(level[at]), raw=True)
        if not kinds <= _PLAIN_SEQUENCES:
            return kinds, len(levels) - 1
        levels.append(list(itertools.chain.from_iterable(level)))
    return None


def _place(levels: list[list[Any]], at: int) -> list[int]:
    """The index path of item ``at`` of the last of ``levels`` (each the items of the one before, flattened)."""
    where: list[int] = []
    for parents in reversed(levels[:-1]):
        ends = np.cumsum(np.fromiter(map(len, parents), dtype=np.int64, count=len(parents)))
        parent = int(np.searchsorted(ends, at, side="right"))
        where.append(at - (int(ends[parent - 1]) if parent else 0))
        at = parent
    return where[::-1]


def _check_converted(
    obj: Sequence[Any],
    arr: np.ndarray[Any, Any],
    field: str,
    error: type[R3WireError],
    types: Collection[type] | None = None,
) -> None:
    """Refuse a nested sequence whose values NumPy changed in ``arr`` (``types``: its scalar types, if known).

    NumPy turns ints past int64 (``[-1, 2**64 - 1]``, even ``[3, 2**64 - 1]``) into float64, rounding them, or
    into objects, and ints beside floats into float64; a bool beside numbers becomes 0 or 1. The types of the
    scalars are read in C (:func:`_scalar_types`). Only a float64 result of magnitude ``>= 2**53`` (or an object
    one) holding ints can have lost one, so only then is the source looked at element by element.
    """
    kind = arr.dtype.kind
    if kind == "b":
        return  # bools only
    if types is None:
        types = _scalar_types(obj, arr.ndim)
    if any(issubclass(t, (bool, np.bool_)) for t in types):
        _refuse_bool(obj, field, error)
    holds_ints = any(issubclass(t, (int, np.integer)) for t in types)
    # abs() >= 2**53 rather than max/min: a NaN would make both comparisons false and hide a large int beside it.
    if holds_ints and (kind == "O" or (arr.dtype == np.float64 and bool((np.abs(arr) >= _EXACT_FLOAT).any()))):
        _check_exact_ints(obj, arr.dtype, field, error)


def _scalar_types(obj: Sequence[Any], ndim: int) -> Collection[type]:
    """The types of the scalars in ``obj``, nested lists and tuples ``ndim`` deep; an array (or tensor) among them
    counts as its dtype's scalar type and is never iterated (iterating one element by element took seconds)."""
    types: set[type] = set()
    level: list[Any] = [obj]
    for depth in range(ndim):
        if not types_within(level, _PLAIN_SEQUENCES):  # rare: arrays among the lists, split them off
            for item in level:
                if not isinstance(item, (list, tuple)):
                    types.add(np.asarray(item).dtype.type)
            level = [item for item in level if isinstance(item, (list, tuple))]
        if depth == ndim - 1:
            try:
                types.update(map(type, itertools.chain.from_iterable(level)))
            except TypeError:  # an unhashable class (see r3wire._typeset): the types by identity instead
                return [*types, *distinct_types(list(itertools.chain.from_iterable(level)))]
        else:
            level = list(itertools.chain.from_iterable(level))
    return types


_PLAIN_SEQUENCES: Final = frozenset({list, tuple})


def _items(obj: Sequence[Any]) -> tuple[list[Any], tuple[int, ...]]:
    objects = np.asarray(obj, dtype=object)
    return objects.ravel().tolist(), objects.shape


def _refuse_bool(obj: Sequence[Any], field: str, error: type[R3WireError]) -> None:
    items, shape = _items(obj)
    at = next(i for i, item in enumerate(items) if isinstance(item, (bool, np.bool_)))
    where = [int(i) for i in np.unravel_index(at, shape)]
    raise error.make(
        f"{field}{where}",
        "a number like the others (NumPy reads a bool among integers as 0 or 1; pass a bool array on its own)",
        items[at],
    )


def _check_exact_ints(obj: Sequence[Any], dtype: np.dtype[Any], field: str, error: type[R3WireError]) -> None:
    """Refuse a source whose ints ``dtype`` (float64 or object) cannot hold as integers or round-trip exactly."""
    items, _ = _items(obj)
    ints = [item for item in items if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))]
    if not ints:
        return  # floats (or, for object, things that are no numbers): the dtype rules decide
    if len(ints) == len(items):
        low, high = min(ints), max(ints)
        raise error.make(
            field,
            "integers NumPy converts exactly (a nested list with ints past int64 becomes float64 or object; "
            "pass an array of an explicit integer dtype, such as np.uint64)",
            f"integers from {describe(int(low))} to {describe(int(high))}, which NumPy made {dtype}",
            raw=True,
        )
    for item in ints:
        try:
            exact = int(float(item)) == int(item)  # as Python ints: np.int64 == float compares as floats
        except (OverflowError, ValueError):
            exact = False
        if not exact:
            raise error.make(
                field, "numbers float64 holds exactly", f"the integer {describe(int(item))} among floats", raw=True
            )
