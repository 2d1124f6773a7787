"""Cost of the BAME layer's weight gradient on the torch path (specs/torch.md §3, "bame").

Times, in the same run (medians), the spec's gathered dW at the kept entries of a 2:4 mask
(``bame_weight_gradient="gathered"``) against the dense ``dY^T X`` that ``"masked_dense"`` and
SR-STE compute, and prints the ratio.

    PYTHONPATH=. python benchmarks/bench_bame_weight_gradient.py [--size 1024] [--batch 256]
"""

from __future__ import annotations

import argparse

import torch
from _timing import median_seconds

import nmsim.torch as nt
from nmsim.torch.functions import gathered_weight_gradient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, args.size, generator=generator).to(args.device)
    dy = torch.randn(args.batch, args.size, generator=generator).to(args.device)
    weight = torch.randn(args.size, args.size, generator=generator).to(args.device)
    positions = nt.magnitude_mask(weight, 2, 4)

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    gathered = median_seconds(
        lambda: gathered_weight_gradient(x, dy, positions), args.repeats, warm_up=False, sync=sync
    )
    dense = median_seconds(lambda: dy.T @ x, args.repeats, warm_up=False, sync=sync)
    print(
        f"{args.size}x{args.size} 2:4, batch {args.batch}, {args.device}: "
        f"gathered {gathered:.4f} s, "
        f"dense {dense:.4f} s, ratio {gathered / dense:.1f}x (medians of {args.repeats})"
    )


if __name__ == "__main__":
    main()
