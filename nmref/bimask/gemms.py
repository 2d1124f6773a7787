"""The per-GEMM contract of a Bi-Mask Linear layer (``specs/bimask.md`` section 6).

Forward ``Y = X (W*F)^T``, input gradient ``dX = dY (W*B)`` and the dense SR-STE
weight gradient, in NumPy: what a training implementation must compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.bimask.inputs import _as_weight
from nmref.bimask.masks import backward_mask, forward_mask
from nmref.bimask.settings import Rank
from nmref.srste import SRSTE_DEFAULT_DECAY, srste_gradient

__all__ = ["BiMaskGemms", "bimask_linear_gemms"]


@dataclass(frozen=True)
class BiMaskGemms:
    """The three GEMMs of one Bi-Mask Linear layer (:func:`bimask_linear_gemms`).

    Attributes
    ----------
    output : ndarray, shape (batch, out)
        ``Y = X (W*F)^T``.
    grad_input : ndarray, shape (batch, in)
        ``dX = dY (W*B)``, equal to ``dY[:, pi] (W*B)[pi, :]``.
    grad_weight : ndarray, shape (out, in)
        ``dW = dY^T X + decay * (1 - F) * W`` (dense, STE + SR-STE).
    forward_mask, backward_mask : ndarray of bool, shape (out, in)
    """

    output: NDArray[np.floating]
    grad_input: NDArray[np.floating]
    grad_weight: NDArray[np.floating]
    forward_mask: NDArray[np.bool_]
    backward_mask: NDArray[np.bool_]


def bimask_linear_gemms(
    inputs: ArrayLike,
    weight: ArrayLike,
    grad_output: ArrayLike,
    permutation: ArrayLike,
    n: int,
    m: int,
    *,
    decay: float = SRSTE_DEFAULT_DECAY,
    rank: Rank = "survivors",
) -> BiMaskGemms:
    """Forward, input-gradient and weight-gradient GEMMs of a Bi-Mask Linear layer.

    .. math::

        Y = X (W \\odot F)^T, \\quad
        dX = dY (W \\odot B), \\quad
        dW = dY^T X + \\lambda (1 - F) \\odot W

    ``F`` and ``B`` are recomputed here from ``weight`` (as the code does
    every step); ``dW`` is dense (no mask), the decay applied once.

    Parameters
    ----------
    inputs : array_like of float, shape (batch, in)
    weight : array_like of float, shape (out, in)
    grad_output : array_like of float, shape (batch, out)
    permutation : array_like of int, shape (out,)
    n, m : int
    decay : float, default 2e-4
    rank : {"survivors", "masked_magnitude"}
        As :func:`backward_mask`.

    Returns
    -------
    BiMaskGemms

    Raises
    ------
    ValueError, TypeError
        For shape mismatches, non-float arrays, NaN, or as :func:`backward_mask`.

    Notes
    -----
    Complexity O(batch * out * in). A convolution is the same after im2col
    with ``layout="flat"`` (the code's ``unfold``). Zhang et al. 2023, Sec. 3;
    code ``MyConv2d_Lay`` / the DeiT Linear function.
    """
    w = _as_weight(weight)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {w.shape}")
    # Shapes first: _as_weight's ndim message describes weights, not activations.
    x, dy = np.asarray(inputs), np.asarray(grad_output)
    if x.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"inputs must have shape (batch, {w.shape[1]}), got {x.shape}")
    if dy.shape != (x.shape[0], w.shape[0]):
        raise ValueError(
            f"grad_output must have shape ({x.shape[0]}, {w.shape[0]}), got {dy.shape}"
        )
    x = _as_weight(x, "inputs")
    dy = _as_weight(dy, "grad_output")
    forward = forward_mask(w, n, m, layout="linear")
    backward = backward_mask(w, forward, permutation, n, m, layout="linear", rank=rank)
    zero = w.dtype.type(0)
    output = x @ np.where(forward, w, zero).T
    grad_input = dy @ np.where(backward, w, zero)
    grad_weight = srste_gradient(dy.T @ x, w, forward, decay)
    return BiMaskGemms(output, grad_input, grad_weight, forward, backward)
