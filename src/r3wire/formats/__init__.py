"""Read and write every engine's routed-experts format with one API.

    >>> from r3wire import formats
    >>> result = formats.read(choice["routed_experts"])            # format detected: vLLM's base64 .npy
    >>> result.routes.shape, result.routes.dtype, result.start
    >>> formats.write(result.routes, "prime-rl", start=17)          # what a prime-rl client expects

Every reader applies the same checks as :func:`r3wire.decode_routes`: sizes before allocation, strict base64,
no pickle, non-negative ids (NeMo-RL's all -1 missing-route rows excepted), and raises :class:`DecodeError` for
anything malformed. The formats and exactly what each accepts are specified in ``docs/formats.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, overload

import numpy as np

from r3wire._arraylike import as_numpy
from r3wire._routecheck import optional_num_experts
from r3wire._validate import check_int, check_shape, load_object, optional_max_elements
from r3wire.errors import DecodeError, EncodeError, R3WireError, describe
from r3wire.formats._common import MISSING_ROUTE, ReadOptions, ReadResult, WriteOptions
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
    ZSTD_MAGIC,
    ZSTD_MAGIC_B64,
    read_fireworks,
    write_fireworks,
)
from r3wire.formats._nemo_rl import NEMO_RL_MAGIC, read_nemo_rl, write_nemo_rl
from r3wire.formats._npy import NPY_MAGIC, NPY_MAGIC_B64, read_vllm_npy, write_vllm_npy
from r3wire.formats._sglang import SGLANG_DTYPES, read_sglang, write_sglang
from r3wire.schema import KEY_DATA, KEY_DTYPE, KEY_SCHEMA, KEY_SHAPE, KEY_VERSION

__all__ = [
    "FORMATS",
    "MAX_DECOMPRESSED_BYTES",
    "MISSING_ROUTE",
    "Format",
    "ReadResult",
    "detect",
    "read",
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
_Writer = Callable[[object, WriteOptions], "str | dict[str, Any]"]

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
)

FORMATS: Final[Mapping[str, Format]] = {fmt.name: fmt for fmt, _, _ in _TABLE}
"""Every format by name, in a stable order."""
_READERS: Final[Mapping[str, _Reader]] = {fmt.name: reader for fmt, reader, _ in _TABLE}
_WRITERS: Final[Mapping[str, _Writer]] = {fmt.name: writer for fmt, _, writer in _TABLE}
_SKYRL_DTYPES: Final = ("uint8", "int16", "int32")
_B85_CHARS_PER_ID: Final = 5
_SNIFF: Final = 64


def _format_name(name: object) -> str:
    if not isinstance(name, str) or name not in FORMATS:
        raise R3WireError.make("format", f"'auto' or one of {list(FORMATS)}", name)
    return name


def _positive(value: int | None, field: str) -> int | None:
    return None if value is None else check_int(value, field, minimum=1, maximum=1 << 31, error=R3WireError)


def _detect_mapping(obj: Mapping[Any, Any], has_shape: bool) -> str:
    if KEY_SCHEMA in obj or KEY_VERSION in obj:
        return "r3wire"
    if "routed_experts" in obj:
        return _detect_routed_experts_field(obj["routed_experts"], has_shape)
    if KEY_DATA in obj and KEY_SHAPE in obj:
        if "start" in obj:
            return "prime-rl"
        if KEY_DTYPE in obj:
            # Tuples, not sets: a hostile dtype may be unhashable.
            dtype = obj[KEY_DTYPE]
            # isinstance first: ``in`` compares with ``==``, which an ndarray answers elementwise.
            if isinstance(dtype, str) and dtype in PRIME_RL_DTYPES and dtype not in _SKYRL_DTYPES:
                return "prime-rl"
            return "skyrl"
        return "prime-rl-b85" if _looks_like_b85(obj) else "prime-rl"
    raise DecodeError.make(
        None,
        "a known routed-experts object (r3wire, skyrl, prime-rl, or a mapping holding routed_experts)",
        f"an object with keys {sorted(describe(k)[:20] for k in list(obj)[:8])}",
        raw=True,
    )


def _detect_routed_experts_field(value: object, has_shape: bool) -> str:
    if isinstance(value, (str, bytes, bytearray, memoryview)) and _starts_with(value, NPY_MAGIC_B64):
        return "vllm-npy"
    if has_shape:
        return "sglang"
    raise DecodeError.make(
        "routed_experts",
        "recognisable: vLLM's .npy base64 starts with 'k05VTVBZ'; SGLang's bare base64 also needs num_layers "
        "and top_k (pass them, or format='sglang')",
        "neither",
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
    return isinstance(data, (str, bytes)) and count > 0 and len(data) == _B85_CHARS_PER_ID * count


def detect(payload: object, *, num_layers: int | None = None, top_k: int | None = None) -> str:
    """The name of the format ``payload`` is in, when that is unambiguous.

    Strings: ``nrlre1:`` → nemo-rl; base64 starting ``k05VTVBZ`` (``\\x93NUMPY``) → vllm-npy; ``KLUv/`` (zstd
    magic) → fireworks-r3v1; JSON object text → as a mapping; any other base64 → sglang, but only when
    ``num_layers`` and ``top_k`` are given (it carries no shape). Mappings: ``schema``/``version`` → r3wire;
    ``routed_experts`` → vllm-npy or sglang by its value; ``data``+``shape`` with ``start`` → prime-rl, with a
    SkyRL dtype → skyrl, with neither → prime-rl-b85 or prime-rl by the data length.

    Detection is a convenience for tools; a server or trainer that knows its peer should name the format.

    Raises:
        DecodeError: the payload matches no format, or could be more than one (the message says what to pass).
    """
    return _detect(payload, has_shape=num_layers is not None and top_k is not None)[0]


def _detect(payload: object, *, has_shape: bool) -> tuple[str, object]:
    if isinstance(payload, Mapping):
        return _detect_mapping(payload, has_shape), payload
    if isinstance(payload, (bytes, bytearray, memoryview)):
        head = bytes(payload[: len(NPY_MAGIC)])
        if head == NPY_MAGIC:
            return "vllm-npy", payload
        if head[: len(ZSTD_MAGIC)] == ZSTD_MAGIC:
            return "fireworks-r3v1", payload
    if not isinstance(payload, (str, bytes, bytearray, memoryview)):
        raise DecodeError.make(
            None, "a routed-experts payload (str, bytes or a mapping)", type(payload).__name__, raw=True
        )
    sniff = payload[:_SNIFF]
    start = (sniff if isinstance(sniff, str) else bytes(sniff).decode("latin1")).lstrip()
    if start.startswith("{"):
        # read() parses JSON text once: _detect hands the parsed object on with the name.
        parsed = load_object(payload, what="a routed-experts object")
        return _detect_mapping(parsed, has_shape), parsed
    if start.startswith(NEMO_RL_MAGIC + ":"):
        return "nemo-rl", payload
    if start.startswith(NPY_MAGIC_B64):
        return "vllm-npy", payload
    if start.startswith(ZSTD_MAGIC_B64):
        return "fireworks-r3v1", payload
    if has_shape:
        return "sglang", payload
    raise DecodeError.make(
        None,
        "a recognisable format: bare base64 without a magic prefix is SGLang's, which needs num_layers and top_k "
        "(pass both, or name the format)",
        f"text starting {start[:12]!r}",
        raw=True,
    )


def read(
    payload: object,
    format: str = "auto",  # the natural name at call sites: read(payload, format="sglang")
    *,
    num_layers: int | None = None,
    top_k: int | None = None,
    dtype: str | None = None,
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
        dtype: sglang only: the element type of a bare string (default ``"int32"``).
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
    name = "auto" if format == "auto" else _format_name(format)
    given: object = dtype  # typed str, but untyped callers pass anything
    if given is not None and (not isinstance(given, str) or given not in SGLANG_DTYPES):
        raise R3WireError.make("dtype", f"one of {list(SGLANG_DTYPES)} (sglang's bare string)", given)
    opts = ReadOptions(
        num_layers=_positive(num_layers, "num_layers"),
        top_k=_positive(top_k, "top_k"),
        dtype=dtype,
        num_experts=optional_num_experts(num_experts),
        max_elements=optional_max_elements(max_elements),
    )
    if name == "auto":
        name, payload = _detect(payload, has_shape=opts.num_layers is not None and opts.top_k is not None)
    if dtype is not None and name != "sglang":
        raise R3WireError.make("dtype", f"None ({name} carries its dtype; only sglang's bare string needs one)", dtype)
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


@overload
def write(
    routes: object,
    format: Literal["r3wire", "skyrl", "prime-rl", "prime-rl-b85"] = ...,
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: str | None = None,
    num_experts: int | None = None,
) -> dict[str, Any]: ...


@overload
def write(
    routes: object,
    format: Literal["vllm-npy", "nemo-rl", "fireworks-r3v1"],
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: str | None = None,
    num_experts: int | None = None,
) -> str: ...


@overload
def write(
    routes: object,
    format: str,
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: str | None = None,
    num_experts: int | None = None,
) -> str | dict[str, Any]: ...


def write(
    routes: object,
    format: str = "r3wire",
    *,
    start: int | None = None,
    mask: Any = None,
    total_tokens: int | None = None,
    dtype: str | None = None,
    num_experts: int | None = None,
) -> str | dict[str, Any]:
    """Write routed experts in a format an existing client of that engine reads.

    Args:
        routes: ids ``[rows, layers, top_k]`` of any integer dtype (NumPy, torch or nested lists), or a
            :class:`ReadResult`, whose ``start``, ``mask`` and ``total_tokens`` are used unless given here.
        format: a name from :data:`FORMATS`.
        start: sequence position of row 0 (prime-rl, fireworks-r3v1 SUFFIX). Other formats carry no offset,
            so only ``None`` or 0 is accepted there.
        mask: one bool per row, false where the row was not replayed: fireworks-r3v1 writes a BITMAP; nemo-rl
            writes those rows as -1 (missing route); other formats accept only an all-true mask.
        total_tokens: fireworks-r3v1 SUFFIX only: the sequence length (default ``start + rows``).
        dtype: the element type to write, if the format allows a choice; by default each format's own rule.
        num_experts: the model's expert count: every id must be below it, and formats whose engines pick the
            dtype from it (r3wire, vllm-npy, nemo-rl, fireworks-r3v1) do the same.

    Returns:
        A JSON-ready dict for object formats (r3wire, skyrl, prime-rl, prime-rl-b85, sglang with ``dtype``),
        else a ``str``.

    Raises:
        EncodeError: the routes cannot be represented exactly in the format (negative or too large ids, a
            nonzero ``start`` or a partial ``mask`` the format cannot carry, a dtype too narrow).
        R3WireError: an unknown format.
        ImportError: fireworks-r3v1 without the ``zstd`` extra.
    """
    name = _format_name(format)
    if isinstance(routes, ReadResult):
        start = routes.start if start is None else start
        mask = routes.mask if mask is None else mask
        total_tokens = routes.total_tokens if total_tokens is None else total_tokens
        routes = routes.routes
    arr = as_numpy(routes, field="routes")
    rows = int(arr.shape[0]) if arr.ndim else 0
    if start is not None:
        start = check_int(start, "start", minimum=0, maximum=(1 << 63) - 1, error=EncodeError)
    if total_tokens is not None:
        total_tokens = check_int(total_tokens, "total_tokens", minimum=0, maximum=(1 << 63) - 1, error=EncodeError)
    mask_array = None if mask is None else _checked_mask(mask, rows)
    if name != "fireworks-r3v1":
        if start and not FORMATS[name].carries_start:
            raise EncodeError.make("start", f"0 or None ({name} carries no row offset)", start)
        if mask_array is not None and name != "nemo-rl" and not mask_array.all():
            raise EncodeError.make(
                "mask", f"all true ({name} cannot mark rows as not replayed; nemo-rl and fireworks-r3v1 can)",
                f"{int((~mask_array).sum())} false rows", raw=True,
            )  # fmt: skip
        if name != "nemo-rl":
            mask_array = None
    opts = WriteOptions(
        start=start,
        mask=mask_array,
        total_tokens=total_tokens if name == "fireworks-r3v1" else None,
        dtype=dtype,
        num_experts=optional_num_experts(num_experts, EncodeError),
    )
    return _WRITERS[name](arr, opts)


def _checked_mask(mask: object, rows: int) -> np.ndarray[Any, Any]:
    array = as_numpy(mask, field="mask")
    if array.dtype.kind != "b" or array.shape != (rows,):
        raise EncodeError.make(
            "mask", f"a bool array of shape ({rows},)", f"{array.dtype} {list(array.shape)}", raw=True
        )
    return np.ascontiguousarray(array)
