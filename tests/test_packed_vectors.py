"""Golden vectors for bit-packed envelopes (routes-v1-packed.json) and routes frames (frame-v1.json), both ways:
every valid vector decodes to its values and encoding the values gives exactly its bytes; every reject vector
raises DecodeError naming the documented field. tests/make_packed_vectors.py derived them without r3wire."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r3wire import (
    DecodeError,
    UnsupportedVersionError,
    bitpack,
    decode_routes,
    decode_routes_frame,
    encode_routes,
    encode_routes_frame,
)

HERE = Path(__file__).parent
VECTORS = HERE / "vectors"


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return doc


PACKED = _load("routes-v1-packed.json")


@pytest.fixture(params=["kernel", "small"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Check the vectors through the chunked kernel and through the few-ids np.packbits path."""
    monkeypatch.setattr(bitpack, "_SMALL_COUNT", -1 if request.param == "kernel" else 10**9)
    return str(request.param)


FRAMES = _load("frame-v1.json")


def _values(case: dict[str, Any], shape: list[int]) -> np.ndarray[Any, Any]:
    return np.array(case["values"], dtype=np.int64).reshape(shape)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("case", PACKED["valid"], ids=lambda c: c["name"])
def test_packed_valid(case: dict[str, Any]) -> None:
    envelope = case["envelope"]
    assert base64.b64decode(envelope["data"]).hex() == case["bytes_hex"]
    decoded = decode_routes(envelope, num_experts=case.get("num_experts"))
    values = _values(case, envelope["shape"])
    assert decoded.dtype == np.dtype(envelope["dtype"])
    assert decoded.shape == values.shape
    assert np.array_equal(decoded, values)
    assert encode_routes(values, num_experts=case.get("num_experts"), pack_bits=True) == envelope
    # The packed form decodes to exactly the array the unpacked form gives.
    unpacked = decode_routes(encode_routes(values, num_experts=case.get("num_experts")))
    assert unpacked.dtype == decoded.dtype
    assert np.array_equal(unpacked, decoded)


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("case", PACKED["reject"], ids=lambda c: c["name"])
def test_packed_reject(case: dict[str, Any]) -> None:
    with pytest.raises(DecodeError) as info:
        decode_routes(case["envelope"], num_experts=case.get("num_experts"))
    assert info.value.field == case["field"]


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("case", FRAMES["valid"], ids=lambda c: c["name"])
def test_frame_valid(case: dict[str, Any]) -> None:
    frame = bytes.fromhex(case["frame_hex"])
    values = _values(case, case["shape"])
    decoded = decode_routes_frame(frame, num_experts=case.get("num_experts"))
    assert decoded.dtype == np.dtype(case["dtype"])
    assert decoded.shape == values.shape
    assert np.array_equal(decoded, values)
    assert encode_routes_frame(values, num_experts=case.get("num_experts"), pack_bits=case["pack_bits"]) == frame
    # The frame carries the bytes the JSON envelope's base64 carries.
    envelope = encode_routes(values, num_experts=case.get("num_experts"), pack_bits=case["pack_bits"])
    assert base64.b64decode(envelope["data"]) == frame[32:]


@pytest.mark.usefixtures("path")
@pytest.mark.parametrize("case", FRAMES["reject"], ids=lambda c: c["name"])
def test_frame_reject(case: dict[str, Any]) -> None:
    frame = bytes.fromhex(case["frame_hex"])
    for buffer in (frame, bytearray(frame), memoryview(frame)):
        with pytest.raises(DecodeError) as info:
            decode_routes_frame(buffer)
        assert info.value.field == case["field"]
        if "UnsupportedVersionError" in case.get("note", ""):
            assert isinstance(info.value, UnsupportedVersionError)


def test_generator_reproduces_the_files() -> None:
    # The vectors are what the independent generator writes; neither was edited by hand since.
    result = subprocess.run(
        [sys.executable, str(HERE / "make_packed_vectors.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE,
    )
    assert result.returncode == 0, result.stdout + result.stderr
