"""Property tests for the binary buffers r3wire reads and writes raw (a frame, a bit stream, an ``out=``): whatever
the buffer's dtype, layout or kind, the call either works on plain-number memory or raises r3wire's own error
naming the argument. An object array written over crashed the interpreter; one read leaked heap addresses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import DecodeError, EncodeError, R3WireError, decode_routes_frame, encode_routes_frame
from r3wire.bitpack import pack_bits, unpack_bits

pytestmark = pytest.mark.property

MA: Any = np.ma  # untyped in NumPy's stubs

PLAIN: list[Any] = ["u1", "i1", "<u2", ">i2", "<i4", ">u4", "<i8", "<f2", ">f4", "<f8"]
NOT_PLAIN: list[Any] = [
    "O",
    "?",
    "<c8",
    "<M8[s]",
    "<m8[s]",
    "V4",
    "S4",
    "U1",
    [("a", "<i2"), ("b", "u1")],
    [("o", "O")],
]


@st.composite
def buffers(draw: st.DrawFn) -> tuple[Any, bool]:
    """A buffer of any dtype and layout, and whether r3wire may take it (plain numbers, C-contiguous, unmasked)."""
    spec = draw(st.sampled_from(PLAIN + NOT_PLAIN))
    dtype = np.dtype(spec)
    count = draw(st.integers(0, 96))
    if dtype.hasobject:
        array: np.ndarray[Any, Any] = np.empty(count, dtype)
        array[...] = None if dtype.fields else [object() for _ in range(count)]
    else:
        array = np.frombuffer(
            bytes(draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize))), dtype=dtype
        ).copy()
    taken = spec in PLAIN
    layout = draw(st.sampled_from(["plain", "strided", "masked", "memoryview"]))
    buffer: Any = array
    if layout == "strided" and count > 2:  # two or more elements: a one-element view is contiguous
        buffer, taken = array[::2], False
    elif layout == "masked":
        buffer, taken = MA.masked_array(array), False
    elif layout == "memoryview" and not dtype.hasobject and dtype.fields is None and dtype.kind not in "Mm":
        exported: Any = array  # the stubs of some NumPy releases do not type ndarray as a buffer
        buffer = memoryview(exported)
    return buffer, taken


def _routes() -> np.ndarray[Any, Any]:
    return np.arange(24, dtype=np.int32).reshape(2, 3, 4) % 7


def _raised(call: Callable[[], Any], error: type[R3WireError]) -> R3WireError | None:
    """The ``error`` ``call()`` raised, or None when it returned; any other exception fails the property."""
    try:
        call()
    except error as exc:
        return exc
    return None


@given(buffers())
def test_frame_out_takes_only_plain_number_memory(case: tuple[Any, bool]) -> None:
    buffer, taken = case
    error = _raised(lambda: encode_routes_frame(_routes(), num_experts=8, out=buffer), EncodeError)
    if error is None:
        assert taken, f"out={type(buffer).__name__} of {getattr(buffer, 'dtype', None)} was written over"
        frame = encode_routes_frame(_routes(), num_experts=8)
        assert bytes(memoryview(buffer).cast("B")[: len(frame)]) == frame
    else:
        assert error.field == "out"
        assert str(error).startswith("out must be ")


@given(buffers())
def test_frame_reader_reads_only_plain_number_memory(case: tuple[Any, bool]) -> None:
    buffer, taken = case
    error = _raised(lambda: decode_routes_frame(buffer), DecodeError)
    assert error is not None  # random bytes are never a frame
    if not taken:
        assert error.field is None
        assert "must be a contiguous bytes-like frame" in str(error)


@given(buffers())
def test_bit_streams_take_only_plain_number_memory(case: tuple[Any, bool]) -> None:
    buffer, taken = case
    error = _raised(lambda: unpack_bits(buffer, 0, 9, np.int16), DecodeError)
    if not taken:
        assert error is not None
        assert "must be a C-contiguous bytes-like object" in str(error)
    if isinstance(buffer, np.ndarray):
        written = _raised(lambda: pack_bits(np.zeros(0, np.int16), 9, out=buffer), EncodeError)
        if written is None:
            assert taken
            assert buffer.nbytes == 0
        else:
            assert written.field == "out"
