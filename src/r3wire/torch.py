"""torch adapter (extra ``torch``): tensors in, tensors out. torch is imported only when a function runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from r3wire.errors import EncodeError

__all__ = ["tensor_to_numpy"]


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415  # optional dependency, imported on first use only
    except ImportError as exc:
        raise ImportError("r3wire.torch needs torch: pip install 'r3wire[torch]'") from exc
    return torch


def tensor_to_numpy(tensor: Any, *, field: str = "tensor") -> np.ndarray[Any, Any]:
    """A host NumPy view of ``tensor``: detached, moved to the CPU; no copy for a contiguous CPU tensor.

    Raises:
        EncodeError: the tensor's dtype has no NumPy equivalent (e.g. bfloat16).
    """
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise EncodeError.make(field, "a torch.Tensor", type(tensor).__name__, raw=True)
    host = tensor.detach()
    if host.device.type != "cpu":
        host = host.cpu()
    host = host.resolve_conj().resolve_neg()
    try:
        array: np.ndarray[Any, Any] = host.numpy()
    except (TypeError, RuntimeError) as exc:
        raise EncodeError.make(f"{field}.dtype", "a dtype NumPy can hold", str(tensor.dtype), raw=True) from exc
    return array
