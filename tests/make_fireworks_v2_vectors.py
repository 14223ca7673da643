"""Write the Fireworks r3/v1 v2 vector files from first principles.

    python tests/make_fireworks_v2_vectors.py            # refuse to overwrite: published vectors are never edited
    python tests/make_fireworks_v2_vectors.py --check    # regenerate in memory and compare with the files

The v1 files read an r3/v1 payload as "matrix of token i = routing at position i". Fireworks' own tools index the
matrices by the token they produced: token t's matrix is the routing of the forward pass that sampled token t, which
ran at position t - 1, and token 0's entry is produced by no forward pass. The v2 files state that reading: row p of
a result is the matrix the payload gives token p + 1. Payloads are the v1 files' own bytes where a case is re-read,
else hand-built with ``struct`` into raw (stored) zstd blocks (RFC 8878) and ``base64``; nothing here imports
r3wire, so a bug in its reader cannot leak into its own reference data.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).parent / "vectors"
HEADER = struct.Struct("<4sBBBBIIIIQ")
ALL, SUFFIX, BITMAP = 0, 1, 2
SHAPE = {"num_layers": 2, "top_k": 2}
TRACE_MANIFEST = {"PayloadVersion": "r3/v1", "Compression": "zstd"}
SDK = (
    "fw-ai-external/python-sdk src/fireworks/training/sdk/deployment.py @04f221ac1999fb1a534ded0907876933f27e82ff "
    "(sample_with_tokens: with echo, logprobs/routing have P+C entries; 'shift logprobs/routing by 1 (drop the "
    "unconditional first-token entry) to get P+C-1 training-aligned entries'; without echo one per completion token)"
)
COOKBOOK = (
    "fw-ai/cookbook training/utils/rl/router_replay.py @0ae69ef4e1a5ee90c4d53a1d98e0ab4f537d09c9 "
    "(build_r3_routing_matrices: a completion-only list padded with prompt_len - 1 blanks: completion token j's "
    "matrix at input position P - 1 + j)"
)
DESERIALIZER = (
    "eval-protocol/python-sdk eval_protocol/adapters/r3_deserializer.py @3393c04753e5e01023b2044babd698ee0ba1b927 "
    "(decompress_and_parse_r3: total_token_count entries, 'the same List[Optional[str]] format used by the direct "
    "inference path (DeploymentSampler.sample_with_tokens())')"
)
ROUND_TRIP = (
    "eval-protocol/python-sdk tests/adapters/test_r3_deserializer.py @3393c04753e5e01023b2044babd698ee0ba1b927 "
    "(TestRoundTrip: None for the 4 prompt tokens, a matrix for each completion token at its own token index)"
)
SOURCES = [SDK, COOKBOOK, DESERIALIZER, ROUND_TRIP, "RFC 8878 (zstd frame format)"]
SUPERSEDED_NOTE = (
    "The v1 file read the same payloads one token late (matrix of token i at position i, a row on the last sampled "
    "token, which no engine forwards); its valid cases listed in 'supersedes' are superseded by these."
)


def _raw_frame(content: bytes) -> bytes:
    """One zstd frame holding ``content`` as a single raw block, its size recorded (single segment)."""
    assert len(content) < 256, "the 1-byte Frame_Content_Size field"
    header = bytes([0x20, len(content)])
    block = ((len(content) << 3) | 1).to_bytes(3, "little")  # Last_Block = 1, Block_Type = 0 (raw)
    return b"\x28\xb5\x2f\xfd" + header + block + content


def _r3(mode: int, total: int, first: int, matrices: list[list[list[int]]], *, bits: tuple[int, ...] = ()) -> bytes:
    """The decompressed r3/v1 blob: uint8 matrices, one per replayed token, in token order."""
    selector = b""
    if mode == BITMAP:
        packed = bytearray(-(-total // 8))
        for bit in bits:
            packed[bit >> 3] |= 1 << (bit & 7)
        selector = bytes(packed)
    body = bytes(v for matrix in matrices for layer in matrix for v in layer)
    return HEADER.pack(b"R3V1", 1, mode, 1, 1, total, len(matrices), first, len(selector), len(body)) + selector + body


def _text(blob: bytes) -> str:
    return base64.b64encode(_raw_frame(blob)).decode("ascii")


def _v1(name: str, kind: str, case: str) -> dict[str, Any]:
    doc = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    found: dict[str, Any] = next(c for c in doc[kind] if c["name"] == case)
    return found


def _zeros() -> list[list[int]]:
    return [[0, 0], [0, 0]]


M = [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]], [[13, 14], [15, 0]]]


def r3v1_doc() -> dict[str, Any]:
    v1 = "formats-fireworks-r3v1-v1.json"
    all16, suffix, bitmap = (
        _v1(v1, "valid", "all-uint16"),
        _v1(v1, "valid", "suffix-uint8"),
        _v1(v1, "valid", "bitmap-uint8"),
    )
    no_size, frames = _v1(v1, "valid", "no-content-size"), _v1(v1, "valid", "two-frames")
    gateway = _r3(SUFFIX, 7, 4, M[:3])
    gateway_bits = _r3(BITMAP, 7, 0, M[:3], bits=(4, 5, 6))
    written_from_zero = _r3(SUFFIX, 3, 1, M[:2])
    valid: list[dict[str, Any]] = [
        {
            "name": "all-uint16",
            "payload": all16["payload"],
            "read_args": SHAPE,
            "values": [[[4, 5], [65535, 0]]],
            "dtype": "uint16",
            "shape": [1, 2, 2],
            "total_tokens": 2,
            "note": "ALL of 2 tokens: token 1's matrix is position 0's row; token 0's entry (no forward pass produced "
            "token 0) is skipped. The writer cannot reproduce ALL (it never has token 0's entry): no write_args",
        },
        {
            "name": "suffix-uint8",
            "payload": suffix["payload"],
            "read_args": SHAPE,
            "values": suffix["values"],
            "dtype": "uint8",
            "shape": [2, 2, 2],
            "write_args": {"start": 0, "total_tokens": 4},
            "exact_write": False,
            "start": 0,
            "total_tokens": 4,
            "inner_hex": suffix["inner_hex"],
            "note": "tokens 1 and 2 of 4 replayed: rows at positions 0 and 1, start = replay_start_token - 1",
        },
        {
            "name": "bitmap-uint8",
            "payload": bitmap["payload"],
            "read_args": SHAPE,
            "values": [[[1, 2], [3, 4]], _zeros(), _zeros(), [[5, 6], [7, 8]]],
            "dtype": "uint8",
            "shape": [4, 2, 2],
            "write_args": {"mask": [True, False, False, True]},
            "exact_write": False,
            "mask": [True, False, False, True],
            "total_tokens": 5,
            "inner_hex": bitmap["inner_hex"],
            "note": "5 tokens, bits 1 and 4 (LSB first): total - 1 rows, mask[p] = bit p + 1, unreplayed rows zero",
        },
        {
            "name": "no-content-size",
            "payload": no_size["payload"],
            "read_args": SHAPE,
            "values": no_size["values"],
            "dtype": "uint8",
            "shape": [2, 2, 2],
            "exact_write": False,
            "start": 0,
            "total_tokens": 4,
            "note": "frame without Frame_Content_Size: decompression bounded by the r3/v1 header",
        },
        {
            "name": "two-frames",
            "payload": frames["payload"],
            "read_args": SHAPE,
            "values": [[[4, 5], [65535, 0]]],
            "dtype": "uint16",
            "shape": [1, 2, 2],
            "exact_write": False,
            "total_tokens": 2,
            "note": "concatenated frames are one stream",
        },
        {
            "name": "rows-from-zero-written-as-suffix",
            "payload": _text(written_from_zero),
            "read_args": SHAPE,
            "values": M[:2],
            "dtype": "uint8",
            "shape": [2, 2, 2],
            "write_args": {"start": 0},
            "exact_write": False,
            "start": 0,
            "total_tokens": 3,
            "inner_hex": written_from_zero.hex(),
            "note": "rows from position 0 are written as SUFFIX from token 1 (ALL would need token 0's entry); "
            "total_tokens defaults to start + rows + 1",
        },
        {
            "name": "suffix-from-token-0",
            "payload": _text(_r3(SUFFIX, 4, 0, M[:3])),
            "read_args": SHAPE,
            "values": M[1:3],
            "dtype": "uint8",
            "shape": [2, 2, 2],
            "exact_write": False,
            "start": 0,
            "total_tokens": 4,
            "note": "SUFFIX from token 0: the first matrix is token 0's, skipped; the rest are positions 0 and 1",
        },
        {
            "name": "bitmap-bit-0-set",
            "payload": _text(_r3(BITMAP, 4, 0, M[:3], bits=(0, 1, 3))),
            "read_args": SHAPE,
            "values": [M[1], _zeros(), M[2]],
            "dtype": "uint8",
            "shape": [3, 2, 2],
            "exact_write": False,
            "mask": [True, False, True],
            "total_tokens": 4,
            "note": "bit 0's matrix (token 0's entry) is skipped; bits 1 and 3 are positions 0 and 2",
        },
        {
            "name": "all-one-token",
            "payload": _text(_r3(ALL, 1, 0, M[:1])),
            "read_args": SHAPE,
            "values": [],
            "dtype": "uint8",
            "shape": [0, 2, 2],
            "exact_write": False,
            "total_tokens": 1,
            "note": "ALL of 1 token: its only matrix is token 0's entry; no position was forwarded",
        },
        {
            "name": "gateway-completion-suffix",
            "payload": _text(gateway),
            "read_args": SHAPE,
            "values": M[:3],
            "dtype": "uint8",
            "shape": [3, 2, 2],
            "write_args": {"start": 3, "total_tokens": 7},
            "exact_write": False,
            "start": 3,
            "total_tokens": 7,
            "inner_hex": gateway.hex(),
            "note": "the gateway's layout (TestRoundTrip): 4 prompt tokens without routing, a matrix for each of "
            "the 3 completion tokens at its own token index; completion token j's matrix is position 3 + j's row",
        },
        {
            "name": "gateway-completion-bitmap",
            "payload": _text(gateway_bits),
            "read_args": SHAPE,
            "values": [_zeros(), _zeros(), _zeros(), *M[:3]],
            "dtype": "uint8",
            "shape": [6, 2, 2],
            "write_args": {"mask": [False, False, False, True, True, True]},
            "exact_write": False,
            "mask": [False, False, False, True, True, True],
            "total_tokens": 7,
            "inner_hex": gateway_bits.hex(),
            "note": "the same as a BITMAP: bits 4..6 set, rows at positions 3..5",
        },
    ]
    return {
        "format": "fireworks-r3v1",
        "about": "Fireworks r3/v1 read as Fireworks' own tools index it: token t's matrix is the routing of the "
        "forward pass that sampled token t, at position t - 1, so row p of a result is token p + 1's matrix and "
        "token 0's entry is skipped. Supersedes formats-fireworks-r3v1-v1.json's valid cases named in "
        "'supersedes' (its reject cases and 'empty' still hold). " + SUPERSEDED_NOTE + " Payloads: v1's bytes "
        "where re-read, else hand-built raw zstd blocks (struct + base64, tests/make_fireworks_v2_vectors.py); "
        "inner_hex is the decompressed r3/v1 blob a writer must produce for the same rows.",
        "sources": SOURCES,
        "supersedes": {v1: {"valid": ["all-uint16", "suffix-uint8", "bitmap-uint8", "no-content-size", "two-frames"]}},
        "valid": valid,
        "reject": [],
    }


def trace_doc() -> dict[str, Any]:
    v1 = "formats-fireworks-trace-v1.json"
    all8, bitmap = _v1(v1, "valid", "all-uint8"), _v1(v1, "valid", "bitmap")
    suffix = _r3(SUFFIX, 7, 4, M[:3])
    written = _r3(BITMAP, 4, 0, [M[0], M[2]], bits=(1, 3))
    valid: list[dict[str, Any]] = [
        {
            "name": "all-uint8",
            "payload": all8["payload"],
            "read_args": SHAPE,
            "shape": [1, 2, 2],
            "dtype": "uint8",
            "values": [[[4, 5], [6, 7]]],
            "total_tokens": 2,
            "note": "ALL of 2 tokens: token 0's entry skipped, token 1's matrix is position 0's row",
        },
        {
            "name": "bitmap",
            "payload": bitmap["payload"],
            "read_args": SHAPE,
            "shape": [2, 2, 2],
            "dtype": "uint8",
            "values": [_zeros(), [[5, 6], [7, 8]]],
            "mask": [False, True],
            "total_tokens": 3,
            "note": "3 tokens, bits 0 and 2: bit 0's matrix skipped, bit 2 is position 1",
        },
        {
            "name": "suffix-gateway",
            "payload": {"manifest": TRACE_MANIFEST, "data": _text(suffix)},
            "read_args": SHAPE,
            "shape": [3, 2, 2],
            "dtype": "uint8",
            "values": M[:3],
            "start": 3,
            "total_tokens": 7,
            "write_args": {"start": 3, "total_tokens": 7},
            "exact_write": False,
            "inner_hex": suffix.hex(),
            "note": "4 prompt tokens, 3 completion tokens replayed from token 4: rows at positions 3..5",
        },
        {
            "name": "bitmap-written",
            "payload": {"manifest": TRACE_MANIFEST, "data": _text(written)},
            "read_args": SHAPE,
            "shape": [3, 2, 2],
            "dtype": "uint8",
            "values": [M[0], _zeros(), M[2]],
            "mask": [True, False, True],
            "total_tokens": 4,
            "write_args": {"mask": [True, False, True]},
            "exact_write": False,
            "inner_hex": written.hex(),
            "note": "a mask of 3 rows is written as bits 1..3 of 4 tokens, bit 0 clear",
        },
    ]
    return {
        "format": "fireworks-trace",
        "about": "Fireworks trace API payloads.router_replay, its r3/v1 data read as Fireworks' own tools index it "
        "(token t's matrix is position t - 1's row; token 0's entry skipped). Supersedes "
        "formats-fireworks-trace-v1.json's valid cases named in 'supersedes' (the rest still hold). "
        + SUPERSEDED_NOTE
        + " Payloads: v1's bytes where re-read, else hand-built raw zstd blocks (tests/make_fireworks_v2_vectors.py).",
        "sources": SOURCES,
        "supersedes": {v1: {"valid": ["all-uint8", "bitmap"]}},
        "valid": valid,
        "reject": [],
    }


def _body(blob: bytes) -> dict[str, Any]:
    """A vLLM-like body: 4 prompt ids, 3 completion ids and the r3/v1 ``blob`` as its routes."""
    return {"prompt_token_ids": [1, 2, 3, 4], "choices": [{"token_ids": [5, 6, 7], "routed_experts": _text(blob)}]}


SHORT_ERROR = (
    "$.choices[0].routed_experts must be rows that end at the call's last forwarded token: start + rows = 6 (7 tokens: "
    "4 at $.prompt_token_ids + 3 at $.choices[0].token_ids; fireworks-r3v1 states its start, and its rows run from it "
    "to the call's last forwarded token, n - 1), got start 3 + 2 rows = 5"
)


def response_doc() -> dict[str, Any]:
    engines = _v1("response-engines-v1.json", "cases", "fireworks-trace")
    beside = _r3(SUFFIX, 7, 4, M[:3])
    short = _r3(SUFFIX, 7, 4, M[:2])
    trace_result = dict(engines["results"][0], start=1)
    cases: list[dict[str, Any]] = [
        {
            **{k: v for k, v in engines.items() if k not in ("results",)},
            "note": "SUFFIX from token 2 of 5, 3 matrices: rows at positions 1..3 (response-engines-v1.json read "
            "them at 2..4, one token late)",
            "results": [trace_result],
        },
        {
            "name": "fireworks-r3v1-beside-token-ids",
            "note": "an r3/v1 routes value beside the call's ids: SUFFIX from token 4 (the completion) of 7 tokens, "
            "rows at positions 3..5, ending at the call's last forwarded token",
            "read_args": SHAPE,
            "body": {
                "prompt_token_ids": [1, 2, 3, 4],
                "choices": [{"token_ids": [5, 6, 7], "routed_experts": _text(beside)}],
            },
            "results": [
                {
                    "path": "$.choices[0].routed_experts",
                    "format": "fireworks-r3v1",
                    "dtype": "uint8",
                    "values": M[:3],
                    "start": 3,
                    "total_tokens": 7,
                    "token_ids": [5, 6, 7],
                    "prompt_token_ids": [1, 2, 3, 4],
                    "logprobs": None,
                    "num_clamped": 0,
                }
            ],
        },
        {
            "name": "fireworks-r3v1-suffix-stopping-short",
            "note": "SUFFIX from token 4 with 2 matrices in a call of 7 tokens: rows at positions 3 and 4, short of "
            "the call's last forwarded token (5), so a stated start that cannot be right is refused; v1's reading "
            "(rows at 4 and 5) accepted it",
            "read_args": SHAPE,
            "body": {
                "prompt_token_ids": [1, 2, 3, 4],
                "choices": [{"token_ids": [5, 6, 7], "routed_experts": _text(short)}],
            },
            "verdict": "reject",
            "field": "$.choices[0].routed_experts",
            "error": SHORT_ERROR,
        },
    ]
    return {
        "about": "Fireworks r3/v1 routes in whole responses, read as Fireworks' own tools index them (token t's "
        "matrix is position t - 1's row). Read like response-alignment-v1.json: r3wire.formats.read_response(body, "
        "**read_args); verdict 'reject' raises DecodeError naming `field` (and the message `error`); a case without "
        "it reads to `results`. Supersedes the 'fireworks-trace' case of response-engines-v1.json, which read the "
        "rows one token late. response-fireworks-v1.json (per-token routing_matrix refused) still holds.",
        "sources": SOURCES,
        "supersedes": {"response-engines-v1.json": {"cases": ["fireworks-trace"]}},
        "cases": cases,
    }


DOCS = {
    "formats-fireworks-r3v1-v2.json": r3v1_doc,
    "formats-fireworks-trace-v2.json": trace_doc,
    "response-fireworks-v2.json": response_doc,
}


def _dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args(argv)
    status = 0
    for name, build in DOCS.items():
        path = VECTORS / name
        text = _dumps(build())
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{name}: differs from what this script derives", file=sys.stderr)
                status = 1
        elif path.exists():
            print(f"{name}: exists; published vectors are never edited", file=sys.stderr)
            status = 1
        else:
            path.write_text(text, encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
