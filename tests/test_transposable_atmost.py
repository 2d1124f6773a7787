"""The "at most N" fill of transposable masks (issue 16, item 1; spec T1, T2, T3, T6).

Sparse tensor cores accept at most N nonzeros per group; ``fill="at_most"`` solves that
problem exactly. These tests check validity, optimality against brute force (an itertools
enumeration written here, independent of the library's pattern table), the canonical tie
rule, certificates, the never-negative gap, and that the default fill is unchanged.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmref
from nmref.transposable import (
    flow,
    is_transposable,
    optimality_gap,
    transposable_certificate,
    transposable_mask,
    transposable_mask_reference,
    transposable_optimum,
    transposable_patterns,
    verify_certificate,
)

ISSUE_TILE = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
GOLDEN = Path(nmref.__file__).parent / "testing" / "data" / "golden" / "transposable.json"


def _itertools_at_most(tile: np.ndarray, n: int) -> np.ndarray:
    """Written here: max over every at-most-n 0/1 tile of (exact sum, row-major keep bits)."""
    m = tile.shape[0]
    values = [
        [Fraction(float(x)) if tile.dtype.kind == "f" else int(x) for x in row] for row in tile
    ]
    best_key, best = None, None
    for bits in itertools.product((0, 1), repeat=m * m):
        kept = np.array(bits, dtype=bool).reshape(m, m)
        if (kept.sum(axis=0) > n).any() or (kept.sum(axis=1) > n).any():
            continue
        total = sum(values[i][j] for i in range(m) for j in range(m) if kept[i, j])
        key = (total, bits)
        if best_key is None or key > best_key:
            best_key, best = key, kept
    assert best is not None
    return best


@st.composite
def tiled_scores(draw, max_m: int = 4, max_tiles: int = 2, kinds=("int", "float32")):
    m = draw(st.integers(2, max_m))
    n = draw(st.integers(0, m))
    shape = (m * draw(st.integers(1, max_tiles)), m * draw(st.integers(1, max_tiles)))
    kind = draw(st.sampled_from(kinds))
    size = shape[0] * shape[1]
    if kind == "int":  # tie-heavy, signed, with zeros
        values = draw(st.lists(st.integers(-2, 3), min_size=size, max_size=size))
        scores = np.array(values, dtype=np.int64).reshape(shape)
    else:
        values = draw(
            st.lists(
                st.sampled_from([0.0, 0.5, 1.0, -0.25, 2.0, 1e-3, 3.5]),
                min_size=size,
                max_size=size,
            )
        )
        scores = np.array(values, dtype=np.float32).reshape(shape)
    return scores, n, m


def _tiles(array: np.ndarray, m: int):
    for r in range(0, array.shape[0], m):
        for c in range(0, array.shape[1], m):
            yield r, c, array[r : r + m, c : c + m]


# ---- the issue's tile, literally ------------------------------------------------------


def test_the_issue_tile_keeps_six_at_most_and_five_exactly():
    assert transposable_optimum(ISSUE_TILE, 2, 4).tolist() == [[5.0]]
    assert transposable_optimum(ISSUE_TILE, 2, 4, fill="at_most").tolist() == [[6.0]]
    mask = transposable_mask(ISSUE_TILE, 2, 4, fill="at_most")
    assert mask.astype(int).tolist() == [[1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]]
    assert is_transposable(mask, 2, 4, exact=False)
    assert int(ISSUE_TILE[mask].sum()) == 6
    # The canonical mask keeps the tight zero (3, 3): row 3 and column 3 have room.
    assert mask[3, 3] and ISSUE_TILE[3, 3] == 0


def test_the_issue_mask_gets_a_gap_of_zero_never_minus_one():
    better = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=bool)
    assert optimality_gap(ISSUE_TILE, better, 2, 4, fill="at_most").total == 0.0
    with pytest.raises(ValueError, match="fill='at_most'"):
        optimality_gap(ISSUE_TILE, better, 2, 4)  # the old call: was -1.0, now refused
    with pytest.raises(ValueError, match=r"fill='exact' needs exactly n=2.*spec T1"):
        optimality_gap(ISSUE_TILE, better, 2, 4, fill="exact")
    exact = transposable_mask(ISSUE_TILE, 2, 4)
    assert optimality_gap(ISSUE_TILE, exact, 2, 4).total == 0.0
    assert optimality_gap(ISSUE_TILE, exact, 2, 4, fill="exact").total == 0.0
    assert optimality_gap(ISSUE_TILE, exact, 2, 4, fill="at_most").total == 1.0


# ---- validity and optimality ------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(tiled_scores())
def test_at_most_masks_are_valid_optimal_and_canonical(case):
    scores, n, m = case
    mask = transposable_mask(scores, n, m, fill="at_most")
    assert mask.dtype == bool and mask.shape == scores.shape
    assert is_transposable(mask, n, m, exact=False)
    brute = transposable_mask(scores, n, m, method="brute", fill="at_most")
    np.testing.assert_array_equal(mask, brute)
    np.testing.assert_array_equal(mask, transposable_mask_reference(scores, n, m, fill="at_most"))
    np.testing.assert_array_equal(
        brute, transposable_mask_reference(scores, n, m, method="brute", fill="at_most")
    )
    for r, c, tile in _tiles(scores, m):
        np.testing.assert_array_equal(mask[r : r + m, c : c + m], _itertools_at_most(tile, n))
        if m == 4:
            break  # 2**16 candidates per 4x4 tile in Python: one tile is enough here


@settings(max_examples=60, deadline=None)
@given(tiled_scores())
def test_exact_optimum_is_at_most_the_at_most_optimum(case):
    scores, n, m = case
    exact = transposable_optimum(scores, n, m)
    at_most = transposable_optimum(scores, n, m, fill="at_most")
    assert (exact <= at_most).all()
    # The empty tile is an at-most mask, so the at-most optimum is never negative.
    assert (at_most >= 0).all()


def test_every_brute_force_pattern_is_valid_and_in_canonical_order():
    for n in range(5):
        patterns = transposable_patterns(n, 4, fill="at_most")
        assert all(is_transposable(p, n, 4, exact=False) for p in patterns)
        bits = [tuple(p.ravel()) for p in patterns]
        assert bits == sorted(bits, reverse=True) and len(set(bits)) == len(bits)
        # Every at-most tile is listed: compare with a count written here.
        count = sum(
            1
            for b in itertools.product((0, 1), repeat=16)
            if (np.array(b).reshape(4, 4).sum(0) <= n).all()
            and (np.array(b).reshape(4, 4).sum(1) <= n).all()
        )
        assert len(patterns) == count
    assert len(transposable_patterns(2, 4, fill="at_most")) == 7343


@pytest.mark.parametrize(("n", "m"), [(1, 5), (2, 5), (3, 6), (4, 8), (2, 8)])
def test_larger_tiles_are_certified_optimal(n, m):
    rng = np.random.default_rng(16 * m + n)
    for scores in (
        rng.integers(-2, 3, size=(m, 2 * m)),
        rng.standard_normal((m, m)).astype(np.float32),
        np.abs(rng.standard_normal((m, m))).astype(np.float32),
        np.zeros((m, m)),
    ):
        certificate = transposable_certificate(scores, n, m, fill="at_most")
        assert verify_certificate(scores, *certificate, n, m, fill="at_most")
        np.testing.assert_array_equal(
            certificate.mask, transposable_mask(scores, n, m, fill="at_most")
        )
        assert (
            transposable_optimum(scores, n, m) <= transposable_optimum(scores, n, m, fill="at_most")
        ).all()


def test_zero_and_negative_tiles():
    # All-zero: every mask ties; the canonical one keeps as much as it can, lowest index first.
    zeros = transposable_mask(np.zeros((4, 4)), 2, 4, fill="at_most")
    assert zeros.astype(int).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    # All-negative: keeping anything loses, so nothing is kept (exactly-n keeps n per line).
    assert not transposable_mask(-np.ones((4, 8)), 2, 4, fill="at_most").any()
    assert transposable_mask(-np.ones((4, 8)), 2, 4).sum() == 16
    # n = 0 and n = m.
    scores = np.arange(16.0).reshape(4, 4) - 5
    assert not transposable_mask(scores, 0, 4, fill="at_most").any()
    np.testing.assert_array_equal(transposable_mask(scores, 4, 4, fill="at_most"), scores >= 0)
    assert transposable_mask(np.zeros((0, 8)), 2, 4, fill="at_most").shape == (0, 8)


# ---- the gap is never negative ------------------------------------------------------------


@st.composite
def scores_and_mask(draw):
    scores, n, m = draw(tiled_scores())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    at_most = transposable_patterns(n, m, fill="at_most")
    exact = transposable_patterns(n, m)
    mask = np.zeros(scores.shape, dtype=bool)
    exact_mask = np.zeros(scores.shape, dtype=bool)
    for r, c, _ in _tiles(scores, m):
        mask[r : r + m, c : c + m] = at_most[rng.integers(len(at_most))]
        exact_mask[r : r + m, c : c + m] = exact[rng.integers(len(exact))]
    return scores, n, m, mask, exact_mask


@settings(max_examples=80, deadline=None)
@given(scores_and_mask())
def test_gap_is_never_negative_for_a_valid_mask_of_its_fill(case):
    scores, n, m, mask, exact_mask = case
    gap = optimality_gap(scores, mask, n, m, fill="at_most")
    assert (gap.per_tile >= 0).all() and gap.total >= 0
    optimum = transposable_optimum(scores, n, m, fill="at_most")
    # sum in float64: a float32 tile's own sum rounds (0.5 + 0.001 in float32 is off by 1e-8)
    kept = np.array(
        [
            [
                float(t[mask[r : r + m, c : c + m]].astype(np.float64).sum())
                for r, c, t in _tiles(scores, m)
            ]
        ]
    )
    # the gap is exact and rounded once; the float subtraction here is not: compare with a
    # tolerance relative to the sums' size
    scale = max(1.0, float(np.abs(optimum).max()), float(np.abs(kept).max()))
    np.testing.assert_allclose(
        gap.per_tile.ravel(), optimum.ravel() - kept.ravel(), rtol=0, atol=1e-12 * scale
    )
    # An exactly-n mask: all three calls are defined and non-negative; the old call equals
    # fill="exact" bit for bit, and the at-most gap is at least as large.
    legacy = optimality_gap(scores, exact_mask, n, m)
    exact = optimality_gap(scores, exact_mask, n, m, fill="exact")
    relaxed = optimality_gap(scores, exact_mask, n, m, fill="at_most")
    np.testing.assert_array_equal(legacy.per_tile, exact.per_tile)
    assert legacy.total == exact.total and (exact.per_tile >= 0).all()
    assert (relaxed.per_tile >= exact.per_tile).all()
    # The old call on an at-most mask: the same number as before where that is >= 0, else
    # a ValueError naming fill='at_most'; never a negative gap.
    if is_transposable(mask, n, m, exact=True):
        assert optimality_gap(scores, mask, n, m).total >= 0
    else:
        with pytest.raises(ValueError, match="fill='exact'"):
            optimality_gap(scores, mask, n, m, fill="exact")
        try:
            old = optimality_gap(scores, mask, n, m)
        except ValueError as error:
            assert "fill='at_most'" in str(error)
        else:
            assert (old.per_tile >= 0).all()


def test_greedy_masks_are_scored_against_the_at_most_optimum():
    rng = np.random.default_rng(3)
    scores = np.abs(rng.standard_normal((16, 16)))
    greedy = transposable_mask(scores, 2, 4, method="greedy")
    gap = optimality_gap(scores, greedy, 2, 4, fill="at_most")
    assert (gap.per_tile >= 0).all()
    optimal = transposable_mask(scores, 2, 4, fill="at_most")
    assert optimality_gap(scores, optimal, 2, 4, fill="at_most").total == 0.0


# ---- certificates -----------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(tiled_scores(max_m=5))
def test_at_most_certificate_verifies_and_tampering_is_caught(case):
    scores, n, m = case
    certificate = transposable_certificate(scores, n, m, fill="at_most")
    assert verify_certificate(scores, *certificate, n, m, fill="at_most")
    mask, u, v = certificate
    assert (u >= 0).all() and (v >= 0).all()
    # Lines with room have zero duals (complementary slackness of the inequalities).
    if n:
        rows = mask.reshape(mask.shape[0], -1, m).sum(axis=2)
        assert (u[rows < n] == 0).all()
    # Raising a dual on a line with room breaks the certificate.
    rows = mask.reshape(mask.shape[0], -1, m).sum(axis=2)
    room = np.argwhere(rows < n)
    if len(room):
        tampered = u.copy()
        tampered[tuple(room[0])] += 1.0
        assert not verify_certificate(scores, mask, tampered, v, n, m, fill="at_most")
    # A negative dual is refused.
    negative = u.copy()
    negative[0, 0] = -1.0
    assert not verify_certificate(scores, mask, negative, v, n, m, fill="at_most")


def test_readable_duals_certify_and_refuse_a_suboptimal_mask():
    tile = ISSUE_TILE.tolist()
    kept, u, v = flow.solve_tile_at_most(tile, 2)
    assert flow.certifies_optimal_at_most(tile, kept, 2, u, v)
    exact, eu, ev = flow.solve_tile(tile, 2)  # optimal for exactly 2, not for at most 2
    assert not flow.certifies_optimal_at_most(tile, exact, 2, eu, ev)
    with pytest.raises(ValueError, match="not an optimal at-most-n mask"):
        flow.at_most_duals(tile, exact, 2)


# ---- the default fill is unchanged ----------------------------------------------------


def test_default_fill_is_unchanged_on_the_golden_cases():
    cases = json.loads(GOLDEN.read_text())["cases"]
    for case in cases:
        scores = np.array(case["scores"], dtype=case["dtype"])
        n, m = case["n"], case["m"]
        for method in ("exact", "brute"):
            if method not in case["masks"]:
                continue
            expected = np.array(case["masks"][method], dtype=bool)
            np.testing.assert_array_equal(transposable_mask(scores, n, m, method=method), expected)
            np.testing.assert_array_equal(
                transposable_mask(scores, n, m, method=method, fill="exact"), expected
            )
        np.testing.assert_array_equal(
            transposable_optimum(scores, n, m, fill="exact"), np.array(case["optimum"])
        )
        certificate = transposable_certificate(scores, n, m, fill="exact")
        np.testing.assert_array_equal(certificate.mask, transposable_certificate(scores, n, m).mask)


@settings(max_examples=40, deadline=None)
@given(tiled_scores(max_m=6, kinds=("int", "float32")))
def test_fill_exact_equals_the_default(case):
    scores, n, m = case
    np.testing.assert_array_equal(
        transposable_mask(scores, n, m), transposable_mask(scores, n, m, fill="exact")
    )


# ---- errors ---------------------------------------------------------------------------


def test_fill_errors():
    scores = np.ones((8, 8))
    with pytest.raises(ValueError, match="fill='most'"):
        transposable_mask(scores, 2, 4, fill="most")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fill='at_most' applies to method='exact' or 'brute'"):
        transposable_mask(scores, 2, 4, method="greedy", fill="at_most")
    with pytest.raises(ValueError, match="m <= 4"):
        transposable_mask(np.ones((5, 5)), 2, 5, method="brute", fill="at_most")
    with pytest.raises(ValueError, match="m <= 4"):
        transposable_patterns(2, 5, fill="at_most")
    with pytest.raises(ValueError, match="NaN"):
        transposable_mask(np.full((4, 4), np.nan), 2, 4, fill="at_most")
    with pytest.raises(ValueError, match="fill="):
        optimality_gap(scores, scores > 0, 2, 4, fill="none")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fill="):
        transposable_certificate(scores, 2, 4, fill="")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="more than n=2"):
        optimality_gap(scores, scores > 0, 2, 4, fill="at_most")


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0, float("nan")])
def test_optimality_gap_refuses_mask_values_other_than_0_and_1(bad: float) -> None:
    """Issue 20: optimality_gap accepted mask values 0.5, 2, -1, NaN as kept, while
    backward_mask rejects them."""
    scores = np.abs(np.random.default_rng(1).standard_normal((4, 4)))
    mask = transposable_mask(scores, 2, 4).astype(float)
    mask[0, int(np.argmax(mask[0]))] = bad
    with pytest.raises(ValueError, match="mask"):
        optimality_gap(scores, mask, 2, 4)
