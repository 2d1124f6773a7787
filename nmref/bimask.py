"""Bi-Mask: bi-directional N:M masks with a row-permutation search (Zhang et al., ICML 2023 [1]_).

A Bi-Mask layer keeps dense weights ``W`` (``[out, in]`` for Linear) and uses
two masks every step:

* the **forward mask** ``F``: N:M along the input (reduction) axis of every
  output row, by magnitude -- ``Y = X (W*F)^T`` runs on a sparse tensor core;
* the **backward mask** ``B``, a subset of ``F`` that is N:M along the output
  axis -- the reduction axis of ``dX = dY (W*B)`` -- in the order of a row
  permutation ``pi`` of the output channels: in every block of ``m``
  consecutive *permuted* rows of one column, keep the ``n`` forward survivors
  of largest ``|w|``.

The permutation changes which output rows share a backward block, hence how
many forward survivors the backward mask must drop. The authors' code draws
``K`` random permutations every ``T`` steps and keeps the one with the most
backward-kept weights (criterion ``"kept"``); the paper describes the count
of "eligible" blocks, those the forward mask already satisfies (criterion
``"eligible"``). Both are here, with every other paper-vs-code difference as
an option (``specs/bimask.md``).

Beyond the paper (labelled so): :func:`greedy_permutation`, which builds the
blocks greedily, and :func:`local_search_permutation`, a swap local search;
both optimise the same criterion and beat best-of-K random search at equal
or lower cost (``benchmarks/bench_bimask.py``).

References
----------
.. [1] Zhang, Luo, Lin, Zhong, Xie, Chao, Ji, "Bi-directional Masks for
   Efficient N:M Sparse Training", ICML 2023 (arXiv 2302.06058), abstract and
   Sec. 3, the method (section numbering not verified: ``specs/bimask.md``).
   Code: ``zyxxmu/Bi-Mask`` at commit e63cd37, ``CnnModels/utils/conv_type.py``
   and ``DeiT/timm/models/vision_transformer.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import (
    NAN_HAS_NO_MAGNITUDE,
    as_float_array,
    check_choice,
    check_count,
    check_float_dtype,
    check_integer,
    check_no_nan,
    check_permutation,
    is_integer,
)
from nmref.layouts import Layout, default_layout, from_reduction_matrix, to_reduction_matrix
from nmref.masks import magnitude_mask, nm_mask, to_magnitudes
from nmref.patterns import Pattern, check_pattern
from nmref.srste import SRSTE_DEFAULT_DECAY, as_binary_mask, srste_gradient

__all__ = [
    "BIMASK_CODE_DEFAULTS",
    "BIMASK_PAPER_RUN",
    "BiMaskGemms",
    "BiMaskSettings",
    "GradientGap",
    "GreedyPermutation",
    "LocalSearchResult",
    "PermutationSearch",
    "backward_mask",
    "bimask_linear_gemms",
    "forward_mask",
    "gradient_gap",
    "greedy_permutation",
    "is_search_step",
    "local_search_permutation",
    "permutation_score",
    "score_permutations",
    "search_permutation",
]

Criterion = Literal["kept", "eligible"]
Rank = Literal["survivors", "masked_magnitude"]
_CRITERIA = ("kept", "eligible")
_RANKS = ("survivors", "masked_magnitude")


@dataclass(frozen=True)
class BiMaskSettings:
    """Hyperparameters of a Bi-Mask run (``specs/bimask.md``, "Hyperparameters").

    Attributes
    ----------
    n, m : int
        Pattern (``--N``, ``--M``; keep ``n`` of ``m``).
    candidates : int
        Random permutations per search, ``K`` (``--greedy_num``).
    interval : int
        Steps between searches, ``T`` (``--iter``).
    decay : float
        SR-STE ``lambda`` on ``(1 - F) * W`` in the weight gradient.
    """

    n: int = 2
    m: int = 4
    candidates: int = 10
    interval: int = 100
    decay: float = SRSTE_DEFAULT_DECAY


#: ``options.py`` defaults of the released code (K = 10).
BIMASK_CODE_DEFAULTS = BiMaskSettings()
#: The README ImageNet commands and the hard-coded DeiT values (K = 100).
BIMASK_PAPER_RUN = BiMaskSettings(candidates=100)


# ----------------------------------------------------------------------------
# Validation and layout plumbing
# ----------------------------------------------------------------------------


def _as_weight(weight: ArrayLike, name: str = "weight") -> NDArray[np.floating]:
    array = np.asarray(weight)
    check_float_dtype(array, name)
    if array.ndim < 2:
        raise ValueError(
            f"{name} must have ndim >= 2 ([out, in] or [out, in, *kernel]), got {array.ndim}"
        )
    check_no_nan(array, name, NAN_HAS_NO_MAGNITUDE)
    return array


def _resolve_layout(shape: tuple[int, ...], layout: Layout | None, straddle: bool) -> Layout:
    resolved = default_layout(len(shape)) if layout is None else layout
    if straddle and resolved == "channels":
        raise ValueError(
            "straddle=True reproduces the authors' flattened grouping and needs "
            "layout='linear' or 'flat', not 'channels'"
        )
    return resolved


def _to_blocks(array: NDArray, layout: Layout) -> NDArray:
    """Weight-shaped array -> ``(taps, out_channels, reduction)``.

    For ``"channels"`` the reduction matrix has rows ``tap * out + o``; the
    other layouts have one tap.
    """
    matrix = to_reduction_matrix(array, layout)
    taps = int(np.prod(array.shape[2:], dtype=np.int64)) if layout == "channels" else 1
    return matrix.reshape(taps, array.shape[0], matrix.shape[1])


def _from_blocks(blocks: NDArray, shape: tuple[int, ...], layout: Layout) -> NDArray:
    taps, out_channels, width = blocks.shape
    return from_reduction_matrix(blocks.reshape(taps * out_channels, width), shape, layout)


def _check_permutation(permutation: ArrayLike, size: int, name: str = "permutation") -> NDArray:
    return check_permutation(permutation, size, name, entry="output channel")


def check_backward_groups(out_channels: int, total: int, pattern: Pattern, straddle: bool) -> None:
    """Backward N:M groups along ``out`` fit ``out_channels`` (shared with the torch twin)."""
    if straddle:
        if total % pattern.m:
            raise ValueError(
                f"straddle=True groups the whole weight ({total} entries) in groups of "
                f"m={pattern.m}; its size must be a multiple of m"
            )
    elif out_channels % pattern.m:
        raise ValueError(
            f"weight has {out_channels} output channels; the backward mask groups m={pattern.m} "
            "consecutive (permuted) output channels, so out_channels must be a multiple of m "
            "(straddle=True reproduces the authors' code, whose groups then cross columns)"
        )


def _forward_survivor_blocks(
    mask: ArrayLike, shape: tuple[int, ...], layout: Layout, name: str = "forward_mask"
) -> NDArray[np.uint8]:
    return _to_blocks(as_binary_mask(mask, shape, name), layout).astype(np.uint8)


# ----------------------------------------------------------------------------
# Forward and backward masks
# ----------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------
# Permutation score: reference (one candidate, plain NumPy) and fast batch
# ----------------------------------------------------------------------------


def check_rank(rank: str) -> None:
    """``rank`` is a known ranking of the backward mask (shared with the torch twin)."""
    check_choice(rank, "rank", _RANKS)


def check_criterion(criterion: str) -> int:
    """The criterion's code for the kernels: its index in ``_CRITERIA``."""
    return check_choice(criterion, "criterion", _CRITERIA)


def _criterion_values(counts: NDArray, n: int, criterion: str) -> NDArray[np.int64]:
    """What each backward block with ``counts`` forward survivors adds to the criterion.

    ``"kept"``: ``min(c, n)``, the weights the backward mask keeps there; ``"eligible"``:
    1 where ``c <= n`` (the forward mask already satisfies the block), else 0. The Numba
    kernels in :mod:`nmref._bimask_kernels` inline the same rule.
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
    from nmref import _bimask_kernels  # deferred: importing numba costs ~0.3 s

    scores = np.zeros(len(orders), dtype=np.int64)
    if len(orders) and survivors.size:
        stacked = np.ascontiguousarray(np.stack(orders).astype(np.int64))
        rows = _channel_rows(survivors)
        counts = np.empty(rows.shape[1], dtype=np.int32)
        _bimask_kernels.score_candidates(
            rows, stacked, pattern.n, pattern.m, criterion_code, scores, counts
        )
    return scores


# ----------------------------------------------------------------------------
# The authors' search: best of K random permutations
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PermutationSearch:
    """Result of :func:`search_permutation`.

    Attributes
    ----------
    permutation : ndarray of intp, shape (out,)
        The chosen permutation (the first candidate with the maximal score).
    score : int
        Its score under ``criterion``.
    candidates : ndarray of intp, shape (num_evaluated, out)
        Every evaluated permutation in evaluation order (identity first when
        it was included).
    candidate_scores : ndarray of int64, shape (num_evaluated,)
    best_index : int
        Index of the winner in ``candidates``.
    criterion : str
    """

    permutation: NDArray[np.intp]
    score: int
    candidates: NDArray[np.intp]
    candidate_scores: NDArray[np.int64]
    best_index: int
    criterion: str


def _as_generator(rng: object) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if is_integer(rng):
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng={rng!r} must be a numpy.random.Generator (or an int seed); "
        "the search is random and must be reproducible"
    )


#: Largest memory the drawn candidate permutations may take (bytes); a count beyond it is
#: refused before anything is allocated.
CANDIDATE_MEMORY_BUDGET = 2 * 2**30


def evaluated_permutations(
    candidates: int | ArrayLike, out_channels: int, rng: object, include_identity: bool
) -> NDArray[np.intp]:
    """The permutations :func:`search_permutation` scores, in order, as a ``(K, out)`` array.

    ``candidates`` is a count drawn with ``rng.permutation(out)`` or an explicit array
    (then ``rng`` is unused); the identity comes first with ``include_identity``. Host-side
    and shared with ``nmsim.torch.bimask`` so that both paths draw the same candidates.
    """
    if is_integer(candidates):
        count = int(candidates)  # type: ignore[arg-type]
        if count < 0:
            raise ValueError(f"candidates={count} must be >= 0")
        needed = count * out_channels * np.dtype(np.intp).itemsize
        if needed > CANDIDATE_MEMORY_BUDGET:
            raise ValueError(
                f"candidates={count} would hold {needed / 2**30:.3g} GiB of permutations of "
                f"{out_channels} rows, over the {CANDIDATE_MEMORY_BUDGET / 2**30:g} GiB budget "
                "(nmref.bimask.CANDIDATE_MEMORY_BUDGET): lower candidates"
            )
        if rng is None:
            raise TypeError(
                f"rng is required when candidates is a count (candidates={count}): pass an int "
                "seed (rng=0) or a numpy.random.Generator; there is no hidden global seed"
            )
        generator = _as_generator(rng)
        drawn = np.empty((count, out_channels), dtype=np.intp)
        for k in range(count):
            drawn[k] = generator.permutation(out_channels)
    else:
        drawn = np.asarray(candidates)
        if drawn.size and drawn.dtype.kind not in "iu":
            # astype(intp) below would truncate 0.5 to 0 and pass a non-permutation off as one.
            raise TypeError(f"candidates must be integer permutations, got dtype={drawn.dtype}")
        if drawn.ndim != 2 or drawn.shape[1] != out_channels:
            raise ValueError(
                f"candidates must be an int or an array of shape (K, {out_channels}), "
                f"got shape {drawn.shape}"
            )
    evaluated = (
        np.concatenate([np.arange(out_channels, dtype=np.intp)[None, :], drawn.astype(np.intp)])
        if include_identity
        else drawn.astype(np.intp)
    )
    if len(evaluated) == 0:
        raise ValueError("no candidate to evaluate: candidates=0 and include_identity=False")
    return evaluated


def search_permutation(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    candidates: int | ArrayLike = 100,
    criterion: Criterion = "kept",
    include_identity: bool = False,
    rng: np.random.Generator | int | None = None,
    layout: Layout | None = None,
    straddle: bool = False,
) -> PermutationSearch:
    """Bi-Mask's permutation search: the best of ``K`` uniformly random row permutations.

    Computes ``F = forward_mask(weight)``, draws ``K`` permutations with
    ``rng.permutation(out)`` (in order), scores them with
    :func:`score_permutations`, and returns the first maximiser. With
    ``include_identity`` the identity is evaluated first (index 0) and the
    random ones must beat it strictly; the random draws are the same either way.

    Parameters
    ----------
    weight : array_like of float, shape (out, in) or (out, in, *kernel)
    n, m : int
    candidates : int or array_like of int, default 100
        ``K`` (the code default is 10, the README ImageNet runs and DeiT use
        100), or an explicit ``(K, out)`` array of permutations -- e.g. drawn
        with ``np.random.RandomState`` to replay the code's stream; then
        ``rng`` is not used.
    criterion : {"kept", "eligible"}, default "kept"
        ``"kept"`` is the code, ``"eligible"`` the paper's wording.
    include_identity : bool, default False
        The code never evaluates the identity (``False``).
    rng : numpy.random.Generator or int
        Source of the candidates; an int is a seed for ``default_rng``.
        Required when ``candidates`` is an int (there is no hidden global seed).
    layout, straddle
        As :func:`backward_mask`.

    Returns
    -------
    PermutationSearch

    Raises
    ------
    TypeError
        If ``rng`` is not a Generator or int (and no explicit candidates were given),
        or explicit ``candidates`` are not integers.
    ValueError
        If no candidate would be evaluated, or as :func:`score_permutations`.

    Notes
    -----
    Complexity O(K * size) (plus O(size * m) for ``F``). Same ``rng`` state,
    same result. Zhang et al. 2023, Sec. 3; code ``get_best_permutation``.
    """
    pattern = check_pattern(n, m)
    check_criterion(criterion)
    array = _as_weight(weight)
    evaluated = evaluated_permutations(candidates, array.shape[0], rng, include_identity)
    mask = forward_mask(array, pattern.n, pattern.m, layout=layout, straddle=straddle)
    scores = score_permutations(
        mask, evaluated, pattern.n, pattern.m, criterion=criterion, layout=layout, straddle=straddle
    )
    best = int(np.argmax(scores))  # first maximiser, as the code's strict ">"
    return PermutationSearch(
        permutation=evaluated[best].copy(),
        score=int(scores[best]),
        candidates=evaluated,
        candidate_scores=scores,
        best_index=best,
        criterion=criterion,
    )


def is_search_step(
    step: int, interval: int = 100, *, first_search: Literal["start", "interval"] = "start"
) -> bool:
    """Whether the permutation is searched at training step ``step`` (0-based).

    ``first_search="start"`` searches at steps 0, T, 2T, ... (the CIFAR
    script); ``"interval"`` at T, 2T, ... with the identity before (the
    ImageNet script increments its counter before the forward pass). ``F`` and
    ``B`` are recomputed at every step regardless.

    Examples
    --------
    >>> [s for s in range(250) if is_search_step(s, 100)]
    [0, 100, 200]
    >>> [s for s in range(250) if is_search_step(s, 100, first_search="interval")]
    [99, 199]
    """
    check_integer(step, "step")
    check_integer(interval, "interval")
    if step < 0 or interval < 1:
        raise ValueError(f"need step >= 0 and interval >= 1, got step={step}, interval={interval}")
    if first_search == "start":
        return step % interval == 0
    if first_search == "interval":
        return (step + 1) % interval == 0
    raise ValueError(f"first_search={first_search!r} must be 'start' or 'interval'")


# ----------------------------------------------------------------------------
# Beyond the paper: swap local search of the same criterion
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalSearchResult:
    """Result of :func:`local_search_permutation` (beyond the paper).

    Attributes
    ----------
    permutation : ndarray of intp, shape (out,)
    score : int
        Score of ``permutation``; never below ``start_score``.
    start_score : int
    accepted_swaps : int
    evaluations : int
        Swaps tried.
    criterion : str
    """

    permutation: NDArray[np.intp]
    score: int
    start_score: int
    accepted_swaps: int
    evaluations: int
    criterion: str


def _draw_swap_pairs(
    generator: np.random.Generator, out_channels: int, m: int, evaluations: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Uniform position pairs in different blocks, drawn up front (reproducible)."""
    num_blocks = out_channels // m
    first = generator.integers(0, out_channels, size=evaluations, dtype=np.int64)
    block_offset = generator.integers(1, num_blocks, size=evaluations, dtype=np.int64)
    within = generator.integers(0, m, size=evaluations, dtype=np.int64)
    second = ((first // m + block_offset) % num_blocks) * m + within
    return first, second


def _swap_local_search_reference(
    rows: NDArray[np.uint8],
    permutation: NDArray,
    pattern: Pattern,
    criterion: str,
    first: NDArray,
    second: NDArray,
) -> int:
    """Plain-NumPy oracle of the kernel: rescore the whole permutation for every try."""
    survivors = rows[None, :, :]
    accepted = 0

    def score(order: NDArray) -> int:
        counts = _block_counts_reference(survivors, order, pattern)
        return int(_criterion_values(counts, pattern.n, criterion).sum())

    current = score(permutation)
    for a, b in zip(first, second, strict=True):
        if a // pattern.m == b // pattern.m:
            continue
        trial = permutation.copy()
        trial[a], trial[b] = trial[b], trial[a]
        trial_score = score(trial)
        if trial_score > current:
            permutation[:] = trial
            current = trial_score
            accepted += 1
    return accepted


def local_search_permutation(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    criterion: Criterion = "kept",
    start: ArrayLike | None = None,
    evaluations: int | None = None,
    rng: np.random.Generator | int,
    layout: Layout | None = None,
    implementation: Literal["numba", "reference"] = "numba",
) -> LocalSearchResult:
    """**Beyond the paper.** Improve a row permutation by swapping rows between backward blocks.

    Starting from ``start`` (default: the identity), try ``evaluations``
    swaps of two output rows in different blocks, the positions drawn
    uniformly from ``rng`` up front; a swap is kept iff it strictly raises the
    criterion of :func:`permutation_score`. The score never decreases, so
    starting from the best random candidate can only improve on the authors'
    search.

    Parameters
    ----------
    weight : array_like of float
    n, m : int
    criterion : {"kept", "eligible"}
    start : array_like of int, shape (out,), optional
    evaluations : int, optional
        Swaps to try; default ``25 * out``. One try costs O(row width), so
        ``evaluations = K * out`` costs about what ``K`` random candidates cost.
    rng : numpy.random.Generator or int
    layout : {"linear", "channels", "flat"}, optional
    implementation : {"numba", "reference"}
        The Numba kernel (incremental block counts) or the plain-NumPy oracle
        that rescores everything per try; they return identical results (tested).

    Returns
    -------
    LocalSearchResult

    Raises
    ------
    ValueError
        If ``out % m != 0``, fewer than two blocks, a bad ``start``, or as
        :func:`permutation_score`.

    Notes
    -----
    Complexity O(size + evaluations * width) with Numba, where width =
    size / out. Not in Zhang et al. 2023; the objective is theirs.
    """
    pattern = check_pattern(n, m)
    criterion_code = check_criterion(criterion)
    array = _as_weight(weight)
    resolved = _resolve_layout(array.shape, layout, False)
    out_channels = array.shape[0]
    check_backward_groups(out_channels, array.size, pattern, False)
    if out_channels // pattern.m < 2:
        raise ValueError(
            f"local search needs at least two backward blocks (out >= 2*m), got out={out_channels}"
        )
    if evaluations is None:
        evaluations = 25 * out_channels
    check_count(evaluations, "evaluations")
    order = (
        np.arange(out_channels, dtype=np.int64)
        if start is None
        else _check_permutation(start, out_channels, "start").astype(np.int64)
    )
    generator = _as_generator(rng)
    first, second = _draw_swap_pairs(generator, out_channels, pattern.m, int(evaluations))

    mask = forward_mask(array, pattern.n, pattern.m, layout=resolved)
    rows = _channel_rows(_forward_survivor_blocks(mask, array.shape, resolved))
    start_score = permutation_score(
        mask, order, pattern.n, pattern.m, criterion=criterion, layout=resolved
    )
    permutation = order.copy()
    if implementation == "numba":
        from nmref import _bimask_kernels

        accepted = int(
            _bimask_kernels.swap_local_search(
                rows, permutation, pattern.m, pattern.n, criterion_code, first, second
            )
        )
    elif implementation == "reference":
        accepted = _swap_local_search_reference(
            rows, permutation, pattern, criterion, first, second
        )
    else:
        raise ValueError(f"implementation={implementation!r} must be 'numba' or 'reference'")
    score = permutation_score(
        mask, permutation, pattern.n, pattern.m, criterion=criterion, layout=resolved
    )
    return LocalSearchResult(
        permutation=permutation.astype(np.intp),
        score=score,
        start_score=start_score,
        accepted_swaps=accepted,
        evaluations=int(evaluations),
        criterion=criterion,
    )


@dataclass(frozen=True)
class GreedyPermutation:
    """Result of :func:`greedy_permutation` (beyond the paper).

    Attributes
    ----------
    permutation : ndarray of intp, shape (out,)
    score : int
        Its score under ``criterion``.
    criterion : str
    window : int
    """

    permutation: NDArray[np.intp]
    score: int
    criterion: str
    window: int


def _greedy_blocks_reference(
    rows: NDArray[np.uint8], order: NDArray, pattern: Pattern, criterion: str, window: int
) -> NDArray[np.intp]:
    """Plain-Python oracle of the greedy kernel (same visiting and tie rules)."""

    unused = [int(r) for r in order]
    permutation = []
    while unused:
        block = [unused.pop(0)]
        counts = rows[block[0]].astype(np.int64)
        for _ in range(pattern.m - 1):
            before = _criterion_values(counts, pattern.n, criterion)
            gains = [
                int((_criterion_values(counts + rows[r], pattern.n, criterion) - before).sum())
                for r in unused[:window]
            ]
            chosen = unused.pop(int(np.argmax(gains)))  # argmax: first maximiser
            block.append(chosen)
            counts = counts + rows[chosen]
        permutation.extend(block)
    return np.array(permutation, dtype=np.intp)


def greedy_permutation(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    criterion: Criterion = "kept",
    window: int = 100,
    rng: np.random.Generator | int,
    layout: Layout | None = None,
    implementation: Literal["numba", "reference"] = "numba",
) -> GreedyPermutation:
    """**Beyond the paper.** Build the row permutation block by block, greedily.

    Visit the output rows in the order ``rng.permutation(out)``. The first
    unused row opens a backward block; each of its other ``m - 1`` slots takes,
    among the next ``window`` unused rows in visiting order, the row whose
    forward survivors raise the block's criterion most -- for ``"kept"``,
    the row with the most survivors in columns where the block still holds
    fewer than ``n`` (ties: earliest in visiting order).

    Parameters
    ----------
    weight : array_like of float
    n, m : int
    criterion : {"kept", "eligible"}
    window : int, default 100
        Rows examined per slot; cost grows linearly with it. ``window = K``
        costs about ``(m - 1) / m`` of ``K`` random candidates.
    rng : numpy.random.Generator or int
    layout : {"linear", "channels", "flat"}, optional
    implementation : {"numba", "reference"}
        Identical results (tested).

    Returns
    -------
    GreedyPermutation

    Raises
    ------
    ValueError
        If ``out % m != 0``, ``window < 1``, or as :func:`permutation_score`.

    Notes
    -----
    Complexity O(out * window * width), width = size / out. Not in Zhang et
    al. 2023; the objective is theirs. Measured gains over best-of-100 random
    search: ``benchmarks/bench_bimask.py`` and ``specs/bimask.md``.
    """
    pattern = check_pattern(n, m)
    criterion_code = check_criterion(criterion)
    check_count(window, "window", minimum=1)
    array = _as_weight(weight)
    resolved = _resolve_layout(array.shape, layout, False)
    out_channels = array.shape[0]
    check_backward_groups(out_channels, array.size, pattern, False)
    order = _as_generator(rng).permutation(out_channels).astype(np.int64)
    mask = forward_mask(array, pattern.n, pattern.m, layout=resolved)
    rows = _channel_rows(_forward_survivor_blocks(mask, array.shape, resolved))
    if implementation == "numba":
        from nmref import _bimask_kernels

        permutation = np.empty(out_channels, dtype=np.int64)
        _bimask_kernels.greedy_blocks(
            rows, order, pattern.m, pattern.n, criterion_code, int(window), permutation
        )
    elif implementation == "reference":
        permutation = _greedy_blocks_reference(rows, order, pattern, criterion, int(window))
    else:
        raise ValueError(f"implementation={implementation!r} must be 'numba' or 'reference'")
    score = permutation_score(
        mask, permutation, pattern.n, pattern.m, criterion=criterion, layout=resolved
    )
    return GreedyPermutation(permutation.astype(np.intp), score, criterion, int(window))


# ----------------------------------------------------------------------------
# The per-GEMM contract of a Bi-Mask Linear layer
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BiMaskGemms:
    """The three GEMMs of one Bi-Mask Linear layer (:func:`bimask_linear_gemms`).

    Attributes
    ----------
    output : ndarray, shape (batch, out)
        ``Y = X (W*F)^T``.
    grad_input : ndarray, shape (batch, in)
        ``dX = dY (W*B)``, equal to ``dY[:, pi] (W*B)[pi, :]``.
    grad_weight : ndarray, shape (out, in)
        ``dW = dY^T X + decay * (1 - F) * W`` (dense, STE + SR-STE).
    forward_mask, backward_mask : ndarray of bool, shape (out, in)
    """

    output: NDArray[np.floating]
    grad_input: NDArray[np.floating]
    grad_weight: NDArray[np.floating]
    forward_mask: NDArray[np.bool_]
    backward_mask: NDArray[np.bool_]


def bimask_linear_gemms(
    inputs: ArrayLike,
    weight: ArrayLike,
    grad_output: ArrayLike,
    permutation: ArrayLike,
    n: int,
    m: int,
    *,
    decay: float = SRSTE_DEFAULT_DECAY,
    rank: Rank = "survivors",
) -> BiMaskGemms:
    """Forward, input-gradient and weight-gradient GEMMs of a Bi-Mask Linear layer.

    .. math::

        Y = X (W \\odot F)^T, \\quad
        dX = dY (W \\odot B), \\quad
        dW = dY^T X + \\lambda (1 - F) \\odot W

    ``F`` and ``B`` are recomputed here from ``weight`` (as the code does
    every step); ``dW`` is dense (no mask), the decay applied once.

    Parameters
    ----------
    inputs : array_like of float, shape (batch, in)
    weight : array_like of float, shape (out, in)
    grad_output : array_like of float, shape (batch, out)
    permutation : array_like of int, shape (out,)
    n, m : int
    decay : float, default 2e-4
    rank : {"survivors", "masked_magnitude"}
        As :func:`backward_mask`.

    Returns
    -------
    BiMaskGemms

    Raises
    ------
    ValueError, TypeError
        For shape mismatches, non-float arrays, NaN, or as :func:`backward_mask`.

    Notes
    -----
    Complexity O(batch * out * in). A convolution is the same after im2col
    with ``layout="flat"`` (the code's ``unfold``). Zhang et al. 2023, Sec. 3;
    code ``MyConv2d_Lay`` / the DeiT Linear function.
    """
    w = _as_weight(weight)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {w.shape}")
    # Shapes first: _as_weight's ndim message describes weights, not activations.
    x, dy = np.asarray(inputs), np.asarray(grad_output)
    if x.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"inputs must have shape (batch, {w.shape[1]}), got {x.shape}")
    if dy.shape != (x.shape[0], w.shape[0]):
        raise ValueError(
            f"grad_output must have shape ({x.shape[0]}, {w.shape[0]}), got {dy.shape}"
        )
    x = _as_weight(x, "inputs")
    dy = _as_weight(dy, "grad_output")
    forward = forward_mask(w, n, m, layout="linear")
    backward = backward_mask(w, forward, permutation, n, m, layout="linear", rank=rank)
    zero = w.dtype.type(0)
    output = x @ np.where(forward, w, zero).T
    grad_input = dy @ np.where(backward, w, zero)
    grad_weight = srste_gradient(dy.T @ x, w, forward, decay)
    return BiMaskGemms(output, grad_input, grad_weight, forward, backward)
