"""Trainer-side batching of decoded routes: validate, pad, pack, and assemble a trajectory across turns.

A trainer holds one ragged ``[rows_i, layers, top_k]`` array per trajectory and needs one batch array. The rules
(``docs/batching.md`` has the full text, ``docs/trainer-batch.md`` the whole path from engine responses):

- Row ``r`` of a trajectory is the routing computed at token position ``r`` (it produced token ``r + 1``), so an
  engine returns at most ``tokens - 1`` rows: the last sampled token is never forwarded. Rows past the captured
  ones are *uncaptured*; positions outside a trajectory are *padding*. Both are filled with dummy experts
  (``arange(top_k)``, or spread over the experts with ``fill="balanced"``) and flagged in the mask, where
  ``True`` means "do not replay this row". :func:`pad_sequences` lays out any other per-token values the same way.
- The batch dtype is fixed by ``num_experts`` when given (:func:`r3wire.route_dtype`, the same on every rank and
  every step); otherwise it is the smallest dtype that holds every sample's dtype. Every id is copied exactly or
  the call fails: ids are non-negative, fit the batch dtype, and are below ``num_experts`` when that is given.
- What a helper is given is bounded as a decoder bounds a payload (``r3wire._validate``): every sample's shape
  passes the shared shape check, routes have ``layers >= 1`` and ``top_k >= 1``, and an output is allocated only
  after its element count passed ``max_elements``.
- :class:`RouteTrace` stitches a trajectory from engine calls, verifying each call's token ids against the ones
  recorded, so rows are never stitched onto a different token sequence; where a call's rows go is its
  ``start``, which must be exact (an off-by-one shows only as overlap conflicts).
- Everything is NumPy; ``r3wire.torch`` turns the results into tensors without a copy.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Final, Literal, cast, overload

import numpy as np

from r3wire._arraylike import as_numpy, is_tensor
from r3wire._routecheck import ROUTES_MIN_DIMS, optional_num_experts
from r3wire._typeset import is_sequence, types_within
from r3wire._validate import (
    MAX_DIM,
    MAX_EXTENT,
    check_element_count,
    check_int,
    check_shape,
    is_int,
    optional_max_elements,
    plain_str,
)
from r3wire._walk import caller_items, copy_list, read_count
from r3wire.errors import R3WireError, describe
from r3wire.routes import route_dtype

if TYPE_CHECKING:
    from r3wire.formats import ReadResult

__all__ = ["RouteTrace", "pack_routes", "pad_routes", "pad_sequences", "unpack_routes", "validate_routes"]

_NDIM = 3
_EMPTY_DTYPE = np.dtype(np.uint8)  # an empty batch has no sample to take a dtype from; uint8 as on the wire
_INT64_MAX: Final = int(np.iinfo(np.int64).max)
_INT64: Final = np.dtype(np.int64)

Array = np.ndarray[Any, Any]
Fill = Literal["arange", "balanced"]
Conflict = Literal["keep", "replace", "raise"]
_CONFLICT_POLICIES: Final = ("keep", "replace", "raise")

_INT_ONLY: Final = frozenset({int})
_ARRAY_ONLY: Final = frozenset({np.ndarray})


def _fail(field: str, expected: str, got: object, *, raw: bool = True) -> R3WireError:
    return R3WireError.make(field, expected, got, raw=raw)


def _choice(value: object, choices: tuple[str, ...]) -> str | None:
    """``value`` as the plain string it spells when that is one of ``choices``, else None. A str first, so an
    array's ``==`` (ambiguous truth) never runs; compared by its characters, so a subclass's own ``__eq__`` can
    match nothing it does not spell. Callers go on with the returned string, never with ``value``."""
    plain = plain_str(value)
    return plain if isinstance(plain, str) and plain in choices else None


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


def _from_caller(value: object, field: str) -> Array:
    """``value`` as a NumPy array (:func:`as_numpy`: nested lists NumPy would change are refused)."""
    return as_numpy(value, field=field, error=R3WireError)


def _neutral_empty(value: object, arr: Array) -> bool:
    """An empty nested sequence: NumPy gives it float64, but it holds no value of any kind."""
    return arr.size == 0 and is_sequence(value)


def _as_routes(value: object, field: str) -> Array:
    arr = _from_caller(value, field)
    # An empty list is not refused for NumPy's float64: its shape is what is wrong (or, if not, it has no id).
    neutral = _neutral_empty(value, arr)
    if arr.dtype.kind not in "iu" and not neutral:
        raise _fail(f"{field}.dtype", "an integer dtype", str(arr.dtype))
    if arr.ndim != _NDIM:
        raise _fail(field, "a 3-d array [rows, layers, top_k]", f"shape {list(arr.shape)}")
    # The decoders' shape bound, so a payload that decoded cannot make a batch output unbounded (issue 11.7).
    check_shape(list(arr.shape), f"{field}.shape", ndim=_NDIM, error=R3WireError, minimums=ROUTES_MIN_DIMS)
    if arr.dtype.kind not in "iu":
        arr = arr.astype(_EMPTY_DTYPE)  # no id to convert; the smallest dtype widens nothing
    return arr


def _is_sequence(value: object) -> bool:
    """Whether ``value`` is a sequence of items: a ``Sequence`` other than text or bytes, or a NumPy array or torch
    tensor with an axis to iterate (a 0-d one is a single value: ``len`` and iteration raise ``TypeError``)."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    if is_tensor(value):
        ndim: int = value.ndim  # type: ignore[attr-defined]  # a torch.Tensor (torch is not imported here)
        return ndim > 0
    return is_sequence(value) and not isinstance(value, (str, bytes, bytearray, memoryview))


def _uniform(
    samples: object,
    field: str,
    what: str,
    convert: Callable[[object, str], Array],
    expected_shape: Callable[[Array, int], str],
    *,
    neutral: Array | None = None,
) -> list[Array]:
    """``samples`` converted one by one, all with the trailing shape of the first (a batch shares it).

    A sample ``convert`` returned as ``neutral`` (by identity: an empty list, which has no trailing shape to
    give) takes any; the others share the first other one's, which an error names (``expected_shape`` gets it
    and its index).
    """
    if not _is_sequence(samples):
        raise _fail(field, what, type(samples).__name__)
    # A Sequence, an array or a tensor with an axis: each iterates over its items; a list or tuple (a subclass
    # too) is read from its storage, as NumPy reads it (a subclass's own __iter__ may raise or differ).
    items: Any = (
        copy_list(samples)
        if isinstance(samples, (list, tuple))
        else caller_items(cast("Iterable[Any]", samples), field, what)
    )
    arrays = [convert(sample, f"{field}[{i}]") for i, sample in enumerate(items)]
    first = next((i for i, arr in enumerate(arrays) if arr is not neutral), None)
    if first is None:
        return arrays
    rest = arrays[first].shape[1:]
    for i, arr in enumerate(arrays[first + 1 :], start=first + 1):
        if arr.shape[1:] != rest and arr is not neutral:
            raise _fail(f"{field}[{i}].shape", expected_shape(arrays[first], first), f"{list(arr.shape)}")
    return arrays


def _sizes_first(
    samples: object, field: str, max_elements: object, token_lengths: object, offsets: object = None
) -> tuple[Any, Any]:
    """Sizes before contents for a batch given as one array or tensor (its samples stacked on axis 0).

    Each sample is converted on its own (microseconds each), and a broadcast view declares any number of them in
    a few bytes; the shape is what the batch declares, so it is held to ``max_elements`` first (the output holds
    at least as many elements; an empty shape through its non-zero dimensions), and ``token_lengths`` and
    ``offsets`` are counted against its first axis, before any sample is converted. Returns them as lists of
    ints (what the later checks take as they are), unchanged for any other batch: a sequence holds its samples.
    """
    if not (isinstance(samples, np.ndarray) or is_tensor(samples)):
        return token_lengths, offsets
    shape = [int(size) for size in samples.shape]  # type: ignore[attr-defined]  # an array or a tensor
    # Not samples stacked on a token axis (converting the first one refuses it), or no sample to convert.
    if len(shape) < 2 or not shape[0]:
        return token_lengths, offsets
    check_element_count(shape, optional_max_elements(max_elements), field, error=R3WireError)
    count = shape[0]
    if token_lengths is not None:
        token_lengths = _int_list(token_lengths, "token_lengths", count, "one length per sample")
    if offsets is not None:
        offsets = _int_list(offsets, "offsets", count, "one offset per sample")
    return token_lengths, offsets


def _samples(samples: object, field: str = "samples") -> list[Array]:
    return _uniform(
        samples,
        field,
        "a sequence of [rows, layers, top_k] arrays",
        _as_routes,
        lambda first, i: f"[rows, {first.shape[1]}, {first.shape[2]}] (layers and top_k of {field}[{i}])",
    )


def _batch_dtype(arrays: Sequence[Array], n_experts: int | None) -> np.dtype[Any]:
    if n_experts is not None:
        return route_dtype(n_experts)
    if not arrays:
        return _EMPTY_DTYPE
    dtype = _native(arrays[0].dtype)
    for arr in arrays[1:]:
        dtype = _promote(dtype, arr.dtype)
    return dtype


@functools.lru_cache(maxsize=64)
def _int_bounds(dtype: np.dtype[Any]) -> tuple[int, int]:
    """``(min, max)`` of an integer dtype. np.iinfo builds a new object per call (measurable in RouteTrace.add)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _id_limit(dtype: np.dtype[Any], n_experts: int | None) -> int:
    """The largest id a batch of ``dtype`` may hold: ``num_experts - 1`` when known, else the dtype's maximum."""
    return _int_bounds(dtype)[1] if n_experts is None else n_experts - 1


def _check_filler(top_k: int, dtype: np.dtype[Any], n_experts: int | None, field: str, *, trace: bool = False) -> None:
    # Padding rows hold top_k distinct ids (0 .. top_k - 1 for "arange"): they must be valid ids of the batch.
    # A trace pads nothing: there the same bound holds because a router picks top_k distinct experts.
    limit = _id_limit(dtype, n_experts)
    if top_k - 1 > limit:
        what = f"num_experts={n_experts}" if n_experts is not None else f"the batch dtype {dtype.name}"
        why = "a router picks top_k distinct experts" if trace else "padding rows hold top_k distinct ids"
        raise _fail(field, f"top_k <= {limit + 1} ({why}; {what})", top_k)


def _where(field: str, index: Sequence[int]) -> str:
    """The name of an element (``index`` of 3) or a layer row (``index`` of 2) of routes: ``field[row r, layer l,
    slot s]``. :func:`_in_result` reads it back."""
    slot = f", slot {index[2]}" if len(index) > 2 else ""
    return f"{field}[row {index[0]}, layer {index[1]}{slot}]"


_ROUTES_ELEMENT: Final = re.compile(r"routes\[row (\d+), layer (\d+)(, slot \d+)?\]")


def _in_result(error: R3WireError, picked: Sequence[int] | None) -> R3WireError:
    """``error`` about an element of the routes :meth:`RouteTrace.add_result` passed on (``routes[row r, layer l,
    ...]``, named by :func:`_where`) renamed to the element of ``result.routes`` the caller can look up: layer
    ``picked[l]`` when layers were selected; one about its logprobs renamed to ``result.logprobs``. Any other
    error is returned as it is."""
    field = error.field
    if field is None:
        return error
    if field == "logprobs" or field.startswith("logprobs["):
        return _renamed(error, field, f"result.{field}")  # add()'s logprobs are result.logprobs here
    found = _ROUTES_ELEMENT.fullmatch(field)
    if found is None:
        return error
    row, layer, slot = found.groups()
    original = int(layer) if picked is None else picked[int(layer)]
    return _renamed(error, field, f"result.routes[row {row}, layer {original}{slot or ''}]")


def _renamed(error: R3WireError, field: str, name: str) -> R3WireError:
    """``error`` (about ``field``) about ``name`` instead, its message and its field."""
    message = str(error)
    message = name + message[len(field) :] if message.startswith(field) else f"{name}: {message}"
    return type(error)(message, field=name, expected=error.expected, got=error.got)


def _check_range(arr: Array, limit: int, field: str, *, expected: str, rows: Array | None = None) -> None:
    """Refuse any id outside ``0 .. limit``; read the array only when its dtype could hold such an id.

    ``rows`` maps ``arr``'s rows to the sample's (``arr`` holds only the replayed rows), so a message names the
    sample's row.
    """
    if arr.size == 0:
        return
    dtype_min, dtype_max = _int_bounds(arr.dtype)
    if dtype_min < 0:
        low = int(arr.min())
        if low < 0:
            first = [int(i) for i in np.argwhere(arr < 0)[0]]
            value = int(arr[tuple(first)])
            expected = "a non-negative expert id"
            if value == -1:  # what SGLang and NeMo-RL write for "no route"; say what to do with it
                expected += (
                    " (-1 is SGLang's and NeMo-RL's 'no expert recorded': drop dense layers, routes[:, moe_layers], "
                    "before batching; a row with no expert recorded in any layer goes in replayed= as False)"
                )
            raise _fail(_where(field, _sample_index(first, rows)), expected, value)
    if dtype_max > limit:
        high = int(arr.max())
        if high > limit:
            first = [int(i) for i in np.argwhere(arr > limit)[0]]
            raise _fail(_where(field, _sample_index(first, rows)), expected, int(arr[tuple(first)]))


def _sample_index(index: list[int], rows: Array | None) -> list[int]:
    return index if rows is None else [int(rows[index[0]]), *index[1:]]


@functools.lru_cache(maxsize=64)
def _fixed_bounds(n_experts: int) -> tuple[np.dtype[Any], int, str, bool]:
    """A fixed-dtype trace's dtype, id limit, range message and whether the dtype holds ids past the limit."""
    dtype = route_dtype(n_experts)
    limit = _id_limit(dtype, n_experts)
    return dtype, limit, _range_expected(dtype, n_experts), _int_bounds(dtype)[1] > limit


def _range_expected(dtype: np.dtype[Any], n_experts: int | None) -> str:
    if n_experts is not None:
        return f"an expert id below num_experts={n_experts}"
    return f"an expert id that fits the batch dtype {dtype.name} (<= {_int_bounds(dtype)[1]})"


def _check_distinct(arr: Array, field: str, *, rows: Array | None = None) -> None:
    if arr.shape[2] < 2 or arr.size == 0:
        return
    try:
        ordered = np.sort(arr, axis=-1)
    except MemoryError:  # a copy of the sample; bounded by the callers' max_elements, unless that is raised
        raise _fail(field, "a sample this process can sort (a copy)", f"{list(arr.shape)} (MemoryError)") from None
    repeated = (ordered[..., 1:] == ordered[..., :-1]).any(axis=-1)
    if repeated.any():
        row, layer = (int(i) for i in np.argwhere(repeated)[0])
        expected = "distinct expert ids within a row"
        if not arr[row, layer].any():
            # vLLM and SGLang zero their capture buffers each step and write only the MoE layers: a dense layer
            # arrives as a row of zeros (vllm capturer.py @3063051e, sglang state_capturer/base.py @0564b521).
            expected += (
                " (a row of zeros is how vLLM and SGLang send a dense, non-MoE layer: select the MoE layers, "
                "routes[:, moe_layers] or RouteTrace.add_result(layers=))"
            )
        raise _fail(
            f"{field}[row {row if rows is None else int(rows[row])}, layer {layer}]",
            expected,
            describe(arr[row, layer].tolist()),
        )


def _got(items: Sequence[object], value: object, count: int) -> str:
    """How many ``items`` a caller's sequence holds (:func:`read_count`): exact for a list, tuple or array."""
    return read_count(items, count, whole=isinstance(value, (list, tuple, np.ndarray)))


def _int_list(value: object, field: str, count: int, what: str) -> list[int]:
    """``value`` as ``count`` Python ints in ``0 .. MAX_DIM`` (a list, tuple, 1-d integer array or tensor)."""
    if is_tensor(value):
        value = _from_caller(value, field)  # e.g. attention_mask.sum(-1), what a trainer holds
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "iu":
            raise _fail(field, "a 1-d integer sequence", f"{value.dtype} {list(value.shape)}")
        # Counted before it is read: a broadcast view declares any length in a few bytes.
        if value.shape[0] != count:
            raise _fail(field, f"{count} {'integer' if count == 1 else 'integers'} ({what})", value.shape[0])
        values: Sequence[object] = value.tolist()
    elif is_sequence(value) and not isinstance(value, (str, bytes)):
        # Counted and read once: a caller's __len__ may lie.
        values = copy_list(value, most=count + 1, field=field, expected=f"a sequence of integers, {what}")
    else:
        raise _fail(field, f"a sequence of integers, {what}", type(value).__name__)
    if len(values) != count:
        raise _fail(field, f"{count} {'integer' if count == 1 else 'integers'} ({what})", _got(values, value, count))
    # The common case, plain ints in range, is checked in two passes instead of one check_int call per sample.
    if types_within(values, _INT_ONLY):
        plain: list[int] = list(values)  # type: ignore[arg-type]  # every item is an int, checked above
        if not plain or (min(plain) >= 0 and max(plain) <= MAX_DIM):
            return plain
    result = []
    for i, item in enumerate(values):
        if not is_int(item):
            raise _fail(f"{field}[{i}]", "an integer", describe(item))
        result.append(check_int(item, f"{field}[{i}]", minimum=0, maximum=MAX_DIM, error=R3WireError))
    return result


def _token_lengths(
    token_lengths: object,
    rows: Sequence[int],
    offsets: Sequence[int] | None = None,
    *,
    samples: str = "samples",
) -> list[int]:
    """Each sample's token count: given, or its rows (plus its offset); never fewer than offset + rows.

    ``samples`` is the caller's argument name (``"values"`` for :func:`pad_sequences`), so a message names it.
    """
    starts = list(offsets) if offsets is not None else [0] * len(rows)
    if token_lengths is None:
        return [start + n for start, n in zip(starts, rows, strict=True)]
    lengths = _int_list(token_lengths, "token_lengths", len(rows), "one length per sample")
    # The common case, every length long enough, is checked in one pass in C; the loop below finds the first short one.
    if all(map(operator.ge, lengths, map(operator.add, starts, rows))):
        return lengths
    for i, (length, start, n_rows) in enumerate(zip(lengths, starts, rows, strict=True)):
        if length < start + n_rows:
            if samples == "samples":
                what, why = "route rows", "rows may be fewer than tokens, never more"
            else:
                what = "values" if offsets is None else "positions (offset + values)"
                why = "a sample's values lie within its trajectory's tokens"
            raise _fail(f"token_lengths[{i}]", f">= the {start + n_rows} {what} of {samples}[{i}] ({why})", length)
    return lengths


def _layout(
    counts: Sequence[int],
    token_lengths: object,
    offsets: Sequence[int] | None,
    side: object,
    max_len: object,
    *,
    samples: str = "samples",
) -> tuple[int, list[int]]:
    """The padded width and where each sample's first row lands: the one layout every padding helper shares.

    Trajectory ``i`` occupies ``token_lengths[i]`` positions, right-aligned for ``side="left"`` and left-aligned
    for ``"right"``; its rows start ``offsets[i]`` (default 0) positions into it.
    """
    chosen = _choice(side, ("left", "right"))
    if chosen is None:
        raise _fail("side", "'left' or 'right'", describe(side))
    side = chosen
    if side == "left" and token_lengths is None and (samples == "samples" or offsets is not None):
        # Left padding lines up the trajectories' last tokens, which neither routes nor offset values can tell:
        # taking the rows for the tokens put every row one token late (a trajectory has one more token than rows).
        if samples == "samples":
            why = (
                "a trajectory usually has one token more than route rows, its last sampled token never being "
                "forwarded; for rows that cover every token pass the row counts"
            )
        else:
            why = "values that start at an offset, such as completion logprobs, need not reach the last token"
        raise _fail(
            "token_lengths",
            f"each trajectory's token count with side='left' (left padding lines up the trajectories' last "
            f"tokens; {why}), or side='right'",
            "None",
        )
    lengths = _token_lengths(token_lengths, counts, offsets, samples=samples)
    longest = max(lengths, default=0)
    if max_len is None:
        width = longest
    else:
        width = check_int(max_len, "max_len", minimum=0, maximum=MAX_DIM, error=R3WireError)
        if longest > width:
            i = lengths.index(longest)
            raise _fail("max_len", f">= every token length ({samples}[{i}] has {longest})", width)
    starts = list(offsets) if offsets is not None else [0] * len(counts)
    firsts = [(width - length if side == "left" else 0) + start for length, start in zip(lengths, starts, strict=True)]
    return width, firsts


def _fill_kind(fill: object, n_experts: int | None) -> str:
    kind = _choice(fill, ("arange", "balanced"))
    if kind is None:
        raise _fail("fill", "'arange' or 'balanced'", describe(fill))
    if kind == "balanced" and n_experts is None:
        raise _fail("num_experts", "given with fill='balanced' (padding is spread over the experts)", "None")
    return kind


def _flag(value: object, field: str) -> bool:
    """``value`` as a bool: ``True``, ``False`` or a NumPy bool, nothing else (an array's truth is ambiguous, and a
    truthy string such as ``"no"`` would read as ``True``)."""
    if not isinstance(value, (bool, np.bool_)):
        raise _fail(field, "a bool (True or False)", describe(value))
    return bool(value)


def _replayed(value: object, rows: Sequence[int]) -> list[Array | None]:
    """Each sample's row mask (``True`` = replay), or ``None`` where every row is replayed."""
    if value is None:
        return [None] * len(rows)
    if not _is_sequence(value):
        raise _fail("replayed", "a sequence of per-sample row masks (bool arrays, or None)", type(value).__name__)
    items = copy_list(  # type: ignore[call-overload]  # a sequence, an array or a tensor
        value,
        most=len(rows) + 1,
        field="replayed",
        expected="a sequence of per-sample row masks (bool arrays, or None)",
    )
    if len(items) != len(rows):
        raise _fail("replayed", f"{len(rows)} row masks (one per sample)", _got(items, value, len(rows)))
    return [
        None if item is None else _row_mask(item, count, f"replayed[{i}]")
        for i, (item, count) in enumerate(zip(items, rows, strict=True))
    ]


def _row_mask(value: object, count: int, field: str) -> Array | None:
    """One sample's row mask as a bool ``[count]`` array, or ``None`` when it marks every row replayed."""
    keep = _from_caller(value, field)
    if keep.dtype != np.bool_ or keep.shape != (count,):
        # Bool only: an integer 0/1 array reads as a mask of either polarity, and this one's is True = replay.
        raise _fail(
            field, f"a bool array of shape [{count}] (True = replay the row)", f"{keep.dtype} {list(keep.shape)}"
        )
    return None if keep.all() else keep


def _masked_count(keep: Array | None) -> int:
    return 0 if keep is None else keep.size - int(np.count_nonzero(keep))


def _copy_sample(
    dest: Array,
    arr: Array,
    keep: Array | None,
    filler: _Filler,
    *,
    field: str,
    limit: int,
    expected: str,
    check: bool,
) -> None:
    """Copy a range-checked sample into ``dest``; rows ``keep`` marks False (never checked) become padding rows."""
    if keep is None:
        # Checking right before the copy reads the sample while it is in cache for the copy (measured: the range
        # check then adds ~15% to a copy instead of a full extra pass over memory).
        _check_range(arr, limit, field, expected=expected)
        if check:
            _check_distinct(arr, field)
        np.copyto(dest, arr, casting="unsafe")  # lossless: every id was range-checked above
        return
    # Rows not replayed hold whatever the engine left there (Fireworks zeros, NeMo-RL -1): only replayed ones are
    # checked, and the others are overwritten after the copy.
    kept_rows = np.flatnonzero(keep)
    kept = arr[kept_rows]
    _check_range(kept, limit, field, expected=expected, rows=kept_rows)
    if check:
        _check_distinct(kept, field, rows=kept_rows)
    np.copyto(dest, arr, casting="unsafe")
    dest[~keep] = filler.take(arr.shape[0] - kept_rows.size)


def _bounded(shape: tuple[int, ...], max_elements: object, field: str) -> None:
    """Refuse an output shape over the caller's (or the default) element limit before allocating it."""
    check_element_count(shape, optional_max_elements(max_elements), field, error=R3WireError)


def _room(current: Array | None, needed: int, dtype: type, field: str, *, keep: int, bound: int | None) -> Array:
    """``current`` if it holds ``needed`` items, else a new 1-d buffer holding ``current[:keep]``, its capacity
    doubled (many small calls stay linear overall) within ``bound`` (``max_elements``); the rest is unset."""
    if current is not None and needed <= current.shape[0]:
        return current
    held = 0 if current is None else current.shape[0]
    capacity = max(needed, 2 * held)
    if bound is not None:
        capacity = max(needed, min(capacity, bound))
    grown = _allocate((capacity,), dtype, field)
    if current is not None:
        grown[:keep] = current[:keep]
    return grown


def _allocate(shape: tuple[int, ...], dtype: np.dtype[Any] | type, field: str) -> Array:
    # The element limit is checked first; this only turns NumPy's own refusal (no limit given, an address space
    # too small) into the library's error instead of a leaked ValueError or MemoryError.
    try:
        return np.empty(shape, dtype=dtype)
    except (ValueError, MemoryError) as exc:
        raise _fail(field, "an array this process can allocate", f"{list(shape)} ({type(exc).__name__})") from None


def validate_routes(
    samples: Sequence[Any] | Array,
    *,
    num_experts: int | None = None,
    token_lengths: Sequence[int] | Array | None = None,
    max_elements: int | None = None,
) -> None:
    """Check a batch of routes without building anything: every rule :func:`pad_routes` applies with ``check=True``.

    The rules: each sample is a 3-d integer array ``[rows, layers, top_k]`` within the decoders' shape bounds;
    all share ``[layers, top_k]``; ``layers >= 1`` and ``top_k >= 1``; ids are non-negative and below
    ``num_experts`` (when given, else they fit the batch dtype); ids within each row (one token, one layer) are
    distinct; rows do not exceed ``token_lengths`` (when given).

    Args:
        samples: one array per trajectory: NumPy arrays of any integer dtype, torch tensors or nested lists.
        num_experts: the model's expert count.
        token_lengths: each trajectory's token count, when it differs from its route rows.
        max_elements: the most ids (summed over the samples) to read, as :func:`pack_routes` would copy them;
            ``None`` is the decoders' default limit. Checked before any id is read (a batch given as one array or
            tensor, by its shape before any sample is converted).

    Raises:
        R3WireError: the first broken rule, or the samples exceed ``max_elements``; the message names the sample
            and, for an id, its row, layer and slot.
    """
    token_lengths, _ = _sizes_first(samples, "samples", max_elements, token_lengths)
    arrays = _samples(samples)
    n_experts = optional_num_experts(num_experts)
    if arrays:
        # Before any read: a broadcast view declares any size in a few bytes, and the distinctness sort copies.
        _bounded((sum(arr.shape[0] for arr in arrays), *arrays[0].shape[1:]), max_elements, "samples")
    else:
        optional_max_elements(max_elements)
    _token_lengths(token_lengths, [arr.shape[0] for arr in arrays])
    dtype = _batch_dtype(arrays, n_experts)
    limit, expected = _id_limit(dtype, n_experts), _range_expected(dtype, n_experts)
    if arrays:
        _check_filler(arrays[0].shape[2], dtype, n_experts, "samples[0].shape[2]")
    for i, arr in enumerate(arrays):
        _check_range(arr, limit, f"samples[{i}]", expected=expected)
        _check_distinct(arr, f"samples[{i}]")


def _from_traces(
    samples: object, token_lengths: object, replayed: object, *, lengths_required: bool = False
) -> tuple[Any, Any, Any]:
    """Samples that are :class:`RouteTrace` objects as the arrays, token lengths and row masks they hold.

    Returns ``(samples, token_lengths, replayed)``, unchanged when no sample is a trace. Each trace's rows come
    from :meth:`RouteTrace.finalize` at its token length (``token_lengths[i]`` when given, else its recorded token
    count) and its row mask from :attr:`RouteTrace.replayed`: the pieces a caller would otherwise pass by hand,
    where forgetting the mask replays padding rows as routes. ``lengths_required``: traces need ``token_lengths``
    (pack_routes, whose result has the mask only then).

    Raises:
        R3WireError: traces mixed with arrays, ``replayed`` given with traces, ``token_lengths`` missing where
            required, a trace never added to, or a trace without token ids and no ``token_lengths``; a token
            length below a trace's rows or recorded tokens.
    """
    if not isinstance(samples, (list, tuple)):
        return samples, token_lengths, replayed
    samples = copy_list(samples)  # its storage, read once: a subclass's own __iter__ may raise or differ
    if not any(isinstance(sample, RouteTrace) for sample in samples):
        return samples, token_lengths, replayed
    for i, sample in enumerate(samples):
        if not isinstance(sample, RouteTrace):
            raise _fail(
                f"samples[{i}]", "a RouteTrace, as every sample (traces and arrays are not mixed)", describe(sample)
            )
    if token_lengths is None and lengths_required:
        # Without token_lengths the result has no mask, and a trace's rows no call replayed would pass as routes.
        raise _fail(
            "token_lengths",
            "given with RouteTrace samples (e.g. [len(t.token_ids) for t in traces]): the result then has the mask",
            "None",
        )
    if replayed is not None:
        raise _fail("replayed", "None (each RouteTrace says which of its rows were replayed)", "row masks")
    lengths: list[int | None]
    if token_lengths is None:
        lengths = [None] * len(samples)
    else:
        lengths = list(_int_list(token_lengths, "token_lengths", len(samples), "one token length per sample"))
    arrays: list[Array] = []
    masks: list[Array | None] = []
    totals: list[int] = []
    for i, (trace, given) in enumerate(zip(samples, lengths, strict=True)):
        if trace.dtype is None:
            raise _fail(f"samples[{i}]", "a RouteTrace with at least one add()", "an empty RouteTrace")
        recorded = trace.token_ids
        if given is not None:
            length = given
        elif recorded is not None:
            length = recorded.shape[0]
        else:
            raise _fail("token_lengths", f"given (samples[{i}] is a RouteTrace that recorded no token ids)", "None")
        try:
            routes, _ = trace.finalize(length)
        except R3WireError as exc:
            raise _fail(f"token_lengths[{i}]", str(exc.expected), exc.got) from None
        arrays.append(routes)
        masks.append(trace.replayed)
        totals.append(length)
    return arrays, totals, masks


def pad_routes(
    samples: Sequence[Any] | Array,
    *,
    token_lengths: Sequence[int] | Array | None = None,
    side: Literal["left", "right"] = "left",
    num_experts: int | None = None,
    max_len: int | None = None,
    check: bool = False,
    out: Array | None = None,
    fill: Fill = "arange",
    max_elements: int | None = None,
    replayed: Sequence[Any] | Array | None = None,
) -> tuple[Array, Array]:
    """Pad ragged per-trajectory routes into one ``[batch, max_len, layers, top_k]`` array and a mask.

    Trajectory ``i`` occupies ``token_lengths[i]`` consecutive positions (right-aligned for ``side="left"``,
    left-aligned for ``"right"``); its route rows fill the first ``rows_i`` of them, in order. Every other row,
    padding and uncaptured alike (such as the last sampled token, which the engine never forwarded), is a
    padding row (see ``fill``), and ``mask`` is ``True`` exactly there. The output is written once: each row is
    either copied from a sample or filled, never both. :func:`pad_sequences` uses the same layout.

    Args:
        samples: one ``[rows_i, layers, top_k]`` array per trajectory (any integer dtype; torch tensors and nested
            lists are accepted); all share ``[layers, top_k]``, both ``>= 1``. Zero-row samples are allowed. Or
            one :class:`RouteTrace` per trajectory (every sample a trace): its rows (:meth:`RouteTrace.finalize`),
            its token count as the default token length and its :attr:`RouteTrace.replayed` rows come with it,
            so rows no call replayed are masked without a ``replayed=`` (which is then refused).
        token_lengths: each trajectory's token count; ``rows_i <= token_lengths[i]``. Required with
            ``side="left"``, which lines up the trajectories' last tokens (a trajectory usually has one more token
            than rows); with ``side="right"`` the default is ``rows_i``.
        side: ``"left"`` puts padding before each trajectory, ``"right"`` after it.
        num_experts: the model's expert count. Fixes the batch dtype to :func:`r3wire.route_dtype`
            (identical on every rank and step) and requires every id to be below it.
        max_len: the padded length (e.g. the token batch's sequence length); default the longest token length.
        check: also run :func:`validate_routes`' costlier rule: ids distinct within each row. A bool (``True``,
            ``False`` or a NumPy bool); anything else is refused.
        out: a writable array of exactly the output shape and batch dtype to fill instead of allocating one
            (a reused or pinned buffer), sharing no memory with any sample (the output is written in one pass;
            memory bounds are compared, so a sample inside ``out``'s address range is refused), and whose cells
            do not alias each other (a zero stride on an axis longer than 1 is refused). Its contents are
            unspecified if an error is raised.
        fill: what padding rows hold. ``"arange"``: ``0 .. top_k - 1`` in every row and layer. ``"balanced"``
            (needs ``num_experts``): the batch's padding rows, numbered in order (sample by sample, position by
            position), take consecutive ids modulo ``num_experts`` (row ``g`` holds ``(g * top_k + j) %
            num_experts`` for slot ``j``, in every layer), so each expert receives the same number of padding
            slots per layer to within one and no expert-parallel rank gets every padding token. Deterministic.
        max_elements: the largest ``padded`` (in ids) to allocate; ``None`` is the decoders' default limit. A
            batch given as one array or tensor is held to it by its own shape (and ``token_lengths`` counted
            against its first axis) before any sample is converted.
        replayed: per sample, ``None`` or a bool ``[rows_i]`` array, ``True`` where the row was replayed (what
            :attr:`r3wire.formats.ReadResult.mask` holds: Fireworks BITMAP and ``null`` rows). Rows marked
            ``False`` are neither checked nor copied: they become padding rows, ``True`` in ``mask``.

    Returns:
        ``(padded, mask)``: ``padded`` ``[batch, max_len, layers, top_k]`` of the batch dtype (``num_experts``'s
        route dtype, else the smallest dtype holding every sample's dtype; uint8 for an empty batch), and
        ``mask``, bool ``[batch, max_len]``, ``True`` = do not replay (padding or uncaptured). An empty batch
        gives shape ``[0, max_len or 0, 0, 0]`` (with ``token_lengths=[]`` under left padding, as any batch).

    Raises:
        R3WireError: a sample is not a 3-d integer array, its shape is out of bounds, samples disagree on
            ``[layers, top_k]``, ``layers < 1`` or ``top_k < 1``, ``side="left"`` without ``token_lengths``, a
            sample has more rows than its token length, a length exceeds ``max_len``, the output exceeds
            ``max_elements``, an id is negative, does not fit the batch dtype or is ``>= num_experts`` (the
            message names sample, row, layer and slot), ids repeat within a row (``check=True``), ``check`` is not
            a bool, ``fill`` is unknown or ``"balanced"`` without ``num_experts``, or ``out`` does not match, may
            share memory with a sample or has a zero stride on an axis longer than 1 (cells that alias each
            other), or ``replayed`` does not hold one bool ``[rows_i]`` array (or ``None``) per sample. With
            :class:`RouteTrace` samples: one that is not a trace, ``replayed`` given, a trace never added to, one
            without token ids and no ``token_lengths``, or a token length below a trace's rows or recorded tokens.
    """
    samples, token_lengths, replayed = _from_traces(samples, token_lengths, replayed)
    token_lengths, _ = _sizes_first(samples, "samples", max_elements, token_lengths)
    arrays = _samples(samples)
    n_experts = optional_num_experts(num_experts)
    kind = _fill_kind(fill, n_experts)
    check = _flag(check, "check")
    rows = [arr.shape[0] for arr in arrays]
    keeps = _replayed(replayed, rows)
    width, firsts = _layout(rows, token_lengths, None, side, max_len)
    dtype = _batch_dtype(arrays, n_experts)
    layers, top_k = arrays[0].shape[1:] if arrays else (0, 0)
    if arrays:
        _check_filler(top_k, dtype, n_experts, "samples[0].shape[2]")
    shape = (len(arrays), width, layers, top_k)
    _bounded(shape, max_elements, "padded")
    padded = _output(out, shape, dtype, arrays)
    mask = np.ones((len(arrays), width), dtype=np.bool_)
    longest_run = max(
        (
            max(first, width - first - n, _masked_count(keep))
            for first, n, keep in zip(firsts, rows, keeps, strict=True)
        ),
        default=0,
    )
    filler = _Filler(kind, longest_run=longest_run, layers=layers, top_k=top_k, dtype=dtype, n_experts=n_experts)
    limit, expected = _id_limit(dtype, n_experts), _range_expected(dtype, n_experts)
    for i, arr in enumerate(arrays):
        start, stop = firsts[i], firsts[i] + rows[i]
        if start:
            padded[i, :start] = filler.take(start)
        keep = keeps[i]
        _copy_sample(
            padded[i, start:stop], arr, keep, filler, field=f"samples[{i}]", limit=limit, expected=expected, check=check
        )
        if stop < width:
            padded[i, stop:] = filler.take(width - stop)
        mask[i, start:stop] = False if keep is None else ~keep
    return padded, mask


class _Filler:
    """Padding rows, handed out in batch order: ``arange(top_k)`` rows, or balanced rows that continue the cycle."""

    __slots__ = ("_block", "_dtype", "_experts", "_layers", "_next", "_period", "_top_k")

    def __init__(
        self,
        fill: str,
        *,
        longest_run: int,
        layers: int,
        top_k: int,
        dtype: np.dtype[Any],
        n_experts: int | None,
    ) -> None:
        self._layers, self._top_k, self._dtype, self._next = layers, top_k, dtype, 0
        if fill == "arange" or n_experts is None:
            self._experts = self._period = 0
            self._block = _padding_rows(longest_run, layers, top_k, dtype)
            return
        self._experts = n_experts
        # Row g's ids repeat with g modulo this period; a block one period longer than the longest run serves
        # every run by slicing. A longer period (many experts, short runs) builds each run on its own instead.
        self._period = n_experts // math.gcd(n_experts, top_k)
        size = longest_run + self._period if self._period <= longest_run else 0
        self._block = self._balanced(0, size)

    def _balanced(self, first: int, count: int) -> Array:
        ids = (np.arange(first, first + count, dtype=np.int64)[:, None] * self._top_k + np.arange(self._top_k)) % (
            self._experts
        )
        block = np.empty((count, self._layers, self._top_k), dtype=self._dtype)
        if count and self._layers:
            block[:, 0] = ids
            done = 1
            while done < self._layers:
                step = min(done, self._layers - done)
                block[:, done : done + step] = block[:, :step]
                done += step
        return block

    def take(self, count: int) -> Array:
        if not self._experts:
            return self._block[:count]
        first, self._next = self._next, self._next + count
        if self._block.shape[0]:
            phase = first % self._period
            return self._block[phase : phase + count]
        return self._balanced(first, count)


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


def _output(
    out: object,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    inputs: Sequence[Array],
    *,
    field: str = "samples",
    layout: str = "[batch, max_len, layers, top_k]",
) -> Array:
    if out is None:
        return _allocate(shape, dtype, "padded")
    if not isinstance(out, np.ndarray):
        raise _fail("out", "a NumPy array (for a torch tensor pass tensor.numpy())", type(out).__name__)
    if out.shape != shape:
        raise _fail("out.shape", f"{list(shape)} {layout}", f"{list(out.shape)}")
    if out.dtype != dtype:
        if _native(out.dtype) == dtype:
            # dtype.name ignores byte order: "must be int16, got >i2" would name the same type twice.
            order = "big-endian" if out.dtype.byteorder == ">" else "little-endian"
            got = f"{out.dtype.name} in {order} byte order ({out.dtype.str})"
            raise _fail("out.dtype", f"{dtype.name} in native byte order (the batch dtype)", got)
        raise _fail("out.dtype", f"{dtype.name} (the batch dtype)", str(out.dtype))
    if not out.flags.writeable:
        raise _fail("out", "a writable array", "a read-only array")
    # Cells that alias each other (as_strided(..., writeable=True) with a zero stride): a later sample's rows would
    # overwrite an earlier one's under its unmasked positions. Other self-overlap is not searched for
    # (np.shares_memory of out with itself is a costly search); a zero stride is the form a view gives.
    aliased = [
        axis for axis, (stride, size) in enumerate(zip(out.strides, out.shape, strict=True)) if not stride and size > 1
    ]
    if aliased and out.size:
        raise _fail(
            "out",
            "an array whose cells are distinct memory (no zero stride on an axis longer than 1)",
            f"strides {list(out.strides)} for shape {list(out.shape)} (axis {aliased[0]})",
        )
    # One pass writes sample i's cells before it reads sample j: a sample inside out would be read after being
    # overwritten. The default max_work compares address bounds only (O(1) per sample, never a scan), so a strided
    # sample that interleaves with out without touching its elements is refused as well. map() keeps the common
    # case (no overlap) out of a Python loop (measured: about 40% less per sample).
    overlaps = functools.partial(np.may_share_memory, out)
    if any(map(overlaps, inputs)):
        i = next(i for i, arr in enumerate(inputs) if overlaps(arr))
        raise _fail(
            "out",
            f"an array sharing no memory with {field} (one pass would overwrite a sample before reading it)",
            f"an array whose memory may overlap {field}[{i}]",
        )
    return out


# What an empty nested sequence becomes in pad_sequences: recognized by identity, it takes no part in the dtype.
_NO_VALUES: Final[Array] = np.empty(0, dtype=np.float64)
_NO_VALUES.flags.writeable = False


def _as_values(value: object, field: str) -> Array:
    if isinstance(value, RouteTrace):
        # Its rows are routes, not per-token values; the values that go with it are its token ids.
        raise _fail(
            field,
            "per-token values (a RouteTrace pads with pad_routes; pad its token ids with pad_sequences"
            "([trace.token_ids, ...]))",
            "a RouteTrace",
        )
    arr = _from_caller(value, field)
    if arr.ndim == 1 and _neutral_empty(value, arr):
        return _NO_VALUES
    if arr.dtype.kind not in "biuf":
        raise _fail(f"{field}.dtype", "a bool, integer or float dtype", str(arr.dtype))
    if arr.ndim < 1:
        raise _fail(field, "an array with a token axis first", f"shape {list(arr.shape)}")
    for axis, size in enumerate(arr.shape[1:], start=1):
        # As routes need layers and top_k >= 1: a value per token has at least one element, so the mask is never
        # larger than the values (a 95-byte [2**30, 0] payload cannot ask for a 1 GiB mask).
        if size < 1:
            raise _fail(f"{field}.shape[{axis}]", ">= 1 (each token's value has at least one element)", size)
    return arr


_KINDS: Final = {"b": "bool", "i": "integer", "u": "integer", "f": "float"}


def _values_dtype(arrays: Sequence[Array]) -> np.dtype[Any] | None:
    """The one dtype every sample converts to exactly: same kind (bool, integer, float), the widest of them.

    ``None`` when no sample has a dtype (every one is an empty list, :data:`_NO_VALUES`).
    """
    typed = [(i, arr) for i, arr in enumerate(arrays) if arr is not _NO_VALUES]
    if not typed:
        return None
    first, head = typed[0]
    dtype = _native(head.dtype)
    kind = _KINDS[dtype.kind]
    for i, arr in typed[1:]:
        if _KINDS[arr.dtype.kind] != kind:
            article = "an" if kind == "integer" else "a"
            raise _fail(
                f"values[{i}].dtype", f"{article} {kind} dtype like values[{first}] ({dtype.name})", str(arr.dtype)
            )
        wider = np.promote_types(dtype, arr.dtype)
        if wider.kind != dtype.kind and kind == "integer" and wider.kind == "f":
            raise _fail(
                f"values[{i}].dtype",
                f"an integer dtype that {dtype.name} combines with exactly (uint64 and signed do not)",
                str(arr.dtype),
            )
        dtype = _native(wider)
    return dtype


def _fill_value(fill: object, dtype: np.dtype[Any]) -> Array:
    """``fill`` as a scalar of ``dtype``, refused when it would not be stored exactly."""
    # np.timedelta64 is an np.integer, but a duration with a unit: refused like any other non-number.
    if isinstance(fill, np.timedelta64) or not isinstance(fill, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise _fail("fill", "a number (bool, int or float)", type(fill).__name__)
    if isinstance(fill, (bool, np.bool_)) and dtype.kind != "b":
        # As elsewhere a bool among numbers is refused: True would be written as 1 without a word.
        raise _fail("fill", f"a number of {dtype.name} values, not a bool (a bool fill is for bool values)", fill)
    try:
        with np.errstate(all="ignore"):
            stored = np.asarray(fill).astype(dtype)
    except (OverflowError, TypeError, ValueError):
        stored = None
    if stored is not None:
        back = stored.item()
        # Compared as Python numbers: a NumPy integer scalar beside a float converts to float64 (np.int64(2**53 + 1)
        # "equals" the 2**53 stored), where a Python int compares with a float exactly.
        given = fill.item() if isinstance(fill, np.generic) else fill
        if back == given or (isinstance(back, float) and math.isnan(back) and math.isnan(float(fill))):
            return stored
    raise _fail("fill", f"a value exactly representable in {dtype.name}", describe(fill))


_DTYPE_AND_NDIM: Final = operator.attrgetter("dtype", "ndim")


def _same_vectors(values: object) -> list[Array] | None:
    """``values`` as a list when it is a list or tuple of 1-d NumPy arrays of one bool, integer or float dtype.

    The common batch (one logprob or token-id array per trajectory) then needs none of the per-sample conversion
    and dtype promotion, which cost more than copying a short sample (measured); ``None`` for anything else.
    """
    if type(values) is not list and type(values) is not tuple:
        return None
    if not values or not types_within(values, _ARRAY_ONLY):
        return None
    # One (dtype, ndim) pair in the set: every sample's dtype equals it (a set holds equal values once).
    kinds = set(map(_DTYPE_AND_NDIM, values))
    if len(kinds) != 1:
        return None
    dtype, ndim = kinds.pop()
    if ndim != 1 or dtype.kind not in "biuf":
        return None
    return list(values)


def pad_sequences(
    values: Sequence[Any] | Array,
    *,
    token_lengths: Sequence[int] | Array | None = None,
    side: Literal["left", "right"] = "left",
    fill: float = 0,
    out: Array | None = None,
    offsets: Sequence[int] | Array | None = None,
    max_len: int | None = None,
    max_elements: int | None = None,
) -> tuple[Array, Array]:
    """Pad ragged per-token values (logprobs, token ids, advantages) with exactly :func:`pad_routes`' layout.

    For the same ``token_lengths``, ``side`` and ``max_len``, token position ``t`` of trajectory ``i`` lands in
    cell ``[i, first_i + t]`` here and in :func:`pad_routes`, so element ``j`` of a sample with ``offsets[i] = 0``
    sits in the same cell as routes row ``j``. A sample whose values start later (logprobs cover the completion
    only) gives its first position as ``offsets[i]``.

    Args:
        values: one array per trajectory, ``[n_i, *rest]`` (``rest`` shared, each dimension ``>= 1``; 1-d for
            one value per token), of a bool, integer or float dtype (NumPy arrays, torch tensors or nested
            lists). All of one kind; the output dtype is the widest of them (every value converts exactly). An
            empty list (a trajectory with no values) takes the other samples' kind and ``rest``: it stands for
            ``[0, *rest]``. A nested list of ints NumPy holds only as float64 or object (ints past int64 beside
            others) is refused rather than rounded.
        token_lengths: each trajectory's token count; ``offsets[i] + n_i <= token_lengths[i]``. Default:
            ``offsets[i] + n_i``, except that ``offsets`` with ``side="left"`` require it (left padding lines up
            the last tokens, which values that start at an offset need not reach).
        side: ``"left"`` puts padding before each trajectory, ``"right"`` after it.
        fill: what every cell outside the values holds; must be exactly representable in the output dtype (a
            bool only for bool values).
        out: a writable array of exactly the output shape and dtype to fill instead of allocating one, sharing
            no memory with any sample and without a zero stride (as for :func:`pad_routes`).
        offsets: the trajectory position of each sample's first value (default 0, as route rows: values from the
            first token). Values that end at the last token need it: completion logprobs without it sit beside
            prompt tokens, with a mask that calls those cells valid (``offsets=[n - len(v), ...]``; or pad a
            :class:`RouteTrace`'s :attr:`~RouteTrace.logprobs`, which cover every token).
        max_len: the padded length; default the longest token length.
        max_elements: the largest ``padded`` (in elements) to allocate; ``None`` is the decoders' default limit.
            A batch given as one array or tensor is held to it by its own shape (and ``token_lengths`` and
            ``offsets`` counted against its first axis) before any sample is converted.

    Returns:
        ``(padded, mask)``: ``padded`` ``[batch, max_len, *rest]``, and bool ``mask`` ``[batch, max_len]``,
        ``True`` where a cell holds no value (padding, or a position of the trajectory the sample does not
        cover) — the same polarity as :func:`pad_routes`: ``True`` = do not use. An empty batch gives
        ``[0, max_len or 0]`` of float64 (or ``out``'s dtype, which must be bool, integer or float as a sample's
        is; so too where every sample is an empty list).

    Raises:
        R3WireError: a sample is not an array of a bool, integer or float dtype with a token axis (or is a nested
            list of ints NumPy cannot hold exactly), samples differ in ``rest`` (the first sample with a dtype
            named; an empty list takes any) or in kind, ``out`` is of no bool, integer or float dtype where no
            sample has one, ``offsets`` with ``side="left"`` come without ``token_lengths``, a length, offset or
            ``max_len`` is inconsistent, the output exceeds ``max_elements``, ``fill`` would not be stored
            exactly, or ``out`` does not match, may share memory with a sample or has a zero stride on an axis
            longer than 1.
    """
    token_lengths, offsets = _sizes_first(values, "values", max_elements, token_lengths, offsets)
    same = _same_vectors(values)
    arrays = same
    if arrays is None:
        arrays = _uniform(
            values,
            "values",
            "a sequence of per-token arrays",
            _as_values,
            lambda first, i: f"[n{''.join(f', {d}' for d in first.shape[1:])}] (the trailing shape of values[{i}])",
            neutral=_NO_VALUES,
        )
    # The sample that gives the trailing shape: the first one with a dtype (an empty list, _NO_VALUES, stands for
    # [0, *rest] of the others' rest).
    reference = next((i for i, arr in enumerate(arrays) if arr is not _NO_VALUES), None)
    counts = list(map(len, arrays))  # every sample has a token axis (checked above)
    if reference is not None:
        # The decoders' shape bound. Samples share every dimension but the first, so the sample with the most
        # rows stands for all (one check per batch: a per-sample check costs more than copying a short sample).
        longest = counts.index(max(counts))
        if arrays[longest] is _NO_VALUES:  # no sample has a row: the reference's trailing dims are bounded
            longest = reference
        check_shape(list(arrays[longest].shape), f"values[{longest}].shape", ndim=None, error=R3WireError)
    starts = None if offsets is None else _int_list(offsets, "offsets", len(arrays), "one offset per sample")
    width, firsts = _layout(counts, token_lengths, starts, side, max_len, samples="values")
    rest: tuple[int, ...] = () if reference is None else arrays[reference].shape[1:]
    typed: np.dtype[Any] | None = None
    if same is not None:
        typed = _native(same[0].dtype)  # what _values_dtype gives for one dtype, without its per-sample loop
    elif arrays:
        typed = _values_dtype(arrays)
    if typed is not None:
        dtype = typed
    elif isinstance(out, np.ndarray):
        dtype = out.dtype  # no sample has a dtype (none, or only empty lists)
        if dtype.kind not in _KINDS:  # what every sample with a dtype is held to
            raise _fail("out.dtype", "a bool, integer or float dtype", str(dtype))
    else:
        dtype = np.dtype(np.float64)
    scalar = _fill_value(fill, dtype)
    shape = (len(arrays), width, *rest)
    _bounded(shape, max_elements, "padded")
    padded = _output(out, shape, dtype, arrays, field="values", layout="[batch, max_len, *rest]")
    mask = np.ones((len(arrays), width), dtype=np.bool_)
    # Per-token arrays are short: this loop's per-sample overhead, not the bytes, is what costs (kept minimal).
    for row, row_mask, arr, start, count in zip(padded, mask, arrays, firsts, counts, strict=True):
        stop = start + count
        if start:
            row[:start] = scalar
        if count:  # an empty list (_NO_VALUES, 1-d) has no rows, nor rest to broadcast into [0, *rest]
            row[start:stop] = arr  # exact: same kind, widened (see _values_dtype)
            row_mask[start:stop] = False
        if stop < width:
            row[stop:] = scalar
    return padded, mask


@overload
def pack_routes(
    samples: Sequence[Any] | Array,
    *,
    token_lengths: None = None,
    replayed: None = None,
    num_experts: int | None = None,
    check: bool = False,
    fill: Fill = "arange",
    max_elements: int | None = None,
) -> tuple[Array, Array]: ...


@overload
def pack_routes(
    samples: Sequence[Any] | Array,
    *,
    token_lengths: Sequence[int] | Array,
    replayed: Sequence[Any] | Array | None = None,
    num_experts: int | None = None,
    check: bool = False,
    fill: Fill = "arange",
    max_elements: int | None = None,
) -> tuple[Array, Array, Array]: ...


@overload
def pack_routes(
    samples: Sequence[Any] | Array,
    *,
    token_lengths: Sequence[int] | Array | None = None,
    replayed: Sequence[Any] | Array,
    num_experts: int | None = None,
    check: bool = False,
    fill: Fill = "arange",
    max_elements: int | None = None,
) -> tuple[Array, Array, Array]: ...


def pack_routes(
    samples: Sequence[Any] | Array,
    *,
    token_lengths: Sequence[int] | Array | None = None,
    replayed: Sequence[Any] | Array | None = None,
    num_experts: int | None = None,
    check: bool = False,
    fill: Fill = "arange",
    max_elements: int | None = None,
) -> tuple[Array, Array] | tuple[Array, Array, Array]:
    """Concatenate per-trajectory routes for trainers that use packed (varlen) sequences.

    Each sample is copied exactly once, straight into the result, converted on the way if needed. Without
    ``token_lengths`` the rows go back to back. With it, trajectory ``i`` takes ``token_lengths[i]`` positions, as
    in a packed token batch: its rows fill the first ``rows_i`` of them and the rest (the last sampled token, which
    the engine never forwarded) are padding rows, flagged in a mask, the layout of :func:`pad_routes` with
    ``side="right"`` for one sample.

    Args:
        samples: one ``[rows_i, layers, top_k]`` array per trajectory, or one :class:`RouteTrace` per trajectory
            (then ``token_lengths`` is required, so that the result has the mask), as for :func:`pad_routes`.
        token_lengths: each trajectory's token count (``>= rows_i``), the lengths behind the token batch's
            ``cu_seqlens``. Given, the result has a third member, the mask.
        replayed: per sample, ``None`` or a bool ``[rows_i]`` array, ``True`` where the row was replayed, as for
            :func:`pad_routes`; rows marked ``False`` become padding rows. Given, the result has the mask.
        num_experts: the model's expert count: fixes the dtype and bounds the ids, as for :func:`pad_routes`.
        check: also require distinct ids within each row (a bool, as for :func:`pad_routes`).
        fill: what padding rows hold, as for :func:`pad_routes` (``"balanced"`` needs ``num_experts``).
        max_elements: the largest ``flat`` (in ids) to allocate; ``None`` is the decoders' default limit. A batch
            given as one array or tensor is held to it by its own shape (and ``token_lengths`` counted against
            its first axis) before any sample is converted.

    Returns:
        ``(flat, cu_seqlens)``: ``flat`` ``[sum(rows_i), layers, top_k]`` (``[0, 0, 0]`` for an empty batch) and
        ``cu_seqlens``, int64 ``[batch + 1]``, the prefix sums of ``rows_i`` starting at 0, so sample ``i`` is
        ``flat[cu_seqlens[i]:cu_seqlens[i + 1]]``. (flash-attn wants int32: ``cu_seqlens.astype(np.int32)``.)
        With ``token_lengths`` or ``replayed``: ``(flat, cu_seqlens, mask)``, where ``flat`` has
        ``sum(token_lengths)`` rows, ``cu_seqlens`` sums the token lengths (the token batch's own), and
        ``mask``, bool ``[sum(token_lengths)]``, is ``True`` = do not replay (uncaptured or not replayed).

    Raises:
        R3WireError: as :func:`pad_routes` for the samples, ids, ``token_lengths``, ``replayed``, ``check`` and
            ``fill``; the total rows exceed ``max_elements`` (or int64, whatever the limit); :class:`RouteTrace`
            samples without ``token_lengths``.
    """
    samples, token_lengths, replayed = _from_traces(samples, token_lengths, replayed, lengths_required=True)
    token_lengths, _ = _sizes_first(samples, "samples", max_elements, token_lengths)
    arrays = _samples(samples)
    n_experts = optional_num_experts(num_experts)
    kind = _fill_kind(fill, n_experts)
    check = _flag(check, "check")
    dtype = _batch_dtype(arrays, n_experts)
    layers, top_k = arrays[0].shape[1:] if arrays else (0, 0)
    rows = [arr.shape[0] for arr in arrays]
    masked = token_lengths is not None or replayed is not None
    keeps = _replayed(replayed, rows)
    lengths = rows if token_lengths is None else _token_lengths(token_lengths, rows)
    # Summed as Python ints: NumPy's cumsum would wrap silently past int64 (eight broadcast 2**60-row views).
    total = sum(lengths)
    check_int(
        total,
        "sum(token_lengths)" if token_lengths is not None else "sum(rows)",
        minimum=0,
        maximum=_INT64_MAX,
        error=R3WireError,
    )
    shape = (total, layers, top_k)
    _bounded(shape, max_elements, "flat")
    if arrays and masked:
        _check_filler(top_k, dtype, n_experts, "samples[0].shape[2]")
    cu_seqlens = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu_seqlens[1:])
    flat = _allocate(shape, dtype, "flat")
    mask = np.ones(total, dtype=np.bool_) if masked else None
    longest_run = max(
        (max(length - n, _masked_count(keep)) for length, n, keep in zip(lengths, rows, keeps, strict=True)),
        default=0,
    )
    filler = _Filler(kind, longest_run=longest_run, layers=layers, top_k=top_k, dtype=dtype, n_experts=n_experts)
    limit, expected = _id_limit(dtype, n_experts), _range_expected(dtype, n_experts)
    first = 0
    for i, (arr, length, keep) in enumerate(zip(arrays, lengths, keeps, strict=True)):
        stop = first + rows[i]
        _copy_sample(
            flat[first:stop], arr, keep, filler, field=f"samples[{i}]", limit=limit, expected=expected, check=check
        )
        end = first + length
        if stop < end:
            flat[stop:end] = filler.take(end - stop)
        if mask is not None:
            mask[first:stop] = False if keep is None else ~keep
        first = end
    if mask is None:
        return flat, cu_seqlens
    return flat, cu_seqlens, mask


_DEFAULT_MAX_SAMPLES: Final = 1 << 20
""":func:`unpack_routes`' default bound on the samples (views) it returns: far past any trainer batch, while
2**20 views (about 100 bytes each) stay near 100 MiB."""


def unpack_routes(flat: Array, cu_seqlens: Any, *, max_samples: int | None = None) -> list[Array]:
    """Split a packed array back into per-trajectory views (no copies): the inverse of :func:`pack_routes`.

    Args:
        flat: a NumPy array whose first axis is the concatenated rows.
        cu_seqlens: 1-d integer prefix sums: starts at 0, never decreases, ends at ``flat.shape[0]``.
        max_samples: the most samples (``len(cu_seqlens) - 1``) to split into; ``None`` is 2**20. Each view
            is a Python object, and zero-row samples are valid, so ``flat``'s size bounds nothing here.

    Returns:
        ``[flat[cu_seqlens[i]:cu_seqlens[i + 1]] for i in range(len(cu_seqlens) - 1)]``, views of ``flat``.

    Raises:
        R3WireError: ``flat`` is not a NumPy array with at least one axis, ``cu_seqlens`` breaks a rule above,
            or has more than ``max_samples + 1`` entries.
    """
    given: object = flat  # callers outside mypy pass anything
    if not isinstance(given, np.ndarray) or given.ndim < 1:
        got = f"shape {list(given.shape)}" if isinstance(given, np.ndarray) else type(given).__name__
        raise _fail("flat", "a NumPy array with a row axis", got)
    limit = (
        _DEFAULT_MAX_SAMPLES
        if max_samples is None
        else check_int(max_samples, "max_samples", minimum=0, maximum=MAX_DIM, error=R3WireError)
    )
    offsets = _from_caller(cu_seqlens, "cu_seqlens")
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or offsets.size < 1:
        raise _fail("cu_seqlens", "a non-empty 1-d integer array", f"{offsets.dtype} {list(offsets.shape)}")
    count = offsets.shape[0] - 1
    if count > limit:
        # Before anything is read: a broadcast cu_seqlens of zeros declares any number of (valid, empty) samples.
        raise _fail("cu_seqlens", f"at most {limit} + 1 offsets (max_samples={limit})", f"{count + 1} offsets")
    if int(offsets[0]) != 0:
        raise _fail("cu_seqlens[0]", "0", int(offsets[0]))
    # Compared, not subtracted: np.diff would wrap for uint64 offsets.
    decreasing = offsets[1:] < offsets[:-1]
    if decreasing.any():
        i = int(np.argmax(decreasing)) + 1
        raise _fail(f"cu_seqlens[{i}]", f">= cu_seqlens[{i - 1}]={int(offsets[i - 1])}", int(offsets[i]))
    if int(offsets[-1]) != flat.shape[0]:
        raise _fail(f"cu_seqlens[{count}]", f"{flat.shape[0]} (the rows of flat)", int(offsets[-1]))
    bounds = offsets.tolist()
    return [flat[a:b] for a, b in pairwise(bounds)]


def _as_tokens(value: object, field: str, *, limit: int | None = None, prefix: int | None = None) -> Array:
    """A call's token ids as a 1-d int64 array (compared exactly: no float or wrapped uint64 comparison).

    Sizes are decided before anything is read or converted (a broadcast view may declare any length): more than
    ``limit`` tokens are refused, and with ``prefix`` only the first ``prefix`` tokens are checked and returned (a
    list or other sequence is cut to them before it is converted, an array or tensor after its shape is checked).
    """
    if prefix is not None and not isinstance(value, np.ndarray) and not is_tensor(value) and _is_sequence(value):
        items: Any = value  # a sequence (not text): read once, never sized by a caller's __len__
        value = copy_list(items, most=prefix, field=field, expected="a 1-d sequence of integer token ids")[:prefix]
    arr = _from_caller(value, field)
    if arr.ndim == 1 and arr.size == 0:
        return np.empty(0, dtype=np.int64)  # [] arrives as float64
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise _fail(field, "a 1-d sequence of integer token ids", f"{arr.dtype} {list(arr.shape)}")
    if limit is not None:
        check_element_count(arr.shape, limit, field, error=R3WireError)
    if prefix is not None:
        arr = arr[:prefix]
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > _INT64_MAX:
        position = int(np.argmax(arr > _INT64_MAX))
        raise _fail(f"{field}[{position}]", f"a token id <= {_INT64_MAX}", int(arr[position]))
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        # Engines never return a negative token id; one here is a padding or ignore-index value (-1, -100) that
        # would be compared as if it were a token.
        position = int(np.argmax(arr < 0))
        raise _fail(f"{field}[{position}]", "a non-negative token id", int(arr[position]))
    return arr.astype(np.int64, copy=False)


def _first_difference(recorded: Array, given: Array) -> int | None:
    """The first position where two token sequences differ on their common length, or None."""
    common = min(recorded.shape[0], given.shape[0])
    differs = recorded[:common] != given[:common]
    return int(np.argmax(differs)) if differs.any() else None


_SMALL_BYTES: Final = 1 << 16
# The ufuncs' reductions over every axis: ndarray.max() and min() reach them through a Python wrapper.
# Typed loosely: NumPy releases disagree on the overloads of ufunc.reduce (numpy 2.5 refuses axis=None here).
_MAX: Final[Callable[..., Any]] = np.maximum.reduce
_MIN: Final[Callable[..., Any]] = np.minimum.reduce


def _differs(a: Array, b: Array) -> bool:
    """Whether two arrays of one dtype and shape differ anywhere (their bytes: one dtype compares exactly).

    Measured: up to 64 KiB, comparing ``tobytes()`` copies is fastest (one memcmp); beyond, those copies cost
    page faults (100x slower at 400 KiB), so NumPy compares, 8 bytes at a time where the memory allows (a
    byte-wise comparison of uint8 ids costs about twice as much).
    """
    if a.nbytes <= _SMALL_BYTES:
        return a.tobytes() != b.tobytes()
    if a.dtype.itemsize < 8 and a.nbytes % 8 == 0:
        # As 8-byte words only when both flatten to C-contiguous memory: reshape(-1) of a strided, reversed or
        # broadcast array may be a view with one non-unit (or zero) stride, which NumPy cannot view as wider
        # items. Anything else is compared element by element.
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)
        if flat_a.flags.c_contiguous and flat_b.flags.c_contiguous:
            a, b = flat_a.view(np.uint64), flat_b.view(np.uint64)
    return bool(np.count_nonzero(a != b))


def _layer_picks(n_layers: int, layers: object) -> list[int] | None:
    """The layer indexes ``layers`` selects from ``n_layers``, checked (a slice of positive step, or in-range
    indexes in increasing order; one layer at least); ``None`` when it selects every layer in order. Reads at most
    ``n_layers`` indexes.

    Raises:
        R3WireError: ``layers`` is none of those (``layers`` or ``layers[i]`` named).
    """
    if layers is None:
        return None
    if isinstance(layers, slice):
        try:
            chosen = range(n_layers)[layers]
        except (TypeError, ValueError) as exc:  # non-integer bounds, a zero step
            raise _fail("layers", "a slice of layer indexes or a sequence of them", f"{layers!r} ({exc})") from None
        picked = list(chosen)
    else:
        # A tensor's items are 0-d tensors, not integers: its values are read as NumPy's.
        items = _from_caller(layers, "layers") if is_tensor(layers) and layers.ndim else layers  # type: ignore[attr-defined]
        if not _is_sequence(items):
            raise _fail("layers", "None, a slice or a sequence of layer indexes", describe(layers))
        assert isinstance(items, (Sequence, np.ndarray))  # a tensor was converted above
        # Read once, never sized by a caller's __len__.
        items = copy_list(
            items, most=n_layers + 1, field="layers", expected="None, a slice or a sequence of layer indexes"
        )
        if len(items) > n_layers:
            raise _fail("layers", f"at most {n_layers} distinct layer indexes", f"more than {n_layers} indexes")
        picked = []
        for i, index in enumerate(items):
            if not is_int(index) or not 0 <= int(index) < n_layers:
                raise _fail(f"layers[{i}]", f"a layer index in 0 .. {n_layers - 1}", describe(index))
            picked.append(int(index))
    # In order: the trace's layer k must be the model's k-th replayed layer. A reversed slice or [1, 0] would
    # replay each layer's experts at another layer's index, without any other check noticing.
    for i in range(1, len(picked)):
        if picked[i] <= picked[i - 1]:
            field = "layers" if isinstance(layers, slice) else f"layers[{i}]"
            raise _fail(
                field,
                f"layer indexes in increasing order (after {picked[i - 1]}; the trace's layers keep the model's order)",
                picked[i],
            )
    if not picked:
        raise _fail("layers", f"a selection of at least one of the {n_layers} layers", f"{layers!r}"[:80])
    return None if picked == list(range(n_layers)) else picked


def _result_tokens(result: ReadResult, token_ids: object, limit: int) -> Array:
    """A read response's call tokens: the response's own, or the given ones checked against every id it carries
    (the prompt's at the start, the completion's at the end; both: exactly their concatenation).

    Sizes before contents: the response's ids are joined, and the given ones read, only when their count is
    within ``limit``.
    """
    from r3wire.formats._common import int64_ids  # noqa: PLC0415  # see add_result

    prompt, completion = result.prompt_token_ids, result.token_ids
    n_prompt = 0 if prompt is None else prompt.shape[0]
    if token_ids is None:
        if prompt is None or completion is None:  # the caller must give them
            raise _fail(
                "token_ids",
                "the call's token ids, prompt then completion: carried by the response (vLLM return_token_ids, "
                "SGLang return_prompt_token_ids) or passed as token_ids= (bodies whose ids r3wire does not read, "
                "such as NeMo-RL's message generation_token_ids or rLLM's prompt_ids/completion_ids, need "
                "token_ids=)",
                f"a response without {'prompt_token_ids' if prompt is None else 'token_ids'}",
            )
        count = n_prompt + completion.shape[0]
        if count > limit:
            raise _fail(
                "token_ids",
                f"at most max_elements={limit} token ids",
                f"{count} (result.prompt_token_ids + result.token_ids)",
            )
        # result.call_token_ids(), with its errors named as every other one here: result.<field>.
        joined: Array = np.concatenate(
            (int64_ids(prompt, "result.prompt_token_ids"), int64_ids(completion, "result.token_ids"))
        )
        return joined
    tokens = _as_tokens(token_ids, "token_ids", limit=limit)
    count = tokens.shape[0]
    # The response's ids are read only as far as the given ones reach (a part may be longer: a refused call).
    if prompt is not None:
        prompt = int64_ids(prompt[:count], "result.prompt_token_ids")
        at = _first_difference(prompt, tokens)
        if at is not None:
            raise _fail(
                f"token_ids[{at}]",
                f"{int(prompt[at])}, the response's prompt token {at} (token_ids must start with "
                "result.prompt_token_ids)",
                int(tokens[at]),
            )
        if count < n_prompt:
            raise _fail(
                "token_ids",
                f"the call's whole sequence, starting with the response's {n_prompt} prompt token ids",
                f"{count} token ids",
            )
    if completion is None:
        return tokens
    n_completion = completion.shape[0]
    # Where the completion's ids go: right after the prompt's when the response carries both, else at the end.
    first = count - n_completion if prompt is None else n_prompt
    if first < 0:
        raise _fail(
            "token_ids",
            f"the call's whole sequence, ending with the response's {n_completion} completion token ids",
            f"{count} token ids",
        )
    completion = int64_ids(completion[: count - first], "result.token_ids")
    at = _first_difference(completion, tokens[first:])
    if at is not None:
        raise _fail(
            f"token_ids[{first + at}]",
            f"{int(completion[at])}, the response's completion token {at} (token_ids must end with result.token_ids)",
            int(tokens[first + at]),
        )
    if count != first + n_completion:
        both = first + n_completion
        raise _fail(
            "token_ids",
            f"{both} token ids (the response's own prompt_token_ids + token_ids)",
            f"{count} token ids",
        )
    return tokens


# Formats whose start is a delta's: rows from ``start`` to the call's last forwarded token, ``n - 1 - start`` of
# them (prime-rl's sidecar, docs/formats.md "The call's token ids").
_DELTA_FORMATS: Final = frozenset({"prime-rl", "prime-rl-b85"})


_PER_TOKEN_MATRICES: Final = "fireworks-matrices"


def _matrices_start(rows: int, count: int) -> int:
    """Where a ``fireworks-matrices`` list given without ``start`` begins: token 0, when it has an entry for each
    token of the call that was forwarded (``count - 1``).

    Fireworks' tools make such a list for training with one entry per input position, from token 0
    (fw-ai/cookbook ``training/utils/rl/router_replay.py``, ``build_r3_routing_matrices``, @0ae69ef4), but the
    completions API without ``echo`` returns one entry per completion token, whose rows start at the prompt's
    last token (fw-ai-external/python-sdk ``src/fireworks/training/sdk/deployment.py``,
    ``_extract_routing_matrices``, @04f221ac). Any other length is refused: placing it from 0 would replay each
    completion row at a prompt token.

    Raises:
        R3WireError: ``rows`` is not ``count - 1``; the message names each reading and its ``start``.
    """
    if rows == count - 1 or rows > count:
        return 0  # more rows than tokens: the tokens are what is short, refused as such wherever the rows start
    if rows == count:
        reading = (
            "an echo list still holding the entry of the first token, which no forward pass produced: drop it, "
            "routing_matrices[1:], as Fireworks' SDK does"
        )
    else:
        reading = (
            "a completion-only list (Fireworks' completions without echo: one entry per completion token) starts at "
            "start=len(prompt_token_ids) - 1; a list from token 0 given with more tokens than its call's: start=0"
        )
    raise _fail(
        "start",
        f"given for a {_PER_TOKEN_MATRICES} list of {rows} entries with {count} token ids (a list of per-token "
        f"matrices carries no start; without one it is placed from token 0 only when it has an entry for each "
        f"forwarded token, len(token_ids) - 1 = {max(count - 1, 0)}; {reading})",
        "None",
    )


def _check_span(count: int, total: int | None, first: int, rows: int, source: str, *, to_the_end: bool) -> None:
    """Refuse a call's ``count`` token ids that cannot hold the rows a result places at ``first`` (``source`` says
    why there), or the ``total`` tokens its payload declares (``result.total_tokens``); with ``to_the_end`` (a
    delta, whose rows run by definition to the call's last forwarded token), rows that stop anywhere else."""
    if total is not None and count < total:
        raise _fail(
            "token_ids",
            f"at least result.total_tokens={total} token ids (the sequence the payload declares, from position 0; "
            "token_ids are the call's whole sequence, prompt + completion)",
            f"{count} token ids",
        )
    if count < first + rows:
        raise _fail(
            "token_ids",
            f"at least {first + rows} token ids for rows {first} .. {first + rows - 1} ({source}; token_ids are "
            "the call's whole sequence, prompt + completion)",
            f"{count} token ids",
        )
    if to_the_end and first + rows != count - 1:
        # The payload's start and the call's tokens disagree: trusting either would shift every row.
        raise _fail(
            "result.start",
            f"{count - 1 - rows} = len(token_ids) - 1 - rows ({count} token ids, {rows} rows: a delta's rows run "
            "from its start to the call's last forwarded token; token_ids are the call's whole sequence, prompt + "
            "completion)",
            first,
        )


def _check_given_start(count: int, start: int, rows: int) -> None:
    """Refuse a ``start`` given for rows whose format carries none (vLLM, SGLang) that does not end them where an
    engine's rows end: at the call's last forwarded token (``count - 1``), or at its last token for a node that
    forwarded every token it was given (a prefill piece).

    The body's ids fix the call's length, so a start that ends the rows anywhere else puts every row against
    another token (``start=0`` on a delta, a start one off) and would show only as conflicts.
    """
    if start + rows in (count - 1, count) or rows > count:
        return  # more rows than tokens: add() refuses them as rows that do not fit the call
    ends = [str(end) for end in (count - 1 - rows, count - rows) if end >= 0]
    raise _fail(
        "start",
        f"{' or '.join(ends)} (start + rows must be len(token_ids) - 1, the call's last forwarded token, or "
        f"len(token_ids) for rows that cover every token, a prefill node's: {count} token ids, {rows} rows; "
        "without start the rows are placed from the end of the call, where an engine's rows end)",
        start,
    )


def _as_call_logprobs(value: object, count: int) -> Array:
    """A call's sampled logprobs as a 1-d float64 array of at most ``count`` finite values (its last tokens').

    Floats of at most 8 bytes and integers within 2**53 convert to float64 exactly (a JSON encoder may write 0.0
    as 0); anything else would be rounded, and is refused.
    """
    arr = _from_caller(value, "logprobs")
    if arr.ndim != 1:
        raise _fail("logprobs", "a 1-d array (one sampled logprob per completion token)", f"shape {list(arr.shape)}")
    kind = arr.dtype.kind
    if kind == "f" and arr.dtype.itemsize > 8:
        raise _fail("logprobs.dtype", "float16, float32 or float64 (a longer float would be rounded)", str(arr.dtype))
    if kind in "iu" and arr.size:
        low, high = int(arr.min()), int(arr.max())
        if max(-low, high) > 1 << 53:
            bad = int(np.argmax((arr > (1 << 53)) | (arr < -(1 << 53))))
            raise _fail(f"logprobs[{bad}]", "a logprob float64 holds exactly", int(arr[bad]))
    elif kind != "f" and not (arr.size == 0 and _neutral_empty(value, arr)):
        raise _fail("logprobs.dtype", "a float or integer dtype (sampled logprobs)", str(arr.dtype))
    if arr.shape[0] > count:
        raise _fail(
            "logprobs",
            f"at most len(token_ids)={count} values (one per completion token: they sit on the call's last tokens)",
            f"{arr.shape[0]} values",
        )
    values = arr.astype(np.float64)  # a copy: the caller's array may change after the call
    finite = np.isfinite(values)
    if not finite.all():
        j = int(np.argmin(finite))
        raise _fail(
            f"logprobs[{j}]", "a finite logprob (clamp_logprobs floors non-finite ones)", repr(float(values[j]))
        )
    return values


def _replayed_rows(routes: Array, mask: object, missing_id: int) -> Array | None:
    """The rows to replay: ``mask`` (None: all), less the rows that are ``missing_id`` throughout; a row that is
    ``missing_id`` in some replayed slots only raises."""
    keep = None if mask is None else _row_mask(mask, routes.shape[0], "result.mask")  # checked by ReadResult
    if routes.dtype.kind != "i" or not routes.size:
        return keep
    missing = (routes == missing_id).reshape(routes.shape[0], -1)
    some = missing.any(axis=1)
    if not some.any():
        return keep
    whole = missing.all(axis=1)
    partial = some & ~whole
    if keep is not None:
        partial &= keep  # rows the engine did not replay hold nothing to read
    if partial.any():
        row = int(np.argmax(partial))
        layer, slot = divmod(int(np.argmax(missing[row])), routes.shape[2])
        raise _fail(
            _where("routes", (row, layer, slot)),
            "an expert id, or -1 in every slot of every layer of the row (a row is replayed whole or not at all; "
            "select the layers to replay with layers=, e.g. to drop dense layers)",
            missing_id,
        )
    sent: Array = ~whole if keep is None else keep & ~whole
    return sent


class RouteTrace:
    """One trajectory's routes assembled over the engine calls of a multi-turn rollout, verified by token ids.

    Each call returns the rows from some position on (its "prompt start" / ``start_len``, prime-rl's ``start``, or
    0 for a prefill node) to the end of what it forwarded; :meth:`add` places them at that position. Given each
    call's full ``token_ids``, the trace records the trajectory's tokens and refuses a call whose tokens differ
    from them (a wrong prefix, a branch that was not forked): rows are never stitched onto another token
    sequence. Token ids do not locate rows: ``routes[0]`` goes to row ``start``, which must be exact. An
    off-by-one ``start`` shifts the call's rows by one token and shows only as conflicts in the overlap (kept and
    counted by default when token ids are given): use ``on_conflict="raise"`` where re-prefill is
    batch-invariant, or monitor :attr:`conflicts`. Rows must continue the trace without a gap; rows that overlap
    what is recorded are compared, and a difference is a *conflict* (see :meth:`add`). The dtype is fixed by
    ``num_experts`` when given; otherwise a call that arrives in a wider dtype widens the trace (never truncating
    an id).

    A trace either verifies tokens on every call (the first :meth:`add` gave ``token_ids``) or on none.

    Example::

        trace = RouteTrace(num_experts=128)
        trace.add(turn1_routes, start=0, token_ids=turn1_tokens)  # prompt + first reply
        trace.add(turn2_routes, start=turn2_start, token_ids=turn2_tokens)  # the whole second call's tokens
        routes, captured = trace.finalize()  # total_tokens defaults to the recorded token count
        padded, mask = pad_routes([routes], token_lengths=[len(trace.token_ids)], num_experts=128)
    """

    __slots__ = (
        "_buf",
        "_conflicts",
        "_expected",
        "_fixed",
        "_high",
        "_kept",
        "_limit",
        "_logprobs",
        "_max_elements",
        "_n_sampled",
        "_n_tokens",
        "_num_experts",
        "_rows",
        "_sampled",
        "_shared",
        "_tokens",
        "_verified",
    )

    def __init__(self, *, num_experts: int | None = None, max_elements: int | None = None) -> None:
        """Start an empty trace.

        Args:
            num_experts: the model's expert count: fixes the dtype and bounds every id.
            max_elements: the largest trace (in ids, and in token ids) to hold; ``None`` is the decoders'
                default limit.

        Raises:
            R3WireError: ``num_experts`` is not an integer in ``1 .. 2**31``, or ``max_elements`` is invalid.
        """
        self._num_experts = optional_num_experts(num_experts)
        self._max_elements = optional_max_elements(max_elements)
        # A fixed dtype's id bound and its message are the same for every add: computed once, not per call.
        self._fixed: np.dtype[Any] | None = None
        self._limit = 0
        self._expected = ""
        self._high = False  # ids can exceed the limit in the fixed dtype: the range check reads them
        if self._num_experts is not None:
            self._fixed, self._limit, self._expected, self._high = _fixed_bounds(self._num_experts)
        self._buf: Array | None = None
        self._rows = 0
        self._tokens: Array | None = None
        self._n_tokens = 0
        self._verified: bool | None = None  # decided by the first add: token ids on every call, or on none
        self._conflicts = 0
        self._shared = False  # finalize() handed out the buffer: "replace" must copy before writing into it
        self._kept: Array | None = None  # per recorded row, replayed by some call; None: every row so far
        # Per token position from 0, the sampled logprob a call reported and whether one did, in buffers grown by
        # doubling (as the token ids'); None until a call gives logprobs. The first _n_sampled positions are
        # covered; recorded tokens past them have none.
        self._logprobs: Array | None = None
        self._sampled: Array | None = None
        self._n_sampled = 0

    @property
    def rows(self) -> int:
        """The number of rows recorded so far (trajectory rows ``0 .. rows - 1``)."""
        return self._rows

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The trace's dtype: fixed by ``num_experts``, else the widest call dtype so far (``None`` before any)."""
        if self._fixed is not None:
            return self._fixed
        return None if self._buf is None else self._buf.dtype

    @property
    def token_ids(self) -> Array | None:
        """The trajectory's token ids recorded so far (a read-only int64 view), ``None`` when never given."""
        if self._tokens is None:
            return None
        # Through a read-only buffer: a view of the trace's own (writeable) buffer would let a caller set
        # ``flags.writeable = True`` again and rewrite the tokens every later call is checked against.
        view: Array = np.asarray(self._tokens[: self._n_tokens].data.toreadonly())
        return view

    @property
    def conflicts(self) -> int:
        """Overlapping rows that differed from the recorded ones (kept or replaced) since the trace began.

        A routing-drift metric: a re-prefill routed some already-recorded tokens differently. A forked trace
        starts at 0.
        """
        return self._conflicts

    @property
    def logprobs(self) -> Array | None:
        """Per recorded token, the sampled logprob a call reported for it (float64, a copy), 0.0 where none did;
        ``None`` when no call gave logprobs.

        0.0, not NaN, where a token has none (a prompt or tool token): a masked product (``logprobs * mask``)
        stays finite. :attr:`sampled` says which values are real.
        """
        return self._per_token(self._logprobs, np.float64)

    @property
    def sampled(self) -> Array | None:
        """Per recorded token, ``True`` where a call reported its sampled logprob (a bool copy): the tokens the
        engine generated, the loss mask of a multi-turn trajectory; ``None`` when no call gave logprobs.

        A call that generated tokens without reporting logprobs leaves them ``False``: ask every call for them.
        """
        return self._per_token(self._sampled, np.bool_)

    def _per_token(self, covered: Array | None, dtype: type) -> Array | None:
        """A copy of ``covered`` (logprobs or sampled) for every recorded token: zero past the covered ones."""
        if covered is None:
            return None
        out: Array = np.zeros(self._n_tokens, dtype=dtype)
        out[: self._n_sampled] = covered[: self._n_sampled]
        return out

    @property
    def replayed(self) -> Array | None:
        """Per recorded row, ``True`` where some call replayed it; ``None`` when every row was (a bool copy).

        Rows no call replayed (``add(..., replayed=)``) hold ``arange(top_k)`` padding rows in the trace: pass
        this as :func:`pad_routes`' ``replayed=[trace.replayed]`` so they are masked.
        """
        if self._kept is None or bool(self._kept.all()):
            return None
        copy: Array = self._kept.copy()
        return copy

    def common_prefix(self, token_ids: Any) -> int:
        """How many leading tokens of ``token_ids`` agree with the recorded ones.

        With :meth:`fork`, this is "longest matching prefix" branching: ``trace.fork(trace.common_prefix(ids))``
        is the trace a call with ``ids`` may continue. Only the first :attr:`token_ids`-many tokens can agree, so
        only they are converted and checked (a token past them never changes the answer): a list or other
        sequence is cut to them before it is converted; an array or tensor has its shape and dtype checked whole.

        Raises:
            R3WireError: ``token_ids`` is not a 1-d integer sequence (or a compared token is negative), or the trace
                has rows but no token ids.
        """
        # Only the tokens that can agree with recorded ones are read: a later one never changes the answer.
        tokens = _as_tokens(token_ids, "token_ids", prefix=self._n_tokens)
        if self._tokens is None:
            if self._rows:
                raise _fail("trace", "token ids recorded (pass token_ids to every add)", "rows without token ids")
            return 0
        recorded = self._tokens[: self._n_tokens]
        first = _first_difference(recorded, tokens)
        return min(recorded.shape[0], tokens.shape[0]) if first is None else first

    def fork(self, rows: int) -> RouteTrace:
        """A new trace that shares this one's first ``rows`` tokens and the route rows recorded at them.

        The branch is a copy: adding to either never changes the other. Its :attr:`conflicts` starts at 0. It may
        hold one row fewer than ``rows`` (the parent's last token has no row), so ask an engine for the branch's
        next rows from ``branch.rows``.

        Args:
            rows: the number of leading positions to keep, at most the recorded tokens (or, for a trace without
                token ids, the recorded rows).

        Raises:
            R3WireError: ``rows`` is not an integer in that range.
        """
        limit = self._n_tokens if self._tokens is not None else self._rows
        keep = check_int(rows, "rows", minimum=0, maximum=limit, error=R3WireError)
        branch = RouteTrace.__new__(RouteTrace)
        branch._num_experts, branch._max_elements = self._num_experts, self._max_elements
        branch._fixed, branch._limit, branch._expected = self._fixed, self._limit, self._expected
        branch._high = self._high
        branch._rows = min(keep, self._rows)
        branch._buf = None if self._buf is None else self._buf[: branch._rows].copy()
        branch._n_tokens = keep if self._tokens is not None else 0
        branch._tokens = None if self._tokens is None else self._tokens[:keep].copy()
        branch._verified, branch._conflicts, branch._shared = self._verified, 0, False
        branch._kept = None if self._kept is None else self._kept[: branch._rows].copy()
        branch._n_sampled = min(self._n_sampled, keep)
        branch._logprobs = None if self._logprobs is None else self._logprobs[: branch._n_sampled].copy()
        branch._sampled = None if self._sampled is None else self._sampled[: branch._n_sampled].copy()
        return branch

    def add(
        self,
        routes: Any,
        *,
        start: int | None = None,
        token_ids: Any = None,
        on_conflict: Conflict | None = None,
        replayed: Any = None,
        logprobs: Any = None,
    ) -> None:
        """Record an engine call's rows; ``routes[0]`` is trajectory row ``start``.

        Args:
            routes: ``[n, layers, top_k]`` ids (any integer dtype, a torch tensor or nested lists); ``layers``
                and ``top_k`` as in earlier calls.
            start: the trajectory row the call's first row is; at most :attr:`rows` (no gap). Rows below
                :attr:`rows` are the overlap with what is recorded. It must be exact: ``token_ids`` verify the
                call's tokens, not this offset, so a wrong ``start`` surfaces only as conflicts in the overlap.
                ``None`` (needs ``token_ids``): derived from the end, ``len(token_ids) - 1 - n``. Every engine's
                rows, full or delta (vLLM, SGLang, prime-rl, a decode node), end at the call's last forwarded
                token, the one before its last sampled token, so this places them without the caller counting
                (and ``ReadResult.start`` may be passed as it is, ``None`` where a format carries no start, except
                for Fireworks ALL / BITMAP and per-token matrices, whose rows start at position 0:
                :meth:`add_result` places them there). Rows that cover every token of ``token_ids`` (a prefill
                node's) need an explicit ``start``.
            token_ids: the call's full token sequence (prompt + completion) from trajectory position 0. Must cover
                the rows (``start + n <= len(token_ids)``) and agree with every recorded token on their common
                length; tokens past the recorded ones are recorded.
            on_conflict: what to do with overlap rows that differ from the recorded ones. ``"keep"`` keeps the
                recorded rows (the routing that generated those tokens), ``"replace"`` takes the new ones,
                ``"raise"`` raises. ``None``: ``"keep"`` when ``token_ids`` are given (they prove the tokens
                extend the recorded ones; the rows' offset is ``start``'s), else ``"raise"``. Either way
                :attr:`conflicts` counts the differing rows.
            replayed: ``None``, or a bool ``[n]`` array, ``True`` where the call replayed the row
                (``ReadResult.mask``: a Fireworks BITMAP or ``null`` rows). A row marked ``False`` is not
                checked, compared or recorded: a later call that replays it fills it in (no conflict), and rows
                no call replayed hold padding rows and are ``False`` in :attr:`replayed`.
            logprobs: ``None``, or the sampled logprobs of the call's last ``len(logprobs)`` tokens (its
                completion's, as ``ReadResult.logprobs``): a 1-d float array of finite values, given with
                ``token_ids``. Recorded at those positions (:attr:`logprobs`, :attr:`sampled`); where a position
                already holds a different logprob, ``on_conflict`` decides as for rows (not counted in
                :attr:`conflicts`, a routing metric).

        Raises:
            R3WireError: a bad array or shape, a negative id or one ``>= num_experts``, ``start`` past the end of
                the trace (a gap), ``start=None`` without ``token_ids`` or with as many rows as tokens,
                ``token_ids`` missing on a verifying trace (or given on one that is not), not covering the rows,
                or differing from the recorded tokens (the first differing position and both tokens are named),
                the trace exceeding ``max_elements``, or conflicting rows under ``"raise"`` (row and layer
                named), or ``replayed`` not a bool ``[n]`` array; ``logprobs`` without ``token_ids``, not a 1-d
                float array, longer than ``token_ids``, holding a non-finite value (``clamp_logprobs`` floors
                them), or differing from a recorded logprob under ``"raise"``. The trace is unchanged when this is
                raised.
        """
        if start is None:
            routes, token_ids, start = self._end_aligned(routes, token_ids)
        if (
            replayed is None
            and self._kept is None
            and logprobs is None
            and self._add_common(routes, start, token_ids, on_conflict)
        ):
            return
        arr = _as_routes(routes, "routes")
        keep = None if replayed is None else _row_mask(replayed, arr.shape[0], "replayed")
        # A plain in-range int (never a bool: ``type`` is exact) is what check_int would return; skip its call.
        begin = (
            start
            if type(start) is int and 0 <= start <= MAX_DIM
            else check_int(start, "start", minimum=0, maximum=MAX_DIM, error=R3WireError)
        )
        chosen = None if on_conflict is None else _choice(on_conflict, _CONFLICT_POLICIES)
        if on_conflict is not None and chosen is None:
            raise _fail("on_conflict", "'keep', 'replace', 'raise' or None", describe(on_conflict))
        tokens = None if token_ids is None else _as_tokens(token_ids, "token_ids", limit=self._max_elements)
        if self._verified is not None and (tokens is not None) != self._verified:
            if self._verified:
                raise _fail("token_ids", "the call's token ids (this trace verifies every call's tokens)", "None")
            raise _fail("token_ids", "None (this trace's first add had no token ids)", "token ids")
        buf = self._buf
        if buf is not None and arr.shape[1:] != buf.shape[1:]:
            raise _fail(
                "routes.shape",
                f"[rows, {buf.shape[1]}, {buf.shape[2]}] (layers and top_k of earlier calls; with add_result, "
                "pass the same layers= as the earlier calls)",
                f"{list(arr.shape)}",
            )
        if begin > self._rows:
            raise _fail(
                "start",
                f"<= {self._rows}, the rows recorded so far (a call must continue the trace without a gap; rows "
                "no call routed, such as a cached prefix the engine skipped, are added first as placeholders with "
                "replayed=False, which masks them)",
                begin,
            )
        end = begin + arr.shape[0]
        # Sizes before contents: the token comparison and the range check below read what they are given.
        check_element_count((max(end, self._rows), *arr.shape[1:]), self._max_elements, "trace", error=R3WireError)
        if tokens is not None:
            self._check_tokens(tokens, begin, end)
        dtype = self._fixed
        kept_rows = None if keep is None else np.flatnonzero(keep)
        checked = arr if kept_rows is None else arr[kept_rows]
        if dtype is not None:
            if buf is None:
                # Later calls share this top_k (checked above) and the fixed dtype: the filler check holds for them.
                _check_filler(arr.shape[2], dtype, self._num_experts, "routes.shape[2]", trace=True)
            _check_range(checked, self._limit, "routes", expected=self._expected, rows=kept_rows)
        else:
            dtype = self._dtype_with(arr)
            limit = _id_limit(dtype, None)
            _check_range(checked, limit, "routes", expected=_range_expected(dtype, None), rows=kept_rows)
            if keep is not None:
                _check_filler(arr.shape[2], dtype, None, "routes.shape[2]", trace=True)  # its rows pad the others
        overlap = min(self._rows - begin, arr.shape[0])
        # The overlap's row masks (None: every row replayed), and the rows compared: replayed by this call and by
        # an earlier one. begin <= rows, so overlap >= 0.
        earlier = None if self._kept is None else self._kept[begin : begin + overlap]
        now = None if keep is None else keep[:overlap]
        compared = _both(earlier, now)
        differing = None
        if buf is not None and overlap > 0:
            unequal = _unequal(buf[begin : begin + overlap], arr[:overlap])
            # One flat reduction in the common case (the overlap agrees); rows are counted only when some differ
            # (a multi-axis any() costs several times more).
            if unequal.any():
                differing = unequal.reshape(overlap, -1).any(axis=1)
                if compared is not None:
                    differing &= compared
                    if not differing.any():
                        differing = None
        policy = chosen if chosen is not None else ("keep" if tokens is not None else "raise")
        if differing is not None and policy == "raise":
            assert buf is not None
            _check_overlap(buf[begin : begin + overlap], arr[:overlap], begin, compared)
        sampled = None
        if logprobs is not None:
            if tokens is None:
                raise _fail("logprobs", "given with token_ids (they sit on the call's last tokens)", "no token_ids")
            sampled = self._sampled_plan(_as_call_logprobs(logprobs, tokens.shape[0]), tokens.shape[0], policy)
        # Every check passed. Both buffers are reserved before anything is recorded, so a failed allocation
        # leaves the trace unchanged.
        replace = differing is not None and policy == "replace"
        masked = keep is not None or self._kept is not None
        # Overlap rows this call writes when a row was not replayed: a row replayed only now fills a gap, and
        # "replace" takes every row this call replayed.
        taken = _taken(earlier, now, overlap, replace=replace) if masked else None
        room = None if tokens is None else self._token_room(tokens.shape[0])
        buf = self._reserve(end, arr.shape[1:], dtype)
        if (taken.size if taken is not None else replace) and self._shared:
            # finalize() handed this buffer out: writes go into a copy, made (or refused) before any count.
            fresh = _allocate(buf.shape, buf.dtype, "trace")
            fresh[: self._rows] = buf[: self._rows]
            self._buf = buf = fresh
            self._shared = False
        if differing is not None:
            self._conflicts += int(np.count_nonzero(differing))
        if taken is None:
            if replace:
                np.copyto(buf[begin : begin + overlap], arr[:overlap], casting="unsafe")  # lossless: checked
            if end > self._rows:
                np.copyto(buf[self._rows : end], arr[overlap:], casting="unsafe")  # lossless: range-checked
                self._rows = end
        else:
            self._record_masked(arr, keep, taken, begin=begin, overlap=overlap, end=end)
        if room is not None:
            assert tokens is not None
            self._record_tokens(tokens, room)
        if sampled is not None:
            self._record_sampled(*sampled)
        self._verified = tokens is not None

    def _sampled_plan(self, values: Array, count: int, policy: str) -> tuple[Array, Array, Array, Array, int]:
        """Check ``values``, a call's logprobs on its last ``len(values)`` of ``count`` tokens, against the recorded
        ones (``policy``: a differing one is kept, replaced or refused) and reserve room for them; the trace is not
        changed yet. Returns what :meth:`_record_sampled` writes: the (possibly new) buffers, the values, which
        of them to take, and the call's end."""
        first = count - values.shape[0]
        held = self._n_sampled
        take = np.ones(values.shape[0], dtype=np.bool_)
        if self._logprobs is not None and self._sampled is not None and first < held:
            stop = min(count, held)
            again = self._sampled[first:stop]
            differs = again & (self._logprobs[first:stop] != values[: stop - first])
            if policy == "raise" and differs.any():
                j = int(np.argmax(differs))
                raise _fail(
                    f"logprobs[{j}]",
                    f"{float(self._logprobs[first + j])!r}, the logprob recorded for trajectory position {first + j} "
                    "(or on_conflict='keep' / 'replace')",
                    repr(float(values[j])),
                )
            if policy == "keep":
                take[: stop - first] = ~again
        lp = _room(self._logprobs, count, np.float64, "logprobs", keep=held, bound=self._max_elements)
        was = _room(self._sampled, count, np.bool_, "logprobs", keep=held, bound=self._max_elements)
        return lp, was, values, take, count

    def _record_sampled(self, lp: Array, was: Array, values: Array, take: Array, end: int) -> None:
        """Record a call's logprobs, ending at token ``end``, as :meth:`_sampled_plan` planned them (every check
        has passed; ``lp`` and ``was`` hold the recorded ones)."""
        start = end - values.shape[0]
        held = self._n_sampled
        if start > held:  # tokens between (a prompt's, a tool's) were sampled by no call
            lp[held:start] = 0.0
            was[held:start] = False
        window = lp[start:end]
        window[take] = values[take]
        was[start:end] = True
        self._logprobs, self._sampled = lp, was
        self._n_sampled = max(self._n_sampled, end)

    def _record_masked(
        self, arr: Array, keep: Array | None, taken: Array, *, begin: int, overlap: int, end: int
    ) -> None:
        """Record a call when some row, recorded or new, was not replayed (every check has passed, and the
        buffer is writable: a copy if finalize() handed it out)."""
        new_keep = np.ones(arr.shape[0], dtype=np.bool_) if keep is None else keep
        kept = np.ones(self._rows, dtype=np.bool_) if self._kept is None else self._kept[: self._rows].copy()
        buf = self._buf
        assert buf is not None
        if taken.size:
            buf[begin + taken] = arr[taken]  # lossless: replayed rows are range-checked
        if overlap > 0:
            kept[begin : begin + overlap] |= new_keep[:overlap]
        if end > self._rows:
            np.copyto(buf[self._rows : end], arr[overlap:], casting="unsafe")  # rows not replayed are padded next
            fresh_keep = new_keep[overlap:]
            if not fresh_keep.all():
                buf[self._rows : end][~fresh_keep] = np.arange(buf.shape[2], dtype=buf.dtype)
            kept = np.concatenate([kept, fresh_keep])
            self._rows = end
        self._kept = kept

    def add_result(
        self,
        result: ReadResult,
        *,
        token_ids: Any = None,
        start: int | None = None,
        on_conflict: Conflict | None = None,
        layers: slice | Sequence[int] | None = None,
    ) -> None:
        """Record one read engine response: :meth:`add` with every argument taken from ``result``.

        ``result`` is an item of :func:`r3wire.formats.read_response` (or a :func:`r3wire.formats.read` result).
        Wiring its fields into :meth:`add` by hand is where rows get misaligned; this takes from it:

        - the routes: ``result.routes``, only the ``layers`` selected when given (``slice(3, None)`` drops the
          three dense layers of a DeepSeek-V3 payload, which vLLM and SGLang write as rows of zeros);
        - where they start: ``result.start`` (prime-rl's sidecar, a Fireworks SUFFIX payload's
          ``replay_start_token - 1``); for a format whose rows are positions from 0 by definition (Fireworks
          r3/v1 ALL and BITMAP, ``fireworks-trace`` of them: ``n - 1`` rows for ``total_token_count`` ``n``, row
          ``i`` the routing at position ``i``, which produced token ``i + 1``), from 0 whatever ``token_ids``
          are given (the whole trajectory so far is fine: the rows still go from 0, and a ``start`` other than 0
          is refused); a ``fireworks-matrices`` list, which does not say where it starts, from ``start`` (a
          completion-only list, Fireworks' completions without echo, starts at ``len(prompt) - 1``), or without
          one from token 0 only when it has an entry for each forwarded token of the call
          (``len(token_ids) - 1``: any other length is refused, naming the readings); else ``start`` (rows that
          cover every token of the call, a prefill node's, need ``start=0``; the body's ids say where the rows
          end, so a ``start`` that ends them elsewhere than ``len(token_ids) - 1`` or ``len(token_ids)`` is
          refused, never stitched against other tokens), else from the end as :meth:`add` places them. Where
          the rows' place is known (those formats, or ``result.start``), the call's tokens must hold them, and
          ``result.total_tokens``
          when the payload declares it (Fireworks ``total_token_count``): fewer is refused naming
          ``token_ids``, never placed elsewhere. A prime-rl delta's rows run by definition from its start to the
          call's last forwarded token: ``result.start + rows`` must be ``len(token_ids) - 1``, or the start (or
          the tokens) is wrong and ``result.start`` is refused, never stitched one token off;
        - the call's tokens: ``result.call_token_ids()``. Where the body lacks the prompt's or the completion's
          ids, ``token_ids`` gives the call's whole sequence, checked against every id the body carries: it must
          start with ``result.prompt_token_ids``, end with ``result.token_ids``, and where the body carries both,
          equal them joined;
        - the rows replayed: ``result.mask``, less every row that holds -1
          (:data:`~r3wire.formats.MISSING_ROUTE`, NeMo-RL's and SGLang's "no expert recorded") in every slot of
          every layer. A row with -1 in some slots only cannot be replayed as a row and is refused;
        - the expert count: ``result.num_experts`` (r3wire envelopes record it) must be this trace's;
        - the sampled logprobs: ``result.logprobs`` (the completion's, clamped by the reader) on the call's last
          tokens, so :attr:`logprobs` and :attr:`sampled` give a multi-turn trajectory's old logprobs and loss
          mask on the same verified tokens.

        Tokens are always verified, so the trace must be one whose calls all give token ids. Sizes come before
        contents: the selected routes (rows x layers x top_k) and the call's token count are held to the trace's
        ``max_elements`` before any id is read, selected or joined. An error about an element of the routes names
        it in ``result.routes`` (``result.routes[row r, layer l, slot s]``, ``l`` counted in ``result.routes``
        whatever ``layers`` selects).

        Raises:
            R3WireError: ``result`` is not a ``ReadResult``; the call's tokens are neither in the response nor given, or
                the given ones disagree with the response's prompt or completion ids (the first differing position and
                both tokens named); ``start`` is not an integer in ``0 .. 2**63-1`` or differs from ``result.start`` (0
                for rows from token 0); the given ``token_ids`` are fewer than ``result.total_tokens`` or than the rows
                where they are placed from ``result.start`` or token 0; a prime-rl delta's ``result.start + rows`` is
                not ``len(token_ids) - 1``; a ``fireworks-matrices`` result given without ``start`` has other than
                ``len(token_ids) - 1`` rows; a ``start`` given for rows whose format carries none (vLLM, SGLang)
                does not put their end at ``len(token_ids) - 1`` or ``len(token_ids)``; ``layers`` is not a slice
                (of positive step) or a sequence (list, 1-d array or tensor) of layer indexes in increasing order
                selecting at least one layer; the selected
                routes or the call's tokens exceed ``max_elements``; a row is partly -1 (row, layer and slot named);
                the expert counts differ; or anything :meth:`add` raises. The trace is unchanged when this is raised.
        """
        # Imported here: ``import r3wire`` does not import the formats package, and batching must not make it.
        from r3wire.formats._common import MISSING_ROUTE, ROWS_FROM_ZERO, ReadResult  # noqa: PLC0415

        if not isinstance(result, ReadResult):
            raise _fail("result", "a ReadResult (from r3wire.formats.read_response or read)", describe(result))
        if result.num_experts is not None and self._num_experts is not None and result.num_experts != self._num_experts:
            raise _fail(
                "result.num_experts",
                f"{self._num_experts}, this trace's num_experts (the payload was written for another model)",
                result.num_experts,
            )
        # Where the format puts row 0: its own start, or token 0 for rows that are token positions by definition
        # (Fireworks ALL / BITMAP, per-token matrices: no start because none is needed). Never from the end there:
        # deriving it from the caller's token count shifted every row when more tokens were given than the call's.
        placed, source = result.start, ""
        if placed is not None:
            source = f"the response's own start, result.start={placed}"
        elif result.format in ROWS_FROM_ZERO:
            placed, source = 0, f"{result.format} rows are positions from 0: row i is the routing at position i"
        # A list of per-token matrices says nothing of where it starts: Fireworks' own tools make it from token 0
        # or for the completion only (see _matrices_start).
        matrices = result.start is None and result.format == _PER_TOKEN_MATRICES
        if start is not None:
            start = check_int(start, "start", minimum=0, maximum=MAX_DIM, error=R3WireError)
            if placed is not None and start != placed:
                raise _fail("start", f"None or {placed} ({source})", start)
            if matrices:
                placed, source = start, f"the start given, start={start}"
        n_rows, n_layers, top_k = result.routes.shape  # a 3-d integer array: checked by ReadResult
        picked = _layer_picks(n_layers, layers)
        # Sizes before contents: the call's ids and tokens are held to this trace's bound before any is read,
        # selected, joined or compared (a result may be a broadcast view declaring any size).
        selected = (n_rows, n_layers if picked is None else len(picked), top_k)
        where = "result.routes" if picked is None else "result.routes[:, layers]"
        check_element_count(selected, self._max_elements, where, error=R3WireError)
        routes = _as_routes(result.routes, "result.routes")
        if picked is not None:
            routes = routes[:, picked]
        tokens = _result_tokens(result, token_ids, self._max_elements)
        if matrices and placed is None:
            placed = _matrices_start(n_rows, tokens.shape[0])
            source = f"{_PER_TOKEN_MATRICES} with one entry per forwarded token of the call: row i is position i"
        if placed is not None:
            delta = result.start is not None and result.format in _DELTA_FORMATS
            _check_span(tokens.shape[0], result.total_tokens, placed, n_rows, source, to_the_end=delta)
            if matrices and placed + n_rows > tokens.shape[0] - 1:
                # One entry per forwarded position: none for the last token, which no forward pass read. A list
                # that reaches it still holds the first token's entry (the decoder's list), each row one late.
                raise _fail(
                    "start",
                    f"<= {tokens.shape[0] - 1 - n_rows} for a {_PER_TOKEN_MATRICES} list of {n_rows} entries with "
                    f"{tokens.shape[0]} token ids (start + rows <= len(token_ids) - 1: the last token has no "
                    "forward pass; a list that reaches it still holds the first token's entry, which no forward "
                    "pass produced: drop it, routing_matrices[1:], as Fireworks' SDK does)",
                    placed,
                )
        elif start is not None:
            _check_given_start(tokens.shape[0], start, n_rows)
        try:
            keep = _replayed_rows(routes, result.mask, MISSING_ROUTE)
            self.add(
                routes,
                start=placed if placed is not None else start,
                token_ids=tokens,
                on_conflict=on_conflict,
                replayed=keep,
                logprobs=result.logprobs,
            )
        except R3WireError as exc:
            # One place names the routes' elements in result.routes, whatever layers were selected.
            raise _in_result(exc, picked) from None

    def _end_aligned(self, routes: object, token_ids: object) -> tuple[Array, Array, int]:
        """The routes and tokens of a call given without ``start``, and the start their ends imply.

        Raises:
            R3WireError: as :meth:`add` for the routes and tokens; no tokens, or rows that do not end before the
                call's last token, or a start past the recorded rows (named as derived).
        """
        arr = _as_routes(routes, "routes")
        if token_ids is None:
            raise _fail(
                "start",
                "the trajectory row of routes[0], or None with token_ids (the call's tokens: rows that end at its "
                "last forwarded token are placed from the end)",
                "None",
            )
        tokens = _as_tokens(token_ids, "token_ids", limit=self._max_elements)
        n_rows, n_tokens = arr.shape[0], tokens.shape[0]
        begin = n_tokens - 1 - n_rows
        if begin < 0:
            raise _fail(
                "routes",
                f"at most len(token_ids) - 1 = {max(n_tokens - 1, 0)} rows with start=None (start is derived from "
                "the end: an engine's rows stop at the token before the call's last sampled one; rows that cover "
                "every token, such as a prefill node's, need start=)",
                f"{n_rows} rows",
            )
        if begin > self._rows:
            raise _fail(
                "start",
                f"<= {self._rows}, the rows recorded so far (derived with start=None as len(token_ids) - 1 - rows "
                f"= {n_tokens} - 1 - {n_rows}: rows {self._rows} .. {begin - 1} would be missing, e.g. omitted by "
                "the engine; a call must continue the trace without a gap)",
                begin,
            )
        return arr, tokens, begin

    def _add_common(self, routes: object, start: object, token_ids: object, on_conflict: object) -> bool:
        """Record the common call, or change nothing and return False: :meth:`add` then decides as it always does.

        The common call passes every check: a NumPy array of the trace's dtype, a plain int ``start`` with no
        gap, and no conflicting row. For a few hundred rows NumPy's fixed cost per call outweighs the bytes
        (measured), so this makes few calls, each on only the bytes that decide: overlap rows are compared byte
        for byte, and rows (or tokens) equal to recorded ones hold checked values, so only those past the
        recorded ones are range-checked. Anything else, an error included, takes the general path in full.
        """
        if type(routes) is not np.ndarray or type(start) is not int:
            return False
        buf, rows = self._buf, self._rows
        dtype = self._fixed
        if dtype is None:
            if buf is None:
                return False
            dtype = buf.dtype
        # rows <= the buffer's allocated rows, so start needs no separate MAX_DIM bound.
        if routes.dtype != dtype or routes.ndim != _NDIM or not 0 <= start <= rows:
            return False
        n, layers, top_k = routes.shape
        if buf is None:
            # The first call of a fixed-dtype trace: what _as_routes and the filler check require of its shape.
            if layers < 1 or top_k < 1 or top_k - 1 > self._limit:
                return False
        elif layers != buf.shape[1] or top_k != buf.shape[2]:
            return False
        if on_conflict is not None and _choice(on_conflict, _CONFLICT_POLICIES) is None:
            return False
        per_row = layers * top_k
        end = start + n
        limit = self._max_elements
        if max(n, 1) * per_row > MAX_EXTENT or max(end, rows, 1) * per_row > limit:
            return False
        tokens: Array | None = None
        if token_ids is None:
            if self._verified:
                return False
        else:
            if self._verified is False:
                return False
            if type(token_ids) is np.ndarray and token_ids.ndim == 1 and token_ids.dtype == _INT64:
                # What _as_tokens returns for it, unread: only tokens past the recorded ones need its sign check.
                tokens, unchecked = token_ids, True
            else:
                # Routes, start and on_conflict are valid here: an error _as_tokens raises is add()'s first one too.
                tokens, unchecked = _as_tokens(token_ids, "token_ids", limit=limit), False
            count = tokens.shape[0]
            recorded = self._n_tokens
            if end > count or max(count, recorded, 1) > limit:
                return False
            common = min(recorded, count)
            if common and self._tokens is not None and _differs(self._tokens[:common], tokens[:common]):
                return False
            if unchecked and count > common and _MIN(tokens[common:], None) < 0:
                return False
        new = routes
        if rows > start and buf is not None:
            overlap = min(rows - start, n)
            if _differs(buf[start : start + overlap], routes[:overlap]):
                return False
            new = routes[overlap:]
        if end > rows:
            if self._high and _MAX(new, None) > self._limit:
                return False
            if dtype.kind == "i" and _MIN(new, None) < 0:
                return False
        # Every check passed. Both buffers are reserved before anything is recorded, so a failed allocation
        # leaves the trace unchanged.
        room = None if tokens is None else self._token_room(tokens.shape[0])
        if end > rows:
            if buf is None or end > buf.shape[0]:
                buf = self._reserve(end, (layers, top_k), dtype)
            buf[rows:end] = new
            self._rows = end
        elif buf is None:
            self._reserve(end, (layers, top_k), dtype)  # a first call of no rows still fixes layers and top_k
        if tokens is not None:
            assert room is not None
            self._record_tokens(tokens, room)
        self._verified = tokens is not None
        return True

    def _check_tokens(self, tokens: Array, begin: int, end: int) -> None:
        if end > tokens.shape[0]:
            raise _fail(
                "routes",
                f"at most {max(tokens.shape[0] - begin, 0)} rows (start={begin} + rows <= "
                f"len(token_ids)={tokens.shape[0]}: a row belongs to a token of the call, and token_ids are the "
                "call's whole sequence, prompt + completion, not the completion's alone)",
                f"{end - begin} rows",
            )
        if self._tokens is None:
            return
        recorded = self._tokens[: self._n_tokens]
        first = _first_difference(recorded, tokens)
        if first is not None:
            raise _fail(
                f"token_ids[{first}]",
                f"{int(recorded[first])}, the token recorded at trajectory position {first} (the call's tokens "
                "must extend the recorded ones; for a branch, fork at common_prefix(token_ids))",
                int(tokens[first]),
            )

    def _dtype_with(self, arr: Array) -> np.dtype[Any]:
        if self._fixed is not None:
            return self._fixed
        return _native(arr.dtype) if self._buf is None else _promote(self._buf.dtype, arr.dtype)

    def _reserve(self, end: int, row_shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
        """The buffer, grown to hold ``end`` rows and converted to ``dtype`` if needed."""
        buf = self._buf
        if buf is not None and end <= buf.shape[0] and dtype == buf.dtype:
            return buf
        capacity = end
        if buf is not None:
            # Doubling keeps many small calls linear overall; a wider dtype copies the recorded rows once.
            capacity = max(end, 2 * buf.shape[0]) if end > buf.shape[0] else buf.shape[0]
            if self._max_elements is not None:
                per_row = math.prod(row_shape)
                capacity = max(end, min(capacity, self._max_elements // per_row))
        grown = _allocate((capacity, *row_shape), dtype, "trace")
        if buf is not None:
            np.copyto(grown[: self._rows], buf[: self._rows], casting="unsafe")  # recorded ids are non-negative
        self._buf = grown
        self._shared = False
        return grown

    def _token_room(self, count: int) -> Array:
        """A token buffer holding the recorded tokens with room for ``count``; the trace is not changed yet."""
        return _room(self._tokens, count, np.int64, "token_ids", keep=self._n_tokens, bound=self._max_elements)

    def _record_tokens(self, tokens: Array, room: Array) -> None:
        """Record ``tokens`` into ``room`` (from :meth:`_token_room`); an empty ``tokens`` still marks the trace."""
        self._tokens = room
        count = tokens.shape[0]
        if count > self._n_tokens:
            room[self._n_tokens : count] = tokens[self._n_tokens :]
            self._n_tokens = count

    def finalize(self, total_tokens: int | None = None) -> tuple[Array, int]:
        """The trajectory's captured rows and their count, checked against its token count.

        The result goes straight into :func:`pad_routes` with ``token_lengths=[total_tokens]``, which places the
        uncaptured tail (``total_tokens - captured_rows`` rows, at least the last sampled token) under the mask:
        a row the engine never captured is masked, never filled in.

        Args:
            total_tokens: the trajectory's token count (prompt and all turns' tokens); at least the recorded
                token ids. Default: the number of recorded token ids (a trace without them needs it).

        Returns:
            ``(routes, captured_rows)``: ``routes`` ``[captured_rows, layers, top_k]``, trajectory rows
            ``0 .. captured_rows - 1`` in order, in the trace's dtype. It is the trace's own buffer, or a view
            of it (copied to size only if more than an eighth of the buffer is spare capacity); later calls never
            change it (rows are appended past it, and a ``"replace"`` copies the buffer first). It shares memory
            with the trace, though: writing into it rewrites the recorded rows that later calls are compared
            with, so modify a copy if you keep adding to the trace.

        Raises:
            R3WireError: nothing was added (the shape is unknown), ``total_tokens`` is missing on a trace without
                token ids, or is smaller than the rows or the recorded token ids.
        """
        if self._buf is None:
            # First: without an add, no total_tokens could make this call valid.
            raise _fail("trace", "at least one add() before finalize() (layers and top_k are unknown)", "none")
        if total_tokens is None:
            if self._tokens is None:
                raise _fail("total_tokens", "given (this trace recorded no token ids)", "None")
            tokens = self._n_tokens
        elif type(total_tokens) is int and 0 <= total_tokens <= MAX_DIM:
            tokens = total_tokens  # what check_int returns for a plain in-range int (never a bool: type is exact)
        else:
            tokens = check_int(total_tokens, "total_tokens", minimum=0, maximum=MAX_DIM, error=R3WireError)
        if tokens < max(self._rows, self._n_tokens):
            raise _fail(
                "total_tokens",
                f">= the {self._rows} rows and {self._n_tokens} token ids recorded (rows may be fewer than "
                "tokens, never more)",
                tokens,
            )
        buf, rows = self._buf, self._rows
        if 8 * (buf.shape[0] - rows) > buf.shape[0]:
            # Trim so a finalized trajectory does not hold up to twice its size in spare capacity; an eighth or
            # less is kept, as copying the whole trajectory would cost more than the memory it frees.
            self._buf = buf = buf[:rows].copy()
        self._shared = True
        return (buf if buf.shape[0] == rows else buf[:rows]), rows


def _taken(earlier: Array | None, now: Array | None, overlap: int, *, replace: bool) -> Array:
    """The overlap rows (call row numbers) a call writes when some row, recorded or new, was not replayed: a row
    replayed only now fills a gap, and ``"replace"`` takes every row this call replayed."""
    if replace:
        return np.arange(overlap) if now is None else np.flatnonzero(now)
    if earlier is None:
        return np.zeros(0, dtype=np.intp)  # every recorded row was replayed: no gap to fill
    return np.flatnonzero(~earlier if now is None else now & ~earlier)


def _both(first: Array | None, second: Array | None) -> Array | None:
    """Rows two row masks both mark as replayed; ``None`` (every row) when neither is given."""
    if first is None:
        return second
    if second is None:
        return first
    both: Array = first & second
    return both


def _unequal(a: Array, b: Array) -> Array:
    """``a != b`` element-wise, exactly: arrays of two integer dtypes are compared in :func:`_promote`'s common
    dtype (NumPy 1.x compares uint64 with a signed dtype as float64, where ids past 2**53 that differ are equal).

    Ids in the rows compared are non-negative (range-checked), so the common dtype holds them; a row not compared
    (not replayed, may hold -1) is converted too, and its result is never read.
    """
    if a.dtype != b.dtype:
        common = _promote(a.dtype, b.dtype)
        a, b = a.astype(common, copy=False), b.astype(common, copy=False)
    unequal: Array = a != b
    return unequal


def _check_overlap(recorded: Array, new: Array, begin: int, compared: Array | None = None) -> None:
    differs = _unequal(recorded, new)
    if compared is not None:
        differs &= compared[:, None, None]  # rows not replayed on either side are never compared
    if differs.any():
        row, layer, _ = (int(i) for i in np.argwhere(differs)[0])
        raise _fail(
            _where("routes", (row, layer)),
            f"{describe(recorded[row, layer].tolist())}, the ids already recorded for trajectory row "
            f"{begin + row} (a call's overlap with earlier calls must agree, or pass on_conflict)",
            describe(new[row, layer].tolist()),
        )
