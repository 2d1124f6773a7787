"""Score of a row permutation for the backward mask (``specs/bimask.md`` section 4).

:func:`permutation_score` counts, in plain NumPy, what one permutation lets the
backward mask keep (``"kept"``, the authors' code) or how many backward blocks
the forward mask already satisfies (``"eligible"``, the paper's wording);
:func:`score_permutations` scores many at once with the Numba kernels of
:mod:`nmref.bimask._kernels`, equal candidate by candidate (tested).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.bimask.inputs import (
    _check_permutation,
    _forward_survivor_blocks,
    _resolve_layout,
    check_backward_groups,
)
from nmref.bimask.settings import Criterion, check_criterion
from nmref.layouts import Layout
from nmref.patterns import Pattern, check_pattern

__all__ = ["permutation_score", "score_permutations"]


def _criterion_values(counts: NDArray, n: int, criterion: str) -> NDArray[np.int64]:
    """What each backward block with ``counts`` forward survivors adds to the criterion.

    ``"kept"``: ``min(c, n)``, the weights the backward mask keeps there; ``"eligible"``:
    1 where ``c <= n`` (the forward mask already satisfies the block), else 0. The Numba
    kernels in :mod:`nmref.bimask._kernels` inline the same rule.
    """
    if criterion == "kept":
        return np.minimum(counts, n).astype(np.int64, copy=False)
    return (counts <= n).astype(np.int64)


def _block_counts_reference(
    survivors: NDArray[np.uint8], order: NDArray, pattern: Pattern
) -> NDArray[np.int64]:
    """Forward-survivor count of every backward block (any grouping order)."""
    by_column = np.ascontiguousarray(np.moveaxis(survivors[:, order, :], 1, -1))
    return by_column.reshape(-1, pattern.m).sum(axis=1, dtype=np.int64)


def permutation_score(
    forward_mask: ArrayLike,
    permutation: ArrayLike,
    n: int,
    m: int,
    *,
    criterion: Criterion = "kept",
    layout: Layout | None = None,
    straddle: bool = False,
) -> int:
    r"""Score of a row permutation for the Bi-Mask backward mask.

    With ``c_b`` the number of forward survivors in backward block ``b``
    (``m`` consecutive permuted rows of one column):

    * ``"kept"`` -- :math:`\sum_b \min(c_b, n)`, the number of weights the
      backward mask keeps (``B.sum()``); what the authors' code maximises;
    * ``"eligible"`` -- :math:`\#\{b : c_b \le n\}`, the blocks that the
      forward mask already satisfies (``B == F`` there); the paper's wording.

    Depends on ``F`` and ``pi`` only, not on the magnitudes.

    Parameters
    ----------
    forward_mask : array_like of bool or 0/1, shape (out, in) or (out, in, *kernel)
    permutation : array_like of int, shape (out,)
    n, m : int
    criterion : {"kept", "eligible"}
    layout : {"linear", "channels", "flat"}, optional
    straddle : bool
        Group as the code does when ``out % m != 0`` (see :func:`backward_mask`).

    Returns
    -------
    int

    Raises
    ------
    ValueError, TypeError
        As :func:`backward_mask`, plus an unknown ``criterion``.

    Notes
    -----
    Complexity O(size). The batch version :func:`score_permutations` returns
    the same numbers (tested).

    Examples
    --------
    >>> f = np.array([[1], [1], [1], [0]])      # 3 survivors in one block
    >>> permutation_score(f, [0, 1, 2, 3], 2, 4, criterion="kept")
    2
    >>> permutation_score(f, [0, 1, 2, 3], 2, 4, criterion="eligible")
    0
    """
    pattern = check_pattern(n, m)
    check_criterion(criterion)
    mask = np.asarray(forward_mask)
    if mask.ndim < 2:
        raise ValueError(f"forward_mask must have ndim >= 2, got {mask.ndim}")
    resolved = _resolve_layout(mask.shape, layout, straddle)
    survivors = _forward_survivor_blocks(mask, mask.shape, resolved)
    order = _check_permutation(permutation, mask.shape[0])
    check_backward_groups(mask.shape[0], mask.size, pattern, straddle)
    counts = _block_counts_reference(survivors, order, pattern)
    return int(_criterion_values(counts, pattern.n, criterion).sum())


def _channel_rows(survivors: NDArray[np.uint8]) -> NDArray[np.uint8]:
    """``(taps, out, reduction)`` -> ``(out, taps * reduction)``: one row per output channel."""
    taps, out_channels, width = survivors.shape
    return np.ascontiguousarray(np.moveaxis(survivors, 1, 0)).reshape(out_channels, taps * width)


def score_permutations(
    forward_mask: ArrayLike,
    permutations: ArrayLike,
    n: int,
    m: int,
    *,
    criterion: Criterion = "kept",
    layout: Layout | None = None,
    straddle: bool = False,
) -> NDArray[np.int64]:
    """:func:`permutation_score` of many candidates at once (Numba fast path).

    Parameters
    ----------
    forward_mask : array_like of bool or 0/1
    permutations : array_like of int, shape (num_candidates, out)
    n, m, criterion, layout, straddle
        As :func:`permutation_score`.

    Returns
    -------
    ndarray of int64, shape (num_candidates,)

    Notes
    -----
    Complexity O(num_candidates * size) byte additions, no sorting. Equal to
    :func:`permutation_score` candidate by candidate (tested, including
    tie-heavy masks). ``straddle=True`` falls back to the reference.
    """
    pattern = check_pattern(n, m)
    criterion_code = check_criterion(criterion)
    mask = np.asarray(forward_mask)
    if mask.ndim < 2:
        raise ValueError(f"forward_mask must have ndim >= 2, got {mask.ndim}")
    resolved = _resolve_layout(mask.shape, layout, straddle)
    survivors = _forward_survivor_blocks(mask, mask.shape, resolved)
    out_channels = mask.shape[0]
    candidates = np.asarray(permutations)
    if candidates.ndim != 2 or candidates.shape[1] != out_channels:
        raise ValueError(
            f"permutations must have shape (num_candidates, {out_channels}), got {candidates.shape}"
        )
    orders = [
        _check_permutation(c, out_channels, f"permutations[{i}]") for i, c in enumerate(candidates)
    ]
    check_backward_groups(out_channels, mask.size, pattern, straddle)
    if straddle:
        return np.array(
            [
                permutation_score(
                    mask, order, n, m, criterion=criterion, layout=resolved, straddle=True
                )
                for order in orders
            ],
            dtype=np.int64,
        )
    from nmref.bimask import _kernels  # deferred: importing numba costs ~0.3 s

    scores = np.zeros(len(orders), dtype=np.int64)
    if len(orders) and survivors.size:
        stacked = np.ascontiguousarray(np.stack(orders).astype(np.int64))
        rows = _channel_rows(survivors)
        counts = np.empty(rows.shape[1], dtype=np.int32)
        _kernels.score_candidates(
            rows, stacked, pattern.n, pattern.m, criterion_code, scores, counts
        )
    return scores
