"""A trained sparse model, exported: plain layers with masked weights, 2:4 checkpoints, weights
for ``torch.sparse.to_sparse_semi_structured``, and the report's estimate of its speed-up.

Every export uses the **forward** mask of each layer (the mask ``Y`` is computed with:
``E``, transposable ``T``, Bi-Mask's ``F``, BAME's ``K``), so the exported model computes what
the trained one computed in evaluation (``specs/training.md`` §6).
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .layers import SparseConv2d, SparseLinear

__all__ = [
    "SEMI_STRUCTURED_DTYPES",
    "ExportedCheckpoint",
    "masked_model",
    "masked_state_dict",
    "save_sparse_checkpoint",
    "semi_structured_weights",
]

#: Dtypes whose 2:4 sparse GEMM sparse tensor cores run (float32 runs as 1:2 TF32, not 2:4).
SEMI_STRUCTURED_DTYPES = (torch.float16, torch.bfloat16, torch.int8)


def _sparse_layers(model: nn.Module) -> list[tuple[str, SparseLinear | SparseConv2d]]:
    layers = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, SparseLinear | SparseConv2d)
    ]
    if not layers:
        raise ValueError("model has no SparseLinear or SparseConv2d layer (sparsify it first)")
    return layers


@torch.no_grad()
def masked_model(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every sparse layer replaced by a plain ``nn.Linear`` /
    ``nn.Conv2d`` whose weight is the masked weight ``E ⊙ W`` (zeros where pruned).

    The copy computes what ``model`` computes in evaluation, bit for bit (tested), needs
    nothing of nmsim to load, and leaves ``model`` untouched.
    """
    exported = copy.deepcopy(model)
    for name, layer in _sparse_layers(exported):
        plain = _plain_layer(layer)
        parent_name, _, child = name.rpartition(".")
        parent = exported.get_submodule(parent_name) if parent_name else exported
        if name:
            setattr(parent, child, plain)
        else:
            exported = plain
    return exported


def _plain_layer(layer: SparseLinear | SparseConv2d) -> nn.Module:
    mask = layer.mask()
    weight = torch.where(mask, layer.weight.detach(), torch.zeros_like(layer.weight))
    factory = {"device": layer.weight.device, "dtype": layer.weight.dtype}
    if isinstance(layer, SparseLinear):
        plain: nn.Module = nn.Linear(
            layer.in_features, layer.out_features, layer.bias is not None, **factory
        )
    else:
        plain = nn.Conv2d(
            layer.in_channels,
            layer.out_channels,
            layer.kernel_size,
            layer.stride,
            layer.padding,
            layer.dilation,
            layer.groups,
            layer.bias is not None,
            layer.padding_mode,
            **factory,
        )
    plain.weight.copy_(weight)
    if layer.bias is not None:
        plain.bias.copy_(layer.bias.detach())
    return plain


def masked_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of :func:`masked_model` (parameters and buffers of a plain model)."""
    return {key: value.detach() for key, value in masked_model(model).state_dict().items()}


def semi_structured_weights(
    model: nn.Module, dtype: torch.dtype = torch.float16
) -> dict[str, torch.Tensor]:
    """The masked weight of every 2:4 ``SparseLinear``, ready for
    ``torch.sparse.to_sparse_semi_structured`` (which then needs a CUDA device).

    Each weight is cast to ``dtype``, made contiguous and checked here, on any device, for
    what that function requires: 2-D; a dtype sparse tensor cores run at 2:4; a shape that is
    a multiple of the minimum tile of the CUTLASS and cuSPARSELt backends (torch's own
    ``_DTYPE_SHAPE_CONSTRAINTS``); and at most 2 nonzeros in every group of 4 consecutive
    entries of a row (the hardware's rule: at most N; a pruned entry that the cast rounds to
    zero is fine, a kept one may be zero too).

    Raises
    ------
    ValueError
        No 2:4 linear layer; a layer whose mask is not 2:4 along ``in`` (another pattern or
        a convolution) is listed by name; a shape or dtype the backends refuse.
    """
    if dtype not in SEMI_STRUCTURED_DTYPES:
        raise ValueError(
            f"dtype={dtype} must be one of {SEMI_STRUCTURED_DTYPES}: sparse tensor cores run "
            "2:4 in 16- and 8-bit types (float32 runs as 1:2 TF32)"
        )
    from torch.sparse import semi_structured

    backends = (
        semi_structured.SparseSemiStructuredTensorCUTLASS,
        semi_structured.SparseSemiStructuredTensorCUSPARSELT,
    )
    weights: dict[str, torch.Tensor] = {}
    refused: list[str] = []
    for name, layer in _sparse_layers(model):
        if not isinstance(layer, SparseLinear) or tuple(layer.pattern) != (2, 4):
            refused.append(f"{name} ({type(layer).__name__}, pattern {layer.pattern})")
            continue
        mask = layer.mask()
        weight = torch.where(mask, layer.weight.detach(), 0.0).to(dtype).contiguous()
        rows, columns = weight.shape
        groups = (weight.reshape(rows, columns // 4, 4) != 0).sum(-1)
        if bool((groups > 2).any()):
            raise ValueError(f"{name}: more than 2 nonzeros in a group of 4 (internal error)")
        accepted = []
        for backend in backends:
            rule = backend._DTYPE_SHAPE_CONSTRAINTS.get(dtype)
            if rule is None:
                continue
            if (
                rows >= rule.sparse_min_rows
                and rows % rule.sparse_min_rows == 0
                and columns >= rule.sparse_min_cols
                and columns % rule.sparse_min_cols == 0
            ):
                accepted.append(backend.BACKEND)
        if not accepted:
            raise ValueError(
                f"{name}: weight shape {(rows, columns)} in {dtype} is not a multiple of the "
                "minimum sparse tile of torch's semi-structured backends (CUTLASS "
                f"{_minimum(backends[0], dtype)}, cuSPARSELt {_minimum(backends[1], dtype)}): "
                "exclude the layer when sparsifying, or pad it"
            )
        weights[name] = weight
    if not weights:
        raise ValueError(
            "no 2:4 SparseLinear layer to export for torch.sparse.to_sparse_semi_structured"
            + (f" (not 2:4 linear: {', '.join(refused)})" if refused else "")
        )
    return weights


def _minimum(backend: Any, dtype: torch.dtype) -> tuple[int, int] | None:
    rule = backend._DTYPE_SHAPE_CONSTRAINTS.get(dtype)
    return None if rule is None else (rule.sparse_min_rows, rule.sparse_min_cols)


@dataclass(frozen=True)
class ExportedCheckpoint:
    """What :func:`save_sparse_checkpoint` wrote and what the report estimates for it."""

    path: Path
    format: str
    notes: tuple[tuple[str, str], ...]
    forward_speedup: dict[str, Any] | None


def save_sparse_checkpoint(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    format: str = "dense",
    dtype: torch.dtype = torch.float16,
    gpu: str = "h100-sxm",
    batch_tokens: int = 4096,
    force: bool = False,
) -> ExportedCheckpoint:
    """Write the masked weights of ``model`` as one ``.safetensors`` checkpoint, in a format
    of ``nmsim convert``, and estimate the model's inference speed-up.

    Parameters
    ----------
    model : nn.Module
        A sparsified model (its sparse layers' forward masks are applied).
    path : path-like
        ``*.safetensors``; written atomically (:func:`nmref.io.output.write_output`), never
        over an existing file unless ``force``.
    format : {"dense", "sparse-24-bitmask", "cutlass"}
        ``"dense"``: the masked weights; the compressed-tensors formats encode every 2:4
        ``*.weight`` (``specs/checkpoint_formats.md``); other tensors are copied.
    dtype : torch.dtype, default float16
        The dtype the floating tensors are stored in (and the GEMM dtype of the estimate).
    gpu, batch_tokens
        The GPU and the activation rows of the report's estimate (``nmsim report``).

    Returns
    -------
    ExportedCheckpoint
        The file, the conversion notes per tensor, and the report's forward speed-up of the
        2:4 GEMMs with its interval and verdict (``None`` when the pattern is not 2:4).
    """
    import tempfile

    from safetensors.numpy import save_file

    from nmref.io.output import write_output
    from nmsim.formats.compressed_checkpoint import CONVERT_TARGETS, convert

    path = Path(path)
    tensors = masked_state_dict(model)
    pattern = {tuple(layer.pattern) for _, layer in _sparse_layers(model)}
    if dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"dtype={dtype} must be torch.float16, torch.bfloat16 or torch.float32")
    arrays = {}
    for name, tensor in tensors.items():
        value = tensor.to("cpu")
        if value.is_floating_point():
            value = value.to(dtype)
        arrays[name] = value
    if format not in CONVERT_TARGETS:
        raise ValueError(f"format={format!r} must be one of {tuple(CONVERT_TARGETS)}")
    with tempfile.TemporaryDirectory(prefix="nmsim-export-") as folder:
        dense = Path(folder) / "model.safetensors"
        _save_tensors(arrays, dense, save_file)
        if format == "dense":
            if path.suffix.lower() != ".safetensors":
                raise ValueError(f"path {str(path)!r} must end in .safetensors")
            written = write_output(
                path, lambda temporary: shutil.copyfile(dense, temporary), force=force,
                flag="path",
            )  # fmt: skip
            notes = [(name, "dense") for name in arrays]
        else:
            written, notes = convert(dense, path, format, force=force, flag="path")
        speedup = None
        if pattern == {(2, 4)}:
            speedup = _forward_speedup(dense, dtype, gpu, batch_tokens)
    return ExportedCheckpoint(written, format, tuple(notes), speedup)


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path, save_file: Any) -> None:
    """safetensors' NumPy writer has no bfloat16: write those through torch's."""
    if any(t.dtype == torch.bfloat16 for t in tensors.values()):
        from safetensors.torch import save_file as save_torch

        save_torch({k: v.contiguous() for k, v in tensors.items()}, str(path))
        return
    save_file({k: np.ascontiguousarray(v.numpy()) for k, v in tensors.items()}, str(path))


def _forward_speedup(path: Path, dtype: torch.dtype, gpu: str, batch_tokens: int) -> dict:
    from nmsim.report.build import ReportSettings, build_report

    gemm_dtype = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "bf16"}[dtype]
    settings = ReportSettings(
        pattern="2:4", methods=("1d",), gpu=gpu, dtype=gemm_dtype, batch_tokens=batch_tokens
    )
    document = build_report(str(path), settings)
    return dict(document["totals"]["time"]["forward_speedup"])
