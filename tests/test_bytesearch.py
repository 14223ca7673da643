"""The one-byte search loads uses to find a blob's end: memchr and the NumPy fallback agree with bytes.find."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import _bytesearch
from r3wire._bytesearch import find_byte


def _flat(data: bytes) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.frombuffer(data, dtype=np.uint8)


def test_memchr_is_found_on_this_platform() -> None:
    # CI runs on Linux, where the process's own symbols hold memchr: the fast path is the one tested below.
    assert _bytesearch._memchr() is not None


@given(data=st.binary(max_size=600), byte=st.integers(0, 255), start=st.integers(0, 700))
def test_find_byte_agrees_with_bytes_find(data: bytes, byte: int, start: int) -> None:
    assert find_byte(_flat(data), byte, start) == data.find(bytes([byte]), start)


@given(data=st.binary(max_size=600), byte=st.integers(0, 255), start=st.integers(0, 700))
def test_numpy_fallback_agrees_with_bytes_find(data: bytes, byte: int, start: int) -> None:
    assert _bytesearch._find_byte_numpy(_flat(data), byte, start) == data.find(bytes([byte]), start)


@pytest.mark.parametrize("at", [0, 1, (1 << 18) - 1, 1 << 18, (1 << 18) + 1, 3 * (1 << 18) + 5, -1])
@pytest.mark.parametrize("use_memchr", [True, False])
def test_across_pieces_and_in_a_view(at: int, use_memchr: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Piece boundaries of the NumPy search, and a view that starts inside a larger buffer: only its bytes count.
    if not use_memchr:
        monkeypatch.setattr(_bytesearch, "_memchr", lambda: None)
    whole = np.full(4 * (1 << 18) + 64, ord("A"), dtype=np.uint8)
    whole[7] = ord('"')  # before the view: never found
    view = whole[16:-16]
    if at >= 0:
        view[at] = ord('"')
    whole[-3] = ord('"')  # after the view: never found
    assert find_byte(view, ord('"'), 0) == at
    assert find_byte(view, ord('"'), view.size) == -1


def test_loads_finds_blobs_without_memchr(monkeypatch: pytest.MonkeyPatch) -> None:
    import r3wire

    routes = np.arange(3 * 4096 * 8, dtype=np.int32).reshape(-1, 4, 8) % 128
    body = r3wire.dumps({"a": {"routed_experts": routes}, "b": [{"routed_experts": routes[::-1]}]}, num_experts=128)
    buffer = np.frombuffer(body, dtype=np.uint8).copy()  # a NumPy receive buffer: no bytes.find to fall back on
    expected = r3wire.loads(body, num_experts=128)
    monkeypatch.setattr(_bytesearch, "_memchr", lambda: None)
    got = r3wire.loads(buffer, num_experts=128)
    assert np.array_equal(got["a"]["routed_experts"], expected["a"]["routed_experts"])
    assert np.array_equal(got["b"][0]["routed_experts"], routes[::-1])
