"""Bi-Mask forward and backward masks and the gap between them (Zhang et al. 2023, Sec. 3).

``specs/bimask.md`` sections 2 (forward mask ``F``) and 3 (backward mask ``B``, a
subset of ``F`` that is N:M along permuted output rows); :func:`gradient_gap`
measures what the backward pass loses against ``F`` (section 6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_float_array
from nmref.bimask.inputs import (
    _as_weight,
    _check_permutation,
    _from_blocks,
    _resolve_layout,
    _to_blocks,
    check_backward_groups,
)
from nmref.bimask.settings import Rank, check_rank
from nmref.layouts import Layout, from_reduction_matrix, to_reduction_matrix
from nmref.masks import magnitude_mask, nm_mask, to_magnitudes
from nmref.patterns import Pattern, check_pattern
from nmref.srste import as_binary_mask

__all__ = ["BACKWARD_BAND_ELEMENTS", "GradientGap", "backward_mask", "forward_mask", "gradient_gap"]


def forward_mask(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    straddle: bool = False,
) -> NDArray[np.bool_]:
    """Bi-Mask forward mask ``F``: the ``n`` largest ``|w|`` of every ``m`` along the reduction.

    This is :func:`nmref.magnitude_mask` (ties: lower index wins); it is
    recomputed from the dense weights every step.

    Parameters
    ----------
    weight : array_like of float, shape (out, in) or (out, in, *kernel)
    n, m : int
        Pattern, ``n`` kept of every ``m``.
    layout : {"linear", "channels", "flat"}, optional
        Grouping of conv weights (:mod:`nmref.layouts`); the authors' code
        uses ``"flat"``, the default for conv weights is ``"channels"``.
    straddle : bool, default False
        ``True`` reproduces the code's grouping of the row-major flattened
        weight into consecutive runs of ``m``, which cross output rows when the
        row length is not a multiple of ``m`` (then the mask is not N:M per row).

    Returns
    -------
    ndarray of bool, same shape as ``weight``

    Raises
    ------
    TypeError
        If ``weight`` is not float or ``n``/``m`` are not integers.
    ValueError
        For NaN, an invalid pattern, a row length (``straddle``: size) that is
        not a multiple of ``m``, or a layout that does not fit.

    Notes
    -----
    Complexity O(size * m). Zhang et al. 2023, Sec. 3 (forward mask).

    Examples
    --------
    >>> forward_mask(np.array([[1.0, -3.0, 2.0, 0.5]]), 2, 4).astype(int)
    array([[0, 1, 1, 0]])
    """
    pattern = check_pattern(n, m)
    array = _as_weight(weight)
    resolved = _resolve_layout(array.shape, layout, straddle)
    if not straddle:
        # the 1-D magnitude mask itself: |w| ranked inside the kernel, without a copy of |w|
        return magnitude_mask(array, pattern.n, pattern.m, layout=resolved)
    matrix = to_reduction_matrix(array, resolved)
    if matrix.size % pattern.m:
        raise ValueError(
            f"straddle=True groups the whole weight ({matrix.size} entries) in groups of "
            f"m={pattern.m}; its size must be a multiple of m"
        )
    flat = to_magnitudes(matrix).reshape(-1, pattern.m)
    kept = nm_mask(flat, pattern.n, pattern.m).reshape(matrix.shape)
    return from_reduction_matrix(kept, array.shape, resolved)


def _take_by_column(blocks: NDArray, order: NDArray[np.intp]) -> NDArray:
    """``(taps, out, reduction)`` blocks as a C-contiguous ``(taps, reduction, out)`` copy
    with the output rows in ``order`` (one allocation; a fancy index of the transposed
    view would keep the view's strides)."""
    taps, out, reduction = blocks.shape
    result = np.empty((taps, reduction, out), dtype=blocks.dtype)
    # mode="clip": ``order`` is a checked permutation, and mode="raise" would buffer ``out``
    # (three weight-sized temporaries on an 8192 x 8192 weight)
    np.take(np.moveaxis(blocks, 1, -1), order, axis=-1, out=result, mode="clip")
    return result


def _backward_keep(
    keys: NDArray[np.floating], survivors: NDArray[np.bool_], pattern: Pattern, straddle: bool
) -> NDArray[np.bool_]:
    """N:M along the last axis of permuted ``(taps, reduction, out)`` keys, inside ``F``.

    Backward groups run down a column of the weight, so the callers lay the keys out with
    the output axis last (contiguous) before calling.
    """
    if straddle:
        # The code groups the row-major flattened [reduction, out] matrix.
        chosen = nm_mask(keys.reshape(-1, pattern.m), pattern.n, pattern.m)
        chosen = chosen.reshape(keys.shape)
    else:
        chosen = nm_mask(keys, pattern.n, pattern.m, axis=-1)
    chosen &= survivors
    return chosen


#: Weight entries per band of :func:`backward_mask`'s permuted copy (issue 20: memory).
BACKWARD_BAND_ELEMENTS = 1 << 22


def backward_mask(
    weight: ArrayLike,
    forward_mask: ArrayLike,
    permutation: ArrayLike,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    rank: Rank = "survivors",
    straddle: bool = False,
) -> NDArray[np.bool_]:
    r"""Bi-Mask backward mask ``B``: N:M along permuted output rows, inside ``F``.

    1. Permute the output rows: ``V = W[pi]``, ``F_pi = F[pi]``.
    2. In every block of ``m`` consecutive permuted rows of one column, keep
       the ``n`` forward survivors of largest ``|w|`` (all of them when the
       block holds ``<= n``). Ties: the lower *permuted* position wins.
    3. Undo the permutation: ``B[pi[i]] = B_pi[i]``.

    So ``B`` is a subset of ``F``, N:M along the output axis in permuted
    order, and every block keeps exactly ``min(nnz_F(block), n)``.

    Parameters
    ----------
    weight : array_like of float, shape (out, in) or (out, in, *kernel)
    forward_mask : array_like of bool or 0/1, same shape
        Usually :func:`forward_mask` of ``weight``; any 0/1 mask is accepted.
    permutation : array_like of int, shape (out,)
        Permutation ``pi`` of the output channels (identical for every kernel
        tap in the ``"channels"`` layout).
    n, m : int
        Pattern of the backward mask (the code uses the forward ``n``, ``m``).
    layout : {"linear", "channels", "flat"}, optional
    rank : {"survivors", "masked_magnitude"}, default "survivors"
        ``"survivors"`` ranks forward survivors above pruned entries, then by
        ``|w|``. ``"masked_magnitude"`` is the code's rule: rank by
        ``|W * F|`` then intersect with ``F``; it differs only when a
        forward-kept weight is exactly zero (then a block may keep fewer than
        ``min(nnz_F, n)``).
    straddle : bool, default False
        Reproduce the code's grouping of the flattened ``[reduction, out]``
        matrix (groups cross columns when ``out % m != 0``).

    Returns
    -------
    ndarray of bool, same shape as ``weight``

    Raises
    ------
    TypeError, ValueError
        For a non-float weight, NaN, a mask that is not 0/1 or has another
        shape, a non-permutation, ``out % m != 0`` (``straddle``: size), an
        unknown ``rank``, or an invalid pattern.

    See Also
    --------
    forward_mask
        The mask ``F`` this one is a subset of.
    search_permutation
        The permutation search of the paper and code.
    nmref.explain.explain_bimask
        The steps on a small weight, in words.

    Notes
    -----
    Complexity O(size * m). Zhang et al. 2023, Sec. 3 (backward mask, row
    permutation); code ``get_n_m_backward_matrix``.

    Examples
    --------
    >>> w = np.array([[4.0], [3.0], [2.0], [1.0]])          # one column, 4 output rows
    >>> f = np.ones((4, 1), dtype=bool)
    >>> backward_mask(w, f, [0, 1, 2, 3], 2, 4).ravel().astype(int)
    array([1, 1, 0, 0])
    """
    pattern = check_pattern(n, m)
    check_rank(rank)
    array = _as_weight(weight)
    resolved = _resolve_layout(array.shape, layout, straddle)
    survivors = _to_blocks(as_binary_mask(forward_mask, array.shape, "forward_mask"), resolved)
    out_channels = array.shape[0]
    order = _check_permutation(permutation, out_channels)
    check_backward_groups(out_channels, array.size, pattern, straddle)

    # |w| in the weight's own float dtype is exact and orders as the weights do; keeping
    # that dtype (not float64) means the 1-D mask kernel compiles once for both masks.
    # Lay the blocks out as (taps, reduction, out) with the output rows permuted: the
    # fancy index makes the one weight-sized copy, already contiguous along the backward
    # groups; |w| and the blanking of non-survivors then happen in place (issue 20: memory).
    # Reduction columns are independent (a backward group lies inside one column), so the
    # copy is made a band of columns at a time; a straddling group spans columns: one band.
    blocks = _to_blocks(array, resolved)
    taps, _, reduction = blocks.shape
    band = reduction if straddle else max(1, BACKWARD_BAND_ELEMENTS // max(taps * out_channels, 1))
    kept = np.empty(survivors.shape, dtype=bool)
    for start in range(0, reduction, band):
        columns = slice(start, start + band)
        survivors_by_column = _take_by_column(survivors[:, :, columns], order)
        keys = _take_by_column(blocks[:, :, columns], order)
        np.abs(keys, out=keys)
        np.copyto(keys, -np.inf if rank == "survivors" else 0.0, where=~survivors_by_column)
        kept_by_column = _backward_keep(keys, survivors_by_column, pattern, straddle)
        np.moveaxis(kept[:, :, columns], 1, -1)[..., order] = kept_by_column
    return _from_blocks(kept, array.shape, resolved)


@dataclass(frozen=True)
class GradientGap:
    """Result of :func:`gradient_gap`.

    Attributes
    ----------
    dropped : int
        ``|F| - |B|``: forward survivors the backward mask drops.
    frobenius : float
        ``||W * (F - B)||_F`` (float64).
    relative : float
        ``frobenius / ||W * F||_F`` (0.0 when ``W * F`` is zero).
    """

    dropped: int
    frobenius: float
    relative: float


def gradient_gap(
    weight: ArrayLike, forward_mask: ArrayLike, backward_mask: ArrayLike
) -> GradientGap:
    r"""Size of the gap between uni- and bi-directional input gradients.

    With the forward-masked weights reused in the backward pass (uni-directional,
    SR-STE) the input gradient is ``dY (W*F)``; Bi-Mask computes ``dY (W*B)``.
    Their difference is ``dY (W * (F - B))``, so for every ``dY``

    .. math:: \|dX_{uni} - dX_{bi}\|_F \le \|dY\|_F \, \|W \odot (F - B)\|_F .

    Maximising the ``"kept"`` score minimises ``dropped``; the ``"eligible"``
    score maximises the number of blocks with no gap. The paper's own formal
    definition of the gap was not available (``specs/bimask.md``, section 6);
    this is the quantity both criteria act on.

    Parameters
    ----------
    weight : array_like of float
    forward_mask, backward_mask : array_like of bool or 0/1, same shape
        ``backward_mask`` must be a subset of ``forward_mask``.

    Returns
    -------
    GradientGap

    Raises
    ------
    ValueError
        If shapes differ, a mask is not 0/1, ``B`` is not a subset of ``F``, or ``W`` holds NaN.

    Notes
    -----
    Complexity O(size).

    Examples
    --------
    >>> gap = gradient_gap(np.array([[3.0, 4.0]]), [[1, 1]], [[0, 0]])
    >>> gap.dropped, gap.frobenius, gap.relative
    (2, 5.0, 1.0)
    """
    array = as_float_array(weight, "weight")
    forward = as_binary_mask(forward_mask, array.shape, "forward_mask")
    backward = as_binary_mask(backward_mask, array.shape, "backward_mask")
    outside = backward & ~forward
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        raise ValueError(
            f"backward_mask must be a subset of forward_mask; it keeps index {index}, "
            "which forward_mask prunes"
        )
    values = array.astype(np.float64)
    dropped = forward & ~backward
    frobenius = float(np.linalg.norm(values[dropped]))
    total = float(np.linalg.norm(values[forward]))
    return GradientGap(
        dropped=int(np.count_nonzero(dropped)),
        frobenius=frobenius,
        relative=frobenius / total if total > 0 else 0.0,
    )
