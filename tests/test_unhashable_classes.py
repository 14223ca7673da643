"""A value whose class is unhashable (its metaclass defines ``__eq__`` without ``__hash__``) is refused like any
other unsupported value, naming its field, by every public entry point whose fast path sorts values out by their
types (``set(map(type, ...))``, a type table, ``isinstance`` against an ABC): never a ``TypeError``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest

import r3wire
from r3wire import DecodeError, EncodeError, R3WireError, formats
from r3wire.formats import read, read_response, write

LONG = 300  # past the length at which lists take the fast paths


class _Unhashable(type):
    def __eq__(cls, other: object) -> bool:
        return cls is other

    __hash__ = None  # type: ignore[assignment]  # what defining __eq__ alone does, said here explicitly


class Odd(metaclass=_Unhashable):
    pass


class OddList(list, metaclass=_Unhashable):  # type: ignore[type-arg]
    pass


def _ints(n: int) -> list[Any]:
    return [1] * n + [Odd()]


def _floats(n: int) -> list[Any]:
    return [0.5] * n + [Odd()]


_ROUTES = np.zeros((1, 1, 1), np.uint8)
CASES: list[tuple[str, Callable[[], object], type[R3WireError], str]] = [
    ("encode_routes", lambda: r3wire.encode_routes([[[1, Odd()]]], num_experts=8), EncodeError, "routes.dtype"),
    ("encode_routes long", lambda: r3wire.encode_routes([[[1]]] * LONG + [[[Odd()]]]), EncodeError, "routes.dtype"),
    ("encode_array", lambda: r3wire.encode_array(_ints(1)), EncodeError, "array.dtype"),
    ("encode_logprobs", lambda: r3wire.encode_logprobs(_floats(1)), EncodeError, "logprobs[1]"),
    ("encode_logprobs long", lambda: r3wire.encode_logprobs(_floats(LONG)), EncodeError, f"logprobs[{LONG}]"),
    ("clamp_logprobs long", lambda: r3wire.clamp_logprobs(_floats(LONG)), EncodeError, f"values[{LONG}]"),
    ("build_logprobs_content", lambda: r3wire.build_logprobs_content(_floats(1)), EncodeError, "logprobs[1]"),
    ("dumps", lambda: r3wire.dumps({"a": _ints(1)}), EncodeError, "$.a[1]"),
    ("dumps long", lambda: r3wire.dumps({"a": _ints(LONG)}), EncodeError, f"$.a[{LONG}]"),
    (
        "dumps clamped logprobs",
        lambda: r3wire.dumps({"logprobs": _floats(LONG)}, clamp_logprobs=True),
        EncodeError,
        f"$.logprobs[{LONG}]",
    ),
    ("iter_dumps", lambda: b"".join(r3wire.iter_dumps({"a": (_ints(LONG),)})), EncodeError, f"$.a[0][{LONG}]"),
    ("pad_sequences", lambda: r3wire.pad_sequences([_ints(LONG)]), R3WireError, "values[0].dtype"),
    ("pad_sequences arrays", lambda: r3wire.pad_sequences([np.zeros(2), Odd()]), R3WireError, "values[1].dtype"),
    ("pad_routes", lambda: r3wire.pad_routes([_ROUTES, Odd()]), R3WireError, "samples[1].dtype"),
    ("pack_routes", lambda: r3wire.pack_routes([_ROUTES, Odd()]), R3WireError, "samples[1].dtype"),
    ("validate_routes", lambda: r3wire.validate_routes([[[[Odd()]]]], num_experts=8), R3WireError, "samples[0].dtype"),
    (
        "read_response token ids",
        lambda: read_response({"choices": [{"routed_experts": [[[1]]], "token_ids": _ints(LONG)}]}),
        DecodeError,
        f"$.choices[0].token_ids[{LONG}]",
    ),
    (
        "read_response logprob list",
        lambda: read_response({"choices": [{"routed_experts": [[[1]]], "logprobs": _floats(LONG)}]}),
        DecodeError,
        f"$.choices[0].logprobs[{LONG}]",
    ),
    ("read_response batch", lambda: read_response([{}, OddList([1])]), DecodeError, "$[1]"),
    ("read json-lists", lambda: read([[[1]]] * LONG + [[[Odd()]]], "json-lists"), DecodeError, "routes"),
    ("write", lambda: write([[[1, Odd()]]], "skyrl"), EncodeError, "routes.dtype"),
]


@pytest.mark.parametrize(("call", "error", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_value_of_an_unhashable_class_is_refused_naming_its_field(
    call: Callable[[], object], error: type[R3WireError], field: str
) -> None:
    with pytest.raises(TypeError):
        hash(Odd)
    with pytest.raises(error) as info:
        call()
    # NumPy before 2.5 makes an object array of such a list (its dtype is refused); NumPy 2.5 refuses the list in
    # np.asarray itself (the value is refused, "unhashable type" in the message). Either names the caller's field.
    named = {field, field.removesuffix(".dtype")}
    assert info.value.field in named, (info.value.field, named)
    if info.value.field != field:
        assert "unhashable type" in str(info.value)


def test_loads_leaves_such_a_value_of_a_parsed_document_as_it_is() -> None:
    odd = Odd()
    doc = r3wire.loads({"a": [[1] * LONG + [odd], (odd,)]})
    assert doc["a"][0][-1] is odd
    assert doc["a"][1] == (odd,)


def test_the_vllm_adapter_names_such_a_token_id() -> None:
    vllm = pytest.importorskip("r3wire.vllm")
    completion = type("Completion", (), {"token_ids": [1, Odd()], "logprobs": None, "routed_experts": None})()
    with pytest.raises(EncodeError) as info:
        vllm.encode_completion(completion)
    assert info.value.field == "output.token_ids[1]"


class _RaisingDict(dict):  # type: ignore[type-arg]
    def get(self, key: object, default: object = None) -> object:
        raise TypeError("get")

    def items(self) -> Any:
        raise TypeError("items")


class _RaisingMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise TypeError("getitem")

    def __iter__(self) -> Iterator[str]:
        raise TypeError("iter")

    def __len__(self) -> int:
        return 1


class _RaisingList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[Any]:
        raise TypeError("iter")


def test_a_callers_raising_mapping_or_list_is_reported_never_leaked() -> None:
    # decode_routes reported these; loads, read_response, detect and the encoders let TypeError out (review 10a).
    # A dict subclass is read from its storage where the readers take dicts, as orjson writes it.
    assert r3wire.loads(_RaisingDict(a=1)) == {"a": 1}
    assert formats.read_response(_RaisingDict(a=1)) == []
    assert formats.read_response({"choices": [_RaisingDict(a=1)]}) == []
    # A list subclass is read from its storage too, as NumPy reads it.
    padded, _ = r3wire.pad_sequences(_RaisingList([np.zeros(2), np.ones(1)]))
    assert padded.tolist() == [[0.0, 0.0], [0.0, 1.0]]
    calls: list[Callable[[], object]] = [
        lambda: formats.detect(_RaisingDict(a=1)),
        lambda: formats.detect(_RaisingMapping()),
        lambda: formats.read(_RaisingMapping()),
        lambda: formats.read_response(_RaisingMapping()),
        lambda: r3wire.decode_routes(_RaisingMapping()),
        lambda: r3wire.encode_routes(_RaisingList([[[0, 1]]])),
        lambda: r3wire.encode_array(_RaisingList([1, 2])),
        lambda: formats.read_response(_RaisingList([[[0, 1]]])),
        lambda: r3wire.pad_routes(_RaisingList([[[[0, 1]]], "x"])),
        lambda: r3wire.pad_sequences(_RaisingList([np.zeros(2), "x"])),
        lambda: r3wire.validate_routes(_RaisingList([np.zeros((1, 1, 2), np.uint8), "x"])),
    ]
    for call in calls:
        with pytest.raises(R3WireError):
            call()
