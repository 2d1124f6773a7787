"""Oscillation-aware block freezing, OBF (``specs/bame.md`` sections 3.1, 3.3, 3.6).

A block whose mask keeps flipping is frozen; the others are the *candidate*
blocks, the only ones that may adapt and the only ones whose pruned positions
get weight-gradient entries at an update step.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.bame.config import BameConfig, BameState, _as_mask

__all__ = ["candidate_blocks", "gradient_positions", "oscillation_frequency"]


def oscillation_frequency(state: BameState, config: BameConfig) -> NDArray[np.float64]:
    """Per-block oscillation frequency in ``[0, 1]`` (⚑ spec 3.3).

    ``"revert_rate"``: ``reverts / max(1, num_updates)``; ``"change_rate"``:
    ``changes / max(1, num_updates)``; ``"change_ema"``: the EMA of the changed
    indicator.
    """
    if config.oscillation == "change_ema":
        return state.change_ema.copy()
    counts = state.reverts if config.oscillation == "revert_rate" else state.changes
    return counts.astype(np.float64) / max(1, state.num_updates)


def candidate_blocks(state: BameState, config: BameConfig) -> NDArray[np.bool_]:
    """Blocks that may adapt at the next update (⚑ spec 3.4).

    A block is a candidate unless its oscillation frequency exceeds
    ``freeze_threshold``, it carries a sticky freeze flag, or (``multiplicative``)
    its weight ``(1 - frequency) ** gamma`` is 0, so that it could never be chosen.
    Only candidates get gradient entries at pruned positions.
    """
    frequency = oscillation_frequency(state, config)
    candidates = (frequency <= config.freeze_threshold) & ~state.frozen
    if config.combine == "multiplicative" and config.product_exponent > 0:
        candidates &= frequency < 1.0
    return candidates


def gradient_positions(mask: ArrayLike, candidates: ArrayLike, m: int) -> NDArray[np.bool_]:
    """Positions whose weight gradient the spec computes at an update step.

    Kept positions of every block plus **all** positions of candidate blocks
    (spec 3.6). At other steps it is ``mask`` alone.
    """
    mask_array = _as_mask(mask, m)
    candidate_array = np.asarray(candidates, dtype=bool)
    expanded = np.repeat(candidate_array, m, axis=1)
    return mask_array | expanded
