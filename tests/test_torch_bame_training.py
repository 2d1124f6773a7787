"""``method="bame"`` training layer: per-GEMM contract and training step vs nmref (specs/bame.md §3.6, §4)."""

from __future__ import annotations

import numpy as np
import pytest

from nmref import bame as ref
from nmref.bame import training as ref_training

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import nmsim.torch as nt  # noqa: E402
from nmsim.torch.functions import gathered_weight_gradient  # noqa: E402
from nmsim.torch.layers import SparseLinear  # noqa: E402
from nmsim.torch.model import sparsify  # noqa: E402


def _config(**changes):
    base = ref.BameConfig(
        2,
        4,
        t_i=1,
        t_f=9,
        update_interval=2,
        adapt_fraction=1.0,
        fraction_schedule="constant",
        freeze_threshold=0.5,
    )
    return base.replace(**changes)


def _layer(weight, config, bias=None):
    out_features, in_features = weight.shape
    layer = SparseLinear(
        in_features,
        out_features,
        bias=bias is not None,
        pattern=(config.n, config.m),
        method="bame",
        bame_config=config,
        dtype=torch.float64,
    )
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(weight))
        layer.bame_mask.copy_(nt.magnitude_mask(layer.weight, config.n, config.m))
        if bias is not None:
            layer.bias.copy_(torch.from_numpy(bias))
    layer.bame_state = ref.BameState.initial(layer.bame_mask.numpy(), config.m)
    return layer


def _reference_layer(weight, mask, config, bias):
    return ref_training.SparseLinear(
        weight=weight.copy(),
        bias=bias.copy(),
        mask=mask.copy(),
        velocity=np.zeros_like(weight),
        bias_velocity=np.zeros_like(bias),
        state=ref.BameState.initial(mask, config.m),
    )


@pytest.mark.parametrize("swap_rule", ["single_swap", "reselect"])
@pytest.mark.parametrize(
    ("oscillation", "step_order", "regrow_init", "threshold", "mode"),
    [
        ("revert_rate", "evolve_first", "zero", 0.5, "gathered"),
        ("change_rate", "step_first", "stale", 0.2, "masked_dense"),
    ],
)
def test_linear_step_by_step_equals_the_reference_bit_for_bit(
    swap_rule, oscillation, step_order, regrow_init, threshold, mode
):
    # Small integers and dyadic rates: every product and sum is exact in float64, so the
    # torch layer and nmref must agree to the bit over the whole trajectory (masks,
    # weights, momenta, counters), whatever the summation order.
    rng = np.random.default_rng(3)
    config = _config(
        swap_rule=swap_rule,
        oscillation=oscillation,
        step_order=step_order,
        regrow_init=regrow_init,
        freeze_threshold=threshold,
    )
    weight = rng.integers(-4, 5, size=(8, 16)).astype(np.float64)
    bias = rng.integers(-2, 3, size=8).astype(np.float64)
    layer = _layer(weight, config, bias)
    layer.bame_weight_gradient = mode
    reference = _reference_layer(weight, layer.bame_mask.numpy(), config, bias)
    optimizer = ref_training.SGD(learning_rate=0.5, momentum=0.5, weight_decay=0.25)
    evolutions = frozen = 0
    for step in range(10):
        x = rng.integers(-3, 4, size=(5, 16)).astype(np.float64)
        dy = rng.integers(-3, 4, size=(5, 8)).astype(np.float64)
        # torch: forward, backward with the given output gradient, evolve, SGD on kept.
        xt = torch.from_numpy(x).requires_grad_(True)
        layer.zero_grad()
        y = layer(xt)
        y.backward(torch.from_numpy(dy))
        # reference GEMMs of spec §4 with this step's positions.
        updating = ref.is_update_step(step, config)
        positions = (
            ref.gradient_positions(
                reference.mask, ref.candidate_blocks(reference.state, config), config.m
            )
            if updating
            else reference.mask
        )
        np.testing.assert_array_equal(layer.bame_gradient_positions().numpy(), positions)
        np.testing.assert_array_equal(
            y.detach().numpy(), x @ reference.effective_weight.T + reference.bias
        )
        np.testing.assert_array_equal(xt.grad.numpy(), dy @ reference.effective_weight)
        grad = ref_training.sparse_weight_gradient(x, dy, positions)
        np.testing.assert_array_equal(layer.weight.grad.numpy(), np.nan_to_num(grad, nan=0.0))
        np.testing.assert_array_equal(layer.bias.grad.numpy(), dy.sum(0))
        evolution = layer.bame_optimizer_step(
            optimizer.learning_rate, optimizer.momentum, optimizer.weight_decay
        )
        assert (evolution is not None) == updating
        if updating and config.step_order == "evolve_first":
            ref_training._evolve_layer(reference, grad, step, config, optimizer)
        ref_training._sgd_on_kept(reference, grad, dy.sum(0), optimizer)
        if updating and config.step_order == "step_first":
            ref_training._evolve_layer(reference, grad, step, config, optimizer)
        if updating:
            evolutions += int(evolution.selected.sum())
            frozen += int((~evolution.candidates).sum())
        np.testing.assert_array_equal(layer.bame_mask.numpy(), reference.mask)
        np.testing.assert_array_equal(layer.weight.detach().numpy(), reference.weight)
        np.testing.assert_array_equal(layer.bame_velocity.numpy(), reference.velocity)
        np.testing.assert_array_equal(layer.bias.detach().numpy(), reference.bias)
        for name in ("changes", "reverts", "previous_mask"):
            np.testing.assert_array_equal(
                getattr(layer.bame_state, name), getattr(reference.state, name)
            )
        assert layer.bame_step == step + 1
    assert evolutions > 0  # the trajectory really evolved the mask
    if threshold < 0.5:
        assert frozen > 0  # and froze blocks: their pruned entries were not computed


@pytest.mark.parametrize("step_order", ["evolve_first", "step_first"])
def test_mlp_training_matches_bame_train_step(step_order):
    # Full spec §4 step (cross-entropy, two layers) against nmref.bame.training: masks and
    # counters exactly equal; weights to float64 rounding (the BLAS summation orders of
    # numpy and torch differ, so bit equality is not promised on non-integer data).
    rng = np.random.default_rng(0)
    config = ref.BameConfig(2, 4, t_i=0, t_f=12, update_interval=3, step_order=step_order)
    optimizer = ref_training.SGD(learning_rate=0.1, momentum=0.9, weight_decay=5e-4)
    reference = ref_training.init_sparse_mlp([16, 12, 8], config, rng)
    layers = [_layer(layer.weight, config, layer.bias) for layer in reference]
    for layer, ref_layer in zip(layers, reference, strict=True):
        np.testing.assert_array_equal(layer.bame_mask.numpy(), ref_layer.mask)
    x_all = rng.normal(size=(96, 16))
    labels_all = rng.integers(0, 8, size=96)
    changed = 0
    for step in range(16):
        x, labels = x_all[6 * step : 6 * step + 6], labels_all[6 * step : 6 * step + 6]
        ref_training.bame_train_step(reference, x, labels, step, config, optimizer)
        for layer in layers:
            layer.zero_grad()
        logits = layers[1](torch.relu(layers[0](torch.from_numpy(x))))
        _, grad_logits = ref_training.cross_entropy(logits.detach().numpy(), labels)
        logits.backward(torch.from_numpy(grad_logits))
        for layer in layers:
            before = layer.bame_mask.clone()
            layer.bame_optimizer_step(
                optimizer.learning_rate, optimizer.momentum, optimizer.weight_decay
            )
            changed += int((before != layer.bame_mask).sum())
        for layer, ref_layer in zip(layers, reference, strict=True):
            np.testing.assert_array_equal(layer.bame_mask.numpy(), ref_layer.mask)
            np.testing.assert_array_equal(layer.bame_state.changes, ref_layer.state.changes)
            np.testing.assert_allclose(
                layer.weight.detach().numpy(), ref_layer.weight, rtol=1e-12, atol=1e-14
            )
    assert changed > 0


def test_gradient_entries_outside_the_positions_are_never_computed():
    # Not computed means 0, whatever the data: a dense dW would be non-zero there.
    x = torch.ones(3, 8, dtype=torch.float64)
    dy = torch.ones(3, 2, dtype=torch.float64)
    positions = torch.zeros(2, 8, dtype=torch.bool)
    positions[0, :4] = True
    positions[1, 5] = True
    grad = gathered_weight_gradient(x, dy, positions)
    assert grad[positions].tolist() == [3.0] * 5
    assert not bool(grad[~positions].any())


def test_gradcheck_float64():
    torch.manual_seed(0)
    config = _config()
    layer = _layer(np.random.default_rng(1).normal(size=(4, 8)), config, np.zeros(4))
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    bias = layer.bias.detach().clone().requires_grad_(True)
    mask, positions = layer.bame_mask, layer.bame_gradient_positions()
    weight = layer.weight.detach()
    # Y is linear in X and b: gradcheck the data and bias gradients.
    assert torch.autograd.gradcheck(
        lambda x_, b_: nt.BameLinearFunction.apply(x_, weight, b_, mask, positions), (x, bias)
    )
    # Outside update steps positions == mask, and dW is the true derivative of
    # X (K ⊙ W)^T (0 at pruned entries): gradcheck the weight too.
    assert layer.bame_step == 0 and bool((positions == mask).all())
    w = weight.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda w_: nt.BameLinearFunction.apply(x.detach(), w_, None, mask, positions), (w,)
    )


def test_sparsify_with_bame_and_errors():
    model = nn.Sequential(
        nn.Linear(8, 4),
        nn.ReLU(),
        nn.Conv2d(4, 4, 1, groups=2),
        nn.Conv2d(4, 4, 1),
        nn.Linear(8, 3),
    )
    config = ref.BameConfig(2, 4)
    result = sparsify(model, "bame", "2:4", bame_config=config)
    assert result.replaced == ("0", "3", "4")
    assert result.skipped[0][0] == "2" and "groups=1" in result.skipped[0][1]
    assert model[0].bame_config is config and model[3].method == "bame"
    with pytest.raises(ValueError, match="groups=1"):
        nt.SparseConv2d(8, 8, 1, groups=2, method="bame")
    with pytest.raises(ValueError, match="must equal pattern"):
        SparseLinear(8, 4, pattern="1:4", method="bame", bame_config=config)
    with pytest.raises(ValueError, match="only used by method='bame'"):
        SparseLinear(8, 4, method="srste", bame_config=config)
    layer = SparseLinear(8, 4, method="bame", bame_config=config)
    layer(torch.ones(2, 8)).sum().backward()
    with pytest.raises(ValueError, match="momentum"):
        layer.bame_optimizer_step(0.1, momentum=1.5)
    with pytest.raises(ValueError, match="learning_rate"):
        layer.bame_sgd_step(-0.1)
    assert layer.bame_step == 0
    layer.bame_weight_gradient = "dense"
    with pytest.raises(ValueError, match="bame_weight_gradient='dense' must be one of"):
        layer(torch.ones(2, 8))
    with pytest.raises(ValueError, match="run backward first"):
        SparseLinear(8, 4, method="bame", bame_config=config.replace(t_i=0)).bame_update(0.1)


def _train(layer, rng, steps):
    for _ in range(steps):
        x = torch.from_numpy(rng.integers(-3, 4, size=(5, 16)).astype(np.float64))
        layer.zero_grad()
        layer(x).square().sum().backward()
        layer.bame_optimizer_step(0.125, 0.5, 0.25)


def test_state_dict_checkpoints_the_evolution_state(tmp_path):
    # Counters, step, mask and momentum round-trip through torch.save / weights_only load,
    # and a resumed layer continues bit for bit like the uninterrupted one.
    config = _config()
    weight = np.random.default_rng(5).integers(-4, 5, size=(8, 16)).astype(np.float64)
    layer = _layer(weight, config, np.zeros(8))
    _train(layer, np.random.default_rng(6), 4)
    assert layer.bame_state.num_updates > 0
    torch.save(layer.state_dict(), tmp_path / "bame.pt")
    resumed = _layer(np.zeros((8, 16)), config, np.zeros(8))
    resumed.load_state_dict(torch.load(tmp_path / "bame.pt", weights_only=True))
    assert resumed.bame_step == layer.bame_step == 4
    for name in ("changes", "reverts", "change_ema", "frozen", "previous_mask"):
        np.testing.assert_array_equal(
            getattr(resumed.bame_state, name), getattr(layer.bame_state, name)
        )
    for model in (layer, resumed):
        _train(model, np.random.default_rng(7), 5)
    assert torch.equal(resumed.weight, layer.weight)
    assert torch.equal(resumed.bame_mask, layer.bame_mask)
    np.testing.assert_array_equal(resumed.bame_state.changes, layer.bame_state.changes)
    # A dense Linear checkpoint lacks the evolution state: strict loading names it.
    with pytest.raises(RuntimeError, match="bame_step"):
        resumed.load_state_dict(nn.Linear(16, 8, dtype=torch.float64).state_dict())


def test_float32_layer_keeps_exact_nm_masks_and_frozen_pruned_weights():
    torch.manual_seed(0)
    config = ref.BameConfig(1, 4, t_i=0, t_f=6, update_interval=1, adapt_fraction=0.5)
    layer = SparseLinear(16, 8, pattern="1:4", method="bame", bame_config=config)
    assert layer.weight.dtype == torch.float32
    changed = 0
    for _ in range(8):
        before, weight_before = layer.bame_mask.clone(), layer.weight.detach().clone()
        layer.zero_grad()
        layer(torch.randn(4, 16)).square().mean().backward()
        evolution = layer.bame_optimizer_step(0.1)
        assert bool(nt.is_nm(layer.bame_mask, 1, 4))
        assert layer.bame_velocity.dtype == layer.weight.dtype == torch.float32
        pruned = ~before & ~layer.bame_mask
        assert torch.equal(layer.weight.detach()[pruned], weight_before[pruned])
        regrown = layer.bame_mask & ~before
        if evolution is not None:
            changed += int(regrown.sum())
    assert changed > 0 and layer.bame_state.num_updates == 6


@pytest.mark.slow
@pytest.mark.parametrize(("layout", "mode"), [("channels", "gathered"), ("flat", "masked_dense")])
def test_conv_step_by_step_equals_the_reference_bit_for_bit(layout, mode):
    # A 3x3 convolution on small integers with dyadic rates: Y, dX and the computed dW entries
    # equal the dense torch GEMMs exactly (0 where not computed), and the evolution on the
    # layout's [rows, reduction] matrix equals nmref.bame.evolve_mask + the §4 SGD bit for bit.
    from nmref.layouts import from_reduction_matrix, to_reduction_matrix

    rng = np.random.default_rng(9)
    config = _config(n=2, m=4)
    layer = nt.SparseConv2d(
        4,
        4,
        3,
        padding=1,
        bias=False,
        pattern="2:4",
        method="bame",
        layout=layout,
        bame_config=config,
        dtype=torch.float64,
    )
    layer.bame_weight_gradient = mode
    shape = tuple(layer.weight.shape)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(rng.integers(-4, 5, shape).astype(np.float64)))
        layer.bame_mask.copy_(nt.magnitude_mask(layer.weight, 2, 4, layout=layout))
    layer.bame_state = ref.BameState.initial(
        to_reduction_matrix(layer.bame_mask.numpy(), layout), 4
    )
    matrix = to_reduction_matrix(layer.weight.detach().numpy(), layout)
    rows = matrix.shape[0]
    reference = ref_training.SparseLinear(
        weight=matrix.copy(),
        bias=np.zeros(rows),
        mask=to_reduction_matrix(layer.bame_mask.numpy(), layout).copy(),  # no alias
        velocity=np.zeros_like(matrix),
        bias_velocity=np.zeros(rows),
        state=layer.bame_state,
    )
    optimizer = ref_training.SGD(learning_rate=0.5, momentum=0.5, weight_decay=0.25)
    evolutions = 0
    for step in range(8):
        x = torch.from_numpy(rng.integers(-2, 3, (2, 4, 5, 5)).astype(np.float64))
        dy = torch.from_numpy(rng.integers(-2, 3, (2, 4, 5, 5)).astype(np.float64))
        x.requires_grad_(True)
        layer.zero_grad()
        y = layer(x)
        y.backward(dy)
        sparse = torch.from_numpy(from_reduction_matrix(reference.effective_weight, shape, layout))
        assert torch.equal(y.detach(), torch.nn.functional.conv2d(x.detach(), sparse, padding=1))
        dense_dx = torch.nn.grad.conv2d_input(x.shape, sparse, dy, padding=1)
        assert torch.equal(x.grad, dense_dx)
        updating = ref.is_update_step(step, config)
        positions = reference.mask
        if updating:
            candidates = ref.candidate_blocks(reference.state, config)
            positions = ref.gradient_positions(reference.mask, candidates, 4)
        weight_positions = torch.from_numpy(from_reduction_matrix(positions, shape, layout))
        assert torch.equal(layer.bame_gradient_positions(), weight_positions)
        dense_dw = torch.nn.grad.conv2d_weight(x.detach(), shape, dy, padding=1)
        assert torch.equal(layer.weight.grad, torch.where(weight_positions, dense_dw, 0.0))
        grad = np.where(positions, to_reduction_matrix(dense_dw.numpy(), layout), np.nan)
        evolution = layer.bame_optimizer_step(
            optimizer.learning_rate, optimizer.momentum, optimizer.weight_decay
        )
        if updating:
            ref_training._evolve_layer(reference, grad, step, config, optimizer)
            evolutions += int(evolution.selected.sum())
        ref_training._sgd_on_kept(reference, grad, np.zeros(rows), optimizer)
        np.testing.assert_array_equal(
            to_reduction_matrix(layer.bame_mask.numpy(), layout), reference.mask
        )
        np.testing.assert_array_equal(
            to_reduction_matrix(layer.weight.detach().numpy(), layout), reference.weight
        )
        np.testing.assert_array_equal(
            to_reduction_matrix(layer.bame_velocity.numpy(), layout), reference.velocity
        )
        np.testing.assert_array_equal(layer.bame_state.changes, reference.state.changes)
    assert evolutions > 0
