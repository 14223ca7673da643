"""Issue 11.2: a Fireworks r3/v1 read (every selector mode and dtype, raw or base64, bare or in the trace
wrapper) peaks at no more than the arrays it returns plus a few MiB of chunks: the stream is inflated straight
into the output, and a BITMAP's compact matrix is scattered block by block, never held whole. Token 0's matrix
(ALL, SUFFIX from token 0, BITMAP bit 0), which no forward pass produced, is inflated in chunks and dropped."""

from __future__ import annotations

import base64
import struct
import tracemalloc
from typing import Any

import numpy as np
import pytest

from r3wire.formats import ReadResult, read, write

pytest.importorskip("zstandard")

MIB = 1 << 20
# Big enough that the old reader's doubling buffer (about 1.33x) and its whole compact BITMAP matrix (2x) both
# exceed output + SLACK; small enough for a shared CI core.
TOKENS, LAYERS, TOP_K = 2**16, 48, 8
SLACK = 4 * MIB


def _routes(dtype: str) -> np.ndarray[Any, Any]:
    # A repeating pattern: compresses to a few KB, and a misplaced row or byte shows up as a mismatch.
    high = 256 if dtype == "uint8" else 65536
    rows = (np.arange(61 * LAYERS * TOP_K, dtype=np.uint64) * 2654435761 >> 7) % high
    period = rows.astype(dtype).reshape(61, LAYERS, TOP_K)
    routes: np.ndarray[Any, Any] = period[np.arange(TOKENS) % 61]
    return routes


def _with_token_0(mode: int, routes: np.ndarray[Any, Any]) -> str:
    """An r3/v1 payload built by hand whose first matrix is token 0's entry (ALL, SUFFIX from token 0, BITMAP with
    bit 0 set), which the reader inflates and drops: ``routes`` are the rows of tokens 1 .. n-1."""
    zstandard = pytest.importorskip("zstandard")
    n = routes.shape[0] + 1
    selector = np.packbits(np.ones(n, dtype=bool), bitorder="little").tobytes() if mode == 2 else b""
    matrices = np.concatenate([routes[-1:], routes]).astype(routes.dtype.newbyteorder("<")).tobytes()
    code = 1 if routes.dtype == np.uint8 else 2
    header = struct.pack("<4sBBBBIIIIQ", b"R3V1", 1, mode, code, 1, n, n, 0, len(selector), len(matrices))
    return base64.b64encode(zstandard.ZstdCompressor().compress(header + selector + matrices)).decode()


def _payload(mode: str, routes: np.ndarray[Any, Any]) -> tuple[str, np.ndarray[Any, Any] | None]:
    if mode == "ALL":
        return _with_token_0(0, routes), None
    if mode == "SUFFIX-from-token-0":
        return _with_token_0(1, routes), None
    if mode == "BITMAP-bit-0":
        return _with_token_0(2, routes), np.ones(TOKENS, dtype=bool)
    if mode == "rows-from-0":
        return write(routes, "fireworks-r3v1"), None
    if mode == "SUFFIX":
        return write(routes, "fireworks-r3v1", start=7, total_tokens=TOKENS + 9), None
    keep = np.ones(TOKENS, dtype=bool) if mode == "BITMAP-all" else np.arange(TOKENS) % 3 != 1
    return write(routes, "fireworks-r3v1", mask=keep), keep


def _peak_of(payload: object, name: str) -> tuple[int, ReadResult]:
    tracemalloc.start()
    try:
        result = read(payload, name, num_layers=LAYERS, top_k=TOP_K)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
@pytest.mark.parametrize(
    "mode", ["ALL", "SUFFIX-from-token-0", "BITMAP-bit-0", "rows-from-0", "SUFFIX", "BITMAP-all", "BITMAP-partial"]
)
def test_fireworks_read_peaks_at_its_output(mode: str, dtype: str) -> None:
    routes = _routes(dtype)
    text, keep = _payload(mode, routes)
    assert len(text) < 512 * 1024  # a small input whose output is 25 to 50 MB
    raw = base64.b64decode(text)
    trace = {"manifest": {"PayloadVersion": "r3/v1", "Compression": "zstd"}, "data": text}
    for payload, name in ((text, "fireworks-r3v1"), (raw, "fireworks-r3v1"), (trace, "fireworks-trace")):
        peak, result = _peak_of(payload, name)
        expected = routes if keep is None else np.where(keep[:, None, None], routes, 0)
        assert result.routes.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(result.routes, expected)
        if keep is not None:
            assert result.mask is not None
            np.testing.assert_array_equal(result.mask, keep)
        output = result.routes.nbytes + (0 if result.mask is None else result.mask.nbytes)
        assert peak <= output + SLACK, f"{name} {mode} {dtype}: peak {peak / output:.2f}x the output"
        del result
