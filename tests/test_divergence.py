"""Tests for nmref.divergence (specs/srste.md, section SAD)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nmref import divergence
from nmref.masks import magnitude_mask


@st.composite
def mask_triples(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6, min_side=0))
    return tuple(draw(hnp.arrays(np.bool_, shape)) for _ in range(3))


@pytest.mark.slow
@given(mask_triples())
def test_flips_is_a_metric(masks):
    a, b, c = masks
    assert divergence.mask_flips(a, a) == 0
    assert divergence.mask_flips(a, b) == divergence.mask_flips(b, a)
    assert divergence.mask_flips(a, c) <= divergence.mask_flips(a, b) + divergence.mask_flips(b, c)
    # Independent definition: count positions one at a time.
    assert divergence.mask_flips(a, b) == sum(
        int(x != y) for x, y in zip(a.ravel(), b.ravel(), strict=True)
    )
    rate = divergence.flip_rate(a, b)
    assert 0.0 <= rate <= 1.0
    assert rate == (divergence.mask_flips(a, b) / a.size if a.size else 0.0)
    kept_to_pruned, pruned_to_kept = divergence.mask_transitions(a, b)
    assert kept_to_pruned + pruned_to_kept == divergence.mask_flips(a, b)


@given(st.integers(0, 2**32 - 1), st.sampled_from([(1, 4), (2, 4), (4, 8)]))
def test_nm_masks_flip_in_pairs(seed, pattern):
    n, m = pattern
    rng = np.random.default_rng(seed)
    a = magnitude_mask(rng.standard_normal((4, 16)), n, m)
    b = magnitude_mask(rng.standard_normal((4, 16)), n, m)
    kept_to_pruned, pruned_to_kept = divergence.mask_transitions(a, b)
    assert kept_to_pruned == pruned_to_kept
    assert divergence.mask_flips(a, b) % 2 == 0


def test_sad_sequences_by_hand():
    masks = [[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    np.testing.assert_array_equal(divergence.sparse_architecture_divergence(masks), [2, 2, 0])
    np.testing.assert_array_equal(
        divergence.sparse_architecture_divergence(masks, reference="first"), [2, 4, 4]
    )
    np.testing.assert_array_equal(
        divergence.sparse_architecture_divergence(masks, normalize=True), [0.5, 0.5, 0.0]
    )
    assert divergence.sparse_architecture_divergence(masks[:1]).shape == (0,)


@pytest.mark.slow
@given(st.lists(hnp.arrays(np.bool_, (3, 4)), min_size=1, max_size=6))
def test_sad_bounds(masks):
    step = divergence.sparse_architecture_divergence(masks)
    drift = divergence.sparse_architecture_divergence(masks, reference="first")
    # The drift from the start never exceeds the path length (triangle inequality).
    assert (drift <= np.cumsum(step)).all()
    assert step.dtype == np.int64


def test_errors():
    with pytest.raises(ValueError, match="same shape"):
        divergence.mask_flips([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="only 0 and 1"):
        divergence.mask_flips([1, 2], [1, 0])
    with pytest.raises(TypeError, match="bool or numeric"):
        divergence.mask_flips(np.array(["a"]), np.array(["b"]))
    with pytest.raises(ValueError, match="at least one mask"):
        divergence.sparse_architecture_divergence([])
    with pytest.raises(ValueError, match=r"masks\[1\] has shape"):
        divergence.sparse_architecture_divergence([[1, 0], [1, 0, 1]])
    with pytest.raises(ValueError, match="reference"):
        divergence.sparse_architecture_divergence([[1, 0]], reference="last")
