"""r3wire.formats: round trips through every writer/reader pair, cross-format conversion, detection, the options
each format takes, and the errors for what a format cannot carry."""

from __future__ import annotations

import base64
import io
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import r3wire
from r3wire import DecodeError, EncodeError, R3WireError, formats
from r3wire.formats import FORMATS, ReadResult, detect, read, read_response, write
from r3wire.synthetic import synthetic_routes

SHAPE: dict[str, Any] = {"num_layers": 3, "top_k": 2}


def _needs(name: str) -> None:
    if FORMATS[name].extra == "zstd":
        pytest.importorskip("zstandard")


def _routes(num_experts: int = 128, rows: int = 6) -> np.ndarray[Any, Any]:
    return synthetic_routes(rows, layers=3, top_k=2, num_experts=num_experts, seed=num_experts)


# Which formats hold ids of each size: (largest id, formats that can carry it).
_WIDE = {"r3wire", "skyrl", "sglang", "vllm-npy", "nemo-rl", "prime-rl", "prime-rl-b85", "json-lists"}


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("num_experts", [8, 256, 384, 40_000, 100_000])
def test_round_trip_every_format(name: str, num_experts: int) -> None:
    _needs(name)
    routes = _routes(num_experts)
    high = int(routes.max())
    if high > 65535 and name not in _WIDE:
        with pytest.raises(EncodeError):
            write(routes, name)
        return
    result = read(write(routes, name), name, **SHAPE)
    assert result.format == name
    assert np.array_equal(result.routes, routes)
    assert result.routes.shape == routes.shape
    assert result.routes.flags.c_contiguous
    assert result.routes.flags.writeable


@pytest.mark.parametrize("name", list(FORMATS))
def test_auto_detects_what_each_writer_writes(name: str) -> None:
    _needs(name)
    payload = write(_routes(), name)
    assert detect(payload, **SHAPE) == name
    assert read(payload, **SHAPE).format == name


@pytest.mark.parametrize("source", list(FORMATS))
@pytest.mark.parametrize("target", list(FORMATS))
def test_cross_format_conversion_preserves_ids(source: str, target: str) -> None:
    _needs(source)
    _needs(target)
    routes = _routes(256)
    first = read(write(routes, source), source, **SHAPE)
    second = read(write(first, target), target, **SHAPE)
    assert np.array_equal(second.routes, routes)


@pytest.mark.parametrize("name", list(FORMATS))
def test_empty_round_trip(name: str) -> None:
    _needs(name)
    empty = np.zeros((0, 3, 2), dtype=np.int32)
    result = read(write(empty, name), name, **SHAPE)
    assert result.routes.shape == (0, 3, 2)


@pytest.mark.parametrize("name", list(FORMATS))
def test_writers_accept_any_byte_order_and_memory_order(name: str) -> None:
    _needs(name)
    routes = _routes()
    for variant in (routes.astype(">i4"), np.asfortranarray(routes), routes.astype(np.uint16)[::1], routes.tolist()):
        assert np.array_equal(read(write(variant, name), name, **SHAPE).routes, routes)


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 3), dtype=np.int32), np.zeros((1, 1, 1), dtype=np.float32), "text", np.array([[[0, -2]]])],
    ids=["2d", "float", "str", "negative"],
)
def test_writers_refuse_what_is_not_routes(name: str, bad: Any) -> None:
    with pytest.raises(EncodeError):
        write(bad, name)


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (np.zeros((2, 0, 2), dtype=np.int64), "routes.shape[1]"),
        (np.zeros((2, 2, 0), dtype=np.int64), "routes.shape[2]"),
        (np.zeros((0, 0, 0), dtype=np.int64), "routes.shape[1]"),
        (np.array([[[1, 2**64 - 1]]], dtype=np.uint64), "routes[0, 0, 1]"),
    ],
    ids=["no-layers", "no-slots", "empty", "beyond-int64"],
)
def test_writers_refuse_what_every_reader_refuses(name: str, bad: Any, field: str) -> None:
    with pytest.raises(EncodeError) as info:
        write(bad, name)
    assert info.value.field == field


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if not f.carries_start])
def test_formats_without_start_refuse_a_nonzero_start(name: str) -> None:
    with pytest.raises(EncodeError) as info:
        write(_routes(), name, start=3)
    assert info.value.field == "start"
    assert read(write(_routes(), name, start=0), name, **SHAPE).start is None


def test_prime_rl_carries_start_and_conversion_keeps_it() -> None:
    payload = write(_routes(), "prime-rl", start=41)
    assert isinstance(payload, dict)
    assert list(payload) == ["data", "shape", "start", "dtype"]
    result = read(payload)
    assert result.start == 41
    with pytest.raises(EncodeError):
        write(result, "vllm-npy")  # vLLM's .npy has no offset: refusing beats dropping it
    again = read(write(result, "prime-rl"))
    assert again.start == 41


def test_read_result_is_frozen() -> None:
    result = read(write(_routes(), "prime-rl"))
    with pytest.raises(AttributeError):
        result.start = 3  # type: ignore[misc]


# --- SGLang ---------------------------------------------------------------------------------------------------


def test_sglang_needs_the_shape() -> None:
    text = write(_routes(), "sglang")
    with pytest.raises(R3WireError, match="num_layers"):
        read(text, "sglang")
    with pytest.raises(DecodeError, match="num_layers and top_k"):
        read(text)


def test_sglang_dtype_variants() -> None:
    routes = _routes(256)
    bare = write(routes, "sglang")
    assert isinstance(bare, str)
    assert len(base64.b64decode(bare)) == routes.size * 4
    for dtype in ("uint8", "uint16", "int32"):
        fragment = write(routes, "sglang", dtype=dtype)
        assert isinstance(fragment, dict)
        assert fragment["routed_experts_dtype"] == dtype
        assert (
            base64.b64decode(fragment["routed_experts"]) == routes.astype(np.dtype(dtype).newbyteorder("<")).tobytes()
        )
        result = read(fragment, **SHAPE)
        assert result.routes.dtype == np.dtype(dtype)
        assert np.array_equal(result.routes, routes)
    fragment = write(routes, "sglang", dtype="uint8")
    assert isinstance(fragment, dict)
    uint8_text = fragment["routed_experts"]
    assert np.array_equal(read(uint8_text, "sglang", dtype="uint8", **SHAPE).routes, routes)
    with pytest.raises(DecodeError, match="routed_experts_dtype"):
        read({"routed_experts": uint8_text, "routed_experts_dtype": "uint8"}, "sglang", dtype="int32", **SHAPE)


def test_sglang_writer_refuses_a_dtype_too_narrow() -> None:
    # SGLang silently falls back to int32 here; r3wire says so instead.
    with pytest.raises(EncodeError, match="dtype"):
        write(_routes(384), "sglang", dtype="uint8")


# --- vLLM .npy ------------------------------------------------------------------------------------------------


def _npy(array: np.ndarray[Any, Any]) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def test_vllm_npy_is_what_np_load_reads() -> None:
    routes = _routes(384)
    text = write(routes, "vllm-npy")
    assert isinstance(text, str)
    loaded = np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)
    assert loaded.dtype == np.dtype("<u2")
    assert np.array_equal(loaded, routes)


def test_vllm_npy_dtype_rule() -> None:
    assert read(write(_routes(8), "vllm-npy")).routes.dtype == np.uint8
    assert read(write(_routes(8), "vllm-npy", num_experts=300)).routes.dtype == np.uint16
    assert read(write(_routes(100_000), "vllm-npy")).routes.dtype == np.int32
    assert read(write(_routes(8), "vllm-npy", dtype="int32")).routes.dtype == np.int32


def test_vllm_npy_reads_raw_bytes_and_a_choice() -> None:
    routes = _routes()
    raw = _npy(routes.astype(np.uint8))
    assert np.array_equal(read(raw).routes, routes)
    assert read(raw).format == "vllm-npy"
    choice = {"index": 0, "routed_experts": base64.b64encode(raw).decode(), "text": "hi"}
    assert np.array_equal(read(choice).routes, routes)


@pytest.mark.parametrize("descr", ["<u2", ">u2", "<i4", ">i4", "<u8", ">i8", "|u1", "|i1"])
def test_vllm_npy_byte_orders_come_back_native(descr: str) -> None:
    routes = _routes(100)
    result = read(base64.b64encode(_npy(routes.astype(descr))).decode())
    assert result.routes.dtype == np.dtype(descr).newbyteorder("=")
    assert np.array_equal(result.routes, routes)


def test_vllm_npy_fortran_order_comes_back_c_contiguous() -> None:
    routes = _routes()
    fortran = np.asfortranarray(routes.astype(np.uint8))
    assert b"'fortran_order': True" in _npy(fortran)
    result = read(base64.b64encode(_npy(fortran)).decode())
    assert result.routes.flags.c_contiguous
    assert np.array_equal(result.routes, routes)


def test_vllm_npy_max_elements_before_decoding() -> None:
    text = write(_routes(), "vllm-npy")
    with pytest.raises(DecodeError, match="max_elements=5"):
        read(text, max_elements=5)


def test_vllm_npy_never_unpickles(monkeypatch: pytest.MonkeyPatch) -> None:
    header = b"{'descr': '|O', 'fortran_order': False, 'shape': (1, 1, 1), }"
    header += b" " * ((-(10 + len(header) + 1)) % 64) + b"\n"
    payload = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\x80\x04N."
    import pickle

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("pickle was called")

    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "load", boom)
    with pytest.raises(DecodeError, match="pickle"):
        read(payload)


# --- NeMo-RL --------------------------------------------------------------------------------------------------


def test_nemo_rl_missing_routes_are_preserved() -> None:
    routes = _routes().astype(np.int16)
    routes[2, 1] = -1
    text = write(routes, "nemo-rl")
    result = read(text)
    assert result.routes[2, 1].tolist() == [-1, -1]
    assert np.array_equal(result.routes, routes)
    with pytest.raises(EncodeError):  # other formats have no sentinel
        write(result, "prime-rl")


def test_nemo_rl_refuses_a_partly_negative_row() -> None:
    routes = _routes().astype(np.int16)
    routes[0, 0, 1] = -1
    with pytest.raises(EncodeError, match="missing route"):
        write(routes, "nemo-rl")


def test_nemo_rl_dtype_rule() -> None:
    assert read(write(_routes(128), "nemo-rl")).routes.dtype == np.int8
    assert read(write(_routes(8), "nemo-rl", num_experts=129)).routes.dtype == np.int16
    assert read(write(_routes(40_000), "nemo-rl")).routes.dtype == np.int32
    assert write(np.zeros((0, 3, 2), dtype=np.int8), "nemo-rl") == "nrlre1:int8:0x3x2:"


def test_mask_becomes_missing_routes_in_nemo_rl() -> None:
    routes = _routes()
    mask = np.array([True, False, True, True, False, True])
    result = read(write(routes, "nemo-rl", mask=mask))
    assert (result.routes[~mask] == -1).all()
    assert np.array_equal(result.routes[mask], routes[mask])


_MASKED = ("nemo-rl", "fireworks-r3v1", "fireworks-trace", "fireworks-matrices")


@pytest.mark.parametrize("name", [n for n in FORMATS if n not in _MASKED])
def test_other_formats_refuse_a_partial_mask(name: str) -> None:
    mask = np.ones(6, dtype=bool)
    assert read(write(_routes(), name, mask=mask), name, **SHAPE).mask is None
    mask[3] = False
    with pytest.raises(EncodeError) as info:
        write(_routes(), name, mask=mask)
    assert info.value.field == "mask"


@pytest.mark.parametrize("name", [n for n in FORMATS if not n.startswith("fireworks")])
def test_other_formats_refuse_a_sequence_length_they_would_drop(name: str) -> None:
    routes = _routes()
    start = 2 if FORMATS[name].carries_start else 0
    end = start + len(routes)
    for total in (end, end + 1):  # nothing past the rows, or only the last token, which is never forwarded: kept
        written = write(routes, name, start=start, total_tokens=total)
        assert np.array_equal(read(written, name, **SHAPE).routes, routes)
    with pytest.raises(EncodeError, match=rf"^total_tokens must be None, start \+ rows = {end} or start \+ rows \+ 1"):
        write(routes, name, start=start, total_tokens=end + 2)


def test_mask_must_be_one_bool_per_row() -> None:
    with pytest.raises(EncodeError, match="mask"):
        write(_routes(), "nemo-rl", mask=np.ones(5, dtype=bool))
    with pytest.raises(EncodeError, match="mask"):
        write(_routes(), "nemo-rl", mask=np.ones(6, dtype=np.int8))


# --- prime-rl -------------------------------------------------------------------------------------------------


def test_prime_rl_dtype_rule_and_b85_detection() -> None:
    assert write(_routes(256), "prime-rl")["dtype"] == "uint8"
    assert write(_routes(384), "prime-rl")["dtype"] == "uint16"
    assert write(_routes(100_000), "prime-rl")["dtype"] == "int32"
    old = write(_routes(), "prime-rl-b85")
    assert set(old) == {"data", "shape"}
    assert detect(old) == "prime-rl-b85"
    legacy = write(_routes(), "prime-rl")
    del legacy["dtype"], legacy["start"]
    assert detect(legacy) == "prime-rl"
    uint16 = write(_routes(384), "prime-rl")
    del uint16["start"]
    assert detect(uint16) == "prime-rl"  # SkyRL has no uint16


# --- Fireworks ------------------------------------------------------------------------------------------------


def test_fireworks_modes_round_trip() -> None:
    pytest.importorskip("zstandard")
    routes = _routes(256)
    suffix = read(write(routes, "fireworks-r3v1", start=10, total_tokens=20), **SHAPE)
    assert (suffix.start, suffix.total_tokens, suffix.mask) == (10, 20, None)
    assert np.array_equal(suffix.routes, routes)
    mask = np.array([False, True, True, False, True, False])
    bitmap = read(write(routes, "fireworks-r3v1", mask=mask), **SHAPE)
    assert bitmap.mask is not None
    assert bitmap.mask.tolist() == mask.tolist()
    assert np.array_equal(bitmap.routes[mask], routes[mask])
    assert not bitmap.routes[~mask].any()
    mask_back = read(write(bitmap, "fireworks-r3v1"), **SHAPE).mask
    assert mask_back is not None
    assert np.array_equal(mask_back, mask)
    nemo = read(write(bitmap, "nemo-rl"))
    assert (nemo.routes[~mask] == -1).all()


def test_fireworks_writer_checks_its_header_fields() -> None:
    pytest.importorskip("zstandard")
    with pytest.raises(EncodeError, match="total_tokens"):
        write(_routes(), "fireworks-r3v1", start=2, total_tokens=3)
    with pytest.raises(EncodeError, match="total_tokens"):
        write(_routes(), "fireworks-r3v1", total_tokens=3)
    with pytest.raises(EncodeError, match="start"):
        write(_routes(), "fireworks-r3v1", start=1, mask=np.ones(6, dtype=bool))
    with pytest.raises(EncodeError, match="uint16"):
        write(_routes(100_000), "fireworks-r3v1")


@pytest.mark.parametrize("name", ["fireworks-r3v1", "fireworks-trace", "fireworks-matrices"])
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"start": 2**40}, "start"),  # fireworks-matrices: MemoryError from [None] * start
        ({"start": 2**32 - 1}, "start"),  # start + rows beyond the u32
        ({"start": 2**32 - 2}, "start"),  # start + rows + 1 tokens (the last row produced one more) beyond it
        ({"total_tokens": 2**32}, "total_tokens"),
        ({"start": 1, "total_tokens": 2**40}, "total_tokens"),
    ],
)
def test_fireworks_token_counts_are_u32_before_anything_is_built(name: str, kwargs: dict[str, Any], field: str) -> None:
    _needs(name)
    with pytest.raises(EncodeError) as info:
        write(np.zeros((1, 1, 1), dtype=np.int64), name, **kwargs)
    assert info.value.field == field


def test_fireworks_matrices_never_list_more_tokens_than_their_reader_takes() -> None:
    routes = np.zeros((1, 64, 64), dtype=np.uint8)
    most = (1 << 30) // (64 * 64)  # the reader's default max_elements over the elements per token
    payload = write(routes, "fireworks-matrices", start=most - 1)
    assert len(payload) == most
    # total_tokens counts the sequence's tokens: a list of most entries is a sequence of most + 1.
    assert len(write(routes, "fireworks-matrices", total_tokens=most + 1)) == most
    cases: list[tuple[dict[str, Any], str]] = [({"start": most}, "start"), ({"total_tokens": most + 2}, "total_tokens")]
    for kwargs, field in cases:
        with pytest.raises(EncodeError) as info:
            write(routes, "fireworks-matrices", **kwargs)
        assert info.value.field == field


def test_fireworks_matrices_hold_at_most_2_24_entries_even_at_one_element_per_token() -> None:
    from r3wire.formats._fireworks_trace import MAX_MATRIX_TOKENS

    routes = np.zeros((1, 1, 1), dtype=np.uint8)  # the element bound alone would allow a 2**30-entry list (8 GiB)
    with pytest.raises(EncodeError, match=rf"at most {MAX_MATRIX_TOKENS} list entries") as info:
        write(routes, "fireworks-matrices", start=MAX_MATRIX_TOKENS)
    assert info.value.field == "start"
    assert MAX_MATRIX_TOKENS == 2**24


def test_fireworks_refuses_a_frame_declaring_too_much() -> None:
    zstandard = pytest.importorskip("zstandard")
    from r3wire.formats import MAX_DECOMPRESSED_BYTES

    # A frame header claiming 2 GiB of content, and nothing behind it.
    size = MAX_DECOMPRESSED_BYTES * 2
    frame = b"\x28\xb5\x2f\xfd" + bytes([0xA0]) + struct.pack("<I", size)
    assert zstandard.frame_content_size(frame) == size
    with pytest.raises(DecodeError, match="at most"):
        read(base64.b64encode(frame).decode(), "fireworks-r3v1", **SHAPE)


def test_fireworks_header_claiming_huge_matrices_is_refused_before_inflating() -> None:
    zstandard = pytest.importorskip("zstandard")
    header = struct.pack("<4sBBBBIIIIQ", b"R3V1", 1, 0, 2, 1, 2**32 - 1, 2**32 - 1, 0, 0, (2**32 - 1) * 12)
    text = base64.b64encode(zstandard.ZstdCompressor().compress(header)).decode()
    with pytest.raises(DecodeError, match="at most"):
        read(text, "fireworks-r3v1", num_layers=3, top_k=2)
    with pytest.raises(DecodeError, match="max_elements"):
        read(text, "fireworks-r3v1", num_layers=3, top_k=2, max_elements=100)


def test_fireworks_without_zstandard_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "zstandard", None)  # makes `import zstandard` raise ImportError
    with pytest.raises(ImportError, match=r"r3wire\[zstd\]"):
        write(_routes(), "fireworks-r3v1")
    with pytest.raises(ImportError, match=r"r3wire\[zstd\]"):
        read("KLUv/SAEIQAAAAAA", "fireworks-r3v1", **SHAPE)


def _strided(raw: bytes) -> memoryview:
    return memoryview(bytes(x for c in raw for x in (c, 0)))[::2]


@pytest.mark.parametrize("name", ["vllm-npy", "sglang", "nemo-rl", "fireworks-r3v1", "raw-npy", "raw-zstd"])
def test_buffers_that_are_not_plain_bytes_are_decode_errors(name: str) -> None:
    fmt = {"raw-npy": "vllm-npy", "raw-zstd": "fireworks-r3v1"}.get(name, name)
    _needs(fmt)
    text = write(_routes(), fmt)
    assert isinstance(text, str)
    raw = base64.b64decode(text) if name.startswith("raw") else text.encode()
    wide = memoryview(raw[: len(raw) // 4 * 4]).cast("I")
    for view in (_strided(raw), wide, memoryview(raw).cast("B", (1, len(raw)))):
        for payload in (view, {"routed_experts": view}):
            for reader in (fmt, "auto"):
                with pytest.raises(DecodeError, match="memoryview"):
                    read(payload, reader, **SHAPE)
    # A 1-byte format other than "B" is the same bytes.
    assert np.array_equal(read(memoryview(bytearray(raw)).cast("b"), fmt, **SHAPE).routes, _routes())


# --- detection and arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [None, 3, [1, 2], {"foo": 1}, "", "AAAA", b"\x00\x01", '{"data": "AA=="}', "[1, 2]"],
)
def test_detect_says_when_it_cannot_tell(payload: Any) -> None:
    with pytest.raises(DecodeError):
        detect(payload)


@pytest.mark.parametrize("text", ["{}", "[1]", "[not json", " [[[0]]]", b"[[[0]]]"])
def test_json_text_in_a_routed_experts_string_is_refused_naming_the_field(text: str | bytes) -> None:
    for call in (detect, read):
        with pytest.raises(DecodeError) as info:
            call({"routed_experts": text})
        assert info.value.field == "routed_experts"
    with pytest.raises(DecodeError) as info:
        read_response({"choices": [{"routed_experts": text}]})
    assert info.value.field == "$.choices[0].routed_experts"


def test_detect_bare_base64_only_with_shape() -> None:
    assert detect("AAAAAA==", num_layers=1, top_k=1) == "sglang"
    assert detect({"routed_experts": "AAAAAA=="}, num_layers=1, top_k=1) == "sglang"
    with pytest.raises(DecodeError, match="top_k"):
        detect({"routed_experts": "AAAAAA=="})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"format": "npy"}, "format"),
        ({"format": np.array(["auto", "x"])}, "format"),
        ({"format": ["auto"]}, "format"),
        ({"num_layers": 0, "top_k": 1}, "num_layers"),
        ({"num_layers": 1, "top_k": True}, "top_k"),
        ({"dtype": "int128"}, "dtype"),
        ({"num_experts": 0}, "num_experts"),
        ({"max_elements": -1}, "max_elements"),
    ],
)
def test_bad_arguments_are_r3wire_errors(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(R3WireError) as info:
        read(write(_routes(), "prime-rl"), **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("name", list(FORMATS))
def test_num_experts_bounds_ids_on_read(name: str) -> None:
    _needs(name)
    routes = _routes(256)
    payload = write(routes, name)
    high = int(routes.max())
    assert np.array_equal(read(payload, name, num_experts=high + 1, **SHAPE).routes, routes)
    with pytest.raises(DecodeError, match="num_experts"):
        read(payload, name, num_experts=high, **SHAPE)


def test_caller_shape_must_match_the_payload() -> None:
    payload = write(_routes(), "vllm-npy")
    assert read(payload, num_layers=3, top_k=2).routes.shape == (6, 3, 2)
    with pytest.raises(DecodeError) as info:
        read(payload, num_layers=4, top_k=2)
    assert info.value.field == "shape"
    with pytest.raises(DecodeError, match="top_k=3"):
        read(payload, top_k=3)


def test_dtype_is_only_for_sglang() -> None:
    with pytest.raises(R3WireError) as info:
        read(write(_routes(), "prime-rl"), dtype="uint8")
    assert info.value.field == "dtype"


def test_unhashable_dtype_is_detected_without_crashing() -> None:
    with pytest.raises(DecodeError):
        read({"data": "AA==", "shape": [1, 1, 1], "dtype": ["uint8"]})


def test_formats_is_a_lazy_submodule_that_imports_no_optional_dependency() -> None:
    code = (
        "import sys, r3wire; assert 'r3wire.formats' not in sys.modules; "
        "r3wire.formats.read; assert 'zstandard' not in sys.modules and 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert r3wire.formats is formats
    assert isinstance(read(write(_routes(), "r3wire")), ReadResult)


def test_an_unknown_format_name_is_named_with_what_each_function_takes() -> None:
    routes = np.zeros((1, 1, 2), dtype=np.uint8)
    with pytest.raises(R3WireError) as info:
        write(routes, "auto")
    assert info.value.field == "format"
    assert "'auto'" not in (info.value.expected or "")  # a writer takes no 'auto'
    with pytest.raises(R3WireError) as info:
        read({"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8"}, "nope")
    assert (info.value.expected or "").startswith("'auto' or one of")


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_numpy_dtype_is_taken_as_its_name_by_every_writer(name: str) -> None:
    # np.dtype("uint8") passed the `in allowed` test (it equals "uint8") and then failed the name lookup with a
    # KeyError in 8 of the 11 writers (review 10a).
    if name.startswith("fireworks"):
        pytest.importorskip("zstandard")
    routes = np.array([[[0, 1], [2, 3]], [[3, 2], [1, 0]]], dtype=np.uint8)
    for given in ("uint8", "int32"):
        expected = _written_or_refused(lambda: write(routes, name, dtype=given))  # noqa: B023
        for form in (np.dtype(given), np.dtype(given).type):
            assert _written_or_refused(lambda: write(routes, name, dtype=form)) == expected  # noqa: B023


def _written_or_refused(call: Callable[[], object]) -> object:
    """What a call returns, or the message of the EncodeError it raises."""
    try:
        return call()
    except EncodeError as exc:
        return f"EncodeError: {exc}"


@pytest.mark.parametrize("bad", [5, np.array(["uint8", "uint8"]), np.void(b"\x01"), object(), b"uint8"])
def test_a_dtype_that_is_no_name_is_refused_naming_dtype(bad: Any) -> None:
    routes = np.zeros((2, 2, 2), dtype=np.uint8)
    for name in ("r3wire", "sglang", "prime-rl", "vllm-npy"):
        with pytest.raises(EncodeError) as caught:
            write(routes, name, dtype=bad)
        assert caught.value.field == "dtype"
    payload = write(routes, "sglang")
    with pytest.raises(R3WireError) as read_error:
        read(payload, "sglang", num_layers=2, top_k=2, dtype=bad)
    assert read_error.value.field == "dtype"
    assert read(payload, "sglang", num_layers=2, top_k=2, dtype=np.dtype("int32")).routes.shape == (2, 2, 2)


@pytest.mark.parametrize(
    ("num_layers", "top_k", "field"), [("x", 2, "num_layers"), (-1, 2, "num_layers"), (2, 0, "top_k")]
)
def test_detect_checks_the_shape_it_is_given_as_read_does(num_layers: Any, top_k: Any, field: str) -> None:
    # detect took any value here and named sglang, whose reader then refused the same arguments (review 10a).
    payload = write(np.zeros((1, 2, 2), np.uint8), "sglang")
    for call in (detect, read):
        with pytest.raises(R3WireError) as caught:
            call(payload, num_layers=num_layers, top_k=top_k)
        assert caught.value.field == field
    assert detect(payload, num_layers=2, top_k=2) == "sglang"


@pytest.mark.parametrize("name", [name for name in FORMATS if name.startswith("fireworks")])
def test_a_writers_dtype_error_names_the_format_asked_for(name: str) -> None:
    # The fireworks-trace writer wraps the r3/v1 writer, whose dtype error named fireworks-r3v1 (review 10a).
    pytest.importorskip("zstandard")
    with pytest.raises(EncodeError) as info:
        write(np.zeros((2, 2, 2), dtype=np.uint8), name, dtype="int32")
    assert info.value.field == "dtype"
    assert f"({name})" in str(info.value)


def test_prime_rl_b85_is_decoded_a_piece_at_a_time() -> None:
    # The stdlib base85 decoder makes an object per 5-character group before joining them: about 27 times the
    # text at once (review 11a: 498 MB RSS for a 15.7 MB payload). Decoded in pieces, the peak is the output plus
    # one piece's worth; a bad character is named at its place in the whole text.
    routes = np.random.default_rng(0).integers(0, 128, size=(100_000, 1, 1), dtype=np.int32)
    payload = write(routes, "prime-rl-b85")
    tracemalloc.start()
    try:
        result = read(payload, "prime-rl-b85")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(result.routes, routes)
    assert peak < 8 * 1024 * 1024  # 13.4 MB when the whole text was decoded at once
    text = payload["data"]
    bad = {**payload, "data": text[:-3] + "\x7f" + text[-2:]}
    with pytest.raises(DecodeError) as info:
        read(bad, "prime-rl-b85")
    assert info.value.field == "data"
    assert f"position {len(text) - 3}" in str(info.value)


def test_fireworks_writer_counts_the_token_the_last_row_produced() -> None:
    # r3/v1 counts start + rows + 1 tokens (the last row's position produced token start + rows): at the u32's
    # edge, one row from start 2**32 - 3 fits, from 2**32 - 2 it does not (it used to, one token late).
    pytest.importorskip("zstandard")
    one = np.zeros((1, 1, 1), dtype=np.uint8)
    written = read(write(one, "fireworks-r3v1", start=2**32 - 3), num_layers=1, top_k=1)
    assert (written.start, written.total_tokens) == (2**32 - 3, 2**32 - 1)
    with pytest.raises(EncodeError) as info:
        write(one, "fireworks-r3v1", start=2**32 - 2)
    assert info.value.field == "start"
    assert "start + rows + 1 is a u32" in str(info.value)
