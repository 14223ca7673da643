"""Property tests for nested lists handed to an encoder: NumPy converts them, and r3wire refuses every list whose
values that conversion would change (ints rounded to float64 or made objects, bools read as 0 and 1), so a list
either round-trips value for value or is refused with r3wire's own error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import EncodeError, R3WireError, decode_array, decode_routes, encode_array, encode_routes, pad_routes

pytestmark = pytest.mark.property

NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**63) - 1]),
    st.booleans(),
    st.sampled_from([np.True_, np.int64(2**62 + 1), np.uint64(2**64 - 1), np.int8(-1)]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)


@st.composite
def nested(draw: st.DrawFn) -> list[Any]:
    """A rectangular nested list (1 to 3 levels) of numbers of mixed kinds."""
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    size = int(np.prod(shape))
    flat = draw(st.lists(NUMBERS, min_size=size, max_size=size))

    def build(level: int, items: list[Any]) -> list[Any]:
        if level == len(shape) - 1:
            return items
        step = len(items) // shape[level]
        return [build(level + 1, items[i * step : (i + 1) * step]) for i in range(shape[level])]

    return build(0, flat)


def _leaves(value: Any) -> list[Any]:
    return [leaf for item in value for leaf in _leaves(item)] if isinstance(value, list) else [value]


def _encoded(encode: Callable[[], dict[str, Any]]) -> dict[str, Any] | EncodeError:
    try:
        return encode()
    except EncodeError as exc:
        return exc


@given(nested())
def test_a_list_round_trips_value_for_value_or_is_refused(values: list[Any]) -> None:
    envelope = _encoded(lambda: encode_array(values))
    if isinstance(envelope, EncodeError):
        assert str(envelope).startswith("array")
        return
    back = _leaves(decode_array(envelope).tolist())
    source = _leaves(values)
    assert len(back) == len(source)
    for got, given_value in zip(back, source, strict=True):
        assert got == given_value
        # A bool comes back as a bool only from an all-bool list; an int is never turned into a bool, or back.
        assert isinstance(got, bool) == isinstance(given_value, (bool, np.bool_))


@given(nested())
def test_route_lists_are_refused_or_kept_exactly(values: list[Any]) -> None:
    routes = values if len(np.shape(values)) == 3 else [[values]] if len(np.shape(values)) == 1 else [values]
    envelope = _encoded(lambda: encode_routes(routes))
    if isinstance(envelope, EncodeError):
        return
    kinds = {type(leaf) for leaf in _leaves(routes)}
    assert not any(issubclass(k, (bool, np.bool_, float)) for k in kinds)
    assert _leaves(decode_routes(envelope).tolist()) == _leaves(routes)
    try:
        padded, _ = pad_routes([routes])
    except R3WireError:
        return
    assert _leaves(padded[0].tolist()) == _leaves(routes)


@given(values=nested(), text=st.one_of(st.text(max_size=20), st.binary(max_size=20)), data=st.data())
def test_a_string_among_the_numbers_is_refused_at_its_place(values: list[Any], text: str | bytes, data: Any) -> None:
    # NumPy would make every element a string as wide as the longest (review 11a: 3 GB for one 1000-character
    # string among 786k ids); it is refused before that conversion, at its place.
    where: list[int] = []
    node: Any = values
    while isinstance(node, list):
        i = data.draw(st.integers(0, len(node) - 1))
        where.append(i)
        if not isinstance(node[i], list):
            node[i] = text
            break
        node = node[i]
    for call, field in ((encode_array, "array"), (encode_routes, "routes"), (pad_routes, "samples[0]")):
        with pytest.raises(R3WireError) as info:
            call([values] if call is pad_routes else values)
        assert info.value.field == f"{field}{where}"
        assert "must be a number" in str(info.value)
