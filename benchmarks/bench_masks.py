"""Benchmark: 1-D N:M magnitude masks of a 4096 x 4096 float32 matrix.

Compares ``nmref.magnitude_mask`` (Numba) with two baselines measured in the
same run: a naive NumPy ``argsort`` implementation and a ``torch.topk``-based
one (CPU, skipped when torch is absent). Prints median seconds, GB/s of input
and ratios. Each implementation runs single-threaded (``NUMBA_NUM_THREADS``
is irrelevant: the kernel is serial; torch is set to one thread).

Run: ``python benchmarks/bench_masks.py [--size 4096] [--repeats 7]``
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from _timing import median_seconds

import nmref


def numpy_argsort_mask(weights: np.ndarray, n: int, m: int) -> np.ndarray:
    """Naive baseline: stable argsort of -|w| per group, keep the first n."""
    groups = np.abs(weights).reshape(-1, m)
    order = np.argsort(-groups, axis=1, kind="stable")
    mask = np.zeros(groups.shape, dtype=bool)
    np.put_along_axis(mask, order[:, :n], True, axis=1)
    return mask.reshape(weights.shape)


def make_torch_topk_mask() -> Callable[[np.ndarray, int, int], np.ndarray] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)

    def torch_topk_mask(weights: np.ndarray, n: int, m: int) -> np.ndarray:
        groups = torch.from_numpy(weights).abs().reshape(-1, m)
        kept = torch.topk(groups, n, dim=1).indices
        mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, kept, True)
        return mask.reshape(weights.shape).numpy()

    return torch_topk_mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((args.size, args.size)).astype(np.float32)
    gigabytes = weights.nbytes / 1e9
    implementations: dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
        "nmref.magnitude_mask": lambda w, n, m: nmref.magnitude_mask(w, n, m),
        "numpy argsort (naive)": numpy_argsort_mask,
    }
    torch_topk = make_torch_topk_mask()
    if torch_topk is not None:
        implementations["torch.topk (CPU, 1 thread)"] = torch_topk

    print(f"{args.size}x{args.size} float32, {gigabytes * 1e3:.0f} MB, median of {args.repeats}")
    for n, m in ((2, 4), (4, 8)):
        reference = nmref.magnitude_mask(weights, n, m)
        timings = {}
        for name, function in implementations.items():
            result = function(weights, n, m)
            # Random normal floats have no ties, so every correct method agrees.
            agrees = bool(np.array_equal(result, reference))
            timings[name] = median_seconds(
                lambda f=function, n=n, m=m: f(weights, n, m), args.repeats
            )
            print(
                f"  {n}:{m}  {name:28s} {timings[name]:8.4f} s  "
                f"{gigabytes / timings[name]:6.2f} GB/s  same mask: {agrees}"
            )
        ours = timings["nmref.magnitude_mask"]
        for name, seconds in timings.items():
            if name != "nmref.magnitude_mask":
                print(f"  {n}:{m}  speedup of nmref over {name}: {seconds / ours:.1f}x")


if __name__ == "__main__":
    main()
