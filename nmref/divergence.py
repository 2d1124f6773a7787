"""Mask change metrics: flips, flip rate, and the Sparse Architecture Divergence (SAD).

Definitions (``specs/srste.md``, section "SAD"):

* ``mask_flips(a, b)`` -- the Hamming distance: the number of positions whose
  kept/pruned state differs between masks ``a`` and ``b``.
* ``flip_rate(a, b)`` -- ``mask_flips(a, b) / a.size``.
* SAD between training points ``t1`` and ``t2`` -- ``mask_flips(E_t1, E_t2)``,
  the number of weights whose state changed (Zhou et al., ICLR 2021,
  which introduces SAD to measure how much the sparse topology changes; the
  exact equation of the paper was not available to us). Normalised by the
  mask size it is the per-update SAD that Google's ``praxis`` library
  tracks (``#mask changes / #params``) and the "flip rate" of Hu et al. 2024.

This module is pure NumPy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.masks import to_bool_mask

__all__ = [
    "flip_rate",
    "mask_flips",
    "mask_transitions",
    "sparse_architecture_divergence",
]


def _as_mask(mask: ArrayLike, name: str) -> NDArray[np.bool_]:
    array = np.asarray(mask)
    return to_bool_mask(array, name)


def _pair(a: ArrayLike, b: ArrayLike) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    first, second = _as_mask(a, "a"), _as_mask(b, "b")
    if first.shape != second.shape:
        raise ValueError(f"masks must have the same shape, got {first.shape} and {second.shape}")
    return first, second


def mask_flips(a: ArrayLike, b: ArrayLike) -> int:
    """Hamming distance between two binary masks: positions whose state differs.

    Parameters
    ----------
    a, b : array_like of bool or 0/1, same shape

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If the shapes differ or an entry is not 0/1.
    TypeError
        If a dtype is not bool or numeric.

    Notes
    -----
    Complexity O(size).

    Examples
    --------
    >>> mask_flips([1, 1, 0, 0], [1, 0, 1, 0])
    2
    """
    first, second = _pair(a, b)
    return int(np.count_nonzero(first != second))


def flip_rate(a: ArrayLike, b: ArrayLike) -> float:
    """Fraction of positions whose state differs: ``mask_flips(a, b) / size``.

    Returns ``0.0`` for empty masks.

    Examples
    --------
    >>> flip_rate([1, 1, 0, 0], [1, 0, 1, 0])
    0.5
    """
    first, second = _pair(a, b)
    if first.size == 0:
        return 0.0
    return int(np.count_nonzero(first != second)) / first.size


def mask_transitions(a: ArrayLike, b: ArrayLike) -> tuple[int, int]:
    """Split the flips from ``a`` to ``b`` into ``(kept_to_pruned, pruned_to_kept)``.

    For N:M masks with exactly ``n`` kept per group the two counts are equal
    (every weight that leaves a group is replaced by one that enters it).

    Examples
    --------
    >>> mask_transitions([1, 1, 0, 0], [1, 0, 0, 1])
    (1, 1)
    """
    first, second = _pair(a, b)
    return int(np.count_nonzero(first & ~second)), int(np.count_nonzero(~first & second))


def sparse_architecture_divergence(
    masks: Sequence[ArrayLike],
    *,
    reference: Literal["previous", "first"] = "previous",
    normalize: bool = False,
) -> NDArray:
    """SAD over a sequence of masks ``E_0, E_1, ..., E_T`` of one layer.

    ``reference="previous"`` returns ``[SAD(E_0, E_1), ..., SAD(E_{T-1}, E_T)]``
    (the change per step; its sum bounds ``SAD(E_0, E_T)`` from above);
    ``reference="first"`` returns ``[SAD(E_0, E_1), ..., SAD(E_0, E_T)]``
    (the drift from the start). ``SAD(a, b) = mask_flips(a, b)``, divided by
    the mask size when ``normalize`` (then it is a flip rate in ``[0, 1]``).

    Parameters
    ----------
    masks : sequence of array_like of bool or 0/1, all of one shape
        At least one mask.
    reference : {"previous", "first"}
    normalize : bool

    Returns
    -------
    ndarray of int64 (float64 when ``normalize``), shape (len(masks) - 1,)

    Raises
    ------
    ValueError
        If ``masks`` is empty, shapes differ, an entry is not 0/1, or
        ``reference`` is unknown.

    Notes
    -----
    Complexity O(T * size). Definition and source: module docstring and
    ``specs/srste.md``.

    Examples
    --------
    >>> sparse_architecture_divergence([[1, 0], [0, 1], [0, 1]])
    array([2, 0])
    >>> sparse_architecture_divergence([[1, 0], [0, 1], [0, 1]], reference="first")
    array([2, 2])
    """
    if reference not in ("previous", "first"):
        raise ValueError(f"reference={reference!r} must be 'previous' or 'first'")
    if len(masks) == 0:
        raise ValueError("masks must hold at least one mask")
    arrays = [_as_mask(mask, f"masks[{i}]") for i, mask in enumerate(masks)]
    shape = arrays[0].shape
    for i, array in enumerate(arrays):
        if array.shape != shape:
            raise ValueError(f"masks[{i}] has shape {array.shape}, expected {shape}")
    values = np.empty(len(arrays) - 1, dtype=np.int64)
    for t in range(1, len(arrays)):
        base = arrays[t - 1] if reference == "previous" else arrays[0]
        values[t - 1] = np.count_nonzero(base != arrays[t])
    if normalize:
        return values / _shape_size(shape)
    return values


def _shape_size(shape: tuple[int, ...]) -> int:
    """Number of entries of ``shape`` (at least 1, so empty masks normalise to 0)."""
    return max(int(np.prod(shape, dtype=np.int64)), 1)
