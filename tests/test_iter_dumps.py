"""r3wire.iter_dumps: the same bytes as dumps, in chunks, with arrays checked and narrowed piece by piece."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import EncodeError, encode_array, encode_routes
from r3wire.response import _CHUNK_BYTES

PIECE = _CHUNK_BYTES // 4  # int32 ids per piece
rng = np.random.default_rng(5)


def _routes(ids: int, high: int, dtype: Any = np.int32, top_k: int = 3) -> np.ndarray[Any, Any]:
    rows = max(ids // (2 * top_k), 1)
    return rng.integers(0, high, (rows, 2, top_k)).astype(dtype)


CASES = {
    "uint8 wire from int32": _routes(3 * PIECE + 6, 200),
    "int16 wire from int32": _routes(2 * PIECE + 3, 384),
    "int16 wire from uint16 (same bytes)": _routes(2 * PIECE, 384, np.uint16),
    "int32 wire from uint32 (same bytes)": _routes(PIECE + 30, 40000, np.uint32),
    "big-endian int64": _routes(PIECE + 12, 300, ">i8"),
    "not contiguous": _routes(4 * PIECE, 100, np.int32, top_k=6)[:, :, ::2],
    "exactly one piece": _routes(PIECE, 250, np.uint8),
    "one id over a piece": np.arange(PIECE + 1, dtype=np.int64).reshape(-1, 1, 1) % 256,
}


@pytest.mark.parametrize("routes", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("num_experts", [None, 40000])
@pytest.mark.parametrize("pack_bits", [False, True])
def test_chunks_concatenate_to_dumps_and_to_the_envelope(
    routes: np.ndarray[Any, Any], num_experts: int | None, pack_bits: bool
) -> None:
    doc = {"id": "x", "choices": [{"routed_experts": routes, "values": routes.astype(">f8"), "n": [1, 2]}]}
    chunks = list(r3wire.iter_dumps(doc, num_experts=num_experts, pack_bits=pack_bits))
    body = r3wire.dumps(doc, num_experts=num_experts, pack_bits=pack_bits)
    assert b"".join(chunks) == body
    assert all(type(c) is bytes for c in chunks)
    assert all(chunks)
    assert max(map(len, chunks)) <= _CHUNK_BYTES * 4 // 3  # cache-sized pieces, never the whole array
    expected = {
        "id": "x",
        "choices": [
            {
                "routed_experts": encode_routes(routes, num_experts=num_experts, pack_bits=pack_bits),
                "values": encode_array(routes.astype(">f8")),
                "n": [1, 2],
            }
        ],
    }
    assert body == orjson.dumps(expected)
    back = r3wire.loads(body)["choices"][0]["routed_experts"]
    assert np.array_equal(back, routes)


def test_uint16_ids_travel_as_the_same_bytes_as_int16() -> None:
    ids = _routes(3 * PIECE, 30000, np.uint16)
    assert r3wire.dumps({"routed_experts": ids}) == r3wire.dumps({"routed_experts": ids.astype(np.int16)})
    assert r3wire.dumps({"routed_experts": ids}, num_experts=30000) == r3wire.dumps(
        {"routed_experts": ids.astype(np.int32)}, num_experts=30000
    )


@pytest.mark.parametrize("bad", [-1, 384, 2**31 - 1])
def test_an_id_out_of_bounds_late_in_a_stream_is_named(bad: int) -> None:
    routes = _routes(3 * PIECE, 384, np.int64, top_k=4)
    rows = routes.shape[0]
    routes[rows - 1, 1, 3] = bad
    doc = {"choices": [{"routed_experts": routes}]}
    field = f"$.choices[0].routed_experts[{rows - 1}, 1, 3]"
    with pytest.raises(EncodeError) as info:
        r3wire.dumps(doc, num_experts=384)
    assert info.value.field == field
    chunks = r3wire.iter_dumps(doc, num_experts=384)  # the walk is done; the ids are checked as they stream
    with pytest.raises(EncodeError) as streamed:
        b"".join(chunks)
    assert streamed.value.field == field
    assert str(streamed.value) == str(info.value)
    if bad < 0:
        with pytest.raises(EncodeError) as unknown:
            r3wire.iter_dumps(doc)  # without num_experts the dtype needs the largest id: checked at the call
        assert unknown.value.field == field
    else:  # a valid id without num_experts: it only widens the dtype
        back = r3wire.loads(b"".join(r3wire.iter_dumps(doc)))["choices"][0]["routed_experts"]
        assert np.array_equal(back, routes)


def test_errors_that_need_no_ids_come_at_the_call() -> None:
    with pytest.raises(EncodeError, match="finite"):
        r3wire.iter_dumps({"x": float("nan")})
    with pytest.raises(r3wire.R3WireError, match="pack_bits"):
        r3wire.iter_dumps({}, pack_bits=None)  # type: ignore[arg-type]


def test_small_documents_are_one_chunk() -> None:
    doc = {"routed_experts": np.ones((2, 2, 2), np.int32), "x": [1.5]}
    assert list(r3wire.iter_dumps(doc)) == [r3wire.dumps(doc)]


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8"])
@pytest.mark.parametrize("clamp", [False, True])
def test_logprobs_stream_in_pieces_like_any_array(dtype: str, clamp: bool) -> None:
    # Arrays under logprobs_keys were one base64 string: one chunk out of iter_dumps, and several body-sized
    # copies in dumps (a peak of 13x the body).
    logprobs = rng.standard_normal(3 * PIECE + 7).astype(dtype)
    if clamp:
        logprobs[PIECE + 3] = np.nan
    doc = {"choices": [{"logprobs": logprobs, "token_ids": [1, 2]}]}
    chunks = list(r3wire.iter_dumps(doc, clamp_logprobs=clamp))
    body = r3wire.dumps(doc, clamp_logprobs=clamp)
    assert b"".join(chunks) == body
    assert len(chunks) > 3
    assert max(map(len, chunks)) <= _CHUNK_BYTES * 4 // 3
    expected = r3wire.encode_logprobs(logprobs, clamp=clamp)
    assert body == orjson.dumps({"choices": [{"logprobs": expected, "token_ids": [1, 2]}]})
    # As much memory as the same array under a plain key, plus the clamped or byte-swapped values (once) and the
    # finiteness mask.
    plain = _peak(lambda: r3wire.dumps({"choices": [{"values": logprobs, "token_ids": [1, 2]}]}))
    copies = 1 if clamp or dtype[0] == ">" else 0
    assert _peak(lambda: r3wire.dumps(doc, clamp_logprobs=clamp)) < plain + logprobs.nbytes * copies + logprobs.size
    if not clamp:
        logprobs[-1] = np.inf
        with pytest.raises(EncodeError) as info:
            list(r3wire.iter_dumps(doc))
        assert info.value.field == f"$.choices[0].logprobs[{logprobs.size - 1}]"


def _peak(call: Any) -> int:
    tracemalloc.start()
    try:
        call()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def test_arrays_changed_before_they_stream_are_checked_again() -> None:
    # An engine reusing its buffer before the body is streamed: the ids were checked (and uint8 chosen) at the call.
    routes = (np.arange(600000).reshape(-1, 1, 2) % 100).astype(np.int32)
    chunks = r3wire.iter_dumps({"routed_experts": routes})
    routes[5, 0, 0] = 300  # was wrapped to 44
    with pytest.raises(EncodeError) as info:
        b"".join(chunks)
    assert info.value.field == "$.routed_experts[5, 0, 0]"
    assert info.value.got == "300"
    routes[5, 0, 0] = 5
    chunks = r3wire.iter_dumps({"routed_experts": routes})
    routes[5, 0, 0] = -3  # was wrapped to 253
    with pytest.raises(EncodeError, match="non-negative") as negative:
        b"".join(chunks)
    assert negative.value.field == "$.routed_experts[5, 0, 0]"
    routes[5, 0, 0] = 5
    chunks = r3wire.iter_dumps({"routed_experts": routes})
    routes[6, 0, 0] = 99  # a change that breaks no rule is sent as it is when streamed
    assert np.array_equal(r3wire.loads(b"".join(chunks))["routed_experts"], routes)
    # int16 chosen for the largest id; without it the ids need only uint8, which a receiver would require.
    routes[0, 0, 0] = 300
    chunks = r3wire.iter_dumps({"routed_experts": routes})
    routes[0, 0, 0] = 0
    with pytest.raises(EncodeError) as needed:
        b"".join(chunks)
    assert needed.value.field == "$.routed_experts"
    logprobs = -np.ones(500000)
    chunks = r3wire.iter_dumps({"choices": [{"logprobs": logprobs}]})
    logprobs[400000] = np.nan
    with pytest.raises(EncodeError) as late:
        b"".join(chunks)
    assert late.value.field == "$.choices[0].logprobs[400000]"
    assert late.value.got == "nan (bits 0x7ff8000000000000)"
    # dumps reads the arrays within the call: its bytes are iter_dumps' for an unchanged array.
    logprobs[400000] = -0.25
    assert b"".join(r3wire.iter_dumps({"logprobs": logprobs})) == r3wire.dumps({"logprobs": logprobs})
