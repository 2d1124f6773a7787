"""Tests for nmref.srste (specs/srste.md)."""

from __future__ import annotations

import importlib.resources

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nmref import divergence, srste
from nmref.masks import magnitude_mask

finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)


@st.composite
def gradient_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    grad = draw(hnp.arrays(dtype, shape, elements=finite.map(dtype)))
    weight = draw(hnp.arrays(dtype, shape, elements=finite.map(dtype)))
    mask = draw(hnp.arrays(np.bool_, shape))
    decay = draw(st.sampled_from([0.0, 2e-4, 0.5, 3.0]))
    return grad, weight, mask, decay


@pytest.mark.slow
@given(gradient_cases())
def test_srste_gradient_rule(case):
    grad, weight, mask, decay = case
    result = srste.srste_gradient(grad, weight, mask, decay)
    assert result.dtype == np.result_type(grad, weight)
    # Kept positions: exactly the STE gradient.
    np.testing.assert_array_equal(result[mask], grad[mask])
    # Pruned positions: grad + decay * w, computed in the arrays' dtype.
    dtype = result.dtype.type
    np.testing.assert_array_equal(result[~mask], grad[~mask] + dtype(decay) * weight[~mask])


@pytest.mark.slow
@given(gradient_cases())
def test_decay_zero_is_ste(case):
    grad, weight, mask, _ = case
    np.testing.assert_array_equal(srste.srste_gradient(grad, weight, mask, 0.0), grad)


def test_srste_gradient_accepts_01_masks_and_does_not_mutate():
    grad = np.array([1.0, 1.0, 1.0])
    weight = np.array([2.0, 4.0, -6.0])
    out = srste.srste_gradient(grad, weight, np.array([1, 0, 0]), 0.5)
    np.testing.assert_array_equal(out, [1.0, 3.0, -2.0])
    np.testing.assert_array_equal(grad, [1.0, 1.0, 1.0])


def test_srste_gradient_errors():
    with pytest.raises(ValueError, match="shape"):
        srste.srste_gradient(np.ones(3), np.ones(4), np.ones(4, bool), 0.1)
    with pytest.raises(ValueError, match="mask has shape"):
        srste.srste_gradient(np.ones(3), np.ones(3), np.ones(4, bool), 0.1)
    with pytest.raises(ValueError, match="only 0 and 1"):
        srste.srste_gradient(np.ones(3), np.ones(3), np.array([0, 2, 1]), 0.1)
    with pytest.raises(ValueError, match=r"decay=-0\.1 must be finite and >= 0"):
        srste.srste_gradient(np.ones(3), np.ones(3), np.ones(3, bool), -0.1)
    with pytest.raises(ValueError, match="finite"):
        srste.srste_gradient(np.ones(3), np.ones(3), np.ones(3, bool), float("inf"))
    with pytest.raises(TypeError, match="decay"):
        srste.srste_gradient(np.ones(3), np.ones(3), np.ones(3, bool), "0.1")
    with pytest.raises(TypeError, match="float16/32/64"):
        srste.srste_gradient(np.ones(3, int), np.ones(3), np.ones(3, bool), 0.1)
    with pytest.raises(ValueError, match="NaN"):
        srste.srste_gradient(np.array([1.0, np.nan]), np.ones(2), np.ones(2, bool), 0.1)


# ----------------------------------------------------------------------------
# Optimiser and training step
# ----------------------------------------------------------------------------


def test_sgd_step_by_hand():
    weight = np.array([1.0, -2.0])
    grad = np.array([0.5, 0.5])
    w1, v1 = srste.sgd_step(weight, grad, lr=0.1, momentum=0.9, weight_decay=0.1)
    np.testing.assert_allclose(v1, [0.6, 0.3])  # first step: v = g + wd * w
    np.testing.assert_allclose(w1, [0.94, -2.03])
    w2, v2 = srste.sgd_step(w1, grad, v1, lr=0.1, momentum=0.9, weight_decay=0.1)
    np.testing.assert_allclose(v2, 0.9 * v1 + (grad + 0.1 * w1))
    np.testing.assert_allclose(w2, w1 - 0.1 * v2)
    w_plain, v_plain = srste.sgd_step(weight, grad, lr=0.1)
    assert v_plain is None
    np.testing.assert_array_equal(w_plain, weight - 0.1 * grad)


def test_sgd_step_errors():
    with pytest.raises(ValueError, match="nesterov"):
        srste.sgd_step(np.ones(2), np.ones(2), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="lr=-1"):
        srste.sgd_step(np.ones(2), np.ones(2), lr=-1)
    with pytest.raises(ValueError, match="velocity has shape"):
        srste.sgd_step(np.ones(2), np.ones(2), np.ones(3), lr=0.1, momentum=0.9)


def test_srste_step_with_zero_decay_is_ste():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 8))
    grad = rng.standard_normal((4, 8))
    step = srste.srste_step(weight, lambda sparse: grad, 2, 4, lr=0.1, decay=0.0)
    np.testing.assert_array_equal(step.weight, weight - 0.1 * grad)
    np.testing.assert_array_equal(step.mask, magnitude_mask(weight, 2, 4))


def test_grad_fn_sees_the_sparse_weights():
    weight = np.array([[4.0, -1.0, 3.0, 0.5]])
    seen = []
    srste.srste_step(weight, lambda s: seen.append(s.copy()) or np.zeros_like(s), 2, 4, lr=0.1)
    np.testing.assert_array_equal(seen[0], [[4.0, 0.0, 3.0, 0.0]])


def test_mask_is_recomputed_from_dense_weights_every_step():
    weight = np.array([[4.0, 3.0, 2.0, 1.0]])
    # The loss pushes the pruned entry 3 up by 1.5 per step until it overtakes entry 1.
    push = np.array([[0.0, 0.0, 0.0, -15.0]])
    masks = []
    for _ in range(3):
        step = srste.srste_step(weight, lambda s: push, 2, 4, lr=0.1, decay=0.0)
        np.testing.assert_array_equal(step.mask, magnitude_mask(weight, 2, 4))
        masks.append(step.mask.astype(int).tolist())
        weight = step.weight
    # Weights before each step: [4, 3, 2, 1], [4, 3, 2, 2.5], [4, 3, 2, 4].
    assert masks == [[[1, 1, 0, 0]], [[1, 1, 0, 0]], [[1, 0, 0, 1]]]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_pruned_weights_decay_geometrically_under_zero_loss_gradient(momentum):
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((8, 16))
    lr, decay, steps = 0.1, 0.5, 12
    final, masks = srste.srste_train(
        weight, np.zeros_like, 2, 4, steps, lr=lr, decay=decay, momentum=momentum
    )
    mask = masks[0]
    # The mask never changes: pruned weights only shrink.
    for later in masks[1:]:
        np.testing.assert_array_equal(later, mask)
    np.testing.assert_array_equal(final[mask], weight[mask])
    if momentum == 0.0:
        expected = weight[~mask] * (1 - lr * decay) ** steps
        np.testing.assert_allclose(final[~mask], expected, rtol=1e-12)
    else:
        # Heavy-ball recursion on a linear decay: w_{t+1} = w_t - lr * v_{t+1},
        # v_{t+1} = momentum * v_t + decay * w_t (v_1 = decay * w_0).
        w, v = weight[~mask].copy(), None
        for _ in range(steps):
            g = decay * w
            v = g if v is None else momentum * v + g
            w = w - lr * v
        np.testing.assert_allclose(final[~mask], w, rtol=1e-12)
    assert (np.abs(final[~mask]) < np.abs(weight[~mask])).all()


def test_srste_train_returns_steps_plus_one_masks_and_checks_steps():
    _, masks = srste.srste_train(np.ones((4, 4)), np.zeros_like, 2, 4, 3, lr=0.1)
    assert len(masks) == 4
    with pytest.raises(ValueError, match="steps"):
        srste.srste_train(np.ones((4, 4)), np.zeros_like, 2, 4, -1, lr=0.1)
    with pytest.raises(ValueError, match="grad_fn returned shape"):
        srste.srste_step(np.ones((4, 4)), lambda s: np.zeros(3), 2, 4, lr=0.1)


def test_conv_layout_groups_input_channels():
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((4, 8, 3, 3))
    step = srste.srste_step(weight, np.zeros_like, 2, 4, lr=0.1, layout="channels")
    np.testing.assert_array_equal(step.mask, magnitude_mask(weight, 2, 4, layout="channels"))
    np.testing.assert_array_equal(step.mask.sum(axis=1), np.full((4, 3, 3), 4))


@pytest.mark.parametrize("seed", [0, 1])
def test_srste_lowers_sad_relative_to_ste_on_a_toy_regression(seed):
    """The paper's claim (Zhou et al. 2021, Sec. 4), on a least-squares toy problem."""
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((256, 32))
    target = inputs @ rng.standard_normal((16, 32)).T

    def grad_fn(sparse):
        return (inputs @ sparse.T - target).T @ inputs / len(inputs)

    start = 0.1 * rng.standard_normal((16, 32))
    totals = {}
    for decay in (0.0, 0.2):
        _, masks = srste.srste_train(start, grad_fn, 2, 4, 150, lr=0.05, decay=decay, momentum=0.9)
        totals[decay] = divergence.sparse_architecture_divergence(masks).sum()
    assert totals[0.2] < 0.9 * totals[0.0]


def test_golden_trajectory():
    """Pinned inputs and outputs (scripts/golden/make_srste_golden.py)."""
    data = np.load(
        importlib.resources.files("nmref.testing") / "data" / "golden" / "srste_golden.npz"
    )
    settings = {"lr": 0.1, "decay": 0.05, "momentum": 0.9, "weight_decay": 5e-5}
    for name in ("float32", "float64"):
        target = data[f"{name}/target"]
        final, masks = srste.srste_train(
            data[f"{name}/weight"], lambda sparse, t=target: sparse - t, 2, 4, 3, **settings
        )
        assert final.dtype == np.dtype(name)
        np.testing.assert_array_equal(final, data[f"{name}/final"])
        np.testing.assert_array_equal(np.stack(masks), data[f"{name}/masks"])


# ----------------------------------------------------------------------------
# The layouts reproduce the released code's two conv groupings (tie-free inputs)
# ----------------------------------------------------------------------------


def _keep_largest_rows(groups: np.ndarray, n: int) -> np.ndarray:
    """Drop the m - n smallest |w| of every row (stable, as the code's argsort on CPU)."""
    dropped = np.argsort(np.abs(groups), axis=1, kind="stable")[:, : groups.shape[1] - n]
    mask = np.ones(groups.shape, dtype=bool)
    np.put_along_axis(mask, dropped, False, axis=1)
    return mask


@pytest.mark.parametrize("shape", [(8, 8, 3, 3), (4, 12, 1, 1), (6, 4, 2, 3)])
def test_channels_layout_is_the_codes_sparse_nhwc_grouping(shape):
    rng = np.random.default_rng(3)
    weight = (rng.permutation(int(np.prod(shape))) + 1.0).reshape(shape)
    # Sparse_NHWC: [O, C, kh, kw] -> [O, kh, kw, C], groups of M consecutive entries.
    nhwc = weight.transpose(0, 2, 3, 1)
    mask = _keep_largest_rows(nhwc.reshape(-1, 4), 2).reshape(nhwc.shape).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(magnitude_mask(weight, 2, 4, layout="channels"), mask)


@pytest.mark.parametrize("shape", [(8, 8, 3, 3), (4, 4, 1, 1), (16, 12)])
def test_flat_layout_is_the_codes_original_sparse_grouping(shape):
    rng = np.random.default_rng(4)
    weight = (rng.permutation(int(np.prod(shape))) + 1.0).reshape(shape)
    # Original Sparse: the row-major flattened weight in groups of M.
    mask = _keep_largest_rows(weight.reshape(-1, 4), 2).reshape(shape)
    layout = "linear" if len(shape) == 2 else "flat"
    np.testing.assert_array_equal(magnitude_mask(weight, 2, 4, layout=layout), mask)


def test_srste_step_rejects_straddling_rows_nan_and_non_float_weights():
    """specs/srste.md D2 and section 2: no silent straddle; NaN and integer weights raise."""
    with pytest.raises(ValueError, match="multiple of m=4"):
        srste.srste_step(np.ones((4, 6)), np.zeros_like, 2, 4, lr=0.1)
    with pytest.raises(ValueError, match="multiple of m=4"):
        # The code's flattened Sparse would straddle these 3x3x3 = 27-long rows.
        srste.srste_step(np.ones((4, 3, 3, 3)), np.zeros_like, 2, 4, lr=0.1, layout="flat")
    weight = np.ones((4, 8))
    weight[2, 5] = np.nan
    with pytest.raises(ValueError, match=r"weight contains NaN \(first at index \(2, 5\)\)"):
        srste.srste_step(weight, np.zeros_like, 2, 4, lr=0.1)
    with pytest.raises(TypeError, match="weight must be a float16/32/64"):
        srste.srste_step(np.ones((4, 8), dtype=np.int32), np.zeros_like, 2, 4, lr=0.1)
    with pytest.raises(ValueError, match="grad_wrt_sparse_weight contains NaN"):
        srste.srste_step(np.ones((4, 8)), lambda s: np.full_like(s, np.nan), 2, 4, lr=0.1)
