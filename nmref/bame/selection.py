"""The joint assessment of LMA and OBF, and the blocks that adapt (``specs/bame.md`` 3.4, 3.8).

Candidate blocks are ranked by their combined score in a total order
``(-score, row, group)``; the ``k(t)`` best with a positive score adapt.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_scores, refuse_masked
from nmref.bame.config import BameConfig, check_selection

__all__ = ["combined_scores", "select_blocks"]


def combined_scores(
    reduction: ArrayLike, frequency: ArrayLike, candidates: ArrayLike, config: BameConfig
) -> NDArray[np.float64]:
    """The joint assessment of LMA and OBF (⚑ spec 3.4); 0.0 outside candidates.

    ``freeze_then_rank``: ``R``. ``multiplicative``: ``R * (1 - f) ** gamma``.
    """
    reduction_array = np.asarray(reduction, dtype=np.float64)
    candidate_array = np.asarray(candidates, dtype=bool)
    if config.combine == "freeze_then_rank":
        score = reduction_array.copy()
    else:
        # math.pow per block: NumPy's vectorised power may differ from libm in the
        # last bit on some CPUs, and the oracle must agree exactly.
        gamma = float(config.product_exponent)
        frequency_array = np.asarray(frequency, dtype=np.float64)
        weight = np.array(
            [math.pow(1.0 - f, gamma) for f in frequency_array.ravel().tolist()], dtype=np.float64
        ).reshape(frequency_array.shape)
        score = reduction_array * weight
    return np.where(candidate_array, score, 0.0)


def select_blocks(scores: ArrayLike, candidates: ArrayLike, budget: int) -> NDArray[np.bool_]:
    """The blocks that adapt: the ``budget`` best candidates with a **positive** score.

    Candidates with ``score > 0`` are ordered by ``(-score, row, group)`` (a total
    order, so the result does not depend on any iteration order) and the first
    ``budget`` are taken.

    Parameters
    ----------
    scores : float array, shape (rows, groups)
    candidates : bool array, same shape
    budget : int >= 0

    Returns
    -------
    bool array, shape (rows, groups)

    Examples
    --------
    >>> select_blocks(np.array([[0.5, 2.0, 2.0, -1.0]]), np.ones((1, 4), bool), 2).astype(int)
    array([[0, 1, 1, 0]])
    """
    score_array = as_scores(scores).astype(np.float64)
    refuse_masked(candidates, "candidates")
    candidate_array = np.asarray(candidates)
    if candidate_array.dtype != np.bool_:
        raise TypeError(f"candidates must be a bool array, got dtype={candidate_array.dtype}")
    check_selection(score_array.shape, candidate_array.shape, budget)
    if np.isnan(score_array[candidate_array]).any():
        raise ValueError("scores must not be NaN at candidate blocks")
    flat_scores = score_array.ravel()
    eligible = np.flatnonzero(candidate_array.ravel() & (flat_scores > 0))
    # lexsort: last key is primary -> descending score, then ascending flat index.
    order = eligible[np.lexsort((eligible, -flat_scores[eligible]))]
    selected = np.zeros(flat_scores.size, dtype=bool)
    selected[order[:budget]] = True
    return selected.reshape(score_array.shape)
