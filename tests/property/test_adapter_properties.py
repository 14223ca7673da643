"""Property tests for the vLLM adapter's promise on what it reads: any object handed to ``sampled_logprobs``,
``routed_experts`` or ``encode_completion`` (a half-built or duck-typed output, whatever its attributes hold) is
either read or refused with an R3WireError, never another exception; and what ``encode_completion`` writes,
``decode_completion`` reads back. No vllm needed: the adapter reads by attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_LEAVES, JSON_VALUES, decoded_or_none
from hypothesis import given
from hypothesis import strategies as st

from r3wire import R3WireError
from r3wire.logprobs import ClampResult
from r3wire.vllm import decode_completion, encode_completion, routed_experts, sampled_logprobs

pytestmark = pytest.mark.property

try:
    import torch
except ImportError:  # tensors are one kind of value among many; the rest is tested without torch
    torch = None

MA: Any = np.ma  # untyped in the stubs of some NumPy releases

# Every attribute the adapter reads, on RequestOutput, CompletionOutput, FlatLogprobs and Logprob alike.
NAMES = (
    "outputs",
    "request_id",
    "prompt_routed_experts",
    "token_ids",
    "logprobs",
    "routed_experts",
    "start_indices",
    "end_indices",
    "logprob",
)

DTYPES = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint64", "float32", "float64", "bool", "object")


@st.composite
def arrays(draw: st.DrawFn) -> Any:
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(DTYPES)))
    size = int(np.prod(shape))
    if dtype.kind == "O":
        objects = np.empty(size, dtype=object)
        objects[:] = draw(st.lists(JSON_LEAVES, min_size=size, max_size=size))
        return objects.reshape(shape)
    values: list[Any]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=size, max_size=size))
    elif dtype.kind == "f":
        values = draw(st.lists(st.floats(width=32), min_size=size, max_size=size))
    else:
        values = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    array = np.array(values, dtype=dtype).reshape(shape)
    kind = draw(st.sampled_from(["plain", "masked", "readonly", "reversed"]))
    if kind == "masked":
        return MA.array(array, mask=np.zeros(shape, dtype=bool))
    if kind == "readonly":
        array.flags.writeable = False
    if kind == "reversed" and array.ndim:
        return array[::-1]
    return array


@st.composite
def tensors(draw: st.DrawFn) -> Any:
    assert torch is not None
    array = draw(arrays())
    if isinstance(array, np.ma.MaskedArray) or array.dtype.kind == "O" or array.dtype.name in ("uint16", "uint64"):
        array = np.zeros(array.shape, dtype=np.int64)
    tensor = torch.from_numpy(np.array(array))
    kind = draw(st.sampled_from(["plain", "grad", "meta", "bfloat16", "transposed"]))
    if kind == "grad" and tensor.is_floating_point():
        return tensor.requires_grad_(True)
    if kind == "meta":
        return tensor.to("meta")
    if kind == "bfloat16":
        return tensor.to(torch.bfloat16)
    if kind == "transposed" and tensor.ndim >= 2:
        return tensor.transpose(0, 1)
    return tensor


def _generator(values: list[Any]) -> Iterator[Any]:
    yield from values


class _NoLength:
    """An object with neither ``__len__`` nor ``__iter__``, nor any attribute the adapter reads."""


LEAVES = st.one_of(
    JSON_VALUES,
    st.none(),
    arrays(),
    *([tensors()] if torch is not None else []),
    st.lists(JSON_LEAVES, max_size=4).map(_generator),
    st.builds(_NoLength),
    st.builds(object),
)


def _namespaces(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.dictionaries(st.sampled_from(NAMES), children, max_size=5).map(lambda fields: SimpleNamespace(**fields))


TREES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        _namespaces(children),
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.integers(0, 8), children, max_size=3),  # a position {token_id: Logprob}
    ),
    max_leaves=12,
)

# Near-valid outputs reach the deeper readers: token ids, positions, FlatLogprobs lists and routes, each slot
# drawn either well-formed or from TREES.
TOKEN_IDS = st.one_of(st.lists(st.integers(0, 8), max_size=5), TREES)
POSITION = st.one_of(
    st.none(),
    st.dictionaries(st.integers(0, 8), st.builds(SimpleNamespace, logprob=st.one_of(st.floats(), TREES)), max_size=3),
    TREES,
)
INDEX_LISTS = st.one_of(st.lists(st.integers(-1, 6), max_size=5), TREES)
FLAT = st.builds(
    SimpleNamespace,
    start_indices=INDEX_LISTS,
    end_indices=INDEX_LISTS,
    token_ids=TOKEN_IDS,
    logprobs=st.one_of(st.lists(st.one_of(st.none(), st.floats()), max_size=6), TREES),
)
ROUTES = st.one_of(
    st.none(),
    st.integers(0, 4).map(lambda rows: np.arange(rows * 2, dtype=np.uint8).reshape(rows, 1, 2)),
    arrays(),
    TREES,
)
COMPLETIONS = st.builds(
    SimpleNamespace,
    token_ids=TOKEN_IDS,
    logprobs=st.one_of(st.none(), st.lists(POSITION, max_size=5), FLAT, TREES),
    routed_experts=ROUTES,
)
REQUESTS = st.builds(
    SimpleNamespace,
    outputs=st.one_of(st.lists(st.one_of(COMPLETIONS, TREES), max_size=3), TREES),
    request_id=st.one_of(st.none(), st.text(max_size=5), TREES),
    prompt_routed_experts=ROUTES,
)
OUTPUTS = st.one_of(COMPLETIONS, REQUESTS, TREES)
INDICES = st.one_of(st.none(), st.integers(-3, 3))


def _read_or_refused(read: Callable[[], Any]) -> Any:
    """``read()``'s result, or None when it raised an R3WireError with a message; anything else fails."""
    return decoded_or_none(read, R3WireError)


@given(OUTPUTS, INDICES)
def test_sampled_logprobs_reads_or_refuses(output: Any, index: int | None) -> None:
    result = _read_or_refused(lambda: sampled_logprobs(output, index=index))
    if result is not None:
        assert isinstance(result, ClampResult)
        assert result.values.ndim == 1
        assert np.isfinite(result.values).all()


@given(OUTPUTS, INDICES)
def test_routed_experts_reads_or_refuses(output: Any, index: int | None) -> None:
    result = _read_or_refused(lambda: routed_experts(output, index=index))
    if result is not None:
        assert isinstance(result, np.ndarray)
        assert result.ndim == 3
        assert result.dtype.kind in "iu"


@given(OUTPUTS, INDICES, st.sampled_from(["content", "envelope"]))
def test_encode_completion_reads_or_refuses_and_its_fragment_decodes(
    output: Any, index: int | None, logprobs_format: Any
) -> None:
    fragment = _read_or_refused(lambda: encode_completion(output, index=index, logprobs_format=logprobs_format))
    if fragment is None:
        return
    back = decode_completion(orjson.dumps(fragment))
    assert back.token_ids.tolist() == fragment["token_ids"]
    assert (back.logprobs is None) == (fragment["logprobs"] is None)
    assert back.logprobs is None or len(back.logprobs) == len(back.token_ids)
    assert (back.routed_experts is None) == (fragment["routed_experts"] is None)


SCALAR_TYPES: tuple[Any, ...] = (int, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)


@st.composite
def id_lists(draw: st.DrawFn) -> list[Any]:
    """Token ids as Python ints and NumPy integer scalars of every width, near and beyond int64's edges."""
    values: list[Any] = []
    for value in draw(st.lists(st.integers(-(2**64), 2**64) | st.sampled_from([2**63 - 1, 2**63, -1]), max_size=6)):
        kind = draw(st.sampled_from(SCALAR_TYPES))
        fits = kind is int or np.iinfo(kind).min <= value <= np.iinfo(kind).max
        values.append(kind(value) if fits else value)
    return values


@given(id_lists())
def test_token_ids_are_kept_exactly_or_the_first_bad_one_is_named(ids: list[Any]) -> None:
    fragment = _read_or_refused(lambda: encode_completion(SimpleNamespace(token_ids=ids, logprobs=None)))
    numbers = [int(v) for v in ids]
    bad = [i for i, v in enumerate(numbers) if not 0 <= v < 2**63]
    if fragment is not None:
        assert not bad
        assert fragment["token_ids"] == numbers
        return
    assert bad
    with pytest.raises(R3WireError, match=rf"^output\.token_ids\[{bad[0]}\] must be .*, got {numbers[bad[0]]}$"):
        encode_completion(SimpleNamespace(token_ids=ids, logprobs=None))
