"""Peer: the 90-pattern 2:4 search of Hu et al. 2024 (transposable 2:4 pre-training).

Follows the description of Hu et al., "Accelerating Transformer Pre-training with
2:4 Sparsity" (ICML 2024) and its code ``huyz2023/2by4-pretrain``,
``sparse/transposable_semi_structured.py`` (read for this audit, not copied): a
Triton kernel holds a table of the 90 transposable 2:4 patterns (90 = the 4x4 0/1
matrices with two ones per row and per column), computes for each 4x4 block the
dot product of every pattern with ``|w|`` and keeps the ``argmax``.

Here: the table is generated (not copied) in **descending lexicographic order of
the row-major 16-entry keep-vector**; the rows of the published table that we
checked (its leading rows, its last row, the transitions between groups of equal
first rows) follow that order, and we assume the rest does. ``tl.argmax`` returns the first
maximum, so among patterns with equal sums the lexicographically greatest wins:
**the same tie rule as nmref's canonical exact mask** (spec T3). With exact sums
the peer is therefore the exact optimum, bit for bit; it departs only where the
float32 sums (the kernel's accumulator) misorder two patterns whose exact sums
differ by less than a rounding. Uncertain: on Ampere and later GPUs ``tl.dot``
on float32 inputs defaults to TF32 (10-bit mantissa) inputs, which would misorder
more near ties; not modelled (float32 inputs, float32 left-to-right sums).
"""

from __future__ import annotations

from functools import cache
from itertools import product

import numpy as np
from numpy.typing import NDArray

from nmref.audit._blocks import from_blocks, to_blocks
from nmref.audit.apex import float32_pattern_sums

__all__ = ["hu2024_mask", "hu2024_patterns"]


@cache
def hu2024_patterns() -> NDArray[np.bool_]:
    """The 90 transposable 2:4 patterns, descending lexicographic, shape (90, 16).

    Examples
    --------
    >>> table = hu2024_patterns()
    >>> table.shape, table[0].astype(int).tolist()
    ((90, 16), [1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1])
    """
    found = []
    # product over {1, 0} in that order enumerates 16-bit vectors in descending lexicographic order
    for bits in product((1, 0), repeat=16):
        tile = np.array(bits).reshape(4, 4)
        if (tile.sum(axis=0) == 2).all() and (tile.sum(axis=1) == 2).all():
            found.append(bits)
    return np.array(found, dtype=bool)


def hu2024_mask(scores: NDArray, n: int = 2, m: int = 4) -> NDArray[np.bool_]:
    """Best of the 90 patterns per 4x4 tile by float32 sum of ``|scores|``, first maximum.

    Examples
    --------
    >>> hu2024_mask(np.ones((4, 4))).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 0, 0],
           [0, 0, 1, 1],
           [0, 0, 1, 1]])
    """
    if (n, m) != (2, 4):
        raise ValueError(f"the Hu et al. 2024 search is defined for 2:4 only, got {n}:{m}")
    magnitudes = np.abs(np.asarray(scores))
    blocks = to_blocks(magnitudes, 4)
    patterns = hu2024_patterns()
    best = np.argmax(float32_pattern_sums(blocks, patterns), axis=1)
    return from_blocks(patterns[best].reshape(-1, 4, 4), magnitudes.shape, 4)
