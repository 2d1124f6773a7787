"""Peer: PyTorch's ``_sparse_semi_structured_tile`` 4x4 greedy (2:4 only).

Follows the description in pytorch/pytorch
``aten/src/ATen/native/sparse/cuda/ComputeSparseTile.h`` (``LargestValuesGreedy``),
read for this audit, not copied: for each 4x4 tile, visit the 16 values from the
largest down and keep one whenever its row and its column keep fewer than 2. Its
own comment says the result "might select LESS than 8 values"; it is a valid
at-most-2 transposable mask, not always an exactly-2 one. The same rule as the
keep-greedy of Hubara et al.'s code (:func:`nmref.transposable_mask`,
``method="greedy"``) restricted to 2:4.

Two variants, as registered there: ``"largest_abs_values_greedy"`` ranks
``|w|`` (:func:`pytorch_tile_mask`), and the default algorithm (``""``, also
named ``"largest_values_greedy"``) ranks the **signed** value ``w``
(:func:`pytorch_tile_signed_mask`): on a weight it prefers large positive entries
over large negative ones, which is not magnitude pruning.

Uncertain: the kernel orders the 16 values with a branch-free sorting network
whose treatment of equal values we did not reproduce; here equal values are
visited lower flat index first (as nmref's greedy). Masks can differ from the
GPU's only on tiles with equal values.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from nmref.audit._blocks import from_blocks, to_blocks
from nmref.audit._scan import descending_order, keep_scan

__all__ = ["pytorch_tile_mask", "pytorch_tile_signed_mask"]


def pytorch_tile_mask(scores: NDArray, n: int = 2, m: int = 4) -> NDArray[np.bool_]:
    """``largest_abs_values_greedy`` on ``scores`` (ranked by ``|scores|``); 2:4 only.

    Examples
    --------
    Keeps 7 of 8 here (row 3 and column 3 keep one each), 39 in all: more than
    the exactly-2 optimum (35), and the at-most-2 optimum.

    >>> tile = np.array([[9, 8, 0, 0], [7, 0, 6, 0], [0, 5, 4, 0], [0, 0, 0, 0]])
    >>> pytorch_tile_mask(tile).astype(int)
    array([[1, 1, 0, 0],
           [1, 0, 1, 0],
           [0, 1, 1, 0],
           [0, 0, 0, 1]])
    """
    return _tile_greedy(np.abs(np.asarray(scores)), n, m)


def pytorch_tile_signed_mask(weights: NDArray, n: int = 2, m: int = 4) -> NDArray[np.bool_]:
    """The default algorithm (``""``): ranks the signed ``weights``; 2:4 only."""
    return _tile_greedy(np.asarray(weights), n, m)


def _tile_greedy(values: NDArray, n: int, m: int) -> NDArray[np.bool_]:
    if (n, m) != (2, 4):
        raise ValueError(f"the PyTorch tile greedy is defined for 2:4 only, got {n}:{m}")
    blocks = to_blocks(values, m)
    return from_blocks(keep_scan(descending_order(blocks), n, m), values.shape, m)
