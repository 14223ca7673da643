"""Turning what callers hand an encoder (NumPy arrays, torch tensors, nested lists) into a NumPy array."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from r3wire.errors import EncodeError

__all__ = ["as_numpy"]


def as_numpy(obj: object, *, field: str) -> np.ndarray[Any, Any]:
    """Return ``obj`` as a NumPy array without copying when it already is one (or a contiguous CPU tensor).

    torch is never imported here: an object can only be a tensor if the caller already imported torch.

    Raises:
        EncodeError: ``obj`` cannot be viewed as an array.
    """
    if isinstance(obj, np.ndarray):
        if isinstance(obj, np.ma.MaskedArray):
            # Its hidden values would travel and its mask would be lost, without a word.
            raise EncodeError.make(
                field,
                "an array without a mask (send arr.filled(value), or the mask as its own array)",
                "a numpy.ma.MaskedArray",
                raw=True,
            )
        # A subclass may override min(), max() or comparisons: the checks here must see the bytes that are sent.
        return obj if type(obj) is np.ndarray else obj.view(np.ndarray)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        from r3wire.torch import tensor_to_numpy  # noqa: PLC0415  # the adapter is a leaf; load it only when used

        return tensor_to_numpy(obj, field=field)
    if isinstance(obj, (str, bytes, bytearray, memoryview)) or obj is None:
        raise EncodeError.make(
            field, "an array (NumPy array, torch tensor or nested lists)", type(obj).__name__, raw=True
        )
    if isinstance(obj, (list, tuple)) and any(isinstance(item, np.ma.MaskedArray) for item in obj):
        # np.asarray keeps a masked item's hidden values and drops its mask.
        raise EncodeError.make(
            field, "an array without a mask (send arr.filled(value), or the mask as its own array)",
            "a sequence holding a numpy.ma.MaskedArray", raw=True,
        )  # fmt: skip
    try:
        return np.asarray(obj)
    except (ValueError, TypeError, OverflowError) as exc:
        raise EncodeError.make(
            field,
            "an array (NumPy array, torch tensor or nested lists)",
            f"{type(obj).__name__} ({exc})",
            raw=True,
        ) from exc
