"""Review 9d: a stated start's rows end at the call's last forwarded token (read_response), an echo is taken only
from a ``logprobs`` value, a hand-built ReadResult holds one logprob per token id, and what is read without token
ids (formats.md, "Whole responses")."""

from __future__ import annotations

import base64
import dataclasses
import io

import numpy as np
import pytest

from r3wire import R3WireError
from r3wire.formats import ReadResult, read_response


def _npy(rows: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, rows)
    return base64.b64encode(buffer.getvalue()).decode()


def _rows(count: int) -> np.ndarray:
    return (np.arange(count * 4) % 16).astype(np.uint8).reshape(count, 2, 2)


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
