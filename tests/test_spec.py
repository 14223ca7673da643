"""docs/ agrees with the code: the JSON Schema accepts every golden envelope, and the spec's example decodes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from r3wire import decode_routes

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
VECTORS = Path(__file__).parent / "vectors"


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((DOCS / "envelope.schema.json").read_text(encoding="utf-8"))
    return schema


def _valid_envelopes() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name in ("routes-v1.json", "routes-v1-packed.json", "arrays-v1.json", "logprobs-v1.json"):
        doc = json.loads((VECTORS / name).read_text(encoding="utf-8"))
        found += [(f"{name}:{c['name']}", c["envelope"]) for c in doc["valid"] if not c.get("legacy")]
    return found


@pytest.mark.parametrize(("name", "envelope"), _valid_envelopes(), ids=lambda v: v if isinstance(v, str) else "")
def test_json_schema_accepts_golden_envelopes(name: str, envelope: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(envelope, _schema(), cls=jsonschema.Draft202012Validator)


def test_json_schema_rejects_structural_errors() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(_schema())
    good = {"data": "AAE=", "shape": [1, 1, 2], "dtype": "uint8", "schema": "r3wire.routes", "version": 1}
    assert validator.is_valid(good)
    for bad in (
        good | {"version": 2},
        good | {"dtype": "uint16"},
        good | {"extra": 1},
        good | {"data": "AA E"},
        good | {"shape": [1, 2]},
        {k: v for k, v in good.items() if k != "schema"},
    ):
        assert not validator.is_valid(bad), bad


def test_spec_example_decodes() -> None:
    text = (DOCS / "wire-format.md").read_text(encoding="utf-8")
    example = re.search(r"```json\n(.*?)\n```", text, re.DOTALL)
    assert example is not None
    assert decode_routes(example.group(1)).tolist() == [[[1, 0], [7, 3]]]
