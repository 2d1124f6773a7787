"""Numba kernels for the Bi-Mask permutation search (:mod:`nmref.bimask`).

Compiled lazily on first call. Every jitted callee lives in this file, so
``cache=True`` cannot serve a stale kernel. No ``fastmath``, no ``parallel``:
the kernels add small integers and must return exactly what the NumPy
reference in :mod:`nmref.bimask` returns (:mod:`~nmref.bimask.scores`,
:mod:`~nmref.bimask.local_search`, :mod:`~nmref.bimask.greedy`).

Data layout shared by all kernels
---------------------------------
``rows`` is a C-contiguous ``uint8`` array of shape ``(out_channels, width)``:
row ``o`` holds the forward mask of output channel ``o`` over every column of
every backward block it can fall in (for convolution weights in the
``"channels"`` layout, the kernel taps are concatenated). A backward block is
``m`` consecutive *permuted* rows of one column; its count is the number of
forward survivors in it. ``criterion`` 0 scores ``min(count, n)`` per block
("kept"), 1 scores ``count <= n`` per block ("eligible").
"""

from __future__ import annotations

import numba
import numpy as np

CRITERION_KEPT = 0
CRITERION_ELIGIBLE = 1


@numba.njit(cache=True, nogil=True)
def _block_value(count, n, criterion):  # pragma: no cover - compiled
    if criterion == 0:
        return count if count < n else n
    return 1 if count <= n else 0


@numba.njit(cache=True, nogil=True)
def score_candidates(rows, permutations, n, m, criterion, scores, counts):  # pragma: no cover
    """Score every candidate permutation; ``scores[k]`` gets candidate ``k``'s score.

    ``counts`` is an int32 buffer of ``width`` entries, allocated by the caller: on a
    cold cache an ``np.empty`` here would be one more function to compile.
    Complexity O(num_candidates * out_channels * width) additions of bytes.
    """
    num_rows, width = rows.shape
    num_blocks = num_rows // m
    for k in range(permutations.shape[0]):
        total = 0
        for block in range(num_blocks):
            first = rows[permutations[k, block * m]]
            for c in range(width):
                counts[c] = first[c]
            for j in range(1, m):
                row = rows[permutations[k, block * m + j]]
                for c in range(width):
                    counts[c] += row[c]
            for c in range(width):
                total += _block_value(counts[c], n, criterion)
        scores[k] = total
    return scores


@numba.njit(cache=True, nogil=True)
def block_counts(rows, permutation, m):  # pragma: no cover - compiled
    """Forward-survivor count of every (block, column) for one permutation."""
    num_rows, width = rows.shape
    num_blocks = num_rows // m
    counts = np.zeros((num_blocks, width), dtype=np.int32)
    for block in range(num_blocks):
        for j in range(m):
            row = rows[permutation[block * m + j]]
            for c in range(width):
                counts[block, c] += row[c]
    return counts


@numba.njit(cache=True, nogil=True)
def swap_gain(rows, counts, a, block_a, b, block_b, n, criterion):  # pragma: no cover
    """Change of the score if rows ``a`` (in ``block_a``) and ``b`` (in ``block_b``) swap."""
    row_a = rows[a]
    row_b = rows[b]
    gain = 0
    for c in range(rows.shape[1]):
        difference = np.int32(row_b[c]) - np.int32(row_a[c])
        if difference != 0:
            count_a = counts[block_a, c]
            count_b = counts[block_b, c]
            gain += (
                _block_value(count_a + difference, n, criterion)
                + _block_value(count_b - difference, n, criterion)
                - _block_value(count_a, n, criterion)
                - _block_value(count_b, n, criterion)
            )
    return gain


@numba.njit(cache=True, nogil=True)
def swap_local_search(rows, permutation, m, n, criterion, first, second):  # pragma: no cover
    """First-improvement swap search over the pre-drawn position pairs.

    ``permutation`` is modified in place. For every pair ``(first[t],
    second[t])`` of positions in different blocks, the two rows swap places if
    that strictly raises the score. Returns the number of accepted swaps.
    Complexity O(out_channels * width + len(first) * width).
    """
    counts = block_counts(rows, permutation, m)
    accepted = 0
    for t in range(first.shape[0]):
        position_a = first[t]
        position_b = second[t]
        block_a = position_a // m
        block_b = position_b // m
        if block_a == block_b:
            continue
        a = permutation[position_a]
        b = permutation[position_b]
        if swap_gain(rows, counts, a, block_a, b, block_b, n, criterion) > 0:
            row_a = rows[a]
            row_b = rows[b]
            for c in range(rows.shape[1]):
                difference = np.int32(row_b[c]) - np.int32(row_a[c])
                counts[block_a, c] += difference
                counts[block_b, c] -= difference
            permutation[position_a] = b
            permutation[position_b] = a
            accepted += 1
    return accepted


@numba.njit(cache=True, nogil=True)
def greedy_blocks(rows, order, m, n, criterion, window, permutation):  # pragma: no cover
    """Fill backward blocks one by one, each slot with the best of the next ``window`` rows.

    ``order`` is the visiting order of the rows. The first unused row in
    ``order`` opens a block; every further slot takes, among the first
    ``window`` unused rows in ``order``, the one whose addition raises the
    block's score most (ties: earliest in ``order``). Writes ``permutation``.
    Complexity O(out * window * width).
    """
    num_rows, width = rows.shape
    used = np.zeros(num_rows, dtype=np.bool_)
    counts = np.zeros(width, dtype=np.int32)
    position = 0
    head = 0
    for _ in range(num_rows // m):
        while used[order[head]]:
            head += 1
        opener = order[head]
        used[opener] = True
        permutation[position] = opener
        position += 1
        for c in range(width):
            counts[c] = rows[opener, c]
        for _slot in range(1, m):
            best = -1
            best_gain = np.int64(-1) << 40
            seen = 0
            k = head
            while seen < window and k < num_rows:
                candidate = order[k]
                if not used[candidate]:
                    seen += 1
                    gain = np.int64(0)
                    for c in range(width):
                        if rows[candidate, c]:
                            gain += _block_value(counts[c] + 1, n, criterion) - _block_value(
                                counts[c], n, criterion
                            )
                    if gain > best_gain:
                        best_gain = gain
                        best = candidate
                k += 1
            used[best] = True
            permutation[position] = best
            position += 1
            for c in range(width):
                counts[c] += rows[best, c]
    return permutation
