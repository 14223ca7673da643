"""A slow, literal reference of the bit stream in docs/bitpack-and-frame.md, one bit at a time.

It shares no code with r3wire's kernel: the tests compare the kernel against it, and the golden-vector generator
derives its expected bytes from it.
"""

from __future__ import annotations

from collections.abc import Sequence


def pack_reference(ids: Sequence[int], bits: int) -> bytes:
    """Bit ``k`` of id ``i`` is stream bit ``j = i * bits + k``, which is bit ``j % 8`` of byte ``j // 8``."""
    out = bytearray((len(ids) * bits + 7) // 8)
    for i, value in enumerate(ids):
        assert 0 <= value < 1 << bits
        for k in range(bits):
            if value >> k & 1:
                j = i * bits + k
                out[j // 8] |= 1 << (j % 8)
    return bytes(out)


def unpack_reference(data: bytes, count: int, bits: int) -> list[int]:
    """The inverse of :func:`pack_reference`; asserts the length and that the pad bits are zero."""
    assert len(data) == (count * bits + 7) // 8
    ids = []
    for i in range(count):
        value = 0
        for k in range(bits):
            j = i * bits + k
            value |= (data[j // 8] >> (j % 8) & 1) << k
        ids.append(value)
    for j in range(count * bits, 8 * len(data)):
        assert not data[j // 8] >> (j % 8) & 1, "pad bit set"
    return ids
