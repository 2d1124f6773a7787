"""Where AdaPrune starts: the mask (spec A2) and the absorbed pruned mass (spec A3).

The masks come from the project's own solvers, grouped along ``in`` of the ``[out, in]``
weight (the GEMM reduction axis, ``specs/conventions.md`` C3):

* ``"nm"``: the 1-D N:M magnitude mask of the paper, :func:`nmref.magnitude_mask`;
* ``"transposable"``: the optimal transposable mask keeping exactly ``n`` in every row and
  column of every ``m x m`` tile, :func:`nmref.transposable_mask` with ``fill="exact"``;
* ``"transposable_at_most"``: the same with at most ``n`` (``fill="at_most"``, what sparse
  tensor cores run), which the authors' code does not have.

Absorbing the pruned mass adds, in every group, the sum of the pruned weights divided by
the number kept to each kept weight, so each group's sum of weights is unchanged: the
output is preserved exactly for inputs that are constant across a group.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_choice, check_remainder
from nmref.adaprune._inputs import as_weight, check_kept_count
from nmref.masks import magnitude_mask, to_bool_mask, to_magnitudes
from nmref.patterns import check_pattern
from nmref.transposable import transposable_mask

__all__ = ["MASK_METHODS", "MaskMethod", "absorb_pruned_mass", "starting_mask"]

MaskMethod = Literal["nm", "transposable", "transposable_at_most"]
#: The masks AdaPrune can start from (spec A2).
MASK_METHODS: tuple[str, ...] = ("nm", "transposable", "transposable_at_most")


def starting_mask(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    method: MaskMethod = "nm",
    remainder: str = "error",
) -> NDArray[np.bool_]:
    """The magnitude mask AdaPrune starts from, grouped along ``in`` of ``[out, in]``.

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        Finite weights; the mask ranks ``|w|``.
    n, m : int
        Kept count and group size, ``1 <= n <= m``.
    method : {"nm", "transposable", "transposable_at_most"}, default "nm"
        ``"nm"``: :func:`nmref.magnitude_mask` (``n`` largest ``|w|`` of every ``m``
        consecutive entries of a row; ties to the lower index). ``"transposable"``:
        :func:`nmref.transposable_mask` of ``|w|``, ``fill="exact"`` (exactly ``n`` per row
        and column of every aligned ``m x m`` tile, the optimum, canonical among ties).
        ``"transposable_at_most"``: the same with ``fill="at_most"``.
    remainder : {"error", "pad"}, default "error"
        For ``"nm"`` as in :func:`nmref.nm_mask`; the transposable methods need both
        dimensions to be multiples of ``m`` and accept ``"error"`` only.

    Returns
    -------
    mask : ndarray of bool, shape (out, in)

    Raises
    ------
    TypeError
        If ``weight`` is not a float array or ``n``/``m`` are not integers.
    ValueError
        If ``n`` is not in ``1..m``; ``method`` is unknown; ``weight`` is not 2-D or holds
        NaN or an infinity; a dimension does not fit the groups or tiles.

    Examples
    --------
    >>> starting_mask(np.array([[0.5, -2.0, 1.0, 0.25]]), 2, 4).astype(int)
    array([[0, 1, 1, 0]])
    """
    pattern = check_kept_count(n, m)
    check_choice(method, "method", MASK_METHODS)
    matrix = as_weight(weight)
    if method == "nm":
        return magnitude_mask(matrix, pattern.n, pattern.m, layout="linear", remainder=remainder)
    if remainder != "error":
        raise ValueError(
            f"remainder={remainder!r}: method={method!r} tiles the weight into whole "
            f"{pattern.m}x{pattern.m} blocks, so both dimensions must be multiples of m"
        )
    fill = "exact" if method == "transposable" else "at_most"
    return transposable_mask(to_magnitudes(matrix), pattern.n, pattern.m, fill=fill)


def absorb_pruned_mass(
    weight: ArrayLike, mask: ArrayLike, m: int, *, remainder: str = "error"
) -> NDArray[np.float64]:
    r"""Spread each group's pruned weights evenly over its kept ones, then apply the mask.

    For every group ``g`` of ``m`` consecutive entries of a row, with kept set ``K_g`` and
    pruned set ``P_g``,

    .. math::

        w'_i = w_i + \frac{1}{|K_g|}\sum_{j \in P_g} w_j \quad (i \in K_g), \qquad
        w'_j = 0 \quad (j \in P_g),

    so ``sum(w'_g) == sum(w_g)`` up to rounding. A group that keeps nothing is all zero
    (its mass is lost: there is nowhere to put it).

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
    mask : array_like of bool or 0/1, shape (out, in)
        Any 0/1 mask (``True`` = kept); only its support is used.
    m : int
        Group size, ``m >= 1``.
    remainder : {"error", "pad"}, default "error"
        With ``"pad"`` a partial last group spreads its pruned mass over its real kept
        entries only.

    Returns
    -------
    ndarray of float64, shape (out, in)
        Zero outside the mask (``+0.0``).

    Raises
    ------
    TypeError, ValueError
        For a non-float or non-finite weight, a mask of another shape or with values other
        than 0/1, ``m < 1``, or ``in`` not a multiple of ``m`` with ``remainder="error"``.

    Notes
    -----
    In float64: the pruned sum is accumulated left to right in index order, divided once
    by ``|K_g|`` and added to each kept weight; the result equals
    :func:`nmref.adaprune.reference.absorb_pruned_mass_reference` bit for bit (tested).
    O(size) time and memory.

    The authors' ``absorb_mean_to_nz`` pads a partial group with entries that count as
    kept, so part of the mass goes to the padding and is lost; here padding is not a
    weight and never receives mass.

    Examples
    --------
    >>> absorb_pruned_mass([[1.0, 0.5, -0.25, 2.0]], [[1, 0, 0, 1]], 4).tolist()
    [[1.125, 0.0, 0.0, 2.125]]
    """
    matrix = as_weight(weight)
    m = check_pattern(0, m).m
    kept = _support(mask, matrix.shape)
    out_features, in_features = matrix.shape
    check_remainder(in_features, m, 1, remainder)
    groups = -(-in_features // m)

    # Pad to whole groups with pruned zeros: they add nothing to a sum and take nothing.
    values = np.zeros((out_features, groups * m))
    values[:, :in_features] = matrix
    keep = np.zeros((out_features, groups * m), dtype=bool)
    keep[:, :in_features] = kept
    values = values.reshape(out_features, groups, m)
    keep = keep.reshape(out_features, groups, m)

    pruned_sum = np.zeros((out_features, groups))
    for position in range(m):  # left to right, as the reference adds them
        pruned_sum = pruned_sum + np.where(keep[..., position], 0.0, values[..., position])
    kept_count = keep.sum(axis=2)
    share = pruned_sum / np.maximum(kept_count, 1)
    absorbed = np.where(keep, values + share[..., None], 0.0)
    return absorbed.reshape(out_features, groups * m)[:, :in_features]


def _support(mask: ArrayLike, shape: tuple[int, ...]) -> NDArray[np.bool_]:
    kept = to_bool_mask(mask, "mask")
    if kept.shape != shape:
        raise ValueError(f"mask must have the weight's shape {shape}, got {kept.shape}")
    return kept
