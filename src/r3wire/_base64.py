"""Standard base64 (RFC 4648 §4, ``=`` padding): pybase64 when installed, the standard library otherwise.

Both back ends produce identical text and accept exactly the same inputs: the strict checks that pybase64 and
``binascii`` disagree on (length, padding, non-zero pad bits) are made here, before either is called.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
from typing import Any

from r3wire._bytetext import byte_text
from r3wire.errors import DecodeError

__all__ = [
    "BACKEND",
    "b64decode_range",
    "b64decode_strict",
    "b64encode_bytes",
    "b64encode_text",
    "check_canonical",
    "check_encoded_length",
    "encoded_length",
]

_pybase64: Any
try:
    # R3WIRE_NO_PYBASE64 lets the test suite and the benchmark exercise the fallback on a machine that has both.
    if os.environ.get("R3WIRE_NO_PYBASE64"):
        raise ImportError("disabled by R3WIRE_NO_PYBASE64")
    _pybase64 = importlib.import_module("pybase64")
except ImportError:
    _pybase64 = None

BACKEND: str = "pybase64" if _pybase64 is not None else "stdlib"
"""Which implementation is in use: ``"pybase64"`` (the ``fast`` extra) or ``"stdlib"``."""

_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_VALUE = {c: i for i, c in enumerate(_ALPHABET)}


def encoded_length(nbytes: int) -> int:
    """Length of the padded base64 text of ``nbytes`` bytes."""
    return 4 * ((nbytes + 2) // 3)


def b64encode_text(buffer: memoryview) -> str:
    """Encode a contiguous byte buffer as padded standard base64 text."""
    if _pybase64 is not None:
        encode_as_string = getattr(_pybase64, "b64encode_as_string", None)
        if encode_as_string is not None:
            text: str = encode_as_string(buffer)
            return text
        raw: bytes = _pybase64.b64encode(buffer)
        return raw.decode("ascii")
    return binascii.b2a_base64(buffer, newline=False).decode("ascii")


def b64encode_bytes(buffer: memoryview) -> bytes:
    """Encode a contiguous byte buffer as padded standard base64, as ASCII ``bytes`` (no ``str`` is made)."""
    if _pybase64 is not None:
        raw: bytes = _pybase64.b64encode(buffer)
        return raw
    return binascii.b2a_base64(buffer, newline=False)


def _ascii(text: str | bytes | bytearray | memoryview, field: str) -> bytes | bytearray | memoryview | str:
    if isinstance(text, str):
        if not text.isascii():
            raise DecodeError.make(field, "standard base64 text (ASCII)", "text with non-ASCII characters", raw=True)
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        # A strided or wide memoryview: pybase64 raises BufferError where the stdlib copies it, and len() counts
        # items, not characters. Refused alike under both back ends.
        return byte_text(text, field)
    raise DecodeError.make(field, "a base64 string", type(text).__name__, raw=True)


def check_encoded_length(text: str | bytes | bytearray | memoryview, nbytes: int, field: str) -> None:
    """Check that ``text`` has exactly the padded base64 length of ``nbytes`` bytes, before anything is decoded.

    Raises:
        DecodeError: naming ``field``, with both lengths.
    """
    expected = encoded_length(nbytes)
    if len(text) != expected:
        raise DecodeError.make(
            field,
            f"{expected} base64 characters ({nbytes} bytes for the declared shape and dtype)",
            f"{len(text)} characters",
            raw=True,
        )


_Text = str | bytes | bytearray | memoryview


def check_canonical(text: _Text, nbytes: int, *, field: str = "data") -> _Text:
    """The checks of :func:`b64decode_strict` that need only the length and the last quantum, without decoding.

    Returns ``text`` (``str`` or bytes-like), ready to be sliced by :func:`b64decode_range`.

    Raises:
        DecodeError: as :func:`b64decode_strict`, for a non-ASCII text, a wrong length or a non-canonical ending.
    """
    checked = _ascii(text, field)
    check_encoded_length(checked, nbytes, field)
    pad = nbytes % 3
    if not pad:
        return checked
    tail = checked[-4:]
    tail_bytes = tail.encode("ascii") if isinstance(tail, str) else bytes(tail)
    # The last quantum holds 1 or 2 data bytes when nbytes is not a multiple of 3; its unused low bits must be
    # zero and exactly 3 - pad '=' must follow, otherwise two different texts would decode to the same bytes.
    n_pad = 3 - pad
    if tail_bytes[4 - n_pad :] != b"=" * n_pad or b"=" in tail_bytes[: 4 - n_pad]:
        raise DecodeError.make(
            field, f"base64 ending in exactly {n_pad} '=' padding", tail_bytes.decode("ascii", "replace")
        )
    last = _VALUE.get(tail_bytes[3 - n_pad])
    unused_mask = 0b1111 if n_pad == 2 else 0b11
    if last is None or last & unused_mask:
        raise DecodeError.make(field, "canonical base64 (zero pad bits)", tail_bytes.decode("ascii", "replace"))
    return checked


def _decode(text: Any, nbytes: int, field: str) -> bytearray | bytes:
    try:
        if _pybase64 is not None:
            out: bytearray | bytes = _pybase64.b64decode_as_bytearray(text, validate=True)
        else:
            out = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError, BufferError) as exc:  # BufferError: a strided memoryview
        raise DecodeError.make(field, "standard base64 (A-Z a-z 0-9 + / with '=' padding)", str(exc), raw=True) from exc
    if len(out) != nbytes:  # '=' inside the text can shorten the output; the length check cannot see that
        raise DecodeError.make(field, f"base64 of {nbytes} bytes", f"{len(out)} bytes", raw=True)
    return out


def b64decode_strict(
    text: str | bytes | bytearray | memoryview, nbytes: int, *, field: str = "data"
) -> bytearray | bytes:
    """Decode padded standard base64 that must hold exactly ``nbytes`` bytes.

    The text length is checked against ``nbytes`` before anything is decoded or allocated, so a short payload
    claiming a huge shape costs nothing. Whitespace, characters outside the alphabet, missing or misplaced
    padding and non-zero pad bits are all rejected, so every byte string has exactly one accepted encoding.

    Returns a writable ``bytearray`` with pybase64, ``bytes`` with the standard library.

    Raises:
        DecodeError: the text is not the canonical base64 of ``nbytes`` bytes.
    """
    checked = check_canonical(text, nbytes, field=field)
    if nbytes == 0:
        return bytearray()
    return _decode(checked, nbytes, field)


def b64decode_range(text: _Text, nbytes: int, start: int, stop: int, *, field: str = "data") -> memoryview:
    """Bytes ``start .. stop`` of the ``nbytes`` bytes that ``text`` encodes, decoding only the quanta holding them.

    ``text`` must have passed :func:`check_canonical` for ``nbytes``. Decoding a long text range by range, each
    range's bytes used and dropped, never holds all of the decoded bytes at once; the ranges together accept and
    refuse exactly the texts :func:`b64decode_strict` does, with the same error.

    Raises:
        DecodeError: the range's text is not standard base64 (the error is the whole text's, as
            :func:`b64decode_strict` gives it).
    """
    if not 0 <= start <= stop <= nbytes:
        raise ValueError(f"byte range {start}..{stop} outside 0..{nbytes}")
    first = start // 3
    last = min(-(-stop // 3), -(-nbytes // 3))  # quanta; the last one may be padded
    low, high = 3 * first, min(3 * last, nbytes)
    if low == high:
        return memoryview(b"")
    try:
        decoded = _decode(text[4 * first : 4 * last], high - low, field)
    except DecodeError:
        # A range can fail differently from the whole text (an '=' that ends a range shortens it instead of
        # breaking the alphabet): the whole text's error is the one to report.
        b64decode_strict(text, nbytes, field=field)
        raise
    return memoryview(decoded)[start - low : stop - low]
