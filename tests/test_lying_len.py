"""A list, tuple or dict subclass whose ``__len__`` lies (or raises) is read as the items it holds, as orjson and
NumPy read it: never a bare MemoryError from ``list(value)`` preallocating 10**12 slots, never a ValueError or
OverflowError from ``len()`` (review 7, finding H)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import r3wire
from r3wire import R3WireError, formats
from r3wire._walk import copy_list, own_len

# What __len__ may claim: nothing, too little, too much, 10**12 (the MemoryError), the largest len() passes, and
# two that make len() itself raise (ValueError, OverflowError).
CLAIMS = [0, 1, 10**12, sys.maxsize, -1, 2**64]


def _lying(base: type[Any], claimed: int) -> type[Any]:
    def __len__(self: object) -> int:  # noqa: N807  # the dunder the class lies with
        return claimed

    return type(f"Lying{base.__name__.title()}", (base,), {"__len__": __len__})


def _list(items: list[Any], claimed: int) -> list[Any]:
    made: list[Any] = _lying(list, claimed)(items)
    return made


ENVELOPE = r3wire.encode_routes(np.array([[[1, 0]]], np.uint8), num_experts=8)


@pytest.mark.parametrize("claimed", CLAIMS)
def test_copy_list_and_own_len_read_what_is_held(claimed: int) -> None:
    for base, items in ((list, [1, 2, 3]), (tuple, (1, 2, 3))):
        value = _lying(base, claimed)(items)
        copied = copy_list(value)
        assert type(copied) is list
        assert copied == [1, 2, 3]
        assert own_len(value) == 3
    assert own_len(_lying(dict, claimed)({"a": 1})) == 1
    assert copy_list(iter(range(3)), most=None, field="x", expected="three") == [0, 1, 2]
    assert copy_list(iter(range(10)), most=4, field="x", expected="ten") == [0, 1, 2, 3]
    # An endless iterable read only as far as asked.
    assert copy_list(itertools.count(), most=3, field="x", expected="numbers") == [0, 1, 2]
    with pytest.raises(TypeError, match="most="):
        copy_list(iter(range(3)))  # type: ignore[call-overload]  # the bound is required for an iterator


@pytest.mark.parametrize("claimed", CLAIMS)
def test_loads_reads_a_lying_container_as_what_it_holds(claimed: int) -> None:
    assert r3wire.loads(_list([1, 2], claimed)) == [1, 2]
    got = r3wire.loads({"a": _list([ENVELOPE, {"b": _list([3], claimed)}], claimed)})
    assert np.array_equal(got["a"][0], [[[1, 0]]])
    assert got["a"][1] == {"b": [3]}
    assert type(got["a"]) is list
    tupled = r3wire.loads([_lying(tuple, claimed)((ENVELOPE, 4))])
    assert isinstance(tupled[0], tuple)
    assert np.array_equal(tupled[0][0], [[[1, 0]]])
    assert tupled[0][1] == 4
    assert r3wire.loads([_lying(dict, claimed)({"c": _list([5], claimed)})]) == [{"c": [5]}]
    # Shared, so the guard counts it again: by what it holds.
    shared = _list([1, 2], claimed)
    assert r3wire.loads([shared, shared]) == [[1, 2], [1, 2]]


@pytest.mark.parametrize("claimed", CLAIMS)
def test_dumps_writes_a_lying_list_as_what_it_holds(claimed: int) -> None:
    # With __len__ 0 the walk once skipped the array in it, which orjson then refused.
    text = r3wire.dumps({"a": _list([np.arange(3, dtype=np.uint8), 7], claimed)})
    back = r3wire.loads(text)
    assert np.array_equal(back["a"][0], np.arange(3))
    assert back["a"][1] == 7
    assert b"".join(r3wire.iter_dumps({"a": _list([1, 2], claimed)})) == b'{"a":[1,2]}'


@pytest.mark.parametrize("claimed", CLAIMS)
def test_batching_reads_lying_sequences_as_what_they_hold(claimed: int) -> None:
    sample = np.array([[[1, 0]], [[2, 3]]], np.int8)
    keep = np.array([True, False])
    padded, mask = r3wire.pad_routes([sample], side="right", replayed=_list([keep], claimed))
    want_padded, want_mask = r3wire.pad_routes([sample], side="right", replayed=[keep])
    assert np.array_equal(padded, want_padded)
    assert np.array_equal(mask, want_mask)
    packed = r3wire.pack_routes([sample], token_lengths=_list([3], claimed), replayed=_list([None], claimed))
    want = r3wire.pack_routes([sample], token_lengths=[3], replayed=[None])
    assert all(np.array_equal(a, b) for a, b in zip(packed, want, strict=True))
    # A count that is wrong is named, by what the sequence holds.
    with pytest.raises(R3WireError) as info:
        r3wire.pad_routes([sample], side="right", replayed=_list([None, None], claimed))
    assert info.value.field == "replayed"
    assert str(info.value).endswith("got 2")


@pytest.mark.parametrize("claimed", CLAIMS)
def test_formats_read_lying_lists_as_what_they_hold(claimed: int) -> None:
    assert formats.read(_list([[[1, 0]]], claimed)).routes.tolist() == [[[1, 0]]]
    assert formats.read(_list([[[1, 0]]], claimed), "json-lists").routes.tolist() == [[[1, 0]]]
    matrices = formats.read(_list(["AQ==", None], claimed), num_layers=1, top_k=1)
    assert matrices.routes.tolist() == [[[1]], [[0]]]
    assert matrices.mask is not None
    assert matrices.mask.tolist() == [True, False]
    body = {"choices": _list([{"routed_experts": ENVELOPE, "token_ids": _list([5, 6], claimed)}], claimed)}
    result = formats.read_response(body)[0]
    assert result.token_ids is not None
    assert result.token_ids.tolist() == [5, 6]
    assert r3wire.decode_logprobs(r3wire.encode_logprobs(_list([-1.0, -2.0], claimed))).tolist() == [-1.0, -2.0]


@pytest.mark.parametrize("claimed", [0, 2, -1])
def test_a_dict_claiming_fewer_keys_hides_no_unknown_key(claimed: int) -> None:
    pytest.importorskip("zstandard")
    trace = formats.write(np.array([[[1, 0]]], np.uint8), "fireworks-trace")
    # An unknown manifest key could change what the data means: a manifest claiming fewer keys must not hide one.
    manifest = _lying(dict, claimed)({**trace["manifest"], "Encryption": "aes"})
    with pytest.raises(R3WireError, match="unknown key"):
        formats.read({**trace, "manifest": manifest}, "fireworks-trace", num_layers=1, top_k=2)
    honest = {**trace, "manifest": _lying(dict, claimed)(trace["manifest"])}
    assert formats.read(honest, "fireworks-trace", num_layers=1, top_k=2).routes.tolist() == [[[1, 0]]]


def test_batching_reads_no_more_of_a_sequence_than_one_item_too_many() -> None:
    # range(10**12) is a Sequence: read up to one item past the count, not listed whole (a MemoryError before).
    sample = np.array([[[1, 0]]], np.int8)
    with pytest.raises(R3WireError) as info:
        r3wire.pad_routes([sample], side="right", replayed=range(10**12))
    assert (info.value.field, info.value.got) == ("replayed", "more than 1")
    with pytest.raises(R3WireError) as info:
        r3wire.pad_routes([sample], side="right", token_lengths=range(10**12))
    assert (info.value.field, info.value.got) == ("token_lengths", "more than 1")
    with pytest.raises(R3WireError) as info:
        r3wire.pad_routes([sample], side="right", token_lengths=np.array([1, 2, 3]))
    assert info.value.got == "3"


@pytest.mark.parametrize("payload", [range(10**12), itertools.repeat(None, 10**12)])
def test_fireworks_matrices_read_no_more_of_a_sequence_than_max_elements_allows(payload: Any) -> None:
    # copy_list read the whole sequence before max_elements was checked: a bare MemoryError (review 8, finding B).
    if not isinstance(payload, range):
        payload = _Endless()
    with pytest.raises(r3wire.DecodeError, match=r"^shape must be at most max_elements=12 elements") as caught:
        formats.read(payload, format="fireworks-matrices", num_layers=2, top_k=3, max_elements=12)
    assert caught.value.got == "more than 2 tokens of 2 layers x 3 top_k"
    fitting = formats.read(range(0), format="fireworks-matrices", num_layers=2, top_k=3, max_elements=12)
    assert fitting.routes.shape == (0, 2, 3)


class _Endless(Sequence[Any]):
    """A sequence of nulls without end, whose __len__ claims a plausible size."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            raise TypeError("no slices")
        return None

    def __iter__(self) -> Iterator[Any]:
        return itertools.repeat(None)
