"""Trainer-side batching of decoded routes: validate, pad, pack, and assemble a trajectory across turns.

A trainer holds one ragged ``[rows_i, layers, top_k]`` array per trajectory and needs one batch array. The rules
(``docs/batching.md`` has the full text):

- Row ``r`` of a trajectory is the routing computed at token position ``r`` (it produced token ``r + 1``), so an
  engine returns at most ``tokens - 1`` rows: the last sampled token is never forwarded. Rows past the captured
  ones are *uncaptured*; positions outside a trajectory are *padding*. Both are filled with ``arange(top_k)``
  (distinct dummy experts) and flagged in the mask, where ``True`` means "do not replay this row".
- The batch dtype is fixed by ``num_experts`` when given (:func:`r3wire.route_dtype`, the same on every rank and
  every step); otherwise it is the smallest dtype that holds every sample's dtype. Every id is copied exactly or
  the call fails: ids are non-negative, fit the batch dtype, and are below ``num_experts`` when that is given.
- Everything is NumPy; ``r3wire.torch`` turns the results into tensors without a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Literal

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._routecheck import optional_num_experts
from r3wire._validate import MAX_DIM, check_int, is_int
from r3wire.errors import R3WireError, describe
from r3wire.routes import route_dtype

__all__ = ["RouteTrace", "pack_routes", "pad_routes", "unpack_routes", "validate_routes"]

_NDIM = 3
_EMPTY_DTYPE = np.dtype(np.uint8)  # an empty batch has no sample to take a dtype from; uint8 as on the wire

Array = np.ndarray[Any, Any]


def _fail(field: str, expected: str, got: object, *, raw: bool = True) -> R3WireError:
    return R3WireError.make(field, expected, got, raw=raw)


def _native(dtype: np.dtype[Any]) -> np.dtype[Any]:
    native: np.dtype[Any] = dtype.newbyteorder("=")
    return native


def _promote(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any]:
    """The smallest integer dtype holding every value of both; uint64 where NumPy would give float64.

    uint64 with a signed dtype promotes to float64 in NumPy, which is not lossless; ids are non-negative (checked
    before every copy), so uint64 holds every id either dtype can carry.
    """
    wider = np.promote_types(a, b)
    if wider.kind not in "iu":
        return np.dtype(np.uint64)
    return _native(wider)


def _as_routes(value: object, field: str) -> Array:
    arr = as_numpy(value, field=field)
    if arr.dtype.kind not in "iu":
        raise _fail(f"{field}.dtype", "an integer dtype", str(arr.dtype))
    if arr.ndim != _NDIM:
        raise _fail(field, "a 3-d array [rows, layers, top_k]", f"shape {list(arr.shape)}")
    if arr.shape[2] < 1:
        raise _fail(f"{field}.shape[2]", "top_k >= 1", arr.shape[2])
    return arr


def _samples(samples: object, field: str = "samples") -> list[Array]:
    if (
        isinstance(samples, (str, bytes, bytearray, memoryview))
        or not isinstance(samples, (Sequence, np.ndarray))
        or (isinstance(samples, np.ndarray) and samples.ndim == 0)
    ):
        raise _fail(field, "a sequence of [rows, layers, top_k] arrays", type(samples).__name__)
    arrays = [_as_routes(sample, f"{field}[{i}]") for i, sample in enumerate(samples)]
    for i, arr in enumerate(arrays[1:], start=1):
        if arr.shape[1:] != arrays[0].shape[1:]:
            raise _fail(
                f"{field}[{i}].shape",
                f"[rows, {arrays[0].shape[1]}, {arrays[0].shape[2]}] (layers and top_k of samples[0])",
                f"{list(arr.shape)}",
            )
    return arrays


def _batch_dtype(arrays: Sequence[Array], n_experts: int | None) -> np.dtype[Any]:
    if n_experts is not None:
        return route_dtype(n_experts)
    if not arrays:
        return _EMPTY_DTYPE
    dtype = _native(arrays[0].dtype)
    for arr in arrays[1:]:
        dtype = _promote(dtype, arr.dtype)
    return dtype


def _id_limit(dtype: np.dtype[Any], n_experts: int | None) -> int:
    """The largest id a batch of ``dtype`` may hold: ``num_experts - 1`` when known, else the dtype's maximum."""
    return int(np.iinfo(dtype).max) if n_experts is None else n_experts - 1


def _check_filler(top_k: int, dtype: np.dtype[Any], n_experts: int | None, field: str) -> None:
    # Padding rows hold ids 0 .. top_k - 1: they must be valid, distinct ids of the batch dtype.
    limit = _id_limit(dtype, n_experts)
    if top_k - 1 > limit:
        what = f"num_experts={n_experts}" if n_experts is not None else f"the batch dtype {dtype.name}"
        raise _fail(field, f"top_k <= {limit + 1} (padding rows are arange(top_k); {what})", top_k)


def _where(field: str, index: Sequence[int]) -> str:
    return f"{field}[row {index[0]}, layer {index[1]}, slot {index[2]}]"


def _check_range(arr: Array, limit: int, field: str, *, expected: str) -> None:
    """Refuse any id outside ``0 .. limit``; read the array only when its dtype could hold such an id."""
    if arr.size == 0:
        return
    info = np.iinfo(arr.dtype)
    if info.min < 0:
        low = int(arr.min())
        if low < 0:
            first = [int(i) for i in np.argwhere(arr < 0)[0]]
            raise _fail(_where(field, first), "a non-negative expert id", int(arr[tuple(first)]))
    if info.max > limit:
        high = int(arr.max())
        if high > limit:
            first = [int(i) for i in np.argwhere(arr > limit)[0]]
            raise _fail(_where(field, first), expected, int(arr[tuple(first)]))


def _range_expected(dtype: np.dtype[Any], n_experts: int | None) -> str:
    if n_experts is not None:
        return f"an expert id below num_experts={n_experts}"
    return f"an expert id that fits the batch dtype {dtype.name} (<= {np.iinfo(dtype).max})"


def _check_distinct(arr: Array, field: str) -> None:
    if arr.shape[2] < 2 or arr.size == 0:
        return
    ordered = np.sort(arr, axis=-1)
    repeated = (ordered[..., 1:] == ordered[..., :-1]).any(axis=-1)
    if repeated.any():
        row, layer = (int(i) for i in np.argwhere(repeated)[0])
        raise _fail(
            f"{field}[row {row}, layer {layer}]",
            "distinct expert ids within a row",
            describe(arr[row, layer].tolist()),
        )


def _token_lengths(token_lengths: object, rows: Sequence[int]) -> list[int]:
    if token_lengths is None:
        return list(rows)
    if isinstance(token_lengths, np.ndarray):
        if token_lengths.ndim != 1 or token_lengths.dtype.kind not in "iu":
            raise _fail("token_lengths", "a 1-d integer sequence", f"{token_lengths.dtype} {list(token_lengths.shape)}")
        values: Sequence[object] = token_lengths.tolist()
    elif isinstance(token_lengths, Sequence) and not isinstance(token_lengths, (str, bytes)):
        values = token_lengths
    else:
        raise _fail("token_lengths", "a sequence of integers, one per sample", type(token_lengths).__name__)
    if len(values) != len(rows):
        raise _fail("token_lengths", f"{len(rows)} lengths (one per sample)", f"{len(values)}")
    lengths = []
    for i, (value, n_rows) in enumerate(zip(values, rows, strict=True)):
        if not is_int(value):
            raise _fail(f"token_lengths[{i}]", "an integer", describe(value))
        length = int(value)
        if length < n_rows:
            raise _fail(
                f"token_lengths[{i}]",
                f">= the {n_rows} route rows of samples[{i}] (rows may be fewer than tokens, never more)",
                length,
            )
        lengths.append(length)
    return lengths


def validate_routes(
    samples: Sequence[Any] | Array,
    *,
    num_experts: int | None = None,
    token_lengths: Sequence[int] | Array | None = None,
) -> None:
    """Check a batch of routes without building anything: every rule :func:`pad_routes` applies with ``check=True``.

    The rules: each sample is a 3-d integer array ``[rows, layers, top_k]``; all share ``[layers, top_k]``;
    ``top_k >= 1``; ids are non-negative and below ``num_experts`` (when given, else they fit the batch dtype);
    ids within each row (one token, one layer) are distinct; rows do not exceed ``token_lengths`` (when given).

    Args:
        samples: one array per trajectory: NumPy arrays of any integer dtype, torch tensors or nested lists.
        num_experts: the model's expert count.
        token_lengths: each trajectory's token count, when it differs from its route rows.

    Raises:
        R3WireError: the first broken rule; the message names the sample and, for an id, its row, layer and slot.
    """
    arrays = _samples(samples)
    n_experts = optional_num_experts(num_experts)
    _token_lengths(token_lengths, [arr.shape[0] for arr in arrays])
    dtype = _batch_dtype(arrays, n_experts)
    limit, expected = _id_limit(dtype, n_experts), _range_expected(dtype, n_experts)
    if arrays:
        _check_filler(arrays[0].shape[2], dtype, n_experts, "samples[0].shape[2]")
    for i, arr in enumerate(arrays):
        _check_range(arr, limit, f"samples[{i}]", expected=expected)
        _check_distinct(arr, f"samples[{i}]")


def pad_routes(
    samples: Sequence[Any] | Array,
    *,
    token_lengths: Sequence[int] | Array | None = None,
    side: Literal["left", "right"] = "left",
    num_experts: int | None = None,
    max_len: int | None = None,
    check: bool = False,
    out: Array | None = None,
) -> tuple[Array, Array]:
    """Pad ragged per-trajectory routes into one ``[batch, max_len, layers, top_k]`` array and a mask.

    Trajectory ``i`` occupies ``token_lengths[i]`` consecutive positions (right-aligned for ``side="left"``,
    left-aligned for ``"right"``); its route rows fill the first ``rows_i`` of them, in order. Every other row,
    padding and uncaptured alike (such as the last sampled token, which the engine never forwarded), is
    ``arange(top_k)`` in every layer, and ``mask`` is ``True`` exactly there. The output is written once:
    each row is either copied from a sample or filled, never both.

    Args:
        samples: one ``[rows_i, layers, top_k]`` array per trajectory (any integer dtype; torch tensors and nested
            lists are accepted); all share ``[layers, top_k]``. Zero-row samples are allowed.
        token_lengths: each trajectory's token count; ``rows_i <= token_lengths[i]``. Default: ``rows_i``.
        side: ``"left"`` puts padding before each trajectory, ``"right"`` after it.
        num_experts: the model's expert count. Fixes the batch dtype to :func:`r3wire.route_dtype`
            (identical on every rank and step) and requires every id to be below it.
        max_len: the padded length (e.g. the token batch's sequence length); default the longest token length.
        check: also run :func:`validate_routes`' costlier rule: ids distinct within each row.
        out: a writable array of exactly the output shape and batch dtype to fill instead of allocating one
            (a reused or pinned buffer). Its contents are unspecified if an error is raised.

    Returns:
        ``(padded, mask)``: ``padded`` ``[batch, max_len, layers, top_k]`` of the batch dtype (``num_experts``'s
        route dtype, else the smallest dtype holding every sample's dtype; uint8 for an empty batch), and
        ``mask``, bool ``[batch, max_len]``, ``True`` = do not replay (padding or uncaptured). An empty batch
        gives shape ``[0, max_len or 0, 0, 0]``.

    Raises:
        R3WireError: a sample is not a 3-d integer array, samples disagree on ``[layers, top_k]``, ``top_k < 1``,
            a sample has more rows than its token length, a length exceeds ``max_len``, an id is negative, does
            not fit the batch dtype or is ``>= num_experts`` (the message names sample, row, layer and slot),
            ids repeat within a row (``check=True``), or ``out`` does not match.
    """
    arrays = _samples(samples)
    n_experts = optional_num_experts(num_experts)
    if side not in ("left", "right"):
        raise _fail("side", "'left' or 'right'", describe(side))
    rows = [arr.shape[0] for arr in arrays]
    lengths = _token_lengths(token_lengths, rows)
    longest = max(lengths, default=0)
    if max_len is None:
        width = longest
    else:
        width = check_int(max_len, "max_len", minimum=0, maximum=MAX_DIM, error=R3WireError)
        if longest > width:
            i = lengths.index(longest)
            raise _fail("max_len", f">= every token length (samples[{i}] has {longest})", width)
    dtype = _batch_dtype(arrays, n_experts)
    layers, top_k = arrays[0].shape[1:] if arrays else (0, 0)
    if arrays:
        _check_filler(top_k, dtype, n_experts, "samples[0].shape[2]")
    shape = (len(arrays), width, layers, top_k)
    padded = _output(out, shape, dtype)
    mask = np.ones((len(arrays), width), dtype=np.bool_)
    filler = _padding_rows(max((width - r for r in rows), default=0), layers, top_k, dtype)
    limit, expected = _id_limit(dtype, n_experts), _range_expected(dtype, n_experts)
    for i, arr in enumerate(arrays):
        field = f"samples[{i}]"
        # Checking right before the copy reads the sample while it is in cache for the copy (measured: the range
        # check then adds ~15% to a copy instead of a full extra pass over memory).
        _check_range(arr, limit, field, expected=expected)
        if check:
            _check_distinct(arr, field)
        start = width - lengths[i] if side == "left" else 0
        stop = start + rows[i]
        if start:
            padded[i, :start] = filler[:start]
        np.copyto(padded[i, start:stop], arr, casting="unsafe")  # lossless: every id was range-checked above
        if stop < width:
            padded[i, stop:] = filler[: width - stop]
        mask[i, start:stop] = False
    return padded, mask


def _padding_rows(count: int, layers: int, top_k: int, dtype: np.dtype[Any]) -> Array:
    """``count`` contiguous padding rows, each ``arange(top_k)`` in every layer.

    Broadcasting ``arange(top_k)`` into the batch directly runs NumPy's inner loop over only ``top_k`` elements
    (measured several times slower than a copy); copying slices of this block is a plain memcpy. It is filled by
    doubling, so building it costs about one copy of itself.
    """
    block = np.empty((count, layers, top_k), dtype=dtype)
    if count:
        block[0] = np.arange(top_k, dtype=dtype)
        done = 1
        while done < count:
            step = min(done, count - done)
            block[done : done + step] = block[:step]
            done += step
    return block


def _output(out: object, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if not isinstance(out, np.ndarray):
        raise _fail("out", "a NumPy array (for a torch tensor pass tensor.numpy())", type(out).__name__)
    if out.shape != shape:
        raise _fail("out.shape", f"{list(shape)} [batch, max_len, layers, top_k]", f"{list(out.shape)}")
    if out.dtype != dtype:
        raise _fail("out.dtype", f"{dtype.name} (the batch dtype)", str(out.dtype))
    if not out.flags.writeable:
        raise _fail("out", "a writable array", "a read-only array")
    return out


def pack_routes(
    samples: Sequence[Any] | Array,
    *,
    num_experts: int | None = None,
    check: bool = False,
) -> tuple[Array, Array]:
    """Concatenate per-trajectory routes along rows, for trainers that use packed (varlen) sequences.

    Each sample is copied exactly once, straight into the result, converted on the way if needed.

    Args:
        samples: one ``[rows_i, layers, top_k]`` array per trajectory, as for :func:`pad_routes`.
        num_experts: the model's expert count: fixes the dtype and bounds the ids, as for :func:`pad_routes`.
        check: also require distinct ids within each row.

    Returns:
        ``(flat, cu_seqlens)``: ``flat`` ``[sum(rows_i), layers, top_k]`` (``[0, 0, 0]`` for an empty batch) and
        ``cu_seqlens``, int64 ``[batch + 1]``, the prefix sums of ``rows_i`` starting at 0, so sample ``i`` is
        ``flat[cu_seqlens[i]:cu_seqlens[i + 1]]``. (flash-attn wants int32: ``cu_seqlens.astype(np.int32)``.)

    Raises:
        R3WireError: as :func:`pad_routes` for the samples and ids.
    """
    arrays = _samples(samples)
    n_experts = optional_num_experts(num_experts)
    dtype = _batch_dtype(arrays, n_experts)
    layers, top_k = arrays[0].shape[1:] if arrays else (0, 0)
    cu_seqlens = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum([arr.shape[0] for arr in arrays], out=cu_seqlens[1:])
    flat = np.empty((int(cu_seqlens[-1]), layers, top_k), dtype=dtype)
    limit, expected = _id_limit(dtype, n_experts), _range_expected(dtype, n_experts)
    for i, arr in enumerate(arrays):
        _check_range(arr, limit, f"samples[{i}]", expected=expected)
        if check:
            _check_distinct(arr, f"samples[{i}]")
        np.copyto(flat[cu_seqlens[i] : cu_seqlens[i + 1]], arr, casting="unsafe")  # lossless: range-checked
    return flat, cu_seqlens


def unpack_routes(flat: Array, cu_seqlens: Any) -> list[Array]:
    """Split a packed array back into per-trajectory views (no copies): the inverse of :func:`pack_routes`.

    Args:
        flat: a NumPy array whose first axis is the concatenated rows.
        cu_seqlens: 1-d integer prefix sums: starts at 0, never decreases, ends at ``flat.shape[0]``.

    Returns:
        ``[flat[cu_seqlens[i]:cu_seqlens[i + 1]] for i in range(len(cu_seqlens) - 1)]``, views of ``flat``.

    Raises:
        R3WireError: ``flat`` is not a NumPy array with at least one axis, or ``cu_seqlens`` breaks a rule above.
    """
    given: object = flat  # callers outside mypy pass anything
    if not isinstance(given, np.ndarray) or given.ndim < 1:
        got = f"shape {list(given.shape)}" if isinstance(given, np.ndarray) else type(given).__name__
        raise _fail("flat", "a NumPy array with a row axis", got)
    offsets = as_numpy(cu_seqlens, field="cu_seqlens")
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or offsets.size < 1:
        raise _fail("cu_seqlens", "a non-empty 1-d integer array", f"{offsets.dtype} {list(offsets.shape)}")
    bounds = [int(x) for x in offsets]
    if bounds[0] != 0:
        raise _fail("cu_seqlens[0]", "0", bounds[0])
    for i in range(1, len(bounds)):
        if bounds[i] < bounds[i - 1]:
            raise _fail(f"cu_seqlens[{i}]", f">= cu_seqlens[{i - 1}]={bounds[i - 1]}", bounds[i])
    if bounds[-1] != flat.shape[0]:
        raise _fail(f"cu_seqlens[{len(bounds) - 1}]", f"{flat.shape[0]} (the rows of flat)", bounds[-1])
    return [flat[a:b] for a, b in pairwise(bounds)]


class RouteTrace:
    """One trajectory's routes assembled over the turns of a multi-turn rollout.

    Each turn's engine call returns the rows from some position on (its "prompt start" / ``start_len``) to the
    end of what it forwarded; :meth:`add` places them at that position. Rows must continue the trace without a
    gap; rows that overlap what is recorded must agree with it. The dtype is fixed by ``num_experts`` when given;
    otherwise a turn that arrives in a wider dtype widens the trace (never truncating an id).

    Example::

        trace = RouteTrace(num_experts=128)
        trace.add(turn1, start=0)            # prompt + first reply
        trace.add(turn2, start=turn2_start)  # the engine's start_len for the second call
        routes, captured = trace.finalize(len(token_ids))
        padded, mask = pad_routes([routes], token_lengths=[len(token_ids)], num_experts=128)
    """

    __slots__ = ("_buf", "_num_experts", "_rows")

    def __init__(self, *, num_experts: int | None = None) -> None:
        """Start an empty trace.

        Raises:
            R3WireError: ``num_experts`` is not an integer in ``1 .. 2**31``.
        """
        self._num_experts = optional_num_experts(num_experts)
        self._buf: Array | None = None
        self._rows = 0

    @property
    def rows(self) -> int:
        """The number of rows recorded so far (trajectory rows ``0 .. rows - 1``)."""
        return self._rows

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The trace's dtype: fixed by ``num_experts``, else the widest turn dtype so far (``None`` before any)."""
        if self._num_experts is not None:
            return route_dtype(self._num_experts)
        return None if self._buf is None else self._buf.dtype

    def add(self, routes: Any, *, start: int) -> None:
        """Record a turn's rows; ``routes[0]`` is trajectory row ``start``.

        Args:
            routes: ``[n, layers, top_k]`` ids (any integer dtype, a torch tensor or nested lists); ``layers``
                and ``top_k`` as in earlier turns.
            start: the trajectory row the turn's first row is; at most :attr:`rows` (no gap). Rows below
                :attr:`rows` are the overlap and must equal what is recorded.

        Raises:
            R3WireError: a bad array or shape, a negative id or one ``>= num_experts``, ``start`` past the end of
                the trace (a gap), or overlapping rows that differ from those recorded (row, layer named). The
                trace is unchanged when this is raised.
        """
        arr = _as_routes(routes, "routes")
        begin = check_int(start, "start", minimum=0, maximum=MAX_DIM, error=R3WireError)
        buf = self._buf
        if buf is not None and arr.shape[1:] != buf.shape[1:]:
            raise _fail(
                "routes.shape",
                f"[rows, {buf.shape[1]}, {buf.shape[2]}] (layers and top_k of earlier turns)",
                f"{list(arr.shape)}",
            )
        if begin > self._rows:
            raise _fail(
                "start",
                f"<= {self._rows}, the rows recorded so far (a turn must continue the trace without a gap)",
                begin,
            )
        if self._num_experts is not None:
            dtype = route_dtype(self._num_experts)
        else:
            dtype = _native(arr.dtype) if buf is None else _promote(buf.dtype, arr.dtype)
        if self._num_experts is not None:
            _check_filler(arr.shape[2], dtype, self._num_experts, "routes.shape[2]")
        _check_range(
            arr, _id_limit(dtype, self._num_experts), "routes", expected=_range_expected(dtype, self._num_experts)
        )
        overlap = min(self._rows - begin, arr.shape[0])
        if buf is not None and overlap > 0:
            _check_overlap(buf[begin : begin + overlap], arr[:overlap], begin)
        end = begin + arr.shape[0]
        if buf is None or end > buf.shape[0] or dtype != buf.dtype:
            capacity = end
            if buf is not None:
                # Doubling keeps many small turns linear overall; a wider dtype copies the recorded rows once.
                capacity = max(end, 2 * buf.shape[0]) if end > buf.shape[0] else buf.shape[0]
            grown = np.empty((capacity, *arr.shape[1:]), dtype=dtype)
            if buf is not None:
                np.copyto(grown[: self._rows], buf[: self._rows], casting="unsafe")  # recorded ids are non-negative
            self._buf = buf = grown
        if end > self._rows:
            np.copyto(buf[self._rows : end], arr[overlap:], casting="unsafe")  # lossless: range-checked
            self._rows = end

    def finalize(self, total_tokens: int) -> tuple[Array, int]:
        """The trajectory's captured rows and their count, checked against its token count.

        The result goes straight into :func:`pad_routes` with ``token_lengths=[total_tokens]``, which places the
        uncaptured tail (``total_tokens - captured_rows`` rows, at least the last sampled token) under the mask.

        Args:
            total_tokens: the trajectory's token count (prompt and all turns' tokens).

        Returns:
            ``(routes, captured_rows)``: ``routes`` ``[captured_rows, layers, top_k]``, trajectory rows
            ``0 .. captured_rows - 1`` in order, in the trace's dtype. It is the trace's own buffer trimmed to
            size (copied only if the buffer had spare capacity); the trace never rewrites a recorded row, so
            later turns leave it unchanged.

        Raises:
            R3WireError: nothing was added (the shape is unknown), or ``total_tokens`` is smaller than the rows.
        """
        tokens = check_int(total_tokens, "total_tokens", minimum=0, maximum=MAX_DIM, error=R3WireError)
        if self._buf is None:
            raise _fail("trace", "at least one add() before finalize() (layers and top_k are unknown)", "none")
        if tokens < self._rows:
            raise _fail(
                "total_tokens",
                f">= the {self._rows} rows recorded (rows may be fewer than tokens, never more)",
                tokens,
            )
        if self._buf.shape[0] != self._rows:
            # Trim so a finalized trajectory does not hold up to twice its size in spare capacity.
            self._buf = self._buf[: self._rows].copy()
        return self._buf, self._rows


def _check_overlap(recorded: Array, new: Array, begin: int) -> None:
    differs = recorded != new
    if differs.any():
        row, layer, _ = (int(i) for i in np.argwhere(differs)[0])
        raise _fail(
            f"routes[row {row}, layer {layer}]",
            f"{describe(recorded[row, layer].tolist())}, the ids already recorded for trajectory row "
            f"{begin + row} (a turn's overlap with earlier turns must agree)",
            describe(new[row, layer].tolist()),
        )
