"""Argument checks of AdaPrune: one function per rule, one message per rule (specs/adaprune.md A8).

The rules about plain values (integers, choices, NaN) are :mod:`nmref._validation`'s; the
rules here are about the layer: a 2-D ``[out, in]`` weight, calibration inputs whose feature
size matches it, a kept count in ``1..m`` and a mask valid for the pattern.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import (
    check_float_dtype,
    check_integer,
    check_remainder,
    refuse_masked,
    refuse_torch_surprises,
)
from nmref.masks import nm_violations, to_bool_mask
from nmref.patterns import Pattern, check_pattern

__all__ = [
    "as_bias",
    "as_inputs",
    "as_weight",
    "check_finite",
    "check_kept_count",
    "check_magnitudes",
    "check_mask",
    "check_start",
]


def check_finite(array: NDArray, name: str) -> None:
    """``ValueError`` naming the first NaN or infinity: a least-squares objective is a sum."""
    finite = np.isfinite(array)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        what = "NaN" if np.isnan(array[index]) else "an infinity"
        raise ValueError(
            f"{name} contains {what} at index {index}; AdaPrune needs finite values "
            "(its objective is a sum of squares)"
        )


def as_weight(weight: ArrayLike, name: str = "weight") -> NDArray[np.float64]:
    """A finite float16/32/64 ``[out, in]`` matrix, as float64 (exact)."""
    refuse_masked(weight, name)
    refuse_torch_surprises(weight, name)
    array = np.asarray(weight)
    check_float_dtype(array, name)
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D [out, in] (a Linear weight, grouped along in), got "
            f"shape {array.shape}; for a convolution pass the [out, in*kh*kw] matrix of "
            "its im2col GEMM with the matching patches"
        )
    check_finite(array, name)
    return array.astype(np.float64)


def as_bias(bias: ArrayLike | None, out_features: int, name: str = "bias") -> NDArray | None:
    """``None``, or a finite float ``[out]`` vector as float64."""
    if bias is None:
        return None
    refuse_masked(bias, name)
    refuse_torch_surprises(bias, name)
    array = np.asarray(bias)
    check_float_dtype(array, name)
    if array.shape != (out_features,):
        raise ValueError(
            f"{name} must have shape ({out_features},) (one entry per output row of the "
            f"weight), got {array.shape}"
        )
    check_finite(array, name)
    return array.astype(np.float64)


def as_inputs(
    inputs: ArrayLike, in_features: int | None, name: str = "calibration"
) -> NDArray[np.float64]:
    """Calibration inputs ``[samples, in]``: real, finite, non-empty, as float64.

    Integer and bool inputs (pixels) are converted to float64; ``in_features`` (the weight's
    ``in``), when given, must equal the number of columns.
    """
    refuse_masked(inputs, name)
    refuse_torch_surprises(inputs, name)
    array = np.asarray(inputs)
    if array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and array.dtype.itemsize > 8):
        raise TypeError(
            f"{name} must be a real array (bool, integer or float16/32/64), got dtype={array.dtype}"
        )
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D [samples, in] (one layer input per row), got shape {array.shape}"
        )
    if in_features is not None and array.shape[1] != in_features:
        raise ValueError(
            f"{name} has {array.shape[1]} features per sample but the weight has "
            f"in={in_features}: calibration inputs are [samples, in] for a weight [out, in]"
        )
    if array.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 samples): reconstruction needs at least one sample")
    array = array.astype(np.float64, copy=False)
    check_finite(array, name)
    return array


def check_kept_count(n: object, m: object) -> Pattern:
    """``(n, m)`` with ``1 <= n <= m``: AdaPrune keeps at least one weight of every group."""
    n_int, m_int = check_integer(n, "n"), check_integer(m, "m")
    if m_int < 1:
        raise ValueError(f"m={m_int} must be >= 1")
    if not 1 <= n_int <= m_int:
        raise ValueError(
            f"n={n_int} must be in 1..m={m_int}: AdaPrune keeps at least one weight of every "
            "group and at most all of them (n = m leaves the layer dense)"
        )
    return check_pattern(n_int, m_int)


def check_mask(
    mask: ArrayLike, shape: tuple[int, ...], pattern: Pattern, remainder: str
) -> NDArray[np.bool_]:
    """A 0/1 mask of ``shape`` that keeps at most ``n`` in every group of ``m`` along ``in``.

    The relaxed rule of ``specs/conventions.md`` C1 (what sparse tensor cores run; an
    at-most transposable mask may leave a group under-full), with C7's padding when
    ``remainder="pad"``.
    """
    refuse_masked(mask, "mask")
    array = to_bool_mask(mask, "mask")
    if array.shape != shape:
        raise ValueError(f"mask must have the weight's shape {shape}, got {array.shape}")
    check_remainder(shape[1], pattern.m, 1, remainder)
    bad = nm_violations(array, pattern.n, pattern.m, exact=False, remainder=remainder)
    if len(bad):
        row, group = (int(i) for i in bad[0])
        kept = int(array[row, group * pattern.m : (group + 1) * pattern.m].sum())
        raise ValueError(
            f"mask is not valid for {pattern}: it keeps {kept} > n={pattern.n} weights in "
            f"group {group} of row {row} (groups of m={pattern.m} along in); "
            f"{len(bad)} group(s) break the rule"
        )
    return array


def check_start(
    start: ArrayLike | None, weight: NDArray, mask: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """The starting weights: ``mask * weight`` by default, else finite and zero off the mask."""
    if start is None:
        return np.where(mask, weight, 0.0)
    array = as_weight(start, "start")
    if array.shape != weight.shape:
        raise ValueError(f"start must have the weight's shape {weight.shape}, got {array.shape}")
    outside = (array != 0) & ~mask
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        raise ValueError(
            f"start has a nonzero weight outside the mask at index {index}; "
            "a starting point must be supported on the kept entries"
        )
    return np.where(mask, array, 0.0)


#: log2 of the largest magnitude the rule of :func:`check_magnitudes` lets a product reach:
#: 2**1000 leaves 2**23 of float64's range for sums and rounding.
MAGNITUDE_LOG2_LIMIT = 1000.0


def _log2_max(array: NDArray | None) -> float:
    if array is None or array.size == 0:
        return -np.inf
    largest = float(np.max(np.abs(array)))
    return float(np.log2(largest)) if largest > 0 else -np.inf


def check_magnitudes(
    weight: NDArray, bias: NDArray | None, calibration: object, *, travel: float = 0.0
) -> None:
    """``ValueError`` naming weight and calibration when AdaPrune's float64 arithmetic could
    overflow (specs/adaprune.md A8).

    With ``A = samples * max|x|**2`` (for an :class:`~nmref.adaprune.gram.InputGram`, the
    larger of ``max|M2|`` and ``S * max|mu|**2``), ``B = max(max|w|, max|b|)``, the rule is
    that ``A``, ``in * B``, ``out * in**2 * A * B**2``, ``samples * out * B**2`` and
    ``(in * A * B)**2`` (Adam's second moment) stay below ``2**1000``: the Gram, the
    absorbed mass, the output error and the gradients are then finite. ``travel`` is how
    far an optimiser can move a weight (Adam: ``lr * iterations``, an absolute step), counted
    in ``B``. O(size) in log2.
    """
    out_features, in_features = weight.shape
    if hasattr(calibration, "scatter"):  # an InputGram (no import: gram imports this module)
        samples = float(calibration.count)
        inputs = max(
            _log2_max(calibration.scatter),
            np.log2(max(samples, 1.0)) + 2 * _log2_max(calibration.mean),
        )
    else:
        samples = float(calibration.shape[0])
        inputs = np.log2(max(samples, 1.0)) + 2 * _log2_max(calibration)
    weights = max(
        _log2_max(weight), _log2_max(bias), float(np.log2(travel)) if travel > 0 else -np.inf
    )
    size_in, size_out = np.log2(max(in_features, 1)), np.log2(max(out_features, 1))
    terms = (
        inputs,
        size_in + weights,
        size_out + 2 * size_in + inputs + 2 * weights,
        np.log2(max(samples, 1.0)) + size_out + 2 * weights,
        2 * (size_in + inputs + weights),
    )
    if max(terms) > MAGNITUDE_LOG2_LIMIT:
        raise ValueError(
            "weight and calibration: magnitudes beyond what AdaPrune's float64 arithmetic "
            "holds (spec A8: samples*max|x|^2, in*max|w|, out*in^2*samples*max|x|^2*max|w|^2 "
            "and (in*samples*max|x|^2*max|w|)^2 must stay below 2**1000); scale the weights "
            "or the inputs down (the relative error does not change)"
        )
