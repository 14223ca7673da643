"""Properties of r3wire.dumps / r3wire.loads over arbitrary documents.

- loads(dumps(doc)) gives doc back, arrays included (routes compacted by the documented rule, other arrays in
  their own dtype), and any JSON parser reads dumps' output;
- on documents without envelopes, loads agrees with orjson.loads exactly, accepting and rejecting the same
  texts, even when long "data" strings are cut out of the raw bytes before parsing;
- any input to loads is either accepted or raises DecodeError;
- dumps either writes what loads gives back or raises EncodeError (an object spelling an r3wire schema), and
  iter_dumps yields the same bytes; loads of the parsed document equals loads of the text;
- logprobs under logprobs keys are refused when not finite (naming the first one) or clamped to the floor;
- an array changed between iter_dumps and the streaming of its chunks is sent exactly (as it is then, or as it
  was at the call for a copy) or the iterator raises EncodeError naming the element: never a wrapped id;
- an envelope with a member name twice is refused; a long string with bytes orjson refuses is refused even when
  a later duplicate key discards it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_LEAVES, NUMPY_SCALARS
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import r3wire
from r3wire import DecodeError, EncodeError

pytestmark = pytest.mark.property

TRICKY_TEXT = st.sampled_from(['"data":"', '\\"data\\":\\"', "\\", '"', "r3wire", "é", "\u2028", "data"])
KEYS = st.one_of(st.sampled_from(["data", "shape", "dtype", "schema", "version", 'x"data', "data\\"]), st.text())
# Long strings are what loads cuts out of the raw bytes; these units cover base64, escapes and non-ASCII.
LONG_TEXT = st.builds(
    lambda unit, count, tail: unit * (4100 // len(unit) + count) + tail,
    st.sampled_from(["QUJD", "AA==", "x", "\\", '"', "é", "\x01", '"data":"']),
    st.integers(0, 100),
    st.text(max_size=4),
)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
# Routes have at least one layer and one slot (docs/wire-format.md §6); rows may be 0.
ROUTE_SHAPES = st.tuples(st.integers(0, 4), st.integers(1, 4), st.integers(1, 4))
ARRAYS = st.one_of(
    hnp.arrays(st.sampled_from(["?", "u1", "i1", "<u2", ">i2", "<i4", ">u4", "<i8"]).map(np.dtype), SHAPES),
    hnp.arrays(np.dtype("<f2"), SHAPES, elements=st.floats(width=16)),
    hnp.arrays(np.dtype(">f4"), SHAPES, elements=st.floats(width=32)),
    hnp.arrays(np.dtype("<f8"), SHAPES),
    # Large enough to be cut out of the text by loads, and to be spliced in as raw bytes by dumps.
    st.integers(2048, 3000).map(lambda n: np.arange(n, dtype=np.uint16)),
    st.integers(66000, 67000).map(lambda n: np.arange(n, dtype=np.uint16)),
)
LOGPROBS = hnp.arrays(
    st.sampled_from(["<f4", ">f8", "<f8"]).map(np.dtype),
    st.integers(0, 40).map(lambda n: (n,)) | st.just((35000,)),
    elements=st.floats(-1e4, 0, width=32),
)
ROUTES = st.one_of(
    hnp.arrays(st.sampled_from(["u1", "<i2", ">i4", "<u8"]).map(np.dtype), ROUTE_SHAPES, elements=st.integers(0, 255)),
    hnp.arrays(np.dtype("<i4"), ROUTE_SHAPES, elements=st.integers(0, 40000)),
    st.integers(100, 200).map(lambda rows: np.arange(rows * 24, dtype=np.int32).reshape(rows, 4, 6) % 97),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    TRICKY_TEXT,
    LONG_TEXT,
)


def _documents(leaves: st.SearchStrategy[Any], routes: bool) -> st.SearchStrategy[Any]:
    def extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        dicts = st.dictionaries(KEYS, children, max_size=4)
        if routes:
            dicts = st.builds(lambda d, r: d if r is None else {**d, "routed_experts": r}, dicts, st.none() | ROUTES)
            dicts = st.builds(lambda d, lp: d if lp is None else {**d, "logprobs": lp}, dicts, st.none() | LOGPROBS)
        return st.lists(children, max_size=4) | st.tuples(children, children) | dicts

    return st.recursive(leaves, extend, max_leaves=12)


DOCUMENTS = _documents(st.one_of(LEAVES, ARRAYS), routes=True)
PLAIN_DOCUMENTS = _documents(LEAVES, routes=False)


def _route_dtype(routes: np.ndarray[Any, Any]) -> np.dtype[Any]:
    high = int(routes.max()) if routes.size else 0
    return np.dtype(np.uint8 if high < 256 else np.int16 if high < 32768 else np.int32)


def _assert_same(back: Any, sent: Any, *, routes: bool = False) -> None:
    if isinstance(sent, np.ndarray):
        assert isinstance(back, np.ndarray)
        expected = _route_dtype(sent) if routes else sent.dtype.newbyteorder("=")
        assert back.dtype == expected
        assert back.shape == sent.shape
        assert back.tobytes() == sent.astype(expected).tobytes()
    elif isinstance(sent, dict):
        assert isinstance(back, dict)
        assert list(back) == list(sent)
        for key, value in sent.items():
            _assert_same(back[key], value, routes=key == "routed_experts" and isinstance(value, np.ndarray))
    elif isinstance(sent, (list, tuple)):
        assert isinstance(back, list)
        assert len(back) == len(sent)
        for b, s in zip(back, sent, strict=True):
            _assert_same(b, s)
    else:
        assert type(back) is type(sent)
        assert back == sent


SCHEMA_NAMES = ["r3wire.routes", "r3wire.array", "r3wire.logprobs"]
# Documents that may hold an object of the caller's spelling an r3wire schema: dumps must refuse those.
SPELLED = st.recursive(
    st.one_of(LEAVES, ARRAYS),
    lambda children: (
        st.lists(children, max_size=3)
        | st.builds(
            lambda d, s: {**d, "schema": s},
            st.dictionaries(KEYS, children, max_size=3),
            st.sampled_from([*SCHEMA_NAMES, "r3wire.x", "routes"]),
        )
    ),
    max_leaves=8,
)


def _spells_schema(doc: Any) -> bool:
    if isinstance(doc, dict):
        schema = doc.get("schema")
        return (isinstance(schema, str) and schema in SCHEMA_NAMES) or any(_spells_schema(v) for v in doc.values())
    if isinstance(doc, (list, tuple)):
        return any(_spells_schema(v) for v in doc)
    return False


@given(st.one_of(DOCUMENTS, SPELLED))
def test_round_trip(doc: Any) -> None:
    if _spells_schema(doc):
        with pytest.raises(EncodeError) as info:
            r3wire.dumps(doc)
        assert info.value.field is not None
        assert info.value.field.endswith(".schema")
        return
    text = r3wire.dumps(doc)
    json.loads(text)  # plain JSON, for any parser
    _assert_same(r3wire.loads(text), doc)
    assert b"".join(r3wire.iter_dumps(doc)) == text
    parsed = orjson.loads(text)
    if not isinstance(parsed, str):  # a str is JSON text to loads
        _assert_same(r3wire.loads(parsed), doc)


@given(LOGPROBS, st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([np.nan, np.inf, -np.inf])), max_size=3))
def test_non_finite_logprobs_are_refused_or_clamped(values: np.ndarray[Any, Any], bad: list[tuple[int, float]]) -> None:
    values = values.copy()
    for where, value in bad:
        if values.size:
            values[where % values.size] = value
    finite = np.isfinite(values)
    doc = {"choices": [{"logprobs": values}]}
    if finite.all():
        assert (
            r3wire.loads(r3wire.dumps(doc))["choices"][0]["logprobs"].tobytes()
            == values.astype(values.dtype.newbyteorder("=")).tobytes()
        )
        return
    first = int(np.argmin(finite))
    with pytest.raises(EncodeError) as info:
        r3wire.dumps(doc)
    assert info.value.field == f"$.choices[0].logprobs[{first}]"
    back = r3wire.loads(r3wire.dumps(doc, clamp_logprobs=True))["choices"][0]["logprobs"]
    assert np.array_equal(back[finite], values[finite])
    assert (back[~finite] == -9999.0).all()


ENVELOPE_KEYS = ["data", "shape", "dtype", "schema", "version", "num_experts", "bits"]


@given(
    st.one_of(ROUTES.filter(lambda r: r.shape[1] and r.shape[2]), st.just(np.ones((2000, 2, 2), np.int32))),
    st.sampled_from(ENVELOPE_KEYS),
    JSON_LEAVES,
    st.sampled_from(["", " ", "\n "]),
    st.booleans(),
)
def test_duplicate_members_in_envelopes_are_refused(
    routes: np.ndarray[Any, Any], key: str, value: Any, space: str, first: bool
) -> None:
    envelope = r3wire.encode_routes(routes, num_experts=60000, pack_bits=key == "bits")
    body = orjson.dumps({"r": envelope, "x": [1]})
    member = f'{space}"{key}"{space}:{space}{json.dumps(value)}'.encode()
    if first:  # the envelope is the first object inside the document
        opened = body.index(b"{", 1) + 1
        text = body[:opened] + member + b"," + body[opened:]
    else:
        closed = body.index(b"}")
        text = body[:closed] + b"," + member + body[closed:]
    with pytest.raises(DecodeError):
        r3wire.loads(text)


BAD = st.sampled_from([b"\x01", b"\x1f", b"\xff", b"\xed\xa0\x80", b"\xc3(", b"\x00"])


@given(st.integers(0, 6000), BAD, PLAIN_DOCUMENTS, st.booleans())
def test_bad_bytes_in_discarded_duplicates_are_refused(at: int, bad: bytes, doc: Any, later: bool) -> None:
    long = b"QUJD" * 1500
    blob = b'"' + long[:at] + bad + long[at:] + b'"'
    first, second = (blob, orjson.dumps(doc)) if later else (orjson.dumps(doc), blob)
    text = b'[{"data":' + first + b',"data":' + second + b"}]"
    _agrees_with_orjson(text)


@given(PLAIN_DOCUMENTS, st.sampled_from([None, 2]))
def test_loads_agrees_with_orjson_without_envelopes(doc: Any, indent: int | None) -> None:
    # The stdlib writes \uXXXX escapes and other spacing; orjson writes raw UTF-8 and no spaces.
    for text in (json.dumps(doc, indent=indent).encode(), orjson.dumps(doc)):
        assert r3wire.loads(text) == orjson.loads(text)
    assert r3wire.dumps(doc) == orjson.dumps(doc)


def _agrees_with_orjson(text: bytes) -> None:
    try:
        expected = orjson.loads(text)
    except orjson.JSONDecodeError:
        with pytest.raises(DecodeError):
            r3wire.loads(text)
        return
    if b"r3wire" in text:  # a mutation could in principle spell a schema: then only the error class is promised
        with contextlib.suppress(DecodeError):
            r3wire.loads(text)
        return
    assert r3wire.loads(text) == expected


@given(PLAIN_DOCUMENTS, st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=3)), max_size=4))
def test_mutated_documents_agree_with_orjson(doc: Any, edits: list[tuple[int, bytes]]) -> None:
    text = bytearray(orjson.dumps({"data": doc, "k": [doc]}))
    for where, noise in edits:
        at = where % len(text)
        text[at : at + len(noise)] = noise
    _agrees_with_orjson(bytes(text))


@given(st.lists(st.sampled_from([b'"data":"', b'"', b"\\", b"QUJD" * 1100, b"{", b"}", b",", b"[", b"]", b":"])))
def test_token_soup_agrees_with_orjson(tokens: list[bytes]) -> None:
    _agrees_with_orjson(b"".join(tokens))


@given(DOCUMENTS, st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=3)), max_size=3))
def test_mutated_responses_raise_only_decode_error(doc: Any, edits: list[tuple[int, bytes]]) -> None:
    text = bytearray(r3wire.dumps({"choices": [{"routed_experts": np.ones((300, 2, 8), np.int32)}], "x": doc}))
    for where, noise in edits:
        at = where % len(text)
        text[at : at + len(noise)] = noise
    with contextlib.suppress(DecodeError):
        r3wire.loads(bytes(text))


def _path_of(parts: list[str | int]) -> str:
    """The JSONPath an error names: past 32 parts, the first and last 16 around how many were left out."""
    steps = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts]
    if len(steps) > 32:
        steps = [*steps[:16], f"...({len(steps) - 32} more)", *steps[-16:]]
    return "$" + "".join(steps)


@given(
    st.lists(st.one_of(st.sampled_from(["a", "choices", "routed_experts"]), st.integers(0, 30)), max_size=40),
    st.integers(0, 20),
    st.booleans(),
)
def test_errors_are_located_at_any_depth_and_width(parts: list[str | int], siblings: int, big: bool) -> None:
    routes = np.ones((3000 if big else 1, 2, 2), np.uint8)
    bad: Any = r3wire.encode_routes(routes)
    bad["shape"] = [routes.shape[0], 2, 3]
    node = bad
    for part in reversed(parts):  # build from the envelope up, with empty siblings beside each step
        if isinstance(part, int):
            node = [[] for _ in range(part)] + [node] + [{} for _ in range(siblings)]
        else:
            node = {**{f"s{i}": [] for i in range(siblings)}, part: node}
    with pytest.raises(DecodeError) as info:
        r3wire.loads(orjson.dumps(node))
    assert info.value.field == _path_of(parts) + ".data"
    with pytest.raises(DecodeError) as parsed:
        r3wire.loads(node)
    assert parsed.value.field == info.value.field


@given(
    st.sampled_from(["i1", "<i2", ">i2", "<i4", ">i8", "u1", "<u2", ">u4"]).map(np.dtype),
    st.sampled_from([(1, 2, 3), (40000, 2, 2)]),
    st.lists(st.tuples(st.integers(0, 10**9), st.integers(-(2**40), 2**40)), max_size=3),
    st.sampled_from([None, 1, 100, 128, 256, 384, 32768, 40000, 2**31]),
)
def test_every_id_is_checked_whatever_its_dtype(
    dtype: np.dtype[Any], shape: tuple[int, ...], edits: list[tuple[int, int]], num_experts: int | None
) -> None:
    info = np.iinfo(dtype)
    routes = np.zeros(shape, dtype)
    flat = routes.reshape(-1)
    for where, value in edits:
        flat[where % flat.size] = min(max(value, info.min), info.max)
    values = flat.astype(np.int64)
    limit = 2**31 if num_experts is None else num_experts
    bad = np.flatnonzero((values < 0) | (values >= limit))
    doc = {"choices": [{"routed_experts": routes}]}
    if bad.size:
        index = [int(i) for i in np.unravel_index(int(bad[0]), shape)]
        field = f"$.choices[0].routed_experts{index}"
        with pytest.raises(EncodeError) as info_dumps:
            r3wire.dumps(doc, num_experts=num_experts)
        assert info_dumps.value.field == field
        with pytest.raises(EncodeError) as info_stream:
            b"".join(r3wire.iter_dumps(doc, num_experts=num_experts))
        assert info_stream.value.field == field
        with pytest.raises(EncodeError):
            r3wire.encode_routes(routes, num_experts=num_experts)
        return
    text = r3wire.dumps(doc, num_experts=num_experts)
    assert b"".join(r3wire.iter_dumps(doc, num_experts=num_experts)) == text
    back = r3wire.loads(text)["choices"][0]["routed_experts"]
    assert np.array_equal(back, routes)
    assert np.array_equal(r3wire.decode_routes(r3wire.encode_routes(routes, num_experts=num_experts)), routes)


# Large enough to be streamed (at least 128 KiB on the wire even as uint8), so iter_dumps reads them lazily.
_STREAMED_ROWS = 40000


def _streamed(chunks: Iterator[bytes]) -> bytes | EncodeError:
    """The joined chunks, or the EncodeError the iterator raised."""
    try:
        return b"".join(chunks)
    except EncodeError as exc:
        return exc


@given(
    st.sampled_from(["i1", "u1", "<i2", ">i2", "<u2", "<i4", ">i4", "<u4", "<i8"]).map(np.dtype),
    st.sampled_from(["plain", "fortran", "reversed"]),
    st.sampled_from([3, 200, 300, 30000, 40000]),
    st.lists(st.tuples(st.integers(0, 10**9), st.integers(-(2**40), 2**40)), min_size=1, max_size=3),
    st.sampled_from([None, 40000]),
)
def test_routes_changed_before_streaming_are_sent_exactly_or_refused(
    dtype: np.dtype[Any], layout: str, high: int, edits: list[tuple[int, int]], num_experts: int | None
) -> None:
    # An engine may reuse its buffer before the body is streamed: every id sent is the one in the array when its
    # chunk is produced (or the one at the call, for an array copied then), or the iterator raises naming it.
    info = np.iinfo(dtype)
    high = min(high, int(info.max))
    base = np.arange(_STREAMED_ROWS * 4, dtype=np.int64).reshape(_STREAMED_ROWS, 2, 2) % (high + 1)
    routes = base.astype(dtype)
    if layout == "fortran":
        routes = np.asfortranarray(routes)
    elif layout == "reversed":
        routes = routes[::-1, :, ::-1]
    before = routes.copy()
    doc = {"choices": [{"routed_experts": routes}]}
    if num_experts is not None and high >= num_experts:
        return
    chunks = r3wire.iter_dumps(doc, num_experts=num_experts)
    for where, value in edits:
        routes[np.unravel_index(where % routes.size, routes.shape)] = min(max(value, info.min), info.max)
    body = _streamed(chunks)
    if isinstance(body, EncodeError):
        field = body.field or ""
        if field == "$.choices[0].routed_experts":  # the ids no longer need the dtype chosen at the call
            assert num_experts is None
            assert high >= 256
            return
        assert field.startswith("$.choices[0].routed_experts[")  # an element that breaks a rule now
        index = tuple(int(i) for i in field.rsplit("[", 1)[1].rstrip("]").split(","))
        bad = int(routes[index])
        chosen = 1 << 31 if num_experts is not None else 256 if high < 256 else 1 << 15 if high < 1 << 15 else 1 << 31
        assert bad < 0 or bad >= min(chosen, num_experts or chosen)
        return
    back = r3wire.loads(body, num_experts=num_experts)["choices"][0]["routed_experts"]
    assert np.array_equal(back, routes) or np.array_equal(back, before)


@given(
    st.sampled_from(["<f4", ">f4", "<f8"]).map(np.dtype),
    st.lists(
        st.tuples(st.integers(0, 10**9), st.sampled_from([np.nan, np.inf, -np.inf, -0.5, 0.0])), min_size=1, max_size=3
    ),
)
def test_logprobs_changed_before_streaming_are_sent_exactly_or_refused(
    dtype: np.dtype[Any], edits: list[tuple[int, float]]
) -> None:
    logprobs = -np.linspace(0, 10, 50000).astype(dtype)
    before = logprobs.copy()
    chunks = r3wire.iter_dumps({"logprobs": logprobs})
    for where, value in edits:
        logprobs[where % logprobs.size] = value
    bad = np.flatnonzero(~np.isfinite(logprobs))
    body = _streamed(chunks)
    if isinstance(body, EncodeError):
        assert bad.size
        assert body.field == f"$.logprobs[{int(bad[0])}]"
        return
    back = r3wire.loads(body)["logprobs"]
    assert np.array_equal(back, logprobs) or np.array_equal(back, before)
    assert np.isfinite(back).all()


def _written(doc: Any, option: int | None) -> bytes | EncodeError:
    try:
        return r3wire.dumps(doc, option=option)
    except EncodeError as exc:
        return exc


@given(NUMPY_SCALARS, st.sampled_from([None, orjson.OPT_SERIALIZE_NUMPY]))
def test_numpy_scalars_are_written_exactly_or_refused_at_their_path(scalar: Any, option: int | None) -> None:
    assert isinstance(scalar, np.generic)
    doc = {"k": [scalar]}
    body = _written(doc, option)
    if isinstance(body, EncodeError):
        assert not isinstance(scalar, np.bool_)
        if isinstance(scalar, np.str_):
            # Only text JSON cannot carry (a lone surrogate is not UTF-8), which orjson refuses, at the root for now.
            with pytest.raises(UnicodeEncodeError):
                str(scalar).encode("utf-8")
            assert body.field == "$"
            return
        assert body.field == "$.k[0]"
        return
    assert b"".join(r3wire.iter_dumps(doc, option=option)) == body
    (value,) = orjson.loads(body)["k"]
    # No JSON value carries a timedelta's unit, and orjson writes NaT and out-of-range datetimes as other dates.
    assert not isinstance(scalar, (np.timedelta64, np.datetime64))
    if isinstance(scalar, np.bool_):
        assert value is bool(scalar)
    elif isinstance(scalar, np.integer):
        assert type(value) is int
        assert value == int(scalar)
    elif isinstance(scalar, np.floating):
        assert value == float(scalar)
    else:
        assert isinstance(scalar, np.str_)
        assert value == str(scalar)
