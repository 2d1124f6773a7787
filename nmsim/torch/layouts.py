"""Weight layouts for torch tensors: the same mappings as :mod:`nmref.layouts`.

A weight is mapped to its 2-D ``[rows, reduction]`` matrix so that N:M groups
are ``m`` consecutive entries of one matrix row (``specs/conventions.md``, rule
C3). Validation and shapes come from :mod:`nmref.layouts`, so both packages
reject the same layouts with the same messages.
"""

from __future__ import annotations

import math

import torch

from nmref._validation import check_layout, check_shape
from nmref.layouts import Layout, default_layout, to_reduction_shape

__all__ = ["from_reduction_matrix", "to_reduction_matrix"]


def to_reduction_matrix(weight: torch.Tensor, layout: Layout | None = None) -> torch.Tensor:
    """Map a weight tensor to the 2-D ``[rows, reduction]`` matrix of its layout.

    Torch twin of :func:`nmref.layouts.to_reduction_matrix`: ``"linear"``
    returns ``weight``, ``"flat"`` reshapes ``[out, in, *k]`` to
    ``(out, in * prod(k))``, ``"channels"`` permutes to ``[*k, out, in]`` and
    reshapes to ``(prod(k) * out, in)``.

    Complexity: O(size) for the copy a permutation needs.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if layout is None:
        layout = default_layout(weight.dim())
    check_layout(layout, weight.dim())
    if layout == "linear":
        return weight
    out_channels, in_channels = weight.shape[:2]
    if layout == "flat":
        # explicit width: reshape(out, -1) is ambiguous for a weight without elements
        return weight.reshape(out_channels, math.prod(weight.shape[1:]))
    kernel_axes = tuple(range(2, weight.dim()))
    rows = math.prod(weight.shape[2:]) * out_channels
    return weight.permute(*kernel_axes, 0, 1).reshape(rows, in_channels)


def from_reduction_matrix(
    matrix: torch.Tensor, shape: tuple[int, ...] | torch.Size, layout: Layout | None = None
) -> torch.Tensor:
    """Inverse of :func:`to_reduction_matrix` (torch twin of the nmref function).

    Raises
    ------
    ValueError
        If the layout is unknown or ``matrix`` does not have the shape the
        layout implies for ``shape``.
    """
    if not isinstance(matrix, torch.Tensor):
        raise TypeError(f"matrix must be a torch.Tensor, got {type(matrix).__name__}")
    shape = check_shape(shape, "shape")
    if layout is None:
        layout = default_layout(len(shape))
    check_layout(layout, len(shape))
    expected = to_reduction_shape(shape, layout)
    if tuple(matrix.shape) != expected:
        raise ValueError(
            f"matrix shape {tuple(matrix.shape)} does not match layout={layout!r} of weight "
            f"shape {shape}: expected {expected}"
        )
    if layout == "linear":
        return matrix
    if layout == "flat":
        return matrix.reshape(shape)
    ndim = len(shape)
    permuted = matrix.reshape(*shape[2:], shape[0], shape[1])
    # [*kernel, out, in] -> [out, in, *kernel]
    return permuted.permute(ndim - 2, ndim - 1, *range(ndim - 2)).contiguous()
