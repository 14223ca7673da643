"""Fireworks ``r3/v1`` router-replay payloads: base64 of a zstd frame holding a 32-byte little-endian header,
a token selector and the replayed tokens' ``[layers, top_k]`` matrices back to back.

Layout from eval-protocol/python-sdk ``eval_protocol/adapters/r3_deserializer.py`` (see ``docs/formats.md``).
The header carries no layer count or top-k: the caller supplies both. Fireworks counts MoE layers only.

Matrices are indexed by the token they produced (Fireworks' own tools read them so: fw-ai-external/python-sdk
``deployment.py`` @04f221ac, fw-ai/cookbook ``router_replay.py`` @0ae69ef4, eval-protocol ``r3_deserializer.py``
@3393c047): token ``t``'s matrix is position ``t - 1``'s row, and token 0's entry, produced by no forward pass, is
inflated and dropped, never returned.

Decompression is bounded: a frame declaring more than :data:`MAX_DECOMPRESSED_BYTES` is refused before it is
decompressed, the r3/v1 header is read first, and its claims are checked against ``max_elements`` before the
output is allocated. The matrices are then inflated straight into that output (BITMAP: in bounded token blocks
scattered into the dense rows), so a read peaks at the arrays it returns plus a few chunks.
"""

from __future__ import annotations

import importlib
import io
import struct
from typing import Any, Final

import numpy as np

from r3wire._base64 import b64decode_strict, b64encode_text
from r3wire._validate import check_element_count, check_shape
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
from r3wire.formats._common import (
    ReadOptions,
    ReadResult,
    WriteOptions,
    b64_decoded_length,
    check_ids,
    choose_dtype,
    first_index,
    prepared_routes,
    text_of,
)

__all__ = [
    "HEADER",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_TOKEN_COUNT",
    "R3V1_MAGIC",
    "ZSTD_MAGIC",
    "ZSTD_MAGIC_B64",
    "read_fireworks",
    "write_fireworks",
]

HEADER: Final = struct.Struct("<4sBBBBIIIIQ")
"""magic, version, selector_mode, routing_dtype, flags, total_token_count, replayed_token_count,
replay_start_token, selector_byte_length, matrix_byte_length: 32 bytes, little-endian."""
R3V1_MAGIC: Final = b"R3V1"
R3V1_VERSION: Final = 1
SELECTOR_ALL: Final = 0
SELECTOR_SUFFIX: Final = 1
SELECTOR_BITMAP: Final = 2
_SELECTOR_NAMES: Final = {SELECTOR_ALL: "ALL", SELECTOR_SUFFIX: "SUFFIX", SELECTOR_BITMAP: "BITMAP"}
DTYPE_CODES: Final = {1: "uint8", 2: "uint16"}
_CODE_OF: Final = {name: code for code, name in DTYPE_CODES.items()}
# The reference tests write 0x01 with the comment "flags: little-endian"; the reference decoder ignores flags.
FLAG_LITTLE_ENDIAN: Final = 0x01
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
ZSTD_MAGIC_B64: Final = "KLUv/"  # the first five base64 characters of any text starting with ZSTD_MAGIC
MAX_DECOMPRESSED_BYTES: Final = 1 << 30
"""The most an r3/v1 payload may inflate to (1 GiB: a 32k-token Kimi-K2 sequence is 32 MB)."""
_U32: Final = (1 << 32) - 1
MAX_TOKEN_COUNT: Final = _U32
"""The most tokens a Fireworks payload counts: ``start``, ``total_tokens`` and ``start + rows`` are u32 in the
r3/v1 header, and every Fireworks writer (the per-token matrices too) is held to the same bound."""
_FIRST_CHUNK: Final = 1 << 16
_SKIP_CHUNK: Final = 1 << 16
# The most a BITMAP read holds besides its output: one block of compact rows (and its int64 row indices).
_BLOCK_BYTES: Final = 1 << 20
# RFC 8878 §3.1.2: skippable frames start 0x184D2A50..0x184D2A5F (little-endian), then a u32 frame size.
SKIPPABLE_MAGIC_TAIL: Final = b"\x2a\x4d\x18"
_SKIPPABLE_HEADER: Final = struct.Struct("<II")


def _zstandard() -> Any:
    try:
        return importlib.import_module("zstandard")
    except ImportError as exc:
        raise ImportError("the fireworks-r3v1 format needs the zstandard package: pip install 'r3wire[zstd]'") from exc


def _field_error(field: str, expected: str, got: object) -> R3WireError:
    return DecodeError.make(field, expected, got)


class _Inflater:
    """Reads exactly the bytes asked for from a (possibly multi-frame) zstd stream, growing its buffer only as
    fast as data actually arrives."""

    def __init__(self, zstd: Any, compressed: bytes | bytearray | memoryview) -> None:
        self._zstd = zstd
        self._reader = zstd.ZstdDecompressor().stream_reader(io.BytesIO(compressed), read_across_frames=True)

    def read(self, nbytes: int, what: str, offset: int = 0, whole: int | None = None) -> bytearray:
        """``nbytes`` of the stream (a chunk, at most :data:`_SKIP_CHUNK` of them, or the header), growing the
        buffer only as data arrives. ``offset`` and ``whole`` place the chunk in ``what`` for the error."""
        out = bytearray()
        while len(out) < nbytes:
            want = min(nbytes - len(out), max(_FIRST_CHUNK, len(out)))
            out += self._chunk(want, nbytes if whole is None else whole, offset + len(out), what)
        return out

    def read_into(self, out: np.ndarray[Any, Any], what: str, offset: int = 0, whole: int | None = None) -> None:
        """Fill the C-contiguous array ``out`` with the next ``out.nbytes`` of the stream, decompressed in place:
        no buffer besides ``out`` itself. ``offset`` and ``whole`` place ``out`` in ``what`` for the error."""
        view = out.reshape(-1).view(np.uint8).data
        done = 0
        while done < len(view):
            got = self._call_into(view[done:])
            if not got:
                raise DecodeError.make(
                    "payload",
                    f"{len(view) if whole is None else whole} bytes of {what} after decompression",
                    f"{offset + done} bytes",
                    raw=True,
                )
            done += got

    def skip(self, nbytes: int, what: str) -> None:
        """Decompress and drop ``nbytes``, holding at most one chunk at a time."""
        done = 0
        while done < nbytes:
            done += len(self._chunk(min(nbytes - done, _SKIP_CHUNK), nbytes, done, what))

    def at_end(self) -> bool:
        return not self._call(self._reader.read, 1)

    def _chunk(self, want: int, nbytes: int, done: int, what: str) -> bytes:
        chunk = self._call(self._reader.read, want)
        if not chunk:
            raise DecodeError.make(
                "payload", f"{nbytes} bytes of {what} after decompression", f"{done} bytes", raw=True
            )
        return chunk

    def _call_into(self, view: memoryview) -> int:
        try:
            return int(self._reader.readinto(view))
        except self._zstd.ZstdError as exc:
            raise DecodeError.make("payload", "a valid zstd stream", str(exc), raw=True) from exc

    def _call(self, method: Any, *args: Any) -> bytes:
        try:
            data: bytes = method(*args)
        except self._zstd.ZstdError as exc:
            raise DecodeError.make("payload", "a valid zstd stream", str(exc), raw=True) from exc
        return data


def _is_skippable(head: bytes) -> bool:
    return len(head) == len(ZSTD_MAGIC) and head[1:] == SKIPPABLE_MAGIC_TAIL and head[0] & 0xF0 == 0x50


def _starts_with_frame(data: bytes | bytearray | memoryview) -> bool:
    head = bytes(data[: len(ZSTD_MAGIC)])
    return head == ZSTD_MAGIC or _is_skippable(head)


def _first_frame(compressed: bytes | bytearray | memoryview) -> memoryview:
    """``compressed`` from its first data frame on: RFC 8878 skippable frames (metadata a producer may put
    first) are stepped over without a copy; the stream reader skips any later ones itself."""
    view = memoryview(compressed).cast("B")
    while _is_skippable(bytes(view[: len(ZSTD_MAGIC)])):
        if len(view) < _SKIPPABLE_HEADER.size:
            raise DecodeError.make("payload", "a complete zstd skippable frame header", f"{len(view)} bytes", raw=True)
        _, size = _SKIPPABLE_HEADER.unpack(view[: _SKIPPABLE_HEADER.size])
        if _SKIPPABLE_HEADER.size + size > len(view):
            raise DecodeError.make(
                "payload", f"a skippable frame of {size} bytes within the payload", f"{len(view)} bytes left", raw=True
            )
        view = view[_SKIPPABLE_HEADER.size + size :]
    return view


def _compressed_bytes(payload: object) -> bytes | bytearray | memoryview:
    raw = text_of(payload, "payload")
    if not isinstance(raw, str) and _starts_with_frame(raw):
        return raw
    return b64decode_strict(raw, b64_decoded_length(raw, "payload"), field="payload")


def _shape_args(opts: ReadOptions, what: str) -> tuple[int, int]:
    if opts.num_layers is None or opts.top_k is None:
        raise R3WireError.make("num_layers, top_k", f"given for {what} (it carries neither)", "None", raw=True)
    return opts.num_layers, opts.top_k


def read_fireworks(payload: object, opts: ReadOptions) -> ReadResult:
    """Read an ``r3/v1`` payload: base64 text of the zstd frame(s), or the compressed bytes themselves.

    The payload indexes its matrices by the token they produced: token ``t``'s matrix is the routing of the
    forward pass that sampled token ``t``, which ran at position ``t - 1`` (Fireworks' own tools read it so; see
    ``docs/formats.md``). Token 0's entry, which no forward pass produced, is skipped, never returned. So row
    ``r`` of the result is the routing at position ``start + r`` (``start`` None: 0), as for every format.

    Returns (see :class:`ReadResult`): ALL of ``n`` tokens → ``n - 1`` rows (tokens 1 .. n-1), ``start`` None
    (no rows when the header says none were replayed); SUFFIX from ``replay_start_token`` ``s`` → the replayed
    rows, ``start`` = ``s - 1`` (``s`` = 0: the first matrix is token 0's, skipped, ``start`` 0); BITMAP of
    ``n`` tokens → ``n - 1`` rows with ``mask`` (``mask[p]`` = bit ``p + 1``), unreplayed rows zero.
    ``total_tokens`` is the header's ``total_token_count`` in every mode.

    Raises:
        ImportError: the ``zstd`` extra (zstandard) is not installed.
    """
    compressed = _first_frame(_compressed_bytes(payload))
    if bytes(compressed[: len(ZSTD_MAGIC)]) != ZSTD_MAGIC:
        raise DecodeError.make("payload", "a zstd frame (magic 28 b5 2f fd)", bytes(compressed[:4]).hex(" "), raw=True)
    num_layers, top_k = _shape_args(opts, "Fireworks r3/v1")
    zstd = _zstandard()
    try:
        declared = int(zstd.frame_content_size(compressed))
    except zstd.ZstdError as exc:
        raise DecodeError.make("payload", "a valid zstd frame header", str(exc), raw=True) from exc
    if declared > MAX_DECOMPRESSED_BYTES:  # -1 (size not recorded) falls through to the header's own sizes
        raise DecodeError.make(
            "payload", f"a zstd frame of at most {MAX_DECOMPRESSED_BYTES} bytes", f"{declared} bytes", raw=True
        )
    inflater = _Inflater(zstd, compressed)
    fields = HEADER.unpack(bytes(inflater.read(HEADER.size, "r3/v1 header")))
    magic, version, mode, code, _flags, total, replayed, first, selector_len, matrix_len = fields
    if magic != R3V1_MAGIC:
        raise _field_error("magic", repr(R3V1_MAGIC), magic)
    if version != R3V1_VERSION:
        raise UnsupportedVersionError(
            f"version {version} of Fireworks r3/v1 is not supported; this release reads version {R3V1_VERSION}",
            field="version",
            version=version,
            supported=(R3V1_VERSION,),
        )
    if mode not in _SELECTOR_NAMES:
        raise _field_error("selector_mode", "0 (ALL), 1 (SUFFIX) or 2 (BITMAP)", mode)
    if code not in DTYPE_CODES:
        raise _field_error("routing_dtype", "1 (uint8) or 2 (uint16)", code)
    dtype = np.dtype(DTYPE_CODES[code]).newbyteorder("<")
    # ALL with nothing replayed is what the reference tests call test_zero_replayed_tokens: no rows, total kept.
    if mode == SELECTOR_ALL and replayed not in (total, 0):
        raise _field_error("replayed_token_count", f"total_token_count={total} (or 0) in ALL mode", replayed)
    if mode == SELECTOR_SUFFIX and first + replayed > total:
        raise _field_error(
            "replay_start_token", f"at most total_token_count - replayed_token_count = {total - replayed}", first
        )
    if mode == SELECTOR_BITMAP and selector_len != -(-total // 8):
        raise _field_error("selector_byte_length", f"ceil(total_token_count / 8) = {-(-total // 8)}", selector_len)
    expected_matrix = replayed * num_layers * top_k * dtype.itemsize
    if matrix_len != expected_matrix:
        raise _field_error(
            "matrix_byte_length",
            f"{expected_matrix} ({replayed} replayed tokens x {num_layers} layers x {top_k} top_k x "
            f"{dtype.itemsize} bytes)",
            matrix_len,
        )
    # Token 0's matrix (ALL, and SUFFIX from token 0, when any is sent) is never returned: no forward pass
    # produced token 0. BITMAP decides from bit 0 once the selector is read.
    skip = int(replayed > 0 and (mode == SELECTOR_ALL or (mode == SELECTOR_SUFFIX and first == 0)))
    # The header's claims, checked before anything they size is inflated or allocated: the output array (every
    # position but the last token's in BITMAP mode) against max_elements, and everything still to inflate
    # against the 1 GiB cap.
    rows = max(total - 1, 0) if mode == SELECTOR_BITMAP else replayed - skip
    check_element_count(check_shape((rows, num_layers, top_k), "shape", ndim=3), opts.max_elements)
    body_len = selector_len + matrix_len
    if HEADER.size + body_len > MAX_DECOMPRESSED_BYTES:
        raise DecodeError.make(
            "payload",
            f"at most {MAX_DECOMPRESSED_BYTES} bytes after decompression",
            f"a header declaring {HEADER.size + body_len}",
            raw=True,
        )
    native = dtype.newbyteorder("=")
    row_bytes = num_layers * top_k * dtype.itemsize
    if mode != SELECTOR_BITMAP:
        inflater.skip(selector_len, "selector")  # meaningless in ALL and SUFFIX mode: never held in memory
        inflater.skip(skip * row_bytes, "matrices")  # token 0's matrix: a chunk at a time, never the body
        routes = np.empty((rows, num_layers, top_k), dtype=native)
        inflater.read_into(routes, "matrices", skip * row_bytes, matrix_len)
        _check_end(inflater)
        if not dtype.isnative:
            routes.byteswap(inplace=True)
        # An id is named by its matrix in the payload: token 0's, when dropped, still counts.
        check_ids(routes, "matrix", num_experts=opts.num_experts, first_row=skip)
        start = (max(first - 1, 0)) if mode == SELECTOR_SUFFIX else None
        return ReadResult(routes=routes, format="fireworks-r3v1", start=start, total_tokens=total)
    bits = _read_mask(inflater, total)
    set_bits = int(np.count_nonzero(bits))
    skip = int(total > 0 and bool(bits[0]))
    mask = bits[1:]  # mask[p] is bit p + 1: position p's routing produced token p + 1
    # Rows only when the selector agrees with the header; otherwise the matrices are still inflated (and their
    # ids checked) block by block, so the errors come in the same order as ever.
    dense = np.zeros((rows, num_layers, top_k), dtype=native) if set_bits == replayed else None
    if dense is not None:
        inflater.skip(skip * row_bytes, "matrices")
    else:
        skip = 0
    _scatter_matrices(
        inflater, mask, dense, (replayed - skip, num_layers, top_k), dtype, num_experts=opts.num_experts, skipped=skip
    )
    if dense is None:
        raise _field_error("selector", f"{replayed} set bits (replayed_token_count)", set_bits)
    return ReadResult(routes=dense, format="fireworks-r3v1", mask=mask, total_tokens=total)


def _check_end(inflater: _Inflater) -> None:
    if not inflater.at_end():
        raise DecodeError.make("payload", "nothing after the declared matrices", "more data", raw=True)


def _read_mask(inflater: _Inflater, total: int) -> np.ndarray[Any, Any]:
    """The BITMAP selector as one bool per token (the mask returned), unpacked a chunk at a time: never the
    whole packed selector, never an 8x bit-per-byte temporary beyond one chunk."""
    selector_len = -(-total // 8)
    mask = np.empty(total, dtype=np.bool_)
    done = 0
    while done < selector_len:
        chunk = inflater.read(min(selector_len - done, _SKIP_CHUNK), "selector", done, selector_len)
        bits = np.unpackbits(np.frombuffer(chunk, dtype=np.uint8), bitorder="little")
        start = done * 8
        take = min(len(bits), total - start)
        mask[start : start + take] = bits[:take].view(np.bool_)
        done += len(chunk)
    return mask


def _scatter_matrices(
    inflater: _Inflater,
    mask: np.ndarray[Any, Any],
    routes: np.ndarray[Any, Any] | None,
    shape: tuple[int, int, int],
    dtype: np.dtype[Any],
    *,
    num_experts: int | None,
    skipped: int = 0,
) -> None:
    """Inflate the compact ``[replayed, layers, top_k]`` matrices in bounded blocks, scattering each block into
    the rows of ``routes`` the mask selects (when given), then check the stream ends and every id is below
    ``num_experts``, naming the first bad one by its compact index in the payload (``skipped`` matrices were
    inflated and dropped before these) and the highest, as :func:`check_ids` does."""
    replayed, num_layers, top_k = shape
    row_bytes = max(1, num_layers * top_k * dtype.itemsize)
    block_rows = max(1, min(_BLOCK_BYTES // row_bytes, _BLOCK_BYTES // 8))
    buffer = np.empty((min(block_rows, replayed), num_layers, top_k), dtype=dtype.newbyteorder("="))
    positions = np.flatnonzero(mask[:0])
    token = 0
    high = 0
    first_bad: list[int] | None = None
    done = 0
    while done < replayed:
        count = min(block_rows, replayed - done)
        block = buffer[:count]
        inflater.read_into(block, "matrices", (skipped + done) * row_bytes, (skipped + replayed) * row_bytes)
        if not dtype.isnative:
            block.byteswap(inplace=True)
        if num_experts is not None and block.size:
            high = max(high, int(block.max()))
            if first_bad is None and high >= num_experts:
                first_bad = first_index(block >= num_experts)
                first_bad[0] += skipped + done
        if routes is not None:
            # The selector has exactly `replayed` set bits here: walk it in token windows until this block's
            # rows are placed, holding at most one window of positions.
            placed = 0
            while placed < count:
                if not len(positions):
                    positions = np.flatnonzero(mask[token : token + block_rows]) + token
                    token += block_rows
                    continue
                take = min(count - placed, len(positions))
                routes[positions[:take]] = block[placed : placed + take]
                positions = positions[take:]
                placed += take
        done += count
    _check_end(inflater)
    if first_bad is not None:
        raise DecodeError.make(f"matrix{first_bad}", f"an expert id below num_experts={num_experts}", high)


def write_fireworks(routes: object, opts: WriteOptions, *, format_name: str = "fireworks-r3v1") -> str:
    """Write an ``r3/v1`` payload, the exact inverse of :func:`read_fireworks`: the row at position ``p`` is sent
    as the matrix of token ``p + 1``, the token it produced.

    BITMAP when a ``mask`` is given (bit ``p + 1`` = ``mask[p]``, bit 0 clear; rows where it is false are not
    sent; ``total_token_count`` = rows + 1); SUFFIX otherwise, with ``replay_start_token`` = ``start + 1``
    (``start`` None: 0), ``total_tokens`` defaulting to ``start + rows + 1``. ALL is never written for rows:
    it needs token 0's matrix, which no forward pass produced and no result holds; no rows without a ``start``
    are ALL with nothing replayed (``total_tokens`` kept, default 0), as read. uint8 if the ids (or
    ``num_experts - 1``) fit, else uint16. ``format_name``: the format the caller asked for, named in a dtype
    error.

    Raises:
        EncodeError: ids above 65535, counts beyond 32 bits (``start + rows + 1`` tokens), or inconsistent
            ``start``/``mask``/``total_tokens``.
        ImportError: the ``zstd`` extra (zstandard) is not installed.
    """
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts)
    if opts.num_experts is not None and opts.dtype is None:
        high = max(high, opts.num_experts - 1)
    name = choose_dtype(
        low, high, requested=opts.dtype, allowed=tuple(_CODE_OF), ladder=tuple(_CODE_OF), format_name=format_name
    )
    rows = int(arr.shape[0])
    begin = opts.start or 0
    if begin + rows + 1 > _U32:
        # The sequence counts one token past the last row's position (the token that row produced).
        field = "start" if begin else "routes"
        raise EncodeError.make(
            field,
            f"start + rows + 1 at most {_U32} (r3/v1 counts start + rows + 1 tokens in a u32)",
            f"start {begin} + {rows} rows + 1",
            raw=True,
        )
    selector = b""
    first = 0
    if opts.mask is not None:
        if opts.start:
            raise EncodeError.make("start", "0 or None with a mask (BITMAP covers the whole sequence)", opts.start)
        # An empty sequence (total_tokens 0) has no token 1 to carry bit 1: nothing to send, no selector.
        empty = not rows and opts.total_tokens == 0
        mode, total, matrix = SELECTOR_BITMAP, 0 if empty else rows + 1, arr[opts.mask]
        bits = np.zeros(total, dtype=np.bool_)
        bits[1:] = opts.mask
        selector = np.packbits(bits, bitorder="little").tobytes()
    elif opts.start is not None or rows:
        mode, first, matrix = SELECTOR_SUFFIX, begin + 1, arr
        total = begin + rows + 1 if opts.total_tokens is None else opts.total_tokens
        if not begin + rows and total == 0:
            first = 0  # an empty sequence: nothing replayed from token 0, as it reads back (start 0, no rows)
        elif begin + rows + 1 > total:
            raise EncodeError.make(
                "total_tokens",
                f"at least start + rows + 1 = {begin + rows + 1} (the last row's position produced token start + rows)",
                total,
            )
        if opts.start is None and total != rows + 1:
            raise EncodeError.make(
                "total_tokens", f"None or rows + 1 = {rows + 1} (rows from position 0 without a start)", total
            )
    else:
        # ALL with nothing replayed (the reader's test_zero_replayed_tokens case): the sequence length kept.
        mode, total, matrix = SELECTOR_ALL, opts.total_tokens or 0, arr
    if opts.total_tokens is not None and opts.total_tokens != total:
        raise EncodeError.make("total_tokens", f"{total} (rows + 1 in {_SELECTOR_NAMES[mode]} mode)", opts.total_tokens)
    if total > _U32:
        raise EncodeError.make("total_tokens", f"at most {_U32} (a u32 in the r3/v1 header)", total)
    wire = np.asarray(matrix, dtype=np.dtype(name).newbyteorder("<"), order="C")
    header = HEADER.pack(
        R3V1_MAGIC, R3V1_VERSION, mode, _CODE_OF[name], FLAG_LITTLE_ENDIAN, total, int(wire.shape[0]), first,
        len(selector), wire.nbytes,
    )  # fmt: skip
    zstd = _zstandard()
    compressed = zstd.ZstdCompressor().compress(header + selector + wire.tobytes())
    return b64encode_text(memoryview(compressed))
