"""Sampled-token logprobs: clamping to a finite floor, the ``r3wire.logprobs`` envelope, the seed's JSON shape.

vLLM occasionally reports a non-finite logprob for a token it just sampled. ``orjson`` writes such a value as
``null`` without a word, and vLLM's own floor ``max(x, -9999.0)`` lets NaN through (``max`` keeps its first
argument when the comparison is false). Every value that is not finite, and every missing one, becomes the floor
here; every finite value comes back bit for bit; the caller is told how many were replaced: by the returned
count, and by one warning on the ``r3wire`` logger when it names the request.

On the wire, ``r3wire.logprobs`` is the generic envelope restricted to float32/float64 with one extra promise:
every value is finite. The encoder refuses a non-finite value unless asked to clamp; the decoder refuses one.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import sys
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, cast

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._envelope import build_envelope, decode_data, read_header, to_wire_bytes, wire_dtype_name
from r3wire._typeset import distinct_types, is_mapping, is_sequence, types_within
from r3wire._validate import DEFAULT_MAX_ELEMENTS, MAX_NDIM, check_int, load_object, optional_max_elements
from r3wire._walk import copy_list, own_len, read_count
from r3wire.errors import DecodeError, EncodeError, R3WireError, describe
from r3wire.schema import LOGPROB_DTYPES, LOGPROBS_SCHEMA

__all__ = [
    "LOGPROB_FLOOR",
    "ClampResult",
    "build_logprobs_content",
    "clamp_logprobs",
    "decode_logprobs",
    "encode_logprobs",
    "read_logprobs_content",
]

LOGPROB_FLOOR: Final = -9999.0
"""The value a non-finite or missing logprob becomes: the floor vLLM itself applies at its serving boundaries."""

# A child of "r3wire": its records reach handlers attached to the "r3wire" logger.
logger: Final = logging.getLogger("r3wire.logprobs")

# float16/32/64 only: these have exact wire dtypes; longdouble's width and padding differ between platforms.
_FLOAT_SIZES: Final = (2, 4, 8)
# Python floats (np.float64 is a subclass), and the narrower NumPy scalars, convert to float64 exactly.
_EXACT_FLOAT_TYPES: Final = (float, np.float32, np.float16)
# A bool is an int in Python but never a logprob: True would silently become 1.0. np.timedelta64 is an
# np.signedinteger whose float() raises TypeError (or, in ns, drops the unit).
_REJECTED_TYPES: Final = (bool, np.bool_, np.timedelta64)
# What _logprob_kind says of a type: its values are floats (converted exactly), or integers (converted only when a
# float64 holds them exactly); any other type's values are refused.
_FLOAT_KIND: Final = "float"
_INT_KIND: Final = "int"


class ClampResult(NamedTuple):
    """What :func:`clamp_logprobs` returns: the clamped copy, and how many positions were replaced."""

    values: np.ndarray[Any, Any]
    num_clamped: int


def check_floor(floor: object, dtype: np.dtype[Any] | None = None) -> float:
    """Return ``floor`` as a ``float`` if it is finite, at most 0 and, when ``dtype`` is given, exactly
    representable in it.

    Raises:
        R3WireError: the floor is not a real number, not finite, above 0, or would be rounded in ``dtype``.
    """
    if isinstance(floor, _REJECTED_TYPES) or not isinstance(floor, (int, float, np.integer, np.floating)):
        raise R3WireError.make("floor", "a finite float", floor)
    try:
        value = float(floor)
    except OverflowError:
        raise R3WireError.make("floor", "a finite float", floor) from None
    if not math.isfinite(value) or (isinstance(floor, (int, np.integer)) and int(value) != int(floor)):
        raise R3WireError.make("floor", "a finite float", floor)
    if value > 0:  # a log-probability is at most 0: a missing one would become a probability above 1
        raise R3WireError.make("floor", "a finite float <= 0 (a log-probability)", floor)
    if isinstance(floor, np.floating) and floor.dtype.itemsize > 8 and np.longdouble(value) != floor:
        # float() rounded an extended-precision floor: the caller's value would not be the one written.
        raise R3WireError.make("floor", "a value exactly representable as a float64", str(floor), raw=True)
    if dtype is not None:
        # The floor is written into the caller's dtype; a floor that would round there (e.g. -9999.0 in float16
        # is -10000.0) is refused up front, for every input, rather than only on the rare call that clamps.
        with np.errstate(over="ignore"):
            stored = float(np.asarray(value, dtype=dtype))
        if stored != value:
            raise R3WireError.make(
                "floor",
                f"a value exactly representable in {dtype.name}",
                f"{value!r} (stored as {stored!r} in {dtype.name})",
                raw=True,
            )
    return value


def _int_as_float(value: int | np.integer[Any]) -> float | None:
    """``value`` as a float64 if the conversion is exact, else None (it would round or overflow)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if int(number) == int(value) else None


def _classify(kind: type) -> str | None:
    """The rule of :func:`_logprob_kind`, uncached."""
    if issubclass(kind, _REJECTED_TYPES):
        return None
    if issubclass(kind, _EXACT_FLOAT_TYPES):
        return _FLOAT_KIND
    if issubclass(kind, (int, np.integer)):
        return _INT_KIND
    return None


# The kinds of the types met so far: a lookup instead of up to three subclass checks per value of a list of NumPy
# scalars. Bounded: a document built in process can hold any number of classes.
_KINDS: Final[dict[type, str | None]] = {}
_MAX_KINDS: Final = 64


def _logprob_kind(kind: type) -> str | None:
    """The one rule for the type of a logprob value, wherever one is read or written: ``"float"`` for Python floats
    (np.float64 included) and np.float32/np.float16, ``"int"`` for Python and NumPy integers, None (refused) for
    everything else: bools and np.bool_, np.timedelta64 (an np.signedinteger), np.longdouble (float() may round
    it), complex numbers, strings, containers. ``None`` itself (a missing logprob) is the caller's to handle."""
    try:
        return _KINDS[kind]
    except KeyError:
        pass
    except TypeError:  # a class whose metaclass makes it unhashable: NumPy fails to convert it (SystemError)
        return None
    result = _classify(kind)
    if len(_KINDS) < _MAX_KINDS:
        with contextlib.suppress(TypeError):
            _KINDS[kind] = result
    return result


def logprob_value(value: object, field: str, index: int, suffix: str = "") -> float:
    """One sampled logprob as read from a response body: a float64 exactly equal to ``value``, NaN for ``None``
    (a missing one, which the caller clamps and counts).

    The one reader of a single value: :func:`read_logprobs_content` and the list forms of
    :func:`r3wire.formats.read_response` (a list of numbers, ``token_logprobs``, SGLang's ``[logprob, ...]``
    entries) all read each value here, so a value is accepted, converted or refused alike in every form. Their
    fast paths (plain floats and ``None``) only skip this call where its answer is the value itself or NaN.

    Args:
        value: the value as parsed (a JSON number or null) or as an in-process document holds it.
        field: the error's field before the index (``"content"``, or ``""`` for a bare list).
        index: the value's position, written as ``[index]`` after ``field``.
        suffix: the error's field after the index (``".logprob"``, ``"[0]"``); the field is only built on error.

    Raises:
        DecodeError: at ``f"{field}[{index}]{suffix}"``: an integer a float64 cannot hold exactly, or a value of
            a refused type (see :func:`_logprob_kind`).
    """
    if value is None:
        return math.nan
    try:
        kind = _KINDS[type(value)]  # _logprob_kind's own lookup, without the call: a list of NumPy scalars
    except (KeyError, TypeError):
        kind = _logprob_kind(type(value))
    number: Any = value  # of the kind just checked: an annotation, not a call, on this path
    if kind == _FLOAT_KIND:
        return float(number)
    if kind == _INT_KIND:
        exact = _int_as_float(number)
        if exact is not None:
            return exact
        raise DecodeError.make(f"{field}[{index}]{suffix}", "a number exactly representable as a float64", value)
    raise DecodeError.make(f"{field}[{index}]{suffix}", "a number or null", value)


def _first_position(values: Sequence[object], kind: type) -> int:
    return next(i for i, v in enumerate(values) if type(v) is kind)


def _sequence_to_array(values: Sequence[object], field: str) -> np.ndarray[Any, Any]:
    """A flat sequence of ``float | int | None`` as float64, None as NaN; anything else is an EncodeError."""
    # set(map(type, ...)) runs in C: the element types of a million-entry list are known in a few milliseconds,
    # and the slow per-element path below runs only for ints, which need an exactness check.
    kinds = distinct_types(values)
    has_int = False
    for kind in kinds:
        # The types accepted are those read_logprobs_content accepts: one rule, _logprob_kind.
        logprob_kind = _logprob_kind(kind)
        if kind is type(None) or logprob_kind == _FLOAT_KIND:
            continue
        if logprob_kind == _INT_KIND:
            has_int = True
            continue
        i = _first_position(values, kind)
        raise EncodeError.make(f"{field}[{i}]", "a float or None (a logprob, or a missing one)", values[i])
    if has_int:
        # Only the ints are visited in Python: the types are matched in C (itertools, map, set lookups), so one
        # int among millions of floats costs about what the floats alone cost.
        int_kinds = frozenset(kind for kind in kinds if _logprob_kind(kind) == _INT_KIND)
        for i, v in itertools.compress(enumerate(values), map(int_kinds.__contains__, map(type, values))):
            if _int_as_float(cast("int | np.integer[Any]", v)) is None:  # an int kind, selected by its type
                raise EncodeError.make(f"{field}[{i}]", "an integer exactly representable as a float64", v)
    return np.array(values, dtype=np.float64)


def as_float_array(values: object, field: str = "values", *, half: bool = True) -> tuple[np.ndarray[Any, Any], bool]:
    """``values`` as a float16/32/64 NumPy array (float32/64 unless ``half``): arrays and tensors as they are,
    sequences as float64.

    Missing entries (None) of a sequence become NaN; a :class:`ClampResult` is read as its values (it is a tuple,
    and ``encode_logprobs(clamp_logprobs(x))`` is the natural call). Returns the array and whether it is a new one
    (``False`` when it may share memory with ``values``).

    Raises:
        EncodeError: not a float array, or a sequence holding something other than floats, ints and None.
    """
    if isinstance(values, ClampResult):
        values = values.values
    if isinstance(values, np.ndarray) or ("torch" in sys.modules and isinstance(values, sys.modules["torch"].Tensor)):
        array = as_numpy(values, field=field)
        if array.dtype == np.dtype(object):
            flat = _sequence_to_array(array.reshape(-1).tolist(), field)
            return flat.reshape(array.shape), True
        if (
            array.dtype.kind != "f"
            or array.dtype.itemsize not in _FLOAT_SIZES
            or (array.dtype.itemsize == 2 and not half)
        ):
            expected = (
                "float16, float32 or float64" if half else "float32 or float64 (float16.astype(np.float32) is exact)"
            )
            raise EncodeError.make(f"{field}.dtype", expected, str(array.dtype), raw=True)
        return array, False
    # A memoryview is a Sequence of its items (a bytes view reads as ints, a 2-d one cannot be iterated): like
    # bytes, it is no sequence of floats.
    if is_sequence(values) and not isinstance(values, (str, bytes, bytearray, memoryview)):
        # range(10**12) is a Sequence: refused by its length before it is iterated. A list or tuple subclass is
        # read as what it holds, never by its __len__ (NumPy asks it, and one that lies or raises made NumPy's own
        # errors); another sequence is read through its own iteration, no further than one item past its length.
        expected = f"at most {DEFAULT_MAX_ELEMENTS} values (the default element limit)"
        try:
            count = own_len(values)
        except Exception as exc:  # the caller's own __len__: reported, not leaked
            got = f"{type(values).__name__} whose __len__ raised {describe(exc)}"
            raise EncodeError.make(field, expected, got, raw=True) from exc
        if count > DEFAULT_MAX_ELEMENTS:
            raise EncodeError.make(field, expected, f"{count} values", raw=True)
        if not isinstance(values, (list, tuple)):
            as_long = f"a sequence of {count} values (its len())"
            items = copy_list(values, most=count + 1, field=field, expected=as_long, error=EncodeError)
            if len(items) != count:
                got = f"{read_count(items, count, whole=False)} values"
                raise EncodeError.make(field, as_long, got, raw=True)
            values = items
        elif type(values) is not list and type(values) is not tuple:
            values = copy_list(values)
        return _sequence_to_array(values, field), True
    raise EncodeError.make(
        field, "a sequence of float | None, a float NumPy array or a tensor", type(values).__name__, raw=True
    )


def check_request_id(request_id: object) -> str | None:
    """Return ``request_id`` if it is ``None`` or a string.

    Raises:
        R3WireError: it is anything else.
    """
    if request_id is not None and not isinstance(request_id, str):
        raise R3WireError.make("request_id", "a string or None", request_id)
    return request_id


def _warn_clamped(num_clamped: int, total: int, floor: float, request_id: str | None) -> None:
    """Log the one warning a clamp produces: the request, the count and the total."""
    where = f"request {describe(request_id)}" if request_id is not None else "a request without an id"
    logger.warning(
        "clamped %d/%d sampled logprobs (non-finite or missing) to %r for %s",
        num_clamped,
        total,
        floor,
        where,
        extra={"r3wire_request_id": request_id, "r3wire_num_clamped": num_clamped, "r3wire_total": total},
    )


def _default_floor(dtype: np.dtype[Any]) -> float:
    """The value of ``dtype`` nearest :data:`LOGPROB_FLOOR` (-9999.0): exact in float32 and float64, -10000.0 in
    float16 (whose neighbours there are 8 apart), so the default floor works for every float dtype."""
    return float(np.asarray(LOGPROB_FLOOR, dtype=dtype))


def clamp_logprobs(values: Any, *, floor: float | None = None, request_id: str | None = None) -> ClampResult:
    """Replace every non-finite or missing logprob with ``floor``; keep every finite value bit for bit.

    Args:
        values: a sequence of ``float | None`` (ints are accepted when exactly representable), or a float16,
            float32 or float64 NumPy array or torch tensor of any shape. Never modified.
        floor: the replacement. Default: the output dtype's value nearest -9999.0 (:data:`LOGPROB_FLOOR`),
            which is -9999.0 in float32 and float64 and -10000.0 in float16 (-9999.0 is not a float16 value).
            An explicit floor must be finite, at most 0 and exactly representable in the output dtype; it is
            checked on every call, even when nothing needs clamping, so a bad floor fails at the first call rather
            than on a rare bad token.
        request_id: the request these logprobs belong to. When given and something was clamped, one warning
            naming it, the count and the total goes to the ``r3wire`` logger. Without it nothing is logged:
            the count is the return value, and the caller decides what to do with it.

    Returns:
        ``ClampResult(values, num_clamped)``: a new, writable, C-contiguous array of the input's dtype
        (float64 for a sequence), and the number of positions replaced (-inf, +inf, NaN of any sign or payload,
        and None).

    Raises:
        EncodeError: ``values`` is not a float array or a sequence of floats and None (bools and strings are
            refused, not converted).
        R3WireError: ``floor`` is not finite or not exactly representable in the output dtype, or
            ``request_id`` is not a string.
    """
    request_id = check_request_id(request_id)
    array, fresh = as_float_array(values)
    floor = _default_floor(array.dtype) if floor is None else check_floor(floor, array.dtype)
    result = _clamp(array, fresh=fresh, floor=floor)
    if result.num_clamped and request_id is not None:
        _warn_clamped(result.num_clamped, array.size, floor, request_id)
    return result


def _clamp(array: np.ndarray[Any, Any], *, fresh: bool, floor: float) -> ClampResult:
    finite = np.isfinite(array)
    num_clamped = array.size - int(np.count_nonzero(finite))
    # The result never aliases the caller's buffer (a tensor's storage, a read-only array): copy unless the
    # array was just built from a sequence.
    out: np.ndarray[Any, Any] = array if fresh else np.array(array, order="C", copy=True)
    if num_clamped:
        np.copyto(out, np.asarray(floor, dtype=out.dtype), where=~finite)
    return ClampResult(out, num_clamped)


def _first_non_finite(array: np.ndarray[Any, Any]) -> tuple[list[int], float] | None:
    """The index and value of the first non-finite element, or None when all are finite."""
    finite = np.isfinite(array)
    if finite.all():
        return None
    index = [int(i) for i in np.argwhere(~finite)[0]]
    return index, float(array[tuple(index)])


def _show_bad(values: object, array: np.ndarray[Any, Any], index: list[int], value: float) -> str:
    """Describe the first bad value of ``values``: a missing entry as such, a non-finite one by its bits."""
    if array.ndim == 1 and is_sequence(values) and values[index[0]] is None:
        return "None (missing)"
    if isinstance(values, np.ndarray) and values.dtype == object and values[tuple(index)] is None:
        return "None (missing)"
    return _show_non_finite(array, index, value)


def _show_non_finite(array: np.ndarray[Any, Any], index: list[int], value: float) -> str:
    # NaNs differ only in their bits; show them so a bad producer can be identified from the error alone. The
    # bits are the element's own: through a Python float, a float32 or float16 signalling NaN would come back quiet.
    if math.isnan(value):
        size = array.dtype.itemsize
        cell = array[tuple(slice(i, i + 1) for i in index)]  # the element as an array: no float conversion
        bits = int(cell.view(array.dtype.str.replace("f", "u")).reshape(-1)[0])
        return f"nan (bits 0x{bits:0{2 * size}x})"
    return repr(value)


def encode_logprobs(
    values: Any,
    *,
    clamp: bool = False,
    floor: float | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """Encode logprobs as an ``r3wire.logprobs`` envelope, float32 or float64 as given, every value bit for bit.

    Args:
        values: a float32 or float64 NumPy array or torch tensor of any shape, or a sequence of floats (sent as
            float64). float16 is refused: it is not a logprob wire dtype (engines compute logprobs in float32, and
            r3wire never converts); convert with ``astype(np.float32)``, which is exact.
        clamp: replace non-finite and missing values with ``floor`` first (see :func:`clamp_logprobs`). Without
            it, a non-finite or missing value is an error. This function returns no count, so a clamp that
            replaced anything is always reported: one warning on the ``r3wire`` logger, naming ``request_id``
            when given. Call :func:`clamp_logprobs` first instead to get the count as a value.
        floor: the replacement when clamping. Default: as :func:`clamp_logprobs`, the dtype's value nearest
            :data:`LOGPROB_FLOOR` (-9999.0 in float32 and float64). An explicit floor must be finite, at most 0
            and exactly representable in the dtype; it is checked even when ``clamp`` is false.
        request_id: names the request in the warning.

    Returns:
        A JSON-ready dict ``{"data", "shape", "dtype", "schema", "version"}``.

    Raises:
        EncodeError: not a float32/float64 array or a sequence of floats, or (without ``clamp``) a value that is
            not finite; the message names the first offending position.
        R3WireError: ``floor`` or ``request_id`` is invalid.
    """
    request_id = check_request_id(request_id)
    if not isinstance(clamp, bool):
        raise R3WireError.make("clamp", "a bool", clamp)
    array, fresh = as_float_array(values, field="logprobs", half=False)
    name = wire_dtype_name(array.dtype, field="logprobs", allowed=LOGPROB_DTYPES)
    floor = _default_floor(array.dtype) if floor is None else check_floor(floor, array.dtype)
    if clamp:
        array, num_clamped = _clamp(array, fresh=fresh, floor=floor)
        if num_clamped:
            _warn_clamped(num_clamped, array.size, floor, request_id)
    else:
        _check_finite(values, array)
    return build_envelope(to_wire_bytes(array, name), name, LOGPROBS_SCHEMA)


def logprobs_wire(values: object, *, clamp_option: str = "clamp=True") -> tuple[np.ndarray[Any, Any], str]:
    """Check logprobs as :func:`encode_logprobs` does without ``clamp``; return the wire array and its dtype name
    (what the envelope's base64 encodes), for a writer that encodes the bytes itself. ``clamp_option`` is how
    the caller's own function asks for the clamp, for the error's advice (``dumps`` takes ``clamp_logprobs=True``).

    Raises:
        EncodeError: as :func:`encode_logprobs`.
    """
    array, _ = as_float_array(values, field="logprobs", half=False)
    name = wire_dtype_name(array.dtype, field="logprobs", allowed=LOGPROB_DTYPES)
    _check_finite(values, array, clamp_option)
    return to_wire_bytes(array, name), name


def _check_finite(values: object, array: np.ndarray[Any, Any], clamp_option: str = "clamp=True") -> None:
    """Refuse a non-finite value of ``array`` (``values`` as converted), naming the first as the caller gave it.

    Raises:
        EncodeError: at ``logprobs[i, ...]``.
    """
    bad = _first_non_finite(array)
    if bad is not None:
        index, value = bad
        shown = _show_bad(values, array, index, value)
        raise EncodeError.make(
            f"logprobs{index}",
            f"a finite logprob (pass {clamp_option}, or call clamp_logprobs first, to replace it with the floor)",
            shown,
            raw=True,
        )


def decode_logprobs(
    payload: Any,
    *,
    ndim: int | None = None,
    max_elements: int | None = None,
) -> np.ndarray[Any, Any]:
    """Decode an ``r3wire.logprobs`` envelope (a dict, or its JSON text as ``str`` or bytes).

    Args:
        payload: the envelope.
        ndim: the number of dimensions required (1 for one logprob per token); any when omitted.
        max_elements: refuse a payload declaring more values than this, before decoding anything; ``None``
            means ``DEFAULT_MAX_ELEMENTS`` (2**30). Pass a larger int to raise it.

    Returns:
        A writable, C-contiguous float32 or float64 array (the wire dtype, native byte order), every value finite.

    Raises:
        DecodeError: the payload is malformed, breaks a limit, or carries a NaN or infinity; the message names
            the field (``data[i]`` for a value).
        UnsupportedVersionError: the payload's schema version is not one this release reads.
        R3WireError: ``ndim`` or ``max_elements`` is invalid.
    """
    if ndim is not None:
        ndim = check_int(ndim, "ndim", minimum=0, maximum=MAX_NDIM, error=R3WireError)
    max_elements = optional_max_elements(max_elements)
    obj = load_object(payload, what="an r3wire.logprobs envelope")
    header = read_header(
        obj, schema_name=LOGPROBS_SCHEMA.name, dtypes=LOGPROB_DTYPES, ndim=ndim, max_elements=max_elements
    )
    array = decode_data(header)
    bad = _first_non_finite(array)
    if bad is not None:
        index, value = bad
        raise DecodeError.make(
            f"data{index}",
            "a finite logprob (r3wire.logprobs never carries NaN or infinity)",
            _show_non_finite(array, index, value),
            raw=True,
        )
    return array


# The JSON shape SkyRL-style servers send today: {"content": [{"logprob": x}, ...]}, one entry per token, as in
# OpenAI's chat-completions logprobs object.
KEY_CONTENT: Final = "content"
KEY_LOGPROB: Final = "logprob"
_SUFFIX: Final = f".{KEY_LOGPROB}"  # an entry's value is named content[i].logprob


def build_logprobs_content(values: Any) -> dict[str, list[dict[str, float]]]:
    """The seed's JSON shape ``{"content": [{"logprob": x}, ...]}`` from finite, already clamped logprobs.

    Clients reading that shape keep working unchanged; they just never see ``null`` again. Each value is written
    as a Python float, whose shortest repr reproduces a float32 or float64 value exactly.

    Args:
        values: a :class:`ClampResult`, or a 1-d sequence or float array whose values are all finite.

    Returns:
        ``{"content": [{"logprob": x}, ...]}``, ready for ``orjson.dumps``.

    Raises:
        EncodeError: not one-dimensional, or a value that is not finite (clamp with :func:`clamp_logprobs`).
    """
    if isinstance(values, ClampResult):
        values = values.values
    array, _ = as_float_array(values, field="logprobs")
    if array.ndim != 1:
        raise EncodeError.make(
            "logprobs", "a 1-d array (one logprob per token)", f"shape {list(array.shape)}", raw=True
        )
    bad = _first_non_finite(array)
    if bad is not None:
        index, value = bad
        shown = _show_bad(values, array, index, value)
        raise EncodeError.make(
            f"logprobs{index}", "a finite logprob (clamp with clamp_logprobs first)", shown, raw=True
        )
    return {KEY_CONTENT: [{KEY_LOGPROB: x} for x in array.tolist()]}


_ENTRY_TYPES: Final = frozenset({dict})
_PLAIN_LOGPROB_TYPES: Final = frozenset({float, type(None)})


def _plain_logprobs(content: Sequence[Any]) -> list[float | None] | None:
    """Every entry's logprob, read in C, when every entry is a dict whose logprob is a float or absent or
    ``null`` (a parsed body's content); None otherwise (the per-entry loop then reads and names each one).

    ``np.array(..., float64)`` reads such a list exactly as the loop does: a float as itself, ``None`` as NaN.
    """
    if type(content) is not list or not types_within(content, _ENTRY_TYPES):
        return None
    values: list[float | None] = list(map(dict.get, content, itertools.repeat(KEY_LOGPROB)))
    return values if types_within(values, _PLAIN_LOGPROB_TYPES) else None


def read_logprobs_content(
    payload: Any,
    *,
    floor: float = LOGPROB_FLOOR,
    request_id: str | None = None,
) -> ClampResult:
    """Read the sampled logprobs out of ``{"content": [{"logprob": x}, ...]}``, clamping the missing ones.

    An entry that is ``null``, ``{}``, has no ``logprob`` key, or whose logprob is ``null`` or not finite (a
    NaN an in-process caller passed, or an old server's ``null``) counts as missing and becomes ``floor``. Other
    keys of an entry (``token``, ``bytes``, ``top_logprobs``) and of the object (``refusal``) are ignored.

    Args:
        payload: the object as a dict, or its JSON text as ``str`` or bytes.
        floor: the replacement for missing values; finite.
        request_id: when given and something was clamped, one warning naming it goes to the ``r3wire`` logger.

    Returns:
        ``ClampResult(values, num_clamped)``: a 1-d float64 array, one value per entry, and the count replaced.

    Raises:
        DecodeError: the payload is not such an object, or a logprob is neither a number nor ``null``.
        R3WireError: ``floor`` or ``request_id`` is invalid.
    """
    request_id = check_request_id(request_id)
    floor = check_floor(floor, np.dtype(np.float64))
    obj = load_object(payload, what='a logprobs object {"content": [{"logprob": ...}, ...]}')
    if KEY_CONTENT not in obj:
        raise DecodeError.make(KEY_CONTENT, 'present (an array of {"logprob": ...} entries)', "no such key", raw=True)
    content = obj[KEY_CONTENT]
    if not isinstance(content, (list, tuple)):
        raise DecodeError.make(KEY_CONTENT, "an array of entries", type(content).__name__, raw=True)
    numbers: Sequence[float | None] | None = _plain_logprobs(content)
    if numbers is None:
        numbers = _entry_logprobs(content)
    result = _clamp(np.array(numbers, dtype=np.float64), fresh=True, floor=floor)
    if result.num_clamped and request_id is not None:
        _warn_clamped(result.num_clamped, len(numbers), floor, request_id)
    return result


def _entry_logprobs(content: Sequence[Any]) -> list[float]:
    """Each entry's logprob by the one value rule, ``null`` entries and logprobs as NaN.

    Raises:
        DecodeError: an entry is not an object or ``null``, or its logprob is neither a number nor ``null``.
    """
    numbers: list[float] = []
    append = numbers.append
    for i, entry in enumerate(content):
        if entry is None:
            append(math.nan)
            continue
        if not is_mapping(entry):
            raise DecodeError.make(f"{KEY_CONTENT}[{i}]", 'an object {"logprob": ...} or null', entry)
        value = entry.get(KEY_LOGPROB)
        # The hot path: a call per entry nearly doubled this loop (1M parsed entries, 230 ms to 430 ms). A plain
        # float is read as itself and a null as NaN here, which is exactly what logprob_value returns for them
        # (float(x) is x for a float; None is its first case); every other value, int and NumPy scalar
        # included, goes through it, so the rule stays in one place.
        if type(value) is float:
            append(value)
        elif value is None:
            append(math.nan)
        else:
            append(logprob_value(value, KEY_CONTENT, i, _SUFFIX))
    return numbers
