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

    Comparisons are exact at every magnitude (spec T2, "Dual certificate"): a float64
    filter with a proven error bound decides the clear cases and the entries within it
    are recomputed with rationals, so a certificate that holds only through rounding
    (potentials near 1e308 whose sum cancels in float64) is rejected.

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
    # Their own dtype: a float64 copy would round integer potentials above 2**53.
    u = as_scores(row_potentials, "row_potentials")
    v = as_scores(column_potentials, "column_potentials")
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
    negative, positive = _slack_signs(array, row_full, column_full)
    return not ((kept & negative) | (~kept & positive)).any()


def _slack_signs(
    scores: NDArray, row_full: NDArray, column_full: NDArray
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """``(s - u - v < 0, s - u - v > 0)`` per entry, decided on the exact values.

    A float64 filter decides the clear cases on quarters of the values (``x / 4`` cannot
    overflow, and the sum of three quarters stays below ``3 * 2**1022``): each conversion
    to float64 (integers above 2**53), each quarter that lands among the subnormals and
    each of the two subtractions errs by at most ``2**-52`` of ``scale`` (the sum of the
    quarters' magnitudes) plus ``2**-1074``, so outside ``8 * spacing(scale)`` the sign of
    the float64 result is the exact sign. The entries inside the band (tight entries, and
    any that only rounding makes tight) are recomputed with exact rationals, whatever the
    magnitudes: a certificate that holds only through rounding is rejected.
    """
    with np.errstate(under="ignore"):
        quarters = [np.asarray(x, dtype=np.float64) * 0.25 for x in (scores, row_full, column_full)]
        approx = (quarters[0] - quarters[1]) - quarters[2]
        scale = (np.abs(quarters[0]) + np.abs(quarters[1])) + np.abs(quarters[2])
    unsure = np.abs(approx) <= 8 * np.spacing(scale)
    negative = ~unsure & (approx < 0)
    positive = ~unsure & (approx > 0)
    for r, c in np.argwhere(unsure):
        slack = _exact(scores[r, c]) - _exact(row_full[r, c]) - _exact(column_full[r, c])
        negative[r, c] = slack < 0
        positive[r, c] = slack > 0
    return negative, positive


def _exact(value) -> Fraction:
    """A finite bool, integer or float (a NumPy scalar) as the rational it stands for."""
    if isinstance(value, (np.integer, np.bool_, int)):
        return Fraction(int(value))
    return Fraction(float(value))  # float16/32/64 are exact in float64
