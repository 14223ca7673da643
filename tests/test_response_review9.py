"""Review 9d: a stated start's rows end at the call's last forwarded token (read_response), an echo is taken only
from a ``logprobs`` value, a hand-built ReadResult holds one logprob per token id, and what is read without token
ids (formats.md, "Whole responses")."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from r3wire import DecodeError, R3WireError
from r3wire.formats import ReadResult, read_response, write

# Published vectors for these rules, also read by the JavaScript reference (tests/js/run_vectors.mjs).
VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "vectors" / "response-stated-start-v1.json").read_text(encoding="utf-8")
)["cases"]
READS = [c for c in VECTORS if c.get("verdict") != "reject"]
REJECTS = [c for c in VECTORS if c.get("verdict") == "reject"]


@pytest.mark.parametrize("case", READS, ids=[c["name"] for c in READS])
@pytest.mark.parametrize("as_text", [False, True])
def test_vector_bodies_read_to_their_results(case: dict[str, Any], as_text: bool) -> None:
    body = orjson.dumps(case["body"]) if as_text else case["body"]
    results = read_response(body, **case["read_args"])
    assert len(results) == len(case["results"])
    for result, want in zip(results, case["results"], strict=True):
        assert (result.path, result.format, str(result.routes.dtype)) == (want["path"], want["format"], want["dtype"])
        assert result.routes.tolist() == want["values"]
        assert result.start == want.get("start")
        assert (None if result.token_ids is None else result.token_ids.tolist()) == want["token_ids"]
        prompt = None if result.prompt_token_ids is None else result.prompt_token_ids.tolist()
        assert prompt == want["prompt_token_ids"]
        assert (None if result.logprobs is None else result.logprobs.tolist()) == want["logprobs"]
        assert result.num_clamped == want["num_clamped"]


@pytest.mark.parametrize("case", REJECTS, ids=[c["name"] for c in REJECTS])
@pytest.mark.parametrize("as_text", [False, True])
def test_vector_bodies_are_refused_at_their_field(case: dict[str, Any], as_text: bool) -> None:
    body = orjson.dumps(case["body"]) if as_text else case["body"]
    with pytest.raises(DecodeError) as info:
        read_response(body, **case["read_args"])
    assert info.value.field == case["field"]
    assert str(info.value) == case["error"]


def _npy(rows: np.ndarray[Any, Any]) -> str:
    buffer = io.BytesIO()
    np.save(buffer, rows)
    return base64.b64encode(buffer.getvalue()).decode()


def _rows(count: int) -> np.ndarray[Any, Any]:
    return (np.arange(count * 4) % 16).astype(np.uint8).reshape(count, 2, 2)


# --- 1. a start the payload states: rows end at the call's last forwarded token --------------------------------


@pytest.mark.parametrize(("start", "rows"), [(0, 5), (1, 4), (4, 1), (5, 0)])
def test_prime_rl_rows_ending_at_the_last_forwarded_token_are_read(start: int, rows: int) -> None:
    # A call of 6 tokens (3 prompt + 3 completion): prime-rl sends n - 1 - start rows, ending at position 4.
    body = {
        "prompt_token_ids": [1, 2, 3],
        "choices": [{"token_ids": [4, 5, 6], "routed_experts": write(_rows(rows), "prime-rl", start=start)}],
    }
    (result,) = read_response(body)
    assert (result.start, result.routes.shape[0]) == (start, rows)


@pytest.mark.parametrize(("start", "rows"), [(1, 2), (2, 4), (0, 4), (6, 0), (3, 1)])
def test_prime_rl_rows_that_miss_the_last_forwarded_token_are_refused(start: int, rows: int) -> None:
    # One too far (a row for the last sampled token, which no engine forwards), or short of it: a stated start
    # that is off, or rows that stop early, would put rows against other tokens.
    body = {
        "prompt_token_ids": [1, 2, 3],
        "choices": [{"token_ids": [4, 5, 6], "routed_experts": write(_rows(rows), "prime-rl", start=start)}],
    }
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field == "$.choices[0].routed_experts"
    assert str(info.value) == (
        "$.choices[0].routed_experts must be rows that end at the call's last forwarded token: start + rows = 5 "
        "(6 tokens: 3 at $.prompt_token_ids + 3 at $.choices[0].token_ids; prime-rl states its start, and its rows "
        f"run from it to the call's last forwarded token, n - 1), got start {start} + {rows} rows = {start + rows}"
    )


def test_prime_rl_with_a_null_start_is_held_to_it_as_zero() -> None:
    # prime-rl reads a null start as 0 (as verifiers does): the rows are then the whole call's, n - 1 of them.
    payload = {**write(_rows(4), "prime-rl"), "start": None}
    body = {"choices": [{"prompt_token_ids": [1, 2], "token_ids": [3, 4, 5], "routed_experts": payload}]}
    assert read_response(body)[0].start == 0
    body["choices"][0]["token_ids"] = [3, 4, 5, 6]  # 6 tokens: 5 rows from 0
    with pytest.raises(DecodeError, match=r"start \+ rows = 5 .*got start 0 \+ 4 rows = 4") as info:
        read_response(body)
    assert info.value.field == "$.choices[0].routed_experts"


def test_dynamo_nvext_prime_rl_object_is_held_alike() -> None:
    # dynamo's vLLM backend forwards prime-rl's object; a body giving both ids holds it to the same end.
    body: dict[str, Any] = {
        "prompt_token_ids": [1, 2, 3],
        "token_ids": [4, 5],
        "nvext": {"routed_experts": write(_rows(2), "prime-rl", start=1)},
    }
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field == "$.nvext.routed_experts"
    assert "start + rows = 4 (5 tokens" in str(info.value)
    body["nvext"]["routed_experts"] = write(_rows(2), "prime-rl", start=2)
    assert read_response(body)[0].start == 2


def test_without_both_ids_a_stated_start_is_not_held_to_an_end() -> None:
    # The call's length is unknown without the prompt's ids (prime-rl's own generate body): nothing to check.
    body = {"choices": [{"token_ids": [4, 5, 6], "routed_experts": write(_rows(2), "prime-rl", start=1)}]}
    assert read_response(body)[0].start == 1


def test_formats_without_a_stated_start_keep_the_bound() -> None:
    # vLLM's rows carry no start: n - 1 from 0 (or fewer, a prompt start the caller asked for), at most n.
    for rows in (2, 5, 6):
        body = {
            "prompt_token_ids": [1, 2, 3],
            "choices": [{"token_ids": [4, 5, 6], "routed_experts": _npy(_rows(rows))}],
        }
        assert read_response(body)[0].routes.shape[0] == rows


def test_fireworks_suffix_ends_at_the_last_forwarded_token() -> None:
    # r3/v1 indexes a matrix by the token it produced: a SUFFIX's rows run to the call's last forwarded token, n - 1,
    # like every engine's (a row at the last token, n, was accepted while r3/v1 was read one token late).
    pytest.importorskip("zstandard")
    for start, rows, fits in ((2, 3, True), (0, 5, True), (2, 2, False), (3, 1, False)):
        value = write(_rows(rows), "fireworks-r3v1", start=start, total_tokens=6)
        body = {"prompt_token_ids": [1, 2, 3], "token_ids": [4, 5, 6], "routing": {"routed_experts": value}}
        if fits:
            assert read_response(body, num_layers=2, top_k=2)[0].start == start
            continue
        with pytest.raises(DecodeError) as info:
            read_response(body, num_layers=2, top_k=2)
        assert info.value.field == "$.routing.routed_experts"
        assert "last forwarded token: start + rows = 5 (6 tokens" in str(info.value)


# --- 3. an echo comes only from a `logprobs` value ---------------------------------------------------------------


def test_sglang_output_token_logprobs_are_never_an_echo() -> None:
    # SGLang has no echo: five entries for two output ids are refused, not cut to the last two.
    entries = [[-0.1, 99, None], [-0.2, 98, None], [-0.3, 97, None], [-0.4, 4, None], [-0.5, 5, None]]
    body: dict[str, Any] = {
        "output_ids": [4, 5],
        "prompt_token_ids": [1, 2, 3],
        "meta_info": {"routed_experts": write(_rows(4).astype(np.int32), "sglang"), "output_token_logprobs": entries},
    }
    with pytest.raises(DecodeError) as info:
        read_response(body, num_layers=2, top_k=2)
    assert info.value.field == "$.meta_info.output_token_logprobs"
    assert str(info.value) == (
        "$.meta_info.output_token_logprobs must be one logprob per token id (2 at $.output_ids), got 5 logprobs"
    )
    body["meta_info"]["output_token_logprobs"] = entries[3:]
    logprobs = read_response(body, num_layers=2, top_k=2)[0].logprobs
    assert logprobs is not None
    assert logprobs.tolist() == [-0.4, -0.5]


def test_a_vllm_completions_echo_is_still_read() -> None:
    choice = {
        "prompt_token_ids": [1, 2, 3],
        "token_ids": [4, 5],
        "logprobs": {"token_logprobs": [None, -1.0, -2.0, -0.5, -0.25]},
        "routed_experts": _npy(_rows(4)),
    }
    (result,) = read_response({"choices": [choice]})
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-0.5, -0.25]
    assert result.num_clamped == 0


# --- 4. a hand-built ReadResult holds one logprob per token id ---------------------------------------------------


def test_read_result_refuses_logprobs_that_are_not_one_per_token_id() -> None:
    with pytest.raises(R3WireError) as info:
        ReadResult(
            routes=np.zeros((4, 2, 2), np.uint8),
            format="vllm-npy",
            token_ids=np.array([4, 5]),
            prompt_token_ids=np.array([1, 2, 3]),
            logprobs=np.array([-1.0, -2.0, -3.0]),
        )
    assert info.value.field == "ReadResult.logprobs"
    assert info.value.expected == "one logprob per token id (2 in ReadResult.token_ids)"
    assert info.value.got == "3 logprobs"
    # Either alone, or both of one length, is a result.
    for token_ids, logprobs in ((np.array([4, 5]), None), (None, np.array([-1.0, -2.0, -3.0]))):
        ReadResult(routes=np.zeros((1, 2, 2), np.uint8), format="vllm-npy", token_ids=token_ids, logprobs=logprobs)
    ReadResult(routes=np.zeros((1, 2, 2), np.uint8), format="x", token_ids=np.array([4]), logprobs=np.array([-1.0]))


def test_replace_of_a_read_result_is_checked_too() -> None:
    body = {"choices": [{"token_ids": [4, 5], "logprobs": [-0.5, -0.25], "routed_experts": _npy(_rows(2))}]}
    (result,) = read_response(body)
    with pytest.raises(R3WireError, match=r"ReadResult\.logprobs must be one logprob per token id"):
        dataclasses.replace(result, token_ids=np.array([4, 5, 6]))


# --- 5. without token ids, an echo's logprobs are returned as read -----------------------------------------------


def test_an_echo_without_token_ids_is_returned_as_read() -> None:
    # vLLM sends token_ids and prompt_token_ids as null without return_token_ids: nothing tells the prompt's
    # logprobs from the sampled ones, so all of them are returned (formats.md, "Echo").
    choice = {
        "prompt_token_ids": None,
        "token_ids": None,
        "logprobs": {"token_logprobs": [None, -1.0, -2.0, -0.5, -0.25]},
        "routed_experts": _npy(_rows(4)),
    }
    (result,) = read_response({"choices": [choice]})
    assert result.token_ids is None
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-9999.0, -1.0, -2.0, -0.5, -0.25]
    assert result.num_clamped == 1


# --- 2. token ids under keys r3wire does not read ------------------------------------------------------------------


def test_nemo_rl_generation_token_ids_are_not_read_and_the_error_says_so() -> None:
    # formats.md, "The call's token ids", *Not read*: the message's prompt ids are read, its generation_token_ids /
    # generation_log_probs are not (no NVIDIA-NeMo/RL commit pinned); the error names them instead of only vLLM's.
    message = {
        "role": "assistant",
        "content": "a",
        "routed_experts": write(_rows(4).astype(np.int8), "nemo-rl"),
        "prompt_token_ids": [1, 2, 3],
        "generation_token_ids": [7, 8],
        "generation_log_probs": [-0.1, -0.2],
    }
    (result,) = read_response({"choices": [{"index": 0, "finish_reason": "stop", "message": message}]})
    assert result.prompt_token_ids is not None
    assert result.prompt_token_ids.tolist() == [1, 2, 3]
    assert result.token_ids is None
    assert result.logprobs is None
    with pytest.raises(R3WireError) as info:
        result.call_token_ids()
    assert info.value.field == "token_ids"
    assert "NeMo-RL's message generation_token_ids" in str(info.value)


def test_rllm_prompt_and_completion_ids_are_not_read() -> None:
    body = {
        "prompt_ids": [1, 2],
        "completion_ids": [3],
        "logprobs": [-0.5],
        "routing_matrices": [None, "AQIDBA==", "BQYHAA=="],
    }
    (result,) = read_response(body, num_layers=2, top_k=2)
    assert result.token_ids is None
    assert result.prompt_token_ids is None
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-0.5]
    with pytest.raises(R3WireError) as info:
        result.call_token_ids()
    assert info.value.field == "prompt_token_ids"
    assert "rLLM's prompt_ids" in str(info.value)
