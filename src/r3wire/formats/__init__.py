"""Read and write every engine's routed-experts format with one API.

    >>> from r3wire import formats
    >>> results = formats.read_response(response.content)          # every routes field of a whole body
    >>> result = formats.read(choice["routed_experts"])            # format detected: vLLM's base64 .npy
    >>> result.routes.shape, result.routes.dtype, result.start
    >>> formats.write(result.routes, "prime-rl", start=17)          # what a prime-rl client expects

Every reader applies the same checks as :func:`r3wire.decode_routes`: sizes before allocation, strict base64,
no pickle, non-negative ids (NeMo-RL's all -1 missing-route rows and SGLang's -1 slots excepted), and
raises :class:`DecodeError` for anything malformed. The formats and exactly what each accepts are specified in
``docs/formats.md``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, overload

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._jsonpath import json_path as _path
from r3wire._routecheck import optional_num_experts
from r3wire._typeset import is_mapping
from r3wire._validate import check_int, check_shape, load_object, optional_max_elements, plain_str
from r3wire._walk import Guard, copy_list
from r3wire.errors import DecodeError, EncodeError, R3WireError, UnsupportedVersionError, describe
from r3wire.formats._common import (
    MISSING_ROUTE,
    ROUTES_NDIM,
    ReadOptions,
    ReadResult,
    WriteOptions,
    byte_text,
    first_index,
    load_json,
)
from r3wire.formats._envelopes import (
    PRIME_RL_DTYPES,
    read_prime_rl,
    read_prime_rl_b85,
    read_r3wire,
    read_skyrl,
    write_prime_rl,
    write_prime_rl_b85,
    write_r3wire,
    write_skyrl,
)
from r3wire.formats._fireworks import (
    MAX_DECOMPRESSED_BYTES,
    MAX_TOKEN_COUNT,
    SKIPPABLE_MAGIC_TAIL,
    ZSTD_MAGIC,
    ZSTD_MAGIC_B64,
    read_fireworks,
    write_fireworks,
)
from r3wire.formats._fireworks_trace import (
    KEY_MANIFEST,
    read_fireworks_matrices,
    read_fireworks_trace,
    write_fireworks_matrices,
    write_fireworks_trace,
)
from r3wire.formats._lists import read_json_lists, write_json_lists
from r3wire.formats._nemo_rl import NEMO_RL_MAGIC, read_nemo_rl, write_nemo_rl
from r3wire.formats._npy import NPY_MAGIC, NPY_MAGIC_B64, read_vllm_npy, write_vllm_npy
from r3wire.formats._response import (
    KEY_ROUTED_EXPERTS,
    KEY_ROUTED_EXPERTS_DTYPE,
    beside_routes,
    check_call_fits,
    check_counts_fit,
    find_routes,
    relocated,
    routes_identity,
)
from r3wire.formats._sglang import SGLANG_DTYPES, read_sglang, write_sglang
from r3wire.response import _as_text
from r3wire.schema import KEY_DATA, KEY_DTYPE, KEY_SCHEMA, KEY_SHAPE, KEY_VERSION

__all__ = [
    "FORMATS",
    "MAX_DECOMPRESSED_BYTES",
    "MISSING_ROUTE",
    "DTypeName",
    "Format",
    "ReadResult",
    "detect",
    "read",
    "read_response",
    "write",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Format:
    """One routed-experts format r3wire reads and writes.

    Attributes:
        name: the stable name passed as ``format=`` (e.g. ``"vllm-npy"``).
        summary: one line saying who produces it and what it looks like.
        carries_start: the payload can say which sequence position its first row is.
        needs_shape: reading it needs ``num_layers`` and ``top_k`` from the caller.
        extra: the optional dependency (``pip install r3wire[<extra>]``) it needs, if any.
    """

    name: str
    summary: str
    carries_start: bool = False
    needs_shape: bool = False
    extra: str | None = None


_Reader = Callable[[object, ReadOptions], ReadResult]
_Writer = Callable[[object, WriteOptions], "str | dict[str, Any] | list[Any]"]

_TABLE: Final[tuple[tuple[Format, _Reader, _Writer], ...]] = (
    (
        Format(name="r3wire", summary="r3wire.routes envelope {data, shape, dtype, schema, version}"),
        read_r3wire,
        write_r3wire,
    ),
    (
        Format(name="skyrl", summary="SkyRL seed envelope {data, shape, dtype}, canonical dtype"),
        read_skyrl,
        write_skyrl,
    ),
    (
        Format(
            name="sglang",
            summary="SGLang meta_info routed_experts: bare base64, int32 (or routed_experts_dtype)",
            needs_shape=True,
        ),
        read_sglang,
        write_sglang,
    ),
    (
        Format(name="vllm-npy", summary="vLLM choices[i].routed_experts: base64 of a .npy file"),
        read_vllm_npy,
        write_vllm_npy,
    ),
    (Format(name="nemo-rl", summary="NeMo-RL 'nrlre1:<dtype>:<S>x<L>x<K>:<base64>'"), read_nemo_rl, write_nemo_rl),
    (
        Format(name="prime-rl", summary="prime-rl {data, shape, start, dtype}", carries_start=True),
        read_prime_rl,
        write_prime_rl,
    ),
    (
        Format(name="prime-rl-b85", summary="prime-rl's older {data: base85 int32, shape}"),
        read_prime_rl_b85,
        write_prime_rl_b85,
    ),
    (
        Format(
            name="fireworks-r3v1",
            summary="Fireworks r3/v1: base64 of zstd(32-byte header + selector + matrices)",
            carries_start=True,
            needs_shape=True,
            extra="zstd",
        ),
        read_fireworks,
        write_fireworks,
    ),
    (
        Format(
            name="fireworks-trace",
            summary='Fireworks trace API payloads.router_replay: {"manifest": {"PayloadVersion": "r3/v1", '
            '"Compression": "zstd"}, "data": r3/v1}',
            carries_start=True,
            needs_shape=True,
            extra="zstd",
        ),
        read_fireworks_trace,
        write_fireworks_trace,
    ),
    (
        Format(
            name="fireworks-matrices",
            summary=(
                "rLLM / tinker routing_matrices (Fireworks' decoder list less its first entry): one base64 "
                "[layers, top_k] matrix or null per forwarded position"
            ),
            carries_start=True,
            needs_shape=True,
        ),
        read_fireworks_matrices,
        write_fireworks_matrices,
    ),
    (
        Format(name="json-lists", summary="nested JSON int lists [rows][layers][top_k] (NeMo-RL legacy, verifiers)"),
        read_json_lists,
        write_json_lists,
    ),
)

FORMATS: Final[Mapping[str, Format]] = {fmt.name: fmt for fmt, _, _ in _TABLE}
"""Every format by name, in a stable order."""
_READERS: Final[Mapping[str, _Reader]] = {fmt.name: reader for fmt, reader, _ in _TABLE}
_WRITERS: Final[Mapping[str, _Writer]] = {fmt.name: writer for fmt, _, writer in _TABLE}
_SKYRL_DTYPES: Final = ("uint8", "int16", "int32")
_B85_CHARS_PER_ID: Final = 5
_SNIFF: Final = 64
_SHOWN_PATHS: Final = 3
# Readers that take the object holding routed_experts themselves (SGLang needs routed_experts_dtype beside it).
_HOLDER_READERS: Final = ("sglang", "vllm-npy")
# Formats whose writer keeps a partial mask, start and total_tokens (the others refuse what they cannot carry).
_MASKED: Final = ("nemo-rl", "fireworks-r3v1", "fireworks-trace", "fireworks-matrices")
_FIREWORKS: Final = ("fireworks-r3v1", "fireworks-trace", "fireworks-matrices")
_INT64_MAX: Final = (1 << 63) - 1


def _format_name(name: object, *, auto: bool = True) -> str:
    """A format name (``auto``: the caller also takes ``'auto'``, checked by the caller before this)."""
    plain = plain_str(name)  # a str subclass by its characters: its own __eq__ or __hash__ could match any name
    if not isinstance(plain, str) or plain not in FORMATS:
        expected = f"'auto' or one of {list(FORMATS)}" if auto else f"one of {list(FORMATS)} (a writer needs a format)"
        raise R3WireError.make("format", expected, name)
    return plain


DTypeName: TypeAlias = "str | np.dtype[Any] | type[np.generic]"
"""What a ``dtype`` argument of :func:`read`, :func:`read_response` and :func:`write` may be: a name
(``"uint16"``), or a NumPy dtype or scalar type (``np.dtype("uint16")``, ``np.uint16``), taken by its name."""


def _dtype_argument(dtype: object, error: type[R3WireError]) -> str | None:
    """A caller's ``dtype`` argument as a name: a str (a subclass by its characters), a NumPy dtype or scalar type
    (``np.dtype("uint8")``, ``np.uint8``) by its name; which names a format takes is its reader's or writer's
    to check.

    Raises:
        R3WireError (``error``): anything else, naming ``dtype``.
    """
    if dtype is None:
        return None
    given = plain_str(dtype)
    if isinstance(given, str):
        return given
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        name: str = np.dtype(dtype).name
        return name
    raise error.make("dtype", "a dtype name such as 'uint8' (or a NumPy dtype), or None", dtype)


def _sglang_dtype(dtype: object) -> str | None:
    """The caller's ``dtype`` for SGLang bare strings, by its name (typed str, but untyped callers pass anything).

    Raises:
        R3WireError: not None or one of :data:`SGLANG_DTYPES`.
    """
    given = _dtype_argument(dtype, R3WireError)
    if given is not None and given not in SGLANG_DTYPES:
        raise R3WireError.make("dtype", f"one of {list(SGLANG_DTYPES)} (sglang's bare string)", given)
    return given


def _positive(value: int | None, field: str) -> int | None:
    return None if value is None else check_int(value, field, minimum=1, maximum=1 << 31, error=R3WireError)


def _detect_mapping(obj: Mapping[Any, Any], has_shape: bool, *, nested: str | None = None) -> tuple[str, object]:
    """``nested``: ``obj`` is itself a routes value, and this is the field naming a ``routed_experts`` member of
    it (refused)."""
    if type(obj) is not dict:
        obj = load_object(obj)  # a snapshot, read once; a mapping whose own methods raise is reported, not leaked
    if KEY_SCHEMA in obj or KEY_VERSION in obj:
        return "r3wire", obj  # its reader refuses a routed_experts member like any unknown one
    if KEY_MANIFEST in obj:
        return "fireworks-trace", obj
    if KEY_ROUTED_EXPERTS in obj:
        if nested is not None:
            # No engine nests a routes field in a routes field (docs/formats.md, "Whole responses"): refused here,
            # not unwrapped level after level, which recursed once per level into a RecursionError on 6 KB of JSON.
            raise DecodeError.make(
                nested,
                "absent: a routes value holds the routes itself, never another routed_experts field",
                f"an object with keys {sorted(describe(k)[:20] for k in list(obj)[:8])}",
                raw=True,
            )
        return _detect_routed_experts_field(obj, has_shape)
    if KEY_DATA in obj and KEY_SHAPE in obj:
        if "start" in obj:
            return "prime-rl", obj
        if KEY_DTYPE in obj:
            # Tuples, not sets: a hostile dtype may be unhashable.
            dtype = obj[KEY_DTYPE]
            # isinstance first: ``in`` compares with ``==``, which an ndarray answers elementwise.
            if isinstance(dtype, str) and dtype in PRIME_RL_DTYPES and dtype not in _SKYRL_DTYPES:
                return "prime-rl", obj
            return "skyrl", obj
        return ("prime-rl-b85" if _looks_like_b85(obj) else "prime-rl"), obj
    # Handed a whole body, a choice or a message: say where its routes are instead of what this object lacks.
    inside = []
    for found in find_routes(obj):
        inside.append(_path(found.parts))
        if len(inside) == _SHOWN_PATHS:
            break
    if inside:
        raise DecodeError.make(
            None,
            "a routes value, not an object holding one (pass the value at "
            f"{' or '.join(inside)}, or the whole body to read_response)",
            f"an object with keys {sorted(describe(k)[:20] for k in list(obj)[:8])}",
            raw=True,
        )
    raise DecodeError.make(
        None,
        "a known routed-experts object (r3wire, skyrl, prime-rl, fireworks-trace, or a mapping holding routed_experts)",
        f"an object with keys {sorted(describe(k)[:20] for k in list(obj)[:8])}",
        raw=True,
    )


def _detect_routed_experts_field(holder: Mapping[Any, Any], has_shape: bool) -> tuple[str, object]:
    """The format of ``holder["routed_experts"]``, detected by the value itself (an object, a list, a magic
    prefix); only a bare string with no magic is SGLang's, read with the holder so ``routed_experts_dtype``
    beside it counts."""
    value = holder[KEY_ROUTED_EXPERTS]
    if value is None:
        raise DecodeError.make(
            KEY_ROUTED_EXPERTS, "a routes value", "null (the engine returned no routes for this choice)", raw=True
        )
    if is_mapping(value):
        return _detect_mapping(value, has_shape, nested=f"{KEY_ROUTED_EXPERTS}.{KEY_ROUTED_EXPERTS}")
    if isinstance(value, list):
        return _detect_list(value), value
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        value = byte_text(value, KEY_ROUTED_EXPERTS)
        if _is_json_text(value):
            # No engine double-encodes its routes: JSON text in a string field is a bug on the sending side.
            raise DecodeError.make(
                KEY_ROUTED_EXPERTS,
                "a routes value (an object, nested lists or a format's string), not JSON text inside a string",
                f"a string starting {_text_head(value)[:12]!r}",
                raw=True,
            )
        name = _detect_text(value, has_shape=None)
        if name is not None:
            return name, value
        if has_shape:
            return "sglang", holder
    raise DecodeError.make(
        KEY_ROUTED_EXPERTS,
        "recognisable: an object (r3wire, SkyRL, prime-rl, dynamo), nested lists, or a string starting "
        "'nrlre1:' (NeMo-RL), 'k05VTVBZ' (vLLM .npy) or 'KLUv/' (Fireworks); SGLang's bare base64 also needs "
        "num_layers and top_k (pass them, or format='sglang')",
        "neither" if isinstance(value, (str, bytes, bytearray, memoryview)) else type(value).__name__,
        raw=True,
    )


def _detect_list(value: list[Any]) -> str:
    # Per-token matrices hold strings and nulls; nested id lists hold lists. An empty list is ambiguous.
    first = next((item for item in value if item is not None), None)
    if isinstance(first, str) or (value and first is None):
        return "fireworks-matrices"
    if isinstance(first, list):
        return "json-lists"
    if is_mapping(first):
        raise DecodeError.make(
            None, "a routes value (a list of objects is a batch of responses: pass it to read_response)",
            f"a list of {len(value)} objects", raw=True,
        )  # fmt: skip
    raise DecodeError.make(
        None,
        "nested lists of expert ids (json-lists) or base64 matrices and nulls (fireworks-matrices); an empty "
        "list is either: name the format",
        "[]" if not value else f"a list of {type(first).__name__}",
        raw=True,
    )


def _starts_with(text: str | bytes | bytearray | memoryview, prefix: str) -> bool:
    head = text[: len(prefix)]
    return (head if isinstance(head, str) else bytes(head).decode("latin1")) == prefix


def _looks_like_b85(obj: Mapping[Any, Any]) -> bool:
    # prime-rl's old base85 int32 and its base64 uint8 (dtype omitted) differ in length for every non-empty
    # shape: 5 characters per id against 4 per 3 ids.
    try:
        count = int(np.prod(check_shape(obj[KEY_SHAPE], KEY_SHAPE, ndim=3), dtype=object))
    except DecodeError:
        return False
    data = obj[KEY_DATA]
    return (
        isinstance(data, (str, bytes, bytearray, memoryview)) and count > 0 and len(data) == _B85_CHARS_PER_ID * count
    )


def detect(payload: object, *, num_layers: int | None = None, top_k: int | None = None) -> str:
    """The name of the format ``payload`` is in, when that is unambiguous.

    Detection looks at the value at every level it accepts, never at a first guess. Strings: ``nrlre1:`` →
    nemo-rl; base64 starting ``k05VTVBZ`` (``\\x93NUMPY``) → vllm-npy; ``KLUv/`` (zstd magic, or a leading
    skippable frame) → fireworks-r3v1; JSON object or array text → as the parsed value; any other base64 →
    sglang, but only when ``num_layers`` and ``top_k`` are given (it carries no shape). Lists: of lists →
    json-lists; of strings and nulls → fireworks-matrices. Mappings: ``schema``/``version`` → r3wire;
    ``manifest`` → fireworks-trace; ``routed_experts`` → by its value (an object as a mapping, a list as a list,
    a string by its prefix, else sglang); ``data``+``shape`` with ``start`` → prime-rl, with a SkyRL dtype →
    skyrl, with neither → prime-rl-b85 or prime-rl by the data length.

    Detection is a convenience for tools; a server or trainer that knows its peer should name the format.

    Raises:
        DecodeError: the payload matches no format, or could be more than one (the message says what to pass);
            a whole body, choice or message is refused with the paths of the routes inside it; a
            ``routed_experts`` value holding ``routed_experts`` again, and a reference cycle, are refused at
            their path.
        R3WireError: ``num_layers`` or ``top_k`` is given but not an integer in ``1 .. 2**31`` (as :func:`read`
            refuses it).
    """
    # Checked as read() checks them: detect never names a format whose reader refuses the same arguments.
    layers, slots = _positive(num_layers, "num_layers"), _positive(top_k, "top_k")
    return _detect(payload, has_shape=layers is not None and slots is not None)[0]


def _detect(payload: object, *, has_shape: bool, nested: str | None = None) -> tuple[str, object]:
    """The format name and the value to hand its reader (JSON text parsed once, a holder's routes unwrapped).

    ``nested``: ``payload`` is a routes value itself (read_response), whose ``routed_experts`` member this field
    names: refused, never read as a holder of routes."""
    if is_mapping(payload):
        return _detect_mapping(payload, has_shape, nested=nested)
    if isinstance(payload, list):
        payload = copy_list(payload) if type(payload) is not list else payload  # a subclass's __len__ may lie
        return _detect_list(payload), payload
    if not isinstance(payload, (str, bytes, bytearray, memoryview)):
        raise DecodeError.make(
            None, "a routed-experts payload (str, bytes, a list or a mapping)", type(payload).__name__, raw=True
        )
    payload = byte_text(payload, None)
    if _is_json_text(payload):
        # root="": a payload's members are named as its readers and decode_routes name them (shape[0], not $.shape[0]).
        parsed = load_json(payload, what="a routed-experts payload", root="")
        if not isinstance(parsed, (dict, list)):
            raise DecodeError.make(None, "a JSON object or array", f"a JSON {type(parsed).__name__}", raw=True)
        return _detect(parsed, has_shape=has_shape, nested=nested)
    name = _detect_text(payload, has_shape=has_shape)
    if name is not None:
        return name, payload
    raise DecodeError.make(
        None,
        "a recognisable format: bare base64 without a magic prefix is SGLang's, which needs num_layers and top_k "
        "(pass both, or name the format)",
        f"text starting {_text_head(payload)[:12]!r}",
        raw=True,
    )


def _text_head(payload: str | bytes | bytearray | memoryview) -> str:
    """The first characters of ``payload`` after leading whitespace (bytes read as latin-1), for sniffing."""
    sniff = payload[:_SNIFF]
    return (sniff if isinstance(sniff, str) else bytes(sniff).decode("latin1")).lstrip()


def _raw_format(payload: str | bytes | bytearray | memoryview) -> str | None:
    """vllm-npy or fireworks-r3v1 for raw ``.npy`` or zstd bytes, by their magic; else None."""
    if isinstance(payload, str):
        return None
    head = bytes(payload[: len(NPY_MAGIC)])
    if head == NPY_MAGIC:
        return "vllm-npy"
    if head[: len(ZSTD_MAGIC)] == ZSTD_MAGIC or _skippable(head):
        return "fireworks-r3v1"
    return None


def _is_json_text(payload: str | bytes | bytearray | memoryview) -> bool:
    # A skippable zstd frame may start with "[" (0x5B): the magic wins, as it always has.
    return _raw_format(payload) is None and _text_head(payload).startswith(("{", "["))


def _detect_text(payload: str | bytes | bytearray | memoryview, *, has_shape: bool | None) -> str | None:
    """The name of the format (a key of :data:`FORMATS`) of a string or bytes that is not JSON text (callers
    check :func:`_is_json_text` first), by its first bytes; with ``has_shape`` None, None instead of guessing
    SGLang."""
    raw = _raw_format(payload)
    if raw is not None:
        return raw
    start = _text_head(payload)
    if start.startswith(NEMO_RL_MAGIC + ":"):
        return "nemo-rl"
    if start.startswith(NPY_MAGIC_B64):
        return "vllm-npy"
    if start.startswith(ZSTD_MAGIC_B64) or _skippable(_b64_head(start)):
        return "fireworks-r3v1"
    return "sglang" if has_shape else None


def _b64_head(text: str) -> bytes:
    try:
        return base64.b64decode(text[:8], validate=True)
    except (binascii.Error, ValueError):
        return b""


def _skippable(head: bytes) -> bool:
    return len(head) >= len(ZSTD_MAGIC) and head[1:4] == SKIPPABLE_MAGIC_TAIL and head[0] & 0xF0 == 0x50


def read(
    payload: object,
    format: str = "auto",  # the natural name at call sites: read(payload, format="sglang")
    *,
    num_layers: int | None = None,
    top_k: int | None = None,
    dtype: DTypeName | None = None,
    num_experts: int | None = None,
    max_elements: int | None = None,
) -> ReadResult:
    """Read routed experts from any supported format into one validated array.

    Args:
        payload: the wire value: a ``str`` or bytes (base64, ``nrlre1:`` text, JSON text, raw ``.npy`` or zstd
            bytes) or a mapping (a parsed JSON object, e.g. an envelope or SGLang's ``meta_info``).
        format: a name from :data:`FORMATS`, or ``"auto"`` to :func:`detect` it.
        num_layers: layers per row; required by formats without a shape (sglang, fireworks-r3v1), and checked
            against the payload's shape by the others.
        top_k: experts per layer; required with ``num_layers`` by the same formats, checked by the others.
        dtype: sglang only: the element type of a bare string (default ``"int32"``): a name, or a NumPy dtype
            or scalar type (``np.int32``).
        num_experts: when given, every id must be below it.
        max_elements: refuse a payload declaring more ids than this, before decoding anything.

    Returns:
        A :class:`ReadResult`: ``routes`` ``[rows, layers, top_k]`` in the payload's own integer dtype (native
        byte order, writable, C-contiguous), ``start``, ``mask`` and ``total_tokens`` where the format has them.

    Raises:
        DecodeError: the payload is malformed, inconsistent, ambiguous under ``"auto"``, breaks a limit, or its
            shape disagrees with ``num_layers`` / ``top_k``.
        R3WireError: a bad argument (unknown format, non-positive ``num_layers``, a missing shape, a ``dtype``
            for a format other than sglang).
        ImportError: fireworks-r3v1 without the ``zstd`` extra.
    """
    named: object = format  # typed str, but untyped callers pass anything
    # The type first: ``==`` on an ndarray compares elementwise, and its truth value raises.
    name = "auto" if isinstance(named, str) and plain_str(named) == "auto" else _format_name(named)
    given = _sglang_dtype(dtype)
    opts = ReadOptions(
        num_layers=_positive(num_layers, "num_layers"),
        top_k=_positive(top_k, "top_k"),
        dtype=given,
        num_experts=optional_num_experts(num_experts),
        max_elements=optional_max_elements(max_elements),
    )
    if name == "auto":
        name, payload = _detect(payload, has_shape=opts.num_layers is not None and opts.top_k is not None)
    elif is_mapping(payload) and KEY_ROUTED_EXPERTS in payload and name not in _HOLDER_READERS:
        payload = payload[KEY_ROUTED_EXPERTS]  # a choice or message holding the value: read the value
    if dtype is not None and name != "sglang":
        raise R3WireError.make("dtype", f"None ({name} carries its dtype; only sglang's bare string needs one)", dtype)
    return _read_as(name, payload, opts)


def _read_as(name: str, payload: object, opts: ReadOptions) -> ReadResult:
    """``payload`` read by the reader of format ``name`` as it is (never unwrapped), then held to what every format
    holds and to the caller's model."""
    result = _READERS[name](payload, opts)
    # Every format holds routes: at least one layer and one slot (docs/wire-format.md §6), as decode_routes.
    for axis in (1, 2):
        if not result.routes.shape[axis]:
            raise DecodeError.make(f"shape[{axis}]", "an integer in 1..9223372036854775807", 0)
    # A shape that disagrees with the caller's model is a payload from somewhere else: say so here, not in the
    # trainer's gather three calls later.
    for axis, (field, value) in enumerate((("num_layers", opts.num_layers), ("top_k", opts.top_k)), start=1):
        if value is not None and result.routes.shape[axis] != value:
            raise DecodeError.make(
                "shape", f"[rows, {opts.num_layers}, {opts.top_k}] (the caller's {field}={value})",
                list(result.routes.shape),
            )  # fmt: skip
    return result


# What format readers call the routes array they decode from a value: a field with only this name is the value.
_DECODED_NAMES: Final = frozenset({"routes", "data", "matrix"})


def _placed(error: R3WireError, parts: tuple[object, ...], value: object, *, wrapped: bool) -> R3WireError:
    """A format reader's error placed at the JSON location of the routes value it read, at ``parts``.

    Readers name fields relative to their value: members of an object value (``shape``, ``data``), and parts that
    are not JSON members: an element of the decoded routes (``data[0, 1, 2]``, ``routes[0, 1, 2]``), a piece of an
    encoded string (``npy header.shape``, ``npy header.shape[1]``, ``matrix``), or the SGLang reader's own
    ``routed_experts``. Only real members stay in the path; an element becomes ``<path>[0, 1, 2]`` and any other
    part, with its index, moves into ``expected`` (as does a member the object value lacks), so the field is always
    a location in the body. ``wrapped``: the value was read as the ``routed_experts`` member of an object holding
    the holder's ``routed_experts_dtype`` too (a member of the holder).
    """
    field = error.field or ""
    if wrapped and (field.startswith(KEY_ROUTED_EXPERTS_DTYPE) or error.expected is None or error.got is None):
        return relocated(error, parts[:-1])  # a member of the holder, or an error make() did not build
    if (wrapped or not is_mapping(value)) and field.startswith(KEY_ROUTED_EXPERTS):
        field = field[len(KEY_ROUTED_EXPERTS) :]  # the reader's name for the value itself
    if isinstance(error, UnsupportedVersionError) or error.expected is None or error.got is None:
        return relocated(error, parts)  # not an error make() builds: left as the reader named it
    head, bracket, index = field.partition("[")
    head = head.strip(".")
    member, _, inner = head.partition(".")
    inside = not is_mapping(value)  # what the reader names is inside an encoded string
    if is_mapping(value) and member in value:
        if not isinstance(value[member], str):
            # A member holding JSON (shape, start, a nested object): the field is a real path.
            return relocated(type(error).make(head + bracket + index, error.expected, error.got, raw=True), parts)
        parts, head, inside = (*parts, member), inner, True  # a string member (data): what follows is inside it
    if head and (head not in _DECODED_NAMES or not inside):
        # A part inside the string, its own index included (``npy header.shape[1]`` is a header entry, not an
        # element of the routes), or a member the object value lacks (``data`` too): said in the message, the
        # field stays the value. The decoded array's own name inside a string says nothing the path does not.
        expected = f"{error.expected} (its {head}{bracket}{index})"
        return relocated(type(error).make(None, expected, error.got, raw=True), parts)
    # An element index, or the name a reader gives the decoded array itself, says nothing the path does not.
    return relocated(type(error).make(bracket + index or None, error.expected, error.got, raw=True), parts)


def read_response(
    body: object,
    *,
    num_layers: int | None = None,
    top_k: int | None = None,
    num_experts: int | None = None,
    max_elements: int | None = None,
    dtype: DTypeName | None = None,
) -> list[ReadResult]:
    """Read every routes field of a whole engine response, in document order.

    Knows where each engine nests them (``docs/formats.md``, "Whole responses"): vLLM chat/completions and
    ``/inference/v1/generate`` and SkyRL / prime-rl generate bodies (``choices[i].routed_experts``), SGLang
    ``/generate`` (``meta_info.routed_experts``, with ``routed_experts_dtype``) and its OpenAI endpoints
    (``choices[i].sgl_ext.routed_experts``), dynamo (``nvext.routed_experts``), NeMo-RL chat
    (``choices[i].message.routed_experts``), the Fireworks trace (``payloads.router_replay``) and
    ``routing_matrices``, and r3wire :func:`r3wire.dumps` bodies (``r3wire.routes`` envelopes under any key).
    A ``routed_experts`` of ``null`` (routes not captured) is skipped. Each value is read by its own format,
    detected from the value.

    Args:
        body: the response as JSON text (``str`` or any bytes-like object, e.g. ``response.content``, a NumPy
            uint8 array or an ``mmap``: what :func:`r3wire.loads` accepts) or already parsed (``response.json()``;
            tuples are walked like lists, and read like lists as token ids and logprobs; nested lists of routes
            must be lists); a list of bodies (SGLang batch) is read as one document.
        num_layers: layers per row: needed for SGLang and Fireworks routes, checked against the others.
        top_k: experts per layer, likewise.
        num_experts: when given, every id must be below it.
        max_elements: refuse any routes field declaring more ids than this, before decoding it.
        dtype: the element type of SGLang bare strings that do not carry ``routed_experts_dtype`` beside them
            (``sgl_ext``, dynamo's ``nvext``): ``"int32"`` (the default, as SGLang's), ``"uint16"`` or
            ``"uint8"``. One that does must agree with it. Other formats carry their dtype and ignore this.

    Returns:
        One :class:`ReadResult` per routes field, with ``path`` (``$.choices[1].routed_experts``) and, where the
        choice carries them beside the routes, ``token_ids`` (vLLM ``token_ids``, SGLang ``output_ids``),
        ``prompt_token_ids`` (the choice's, or the response's when it shares one among its choices: vLLM chat) and
        the sampled ``logprobs`` as a 1-d array (float64 from JSON numbers, else the envelope's dtype), every
        missing, NaN or infinite one replaced by the value of that dtype nearest :data:`r3wire.LOGPROB_FLOOR`
        (-9999.0; -10000.0 in the float16 an older ``r3wire.array`` body may carry, as
        :func:`r3wire.clamp_logprobs` does) and counted in ``num_clamped``; when both are there, one logprob
        per token id (an echo's prompt logprobs left out). With both prompt and completion ids,
        :meth:`ReadResult.call_token_ids` is the engine call's whole sequence, and the routes fit it:
        ``start + rows <= len(prompt) + len(completion)``, and where the payload states the start (prime-rl,
        Fireworks SUFFIX) the rows end where that format's rows end (``start + rows == n - 1``, the call's last
        forwarded token). ``[]`` when the body has no routes.

    Raises:
        DecodeError: the body is neither JSON text nor a parsed object or array (field ``$``, naming its type),
            the text is not JSON or holds a JSON scalar, or a routes field, its token ids or its logprobs are
            malformed (an envelope of logprobs that is not 1-d included), or the logprobs are not one per token id
            (or an SGLang entry names another token id), or
            token ids (prompt or completion) are malformed or more than ``max_elements``, or the routes have more
            rows than the call's prompt and completion ids (or SGLang's ``meta_info`` ``prompt_tokens`` and
            ``completion_tokens`` beside them) have tokens, or rows from a start the payload states do not end
            where that format's rows end in the call those ids make, or a routes value holds ``routed_experts``
            again, or a body built in process holds a reference cycle or shares containers past the bound of
            :class:`r3wire._walk.Guard`; the field is the JSONPath of the problem
            (``$.choices[0].routed_experts.shape``, ``$.choices[0].logprobs.content``, ``$.prompt_token_ids[2]``,
            ``$.choices[0].routed_experts``).
        R3WireError: a bad argument, or routes that need ``num_layers`` and ``top_k`` without them (at the path;
            ``DecodeError`` for a bare SGLang string, which without a shape cannot be told from a malformed value).
        ImportError: Fireworks routes without the ``zstd`` extra.
    """
    limit = optional_max_elements(max_elements)
    # Arguments are checked once, here: a bad one is the caller's, not a field of the body (no path), and a body
    # without routes does not let it pass unnoticed.
    layers = _positive(num_layers, "num_layers")
    slots = _positive(top_k, "top_k")
    experts = optional_num_experts(num_experts)
    sglang_dtype = _sglang_dtype(dtype)
    has_shape = num_layers is not None and top_k is not None
    if not (isinstance(body, (list, tuple)) or is_mapping(body)):
        # Exactly the text loads accepts (any bytes-like object or str); anything else is refused by type, never
        # walked into [] (which a trainer would take for "no routes").
        body = load_json(_as_text(body), what="a response body")
        if not isinstance(body, (dict, list)):
            raise DecodeError.make(
                "$",
                "a JSON object or array (a response body)",
                "null" if body is None else f"a JSON {type(body).__name__}",
                raw=True,
            )
    if isinstance(body, (list, tuple)):
        # A batch is a list of bodies, each an object. Anything else in it, above all a body still as text
        # (``[r.text for r in responses]``), would be walked as data into ``[]``: "no routes", silently.
        for i, item in enumerate(copy_list(body)):  # its storage: a subclass's own __iter__ may raise
            if not is_mapping(item):
                raise DecodeError.make(
                    f"$[{i}]",
                    "a response body as a JSON object (a list is a batch of parsed bodies: "
                    "parse each text body, or read them one by one)",
                    item,
                )
    results = []
    # One guard for the walk and the decoding: a routes field reached again (a choice in a batch ``[body] * n``,
    # one string in two choices) is read again, and counts what its first reading yielded: the routes' ids, and the
    # token ids and logprobs read beside them (a shared choice's long token_ids costs as much as its routes).
    guard = Guard(body, _path)
    opts = ReadOptions(num_layers=layers, top_k=slots, num_experts=experts, max_elements=limit)
    sglang_opts = dataclasses.replace(opts, dtype=sglang_dtype)  # only SGLang's bare string needs a dtype
    for found in find_routes(body, guard):
        identity = routes_identity(found)
        guard.decoding(identity, functools.partial(_path, found.parts))
        if found.key == KEY_ROUTED_EXPERTS:
            # Keep routed_experts_dtype beside a bare SGLang string; any other value is read by itself.
            holder = found.holder  # the object whose member the routes key is
            payload: object = (
                found.value
                if holder is None
                else {k: holder[k] for k in (KEY_ROUTED_EXPERTS, KEY_ROUTED_EXPERTS_DTYPE) if k in holder}
            )
        else:
            payload = found.value
        wrapped = payload is not found.value
        try:
            # A routed_experts value is read with its holder (the wrapped payload); any other routes value is one
            # by itself, never an object holding routes.
            name, value = _detect(payload, has_shape=has_shape, nested=None if wrapped else KEY_ROUTED_EXPERTS)
            # The value _detect chose, read as it is: read() would take an object holding routed_experts (an
            # envelope with a stray member) for a choice and read that member instead.
            result = _read_as(name, value, sglang_opts if name == "sglang" else opts)
        except R3WireError as exc:
            raise _placed(exc, found.parts, found.value, wrapped=wrapped) from exc
        beside = beside_routes(found, max_elements=limit)
        check_call_fits(int(result.routes.shape[0]), result.start, beside, found.parts, result.format)
        check_counts_fit(int(result.routes.shape[0]), result.start, found)
        clamped = beside.logprobs
        read_beside = (beside.token_ids, beside.prompt_token_ids, None if clamped is None else clamped.values)
        guard.decoded(identity, result.routes.size + sum(0 if array is None else array.size for array in read_beside))
        results.append(
            dataclasses.replace(
                result,
                path=_path(found.parts, exact=True),
                parts=found.parts,
                token_ids=beside.token_ids,
                prompt_token_ids=beside.prompt_token_ids,
                logprobs=None if clamped is None else clamped.values,
                num_clamped=0 if clamped is None else clamped.num_clamped,
            )
        )
    return results


@overload
def write(
    routes: object,
    format: Literal["r3wire", "skyrl", "prime-rl", "prime-rl-b85", "fireworks-trace"] = ...,
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: DTypeName | None = None,
    num_experts: int | None = None,
    pack_bits: bool | None = None,
) -> dict[str, Any]: ...


@overload
def write(
    routes: object,
    format: Literal["json-lists", "fireworks-matrices"],
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: DTypeName | None = None,
    num_experts: int | None = None,
    pack_bits: bool | None = None,
) -> list[Any]: ...


@overload
def write(
    routes: object,
    format: Literal["vllm-npy", "nemo-rl", "fireworks-r3v1"],
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: DTypeName | None = None,
    num_experts: int | None = None,
    pack_bits: bool | None = None,
) -> str: ...


@overload
def write(
    routes: object,
    format: str,
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: DTypeName | None = None,
    num_experts: int | None = None,
    pack_bits: bool | None = None,
) -> str | dict[str, Any] | list[Any]: ...


def write(
    routes: object,
    format: str = "r3wire",
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: DTypeName | None = None,
    num_experts: int | None = None,
    pack_bits: bool | None = None,
) -> str | dict[str, Any] | list[Any]:
    """Write routed experts in a format an existing client of that engine reads.

    Args:
        routes: ids ``[rows, layers, top_k]`` of any integer dtype (NumPy, torch or nested lists), or a
            :class:`ReadResult`, whose ``start``, ``mask``, ``total_tokens``, ``num_experts`` and (for r3wire)
            bit-packing are used unless given here.
        format: a name from :data:`FORMATS`.
        start: sequence position of row 0 (prime-rl, fireworks-r3v1 SUFFIX, written as ``replay_start_token``
            ``start + 1``). Other formats carry no offset,
            so only ``None`` or 0 is accepted there.
        mask: one bool per row, false where the row was not replayed: fireworks-r3v1 and fireworks-trace write
            a BITMAP, fireworks-matrices ``null``; nemo-rl writes those rows as -1 (missing route); other formats
            accept only an all-true mask.
        total_tokens: the Fireworks formats: the sequence's token count (default ``start + rows + 1``: the last
            row's position produced token ``start + rows``).
            Other formats carry none, so only ``None``, ``start + rows`` or ``start + rows + 1`` (nothing past the
            rows but the last token, never forwarded) is accepted there.
            For the Fireworks formats ``start``, ``total_tokens`` and ``start + rows`` are at most 2**32 - 1 (u32
            in r3/v1; the per-token matrices list is held to the same bound); elsewhere ``start`` is an int64.
        dtype: the element type to write, if the format allows a choice; by default each format's own rule. A
            name (``"uint16"``), or a NumPy dtype or scalar type, taken by its name.
            json-lists has none to choose: only ``None``.
        num_experts: the model's expert count: every id must be below it, and formats whose engines pick the
            dtype from it (r3wire, vllm-npy, nemo-rl, fireworks-*) do the same.
        pack_bits: r3wire only: write the ids bit-packed (see :func:`r3wire.encode_routes`). ``None`` keeps a
            :class:`ReadResult`'s packing (``bits`` set), else unpacked.

    Returns:
        A JSON-ready dict for object formats (r3wire, skyrl, prime-rl, prime-rl-b85, fireworks-trace, sglang
        with ``dtype``), a list for json-lists and fireworks-matrices, else a ``str``.

    Raises:
        EncodeError: the routes cannot be represented exactly in the format (negative or too large ids, a
            nonzero ``start``, a partial ``mask`` or a ``total_tokens`` the format cannot carry, a dtype too
            narrow or one json-lists cannot carry, a ``start`` or ``total_tokens`` beyond the format's token count).
        R3WireError: an unknown format, or ``pack_bits`` not a bool.
        ImportError: fireworks-r3v1 and fireworks-trace without the ``zstd`` extra.
    """
    name = _format_name(format, auto=False)
    if pack_bits is not None and not isinstance(pack_bits, (bool, np.bool_)):
        raise R3WireError.make("pack_bits", "a bool or None", pack_bits)
    dtype = _dtype_argument(dtype, EncodeError)
    if isinstance(routes, ReadResult):
        start = routes.start if start is None else start
        mask = routes.mask if mask is None else mask
        total_tokens = routes.total_tokens if total_tokens is None else total_tokens
        num_experts = routes.num_experts if num_experts is None else num_experts
        if pack_bits is None:
            pack_bits = routes.bits is not None and name == "r3wire"
        routes = routes.routes
    if pack_bits and name != "r3wire":
        raise EncodeError.make("pack_bits", f"False or None ({name} has no bit-packed form; r3wire does)", True)
    arr = as_numpy(routes, field="routes")
    _check_readable(arr)
    rows = int(arr.shape[0]) if arr.ndim else 0
    # Token counts are bounded before any writer sizes anything by them (fireworks-matrices writes one list entry
    # per token): Fireworks counts are u32 in r3/v1, and its per-token form is held to the same bound.
    most = MAX_TOKEN_COUNT if name in _FIREWORKS else _INT64_MAX
    if start is not None:
        start = check_int(start, "start", minimum=0, maximum=most, error=EncodeError)
        # start + rows + 1 tokens: the last row's position produced one more token, which the sequence counts.
        if name in _FIREWORKS and start + rows + 1 > most:
            raise EncodeError.make(
                "start", f"at most {most} - rows - 1 = {most - rows - 1} (start + rows + 1 is a u32)", start
            )
    if total_tokens is not None:
        total_tokens = check_int(total_tokens, "total_tokens", minimum=0, maximum=most, error=EncodeError)
    mask_array = None if mask is None else _checked_mask(mask, rows)
    if name not in _FIREWORKS:
        if start and not FORMATS[name].carries_start:
            raise EncodeError.make("start", f"0 or None ({name} carries no row offset)", start)
        if mask_array is not None and name not in _MASKED and not mask_array.all():
            raise EncodeError.make(
                "mask", f"all true ({name} cannot mark rows as not replayed; {', '.join(_MASKED)} can)",
                f"{int((~mask_array).sum())} false rows", raw=True,
            )  # fmt: skip
        if name not in _MASKED:
            mask_array = None
        end = (start or 0) + rows
        # Rows through the last forwarded token (a Fireworks result's: total_tokens = start + rows + 1) or
        # through the last token (a prefill node's) drop nothing; any other count would lose tokens past the rows
        # without a word.
        if total_tokens is not None and total_tokens not in (end, end + 1):
            raise EncodeError.make(
                "total_tokens",
                f"None, start + rows = {end} or start + rows + 1 = {end + 1} ({name} carries no sequence length; "
                "the Fireworks formats do)",
                total_tokens,
            )
    opts = WriteOptions(
        start=start,
        mask=mask_array,
        total_tokens=total_tokens if name in _FIREWORKS else None,
        dtype=dtype,
        num_experts=optional_num_experts(num_experts, EncodeError),
        pack_bits=bool(pack_bits),
    )
    return _WRITERS[name](arr, opts)


def _check_readable(arr: np.ndarray[Any, Any]) -> None:
    """Refuse, for every writer alike, routes that every reader refuses: a payload written without error must
    read back (the format's own limits, such as its dtypes, are its writer's to check)."""
    if arr.ndim != ROUTES_NDIM or arr.dtype.kind not in "iu":
        return  # the writer names what is wrong with it
    for axis in (1, 2):
        if not arr.shape[axis]:
            raise EncodeError.make(
                f"routes.shape[{axis}]", "at least 1 (every reader needs layers >= 1 and top_k >= 1)", 0
            )
    # Only uint64 holds ids beyond int64, which no reader takes (json-lists, the widest, reads int64).
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
        where = first_index(arr > _INT64_MAX)
        raise EncodeError.make(
            f"routes{where}", f"an expert id at most {_INT64_MAX} (no reader takes more)", int(arr[tuple(where)])
        )


def _checked_mask(mask: object, rows: int) -> np.ndarray[Any, Any]:
    array = as_numpy(mask, field="mask")
    if array.dtype.kind != "b" or array.shape != (rows,):
        raise EncodeError.make(
            "mask", f"a bool array of shape ({rows},)", f"{array.dtype} {list(array.shape)}", raw=True
        )
    return np.ascontiguousarray(array)
