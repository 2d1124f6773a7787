"""The training contract under ``torch.autocast``, in whole-model bfloat16, under
``torch.compile``, and without host synchronisation (``specs/training.md`` §4, §5)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training contract is the torch path's")

import nmref  # noqa: E402
import nmsim.torch as nt  # noqa: E402

METHODS = ("ste", "srste", "transposable", "bimask", "bame")
# torch.compile's own machinery warns about torch APIs it uses itself (Function instantiation,
# torch.jit.script_method); only warnings issued from torch's modules are let through.
TORCH_INTERNAL_WARNINGS = pytest.mark.filterwarnings("ignore::DeprecationWarning:torch")
TEACHER = torch.randn(16, 8, generator=torch.Generator().manual_seed(0))


def _model(method: str, dtype=torch.float32, **settings) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    nt.sparsify(model.to(dtype), method, "2:4", **settings)
    return model


def _batch(step: int, dtype=torch.float32):
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(100 + step))
    return x.to(dtype), (x @ TEACHER).argmax(1)


def _expected_mask(layer) -> np.ndarray:
    """nmref's mask of the layer's weight, float16/bfloat16 through the float32 upcast."""
    weight = layer.weight.detach().float().numpy()
    if layer.method == "transposable":
        return nmref.transposable_mask(np.abs(weight), 2, 4)
    return nmref.magnitude_mask(weight, 2, 4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("method", METHODS)
def test_autocast_trains_every_method_with_the_float32_masks(method, dtype):
    model = _model(method, refresh_interval=1) if method == "transposable" else _model(method)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = _batch(step)
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
        assert out.dtype == dtype
        loss.backward()
        for parameter in model.parameters():
            assert parameter.grad.dtype == torch.float32
            assert bool(torch.isfinite(parameter.grad).all())
        optimizer.step()
        for layer in (model[0], model[2]):
            if method != "bame":  # BAME's mask is evolved state, not recomputed
                np.testing.assert_array_equal(layer.mask().numpy(), _expected_mask(layer))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("method", ["bimask", "bame"])
def test_custom_gemms_under_autocast_are_the_autocast_gemms(method, dtype):
    # Bi-Mask and BAME run their own GEMMs; under autocast they must be the ones F.linear
    # would run: operands cast to the autocast dtype, outputs and input gradients in it.
    model = _model(method)
    layer = model[0]
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    upstream = torch.randn(8, 32, generator=torch.Generator().manual_seed(2)).to(dtype)
    with torch.autocast("cpu", dtype=dtype):
        out = layer(x)
    out.backward(upstream)
    forward = layer.mask()
    backward = layer.backward_mask()
    sparse = torch.where(forward, layer.weight.detach(), 0.0)
    expected = torch.nn.functional.linear(
        x.detach().to(dtype), sparse.to(dtype), layer.bias.to(dtype)
    )
    assert torch.equal(out.detach(), expected)
    backward_weight = torch.where(backward, layer.weight.detach(), 0.0).to(dtype)
    assert torch.equal(x.grad, (upstream @ backward_weight).float())


@pytest.mark.parametrize("method", METHODS)
def test_a_bfloat16_model_trains_with_masks_of_the_float32_upcast(method):
    model = _model(method, torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = _batch(step, torch.bfloat16)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x).float(), y).backward()
        optimizer.step()
    for layer in (model[0], model[2]):
        assert layer.weight.dtype == torch.bfloat16
        if method in ("ste", "srste", "bimask"):
            np.testing.assert_array_equal(layer.mask().numpy(), _expected_mask(layer))
        assert nmref.is_nm(layer.mask().numpy(), 2, 4)


def test_converting_the_model_dtype_refreshes_the_masks_of_the_rounded_weights():
    model = _model("srste")
    with torch.no_grad():
        model[0].weight.mul_(1 + 2**-10)  # values that bfloat16 rounds onto ties
    model.to(torch.bfloat16)
    np.testing.assert_array_equal(model[0].nm_mask.numpy(), _expected_mask(model[0]))


@contextlib.contextmanager
def _no_host_synchronisation(monkeypatch):
    """Make every way a tensor value reaches the host raise (a GPU would synchronise there)."""

    def refuse(name):
        def call(*args, **kwargs):
            raise AssertionError(f"host synchronisation: Tensor.{name}")

        return call

    with monkeypatch.context() as patch:
        for name in ("item", "__bool__", "tolist", "numpy", "nonzero", "__index__", "__int__",
                     "__float__"):  # fmt: skip
            patch.setattr(torch.Tensor, name, refuse(name))
        for name in ("__getitem__", "__setitem__"):
            original = getattr(torch.Tensor, name)

            def guarded(self, index, *rest, _original=original, _name=name):
                indices = index if isinstance(index, tuple) else (index,)
                if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
                    raise AssertionError(f"host synchronisation: boolean Tensor.{_name}")
                return _original(self, index, *rest)

            patch.setattr(torch.Tensor, name, guarded)
        yield


@pytest.mark.parametrize("method", METHODS)
def test_a_step_that_refreshes_no_mask_never_synchronises(method, monkeypatch):
    settings = {} if method in ("transposable", "bame") else {"refresh_interval": 3}
    if method == "bimask":
        settings["permutation_interval"] = 100
    model = _model(method, **settings)
    if method == "bame":  # the gathered dW lists its entries with nonzero()
        for layer in (model[0], model[2]):
            layer.bame_weight_gradient = "masked_dense"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = _batch(0)
    for step in range(5):
        refreshing = step % 3 == 2 if method not in ("transposable", "bame") else False
        if method == "bame":
            refreshing = nmref.bame.is_update_step(step, model[0].bame_config)
        guard = contextlib.nullcontext() if refreshing else _no_host_synchronisation(monkeypatch)
        optimizer.zero_grad()
        with guard:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()


@pytest.mark.slow
@TORCH_INTERNAL_WARNINGS
@pytest.mark.parametrize("method", METHODS)
def test_compile_traces_a_whole_training_step_in_one_graph(method):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    settings = {"refresh_interval": 2} if method == "transposable" else {}
    if method == "bame":
        settings["bame_config"] = nmref.BameConfig(2, 4, update_interval=2)
    model = _model(method, **settings)
    compiled = torch.compile(model, fullgraph=True)  # any graph break raises
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(8):
        x, y = _batch(step % 4)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        for layer in (model[0], model[2]):
            assert nmref.is_nm(layer.mask().numpy(), 2, 4)
            if method in ("ste", "srste", "bimask"):
                np.testing.assert_array_equal(layer.mask().numpy(), _expected_mask(layer))
    assert counters["stats"]["unique_graphs"] == 1  # masks change, the graph does not
    assert losses[-1] < losses[0]


@pytest.mark.slow
@TORCH_INTERNAL_WARNINGS
def test_a_weight_changed_under_compile_is_refused_not_used_stale():
    torch._dynamo.reset()
    model = _model("srste")
    compiled = torch.compile(model, fullgraph=True)
    x, y = _batch(0)
    torch.nn.functional.cross_entropy(compiled(x), y).backward()
    with torch.no_grad():
        model[0].weight.mul_(-1.0).add_(0.5)  # the compiled forward cannot see this
    model.zero_grad()
    with pytest.raises(RuntimeError, match="refresh_masks"):
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
    assert nt.refresh_masks(model) == 2
    torch.nn.functional.cross_entropy(compiled(x), y).backward()
