"""r3wire.synthetic: the generator behind the demo, the benchmarks and many tests, checked like the rest."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from r3wire import R3WireError
from r3wire.synthetic import synthetic_routes


def test_rows_are_distinct_ids_below_num_experts_in_the_dtype_asked() -> None:
    for dtype, num_experts in ((np.uint8, 256), (np.int16, 384), (np.uint16, 512), (np.int32, 128)):
        routes = synthetic_routes(64, layers=3, top_k=8, num_experts=num_experts, seed=1, dtype=dtype)
        assert routes.dtype == np.dtype(dtype)
        assert routes.shape == (64, 3, 8)
        assert int(routes.min()) >= 0
        assert int(routes.max()) < num_experts
        assert (np.sort(routes, axis=-1)[..., 1:] != np.sort(routes, axis=-1)[..., :-1]).all()
    again = synthetic_routes(64, layers=3, top_k=8, num_experts=128, seed=1)
    np.testing.assert_array_equal(again, synthetic_routes(64, layers=3, top_k=8, num_experts=128, seed=1))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        # A dtype too narrow for num_experts wrapped ids silently: rows repeated an expert (review 10a).
        ({"num_experts": 512, "dtype": np.uint8}, "dtype"),
        ({"dtype": None}, "dtype"),  # float64
        ({"dtype": "float32"}, "dtype"),
        ({"dtype": "no such dtype"}, "dtype"),
        ({"rows": 1.5}, "rows"),
        ({"rows": True}, "rows"),
        ({"rows": -1}, "rows"),
        ({"layers": -1}, "layers"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 129}, "top_k"),
        ({"num_experts": 2**31 + 1}, "num_experts"),
        ({"skew": "x"}, "skew"),
        ({"skew": float("inf")}, "skew"),
        ({"reuse": 2**2000}, "reuse"),
        ({"reuse": float("nan")}, "reuse"),
        ({"reuse": 1.5}, "reuse"),
        ({"seed": np.array([[0, 1]])}, "seed"),  # np.random.default_rng(np.matrix(...)) crashes NumPy 2.4
        ({"seed": -1}, "seed"),
        ({"rows": 2**31}, "rows"),
        ({"layers": 2**31}, "rows"),
        ({"layers": 2**24, "top_k": 1, "num_experts": 128}, "layers"),
        ({"reuse": np.timedelta64(1, "s")}, "reuse"),
        ({"dtype": [[[0]]]}, "dtype"),
    ],
)
def test_arguments_out_of_range_are_named(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(R3WireError) as caught:
        synthetic_routes(**{"rows": 3, **kwargs})
    assert caught.value.field == field
    assert isinstance(caught.value, ValueError)  # what the docstring promised before
