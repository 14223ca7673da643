"""What ``r3wire inspect`` and ``r3wire convert`` do: load a payload from a file, summarise routes, plot load.

Kept apart from the argument parser so the summary is a plain function tests can call.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import orjson

from r3wire.errors import DecodeError
from r3wire.formats._common import MISSING_ROUTE, ReadResult
from r3wire.formats._fireworks import ZSTD_MAGIC
from r3wire.formats._npy import NPY_MAGIC

__all__ = ["LayerLoad", "Summary", "load_payload", "plot_load", "summarize"]

# bincount over layers x experts is one pass; beyond this many ids per layer, fall back to np.unique per layer.
_MAX_BINS: Final = 1 << 16
_TOP: Final = 3


def load_payload(raw: bytes) -> object:
    """Turn a file's bytes into what :func:`r3wire.formats.read` takes.

    Raw ``.npy`` and zstd bytes stay bytes; JSON object text stays text (the readers parse it); a JSON string
    literal is unquoted; anything else is text with surrounding whitespace (a trailing newline) removed.

    Raises:
        DecodeError: the text is not UTF-8, or a JSON string literal is malformed.
    """
    if raw.startswith((NPY_MAGIC, ZSTD_MAGIC)):
        return raw
    text = raw.strip()
    if text.startswith(b"{"):
        return text
    if text.startswith(b'"'):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DecodeError.make(None, "a JSON string", f"invalid JSON: {exc}", raw=True) from exc
        if not isinstance(value, str):
            raise DecodeError.make(None, "a JSON string", type(value).__name__, raw=True)
        return value
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError.make(None, "text (UTF-8)", str(exc), raw=True) from exc


@dataclass(frozen=True, slots=True)
class LayerLoad:
    """How one layer's routing was spread over experts."""

    layer: int
    distinct: int
    top: tuple[tuple[int, float], ...]  # (expert id, share of the layer's assignments), most used first


@dataclass(frozen=True, slots=True)
class Summary:
    """What ``inspect`` reports about a payload."""

    format: str
    shape: tuple[int, ...]
    dtype: str
    start: int | None
    total_tokens: int | None
    replayed_rows: int
    missing_routes: int
    min: int | None
    max: int | None
    payload_bytes: int
    array_bytes: int
    layers: tuple[LayerLoad, ...]
    counts: np.ndarray[Any, Any] | None  # layers x experts assignment counts, for plotting; None if too wide
    path: str | None = None
    num_experts: int | None = None
    bits: int | None = None
    tokens: int | None = None
    logprobs: int | None = None
    logprobs_clamped: int = 0

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object: one line, stable keys (``path``, ``tokens`` and ``logprobs`` for responses)."""
        out: dict[str, Any] = {} if self.path is None else {"path": self.path}
        return out | {
            "format": self.format,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "start": self.start,
            "total_tokens": self.total_tokens,
            "replayed_rows": self.replayed_rows,
            "missing_routes": self.missing_routes,
            "min": self.min,
            "max": self.max,
            "num_experts": self.num_experts,
            "bits": self.bits,
            **(
                {}
                if self.path is None
                else {"tokens": self.tokens, "logprobs": self.logprobs, "logprobs_clamped": self.logprobs_clamped}
            ),
            "payload_bytes": self.payload_bytes,
            "array_bytes": self.array_bytes,
            "layers": [
                {"layer": load.layer, "distinct": load.distinct, "top": [[i, round(s, 6)] for i, s in load.top]}
                for load in self.layers
            ],
        }

    def to_text(self) -> str:
        """The human-readable report."""
        rows = self.shape[0]
        lines = [] if self.path is None else [f"routes at     {self.path}"]
        lines += [
            f"format        {self.format}",
            f"shape         {list(self.shape)}  (rows, layers, top_k)",
            f"dtype         {self.dtype}",
            f"start         {self.start}",
        ]
        if self.num_experts is not None:
            lines.append(f"num_experts   {self.num_experts}")
        if self.bits is not None:
            lines.append(f"bits          {self.bits} (bit-packed on the wire)")
        if self.total_tokens is not None:
            lines.append(f"total tokens  {self.total_tokens}")
        if self.tokens is not None:
            lines.append(f"token ids     {self.tokens}")
        if self.logprobs is not None:
            lines.append(f"logprobs      {self.logprobs} ({self.logprobs_clamped} clamped: missing or non-finite)")
        if self.replayed_rows != rows:
            lines.append(f"replayed rows {self.replayed_rows} of {rows}")
        if self.missing_routes:
            lines.append(f"missing       {self.missing_routes} (row, layer) routes hold -1 (no routed expert)")
        ids = "none" if self.min is None else f"{self.min}..{self.max}"
        lines += [
            f"expert ids    {ids}",
            f"bytes         {self.payload_bytes} payload, {self.array_bytes} as an array",
            "expert load per layer (distinct experts used; most used experts and their share):",
        ]
        for load in self.layers:
            top = ", ".join(f"{i} {s:.1%}" for i, s in load.top) or "none (no row routed)"
            lines.append(f"  layer {load.layer:>3}: {load.distinct:>5} experts; top {top}")
        return "\n".join(lines)


def summarize(result: ReadResult, payload_bytes: int) -> Summary:
    """Summarise a read: shape, dtype, id range, and per-layer expert load over the replayed, present routes."""
    routes = result.routes
    rows, layers, top_k = (int(n) for n in routes.shape)
    replayed = routes if result.mask is None else routes[result.mask]
    # Explicit sizes: reshape(-1) cannot infer a zero-length axis (a 0-layer or 0-top_k payload).
    per_layer = (
        np.ascontiguousarray(replayed.transpose(1, 0, 2))
        .reshape(layers, int(replayed.shape[0]) * top_k)
        .astype(np.int64)
    )
    present = per_layer != MISSING_ROUTE if routes.dtype.kind == "i" else np.ones(per_layer.shape, dtype=bool)
    # (row, layer) pairs with a -1 in any slot: whole rows for NeMo-RL, single slots count once for SGLang.
    missing = int((~present).reshape(layers, -1, top_k).any(axis=2).sum()) if per_layer.size else 0
    ids = per_layer[present]
    low = int(ids.min()) if ids.size else None
    high = int(ids.max()) if ids.size else None
    counts: np.ndarray[Any, Any] | None = None
    loads: list[LayerLoad] = []
    if high is not None and high < _MAX_BINS:
        bins = high + 1
        offsets = per_layer + np.arange(layers, dtype=np.int64)[:, None] * bins
        counts = np.bincount(offsets[present], minlength=layers * bins).reshape(layers, bins)
        loads.extend(
            _layer_load(layer, np.nonzero(counts[layer])[0], counts[layer][counts[layer] > 0])
            for layer in range(layers)
        )
    else:
        for layer in range(layers):
            values, value_counts = np.unique(per_layer[layer][present[layer]], return_counts=True)
            loads.append(_layer_load(layer, values, value_counts))
    return Summary(
        format=result.format,
        shape=(rows, layers, top_k),
        dtype=str(routes.dtype),
        start=result.start,
        total_tokens=result.total_tokens,
        replayed_rows=int(replayed.shape[0]),
        missing_routes=missing,
        min=low,
        max=high,
        payload_bytes=payload_bytes,
        array_bytes=int(routes.nbytes),
        layers=tuple(loads),
        counts=counts,
        path=result.path,
        num_experts=result.num_experts,
        bits=result.bits,
        tokens=None if result.token_ids is None else int(result.token_ids.size),
        logprobs=None if result.logprobs is None else int(result.logprobs.size),
        logprobs_clamped=result.num_clamped,
    )


def _layer_load(layer: int, experts: np.ndarray[Any, Any], counts: np.ndarray[Any, Any]) -> LayerLoad:
    total = int(counts.sum())
    order = np.argsort(-counts, kind="stable")[:_TOP]
    top = tuple((int(experts[i]), int(counts[i]) / total) for i in order) if total else ()
    return LayerLoad(layer=layer, distinct=int(experts.size), top=top)


def plot_load(summary: Summary, path: str) -> None:
    """Draw the layers x experts load heatmap to ``path`` (PNG) with matplotlib.

    Raises:
        ImportError: matplotlib (the ``plot`` extra) is not installed.
        DecodeError: there is nothing to plot (no ids, or ids too large for a dense heatmap).
    """
    if summary.counts is None or summary.counts.size == 0:
        raise DecodeError.make("routes", f"ids in 0..{_MAX_BINS - 1} to plot", "no plottable ids", raw=True)
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError as exc:
        raise ImportError("--plot needs matplotlib: pip install 'r3wire[plot]'") from exc
    matplotlib.use("Agg")  # files only; never open a window or need a display
    pyplot = importlib.import_module("matplotlib.pyplot")
    counts = summary.counts
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    layers, experts = share.shape
    figure, axes = pyplot.subplots(figsize=(min(4 + experts / 16, 24), min(2 + layers / 6, 16)))
    image = axes.imshow(share, aspect="auto", interpolation="nearest", cmap="viridis")
    axes.set_xlabel("expert")
    axes.set_ylabel("layer")
    axes.set_title(f"expert load ({summary.format}, {summary.shape[0]} rows, top_k {summary.shape[2]})")
    figure.colorbar(image, ax=axes, label="share of the layer's assignments")
    figure.savefig(path, dpi=100, bbox_inches="tight")
    pyplot.close(figure)
