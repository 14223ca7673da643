"""Whole engine responses (read_response), value-based detection at every level, and the formats added with them:
Fireworks' trace wrapper and per-token matrices, nested JSON lists, SGLang's -1 placeholders."""

from __future__ import annotations

import array
import base64
import contextlib
import io
import json
import mmap
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import orjson
import pytest

import r3wire
from r3wire import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
from r3wire.formats import MISSING_ROUTE, detect, read, read_response, write

T = TypeVar("T")
VECTORS = Path(__file__).parent / "vectors"


def _cases(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((VECTORS / name).read_text(encoding="utf-8"))["cases"]
    return cases


# response-fireworks-v2.json supersedes the engines file's fireworks-trace case (its rows read one token late).
FIREWORKS_V2: dict[str, Any] = json.loads((VECTORS / "response-fireworks-v2.json").read_text(encoding="utf-8"))
SUPERSEDED = {
    (file, name) for file, kinds in FIREWORKS_V2["supersedes"].items() for names in kinds.values() for name in names
}
ENGINES: list[dict[str, Any]] = [
    case for case in _cases("response-engines-v1.json") if ("response-engines-v1.json", case["name"]) not in SUPERSEDED
]
# Token ids and logprobs that must agree (formats.md, "Beside the routes"): cases with results read to them, cases
# with verdict "reject" raise DecodeError naming their field.
# response-fireworks-v1.json is read the same way: routes a reader does not read are refused, never taken as none;
# response-fireworks-v2.json: r3/v1 rows at the positions before the tokens they produced.
ALIGNMENT: list[dict[str, Any]] = [
    case
    for name in ("response-alignment-v1.json", "response-fireworks-v1.json", "response-fireworks-v2.json")
    for case in _cases(name)
]
READS = ENGINES + [c for c in ALIGNMENT if c.get("verdict") != "reject"]
REJECTS = [c for c in ALIGNMENT if c.get("verdict") == "reject"]


def _needs_zstd(case: dict[str, Any]) -> None:
    if case["name"].startswith("fireworks"):
        pytest.importorskip("zstandard")


@pytest.mark.parametrize("case", READS, ids=[c["name"] for c in READS])
@pytest.mark.parametrize("as_text", [False, True])
def test_engine_body_reads_to_its_results(case: dict[str, Any], as_text: bool) -> None:
    _needs_zstd(case)
    body = orjson.dumps(case["body"]) if as_text else case["body"]
    results = read_response(body, **case["read_args"])
    assert len(results) == len(case["results"])
    for result, want in zip(results, case["results"], strict=True):
        assert result.path == want["path"]
        assert result.format == want["format"]
        assert result.routes.dtype == np.dtype(want["dtype"])
        assert result.routes.tolist() == want["values"]
        assert result.start == want.get("start")
        assert result.total_tokens == want.get("total_tokens")
        assert result.num_experts == want.get("num_experts")
        assert (None if result.mask is None else result.mask.tolist()) == want.get("mask")
        assert (None if result.token_ids is None else result.token_ids.tolist()) == want["token_ids"]
        assert (None if result.logprobs is None else result.logprobs.tolist()) == want["logprobs"]
        assert result.num_clamped == want["num_clamped"]


@pytest.mark.parametrize("case", REJECTS, ids=[c["name"] for c in REJECTS])
@pytest.mark.parametrize("as_text", [False, True])
def test_misaligned_logprobs_are_refused_at_their_path(case: dict[str, Any], as_text: bool) -> None:
    _needs_zstd(case)
    body = orjson.dumps(case["body"]) if as_text else case["body"]
    with pytest.raises(DecodeError) as info:
        read_response(body, **case["read_args"])
    assert info.value.field == case["field"]
    assert str(info.value) == case["error"]


_NPY = ENGINES[0]["body"]["choices"][0]["routed_experts"]


@pytest.mark.parametrize(
    ("holder", "path"),
    [((), "routed_experts"), (("message",), "message.routed_experts"), (("sgl_ext",), "sgl_ext.routed_experts")],
)
def test_logprobs_one_per_token_id_wherever_the_routes_are(holder: tuple[str, ...], path: str) -> None:
    routes: dict[str, Any] = {"routed_experts": _NPY}
    for key in reversed(holder):
        routes = {key: routes}
    content = {"content": [{"logprob": -0.5}, {"logprob": -1.0}]}
    (ok,) = read_response({"choices": [{"token_ids": [7, 8], "logprobs": content, **routes}]})
    assert ok.path == f"$.choices[0].{path}"
    assert ok.token_ids is not None
    assert ok.logprobs is not None
    assert (ok.token_ids.tolist(), ok.logprobs.tolist()) == ([7, 8], [-0.5, -1.0])
    with pytest.raises(DecodeError) as info:
        read_response({"choices": [{"token_ids": [7, 8, 9], "logprobs": content, **routes}]})
    assert info.value.field == "$.choices[0].logprobs.content"
    assert info.value.expected == "one logprob per token id (3 at $.choices[0].token_ids)"
    assert info.value.got == "2 logprobs"


def test_dumps_logprobs_envelope_one_per_token_id() -> None:
    routes = np.zeros((2, 2, 2), dtype=np.uint8)
    ids = np.array([4, 5])
    ok = r3wire.dumps({"choices": [{"token_ids": ids, "routed_experts": routes, "logprobs": [-0.5, -1.0]}]})
    (result,) = read_response(ok)
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-0.5, -1.0]
    short = r3wire.dumps({"choices": [{"token_ids": ids, "routed_experts": routes, "logprobs": [-0.5]}]})
    with pytest.raises(DecodeError) as info:
        read_response(short)
    assert info.value.field == "$.choices[0].logprobs"
    assert info.value.got == "1 logprob"


def test_an_echo_returns_the_sampled_logprobs_and_counts_only_their_clamps() -> None:
    # vLLM completions, echo=true: token_logprobs cover prompt_token_ids, then token_ids (the first is null).
    logprobs = {"token_logprobs": [None, float("nan"), -1.0, None, -2.0]}
    choice = {"prompt_token_ids": [1, 2, 3], "token_ids": [4, 5], "logprobs": logprobs, "routed_experts": _NPY}
    (result,) = read_response({"choices": [choice]})
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-9999.0, -2.0]
    assert result.num_clamped == 1
    # Neither one per token id nor one per prompt and generated token: refused, naming both counts.
    choice["token_ids"] = [4]
    with pytest.raises(DecodeError) as info:
        read_response({"choices": [choice]})
    assert str(info.value) == (
        "$.choices[0].logprobs.token_logprobs must be one logprob per token id (1 at $.choices[0].token_ids, "
        "or 3 + 1 with the echoed prompt_token_ids), got 5 logprobs"
    )
    # A malformed prompt_token_ids beside a mismatch is itself the error, at its path.
    choice["prompt_token_ids"] = [1, -2]
    with pytest.raises(DecodeError) as bad:
        read_response({"choices": [choice]})
    assert bad.value.field == "$.choices[0].prompt_token_ids[1]"


def test_sglang_entries_name_the_token_id_they_pair_with() -> None:
    routes = write(np.zeros((2, 2, 2), dtype=np.int32), "sglang")

    def body(entries: list[Any]) -> dict[str, Any]:
        return {"output_ids": [7, 8], "meta_info": {"output_token_logprobs": entries, "routed_experts": routes}}

    (ok,) = read_response(body([[-0.5, 7, "a"], [-0.75, 8, "b"]]), num_layers=2, top_k=2)
    assert ok.logprobs is not None
    assert ok.logprobs.tolist() == [-0.5, -0.75]
    for bad_id in (9, True, 8.0, [8], None):
        entries = [[-0.5, 7, None], [-0.75, bad_id, None]]
        if bad_id is None:  # no token id: nothing to compare, still read
            assert read_response(body(entries), num_layers=2, top_k=2)[0].logprobs is not None
            continue
        with pytest.raises(DecodeError) as info:
            read_response(body(entries), num_layers=2, top_k=2)
        assert info.value.field == "$.meta_info.output_token_logprobs[1][1]"
        assert info.value.expected == "the token id at $.output_ids[1] (8)"
    # Without token ids beside them, the entries' ids have nothing to agree with.
    alone = {"meta_info": {"output_token_logprobs": [[-0.5, 99, None]], "routed_experts": routes}}
    assert read_response(alone, num_layers=2, top_k=2)[0].token_ids is None


def _vllm_body(routes: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "token_ids": [1, 2], "routed_experts": routes}]}


def test_malformed_routes_name_their_path() -> None:
    body = _vllm_body({"data": "AAAA", "shape": [1, 1, 2], "dtype": "uint8"})
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field is not None
    assert info.value.field.startswith("$.choices[0].routed_experts")
    assert str(info.value).startswith("$.choices[0].routed_experts")


def test_malformed_token_ids_and_logprobs_name_their_path() -> None:
    routes = write(np.zeros((1, 1, 1), dtype=np.uint8), "skyrl")
    body: dict[str, Any] = {"choices": [{"token_ids": [1, "x"], "routed_experts": routes}]}
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field == "$.choices[0].token_ids[1]"
    body = {"choices": [{"logprobs": {"content": [{"logprob": "high"}]}, "routed_experts": routes}]}
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field is not None
    assert info.value.field.startswith("$.choices[0].logprobs")


def test_sglang_routes_without_shape_say_where() -> None:
    body = {"meta_info": {"routed_experts": "AQAAAA=="}}
    with pytest.raises(R3WireError) as info:
        read_response(body)
    assert "$.meta_info" in str(info.value)


def test_no_routes_is_an_empty_list() -> None:
    assert read_response({"choices": [{"message": {"content": "hi"}}]}) == []
    assert read_response(b"[]") == []


@pytest.mark.parametrize("item", ['{"choices": []}', b'{"choices": []}', 7, None, [{"choices": []}]])
def test_a_batch_holds_parsed_bodies_only(item: Any) -> None:
    # A list of text bodies was walked as data and read as "no routes": [] with no word.
    routes = {"choices": [{"routed_experts": {"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8"}}]}
    (result,) = read_response([routes])
    assert result.path == "$[0].choices[0].routed_experts"
    for batch in ([routes, item], (routes, item)):
        with pytest.raises(DecodeError) as info:
            read_response(batch)
        assert info.value.field == "$[1]"
        assert "parse each text body" in str(info.value)
    with pytest.raises(DecodeError) as info:
        read_response(json.dumps([routes, item if not isinstance(item, bytes) else item.decode()]))
    assert info.value.field == "$[1]"


def test_non_json_body_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        read_response(b"{not json")


@pytest.mark.parametrize("body", [42, None, 1.5, True, object(), {1, 2}, b"null", "42", '"text"'])
def test_what_is_no_response_body_is_refused_not_read_as_no_routes(body: Any) -> None:
    with pytest.raises(DecodeError) as info:
        read_response(body)
    assert info.value.field == "$"


def test_any_bytes_like_text_and_tuple_containers_are_read() -> None:
    routes = write(np.zeros((1, 1, 1), dtype=np.uint8), "skyrl")
    text = orjson.dumps({"choices": [{"routed_experts": routes}]})
    with mmap.mmap(-1, len(text)) as mapped:
        mapped.write(text)
        for body in (np.frombuffer(text, dtype=np.uint8), mapped, array.array("B", text), memoryview(text)):
            assert [r.path for r in read_response(body)] == ["$.choices[0].routed_experts"]
    assert [r.path for r in read_response({"choices": ({"routed_experts": routes},)})] == [
        "$.choices[0].routed_experts"
    ]


def test_sibling_choices_never_share_token_ids() -> None:
    routes = write(np.zeros((1, 1, 1), dtype=np.uint8), "skyrl")
    body = {"choices": [{"token_ids": [5], "routed_experts": routes}, {"routed_experts": routes}]}
    first, second = read_response(body)
    assert first.token_ids is not None
    assert first.token_ids.tolist() == [5]
    assert second.token_ids is None


def test_completions_token_logprobs_are_clamped() -> None:
    routes = write(np.zeros((1, 1, 1), dtype=np.uint8), "skyrl")
    body = {"choices": [{"logprobs": {"token_logprobs": [None, -1.5]}, "routed_experts": routes}]}
    (result,) = read_response(body)
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-9999.0, -1.5]
    assert result.num_clamped == 1


# --- detection by the value at every level -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["skyrl", "prime-rl", "r3wire", "nemo-rl", "json-lists"])
def test_routed_experts_value_is_detected_by_itself(name: str) -> None:
    routes = np.array([[[1, 2]], [[3, 4]]], dtype=np.uint8)
    holder = {"index": 0, "routed_experts": write(routes, name)}
    assert read(holder).format == name
    assert read(holder, name).routes.tolist() == routes.tolist()
    assert read(orjson.dumps(holder)).format == name


def test_a_choice_or_body_is_refused_with_the_paths_inside() -> None:
    npy = write(np.zeros((1, 1, 1), dtype=np.uint8), "vllm-npy")
    for obj, path in (
        ({"index": 0, "message": {"routed_experts": "nrlre1:int16:0x1x1:"}}, "$.message.routed_experts"),
        ({"choices": [{"routed_experts": npy}]}, "$.choices[0].routed_experts"),
        ({"meta_info": {"routed_experts": "AAAA"}}, "$.meta_info.routed_experts"),
    ):
        with pytest.raises(DecodeError) as info:
            read(obj)
        assert path in str(info.value)
        assert "read_response" in str(info.value)


def test_a_null_routed_experts_says_so() -> None:
    with pytest.raises(DecodeError, match="null"):
        read({"routed_experts": None})


# --- SGLang placeholders -----------------------------------------------------------------------------------


def test_sglang_placeholders_round_trip_as_int32() -> None:
    routes = np.array([[[3, -1], [-1, -1]], [[0, 1], [2, 3]]], dtype=np.int32)
    text = write(routes, "sglang")
    assert isinstance(text, str)
    result = read(text, "sglang", num_layers=2, top_k=2)
    assert result.routes.tolist() == routes.tolist()
    assert result.route_mask().tolist() == (routes != MISSING_ROUTE).tolist()
    with pytest.raises(Exception, match="dtype"):
        write(routes, "sglang", dtype="uint16")


def test_route_mask_combines_row_mask_and_sentinels() -> None:
    result = read(
        write(np.ones((3, 1, 2), dtype=np.uint8), "fireworks-matrices", mask=np.array([1, 0, 1], bool)),
        num_layers=1,
        top_k=2,
    )
    assert result.route_mask()[:, 0, 0].tolist() == [True, False, True]


# --- Fireworks --------------------------------------------------------------------------------------------------


def _r3(mode: int, total: int, replayed: int, first: int, *, selector: bytes, matrix: bytes) -> bytes:
    header = struct.pack("<4sBBBBIIIIQ", b"R3V1", 1, mode, 1, 1, total, replayed, first, len(selector), len(matrix))
    return header + selector + matrix


def test_fireworks_zero_replayed_keeps_total_tokens() -> None:
    zstandard = pytest.importorskip("zstandard")
    text = base64.b64encode(zstandard.ZstdCompressor().compress(_r3(0, 10, 0, 0, selector=b"", matrix=b""))).decode()
    result = read(text, "fireworks-r3v1", num_layers=2, top_k=2)
    assert result.routes.shape == (0, 2, 2)
    assert result.total_tokens == 10
    # Written back as it was read: ALL with nothing replayed, the total kept (it was refused: "must be 0").
    again = write(result, "fireworks-r3v1")
    assert zstandard.ZstdDecompressor().decompress(base64.b64decode(again)) == _r3(
        0, 10, 0, 0, selector=b"", matrix=b""
    )
    with pytest.raises(EncodeError, match=r"total_tokens must be None or rows \+ 1 = 3"):
        write(np.zeros((2, 2, 2), np.uint8), "fireworks-r3v1", total_tokens=10)  # rows from 0 cover the sequence


def test_fireworks_reads_a_leading_skippable_frame() -> None:
    zstandard = pytest.importorskip("zstandard")
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    # ALL of 2 tokens: token 0's entry (9s) is skipped, token 1's is position 0's row.
    blob = _r3(0, 2, 2, 0, selector=b"", matrix=bytes([9, 9, 9, 9, 1, 2, 3, 4]))
    stream = skippable + zstandard.ZstdCompressor().compress(blob)
    for payload in (stream, base64.b64encode(stream).decode()):
        result = read(payload, num_layers=2, top_k=2)
        assert result.format == "fireworks-r3v1"
        assert result.routes.tolist() == [[[1, 2], [3, 4]]]


def test_fireworks_selector_in_all_mode_is_skipped_not_held() -> None:
    zstandard = pytest.importorskip("zstandard")
    # 64 MiB of meaningless selector bytes compress to a few KB; reading must not keep them.
    raw = _r3(0, 2, 2, 0, selector=bytes(64 << 20), matrix=bytes([9, 9, 9, 9, 1, 2, 3, 4]))
    text = base64.b64encode(zstandard.ZstdCompressor().compress(raw)).decode()
    assert len(text) < 10_000
    assert read(text, "fireworks-r3v1", num_layers=2, top_k=2).routes.tolist() == [[[1, 2], [3, 4]]]


def test_fireworks_bitmap_header_claims_checked_before_allocation() -> None:
    zstandard = pytest.importorskip("zstandard")
    total = 1 << 24
    raw = _r3(2, total, 0, 0, selector=bytes(total // 8), matrix=b"")
    text = base64.b64encode(zstandard.ZstdCompressor().compress(raw)).decode()
    with pytest.raises(DecodeError) as info:
        read(text, "fireworks-r3v1", num_layers=48, top_k=8, max_elements=1 << 29)
    assert info.value.field == "shape"


def test_fireworks_trace_round_trip_keeps_suffix_and_mask() -> None:
    pytest.importorskip("zstandard")
    routes = np.arange(12, dtype=np.uint8).reshape(3, 2, 2)
    suffix = read(write(routes, "fireworks-trace", start=4, total_tokens=9), num_layers=2, top_k=2)
    assert (suffix.format, suffix.start, suffix.total_tokens) == ("fireworks-trace", 4, 9)
    mask = np.array([True, False, True])
    bitmap = read(write(routes, "fireworks-trace", mask=mask), num_layers=2, top_k=2)
    assert bitmap.mask is not None
    assert bitmap.mask.tolist() == mask.tolist()
    with pytest.raises(UnsupportedVersionError):
        read(
            {"manifest": {"PayloadVersion": "r3/v9", "Compression": "zstd"}, "data": "KLUv/Q=="}, num_layers=2, top_k=2
        )


def test_fireworks_matrices_write_a_suffix_as_leading_nulls() -> None:
    routes = np.arange(8, dtype=np.uint8).reshape(2, 2, 2)
    # total_tokens counts the sequence's tokens, as in r3/v1: one entry per position but the last token's.
    out = write(routes, "fireworks-matrices", start=2, total_tokens=6)
    assert [entry is None for entry in out] == [True, True, False, False, True]
    assert len(write(routes, "fireworks-matrices", start=2)) == 4
    with pytest.raises(EncodeError, match=r"total_tokens must be at least start \+ rows \+ 1 = 5"):
        write(routes, "fireworks-matrices", start=2, total_tokens=4)
    back = read(out, num_layers=2, top_k=2)
    assert back.mask is not None
    assert back.routes[back.mask].tolist() == routes.tolist()


# --- nested lists and .npy aliasing -------------------------------------------------------------------------------


def test_json_lists_from_text_and_size_first() -> None:
    assert read(b"[[[1, 2]], [[3, 4]]]").routes.tolist() == [[[1, 2]], [[3, 4]]]
    with pytest.raises(DecodeError) as info:
        read([[[1, 2]], [[3, 4]]], "json-lists", max_elements=3)
    assert info.value.field == "shape"
    empty = read([], "json-lists", num_layers=2, top_k=3)
    assert empty.routes.shape == (0, 2, 3)


@pytest.mark.parametrize("dtype", ["foo", "uint8", "int32", "int64"])
def test_json_lists_refuses_a_dtype(dtype: str) -> None:
    # JSON integers carry no element type: a requested one (even a fitting one) would be a promise nothing keeps,
    # and a too narrow one (id 300 as uint8) must not pass as checked.
    routes = np.array([[[300, 0]]], np.int32)
    with pytest.raises(EncodeError) as info:
        write(routes, "json-lists", dtype=dtype)
    assert info.value.field == "dtype"
    assert str(info.value) == (
        f"dtype must be None (json-lists carries no dtype; num_experts bounds the ids), got {dtype!r}"
    )
    assert write(routes, "json-lists") == [[[300, 0]]]
    with pytest.raises(EncodeError, match="num_experts"):
        write(routes, "json-lists", num_experts=256)


def test_npy_from_a_bytearray_never_aliases_it() -> None:
    out = io.BytesIO()
    np.save(out, np.arange(8, dtype=np.uint8).reshape(2, 2, 2))
    buffer = bytearray(out.getvalue())
    result = read(buffer)
    buffer[-8:] = bytes(8)
    assert result.routes.tolist() == np.arange(8).reshape(2, 2, 2).tolist()
    assert result.routes.flags.writeable


# --- limits shared with the core (issue 11): these run once the core's bounds are merged ----------------------

CORE_BOUNDS = hasattr(r3wire, "DEFAULT_MAX_ELEMENTS")
needs_core_bounds = pytest.mark.skipif(
    not CORE_BOUNDS, reason="needs the core's per-dimension bound and default max_elements (issue 11.1, 11.2)"
)
HUGE = 2**62


@needs_core_bounds
@pytest.mark.parametrize(
    ("payload", "name"),
    [
        ({"data": "", "shape": [HUGE, 0, HUGE], "start": 0, "dtype": "uint8"}, "prime-rl"),
        ({"data": "", "shape": [HUGE, 0, HUGE]}, "prime-rl-b85"),
        ({"data": "", "shape": [HUGE, 0, 2], "dtype": "uint8"}, "skyrl"),
        (f"nrlre1:int16:{HUGE}x0x{HUGE}:", "nemo-rl"),
    ],
)
def test_zero_element_overflowing_shapes_are_decode_errors(payload: Any, name: str) -> None:
    with pytest.raises(DecodeError):
        read(payload, name)


@needs_core_bounds
def test_fireworks_bitmap_claims_meet_the_default_cap() -> None:
    zstandard = pytest.importorskip("zstandard")
    total = 1 << 24
    raw = _r3(2, total, 0, 0, selector=bytes(total // 8), matrix=b"")
    text = base64.b64encode(zstandard.ZstdCompressor().compress(raw)).decode()
    assert len(text) < 4096
    with pytest.raises(DecodeError):
        read(text, "fireworks-r3v1", num_layers=48, top_k=8)  # 6 GiB claimed, no max_elements given


def test_an_r3wire_dumps_body_reads_with_its_side_channels() -> None:
    routes = np.array([[[1, 2]], [[3, 4]]], dtype=np.uint8)
    body = r3wire.dumps(
        {
            "choices": [
                {
                    "token_ids": np.array([7, 8], dtype=np.int32),
                    # Finite: dumps will refuse a NaN under "logprobs" (issue 12.6); either envelope kind reads.
                    "logprobs": np.array([-0.5, -1.5], dtype=np.float32),
                    "routed_experts": routes,
                }
            ]
        },
        num_experts=16,
    )
    (result,) = read_response(body)
    assert (result.path, result.format, result.num_experts) == ("$.choices[0].routed_experts", "r3wire", 16)
    assert result.routes.tolist() == routes.tolist()
    assert result.token_ids is not None
    assert result.token_ids.tolist() == [7, 8]
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-0.5, -1.5]
    assert result.num_clamped == 0


def test_dynamo_with_an_sglang_backend_forwards_the_bare_string() -> None:
    # dynamo copies meta_info["routed_experts"] into nvext without routed_experts_dtype: int32 on the wire.
    routes = np.array([[[3, -1], [4, 5]]], dtype=np.int32)
    body = {
        "choices": [{"index": 0, "message": {"content": "a"}}],
        "nvext": {"routed_experts": write(routes, "sglang")},
    }
    (result,) = read_response(body, num_layers=2, top_k=2)
    assert (result.path, result.format) == ("$.nvext.routed_experts", "sglang")
    assert result.routes.tolist() == routes.tolist()


@pytest.mark.parametrize("name", ["fireworks-trace", "fireworks-matrices", "json-lists"])
def test_new_formats_read_their_json_text(name: str) -> None:
    if name == "fireworks-trace":
        pytest.importorskip("zstandard")
    routes = np.arange(8, dtype=np.uint8).reshape(2, 2, 2)
    text = orjson.dumps(write(routes, name))
    for payload in (text, text.decode()):
        assert read(payload, name, num_layers=2, top_k=2).routes.tolist() == routes.tolist()
        assert read(payload, num_layers=2, top_k=2).format == name


def test_a_deep_and_wide_body_costs_memory_linear_in_its_size() -> None:
    # 1000 nested objects around 30,000 empty ones (93 KiB of JSON): the walk copied each container's path, and its
    # context, per container: 241 MB (795 MB at 100,000), where loads takes 10 MB.
    text = b'{"a":' * 1000 + b"[" + b",".join([b"{}"] * 30_000) + b"]" + b"}" * 1000
    body = orjson.loads(text)
    for call in (lambda: read_response(text), lambda: read_response(body), lambda: detect(body), lambda: read(body)):
        tracemalloc.start()
        try:
            with contextlib.suppress(R3WireError):  # detect and read refuse a body that holds no routes
                call()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 40 * len(text) + (8 << 20)  # parsing is ~10 MiB of it; the walk adds little
    # The paths returned and named are still written out in full.
    deep = {"a": body["a"]}
    node = deep
    for _ in range(50):
        node["b"] = {}
        node = node["b"]
    node["routed_experts"] = {"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8"}
    (result,) = read_response(deep)
    assert result.path == "$" + ".b" * 50 + ".routed_experts"


def _traced(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and its tracemalloc peak (NumPy's buffers included)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


LOGPROB_TOKENS = 200_000


def test_list_form_logprobs_cost_memory_linear_in_the_output() -> None:
    # Logprobs as a list, token_logprobs or SGLang entries are read straight into the float64 result: a dict per
    # token (reading them as the content form) peaked at 218 MB for a million tokens, 27 times the result's 8 MB.
    tokens = LOGPROB_TOKENS
    values: list[float | None] = (-np.random.default_rng(0).exponential(1.5, tokens)).tolist()
    values[::1000] = [None] * len(values[::1000])
    output = 8 * tokens  # the float64 result
    bound = 4 * output  # the list of entries' logprobs beside the result, the finite mask, with room to spare
    routes = [[[1, 2]]]
    bodies = {
        "list": {"choices": [{"routed_experts": routes, "logprobs": values}]},
        "token_logprobs": {"choices": [{"routed_experts": routes, "logprobs": {"token_logprobs": values}}]},
        "sglang": {"meta_info": {"routed_experts": routes, "output_token_logprobs": [[x, 7, "a"] for x in values]}},
        # In process, SGLang's entries may be tuples (its own Python objects, before they are serialized).
        "sglang tuples": {"meta_info": {"routed_experts": routes, "output_token_logprobs": [(x, 7) for x in values]}},
    }
    for name, body in bodies.items():
        (result,), peak = _traced(lambda: read_response(body))  # noqa: B023  # called before the loop moves on
        assert result.logprobs is not None
        assert result.logprobs.shape == (tokens,)
        assert result.num_clamped == tokens // 1000
        assert peak < bound, (name, peak, bound)
    # The bound tells the two apart: a dict per token, as the list forms were read before, is far above it.
    _, peak = _traced(lambda: r3wire.read_logprobs_content({"content": [{"logprob": x} for x in values]}))
    assert peak > 4 * bound


def test_dtype_reads_sglang_strings_that_do_not_carry_it() -> None:
    # SGLang's OpenAI endpoints (sgl_ext) and dynamo (nvext) do not forward routed_experts_dtype: a uint8 server's
    # string read as int32 gave ids like 252446213, and the body could not be read whole at all.
    ids = np.arange(16, dtype=np.uint8).reshape(2, 4, 2)
    text = base64.b64encode(ids.tobytes()).decode()
    skyrl = write(ids, "skyrl")
    body = {"choices": [{"sgl_ext": {"routed_experts": text}}, {"routed_experts": skyrl}], "nvext": {}}
    first, second = read_response(body, num_layers=4, top_k=2, dtype="uint8")
    assert first.format == "sglang"
    assert first.routes.dtype == np.uint8
    assert np.array_equal(first.routes, ids)
    assert second.format == "skyrl"  # carries its own dtype: dtype= is for SGLang strings only
    assert np.array_equal(second.routes, ids)
    (as_int32,) = read_response({"nvext": {"routed_experts": text}}, num_layers=4, top_k=1)  # SGLang's int32
    assert as_int32.routes.dtype == np.int32
    # A body that says its dtype must agree with the caller's.
    said = {"meta_info": {"routed_experts": text, "routed_experts_dtype": "uint16"}}
    with pytest.raises(DecodeError) as contradicted:
        read_response(said, num_layers=4, top_k=2, dtype="uint8")
    assert contradicted.value.field == "$.meta_info.routed_experts_dtype"
    for bad in ("int64", 8, b"uint8"):
        with pytest.raises(R3WireError) as info:
            read_response(body, num_layers=4, top_k=2, dtype=bad)  # type: ignore[arg-type]
        assert info.value.field == "dtype"
        assert not isinstance(info.value, DecodeError)


def test_results_carry_their_path_as_parts_to_pair_them_with_choices() -> None:
    # Choices whose routes are null have no result, so zip(results, choices) pairs the wrong ones.
    routes = write(np.zeros((1, 1, 2), dtype=np.uint8), "skyrl")
    body = {"choices": [{"index": 0, "routed_experts": None}, {"index": 1, "routed_experts": routes}]}
    (result,) = read_response(body)
    assert result.parts == ("choices", 1, "routed_experts")
    assert body["choices"][result.parts[1]]["index"] == 1  # type: ignore[index]
    assert read(routes).parts == ()


R3 = np.zeros((3, 2, 2), np.uint8)
R3[..., 1] = 1


@pytest.mark.parametrize("encode", [r3wire.encode_logprobs, r3wire.encode_array])
@pytest.mark.parametrize("logprobs", [np.array(-0.5), -np.ones((4, 5)), -np.ones((4, 1)), -np.ones((2, 2, 1))])
def test_logprobs_envelopes_must_be_one_per_token(encode: Any, logprobs: np.ndarray[Any, Any]) -> None:
    # A 0-d value leaked IndexError; a [tokens, k] array passed "one logprob per token id" by its first axis.
    for beside in ({"token_ids": list(range(4))}, {}):
        body = {"choices": [{"routed_experts": R3.tolist(), "logprobs": encode(logprobs), **beside}]}
        with pytest.raises(DecodeError) as info:
            read_response(body)
        assert info.value.field == "$.choices[0].logprobs"
        assert str(info.value) == (
            "$.choices[0].logprobs must be a 1-d array of sampled logprobs (one per token), "
            f"got shape {list(logprobs.shape)}"
        )


def test_a_zero_d_logprobs_envelope_is_an_error_on_the_command_line(tmp_path: Path) -> None:
    from r3wire.cli import main

    path = tmp_path / "zero_d.json"
    path.write_bytes(r3wire.dumps({"choices": [{"routed_experts": R3, "logprobs": np.array(-0.5)}]}))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["inspect", str(path)]) == 2
    assert "must be a 1-d array of sampled logprobs" in err.getvalue()
    assert "internal error" not in err.getvalue()


def test_tuples_are_read_where_lists_are_for_token_ids_and_logprobs() -> None:
    # An in-process document may build its arrays as tuples (the walker enters them, dumps writes them as lists).
    values = [-1.0, None, -0.5, 2]
    for logprobs in (values, {"token_logprobs": values}):
        as_lists = {"choices": [{"routed_experts": R3.tolist(), "token_ids": [1, 2, 3, 4], "logprobs": logprobs}]}
        tupled = {
            "choices": (
                {
                    "routed_experts": R3.tolist(),
                    "token_ids": (1, 2, 3, 4),
                    "logprobs": tuple(values) if isinstance(logprobs, list) else {"token_logprobs": tuple(values)},
                },
            )
        }
        (want,) = read_response(as_lists)
        (got,) = read_response(tupled)
        assert got.token_ids is not None
        assert got.logprobs is not None
        assert got.token_ids.tolist() == [1, 2, 3, 4]
        assert got.logprobs.tolist() == [-1.0, -9999.0, -0.5, 2.0]
        assert got.num_clamped == want.num_clamped == 1
    sglang = {
        "output_ids": (5, 6),
        "meta_info": {
            "routed_experts": write(R3[:1], "sglang"),
            "output_token_logprobs": ((-1.0, 5, "a"), (None, 6, "b")),
        },
    }
    (result,) = read_response(sglang, num_layers=2, top_k=2)
    assert result.logprobs is not None
    assert result.logprobs.tolist() == [-1.0, -9999.0]
    # A routes value is read by its format: nested lists must be lists (refused, never misread, as a tuple).
    with pytest.raises(DecodeError, match="got tuple"):
        read_response({"choices": [{"routed_experts": tuple(map(tuple, R3[0].tolist()))}]})


LIST_VALUES = [
    [-0.5, None, float("nan"), float("inf"), -float("inf"), 0.0, -0.0],
    [np.float32(-0.25), np.float16(-1.5), np.float64(-2.0), 3, np.int64(-4), 2**53, None],
    [],
]
BAD_VALUES = [True, np.bool_(False), "x", 2**53 + 1, np.int64(2**62 + 1), [1.0], {"logprob": 1.0}, np.longdouble(1)]


@pytest.mark.parametrize("values", LIST_VALUES)
def test_logprob_lists_read_as_their_content_form(values: list[Any]) -> None:
    # A list and SGLang entries are read straight into a float array (no dict per token): the same values, count
    # and floor as the content form's reader.
    content = r3wire.read_logprobs_content({"content": [{"logprob": x} for x in values]})
    ids = {"token_ids": list(range(len(values)))}
    forms = [
        {"choices": [{"routed_experts": R3.tolist(), **ids, "logprobs": values}]},
        {"choices": [{"routed_experts": R3.tolist(), **ids, "logprobs": {"token_logprobs": values}}]},
        {
            "output_ids": ids["token_ids"],
            "meta_info": {"routed_experts": write(R3, "sglang"), "output_token_logprobs": [[x] for x in values]},
        },
    ]
    for body in forms:
        (result,) = read_response(body, num_layers=2, top_k=2)
        assert result.logprobs is not None
        assert result.logprobs.dtype == np.float64
        assert result.logprobs.tobytes() == content.values.tobytes()
        assert result.num_clamped == content.num_clamped


@pytest.mark.parametrize("bad", BAD_VALUES, ids=repr)
def test_logprob_lists_refuse_what_the_content_form_refuses(bad: Any) -> None:
    # One reader of a value (r3wire.logprobs.logprob_value) for every form: the same refusal, in the same words.
    values = [-0.5, None, bad, -1.0]
    with pytest.raises(DecodeError) as content:
        r3wire.read_logprobs_content({"content": [{"logprob": x} for x in values]})
    assert content.value.field == "content[2].logprob"
    exact = isinstance(bad, (int, np.integer)) and not isinstance(bad, (bool, np.bool_))
    assert content.value.expected == ("a number exactly representable as a float64" if exact else "a number or null")
    entries = [[x, i + 1] for i, x in enumerate(values)]
    sglang = {
        "output_ids": [1, 2, 3, 4],
        "meta_info": {"routed_experts": write(R3, "sglang"), "output_token_logprobs": entries},
    }
    forms = [
        ({"choices": [{"routed_experts": R3.tolist(), "logprobs": values}]}, "$.choices[0].logprobs[2]"),
        (
            {"choices": [{"routed_experts": R3.tolist(), "logprobs": {"token_logprobs": values}}]},
            "$.choices[0].logprobs.token_logprobs[2]",
        ),
        (sglang, "$.meta_info.output_token_logprobs[2][0]"),
    ]
    for body, field in forms:
        with pytest.raises(DecodeError) as listed:
            read_response(body, num_layers=2, top_k=2)
        assert listed.value.field == field
        assert (listed.value.expected, listed.value.got) == (content.value.expected, content.value.got)
        assert str(listed.value) == f"{field} must be {content.value.expected}, got {content.value.got}"


def test_float16_logprobs_are_clamped_to_the_float16_value_nearest_the_floor() -> None:
    # An older dumps body wrote logprobs as r3wire.array, float16 included: -9999.0 is no float16 value.
    body = {"choices": [{"routed_experts": R3, "logprobs": np.array([np.nan, -0.5, -np.inf], np.float16)}]}
    (result,) = read_response(r3wire.dumps(body, logprobs_keys=()))
    assert result.logprobs is not None
    assert result.logprobs.dtype == np.float16
    assert result.logprobs.tolist() == [-10000.0, -0.5, -10000.0]
    assert result.num_clamped == 2


def _sglang_body(rows: int, layers: int, top_k: int, **counts: object) -> dict[str, Any]:
    ids = (np.arange(rows * layers * top_k, dtype=np.int32) % 7).reshape(rows, layers, top_k)
    meta = {"routed_experts": base64.b64encode(ids.tobytes()).decode(), **counts}
    return {"output_ids": [5, 6, 7], "meta_info": meta}


def test_sglang_rows_are_held_to_the_token_counts_meta_info_states() -> None:
    # 4 prompt + 3 completion tokens: SGLang sends 6 rows from position 0, fewer from a routed_experts_start_len.
    for rows in (6, 2, 0):
        body = _sglang_body(rows, 2, 2, prompt_tokens=4, completion_tokens=3)
        (result,) = read_response(body, num_layers=2, top_k=2)
        assert result.routes.shape == (rows, 2, 2)
    # The same bytes read with a pair of half the product divide evenly into 12 rows: more than the call has.
    body = _sglang_body(6, 2, 2, prompt_tokens=4, completion_tokens=3)
    for layers, top_k in ((1, 2), (2, 1)):
        with pytest.raises(DecodeError) as info:
            read_response(body, num_layers=layers, top_k=top_k)
        assert info.value.field == "$.meta_info.routed_experts"
        assert "<= 7 tokens (4 at $.meta_info.prompt_tokens + 3 at $.meta_info.completion_tokens" in str(info.value)
        assert str(info.value).endswith("got 12 rows")


@pytest.mark.parametrize(
    "counts",
    [{}, {"prompt_tokens": 4}, {"prompt_tokens": True, "completion_tokens": 3}, {"prompt_tokens": "4",
     "completion_tokens": 3}, {"prompt_tokens": -1, "completion_tokens": 3}, {"prompt_tokens": 4.0,
     "completion_tokens": 3}],
)  # fmt: skip
def test_sglang_rows_are_not_bounded_without_two_integer_counts(counts: dict[str, object]) -> None:
    # Not r3wire's fields to validate: without both as non-negative integers there is no bound (the limit).
    (result,) = read_response(_sglang_body(6, 2, 2, **counts), num_layers=1, top_k=2)
    assert result.routes.shape == (12, 1, 2)
