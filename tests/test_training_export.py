"""Export of a trained sparse model (``specs/training.md`` §6): plain layers, 2:4 checkpoints in
the formats of ``nmsim convert``, weights for ``torch.sparse.to_sparse_semi_structured``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="export is the torch path's")

import nmref  # noqa: E402
import nmsim.torch as nt  # noqa: E402
from nmsim.torch.export import (  # noqa: E402
    masked_model,
    save_sparse_checkpoint,
    semi_structured_weights,
)

METHODS = ("ste", "srste", "transposable", "bimask", "bame")


def _trained(method: str, pattern: str = "2:4") -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 4 * 4, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 32),
    )
    nt.sparsify(model, method, pattern)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(8, 4, 4, 4, generator=generator)
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    return model.eval()


@pytest.mark.parametrize("method", METHODS)
def test_the_masked_model_is_plain_and_computes_what_the_trained_one_computes(method):
    model = _trained(method)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain = masked_model(model)
    assert not any(isinstance(m, nt.SparseLinear | nt.SparseConv2d) for m in plain.modules())
    x = torch.randn(5, 4, 4, 4, generator=torch.Generator().manual_seed(2))
    assert torch.equal(plain(x), model(x))
    for name in ("0", "3", "5"):
        weight = plain.get_submodule(name).weight.detach()
        expected = torch.where(
            model.get_submodule(name).mask(), model.get_submodule(name).weight, 0
        )
        assert torch.equal(weight, expected)
    # a dense model's keys only: loadable without nmsim
    reference = torch.nn.Sequential(*[type(m)() if isinstance(m, torch.nn.ReLU | torch.nn.Flatten)
                                      else m for m in plain])  # fmt: skip
    assert set(plain.state_dict()) == set(reference.state_dict())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_semi_structured_weights_are_2_4_half_precision_and_sized_for_the_backends():
    model = _trained("srste")
    weights = semi_structured_weights(model, torch.bfloat16)
    assert set(weights) == {"3", "5"}  # the convolution is not a 2-D GEMM operand
    for name, weight in weights.items():
        assert weight.dtype == torch.bfloat16 and weight.is_contiguous()
        groups = (weight.float().numpy() != 0).reshape(weight.shape[0], -1, 4).sum(-1)
        assert groups.max() <= 2
        layer = model.get_submodule(name)
        np.testing.assert_array_equal(
            weight.float().numpy(), np.where(layer.mask().numpy(), layer.weight.detach().bfloat16().float().numpy(), 0)
        )  # fmt: skip
    with pytest.raises(ValueError, match="float32 runs as 1:2"):
        semi_structured_weights(model, torch.float32)
    with pytest.raises(ValueError, match=r"no 2:4 SparseLinear.*pattern 1:4"):
        semi_structured_weights(_trained("srste", "1:4"))


def test_a_shape_no_backend_accepts_is_refused_by_name():
    model = torch.nn.Sequential(torch.nn.Linear(16, 8))  # 8 rows: below every minimum
    nt.sparsify(model, "srste", "2:4")
    with pytest.raises(ValueError, match=r"^0: weight shape \(8, 16\).*cuSPARSELt \(16, 16\)"):
        semi_structured_weights(model)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="to_sparse_semi_structured needs CUDA")
def test_the_weights_compress_on_a_gpu():  # pragma: no cover - GPU only
    from torch.sparse import to_sparse_semi_structured

    model = _trained("srste").cuda()
    for weight in semi_structured_weights(model).values():
        sparse = to_sparse_semi_structured(weight)
        assert torch.equal(sparse.to_dense(), weight)


@pytest.mark.parametrize("format", ["dense", "sparse-24-bitmask", "cutlass"])
def test_checkpoints_round_trip_to_the_masked_weights_with_a_speedup_estimate(format, tmp_path):
    from safetensors.numpy import load_file

    from nmsim.formats.compressed_checkpoint import convert

    model = _trained("transposable")
    exported = save_sparse_checkpoint(model, tmp_path / "model.safetensors", format=format)
    assert exported.path == tmp_path / "model.safetensors" and exported.format == format
    estimate = exported.forward_speedup
    assert estimate["low"] <= estimate["speedup"] <= estimate["high"]
    assert estimate["verdict"] in ("gain", "no gain", "loss", "uncertain")
    dense = tmp_path / "dense.safetensors"
    if format == "dense":
        dense = exported.path
    else:
        convert(exported.path, dense, "dense")
    tensors = load_file(dense)
    for name in ("3", "5"):
        layer = model.get_submodule(name)
        expected = torch.where(layer.mask(), layer.weight.detach(), 0).half().numpy()
        np.testing.assert_array_equal(tensors[f"{name}.weight"], expected)
        assert nmref.is_transposable(expected != 0, 2, 4, exact=False)
    with pytest.raises(ValueError, match="exists"):
        save_sparse_checkpoint(model, exported.path, format=format)
    with pytest.raises(ValueError, match="format='csr' must be one of"):
        save_sparse_checkpoint(model, tmp_path / "other.safetensors", format="csr")


def test_exporting_a_model_with_no_sparse_layer_says_so():
    with pytest.raises(ValueError, match="sparsify it first"):
        masked_model(torch.nn.Linear(4, 4))
