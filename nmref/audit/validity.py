"""Which fill a transposable mask satisfies: exactly N, at most N, or neither (and where).

Spec ``specs/audit.md``, A2. A tile is **exact** when each of its ``m`` rows and
``m`` columns keeps exactly ``n``; **at most** when none keeps more than ``n`` and
some keeps fewer; **invalid** when some row or column keeps more than ``n``. The
mask is as good as its worst tile.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.audit._blocks import to_blocks
from nmref.masks import to_bool_mask
from nmref.transposable._inputs import prepare

__all__ = ["TILE_AT_MOST", "TILE_EXACT", "TILE_INVALID", "Validity", "Violation", "classify_mask"]

#: Per-tile codes of :attr:`Validity.tile_kinds`.
TILE_EXACT, TILE_AT_MOST, TILE_INVALID = 0, 1, 2

Kind = Literal["exact", "at_most", "invalid"]


class Violation(NamedTuple):
    """The first row or column of a tile that keeps more than ``n``.

    ``tile`` is the (tile row, tile column) of the grid; ``axis`` is ``"row"`` or
    ``"column"``; ``index`` counts within the tile (0 to ``m - 1``); ``kept`` is
    how many that row or column keeps.
    """

    tile: tuple[int, int]
    axis: str
    index: int
    kept: int


class Validity(NamedTuple):
    """Validity of a mask (see :func:`classify_mask`)."""

    kind: Kind
    exact_tiles: int
    at_most_tiles: int
    invalid_tiles: int
    first_violation: Violation | None
    tile_kinds: NDArray[np.int8]


def classify_mask(mask: ArrayLike, n: int, m: int) -> Validity:
    """Classify a mask as exactly-``n``, at-most-``n`` or invalid transposable ``n:m``.

    Parameters
    ----------
    mask : array_like of bool or 0/1, shape (R, C)
        ``R`` and ``C`` multiples of ``m``.
    n, m : int
        Kept per tile row and column; tile size.

    Returns
    -------
    Validity
        ``kind`` of the whole mask (``"invalid"`` if any tile is, else
        ``"at_most"`` if any tile keeps fewer than ``n`` somewhere, else
        ``"exact"``); tile counts; the first violation in row-major tile order,
        rows of a tile before its columns; per-tile codes, shape ``(R//m, C//m)``.

    Raises
    ------
    ValueError, TypeError
        If ``mask`` is not 2-D whole tiles of 0/1, or the pattern is invalid.

    Notes
    -----
    O(R C). Spec A2.

    Examples
    --------
    >>> classify_mask([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 0]], 2, 4).kind
    'at_most'
    """
    array, pattern = prepare(mask, n, m, "mask")
    kept = to_bool_mask(array, "mask")
    blocks = to_blocks(kept, pattern.m)
    row_counts = blocks.sum(axis=2)  # (tiles, m)
    column_counts = blocks.sum(axis=1)
    over = (row_counts > pattern.n).any(axis=1) | (column_counts > pattern.n).any(axis=1)
    under = (row_counts < pattern.n).any(axis=1) | (column_counts < pattern.n).any(axis=1)
    codes = np.where(over, TILE_INVALID, np.where(under, TILE_AT_MOST, TILE_EXACT)).astype(np.int8)
    violation = None
    if over.any():
        t = int(np.flatnonzero(over)[0])
        tile = divmod(t, kept.shape[1] // pattern.m)
        bad_rows = np.flatnonzero(row_counts[t] > pattern.n)
        if bad_rows.size:
            violation = Violation(tile, "row", int(bad_rows[0]), int(row_counts[t, bad_rows[0]]))
        else:
            j = int(np.flatnonzero(column_counts[t] > pattern.n)[0])
            violation = Violation(tile, "column", j, int(column_counts[t, j]))
    invalid = int(over.sum())
    at_most = int((under & ~over).sum())
    exact = len(codes) - invalid - at_most
    kind: Kind = "invalid" if invalid else ("at_most" if at_most else "exact")
    grid = codes.reshape(kept.shape[0] // pattern.m, kept.shape[1] // pattern.m)
    return Validity(kind, exact, at_most, invalid, violation, grid)
