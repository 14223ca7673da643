"""r3wire.dumps / r3wire.loads at their edges: hostile documents, duplicate members, the inverse promise,
logprob safety, parsed input and threads (issues 11 and 12)."""

from __future__ import annotations

import array
import collections
import dataclasses
import enum
import logging
import math
import threading
import tracemalloc
from typing import Any, ClassVar

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import DecodeError, EncodeError, R3WireError, decode_routes, encode_routes, formats
from r3wire.synthetic import synthetic_routes

BIG = synthetic_routes(400, layers=4, top_k=2, num_experts=16, seed=3)  # base64 longer than loads' cut size


def _bad_envelope() -> dict[str, Any]:
    envelope = encode_routes(np.zeros((1, 1, 2), np.uint8))
    envelope["shape"] = [1, 1, 3]
    return envelope


# --- the error path is linear in the document (issue 11.3) ---


def test_error_deep_in_a_deep_and_wide_document_is_located_cheaply() -> None:
    # 1000 levels (orjson's limit is 1024), each with 300 sibling containers: locating by copying a path per
    # container held ~10**8 list slots; a parent link per container holds ~3 * 10**5.
    depth, siblings = 1000, 300
    text = b"".join([b"[[]," * 1 + b"[]," * (siblings - 1)] * depth) + orjson.dumps(_bad_envelope()) + b"]" * depth
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError) as info:
            r3wire.loads(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The path is located exactly, then shown bounded: its first and last 16 parts.
    assert info.value.field == "$" + f"[{siblings}]" * 16 + f"...({depth - 32} more)" + f"[{siblings}]" * 16 + ".data"
    assert peak < 40 * len(text) + (64 << 20)


def test_error_at_the_end_of_a_wide_document() -> None:
    good = orjson.dumps(encode_routes(np.ones((1, 2, 2), np.uint8)))
    n = 20000
    text = b'{"items":[' + b",".join([good] * (n - 1) + [orjson.dumps(_bad_envelope())]) + b"]}"
    with pytest.raises(DecodeError) as info:
        r3wire.loads(text)
    assert info.value.field == f"$.items[{n - 1}].data"


# --- loads never accepts what orjson rejects; duplicate members (issue 11.4) ---

BAD_BYTES = [b"\x01", b"\x1f", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]


@pytest.mark.parametrize("bad", BAD_BYTES)
@pytest.mark.parametrize("where", ["first", "last", "middle"])
def test_bad_bytes_in_a_discarded_duplicate_are_refused(bad: bytes, where: str) -> None:
    long = b"A" * 3000 + bad + b"A" * 3000
    blob = b'"' + long + b'"'
    ok = b'"AAAA"'
    members = {"first": [blob, ok, ok], "last": [ok, ok, blob], "middle": [ok, blob, ok]}[where]
    text = b"[" + b",".join(b'{"data":' + m + b',"k":1}' for m in members) + b',{"data":' + blob + b',"data":1}]'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    with pytest.raises(DecodeError) as info:
        r3wire.loads(text)
    if bad < b"\x80":  # a control character: not JSON, no value to name
        assert str(info.value).startswith("$ must be valid JSON")
    else:  # not UTF-8: the first string holding it, by its path (a discarded duplicate's would not be named)
        first = {"first": 0, "middle": 1, "last": 2}[where]
        assert info.value.field == f"$[{first}].data"
        assert "no lone surrogate" in str(info.value)
    # Inside an envelope whose "data" is then given again.
    envelope = orjson.dumps(encode_routes(BIG))
    doubled = envelope[:-1] + b',"data":' + blob + b"}"
    with pytest.raises(DecodeError):
        r3wire.loads(doubled)


def _doubled(envelope: dict[str, Any], key: str, value: Any, *, spelled: str | None = None) -> bytes:
    text = orjson.dumps({"r": envelope})
    name = orjson.dumps(spelled or key)
    return text[:-2] + b"," + name + b":" + orjson.dumps(value) + b"}}"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("data", "AAAA"),
        ("shape", [1, 1, 3]),
        ("dtype", "uint8"),
        ("schema", "r3wire.routes"),
        ("schema", "something.else"),  # names itself an envelope first, then not: still refused
        ("version", 1),
        ("num_experts", 16),
        ("bits", 4),
    ],
)
@pytest.mark.parametrize("big", [False, True])
def test_duplicate_member_names_in_an_envelope_are_refused(key: str, value: Any, big: bool) -> None:
    routes = BIG if big else np.ones((1, 2, 2), np.uint8)
    envelope = encode_routes(routes, num_experts=16, pack_bits=key == "bits")
    text = _doubled(envelope, key, envelope.get(key, value) if key != "schema" else value)
    with pytest.raises(DecodeError, match="unique member names") as info:
        r3wire.loads(text)
    assert info.value.field == "$.r"
    assert repr(key) in str(info.value)


def test_duplicates_spelled_with_escapes_are_refused() -> None:
    envelope = encode_routes(np.ones((1, 2, 2), np.uint8))
    text = orjson.dumps({"r": envelope})[:-2] + b',"\\u0073hape":[1,2,2]}}'
    with pytest.raises(DecodeError, match="unique member names"):
        r3wire.loads(text)
    spaced = orjson.dumps({"r": envelope})[:-2] + b' ,\n "dtype"  :  "uint8"}}'
    with pytest.raises(DecodeError, match="unique member names"):
        r3wire.loads(spaced)


@pytest.mark.parametrize(
    "text",
    [
        b'{"data": 1, "data": 2, "shape": [1], "x": "\\"data\\": 3"}',
        b'[{"schema": "a", "schema": "b"}, {"data": "' + b"A" * 5000 + b'", "data": "B"}, "r3wire.routes"]',
        b'{"k": "\\u0064ata", "\\u0064ata": 1, "data": 2}',
    ],
)
def test_duplicates_outside_envelopes_are_kept_as_orjson_keeps_them(text: bytes) -> None:
    assert r3wire.loads(text) == orjson.loads(text)


def test_names_inside_strings_are_not_members() -> None:
    envelope = encode_routes(np.ones((1, 2, 2), np.uint8))
    doc = {"r": envelope, "note": ' {"data": 1, "shape" : 2} ,"dtype":', "data": "shape"}
    back = r3wire.loads(orjson.dumps(doc))
    assert back["note"] == doc["note"]
    assert np.array_equal(back["r"], np.ones((1, 2, 2), np.uint8))
    # Long runs of escaped backslashes beside \u escapes: the key scan stays linear (a backtracking pattern
    # took minutes here).
    slashes = {"r": envelope, "k\\" * 20000 + '"': "\\" * 200000 + "é:", "é": 1}
    assert r3wire.loads(orjson.dumps(slashes).replace("é".encode(), b"\\u00e9"))["é"] == 1


# --- dumps and loads are inverse, or dumps says why not (issue 11.5) ---


@pytest.mark.parametrize("name", ["r3wire.routes", "r3wire.array", "r3wire.logprobs"])
def test_objects_that_spell_a_schema_are_refused(name: str) -> None:
    with pytest.raises(EncodeError, match=r"^\$\.a\[1\]\.schema must be no r3wire schema name") as info:
        r3wire.dumps({"a": [1, {"schema": name, "data": "AAAA"}]})
    assert info.value.field == "$.a[1].schema"
    with pytest.raises(EncodeError):
        r3wire.dumps({"routed_experts": encode_routes(BIG)})  # an envelope already made: pass the array instead
    assert r3wire.loads(r3wire.dumps({"schema": "r3wire.other"})) == {"schema": "r3wire.other"}


def test_arrays_over_32_dimensions_are_refused() -> None:
    if int(np.__version__.split(".")[0]) < 2:
        pytest.skip("NumPy 1 makes at most 32 dimensions")
    with pytest.raises(EncodeError, match=r"^\$\.x must be an array of at most 32 dimensions, got 33"):
        r3wire.dumps({"x": np.zeros((1,) * 33, np.uint8)})
    assert r3wire.loads(r3wire.dumps({"x": np.zeros((1,) * 32, np.uint8)}))["x"].shape == (1,) * 32


@pytest.mark.parametrize("shape", [(2, 0, 8), (2, 4, 0), (0, 0, 1)])
def test_routes_without_layers_or_slots_are_refused(shape: tuple[int, ...]) -> None:
    # The one encode check (prepare_routes) on every path: plain, with num_experts, bit-packed, streamed.
    expected = r"^\$\.routed_experts must be a 3-d array \[rows, layers >= 1, top_k >= 1\], got shape "
    for options in ({}, {"num_experts": 16}, {"pack_bits": True}):
        with pytest.raises(EncodeError, match=expected) as info:
            r3wire.dumps({"routed_experts": np.zeros(shape, np.int32)}, **options)
        assert info.value.field == "$.routed_experts"
    with pytest.raises(EncodeError, match=expected):
        b"".join(r3wire.iter_dumps({"routed_experts": np.zeros(shape, np.int32)}))
    empty = r3wire.loads(r3wire.dumps({"routed_experts": np.zeros((0, 3, 2), np.int32)}))["routed_experts"]
    assert empty.shape == (0, 3, 2)


# --- logprob safety (issue 12.6) ---


def test_logprobs_travel_as_logprobs_envelopes() -> None:
    values = np.array([-0.5, -1.25, -0.0], np.float32)
    text = r3wire.dumps({"choices": [{"logprobs": values, "other": values}]})
    plain = orjson.loads(text)["choices"][0]
    assert plain["logprobs"]["schema"] == "r3wire.logprobs"
    assert plain["other"]["schema"] == "r3wire.array"
    back = r3wire.loads(text)["choices"][0]["logprobs"]
    assert back.tobytes() == values.tobytes()
    custom = orjson.loads(r3wire.dumps({"lp": values, "logprobs": values}, logprobs_keys=("lp",)))
    assert (custom["lp"]["schema"], custom["logprobs"]["schema"]) == ("r3wire.logprobs", "r3wire.array")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_logprobs_are_refused_with_their_path(bad: float) -> None:
    values = np.array([-0.5, -1.0, bad, -2.0], np.float64)
    with pytest.raises(EncodeError, match=r"^\$\.choices\[0\]\.logprobs\[2\] must be a finite logprob") as info:
        r3wire.dumps({"choices": [{"logprobs": values}]})
    assert info.value.field == "$.choices[0].logprobs[2]"


def test_clamped_logprobs_are_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    big = np.full(50000, -0.5, np.float32)
    big[[7, 49999]] = [np.nan, -np.inf]
    doc = {"choices": [{"logprobs": np.array([np.nan, -1.0])}, {"logprobs": big}]}
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        text = r3wire.dumps(doc, clamp_logprobs=True, request_id="req-7")
    records = [r for r in caplog.records if r.name == "r3wire.logprobs"]
    assert len(records) == 1
    record = records[0]
    assert record.r3wire_num_clamped == 3  # type: ignore[attr-defined]
    assert record.r3wire_total == 50002  # type: ignore[attr-defined]
    assert record.r3wire_paths == ["$.choices[0].logprobs", "$.choices[1].logprobs"]  # type: ignore[attr-defined]
    assert record.r3wire_request_id == "req-7"  # type: ignore[attr-defined]
    assert "req-7" in record.getMessage()
    back = r3wire.loads(text)["choices"]
    assert back[0]["logprobs"].tolist() == [-9999.0, -1.0]
    assert back[1]["logprobs"][[7, 49999]].tolist() == [-9999.0, -9999.0]
    assert np.isnan(big[7])  # the caller's array is untouched
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="r3wire"):
        r3wire.dumps({"logprobs": np.zeros(3)}, clamp_logprobs=True)
    assert not caplog.records


def test_logprobs_options_and_dtypes() -> None:
    with pytest.raises(EncodeError, match=r"^\$\.logprobs\.dtype must be float32 or float64"):
        r3wire.dumps({"logprobs": np.zeros(3, np.float16)}, clamp_logprobs=True)
    with pytest.raises(EncodeError, match=r"^\$\.logprobs\.dtype must be"):
        r3wire.dumps({"logprobs": np.zeros(3, np.int32)})
    with pytest.raises(R3WireError, match="logprobs_keys must be no key that is also in routes_keys"):
        r3wire.dumps({}, logprobs_keys=("routed_experts",))
    with pytest.raises(R3WireError, match="clamp_logprobs must be a bool"):
        r3wire.dumps({}, clamp_logprobs=1)  # type: ignore[arg-type]
    with pytest.raises(R3WireError, match="request_id must be a string"):
        r3wire.dumps({}, request_id=7)  # type: ignore[arg-type]
    assert orjson.loads(r3wire.dumps({"logprobs": np.zeros(2)}, logprobs_keys=()))["logprobs"]["schema"] == (
        "r3wire.array"
    )


# --- loads of a parsed document (issue 12.6) ---


def test_loads_decodes_a_parsed_document_without_touching_it() -> None:
    doc = {"choices": [{"routed_experts": BIG, "logprobs": np.array([-0.5]), "ids": [1, 2]}], "n": 1}
    parsed = orjson.loads(r3wire.dumps(doc, num_experts=16))
    snapshot = orjson.dumps(parsed)
    back = r3wire.loads(parsed, num_experts=16)
    assert np.array_equal(back["choices"][0]["routed_experts"], BIG)
    assert back["choices"][0]["logprobs"].tolist() == [-0.5]
    assert back["choices"][0]["ids"] == [1, 2]
    assert orjson.dumps(parsed) == snapshot
    assert isinstance(parsed["choices"][0]["routed_experts"], dict)
    top = r3wire.loads(orjson.loads(r3wire.dumps([BIG])))
    assert np.array_equal(top[0], BIG)
    parsed["choices"][0]["routed_experts"]["shape"] = [1, 2]
    with pytest.raises(DecodeError) as info:
        r3wire.loads(parsed)
    assert info.value.field == "$.choices[0].routed_experts.shape"


def test_loads_input_buffers() -> None:
    text = r3wire.dumps({"routed_experts": BIG, "s": "é"})
    # Views into a larger buffer (a reused send buffer): the quote after the view must not end the blob.
    padded = bytearray(b'["x"' + text + b'"data":"' + b"A" * 5000 + b'"')
    inner = memoryview(padded)[4 : 4 + len(text)]
    forms: list[Any] = [
        np.frombuffer(text, np.uint8),
        memoryview(bytearray(text)),
        memoryview(text).cast("c"),
        inner,
        np.frombuffer(padded, np.uint8)[4 : 4 + len(text)],
        np.array(np.frombuffer(text, np.uint8)),  # a buffer NumPy owns
    ]
    for form in forms:
        assert np.array_equal(r3wire.loads(form)["routed_experts"], BIG)
    with pytest.raises(DecodeError, match="valid JSON"):
        r3wire.loads(inner[: len(text) - 3000])  # cut inside the blob: the view ends before its closing quote
    with pytest.raises(DecodeError, match="contiguous"):
        r3wire.loads(np.frombuffer(text + b" ", np.uint8)[::2])
    with pytest.raises(DecodeError, match=r"^\$ must be JSON text"):
        r3wire.loads({1, 2})
    assert r3wire.loads(3.5) == 3.5  # a parsed document that is a number


def test_loads_of_a_numpy_owned_buffer_finds_the_blobs_end_in_any_piece() -> None:
    """A buffer no bytes object backs (a reused NumPy send buffer) is searched piece by piece (2**18 bytes)."""
    ids = np.arange(3 * 2**17, dtype=np.int32).reshape(-1, 4, 3) % 384  # a blob of ~2 pieces of base64
    text = r3wire.dumps({"a": {"routed_experts": ids}, "b": {"routed_experts": ids[:1000]}}, num_experts=384)
    owned = np.array(np.frombuffer(text, np.uint8))
    back = r3wire.loads(owned.data)
    assert np.array_equal(back["a"]["routed_experts"], ids)
    assert np.array_equal(back["b"]["routed_experts"], ids[:1000])
    for cut in (2**18, 2**18 + 1, len(text) // 2):  # the view ends inside the first blob: no closing quote
        with pytest.raises(DecodeError, match="valid JSON"):
            r3wire.loads(owned[:cut].data)


# --- threads ---


def test_threads_encode_and_decode_their_own_arrays() -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def work(seed: int) -> None:
        try:
            barrier.wait()
            for i in range(20):
                rows = 50 if i % 3 else 3000  # small (in the text) and large (streamed, cut) documents
                rng = np.random.default_rng(seed * 100 + i)
                routes = rng.integers(0, 300, (rows, 6, 4), dtype=np.int32)
                logprobs = rng.standard_normal(rows)
                doc = {"routed_experts": routes, "logprobs": logprobs, "seed": seed}
                text = r3wire.dumps(doc, num_experts=300) if i % 2 else b"".join(r3wire.iter_dumps(doc))
                back = r3wire.loads(text)
                assert back["seed"] == seed
                assert np.array_equal(back["routed_experts"], routes)
                assert back["logprobs"].tobytes() == logprobs.tobytes()
                envelope = orjson.loads(text)["routed_experts"]
                assert np.array_equal(decode_routes(envelope), routes)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


# --- edge inputs found by an outside review: one reader of text, and what dumps hands to orjson ---


class _Text(str):
    def __str__(self) -> str:  # a subclass may say anything here; the characters are what count
        return "not the text"


class _Bytes(bytes):
    pass


def test_text_of_any_str_subclass_or_byte_buffer_is_read_as_it_is() -> None:
    text = r3wire.dumps({"routed_experts": BIG, "s": "é"})
    for form in (_Text(text.decode()), np.str_(text.decode()), _Bytes(text), array.array("B", text)):
        assert np.array_equal(r3wire.loads(form)["routed_experts"], BIG)
    envelope = orjson.dumps(encode_routes(BIG[:2])).decode()
    assert np.array_equal(decode_routes(_Text(envelope)), BIG[:2])
    assert np.array_equal(decode_routes(np.str_(envelope)), BIG[:2])


@pytest.mark.parametrize(
    ("form", "got"),
    [
        (np.array([b"{}"], dtype=object), "format 'O'"),  # object pointers are not text
        (array.array("I", b"{}  "), "format 'I'"),  # nor are 4-byte items, whose len() counts items
        (memoryview(b"{}  ").cast("I"), "format 'I'"),
        (np.frombuffer(b'{"a": 1}', np.uint8)[::2], "non-contiguous"),
    ],
)
def test_buffers_that_are_not_contiguous_bytes_are_refused_by_name(form: Any, got: str) -> None:
    with pytest.raises(DecodeError, match=r"^\$ must be JSON text") as info:
        r3wire.loads(form)
    assert got in str(info.value)


def test_a_2d_byte_buffer_is_its_bytes_in_c_order() -> None:
    text = b'{"a": [1, 2]}  '
    assert r3wire.loads(np.frombuffer(text, np.uint8).reshape(3, 5)) == {"a": [1, 2]}


class _Schema(enum.Enum):
    ARRAY = "r3wire.array"


class _Key(enum.Enum):
    SCHEMA = "schema"


@dataclasses.dataclass
class _Envelope:
    data: str
    shape: list[int]
    dtype: str
    schema: str
    version: int


@dataclasses.dataclass
class _Output:
    text: str
    routed_experts: Any
    score: float = 0.5
    _private: int = 3


def test_enums_and_dataclasses_that_spell_a_schema_are_refused() -> None:
    members = {"data": "AQ==", "shape": [1], "dtype": "uint8", "version": 1}
    cases: list[tuple[dict[Any, Any], int | None]] = [
        ({"x": {"schema": _Schema.ARRAY, **members}}, None),
        ({"x": {_Key.SCHEMA: "r3wire.array", **members}}, orjson.OPT_NON_STR_KEYS),
        ({"x": {_Key.SCHEMA: _Schema.ARRAY, **members}}, orjson.OPT_NON_STR_KEYS),
        ({"x": _Envelope("AQ==", [1], "uint8", "r3wire.array", 1)}, None),
    ]
    for doc, option in cases:
        with pytest.raises(EncodeError, match=r"^\$\.x\.schema must be no r3wire schema name"):
            r3wire.dumps(doc, option=option)


def test_dataclasses_are_written_as_orjson_writes_them_and_checked_like_dicts() -> None:
    out = _Output("hi", np.array([[[1, 2]], [[3, 4]]], np.int32))
    text = r3wire.dumps({"o": out, "mood": _Schema.ARRAY})
    assert list(orjson.loads(text)["o"]) == list(orjson.loads(orjson.dumps(_Output("hi", None))))  # no "_private"
    back = r3wire.loads(text)
    assert back["mood"] == "r3wire.array"
    assert back["o"]["text"] == "hi"
    assert back["o"]["score"] == 0.5
    assert np.array_equal(back["o"]["routed_experts"], out.routed_experts)
    with pytest.raises(EncodeError, match=r"^\$\.o\.score must be a finite number"):
        r3wire.dumps({"o": _Output("hi", None, math.nan)})
    with pytest.raises(EncodeError, match="JSON-serializable"):  # the caller asked orjson to refuse them
        r3wire.dumps({"o": _Output("hi", None)}, option=orjson.OPT_PASSTHROUGH_DATACLASS)


def test_masked_arrays_are_refused_and_subclasses_are_read_as_their_bytes() -> None:
    ma: Any = np.ma  # untyped in NumPy 1.24's stubs
    masked = ma.masked_array([1, 99], mask=[False, True])
    with pytest.raises(EncodeError, match=r"^\$\.x must be an array without a mask"):
        r3wire.dumps({"x": masked})
    with pytest.raises(EncodeError, match="without a mask"):
        encode_routes(ma.masked_array(BIG, mask=BIG > 3))

    class Lying(np.ndarray[Any, Any]):  # a subclass whose max() hides an id that would be sent
        def max(self, *args: Any, **kwargs: Any) -> Any:
            return 0

    lying = np.array([[[1, 200]]], np.int32).view(Lying)
    with pytest.raises(EncodeError, match="num_experts=16"):
        encode_routes(lying, num_experts=16)


def test_envelopes_inside_tuples_of_a_parsed_document_are_decoded_and_tuples_kept() -> None:
    envelope = encode_routes(BIG[:2])
    doc = {"choices": ({"routed_experts": envelope, "t": (1, (2, envelope))},), "x": [envelope]}
    out = r3wire.loads(doc)
    assert type(out["choices"]) is tuple
    assert type(out["choices"][0]["t"][1]) is tuple
    for found in (out["choices"][0]["routed_experts"], out["choices"][0]["t"][1][1], out["x"][0]):
        assert np.array_equal(found, BIG[:2])
    assert doc["choices"][0]["routed_experts"] is envelope  # the caller's document is left as it was
    root = r3wire.loads((envelope, 1))
    assert type(root) is tuple
    assert np.array_equal(root[0], BIG[:2])
    assert root[1] == 1


# --- second review round: how dataclasses, tuples and odd text objects are read ---


@dataclasses.dataclass
class _Plain:
    a: int = 1
    _hidden: int = 2
    later: int = dataclasses.field(default=3, init=False)  # a class attribute: not in __dict__
    shared: ClassVar[int] = 4
    seed: dataclasses.InitVar[int] = 5

    def __post_init__(self, seed: int) -> None:
        self.extra = seed  # not a field, but in __dict__


@dataclasses.dataclass(slots=True)
class _Slotted:
    z: int = 1
    _y: int = 2
    f: float = 0.5


@dataclasses.dataclass
class _Child(_Plain):
    b: str = "x"


@dataclasses.dataclass
class _Node:
    child: Any = None
    x: float = 1.0


def test_dataclass_members_are_the_ones_orjson_writes() -> None:
    for value in (_Plain(), _Slotted(), _Child(), _Node(_Node())):
        assert r3wire.dumps({"v": value}) == orjson.dumps({"v": value})


def test_nested_dataclasses_cost_what_their_members_cost() -> None:
    node = None
    for _ in range(200):  # serializing each subtree to learn its members made this quadratic (seconds, GBs)
        node = _Node(node)
    tracemalloc.start()
    try:
        assert r3wire.dumps({"n": node}) == orjson.dumps({"n": node})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    with pytest.raises(EncodeError, match=r"^\$\.n\.child\.x must be a finite number"):
        r3wire.dumps({"n": _Node(_Node(None, math.nan))}, option=orjson.OPT_NON_STR_KEYS)


def test_a_dataclass_on_int_is_written_as_its_int() -> None:
    @dataclasses.dataclass(eq=False)
    class Count(int):
        pass

    count = int.__new__(Count, 5)
    assert r3wire.dumps({"c": count}) == orjson.dumps({"c": count}) == b'{"c":5}'


def test_loads_keeps_tuple_kinds_and_names_paths_inside_tuples() -> None:
    point = collections.namedtuple("point", "a b")
    envelope = encode_routes(BIG[:2])
    untouched = point(1, "x")
    out = r3wire.loads({"p": untouched, "q": point(envelope, 3)})
    assert out["p"] is untouched  # nothing in it changed: the caller's own tuple
    assert type(out["q"]) is point
    assert np.array_equal(out["q"].a, BIG[:2])
    bad = dict(envelope, data="!!!!")
    with pytest.raises(DecodeError) as info:
        r3wire.loads({"t": (1, bad)})
    assert str(info.value.field).startswith("$.t[1].data")


def test_a_root_envelope_holding_tuples_decodes_to_its_array() -> None:
    for values in (np.zeros((), np.uint8), np.arange(12, dtype=np.int32).reshape(3, 4)):
        envelope = dict(r3wire.encode_array(values), shape=tuple(values.shape))
        assert np.array_equal(r3wire.loads(envelope), values)


def test_odd_text_objects() -> None:
    envelope = dict(encode_routes(BIG[:2]))
    envelope["data"] = np.bytes_(envelope["data"].encode())  # a bytes subclass is its bytes
    assert np.array_equal(decode_routes(envelope), BIG[:2])
    with pytest.raises(DecodeError, match=r"^\$ must be JSON text.*got uint8$"):
        r3wire.loads(np.uint8(49))  # a NumPy scalar has a buffer, but is not the text "1"
    released = memoryview(b"{}")
    released.release()
    with pytest.raises(DecodeError, match="released"):
        r3wire.loads(released)


def test_masked_items_of_a_sequence_are_refused() -> None:
    ma: Any = np.ma
    masked = ma.masked_array(np.array([[1, -1]], np.int16), mask=[[False, True]])
    with pytest.raises(EncodeError, match=r"^routes must be an array without a mask"):
        encode_routes([masked])


def test_an_enum_whose_value_is_itself_is_refused_not_looped_on() -> None:
    class Loop(enum.Enum):
        A = 1

        @property
        def value(self) -> Any:  # the pathological case: it never reaches a value
            return self

    for doc in ({"schema": Loop.A}, {"x": Loop.A}):  # orjson itself crashes on this enum: it must not see it
        with pytest.raises(EncodeError, match="nesting too deep"):
            r3wire.dumps(doc)


def test_a_masked_array_is_not_taken_as_json_text() -> None:
    # Its mask is not part of its bytes: the bytes it hides would be parsed (decode_routes_frame refuses it too).
    ma: Any = np.ma  # untyped in NumPy 1.24's stubs
    text = ma.MaskedArray(np.frombuffer(b'{"a": 1}', np.uint8), mask=True)
    for read in (r3wire.loads, formats.read_response):
        with pytest.raises(DecodeError, match="MaskedArray"):
            read(text)


@pytest.mark.parametrize(
    ("version", "advice"), [(0, "versions start at 1"), (-1, "versions start at 1"), (2, "upgrade")]
)
def test_an_unsupported_version_gets_advice_that_fits_it(version: int, advice: str) -> None:
    envelope = {"data": "", "shape": [0, 1, 1], "dtype": "uint8", "schema": "r3wire.routes", "version": version}
    with pytest.raises(r3wire.UnsupportedVersionError) as info:
        r3wire.decode_routes(envelope)
    assert advice in str(info.value)
    frame = bytearray(r3wire.encode_routes_frame(np.zeros((1, 1, 1), np.uint8)))
    frame[4] = max(version, 0)
    with pytest.raises(r3wire.UnsupportedVersionError) as info:
        r3wire.decode_routes_frame(bytes(frame))
    assert advice in str(info.value)


@pytest.mark.parametrize("shape", [(0, 2, 2), (2, 0), (0,)])
def test_an_empty_array_of_any_shape_is_empty_text(shape: tuple[int, ...]) -> None:
    # memoryview.cast refused a view with a zero in its shape: a TypeError escaped (review 10a).
    empty = np.zeros(shape, np.uint8)
    with pytest.raises(DecodeError, match="empty document"):
        r3wire.loads(empty)
    with pytest.raises(DecodeError, match="empty document"):
        formats.read_response(empty)
