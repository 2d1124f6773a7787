"""1-D N:M masks: selection, validity checks and violation reports.

Implements ``specs/conventions.md``. ``n`` entries are kept in every group of
``m`` consecutive entries along one axis; among equal scores the entry with the
lower index in its group wins (rule C4).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._ordering import Descending
from nmref._validation import (
    NAN_HAS_NO_RANK,
    as_scores,
    check_axis,
    check_no_nan,
    check_remainder,
)
from nmref.layouts import Layout, from_reduction_matrix, to_reduction_matrix
from nmref.patterns import Pattern, check_pattern

__all__ = [
    "is_nm",
    "magnitude_mask",
    "nm_mask",
    "nm_mask_reference",
    "nm_violations",
    "to_magnitudes",
]

Remainder = Literal["error", "pad"]


# ----------------------------------------------------------------------------
# Input validation (the rules themselves are in nmref._validation)
# ----------------------------------------------------------------------------


def to_bool_mask(mask: ArrayLike, name: str = "mask") -> NDArray[np.bool_]:
    """Return a 0/1 mask as bool; any other value is an error, never read as "nonzero = kept".

    Raises
    ------
    TypeError
        If the dtype is not bool, integer or float.
    ValueError
        If an entry is neither 0 nor 1 (the message names the first one).
    """
    array = np.asarray(mask)
    if array.dtype.kind == "b":
        return array
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be bool or numeric 0/1, got dtype={array.dtype}")
    binary = (array == 0) | (array == 1)
    if not binary.all():
        index = np.unravel_index(int(np.flatnonzero(~binary)[0]), array.shape)
        raise ValueError(
            f"{name} must contain only 0 and 1; found {array[index]!r} at index "
            f"{tuple(int(i) for i in index)}"
        )
    return array == 1


def to_magnitudes(weights: ArrayLike, name: str = "weights") -> NDArray:
    """Return ``|weights|`` without overflow or lossy casts (rule C5).

    Float magnitudes keep their dtype. Signed integers map to the unsigned
    type of the same width, so ``|-128|`` of int8 is ``128`` (uint8), not
    ``-128``. Bools are returned unchanged.

    Examples
    --------
    >>> to_magnitudes(np.array([-128, 3], dtype=np.int8))
    array([128,   3], dtype=uint8)
    """
    array = as_scores(weights, name)
    if array.dtype.kind == "i":
        return np.abs(array).view(array.dtype.str.replace("i", "u"))
    if array.dtype.kind == "f":
        return np.abs(array)
    return array


# ----------------------------------------------------------------------------
# Reference implementation: reads like the rule, one group at a time
# ----------------------------------------------------------------------------


def nm_mask_reference(
    scores: ArrayLike, n: int, m: int, *, axis: int = -1, remainder: Remainder = "error"
) -> NDArray[np.bool_]:
    """Plain-Python N:M mask: the teaching version of :func:`nm_mask`.

    Same contract, inputs and errors as :func:`nm_mask`; it loops over groups
    in Python and sorts each one, so it is slow (use it as an oracle).

    Examples
    --------
    >>> nm_mask_reference([3, 1, 3, 3], 2, 4).astype(int)
    array([1, 0, 1, 0])
    """
    pattern = check_pattern(n, m)
    array = as_scores(scores)
    if array.ndim == 0:
        raise ValueError("scores must have at least one dimension")
    axis = check_axis(axis, array.ndim)
    length = array.shape[axis]
    check_remainder(length, pattern.m, axis, remainder)
    check_no_nan(array, "scores", NAN_HAS_NO_RANK)

    moved = np.moveaxis(array, axis, -1)
    mask = np.zeros(moved.shape, dtype=bool)
    for row_index in np.ndindex(moved.shape[:-1]):
        row = moved[row_index]
        for start in range(0, length, pattern.m):
            group = row[start : start + pattern.m]
            # A partial last group (remainder="pad") keeps min(n, its length).
            keep = min(pattern.n, len(group))
            # Sort by descending score; the index breaks ties (lower index first).
            # Python compares the NumPy scalars exactly, so no cast is involved.
            order = sorted(range(len(group)), key=lambda i, g=group: (Descending(g[i]), i))
            for i in order[:keep]:
                mask[(*row_index, start + i)] = True
    return np.moveaxis(mask, -1, axis)


# ----------------------------------------------------------------------------
# Fast implementation (Numba), tested identical to the reference
# ----------------------------------------------------------------------------


def _kernel_input(array: NDArray, use_magnitude: bool) -> tuple[NDArray, bool]:
    """Map scores to a dtype the kernel compares exactly, folding |.| in where safe."""
    kind = array.dtype.kind
    if kind == "b":
        return array.view(np.uint8), False
    if kind == "i":
        return (to_magnitudes(array), False) if use_magnitude else (array, False)
    if array.dtype == np.float16:
        # float16 -> float32 is exact, and numba has no float16 arithmetic on CPU.
        return array.astype(np.float32), use_magnitude
    return array, use_magnitude


def _nm_mask_fast(
    array: NDArray,
    pattern: Pattern,
    axis: int,
    remainder: str,
    use_magnitude: bool,
    name: str,
    original: NDArray | None = None,
) -> NDArray[np.bool_]:
    """Kernel driver; ``original`` is the caller's array, used to report NaN positions."""
    from nmref import _kernels  # deferred: importing numba costs ~0.3 s

    if array.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension")
    axis = check_axis(axis, array.ndim)
    length = array.shape[axis]
    check_remainder(length, pattern.m, axis, remainder)
    values, use_magnitude = _kernel_input(array, use_magnitude)

    moved = np.ascontiguousarray(np.moveaxis(values, axis, -1))
    mask = np.empty(moved.shape, dtype=bool)
    full = (length // pattern.m) * pattern.m
    # Full groups, then (remainder="pad") the partial last group keeping min(n, r).
    parts = [(0, full, pattern.n, pattern.m)]
    if full < length:
        parts.append((full, length, min(pattern.n, length - full), length - full))
    for start, stop, keep, group_size in parts:
        if stop == start or moved.size == 0:
            continue
        whole = (start, stop) == (0, length)
        block = moved if whole else np.ascontiguousarray(moved[..., start:stop])
        groups = block.reshape(-1, group_size)
        out = mask.reshape(-1, group_size) if whole else np.empty(groups.shape, dtype=bool)
        if group_size <= _kernels.RANK_COUNT_MAX_M:
            scratch = _kernels.rank_scratch(group_size, groups.dtype)
            first_nan = _kernels.nm_mask_groups(groups, keep, use_magnitude, out, *scratch)
        else:
            first_nan = _kernels.nm_mask_groups_sorted(groups, keep, use_magnitude, out)
        if first_nan >= 0:
            # Error path only: locate the first NaN in the caller's coordinates.
            source = array if original is None else original
            check_no_nan(source, name, NAN_HAS_NO_RANK)
        if not whole:
            mask[..., start:stop] = out.reshape(block.shape)
    return np.moveaxis(mask, -1, axis)


def nm_mask(
    scores: ArrayLike, n: int, m: int, *, axis: int = -1, remainder: Remainder = "error"
) -> NDArray[np.bool_]:
    r"""Keep the ``n`` highest-scoring entries in every group of ``m`` along ``axis``.

    For every group :math:`g` of ``m`` consecutive entries along ``axis`` the
    mask solves

    .. math::

        \max_{S_g \subseteq g,\ |S_g| = n} \sum_{i \in S_g} s_i ,

    whose solution is the ``n`` largest scores; among equal scores the entry
    with the lower index in its group is kept (conventions rule C4).

    Parameters
    ----------
    scores : array_like of bool, int or float16/32/64
        Scores, compared exactly as given (no lossy cast). For magnitude
        pruning pass ``|w|`` or use :func:`magnitude_mask`; any score works,
        e.g. Wanda's ``|w| * ||x||``. ``+inf`` ranks highest, ``-inf`` lowest;
        ``-0.0`` equals ``0.0``.
    n : int
        Entries kept per group, ``0 <= n <= m``.
    m : int
        Group size, ``m >= 1``.
    axis : int, default -1
        The grouped axis (the GEMM reduction axis for weights).
    remainder : {"error", "pad"}, default "error"
        What to do when ``scores.shape[axis]`` is not a multiple of ``m``.
        ``"error"`` raises. ``"pad"`` treats the last partial group of ``r``
        entries as padded with ``m - r`` entries that are never kept, so it
        keeps ``min(n, r)`` entries.

    Returns
    -------
    mask : ndarray of bool, same shape as ``scores``
        ``True`` = kept.

    Raises
    ------
    TypeError
        If ``n``/``m``/``axis`` are not integers or ``scores`` has another dtype.
    ValueError
        If ``n``/``m`` break ``0 <= n <= m``, ``m >= 1``; if ``scores`` contains
        NaN; if the grouped length is not a multiple of ``m`` and
        ``remainder="error"``; if ``scores`` is 0-d.

    See Also
    --------
    magnitude_mask
        The same rule on ``|w|`` of a weight, through its layout.
    is_nm
        Check that a mask keeps exactly ``n`` of every ``m``.
    nm_mask_reference
        The rule in plain Python, for reading.

    Notes
    -----
    Complexity: O(size * m) time by rank counting for ``m <= 32``, and
    O(size * log m) by a stable sort per group above that; O(size) memory.
    The result equals :func:`nm_mask_reference` bit for bit (tested).

    References
    ----------
    .. [1] Zhou et al., "Learning N:M Fine-grained Structured Sparse Neural
       Networks From Scratch", ICLR 2021, Sec. 3 (the N:M definition).

    Examples
    --------
    >>> nm_mask([0.5, 2.0, -1.0, 2.0], 2, 4).astype(int)
    array([0, 1, 0, 1])
    >>> nm_mask([[1, 1, 1, 1]], 2, 4).astype(int)   # ties: lower index wins
    array([[1, 1, 0, 0]])
    """
    pattern = check_pattern(n, m)
    array = as_scores(scores)
    return _nm_mask_fast(array, pattern, axis, remainder, use_magnitude=False, name="scores")


def magnitude_mask(
    weights: ArrayLike,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    remainder: Remainder = "error",
) -> NDArray[np.bool_]:
    """N:M magnitude mask of a Linear or convolution weight, grouped by its layout.

    Keeps the ``n`` entries of largest ``|w|`` in every group of ``m`` along
    the reduction axis defined by ``layout`` (see :mod:`nmref.layouts`).
    ``+inf`` and ``-inf`` both have the largest magnitude.

    Parameters
    ----------
    weights : array_like, shape (out, in) or (out, in, *kernel)
    n, m : int
        Pattern, ``n`` kept of every ``m``.
    layout : {"linear", "channels", "flat"}, optional
        ``"linear"`` for 2-D and ``"channels"`` otherwise by default.
    remainder : {"error", "pad"}, default "error"
        As in :func:`nm_mask`, along the layout's reduction axis.

    Returns
    -------
    mask : ndarray of bool, same shape as ``weights``

    Raises
    ------
    TypeError, ValueError
        As :func:`nm_mask`, plus a ``ValueError`` for a layout that does not
        fit ``weights.ndim``.

    See Also
    --------
    nm_mask
        The rule on scores along one axis.
    nmref.transposable_weight_mask
        Transposable masks of a weight.
    to_reduction_matrix
        The ``[rows, reduction]`` view that is grouped.

    Notes
    -----
    Complexity: O(size * m) (O(size * log m) for ``m > 32``).

    Examples
    --------
    >>> magnitude_mask(np.array([[1.0, -4.0, 3.0, -2.0]]), 2, 4).astype(int)
    array([[0, 1, 1, 0]])
    """
    pattern = check_pattern(n, m)
    array = as_scores(weights, "weights")
    matrix = to_reduction_matrix(array, layout)
    mask = _nm_mask_fast(
        matrix, pattern, -1, remainder, use_magnitude=True, name="weights", original=array
    )
    return from_reduction_matrix(mask, array.shape, layout)


# ----------------------------------------------------------------------------
# Validity
# ----------------------------------------------------------------------------


def _group_counts(
    mask: ArrayLike, pattern: Pattern, axis: int, remainder: str
) -> tuple[NDArray, NDArray, int]:
    array = np.asarray(mask)
    if array.ndim == 0:
        raise ValueError("mask must have at least one dimension")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"mask must have a bool or numeric dtype, got dtype={array.dtype}")
    axis = check_axis(axis, array.ndim)
    length = array.shape[axis]
    check_remainder(length, pattern.m, axis, remainder)
    kept = np.moveaxis(array != 0, axis, -1)
    num_groups = -(-length // pattern.m)
    padded = np.zeros((*kept.shape[:-1], num_groups * pattern.m), dtype=bool)
    padded[..., :length] = kept
    counts = padded.reshape(*kept.shape[:-1], num_groups, pattern.m).sum(axis=-1)
    # What each group must hold: n, or min(n, r) for a partial last group.
    required = np.full(num_groups, pattern.n, dtype=np.int64)
    if length % pattern.m:
        required[-1] = min(pattern.n, length % pattern.m)
    return counts, required, axis


def nm_violations(
    mask: ArrayLike,
    n: int,
    m: int,
    *,
    axis: int = -1,
    exact: bool = True,
    remainder: Remainder = "error",
) -> NDArray[np.intp]:
    """Coordinates of the groups of ``mask`` that break the N:M rule.

    Parameters
    ----------
    mask : array_like
        Nonzero entries count as kept (a bool mask or a masked weight).
    n, m : int
        Pattern.
    axis : int, default -1
        Grouped axis.
    exact : bool, default True
        ``True``: every group must keep exactly ``n``. ``False``: at most ``n``
        (what sparse tensor cores need).
    remainder : {"error", "pad"}, default "error"
        As in :func:`nm_mask`; with ``"pad"`` a partial last group of ``r``
        entries must keep ``min(n, r)`` (exact) or at most ``n``.

    Returns
    -------
    ndarray of intp, shape (num_violations, mask.ndim)
        One row per offending group, in C order: the group's index along
        every axis, where the grouped axis holds the **group number**
        (entry index // m). Empty when the mask is valid.

    Raises
    ------
    ValueError, TypeError
        Same rules as :func:`nm_mask` for ``n``, ``m``, ``axis`` and the length.

    Examples
    --------
    >>> nm_violations([[1, 1, 0, 0, 1, 1, 1, 0]], 2, 4)
    array([[0, 1]])
    """
    pattern = check_pattern(n, m)
    counts, required, axis = _group_counts(mask, pattern, axis, remainder)
    bad = counts != required if exact else counts > pattern.n
    coordinates = np.argwhere(bad)
    # counts has the group axis last; move that column back to `axis`.
    order = list(range(coordinates.shape[1] - 1))
    order.insert(axis, coordinates.shape[1] - 1)
    return coordinates[:, order].astype(np.intp)


def is_nm(
    mask: ArrayLike,
    n: int,
    m: int,
    *,
    axis: int = -1,
    exact: bool = True,
    remainder: Remainder = "error",
) -> bool:
    """Whether every group of ``m`` along ``axis`` keeps ``n`` (or at most ``n``) entries.

    Parameters are those of :func:`nm_violations`. Nonzero entries count as kept.

    Returns
    -------
    bool

    See Also
    --------
    nm_violations
        Where a mask breaks the rule.
    nmref.is_transposable
        The check for transposable masks.

    Examples
    --------
    >>> is_nm([1, 0, 1, 0], 2, 4)
    True
    >>> is_nm([1, 0, 0, 0], 2, 4), is_nm([1, 0, 0, 0], 2, 4, exact=False)
    (False, True)
    """
    pattern = check_pattern(n, m)
    counts, required, _ = _group_counts(mask, pattern, axis, remainder)
    bad = counts != required if exact else counts > pattern.n
    return not bool(bad.any())
