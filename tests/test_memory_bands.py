"""Band-by-band work that bounds peak memory gives the same masks as one pass (issue 20).

``nmref.bimask.backward_mask`` copies the permuted weight a band of reduction columns at a
time, and ``nmsim report`` solves transposable masks a band of tile rows at a time; both
rest on independence the specs state (a backward group lies in one column; transposable
tiles are independent). Tiny bands here force many bands on small inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmref
import nmref.bimask as bimask


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**16),
    shape=st.sampled_from([(16, 32), (8, 4, 3, 3), (32, 16), (12, 8), (4, 8, 1, 2)]),
    ties=st.booleans(),
    band=st.integers(1, 40),
    rank=st.sampled_from(["survivors", "masked_magnitude"]),
)
def test_backward_mask_in_bands_equals_one_band(seed, shape, ties, band, rank):
    rng = np.random.default_rng(seed)
    weight = (
        rng.integers(-2, 3, shape).astype(np.float32)
        if ties
        else rng.standard_normal(shape).astype(np.float32)
    )
    forward = nmref.magnitude_mask(weight, 2, 4)
    permutation = rng.permutation(shape[0])
    whole = bimask.backward_mask(weight, forward, permutation, 2, 4, rank=rank)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bimask.masks, "BACKWARD_BAND_ELEMENTS", band)
        banded = bimask.backward_mask(weight, forward, permutation, 2, 4, rank=rank)
    np.testing.assert_array_equal(banded, whole)


def test_forward_mask_is_the_one_dimensional_magnitude_mask() -> None:
    rng = np.random.default_rng(0)
    for dtype in (np.float16, np.float32, np.float64):
        weight = (rng.integers(-2, 3, (8, 4, 3, 3)) * rng.choice([1.0, -0.0], (8, 4, 3, 3))).astype(
            dtype
        )
        for layout in ("channels", "flat"):
            matrix = nmref.to_reduction_matrix(weight, layout)
            expected = nmref.from_reduction_matrix(
                nmref.nm_mask(np.abs(matrix), 2, 4), weight.shape, layout
            )
            got = bimask.forward_mask(weight, 2, 4, layout=layout)
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("band", [1, 4, 64])
def test_report_transposable_masks_in_bands_equal_one_call(band, monkeypatch) -> None:
    from nmsim.report import methods

    rng = np.random.default_rng(band)
    weight = np.abs(rng.integers(-3, 4, (24, 32)).astype(np.float32))
    context = methods.TensorContext(
        name="w",
        weight=weight,
        layout="linear",
        pattern=nmref.parse_pattern("2:4"),
        magnitudes=weight,
        total_magnitude=float(weight.sum()),
        seed=0,
        options={},
        results={},
    )
    for method in ("exact", "greedy"):
        whole = nmref.transposable_mask(weight, 2, 4, method=method)
        monkeypatch.setattr(methods, "TRANSPOSABLE_BAND_ELEMENTS", band)
        np.testing.assert_array_equal(methods._transposable_mask(context, method), whole)
