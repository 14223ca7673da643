"""torch adapter (extra ``torch``): tensors in, tensors out. torch is imported only when a function runs.

Encoding needs nothing from here: :func:`r3wire.encode_routes` and :func:`r3wire.encode_array` accept a tensor
directly and hand it to :func:`tensor_to_numpy`. Decoding to a tensor is :func:`decode_routes_tensor` (or
:func:`routes_to_tensor` / :func:`to_tensor` on an array already decoded), zero-copy on the CPU.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import numpy as np

from r3wire._arraylike import refuse_masked
from r3wire._walk import copy_list
from r3wire.arrays import decode_array
from r3wire.errors import EncodeError, R3WireError, describe
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

# The torch dtypes whose tensors .numpy() converts (torch >= 2.3 for the unsigned wide ones): when .numpy()
# fails on one of these, the tensor, not its dtype, is what NumPy cannot read.
_NUMPY_DTYPES = frozenset((*TORCH_DTYPES, "uint16", "uint32", "uint64", "complex64", "complex128"))

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
        EncodeError: not a dense tensor with data, its dtype has no NumPy equivalent (e.g. bfloat16), or it is a
            tensor ``.numpy()`` cannot read whatever its dtype (a subclass such as ``MaskedTensor`` or
            ``FakeTensor``, a tensor inside ``torch.func.vmap``): the message then names its type and torch's reason.
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
        if str(tensor.dtype).removeprefix("torch.") not in _NUMPY_DTYPES:
            raise EncodeError.make(f"{field}.dtype", "a dtype NumPy can hold", str(tensor.dtype), raw=True) from exc
        # The dtype is fine: the tensor itself is one .numpy() cannot read (a MaskedTensor, a FakeTensor, a
        # tensor inside torch.func.vmap). Its own words say which.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EncodeError.make(
            field,
            "a tensor .numpy() can read (a plain dense torch.Tensor with storage; not a tensor subclass such as "
            "MaskedTensor or FakeTensor, nor a tensor inside torch.func.vmap)",
            f"a {type(tensor).__name__} ({reason})",
            raw=True,
        ) from exc
    return array


def to_tensor(array: np.ndarray[Any, Any], *, device: Any = None, pin_memory: bool = False) -> Any:
    """A torch tensor holding exactly ``array``'s values, sharing its memory when it can.

    On the CPU this is ``torch.from_numpy``: no copy for a writable array in native byte order with
    non-negative strides, which is what every r3wire decoder returns. Otherwise one copy is made first, because
    ``torch.from_numpy`` cannot express the layout (negative strides, foreign byte order) or would hand out a
    writable tensor over read-only memory (torch warns that writing to it is undefined behaviour).

    Args:
        array: a NumPy array of bool, uint8, int8, int16, int32, int64, float16, float32 or float64 (not a
            ``numpy.ma.MaskedArray``: its hidden values would become real ones and its mask would be lost).
        device: move the tensor there (``"cuda:0"``, a ``torch.device``); stays on the CPU when omitted.
        pin_memory: copy into page-locked host memory first, so a move to an accelerator can overlap compute
            (the move is then ``non_blocking``). Needs an accelerator; torch raises ``RuntimeError`` without one.

    Raises:
        R3WireError: not a NumPy array, a masked array, a dtype torch cannot hold in full (uint16/32/64,
            strings, ...), a ``device`` that is no device name (or one this torch reports it has not: no CUDA
            build or GPU for ``"cuda"``, an index past its device count), or a ``pin_memory`` that is not a bool.
        RuntimeError: torch's own exception (usually this one), passed through, when the move itself fails: a
            backend torch cannot query up front (no ``torch.<type>.is_available()``), out of memory, a lost
            device, or ``pin_memory`` without an accelerator. That is the machine's state, not the input, and
            relabelling it would hide a real device failure.
    """
    torch = _torch()
    target = _check_device(torch, device, pin_memory)
    return _to_tensor(torch, array, "array", target, pin_memory)


# vLLM hands routes over as uint16 above 256 experts; the route dtype r3wire picks from num_experts is int16.
_UINT16_HINT: Final = (
    " (uint16 ids, as vLLM sends them above 256 experts: pass num_experts= to RouteTrace / pad_routes / "
    "decode_routes, which then hold them as r3wire.route_dtype(num_experts), int16 below 32768 experts)"
)


def _to_tensor(torch: Any, array: np.ndarray[Any, Any], field: str, device: Any, pin_memory: bool) -> Any:
    if not isinstance(array, np.ndarray):
        raise R3WireError.make(field, "a NumPy array", type(array).__name__, raw=True)
    refuse_masked(array, field, R3WireError)
    if array.dtype.fields is not None or array.dtype.name not in TORCH_DTYPES:
        hint = _UINT16_HINT if array.dtype.name == "uint16" else ""
        raise R3WireError.make(
            f"{field}.dtype",
            f"a dtype torch supports in full, one of {list(TORCH_DTYPES)}{hint}",
            str(array.dtype),
            raw=True,
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


def _check_device(torch: Any, device: Any, pin_memory: object) -> Any:
    """``device`` as a ``torch.device`` (None stays None), checked once per call, before any payload is decoded.

    torch reports a device it cannot use only when a tensor moves there, and then per backend in different
    exceptions (``AssertionError`` for CUDA in a CPU build, ``RuntimeError`` for an index without an
    accelerator); here the name is parsed, and ``torch.<type>.is_available()`` / ``device_count()`` asked
    where torch has them (cuda, xpu, mps, mtia...).
    """
    if not isinstance(pin_memory, (bool, np.bool_)):
        raise R3WireError.make("pin_memory", "a bool", pin_memory)
    if device is None:
        return None
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise R3WireError.make(
            "device", "a torch device ('cpu', 'cuda:0', a torch.device)", f"{describe(device)} ({reason})", raw=True
        ) from None
    backend = getattr(torch, target.type, None) if target.type != "cpu" else None
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        raise R3WireError.make(
            "device", f"a device this torch can use (torch.{target.type}.is_available() is False)", str(target)
        )
    device_count = getattr(backend, "device_count", None)
    if target.index is not None and callable(device_count) and target.index >= device_count():
        raise R3WireError.make(
            "device", f"a device this torch can use ({device_count()} {target.type} devices)", str(target)
        )
    return target


def _shareable(array: np.ndarray[Any, Any]) -> bool:
    itemsize = array.dtype.itemsize
    return array.flags.writeable and array.dtype.isnative and all(s >= 0 and s % itemsize == 0 for s in array.strides)


def routes_to_tensor(routes: np.ndarray[Any, Any], *, device: Any = None, pin_memory: bool = False) -> Any:
    """A ``[rows, layers, top_k]`` routes array (uint8, int16 or int32) as a torch tensor of the same dtype.

    Zero-copy on the CPU for what :func:`r3wire.decode_routes` returns; see :func:`to_tensor` for ``device``
    and ``pin_memory``. Cast with ``.long()`` where torch needs int64 indices (``gather``, ``scatter``).

    Raises:
        R3WireError: not a 3-d NumPy array of a route dtype, a masked array, or a bad ``device`` /
            ``pin_memory`` (see :func:`to_tensor`, which also says what torch raises itself).
    """
    torch = _torch()
    target = _check_device(torch, device, pin_memory)
    if not isinstance(routes, np.ndarray):
        raise R3WireError.make("routes", "a NumPy array", type(routes).__name__, raw=True)
    refuse_masked(routes, "routes", R3WireError)
    if routes.ndim != _ROUTES_NDIM:
        raise R3WireError.make(
            "routes",
            "a 3-d array [rows, layers, top_k] (for a padded batch [batch, max_len, layers, top_k] or a mask, use "
            "r3wire.torch.to_tensor)",
            f"shape {list(routes.shape)}",
            raw=True,
        )
    if routes.dtype.fields is not None or routes.dtype.name not in ROUTE_DTYPES:
        hint = _UINT16_HINT if routes.dtype.name == "uint16" else ""
        raise R3WireError.make("routes.dtype", f"one of {list(ROUTE_DTYPES)}{hint}", str(routes.dtype), raw=True)
    return _to_tensor(torch, routes, "routes", target, pin_memory)


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
        UnsupportedVersionError: the payload's schema version is not one this release reads.
        R3WireError: ``num_experts``, ``max_elements``, ``device`` or ``pin_memory`` is invalid (the device is
            checked before the payload is decoded; see :func:`to_tensor`, which also says what torch raises).
    """
    torch = _torch()
    target = _check_device(torch, device, pin_memory)
    routes = decode_routes(payload, num_experts=num_experts, max_elements=max_elements)
    return _to_tensor(torch, routes, "routes", target, pin_memory)


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
        UnsupportedVersionError: the payload's schema version is not one this release reads.
        R3WireError: ``dtypes`` is not a dtype name or a collection of them, or names a dtype torch cannot hold;
            or ``ndim``, ``max_elements``, ``device`` or ``pin_memory`` is invalid (see :func:`to_tensor`).
    """
    expected = f"dtypes torch supports in full, a subset of {list(TORCH_DTYPES)}"
    if dtypes is None:
        allowed: tuple[Any, ...] = TORCH_DTYPES
    elif isinstance(dtypes, str):
        allowed = (dtypes,)
    else:
        names = f"a dtype name or a collection of names ({expected})"
        if isinstance(dtypes, (bytes, bytearray, memoryview)) or not hasattr(type(dtypes), "__iter__"):
            # bytes iterate as small ints; an int or a float is no collection at all.
            raise R3WireError.make("dtypes", names, dtypes)
        # Never sized by a caller's __len__, and an endless iterable read no further than one name past the set:
        # more names than that is no subset of it. What the caller's own iteration raises is refused as dtypes.
        allowed = tuple(copy_list(dtypes, most=len(TORCH_DTYPES) + 1, field="dtypes", expected=names))
        if len(allowed) > len(TORCH_DTYPES) and not isinstance(dtypes, (list, tuple)):
            # Read no further: what it holds past here would be dropped, never checked.
            n = len(TORCH_DTYPES)
            raise R3WireError.make("dtypes", f"at most {n} dtype names ({expected})", f"more than {n}", raw=True)
    unsupported = [d for d in allowed if not isinstance(d, str) or d not in TORCH_DTYPES]
    if unsupported:
        raise R3WireError.make("dtypes", expected, allowed)
    torch = _torch()
    target = _check_device(torch, device, pin_memory)
    array = decode_array(payload, dtypes=allowed, ndim=ndim, max_elements=max_elements)
    return _to_tensor(torch, array, "array", target, pin_memory)
