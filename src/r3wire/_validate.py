"""Checks shared by every reader and writer: integers, shapes, sizes and the JSON object itself.

Each check raises the caller's error class with a message of one shape: ``<field> must be <expected>, got <got>``.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeGuard

import numpy as np
import orjson

from r3wire._jsontext import parse_json, string_end
from r3wire._walk import copy_list, own_len
from r3wire.errors import DecodeError, R3WireError, describe

__all__ = [
    "DEFAULT_MAX_ELEMENTS",
    "MAX_DIM",
    "MAX_EXTENT",
    "MAX_NDIM",
    "Text",
    "as_text",
    "byte_buffer",
    "byte_text",
    "check_element_count",
    "check_int",
    "check_keys",
    "check_shape",
    "extent",
    "load_json",
    "load_object",
    "optional_max_elements",
    "plain_str",
]

# numpy 1.x allows at most 32 dimensions; nothing on the wire needs more.
MAX_NDIM: Final = 32
# A dimension must fit a signed 64-bit integer so every reader can hold it; the data length bounds the product.
MAX_DIM: Final = (1 << 63) - 1
# The product of a shape's non-zero dimensions, times the widest element (8 bytes), must fit a signed 64-bit
# integer: NumPy refuses even an empty array beyond that ("array is too big"), and so would any reader in C.
MAX_EXTENT: Final[int] = MAX_DIM // 8
DEFAULT_MAX_ELEMENTS: Final[int] = 1 << 30
"""The element limit every decoder applies when the caller passes ``max_elements=None``: 2**30 elements.

It holds the largest real trajectory with room to spare (1M tokens x 94 layers x top-8 is 0.70 x 2**30; 1M x 64
layers x top-8 = 2**29), and a decoder never allocates more than this many elements (4 GiB of int32 routes,
8 GiB of float64) for one array, whatever a few bytes of header claim. Pass a larger ``max_elements`` to raise it.
"""


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """True for Python and NumPy integers, false for bools (which are ints in Python but never a count) and for
    np.timedelta64 (an np.signedinteger, but a duration with a unit: int() of it raises or drops the unit)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_, np.timedelta64))


def check_int(
    value: object,
    field: str,
    *,
    minimum: int,
    maximum: int,
    error: type[R3WireError] = DecodeError,
) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``minimum .. maximum``.

    Raises:
        R3WireError: of class ``error``, naming ``field``.
    """
    if not is_int(value):
        raise error.make(field, f"an integer in {minimum}..{maximum}", value)
    number = int(value)
    if not minimum <= number <= maximum:
        raise error.make(field, f"an integer in {minimum}..{maximum}", number)
    return number


def optional_max_elements(value: object) -> int:
    """A caller's ``max_elements`` limit: an integer in ``0 .. 2**63``, or ``None`` for :data:`DEFAULT_MAX_ELEMENTS`.

    Raises:
        R3WireError: anything else.
    """
    if value is None:
        return DEFAULT_MAX_ELEMENTS
    return check_int(value, "max_elements", minimum=0, maximum=1 << 63, error=R3WireError)


def check_shape(
    value: object,
    field: str,
    *,
    ndim: int | None,
    error: type[R3WireError] = DecodeError,
    minimums: Sequence[int] = (),
) -> tuple[int, ...]:
    """Return ``value`` as a tuple of non-negative ints, with ``ndim`` entries when ``ndim`` is given.

    Each entry is an integer in ``minimums[i] .. 2**63 - 1`` (``minimums`` defaults to 0 per axis; routes pass
    ``(0, 1, 1)``: a routes array has at least one layer and one slot), and the product of the non-zero entries
    is at most :data:`MAX_EXTENT`, so every dimension is bounded whatever the others are (``[2**62, 0, 2]`` holds
    no element but is no array any reader can make). A JSON array arrives as a ``list``; in-process callers may
    pass a tuple and NumPy integers.

    Raises:
        R3WireError: of class ``error``, naming ``field`` or the offending ``field[i]``.
    """
    if not isinstance(value, (list, tuple)):
        expected = f"an array of {ndim} non-negative integers" if ndim is not None else "an array of integers"
        raise error.make(field, expected, value)
    # One snapshot, checked and returned: a subclass's __len__ or __getitem__ cannot disagree with its items.
    shape = tuple(copy_list(value)) if type(value) is not tuple else value
    if ndim is not None and len(shape) != ndim:
        raise error.make(
            field,
            f"an array of {ndim} non-negative integers",
            f"{len(shape)} entries: {describe(list(shape))}",
            raw=True,
        )
    if len(shape) > MAX_NDIM:
        raise error.make(field, f"at most {MAX_NDIM} dimensions", f"{len(shape)}", raw=True)
    # Fast path for the common case (plain ints, in range); anything else goes through check_int for its error.
    if not all(type(dim) is int and 0 <= dim <= MAX_DIM for dim in shape) or any(map(operator.gt, minimums, shape)):
        lows = [*minimums, *[0] * (len(shape) - len(minimums))]
        shape = tuple(
            check_int(dim, f"{field}[{i}]", minimum=lows[i], maximum=MAX_DIM, error=error)
            for i, dim in enumerate(shape)
        )
    if extent(shape) > MAX_EXTENT:
        raise error.make(
            field,
            f"a shape whose non-zero dimensions multiply to at most {MAX_EXTENT}",
            f"{list(shape)}",
            raw=True,
        )
    return shape


def extent(shape: Sequence[int]) -> int:
    """The product of the non-zero dimensions of ``shape``: its element count, or for an empty array the count
    it would have without its zero dimensions. Limits apply to this, so a zero cannot hide a huge dimension."""
    count = math.prod(shape)
    return count if count else math.prod(dim for dim in shape if dim)


def check_element_count(
    shape: Sequence[int],
    max_elements: int | None,
    field: str = "shape",
    *,
    error: type[R3WireError] = DecodeError,
) -> int:
    """Return the element count of ``shape``, refusing a shape whose :func:`extent` exceeds ``max_elements``.

    ``None`` means :data:`DEFAULT_MAX_ELEMENTS`. A non-empty shape's extent is its element count; an empty one is
    held to the same limit through its non-zero dimensions (``[2**40, 0, 8]`` is refused by default).

    Raises:
        DecodeError: the extent exceeds the limit (``error``: the caller's class, e.g. batching's ``R3WireError``).
    """
    limit = DEFAULT_MAX_ELEMENTS if max_elements is None else max_elements
    span = extent(shape)
    if span > limit:
        count = math.prod(shape)
        default = " (the default; pass a larger max_elements to raise it)" if limit == DEFAULT_MAX_ELEMENTS else ""
        elements = f"{count} elements" if count else f"no elements, {span} without its zero dimensions"
        raise error.make(
            field,
            f"at most max_elements={limit} elements{default}",
            f"{list(shape)} ({elements})",
            raw=True,
        )
    return math.prod(shape)


def plain_str(value: object) -> object:
    """A ``str`` subclass (``np.str_``, or a caller's own) as a plain ``str`` of its characters; anything else as it
    is. Every name a caller or a payload gives (a schema, a dtype) is compared as this: a subclass's own ``__eq__``,
    ``__hash__`` or ``__str__`` could make ``"zzz"`` equal a valid name, or a valid name unequal to itself."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def str_collection(
    value: object, field: str, expected: str, *, most: int, error: type[R3WireError] = R3WireError
) -> tuple[str, ...]:
    """A collection of names a caller gives (``routes_keys``, ``dtypes``), read once and at most ``most`` of them,
    each a ``str`` (a subclass as its characters). A lone string is one name (its characters are almost surely not
    meant); bytes, a bytearray or a memoryview, whose items are ints, are refused, as is anything not iterable.

    Raises:
        R3WireError (or ``error``): naming ``field``, or ``field[i]`` for an item that is not a string.
    """
    if isinstance(value, str):
        return (str.__str__(value),)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise error.make(field, expected, value)
    try:
        # Bounded before anything is built: range(10**12) is a collection too.
        items = list(itertools.islice(iter(value), most + 1))  # type: ignore[call-overload]
    except (TypeError, ValueError, NotImplementedError):
        raise error.make(field, expected, value) from None
    if len(items) > most:
        raise error.make(field, expected, f"more than {most} items", raw=True)
    names = []
    for i, item in enumerate(items):
        name = plain_str(item)
        if not isinstance(name, str):
            raise error.make(f"{field}[{i}]", f"a string ({expected})", item)
        names.append(name)
    return tuple(names)


# Buffer formats whose items are single bytes (struct syntax; a byte-order prefix changes nothing for them).
_BYTE_FORMATS: Final = frozenset({"B", "b", "c"})

Text = str | bytes | bytearray | memoryview


def as_text(data: object, field: str | None, expected: str, *, buffers: bool = True) -> Text:
    """Text as every reader here takes it, without copying bytes: ``str``, ``bytes`` and ``bytearray`` as they are,
    a ``str`` subclass (``np.str_``) as a plain ``str`` (orjson reads only ``str`` itself), and with ``buffers``
    any other buffer of bytes (memoryview, NumPy uint8 array, mmap, ``array.array('B')``, a ``bytes`` subclass)
    as a 1-d byte view. Without ``buffers`` only a 1-d memoryview of bytes is taken besides the three.

    Buffers of wider items are refused rather than read as their raw bytes: a buffer of ``'I'`` or of object
    pointers is not text, and its ``len()`` counts items, not bytes.

    Raises:
        DecodeError: naming ``field``: not text, a buffer whose items are not bytes, or one not contiguous.
    """
    cls = type(data)
    if cls is str or cls is bytes or cls is bytearray:
        return data  # type: ignore[return-value]  # exactly one of the three
    if isinstance(data, str):
        return str.__str__(data)  # a plain copy of the characters: a subclass may override __str__ itself
    if isinstance(data, (bytes, bytearray)):
        return memoryview(data)  # a subclass (np.bytes_): its bytes, not copied
    if isinstance(data, np.generic) or (not buffers and not isinstance(data, memoryview)):
        # A NumPy scalar has a buffer too: np.uint8(49) is not the text "1".
        raise DecodeError.make(field, expected, cls.__name__, raw=True)
    if isinstance(data, np.ma.MaskedArray):  # its mask is not in its bytes: the hidden bytes would be read as text
        raise DecodeError.make(field, expected, "a numpy.ma.MaskedArray (its mask is not part of its bytes)", raw=True)
    try:
        view = memoryview(data)  # type: ignore[arg-type]  # any object with a buffer; checked here
    except TypeError:
        raise DecodeError.make(field, expected, cls.__name__, raw=True) from None
    except ValueError as exc:  # a released memoryview, a closed mmap
        raise DecodeError.make(field, expected, f"{cls.__name__} ({exc})", raw=True) from None
    if view.format.lstrip("@=<>!") not in _BYTE_FORMATS or (not buffers and view.ndim != 1):
        got = f"a {view.ndim}-d {cls.__name__} of format {view.format!r}"
        raise DecodeError.make(field, f"{expected}: a 1-d buffer of bytes", got, raw=True)
    if not view.c_contiguous:
        raise DecodeError.make(field, f"{expected}: a contiguous buffer", f"a non-contiguous {cls.__name__}", raw=True)
    if not view.nbytes:
        return memoryview(b"")  # cast() refuses a view with a zero in its shape: empty text is empty text
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


# Buffer formats of plain numbers (struct syntax): memory any bytes may be written over or read as a stream.
# Not '?' (a bool holds only 0 or 1), 'O' (object pointers), 'P', complex or structured formats.
_NUMBER_FORMATS: Final = frozenset("bBchHiIlLqQnNefdg")


def byte_buffer(
    buffer: object, field: str | None, expected: str, *, error: type[R3WireError], writable: bool = False
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The memory of a binary buffer (a frame, a bit stream, an ``out=``) as a 1-d uint8 array sharing it, with its
    writability: every reader and writer of raw bytes takes its buffer here.

    A buffer is taken only when its memory is plain numbers: an object array's memory is pointers (reading it
    shows heap addresses; writing over it crashes the interpreter at the next access), a bool array's must hold
    0 or 1 only, and a masked array's mask is no part of its bytes. It must be C-contiguous, and writable with
    ``writable``.

    Raises:
        error: naming ``field`` with ``expected``, for anything else (``str``, a NumPy scalar, a released or closed
            buffer, a non-contiguous or read-only one, another format).
    """
    cls = type(buffer)
    # A NumPy scalar has a buffer too (np.uint16(7) is no frame), except np.bytes_, which is bytes.
    if isinstance(buffer, (str, np.ma.MaskedArray)) or (
        isinstance(buffer, np.generic) and not isinstance(buffer, np.bytes_)
    ):
        what = "a masked array (its mask is no part of its bytes)" if isinstance(buffer, np.ndarray) else cls.__name__
        raise error.make(field, expected, what, raw=True)
    try:
        view = memoryview(buffer)  # type: ignore[arg-type]  # any object with a buffer; checked here
    except (TypeError, ValueError, BufferError) as exc:  # ValueError: released or closed; BufferError: strided
        raise error.make(field, expected, f"{cls.__name__} ({exc})", raw=True) from None
    with view:
        if view.format.lstrip("@=<>!") not in _NUMBER_FORMATS:
            what = "object pointers" if "O" in view.format else "not plain numbers"
            raise error.make(field, expected, f"{cls.__name__} of format {view.format!r} ({what})", raw=True)
        if not view.c_contiguous:
            raise error.make(field, expected, f"a non-contiguous {cls.__name__}", raw=True)
        if writable and view.readonly:
            raise error.make(field, expected, f"a read-only {cls.__name__}", raw=True)
    # Any: the stubs disagree across NumPy releases on which buffer types frombuffer takes; checked above.
    source: Any = buffer
    try:
        raw: np.ndarray[Any, np.dtype[np.uint8]] = np.frombuffer(source, dtype=np.uint8)
    except (TypeError, ValueError, BufferError) as exc:  # a buffer that changed since it was checked
        raise error.make(field, expected, f"{cls.__name__} ({exc})", raw=True) from None
    return raw


def byte_text(payload: Text, field: str | None) -> Text:
    """``payload`` ready to be measured, sliced and decoded byte by byte: a memoryview (1-d, contiguous, of bytes)
    or a ``str`` subclass as :func:`as_text` gives it; ``str``, ``bytes`` and ``bytearray`` as they are.

    Raises:
        DecodeError: naming ``field``, for a non-contiguous, multi-dimensional or wider-than-a-byte memoryview.
    """
    return as_text(payload, field, "text", buffers=False)


def load_json(payload: str | bytes | bytearray | memoryview, *, what: str = "payload", root: str = "$") -> Any:
    """Parse JSON text (``str`` or bytes-like) of any value: orjson's strictness (UTF-8, no NaN, bounded depth),
    every integer exact (:func:`~r3wire._jsontext.parse_json`), and no object in it may name a member twice.
    ``root`` names the document in the path of an error about an integer (``""``: the member names alone).

    Duplicates are refused because JSON parsers disagree on which value wins (orjson and Python keep the last,
    others the first), so two readers of one payload could decode different arrays.

    Raises:
        DecodeError: the text is not valid JSON, names a member twice, or has an integer of more than
            :data:`~r3wire._jsontext.MAX_INT_DIGITS` digits.
    """
    payload = as_text(payload, None, f"JSON text ({what})")
    try:
        parsed = parse_json(payload, root=root)
    except orjson.JSONDecodeError as exc:
        raise DecodeError.make(None, f"JSON text ({what})", f"invalid JSON: {exc}", raw=True) from exc
    # A memoryview has no find(): scan a copy (the rare input type; str and bytes are scanned in place).
    duplicate = _repeated_member(payload.tobytes() if isinstance(payload, memoryview) else payload, parsed)
    if duplicate is not None:
        raise DecodeError.make(
            None, f"JSON text naming each member once ({what})", f"member {describe(duplicate)} twice", raw=True
        )
    return parsed


def member(mapping: Mapping[Any, Any], key: str, *, what: str = "payload") -> Any:
    """``mapping``'s value for ``key``, or None: a dict (a subclass too) read from its storage, as orjson reads it;
    another mapping through its own ``get``, whose failure is reported, not leaked.

    Raises:
        DecodeError: a mapping's ``get`` raised.
    """
    if isinstance(mapping, dict):
        return dict.get(mapping, key)
    try:
        return mapping.get(key)
    except Exception as exc:  # the caller's own mapping code: reported, not leaked
        raise _mapping_raised(mapping, exc, what) from exc


def member_items(mapping: Mapping[Any, Any], *, what: str = "payload") -> Iterable[tuple[Any, Any]]:
    """``mapping``'s members: a dict (a subclass too) read from its storage, as orjson reads it; another mapping
    through its own ``items``, read once here, whose failure is reported, not leaked.

    Raises:
        DecodeError: a mapping's ``items`` raised.
    """
    if isinstance(mapping, dict):
        return dict.items(mapping)
    try:
        return list(mapping.items())
    except Exception as exc:  # the caller's own mapping code: reported, not leaked
        raise _mapping_raised(mapping, exc, what) from exc


def _mapping_raised(mapping: object, exc: Exception, what: str) -> R3WireError:
    """The refusal of a caller's mapping whose own method raised ``exc`` (reported, never leaked)."""
    return DecodeError.make(None, f"a JSON object ({what})", f"{type(mapping).__name__} that raised {exc!r}", raw=True)


def load_object(payload: object, *, what: str = "payload") -> Mapping[str, Any]:
    """Return ``payload`` as a JSON object: a mapping as is, or JSON text (``str`` or bytes-like) parsed by
    :func:`load_json` (so text naming a member twice is refused).

    Raises:
        DecodeError: the text is not valid JSON, not an object, or names a member twice.
    """
    if type(payload) is dict:
        return payload
    if isinstance(payload, Mapping):
        # A snapshot: a subclass's or a foreign mapping's __len__ could hide members the checks must see.
        try:
            return dict(payload.items())
        except Exception as exc:  # the caller's own mapping code: reported, not leaked
            raise _mapping_raised(payload, exc, what) from exc
    if isinstance(payload, (str, bytes, bytearray, memoryview)):  # other buffers are not taken for JSON text here
        parsed = load_json(payload, what=what, root="")
        if not isinstance(parsed, dict):
            raise DecodeError.make(None, f"a JSON object ({what})", f"a JSON {type(parsed).__name__}", raw=True)
        return parsed
    raise DecodeError.make(None, f"a JSON object or its text ({what})", type(payload).__name__, raw=True)


# Where a scan of valid JSON must stop: a string's opening quote or a bracket.
_TOKEN_STR: Final = re.compile(r'["\[\]{}]')
_TOKEN_BYTES: Final = re.compile(rb'["\[\]{}]')
# A member name is a string followed by a colon (JSON whitespace only: the text has been parsed already).
_COLON_STR: Final = re.compile(r"[ \t\n\r]*:")
_COLON_BYTES: Final = re.compile(rb"[ \t\n\r]*:")
# Texts this short are first checked by counting colons (C loops, ~0.3 ns a byte): cheaper than the token
# scan's fixed cost below this size, dearer above it for an envelope, whose megabytes are one string.
_COUNT_COLONS_BELOW: Final = 1 << 14
# Tokens the scan reads before it tries the colon count instead: an envelope has fewer than 20; a document of
# many small objects (a logprobs content list) is checked faster by counting, at C speed, than token by token.
_SCAN_BUDGET: Final = 1024


def _repeated_member(text: str | bytes | bytearray, parsed: object) -> str | None:
    """The first member name that appears twice in one object of ``text`` (valid JSON, parsed as ``parsed``), in
    text order: the name whose second appearance comes first, as :func:`_scan` defines it.

    A text of few tokens (an envelope, its megabytes one string) is decided by the token scan; counting colons
    proves there is none in the common case; anything else (a colon spelled ``\\u003a``, nesting deeper than orjson
    writes, an integer beyond 64 bits, a repeat) is read once more by the stdlib's C parser
    (:func:`_first_repeat`). The token scan, Python work per token (seconds for tens of megabytes), remains only
    where that parser fails (nesting past its recursion limit).
    """
    if len(text) > _COUNT_COLONS_BELOW:
        scanned = _scan(text, budget=_SCAN_BUDGET)
        if scanned is not False:
            return scanned
    if _proved_distinct(text, parsed):
        return None
    found = _first_repeat(text)
    if isinstance(found, _Undecided):
        scanned = _scan(text, budget=None)
        assert scanned is not False  # without a budget the scan always finishes
        return scanned
    return found


def _proved_distinct(text: str | bytes | bytearray, parsed: object) -> bool:
    """True when counting colons proves that no object of ``text`` names a member twice (False: not proved).

    Every member is followed by a literal colon; the other colons are inside strings. ``orjson.dumps(parsed)``
    holds the same strings minus those of the members a repeated name dropped, so the text has more colons than
    it exactly when a member was dropped, provided no string spells a colon as an escape (``\\u003a``).
    """
    data: Any = text
    colons = data.count(":" if isinstance(text, str) else b":")
    if isinstance(parsed, dict) and colons <= len(parsed):  # a flat object such as an envelope: no dumps needed
        return True
    escape = ("\\u003a", "\\u003A") if isinstance(text, str) else (b"\\u003a", b"\\u003A")
    if escape[0] in data or escape[1] in data:
        return False
    try:
        again = orjson.dumps(parsed)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: let the scan decide
        return False
    return bool(colons <= again.count(b":"))


class _Undecided:
    """What :func:`_first_repeat` returns when the stdlib parser could not read the text."""


_UNDECIDED: Final = _Undecided()


class _Repeat:
    """The first repeated name, in text order, in an object the stdlib parser has read, or in the values it holds:
    what such an object becomes in :func:`_first_repeat` (every other object becomes None)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


# The values that are or may hold a _Repeat; the others (None for an object, True for a number, str) never do.
_CARRIERS: Final = frozenset({list, _Repeat})
_VALUE: Final = operator.itemgetter(1)


def _first_repeat(text: str | bytes | bytearray) -> str | _Undecided | None:
    """:func:`_scan`'s answer for ``text`` (valid JSON), read by the stdlib's C parser, or :data:`_UNDECIDED`.

    The parser calls the hook once per object, when the object closes (after every object it holds). An object
    with no repeated name, holding none, becomes None and every number True (so the tree is small, and no
    integer of thousands of digits is converted); one that does becomes a :class:`_Repeat` of the first name in
    text order: the first of its members whose name repeats an earlier one or (after that name) whose value holds
    a repeat. Only after a first repeat was met does each object look through its values (its arrays in C).

    Nesting past the parser's recursion limit (about 1000 levels, with the caller's frames) is left undecided,
    as is anything else the parser refuses: the limit is not raised, being the whole process's, not this call's.
    """
    try:
        data = text if isinstance(text, str) else str(text, "utf-8")
    except UnicodeDecodeError:
        return _UNDECIDED
    met = False  # a repeat was met: from then on an object's values may hold one

    def on_object(pairs: list[tuple[str, Any]]) -> _Repeat | None:
        nonlocal met
        if len(dict(pairs)) == len(pairs):
            if not met:
                return None
            values = list(map(_VALUE, pairs))
            for value in itertools.compress(values, map(_CARRIERS.__contains__, map(type, values))):
                if type(value) is _Repeat:
                    repeat: _Repeat = value
                    return repeat
                # An array that holds no array and no _Repeat (most: of numbers, of strings) is passed in C.
                if any(map(_CARRIERS.__contains__, map(type, value))) and (held := _held(value)) is not None:
                    return _Repeat(held)
            return None
        look = met  # its values can hold a repeat only if one was met before
        met = True
        seen: set[str] = set()
        for name, value in pairs:
            if name in seen:
                return _Repeat(name)
            seen.add(name)
            if look and type(value) in _CARRIERS and (held := _held(value)) is not None:
                return _Repeat(held)
        raise AssertionError("unreachable: dict() dropped a repeated name")

    try:
        root = json.loads(data, object_pairs_hook=on_object, parse_int=bool, parse_float=bool)
    except (RecursionError, ValueError):
        return _UNDECIDED
    return _held(root) if type(root) in _CARRIERS else None


def _held(value: Any) -> str | None:
    """The name of the first :class:`_Repeat` that ``value`` (one, or an array) is or holds, in text order."""
    if type(value) is _Repeat:
        return value.name
    if not any(map(_CARRIERS.__contains__, map(type, value))):  # most arrays: decided in C
        return None
    # The items of each array that are or may hold a _Repeat, in order (selected in C).
    stack = [itertools.compress(value, map(_CARRIERS.__contains__, map(type, value)))]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif type(item) is list:
            stack.append(itertools.compress(item, map(_CARRIERS.__contains__, map(type, item))))
        else:
            name: str = item.name
            return name
    return None


def _scan(text: str | bytes | bytearray, *, budget: int | None) -> str | Literal[False] | None:
    """The first name repeated within one object of ``text``, None if there is none, False if ``budget`` tokens
    were read without finishing."""
    data: Any = text  # Any: one loop body for str and bytes
    search: Any
    match_colon: Any
    quote: Any
    backslash: Any
    opening: Any
    if isinstance(text, str):
        search, match_colon, quote, backslash, opening = _TOKEN_STR.search, _COLON_STR.match, '"', "\\", "[{"
    else:
        search, match_colon, quote, backslash, opening = _TOKEN_BYTES.search, _COLON_BYTES.match, b'"', b"\\", b"[{"
    objects: list[set[str] | None] = []  # the names seen in each open container (None for an array)
    pos = 0
    tokens = 0
    while (match := search(data, pos)) is not None:
        tokens += 1
        if budget is not None and tokens > budget:
            return False
        start = match.start()
        char = data[start : start + 1]
        if char == quote:
            pos = string_end(data, start, quote, backslash)
            if objects and (names := objects[-1]) is not None and match_colon(data, pos):
                raw = data[start:pos]
                name: str = (
                    orjson.loads(raw)
                    if backslash in raw
                    else str(raw[1:-1])
                    if isinstance(raw, str)
                    else raw[1:-1].decode()
                )
                if name in names:
                    return name
                names.add(name)
        elif char in opening:
            objects.append(set() if char in ("{", b"{") else None)
            pos = start + 1
        else:
            objects.pop()
            pos = start + 1
    return None


def check_keys(
    obj: Mapping[Any, Any],
    *,
    required: Sequence[str],
    optional: Sequence[str] = (),
) -> None:
    """Require every key in ``required`` (named in that order) and refuse any key outside ``required`` and
    ``optional``; an unknown key is reported as the payload as a whole (``field`` None).

    Raises:
        DecodeError: a key is missing, unknown, or not a string.
    """
    for key in required:
        if key not in obj:
            raise DecodeError.make(key, "present", "no such key", raw=True)
    if own_len(obj) > len(required):  # a dict subclass by what it holds: its __len__ may lie
        allowed = set(required).union(optional)
        unknown = [key for key in obj if not (isinstance(key, str) and key in allowed)]
        if unknown:
            shown = ", ".join(describe(k)[:40] for k in unknown[:5])
            raise DecodeError.make(
                None,
                f"an object with keys {sorted(allowed)}",
                f"unknown key(s) {shown}",
                raw=True,
            )
