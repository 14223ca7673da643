"""Sampled-token logprobs: clamping non-finite values to a floor, with a count and a request-scoped warning.

vLLM occasionally reports a non-finite logprob for a token it just sampled. ``orjson`` writes such a value as
``null`` without a word, and vLLM's own floor ``max(x, -9999.0)`` lets NaN through (``max`` keeps its first
argument when the comparison is false). Every value that is not finite, and every missing one, becomes the floor
here; every finite value comes back bit for bit; the caller is told how many were replaced.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire.errors import EncodeError, R3WireError, describe

__all__ = ["DEFAULT_FLOOR", "ClampResult", "clamp_logprobs"]

DEFAULT_FLOOR: Final = -9999.0
"""The value a non-finite or missing logprob becomes: the floor vLLM itself applies at its serving boundaries."""

# A child of "r3wire": its records reach handlers attached to the "r3wire" logger.
logger: Final = logging.getLogger("r3wire.logprobs")

# float16/32/64 only: these have exact wire dtypes; longdouble's width and padding differ between platforms.
_FLOAT_SIZES: Final = (2, 4, 8)
# Python floats (np.float64 is a subclass), and the narrower NumPy scalars, convert to float64 exactly.
_EXACT_FLOAT_TYPES: Final = (float, np.float32, np.float16)
# A bool is an int in Python but never a logprob: True would silently become 1.0.
_REJECTED_TYPES: Final = (bool, np.bool_)


class ClampResult(NamedTuple):
    """What :func:`clamp_logprobs` returns: the clamped copy, and how many positions were replaced."""

    values: np.ndarray[Any, Any]
    num_clamped: int


def check_floor(floor: object, dtype: np.dtype[Any] | None = None) -> float:
    """Return ``floor`` as a ``float`` if it is finite and, when ``dtype`` is given, exactly representable in it.

    Raises:
        R3WireError: the floor is not a real number, not finite, or would be rounded in ``dtype``.
    """
    if isinstance(floor, _REJECTED_TYPES) or not isinstance(floor, (int, float, np.integer, np.floating)):
        raise R3WireError.make("floor", "a finite float", floor)
    try:
        value = float(floor)
    except OverflowError:
        raise R3WireError.make("floor", "a finite float", floor) from None
    if not math.isfinite(value) or (isinstance(floor, (int, np.integer)) and int(value) != int(floor)):
        raise R3WireError.make("floor", "a finite float", floor)
    if dtype is not None:
        # The floor is written into the caller's dtype; a floor that would round there (e.g. -9999.0 in float16
        # is -10000.0) is refused up front, for every input, rather than only on the rare call that clamps.
        with np.errstate(over="ignore"):
            stored = float(np.asarray(value, dtype=dtype))
        if stored != value:
            raise R3WireError.make(
                "floor",
                f"a value exactly representable in {dtype.name}",
                f"{value!r} (stored as {stored!r} in {dtype.name})",
                raw=True,
            )
    return value


def _first_position(values: Sequence[object], types: tuple[type, ...]) -> int:
    return next(i for i, v in enumerate(values) if isinstance(v, types))


def _sequence_to_array(values: Sequence[object], field: str) -> np.ndarray[Any, Any]:
    """A flat sequence of ``float | int | None`` as float64, None as NaN; anything else is an EncodeError."""
    # set(map(type, ...)) runs in C: the element types of a million-entry list are known in a few milliseconds,
    # and the slow per-element path below runs only for ints, which need an exactness check.
    kinds = set(map(type, values))
    has_int = False
    for kind in kinds:
        if kind is type(None) or (issubclass(kind, _EXACT_FLOAT_TYPES) and not issubclass(kind, _REJECTED_TYPES)):
            continue
        if issubclass(kind, (int, np.integer)) and not issubclass(kind, _REJECTED_TYPES):
            has_int = True
            continue
        i = _first_position(values, (kind,))
        raise EncodeError.make(f"{field}[{i}]", "a float or None (a logprob, or a missing one)", values[i])
    if has_int:
        for i, v in enumerate(values):
            if isinstance(v, (int, np.integer)):
                try:
                    exact = int(float(v)) == int(v)
                except OverflowError:
                    exact = False
                if not exact:
                    raise EncodeError.make(f"{field}[{i}]", "an integer exactly representable as a float64", v)
    return np.array(values, dtype=np.float64)


def as_float_array(values: object, field: str = "values") -> tuple[np.ndarray[Any, Any], bool]:
    """``values`` as a float16/32/64 NumPy array: arrays and tensors as they are, sequences as float64.

    Missing entries (None) of a sequence become NaN. Returns the array and whether it is a new one (``False``
    when it may share memory with ``values``).

    Raises:
        EncodeError: not a float array, or a sequence holding something other than floats, ints and None.
    """
    if isinstance(values, np.ndarray) or ("torch" in sys.modules and isinstance(values, sys.modules["torch"].Tensor)):
        array = as_numpy(values, field=field)
        if array.dtype == np.dtype(object):
            flat = _sequence_to_array(array.reshape(-1).tolist(), field)
            return flat.reshape(array.shape), True
        if array.dtype.kind != "f" or array.dtype.itemsize not in _FLOAT_SIZES:
            raise EncodeError.make(f"{field}.dtype", "float16, float32 or float64", str(array.dtype), raw=True)
        return array, False
    if isinstance(values, Sequence) and not isinstance(values, (str, bytes, bytearray)):
        return _sequence_to_array(values, field), True
    raise EncodeError.make(
        field, "a sequence of float | None, a float NumPy array or a tensor", type(values).__name__, raw=True
    )


def check_request_id(request_id: object) -> str | None:
    """Return ``request_id`` if it is ``None`` or a string.

    Raises:
        R3WireError: it is anything else.
    """
    if request_id is not None and not isinstance(request_id, str):
        raise R3WireError.make("request_id", "a string or None", request_id)
    return request_id


def warn_clamped(num_clamped: int, total: int, floor: float, request_id: str | None) -> None:
    """Log the one warning a clamp produces: the request, the count and the total."""
    where = f"request {describe(request_id)}" if request_id is not None else "a request without an id"
    logger.warning(
        "clamped %d/%d sampled logprobs (non-finite or missing) to %r for %s",
        num_clamped,
        total,
        floor,
        where,
        extra={"r3wire_request_id": request_id, "r3wire_num_clamped": num_clamped, "r3wire_total": total},
    )


def clamp_logprobs(values: Any, *, floor: float = DEFAULT_FLOOR, request_id: str | None = None) -> ClampResult:
    """Replace every non-finite or missing logprob with ``floor``; keep every finite value bit for bit.

    Args:
        values: a sequence of ``float | None`` (ints are accepted when exactly representable), or a float16,
            float32 or float64 NumPy array or torch tensor of any shape. Never modified.
        floor: the replacement, finite and exactly representable in the output dtype (the default -9999.0 is
            not exact in float16, which needs e.g. ``floor=-10000.0``). Checked on every call, even when
            nothing needs clamping, so a bad floor fails at the first call rather than on a rare bad token.
        request_id: the request these logprobs belong to. When given and something was clamped, one warning
            naming it, the count and the total goes to the ``r3wire`` logger. Without it nothing is logged:
            the count is the return value, and the caller decides what to do with it.

    Returns:
        ``ClampResult(values, num_clamped)``: a new, writable, C-contiguous array of the input's dtype
        (float64 for a sequence), and the number of positions replaced (-inf, +inf, NaN of any sign or payload,
        and None).

    Raises:
        EncodeError: ``values`` is not a float array or a sequence of floats and None (bools and strings are
            refused, not converted).
        R3WireError: ``floor`` is not finite or not exactly representable in the output dtype, or
            ``request_id`` is not a string.
    """
    request_id = check_request_id(request_id)
    array, fresh = as_float_array(values)
    floor = check_floor(floor, array.dtype)
    finite = np.isfinite(array)
    num_clamped = array.size - int(np.count_nonzero(finite))
    # The result never aliases the caller's buffer (a tensor's storage, a read-only array): copy unless the
    # array was just built from a sequence.
    out: np.ndarray[Any, Any] = array if fresh else np.array(array, order="C", copy=True)
    if num_clamped:
        np.copyto(out, np.asarray(floor, dtype=out.dtype), where=~finite)
        if request_id is not None:
            warn_clamped(num_clamped, array.size, floor, request_id)
    return ClampResult(out, num_clamped)
