"""One conformance suite, parametrised over implementations: nmref readable, nmref fast,
nmsim.torch on CPU, and on CUDA when present. Zero mismatches allowed."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given

import nmref
from nmref.masks import nm_mask_reference
from nmref.testing import (
    check_magnitude_mask,
    check_mask_error_rules,
    check_nm_mask,
)
from nmref.testing.strategies import nm_cases


def _readable_magnitude(weights, n, m, *, layout=None):
    matrix = nmref.to_magnitudes(nmref.to_reduction_matrix(weights, layout))
    return nmref.from_reduction_matrix(nm_mask_reference(matrix, n, m), weights.shape, layout)


def _torch_implementations():
    try:
        import torch
    except ImportError:
        return {}
    import nmsim.torch as nt
    from nmsim.torch.adapters import numpy_adapter

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    found = {}
    for device in devices:
        found[f"torch-{device}"] = (
            lambda dtype, d=device: numpy_adapter(nt.nm_mask, device=d, dtype=dtype),
            lambda dtype, layout, d=device: numpy_adapter(
                nt.magnitude_mask, device=d, dtype=dtype, layout=layout
            ),
        )
    return found


# name -> (nm_mask factory(dtype), magnitude_mask factory(dtype, layout))
IMPLEMENTATIONS = {
    "nmref-readable": (
        lambda dtype: nm_mask_reference,
        lambda dtype, layout: functools.partial(_readable_magnitude, layout=layout),
    ),
    "nmref-fast": (
        lambda dtype: nmref.nm_mask,
        lambda dtype, layout: functools.partial(nmref.magnitude_mask, layout=layout),
    ),
    **_torch_implementations(),
}
DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int64", "uint8"]


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_nm_mask_standard_suite(implementation, dtype):
    make_nm, _ = IMPLEMENTATIONS[implementation]
    check_nm_mask(make_nm(dtype), dtype=dtype, quick=implementation == "nmref-readable")


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("layout", ["linear", "channels", "flat"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "int8"])
def test_magnitude_mask_standard_suite(implementation, layout, dtype):
    _, make_magnitude = IMPLEMENTATIONS[implementation]
    quick = implementation == "nmref-readable"
    check_magnitude_mask(make_magnitude(dtype, layout), layout=layout, dtype=dtype, quick=quick)


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_error_rules(implementation):
    make_nm, make_magnitude = IMPLEMENTATIONS[implementation]
    check_mask_error_rules(make_nm("float32"))
    check_mask_error_rules(make_magnitude("float32", None), function="magnitude_mask")


@pytest.mark.slow
@pytest.mark.parametrize("implementation", sorted(set(IMPLEMENTATIONS) - {"nmref-readable"}))
@given(case=nm_cases(kinds=("tie_heavy", "zeros", "infinities")))
def test_hypothesis_tie_heavy_cases(implementation, case):
    make_nm, make_magnitude = IMPLEMENTATIONS[implementation]
    check_nm_mask(make_nm(case.dtype_name), [case])
    check_magnitude_mask(make_magnitude(case.dtype_name, None), [case])
