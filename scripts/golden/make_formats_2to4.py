"""Regenerate ``formats_2to4.npz``: inputs and PyTorch's CUTLASS-format outputs.

Run from the repository root with torch 2.13 installed (CPU is enough)::

    python scripts/golden/make_formats_2to4.py

The expected ``values`` and ``metadata`` come from PyTorch's own converter
(``torch.sparse._semi_structured_conversions.sparse_semi_structured_from_dense_cutlass``), not
from nmsim, so ``tests/test_formats.py::test_golden_vectors`` checks nmsim against an
independent implementation even where torch is not installed. The inputs are stored as arrays;
the generator below only decides which arrays to store.

Every input mixes, per group of 4 (pairs for fp32): exact 2-of-4 groups, under-full groups
(0 or 1 nonzero) and a few over-full groups (3 or 4 nonzeros, which PyTorch silently drops
and nmsim reproduces with ``overfull="drop"``). Float inputs hold no signalling NaNs: PyTorch's
CPU gather quietens them (see specs/formats.md, "Differences from PyTorch").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.sparse._semi_structured_conversions import sparse_semi_structured_from_dense_cutlass

# Package data: the tests read these files through importlib.resources.
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "nmref" / "testing" / "data" / "golden"

SHAPES = {"fp16": (32, 64), "bf16": (32, 64), "fp32": (32, 32), "int8": (16, 128)}
TORCH_DTYPES = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
    "int8": torch.int8,
}


def make_input(rng: np.random.Generator, kind: str) -> np.ndarray:
    rows, columns = SHAPES[kind]
    size = 2 if kind == "fp32" else 4
    nonzeros = rng.choice([0, 1, 2, 2, 2, 2, 3, 4][: size + 4], size=(rows, columns // size))
    nonzeros = np.minimum(nonzeros, size)
    order = np.argsort(rng.random((rows, columns // size, size)), axis=-1)
    keep = np.argsort(order, axis=-1) < nonzeros[..., None]
    if kind == "int8":
        elements = rng.choice(np.r_[-128:0, 1:128], size=(rows, columns)).astype(np.int8)
    elif kind == "fp32":
        elements = rng.standard_normal((rows, columns)).astype(np.float32)
    else:
        elements = rng.standard_normal((rows, columns)).astype(np.float32)
        elements[0, :3] = [np.inf, -np.inf, np.nan]
        elements = elements.astype(np.float16)
    if kind == "bf16":
        as_float = elements.astype(np.float32)
        return torch.from_numpy(as_float).to(torch.bfloat16).view(torch.int16).numpy().view(
            np.uint16
        ) * keep.reshape(rows, columns)
    return np.where(keep.reshape(rows, columns), elements, np.zeros((), elements.dtype))


def main() -> None:
    rng = np.random.default_rng(20260702)
    arrays: dict[str, np.ndarray] = {}
    for kind in SHAPES:
        dense = make_input(rng, kind)
        tensor = torch.from_numpy(dense.view(np.int16) if kind == "bf16" else dense)
        if kind == "bf16":
            tensor = tensor.view(torch.bfloat16)
        values, metadata = sparse_semi_structured_from_dense_cutlass(tensor)
        if kind == "bf16":
            values = values.view(torch.int16)
        arrays[f"{kind}/dense"] = dense
        arrays[f"{kind}/values"] = values.numpy()
        arrays[f"{kind}/metadata"] = metadata.numpy()
    out = GOLDEN_DIR / "formats_2to4.npz"
    np.savez_compressed(out, **arrays)
    print(f"wrote {out} with torch {torch.__version__}")


if __name__ == "__main__":
    main()
