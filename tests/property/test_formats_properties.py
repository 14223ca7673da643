"""Property tests for r3wire.formats: every writer/reader pair round-trips any ids the format can hold, and every
reader keeps the fuzzing promise: any input is either read or raises DecodeError, never another exception."""

from __future__ import annotations

import array
import base64
import contextlib
import io
import json
import struct
import tempfile
import tracemalloc
from functools import partial
from typing import Any
from unittest import mock

import numpy as np
import orjson
import pytest
from _fuzzing import JSON_LEAVES, JSON_VALUES, decoded_or_none
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import r3wire
from r3wire.cli import main
from r3wire.errors import DecodeError, EncodeError
from r3wire.formats import FORMATS, ReadResult, _fireworks, read, read_response, write
from r3wire.formats._response import ROUTES_FIELDS

pytestmark = pytest.mark.property

try:
    import zstandard
except ImportError:  # the fireworks-r3v1 properties skip; the rest still run
    zstandard = None

NAMES = [name for name, fmt in FORMATS.items() if fmt.extra is None or zstandard is not None]
# The largest id each format can carry (NeMo-RL, SGLang, prime-rl-b85 and the envelopes reach int32).
HIGHEST = {"fireworks-r3v1": 65535, "fireworks-trace": 65535, "fireworks-matrices": 65535, "json-lists": 2**63 - 1}
SOURCE_DTYPES = ["u1", "<u2", ">u2", "<i2", "<i4", ">i4", "<i8", ">u8"]


def _highest(name: str) -> int:
    return HIGHEST.get(name, 2**31 - 1)


@st.composite
def routes_for(draw: st.DrawFn, name: str, *, any_routes: bool = False) -> np.ndarray[Any, Any]:
    """Ids ``name`` can carry in a shape every reader takes; with ``any_routes``, also shapes without layers or
    slots and one id up to the dtype's maximum (which the writer must refuse)."""
    dtype: np.dtype[Any] = np.dtype(draw(st.sampled_from(SOURCE_DTYPES)))
    top = int(np.iinfo(dtype.type).max)
    high = min(top, _highest(name))
    shapes = hnp.array_shapes(min_dims=3, max_dims=3, min_side=0, max_side=5)
    shape = draw(shapes if any_routes else shapes.filter(lambda s: s[1] and s[2]))
    ids = st.one_of(
        st.sampled_from([b for b in (0, 1, 127, 128, 255, 256, 32767, 65535, 2**31 - 1) if b <= high]),
        st.integers(0, high),
    )
    array: np.ndarray[Any, Any] = draw(hnp.arrays(dtype, shape, elements=ids))
    if any_routes and array.size and high < top and draw(st.booleans()):
        where = draw(st.tuples(*(st.integers(0, n - 1) for n in shape)))
        array[where] = draw(st.integers(high + 1, top))
    if draw(st.booleans()):
        array = np.asfortranarray(array)
    return array


def _shape_args(routes: np.ndarray[Any, Any]) -> dict[str, Any]:
    return {"num_layers": int(routes.shape[1]) or None, "top_k": int(routes.shape[2]) or None}


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_round_trip(name: str, data: st.DataObject) -> None:
    # Any routes: what a writer writes, its reader reads back exactly; what it cannot, it refuses (EncodeError)
    # rather than write a payload no reader takes (no layers or slots, ids beyond the format).
    routes = data.draw(routes_for(name, any_routes=True))
    carried = routes.shape[1] and routes.shape[2] and (not routes.size or int(routes.max()) <= _highest(name))
    if not carried:
        with pytest.raises(EncodeError):
            write(routes, name)
        return
    payload = write(routes, name)
    if isinstance(payload, dict):
        payload = orjson.loads(orjson.dumps(payload))  # what actually crosses the wire
    result = read(payload, name, **_shape_args(routes))
    assert np.array_equal(result.routes, routes)
    assert result.routes.shape == routes.shape
    assert result.routes.flags.c_contiguous
    assert result.routes.flags.writeable
    # An empty base85 {data, shape} is indistinguishable from an empty prime-rl one; auto reads it as prime-rl.
    detected = "prime-rl" if name == "prime-rl-b85" and routes.size == 0 else name
    if payload == []:
        return  # an empty list is json-lists or fireworks-matrices: only a named format reads it
    assert read(payload, **_shape_args(routes)).format == detected


def _buffers(raw: bytes) -> list[tuple[Any, bool]]:
    """``raw`` as each kind of buffer a caller may hand in, and whether it is plain bytes (to be read exactly as
    ``raw`` is) rather than a strided, multi-dimensional or wide view (read alike or refused for its layout)."""
    out: list[tuple[Any, bool]] = [
        (bytearray(raw), True),
        (memoryview(raw), True),
        (memoryview(bytearray(raw)).cast("b"), True),
        (memoryview(bytes(x for c in raw for x in (c, 0)))[::2], False),
    ]
    if raw and len(raw) % 4 == 0:
        out.append((memoryview(raw).cast("I"), False))
    if raw and len(raw) % 2 == 0:
        out.append((memoryview(raw).cast("B", (2, len(raw) // 2)), False))
    return out


def _as_buffers(payload: Any, name: str) -> list[tuple[Any, bool]]:
    """A written payload with its text (or its raw bytes, or its ``data`` string) in every kind of buffer."""
    if isinstance(payload, str):
        texts = [payload.encode()]
        if name in ("vllm-npy", "fireworks-r3v1"):
            texts.append(base64.b64decode(payload))  # the raw .npy / zstd bytes are read too
        return [pair for text in texts for pair in _buffers(text)]
    out = _buffers(orjson.dumps(payload))
    if isinstance(payload, dict) and isinstance(payload.get("data"), str):
        out += [({**payload, "data": buffer}, exact) for buffer, exact in _buffers(payload["data"].encode())]
    return out


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_every_buffer_layout_reads_alike_or_is_refused_for_it(name: str, data: st.DataObject) -> None:
    routes = data.draw(routes_for(name))
    for payload, exact in _as_buffers(write(routes, name), name):
        for reader in (name, "auto") if routes.size else (name,):
            if exact:
                assert np.array_equal(read(payload, reader, **_shape_args(routes)).routes, routes)
                continue
            # Read alike, or refused for its layout: never misread (a wide view measured in items) nor failed
            # outside r3wire's errors.
            error: DecodeError | None = None
            try:
                result = read(payload, reader, **_shape_args(routes))
            except DecodeError as exc:
                error = exc
            if error is None:
                assert np.array_equal(result.routes, routes)
            else:
                assert "memoryview" in str(error), error


@given(st.lists(st.booleans(), min_size=0, max_size=20), st.integers(1, 3), st.integers(1, 3))
def test_nemo_rl_mask_round_trip(mask: list[bool], layers: int, top_k: int) -> None:
    routes = np.arange(len(mask) * layers * top_k, dtype=np.int32).reshape(len(mask), layers, top_k) % 100
    keep = np.array(mask, dtype=bool)
    result = read(write(routes, "nemo-rl", mask=keep))
    assert np.array_equal(result.routes[keep], routes[keep])
    assert (result.routes[~keep] == -1).all()


@pytest.mark.skipif(zstandard is None, reason="fireworks-r3v1 needs zstandard (the zstd extra)")
@given(st.lists(st.booleans(), min_size=0, max_size=40), st.integers(1, 3), st.integers(1, 3))
def test_fireworks_bitmap_round_trip(mask: list[bool], layers: int, top_k: int) -> None:
    routes = (np.arange(len(mask) * layers * top_k, dtype=np.int32).reshape(len(mask), layers, top_k) % 300) + 1
    keep = np.array(mask, dtype=bool)
    result = read(write(routes, "fireworks-r3v1", mask=keep), num_layers=layers, top_k=top_k)
    assert result.mask is not None
    assert result.mask.tolist() == mask
    assert np.array_equal(result.routes[keep], routes[keep])
    assert not result.routes[~keep].any()


@pytest.mark.skipif(zstandard is None, reason="fireworks-r3v1 needs zstandard (the zstd extra)")
@given(
    mask=st.lists(st.booleans(), min_size=0, max_size=80),
    layers=st.integers(1, 3),
    top_k=st.integers(1, 3),
    block_bytes=st.integers(1, 40),
    chunk=st.integers(1, 5),
    num_experts=st.sampled_from([None, 200]),
    bad=st.integers(0, 79),
)
def test_fireworks_bitmap_blocks_scatter_like_one_pass(
    *, mask: list[bool], layers: int, top_k: int, block_bytes: int, chunk: int, num_experts: int | None, bad: int
) -> None:
    # Tiny blocks and selector chunks: the block-by-block scatter, the chunked mask and the id check spread over
    # blocks give what one pass over the whole compact matrix gives (same rows, same error).
    routes = (np.arange(len(mask) * layers * top_k, dtype=np.int32).reshape(len(mask), layers, top_k) * 7) % 199
    if bad < len(mask):
        routes[bad, -1, -1] = 250  # the one id at or above num_experts=200
    keep = np.array(mask, dtype=bool)
    payload = write(routes, "fireworks-r3v1", mask=keep, dtype="uint16")
    with (
        mock.patch.object(_fireworks, "_BLOCK_BYTES", block_bytes),
        mock.patch.object(_fireworks, "_SKIP_CHUNK", chunk),
    ):
        outcome = decoded_or_none(lambda: read(payload, num_layers=layers, top_k=top_k, num_experts=num_experts))
        if num_experts is not None and bad < len(mask) and mask[bad]:
            assert outcome is None
            with pytest.raises(DecodeError) as info:
                read(payload, num_layers=layers, top_k=top_k, num_experts=num_experts)
            assert info.value.field == f"matrix[{sum(mask[:bad])}, {layers - 1}, {top_k - 1}]"
            return
    assert outcome is not None
    assert outcome.mask is not None
    assert outcome.mask.tolist() == mask
    assert np.array_equal(outcome.routes, np.where(keep[:, None, None], routes, 0))


# --- the fuzzing promise --------------------------------------------------------------------------------------

ROUTES = np.array([[[1, 0], [7, 3]], [[2, 5], [0, 6]], [[4, 4], [1, 2]]], dtype=np.int32)
SHAPE: dict[str, Any] = {"num_layers": 2, "top_k": 2}


def _only_decode_error(payload: Any, name: str, **kwargs: Any) -> None:
    missing_extra: ImportError | None = None
    result: ReadResult | None = None
    try:
        result = decoded_or_none(lambda: read(payload, name, **SHAPE, **kwargs))
    except ImportError as exc:
        missing_extra = exc
    if missing_extra is not None:
        # Without the zstd extra, an input detected as Fireworks r3/v1 says which extra to install.
        assert zstandard is None
        assert "r3wire[zstd]" in str(missing_extra)
        return
    if result is not None:
        assert isinstance(result, ReadResult)
        assert result.routes.ndim == 3


ANYTHING = st.one_of(JSON_VALUES, st.binary(max_size=96), st.text(max_size=96))


@pytest.mark.parametrize("name", [*NAMES, "auto"])
@given(payload=ANYTHING)
def test_arbitrary_input_raises_only_decode_error(name: str, payload: Any) -> None:
    _only_decode_error(payload, name)


def _valid(name: str) -> Any:
    return write(ROUTES, name)


@pytest.mark.parametrize("name", [n for n in NAMES if isinstance(_valid(n), str)])
@given(data=st.data())
def test_corrupted_text_raises_only_decode_error(name: str, data: st.DataObject) -> None:
    text = _valid(name)
    where = data.draw(st.integers(0, len(text)))
    noise = data.draw(st.text(alphabet=st.sampled_from("AZaz09+/=:x-_ \n\x00é{"), max_size=6))
    cut = data.draw(st.integers(0, 6))
    _only_decode_error(text[:where] + noise + text[where + cut :], name)
    _only_decode_error((text[:where] + noise + text[where + cut :]).encode("utf-8"), name)


KEYS = ["data", "shape", "dtype", "start", "schema", "version", "num_experts", "routed_experts", "routed_experts_dtype"]
FIELD_VALUES = st.one_of(
    JSON_VALUES,
    st.sampled_from(["uint8", "uint16", "int16", "int32", "int8", "", "AAAA", "AA==", "0000", "~~~~~"]),
    # JSON text where a routes string belongs: detection must not hand it on as a format of its own.
    st.sampled_from(["{}", "[1]", "[not json", " [[[0]]]", '{"data": "AA=="}']),
    st.lists(st.integers(-3, 2**64), max_size=5),
    st.integers(-2, 2**33),
)


@pytest.mark.parametrize("name", [*[n for n in NAMES if isinstance(_valid(n), dict)], "sglang"])
@given(data=st.data())
def test_mutated_objects_raise_only_decode_error(name: str, data: st.DataObject) -> None:
    valid = write(ROUTES, name, dtype="uint8") if name == "sglang" else _valid(name)
    assert isinstance(valid, dict)
    obj = dict(valid)
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(KEYS))
        if data.draw(st.booleans()):
            obj.pop(key, None)
        else:
            obj[key] = data.draw(FIELD_VALUES)
    for reader in (name, "auto"):
        _only_decode_error(obj, reader)
        if _jsonable(obj):
            _only_decode_error(orjson.dumps(obj), reader)


def _jsonable(obj: Any) -> bool:
    try:
        orjson.dumps(obj)
    except TypeError:
        return False
    return True


@given(st.binary(max_size=40), st.integers(0, 200))
def test_corrupted_npy_bytes_raise_only_decode_error(noise: bytes, where: int) -> None:
    out = io.BytesIO()
    np.save(out, ROUTES.astype(np.uint8))
    raw = bytearray(out.getvalue())
    raw[where : where + len(noise)] = noise
    _only_decode_error(bytes(raw), "vllm-npy")
    _only_decode_error(base64.b64encode(bytes(raw)).decode(), "vllm-npy")


@pytest.mark.skipif(zstandard is None, reason="fireworks-r3v1 needs zstandard (the zstd extra)")
@given(st.binary(max_size=24), st.integers(0, 60), st.booleans())
def test_corrupted_r3v1_blobs_raise_only_decode_error(noise: bytes, where: int, mask: bool) -> None:
    assert zstandard is not None
    keep = np.array([True, False, True]) if mask else None
    text = write(ROUTES, "fireworks-r3v1", mask=keep)
    blob = bytearray(zstandard.ZstdDecompressor().decompress(base64.b64decode(text)))
    blob[where : where + len(noise)] = noise
    compressed = zstandard.ZstdCompressor().compress(bytes(blob))
    _only_decode_error(base64.b64encode(compressed).decode(), "fireworks-r3v1")
    _only_decode_error(compressed, "fireworks-r3v1", max_elements=64)


@given(st.lists(st.integers(0, 2**62), min_size=3, max_size=3), st.sampled_from(["uint8", "uint16", "int32"]))
def test_claimed_shapes_never_allocate_beyond_the_text(shape: list[int], dtype: str) -> None:
    for payload, name in (
        ({"data": "AAAAAAAA", "shape": shape, "start": 0, "dtype": dtype}, "prime-rl"),
        ({"data": "0000000000", "shape": shape}, "prime-rl-b85"),
        (f"nrlre1:int16:{shape[0]}x{shape[1]}x{shape[2]}:AAAAAAAA", "nemo-rl"),
    ):
        _only_decode_error(payload, name)


# --- whole responses, hostile sizes, the command line ----------------------------------------------------------


ROUTES_VALUES = st.one_of(
    FIELD_VALUES,
    st.sampled_from([_valid(n) for n in NAMES if n not in ("sglang", "fireworks-r3v1", "fireworks-trace")]),
    st.just("nrlre1:int16:1x2x2:AAAAAAAAAAA="),
    st.lists(st.one_of(st.none(), st.text(max_size=12)), max_size=3),
)
ROUTES_KEYS = [
    "routed_experts",
    "router_replay",
    "routing_matrices",
    "token_ids",
    "output_ids",
    "prompt_token_ids",
    "logprobs",
]


@st.composite
def bodies(draw: st.DrawFn) -> Any:
    """A JSON document with routes-like fields planted at random depths."""
    body = draw(JSON_VALUES)
    for _ in range(draw(st.integers(1, 3))):
        holder = {draw(st.sampled_from(ROUTES_KEYS)): draw(ROUTES_VALUES)}
        wrapper = draw(st.sampled_from(["choices", "meta_info", "message", "nvext", "payloads", None]))
        planted: Any = holder if wrapper is None else {wrapper: [holder] if wrapper == "choices" else holder}
        body = [body, planted] if not isinstance(body, dict) else {**body, f"k{len(body)}": planted}
    return body


def _tupled(value: Any) -> Any:
    """``value`` with every list a tuple (an in-process document built from tuples), routes values left as
    they are (a routes value is read by its format, which takes lists)."""
    if isinstance(value, dict):
        return {k: v if k in ROUTES_FIELDS else _tupled(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_tupled(v) for v in value)
    return value


def _paths(results: list[ReadResult] | None) -> list[str | None] | None:
    return None if results is None else [result.path for result in results]


@given(body=st.one_of(JSON_VALUES, bodies()))
def test_read_response_gives_results_or_decode_error(body: Any) -> None:
    results = decoded_or_none(lambda: read_response(body, **SHAPE))
    if results is not None:
        for result in results:
            assert isinstance(result, ReadResult)
            assert result.path is not None
            assert result.path.startswith("$")
            assert result.routes.ndim == 3
            if result.token_ids is not None and result.logprobs is not None:
                assert result.logprobs.size == result.token_ids.size  # one logprob per token id, or DecodeError
            if result.prompt_token_ids is not None:
                assert (result.prompt_token_ids.dtype, result.prompt_token_ids.ndim) == (np.dtype(np.int64), 1)
                if result.token_ids is not None:  # routes fit the call, or DecodeError
                    call = result.call_token_ids()
                    assert (result.start or 0) + result.routes.shape[0] <= call.size
    if not isinstance(body, (dict, list, str)):
        # A scalar is no response: refused, never [] (which reads as "no routes").
        assert results is None
    if isinstance(body, (dict, list)):
        # Tuples are walked like lists: the same fields, at the same paths.
        assert _paths(decoded_or_none(lambda: read_response(_tupled(body), **SHAPE))) == _paths(results)
    if isinstance(body, (dict, list)) and _jsonable(body):  # a str body is JSON text, not a parsed value
        text = orjson.dumps(body)
        text_results = decoded_or_none(lambda: read_response(text, **SHAPE))
        assert (results is None) == (text_results is None)
        # Every bytes-like object loads accepts is the same text.
        for buffer in (np.frombuffer(text, dtype=np.uint8), array.array("B", text), memoryview(text)):
            assert _paths(decoded_or_none(partial(read_response, buffer, **SHAPE))) == _paths(text_results)


LOGPROB_SHAPES = ["content", "token_logprobs", "list", "sglang", "r3wire.logprobs", "r3wire.array"]


@given(
    data=st.data(),
    shape=st.sampled_from(LOGPROB_SHAPES),
    holder=st.sampled_from([(), ("message",), ("sgl_ext",)]),
    token_ids=st.lists(st.integers(0, 2**40), max_size=5),
    prompt=st.one_of(st.none(), st.lists(st.integers(0, 2**40), max_size=3)),
)
def test_read_response_pairs_one_logprob_with_each_token_id(
    data: st.DataObject, shape: str, holder: tuple[str, ...], token_ids: list[int], prompt: list[int] | None
) -> None:
    """Token ids and logprobs of any two lengths, in every shape: the result has one logprob per token id (an
    echo's prompt logprobs left out) or the read is a DecodeError at the logprobs; SGLang entries naming another
    token id are refused."""
    echoed = (prompt or []) + token_ids
    count = data.draw(
        st.one_of(st.just(len(token_ids)), st.just(len(echoed)), st.integers(0, 7)), label="number of logprobs"
    )
    # An r3wire.logprobs envelope carries only finite values (dumps clamps or refuses the rest).
    missing = st.nothing() if shape == "r3wire.logprobs" else st.none()
    values = data.draw(st.lists(st.one_of(missing, st.floats(-50, 0)), min_size=count, max_size=count))
    beside: dict[str, Any] = {"token_ids": token_ids}
    if prompt is not None:
        beside["prompt_token_ids"] = prompt
    # An echo (prompt logprobs first) comes only in vLLM's logprobs value: SGLang has none.
    aligned = count == len(token_ids) or (prompt is not None and count == len(echoed) and shape != "sglang")
    skip = 0 if count == len(token_ids) else len(prompt or [])
    if shape == "sglang":
        entries: list[list[Any]] = []
        for i, value in enumerate(values):
            # The entry's own token id: none, the one it pairs with (when aligned), or any.
            paired = (token_ids if count == len(token_ids) else echoed if count == len(echoed) else [])[i:][:1]
            choices = [st.none(), st.integers(0, 2**40)] + [st.just(x) for x in paired for _ in range(3)]
            token_id = data.draw(st.one_of(*choices), label=f"entry {i} token id")
            entries.append([value] if token_id is None and data.draw(st.booleans()) else [value, token_id, None])
            if i >= skip and token_id is not None and (i - skip >= len(token_ids) or token_id != token_ids[i - skip]):
                aligned = False
        beside = {"output_ids": token_ids} if prompt is None else {"output_ids": token_ids, "prompt_token_ids": prompt}
        body: Any = {**beside, "meta_info": {"output_token_logprobs": entries, "routed_experts": _valid("sglang")}}
        where = "$.meta_info.output_token_logprobs"
        routes_at = "$.meta_info.routed_experts"
    else:
        lists = {"content": {"content": [{"logprob": x} for x in values]}, "token_logprobs": {"token_logprobs": values}}
        logprobs = lists.get(shape, values)
        if shape.startswith("r3wire."):
            # An r3wire dumps body; a 0-d or [tokens, k] array (top-k logprobs) is not one logprob per token.
            ndim = data.draw(st.sampled_from([1, 1, 0, 2]), label="logprobs ndim")
            array = np.array([np.nan if x is None else x for x in values], dtype=np.float64)
            if ndim == 0:
                array = np.array(array[0] if array.size else -0.5)
            elif ndim == 2:
                array = np.repeat(array[:, None], data.draw(st.integers(1, 3), label="k"), axis=1)
            encode = r3wire.encode_logprobs if shape == "r3wire.logprobs" else r3wire.encode_array
            logprobs = encode(array)
            if ndim != 1:
                body = {"choices": [{"index": 0, **beside, "logprobs": logprobs, "routed_experts": _valid("vllm-npy")}]}
                with pytest.raises(DecodeError, match="a 1-d array of sampled logprobs") as refused:
                    read_response(body, **SHAPE)
                assert refused.value.field == "$.choices[0].logprobs"
                return
        routes: dict[str, Any] = {"routed_experts": _valid("vllm-npy")}
        for key in reversed(holder):
            routes = {key: routes}
        body = {"choices": [{"index": 0, **beside, "logprobs": logprobs, **routes}]}
        where = "$.choices[0].logprobs" + ("" if shape == "list" or shape.startswith("r3wire.") else f".{shape}")
        routes_at = "".join(["$.choices[0]", *(f".{key}" for key in holder), ".routed_experts"])
    if not aligned:
        with pytest.raises(DecodeError) as info:
            read_response(body, **SHAPE)
        assert (info.value.field or "").startswith(where)
        return
    if prompt is not None and len(ROUTES) > len(echoed):
        # More rows than the call (prompt + completion) has tokens: misaligned, refused at the routes.
        with pytest.raises(DecodeError) as info:
            read_response(body, **SHAPE)
        assert info.value.field == routes_at
        return
    (result,) = read_response(body, **SHAPE)
    assert result.token_ids is not None
    assert result.logprobs is not None
    assert result.token_ids.tolist() == token_ids
    if prompt is None:
        assert result.prompt_token_ids is None
    else:
        assert result.prompt_token_ids is not None
        assert result.prompt_token_ids.dtype == np.int64
        assert result.prompt_token_ids.tolist() == prompt
        assert result.call_token_ids().tolist() == echoed
    tail = values[skip:]
    assert result.logprobs.tolist() == [-9999.0 if x is None else x for x in tail]
    assert result.num_clamped == tail.count(None)


PROMPT_VALUES = st.one_of(
    st.lists(st.integers(0, 2**63 - 1), max_size=6),
    st.lists(st.one_of(st.integers(-(2**64), 2**64), st.booleans(), st.floats(), st.text(max_size=2)), max_size=4),
    st.lists(st.lists(st.integers(0, 9), max_size=2), min_size=1, max_size=2),
    st.one_of(st.none(), st.integers(), st.text(max_size=4), st.dictionaries(st.text(max_size=3), st.integers())),
)


@given(
    prompt=PROMPT_VALUES,
    token_ids=st.lists(st.integers(0, 2**40), max_size=4),
    shared=st.booleans(),
    rows=st.integers(0, 7),
    as_text=st.booleans(),
    limit=st.one_of(st.none(), st.integers(1, 6)),
)
def test_read_response_reads_prompt_ids_exactly_or_raises_decode_error(
    *, prompt: Any, token_ids: list[int], shared: bool, rows: int, as_text: bool, limit: int | None
) -> None:
    """Prompt token ids anywhere a response carries them (a choice's, a response's shared by its choices): read as
    int64 exactly when they are a list of integers in 0 .. 2**63 - 1 within max_elements, the call they make with
    the completion's holding the routes, else a DecodeError at their path (or at the routes) and nothing else."""
    routes = write(np.zeros((rows, 2, 2), dtype=np.uint8), "vllm-npy")
    choice: dict[str, Any] = {"index": 0, "token_ids": token_ids, "routed_experts": routes}
    if shared:
        body: Any = {"prompt_token_ids": prompt, "choices": [choice]}
        where = "$.prompt_token_ids"
    else:
        body = {"choices": [{**choice, "prompt_token_ids": prompt}]}
        where = "$.choices[0].prompt_token_ids"
    valid = (
        isinstance(prompt, list)
        and all(type(x) is int and 0 <= x < 2**63 for x in prompt)
        and (limit is None or len(prompt) <= limit)
    )
    payload = orjson.dumps(body) if as_text and _jsonable(body) else body
    try:
        (result,) = read_response(payload, max_elements=limit)
    except DecodeError as exc:
        # In the order they are read: the routes, the completion's ids, the prompt's, then the fit.
        field = exc.field or ""
        if limit is not None and max(rows, 1) * 4 > limit:  # an empty shape is held by its other dimensions
            assert field.startswith("$.choices[0].routed_experts")
        elif limit is not None and len(token_ids) > limit:
            assert field == "$.choices[0].token_ids"
        elif prompt is not None and not valid:
            assert field.startswith(where)
        else:
            assert field == "$.choices[0].routed_experts"
            assert prompt is not None
            assert rows > len(prompt) + len(token_ids)
        return
    assert result.token_ids is not None
    if prompt is None:
        assert result.prompt_token_ids is None
        return
    assert valid
    assert result.prompt_token_ids is not None
    assert result.prompt_token_ids.tolist() == prompt
    assert result.call_token_ids().tolist() == prompt + token_ids
    assert rows <= len(prompt) + len(token_ids)


def _peak_of(call: Any) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        result = decoded_or_none(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def _within_budget(payload_size: int, peak: int, result: Any) -> bool:
    # What a reader may hold: its input a few times over, the output it returns (twice while filling it), and a
    # fixed allowance for interpreter and parser overhead. Never the header's unverified claims.
    out = 0 if result is None else int(result.routes.nbytes) + (0 if result.mask is None else int(result.mask.nbytes))
    return peak <= 64 * payload_size + 2 * out + (1 << 20)


@pytest.mark.skipif(zstandard is None, reason="fireworks-r3v1 needs zstandard (the zstd extra)")
@given(
    mode=st.integers(0, 3),
    total=st.integers(0, 1 << 20),
    replayed=st.integers(0, 1 << 20),
    selector=st.integers(0, 1 << 21),
    matrix=st.integers(0, 1 << 16),
)
def test_fireworks_header_claims_never_amplify_memory(
    mode: int, total: int, replayed: int, selector: int, matrix: int
) -> None:
    assert zstandard is not None
    header = struct.pack("<4sBBBBIIIIQ", b"R3V1", 1, mode, 1, 1, total, replayed, 0, selector, matrix)
    blob = zstandard.ZstdCompressor().compress(header + bytes(selector + matrix))
    for name, payload in (
        ("fireworks-r3v1", blob),
        (
            "fireworks-trace",
            {"manifest": {"PayloadVersion": "r3/v1", "Compression": "zstd"}, "data": base64.b64encode(blob).decode()},
        ),
    ):
        peak, result = _peak_of(lambda p=payload, n=name: read(p, n, num_layers=2, top_k=2, max_elements=1 << 22))
        assert _within_budget(len(blob), peak, result)


@pytest.mark.parametrize("name", NAMES)
@given(shape=st.lists(st.integers(0, 2**40), min_size=3, max_size=3), data=st.data())
def test_claimed_sizes_never_amplify_memory(name: str, shape: list[int], data: st.DataObject) -> None:
    rows, layers, top_k = shape
    valid = write(ROUTES, name)
    candidates: list[Any] = [valid]
    if isinstance(valid, dict):
        candidates.append({**valid, "shape": shape})
    if name == "nemo-rl":
        candidates.append(f"nrlre1:int16:{rows}x{layers}x{top_k}:AAAA")
    if name == "json-lists":
        candidates.append([[[0] * min(top_k, 64)] * min(layers, 64)] * min(rows, 64))
    if name == "fireworks-matrices":
        candidates.append([None] * min(rows, 4096))
    payload = data.draw(st.sampled_from(candidates))
    size = len(orjson.dumps(payload)) if not isinstance(payload, str) else len(payload)
    peak, result = _peak_of(lambda: read(payload, name, **SHAPE, max_elements=1 << 22))
    assert _within_budget(size, peak, result)


def _json_bytes(value: Any) -> bytes:
    # The stdlib writes integers beyond 64 bits, which orjson refuses to: hostile files have them too.
    return json.dumps(value).encode()


@given(st.one_of(st.binary(max_size=200), JSON_VALUES.map(_json_bytes), bodies().map(_json_bytes)))
def test_cli_never_prints_a_traceback(content: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        handle.write(content)
        handle.flush()
        for argv in (
            ["inspect", handle.name],
            ["inspect", "--json", handle.name, "--num-layers", "2", "--top-k", "2"],
            ["convert", handle.name],
        ):
            out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()  # --json writes to stdout.buffer
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
            message = err.getvalue()
            assert code in (0, 2)
            if code == 2:
                assert message.count("\n") == 1
                assert message.startswith("r3wire: error: ")
                assert "internal error" not in message, message
            else:
                assert message == ""


NPY_HEADER_TEXT = st.one_of(
    st.text(max_size=120),
    st.builds(
        lambda descr, fortran, shape, extra: (
            f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}{extra}}}"
        ),
        st.sampled_from(["'|u1'", "'<u2'", "'|O'", "'<f4'", "[('a', '|u1')]", "1", "'|u1' * 3"]),
        st.sampled_from(["False", "True", "0", "None"]),
        st.one_of(
            st.tuples(st.integers(-2, 2**64), st.integers(-2, 2**64), st.integers(-2, 2**64)).map(str),
            st.sampled_from(["()", "(1,)", "[1, 1, 1]", "(1, 1, 1, 1)", "(True, 1, 1)", "(1.0, 1, 1)"]),
        ),
        st.sampled_from(["", ", 'x': 1", ", 10**10: 1", ", " + "1" * 4000 + ": 1"]),
    ),
)


@given(header=NPY_HEADER_TEXT, version=st.sampled_from([1, 2, 3]), body=st.binary(max_size=16))
def test_fuzzed_npy_header_text_raises_only_decode_error(header: str, version: int, body: bytes) -> None:
    encoded = header.encode("utf-8" if version == 3 else "latin1", errors="replace")
    length = len(encoded).to_bytes(2 if version == 1 else 4, "little")
    raw = b"\x93NUMPY" + bytes([version, 0]) + length + encoded + body
    _only_decode_error(raw, "vllm-npy")
    _only_decode_error(base64.b64encode(raw).decode(), "vllm-npy")


@pytest.mark.parametrize("name", [n for n in NAMES if isinstance(_valid(n), str)] + ["raw-npy"])
@given(fill=st.integers(0, 255))
def test_results_never_alias_a_mutable_input(name: str, fill: int) -> None:
    if name == "raw-npy":
        out = io.BytesIO()
        np.save(out, ROUTES.astype(np.uint8))
        buffer, reader = bytearray(out.getvalue()), "vllm-npy"
    else:
        text = _valid(name)
        assert isinstance(text, str)
        buffer, reader = bytearray(text.encode("ascii")), name
    result = read(buffer, reader, **SHAPE)
    before = result.routes.copy()
    buffer[:] = bytes([fill]) * len(buffer)  # the caller reuses its buffer
    assert np.array_equal(result.routes, before)


MANIFESTS = st.fixed_dictionaries(
    {},
    optional={
        "PayloadVersion": st.one_of(st.sampled_from(["r3/v1", "r3/v2", "r3/v0", "r3/v99999999999", ""]), JSON_LEAVES),
        "Compression": st.one_of(st.sampled_from(["zstd", "ZSTD", "gzip", ""]), JSON_LEAVES),
        "Extra": JSON_LEAVES,
    },
)


@pytest.mark.skipif(zstandard is None, reason="fireworks-trace needs zstandard (the zstd extra)")
@given(manifest=st.one_of(MANIFESTS, JSON_VALUES), data=st.one_of(st.just(None), JSON_LEAVES), drop=st.booleans())
def test_mutated_fireworks_trace_raises_only_decode_error(manifest: Any, data: Any, drop: bool) -> None:
    valid = write(ROUTES, "fireworks-trace")
    obj = {"manifest": manifest, "data": valid["data"] if data is None else data}
    if drop:
        del obj["data"]
    for reader in ("fireworks-trace", "auto"):
        _only_decode_error(obj, reader)
