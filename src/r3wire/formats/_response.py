"""Where engines put routes in a response body, and what they put beside them.

:func:`find_routes` walks a parsed body in document order and yields every routes field with its JSONPath and the
objects around it (from the nearest enclosing list, i.e. the choice, down to the object holding the field);
:func:`token_ids_near` and :func:`logprobs_near` read the choice's token ids and sampled logprobs from those
objects, nearest first. :func:`r3wire.formats.read_response` reads each field with :func:`r3wire.formats.read`.

The nesting each engine uses is listed, with sources, in ``docs/formats.md`` ("Whole responses").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from r3wire.arrays import decode_array
from r3wire.errors import DecodeError, R3WireError
from r3wire.logprobs import ClampResult, clamp_logprobs, decode_logprobs, read_logprobs_content
from r3wire.response import _path, _relocate
from r3wire.schema import ARRAY_SCHEMA, KEY_SCHEMA, LOGPROBS_SCHEMA, ROUTES_SCHEMA

__all__ = ["ROUTES_FIELDS", "Found", "find_routes", "logprobs_near", "relocated", "token_ids_near"]

KEY_ROUTED_EXPERTS: Final = "routed_experts"
KEY_ROUTED_EXPERTS_DTYPE: Final = "routed_experts_dtype"
KEY_ROUTER_REPLAY: Final = "router_replay"  # Fireworks trace: payloads.router_replay
KEY_ROUTING_MATRICES: Final = "routing_matrices"  # Fireworks decoder output, rLLM / tinker
ROUTES_FIELDS: Final = (KEY_ROUTED_EXPERTS, KEY_ROUTER_REPLAY, KEY_ROUTING_MATRICES)
"""The object keys whose values are routes, whatever object holds them (choice, message, meta_info, sgl_ext,
nvext, payloads); r3wire.routes envelopes are found under any key."""
# Nearest first within an object; vLLM and prime-rl say token_ids, SGLang output_ids.
TOKEN_ID_KEYS: Final = ("token_ids", "output_ids")
KEY_LOGPROBS: Final = "logprobs"
KEY_SGLANG_LOGPROBS: Final = "output_token_logprobs"  # SGLang meta_info: [[logprob, token_id, text], ...]
KEY_TOKEN_LOGPROBS: Final = "token_logprobs"  # OpenAI completions: logprobs.token_logprobs
KEY_CONTENT: Final = "content"  # OpenAI chat and vLLM generate: logprobs.content[i].logprob
_INT64_MAX: Final = (1 << 63) - 1
# Per-token side channels no engine nests routes in: never walked, so a 32k-token body with logprobs content costs
# the walk almost nothing (they are still read as token ids and logprobs when they sit beside the routes).
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
_CONTAINERS: Final = frozenset({dict, list, tuple})


_Context = tuple[tuple[Mapping[str, Any], tuple[object, ...]], ...]


@dataclass(frozen=True, slots=True)
class Found:
    """One routes field: its value, where it is, and the objects from the enclosing choice down to its holder."""

    value: Any
    parts: tuple[object, ...]
    key: str | None  # the routes key it was found under; None for an r3wire.routes envelope under another key
    context: tuple[tuple[Mapping[str, Any], tuple[object, ...]], ...]  # (object, its path), outermost first


def _is_routes_envelope(node: Mapping[str, Any]) -> bool:
    schema = node.get(KEY_SCHEMA)
    return type(schema) is str and schema == ROUTES_SCHEMA.name


def find_routes(root: object) -> Iterator[Found]:
    """Every routes field of ``root`` in document order (the routes values themselves are not entered)."""
    # An explicit stack (parsed bodies may nest deeper than the recursion limit), pushed in reverse so items come
    # off it in document order; a routes field is an item of its own so it keeps its place among its siblings.
    stack: list[tuple[bool, Any, tuple[object, ...], str | None, _Context]] = [(False, root, (), None, ())]
    while stack:
        is_field, node, parts, key, context = stack.pop()
        if is_field:
            yield Found(node, parts, key, context)
            continue
        if isinstance(node, Mapping):
            if _is_routes_envelope(node):
                yield Found(node, parts, None, context)
                continue
            inner = (*context, (node, parts))
            children: list[tuple[bool, Any, tuple[object, ...], str | None, _Context]] = []
            for child_key, item in node.items():
                if child_key in ROUTES_FIELDS:
                    if item is not None:  # vLLM sends null when capture is off
                        children.append((True, item, (*parts, child_key), child_key, inner))
                elif isinstance(item, (Mapping, list, tuple)) and child_key not in _NO_ROUTES_KEYS:
                    children.append((False, item, (*parts, child_key), None, inner))
            stack.extend(reversed(children))
        elif isinstance(node, (list, tuple)):  # an in-process document may build its arrays as tuples
            if len(node) >= _LONG_LIST and not _CONTAINERS.intersection(map(type, node)):
                continue
            # A list starts a new context: one choice's token ids never belong to its sibling's routes.
            stack.extend(
                (False, item, (*parts, i), None, ())
                for i, item in reversed(list(enumerate(node)))
                if isinstance(item, (Mapping, list, tuple))
            )


def relocated(error: R3WireError, where: Sequence[object] | str) -> R3WireError:
    """``error`` with its field placed under ``where`` (path parts, or a path already written out)."""
    path = where if isinstance(where, str) else _path(where)
    # An index field ("[3]") follows the path directly; a key ("shape") after a dot.
    index = error.field is not None and error.field.startswith("[")
    return _relocate(error, path, prefix="" if index else None)


def token_ids_near(found: Found, *, max_elements: int | None = None) -> np.ndarray[Any, Any] | None:
    """The token ids in the nearest object around ``found`` that has them, as int64; None if none has.

    Raises:
        DecodeError: the value is not a list of non-negative integers (or an r3wire.array of them), at its path.
    """
    for obj, parts in reversed(found.context):
        for key in TOKEN_ID_KEYS:
            if key in obj and obj[key] is not None:
                return _token_ids(obj[key], (*parts, key), max_elements)
    return None


def _token_ids(value: object, parts: tuple[object, ...], max_elements: int | None) -> np.ndarray[Any, Any]:
    if isinstance(value, Mapping) and value.get(KEY_SCHEMA) == ARRAY_SCHEMA.name:  # an r3wire dumps body
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
    if not isinstance(value, list):
        raise relocated(DecodeError.make(None, "a list of token ids", type(value).__name__, raw=True), parts)
    if not set(map(type, value)) <= {int}:
        index = next(i for i, x in enumerate(value) if type(x) is not int)
        raise relocated(DecodeError.make(f"[{index}]", "a token id (an integer)", value[index]), parts)
    if value and (min(value) < 0 or max(value) > _INT64_MAX):
        bad = min(value) if min(value) < 0 else max(value)
        index = value.index(bad)
        raise relocated(DecodeError.make(f"[{index}]", "a token id in 0..2**63-1", bad), parts)
    return np.array(value, dtype=np.int64)


def logprobs_near(found: Found, *, max_elements: int | None = None) -> ClampResult | None:
    """The sampled logprobs in the nearest object around ``found`` that has them, clamped; None if none has.

    Understood: ``logprobs.content[i].logprob`` (OpenAI chat, vLLM generate), ``logprobs.token_logprobs``
    (OpenAI completions), ``output_token_logprobs[i][0]`` (SGLang ``meta_info``), a ``logprobs`` list of numbers
    and nulls, and an ``r3wire.logprobs`` envelope (r3wire ``dumps`` bodies).

    Raises:
        DecodeError: such a field is malformed, at its path.
    """
    for obj, parts in reversed(found.context):
        for key in (KEY_LOGPROBS, KEY_SGLANG_LOGPROBS):
            value = obj.get(key)
            if value is None:
                continue
            try:
                result = _logprobs(key, value, max_elements)
            except DecodeError as exc:
                raise relocated(exc, (*parts, key)) from exc
            if result is not None:
                return result
    return None


def _logprobs(key: str, value: object, max_elements: int | None) -> ClampResult | None:
    if key == KEY_SGLANG_LOGPROBS:
        if not isinstance(value, list):
            raise DecodeError.make(None, "a list of [logprob, token_id, ...] entries", type(value).__name__, raw=True)
        entries = []
        for i, entry in enumerate(value):
            if not isinstance(entry, list) or not entry:
                raise DecodeError.make(f"[{i}]", "a [logprob, token_id, ...] list", entry)
            entries.append({"logprob": entry[0]})
        return _content(entries)
    if isinstance(value, list):
        return _content([{"logprob": x} for x in value])
    if not isinstance(value, Mapping):
        raise DecodeError.make(None, "a logprobs object or list", type(value).__name__, raw=True)
    if value.get(KEY_SCHEMA) == LOGPROBS_SCHEMA.name:
        return clamp_logprobs(decode_logprobs(value, max_elements=max_elements))
    if value.get(KEY_SCHEMA) == ARRAY_SCHEMA.name:  # dumps before it wrote logprobs as r3wire.logprobs
        array = decode_array(value, max_elements=max_elements)
        if array.dtype.kind != "f":
            raise DecodeError.make(None, "a float array of logprobs", str(array.dtype), raw=True)
        return clamp_logprobs(array)
    if KEY_CONTENT in value and value[KEY_CONTENT] is not None:
        return read_logprobs_content(value)
    token_logprobs = value.get(KEY_TOKEN_LOGPROBS)
    if token_logprobs is not None:
        if not isinstance(token_logprobs, list):
            raise DecodeError.make(
                KEY_TOKEN_LOGPROBS, "a list of numbers and nulls", type(token_logprobs).__name__, raw=True
            )
        try:
            return _content([{"logprob": x} for x in token_logprobs])
        except DecodeError as exc:
            raise relocated(exc, KEY_TOKEN_LOGPROBS) from exc
    return None


def _content(entries: list[dict[str, Any]]) -> ClampResult:
    """The seed's content reader (one rule for missing and non-finite values), errors named by list index."""
    try:
        return read_logprobs_content({KEY_CONTENT: entries})
    except DecodeError as exc:
        field = exc.field or ""
        index = field[len(KEY_CONTENT) :].split("]", 1)[0] + "]" if field.startswith(KEY_CONTENT + "[") else None
        raise DecodeError.make(index, "a number or null (a logprob)", exc.got, raw=True) from exc
