"""Properties of values whose class is unhashable (its metaclass defines ``__eq__`` without ``__hash__``, so
``hash(type(x))`` raises ``TypeError``): fast paths that sort values out by ``set(map(type, ...))``, type tables
and ``isinstance`` against an ABC (whose cache hashes the class) must not leak that ``TypeError``.

- such a value planted anywhere in a document, a batch or a list of ids or logprobs is refused with r3wire's own
  error (the same as any other unsupported value) by every public entry point that reaches those paths, or
  accepted where such a value is allowed (a member loads leaves alone); never a ``TypeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import r3wire
from r3wire import R3WireError
from r3wire.formats import read, read_response

pytestmark = pytest.mark.property


class _Unhashable(type):
    def __eq__(cls, other: object) -> bool:
        return cls is other

    __hash__ = None  # type: ignore[assignment]  # what defining __eq__ alone does, said here explicitly


class Odd(metaclass=_Unhashable):
    """A plain object of an unhashable class."""


class OddList(list, metaclass=_Unhashable):  # type: ignore[type-arg]
    """A list of an unhashable class."""


def test_the_classes_are_unhashable() -> None:
    for cls in (Odd, OddList):
        with pytest.raises(TypeError):
            hash(cls)


# Drawn by name: Hypothesis cannot print such a value (its printer looks the class up in a dict). Not drawn: an
# int or float of such a class, which NumPy 2.4 fails to convert, leaving its TypeError set so that a later call
# raises SystemError (r3wire refuses one where it can: the logprob kind, np.asarray's SystemError).
_KINDS = st.sampled_from(["object", "list"])


def _odd(kind: str) -> object:
    return Odd() if kind == "object" else OddList([1])


def _refused_or_read(name: str, call: Callable[[], object]) -> None:
    try:
        call()
    except R3WireError:
        pass
    except Exception as exc:  # the property: never anything but r3wire's own error
        raise AssertionError(f"{name} raised {exc!r}") from exc


@given(
    size=st.sampled_from([1, 5, 300]),  # 300: past the lengths where lists take a fast path
    index=st.integers(0, 400),
    kind=_KINDS,
    floats=st.booleans(),
)
def test_a_value_of_an_unhashable_class_is_refused_by_r3wire_or_read(
    size: int, index: int, kind: str, floats: bool
) -> None:
    odd = _odd(kind)
    base: list[Any] = [0.5] * size if floats else [1] * size
    values = list(base)
    if index < size:
        values[index] = odd
    else:
        values.append(odd)
    ints = [1] * len(values)
    ids = [[[v]] for v in values]
    body = {"choices": [{"routed_experts": [[[1]]] * len(ints), "token_ids": values, "logprobs": values}]}
    calls: dict[str, Callable[[], object]] = {
        "r3wire.encode_routes": lambda: r3wire.encode_routes(ids, num_experts=8),
        "r3wire.encode_array": lambda: r3wire.encode_array(values),
        "r3wire.encode_logprobs": lambda: r3wire.encode_logprobs(values),
        "r3wire.clamp_logprobs": lambda: r3wire.clamp_logprobs(values),
        "r3wire.build_logprobs_content": lambda: r3wire.build_logprobs_content(values),
        "r3wire.validate_routes": lambda: r3wire.validate_routes([ids], num_experts=8),
        "r3wire.pad_sequences": lambda: r3wire.pad_sequences([values, ints]),
        "r3wire.pad_sequences#2": lambda: r3wire.pad_sequences([np.array(ints), values]),
        "r3wire.pad_routes": lambda: r3wire.pad_routes([np.zeros((1, 1, 1), np.uint8), odd]),
        "r3wire.pack_routes": lambda: r3wire.pack_routes([np.zeros((1, 1, 1), np.uint8), odd]),
        "r3wire.dumps": lambda: r3wire.dumps(
            {"a": values, "logprobs": values, "routed_experts": ids}, clamp_logprobs=True
        ),
        "r3wire.iter_dumps": lambda: b"".join(r3wire.iter_dumps({"a": [values, (values,)]})),
        "r3wire.loads": lambda: r3wire.loads({"a": [values, (values,)], "b": odd}),
        "r3wire.loads#2": lambda: r3wire.loads([odd, (odd,)]),
        "read_response": lambda: read_response(body),
        "read_response#2": lambda: read_response(
            {"meta_info": {"routed_experts": values}, "output_ids": values}, num_layers=1, top_k=1
        ),
        "read_response#3": lambda: read_response([body, odd]),
        "read": lambda: read(ids, "json-lists"),
        "read#2": lambda: read({"data": values, "shape": [1, 1, 1], "dtype": "uint8"}, "skyrl"),
    }
    for name, call in calls.items():
        _refused_or_read(name, call)
