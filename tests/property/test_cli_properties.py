"""Properties of the command line's own checks: the demo's argument bounds and the bounded input reader."""

from __future__ import annotations

import codecs
import contextlib
import io
import tempfile
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import cli, encode_routes
from r3wire.cli import main
from r3wire.demo import MAX_DRAWS, MAX_IDS, MAX_REPEAT, MAX_ROW_DRAWS, MAX_TOKEN_LAYERS, check_demo_arguments
from r3wire.errors import DecodeError, R3WireError
from r3wire.synthetic import synthetic_routes

pytestmark = pytest.mark.property

# Around every limit, at both ends, and far beyond them (what a typo gives).
_COUNTS = st.one_of(
    st.integers(-3, 40),
    st.sampled_from(
        [
            *(
                limit + delta
                for limit in (MAX_IDS, MAX_TOKEN_LAYERS, MAX_ROW_DRAWS, 1 << 31, MAX_REPEAT)
                for delta in (0, 1)
            ),
            MAX_TOKEN_LAYERS // 2,
            MAX_ROW_DRAWS // 2,
        ]
    ),
    st.integers(-(2**70), 2**70),
)
_ARGUMENT = st.one_of(_COUNTS, st.booleans(), st.none(), st.floats(allow_nan=False), st.text(max_size=3))


@given(tokens=_ARGUMENT, layers=_ARGUMENT, top_k=_ARGUMENT, num_experts=_ARGUMENT, repeat=_ARGUMENT)
def test_demo_arguments_are_refused_by_flag_or_bounded(
    tokens: Any, layers: Any, top_k: Any, num_experts: Any, repeat: Any
) -> None:
    refused: R3WireError | None = None
    try:
        check_demo_arguments(tokens=tokens, layers=layers, top_k=top_k, num_experts=num_experts, repeat=repeat)
    except R3WireError as exc:
        refused = exc
    if refused is not None:
        assert refused.field is not None
        assert refused.field.startswith("--")
        assert str(refused).startswith(f"{refused.field} must be ")
        return
    # Accepted: every count a real int in range, and the run's memory and time within the stated limits.
    for value in (tokens, layers, top_k, num_experts, repeat):
        assert isinstance(value, int)
        assert not isinstance(value, bool)
        assert value >= 1
    assert top_k <= num_experts <= 1 << 31
    assert repeat <= MAX_REPEAT
    assert tokens * layers * top_k <= MAX_IDS
    assert tokens * layers <= MAX_TOKEN_LAYERS
    assert layers * num_experts <= MAX_ROW_DRAWS
    assert tokens * layers * num_experts <= MAX_DRAWS
    if tokens * layers * num_experts <= 4096:  # small enough to generate here: the generator takes them too
        assert synthetic_routes(tokens, layers=layers, top_k=top_k, num_experts=num_experts).shape == (
            tokens,
            layers,
            top_k,
        )


class _Trickle(io.RawIOBase):
    """A stream that hands out ``data`` a few bytes per read, as a pipe may, and counts what it gave."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data = data
        self.step = step
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        piece = self.data[self.served : self.served + min(self.step, len(view))]
        view[: len(piece)] = piece
        self.served += len(piece)
        return len(piece)


@given(
    data=st.binary(max_size=300),
    limit=st.integers(1, 320),
    chunk=st.integers(1, 64),
    step=st.integers(1, 50),
    regular=st.booleans(),
)
def test_the_input_reader_returns_everything_or_refuses_past_the_limit(
    data: bytes, limit: int, chunk: int, step: int, regular: bool
) -> None:
    with contextlib.ExitStack() as stack:
        if regular:
            handle: Any = stack.enter_context(tempfile.TemporaryFile())
            handle.write(data)
            handle.seek(0)
            stream = None
        else:
            stream = _Trickle(data, step)
            handle = io.BufferedReader(stream, buffer_size=8)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cli, "_CHUNK", chunk)
            if len(data) <= limit:
                assert cli._read_bounded(handle, limit, "input") == data
            else:
                with pytest.raises(DecodeError, match=f"^input must be at most {limit:,} bytes"):
                    cli._read_bounded(handle, limit, "input")
        if stream is not None:  # a stream is read no further than one chunk past the limit
            assert stream.served <= limit + 1 + max(chunk, 8)


_ENVELOPE = orjson.dumps(encode_routes(synthetic_routes(3, layers=2, top_k=2, num_experts=8)))


@given(
    prefix=st.sampled_from([b"", codecs.BOM_UTF8, b" \n", b"\n" + codecs.BOM_UTF8, b"\xff\xfe"]),
    body=st.one_of(st.just(_ENVELOPE), st.binary(max_size=60), st.just(b"")),
    limit=st.one_of(st.none(), st.integers(1, 200)),
    command=st.sampled_from(["inspect", "convert"]),
)
def test_standard_input_gives_a_result_or_one_line(prefix: bytes, body: bytes, limit: int | None, command: str) -> None:
    data = prefix + body
    argv = [command, "-"] if limit is None else [command, "--max-input-bytes", str(limit), "-"]
    out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setattr("sys.stdin", io.TextIOWrapper(io.BufferedReader(_Trickle(data, 16))))
        code = main(argv)
    message = err.getvalue()
    if code == 0:
        assert message == ""
        assert data.strip().startswith(b"{")
        return
    assert code == 2
    assert message.startswith("r3wire: error: ")
    assert message.count("\n") == 1
    assert "internal error" not in message
    own = "r3wire: error: standard input must be "
    if limit is not None and len(data) > limit:
        assert message.startswith(f"{own}at most {limit:,} bytes (raise the limit with --max-input-bytes)")
    elif not data.strip():
        assert message.startswith(f"{own}a routes payload or a response body")
    elif data.lstrip().startswith(codecs.BOM_UTF8):
        assert message.startswith(f"{own}UTF-8 without a byte order mark")
