"""Property tests for ``encode_routes_frame(..., out=)``: the frame written into a caller's buffer is the default
``bytes`` frame, byte for byte, or fails with the same error; ``frame_size`` is its length; nothing outside the
frame's bytes is touched."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _fuzzing import in_layout
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from r3wire import EncodeError, encode_routes_frame, frame_size
from r3wire.frame import FRAME_HEADER_SIZE

pytestmark = pytest.mark.property

SOURCE_DTYPES = ["u1", "i1", "<u2", ">u2", "<i2", ">i2", "<i4", ">i4", "<u4", "<i8", ">i8", "<u8"]
BOUNDARY_IDS = [0, 1, 7, 8, 127, 128, 255, 256, 383, 384, 32767, 32768, 2**31 - 1]


@st.composite
def routes_cases(draw: st.DrawFn) -> tuple[np.ndarray[Any, Any], int | None, bool]:
    """Routes of any integer dtype and memory layout, mostly valid ids, sometimes one that breaks a rule."""
    shape = draw(st.tuples(st.integers(0, 7), st.integers(1, 5), st.integers(1, 5)))
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(SOURCE_DTYPES)))
    info = np.iinfo(dtype.type)
    num_experts = draw(st.one_of(st.none(), st.sampled_from([1, 8, 128, 256, 384, 32768, 2**20])))
    high = min(int(info.max), (num_experts or 2**31) - 1)
    ids = st.one_of(st.sampled_from([b for b in BOUNDARY_IDS if b <= high]), st.integers(0, high))
    routes: np.ndarray[Any, Any] = draw(hnp.arrays(dtype, shape, elements=ids))
    if routes.size and draw(st.booleans(), label="break an id"):
        where = tuple(draw(st.integers(0, n - 1)) for n in shape)
        bad = [v for v in (-1, int(info.min), num_experts, 2**31, int(info.max)) if v is not None]
        routes[where] = draw(st.sampled_from([v for v in bad if info.min <= v <= info.max]))
    return in_layout(draw, routes), num_experts, draw(st.booleans())


def _outcome(encode: Any) -> Any:
    """What ``encode()`` returns as bytes, or its EncodeError as ``(field, message)``."""
    try:
        return bytes(encode())
    except EncodeError as exc:
        return (exc.field, str(exc))


@given(routes_cases(), st.integers(0, 7), st.integers(-3, 16), st.sampled_from(["uint8", "bytearray", "int32"]))
def test_out_agrees_with_the_default(
    case: tuple[np.ndarray[Any, Any], int | None, bool], offset: int, slack: int, kind: str
) -> None:
    routes, num_experts, pack = case
    default = _outcome(lambda: encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack))
    size = len(default) if isinstance(default, bytes) else FRAME_HEADER_SIZE + routes.size * 4
    total = offset + max(size + slack, 0)
    memory: Any = {
        "uint8": np.full(total, 0xA5, np.uint8),
        "bytearray": bytearray(b"\xa5" * total),
        "int32": np.full(total // 4 + 1, -0x5A5A5A5B, np.int32),  # 0xA5A5A5A5
    }[kind]
    whole = np.frombuffer(memory, np.uint8)
    before = whole.copy()
    out = whole[offset : offset + max(size + slack, 0)]  # any alignment, maybe too small
    got = _outcome(lambda: encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack, out=out))
    if isinstance(default, bytes) and out.size >= size:
        assert got == default
        assert frame_size(routes, num_experts=num_experts, pack_bits=pack) == size
        assert np.array_equal(whole[offset + size :], before[offset + size :])
    elif isinstance(default, bytes):  # too small: refused before a byte is written
        assert got == ("out", f"out must be a buffer of at least {size} bytes (the frame), got {out.size} bytes")
        assert np.array_equal(whole, before)
    else:  # the routes' own error, or (ids not read yet: num_experts given) the size of out
        assert got == default or got[0] == "out"
        assert whole[offset : offset + 4].tobytes() != b"R3WF"  # a failed encode leaves no valid header
    assert np.array_equal(whole[:offset], before[:offset])


@given(routes_cases())
def test_frame_size_is_the_frame_length_or_the_same_error(case: tuple[np.ndarray[Any, Any], int | None, bool]) -> None:
    routes, num_experts, pack = case
    default = _outcome(lambda: encode_routes_frame(routes, num_experts=num_experts, pack_bits=pack))
    size = _outcome(lambda: frame_size(routes, num_experts=num_experts, pack_bits=pack).to_bytes(8, "little"))
    if isinstance(default, bytes):
        assert size == len(default).to_bytes(8, "little")
    elif num_experts is None:  # the size depends on the largest id: the ids are read, and the error is the same
        assert size == default
    else:  # reads no id: only an error of the arguments, dtype or shape, which the encoder gives the same
        assert size == default or isinstance(size, bytes)
