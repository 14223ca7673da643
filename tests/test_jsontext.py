"""Integer tokens beyond orjson's 64-bit range read exactly at every text entry point, and loads reporting a
repeated envelope member before decoding the envelope (review 6, findings A and E)."""

from __future__ import annotations

import functools
import json
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

import r3wire
from _calls import python_calls
from r3wire import DecodeError, UnsupportedVersionError, formats
from r3wire._jsonpath import json_path
from r3wire._jsontext import MAX_INT_DIGITS, parse_json

ENVELOPE = '{{"data":"","shape":{shape},"dtype":"uint8","schema":"r3wire.routes","version":{version}}}'


@pytest.mark.parametrize(
    "text",
    [
        '{"request_seed": 18446744073709551617, "x": 123456789012345678901234567890}',
        "[-9223372036854775809, -9223372036854775808, 18446744073709551615, 18446744073709551616]",
        "1" + "0" * 400,
        '{"a": [1, 2, {"b": -' + "9" * 500 + "}]}",
        '["12345678901234567890123", 0.00123456789012345678901, 1.5e300, 12345678901234567890.5]',
        '{"s": "\\\\", "n": 123456789012345678901, "t": "\\"", "u": 123456789012345678902}',
        '{"é": 123456789012345678901, "x": "\u2028"}',
        '[1e300, "x 123456789012345678901", -1.8446744073709552e19]',  # big floats, digits in a string: as parsed
    ],
)
@pytest.mark.parametrize("kind", [str, bytes, bytearray, memoryview])
def test_text_entry_points_read_integers_exactly(text: str, kind: type) -> None:
    data: Any = text if kind is str else kind(text.encode())
    want = json.loads(text)
    assert repr(parse_json(data)) == repr(want)
    assert repr(r3wire.loads(data)) == repr(want)


@pytest.mark.parametrize("kind", [str, bytes])
def test_integers_read_exactly_as_deep_as_orjson_reads(kind: type) -> None:
    text = "[" * 1000 + "123456789012345678901" + "]" * 1000  # deeper than the stdlib parser reads
    got = r3wire.loads(text if kind is str else text.encode())
    for _ in range(1000):
        assert type(got) is list
        assert len(got) == 1
        got = got[0]
    assert got == 123456789012345678901


def test_loads_keeps_big_integers_beside_a_cut_blob() -> None:
    env = r3wire.encode_routes(np.zeros((4096, 2, 2), np.uint8), num_experts=2)
    body = orjson.dumps({"routed_experts": env, "seed": 0}).replace(
        b'"seed":0', b'"seed":340282366920938463463374607431768211457'
    )
    got = r3wire.loads(body)
    assert got["seed"] == 2**128 + 1
    assert type(got["seed"]) is int


def test_version_of_two_to_the_64_is_unsupported_not_malformed() -> None:
    text = ENVELOPE.format(shape="[0,1,1]", version=2**64)
    with pytest.raises(UnsupportedVersionError) as info:
        r3wire.decode_routes(text)
    assert info.value.field == "version"
    assert "18446744073709551616" in str(info.value)
    with pytest.raises(UnsupportedVersionError) as info:
        r3wire.loads(text)
    assert info.value.field == "$.version"


def test_shape_entries_are_quoted_as_the_integers_they_are() -> None:
    with pytest.raises(
        DecodeError, match=r"shape\[2\] must be an integer in 1\.\.9223372036854775807, got 18446744073709551616"
    ):
        r3wire.decode_routes(ENVELOPE.format(shape=f"[0,1,{2**64}]", version=1))


@pytest.mark.parametrize("digits", [310, 400, MAX_INT_DIGITS])
def test_shape_entry_of_hundreds_of_digits_is_named(digits: int) -> None:
    with pytest.raises(DecodeError) as info:
        r3wire.decode_routes(ENVELOPE.format(shape="[" + "9" * digits + ",1,1]", version=1))
    assert info.value.field == "shape[0]"
    assert "an integer in 0..9223372036854775807" in str(info.value)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda t: r3wire.decode_routes(ENVELOPE.format(shape="[" + t + ",1,1]", version=1)), "shape[0]"),
        (lambda t: r3wire.loads('{"a": ' + t + "}"), "$.a"),
        (lambda t: r3wire.loads(("[" + t + "]").encode()), "$[0]"),
        (r3wire.loads, "$"),
        (lambda t: formats.read('{"data":"AQ==","shape":[1,1,1],"start":' + t + "}", "prime-rl"), "start"),
        (
            lambda t: formats.read_response(
                '{"choices":[{"token_ids":['
                + t
                + '],"routed_experts":{"data":"AQ==","shape":[1,1,1],"dtype":"uint8"}}]}'
            ),
            "$.choices[0].token_ids[0]",
        ),
        (lambda t: r3wire.loads('{"a b": [' + t + "]}"), '$["a b"][0]'),
    ],
)
def test_integer_of_more_digits_than_python_converts_is_refused_with_its_path(call: Any, field: str) -> None:
    with pytest.raises(DecodeError) as info:
        call("9" * 5000)
    assert info.value.field == field
    assert f"an integer of at most {MAX_INT_DIGITS} digits, got an integer of 5000 digits" in str(info.value)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (ENVELOPE.format(shape="[" + "9" * 5000 + ",1,1]", version=1), "shape[0]"),
        (ENVELOPE.format(shape="[0,1,1]", version="1" * 5000), "version"),
        ('{"data":"AQ==","shape":[1,1,1],"start":' + "9" * 5000 + "}", "start"),
        ("[[[1, " + "9" * 5000 + "]]]", "[0][0][1]"),
        ('["AQ==", ' + "9" * 5000 + "]", "[1]"),
    ],
)
def test_formats_name_an_over_long_integer_as_every_other_payload_error(text: str, field: str) -> None:
    # One spelling of one member, whichever entry point reads the text: the readers' and decode_routes' (no "$").
    calls: list[Any] = [formats.read, formats.detect]
    if text.startswith("{"):
        calls.append(r3wire.decode_routes if '"schema"' in text else lambda t: formats.read(t, "prime-rl"))
    else:
        calls.append(
            lambda t: formats.read(
                t, "json-lists" if t.startswith("[[") else "fireworks-matrices", num_layers=1, top_k=1
            )
        )
    for call in calls:
        with pytest.raises(DecodeError) as info:
            call(text)
        assert info.value.field == field
        assert str(info.value).startswith(f"{field} must be an integer of at most {MAX_INT_DIGITS} digits")


@pytest.mark.skipif(not hasattr(sys, "set_int_max_str_digits"), reason="Python without an int digit limit")
def test_a_lower_interpreter_digit_limit_is_a_decode_error() -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        with pytest.raises(DecodeError, match="an integer of at most 640 digits, got an integer of 700 digits"):
            r3wire.loads("[" + "1" * 700 + "]")
        assert r3wire.loads("[" + "1" * 600 + "]") == [int("1" * 600)]
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize(
    "text",
    [
        "{12345678901234567890: 1}",  # a number is no member name, even read exactly
        "[0123456789012345678901]",
        "[1 12345678901234567890]",
        "[--12345678901234567890]",
        "[" * 1100 + "123456789012345678901" + "]" * 1100,  # deeper than orjson reads: never a RecursionError
        "[" + "9" * 400 + ",]",
    ],
)
def test_invalid_json_with_big_integers_stays_invalid(text: str) -> None:
    with pytest.raises(DecodeError, match="invalid JSON"):
        r3wire.loads(text)
    with pytest.raises(DecodeError, match="invalid JSON"):
        formats.read_response(text.encode())


def test_a_lone_surrogate_beside_a_big_integer_is_named_at_its_path() -> None:
    text = '["\\ud800", 123456789012345678901]'
    for read in (r3wire.loads, formats.read_response):
        with pytest.raises(DecodeError, match="no lone surrogate") as info:
            read(text.encode())
        assert info.value.field == "$[0]"


def test_nemo_dimensions_of_twenty_digits_get_the_range_message() -> None:
    with pytest.raises(DecodeError) as info:
        formats.read("nrlre1:int8:1x99999999999999999999x1:", "nemo-rl")
    assert info.value.field == "shape[1]"
    assert str(info.value) == "shape[1] must be an integer in 0..9223372036854775807, got 99999999999999999999"
    with pytest.raises(DecodeError) as info:
        formats.read("nrlre1:int8:" + "9" * 100_000 + "x1x1:", "nemo-rl")
    assert info.value.field == "shape[0]"
    assert "(an integer of 100000 digits)" in str(info.value)
    with pytest.raises(DecodeError) as info:  # the first dimension out of range is named, whatever its length
        formats.read("nrlre1:int8:9223372036854775808x" + "9" * 30 + "x1:", "nemo-rl")
    assert info.value.field == "shape[0]"


VALID = '"data":"AAECAw==","shape":[1,2,2],"dtype":"uint8","schema":"r3wire.routes","version":1'
DUPLICATES = {
    "data": VALID + ',"data":"AAAA"',
    "version": VALID + ',"v\\u0065rsion":2',
    "dtype": VALID + ',"dtype":"<i4"',
}


@pytest.mark.parametrize("name", sorted(DUPLICATES))
@pytest.mark.parametrize("kind", [str, bytes])
def test_loads_reports_a_repeated_member_before_decoding(name: str, kind: type) -> None:
    members = DUPLICATES[name]
    for text, field in (("{" + members + "}", "$"), ('{"routed_experts":{' + members + "}}", "$.routed_experts")):
        data: Any = text if kind is str else text.encode()
        with pytest.raises(DecodeError) as info:
            r3wire.loads(data)
        assert type(info.value) is DecodeError  # not UnsupportedVersionError for the repeated version
        assert info.value.field == field
        assert f"an envelope with unique member names, got {name!r} twice" in str(info.value)
    with pytest.raises(DecodeError) as info:  # what decode_routes says of the same envelope
        r3wire.decode_routes("{" + members + "}")
    assert type(info.value) is DecodeError
    assert info.value.field is None


def test_loads_reports_a_repeated_member_before_decoding_a_cut_blob() -> None:
    env = r3wire.encode_routes(np.zeros((4096, 2, 2), np.uint8), num_experts=2)
    text = orjson.dumps({"routed_experts": env})[:-2] + b',"version":2}}'
    with pytest.raises(DecodeError) as info:
        r3wire.loads(text)
    assert type(info.value) is DecodeError
    assert info.value.field == "$.routed_experts"


def _peak(call: Any) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", [str, bytes])
def test_reading_big_integers_exactly_costs_memory_linear_in_the_text(kind: type) -> None:
    # A hostile body of nothing but 20-digit integers takes the exact path for every token. Its peak grows with the
    # text, by a constant (measured 17x the text with orjson 3.9, 37x with 3.13, whose own peak for as many small
    # integers is 14x): four times the text peaks at most about four times as much.
    def text(count: int) -> Any:
        body = "[" + ",".join(["12345678901234567890"] * count) + "]"
        return body if kind is str else body.encode()

    small, large = text(12_500), text(50_000)
    assert parse_json(large) == [12345678901234567890] * 50_000
    peak = _peak(lambda: parse_json(large))
    assert peak < 48 * len(large)
    assert peak < 5 * _peak(lambda: parse_json(small))


def test_a_number_beyond_a_double_is_refused_at_its_path_in_every_text_reader() -> None:
    with pytest.raises(DecodeError) as info:
        r3wire.decode_routes('{"schema": "r3wire.routes", "version": 1, "shape": [1e400, 1, 1]}')
    assert info.value.field == "shape[0]"
    assert str(info.value).endswith("got 1e400 (number out of range)")
    with pytest.raises(DecodeError) as info:
        formats.read_response(b'{"choices": [{"logprobs": {"content": [{"logprob": -1e400}]}}]}')
    assert info.value.field == "$.choices[0].logprobs.content[0].logprob"
    long = "1" + "0" * 400 + ".5"
    with pytest.raises(DecodeError, match=r"got 10000000000000000000\.\.\.00000000.5 \(403 characters\) \(number"):
        r3wire.loads(f"[{long}]")
    assert r3wire.loads("[1e308, 1e-400]") == [1e308, 0.0]  # in range, and underflow to zero, as orjson reads them


def test_dumps_writes_the_integers_loads_reads() -> None:
    """orjson writes integers of 64 bits at most; dumps writes larger ones exactly, as loads reads them, so a body
    read with loads can be written again (a proxy forwarding a 20-digit seed)."""
    text = b'{"seed":18446744073709551616,"a":[1,{"b":-99999999999999999999999}],"c":[' + b"9" * 4300 + b"]}"
    doc = r3wire.loads(text)
    assert doc["seed"] == 2**64
    assert doc["a"][1]["b"] == -(10**23 - 1)
    assert r3wire.dumps(doc) == text
    assert b"".join(r3wire.iter_dumps(doc)) == text
    shared = [2**70]  # a container referenced twice is written twice, as orjson writes any other
    assert r3wire.dumps({"x": shared, "y": (shared, 2**64)}) == (
        b'{"x":[1180591620717411303424],"y":[[1180591620717411303424],18446744073709551616]}'
    )
    assert r3wire.dumps({"s": 2**64}, option=orjson.OPT_INDENT_2) == b'{\n  "s": 18446744073709551616\n}'


def test_dumps_refuses_an_integer_no_reader_accepts_at_its_path() -> None:
    with pytest.raises(r3wire.EncodeError) as info:
        r3wire.dumps({"a": [1, {"b": 10**MAX_INT_DIGITS}]})
    assert info.value.field == "$.a[1].b"
    assert "an integer of at most 4300 digits" in str(info.value)
    with pytest.raises(r3wire.EncodeError) as info:  # what the caller asked orjson to refuse stays refused
        r3wire.dumps({"a": [1, 2**53]}, option=orjson.OPT_STRICT_INTEGER)
    assert info.value.field == "$.a[1]"
    assert "OPT_STRICT_INTEGER" in str(info.value)
    with pytest.raises(r3wire.EncodeError) as info:  # a later refusal of the same document is named too
        r3wire.dumps({"a": [2**64, "\ud800"]})
    assert info.value.field == "$.a[1]"


def test_dumps_honours_a_lower_interpreter_digit_limit() -> None:
    get = getattr(sys, "get_int_max_str_digits", None)
    if get is None:
        pytest.skip("Python before 3.10.7 has no interpreter digit limit")
    before = get()
    sys.set_int_max_str_digits(640)
    try:
        assert r3wire.dumps([10**639]) == b"[1" + b"0" * 639 + b"]"
        with pytest.raises(r3wire.EncodeError) as info:
            r3wire.dumps({"a": [1, 10**640]})
        assert info.value.field == "$.a[1]"
        assert "at most 640 digits" in str(info.value)
    finally:
        sys.set_int_max_str_digits(before)


class _StoredInt(int):
    """An int subclass whose own conversions disagree with the value it stores (what orjson reads)."""

    def __int__(self) -> int:
        return 5

    def __lt__(self, other: object) -> bool:
        raise TypeError("no comparisons")


def test_dumps_writes_an_int_subclass_by_the_value_it_stores() -> None:
    assert r3wire.dumps({"n": _StoredInt(2**70)}) == b'{"n":1180591620717411303424}'
    assert r3wire.dumps({"n": _StoredInt(7)}) == b'{"n":7}'


@pytest.mark.parametrize(
    "members",
    [
        '"num_experts": 1e400, "num_experts": 8',
        '"num_experts": 8, "num_experts": 1e400',
        '"num_experts": "\\udc00", "num_experts": 8',
        '"num_experts": 8, "num_experts": "\\udc00"',
    ],
)
def test_an_envelope_value_fault_is_named_before_a_repeated_member(members: str) -> None:
    # wire-format.md §13, "Several faults in one text": the value's fault first, wherever the repeat is.
    text = '{"data": "AQAHAw==", "shape": [1, 2, 2], "dtype": "uint8", "schema": "r3wire.routes", "version": 1, '
    with pytest.raises(DecodeError) as info:
        r3wire.decode_routes(text + members + "}")
    assert info.value.field == "num_experts"


def test_a_value_fault_nested_to_orjsons_depth_limit_is_named_and_one_beyond_it_is_not_json() -> None:
    # The stdlib parser that finds the place recurses once per level: it must reach orjson's 1024 levels.
    with pytest.raises(DecodeError) as info:
        r3wire.loads("[" * 1024 + "1e400" + "]" * 1024)
    assert info.value.field == json_path([0] * 1024)
    with pytest.raises(DecodeError) as info:
        r3wire.loads("[" * 1025 + "1e400" + "]" * 1025)
    assert info.value.field == "$"
    assert "depth" in str(info.value)


def test_an_over_long_integer_shadowed_by_a_repeated_member_is_still_refused() -> None:
    # orjson keeps the last value of a repeated name, so the long integer was gone from its result and the text was
    # read as {"a": null}; the text's first fault is named, in text order (wire-format.md §13).
    long = "1" + "0" * MAX_INT_DIGITS
    for text in (f'{{"a": {long}, "a": null}}', f'{{"a": null, "b": [{long}], "b": 1, "c": -{long}}}'):
        with pytest.raises(DecodeError) as info:
            r3wire.loads(text)
        assert info.value.field == ("$.a" if text.startswith('{"a": 1') else "$.b[0]")
        assert f"got an integer of {MAX_INT_DIGITS + 1} digits" in str(info.value)


_CUT_BODIES: dict[str, Callable[[Any], object]] = {
    "loads": r3wire.loads,
    "read_response": formats.read_response,
    "decode_routes": r3wire.decode_routes,
}


@pytest.mark.parametrize("entry", sorted(_CUT_BODIES))
@pytest.mark.parametrize("kind", [str, bytes, bytearray, memoryview])
@pytest.mark.parametrize("tail", ["", "}", '"\u00e9"}'])
def test_text_that_is_not_json_is_refused_without_a_step_per_value(entry: str, kind: type, tail: str) -> None:
    # A body cut short (or broken) after 100,000 values was parsed a second time by the stdlib parser, to look for
    # a fault it could place, with a Python call per number: seconds per megabyte, and several times the text in
    # memory. orjson's error already shows the text is not JSON, so it is refused with the same words, and the
    # work in Python stays a constant, whatever the text's length.
    def body(count: int) -> Any:
        text = '{"choices": [{"token_ids": [' + "12345," * count + tail
        return text if kind is str else kind(text.encode())

    call = _CUT_BODIES[entry]
    with pytest.raises(DecodeError, match=r"must be (valid )?JSON.*, got invalid JSON"):
        call(body(100_000))
    assert python_calls(lambda: call(body(100_000))) < 2 * python_calls(lambda: call(body(10))) + 100


@pytest.mark.parametrize("values", ["12345,", "-0.5,", "true,null,"])
@pytest.mark.parametrize(
    ("fault", "field", "words"),
    [
        (b'"\xff"', "$.x[{n}]", "valid UTF-8"),
        (b'{"a": [1, "\\udc00"]}', "$.x[{n}].a[1]", "lone surrogate"),
        (b"-1e999", "$.x[{n}]", "number out of range"),
    ],
)
def test_a_fault_after_many_values_is_placed_without_a_step_per_value(
    values: str, fault: bytes, field: str, words: str
) -> None:
    # To name the place of a value orjson refuses, the text is parsed again by the stdlib parser. Numbers there
    # are read by C functions, and the walk for the fault passes over arrays of numbers in C: the Python work is
    # a constant, not a step per value (it was several per value: seconds for a body of some megabytes).
    def body(count: int) -> bytes:
        return b'{"x": [' + values.encode() * count + fault + b"]}"

    per_value = values.count(",")
    for text in (body(50_000), body(50_000).decode("utf-8", "surrogateescape")):
        with pytest.raises(DecodeError, match=words) as info:
            r3wire.loads(text)
        assert info.value.field == field.format(n=50_000 * per_value)
        calls = python_calls(functools.partial(r3wire.loads, text))
        assert calls < 2 * python_calls(lambda: r3wire.loads(body(10))) + 100
