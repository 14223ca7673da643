"""The walks over parsed and in-process documents (read_response, detect, read, loads): Mapping and list
subclasses are walked like dicts and lists whatever the list's length, a routes field nested in a routes field is
refused at its path instead of recursed into, reference cycles are refused where they close, and shared
containers are read like the JSON they stand for, up to a bound."""

from __future__ import annotations

import base64
import collections
import io
import tracemalloc
import types
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import DecodeError, R3WireError, formats
from r3wire._walk import SHARED_ITEMS_LIMIT
from r3wire.cli import main

R = np.arange(12, dtype=np.uint8).reshape(3, 2, 2) % 7


def _npy(routes: np.ndarray[Any, Any]) -> str:
    buffer = io.BytesIO()
    np.save(buffer, routes)
    return base64.b64encode(buffer.getvalue()).decode()


def _choice() -> dict[str, Any]:
    return {"routed_experts": _npy(R), "token_ids": [1, 2, 3, 4]}


# ------------------------------------------------------------------------ Mapping and list subclasses (review 5 #1)


@pytest.mark.parametrize("count", [15, 16, 40])
@pytest.mark.parametrize("mapping", [collections.OrderedDict, types.MappingProxyType, collections.UserDict])
def test_long_lists_of_mappings_are_walked_whatever_their_type(count: int, mapping: Any) -> None:
    batch = [mapping({"choices": [_choice()]}) for _ in range(count)]
    for body in (batch, {"choices": [mapping(_choice()) for _ in range(count)]}, {"choices": tuple(batch)}):
        results = formats.read_response(body)
        assert len(results) == count
        for result in results:
            assert np.array_equal(result.routes, R)


def test_long_lists_of_list_subclasses_are_walked() -> None:
    class Items(list[Any]):
        pass

    body = {"outputs": Items(Items([{"meta_info": {"routed_experts": _npy(R)}}]) for _ in range(20))}
    assert [r.path for r in formats.read_response(body)][-1] == "$.outputs[19][0].meta_info.routed_experts"


def test_long_lists_of_leaves_are_still_skipped() -> None:
    # Token ids beside a list of numbers 16 long: nothing walked in it, and nothing found.
    assert formats.read_response({"x": list(range(100)), "y": ["a"] * 16}) == []


# --------------------------------------------------------------------- routes nested in routes (review 5 #5)


def _nested(depth: int, inner: Any = "AAAA") -> Any:
    value = inner
    for _ in range(depth):
        value = {"routed_experts": value}
    return value


@pytest.mark.parametrize("depth", [2, 400, 1000])
def test_a_routes_field_inside_a_routes_field_is_refused_at_its_path(depth: int) -> None:
    inner = _nested(depth)
    text = b'{"choices":[' + b'{"routed_experts":' * depth + b'"AAAA"' + b"}" * depth + b"]}"
    for body in (text, {"choices": [inner]}):
        with pytest.raises(DecodeError) as info:
            formats.read_response(body, num_layers=1, top_k=1)
        assert info.value.field == "$.choices[0].routed_experts.routed_experts"
        assert "never another routed_experts field" in str(info.value)
    for call in (formats.detect, formats.read):
        with pytest.raises(DecodeError) as info:
            call(inner)
        assert info.value.field == "routed_experts.routed_experts"


def test_one_level_of_nesting_is_refused_not_read_from_the_inner_value() -> None:
    # It used to read the inner value and name the outer path.
    body = {"choices": [{"routed_experts": {"routed_experts": _npy(R)}}]}
    with pytest.raises(DecodeError, match=r"^\$\.choices\[0\]\.routed_experts\.routed_experts must be absent"):
        formats.read_response(body)


def test_an_envelope_holding_a_routed_experts_member_is_read_as_the_envelope() -> None:
    # Its schema says what it is; the envelope reader then refuses the unknown member, at the routes' path.
    envelope = {**orjson.loads(r3wire.dumps({"r": R}, routes_keys=("r",)))["r"], "routed_experts": "x"}
    with pytest.raises(DecodeError) as info:
        formats.read_response({"choices": [{"routed_experts": envelope}]})
    assert info.value.field == "$.choices[0].routed_experts"


def test_cli_inspect_of_deeply_nested_routes_is_an_error_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.json"
    path.write_bytes(b'{"choices":[' + b'{"routed_experts":' * 400 + b'"AAAA"' + b"}" * 400 + b"]}")
    assert main(["inspect", "--num-layers", "1", "--top-k", "1", str(path)]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert "$.choices[0].routed_experts.routed_experts must be absent" in err


# ------------------------------------------------------------- reference cycles and shared containers (review 5 #6)


def _readers() -> list[Any]:
    return [formats.read_response, formats.detect, formats.read, r3wire.loads]


@pytest.mark.parametrize("call", _readers())
def test_a_reference_cycle_is_refused_where_it_closes(call: Any) -> None:
    body: dict[str, Any] = {"choices": []}
    body["choices"].append(body)
    with pytest.raises(DecodeError) as info:
        call(body)
    assert info.value.field == "$.choices[0]"
    assert str(info.value) == (
        "$.choices[0] must be a tree of values (no reference cycles), got a reference to its own enclosing container $"
    )


@pytest.mark.parametrize("call", [formats.read_response, r3wire.loads])
def test_a_deeper_cycle_names_both_ends(call: Any) -> None:
    body: dict[str, Any] = {"id": 1, "choices": [{"message": {"parts": [1, 2]}}]}
    body["choices"][0]["message"]["parts"].append(body["choices"][0])
    with pytest.raises(DecodeError) as info:
        call(body)
    assert info.value.field == "$.choices[0].message.parts[2]"
    assert info.value.got == "a reference to its own enclosing container $.choices[0]"


@pytest.mark.parametrize("call", [formats.read_response, r3wire.loads])
def test_an_object_holding_itself_is_a_cycle(call: Any) -> None:
    body: dict[str, Any] = {"a": {}}
    body["a"]["self"] = body["a"]
    with pytest.raises(DecodeError) as info:
        call(body)
    assert info.value.field == "$.a.self"


def test_dumps_refuses_the_same_cycle() -> None:
    body: dict[str, Any] = {"choices": []}
    body["choices"].append(body)
    with pytest.raises(r3wire.EncodeError, match="no reference cycles"):
        r3wire.dumps(body)


def test_shared_leaves_and_bodies_read_like_their_json() -> None:
    # One token_ids list in two choices, one body sent twice in a batch: harmless, read as the JSON they stand for.
    ids = [1, 2, 3, 4]
    choice = {"routed_experts": _npy(R), "token_ids": ids}
    body = {"choices": [choice, {**choice, "logprobs": [-0.5] * 4}]}
    for doc in (body, [body] * 16):
        plain = orjson.loads(orjson.dumps(doc))
        got, expected = formats.read_response(doc), formats.read_response(plain)
        assert [r.path for r in got] == [r.path for r in expected]
        for a, b in zip(got, expected, strict=True):
            assert np.array_equal(a.routes, b.routes)
            assert a.token_ids is not None
            assert b.token_ids is not None
            assert np.array_equal(a.token_ids, b.token_ids)
    loaded = r3wire.loads({"a": ids, "b": [ids, ids]})
    assert loaded == {"a": ids, "b": [ids, ids]}
    assert loaded["a"] is not ids
    assert loaded["b"][0] is not loaded["b"][1]


def _exponential(levels: int) -> list[Any]:
    node: list[Any] = [1]
    for _ in range(levels):
        node = [node, node]  # 2**levels copies of the innermost list in the JSON it stands for
    return node


@pytest.mark.parametrize("call", _readers())
def test_exponential_sharing_is_refused_not_walked(call: Any) -> None:
    with pytest.raises(R3WireError) as info:
        call({"choices": _exponential(60)})
    assert "shared containers" in str(info.value)
    assert info.value.field is not None
    assert info.value.field.startswith("$.choices[")


def test_moderate_sharing_is_read_in_full() -> None:
    doc = {"x": _exponential(12)}
    assert r3wire.loads(doc) == orjson.loads(orjson.dumps(doc))
    assert formats.read_response(doc) == []


def test_a_batch_of_one_large_body_sixteen_times_is_read_in_full() -> None:
    # Past the fixed bound, a document may repeat up to 16 times its own items: loads copies every container.
    body = {"choices": [{"routed_experts": _npy(R), "token_ids": list(range(SHARED_ITEMS_LIMIT // 10))}]}
    loaded = r3wire.loads([body] * 16)
    assert len(loaded) == 16
    assert loaded[15]["choices"][0]["token_ids"] == body["choices"][0]["token_ids"]
    assert len(formats.read_response([body] * 16)) == 16
    with pytest.raises(DecodeError, match=r"repeat at most \d+ items in all \(16 times the document's own"):
        r3wire.loads([body] * 18)


def test_a_shared_envelope_counts_the_elements_it_decodes_again() -> None:
    # 2**18 ids, decoded once as the document's own: sixteen decodings again are within 16 times that, a
    # seventeenth is refused where it would be made, before it is decoded.
    routes = np.zeros((SHARED_ITEMS_LIMIT // 16, 2, 2), np.uint8)
    envelope = orjson.loads(r3wire.dumps({"routed_experts": routes}))["routed_experts"]
    loaded = r3wire.loads({"a": [envelope] * 17})
    assert loaded["a"][0] is not loaded["a"][16]
    assert all(np.array_equal(array, routes) for array in loaded["a"])
    with pytest.raises(DecodeError, match="shared containers and values") as info:
        r3wire.loads({"a": [envelope] * 18})
    assert info.value.field == "$.a[17]"


def test_an_envelope_past_the_fixed_bound_referenced_twice_loads_like_its_json() -> None:
    # Review 6 D: the second reference to one envelope of more than 2**20 ids was refused, though the document
    # is tiny and its JSON text loads. Its first decoding is the document's own, so a second is well within 16 times.
    routes = np.arange(SHARED_ITEMS_LIMIT + 4, dtype=np.uint8).reshape(-1, 2, 2) % 128
    envelope = r3wire.encode_routes(routes)
    doc = {"routed_experts": envelope, "copy": envelope}
    loaded = r3wire.loads(doc)
    from_text = r3wire.loads(orjson.dumps(doc))
    assert loaded["routed_experts"] is not loaded["copy"]
    for key in doc:
        assert np.array_equal(loaded[key], routes)
        assert loaded[key].dtype == from_text[key].dtype


def _routes_value(routes: np.ndarray[Any, Any], kind: str) -> dict[str, Any]:
    """A choice's routes members in ``kind``'s wire form (SGLang with ``routed_experts_dtype`` beside it)."""
    if kind == "sglang":
        written = formats.write(routes, format="sglang", dtype="uint8")
        assert isinstance(written, dict)
        return written
    if kind == "fireworks-r3v1":
        pytest.importorskip("zstandard")
    value = formats.write(routes, format=kind)
    return {"routed_experts": value}


@pytest.mark.parametrize("kind", ["vllm-npy", "nemo-rl", "sglang", "r3wire", "fireworks-r3v1"])
@pytest.mark.parametrize("shared", ["choice", "value"])
def test_a_routes_value_read_again_counts_its_elements_and_is_bounded(kind: str, shared: str) -> None:
    # Review 6 D: read_response decoded one shared routes value once per reference (a string cost nothing, an
    # envelope its 5 members): N times its array from a document holding it once. Now each decoding again counts
    # the ids its first decoding yielded, before it is made: 16 are read, the 17th is refused.
    routes = np.zeros((SHARED_ITEMS_LIMIT // 4, 2, 2), np.uint8)  # 2**20 ids, a MiB as uint8
    members = _routes_value(routes, kind)
    if shared == "choice":  # one choice object in every place, as [choice] * n builds it
        choices = [{**members, "token_ids": [1]}] * 100
    else:  # distinct choices holding one routes object
        choices = [{**members, "token_ids": [1]} for _ in range(100)]
    assert len(formats.read_response({"choices": choices[:17]}, num_layers=2, top_k=2)) == 17
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="shared containers and values") as info:
            formats.read_response({"choices": choices}, num_layers=2, top_k=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.field == "$.choices[17].routed_experts"
    # 17 arrays of a MiB are held when the 18th is refused (not 100): bounded by the document's own, not by N.
    assert peak < 24 * routes.nbytes


def test_a_shared_choice_counts_the_token_ids_read_beside_its_routes_again() -> None:
    # One row of routes beside 2**17 token ids: each reading again makes a MiB of int64 ids, which count with the
    # routes (the first reading's total), so a choice shared 200 times is refused, not read into 200 MiB.
    token_ids = list(range(1 << 17))
    choice = {"routed_experts": _npy(np.zeros((1, 1, 1), np.uint8)), "token_ids": token_ids}
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="shared containers and values") as info:
            formats.read_response({"choices": [choice] * 200})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.field is not None
    assert info.value.field.startswith("$.choices[")
    # The document's own counts the list's items and its first reading: about 32 readings again, never 200.
    assert peak < 48 * 8 * len(token_ids)
    assert len(formats.read_response({"choices": [choice] * 16})) == 16


def test_empty_routes_strings_of_a_json_text_are_not_one_shared_value() -> None:
    # CPython (and so orjson) makes every "" one object: a tree of SGLang choices with no rows is not sharing, and
    # the token ids read beside each are their own, even when they are envelopes (a few items, many ids).
    ids = orjson.loads(r3wire.dumps({"t": np.arange(1 << 17)}))["t"]
    text = orjson.dumps({"choices": [{"routed_experts": "", "token_ids": ids} for _ in range(40)]})
    results = formats.read_response(text, num_layers=1, top_k=1)
    assert len(results) == 40
    assert all(r.routes.shape == (0, 1, 1) for r in results)
    with pytest.raises(DecodeError, match="shared containers and values") as info:  # one choice, 40 times
        formats.read_response({"choices": [orjson.loads(text)["choices"][0]] * 40}, num_layers=1, top_k=1)
    assert info.value.field == "$.choices[17].routed_experts"


def test_a_batch_of_one_body_with_large_routes_sixteen_times_is_read_in_full() -> None:
    routes = np.zeros((SHARED_ITEMS_LIMIT // 4, 2, 2), np.uint8)
    body = {"choices": [{"routed_experts": _npy(routes), "token_ids": [1]}]}
    results = formats.read_response([body] * 16, num_layers=2, top_k=2)
    assert [r.path for r in results] == [f"$[{i}].choices[0].routed_experts" for i in range(16)]
    assert all(np.array_equal(r.routes, routes) for r in results)
    with pytest.raises(DecodeError) as info:
        formats.read_response([body] * 18, num_layers=2, top_k=2)
    assert info.value.field == "$[17].choices[0].routed_experts"


def test_loads_of_a_parsed_document_leaves_it_as_it_was() -> None:
    routes = orjson.loads(r3wire.dumps({"routed_experts": R}))["routed_experts"]
    doc = {"choices": ({"routed_experts": routes, "ids": [1, 2]},), "x": collections.OrderedDict(y=[routes])}
    before = orjson.dumps(doc)
    loaded = r3wire.loads(doc)
    assert orjson.dumps(doc) == before
    assert type(loaded["choices"]) is tuple
    assert np.array_equal(loaded["choices"][0]["routed_experts"], R)
    assert np.array_equal(loaded["x"]["y"][0], R)
    assert type(loaded["x"]) is dict


def test_a_malformed_envelope_in_a_parsed_document_is_named_by_its_path() -> None:
    routes = orjson.loads(r3wire.dumps({"routed_experts": R}))["routed_experts"]
    bad = {**routes, "shape": [3, 2, 3]}
    with pytest.raises(DecodeError) as info:
        r3wire.loads({"choices": [{"ok": routes}, {"x": [1, bad]}]})
    assert info.value.field is not None
    assert info.value.field.startswith("$.choices[1].x[1].")
