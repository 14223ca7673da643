"""Property: a multi-turn trajectory recorded from engine response bodies alone (``RouteTrace.add_result``) holds,
in every row some call replayed, exactly the routing of its token, and batches (``pad_routes`` / ``pack_routes`` of
the trace itself) with every other row masked; a call whose given tokens disagree with its body is refused without
changing the trace."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any, Literal

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import R3WireError, RouteTrace, formats, pack_routes, pad_routes

pytestmark = pytest.mark.property

Array = np.ndarray[Any, Any]
EXPERTS = 16
FORMS = ("vllm", "prime-rl", "sglang", "nemo-rl")


def _body(form: str, prompt: list[int], completion: list[int], rows: Array, start: int) -> bytes:
    if form == "vllm":
        choice = {"index": 0, "token_ids": completion, "routed_experts": formats.write(rows, format="vllm-npy")}
        return orjson.dumps({"choices": [choice], "prompt_token_ids": prompt})
    if form == "prime-rl":
        sidecar = formats.write(rows, format="prime-rl", start=start)
        return orjson.dumps({"choices": [{"index": 0, "token_ids": completion, "routed_experts": sidecar}]})
    if form == "sglang":
        meta = {"routed_experts": formats.write(rows.astype(np.int32), format="sglang")}
        return orjson.dumps({"output_ids": completion, "meta_info": meta, "prompt_token_ids": prompt})
    message = {"routed_experts": formats.write(rows, format="nemo-rl")}
    choice = {"index": 0, "message": message, "token_ids": completion}
    return orjson.dumps({"choices": [choice], "prompt_token_ids": prompt})


# A trajectory's shape and seed, and the calls it is cut into (drawn in the test).
_TRAJECTORIES = given(
    layers=st.integers(1, 3),
    top_k=st.integers(1, 3),
    length=st.integers(2, 24),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)


def _trajectory(layers: int, top_k: int, length: int, seed: int) -> tuple[list[int], Array, RouteTrace, Array]:
    """Its tokens, each row's true routing (the last token is never routed), an empty trace, no row replayed."""
    rng = np.random.default_rng(seed)
    tokens: list[int] = rng.integers(0, 50_000, length).tolist()
    truth = rng.integers(0, EXPERTS, (length - 1, layers, top_k)).astype(np.uint8)
    return tokens, truth, RouteTrace(num_experts=EXPERTS), np.zeros(length - 1, dtype=bool)


@_TRAJECTORIES
def test_a_trajectory_from_bodies_replays_each_rows_own_routing(
    layers: int, top_k: int, length: int, seed: int, data: st.DataObject
) -> None:
    tokens, truth, trace, replayed = _trajectory(layers, top_k, length, seed)
    end = 1
    while end < length:
        end = data.draw(st.integers(end + 1, length), label="call tokens")
        prompt_len = data.draw(st.integers(1, end), label="prompt tokens")
        prompt, completion = tokens[:prompt_len], tokens[prompt_len:end]
        form = data.draw(st.sampled_from(FORMS), label="form")
        # Full forms send every forwarded row; delta forms the rows from some start up to what is recorded.
        start = 0 if form in ("vllm", "nemo-rl") else data.draw(st.integers(0, trace.rows), label="start")
        rows = truth[start : end - 1]
        sent = np.ones(rows.shape[0], dtype=bool)
        if form == "nemo-rl":
            sent = np.array(data.draw(st.lists(st.booleans(), min_size=rows.shape[0], max_size=rows.shape[0])), bool)
            rows = rows.astype(np.int16)
            rows[~sent] = -1  # NeMo-RL's "no route recorded", in every slot of every layer
        body = _body(form, prompt, completion, rows, start)
        if form == "sglang":
            [result] = formats.read_response(body, num_layers=layers, top_k=top_k)
        else:
            [result] = formats.read_response(body)
        given_tokens = tokens[:end] if form == "prime-rl" else None
        if given_tokens is not None and completion and data.draw(st.booleans(), label="corrupt"):
            wrong = list(given_tokens)
            at = data.draw(st.integers(prompt_len, end - 1), label="corrupted position")
            wrong[at] += 1
            before = (trace.rows, None if trace.token_ids is None else trace.token_ids.tolist(), trace.conflicts)
            with pytest.raises(R3WireError) as caught:
                trace.add_result(result, token_ids=wrong)
            assert caught.value.field == f"token_ids[{at}]"
            after = (trace.rows, None if trace.token_ids is None else trace.token_ids.tolist(), trace.conflicts)
            assert after == before
        trace.add_result(result, token_ids=given_tokens)
        replayed[start : end - 1] |= sent
    routes, captured = trace.finalize()
    assert captured == length - 1 == routes.shape[0]
    assert trace.conflicts == 0
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == tokens
    recorded = trace.replayed
    assert (np.ones(length - 1, bool) if recorded is None else recorded).tolist() == replayed.tolist()
    assert np.array_equal(routes[replayed], truth[replayed])
    # The trace as a batch sample: its token count and replayed rows come with it, on pad_routes' layout.
    side: Literal["left", "right"] = data.draw(st.sampled_from(["left", "right"]), label="side")
    max_len = length + data.draw(st.integers(0, 3), label="extra padding")
    padded, mask = pad_routes([trace], side=side, max_len=max_len, num_experts=EXPERTS)
    first = max_len - length if side == "left" else 0
    assert mask[0].tolist() == [True] * first + (~replayed).tolist() + [True] * (max_len - first - length + 1)
    assert np.array_equal(padded[0, first : first + length - 1][replayed], truth[replayed])
    flat, cu_seqlens, packed_mask = pack_routes([trace, trace], token_lengths=[length] * 2, num_experts=EXPERTS)
    assert cu_seqlens.tolist() == [0, length, 2 * length]
    assert packed_mask.tolist() == 2 * [*(~replayed).tolist(), True]
    assert np.array_equal(flat[:length][~packed_mask[:length]], truth[replayed])


# Fireworks payloads carry no token ids and no start. Where their rows are positions from 0 (r3/v1 ALL and
# BITMAP) the rows go there whatever token_ids the caller gives (review 9a, 3). A per-token matrices list says
# nothing of where it starts (Fireworks makes it from token 0 or for the completion only, review 11b): without
# start=, it is placed from token 0 only when it has an entry for each forwarded token of the call.
FIREWORKS = ("fireworks-matrices", *(("fireworks-r3v1", "fireworks-trace") if find_spec("zstandard") else ()))


def _state(trace: RouteTrace) -> tuple[object, ...]:
    return (trace.rows, None if trace.token_ids is None else trace.token_ids.tolist(), trace.conflicts)


@_TRAJECTORIES
def test_fireworks_rows_land_at_their_tokens_or_are_refused(
    layers: int, top_k: int, length: int, seed: int, data: st.DataObject
) -> None:
    tokens, truth, trace, replayed = _trajectory(layers, top_k, length, seed)
    end = 1
    while end < length:
        end = data.draw(st.integers(end + 1, length), label="call tokens")
        rows = truth[: end - 1]
        form = data.draw(st.sampled_from(("vllm", *FIREWORKS)), label="form")
        if form == "vllm":  # placed from the end of the call's own tokens
            prompt_len = data.draw(st.integers(1, end), label="prompt tokens")
            [result] = formats.read_response(_body(form, tokens[:prompt_len], tokens[prompt_len:end], rows, 0))
            trace.add_result(result)
            replayed[: end - 1] = True
            continue
        sent = np.array(data.draw(st.lists(st.booleans(), min_size=end - 1, max_size=end - 1)), dtype=bool)
        masked = data.draw(st.booleans(), label="masked")
        payload = formats.write(rows, format=form, mask=sent if masked else None)
        result = formats.read(payload, format=form, num_layers=layers, top_k=top_k)
        # r3wire writes r3/v1 rows from 0 without a mask as SUFFIX from token 1 (start 0), with one as BITMAP.
        assert result.start == (0 if form != "fireworks-matrices" and not masked else None)
        # Any token count: fewer than the payload needs is refused (the trace unchanged): r3/v1 counts the call's
        # end tokens (total_tokens), and a matrices list has no entry for the last token, which no forward pass
        # read (one that reaches it still holds token 0's entry: refused, naming start). More (the whole
        # trajectory so far, or all of it) puts row i at position i: always for r3/v1, and for a matrices list
        # with start=0.
        least = end
        given_count = data.draw(st.integers(0, length), label="tokens given")
        explicit = data.draw(st.booleans(), label="start=0")
        matrices_refused = form == "fireworks-matrices" and not explicit and given_count != end
        if given_count < least or matrices_refused:
            before = _state(trace)
            start = 0 if explicit else None
            with pytest.raises(R3WireError) as caught:
                trace.add_result(result, token_ids=tokens[:given_count], start=start)
            short = end - 1 if form == "fireworks-matrices" else end  # fewer tokens than that cannot hold the rows
            assert caught.value.field == ("token_ids" if given_count < short else "start")
            assert _state(trace) == before
            given_count = (
                end
                if form == "fireworks-matrices" and not explicit
                else data.draw(st.integers(least, length), label="tokens given")
            )
        trace.add_result(result, token_ids=tokens[:given_count], start=0 if explicit else None)
        replayed[: end - 1] |= sent if masked else True
    routes, captured = trace.finalize(length)
    assert captured == length - 1
    assert trace.conflicts == 0
    recorded_tokens = trace.token_ids
    assert recorded_tokens is not None
    assert recorded_tokens.tolist() == tokens[: len(recorded_tokens)]
    assert np.array_equal(routes[replayed], truth[replayed])


@_TRAJECTORIES
def test_a_completion_only_matrices_list_lands_at_the_prompts_last_token(
    layers: int, top_k: int, length: int, seed: int, data: st.DataObject
) -> None:
    # Fireworks' completions without echo return one routing matrix per completion token: the routing of the
    # forward pass that sampled it, which ran at the token before. Its rows start at len(prompt) - 1 (review 11b).
    tokens, truth, trace, _ = _trajectory(layers, top_k, length, seed)
    prompt = data.draw(st.integers(1, length - 1), label="prompt tokens")
    completion = truth[prompt - 1 : length - 1]  # one entry per completion token
    payload = formats.write(completion, format="fireworks-matrices")
    result = formats.read(payload, format="fireworks-matrices", num_layers=layers, top_k=top_k)
    if prompt > 1:  # from token 0 the rows would sit on prompt tokens: refused, naming the start to pass
        with pytest.raises(R3WireError) as caught:
            trace.add_result(result, token_ids=tokens)
        assert caught.value.field == "start"
        assert "start=len(prompt_token_ids) - 1" in str(caught.value)
        assert trace.rows == 0
        trace.add_result(_head(truth, prompt - 1, layers, top_k), start=0, token_ids=tokens[:prompt])
    trace.add_result(result, start=prompt - 1, token_ids=tokens)
    routes, captured = trace.finalize()
    assert captured == length - 1
    assert trace.conflicts == 0
    assert np.array_equal(routes, truth[: length - 1])


def _head(truth: np.ndarray[Any, Any], rows: int, layers: int, top_k: int) -> formats.ReadResult:
    """The prompt's rows as a matrices list from token 0."""
    return formats.read(
        formats.write(truth[:rows], format="fireworks-matrices"),
        format="fireworks-matrices",
        num_layers=layers,
        top_k=top_k,
    )
