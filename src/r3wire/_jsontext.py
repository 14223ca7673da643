"""JSON text parsed by orjson with every integer exact (wire-format.md §13: an integer token's value is the exact
integer its digits spell).

orjson reads an integer token outside ``-2**63 .. 2**64 - 1`` as a float (rounded: ``18446744073709551617``
becomes ``1.8446744073709552e+19``) and refuses one of about 310 digits or more (infinite as a double) as invalid
JSON. Such tokens are rare, so orjson parses every document first and a cheap test decides whether one could be
there; only then is the text parsed again with those tokens read exactly (orjson still parses the rest, so the
strictness, the depth limit and every other value stay orjson's).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Final

import numpy as np
import orjson

from r3wire.errors import DecodeError

__all__ = ["MAX_INT_DIGITS", "parse_json"]

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
# Characters after which a digit run is no integer token's first digit: a fraction or exponent, or a string's
# first character (a token never directly follows a quote).
_NOT_TOKEN_BEFORE: Final = frozenset(b'.eE+"')
_EXPONENT: Final = frozenset(b"eE")
_MINUS: Final = ord("-")
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
        DecodeError: an integer token has more than :data:`MAX_INT_DIGITS` digits; the field is its path.
    """
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        # orjson refuses an integer of 310 digits or more: valid JSON all the same, read here if that is why.
        if not _scan(text):
            raise
        exact = _parse_exact(text, root)
        if exact is _INVALID:
            raise
        return exact
    if not _may_be_rounded(text, parsed):
        return parsed
    exact = _parse_exact(text, root)
    if exact is _INVALID:  # pragma: no cover - orjson parsed this text with strings in place of the tokens
        return parsed
    return exact


class _Invalid:
    """Marks text that did not parse."""


_INVALID: Final = _Invalid()


def _may_be_rounded(text: str | bytes | bytearray | memoryview, parsed: Any) -> bool:
    """False when no integer in ``parsed`` can have been rounded by orjson; True when one may have been.

    orjson makes a float of an integer token it cannot hold, always of magnitude 2**63 or more: a small document
    (an envelope) is decided by its values; one with more items than the walk's budget by its text.
    """
    stack = [parsed]
    budget = _WALK_BUDGET
    while stack:
        node = stack.pop()
        cls = type(node)
        if cls is float:
            if abs(node) >= _ROUNDED_FROM:
                return True
            continue
        if cls is not dict and cls is not list:
            continue
        items = node.values() if cls is dict else node
        budget -= len(items)
        if budget < 0:
            return _scan(text)
        stack.extend(items)
    return False


def _scan(text: str | bytes | bytearray | memoryview) -> bool:
    """Whether ``text`` may hold an integer token of 19 digits or more (never False when it does).

    A vectorised test first: a run of 19 digits covers at least one whole aligned 8-byte word, and a word of only
    digits is rare outside numbers (1 in 3 million in base64). Only when there are such words are the digit runs
    found and their context looked at, so that the digits of fractions (``-0.0012345678901234567``, common in
    logprobs) are not taken for integers.
    """
    data: Any = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    flat = np.frombuffer(data, np.uint8)
    words = flat[: flat.size - flat.size % 8].view(np.uint64)
    if not np.any((words & _HIGH_NIBBLES) == _DIGIT_NIBBLES):
        return False
    digit = (flat - np.uint8(48)) < 10
    edges = np.flatnonzero(np.diff(digit.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
    starts, ends = edges[0::2], edges[1::2]  # digit runs alternate with the rest: [start, end)
    long = (ends - starts) >= _LONG_DIGITS
    starts, ends = starts[long], ends[long]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        before = int(flat[start - 1]) if start else 0
        if before in _NOT_TOKEN_BEFORE:
            continue
        if before == _MINUS:
            if start >= 2 and int(flat[start - 2]) in _EXPONENT:
                continue
        elif end - start == _LONG_DIGITS:
            continue  # a non-negative integer of 19 digits is below 2**64: orjson holds it
        return True
    return False


def _string_end(text: Any, start: int, quote: Any, backslash: Any) -> int:
    """The index just past the closing quote of the string opening at ``start``, or -1 if it is not closed."""
    close = text.find(quote, start + 1)
    while close >= 0:
        escapes = 0
        while text[close - 1 - escapes : close - escapes] == backslash:
            escapes += 1
        if escapes % 2 == 0:
            return int(close) + 1
        close = text.find(quote, close + 1)
    return -1


def _digit_limit() -> int:
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
        DecodeError: an integer token has more digits than :func:`_digit_limit` allows; the field is its path.
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
        pos = _string_end(data, opening, quote, backslash)
        if pos < 0:
            break
    if not tokens:
        return _INVALID
    pieces.append(data[prev:])
    try:
        parsed = orjson.loads(data[:0].join(pieces))
    except orjson.JSONDecodeError:
        return _INVALID
    return _put_back(parsed, nonce, tokens, root)


def _put_back(parsed: Any, nonce: str, tokens: list[str], root: str) -> Any:
    """``parsed`` with each marker string replaced by the integer it stands for (or :data:`_INVALID`: a marker
    as a member name, where the text had a number)."""
    limit = _digit_limit()
    values: list[int | None] = []
    for token in tokens:
        digits = len(token) - token.startswith("-")
        try:
            values.append(int(token) if digits <= limit else None)
        except ValueError:  # the interpreter's limit changed since: the same refusal
            values.append(None)
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


def _check(value: int | None, token: str, limit: int, root: str, parts: list[object]) -> int:
    """``value``, or the error for the integer token ``token`` that was too long to read, at ``parts``.

    Raises:
        DecodeError: ``value`` is None.
    """
    if value is not None:
        return value
    field = root
    for part in parts:
        if isinstance(part, int):
            field += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            field = f"{field}.{part}" if field else part
        else:
            field += f"[{orjson.dumps(str(part)[:64]).decode()}]"
    digits = len(token) - token.startswith("-")
    raise DecodeError.make(
        field or None, f"an integer of at most {limit} digits", f"an integer of {digits} digits", raw=True
    )
