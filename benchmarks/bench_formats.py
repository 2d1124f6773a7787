"""Benchmark: 2:4 compression of an m x k matrix into the CUTLASS sm80 format.

Compares ``nmsim.formats.compress_2to4`` / ``decompress_2to4`` with PyTorch's CPU converters
(``sparse_semi_structured_from_dense_cutlass`` / ``..._to_dense_cutlass``, torch set to one
thread) measured in the same run, after checking that both give the same bits. Prints median
seconds and ratios (> 1 means nmsim is faster). Skips torch when it is absent.

Run: ``python benchmarks/bench_formats.py [--rows 4096] [--columns 4096] [--repeats 5]``
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import median_seconds

from nmsim.formats.sparse_2to4 import compress_2to4, decompress_2to4


def pruned_matrix(rows: int, columns: int, dtype: type) -> np.ndarray:
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((rows, columns)).astype(dtype)
    order = np.argsort(rng.random((rows, columns // 4, 4)), axis=-1)
    keep = (np.argsort(order, axis=-1) < 2).reshape(rows, columns)
    return np.where(keep, weights, np.zeros((), dtype))


def bench_kind(kind: str, dtype: type, rows: int, columns: int, repeats: int) -> str:
    """One line of results for one element type."""
    dense = pruned_matrix(rows, columns, dtype)
    values, metadata = compress_2to4(dense, dtype_kind=kind)
    compress = median_seconds(lambda: compress_2to4(dense, dtype_kind=kind), repeats)
    decompress = median_seconds(lambda: decompress_2to4(values, metadata), repeats)
    line = f"{kind}: nmsim compress {compress:.3f} s, decompress {decompress:.3f} s"
    try:
        import torch
        from torch.sparse import _semi_structured_conversions as conversions
    except ImportError:
        return line + " (torch absent: no baseline)"
    torch.set_num_threads(1)
    tensor = torch.from_numpy(dense)
    torch_values, torch_metadata = conversions.sparse_semi_structured_from_dense_cutlass(tensor)
    assert np.array_equal(torch_values.numpy(), values), "values differ from torch"
    assert np.array_equal(torch_metadata.numpy(), metadata), "metadata differs from torch"
    torch_compress = median_seconds(
        lambda: conversions.sparse_semi_structured_from_dense_cutlass(tensor), repeats
    )
    torch_decompress = median_seconds(
        lambda: conversions.sparse_semi_structured_to_dense_cutlass(torch_values, torch_metadata),
        repeats,
    )
    return line + (
        f"; torch {torch_compress:.3f} s / {torch_decompress:.3f} s; ratio torch/nmsim "
        f"{torch_compress / compress:.2f}x / {torch_decompress / decompress:.2f}x (same bits)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--columns", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.rows}x{args.columns}, median of {args.repeats} runs")
    for kind, dtype in (("fp16", np.float16), ("int8", np.int8)):
        print(bench_kind(kind, dtype, args.rows, args.columns, args.repeats))


if __name__ == "__main__":
    main()
