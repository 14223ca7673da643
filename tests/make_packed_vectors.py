"""Write tests/vectors/routes-v1-packed.json and tests/vectors/frame-v1.json from first principles.

    python tests/make_packed_vectors.py            # refuse to overwrite: published vectors are never edited
    python tests/make_packed_vectors.py --check    # regenerate in memory and compare with the files

Expected bytes come from the one-bit-at-a-time reference in ``bitref.py`` and Python's ``struct`` and ``base64``
modules; nothing here imports r3wire, so a bug in r3wire's kernel cannot leak into its own reference data.
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import sys
from pathlib import Path
from typing import Any

from bitref import pack_reference

VECTORS = Path(__file__).parent / "vectors"
SCHEMA = {"schema": "r3wire.routes", "version": 1}
LE_FORMAT = {"uint8": "B", "int16": "h", "int32": "i"}
FRAME_DTYPE_CODE = {"uint8": 1, "int16": 2, "int32": 3}


def _flat(values: Any) -> list[int]:
    return [v for row in values for layer in row for v in layer]


def _shape(values: Any, shape: list[int] | None) -> list[int]:
    return shape if shape is not None else [len(values), len(values[0]), len(values[0][0])]


def _dtype_for_bits(bits: int) -> str:
    return "uint8" if bits <= 8 else "int16" if bits <= 15 else "int32"


def _unpacked_bytes(ids: list[int], dtype: str) -> bytes:
    return struct.pack(f"<{len(ids)}{LE_FORMAT[dtype]}", *ids)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def packed_case(
    name: str, values: Any, bits: int, *, num_experts: int | None = None, shape: list[int] | None = None, note: str = ""
) -> dict[str, Any]:
    ids = _flat(values)
    stream = pack_reference(ids, bits)
    envelope: dict[str, Any] = {
        "data": _b64(stream),
        "shape": _shape(values, shape),
        "dtype": _dtype_for_bits(bits),
        **SCHEMA,
    }
    if num_experts is not None:
        envelope["num_experts"] = num_experts
    envelope["bits"] = bits
    case: dict[str, Any] = {"name": name, "envelope": envelope, "values": values, "bytes_hex": stream.hex()}
    if num_experts is not None:
        case["num_experts"] = num_experts
    if note:
        case["note"] = note
    return case


def envelope_reject(name: str, field: str | None, envelope: dict[str, Any], note: str = "") -> dict[str, Any]:
    case: dict[str, Any] = {"name": name, "field": field, "envelope": envelope}
    if note:
        case["note"] = note
    return case


def routes_packed() -> dict[str, Any]:
    kimi = [[[0, 383, 256, 255, 1, 128, 382, 7]], [[9, 10, 11, 12, 300, 301, 302, 303]]]
    qwen = [[[0, 127, 1, 126, 64, 63, 2, 3], [5, 6, 7, 8, 9, 10, 11, 12]]]
    valid = [
        packed_case("kimi-k2-384-experts-9-bits", kimi, 9, num_experts=384, note="16 ids: 18 bytes, no pad bits"),
        packed_case("qwen3-128-experts-7-bits", qwen, 7, num_experts=128, note="8 ids of 7 bits are 7 bytes"),
        packed_case("three-ids-9-bits-with-pad", [[[1, 256, 511]]], 9, num_experts=512, note="the spec's example"),
        packed_case("bits-from-data-3", [[[5, 0], [1, 2]], [[3, 4], [5, 5]]], 3, note="no num_experts: max 5"),
        packed_case("bits-from-data-9", [[[300, 0, 1]]], 9, note="no num_experts: max 300 needs int16, 9 bits"),
        packed_case("bits-from-data-17", [[[65536, 1]]], 17, note="no num_experts: max 65536 needs int32"),
        packed_case("one-expert-1-bit", [[[0, 0, 0]], [[0, 0, 0]], [[0, 0, 0]]], 1, num_experts=1),
        packed_case("zeros-from-data-1-bit", [[[0, 0]]], 1, note="the largest id 0 still takes one bit"),
        packed_case(
            "256-experts-8-bits", [[[255, 0, 17, 128]]], 8, num_experts=256, note="8 bits: the uint8 bytes unchanged"
        ),
        packed_case("32768-experts-15-bits", [[[32767, 0, 16384]]], 15, num_experts=32768),
        packed_case("32769-experts-16-bits-int32", [[[32768, 1]]], 16, num_experts=32769),
        packed_case("2pow31-experts-31-bits", [[[2**31 - 1, 0, 2**30]]], 31, num_experts=2**31),
        packed_case("empty-from-data", [], 1, shape=[0, 4, 8], note="empty: uint8 and 1 bit without num_experts"),
        packed_case("empty-384-experts", [], 9, num_experts=384, shape=[0, 61, 8]),
    ]
    three = valid[2]["envelope"]  # [[[1, 256, 511]]], 9 bits, num_experts 512, data "AQD+Bw=="
    small = valid[3]["envelope"]  # bits 3 from data
    reject = [
        envelope_reject("bits-zero", "bits", {**three, "bits": 0}),
        envelope_reject("bits-32", "bits", {**three, "bits": 32}, "wider than any route id"),
        envelope_reject("bits-string", "bits", {**three, "bits": "9"}),
        envelope_reject("bits-bool", "bits", {**three, "bits": True}),
        envelope_reject("bits-null", "bits", {**three, "bits": None}),
        envelope_reject("bits-float", "bits", {**three, "bits": 9.0}),
        envelope_reject("bits-not-fixed-by-num-experts", "bits", {**three, "bits": 10}, "512 experts: 9 bits"),
        envelope_reject(
            "bits-beyond-uint8",
            "bits",
            {**small, "bits": 9},
            "no num_experts: a uint8 payload has 1..8 bits",
        ),
        envelope_reject(
            "bits-below-int16",
            "bits",
            {"data": _b64(bytes([44, 0])), "shape": [1, 1, 2], "dtype": "int16", **SCHEMA, "bits": 8},
            "int16 means 9..15 bits",
        ),
        envelope_reject(
            "bits-non-canonical",
            "bits",
            {**small, "data": _b64(pack_reference([5, 0, 1, 2, 3, 4, 5, 5], 4)), "bits": 4},
            "no num_experts: the largest id 5 takes 3 bits, not 4",
        ),
        envelope_reject(
            "dtype-non-canonical-packed",
            "dtype",
            {"data": _b64(pack_reference([5, 0], 9)), "shape": [1, 1, 2], "dtype": "int16", **SCHEMA, "bits": 9},
            "no num_experts: ids below 256 travel as uint8",
        ),
        envelope_reject(
            "empty-bits-not-1",
            "bits",
            {"data": "", "shape": [0, 4, 8], "dtype": "uint8", **SCHEMA, "bits": 5},
            "no num_experts: an empty payload is uint8, 1 bit",
        ),
        envelope_reject("data-too-short", "data", {**three, "data": _b64(bytes.fromhex("0100fe"))}),
        envelope_reject("data-too-long", "data", {**three, "data": _b64(bytes.fromhex("0100fe0700"))}),
        envelope_reject(
            "data-length-of-unpacked-form",
            "data",
            {**three, "data": _b64(_unpacked_bytes([1, 256, 511], "int16"))},
            "the int16 bytes of the ids, not their 9-bit stream",
        ),
        envelope_reject(
            "pad-bit-set", "data", {**three, "data": _b64(bytes.fromhex("0100fe0f"))}, "stream bit 27 is a pad bit"
        ),
        envelope_reject(
            "last-pad-bit-set", "data", {**three, "data": _b64(bytes.fromhex("0100fe87"))}, "stream bit 31"
        ),
        envelope_reject(
            "id-not-below-num-experts",
            "data[0, 0, 2]",
            {**three, "data": _b64(pack_reference([1, 256, 400], 9)), "num_experts": 400},
            "400 experts: ids 0..399 in 9 bits",
        ),
        envelope_reject(
            "legacy-envelope-with-bits",
            None,
            {"data": three["data"], "shape": [1, 1, 3], "dtype": "int16", "bits": 9},
            "the unversioned seed envelope has no bits key",
        ),
        envelope_reject(
            "shape-huge-short-data",
            "data",
            {**three, "shape": [10**12, 61, 8]},
            "rejected by length before any allocation",
        ),
    ]
    return {
        "schema": "r3wire.routes",
        "version": 1,
        "about": (
            "Golden vectors for bit-packed r3wire.routes envelopes (the 'bits' key): bytes_hex is the LSB-first bit "
            "stream, data its base64. Published vectors are never edited; a format change gets a new file."
        ),
        "valid": valid,
        "reject": reject,
    }


def frame_bytes(
    ids: list[int],
    shape: list[int],
    dtype: str,
    *,
    bits: int = 0,
    num_experts: int = 0,
    version: int = 1,
    code: int | None = None,
    reserved: int = 0,
) -> bytes:
    header = struct.pack(
        "<4sBBBBQQII",
        b"R3WF",
        version,
        FRAME_DTYPE_CODE[dtype] if code is None else code,
        bits,
        reserved,
        shape[0],
        shape[1],
        shape[2],
        num_experts,
    )
    data = pack_reference(ids, bits) if bits else _unpacked_bytes(ids, dtype)
    return header + data


def frame_case(
    name: str,
    values: Any,
    dtype: str,
    *,
    bits: int = 0,
    num_experts: int | None = None,
    shape: list[int] | None = None,
    note: str = "",
) -> dict[str, Any]:
    dims = _shape(values, shape)
    frame = frame_bytes(_flat(values), dims, dtype, bits=bits, num_experts=num_experts or 0)
    case: dict[str, Any] = {
        "name": name,
        "frame_hex": frame.hex(),
        "shape": dims,
        "dtype": dtype,
        "values": values,
        "pack_bits": bool(bits),
    }
    if num_experts is not None:
        case["num_experts"] = num_experts
    if note:
        case["note"] = note
    return case


def frame_reject(name: str, field: str | None, frame: bytes, note: str = "") -> dict[str, Any]:
    case: dict[str, Any] = {"name": name, "field": field, "frame_hex": frame.hex()}
    if note:
        case["note"] = note
    return case


def frames() -> dict[str, Any]:
    kimi = [[[0, 383, 256, 255, 1, 128, 382, 7]], [[9, 10, 11, 12, 300, 301, 302, 303]]]
    valid = [
        frame_case("uint8-unpacked", [[[0, 1], [7, 3]]], "uint8", num_experts=8),
        frame_case("uint8-from-data", [[[255, 0, 17]]], "uint8"),
        frame_case("int16-unpacked-384-experts", kimi, "int16", num_experts=384),
        frame_case("int16-packed-9-bits-384-experts", kimi, "int16", bits=9, num_experts=384),
        frame_case(
            "uint8-packed-7-bits-128-experts", [[[0, 127, 1, 126, 64, 63, 2, 3]]], "uint8", bits=7, num_experts=128
        ),
        frame_case("packed-bits-from-data", [[[1, 256, 511]]], "int16", bits=9, note="no num_experts: max 511"),
        frame_case("int32-unpacked-from-data", [[[2**31 - 1, 0]]], "int32"),
        frame_case("int32-packed-31-bits", [[[2**31 - 1, 0, 2**30]]], "int32", bits=31, num_experts=2**31),
        frame_case("empty", [], "uint8", shape=[0, 3, 2], note="the header alone"),
        frame_case("empty-packed", [], "uint8", bits=1, shape=[0, 48, 8]),
    ]
    good = frame_bytes([1, 256, 511], [1, 1, 3], "int16", bits=9, num_experts=512)
    plain = frame_bytes([1, 0], [1, 1, 2], "uint8", num_experts=8)
    reject = [
        frame_reject("empty-buffer", "magic", b""),
        frame_reject("bad-magic", "magic", b"R3WG" + good[4:]),
        frame_reject("magic-only", "header", b"R3WF\x01", "version 1 but no room for the header"),
        frame_reject("version-2", "version", b"R3WF\x02" + good[5:], "UnsupportedVersionError"),
        frame_reject("version-0", "version", b"R3WF\x00" + good[5:], "UnsupportedVersionError"),
        frame_reject("header-truncated", "header", good[:31]),
        frame_reject("dtype-code-0", "dtype", frame_bytes([1, 0], [1, 1, 2], "uint8", code=0)),
        frame_reject("dtype-code-4", "dtype", frame_bytes([1, 0], [1, 1, 2], "uint8", code=4)),
        frame_reject("reserved-set", "reserved", frame_bytes([1, 0], [1, 1, 2], "uint8", reserved=1)),
        frame_reject(
            "rows-beyond-int64", "shape[0]", frame_bytes([], [2**63, 1, 0], "uint8"), "dimensions fit signed 64 bits"
        ),
        frame_reject(
            "num-experts-beyond-2pow31", "num_experts", frame_bytes([1, 0], [1, 1, 2], "int32", num_experts=2**31 + 1)
        ),
        frame_reject("dtype-not-fixed-by-num-experts", "dtype", frame_bytes([1, 0], [1, 1, 2], "int16", num_experts=8)),
        frame_reject("bits-32", "bits", good[:6] + b"\x20" + good[7:]),
        frame_reject("bits-not-fixed-by-num-experts", "bits", good[:6] + b"\x0a" + good[7:]),
        frame_reject("bits-beyond-uint8", "bits", frame_bytes([5, 0], [1, 1, 2], "uint8", bits=9)),
        frame_reject(
            "bits-non-canonical", "bits", frame_bytes([5, 0], [1, 1, 2], "uint8", bits=4), "max 5 takes 3 bits"
        ),
        frame_reject("dtype-non-canonical", "dtype", frame_bytes([5, 0], [1, 1, 2], "int16"), "ids below 256"),
        frame_reject("data-truncated", "data", plain[:-1]),
        frame_reject("trailing-byte", "data", plain + b"\x00", "nothing may follow the data"),
        frame_reject("packed-trailing-byte", "data", good + b"\x00"),
        frame_reject("packed-pad-bit-set", "data", good[:-1] + bytes([good[-1] | 0x80])),
        frame_reject(
            "shape-huge-short-data",
            "data",
            frame_bytes([1, 0], [1, 1, 2], "uint8")[:8] + struct.pack("<QQI", 10**12, 61, 8) + b"\0" * 6,
            "rejected by length before touching data",
        ),
        frame_reject(
            "id-not-below-num-experts", "data[0, 0, 1]", frame_bytes([1, 8], [1, 1, 2], "uint8", num_experts=8)
        ),
    ]
    return {
        "schema": "r3wire.routes-frame",
        "version": 1,
        "about": (
            "Golden vectors for the routes frame: a 32-byte little-endian header, then the data. frame_hex is the "
            "whole frame. Published vectors are never edited; a format change gets a new file."
        ),
        "valid": valid,
        "reject": reject,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args()
    status = 0
    for name, doc in (("routes-v1-packed.json", routes_packed()), ("frame-v1.json", frames())):
        text = json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
        path = VECTORS / name
        if args.check:
            same = path.exists() and path.read_text(encoding="utf-8") == text
            print(f"{name}: {'identical' if same else 'DIFFERS'}")
            status |= not same
        elif path.exists():
            print(f"{name} exists; published vectors are never edited", file=sys.stderr)
            status = 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
