"""Strategies shared by the property tests: arbitrary JSON values, for every decoder's fuzzing promise."""

from __future__ import annotations

from hypothesis import strategies as st

__all__ = ["JSON_LEAVES", "JSON_VALUES"]

# Integers beyond 64 bits and floats of every finite size: what a hostile or buggy peer can put in JSON.
JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
