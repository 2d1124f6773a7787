"""Share of the exact transposable optimum that the two greedy forms keep.

Reproduces the figures quoted in ``specs/transposable.md`` (T4)::

    PYTHONPATH=. python benchmarks/transposable_greedy_quality.py [--size 1024] [--seed 0]

Scores are ``|N(0, 1)|`` (float64, ``default_rng(seed)``), one matrix of
``size x size``; for 2:4, 4:8 and 8:16 it prints the kept sum of ``"greedy"``
(keep form) and ``"greedy-prune"`` (prune form) as a percentage of the exact
optimum, and the pruned sum of the prune form against the optimal pruned sum
(the paper's 2-approximation bound says at most 2x).
"""

from __future__ import annotations

import argparse

import numpy as np

from nmref.transposable import transposable_mask


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scores = np.abs(np.random.default_rng(args.seed).standard_normal((args.size, args.size)))
    total = float(scores.sum())
    print(f"|N(0,1)| {args.size}x{args.size}, seed {args.seed}")
    print(f"{'pattern':>7} {'keep form':>10} {'prune form':>11} {'pruned / optimal pruned':>24}")
    for n, m in [(2, 4), (4, 8), (8, 16)]:
        optimum = float(scores[transposable_mask(scores, n, m)].sum())
        keep = float(scores[transposable_mask(scores, n, m, method="greedy")].sum())
        prune = float(scores[transposable_mask(scores, n, m, method="greedy-prune")].sum())
        ratio = (total - prune) / (total - optimum)
        print(
            f"{f'{n}:{m}':>7} {100 * keep / optimum:>9.1f}% {100 * prune / optimum:>10.1f}% "
            f"{ratio:>23.3f}x"
        )


if __name__ == "__main__":
    main()
