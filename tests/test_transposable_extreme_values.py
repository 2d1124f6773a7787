"""Transposable masks on extreme finite scores: 1e308, subnormals, and both mixed (issue 37).

A valid finite input always gets its mask, whatever a sum of its scores would be in
float64 (spec T5); a number that cannot be reported in float64 (an optimum or a gap beyond
1.8e308) is one ``ValueError`` naming the rule (spec T6), never an ``OverflowError``.
Every method and fill is checked against brute force (``method="brute"``, Python ints)
and against exact sums written here with ``Fraction``.
"""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmref.cli import main
from nmref.io.checkpoints import write_tensors
from nmref.transposable import (
    is_transposable,
    optimality_gap,
    transposable_certificate,
    transposable_mask,
    transposable_mask_reference,
    transposable_optimum,
    verify_certificate,
)
from nmref.transposable._small import kernels_only

LARGEST = sys.float_info.max
EXTREMES = [
    LARGEST, -LARGEST, 1.7e308, -1.7e308, 1e308, -1e308, 8.98e307,
    5e-324, -5e-324, 1e-320, sys.float_info.min, 1e-300, 0.0, -0.0, 1.0, -1.0, 3.0,
]  # fmt: skip
ISSUE_TILE = [[1.7e308, 5e-324, 1, 1]] * 4
FIRST_PATTERN = [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
BEYOND_RANGE = "beyond float64's range"


def _exact_kept_sums(scores: np.ndarray, mask: np.ndarray, m: int) -> list[Fraction]:
    """Per tile (row-major) the exact kept sum, written here with Fractions."""
    sums = []
    for r, c in itertools.product(range(0, scores.shape[0], m), range(0, scores.shape[1], m)):
        tile, kept = scores[r : r + m, c : c + m], mask[r : r + m, c : c + m]
        sums.append(sum((Fraction(float(x)) for x in tile[kept]), Fraction(0)))
    return sums


def _rounded_or_none(value: Fraction) -> float | None:
    try:
        return float(value)
    except OverflowError:
        return None


@st.composite
def extreme_scores(draw, max_m: int = 4, max_tiles: int = 2):
    m = draw(st.integers(2, max_m))
    n = draw(st.integers(0, m))
    shape = (m * draw(st.integers(1, max_tiles)), m * draw(st.integers(1, max_tiles)))
    size = shape[0] * shape[1]
    value = st.one_of(
        st.sampled_from(EXTREMES),
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(min_value=-1e-300, max_value=1e-300, allow_subnormal=True),
    )
    values = draw(st.lists(value, min_size=size, max_size=size))
    return np.array(values, dtype=np.float64).reshape(shape), n, m


def test_mask_of_the_issue_37_tile_needs_no_float64_sum():
    """Issue 37: the mask of this valid finite tile raised OverflowError (its kept sum,
    3.4e308, was converted to float for nothing)."""
    for method, fill in [("exact", "exact"), ("brute", "exact"), ("exact", "at_most")]:
        for parallel in (False, True):
            mask = transposable_mask(ISSUE_TILE, 2, 4, method=method, fill=fill, parallel=parallel)
            np.testing.assert_array_equal(mask, FIRST_PATTERN)
    np.testing.assert_array_equal(
        transposable_mask(ISSUE_TILE, 2, 4, method="brute", fill="at_most"), FIRST_PATTERN
    )
    with kernels_only():
        np.testing.assert_array_equal(transposable_mask(ISSUE_TILE, 2, 4), FIRST_PATTERN)
    np.testing.assert_array_equal(
        transposable_mask_reference(ISSUE_TILE, 2, 4, fill="at_most"), FIRST_PATTERN
    )


@pytest.mark.parametrize("fill", ["exact", "at_most"])
def test_an_optimum_beyond_float64_is_a_value_error_naming_the_rule(fill):
    with pytest.raises(ValueError, match=f"optimal kept sum of tile \\(0, 0\\) is {BEYOND_RANGE}"):
        transposable_optimum(ISSUE_TILE, 2, 4, fill=fill)
    # Its certificate's potentials fit float64 (only the sum does not): it verifies.
    certificate = transposable_certificate(ISSUE_TILE, 2, 4, fill=fill)
    assert verify_certificate(ISSUE_TILE, *certificate, 2, 4, fill=fill)


def test_a_gap_beyond_float64_is_a_value_error_naming_the_rule():
    # Per tile the at-most optimum keeps 4 x 2.5e307 = 1e308; the empty mask keeps 0.
    tile = np.array([[2.5e307, 2.5e307, 0.0, 0.0]] * 4)
    one = optimality_gap(tile, np.zeros((4, 4), bool), 2, 4, fill="at_most")
    assert one.total == 1e308
    two = np.hstack([tile, tile])
    with pytest.raises(ValueError, match=f"gap of the total is {BEYOND_RANGE}"):
        optimality_gap(two, np.zeros((4, 8), bool), 2, 4, fill="at_most")
    big = np.array([[1.7e308, 1.7e308, -1.7e308, -1.7e308]] * 4)
    worst = np.array([[0, 0, 1, 1]] * 2 + [[1, 1, 0, 0]] * 2, dtype=bool)  # still exactly 2:4
    assert optimality_gap(big, worst, 2, 4, fill="exact").total == 0.0  # every mask ties
    with pytest.raises(ValueError, match=f"gap of tile \\(0, 0\\) is {BEYOND_RANGE}"):
        negatives = np.array([[0, 0, 1, 1]] * 2 + [[0, 0, 0, 0]] * 2, dtype=bool)
        optimality_gap(big, negatives, 2, 4, fill="at_most")


def _check_every_method(scores: np.ndarray, n: int, m: int) -> None:
    """Validity, the brute-force optimum and the canonical mask, for every method and fill."""
    fills = ["exact", "at_most"] if m <= 4 else ["exact"]
    for fill in fills:
        brute = transposable_mask(scores, n, m, method="brute", fill=fill)
        assert is_transposable(brute, n, m, exact=fill == "exact")
        best = _exact_kept_sums(scores, brute, m)
        for parallel, only_kernels in itertools.product((False, True), (False, True)):
            if only_kernels:
                with kernels_only():
                    mask = transposable_mask(scores, n, m, fill=fill, parallel=parallel)
            else:
                mask = transposable_mask(scores, n, m, fill=fill, parallel=parallel)
            np.testing.assert_array_equal(mask, brute)  # canonical: the same mask
        assert _exact_kept_sums(
            scores, transposable_mask_reference(scores, n, m, fill=fill), m
        ) == (best)
        # The reported optimum: exact, rounded once; or the rule's ValueError.
        expected = [_rounded_or_none(value) for value in best]
        if None in expected:
            with pytest.raises(ValueError, match=BEYOND_RANGE):
                transposable_optimum(scores, n, m, fill=fill)
        else:
            np.testing.assert_array_equal(
                transposable_optimum(scores, n, m, fill=fill).ravel(), expected
            )
            assert optimality_gap(scores, brute, n, m, fill=fill).total == 0.0
        try:
            certificate = transposable_certificate(scores, n, m, fill=fill)
        except ValueError as error:  # spec T2: a potential float64 cannot hold
            assert "not representable in float64" in str(error)
        else:
            np.testing.assert_array_equal(certificate.mask, brute)
            assert verify_certificate(scores, *certificate, n, m, fill=fill)
    for method in ("greedy", "greedy-prune"):
        mask = transposable_mask(scores, n, m, method=method)
        assert is_transposable(mask, n, m, exact=False)
        np.testing.assert_array_equal(
            mask, transposable_mask_reference(scores, n, m, method=method)
        )


@settings(max_examples=40)  # each example runs every method, fill and path
@given(extreme_scores())
def test_extreme_finite_scores_get_the_brute_force_mask(case):
    _check_every_method(*case)


@pytest.mark.parametrize(
    "tile",
    [
        [[1.7e308, 5e-324, 1.0, 1.0]] * 4,
        [[LARGEST, LARGEST, -LARGEST, 5e-324]] * 4,
        [[5e-324, 1e-320, 0.0, -5e-324], [1e-320, 5e-324, -0.0, 0.0]] * 2,
        [[1e308, -1e308, 1e-300, 5e-324], [-1e308, 1e308, 5e-324, 1e-300]] * 2,
        np.diag([LARGEST] * 4) + 5e-324,
    ],
    ids=["issue", "largest-mixed", "subnormal", "signed-mixed", "diagonal"],
)
def test_extreme_finite_tiles(tile):
    for n in range(5):
        _check_every_method(np.array(tile, dtype=np.float64), n, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_extreme_finite_tiles_of_narrow_floats(dtype):
    info = np.finfo(dtype)
    tiny = info.smallest_subnormal
    tile = np.array([[info.max, tiny, 1, -info.max], [tiny, info.max, -tiny, 0]] * 2, dtype=dtype)
    for n in range(5):
        _check_every_method(tile, n, 4)


def test_extreme_finite_tiles_at_m8_equal_the_readable_solvers():
    """m = 8 (beyond brute force): the kernels against the Python-int readable solvers."""
    rng = np.random.default_rng(37)
    for _ in range(3):
        scores = rng.choice(EXTREMES, size=(8, 16))
        for n, fill in itertools.product((1, 4, 7), ("exact", "at_most")):
            reference = transposable_mask_reference(scores, n, 8, fill=fill)
            assert is_transposable(reference, n, 8, exact=fill == "exact")
            for parallel in (False, True):
                mask = transposable_mask(scores, n, 8, fill=fill, parallel=parallel)
                np.testing.assert_array_equal(mask, reference)


def test_mask_explain_and_audit_commands_do_not_overflow(tmp_path, capsys):
    """Issue 37: ``mask --transposable``, ``explain`` and ``audit`` ended in the traceback."""
    weights = write_tensors(tmp_path / "w.npz", {"l.weight": np.array(ISSUE_TILE)})
    out = tmp_path / "m.npz"
    assert main(["mask", str(weights), "--transposable", "--pattern", "2:4", "-o", str(out)]) == 0
    tile = tmp_path / "tile.npy"
    np.save(tile, np.array(ISSUE_TILE))
    assert main(["explain", "transposable", str(tile), "--pattern", "2:4"]) == 0
    assert "kept sum 3.4e+308" in capsys.readouterr().out
    # The audit reports sums in float64: one line naming the rule, exit 2.
    assert main(["audit", str(weights), "--pattern", "2:4"]) == 2
    error = capsys.readouterr().err
    assert BEYOND_RANGE in error and "Traceback" not in error and len(error.splitlines()) == 1
