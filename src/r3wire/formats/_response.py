"""Where engines put routes in a response body, and what they put beside them.

:func:`find_routes` walks a parsed body in document order and yields every routes field with its JSONPath and the
objects around it (from the nearest enclosing list, i.e. the choice, down to the object holding the field);
:func:`beside_routes` reads the choice's token ids, its prompt's token ids and its sampled logprobs from those
objects, nearest first, holds the logprobs to one per token id, and :func:`check_call_fits` holds the routes to
the call those token ids make. :func:`r3wire.formats.read_response` reads each field with
:func:`r3wire.formats.read`.

The nesting each engine uses is listed, with sources, in ``docs/formats.md`` ("Whole responses").
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np

from r3wire._jsonpath import json_path as _path
from r3wire._typeset import is_mapping, types_within
from r3wire._validate import member, member_items
from r3wire._walk import EXIT, Guard, copy_list, holds_any, own_len
from r3wire.arrays import decode_array
from r3wire.errors import DecodeError, R3WireError
from r3wire.logprobs import (
    LOGPROB_FLOOR,
    ClampResult,
    _clamp,
    clamp_logprobs,
    decode_logprobs,
    logprob_value,
    read_logprobs_content,
)
from r3wire.response import _relocate
from r3wire.schema import ARRAY_SCHEMA, KEY_SCHEMA, LOGPROBS_SCHEMA, ROUTES_SCHEMA

__all__ = [
    "ROUTES_FIELDS",
    "Beside",
    "Found",
    "beside_routes",
    "check_call_fits",
    "check_counts_fit",
    "find_routes",
    "relocated",
    "routes_identity",
]

KEY_ROUTED_EXPERTS: Final = "routed_experts"
KEY_ROUTED_EXPERTS_DTYPE: Final = "routed_experts_dtype"
KEY_ROUTER_REPLAY: Final = "router_replay"  # Fireworks trace: payloads.router_replay
KEY_ROUTING_MATRICES: Final = "routing_matrices"  # Fireworks decoder output, rLLM / tinker
ROUTES_FIELDS: Final = (KEY_ROUTED_EXPERTS, KEY_ROUTER_REPLAY, KEY_ROUTING_MATRICES)
"""The object keys whose values are routes, whatever object holds them (choice, message, meta_info, sgl_ext,
nvext, payloads); r3wire.routes envelopes are found under any key."""
# Nearest first within an object; vLLM and prime-rl say token_ids, SGLang output_ids.
TOKEN_ID_KEYS: Final = ("token_ids", "output_ids")
# The prompt's token ids: beside token_ids in a vLLM completions choice (return_token_ids), at the top of a vLLM chat
# response (shared by its choices), beside output_ids at the top of an SGLang /generate body (return_prompt_token_ids).
KEY_PROMPT_TOKEN_IDS: Final = "prompt_token_ids"
KEY_LOGPROBS: Final = "logprobs"
KEY_SGLANG_LOGPROBS: Final = "output_token_logprobs"
# SGLang meta_info's token counts (tokenizer_manager.py), beside routed_experts: a bound on its rows.
KEY_PROMPT_TOKENS: Final = "prompt_tokens"
KEY_COMPLETION_TOKENS: Final = "completion_tokens"  # SGLang meta_info: [[logprob, token_id, text], ...]
KEY_TOKEN_LOGPROBS: Final = "token_logprobs"  # OpenAI completions: logprobs.token_logprobs
KEY_CONTENT: Final = "content"  # OpenAI chat and vLLM generate: logprobs.content[i].logprob
_INT64_MAX: Final = (1 << 63) - 1
# Per-token side channels no engine nests routes in: never walked, so a 32k-token body with logprobs content costs
# the walk almost nothing. Beside the routes, only TOKEN_ID_KEYS, prompt_token_ids, logprobs and output_token_logprobs
# are read; the others (rLLM's prompt_ids / completion_ids, top-k and prompt logprobs) are not.
_NO_ROUTES_KEYS: Final = frozenset(
    {
        "token_ids",
        "output_ids",
        "prompt_token_ids",
        "prompt_ids",
        "completion_ids",
        "logprobs",
        "top_logprobs",
        "prompt_logprobs",
        "input_token_logprobs",
        "output_token_logprobs",
        "input_top_logprobs",
        "output_top_logprobs",
    }
)
# Lists at least this long are first sorted out by the types they hold, in C: a list of numbers or strings
# (token ids, text pieces) holds no routes and is skipped without a Python loop over it.
_LONG_LIST: Final = 16
# What the walk enters: any mapping (a dict subclass, MappingProxyType...), list or tuple, subclasses included.
_WALKED: Final = (Mapping, list, tuple)

_INT_ONLY: Final = frozenset({int})


# A node's path as a link to its parent's: (parent link, key or index), None at the root. Every node holds one
# link, never a copy of its parent's path; a copy per container made a deep body cost memory and time in the
# square of its depth (298 KB of JSON took 795 MB). Paths are written out only for what is returned or named.
_Link = tuple[Any, object] | None
# The objects from the enclosing list item down to a node: (the enclosing one's context, the object, its path).
_Context = tuple[Any, Mapping[str, Any], _Link] | None
# A stack item of find_routes: (is a routes field, node, link, routes key, context, the context outside the list).
_Item = tuple[bool, Any, _Link, str | None, _Context, _Context]
_EXIT: Final[_Item] = (False, EXIT, None, None, None, None)  # popping it leaves the container entered last


def _parts(link: _Link) -> tuple[object, ...]:
    parts: list[object] = []
    while link is not None:
        link, part = link
        parts.append(part)
    return tuple(reversed(parts))


@dataclass(frozen=True, slots=True)
class Found:
    """One routes field: its value, where it is, and the objects from the enclosing choice down to its holder."""

    value: Any
    parts: tuple[object, ...]
    key: str | None  # the routes key it was found under; None for an r3wire.routes envelope under another key
    context: _Context  # the holder (the innermost object), then outward to the enclosing list item
    # The object holding that enclosing list (a chat response holding its choices), then outward in the same way.
    outer: _Context = None

    @property
    def holder(self) -> Mapping[str, Any] | None:
        """The object holding the routes field (None for an envelope at the root or in a list)."""
        return None if self.context is None else self.context[1]

    def around(self) -> Iterator[tuple[Mapping[str, Any], _Link]]:
        """The objects from the holder outward to the enclosing list item, each with its path as a link."""
        return _walk_out(self.context)

    def outside(self) -> Iterator[tuple[Mapping[str, Any], _Link]]:
        """The objects around the list that holds the choice (the response holding ``choices``), nearest first."""
        return _walk_out(self.outer)


def _walk_out(context: _Context) -> Iterator[tuple[Mapping[str, Any], _Link]]:
    while context is not None:
        context, obj, link = context
        yield obj, link


def _is_routes_envelope(node: Mapping[str, Any]) -> bool:
    schema = member(node, KEY_SCHEMA)
    return type(schema) is str and schema == ROUTES_SCHEMA.name


def find_routes(root: object, guard: Guard | None = None) -> Iterator[Found]:
    """Every routes field of ``root`` in document order (the routes values themselves are not entered).

    ``guard`` is the walk's :class:`r3wire._walk.Guard` (made for ``root`` with :func:`r3wire.response._path`), for a
    caller that decodes what is found and counts it there (:func:`routes_identity`); a new one by default.

    Raises:
        DecodeError: ``root`` (a document built in process) holds a reference cycle, or shares containers past
            the bound of :class:`r3wire._walk.Guard`; the field is the JSONPath.
    """
    # An explicit stack (parsed bodies may nest deeper than the recursion limit), pushed in reverse so items come
    # off it in document order; a routes field is an item of its own so it keeps its place among its siblings.
    stack: list[_Item] = [(False, root, None, None, None, None)]
    if guard is None:
        guard = Guard(root, _path)
    while stack:
        entry = stack.pop()
        if entry is _EXIT:
            guard.leave()
            continue
        is_field, node, link, key, context, outer = entry
        entered = False
        if is_field:
            yield Found(node, _parts(link), key, context, outer)
            continue
        if is_mapping(node):
            if _is_routes_envelope(node):
                yield Found(node, _parts(link), None, context, outer)
                continue
            inner = (context, node, link)
            children: list[_Item] = []
            for child_key, item in member_items(node):
                if child_key == KEY_LOGPROBS:
                    _refuse_token_routing(item, (link, child_key))
                if child_key in ROUTES_FIELDS:
                    if item is not None:  # vLLM sends null when capture is off
                        children.append((True, item, (link, child_key), child_key, inner, outer))
                elif isinstance(item, _WALKED) and child_key not in _NO_ROUTES_KEYS:
                    if not entered:
                        entered = _enter(guard, node, stack)
                    guard.child(item, child_key)
                    children.append((False, item, (link, child_key), None, inner, outer))
        elif isinstance(node, (list, tuple)):  # an in-process document may build its arrays as tuples
            if own_len(node) >= _LONG_LIST and not holds_any(node, _WALKED):
                continue
            # A list starts a new context: one choice's token ids never belong to its sibling's routes. What holds
            # the list stays reachable as `outer`, for what a response shares among its choices (vLLM chat's prompt).
            shared = context if context is not None else outer
            children = []
            for i, item in enumerate(node):
                if isinstance(item, _WALKED):
                    if not entered:
                        entered = _enter(guard, node, stack)
                    guard.child(item, i)
                    children.append((False, item, (link, i), None, None, shared))
        else:
            continue
        stack.extend(reversed(children))


# Fireworks' completions API with include_routing_matrix=True: one base64 matrix in each logprobs.content entry.
KEY_TOKEN_ROUTING: Final = "routing_matrix"


def _refuse_token_routing(logprobs: object, link: _Link) -> None:
    """Refuse routes r3wire does not read, which a body would otherwise seem to hold none of: Fireworks'
    per-token ``logprobs.content[j].routing_matrix`` (fw-ai-external/python-sdk
    ``src/fireworks/training/sdk/deployment.py``, ``_extract_routing_matrices``, @04f221ac). Where their rows
    start depends on ``echo``, which the body does not state: without it the entries are the completion's (rows
    from the prompt's last token), with it every token's, the first produced by no forward pass.

    Raises:
        DecodeError: an entry carries ``routing_matrix``; the field is its path.
    """
    if not is_mapping(logprobs):
        return
    content = member(logprobs, KEY_CONTENT)
    if type(content) is not list:
        return
    at = next((i for i, entry in enumerate(content) if type(entry) is dict and KEY_TOKEN_ROUTING in entry), None)
    if at is None:
        return
    raise DecodeError.make(
        _path((*_parts(((link, KEY_CONTENT), at)), KEY_TOKEN_ROUTING)),
        "absent: r3wire does not read Fireworks' per-token routing_matrix, whose first row's token depends on "
        "echo; read [entry.get('routing_matrix') for entry in content] with formats.read(..., "
        "'fireworks-matrices') and place it with RouteTrace.add_result: without echo start=len(prompt) - 1, "
        "with echo drop the first entry (Fireworks' SDK does both)",
        "a routing matrix",
        raw=True,
    )


def routes_identity(found: Found) -> tuple[int, int]:
    """What reading ``found`` decodes, by identity: its value and, for a value under ``routed_experts``, the
    ``routed_experts_dtype`` beside it (a bare SGLang string's element type). Two fields with the same identity
    decode to the same array; the objects are kept alive by the document for the whole walk."""
    holder, value = found.holder, found.value
    dtype = None if holder is None or found.key != KEY_ROUTED_EXPERTS else holder.get(KEY_ROUTED_EXPERTS_DTYPE)
    if holder is not None and isinstance(value, (str, bytes)) and not value:
        # The empty string is one object wherever it is (CPython shares it; JSON text parses to it): only its
        # holder tells one empty SGLang value from another, or a choice reached again from a tree's next choice.
        return id(holder), id(dtype)
    return id(value), id(dtype)


def _enter(guard: Guard, node: object, stack: list[_Item]) -> bool:
    """Enter ``node`` before its first child container: the guard, then the exit marker."""
    guard.enter(node)
    stack.append(_EXIT)
    return True


def relocated(error: R3WireError, where: Sequence[object] | str) -> R3WireError:
    """``error`` with its field placed under ``where`` (path parts, or a path already written out)."""
    path = where if isinstance(where, str) else _path(where)
    # An index field ("[3]") follows the path directly; a key ("shape") after a dot.
    index = error.field is not None and error.field.startswith("[")
    return _relocate(error, path, prefix="" if index else None)


class Beside(NamedTuple):
    """What a response carries beside one routes field (each ``None`` where it carries none)."""

    token_ids: np.ndarray[Any, Any] | None  # the completion's: vLLM token_ids, SGLang output_ids
    prompt_token_ids: np.ndarray[Any, Any] | None
    logprobs: ClampResult | None
    token_ids_parts: tuple[object, ...] = ()  # where the token ids were read, for errors
    prompt_parts: tuple[object, ...] = ()


def beside_routes(found: Found, *, max_elements: int | None = None) -> Beside:
    """The token ids, prompt token ids and sampled logprobs beside ``found`` (each from the nearest object that has
    them), the logprobs aligned to the token ids.

    Token ids are read as int64, by one reader for both; logprobs as in :func:`_read_logprobs`, clamped. The
    token ids and logprobs come from the objects from the holder out to the choice; ``prompt_token_ids`` from those
    too (a vLLM completions choice, an SGLang ``/generate`` body), and else from the objects around the list of
    choices (a vLLM chat response, whose prompt all its choices share). When token ids and logprobs are both
    there, the logprobs must be one per token id: a shorter or longer list would put every logprob on the wrong
    token of a trainer's batch. The one shape that legitimately holds more is an echo (vLLM completions with
    ``echo``): its ``logprobs`` cover ``prompt_token_ids`` (beside the token ids, in the same object) and then the
    token ids, and only the token ids' own, the last ones, are returned. Only a ``logprobs`` value is read as an
    echo: SGLang's ``output_token_logprobs`` never is (SGLang has no echo). SGLang's ``[logprob, token_id, text]``
    entries must name the token id they pair with.

    Raises:
        DecodeError: a field is malformed or holds more ids than ``max_elements``, the logprobs are not one per
            token id, or an SGLang entry names another token id; the field is the JSONPath of the logprobs (or of
            the entry's token id, or of the malformed field).
    """
    ids = _near_token_ids(found, max_elements)
    prompt = _near_prompt_ids(found, max_elements)
    near = _near_logprobs(found, max_elements)
    prompt_ids, prompt_parts = (None, ()) if prompt is None else (prompt[0], prompt[1])
    if ids is None or near is None:
        token_ids, ids_parts = (None, ()) if ids is None else (ids[0], ids[1])
        result = None if near is None else near.result
        return Beside(token_ids, prompt_ids, result, ids_parts, prompt_parts)
    token_ids, ids_parts, holder = ids
    count, total = len(token_ids), len(near.result.values)
    result, skip = near.result, 0
    if total != count:
        # Only a prompt in the token ids' own object is echoed (vLLM completions); a chat response's is not, and
        # neither is an SGLang body's: SGLang has no echo (its prompt's logprobs are input_token_logprobs), so only a
        # `logprobs` value may hold one, never output_token_logprobs.
        echoes = near.key == KEY_LOGPROBS and prompt is not None and prompt[2] is holder
        echoed = prompt_ids if echoes else None
        if echoed is None or total != len(echoed) + count:
            expected = f"one logprob per token id ({count} at {_path(ids_parts)}"
            if echoed is not None:
                expected += f", or {len(echoed)} + {count} with the echoed prompt_token_ids"
            got = f"{total} logprob{'' if total == 1 else 's'}"
            raise DecodeError.make(_path(near.parts), expected + ")", got, raw=True)
        # An echo: the prompt's logprobs first (vLLM completions, echo=true), then the token ids' own. Read again
        # without the prompt's, so num_clamped counts only what is returned (the same value read whole above).
        skip = len(echoed)
        reread = _read_logprobs(near.key, near.value, max_elements, skip=skip)
        if reread is not None:
            result = reread.result
    if near.key == KEY_SGLANG_LOGPROBS:
        _check_entry_ids(near.value, skip, token_ids, near.parts, ids_parts)
    return Beside(token_ids, prompt_ids, result, ids_parts, prompt_parts)


# Formats whose payload states the start of its rows, which then end at n - 1 in a call of n tokens (when
# read_response has the call's prompt and completion ids): prime-rl's (and dynamo's vLLM backend, which forwards
# prime-rl's object) are n - 1 - start rows by definition, ending at the call's last forwarded token (docs/formats.md,
# "The call's token ids"); a Fireworks SUFFIX's rows too: its matrices are indexed by the token they produced, read
# as the positions before them (docs/formats.md, `fireworks-r3v1`), so its last row is the last forwarded token's.
_STATED_START_FORMATS: Final = frozenset({"prime-rl", "fireworks-r3v1", "fireworks-trace"})


def check_call_fits(
    rows: int, start: int | None, beside: Beside, routes_parts: tuple[object, ...], format_name: str | None = None
) -> None:
    """Hold routes to the engine call that ``beside``'s token ids make (prompt + completion), when both are there.

    Row ``r`` is the routing at position ``start + r`` of the call, so a call of ``n`` tokens has at most ``n``
    rows from position 0 (the engines send ``n - 1``: the last sampled token is never forwarded). More rows than
    that cannot belong to the call: the body's routes and token ids are misaligned. When the payload itself states
    the start (``format_name`` prime-rl, or a Fireworks SUFFIX), the rows must also end where that format's rows
    end: ``start + rows == n - 1`` (prime-rl sends ``n - 1 - start`` rows; a Fireworks SUFFIX's rows end there too). A
    stated start off by one, or rows stopping short, would otherwise put every row on another token.

    Raises:
        DecodeError: ``start + rows`` exceeds the call's token count, or misses the end a stated start's format
            puts it at; the field is the routes' JSONPath, the message names start, rows and both token counts.
    """
    if beside.token_ids is None or beside.prompt_token_ids is None:
        return
    prompt, completion = len(beside.prompt_token_ids), len(beside.token_ids)
    tokens, first = prompt + completion, start or 0
    counts = f"{prompt} at {_path(beside.prompt_parts)} + {completion} at {_path(beside.token_ids_parts)}"
    if first + rows > tokens:
        expected = (
            f"rows that fit the call: start + rows <= {tokens} tokens ({counts}; engines send one row fewer, the "
            "last sampled token is never forwarded)"
        )
        got = f"start {first} + {rows} rows = {first + rows}" if first else f"{rows} rows"
        raise relocated(DecodeError.make(None, expected, got, raw=True), routes_parts)
    if start is None or format_name not in _STATED_START_FORMATS or first + rows == tokens - 1:
        return
    expected = (
        f"rows that end at the call's last forwarded token: start + rows = {tokens - 1} ({tokens} tokens: {counts}; "
        f"{format_name} states its start, and its rows run from it to the call's last forwarded token, n - 1)"
    )
    got = f"start {first} + {rows} rows = {first + rows}"
    raise relocated(DecodeError.make(None, expected, got, raw=True), routes_parts)


def check_counts_fit(rows: int, start: int | None, found: Found) -> None:
    """Hold routes to the token counts their holder states (SGLang's ``meta_info``: ``prompt_tokens`` and
    ``completion_tokens``), for bodies without the token ids themselves: a call of ``n`` tokens has at most ``n``
    rows from position 0, as in :func:`check_call_fits`.

    SGLang sends ``prompt_tokens + completion_tokens - 1 - routed_experts_start_len`` rows and does not echo that
    start, so the exact count cannot be checked; this bound catches routes read with too small a
    ``num_layers * top_k`` (SGLang's string carries no shape: a wrong pair whose byte count divides evenly
    reshapes into more rows). Counts that are not both plain non-negative integers are not used.

    Raises:
        DecodeError: ``start + rows`` exceeds ``prompt_tokens + completion_tokens``; the field is the routes'
            JSONPath, the message names both counts' paths.
    """
    holder = found.holder
    if holder is None:
        return
    prompt, completion = holder.get(KEY_PROMPT_TOKENS), holder.get(KEY_COMPLETION_TOKENS)
    if type(prompt) is not int or type(completion) is not int or prompt < 0 or completion < 0:
        return
    tokens, first = prompt + completion, start or 0
    if first + rows <= tokens:
        return
    at = found.parts[:-1]
    expected = (
        f"rows that fit the call: start + rows <= {tokens} tokens ({prompt} at {_path((*at, KEY_PROMPT_TOKENS))} + "
        f"{completion} at {_path((*at, KEY_COMPLETION_TOKENS))}; SGLang sends prompt + completion - 1 - "
        "routed_experts_start_len rows: check num_layers and top_k, which its string does not carry)"
    )
    got = f"start {first} + {rows} rows = {first + rows}" if first else f"{rows} rows"
    raise relocated(DecodeError.make(None, expected, got, raw=True), found.parts)


def _check_entry_ids(
    entries: Sequence[Any],
    skip: int,
    token_ids: np.ndarray[Any, Any],
    parts: tuple[object, ...],
    ids_parts: tuple[object, ...],
) -> None:
    """SGLang's entry ``skip + i`` is ``[logprob, token_id, text]``: its token id, when given, is ``token_ids[i]``."""
    for i, token_id in enumerate(token_ids.tolist()):
        entry = entries[skip + i]
        if own_len(entry) < 2 or entry[1] is None:  # no token id: nothing to compare
            continue
        given = entry[1]
        if type(given) is not int or given != token_id:
            expected = f"the token id at {_path((*ids_parts, i))} ({token_id})"
            raise DecodeError.make(_path((*parts, skip + i, 1)), expected, given)


def _near_token_ids(
    found: Found, max_elements: int | None
) -> tuple[np.ndarray[Any, Any], tuple[object, ...], Mapping[str, Any]] | None:
    """The nearest token ids around ``found``: the array, its path parts and the object holding it."""
    for obj, link in found.around():
        for key in TOKEN_ID_KEYS:
            if key in obj and obj[key] is not None:
                parts = (*_parts(link), key)
                return _token_ids(obj[key], parts, max_elements), parts, obj
    return None


def _near_prompt_ids(
    found: Found, max_elements: int | None
) -> tuple[np.ndarray[Any, Any], tuple[object, ...], Mapping[str, Any]] | None:
    """The nearest ``prompt_token_ids`` around ``found``, else around its list of choices: the array, its path parts
    and the object holding it."""
    for obj, link in itertools.chain(found.around(), found.outside()):
        value = obj.get(KEY_PROMPT_TOKEN_IDS)
        if value is not None:  # vLLM sends null without return_token_ids
            parts = (*_parts(link), KEY_PROMPT_TOKEN_IDS)
            return _token_ids(value, parts, max_elements), parts, obj
    return None


def _token_ids(value: object, parts: tuple[object, ...], max_elements: int | None) -> np.ndarray[Any, Any]:
    """The one reader of token ids (completion and prompt alike): a list of integers in ``0 .. 2**63 - 1`` or an
    r3wire ``dumps`` integer array, as int64, at most ``max_elements`` of them."""
    if is_mapping(value) and member(value, KEY_SCHEMA) == ARRAY_SCHEMA.name:  # an r3wire dumps body
        try:
            array = decode_array(value, max_elements=max_elements)
        except DecodeError as exc:
            raise relocated(exc, parts) from exc
        if array.dtype.kind not in "iu" or array.ndim != 1:
            raise relocated(
                DecodeError.make(None, "a 1-d integer array", f"{array.dtype} {list(array.shape)}", raw=True), parts
            )
        if array.size and (int(array.min()) < 0 or int(array.max()) > _INT64_MAX):
            raise relocated(DecodeError.make(None, "token ids in 0..2**63-1", "an id out of range", raw=True), parts)
        return array.astype(np.int64)
    if not isinstance(value, (list, tuple)):  # a tuple: an in-process document, walked like a list
        raise relocated(DecodeError.make(None, "a list of token ids", type(value).__name__, raw=True), parts)
    if type(value) is not list:
        value = copy_list(value)  # a tuple, or a subclass read as what it holds: NumPy would ask its __len__
    if max_elements is not None and len(value) > max_elements:
        raise relocated(
            DecodeError.make(None, f"at most max_elements={max_elements} token ids", f"{len(value)}", raw=True),
            parts,
        )
    # NumPy converts and bounds the ids in C (a 32k-token prompt in about half the time of Python's min and max);
    # only a list it refuses, or one holding a negative id, is searched for the id to name.
    fits = types_within(value, _INT_ONLY)
    if fits:
        try:
            ids: np.ndarray[Any, Any] = np.array(value, dtype=np.int64)
            fits = not ids.size or int(ids.min()) >= 0
        except OverflowError:
            fits = False
    if not fits:
        # The first bad id in order, whatever is wrong with it, as every reader names it.
        index = next(i for i, x in enumerate(value) if type(x) is not int or not 0 <= x <= _INT64_MAX)
        bad = value[index]
        expected = "a token id (an integer)" if type(bad) is not int else "a token id in 0..2**63-1"
        raise relocated(DecodeError.make(f"[{index}]", expected, bad), parts)
    return ids


@dataclass(frozen=True, slots=True)
class _Near:
    """Logprobs found beside routes: the clamped values, the raw value, its key and the path of the list read."""

    result: ClampResult
    value: Any
    key: str
    parts: tuple[object, ...]


def _near_logprobs(found: Found, max_elements: int | None) -> _Near | None:
    """The sampled logprobs in the nearest object around ``found`` that has them; None if none has.

    Raises:
        DecodeError: such a field is malformed, at its path.
    """
    for obj, link in found.around():
        for key in (KEY_LOGPROBS, KEY_SGLANG_LOGPROBS):
            value = obj.get(key)
            if value is None:
                continue
            try:
                read = _read_logprobs(key, value, max_elements)
            except DecodeError as exc:
                raise relocated(exc, (*_parts(link), key)) from exc
            if read is not None:
                return _Near(read.result, value, key, (*_parts(link), key, *read.inner))
    return None


class _Read(NamedTuple):
    result: ClampResult
    inner: tuple[str, ...]  # the key of the list read inside the value: ("content",), ("token_logprobs",) or ()


def _read_logprobs(key: str, value: object, max_elements: int | None, skip: int = 0) -> _Read | None:
    """Understood: ``logprobs.content[i].logprob`` (OpenAI chat, vLLM generate), ``logprobs.token_logprobs``
    (OpenAI completions), ``output_token_logprobs[i][0]`` (SGLang ``meta_info``), a ``logprobs`` list of numbers
    and nulls, and an ``r3wire.logprobs`` envelope (r3wire ``dumps`` bodies). The first ``skip`` are left out
    before clamping (an echoed prompt's), so ``num_clamped`` counts only the values returned. Lists may be tuples
    (an in-process document). Sampled logprobs are one per token: an envelope must hold a 1-d array."""
    if key == KEY_SGLANG_LOGPROBS:
        if not isinstance(value, (list, tuple)):
            raise DecodeError.make(None, "a list of [logprob, token_id, ...] entries", type(value).__name__, raw=True)
        numbers: list[Any] = []
        append = numbers.append
        for i, entry in enumerate(value):
            if not isinstance(entry, (list, tuple)) or not own_len(entry):
                raise DecodeError.make(f"[{i}]", "a [logprob, token_id, ...] list", entry)
            append(entry[0])
        # An entry's logprob is named [i][0], as its token id is [i][1].
        return _Read(_numbers(numbers[skip:] if skip else numbers, suffix="[0]"), ())
    if isinstance(value, (list, tuple)):
        # A subclass sliced to a plain list or tuple first: NumPy would ask its __len__, which may lie.
        plain = type(value) is list or type(value) is tuple
        return _Read(_numbers(value[skip:] if skip or not plain else value), ())
    if not is_mapping(value):
        raise DecodeError.make(None, "a logprobs object or list", type(value).__name__, raw=True)
    if member(value, KEY_SCHEMA) == LOGPROBS_SCHEMA.name:
        return _Read(clamp_logprobs(_one_per_token(decode_logprobs(value, max_elements=max_elements))[skip:]), ())
    if member(value, KEY_SCHEMA) == ARRAY_SCHEMA.name:  # dumps before it wrote logprobs as r3wire.logprobs
        array = decode_array(value, max_elements=max_elements)
        if array.dtype.kind != "f":
            raise DecodeError.make(None, "a float array of logprobs", str(array.dtype), raw=True)
        return _Read(clamp_logprobs(_one_per_token(array)[skip:]), ())
    if KEY_CONTENT in value and value[KEY_CONTENT] is not None:
        content = value[KEY_CONTENT]
        if skip and isinstance(content, (list, tuple)):
            value = {KEY_CONTENT: content[skip:]}
        return _Read(read_logprobs_content(value), (KEY_CONTENT,))
    token_logprobs = value.get(KEY_TOKEN_LOGPROBS)
    if token_logprobs is not None:
        if not isinstance(token_logprobs, (list, tuple)):
            raise DecodeError.make(
                KEY_TOKEN_LOGPROBS, "a list of numbers and nulls", type(token_logprobs).__name__, raw=True
            )
        try:
            return _Read(_numbers(token_logprobs[skip:] if skip else token_logprobs), (KEY_TOKEN_LOGPROBS,))
        except DecodeError as exc:
            raise relocated(exc, KEY_TOKEN_LOGPROBS) from exc
    return None


def _one_per_token(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array`` if it is 1-d: a 0-d value or a [tokens, k] array (top-k logprobs) is not one logprob per token.

    Raises:
        DecodeError: naming the shape, at the logprobs' own path (the caller's).
    """
    if array.ndim != 1:
        raise DecodeError.make(
            None, "a 1-d array of sampled logprobs (one per token)", f"shape {list(array.shape)}", raw=True
        )
    return array


# Python floats and None: a list of only these (what a JSON parser gives) is converted by NumPy in one call.
_PLAIN_NUMBERS: Final = frozenset({float, type(None)})


def _numbers(values: Sequence[Any], suffix: str = "") -> ClampResult:
    """A flat list of logprobs and nulls, each read by :func:`r3wire.logprobs.logprob_value` (the rule of the
    content reader), clamped (null, NaN and infinities become the floor and are counted), as a float64 array built
    straight from the list: no object per value (a dict per token cost 9x the memory of the content form).

    Raises:
        DecodeError: at ``[i]`` (then ``suffix``), a value that is neither a number nor null.
    """
    if types_within(values, _PLAIN_NUMBERS):
        # Only plain floats and None: logprob_value would return each float as itself and None as NaN, which is
        # what NumPy makes of them in one call.
        array: np.ndarray[Any, Any] = np.array(values, dtype=np.float64)
    else:
        array = np.array([logprob_value(x, "", i, suffix) for i, x in enumerate(values)], dtype=np.float64)
    return _clamp(array, fresh=True, floor=LOGPROB_FLOOR)
