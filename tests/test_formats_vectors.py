"""Golden vectors for every engine format (tests/vectors/formats-*-v1.json): each valid payload reads to exactly
its values, the writer reproduces it (byte for byte where the case says so), and each must-reject payload raises
DecodeError naming the documented field. The vectors were derived with struct, base64 and np.save, not r3wire."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r3wire import DecodeError, UnsupportedVersionError
from r3wire.formats import FORMATS, detect, read, write

VECTORS = Path(__file__).parent / "vectors"
FORMAT_FILES = {name: f"formats-{name}-v1.json" for name in FORMATS if name != "r3wire"}


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTORS / name).read_text(encoding="utf-8"))
    return doc


DOCS = {name: _load(file) for name, file in FORMAT_FILES.items()}
# Later vector files for a format (e.g. formats-sglang-placeholders-v1.json, formats-fireworks-r3v1-v2.json):
# vectors are never edited, so a file whose behaviour changed names the cases it supersedes, and those are no
# longer run.
EXTRA_FILES = [
    path.name
    for path in sorted(VECTORS.glob("formats-*-v*.json"))
    if path.name not in FORMAT_FILES.values() and path.name != "formats-r3wire-v1.json"
]
EXTRA = [_load(name) for name in EXTRA_FILES]
SUPERSEDED = {
    (file, kind, case)
    for doc in EXTRA
    for file, kinds in doc.get("supersedes", {}).items()
    for kind, cases in kinds.items()
    for case in cases
}
VALID = [
    (name, case)
    for name, doc in DOCS.items()
    for case in doc["valid"]
    if (FORMAT_FILES[name], "valid", case["name"]) not in SUPERSEDED
] + [
    (doc["format"], case)
    for file, doc in zip(EXTRA_FILES, EXTRA, strict=True)
    for case in doc["valid"]
    if (file, "valid", case["name"]) not in SUPERSEDED
]
REJECT = [
    (name, case)
    for name, doc in DOCS.items()
    for case in doc["reject"]
    if (FORMAT_FILES[name], "reject", case["name"]) not in SUPERSEDED
] + [
    (doc["format"], case)
    for file, doc in zip(EXTRA_FILES, EXTRA, strict=True)
    for case in doc["reject"]
    if (file, "reject", case["name"]) not in SUPERSEDED
]


def _needs(name: str) -> None:
    if FORMATS[name].extra == "zstd":
        pytest.importorskip("zstandard")


def _inflate(text: str) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    data: bytes = zstandard.ZstdDecompressor().decompress(base64.b64decode(text))
    return data


def test_superseded_cases_exist() -> None:
    # A supersedes entry that names nothing would silently keep running (or dropping) the wrong case.
    for file, kind, name in SUPERSEDED:
        assert any(case["name"] == name for case in _load(file)[kind])


def test_every_format_but_r3wire_has_a_vector_file() -> None:
    # r3wire's own envelope is covered by routes-v1.json.
    assert all((VECTORS / file).exists() for file in FORMAT_FILES.values())
    assert all(doc["format"] == name for name, doc in DOCS.items())


@pytest.mark.parametrize(("name", "case"), VALID, ids=[f"{n}:{c['name']}" for n, c in VALID])
def test_valid_vector_reads_to_its_values(name: str, case: dict[str, Any]) -> None:
    _needs(name)
    result = read(case["payload"], name, **case["read_args"])
    assert result.format == name
    assert result.routes.dtype == np.dtype(case["dtype"])
    assert list(result.routes.shape) == case["shape"]
    assert result.routes.tolist() == case["values"]
    assert result.routes.flags.c_contiguous
    assert result.routes.flags.writeable
    assert result.routes.dtype.isnative
    assert result.start == case.get("start")
    assert result.total_tokens == case.get("total_tokens")
    if "mask" in case:
        assert result.mask is not None
        assert result.mask.tolist() == case["mask"]
    else:
        assert result.mask is None
    shape_args = {k: v for k, v in case["read_args"].items() if k in ("num_layers", "top_k")}
    assert detect(case["payload"], **shape_args) == case.get("detected_as", name)


WRITTEN = [(n, c) for n, c in VALID if "write_args" in c]


@pytest.mark.parametrize(("name", "case"), WRITTEN, ids=[f"{n}:{c['name']}" for n, c in WRITTEN])
def test_writer_reproduces_the_vector(name: str, case: dict[str, Any]) -> None:
    _needs(name)
    values = np.array(case["values"], dtype=np.int64).reshape(case["shape"])
    args = dict(case["write_args"])
    if "mask" in args:
        args["mask"] = np.array(args["mask"], dtype=bool)
    out = write(values, name, **args)
    if case["exact_write"]:
        assert out == case["payload"]
    if "inner_hex" in case:
        # zstd output differs between compressors; the r3/v1 bytes inside must not.
        inner = out["data"] if isinstance(out, dict) else out  # fireworks-trace wraps the r3/v1 text
        assert isinstance(inner, str)
        assert _inflate(inner).hex() == case["inner_hex"]
    back = read(out, name, **case["read_args"])
    assert back.routes.tolist() == case["values"]
    assert back.routes.dtype == np.dtype(case["dtype"])
    assert back.start == case.get("start")
    assert back.total_tokens == case.get("total_tokens")
    if "mask" in case:
        assert back.mask is not None
        assert back.mask.tolist() == case["mask"]


@pytest.mark.parametrize(("name", "case"), REJECT, ids=[f"{n}:{c['name']}" for n, c in REJECT])
def test_reject_vector_raises_decode_error(name: str, case: dict[str, Any]) -> None:
    _needs(name)
    with pytest.raises(DecodeError) as info:
        read(case["payload"], name, **case["read_args"])
    assert info.value.field == case["field"]
    assert str(info.value)
    if "UnsupportedVersionError" in case.get("note", ""):
        assert isinstance(info.value, UnsupportedVersionError)


def test_fireworks_v2_vectors_are_what_their_script_derives() -> None:
    # The v2 files were written by tests/make_fireworks_v2_vectors.py (struct, base64, hand-built zstd raw blocks;
    # no r3wire): regenerated in memory, they are byte for byte the published files.
    script = Path(__file__).parent / "make_fireworks_v2_vectors.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
