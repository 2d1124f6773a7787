"""Argument rules and the ``(taps, out, reduction)`` view of a weight (``specs/bimask.md`` 1).

Shared by every Bi-Mask module; :func:`check_backward_groups` is also called by the torch
twin (:mod:`nmsim.torch.bimask`), so both paths refuse the same inputs with the same words.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import (
    NAN_HAS_NO_MAGNITUDE,
    check_float_dtype,
    check_no_nan,
    check_permutation,
    is_integer,
)
from nmref.layouts import Layout, default_layout, from_reduction_matrix, to_reduction_matrix
from nmref.patterns import Pattern
from nmref.srste import as_binary_mask

__all__ = ["check_backward_groups"]


def _as_weight(weight: ArrayLike, name: str = "weight") -> NDArray[np.floating]:
    array = np.asarray(weight)
    check_float_dtype(array, name)
    if array.ndim < 2:
        raise ValueError(
            f"{name} must have ndim >= 2 ([out, in] or [out, in, *kernel]), got {array.ndim}"
        )
    check_no_nan(array, name, NAN_HAS_NO_MAGNITUDE)
    return array


def _resolve_layout(shape: tuple[int, ...], layout: Layout | None, straddle: bool) -> Layout:
    resolved = default_layout(len(shape)) if layout is None else layout
    if straddle and resolved == "channels":
        raise ValueError(
            "straddle=True reproduces the authors' flattened grouping and needs "
            "layout='linear' or 'flat', not 'channels'"
        )
    return resolved


def _to_blocks(array: NDArray, layout: Layout) -> NDArray:
    """Weight-shaped array -> ``(taps, out_channels, reduction)``.

    For ``"channels"`` the reduction matrix has rows ``tap * out + o``; the
    other layouts have one tap.
    """
    matrix = to_reduction_matrix(array, layout)
    taps = int(np.prod(array.shape[2:], dtype=np.int64)) if layout == "channels" else 1
    return matrix.reshape(taps, array.shape[0], matrix.shape[1])


def _from_blocks(blocks: NDArray, shape: tuple[int, ...], layout: Layout) -> NDArray:
    taps, out_channels, width = blocks.shape
    return from_reduction_matrix(blocks.reshape(taps * out_channels, width), shape, layout)


def _check_permutation(permutation: ArrayLike, size: int, name: str = "permutation") -> NDArray:
    return check_permutation(permutation, size, name, entry="output channel")


def check_backward_groups(out_channels: int, total: int, pattern: Pattern, straddle: bool) -> None:
    """Backward N:M groups along ``out`` fit ``out_channels`` (shared with the torch twin)."""
    if straddle:
        if total % pattern.m:
            raise ValueError(
                f"straddle=True groups the whole weight ({total} entries) in groups of "
                f"m={pattern.m}; its size must be a multiple of m"
            )
    elif out_channels % pattern.m:
        raise ValueError(
            f"weight has {out_channels} output channels; the backward mask groups m={pattern.m} "
            "consecutive (permuted) output channels, so out_channels must be a multiple of m "
            "(straddle=True reproduces the authors' code, whose groups then cross columns)"
        )


def _forward_survivor_blocks(
    mask: ArrayLike, shape: tuple[int, ...], layout: Layout, name: str = "forward_mask"
) -> NDArray[np.uint8]:
    return _to_blocks(as_binary_mask(mask, shape, name), layout).astype(np.uint8)


def _as_generator(rng: object) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if is_integer(rng):
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng={rng!r} must be a numpy.random.Generator (or an int seed); "
        "the search is random and must be reproducible"
    )
