"""The training contract of ``specs/training.md``: one test per point, each able to fail.

Every method trains in a plain loop (``torch.optim``, LR schedulers), owns its schedule, resumes
from a checkpoint bit for bit, and refuses the configurations that would not train as the method
says. Autocast and ``torch.compile`` are in ``tests/test_training_compile.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training contract is the torch path's")

import nmref  # noqa: E402
import nmsim.torch as nt  # noqa: E402
from nmsim.torch.layers import host_transposable_mask  # noqa: E402

METHODS = ("ste", "srste", "transposable", "bimask", "bame")


def _model(method: str, seed: int = 0, **settings) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    result = nt.sparsify(model, method, "2:4", **settings)
    assert result.replaced == ("0", "2")
    return model


TEACHER = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))


def _batches(count: int, seed: int = 1):
    """Inputs and the labels of a fixed linear teacher: a task the models can learn."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        x = torch.randn(32, 16, generator=generator)
        yield x, (x @ TEACHER).argmax(1)


def _train(model, optimizer, batches, scheduler=None) -> list[float]:
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(float(loss.detach()))
    return losses


def _layers(model):
    return [layer for _, layer in nt.sparse_layers(model)]


def _state(model) -> dict[str, torch.Tensor]:
    return {key: value.clone() for key, value in model.state_dict().items()}


@pytest.mark.parametrize("method", METHODS)
def test_a_stock_loop_with_a_scheduler_trains_every_method(method):
    model = _model(method)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    losses = _train(model, optimizer, list(_batches(8)) * 5, scheduler)
    assert losses[-1] < 0.7 * losses[0], losses
    for layer in _layers(model):
        assert layer.nm_step == 40
        matrix = layer.mask().numpy()
        assert nmref.is_nm(matrix, 2, 4)
        if method == "transposable":
            assert nmref.is_transposable(matrix, 2, 4)


@pytest.mark.parametrize("method", ["ste", "srste", "bimask"])
def test_the_forward_mask_is_nmref_of_the_current_weights_after_every_step(method):
    model = _model(method)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    for x, y in _batches(6):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        for layer in _layers(model):
            expected = nmref.magnitude_mask(layer.weight.detach().numpy(), 2, 4)
            np.testing.assert_array_equal(layer.nm_mask.numpy(), expected)


def test_transposable_masks_refresh_on_the_papers_interval_with_nmrefs_kernel():
    model = _model("transposable")
    layer = model[0]
    assert layer.schedule.refresh_interval == 40  # Hubara et al. 2021, code: freq = 40
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    seen = []
    for step, (x, y) in enumerate(_batches(81)):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        seen.append(layer.mask())
        weight = layer.weight.detach()
        if (step + 1) % 40 == 0:
            expected = nmref.transposable_mask(np.abs(weight.numpy()), 2, 4)
            np.testing.assert_array_equal(seen[-1].numpy(), expected)
            # the same bits as the torch path's own solver
            assert torch.equal(seen[-1], nt.transposable_weight_mask(weight, 2, 4))
    changes = [s for s in range(1, 81) if not torch.equal(seen[s], seen[s - 1])]
    assert changes and set(changes) <= {39, 79}


@pytest.mark.parametrize("solver, fill", [("exact", "at_most"), ("greedy", "exact")])
def test_transposable_options_are_the_solvers_of_nmref(solver, fill):
    layer = nt.SparseLinear(
        16, 8, pattern="2:4", method="transposable", transposable_solver=solver,
        transposable_fill=fill,
    )  # fmt: skip
    weight = layer.weight.detach()
    expected = nmref.transposable_mask(np.abs(weight.numpy()), 2, 4, method=solver, fill=fill)
    np.testing.assert_array_equal(layer.mask().numpy(), expected)
    assert nmref.is_transposable(layer.mask().numpy(), 2, 4, exact=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_host_transposable_mask_equals_the_torch_solver(dtype):
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(32, 16, generator=generator).to(dtype)
    for n, m in ((2, 4), (1, 4), (4, 8)):
        expected = nt.transposable_weight_mask(weight, n, m)
        assert torch.equal(host_transposable_mask(weight, n, m), expected)


def test_bimask_searches_its_permutation_on_its_own_schedule():
    model = _model("bimask", permutation_interval=5, permutation_candidates=4)
    layer = model[0]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    permutations = [layer.permutation.clone()]
    for x, y in _batches(12):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        permutations.append(layer.permutation.clone())
    changed = [s for s in range(1, 13) if not torch.equal(permutations[s], permutations[s - 1])]
    assert changed and set(changed) <= {5, 10}
    from nmsim.torch.bimask import backward_mask

    expected = backward_mask(layer.weight.detach(), layer.mask(), layer.permutation, 2, 4)
    assert torch.equal(layer.backward_mask(), expected)


def _bame_pair(momentum=0.5, weight_decay=0.25):
    config = nmref.BameConfig(2, 4, update_interval=2)
    layers = []
    for _ in range(2):
        torch.manual_seed(4)
        layer = nt.SparseLinear(16, 8, pattern="2:4", method="bame", bame_config=config,
                                dtype=torch.float64)  # fmt: skip
        layers.append(layer)
    return layers


def test_bame_through_a_stock_sgd_equals_its_own_step_bit_for_bit():
    hooked, manual = _bame_pair()
    optimizer = torch.optim.SGD(hooked.parameters(), lr=0.125, momentum=0.5, weight_decay=0.25)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    generator = torch.Generator().manual_seed(9)
    pruned_before = previous_mask = None
    for step in range(9):
        x = torch.randn(4, 16, generator=generator, dtype=torch.float64)
        lr = optimizer.param_groups[0]["lr"]
        for layer in (hooked, manual):
            layer.zero_grad()
            layer(x).square().sum().backward()
        optimizer.step()
        scheduler.step()
        manual.bame_optimizer_step(lr, 0.5, 0.25)
        assert torch.equal(hooked.weight, manual.weight), step
        assert torch.equal(hooked.bame_mask, manual.bame_mask)
        assert torch.equal(hooked.bame_velocity, manual.bame_velocity)
        assert torch.equal(hooked.bias, manual.bias)
        assert hooked.bame_step == manual.bame_step == step + 1
        if pruned_before is not None:
            stay = ~hooked.bame_mask & ~previous_mask
            assert torch.equal(hooked.weight.detach()[stay], pruned_before[stay])
        pruned_before = hooked.weight.detach().clone()
        previous_mask = hooked.bame_mask.clone()
    assert hooked.bame_state.num_updates > 0
    # the optimizer never took these parameters into its own state
    assert all(not optimizer.state[p] for p in hooked.parameters())


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: torch.optim.Adam(p, lr=0.1), "BAME updates only the kept weights"),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), "nesterov=True"),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1), "dampening"),
    ],
)
def test_bame_refuses_an_optimizer_that_would_not_apply_its_update(make, message):
    model = _model("bame")
    optimizer = make(model.parameters())
    x, y = next(_batches(1))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    before = model[0].weight.detach().clone()
    with pytest.raises((TypeError, ValueError), match=message):
        optimizer.step()
    assert torch.equal(model[0].weight.detach(), before)


def test_a_bame_weight_changed_outside_its_step_is_an_error():
    model = _model("bame")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, optimizer, _batches(2))
    with torch.no_grad():
        model[0].weight.add_(1.0)  # a manual update after training started
    x, _ = next(_batches(1))
    with pytest.raises(RuntimeError, match="changed outside the BAME step"):
        model(x)
    model[0].bame_accept_weight()
    model(x)


def test_a_weight_no_optimizer_steps_is_refused_after_the_backward_limit():
    model = _model("srste", backward_limit=3)
    head_only = torch.optim.SGD(model[2].parameters(), lr=0.1)  # layer 0 left out
    batches = _batches(4)
    for _ in range(3):
        _train(model, head_only, [next(batches)])
    x, y = next(batches)
    with pytest.raises(RuntimeError, match=r"without an optimizer step.*torch\.optim"):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    # frozen on purpose: no gradient, no error
    frozen = _model("srste", backward_limit=3)
    frozen[0].weight.requires_grad_(False)
    frozen[0].bias.requires_grad_(False)
    _train(frozen, torch.optim.SGD(frozen[2].parameters(), lr=0.1), _batches(6))


def test_a_weight_set_outside_a_step_gets_its_mask_at_the_next_forward():
    layer = nt.SparseLinear(4, 1, bias=False, pattern="1:4", method="ste")
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))
    assert layer(torch.ones(1, 4)).item() == 4.0
    with torch.no_grad():
        layer.weight[0, 0] = 9.0
    assert layer(torch.ones(1, 4)).item() == 9.0


def test_step_layers_advances_a_loop_without_torch_optim():
    model = _model("transposable", refresh_interval=2)
    layer = model[0]
    for x, y in _batches(4):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        assert nt.step_layers(model) == 2
    assert layer.nm_step == 4
    expected = nmref.transposable_mask(np.abs(layer.weight.detach().numpy()), 2, 4)
    np.testing.assert_array_equal(layer.mask().numpy(), expected)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: nt.SparseLinear(16, 8, method="transposable", refresh_interval=0),
         ValueError, "refresh_interval=0 must be an integer >= 1"),
        (lambda: nt.SparseLinear(16, 8, method="srste", refresh_interval=-5),
         ValueError, "refresh_interval=-5"),
        (lambda: nt.SparseLinear(16, 8, method="topk"), ValueError, "method='topk' must be one of"),
        (lambda: nt.SparseLinear(6, 8, method="srste"), ValueError, "multiple of m=4"),
        (lambda: nt.SparseLinear(16, 8, method="srste", permutation_interval=10),
         ValueError, "Bi-Mask settings"),
        (lambda: nt.SparseLinear(16, 8, method="bame", refresh_interval=10),
         ValueError, "bame_config"),
        (lambda: nt.SparseLinear(16, 8, method="transposable", transposable_solver="flow"),
         ValueError, "transposable_solver='flow' must be one of"),
        (lambda: nt.sparsify(torch.nn.Linear(16, 8), "srste", refresh_intervall=3),
         TypeError, "unknown setting"),
    ],
)  # fmt: skip
def test_misuse_gets_one_error_naming_the_argument_and_the_rule(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("method", ["srste", "transposable", "bimask"])
def test_non_finite_weights_at_a_refresh_name_the_layer(method):
    model = _model(method)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = next(_batches(1))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    model[0].weight.grad[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"SparseLinear\(method=.*optimizer step 1.*non-finite"):
        optimizer.step()
        model[0].refresh_masks()  # transposable refreshes every 40 steps: force it


@pytest.mark.parametrize("method", METHODS)
def test_a_checkpoint_resumes_bit_for_bit(method, tmp_path):
    settings = {"refresh_interval": 3} if method in ("transposable", "srste") else {}
    if method == "bimask":
        settings = {"permutation_interval": 4, "permutation_candidates": 3}
    batches = list(_batches(14))
    model = _model(method, **settings)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    _train(model, optimizer, batches[:7])  # stop between refreshes and searches
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               tmp_path / "checkpoint.pt")  # fmt: skip
    _train(model, optimizer, batches[7:])
    resumed = _model(method, seed=123, **settings)  # other initial weights
    resumed_optimizer = torch.optim.SGD(resumed.parameters(), lr=0.2, momentum=0.9)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    resumed.load_state_dict(checkpoint["model"])
    resumed_optimizer.load_state_dict(checkpoint["optimizer"])
    _train(resumed, resumed_optimizer, batches[7:])
    original, again = _state(model), _state(resumed)
    assert original.keys() == again.keys()
    for key in original:
        assert torch.equal(original[key], again[key]), key


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_model_keeps_its_masks_and_trains_on_its_own(how, tmp_path):
    import copy

    model = _model("transposable", refresh_interval=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    _train(model, optimizer, _batches(3))  # the masks are now older than the weights
    if how == "deepcopy":
        twin = copy.deepcopy(model)
    else:
        torch.save(model, tmp_path / "model.pt")
        twin = torch.load(tmp_path / "model.pt", weights_only=False)
    assert set(twin.state_dict()) == set(model.state_dict())
    assert all(
        torch.equal(a.mask(), b.mask()) for a, b in zip(_layers(model), _layers(twin), strict=True)
    )
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.5)
    _train(twin, twin_optimizer, _batches(2))
    assert [layer.nm_step for layer in _layers(twin)] == [5, 5]
    assert [layer.nm_step for layer in _layers(model)] == [3, 3]  # the original did not move
