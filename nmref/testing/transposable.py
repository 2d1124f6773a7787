"""Checks for transposable N:M mask implementations (``specs/transposable.md``).

``check_transposable_mask(impl, method=...)`` calls ``impl(scores, n, m)`` on 2-D score
matrices whose both dimensions are multiples of ``m`` and checks

* validity: every row and column of every ``m x m`` tile keeps exactly ``n`` (exact
  methods) or at most ``n`` (greedy methods, which may under-fill);
* equality with ``nmref.transposable.transposable_mask`` of the same method, bit for bit
  (the canonical optimum of spec T3 for exact methods), when that module is present;
* the optimality gap (``nmref.transposable.optimality_gap``, against the exactly-n optimum
  for the exact methods and the at-most-n optimum for the greedy ones), reported as ``max gap``.

Without ``nmref.transposable`` only validity is checked (the report's name says so).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from nmref._validation import check_choice
from nmref.testing.cases import DTYPE_NAMES, Case, generate_cases
from nmref.testing.report import Failure, Report

__all__ = ["check_transposable_mask", "transposable_cases"]

_PATTERNS = ((2, 4), (1, 4), (3, 4), (0, 4), (4, 4), (1, 2), (1, 3), (2, 3), (4, 8), (2, 8))


def transposable_cases(dtype: str = "float32", *, quick: bool = False) -> list[Case]:
    """Cases whose rows and columns are multiples of ``m`` (non-finite values replaced)."""
    check_choice(dtype, "dtype", DTYPE_NAMES)
    count = len(_PATTERNS) * (1 if quick else 3)
    rng = np.random.default_rng([3, 8])
    cases = []
    for kind in ("tie_free", "tie_heavy", "zeros", "random"):
        for case in generate_cases(kind, dtype, count, seed=3, patterns=_PATTERNS):
            tiles = int(rng.integers(1, 3))
            rows = np.resize(case.scores, (tiles * case.m, case.scores.shape[1]))
            scores = np.abs(rows) if rng.random() < 0.5 else rows
            if scores.dtype.kind == "f":
                scores = np.where(np.isfinite(scores), scores, 0).astype(scores.dtype)
            cases.append(Case(scores, case.n, case.m, kind, dtype, None, case.label))
    return cases


def _tile_counts(mask: NDArray, m: int) -> NDArray:
    rows, columns = mask.shape
    tiles = mask.reshape(rows // m, m, columns // m, m).swapaxes(1, 2).astype(np.int64)
    return np.concatenate([tiles.sum(axis=2), tiles.sum(axis=3)], axis=-1)


def check_transposable_mask(
    impl: Callable[[NDArray, int, int], object],
    *,
    method: str = "exact",
    dtype: str = "float32",
    quick: bool = False,
    cases: list[Case] | None = None,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(scores, n, m)`` as a transposable-mask method (module docstring).

    ``method`` is one of ``nmref.transposable.METHODS``: it says which validity rule and
    which reference mask apply, so an unknown name is a ``ValueError``, never a guess.
    """
    check_choice(method, "method", ("exact", "brute", "greedy", "greedy-prune"))
    if cases is None:
        check_choice(dtype, "dtype", DTYPE_NAMES)
    try:
        from nmref import transposable as reference
    except ImportError:  # the reference has not landed in this build: validity only
        reference = None
    exact = method in ("exact", "brute")
    check = f"transposable_mask[{method}]" + ("" if reference else " (validity only)")
    report = Report(check)
    for case in cases if cases is not None else transposable_cases(dtype, quick=quick):
        scores, n, m = case.scores, case.n, case.m
        try:
            got = np.asarray(impl(scores, n, m)).astype(bool)
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        if got.shape != scores.shape:
            report.add(Failure(check, case, f"  output shape {got.shape}, expected {scores.shape}"))
            continue
        counts = _tile_counts(got, m)
        bad = counts != n if exact else counts > n
        if bad.any():
            a, b, k = (int(i) for i in np.argwhere(bad)[0])
            what = f"row {k}" if k < m else f"column {k - m}"
            with np.printoptions(threshold=64, linewidth=100):
                tile = got[a * m : (a + 1) * m, b * m : (b + 1) * m].astype(int)
                report.add(
                    Failure(
                        check,
                        case,
                        (
                            f"  tile ({a}, {b}) {what} keeps {counts[a, b, k]}; it must keep "
                            f"{'exactly' if exact else 'at most'} {n} (spec T1)\n"
                            f"  tile mask = np.{tile!r}"
                        ),
                    )
                )
            continue
        gap = 0.0
        failure = None
        if reference is not None:
            # Exact methods are scored against the exactly-n optimum, greedy (at-most) masks
            # against the at-most-n optimum: a gap is never negative (spec T6).
            fill = "exact" if exact else "at_most"
            gap = float(reference.optimality_gap(scores, got, n, m, fill=fill).total)
            expected = reference.transposable_mask(scores, n, m, method=method)
            if not np.array_equal(got, expected):
                index = tuple(int(i) for i in np.argwhere(got != expected)[0])
                failure = Failure(
                    check,
                    case,
                    (
                        f"  differs from nmref at {index} (tile {index[0] // m}, {index[1] // m}); "
                        f"objective gap {gap:g}\n  why: "
                        + (
                            "among optimal masks the canonical one keeps the greatest "
                            "row-major keep bits (spec T3)"
                            if exact
                            else "greedy scan order: descending score, "
                            "lower flat index first (spec T4)"
                        )
                    ),
                )
        report.add(failure, gap)
    if raise_on_failure:
        report.raise_for_failure()
    return report
