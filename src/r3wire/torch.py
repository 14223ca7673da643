"""torch adapter (extra ``torch``): tensors in, tensors out. torch is imported only when a function runs.

Encoding needs nothing from here: :func:`r3wire.encode_routes` and :func:`r3wire.encode_array` accept a tensor
directly and hand it to :func:`tensor_to_numpy`. Decoding to a tensor is :func:`decode_routes_tensor` (or
:func:`routes_to_tensor` / :func:`to_tensor` on an array already decoded), zero-copy on the CPU.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from r3wire.arrays import decode_array
from r3wire.errors import EncodeError, R3WireError
from r3wire.routes import decode_routes
from r3wire.schema import ROUTE_DTYPES

__all__ = [
    "TORCH_DTYPES",
    "decode_array_tensor",
    "decode_routes_tensor",
    "routes_to_tensor",
    "tensor_to_numpy",
    "to_tensor",
]

# The NumPy dtypes torch supports in full, by name (the same name in both libraries). uint16/32/64 are left
# out on purpose: torch (>= 2.3) has them only as "shell" dtypes without arithmetic or indexing (``t + 1`` and
# ``x[t]`` raise), torch < 2.3 lacks them, and widening them silently would change the dtype the caller sees.
TORCH_DTYPES: tuple[str, ...] = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")

_ROUTES_NDIM = 3


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415  # optional dependency, imported on first use only
    except ImportError as exc:
        raise ImportError("r3wire.torch needs torch: pip install 'r3wire[torch]'") from exc
    return torch


def tensor_to_numpy(tensor: Any, *, field: str = "tensor") -> np.ndarray[Any, Any]:
    """A host NumPy view of ``tensor``: detached, moved to the CPU; no copy for a contiguous CPU tensor.

    The order is detach → cpu → numpy: detaching first keeps the device copy out of the autograd graph, and a
    tensor that requires grad cannot be viewed by NumPy at all. A non-contiguous CPU tensor becomes a strided
    view (still no copy); the encoders make the one C-order copy they need.

    Raises:
        EncodeError: not a dense tensor with data, or its dtype has no NumPy equivalent (e.g. bfloat16).
    """
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise EncodeError.make(field, "a torch.Tensor", type(tensor).__name__, raw=True)
    if tensor.layout != torch.strided or tensor.is_nested:  # a nested tensor reports the strided layout
        layout = "a nested tensor" if tensor.is_nested else str(tensor.layout)
        raise EncodeError.make(f"{field}.layout", "torch.strided (a dense tensor)", layout, raw=True)
    if tensor.device.type == "meta":
        raise EncodeError.make(f"{field}.device", "a device holding data (not 'meta')", "meta", raw=True)
    host = tensor.detach()
    if host.device.type != "cpu":
        host = host.cpu()
    host = host.resolve_conj().resolve_neg()
    try:
        array: np.ndarray[Any, Any] = host.numpy()
    except (TypeError, RuntimeError) as exc:
        raise EncodeError.make(f"{field}.dtype", "a dtype NumPy can hold", str(tensor.dtype), raw=True) from exc
    return array


def to_tensor(array: np.ndarray[Any, Any], *, device: Any = None, pin_memory: bool = False) -> Any:
    """A torch tensor holding exactly ``array``'s values, sharing its memory when it can.

    On the CPU this is ``torch.from_numpy``: no copy for a writable array in native byte order with
    non-negative strides, which is what every r3wire decoder returns. Otherwise one copy is made first, because
    ``torch.from_numpy`` cannot express the layout (negative strides, foreign byte order) or would hand out a
    writable tensor over read-only memory (torch warns that writing to it is undefined behaviour).

    Args:
        array: a NumPy array of bool, uint8, int8, int16, int32, int64, float16, float32 or float64.
        device: move the tensor there (``"cuda:0"``, a ``torch.device``); stays on the CPU when omitted.
        pin_memory: copy into page-locked host memory first, so a move to an accelerator can overlap compute
            (the move is then ``non_blocking``). Needs an accelerator; torch raises ``RuntimeError`` without one.

    Raises:
        R3WireError: not a NumPy array, or a dtype torch cannot hold in full (uint16/32/64, strings, ...).
    """
    torch = _torch()
    if not isinstance(array, np.ndarray):
        raise R3WireError.make("array", "a NumPy array", type(array).__name__, raw=True)
    if array.dtype.fields is not None or array.dtype.name not in TORCH_DTYPES:
        raise R3WireError.make(
            "array.dtype", f"a dtype torch supports in full, one of {list(TORCH_DTYPES)}", str(array.dtype), raw=True
        )
    if not _shareable(array):
        # A C-order copy in native byte order; np.ascontiguousarray would turn a 0-d array into a 1-d one.
        array = np.array(array, dtype=array.dtype.newbyteorder("="), order="C", copy=True)
    tensor = torch.from_numpy(array)
    if pin_memory:
        tensor = tensor.pin_memory()
    if device is not None:
        tensor = tensor.to(device, non_blocking=pin_memory)
    return tensor


def _shareable(array: np.ndarray[Any, Any]) -> bool:
    itemsize = array.dtype.itemsize
    return array.flags.writeable and array.dtype.isnative and all(s >= 0 and s % itemsize == 0 for s in array.strides)


def routes_to_tensor(routes: np.ndarray[Any, Any], *, device: Any = None, pin_memory: bool = False) -> Any:
    """A ``[rows, layers, top_k]`` routes array (uint8, int16 or int32) as a torch tensor of the same dtype.

    Zero-copy on the CPU for what :func:`r3wire.decode_routes` returns; see :func:`to_tensor` for ``device``
    and ``pin_memory``. Cast with ``.long()`` where torch needs int64 indices (``gather``, ``scatter``).

    Raises:
        R3WireError: not a 3-d NumPy array of a route dtype.
    """
    if not isinstance(routes, np.ndarray):
        raise R3WireError.make("routes", "a NumPy array", type(routes).__name__, raw=True)
    if routes.ndim != _ROUTES_NDIM:
        raise R3WireError.make("routes", "a 3-d array [rows, layers, top_k]", f"shape {list(routes.shape)}", raw=True)
    if routes.dtype.fields is not None or routes.dtype.name not in ROUTE_DTYPES:
        raise R3WireError.make("routes.dtype", f"one of {list(ROUTE_DTYPES)}", str(routes.dtype), raw=True)
    return to_tensor(routes, device=device, pin_memory=pin_memory)


def decode_routes_tensor(
    payload: Any,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
    device: Any = None,
    pin_memory: bool = False,
) -> Any:
    """:func:`r3wire.decode_routes`, returned as a torch tensor (uint8, int16 or int32; zero-copy on the CPU).

    Raises:
        DecodeError: the payload is malformed, inconsistent or breaks a limit (see :func:`r3wire.decode_routes`).
        UnsupportedVersionError: the payload's schema version is newer than this release reads.
    """
    routes = decode_routes(payload, num_experts=num_experts, max_elements=max_elements)
    return routes_to_tensor(routes, device=device, pin_memory=pin_memory)


def decode_array_tensor(
    payload: Any,
    *,
    dtypes: Collection[str] | None = None,
    ndim: int | None = None,
    max_elements: int | None = None,
    device: Any = None,
    pin_memory: bool = False,
) -> Any:
    """:func:`r3wire.decode_array`, returned as a torch tensor (zero-copy on the CPU).

    An array whose wire dtype torch cannot hold in full (uint16, uint32, uint64) is refused before its data is
    decoded; pass ``dtypes`` to narrow the set further.

    Raises:
        DecodeError: the payload is malformed, its dtype is not allowed, or it breaks a limit.
        UnsupportedVersionError: the payload's schema version is newer than this release reads.
        R3WireError: ``dtypes`` names a dtype torch cannot hold.
    """
    allowed = tuple(TORCH_DTYPES) if dtypes is None else ((dtypes,) if isinstance(dtypes, str) else tuple(dtypes))
    unsupported = [d for d in allowed if d not in TORCH_DTYPES]
    if unsupported:
        raise R3WireError.make("dtypes", f"dtypes torch supports in full, a subset of {list(TORCH_DTYPES)}", allowed)
    array = decode_array(payload, dtypes=allowed, ndim=ndim, max_elements=max_elements)
    return to_tensor(array, device=device, pin_memory=pin_memory)
