"""Tiles of a transposable mask: iterating over them, and scaling one to exact integers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["Tile", "dyadic", "exact_integer_tile", "iter_tiles", "kept_total", "rounded"]

#: One ``m x m`` tile of exact integer scores, row by row.
Tile = Sequence[Sequence[int]]


def exact_integer_tile(tile: ArrayLike) -> tuple[list[list[int]], int]:
    """Scale a tile of finite scores to exact Python integers.

    Returns ``(units, exponent)`` with ``tile == units * 2**exponent`` exactly.
    Every finite float is a dyadic rational, so one power of two turns the whole
    tile into integers without rounding; sums and comparisons of units are then
    exact, and scaling by a positive constant changes neither the optimum nor
    which masks tie.

    Examples
    --------
    >>> exact_integer_tile([[0.5, 0.25], [1.0, 0.0]])
    ([[2, 1], [4, 0]], -2)
    """
    array = np.asarray(tile)
    if array.dtype.kind in "biu":
        return [[int(x) for x in row] for row in array], 0
    fractions = [[Fraction(float(x)) for x in row] for row in array]
    denominator = max((f.denominator for row in fractions for f in row), default=1)
    units = [[int(f * denominator) for f in row] for row in fractions]
    return units, -(denominator.bit_length() - 1)


def iter_tiles(array: NDArray, m: int) -> Iterator[tuple[int, int, NDArray]]:
    """Yield ``(tile_row, tile_column, tile)`` in row-major tile order."""
    for tile_row in range(array.shape[0] // m):
        for tile_column in range(array.shape[1] // m):
            r0, c0 = tile_row * m, tile_column * m
            yield tile_row, tile_column, array[r0 : r0 + m, c0 : c0 + m]


def kept_total(units: Tile, kept: ArrayLike) -> int:
    """Exact kept sum of one tile: the ``units`` where ``kept`` is true, as a Python int.

    ``kept`` is any ``m x m`` boolean tile (nested lists or an array).
    """
    m = len(units)
    return sum(units[i][j] for i in range(m) for j in range(m) if kept[i][j])  # type: ignore[index]


def dyadic(units: int, exponent: int) -> Fraction:
    """``units * 2**exponent`` as an exact rational (the value a tile's units stand for)."""
    return Fraction(int(units)) * Fraction(2) ** int(exponent)


def rounded(value: Fraction | int) -> float:
    """An exact rational rounded once to float64, to +-inf beyond float64's range.

    IEEE round-to-nearest, as ``float()`` rounds, except that a value whose rounding
    overflows becomes ``inf`` or ``-inf`` instead of raising ``OverflowError`` (a sum of
    finite float64 scores can exceed 1.8e308). Callers that must report the value
    refuse the infinity themselves (spec T6).

    Examples
    --------
    >>> rounded(Fraction(1, 3)) == 1 / 3, rounded(2 * Fraction(1.7e308))
    (True, inf)
    """
    try:
        return float(value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")
