"""Properties of Fireworks r3/v1's produced-by indexing: the payload's matrix for token ``t`` is the routing of the
forward pass that sampled token ``t``, which ran at position ``t - 1`` (fw-ai-external/python-sdk ``deployment.py``
@04f221ac ``sample_with_tokens``; fw-ai/cookbook ``router_replay.py`` @0ae69ef4; eval-protocol ``r3_deserializer.py``
and its ``TestRoundTrip`` @3393c047). Payloads here are built by hand with ``struct`` and ``zstandard``, never with
r3wire's writer, the way the gateway lays them out."""

from __future__ import annotations

import base64
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from r3wire import RouteTrace, formats
from r3wire.formats import ReadResult

zstandard = pytest.importorskip("zstandard")

pytestmark = pytest.mark.property

Array = np.ndarray[Any, Any]
EXPERTS = 16
ALL, SUFFIX, BITMAP = 0, 1, 2
HEADER = struct.Struct("<4sBBBBIIIIQ")
MANIFEST = {"PayloadVersion": "r3/v1", "Compression": "zstd"}


def _router(tokens: list[int], layers: int, top_k: int) -> Array:
    """A toy router: position ``p``'s row depends only on ``tokens[: p + 1]`` (what a causal forward pass at ``p``
    sees), distinct experts per layer. ``len(tokens) - 1`` rows: the last token is never forwarded."""
    rows = np.empty((max(len(tokens) - 1, 0), layers, top_k), dtype=np.uint8)
    for p in range(rows.shape[0]):
        rng = np.random.default_rng(abs(hash(tuple(tokens[: p + 1]))))
        rows[p] = np.stack([rng.permutation(EXPERTS)[:top_k] for _ in range(layers)])
    return rows


def _entries(tokens: list[int], layers: int, top_k: int, sent: list[bool]) -> list[Array | None]:
    """The gateway's per-token list (eval-protocol's ``RouterReplayData``): entry ``t`` is the matrix of the pass
    that produced token ``t``, position ``t - 1``'s routing; token 0's entry, produced by no pass, is arbitrary
    (Fireworks' "unconditional first-token entry"). ``None`` where ``sent`` is false."""
    rows = _router(tokens, layers, top_k)
    first = np.full((layers, top_k), EXPERTS - 1, dtype=np.uint8)  # whatever the engine put there
    return [None if not keep else first if t == 0 else rows[t - 1] for t, keep in enumerate(sent)]


def _payload(entries: list[Array | None], mode: int, layers: int, top_k: int) -> bytes:
    """The r3/v1 blob of ``entries`` in ``mode`` (SUFFIX: ``entries`` is ``None`` up to its start, then all set;
    ALL: all set)."""
    total = len(entries)
    present = [t for t, entry in enumerate(entries) if entry is not None]
    selector = b""
    first = 0
    if mode == BITMAP:
        selector = np.packbits(np.array([e is not None for e in entries], dtype=bool), bitorder="little").tobytes()
    elif mode == SUFFIX:
        first = present[0] if present else total
    matrix = b"".join(np.ascontiguousarray(entries[t], dtype="<u1").tobytes() for t in present)
    header = HEADER.pack(b"R3V1", 1, mode, 1, 1, total, len(present), first, len(selector), len(matrix))
    blob = header + selector + matrix
    assert len(matrix) == len(present) * layers * top_k
    data: bytes = zstandard.ZstdCompressor().compress(blob)
    return data


def _draw_case(data: st.DataObject) -> tuple[list[int], int, int, int, list[bool], int]:
    """Tokens (prompt + completion), layers, top_k, the prompt length, which tokens have an entry, the mode."""
    layers = data.draw(st.integers(1, 3), label="layers")
    top_k = data.draw(st.integers(1, 3), label="top_k")
    n = data.draw(st.integers(1, 20), label="tokens")
    tokens = data.draw(st.lists(st.integers(0, 999), min_size=n, max_size=n), label="token ids")
    prompt = data.draw(st.integers(1, n), label="prompt tokens")
    mode = data.draw(st.sampled_from([ALL, SUFFIX, BITMAP]), label="mode")
    if mode == ALL:
        sent = [True] * n
    elif mode == SUFFIX:
        # The gateway's layout (None for the prompt, a matrix per completion token), or any other suffix.
        begin = data.draw(st.one_of(st.just(prompt), st.integers(0, n)), label="replay_start_token")
        sent = [t >= begin for t in range(n)]
    else:
        sent = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="bits")
    return tokens, layers, top_k, prompt, sent, mode


def _direct(blob: bytes, as_trace: bool, layers: int, top_k: int) -> ReadResult:
    text = base64.b64encode(blob).decode()
    body: dict[str, Any] = (
        {"payloads": {"router_replay": {"manifest": MANIFEST, "data": text}}} if as_trace else {"routed_experts": text}
    )
    [result] = formats.read_response(body, num_layers=layers, top_k=top_k)
    return result


def _placed(result: ReadResult, n: int) -> tuple[Array, Array]:
    """A result's rows as the ``n - 1`` positions of its sequence, and which of them it replays."""
    start = result.start or 0
    dense = np.zeros((max(n - 1, 0), *result.routes.shape[1:]), dtype=result.routes.dtype)
    mask = np.zeros(max(n - 1, 0), dtype=bool)
    rows = result.routes.shape[0]
    dense[start : start + rows] = result.routes
    mask[start : start + rows] = True if result.mask is None else result.mask
    return dense, mask


def _recorded(result: ReadResult, tokens: list[int], prefix: Array, start: int | None = None) -> tuple[Array, Array]:
    """``result`` recorded by ``RouteTrace.add_result`` after ``prefix`` (the rows before its start, from another
    call), finalized at the call's tokens: the trace's rows and which of them were replayed."""
    trace = RouteTrace(num_experts=EXPERTS)
    if prefix.shape[0]:
        trace.add(prefix, start=0, token_ids=tokens[: prefix.shape[0] + 1])
    trace.add_result(result, token_ids=tokens, start=start)
    assert trace.conflicts == 0
    routes, captured = trace.finalize(len(tokens))
    replayed = np.ones(captured, dtype=bool) if trace.replayed is None else trace.replayed
    return routes, replayed


@given(data=st.data(), as_trace=st.booleans())
def test_each_replayed_row_is_the_routing_at_its_position(data: st.DataObject, as_trace: bool) -> None:
    tokens, layers, top_k, _prompt, sent, mode = _draw_case(data)
    n = len(tokens)
    truth = _router(tokens, layers, top_k)
    result = _direct(_payload(_entries(tokens, layers, top_k, sent), mode, layers, top_k), as_trace, layers, top_k)
    assert result.total_tokens == n
    start = result.start or 0
    routes, replayed = _recorded(result, tokens, truth[:start])
    # Position p's row is token p + 1's entry: token 0's (no pass produced it) is never a row.
    expected = np.zeros(n - 1, dtype=bool)
    expected[:start] = True  # the prefix call's rows
    expected |= np.array(sent[1:], dtype=bool)
    assert replayed.tolist() == expected.tolist()
    assert routes.shape[0] <= n - 1  # never a row at the last sampled token
    assert np.array_equal(routes[replayed], truth[replayed])


def _eval_protocol_list(entries: list[Array | None]) -> list[str | None]:
    """eval-protocol's ``decompress_and_parse_r3`` layout: ``total_token_count`` entries, the base64 of each
    replayed token's matrix at its own token index, ``None`` elsewhere."""
    return [None if entry is None else base64.b64encode(entry.tobytes()).decode() for entry in entries]


@given(data=st.data())
def test_fireworks_decoder_list_less_its_first_entry_reads_as_the_payload_does(data: st.DataObject) -> None:
    # Review 12b S1-2: the per-token list Fireworks' decoder makes from a payload, less its first entry (as Fireworks'
    # SDK trains on it), read by fireworks-matrices and placed from 0, is cell for cell the direct r3/v1 reading.
    tokens, layers, top_k, _prompt, sent, mode = _draw_case(data)
    n = len(tokens)
    entries = _entries(tokens, layers, top_k, sent)
    direct = _direct(_payload(entries, mode, layers, top_k), False, layers, top_k)
    matrices = formats.read(_eval_protocol_list(entries)[1:], "fireworks-matrices", num_layers=layers, top_k=top_k)
    dense, mask = _placed(direct, n)
    other_dense, other_mask = _placed(matrices, n)
    assert mask.tolist() == other_mask.tolist()
    assert np.array_equal(dense[mask], other_dense[mask])
    # And as traces: the same rows recorded, whatever placed them (a prefix call covers what precedes a start).
    prefix = _router(tokens, layers, top_k)[: direct.start or 0]
    routes, replayed = _recorded(direct, tokens, prefix)
    other_routes, other_replayed = _recorded(matrices, tokens, prefix, start=0)
    assert replayed.tolist() == other_replayed.tolist()
    assert np.array_equal(routes[replayed], other_routes[replayed])


def _inner(payload: object) -> tuple[tuple[Any, ...], bytes]:
    text = payload["data"] if isinstance(payload, dict) else payload
    assert isinstance(text, str)
    blob: bytes = zstandard.ZstdDecompressor().decompress(base64.b64decode(text))
    return HEADER.unpack(blob[: HEADER.size]), blob[HEADER.size :]


@given(data=st.data(), name=st.sampled_from(["fireworks-r3v1", "fireworks-trace"]))
def test_writer_is_the_readers_inverse(data: st.DataObject, name: str) -> None:
    layers = data.draw(st.integers(1, 3), label="layers")
    top_k = data.draw(st.integers(1, 3), label="top_k")
    rows = data.draw(st.integers(0, 12), label="rows")
    routes = np.asarray(
        data.draw(st.lists(st.integers(0, 255), min_size=rows * layers * top_k, max_size=rows * layers * top_k)),
        dtype=np.uint8,
    ).reshape(rows, layers, top_k)
    how = data.draw(st.sampled_from(["from zero", "start", "mask"]), label="how")
    start = data.draw(st.integers(0, 5), label="start") if how == "start" else None
    mask = (
        np.array(data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows)), dtype=bool)
        if how == "mask"
        else None
    )
    extra = data.draw(st.integers(0, 3), label="tokens past the rows' last") if how == "start" else 0
    total = (start or 0) + rows + 1 + extra
    payload = formats.write(routes, name, start=start, mask=mask, total_tokens=total if extra else None)
    # On the wire: position p's row is the matrix of token p + 1 (the token it produced).
    (_, _, mode, _, _, wire_total, replayed, first, _, _), body = _inner(payload)
    if how == "from zero" and not rows:
        # No rows and no start: ALL with nothing replayed, an empty sequence unless total_tokens says otherwise.
        assert (mode, wire_total, replayed) == (ALL, 0, 0)
        return
    assert wire_total == total
    if mask is None:
        assert (mode, first, replayed) == (SUFFIX, (start or 0) + 1, rows)
    else:
        bits = np.unpackbits(np.frombuffer(body[: -(-total // 8)], dtype=np.uint8), bitorder="little")[:total]
        assert (mode, bits[0]) == (BITMAP, 0)
        assert bits[1:].astype(bool).tolist() == mask.tolist()
    back = formats.read(payload, name, num_layers=layers, top_k=top_k)
    assert (back.start, back.total_tokens) == (None if mask is not None else start or 0, total)
    assert (None if back.mask is None else back.mask.tolist()) == (None if mask is None else mask.tolist())
    kept = np.ones(rows, dtype=bool) if mask is None else mask
    assert np.array_equal(back.routes[kept], routes[kept])
    # Written again from the result, every Fireworks form reads back to the same placement.
    for target in ("fireworks-r3v1", "fireworks-trace", "fireworks-matrices"):
        again = formats.read(formats.write(back, target), target, num_layers=layers, top_k=top_k)
        assert again.total_tokens == (None if target == "fireworks-matrices" else total)
        dense, placed = _placed(back, total)
        other_dense, other_placed = _placed(again, total)
        assert placed.tolist() == other_placed.tolist()
        assert np.array_equal(dense[placed], other_dense[placed])
    listed = formats.write(back, "fireworks-matrices")
    assert isinstance(listed, list)
    assert len(listed) == total - 1  # one entry per position: the list add_result places from 0 on its own


@given(data=st.data())
def test_a_read_payload_converts_to_prime_rl_with_its_position(data: st.DataObject) -> None:
    # A SUFFIX's start is a position (replay_start_token - 1): prime-rl's start, the same rows, one token earlier
    # than replay_start_token.
    tokens, layers, top_k, _prompt, _sent, _mode = _draw_case(data)
    n = len(tokens)
    begin = data.draw(st.integers(1, n), label="replay_start_token")
    entries = _entries(tokens, layers, top_k, [t >= begin for t in range(n)])
    result = formats.read(base64.b64encode(_payload(entries, SUFFIX, layers, top_k)).decode(), num_layers=layers,
                          top_k=top_k)  # fmt: skip
    assert result.start == begin - 1
    prime = formats.read(formats.write(result, "prime-rl"), "prime-rl")
    assert prime.start == begin - 1
    assert np.array_equal(prime.routes, _router(tokens, layers, top_k)[begin - 1 :])
