"""**Beyond the paper.** Greedy construction of the row permutation, block by block.

``specs/bimask.md`` section 9: each slot of a backward block takes, among the
next ``window`` unused rows, the one that raises the block's criterion most.
Numba kernel and plain-Python oracle, identical (tested).
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
    _forward_survivor_blocks,
    _resolve_layout,
    check_backward_groups,
)
from nmref.bimask.masks import forward_mask
from nmref.bimask.scores import _channel_rows, _criterion_values, permutation_score
from nmref.bimask.settings import Criterion, check_criterion
from nmref.layouts import Layout
from nmref.patterns import Pattern, check_pattern

__all__ = ["GreedyPermutation", "greedy_permutation"]


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
        from nmref.bimask import _kernels

        permutation = np.empty(out_channels, dtype=np.int64)
        _kernels.greedy_blocks(
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
