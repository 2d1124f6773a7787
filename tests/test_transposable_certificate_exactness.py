"""Certificate checks are exact at every magnitude: no forgery through rounding (issue 37).

``verify_certificate`` accepted potentials ``u = 1e308``, ``v = -1e308`` for a suboptimal
mask: ``s - u - v`` cancels in float64 (and ``|s| + |u| + |v|``, its error band, overflowed
to inf). An oracle's check must be exact, so every check here is compared with one written
in this file on ``Fraction`` values, and a float64 check is shown to be fooled by the same
inputs (the inputs have power).
"""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.transposable import (
    flow,
    optimality_gap,
    transposable_certificate,
    verify_certificate,
)

DIAGONAL = np.array([[9, 1, 1, 1], [1, 9, 1, 1], [1, 1, 9, 1], [1, 1, 1, 9]])
# Keeps no diagonal entry: 8 instead of the optimal 40, a gap of 32.
OFF_DIAGONAL = np.array([[0, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 1], [1, 1, 0, 0]], dtype=bool)
SHIFTS = [1e308, 9e307, sys.float_info.max, 2.0**1000, 1e300, 2.0**60, 1e17]


def _exact_slackness(scores, mask, u, v, m: int) -> bool:
    """Written here: kept ``s >= u + v`` and dropped ``s <= u + v`` on exact rationals."""
    u_full = np.repeat(np.asarray(u), m, axis=1)
    v_full = np.repeat(np.asarray(v), m, axis=0)
    for (r, c), s in np.ndenumerate(np.asarray(scores)):
        slack = Fraction(s.item()) - Fraction(u_full[r, c].item()) - Fraction(v_full[r, c].item())
        if (mask[r, c] and slack < 0) or (not mask[r, c] and slack > 0):
            return False
    return True


def _float64_slackness(scores, mask, u, v, m: int) -> bool:
    """The inexact check (float64 arithmetic): what a forged certificate fools."""
    with np.errstate(over="ignore", invalid="ignore"):
        slack = (
            np.asarray(scores, dtype=np.float64)
            - np.repeat(np.asarray(u), m, axis=1)
            - np.repeat(np.asarray(v), m, axis=0)
        )
    return not ((mask & (slack < 0)) | (~mask & (slack > 0))).any()


@pytest.mark.parametrize("potential", [1e308, 9e307])
def test_verify_certificate_rejects_the_forged_certificate_of_issue_37(potential):
    u, v = np.full((4, 1), potential), np.full((1, 4), -potential)
    assert optimality_gap(DIAGONAL, OFF_DIAGONAL, 2, 4).total == 32.0
    assert _float64_slackness(DIAGONAL, OFF_DIAGONAL, u, v, 4)  # float64 is fooled
    assert not verify_certificate(DIAGONAL, OFF_DIAGONAL, u, v, 2, 4)
    assert not verify_certificate(DIAGONAL, OFF_DIAGONAL, u, v, 2, 4, fill="at_most")
    # The same forgery against the readable solvers' checks (floats as given).
    kept = OFF_DIAGONAL.tolist()
    assert not flow.certifies_optimal(DIAGONAL.tolist(), kept, 2, [potential] * 4, [-potential] * 4)
    assert not flow.certifies_optimal_at_most(
        DIAGONAL.tolist(), kept, 2, [potential] * 4, [0.0] * 4
    )


def test_integer_potentials_beyond_2_to_the_53_are_not_rounded():
    """An int64 potential off by one (2**60 + 1) is not the float64 2**60."""
    certificate = transposable_certificate(DIAGONAL, 2, 4)
    u = certificate.row_potentials.astype(np.int64) + 2**60
    v = certificate.column_potentials.astype(np.int64) - 2**60
    assert verify_certificate(DIAGONAL, certificate.mask, u, v, 2, 4)
    assert not verify_certificate(DIAGONAL, certificate.mask, u + 1, v, 2, 4)
    assert _float64_slackness(DIAGONAL, certificate.mask, u + 1, v, 4)  # float64 is fooled


def test_integer_scores_beyond_2_to_the_53_are_not_rounded():
    """A dropped score 2**60 + 1 above ``u + v = 2**60`` fails the at-most check."""
    scores = np.array([[2**60 + 1, 0, 0, 0]] + [[0, 0, 0, 0]] * 3, dtype=np.int64)
    mask = np.zeros((4, 4), bool)
    assert not verify_certificate(
        scores, mask, np.zeros((4, 1)), np.zeros((1, 4)), 2, 4, fill="at_most"
    )
    full = np.zeros((4, 4), bool)
    full[0, 1] = full[0, 2] = True  # row 0 full: u_0 may be positive
    u = np.array([[2.0**60], [0], [0], [0]])
    assert not verify_certificate(scores, full, u, np.zeros((1, 4)), 2, 4, fill="at_most")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_readable_checks_refuse_non_finite_values(value):
    kept = [[True, False], [False, True]]
    assert not flow.certifies_optimal([[1, 0], [0, 1]], kept, 1, [value, 0], [0, 0])
    assert not flow.certifies_optimal_at_most([[1, 0], [0, 1]], kept, 1, [0, 0], [value, 0])
    assert not flow.certifies_optimal([[value, 0], [0, 1]], kept, 1, [0, 0], [0, 0])


@given(
    m=st.sampled_from([2, 4]),
    data=st.data(),
)
def test_verify_certificate_is_the_exact_check_under_huge_shifts(m, data):
    """Genuine certificates shifted by ``(+c, -c)`` (valid only where the shift is exact),
    and forged ones: ``verify_certificate`` equals the exact check written here."""
    n = data.draw(st.integers(1, m))
    values = data.draw(st.lists(st.integers(-3, 9), min_size=m * m, max_size=m * m))
    scores = np.array(values, dtype=np.int64).reshape(m, m)
    fill = data.draw(st.sampled_from(["exact", "at_most"]))
    certificate = transposable_certificate(scores, n, m, fill=fill)
    shift = data.draw(st.sampled_from(SHIFTS))
    sign = data.draw(st.sampled_from([1.0, -1.0]))
    u = certificate.row_potentials + sign * shift
    v = certificate.column_potentials - sign * shift
    masks = [certificate.mask, ~certificate.mask, np.eye(m, dtype=bool)]
    mask = masks[data.draw(st.integers(0, len(masks) - 1))]
    got = verify_certificate(scores, mask, u, v, n, m, fill=fill)
    if got:
        assert _exact_slackness(scores, mask, u, v, m)
    if fill == "exact" and mask is certificate.mask:
        assert got == _exact_slackness(scores, mask, u, v, m)
    for potentials in [(u, v), (certificate.row_potentials, certificate.column_potentials)]:
        if fill == "exact":
            kept = mask.tolist()
            expected = bool(mask.sum(axis=0).tolist() == [n] * m == mask.sum(axis=1).tolist())
            expected = expected and _exact_slackness(scores, mask, *potentials, m)
            readable = flow.certifies_optimal(
                scores.tolist(),
                kept,
                n,
                potentials[0].ravel().tolist(),
                potentials[1].ravel().tolist(),
            )
            assert readable == expected
            assert verify_certificate(scores, mask, *potentials, n, m) == expected
