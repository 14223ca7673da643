"""``RouteTrace.add_result``: one read engine response recorded with every argument taken from it; traces as
``pad_routes`` / ``pack_routes`` samples."""

from __future__ import annotations

import base64
import tracemalloc
from typing import Any, Literal

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import R3WireError, RouteTrace, formats, pack_routes, pad_routes, pad_sequences

LAYERS, TOP_K, EXPERTS = 3, 2, 16
TOKENS = list(range(100, 116))
RNG = np.random.default_rng(7)
# The routing of every position of TOKENS: row p is the routing that produced token p + 1.
TRUTH = np.stack([np.stack([RNG.permutation(EXPERTS)[:TOP_K] for _ in range(LAYERS)]) for _ in TOKENS]).astype(np.uint8)


def vllm_chat(prompt: list[int], completion: list[int], rows: Any = None) -> bytes:
    """vLLM chat with return_token_ids: every forwarded row as a base64 .npy, the prompt's ids at the top."""
    n = len(prompt) + len(completion)
    routes = TRUTH[: n - 1] if rows is None else rows
    choice = {"index": 0, "token_ids": completion, "routed_experts": formats.write(routes, format="vllm-npy")}
    return orjson.dumps({"choices": [choice], "prompt_token_ids": prompt})


def prime_rl(prompt: list[int], completion: list[int], start: int) -> bytes:
    """prime-rl generate: a sidecar with the rows from ``start`` on; no prompt ids in the body."""
    n = len(prompt) + len(completion)
    sidecar = formats.write(TRUTH[start : n - 1], format="prime-rl", start=start)
    return orjson.dumps({"choices": [{"index": 0, "token_ids": completion, "routed_experts": sidecar}]})


def nemo_rl(prompt: list[int], completion: list[int], routes: Any) -> bytes:
    choice = {"index": 0, "message": {"routed_experts": formats.write(routes, format="nemo-rl")}}
    return orjson.dumps({"choices": [choice | {"token_ids": completion}], "prompt_token_ids": prompt})


def sglang(prompt: list[int], output: list[int], rows: Any) -> bytes:
    meta = {"routed_experts": formats.write(rows, format="sglang")}
    return orjson.dumps({"output_ids": output, "meta_info": meta, "prompt_token_ids": prompt})


def one(body: bytes, **kwargs: Any) -> formats.ReadResult:
    [result] = formats.read_response(body, **kwargs)
    return result


def test_a_multi_turn_trajectory_from_bodies_alone() -> None:
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(one(vllm_chat(TOKENS[:5], TOKENS[5:8])))  # rows 0 .. 6, placed from the end
    assert trace.rows == 7
    # prime-rl's body lacks the prompt's ids: the caller gives the call's sequence, checked against the body's
    # completion ids; its start (7) comes from the sidecar.
    trace.add_result(one(prime_rl(TOKENS[:10], TOKENS[10:12], start=7)), token_ids=TOKENS[:12])
    routes, captured = trace.finalize()
    assert captured == 11
    assert trace.conflicts == 0
    assert np.array_equal(routes, TRUTH[:11])
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == TOKENS[:12]


def test_the_same_as_add_wired_by_hand() -> None:
    result = one(vllm_chat(TOKENS[:6], TOKENS[6:9]))
    by_hand = RouteTrace(num_experts=EXPERTS)
    by_hand.add(result.routes, start=result.start, token_ids=result.call_token_ids(), replayed=result.mask)
    taken = RouteTrace(num_experts=EXPERTS)
    taken.add_result(result)
    assert np.array_equal(taken.finalize()[0], by_hand.finalize()[0])
    assert taken.token_ids is not None
    assert by_hand.token_ids is not None
    assert np.array_equal(taken.token_ids, by_hand.token_ids)


def test_a_body_without_the_prompts_ids_needs_token_ids() -> None:
    result = one(prime_rl(TOKENS[:4], TOKENS[4:6], start=0))
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(result)
    assert caught.value.field == "token_ids"
    assert "a response without prompt_token_ids" in str(caught.value)


def test_given_token_ids_must_end_with_the_bodys_completion() -> None:
    result = one(prime_rl(TOKENS[:4], TOKENS[4:6], start=0))
    trace = RouteTrace()
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=[*TOKENS[:4], 7, TOKENS[5]])  # the completion's first token differs
    assert caught.value.field == "token_ids[4]"
    assert str(caught.value.expected).startswith(f"{TOKENS[4]}, the response's completion token 0")
    assert caught.value.got == "7"
    with pytest.raises(R3WireError, match="ending with the response's 2 completion token ids"):
        trace.add_result(result, token_ids=[TOKENS[5]])
    assert trace.rows == 0
    assert trace.token_ids is None


def test_given_token_ids_must_equal_the_bodys_own_where_it_carries_both() -> None:
    result = one(vllm_chat(TOKENS[:5], TOKENS[5:8]))
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(result, token_ids=[*TOKENS[:2], 1, *TOKENS[3:8]])  # a wrong prompt joined
    assert caught.value.field == "token_ids[2]"
    assert caught.value.got == "1"
    with pytest.raises(R3WireError, match=r"token_ids must be 8 token ids .* got 9 token ids"):
        RouteTrace().add_result(result, token_ids=[*TOKENS[:8], 5])
    trace = RouteTrace()
    trace.add_result(result, token_ids=np.array(TOKENS[:8], dtype=np.uint32))  # equal: accepted
    assert trace.rows == 7


def test_start_comes_from_the_result_or_the_caller_not_both_disagreeing() -> None:
    # A prefill node routes every prompt token: its rows need an explicit start.
    prefill = one(sglang(TOKENS[:5], [], TRUTH[:5].astype(np.int32)), num_layers=LAYERS, top_k=TOP_K)
    trace = RouteTrace(num_experts=EXPERTS)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(prefill)
    assert caught.value.field == "routes"
    assert "need start=" in str(caught.value)
    trace.add_result(prefill, start=0)
    decode = one(sglang(TOKENS[:5], TOKENS[5:9], TRUTH[5:8].astype(np.int32)), num_layers=LAYERS, top_k=TOP_K)
    trace.add_result(decode)
    assert np.array_equal(trace.finalize()[0], TRUTH[:8])

    delta = one(prime_rl(TOKENS[:6], TOKENS[6:8], start=3))
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(delta, token_ids=TOKENS[:8], start=2)
    assert caught.value.field == "start"
    assert "3 (the response's own start" in str(caught.value.expected)
    fresh = RouteTrace()
    fresh.add_result(one(vllm_chat(TOKENS[:3], TOKENS[3:4])))  # rows 0 .. 2
    fresh.add_result(delta, token_ids=TOKENS[:8], start=3)  # the same start twice: accepted
    assert np.array_equal(fresh.finalize()[0], TRUTH[:7])


def test_a_start_given_for_an_engines_rows_must_end_them_where_the_engine_does() -> None:
    # vLLM with routed_experts_prompt_start=2: the delta holds rows 2 .. 8 of a 10-token call.
    first = one(vllm_chat(TOKENS[:2], TOKENS[2:3]))  # rows 0 .. 1
    delta = one(vllm_chat(TOKENS[:4], TOKENS[4:10], rows=TRUTH[2:9]))
    for wrong in (0, 1):  # "the rows start at 0", one too small
        trace = RouteTrace(num_experts=EXPERTS)
        trace.add_result(first)
        with pytest.raises(R3WireError) as caught:
            trace.add_result(delta, start=wrong)
        assert caught.value.field == "start"
        assert str(caught.value.expected).startswith("2 or 3 (start + rows must be len(token_ids) - 1")
        assert "10 token ids, 7 rows" in str(caught.value.expected)
        assert caught.value.got == str(wrong)
        assert trace.rows == 2  # unchanged
    for right in (None, 2):
        trace = RouteTrace(num_experts=EXPERTS)
        trace.add_result(first)
        trace.add_result(delta, start=right)
        assert np.array_equal(trace.finalize()[0], TRUTH[:9])
        assert trace.conflicts == 0
    # A node that forwarded every token it was given ends its rows at the call's last token.
    prefill = one(sglang(TOKENS[:5], [], TRUTH[:5].astype(np.int32)), num_layers=LAYERS, top_k=TOP_K)
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(prefill, start=1)
    assert caught.value.field == "start"
    assert str(caught.value.expected).startswith("0 (start + rows")  # -1 is no start: only the prefill reading
    RouteTrace().add_result(prefill, start=0)


def test_rows_that_are_minus_one_throughout_are_not_replayed() -> None:
    routes = TRUTH[:7].astype(np.int16)
    routes[2] = -1
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(one(nemo_rl(TOKENS[:5], TOKENS[5:8], routes)))
    replayed = trace.replayed
    assert replayed is not None
    assert replayed.tolist() == [True, True, False, True, True, True, True]
    # A later call that replays the row fills it in.
    trace.add_result(one(vllm_chat(TOKENS[:8], TOKENS[8:9])))
    assert trace.replayed is None
    assert trace.conflicts == 0
    assert np.array_equal(trace.finalize()[0], TRUTH[:8])


def test_a_partly_missing_row_is_refused_and_layers_select_what_is_replayed() -> None:
    routes = TRUTH[:7].astype(np.int16)
    routes[:, 0] = -1  # a dense first layer, -1 in every row
    routes[4, 2] = -1  # and row 4 recorded no expert in layer 2 (NeMo-RL's -1 is per token and layer)
    result = one(nemo_rl(TOKENS[:5], TOKENS[5:8], routes))
    trace = RouteTrace(num_experts=EXPERTS)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result)
    assert caught.value.field == "result.routes[row 0, layer 0, slot 0]"
    assert "layers=" in str(caught.value.expected)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, layers=slice(1, None))
    assert caught.value.field == "result.routes[row 4, layer 2, slot 0]"  # where it is in result.routes
    assert trace.rows == 0
    routes[4, 1] = -1  # row 4 missing in every replayed layer: not replayed
    trace.add_result(one(nemo_rl(TOKENS[:5], TOKENS[5:8], routes)), layers=[1, 2])
    assert trace.replayed is not None
    assert trace.replayed.tolist() == [True] * 4 + [False] + [True] * 2
    replayed = trace.finalize()[0]
    assert replayed.shape == (7, 2, TOP_K)
    assert np.array_equal(replayed[[0, 1, 2, 3, 5, 6]], TRUTH[[0, 1, 2, 3, 5, 6]][:, 1:])


def test_a_mask_from_the_payload_is_applied() -> None:
    mask = np.array([True, False, True, True])
    payload = formats.write(TRUTH[:4], format="fireworks-matrices", mask=mask)
    read = formats.read(payload, format="fireworks-matrices", num_layers=LAYERS, top_k=TOP_K)
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(read, start=0, token_ids=TOKENS[:5])
    assert trace.replayed is not None
    assert trace.replayed.tolist() == mask.tolist()
    routes = trace.finalize()[0]
    assert np.array_equal(routes[mask], TRUTH[:4][mask])


def test_the_payloads_expert_count_must_be_the_traces() -> None:
    body = r3wire.dumps(
        {
            "choices": [{"index": 0, "token_ids": TOKENS[3:5], "routed_experts": TRUTH[:4]}],
            "prompt_token_ids": TOKENS[:3],
        },
        num_experts=EXPERTS,
    )
    result = one(body)
    assert result.num_experts == EXPERTS
    with pytest.raises(R3WireError) as caught:
        RouteTrace(num_experts=32).add_result(result)
    assert caught.value.field == "result.num_experts"
    assert caught.value.got == str(EXPERTS)
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(result)
    assert trace.rows == 4


@pytest.mark.parametrize(
    ("layers", "field", "message"),
    [
        (slice(0, 0), "layers", "at least one of the 3 layers"),
        (slice(None, None, 0), "layers", "slice step cannot be zero"),
        ([0, 0], "layers[1]", "increasing order"),
        # Reordered: layer 1's experts would be replayed at index 0 (review 10a).
        ([1, 0], "layers[1]", "increasing order (after 1"),
        (np.array([2, 0]), "layers[1]", "increasing order"),
        (slice(None, None, -1), "layers", "increasing order (after 2"),
        (slice(2, 0, -1), "layers", "increasing order"),
        ([3], "layers[0]", "a layer index in 0 .. 2"),
        ([-1], "layers[0]", "a layer index in 0 .. 2"),
        ([True], "layers[0]", "a layer index in 0 .. 2"),
        ([0, 1, 2, 0], "layers", "at most 3 distinct layer indexes"),
        ("ab", "layers", "None, a slice or a sequence"),
        (2, "layers", "None, a slice or a sequence"),
    ],
)
def test_bad_layer_selections_are_named(layers: Any, field: str, message: str) -> None:
    result = one(vllm_chat(TOKENS[:3], TOKENS[3:5]))
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(result, layers=layers)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_only_a_read_result_is_taken() -> None:
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result({"routes": TRUTH})  # type: ignore[arg-type]
    assert caught.value.field == "result"
    assert "a ReadResult" in str(caught.value.expected)


def _traces() -> list[RouteTrace]:
    full = RouteTrace(num_experts=EXPERTS)
    full.add_result(one(vllm_chat(TOKENS[:4], TOKENS[4:6])))  # 5 rows, 6 tokens
    holey = RouteTrace(num_experts=EXPERTS)
    routes = TRUTH[:3].astype(np.int16)
    routes[1] = -1
    holey.add_result(one(nemo_rl(TOKENS[:2], TOKENS[2:4], routes)))  # 3 rows, row 1 not replayed, 4 tokens
    return [full, holey]


def test_traces_pad_with_their_token_counts_and_replayed_rows() -> None:
    padded, mask = pad_routes(_traces(), side="left", num_experts=EXPERTS)
    assert mask.tolist() == [
        [False] * 5 + [True],
        [True, True, False, True, False, True],  # 2 padding, row 1 not replayed, the last token uncaptured
    ]
    assert np.array_equal(padded[0, :5], TRUTH[:5])
    assert np.array_equal(padded[1, [2, 4]], TRUTH[[0, 2]])
    # The same as the arrays, lengths and masks passed by hand.
    by_hand = [t.finalize()[0] for t in _traces()]
    masks = [t.replayed for t in _traces()]
    expected, expected_mask = pad_routes(by_hand, token_lengths=[6, 4], replayed=masks, num_experts=EXPERTS)
    assert np.array_equal(padded, expected)
    assert np.array_equal(mask, expected_mask)


def test_traces_pack_on_their_token_positions() -> None:
    with pytest.raises(R3WireError) as caught:
        pack_routes(_traces(), num_experts=EXPERTS)  # no mask in the result: refused
    assert caught.value.field == "token_lengths"
    flat, cu_seqlens, mask = pack_routes(_traces(), token_lengths=[6, 4], num_experts=EXPERTS)
    assert cu_seqlens.tolist() == [0, 6, 10]
    assert mask.tolist() == [False] * 5 + [True] + [False, True, False, True]
    assert np.array_equal(flat[~mask], TRUTH[[0, 1, 2, 3, 4, 0, 2]])
    longer, cu_longer, _ = pack_routes(_traces(), token_lengths=[7, 4], num_experts=EXPERTS)
    assert cu_longer.tolist() == [0, 7, 11]
    assert longer.shape[0] == 11


def test_trace_samples_are_refused_where_they_cannot_say_what_is_needed() -> None:
    traces = _traces()
    with pytest.raises(R3WireError) as caught:
        pad_routes([traces[0], TRUTH[:2]], side="right")
    assert caught.value.field == "samples[1]"
    with pytest.raises(R3WireError) as caught:
        pad_routes(traces, replayed=[None, None])
    assert caught.value.field == "replayed"
    with pytest.raises(R3WireError) as caught:
        pad_routes(traces, token_lengths=[6, 3])  # below the 4 token ids the second trace recorded
    assert caught.value.field == "token_lengths[1]"
    with pytest.raises(R3WireError) as caught:
        pack_routes([RouteTrace()], token_lengths=[1])
    assert caught.value.field == "samples[0]"
    tokenless = RouteTrace()
    tokenless.add(TRUTH[:2], start=0)
    with pytest.raises(R3WireError) as caught:
        pad_routes([tokenless])
    assert caught.value.field == "token_lengths"
    _, mask = pad_routes([tokenless], token_lengths=[3])
    assert mask.tolist() == [[False, False, True]]


# --- Every id the response carries is checked (a prompt without completion ids included) -------------------------


def test_given_token_ids_must_start_with_the_bodys_prompt_when_it_carries_no_completion_ids() -> None:
    # vLLM chat puts prompt_token_ids at the top; a proxy that drops the choice's token_ids leaves only those.
    choice = {"index": 0, "routed_experts": formats.write(TRUTH[:7], format="vllm-npy")}
    result = one(orjson.dumps({"choices": [choice], "prompt_token_ids": TOKENS[:5]}))
    assert result.token_ids is None
    assert result.prompt_token_ids is not None
    trace = RouteTrace(num_experts=EXPERTS)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=[*TOKENS[:2], 7, *TOKENS[3:8]])  # a wrong prompt joined to the reply
    assert caught.value.field == "token_ids[2]"
    assert str(caught.value.expected).startswith(f"{TOKENS[2]}, the response's prompt token 2")
    assert caught.value.got == "7"
    with pytest.raises(R3WireError, match="starting with the response's 5 prompt token ids") as caught:
        trace.add_result(result, token_ids=TOKENS[:4])
    assert caught.value.field == "token_ids"
    assert trace.rows == 0
    assert trace.token_ids is None
    trace.add_result(result, token_ids=TOKENS[:8])
    assert trace.rows == 7
    assert np.array_equal(trace.finalize()[0], TRUTH[:7])


# --- A hand-built ReadResult is checked at construction ----------------------------------------------------------

ROUTES = TRUTH[:4].astype(np.int32)
MA: Any = np.ma  # untyped in NumPy 1.24's stubs


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("routes", TRUTH[:4].tolist()),
        ("routes", TRUTH[0]),
        ("routes", TRUTH[:4].astype(np.float64)),
        ("routes", MA.masked_array(TRUTH[:4])),
        ("mask", np.ones(3, dtype=bool)),
        ("mask", np.ones(4, dtype=np.uint8)),
        ("mask", [True] * 4),
        ("token_ids", np.array([2.9, 3.9])),
        ("token_ids", ["0", "1"]),
        ("token_ids", np.zeros((2, 2), dtype=np.int64)),
        ("prompt_token_ids", np.array(3)),
        ("logprobs", np.zeros(2, dtype=np.int64)),
        ("start", -1),
        ("start", 1.0),
        ("start", np.array([1, 2])),
        ("start", True),
        ("total_tokens", "8"),
        ("num_experts", 0),
        ("num_experts", "8"),
        ("num_experts", np.array([8, 8])),
        ("bits", 32),
        ("num_clamped", 1),
        ("num_clamped", None),
        ("format", None),
        ("path", 3),
        ("parts", ["choices", 0]),
    ],
)
def test_a_hand_built_read_result_is_checked_field_by_field(field: str, value: Any) -> None:
    fields: dict[str, Any] = {"routes": ROUTES, "format": "x", field: value}
    with pytest.raises(R3WireError) as caught:
        formats.ReadResult(**fields)
    assert str(caught.value.field).startswith(f"ReadResult.{field}")
    assert str(caught.value).startswith(f"{caught.value.field} must be ")


def test_a_valid_hand_built_read_result_is_taken_as_it_is() -> None:
    prompt = np.array([3, (1 << 53) + 1], dtype=np.uint64)  # uint64 with int64 promotes to float64 in NumPy
    numpy_ints: dict[str, Any] = {"start": np.int64(0), "num_experts": np.uint16(EXPERTS), "num_clamped": np.int8(2)}
    result = formats.ReadResult(
        routes=TRUTH[:3],
        format="mine",
        mask=np.array([True, False, True]),
        prompt_token_ids=prompt,
        token_ids=np.array([5, 6], dtype=np.int32),
        logprobs=np.zeros(2, dtype=np.float32),
        **numpy_ints,
    )
    assert type(result.start) is int
    assert result.start == 0
    assert type(result.num_experts) is int
    assert result.num_experts == EXPERTS
    assert type(result.num_clamped) is int
    assert result.num_clamped == 2
    call = result.call_token_ids()
    assert call.dtype == np.int64
    assert call.tolist() == [3, (1 << 53) + 1, 5, 6]
    assert result.route_mask()[:, 0, 0].tolist() == [True, False, True]
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(result)
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == [3, (1 << 53) + 1, 5, 6]
    assert trace.replayed is not None
    assert trace.replayed.tolist() == [True, False, True]


def test_uint64_token_ids_past_int64_are_refused_where_they_are_read() -> None:
    # The constructor reads no value (a broadcast view may declare any length); the ids are read, and checked,
    # where they are joined or compared, never wrapped to negative int64.
    huge = np.array([5, 1 << 63], dtype=np.uint64)
    result = formats.ReadResult(routes=TRUTH[:2], format="x", prompt_token_ids=huge, token_ids=np.arange(1))
    with pytest.raises(R3WireError) as caught:
        result.call_token_ids()
    assert caught.value.field == "ReadResult.prompt_token_ids[1]"
    assert caught.value.got == str(1 << 63)
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(result, token_ids=[5, 7, 0])
    assert caught.value.field == "result.prompt_token_ids[1]"
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(result)
    assert caught.value.field == "result.prompt_token_ids[1]"


def test_the_callers_start_is_checked_before_it_is_compared() -> None:
    result = formats.ReadResult(routes=TRUTH[:2], format="x", start=1, prompt_token_ids=np.arange(2), token_ids=None)
    for start in (np.array([1, 2]), -1, "1", 1.0):
        with pytest.raises(R3WireError) as caught:
            RouteTrace().add_result(result, token_ids=TOKENS[:4], start=start)  # type: ignore[arg-type]
        assert caught.value.field == "start"
        assert "an integer in 0.." in str(caught.value.expected)


# --- Sizes before contents -----------------------------------------------------------------------------------------


def _peak(call: Any) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        call()
    except Exception as exc:  # returned for the caller to assert on
        return exc, tracemalloc.get_traced_memory()[1]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return None, peak


@pytest.mark.parametrize(
    ("layers", "field", "shape"),
    [
        (None, "result.routes", [1 << 24, 61, 8]),
        (slice(3, None), "result.routes[:, layers]", [1 << 24, 58, 8]),
        ([3, 5, 60], "result.routes[:, layers]", [1 << 24, 3, 8]),
    ],
)
def test_the_routes_size_is_checked_before_they_are_read(layers: Any, field: str, shape: list[int]) -> None:
    # A broadcast view declares 8 G ids in no memory: selecting, comparing or joining any of it would allocate GiB.
    rows = 1 << 24
    routes = np.broadcast_to(np.int32(0), (rows, 61, 8))
    result = formats.ReadResult(
        routes=routes, format="x", prompt_token_ids=np.arange(1), token_ids=np.broadcast_to(np.int64(1), (rows + 1,))
    )
    trace = RouteTrace(num_experts=8, max_elements=1000)
    error, peak = _peak(lambda: trace.add_result(result, layers=layers))
    assert isinstance(error, R3WireError)
    assert error.field == field
    assert error.got is not None
    assert error.got.startswith(str(shape))
    assert peak < 1 << 20
    assert trace.rows == 0


def test_the_responses_token_count_is_checked_before_it_is_joined() -> None:
    many = np.broadcast_to(np.int64(1), (1 << 28,))  # 2 GiB once joined
    result = formats.ReadResult(routes=TRUTH[:2], format="x", prompt_token_ids=many, token_ids=many)
    trace = RouteTrace(max_elements=1000)
    error, peak = _peak(lambda: trace.add_result(result))
    assert isinstance(error, R3WireError)
    assert error.field == "token_ids"
    assert "max_elements=1000" in str(error.expected)
    assert peak < 1 << 20
    error, peak = _peak(lambda: trace.add_result(result, token_ids=many))
    assert isinstance(error, R3WireError)
    assert error.field == "token_ids"
    assert peak < 1 << 20


# --- Errors name the element in result.routes, whatever layers= selects ------------------------------------------


def _with_dense_layers() -> Any:
    routes = np.zeros((3, 6, 2), dtype=np.int32)
    routes[:, :, 1] = 1
    routes[:, :3] = -1  # three dense layers written as -1 (DeepSeek-V3), dropped with layers=slice(3, None)
    return routes


def _result(routes: Any) -> formats.ReadResult:
    return formats.ReadResult(routes=routes, format="x", prompt_token_ids=np.arange(2), token_ids=np.arange(2, 4))


@pytest.mark.parametrize("layers", [slice(3, None), [3, 5], [4, 5], None])
def test_an_out_of_range_id_is_named_in_result_routes(layers: Any) -> None:
    routes = _with_dense_layers()
    if layers is None:
        routes[:, :3] = 0, 1
    routes[1, 5, 0] = 9
    with pytest.raises(R3WireError) as caught:
        RouteTrace(num_experts=8).add_result(_result(routes), layers=layers)
    assert caught.value.field == "result.routes[row 1, layer 5, slot 0]"
    assert caught.value.got == str(routes[1, 5, 0])
    assert str(caught.value).startswith("result.routes[row 1, layer 5, slot 0] must be an expert id below")


@pytest.mark.parametrize("layers", [slice(3, None), [3, 4], [4, 5]])
def test_a_partly_missing_row_is_named_in_result_routes(layers: Any) -> None:
    routes = _with_dense_layers()
    routes[2, 4, 1] = -1
    with pytest.raises(R3WireError) as caught:
        RouteTrace(num_experts=8).add_result(_result(routes), layers=layers)
    assert caught.value.field == "result.routes[row 2, layer 4, slot 1]"
    assert routes[2, 4, 1] == -1


def test_a_conflict_is_named_in_result_routes() -> None:
    routes = _with_dense_layers()
    trace = RouteTrace(num_experts=8)
    trace.add_result(_result(routes), layers=[3, 4])
    changed = routes.copy()
    changed[0, 4, 0] = 5
    with pytest.raises(R3WireError) as caught:
        trace.add_result(_result(changed), layers=[3, 4], on_conflict="raise")
    assert caught.value.field == "result.routes[row 0, layer 4]"
    assert caught.value.got == "[5, 1]"
    assert "trajectory row 0" in str(caught.value.expected)
    assert trace.conflicts == 0


def test_errors_about_anything_else_keep_their_names() -> None:
    trace = RouteTrace(num_experts=8)
    trace.add_result(_result(_with_dense_layers()), layers=slice(3, None))
    with pytest.raises(R3WireError) as caught:
        trace.add_result(_result(_with_dense_layers()), layers=slice(4, None))
    assert caught.value.field == "routes.shape"


# --- A 0-d array or tensor is one value, not a sequence -----------------------------------------------------------


@pytest.mark.parametrize("layers", [np.array(1), np.array([[3, 4]]), np.array([3.0, 4.0])])
def test_layers_must_be_a_sequence_of_indexes(layers: Any) -> None:
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(_result(_with_dense_layers()), layers=layers)
    assert caught.value.field is not None
    assert caught.value.field.startswith("layers")


def test_zero_d_row_masks_are_refused() -> None:
    samples = [TRUTH[:2]]
    for replayed in (np.array(True), np.array(None, dtype=object)):
        with pytest.raises(R3WireError) as caught:
            pad_routes(samples, side="right", replayed=replayed)
        assert caught.value.field == "replayed"
        with pytest.raises(R3WireError) as caught:
            pack_routes(samples, token_lengths=[3], replayed=replayed)
        assert caught.value.field == "replayed"


def test_tensors_as_layers_replayed_and_samples() -> None:
    torch = pytest.importorskip("torch")
    for replayed in (torch.tensor(True), torch.tensor([[True, False]])[0, 0]):
        with pytest.raises(R3WireError) as caught:
            pad_routes([TRUTH[:2]], side="right", replayed=replayed)
        assert caught.value.field == "replayed"
    for layers in (torch.tensor(1), torch.tensor([[3, 4]]), torch.tensor([3.0, 4.0])):
        with pytest.raises(R3WireError) as caught:
            RouteTrace().add_result(_result(_with_dense_layers()), layers=layers)
        assert str(caught.value.field).startswith("layers")
    by_list, by_tensor = RouteTrace(num_experts=8), RouteTrace(num_experts=8)
    by_list.add_result(_result(_with_dense_layers()), layers=[3, 5])
    by_tensor.add_result(_result(_with_dense_layers()), layers=torch.tensor([3, 5]))
    assert np.array_equal(by_list.finalize()[0], by_tensor.finalize()[0])
    with pytest.raises(R3WireError, match="increasing order") as caught:  # reordered layers, as for a list
        RouteTrace(num_experts=8).add_result(_result(_with_dense_layers()), layers=torch.tensor([5, 3]))
    assert caught.value.field == "layers[1]"
    # A 4-d tensor is a sequence of samples, as a 4-d array is.
    batch = np.stack([TRUTH[:2], TRUTH[2:4]])
    padded, mask = pad_routes(torch.from_numpy(batch), side="right", replayed=torch.tensor([[True, False]] * 2))
    expected, expected_mask = pad_routes(batch, side="right", replayed=[np.array([True, False])] * 2)
    assert np.array_equal(padded, expected)
    assert np.array_equal(mask, expected_mask)


def _matrix(rows: np.ndarray[Any, Any]) -> list[str]:
    """One base64 matrix per row, as Fireworks' routing_matrices list carries them."""
    return [base64.b64encode(row.tobytes()).decode() for row in rows]


def test_a_completion_only_routing_matrices_list_is_refused_without_its_start_and_placed_with_it() -> None:
    # Fireworks' completions without echo return one routing matrix per completion token; the SDK and the
    # cookbook place entry j at position len(prompt) - 1 + j (review 11b). Placed from token 0 it sat on prompt
    # tokens with no error.
    prompt, completion = TOKENS[:5], TOKENS[5:8]
    payload = _matrix(TRUTH[4:7])
    body = {"choices": [{"index": 0, "token_ids": completion, "routing_matrices": payload}], "prompt_token_ids": prompt}
    (result,) = formats.read_response(body, num_layers=LAYERS, top_k=TOP_K)
    trace = RouteTrace(num_experts=EXPERTS)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result)
    assert caught.value.field == "start"
    assert "3 entries with 8 token ids" in str(caught.value)
    assert "start=len(prompt_token_ids) - 1" in str(caught.value)
    assert trace.rows == 0
    trace.add_result(one_matrices(TRUTH[:4]), start=0, token_ids=prompt)
    trace.add_result(result, start=len(prompt) - 1)
    routes, rows = trace.finalize()
    assert rows == 7
    assert np.array_equal(routes, TRUTH[:7])
    assert trace.conflicts == 0


def test_a_routing_matrices_list_from_token_0_still_holding_the_echo_entry_is_refused() -> None:
    # With echo the API returns an entry for every token, the first one produced by no forward pass; Fireworks'
    # SDK drops it. A list of as many entries as tokens is that untrimmed list (one token off), or nothing known.
    trace = RouteTrace(num_experts=EXPERTS)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(one_matrices(TRUTH[:5]), token_ids=TOKENS[:5])
    assert caught.value.field == "start"
    assert "routing_matrices[1:]" in str(caught.value)
    trace.add_result(one_matrices(TRUTH[:4]), token_ids=TOKENS[:5])  # one entry per forwarded token: from 0
    assert np.array_equal(trace.finalize()[0], TRUTH[:4])


def one_matrices(rows: np.ndarray[Any, Any]) -> formats.ReadResult:
    return formats.read(_matrix(rows), format="fireworks-matrices", num_layers=LAYERS, top_k=TOP_K)


def test_an_empty_string_in_routing_matrices_is_a_token_without_routing() -> None:
    # Fireworks' tools write "" for a position without routing (the cookbook pads a completion-only list with it).
    payload = ["", *_matrix(TRUTH[1:3]), ""]
    result = formats.read(payload, format="fireworks-matrices", num_layers=LAYERS, top_k=TOP_K)
    assert result.mask is not None
    assert result.mask.tolist() == [False, True, True, False]
    assert np.array_equal(result.routes[1:3], TRUTH[1:3])
    assert not result.routes[[0, 3]].any()
    assert formats.detect(payload) == "fireworks-matrices"


def test_fireworks_per_token_routing_inside_logprobs_is_refused_not_read_as_no_routes() -> None:
    # Fireworks' completions API with include_routing_matrix=True puts a matrix in each logprobs.content entry;
    # read_response found no routes there and returned [] (review 11b): a trainer would train without replay.
    content = [
        {"token": "a", "logprob": -0.1},
        {"token": "b", "logprob": -0.2, "routing_matrix": _matrix(TRUTH[:1])[0]},
    ]
    body = {"choices": [{"index": 0, "text": "ab", "logprobs": {"content": content}}]}
    with pytest.raises(r3wire.DecodeError) as caught:
        formats.read_response(body, num_layers=LAYERS, top_k=TOP_K)
    assert caught.value.field == "$.choices[0].logprobs.content[1].routing_matrix"
    assert "fireworks-matrices" in str(caught.value)
    del content[1]["routing_matrix"]
    assert formats.read_response(body, num_layers=LAYERS, top_k=TOP_K) == []


def test_a_dense_layer_of_zeros_is_named_in_the_distinct_ids_error() -> None:
    # vLLM and SGLang zero their capture buffers: a dense layer arrives as a row of zeros, not -1 (review 11b).
    routes = TRUTH[:4].copy()
    routes[:, 0] = 0
    with pytest.raises(R3WireError) as caught:
        r3wire.validate_routes([routes], num_experts=EXPERTS)
    assert "dense, non-MoE layer" in str(caught.value)
    routes[0, 0] = [1, 1]
    with pytest.raises(R3WireError) as caught:
        r3wire.validate_routes([routes], num_experts=EXPERTS)
    assert "dense" not in str(caught.value)


def vllm_chat_with_logprobs(prompt: list[int], completion: list[int], logprobs: list[float | None]) -> bytes:
    """vLLM chat with return_token_ids and logprobs: one content entry per completion token (None: non-finite)."""
    n = len(prompt) + len(completion)
    content: list[dict[str, Any]] = [
        {"token": f"t{t}", "logprob": lp, "bytes": [], "top_logprobs": []}
        for t, lp in zip(completion, logprobs, strict=True)
    ]
    choice = {
        "index": 0,
        "token_ids": completion,
        "logprobs": {"content": content},
        "routed_experts": formats.write(TRUTH[: n - 1], format="vllm-npy"),
    }
    return orjson.dumps({"choices": [choice], "prompt_token_ids": prompt})


def test_a_multi_turn_trajectory_records_each_turns_logprobs_on_its_own_tokens() -> None:
    # Turn 1: prompt 0..3, reply 4..6; a tool result 7..8; turn 2: reply 9..12.
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(one(vllm_chat_with_logprobs(TOKENS[:4], TOKENS[4:7], [-0.5, -1.5, None])))
    trace.add_result(one(vllm_chat_with_logprobs(TOKENS[:9], TOKENS[9:13], [-0.25, -0.75, -2.0, -0.125])))
    assert trace.sampled is not None
    assert trace.logprobs is not None
    assert np.flatnonzero(trace.sampled).tolist() == [4, 5, 6, 9, 10, 11, 12]  # the loss mask: replies only
    assert trace.logprobs.tolist() == [0.0] * 4 + [-0.5, -1.5, -9999.0, 0.0, 0.0, -0.25, -0.75, -2.0, -0.125]
    # Padded like the tokens: the same cells.
    ids, _ = pad_sequences([trace.token_ids], token_lengths=[13], max_len=16)
    old, _ = pad_sequences([trace.logprobs], token_lengths=[13], max_len=16)
    loss, _ = pad_sequences([trace.sampled], token_lengths=[13], max_len=16)
    assert ids[0, 3:].tolist() == TOKENS[:13]
    assert old[0, 3 + 9] == -0.25
    assert loss[0].tolist() == [False] * 7 + [True] * 3 + [False] * 2 + [True] * 4
    # A branch keeps the logprobs of the tokens it shares.
    branch = trace.fork(11)
    assert branch.logprobs is not None
    assert branch.logprobs.tolist() == trace.logprobs[:11].tolist()


def test_a_trace_without_logprobs_has_none_and_calls_without_them_leave_tokens_unsampled() -> None:
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(one(vllm_chat(TOKENS[:4], TOKENS[4:6])))
    assert (trace.logprobs, trace.sampled) == (None, None)
    trace.add_result(one(vllm_chat_with_logprobs(TOKENS[:6], TOKENS[6:8], [-1.0, -2.0])))
    assert trace.sampled is not None
    assert np.flatnonzero(trace.sampled).tolist() == [6, 7]


def test_logprobs_given_again_for_a_token_follow_on_conflict() -> None:
    tokens = TOKENS[:6]
    cases: list[tuple[Literal["keep", "replace"] | None, float]] = [("keep", -1.0), ("replace", -3.0), (None, -1.0)]
    for policy, want in cases:
        trace = RouteTrace(num_experts=EXPERTS)
        trace.add(TRUTH[:5], token_ids=tokens, logprobs=[-1.0])
        trace.add(TRUTH[:5], token_ids=tokens, logprobs=[-3.0], on_conflict=policy)
        assert trace.logprobs is not None
        assert trace.logprobs[5] == want
        assert trace.conflicts == 0  # a routing metric: logprobs are not counted
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add(TRUTH[:5], token_ids=tokens, logprobs=[-1.0])
    with pytest.raises(R3WireError) as caught:
        trace.add(TRUTH[:5], token_ids=tokens, logprobs=[-3.0], on_conflict="raise")
    assert caught.value.field == "logprobs[0]"
    assert "recorded for trajectory position 5" in str(caught.value.expected)
    assert trace.logprobs is not None
    assert trace.logprobs[5] == -1.0


@pytest.mark.parametrize(
    ("logprobs", "token_ids", "field", "expected"),
    [
        ([-1.0], None, "logprobs", "given with token_ids"),
        ([[-1.0]], TOKENS[:6], "logprobs", "a 1-d array"),
        ([True, False], TOKENS[:6], "logprobs.dtype", "a float or integer dtype"),
        ([0, (1 << 53) + 1], TOKENS[:6], "logprobs[1]", "a logprob float64 holds exactly"),
        (np.array([-1.0] * 7), TOKENS[:6], "logprobs", "at most len(token_ids)=6 values"),
        ([-1.0, float("nan")], TOKENS[:6], "logprobs[1]", "a finite logprob"),
        ([-1.0, float("-inf")], TOKENS[:6], "logprobs[1]", "a finite logprob"),
    ],
)
def test_bad_logprobs_are_refused_and_change_nothing(logprobs: Any, token_ids: Any, field: str, expected: str) -> None:
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add(TRUTH[:2], start=0, token_ids=TOKENS[:3]) if token_ids is not None else trace.add(TRUTH[:2], start=0)
    with pytest.raises(R3WireError) as caught:
        trace.add(TRUTH[:5], start=0, token_ids=token_ids, logprobs=logprobs)
    assert caught.value.field == field
    assert expected in str(caught.value.expected)
    assert trace.rows == 2
    assert trace.logprobs is None


def test_a_longer_float_than_float64_is_refused_rather_than_rounded() -> None:
    wide = np.array([-1.0], dtype=np.longdouble)
    if wide.dtype.itemsize <= 8:
        pytest.skip("this platform's long double is float64")  # pragma: no cover
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add(TRUTH[:5], token_ids=TOKENS[:6], logprobs=wide)
    assert caught.value.field == "logprobs.dtype"
    assert "a longer float would be rounded" in str(caught.value.expected)


def test_integer_logprobs_are_taken_exactly() -> None:
    # A JSON encoder may write a greedy token's 0.0 as 0.
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add(TRUTH[:5], token_ids=TOKENS[:6], logprobs=[0, -1])
    assert trace.logprobs is not None
    assert trace.logprobs.tolist() == [0.0] * 4 + [0.0, -1.0]


def test_add_result_names_its_logprobs_as_the_results() -> None:
    result = formats.ReadResult(
        routes=TRUTH[:3], format="x", token_ids=np.array(TOKENS[3:4]), logprobs=np.array([-1.0])
    )
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add_result(result, token_ids=TOKENS[:4])
    other = formats.ReadResult(routes=TRUTH[:3], format="x", token_ids=np.array(TOKENS[3:4]), logprobs=np.array([-2.0]))
    with pytest.raises(R3WireError) as caught:
        trace.add_result(other, token_ids=TOKENS[:4], on_conflict="raise")
    assert caught.value.field == "result.logprobs[0]"
    assert str(caught.value).startswith("result.logprobs[0] must be -1.0")


def test_a_matrices_list_given_a_start_must_not_reach_the_last_token() -> None:
    # Fireworks' decoder list keeps token 0's entry: n entries for n tokens. Given start=0 it would put every row
    # one token late; it is refused, naming the fix.
    positions = TRUTH[:3]  # positions 0 .. 2 of a 4-token call
    decoder_list = formats.write(np.concatenate([TRUTH[9:10], positions]), format="fireworks-matrices")
    whole = formats.read(decoder_list, format="fireworks-matrices", num_layers=LAYERS, top_k=TOP_K)
    trace = RouteTrace(num_experts=EXPERTS)
    with pytest.raises(R3WireError) as caught:
        trace.add_result(whole, token_ids=TOKENS[:4], start=0)
    assert caught.value.field == "start"
    assert "routing_matrices[1:]" in str(caught.value.expected)
    assert trace.rows == 0
    dropped = formats.read(decoder_list[1:], format="fireworks-matrices", num_layers=LAYERS, top_k=TOP_K)
    trace.add_result(dropped, token_ids=TOKENS[:4], start=0)
    assert np.array_equal(trace.finalize()[0], positions)


def test_more_rows_than_tokens_with_a_given_start_are_refused_as_not_fitting() -> None:
    result = formats.ReadResult(routes=TRUTH[:5], format="x")
    with pytest.raises(R3WireError) as caught:
        RouteTrace().add_result(result, token_ids=TOKENS[:3], start=0)
    assert caught.value.field == "routes"
    assert "at most 3 rows" in str(caught.value.expected)
