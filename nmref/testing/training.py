"""Checks for sparse-training implementations: the per-GEMM contract of STE and SR-STE.

``check_sparse_training(impl, method=...)`` calls ``impl(x, w, dy, n, m)``, which
must run one forward and backward of a Linear layer ``Y = X W~^T`` with the
method's sparse weight and return ``(Y, dX, dW)``. The contract
(``specs/training.md``)::

    E  = magnitude_mask(W, n, m)          (nmref, ties: lower index)
    Y  = X (E ⊙ W)^T
    dX = dY (E ⊙ W)                       (the backward GEMM uses the forward mask)
    dW = dY^T X                           ("ste")
    dW = dY^T X + λ (1 − E) ⊙ W           ("srste", once per step)

Inputs are small integers in float64 (float32 on request) and ``λ`` a power of
two, so every GEMM is exact in any summation order: the comparison is exact,
and a wrong mask cannot hide behind a tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from numpy.typing import NDArray

import nmref
from nmref._validation import check_choice, check_count
from nmref.testing.cases import Case
from nmref.testing.report import Failure, Report

__all__ = ["TRAINING_METHODS", "check_sparse_training", "training_cases"]

#: The training methods :func:`check_sparse_training` checks.
TRAINING_METHODS = ("ste", "srste")
TrainingFunction = Callable[[NDArray, NDArray, NDArray, int, int], tuple[object, object, object]]


#: The dtypes of :func:`training_cases`: floats, so the step's products are exact sums.
TRAINING_DTYPES = ("float16", "float32", "float64")


def training_cases(
    count: int = 24, *, dtype: str = "float64", seed: int = 0
) -> list[tuple[Case, NDArray, NDArray]]:
    """``(case, x, dy)`` triples: tie-heavy integer weights, integer inputs and gradients.

    ``dtype`` is one of :data:`TRAINING_DTYPES` (small integers are exact in each).
    """
    count = check_count(count, "count")
    check_choice(dtype, "dtype", TRAINING_DTYPES)
    seed = check_count(seed, "seed")
    rng = np.random.default_rng([seed, 8])
    patterns = [(2, 4), (1, 4), (4, 8), (2, 8), (1, 2), (3, 4)]
    cases = []
    for index in range(count):
        n, m = patterns[index % len(patterns)]
        out_features = int(rng.integers(1, 6))
        in_features = m * int(rng.integers(1, 4))
        batch = int(rng.integers(1, 5))
        weights = rng.integers(-3, 4, (out_features, in_features)).astype(dtype)
        x = rng.integers(-4, 5, (batch, in_features)).astype(dtype)
        dy = rng.integers(-4, 5, (batch, out_features)).astype(dtype)
        cases.append((Case(weights, n, m, "tie_heavy", dtype, "linear", f"#{index}"), x, dy))
    return cases


def _srste_gradient(grad: NDArray, weight: NDArray, mask: NDArray, decay: float) -> NDArray:
    try:  # the nmref reference when present (specs/srste.md)
        from nmref.srste import srste_gradient
    except ImportError:
        result = grad.copy()
        if decay:
            result[~mask] += weight.dtype.type(decay) * weight[~mask]
        return result
    return srste_gradient(grad, weight, mask, decay)


def _first_difference(got: NDArray, expected: NDArray) -> str:
    index = tuple(int(i) for i in np.argwhere(got != expected)[0])
    return f"first at index {index}: expected {expected[index].item()!r}, got {got[index].item()!r}"


def _numeric_output(value: object, dtype: np.dtype) -> NDArray | None:
    """An implementation's output in the reference dtype, or None when it holds no real
    numbers (strings, objects, complex: a cast would raise or drop the imaginary part)."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return None
    if array.dtype.kind not in "biuf":
        return None
    return array.astype(dtype, copy=False)


def check_sparse_training(
    impl: TrainingFunction,
    *,
    method: str = "srste",
    decay: float = 0.25,
    cases: Iterable[tuple[Case, NDArray, NDArray]] | None = None,
    dtype: str = "float64",
    raise_on_failure: bool = True,
) -> Report:
    """Check one training step of a sparse Linear layer against the per-GEMM contract.

    Parameters
    ----------
    impl : callable
        ``impl(x, w, dy, n, m) -> (y, dx, dw)`` (NumPy arrays in and out);
        for ``"srste"`` it must use the given ``decay``.
    method : {"ste", "srste"}
    decay : float, default 0.25
        λ for SR-STE; a power of two keeps the check exact.
    cases : iterable, optional
        ``(case, x, dy)`` triples; default :func:`training_cases` of ``dtype``.

    Returns
    -------
    Report
    """
    check_choice(method, "method", TRAINING_METHODS)
    check = f"{method} training step"
    report = Report(check)
    for case, x, dy in cases if cases is not None else training_cases(dtype=dtype):
        w = case.scores
        mask = nmref.magnitude_mask(w, case.n, case.m)
        sparse = np.where(mask, w, 0).astype(w.dtype)
        expected = {
            "Y": x @ sparse.T,
            "dX": dy @ sparse,
            "dW": _srste_gradient(dy.T @ x, w, mask, decay if method == "srste" else 0.0),
        }
        try:
            outputs = dict(zip(("Y", "dX", "dW"), impl(x, w, dy, case.n, case.m), strict=True))
        except Exception as error:  # an exception on a valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        problems = []
        for name, want in expected.items():
            got = _numeric_output(outputs[name], want.dtype)
            if got is None:
                problems.append(
                    f"  {name}: not a real numeric array "
                    f"(got {type(outputs[name]).__name__} {np.asarray(outputs[name]).dtype})"
                )
            elif got.shape != want.shape:
                problems.append(f"  {name}: shape {got.shape}, expected {want.shape}")
            elif not np.array_equal(got, want):
                problems.append(f"  {name} differs, {_first_difference(got, want)}")
                problems.append(f"    {_training_hint(name, got, x, w, dy, mask, decay)}")
        failure = None
        if problems:
            text = "\n".join(problems)
            with np.printoptions(threshold=64, linewidth=100):
                text += f"\n  w = np.{w!r}\n  x = np.{x!r}\n  dy = np.{dy!r}"
                text += f"\n  forward mask E = np.{mask.astype(int)!r}"
            failure = Failure(check, case, text)
        report.add(failure)
    if raise_on_failure:
        report.raise_for_failure()
    return report


def _training_hint(name, got, x, w, dy, mask, decay) -> str:
    if name == "Y":
        if np.array_equal(got, x @ w.T):
            return "Y used the dense weight: the forward GEMM must use E ⊙ W"
        return "Y must be X (E ⊙ W)^T with E the nmref magnitude mask (ties: lower index)"
    if name == "dX":
        if np.array_equal(got, dy @ w):
            return "dX used the dense weight: the backward GEMM must use the forward mask E"
        return (
            "dX must be dY (E ⊙ W): the input-gradient GEMM uses exactly the forward mask "
            "(its mask must not keep weights the forward pass pruned)"
        )
    grad = dy.T @ x
    if np.array_equal(got, np.where(mask, grad, 0)):
        return "dW was masked: STE/SR-STE pass the gradient to pruned weights too"
    if np.array_equal(got, grad + w.dtype.type(decay) * w):
        return "the decay was applied to kept weights too: SR-STE decays pruned weights only"
    return "dW must be dY^T X (+ λ (1 − E) ⊙ W for SR-STE, once per step)"
