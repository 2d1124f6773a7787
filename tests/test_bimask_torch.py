"""Cross-checks of nmref.bimask and nmref.srste against torch peers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from nmref import bimask, srste

torch = pytest.importorskip("torch", reason="the torch peers need torch")

PORT_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bimask_torch_port.py"


def _load_port():
    """The torch port of the authors' procedure, from benchmarks/ (not a package)."""
    spec = importlib.util.spec_from_file_location("bimask_torch_port", PORT_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


port = _load_port()


@pytest.mark.parametrize(
    ("shape", "pattern"), [((16, 32), (2, 4)), ((24, 16), (1, 4)), ((16, 24), (4, 8))]
)
def test_search_scores_equal_the_torch_port_of_the_code(shape, pattern):
    n, m = pattern
    rng = np.random.default_rng(0)
    weight = rng.standard_normal(shape)
    candidates = np.stack([rng.permutation(shape[0]) for _ in range(20)])
    ours = bimask.search_permutation(weight, n, m, candidates=candidates, rng=0)
    best, scores = port.code_search(torch.from_numpy(weight), n, m, torch.from_numpy(candidates))
    np.testing.assert_array_equal(ours.candidate_scores, np.array(scores, dtype=np.int64))
    np.testing.assert_array_equal(ours.permutation, best.numpy())
    forward = bimask.forward_mask(weight, n, m)
    np.testing.assert_array_equal(
        forward, port.code_forward_mask(torch.from_numpy(weight), n, m).numpy().astype(bool)
    )
    permutation = candidates[3]
    backward = bimask.backward_mask(weight, forward, permutation, n, m, rank="masked_magnitude")
    code_permuted = port.code_permuted_backward_mask(
        torch.from_numpy(weight),
        torch.from_numpy(forward.astype(np.float64)),
        torch.from_numpy(permutation),
        n,
        m,
    ).numpy()
    np.testing.assert_array_equal(backward[permutation], code_permuted.astype(bool))


@pytest.mark.slow
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sgd_step_matches_torch_sgd(nesterov, dtype):
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((6, 8)).astype(dtype)
    grads = [rng.standard_normal((6, 8)).astype(dtype) for _ in range(5)]
    parameter = torch.nn.Parameter(torch.from_numpy(weight.copy()))
    optimizer = torch.optim.SGD(
        [parameter], lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=nesterov
    )
    ours, velocity = weight, None
    for grad in grads:
        parameter.grad = torch.from_numpy(grad.copy())
        optimizer.step()
        ours, velocity = srste.sgd_step(
            ours, grad, velocity, lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=nesterov
        )
    tolerance = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(ours, parameter.detach().numpy(), rtol=tolerance, atol=tolerance)


def test_srste_gradient_matches_an_autograd_function():
    """The SR-STE backward written as a torch autograd function (as in the released code)."""

    class Sparse(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight, mask, decay):
            ctx.save_for_backward(weight, mask)
            ctx.decay = decay
            return weight * mask

        @staticmethod
        def backward(ctx, grad_output):
            weight, mask = ctx.saved_tensors
            return grad_output + ctx.decay * (1 - mask) * weight, None, None

    rng = np.random.default_rng(2)
    weight = rng.standard_normal((4, 8))
    inputs = rng.standard_normal((3, 8))
    mask = bimask.forward_mask(weight, 2, 4)
    w = torch.tensor(weight, requires_grad=True)
    x = torch.from_numpy(inputs)
    loss = (x @ Sparse.apply(w, torch.from_numpy(mask.astype(np.float64)), 2e-4).t()).square().sum()
    loss.backward()
    sparse = weight * mask
    grad_sparse = 2 * (inputs @ sparse.T).T @ inputs
    np.testing.assert_allclose(
        srste.srste_gradient(grad_sparse, weight, mask, 2e-4), w.grad.numpy(), rtol=1e-12
    )
