"""Realistic synthetic routing for demos, benchmarks and tests: no model, no GPU, deterministic by seed.

Real routing is skewed: each layer has popular experts, and consecutive tokens often reuse the previous token's
experts. Ids within a row are distinct, as a router's top-k always is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["synthetic_routes"]


def synthetic_routes(
    rows: int,
    *,
    layers: int = 48,
    top_k: int = 8,
    num_experts: int = 128,
    reuse: float = 0.3,
    skew: float = 0.5,
    seed: int = 0,
    dtype: Any = np.int32,
) -> np.ndarray[Any, Any]:
    """Generate ``[rows, layers, top_k]`` routed-expert ids with per-layer popularity and token-to-token reuse.

    Args:
        rows: token positions.
        layers: MoE layers.
        top_k: experts per token and layer; at most ``num_experts``.
        num_experts: experts per layer.
        reuse: probability that a (token, layer) repeats the previous token's experts.
        skew: concentration of per-layer popularity (0 = uniform; larger = more skewed).
        seed: the random seed; equal arguments give equal arrays.
        dtype: the integer dtype returned (engines hand out int32, uint8 or uint16).

    Raises:
        ValueError: ``top_k`` exceeds ``num_experts`` or a size is negative.
    """
    if not 1 <= top_k <= num_experts or rows < 0 or layers < 0:
        raise ValueError(
            f"need rows, layers >= 0 and 1 <= top_k <= num_experts, got {rows}, {layers}, {top_k}, {num_experts}"
        )
    rng = np.random.default_rng(seed)
    popularity = (skew * rng.standard_normal((layers, num_experts))).astype(np.float32)
    out = np.empty((rows, layers, top_k), dtype=dtype)
    chunk = max(1, (1 << 22) // max(1, layers * num_experts))  # bound the Gumbel scratch to ~16 MB
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        # Gumbel-top-k: the k largest of logits + Gumbel noise are a sample without replacement.
        noise = rng.gumbel(size=(stop - start, layers, num_experts)).astype(np.float32)
        noise += popularity
        top = np.argpartition(noise, num_experts - top_k, axis=-1)[..., num_experts - top_k :]
        out[start:stop] = top
    if rows > 1 and reuse > 0:
        repeat = rng.random((rows, layers)) < reuse
        repeat[0] = False
        # A repeated (row, layer) copies the nearest earlier row that was freshly drawn, as a chain of repeats does.
        source = np.where(repeat, 0, np.arange(rows)[:, None])
        np.maximum.accumulate(source, axis=0, out=source)
        out = out[source, np.arange(layers)[None, :]]
    return out
