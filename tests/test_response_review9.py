"""Review 9d: a stated start's rows end at the call's last forwarded token (read_response), an echo is taken only
from a ``logprobs`` value, a hand-built ReadResult holds one logprob per token id, and what is read without token
ids (formats.md, "Whole responses")."""

from __future__ import annotations

import base64
import dataclasses
import io
from typing import Any

import numpy as np
import pytest

from r3wire import DecodeError, R3WireError
from r3wire.formats import ReadResult, read_response, write


def _npy(rows: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, rows)
    return base64.b64encode(buffer.getvalue()).decode()


def _rows(count: int) -> np.ndarray:
    return (np.arange(count * 4) % 16).astype(np.uint8).reshape(count, 2, 2)


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
