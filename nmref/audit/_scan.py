"""The keep-greedy scan shared by several peers, vectorised over tiles.

Given, for every tile, an order of its ``m * m`` entries, keep each entry in turn
while its row and its column keep fewer than ``n``. The peers differ only in the
order (what is ranked, and which of two equal entries comes first).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from nmref.audit._blocks import flat_tiles

__all__ = ["descending_order", "keep_scan"]


def descending_order(values: NDArray, *, higher_index_first: bool = False) -> NDArray[np.intp]:
    """Per tile, flat entry indices by descending value.

    Among equal values the lower flat index comes first, or the higher one with
    ``higher_index_first`` (the reverse of a stable ascending sort).
    """
    flat = flat_tiles(values)
    if higher_index_first:
        return np.argsort(flat, axis=1, kind="stable")[:, ::-1]
    return np.argsort(-flat, axis=1, kind="stable")


def keep_scan(order: NDArray[np.intp], n: int, m: int) -> NDArray[np.bool_]:
    """Keep-greedy over each tile's ``order``: ``(tiles, m * m)`` -> ``(tiles, m, m)`` bool.

    Notes
    -----
    ``m * m`` vectorised steps over all tiles: O(tiles m^2) work.
    """
    tiles = len(order)
    every = np.arange(tiles)
    row_count = np.zeros((tiles, m), dtype=np.int64)
    column_count = np.zeros((tiles, m), dtype=np.int64)
    kept = np.zeros((tiles, m * m), dtype=bool)
    rows, columns = np.divmod(order, m)
    for step in range(m * m):
        i, j = rows[:, step], columns[:, step]
        fits = (row_count[every, i] < n) & (column_count[every, j] < n)
        kept[every, order[:, step]] = fits
        row_count[every, i] += fits
        column_count[every, j] += fits
    return kept.reshape(tiles, m, m)
