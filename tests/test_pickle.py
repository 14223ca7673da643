"""pickle protocol 5: the library's containers hand their arrays out of band (what Ray does), losslessly."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

import r3wire
from r3wire import formats
from r3wire.synthetic import synthetic_routes
from r3wire.vllm import Completion


def _round_trip(obj: Any) -> tuple[Any, int, int]:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(data, buffers=buffers), len(buffers), len(data)


def test_decoded_routes_travel_out_of_band() -> None:
    routes = r3wire.decode_routes(r3wire.encode_routes(synthetic_routes(64, layers=4), num_experts=128))
    back, num_buffers, inline = _round_trip(routes)
    assert num_buffers == 1
    assert inline < 512  # the ids are not in the pickle stream itself
    assert np.array_equal(back, routes)
    assert back.dtype == routes.dtype


@pytest.mark.parametrize(
    "make",
    [
        lambda routes: formats.read(formats.write(routes, "vllm-npy")),
        lambda routes: r3wire.clamp_logprobs(np.array([-0.5, np.nan, -1.0])),
        lambda routes: Completion(token_ids=np.arange(3), logprobs=np.zeros(3), num_clamped=0, routed_experts=routes),
    ],
    ids=["ReadResult", "ClampResult", "Completion"],
)
def test_containers_pickle_their_arrays_out_of_band(make: Any) -> None:
    obj = make(synthetic_routes(32, layers=3, dtype=np.uint8))
    arrays = [
        v
        for v in (getattr(obj, f, None) for f in ("routes", "values", "token_ids", "logprobs", "routed_experts"))
        if isinstance(v, np.ndarray)
    ]
    back, num_buffers, _ = _round_trip(obj)
    assert type(back) is type(obj)
    assert num_buffers == len(arrays) >= 1
    for name in ("routes", "values", "token_ids", "logprobs", "routed_experts", "start", "format", "num_clamped"):
        if hasattr(obj, name):
            before, after = getattr(obj, name), getattr(back, name)
            if isinstance(before, np.ndarray):
                assert after.dtype == before.dtype
                assert after.tobytes() == before.tobytes()
            else:
                assert after == before
