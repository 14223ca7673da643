"""The two base64 back ends agree, and both are strict in exactly the same way."""

from __future__ import annotations

import base64
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

from r3wire import _base64
from r3wire.errors import DecodeError


@pytest.mark.parametrize("nbytes", [0, 1, 2, 3, 4, 5, 100, 4097])
def test_encode_matches_rfc4648(nbytes: int) -> None:
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    text = _base64.b64encode_text(data.data)
    assert text == base64.b64encode(data.tobytes()).decode()
    assert len(text) == _base64.encoded_length(nbytes)
    assert bytes(_base64.b64decode_strict(text, nbytes)) == data.tobytes()


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("QQ==", 2),
        ("QR==", 1),
        ("QUF=", 2),
        ("QUE", 2),
        ("QUE==", 2),
        ("Q UE=", 2),
        ("QUE=\n", 2),
        ("QU-=", 2),
        ("QU_=", 2),
        ("Q=E=", 2),
        ("=QUE", 2),
        ("QUJD", 2),
        ("QUJDRA==QUE=", 6),
        ("QUé=", 2),
        ("", 1),
    ],
)
def test_strict_rejections(text: str, nbytes: int) -> None:
    with pytest.raises(DecodeError) as info:
        _base64.b64decode_strict(text, nbytes)
    assert info.value.field == "data"


def test_non_string_rejected() -> None:
    with pytest.raises(DecodeError, match="data must be a base64 string, got int"):
        _base64.b64decode_strict(12, 1)  # type: ignore[arg-type]


def test_stdlib_fallback_is_equivalent() -> None:
    # Run the fallback in a subprocess so this process keeps whichever back end it loaded.
    code = (
        "import numpy as np, r3wire, r3wire._base64 as b;"
        "assert b.BACKEND == 'stdlib', b.BACKEND;"
        "a = np.arange(3000, dtype=np.int32).reshape(10, 30, 10);"
        "e = r3wire.encode_routes(a);"
        "d = r3wire.decode_routes(e);"
        "assert d.flags.writeable and (d == a).all();"
        "print(e['data'][:40])"
    )
    env = dict(os.environ, R3WIRE_NO_PYBASE64="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    expected = base64.b64encode(np.arange(3000, dtype="<i2").tobytes()).decode()[:40]
    assert out.stdout.strip() == expected


def test_backend_is_reported() -> None:
    module = importlib.import_module("r3wire._base64")
    assert module.BACKEND in ("pybase64", "stdlib")
