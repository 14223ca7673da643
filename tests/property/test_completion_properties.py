"""Property tests for the vLLM completion fragment: decode_completion's fuzzing promise (no vllm needed), and
the vectorised FlatLogprobs reader agreeing with vLLM's own per-position view (vllm needed).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_VALUES, corrupted, decoded_or_none
from hypothesis import given
from hypothesis import strategies as st

from r3wire import encode_logprobs, encode_routes
from r3wire.vllm import Completion, decode_completion

pytestmark = pytest.mark.property


def _valid() -> dict[str, Any]:
    return {
        "token_ids": [5, 6, 7],
        "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -1.0}, {"logprob": -9999.0}]},
        "routed_experts": encode_routes(np.array([[[1, 0]], [[3, 2]]], dtype=np.uint8), num_experts=4),
    }


FIELD_VALUES = st.one_of(
    JSON_VALUES,
    st.just(encode_logprobs([-1.0, -2.0, -3.0])),
    st.just(encode_logprobs([-1.0])),
    st.just({"content": [None, {}, {"logprob": None}]}),
    st.lists(st.integers(-3, 2**64), max_size=4),
)


@st.composite
def mutated_fragments(draw: st.DrawFn) -> Any:
    fragment: dict[str, Any] = _valid()
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(["token_ids", "logprobs", "routed_experts", "text"]))
        if draw(st.booleans()):
            fragment.pop(key, None)
        else:
            fragment[key] = draw(FIELD_VALUES)
    if draw(st.booleans()):
        return json.dumps(fragment).encode()  # stdlib: it also writes integers beyond 64 bits
    return fragment


def _only_decode_error(payload: Any) -> None:
    result = decoded_or_none(lambda: decode_completion(payload, num_experts=4))
    if result is None:
        return
    assert isinstance(result, Completion)
    n = len(result.token_ids)
    assert result.logprobs is None or (len(result.logprobs) == n and np.isfinite(result.logprobs).all())


@given(mutated_fragments())
def test_mutated_fragments_raise_only_decode_error(payload: Any) -> None:
    _only_decode_error(payload)


@given(st.one_of(JSON_VALUES, st.binary(max_size=64)))
def test_arbitrary_values_raise_only_decode_error(payload: Any) -> None:
    _only_decode_error(payload)


@given(st.binary(max_size=40), st.integers(0, 120))
def test_corrupted_json_text_raises_only_decode_error(noise: bytes, where: int) -> None:
    _only_decode_error(corrupted(orjson.dumps(_valid()), noise, where))


LOGPROB_VALUES = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.sampled_from([math.nan, -math.inf, math.inf, -0.0, None]),
)


@st.composite
def flat_positions(draw: st.DrawFn) -> tuple[list[int], list[dict[int, Any] | None]]:
    n = draw(st.integers(0, 12))
    tokens = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    positions: list[dict[int, Any] | None] = []
    for _ in tokens:
        if draw(st.booleans()) and draw(st.booleans()):
            positions.append(draw(st.sampled_from([None, {}])))
            continue
        ids = draw(st.lists(st.integers(0, 6), max_size=5))
        positions.append({i: draw(LOGPROB_VALUES) for i in ids})
    return tokens, positions


@given(flat_positions())
def test_flat_reader_agrees_with_vllm_indexing(case: tuple[list[int], list[dict[int, Any] | None]]) -> None:
    logprobs: Any = pytest.importorskip("vllm.logprobs")
    outputs: Any = pytest.importorskip("vllm.outputs")
    from r3wire.vllm import sampled_logprobs

    tokens, raw = case
    flat = logprobs.FlatLogprobs()
    flat.extend([None if p is None else {i: logprobs.Logprob(logprob=v, rank=1) for i, v in p.items()} for p in raw])
    out = outputs.CompletionOutput(index=0, text="", token_ids=tokens, cumulative_logprob=None, logprobs=flat)
    result = sampled_logprobs(out)
    assert result is not None
    expected: list[float] = []
    missing = 0
    for i, token in enumerate(tokens):
        entry = flat[i].get(token)
        value = None if entry is None else entry.logprob
        if value is None or not math.isfinite(value):
            missing += 1
            value = -9999.0
        expected.append(value)
    assert [np.float64(v).tobytes() for v in result.values.tolist()] == [np.float64(v).tobytes() for v in expected]
    assert result.num_clamped == missing
