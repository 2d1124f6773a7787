"""Obviously-correct oracles used by the tests (slow, by design)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np


def exact_value(x: object) -> Fraction | int:
    """A score as an exact rational (floats are binary fractions), for exact sums."""
    if isinstance(x, np.bool_ | bool):
        return int(x)
    if isinstance(x, np.integer | int):
        return int(x)
    return Fraction(float(x))


def brute_force_group(scores: np.ndarray, n: int) -> np.ndarray:
    """Best n-subset of one finite group by enumerating all C(m, n) subsets.

    Subsets are visited in lexicographic order and replaced only on a strictly
    larger exact sum, so the lexicographically smallest optimal subset wins:
    that is the "lower index wins" tie rule.
    """
    m = len(scores)
    values = [exact_value(x) for x in scores]
    best: tuple[int, ...] | None = None
    best_sum: Fraction | int | None = None
    for subset in itertools.combinations(range(m), n):
        total = sum((values[i] for i in subset), start=0)
        if best_sum is None or total > best_sum:
            best, best_sum = subset, total
    mask = np.zeros(m, dtype=bool)
    mask[list(best or ())] = True
    return mask


def brute_force_mask(scores: np.ndarray, n: int, m: int) -> np.ndarray:
    """Brute-force N:M mask along the last axis of a 2-D finite array."""
    rows, columns = scores.shape
    mask = np.zeros(scores.shape, dtype=bool)
    for row in range(rows):
        for start in range(0, columns, m):
            mask[row, start : start + m] = brute_force_group(scores[row, start : start + m], n)
    return mask
