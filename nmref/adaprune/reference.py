"""AdaPrune in plain loops: one group, one row, one step at a time (the oracle of spec A9).

Each function has the contract of its fast twin in :mod:`nmref.adaprune` and reads like
the spec; the tests hold the fast paths to these. They validate their input through the
same rules, so they also raise the same errors.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_nonnegative, check_remainder
from nmref.adaprune._inputs import as_bias, as_inputs, as_weight, check_start
from nmref.adaprune.adam import AdamSettings, as_generator, minibatches
from nmref.adaprune.exact import EIGENVALUE_CUTOFF
from nmref.adaprune.gram import InputGram, as_gram
from nmref.masks import to_bool_mask
from nmref.patterns import check_pattern

__all__ = [
    "absorb_pruned_mass_reference",
    "output_error_reference",
    "reconstruct_adam_reference",
    "reconstruct_exact_reference",
]


def absorb_pruned_mass_reference(
    weight: ArrayLike, mask: ArrayLike, m: int, *, remainder: str = "error"
) -> NDArray[np.float64]:
    """:func:`nmref.adaprune.absorb_pruned_mass`, one group at a time."""
    matrix = as_weight(weight)
    m = check_pattern(0, m).m
    kept = to_bool_mask(mask, "mask")
    if kept.shape != matrix.shape:
        raise ValueError(f"mask must have the weight's shape {matrix.shape}, got {kept.shape}")
    out_features, in_features = matrix.shape
    check_remainder(in_features, m, 1, remainder)
    result = np.zeros_like(matrix)
    for row in range(out_features):
        for first in range(0, in_features, m):
            group = range(first, min(first + m, in_features))
            keep = [i for i in group if kept[row, i]]
            pruned_sum = 0.0
            for i in group:
                if not kept[row, i]:
                    pruned_sum += float(matrix[row, i])
            if not keep:
                continue  # nowhere to put the mass: the group is all zero
            share = pruned_sum / len(keep)
            for i in keep:
                result[row, i] = float(matrix[row, i]) + share
    return result


def _system(calibration: ArrayLike | InputGram, in_features: int, centred: bool):
    """``A`` (``X^T X``, or ``M2`` when centred), the mean and the count, from either input."""
    if isinstance(calibration, InputGram):
        stats = as_gram(calibration, in_features)
        return (stats.scatter if centred else stats.gram), stats.mean, stats.count
    data = as_inputs(calibration, in_features)
    mean = data.mean(axis=0)
    if centred:
        return (data - mean).T @ (data - mean), mean, data.shape[0]
    return data.T @ data, mean, data.shape[0]


def reconstruct_exact_reference(
    weight: ArrayLike,
    mask: ArrayLike,
    calibration: ArrayLike | InputGram,
    *,
    bias: ArrayLike | None = None,
    start: ArrayLike | None = None,
    refit_bias: bool = True,
    ridge: float = 0.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """:func:`nmref.adaprune.reconstruct_exact`, one row at a time: ``(weight, bias)``."""
    original = as_weight(weight)
    kept = to_bool_mask(mask, "mask")
    if kept.shape != original.shape:
        raise ValueError(f"mask must have the weight's shape {original.shape}, got {kept.shape}")
    out_features, in_features = original.shape
    old_bias = as_bias(bias, out_features)
    initial = check_start(start, original, kept)
    rho = check_nonnegative(ridge, "ridge")
    refit = bool(refit_bias) and old_bias is not None
    system, mean, _ = _system(calibration, in_features, centred=refit)

    result = initial.copy()
    for row in range(out_features):
        columns = np.flatnonzero(kept[row])
        k = len(columns)
        if k == 0:
            continue
        # Normal equations of the update: A_KK delta = (A (w - s))_K.
        block = system[np.ix_(columns, columns)]
        rhs = (system @ (original[row] - initial[row]))[columns]
        values, vectors = np.linalg.eigh(block)
        cutoff = k * EIGENVALUE_CUTOFF * max(values[-1], 0.0)
        shrink = rho * np.trace(block) / k
        delta = np.zeros(k)
        for i in range(k):
            if values[i] > cutoff:  # a direction the calibration data can see
                delta += vectors[:, i] * ((vectors[:, i] @ rhs) / (values[i] + shrink))
        result[row, columns] = initial[row, columns] + delta
    new_bias = old_bias
    if refit:
        new_bias = old_bias + (original - result) @ mean
    return result, new_bias


def reconstruct_adam_reference(
    weight: ArrayLike,
    mask: ArrayLike,
    inputs: ArrayLike,
    *,
    bias: ArrayLike | None = None,
    start: ArrayLike | None = None,
    refit_bias: bool = True,
    settings: AdamSettings | None = None,
    rng: np.random.Generator | int = 0,
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None, NDArray[np.float64]]:
    """:func:`nmref.adaprune.reconstruct_adam`, one output row at a time: ``(weight, bias,
    losses)``.

    Rows are independent (the loss is a sum over outputs and Adam is element-wise), so each
    row runs its own Adam on the same batches; the loss is still the mean over all
    ``batch * out`` entries.
    """
    settings = AdamSettings() if settings is None else settings
    generator = as_generator(rng)
    original = as_weight(weight)
    kept = to_bool_mask(mask, "mask")
    out_features, in_features = original.shape
    data = as_inputs(inputs, in_features)
    old_bias = as_bias(bias, out_features)
    initial = check_start(start, original, kept)
    refit = bool(refit_bias) and old_bias is not None
    batches = minibatches(data.shape[0], settings, generator)

    result = initial.copy()
    new_bias = None if old_bias is None else old_bias.copy()
    losses = np.zeros(len(batches))
    for row in range(out_features):
        target = data @ original[row] + (0.0 if old_bias is None else old_bias[row])
        u = initial[row].copy()
        beta = 0.0 if old_bias is None else float(old_bias[row])
        m_u, v_u = np.zeros(in_features), np.zeros(in_features)
        m_b = v_b = 0.0
        for step, batch in enumerate(batches, start=1):
            error = data[batch] @ u + beta - target[batch]
            losses[step - 1] += float(np.sum(error * error))
            scale = 2.0 / (len(batch) * out_features)
            g_u = (error * scale) @ data[batch]
            # torch.optim.Adam, written out.
            m_u = m_u + (1 - settings.beta1) * (g_u - m_u)
            v_u = settings.beta2 * v_u + (1 - settings.beta2) * g_u * g_u
            correction1 = 1 - settings.beta1**step
            correction2 = 1 - settings.beta2**step
            u = u - (settings.lr_weight / correction1) * (
                m_u / (np.sqrt(v_u) / np.sqrt(correction2) + settings.eps)
            )
            if refit:
                g_b = float(np.sum(error * scale))
                m_b = m_b + (1 - settings.beta1) * (g_b - m_b)
                v_b = settings.beta2 * v_b + (1 - settings.beta2) * g_b * g_b
                beta = beta - (settings.lr_bias / correction1) * (
                    m_b / (np.sqrt(v_b) / np.sqrt(correction2) + settings.eps)
                )
            u = np.where(kept[row], u, 0.0)  # re-mask after every step
        result[row] = u
        if new_bias is not None:
            new_bias[row] = beta
    for step, batch in enumerate(batches):
        losses[step] /= len(batch) * out_features
    return result, new_bias, losses


def output_error_reference(
    weight: ArrayLike,
    new_weight: ArrayLike,
    inputs: ArrayLike,
    *,
    bias: ArrayLike | None = None,
    new_bias: ArrayLike | None = None,
) -> float:
    """:func:`nmref.adaprune.output_error` from the inputs, one sample and output at a time."""
    original = as_weight(weight)
    replacement = as_weight(new_weight, "new_weight")
    data = as_inputs(inputs, original.shape[1])
    old = np.zeros(original.shape[0]) if bias is None else as_bias(bias, original.shape[0])
    new = old if new_bias is None else as_bias(new_bias, original.shape[0], "new_bias")
    total = 0.0
    for sample in data:
        for row in range(original.shape[0]):
            before = float(sample @ original[row]) + float(old[row])
            after = float(sample @ replacement[row]) + float(new[row])
            total += (before - after) ** 2
    return total
