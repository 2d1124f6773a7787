"""Greedy transposable masks of one tile (Hubara et al. 2021, Sec. 4.2), in plain Python.

Keep form (their code) and prune form (the paper's edge cover); ``specs/transposable.md``
fixes both. :mod:`nmref.transposable._greedy_kernels` runs the same scans in Numba.
"""

from __future__ import annotations

from numpy.typing import NDArray

from nmref._ordering import Descending
from nmref.patterns import Pattern

__all__ = ["greedy_tile"]


def greedy_tile(tile: NDArray, pattern: Pattern, prune_form: bool) -> list[list[bool]]:
    """Greedy of Hubara et al. Sec. 4.2 in keep form or prune form (see the spec)."""
    n, m = pattern
    # Descending score, lower flat index first among equals; exact comparisons.
    order = sorted(range(m * m), key=lambda k: (Descending(tile[k // m, k % m]), k))
    row_count = [0] * m
    column_count = [0] * m
    if not prune_form:
        kept = [[False] * m for _ in range(m)]
        for k in order:
            i, j = divmod(k, m)
            if row_count[i] < n and column_count[j] < n:
                kept[i][j] = True
                row_count[i] += 1
                column_count[j] += 1
        return kept
    kept = [[True] * m for _ in range(m)]
    for k in reversed(order):  # ascending score, higher flat index first among equals
        i, j = divmod(k, m)
        if row_count[i] < m - n or column_count[j] < m - n:
            kept[i][j] = False
            row_count[i] += 1
            column_count[j] += 1
    return kept
