"""Hyperparameters of a Bi-Mask run and its named choices (``specs/bimask.md`` sections 7, 8).

The released code's defaults and the paper's runs as :class:`BiMaskSettings`, and the
two choices every function shares: the permutation ``criterion`` (section 4) and the
backward-mask ``rank`` (section 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nmref._validation import check_choice
from nmref.srste import SRSTE_DEFAULT_DECAY

__all__ = [
    "BIMASK_CODE_DEFAULTS",
    "BIMASK_PAPER_RUN",
    "BiMaskSettings",
    "Criterion",
    "Rank",
    "check_criterion",
    "check_rank",
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


def check_rank(rank: str) -> None:
    """``rank`` is a known ranking of the backward mask (shared with the torch twin)."""
    check_choice(rank, "rank", _RANKS)


def check_criterion(criterion: str) -> int:
    """The criterion's code for the kernels: its index in ``_CRITERIA``."""
    return check_choice(criterion, "criterion", _CRITERIA)
