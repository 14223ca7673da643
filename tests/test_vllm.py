"""r3wire.vllm against real vLLM classes: CompletionOutput, RequestOutput, Logprob and FlatLogprobs.

CI installs vllm 0.33 without its CUDA dependencies (scripts/dev.py, R3WIRE_WITH=vllm) and sets
R3WIRE_REQUIRE=vllm, so these tests cannot skip there. Older layouts (int32 routes of 0.14, the separate
``prompt_routed_experts`` of 0.21) are built from the same real classes with those dtypes and attributes.
"""

from __future__ import annotations

import array
import logging
import math
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest

from r3wire import (
    DecodeError,
    EncodeError,
    R3WireError,
    UnsupportedVersionError,
    decode_routes,
    encode_logprobs,
    encode_routes,
)

outputs: Any = pytest.importorskip("vllm.outputs")
vllm_logprobs: Any = pytest.importorskip("vllm.logprobs")

from r3wire.vllm import (  # noqa: E402  # after the skip: without vllm there is nothing to test
    Completion,
    decode_completion,
    encode_completion,
    routed_experts,
    sampled_logprobs,
)

CompletionOutput = outputs.CompletionOutput
RequestOutput = outputs.RequestOutput
Logprob = vllm_logprobs.Logprob
FlatLogprobs = vllm_logprobs.FlatLogprobs

FLOOR = -9999.0
MA: Any = np.ma  # untyped in the stubs of some NumPy releases


def _completion(
    token_ids: Any = (11, 12, 13),
    logprobs: Any = None,
    routes: Any = None,
    index: int = 0,
) -> Any:
    return CompletionOutput(
        index=index,
        text="",
        token_ids=list(token_ids) if isinstance(token_ids, tuple) else token_ids,
        cumulative_logprob=None,
        logprobs=logprobs,
        routed_experts=routes,
        finish_reason="stop",
    )


def _request(*completions: Any, request_id: str = "req-7", prompt_len: int = 4) -> Any:
    return RequestOutput(
        request_id=request_id,
        prompt="hello",
        prompt_token_ids=list(range(1, prompt_len + 1)),
        prompt_logprobs=None,
        outputs=list(completions),
        finished=True,
    )


def _ids(rows: int, layers: int = 4, top_k: int = 2, num_experts: int = 128, dtype: Any = np.uint8) -> Any:
    rng = np.random.default_rng(rows * 7 + num_experts)
    return rng.integers(0, num_experts, size=(rows, layers, top_k)).astype(dtype)


def _flat(positions: list[Any]) -> Any:
    flat = FlatLogprobs()
    flat.extend(positions)
    return flat


# --- routed_experts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "num_experts"),
    [(np.uint8, 128), (np.uint8, 256), (np.uint16, 384), (np.int16, 160), (np.int32, 512)],
    ids=["0.33-uint8", "0.33-uint8-256", "0.33-uint16", "0.21-int16", "0.14-int32"],
)
def test_routed_experts_any_integer_dtype_without_copy(dtype: Any, num_experts: int) -> None:
    routes = _ids(9, num_experts=num_experts, dtype=dtype)
    out = _completion(routes=routes)
    expected = routes.tolist()
    got = routed_experts(out)
    assert got is routes  # the engine's array itself, not a copy
    envelope = encode_routes(got, num_experts=num_experts)
    assert envelope["dtype"] == ("uint8" if num_experts <= 256 else "int16")
    assert decode_routes(orjson.dumps(envelope), num_experts=num_experts).tolist() == expected


def test_routed_experts_from_request_output_picks_a_completion() -> None:
    first, second = _ids(5), _ids(6)
    request = _request(_completion(routes=first), _completion(routes=second, index=1))
    assert routed_experts(request) is first
    assert routed_experts(request, index=1) is second
    assert routed_experts(request, index=-1) is second
    with pytest.raises(R3WireError, match=r"index must be a completion index in 0\.\.1, got 2"):
        routed_experts(request, index=2)
    with pytest.raises(R3WireError, match=r"index must be an integer, got True"):
        routed_experts(request, index=True)
    with pytest.raises(R3WireError, match=r"index must be None for a CompletionOutput"):
        routed_experts(_completion(routes=first), index=0)


def test_routed_experts_absent_is_none() -> None:
    assert routed_experts(_completion()) is None
    assert routed_experts(_request(_completion())) is None


def test_prompt_routed_experts_rows_come_first() -> None:
    # vLLM 0.21: prompt rows on the RequestOutput, generated rows on the completion, both int16.
    prompt = _ids(4, dtype=np.int16, num_experts=300)
    generated = _ids(2, dtype=np.int16, num_experts=300)
    request = _request(_completion(routes=generated), prompt_len=4)
    request.prompt_routed_experts = prompt
    got = routed_experts(request)
    assert got is not None
    assert got.dtype == np.int16
    assert got.tolist() == prompt.tolist() + generated.tolist()
    # A CompletionOutput on its own has no prompt rows to join.
    assert routed_experts(request.outputs[0]) is generated


def test_prompt_rows_with_mixed_dtypes_keep_every_id() -> None:
    request = _request(_completion(routes=np.full((1, 2, 2), 40000, dtype=np.uint16)))
    request.prompt_routed_experts = np.full((2, 2, 2), 300, dtype=np.int16)
    got = routed_experts(request)
    assert got is not None
    assert got[:, 0, 0].tolist() == [300, 300, 40000]


@pytest.mark.parametrize("prompt_dtype", [np.int8, np.int16, np.int32, np.int64])
def test_prompt_rows_that_would_join_as_float_are_refused(prompt_dtype: Any) -> None:
    # NumPy joins any signed dtype with uint64 as float64, which rounds 2**53 + 1 to 2**53.
    request = _request(_completion(token_ids=[1], routes=np.full((1, 1, 1), 2**53 + 1, dtype=np.uint64)))
    request.prompt_routed_experts = np.zeros((1, 1, 1), dtype=prompt_dtype)
    shown = np.dtype(prompt_dtype).name
    message = (
        rf"^output\.prompt_routed_experts\.dtype must be an integer dtype that joins "
        rf"output\.outputs\[0\]\.routed_experts's uint64 exactly \(NumPy joins the two as float64.*got {shown}$"
    )
    with pytest.raises(EncodeError, match=message):
        routed_experts(request)
    # Small ids too: the message names the dtypes, not a float64 dtype the caller never used.
    request.outputs[0].routed_experts = np.full((1, 1, 1), 3, dtype=np.uint64)
    with pytest.raises(EncodeError, match=r"^output\.prompt_routed_experts\.dtype must be"):
        encode_completion(request, num_experts=8)


def test_prompt_rows_of_unsigned_dtypes_join_uint64_exactly() -> None:
    request = _request(_completion(token_ids=[1], routes=np.full((1, 1, 1), 2**53 + 1, dtype=np.uint64)))
    request.prompt_routed_experts = np.full((1, 1, 1), 7, dtype=np.uint8)
    got = routed_experts(request)
    assert got is not None
    assert got.dtype == np.uint64
    assert got[:, 0, 0].tolist() == [7, 2**53 + 1]


def test_prompt_rows_without_completion_rows_are_not_the_sequence() -> None:
    request = _request(_completion(routes=None))
    request.prompt_routed_experts = _ids(4, dtype=np.int16)
    assert routed_experts(request) is None


def test_prompt_rows_must_match_layers_and_top_k() -> None:
    request = _request(_completion(routes=_ids(2, layers=4)))
    request.prompt_routed_experts = _ids(3, layers=5)
    with pytest.raises(EncodeError, match=r"prompt_routed_experts must be rows of \[layers, top_k\] = \[4, 2\]"):
        routed_experts(request)


def test_routed_experts_as_a_torch_tensor() -> None:
    torch: Any = pytest.importorskip("torch")
    full = torch.randint(0, 128, (6, 4, 4), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    view = full[:, :, ::2]  # non-contiguous
    got = routed_experts(_completion(routes=view))
    assert got is not None
    assert np.shares_memory(got, full.numpy())
    assert got.tolist() == view.tolist()


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        (np.zeros((2, 3), dtype=np.uint8), r"output\.routed_experts must be a 3-d array"),
        (np.zeros((2, 3, 2), dtype=np.float32), r"output\.routed_experts\.dtype must be an integer dtype"),
        ("AAAA", r"output\.routed_experts must be an array"),
    ],
)
def test_routed_experts_malformed(routes: Any, message: str) -> None:
    with pytest.raises(EncodeError, match=message):
        routed_experts(_completion(routes=routes))


def test_not_a_vllm_output() -> None:
    with pytest.raises(R3WireError, match="output must be a vLLM CompletionOutput or RequestOutput, got dict"):
        routed_experts({"routed_experts": None})


def _duck(**fields: Any) -> Any:
    return SimpleNamespace(**fields)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (_duck(outputs=None), r"^output\.outputs must be a list of CompletionOutput, got NoneType$"),
        (_duck(outputs={1: None}), r"^output\.outputs must be a list of CompletionOutput, got dict$"),
        (_duck(outputs=iter(())), r"^output\.outputs must be a list of CompletionOutput, got tuple_iterator$"),
        (_duck(outputs=[None]), r"^output\.outputs\[0\] must be a vLLM CompletionOutput .*got NoneType$"),
        (_duck(outputs=[object()]), r"^output\.outputs\[0\] must be a vLLM CompletionOutput .*got object$"),
        (_duck(outputs=[]), r"^output\.outputs must be at least one completion \(this request has none"),
    ],
)
def test_malformed_request_output_is_named(output: Any, message: str) -> None:
    for read in (routed_experts, sampled_logprobs, encode_completion):
        with pytest.raises(R3WireError, match=message):
            read(output)


def test_a_request_id_that_is_not_a_string_only_goes_unlogged(caplog: pytest.LogCaptureFixture) -> None:
    request = _request(_completion(token_ids=[1], logprobs=[None]))
    request.request_id = 7  # a logging label only: the call must not fail over it
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        result = sampled_logprobs(request)
        assert result is not None
        assert result.num_clamped == 1
        assert caplog.records == []
        sampled_logprobs(request, request_id="given")
    assert "'given'" in caplog.records[0].getMessage()
    with pytest.raises(R3WireError, match="request_id must be a string or None, got 7"):
        sampled_logprobs(request, request_id=7)  # type: ignore[arg-type]  # the caller's own id is checked


@pytest.mark.parametrize(
    ("logprobs", "message"),
    [
        (5, r"^output\.logprobs must be a list of positions .* or a FlatLogprobs, got int$"),
        (iter([{}]), r"^output\.logprobs must be a list of positions .*got list_iterator$"),
        ({1: Logprob(logprob=-1.0)}, r"^output\.logprobs must be a list of positions .*got dict$"),
        ([np.array([-0.5, -1.0])], r"^output\.logprobs\[0\] must be a dict \{token_id: Logprob\} or None, got array"),
        ([np.array([])], r"^output\.logprobs\[0\] must be a dict"),
        ([[]], r"^output\.logprobs\[0\] must be a dict"),
        (
            _duck(start_indices=[0], end_indices=[1], token_ids=[1], logprobs=None),
            r"^output\.logprobs\.logprobs must be a sequence of float",
        ),
    ],
)
def test_malformed_logprobs_are_named(logprobs: Any, message: str) -> None:
    with pytest.raises(EncodeError, match=message):
        sampled_logprobs(_duck(token_ids=[1], logprobs=logprobs))


def test_duck_typed_flat_logprobs_without_len() -> None:
    flat = _duck(start_indices=[0, 2], end_indices=[2, 3], token_ids=[5, 1, 2], logprobs=[-3.0, -0.5, -1.5])
    result = sampled_logprobs(_duck(token_ids=[1, 2], logprobs=flat))
    assert result is not None
    assert result.values.tolist() == [-0.5, -1.5]


@pytest.mark.parametrize(
    ("token_ids", "message"),
    [
        ([-1, 2**63], r"^output\.token_ids\[0\] must be a non-negative token id, got -1$"),
        ([1, 2**63], r"^output\.token_ids\[1\] must be a token id below 2\*\*63, got 9223372036854775808$"),
        ([2**64], r"^output\.token_ids\[0\] must be a token id below 2\*\*63, got 18446744073709551616$"),
        ([np.uint64(2**63)], r"^output\.token_ids\[0\] must be a token id below 2\*\*63"),
        ([np.int8(-1)], r"^output\.token_ids\[0\] must be a non-negative token id, got -1$"),
        (bytearray(b"\x01"), r"^output\.token_ids must be a sequence of token ids, got bytearray$"),
        (memoryview(b"\x01\x02"), r"^output\.token_ids must be a sequence of token ids, got memoryview$"),
        (5, r"^output\.token_ids must be a sequence of token ids, got int$"),
        (np.zeros((1, 2), np.int64), r"^output\.token_ids must be a 1-d sequence of token ids, got shape \[1, 2\]$"),
        (np.array([1.0]), r"^output\.token_ids\.dtype must be an integer dtype \(token ids\), got float64$"),
        (MA.array([1, 2], mask=[0, 1]), r"^output\.token_ids must be an array without a mask"),
    ],
)
def test_malformed_token_ids_are_named(token_ids: Any, message: str) -> None:
    with pytest.raises(EncodeError, match=message):
        encode_completion(_duck(token_ids=token_ids, logprobs=None))


def test_token_ids_as_tensors() -> None:
    torch: Any = pytest.importorskip("torch")
    assert encode_completion(_duck(token_ids=torch.tensor([3, 4]), logprobs=None))["token_ids"] == [3, 4]
    with pytest.raises(EncodeError, match=r"^output\.token_ids\.device must be a device holding data"):
        encode_completion(_duck(token_ids=torch.zeros(2, dtype=torch.long, device="meta"), logprobs=None))
    with pytest.raises(EncodeError, match=r"^output\.token_ids\.dtype must be a dtype NumPy can hold"):
        encode_completion(_duck(token_ids=torch.zeros(2, dtype=torch.bfloat16), logprobs=None))
    with pytest.raises(EncodeError, match=r"^output\.token_ids\.dtype must be an integer dtype"):
        encode_completion(_duck(token_ids=torch.tensor([1.0, 2.0], requires_grad=True), logprobs=None))


# --- sampled_logprobs ---------------------------------------------------------------------------------------

# One position per case the seed floors, then finite values that must survive bit for bit.
TOKENS = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
POSITIONS: list[Any] = [
    None,  # position None
    {},  # position {}
    {99: Logprob(logprob=-0.1)},  # sampled id missing from its dict
    {13: Logprob(logprob=-math.inf, rank=1)},
    {14: Logprob(logprob=math.inf)},
    {15: Logprob(logprob=math.nan)},
    {16: Logprob(logprob=None)},  # a Logprob without a value
    {17: Logprob(logprob=-0.0, rank=1), 3: Logprob(logprob=-5.0, rank=2)},
    {18: Logprob(logprob=-1e-300)},
    {19: Logprob(logprob=struct.unpack("<d", bytes.fromhex("0100000000000080"))[0])},  # -5e-324, subnormal
    {2: Logprob(logprob=-3.0, rank=1), 20: Logprob(logprob=-7.25, rank=4, decoded_token="x")},
]
EXPECTED_FINITE = {7: -0.0, 8: -1e-300, 9: -5e-324, 10: -7.25}


def _check_expected(values: Any) -> None:
    assert values.dtype == np.float64
    assert len(values) == len(TOKENS)
    for i, value in enumerate(values.tolist()):
        if i in EXPECTED_FINITE:
            assert struct.pack("<d", value) == struct.pack("<d", EXPECTED_FINITE[i]), i
        else:
            assert value == FLOOR, i


def test_list_form_every_missing_and_non_finite_case() -> None:
    result = sampled_logprobs(_completion(token_ids=TOKENS, logprobs=POSITIONS))
    assert result is not None
    _check_expected(result.values)
    assert result.num_clamped == 7


def test_list_form_entry_that_is_none() -> None:
    result = sampled_logprobs(_completion(token_ids=[5, 6], logprobs=[{5: None}, {6: Logprob(logprob=-2.0)}]))
    assert result is not None
    assert result.values.tolist() == [FLOOR, -2.0]
    assert result.num_clamped == 1


def test_flat_form_gives_the_same_answer() -> None:
    # FlatLogprobs cannot store a None entry; every other case converts as vLLM itself would build it.
    flat = _flat(POSITIONS)
    assert isinstance(flat, FlatLogprobs)
    result = sampled_logprobs(_completion(token_ids=TOKENS, logprobs=flat))
    assert result is not None
    _check_expected(result.values)
    assert result.num_clamped == 7


def test_flat_form_slice_and_gapped_indices() -> None:
    flat = _flat(POSITIONS)[3:9]  # a slice re-bases its indices
    result = sampled_logprobs(_completion(token_ids=TOKENS[3:9], logprobs=flat))
    assert result is not None
    assert result.values.tolist()[4:] == [-0.0, -1e-300]
    # Slices that skip entries and go out of order: each position reads only its own [start, end).
    gapped = FlatLogprobs(
        start_indices=[4, 0, 2],
        end_indices=[6, 2, 2],
        token_ids=[7, 8, 5, 5, 9, 9],
        logprobs=[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0],
        ranks=[1, 2, 1, 2, 1, 1],
        decoded_tokens=[None] * 6,
    )
    result = sampled_logprobs(_completion(token_ids=[9, 8, 5], logprobs=gapped))
    assert result is not None
    assert result.values.tolist() == [-6.0, -2.0, FLOOR]  # last duplicate wins, as in gapped[0]
    assert gapped[0][9].logprob == -6.0


def test_flat_form_matches_indexing_position_by_position() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(0, 30))
        tokens = rng.integers(0, 8, size=n).tolist()
        positions: list[Any] = []
        for token in tokens:
            k = int(rng.integers(0, 4))
            ids = rng.integers(0, 8, size=k).tolist() + ([token] if rng.random() < 0.6 else [])
            positions.append({i: Logprob(logprob=float(-rng.random() * 10), rank=r) for r, i in enumerate(ids)})
        flat = _flat(positions)
        result = sampled_logprobs(_completion(token_ids=tokens, logprobs=flat))
        assert result is not None
        expected = [flat[i][t].logprob if t in flat[i] else FLOOR for i, t in enumerate(tokens)]
        assert result.values.tolist() == expected


def test_logprobs_not_requested_is_none() -> None:
    assert sampled_logprobs(_completion(logprobs=None)) is None


def test_empty_completion() -> None:
    empties: list[Any] = [[], FlatLogprobs()]
    for empty in empties:
        result = sampled_logprobs(_completion(token_ids=[], logprobs=empty))
        assert result is not None
        assert result.values.shape == (0,)
        assert result.num_clamped == 0


@pytest.mark.parametrize("flat", [False, True], ids=["list", "flat"])
def test_length_mismatch_names_both_lengths(flat: bool) -> None:
    positions = [{1: Logprob(logprob=-1.0)}, {2: Logprob(logprob=-1.0)}]
    logprobs = _flat(positions) if flat else positions
    with pytest.raises(EncodeError, match=r"output\.logprobs must be one position per generated token \(3.*got 2"):
        sampled_logprobs(_completion(token_ids=[1, 2, 3], logprobs=logprobs))


def test_token_ids_as_array_and_tuple() -> None:
    positions = [{1: Logprob(logprob=-1.0)}, {2: Logprob(logprob=-2.0)}]
    for token_ids in (array.array("l", [1, 2]), np.array([1, 2], dtype=np.int32)):
        result = sampled_logprobs(_completion(token_ids=token_ids, logprobs=positions))
        assert result is not None
        assert result.values.tolist() == [-1.0, -2.0]


@pytest.mark.parametrize(
    ("token_ids", "logprobs", "message"),
    [
        ([1, 2], [{1: Logprob(logprob=-1.0)}, [2, -1.0]], r"output\.logprobs\[1\] must be a dict"),
        ([1], [{1: -1.0}], r"output\.logprobs\[0\]\[1\] must be a vLLM Logprob"),
        ([1, 2.0], [None, None], r"output\.token_ids\[1\] must be an integer token id, got 2\.0"),
        ([1, True], [None, None], r"output\.token_ids\[1\] must be an integer token id, got True"),
        ([1, -4], [None, None], r"output\.token_ids\[1\] must be a non-negative token id, got -4"),
        ([1], [{1: Logprob(logprob="x")}], r"output\.logprobs\[0\] must be a float or None"),
    ],
)
def test_malformed_list_form(token_ids: Any, logprobs: Any, message: str) -> None:
    with pytest.raises(EncodeError, match=message):
        sampled_logprobs(_completion(token_ids=token_ids, logprobs=logprobs))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"start_indices": [0, 1], "end_indices": [1]}, r"end_indices must be 2 entries"),
        ({"start_indices": [0, 1], "end_indices": [1, 3]}, r"logprobs\[1\] must be a slice \[start, end\) of the 2"),
        ({"start_indices": [1, 0], "end_indices": [0, 1]}, r"logprobs\[0\] must be a slice"),
        ({"token_ids": [1]}, r"token_ids must be 2 entries, as logprobs"),
        ({"token_ids": [1.0, 2.0]}, r"logprobs\.token_ids\[0\] must be an integer token id, got 1\.0"),
        ({"start_indices": ["0", "1"]}, r"start_indices\[0\] must be an integer index, got '0'"),
        ({"token_ids": [[1], [2]]}, r"logprobs\.token_ids\[0\] must be an integer token id, got \[1\]"),
        ({"start_indices": [[0], [0, 1]]}, r"start_indices\[0\] must be an integer index, got \[0\]"),
        (
            {"start_indices": [2**64 - 1, 1]},
            r"start_indices\[0\] must be an index below 2\*\*63, got 18446744073709551615",
        ),
        ({"start_indices": None}, r"output\.logprobs\.start_indices must be a sequence of indices, got NoneType"),
        ({"end_indices": (x for x in [1, 2])}, r"end_indices must be a sequence of indices, got generator"),
        ({"token_ids": None}, r"output\.logprobs\.token_ids must be a sequence of token ids, got NoneType"),
        ({"logprobs": None}, r"output\.logprobs\.logprobs must be a sequence of float \| None"),
        ({"logprobs": np.array([[-1.0, -2.0]])}, r"output\.logprobs\.logprobs must be a flat \(1-d\) list"),
        ({"start_indices": [0, 0], "end_indices": [2, 2]}, r"end_indices must be slices that share no entry"),
    ],
)
def test_malformed_flat_form(fields: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {
        "start_indices": [0, 1],
        "end_indices": [1, 2],
        "token_ids": [1, 2],
        "logprobs": [-1.0, -2.0],
        "ranks": [1, 1],
        "decoded_tokens": [None, None],
    }
    flat = FlatLogprobs(**{**base, **fields})
    with pytest.raises(EncodeError, match=message):
        sampled_logprobs(_completion(token_ids=[1, 2], logprobs=flat))


def test_warning_names_the_request(caplog: pytest.LogCaptureFixture) -> None:
    out = _completion(token_ids=TOKENS, logprobs=POSITIONS)
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        sampled_logprobs(out)  # a CompletionOutput has no id, and none was given: nothing logged
        assert caplog.records == []
        sampled_logprobs(_request(out, request_id="req-42"))
        sampled_logprobs(out, request_id="explicit-1")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "7/11" in messages[0]
    assert "'req-42'" in messages[0]
    assert "'explicit-1'" in messages[1]


def test_custom_floor() -> None:
    result = sampled_logprobs(_completion(token_ids=[1], logprobs=[None]), floor=-50.0)
    assert result is not None
    assert result.values.tolist() == [-50.0]
    with pytest.raises(R3WireError, match="floor must be a finite float"):
        sampled_logprobs(_completion(token_ids=[1], logprobs=[None]), floor=math.nan)


# --- encode_completion / decode_completion ------------------------------------------------------------------


@pytest.mark.parametrize("logprobs_format", ["content", "envelope"])
@pytest.mark.parametrize("flat", [False, True], ids=["list", "flat"])
def test_completion_round_trip(logprobs_format: Any, flat: bool) -> None:
    routes = _ids(len(TOKENS) + 3, num_experts=384, dtype=np.uint16)
    logprobs = _flat(POSITIONS) if flat else POSITIONS
    out = _completion(token_ids=TOKENS, logprobs=logprobs, routes=routes)
    fragment = encode_completion(out, num_experts=384, logprobs_format=logprobs_format)
    assert set(fragment) == {"token_ids", "logprobs", "routed_experts"}
    assert fragment["token_ids"] == TOKENS
    assert fragment["routed_experts"]["dtype"] == "int16"
    text = orjson.dumps(fragment)
    assert b"null" not in text
    assert b"NaN" not in text
    back = decode_completion(text, num_experts=384)
    assert isinstance(back, Completion)
    assert back.token_ids.dtype == np.int64
    assert back.token_ids.tolist() == TOKENS
    assert back.logprobs is not None
    _check_expected(back.logprobs)
    assert back.num_clamped == 0  # the server floored them; nothing was missing on the wire
    assert back.routed_experts is not None
    assert back.routed_experts.tolist() == routes.tolist()
    assert back.routed_experts.flags.writeable


def test_content_shape_is_what_seed_clients_read() -> None:
    fragment = encode_completion(_completion(token_ids=[1, 2], logprobs=[None, {2: Logprob(logprob=-0.5)}]))
    assert fragment["logprobs"] == {"content": [{"logprob": FLOOR}, {"logprob": -0.5}]}
    assert fragment["routed_experts"] is None


def test_completion_without_logprobs_or_routes() -> None:
    fragment = encode_completion(_completion(token_ids=(4, 5)))
    assert fragment == {"token_ids": [4, 5], "logprobs": None, "routed_experts": None}
    back = decode_completion(orjson.dumps(fragment))
    assert back.token_ids.tolist() == [4, 5]
    assert back.logprobs is None
    assert back.routed_experts is None


def test_request_output_fragment_includes_prompt_rows(caplog: pytest.LogCaptureFixture) -> None:
    prompt, generated = _ids(4, dtype=np.int16), _ids(2, dtype=np.int16)
    request = _request(_completion(token_ids=[8, 9, 10], logprobs=[None, None, None], routes=generated))
    request.prompt_routed_experts = prompt
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        fragment = encode_completion(request, num_experts=128)
    assert "'req-7'" in caplog.records[0].getMessage()
    back = decode_completion(fragment, num_experts=128)
    assert back.routed_experts is not None
    assert back.routed_experts.tolist() == prompt.tolist() + generated.tolist()
    assert back.routed_experts.dtype == np.uint8


def test_encode_completion_checks_ids_against_num_experts() -> None:
    with pytest.raises(EncodeError, match=r"an expert id below num_experts=8"):
        encode_completion(_completion(routes=np.full((1, 1, 1), 8, dtype=np.uint8)), num_experts=8)


@pytest.mark.parametrize("num_experts", ["x", 0, True, 2**40])
def test_encode_completion_checks_num_experts_without_routes(num_experts: Any) -> None:
    with pytest.raises(R3WireError, match=r"^num_experts must be an integer in 1\.\.2147483648"):
        encode_completion(_completion(routes=None), num_experts=num_experts)


def test_encode_completion_rejects_unknown_format() -> None:
    with pytest.raises(R3WireError, match="logprobs_format must be 'content' or 'envelope', got 'json'"):
        encode_completion(_completion(), logprobs_format="json")  # type: ignore[arg-type]


def test_decode_completion_ignores_other_keys_and_floors_nulls(caplog: pytest.LogCaptureFixture) -> None:
    payload = {
        "text": "hi",
        "token_ids": [3, 4],
        "logprobs": {"content": [{"logprob": None}, {"logprob": -1.5}]},
        "finish_reason": "stop",
    }
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        back = decode_completion(payload, request_id="old-server")
    assert back.logprobs is not None
    assert back.logprobs.tolist() == [FLOOR, -1.5]
    assert back.num_clamped == 1
    assert "'old-server'" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, r"token_ids must be present"),
        ({"token_ids": "1,2"}, r"token_ids must be an array of token ids, got str"),
        ({"token_ids": [1, 2.5]}, r"token_ids\[1\] must be an integer token id, got 2\.5"),
        ({"token_ids": [1, False]}, r"token_ids\[1\] must be an integer token id, got False"),
        ({"token_ids": [1, None]}, r"token_ids\[1\] must be an integer token id, got None"),
        ({"token_ids": [-1]}, r"token_ids\[0\] must be a non-negative token id, got -1"),
        ({"token_ids": [2**64]}, r"token_ids\[0\] must be a token id below 2\*\*63"),
        ({"token_ids": [1], "logprobs": [-1.0]}, r"logprobs must be an r3wire\.logprobs envelope"),
        ({"token_ids": [1], "logprobs": {"content": []}}, r"logprobs must be one logprob per token \(1"),
        ({"token_ids": [1], "routed_experts": {"data": ""}}, r"must be present|missing"),
        ("[1, 2]", r"must be"),
        (b"{", r"must be"),
    ],
)
def test_decode_completion_malformed(payload: Any, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode_completion(payload)


def test_decode_completion_envelope_longer_than_token_ids() -> None:
    fragment = encode_completion(_completion(token_ids=[1, 2], logprobs=[None, None]), logprobs_format="envelope")
    fragment["token_ids"] = [1]
    message = r"^logprobs must be one logprob per token \(1, the length of token_ids\), got 2 values$"
    with pytest.raises(DecodeError, match=message) as caught:
        decode_completion(fragment)
    assert caught.value.field == "logprobs"
    fragment["token_ids"] = []
    with pytest.raises(DecodeError, match=r"^logprobs must be one logprob per token \(0, .*got 2 values$"):
        decode_completion(fragment)
    fragment["token_ids"] = [1, 2, 3]
    with pytest.raises(DecodeError, match=r"^logprobs must be one logprob per token \(3, .*got 2 values$"):
        decode_completion(fragment)


@pytest.mark.parametrize("logprobs_format", ["content", "envelope"])
def test_empty_completion_round_trip(logprobs_format: Any) -> None:
    # max_tokens=0, an abort, or an n>1 sibling that stopped at once: no generated token.
    request = _request(
        _completion(token_ids=[1], logprobs=[{1: Logprob(logprob=-0.5)}]),
        _completion(token_ids=[], logprobs=FlatLogprobs(), index=1),
    )
    fragment = encode_completion(request, index=1, logprobs_format=logprobs_format)
    for payload in (fragment, orjson.dumps(fragment)):
        back = decode_completion(payload)
        assert back.token_ids.shape == (0,)
        assert back.logprobs is not None
        assert back.logprobs.shape == (0,)


@pytest.mark.parametrize(
    ("member", "value", "message"),
    [
        ("logprobs", encode_logprobs(np.zeros((1, 1))), r"^logprobs\.shape must be an array of 1 non-negative"),
        ("logprobs", {"content": [5]}, r"^logprobs\.content\[0\] must be an object"),
        (
            "logprobs",
            {**encode_logprobs([-1.0]), "version": 99},
            r"^logprobs\.version 99 of schema 'r3wire\.logprobs' is not supported",
        ),
        ("routed_experts", 5, r"^routed_experts must be a JSON object or its text .*got int$"),
        ("routed_experts", {**encode_routes(np.zeros((1, 1, 1), np.uint8)), "data": "!"}, r"^routed_experts\.data"),
    ],
)
def test_decode_completion_names_the_member_that_failed(member: str, value: Any, message: str) -> None:
    with pytest.raises(DecodeError, match=message) as caught:
        decode_completion({"token_ids": [1], member: value})
    assert caught.value.field is not None
    assert caught.value.field.startswith(member)
    if "version" in message:
        assert isinstance(caught.value, UnsupportedVersionError)  # still the error a caller catches to upgrade


def test_decode_completion_reads_in_process_numpy_token_ids() -> None:
    back = decode_completion({"token_ids": [np.int64(1), np.uint64(2), 3]})
    assert back.token_ids.tolist() == [1, 2, 3]
    with pytest.raises(DecodeError, match=r"^token_ids\[0\] must be a token id below 2\*\*63"):
        decode_completion({"token_ids": [np.uint64(2**63)]})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"floor": "bad"}, r"^floor must be a finite float"),
        ({"floor": math.inf}, r"^floor must be a finite float"),
        ({"request_id": 5}, r"^request_id must be a string or None, got 5$"),
        ({"num_experts": "x"}, r"^num_experts must be an integer"),
        ({"num_experts": 0}, r"^num_experts must be an integer"),
        ({"max_elements": "x"}, r"^max_elements must be an integer"),
        ({"max_elements": -1}, r"^max_elements must be an integer"),
    ],
)
@pytest.mark.parametrize(
    "payload",
    [{"token_ids": [1]}, {"token_ids": [1], "logprobs": encode_logprobs([-1.0])}],
    ids=["bare", "envelope"],
)
def test_decode_completion_checks_every_argument_up_front(
    payload: dict[str, Any], arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(R3WireError, match=message) as caught:
        decode_completion(payload, **arguments)
    assert type(caught.value) is R3WireError  # the caller's argument, not the payload
