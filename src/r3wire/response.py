"""Whole responses as JSON: arrays anywhere in a document travel as r3wire envelopes and come back as arrays.

:func:`dumps` is ``orjson.dumps`` for documents that hold NumPy arrays or torch tensors; :func:`loads` is
``orjson.loads`` that turns every ``r3wire.routes`` / ``r3wire.array`` envelope back into an array. The text is
plain JSON: any client can parse it with any JSON parser and decode the envelopes itself, or ignore them.

Why the blobs bypass the JSON library (measured, see ``docs/performance.md``): a response is almost all base64,
and a JSON writer or parser inspects every byte of a string for escapes and builds a Python ``str`` of it, which
cost more than base64 itself. :func:`dumps` writes the document around short placeholders and splices the base64
bytes in; :func:`loads` cuts the blobs out of the raw bytes, parses the rest, and decodes each blob straight from
the input buffer. Neither ever holds the base64 text as a ``str``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Collection, Sequence
from typing import Any, Final

import numpy as np
import orjson

from r3wire._base64 import b64encode_bytes
from r3wire._envelope import build_envelope, wire_buffer
from r3wire._routecheck import optional_num_experts
from r3wire._validate import optional_max_elements
from r3wire.arrays import array_wire, decode_array
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError
from r3wire.logprobs import decode_logprobs
from r3wire.routes import decode_routes, routes_wire
from r3wire.schema import ARRAY_SCHEMA, KEY_DATA, KEY_SCHEMA, LOGPROBS_SCHEMA, ROUTES_SCHEMA

__all__ = ["ROUTES_KEYS", "dumps", "loads"]

ROUTES_KEYS: Final[tuple[str, ...]] = ("routed_experts",)
"""The object keys whose array values :func:`dumps` writes as ``r3wire.routes`` (vLLM's and SGLang's name)."""

# Below these sizes a blob goes through orjson as an ordinary string, because the splice's fixed cost (a nonce,
# a search, a join) exceeds what it saves. Measured crossovers: dumps between 64 KiB (orjson 1 µs faster) and
# 256 KiB of array bytes (splice 2 µs faster; at 4 MiB it is 0.3 ms against 3.8 ms); loads at ~3 KiB of base64
# (at 64 KiB of array bytes: 18 µs against 78 µs).
_SPLICE_MIN_BYTES: Final = 128 * 1024
_CUT_MIN_CHARS: Final = 4096

# The only way the raw bytes of a JSON document can contain this sequence, with its first quote not escaped,
# is as an object key "data" followed by the opening quote of its string value (see _cut_blobs).
_DATA_KEY: Final = b'"data":"'
_BACKSLASH: Final = 0x5C

_SCHEMAS: Final = frozenset({ROUTES_SCHEMA.name, ARRAY_SCHEMA.name, LOGPROBS_SCHEMA.name})


class _PathError(Exception):
    """An EncodeError travelling up the document, collecting the keys and indexes on its way."""

    def __init__(self, error: R3WireError, prefix: str | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.prefix = prefix  # the field name the encoder used for the value itself ("routes", "array")
        self.parts: list[object] = []


def _path(parts: Sequence[object]) -> str:
    """A JSONPath-like location: ``$.choices[0].routed_experts``; other keys quoted as JSON, ``$["a b"]``."""
    out = ["$"]
    for part in parts:
        if isinstance(part, str):
            out.append(f".{part}" if part.isidentifier() else f"[{orjson.dumps(part).decode()}]")
        elif isinstance(part, int) and not isinstance(part, bool):
            out.append(f"[{part}]")
        else:  # a non-string key (orjson.OPT_NON_STR_KEYS)
            out.append(f"[{part!r}]")
    return "".join(out)


def _relocate(error: R3WireError, path: str, prefix: str | None = None) -> R3WireError:
    """``error`` again, with its field (and the start of its message) placed under ``path``.

    The encoders and decoders name fields relative to the value they were given (``routes[0, 1, 2]``,
    ``shape``); in a whole document the caller needs to know which value that was.
    """
    field = error.field
    if field is None:
        located = path
    elif prefix is not None and field.startswith(prefix):
        located = path + field[len(prefix) :]
    else:
        located = f"{path}.{field}"
    message = str(error)
    lead = field if field is not None else "payload"
    message = located + message[len(lead) :] if message.startswith(lead) else f"{located}: {message}"
    if isinstance(error, UnsupportedVersionError):
        moved: R3WireError = UnsupportedVersionError(
            message, field=located, version=error.version, supported=error.supported
        )
    else:
        moved = type(error)(message, field=located, expected=error.expected, got=error.got)
    return moved


# Lists longer than this are first sorted out by the types they hold, in C: token ids and other flat lists of
# numbers or strings then cost ~30 ns an item instead of ~80 ns for the Python loop.
_LONG_LIST: Final = 16
_INERT_TYPES: Final = frozenset({str, int, bool, type(None)})
_NUMBER_TYPES: Final = frozenset({int, float, bool})
_CONTAINER_TYPES: Final = frozenset({dict, list})


def _inert(items: Sequence[Any]) -> bool:
    """True if ``items`` holds nothing :func:`dumps` must look at: no array, container or non-finite float."""
    if len(items) < _LONG_LIST:
        return False
    kinds = set(map(type, items))
    if kinds <= _INERT_TYPES:
        return True
    if kinds <= _NUMBER_TYPES:
        # Only Python numbers, so sum runs in C with no foreign __add__; a NaN or infinity makes the total
        # non-finite. An overflowing total of finite values only sends the list through the per-item check.
        try:
            return math.isfinite(sum(items, 0.0))
        except OverflowError:
            return False
    return False


def _nonce() -> str:
    """A placeholder prefix no document can contain by chance or design: 64 random bits per call."""
    return f"r3wire-blob:{os.urandom(8).hex()}:"


def _is_tensor(value: object) -> bool:
    torch = sys.modules.get("torch")  # a tensor can only exist if the caller imported torch
    return torch is not None and isinstance(value, torch.Tensor)


class _Writer:
    """Replaces arrays in a document by envelopes, copying only the containers on the way to one."""

    __slots__ = ("blobs", "nonce", "num_experts", "pack_bits", "routes_keys", "splice")

    def __init__(
        self, *, num_experts: int | None, pack_bits: bool, routes_keys: frozenset[object], splice: bool
    ) -> None:
        self.num_experts = num_experts
        self.pack_bits = pack_bits
        self.routes_keys = routes_keys
        self.splice = splice
        # A placeholder must not occur anywhere else in the output; a random nonce per call makes that
        # impossible to arrange, and _splice checks it anyway. Made with the first blob: small documents have none.
        self.nonce = ""
        self.blobs: list[bytes] = []

    def value(self, value: Any, routes: bool) -> Any:
        cls = type(value)
        if cls is str or cls is int or cls is bool or value is None:
            return value
        if cls is float:
            return self._float(value)
        if cls is dict:
            return self._dict(value)
        if cls is list or cls is tuple:
            return self._list(value)
        if isinstance(value, np.ndarray) or _is_tensor(value):
            return self._array(value, routes)
        if isinstance(value, np.generic):
            return self._scalar(value)
        if isinstance(value, float):
            return self._float(value)
        if isinstance(value, dict):
            return self._dict(value)
        if isinstance(value, (list, tuple)):
            return self._list(value)
        return value  # str/int subclasses, dataclasses, datetimes, enums...: orjson's rules apply

    @staticmethod
    def _float(value: float) -> float:
        if not math.isfinite(value):
            # orjson would write null and the value would be lost without a word.
            raise _PathError(EncodeError.make(None, "a finite number (JSON has no NaN or infinity)", value), None)
        return value

    def _scalar(self, value: np.generic) -> Any:
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating) and value.dtype.itemsize <= 8:  # float16/32/64 are exact as doubles
            return self._float(float(value))
        if isinstance(value, np.str_):
            return str(value)
        return value  # orjson refuses it with a message naming the type

    def _dict(self, mapping: dict[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] | None = None
        keys = self.routes_keys
        for key, item in mapping.items():
            cls = type(item)
            if cls is str or cls is int or cls is bool or item is None:
                continue
            try:
                new = self.value(item, key in keys)
            except _PathError as fail:
                fail.parts.append(key)
                raise
            if new is not item:
                if out is None:
                    out = dict(mapping)
                out[key] = new
        return mapping if out is None else out

    def _list(self, items: Sequence[Any]) -> Sequence[Any]:
        if _inert(items):  # token ids, logprobs: skip the per-item loop
            return items
        out: list[Any] | None = None
        for index, item in enumerate(items):
            cls = type(item)
            if cls is str or cls is int or cls is bool or item is None:
                continue
            try:
                new = self.value(item, False)
            except _PathError as fail:
                fail.parts.append(index)
                raise
            if new is not item:
                if out is None:
                    out = list(items)
                out[index] = new
        return items if out is None else out

    def _array(self, value: Any, routes: bool) -> dict[str, Any]:
        try:
            if routes:
                wire, name, extra, shape = routes_wire(value, num_experts=self.num_experts, pack_bits=self.pack_bits)
                schema = ROUTES_SCHEMA
            else:
                wire, name = array_wire(value)
                extra, shape, schema = None, None, ARRAY_SCHEMA
        except EncodeError as exc:
            raise _PathError(exc, "routes" if routes else "array") from None
        buffer = wire_buffer(wire)
        if not self.splice or buffer.nbytes < _SPLICE_MIN_BYTES:
            return build_envelope(wire, name, schema, extra, shape=shape)
        if not self.nonce:
            self.nonce = _nonce()
        placeholder = f"{self.nonce}{len(self.blobs)}"
        self.blobs.append(b64encode_bytes(buffer))
        return build_envelope(wire, name, schema, extra, shape=shape, data=placeholder)


def _splice(text: bytes, nonce: bytes, blobs: Sequence[bytes]) -> bytes | None:
    """``text`` with each placeholder string's content replaced by its blob; None if the placeholders are not
    exactly the ones written (then the caller writes the document without splicing)."""
    marker = b'"' + nonce
    parts: list[bytes | memoryview] = []
    view = memoryview(text)
    used = [False] * len(blobs)
    pos = 0
    while (at := text.find(marker, pos)) >= 0:
        start = at + len(marker)
        end = text.find(b'"', start)
        digits = text[start:end]
        if end < 0 or not digits.isdigit() or int(digits) >= len(blobs) or used[int(digits)]:
            return None
        index = int(digits)
        used[index] = True
        parts.append(view[pos : at + 1])
        parts.append(blobs[index])
        pos = end
    if not all(used):
        return None
    parts.append(view[pos:])
    return b"".join(parts)


def dumps(
    obj: Any,
    *,
    num_experts: int | None = None,
    pack_bits: bool = False,
    routes_keys: Collection[str] = ROUTES_KEYS,
    option: int | None = None,
) -> bytes:
    """Serialize ``obj`` to JSON bytes, writing every NumPy array or torch tensor in it as an r3wire envelope.

    The rule, applied to arrays found in dicts, lists and tuples (nested to any depth; not inside dataclasses or
    other objects): an array that is the value of a key in ``routes_keys`` is written with
    :func:`~r3wire.encode_routes` (compact uint8/int16/int32, ``num_experts`` passed on); every other array with
    :func:`~r3wire.encode_array` (its own dtype, bit for bit). Nested lists are never converted. NumPy scalars
    become JSON numbers or booleans of the same value. Everything else is serialized by ``orjson``.

    Args:
        obj: the document, e.g. ``{"choices": [{"routed_experts": array, ...}], ...}``.
        num_experts: the model's expert count, for the routes envelopes (see :func:`~r3wire.encode_routes`).
        pack_bits: write routes bit-packed (see :func:`~r3wire.encode_routes`); other arrays are never packed.
        routes_keys: the object keys whose arrays are routes; ``()`` writes every array as ``r3wire.array``.
        option: ``orjson`` options (e.g. ``orjson.OPT_SORT_KEYS``), passed on.

    Returns:
        UTF-8 JSON that any JSON parser reads; :func:`loads` turns the envelopes back into arrays.

    Raises:
        EncodeError: an array cannot be encoded (e.g. a negative expert id under a routes key), a float is NaN
            or infinite (orjson would silently write ``null``), or a value is not JSON-serializable. The field
            is a path such as ``$.choices[0].routed_experts[5, 2, 0]``.
        R3WireError: ``num_experts``, ``pack_bits`` or ``routes_keys`` is invalid.
    """
    if not isinstance(pack_bits, (bool, np.bool_)):
        raise R3WireError.make("pack_bits", "a bool", pack_bits)
    num_experts = optional_num_experts(num_experts)
    if isinstance(routes_keys, str):  # a lone string is a collection of characters: almost certainly a mistake
        routes_keys = (routes_keys,)
    try:
        keys = frozenset(routes_keys)
    except TypeError as exc:
        raise R3WireError.make("routes_keys", "a collection of object keys", routes_keys) from exc
    for splice in (True, False):
        writer = _Writer(num_experts=num_experts, pack_bits=bool(pack_bits), routes_keys=keys, splice=splice)
        text = _write(obj, writer, option)
        if not writer.blobs:
            break
        spliced = _splice(text, writer.nonce.encode("ascii"), writer.blobs)
        if spliced is not None:
            return spliced
        # A placeholder was not found exactly once (see _splice): write the text through orjson instead.
    return text


def _write(obj: Any, writer: _Writer, option: int | None) -> bytes:
    try:
        prepared = writer.value(obj, False)
    except _PathError as fail:
        raise _relocate(fail.error, _path(fail.parts[::-1]), fail.prefix) from fail.error
    except RecursionError:
        raise EncodeError.make("$", "a tree of values (no reference cycles)", "nesting too deep", raw=True) from None
    try:
        return orjson.dumps(prepared, option=option)
    except orjson.JSONEncodeError as exc:
        raise EncodeError.make("$", "JSON-serializable", str(exc), raw=True) from exc


class _Reader:
    """Finds the envelopes in a parsed document and decodes them in place."""

    __slots__ = ("blobs", "max_elements", "num_experts", "raw", "root")

    def __init__(
        self,
        root: Any,
        *,
        raw: memoryview | None,
        blobs: dict[str, tuple[int, int]],
        num_experts: int | None,
        max_elements: int | None,
    ) -> None:
        self.root = root
        self.raw = raw
        self.blobs = blobs
        self.num_experts = num_experts
        self.max_elements = max_elements

    def run(self) -> Any:
        root = self.root
        if type(root) is dict:
            if self._is_envelope(root):
                return self._decode(root)
            self._visit(root)
        elif type(root) is list:
            self._visit(root)
        return root

    @staticmethod
    def _is_envelope(obj: dict[str, Any]) -> bool:
        schema = obj.get(KEY_SCHEMA)
        return type(schema) is str and schema in _SCHEMAS

    def _visit(self, node: Any) -> None:
        # An explicit stack: parsed documents may nest deeper than Python's recursion limit.
        stack: list[Any] = [node]
        while stack:
            node = stack.pop()
            if type(node) is dict:
                if self.blobs:
                    self._restore(node)
                for key, item in node.items():
                    cls = type(item)
                    if cls is dict:
                        if self._is_envelope(item):
                            node[key] = self._decode(item)
                        else:
                            stack.append(item)
                    elif cls is list:
                        stack.append(item)
            else:
                if len(node) >= _LONG_LIST and not _CONTAINER_TYPES.intersection(map(type, node)):
                    continue  # token ids, logprobs: nothing to look at
                for index, item in enumerate(node):
                    cls = type(item)
                    if cls is dict:
                        if self._is_envelope(item):
                            node[index] = self._decode(item)
                        else:
                            stack.append(item)
                    elif cls is list:
                        stack.append(item)

    def _restore(self, node: dict[str, Any]) -> None:
        """Put back a long "data" string that was cut out of an object that is not an envelope."""
        data = node.get(KEY_DATA)
        if type(data) is str and data in self.blobs:
            assert self.raw is not None
            start, end = self.blobs[data]
            try:  # orjson checks the text exactly as it would have in place
                node[KEY_DATA] = orjson.loads(self.raw[start - 1 : end + 1])
            except orjson.JSONDecodeError as exc:
                try:  # the error as orjson words it for the whole document, with its position
                    orjson.loads(self.raw)
                except orjson.JSONDecodeError as original:
                    raise DecodeError.make("$", "valid JSON", f"invalid JSON: {original}", raw=True) from original
                path = _path(self._locate(node) or []) + "." + KEY_DATA
                raise DecodeError.make(path, "a JSON string", f"invalid JSON: {exc}", raw=True) from exc

    def _decode(self, envelope: dict[str, Any]) -> np.ndarray[Any, Any]:
        payload = envelope
        data = envelope.get(KEY_DATA)
        if self.blobs and type(data) is str and data in self.blobs:
            assert self.raw is not None
            start, end = self.blobs[data]
            payload = dict(envelope)
            payload[KEY_DATA] = self.raw[start:end]
        try:
            if envelope[KEY_SCHEMA] == ROUTES_SCHEMA.name:
                return decode_routes(payload, num_experts=self.num_experts, max_elements=self.max_elements)
            if envelope[KEY_SCHEMA] == LOGPROBS_SCHEMA.name:
                return decode_logprobs(payload, max_elements=self.max_elements)
            return decode_array(payload, max_elements=self.max_elements)
        except DecodeError as exc:
            raise _relocate(exc, _path(self._locate(envelope) or [])) from exc

    def _locate(self, target: object) -> list[object] | None:
        """The keys and indexes from the root to ``target`` (only ever called to word an error)."""
        stack: list[tuple[Any, list[object]]] = [(self.root, [])]
        while stack:
            node, parts = stack.pop()
            if node is target:
                return parts
            if type(node) is dict:
                stack.extend((item, [*parts, key]) for key, item in node.items() if type(item) in (dict, list))
            elif type(node) is list:
                stack.extend((item, [*parts, i]) for i, item in enumerate(node) if type(item) in (dict, list))
        return None


def _cut_blobs(raw: bytes | bytearray) -> tuple[bytes | bytearray, dict[str, tuple[int, int]]]:
    """Replace the content of every long ``"data":"..."`` string in ``raw`` by a short placeholder.

    Returns the shortened document and, per placeholder, where its text is in ``raw``.

    Why this is exact for any input: a match is used only if its first quote is preceded by an even number of
    backslashes, so (in valid JSON) it is an unescaped delimiter, ``data`` is a whole key and the value is a
    string; the cut text contains no quote or backslash, so the original string is exactly those bytes. If the
    shortened document parses, the original differs from it only in those string contents, which the caller
    checks (base64 for envelopes, orjson for anything else); if it does not parse, neither does the original.
    """
    blobs: dict[str, tuple[int, int]] = {}
    pieces: list[bytes | memoryview] = []
    view = memoryview(raw)
    nonce = ""
    prev = pos = 0
    while (at := raw.find(_DATA_KEY, pos)) >= 0:
        start = at + len(_DATA_KEY)
        end = raw.find(b'"', start)
        if end < 0:
            break
        pos = end + 1
        if end - start < _CUT_MIN_CHARS or raw.find(b"\\", start, end) >= 0:
            continue
        slashes = 0
        while at - slashes > 0 and raw[at - slashes - 1] == _BACKSLASH:
            slashes += 1
        if slashes % 2:
            continue
        nonce = nonce or _nonce()
        placeholder = f"{nonce}{len(blobs)}"
        blobs[placeholder] = (start, end)
        pieces.append(view[prev:start])
        pieces.append(placeholder.encode("ascii"))
        prev = end
    if not blobs:
        return raw, blobs
    pieces.append(view[prev:])
    return b"".join(pieces), blobs


def loads(
    data: bytes | bytearray | memoryview | str,
    *,
    num_experts: int | None = None,
    max_elements: int | None = None,
) -> Any:
    """Parse JSON, turning every r3wire envelope in it into a NumPy array.

    An object whose ``schema`` is ``"r3wire.routes"``, ``"r3wire.array"`` or ``"r3wire.logprobs"`` is decoded
    strictly, wherever it is (the whole document included), with :func:`~r3wire.decode_routes`,
    :func:`~r3wire.decode_array` or :func:`~r3wire.decode_logprobs`; a malformed one is an error, not left as a
    dict. Every other object stays a dict: the seed's unversioned
    ``{data, shape, dtype}`` envelope and other wire formats are not recognised, since nothing in them says
    they are routes. Decoded arrays are writable and own their memory; nothing else is copied.

    Args:
        data: the JSON text, as bytes (fastest) or ``str``.
        num_experts: the model's expert count: every routes envelope must agree with it (ids below it, and its
            own ``num_experts`` equal when present).
        max_elements: refuse any envelope declaring more elements than this, before decoding it.

    Returns:
        The document, with arrays in place of envelopes.

    Raises:
        DecodeError: the text is not valid JSON, or an envelope in it is malformed; the field is a path such as
            ``$.choices[0].routed_experts.shape``.
        UnsupportedVersionError: an envelope's schema version is newer than this release reads.
        R3WireError: ``num_experts`` or ``max_elements`` is invalid.
    """
    num_experts = optional_num_experts(num_experts)
    max_elements = optional_max_elements(max_elements)
    if isinstance(data, memoryview):
        data = data.tobytes()
    if not isinstance(data, (bytes, bytearray, str)):
        raise DecodeError.make("$", "JSON text (bytes or str)", type(data).__name__, raw=True)
    raw: bytes | bytearray | str = data
    view: memoryview | None = None
    blobs: dict[str, tuple[int, int]] = {}
    if not isinstance(data, str):
        raw, blobs = _cut_blobs(data)
        view = memoryview(data) if blobs else None
    try:
        root = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if not blobs:
            raise DecodeError.make("$", "valid JSON", f"invalid JSON: {exc}", raw=True) from exc
        # The shortened text fails exactly when the original does; parse the original for the error's position
        # (and, should that reasoning ever be wrong, for the document itself).
        try:
            root = orjson.loads(data)
        except orjson.JSONDecodeError as original:
            raise DecodeError.make("$", "valid JSON", f"invalid JSON: {original}", raw=True) from original
        raw, blobs, view = data, {}, None
    if not blobs:
        # No envelope can hide in a document that never spells "r3wire." (only a \u escape could spell it).
        if isinstance(raw, str):
            plain = "r3wire." not in raw and "\\u" not in raw
        else:
            plain = b"r3wire." not in raw and b"\\u" not in raw
        if plain:
            return root
    reader = _Reader(root, raw=view, blobs=blobs, num_experts=num_experts, max_elements=max_elements)
    return reader.run()
