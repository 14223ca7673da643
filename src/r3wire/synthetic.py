"""Realistic synthetic routing for demos, benchmarks and tests: no model, no GPU, deterministic by seed.

Real routing is skewed: each layer has popular experts, and consecutive tokens often reuse the previous token's
experts. Ids within a row are distinct, as a router's top-k always is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from r3wire._validate import DEFAULT_MAX_ELEMENTS, MAX_DIM, check_int
from r3wire.errors import R3WireError
from r3wire.schema import MAX_NUM_EXPERTS

__all__ = ["synthetic_routes"]


def _number(value: object, field: str, expected: str, within: Callable[[float], bool]) -> float:
    """``value`` as a float: a real number (not a bool) for which ``within`` holds."""
    # np.timedelta64 is an np.integer, but a duration with a unit.
    if isinstance(value, (bool, np.timedelta64)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise R3WireError.make(field, expected, value)
    try:
        number = float(value)
    except OverflowError:  # an int beyond a double is no probability or skew either
        raise R3WireError.make(field, expected, value) from None
    if math.isnan(number) or not within(number):
        raise R3WireError.make(field, expected, value)
    return number


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
        R3WireError: (a ``ValueError``) an argument out of its range, named: sizes are integers (``rows``,
            ``layers`` >= 0; ``1 <= top_k <= num_experts <= 2**31``), ``reuse`` a number in ``0 .. 1``, ``skew``
            a finite number >= 0, ``seed`` an integer >= 0, ``dtype`` an integer dtype holding ``num_experts - 1``
            (a narrower one would wrap ids and repeat experts within a row); at most 2**30 ids in all (and
            ``layers x num_experts``).
    """
    rows = check_int(rows, "rows", minimum=0, maximum=MAX_DIM, error=R3WireError)
    layers = check_int(layers, "layers", minimum=0, maximum=MAX_DIM, error=R3WireError)
    num_experts = check_int(num_experts, "num_experts", minimum=1, maximum=MAX_NUM_EXPERTS, error=R3WireError)
    top_k = check_int(top_k, "top_k", minimum=1, maximum=num_experts, error=R3WireError)
    seed = check_int(seed, "seed", minimum=0, maximum=MAX_DIM, error=R3WireError)
    reuse = _number(reuse, "reuse", "a probability in 0 .. 1", lambda x: 0 <= x <= 1)
    skew = _number(skew, "skew", "a finite number >= 0", lambda x: 0 <= x < math.inf)
    for field, count in (("rows", rows * layers * top_k), ("layers", layers * num_experts)):
        if count > DEFAULT_MAX_ELEMENTS:  # what a decoder takes by default; a demo needs far less
            raise R3WireError.make(
                field, f"sizes of at most {DEFAULT_MAX_ELEMENTS} ids (rows x layers x top_k)", count, raw=True
            )
    if not isinstance(dtype, (str, np.dtype, type)):  # np.dtype() of a nested list may recurse without end
        raise R3WireError.make("dtype", "an integer dtype", dtype)
    try:
        wanted = np.dtype(dtype)
    except (TypeError, ValueError):
        raise R3WireError.make("dtype", "an integer dtype", dtype) from None
    if wanted.kind not in "iu" or int(np.iinfo(wanted).max) < num_experts - 1:
        raise R3WireError.make("dtype", f"an integer dtype holding ids up to {num_experts - 1}", str(wanted))
    rng = np.random.default_rng(seed)
    popularity = (skew * rng.standard_normal((layers, num_experts))).astype(np.float32)
    out = np.empty((rows, layers, top_k), dtype=wanted)
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
