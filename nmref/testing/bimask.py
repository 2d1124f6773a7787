"""Checks for Bi-Mask implementations (``specs/bimask.md``): backward masks, permutation
scores, and the three GEMMs of a Bi-Mask Linear layer, against :mod:`nmref.bimask`.

Implementations are called with NumPy arrays:

* ``check_bimask_backward_mask``: ``impl(w, forward_mask, permutation, n, m) -> B``;
* ``check_permutation_scores``: ``impl(forward_mask, permutations, n, m, criterion) -> scores``;
* ``check_bimask_training``: ``impl(x, w, dy, permutation, n, m) -> (y, dx, dw)`` with the
  SR-STE decay given to the check (default 0.25, exact on the integer-valued cases).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from nmref.testing.cases import Case, generate_cases
from nmref.testing.report import Failure, Report

__all__ = [
    "bimask_cases",
    "check_bimask_backward_mask",
    "check_bimask_training",
    "check_permutation_scores",
]

_PATTERNS = ((2, 4), (1, 4), (3, 4), (4, 8), (2, 8), (1, 2))


def bimask_cases(
    dtype: str = "float32", *, quick: bool = False, layout: str | None = None, seed: int = 0
) -> list[tuple[Case, NDArray[np.intp]]]:
    """``(case, permutation)`` pairs: weights whose output count is a multiple of ``m``."""
    rng = np.random.default_rng([seed, 6])
    count = len(_PATTERNS) * (1 if quick else 3)
    pairs = []
    for kind in ("tie_heavy", "tie_free", "zeros", "random"):
        for case in generate_cases(
            kind, dtype, count, seed=seed, layout=layout, patterns=_PATTERNS
        ):
            blocks = int(rng.integers(1, 4))
            out = blocks * case.m
            # Stack copies of the drawn rows to get `out` output channels, then shuffle rows.
            rows = np.resize(case.scores, (out, *case.scores.shape[1:]))
            scores = rows[rng.permutation(out)]
            pairs.append(
                (
                    Case(scores, case.n, case.m, kind, dtype, layout, case.label),
                    rng.permutation(out).astype(np.intp),
                )
            )
    return pairs


def _first_difference(got: NDArray, expected: NDArray) -> str:
    index = tuple(int(i) for i in np.argwhere(got != expected)[0])
    return f"first at index {index}: expected {expected[index].item()!r}, got {got[index].item()!r}"


def _describe_inputs(**arrays: NDArray) -> str:
    with np.printoptions(threshold=64, linewidth=100):
        return "\n".join(
            f"  {name} = np.{array!r}" if array.size <= 64 else f"  {name}: shape {array.shape}"
            for name, array in arrays.items()
        )


def check_bimask_backward_mask(
    impl: Callable[..., object],
    *,
    dtype: str = "float32",
    layout: str | None = None,
    rank: str = "survivors",
    quick: bool = False,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(w, forward_mask, permutation, n, m)`` against
    :func:`nmref.bimask.backward_mask` (``B ⊆ F``, exact equality)."""
    from nmref.bimask import backward_mask, forward_mask

    check = f"bimask backward_mask[{layout or 'default'}]"
    report = Report(check)
    for case, permutation in bimask_cases(dtype, quick=quick, layout=layout):
        w, n, m = case.scores, case.n, case.m
        forward = forward_mask(w, n, m, layout=layout)
        expected = backward_mask(w, forward, permutation, n, m, layout=layout, rank=rank)
        try:
            got = np.asarray(impl(w, forward, permutation, n, m)).astype(bool)
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        failure = None
        if got.shape != expected.shape or not np.array_equal(got, expected):
            if got.shape != expected.shape:
                why = f"  shape {got.shape}, expected {expected.shape}"
            else:
                why = f"  B differs, {_first_difference(got, expected)}"
                if (got & ~forward).any():
                    why += (
                        "\n  why: B keeps weights the forward mask pruned (B must be a subset of F)"
                    )
                else:
                    why += (
                        "\n  why: each block of m permuted output rows of one column must keep its "
                        "min(survivors, n) largest survivors (ties: lower permuted position)"
                    )
            failure = Failure(
                check,
                case,
                why
                + "\n"
                + _describe_inputs(w=w, permutation=permutation, forward_mask=forward.astype(int)),
            )
        report.add(failure)
    if raise_on_failure:
        report.raise_for_failure()
    return report


def check_permutation_scores(
    impl: Callable[..., object],
    *,
    criterion: str = "kept",
    layout: str | None = None,
    quick: bool = False,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(forward_mask, permutations, n, m, criterion)`` against
    :func:`nmref.bimask.score_permutations` on 8 candidates per case."""
    from nmref.bimask import forward_mask, score_permutations

    check = f"bimask permutation scores[{criterion}]"
    report = Report(check)
    rng = np.random.default_rng(7)
    for case, permutation in bimask_cases("float32", quick=quick, layout=layout):
        forward = forward_mask(case.scores, case.n, case.m, layout=layout)
        out = case.scores.shape[0]
        candidates = np.stack([permutation] + [rng.permutation(out) for _ in range(7)])
        expected = score_permutations(
            forward, candidates, case.n, case.m, criterion=criterion, layout=layout
        )
        try:
            got = np.asarray(impl(forward, candidates, case.n, case.m, criterion))
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        failure = None
        if got.shape != expected.shape or not np.array_equal(got, expected):
            failure = Failure(check, case, f"  scores {got.tolist()}, expected {expected.tolist()}")
        report.add(failure, gap=float(np.max(expected - got)) if got.shape == expected.shape else 0)
    if raise_on_failure:
        report.raise_for_failure()
    return report


def check_bimask_training(
    impl: Callable[..., tuple[object, object, object]],
    *,
    decay: float = 0.25,
    dtype: str = "float64",
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(x, w, dy, permutation, n, m) -> (y, dx, dw)`` against
    :func:`nmref.bimask.bimask_linear_gemms` (small integers: every GEMM is exact)."""
    from nmref.bimask import bimask_linear_gemms

    check = "bimask training step"
    report = Report(check)
    rng = np.random.default_rng([8, 6])
    for case, permutation in bimask_cases("int8", layout="linear"):
        w = np.clip(case.scores, -4, 4).astype(dtype)
        batch = int(rng.integers(1, 4))
        x = rng.integers(-4, 5, (batch, w.shape[1])).astype(dtype)
        dy = rng.integers(-4, 5, (batch, w.shape[0])).astype(dtype)
        reference = bimask_linear_gemms(x, w, dy, permutation, case.n, case.m, decay=decay)
        expected = {"Y": reference.output, "dX": reference.grad_input, "dW": reference.grad_weight}
        try:
            outputs = dict(
                zip(("Y", "dX", "dW"), impl(x, w, dy, permutation, case.n, case.m), strict=True)
            )
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        problems = []
        for name, want in expected.items():
            got = np.asarray(outputs[name], dtype=want.dtype)
            if got.shape != want.shape or not np.array_equal(got, want):
                problems.append(
                    f"  {name} differs"
                    + (
                        f", {_first_difference(got, want)}"
                        if got.shape == want.shape
                        else f": shape {got.shape}, expected {want.shape}"
                    )
                )
        if "dX" in "".join(problems):
            problems.append("  why: dX must be dY (W ⊙ B) with the Bi-Mask backward mask B")
        report.add(
            Failure(
                check,
                case,
                "\n".join(problems)
                + "\n"
                + _describe_inputs(w=w, x=x, dy=dy, permutation=permutation),
            )
            if problems
            else None
        )
    if raise_on_failure:
        report.raise_for_failure()
    return report
