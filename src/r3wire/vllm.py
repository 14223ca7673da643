"""vLLM adapter (extra ``vllm``): routes and sampled logprobs out of vLLM's output objects, and onto the wire.

Nothing is imported from vllm, at import time or later: every field is read by attribute, so one release of
r3wire reads the outputs of every vLLM release that has the fields (0.14 onwards), and the module costs nothing
to import. What it reads:

- ``CompletionOutput.token_ids``, ``.logprobs`` (``list[dict[int, Logprob] | None]`` or ``FlatLogprobs``) and
  ``.routed_experts`` (``[rows, layers, top_k]``: uint8 or uint16 NumPy in 0.33, int16 in 0.21, int32 in 0.14;
  a torch tensor is accepted too);
- ``RequestOutput.outputs`` and, where present (0.21), ``RequestOutput.prompt_routed_experts``, whose rows come
  before the completion's rows.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._routecheck import optional_num_experts
from r3wire._typeset import distinct_types, is_mapping, is_sequence
from r3wire._validate import is_int, load_object, optional_max_elements
from r3wire.errors import DecodeError, EncodeError, R3WireError
from r3wire.logprobs import (
    KEY_CONTENT,
    LOGPROB_FLOOR,
    ClampResult,
    as_float_array,
    build_logprobs_content,
    check_floor,
    check_request_id,
    clamp_logprobs,
    decode_logprobs,
    encode_logprobs,
    read_logprobs_content,
)
from r3wire.response import _relocate
from r3wire.routes import decode_routes, encode_routes
from r3wire.schema import KEY_SCHEMA, KEY_SHAPE

__all__ = [
    "KEY_LOGPROBS",
    "KEY_ROUTED_EXPERTS",
    "KEY_TOKEN_IDS",
    "Completion",
    "decode_completion",
    "encode_completion",
    "routed_experts",
    "sampled_logprobs",
]

# The keys of the response fragment for one completion (see docs/adapters.md).
KEY_TOKEN_IDS: Final = "token_ids"
KEY_LOGPROBS: Final = "logprobs"
KEY_ROUTED_EXPERTS: Final = "routed_experts"

_ROUTES_NDIM: Final = 3
_POSITIONS: Final = "a list of positions (dict {token_id: Logprob} or None), or a FlatLogprobs"
_INT64_MAX: Final = (1 << 63) - 1


def _select(output: Any, index: int | None) -> tuple[Any, Any, str]:
    """The completion to read, the request it came from (or None), and the field path that names it."""
    if hasattr(output, "outputs"):  # a RequestOutput
        position = 0 if index is None else index
        if not is_int(position):
            raise R3WireError.make("index", "an integer", position)
        position = int(position)
        outputs = _sequence(output.outputs, "output.outputs", "a list of CompletionOutput", R3WireError)
        count = len(outputs)
        if not count:
            raise R3WireError.make(
                "output.outputs", "at least one completion (this request has none to read)", "an empty list", raw=True
            )
        if not -count <= position < count:
            raise R3WireError.make("index", f"a completion index in 0..{count - 1}", position)
        completion = outputs[position]
        where = f"output.outputs[{position}]"
        if not hasattr(completion, "token_ids"):
            raise R3WireError.make(
                where, "a vLLM CompletionOutput (an object with token_ids)", type(completion).__name__, raw=True
            )
        return completion, output, where
    if hasattr(output, "token_ids"):  # a CompletionOutput
        if index is not None:
            raise R3WireError.make("index", "None for a CompletionOutput (it is one completion)", index)
        return output, None, "output"
    raise R3WireError.make("output", "a vLLM CompletionOutput or RequestOutput", type(output).__name__, raw=True)


def _sequence(value: Any, field: str, expected: str, error: type[R3WireError] = EncodeError) -> Sequence[Any]:
    """``value`` if it is a sequence with a length and indexing (a list, tuple, ``FlatLogprobs``...).

    The one reader of every sequence attribute of an output, so a ``None``, a number, a dict or a one-shot
    generator where a list belongs is r3wire's error naming the attribute, never ``len()``'s ``TypeError``.
    """
    if is_sequence(value) and not isinstance(value, (str, bytes, bytearray, memoryview)):
        return value
    raise error.make(field, expected, type(value).__name__, raw=True)


def _request_id(request_id: object, request: Any) -> str | None:
    """The caller's request id, else the ``RequestOutput``'s own (a ``CompletionOutput`` has none).

    The output's own id only labels the warning: one that is not a string is left out of it rather than
    failing the whole call (the caller's ``request_id`` is checked, and overrides it).
    """
    checked = check_request_id(request_id)
    if checked is None and request is not None:
        own = getattr(request, "request_id", None)
        checked = own if isinstance(own, str) else None
    return checked


def _routes_array(value: Any, field: str) -> np.ndarray[Any, Any]:
    array = as_numpy(value, field=field)
    if array.dtype.kind not in "iu":
        raise EncodeError.make(f"{field}.dtype", "an integer dtype", str(array.dtype), raw=True)
    if array.ndim != _ROUTES_NDIM:
        raise EncodeError.make(field, "a 3-d array [rows, layers, top_k]", f"shape {list(array.shape)}", raw=True)
    return array


def routed_experts(output: Any, *, index: int | None = None) -> np.ndarray[Any, Any] | None:
    """The routed-expert ids ``[rows, layers, top_k]`` of a finished vLLM completion, or None when it has none.

    Args:
        output: a ``CompletionOutput``, or a ``RequestOutput`` (its completion ``index``, the first by default).
            When the request carries ``prompt_routed_experts`` (vLLM 0.21), those rows come first, then the
            completion's.
        index: which completion of a ``RequestOutput``; must be None for a ``CompletionOutput``.

    Returns:
        The array in the engine's own dtype (any integer dtype; a tensor comes back as a host NumPy view), without
        a copy unless prompt rows had to be joined. None when the completion has no routes: routing capture is
        off, or the request is unfinished (vLLM attaches routes to the finished output only) — prompt rows
        alone are never returned as if they were the whole sequence.

    Raises:
        EncodeError: the routes are not a 3-d integer array, prompt and completion rows disagree on
            ``[layers, top_k]``, or their dtypes have no integer dtype holding both (a signed dtype with uint64:
            NumPy would join them as float64, rounding ids above 2**53).
        R3WireError: ``output`` is not a vLLM output (or one of its ``outputs`` is not a completion, or it has
            none), or ``index`` is out of range.
    """
    completion, request, where = _select(output, index)
    value = getattr(completion, "routed_experts", None)
    if value is None:
        return None
    rows = _routes_array(value, f"{where}.routed_experts")
    prompt_value = getattr(request, "prompt_routed_experts", None) if request is not None else None
    if prompt_value is None:
        return rows
    prompt = _routes_array(prompt_value, "output.prompt_routed_experts")
    if prompt.shape[1:] != rows.shape[1:]:
        raise EncodeError.make(
            "output.prompt_routed_experts",
            f"rows of [layers, top_k] = {list(rows.shape[1:])}, as in {where}.routed_experts",
            f"shape {list(prompt.shape)}",
            raw=True,
        )
    # np.concatenate promotes mixed dtypes (int16 prompt, uint16 completion → int32), exactly while the result
    # is an integer dtype; a signed dtype with uint64 would become float64, which rounds ids above 2**53.
    joined_dtype = np.result_type(prompt.dtype, rows.dtype)
    if joined_dtype.kind not in "iu":
        raise EncodeError.make(
            "output.prompt_routed_experts.dtype",
            f"an integer dtype that joins {where}.routed_experts's {rows.dtype} exactly (NumPy joins the two as "
            f"{joined_dtype}, which would round ids)",
            str(prompt.dtype),
            raw=True,
        )
    joined: np.ndarray[Any, Any] = np.concatenate([prompt, rows], axis=0)
    return joined


def sampled_logprobs(
    output: Any,
    *,
    index: int | None = None,
    request_id: str | None = None,
    floor: float = LOGPROB_FLOOR,
) -> ClampResult | None:
    """The sampled token's logprob at every generated position, missing and non-finite ones floored and counted.

    Position ``i`` is read at ``output.token_ids[i]`` in ``output.logprobs[i]``. Floored to ``floor`` (see
    :func:`r3wire.clamp_logprobs`): a position that is None or ``{}``, a sampled id missing from its position, a
    ``Logprob`` that is None or whose ``.logprob`` is None, and -inf, +inf or NaN. A ``FlatLogprobs`` is read
    from its flat lists in one vectorised pass (no per-position dicts are built), with the same result as
    indexing it position by position.

    Args:
        output: a ``CompletionOutput``, or a ``RequestOutput`` (its completion ``index``, the first by default).
        index: which completion of a ``RequestOutput``; must be None for a ``CompletionOutput``.
        request_id: names the request in the one warning logged when something was floored; defaults to a
            ``RequestOutput``'s own ``request_id``. Nothing is logged without one.
        floor: the replacement value, finite.

    Returns:
        ``ClampResult(values, num_clamped)``: float64 values, one per entry of ``token_ids``, and the count
        floored; or None when the request did not ask for logprobs (``output.logprobs`` is None).

    Raises:
        EncodeError: ``logprobs`` and ``token_ids`` differ in length (a truncated or mismatched output: flooring
            the difference would invent values), ``token_ids`` are not non-negative integers below 2**63,
            ``logprobs`` is neither a list nor a ``FlatLogprobs``, a position is neither a dict nor None, or a
            ``FlatLogprobs`` is internally inconsistent; the message names the attribute
            (``output.logprobs[3]``, ``output.outputs[0].logprobs.start_indices``...).
        R3WireError: ``output`` is not a vLLM output (or one of its ``outputs`` is not a completion, or it has
            none), or ``index``, ``floor`` or ``request_id`` is invalid. A ``RequestOutput.request_id`` that
            is not a string only labels the warning, so it is left out of it rather than refused.
    """
    completion, request, where = _select(output, index)
    request_id = _request_id(request_id, request)
    floor = check_floor(floor, np.dtype(np.float64))
    if getattr(completion, "logprobs", None) is None:
        return None
    return _sampled(completion, _token_ids(completion, where), where, request_id=request_id, floor=floor)


def _sampled(
    completion: Any, token_ids: np.ndarray[Any, Any], where: str, *, request_id: str | None, floor: float
) -> ClampResult:
    logprobs = completion.logprobs
    field = f"{where}.logprobs"
    if _is_flat(logprobs):
        values = _flat_sampled(logprobs, token_ids, field, where)
    else:
        positions = _sequence(logprobs, field, _POSITIONS)
        _check_positions(len(positions), len(token_ids), where)
        values, _ = as_float_array(_list_sampled(positions, token_ids, field), field=field)
    return clamp_logprobs(values, floor=floor, request_id=request_id)


def _check_positions(count: int, generated: int, where: str) -> None:
    if count != generated:
        raise EncodeError.make(
            f"{where}.logprobs",
            f"one position per generated token ({generated}, the length of {where}.token_ids)",
            f"{count} positions",
            raw=True,
        )


def _token_ids(completion: Any, where: str) -> np.ndarray[Any, Any]:
    """``token_ids`` (a list, tuple, array.array, array or tensor) as a 1-d int64 array; no bools, no floats."""
    return _int_vector(completion.token_ids, f"{where}.token_ids", "token id")


def _int_vector(raw: Any, field: str, noun: str, error: type[R3WireError] = EncodeError) -> np.ndarray[Any, Any]:
    """The one reader of every list of ids or indices (token ids, ``FlatLogprobs``' flat lists): 1-d int64.

    Sequences are checked element by element (their element types are their dtype), so a value that is not an
    integer, is negative or needs more than 63 bits is named by its position, never blamed on the dtype NumPy
    would have guessed for the list. Arrays and tensors are read by :func:`r3wire._arraylike.as_numpy` (masked
    arrays, meta and bfloat16 tensors refused; a tensor is detached first).
    """
    if isinstance(raw, np.ndarray) or ("torch" in sys.modules and isinstance(raw, sys.modules["torch"].Tensor)):
        array = as_numpy(raw, field=field)
        if array.ndim != 1:
            raise error.make(field, f"a 1-d sequence of {_plural(noun)}", f"shape {list(array.shape)}", raw=True)
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        if array.dtype.kind not in "iu":
            raise error.make(f"{field}.dtype", f"an integer dtype ({_plural(noun)})", str(array.dtype), raw=True)
        if array.dtype.kind == "i" and int(array.min()) < 0:
            i = int(np.argmax(array < 0))
            raise error.make(f"{field}[{i}]", f"a non-negative {noun}", int(array[i]))
        # Kind and size, not dtype identity: a big-endian '>u8' array is no np.uint64 and would wrap.
        if array.dtype.kind == "u" and array.dtype.itemsize == 8 and int(array.max()) > _INT64_MAX:
            i = int(np.argmax(array > _INT64_MAX))
            raise error.make(f"{field}[{i}]", f"{_article(noun)} {noun} below 2**63", int(array[i]))
        return array.astype(np.int64, copy=False)
    values = _sequence(raw, field, f"a sequence of {_plural(noun)}", error)
    kinds = distinct_types(values)
    odd = [
        k
        for k in kinds
        if not (issubclass(k, (int, np.integer)) and not issubclass(k, (bool, np.bool_, np.timedelta64)))
    ]
    if odd:
        i = next(i for i, v in enumerate(values) if any(type(v) is k for k in odd))
        raise error.make(f"{field}[{i}]", f"an integer {noun}", values[i])
    if not values:
        return np.zeros(0, dtype=np.int64)
    # Converted in C, which refuses (OverflowError) a Python int beyond int64. NumPy uint64 scalars go through
    # Python ints first: NumPy 1.24 wraps some above 2**63 - 1 into negative int64s, and compares them with
    # Python ints through float64, where 2**63 and 2**63 - 1 are equal (found by the property in
    # tests/property/test_adapter_properties.py).
    wide = any(issubclass(k, np.unsignedinteger) and np.dtype(k).itemsize >= 8 for k in kinds)
    numbers = [int(v) for v in values] if wide else values
    converted: np.ndarray[Any, Any] | None
    try:
        converted = np.array(numbers, dtype=np.int64)
    except OverflowError:
        converted = None
    if converted is None or int(converted.min()) < 0:
        i, low = next((i, v) for i, v in enumerate(numbers) if not 0 <= v <= _INT64_MAX)
        expected = f"a non-negative {noun}" if low < 0 else f"{_article(noun)} {noun} below 2**63"
        raise error.make(f"{field}[{i}]", expected, int(low))
    return converted


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def _plural(noun: str) -> str:
    return "indices" if noun == "index" else f"{noun}s"


def _is_flat(logprobs: Any) -> bool:
    return all(hasattr(logprobs, name) for name in ("start_indices", "end_indices", "token_ids", "logprobs"))


def _logprob_value(entry: Any, field: str) -> Any:
    if entry is None:
        return None
    try:
        value = entry.logprob
    except AttributeError:
        raise EncodeError.make(
            field, "a vLLM Logprob (an object with .logprob)", type(entry).__name__, raw=True
        ) from None
    return value


def _list_sampled(positions: Sequence[Any], token_ids: np.ndarray[Any, Any], field: str) -> list[Any]:
    """``list[dict[int, Logprob] | None]``: one dict lookup per position; missing values as None."""
    values: list[Any] = []
    append = values.append
    for i, token in enumerate(token_ids.tolist()):
        position = positions[i]
        if position is None:
            append(None)
            continue
        if not is_mapping(position):
            raise EncodeError.make(f"{field}[{i}]", "a dict {token_id: Logprob} or None", position)
        append(_logprob_value(position.get(token), f"{field}[{i}][{token}]"))  # {} or an absent id: None
    return values


def _flat_sampled(logprobs: Any, token_ids: np.ndarray[Any, Any], field: str, where: str) -> np.ndarray[Any, Any]:
    """``FlatLogprobs``: find each position's sampled id in its ``[start, end)`` slice of the flat lists."""
    n = len(token_ids)
    starts = _int_vector(logprobs.start_indices, f"{field}.start_indices", "index")
    _check_positions(len(starts), n, where)
    ends = _int_vector(logprobs.end_indices, f"{field}.end_indices", "index")
    if len(ends) != n:
        raise EncodeError.make(
            f"{field}.end_indices", f"{n} entries, as start_indices", f"{len(ends)} entries", raw=True
        )
    flat_values, _ = as_float_array(logprobs.logprobs, field=f"{field}.logprobs")
    if flat_values.ndim != 1:
        raise EncodeError.make(
            f"{field}.logprobs", "a flat (1-d) list of logprobs", f"shape {list(flat_values.shape)}", raw=True
        )
    total = len(flat_values)
    flat_ids = _int_vector(logprobs.token_ids, f"{field}.token_ids", "token id")
    if len(flat_ids) != total:
        raise EncodeError.make(
            f"{field}.token_ids", f"{total} entries, as logprobs", f"{len(flat_ids)} entries", raw=True
        )
    lengths = ends - starts
    bad = (lengths < 0) | (ends > total)
    if bad.any():
        i = int(np.argmax(bad))
        raise EncodeError.make(
            f"{field}[{i}]",
            f"a slice [start, end) of the {total} flat entries",
            f"[{int(starts[i])}, {int(ends[i])})",
            raw=True,
        )
    values = np.full(n, math.nan, dtype=np.float64)
    count = int(lengths.sum())
    if count > total:
        # vLLM's slices never overlap; overlapping ones could ask for n * total lookups from a small output.
        raise EncodeError.make(
            f"{field}.end_indices",
            f"slices that share no entry (lengths summing to at most the {total} flat entries)",
            f"lengths summing to {count}",
            raw=True,
        )
    if count == 0:
        return values
    # The flat entry indices of every position's slice, in position order, and the position each belongs to.
    position = np.repeat(np.arange(n), lengths)
    offsets = np.cumsum(lengths) - lengths
    entry = np.arange(count) - np.repeat(offsets - starts, lengths)
    match = flat_ids[entry] == token_ids[position]
    hits = np.flatnonzero(match)
    if hits.size:
        # Several entries of one position can hold the sampled id (it is also in the top-k); as in the dict
        # FlatLogprobs[i] builds, the last one wins. Hits are in position order, so a position's last hit is
        # the one followed by another position's (NumPy leaves repeated-index assignment order unspecified).
        owner = position[hits]
        last = np.ones(hits.size, dtype=bool)
        last[:-1] = owner[1:] != owner[:-1]
        values[owner[last]] = flat_values[entry[hits[last]]]
    return values


LogprobsFormat = Literal["content", "envelope"]


def encode_completion(
    output: Any,
    *,
    index: int | None = None,
    request_id: str | None = None,
    num_experts: int | None = None,
    logprobs_format: LogprobsFormat = "content",
) -> dict[str, Any]:
    """The response fragment a server returns for one vLLM completion, ready for ``orjson.dumps``.

    ``{"token_ids": [...], "logprobs": ... | None, "routed_experts": <r3wire.routes envelope> | None}``, where
    logprobs are the sampled ones from :func:`sampled_logprobs` (floored, so the JSON never holds ``null`` or
    NaN), as ``{"content": [{"logprob": x}, ...]}`` (the shape SkyRL clients read today) or, with
    ``logprobs_format="envelope"``, as a compact ``r3wire.logprobs`` envelope.

    Args:
        output: a ``CompletionOutput``, or a ``RequestOutput`` (its completion ``index``, the first by default;
            prompt rows of routes included, see :func:`routed_experts`).
        index: which completion of a ``RequestOutput``; must be None for a ``CompletionOutput``.
        request_id: names the request in the warning logged when logprobs were floored (default: a
            ``RequestOutput``'s ``request_id``).
        num_experts: the model's expert count: fixes the routes dtype on every rank and checks every id.
        logprobs_format: ``"content"`` or ``"envelope"``.

    Raises:
        EncodeError: the output's token ids, logprobs or routes cannot be encoded exactly (see
            :func:`sampled_logprobs`, :func:`routed_experts`, :func:`r3wire.encode_routes`).
        R3WireError: ``output`` is not a vLLM output, or an argument is invalid (each is checked on every call,
            whether or not the output has logprobs or routes).
    """
    if logprobs_format not in ("content", "envelope"):
        raise R3WireError.make("logprobs_format", "'content' or 'envelope'", logprobs_format)
    num_experts = optional_num_experts(num_experts)  # checked on every call, not only for outputs with routes
    completion, request, where = _select(output, index)
    request_id = _request_id(request_id, request)
    token_ids = _token_ids(completion, where)
    logprobs: dict[str, Any] | None = None
    if getattr(completion, "logprobs", None) is not None:
        clamped = _sampled(completion, token_ids, where, request_id=request_id, floor=LOGPROB_FLOOR)
        logprobs = build_logprobs_content(clamped) if logprobs_format == "content" else encode_logprobs(clamped.values)
    routes = routed_experts(output, index=index)
    return {
        KEY_TOKEN_IDS: token_ids.tolist(),
        KEY_LOGPROBS: logprobs,
        KEY_ROUTED_EXPERTS: None if routes is None else encode_routes(routes, num_experts=num_experts),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """One completion as a client reads it back with :func:`decode_completion`."""

    token_ids: np.ndarray[Any, Any]
    """int64 ``[generated]``."""
    logprobs: np.ndarray[Any, Any] | None
    """The sampled logprobs, float64 (float32 if so sent) ``[generated]``, every value finite; None if not sent."""
    num_clamped: int
    """How many logprobs the client itself had to floor (``null`` or missing in the content shape); 0 normally."""
    routed_experts: np.ndarray[Any, Any] | None
    """uint8/int16/int32 ``[rows, layers, top_k]``, writable; None if not sent."""


def decode_completion(
    payload: Any,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
    request_id: str | None = None,
    floor: float = LOGPROB_FLOOR,
) -> Completion:
    """Read back what :func:`encode_completion` produced (a dict, or JSON text as ``str`` or bytes).

    Keys other than ``token_ids``, ``logprobs`` and ``routed_experts`` are ignored, so the fragment can sit in a
    larger response object. ``logprobs`` may be either shape :func:`encode_completion` writes; in the content
    shape, a ``null`` (an older server's NaN) is floored and counted, as :func:`r3wire.read_logprobs_content` does.

    Args:
        payload: the fragment.
        num_experts: the model's expert count, checked against the routes (see :func:`r3wire.decode_routes`).
        max_elements: refuse routes declaring more ids than this, before decoding them.
        request_id: names the request in the warning logged when logprobs had to be floored.
        floor: the replacement for missing logprobs.

    Every argument is checked first, whichever members the fragment holds. An envelope's logprobs are bounded
    by the number of token ids before they are decoded.

    Raises:
        DecodeError: a field is missing or malformed (named within the fragment: ``logprobs.shape``,
            ``routed_experts.data``...), or logprobs and token ids differ in length (both lengths named).
        UnsupportedVersionError: an envelope's schema version is not one this release reads.
        R3WireError: ``num_experts``, ``max_elements``, ``request_id`` or ``floor`` is invalid.
    """
    num_experts = optional_num_experts(num_experts)
    max_elements = optional_max_elements(max_elements)
    request_id = check_request_id(request_id)
    floor = check_floor(floor, np.dtype(np.float64))
    obj = load_object(payload, what="a completion object {token_ids, logprobs, routed_experts}")
    if KEY_TOKEN_IDS not in obj:
        raise DecodeError.make(KEY_TOKEN_IDS, "present (an array of token ids)", "no such key", raw=True)
    token_ids = _read_token_ids(obj[KEY_TOKEN_IDS])
    values: np.ndarray[Any, Any] | None = None
    num_clamped = 0
    lp = obj.get(KEY_LOGPROBS)
    if lp is not None:
        if is_mapping(lp) and KEY_SCHEMA in lp:
            values = _read_logprobs_envelope(lp, len(token_ids))
        elif is_mapping(lp) and KEY_CONTENT in lp:
            try:
                values, num_clamped = read_logprobs_content(lp, floor=floor, request_id=request_id)
            except DecodeError as exc:
                raise _relocate(exc, KEY_LOGPROBS) from None
        else:
            raise DecodeError.make(KEY_LOGPROBS, 'an r3wire.logprobs envelope, {"content": [...]} or null', lp)
        if len(values) != len(token_ids):
            raise _length_mismatch(len(token_ids), len(values))
    routes_payload = obj.get(KEY_ROUTED_EXPERTS)
    routes = None
    if routes_payload is not None:
        try:
            routes = decode_routes(routes_payload, num_experts=num_experts, max_elements=max_elements)
        except DecodeError as exc:
            raise _relocate(exc, KEY_ROUTED_EXPERTS) from None
    return Completion(token_ids=token_ids, logprobs=values, num_clamped=num_clamped, routed_experts=routes)


def _read_logprobs_envelope(envelope: Mapping[str, Any], generated: int) -> np.ndarray[Any, Any]:
    """An ``r3wire.logprobs`` envelope holding one logprob per token id, refused before decoding when longer."""
    try:
        # At least 1: the element limit holds an empty shape [0] to its extent, 1 (docs/wire-format.md).
        return decode_logprobs(envelope, ndim=1, max_elements=max(generated, 1))
    except DecodeError as exc:
        shape = envelope.get(KEY_SHAPE)
        declared = int(shape[0]) if isinstance(shape, (list, tuple)) and len(shape) == 1 and is_int(shape[0]) else -1
        if exc.field == KEY_SHAPE and declared > generated:
            # A 1-d shape refused by the element limit: the envelope holds more values than there are token ids.
            raise _length_mismatch(generated, declared) from None
        raise _relocate(exc, KEY_LOGPROBS) from None


def _length_mismatch(generated: int, count: int) -> DecodeError:
    return DecodeError(
        f"{KEY_LOGPROBS} must be one logprob per token ({generated}, the length of {KEY_TOKEN_IDS}), "
        f"got {count} values",
        field=KEY_LOGPROBS,
        expected=f"one logprob per token ({generated}, the length of {KEY_TOKEN_IDS})",
        got=f"{count} values",
    )


def _read_token_ids(value: object) -> np.ndarray[Any, Any]:
    if not isinstance(value, (list, tuple)):
        raise DecodeError.make(KEY_TOKEN_IDS, "an array of token ids", type(value).__name__, raw=True)
    return _int_vector(value, KEY_TOKEN_IDS, "token id", DecodeError)
