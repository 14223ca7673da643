"""Whole responses as JSON: arrays anywhere in a document travel as r3wire envelopes and come back as arrays.

:func:`dumps` is ``orjson.dumps`` for documents that hold NumPy arrays or torch tensors; :func:`iter_dumps` yields
the same bytes in chunks; :func:`loads` is ``orjson.loads`` that turns every ``r3wire.routes`` / ``r3wire.array`` /
``r3wire.logprobs`` envelope back into an array. The text is plain JSON: any client can parse it with any JSON
parser and decode the envelopes itself, or ignore them.

Why the blobs bypass the JSON library (measured, see ``docs/performance.md``): a response is almost all base64,
and a JSON writer or parser inspects every byte of a string for escapes and builds a Python ``str`` of it, which
cost more than base64 itself. The writer serializes the document around short placeholders, then streams each
array in cache-sized pieces (check the ids, narrow them to the wire dtype, base64-encode) in place of its
placeholder, so no array-sized temporary exists; :func:`loads` cuts the blobs out of the raw bytes, parses the
rest, and decodes each blob straight from the input buffer. Neither ever holds the base64 text as a ``str``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import io
import itertools
import json
import logging
import math
import operator
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Final

import numpy as np
import orjson

from r3wire._arraylike import as_numpy, is_tensor
from r3wire._base64 import b64encode_bytes, encoded_length
from r3wire._bytesearch import find_byte
from r3wire._envelope import build_envelope
from r3wire._jsonpath import json_path as _path
from r3wire._jsontext import digit_limit, parse_json
from r3wire._routecheck import check_chunk, optional_num_experts, prepare_routes, same_bytes, wire_ids
from r3wire._utf8 import NotUtf8, first_leaf, first_not_utf8
from r3wire._validate import as_text, member, optional_max_elements, plain_str, str_collection
from r3wire._walk import EXIT, Guard, copy_list, holds_any
from r3wire.arrays import array_wire, decode_array
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError, describe
from r3wire.logprobs import (
    LOGPROB_FLOOR,
    _show_non_finite,
    as_float_array,
    clamp_logprobs,
    decode_logprobs,
    logprobs_wire,
)
from r3wire.routes import decode_routes, routes_wire
from r3wire.schema import (
    ARRAY_SCHEMA,
    KEY_BITS,
    KEY_DATA,
    KEY_DTYPE,
    KEY_NUM_EXPERTS,
    KEY_SCHEMA,
    KEY_SHAPE,
    KEY_VERSION,
    LOGPROBS_SCHEMA,
    ROUTES_SCHEMA,
    WIRE_DTYPES,
    dtype_for_max_id,
)

__all__ = ["LOGPROBS_KEYS", "ROUTES_KEYS", "dumps", "iter_dumps", "loads"]

ROUTES_KEYS: Final[tuple[str, ...]] = ("routed_experts",)
"""The object keys whose array values :func:`dumps` writes as ``r3wire.routes`` (vLLM's and SGLang's name)."""

LOGPROBS_KEYS: Final[tuple[str, ...]] = ("logprobs",)
"""The object keys whose array values :func:`dumps` writes as ``r3wire.logprobs`` (every value finite)."""

# The clamp report of dumps(clamp_logprobs=True) goes where clamp_logprobs and encode_logprobs report theirs.
_logprobs_logger: Final = logging.getLogger("r3wire.logprobs")

# Below these sizes a blob goes through orjson as an ordinary string, because the splice's fixed cost (a nonce,
# a search, a join) exceeds what it saves. Measured crossovers: dumps between 64 KiB (orjson 1 µs faster) and
# 256 KiB of array bytes (splice 2 µs faster; at 4 MiB it is 0.3 ms against 3.8 ms); loads at ~3 KiB of base64
# (at 64 KiB of array bytes: 18 µs against 78 µs).
_SPLICE_MIN_BYTES: Final = 128 * 1024
_CUT_MIN_CHARS: Final = 4096
# Source bytes per streamed piece. Each piece holds a multiple of 3 elements, so every piece but the last is
# whole base64 quanta (the pieces concatenate to the base64 of the whole array). 768 KiB is 192 Ki int32 ids and
# at most 1 MiB of base64: the source is read from memory once (by the bounds check) and the narrowing and base64
# run on it while it is still in cache. Measured on W1 and K2 (2-core EPYC, 1 MiB L2): 96..384 KiB pieces were
# 5-20% slower (per-piece Python overhead), 1.5 MiB about the same.
_CHUNK_BYTES: Final = 3 * 256 * 1024

# The only way the raw bytes of a JSON document can contain this sequence, with its first quote not escaped,
# is as an object key "data" followed by the opening quote of its string value (see _cut_blobs).
_DATA_KEY: Final = b'"data":"'
_BACKSLASH: Final = 0x5C

_SCHEMAS: Final = frozenset({ROUTES_SCHEMA.name, ARRAY_SCHEMA.name, LOGPROBS_SCHEMA.name})
# Every flag this orjson knows: dumps passes its option on, so it must be made of these.
_ORJSON_OPTIONS: Final[int] = functools.reduce(
    operator.or_, (getattr(orjson, name) for name in dir(orjson) if name.startswith("OPT_")), 0
)
# Every member name an envelope may have: duplicates of these are counted in the raw text (see _Duplicates).
_ENVELOPE_KEYS: Final = frozenset({KEY_DATA, KEY_SHAPE, KEY_DTYPE, KEY_SCHEMA, KEY_VERSION, KEY_NUM_EXPERTS, KEY_BITS})


class _PathError(Exception):
    """An EncodeError raised at ``parts`` (the keys and indexes from the root) of the document."""

    def __init__(self, error: R3WireError, prefix: str | None, parts: Sequence[object]) -> None:
        super().__init__(str(error))
        self.error = error
        self.prefix = prefix  # the field name the encoder used for the value itself ("routes", "array")
        self.parts = list(parts)


def _relocate(error: R3WireError, path: str, prefix: str | None = None) -> R3WireError:
    """``error`` again, with its field (and the start of its message) placed under ``path``.

    The encoders and decoders name fields relative to the value they were given (``routes[0, 1, 2]``,
    ``shape``); in a whole document the caller needs to know which value that was.
    """
    field = error.field
    if field is None:
        located = path
    elif prefix is not None and field.startswith(prefix):
        located = path + field[len(prefix) :]
    else:
        located = f"{path}.{field}"
    message = str(error)
    lead = field if field is not None else "payload"
    message = located + message[len(lead) :] if message.startswith(lead) else f"{located}: {message}"
    if isinstance(error, UnsupportedVersionError):
        moved: R3WireError = UnsupportedVersionError(
            message, field=located, version=error.version, supported=error.supported
        )
    else:
        moved = type(error)(message, field=located, expected=error.expected, got=error.got)
    return moved


# Lists longer than this are first sorted out by the types they hold, in C: token ids and other flat lists of
# numbers or strings then cost ~30 ns an item instead of ~80 ns for the Python loop.
_LONG_LIST: Final = 16
_INERT_TYPES: Final = frozenset({str, int, bool, type(None)})
# Longer lists are first written by orjson, in pieces of _PROBE_STEP items (a piece's text stays well below a
# body, and a value the walk must see sends only its own piece through the walk): see _Writer._as_is.
_MAX_KEYS: Final = 1024  # routes_keys / logprobs_keys: read no further than this
_PROBE_MIN: Final = 64
_PROBE_STEP: Final = 512
_PROBE_SLACK: Final = 1 << 20
_NUMBER_TYPES: Final = frozenset({int, float, bool})


class _TupleList(list[Any]):
    """A tuple of a parsed document, copied as a list so that envelopes in it are decoded in place; made a tuple
    again afterwards (JSON has no tuples, but a document built in Python may)."""

    __slots__ = ("origin",)

    def __init__(self, origin: tuple[Any, ...]) -> None:
        # A subclass by its storage: list(origin) would be sized by its __len__, which may lie.
        super().__init__(origin if type(origin) is tuple else tuple.__iter__(origin))
        self.origin = origin

    def rebuilt(self) -> tuple[Any, ...]:
        """The tuple again: the caller's own when nothing in it changed, a namedtuple of its class when it is one
        (another tuple subclass, whose constructor cannot be known, comes back as a tuple)."""
        origin = self.origin
        if len(self) == tuple.__len__(origin) and all(a is b for a, b in zip(self, origin, strict=True)):
            return origin
        cls = type(origin)
        make = getattr(cls, "_make", None) if cls is not tuple else None
        if callable(make):
            try:
                made = make(self)
            except (TypeError, ValueError):
                made = None
            if isinstance(made, cls):
                return made
        return tuple(self)


_CONTAINER_TYPES: Final = frozenset({dict, list, _TupleList})
_COPIED: Final = (dict, list, tuple)  # what _copy_decoded copies, subclasses included


def _dataclass_members(value: Any) -> dict[str, Any] | None:
    """The members orjson writes for a dataclass instance, or None where orjson itself would refuse it.

    orjson's rule (ijl/orjson, ``src/serialize/per_type/dataclass.rs``, read at commit 27edea92): the instance's
    ``__dict__`` items, unless its class defines ``__slots__`` or it has no ``__dict__``; then its fields
    (``dataclasses.fields``: no ClassVar or InitVar) read with ``getattr``. Either way a name starting with
    ``_`` is skipped. Read directly, not by serializing the instance: nested dataclasses made that quadratic.
    """
    state = getattr(value, "__dict__", None)
    if isinstance(state, dict) and "__slots__" not in type(value).__dict__:
        if not all(type(name) is str and name for name in state):
            return None
        return {name: item for name, item in state.items() if not name.startswith("_")}
    members: dict[str, Any] = {}
    for field in dataclasses.fields(value):
        if field.name.startswith("_"):
            continue
        try:
            members[field.name] = getattr(value, field.name)
        except Exception:  # an unset slot or a failing descriptor: orjson's to report
            return None
    return members


_ENUM_DEPTH: Final = 16


def _json_name(value: object) -> str | None:
    """The string orjson writes for ``value`` when it writes one (a str, a str subclass, an enum of either), or None."""
    for _ in range(_ENUM_DEPTH):  # bounded: an enum's value may be (or return) an enum again
        if not isinstance(value, enum.Enum) or isinstance(value, str):
            break
        value = value.value
    plain = plain_str(value)
    return plain if isinstance(plain, str) else None


def _null(value: object) -> None:
    """orjson's ``default`` in a probe: a value it cannot write is written as ``null``, which fails the probe."""


class _Probes:
    """orjson writing pieces of long lists before the walk would (see _Writer._as_is and _Reader._unseen), within
    a budget: the text of pieces that then had to be walked anyway is at most 1 MiB more than the text of pieces
    that spared a walk. A nested long list is written again at each level that holds it, so without the budget a
    deep chain of them cost depth times size; with it, a document that defeats the probes soon stops paying
    for them and is walked as it would have been."""

    __slots__ = ("option", "saved", "spent")

    def __init__(self, option: int) -> None:
        self.option = option
        self.saved = 0
        self.spent = 0

    def text(self, piece: Sequence[Any]) -> bytes | None:
        """``piece`` as orjson writes it (anything it cannot write as ``null``), or None: over budget, or refused
        (a string that is not UTF-8, an integer beyond 64 bits, a non-string key...; the walk reports it)."""
        if self.spent > _PROBE_SLACK + self.saved:
            return None
        try:
            return orjson.dumps(piece, default=_null, option=self.option)
        except Exception:  # whatever orjson or a caller's object raises: the walk meets it and reports it
            self.spent = _PROBE_SLACK + self.saved + 1  # how much was written before is unknown: stop probing
            return None

    def settled(self, text: bytes, walked: bool) -> None:
        """Count a written piece: walked anyway, or spared its walk."""
        if walked:
            self.spent += len(text)
        else:
            self.saved += len(text)


def _inert(items: Sequence[Any]) -> bool:
    """True if ``items`` holds nothing :func:`dumps` must look at: no array, container or non-finite float."""
    if len(items) < _LONG_LIST:
        return False
    try:
        kinds = set(map(type, items))
    except TypeError:  # an unhashable class (see r3wire._typeset): the per-item path refuses it
        return False
    if kinds <= _INERT_TYPES:
        return True
    if kinds <= _NUMBER_TYPES:
        # Only Python numbers, so sum runs in C with no foreign __add__; a NaN or infinity makes the total
        # non-finite. An overflowing total of finite values only sends the list through the per-item check.
        try:
            return math.isfinite(sum(items, 0.0))
        except OverflowError:
            return False
    return False


def _nonce() -> str:
    """A placeholder prefix no document can contain by chance or design: 64 random bits per call."""
    return f"r3wire-blob:{os.urandom(8).hex()}:"


# What the key above an array makes of it.
_PLAIN: Final = 0
_ROUTES: Final = 1
_LOGPROBS: Final = 2
_PREFIXES: Final = {_PLAIN: "array", _ROUTES: "routes", _LOGPROBS: "logprobs"}


# What iter_dumps checks again in each piece of an array it reads from the caller's memory while streaming.
_NO_RECHECK: Final = 0
_RECHECK_IDS: Final = 1  # routes whose wire dtype was chosen from their ids at the call: still fit, still need it
_RECHECK_FINITE: Final = 2  # logprobs: still finite


@dataclasses.dataclass(frozen=True, slots=True)
class _Blob:
    """An array the writer streams in place of its placeholder: flat source ids, checked and narrowed per piece."""

    flat: np.ndarray[Any, Any]  # 1-d, C-contiguous, in the caller's dtype
    wire: np.dtype[Any]  # the little-endian wire dtype
    convert: bool  # False when the source bytes already are the wire bytes
    bound: int | None  # ids still to be checked below this bound, piece by piece (routes with num_experts)
    shape: tuple[int, ...]  # the array's shape, to name an offending id
    parts: tuple[object, ...]  # where the array is in the document
    # Set when ``flat`` is the caller's memory, checked at the call: what a lazy stream checks again (see chunks).
    recheck: int = _NO_RECHECK

    @property
    def text_length(self) -> int:
        return encoded_length(self.flat.size * self.wire.itemsize)

    def chunks(self, lazy: bool = False) -> Iterator[bytes]:
        """The base64 of the wire bytes, in pieces that concatenate to the base64 of the whole.

        ``lazy``: the caller's code may have run since the array was checked (iter_dumps), so the rules checked
        at the call are checked again on each piece as it is encoded: a changed value is sent only if it still
        obeys them (routes ids that fit the chosen dtype and still need it, finite logprobs).

        Raises:
            EncodeError: an id is out of bounds (when ``bound`` is set, or ``lazy``), or (``lazy``) a logprob is no
                longer finite or the routes no longer need their dtype; the field is the JSONPath.
        """
        flat = self.flat
        step = _CHUNK_BYTES // max(flat.itemsize, self.wire.itemsize) // 3 * 3
        scratch = np.empty(min(step, flat.size), self.wire) if self.convert else None
        recheck = self.recheck if lazy else _NO_RECHECK
        bound, expected = self.bound, None
        if recheck == _RECHECK_IDS:
            # The wire dtype's own limit (256, 2**15, 2**31): an id at or above it would be wrapped by the narrowing.
            bound = int(np.iinfo(self.wire).max) + 1
            expected = (
                f"an expert id below {bound} (the {self.wire.name} chosen from the ids when iter_dumps was called; "
                "the array changed before it was streamed)"
            )
        high = 0
        for start in range(0, flat.size, step):
            piece = flat[start : start + step]
            if bound is not None:
                try:
                    high = max(high, check_chunk(piece, start, self.shape, bound, expected))
                except EncodeError as exc:
                    raise _relocate(exc, _path(self.parts), "routes") from None
            elif recheck == _RECHECK_FINITE:
                self._check_finite(piece, start)
            if recheck == _RECHECK_IDS and start + step >= flat.size:
                self._check_needed(high)  # before the last piece: a receiver would refuse the body
            if scratch is not None:
                narrowed = scratch[: piece.size]
                np.copyto(narrowed, piece, casting="unsafe")  # in range: checked above or by prepare_routes
                piece = narrowed
            yield b64encode_bytes(piece.view(np.uint8).data)

    def _check_finite(self, piece: np.ndarray[Any, Any], start: int) -> None:
        # One sum is a fast test (NaN and infinities propagate); only a sum that is not finite, which an overflow
        # of finite values can also give, is searched for the value to name.
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(piece.sum())
        if math.isfinite(total):
            return
        finite = np.isfinite(piece)
        if finite.all():
            return
        at = start + int(np.argmin(finite))
        where = [int(i) for i in np.unravel_index(at, self.shape)]
        shown = _show_non_finite(self.flat, [at], float(self.flat[at]))
        raise EncodeError.make(
            f"{_path(self.parts)}{where}",
            "a finite logprob (the value changed after iter_dumps was called, before it was streamed)",
            shown,
            raw=True,
        )

    def _check_needed(self, high: int) -> None:
        needed = dtype_for_max_id(high)
        if needed != self.wire.name:
            raise EncodeError.make(
                _path(self.parts),
                f"ids that need the {self.wire.name} chosen when iter_dumps was called (the array changed before "
                "it was streamed; a receiver refuses a wider dtype than the ids need)",
                f"largest id {high}, which is {needed}",
                raw=True,
            )


@dataclasses.dataclass(frozen=True, slots=True)
class _Clamped:
    """One logprobs array dumps clamped: where, how many values were replaced, out of how many."""

    path: str
    num_clamped: int
    total: int


class _Writer:
    """Replaces arrays in a document by envelopes, copying only the containers on the way to one."""

    __slots__ = (
        "blobs",
        "clamp",
        "clamped",
        "logprobs_keys",
        "non_str_keys",
        "nonce",
        "num_experts",
        "option",
        "pack_bits",
        "path",
        "probes",
        "routes_keys",
        "splice",
    )

    def __init__(
        self,
        *,
        num_experts: int | None,
        pack_bits: bool,
        routes_keys: frozenset[object],
        logprobs_keys: frozenset[object],
        clamp: bool,
        splice: bool,
        option: int | None = None,
    ) -> None:
        self.num_experts = num_experts
        self.pack_bits = pack_bits
        self.routes_keys = routes_keys
        self.logprobs_keys = logprobs_keys
        self.clamp = clamp
        self.splice = splice
        self.option = option or 0
        # The options that decide what orjson refuses or how it writes a value's text, for _as_is; with
        # OPT_SERIALIZE_NUMPY it would write the arrays and scalars the walk must see.
        # Dataclasses go to the default too: the walk writes one as the dict of its members, which OPT_SORT_KEYS
        # then sorts where orjson would not.
        self.probes = _Probes(
            (self.option | orjson.OPT_PASSTHROUGH_DATACLASS)
            & ~(orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)
        )
        self.non_str_keys = bool(self.option & orjson.OPT_NON_STR_KEYS)  # checked per dict: a bool, not a mask
        # A placeholder must not occur anywhere else in the output; a random nonce per call makes that
        # impossible to arrange, and _segments checks it anyway. Made with the first blob: small documents have none.
        self.nonce = ""
        self.blobs: list[_Blob] = []
        self.clamped: list[_Clamped] = []
        self.path: list[object] = []  # the keys and indexes down to the value being written

    def _fail(self, error: R3WireError, prefix: str | None = None) -> _PathError:
        return _PathError(error, prefix, self.path)

    def value(self, value: Any, kind: int) -> Any:
        cls = type(value)
        if cls is str or cls is int or cls is bool or value is None:
            return value
        if cls is float:
            return self._float(value)
        if cls is dict:
            return self._dict(value)
        if cls is list or cls is tuple:
            return self._logprob_list(value) if kind == _LOGPROBS and self.clamp else self._list(value)
        if isinstance(value, np.ndarray) or is_tensor(value):
            return self._array(value, kind)
        if isinstance(value, np.generic):
            return self._scalar(value)
        if isinstance(value, float):
            return self._float(value)
        if isinstance(value, dict):
            if self.option & orjson.OPT_PASSTHROUGH_SUBCLASS:
                raise self._subclass(value)
            return self._dict(value)
        if isinstance(value, (list, tuple)):
            if isinstance(value, list) and self.option & orjson.OPT_PASSTHROUGH_SUBCLASS:
                raise self._subclass(value)
            # A subclass is walked as the items orjson writes (its storage), never sized by its __len__. A list
            # subclass nothing in which changed is left to orjson; a tuple subclass (a namedtuple), which orjson
            # refuses, is written as a list, as a tuple is, whatever it holds.
            items = copy_list(value)
            out = self._logprob_list(items) if kind == _LOGPROBS and self.clamp else self._list(items)
            return value if out is items and isinstance(value, list) else out
        if isinstance(value, (str, int)):
            return value  # orjson writes a str or int subclass (an IntEnum, a dataclass on int) as the str or int
        if isinstance(value, enum.Enum):
            return self.value(value.value, kind)  # orjson writes a member as its value: check that value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self._dataclass(value)
        return value  # datetimes, UUIDs...: orjson's rules apply

    def _logprob_list(self, items: Sequence[Any]) -> Sequence[Any]:
        """A flat list of logprobs under a logprobs key, with ``clamp_logprobs``: clamped as an array would be
        (non-finite and ``None`` to the floor, reported), and written as a list. Anything else is a plain list."""
        try:
            result = clamp_logprobs(items)  # a sequence's values are read by the one logprob value rule
        except R3WireError:  # not logprobs by that rule (a string, a container, a bool...): a plain list
            return self._list(items)
        if not result.num_clamped:
            return self._list(items)
        self.clamped.append(_Clamped(_path(self.path, exact=True), result.num_clamped, len(items)))
        clamped: list[float] = result.values.tolist()
        return clamped

    def _float(self, value: float) -> float:
        if not math.isfinite(value):
            # orjson would write null and the value would be lost without a word.
            raise self._fail(EncodeError.make(None, "a finite number (JSON has no NaN or infinity)", value))
        return value

    def _scalar(self, value: np.generic) -> Any:
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.timedelta64):
            # An np.signedinteger: int() of it raised TypeError (seconds, NaT) or dropped the unit (ns).
            raise self._not_json(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating) and value.dtype.itemsize <= 8:  # float16/32/64 are exact as doubles
            return self._float(float(value))
        if isinstance(value, np.str_):
            return str(value)
        # np.datetime64 is refused even with OPT_SERIALIZE_NUMPY: orjson writes NaT as "1970-01-01T00:00:00" and
        # dates past its range as other dates (orjson 3.9 on NumPy 1.24 crashed the process on some).
        raise self._not_json(value)

    def _subclass(self, value: object) -> _PathError:
        return self._fail(
            EncodeError.make(
                None,
                "JSON-serializable (orjson.OPT_PASSTHROUGH_SUBCLASS, which dumps was given, refuses a dict or list "
                "subclass)",
                f"a {type(value).__name__}",
                raw=True,
            )
        )

    def _not_json(self, value: np.generic) -> _PathError:
        # What orjson would refuse with a message naming only the type, named here at its path.
        return self._fail(
            EncodeError.make(
                None,
                "JSON-serializable (a NumPy bool, integer, float16/32/64 or str scalar; convert a timedelta64, "
                "datetime64, complex, longdouble, bytes or void value first)",
                value,
            )
        )

    def _dataclass(self, value: Any) -> Any:
        """A dataclass instance as the object orjson writes for it, so that its members are checked like a dict's."""
        if self.option & orjson.OPT_PASSTHROUGH_DATACLASS:
            return value  # the caller asked orjson to refuse dataclasses
        members = _dataclass_members(value)
        return value if members is None else self._dict(members)

    def _dict(self, mapping: dict[Any, Any]) -> dict[Any, Any]:
        # A subclass is read from its storage, as orjson writes it: its own get, items or __iter__ may raise.
        schema = dict.get(mapping, KEY_SCHEMA)
        if schema is not None:
            schema = _json_name(schema)
        names = None
        if self.non_str_keys and any(type(key) is not str for key in dict.keys(mapping)):
            # orjson writes an enum key as its value: {Key.schema: ...} has a "schema" member too
            named = [item for key, item in dict.items(mapping) if _json_name(key) == KEY_SCHEMA]
            schema = next((n for n in map(_json_name, named) if n in _SCHEMAS), schema)
            names = self._member_names(mapping)
        if schema is not None and schema in _SCHEMAS:
            # loads would turn this object into an array (or refuse it): the document would not come back.
            raise self._fail(
                EncodeError.make(
                    KEY_SCHEMA,
                    "no r3wire schema name in an object dumps writes as it is (loads would read the object as an "
                    "envelope); put the array itself in the document",
                    schema,
                )
            )
        out: dict[Any, Any] | None = None
        routes_keys = self.routes_keys
        logprobs_keys = self.logprobs_keys
        path = self.path
        isfinite = math.isfinite
        for key, item in dict.items(mapping):
            cls = type(item)
            if cls is str or cls is int or cls is bool or item is None or (cls is float and isfinite(item)):
                continue  # the common leaves, checked here: a call per leaf was most of a large document's cost
            name = key if names is None else names.get(id(key), key)  # a key's member name, as orjson writes it
            kind = _ROUTES if name in routes_keys else _LOGPROBS if name in logprobs_keys else _PLAIN
            path.append(name)  # the path in the text written
            new = self.value(item, kind)
            path.pop()
            if new is not item:
                if out is None:
                    out = dict(dict.items(mapping))  # dict.copy and dict() of a subclass call its keys()
                out[key] = new
        return mapping if out is None else out

    def _member_names(self, mapping: dict[Any, Any]) -> dict[int, str]:
        """The member name orjson writes for each key of ``mapping`` (``OPT_NON_STR_KEYS``: 1 as "1", an enum as
        its value, a datetime in the options' format), by ``id(key)``; empty when orjson refuses a key (the text
        is then refused where it is written).

        Raises:
            EncodeError: two keys are written as one name (1 and "1", True and "true"): a reader keeps one of
                the two values, so the document would not come back.
        """
        keys = list(dict.keys(mapping))
        try:
            # Without OPT_SORT_KEYS, so that the names come in the keys' order.
            text = orjson.dumps(dict.fromkeys(keys), option=self.option & ~orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            return {}
        pairs: list[tuple[str, object]] = json.loads(text, object_pairs_hook=list)
        names = [name for name, _ in pairs]
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                self.path.append(name)
                error = self._fail(
                    EncodeError.make(
                        None,
                        'keys orjson writes as distinct member names (OPT_NON_STR_KEYS writes 1 and "1" alike; '
                        "a reader would keep one of the two values)",
                        f"keys {describe(keys[seen[name]])} and {describe(keys[i])}",
                        raw=True,
                    )
                )
                self.path.pop()
                raise error
            seen[name] = i
        return {id(key): name for key, name in zip(keys, names, strict=True)}

    def _list(self, items: Sequence[Any]) -> Sequence[Any]:
        if _inert(items):  # token ids, logprobs: skip the per-item loop
            return items
        count = len(items)
        if count < _PROBE_MIN or (type(items) is not list and type(items) is not tuple):
            out = self._items(items, 0, count, None)
        else:
            out = None
            for start in range(0, count, _PROBE_STEP):
                stop = min(start + _PROBE_STEP, count)
                if not self._as_is(items[start:stop]):
                    out = self._items(items, start, stop, out)
        return items if out is None else out

    def _as_is(self, piece: Sequence[Any]) -> bool:
        """True if the walk would neither change nor refuse anything in ``piece``, proved by orjson writing it.

        Walking a long list of small objects (a chat completion's ``logprobs.content``) in Python cost about ten
        times orjson's own writing of it, so orjson writes it once first: arrays, NumPy scalars, dataclasses
        (which the walk writes as dicts) and everything else it cannot write go to a ``default`` that writes
        ``null``; a NaN or infinity is written as ``null`` (found with every ``None``, a cheap superset); and an
        object naming an r3wire schema spells it. A piece with none of these is written exactly as it is; any
        other piece is walked as before. Not under ``OPT_NON_STR_KEYS``: two keys written as one name (1 and "1")
        are only found by the walk.
        """
        if self.non_str_keys:
            return False
        text = self.probes.text(piece)
        if text is None:
            return False
        walk = b"null" in text or b'"r3wire.' in text
        self.probes.settled(text, walk)
        return not walk

    def _items(self, items: Sequence[Any], start: int, stop: int, out: list[Any] | None) -> list[Any] | None:
        """Walk ``items[start:stop]``; ``out`` is the copy made at the first changed item (None until then)."""
        path = self.path
        isfinite = math.isfinite
        for index, item in enumerate(itertools.islice(items, start, stop), start):
            cls = type(item)
            if cls is str or cls is int or cls is bool or item is None or (cls is float and isfinite(item)):
                continue
            path.append(index)
            new = self.value(item, _PLAIN)
            path.pop()
            if new is not item:
                if out is None:
                    out = list(items)
                out[index] = new
        return out

    def _array(self, value: Any, kind: int) -> dict[str, Any]:
        try:
            if kind == _ROUTES:
                return self._routes(value)
            if kind == _LOGPROBS:
                return self._logprobs(value)
            wire, name = array_wire(value)
        except EncodeError as exc:
            raise self._fail(exc, _PREFIXES[kind]) from None
        if not self.splice or wire.nbytes < _SPLICE_MIN_BYTES:
            return build_envelope(wire, name, ARRAY_SCHEMA)
        blob = _Blob(wire.reshape(-1), wire.dtype, False, None, wire.shape, tuple(self.path))
        return build_envelope(wire, name, ARRAY_SCHEMA, data=self._placeholder(blob))

    def _routes(self, value: Any) -> dict[str, Any]:
        # Shape, dtype and id checks (zero layers or slots included) are prepare_routes', on both paths below.
        value = as_numpy(value, field="routes")
        if self.pack_bits or not self.splice:
            wire, name, extra, shape = routes_wire(value, num_experts=self.num_experts, pack_bits=self.pack_bits)
            if not self.splice or wire.nbytes < _SPLICE_MIN_BYTES:
                return build_envelope(wire, name, ROUTES_SCHEMA, extra, shape=shape)
            blob = _Blob(wire.reshape(-1), wire.dtype, False, None, wire.shape, tuple(self.path))
            return build_envelope(wire, name, ROUTES_SCHEMA, extra, shape=shape, data=self._placeholder(blob))
        # With num_experts the ids are not read here: a large array is checked piece by piece as it streams.
        plan = prepare_routes(value, num_experts=self.num_experts, pack_bits=False, defer_bounds=True)
        source = plan.array
        wire_dtype = WIRE_DTYPES[plan.dtype]
        # ravel is a view of a C-contiguous array (the usual case); any other layout is copied once here.
        flat = np.ravel(source)
        extra = {} if plan.num_experts is None else {KEY_NUM_EXPERTS: plan.num_experts}
        if flat.size * wire_dtype.itemsize < _SPLICE_MIN_BYTES:
            if plan.unchecked_bound is not None:
                check_chunk(flat, 0, source.shape, plan.unchecked_bound)
            return build_envelope(wire_ids(plan), plan.dtype, ROUTES_SCHEMA, extra)
        convert = not same_bytes(source.dtype, wire_dtype)
        # iter_dumps reads a view of the caller's ids later: ids checked here are checked again as they stream
        # (with num_experts they are checked only then). Unsigned bytes into uint8 can break no rule. Measured
        # (int32 sources, chunk production alone, min of 7): one more in-cache max per piece, W1 0.33 -> 0.60 ms,
        # K2 4.4 -> 6.2 ms; with num_experts nothing is read twice.
        recheck = (
            _RECHECK_IDS
            if plan.unchecked_bound is None
            and not (plan.dtype == "uint8" and source.dtype.kind == "u" and source.dtype.itemsize == 1)
            and np.may_share_memory(flat, source)
            else _NO_RECHECK
        )
        blob = _Blob(flat, wire_dtype, convert, plan.unchecked_bound, source.shape, tuple(self.path), recheck)
        return build_envelope(source, plan.dtype, ROUTES_SCHEMA, extra, data=self._placeholder(blob))

    def _logprobs(self, value: Any) -> dict[str, Any]:
        if self.clamp:
            array, _ = as_float_array(value, field="logprobs", half=False)  # encode_logprobs' dtypes
            result = clamp_logprobs(array)
            if result.num_clamped:
                self.clamped.append(_Clamped(_path(self.path, exact=True), result.num_clamped, array.size))
            value = result.values
        wire, name = logprobs_wire(value, clamp_option="clamp_logprobs=True")
        if not self.splice or wire.nbytes < _SPLICE_MIN_BYTES:
            return build_envelope(wire, name, LOGPROBS_SCHEMA)
        # Streamed like any large array: without this a logprobs array was one base64 string in the document,
        # several body-sized copies on the way (13x the body at its peak) and one chunk out of iter_dumps.
        # iter_dumps reads the caller's own array later (not a clamped copy or a converted one): checked again then.
        shared = (
            not self.clamp
            and (isinstance(value, np.ndarray) or is_tensor(value))
            and np.may_share_memory(wire, as_numpy(value, field="logprobs"))
        )
        recheck = _RECHECK_FINITE if shared else _NO_RECHECK
        blob = _Blob(wire.reshape(-1), wire.dtype, False, None, wire.shape, tuple(self.path), recheck)
        return build_envelope(wire, name, LOGPROBS_SCHEMA, data=self._placeholder(blob))

    def _placeholder(self, blob: _Blob) -> str:
        if not self.nonce:
            self.nonce = _nonce()
        self.blobs.append(blob)
        return f"{self.nonce}{len(self.blobs) - 1}"


def _segments(text: bytes, nonce: bytes, blobs: Sequence[_Blob]) -> list[bytes | _Blob] | None:
    """``text`` cut at each placeholder string's content, with the blob that replaces it in between; None if the
    placeholders are not exactly the ones written (then the caller writes the document without splicing)."""
    marker = b'"' + nonce
    parts: list[bytes | _Blob] = []
    used = [False] * len(blobs)
    pos = 0
    while (at := text.find(marker, pos)) >= 0:
        start = at + len(marker)
        end = text.find(b'"', start)
        digits = text[start:end]
        if end < 0 or not digits.isdigit() or int(digits) >= len(blobs) or used[int(digits)]:
            return None
        index = int(digits)
        used[index] = True
        parts.append(text[pos : at + 1])
        parts.append(blobs[index])
        pos = end
    if not all(used):
        return None
    parts.append(text[pos:])
    return parts


@dataclasses.dataclass(frozen=True, slots=True)
class _Options:
    num_experts: int | None
    pack_bits: bool
    routes_keys: frozenset[object]
    logprobs_keys: frozenset[object]
    clamp: bool
    request_id: str | None
    option: int | None


def _key_set(keys: Collection[str], field: str) -> frozenset[object]:
    # A lone string is one key; each key a str (bytes were read as a set of ints: no key ever matched).
    return frozenset(str_collection(keys, field, "a collection of object keys (strings)", most=_MAX_KEYS))


def _options(
    *,
    num_experts: int | None,
    pack_bits: bool,
    routes_keys: Collection[str],
    logprobs_keys: Collection[str],
    clamp_logprobs: bool,
    request_id: str | None,
    option: int | None,
) -> _Options:
    if not isinstance(pack_bits, (bool, np.bool_)):
        raise R3WireError.make("pack_bits", "a bool", pack_bits)
    if not isinstance(clamp_logprobs, (bool, np.bool_)):
        raise R3WireError.make("clamp_logprobs", "a bool", clamp_logprobs)
    if request_id is not None and not isinstance(request_id, str):
        raise R3WireError.make("request_id", "a string or None", request_id)
    if option is not None and (type(option) is not int or option < 0 or option & ~_ORJSON_OPTIONS):
        # orjson's own refusal (a TypeError, or "Invalid opts" named as a fault of the document) is no help here.
        raise R3WireError.make("option", "None or orjson options (an int of orjson.OPT_* flags)", option)
    routes = _key_set(routes_keys, "routes_keys")
    logprobs = _key_set(logprobs_keys, "logprobs_keys")
    if routes & logprobs:
        raise R3WireError.make(
            "logprobs_keys", "no key that is also in routes_keys", sorted(map(str, routes & logprobs))
        )
    return _Options(
        num_experts=optional_num_experts(num_experts),
        pack_bits=bool(pack_bits),
        routes_keys=routes,
        logprobs_keys=logprobs,
        clamp=bool(clamp_logprobs),
        request_id=request_id,
        option=option,
    )


def _render(obj: Any, opts: _Options) -> list[bytes | _Blob]:
    """The document as text pieces and the blobs between them; reports what was clamped.

    Raises:
        EncodeError: as :func:`dumps`, except an id out of bounds found while streaming a blob.
    """
    for splice in (True, False):
        writer = _Writer(
            num_experts=opts.num_experts,
            pack_bits=opts.pack_bits,
            routes_keys=opts.routes_keys,
            logprobs_keys=opts.logprobs_keys,
            clamp=opts.clamp,
            splice=splice,
            option=opts.option,
        )
        text = _write(obj, writer, opts.option)
        if not writer.blobs:
            break
        segments = _segments(text, writer.nonce.encode("ascii"), writer.blobs)
        if segments is not None:
            _report(writer.clamped, opts.request_id)
            return segments
        # A placeholder was not found exactly once (see _segments): write the text through orjson instead.
    _report(writer.clamped, opts.request_id)
    return [text]


def _report(clamped: Sequence[_Clamped], request_id: str | None) -> None:
    """One warning per document that had logprobs clamped: how many, out of how many, and where."""
    if not clamped:
        return
    num_clamped = sum(c.num_clamped for c in clamped)
    total = sum(c.total for c in clamped)
    paths = [c.path for c in clamped]
    where = f"request {request_id!r}"[:120] if request_id is not None else "a request without an id"
    _logprobs_logger.warning(
        "clamped %d/%d sampled logprobs (non-finite) to %r for %s, at %s",
        num_clamped,
        total,
        LOGPROB_FLOOR,
        where,
        ", ".join(paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else ""),
        extra={
            "r3wire_request_id": request_id,
            "r3wire_num_clamped": num_clamped,
            "r3wire_total": total,
            "r3wire_paths": paths,
        },
    )


def _stream(segments: Sequence[bytes | _Blob], *, lazy: bool = False) -> Iterator[bytes]:
    for segment in segments:
        if isinstance(segment, bytes):
            if segment:
                yield segment
        else:
            yield from segment.chunks(lazy)


def dumps(
    obj: Any,
    *,
    num_experts: int | None = None,
    pack_bits: bool = False,
    routes_keys: Collection[str] = ROUTES_KEYS,
    logprobs_keys: Collection[str] = LOGPROBS_KEYS,
    clamp_logprobs: bool = False,
    request_id: str | None = None,
    option: int | None = None,
) -> bytes:
    """Serialize ``obj`` to JSON bytes, writing every NumPy array or torch tensor in it as an r3wire envelope.

    The rule, applied to arrays found in dicts, lists, tuples and dataclass instances (nested to any depth; a
    dataclass is written with the members orjson writes for it, and an enum as its value, so both are checked
    like the rest; not inside other objects): an array that is the value of a key in ``routes_keys`` is written with
    :func:`~r3wire.encode_routes` (compact uint8/int16/int32, ``num_experts`` passed on); one that is the value of
    a key in ``logprobs_keys`` with :func:`~r3wire.encode_logprobs`; every other array with
    :func:`~r3wire.encode_array` (its own dtype, bit for bit). Nested lists are never converted. NumPy scalars
    become JSON numbers or booleans of the same value. Everything else is serialized by ``orjson``.

    ``loads(dumps(x))`` gives back every array (routes in their wire dtype) and every JSON value (an integer beyond
    the 64 bits orjson writes is written exactly, as :func:`loads` reads it); other types
    orjson writes come back as JSON gives them (a tuple as a list, a datetime or UUID as a string, a dataclass as
    a dict). What would not come back at all makes ``dumps`` raise, such as a non-finite float or an object of
    the caller's that spells an r3wire ``schema``.
    Large arrays are checked, narrowed and base64-encoded piece by piece straight into the output, which is the
    only body-sized allocation. A result over 32 MiB is a fresh mapping the kernel faults in page by page (about
    as long as the encode itself on these VMs); :func:`iter_dumps` into a reused buffer avoids that, and so does
    starting the process with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc 2.35 or later, transparent huge
    pages in ``madvise`` or ``always`` mode): a Kimi K2 ``dumps`` took 32 ms with 10,241 page faults, 13 ms with 21.

    Args:
        obj: the document, e.g. ``{"choices": [{"routed_experts": array, "logprobs": array, ...}], ...}``.
        num_experts: the model's expert count, for the routes envelopes (see :func:`~r3wire.encode_routes`).
        pack_bits: write routes bit-packed (see :func:`~r3wire.encode_routes`); other arrays are never packed.
        routes_keys: the object keys whose arrays are routes; ``()`` writes every array as ``r3wire.array``.
        logprobs_keys: the object keys whose arrays are sampled logprobs, written as ``r3wire.logprobs``
            (float32/float64, every value finite); ``()`` writes them as ``r3wire.array``.
        clamp_logprobs: replace a non-finite logprob under ``logprobs_keys`` with -9999.0 (see
            :func:`~r3wire.clamp_logprobs`) instead of raising: in an array, and in a flat list of numbers and
            ``None`` (which is written as a list; a missing ``None`` is floored too). What was replaced is reported like
            :func:`~r3wire.encode_logprobs` reports it: one warning per document on the ``r3wire.logprobs``
            logger, whose record carries ``r3wire_num_clamped``, ``r3wire_total``, ``r3wire_paths`` and
            ``r3wire_request_id``. Call :func:`~r3wire.clamp_logprobs` first to get the count as a value.
        request_id: names the request in that warning.
        option: ``orjson`` options (e.g. ``orjson.OPT_SORT_KEYS``), passed on. Under ``OPT_NON_STR_KEYS`` a key is
            matched against ``routes_keys`` and ``logprobs_keys`` by the member name written for it, and two keys
            written as one name (``1`` and ``"1"``) raise ``EncodeError``.
    Returns:
        UTF-8 JSON that any JSON parser reads; :func:`loads` turns the envelopes back into arrays.

    Raises:
        EncodeError: an array cannot be encoded (e.g. a negative expert id under a routes key, a non-finite
            logprob without ``clamp_logprobs``, more than 32 dimensions), a float is NaN or infinite (orjson would
            silently write ``null``), an object spells an r3wire schema name, or a value is not
            JSON-serializable (a type orjson refuses, an integer of more than 4300 digits or, with
            ``orjson.OPT_STRICT_INTEGER``, beyond 53 bits, a string or key holding a lone surrogate, which UTF-8
            cannot encode). The field is a path such as
            ``$.choices[0].routed_experts[5, 2, 0]``.
        R3WireError: an option is invalid (``routes_keys`` and ``logprobs_keys`` must not share a key; ``option``
            must be made of ``orjson.OPT_*`` flags).
    """
    opts = _options(
        num_experts=num_experts,
        pack_bits=pack_bits,
        routes_keys=routes_keys,
        logprobs_keys=logprobs_keys,
        clamp_logprobs=clamp_logprobs,
        request_id=request_id,
        option=option,
    )
    segments = _render(obj, opts)
    if len(segments) == 1 and isinstance(segments[0], bytes):
        return segments[0]
    total = sum(len(s) if isinstance(s, bytes) else s.text_length for s in segments)
    # BytesIO hands its buffer over on getvalue() without a copy: the output is the one body-sized allocation.
    out = io.BytesIO()
    out.seek(total - 1)
    out.write(b" ")
    out.seek(0)
    for chunk in _stream(segments):
        out.write(chunk)
    assert out.tell() == total, "the pieces are exactly the text length computed above"
    return out.getvalue()


def iter_dumps(
    obj: Any,
    *,
    num_experts: int | None = None,
    pack_bits: bool = False,
    routes_keys: Collection[str] = ROUTES_KEYS,
    logprobs_keys: Collection[str] = LOGPROBS_KEYS,
    clamp_logprobs: bool = False,
    request_id: str | None = None,
    option: int | None = None,
) -> Iterator[bytes]:
    """:func:`dumps` as a stream of chunks whose concatenation is byte for byte what :func:`dumps` returns.

    The document around the arrays comes as a few small chunks, each large array as base64 chunks of at most
    1 MiB, made one at a time (checked, narrowed and encoded while in cache), so a Starlette/FastAPI
    ``StreamingResponse``, ``socket.sendmsg`` or a reused buffer sends a response without any body-sized
    allocation. The document is walked and serialized, and every check is made, when this function is called;
    only the ids of routes written with ``num_experts`` are checked as they stream.

    Arrays changed before the iterator is exhausted: a large array (a streamed one, 128 KiB or more on the wire) is
    read while it streams, from the caller's memory when no copy was needed at the call, so a value changed before
    its chunk is produced is sent as it is then, after the same checks again on each chunk: a routes id that is
    negative or no longer fits the wire dtype chosen at the call (or routes that no longer need that dtype), or a
    logprob that is no longer finite, makes the iterator raise ``EncodeError`` naming the element, never a wrapped
    or refused value on the wire. Bit-packed routes, clamped logprobs, small arrays and arrays the call had to copy
    (routes that are not C-contiguous, logprobs in another byte order or layout) are snapshots taken at the call.
    Shapes and dtypes are fixed at the call. Writing an array from another thread while a chunk of it is being
    produced is a data race: don't.

    Args:
        obj: the document, e.g. ``{"choices": [{"routed_experts": array, "logprobs": array, ...}], ...}``.
        num_experts: the model's expert count, for the routes envelopes (see :func:`~r3wire.encode_routes`).
        pack_bits: write routes bit-packed (see :func:`~r3wire.encode_routes`); other arrays are never packed.
        routes_keys: the object keys whose arrays are routes; ``()`` writes every array as ``r3wire.array``.
        logprobs_keys: the object keys whose arrays are sampled logprobs, written as ``r3wire.logprobs``
            (float32/float64, every value finite); ``()`` writes them as ``r3wire.array``.
        clamp_logprobs: replace a non-finite logprob under ``logprobs_keys`` with -9999.0 (see
            :func:`~r3wire.clamp_logprobs`) instead of raising: in an array, and in a flat list of numbers and
            ``None`` (which is written as a list; a missing ``None`` is floored too). What was replaced is reported like
            :func:`~r3wire.encode_logprobs` reports it: one warning per document on the ``r3wire.logprobs``
            logger, whose record carries ``r3wire_num_clamped``, ``r3wire_total``, ``r3wire_paths`` and
            ``r3wire_request_id``. Call :func:`~r3wire.clamp_logprobs` first to get the count as a value.
        request_id: names the request in that warning.
        option: ``orjson`` options (e.g. ``orjson.OPT_SORT_KEYS``), passed on. Under ``OPT_NON_STR_KEYS`` a key is
            matched against ``routes_keys`` and ``logprobs_keys`` by the member name written for it, and two keys
            written as one name (``1`` and ``"1"``) raise ``EncodeError``.
    Returns:
        An iterator of non-empty ``bytes`` chunks.

    Raises:
        EncodeError: as :func:`dumps`, at the call; an expert id at or above ``num_experts`` (or negative) in a
            large routes array is found while streaming, and raised by the iterator (after earlier chunks), as is
            a value changed since the call that breaks a rule (see above).
        R3WireError: an option is invalid.
    """
    opts = _options(
        num_experts=num_experts,
        pack_bits=pack_bits,
        routes_keys=routes_keys,
        logprobs_keys=logprobs_keys,
        clamp_logprobs=clamp_logprobs,
        request_id=request_id,
        option=option,
    )
    return _stream(_render(obj, opts), lazy=True)


def _write(obj: Any, writer: _Writer, option: int | None) -> bytes:
    try:
        prepared = writer.value(obj, _PLAIN)
    except _PathError as fail:
        raise _relocate(fail.error, _path(fail.parts), fail.prefix) from fail.error
    except RecursionError:
        raise EncodeError.make("$", "a tree of values (no reference cycles)", "nesting too deep", raw=True) from None
    return _dumps_located(prepared, option)


def _dumps_located(prepared: Any, option: int | None, put_back: Callable[[bytes], bytes] | None = None) -> bytes:
    """``orjson.dumps(prepared)``, integers beyond 64 bits written exactly; a refusal named at its path.

    Raises:
        EncodeError: what orjson refuses, at the path of the value when it can be found.
    """
    try:
        text = orjson.dumps(prepared, option=option)
    except orjson.JSONEncodeError as exc:
        # orjson names no location for a string that is not UTF-8 or an integer it cannot write: found here, on
        # this path only.
        reason = str(exc)
        found = first_not_utf8(prepared) if "UTF-8" in reason else None
        if found is not None:
            raise _not_utf8_error(found) from exc
        if "-bit range" in reason:
            if option is not None and option & orjson.OPT_STRICT_INTEGER:
                strict = first_leaf(prepared, _beyond_53_bits)
                if strict is not None:
                    raise EncodeError.make(
                        _path(strict[0]), "an integer in -(2**53-1) .. 2**53-1 (orjson.OPT_STRICT_INTEGER)", strict[1]
                    ) from exc
            elif put_back is None and first_leaf(prepared, _beyond_64_bits) is not None:
                spelled, spell_back = _spell_big_ints(prepared, option)
                return _dumps_located(spelled, option, spell_back)
        _, named, type_name = reason.partition("Type is not JSON serializable: ")
        odd = first_leaf(prepared, lambda leaf: type(leaf).__name__ == type_name) if named else None
        if odd is not None:
            raise EncodeError.make(_path(odd[0]), "JSON-serializable", reason, raw=True) from exc
        raise EncodeError.make("$", "JSON-serializable", reason, raw=True) from exc
    return text if put_back is None else put_back(text)


def _beyond_64_bits(leaf: object) -> bool:
    # int.__pos__ reads an int subclass's stored value (what orjson reads), not its own __int__ or comparisons.
    return isinstance(leaf, int) and not isinstance(leaf, bool) and not -(2**63) <= int.__pos__(leaf) < 2**64


def _beyond_53_bits(leaf: object) -> bool:
    return isinstance(leaf, int) and not isinstance(leaf, bool) and not -(2**53) < int.__pos__(leaf) < 2**53


def _spell_big_ints(prepared: Any, option: int | None) -> tuple[Any, Callable[[bytes], bytes]]:
    """``prepared`` with every integer beyond 64 bits (which orjson refuses to write) replaced by a placeholder
    string, and what turns the placeholders of the written text into the integers' exact digits, as
    :func:`loads` reads them. What orjson writes as a container (a dict or list, a subclass too unless
    ``OPT_PASSTHROUGH_SUBCLASS``, a tuple) is copied once, however often it is referenced; anything else is left
    as it is, for orjson to write or refuse as it would have.

    Raises:
        EncodeError: an integer has more than 4300 digits (what every r3wire reader refuses; fewer when the
            interpreter's own limit is lower), at its path.
    """
    nonce = _nonce()
    limit = digit_limit()
    digits: list[bytes] = []
    copies: dict[int, Any] = {}
    # Iterative (the walk that made ``prepared`` allows any depth orjson writes), in post-order: a container is
    # listed once, after every container below it, so a container shared by several parents (one token_ids list
    # in two choices, CPython's one empty tuple) is copied before any of them. ``prepared`` has no cycle (the
    # walk refuses them), so a container met again has been listed.
    order: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(prepared, False)]
    subclasses = not (option and option & orjson.OPT_PASSTHROUGH_SUBCLASS)

    def container(value: Any) -> bool:
        cls = type(value)
        return cls is dict or cls is list or cls is tuple or (subclasses and isinstance(value, (dict, list)))

    while stack:
        node, finished = stack.pop()
        if finished:
            order.append(node)
        elif container(node) and id(node) not in seen:
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in (dict.values(node) if isinstance(node, dict) else copy_list(node)))

    def spelled(value: Any) -> Any:
        if container(value):
            return copies[id(value)]
        if not _beyond_64_bits(value):
            return value
        stored = int.__pos__(value)  # an int subclass's own value, as orjson would read it
        try:
            text = str(stored)
        except ValueError:  # more digits than the interpreter converts
            text = ""
        if not text or len(text.lstrip("-")) > limit:
            found = first_leaf(prepared, lambda leaf: leaf is value)
            raise EncodeError.make(
                _path(found[0] if found is not None else []),
                f"an integer of at most {limit} digits (what r3wire's readers accept)",
                f"an integer of {stored.bit_length()} bits",
                raw=True,
            )
        digits.append(text.encode("ascii"))
        return f"{nonce}{len(digits) - 1}"

    for node in order:
        if isinstance(node, dict):
            copies[id(node)] = {key: spelled(item) for key, item in dict.items(node)}
        else:
            copies[id(node)] = [spelled(item) for item in copy_list(node)]  # its items as orjson reads them
    placeholder = re.compile(b'"' + re.escape(nonce.encode("ascii")) + rb'(\d+)"')

    def put_back(text: bytes) -> bytes:
        return placeholder.sub(lambda match: digits[int(match.group(1))], text)

    return spelled(prepared), put_back


def _not_utf8_error(found: NotUtf8) -> R3WireError:
    """The error for a string dumps cannot write (JSON text is UTF-8, which has no lone surrogate), at its path."""
    return EncodeError.make(
        _path(found.parts),
        "a string UTF-8 can encode (no lone surrogate)",
        f"a lone surrogate {ascii(found.text[found.at])[1:-1]} at character {found.at}",
        raw=True,
    )


class _CutMismatchError(Exception):
    """A cut blob did not check out: the document is parsed again without cutting, which is exact."""


def _locate(root: object, target: object) -> list[object] | None:
    """The keys and indexes from ``root`` to ``target`` (only ever called to word an error).

    Linear in the document: each container on the stack holds one link to its parent's path, never a copy of it
    (copying made a deep or wide 3 MB document cost gigabytes and seconds).
    """
    stack: list[tuple[Any, tuple[Any, object] | None]] = [(root, None)]
    while stack:
        node, link = stack.pop()
        if node is target:
            parts: list[object] = []
            while link is not None:
                link, part = link
                parts.append(part)
            return parts[::-1]
        if type(node) is dict:
            stack.extend((item, (link, key)) for key, item in node.items() if isinstance(item, (dict, list)))
        elif type(node) is list or type(node) is _TupleList:
            stack.extend((item, (link, i)) for i, item in enumerate(node) if isinstance(item, (dict, list)))
    return None


class _Reader:
    """Finds the envelopes in a parsed document and decodes them in place."""

    __slots__ = ("blobs", "max_elements", "names", "num_experts", "probes", "raw", "root", "used")

    def __init__(
        self,
        root: Any,
        *,
        raw: memoryview | None,
        blobs: dict[str, tuple[int, int]],
        num_experts: int | None,
        max_elements: int | None,
    ) -> None:
        self.root = root
        self.raw = raw
        self.blobs = blobs
        self.num_experts = num_experts
        self.max_elements = max_elements
        self.used = 0  # cut blobs put back or decoded: every one must be, or the cut was not what it seemed
        self.names = 0  # member names of objects that an envelope may also have (see _check_duplicates)
        self.probes = _Probes(0)

    def run(self, text: bytes | bytearray | memoryview | str) -> Any:
        """The document with every envelope decoded; ``text`` is what was parsed, for the duplicate check.

        Every envelope is found (and every cut blob accounted for) before any is decoded, so that a member named
        twice is reported first, whichever value the parser kept (wire-format.md §8 step 1).

        Raises:
            _CutMismatchError: a cut blob is not what the text around it says it is.
            DecodeError: an envelope is malformed or names a member twice (only ever for blobs that checked out).
        """
        root = self.root
        if type(root) is dict and self._is_envelope(root):
            self._count(root)
            self._check(text)
            return self._decode(root)
        # Where each envelope is, as two lists: a tuple per envelope made the cyclic GC walk the whole document
        # again and again (100000 tiny envelopes took 1.3 times as long).
        containers: list[Any] = []
        keys: list[Any] = []
        if type(root) is dict or type(root) is list or type(root) is _TupleList:
            self._visit(root, containers, keys)
        self._check(text)
        for container, key in zip(containers, keys, strict=True):
            container[key] = self._decode(container[key])
        return root

    def _count(self, envelope: dict[str, Any]) -> None:
        """Count ``envelope``'s member names (see _check_duplicates) and its cut blob."""
        self.names += len(_ENVELOPE_KEYS.intersection(envelope))
        data = envelope.get(KEY_DATA)
        self.used += bool(self.blobs) and type(data) is str and data in self.blobs

    def _check(self, text: bytes | bytearray | memoryview | str) -> None:
        """Before any envelope is decoded: every cut blob was found where it was cut, and no envelope names a
        member twice.

        Raises:
            _CutMismatchError: a cut blob is not what the text around it says it is.
            DecodeError: an envelope names a member twice.
        """
        if self.used != len(self.blobs):
            raise _CutMismatchError
        _check_duplicates(text, self.names)

    @staticmethod
    def _is_envelope(obj: dict[str, Any]) -> bool:
        schema = member(obj, KEY_SCHEMA)
        # A str subclass (np.str_ in a document built in process) names a schema by its characters, as decoders read it.
        return isinstance(schema, str) and plain_str(schema) in _SCHEMAS

    def _visit(self, node: Any, containers: list[Any], keys: list[Any]) -> None:
        """Put back the cut blobs of ``node``'s objects and list where its envelopes are (``containers[i][keys[i]]``),
        in the order they are decoded."""
        # An explicit stack: parsed documents may nest deeper than Python's recursion limit.
        stack: list[Any] = [node]
        names = _ENVELOPE_KEYS
        while stack:
            node = stack.pop()
            pairs: Iterable[tuple[Any, Any]]
            if type(node) is dict:
                self.names += len(names.intersection(node))
                if self.blobs:
                    self._restore(node)
                pairs = node.items()
            else:
                count = len(node)
                if count >= _LONG_LIST and not _CONTAINER_TYPES.intersection(map(type, node)):
                    continue  # token ids, logprobs: nothing to look at
                if count < _PROBE_MIN:
                    pairs = enumerate(node)
                else:
                    spans = self._unseen(node)
                    pairs = itertools.chain.from_iterable(zip(range(a, b), node[a:b], strict=True) for a, b in spans)
            for key, item in pairs:
                cls = type(item)
                if cls is dict:
                    if self._is_envelope(item):
                        self._count(item)
                        containers.append(node)
                        keys.append(key)
                    else:
                        stack.append(item)
                elif cls is list or cls is _TupleList:
                    stack.append(item)

    def _unseen(self, items: list[Any]) -> list[tuple[int, int]]:
        """The spans of a long list that :meth:`_visit` must look into; counts the member names of the rest.

        Visiting a long list of small objects (a chat completion's ``logprobs.content``) in Python cost about
        twice orjson's parse of it, so orjson writes it first, in pieces: a piece whose text holds no
        ``"r3wire`` holds no envelope and no cut blob (their schema names and placeholders start so), and its
        objects' member names that an envelope may have are counted in that text, where orjson writes every key
        plainly and a string followed by a colon is always a key.
        """
        spans: list[tuple[int, int]] = []
        for start in range(0, len(items), _PROBE_STEP):
            stop = min(start + _PROBE_STEP, len(items))
            text = self.probes.text(items[start:stop])
            visit = text is None or b'"r3wire' in text
            if text is not None:
                self.probes.settled(text, visit)
            if visit:
                spans.append((start, stop))
            else:
                assert text is not None
                self.names += _whole_keys(text)
        return spans

    def _restore(self, node: dict[str, Any]) -> None:
        """Put back a long "data" string that was cut out of an object that is not an envelope."""
        data = node.get(KEY_DATA)
        if type(data) is str and data in self.blobs:
            assert self.raw is not None
            start, end = self.blobs[data]
            try:  # orjson checks the text exactly as it would have in place
                node[KEY_DATA] = orjson.loads(self.raw[start - 1 : end + 1])
            except orjson.JSONDecodeError:
                raise _CutMismatchError from None
            self.used += 1

    def decode_at(self, envelope: dict[str, Any], where: Callable[[], str]) -> np.ndarray[Any, Any]:
        """``envelope`` decoded; an error is placed at the path ``where()`` gives (a document built in process,
        never cut)."""
        return self._decode(envelope, where)

    def _decode(self, envelope: dict[str, Any], where: Callable[[], str] | None = None) -> np.ndarray[Any, Any]:
        payload = envelope
        data = envelope.get(KEY_DATA)
        cut = bool(self.blobs) and type(data) is str and data in self.blobs
        if cut:  # counted in self.used by run
            assert self.raw is not None
            start, end = self.blobs[str(data)]
            payload = dict(envelope)
            payload[KEY_DATA] = self.raw[start:end]
        try:
            schema = plain_str(envelope[KEY_SCHEMA])
            if schema == ROUTES_SCHEMA.name:
                return decode_routes(payload, num_experts=self.num_experts, max_elements=self.max_elements)
            if schema == LOGPROBS_SCHEMA.name:
                return decode_logprobs(payload, max_elements=self.max_elements)
            return decode_array(payload, max_elements=self.max_elements)
        except DecodeError as exc:
            if cut:  # the error is worded from the document as it is, uncut
                raise _CutMismatchError from None
            path = where() if where is not None else _path(_locate(self.root, envelope) or [])
            raise _relocate(exc, path) from exc


# A member name that an envelope may have, as a JSON key in raw text: preceded by what may precede a key and
# followed by the colon. In valid JSON such a match is always a key (see _check_duplicates).
_NAME_KEY = rb'[{,\s]"(?:data|shape|dtype|schema|version|num_experts|bits)"\s*:'
_NAME_KEY_RE: Final = re.compile(_NAME_KEY)
_NAME_KEY_TEXT_RE: Final = re.compile(_NAME_KEY.decode())
# Any key, to find those spelled with escapes (e.g. "\u0064ata"). Each character of the string is matched one
# way only (no ambiguity between alternatives), so the match is linear: an earlier pattern that required a
# backslash inside took minutes on long runs of escaped backslashes.
_ANY_KEY_RE: Final = re.compile(rb'[{,\s]"((?:[^"\\]|\\.)*)"\s*:')
_ANY_KEY_TEXT_RE: Final = re.compile(_ANY_KEY_RE.pattern.decode())
_NAME_RE: Final = re.compile(rb'"(?:data|shape|dtype|schema|version|num_experts|bits)"')
_NAME_TEXT_RE: Final = re.compile(_NAME_RE.pattern.decode())
# Such a name followed by a colon, in text orjson wrote: a key when "{" or "," precedes it (see _whole_keys).
_NAME_KEY_PLAIN_RE: Final = re.compile(_NAME_RE.pattern + b":")


def _whole_keys(text: bytes) -> int:
    """How many member names an envelope may have are keys in ``text`` (written by orjson: compact, every key
    after ``{`` or ``,``). A key that ends in such a name (``a"data``, written ``"a\\"data":``) is not one; the
    preceding byte is checked in Python because a pattern starting with a class of characters scans every byte
    (ten times slower on a logprobs list), while one starting with a quote jumps from quote to quote."""
    return sum(
        1 for match in _NAME_KEY_PLAIN_RE.finditer(text) if text[match.start() - 1 : match.start()] in (b"{", b",")
    )


def _count(text: bytes | bytearray | memoryview | str, pattern: re.Pattern[Any], text_pattern: re.Pattern[str]) -> int:
    if isinstance(text, str):
        return sum(1 for _ in text_pattern.finditer(text))
    return sum(1 for _ in pattern.finditer(text))


def _has(text: bytes | bytearray | memoryview | str, needle: bytes) -> bool:
    if isinstance(text, str):
        return needle.decode() in text
    if isinstance(text, memoryview):
        return re.search(re.escape(needle), text) is not None
    return needle in text


def _escaped_names(text: bytes | bytearray | memoryview | str) -> int:
    """How many keys spelled with escapes decode to a member name an envelope may have."""
    matches = _ANY_KEY_TEXT_RE.finditer(text) if isinstance(text, str) else _ANY_KEY_RE.finditer(text)
    count = 0
    for match in matches:
        raw = match.group(1)
        if "\\" not in raw if isinstance(raw, str) else b"\\" not in raw:
            continue  # spelled plainly: counted by _NAME_KEY_RE
        spelled = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        try:
            name = orjson.loads(f'"{spelled}"')
        except orjson.JSONDecodeError:
            continue
        count += name in _ENVELOPE_KEYS
    return count


class _Duplicated(dict[str, Any]):
    """An envelope object that had a member name twice (only built by _find_duplicate)."""

    name: str = ""


def _check_duplicates(text: bytes | bytearray | memoryview | str, parsed_names: int) -> None:
    """Refuse an envelope with a member name twice; orjson keeps the last silently, so the text is counted.

    ``parsed_names`` is how many member names an envelope may have were found in the parsed objects. Each such
    name in the text is counted: if there are more, an object had one twice, and only then the text is parsed
    again, slowly, to find the object. The count is exact for valid JSON: a quote preceded by ``{``, ``,`` or
    whitespace is never escaped, and a closing quote cannot be followed by a letter, so every match is a key.

    Raises:
        DecodeError: an object that is (or names itself) an r3wire envelope has a member name twice.
    """
    escaped = _has(text, b"\\u")
    # A quick upper bound first: the names in quotes, anywhere (in documents dumps writes, only the keys).
    if not escaped and _count(text, _NAME_RE, _NAME_TEXT_RE) == parsed_names:
        return
    in_text = _count(text, _NAME_KEY_RE, _NAME_KEY_TEXT_RE) + (_escaped_names(text) if escaped else 0)
    if in_text > parsed_names:
        _find_duplicate(text)


def _find_duplicate(text: bytes | bytearray | memoryview | str) -> None:
    """Parse ``text`` with a hook that sees every member, and raise for the first envelope with a duplicate.

    Raises:
        DecodeError: naming the envelope's path and the repeated name.
    """

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs) and any(k == KEY_SCHEMA and v in _SCHEMAS for k, v in pairs if type(v) is str):
            seen: set[str] = set()
            found = _Duplicated(obj)
            found.name = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
            return found
        return obj

    source = text if isinstance(text, (str, bytes, bytearray)) else bytes(text)
    try:
        # Numbers are not needed here (and orjson already refused any the stdlib could not convert).
        root = json.loads(source, object_pairs_hook=pairs_hook, parse_int=len)
    except (ValueError, RecursionError):
        # Only the stdlib's depth limit (about 1000, orjson's is 1024) gets here, on a document orjson parsed
        # that has a repeated name: refused rather than searched without a path.
        raise DecodeError.make(
            "$", "a document whose envelopes have unique member names", "a duplicate member name", raw=True
        ) from None
    target = _first_duplicated(root)
    if target is None:
        return
    path = _path(_locate(root, target) or [])
    raise DecodeError.make(path, "an envelope with unique member names", f"{target.name!r} twice"[:80], raw=True)


def _first_duplicated(root: object) -> _Duplicated | None:
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, _Duplicated):
            return node
        if isinstance(node, dict):
            stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
    return None


def _finder(raw: bytes | bytearray | memoryview) -> Callable[[bytes, int], int]:
    """``raw.find`` for any contiguous bytes-like input, without copying it.

    One byte (a blob's closing quote, the long search) is found with :func:`~r3wire._bytesearch.find_byte`
    (``memchr``), in any input. Longer strings: ``find`` of a bytes or bytearray, or of the bytes or bytearray a
    memoryview is a view of (within the view's bounds); any other buffer through ``re``.
    """
    flat = np.frombuffer(raw, np.uint8)
    search = _search_strings(raw)

    def find(sub: bytes, start: int) -> int:
        return find_byte(flat, sub[0], start) if len(sub) == 1 else search(sub, start)

    return find


def _search_strings(raw: bytes | bytearray | memoryview) -> Callable[[bytes, int], int]:
    if isinstance(raw, (bytes, bytearray)):
        return raw.find
    base: object = raw.obj
    for _ in range(8):  # e.g. np.frombuffer(body, np.uint8): an array whose base is a view of the bytes
        if isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            break
    if isinstance(base, (bytes, bytearray)):
        offset = np.frombuffer(raw, np.uint8).ctypes.data - np.frombuffer(base, np.uint8).ctypes.data
        stop = offset + len(raw)

        def find_in_base(sub: bytes, start: int) -> int:
            at = base.find(sub, offset + start, stop)
            return at if at < 0 else at - offset

        return find_in_base
    patterns: dict[bytes, re.Pattern[bytes]] = {}

    def find_pattern(sub: bytes, start: int) -> int:
        pattern = patterns.get(sub)
        if pattern is None:
            pattern = patterns[sub] = re.compile(re.escape(sub))
        match = pattern.search(raw, start)
        return -1 if match is None else match.start()

    return find_pattern


def _cut_blobs(
    raw: bytes | bytearray | memoryview,
) -> tuple[bytes | bytearray | memoryview, dict[str, tuple[int, int]]]:
    """Replace the content of every long ``"data":"..."`` string in ``raw`` by a short placeholder.

    Returns the shortened document and, per placeholder, where its text is in ``raw``.

    One scan of each blob: its end is the next quote. That is exact whenever the cut can matter: a match is used
    only if its first quote is preceded by an even number of backslashes, so (in valid JSON) it is an unescaped
    delimiter, ``data`` is a whole key and the value is a string. If that string holds an escaped quote, the cut
    ends too early; but then the cut text is not base64 (an envelope refuses it), not a valid JSON string on its
    own (``_restore`` refuses it), or its placeholder lands elsewhere than under a ``data`` key (never used); each
    of these makes the caller parse the original document instead. If the shortened document does not parse,
    the original is parsed for the error's wording (or, should it parse, for the document).
    """
    blobs: dict[str, tuple[int, int]] = {}
    pieces: list[bytes | memoryview] = []
    view = memoryview(raw)
    find = _finder(raw)
    nonce = ""
    prev = pos = 0
    while (at := find(_DATA_KEY, pos)) >= 0:
        start = at + len(_DATA_KEY)
        end = find(b'"', start)
        if end < 0:
            break
        pos = end + 1
        if end - start < _CUT_MIN_CHARS:
            continue
        slashes = 0
        while at - slashes > 0 and view[at - slashes - 1] == _BACKSLASH:
            slashes += 1
        if slashes % 2:
            continue
        nonce = nonce or _nonce()
        placeholder = f"{nonce}{len(blobs)}"
        blobs[placeholder] = (start, end)
        pieces.append(view[prev:start])
        pieces.append(placeholder.encode("ascii"))
        prev = end
    if not blobs:
        return raw, blobs
    pieces.append(view[prev:])
    return b"".join(pieces), blobs


def _copy_decoded(root: Any, reader: _Reader) -> tuple[Any, bool]:
    """A document built in process with every envelope decoded, in a copy of its dicts, lists and tuples (the
    leaves are shared, so the caller's object stays as it was); and whether there were tuples (copied as
    :class:`_TupleList`).

    One walk copies and decodes (the copy and a second walk to decode cost 1.4 times as much). The copy is the tree
    the document's JSON text would parse to: a container referenced from several places is copied, and an
    envelope decoded, once per place, within the bound :class:`~r3wire._walk.Guard` sets (an envelope decoded again
    counts its elements, and its first decoding counts as the document's own). Envelopes are found as in
    :class:`_Reader`, in dict subclasses too.

    Raises:
        DecodeError: an envelope is malformed, the document holds a reference cycle or shares containers past that
            limit (see :class:`~r3wire._walk.Guard`); the field is the JSONPath.
    """
    is_envelope = _Reader._is_envelope
    if isinstance(root, dict) and is_envelope(root):
        return reader.decode_at(root, lambda: "$"), False
    if not isinstance(root, (dict, list, tuple)):
        return root, False
    tuples = not isinstance(root, (dict, list))
    # A dict or list subclass is copied from its storage: dict() of one whose __iter__ is overridden calls its
    # keys() and __getitem__, which may raise or lie.
    top = (
        dict(dict.items(root))
        if isinstance(root, dict)
        else copy_list(root)
        if isinstance(root, list)
        else _TupleList(root)
    )
    guard = Guard(root, _path)
    seen = guard.seen
    # Each container is two entries, its original (whose identity the guard follows) and its copy on top: no tuple
    # per container. A long list of leaves (token ids) is copied but not pushed: nothing in it to look at.
    stack: list[Any] = [root, top]
    while stack:
        node = stack.pop()
        if node is EXIT:
            guard.leave()
            continue
        original = stack.pop()
        entered = False
        items = node.items() if type(node) is dict else enumerate(node)
        for key, item in items:
            cls = type(item)
            # By exact type first: three isinstance calls per leaf (a token, a logprob) were a tenth of the walk.
            if cls is not dict and cls is not list and not isinstance(item, _COPIED):
                continue
            if not entered:
                guard.enter(original)
                stack.append(EXIT)
                entered = True
            ident = id(item)
            again = ident in seen
            if isinstance(item, dict) and is_envelope(item):
                # Decoded, never walked: reached again, it costs the elements its first decoding yielded, counted
                # before it is decoded again (not its few members).
                where = functools.partial(guard.path, key)
                if again:
                    guard.decoding(ident, where)
                else:
                    seen.add(ident)
                array = node[key] = reader.decode_at(item, where)
                if not again:
                    guard.decoded(ident, array.size)
                continue
            if again:
                guard.child(item, key)  # before anything is made of it again
            else:
                seen.add(ident)
            if isinstance(item, dict):
                copied: Any = dict(dict.items(item))
            elif isinstance(item, list):
                copied = list(item) if cls is list else copy_list(item)
            else:
                copied = _TupleList(item)
                tuples = True
            node[key] = copied
            if copied and (cls is not list or len(item) < _LONG_LIST or holds_any(item, _COPIED)):
                stack.append(item)
                stack.append(copied)
    return top, tuples


def _is_container(value: object) -> bool:
    # By identity, not a set lookup: that would hash the class, which an unhashable one (see r3wire._typeset) refuses.
    cls = type(value)
    return cls is dict or cls is list or cls is _TupleList


def _tuples_back(root: Any) -> Any:
    """Turn every :class:`_TupleList` of a decoded copy back into a tuple, innermost first."""
    if not _is_container(root):
        return root  # e.g. the array a root envelope decoded to
    order: list[Any] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        items = node.values() if type(node) is dict else node
        stack.extend(item for item in items if _is_container(item))
    for node in reversed(order):  # every container after all of its descendants
        items = list(node.items()) if type(node) is dict else list(enumerate(node))
        for key, item in items:
            if type(item) is _TupleList:
                node[key] = item.rebuilt()
    return root.rebuilt() if type(root) is _TupleList else root


def _as_text(data: object) -> bytes | bytearray | memoryview | str:
    """JSON text as given (see :func:`~r3wire._validate.as_text`).

    Raises:
        DecodeError: not text, or a buffer that is not contiguous bytes.
    """
    return as_text(data, "$", "JSON text (bytes-like or str) or a parsed document (dict, list or tuple)")


def loads(
    data: object,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
) -> Any:
    """Parse JSON, turning every r3wire envelope in it into a NumPy array.

    An object whose ``schema`` is ``"r3wire.routes"``, ``"r3wire.array"`` or ``"r3wire.logprobs"`` is decoded
    strictly, wherever it is (the whole document included), with :func:`~r3wire.decode_routes`,
    :func:`~r3wire.decode_array` or :func:`~r3wire.decode_logprobs`; a malformed one is an error, not left as a
    dict, and so is one with a member name twice (JSON parsers keep one of them silently). Every other object
    stays a dict: the seed's unversioned ``{data, shape, dtype}`` envelope and other wire formats are not
    recognised, since nothing in them says they are routes. Decoded arrays are writable and never share memory
    with the input (each is a view of the buffer its base64 was decoded into, not of the text).
    Text that ``orjson.loads`` refuses is always refused.

    Args:
        data: the JSON text, as any bytes-like object (bytes, bytearray, memoryview, a NumPy uint8 array; no
            copy is made) or ``str``; or a document already parsed (what ``httpx``'s or ``aiohttp``'s
            ``.json()`` return), whose envelopes are decoded into a copy of its dicts, lists and tuples: a container
            referenced from several places is copied (and an envelope decoded) once per place, as its JSON text
            would parse, within the bound :class:`r3wire._walk.Guard` sets (2**20 items made again, or 16 times
            the document's own; an envelope's elements count as items, once as the document's own and again each
            time it is decoded again).
        num_experts: the model's expert count: every routes envelope must agree with it (ids below it, and its
            own ``num_experts`` equal when present).
        max_elements: refuse any envelope declaring more elements than this, before decoding it; the decoders'
            default when omitted.

    Returns:
        The document, with arrays in place of envelopes.

    Raises:
        DecodeError: the text is not valid JSON (a string that is not UTF-8, or a number beyond a double's range
            such as ``1e400``, is named at its path), or an envelope in it is malformed, or a parsed document holds a
            reference cycle or shares containers past that limit; the field is a path such as
            ``$.choices[0].routed_experts.shape``.
        UnsupportedVersionError: an envelope's schema version is not one this release reads.
        R3WireError: ``num_experts`` or ``max_elements`` is invalid.
    """
    num_experts = optional_num_experts(num_experts)
    max_elements = optional_max_elements(max_elements)
    if data is None or isinstance(data, (bool, int, float)):  # a parsed document that is a scalar
        return data
    if isinstance(data, (dict, list, tuple)):
        reader = _Reader(data, raw=None, blobs={}, num_experts=num_experts, max_elements=max_elements)
        decoded, tuples = _copy_decoded(data, reader)
        return _tuples_back(decoded) if tuples else decoded
    text = _as_text(data)
    if not isinstance(text, str):
        cut, blobs = _cut_blobs(text)
        if blobs:
            try:
                root = parse_json(cut)
            except (orjson.JSONDecodeError, DecodeError):
                pass  # the shortened text fails exactly when the original does: parse that for the wording
            else:
                reader = _Reader(
                    root, raw=memoryview(text), blobs=blobs, num_experts=num_experts, max_elements=max_elements
                )
                try:
                    return reader.run(cut)
                except _CutMismatchError:
                    pass
    try:
        root = parse_json(text)
    except orjson.JSONDecodeError as exc:
        raise DecodeError.make("$", "valid JSON", f"invalid JSON: {exc}", raw=True) from exc
    # No envelope can hide in a document that never spells "r3wire." (only a \u escape could spell it).
    if not _has(text, b"r3wire.") and not _has(text, b"\\u"):
        return root
    reader = _Reader(root, raw=None, blobs={}, num_experts=num_experts, max_elements=max_elements)
    return reader.run(text)
