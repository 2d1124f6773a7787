r"""The exact layer-wise reconstruction: a least-squares problem per output row (spec A4).

With the mask fixed, AdaPrune's objective separates by output row ``r`` (kept set
``K_r``): find kept weights ``u_r`` (zero off ``K_r``) minimising

.. math::

    f_r(u_r) = \lVert X (w_r - u_r) \rVert^2 = (w_r - u_r)^\top A\, (w_r - u_r),
    \qquad A = X^\top X ,

or, when the bias is re-fitted too (``beta_r`` free), the same with the centred
``A = M_2`` (the optimal bias absorbs the mean shift: ``beta_r = b_r + mu^T (w_r - u_r)``).
Writing ``u_r = s_r + delta`` with ``s_r`` the starting weights (the masked weights, or
the absorbed ones), the normal equations are

.. math::

    A_{KK}\, \delta_K = g, \qquad g = \big(A (w_r - s_r)\big)_K .

They are always consistent (``A`` is positive semi-definite). When ``A_KK`` is singular
(fewer samples than kept weights, duplicated or all-zero input columns) the optimum is not
unique, and the rule picks the **minimum-norm update**: the optimum closest to the starting
weights, ``delta_K = A_KK^+ g``. It is the point that gradient descent from the start
converges to (descent never moves in a direction the data cannot see), so it keeps the
original weights wherever the calibration set has no opinion.

The pseudo-inverse is taken through the eigendecomposition ``A_KK = Q diag(lambda) Q^T``:
directions with ``lambda_i <= k * eps * lambda_max`` (``k = |K_r|``, ``eps = 2**-52``) are
null. An optional ridge adds ``ridge * trace(A_KK) / k`` to the kept eigenvalues.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from threadpoolctl import threadpool_limits

from nmref._validation import check_nonnegative
from nmref.adaprune._inputs import as_bias, as_inputs, as_weight, check_magnitudes, check_start
from nmref.adaprune.gram import InputGram, as_gram
from nmref.adaprune.quality import row_errors, weight_difference
from nmref.masks import to_bool_mask

__all__ = ["EIGENVALUE_CUTOFF", "Reconstruction", "reconstruct_exact"]

#: Eigenvalues of ``A_KK`` at or below ``k * EIGENVALUE_CUTOFF * lambda_max`` are null.
EIGENVALUE_CUTOFF = float(np.finfo(np.float64).eps)
#: Entries of the stacked ``A_KK`` blocks solved at once (bounds memory: 32 MiB each).
_CHUNK_ENTRIES = 1 << 22


@dataclass(frozen=True, eq=False)
class Reconstruction:
    """Reconstructed kept weights (and bias) of one layer.

    Attributes
    ----------
    weight : ndarray of float64, shape (out, in)
        Zero (``+0.0``) off the mask.
    bias : ndarray of float64, shape (out,), or None
        The re-fitted bias, the given bias when it is not re-fitted, ``None`` without one.
    objective : float
        ``||X (W - U)^T + 1 (b - beta)^T||_F^2`` on the calibration set (a sum).
    rank : ndarray of int64, shape (out,)
        Rank of each row's ``A_KK`` under the cutoff (``< kept`` where the optimum is not
        unique and the minimum-norm update decided).
    kept : ndarray of int64, shape (out,)
        Kept weights per row, ``|K_r|``.
    """

    weight: NDArray[np.float64]
    bias: NDArray[np.float64] | None
    objective: float
    rank: NDArray[np.int64]
    kept: NDArray[np.int64]


def reconstruct_exact(
    weight: ArrayLike,
    mask: ArrayLike,
    calibration: ArrayLike | InputGram,
    *,
    bias: ArrayLike | None = None,
    start: ArrayLike | None = None,
    refit_bias: bool = True,
    ridge: float = 0.0,
) -> Reconstruction:
    r"""The exact optimum of AdaPrune's layer objective over the kept weights.

    Solves, for every output row ``r`` with kept set ``K_r``,

    .. math::

        \min_{u_r:\ u_{rj} = 0\ (j \notin K_r)} \lVert X w_r + b_r - X u_r - \beta_r \rVert^2

    with ``beta_r = b_r`` fixed, or free when the bias is re-fitted; among optimal
    solutions the one closest to ``start`` (minimum-norm update, module docstring).

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        The reference layer ``W`` whose outputs are matched.
    mask : array_like of bool or 0/1, shape (out, in)
        The kept entries (any support: pattern checks belong to the caller, e.g.
        :func:`nmref.adaprune.adaprune_layer`).
    calibration : array_like, shape (samples, in), or InputGram
        Layer inputs, or their statistics (the same optimum, computed from ``X^T X``).
    bias : array_like of float, shape (out,), optional
        The layer's bias ``b``.
    start : array_like of float, shape (out, in), optional
        The starting weights ``s`` (zero off the mask); default ``mask * weight``. Only
        rows whose ``A_KK`` is singular depend on it.
    refit_bias : bool, default True
        With a bias: re-fit it too (``beta = b + (W - U) mu``, the exact joint optimum).
        Ignored without a bias.
    ridge : float, default 0.0
        ``>= 0``: the relative ridge ``rho``; each row solves
        ``(A_KK + rho trace(A_KK)/k I) delta = g`` on the kept eigen-directions. 0 is the
        exact optimum.

    Returns
    -------
    Reconstruction

    Raises
    ------
    TypeError
        For non-float weights, a non-real calibration array, a non-0/1 mask.
    ValueError
        For shapes that do not match, NaN or an infinity in any input, calibration whose
        feature size is not ``in`` or with no samples, ``start`` nonzero off the mask, a
        negative or non-finite ``ridge``.

    Notes
    -----
    Cost: ``A`` once (O(samples * in^2), or nothing for an ``InputGram``), then per row an
    eigendecomposition of the ``k x k`` block, O(out * k^3) (``eigh``, about ``9 k^3``
    flops: 768 kept weights take about 0.2 s a row on one core). Rows with the same kept
    count are stacked and solved in one LAPACK call per chunk of 32 MiB.

    Numerical limits: ``A`` is formed in float64, which squares the condition number of
    ``X_K``; the cutoff drops directions with singular values below
    ``sqrt(k * eps) ~ 1e-7`` times the largest, and the solution carries a relative error
    of about ``eps * kappa(A_KK)`` on the rest.

    Equals :func:`nmref.adaprune.reference.reconstruct_exact_reference` (a readable
    row-by-row loop) to rounding: both call the same LAPACK eigensolver on the same blocks,
    but the products around it run in a different order (spec A4 states the tolerance).

    References
    ----------
    .. [1] Hubara et al., NeurIPS 2021, the AdaPrune section (the layer objective, solved
       there with Adam; see :func:`reconstruct_adam`).

    Examples
    --------
    Two identical inputs, the pruned one absorbed by the kept one exactly:

    >>> x = np.array([[1.0, 1.0], [2.0, 2.0]])
    >>> result = reconstruct_exact([[3.0, 1.0]], [[1, 0]], x)
    >>> result.weight.tolist(), result.objective
    ([[4.0, 0.0]], 0.0)
    """
    original = as_weight(weight)
    kept = to_bool_mask(mask, "mask")
    if kept.shape != original.shape:
        raise ValueError(f"mask must have the weight's shape {original.shape}, got {kept.shape}")
    out_features, in_features = original.shape
    direct = None if isinstance(calibration, InputGram) else as_inputs(calibration, in_features)
    old_bias = as_bias(bias, out_features)
    check_magnitudes(
        original, old_bias, as_gram(calibration, in_features) if direct is None else direct
    )
    stats = as_gram(calibration if direct is None else InputGram.of(direct), in_features)
    initial = check_start(start, original, kept)
    rho = check_nonnegative(ridge, "ridge")
    refit = bool(refit_bias) and old_bias is not None

    system = stats.scatter if refit else stats.gram
    update, rank = _solve_rows(system, original - initial, kept, rho)
    new_weight = np.where(kept, initial + update, 0.0)
    new_bias = old_bias
    if refit:
        new_bias = old_bias + (original - new_weight) @ stats.mean
    bias_difference = None if new_bias is None else old_bias - new_bias
    data = stats if direct is None else direct
    objective = float(
        row_errors(data, weight_difference(original, new_weight), bias_difference).sum()
    )
    return Reconstruction(new_weight, new_bias, objective, rank, kept.sum(axis=1))


def _solve_rows(
    system: NDArray[np.float64],
    shift: NDArray[np.float64],
    kept: NDArray[np.bool_],
    ridge: float,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """``delta`` (zero off the mask) and the rank for every row; rows stacked by kept count."""
    # One BLAS thread: the systems are small and batched (threads only contend, and on a
    # loaded 2-core machine made a digits report 50x slower), and one thread gives the same
    # bits whatever the machine's thread count.
    with threadpool_limits(limits=1, user_api="blas"):
        return _solve_rows_one_thread(system, shift, kept, ridge)


def _solve_rows_one_thread(
    system: NDArray[np.float64],
    shift: NDArray[np.float64],
    kept: NDArray[np.bool_],
    ridge: float,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    out_features, in_features = kept.shape
    update = np.zeros((out_features, in_features))
    rank = np.zeros(out_features, dtype=np.int64)
    counts = kept.sum(axis=1)
    gradient = shift @ system  # row r: (A (w_r - s_r))^T; A is symmetric
    for size in np.unique(counts):
        k = int(size)
        if k == 0:
            continue
        rows = np.flatnonzero(counts == k)
        step = max(1, _CHUNK_ENTRIES // (k * k))
        for first in range(0, len(rows), step):
            chunk = rows[first : first + step]
            columns = np.nonzero(kept[chunk])[1].reshape(len(chunk), k)
            blocks = system[columns[:, :, None], columns[:, None, :]]
            rhs = np.take_along_axis(gradient[chunk], columns, axis=1)
            values, vectors = np.linalg.eigh(blocks)
            cutoff = k * EIGENVALUE_CUTOFF * np.maximum(values[:, -1], 0.0)
            live = values > cutoff[:, None]
            shrink = ridge * np.trace(blocks, axis1=1, axis2=2) / k
            coefficients = (np.swapaxes(vectors, 1, 2) @ rhs[:, :, None])[:, :, 0]
            scaled = np.zeros_like(coefficients)
            np.divide(coefficients, values + shrink[:, None], out=scaled, where=live)
            update[chunk[:, None], columns] = (vectors @ scaled[:, :, None])[:, :, 0]
            rank[chunk] = live.sum(axis=1)
    return update, rank
