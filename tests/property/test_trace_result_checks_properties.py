"""Properties of ``RouteTrace.add_result`` on results it must check: given token ids are accepted exactly when
they agree with every id the response carries (the prompt's at the start, the completion's at the end), a
``ReadResult`` built from any field values is refused at construction or fully usable (only ``R3WireError``
from any method, ``add_result`` or ``formats.write``), and an error about the routes names an element of
``result.routes`` that holds the offending value, whatever ``layers`` selects."""

from __future__ import annotations

import contextlib
import re
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from r3wire import R3WireError, RouteTrace, formats

pytestmark = pytest.mark.property

Array = np.ndarray[Any, Any]
EXPERTS = 8
INT64_MAX = (1 << 63) - 1


def _agrees(given: list[int], prompt: list[int] | None, completion: list[int] | None) -> bool:
    """The rule, stated independently: each carried part at its place (both carried: exactly their join)."""
    if prompt is not None and (len(given) < len(prompt) or given[: len(prompt)] != prompt):
        return False
    if completion is None:
        return True
    if prompt is not None:
        return given[len(prompt) :] == completion
    return len(given) >= len(completion) and given[len(given) - len(completion) :] == completion


@given(
    sequence=st.lists(st.integers(0, 3), min_size=1, max_size=10),
    split=st.integers(0, 10),
    carried=st.sampled_from(["none", "prompt", "completion", "both"]),
    data=st.data(),
)
def test_given_token_ids_are_taken_iff_they_agree_with_every_carried_part(
    sequence: list[int], split: int, carried: str, data: st.DataObject
) -> None:
    split = min(split, len(sequence))
    prompt = sequence[:split] if carried in ("prompt", "both") else None
    completion = sequence[split:] if carried in ("completion", "both") else None
    # The caller's tokens: the call's own, or changed (a token, a cut, an extension, anything), never empty.
    given_tokens = data.draw(
        st.one_of(
            st.just(sequence),
            st.lists(st.integers(0, 3), min_size=1, max_size=12),
            st.integers(0, len(sequence) - 1).flatmap(
                lambda at: st.integers(0, 3).map(lambda v: [*sequence[:at], v, *sequence[at + 1 :]])
            ),
            st.integers(1, len(sequence)).map(lambda n: sequence[:n]),
            st.integers(0, len(sequence) - 1).map(lambda n: sequence[n:]),
            st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda extra: [*extra, *sequence]),
            st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda extra: [*sequence, *extra]),
        ),
        label="token_ids",
    )
    result = formats.ReadResult(
        # Rows from start 0 to the given call's last forwarded token: where an engine's rows end.
        routes=np.zeros((len(given_tokens) - 1, 1, 1), dtype=np.uint8),
        format="x",
        prompt_token_ids=None if prompt is None else np.array(prompt, dtype=np.int64),
        token_ids=None if completion is None else np.array(completion, dtype=np.int64),
    )
    trace = RouteTrace(num_experts=EXPERTS)
    if _agrees(given_tokens, prompt, completion):
        trace.add_result(result, token_ids=given_tokens, start=0)
        assert trace.token_ids is not None
        assert trace.token_ids.tolist() == given_tokens
        return
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, token_ids=given_tokens, start=0)
    assert trace.rows == 0
    assert trace.token_ids is None
    field = caught.value.field
    assert field is not None
    indexed = re.fullmatch(r"token_ids\[(\d+)\]", field)
    if indexed is None:
        assert field == "token_ids"  # a length that cannot hold a carried part at its place
        return
    at = int(indexed.group(1))
    assert caught.value.got == str(given_tokens[at])
    # The named position is where the given token differs from the carried one expected there.
    if prompt is not None and at < len(prompt):
        assert given_tokens[at] != prompt[at]
    else:
        assert completion is not None
        first = len(prompt) if prompt is not None else len(given_tokens) - len(completion)
        assert given_tokens[at] != completion[at - first]


@given(n=st.integers(1, 12), rows=st.integers(0, 12), start=st.integers(0, 12), split=st.integers(0, 12))
def test_a_start_given_for_rows_without_one_is_taken_iff_it_ends_them_where_an_engine_does(
    n: int, rows: int, start: int, split: int
) -> None:
    # A call of n tokens (prompt + completion in the body) whose format carries no start, as vLLM's and SGLang's;
    # the trace already holds rows 0 .. start - 1 (no gap), recorded with their tokens.
    sequence = list(range(100, 100 + n))
    split = min(split, n)
    assume(start + rows <= n and start < n)  # rows that fit the call: anything else is refused as not fitting
    result = formats.ReadResult(
        routes=np.full((rows, 1, 1), 1, dtype=np.uint8),
        format="x",
        prompt_token_ids=np.array(sequence[:split], dtype=np.int64),
        token_ids=np.array(sequence[split:], dtype=np.int64),
    )
    trace = RouteTrace(num_experts=EXPERTS)
    trace.add(np.full((start, 1, 1), 1, dtype=np.uint8), start=0, token_ids=sequence[: start + 1])
    if start + rows in (n - 1, n):
        trace.add_result(result, start=start)
        assert trace.rows == max(start, start + rows)
        return
    with pytest.raises(R3WireError) as caught:
        trace.add_result(result, start=start)
    assert caught.value.field == "start"
    assert caught.value.got == str(start)
    assert f"{n} token ids, {rows} rows" in str(caught.value.expected)
    assert trace.rows == start  # unchanged


MA: Any = np.ma  # untyped in NumPy 1.24's stubs

# Values of every kind for every field: the right ones, and what a hand-built result may hold by mistake.
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.just(np.int64(3)),
    st.just(np.array(2)),
    st.just(np.array([2.5, 3.5])),
    st.just(np.array([[1, 2]])),
    st.just(np.array(["1", "2"])),
    st.just(np.array([1 << 63], dtype=np.uint64)),
    st.just(np.array([-1, 5], dtype=np.int16)),
    st.just(MA.masked_array([1, 2], mask=[False, True])),
    st.just(np.broadcast_to(np.int64(1), (5,))),
    st.just(np.ones(3, dtype=bool)),
    st.just(np.zeros((3, 2, 2), dtype=np.float32)),
    st.just(np.ones((3, 2), dtype=bool)),
    st.just([1, 2, 3]),
    st.just(("choices", 0)),
)


def _random_routes(shape: tuple[int, int, int], low: int, high: int, dtype: str, seed: int) -> Array:
    return np.asarray(np.random.default_rng(seed).integers(low, high, shape)).astype(dtype)


def _routes() -> st.SearchStrategy[Array]:
    """Routes of any integer dtype and small shape: mostly valid ids, sometimes -1 or ids past EXPERTS."""
    return st.builds(
        _random_routes,
        st.tuples(st.integers(0, 4), st.sampled_from([1, 1, 2, 3, 1, 2, 0]), st.sampled_from([1, 2, 1, 2, 0])),
        st.sampled_from([0, 0, 0, -1]),
        st.sampled_from([EXPERTS, EXPERTS, EXPERTS, EXPERTS + 2]),
        st.sampled_from(["uint8", "int8", "int16", "uint16", "int32", "int64", "uint64", ">i4"]),
        st.integers(0, 2**32 - 1),
    )


FIELDS = (
    "routes", "format", "start", "mask", "total_tokens", "num_experts", "bits", "path", "token_ids",
    "prompt_token_ids", "logprobs", "num_clamped", "parts",
)  # fmt: skip


def _valid_fields(draw: st.DrawFn, rows: int, call: list[int]) -> dict[str, Any]:
    """Values a reader could have given each field (any subset of the optional ones); token ids mostly the
    prompt and completion of ``call``."""
    split = draw(st.integers(0, len(call)))
    dtype = draw(st.sampled_from(["int64", "uint64", "int32"]))
    logprobs = draw(st.none() | st.integers(0, 3).map(lambda n: np.zeros(n, dtype=np.float32)))
    valid = {
        "start": st.integers(0, 5),
        "mask": st.lists(st.booleans(), min_size=rows, max_size=rows).map(lambda bits: np.array(bits, dtype=bool)),
        "total_tokens": st.integers(0, 9),
        "num_experts": st.sampled_from([EXPERTS, 4, np.int64(EXPERTS)]),
        "bits": st.integers(1, 8),
        "path": st.just("$.choices[0].routed_experts"),
        "token_ids": st.just(np.array(call[split:], dtype=dtype)),
        "prompt_token_ids": st.just(np.array(call[:split], dtype=dtype)),
        "num_clamped": st.integers(0, 0 if logprobs is None else logprobs.shape[0]),
        "parts": st.just(("choices", 0, "routed_experts")),
    }
    chosen = draw(st.sets(st.sampled_from(sorted(valid))))
    if draw(st.booleans()):
        chosen |= {"token_ids", "prompt_token_ids"}  # the call's ids in full, as vLLM and SGLang send them
    fields = {name: draw(valid[name]) for name in sorted(chosen)}
    if logprobs is not None:
        fields["logprobs"] = logprobs
    return fields


@st.composite
def _read_result_fields(draw: st.DrawFn) -> tuple[dict[str, Any], list[int] | None]:
    """Keyword arguments for ReadResult (valid ones with, now and then, one or two fields of any odd value), and
    the token ids a caller passes with it: none, the call's (which its rows fit) or any."""
    routes = draw(_routes())
    call = draw(st.lists(st.integers(0, 9), min_size=routes.shape[0] + 1, max_size=routes.shape[0] + 1))
    fields = {"routes": routes, "format": "x", **_valid_fields(draw, routes.shape[0], call)}
    odd = draw(st.dictionaries(st.sampled_from(FIELDS), ODD_VALUES, max_size=2) | st.just({}))
    given_tokens = draw(st.sampled_from([None, call, call, []]))
    if given_tokens == []:
        given_tokens = draw(st.lists(st.integers(0, 9), max_size=8))
    return fields | odd, given_tokens


def _constructed(kwargs: dict[str, Any]) -> formats.ReadResult | R3WireError:
    try:
        return formats.ReadResult(**kwargs)
    except R3WireError as exc:
        return exc


@given(
    built=_read_result_fields(),
    start=st.one_of(st.none(), st.none(), st.integers(0, 4)),
    layers=st.integers(0, 9).flatmap(
        lambda n: (
            st.one_of(ODD_VALUES, st.lists(st.integers(0, 2), max_size=3))
            if n == 0
            else st.sampled_from([None, None, None, slice(1, None), [0], slice(None, None, -1)])
        )
    ),
    max_elements=st.none() | st.none() | st.integers(0, 40),
)
def test_a_read_result_is_refused_when_built_or_usable_everywhere(
    built: tuple[dict[str, Any], list[int] | None],
    start: int | None,
    layers: Any,
    max_elements: int | None,
) -> None:
    kwargs, given_tokens = built
    result = _constructed(kwargs)
    if isinstance(result, R3WireError):
        assert str(result.field).startswith("ReadResult.")
        event("refused at construction")
        return
    # Built: every field holds what its description says, and nothing below raises anything but R3WireError.
    assert isinstance(result.routes, np.ndarray)
    assert result.routes.ndim == 3
    assert result.routes.dtype.kind in "iu"
    for name in ("start", "total_tokens", "num_experts", "bits", "num_clamped"):
        value = getattr(result, name)
        assert value is None or type(value) is int
    present = result.route_mask()
    assert present.shape == result.routes.shape
    prompt, completion = result.prompt_token_ids, result.token_ids
    if prompt is None or completion is None:
        with pytest.raises(R3WireError, match="a response without them"):
            result.call_token_ids()
    elif max([*prompt.tolist(), *completion.tolist(), 0]) > INT64_MAX:
        with pytest.raises(R3WireError, match="a token id <= "):
            result.call_token_ids()  # a hand-built uint64 id past int64: refused, never wrapped
    else:
        joined = result.call_token_ids()
        assert joined.dtype == np.int64
        assert joined.tolist() == [*prompt.tolist(), *completion.tolist()]  # exact values
    trace = RouteTrace(num_experts=EXPERTS, max_elements=max_elements)
    try:
        trace.add_result(result, token_ids=given_tokens, start=start, layers=layers)
    except R3WireError:
        assert trace.rows == 0
        event("built, add_result refused")
    else:
        event("built and recorded")
        recorded = trace.token_ids
        assert recorded is not None
        assert recorded.tolist() == (given_tokens if given_tokens is not None else result.call_token_ids().tolist())
    for name in ("r3wire", "prime-rl", "fireworks-matrices"):
        with contextlib.suppress(R3WireError):
            formats.write(result, name)


@given(
    n_layers=st.integers(1, 5),
    top_k=st.integers(1, 3),
    rows=st.integers(1, 4),
    data=st.data(),
)
def test_an_error_about_the_routes_names_an_element_of_result_routes_holding_the_value(
    n_layers: int, top_k: int, rows: int, data: st.DataObject
) -> None:
    routes = np.zeros((rows, n_layers, top_k), dtype=np.int16)
    routes[...] = np.arange(top_k, dtype=np.int16)
    selection = data.draw(
        st.one_of(
            st.none(),
            st.builds(slice, st.none() | st.integers(0, n_layers - 1), st.none()),
            st.lists(st.integers(0, n_layers - 1), min_size=1, max_size=n_layers, unique=True).map(sorted),
        ),
        label="layers",
    )
    picked = list(range(n_layers))[selection] if isinstance(selection, slice) else selection or list(range(n_layers))
    # One bad element in the selected layers: an id out of range, or a -1 in a row that is not -1 throughout.
    row = data.draw(st.integers(0, rows - 1), label="row")
    layer = data.draw(st.sampled_from(picked), label="layer")
    slot = data.draw(st.integers(0, top_k - 1), label="slot")
    bad = data.draw(st.sampled_from([EXPERTS, EXPERTS + 5, -1, -3]), label="bad id")
    assume(bad != -1 or len(picked) * top_k > 1)  # a lone -1 slot is a whole missing row: not an error
    routes[row, layer, slot] = bad
    result = formats.ReadResult(
        routes=routes,
        format="x",
        prompt_token_ids=np.arange(1, dtype=np.int64),
        token_ids=np.arange(1, rows + 1, dtype=np.int64),
    )
    with pytest.raises(R3WireError) as caught:
        RouteTrace(num_experts=EXPERTS).add_result(result, layers=selection)
    field = caught.value.field
    assert field is not None
    named = re.fullmatch(r"result\.routes\[row (\d+), layer (\d+), slot (\d+)\]", field)
    assert named is not None, field
    at = tuple(int(part) for part in named.groups())
    assert at[1] in picked
    assert str(routes[at]) == caught.value.got
    assert at == (row, layer, slot)


def _peak_of(call: Callable[[], object]) -> tuple[BaseException | None, int]:
    """The exception ``call`` raised (or None) and the peak traced memory while it ran."""
    tracemalloc.start()
    error: BaseException | None = None
    try:
        call()
    except Exception as exc:  # returned for the caller to assert on
        error = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return error, peak


@given(
    shape=st.tuples(st.integers(0, 2**34), st.integers(1, 64), st.integers(1, 8)),
    carried=st.tuples(st.none() | st.integers(0, 2**34), st.none() | st.integers(0, 2**34)),
    given_tokens=st.none() | st.integers(1, 2**34),
    layers=st.none() | st.builds(slice, st.integers(0, 3), st.none()) | st.just([0]),
    max_elements=st.integers(0, 64),
)
def test_add_results_memory_is_bounded_by_the_traces_max_elements_whatever_the_result_declares(
    shape: tuple[int, int, int],
    carried: tuple[int | None, int | None],
    given_tokens: int | None,
    layers: Any,
    max_elements: int,
) -> None:
    # Broadcast views declare any size in no memory: every id add_result selects, joins or compares beyond the
    # trace's bound would be a real allocation.
    def ids(count: int | None) -> Array | None:
        return None if count is None else np.broadcast_to(np.int64(1), (count,))

    prompt, completion = carried
    result = formats.ReadResult(
        routes=np.broadcast_to(np.uint8(0), shape), format="x", prompt_token_ids=ids(prompt), token_ids=ids(completion)
    )
    trace = RouteTrace(max_elements=max_elements)
    error, peak = _peak_of(lambda: trace.add_result(result, token_ids=ids(given_tokens), layers=layers, start=0))
    assert error is None or isinstance(error, R3WireError), repr(error)
    assert peak < 1 << 18  # 64 ids and 64 tokens at most, and the bookkeeping around them
    if error is None:
        assert trace.finalize()[0].size <= max_elements


@given(
    n=st.integers(2, 40),
    data=st.data(),
    label=st.integers(-3, 3),
    given_extra=st.integers(0, 3),
)
def test_a_delta_is_stitched_exactly_when_its_start_and_the_calls_tokens_agree(
    n: int, data: st.DataObject, label: int, given_extra: int
) -> None:
    # prime-rl's rows run from start to the call's last forwarded token (n - 1 - start rows). The sidecar's start
    # may be labelled off (`label`) and the caller may pass more tokens than the call's (`given_extra`): the rows
    # are stitched at their true place, or the call is refused; never stitched off by some tokens.
    rng = np.random.default_rng(n)
    truth = rng.integers(0, EXPERTS, size=(n + 3, 1, 2), dtype=np.uint8)
    tokens = list(range(1000, 1000 + n + 3))
    true_start = data.draw(st.integers(0, n - 2))
    stated = true_start + label
    assume(stated >= 0)
    rows = truth[true_start : n - 1]
    result = formats.ReadResult(routes=rows, format="prime-rl", start=stated)
    trace = RouteTrace(num_experts=EXPERTS)
    if true_start:
        trace.add(truth[:true_start], start=0, token_ids=tokens[: true_start + 1])
    try:
        trace.add_result(result, token_ids=tokens[: n + given_extra])
    except R3WireError:
        assert (label, given_extra) != (0, 0)
        return
    assert (label, given_extra) == (0, 0)
    assert np.array_equal(trace.finalize()[0], truth[: n - 1])
