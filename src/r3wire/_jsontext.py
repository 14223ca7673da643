"""JSON text parsed by orjson with every integer exact (wire-format.md §13: an integer token's value is the exact
integer its digits spell).

orjson reads an integer token outside ``-2**63 .. 2**64 - 1`` as a float (rounded: ``18446744073709551617``
becomes ``1.8446744073709552e+19``) and refuses one of about 310 digits or more (infinite as a double) as invalid
JSON. Such tokens are rare, so orjson parses every document first and a cheap test decides whether one could be
there; only then is the text parsed again with those tokens read exactly (orjson still parses the rest, so the
strictness, the depth limit and every other value stay orjson's).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from itertools import compress
from typing import Any, Final

import numpy as np
import orjson

from r3wire._jsonpath import json_path
from r3wire._utf8 import not_utf8_at
from r3wire.errors import DecodeError

__all__ = ["MAX_INT_DIGITS", "parse_json", "string_end"]

# An integer token of more digits is refused: Python converts decimal text to int in quadratic time and refuses
# more than 4300 digits by default (sys.set_int_max_str_digits), and no r3wire field holds such a number.
MAX_INT_DIGITS: Final = 4300
# orjson reads 18 digits or fewer exactly; 19 digits can already be below -2**63 (read as a float).
_LONG_DIGITS: Final = 19
# orjson's floats for integers it could not read: every such integer has a magnitude of at least 2**63.
_ROUNDED_FROM: Final = float(2**63)
# Items of the parsed document looked at before the text is scanned instead: an envelope (a few members, the
# megabytes of base64 in one string) is decided by its values in microseconds, a long list by the text.
_WALK_BUDGET: Final = 512
# Bytes whose high nibble is 3 ("0"-"9" and ":;<=>?"): an aligned 8-byte word of them is where a run of 19
# digits must have at least one word.
_HIGH_NIBBLES: Final = np.uint64(0xF0F0F0F0F0F0F0F0)
_DIGIT_NIBBLES: Final = np.uint64(0x3030303030303030)
# The characters before a digit run that matter: after ".", "e", "E", "+" it is a fraction's or an exponent's, after
# a quote a string's first characters (a token never directly follows one); "-" is a sign, unless after "e".
_DOT, _LOWER_E, _UPPER_E, _PLUS, _QUOTE, _MINUS = b'.eE+"-'
# The text looked at around the first word of digits of a run: the 8 bytes before it (where the run starts) and
# two more (a minus sign and an exponent's "e"); after it, enough for the run's length to tell 19 digits from 20.
_WINDOW_BEFORE: Final = 10
_WINDOW_AFTER: Final = 24
_SIX: Final = np.uint64(0x0606060606060606)
# Words read little-endian on any machine: the text's last byte of a word is its most significant.
_WORD: Final = np.dtype("<u8")
_LOW_SEVEN: Final = np.uint64(0x7F7F7F7F7F7F7F7F)
_DIGIT_LIMIT: Final = np.uint64(0x7676767676767676)  # 0x80 - 10: a byte of 10 or more reaches the high bit
_HIGH_BITS: Final = np.uint64(0x8080808080808080)
_THREE: Final = np.uint64(3)
_BYTE: Final = np.uint64(0xFF)
_WINDOW_BEFORE_ALIGNED: Final = 16  # _WINDOW_BEFORE rounded up to whole words
# Characters of ``str`` text encoded at a time for the scan (a multiple of 8, so that words keep their alignment).
_PIECE: Final = 1 << 16
# Words handled at a time by the first, whole-text step of the scan (256 KiB buffers).
_BLOCK_WORDS: Final = 1 << 15
_PAD: Final = np.full(_WINDOW_AFTER, ord(" "), np.uint8)
# An integer token of 19 digits or more, outside strings (the text between two strings is searched).
_TOKEN_BYTES: Final = re.compile(rb"(?<![0-9.eE+\-])-?[1-9][0-9]{18,}(?![0-9.eE])")
_TOKEN_STR: Final = re.compile(_TOKEN_BYTES.pattern.decode())


def parse_json(text: str | bytes | bytearray | memoryview, *, root: str = "$") -> Any:
    """``orjson.loads(text)`` with every integer token read exactly, as a Python ``int``.

    Args:
        text: JSON text.
        root: how the document is named in the path of an error (``"$"``, or ``""`` for an envelope's own
            member names: ``shape[0]``).

    Raises:
        orjson.JSONDecodeError: the text is not valid JSON (orjson's own error, for its wording).
        DecodeError: an integer token has more than :data:`MAX_INT_DIGITS` digits, a string is not UTF-8 (a
            lone surrogate, escaped or not, or bytes that are not UTF-8), or a number with a fraction or exponent
            is beyond a double's range (``1e400``: JSON gives it no value, and a reader that took it for infinity
            would differ from one that refuses it); the field is its path.
    """
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        # orjson refuses an integer of 310 digits or more: valid JSON all the same, read here if that is why.
        long_ints = _scan(text)
        if long_ints:
            exact = _parse_exact(text, root)
            if exact is not _INVALID:
                return exact
        # orjson names no location for a string that is not UTF-8 or a number out of a double's range.
        if _may_be_located(text, error.pos):
            _raise_located(text, root, long_ints=long_ints, pos=error.pos)
        raise
    if not _may_be_rounded(text, parsed):
        return parsed
    exact = _parse_exact(text, root)
    # _INVALID here: no integer token outside strings after all (the scan also sees a string's digits).
    return parsed if exact is _INVALID else exact


class _Invalid:
    """Marks text that did not parse."""


_INVALID: Final = _Invalid()


def _may_be_rounded(text: str | bytes | bytearray | memoryview, parsed: Any) -> bool:
    """False when no integer in ``parsed`` can have been rounded by orjson; True when one may have been.

    orjson makes a float of an integer token it cannot hold, always of magnitude 2**63 or more: a small document
    (an envelope) is decided by its values; one with more items than the walk's budget by its text.
    """
    if type(parsed) is float:
        return abs(parsed) >= _ROUNDED_FROM and _scan(text)
    stack = [parsed] if type(parsed) is dict or type(parsed) is list else []
    budget = _WALK_BUDGET
    while stack:
        node = stack.pop()
        items = node.values() if type(node) is dict else node
        budget -= len(items)
        if budget < 0:
            return _scan(text)
        for item in items:
            cls = type(item)
            if cls is float:
                if abs(item) >= _ROUNDED_FROM:
                    return _scan(text)  # or a float written as one (1e300): the text tells
            elif cls is dict or cls is list:
                stack.append(item)
    return False


def _scan(text: str | bytes | bytearray | memoryview) -> bool:
    """Whether ``text`` may hold an integer token of 19 digits or more (never False when it does).

    A run of 19 digits covers at least one whole aligned 8-byte word, and a word of digits only is rare outside
    numbers (1 in 3 million in base64), so such words are found first, for the whole text at once. Around the
    first such word of each run (a window of the text) the run and what precedes it are looked at, still
    vectorised, so that the digits of fractions (``-0.0012345678901234567``, common in logprobs) and exponents
    are not taken for integers.
    """
    if not isinstance(text, str):
        flat = np.frombuffer(text, np.uint8)
        return _scan_bytes(flat, 0, flat.size)
    if not text.isascii():  # rare: one copy (with lone surrogates orjson refuses the text; a scan still answers)
        flat = np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8)
        return _scan_bytes(flat, 0, flat.size)
    # ASCII text, encoded piece by piece: one copy of megabytes costs page faults, small ones reuse warm memory.
    # Each piece also holds the text just before and after its own part (the windows) and words keep their
    # alignment in the text, so each run's first word is looked at in exactly one piece.
    for start in range(0, len(text), _PIECE):
        head = max(start - _WINDOW_BEFORE_ALIGNED, 0)
        flat = np.frombuffer(text[head : start + _PIECE + _WINDOW_AFTER + 8].encode(), np.uint8)
        if _scan_bytes(flat, start - head, start - head + _PIECE):
            return True
    return False


def _scan_bytes(flat: np.ndarray[Any, np.dtype[np.uint8]], low: int, high: int) -> bool:
    """:func:`_scan` of the runs of ``flat`` whose first aligned word starts at a byte in ``low .. high - 1``."""
    words = flat[: flat.size - flat.size % 8].view(_WORD)
    found = _loose_digit_words(words)
    if low or high < flat.size:
        found = found[(found >= low // 8) & (found < (high + 7) // 8)]
    if not found.size:
        return False
    if found[0] == 0:  # a word of digits at the very start has no word before it: pad (rare: a bare number)
        padded = np.concatenate([_PAD[:8], flat])
        return _scan_bytes(padded, low + 8, high + 8)
    found = found[_digits_only(words[found]) & ~_digits_only(words[found - 1])]  # the first word of each run
    if not found.size:
        return False
    # Most runs are fractions (logprobs): the character before the run, the last non-digit of the word before,
    # rules them out. Bitwise on the words: 0x80 in each byte that is not a digit (no carry crosses a byte).
    prev = words[found - 1]
    other = prev ^ _DIGIT_NIBBLES
    other = (((other & _LOW_SEVEN) + _DIGIT_LIMIT) | other) & _HIGH_BITS
    # The highest such bit (never 0: the word is not digits only); float64 is exact on these sparse bit patterns.
    shift = (np.log2(other.astype(np.float64)).astype(np.uint64) >> _THREE) << _THREE
    before = ((prev >> shift) & _BYTE).astype(np.uint8)
    found = found[_token_may_follow(before)]
    at = found * 8
    if not at.size:
        return False
    if at[0] < _WINDOW_BEFORE or at[-1] + _WINDOW_AFTER > flat.size:  # near an end: the text padded as if by spaces
        flat = np.concatenate([_PAD[:_WINDOW_BEFORE], flat, _PAD[:_WINDOW_AFTER]])
        at += _WINDOW_BEFORE
    # Each row: the text from _WINDOW_BEFORE bytes before a word (a view; the rows are copied once).
    window = np.lib.stride_tricks.sliding_window_view(flat, _WINDOW_BEFORE + _WINDOW_AFTER)[at - _WINDOW_BEFORE]
    other = (window - np.uint8(48)) >= 10  # not a digit
    # The 8 bytes before the word hold a non-digit (it is the run's first word): the run starts after the last.
    last = _WINDOW_BEFORE - 1 - np.argmax(other[:, _WINDOW_BEFORE - 1 :: -1], axis=1)
    right = other[:, _WINDOW_BEFORE + 8 :]
    # Where the run goes on past the window it has more than 20 digits anyway.
    end = np.where(right.any(axis=1), _WINDOW_BEFORE + 8 + np.argmax(right, axis=1), other.shape[1])
    length = end - last - 1
    rows = np.arange(window.shape[0])
    before = window[rows, last]
    minus = before == _MINUS
    before2 = window[rows, last - 1]
    exponent = minus & ((before2 == _LOWER_E) | (before2 == _UPPER_E))
    integer = _token_may_follow(before) & ~exponent
    # A non-negative integer of 19 digits is below 2**64: orjson holds it.
    rounded = (length > _LONG_DIGITS) | (minus & (length == _LONG_DIGITS))
    return bool(np.any(integer & rounded))


def _loose_digit_words(words: np.ndarray[Any, np.dtype[np.uint64]]) -> np.ndarray[Any, np.dtype[np.intp]]:
    """The indices of the words whose bytes are all "0"-"?" (a superset of digits, checked later).

    Block by block into small buffers: a temporary the size of the text costs page faults (a 4.6 MB one took
    3 ms right after orjson had parsed the text, 0.4 ms when warm), small ones stay warm.
    """
    if words.size <= _BLOCK_WORDS:
        return np.flatnonzero((words & _HIGH_NIBBLES) == _DIGIT_NIBBLES)
    masked = np.empty(_BLOCK_WORDS, np.uint64)
    hits = np.empty(_BLOCK_WORDS, np.bool_)
    found = []
    for start in range(0, words.size, _BLOCK_WORDS):
        block = words[start : start + _BLOCK_WORDS]
        size = block.size
        np.bitwise_and(block, _HIGH_NIBBLES, out=masked[:size])
        np.equal(masked[:size], _DIGIT_NIBBLES, out=hits[:size])
        if hits[:size].any():
            found.append(np.flatnonzero(hits[:size]) + start)
    return np.concatenate(found) if found else np.empty(0, np.intp)


def _token_may_follow(before: np.ndarray[Any, np.dtype[np.uint8]]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Where a digit run preceded by ``before`` may be an integer token: not a fraction's or an exponent's digits,
    not a string's first characters."""
    other: np.ndarray[Any, np.dtype[np.bool_]] = (
        (before == _DOT) | (before == _LOWER_E) | (before == _UPPER_E) | (before == _PLUS) | (before == _QUOTE)
    )
    return ~other


def _digits_only(words: np.ndarray[Any, np.dtype[np.uint64]]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Which 8-byte words are ASCII digits only: every byte 0x30-0x39 (0x3A-0x3F carry into 0x40 when 6 is added;
    no byte carries into the next once every high nibble is 3)."""
    digits: np.ndarray[Any, np.dtype[np.bool_]] = ((words & _HIGH_NIBBLES) == _DIGIT_NIBBLES) & (
        ((words + _SIX) & _HIGH_NIBBLES) == _DIGIT_NIBBLES
    )
    return digits


def string_end(text: Any, start: int, quote: Any, backslash: Any) -> int:
    """The index just past the closing quote of the JSON string opening at ``start`` (an even number of
    backslashes before a quote: it is not escaped), or -1 if it is not closed."""
    close = text.find(quote, start + 1)
    while close >= 0:
        escapes = 0
        while text[close - 1 - escapes : close - escapes] == backslash:
            escapes += 1
        if escapes % 2 == 0:
            return int(close) + 1
        close = text.find(quote, close + 1)
    return -1


def digit_limit() -> int:
    """The most digits an integer token may have: ours, or the interpreter's when that is lower (its
    ``int()`` refuses more)."""
    get = getattr(sys, "get_int_max_str_digits", None)  # Python 3.10.7 and later
    limit = get() if get is not None else 0
    return min(MAX_INT_DIGITS, limit) if limit > 0 else MAX_INT_DIGITS


def _parse_exact(text: str | bytes | bytearray | memoryview, root: str) -> Any:
    """``text`` parsed with each integer token of 19 digits or more read exactly, or :data:`_INVALID`.

    The tokens (found between strings) are replaced by strings that name them, orjson parses that, and the walk
    puts the integers in their places.

    Raises:
        DecodeError: an integer token has more digits than :func:`digit_limit` allows; the field is its path.
    """
    data: Any = text if isinstance(text, (str, bytes)) else bytes(text)
    token_re: Any = _TOKEN_STR if isinstance(data, str) else _TOKEN_BYTES  # Any: one loop for str and bytes
    quote: Any = '"' if isinstance(data, str) else b'"'
    backslash: Any = "\\" if isinstance(data, str) else b"\\"
    nonce = f"r3wire-int:{os.urandom(8).hex()}:"
    tokens: list[str] = []
    pieces: list[Any] = []
    prev = pos = 0
    size = len(data)
    while pos < size:
        opening = data.find(quote, pos)
        stop = size if opening < 0 else opening
        for match in token_re.finditer(data, pos, stop):
            token: Any = match.group()
            tokens.append(token if isinstance(token, str) else token.decode("ascii"))
            pieces.append(data[prev : match.start()])
            marker = f'"{nonce}{len(tokens) - 1}"'
            pieces.append(marker if isinstance(data, str) else marker.encode("ascii"))
            prev = match.end()
        if opening < 0:
            break
        pos = string_end(data, opening, quote, backslash)
        if pos < 0:
            break
    if not tokens:
        return _INVALID
    pieces.append(data[prev:])
    try:
        parsed = orjson.loads(data[:0].join(pieces))
    except orjson.JSONDecodeError:
        return _INVALID
    return _put_back(parsed, nonce, tokens, root, text)


def _put_back(parsed: Any, nonce: str, tokens: list[str], root: str, text: Any) -> Any:
    """``parsed`` (of ``text``) with each marker string replaced by the integer it stands for (or
    :data:`_INVALID`: a marker as a member name, where the text had a number)."""
    limit = digit_limit()
    values: list[int | None] = []
    for token in tokens:
        digits = _digits(token)
        try:
            values.append(int(token) if digits <= limit else None)
        except ValueError:  # the interpreter's limit changed since: the same refusal
            values.append(None)
    if None in values:
        # A refusal: the first in text order, even one a repeated member name shadowed (gone from ``parsed``).
        _raise_located(text, root, too_long=True)
    if isinstance(parsed, str) and parsed.startswith(nonce):
        index = int(parsed[len(nonce) :])
        return _check(values[index], tokens[index], limit, root, [])
    # Each container with the link to its parent's path (built only for an error).
    stack: list[tuple[Any, tuple[Any, object] | None]] = [(parsed, None)]
    overlong: tuple[int, tuple[Any, object]] | None = None
    while stack:
        node, link = stack.pop()
        if type(node) is dict:
            items: Any = list(node.items())
            if any(key.startswith(nonce) for key, _ in items):
                return _INVALID
        elif type(node) is list:
            items = enumerate(node)
        else:
            continue
        for key, item in items:
            if type(item) is str and item.startswith(nonce):
                index = int(item[len(nonce) :])
                value = values[index]
                if value is None:
                    if overlong is None or index < overlong[0]:
                        overlong = (index, (link, key))
                    continue
                node[key] = value
            elif type(item) is dict or type(item) is list:
                stack.append((item, (link, key)))
    if overlong is not None:
        index, at = overlong
        parts: list[object] = []
        step: tuple[Any, object] | None = at
        while step is not None:
            step, part = step
            parts.append(part)
        _check(None, tokens[index], limit, root, parts[::-1])
    return parsed


class _OutOfRange:
    """A number token beyond a double's range, as the stdlib parser met it (not a tuple: a leaf of the walk)."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


class _TooLong:
    """An integer token of more digits than the interpreter converts, as the stdlib parser met it."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


class _Members(list[tuple[str, Any]]):
    """An object's members in text order, a repeated name kept (the stdlib parser keeps only the last value, at
    the first one's place: a value it shadowed would never be found, and the order of faults would be lost)."""


# orjson's nesting limit (arrays and objects): deeper text is invalid JSON, reported without a place.
_MAX_DEPTH: Final = 1024
# Headroom for the stdlib parser, which recurses once per level (Python 3.11's limit is 1000 frames in all).
_RECURSION_HEADROOM: Final = 2 * _MAX_DEPTH + 100


def _float_or_out_of_range(token: str) -> float | _OutOfRange:
    value = float(token)
    return value if math.isfinite(value) else _OutOfRange(token)


def _refuse_constant(name: str) -> None:
    raise ValueError(name)  # NaN and Infinity are not JSON: the text stays refused with orjson's own words


# Where orjson's error points when a number it cannot hold is why it refused the text (its token's first character).
_NUMBER_AT_STR: Final = re.compile(r"-?[0-9]")
_NUMBER_AT_BYTES: Final = re.compile(rb"-?[0-9]")
# An escaped surrogate (``\udc00``; a valid pair matches too): orjson's error for a lone one points at different
# characters of it in different versions, so the whole text is searched.
_SURROGATE_ESCAPE_STR: Final = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def _may_be_located(text: str | bytes | bytearray | memoryview, pos: int) -> bool:
    """False when orjson's refusal of ``text`` (its error at character ``pos``) cannot be one that
    :func:`_raise_located` places: then its stdlib parse, tens of times slower than orjson and several times the
    text's size in memory, is skipped (a truncated body of tens of megabytes is refused in milliseconds).

    orjson checks the whole text is UTF-8 first, then parses in text order and stops at the first fault. So when
    the text is UTF-8 (no lone surrogate), holds no escaped surrogate, and no number starts where orjson stopped,
    orjson stopped at text that is not JSON, which is reported before any value's fault (wire-format.md §13).
    Never False when the text holds a fault the parse would place (only the checks' cost matters otherwise).
    """
    data: str | bytes | bytearray | memoryview
    if isinstance(text, str):
        if not text.isascii() and not_utf8_at(text) is not None:
            return True
        data = text
    else:
        if isinstance(text, (bytes, bytearray)):
            ascii_only = text.isascii()
        else:
            try:
                view = np.frombuffer(text, np.uint8)
            except (TypeError, ValueError, BufferError):
                return True  # not one contiguous buffer: let the parse decide, as before
            ascii_only = not view.size or int(np.max(view)) < 0x80
        data = text
        if not ascii_only:
            try:
                data = str(text, "utf-8")  # positions are orjson's character counts, not bytes
            except UnicodeDecodeError:
                return True
    if isinstance(data, str):
        return bool(_SURROGATE_ESCAPE_STR.search(data)) or _NUMBER_AT_STR.match(data, pos) is not None
    return bool(_SURROGATE_ESCAPE_BYTES.search(data)) or _NUMBER_AT_BYTES.match(data, pos) is not None


def _as_str(text: str | bytes | bytearray | memoryview) -> str:
    """The text as ``str``; a byte that is not UTF-8 becomes a lone surrogate U+DC80..U+DCFF, which the search
    for faults then finds."""
    if isinstance(text, str):
        return text
    try:
        return str(text, "utf-8", "surrogateescape")  # any contiguous buffer, without a copy of the bytes first
    except (TypeError, BufferError):
        return bytes(text).decode("utf-8", "surrogateescape")


def _stdlib_parse(data: str, limit: int, *, long_ints: bool, float_tokens: bool, too_long: bool = False) -> Any:
    """``data`` parsed by the stdlib parser, objects as :class:`_Members`, or :data:`_INVALID` if it is not JSON.

    An integer token of more than ``limit`` digits becomes :class:`_TooLong`; the others are not faults, and
    C functions read them (no Python call per integer) when none can be that long (``long_ints`` False), or when
    ``limit`` is the interpreter's own, which refuses a longer one: that refusal, or invalid JSON, is then told
    apart by parsing again with a Python call per integer. With ``float_tokens`` a float beyond a double's range
    becomes :class:`_OutOfRange` (its token kept, one Python call per float); else the C ``float`` reads it as
    infinity.
    """
    get = getattr(sys, "get_int_max_str_digits", None)  # Python 3.10.7 and later
    # too_long: an integer is known to be longer than the limit, so a parse with the C int would only fail first.
    c_ints = not long_ints or (not too_long and get is not None and get() == limit)
    # No integer can be a fault when none is long: each is read as True, a value the walk passes over that costs
    # no memory (an int object per token is several times the text).
    doc = _parse_with(data, (int if long_ints else bool) if c_ints else _exact_int(limit), float_tokens)
    if doc is _INVALID and c_ints and long_ints:
        doc = _parse_with(data, _exact_int(limit), float_tokens)
    return doc


def _exact_int(limit: int) -> Callable[[str], int | _TooLong]:
    return lambda token: int(token) if len(token) <= limit or _digits(token) <= limit else _TooLong(token)


def _parse_with(data: str, parse_int: Callable[[str], object], float_tokens: bool) -> Any:
    recursion = sys.getrecursionlimit()
    # Text nested up to orjson's limit is valid JSON, but the stdlib parser would run out of frames before it.
    sys.setrecursionlimit(recursion + _RECURSION_HEADROOM)
    try:
        return json.loads(
            data,
            object_pairs_hook=_Members,
            parse_float=_float_or_out_of_range if float_tokens else float,
            parse_int=parse_int,
            parse_constant=_refuse_constant,
        )
    except (ValueError, RecursionError):
        return _INVALID
    finally:
        sys.setrecursionlimit(recursion)


# A JSON number token.
_NUMBER_TOKEN: Final = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _number_at(data: str, pos: int | None) -> str | None:
    """The number token that starts at character ``pos`` of ``data``, or None."""
    if pos is None or not 0 <= pos < len(data):
        return None
    match = _NUMBER_TOKEN.match(data, pos)
    return None if match is None else match.group()


def _raise_located(
    text: str | bytes | bytearray | memoryview,
    root: str,
    *,
    long_ints: bool = True,
    pos: int | None = None,
    too_long: bool = False,
) -> None:
    """After orjson refused ``text``: if the text is valid JSON (orjson's nesting limit included), raise the error
    for the first value in text order that orjson refuses or cannot hold but that has a place -- a string (value
    or member name) that is not UTF-8, a number beyond a double's range, an integer of more digits than the
    interpreter converts -- at its path. Text that is not JSON is a fault before any of these (wire-format.md
    §13, "Several faults in one text"), so this returns and orjson's own error is raised.

    ``long_ints``: False when the text holds no integer token of 19 digits or more (:func:`_scan`), so none can
    be too long to convert. ``pos``: where orjson's error points, the first character of an out-of-range
    number's token when that is the first fault of a UTF-8 text. ``too_long``: an integer token is known to have
    more digits than the limit. All three only spare work.

    Raises:
        DecodeError: such a string or number, its field the path.
    """
    from_bytes = not isinstance(text, str)
    data = _as_str(text)
    limit = digit_limit()
    doc = _stdlib_parse(data, limit, long_ints=long_ints, float_tokens=False, too_long=too_long)
    if doc is _INVALID:
        return
    found = _first_fault(doc)
    if found is not None and type(found[1]) is float:
        # Read by float() as infinity: its token, for the message, is where orjson stopped if it was orjson's
        # first fault; else the text is parsed again keeping every float's token (Python work per float).
        token = _number_at(data, pos)
        if token is not None and not math.isfinite(float(token)):
            found = (found[0], _OutOfRange(token))
        else:
            found = _first_fault(_stdlib_parse(data, limit, long_ints=long_ints, float_tokens=True, too_long=too_long))
    if found is None:
        return
    parts, leaf = found
    if isinstance(leaf, _TooLong):
        _check(None, leaf.token, limit, root, parts)
    field = _field(parts, root)
    if isinstance(leaf, _OutOfRange):
        raise DecodeError.make(
            field,
            "a number a double can hold (magnitude below 1.8e308; an integer without fraction or exponent is "
            "exact at any size)",
            f"{_shown(leaf.token)} (number out of range)",
            raw=True,
        )
    assert isinstance(leaf, str)
    index = not_utf8_at(leaf)
    assert index is not None
    char = leaf[index]
    what = f"a lone surrogate {ascii(char)[1:-1]}"
    if from_bytes and 0xDC80 <= ord(char) <= 0xDCFF:
        what += f" (or the byte 0x{ord(char) - 0xDC00:02x}, which is not UTF-8)"
    raise DecodeError.make(
        field, "a string of Unicode text (valid UTF-8, no lone surrogate)", f"{what} at character {index}", raw=True
    )


def _is_fault(leaf: object) -> bool:
    if type(leaf) is str:
        return not_utf8_at(leaf) is not None
    if type(leaf) is float:
        return not math.isfinite(leaf)  # JSON has no infinity: a token beyond a double's range, read by float()
    return type(leaf) is _OutOfRange or type(leaf) is _TooLong


# The items of an array the walk looks at (by their type): containers, strings and the parser's fault markers.
# Numbers are looked at only where one is infinite (the C ``float`` read a token beyond a double's range); an
# array of numbers is passed over without a Python step per item.
_LOOKED_AT: Final = frozenset({list, _Members, str, _TooLong, _OutOfRange})


def _entries(node: list[Any]) -> Iterator[tuple[object, object, str | None]]:
    """A container's (part, value, member name or None) in text order; of an array, only the items
    :func:`_first_fault` must look at: those of :data:`_LOOKED_AT` and the first
    infinite float."""
    if type(node) is _Members:
        return ((name, value, name) for name, value in node)
    looked = compress(enumerate(node), map(_LOOKED_AT.__contains__, map(type, node)))
    infinite = [at for at in (_index(node, math.inf), _index(node, -math.inf)) if at is not None]
    return _array_entries(looked, min(infinite) if infinite else None, node)


def _index(node: list[Any], value: float) -> int | None:
    try:
        return node.index(value)
    except ValueError:
        return None


def _array_entries(
    looked: Iterator[tuple[int, Any]], infinite: int | None, node: list[Any]
) -> Iterator[tuple[object, object, str | None]]:
    for index, item in looked:
        if infinite is not None and infinite < index:
            yield infinite, node[infinite], None
            infinite = None
        yield index, item, None
    if infinite is not None:
        yield infinite, node[infinite], None


def _first_fault(doc: object) -> tuple[list[object], object] | None:
    """The path to the first fault of :func:`_is_fault` in ``doc`` (the stdlib parse of a text, objects as
    :class:`_Members`), in text order, each member name before its value; None when there is none, or when the
    text nests deeper than orjson's limit (then it is not valid JSON, whatever values it holds).
    """
    if type(doc) is not list and type(doc) is not _Members:
        return ([], doc) if _is_fault(doc) else None
    found: tuple[list[object], object] | None = None
    parts: list[object] = []
    stack = [_entries(doc)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            if stack:
                parts.pop()
            continue
        part, item, name = entry
        if found is None and name is not None and _is_fault(name):
            found = ([*parts, part], name)
        if type(item) is list or type(item) is _Members:
            if len(stack) >= _MAX_DEPTH:
                return None
            parts.append(part)
            stack.append(_entries(item))
        elif found is None and _is_fault(item):
            found = ([*parts, part], item)
    return found


def _shown(token: str) -> str:
    """A number token as an error shows it: whole, or its ends around the count of its characters."""
    return token if len(token) <= 40 else f"{token[:20]}...{token[-10:]} ({len(token)} characters)"


def _field(parts: list[object], root: str) -> str | None:
    """The field of an error at ``parts``: a JSONPath, or member names alone (``shape[0]``) when ``root`` is ""."""
    field = json_path(parts)
    if not root:  # member names alone: shape[0], not $.shape[0]
        field = field[1:].removeprefix(".")
    return field or None


def _check(value: int | None, token: str, limit: int, root: str, parts: list[object]) -> int:
    """``value``, or the error for the integer token ``token`` that was too long to read, at ``parts``.

    Raises:
        DecodeError: ``value`` is None.
    """
    if value is not None:
        return value
    raise DecodeError.make(
        _field(parts, root), f"an integer of at most {limit} digits", f"an integer of {_digits(token)} digits", raw=True
    )


def _digits(token: str) -> int:
    """The digits of an integer token, its sign not counted (as Python's limit on converting text counts them)."""
    return len(token) - token.startswith("-")
