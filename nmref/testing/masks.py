"""Checks for 1-D N:M mask implementations: ``check_nm_mask``, ``check_magnitude_mask``,
``check_mask_error_rules``.

Each check takes any callable ``impl(array, n, m) -> mask`` (a NumPy function,
a wrapped torch/JAX/C++ kernel), runs it on conformance cases, and compares it
with the spec: the output must be a valid N:M mask (rule C1) and equal the
reference bit for bit (rules C2-C7). The report names the first counterexample:
the input, the first group that differs, what was expected and what came back,
and a hint at the rule broken.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

import nmref
from nmref._validation import check_choice
from nmref.testing.cases import DTYPE_NAMES, Case, standard_cases
from nmref.testing.report import Failure, Report, format_values, input_repr

__all__ = [
    "MaskFunction",
    "check_magnitude_mask",
    "check_mask_error_rules",
    "check_nm_mask",
    "compare_masks",
]

MaskFunction = Callable[[NDArray, int, int], object]


def _kept_sum(keys: NDArray, mask: NDArray) -> Fraction | None:
    """Exact sum of the kept keys, or None for non-finite keys."""
    kept = keys[mask]
    if kept.dtype.kind == "f" and not np.isfinite(kept).all():
        return None
    if kept.dtype.kind == "f":
        return sum((Fraction(float(v)) for v in kept), start=Fraction(0))
    return Fraction(sum(int(v) for v in kept))


def _objective_gap(keys: NDArray, expected: NDArray, got: NDArray) -> float:
    """``kept(expected) - kept(got)``, exact until the final rounding; ±inf when that
    difference is beyond float64 (sums of keys near the float maximum), nan when a kept key
    is not finite."""
    want, have = _kept_sum(keys, expected), _kept_sum(keys, got)
    if want is None or have is None:
        return math.nan
    difference = want - have
    try:
        return float(difference)
    except OverflowError:
        return math.copysign(math.inf, difference)


def _hint(keys_group: NDArray, expected: NDArray, got: NDArray, n_required: int) -> str:
    kept = int(got.sum())
    if kept != n_required:
        return (
            f"the group keeps {kept} {'entry' if kept == 1 else 'entries'}; it must keep "
            f"exactly {n_required} (rule C1)"
        )
    expected_kept = sorted(keys_group[expected].tolist())
    got_kept = sorted(keys_group[got].tolist())
    if expected_kept == got_kept:
        return (
            "the kept scores are equal but the positions differ: among equal scores the "
            "lower index must win (rule C4; -0.0 equals 0.0)"
        )
    return "a dropped entry outranks a kept one: the n largest scores must be kept (rule C4)"


def compare_masks(
    check: str,
    case: Case,
    got: object,
    expected: NDArray,
    keys_matrix: NDArray,
    to_matrix: Callable[[NDArray], NDArray],
    *,
    what: str = "scores",
) -> tuple[Failure | None, float]:
    """Compare an implementation's mask with the reference one for ``case``.

    Parameters
    ----------
    check : str
        Name for the report.
    case : Case
    got : array_like
        The implementation's output.
    expected : ndarray of bool
        The reference mask, same shape as ``case.scores``.
    keys_matrix : ndarray
        The ranked keys as a ``[rows, reduction]`` matrix (scores, or
        magnitudes in the layout's matrix).
    to_matrix : callable
        Maps a mask of the input's shape to that matrix.
    what : str
        What the keys are, for the report (``"scores"``, ``"|w|"``).

    Returns
    -------
    (Failure or None, gap)
        ``gap`` is the reference kept-key sum minus the implementation's.
    """
    got_array = np.asarray(got)
    if got_array.shape != case.scores.shape:
        return Failure(
            check,
            case,
            f"  output shape {got_array.shape} differs from the input shape {case.scores.shape}",
        ), math.nan
    if got_array.dtype != np.bool_:
        if got_array.dtype.kind not in "biuf" or not np.isin(got_array, (0, 1)).all():
            return Failure(check, case, f"  output is not a 0/1 mask (dtype {got_array.dtype})"), (
                math.nan
            )
        got_array = got_array != 0
    got_matrix = to_matrix(got_array)
    expected_matrix = to_matrix(expected)
    m = case.m
    if np.array_equal(got_matrix, expected_matrix):
        return None, 0.0
    gap = _objective_gap(keys_matrix, expected_matrix, got_matrix)
    rows = keys_matrix.shape[0]
    got_groups = got_matrix.reshape(rows, -1, m)
    expected_groups = expected_matrix.reshape(rows, -1, m)
    differs = (got_groups != expected_groups).any(axis=2)
    # Report an invalid group (wrong count) first: it is the clearer failure.
    wrong_count = got_groups.sum(axis=2) != expected_groups.sum(axis=2)
    row, group = (int(i) for i in np.argwhere(wrong_count if wrong_count.any() else differs)[0])
    columns = slice(group * m, group * m + m)
    keys_group = keys_matrix[row, columns]
    expected_group = expected_matrix[row, columns]
    got_group = got_matrix[row, columns]
    where = f"matrix row {row}" if case.layout not in (None, "linear") else f"row {row}"
    lines = [
        f"  first differing group: {where}, group {group} "
        f"(entries {group * m}..{group * m + m - 1})",
        f"    {what}:{' ' * max(1, 10 - len(what))}{format_values(keys_group)}",
        f"    expected:  {format_values(expected_group)}",
        f"    got:       {format_values(got_group)}",
        f"  why: {_hint(keys_group, expected_group, got_group, int(expected_group.sum()))}",
        f"  {int(differs.sum())} of {differs.size} groups differ in this case; "
        f"objective gap {gap:g}",
        f"  {input_repr(case.scores)}",
    ]
    return Failure(check, case, "\n".join(lines)), gap


def _run(
    check: str,
    impl: MaskFunction,
    cases: Iterable[Case],
    reference: Callable[[Case], NDArray],
    keys_and_matrix: Callable[[Case], tuple[NDArray, Callable[[NDArray], NDArray]]],
    what: str,
    raise_on_failure: bool,
) -> Report:
    report = Report(check)
    for case in cases:
        expected = reference(case)
        try:
            got = impl(case.scores, case.n, case.m)
        except Exception as error:  # any exception on a valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        keys, to_matrix = keys_and_matrix(case)
        failure, gap = compare_masks(check, case, got, expected, keys, to_matrix, what=what)
        report.add(failure, gap)
    if raise_on_failure:
        report.raise_for_failure()
    return report


def _last_axis_matrix(case: Case) -> tuple[NDArray, Callable[[NDArray], NDArray]]:
    length = case.scores.shape[-1] if case.scores.ndim else 1
    return case.scores.reshape(-1, length), lambda mask: mask.reshape(-1, length)


def check_nm_mask(
    impl: MaskFunction,
    cases: Iterable[Case] | None = None,
    *,
    dtype: str = "float32",
    quick: bool = False,
    reference: Callable[[NDArray, int, int], NDArray] | None = None,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(scores, n, m)`` against :func:`nmref.nm_mask` (groups along the last axis).

    Parameters
    ----------
    impl : callable
        ``impl(scores, n, m) -> mask`` with ``scores`` a NumPy array and the
        mask anything ``numpy.asarray`` accepts (bool or 0/1).
    cases : iterable of Case, optional
        Defaults to :func:`nmref.testing.standard_cases` of ``dtype``
        (hypothesis users pass ``[case]`` from :mod:`nmref.testing.strategies`).
    dtype : str, default "float32"
        Dtype of the default cases (ignored when ``cases`` is given).
    quick : bool, default False
        Use the short default suite.
    reference : callable, optional
        Defaults to :func:`nmref.nm_mask`.
    raise_on_failure : bool, default True
        Raise :class:`ConformanceError` (an ``AssertionError``) with the first
        counterexample; otherwise return the report.

    Returns
    -------
    Report

    See Also
    --------
    check_magnitude_mask
        The same for layout-aware magnitude masks.
    check_transposable_mask
        Transposable masks against the exact optimum.
    nmref.testing.golden.check_golden_vectors
        The shipped vectors, for other languages.

    Examples
    --------
    >>> from nmref.testing import check_nm_mask
    >>> check_nm_mask(nmref.nm_mask, quick=True).ok
    True
    """
    reference = reference or nmref.nm_mask
    if cases is None:
        check_choice(dtype, "dtype", DTYPE_NAMES)
        cases = standard_cases(dtype, quick=quick)
    return _run(
        "nm_mask",
        impl,
        cases,
        lambda case: reference(case.scores, case.n, case.m),
        _last_axis_matrix,
        "scores",
        raise_on_failure,
    )


def check_magnitude_mask(
    impl: MaskFunction,
    cases: Iterable[Case] | None = None,
    *,
    layout: str | None = None,
    dtype: str = "float32",
    quick: bool = False,
    reference: Callable[..., NDArray] | None = None,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(weights, n, m)`` against :func:`nmref.magnitude_mask` with ``layout``.

    The implementation is called without a layout argument: wrap it (e.g.
    ``functools.partial(f, layout="channels")``) so that it groups along the
    layout being checked. Default cases are 2-D for ``"linear"``/``None`` and
    4-D convolution weights for ``"channels"``/``"flat"``. Other parameters
    are those of :func:`check_nm_mask`.

    Returns
    -------
    Report
    """
    reference = reference or nmref.magnitude_mask
    if cases is None:
        check_choice(dtype, "dtype", DTYPE_NAMES)
        cases = standard_cases(dtype, quick=quick, layout=layout)

    def keys_and_matrix(case: Case) -> tuple[NDArray, Callable[[NDArray], NDArray]]:
        case_layout = case.layout if case.layout is not None else layout
        keys = nmref.to_magnitudes(nmref.to_reduction_matrix(case.scores, case_layout))
        return keys, lambda mask: nmref.to_reduction_matrix(mask, case_layout)

    name = "magnitude_mask" if layout is None else f"magnitude_mask[{layout}]"
    return _run(
        name,
        impl,
        cases,
        lambda case: reference(
            case.scores,
            case.n,
            case.m,
            layout=case.layout if case.layout is not None else layout,
        ),
        keys_and_matrix,
        "|w|",
        raise_on_failure,
    )


def _error_cases(function: str) -> list[tuple[str, NDArray, int, int, type[Exception]]]:
    nan_input = np.array([[1.0, np.nan, 2.0, 3.0]], dtype=np.float32)
    # 12 entries: the total is a multiple of 4, the row length 6 is not.
    ragged = np.arange(12, dtype=np.float32).reshape(2, 6) - 6.0
    valid = np.arange(8, dtype=np.float32).reshape(1, 8)
    return [
        ("NaN in the input (rule C6)", nan_input, 2, 4, ValueError),
        ("n > m (rule C6)", valid, 5, 4, ValueError),
        ("n < 0 (rule C6)", valid, -1, 4, ValueError),
        ("m < 1 (rule C6)", valid, 0, 0, ValueError),
        (
            "row length 6 not a multiple of m=4: groups must not straddle rows (rules C2, C7)",
            ragged,
            2,
            4,
            ValueError,
        ),
        ("float n (rule C6)", valid, 2.0, 4, TypeError),  # type: ignore[list-item]
    ]


def check_mask_error_rules(
    impl: MaskFunction, *, function: str = "nm_mask", raise_on_failure: bool = True
) -> Report:
    """Check that ``impl(array, n, m)`` rejects invalid input as the spec requires.

    NaN, ``n > m``, ``n < 0``, ``m < 1`` and a grouped length that is not a
    multiple of ``m`` must raise ``ValueError`` (not return a mask: an
    implementation that reshapes the whole tensor to ``(-1, m)`` silently lets
    groups straddle rows); a float ``n`` must raise ``TypeError``; a zero-size
    input must give an empty mask of the same shape.

    Returns
    -------
    Report
    """
    check = f"{function} error rules"
    report = Report(check)
    for rule, array, n, m, expected_error in _error_cases(function):
        case = Case(array, n if isinstance(n, int) else 0, m, kind="invalid", label=rule)
        try:
            result = impl(array, n, m)
        except expected_error:
            report.add(None)
            continue
        except Exception as error:  # the wrong exception type is a failure
            report.add(
                Failure(
                    check,
                    case,
                    f"  expected {expected_error.__name__} for {rule}, "
                    f"got {type(error).__name__}: {error}",
                )
            )
            continue
        shape = np.shape(result)
        report.add(
            Failure(
                check,
                case,
                f"  expected {expected_error.__name__} for {rule}, but a result of shape {shape} "
                f"was returned\n  {input_repr(array)}",
            )
        )
    empty = np.zeros((0, 8), dtype=np.float32)
    case = Case(empty, 2, 4, kind="zero-size", label="zero-size input (rule C6)")
    try:
        result = np.asarray(impl(empty, 2, 4))
        failure = (
            None
            if result.shape == empty.shape
            else Failure(
                check,
                case,
                f"  zero-size input must give an empty mask of shape (0, 8), "
                f"got shape {result.shape}",
            )
        )
    except Exception as error:  # zero-size input is valid
        failure = Failure(
            check,
            case,
            f"  zero-size input is valid, but it raised {type(error).__name__}: {error}",
        )
    report.add(failure)
    if raise_on_failure:
        report.raise_for_failure()
    return report
