"""What Fireworks hands a trainer around r3/v1: the trace API's ``{"manifest", "data"}`` wrapper, and the per-token
``routing_matrices`` list its decoder returns (and rLLM / tinker carry).

Trace API (``trace["payloads"]["router_replay"]``)::

    {"manifest": {"PayloadVersion": "r3/v1", "Compression": "zstd"}, "data": "<base64 of the r3/v1 zstd stream>"}

Per-token matrices: a JSON list of entries, each ``null`` (not replayed) or the standard base64 of one
``[num_layers, top_k]`` matrix, little-endian uint8 or uint16 (no dtype travels: it follows from the length, which
the caller's ``num_layers`` and ``top_k`` fix). Entry ``i`` is the routing of one forward pass, read as a position:
the decoder's per-token list less its first entry (as Fireworks' SDK trains on it) is positions from 0, entry ``p``
the matrix of token ``p + 1``; a completion-only list starts at the prompt's last token.

Layouts from eval-protocol/python-sdk ``eval_protocol/adapters/r3_deserializer.py`` and
``tests/adapters/test_r3_deserializer.py`` @3393c047 (see ``docs/formats.md``).
"""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np

from r3wire._base64 import b64decode_strict
from r3wire._typeset import is_mapping, is_sequence
from r3wire._validate import DEFAULT_MAX_ELEMENTS, check_element_count, check_keys, check_shape, load_object
from r3wire._walk import copy_list
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError, describe
from r3wire.formats._common import (
    ReadOptions,
    ReadResult,
    WriteOptions,
    b64_array,
    b64_decoded_length,
    check_ids,
    choose_dtype,
    load_json,
    prepared_routes,
)
from r3wire.formats._fireworks import read_fireworks, write_fireworks

__all__ = [
    "KEY_MANIFEST",
    "MATRIX_DTYPES",
    "PAYLOAD_VERSION",
    "read_fireworks_matrices",
    "read_fireworks_trace",
    "write_fireworks_matrices",
    "write_fireworks_trace",
]

KEY_MANIFEST: Final = "manifest"
KEY_DATA: Final = "data"
KEY_PAYLOAD_VERSION: Final = "PayloadVersion"
KEY_COMPRESSION: Final = "Compression"
PAYLOAD_VERSION: Final = "r3/v1"
COMPRESSION: Final = "zstd"
_VERSION_TEXT: Final = re.compile(r"r3/v([0-9]{1,9})")
MATRIX_DTYPES: Final = ("uint8", "uint16")


# The per-token list holds one entry per token: 2**24 (16.8M tokens, far past any context window) keeps it under
# 128 MiB of pointers even when layers x top_k is 1, where the element limit alone would allow 2**30 entries.
MAX_MATRIX_TOKENS: Final = 1 << 24


def read_fireworks_trace(payload: object, opts: ReadOptions) -> ReadResult:
    """Read the trace API's ``{"manifest": {"PayloadVersion", "Compression"}, "data"}`` wrapper.

    Raises:
        UnsupportedVersionError: ``PayloadVersion`` is not ``"r3/v1"``.
        DecodeError: the wrapper or its manifest is malformed (unknown keys, a ``Compression`` other than
            ``"zstd"``), or the r3/v1 payload inside is.
    """
    payload = load_object(payload, what='a Fireworks trace payload {"manifest", "data"}')
    check_keys(payload, required=(KEY_MANIFEST, KEY_DATA))
    manifest = payload[KEY_MANIFEST]
    if not is_mapping(manifest):
        raise DecodeError.make(KEY_MANIFEST, "an object", type(manifest).__name__, raw=True)
    # Unknown manifest keys could change what the data means (an encryption, another layout): refused.
    check_keys(manifest, required=(KEY_PAYLOAD_VERSION, KEY_COMPRESSION))
    version = manifest[KEY_PAYLOAD_VERSION]
    if not isinstance(version, str):
        raise DecodeError.make(f"{KEY_MANIFEST}.{KEY_PAYLOAD_VERSION}", repr(PAYLOAD_VERSION), version)
    if version != PAYLOAD_VERSION:
        match = _VERSION_TEXT.fullmatch(version)
        raise UnsupportedVersionError(
            f"{KEY_MANIFEST}.{KEY_PAYLOAD_VERSION} {describe(version)} is not supported; this release reads "
            f"{PAYLOAD_VERSION!r}",
            field=f"{KEY_MANIFEST}.{KEY_PAYLOAD_VERSION}",
            version=int(match.group(1)) if match else 0,  # 0: not an r3/vN name at all
            supported=(1,),
        )
    compression = manifest[KEY_COMPRESSION]
    if compression != COMPRESSION:
        raise DecodeError.make(f"{KEY_MANIFEST}.{KEY_COMPRESSION}", repr(COMPRESSION), compression)
    try:
        inner = read_fireworks(payload[KEY_DATA], opts)
    except DecodeError as exc:
        raise _under(exc, KEY_DATA) from exc
    return ReadResult(
        routes=inner.routes,
        format="fireworks-trace",
        start=inner.start,
        mask=inner.mask,
        total_tokens=inner.total_tokens,
    )


def _under(error: DecodeError, prefix: str) -> DecodeError:
    """``error`` with its field placed under ``prefix`` (``payload`` → ``data``, ``magic`` → ``data.magic``)."""
    field = error.field
    located = prefix if field in (None, "payload") else f"{prefix}.{field}"
    message = str(error)
    lead = field if field is not None else "payload"
    if message.startswith(lead):
        message = located + message[len(lead) :]
    if isinstance(error, UnsupportedVersionError):
        return UnsupportedVersionError(message, field=located, version=error.version, supported=error.supported)
    return DecodeError(message, field=located, expected=error.expected, got=error.got)


def write_fireworks_trace(routes: object, opts: WriteOptions) -> dict[str, Any]:
    """Write the trace API wrapper around :func:`write_fireworks`'s r3/v1 payload (same mode and dtype rules)."""
    return {
        KEY_MANIFEST: {KEY_PAYLOAD_VERSION: PAYLOAD_VERSION, KEY_COMPRESSION: COMPRESSION},
        KEY_DATA: write_fireworks(routes, opts, format_name="fireworks-trace"),
    }


def _no_matrix(entry: object) -> bool:
    """Whether a ``routing_matrices`` entry marks a token without routing: ``null``, or the empty string
    Fireworks' own tools write there (fw-ai/cookbook ``training/utils/rl/router_replay.py`` @0ae69ef4 pads a
    completion-only list with ``""``; fw-ai-external/python-sdk ``deployment.py`` @04f221ac reads a token without
    ``routing_matrix`` as ``""``). No matrix is empty, so ``""`` cannot be one."""
    return entry is None or (isinstance(entry, (str, bytes)) and not len(entry))


def read_fireworks_matrices(payload: object, opts: ReadOptions) -> ReadResult:
    """Read the per-token ``routing_matrices`` list: one base64 ``[num_layers, top_k]`` matrix, or ``null`` (or
    ``""``, Fireworks' tools' "no routing here") per token. Rows of such tokens are zero and false in ``mask``;
    ``mask`` is ``None`` when every token has one. The list does not say where it starts (see
    :meth:`r3wire.RouteTrace.add_result`).

    The element type follows from each matrix's length (``num_layers * top_k`` bytes: uint8, twice that:
    uint16) and must be the same for every token.

    Raises:
        DecodeError: not a list of strings and nulls, a matrix of another length, strict base64 broken, the
            element count above ``max_elements``, or an id at or above ``num_experts``.
        R3WireError: ``num_layers`` or ``top_k`` not given.
    """
    if isinstance(payload, (str, bytes, bytearray, memoryview)):
        payload = load_json(payload, what="a JSON list of base64 matrices and nulls", root="")
    if not is_sequence(payload) or isinstance(payload, (str, bytes, bytearray)):
        raise DecodeError.make(
            None, "a list of base64 matrices and nulls, one per token", type(payload).__name__, raw=True
        )
    if opts.num_layers is None or opts.top_k is None:
        raise R3WireError.make(
            "num_layers, top_k", "given for Fireworks per-token matrices (they carry neither)", "None", raw=True
        )
    layers, top_k = opts.num_layers, opts.top_k
    if type(payload) is not list:
        # Counted and read once (a caller's __len__ may lie), and only as far as max_elements allows plus one to
        # tell "more": range(10**12) is a sequence too, and iterating it whole was a bare MemoryError.
        limit = DEFAULT_MAX_ELEMENTS if opts.max_elements is None else opts.max_elements
        bound = limit // ((layers or 1) * (top_k or 1))
        payload = copy_list(
            payload, most=bound + 1, field=None, expected="a list of base64 matrices and nulls", error=DecodeError
        )
        if len(payload) > bound:
            default = " (the default; pass a larger max_elements to raise it)" if limit == DEFAULT_MAX_ELEMENTS else ""
            raise DecodeError.make(
                "shape",
                f"at most max_elements={limit} elements{default}",
                f"more than {bound} tokens of {layers} layers x {top_k} top_k",
                raw=True,
            )
    tokens = len(payload)
    # Sized by the caller's shape before any allocation; the list itself is already in memory.
    check_element_count(check_shape((tokens, layers, top_k), "shape", ndim=3), opts.max_elements)
    itemsize = 0
    for i, entry in enumerate(payload):
        if _no_matrix(entry):
            continue
        if not isinstance(entry, (str, bytes)):
            raise DecodeError.make(f"[{i}]", "a base64 string or null", entry)
        nbytes = b64_decoded_length(entry, f"[{i}]")
        size, rest = divmod(nbytes, layers * top_k)
        if rest or size not in (1, 2) or (itemsize and size != itemsize):
            want = (
                f"{layers * top_k * itemsize}"
                if itemsize
                else f"{layers * top_k} (uint8) or {2 * layers * top_k} (uint16)"
            )
            raise DecodeError.make(
                f"[{i}]", f"the base64 of {want} bytes ({layers} layers x {top_k} top_k)", f"{nbytes} bytes", raw=True
            )
        itemsize = size
    dtype = np.dtype(MATRIX_DTYPES[max(itemsize, 1) - 1]).newbyteorder("<")
    routes = np.zeros((tokens, layers, top_k), dtype=dtype.newbyteorder("="))
    mask = np.zeros(tokens, dtype=bool)
    flat = routes.reshape(tokens, layers * top_k)
    for i, entry in enumerate(payload):
        if not _no_matrix(entry):
            raw = b64decode_strict(entry, layers * top_k * itemsize, field=f"[{i}]")
            flat[i] = np.frombuffer(raw, dtype=dtype)
            mask[i] = True
    check_ids(routes, "routes", num_experts=opts.num_experts)
    return ReadResult(routes=routes, format="fireworks-matrices", mask=None if mask.all() else mask)


def write_fireworks_matrices(routes: object, opts: WriteOptions) -> list[str | None]:
    """Write one base64 ``[num_layers, top_k]`` matrix per row, ``None`` where ``mask`` is false: uint8 if the ids
    (or ``num_experts - 1``) fit, else uint16. Entry ``p`` is position ``p``'s routing (the list Fireworks' SDK
    trains on: the decoder's per-token list less its first entry). A ``start`` becomes that many leading ``None``
    entries; ``total_tokens`` is the sequence's token count, as in r3/v1, so the list has ``total_tokens - 1``
    entries (default ``start + rows + 1``: none trailing), the last token's position never forwarded.

    Raises:
        EncodeError: ids above 65535 or negative, ``total_tokens`` below ``start + rows + 1``, or a list
            (``total_tokens - 1``, else ``start + rows`` entries) of more than
            ``DEFAULT_MAX_ELEMENTS // (layers * top_k)`` tokens.
    """
    arr, low, high = prepared_routes(routes, num_experts=opts.num_experts)
    if opts.num_experts is not None and opts.dtype is None:
        high = max(high, opts.num_experts - 1)
    name = choose_dtype(
        low, high, requested=opts.dtype, allowed=MATRIX_DTYPES, ladder=MATRIX_DTYPES, format_name="fireworks-matrices"
    )
    rows, layers, top_k = (int(n) for n in arr.shape)
    first = opts.start or 0
    # One entry per forwarded position: a sequence of total tokens has total - 1 (none for an empty one).
    entries = first + rows if opts.total_tokens is None else max(opts.total_tokens - 1, 0)
    if entries < first + rows or (opts.total_tokens == 0 and first + rows):
        raise EncodeError.make(
            "total_tokens",
            f"at least start + rows + 1 = {first + rows + 1} (the last row's position produced token start + rows)",
            opts.total_tokens,
        )
    # One list entry per position: no more than the reader accepts by default (entries x layers x top_k within
    # DEFAULT_MAX_ELEMENTS), so a large start or total_tokens is refused here instead of exhausting memory.
    most = min(DEFAULT_MAX_ELEMENTS // max(1, layers * top_k), MAX_MATRIX_TOKENS)
    if entries > most:
        field = "total_tokens" if opts.total_tokens is not None else "start" if first else "routes"
        raise EncodeError.make(
            field,
            f"a list of at most {most} entries ({layers} layers x {top_k} top_k per token, within the readers' "
            f"default max_elements = {DEFAULT_MAX_ELEMENTS}, and at most {MAX_MATRIX_TOKENS} list entries)",
            f"{entries} entries",
            raw=True,
        )
    keep = None if opts.mask is None else opts.mask.tolist()
    out: list[str | None] = [None] * first
    out += [None if keep is not None and not keep[i] else b64_array(arr[i], name) for i in range(rows)]
    out += [None] * (entries - first - rows)
    return out
