"""Benchmark the torch path on one device: masks and the Bi-Mask search, with baselines.

Each row is a median over ``--repeats`` runs (after one warm-up) measured in
this run, with a baseline from the same run:

* ``nm_mask`` 2:4 / 4:8 (rank counting) vs ``torch.topk`` on the same device
  (the baseline is *not* tie-compatible with the spec; it is the speed bar);
* ``magnitude_mask`` on bfloat16 vs float32;
* transposable masks (exact 2:4 by batched enumeration, greedy 4:8, exact 4:8 by the
  lockstep min-cost flow on accelerators) vs the 1-D mask;
* Bi-Mask ``score_permutations`` (K candidates, batched) vs nmref's Numba
  kernel on the CPU.

Run: ``python benchmarks/bench_torch.py --device cuda --size 4096``
(``--device cpu --size 1024`` for a quick CPU run). On CUDA the timings
synchronise the device before and after each call.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from _timing import median_seconds

import nmref.bimask
import nmsim.torch as nt
from nmsim.torch import bimask, transposable


def timed(function, device: torch.device, repeats: int) -> float:
    """Median wall time of ``function()`` in seconds (one warm-up call first)."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return median_seconds(function, repeats, sync=sync)


def topk_mask(scores: torch.Tensor, n: int, m: int) -> torch.Tensor:
    groups = scores.reshape(-1, m)
    mask = torch.zeros(groups.shape, dtype=torch.bool, device=scores.device)
    return mask.scatter_(1, torch.topk(groups, n, dim=1).indices, True).reshape(scores.shape)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=100)
    parser.add_argument(
        "--exact-on-cpu", action="store_true", help="also time exact 4:8 on the CPU (slow)"
    )
    parser.add_argument(
        "--cpu-baseline-max", type=int, default=4096, help="skip the CPU Bi-Mask baseline above"
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    generator = torch.Generator(device="cpu").manual_seed(0)
    size = args.size
    weights = torch.randn(size, size, generator=generator).to(device)
    magnitudes = weights.abs()
    print(f"torch {torch.__version__}, device {device}, {size}x{size}, median of {args.repeats}")
    print(f"{'workload':44s} {'ours s':>10s} {'baseline s':>11s} {'ratio':>7s}  baseline")
    rows = []
    for n, m in ((2, 4), (4, 8)):
        ours = timed(lambda n=n, m=m: nt.nm_mask(magnitudes, n, m), device, args.repeats)
        base = timed(lambda n=n, m=m: topk_mask(magnitudes, n, m), device, args.repeats)
        rows.append((f"nm_mask {n}:{m} float32", ours, base, "torch.topk (same device)"))
    bf16 = weights.to(torch.bfloat16)
    ours = timed(lambda: nt.magnitude_mask(bf16, 2, 4), device, args.repeats)
    base = timed(lambda: nt.magnitude_mask(weights, 2, 4), device, args.repeats)
    rows.append(("magnitude_mask 2:4 bfloat16", ours, base, "same on float32"))
    ours = timed(lambda: transposable.transposable_mask(magnitudes, 2, 4), device, args.repeats)
    base = timed(lambda: nt.magnitude_mask(weights, 2, 4), device, args.repeats)
    rows.append(("transposable exact 2:4 (90 patterns)", ours, base, "1-D magnitude_mask 2:4"))
    ours = timed(
        lambda: transposable.transposable_mask(magnitudes, 4, 8, method="greedy"),
        device,
        args.repeats,
    )
    base = timed(lambda: nt.magnitude_mask(weights, 4, 8), device, args.repeats)
    rows.append(("transposable greedy 4:8", ours, base, "1-D magnitude_mask 4:8"))
    if device.type != "cpu" or args.exact_on_cpu:
        ours = timed(lambda: transposable.transposable_mask(magnitudes, 4, 8), device, 1)
        rows.append(
            ("transposable exact 4:8 (lockstep flow)", ours, base, "1-D magnitude_mask 4:8")
        )

    forward = nt.magnitude_mask(weights, 2, 4)
    rng = np.random.default_rng(0)
    candidates = np.stack([rng.permutation(size) for _ in range(args.candidates)])
    candidates_device = torch.from_numpy(candidates).to(device)
    forward_host = forward.cpu().numpy()
    ours = timed(
        lambda: bimask.score_permutations(forward, candidates_device, 2, 4), device, args.repeats
    )
    got = bimask.score_permutations(forward, candidates_device, 2, 4).cpu().numpy()
    if size <= args.cpu_baseline_max:
        base = timed(
            lambda: nmref.bimask.score_permutations(forward_host, candidates, 2, 4),
            torch.device("cpu"),
            args.repeats,
        )
        expected = nmref.bimask.score_permutations(forward_host, candidates, 2, 4)
        assert np.array_equal(got, expected), "torch and nmref Bi-Mask scores differ"
    else:
        base = float("nan")  # the serial CPU kernel would take minutes at this size
    rows.append((f"bimask score {args.candidates} candidates 2:4", ours, base, "nmref Numba (CPU)"))
    for name, ours, base, baseline in rows:
        ratio = f"{base / ours:7.2f}x" if base == base else "      -"
        print(f"{name:44s} {ours:10.4f} {base:11.4f} {ratio}  {baseline}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
