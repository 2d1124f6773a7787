"""Tests for nmref.adaprune (specs/adaprune.md): one contract per function, certificates first.

The oracles are independent of the code under test: ``scipy.stats.binom`` and ``math.comb``
for the choice of N, ``numpy.linalg.lstsq`` for the least-squares optimum, the readable loops
of ``nmref.adaprune.reference`` for the fast paths, ``torch.optim.Adam`` for the paper's
procedure. Deliberately wrong implementations must fail the same checks.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nmref import adaprune, is_nm, is_transposable, magnitude_mask, transposable_mask
from nmref.adaprune import (
    AdamSettings,
    InputGram,
    absorb_pruned_mass,
    adaprune_layer,
    choose_n,
    output_error,
    reconstruct_adam,
    reconstruct_exact,
    relative_output_error,
    starting_mask,
)
from nmref.adaprune import reference as ref

binom = pytest.importorskip("scipy.stats").binom

# ----------------------------------------------------------------------------
# Strategies: small layers with zeros, integer-valued inputs (exact Gram matrices)
# ----------------------------------------------------------------------------

weights_elements = st.one_of(st.just(0.0), st.floats(-8, 8, allow_nan=False, width=32))


@st.composite
def layers(draw, *, m_choices=(1, 2, 4, 8), max_out=5, max_groups=3, pad=False):
    """``(weight, n, m, remainder)`` of a small ``[out, in]`` layer with zeros."""
    m = draw(st.sampled_from(m_choices))
    out = draw(st.integers(1, max_out))
    length = m * draw(st.integers(1, max_groups))
    remainder = "error"
    if pad and m > 1 and draw(st.booleans()):
        length -= draw(st.integers(1, m - 1))
        remainder = "pad"
    weight = draw(hnp.arrays(np.float64, (out, length), elements=weights_elements))
    n = draw(st.integers(1, m))
    return weight, n, m, remainder


@st.composite
def problems(draw, *, max_samples=12):
    """``(weight, mask, inputs, bias)``: an N:M mask of a random layer, integer inputs.

    Integer inputs from a few values make duplicated and all-zero columns common, and
    samples fewer than kept weights happen whenever ``samples < n * groups``.
    """
    weight, n, m, _ = draw(layers(m_choices=(2, 4), max_out=4, max_groups=3))
    samples = draw(st.integers(1, max_samples))
    inputs = draw(
        hnp.arrays(np.float64, (samples, weight.shape[1]), elements=st.integers(-2, 2).map(float))
    )
    bias = draw(
        st.one_of(
            st.none(),
            hnp.arrays(np.float64, weight.shape[0], elements=st.integers(-3, 3).map(float)),
        )
    )
    return weight, magnitude_mask(weight, n, m), inputs, bias


def _random_problem(seed, out=6, in_features=16, samples=40, n=2, m=4):
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((out, in_features))
    inputs = rng.standard_normal((samples, in_features))
    bias = rng.standard_normal(out)
    return weight, magnitude_mask(weight, n, m), inputs, bias


# ----------------------------------------------------------------------------
# A1. The choice of N
# ----------------------------------------------------------------------------


def _zero_fraction(weight):
    return Fraction(int(np.sum(weight == 0)), weight.size)


@pytest.mark.slow
@given(layers(m_choices=(1, 2, 4, 8, 16)), st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99]))
def test_choose_n_matches_a_brute_force_binomial_computation(case, confidence):
    weight, _, m, _ = case
    choice = choose_n(weight, m, confidence=confidence)
    p = float(_zero_fraction(weight))
    tails = [float(binom.sf(k - 1, m, p)) for k in range(m + 1)]  # P(Z >= k)
    np.testing.assert_allclose([float(t) for t in choice.tail], tails, rtol=1e-12, atol=1e-15)
    assume(all(abs(t - confidence) > 1e-9 for t in tails))  # not a floating-point near tie
    k_best = max(k for k in range(m) if tails[k] > confidence)
    assert choice.binomial_n == m - k_best
    groups = (weight != 0).reshape(weight.shape[0], -1, m).sum(axis=2)
    assert choice.structured_n == groups.max()
    assert choice.n == max(1, min(choice.binomial_n, choice.structured_n))
    assert 1 <= choice.n <= m


@given(layers(m_choices=(2, 3, 4, 8)))
def test_choose_n_tails_are_exact(case):
    weight, _, m, _ = case
    p = _zero_fraction(weight)
    expected = tuple(
        sum((math.comb(m, i) * p**i * (1 - p) ** (m - i) for i in range(k, m + 1)), Fraction(0))
        for k in range(m + 1)
    )
    assert choose_n(weight, m).tail == expected


def test_an_already_2_4_layer_keeps_2_though_the_binomial_rule_says_dense():
    weight = np.array(
        [[0.0, 1.0, 0.0, 2.0, 3.0, 0.0, -1.0, 0.0], [5.0, 0.0, -0.0, 4.0, 0.0, 0.0, 1.0, 2.0]]
    )
    choice = choose_n(weight, 4)
    assert (choice.n, choice.binomial_n, choice.structured_n) == (2, 4, 2)
    assert choice.zero_fraction == Fraction(1, 2)  # -0.0 is a zero
    assert choice.tail[1] == Fraction(15, 16) and choice.reason == "structured"


def test_an_at_most_layer_keeps_its_fullest_group():
    weight = np.array([[0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]])
    assert choose_n(weight, 4).n == 1


def test_dense_layer_keeps_n_equal_m_and_an_all_zero_layer_keeps_one():
    dense = choose_n(np.ones((3, 8)), 4)
    assert (dense.n, dense.binomial_n, dense.zero_fraction) == (4, 4, 0)
    empty = choose_n(np.zeros((3, 8)), 4)
    assert (empty.n, empty.binomial_n, empty.structured_n, empty.reason) == (1, 1, 0, "floor")


def test_confidence_equal_to_a_tail_is_not_exceeded():
    # m = 2, p = 1/2: P(Z >= 1) = 3/4 exactly; the rule needs strictly more.
    weight = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 3.0], [0.0, 0.0]])
    assert choose_n(weight, 2, confidence=0.75).binomial_n == 2
    assert choose_n(weight, 2, confidence=0.7499999).binomial_n == 1


def test_padding_counts_only_real_entries():
    weight = np.array([[1.0, 0.0, 0.0, 0.0, 2.0, 3.0]])  # groups [1,0,0,0] and [2,3 | pad pad]
    choice = choose_n(weight, 4, remainder="pad")
    assert choice.zero_fraction == Fraction(3, 6)
    assert choice.structured_n == 2


# ----------------------------------------------------------------------------
# A2. Masks
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("n, m", [(2, 4), (1, 4), (4, 8)])
def test_starting_masks_are_the_solvers_masks_and_valid(n, m):
    weight = np.random.default_rng(7).standard_normal((16, 24))
    nm = starting_mask(weight, n, m)
    np.testing.assert_array_equal(nm, magnitude_mask(weight, n, m))
    assert is_nm(nm, n, m)
    square = weight[:, :16]
    exact = starting_mask(square, n, m, method="transposable")
    np.testing.assert_array_equal(exact, transposable_mask(np.abs(square), n, m))
    assert is_transposable(exact, n, m)
    at_most = starting_mask(square, n, m, method="transposable_at_most")
    np.testing.assert_array_equal(at_most, transposable_mask(np.abs(square), n, m, fill="at_most"))
    assert is_transposable(at_most, n, m, exact=False)


# ----------------------------------------------------------------------------
# A3. Absorbing the pruned mass
# ----------------------------------------------------------------------------


def _absorb_dividing_by_m(weight, mask, m, *, remainder="error"):
    """Mutant: spreads the pruned mass over all m entries (the kept share is too small)."""
    values = np.where(mask, weight, 0.0)
    pruned = np.where(mask, 0.0, weight).reshape(weight.shape[0], -1, m).sum(axis=2)
    return np.where(mask, values + np.repeat(pruned / m, m, axis=1), 0.0)


def assert_absorption_contract(absorb, weight, mask, m, remainder):
    result = absorb(weight, mask, m, remainder=remainder)
    assert not (result[~mask] != 0).any() and not np.signbit(result[~mask]).any()
    groups = -(-weight.shape[1] // m)
    for row in range(weight.shape[0]):
        for group in range(groups):
            columns = slice(group * m, (group + 1) * m)
            if mask[row, columns].any():  # each group's sum is kept
                assert math.isclose(
                    result[row, columns].sum(),
                    weight[row, columns].sum(),
                    rel_tol=1e-12,
                    abs_tol=1e-12,
                )


@given(layers(pad=True))
def test_absorption_fast_path_equals_the_reference_bit_for_bit(case):
    weight, n, m, remainder = case
    mask = magnitude_mask(weight, n, m, remainder=remainder)
    fast = absorb_pruned_mass(weight, mask, m, remainder=remainder)
    np.testing.assert_array_equal(
        fast, ref.absorb_pruned_mass_reference(weight, mask, m, remainder=remainder)
    )
    assert_absorption_contract(absorb_pruned_mass, weight, mask, m, remainder)


def test_absorption_contract_rejects_a_mutant_that_divides_by_m():
    weight = np.array([[1.0, 2.0, 3.0, 4.0]])
    mask = np.array([[False, False, True, True]])
    assert_absorption_contract(absorb_pruned_mass, weight, mask, 4, "error")
    with pytest.raises(AssertionError):
        assert_absorption_contract(_absorb_dividing_by_m, weight, mask, 4, "error")


def test_absorption_of_an_empty_group_loses_its_mass():
    result = absorb_pruned_mass([[1.0, -2.0, 3.0, 4.0]], [[0, 0, 0, 0]], 4)
    np.testing.assert_array_equal(result, [[0.0, 0.0, 0.0, 0.0]])


# ----------------------------------------------------------------------------
# A5. Calibration statistics
# ----------------------------------------------------------------------------


@given(
    hnp.arrays(
        np.float64, st.tuples(st.integers(1, 20), st.integers(1, 5)), elements=st.floats(-100, 100)
    ),
    st.integers(1, 7),
)
def test_streamed_statistics_equal_the_statistics_of_all_inputs(inputs, batch):
    streamed = InputGram.empty(inputs.shape[1])
    for first in range(0, len(inputs), batch):
        streamed = streamed.add(inputs[first : first + batch])
    whole = InputGram.of(inputs)
    scale = 1.0 + float(np.abs(inputs).max()) ** 2 * len(inputs)
    assert streamed.count == whole.count == len(inputs)
    np.testing.assert_allclose(
        streamed.mean, inputs.mean(axis=0), atol=1e-12 * (1 + np.abs(inputs).max())
    )
    np.testing.assert_allclose(streamed.gram, inputs.T @ inputs, atol=1e-11 * scale)
    np.testing.assert_allclose(streamed.scatter, whole.scatter, atol=1e-11 * scale)
    np.testing.assert_allclose(streamed.total, inputs.sum(axis=0), atol=1e-11 * scale)
    again = InputGram.from_moments(inputs.T @ inputs, inputs.sum(axis=0), len(inputs))
    np.testing.assert_allclose(again.scatter, whole.scatter, atol=1e-9 * scale)


def test_adding_an_empty_batch_changes_nothing():
    stats = InputGram.of(np.ones((2, 3)))
    assert stats.add(np.zeros((0, 3))) is stats
    assert InputGram.empty(3).merge(stats) is stats


# ----------------------------------------------------------------------------
# A4. The exact optimum
# ----------------------------------------------------------------------------


def lstsq_reconstruction(weight, mask, inputs, bias, start, refit):
    """Oracle: the minimum-norm update by numpy.linalg.lstsq (SVD), row by row."""
    data = inputs - inputs.mean(axis=0) if (refit and bias is not None) else inputs
    result = start.copy()
    for row in range(weight.shape[0]):
        columns = np.flatnonzero(mask[row])
        if len(columns):
            update, *_ = np.linalg.lstsq(
                data[:, columns], data @ (weight[row] - start[row]), rcond=None
            )
            result[row, columns] += update
    new_bias = bias
    if refit and bias is not None:
        new_bias = bias + (weight - result) @ inputs.mean(axis=0)
    return result, new_bias


def _plain_minimum_norm(weight, mask, inputs, *, bias=None, start=None, refit_bias=True):
    """Mutant: the minimum-norm *weights* (lstsq from zero), not the minimum-norm update."""
    zero = np.zeros_like(weight)
    return lstsq_reconstruction(weight, mask, inputs, bias, zero, refit_bias)


def _no_bias_refit(weight, mask, inputs, *, bias=None, start=None, refit_bias=True):
    """Mutant: fits the weights as if the bias were fixed, then shifts the bias."""
    start = np.where(mask, weight, 0.0) if start is None else start
    result, _ = lstsq_reconstruction(weight, mask, inputs, None, start, False)
    new_bias = None if bias is None else bias + (weight - result) @ inputs.mean(axis=0)
    return result, new_bias


def _solver(weight, mask, inputs, *, bias=None, start=None, refit_bias=True):
    result = reconstruct_exact(weight, mask, inputs, bias=bias, start=start, refit_bias=refit_bias)
    return result.weight, result.bias


def assert_matches_lstsq(solver, weight, mask, inputs, bias, start, refit):
    got_weight, got_bias = solver(weight, mask, inputs, bias=bias, start=start, refit_bias=refit)
    want_weight, want_bias = lstsq_reconstruction(weight, mask, inputs, bias, start, refit)
    scale = 1.0 + np.abs(want_weight).max()
    np.testing.assert_allclose(got_weight, want_weight, rtol=0, atol=1e-8 * scale)
    if bias is not None:
        np.testing.assert_allclose(
            got_bias, want_bias, rtol=0, atol=1e-8 * scale * (1 + np.abs(inputs).max())
        )
    got = output_error(weight, got_weight, inputs, bias=bias, new_bias=got_bias)
    want = output_error(weight, want_weight, inputs, bias=bias, new_bias=want_bias)
    assert got <= want + 1e-9 * (1.0 + want)


def _lstsq_cases():
    rng = np.random.default_rng(3)
    weight, mask, inputs, bias = _random_problem(3, samples=40)
    yield "random, samples > kept", weight, mask, inputs, bias
    yield "samples < kept", weight, mask, inputs[:5], bias
    duplicated = inputs.copy()
    duplicated[:, 1] = duplicated[:, 0]
    duplicated[:, 7] = 2.0 * duplicated[:, 4]
    yield "duplicated columns", weight, np.ones_like(mask), duplicated, bias
    zeros = inputs.copy()
    zeros[:, [0, 5, 6]] = 0.0
    yield "zero columns", weight, mask, zeros, bias
    yield "one sample", weight, mask, rng.standard_normal((1, 16)), bias


LSTSQ_CASES = list(_lstsq_cases())


@pytest.mark.parametrize("refit", [False, True])
@pytest.mark.parametrize("start_kind", ["masked", "absorbed"])
@pytest.mark.parametrize("case", LSTSQ_CASES, ids=[case[0] for case in LSTSQ_CASES])
def test_exact_reconstruction_is_the_minimum_norm_update_of_lstsq(case, start_kind, refit):
    _, weight, mask, inputs, bias = case
    start = np.where(mask, weight, 0.0)
    if start_kind == "absorbed":
        start = absorb_pruned_mass(weight, mask, 4)
    assert_matches_lstsq(_solver, weight, mask, inputs, bias, start, refit)
    # The same optimum from the statistics alone.
    from_stats = reconstruct_exact(
        weight, mask, InputGram.of(inputs), bias=bias, start=start, refit_bias=refit
    )
    np.testing.assert_allclose(
        from_stats.weight,
        _solver(weight, mask, inputs, bias=bias, start=start, refit_bias=refit)[0],
        atol=1e-8 * (1 + np.abs(weight).max()),
    )


@pytest.mark.parametrize("mutant", [_plain_minimum_norm, _no_bias_refit])
def test_the_lstsq_check_rejects_wrong_rank_and_bias_rules(mutant):
    _, weight, mask, inputs, bias = LSTSQ_CASES[1]  # samples < kept: the rule decides
    start = np.where(mask, weight, 0.0)
    inputs = inputs + 3.0  # a mean far from zero, so the bias re-fit matters
    assert_matches_lstsq(_solver, weight, mask, inputs, bias, start, True)
    with pytest.raises(AssertionError):
        assert_matches_lstsq(mutant, weight, mask, inputs, bias, start, True)


@settings(max_examples=40)
@given(problems(), st.booleans())
def test_exact_reconstruction_certificates(problem, refit):
    weight, mask, inputs, bias = problem
    result = reconstruct_exact(weight, mask, inputs, bias=bias, refit_bias=refit)
    # Never a weight outside the mask, and +0.0 there.
    assert not (result.weight[~mask] != 0).any() and not np.signbit(result.weight[~mask]).any()
    assert result.objective == pytest.approx(
        ref.output_error_reference(weight, result.weight, inputs, bias=bias, new_bias=result.bias),
        rel=1e-9,
        abs=1e-9,
    )
    # Optimality: the objective's gradient vanishes on the kept weights (and the bias).
    residual = inputs @ (weight - result.weight).T
    if bias is not None:
        residual = residual + (bias - result.bias)
    gradient = inputs.T @ residual
    scale = 1e-8 * (1.0 + np.abs(inputs).sum(axis=0).max() * np.abs(residual).max())
    assert np.abs(gradient.T[mask]).max(initial=0.0) <= scale
    if bias is not None and refit:
        assert np.abs(residual.sum(axis=0)).max() <= scale
    # No feasible point does better: the masked weights and random points on the mask.
    rng = np.random.default_rng(0)
    masked = np.where(mask, weight, 0.0)
    candidates = [masked] + [
        masked + np.where(mask, rng.standard_normal(weight.shape), 0.0) for _ in range(5)
    ]
    for candidate in candidates:
        assert result.objective <= output_error(weight, candidate, inputs) * (1 + 1e-9) + 1e-9
    assert (result.rank <= result.kept).all() and (result.rank <= len(inputs)).all()


@settings(max_examples=40)
@given(problems(), st.booleans(), st.sampled_from([0.0, 1e-3, 0.5]))
def test_exact_fast_path_equals_the_row_by_row_reference(problem, refit, ridge):
    weight, mask, inputs, bias = problem
    stats = InputGram.of(inputs)
    fast = reconstruct_exact(weight, mask, stats, bias=bias, refit_bias=refit, ridge=ridge)
    slow_weight, slow_bias = ref.reconstruct_exact_reference(
        weight, mask, stats, bias=bias, refit_bias=refit, ridge=ridge
    )
    scale = 1.0 + np.abs(slow_weight).max()
    np.testing.assert_allclose(fast.weight, slow_weight, rtol=0, atol=1e-9 * scale)
    if bias is not None:
        np.testing.assert_allclose(
            fast.bias, slow_bias, rtol=0, atol=1e-9 * scale * (1 + np.abs(inputs).max())
        )


def test_ridge_never_beats_the_exact_optimum_and_vanishes_at_zero():
    weight, mask, inputs, bias = _random_problem(5, samples=12)
    exact = reconstruct_exact(weight, mask, inputs, bias=bias)
    for ridge in (1e-6, 1e-2, 1.0):
        ridged = reconstruct_exact(weight, mask, inputs, bias=bias, ridge=ridge)
        assert ridged.objective >= exact.objective
    tiny = reconstruct_exact(weight, mask, inputs, bias=bias, ridge=1e-12)
    np.testing.assert_allclose(tiny.weight, exact.weight, atol=1e-6)


# ----------------------------------------------------------------------------
# A4. The paper's Adam procedure
# ----------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=25)
@given(problems(max_samples=30), st.booleans(), st.integers(0, 2**32 - 1))
def test_adam_never_beats_the_exact_optimum(problem, refit, seed):
    weight, mask, inputs, bias = problem
    # Large steps: Adam gets close to the optimum, where a wrong lower bound would show.
    fast = AdamSettings(lr_weight=0.05, lr_bias=0.05, iterations=150, batch_size=8)
    result = reconstruct_adam(
        weight, mask, inputs, bias=bias, refit_bias=refit, settings=fast, rng=seed
    )
    assert result.gap is not None and result.gap_tolerance is not None
    assert result.gap >= -result.gap_tolerance
    assert result.objective >= result.exact.objective - result.gap_tolerance
    assert not (result.weight[~mask] != 0).any()


@pytest.mark.parametrize("with_bias", [False, True])
def test_adam_fast_path_equals_the_row_by_row_reference(with_bias):
    weight, mask, inputs, bias = _random_problem(11, samples=70)
    bias = bias if with_bias else None
    start = absorb_pruned_mass(weight, mask, 4)
    short = AdamSettings(iterations=60, batch_size=20)
    fast = reconstruct_adam(
        weight, mask, inputs, bias=bias, start=start, settings=short, rng=4, certify=False
    )
    slow_weight, slow_bias, slow_losses = ref.reconstruct_adam_reference(
        weight, mask, inputs, bias=bias, start=start, settings=short, rng=4
    )
    np.testing.assert_allclose(fast.weight, slow_weight, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast.losses, slow_losses, rtol=1e-12)
    if with_bias:
        np.testing.assert_allclose(fast.bias, slow_bias, rtol=0, atol=1e-12)
    assert fast.gap is None


def test_adam_is_deterministic_per_seed_and_draws_one_permutation_per_step():
    weight, mask, inputs, bias = _random_problem(2, samples=30)
    short = AdamSettings(iterations=20, batch_size=7)
    first = reconstruct_adam(weight, mask, inputs, bias=bias, settings=short, rng=9)
    again = reconstruct_adam(weight, mask, inputs, bias=bias, settings=short, rng=9)
    other = reconstruct_adam(weight, mask, inputs, bias=bias, settings=short, rng=10)
    np.testing.assert_array_equal(first.weight, again.weight)
    assert not np.array_equal(first.weight, other.weight)
    generator = np.random.default_rng(9)
    reconstruct_adam(weight, mask, inputs, settings=short, rng=generator, certify=False)
    replay = np.random.default_rng(9)
    for _ in range(20):
        replay.permutation(30)
    assert generator.integers(1 << 30) == replay.integers(1 << 30)


def test_adam_first_step_moves_each_kept_weight_by_about_the_learning_rate():
    weight, mask, inputs, _ = _random_problem(6, samples=50)
    one = AdamSettings(iterations=1, batch_size=50)
    result = reconstruct_adam(weight, mask, inputs, settings=one, certify=False)
    # Adam's first step is lr * g / (|g| + eps): about lr * sign(g) on every kept weight.
    moved = np.abs(result.weight - np.where(mask, weight, 0.0))
    np.testing.assert_allclose(moved[mask], 1e-3, rtol=1e-4)
    assert not (result.weight[~mask] != 0).any()


@pytest.mark.slow
@pytest.mark.torch
def test_adam_equals_the_papers_loop_written_with_torch():
    torch = pytest.importorskip("torch")
    weight, mask, inputs, bias = _random_problem(8, samples=60)
    start = absorb_pruned_mass(weight, mask, 4)
    short = AdamSettings(iterations=40)
    batches = adaprune.adam.minibatches(60, short, np.random.default_rng(1))

    # The authors' procedure (AdaPrune/utils/adaprune.py, adaprune) with our batches.
    layer = torch.nn.Linear(16, 6).double()
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(start))
        layer.bias.copy_(torch.from_numpy(bias))
    targets = torch.from_numpy(inputs @ weight.T + bias)
    cached = torch.from_numpy(inputs)
    opt_w = torch.optim.Adam([layer.weight], lr=1e-3)
    opt_b = torch.optim.Adam([layer.bias], lr=1e-2)
    keep = torch.from_numpy(mask.astype(np.float64))
    for batch in batches:
        index = torch.from_numpy(batch)
        loss = torch.nn.functional.mse_loss(layer(cached[index]), targets[index])
        opt_w.zero_grad()
        opt_b.zero_grad()
        loss.backward()
        opt_w.step()
        opt_b.step()
        with torch.no_grad():
            layer.weight.mul_(keep)

    ours = reconstruct_adam(weight, mask, inputs, bias=bias, start=start, settings=short, rng=1)
    np.testing.assert_allclose(ours.weight, layer.weight.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.bias, layer.bias.detach().numpy(), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------
# A6. Relative output error
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(problems(), st.booleans())
def test_output_error_agrees_from_inputs_from_statistics_and_by_loops(problem, change_bias):
    weight, mask, inputs, bias = problem
    replacement = np.where(mask, weight, 0.0)
    new_bias = None if (bias is None or not change_bias) else bias + 1.0
    loops = ref.output_error_reference(weight, replacement, inputs, bias=bias, new_bias=new_bias)
    direct = output_error(weight, replacement, inputs, bias=bias, new_bias=new_bias)
    gram = output_error(weight, replacement, InputGram.of(inputs), bias=bias, new_bias=new_bias)
    scale = 1.0 + float(np.sum((np.abs(inputs) @ np.abs(weight).T + 2.0) ** 2))
    assert abs(direct - loops) <= 1e-12 * scale
    assert abs(gram - loops) <= 1e-10 * scale


def test_relative_output_error_is_one_for_all_zero_weights_and_defined_at_zero_output():
    weight, _, inputs, _ = _random_problem(1)
    zero = np.zeros_like(weight)
    assert relative_output_error(weight, zero, inputs) == 1.0
    assert relative_output_error(weight, zero, InputGram.of(inputs)) == pytest.approx(
        1.0, abs=1e-12
    )
    assert relative_output_error(zero, zero, inputs) == 0.0
    assert relative_output_error(zero, weight, inputs) == float("inf")


# ----------------------------------------------------------------------------
# A7. The whole layer
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("mask_method", ["nm", "transposable", "transposable_at_most"])
@pytest.mark.parametrize("reconstruction", ["none", "exact", "adam"])
def test_adaprune_layer_returns_a_valid_mask_and_never_a_weight_off_it(mask_method, reconstruction):
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((8, 8))
    weight[rng.random(weight.shape) < 0.5] = 0.0  # unstructured 50%
    inputs = rng.standard_normal((30, 8))
    bias = rng.standard_normal(8)
    result = adaprune_layer(
        weight,
        inputs,
        4,
        n=2,
        bias=bias,
        mask=mask_method,
        reconstruction=reconstruction,
        adam=AdamSettings(iterations=30),
    )
    exact_fill = mask_method != "transposable_at_most"
    assert is_nm(result.mask, 2, 4, exact=exact_fill)
    if mask_method != "nm":
        assert is_transposable(result.mask, 2, 4, exact=exact_fill)
    assert not (result.weight[~result.mask] != 0).any()
    if reconstruction == "exact":  # the optimum beats every feasible start
        assert (
            result.error <= result.error_start + 1e-12
            and result.error <= result.error_masked + 1e-12
        )
        assert result.exact_objective == result.objective
    if reconstruction == "adam":
        assert result.gap >= -result.gap_tolerance


def test_adaprune_layer_chooses_n_from_the_zeros_when_not_given():
    weight = np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]])
    result = adaprune_layer(weight, np.eye(4), 4)
    assert result.choice.n == 2 and result.pattern.n == 2
    # Already 2:4: nothing is pruned, so the exact reconstruction changes nothing.
    np.testing.assert_array_equal(result.weight, weight)
    assert result.error == 0.0


# ----------------------------------------------------------------------------
# A8. Errors: one ValueError per rule, naming the argument
# ----------------------------------------------------------------------------

W = np.arange(1.0, 17.0).reshape(2, 8)
X = np.random.default_rng(0).standard_normal((5, 8))
MASK = magnitude_mask(W, 2, 4)


def _nan_inputs():
    bad = X.copy()
    bad[3, 2] = np.nan
    return bad


def _inf_inputs():
    bad = X.copy()
    bad[1, 0] = np.inf
    return bad


ERROR_CASES = [
    (
        "feature size (array)",
        lambda: reconstruct_exact(W, MASK, X[:, :7]),
        r"calibration has 7 features .* in=8",
    ),
    (
        "feature size (statistics)",
        lambda: reconstruct_exact(W, MASK, InputGram.of(X[:, :6])),
        r"calibration has 6 features",
    ),
    (
        "feature size (layer)",
        lambda: adaprune_layer(W, X[:, :4], 4, n=2),
        r"calibration has 4 features",
    ),
    (
        "NaN in calibration",
        lambda: reconstruct_exact(W, MASK, _nan_inputs()),
        r"calibration contains NaN at index \(3, 2\)",
    ),
    (
        "infinity in calibration",
        lambda: adaprune_layer(W, _inf_inputs(), 4, n=2),
        r"calibration contains an infinity at index \(1, 0\)",
    ),
    (
        "NaN in weight",
        lambda: reconstruct_exact(np.where(MASK, np.nan, W), MASK, X),
        r"weight contains NaN",
    ),
    ("empty calibration", lambda: reconstruct_exact(W, MASK, X[:0]), r"calibration is empty"),
    (
        "empty statistics",
        lambda: reconstruct_exact(W, MASK, InputGram.empty(8)),
        r"calibration is empty",
    ),
    ("empty for Adam", lambda: reconstruct_adam(W, MASK, X[:0]), r"calibration is empty"),
    (
        "mask not valid for the pattern",
        lambda: adaprune_layer(W, X, 4, n=1, mask=MASK),
        r"mask is not valid for 1:4: it keeps 2 > n=1",
    ),
    (
        "mask of another shape",
        lambda: adaprune_layer(W, X, 4, n=2, mask=MASK[:, :4]),
        r"mask must have the weight's shape",
    ),
    ("n = 0", lambda: adaprune_layer(W, X, 4, n=0), r"n=0 must be in 1..m=4"),
    ("n > m", lambda: adaprune_layer(W, X, 4, n=5), r"n=5 must be in 1..m=4"),
    ("n = 0 for a mask", lambda: starting_mask(W, 0, 4), r"n=0 must be in 1..m=4"),
    ("n < 0", lambda: adaprune_layer(W, X, 4, n=-1), r"n=-1 must be in 1..m=4"),
    ("confidence", lambda: choose_n(W, 4, confidence=1.0), r"confidence=1.0 must be in \(0, 1\)"),
    (
        "start off the mask",
        lambda: reconstruct_exact(W, MASK, X, start=W),
        r"start has a nonzero weight outside the mask",
    ),
    (
        "bias shape",
        lambda: reconstruct_exact(W, MASK, X, bias=np.ones(3)),
        r"bias must have shape \(2,\)",
    ),
    (
        "ridge",
        lambda: reconstruct_exact(W, MASK, X, ridge=-1.0),
        r"ridge=-1.0 must be finite and >= 0",
    ),
    (
        "grouped length",
        lambda: adaprune_layer(W[:, :6], X[:, :6], 4, n=2),
        r"length 6 .* multiple of m=4",
    ),
    (
        "transposable tiles",
        lambda: starting_mask(W, 2, 4, method="transposable"),
        r"multiples of m=4",
    ),
    (
        "transposable padding",
        lambda: starting_mask(W, 2, 4, method="transposable", remainder="pad"),
        r"remainder='pad'",
    ),
    (
        "weight ndim",
        lambda: reconstruct_exact(W.reshape(2, 2, 4), MASK, X),
        r"weight must be 2-D \[out, in\]",
    ),
    (
        "calibration ndim",
        lambda: reconstruct_exact(W, MASK, X[0]),
        r"calibration must be 2-D \[samples, in\]",
    ),
    (
        "unknown reconstruction",
        lambda: adaprune_layer(W, X, 4, n=2, reconstruction="sgd"),
        r"reconstruction='sgd' must be one of",
    ),
    (
        "unknown mask method",
        lambda: adaprune_layer(W, X, 4, n=2, mask="random"),
        r"mask='random' must be one of",
    ),
    ("Adam settings", lambda: AdamSettings(beta2=1.0), r"beta2=1.0 must be in \[0, 1\)"),
]


@pytest.mark.parametrize(
    "call, message", [case[1:] for case in ERROR_CASES], ids=[case[0] for case in ERROR_CASES]
)
def test_error_rules(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_type_errors():
    with pytest.raises(TypeError, match="needs the calibration inputs themselves"):
        reconstruct_adam(W, MASK, InputGram.of(X))
    with pytest.raises(TypeError, match="needs the inputs themselves"):
        adaprune_layer(W, InputGram.of(X), 4, n=2, reconstruction="adam")
    with pytest.raises(TypeError, match="weight must be a float16/32/64 array"):
        reconstruct_exact(W.astype(int), MASK, X)
    with pytest.raises(TypeError, match="rng="):
        reconstruct_adam(W, MASK, X, rng="seed")
