"""SR-STE: the sparse-refined straight-through estimator (Zhou et al., ICLR 2021).

Training an N:M network from scratch keeps **dense** weights ``W``. Every step

1. the forward mask ``E`` is recomputed from the current ``|W|`` (N:M magnitude
   mask, :func:`nmref.magnitude_mask`), and the network runs with the sparse
   weights ``W~ = E * W``;
2. the loss gradient with respect to ``W~`` is applied to the dense ``W``
   (straight-through estimator, STE), plus -- for SR-STE -- a decay
   ``decay * (1 - E) * W`` on the **pruned** positions only:

   .. math:: W \\leftarrow W - \\gamma \\left(\\frac{\\partial L}{\\partial \\widetilde W}
             + \\lambda_W (\\bar E \\odot W)\\right)

   With ``decay = 0`` this is plain STE.

Everything here follows ``specs/srste.md``; the paper-vs-code discrepancies are
listed there. This module is pure NumPy.

References
----------
.. [1] Zhou et al., "Learning N:M Fine-grained Structured Sparse Neural Networks
   From Scratch", ICLR 2021: Fig. 2 and the SR-STE section (section numbers
   not verified, see ``specs/srste.md``). Code:
   ``NM-sparsity/NM-sparsity`` ``devkit/sparse_ops/sparse_ops.py`` (commit 3cebd6b).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_float_array, check_count, check_nonnegative
from nmref.layouts import Layout
from nmref.masks import magnitude_mask, to_bool_mask

__all__ = [
    "SRSTE_DEFAULT_DECAY",
    "SRSTEStep",
    "as_binary_mask",
    "sgd_step",
    "srste_gradient",
    "srste_step",
    "srste_train",
]

#: ``decay`` (the paper's lambda_W) of the released SR-STE and Bi-Mask code.
SRSTE_DEFAULT_DECAY = 2e-4


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


def as_binary_mask(
    mask: ArrayLike, shape: tuple[int, ...], name: str = "mask"
) -> NDArray[np.bool_]:
    """Return ``mask`` as a bool array of ``shape``; only 0/1 (or bool) values are accepted.

    Raises
    ------
    ValueError
        If the shape differs or an entry is neither 0 nor 1.
    TypeError
        If the dtype is not bool, integer or float.
    """
    array = np.asarray(mask)
    if array.shape != tuple(shape):
        raise ValueError(f"{name} has shape {array.shape}, expected {tuple(shape)}")
    return to_bool_mask(array, name)


# ----------------------------------------------------------------------------
# The gradient rule
# ----------------------------------------------------------------------------


def srste_gradient(
    grad_wrt_sparse_weight: ArrayLike, weight: ArrayLike, mask: ArrayLike, decay: float
) -> NDArray[np.floating]:
    r"""SR-STE gradient for the dense weights: ``grad + decay * (1 - mask) * weight``.

    .. math::

        g_W = \frac{\partial L}{\partial \widetilde W} + \lambda_W \,(1 - E) \odot W

    ``decay = 0`` gives the plain straight-through estimator (the gradient
    with respect to the sparse weights, applied unchanged to the dense ones).
    The decay is applied **once per step**: it is not multiplied by the batch
    size (the Bi-Mask DeiT code adds it once per sample, see ``specs/srste.md``).

    Parameters
    ----------
    grad_wrt_sparse_weight : array_like of float, shape S
        ``dL/dW~``, the loss gradient at the sparse weights ``W~ = mask * W``,
        already summed over the batch.
    weight : array_like of float, shape S
        Dense weights ``W``.
    mask : array_like of bool or 0/1, shape S
        Forward mask ``E`` (1 = kept) used for this step.
    decay : float
        ``lambda_W >= 0``; the released code uses ``2e-4``.

    Returns
    -------
    ndarray, shape S, dtype ``result_type(grad, weight)``
        On kept positions exactly ``grad``; on pruned ones ``grad + decay * w``.

    Raises
    ------
    TypeError
        If an array is not float (``mask``: not bool/numeric) or ``decay`` is not a number.
    ValueError
        If shapes differ, the mask is not 0/1, an array holds NaN, or ``decay``
        is negative or not finite.

    Notes
    -----
    Complexity O(size). References: Zhou et al. 2021, Fig. 2b and the SR-STE equation.

    Examples
    --------
    >>> srste_gradient([1.0, 1.0], [4.0, 2.0], [1, 0], decay=0.5)
    array([1., 2.])
    """
    grad = as_float_array(grad_wrt_sparse_weight, "grad_wrt_sparse_weight")
    dense = as_float_array(weight, "weight")
    if grad.shape != dense.shape:
        raise ValueError(
            f"grad_wrt_sparse_weight has shape {grad.shape} but weight has shape {dense.shape}"
        )
    kept = as_binary_mask(mask, dense.shape)
    lam = check_nonnegative(decay, "decay")
    dtype = np.result_type(grad, dense)
    result = grad.astype(dtype, copy=True)
    if lam != 0.0:
        pruned = ~kept
        result[pruned] += dtype.type(lam) * dense[pruned].astype(dtype)
    return result


# ----------------------------------------------------------------------------
# Reference optimiser
# ----------------------------------------------------------------------------


def sgd_step(
    weight: ArrayLike,
    gradient: ArrayLike,
    velocity: ArrayLike | None = None,
    *,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    dampening: float = 0.0,
    nesterov: bool = False,
) -> tuple[NDArray[np.floating], NDArray[np.floating] | None]:
    """One step of SGD with momentum and L2 weight decay, in PyTorch's order of operations.

    ``d = gradient + weight_decay * w``; with momentum, ``v = d`` on the first
    step (``velocity is None``) and ``v = momentum * v + (1 - dampening) * d``
    after; ``d = v`` (or ``d + momentum * v`` with Nesterov); ``w = w - lr * d``.
    This is ``torch.optim.SGD`` (tested against it), the optimiser of the
    SR-STE and Bi-Mask ImageNet recipes.

    Parameters
    ----------
    weight, gradient : array_like of float, same shape
    velocity : array_like of float or None
        Momentum buffer from the previous step; ``None`` on the first step.
    lr, momentum, weight_decay, dampening : float
        Non-negative hyperparameters.
    nesterov : bool

    Returns
    -------
    (new_weight, new_velocity)
        ``new_velocity`` is ``None`` when ``momentum == 0``.

    Raises
    ------
    TypeError, ValueError
        For non-float arrays, shape mismatches, NaN, or negative/non-finite
        hyperparameters; ``ValueError`` for Nesterov without momentum or with
        dampening (PyTorch's rule).

    Notes
    -----
    Complexity O(size).
    """
    w = as_float_array(weight, "weight")
    g = as_float_array(gradient, "gradient")
    if g.shape != w.shape:
        raise ValueError(f"gradient has shape {g.shape} but weight has shape {w.shape}")
    lr = check_nonnegative(lr, "lr")
    momentum = check_nonnegative(momentum, "momentum")
    weight_decay = check_nonnegative(weight_decay, "weight_decay")
    dampening = check_nonnegative(dampening, "dampening")
    if nesterov and (momentum == 0.0 or dampening != 0.0):
        raise ValueError("nesterov=True needs momentum > 0 and dampening == 0")
    # +-inf pass through as IEEE arithmetic makes them (spec section 2): inf - inf is NaN,
    # by design, not a warning the caller has to silence.
    with np.errstate(invalid="ignore", over="ignore"):
        dtype = np.result_type(w, g)
        w = w.astype(dtype, copy=False)
        step = g.astype(dtype, copy=True)
        if weight_decay != 0.0:
            step = step + dtype.type(weight_decay) * w
        new_velocity = None
        if momentum != 0.0:
            if velocity is None:
                new_velocity = step.copy()
            else:
                v = as_float_array(velocity, "velocity")
                if v.shape != w.shape:
                    raise ValueError(f"velocity has shape {v.shape} but weight has shape {w.shape}")
                new_velocity = (
                    v.astype(dtype) * dtype.type(momentum) + dtype.type(1.0 - dampening) * step
                )
            step = step + dtype.type(momentum) * new_velocity if nesterov else new_velocity
        return w - dtype.type(lr) * step, new_velocity


@dataclass(frozen=True)
class SRSTEStep:
    """Result of :func:`srste_step`.

    Attributes
    ----------
    weight : ndarray
        Dense weights after the update.
    velocity : ndarray or None
        Momentum buffer after the update (``None`` without momentum).
    mask : ndarray of bool
        Forward mask used in this step (computed from the weights *before* the update).
    gradient : ndarray
        The SR-STE gradient that was handed to the optimiser.
    """

    weight: NDArray[np.floating]
    velocity: NDArray[np.floating] | None
    mask: NDArray[np.bool_]
    gradient: NDArray[np.floating]


def srste_step(
    weight: ArrayLike,
    grad_fn: Callable[[NDArray[np.floating]], ArrayLike],
    n: int,
    m: int,
    *,
    lr: float,
    decay: float = SRSTE_DEFAULT_DECAY,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    velocity: ArrayLike | None = None,
    layout: Layout | None = None,
) -> SRSTEStep:
    """One SR-STE training step of one weight tensor.

    1. ``mask = magnitude_mask(weight, n, m, layout=layout)`` -- recomputed
       from the dense weights every step (no mask memory);
    2. ``g = grad_fn(mask * weight)`` -- the loss gradient at the sparse weights;
    3. ``g = srste_gradient(g, weight, mask, decay)``;
    4. :func:`sgd_step` with ``lr``, ``momentum``, ``weight_decay``.

    Parameters
    ----------
    weight : array_like of float, shape (out, in) or (out, in, *kernel)
    grad_fn : callable
        Maps the sparse weights (same shape) to ``dL/dW~`` (same shape).
    n, m : int
        N:M pattern, ``n`` kept of every ``m`` along the layout's reduction axis.
    lr, decay, momentum, weight_decay : float
        ``decay = 0`` is STE. Code defaults: ``decay = 2e-4``; SR-STE's ResNet-50
        recipe uses momentum 0.9 and weight decay 5e-5 (``specs/srste.md``).
    velocity : array_like or None
        Momentum buffer of the previous step.
    layout : {"linear", "channels", "flat"}, optional
        Grouping (see :mod:`nmref.layouts`).

    Returns
    -------
    SRSTEStep

    Raises
    ------
    TypeError, ValueError
        As :func:`nmref.magnitude_mask`, :func:`srste_gradient`, :func:`sgd_step`;
        ``ValueError`` if ``grad_fn`` returns a different shape.

    Notes
    -----
    Complexity O(size * m) plus the cost of ``grad_fn``.
    """
    dense = as_float_array(weight, "weight")
    mask = magnitude_mask(dense, n, m, layout=layout)
    sparse = np.where(mask, dense, dense.dtype.type(0))
    grad = np.asarray(grad_fn(sparse))
    if grad.shape != dense.shape:
        raise ValueError(f"grad_fn returned shape {grad.shape}, expected {dense.shape}")
    gradient = srste_gradient(grad, dense, mask, decay)
    new_weight, new_velocity = sgd_step(
        dense, gradient, velocity, lr=lr, momentum=momentum, weight_decay=weight_decay
    )
    return SRSTEStep(new_weight, new_velocity, mask, gradient)


def srste_train(
    weight: ArrayLike,
    grad_fn: Callable[[NDArray[np.floating]], ArrayLike],
    n: int,
    m: int,
    steps: int,
    *,
    lr: float,
    decay: float = SRSTE_DEFAULT_DECAY,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    layout: Layout | None = None,
) -> tuple[NDArray[np.floating], list[NDArray[np.bool_]]]:
    """Run :func:`srste_step` ``steps`` times; return the final weights and every mask.

    ``masks[t]`` is the forward mask used at step ``t``; ``masks[steps]`` is
    the mask of the final weights, so ``len(masks) == steps + 1`` (feed it to
    :func:`nmref.divergence.sparse_architecture_divergence`).

    Raises
    ------
    ValueError
        If ``steps < 0``; otherwise as :func:`srste_step`.
    """
    steps = check_count(steps, "steps")
    current = as_float_array(weight, "weight")
    velocity = None
    masks = []
    for _ in range(int(steps)):
        result = srste_step(
            current,
            grad_fn,
            n,
            m,
            lr=lr,
            decay=decay,
            momentum=momentum,
            weight_decay=weight_decay,
            velocity=velocity,
            layout=layout,
        )
        masks.append(result.mask)
        current, velocity = result.weight, result.velocity
    masks.append(magnitude_mask(current, n, m, layout=layout))
    return current, masks
