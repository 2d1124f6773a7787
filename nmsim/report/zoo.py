"""Built-in model shapes for ``nmsim report``, with synthetic, clearly labelled weights.

The zoo knows **shapes only**: the GEMM weights of ResNet-50 (torchvision
names), BERT-base (Hugging Face names) and one LLaMA-7B-style MLP block. Their
values are synthetic: N(0, 1/fan_in) drawn from a generator seeded by the report
seed and the tensor name (``zlib.crc32``), so each tensor can be made alone, in
any process, with the same values. Masks of random weights say nothing about a
trained model's accuracy; the report labels these runs ``synthetic``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["ZOO", "ZooModel", "synthetic_weight"]


@dataclass(frozen=True)
class ZooModel:
    """A named list of weight shapes (``[out, in]`` or ``[out, in, kh, kw]``)."""

    name: str
    description: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...]


def _resnet50() -> tuple[tuple[str, tuple[int, ...]], ...]:
    shapes: list[tuple[str, tuple[int, ...]]] = [("conv1.weight", (64, 3, 7, 7))]
    in_channels = 64
    for stage, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512)), start=1):
        for block in range(blocks):
            prefix = f"layer{stage}.{block}"
            shapes += [
                (f"{prefix}.conv1.weight", (width, in_channels, 1, 1)),
                (f"{prefix}.conv2.weight", (width, width, 3, 3)),
                (f"{prefix}.conv3.weight", (4 * width, width, 1, 1)),
            ]
            if block == 0:
                shapes.append((f"{prefix}.downsample.0.weight", (4 * width, in_channels, 1, 1)))
            in_channels = 4 * width
    shapes.append(("fc.weight", (1000, 2048)))
    return tuple(shapes)


def _bert_base() -> tuple[tuple[str, tuple[int, ...]], ...]:
    shapes: list[tuple[str, tuple[int, ...]]] = []
    for layer in range(12):
        prefix = f"encoder.layer.{layer}"
        for part in ("query", "key", "value"):
            shapes.append((f"{prefix}.attention.self.{part}.weight", (768, 768)))
        shapes += [
            (f"{prefix}.attention.output.dense.weight", (768, 768)),
            (f"{prefix}.intermediate.dense.weight", (3072, 768)),
            (f"{prefix}.output.dense.weight", (768, 3072)),
        ]
    shapes.append(("pooler.dense.weight", (768, 768)))
    return tuple(shapes)


ZOO: dict[str, ZooModel] = {
    "resnet50": ZooModel(
        "resnet50",
        "ResNet-50 (He et al. 2016) convolution and fc weights, torchvision names",
        _resnet50(),
    ),
    "bert-base": ZooModel(
        "bert-base",
        "BERT-base encoder (12 layers, d=768, ffn 3072) GEMM weights, Hugging Face names",
        _bert_base(),
    ),
    "llama-mlp": ZooModel(
        "llama-mlp",
        "one LLaMA-7B-style SwiGLU MLP block (d=4096, hidden 11008)",
        (
            ("mlp.gate_proj.weight", (11008, 4096)),
            ("mlp.up_proj.weight", (11008, 4096)),
            ("mlp.down_proj.weight", (4096, 11008)),
        ),
    ),
}


def synthetic_weight(name: str, shape: tuple[int, ...], seed: int) -> NDArray[np.float32]:
    """Seeded N(0, 1/fan_in) float32 weight for a zoo tensor (fan_in = ``prod(shape[1:])``).

    The generator is ``default_rng([seed, crc32(name)])``: the same values in
    every process and every order of evaluation.
    """
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    fan_in = int(np.prod(shape[1:]))
    weight = rng.standard_normal(shape, dtype=np.float32)
    weight *= np.float32(1.0 / np.sqrt(fan_in))
    return weight
