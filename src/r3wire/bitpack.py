"""Bit packing: ids of ``bits`` bits each as one LSB-first bit stream (spec: ``docs/bitpack-and-frame.md``).

Id ``i`` occupies bits ``[i * bits, (i + 1) * bits)`` of the stream, its least significant bit first; stream bit
``j`` is bit ``j % 8`` (value ``1 << (j % 8)``) of byte ``j // 8``. The stream ends at the first whole byte, and
the pad bits after the last id are zero. For ``bits == 8`` the stream is the ids' bytes unchanged.

How this is fast in pure NumPy without a Python loop over ids (``np.packbits`` was 20-50x slower, FACTS §5):
8 ids of ``b`` bits are exactly ``b`` bytes, so ids go in groups of 8, processed in cache-sized chunks, and every
step is a whole-chunk ufunc writing a contiguous array. (Up to 512 ids, where call overhead dominates, the
bits go through ``np.packbits`` one byte per bit instead.)

1. Ids are narrowed to the smallest unsigned slot of 8, 16 or 32 bits that holds ``b`` bits.
2. Two adjacent ``T``-bit slots viewed as one little-endian ``2T``-bit word are ``lo | hi << T``; moving ``hi``
   down to ``lo | hi << w`` concatenates their ``w``-bit strings. This step repeats until the slots are 64 bits
   wide, leaving each group as ``8 >> levels`` units of ``b << levels`` bits.
3. A group's units are spliced, with shifts, into ``ceil(b / 8)`` 64-bit words, one contiguous array per word.
4. The words are stored through a structured view of the output whose records are the ``b``-byte groups: one
   8-byte field per whole word, then 4/2/1-byte fields for the last word's remaining bytes. (Copying ``b`` bytes
   out of each 8-byte word with a 2-d slice was about 10x slower than these 1-d strided stores.)

Unpacking runs the same steps backwards. Every view is little-endian explicitly, so a big-endian host gets the
same bytes (slower, through NumPy's byte swapping).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, Final, NoReturn

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._validate import MAX_EXTENT, byte_buffer, check_int, is_int
from r3wire.errors import DecodeError, EncodeError, R3WireError, describe

__all__ = ["MAX_BITS", "pack_bits", "packed_nbytes", "unpack_bits", "unpack_bits_from"]

MAX_BITS: Final = 31
"""Widest id the stream carries: route ids are below ``2**31`` (int32 is the widest route dtype)."""

# Groups of 8 ids per chunk: 512k ids keep the scratch buffers at about 4 MiB, allocated once per call (fresh
# allocations cost page faults in these VMs, FACTS §5), while the ~20 ufunc calls per chunk stay a small cost
# (1 << 14 was 10% slower, 1 << 12 40% slower for 9-bit ids).
_CHUNK_GROUPS: Final = 1 << 16

# Up to this many ids, one byte per bit through np.packbits/np.unpackbits (a handful of calls) beats the chunked
# kernel's ~25 ufunc calls: 5-8 us instead of ~20-40 us at 64 ids; the two cross near 1000 ids.
_SMALL_COUNT: Final = 512

_LE_UINT: Final[dict[int, np.dtype[Any]]] = {
    8: np.dtype("u1"),
    16: np.dtype("<u2"),
    32: np.dtype("<u4"),
    64: np.dtype("<u8"),
}
_U64: Final = np.dtype("<u8")

# The most ids an unpack takes: its output is rounded up to whole groups of 8 ids of up to 8 bytes each, and NumPy
# refuses (ValueError, not MemoryError) an array of more than 2**63 - 1 bytes.
_MAX_COUNT: Final = MAX_EXTENT - 7


def packed_nbytes(count: int, bits: int) -> int:
    """Bytes in the stream of ``count`` ids of ``bits`` bits: ``ceil(count * bits / 8)``.

    Args:
        count: the number of ids, an integer in ``0 .. 2**60 - 1``.
        bits: the field width, ``1 .. 31``.

    Raises:
        R3WireError: ``count`` or ``bits`` is not an integer in its range.
    """
    # MAX_EXTENT: a decoder sizes the stream of any shape it has accepted (extent at most MAX_EXTENT) with this.
    count = check_int(count, "count", minimum=0, maximum=MAX_EXTENT, error=R3WireError)
    return _nbytes(count, _check_bits(bits, R3WireError))


def _nbytes(count: int, bits: int) -> int:
    """:func:`packed_nbytes` of arguments already checked (the kernels' own calls skip the checks)."""
    return (count * bits + 7) // 8


@dataclass(frozen=True, slots=True)
class _Plan:
    bits: int
    slot: int  # bits of the narrow slot each id starts in: 8, 16 or 32
    levels: int  # pair merges until the slots are 64 bits wide
    unit: int  # bits per unit after merging: bits << levels
    units: int  # units per group of 8 ids: 8 >> levels
    words: int  # 64-bit words per group: ceil(bits / 8)
    places: tuple[tuple[int, int], ...]  # (word, bit shift) of each unit's first bit in its group
    # per word, the units in it: (unit, shift), a left shift, or a right shift when negative (a unit's top bits
    # running on into the next word); a plain copy (shift 0) is last, so it is OR-ed in without a temporary
    parts: tuple[tuple[tuple[int, int], ...], ...]
    record: np.dtype[Any]  # one group of ``bits`` bytes, as fields
    fields: tuple[tuple[str, int, int], ...]  # (field name, word, bit shift of the field's first bit in it)
    fields_per_word: tuple[int, ...]  # how many fields each word is stored as: more than one only for the last


@cache
def _plan(bits: int) -> _Plan:
    slot = 8 if bits <= 8 else 16 if bits <= 16 else 32
    levels = {8: 3, 16: 2, 32: 1}[slot]
    unit = bits << levels
    fields: list[tuple[str, int, int]] = []
    formats: list[np.dtype[Any]] = []
    offsets: list[int] = []
    # The whole words, then the last word's ``bits % 8`` bytes as at most two fields of one power-of-two size,
    # overlapping when that size does not divide it (7 bytes: 4 at 0 and 4 at 3): the bytes they share get the
    # same value from either, so one fewer strided store and shift than 4 + 2 + 1.
    rest = bits % 8
    size = 1 << (rest.bit_length() - 1) if rest else 0
    tail = [(bits // 8 * 8, size), (bits // 8 * 8 + rest - size, size)] if rest and rest != size else []
    spans = [(8 * w, 8) for w in range(bits // 8)] + (tail or ([(bits // 8 * 8, rest)] if rest else []))
    for offset, size in spans:
        fields.append((f"f{len(fields)}", offset // 8, 8 * (offset % 8)))
        formats.append(_LE_UINT[8 * size])
        offsets.append(offset)
    # Any: NumPy's stubs type this dict form as a TypedDict whose shape differs across releases.
    spec: Any = {"names": [f[0] for f in fields], "formats": formats, "offsets": offsets, "itemsize": bits}
    record = np.dtype(spec)
    places = [divmod(i * unit, 64) for i in range(8 >> levels)]
    parts: list[list[tuple[int, int]]] = [[] for _ in range((bits + 7) // 8)]
    for i, (word, shift) in enumerate(places):
        parts[word].append((i, shift))
        if shift + unit > 64:
            parts[word + 1].append((i, shift - 64))
    return _Plan(
        bits=bits,
        slot=slot,
        levels=levels,
        unit=unit,
        units=8 >> levels,
        words=(bits + 7) // 8,
        places=tuple(places),
        parts=tuple(tuple(sorted(p, key=lambda part: part[1] == 0)) for p in parts),
        record=record,
        fields=tuple(fields),
        fields_per_word=tuple(sum(1 for f in fields if f[1] == w) for w in range((bits + 7) // 8)),
    )


def _check_bits(bits: object, error: type[R3WireError]) -> int:
    if not is_int(bits) or not 1 <= bits <= MAX_BITS:
        raise error.make("bits", f"an integer in 1..{MAX_BITS}", bits)
    return int(bits)


class _Scratch:
    """Buffers for one call, sized for one chunk and reused by every chunk."""

    def __init__(self, plan: _Plan, groups: int) -> None:
        self.slots = np.empty(groups * 8, dtype=_LE_UINT[plan.slot])
        self.units = np.empty(groups * plan.units, dtype=_U64)  # same bytes as ``slots``: 8 * slot bits per group
        self.high = np.empty(groups * plan.units, dtype=_U64)
        self.words = np.empty((plan.words, groups), dtype=_U64)
        self.temp = np.empty(groups, dtype=_U64)


def pack_bits(
    ids: np.ndarray[Any, Any],
    bits: int,
    *,
    checked: bool = False,
    below: int | None = None,
    out: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Pack integer ids (any shape, read in C order) into the LSB-first stream of ``bits``-bit fields.

    Args:
        ids: an integer array of any dtype and byte order.
        bits: the field width, ``1 .. 31``.
        checked: a bool: the caller has already verified ``0 <= id < 2**bits`` for every id; skip that pass.
        below: a tighter exclusive upper bound for the ids than ``2**bits`` (a model's ``num_experts``), an
            integer in ``1 .. 2**31``; checked, though unused, when ``checked`` is true.
        out: write the stream here instead of into a new array: a writable, C-contiguous array whose bytes number
            exactly :func:`packed_nbytes` ``(ids.size, bits)`` (any dtype but object; a reused buffer avoids page
            faults).

    Returns:
        A 1-d uint8 array of exactly :func:`packed_nbytes` ``(ids.size, bits)`` bytes, pad bits zero: a view of
        ``out`` when given.

    Raises:
        EncodeError: ``bits``, ``checked``, ``below`` or ``out`` is unusable, ``ids`` is not an integer array, or
            an id is negative or does not fit ``bits`` (or ``below``).
    """
    bits = _check_bits(bits, EncodeError)
    given: object = ids  # callers outside the type checker pass lists too
    if not isinstance(given, np.ndarray) or given.dtype.kind not in "iu":
        got = given.dtype if isinstance(given, np.ndarray) else type(given).__name__
        raise EncodeError.make("ids", "an integer NumPy array", str(got), raw=True)
    ids = as_numpy(ids, field="ids")  # masked arrays refused, a subclass (np.matrix) viewed as a plain array
    if not isinstance(checked, (bool, np.bool_)):
        raise EncodeError.make("checked", "a bool", checked)
    # Checked even when ``checked`` makes it unused: a bad bound is the caller's mistake whichever path runs.
    bound = None if below is None else check_int(below, "below", minimum=1, maximum=1 << MAX_BITS, error=EncodeError)
    limit = None
    if not checked:
        limit = min(1 << bits, _signed_limit(ids.dtype))
        if bound is not None:
            limit = min(limit, bound)
    count = ids.size
    stream = _output(out, _nbytes(count, bits))
    # One pass per bounds check: viewed as unsigned, a negative id is at least 2**(width - 1), above any limit.
    flat = _as_unsigned(ids.reshape(-1))
    if count <= _SMALL_COUNT:
        if limit is not None and count and int(flat.max()) >= limit:
            _raise_out_of_range(ids, bits, below)
        stream[...] = _pack_small(flat, bits)
        return stream
    plan = _plan(bits)
    groups = -(-count // 8)
    whole = stream.size // bits  # groups wholly inside the stream; only the last one can be short
    records = stream[: whole * bits].view(plan.record)
    chunk = max(1, min(groups, _CHUNK_GROUPS))
    scratch = _Scratch(plan, chunk)
    for start in range(0, groups, chunk):
        stop = min(groups, start + chunk)
        n = stop - start
        first, last = start * 8, min(count, stop * 8)
        source = flat[first:last]
        # Checked while the chunk is in cache, just before it is narrowed: the ids are read from memory once.
        if limit is not None and int(source.max()) >= limit:
            _raise_out_of_range(ids, bits, below)
        slots = scratch.slots[: n * 8]
        slots[: last - first] = source  # narrows to the slot type; the ids were checked to fit
        slots[last - first :] = 0  # the ids that round the last group up to 8 are zero
        units = _merge_pairs(slots, plan, scratch.high[: n * plan.units]).reshape(n, plan.units)
        words = _splice(units, plan, scratch.words[:, :n], scratch.temp[:n])
        full = min(stop, whole) - start
        _store(words[:, :full], plan, records[start : start + full], scratch.temp[:full])
        if full < n:  # the short last group: stored whole into a scratch group, of which the stream takes a part
            group = np.zeros(bits, dtype=np.uint8)
            _store(words[:, full:], plan, group.view(plan.record), scratch.temp[:1])
            stream[whole * bits :] = group[: stream.size - whole * bits]
    return stream


def _output(out: np.ndarray[Any, Any] | None, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The stream's ``nbytes`` bytes: a new array, or ``out`` viewed as bytes after checking it fits exactly."""
    if out is None:
        return np.empty(nbytes, dtype=np.uint8)
    given: object = out
    expected = "a writable, C-contiguous NumPy array of numbers"
    if not isinstance(given, np.ndarray):
        raise EncodeError.make("out", expected, type(given).__name__, raw=True)
    stream = byte_buffer(out, "out", expected, error=EncodeError, writable=True)
    if stream.size != nbytes:
        raise EncodeError.make("out", f"{nbytes} bytes", f"{stream.size} bytes", raw=True)
    return stream


def _as_unsigned(flat: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The same memory as unsigned integers of the same width and byte order (no copy)."""
    return flat if flat.dtype.kind == "u" else flat.view(flat.dtype.str.replace("i", "u"))


def _signed_limit(dtype: np.dtype[Any]) -> int:
    """Unsigned views of ``dtype`` at or above this were negative: ``2**(width - 1)`` for signed dtypes."""
    return 1 << (8 * dtype.itemsize - 1) if dtype.kind == "i" else 1 << (8 * dtype.itemsize)


def _raise_out_of_range(ids: np.ndarray[Any, Any], bits: int, below: int | None) -> NoReturn:
    """Raise the error for ids that failed the one-pass check, naming the offending value (a slow path)."""
    low, high = int(ids.min()), int(ids.max())
    top = (1 << bits) if below is None else min(1 << bits, below)
    limit = f"below={below}" if below is not None and below < (1 << bits) else f"{bits} bits"
    raise EncodeError.make("ids", f"integers in 0..{top - 1} ({limit})", low if low < 0 else high)


def _pack_small(flat: np.ndarray[Any, Any], bits: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The stream of a few ids, one byte per bit: the ``count x bits`` bit matrix, packed LSB-first."""
    fields = flat.astype(np.uint32)[:, np.newaxis] >> np.arange(bits, dtype=np.uint32)
    np.bitwise_and(fields, np.uint32(1), out=fields)
    return np.packbits(fields.astype(np.uint8), bitorder="little")  # the last byte's pad bits are zero


def _unpack_small(
    stream: np.ndarray[Any, Any], count: int, bits: int, dtype: np.dtype[Any], field: str
) -> np.ndarray[Any, Any]:
    """The inverse of :func:`_pack_small`, with the pad-bit check."""
    stream_bits = np.unpackbits(stream, bitorder="little")
    if stream_bits[count * bits :].any():
        raise DecodeError.make(
            field, "a stream whose pad bits after the last id are zero", "non-zero pad bits", raw=True
        )
    weights = np.left_shift(np.uint32(1), np.arange(bits, dtype=np.uint32))
    ids: np.ndarray[Any, Any] = stream_bits[: count * bits].reshape(count, bits).astype(np.uint32) @ weights
    return ids.astype(dtype)


def _merge_pairs(slots: np.ndarray[Any, Any], plan: _Plan, high: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Concatenate adjacent fields in place until each 64-bit unit holds ``8 >> levels`` ids."""
    values = slots
    width, slot = plan.bits, plan.slot
    for _ in range(plan.levels):
        wide = _LE_UINT[2 * slot]
        values = values.view(wide)
        upper = high.view(wide)[: values.size]
        # lo + hi * 2**slot  ->  lo + hi * 2**width: subtract hi * (2**slot - 2**width); 3 passes, not 4
        np.right_shift(values, wide.type(slot), out=upper)
        np.multiply(upper, wide.type((1 << slot) - (1 << width)), out=upper)
        np.subtract(values, upper, out=values)
        width, slot = 2 * width, 2 * slot
    return values


def _splice(
    units: np.ndarray[Any, Any], plan: _Plan, words: np.ndarray[Any, Any], temp: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Put each group's units, ``unit`` bits apiece, back to back into 64-bit words (one row per word)."""
    if plan.units == 1:  # bits <= 8: the unit is the word
        return units.reshape(1, -1)
    for word, parts in enumerate(plan.parts):
        target = words[word]
        for k, (i, shift) in enumerate(parts):
            column = units[:, i]
            if k and not shift:
                np.bitwise_or(target, column, out=target)
                continue
            into = temp if k else target
            if shift >= 0:
                np.left_shift(column, np.uint64(shift), out=into)
            else:
                np.right_shift(column, np.uint64(-shift), out=into)
            if k:
                np.bitwise_or(target, temp, out=target)
    return words


def _store(words: np.ndarray[Any, Any], plan: _Plan, records: np.ndarray[Any, Any], temp: np.ndarray[Any, Any]) -> None:
    """Write each group's first ``bits`` bytes of its words into its record (the fields truncate)."""
    for name, word, shift in plan.fields:
        if shift:
            np.right_shift(words[word], np.uint64(shift), out=temp)
            records[name] = temp
        else:
            records[name] = words[word]


def unpack_bits(
    buffer: Any,
    count: int,
    bits: int,
    dtype: Any,
    *,
    field: str = "data",
) -> np.ndarray[Any, Any]:
    """Unpack ``count`` ids of ``bits`` bits from an LSB-first stream into a new 1-d array of ``dtype``.

    Args:
        buffer: the stream: a C-contiguous bytes-like object (bytes, bytearray, memoryview, mmap) or NumPy array
            (read as its bytes) of exactly :func:`packed_nbytes` ``(count, bits)`` bytes.
        count: the number of ids, an integer in ``0 .. 2**60 - 8``.
        bits: the field width, ``1 .. 31``.
        dtype: the integer dtype of the result; it must hold ``bits``-bit values.
        field: the field named in errors.

    Returns:
        A writable, C-contiguous array of ``dtype`` in native byte order.

    Raises:
        DecodeError: ``count`` or ``bits`` is out of range, the buffer is not a C-contiguous bytes-like object or
            has the wrong length, or a pad bit is set.
        R3WireError: ``dtype`` is not an integer dtype that holds ``bits``-bit ids, ``field`` is not a string, or
            this process cannot allocate ``count`` ids.
    """
    count, bits, out_dtype = _unpack_arguments(count, bits, dtype, field)
    nbytes = _nbytes(count, bits)
    stream = _stream(buffer, field)
    if stream.size != nbytes:
        raise DecodeError.make(field, f"{nbytes} bytes ({count} ids of {bits} bits)", f"{stream.size} bytes", raw=True)
    return _unpack(lambda start, stop: stream[start:stop], count, bits, out_dtype, field)


def _stream(buffer: object, field: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """``buffer``'s bytes as a 1-d uint8 array sharing its memory, or the DecodeError naming ``field``."""
    expected = "a C-contiguous bytes-like object (bytes, bytearray, memoryview) or NumPy array of numbers"
    return byte_buffer(buffer, field, expected, error=DecodeError)


def unpack_bits_from(
    read: Callable[[int, int], Any],
    count: int,
    bits: int,
    dtype: Any,
    *,
    field: str = "data",
) -> np.ndarray[Any, Any]:
    """:func:`unpack_bits` of a stream read range by range, never whole: ``read(start, stop)`` returns its bytes
    ``start .. stop`` (bytes-like). Every byte of the stream is read once, plus up to 8 bytes past each range.

    This is how a bit-packed envelope is decoded: its base64 is decoded one cache-sized range at a time, so the
    decoded stream never exists in full next to the output.

    Raises:
        DecodeError: ``read`` is not callable, ``count`` or ``bits`` is out of range, ``read`` returns something
            other than exactly the bytes asked for (named as ``field``), or a pad bit is set (and whatever
            ``read`` raises).
        R3WireError: ``dtype`` is not an integer dtype that holds ``bits``-bit ids, ``field`` is not a string, or
            this process cannot allocate ``count`` ids.
    """
    if not callable(read):
        raise DecodeError.make("read", "a callable read(start, stop) returning those bytes", read)
    count, bits, out_dtype = _unpack_arguments(count, bits, dtype, field)
    return _unpack(partial(_read_range, read, field), count, bits, out_dtype, field)


def _read_range(read: Callable[[int, int], Any], field: str, start: int, stop: int) -> np.ndarray[Any, Any]:
    """``read(start, stop)`` as a uint8 array, refused unless it is exactly those ``stop - start`` bytes: the kernel's
    views and 8-byte loads assume the length, and a short range would otherwise fail deep inside it."""
    expected = f"a C-contiguous bytes-like object from read for its bytes {start}..{stop}"
    stream = byte_buffer(read(start, stop), field, expected, error=DecodeError)
    if stream.size != stop - start:
        raise DecodeError.make(
            field, f"{stop - start} bytes from read for its bytes {start}..{stop}", f"{stream.size} bytes", raw=True
        )
    return stream


def _unpack_arguments(count: object, bits: object, dtype: Any, field: object) -> tuple[int, int, np.dtype[Any]]:
    """``count`` and ``bits`` checked, and the native-order integer dtype ``dtype`` names, refused if it cannot
    hold ``bits``-bit ids; ``field`` must be a string, since every later error names it."""
    if not isinstance(field, str):
        raise R3WireError.make("field", "a string (the name errors give the stream)", field)
    number = check_int(count, "count", minimum=0, maximum=_MAX_COUNT, error=DecodeError)
    width = _check_bits(bits, DecodeError)
    expected = f"an integer dtype that holds {width}-bit ids"
    if dtype is None:  # np.dtype(None) is float64: name what the caller passed, not that
        raise R3WireError.make("dtype", expected, None)
    try:
        out_dtype = np.dtype(dtype).newbyteorder("=")
    except Exception as exc:  # NumPy's parser raises TypeError, ValueError and others for what it cannot read
        raise R3WireError.make("dtype", expected, f"{describe(dtype)} ({exc})", raw=True) from None
    if out_dtype.kind not in "iu" or out_dtype.itemsize * 8 - (out_dtype.kind == "i") < width:
        raise R3WireError.make("dtype", expected, str(out_dtype), raw=True)
    return number, width, out_dtype


def _unpack(
    read: Callable[[int, int], np.ndarray[Any, np.dtype[np.uint8]]],
    count: int,
    bits: int,
    out_dtype: np.dtype[Any],
    field: str,
) -> np.ndarray[Any, Any]:
    nbytes = _nbytes(count, bits)
    if count <= _SMALL_COUNT:
        return _unpack_small(read(0, nbytes), count, bits, out_dtype, field)
    plan = _plan(bits)
    groups = -(-count // 8)
    whole = nbytes // bits  # groups wholly inside the stream; only the last one can be short
    try:
        out = np.empty(groups * 8, dtype=out_dtype)
    except MemoryError:  # a count within the limits that this process cannot hold
        raise R3WireError.make("count", "a count whose ids this process can allocate", count) from None
    chunk = max(1, min(groups, _CHUNK_GROUPS))
    scratch = _Scratch(plan, chunk)
    for start in range(0, whole, chunk):
        stop = min(whole, start + chunk)
        # 8 bytes past the range: the last groups' overlapping 8-byte loads (see _unpack_groups) read into them.
        piece = read(start * bits, min(nbytes, stop * bits + 8))
        records = piece[: (stop - start) * bits].view(plan.record)
        _unpack_groups(records, plan, scratch, out[start * 8 : stop * 8], stream=piece)
    if whole < groups:  # the short last group: its missing bytes read as zero
        last = np.zeros(bits, dtype=np.uint8)
        tail = read(whole * bits, nbytes)
        last[: tail.size] = tail
        _unpack_groups(last.view(plan.record), plan, scratch, out[whole * 8 :])
    if out[count:].any():
        raise DecodeError.make(
            field, "a stream whose pad bits after the last id are zero", "non-zero pad bits", raw=True
        )
    return out[:count]


def _unpack_groups(
    records: np.ndarray[Any, Any],
    plan: _Plan,
    scratch: _Scratch,
    out: np.ndarray[Any, Any],
    *,
    stream: np.ndarray[Any, Any] | None = None,
) -> None:
    """Unpack whole groups: the inverse of :func:`_store`, :func:`_splice` and :func:`_merge_pairs`.

    With ``stream`` (whose first groups ``records`` are), a word stored as several fields is read as one
    unaligned 8-byte load per group where the stream has bytes enough past the group's end.
    """
    n = records.size
    units = scratch.units[: n * plan.units].reshape(n, plan.units)
    words = units.reshape(1, -1) if plan.units == 1 else scratch.words[:, :n]  # bits <= 8: the word is the unit
    temp = scratch.temp[:n]
    loaded = set()
    for word, count in enumerate(plan.fields_per_word):
        offset = 8 * word
        if count > 1 and stream is not None and offset + (n - 1) * plan.bits + 8 <= stream.size:
            # One 8-byte load per group that runs on into the next group, masked to this word's bytes: 2-3x
            # faster than a strided copy, shift and OR per field (the loads overlap; only reads may).
            loads: np.ndarray[Any, Any] = np.ndarray(
                (n,), dtype=_U64, buffer=stream, offset=offset, strides=(plan.bits,)
            )
            np.bitwise_and(loads, np.uint64((1 << (8 * (plan.bits - 8 * word))) - 1), out=words[word])
            loaded.add(word)
    started = [False] * plan.words
    for name, word, shift in plan.fields:
        if word in loaded:
            continue
        if started[word]:
            # Widen first: NumPy 1.x picks a narrow shift loop for a narrow field (value-based casting).
            temp[...] = records[name]
            np.left_shift(temp, np.uint64(shift), out=temp)
            np.bitwise_or(words[word], temp, out=words[word])
        else:
            words[word] = records[name]
            started[word] = True
    if plan.units > 1:
        _unsplice(words, plan, units, temp)
    out[...] = _split_pairs(units.reshape(-1), plan, scratch.high[: n * plan.units])


def _unsplice(
    words: np.ndarray[Any, Any], plan: _Plan, units: np.ndarray[Any, Any], temp: np.ndarray[Any, Any]
) -> None:
    """Read each group's units (two or more) back out of its words (the inverse of :func:`_splice`)."""
    mask = np.uint64((1 << plan.unit) - 1)
    for i, (word, shift) in enumerate(plan.places):
        column = units[:, i]
        source = words[word]
        if shift:
            np.right_shift(source, np.uint64(shift), out=column)
            source = column
        if shift + plan.unit > 64:  # the unit's top bits are at the bottom of the next word
            np.left_shift(words[word + 1], np.uint64(64 - shift), out=temp)
            np.bitwise_or(column, temp, out=column)
        if i + 1 < plan.units:  # the last unit ends at the group's last bit: nothing above it to clear
            np.bitwise_and(source, mask, out=column)
        elif source is not column:
            column[...] = source


def _split_pairs(units: np.ndarray[Any, Any], plan: _Plan, high: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Split each unit in place back into its ids, one per narrow slot (the inverse of :func:`_merge_pairs`)."""
    values = units
    width, slot = plan.unit, 64
    for _ in range(plan.levels):
        width, slot = width // 2, slot // 2
        wide = _LE_UINT[2 * slot]
        values = values.view(wide)
        upper = high.view(wide)[: values.size]
        np.right_shift(values, wide.type(width), out=upper)
        np.multiply(upper, wide.type((1 << slot) - (1 << width)), out=upper)
        np.add(values, upper, out=values)
    return values.view(_LE_UINT[slot])
