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

One concept per module: :mod:`~nmref.bimask.settings` (hyperparameters, the named
choices), :mod:`~nmref.bimask.masks` (``F``, ``B`` and the gap between them),
:mod:`~nmref.bimask.scores` (the score of a permutation), :mod:`~nmref.bimask.random_search`
(the authors' search and its schedule), :mod:`~nmref.bimask.local_search` and
:mod:`~nmref.bimask.greedy` (beyond the paper), :mod:`~nmref.bimask.gemms` (the per-GEMM
contract), :mod:`~nmref.bimask.inputs` (argument rules and layout plumbing) and
:mod:`~nmref.bimask._kernels` (Numba). This package re-exports the public names.

References
----------
.. [1] Zhang, Luo, Lin, Zhong, Xie, Chao, Ji, "Bi-directional Masks for
   Efficient N:M Sparse Training", ICML 2023 (arXiv 2302.06058), abstract and
   Sec. 3, the method (section numbering not verified: ``specs/bimask.md``).
   Code: ``zyxxmu/Bi-Mask`` at commit e63cd37, ``CnnModels/utils/conv_type.py``
   and ``DeiT/timm/models/vision_transformer.py``.
"""

from __future__ import annotations

from nmref.bimask.gemms import BiMaskGemms, bimask_linear_gemms
from nmref.bimask.greedy import GreedyPermutation, greedy_permutation
from nmref.bimask.local_search import LocalSearchResult, local_search_permutation
from nmref.bimask.masks import GradientGap, backward_mask, forward_mask, gradient_gap
from nmref.bimask.random_search import (
    CANDIDATE_MEMORY_BUDGET as CANDIDATE_MEMORY_BUDGET,  # named by an error message
)
from nmref.bimask.random_search import PermutationSearch, is_search_step, search_permutation
from nmref.bimask.scores import permutation_score, score_permutations
from nmref.bimask.settings import BIMASK_CODE_DEFAULTS, BIMASK_PAPER_RUN, BiMaskSettings

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
