"""Fuzz, table-driven: more public functions of nmref under the same two-outcome rule.

Each entry builds a call from one drawn array (disguised as in ``test_fuzz_masks``) and
a pattern; the call must return the same answer as on plain C-ordered copies of its
array arguments, or raise ``ValueError``/``TypeError`` naming one of its arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmref
from nmref import bimask
from tests.fuzz.test_fuzz_api import mask_of as _mask_of
from tests.fuzz.test_fuzz_api import plain as _plain
from tests.fuzz.test_fuzz_api import same as _same
from tests.fuzz.test_fuzz_masks import BAD_N, EXAMPLES, HOW, disguise, values

Build = Callable[[object, object, int], tuple[tuple, dict]]


CALLS: dict[str, tuple[Callable, Build]] = {
    "is_nm": (nmref.is_nm, lambda a, n, m: ((_mask_of(a, 2, m), n, m), {})),
    "nm_violations": (nmref.nm_violations, lambda a, n, m: ((_mask_of(a, 2, m), n, m), {})),
    "is_transposable": (nmref.is_transposable, lambda a, n, m: ((a, n, m), {})),
    "transposable_optimum": (nmref.transposable_optimum, lambda a, n, m: ((a, n, m), {})),
    "optimality_gap": (
        nmref.optimality_gap,
        lambda a, n, m: ((a, _mask_of(a, n, m), n, m), {"fill": "at_most"}),
    ),
    "to_magnitudes": (nmref.to_magnitudes, lambda a, n, m: ((a,), {})),
    "to_reduction_matrix": (nmref.to_reduction_matrix, lambda a, n, m: ((a,), {})),
    "mask_flips": (nmref.mask_flips, lambda a, n, m: ((_mask_of(a, 2, m), _mask_of(a, 1, m)), {})),
    "flip_rate": (nmref.flip_rate, lambda a, n, m: ((_mask_of(a, 2, m), _mask_of(a, 1, m)), {})),
    "srste_gradient": (
        nmref.srste_gradient,
        lambda a, n, m: ((a, a, _mask_of(a, 2, m), 2e-4), {}),
    ),
    "forward_mask": (bimask.forward_mask, lambda a, n, m: ((a, n, m), {})),
    "backward_mask": (
        bimask.backward_mask,
        lambda a, n, m: (
            (a, _mask_of(a, n, m), np.arange(np.shape(a)[0]) if np.ndim(a) else [], n, m),
            {},
        ),
    ),
    "transposable_weight_mask": (
        nmref.transposable_weight_mask,
        lambda a, n, m: ((a, n, m), {"method": "greedy"}),
    ),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_more_functions_answer_validly_or_name_the_argument(name: str, data: st.DataObject) -> None:
    function, build = CALLS[name]
    m = data.draw(st.sampled_from([2, 4]), label="m")
    array = data.draw(values(m), label="array")
    how = data.draw(st.sampled_from(HOW), label="how")
    n = data.draw(st.one_of(st.integers(0, m), st.sampled_from(BAD_N)), label="n")
    args, kwargs = build(disguise(array, how), n, m)
    parameters = set(inspect.signature(function).parameters) | {"scores", "weights", "mask"}
    try:
        result = function(*args, **kwargs)
    except (ValueError, TypeError) as error:
        assert any(p in str(error) for p in parameters), f"{name}: {error!r}"
        return
    plain_args = tuple(_plain(a) for a in args)
    _same(result, function(*plain_args, **kwargs))
