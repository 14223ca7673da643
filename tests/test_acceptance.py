"""Acceptance checklist for issues 11, 12 and 13: one short test per "Must hold" claim, each reproducing the
scenario the issue describes against the public API (the thorough tests and properties live elsewhere)."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import (
    DEFAULT_MAX_ELEMENTS,
    LOGPROB_FLOOR,
    DecodeError,
    EncodeError,
    R3WireError,
    RouteTrace,
    UnsupportedVersionError,
    clamp_logprobs,
    decode_array,
    decode_logprobs,
    decode_routes,
    decode_routes_frame,
    dumps,
    loads,
    pack_routes,
    pad_routes,
    pad_sequences,
)
from r3wire import formats as fmt

HUGE = 2**62
GIANT = 7**6000  # over 4,300 digits: repr() raises ValueError
GIANT_TEXT = "7" * 5000  # the same, as text in a header
MIB = 1 << 20
SRC = str(Path(r3wire.__file__).resolve().parents[1])


@contextmanager
def peak_bytes() -> Iterator[list[int]]:
    """Yields a one-item list filled with the tracemalloc peak of the block (NumPy allocations included)."""
    out = [0]
    tracemalloc.start()
    try:
        yield out
    finally:
        out[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run(
        [sys.executable, "-m", "r3wire", *args], capture_output=True, text=True, check=False, env=env, timeout=120
    )


def _assert_one_line_error(out: subprocess.CompletedProcess[str], word: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert word in lines[0]


def _npy(arr: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npy_with_header(header: str) -> bytes:
    text = header.encode("latin1")
    pad = 64 - (10 + len(text) + 1) % 64
    text += b" " * (pad % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


def _zstd() -> Any:
    return pytest.importorskip("zstandard")


def _r3v1(mode: int, total: int, replayed: int, selector: bytes, matrix: bytes) -> bytes:
    header = struct.pack("<4sBBBBIIIIQ", b"R3V1", 1, mode, 1, 1, total, replayed, 0, len(selector), len(matrix))
    compressed: bytes = _zstd().ZstdCompressor(level=19).compress(header + selector + matrix)
    return compressed


# --------------------------------------------------------------------------------------------------------- issue 11

ZERO_SHAPE = [HUGE, 0, 2]


def _zero(schema: str | None, shape: list[int] = ZERO_SHAPE, dtype: str = "uint8") -> dict[str, Any]:
    env: dict[str, Any] = {"data": "", "shape": shape, "dtype": dtype}
    if schema is not None:
        env.update(schema=schema, version=1)
    return env


ZERO_DECODERS: list[tuple[str, Callable[[], object]]] = [
    ("decode_routes", lambda: decode_routes(_zero("r3wire.routes"))),
    ("decode_routes-no-layers", lambda: decode_routes(_zero("r3wire.routes", [5, 0, 2]))),
    ("decode_array", lambda: decode_array(_zero("r3wire.array"))),
    ("decode_logprobs", lambda: decode_logprobs(_zero("r3wire.logprobs", [HUGE, 0], "float32"))),
    (
        "decode_routes_frame",
        lambda: decode_routes_frame(struct.pack("<4sBBBBQQII", b"R3WF", 1, 1, 0, 0, HUGE, 0, 2, 0)),
    ),
    ("loads", lambda: loads(json.dumps({"a": [_zero("r3wire.array")]}))),
    ("loads-parsed", lambda: loads({"a": [_zero("r3wire.routes")]})),
    ("read-r3wire", lambda: fmt.read(_zero("r3wire.routes"), format="r3wire")),
    ("read-skyrl", lambda: fmt.read(_zero(None), format="skyrl")),
    ("read-prime-rl", lambda: fmt.read({**_zero(None), "start": 0}, format="prime-rl")),
    ("read-prime-rl-b85", lambda: fmt.read({"data": "", "shape": ZERO_SHAPE}, format="prime-rl-b85")),
    ("read-nemo-rl", lambda: fmt.read(f"nrlre1:int16:{HUGE}x0x2:", format="nemo-rl")),
    (
        "read-vllm-npy",
        lambda: fmt.read(
            base64.b64encode(
                _npy_with_header(f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({HUGE}, 0, 2), }}")
            ).decode(),
            format="vllm-npy",
        ),
    ),
    ("read-auto", lambda: fmt.read(json.dumps(_zero(None)))),
    ("read_response", lambda: fmt.read_response({"choices": [{"routed_experts": _zero(None)}]})),
]


# issue 11.1
@pytest.mark.parametrize("call", [c for _, c in ZERO_DECODERS], ids=[n for n, _ in ZERO_DECODERS])
def test_zero_element_overflowing_shape_raises_decode_error_naming_shape(call: Callable[[], object]) -> None:
    with pytest.raises(DecodeError) as info:
        call()
    assert "shape" in str(info.value)
    assert not isinstance(info.value.__cause__, MemoryError)


# issue 11.1: rows = 0 stays valid
def test_zero_rows_stay_valid() -> None:
    assert decode_routes(_zero("r3wire.routes", [0, 3, 2])).shape == (0, 3, 2)
    assert fmt.read(_zero(None, [0, 3, 2]), format="skyrl").routes.shape == (0, 3, 2)


# issue 11.1 / 11.8: the CLI on an overflowing zero-element shape and on a 0-layer routes file
@pytest.mark.parametrize("shape", [ZERO_SHAPE, [4, 0, 2], [4, 2, 0]], ids=["overflow", "no-layers", "no-top-k"])
def test_cli_inspect_zero_element_file_one_line_exit_2(tmp_path: Path, shape: list[int]) -> None:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(_zero("r3wire.routes", shape)))
    _assert_one_line_error(_cli("inspect", str(path)), "shape")


# issue 11.2
def test_fireworks_bitmap_140_bytes_claiming_2_pow_24_tokens_is_refused_by_default() -> None:
    total = 2**24
    payload = _r3v1(2, total, 0, bytes(total // 8), b"")
    assert len(payload) < 400  # a few hundred bytes at most (the was 140)
    text = base64.b64encode(payload).decode()
    with peak_bytes() as peak, pytest.raises(DecodeError, match="shape"):
        fmt.read(text, format="fireworks-r3v1", num_layers=48, top_k=8)
    assert peak[0] < 64 * MIB  # 6 GiB before the fix


# issue 11.2: the default cap covers 1M tokens x 64 layers x top-8 and can be raised
def test_default_cap_covers_largest_trajectory_and_can_be_raised() -> None:
    assert DEFAULT_MAX_ELEMENTS >= 2**20 * 64 * 8
    env: dict[str, object] = {"data": "", "shape": [DEFAULT_MAX_ELEMENTS + 1, 0], "dtype": "uint8"}
    env.update(schema="r3wire.array", version=1)
    with pytest.raises(DecodeError):
        decode_array(env)
    assert decode_array(env, max_elements=DEFAULT_MAX_ELEMENTS + 1).shape == (DEFAULT_MAX_ELEMENTS + 1, 0)


# issue 11.2: a Fireworks BITMAP within a raised cap allocates no more than its output (no 8x selector temporaries)
def test_fireworks_bitmap_expansion_costs_about_its_output() -> None:
    total, layers, top_k = 2**20, 8, 8
    payload = _r3v1(2, total, 0, bytes(total // 8), b"")
    with peak_bytes() as peak:
        result = fmt.read(payload, format="fireworks-r3v1", num_layers=layers, top_k=top_k)
    output = result.routes.nbytes + (0 if result.mask is None else result.mask.nbytes)
    assert result.routes.shape == (total - 1, layers, top_k)  # every position but the last token's
    assert peak[0] < output + 4 * MIB


def _deep_document(depth: int, width: int) -> bytes:
    # Built as text: orjson.dumps stops at 255 levels, orjson.loads (and r3wire.loads) reads up to 1024.
    bad = b'[{"schema":"r3wire.array","version":1,"data":"AAA","shape":[2],"dtype":"uint8"}]'
    parts = []
    for level in range(depth):
        pad = b",".join([b'{"k":%d,"v":[1,2]}' % level] * width)
        parts.append(b'{"pad":[' + pad + b'],"next":')
    return b"".join(parts) + bad + b"}" * depth


# issue 11.3 (linear error path; the measured time is reported, not asserted)
def test_loads_locates_a_deep_malformed_envelope_with_bounded_memory() -> None:
    text = _deep_document(depth=400, width=300)
    assert 2 * MIB < len(text) < 6 * MIB
    with peak_bytes() as parsed:
        orjson.loads(text)
    with peak_bytes() as peak, pytest.raises(DecodeError) as info:
        loads(text)
    assert str(info.value).startswith("$.next.next.")
    assert "data" in str(info.value)
    assert peak[0] < 3 * parsed[0]  # the parsed tree itself; +4.3 GiB before the fix


# issue 11.3 (the ratio against orjson is measured in benchmarks/, never asserted here)
def test_loads_of_many_tiny_envelopes_decodes_each() -> None:
    doc = orjson.dumps([r3wire.encode_array(np.arange(3, dtype=np.uint8) + i % 7) for i in range(2000)])
    out = loads(doc)
    assert len(out) == 2000
    assert all(np.array_equal(a, np.arange(3, dtype=np.uint8) + i % 7) for i, a in enumerate(out))


BAD_STRINGS = [
    pytest.param(b"AAAA\x01AAA", id="control-byte"),
    pytest.param(b"AAAA\xff\xfeAA", id="invalid-utf8"),
    pytest.param(b"AAAA\\ud800AA", id="lone-surrogate"),
]


# issue 11.4
@pytest.mark.parametrize("bad", BAD_STRINGS)
def test_loads_refuses_bad_bytes_in_a_data_string_discarded_by_a_later_duplicate(bad: bytes) -> None:
    filler = b"A" * 4096  # a long string, spliced rather than parsed by orjson
    envelope = b'{"schema":"r3wire.array","version":1,"data":"' + filler + bad + b'","shape":[1],"dtype":"uint8"}'
    doc = b'{"x":' + envelope + b',"x":1}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(doc)
    with pytest.raises(DecodeError):
        loads(doc)


# issue 11.4: duplicate members inside an envelope are refused by every decoder that reads text
def test_duplicate_members_in_an_envelope_are_refused() -> None:
    doc = b'{"schema":"r3wire.array","version":1,"data":"AA==","data":"AQ==","shape":[1],"dtype":"uint8"}'
    with pytest.raises(DecodeError, match="data"):
        loads(doc)
    with pytest.raises(DecodeError, match="data"):
        fmt.read(b'{"data":"AAE=","data":"AAA=","shape":[1,1,2],"dtype":"uint8"}')
    with pytest.raises(DecodeError, match="data"):
        fmt.read_response(b'{"choices":[{"routed_experts":{"data":"AAE=","data":"AAA=","shape":[1,1,2]}}]}')


# issue 11.5
@pytest.mark.parametrize("schema", ["r3wire.routes", "r3wire.array", "r3wire.logprobs"])
def test_dumps_of_a_user_object_spelling_a_schema_raises(schema: str) -> None:
    # The issue allows "EncodeError or exact round trip"; r3wire chose the EncodeError, at the member's path.
    with pytest.raises(EncodeError, match=r"\$\.meta\.schema"):
        dumps({"meta": {"schema": schema, "note": "mine", "data": "zz"}})
    assert loads(dumps({"meta": {"schema": "mine"}})) == {"meta": {"schema": "mine"}}


# issue 11.5
@pytest.mark.parametrize("ndim", [33, 40, 64])
def test_dumps_of_high_dimensional_arrays_raises(ndim: int) -> None:
    try:
        arr = np.zeros((1,) * ndim, dtype=np.uint8)
    except ValueError:
        pytest.skip("NumPy 1 caps arrays at 32 dimensions")
    # "EncodeError or round trip": r3wire refuses what its decoders (32-d at most) would refuse.
    with pytest.raises(EncodeError, match="32 dimensions"):
        dumps({"a": arr})
    assert loads(dumps({"a": arr[(0,) * (ndim - 32)]}))["a"].shape == (1,) * 32


# issue 11.6
def test_giant_integer_in_npy_header_key_raises_bounded_decode_error() -> None:
    raw = _npy_with_header(f"{{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1), {GIANT_TEXT}: 1, }}")
    with pytest.raises(DecodeError) as info:
        fmt.read(base64.b64encode(raw + b"\x00").decode(), format="vllm-npy")
    assert len(str(info.value)) < 1000


# issue 11.6
def test_giant_integer_in_check_keys_and_detection_raises_bounded_decode_error() -> None:
    env: dict[Any, Any] = {"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8", "schema": "r3wire.routes"}
    env.update({"version": 1, GIANT: 1})
    with pytest.raises(DecodeError) as info:
        decode_routes(env)
    assert len(str(info.value)) < 1000
    for call in (lambda: fmt.detect({GIANT: 1}), lambda: fmt.read({GIANT: GIANT}), lambda: fmt.read([GIANT])):
        with pytest.raises(DecodeError) as info:
            call()
        assert len(str(info.value)) < 1000
    with pytest.raises(DecodeError) as info:
        decode_routes({**env, "shape": [GIANT, 1, 2]})
    assert len(str(info.value)) < 1000


# issue 11.6
@pytest.mark.parametrize(
    "change",
    [
        {"data": memoryview(b"AAAAAAAA")[::2]},
        {"schema": np.array(["r3wire.routes"])},
        {"dtype": np.array(["uint8"])},
        {"shape": np.array([1, 1, 2])},
    ],
    ids=["strided-memoryview-data", "ndarray-schema", "ndarray-dtype", "ndarray-shape"],
)
def test_non_json_mapping_values_give_decode_error(change: dict[str, Any]) -> None:
    env = {"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8", "schema": "r3wire.routes", "version": 1, **change}
    with pytest.raises(DecodeError):
        decode_routes(env)
    with pytest.raises(DecodeError):
        fmt.read(env)


# issue 11.7
def test_pad_routes_on_a_decoded_zero_element_payload_refuses_without_allocating() -> None:
    with pytest.raises(DecodeError, match="shape"):  # the 95-byte payload no longer passes the default cap
        decode_array({"data": "", "shape": [2**30, 0, 8], "dtype": "uint8", "schema": "r3wire.array", "version": 1})
    arr = np.empty((2**30, 0, 8), dtype=np.uint8)  # what it decoded to before
    with peak_bytes() as peak, pytest.raises(R3WireError):
        pad_routes([arr], side="right")
    assert peak[0] < 16 * MIB
    with peak_bytes() as peak, pytest.raises(R3WireError):
        pad_routes([np.empty((0, 1, 8), np.uint8), arr], side="right")
    assert peak[0] < 16 * MIB


# issue 11.7
def test_pack_routes_of_eight_huge_zero_element_arrays_refuses() -> None:
    arrays = [np.empty((2**60, 0, 1), dtype=np.uint8) for _ in range(8)]
    with peak_bytes() as peak, pytest.raises(R3WireError):
        pack_routes(arrays)
    assert peak[0] < 16 * MIB
    with pytest.raises(R3WireError):
        pack_routes([np.empty((2**60, 1, 0), dtype=np.uint8) for _ in range(8)])


# issue 11.8
def test_read_of_a_bytearray_npy_does_not_alias_it() -> None:
    arr = np.arange(12, dtype=np.uint8).reshape(2, 3, 2)
    buf = bytearray(_npy(arr))
    result = fmt.read(buf, format="vllm-npy")
    buf[-12:] = bytes(12)  # the caller reuses its receive buffer
    assert np.array_equal(result.routes, arr)
    auto = fmt.read(bytearray(base64.b64encode(_npy(arr))))
    assert np.array_equal(auto.routes, arr)


# issue 11.8
def test_zstd_stream_starting_with_a_skippable_frame_is_read() -> None:
    routes = np.arange(12, dtype=np.uint8).reshape(3, 2, 2)
    frame = _r3v1(0, 4, 4, b"", bytes(4) + routes.tobytes())  # ALL: token 0's entry, then positions 0 .. 2
    skippable = struct.pack("<II", 0x184D2A50, 5) + b"meta!"
    for payload in (skippable + frame, base64.b64encode(skippable + frame).decode()):
        result = fmt.read(payload, num_layers=2, top_k=2)
        assert result.format == "fireworks-r3v1"
        assert np.array_equal(result.routes, routes)


# issue 11.8
@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\xfe\x00", b"{", b"[[[[", b"nrlre1:int8:1x1x1:!!", b'{"choices":[{"routed_experts":7}]}', b"[]"],
)
def test_cli_never_prints_a_traceback(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "payload"
    path.write_bytes(content)
    out = _cli("inspect", str(path))
    assert "Traceback" not in out.stderr
    assert out.returncode in (0, 2)
    if out.returncode == 2:
        assert len(out.stderr.strip().splitlines()) == 1


# issue 11 Tests: threads encoding and decoding different arrays see no cross-talk
def test_threads_round_trip_their_own_arrays() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(seed: int) -> bool:
        rng = np.random.default_rng(seed)
        routes = rng.integers(0, 128, size=(64 + seed, 4, 2), dtype=np.uint8)
        back = loads(dumps({"routed_experts": routes}))["routed_experts"]
        return bool(np.array_equal(back, routes)) and np.array_equal(
            decode_routes(r3wire.encode_routes(routes)), routes
        )

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(32)))


# --------------------------------------------------------------------------------------------------------- issue 12

R = np.array([[[1, 2], [3, 4]], [[5, 6], [7, 0]], [[2, 3], [4, 5]]], dtype=np.uint8)  # [3, 2, 2]
CONTENT = {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": None}, {"token": "c"}]}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _bodies() -> dict[str, tuple[dict[str, Any], dict[str, Any], str]]:
    """engine → (body, read args, path of its routes)."""
    skyrl = {"data": _b64(R.tobytes()), "shape": [3, 2, 2], "dtype": "uint8"}
    nemo = f"nrlre1:int8:3x2x2:{_b64(R.astype(np.int8).tobytes())}"
    trace = fmt.write(R, "fireworks-trace")
    shape = {"num_layers": 2, "top_k": 2}
    return {
        "vllm-chat": (
            {
                "choices": [
                    {"index": 0, "message": {"content": "x"}, "logprobs": CONTENT, "routed_experts": _b64(_npy(R))}
                ]
            },
            {},
            "$.choices[0].routed_experts",
        ),
        "vllm-generate": (
            {"choices": [{"token_ids": [9, 8, 7], "logprobs": CONTENT, "routed_experts": _b64(_npy(R))}]},
            {},
            "$.choices[0].routed_experts",
        ),
        "sglang-generate": (
            {
                "output_ids": [9, 8, 7],
                "meta_info": {
                    "routed_experts": _b64(R.astype(np.int32).tobytes()),
                    "output_token_logprobs": [[-0.5, 9, None], [None, 8, None], [None, 7, None]],
                },
            },
            shape,
            "$.meta_info.routed_experts",
        ),
        "sglang-openai": (
            {"choices": [{"logprobs": CONTENT, "sgl_ext": {"routed_experts": _b64(R.astype(np.int32).tobytes())}}]},
            shape,
            "$.choices[0].sgl_ext.routed_experts",
        ),
        "skyrl": (
            {"choices": [{"token_ids": [9, 8, 7], "logprobs": CONTENT, "routed_experts": skyrl}]},
            {},
            "$.choices[0].routed_experts",
        ),
        "prime-rl": (
            {"choices": [{"token_ids": [9, 8, 7], "logprobs": CONTENT, "routed_experts": {**skyrl, "start": 0}}]},
            {},
            "$.choices[0].routed_experts",
        ),
        "dynamo": (
            {"choices": [{"logprobs": CONTENT}], "nvext": {"routed_experts": {**skyrl, "start": 0}}},
            {},
            "$.nvext.routed_experts",
        ),
        "nemo-rl": (
            {"choices": [{"token_ids": [9, 8, 7], "logprobs": CONTENT, "message": {"routed_experts": nemo}}]},
            {},
            "$.choices[0].message.routed_experts",
        ),
        "fireworks-trace": ({"id": "t", "payloads": {"router_replay": trace}}, shape, "$.payloads.router_replay"),
        "r3wire-dumps": (
            orjson.loads(
                dumps({"choices": [{"token_ids": np.array([9, 8, 7]), "routed_experts": R, "logprobs": [-0.5] * 3}]})
            ),
            {},
            "$.choices[0].routed_experts",
        ),
    }


# issue 12.1
@pytest.mark.parametrize("engine", list(_bodies()))
def test_read_response_reads_each_engines_whole_body(engine: str) -> None:
    if engine == "fireworks-trace":
        _zstd()
    body, args, path = _bodies()[engine]
    for given in (body, json.dumps(body), json.dumps(body).encode()):
        (result,) = fmt.read_response(given, **args)
        assert result.path == path
        assert np.array_equal(result.routes, R)
        if engine not in ("vllm-chat", "sglang-openai", "dynamo", "fireworks-trace"):
            assert result.token_ids is not None
            assert result.token_ids.tolist() == [9, 8, 7]
        if engine not in ("dynamo", "fireworks-trace", "r3wire-dumps"):
            assert result.logprobs is not None
            assert result.logprobs.tolist() == [-0.5, LOGPROB_FLOOR, LOGPROB_FLOOR]
            assert result.num_clamped == 2


# issue 12.1: SGLang's output_token_logprobs are the sampled logprobs (as JSON text, without -inf)
def test_read_response_sglang_meta_info_logprobs_are_clamped() -> None:
    body, args, _ = _bodies()["sglang-generate"]
    body["meta_info"]["output_token_logprobs"][2][0] = -1.5
    (result,) = fmt.read_response(json.dumps(body), **args)
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-0.5, LOGPROB_FLOOR, -1.5]
    assert result.num_clamped == 1


# issue 12.1: several choices in document order; no routes → []; malformed → DecodeError naming the path
def test_read_response_order_empty_and_malformed() -> None:
    skyrl = {"data": _b64(R.tobytes()), "shape": [3, 2, 2], "dtype": "uint8"}
    two = {"choices": [{"routed_experts": skyrl}, {"routed_experts": {**skyrl, "data": _b64(R[::-1].tobytes())}}]}
    first, second = fmt.read_response(two)
    assert (first.path, second.path) == ("$.choices[0].routed_experts", "$.choices[1].routed_experts")
    assert np.array_equal(second.routes, R[::-1])
    assert fmt.read_response({"choices": [{"index": 0, "routed_experts": None}]}) == []
    assert fmt.read_response(b'{"id": 1}') == []
    bad = {"choices": [{}, {"routed_experts": {**skyrl, "shape": [4, 2, 2]}}]}
    with pytest.raises(DecodeError, match=r"\$\.choices\[1\]\.routed_experts"):
        fmt.read_response(bad)


# issue 12.1: a bad argument is refused as the caller's (no JSONPath), whether or not the body has routes
@pytest.mark.parametrize("kwargs", [{"num_layers": 0, "top_k": 2}, {"top_k": -1}, {"num_experts": 0}])
@pytest.mark.parametrize("body", [{"id": 1}, {"choices": [{"routed_experts": "AAAAAA=="}]}], ids=["none", "sglang"])
def test_read_response_checks_its_arguments_first(body: dict[str, Any], kwargs: dict[str, Any]) -> None:
    with pytest.raises(R3WireError) as info:
        fmt.read_response(body, **kwargs)
    assert not isinstance(info.value, DecodeError)
    assert info.value.field in kwargs


# issue 12.2
def test_read_detects_by_the_value_under_routed_experts() -> None:
    skyrl = {"data": _b64(R.tobytes()), "shape": [3, 2, 2], "dtype": "uint8"}
    nemo = f"nrlre1:int8:3x2x2:{_b64(R.tobytes())}"
    for holder, name in (
        ({"routed_experts": skyrl}, "skyrl"),
        ({"routed_experts": {**skyrl, "start": 0}}, "prime-rl"),
        ({"routed_experts": nemo}, "nemo-rl"),
    ):
        result = fmt.read(holder, num_layers=2, top_k=2)  # shape given: SGLang would be possible, yet not chosen
        assert result.format == name
        assert np.array_equal(result.routes, R)


# issue 12.3
def test_fireworks_trace_manifest_is_checked_and_written() -> None:
    _zstd()
    trace = fmt.write(R, "fireworks-trace")
    assert trace["manifest"] == {"PayloadVersion": "r3/v1", "Compression": "zstd"}
    assert np.array_equal(fmt.read(trace, num_layers=2, top_k=2).routes, R)
    with pytest.raises(UnsupportedVersionError):
        fmt.read({**trace, "manifest": {"PayloadVersion": "r3/v9", "Compression": "zstd"}}, num_layers=2, top_k=2)
    with pytest.raises(DecodeError, match="Compression"):
        fmt.read({**trace, "manifest": {"PayloadVersion": "r3/v1", "Compression": "brotli"}}, num_layers=2, top_k=2)


# issue 12.3 (the reference test_zero_replayed_tokens)
def test_fireworks_all_mode_with_zero_replayed_tokens() -> None:
    result = fmt.read(_r3v1(0, 5, 0, b"", b""), format="fireworks-r3v1", num_layers=2, top_k=2)
    assert result.routes.shape == (0, 2, 2)
    assert result.total_tokens == 5


# issue 12.3: per-token matrices, null = not replayed
def test_fireworks_matrices_read_and_written() -> None:
    matrices = [None, _b64(R[1].tobytes()), _b64(R[2].tobytes())]
    result = fmt.read(matrices, num_layers=2, top_k=2)
    assert result.format == "fireworks-matrices"
    assert result.mask is not None
    assert result.mask.tolist() == [False, True, True]
    assert np.array_equal(result.routes[1:], R[1:])
    assert fmt.write(result.routes, "fireworks-matrices", mask=result.mask) == matrices


# issue 12.4
def test_sglang_minus_one_placeholders_kept_and_written_back_as_int32() -> None:
    ids = np.array([[[3, -1], [4, 5]], [[-1, -1], [6, 7]]], dtype=np.int32)
    result = fmt.read(_b64(ids.tobytes()), format="sglang", num_layers=2, top_k=2)
    assert result.routes.dtype == np.int32
    assert np.array_equal(result.routes, ids)
    assert result.route_mask().tolist() == (ids != -1).tolist()
    text = fmt.write(result.routes, "sglang")
    assert isinstance(text, str)
    assert base64.b64decode(text) == ids.tobytes()


# issue 12.5
def test_nested_json_int_lists_are_read_with_the_same_rules() -> None:
    result = fmt.read(json.dumps(R.tolist()))
    assert result.format == "json-lists"
    assert np.array_equal(result.routes, R)
    with pytest.raises(DecodeError):
        fmt.read([[[1, 2], [3]]])  # ragged
    with pytest.raises(DecodeError):
        fmt.read([[[1, -2]]])  # negative ids are not SGLang placeholders here
    with peak_bytes() as peak, pytest.raises(DecodeError):
        fmt.read([[[1, 2]]], max_elements=1)
    assert peak[0] < MIB


# issue 12.6
def test_dumps_refuses_a_nan_logprob_naming_its_jsonpath_or_clamps_on_request() -> None:
    body = {"choices": [{"logprobs": np.array([-0.5, np.nan, -1.0])}]}
    with pytest.raises(EncodeError, match=r"\$\.choices\[0\]\.logprobs"):
        dumps(body)
    back = loads(dumps(body, clamp_logprobs=True))
    assert back["choices"][0]["logprobs"].tolist() == [-0.5, LOGPROB_FLOOR, -1.0]
    envelope = orjson.loads(dumps({"logprobs": np.array([-0.5])}))["logprobs"]
    assert envelope["schema"] == "r3wire.logprobs"


# issue 12.6
def test_loads_of_an_already_parsed_object_decodes_every_envelope() -> None:
    parsed = orjson.loads(dumps({"a": [{"routed_experts": R}], "b": {"logprobs": np.array([-0.5], np.float32)}}))
    out = loads(parsed)
    assert np.array_equal(out["a"][0]["routed_experts"], R)
    assert out["b"]["logprobs"].dtype == np.float32


# issue 12.7
def test_cli_inspect_whole_response_json(tmp_path: Path) -> None:
    skyrl = {"data": _b64(R.tobytes()), "shape": [3, 2, 2], "dtype": "uint8"}
    body = {"choices": [{"routed_experts": skyrl}, {"routed_experts": r3wire.encode_routes(R, num_experts=8)}]}
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    out = _cli("inspect", str(path), "--json")
    assert out.returncode == 0, out.stderr
    listing = json.loads(out.stdout)
    assert [item["path"] for item in listing] == ["$.choices[0].routed_experts", "$.choices[1].routed_experts"]
    assert listing[1]["num_experts"] == 8
    text = _cli("inspect", str(path))
    assert text.returncode == 0
    assert "$.choices[1].routed_experts" in text.stdout


# --------------------------------------------------------------------------------------------------------- issue 13


# issue 12.7: num_experts and bits shown, kept by convert, --pack-bits, --plot says where it wrote
def test_cli_shows_and_keeps_num_experts_and_bits(tmp_path: Path) -> None:
    routes = np.random.default_rng(0).integers(0, 384, size=(5, 3, 2))
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(r3wire.encode_routes(routes, num_experts=384, pack_bits=True)))
    shown = json.loads(_cli("inspect", "--json", str(path)).stdout)
    assert (shown["num_experts"], shown["bits"]) == (384, 9)
    converted = _cli("convert", str(path))
    assert converted.returncode == 0, converted.stderr
    envelope = json.loads(converted.stdout)
    assert (envelope["num_experts"], envelope["bits"]) == (384, 9)
    assert np.array_equal(decode_routes(envelope), routes)
    unpacked = tmp_path / "unpacked.json"
    unpacked.write_text(json.dumps(r3wire.encode_routes(routes, num_experts=384)))
    packed = json.loads(_cli("convert", "--pack-bits", str(unpacked)).stdout)
    assert packed["bits"] == 9
    assert np.array_equal(decode_routes(packed), routes)


# issue 12.7
def test_cli_plot_says_where_it_wrote(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(r3wire.encode_routes(R)))
    plot = tmp_path / "load.png"
    out = _cli("inspect", "--plot", str(plot), str(path))
    assert out.returncode == 0, out.stderr
    assert plot.stat().st_size > 0
    assert str(plot) in out.stderr


def _rows(n: int, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    rows: np.ndarray[Any, Any] = np.stack([rng.permutation(16)[:4].reshape(2, 2) for _ in range(n)]).astype(np.uint8)
    return rows


# issue 13.1
def test_route_trace_token_mismatch_names_position_and_both_tokens() -> None:
    trace = RouteTrace(num_experts=16)
    trace.add(_rows(4), start=0, token_ids=[10, 11, 12, 13, 14])
    with pytest.raises(R3WireError) as info:
        trace.add(_rows(3, 1), start=3, token_ids=[10, 11, 99, 13, 14, 15, 16])
    message = str(info.value)
    assert "2" in message
    assert "12" in message
    assert "99" in message
    assert trace.rows == 4  # unchanged
    with pytest.raises(R3WireError):  # routes must fit inside token_ids
        trace.add(_rows(4), start=4, token_ids=[10, 11, 12, 13, 14, 15])
    assert trace.token_ids is not None
    assert trace.token_ids.tolist() == [10, 11, 12, 13, 14]
    assert RouteTrace().token_ids is None


# issue 13.1
def test_route_trace_common_prefix_and_fork() -> None:
    trace = RouteTrace(num_experts=16)
    rows = _rows(5)
    trace.add(rows, start=0, token_ids=[1, 2, 3, 4, 5, 6])
    assert trace.common_prefix([1, 2, 3, 9, 9]) == 3
    branch = trace.fork(3)
    assert branch.rows == 3
    assert branch.token_ids is not None
    assert branch.token_ids.tolist() == [1, 2, 3]
    new = _rows(3, 2)
    branch.add(new, start=3, token_ids=[1, 2, 3, 9, 9, 9, 9])
    routes, captured = branch.finalize()
    assert captured == 6
    assert np.array_equal(routes, np.concatenate([rows[:3], new]))
    assert np.array_equal(trace.finalize()[0], rows)  # the original is untouched


# issue 13.2
@pytest.mark.parametrize(
    ("policy", "tokens", "keeps_old"),
    [("keep", True, True), ("replace", True, False), (None, True, True), (None, False, None), ("raise", True, None)],
)
def test_on_conflict_semantics_and_conflicts_counter(policy: Any, tokens: bool, keeps_old: bool | None) -> None:
    old = _rows(4)
    new = old.copy()
    new[1:3] = _rows(2, 5)  # re-prefill routed two recorded rows differently
    assert not np.array_equal(new[1], old[1])
    assert not np.array_equal(new[2], old[2])
    ids = [1, 2, 3, 4, 5, 6]
    trace = RouteTrace(num_experts=16)
    trace.add(old, start=0, token_ids=ids if tokens else None)
    call = _rows(2, 9)
    if keeps_old is None:
        with pytest.raises(R3WireError):
            trace.add(np.concatenate([new, call]), start=0, token_ids=ids if tokens else None, on_conflict=policy)
        assert trace.rows == 4
        return
    trace.add(np.concatenate([new, call]), start=0, token_ids=ids, on_conflict=policy)
    assert trace.conflicts == 2
    routes, _ = trace.finalize(total_tokens=6)
    assert np.array_equal(routes[:4], old if keeps_old else new)
    assert np.array_equal(routes[4:], call[:2])


# issue 13.3: prefill rows and decode rows arrive separately; the uncaptured last row is masked
def test_prefill_decode_split_and_missing_last_row_masked() -> None:
    rows = _rows(6)
    tokens = list(range(100, 107))  # 7 tokens, 6 captured rows
    trace = RouteTrace(num_experts=16)
    trace.add(rows[:3], start=0, token_ids=tokens[:4])  # prefill node
    trace.add(rows[3:], start=3, token_ids=tokens)  # decode node
    routes, captured = trace.finalize()
    assert captured == 6
    padded, mask = pad_routes([routes], token_lengths=[len(tokens)], num_experts=16, side="right")
    assert np.array_equal(padded[0, :6], rows)
    assert mask[0].tolist() == [False] * 6 + [True]


# issue 13.4
def test_balanced_padding_counts_within_one() -> None:
    experts, layers, top_k = 8, 3, 3
    samples = [_rows_k(n, layers, top_k, experts) for n in (1, 7, 4, 2)]
    padded, mask = pad_routes(samples, fill="balanced", num_experts=experts, side="right")
    pad = padded[mask]  # [padding tokens, layers, top_k]
    assert pad.shape[0] == 4 * 7 - 14
    for layer in range(layers):
        counts = np.bincount(pad[:, layer].ravel(), minlength=experts)
        assert int(np.max(counts)) - int(np.min(counts)) <= 1
    assert all(len(set(row.tolist())) == top_k for row in pad.reshape(-1, top_k))
    assert int(pad.max()) < experts
    with pytest.raises(R3WireError):
        pad_routes(samples, fill="balanced", side="right")  # needs num_experts


def _rows_k(n: int, layers: int, top_k: int, experts: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(n)
    rows: np.ndarray[Any, Any] = np.stack(
        [np.stack([rng.permutation(experts)[:top_k] for _ in range(layers)]) for _ in range(n)]
    ).astype(np.uint8)
    return rows


# issue 13.5
@pytest.mark.parametrize("side", ["left", "right"])
def test_pad_sequences_layout_equals_pad_routes(side: Any) -> None:
    samples = [_rows(3), _rows(1, 1), _rows(5, 2)]
    lengths = [4, 2, 6]
    routes, rmask = pad_routes(samples, token_lengths=lengths, side=side, num_experts=16)
    values = [np.arange(n, dtype=np.float32) + 10 * i + 1 for i, n in enumerate((3, 1, 5))]  # 0 is the fill
    padded, vmask = pad_sequences(values, token_lengths=lengths, side=side)
    assert padded.shape[:2] == routes.shape[:2]
    for i, sample in enumerate(samples):
        for j in range(len(sample)):
            cells = np.argwhere(np.all(routes[i] == sample[j], axis=(1, 2)) & ~rmask[i])
            t = int(np.argwhere(padded[i] == values[i][j])[0][0])
            assert t in cells.ravel().tolist()
            assert not vmask[i, t]
    # offsets: logprobs covering completion tokens only land under their tokens
    lp, lmask = pad_sequences([np.array([-1.0, -2.0])], token_lengths=[4], side=side, offsets=[2])
    tokens, _ = pad_sequences([np.array([7, 8, 9, 6])], token_lengths=[4], side=side)
    assert lp[0][tokens[0] == 9].tolist() == [-1.0]
    assert lp[0][tokens[0] == 6].tolist() == [-2.0]
    assert int((~lmask).sum()) == 2


# issue 13.6
def test_clamp_logprobs_float16_default_floor() -> None:
    result = clamp_logprobs(np.array([-0.5, np.nan, -np.inf], dtype=np.float16))
    assert result.values.dtype == np.float16
    assert result.num_clamped == 2
    nearest = np.float16(-9999.0)
    assert result.values.tolist() == [-0.5, float(nearest), float(nearest)]
    assert math.isclose(float(nearest), -9999.0, abs_tol=8)
    with pytest.raises(R3WireError):
        clamp_logprobs(np.array([np.nan], dtype=np.float16), floor=-9999.0)
