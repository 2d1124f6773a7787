r"""The certified references of the audit: both optima of every tile, and exact gaps.

Spec ``specs/audit.md``, A3-A4.

**Exactly n.** :func:`nmref.transposable_mask` with ``method="exact"``: the
certified optimum of every tile (min-cost flow on exact integers).

**At most n, through the exact solver.** The at-most-``n`` optimum of an
``m x m`` tile ``W`` equals the exactly-``n`` optimum of the ``2m x 2m`` tile

.. math::

    \widetilde W = \begin{pmatrix} W & 0 \\ 0 & 0 \end{pmatrix},

so the fast exact kernel (pattern ``n:2m``) certifies it too. Restricting a
valid exactly-``n`` mask of :math:`\widetilde W` to its ``W`` block gives an
at-most-``n`` mask of the same kept sum (the other blocks score 0). Conversely
every at-most-``n`` mask ``S`` of ``W`` extends to an exactly-``n`` mask of
:math:`\widetilde W` that keeps nothing more of value: row ``i`` lacks
``r_i = n - (S 1)_i <= n <= m`` entries, which it takes from the zero block on
its right, cyclically over its ``m`` columns (so those columns receive
``floor`` or ``ceil`` of ``D / m`` each, ``D = sum r_i <= n m``); the columns
do the same with the zero block below; the bottom-right zero block then needs
row and column sums that are each ``n`` minus a near-uniform vector, which a
cyclic fill started at the right offset meets. Both optima are therefore equal
(tested against the readable at-most solver and brute force).

**Gaps** are computed exactly and rounded once: per tile, ``math.fsum`` of
``s * (reference - mask)`` (each product is exact, being ``s``, ``-s`` or 0),
which is the correctly rounded value of the exact difference; a non-negative
exact value never rounds below zero.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from nmref.audit._blocks import flat_tiles, from_blocks, to_blocks
from nmref.transposable import transposable_mask

__all__ = ["Optima", "exact_difference", "kept_sums", "optima"]


class Optima(NamedTuple):
    """Optimal masks and kept sums of every tile, both fills.

    Masks are ``(tiles, m, m)`` bool in the order of :func:`~nmref.audit._blocks.to_blocks`;
    sums are float64 ``(tiles,)``, exact then rounded once. The exact-fill mask is
    the canonical one; the at-most mask is *an* optimum (not the canonical at-most
    mask of ``fill="at_most"``: only its value is used).
    """

    exact_mask: NDArray[np.bool_]
    exact_value: NDArray[np.float64]
    at_most_mask: NDArray[np.bool_]
    at_most_value: NDArray[np.float64]


def optima(scores: NDArray, n: int, m: int) -> Optima:
    """Both optima of every ``m x m`` tile of ``scores`` (finite, whole tiles).

    Notes
    -----
    Two calls of the exact solver: on ``scores`` (``n:m``) and on the padded
    matrix of ``2m x 2m`` tiles (``n:2m``, four times the entries).
    """
    exact = to_blocks(transposable_mask(scores, n, m, method="exact"), m)
    blocks = to_blocks(scores, m)
    padded = np.zeros((len(blocks), 2 * m, 2 * m), dtype=scores.dtype)
    padded[:, :m, :m] = blocks
    rows, columns = scores.shape
    wide = from_blocks(padded, (2 * rows, 2 * columns), 2 * m)
    at_most = to_blocks(transposable_mask(wide, n, 2 * m, method="exact"), 2 * m)[:, :m, :m]
    return Optima(
        exact, kept_sums(blocks, exact), np.ascontiguousarray(at_most), kept_sums(blocks, at_most)
    )


def kept_sums(blocks: NDArray, kept: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Kept sum of every tile, exact then rounded once (``math.fsum``)."""
    values = flat_tiles(np.where(kept, blocks, 0).astype(np.float64))
    return np.array([math.fsum(row) for row in values.tolist()], dtype=np.float64)


def exact_difference(
    blocks: NDArray, reference: NDArray[np.bool_], mask: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """Per tile ``sum(s * reference) - sum(s * mask)``, exact then rounded once.

    Tiles where both masks agree are exactly 0 without summing.
    """
    out = np.zeros(len(blocks), dtype=np.float64)
    differ = np.flatnonzero(flat_tiles(reference != mask).any(axis=1))
    if differ.size:
        signs = reference[differ].astype(np.int8) - mask[differ].astype(np.int8)
        # s * (+1, -1, 0) is exact in float64 for every float16/32/64 or int score here
        terms = flat_tiles(blocks[differ].astype(np.float64) * signs)
        out[differ] = [math.fsum(row) for row in terms.tolist()]
    return out
