"""The prompt's token ids beside the routes (ReadResult.prompt_token_ids), the whole call they make with the
completion's (ReadResult.call_token_ids), and routes held to fit that call (formats.md, "The call's token ids")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import DecodeError, R3WireError, RouteTrace
from r3wire.formats import ReadResult, read, read_response, write

VECTORS = Path(__file__).parent / "vectors"
CASES: list[dict[str, Any]] = json.loads((VECTORS / "response-prompt-ids-v1.json").read_text(encoding="utf-8"))["cases"]
READS = [c for c in CASES if c.get("verdict") != "reject"]
REJECTS = [c for c in CASES if c.get("verdict") == "reject"]

ROUTES = np.arange(16, dtype=np.uint8).reshape(4, 2, 2) % 8  # 4 rows: a call of 5 tokens, as vLLM sends it


def _call(result: ReadResult) -> list[int] | None:
    try:
        call: list[int] = result.call_token_ids().tolist()
    except R3WireError:
        return None
    return call


@pytest.mark.parametrize("case", READS, ids=[c["name"] for c in READS])
@pytest.mark.parametrize("as_text", [False, True])
def test_vector_bodies_read_to_their_prompt_and_call_ids(case: dict[str, Any], as_text: bool) -> None:
    body = orjson.dumps(case["body"]) if as_text else case["body"]
    results = read_response(body, **case["read_args"])
    assert len(results) == len(case["results"])
    for result, want in zip(results, case["results"], strict=True):
        assert (result.path, result.format) == (want["path"], want["format"])
        assert result.routes.dtype == np.dtype(want["dtype"])
        assert result.routes.tolist() == want["values"]
        assert result.start == want.get("start")
        assert (None if result.token_ids is None else result.token_ids.tolist()) == want["token_ids"]
        assert (None if result.prompt_token_ids is None else result.prompt_token_ids.tolist()) == want[
            "prompt_token_ids"
        ]
        assert _call(result) == want["call_token_ids"]
        assert (None if result.logprobs is None else result.logprobs.tolist()) == want["logprobs"]
        assert result.num_clamped == want["num_clamped"]


@pytest.mark.parametrize("case", REJECTS, ids=[c["name"] for c in REJECTS])
@pytest.mark.parametrize("as_text", [False, True])
def test_vector_bodies_with_bad_prompt_ids_are_refused_at_their_path(case: dict[str, Any], as_text: bool) -> None:
    body = orjson.dumps(case["body"]) if as_text else case["body"]
    with pytest.raises(DecodeError) as info:
        read_response(body, **case["read_args"])
    assert info.value.field == case["field"]
    assert str(info.value) == case["error"]


def test_prompt_ids_are_one_dimensional_int64_and_the_call_is_a_new_array() -> None:
    body = {
        "choices": [{"prompt_token_ids": [1, 2, 3], "token_ids": [4, 5], "routed_experts": write(ROUTES, "vllm-npy")}]
    }
    (result,) = read_response(body)
    assert result.prompt_token_ids is not None
    assert result.token_ids is not None
    assert (result.prompt_token_ids.dtype, result.prompt_token_ids.ndim) == (np.dtype(np.int64), 1)
    call = result.call_token_ids()
    assert (call.dtype, call.tolist()) == (np.dtype(np.int64), [1, 2, 3, 4, 5])
    call[0] = 99  # the caller's own array: the result is unchanged
    assert result.prompt_token_ids.tolist() == [1, 2, 3]


def test_call_token_ids_names_what_is_missing() -> None:
    npy = write(ROUTES, "vllm-npy")
    (generate,) = read_response({"choices": [{"token_ids": [4, 5], "routed_experts": npy}]})  # vLLM generate
    with pytest.raises(R3WireError) as info:
        generate.call_token_ids()
    assert info.value.field == "prompt_token_ids"
    assert "beside the routes at $.choices[0].routed_experts" in str(info.value)
    assert not isinstance(info.value, DecodeError)  # the body is fine; the caller asked for what it lacks
    (chat,) = read_response({"prompt_token_ids": [1, 2, 3], "choices": [{"routed_experts": npy}]})
    with pytest.raises(R3WireError) as info:
        chat.call_token_ids()
    assert info.value.field == "token_ids"
    with pytest.raises(R3WireError) as info:
        read(npy, "vllm-npy").call_token_ids()  # a bare payload carries neither
    assert info.value.field == "prompt_token_ids"
    assert "beside the routes at" not in str(info.value)


def test_a_shared_prompt_reaches_every_choice_and_never_a_sibling_body() -> None:
    npy = write(ROUTES, "vllm-npy")
    chat = {"prompt_token_ids": [1, 2, 3], "choices": [{"token_ids": [4, 5], "routed_experts": npy}] * 2}
    first, second = read_response(chat)
    assert first.call_token_ids().tolist() == second.call_token_ids().tolist() == [1, 2, 3, 4, 5]
    # A batch of bodies: the second body's prompt is its own, never the first's.
    batch = [chat, {"choices": [{"token_ids": [4, 5, 6, 7, 8], "routed_experts": npy}]}]
    results = read_response(batch)
    assert [r.prompt_token_ids is None for r in results] == [False, False, True]
    # Tuples as containers: the same reading.
    tupled = {"prompt_token_ids": [1, 2, 3], "choices": ({"token_ids": [4, 5], "routed_experts": npy},)}
    (result,) = read_response(tupled)
    assert result.call_token_ids().tolist() == [1, 2, 3, 4, 5]


def test_sglang_openai_choice_carries_its_own_prompt_ids() -> None:
    # SGLang's OpenAI chat choice holds prompt_token_ids beside its routes under sgl_ext.
    body = {
        "choices": [
            {
                "index": 0,
                "prompt_token_ids": [1, 2, 3],
                "sgl_ext": {"routed_experts": write(ROUTES.astype(np.int32), "sglang")},
            }
        ]
    }
    (result,) = read_response(body, num_layers=2, top_k=2)
    assert result.prompt_token_ids is not None
    assert result.prompt_token_ids.tolist() == [1, 2, 3]
    assert result.token_ids is None


def test_an_r3wire_dumps_body_carries_prompt_ids_as_an_array() -> None:
    body = r3wire.dumps(
        {
            "prompt_token_ids": np.array([1, 2, 3], dtype=np.int32),
            "choices": [{"token_ids": np.array([4, 5], dtype=np.uint16), "routed_experts": ROUTES}],
        }
    )
    (result,) = read_response(body)
    assert result.call_token_ids().tolist() == [1, 2, 3, 4, 5]
    bad = r3wire.dumps(
        {
            "prompt_token_ids": np.array([0.5], dtype=np.float32),
            "choices": [{"token_ids": [4], "routed_experts": ROUTES}],
        }
    )
    with pytest.raises(DecodeError) as info:
        read_response(bad)
    assert info.value.field == "$.prompt_token_ids"


def test_token_id_lists_are_bounded_by_max_elements() -> None:
    npy = write(ROUTES[:1, :1, :1], "vllm-npy")
    body = {"choices": [{"token_ids": [4, 5, 6], "routed_experts": npy}]}
    with pytest.raises(DecodeError) as info:
        read_response(body, max_elements=2)
    assert info.value.field == "$.choices[0].token_ids"
    assert read_response(body, max_elements=3)[0].token_ids is not None


@pytest.mark.parametrize(
    ("start", "rows", "refusal"),
    [
        (None, 4, None),
        (None, 5, None),
        (None, 6, "start + rows <= 5 tokens"),
        (3, 1, None),
        (2, 2, None),
        (3, 3, "start + rows <= 5 tokens"),
        # prime-rl states its start, and its rows end at the call's last forwarded token: n - 1 - start rows.
        (3, 2, "start + rows = 4 (5 tokens"),
        (1, 2, "start + rows = 4 (5 tokens"),
    ],
)
def test_routes_fit_the_call(start: int | None, rows: int, refusal: str | None) -> None:
    # A call of 5 tokens (3 prompt + 2 completion): start + rows <= 5. vLLM and SGLang send 4 from row 0; prime-rl
    # sends exactly the rows from its start to the call's last forwarded token (start + rows == 4).
    fits = refusal is None
    routes = np.zeros((rows, 2, 2), dtype=np.uint8)
    value = write(routes, "prime-rl", start=start) if start is not None else write(routes, "vllm-npy")
    body = {"choices": [{"prompt_token_ids": [1, 2, 3], "token_ids": [4, 5], "routed_experts": value}]}
    if fits:
        (result,) = read_response(body)
        assert result.routes.shape[0] == rows
        return
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field == "$.choices[0].routed_experts"
    assert refusal is not None
    assert refusal in str(info.value)
    # Without the prompt ids the call's length is unknown: nothing to hold the routes to.
    del body["choices"][0]["prompt_token_ids"]
    assert read_response(body)[0].prompt_token_ids is None


def test_call_token_ids_go_straight_into_a_route_trace() -> None:
    # Turn 1 (vLLM chat, return_token_ids): every row of the call; the trace places them from the end.
    prompt, reply = [101, 7, 42], [55, 56]
    full = np.arange((len(prompt) + len(reply) - 1) * 4, dtype=np.uint8).reshape(-1, 2, 2) % 8
    body = {"prompt_token_ids": prompt, "choices": [{"token_ids": reply, "routed_experts": write(full, "vllm-npy")}]}
    (turn,) = read_response(orjson.dumps(body))
    trace = RouteTrace(num_experts=8)
    trace.add(turn.routes, start=turn.start, token_ids=turn.call_token_ids())
    assert trace.rows == len(prompt) + len(reply) - 1
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == prompt + reply


@pytest.mark.parametrize(
    ("ids", "index"),
    [([-1, -12, 13], 0), ([2**63, 2**64 - 1, 3], 0), ([5, 2**63, -1], 1), ([1, 2, -3], 2), ([2**63, 12.0, 3], 0)],
)
def test_a_bad_token_id_list_names_its_first_bad_id(ids: list[Any], index: int) -> None:
    routes = r3wire.encode_routes(ROUTES[:1])
    with pytest.raises(DecodeError) as caught:
        read_response({"choices": [{"prompt_token_ids": ids, "token_ids": [1, 2], "routed_experts": routes}]})
    assert caught.value.field == f"$.choices[0].prompt_token_ids[{index}]"
    assert caught.value.got == str(ids[index])


@pytest.mark.parametrize("order", ["<", ">"])
def test_a_uint64_id_past_int64_is_refused_in_either_byte_order(order: str) -> None:
    # A big-endian '>u8' array is no np.uint64: tested by dtype identity, 2**64 - 1 was wrapped to -1 in silence.
    result = ReadResult(
        routes=np.zeros((3, 1, 1), np.int32),
        mask=None,
        token_ids=np.array([2**64 - 1], dtype=f"{order}u8"),
        prompt_token_ids=np.array([5, 6], dtype=f"{order}u8"),
        format="x",
    )
    message = r"token_ids\[0\] must be a token id <= 9223372036854775807, got 18446744073709551615$"
    with pytest.raises(R3WireError, match=r"^ReadResult\." + message):
        result.call_token_ids()
    with pytest.raises(R3WireError, match=r"^result\." + message):
        RouteTrace().add_result(result)


@pytest.mark.parametrize("dtype", [">u8", ">i8", "<u8", "<i8"])
def test_wide_token_ids_in_range_are_read_in_either_byte_order(dtype: str) -> None:
    result = ReadResult(
        routes=np.zeros((3, 1, 1), np.int32),
        mask=None,
        token_ids=np.array([2**63 - 1], dtype=dtype),
        prompt_token_ids=np.array([5, 6], dtype=dtype),
        format="x",
    )
    call = result.call_token_ids()
    assert (call.dtype, call.tolist()) == (np.dtype(np.int64), [5, 6, 2**63 - 1])


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (
            np.array([1, 2**64 - 1], ">u8"),
            r"^output\.token_ids\[1\] must be a token id below 2\*\*63, got 18446744073709551615$",
        ),
        (np.array([3, -1], ">i8"), r"^output\.token_ids\[1\] must be a non-negative token id, got -1$"),
    ],
)
def test_the_vllm_adapter_reads_big_endian_token_ids_by_value(ids: Any, message: str) -> None:
    from r3wire.vllm import encode_completion  # imports no vLLM: a duck-typed completion is enough

    completion = type("Completion", (), {"token_ids": ids, "logprobs": None, "routed_experts": None})()
    with pytest.raises(r3wire.EncodeError, match=message):
        encode_completion(completion)
