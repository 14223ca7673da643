"""dumps under orjson.OPT_NON_STR_KEYS: keys orjson writes under one member name are refused (a reader would keep
one of the values), and a key is matched against routes_keys / logprobs_keys by the name written for it."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import r3wire
from r3wire import EncodeError

NON_STR = orjson.OPT_NON_STR_KEYS


class Key(enum.Enum):
    ROUTES = "routed_experts"
    LOGPROBS = "logprobs"
    OTHER = "other"


class Number(enum.Enum):
    ONE = 1


@pytest.mark.parametrize(
    ("doc", "field", "keys"),
    [
        ({1: np.arange(3), "1": np.zeros(2, np.float32)}, '$["1"]', "1 and '1'"),
        ({"a": {True: 1, "true": 2}}, "$.a.true", "True and 'true'"),
        ({"a": [{None: [1], "null": [2]}]}, "$.a[0].null", "None and 'null'"),
        ({Key.OTHER: {"x": 1}, "other": 2}, "$.other", "Key.OTHER"),
        ({Number.ONE: 1, 1: 2}, '$["1"]', "Number.ONE"),
        ({1.5: 1, "1.5": 2}, '$["1.5"]', "1.5 and '1.5'"),
        # Inside a long list, where dumps otherwise lets orjson write plain pieces without a walk.
        ({"content": [{"x": 1}] * 2000 + [{2: 1, "2": 3}]}, '$.content[2000]["2"]', "2 and '2'"),
    ],
)
def test_keys_written_as_one_name_are_refused_at_their_path(doc: dict[Any, Any], field: str, keys: str) -> None:
    with pytest.raises(EncodeError) as info:
        r3wire.dumps(doc, option=NON_STR)
    assert info.value.field == field
    assert keys in str(info.value)
    with pytest.raises(EncodeError):
        b"".join(r3wire.iter_dumps(doc, option=NON_STR))


def test_an_enum_key_spelling_a_routes_key_is_checked_and_written_as_routes() -> None:
    with pytest.raises(EncodeError, match="non-negative expert id") as info:
        r3wire.dumps({"choices": [{Key.ROUTES: np.array([[[-5]]])}]}, option=NON_STR, num_experts=4)
    assert info.value.field == "$.choices[0].routed_experts[0, 0, 0]"
    routes = np.array([[[3, 1]], [[0, 2]]], dtype=np.int64)
    text = r3wire.dumps({"choices": [{Key.ROUTES: routes}]}, option=NON_STR, num_experts=4)
    assert orjson.loads(text)["choices"][0]["routed_experts"]["schema"] == "r3wire.routes"
    back = r3wire.loads(text)["choices"][0]["routed_experts"]
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, routes)


def test_an_enum_key_spelling_a_logprobs_key_is_checked_as_logprobs() -> None:
    with pytest.raises(EncodeError, match="finite logprob") as info:
        r3wire.dumps({"choices": [{Key.LOGPROBS: np.array([-1.0, np.nan], np.float32)}]}, option=NON_STR)
    assert info.value.field == "$.choices[0].logprobs[1]"


def test_distinct_non_str_keys_still_round_trip() -> None:
    doc = {1: 2, 3.5: [1, 2], None: "n", "x": {4: np.arange(2), Key.OTHER: True}}
    for option in (NON_STR, NON_STR | orjson.OPT_SORT_KEYS):
        back = r3wire.loads(r3wire.dumps(doc, option=option))
        assert set(back) == {"1", "3.5", "null", "x"}
        np.testing.assert_array_equal(back["x"]["4"], np.arange(2))
        assert back["x"]["other"] is True


KEYS = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([True, False, None, 1.5, -0.0, Key.OTHER, Key.ROUTES, Number.ONE]),
    st.sampled_from(["1", "-1", "0", "true", "false", "null", "1.5", "-0.0", "other", "routed_experts", "a"]),
)


def _written_name(key: object) -> str:
    (name,) = orjson.loads(orjson.dumps({key: None}, option=NON_STR))
    return str(name)


@given(st.dictionaries(KEYS, st.integers(min_value=0, max_value=3), max_size=6), st.booleans())
def test_no_member_is_lost_silently(doc: dict[Any, int], nested: bool) -> None:
    """dumps refuses exactly the documents where two keys are written as one name; otherwise loads gives back one
    member per key, with its value."""
    document: Any = {"outer": [doc]} if nested else doc
    names = [_written_name(key) for key in doc]
    if len(set(names)) < len(names):
        with pytest.raises(EncodeError, match="distinct member names"):
            r3wire.dumps(document, option=NON_STR)
        return
    back = r3wire.loads(r3wire.dumps(document, option=NON_STR))
    assert (back["outer"][0] if nested else back) == dict(zip(names, doc.values(), strict=True))
