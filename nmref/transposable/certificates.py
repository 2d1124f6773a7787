"""Dual certificates: potentials that prove a transposable mask optimal, and their check."""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_scores
from nmref.transposable._driver import solve_at_most, solve_exact
from nmref.transposable._inputs import Fill, check_fill, prepare
from nmref.transposable.patterns import is_transposable

__all__ = ["Certificate", "transposable_certificate", "verify_certificate"]


class Certificate(NamedTuple):
    """An optimal mask with dual potentials proving its optimality.

    Attributes
    ----------
    mask : ndarray of bool, shape (R, C)
    row_potentials : ndarray of float64, shape (R, C // m)
        ``u`` of row ``r`` inside the tile column ``c // m``.
    column_potentials : ndarray of float64, shape (R // m, C)
        ``v`` of column ``c`` inside the tile row ``r // m``.
    """

    mask: NDArray[np.bool_]
    row_potentials: NDArray[np.float64]
    column_potentials: NDArray[np.float64]


def transposable_certificate(
    scores: ArrayLike, n: int, m: int, *, fill: Fill = "exact"
) -> Certificate:
    """The canonical optimal mask and dual potentials that prove it optimal.

    For tile entry ``(i, j)`` with row potential ``u[i]`` and column potential
    ``v[j]``: every kept entry has ``s[i, j] >= u[i] + v[j]`` and every dropped
    entry ``s[i, j] <= u[i] + v[j]``; with the row and column counts that
    proves optimality (LP duality; see :func:`verify_certificate`).
    ``fill="at_most"``: the at-most-``n`` optimum, with ``u, v >= 0`` and
    ``u[i] = 0`` (``v[j] = 0``) wherever the row (column) keeps fewer than
    ``n`` (readable solver, tile by tile).

    Raises
    ------
    ValueError
        As :func:`transposable_mask`, or when a potential is not exactly
        representable in float64 (tiles spanning more than ~2^45 in magnitude).

    See Also
    --------
    verify_certificate
        Check a certificate without trusting nmref.
    transposable_mask
        The mask alone.

    Examples
    --------
    >>> certificate = transposable_certificate(np.arange(16.0).reshape(4, 4), 2, 4)
    >>> verify_certificate(np.arange(16.0).reshape(4, 4), *certificate, 2, 4)
    True
    """
    check_fill(fill)
    array, pattern = prepare(scores, n, m)
    if fill == "at_most":
        result = solve_at_most(array, pattern, potentials=True)
    else:
        result = solve_exact(array, pattern, potentials=True)
    assert result.row_potentials is not None and result.column_potentials is not None
    return Certificate(result.mask, result.row_potentials, result.column_potentials)


def verify_certificate(
    scores: ArrayLike,
    mask: ArrayLike,
    row_potentials: ArrayLike,
    column_potentials: ArrayLike,
    n: int,
    m: int,
    *,
    fill: Fill = "exact",
) -> bool:
    """Check, exactly, that the potentials prove ``mask`` optimal. O(m^2) per tile.

    ``fill="exact"``: True iff ``mask`` is exactly transposable N:M and in every
    tile each kept entry has ``s >= u + v`` and each dropped entry
    ``s <= u + v``. Then for any valid mask ``Y``,
    ``sum_Y s <= n sum(u) + n sum(v) + sum(max(s - u - v, 0))``, which the given
    mask attains, so no mask keeps more (weak LP duality).

    ``fill="at_most"``: True iff ``mask`` keeps at most ``n`` per tile row and
    column, the same two slackness conditions hold, ``u, v >= 0``, and ``u = 0``
    on every tile row keeping fewer than ``n`` (``v = 0`` on such columns).
    These are the dual constraints and complementary slackness of the at-most
    LP (spec T2): for any at-most mask ``Y``, ``sum_Y s = sum_Y (u + v) +
    sum_Y (s - u - v) <= n sum(u) + n sum(v) + sum(max(s - u - v, 0))``
    because ``u, v >= 0`` and ``Y`` keeps at most ``n`` per line; ``mask``
    attains the bound because its lines with a positive dual are full.

    Comparisons are exact: a float64 test decides all clear cases and the few
    entries within rounding distance are recomputed with rationals.

    Parameters
    ----------
    row_potentials : array_like, shape (R, C // m)
    column_potentials : array_like, shape (R // m, C)

    Raises
    ------
    ValueError
        If the shapes do not fit ``scores`` or a value is not finite.
    """
    array, pattern = prepare(scores, n, m)
    kept = np.asarray(mask)
    rows, columns = array.shape
    u = as_scores(row_potentials, "row_potentials").astype(np.float64)
    v = as_scores(column_potentials, "column_potentials").astype(np.float64)
    if kept.shape != array.shape:
        raise ValueError(f"mask.shape={kept.shape} must equal scores.shape={array.shape}")
    if u.shape != (rows, columns // pattern.m):
        raise ValueError(f"row_potentials.shape={u.shape} must be {(rows, columns // pattern.m)}")
    if v.shape != (rows // pattern.m, columns):
        raise ValueError(
            f"column_potentials.shape={v.shape} must be {(rows // pattern.m, columns)}"
        )
    if not (np.isfinite(u).all() and np.isfinite(v).all()):
        raise ValueError("potentials must be finite")
    check_fill(fill)
    if not is_transposable(kept, pattern.n, pattern.m, exact=fill == "exact"):
        return False
    kept = kept.astype(bool)
    if fill == "at_most":
        # Duals of the inequalities: non-negative, and zero on lines with room.
        if (u < 0).any() or (v < 0).any():
            return False
        tiles_r, tiles_c = rows // pattern.m, columns // pattern.m
        blocks = kept.reshape(tiles_r, pattern.m, tiles_c, pattern.m)
        row_counts = blocks.sum(axis=3).reshape(rows, tiles_c)  # (row, tile column)
        column_counts = blocks.sum(axis=1).reshape(tiles_r, columns)  # (tile row, column)
        if ((row_counts < pattern.n) & (u != 0)).any():
            return False
        if ((column_counts < pattern.n) & (v != 0)).any():
            return False
    row_full = np.repeat(u, pattern.m, axis=1)
    column_full = np.repeat(v, pattern.m, axis=0)
    exact_scores = array.astype(np.float64) if array.dtype.kind == "f" else array
    with np.errstate(over="ignore", invalid="ignore"):
        approx = exact_scores.astype(np.float64) - row_full - column_full
        scale = np.abs(exact_scores.astype(np.float64)) + np.abs(row_full) + np.abs(column_full)
    # |rounding error| < 2 ulp(scale) for two float64 operations; outside that band
    # the sign of approx is the exact sign.
    unsure = np.abs(approx) <= 4 * np.spacing(scale)
    if ((kept & ~unsure & (approx < 0)) | (~kept & ~unsure & (approx > 0))).any():
        return False
    for r, c in np.argwhere(unsure):
        s = (
            Fraction(int(exact_scores[r, c]))
            if array.dtype.kind in "biu"
            else Fraction(float(exact_scores[r, c]))
        )
        slack = s - Fraction(float(row_full[r, c])) - Fraction(float(column_full[r, c]))
        if (kept[r, c] and slack < 0) or (not kept[r, c] and slack > 0):
            return False
    return True
