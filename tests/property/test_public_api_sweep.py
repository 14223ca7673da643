"""Hostile arguments to every public callable (review 10a's sweep, kept as a regression test).

Each case is one public function, method or constructor with a valid baseline call (checked to succeed). Every
argument, positional or keyword, is then replaced, one at a time, by every value of ``_hostile_pool.POOL``: None,
bools, ints past every fixed width, non-finite floats, text, bytes-like objects of every shape, ragged and deep
lists, NumPy arrays of every awkward layout and dtype, and objects whose ``__len__``, ``__iter__``, ``__index__``,
``__array__`` or mapping methods raise TypeError or lie. The library's contract for malformed input, checked call
by call:

- the call succeeds or raises :class:`r3wire.R3WireError` (a subclass counts), with a non-empty message of bounded
  length and ``expected`` / ``got`` set -- never another exception (TypeError, ValueError, OverflowError,
  MemoryError, RecursionError, UnicodeError, a NumPy error or warning, ...);
- it never hangs (a per-call alarm, on POSIX in the main thread);
- it never allocates much more than its tiny input: the tracemalloc peak of one call stays under 48 MiB. Logically
  huge inputs (broadcast views of 2**31 elements) only go to callables that bound their input (``max_elements``,
  a header size); an encoder asked to encode that much legitimately works through it.

Allowed, as documented: the caller's own exception class (here ``BoomError``) raised by the caller's own method
propagates unchanged; ``bitpack.unpack_bits_from`` propagates whatever its ``read`` callable raises and allocates its
``count`` ids up front. Every escape of a case is collected and reported together (case, argument, value, what
happened). The CLI is swept by tests/property/test_cli_properties.py.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import signal
import threading
import time
import tracemalloc
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from _hostile_pool import BIG, POOL, BoomError

import r3wire
from r3wire import R3WireError, bitpack, formats
from r3wire.synthetic import synthetic_routes

pytestmark = pytest.mark.property

TIMEOUT = 10.0  # seconds per call: a hang, not a slow call on a busy shared machine (calls take milliseconds)
MEM_LIMIT = 48 * 2**20  # tracemalloc peak per call; every input is tiny (logically huge ones only where bounded)
MSG_LIMIT = 1200  # characters: a longer message embeds something it should not

_PACKAGE_DIR = os.path.dirname(r3wire.__file__) + os.sep
# The formats whose writer needs the optional zstandard package.
_NEEDS_ZSTD = ("fireworks-r3v1", "fireworks-trace")

# ---------------------------------------------------------------------------------------------------------------------
# baselines

ROUTES = np.array([[[0, 1], [2, 3]], [[1, 2], [3, 0]], [[3, 2], [1, 0]]], dtype=np.uint8)
ENV = r3wire.encode_routes(ROUTES, num_experts=4)
ENV_PACKED = r3wire.encode_routes(ROUTES, num_experts=4, pack_bits=True)
ARR_ENV = r3wire.encode_array(np.arange(6, dtype=np.int32).reshape(2, 3))
LP_ENV = r3wire.encode_logprobs(np.array([-0.5, -1.0], np.float32))
CONTENT = r3wire.build_logprobs_content([-0.5, -1.0])
FRAME = r3wire.encode_routes_frame(ROUTES, num_experts=4, pack_bits=True)
BODY = {"choices": [{"index": 0, "token_ids": [5, 6], "logprobs": np.array([-0.1, -0.2]), "routed_experts": ROUTES}]}
BODY_TEXT = r3wire.dumps(BODY, num_experts=4)
SAMPLES = [ROUTES, ROUTES[:2]]
FLAT, CU = r3wire.pack_routes(SAMPLES)
PACKED = bitpack.pack_bits(ROUTES.ravel(), 2)
RESULT = formats.read_response(BODY_TEXT, num_experts=4)[0]
RESULT_FIELDS: dict[str, Any] = {
    "routes": ROUTES,
    "format": "r3wire",
    "start": 0,
    "mask": np.ones(3, bool),
    "total_tokens": 4,
    "num_experts": 4,
    "bits": 2,
    "path": "$.x",
    "token_ids": np.array([7, 8], np.int64),
    "prompt_token_ids": np.array([5, 6], np.int64),
    "logprobs": np.array([-0.1, -0.2]),
    "num_clamped": 0,
    "parts": ("x",),
}
RESULT_FULL = formats.ReadResult(**RESULT_FIELDS)
DUMPS_OPTIONS: dict[str, Any] = {
    "num_experts": 4,
    "pack_bits": True,
    "routes_keys": ("routed_experts",),
    "logprobs_keys": ("logprobs",),
    "clamp_logprobs": True,
    "request_id": "r",
    "option": None,
}
READ_OPTIONS: dict[str, Any] = {"num_layers": 2, "top_k": 2, "dtype": None, "num_experts": 4, "max_elements": 1000}

# A case builds (callable, args, kwargs) afresh for every call: a RouteTrace method gets a new trace each time.
Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def _trace() -> r3wire.RouteTrace:
    trace = r3wire.RouteTrace(num_experts=4, max_elements=10_000)
    trace.add(ROUTES[:2], start=0, token_ids=[1, 2, 3])
    return trace


@functools.wraps(r3wire.iter_dumps)
def _iter_dumps(*args: Any, **kwargs: Any) -> bytes:
    return b"".join(r3wire.iter_dumps(*args, **kwargs))


@functools.cache
def _written(name: str) -> Any:
    return formats.write(ROUTES, name, num_experts=4)


def _read_packed(start: int, stop: int) -> Any:
    return PACKED[start:stop]


CASES: dict[str, Callable[[], Call]] = {
    "encode_routes": lambda: (r3wire.encode_routes, (ROUTES,), {"num_experts": 4, "pack_bits": False}),
    "encode_routes/packed": lambda: (r3wire.encode_routes, (ROUTES,), {"num_experts": 4, "pack_bits": True}),
    "decode_routes": lambda: (r3wire.decode_routes, (ENV,), {"num_experts": 4, "max_elements": 1000}),
    "decode_routes/packed": lambda: (r3wire.decode_routes, (ENV_PACKED,), {"num_experts": 4, "max_elements": 1000}),
    "route_dtype": lambda: (r3wire.route_dtype, (4,), {}),
    "encode_array": lambda: (
        r3wire.encode_array,
        (np.arange(6, dtype=np.int32).reshape(2, 3),),
        {"dtypes": ["int32"]},
    ),
    "decode_array": lambda: (r3wire.decode_array, (ARR_ENV,), {"dtypes": ["int32"], "ndim": 2, "max_elements": 100}),
    "encode_logprobs": lambda: (
        r3wire.encode_logprobs,
        (np.array([-0.5, -1.0], np.float32),),
        {"clamp": True, "floor": -100.0, "request_id": "r"},
    ),
    "decode_logprobs": lambda: (r3wire.decode_logprobs, (LP_ENV,), {"ndim": 1, "max_elements": 100}),
    "clamp_logprobs": lambda: (
        r3wire.clamp_logprobs,
        ([-0.5, float("-inf")],),
        {"floor": -100.0, "request_id": "r"},
    ),
    "build_logprobs_content": lambda: (r3wire.build_logprobs_content, ([-0.5, -1.0],), {}),
    "read_logprobs_content": lambda: (
        r3wire.read_logprobs_content,
        (CONTENT,),
        {"floor": -50.0, "request_id": "r"},
    ),
    "encode_routes_frame": lambda: (r3wire.encode_routes_frame, (ROUTES,), {"num_experts": 4, "pack_bits": True}),
    "encode_routes_frame/out": lambda: (
        r3wire.encode_routes_frame,
        (ROUTES,),
        {"num_experts": 4, "pack_bits": False, "out": bytearray(100)},
    ),
    "frame_size": lambda: (r3wire.frame_size, (ROUTES,), {"num_experts": 4, "pack_bits": True}),
    "decode_routes_frame": lambda: (
        r3wire.decode_routes_frame,
        (FRAME,),
        {"num_experts": 4, "max_elements": 100, "copy": True},
    ),
    "dumps": lambda: (r3wire.dumps, (BODY,), DUMPS_OPTIONS),
    "iter_dumps": lambda: (_iter_dumps, (BODY,), DUMPS_OPTIONS),
    "loads": lambda: (r3wire.loads, (BODY_TEXT,), {"num_experts": 4, "max_elements": 1000}),
    "pad_routes": lambda: (
        r3wire.pad_routes,
        (SAMPLES,),
        {
            "token_lengths": [4, 3],
            "side": "left",
            "num_experts": 4,
            "max_len": 5,
            "check": True,
            "fill": "arange",
            "max_elements": 1000,
            "replayed": [np.ones(3, bool), np.ones(2, bool)],
        },
    ),
    "pad_routes/out": lambda: (
        r3wire.pad_routes,
        (SAMPLES,),
        {"num_experts": 4, "side": "right", "out": np.zeros((2, 3, 2, 2), np.uint8), "fill": "balanced"},
    ),
    "pack_routes": lambda: (
        r3wire.pack_routes,
        (SAMPLES,),
        {
            "token_lengths": [4, 3],
            "replayed": [np.ones(3, bool), np.ones(2, bool)],
            "num_experts": 4,
            "check": True,
            "fill": "balanced",
            "max_elements": 1000,
        },
    ),
    "pad_sequences": lambda: (
        r3wire.pad_sequences,
        ([np.array([1.0, 2.0]), np.array([3.0])],),
        {"token_lengths": [3, 2], "side": "right", "fill": 0, "offsets": [1, 1], "max_len": 4, "max_elements": 100},
    ),
    "pad_sequences/out": lambda: (
        r3wire.pad_sequences,
        ([np.array([1.0, 2.0]), np.array([3.0])],),
        {"out": np.zeros((2, 2)), "fill": -1.0},
    ),
    "unpack_routes": lambda: (r3wire.unpack_routes, (FLAT, CU), {"max_samples": 5}),
    "validate_routes": lambda: (
        r3wire.validate_routes,
        (SAMPLES,),
        {"num_experts": 4, "token_lengths": [4, 3], "max_elements": 1000},
    ),
    "RouteTrace": lambda: (r3wire.RouteTrace, (), {"num_experts": 4, "max_elements": 1000}),
    "RouteTrace.add": lambda: (
        _trace().add,
        (ROUTES,),
        {"start": 0, "token_ids": [1, 2, 3, 4], "on_conflict": "raise", "replayed": np.ones(3, bool)},
    ),
    "RouteTrace.add_result": lambda: (
        r3wire.RouteTrace(num_experts=4).add_result,
        (RESULT_FULL,),
        {"token_ids": None, "start": None, "on_conflict": "replace", "layers": [0, 1]},
    ),
    "RouteTrace.add_result/2": lambda: (
        _trace().add_result,
        (RESULT,),
        {"token_ids": [1, 2, 3, 5, 6], "start": 1, "on_conflict": None, "layers": slice(0, 2)},
    ),
    "RouteTrace.finalize": lambda: (_trace().finalize, (3,), {}),
    "RouteTrace.fork": lambda: (_trace().fork, (1,), {}),
    "RouteTrace.common_prefix": lambda: (_trace().common_prefix, ([1, 2, 5],), {}),
    "Schema": lambda: (r3wire.Schema, (), {"name": "r3wire.routes", "version": 1}),
    "ClampResult": lambda: (r3wire.ClampResult, (np.zeros(2), 0), {}),
    "formats.detect": lambda: (formats.detect, (ENV,), {"num_layers": 2, "top_k": 2}),
    "formats.read_response": lambda: (formats.read_response, (BODY_TEXT,), READ_OPTIONS),
    "formats.read_response/dict": lambda: (
        formats.read_response,
        (json.loads(BODY_TEXT),),
        READ_OPTIONS | {"dtype": "uint8"},
    ),
    "formats.ReadResult": lambda: (formats.ReadResult, (), RESULT_FIELDS),
    "ReadResult.call_token_ids": lambda: (RESULT_FULL.call_token_ids, (), {}),
    "ReadResult.route_mask": lambda: (RESULT_FULL.route_mask, (), {}),
    "formats.Format": lambda: (
        formats.Format,
        (),
        {"name": "x", "summary": "y", "carries_start": True, "needs_shape": False},
    ),
    "bitpack.pack_bits": lambda: (bitpack.pack_bits, (ROUTES.ravel(), 2), {"checked": True, "below": 4}),
    "bitpack.pack_bits/out": lambda: (bitpack.pack_bits, (ROUTES.ravel(), 2), {"out": np.zeros(3, np.uint8)}),
    "bitpack.packed_nbytes": lambda: (bitpack.packed_nbytes, (12, 2), {}),
    "bitpack.unpack_bits": lambda: (bitpack.unpack_bits, (PACKED, 12, 2, np.uint8), {"field": "data"}),
    "bitpack.unpack_bits_from": lambda: (
        bitpack.unpack_bits_from,
        (_read_packed, 12, 2, np.uint8),
        {"field": "data"},
    ),
    "synthetic_routes": lambda: (
        synthetic_routes,
        (3,),
        {"layers": 2, "top_k": 2, "num_experts": 4, "reuse": 0.3, "skew": 0.5, "seed": 1, "dtype": np.uint8},
    ),
}


def _write_options(name: str) -> dict[str, Any]:
    options: dict[str, Any] = {"num_experts": 4}
    if formats.FORMATS[name].carries_start:
        options["start"] = 0
    if name.startswith("fireworks"):
        options |= {"mask": np.ones(3, bool), "total_tokens": 4}  # 3 rows: positions 0 .. 2 of 4 tokens
    if name == "r3wire":
        options["pack_bits"] = True
    if name in ("sglang", "vllm-npy", "r3wire"):
        options["dtype"] = "uint8"
    if name == "nemo-rl":
        options["dtype"] = "int8"
    return options


for _name in formats.FORMATS:
    CASES[f"formats.read[{_name}]"] = functools.partial(
        lambda name: (formats.read, (_written(name), name), READ_OPTIONS), _name
    )
    CASES[f"formats.write[{_name}]"] = functools.partial(
        lambda name: (formats.write, (ROUTES, name), _write_options(name)), _name
    )

# Callables with no bound on their input: a 2**31-element broadcast view is a request for that much work.
UNBOUNDED = frozenset(
    {
        "encode_routes",
        "encode_routes_frame",
        "encode_array",
        "encode_logprobs",
        "clamp_logprobs",
        "build_logprobs_content",
        "dumps",
        "iter_dumps",
        "formats.write",
        "bitpack.pack_bits",
        "synthetic_routes",
    }
)
# unpack_bits_from allocates its count ids up front (documented): a valid count of 2**31 is a 2 GiB request.
SKIP = frozenset({("bitpack.unpack_bits_from", "count", "2**31")})

# Known escapes, each a finding not fixed yet: (case, argument, value) -> the finding. Each must still escape
# (strict), so a fix makes this test ask for its entry to be removed.
KNOWN: dict[tuple[str, str, str], str] = {}


def _base(case: str) -> str:
    return case.partition("/")[0].partition("[")[0]


# ---------------------------------------------------------------------------------------------------------------------
# running one call


class _Timeout(BaseException):
    """Raised by the per-call alarm; a BaseException so that no ``except Exception`` in the library swallows it."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Timeout(f"no result within {TIMEOUT} s")


@contextlib.contextmanager
def _alarm_handler() -> Iterator[bool]:
    """Install the alarm handler for the duration, yielding whether per-call timeouts are available: POSIX, the
    main thread, and no interval timer already armed by someone else."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
    )
    if not usable:
        yield False
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _call(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], alarm: bool
) -> tuple[str, Any, float, int]:
    """(status, value or exception, seconds, tracemalloc peak above the start) of ``fn(*args, **kwargs)``, with
    status "ok", "refused" (an R3WireError), "timeout" or "raised"."""
    tracemalloc.reset_peak()
    start_bytes = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    if alarm:
        signal.setitimer(signal.ITIMER_REAL, TIMEOUT)
    value: Any
    try:
        value, status = fn(*args, **kwargs), "ok"
    except _Timeout as exc:
        value, status = exc, "timeout"
    except R3WireError as exc:
        value, status = exc, "refused"
    except BaseException as exc:  # the point of the test: anything else is reported
        value, status = exc, "raised"
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
    seconds = time.perf_counter() - started
    return status, value, seconds, tracemalloc.get_traced_memory()[1] - start_bytes


def _message_problems(exc: R3WireError) -> list[str]:
    try:
        text = str(exc)
    except Exception as error:
        return [f"str() raised {type(error).__name__}"]
    problems = []
    if not text.strip():
        problems.append("empty message")
    if len(text) > MSG_LIMIT:
        problems.append(f"message of {len(text)} characters")
    for attr in ("field", "expected", "got"):
        value = getattr(exc, attr, None)
        if attr != "field" and value is None:
            problems.append(f"{attr} is None")
        if isinstance(value, str) and len(value) > MSG_LIMIT:
            problems.append(f"{attr} of {len(value)} characters")
    return problems


def _raised_by_read(exc: BaseException) -> bool:
    """Whether ``exc`` came out of the ``read`` callable unpack_bits_from was given: the last r3wire frame of its
    traceback is ``bitpack._read_range`` (which calls it), and no r3wire frame is deeper."""
    codes = []
    tb = exc.__traceback__
    while tb is not None:
        codes.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    ours = [i for i, code in enumerate(codes) if code.co_filename.startswith(_PACKAGE_DIR)]
    return bool(ours) and codes[ours[-1]].co_name == "_read_range" and codes[ours[-1]].co_filename == bitpack.__file__


def _slot_names(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, int | str]]:
    """Each argument of the baseline call, as (display name, position or keyword)."""
    try:
        params = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    slots: list[tuple[str, int | str]] = [(params[i] if i < len(params) else f"arg{i}", i) for i in range(len(args))]
    return slots + [(key, key) for key in kwargs]


def _fresh(value: Any) -> Any:
    return value.copy() if isinstance(value, (np.ndarray, dict, list)) else value


def _problem(case: str, slot: str, outcome: tuple[str, Any, float, int]) -> str | None:
    """What is wrong with one call's outcome (what :func:`_call` returned), or None."""
    status, value, seconds, peak = outcome
    if status == "raised" and isinstance(value, BoomError):
        return None  # the caller's own exception from the caller's own method, unchanged
    if status == "raised" and case == "bitpack.unpack_bits_from" and slot == "read" and _raised_by_read(value):
        return None  # documented: whatever read raises propagates
    if status in ("raised", "timeout"):
        return f"{status} {type(value).__name__}: {str(value)[:300]!r} ({seconds:.2f} s)"
    if peak > MEM_LIMIT:
        return f"{status} with a tracemalloc peak of {peak / 2**20:.0f} MiB"
    if seconds > TIMEOUT:
        return f"{status} after {seconds:.2f} s (a loop the alarm could not interrupt)"
    if status == "refused":
        problems = _message_problems(value)
        if problems:
            return f"refused with {', '.join(problems)}: {str(value)[:200]!r}"
    return None


# ---------------------------------------------------------------------------------------------------------------------
# the test


@pytest.fixture
def traced() -> Iterator[None]:
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        yield
    finally:
        if started:
            tracemalloc.stop()


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize("case", list(CASES))
def test_hostile_argument_gives_r3wire_error(case: str) -> None:
    if any(name in case for name in _NEEDS_ZSTD):
        pytest.importorskip("zstandard")
    build = CASES[case]
    escapes: list[str] = []
    with warnings.catch_warnings(), _alarm_handler() as alarm:
        warnings.simplefilter("error")  # a NumPy warning (a silent cast, say) is an escape too
        fn, args, kwargs = build()
        status, value, *_ = _call(fn, tuple(map(_fresh, args)), {k: _fresh(v) for k, v in kwargs.items()}, alarm)
        assert status == "ok", f"baseline {case}: {status} {type(value).__name__}: {value}"
        for slot_name, slot in _slot_names(fn, args, kwargs):
            for value_name, make in POOL.items():
                if (case, slot_name, value_name) in SKIP or (value_name in BIG and _base(case) in UNBOUNDED):
                    continue
                fn, args, kwargs = build()
                call_args = [_fresh(a) for a in args]
                call_kwargs = {k: _fresh(v) for k, v in kwargs.items()}
                if isinstance(slot, int):
                    call_args[slot] = make()
                else:
                    call_kwargs[slot] = make()
                problem = _problem(case, slot_name, _call(fn, tuple(call_args), call_kwargs, alarm))
                key = (case, slot_name, value_name)
                if key in KNOWN:
                    if problem is None:
                        escapes.append(f"{case} {slot_name}={value_name}: no longer escapes ({KNOWN[key]}): drop it")
                elif problem is not None:
                    escapes.append(f"{case} {slot_name}={value_name}: {problem}")
    if escapes:
        pytest.fail(f"{len(escapes)} escape(s) from the library's contract:\n  " + "\n  ".join(escapes), pytrace=False)
