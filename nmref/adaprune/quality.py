r"""How much a sparse layer changes the layer's function on real inputs (spec A6).

For a layer ``y = W x + b`` and a replacement ``(U, beta)`` (masked, absorbed or
reconstructed), on calibration inputs ``X`` ``[samples, in]``:

.. math::

    E(U, \beta) = \lVert X (W - U)^\top + \mathbf 1 (b - \beta)^\top \rVert_F^2 ,
    \qquad
    \text{relative output error} = \frac{\sqrt{E(U, \beta)}}{\lVert X W^\top \rVert_F} .

From the statistics of :class:`~nmref.adaprune.gram.InputGram` (``S``, ``mu``, ``M2``) the
same numbers are, row by row with ``d = w - u`` and ``c = b - beta``,

.. math::

    \lVert X d + c\mathbf 1\rVert^2 = d^\top M_2\, d + S\,(\mu^\top d + c)^2 ,

a sum of two non-negative terms, so no cancellation between them.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.adaprune._inputs import as_bias, as_inputs, as_weight, check_magnitudes
from nmref.adaprune.gram import InputGram, as_gram

__all__ = ["output_error", "relative_output_error", "row_errors", "weight_difference"]


def weight_difference(
    weight: NDArray[np.float64], new_weight: NDArray[np.float64]
) -> NDArray[np.float64]:
    """``weight - new_weight``; a difference beyond float64 is infinite here and refused by
    :func:`row_errors` (one message, not a warning)."""
    with np.errstate(over="ignore"):
        return weight - new_weight


def row_errors(
    calibration: NDArray[np.float64] | InputGram,
    difference: NDArray[np.float64],
    bias_difference: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """``||X d_r + c_r 1||^2`` for every row ``d_r`` of ``difference`` (validated float64).

    ``calibration`` is the float64 inputs (computed directly) or their statistics (the
    Gram route, its negative rounding residue clipped to 0).
    """
    # An overflow is refused below (one message naming the arguments), not warned about.
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(calibration, InputGram):
            scattered = np.sum((difference @ calibration.scatter) * difference, axis=1)
            shifted = difference @ calibration.mean
            if bias_difference is not None:
                shifted = shifted + bias_difference
            errors = np.maximum(scattered, 0.0) + calibration.count * shifted**2
        else:
            residual = calibration @ difference.T
            if bias_difference is not None:
                residual = residual + bias_difference
            errors = np.sum(residual * residual, axis=0)
    if not np.isfinite(errors).all():
        raise ValueError(
            "weight and calibration: the squared output error ||X d + c||^2 is beyond "
            f"float64's range (magnitude above {np.finfo(np.float64).max:.4g}) for these "
            "weights and inputs; scale them down (the relative error does not change) (spec A6)"
        )
    return errors


def _larger(first: NDArray | None, second: NDArray | None) -> NDArray | None:
    if first is None or second is None:
        return second if first is None else first
    return np.maximum(np.abs(first), np.abs(second))


def _prepare(weight, new_weight, calibration, bias, new_bias):
    original = as_weight(weight)
    replacement = as_weight(new_weight, "new_weight")
    if replacement.shape != original.shape:
        raise ValueError(
            f"new_weight must have the weight's shape {original.shape}, got {replacement.shape}"
        )
    out_features, in_features = original.shape
    if isinstance(calibration, InputGram):
        data: NDArray | InputGram = as_gram(calibration, in_features)
    else:
        data = as_inputs(calibration, in_features)
    old_bias = as_bias(bias, out_features)
    fresh_bias = as_bias(new_bias, out_features, "new_bias")
    check_magnitudes(
        np.maximum(np.abs(original), np.abs(replacement)), _larger(old_bias, fresh_bias), data
    )
    if fresh_bias is None:
        bias_difference = None
    else:
        bias_difference = (0.0 if old_bias is None else old_bias) - fresh_bias
    return original, replacement, data, bias_difference


def output_error(
    weight: ArrayLike,
    new_weight: ArrayLike,
    calibration: ArrayLike | InputGram,
    *,
    bias: ArrayLike | None = None,
    new_bias: ArrayLike | None = None,
) -> float:
    r"""Squared output error ``||X (W - U)^T + 1 (b - beta)^T||_F^2`` on calibration inputs.

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        The reference layer ``W`` (dense or unstructured-sparse).
    new_weight : array_like of float, shape (out, in)
        The replacement ``U``.
    calibration : array_like, shape (samples, in), or InputGram
        Layer inputs (computed directly) or their statistics (the Gram route).
    bias, new_bias : array_like of float, shape (out,), optional
        ``b`` and ``beta``. ``new_bias=None`` means the bias is unchanged (no bias term);
        ``bias=None`` with a ``new_bias`` means ``b = 0``.

    Returns
    -------
    float
        ``E(U, beta) >= 0``, a sum over samples and outputs (not a mean).

    Raises
    ------
    TypeError, ValueError
        For non-float or non-finite weights, mismatched shapes, calibration whose feature
        size is not ``in``, with NaN or an infinity, or with no samples.

    Notes
    -----
    Directly from ``X``: O(samples * out * in); the rounding error of ``E`` is at most about
    ``3 (in + 2) eps sum_{s,r} (|x_s| |d_r| + |c_r|)^2`` (``eps = 2**-52``). By the Gram
    route: O(out * in^2) whatever the sample count; each row's ``d^T M2 d`` carries an
    absolute error up to about ``in * eps * |d|^T |M2| |d|``, so an error below about
    ``sqrt(in * eps)`` (about ``1e-7``) relative to the output is not resolved there, and
    a negative rounding residue is reported as 0.

    Examples
    --------
    >>> x = np.array([[1.0, 0.0], [0.0, 2.0]])
    >>> output_error([[1.0, 1.0]], [[1.0, 0.0]], x)
    4.0
    >>> output_error([[1.0, 1.0]], [[1.0, 0.0]], InputGram.of(x))
    4.0
    """
    original, replacement, data, bias_difference = _prepare(
        weight, new_weight, calibration, bias, new_bias
    )
    return float(row_errors(data, weight_difference(original, replacement), bias_difference).sum())


def relative_output_error(
    weight: ArrayLike,
    new_weight: ArrayLike,
    calibration: ArrayLike | InputGram,
    *,
    bias: ArrayLike | None = None,
    new_bias: ArrayLike | None = None,
) -> float:
    r"""Relative output error ``||X (W - U)^T + 1 (b - beta)^T||_F / ||X W^T||_F``.

    The function-level quality of a sparse layer: 0 when it computes the same outputs on
    the calibration inputs, 1 when its error is as large as the weights' part of the
    output (all-zero ``U`` with the bias unchanged gives exactly 1).

    Parameters
    ----------
    weight, new_weight, calibration, bias, new_bias
        As in :func:`output_error`.

    Returns
    -------
    float
        ``>= 0``. When ``X W^T = 0``: 0.0 if the error is 0 too, else ``inf``.

    Raises
    ------
    TypeError, ValueError
        As :func:`output_error`.

    Notes
    -----
    The denominator is the weight part of the output, ``||X W^T||_F``, without the bias,
    so a layer's figure does not depend on how large its bias is; a changed bias counts in
    the numerator. Numerical limits as in :func:`output_error`: by the Gram route, values
    below about ``1e-7`` are rounding noise; directly from ``X``, below about
    ``1e-15 * sqrt(in)``.

    Examples
    --------
    >>> relative_output_error([[3.0, 4.0]], [[3.0, 0.0]], np.eye(2))   # |(0, 4)| / |(3, 4)|
    0.8
    """
    original, replacement, data, bias_difference = _prepare(
        weight, new_weight, calibration, bias, new_bias
    )
    error = float(row_errors(data, weight_difference(original, replacement), bias_difference).sum())
    scale = float(row_errors(data, original).sum())
    if scale == 0.0:
        return 0.0 if error == 0.0 else float("inf")
    return float(np.sqrt(error / scale))
