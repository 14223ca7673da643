"""The decoders' id check (docs/wire-format.md §8 step 10): which bad id is named, and what it says it got."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from r3wire import DecodeError, decode_routes, decode_routes_frame, encode_routes_frame


def _envelope(ids: np.ndarray[Any, Any], **extra: Any) -> dict[str, Any]:
    wire = ids.astype(ids.dtype.newbyteorder("<"))
    data = base64.b64encode(wire.tobytes()).decode()
    return {
        "data": data,
        "shape": list(ids.shape),
        "dtype": str(ids.dtype),
        "schema": "r3wire.routes",
        "version": 1,
    } | extra


def _frame(ids: np.ndarray[Any, Any]) -> bytes:
    """The frame of ``ids`` (int16, at most 384 experts): encoded valid, then the data overwritten."""
    frame = bytearray(encode_routes_frame(np.zeros(ids.shape, np.int16), num_experts=384))
    frame[32:] = ids.astype("<i2").tobytes()
    return bytes(frame)


def _readers(ids: np.ndarray[Any, Any]) -> list[Callable[[], np.ndarray[Any, Any]]]:
    """The envelope and the frame carrying int16 ``ids`` of a 384-expert model."""
    return [lambda: decode_routes(_envelope(ids, num_experts=384)), lambda: decode_routes_frame(_frame(ids))]


def test_a_late_negative_id_is_named_before_an_early_one_out_of_range() -> None:
    ids = np.zeros((600, 60, 8), np.int16)  # 288,000 ids: the negative one is in a later piece of the search
    ids[0, 0, 1] = 500
    ids[599, 59, 7] = -3
    ids[599, 0, 0] = -7
    for read in _readers(ids):
        with pytest.raises(DecodeError, match=r"^data\[599, 0, 0\] must be a non-negative expert id, got -7$"):
            read()


def test_the_error_shows_the_value_at_the_named_position() -> None:
    """Not the largest id in the array (which is elsewhere): the value the field names."""
    ids = np.zeros((2, 3, 4), np.int16)
    ids[0, 1, 2] = 400
    ids[1, 2, 3] = 9000
    for read in _readers(ids):
        with pytest.raises(DecodeError, match=r"^data\[0, 1, 2\] must be an expert id below num_experts=384, got 400$"):
            read()
    ids[0, 1, 2] = -2
    ids[1, 0, 0] = -30000
    with pytest.raises(DecodeError, match=r"^data\[0, 1, 2\] must be a non-negative expert id, got -2$"):
        decode_routes(_envelope(ids))


@pytest.mark.parametrize("num_experts", [None, 256])
def test_uint8_ids_need_no_bound_check_at_or_above_256_experts(num_experts: int | None) -> None:
    ids = np.arange(256, dtype=np.uint8).reshape(4, 8, 8)
    extra = {} if num_experts is None else {"num_experts": num_experts}
    assert np.array_equal(decode_routes(_envelope(ids, **extra), num_experts=num_experts), ids)


def test_the_canonical_rules_use_the_largest_id() -> None:
    ids = np.array([[[3, 255]]], np.int16)
    with pytest.raises(DecodeError, match=r"^dtype must be 'uint8', the smallest dtype holding the largest id 255"):
        decode_routes(_envelope(ids))
    ids[0, 0, 0] = 256
    assert decode_routes(_envelope(ids)).tolist() == [[[256, 255]]]
