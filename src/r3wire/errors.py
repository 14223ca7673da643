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
_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 60
_repr.maxlist = 8
_repr.maxdict = 6
_repr.maxlevel = 2


def describe(value: object) -> str:
    """Return a short, bounded ``repr`` of ``value`` for use in error messages."""
    try:
        return _repr.repr(value)
    except Exception:  # a hostile __repr__ must not replace our error with its own
        return f"<{type(value).__name__}>"


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

        ``got`` is shown with a bounded ``repr`` unless ``raw`` is true (then it is already a description).
        """
        shown = str(got) if raw else describe(got)
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
            got=str(version),
        )
        self.version = version
        self.supported = supported
