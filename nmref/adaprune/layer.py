"""AdaPrune on one layer, start to end: choose N, mask, absorb, reconstruct, measure (spec A7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_choice
from nmref.adaprune._inputs import (
    as_bias,
    as_inputs,
    as_weight,
    check_kept_count,
    check_magnitudes,
    check_mask,
)
from nmref.adaprune.adam import AdamReconstruction, AdamSettings, reconstruct_adam
from nmref.adaprune.choose import DEFAULT_CONFIDENCE, NChoice, choose_n
from nmref.adaprune.exact import Reconstruction, reconstruct_exact
from nmref.adaprune.gram import InputGram, as_gram
from nmref.adaprune.quality import relative_output_error, row_errors, weight_difference
from nmref.adaprune.start import MASK_METHODS, absorb_pruned_mass, starting_mask
from nmref.patterns import Pattern

__all__ = ["RECONSTRUCTIONS", "AdaPruneResult", "adaprune_layer"]

#: How the kept weights are set after the mask (spec A4).
RECONSTRUCTIONS: tuple[str, ...] = ("exact", "adam", "none")


@dataclass(frozen=True, eq=False)
class AdaPruneResult:
    """One layer converted to N:M, with its function-level quality before and after.

    Attributes
    ----------
    weight : ndarray of float64, shape (out, in)
        The converted weight, zero (``+0.0``) off ``mask``.
    bias : ndarray of float64, shape (out,), or None
    mask : ndarray of bool, shape (out, in)
        Valid for ``pattern`` (exactly ``n`` per group for ``"nm"`` and
        ``"transposable"``, at most ``n`` for ``"transposable_at_most"`` or a given mask).
    pattern : Pattern
    choice : NChoice or None
        How ``n`` was chosen, when it was not given.
    error_masked : float
        Relative output error of ``mask * weight`` (bias unchanged).
    error_start : float
        Of the starting weights (after absorption; ``== error_masked`` without it).
    error : float
        Of the result.
    objective : float
        ``||X (W - U)^T + 1 (b - beta)^T||_F^2`` of the result on the calibration set.
    exact_objective : float or None
        The exact optimum's objective (the lower bound) when it was computed:
        ``reconstruction="exact"``, or ``"adam"`` with ``certify=True``.
    gap, gap_tolerance : float or None
        For ``"adam"`` with ``certify=True``: ``objective - exact_objective`` and its
        rounding bound.
    details : Reconstruction, AdamReconstruction or None
    """

    weight: NDArray[np.float64]
    bias: NDArray[np.float64] | None
    mask: NDArray[np.bool_]
    pattern: Pattern
    choice: NChoice | None
    error_masked: float
    error_start: float
    error: float
    objective: float
    exact_objective: float | None
    gap: float | None
    gap_tolerance: float | None
    details: Reconstruction | AdamReconstruction | None


def adaprune_layer(
    weight: ArrayLike,
    calibration: ArrayLike | InputGram,
    m: int,
    *,
    n: int | None = None,
    bias: ArrayLike | None = None,
    mask: Literal["nm", "transposable", "transposable_at_most"] | ArrayLike = "nm",
    confidence: float = DEFAULT_CONFIDENCE,
    absorb: bool = True,
    reconstruction: Literal["exact", "adam", "none"] = "exact",
    refit_bias: bool = True,
    ridge: float = 0.0,
    adam: AdamSettings | None = None,
    rng: np.random.Generator | int = 0,
    certify: bool = True,
    remainder: str = "error",
) -> AdaPruneResult:
    """Convert one ``[out, in]`` layer to ``n:m`` (AdaPrune), and measure what it costs.

    The steps, in order: ``n`` (given, or :func:`~nmref.adaprune.choose_n` of the
    weight's zeros); the mask (a method of :func:`~nmref.adaprune.starting_mask` or a
    given array, checked); the starting weights (``mask * weight``, or
    :func:`~nmref.adaprune.absorb_pruned_mass` when ``absorb``); the reconstruction
    (:func:`~nmref.adaprune.reconstruct_exact`, :func:`~nmref.adaprune.reconstruct_adam`,
    or none); the relative output errors (:func:`~nmref.adaprune.relative_output_error`).

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        The layer to convert (dense or unstructured-sparse); its outputs are the target.
    calibration : array_like, shape (samples, in), or InputGram
        The layer's inputs on the calibration set; an ``InputGram`` does for every
        reconstruction but ``"adam"``.
    m : int
        Group size.
    n : int, optional
        Kept per group, ``1 <= n <= m``; default :func:`~nmref.adaprune.choose_n` at
        ``confidence`` (which keeps a dense layer dense, ``n = m``: pass ``n`` to prune
        one, as the authors' dense-model script does).
    bias : array_like of float, shape (out,), optional
    mask : {"nm", "transposable", "transposable_at_most"} or array_like, default "nm"
        A mask method, or a 0/1 mask of the weight's shape keeping at most ``n`` of every
        group of ``m`` along ``in``.
    confidence : float, default 0.95
        For :func:`~nmref.adaprune.choose_n` when ``n`` is not given.
    absorb : bool, default True
        Start from the absorbed weights (the paper's default).
    reconstruction : {"exact", "adam", "none"}, default "exact"
    refit_bias : bool, default True
        Re-fit the bias with the weights (when there is one; not for ``"none"``).
    ridge : float, default 0.0
        For ``"exact"`` (:func:`~nmref.adaprune.reconstruct_exact`).
    adam : AdamSettings, optional
        For ``"adam"``; default the paper's.
    rng : numpy.random.Generator or int, default 0
        For ``"adam"``'s batches.
    certify : bool, default True
        For ``"adam"``: also solve exactly and report the gap.
    remainder : {"error", "pad"}, default "error"
        For ``in`` not a multiple of ``m`` (1-D masks only; conventions C7).

    Returns
    -------
    AdaPruneResult

    Raises
    ------
    TypeError, ValueError
        As the steps: one ``ValueError`` per rule, naming the argument (spec A8).

    Examples
    --------
    >>> x = np.random.default_rng(0).standard_normal((64, 8))
    >>> w = np.arange(1.0, 17.0).reshape(2, 8) * np.array([1, -1] * 4)
    >>> result = adaprune_layer(w, x, 4, n=2)
    >>> result.error <= result.error_start <= 1.0, int(result.mask.sum())
    (True, 8)
    """
    original = as_weight(weight)
    out_features, in_features = original.shape
    check_choice(reconstruction, "reconstruction", RECONSTRUCTIONS)
    choice = None
    if n is None:
        choice = choose_n(original, m, confidence=confidence, remainder=remainder)
        n = choice.n
    pattern = check_kept_count(n, m)
    if isinstance(mask, str):
        check_choice(mask, "mask", MASK_METHODS)
        kept = starting_mask(original, pattern.n, pattern.m, method=mask, remainder=remainder)
    else:
        kept = check_mask(mask, original.shape, pattern, remainder)
    old_bias = as_bias(bias, out_features)

    if reconstruction == "adam":
        if isinstance(calibration, InputGram):
            raise TypeError(
                "calibration is an InputGram: reconstruction='adam' samples batches of "
                "inputs, so it needs the inputs themselves ([samples, in])"
            )
        data: NDArray | InputGram = as_inputs(calibration, in_features)
    elif isinstance(calibration, InputGram):
        data = as_gram(calibration, in_features)
    else:
        data = as_inputs(calibration, in_features)
    check_magnitudes(original, old_bias, data)

    masked = np.where(kept, original, 0.0)
    initial = masked
    if absorb:
        initial = absorb_pruned_mass(original, kept, pattern.m, remainder=remainder)
    error_masked = relative_output_error(original, masked, data)
    error_start = relative_output_error(original, initial, data)

    details: Reconstruction | AdamReconstruction | None = None
    exact_objective = gap = tolerance = None
    if reconstruction == "exact":
        details = reconstruct_exact(
            original, kept, data, bias=old_bias, start=initial, refit_bias=refit_bias, ridge=ridge
        )
        if ridge == 0:
            exact_objective = details.objective
    elif reconstruction == "adam":
        details = reconstruct_adam(
            original,
            kept,
            data,  # type: ignore[arg-type]
            bias=old_bias,
            start=initial,
            refit_bias=refit_bias,
            settings=adam,
            rng=rng,
            certify=certify,
        )
        if details.exact is not None:
            exact_objective = details.exact.objective
        gap, tolerance = details.gap, details.gap_tolerance
    if details is None:
        new_weight, new_bias = initial, old_bias
        objective = float(row_errors(data, weight_difference(original, initial)).sum())
    else:
        new_weight, new_bias = details.weight, details.bias
        objective = details.objective
    error = relative_output_error(original, new_weight, data, bias=old_bias, new_bias=new_bias)
    return AdaPruneResult(
        new_weight,
        new_bias,
        kept,
        pattern,
        choice,
        error_masked,
        error_start,
        error,
        objective,
        exact_objective,
        gap,
        tolerance,
        details,
    )
