"""Property tests for hostile headers, in every decoder of the core (routes, array, logprobs, frame):

- zero-element and overflowing shapes are accepted only when every dimension is bounded, and never leak NumPy's
  "array is too big";
- memory: a decoder's peak allocation (tracemalloc) is bounded by a small multiple of its input plus the output
  it is allowed to return, whatever the header claims;
- error messages built from hostile values (giant ints, deep nests, huge strings, foreign objects) never raise
  and stay short.
"""

from __future__ import annotations

import json
import math
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_VALUES, decoded_or_none
from hypothesis import given, settings
from hypothesis import strategies as st

from r3wire import (
    DEFAULT_MAX_ELEMENTS,
    DecodeError,
    EncodeError,
    R3WireError,
    RouteTrace,
    decode_array,
    decode_logprobs,
    decode_routes,
    decode_routes_frame,
    encode_array,
    encode_logprobs,
    encode_routes,
    encode_routes_frame,
    formats,
    pad_routes,
    pad_sequences,
)
from r3wire._validate import load_object
from r3wire.errors import describe

pytestmark = pytest.mark.property

MAX_EXTENT = (2**63 - 1) // 8

# Dimensions a hostile header uses: zeros (to hide the others), small sizes, powers of two around every limit,
# and integers no fixed-width reader can hold.
DIMS = st.one_of(
    st.sampled_from([0, 0, 1, 2, 3, 8]),
    st.integers(0, 64),
    st.sampled_from([2**20, 2**30, 2**30 + 1, 2**31, 2**32, 2**40, 2**60 - 1, 2**60, 2**62, 2**63 - 1, 2**63, 2**64]),
    st.integers(0, 2**70),
)
LIMITS = st.one_of(st.none(), st.sampled_from([0, 1, 64, 2**20, 2**40, 2**63]))


def _extent(shape: list[int]) -> int:
    return math.prod(d for d in shape if d)


def _check_shape_outcome(shape: list[int], limit: int | None, decode: Callable[[], np.ndarray[Any, Any]]) -> None:
    result = decoded_or_none(decode)
    if result is not None:
        assert list(result.shape) == shape
        assert all(0 <= d <= 2**63 - 1 for d in shape)
        assert _extent(shape) <= min(MAX_EXTENT, DEFAULT_MAX_ELEMENTS if limit is None else limit)


def _b64_of_zeros(count: int, itemsize: int) -> str:
    # The exact data a shape needs when it holds few elements; a wrong length when it holds many (never built).
    nbytes = count * itemsize if count <= 64 else 3
    return "A" * (4 * ((nbytes + 2) // 3) - (-nbytes % 3)) + "=" * (-nbytes % 3)


@given(st.lists(DIMS, min_size=3, max_size=3), LIMITS, st.sampled_from(["uint8", "int16", "int32"]), st.booleans())
def test_routes_shapes(shape: list[int], limit: int | None, dtype: str, text: bool) -> None:
    size = {"uint8": 1, "int16": 2, "int32": 4}[dtype]
    data = _b64_of_zeros(math.prod(shape), size)
    envelope = {"data": data, "shape": shape, "dtype": dtype, "schema": "r3wire.routes", "version": 1}
    payload: Any = orjson.dumps(envelope) if text and max(shape) < 2**64 else envelope
    result = decoded_or_none(lambda: decode_routes(payload, max_elements=limit))
    if result is not None:
        assert shape[1] >= 1
        assert shape[2] >= 1
        assert _extent(shape) <= (DEFAULT_MAX_ELEMENTS if limit is None else limit)
    _check_shape_outcome(shape, limit, lambda: decode_routes(envelope, max_elements=limit))


@given(st.lists(DIMS, min_size=0, max_size=5), LIMITS, st.sampled_from(["bool", "uint8", "int64", "float64"]))
def test_array_shapes(shape: list[int], limit: int | None, dtype: str) -> None:
    size = 8 if dtype in ("int64", "float64") else 1
    data = _b64_of_zeros(math.prod(shape), size)
    envelope = {"data": data, "shape": shape, "dtype": dtype, "schema": "r3wire.array", "version": 1}
    _check_shape_outcome(shape, limit, lambda: decode_array(envelope, max_elements=limit))


@given(st.lists(DIMS, min_size=0, max_size=4), LIMITS, st.sampled_from(["float32", "float64"]))
def test_logprobs_shapes(shape: list[int], limit: int | None, dtype: str) -> None:
    size = 4 if dtype == "float32" else 8
    data = _b64_of_zeros(math.prod(shape), size)
    envelope = {"data": data, "shape": shape, "dtype": dtype, "schema": "r3wire.logprobs", "version": 1}
    _check_shape_outcome(shape, limit, lambda: decode_logprobs(envelope, max_elements=limit))


@given(
    st.integers(0, 2**64 - 1) | DIMS.filter(lambda d: d < 2**64),
    st.integers(0, 2**64 - 1) | DIMS.filter(lambda d: d < 2**64),
    st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 8, 2**31, 2**32 - 1]),
    st.sampled_from([(1, 0), (2, 0), (3, 0), (1, 1), (2, 9), (3, 17)]),
    LIMITS,
)
def test_frame_shapes(rows: int, layers: int, top_k: int, packing: tuple[int, int], limit: int | None) -> None:
    code, bits = packing
    header = struct.pack("<4sBBBBQQII", b"R3WF", 1, code, bits, 0, rows, layers, top_k, 0)
    count = rows * layers * top_k
    size = {1: 1, 2: 2, 3: 4}[code]
    body = bytes(min(count * size if not bits else (count * bits + 7) // 8, 64))
    shape = [rows, layers, top_k]
    result = decoded_or_none(lambda: decode_routes_frame(header + body, max_elements=limit))
    if result is not None:
        assert list(result.shape) == shape
        assert layers >= 1
        assert top_k >= 1
        assert _extent(shape) <= (DEFAULT_MAX_ELEMENTS if limit is None else limit)


# --- memory: what a decoder allocates is bounded by its input and the output it may return -----------------


def _peak(decode: Callable[[], object]) -> tuple[int, object]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = decoded_or_none(decode)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


# orjson (yyjson) sizes its document pool from the text's length: orjson.loads alone peaks at about 13x the
# input (measured: 377 KB for a 28.7 KB envelope, 13.9 MB for 1.07 MB). That is the parser's, and linear.
JSON_PARSE_FACTOR = 16


def _assert_bounded(peak: int, input_size: int, result: object, *, parse_factor: int = JSON_PARSE_FACTOR) -> None:
    output = result.nbytes if isinstance(result, np.ndarray) else 0
    # Linear in what the caller gave and what it gets back, never in what the header claims: 3x the output is
    # the decoded bytes, the array, and one unpacking temporary; 256 KiB is interpreter and NumPy overhead.
    assert peak <= parse_factor * input_size + 3 * output + 256 * 1024, (peak, input_size, output)


ROUTES = st.tuples(st.integers(0, 300), st.integers(1, 8), st.integers(1, 8)).map(
    lambda s: np.arange(math.prod(s), dtype=np.int64).reshape(s) % 384
)
CLAIMS = st.lists(DIMS, min_size=3, max_size=3)


@settings(max_examples=60)
@given(ROUTES, st.booleans(), st.one_of(st.none(), CLAIMS), st.integers(0, 2))
def test_routes_memory(routes: np.ndarray[Any, Any], pack: bool, claim: list[int] | None, cut: int) -> None:
    envelope = encode_routes(routes, num_experts=384, pack_bits=pack)
    if claim is not None:
        envelope["shape"] = claim
    envelope["data"] = envelope["data"][: len(envelope["data"]) - 4 * cut] if claim is not None else envelope["data"]
    text = json.dumps(envelope).encode()  # stdlib: it also writes integers beyond 64 bits
    peak, result = _peak(lambda: decode_routes(text))
    _assert_bounded(peak, len(text), result)


@settings(max_examples=60)
@given(ROUTES, st.booleans(), st.one_of(st.none(), CLAIMS))
def test_frame_memory(routes: np.ndarray[Any, Any], pack: bool, claim: list[int] | None) -> None:
    frame = bytearray(encode_routes_frame(routes, num_experts=384, pack_bits=pack))
    if claim is not None:
        rows, layers, top_k = (min(d, 2**64 - 1) for d in claim)
        struct.pack_into("<QQI", frame, 8, rows, layers, min(top_k, 2**32 - 1))
    data = bytes(frame)
    peak, result = _peak(lambda: decode_routes_frame(data, copy=True))
    _assert_bounded(peak, len(frame), result, parse_factor=1)  # no parser: the frame is read in place


@settings(max_examples=60)
@given(st.integers(0, 5000), st.sampled_from(["float32", "float64"]), st.one_of(st.none(), st.lists(DIMS, max_size=3)))
def test_logprobs_and_array_memory(n: int, dtype: str, claim: list[int] | None) -> None:
    values = -np.arange(n, dtype=dtype) / 7
    for envelope in (encode_logprobs(values), encode_array(values)):
        if claim is not None:
            envelope["shape"] = claim
        text = json.dumps(envelope).encode()  # stdlib: it also writes integers beyond 64 bits
        for decode in (decode_logprobs, decode_array):
            peak, result = _peak(lambda: decode(text))  # noqa: B023  # called before the loop moves on
            _assert_bounded(peak, len(text), result)


# --- error messages from hostile values -------------------------------------------------------------------


class _Hostile:
    def __repr__(self) -> str:
        raise RuntimeError("a __repr__ that fails")


def _deep(depth: int) -> list[Any]:
    nest: list[Any] = []
    for _ in range(depth):
        nest = [nest]
    return nest


_FOREIGN_MAKERS: list[Callable[[], object]] = [
    lambda: memoryview(b"abcdefgh")[::2],
    lambda: memoryview(bytearray(8)).cast("B", (2, 4)),
    lambda: np.arange(12).reshape(3, 4),
    lambda: np.array(["r3wire.routes", "r3wire.routes"]),
    lambda: np.float64("nan"),
    _Hostile,
    lambda: {"data": "x" * 10**5},
    lambda: [10**5000] * 3,
    lambda: (1, 2, 10**5000),
    lambda: frozenset({1, 2}),
]


HOSTILE_VALUES = st.one_of(
    JSON_VALUES,
    st.integers(1, 4).map(lambda k: 7 ** (6000 * k)),  # beyond 4,300 digits: repr raises ValueError
    st.integers(1, 4).map(lambda k: -(10 ** (5000 * k))),
    st.sampled_from([10**4300, 2**64, 2**63, -(2**63) - 1]),
    st.integers(100, 3000).map(_deep),
    st.integers(10**5, 10**6).map(lambda n: "x" * n),
    st.integers(10**5, 10**6).map(lambda n: b"\xff" * n),
    st.sampled_from(_FOREIGN_MAKERS).map(lambda make: make()),
)
FIELDS = ["data", "shape", "dtype", "schema", "version", "num_experts", "bits"]


@st.composite
def hostile_envelopes(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(["routes", "array", "logprobs"]))
    if kind == "routes":
        envelope = encode_routes(np.array([[[1, 0], [7, 3]]]), num_experts=8)
    elif kind == "array":
        envelope = encode_array(np.array([1.5, 2.5], dtype=np.float32))
    else:
        envelope = encode_logprobs(np.array([-1.5, -2.5], dtype=np.float32))
    field = draw(st.sampled_from(FIELDS))
    value = draw(HOSTILE_VALUES)
    if field == "shape" and draw(st.booleans()):
        shape = list(envelope["shape"])
        shape[draw(st.integers(0, len(shape) - 1))] = value
        value = shape
    envelope[field] = value
    return kind, envelope


@settings(max_examples=100)
@given(hostile_envelopes())
def test_errors_from_hostile_values_never_fail_and_stay_short(case: tuple[str, dict[str, Any]]) -> None:
    kind, envelope = case
    decoders: dict[str, Callable[[Any], np.ndarray[Any, Any]]] = {
        "routes": decode_routes,
        "array": decode_array,
        "logprobs": decode_logprobs,
    }
    decode = decoders[kind]
    error: DecodeError | None = None
    try:
        result = decode(envelope)
    except DecodeError as exc:
        error = exc
    if error is None:  # a hostile value that happens to be valid there (version 1, a dtype the schema allows)
        assert isinstance(result, np.ndarray)
        return
    assert len(str(error)) <= 1000
    assert error.got is None or len(error.got) <= 400


@settings(max_examples=100)
@given(HOSTILE_VALUES, st.text(max_size=20), st.booleans())
def test_describe_never_raises_and_is_bounded(value: object, field: str, raw: bool) -> None:
    shown = describe(value)
    assert isinstance(shown, str)
    assert len(shown) <= 300
    error = R3WireError.make(field, "something", value if not raw else shown, raw=raw)
    assert len(str(error)) <= 400 + len(field)


# --- duplicate member names, against the standard library as an oracle --------------------------------------

KEYS = st.text(alphabet=st.sampled_from('ab:"\\{}[] \u00e9\u2028'), max_size=3)
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.text(alphabet=':"\\{}[],a\u00e9', max_size=6)
)
TREES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4).map(lambda items: ("list", items))
        | st.lists(st.tuples(KEYS, children), max_size=4).map(lambda pairs: ("object", pairs))
    ),
    max_leaves=25,
)


def _write(tree: Any, ascii_only: bool) -> str:
    """JSON text of ``tree``, whose objects are lists of pairs and so may name a member twice."""
    if isinstance(tree, tuple) and tree[0] == "list":
        return "[" + ", ".join(_write(item, ascii_only) for item in tree[1]) + "]"
    if isinstance(tree, tuple):
        return (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=ascii_only)}:{_write(v, ascii_only)}" for k, v in tree[1])
            + "}"
        )
    return json.dumps(tree, ensure_ascii=ascii_only)


def _has_duplicate(text: str) -> bool:
    found = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        found = found or len({k for k, _ in items}) != len(items)
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return found


@given(st.lists(st.tuples(KEYS, TREES), max_size=5), st.booleans(), st.booleans())
def test_duplicates_are_found_exactly(pairs: list[tuple[str, Any]], ascii_only: bool, as_bytes: bool) -> None:
    text = _write(("object", pairs), ascii_only)
    payload: str | bytes = text.encode() if as_bytes else text
    if _has_duplicate(text):
        with pytest.raises(DecodeError, match="twice"):
            load_object(payload)
    else:
        load_object(payload)


class _AlwaysEqual(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class _HashOf(str):
    def __hash__(self) -> int:
        return hash("uint8")

    def __eq__(self, other: object) -> bool:
        return True


class _NeverUnequal(str):
    def __ne__(self, other: object) -> bool:
        return False


class _OtherStr(str):
    def __str__(self) -> str:
        return "zzz"


HOSTILE_STRS: list[type[str]] = [_AlwaysEqual, _HashOf, _NeverUnequal, _OtherStr, np.str_]
ENVELOPES: list[tuple[str, Callable[..., Any]]] = [
    ("r3wire.routes", decode_routes),
    ("r3wire.array", decode_array),
    ("r3wire.logprobs", decode_logprobs),
]


def _outcome(decode: Callable[[], Any]) -> Any:
    """The decoded values, or the DecodeError's field and message; any other exception fails the property."""
    try:
        return decode().tolist()
    except DecodeError as exc:
        return (exc.field, str(exc))


@given(
    st.sampled_from(ENVELOPES),
    st.sampled_from(["uint8", "int16", "float32", "zzz", "r3wire.array", "r3wire.routes", ""]),
    st.sampled_from(["dtype", "schema"]),
    st.sampled_from(HOSTILE_STRS),
)
def test_a_str_subclass_in_a_header_reads_as_its_characters(
    envelope: tuple[str, Callable[..., Any]], value: str, member: str, cls: type[str]
) -> None:
    """A schema or dtype given as a str subclass decodes exactly as the plain string of its characters would:
    its own ``__eq__``, ``__hash__``, ``__ne__`` or ``__str__`` changes nothing (they leaked KeyError, or made
    "zzz" a valid dtype)."""
    schema, decode = envelope
    plain = {"schema": schema, "version": 1, "dtype": "float32", "shape": [2], "data": "AACAPwAAAEA="}
    if schema == "r3wire.routes":
        plain.update(dtype="uint8", shape=[1, 1, 2], data="AQI=")
    plain[member] = value
    hostile = {**plain, member: cls(value)}
    assert _outcome(lambda: decode(hostile)) == _outcome(lambda: decode(plain))


EMPTY_DIMS = st.one_of(st.sampled_from([1, 2, 2**20, 2**30, 2**40, 2**59, 2**60, 2**61]), st.integers(1, 2**62))


@given(
    st.lists(EMPTY_DIMS, min_size=0, max_size=40),
    st.integers(0, 40),
    st.sampled_from(["routes", "frame", "array", "logprobs"]),
)
def test_what_a_writer_sends_its_reader_reads(dims: list[int], zero_at: int, writer: str) -> None:
    """An empty array may claim any dimensions (it owns no memory), and NumPy 2 makes up to 64 of them. A writer
    refuses what its reader refuses at the widest limit (it wrote ``[0, 2**40, 2**20]`` and 33 dimensions that no
    reader would take); whatever it writes reads back."""
    shape = list(dims)
    shape.insert(min(zero_at, len(shape)), 0)
    if writer in ("routes", "frame"):
        shape = [0, *[*dims, 1, 1][:2]]  # [rows, layers >= 1, top_k >= 1]
    dtype = {"routes": np.int32, "frame": np.int32, "array": np.int8, "logprobs": np.float32}[writer]
    try:
        empty = np.empty(shape, dtype)
    except ValueError:  # NumPy's own limits (more than 64 dimensions, or a byte size past 2**63)
        return
    encoders: dict[str, Callable[[], Any]] = {
        "routes": lambda: encode_routes(empty),
        "frame": lambda: encode_routes_frame(empty),
        "array": lambda: encode_array(empty),
        "logprobs": lambda: encode_logprobs(empty),
    }
    decoders: dict[str, Callable[[Any], np.ndarray[Any, Any]]] = {
        "routes": lambda payload: decode_routes(payload, max_elements=2**63),
        "frame": lambda payload: decode_routes_frame(payload, max_elements=2**63),
        "array": lambda payload: decode_array(payload, max_elements=2**63),
        "logprobs": lambda payload: decode_logprobs(payload, max_elements=2**63),
    }
    refused: EncodeError | None = None
    try:
        payload = encoders[writer]()
    except EncodeError as exc:
        refused = exc
    if refused is not None:
        # The frame's header holds layers and top_k in 32 bits (docs/bitpack-and-frame.md).
        frame_limit = writer == "frame" and max(shape[1:]) > 2**32 - 1
        assert len(shape) > 32 or _extent(shape) > MAX_EXTENT or frame_limit, str(refused)
    else:
        assert list(decoders[writer](payload).shape) == shape


@given(st.sampled_from(HOSTILE_STRS), st.sampled_from(["left", "right", "zzz", "arange", "balanced", "keep"]))
def test_an_option_given_as_a_str_subclass_acts_as_its_characters(cls: type[str], value: str) -> None:
    """``side``, ``fill``, ``on_conflict`` and a format name given as a str subclass act as the plain string:
    an always-equal subclass matched every choice."""
    routes = [np.array([[[0, 1]]], dtype=np.uint8), np.array([[[1, 2]], [[2, 3]]], dtype=np.uint8)]

    def outcome(call: Callable[[Any], Any], arg: Any) -> Any:
        try:
            result = call(arg)
        except R3WireError as exc:
            return (type(exc).__name__, exc.field)
        return [np.asarray(part).tolist() for part in result] if isinstance(result, tuple) else result

    calls: list[Callable[[str], Any]] = [
        lambda v: pad_routes(routes, side=v),  # type: ignore[arg-type]  # untyped callers pass anything
        lambda v: pad_routes(routes, fill=v, num_experts=8),  # type: ignore[arg-type]
        lambda v: pad_sequences([np.arange(2), np.arange(3)], side=v),  # type: ignore[arg-type]
        lambda v: formats.write(routes[1], format=v),
    ]
    for call in calls:
        assert outcome(call, cls(value)) == outcome(call, value)
    trace, plain = RouteTrace(), RouteTrace()
    for t in (trace, plain):
        t.add(routes[1], start=0)
    got = outcome(lambda v: trace.add(routes[1][::-1], start=0, on_conflict=v), cls(value))
    want = outcome(lambda v: plain.add(routes[1][::-1], start=0, on_conflict=v), value)
    assert got == want
    assert trace.rows == plain.rows
    assert trace.conflicts == plain.conflicts
