"""r3wire.dumps / r3wire.loads: whole JSON responses with arrays anywhere in them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import (
    DecodeError,
    EncodeError,
    R3WireError,
    UnsupportedVersionError,
    decode_routes,
    encode_array,
    encode_routes,
)
from r3wire.synthetic import synthetic_routes

SMALL = np.array([[[1, 0], [7, 3]], [[2, 5], [0, 6]]], dtype=np.int32)
BIG = synthetic_routes(400, layers=4, top_k=2, num_experts=16, seed=3)  # 3200 ids: cut out of the text by loads
HUGE = synthetic_routes(9000, layers=4, top_k=4, num_experts=16, seed=4)  # 144000 ids: also spliced in by dumps


def _response(routes: np.ndarray[Any, Any]) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "choices": [
            {
                "index": 0,
                "text": 'say "data":"AAAA" \\ and \u00e9',
                "routed_experts": routes,
                "logprobs": {"values": np.array([-0.5, -1.25, np.nan], dtype=np.float32), "ids": [1, 2, 3]},
                "mask": np.array([True, False]),
            }
        ],
        "usage": {"prompt_tokens": np.int64(7), "ratio": np.float32(0.5), "flag": np.bool_(True)},
    }


def _with_envelopes(routes: np.ndarray[Any, Any], num_experts: int | None, pack_bits: bool) -> dict[str, Any]:
    """The same document written the slow, obvious way: each array encoded, then plain orjson."""
    doc = _response(routes)
    choice = doc["choices"][0]
    choice["routed_experts"] = encode_routes(routes, num_experts=num_experts, pack_bits=pack_bits)
    choice["logprobs"]["values"] = encode_array(choice["logprobs"]["values"])
    choice["mask"] = encode_array(choice["mask"])
    doc["usage"] = {"prompt_tokens": 7, "ratio": 0.5, "flag": True}
    return doc


@pytest.mark.parametrize("routes", [SMALL, BIG, HUGE], ids=["small", "big", "huge"])
@pytest.mark.parametrize("num_experts", [None, 16])
@pytest.mark.parametrize("pack_bits", [False, True])
def test_dumps_writes_exactly_the_envelopes_encode_would(
    routes: np.ndarray[Any, Any], num_experts: int | None, pack_bits: bool
) -> None:
    text = r3wire.dumps(_response(routes), num_experts=num_experts, pack_bits=pack_bits)
    expected = _with_envelopes(routes, num_experts, pack_bits)
    assert text == orjson.dumps(expected)
    assert json.loads(text) == expected  # any JSON parser reads it


@pytest.mark.parametrize("routes", [SMALL, BIG, HUGE], ids=["small", "big", "huge"])
@pytest.mark.parametrize("pack_bits", [False, True])
def test_loads_round_trip(routes: np.ndarray[Any, Any], pack_bits: bool) -> None:
    doc = r3wire.loads(r3wire.dumps(_response(routes), num_experts=16, pack_bits=pack_bits))
    choice = doc["choices"][0]
    back = choice["routed_experts"]
    assert back.dtype == np.uint8  # routes are compacted: num_experts=16 fixes uint8
    assert np.array_equal(back, routes)
    assert back.flags.writeable
    assert back.flags.c_contiguous
    values = choice["logprobs"]["values"]
    assert values.dtype == np.float32
    assert values.tobytes() == np.array([-0.5, -1.25, np.nan], dtype=np.float32).tobytes()
    assert choice["mask"].dtype == np.bool_
    assert choice["mask"].tolist() == [True, False]
    assert choice["text"] == 'say "data":"AAAA" \\ and \u00e9'
    assert choice["logprobs"]["ids"] == [1, 2, 3]
    assert doc["usage"] == {"prompt_tokens": 7, "ratio": 0.5, "flag": True}


def test_routes_keys_choose_the_schema() -> None:
    doc = {"routed_experts": SMALL, "other": SMALL, "nested": [{"routed_experts": HUGE}]}
    plain = json.loads(r3wire.dumps(doc))
    assert plain["routed_experts"]["schema"] == "r3wire.routes"
    assert plain["routed_experts"]["dtype"] == "uint8"
    assert plain["other"]["schema"] == "r3wire.array"
    assert plain["other"]["dtype"] == "int32"
    assert plain["nested"][0]["routed_experts"]["schema"] == "r3wire.routes"
    none = json.loads(r3wire.dumps(doc, routes_keys=()))
    assert none["routed_experts"]["schema"] == "r3wire.array"
    custom = json.loads(r3wire.dumps(doc, routes_keys="other"))
    assert custom["other"]["schema"] == "r3wire.routes"
    assert custom["routed_experts"]["schema"] == "r3wire.array"


def test_dumps_does_not_touch_the_callers_document() -> None:
    doc = _response(HUGE)
    inner = doc["choices"][0]
    r3wire.dumps(doc)
    assert doc["choices"][0] is inner
    assert inner["routed_experts"] is HUGE


def test_top_level_values() -> None:
    assert np.array_equal(r3wire.loads(r3wire.dumps(BIG)), BIG)
    assert r3wire.loads(r3wire.dumps([SMALL, (1, 2)]))[1] == [1, 2]
    assert r3wire.loads(r3wire.dumps(np.float64(2.5))) == 2.5
    zero_d = r3wire.loads(r3wire.dumps(np.array(3, dtype=np.int16)))
    assert zero_d.shape == ()
    assert zero_d.dtype == np.int16
    assert r3wire.loads(b'"text"') == "text"


def test_options_pass_to_orjson() -> None:
    text = r3wire.dumps({"b": 1, "a": HUGE}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
    assert text.startswith(b'{\n  "a": {')
    assert np.array_equal(r3wire.loads(text)["a"], HUGE)


@pytest.mark.parametrize("bad", [2.5, "1", -1, True, 1 << 40, np.int64(1)])
def test_a_bad_option_is_the_callers_error(bad: Any) -> None:
    # orjson raised TypeError for some, and "$ must be JSON-serializable, got Invalid opts" for others.
    for call in (r3wire.dumps, r3wire.iter_dumps):
        with pytest.raises(R3WireError) as info:
            call({"a": 1}, option=bad)
        assert type(info.value) is R3WireError
        assert info.value.field == "option"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), np.float32("nan"), np.float64("-inf")])
def test_non_finite_floats_are_refused_not_nulled(bad: Any) -> None:
    doc = {"choices": [{"logprobs": [0.0, bad]}]}
    with pytest.raises(EncodeError, match=r"^\$\.choices\[0\]\.logprobs\[1\] must be a finite number") as info:
        r3wire.dumps(doc)
    assert info.value.field == "$.choices[0].logprobs[1]"


def test_encode_errors_name_the_path() -> None:
    bad = SMALL.copy()
    bad[1, 0, 1] = -4
    with pytest.raises(EncodeError, match=r"^\$\.choices\[0\]\.routed_experts\[1, 0, 1\] must be a non-negative"):
        r3wire.dumps({"choices": [{"routed_experts": bad}]})
    with pytest.raises(EncodeError, match=r'^\$\["a b"\]\.routed_experts must be a 3-d array') as info:
        r3wire.dumps({"a b": {"routed_experts": np.zeros((2, 2), dtype=np.int32)}})
    assert info.value.expected == "a 3-d array [rows, layers, top_k]"
    with pytest.raises(EncodeError, match=r"routed_experts\[0, 0, 0\] must be an expert id below num_experts=4"):
        r3wire.dumps({"routed_experts": SMALL + 4}, num_experts=4)
    with pytest.raises(EncodeError, match=r"^\$\.x\.dtype must be one of"):
        r3wire.dumps({"x": np.array([1 + 2j])})


def test_unserializable_values() -> None:
    with pytest.raises(EncodeError, match=r"^\$\.x must be JSON-serializable, got Type is not JSON serializable: set"):
        r3wire.dumps({"x": {1, 2}})  # named at its path, where orjson names only the type
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(EncodeError):
        r3wire.dumps(cycle)
    with pytest.raises(R3WireError, match="num_experts must be an integer"):
        r3wire.dumps({}, num_experts=0)
    with pytest.raises(R3WireError, match="pack_bits must be a bool"):
        r3wire.dumps({}, pack_bits="yes")  # type: ignore[arg-type]
    with pytest.raises(R3WireError, match="routes_keys"):
        r3wire.dumps({}, routes_keys=[["unhashable"]])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        # bytes iterate as ints: no key ever matched, and routes went out as a plain array with no id check.
        (b"routed_experts", "routes_keys"),
        (bytearray(b"x"), "routes_keys"),
        ({1, 2}, "routes_keys[0]"),
        ([None], "routes_keys[0]"),
        (5, "routes_keys"),
        (range(10**12), "routes_keys"),  # read no further than 1024 keys (was a minute, then out of memory)
        (np.zeros((2, 2), np.uint8).data, "routes_keys"),
    ],
)
def test_key_collections_are_strings_read_within_a_bound(keys: Any, field: str) -> None:
    body = {"routed_experts": np.array([[[0, 7]]], np.uint8)}
    for name in ("routes_keys", "logprobs_keys"):
        with pytest.raises(R3WireError) as caught:
            r3wire.dumps(body, num_experts=4, **{name: keys})
        assert caught.value.field == field.replace("routes_keys", name)
        with pytest.raises(R3WireError):
            r3wire.iter_dumps(body, num_experts=4, **{name: keys})
    # Any iterable of strings is taken, a lone string as one key.
    good: Any
    for good in ("routed_experts", {"routed_experts": 0}, iter(["x", "routed_experts"])):
        with pytest.raises(EncodeError, match="expert id below num_experts=4"):
            r3wire.dumps(body, num_experts=4, routes_keys=good)


def _envelope(**changes: Any) -> dict[str, Any]:
    envelope = encode_routes(BIG, num_experts=16)
    envelope.update(changes)
    return envelope


def _envelope_text(**changes: Any) -> bytes:
    return orjson.dumps({"choices": [{"routed_experts": _envelope(**changes)}]})


@pytest.mark.parametrize(
    ("changes", "field", "error"),
    [
        ({"shape": [400, 4]}, "$.choices[0].routed_experts.shape", DecodeError),
        ({"dtype": "int64"}, "$.choices[0].routed_experts.dtype", DecodeError),
        ({"version": 99}, "$.choices[0].routed_experts.version", UnsupportedVersionError),
        ({"data": "AAAA" * 1300}, "$.choices[0].routed_experts.data", DecodeError),
        ({"data": "*" * 5000}, "$.choices[0].routed_experts.data", DecodeError),
        ({"num_experts": 8}, "$.choices[0].routed_experts.data[0, 0, 1]", DecodeError),
    ],
)
def test_decode_errors_name_the_path(changes: dict[str, Any], field: str, error: type[DecodeError]) -> None:
    with pytest.raises(error) as direct:
        decode_routes(_envelope(**changes))
    with pytest.raises(error) as info:
        r3wire.loads(_envelope_text(**changes))
    assert type(info.value) is error
    assert info.value.field == field
    assert str(info.value) == f"$.choices[0].routed_experts.{direct.value}"
    assert (info.value.expected, info.value.got) == (direct.value.expected, direct.value.got)


def test_loads_checks_against_the_callers_limits() -> None:
    text = _envelope_text()
    with pytest.raises(DecodeError, match=r"routed_experts\.num_experts must be 32 \(the caller's num_experts\)"):
        r3wire.loads(text, num_experts=32)
    with pytest.raises(DecodeError, match=r"routed_experts\.shape must be at most max_elements=100"):
        r3wire.loads(text, max_elements=100)
    with pytest.raises(R3WireError, match="max_elements"):
        r3wire.loads(text, max_elements=-1)


def test_loads_leaves_non_envelopes_alone() -> None:
    seed = {"data": "AQID", "shape": [1, 1, 3], "dtype": "uint8"}  # the seed's envelope: nothing says "routes"
    other = {"schema": "r3wire.unknown", "data": "AQID"}  # a schema name r3wire does not know
    blob = "QUJD" * 1100  # long base64-looking "data" of an ordinary object: cut out, then put back
    doc = {"seed": seed, "other": other, "payload": {"data": blob}, "list": [{"data": blob + "=="}]}
    assert r3wire.loads(orjson.dumps(doc)) == doc


@pytest.mark.parametrize(
    "text",
    [
        # A long string that is not base64, or holds escapes, under a "data" key.
        b'{"data":"' + b"x" * 5000 + b'\\"y","k":1}',
        b'{"data":"' + b"\\\\" * 3000 + b'"}',
        # The key "data" spelled inside another key, and inside string values.
        b'{"x\\"data":"' + b"A" * 5000 + b'","y":"\\"data\\":\\"' + b"B" * 5000 + b'"}',
        b'["\\\\", {"data":"' + b"C" * 5000 + b'"}]',
        # Duplicate keys: the last one wins, as in orjson.
        b'{"data":"' + b"D" * 5000 + b'","data":"' + b"E" * 5000 + b'"}',
        # Non-ASCII and escapes that spell an envelope's schema.
        b'{"data":"' + "é".encode() * 3000 + b'","s":"\\u00e9"}',
        b' { "data" : "' + b"F" * 5000 + b'" } ',
    ],
)
def test_loads_equals_orjson_on_documents_without_envelopes(text: bytes) -> None:
    assert r3wire.loads(text) == orjson.loads(text)
    assert r3wire.loads(text.decode()) == orjson.loads(text)
    assert r3wire.loads(bytearray(text)) == orjson.loads(text)
    assert r3wire.loads(memoryview(text)) == orjson.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        b'{"data":"' + b"A" * 5000 + b'\x01"}',  # a control character inside a string is not JSON
        b'{"data":"' + b"A" * 5000 + b'"',
        b'{"a":"x"data":"' + b"A" * 5000 + b'"}',
        b'{"a":1,}',
        b"",
    ],
)
def test_invalid_json_is_a_decode_error(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    with pytest.raises(DecodeError, match=r"^\$ must be valid JSON"):
        r3wire.loads(text)


def test_text_that_is_not_utf8_is_named_at_the_string_holding_it() -> None:
    text = b'{"a":[1,{"data":"' + b"A" * 5000 + b'\xff"}]}'
    with pytest.raises(DecodeError) as info:
        r3wire.loads(text)
    assert info.value.field == "$.a[1].data"
    assert str(info.value).endswith(
        "got a lone surrogate \\udcff (or the byte 0xff, which is not UTF-8) at character 5000"
    )


def test_loads_input_types() -> None:
    text = r3wire.dumps({"routed_experts": BIG})
    for form in (text, bytearray(text), memoryview(text), text.decode()):
        assert np.array_equal(r3wire.loads(form)["routed_experts"], BIG)
    with pytest.raises(DecodeError, match=r"^\$ must be JSON text"):
        r3wire.loads(object())


def test_escaped_schema_is_still_an_envelope() -> None:
    envelope = encode_routes(SMALL)
    text = json.dumps({"r": envelope}).replace("r3wire.routes", "r3wire\\u002eroutes").encode()
    assert np.array_equal(r3wire.loads(text)["r"], SMALL)
    spaced = json.dumps({"r": encode_routes(BIG)}, indent=1).encode()  # no splice: other spacing still decodes
    assert np.array_equal(r3wire.loads(spaced)["r"], BIG)


def test_deep_nesting_is_not_a_recursion_error() -> None:
    for depth in (1000, 5000):
        deep = b"[" * depth + b'{"a":1}' + b"]" * depth
        try:
            orjson.loads(deep)
        except orjson.JSONDecodeError:
            with pytest.raises(DecodeError):
                r3wire.loads(deep)
            continue
        node = r3wire.loads(deep)
        for _ in range(depth):
            (node,) = node
        assert node == {"a": 1}


def test_tensors_are_arrays() -> None:
    torch = pytest.importorskip("torch")
    routes = torch.from_numpy(BIG.astype(np.int64))
    doc = r3wire.loads(r3wire.dumps({"routed_experts": routes, "x": torch.ones(3)}, num_experts=16))
    assert np.array_equal(doc["routed_experts"], BIG)
    assert doc["x"].dtype == np.float32
    assert "torch" in sys.modules


def test_long_lists_are_still_checked_item_by_item() -> None:
    floats = [0.5] * 40
    floats[23] = float("nan")
    with pytest.raises(EncodeError, match=r"^\$\.lp\[23\] must be a finite number"):
        r3wire.dumps({"lp": floats})
    huge = [1e308] * 40  # the sum overflows; every value is finite
    assert r3wire.loads(r3wire.dumps(huge)) == huge
    mixed: list[Any] = [65520] * 20 + [np.array(0.0, dtype=np.float16), "s", None]
    back = r3wire.loads(r3wire.dumps(mixed))  # no arithmetic between the items (float16 would overflow)
    assert back[:20] == [65520] * 20
    assert back[20].dtype == np.float16
    ids = [*range(100), {"routed_experts": SMALL}]
    assert np.array_equal(r3wire.loads(r3wire.dumps(ids))[100]["routed_experts"], SMALL)


def test_loads_decodes_logprobs_envelopes() -> None:
    from r3wire import encode_logprobs

    values = np.array([-0.25, -9999.0, -0.0], dtype=np.float32)
    body = orjson.dumps({"logprobs": encode_logprobs(values)})
    back = r3wire.loads(body)["logprobs"]
    assert back.dtype == np.float32
    assert back.tobytes() == values.tobytes()
    bad = orjson.dumps({"logprobs": encode_logprobs(values) | {"data": "AADAfwAAwH8AAMB/"}})
    with pytest.raises(DecodeError) as info:
        r3wire.loads(bad)
    assert info.value.field is not None
    assert info.value.field.startswith("$.logprobs")


def test_loads_of_a_parsed_document_reads_a_str_subclass_schema_by_its_characters() -> None:
    envelope = encode_routes(np.array([[[1, 2]]], dtype=np.int32))
    envelope["schema"] = np.str_(envelope["schema"])  # a document built in process; it was left as a dict
    got = r3wire.loads({"choices": [{"routed_experts": envelope}]})["choices"][0]["routed_experts"]
    assert isinstance(got, np.ndarray)
    assert got.tolist() == [[[1, 2]]]


def test_error_paths_stay_short_for_long_keys_and_deep_documents() -> None:
    from r3wire import formats

    key = "k" * 100_000
    with pytest.raises(r3wire.DecodeError) as info:
        formats.read_response({"choices": [{key: {"routed_experts": "@@@"}}]}, num_layers=1, top_k=1)
    assert info.value.field == '$.choices[0]["' + "k" * 61 + '..." (100000 characters)].routed_experts'
    assert len(str(info.value)) < 400
    deep: dict[str, Any] = {"routed_experts": [[[-1, "x"]]]}
    for _ in range(60):
        deep = {"a": deep}
    with pytest.raises(r3wire.DecodeError) as info:
        formats.read_response(deep)
    assert info.value.field is not None
    assert info.value.field.startswith("$" + ".a" * 16 + "...(29 more)" + ".a" * 15 + ".routed_experts")
    # The exact keys stay available where a result is returned.
    (found,) = formats.read_response({key: {"routed_experts": [[[1]]]}})
    assert found.parts == (key, "routed_experts")
    assert found.path == f"$.{key}.routed_experts"


@pytest.mark.parametrize(
    "value", [np.timedelta64(5, "s"), np.timedelta64("NaT", "s"), np.timedelta64(5, "ns"), np.datetime64("2020-01-01")]
)
def test_timedelta64_and_datetime64_scalars_are_refused_at_their_path(value: Any) -> None:
    # np.timedelta64 is an np.signedinteger: int() of it raised TypeError, or dropped the unit ("ns" came out as 5).
    writers: tuple[Callable[[Any], bytes], ...] = (r3wire.dumps, lambda doc: b"".join(r3wire.iter_dumps(doc)))
    for write in writers:
        with pytest.raises(r3wire.EncodeError) as info:
            write({"latency": [value]})
        assert info.value.field == "$.latency[0]"
        assert "JSON-serializable" in str(info.value)
    # Even where orjson is asked to write NumPy values: it writes NaT as 1970-01-01 (and crashed on some dates).
    with pytest.raises(r3wire.EncodeError):
        r3wire.dumps({"at": value}, option=orjson.OPT_SERIALIZE_NUMPY)
    # Nor is one an integer or a logprob where values are read.
    with pytest.raises(r3wire.R3WireError):
        r3wire.read_logprobs_content({"content": [{"logprob": value}]})
    with pytest.raises(r3wire.R3WireError):
        r3wire.encode_logprobs([value])
    with pytest.raises(r3wire.R3WireError):
        r3wire.formats.read([[[value, 1]]])


@pytest.mark.parametrize("value", [np.timedelta64(1, "ns"), np.timedelta64(3, "s")])
def test_a_timedelta64_is_never_taken_for_an_integer_argument(value: Any) -> None:
    from r3wire.bitpack import pack_bits

    envelope = {"schema": "r3wire.routes", "version": value, "data": "", "shape": [0, 1, 1], "dtype": "uint8"}
    with pytest.raises(r3wire.DecodeError, match=r"^version must be an integer"):
        r3wire.decode_routes(envelope)
    with pytest.raises(r3wire.R3WireError, match=r"^bits must be an integer"):
        pack_bits(np.zeros(4, np.uint8), bits=value)
    with pytest.raises(r3wire.R3WireError, match=r"^fill must be a number"):
        r3wire.pad_sequences([np.array([1, 2]), np.array([1])], side="right", fill=value)


def test_dumps_advice_for_a_non_finite_logprob_names_its_own_option() -> None:
    def streamed(doc: Any) -> bytes:
        return b"".join(r3wire.iter_dumps(doc))

    for call in (r3wire.dumps, streamed):
        with pytest.raises(r3wire.EncodeError) as caught:
            call({"logprobs": np.array([-0.5, np.nan])})
        assert "pass clamp_logprobs=True" in str(caught.value)
    with pytest.raises(r3wire.EncodeError, match="pass clamp=True"):
        r3wire.encode_logprobs(np.array([-0.5, np.nan]))


def test_clamp_logprobs_covers_a_plain_list_under_a_logprobs_key(caplog: pytest.LogCaptureFixture) -> None:
    lists: dict[str, list[float | None]] = {"logprobs": [None, -0.5, float("inf"), float("nan")], "other": [1.5]}
    doc = {"choices": [lists]}
    with caplog.at_level("WARNING", logger="r3wire.logprobs"):
        body = r3wire.dumps(doc, clamp_logprobs=True, request_id="req-7")
    assert orjson.loads(body) == {"choices": [{"logprobs": [-9999.0, -0.5, -9999.0, -9999.0], "other": [1.5]}]}
    [record] = caplog.records
    assert record.r3wire_num_clamped == 3  # type: ignore[attr-defined]
    assert record.r3wire_total == 4  # type: ignore[attr-defined]
    assert record.r3wire_paths == ["$.choices[0].logprobs"]  # type: ignore[attr-defined]
    assert lists["logprobs"][0] is None  # the caller's list is not changed
    assert b"".join(r3wire.iter_dumps(doc, clamp_logprobs=True)) == body
    # Nothing to clamp: written as given (ints stay ints); not logprobs by the value rule: a plain list.
    assert r3wire.dumps({"logprobs": [-0.5, 0]}, clamp_logprobs=True) == b'{"logprobs":[-0.5,0]}'
    assert r3wire.dumps({"logprobs": [None, "x"]}, clamp_logprobs=True) == b'{"logprobs":[null,"x"]}'
    with pytest.raises(r3wire.EncodeError) as caught:
        r3wire.dumps({"logprobs": [True, float("nan")]}, clamp_logprobs=True)  # a bool is no logprob: not clamped
    assert caught.value.field == "$.logprobs[1]"
    with pytest.raises(r3wire.EncodeError) as caught:
        r3wire.dumps(doc)  # without the option a non-finite float is refused, as anywhere
    assert caught.value.field == "$.choices[0].logprobs[2]"


class _Point(NamedTuple):
    x: Any
    y: Any


class _Items(list[Any]):
    pass


class _Members(dict[str, Any]):
    pass


def test_a_namedtuple_is_written_as_a_list_whatever_it_holds() -> None:
    """orjson refuses a tuple subclass; dumps writes it as a list, as a tuple, whether or not the walk changed
    anything in it (before, only one holding an array or an enum was written)."""
    assert r3wire.dumps({"p": _Point(1, "a")}) == b'{"p":[1,"a"]}'
    body = r3wire.dumps({"p": _Point(np.arange(3, dtype=np.uint8), [1] * 70)})
    decoded = r3wire.loads(body)
    assert decoded["p"][1] == [1] * 70
    assert decoded["p"][0].tolist() == [0, 1, 2]


def test_subclasses_are_refused_at_their_path_under_passthrough_subclass() -> None:
    for value in (_Items([1]), _Members(a=1), _Items([np.arange(2)])):
        with pytest.raises(r3wire.EncodeError) as info:
            r3wire.dumps({"n": 2**70, "v": [value]}, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
        assert info.value.field == "$.v[0]"
        assert "OPT_PASSTHROUGH_SUBCLASS" in str(info.value)
    assert r3wire.dumps({"v": _Items([1])}) == b'{"v":[1]}'


def test_clamp_logprobs_floors_a_list_subclass_as_a_list() -> None:
    body = r3wire.dumps({"logprobs": _Items([-1.0, None, float("nan")])}, clamp_logprobs=True)
    assert body == b'{"logprobs":[-1.0,-9999.0,-9999.0]}'
