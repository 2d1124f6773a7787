"""Peers: NVIDIA apex ASP's 2-D masks, ``mn_2d_greedy`` and ``m4n2_2d_best``.

Follows the description of NVIDIA/apex ``apex/contrib/sparsity/sparse_masklib.py``
(read for this audit, not copied). Both score entries by ``|w|``; on the audit's
non-negative scores that is the identity.

``mn_2d_greedy`` (:func:`apex_greedy_mask`, any ``n:m``; ``m4n2_2d_greedy`` is its
2:4 call): per tile, ``argsort`` of the 16 (``m * m``) magnitudes ascending, then
visited from the last position down, keeping an entry unless its row or column
already keeps ``n``. The keep-greedy of Hubara et al.'s code again, with one
difference: NumPy's default sort of so few elements is an insertion sort, which
is stable, so **equal values are visited higher flat index first** (nmref's
greedy visits the lower first). Uncertain: a NumPy build that dispatches
``argsort`` to an unstable SIMD sort could order ties otherwise; and for ``m >= 8``
(64 or more entries) NumPy's default sort is not stable, so apex's tie order is
unspecified there and "higher index first" is one of its possible outcomes. apex leaves rows
and columns outside whole tiles dense; the audit only has whole tiles.

``m4n2_2d_best`` (:func:`apex_best_mask`, 2:4): the 90 valid 4x4 patterns, the
kept sum of each as a float32 matrix product of ``|w|`` (apex casts to float32)
with the patterns, and the first maximum (``torch.argmax``). The patterns are in
the order apex builds them: the six 2-of-4 rows from a Python ``set`` of
permutations, that list twice, a ``set`` of all 4-permutations of those twelve
rows, filtered to column sums <= 2. That order comes from CPython's set
iteration, so **ties go to an arbitrary (though fixed) pattern, not to the
lexicographic one**; and float32 sums can also miss the exact optimum where two
patterns' sums differ by less than a float32 rounding. Uncertain: torch's CPU
matmul may add in another order than the left-to-right float32 sum used here.
At HEAD apex's function calls an undefined ``reshape_2d`` (NVIDIA/apex#991); the
audit follows its evident intent (aligned 4x4 tiles).
"""

from __future__ import annotations

from functools import cache
from itertools import permutations

import numpy as np
from numpy.typing import NDArray

from nmref.audit._blocks import flat_tiles, from_blocks, to_blocks
from nmref.audit._scan import descending_order, keep_scan

__all__ = ["apex_best_mask", "apex_greedy_mask", "apex_pattern_order", "float32_pattern_sums"]


def apex_greedy_mask(scores: NDArray, n: int, m: int) -> NDArray[np.bool_]:
    """apex ``mn_2d_greedy`` on every aligned ``m x m`` tile (ties: higher flat index first).

    Notes
    -----
    O(m^2) vectorised steps over the tiles.

    Examples
    --------
    Three equal values in row 0: apex keeps the two with the higher column.

    >>> tile = np.array([[5, 5, 5, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    >>> apex_greedy_mask(tile, 2, 4)[0]
    array([False,  True,  True, False])
    """
    magnitudes = np.abs(np.asarray(scores))
    blocks = to_blocks(magnitudes, m)
    order = descending_order(blocks, higher_index_first=True)
    return from_blocks(keep_scan(order, n, m), magnitudes.shape, m)


@cache
def apex_pattern_order() -> NDArray[np.bool_]:
    """The 90 valid 2:4 4x4 patterns in the order apex's construction yields them."""
    rows = list(set(permutations([1.0, 1.0, 0.0, 0.0])))
    candidates = list(set(permutations(rows + rows, 4)))
    valid = [p for p in candidates if all(sum(p[i][j] for i in range(4)) <= 2 for j in range(4))]
    return np.array(valid, dtype=bool).reshape(len(valid), 16)


def float32_pattern_sums(blocks: NDArray, patterns: NDArray[np.bool_]) -> NDArray[np.float32]:
    """``(tiles, patterns)`` kept sums in float32, added left to right over the 16 entries."""
    values = flat_tiles(blocks).astype(np.float32)
    weights = patterns.astype(np.float32)
    sums = np.zeros((len(blocks), len(patterns)), dtype=np.float32)
    for k in range(values.shape[1]):
        sums += values[:, k, None] * weights[None, :, k]
    return sums


def apex_best_mask(scores: NDArray, n: int = 2, m: int = 4) -> NDArray[np.bool_]:
    """apex ``m4n2_2d_best``: best of 90 patterns by float32 sum, first maximum in apex order.

    Examples
    --------
    All-equal tile: every pattern ties, apex takes its first pattern (not the
    lexicographically greatest, which nmref's exact method returns).

    >>> first = apex_pattern_order()[0].reshape(4, 4)
    >>> bool((apex_best_mask(np.ones((4, 4))) == first).all())
    True
    """
    if (n, m) != (2, 4):
        raise ValueError(f"apex m4n2_2d_best is defined for 2:4 only, got {n}:{m}")
    magnitudes = np.abs(np.asarray(scores))
    blocks = to_blocks(magnitudes, 4)
    patterns = apex_pattern_order()
    best = np.argmax(float32_pattern_sums(blocks, patterns), axis=1)  # first maximum
    return from_blocks(patterns[best].reshape(-1, 4, 4), magnitudes.shape, 4)
