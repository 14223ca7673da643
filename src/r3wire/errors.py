"""The library's exceptions.

Every error r3wire raises on bad input is an :class:`R3WireError`, a :class:`ValueError`, so existing
``except ValueError`` handlers in servers keep working. Each carries the offending ``field`` (a path such as
``shape[1]``), what was ``expected`` and what was ``got`` beside the human-readable message.
"""

from __future__ import annotations

import reprlib

__all__ = [
    "DecodeError",
    "EncodeError",
    "R3WireError",
    "UnsupportedVersionError",
]

# Payloads are megabytes of base64; an error message must never echo one back in full.
_MAX_GOT = 300  # characters of ``got`` shown at most, whatever built it
_MAX_INT_BITS = 256  # a larger int is described by its size: repr of one over 4,300 digits raises ValueError
_MAX_BYTES = 24  # bytes shown at most: each may take 4 characters (\x00)


class _BoundedRepr(reprlib.Repr):
    """``reprlib`` with every type a payload can carry bounded before it is formatted, not after."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _MAX_INT_BITS:
            return f"<{'negative ' if x < 0 else ''}int of {x.bit_length()} bits>"
        return super().repr_int(x, level)

    def repr_bytes(self, x: bytes, level: int) -> str:
        return _bounded_bytes(x, _MAX_BYTES)

    def repr_bytearray(self, x: bytearray, level: int) -> str:
        return f"bytearray({_bounded_bytes(x, _MAX_BYTES)})"

    def repr_memoryview(self, x: memoryview, level: int) -> str:
        return f"<memoryview of {x.nbytes} bytes>"


def _bounded_bytes(x: bytes | bytearray, limit: int) -> str:
    if len(x) <= limit:
        return repr(bytes(x))
    return f"{bytes(x[:limit])!r}... ({len(x)} bytes)"


_repr = _BoundedRepr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 8
_repr.maxtuple = 8
_repr.maxset = 8
_repr.maxfrozenset = 8
_repr.maxdeque = 8
_repr.maxarray = 8
_repr.maxdict = 6
_repr.maxlevel = 2


def describe(value: object) -> str:
    """Return a short, bounded ``repr`` of ``value`` for use in error messages; it never raises.

    Ints, strings, bytes and containers are cut before they are formatted, so a 100 MB string or an int of a
    million digits costs no more than a small one.
    """
    try:
        return _bound(_repr.repr(value))
    except Exception:  # a hostile __repr__ must not replace our error with its own
        return f"<{_type_name(value)}>"


def _type_name(value: object) -> str:
    try:
        return _bound(type(value).__name__)
    except Exception:  # pragma: no cover - a metaclass whose __name__ raises
        return "object"


def _bound(text: str) -> str:
    return text if len(text) <= _MAX_GOT else f"{text[: _MAX_GOT - 3]}..."


class R3WireError(ValueError):
    """Base class of every error r3wire raises for bad input.

    Attributes:
        field: where the problem is, e.g. ``"shape[1]"`` or ``"data"``; ``None`` for the payload as a whole.
        expected: what must hold, in words.
        got: a short description of what was found.
    """

    field: str | None
    expected: str | None
    got: str | None

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        expected: str | None = None,
        got: str | None = None,
    ) -> None:
        super().__init__(message)
        self.field = field
        self.expected = expected
        self.got = got

    @classmethod
    def make(cls, field: str | None, expected: str, got: object, *, raw: bool = False) -> R3WireError:
        """Build an error whose message reads ``"<field> must be <expected>, got <got>"``.

        ``got`` is shown with a bounded ``repr`` unless ``raw`` is true and it is a string (then it is already a
        description). Either way it is cut to a few hundred characters, so building the message never fails and
        never echoes a payload back.
        """
        shown = _bound(got) if raw and isinstance(got, str) else describe(got)
        where = field if field is not None else "payload"
        return cls(f"{where} must be {expected}, got {shown}", field=field, expected=expected, got=shown)


class EncodeError(R3WireError):
    """The value given to an encoder cannot be represented on the wire exactly."""


class DecodeError(R3WireError):
    """A payload is malformed, inconsistent or outside the limits the caller set."""


class UnsupportedVersionError(DecodeError):
    """A payload declares a schema version this release of r3wire cannot read.

    Attributes:
        version: the version the payload declared.
        supported: the versions this release reads.
    """

    version: int
    supported: tuple[int, ...]

    def __init__(self, message: str, *, field: str | None, version: int, supported: tuple[int, ...]) -> None:
        super().__init__(
            message,
            field=field,
            expected=f"one of {list(supported)}",
            got=describe(version),
        )
        self.version = version
        self.supported = supported
