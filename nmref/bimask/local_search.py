"""**Beyond the paper.** Swap local search of the permutation criterion.

``specs/bimask.md`` section 9: starting from a permutation, swap rows between
backward blocks while the score of :func:`~nmref.bimask.scores.permutation_score`
strictly rises. The Numba kernel updates block counts incrementally; the
plain-NumPy oracle beside it rescores everything per try (identical, tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_count
from nmref.bimask.inputs import (
    _as_generator,
    _as_weight,
    _check_permutation,
    _forward_survivor_blocks,
    _resolve_layout,
    check_backward_groups,
)
from nmref.bimask.masks import forward_mask
from nmref.bimask.scores import (
    _block_counts_reference,
    _channel_rows,
    _criterion_values,
    permutation_score,
)
from nmref.bimask.settings import Criterion, check_criterion
from nmref.layouts import Layout
from nmref.patterns import Pattern, check_pattern

__all__ = ["LocalSearchResult", "local_search_permutation"]


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
        from nmref.bimask import _kernels

        accepted = int(
            _kernels.swap_local_search(
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
