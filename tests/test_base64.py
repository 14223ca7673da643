"""The two base64 back ends agree, and both are strict in exactly the same way."""

from __future__ import annotations

import base64
import importlib
import os
import subprocess
import sys
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

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


VIEWS = {
    "strided": "memoryview(b'Q\\0U\\0E\\0=\\0')[::2]",  # pybase64 raised BufferError, the stdlib copied it
    "wide": "memoryview(b'QUE=').cast('I')",  # one 4-byte item: len() said 1 character
    "2-d": "memoryview(b'QUE=').cast('B', (2, 2))",
}


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
@pytest.mark.parametrize("backend", ["loaded", "stdlib"])
def test_buffers_that_are_not_plain_bytes_are_refused_by_both_back_ends(view: str, backend: str) -> None:
    code = (
        "import r3wire._base64 as b, r3wire.errors as e\n"
        "try:\n"
        f"    b.b64decode_strict({view}, 2)\n"
        "except e.DecodeError as x:\n"
        "    assert x.field == 'data' and 'memoryview' in str(x), x\n"
        "else:\n"
        "    raise AssertionError('accepted')\n"
        "assert bytes(b.b64decode_strict(memoryview(b'QUE=').cast('b'), 2)) == b'AA'\n"
    )
    env = dict(os.environ, R3WIRE_NO_PYBASE64="1" if backend == "stdlib" else "")
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)


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


def _whole(text: str, nbytes: int) -> object:
    try:
        return bytes(_base64.b64decode_strict(text, nbytes))
    except DecodeError as error:
        return (error.field, error.expected, error.got)


def _by_ranges(text: str, nbytes: int, cuts: list[int]) -> object:
    try:
        checked = _base64.check_canonical(text, nbytes)
        bounds = [0, *sorted(c % (nbytes + 1) for c in cuts), nbytes]
        return b"".join(bytes(_base64.b64decode_range(checked, nbytes, a, b)) for a, b in pairwise(bounds))
    except DecodeError as error:
        return (error.field, error.expected, error.got)


@st.composite
def texts(draw: st.DrawFn) -> tuple[str, int]:
    """Canonical base64 of some bytes, often broken: a character replaced, inserted or removed."""
    data = draw(st.binary(max_size=40))
    text = base64.b64encode(data).decode("ascii")
    nbytes = len(data)
    edit = draw(st.sampled_from(["none", "replace", "insert", "delete", "claim"]))
    chars = st.sampled_from([*"A/+=-_ \n\x00é", "QQ==", "=", "=="])
    if edit == "replace" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(chars) + text[at + 1 :]
    elif edit == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(chars) + text[at:]
    elif edit == "delete" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + text[at + 1 :]
    elif edit == "claim":
        nbytes = draw(st.integers(0, 45))
    return text, nbytes


# Cuts at quantum boundaries (multiples of 3) are where a range can end on an '=' the whole text has mid-way.
CUTS = st.lists(st.one_of(st.integers(0, 64), st.integers(0, 21).map(lambda q: 3 * q)), max_size=6)


@given(texts(), CUTS)
def test_ranges_accept_and_refuse_what_the_whole_text_does(case: tuple[str, int], cuts: list[int]) -> None:
    # Ranges that start and end mid-quantum, empty ranges, one range: the bytes are the whole text's, and a text the
    # whole-text decoder refuses is refused with its very error.
    text, nbytes = case
    assert _by_ranges(text, nbytes, cuts) == _whole(text, nbytes)


def test_range_outside_the_data_is_a_bug() -> None:
    with pytest.raises(ValueError, match="outside"):
        _base64.b64decode_range("QUJD", 3, 2, 4)
