"""Hostile argument values for test_public_api_sweep: name -> factory making a fresh value per call.

One value per distinct code path rather than every variant: None and bools, ints at the int32/int64/uint64 edges and
past any fixed width, non-finite floats, text and every kind of bytes-like object (including multi-dimensional and
non-contiguous buffers), nested/ragged/deep lists, NumPy arrays of every awkward layout and dtype, logically huge
broadcast views, and objects whose protocol methods (``__len__``, ``__iter__``, ``__index__``, ``__array__``,
``__buffer__``, mapping methods, ``__repr__``) raise TypeError or lie. TypeError is what the library must never let
through; :class:`BoomError`, the caller's own exception class, is what a caller's method may raise and see propagate.
"""

from __future__ import annotations

import array
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import numpy as np

__all__ = ["BIG", "POOL", "BoomError"]


class BoomError(Exception):
    """The caller's own exception class: raised from the caller's own methods, it may propagate unchanged."""


class TERaisingLen(list[Any]):
    def __len__(self) -> int:
        raise TypeError("__len__")


class TERaisingIter(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise TypeError("__iter__")


class TERaisingSequence(Sequence[Any]):
    """A caller's own Sequence (not a list): its ``__iter__`` is the only way to read its items in order."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        if index != 0:
            raise IndexError(index)
        return [[0, 1]]

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("__iter__")


class BoomIter(list[Any]):
    def __iter__(self) -> Iterator[Any]:
        raise BoomError("__iter__")


class TERaisingDict(dict[str, Any]):
    """A dict subclass whose every read method raises: only its storage can be read."""

    def __iter__(self) -> Iterator[str]:
        raise TypeError("__iter__")

    def __len__(self) -> int:
        raise TypeError("__len__")

    def __getitem__(self, key: str) -> Any:
        raise TypeError("__getitem__")

    def get(self, key: str, default: Any = None) -> Any:
        raise TypeError("get")

    def keys(self) -> NoReturn:
        raise TypeError("keys")

    def items(self) -> NoReturn:
        raise TypeError("items")

    def values(self) -> NoReturn:
        raise TypeError("values")


class LyingLen(list[Any]):
    def __len__(self) -> int:
        return 10**6


class NegLen:
    def __len__(self) -> int:
        return -1  # noqa: PLE0303 - the point: len() raises ValueError


class TEBadIndex:
    def __index__(self) -> int:
        raise TypeError("__index__")

    def __int__(self) -> int:
        raise TypeError("__int__")

    def __float__(self) -> float:
        raise TypeError("__float__")


class HugeIndex:
    def __index__(self) -> int:
        return 2**70

    def __int__(self) -> int:
        return 2**70


class LyingIndex:
    """``__index__`` gives 2, ``__int__`` 3 and ``__float__`` 4.5."""

    def __index__(self) -> int:
        return 2

    def __int__(self) -> int:
        return 3

    def __float__(self) -> float:
        return 4.5


class TEBadArray:
    def __array__(self, dtype: object = None, copy: object = None) -> NoReturn:
        raise TypeError("__array__")


class WrongArray:
    def __array__(self, dtype: object = None, copy: object = None) -> Any:
        return "not an array"


class TEBadBuffer:
    """A buffer exporter (PEP 688, Python 3.12+) that fails to export."""

    def __buffer__(self, flags: int) -> NoReturn:
        raise TypeError("__buffer__")


class UnhashableInt(int):
    __hash__ = None  # type: ignore[assignment]


class TEBadRepr:
    def __repr__(self) -> str:
        raise TypeError("__repr__")

    __str__ = __repr__


class HugeRepr:
    def __repr__(self) -> str:
        return "R" * 10**6


class FakeTensor:
    """Looks like a torch tensor (duck typing) and is not one."""

    __module__ = "torch"
    shape = (3, 2, 2)
    dtype = "torch.int32"
    device = "cpu"
    is_cuda = False

    def numpy(self) -> NoReturn:
        raise TypeError("numpy")

    def detach(self) -> FakeTensor:
        return self

    def cpu(self) -> FakeTensor:
        return self

    def __len__(self) -> int:
        return 3

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("__iter__")


def _raising_callable(*args: object, **kwargs: object) -> NoReturn:
    raise BoomError("called")


def _any_callable(*args: object, **kwargs: object) -> None:
    return None


def _deep_list(depth: int) -> list[Any]:
    x: list[Any] = [0]
    for _ in range(depth):
        x = [x]
    return x


def _generator() -> Iterator[Any]:
    yield from [[[0, 1]]]


def _routes3() -> np.ndarray[Any, Any]:
    return np.arange(12, dtype=np.uint8).reshape(3, 2, 2) % 4


def _readonly3() -> np.ndarray[Any, Any]:
    a = _routes3()
    a.flags.writeable = False
    return a


def _matrix() -> Any:
    with warnings.catch_warnings():  # np.matrix is pending deprecation
        warnings.simplefilter("ignore")
        return np.matrix([[0, 1]])


def _masked() -> Any:
    ma: Any = np.ma  # untyped in the stubs of some NumPy releases
    return ma.masked_array(np.zeros((1, 1, 2), np.uint8), mask=[[[True, False]]])


POOL: dict[str, Callable[[], Any]] = {
    # scalars
    "None": lambda: None,
    "True": lambda: True,
    "np.True_": lambda: np.True_,
    "-1": lambda: -1,
    "0": lambda: 0,
    "2**31": lambda: 2**31,
    "2**63": lambda: 2**63,
    "2**64": lambda: 2**64,
    "10**5000": lambda: 10**5000,
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "-inf": lambda: float("-inf"),
    "1.5": lambda: 1.5,
    "complex": lambda: 1 + 2j,
    "np.int64(4)": lambda: np.int64(4),
    "np.uint64(2**64-1)": lambda: np.uint64(2**64 - 1),
    "np.timedelta64": lambda: np.timedelta64(4, "s"),  # an np.signedinteger with a unit
    "UnhashableInt(4)": lambda: UnhashableInt(4),
    # text
    "str": lambda: "routed_experts",
    "str-empty": lambda: "",
    "str-nul": lambda: "a\x00b",
    "str-surrogate": lambda: "\ud800",
    "np.str_": lambda: np.str_("r3wire"),
    "long-str": lambda: "x" * 1_000_000,  # 5 MB made orjson's own error path peak at 57 MiB
    # bytes-like
    "bytes": lambda: b"\x00\x01\x02",
    "bytes-json": lambda: b'{"a":1}',
    "bytes-bad-utf8": lambda: b'{"a":"\xff"}',
    "bytearray": lambda: bytearray(b"\x00\x01"),
    "mv-1d": lambda: memoryview(b"\x00\x01\x02\x03"),
    "mv-2d": lambda: np.zeros((2, 3), np.uint8).data,
    "mv-noncontig": lambda: np.arange(24, dtype=np.uint8).data[::2],
    "array.array-i": lambda: array.array("i", [1, 2, 3]),
    # containers
    "[]": list,
    "()": lambda: (),
    "{}": dict,
    "set": lambda: {1, 2},
    "generator": _generator,
    "range-huge": lambda: range(10**12),
    "ragged": lambda: [[[0, 1]], [[0]]],
    "ragged-mixed": lambda: [[0, 1], [0, [1]]],
    "deep5000": lambda: _deep_list(5000),
    "list[nan]": lambda: [float("nan"), 1.0],
    "list[None]": lambda: [1, None],
    "list[str]": lambda: ["1", "2"],
    "list[2**64]": lambda: [1, 2**64],
    # arrays
    "arr-0d": lambda: np.array(3, dtype=np.int32),
    "arr-empty": lambda: np.zeros(0, np.uint8),
    "arr-0x2x2": lambda: np.zeros((0, 2, 2), np.uint8),
    "arr-1d-i64": lambda: np.arange(5, dtype=np.int64),
    "arr-2d": lambda: np.zeros((2, 2), np.int32),
    "arr-32d": lambda: np.zeros((1,) * 32, np.uint8),  # NumPy 1.x's most dimensions
    "arr-object": lambda: np.array([[[0, 1]]], dtype=object),
    "arr-complex": lambda: np.zeros((1, 1, 2), np.complex128),
    "arr-structured": lambda: np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
    "arr-f64-nan": lambda: np.full((1, 1, 2), np.nan),
    "arr-u64max": lambda: np.full((1, 1, 2), 2**64 - 1, np.uint64),
    "arr->i4": lambda: np.arange(4, dtype=">i4").reshape(1, 2, 2),
    "arr-fortran": lambda: np.asfortranarray(_routes3()),
    "arr-readonly": _readonly3,
    "masked": _masked,
    "matrix": _matrix,
    # logically huge (broadcast views of 2**31 elements): only for callables that bound their input (BIG)
    "bcast-2**31": lambda: np.broadcast_to(np.int32(1), (2**31,)),
    "bcast3-2**31": lambda: np.broadcast_to(np.uint8(1), (2**28, 4, 2)),
    # objects whose protocol methods raise or lie
    "TERaisingLen": lambda: TERaisingLen([[[0, 1]]]),
    "TERaisingIter": lambda: TERaisingIter([[[0, 1]]]),
    "TERaisingSequence": TERaisingSequence,
    "TERaisingDict": lambda: TERaisingDict(a=1),
    "LyingLen": lambda: LyingLen([[[0, 1]]]),
    "NegLen": NegLen,
    "TEBadIndex": TEBadIndex,
    "HugeIndex": HugeIndex,
    "LyingIndex": LyingIndex,
    "TEBadArray": TEBadArray,
    "WrongArray": WrongArray,
    "TEBadBuffer": TEBadBuffer,
    "TEBadRepr": TEBadRepr,
    "HugeRepr": HugeRepr,
    "FakeTensor": FakeTensor,
    "BoomIter": lambda: BoomIter([[[0, 1]]]),
    "raising-callable": lambda: _raising_callable,
    "callable": lambda: _any_callable,
    "type": lambda: int,
    "object": object,
    "slice": lambda: slice(None, None, -1),
}

BIG = frozenset({"bcast-2**31", "bcast3-2**31"})
