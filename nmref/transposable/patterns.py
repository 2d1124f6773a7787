"""Transposable tile patterns: which masks are valid, all of them in canonical order, brute force.

The canonical order (descending row-major keep bits: the pattern that keeps the
lowest flat indices first) is also the tie rule: the first maximum in this order
is the canonical optimum, which is what :func:`brute_tile` returns.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_tiled_matrix
from nmref.masks import is_nm
from nmref.patterns import Pattern, check_pattern
from nmref.transposable._inputs import check_fill

__all__ = [
    "BRUTE_AT_MOST_MAX_M",
    "BRUTE_MAX_M",
    "at_most_pattern_table",
    "brute_tile",
    "brute_tile_at_most",
    "is_transposable",
    "pattern_table",
    "transposable_patterns",
]

# The brute-force table holds K(m, n) patterns; K(6, 3) = 297200 is the largest
# that is still practical (K(7, 3) = 26.9 million, K(8, 4) = 1.2e11).
BRUTE_MAX_M = 6

# The at-most-n table holds every 0/1 tile with at most n per row and column:
# up to 2**16 = 65536 tiles for m = 4 (n = 4), which is still instant; m = 5
# would be up to 2**25.
BRUTE_AT_MOST_MAX_M = 4


@functools.lru_cache(maxsize=32)
def pattern_table(n: int, m: int) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """Row patterns and tile patterns (as row-pattern indices) in canonical order.

    Row patterns are the ``comb(m, n)`` kept-index tuples in lexicographic
    order, (0, 1) < (0, 2) < ... which is *descending* order of their keep bits
    read left to right. Tile patterns are ordered lexicographically by their row
    pattern indices, i.e. by descending row-major keep bits: the first maximum
    in this order is the canonical optimum.
    """
    row_choices = list(itertools.combinations(range(m), n))
    choice_masks = np.zeros((len(row_choices), m), dtype=bool)
    for index, choice in enumerate(row_choices):
        choice_masks[index, list(choice)] = True
    # Breadth-first over rows, vectorised: expanding every partial pattern by
    # every row choice in order keeps the lexicographic order of the result.
    choice_counts = choice_masks.astype(np.int64)
    table = np.zeros((1, 0), dtype=np.int64)
    counts = np.zeros((1, m), dtype=np.int64)
    for row in range(m - 1):
        rows_left_after = m - row - 1
        new_counts = (counts[:, None, :] + choice_counts[None, :, :]).reshape(-1, m)
        parents = np.repeat(np.arange(len(table)), len(row_choices))
        choices = np.tile(np.arange(len(row_choices)), len(table))
        # Every column must stay <= n and still be able to reach n.
        feasible = ((new_counts <= n) & (n - new_counts <= rows_left_after)).all(axis=1)
        table = np.hstack([table[parents[feasible]], choices[feasible, None]])
        counts = new_counts[feasible]
    # The last row is forced: it fills every column up to n.
    if m:
        powers = 1 << np.arange(m, dtype=np.int64)
        index_of_bits = np.full(1 << m, -1, dtype=np.int64)
        index_of_bits[choice_counts @ powers] = np.arange(len(row_choices))
        last = index_of_bits[(n - counts) @ powers]
        table = np.hstack([table, last[:, None]])
    table = np.ascontiguousarray(table, dtype=np.int64)
    choice_masks.setflags(write=False)
    table.setflags(write=False)
    return choice_masks, table


@functools.lru_cache(maxsize=32)
def at_most_pattern_table(n: int, m: int) -> NDArray[np.bool_]:
    """Every ``m x m`` 0/1 tile keeping at most ``n`` per row and column, canonical order.

    Canonical order is the same as for the exact fill: descending row-major
    keep bits (the tile that keeps the lowest flat indices first). Rows are the
    subsets of at most ``n`` columns in descending order of their bits read left
    to right (column 0 most significant), tiles are built row by row keeping
    that order, and tiles whose column counts exceed ``n`` are dropped.
    """
    subsets = [
        bits
        for bits in itertools.product((True, False), repeat=m)  # descending bit order
        if sum(bits) <= n
    ]
    rows = np.array(subsets, dtype=bool).reshape(len(subsets), m)
    tiles = np.zeros((1, 0, m), dtype=bool)
    counts = np.zeros((1, m), dtype=np.int64)
    for _ in range(m):
        new_counts = (counts[:, None, :] + rows[None, :, :]).reshape(-1, m)
        feasible = (new_counts <= n).all(axis=1)
        parents = np.repeat(np.arange(len(tiles)), len(rows))[feasible]
        choices = np.tile(np.arange(len(rows)), len(tiles))[feasible]
        tiles = np.concatenate([tiles[parents], rows[choices][:, None, :]], axis=1)
        counts = new_counts[feasible]
    tiles = np.ascontiguousarray(tiles)
    tiles.setflags(write=False)
    return tiles


def transposable_patterns(n: int, m: int, *, fill: str = "exact") -> NDArray[np.bool_]:
    """Every valid ``m x m`` transposable N:M tile pattern, in canonical order.

    ``fill="exact"`` (default): exactly ``n`` per row and column, ``m <= 6``.
    ``fill="at_most"``: at most ``n`` (what sparse tensor cores accept),
    ``m <= 4``; 7343 patterns for 2:4 (the all-dropped tile is the last).

    Canonical order: descending row-major keep bits (the pattern that keeps the
    lowest flat indices comes first). There are ``K(m, n)`` patterns
    (:func:`nmref.diversity.count_transposable_patterns`): 90 for 2:4.

    Raises
    ------
    ValueError
        If ``m > 6`` (``K(7, 3)`` is already 26.9 million patterns).

    Examples
    --------
    >>> patterns = transposable_patterns(2, 4)
    >>> len(patterns)
    90
    >>> patterns[0].astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 0, 0],
           [0, 0, 1, 1],
           [0, 0, 1, 1]])
    """
    pattern = check_pattern(n, m)
    check_fill(fill)
    if fill == "at_most":
        if pattern.m > BRUTE_AT_MOST_MAX_M:
            raise ValueError(
                f"m={pattern.m} is too large to enumerate at-most-n patterns "
                f"(brute force with fill='at_most' needs m <= {BRUTE_AT_MOST_MAX_M})"
            )
        return at_most_pattern_table(pattern.n, pattern.m)
    if pattern.m > BRUTE_MAX_M:
        raise ValueError(
            f"m={pattern.m} is too large to enumerate patterns (brute force needs m <= 6)"
        )
    choices, table = pattern_table(pattern.n, pattern.m)
    return choices[table]


def brute_tile_at_most(units: list[list[int]], n: int, m: int) -> tuple[list[list[bool]], int]:
    """First at-most-``n`` pattern of maximal kept sum in canonical order (exact ints)."""
    tiles = at_most_pattern_table(n, m)
    flat = [x for row in units for x in row]
    largest = max((abs(x) for x in flat), default=0)
    if largest * m * m < 2**62:
        sums = tiles.reshape(len(tiles), m * m).astype(np.int64) @ np.array(flat, dtype=np.int64)
        best_index = int(np.argmax(sums))  # first maximum
        best_sum = int(sums[best_index])
    else:  # too wide for int64: Python ints
        best_index, best_sum = 0, None
        for index, tile in enumerate(tiles.reshape(len(tiles), m * m)):
            total = sum(x for x, keep in zip(flat, tile, strict=True) if keep)
            if best_sum is None or total > best_sum:
                best_index, best_sum = index, total
    kept = tiles[best_index]
    return [[bool(kept[i, j]) for j in range(m)] for i in range(m)], int(best_sum or 0)


def brute_tile(units: list[list[int]], pattern: Pattern) -> tuple[list[list[bool]], int]:
    """First pattern of maximal kept sum in canonical order (exact ints)."""
    choices, table = pattern_table(pattern.n, pattern.m)
    best_sum = None
    best_index = 0
    for index, rows in enumerate(table):
        total = sum(units[i][j] for i in range(pattern.m) for j in np.flatnonzero(choices[rows[i]]))
        if best_sum is None or total > best_sum:
            best_sum, best_index = total, index
    rows = table[best_index]
    return [[bool(choices[rows[i]][j]) for j in range(pattern.m)] for i in range(pattern.m)], int(
        best_sum or 0
    )


def is_transposable(mask: ArrayLike, n: int, m: int, *, exact: bool = True) -> bool:
    """Whether every aligned ``m x m`` tile keeps ``n`` per row and column.

    Parameters
    ----------
    mask : array_like, shape (R, C)
        Nonzero = kept.
    exact : bool, default True
        ``True``: exactly ``n`` per tile row and column (``fill="exact"``).
        ``False``: at most ``n`` (``fill="at_most"``: what sparse tensor cores
        accept, and what keep-greedy masks satisfy; an under-full or empty tile
        row or column is valid).

    Raises
    ------
    ValueError
        If ``mask`` is not 2-D or its shape is not a multiple of ``m``.

    Examples
    --------
    >>> cyclic = np.eye(4, dtype=bool) | np.eye(4, k=1, dtype=bool) | np.eye(4, k=-3, dtype=bool)
    >>> is_transposable(cyclic, 2, 4), is_transposable(cyclic, 2, 4, exact=False)
    (True, True)
    """
    pattern = check_pattern(n, m)
    array = np.asarray(mask)
    check_tiled_matrix(array, pattern.m, "mask")
    return is_nm(array, pattern.n, pattern.m, axis=1, exact=exact) and is_nm(
        array, pattern.n, pattern.m, axis=0, exact=exact
    )
