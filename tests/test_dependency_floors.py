"""Behaviour the dependency floors in pyproject.toml exist for.

The floor stage of CI (``R3WIRE_DEPS=oldest``) runs the whole suite with exactly those versions; these tests pin
the reason for each floor, so lowering one below what the code relies on fails here first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from r3wire import DecodeError, EncodeError, decode_array, decode_routes, encode_array, encode_routes

DECODERS: list[Callable[[Any], object]] = [decode_routes, decode_array]
ENCODERS: list[Callable[[Any], object]] = [encode_routes, encode_array]


@pytest.mark.parametrize("decode", DECODERS)
def test_deeply_nested_json_is_a_decode_error(decode: Callable[[Any], object]) -> None:
    # orjson >= 3.9.15 stops at a nesting depth of 1024 (CVE-2024-27454); older releases overflowed the C stack
    # and killed the process on a 2 MB request body, which no decoder may allow.
    depth = 1_000_000
    with pytest.raises(DecodeError, match="JSON"):
        decode('{"data":' + "[" * depth + "]" * depth + "}")


@pytest.mark.parametrize("encode", ENCODERS)
def test_ragged_nested_lists_are_an_encode_error(encode: Callable[[Any], object]) -> None:
    # numpy >= 1.24 raises ValueError for ragged nested sequences (NEP 34); older releases built an object array
    # with a VisibleDeprecationWarning, which escapes as a non-r3wire error where warnings are errors.
    with pytest.raises(EncodeError, match="an array"):
        encode([[[1]], [[1, 2]]])
