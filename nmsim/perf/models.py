"""Layer tables: the GEMMs of a network, per example, for FLOP and time accounting.

A :class:`Layer` is one weight GEMM (or a group of identical GEMMs) seen as
``Y[positions, out] = X[positions, in] @ W[out, in].T``: a linear layer has
``positions`` = tokens, a convolution (as im2col) has ``positions`` = output
pixels and ``in`` = ``C_in/groups * prod(kernel)``. Attention score and value
products (``role="attention"``) have no weight and are never N:M-sparse.

Built-in tables (``model_layers``): ``resnet18``, ``resnet50`` (torchvision
v1.5, stride in the 3x3 conv), ``deit-small``, ``bert-base``, ``llama-mlp``.
Any ``torch.nn.Module`` can be traced with :func:`layers_from_torch` (imports
torch lazily). See ``specs/flops.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from nmref._validation import check_positive_integer

__all__ = ["MODELS", "Layer", "layers_from_torch", "model_layers"]

Role = Literal["stem", "body", "head", "attention", "other"]


@dataclass(frozen=True)
class Layer:
    """One weight GEMM of a network, per example.

    Attributes
    ----------
    name : str
    kind : {"conv", "linear", "matmul"}
        ``matmul`` is an activation-activation product (no weight).
    out_features : int
        Output channels / features of one GEMM (``C_out / groups`` for grouped conv).
    in_features : int
        Reduction length of the forward GEMM (``C_in/groups * prod(kernel)`` or ``in``).
    positions : int
        Rows of the forward GEMM per example (output pixels or tokens).
    role : {"stem", "body", "head", "attention", "other"}
    count : int
        Identical GEMMs (conv groups, attention heads).
    kernel_area : int
        ``prod(kernel)`` of a convolution (1 otherwise): the im2col factor.
    input_positions : int or None
        Pixels of the input feature map per example (default ``positions``);
        with ``kernel_area`` it gives the activation actually read,
        ``in_features / kernel_area * input_positions`` elements.
    """

    name: str
    kind: Literal["conv", "linear", "matmul"]
    out_features: int
    in_features: int
    positions: int
    role: Role = "body"
    count: int = 1
    kernel_area: int = 1
    input_positions: int | None = None

    def __post_init__(self) -> None:
        if self.input_positions is None:
            object.__setattr__(self, "input_positions", self.positions)
        for attr in (
            "out_features",
            "in_features",
            "positions",
            "count",
            "kernel_area",
            "input_positions",
        ):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"layer {self.name!r}: {attr}={value!r} must be an integer >= 1")

    @property
    def macs(self) -> int:
        """Forward multiply-accumulates per example."""
        return self.out_features * self.in_features * self.positions * self.count

    @property
    def activation_elements(self) -> int:
        """Input activation elements per example (what an implicit GEMM reads once)."""
        assert self.input_positions is not None
        return self.in_features // self.kernel_area * self.input_positions * self.count

    @property
    def has_weight(self) -> bool:
        """False for activation-activation products."""
        return self.kind != "matmul"


# --------------------------------------------------------------------------- ResNets
def _conv(
    name: str,
    c_in: int,
    c_out: int,
    kernel: int,
    size_out: int,
    role: Role = "body",
    size_in: int | None = None,
) -> Layer:
    size_in = size_out if size_in is None else size_in
    return Layer(
        name,
        "conv",
        c_out,
        c_in * kernel * kernel,
        size_out * size_out,
        role,
        kernel_area=kernel * kernel,
        input_positions=size_in * size_in,
    )


def _resnet(
    blocks: Sequence[int], bottleneck: bool, image_size: int, classes: int
) -> tuple[Layer, ...]:
    if image_size % 32:
        raise ValueError(f"image_size={image_size} must be a multiple of 32 for a ResNet")
    size = image_size // 2
    layers = [_conv("conv1", 3, 64, 7, size, "stem", size_in=image_size)]
    size //= 2  # max-pool
    c_in = 64
    expansion = 4 if bottleneck else 1
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True), 1):
        for block in range(count):
            stride = 2 if (stage > 1 and block == 0) else 1
            out_size = size // stride
            prefix = f"layer{stage}.{block}"
            c_out = width * expansion
            if bottleneck:
                layers.append(_conv(f"{prefix}.conv1", c_in, width, 1, size))
                layers.append(_conv(f"{prefix}.conv2", width, width, 3, out_size, size_in=size))
                layers.append(_conv(f"{prefix}.conv3", width, c_out, 1, out_size))
            else:
                layers.append(_conv(f"{prefix}.conv1", c_in, width, 3, out_size, size_in=size))
                layers.append(_conv(f"{prefix}.conv2", width, width, 3, out_size))
            if stride != 1 or c_in != c_out:
                layers.append(_conv(f"{prefix}.downsample", c_in, c_out, 1, out_size, size_in=size))
            c_in, size = c_out, out_size
    layers.append(Layer("fc", "linear", classes, c_in, 1, "head"))
    return tuple(layers)


def resnet18(*, image_size: int = 224, classes: int = 1000) -> tuple[Layer, ...]:
    """ResNet-18 (He et al. 2016, Table 1) at ``image_size`` x ``image_size``."""
    return _resnet((2, 2, 2, 2), False, image_size, classes)


def resnet50(*, image_size: int = 224, classes: int = 1000) -> tuple[Layer, ...]:
    """ResNet-50 v1.5 (torchvision: stride in the 3x3 conv) at ``image_size``."""
    return _resnet((3, 4, 6, 3), True, image_size, classes)


# --------------------------------------------------------------------------- transformers
def _encoder_block(
    prefix: str, tokens: int, dim: int, heads: int, hidden: int, fused_qkv: bool
) -> list[Layer]:
    head_dim = dim // heads
    layers = (
        [Layer(f"{prefix}.attn.qkv", "linear", 3 * dim, dim, tokens)]
        if fused_qkv
        else [Layer(f"{prefix}.attn.{p}", "linear", dim, dim, tokens) for p in "qkv"]
    )
    layers += [
        Layer(f"{prefix}.attn.scores", "matmul", tokens, head_dim, tokens, "attention", heads),
        Layer(f"{prefix}.attn.values", "matmul", head_dim, tokens, tokens, "attention", heads),
        Layer(f"{prefix}.attn.proj", "linear", dim, dim, tokens),
        Layer(f"{prefix}.mlp.fc1", "linear", hidden, dim, tokens),
        Layer(f"{prefix}.mlp.fc2", "linear", dim, hidden, tokens),
    ]
    return layers


def deit_small(*, image_size: int = 224, patch: int = 16, classes: int = 1000) -> tuple[Layer, ...]:
    """DeiT-small (Touvron et al. 2021): dim 384, 6 heads, depth 12, MLP 1536, cls token."""
    if image_size % patch:
        raise ValueError(f"image_size={image_size} must be a multiple of patch={patch}")
    patches = (image_size // patch) ** 2
    tokens = patches + 1
    layers = [
        Layer(
            "patch_embed",
            "conv",
            384,
            3 * patch * patch,
            patches,
            "stem",
            kernel_area=patch * patch,
            input_positions=image_size * image_size,
        )
    ]
    for block in range(12):
        layers += _encoder_block(f"blocks.{block}", tokens, 384, 6, 1536, fused_qkv=True)
    layers.append(Layer("head", "linear", classes, 384, 1, "head"))
    return tuple(layers)


def bert_base(*, seq_len: int = 128) -> tuple[Layer, ...]:
    """BERT-base encoder (Devlin et al. 2019): 12 layers, dim 768, 12 heads, FFN 3072.

    Embedding lookups are not GEMMs; the pooler (one token) is the ``head``.
    """
    layers: list[Layer] = []
    for block in range(12):
        layers += _encoder_block(f"encoder.{block}", seq_len, 768, 12, 3072, fused_qkv=False)
    layers.append(Layer("pooler", "linear", 768, 768, 1, "head"))
    return tuple(layers)


def llama_mlp(*, tokens: int = 2048, dim: int = 4096, hidden: int = 11008) -> tuple[Layer, ...]:
    """One LLaMA-style gated MLP block (gate, up, down) over ``tokens`` tokens."""
    return (
        Layer("mlp.gate_proj", "linear", hidden, dim, tokens),
        Layer("mlp.up_proj", "linear", hidden, dim, tokens),
        Layer("mlp.down_proj", "linear", dim, hidden, tokens),
    )


#: Built-in tables: name -> (builder, description).
MODELS: dict[str, tuple[Callable[..., tuple[Layer, ...]], str]] = {
    "resnet18": (resnet18, "ResNet-18, 224x224, ImageNet head"),
    "resnet50": (resnet50, "ResNet-50 v1.5, 224x224, ImageNet head"),
    "deit-small": (deit_small, "DeiT-small/16, 224x224, 197 tokens"),
    "bert-base": (bert_base, "BERT-base encoder, seq_len 128, pooler as head"),
    "llama-mlp": (llama_mlp, "LLaMA-7B-style gated MLP (4096 -> 11008 -> 4096), 2048 tokens"),
}


def model_layers(name: str, **options: Any) -> tuple[Layer, ...]:
    """Layer table of a built-in model (``options`` go to its builder, e.g. ``seq_len``).

    Raises
    ------
    ValueError
        Unknown model name (the message lists the known ones).

    Examples
    --------
    >>> round(sum(layer.macs for layer in model_layers("resnet50")) / 1e9, 3)
    4.089
    """
    if not isinstance(name, str):
        raise TypeError(
            f"model={name!r} must be a str (a model name); built-in models: {', '.join(MODELS)}"
        )
    key = name.strip().lower().replace("_", "-")
    if key not in MODELS:
        raise ValueError(f"model={name!r} is unknown; built-in models: {', '.join(MODELS)}")
    builder = MODELS[key][0]
    accepted = set(inspect.signature(builder).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TypeError(
            f"option {unknown[0]!r} is not one of model {key!r}'s options "
            f"({', '.join(sorted(accepted)) or 'it has none'})"
        )
    for option, value in options.items():
        check_positive_integer(value, option)  # every builder option is a size or a count
    return builder(**options)


def resolve_layers(model: object, model_name: str | None = None) -> tuple[tuple[Layer, ...], str]:
    """``(layers, name)`` of a built-in model name or a sequence of :class:`Layer`."""
    if isinstance(model, str):
        return model_layers(model), model
    if not isinstance(model, Sequence) or not all(isinstance(x, Layer) for x in model):
        raise TypeError(
            f"model must be a built-in model name ({', '.join(MODELS)}) or a sequence of "
            f"nmsim.Layer, got {type(model).__name__}"
        )
    return tuple(model), model_name or "custom"


# --------------------------------------------------------------------------- torch tracing
def layers_from_torch(module: Any, sample_input: Any) -> tuple[Layer, ...]:
    """Trace ``module(sample_input)`` and return its Linear/Conv GEMMs per example.

    Forward hooks on ``nn.Linear`` and ``nn.Conv1d/2d/3d`` record the shapes;
    the batch size is ``sample_input.shape[0]`` and counts are divided by it.
    The first traced layer gets ``role="stem"`` and the last ``role="head"``
    (the ImageNet conventions). Work that is not a module GEMM (attention
    products via ``torch.matmul``/SDPA...) is measured with
    ``torch.utils.flop_counter.FlopCounterMode`` and returned as one
    ``role="other"`` matmul layer so totals stay complete.

    Raises
    ------
    ImportError
        If torch is not installed.
    ValueError
        If the module has no Linear/Conv layer, the sample has no batch dimension, or the
        untraced work cannot be expressed per example (not divisible by the batch, or
        negative); nothing is dropped silently.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(sample_input, torch.Tensor) or sample_input.dim() < 1:
        raise ValueError("sample_input must be a tensor with a leading batch dimension")
    batch = int(sample_input.shape[0])
    records: list[Layer] = []
    names = {mod: name for name, mod in module.named_modules()}

    def hook(mod: Any, inputs: tuple[Any, ...], output: Any) -> None:
        name = names.get(mod, type(mod).__name__)
        if isinstance(mod, torch.nn.Linear):
            positions = inputs[0].numel() // mod.in_features
            if positions % batch:
                raise ValueError(f"layer {name!r}: {positions} rows not divisible by batch {batch}")
            records.append(
                Layer(name, "linear", mod.out_features, mod.in_features, positions // batch)
            )
        else:
            groups = int(mod.groups)
            kernel = 1
            for size in mod.kernel_size:
                kernel *= int(size)
            spatial = 1
            for size in output.shape[2:]:
                spatial *= int(size)
            in_spatial = 1
            for size in inputs[0].shape[2:]:
                in_spatial *= int(size)
            records.append(
                Layer(
                    name,
                    "conv",
                    mod.out_channels // groups,
                    mod.in_channels // groups * kernel,
                    spatial * int(output.shape[0]) // batch,
                    count=groups,
                    kernel_area=kernel,
                    input_positions=in_spatial * int(output.shape[0]) // batch,
                )
            )

    traced = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, traced)]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            try:
                module(sample_input)
            except RuntimeError as error:
                # torch reports a sample the module cannot take (a shape mismatch) this way
                raise ValueError(
                    f"module(sample_input) failed, so nothing could be traced: {error}"
                ) from error
    finally:
        for handle in handles:
            handle.remove()
    if not records:
        raise ValueError("module has no nn.Linear / nn.Conv layer to trace")
    records[0] = Layer(**{**records[0].__dict__, "role": "stem"})
    if len(records) > 1:
        records[-1] = Layer(**{**records[-1].__dict__, "role": "head"})
    traced_macs = sum(layer.macs for layer in records) * batch
    other_macs = counter.get_total_flops() // 2 - traced_macs
    if other_macs < 0:
        raise ValueError(
            f"the traced Linear/Conv layers count {traced_macs} MACs but torch's FlopCounterMode "
            f"counts only {traced_macs + other_macs} for the whole forward; a hooked module does "
            "not run the GEMM its shape implies, so its table would be wrong"
        )
    if other_macs % batch:
        # Dropping the remainder would silently undercount; a fractional per-example count
        # cannot be a Layer. Work that does not scale with the batch (a weight-only product)
        # is the usual cause.
        raise ValueError(
            f"{other_macs} untraced MACs (matmuls outside nn.Linear/nn.Conv) are not divisible "
            f"by batch={batch}: part of the forward does not scale with the batch; trace with "
            "a sample of batch size 1"
        )
    if other_macs:
        records.append(Layer("untraced matmuls", "matmul", 1, 1, other_macs // batch, "other"))
    return tuple(records)
