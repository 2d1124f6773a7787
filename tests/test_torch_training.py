"""Training layers: per-GEMM contract (kit), gradcheck in float64, SR-STE dynamics, sparsify."""

from __future__ import annotations

import numpy as np
import pytest

import nmref
from nmref import srste
from nmref.testing import check_sparse_training
from nmref.testing.cases import round_to_bfloat16

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import nmsim.torch as nt  # noqa: E402
from nmsim.torch.adapters import training_adapter  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["linear", "conv1x1"])
@pytest.mark.parametrize("method", ["ste", "srste"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_training_step_follows_the_per_gemm_contract(layer, method, dtype):
    decay = 0.25 if method == "srste" else 0.0
    impl = training_adapter(method, decay=decay, layer=layer)
    check_sparse_training(impl, method=method, decay=decay, dtype=dtype)


def test_srste_gradient_equals_the_reference_rule_bit_for_bit():
    generator = torch.Generator().manual_seed(1)
    for dtype in (torch.float16, torch.float32, torch.float64):
        weight = torch.randn(16, 32, generator=generator).to(dtype)
        grad = torch.randn(16, 32, generator=generator).to(dtype)
        mask = nt.magnitude_mask(weight, 2, 4)
        got = nt.srste_gradient(grad, weight, mask, 2e-4).numpy()
        w, g, e = weight.numpy(), grad.numpy(), mask.numpy()
        expected = g.copy()
        expected[~e] = g[~e] + w.dtype.type(2e-4) * w[~e]
        np.testing.assert_array_equal(got, expected)
    # decay 0 is STE: the gradient's bits, -0.0 included; no 0 * inf = NaN.
    grad = torch.tensor([-0.0, 1.0, 2.0, 3.0])
    weight = torch.tensor([float("inf"), 0.0, 0.0, 1.0])
    got = nt.srste_gradient(grad, weight, torch.tensor([False, True, False, True]), 0.0)
    assert torch.equal(got, grad) and torch.signbit(got[0])


def test_srste_gradient_in_bfloat16_is_nmrefs_float32_answer_rounded_once():
    # Issue 37: decay was rounded to bfloat16 (2.0027e-4) and each operation rounded in
    # bfloat16, so this pruned entry gave 0.0250244140625 instead of nmref's float32 answer
    # 0.02495872 rounded to bfloat16, 0.02490234375 (specs/torch.md T1).
    grad = torch.tensor([-0.00024127960205078125, 0.0, 0.0, 1.0], dtype=torch.bfloat16)
    weight = torch.tensor([126.0, 0.0, 0.0, 1.0], dtype=torch.bfloat16)
    pruned = torch.zeros(4, dtype=torch.bool)
    got = nt.srste_gradient(grad, weight, pruned, 2e-4)
    assert got.dtype == torch.bfloat16
    assert got.float().tolist() == [0.02490234375, 0.0, 0.0, 1.0]
    generator = torch.Generator().manual_seed(3)
    scale = torch.exp2(torch.randint(-8, 24, (64, 32), generator=generator).float())
    weight = (torch.randn(64, 32, generator=generator) * scale).to(torch.bfloat16)
    grad = torch.randn(64, 32, generator=generator).to(torch.bfloat16)
    mask = nt.magnitude_mask(weight, 2, 4)
    want = srste.srste_gradient(grad.float().numpy(), weight.float().numpy(), mask.numpy(), 2e-4)
    got = nt.srste_gradient(grad, weight, mask, 2e-4)
    np.testing.assert_array_equal(got.float().numpy(), round_to_bfloat16(want))


@pytest.mark.slow
def test_gradcheck_float64_linear_and_conv_inputs_and_bias():
    generator = torch.Generator().manual_seed(2)
    linear = nt.SparseLinear(8, 3, pattern="2:4", dtype=torch.float64)
    x = torch.randn(4, 8, dtype=torch.float64, generator=generator, requires_grad=True)
    weight = linear.weight.detach()
    # The STE/SR-STE weight gradient is not the derivative of the forward (by design);
    # the input and bias gradients are exact derivatives of Y = X (E ⊙ W)^T + b.
    assert torch.autograd.gradcheck(
        lambda inputs, bias: F.linear(inputs, nt.sparse_weight(weight, "2:4"), bias),
        (x, linear.bias.detach().clone().requires_grad_(True)),
    )
    conv = nt.SparseConv2d(8, 2, 3, padding=1, pattern="1:4", dtype=torch.float64)
    images = torch.randn(1, 8, 3, 3, dtype=torch.float64, generator=generator, requires_grad=True)
    conv_weight = conv.weight.detach()
    assert torch.autograd.gradcheck(
        lambda inputs: F.conv2d(inputs, nt.sparse_weight(conv_weight, "1:4"), padding=1),
        (images,),
    )


def test_gradcheck_of_the_srste_decay_term_in_float64():
    """dW - dL/dW~ is the gradient of (λ/2)·||(1 − E) ⊙ W||² with E held fixed."""
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(4, 8, dtype=torch.float64, generator=generator, requires_grad=True)
    decay = 0.5
    sparse = nt.sparse_weight(weight, "2:4", method="srste", decay=decay)
    upstream = torch.randn(4, 8, dtype=torch.float64, generator=generator)
    (sparse * upstream).sum().backward()
    mask = nt.magnitude_mask(weight.detach(), 2, 4)

    def penalty(w):
        return 0.5 * decay * (torch.where(mask, 0.0, w) ** 2).sum()

    w = weight.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(penalty, (w,))
    penalty(w).backward()
    torch.testing.assert_close(weight.grad, upstream + w.grad, rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["channels", "flat"])
def test_conv_forward_and_weight_gradient_equal_the_masked_dense_conv(layout):
    generator = torch.Generator().manual_seed(4)
    conv = nt.SparseConv2d(8, 4, 3, padding=1, pattern="2:4", layout=layout, decay=0.125)
    with torch.no_grad():
        conv.weight.copy_(torch.randint(-2, 3, conv.weight.shape, generator=generator).float())
    images = torch.randn(2, 8, 5, 5, generator=generator)
    out = conv(images)
    mask = torch.from_numpy(nmref.magnitude_mask(conv.weight.detach().numpy(), 2, 4, layout=layout))
    leaf = torch.where(mask, conv.weight.detach(), 0.0).requires_grad_(True)
    reference = F.conv2d(images, leaf, conv.bias.detach(), padding=1)
    assert torch.equal(out, reference)
    upstream = torch.randn(out.shape, generator=generator)
    out.backward(upstream)
    reference.backward(upstream)
    expected = nt.srste_gradient(leaf.grad, conv.weight.detach(), mask, 0.125)
    assert torch.equal(conv.weight.grad, expected)


def test_srste_pruned_weights_decay_geometrically_and_kept_ones_stay():
    layer = nt.SparseLinear(8, 2, bias=False, pattern="2:4", method="srste", decay=0.5)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[4.0, 3.0, 2.0, 1.0] * 2, [1.0, 2.0, 3.0, 4.0] * 2]))
    start = layer.weight.detach().clone()
    mask = layer.mask()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        (layer(torch.zeros(1, 8)).sum() * 0).backward()  # dL/dW~ = 0
        optimizer.step()
    expected = torch.where(mask, start, start * (1 - 0.5 * 0.5) ** 3)
    assert torch.equal(layer.weight.detach(), expected)
    assert torch.equal(layer.mask(), mask)


def test_mask_is_recomputed_every_forward():
    layer = nt.SparseLinear(4, 1, bias=False, pattern="1:4", method="ste")
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    assert layer.mask().tolist() == [[False, False, False, True]]
    with torch.no_grad():
        layer.weight[0, 0] = 9.0
    assert layer.mask().tolist() == [[True, False, False, False]]
    assert torch.equal(layer(torch.ones(1, 4)), torch.tensor([[9.0]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_layers_use_the_exact_nmref_mask(dtype):
    layer = nt.SparseLinear(16, 8, pattern="2:4", dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(torch.randint(-3, 4, layer.weight.shape).to(dtype))
    expected = nmref.magnitude_mask(layer.weight.detach().float().numpy(), 2, 4)
    np.testing.assert_array_equal(layer.mask().numpy(), expected)
    layer(torch.randn(2, 16).to(dtype)).float().sum().backward()
    assert layer.weight.grad.dtype == dtype


def _model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3),  # reduction length 3: skipped at m=4
        nn.Conv2d(8, 8, 3),
        nn.Flatten(),
        nn.Linear(8 * 2 * 2, 16),
        nn.ReLU(),
        nn.Linear(16, 10),
    )


def test_sparsify_swaps_eligible_layers_and_shares_parameters():
    torch.manual_seed(0)
    model = _model()
    parameters = {name: id(p) for name, p in model.named_parameters()}
    images = torch.randn(2, 3, 6, 6)
    result = nt.sparsify(model, "srste", "2:4")
    assert result.replaced == ("1", "3", "5")
    assert result.skipped == (("0", "reduction length 3 is not a multiple of m=4"),)
    assert isinstance(model[1], nt.SparseConv2d) and isinstance(model[3], nt.SparseLinear)
    assert {name: id(p) for name, p in model.named_parameters()} == parameters
    for index in (1, 3, 5):
        layer = model[index]
        matrix = nmref.to_reduction_matrix(layer.mask().numpy(), layer.layout)
        assert nmref.is_nm(matrix, 2, 4)
    model(images).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_sparsify_filters_by_name_and_rejects_unknown_methods():
    model = _model()
    result = nt.sparsify(
        model, "ste", "1:4", include=r"^[35]$", exclude=lambda name, _: name == "5"
    )
    assert result.replaced == ("3",)
    assert model[3].method == "ste" and model[3].pattern == nmref.Pattern(1, 4)
    with pytest.raises(ValueError, match="method='topk' must be one of"):
        nt.sparsify(_model(), "topk")
    with pytest.raises(ValueError, match="must be a multiple of m=4"):
        nt.SparseLinear(6, 2)
    with pytest.raises(ValueError, match="decay=-1"):
        nt.SparseLinear(8, 2, decay=-1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layer_kind", ["linear", "conv"])
def test_masks_and_gradients_along_a_trajectory_equal_nmref_srste_step(dtype, layer_kind):
    """Ten SGD steps of a sparse layer: each step's mask and SR-STE gradient == nmref's.

    The loss is elementwise, ``L = sum(c * W~ - t * W~)``, so ``dL/dW~ = c - t`` needs no BLAS
    reduction and the comparison is exact. Each nmref step starts from the torch weights:
    ``torch.optim.SGD`` itself is not bit-compatible with NumPy (its CPU ``add(alpha=)`` fuses
    the multiply-add), which ``tests/test_bimask_torch.py`` covers with a tolerance.
    """
    from nmref.srste import srste_step

    generator = torch.Generator().manual_seed(5)
    if layer_kind == "linear":
        layer = nt.SparseLinear(16, 8, bias=False, pattern="2:4", decay=0.01, dtype=dtype)
        layout = "linear"
    else:
        layer = nt.SparseConv2d(8, 4, 3, bias=False, pattern="2:4", decay=0.01, dtype=dtype)
        layout = "channels"
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator, dtype=dtype))
    target = torch.randn(layer.weight.shape, generator=generator, dtype=dtype)
    coefficient = torch.randn(layer.weight.shape, generator=generator, dtype=dtype)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5, momentum=0.9)
    masks_seen = set()
    for _ in range(10):
        weight = layer.weight.detach().numpy().copy()
        expected = srste_step(
            weight,
            lambda sparse: (coefficient - target).numpy(),
            2,
            4,
            lr=0.5,
            decay=0.01,
            layout=layout,
        )
        optimizer.zero_grad()
        sparse = layer.sparse_weight()
        (coefficient * sparse - target * sparse).sum().backward()
        np.testing.assert_array_equal(layer.mask().numpy(), expected.mask)
        np.testing.assert_array_equal(layer.weight.grad.numpy(), expected.gradient)
        masks_seen.add(expected.mask.tobytes())
        optimizer.step()
    assert len(masks_seen) > 1  # the mask really changes along the trajectory


@pytest.mark.parametrize("method", ["ste", "srste", "bimask"])
def test_a_pruned_infinite_weight_contributes_zero_not_nan(method):
    # specs/torch.md §3: pruned weights are zeroed with `where`. In [inf, inf, inf, 1] at 2:4
    # the third inf is pruned (ties: lower index kept); a multiplied mask would give
    # inf * 0 = NaN in Y, `where` gives exactly the sum of the kept products, +inf.
    layer = nt.SparseLinear(4, 4, bias=False, pattern="2:4", method=method)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[float("inf")] * 3 + [1.0]] + [[1.0, 2.0, 3.0, 4.0]] * 3))
    assert layer.mask()[0].tolist() == [True, True, False, False]
    y = layer(torch.ones(1, 4))
    assert y[0, 0].item() == float("inf")
    assert y[0, 1:].tolist() == [7.0, 7.0, 7.0]
