"""Vectorised NumPy paths for small transposable-mask calls, so that they compile nothing.

A first call of a Numba kernel compiles it: about 2-3 s for the 2:4 enumeration and 1-2 s
for the greedy, where NumPy needs milliseconds for a few thousand tiles. Calls of at most
:data:`MAX_TILES` tiles with ``m <= 4`` therefore run here, and larger ones in the kernels.
Both give the same masks, bit for bit (tested against the kernels and the readable
reference): the paths differ in speed, never in answers.

* **Exact** (``m <= 4``, at most 90 patterns): every tile's kept sum under every
  canonical-order pattern of :func:`~nmref.transposable.patterns.pattern_table`, in float64,
  and the first maximum. That is the canonical optimum (spec T3) *when every sum is
  exact*: this module checks, per tile, that the binades of the scores plus the growth of a
  sum of ``n * m`` terms fit in float64's 53 bits (spec T5), and declines the whole call
  otherwise (the kernels then solve it with exact integers).
* **Greedy** (both forms, spec T4): the scan of :func:`~nmref.transposable.greedy.greedy_tile`
  run over all tiles at once, one entry rank per step; the order is a stable descending sort,
  so equal scores go to the lower flat index, as in the reference.

Complexity: exact O(T K m^2) for T tiles and K patterns; greedy O(T m^2 log m).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from nmref._validation import check_finite_scores
from nmref.patterns import Pattern
from nmref.transposable.patterns import pattern_table

__all__ = ["MAX_TILES", "exact_mask", "greedy_mask", "kernels_only"]

#: Calls with more tiles than this go to the Numba kernels (whose compile then pays off).
MAX_TILES = 1 << 14

# Enumerating K(m, n) patterns per tile is cheap up to m = 4 (K(4, 2) = 90).
_MAX_M = 4

_FLOAT64_SIGNIFICAND_BITS = 53
_FLOAT64_MAX_EXPONENT = 1024  # every finite float64 is below 2**1024


# Per thread, so that one caller's choice never reaches another thread's calls.
_LOCAL = threading.local()


@contextlib.contextmanager
def kernels_only() -> Iterator[None]:
    """Within this block every call of this thread goes to the kernels: for tests that check
    them, and for callers that call again and again (a training layer refreshing its masks),
    for whom the compile is paid once and the kernels are 10x faster (same masks)."""
    saved = getattr(_LOCAL, "kernels_only", False)
    _LOCAL.kernels_only = True
    try:
        yield
    finally:
        _LOCAL.kernels_only = saved


def _tiles(array: NDArray, m: int) -> NDArray:
    """``(T, m * m)`` copy of the tiles, row-major tile order and row-major entries."""
    rows, columns = array.shape
    return (
        array.reshape(rows // m, m, columns // m, m).transpose(0, 2, 1, 3).reshape(-1, m * m).copy()
    )


def _untile(tiles: NDArray, shape: tuple[int, int], m: int) -> NDArray:
    rows, columns = shape
    return tiles.reshape(rows // m, columns // m, m, m).transpose(0, 2, 1, 3).reshape(shape)


def _exact_float64(array: NDArray) -> NDArray[np.float64] | None:
    """``array`` as float64 without rounding, or ``None`` if a value would round."""
    kind = array.dtype.kind
    if kind == "b" or (kind == "f" and array.dtype.itemsize <= 8):
        return array.astype(np.float64)
    if kind in "iu":
        # Integers compared as integers: beyond 2**53 a float64 would round them.
        if array.size and (array.max() > 2**53 or array.min() < -(2**53)):
            return None
        return array.astype(np.float64)
    return None


def _sums_are_exact(tiles: NDArray[np.float64], terms: int) -> bool:
    """Whether every sum of up to ``terms`` entries of a tile is exact in float64."""
    magnitudes = np.abs(tiles)
    nonzero = magnitudes != 0
    significand, exponent = np.frexp(magnitudes)
    # Lowest set bit of each value: significand * 2**53 is an exact integer.
    integer = (significand * 2.0**_FLOAT64_SIGNIFICAND_BITS).astype(np.int64)
    lowest_bit = np.log2((integer & -integer).clip(min=1)).astype(np.int64)
    # Zeros take no part: sentinels far outside float64's exponents (no int64 overflow).
    low = np.where(nonzero, exponent - _FLOAT64_SIGNIFICAND_BITS + lowest_bit, 1 << 20)
    high = np.where(nonzero, exponent, -(1 << 20))
    growth = int(terms - 1).bit_length()  # a sum of `terms` values < 2**e stays < 2**(e + growth)
    top = high.max(axis=1) + growth
    span = top - low.min(axis=1)
    occupied = nonzero.any(axis=1)
    fits = (span[occupied] <= _FLOAT64_SIGNIFICAND_BITS) & (top[occupied] <= _FLOAT64_MAX_EXPONENT)
    return bool(fits.all())


def _small_call_tiles(array: NDArray, pattern: Pattern) -> NDArray[np.float64] | None:
    """The float64 tiles of a call this module takes, or ``None`` when the kernels take it."""
    m = pattern.m
    if (
        getattr(_LOCAL, "kernels_only", False)
        or m > _MAX_M
        or m == 0
        or array.size // (m * m) > MAX_TILES
    ):
        return None
    values = _exact_float64(array)
    return None if values is None else _tiles(values, m)


def exact_mask(array: NDArray, pattern: Pattern) -> NDArray[np.bool_] | None:
    """The canonical optimal mask by vectorised enumeration, or ``None`` to use the kernels.

    ``array`` holds finite scores in whole ``m x m`` tiles. ``None`` when the call is too
    large or ``m`` too wide for enumeration here, or when a float64 sum could round.
    """
    n, m = pattern
    tiles = _small_call_tiles(array, pattern)
    if tiles is None:
        return None
    # The kernels report a NaN or an infinity with this error; so does this path.
    check_finite_scores(array, "scores")
    if not _sums_are_exact(tiles, n * m):
        return None
    choices, table = pattern_table(n, m)
    # (K, m * m) 0/1 matrix of every tile pattern, in canonical order.
    patterns = choices[table].reshape(len(table), m * m)
    sums = tiles @ patterns.T.astype(np.float64)
    best = np.argmax(sums, axis=1)  # the first maximum: canonical among ties
    return _untile(patterns[best], array.shape, m)


def greedy_mask(array: NDArray, pattern: Pattern, prune_form: bool) -> NDArray[np.bool_] | None:
    """The greedy mask of every tile (keep or prune form), or ``None`` to use the kernels."""
    n, m = pattern
    tiles = _small_call_tiles(array, pattern)
    if tiles is None:
        return None
    # Descending score, lower flat index first among equals (-0.0 == 0.0 compare equal).
    order = np.argsort(-tiles, axis=1, kind="stable")
    everything = np.arange(len(tiles))
    row_count = np.zeros((len(tiles), m), dtype=np.int64)
    column_count = np.zeros((len(tiles), m), dtype=np.int64)
    if prune_form:
        kept = np.ones(tiles.shape, dtype=bool)
        # Ascending score, higher flat index first among equals: the reverse order.
        for rank in range(m * m - 1, -1, -1):
            entry = order[:, rank]
            row, column = entry // m, entry % m
            drop = (row_count[everything, row] < m - n) | (column_count[everything, column] < m - n)
            kept[everything, entry] &= ~drop
            row_count[everything, row] += drop
            column_count[everything, column] += drop
    else:
        kept = np.zeros(tiles.shape, dtype=bool)
        for rank in range(m * m):
            entry = order[:, rank]
            row, column = entry // m, entry % m
            keep = (row_count[everything, row] < n) & (column_count[everything, column] < n)
            kept[everything, entry] |= keep
            row_count[everything, row] += keep
            column_count[everything, column] += keep
    return _untile(kept, array.shape, m)
