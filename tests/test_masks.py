"""Tests of the 1-D N:M mask rules in specs/conventions.md (rules C1-C7)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nmref
from nmref.masks import nm_mask_reference
from tests.naive import brute_force_mask

# ----------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------

patterns = st.integers(1, 9).flatmap(lambda m: st.tuples(st.integers(0, m), st.just(m)))
small_patterns = st.integers(1, 6).flatmap(lambda m: st.tuples(st.integers(0, m), st.just(m)))
FLOAT_DTYPES = [np.float16, np.float32, np.float64]
INT_DTYPES = [np.int8, np.int16, np.int64, np.uint8, np.uint32]


@st.composite
def scored(draw, pattern_strategy=patterns, ties: bool | None = None, finite: bool = False):
    """(scores, n, m): a 2-D array whose last axis is a multiple of m."""
    n, m = draw(pattern_strategy)
    rows = draw(st.integers(0, 4))
    groups = draw(st.integers(0, 4))
    tie_heavy = draw(st.booleans()) if ties is None else ties
    dtype = draw(st.sampled_from(FLOAT_DTYPES + INT_DTYPES))
    if tie_heavy:
        # Few distinct values: ties are where implementations disagree.
        elements = st.sampled_from(
            [0, 1, 2, 3] if dtype in INT_DTYPES else [0.0, -0.0, 1.0, -1.0, 2.0]
        )
        if np.dtype(dtype).kind == "u":
            elements = st.sampled_from([0, 1, 2])
    elif np.dtype(dtype).kind == "f":
        elements = st.floats(
            allow_nan=False, allow_infinity=not finite, width=np.dtype(dtype).itemsize * 8
        )
    else:
        elements = st.integers(np.iinfo(dtype).min, np.iinfo(dtype).max)
    scores = draw(hnp.arrays(dtype, (rows, groups * m), elements=elements))
    return scores, n, m


def groups_of(array: np.ndarray, m: int) -> np.ndarray:
    return array.reshape(-1, m)


# ----------------------------------------------------------------------------
# C1: exactly n kept per group; C4: ranking and tie rule
# ----------------------------------------------------------------------------


@given(scored())
def test_exactly_n_kept_in_every_group(case):
    scores, n, m = case
    mask = nmref.nm_mask(scores, n, m)
    assert mask.dtype == np.bool_ and mask.shape == scores.shape
    assert (groups_of(mask, m).sum(axis=1) == n).all()
    assert nmref.is_nm(mask, n, m)


@given(scored())
def test_every_kept_score_beats_every_dropped_score_with_lower_index_on_ties(case):
    scores, n, m = case
    mask = nmref.nm_mask(scores, n, m)
    for values, kept in zip(groups_of(scores, m), groups_of(mask, m), strict=True):
        for i in np.flatnonzero(kept):
            for j in np.flatnonzero(~kept):
                assert values[i] >= values[j]
                if values[i] == values[j]:
                    assert i < j, f"tie between {i} (kept) and {j} (dropped) broken upwards"


@given(scored(small_patterns, finite=True))
@example((np.array([[1.0, 1.0, 1.0, 1.0]]), 2, 4))
@example((np.array([[3, 1, 3, 3]]), 2, 4))
@example((np.array([[0.0, -0.0, 0.0, -0.0]]), 1, 4))
def test_agrees_with_brute_force_over_all_subsets(case):
    scores, n, m = case
    np.testing.assert_array_equal(nmref.nm_mask(scores, n, m), brute_force_mask(scores, n, m))


def test_tie_rule_examples():
    np.testing.assert_array_equal(nmref.nm_mask([1, 1, 1, 1], 2, 4), [1, 1, 0, 0])
    np.testing.assert_array_equal(nmref.nm_mask([0, 2, 2, 0], 2, 4), [0, 1, 1, 0])
    np.testing.assert_array_equal(nmref.nm_mask([3, 1, 3, 3], 2, 4), [1, 0, 1, 0])
    # torch.topk keeps [2, 3] for an all-equal group; the reference does not.
    np.testing.assert_array_equal(nmref.nm_mask([[5, 5, 5, 5]], 1, 4), [[1, 0, 0, 0]])


def test_negative_zero_equals_zero():
    np.testing.assert_array_equal(nmref.nm_mask([0.0, -0.0, 0.0, -0.0], 2, 4), [1, 1, 0, 0])
    np.testing.assert_array_equal(nmref.nm_mask([-0.0, 0.0, 1.0, -1.0], 2, 4), [1, 0, 1, 0])
    np.testing.assert_array_equal(
        nmref.magnitude_mask([[-0.0, 0.0, 0.0, -0.0]], 3, 4), [[1, 1, 1, 0]]
    )


# ----------------------------------------------------------------------------
# Magnitudes (C5) and infinities (C6)
# ----------------------------------------------------------------------------


@given(scored(), st.data())
def test_magnitude_mask_is_invariant_under_sign_flips(case, data):
    weights, n, m = case
    assume(weights.dtype.kind == "f")
    signs = data.draw(hnp.arrays(np.bool_, weights.shape))
    flipped = np.where(signs, -weights, weights)
    np.testing.assert_array_equal(
        nmref.magnitude_mask(weights, n, m), nmref.magnitude_mask(flipped, n, m)
    )


@given(scored(finite=True), st.integers(-3, 3))
def test_magnitude_mask_is_invariant_under_positive_scaling(case, exponent):
    weights, n, m = case
    assume(weights.dtype.kind == "f")
    weights = weights.astype(np.float64)
    # Powers of two scale exactly unless they overflow or underflow (those cases are
    # assumed away below, so numpy's overflow warning is expected here).
    with np.errstate(over="ignore"):
        scaled = weights * 2.0**exponent
    assume(np.array_equal(scaled / 2.0**exponent, weights) and np.isfinite(scaled).all())
    np.testing.assert_array_equal(
        nmref.magnitude_mask(weights, n, m), nmref.magnitude_mask(scaled, n, m)
    )


@given(scored())
def test_magnitude_mask_is_idempotent(case):
    weights, n, m = case
    mask = nmref.magnitude_mask(weights, n, m)
    pruned = np.where(mask, weights, np.zeros((), dtype=weights.dtype))
    np.testing.assert_array_equal(nmref.magnitude_mask(pruned, n, m), mask)


@given(scored(ties=False), st.data())
def test_permutation_within_groups_permutes_the_mask(case, data):
    scores, n, m = case
    groups = groups_of(scores, m)
    assume(all(len(set(g.tolist())) == m for g in groups))  # tie-free
    permutation = np.array(data.draw(st.permutations(range(m))))
    permuted = groups[:, permutation].reshape(scores.shape)
    mask = groups_of(nmref.nm_mask(scores, n, m), m)
    np.testing.assert_array_equal(groups_of(nmref.nm_mask(permuted, n, m), m), mask[:, permutation])


def test_infinities_rank_by_value_in_nm_mask_and_by_magnitude_in_magnitude_mask():
    scores = np.array([[-np.inf, 1.0, np.inf, 0.0]])
    np.testing.assert_array_equal(nmref.nm_mask(scores, 2, 4), [[0, 1, 1, 0]])
    np.testing.assert_array_equal(nmref.magnitude_mask(scores, 2, 4), [[1, 0, 1, 0]])


def test_integer_magnitudes_do_not_overflow():
    weights = np.array([[-128, 127, 1, -1]], dtype=np.int8)
    np.testing.assert_array_equal(nmref.magnitude_mask(weights, 1, 4), [[1, 0, 0, 0]])
    np.testing.assert_array_equal(nmref.to_magnitudes(weights), [[128, 127, 1, 1]])


def test_scores_are_compared_exactly_in_their_own_dtype():
    # 2**53 + 1 and 2**53 are equal as float64 but not as int64.
    big = np.array([[2**53, 2**53 + 1, 0, 0]], dtype=np.int64)
    np.testing.assert_array_equal(nmref.nm_mask(big, 1, 4), [[0, 1, 0, 0]])
    # Adjacent float16 values must not collapse.
    half = np.array([[1.0, np.nextafter(np.float16(1.0), np.float16(2.0)), 0, 0]], np.float16)
    np.testing.assert_array_equal(nmref.nm_mask(half, 1, 4), [[0, 1, 0, 0]])
    # Bools are scores too.
    np.testing.assert_array_equal(nmref.nm_mask([False, True, False, True], 1, 4), [0, 1, 0, 0])


# ----------------------------------------------------------------------------
# Axis handling, remainder policy, zero-size
# ----------------------------------------------------------------------------


@given(scored(), st.integers(0, 2))
def test_axis_argument_equals_moving_the_axis_last(case, axis):
    scores, n, m = case
    cube = np.stack([scores, scores[::-1]], axis=0) if scores.size else scores[None]
    moved = np.moveaxis(cube, -1, axis)
    expected = np.moveaxis(nmref.nm_mask(cube, n, m), -1, axis)
    np.testing.assert_array_equal(nmref.nm_mask(moved, n, m, axis=axis), expected)


@given(scored(), st.integers(1, 8))
def test_pad_keeps_min_n_r_in_the_partial_last_group(case, extra):
    scores, n, m = case
    assume(scores.shape[0] > 0)
    extra = extra % m
    tail = np.arange(extra, dtype=scores.dtype).reshape(1, -1).repeat(scores.shape[0], axis=0)
    ragged = np.concatenate([scores, tail], axis=1)
    mask = nmref.nm_mask(ragged, n, m, remainder="pad")
    full = scores.shape[1]
    np.testing.assert_array_equal(mask[:, :full], nmref.nm_mask(scores, n, m))
    assert (mask[:, full:].sum(axis=1) == min(n, extra)).all()
    assert nmref.is_nm(mask, n, m, remainder="pad")


def test_zero_size_inputs_give_empty_masks():
    assert nmref.nm_mask(np.zeros((0, 8)), 2, 4).shape == (0, 8)
    assert nmref.nm_mask(np.zeros((3, 0)), 2, 4).shape == (3, 0)
    assert nmref.is_nm(np.zeros((0, 8)), 2, 4)


# ----------------------------------------------------------------------------
# Fast path == reference, on many inputs
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8, 16, 32, 33, 64])
@pytest.mark.parametrize(
    "dtype", [np.float16, np.float32, np.float64, np.int8, np.uint16, np.bool_]
)
def test_fast_path_equals_reference_on_tie_heavy_and_random_inputs(m, dtype):
    rng = np.random.default_rng(m)
    for n in sorted({0, 1, m // 2, m - 1, m} - {-1}):
        tie_heavy = rng.integers(-2, 3, size=(9, 3 * m)).astype(dtype)
        random = (rng.standard_normal((9, 3 * m)) * 100).astype(dtype)
        for scores in (tie_heavy, random):
            np.testing.assert_array_equal(
                nmref.nm_mask(scores, n, m), nm_mask_reference(scores, n, m)
            )
            np.testing.assert_array_equal(
                nmref.magnitude_mask(scores, n, m),
                nm_mask_reference(nmref.to_magnitudes(scores), n, m),
            )


@given(scored())
def test_fast_path_equals_reference_property(case):
    scores, n, m = case
    np.testing.assert_array_equal(nmref.nm_mask(scores, n, m), nm_mask_reference(scores, n, m))


# ----------------------------------------------------------------------------
# Validity checks
# ----------------------------------------------------------------------------


def test_is_nm_exact_and_relaxed():
    assert nmref.is_nm([1, 0, 1, 0], 2, 4)
    assert not nmref.is_nm([1, 0, 0, 0], 2, 4)
    assert nmref.is_nm([1, 0, 0, 0], 2, 4, exact=False)
    assert not nmref.is_nm([1, 1, 1, 0], 2, 4, exact=False)
    # Masked weights: nonzero means kept.
    assert nmref.is_nm([[0.5, 0.0, -2.0, 0.0]], 2, 4)


def test_nm_violations_name_group_coordinates_along_any_axis():
    mask = np.zeros((8, 3), dtype=bool)
    mask[[0, 1], 0] = True  # rows 0-3, column 0: valid 2:4
    mask[[4, 5, 6], 1] = True  # rows 4-7, column 1: three kept
    mask[[0, 2], 1] = True
    mask[[0, 3], 2] = True
    mask[[5, 6], 2] = True
    mask[[6, 7], 0] = True
    violations = nmref.nm_violations(mask, 2, 4, axis=0)
    np.testing.assert_array_equal(violations, [[1, 1]])
    np.testing.assert_array_equal(nmref.nm_violations(mask, 2, 4, axis=0, exact=False), [[1, 1]])
    assert nmref.nm_violations(np.ones((2, 4)), 4, 4).shape == (0, 2)


@given(scored())
def test_a_mask_with_one_entry_flipped_is_caught(case):
    scores, n, m = case
    assume(scores.size > 0)
    mask = nmref.nm_mask(scores, n, m)
    broken = mask.copy()
    broken.flat[0] = ~broken.flat[0]
    assert not nmref.is_nm(broken, n, m)
    np.testing.assert_array_equal(nmref.nm_violations(broken, n, m), [[0, 0]])


# ----------------------------------------------------------------------------
# Errors (C6, C7): each rule with its message
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: nmref.nm_mask([1.0, np.nan, 0, 0], 2, 4),
            ValueError,
            r"NaN \(first at index \(1,\)\)",
        ),
        (lambda: nmref.magnitude_mask(np.full((4, 4, 1, 1), np.nan), 2, 4), ValueError, "NaN"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], 5, 4), ValueError, "n=5 must be <= m=4"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], -1, 4), ValueError, "n=-1 must be >= 0"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], 0, 0), ValueError, "m=0 must be >= 1"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], 2.0, 4), TypeError, "n=2.0 must be an integer"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], True, 4), TypeError, "must be an integer"),
        (lambda: nmref.nm_mask([1, 2, 3, 4, 5], 2, 4), ValueError, "length 5 .* multiple of m=4"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], 2, 4, remainder="x"), ValueError, "remainder='x'"),
        (lambda: nmref.nm_mask([1, 2, 3, 4], 2, 4, axis=1), ValueError, "axis=1 is out of bounds"),
        (lambda: nmref.nm_mask(np.float64(1.0), 1, 1), ValueError, "at least one dimension"),
        (lambda: nmref.nm_mask(np.array([1j, 0, 0, 0]), 2, 4), TypeError, "dtype=complex128"),
        (lambda: nmref.nm_mask(np.array(["a"] * 4), 2, 4), TypeError, "dtype=<U1"),
        (
            lambda: nmref.magnitude_mask(np.ones((4, 4)), 2, 4, layout="rows"),
            ValueError,
            "layout='rows'",
        ),
        (
            lambda: nmref.magnitude_mask(np.ones((4, 4, 3)), 2, 4, layout="linear"),
            ValueError,
            "2-D",
        ),
        (lambda: nmref.is_nm(np.ones(6), 2, 4), ValueError, "length 6"),
        (lambda: nmref.parse_pattern("2/4"), ValueError, "form 'N:M'"),
        (lambda: nmref.parse_pattern("5:4"), ValueError, "n=5 must be <= m=4"),
    ],
)
def test_error_rules(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_never_returns_an_invalid_mask_on_infinite_and_extreme_inputs():
    info = np.finfo(np.float32)
    scores = np.array(
        [[np.inf, -np.inf, np.inf, -np.inf], [info.max, info.tiny, -info.max, 0.0]], np.float32
    )
    for n in range(5):
        assert nmref.is_nm(nmref.nm_mask(scores, n, 4), n, 4)
        assert nmref.is_nm(nmref.magnitude_mask(scores, n, 4), n, 4)


# ----------------------------------------------------------------------------
# The checker has power: deliberately wrong implementations must fail
# ----------------------------------------------------------------------------


def _mutant_topk_ties_upward(scores, n, m):
    """Keeps the higher index on ties (what torch.topk does on CPU)."""
    groups = np.asarray(scores).reshape(-1, m)
    order = np.argsort(groups, axis=1, kind="stable")[:, ::-1]
    mask = np.zeros(groups.shape, dtype=bool)
    np.put_along_axis(mask, order[:, :n], True, axis=1)
    return mask.reshape(np.shape(scores))


def _mutant_signed_greedy(scores, n, m):
    """Ranks |w| by signed value (torchao's default runtime sparsifier)."""
    return nm_mask_reference(np.asarray(scores), n, m)


def test_mutants_are_rejected():
    ties = np.array([[1.0, 1.0, 1.0, 1.0]])
    assert not np.array_equal(_mutant_topk_ties_upward(ties, 2, 4), nmref.nm_mask(ties, 2, 4))
    signed = np.array([[-5.0, 1.0, 2.0, 0.5]])
    assert not np.array_equal(
        _mutant_signed_greedy(signed, 2, 4), nmref.magnitude_mask(signed, 2, 4)
    )
