"""Errors from ``read_response`` name locations that exist in the body: the routes value, a member of it, or an
element of the routes it holds (``<path>[row, layer, slot]``), never a name internal to a format reader."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r3wire import DecodeError, R3WireError
from r3wire.formats import _response, read_response, write

ROUTES = (np.arange(12).reshape(3, 2, 2) % 5).astype(np.int32)
# Language-neutral cases of these rules, run by the JavaScript reference too (tests/js/run_vectors.mjs); in v2 a
# body may be JSON text (a string), for what a parsed body cannot hold (a number beyond a double's range).
ERROR_CASES: list[dict[str, Any]] = [
    case
    for name in ("response-errors-v1.json", "response-errors-v2.json", "response-errors-v3.json")
    for case in json.loads((Path(__file__).parent / "vectors" / name).read_text(encoding="utf-8"))["cases"]
]
FORMATS = [
    "r3wire",
    "skyrl",
    "prime-rl",
    "prime-rl-b85",
    "vllm-npy",
    "nemo-rl",
    "json-lists",
    "fireworks-matrices",
    "fireworks-r3v1",
    "fireworks-trace",
    "sglang",
]
_ELEMENT = re.compile(r"\[\d+(, \d+)+\]$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def _resolve(body: Any, path: str) -> Any:
    """The node of ``body`` at a JSONPath of ``.key`` and ``[n]`` steps; KeyError/IndexError if it is not there."""
    assert path.startswith("$"), path
    rest = _ELEMENT.sub("", path[1:])  # an element of decoded routes: the value holding them must exist
    node = body
    position = 0
    while position < len(rest):
        step = _STEP.match(rest, position)
        assert step is not None, f"not a JSONPath step at {rest[position:]!r} in {path!r}"
        node = node[step.group(1)] if step.group(1) is not None else node[int(step.group(2))]
        position = step.end()
    return node


def _value(name: str) -> Any:
    routes = ROUTES if name in ("nemo-rl", "json-lists", "sglang") else ROUTES.astype(np.uint8)
    if name.startswith("fireworks"):
        pytest.importorskip("zstandard")
    return write(routes, name)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("key", ["routed_experts", "routing_matrices", "router_replay"])
@pytest.mark.parametrize("limit", ["num_experts", "max_elements"])
def test_a_bad_routes_value_is_named_where_it_is_in_the_body(name: str, key: str, limit: str) -> None:
    body = {"choices": [{"index": 0, key: _value(name), "token_ids": [1, 2, 3, 4]}]}
    options: dict[str, Any] = {"num_layers": 2, "top_k": 2}
    options |= {"num_experts": 3} if limit == "num_experts" else {"max_elements": 5}
    with pytest.raises(R3WireError) as caught:
        read_response(body, **options)
    field = caught.value.field
    assert field is not None
    assert field.startswith(f"$.choices[0].{key}")
    _resolve(body, field)  # every step exists
    assert " " not in _ELEMENT.sub("", field)
    if limit == "num_experts":
        assert _ELEMENT.search(field), field  # the element, by its position in the routes
        assert caught.value.got in {"4", "3"}


def test_sglangs_dtype_beside_the_routes_is_named_as_the_holders_member() -> None:
    body = {"meta_info": {"routed_experts": write(ROUTES, "sglang"), "routed_experts_dtype": "int9"}}
    with pytest.raises(R3WireError) as caught:
        read_response(body, num_layers=2, top_k=2)
    assert caught.value.field == "$.meta_info.routed_experts_dtype"


def test_a_header_problem_inside_an_encoded_string_names_the_string_and_says_which_part() -> None:
    body = {"choices": [{"routed_experts": write(ROUTES.astype(np.uint8), "vllm-npy")}]}
    with pytest.raises(R3WireError) as caught:
        read_response(body, max_elements=5)
    assert caught.value.field == "$.choices[0].routed_experts"
    assert "(its npy header.shape)" in str(caught.value)


def test_the_keys_not_searched_for_routes_are_the_documented_ones_in_python_and_the_js_reference() -> None:
    root = Path(__file__).parent.parent
    where = (root / "docs" / "formats.md").read_text(encoding="utf-8").split("- **Where.**")[1].split("- **")[0]
    documented = set(re.findall(r"`([a-z_]+)`", where.split("are not searched:")[1].split(" hold ")[0]))
    js = (root / "tests" / "js" / "response.mjs").read_text(encoding="utf-8")
    in_js = set(re.findall(r'"([a-z_]+)"', js.split("const NOT_SEARCHED = new Set([")[1].split("]);")[0]))
    assert documented == in_js == set(_response._NO_ROUTES_KEYS)
    envelope = {"data": "AAECAw==", "shape": [1, 2, 2], "dtype": "uint8"}
    for key in sorted(documented):
        assert read_response({"choices": [{"index": 0, key: {"routed_experts": envelope}}]}) == []
    assert len(read_response({"choices": [{"index": 0, "other": {"routed_experts": envelope}}]})) == 1


def test_an_entry_of_an_encoded_header_is_said_in_the_message_never_taken_for_an_element() -> None:
    npy = write(ROUTES.astype(np.uint8), "vllm-npy")
    text = base64.b64decode(npy).replace(b"(3, 2, 2)", b"(3, -2, 2)")
    body = {"choices": [{"routed_experts": base64.b64encode(text).decode()}]}
    with pytest.raises(R3WireError) as caught:
        read_response(body)
    assert caught.value.field == "$.choices[0].routed_experts"
    assert "(its npy header.shape[1])" in str(caught.value)


def test_a_member_the_routes_object_lacks_is_named_in_the_message() -> None:
    envelope = write(ROUTES.astype(np.uint8), "r3wire")  # detected by its schema, data or not
    del envelope["data"]
    with pytest.raises(R3WireError) as caught:
        read_response({"choices": [{"routed_experts": envelope}]})
    assert caught.value.field == "$.choices[0].routed_experts"
    assert "(its data)" in str(caught.value)


_ROUTES_KEYS = ["routed_experts", "routing_matrices", "router_replay"]


@pytest.mark.parametrize(
    ("name", "key"),
    [(name, key) for name in ("r3wire", "skyrl", "prime-rl", "prime-rl-b85") for key in _ROUTES_KEYS]
    + [("r3wire", "envelope")],  # only r3wire envelopes are routes under any key
)
def test_a_routes_object_with_a_stray_routed_experts_member_is_refused_never_read_for_it(name: str, key: str) -> None:
    value = write(ROUTES.astype(np.uint8), name)
    assert isinstance(value, dict)
    stray = {**value, "routed_experts": write(ROUTES.astype(np.uint8), "r3wire")}  # alone, valid routes
    with pytest.raises(R3WireError) as caught:
        read_response({"choices": [{key: stray}]})
    # An envelope is one by its schema: its reader refuses the unknown member, at the value's path.
    inner = "" if name == "r3wire" else ".routed_experts"
    assert caught.value.field == f"$.choices[0].{key}{inner}"


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c["name"] for c in ERROR_CASES])
@pytest.mark.parametrize("as_text", [False, True])
def test_the_error_vectors_name_the_location_in_the_body_or_read_to_their_results(
    case: dict[str, Any], as_text: bool
) -> None:
    body = case["body"] if isinstance(case["body"], str) or not as_text else json.dumps(case["body"])
    if case.get("verdict") == "reject":
        with pytest.raises(DecodeError) as caught:
            read_response(body, **case["read_args"])
        assert caught.value.field == case["field"]
        # The wording is the vector's to read; a fault without a place is the payload's.
        assert str(caught.value).startswith(f"{case['field'] or 'payload'} must be ")
        return
    results = read_response(body, **case["read_args"])
    got = [
        {
            "path": r.path,
            "format": r.format,
            "dtype": str(r.routes.dtype),
            "values": r.routes.tolist(),
            "token_ids": None if r.token_ids is None else r.token_ids.tolist(),
            "logprobs": None if r.logprobs is None else r.logprobs.tolist(),
            "num_clamped": r.num_clamped,
        }
        for r in results
    ]
    assert got == case["results"]


@pytest.mark.parametrize("name", [n for n in FORMATS if n != "fireworks-trace"])
def test_an_id_out_of_range_is_shown_as_the_id_at_the_position_named(name: str) -> None:
    routes = np.zeros((3, 1, 2), dtype=np.uint8)
    routes[1, 0, 0] = 2  # the first id at or above num_experts=2
    routes[2, 0, 1] = 255  # a larger one later
    if name.startswith("fireworks"):
        pytest.importorskip("zstandard")
    wide = routes.astype(np.int32) if name in ("nemo-rl", "json-lists", "sglang") else routes
    with pytest.raises(R3WireError) as caught:
        read_response({"choices": [{"routed_experts": write(wide, name)}]}, num_experts=2, num_layers=1, top_k=2)
    assert caught.value.field is not None
    assert caught.value.field.endswith("[1, 0, 0]")
    assert caught.value.got == "2"
