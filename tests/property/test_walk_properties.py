"""Properties of the walks over a parsed or in-process document (read_response, detect, read, loads).

- a body built from Mapping and list subclasses (OrderedDict, MappingProxyType, a custom Mapping, tuples), one
  body or a batch of up to 40 (past the long-list shortcut), reads exactly like the same body of dicts and lists;
- containers shared by several places (which JSON text cannot hold) read exactly like the JSON text the document
  stands for;
- a reference cycle injected anywhere gives r3wire's error, never a hang or a foreign exception: loads always
  refuses it as a cycle, the readers either refuse it or never walk it;
- routed_experts nested in routed_experts to any depth orjson parses gives r3wire's error, never RecursionError.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_LEAVES
from hypothesis import event, given
from hypothesis import strategies as st

import r3wire
from r3wire import R3WireError, _walk, formats

pytestmark = pytest.mark.property

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
CASES: list[dict[str, Any]] = [
    case
    for name in ("response-engines-v1.json", "response-alignment-v1.json")
    for case in json.loads((VECTORS / name).read_text(encoding="utf-8"))["cases"]
]
# The values the readers read (left as the engine sent them); everything around them is walked.
READ_KEYS = frozenset(
    {
        "routed_experts",
        "router_replay",
        "routing_matrices",
        "token_ids",
        "output_ids",
        "prompt_token_ids",
        "logprobs",
        "output_token_logprobs",
    }
)


class _Custom(Mapping[Any, Any]):
    """A Mapping that is no dict: what an in-process caller may build its document from."""

    def __init__(self, items: dict[Any, Any]) -> None:
        self._items = items

    def __getitem__(self, key: Any) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class _Dict(dict[Any, Any]):
    pass


class _List(list[Any]):
    pass


MAPPINGS = (dict, collections.OrderedDict, _Dict, types.MappingProxyType, _Custom)
SEQUENCES = (list, _List, tuple)


def _dressed(data: st.DataObject, value: Any) -> Any:
    """``value`` with every walked container rebuilt as a drawn Mapping or sequence type (envelopes and what the
    readers read kept as they are)."""
    if isinstance(value, dict) and "schema" not in value:
        items = {key: item if key in READ_KEYS else _dressed(data, item) for key, item in value.items()}
        return data.draw(st.sampled_from(MAPPINGS))(items)
    if isinstance(value, list):
        return data.draw(st.sampled_from(SEQUENCES))(_dressed(data, item) for item in value)
    return value


def _same(got: list[formats.ReadResult], expected: list[formats.ReadResult]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        for field in dataclasses.fields(b):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if isinstance(y, np.ndarray):
                assert isinstance(x, np.ndarray)
                assert x.dtype == y.dtype
                assert np.array_equal(x, y)
            else:
                assert x == y, field.name


def _outcome(call: Any) -> tuple[str, Any]:
    """What ``call()`` gave: its value, or r3wire's error as its type and message (anything else propagates)."""
    try:
        return "value", call()
    except R3WireError as exc:
        return type(exc).__name__, str(exc)


def _same_outcome(got: tuple[str, Any], expected: tuple[str, Any]) -> None:
    """The same error, or the same value: read_response's results, read's result or detect's format name."""
    assert got[0] == expected[0]
    if got[0] != "value":
        assert got[1] == expected[1]
    elif isinstance(expected[1], list):
        _same(got[1], expected[1])
    elif isinstance(expected[1], formats.ReadResult):
        _same([got[1]], [expected[1]])
    else:
        assert got[1] == expected[1]


@given(st.data(), st.sampled_from(CASES), st.integers(0, 40), st.booleans())
def test_mapping_and_sequence_subclasses_read_like_dicts_and_lists(
    data: st.DataObject, case: dict[str, Any], batch: int, shared: bool
) -> None:
    body, args = case["body"], case["read_args"]
    plain: Any = body if not batch else [copy.deepcopy(body) for _ in range(batch)]
    expected = _outcome(lambda: formats.read_response(plain, **args))
    if not batch:
        dressed = _dressed(data, body)
    elif shared:  # [body] * n: one object n times, as a caller builds a batch
        one = _dressed(data, body)
        dressed = data.draw(st.sampled_from(SEQUENCES))([one] * batch)
    else:
        dressed = data.draw(st.sampled_from(SEQUENCES))(_dressed(data, body) for _ in range(batch))
    _same_outcome(_outcome(lambda: formats.read_response(dressed, **args)), expected)


# Random documents: JSON values, and the engine bodies with their routes, as containers to inject into.
DOCUMENTS = st.one_of(
    st.recursive(
        JSON_LEAVES,
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.sampled_from(["choices", "meta_info", "x", "message", "data"]), children, max_size=4)
        ),
        max_leaves=20,
    ),
    st.sampled_from(CASES).map(lambda case: copy.deepcopy(case["body"])),
)
INJECTED_KEYS = st.sampled_from(["choices", "routed_experts", "meta_info", "x", "token_ids", "logprobs", "schema"])


def _containers(doc: Any) -> list[tuple[Any, list[Any]]]:
    """Every dict and list of a tree with its ancestors (outermost first), in document order; not the envelopes
    (decoded, never walked: what is put in one makes it malformed)."""
    found: list[tuple[Any, list[Any]]] = []
    stack: list[tuple[Any, list[Any]]] = [(doc, [])]
    while stack:
        node, above = stack.pop()
        if isinstance(node, (dict, list)) and not (isinstance(node, dict) and "schema" in node):
            found.append((node, above))
            items = node.values() if isinstance(node, dict) else node
            stack.extend((item, [*above, node]) for item in reversed(list(items)))
    return found


def _reaches(start: Any, target: Any) -> bool:
    """Whether ``target`` is ``start`` or inside it, by any path."""
    seen: set[int] = set()
    stack = [start]
    while stack:
        node = stack.pop()
        if node is target:
            return True
        if id(node) in seen or not isinstance(node, (dict, list)):
            continue
        seen.add(id(node))
        stack.extend(node.values() if isinstance(node, dict) else node)
    return False


def _insert(data: st.DataObject, into: Any, item: Any) -> None:
    if isinstance(into, dict):
        into[data.draw(INJECTED_KEYS)] = item
    else:
        into.insert(data.draw(st.integers(0, len(into))), item)


def _readers(doc: Any) -> list[Any]:
    return [
        lambda: formats.read_response(doc, num_layers=2, top_k=2),
        lambda: formats.detect(doc),
        lambda: formats.read(doc, num_layers=2, top_k=2),
    ]


@given(st.data(), DOCUMENTS)
def test_a_reference_cycle_anywhere_gives_r3wire_error(data: st.DataObject, doc: Any) -> None:
    found = _containers(doc)
    if not found:
        doc = [doc]
        found = [(doc, [])]
    into, above = data.draw(st.sampled_from(found))
    target = data.draw(st.sampled_from([*above, into]))
    _insert(data, into, target)
    with pytest.raises(R3WireError) as info:
        r3wire.loads(doc)  # every container is walked: the cycle is always found
    assert "(no reference cycles)" in str(info.value)
    assert info.value.field is not None
    assert info.value.field.startswith("$")
    for read in _readers(doc):
        _outcome(read)  # a value (the cycle is where no walk goes) or r3wire's error, never anything else


def _unfolded(value: Any) -> Any:
    """``value`` as a tree: a copy of each container for each place it is referenced from (small documents)."""
    if isinstance(value, dict):
        return {key: _unfolded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unfolded(item) for item in value]
    return value


def _same_document(got: tuple[str, Any], expected: tuple[str, Any]) -> None:
    assert got[0] == expected[0]
    if got[0] != "value":
        assert got[1] == expected[1]
        return
    stack = [(got[1], expected[1])]
    while stack:
        a, b = stack.pop()
        assert type(a) is type(b)
        if isinstance(b, np.ndarray):
            assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes())
        elif isinstance(b, dict):
            assert list(a) == list(b)
            stack.extend((a[key], b[key]) for key in b)
        elif isinstance(b, list):
            assert len(a) == len(b)
            stack.extend(zip(a, b, strict=True))
        else:
            assert a == b


@given(st.data(), DOCUMENTS, st.integers(1, 3))
def test_shared_containers_read_like_the_json_they_stand_for(data: st.DataObject, doc: Any, shares: int) -> None:
    for _ in range(shares):
        found = _containers(doc)
        if not found:
            break
        into, _ = data.draw(st.sampled_from(found))
        # Any container from which ``into`` cannot be reached (by any path): sharing, never a cycle.
        others = [node for node, _ in found if not _reaches(node, into)]
        if not others:
            break
        _insert(data, into, data.draw(st.sampled_from(others)))
    tree = _unfolded(doc)  # what the JSON text the document stands for parses to
    _same_document(_outcome(lambda: r3wire.loads(doc)), _outcome(lambda: r3wire.loads(tree)))
    for read, reference in zip(_readers(doc), _readers(tree), strict=True):
        _same_outcome(_outcome(read), _outcome(reference))


@given(
    st.integers(1, 1000),
    st.sampled_from(["QUJD", {"data": "AA==", "shape": [1, 1, 1]}, [[[1]]], {"x": 1}, None, 5]),
    st.sampled_from(["routed_experts", "router_replay", "routing_matrices"]),
    st.booleans(),
)
def test_nested_routes_fields_give_r3wire_error_at_any_depth(depth: int, inner: Any, outer: str, text: bool) -> None:
    value: Any = inner
    for _ in range(depth):
        value = {"routed_experts": value}
    doc: Any = {"choices": [{outer: value}]}
    if text:  # at most 1003 levels, which orjson.loads parses (up to 1024), written out by hand (its dumps: 255)
        nested = b'{"routed_experts":' * depth + orjson.dumps(inner) + b"}" * depth
        doc = b'{"choices":[{"' + outer.encode() + b'":' + nested + b"}]}"
    for read in [*_readers(doc), lambda: formats.detect(value), lambda: formats.read(value)]:
        _outcome(read)
    if depth > 1:
        with pytest.raises(R3WireError) as info:
            formats.read_response(doc, num_layers=1, top_k=1)
        if outer == "routed_experts":
            assert info.value.field == "$.choices[0].routed_experts.routed_experts"


# Routes values in the forms read_response reads (strings of three formats, an envelope under any key) and the
# ids they decode to, [rows, 2, 2]: up to 256 ids, so 16 times the document's own is passed within 40 references.
ROUTES_FORMATS = ("vllm-npy", "nemo-rl", "sglang", "r3wire")
SMALL_LIMIT = 64


def _distinct_items(doc: Any) -> int:
    """The items of each distinct dict and list of ``doc`` (what the document holds once)."""
    seen: set[int] = set()
    stack, total = [doc], 0
    while stack:
        node = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        seen.add(id(node))
        total += len(node)
        stack.extend(node.values() if isinstance(node, dict) else node)
    return total


@given(
    st.data(),
    st.lists(
        st.tuples(st.sampled_from(ROUTES_FORMATS), st.integers(0, 64), st.integers(0, 40)), min_size=1, max_size=3
    ),
)
def test_shared_routes_values_read_like_their_json_or_are_refused_past_the_bound(
    data: st.DataObject, values: list[tuple[str, int, int]]
) -> None:
    """Each routes value once in a choice of its own, then referenced again its drawn number of times, in a drawn
    order: by the same choice object, or by a new choice holding the same value object. read_response and loads give
    what the JSON text gives, unless what they decode or walk again passes the documented bound (2**20, lowered
    here, or 16 times the document's own: its distinct containers' items and the ids of the distinct values decoded
    so far): then a DecodeError at a reference past it, never anything else.

    read_response decodes in document order, every value's first reference here before any other: the bound is
    exact. loads walks in an order of its own: a value decoded again has been decoded once before (so its own ids
    always count), the others may not have been yet, so it is refused only past 16 times the document's containers
    and the smallest value it decodes again, and always past 16 times the whole document's own."""
    rng = np.random.default_rng(len(values))
    choices: list[dict[str, Any]] = []
    ids: list[int] = []  # each value's decoded ids
    envelopes: list[bool] = []
    for kind, rows, _ in values:
        routes = rng.integers(0, 100, size=(rows, 2, 2), dtype=np.uint8)
        value = formats.write(routes, format=kind)
        choices.append({"routed_experts": value})
        ids.append(routes.size)
        envelopes.append(isinstance(value, dict))
    references = [index for index, (_, _, times) in enumerate(values) for _ in range(times)]
    again = data.draw(st.permutations(references))
    made_again = {"read_response": 0, "loads": 0}
    for index in again:
        same_choice = data.draw(st.booleans())
        choices.append(choices[index] if same_choice else {"routed_experts": choices[index]["routed_experts"]})
        made_again["read_response"] += int(same_choice) + ids[index]  # the choice's one member, the value's ids
        made_again["loads"] += int(same_choice) + (ids[index] if envelopes[index] else 0)  # decodes envelopes only
    doc = {"choices": choices}
    text = orjson.dumps(doc)
    own = _distinct_items(doc)
    decoded = {  # the ids of the values each reader decodes
        "read_response": dict(enumerate(ids)),
        "loads": {index: n for index, n in enumerate(ids) if envelopes[index]},
    }
    readers: dict[str, Callable[[Any], Any]] = {
        "read_response": lambda body: formats.read_response(body, num_layers=2, top_k=2),
        "loads": r3wire.loads,
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_walk, "SHARED_ITEMS_LIMIT", SMALL_LIMIT)
        for name, read in readers.items():
            whole = max(SMALL_LIMIT, _walk.SHARED_FACTOR * (own + sum(decoded[name].values())))
            # loads may refuse before it reaches a value's first reference (it walks a list from its end): at a
            # refusal, only the value being decoded again is sure to have been decoded once before.
            charged = [n for index, n in decoded[name].items() if index in again]
            least = max(SMALL_LIMIT, _walk.SHARED_FACTOR * (own + min(charged, default=0)))
            got = _outcome(lambda: read(doc))  # noqa: B023 (called at once)
            refused = got[0] == "DecodeError" and "shared containers and values" in got[1]
            event(f"{name}: {'refused' if refused else 'read'}")
            if made_again[name] > whole:
                assert refused, got
            if refused:
                assert made_again[name] > (whole if name == "read_response" else least)
                assert got[1].startswith("$.choices[")
            elif name == "loads":
                _same_document(got, _outcome(lambda: r3wire.loads(text)))
            else:
                _same_outcome(got, _outcome(lambda: formats.read_response(text, num_layers=2, top_k=2)))
