"""One conformance suite for transposable masks, parametrised over every implementation:
nmref readable, the nmref kernel (serial and parallel), brute force, the NumPy path that
small calls take, and nmsim.torch on CPU (and CUDA when present). Zero mismatches allowed.

``check_transposable_mask`` compares each output with the nmref kernel of the method it is
told (bit for bit, and by objective): brute force is checked as ``"exact"``, since both must
return the canonical optimum (spec T3), so the enumeration and the flow solver meet here.
"""

from __future__ import annotations

import functools

import pytest

import nmref
from nmref.testing import check_transposable_mask, transposable_cases
from nmref.transposable._small import kernels_only

DTYPES = ["float16", "bfloat16", "float32", "int8"]
GREEDY = ["greedy", "greedy-prune"]
# Brute force enumerates every pattern of a tile: nmref allows m <= 6, nmsim.torch m <= 5.
BRUTE_MAX_M = 5


def _kernel(scores, n, m, *, method, parallel=False):
    with kernels_only():  # small calls would otherwise take the NumPy path
        return nmref.transposable_mask(scores, n, m, method=method, parallel=parallel)


def _small_calls(scores, n, m, *, method):
    # The public call as users make it: small m <= 4 calls run the vectorised NumPy path.
    return nmref.transposable_mask(scores, n, m, method=method)


def _readable(scores, n, m, *, method):
    return nmref.transposable_mask_reference(scores, n, m, method=method)


def _torch_implementations():
    try:
        import torch
    except ImportError:
        return {}
    from nmsim.torch import transposable

    def on(device, method, dtype):
        def impl(scores, n, m):
            tensor = torch.from_numpy(scores).to(device)
            if dtype == "bfloat16":  # the kit stores bfloat16 cases as their float32 upcast
                tensor = tensor.to(torch.bfloat16)
            return transposable.transposable_mask(tensor, n, m, method=method).cpu().numpy()

        return impl

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    found = {}
    for device in devices:
        for method in ("exact", *GREEDY):
            found[f"torch-{device}[{method}]"] = (method, functools.partial(on, device, method))
        found[f"torch-{device}[brute]"] = ("brute", functools.partial(on, device, "brute"))
    return found


# name -> (method, factory(dtype) -> impl(scores, n, m)); "brute" rows run on m <= 5 only.
IMPLEMENTATIONS = {
    **{
        f"nmref-readable[{method}]": (
            method,
            lambda dtype, k=method: functools.partial(_readable, method=k),
        )
        for method in ("exact", "brute", *GREEDY)
    },
    **{
        f"nmref-kernel[{method}]": (
            method,
            lambda dtype, k=method: functools.partial(_kernel, method=k),
        )
        for method in ("exact", *GREEDY)
    },
    "nmref-kernel-parallel[exact]": (
        "exact",
        lambda dtype: functools.partial(_kernel, method="exact", parallel=True),
    ),
    "nmref-kernel[brute]": ("brute", lambda dtype: functools.partial(_kernel, method="brute")),
    **{
        f"nmref-numpy-small[{method}]": (
            method,
            lambda dtype, k=method: functools.partial(_small_calls, method=k),
        )
        for method in ("exact", "brute", *GREEDY)
    },
    **_torch_implementations(),
}


def _lane(name: str):
    # The torch flow solver and brute force run tile by tile in Python: seconds per dtype.
    slow = name.startswith("torch-") and name.endswith(("[exact]", "[brute]"))
    return pytest.param(name, marks=pytest.mark.slow) if slow else name


@pytest.mark.parametrize("implementation", [_lane(name) for name in sorted(IMPLEMENTATIONS)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_transposable_standard_suite(implementation, dtype):
    method, make = IMPLEMENTATIONS[implementation]
    quick = implementation.startswith("nmref-readable")
    cases = None
    if method == "brute":
        cases = [case for case in transposable_cases(dtype, quick=quick) if case.m <= BRUTE_MAX_M]
        method = "exact"  # brute force must find the same canonical optimum as the flow solver
    report = check_transposable_mask(
        make(dtype), method=method, dtype=dtype, quick=quick, cases=cases
    )
    assert report.cases >= 20 and report.mismatches == 0
