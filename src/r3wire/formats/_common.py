"""Shared by every format module: the read result, options, base64 sizing, id checks and writer dtype rules.

Readers reuse the core's checks (:mod:`r3wire._validate`, :func:`r3wire._base64.b64decode_strict`,
:func:`r3wire._envelope.decode_data`) so every format fails the same way on the same kind of problem: sizes are
checked before anything is decoded or allocated, and every error is a :class:`DecodeError` naming the field.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._base64 import b64decode_strict, b64encode_text
from r3wire._envelope import to_wire_bytes
from r3wire._routecheck import first_index
from r3wire._validate import MAX_DIM, byte_text, check_element_count, check_int, load_json
from r3wire.bitpack import MAX_BITS
from r3wire.errors import DecodeError, EncodeError, R3WireError
from r3wire.schema import MAX_NUM_EXPERTS, WIRE_DTYPES

__all__ = [
    "MISSING_ROUTE",
    "ReadOptions",
    "ReadResult",
    "WriteOptions",
    "array_from_buffer",
    "b64_array",
    "b64_decoded_length",
    "byte_text",
    "check_ids",
    "choose_dtype",
    "decode_b64_array",
    "first_index",
    "int64_ids",
    "load_json",
    "mapping_get",
    "prepared_routes",
    "text_of",
]

ROUTES_NDIM: Final = 3

MISSING_ROUTE: Final = -1
"""The "no route" id: NeMo-RL writes it in every top-k slot of a (token, layer) with no recorded route; SGLang
writes it in any slot with no routed expert. :meth:`ReadResult.route_mask` is false there."""

ROWS_FROM_ZERO: Final = frozenset({"fireworks-r3v1", "fireworks-trace"})
"""Formats whose rows, when ``start`` is ``None``, are positions from 0 by definition: Fireworks r3/v1 ALL and
BITMAP (``total_token_count - 1`` rows, ``mask`` the replayed ones in BITMAP; row ``i`` is the matrix the payload
gives token ``i + 1``, the token that routing produced). They carry no start because none is needed; a SUFFIX
payload's ``start`` is ``replay_start_token - 1``. :meth:`r3wire.RouteTrace.add_result`
places such rows at 0, never from the end. A ``fireworks-matrices`` list is not one of them: Fireworks makes it
from token 0 or for the completion only, and it does not say which (``add_result`` takes it from token 0 only
when it has an entry for each forwarded token of the call, else needs ``start``)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ReadResult:
    """What :func:`r3wire.formats.read` and :func:`r3wire.formats.read_response` return.

    Attributes:
        routes: ``[rows, layers, top_k]``, writable, C-contiguous, native byte order, in the element type the
            payload carried (uint8, uint16, int8, int16, int32, ...; not converted). Signed formats may hold
            :data:`MISSING_ROUTE` (-1) where the engine recorded no expert: see :meth:`route_mask`.
        format: the format name the payload was read as (e.g. ``"vllm-npy"``).
        start: the sequence position of row 0 when the format carries one (prime-rl ``start``, Fireworks
            SUFFIX ``replay_start_token - 1``, its matrices being indexed by the token they produced); ``None``
            when it does not. Fireworks ALL and BITMAP payloads carry none because their rows are positions from
            0 by definition
            (:meth:`r3wire.RouteTrace.add_result` places them there). ``fireworks-matrices`` carries none either,
            and says nothing of where it starts: from token 0, or from the prompt's last token for a
            completion-only list (``add_result`` takes ``start=`` for it).
        mask: ``mask[i]`` is true when row ``i`` was replayed (Fireworks BITMAP, per-token matrices); rows where
            it is false hold zeros that were never on the wire. ``None`` when every row was sent.
        total_tokens: the sequence length the payload declares (Fireworks ``total_token_count``), if any.
        num_experts: the model's expert count when the payload records it (r3wire envelopes), else ``None``.
        bits: the bit width ids travelled in when the payload was bit-packed (r3wire envelopes), else ``None``.
        path: where :func:`~r3wire.formats.read_response` found the routes (``$.choices[1].routed_experts``);
            ``None`` from :func:`~r3wire.formats.read`.
        token_ids: the completion's token ids the response carries beside these routes (vLLM ``token_ids``,
            SGLang ``output_ids``) as int64, or ``None``.
        prompt_token_ids: the prompt's token ids the response carries beside these routes (vLLM completions
            choice ``prompt_token_ids``, vLLM chat response ``prompt_token_ids`` shared by its choices, SGLang
            ``/generate`` ``prompt_token_ids``) as 1-d int64, or ``None``. :meth:`call_token_ids` joins the two.
        logprobs: the sampled logprobs carried beside these routes (float64 from JSON numbers; an r3wire
            envelope's own float dtype), non-finite and missing values clamped to :data:`r3wire.LOGPROB_FLOOR`,
            or ``None``.
        num_clamped: how many of ``logprobs`` were clamped (0 when there are none).
        parts: ``path`` as its keys and indexes (``("choices", 1, "routed_experts")``), so a caller pairs the
            result with its choice without parsing the path (choices whose routes are ``null`` have no result);
            ``()`` from :func:`~r3wire.formats.read`.

    The readers build it; a caller may too (for an engine r3wire does not read), and every field is checked at
    construction, by type and shape only (no id is read), so a result that exists is one every method and
    :meth:`r3wire.RouteTrace.add_result` can take: NumPy integers given for the integer fields are stored as
    ``int``.

    Raises:
        R3WireError: (constructing one) a field of another type, shape or range than described above, named
            ``ReadResult.<field>``: ``routes`` not a 3-d integer NumPy array; ``mask`` not a bool ``[rows]`` array;
            ``token_ids`` / ``prompt_token_ids`` not 1-d integer arrays;
            ``logprobs`` not a 1-d float array, or not one per token id when ``token_ids`` is given too;
            ``start`` / ``total_tokens`` not integers in ``0 .. 2**63-1``,
            ``num_experts`` not in ``1 .. 2**31``, ``bits`` not in ``1 .. 31``, ``num_clamped`` not in
            ``0 .. len(logprobs)``; ``format`` not a str, ``path`` not None or a str, ``parts`` not a tuple.
    """

    routes: np.ndarray[Any, Any]
    format: str
    start: int | None = None
    mask: np.ndarray[Any, Any] | None = None
    total_tokens: int | None = None
    num_experts: int | None = None
    bits: int | None = None
    path: str | None = None
    token_ids: np.ndarray[Any, Any] | None = None
    prompt_token_ids: np.ndarray[Any, Any] | None = None
    logprobs: np.ndarray[Any, Any] | None = None
    num_clamped: int = 0
    parts: tuple[object, ...] = ()

    def __post_init__(self) -> None:
        # Type and shape checks only, a few attribute reads each: the readers build one per routes field (and
        # read_response a second through dataclasses.replace), so no value is read here.
        routes = _field_array(self.routes, "routes", "a 3-d integer NumPy array [rows, layers, top_k]")
        if routes.dtype.kind not in "iu" or routes.ndim != ROUTES_NDIM:
            raise _field_error("routes", "a 3-d integer NumPy array [rows, layers, top_k]", routes)
        if self.mask is not None:
            rows = routes.shape[0]
            expected = f"None or a bool NumPy array of shape [{rows}] (one per row of routes)"
            mask = _field_array(self.mask, "mask", expected)
            if mask.dtype != np.bool_ or mask.shape != (rows,):
                raise _field_error("mask", expected, mask)
        for name in ("token_ids", "prompt_token_ids"):
            _check_token_array(getattr(self, name), name)
        if self.logprobs is not None:
            logprobs = _field_array(self.logprobs, "logprobs", "None or a 1-d float NumPy array")
            if logprobs.dtype.kind != "f" or logprobs.ndim != 1:
                raise _field_error("logprobs", "None or a 1-d float NumPy array", logprobs)
            if self.token_ids is not None and logprobs.shape[0] != self.token_ids.shape[0]:
                # One sampled logprob per token id, as read_response guarantees: trainer-batch.md's
                # offsets = n - logprobs.size would otherwise put every logprob on the wrong token.
                count = int(self.token_ids.shape[0])
                raise R3WireError.make(
                    "ReadResult.logprobs",
                    f"one logprob per token id ({count} in ReadResult.token_ids)",
                    f"{int(logprobs.shape[0])} logprobs",
                    raw=True,
                )
        _set_int(self, "start", 0, MAX_DIM)
        _set_int(self, "total_tokens", 0, MAX_DIM)
        _set_int(self, "bits", 1, MAX_BITS)
        _set_int(self, "num_experts", 1, MAX_NUM_EXPERTS)
        if self.num_clamped is None:
            raise R3WireError.make("ReadResult.num_clamped", "an integer (0 without logprobs)", None)
        _set_int(self, "num_clamped", 0, 0 if self.logprobs is None else self.logprobs.shape[0])
        if not isinstance(self.format, str):
            raise R3WireError.make("ReadResult.format", "a format name (str)", self.format)
        if self.path is not None and not isinstance(self.path, str):
            raise R3WireError.make("ReadResult.path", "None or a JSONPath (str)", self.path)
        if not isinstance(self.parts, tuple):
            raise R3WireError.make("ReadResult.parts", "a tuple of keys and indexes", self.parts)

    def call_token_ids(self) -> np.ndarray[Any, Any]:
        """The engine call's whole token sequence, ``prompt_token_ids`` then ``token_ids``, as a new 1-d int64
        array: what :meth:`r3wire.RouteTrace.add` takes as ``token_ids`` for these routes, whose rows end at the
        call's last forwarded token.

        Raises:
            R3WireError: the response carried no prompt token ids, or no completion token ids, beside the routes
                (field ``prompt_token_ids`` or ``token_ids``; ask the engine for them, or join the caller's own
                prompt ids with ``token_ids``), or a hand-built uint64 array holds an id past int64.
        """
        where = f" beside the routes at {self.path}" if self.path is not None else ""
        if self.prompt_token_ids is None:
            raise R3WireError.make(
                "prompt_token_ids",
                f"the prompt's token ids{where} (vLLM: request return_token_ids=true; SGLang /generate: "
                "return_prompt_token_ids=true; other bodies, such as rLLM's prompt_ids, which r3wire does not read: "
                "prepend the caller's prompt ids to token_ids)",
                "a response without them",
                raw=True,
            )
        if self.token_ids is None:
            raise R3WireError.make(
                "token_ids",
                f"the completion's token ids{where} (vLLM: request return_token_ids=true; SGLang: output_ids; "
                "other bodies, such as NeMo-RL's message generation_token_ids or rLLM's completion_ids, which r3wire "
                "does not read: join the call's own ids)",
                "a response without them",
                raw=True,
            )
        prompt = int64_ids(self.prompt_token_ids, "ReadResult.prompt_token_ids")
        completion = int64_ids(self.token_ids, "ReadResult.token_ids")
        call: np.ndarray[Any, Any] = np.concatenate((prompt, completion))
        return call

    def route_mask(self) -> np.ndarray[Any, Any]:
        """A bool ``[rows, layers, top_k]`` array, true where ``routes`` holds a replayable expert id: false in
        rows ``mask`` marks as not replayed and wherever the id is :data:`MISSING_ROUTE` (-1).

        Raises:
            R3WireError: never for a constructed result: a ``mask`` that does not fit ``routes`` is refused by
                the constructor (``ReadResult.mask``).
        """
        present: np.ndarray[Any, Any]
        if self.routes.dtype.kind == "i":
            present = self.routes != MISSING_ROUTE
        else:
            present = np.ones(self.routes.shape, dtype=bool)
        if self.mask is not None:
            present &= self.mask[:, None, None]
        return present


def _field_error(name: str, expected: str, value: object) -> R3WireError:
    if isinstance(value, np.ndarray):
        got = f"a NumPy {value.dtype} array of shape {list(value.shape)}"
    else:
        got = type(value).__name__
    return R3WireError.make(f"ReadResult.{name}", expected, got, raw=True)


def _field_array(value: object, name: str, expected: str) -> np.ndarray[Any, Any]:
    """``value`` if it is a NumPy array without a mask (a masked array's hidden values would be read as ids)."""
    if not isinstance(value, np.ndarray) or isinstance(value, np.ma.MaskedArray):
        raise _field_error(name, expected, value)
    return value


_INT64_MAX: Final = (1 << 63) - 1


def _check_token_array(value: object, name: str) -> None:
    if value is None:
        return
    expected = "None or a 1-d integer NumPy array of token ids"
    tokens = _field_array(value, name, expected)
    if tokens.dtype.kind not in "iu" or tokens.ndim != 1:
        raise _field_error(name, expected, tokens)


def int64_ids(ids: np.ndarray[Any, Any], field: str) -> np.ndarray[Any, Any]:
    """A ``ReadResult``'s integer token ids as int64, unchanged in value (no copy when they are int64 already).

    Only a hand-built uint64 array can hold an id int64 does not (the readers give int64): it is refused, never
    wrapped, and only here, where the ids are read (the constructor reads no value).

    Raises:
        R3WireError: an id past ``2**63 - 1``, its position named.
    """
    # Kind and size, not dtype identity: a big-endian '>u8' array is no np.uint64 and would wrap to negative ids.
    if ids.dtype.kind == "u" and ids.dtype.itemsize == 8 and ids.size and int(ids.max()) > _INT64_MAX:
        position = int(np.argmax(ids > _INT64_MAX))
        raise R3WireError.make(f"{field}[{position}]", f"a token id <= {_INT64_MAX}", int(ids[position]))
    converted: np.ndarray[Any, Any] = ids.astype(np.int64, copy=False)
    return converted


def _set_int(result: ReadResult, name: str, minimum: int, maximum: int) -> None:
    """Check the optional integer field ``name``; a NumPy integer is stored as the ``int`` it holds."""
    value = getattr(result, name)
    if value is None or (type(value) is int and minimum <= value <= maximum):
        return
    number = check_int(value, f"ReadResult.{name}", minimum=minimum, maximum=maximum, error=R3WireError)
    object.__setattr__(result, name, number)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadOptions:
    """What the caller knows beyond the payload, checked once by :func:`r3wire.formats.read`."""

    num_layers: int | None = None
    top_k: int | None = None
    dtype: str | None = None
    num_experts: int | None = None
    max_elements: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOptions:
    """What :func:`r3wire.formats.write` passes to a writer besides the routes."""

    start: int | None = None
    mask: np.ndarray[Any, Any] | None = None
    total_tokens: int | None = None
    dtype: str | None = None
    num_experts: int | None = None
    pack_bits: bool = False


def text_of(payload: object, field: str) -> str | bytes | bytearray | memoryview:
    """``payload`` if it is text (``str`` or bytes-like, as :func:`byte_text` gives it), else a
    :class:`DecodeError`.

    Raises:
        DecodeError: not text, or a memoryview :func:`byte_text` refuses.
    """
    if isinstance(payload, (str, bytes, bytearray, memoryview)):
        return byte_text(payload, field)
    raise DecodeError.make(field, "a base64 string", type(payload).__name__, raw=True)


def b64_decoded_length(text: str | bytes | bytearray | memoryview, field: str) -> int:
    """The number of bytes padded base64 ``text`` decodes to, from its length and padding alone.

    Raises:
        DecodeError: the length is not a multiple of 4.
    """
    size = len(text)
    if size % 4:
        raise DecodeError.make(field, "padded base64 (a multiple of 4 characters)", f"{size} characters", raw=True)
    if size == 0:
        return 0
    tail = text[-2:]
    tail_bytes = tail.encode("ascii", "replace") if isinstance(tail, str) else bytes(tail)
    return size // 4 * 3 - tail_bytes.count(b"=")


def decode_b64_array(
    text: str | bytes | bytearray | memoryview,
    dtype: str,
    shape: Sequence[int],
    *,
    field: str,
    max_elements: int | None,
) -> np.ndarray[Any, Any]:
    """Decode strict base64 holding a little-endian ``dtype`` array of ``shape``; size checked first.

    Raises:
        DecodeError: the element count breaks ``max_elements``, or the text is not the canonical base64 of
            exactly ``prod(shape)`` elements.
    """
    shape = tuple(shape)
    wire_dtype = WIRE_DTYPES[dtype]
    count = check_element_count(shape, max_elements)
    buffer = b64decode_strict(text, count * wire_dtype.itemsize, field=field)
    return array_from_buffer(buffer, wire_dtype, shape)


def array_from_buffer(
    buffer: bytes | bytearray | memoryview, dtype: np.dtype[Any], shape: Sequence[int], *, offset: int = 0
) -> np.ndarray[Any, Any]:
    """View ``buffer[offset:]`` as ``dtype`` (any byte order) and return it writable, aligned, C-contiguous and
    in native byte order, copying only when one of those does not already hold.

    The caller has checked that the buffer holds exactly ``prod(shape)`` elements after ``offset``.
    """
    array: np.ndarray[Any, Any] = np.frombuffer(buffer, dtype=dtype, offset=offset)
    if not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))
    elif not (array.flags.writeable and array.flags.aligned):
        # The stdlib base64 back end returns immutable bytes; pybase64 decodes into a bytearray, no copy.
        array = array.copy()
    return array.reshape(tuple(shape))


def check_ids(
    routes: np.ndarray[Any, Any],
    field: str,
    *,
    num_experts: int | None,
    missing_sentinel: bool = False,
    missing_slots: bool = False,
    error: type[R3WireError] = DecodeError,
    first_row: int = 0,
) -> None:
    """Check that ids are non-negative (and below ``num_experts`` when given).

    With ``missing_sentinel``, a top-k row that is entirely -1 is a missing route and allowed; a row that is
    only partly negative is corruption. With ``missing_slots`` (SGLang), any single slot may be -1; any other
    negative value is corruption. ``first_row`` is the row ``routes[0]`` has in what ``field`` names (rows
    read past ones the caller dropped): the index named counts from it.

    Raises:
        DecodeError: (or ``error``) naming the first offending index.
    """
    if routes.size == 0:
        return
    # At most one min and one max pass; the masks that locate a bad id are built only when there is one.
    if routes.dtype.kind == "i" and int(routes.min()) < 0:
        negative = routes < 0
        if missing_slots:
            bad_slots = routes < MISSING_ROUTE
            if bad_slots.any():
                where = first_index(bad_slots)
                raise error.make(
                    _named(field, where, first_row),
                    "a non-negative expert id, or -1 (no routed expert)",
                    int(routes[tuple(where)]),
                )
        elif missing_sentinel:
            missing = (routes == MISSING_ROUTE).all(axis=-1, keepdims=True)
            bad = negative & ~missing
            if bad.any():
                where = first_index(bad)
                raise error.make(
                    _named(field, where, first_row),
                    "a non-negative expert id, or -1 in every top-k slot of the row (missing route)",
                    int(routes[tuple(where)]),
                )
        else:
            where = first_index(negative)
            raise error.make(_named(field, where, first_row), "a non-negative expert id", int(routes[tuple(where)]))
    if num_experts is not None:
        high = int(routes.max())
        if high >= num_experts:
            where = first_index(routes >= num_experts)
            got = int(routes[tuple(where)])  # the id at the position named, not the largest
            raise error.make(_named(field, where, first_row), f"an expert id below num_experts={num_experts}", got)


def _named(field: str, where: list[int], first_row: int) -> str:
    """``field`` indexed at ``where``, its row counted from ``first_row``."""
    return f"{field}{[where[0] + first_row, *where[1:]]}"


def prepared_routes(
    routes: object,
    *,
    num_experts: int | None,
    missing_sentinel: bool = False,
    missing_slots: bool = False,
) -> tuple[np.ndarray[Any, Any], int, int]:
    """``routes`` as a checked 3-d integer NumPy array, with its smallest and largest id (0, 0 when empty).

    With ``missing_sentinel`` (``missing_slots``) the smallest id is -1 when there are missing-route rows
    (slots).

    Raises:
        EncodeError: not a 3-d integer array, a negative id, or an id at or above ``num_experts``.
    """
    arr = as_numpy(routes, field="routes")
    if arr.dtype.kind not in "iu":
        raise EncodeError.make("routes.dtype", "an integer dtype", str(arr.dtype), raw=True)
    if arr.ndim != ROUTES_NDIM:
        raise EncodeError.make("routes", "a 3-d array [rows, layers, top_k]", f"shape {list(arr.shape)}", raw=True)
    if arr.size == 0:
        return arr, 0, 0
    low, high = int(arr.min()), int(arr.max())
    if low < 0 or (num_experts is not None and high >= num_experts):
        # Raises, naming the first bad id, unless every negative is a missing-route row.
        check_ids(
            arr,
            "routes",
            num_experts=num_experts,
            missing_sentinel=missing_sentinel,
            missing_slots=missing_slots,
            error=EncodeError,
        )
    return arr, low, high


def choose_dtype(
    low: int,
    high: int,
    *,
    requested: str | None,
    allowed: Collection[str],
    ladder: Sequence[str],
    format_name: str,
) -> str:
    """The wire dtype of a writer: ``requested`` if given (it must be allowed and hold every id), else the first
    dtype of ``ladder`` that holds ``low .. high``.

    Raises:
        EncodeError: the requested dtype is not allowed or too narrow, or no dtype of the ladder fits.
    """
    if requested is not None:
        if requested not in allowed:
            raise EncodeError.make("dtype", f"one of {list(allowed)} ({format_name})", requested)
        info = np.iinfo(WIRE_DTYPES[requested])
        if low < info.min or high > info.max:
            raise EncodeError.make(
                "dtype", f"a dtype holding ids {low}..{high} ({requested} holds {info.min}..{info.max})", requested
            )
        return requested
    for name in ladder:
        info = np.iinfo(WIRE_DTYPES[name])
        if info.min <= low and high <= info.max:
            return name
    raise EncodeError.make("routes", f"ids that fit one of {list(ladder)} ({format_name})", f"{low}..{high}", raw=True)


def b64_array(arr: np.ndarray[Any, Any], dtype: str) -> str:
    """The padded standard base64 of ``arr`` as little-endian ``dtype``, in C order."""
    wire = to_wire_bytes(arr, dtype)
    return b64encode_text(wire.reshape(-1).view(np.uint8).data)


def mapping_get(obj: Mapping[str, Any], key: str) -> Any:
    """``obj[key]``, or a :class:`DecodeError` saying the key is missing."""
    if key not in obj:
        raise DecodeError.make(key, "present", "no such key", raw=True)
    return obj[key]
