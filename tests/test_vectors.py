"""Golden vectors (tests/vectors): every valid vector decodes to its values and re-encodes to itself; every
must-reject vector raises DecodeError naming the documented field."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r3wire import (
    WIRE_DTYPES,
    DecodeError,
    UnsupportedVersionError,
    decode_array,
    decode_logprobs,
    decode_routes,
    decode_routes_frame,
    encode_array,
    encode_logprobs,
    encode_routes,
)

VECTORS = Path(__file__).parent / "vectors"


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return doc


ROUTES = _load("routes-v1.json")
ARRAYS = _load("arrays-v1.json")
LOGPROBS = _load("logprobs-v1.json")
HOSTILE = _load("hostile-v1.json")


@pytest.mark.parametrize("case", ROUTES["valid"], ids=lambda c: c["name"])
def test_routes_valid(case: dict[str, Any]) -> None:
    envelope = case["envelope"]
    decoded = decode_routes(envelope, num_experts=case.get("num_experts"))
    assert decoded.dtype == np.dtype(envelope["dtype"])
    assert list(decoded.shape) == envelope["shape"]
    assert decoded.tolist() == (case["values"] or np.zeros(envelope["shape"]).tolist())
    if not case.get("legacy"):
        values = np.array(case["values"], dtype=np.int64).reshape(envelope["shape"])
        assert encode_routes(values, num_experts=case.get("num_experts")) == envelope


@pytest.mark.parametrize("case", ROUTES["reject"], ids=lambda c: c["name"])
def test_routes_reject(case: dict[str, Any]) -> None:
    payload = case.get("text", case.get("envelope"))
    with pytest.raises(DecodeError) as info:
        decode_routes(payload, num_experts=case.get("num_experts"))
    assert info.value.field == case["field"]
    if "UnsupportedVersionError" in case.get("note", ""):
        assert isinstance(info.value, UnsupportedVersionError)


@pytest.mark.parametrize("case", ARRAYS["valid"], ids=lambda c: c["name"])
def test_arrays_valid(case: dict[str, Any]) -> None:
    envelope = case["envelope"]
    raw = bytes.fromhex(case["bytes_hex"])
    assert base64.b64decode(envelope["data"]) == raw
    decoded = decode_array(envelope)
    assert list(decoded.shape) == envelope["shape"]
    wire = WIRE_DTYPES[envelope["dtype"]]
    assert decoded.astype(wire).tobytes() == raw
    source = np.frombuffer(raw, dtype=wire).reshape(envelope["shape"])
    assert encode_array(source) == envelope


@pytest.mark.parametrize("case", ARRAYS["reject"], ids=lambda c: c["name"])
def test_arrays_reject(case: dict[str, Any]) -> None:
    with pytest.raises(DecodeError) as info:
        decode_array(case["envelope"])
    assert info.value.field == case["field"]
    if "UnsupportedVersionError" in case.get("note", ""):
        assert isinstance(info.value, UnsupportedVersionError)


@pytest.mark.parametrize("case", LOGPROBS["valid"], ids=lambda c: c["name"])
def test_logprobs_valid(case: dict[str, Any]) -> None:
    envelope = case["envelope"]
    raw = bytes.fromhex(case["bytes_hex"])
    assert base64.b64decode(envelope["data"]) == raw
    decoded = decode_logprobs(envelope)
    wire = WIRE_DTYPES[envelope["dtype"]]
    assert decoded.dtype == wire
    assert list(decoded.shape) == envelope["shape"]
    assert decoded.astype(wire).tobytes() == raw
    assert decoded.tolist() == case["values"]
    source = np.frombuffer(raw, dtype=wire).reshape(envelope["shape"])
    assert encode_logprobs(source) == envelope


@pytest.mark.parametrize("case", LOGPROBS["reject"], ids=lambda c: c["name"])
def test_logprobs_reject(case: dict[str, Any]) -> None:
    payload = case.get("text", case.get("envelope"))
    with pytest.raises(DecodeError) as info:
        decode_logprobs(payload)
    assert info.value.field == case["field"]
    assert isinstance(info.value, UnsupportedVersionError) == ("UnsupportedVersionError" in case.get("note", ""))


def _decode_hostile(case: dict[str, Any]) -> np.ndarray[Any, Any]:
    limit = case.get("max_elements")
    decoder = case["decoder"]
    if decoder == "frame":
        return decode_routes_frame(bytes.fromhex(case["frame_hex"]), max_elements=limit)
    payload = case.get("text", case.get("envelope"))
    if decoder == "routes":
        return decode_routes(payload, max_elements=limit)
    if decoder == "array":
        return decode_array(payload, max_elements=limit)
    assert decoder == "logprobs"
    return decode_logprobs(payload, max_elements=limit)


@pytest.mark.parametrize("case", HOSTILE["valid"], ids=lambda c: c["name"])
def test_hostile_valid(case: dict[str, Any]) -> None:
    assert list(_decode_hostile(case).shape) == case["shape"]


@pytest.mark.parametrize("case", HOSTILE["reject"], ids=lambda c: c["name"])
def test_hostile_reject(case: dict[str, Any]) -> None:
    with pytest.raises(DecodeError) as info:
        _decode_hostile(case)
    assert info.value.field == case["field"]
    assert len(str(info.value)) < 1000


def test_vector_files_are_listed() -> None:
    # A vector file that no test reads would be a published contract nobody checks.
    assert sorted(p.name for p in VECTORS.glob("*.json")) == sorted(KNOWN_VECTOR_FILES)


KNOWN_VECTOR_FILES = [
    "arrays-v1.json",
    "formats-fireworks-matrices-blanks-v1.json",
    "formats-fireworks-matrices-v1.json",
    "formats-fireworks-r3v1-v1.json",  # valid cases superseded by -v2 (read one token late)
    "formats-fireworks-r3v1-v2.json",
    "formats-fireworks-trace-v1.json",  # valid cases superseded by -v2 (read one token late)
    "formats-fireworks-trace-v2.json",
    "formats-json-lists-v1.json",
    "formats-nemo-rl-v1.json",
    "formats-prime-rl-b85-v1.json",
    "formats-prime-rl-v1.json",
    "formats-sglang-placeholders-v1.json",
    "formats-sglang-v1.json",
    "formats-skyrl-v1.json",
    "formats-vllm-npy-v1.json",
    "frame-v1.json",
    "hostile-v1.json",
    "logprobs-v1.json",
    "response-alignment-v1.json",
    "response-engines-v1.json",
    "response-errors-v1.json",
    "response-errors-v2.json",
    "response-errors-v3.json",
    "response-fireworks-v1.json",
    "response-fireworks-v2.json",
    "response-prompt-ids-v1.json",
    "response-stated-start-v1.json",
    "routes-v1-packed.json",
    "routes-v1.json",
]
