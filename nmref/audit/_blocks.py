"""Aligned ``m x m`` tiles of a matrix as one ``(tiles, m, m)`` array, and back.

Every method of the audit sees the same tiles in the same order: row-major over
the tile grid, tile ``t`` is tile ``divmod(t, C // m)`` (``specs/audit.md``, A1).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["flat_tiles", "from_blocks", "to_blocks"]


def to_blocks(matrix: NDArray, m: int) -> NDArray:
    """``(R, C)`` -> ``(R // m * C // m, m, m)``, tiles in row-major grid order (a copy)."""
    rows, columns = matrix.shape
    grid = matrix.reshape(rows // m, m, columns // m, m).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(grid).reshape(-1, m, m)


def from_blocks(blocks: NDArray, shape: tuple[int, int], m: int) -> NDArray:
    """Inverse of :func:`to_blocks` for a matrix of ``shape``."""
    rows, columns = shape
    grid = blocks.reshape(rows // m, columns // m, m, m).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(grid).reshape(rows, columns)


def flat_tiles(blocks: NDArray) -> NDArray:
    """``(tiles, m, m)`` -> ``(tiles, m * m)``, also for zero tiles."""
    return blocks.reshape(blocks.shape[0], int(np.prod(blocks.shape[1:])))
