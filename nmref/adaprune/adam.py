r"""The paper's reconstruction: Adam on the layer's output MSE, re-masked every step (spec A4).

The authors minimise the mean squared error between the sparse layer's outputs and the
reference layer's outputs on cached calibration inputs, with Adam (``torch.optim.Adam``
defaults but the learning rates: 1e-3 for the weights, 1e-2 for the bias), 1000
iterations of a random batch of 50 samples, multiplying the weights by the mask after every
step. The loss of a batch ``B`` is

.. math::

    L = \frac{1}{|B|\,\mathrm{out}} \sum_{s \in B} \lVert U x_s + \beta - W x_s - b \rVert^2 .

This module runs that procedure in float64 NumPy, with PyTorch's Adam update in PyTorch's
operation order, and reports how far it stops from the exact optimum of
:func:`nmref.adaprune.reconstruct_exact` on the whole calibration set (the exact optimum
is a lower bound of every feasible point, so the gap is ``>= 0`` up to rounding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_nonnegative, check_positive_integer, is_integer
from nmref.adaprune._inputs import as_bias, as_inputs, as_weight, check_magnitudes, check_start
from nmref.adaprune.exact import Reconstruction, reconstruct_exact
from nmref.adaprune.gram import InputGram
from nmref.adaprune.quality import row_errors, weight_difference
from nmref.masks import to_bool_mask

__all__ = [
    "AdamReconstruction",
    "AdamSettings",
    "adam_step",
    "as_generator",
    "minibatches",
    "reconstruct_adam",
    "rounding_bound",
]

_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class AdamSettings:
    """The paper's Adam procedure (``AdaPrune/utils/adaprune.py``, ``adaprune``).

    Attributes
    ----------
    lr_weight : float, default 1e-3
        Learning rate of the weights (the code's ``lr_w``; its ``lr1`` argument is unused).
    lr_bias : float, default 1e-2
        Learning rate of the bias (``lr_b``).
    iterations : int, default 1000
    batch_size : int, default 50
        Samples per step, drawn without replacement (all of them when fewer).
    beta1, beta2, eps : float, default 0.9, 0.999, 1e-8
        ``torch.optim.Adam``'s defaults, which the code keeps.
    """

    lr_weight: float = 1e-3
    lr_bias: float = 1e-2
    iterations: int = 1000
    batch_size: int = 50
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        for name in ("lr_weight", "lr_bias", "eps"):
            check_nonnegative(getattr(self, name), name)
        for name in ("beta1", "beta2"):
            value = check_nonnegative(getattr(self, name), name)
            if value >= 1.0:
                raise ValueError(f"{name}={value!r} must be in [0, 1)")
        check_positive_integer(self.batch_size, "batch_size")
        if not is_integer(self.iterations) or self.iterations < 0:
            raise ValueError(f"iterations={self.iterations!r} must be a non-negative integer")


@dataclass(frozen=True, eq=False)
class AdamReconstruction:
    """The result of the paper's Adam procedure, with its gap to the exact optimum.

    Attributes
    ----------
    weight : ndarray of float64, shape (out, in)
        Zero (``+0.0``) off the mask.
    bias : ndarray of float64, shape (out,), or None
    objective : float
        ``||X (W - U)^T + 1 (b - beta)^T||_F^2`` on the whole calibration set.
    losses : ndarray of float64, shape (iterations,)
        The batch loss ``L`` before each step (the code's ``losses``).
    exact : Reconstruction or None
        The exact optimum from the same start (``certify=True``).
    gap : float or None
        ``objective - exact.objective``: ``>= 0`` in exact arithmetic.
    gap_tolerance : float or None
        A bound on the rounding of the two objectives: the computed gap is
        ``>= -gap_tolerance`` unless the exact solve itself lost accuracy (spec A4).
    """

    weight: NDArray[np.float64]
    bias: NDArray[np.float64] | None
    objective: float
    losses: NDArray[np.float64]
    exact: Reconstruction | None
    gap: float | None
    gap_tolerance: float | None


def as_generator(rng: object) -> np.random.Generator:
    """``rng`` as a Generator: a Generator as is (its state advances), an int as a seed."""
    if isinstance(rng, np.random.Generator):
        return rng
    if is_integer(rng):
        return np.random.default_rng(int(rng))  # type: ignore[arg-type]
    raise TypeError(
        f"rng={rng!r} must be a numpy.random.Generator or an int seed: the batches are "
        "random and must be reproducible"
    )


def minibatches(
    samples: int, settings: AdamSettings, rng: np.random.Generator
) -> list[NDArray[np.intp]]:
    """The batch of every iteration, in order: ``rng.permutation(samples)[:batch_size]``.

    One ``permutation`` call per iteration and nothing else from ``rng``: the stream the
    authors draw with ``torch.randperm(S)[:50]``, in NumPy's generator.
    """
    return [rng.permutation(samples)[: settings.batch_size] for _ in range(settings.iterations)]


def adam_step(
    parameter: NDArray[np.float64],
    gradient: NDArray[np.float64],
    first: NDArray[np.float64],
    second: NDArray[np.float64],
    step: int,
    lr: float,
    settings: AdamSettings,
) -> NDArray[np.float64]:
    """One ``torch.optim.Adam`` step (no weight decay, no amsgrad), PyTorch's operation order.

    Updates the moment estimates ``first`` and ``second`` in place and returns the new
    parameter: ``m += (1 - beta1) (g - m)``; ``v = beta2 v + (1 - beta2) g^2``;
    ``p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``.
    """
    first += (1.0 - settings.beta1) * (gradient - first)
    second *= settings.beta2
    second += (1.0 - settings.beta2) * gradient * gradient
    step_size = lr / (1.0 - settings.beta1**step)
    denominator = np.sqrt(second) / math.sqrt(1.0 - settings.beta2**step) + settings.eps
    return parameter - step_size * (first / denominator)


def rounding_bound(
    inputs: NDArray[np.float64],
    difference: NDArray[np.float64],
    bias_difference: NDArray[np.float64] | None,
) -> float:
    """``3 (in + 2) eps sum_{s,r} (|x_s| |d_r| + |c_r|)^2``: the rounding of an objective."""
    size = np.abs(inputs) @ np.abs(difference).T
    if bias_difference is not None:
        size = size + np.abs(bias_difference)
    return 3.0 * (inputs.shape[1] + 2) * _EPS * float(np.sum(size * size))


def reconstruct_adam(
    weight: ArrayLike,
    mask: ArrayLike,
    inputs: ArrayLike,
    *,
    bias: ArrayLike | None = None,
    start: ArrayLike | None = None,
    refit_bias: bool = True,
    settings: AdamSettings | None = None,
    rng: np.random.Generator | int = 0,
    certify: bool = True,
) -> AdamReconstruction:
    r"""AdaPrune's Adam reconstruction of the kept weights (the paper's procedure, faithful).

    Minimises the batch MSE ``L`` (module docstring) over the kept weights (and the bias)
    by Adam, starting from ``start``, multiplying the weights by the mask after each step.

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        The reference layer whose outputs are the targets ``W x + b``.
    mask : array_like of bool or 0/1, shape (out, in)
    inputs : array_like, shape (samples, in)
        Calibration inputs themselves: the batches are sampled, so an
        :class:`~nmref.adaprune.gram.InputGram` does not do here.
    bias : array_like of float, shape (out,), optional
    start : array_like of float, shape (out, in), optional
        Starting weights, zero off the mask; default ``mask * weight``. The paper starts
        from the absorbed weights (:func:`nmref.adaprune.absorb_pruned_mass`).
    refit_bias : bool, default True
        With a bias: train it too, at ``settings.lr_bias`` (the paper does when the layer
        has one).
    settings : AdamSettings, optional
        Default: the paper's.
    rng : numpy.random.Generator or int, default 0
        The batches' source (:func:`minibatches`); an int is a seed.
    certify : bool, default True
        Also compute the exact optimum from the same start (:func:`reconstruct_exact`,
        ``ridge=0``) and the gap to it.

    Returns
    -------
    AdamReconstruction

    Raises
    ------
    TypeError
        If ``inputs`` is an ``InputGram`` or not a real array, ``rng`` is neither a
        Generator nor an int, or ``settings`` is not an ``AdamSettings``.
    ValueError
        As :func:`reconstruct_exact`.

    Notes
    -----
    Cost: ``iterations * O(batch * out * in)``, plus the certificate's exact solve. Adam is
    element-wise, so updating the pruned entries and zeroing them (the code) and updating
    only the kept ones are the same procedure; the state of pruned entries never matters.

    Same answers as :func:`nmref.adaprune.reference.reconstruct_adam_reference` (one row at
    a time, the same batches) to rounding: matrix products group the sums differently
    (spec A4 states the tolerance).

    References
    ----------
    .. [1] Hubara et al., NeurIPS 2021, the AdaPrune section; code
       ``papers-submission/structured_transposable_masks``, ``AdaPrune/utils/adaprune.py``
       (``adaprune``: Adam, ``lr_w = 1e-3``, ``lr_b = 1e-2``, ``iters=1000``,
       ``batch_size=50``, ``layer.weight.mul_(mask)`` after each step).
    .. [2] Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Alg. 1.

    Examples
    --------
    >>> x = np.random.default_rng(0).standard_normal((60, 4))
    >>> result = reconstruct_adam([[1.0, 0.5, -0.5, 2.0]], [[1, 0, 0, 1]], x,
    ...                           settings=AdamSettings(iterations=200))
    >>> result.gap >= -result.gap_tolerance, result.weight[0, 1:3].tolist()
    (True, [0.0, 0.0])
    """
    if isinstance(inputs, InputGram):
        raise TypeError(
            "inputs is an InputGram: the Adam form samples batches of inputs, so it needs the "
            "calibration inputs themselves ([samples, in]); reconstruct_exact takes either"
        )
    settings = AdamSettings() if settings is None else settings
    if not isinstance(settings, AdamSettings):
        raise TypeError(f"settings must be an AdamSettings, got {type(settings).__name__}")
    generator = as_generator(rng)
    original = as_weight(weight)
    kept = to_bool_mask(mask, "mask")
    if kept.shape != original.shape:
        raise ValueError(f"mask must have the weight's shape {original.shape}, got {kept.shape}")
    out_features, in_features = original.shape
    data = as_inputs(inputs, in_features)
    old_bias = as_bias(bias, out_features)
    travel = max(settings.lr_weight, settings.lr_bias) * settings.iterations
    check_magnitudes(original, old_bias, data, travel=travel)
    initial = check_start(start, original, kept)
    refit = bool(refit_bias) and old_bias is not None

    targets = data @ original.T
    if old_bias is not None:
        targets = targets + old_bias
    new_weight = initial.copy()
    new_bias = None if old_bias is None else old_bias.copy()
    weight_moments = (np.zeros_like(new_weight), np.zeros_like(new_weight))
    bias_moments = (np.zeros(out_features), np.zeros(out_features))
    batches = minibatches(data.shape[0], settings, generator)
    losses = np.zeros(len(batches))
    for step, batch in enumerate(batches, start=1):
        batch_inputs = data[batch]
        error = batch_inputs @ new_weight.T - targets[batch]
        if new_bias is not None:
            error = error + new_bias
        losses[step - 1] = np.mean(error * error)
        # d L / d outputs, then the Linear layer's backward pass.
        output_gradient = error * (2.0 / error.size)
        weight_gradient = output_gradient.T @ batch_inputs
        new_weight = adam_step(
            new_weight, weight_gradient, *weight_moments, step, settings.lr_weight, settings
        )
        if refit:
            bias_gradient = output_gradient.sum(axis=0)
            new_bias = adam_step(
                new_bias, bias_gradient, *bias_moments, step, settings.lr_bias, settings
            )
        new_weight = np.where(kept, new_weight, 0.0)

    bias_difference = None if new_bias is None else old_bias - new_bias
    objective = float(
        row_errors(data, weight_difference(original, new_weight), bias_difference).sum()
    )
    exact = gap = tolerance = None
    if certify:
        exact = reconstruct_exact(
            original, kept, data, bias=old_bias, start=initial, refit_bias=refit
        )
        gap = objective - exact.objective
        exact_bias = None if exact.bias is None else old_bias - exact.bias
        tolerance = rounding_bound(data, original - new_weight, bias_difference)
        tolerance += rounding_bound(data, original - exact.weight, exact_bias)
    return AdamReconstruction(new_weight, new_bias, objective, losses, exact, gap, tolerance)
