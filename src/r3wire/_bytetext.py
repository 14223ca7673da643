"""One rule for a memoryview handed in as text (base64, JSON, raw ``.npy`` or zstd bytes): what every reader that
measures, slices or decodes it byte by byte accepts."""

from __future__ import annotations

from r3wire.errors import DecodeError

__all__ = ["byte_text"]


def byte_text(payload: str | bytes | bytearray | memoryview, field: str | None) -> str | bytes | bytearray | memoryview:
    """``payload`` ready to be measured, sliced and decoded byte by byte: a memoryview must be 1-d, C-contiguous
    and of 1-byte items (as :func:`r3wire._validate.load_json` and the envelope decoder require), and comes back
    as format ``"B"``; ``str``, ``bytes`` and ``bytearray`` come back as they are.

    Raises:
        DecodeError: naming ``field``, for a non-contiguous, multi-dimensional or wider-than-a-byte memoryview.
    """
    if not isinstance(payload, memoryview):
        return payload
    # len() and slicing count items, not bytes, and the base64 and zstd back ends refuse strided buffers: such a
    # view would be measured wrong or fail outside r3wire's errors.
    if not payload.c_contiguous:
        raise DecodeError.make(field, "a contiguous buffer", "a non-contiguous memoryview", raw=True)
    if payload.ndim != 1 or payload.itemsize != 1:
        raise DecodeError.make(
            field,
            "a 1-d buffer of bytes",
            f"a {payload.ndim}-d memoryview of format {payload.format!r} ({payload.itemsize}-byte items)",
            raw=True,
        )
    return payload if payload.format == "B" else payload.cast("B")
