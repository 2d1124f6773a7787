"""Tests of the BAME-style reference (specs/bame.md): one helper per contract."""

from __future__ import annotations

import importlib.resources
import itertools
import math
from dataclasses import fields
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.bame import (
    BameConfig,
    BameState,
    adaptation_budget,
    adapted_fraction,
    block_scores,
    candidate_blocks,
    evolve_mask,
    evolve_mask_reference,
    gradient_positions,
    is_update_step,
    keep_utility,
    oscillation_frequency,
    select_blocks,
    update_steps,
    weight_gradient_fraction,
)
from nmref.bame.training import (
    SGD,
    GradientLedger,
    accuracy,
    bame_train_step,
    init_sparse_mlp,
    sparse_weight_gradient,
)
from nmref.masks import is_nm, nm_mask

GOLDEN = importlib.resources.files("nmref.testing") / "data" / "golden" / "bame_evolve.npz"
PATTERNS = [(1, 2), (2, 4), (1, 4), (3, 4), (2, 8), (0, 4), (4, 4), (1, 1)]
SWITCHES: dict[str, list[object]] = {
    "fraction_schedule": ["cosine", "linear", "constant"],
    "swap_rule": ["single_swap", "reselect"],
    "regrow_init": ["zero", "stale"],
    "lookahead_step": [None, 0.0, 0.5],
    "curvature": [0.0, 1.0, 0.25],
    "reset_momentum": [True, False],
    "oscillation": ["revert_rate", "change_rate", "change_ema"],
    "freeze_threshold": [0.5, 0.0, 1.0, 0.3],
    "sticky_freeze": [False, True],
    "combine": ["freeze_then_rank", "multiplicative"],
    "product_exponent": [1.0, 0.0, 2.0],
    "budget_of": ["candidates", "all"],
    "adapt_fraction": [0.3, 1.0, 0.0, 0.5],
    "step_order": ["evolve_first", "step_first"],
}


# ----------------------------------------------------------------------------
# Random cases: float or tie-heavy integer-valued weights and gradients
# ----------------------------------------------------------------------------


def make_case(seed: int, choices: dict[str, int], tie_heavy: bool):
    """A random (weight, mask, grad, state, step, config, velocity) with a consistent state."""
    rng = np.random.default_rng(seed)
    n, m = PATTERNS[choices["pattern"] % len(PATTERNS)]
    switches = {
        name: values[choices.get(name, 0) % len(values)] for name, values in SWITCHES.items()
    }
    rows, groups = 1 + seed % 3, 1 + (seed // 3) % 4
    shape = (rows, groups * m)
    if tie_heavy:
        weight = rng.integers(-2, 3, size=shape).astype(np.float64)
        grad = rng.integers(-2, 3, size=shape).astype(np.float64)
    else:
        weight = rng.normal(size=shape)
        grad = rng.normal(size=shape)
    mask = nm_mask(rng.normal(size=shape), n, m)
    num_updates = int(rng.integers(0, 6))
    changes = rng.integers(0, num_updates + 1, size=(rows, groups))
    reverts = np.minimum(changes, rng.integers(0, num_updates + 1, size=(rows, groups)))
    state = BameState(
        changes=changes.astype(np.int64),
        reverts=reverts.astype(np.int64),
        change_ema=rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], size=(rows, groups)),
        frozen=rng.random((rows, groups)) < 0.2,
        previous_mask=nm_mask(rng.normal(size=shape), n, m),
        num_updates=num_updates,
    )
    config = BameConfig(n, m, t_i=3, t_f=103, update_interval=10, **switches)
    step = 3 + 10 * int(rng.integers(0, 10))
    velocity = rng.normal(size=shape)
    return weight, mask, grad, state, step, config, velocity


case_choices = st.fixed_dictionaries(
    {"pattern": st.integers(0, 40), **{name: st.integers(0, 5) for name in SWITCHES}}
)


def assert_evolutions_equal(fast, slow) -> None:
    for name in ("mask", "weight", "velocity", "candidates", "selected", "reduction", "scores"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    assert fast.budget == slow.budget
    assert_states_equal(fast.state, slow.state)


def assert_states_equal(a: BameState, b: BameState) -> None:
    for f in fields(BameState):
        np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def assert_valid_evolution(weight, mask, grad, state, step, config, velocity, result) -> None:
    """Every contract of spec 3.7 for one evolution."""
    n, m = config.n, config.m
    blocks = (mask.shape[0], mask.shape[1] // m)
    # Exactly n kept per block.
    assert result.mask.dtype == np.bool_ and is_nm(result.mask, n, m)
    # At most k(t) blocks change; k(t) is the stated formula.
    changed_blocks = (result.mask != mask).reshape(*blocks, m).any(axis=2)
    base = result.candidates.sum() if config.budget_of == "candidates" else result.candidates.size
    assert result.budget == min(
        int(result.candidates.sum()), math.floor(adapted_fraction(step, config) * base)
    )
    assert changed_blocks.sum() <= result.selected.sum() <= result.budget
    # Only selected blocks change; frozen (non-candidate) blocks never do.
    assert not (changed_blocks & ~result.selected).any()
    assert not (result.selected & ~result.candidates).any()
    np.testing.assert_array_equal(result.candidates, candidate_blocks(state, config))
    # A block adapts only when its score is positive.
    assert (result.scores[result.selected] > 0).all()
    assert (result.reduction[result.selected] > 0).all()
    # Regrow init and momentum reset touch exactly the changed positions.
    changed = result.mask != mask
    if config.regrow_init == "zero":
        assert (result.weight[changed & result.mask] == 0).all()
        np.testing.assert_array_equal(
            result.weight[~(changed & result.mask)], weight[~(changed & result.mask)]
        )
    else:
        np.testing.assert_array_equal(result.weight, weight)
    if config.reset_momentum:
        assert (result.velocity[changed] == 0).all()
    np.testing.assert_array_equal(result.velocity[~changed], velocity[~changed])
    # Counters: monotone, consistent.
    assert result.state.num_updates == state.num_updates + 1
    assert (result.state.changes >= state.changes).all()
    assert (result.state.reverts >= state.reverts).all()
    np.testing.assert_array_equal(result.state.changes - state.changes, changed_blocks)
    assert ((result.state.change_ema >= 0) & (result.state.change_ema <= 1)).all()
    assert (result.state.frozen >= state.frozen).all()


# ----------------------------------------------------------------------------
# Fast path == oracle, for any visiting order; invariants
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(seed=st.integers(0, 10_000), choices=case_choices, tie_heavy=st.booleans())
def test_evolve_mask_matches_reference_in_any_visit_order(seed, choices, tie_heavy):
    weight, mask, grad, state, step, config, velocity = make_case(seed, choices, tie_heavy)
    fast = evolve_mask(
        weight, mask, grad, state, step, config, learning_rate=0.1, velocity=velocity
    )
    order = np.random.default_rng(seed + 1).permutation(fast.candidates.size)
    slow = evolve_mask_reference(
        weight,
        mask,
        grad,
        state,
        step,
        config,
        learning_rate=0.1,
        velocity=velocity,
        visit_order=order,
    )
    assert_evolutions_equal(fast, slow)


@pytest.mark.slow
@given(seed=st.integers(0, 10_000), choices=case_choices, tie_heavy=st.booleans())
def test_every_evolution_satisfies_the_contracts(seed, choices, tie_heavy):
    weight, mask, grad, state, step, config, velocity = make_case(seed, choices, tie_heavy)
    before = [a.copy() for a in (weight, mask, grad, velocity, state.changes, state.previous_mask)]
    result = evolve_mask(
        weight, mask, grad, state, step, config, learning_rate=0.1, velocity=velocity
    )
    assert_valid_evolution(weight, mask, grad, state, step, config, velocity, result)
    # Pure: inputs untouched.
    after = (weight, mask, grad, velocity, state.changes, state.previous_mask)
    for old, new in zip(before, after, strict=True):
        np.testing.assert_array_equal(old, new)


@pytest.mark.slow
@given(seed=st.integers(0, 10_000), choices=case_choices, tie_heavy=st.booleans())
def test_gradient_outside_the_spec_positions_is_never_read(seed, choices, tie_heavy):
    """NaN or garbage where the spec computes no gradient leaves the result unchanged."""
    weight, mask, grad, state, step, config, velocity = make_case(seed, choices, tie_heavy)
    allowed = gradient_positions(mask, candidate_blocks(state, config), config.m)
    expected = evolve_mask(
        weight, mask, grad, state, step, config, learning_rate=0.1, velocity=velocity
    )
    for filler in (np.nan, 1e300):
        poisoned = np.where(allowed, grad, filler)
        got = evolve_mask(
            weight, mask, poisoned, state, step, config, learning_rate=0.1, velocity=velocity
        )
        assert_evolutions_equal(got, expected)


def test_missing_gradient_inside_a_candidate_block_is_an_error():
    config = BameConfig(2, 4, t_i=0, t_f=10, update_interval=1, lookahead_step=0.0)
    weight = np.array([[1.0, 2.0, 3.0, 4.0]])
    mask = np.array([[False, False, True, True]])
    grad = np.array([[np.nan, 0.0, 1.0, 1.0]])  # a pruned entry of a candidate block
    with pytest.raises(ValueError, match=r"grad is not finite at \(0, 0\).*candidate block"):
        evolve_mask(weight, mask, grad, BameState.initial(mask, 4), 0, config)


# ----------------------------------------------------------------------------
# LMA scores: optimality against brute force, hand-checked values
# ----------------------------------------------------------------------------


def exact_gain(u, old, new) -> Fraction:
    added = sum((u[p] for p in range(len(u)) if new[p] and not old[p]), Fraction(0))
    removed = sum((u[p] for p in range(len(u)) if old[p] and not new[p]), Fraction(0))
    return added - removed


def index_order_gain(u, old, new) -> float:
    gain = 0.0
    for p in range(len(u)):
        gain = (
            gain
            + (u[p] if new[p] and not old[p] else 0.0)
            - (u[p] if old[p] and not new[p] else 0.0)
        )
    return gain


@pytest.mark.slow
@given(
    seed=st.integers(0, 10_000),
    pattern=st.sampled_from([(1, 4), (2, 4), (3, 4), (2, 6), (3, 8)]),
    tie_heavy=st.booleans(),
    regrow=st.sampled_from(["zero", "stale"]),
)
def test_block_scores_are_the_brute_force_optimum(seed, pattern, tie_heavy, regrow):
    n, m = pattern
    rng = np.random.default_rng(seed)
    shape = (2, 2 * m)
    draw = (
        (lambda: rng.integers(-2, 3, size=shape).astype(float))
        if tie_heavy
        else (lambda: rng.normal(size=shape))
    )
    weight, grad = draw(), draw()
    mask = nm_mask(rng.normal(size=shape), n, m)
    candidates = np.ones((2, 2), bool)
    kwargs = dict(n=n, m=m, regrow_init=regrow, lookahead_step=0.3, curvature=0.5)
    single = block_scores(weight, mask, grad, candidates, swap_rule="single_swap", **kwargs)
    whole = block_scores(weight, mask, grad, candidates, swap_rule="reselect", **kwargs)
    u = keep_utility(weight, mask, grad, regrow_init=regrow, lookahead_step=0.3, curvature=0.5)
    for r, b in itertools.product(range(2), range(2)):
        cols = slice(b * m, b * m + m)
        uu, kept = u[r, cols].tolist(), mask[r, cols].tolist()
        best_pair = max(uu[j] - uu[i] for i in range(m) if kept[i] for j in range(m) if not kept[j])
        # Keeping the pattern (R = 0) is always an option.
        assert single.reduction[r, b] == max(best_pair, 0.0)
        # reselect: optimal in exact arithmetic (float sums of equal-valued subsets may
        # round differently), and R is the index-order float sum of its own proposal.
        exact = [Fraction(value) for value in uu]
        best_exact = max(
            exact_gain(exact, kept, [p in subset for p in range(m)])
            for subset in itertools.combinations(range(m), n)
        )
        proposal = whole.proposed_mask[r, cols].tolist()
        assert exact_gain(exact, kept, proposal) == max(best_exact, 0)
        assert whole.reduction[r, b] == max(index_order_gain(uu, kept, proposal), 0.0)
        single_proposal = single.proposed_mask[r, cols].tolist()
        assert index_order_gain(uu, kept, single_proposal) == max(best_pair, 0.0)
        if whole.reduction[r, b] == 0:
            assert proposal == kept
        if single.reduction[r, b] == 0:
            assert single_proposal == kept
        assert single.proposed_mask[r, cols].sum() == n == whole.proposed_mask[r, cols].sum()


@pytest.mark.slow
@given(seed=st.integers(0, 10_000), choices=case_choices, tie_heavy=st.booleans())
def test_single_swap_and_reselect_agree_when_one_is_kept(seed, choices, tie_heavy):
    choices = {**choices, "pattern": 2, "swap_rule": 0}
    weight, mask, grad, state, step, config, velocity = make_case(seed, choices, tie_heavy)
    a = evolve_mask(weight, mask, grad, state, step, config, learning_rate=0.1, velocity=velocity)
    b = evolve_mask(
        weight,
        mask,
        grad,
        state,
        step,
        config.replace(swap_rule="reselect"),
        learning_rate=0.1,
        velocity=velocity,
    )
    assert_evolutions_equal(a, b)


def test_keep_utility_by_hand():
    weight = np.array([[2.0, -1.0, 3.0, 0.5]])
    mask = np.array([[True, True, False, False]])
    grad = np.array([[0.5, 1.0, -2.0, 4.0]])
    # kept: c/2 w^2 - g w + eta g^2 ; pruned (stale v = w): -g v - c/2 v^2 + eta g^2
    u = keep_utility(weight, mask, grad, regrow_init="stale", lookahead_step=0.5, curvature=2.0)
    np.testing.assert_array_equal(u, [[4 - 1 + 0.125, 1 + 1 + 0.5, 6 - 9 + 2, -2 - 0.25 + 8]])
    u0 = keep_utility(weight, mask, grad, regrow_init="zero", lookahead_step=0.5, curvature=2.0)
    np.testing.assert_array_equal(u0[0, 2:], [2.0, 8.0])


def test_single_swap_ties_prune_the_higher_index_and_regrow_the_lower():
    weight = np.array([[1.0, 1.0, 0.0, 0.0]])
    mask = np.array([[True, True, False, False]])
    grad = np.array([[0.0, 0.0, 1.0, 1.0]])  # u = [0.5, 0.5, 1, 1] with eta=1, c=1
    scores = block_scores(
        weight, mask, grad, np.array([[True]]), n=2, m=4, lookahead_step=1.0, curvature=1.0
    )
    assert scores.reduction[0, 0] == 0.5
    np.testing.assert_array_equal(scores.proposed_mask, [[True, False, True, False]])


# ----------------------------------------------------------------------------
# Selection, schedule, combination switches
# ----------------------------------------------------------------------------


def test_select_blocks_takes_positive_scores_best_first_ties_to_lower_index():
    scores = np.array([[0.5, 2.0, 2.0, -1.0], [0.0, 3.0, 2.0, 0.1]])
    candidates = np.ones_like(scores, dtype=bool)
    candidates[1, 1] = False
    got = select_blocks(scores, candidates, 3)
    np.testing.assert_array_equal(got, [[False, True, True, False], [False, False, True, False]])
    assert select_blocks(scores, candidates, 100).sum() == 5  # every positive candidate
    assert select_blocks(scores, candidates, 0).sum() == 0


@given(seed=st.integers(0, 10_000))
def test_select_blocks_is_permutation_equivariant_for_distinct_scores(seed):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(1, 12))
    candidates = rng.random((1, 12)) < 0.8
    permutation = rng.permutation(12)
    budget = int(rng.integers(0, 8))
    direct = select_blocks(scores, candidates, budget)
    permuted = select_blocks(scores[:, permutation], candidates[:, permutation], budget)
    np.testing.assert_array_equal(permuted, direct[:, permutation])


def test_update_steps_and_fraction_schedules_by_hand():
    config = BameConfig(2, 4, t_i=10, t_f=50, update_interval=10, adapt_fraction=0.4)
    assert [t for t in range(60) if is_update_step(t, config)] == [10, 20, 30, 40]
    cosine = [adapted_fraction(t, config) for t in (10, 20, 30, 40, 50, 9)]
    assert cosine == pytest.approx(
        [
            0.4,
            0.2 * (1 + math.cos(math.pi / 4)),
            0.2,
            0.2 * (1 + math.cos(3 * math.pi / 4)),
            0.0,
            0.0,
        ],
        abs=1e-15,
    )
    linear = config.replace(fraction_schedule="linear")
    assert [adapted_fraction(t, linear) for t in (10, 20, 30)] == pytest.approx([0.4, 0.3, 0.2])
    constant = config.replace(fraction_schedule="constant")
    assert [adapted_fraction(t, constant) for t in (10, 49, 50)] == [0.4, 0.4, 0.0]
    # k(t) = floor(f * base), base = candidates or all blocks, at most the candidates.
    assert adaptation_budget(10, 7, 100, config) == 2
    assert adaptation_budget(10, 7, 100, config.replace(budget_of="all")) == 7
    assert adaptation_budget(10, 50, 100, config.replace(budget_of="all")) == 40


def test_multiplicative_combination_reorders_by_oscillation():
    config = BameConfig(
        1,
        2,
        t_i=0,
        t_f=100,
        update_interval=1,
        adapt_fraction=0.5,
        fraction_schedule="constant",
        lookahead_step=1.0,
        curvature=0.0,
        oscillation="change_rate",
        freeze_threshold=1.0,
    )
    weight = np.zeros((1, 4))
    mask = np.array([[True, False, True, False]])
    grad = np.array([[0.0, 2.0, 0.0, 1.9]])  # R = 4 for block 0, 3.61 for block 1
    state = BameState(
        np.array([[2, 0]]),
        np.zeros((1, 2), np.int64),
        np.zeros((1, 2)),
        np.zeros((1, 2), bool),
        mask.copy(),
        num_updates=4,
    )
    rank = evolve_mask(weight, mask, grad, state, 0, config)
    product = evolve_mask(weight, mask, grad, state, 0, config.replace(combine="multiplicative"))
    np.testing.assert_array_equal(rank.selected, [[True, False]])
    np.testing.assert_array_equal(product.selected, [[False, True]])  # 4 * 0.5 < 3.61 * 1
    np.testing.assert_array_equal(product.scores, [[2.0, grad[0, 3] ** 2]])
    # A block that changed at every update has weight 0: not even a candidate.
    always = BameState(
        np.array([[4, 0]]),
        state.reverts,
        state.change_ema,
        state.frozen,
        mask.copy(),
        num_updates=4,
    )
    np.testing.assert_array_equal(
        candidate_blocks(always, config.replace(combine="multiplicative")), [[False, True]]
    )


# ----------------------------------------------------------------------------
# Oscillation-aware block freezing: a hand-driven A -> B -> A -> B sequence
# ----------------------------------------------------------------------------


def flip_flop(config: BameConfig, steps: int):
    """One 1:4 block; gradients alternately favour positions 1 and 0."""
    weight = np.array([[1.0, 0.0, 0.0, 0.0]])
    mask = np.array([[True, False, False, False]])
    state = BameState.initial(mask, 4)
    history = []
    for t in range(steps):
        grad = np.zeros((1, 4))
        grad[0, 1 - t % 2] = 3.0
        result = evolve_mask(weight, mask, grad, state, t, config)
        weight, mask, state = result.weight, result.mask, result.state
        history.append((mask.copy(), state))
    return history


BASE = BameConfig(
    1,
    4,
    t_i=0,
    t_f=100,
    update_interval=1,
    adapt_fraction=1.0,
    fraction_schedule="constant",
    lookahead_step=1.0,
    curvature=0.0,
)


def test_oscillation_counters_by_hand():
    history = flip_flop(BASE.replace(freeze_threshold=1.0), 3)
    masks = [h[0][0].astype(int).tolist() for h in history]
    assert masks == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0]]
    state = history[-1][1]
    assert (state.num_updates, int(state.changes[0, 0]), int(state.reverts[0, 0])) == (3, 3, 2)
    assert state.change_ema[0, 0] == pytest.approx(1 - 0.9**3)
    assert oscillation_frequency(state, BASE)[0, 0] == 2 / 3
    assert oscillation_frequency(state, BASE.replace(oscillation="change_rate"))[0, 0] == 1.0


def test_oscillating_block_is_frozen_and_thaws_unless_sticky():
    # revert_rate after 3 updates is 2/3 > 0.5: the 4th update may not touch the block.
    history = flip_flop(BASE, 6)
    a, b = [1, 0, 0, 0], [0, 1, 0, 0]
    # Update 4 (t=3) is frozen; at t=4 the rate is 2/4, not above 0.5, so the block is
    # a candidate again (t=4 favours the kept position: no change; t=5 reverts to A).
    assert [h[0][0].astype(int).tolist() for h in history] == [b, a, b, b, b, a]
    assert history[-1][1].reverts[0, 0] == 3
    sticky = flip_flop(BASE.replace(sticky_freeze=True), 6)
    assert [h[0][0].astype(int).tolist() for h in sticky][2:] == [[0, 1, 0, 0]] * 4
    assert sticky[-1][1].frozen[0, 0]


# ----------------------------------------------------------------------------
# The training step: gradient ledger, sparsity of updates, reproducibility
# ----------------------------------------------------------------------------


def test_sparse_weight_gradient_computes_exactly_the_requested_entries():
    rng = np.random.default_rng(0)
    x, delta = rng.normal(size=(5, 8)), rng.normal(size=(5, 4))
    positions = rng.random((4, 8)) < 0.4
    grad = sparse_weight_gradient(x, delta, positions)
    np.testing.assert_array_equal(np.isfinite(grad), positions)
    np.testing.assert_allclose(grad[positions], (delta.T @ x)[positions], rtol=1e-13, atol=0)


def test_ledger_matches_a_hand_count():
    # Layers 8->8 (64 entries, 16 blocks of 4) and 8->4 (32 entries, 8 blocks), 2:4.
    # Update steps 0 and 2 of 6; no block can be frozen yet (revert rate 0), so each
    # update step adds all pruned entries: 32 + 16 = 48. Kept: 32 + 16 = 48 per step.
    config = BameConfig(2, 4, t_i=0, t_f=4, update_interval=2)
    rng = np.random.default_rng(1)
    layers = init_sparse_mlp((8, 8, 4), config, rng)
    ledger = GradientLedger()
    optimizer = SGD(0.1)
    for t in range(6):
        bame_train_step(
            layers, rng.normal(size=(3, 8)), rng.integers(0, 4, 3), t, config, optimizer, ledger
        )
    assert (ledger.kept_entries, ledger.candidate_entries, ledger.dense_entries) == (288, 96, 576)
    assert ledger.fraction == 384 / 576 == weight_gradient_fraction(6, config)
    assert ledger.steps == 6
    assert (ledger.multiply_adds, ledger.dense_multiply_adds) == (384 * 3, 576 * 3)


def test_frozen_blocks_get_no_extra_gradient_entries():
    config = BameConfig(
        1, 4, t_i=0, t_f=10, update_interval=1, freeze_threshold=0.0, oscillation="change_rate"
    )
    rng = np.random.default_rng(2)
    layers = init_sparse_mlp((4, 4), config, rng)  # 4 blocks
    layers[0].state = BameState(
        np.array([[1], [0], [0], [3]]),
        np.zeros((4, 1), np.int64),
        np.zeros((4, 1)),
        np.zeros((4, 1), bool),
        layers[0].mask.copy(),
        3,
    )
    ledger = GradientLedger()
    bame_train_step(layers, rng.normal(size=(2, 4)), [0, 1], 0, config, SGD(0.1), ledger)
    assert (ledger.kept_entries, ledger.candidate_entries) == (4, 2 * 3)  # 2 candidate blocks


def test_training_keeps_masks_valid_and_pruned_weights_frozen():
    config = BameConfig(2, 4, t_i=0, t_f=8, update_interval=3)
    rng = np.random.default_rng(3)
    layers = init_sparse_mlp((8, 12, 4), config, rng)
    for t in range(10):
        before = [(layer.weight.copy(), layer.mask.copy()) for layer in layers]
        bame_train_step(
            layers,
            rng.normal(size=(4, 8)),
            rng.integers(0, 4, 4),
            t,
            config,
            SGD(0.05, weight_decay=1e-3),
        )
        for layer, (weight, mask) in zip(layers, before, strict=True):
            assert is_nm(layer.mask, 2, 4)
            pruned_now = ~layer.mask
            # Pruned weights keep their values (no gradient, no decay) ...
            np.testing.assert_array_equal(layer.weight[pruned_now], weight[pruned_now])
            if not is_update_step(t, config):
                np.testing.assert_array_equal(layer.mask, mask)


def run_small_training(seed: int):
    config = BameConfig(1, 4, t_i=0, t_f=30, update_interval=5)
    rng = np.random.default_rng(seed)
    layers = init_sparse_mlp((8, 8, 3), config, rng)
    ledger = GradientLedger()
    for t in range(40):
        bame_train_step(
            layers, rng.normal(size=(4, 8)), rng.integers(0, 3, 4), t, config, SGD(0.1), ledger
        )
    return layers, ledger


def test_same_generator_state_same_run_bit_for_bit():
    (a, ledger_a), (b, ledger_b) = run_small_training(7), run_small_training(7)
    for x, y in zip(a, b, strict=True):
        for name in ("weight", "bias", "mask", "velocity"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
        assert_states_equal(x.state, y.state)
    assert ledger_a == ledger_b
    c, _ = run_small_training(8)
    assert not np.array_equal(a[0].weight, c[0].weight)


@pytest.mark.slow
def test_digits_trains_at_a_fraction_of_the_gradient_entries():
    """A short real-data run (sklearn digits, offline): it learns, at a measured dW fraction."""
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    x, y = digits.data / 16.0, digits.target
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:1200], order[1200:]
    config = BameConfig(2, 4, t_i=0, t_f=300, update_interval=20)
    rng = np.random.default_rng(0)
    layers = init_sparse_mlp((64, 64, 10), config, rng)
    ledger = GradientLedger()
    step = 0
    for _ in range(10):
        shuffled = train[rng.permutation(len(train))]
        for start in range(0, len(shuffled), 32):
            index = shuffled[start : start + 32]
            bame_train_step(layers, x[index], y[index], step, config, SGD(0.05), ledger)
            step += 1
    assert sum(int(layer.state.changes.sum()) for layer in layers) > 0  # the mask did evolve
    assert all(is_nm(layer.mask, 2, 4) for layer in layers)
    assert accuracy(layers, x[test], y[test]) > 0.9
    # Kept half, plus the candidate entries of 15 update steps (fewer if blocks froze).
    assert 0.5 < ledger.fraction <= weight_gradient_fraction(step, config) < 0.55


# ----------------------------------------------------------------------------
# Golden vectors and errors
# ----------------------------------------------------------------------------


def test_golden_vectors():
    data = np.load(GOLDEN, allow_pickle=False)
    names = sorted({key.split("/")[0] for key in data.files})
    assert len(names) >= 4
    for name in names:
        switches = dict(
            zip(
                data[f"{name}/switch_names"].tolist(),
                data[f"{name}/switch_values"].tolist(),
                strict=True,
            )
        )
        config = BameConfig(**_decode_switches(switches))
        state = BameState(
            *(data[f"{name}/state_{f.name}"] for f in fields(BameState) if f.name != "num_updates"),
            num_updates=int(data[f"{name}/state_num_updates"]),
        )
        result = evolve_mask(
            data[f"{name}/weight"],
            data[f"{name}/mask"],
            data[f"{name}/grad"],
            state,
            int(data[f"{name}/step"]),
            config,
            learning_rate=float(data[f"{name}/learning_rate"]),
            velocity=data[f"{name}/velocity"],
        )
        for key in ("mask", "weight", "velocity", "selected", "reduction", "candidates", "scores"):
            np.testing.assert_array_equal(
                getattr(result, key), data[f"{name}/expected_{key}"], err_msg=f"{name}: {key}"
            )
        for f in fields(BameState):
            np.testing.assert_array_equal(
                getattr(result.state, f.name),
                data[f"{name}/expected_state_{f.name}"],
                err_msg=f"{name}: state.{f.name}",
            )


def _decode_switches(raw: dict[str, str]) -> dict[str, object]:
    decoded: dict[str, object] = {}
    for key, text in raw.items():
        if key in ("n", "m", "t_i", "t_f", "update_interval"):
            decoded[key] = int(text)
        elif text in ("True", "False"):
            decoded[key] = text == "True"
        elif text == "None":
            decoded[key] = None
        else:
            try:
                decoded[key] = float(text)
            except ValueError:
                decoded[key] = text
    return decoded


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n": 5}, "n=5 must be <= m=4"),
        ({"t_f": -1}, "t_f=-1 must be >= t_i=0"),
        ({"update_interval": 0}, "update_interval=0 must be >= 1"),
        ({"swap_rule": "greedy"}, "swap_rule='greedy' must be one of"),
        ({"adapt_fraction": 1.5}, "adapt_fraction=1.5 must lie in"),
        ({"ema_decay": 1.0}, "ema_decay=1.0 must lie in"),
        ({"curvature": -1.0}, "curvature=-1.0 must lie in"),
        ({"lookahead_step": float("nan")}, "lookahead_step=nan must lie in"),
    ],
)
def test_config_errors_name_the_argument_and_rule(changes, message):
    arguments = {"n": 2, "m": 4, **changes}
    with pytest.raises(ValueError, match=message):
        BameConfig(**arguments)


def test_input_errors():
    config = BameConfig(2, 4, t_i=0, t_f=10, update_interval=2)
    weight, grad = np.ones((1, 4)), np.ones((1, 4))
    mask = np.array([[True, True, False, False]])
    state = BameState.initial(mask, 4)
    with pytest.raises(ValueError, match="step=1 is not an update step"):
        evolve_mask(weight, mask, grad, state, 1, config, learning_rate=0.1)
    with pytest.raises(ValueError, match="mask must keep exactly n=2"):
        evolve_mask(
            weight, np.array([[True, True, True, False]]), grad, state, 0, config, learning_rate=0.1
        )
    with pytest.raises(ValueError, match="learning_rate must be given"):
        evolve_mask(weight, mask, grad, state, 0, config)
    with pytest.raises(TypeError, match="mask must be a bool array"):
        evolve_mask(weight, mask.astype(int), grad, state, 0, config, learning_rate=0.1)
    with pytest.raises(ValueError, match="weight must be finite"):
        evolve_mask(np.array([[np.inf, 1, 1, 1]]), mask, grad, state, 0, config, learning_rate=0.1)
    with pytest.raises(ValueError, match=r"state.changes.shape=\(2, 1\) must be \(1, 1\)"):
        evolve_mask(
            weight,
            mask,
            grad,
            BameState.initial(np.ones((2, 4), bool) & mask, 4),
            0,
            config,
            learning_rate=0.1,
        )


# ----------------------------------------------------------------------------
# Edge cases and the checker's power
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, 4), (2, 0), (0, 0)])
def test_zero_size_matrices_give_empty_results(shape):
    config = BameConfig(2, 4, t_i=0, t_f=10, update_interval=1)
    empty = np.zeros(shape)
    mask = np.zeros(shape, dtype=bool)
    state = BameState.initial(mask, 4)
    fast = evolve_mask(empty, mask, empty, state, 0, config, learning_rate=0.1)
    slow = evolve_mask_reference(empty, mask, empty, state, 0, config, learning_rate=0.1)
    assert fast.mask.shape == shape and fast.budget == 0 and fast.state.num_updates == 1
    assert_evolutions_equal(fast, slow)


def test_weight_dtype_is_preserved_and_regrown_weights_are_exact_zeros():
    config = BameConfig(
        1, 4, t_i=0, t_f=10, update_interval=1, adapt_fraction=1.0, fraction_schedule="constant"
    )
    weight = np.array([[0.5, -3.0, 2.0, 1.0]], dtype=np.float32)
    mask = np.array([[False, True, False, False]])
    grad = np.array([[0.0, 0.0, 0.0, 9.0]], dtype=np.float32)
    result = evolve_mask(weight, mask, grad, BameState.initial(mask, 4), 0, config, learning_rate=1)
    assert result.weight.dtype == np.float32
    np.testing.assert_array_equal(result.mask, [[False, False, False, True]])
    np.testing.assert_array_equal(result.weight, np.array([[0.5, -3.0, 2.0, 0.0]], np.float32))


def _wrong_tie_swap(u, kept):
    """Mutant: regrow the *highest* index among equal utilities."""
    count, m = u.shape
    prune = m - 1 - np.argmin(np.where(kept, u, np.inf)[:, ::-1], axis=1)
    regrow = m - 1 - np.argmax(np.where(kept, -np.inf, u)[:, ::-1], axis=1)
    rows = np.arange(count)
    new_kept = kept.copy()
    new_kept[rows, prune], new_kept[rows, regrow] = False, True
    return new_kept, u[rows, regrow] - u[rows, prune]


def test_a_mutant_with_the_wrong_tie_rule_is_caught(monkeypatch):
    import nmref.bame.scores

    monkeypatch.setattr(nmref.bame.scores, "_single_swap", _wrong_tie_swap)
    caught = 0
    for seed in range(40):
        choices = {"pattern": 1, "adapt_fraction": 1, "freeze_threshold": 2}
        weight, mask, grad, state, step, config, _ = make_case(seed, choices, True)
        fast = evolve_mask(weight, mask, grad, state, step, config, learning_rate=0.1)
        slow = evolve_mask_reference(weight, mask, grad, state, step, config, learning_rate=0.1)
        try:
            assert_evolutions_equal(fast, slow)
        except AssertionError:
            caught += 1
    assert caught > 0


def test_a_mutant_that_ignores_freezing_is_caught(monkeypatch):
    import nmref.bame.evolve

    monkeypatch.setattr(
        nmref.bame.evolve,
        "candidate_blocks",
        lambda state, config: ~np.zeros(state.changes.shape, bool),
    )
    choices = {"pattern": 1, "adapt_fraction": 1, "fraction_schedule": 2}
    weight, mask, grad, state, step, config, velocity = make_case(5, choices, False)
    frozen_state = BameState(
        state.changes,
        state.reverts,
        state.change_ema,
        np.ones_like(state.frozen),
        state.previous_mask,
        state.num_updates,
    )
    result = evolve_mask(
        weight, mask, grad, frozen_state, step, config, learning_rate=0.1, velocity=velocity
    )
    assert (result.mask != mask).any()  # the mutant changes blocks that are all frozen
    with pytest.raises(AssertionError):
        assert_valid_evolution(weight, mask, grad, frozen_state, step, config, velocity, result)


def test_update_steps_and_expected_fraction():
    config = BameConfig(1, 4, t_i=5, t_f=50, update_interval=20)
    assert update_steps(100, config) == [5, 25, 45] and update_steps(26, config) == [5, 25]
    assert update_steps(3, config) == []
    assert weight_gradient_fraction(100, config) == 0.25 + 0.75 * 3 / 100
    assert weight_gradient_fraction(100, config, 0.5) == 0.25 + 0.75 * 0.5 * 3 / 100
    with pytest.raises(ValueError, match="total_steps=0 must be >= 1"):
        weight_gradient_fraction(0, config)


def test_convolution_weights_evolve_along_input_channels():
    """A conv weight is evolved on its "channels" reduction matrix and mapped back (C3)."""
    from nmref.layouts import from_reduction_matrix, to_reduction_matrix
    from nmref.masks import magnitude_mask

    rng = np.random.default_rng(4)
    weight = rng.normal(size=(6, 8, 3, 3))
    grad = rng.normal(size=weight.shape)
    mask = magnitude_mask(weight, 2, 4)  # "channels" by default
    config = BameConfig(2, 4, t_i=0, t_f=10, update_interval=1, adapt_fraction=1.0)
    matrix_mask = to_reduction_matrix(mask)
    result = evolve_mask(
        to_reduction_matrix(weight),
        matrix_mask,
        to_reduction_matrix(grad),
        BameState.initial(matrix_mask, 4),
        0,
        config,
        learning_rate=0.1,
    )
    assert result.selected.any()
    new_mask = from_reduction_matrix(result.mask, weight.shape)
    assert is_nm(new_mask, 2, 4, axis=1)  # groups of 4 input channels


@pytest.mark.slow
@given(seed=st.integers(0, 10_000), choices=case_choices)
def test_training_step_contracts_under_any_switches(seed, choices):
    """Every step: N:M masks, frozen pruned weights, and the ledger equals an independent count."""
    n, m = [(2, 4), (1, 4), (1, 2), (3, 4)][choices["pattern"] % 4]
    switches = {name: values[choices[name] % len(values)] for name, values in SWITCHES.items()}
    config = BameConfig(n, m, t_i=1, t_f=7, update_interval=2, **switches)
    rng = np.random.default_rng(seed)
    layers = init_sparse_mlp((8, 8, 4), config, rng)
    ledger = GradientLedger()
    expected_kept = expected_candidate = 0
    for t in range(9):
        before = [(layer.weight.copy(), layer.mask.copy(), layer.state) for layer in layers]
        for layer in layers:
            expected_kept += int(layer.mask.sum())
            if is_update_step(t, config):
                expected_candidate += (m - n) * int(candidate_blocks(layer.state, config).sum())
        bame_train_step(
            layers, rng.normal(size=(3, 8)), rng.integers(0, 4, 3), t, config, SGD(0.1), ledger
        )
        for layer, (weight, mask, state) in zip(layers, before, strict=True):
            assert is_nm(layer.mask, n, m)
            # Pruned weights are never updated (step_first: the SGD step precedes the
            # pruning, so only the previously pruned ones are guaranteed untouched).
            untouched = ~layer.mask & (~mask if config.step_order == "step_first" else True)
            np.testing.assert_array_equal(layer.weight[untouched], weight[untouched])
            if not is_update_step(t, config):
                np.testing.assert_array_equal(layer.mask, mask)
                assert layer.state is state
            else:
                assert layer.state.num_updates == state.num_updates + 1
    assert (ledger.kept_entries, ledger.candidate_entries) == (expected_kept, expected_candidate)
    assert ledger.dense_entries == 9 * (64 + 32)


def test_docstring_examples():
    import doctest
    import importlib
    import pkgutil

    import nmref.bame

    failures = tried = 0
    for info in pkgutil.iter_modules(nmref.bame.__path__, "nmref.bame."):
        result = doctest.testmod(importlib.import_module(info.name), extraglobs={"np": np})
        failures, tried = failures + result.failed, tried + result.attempted
    assert failures == 0 and tried >= 10  # the examples exist and pass


def test_a_regrown_weight_takes_exactly_the_lookahead_step():
    """Spec 4 step 4: zero init + momentum reset -> the regrown weight becomes -lr * g."""
    config = BameConfig(
        1,
        2,
        t_i=0,
        t_f=5,
        update_interval=5,
        adapt_fraction=1.0,
        fraction_schedule="constant",
        curvature=0.0,
    )
    rng = np.random.default_rng(11)
    layers = init_sparse_mlp((4, 3), config, rng)
    layer = layers[0]
    old_mask = layer.mask.copy()
    x, labels = rng.normal(size=(5, 4)), np.array([0, 1, 2, 0, 1])
    logits = x @ layer.effective_weight.T + layer.bias
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    probs[np.arange(5), labels] -= 1.0
    dense_grad = (probs / 5).T @ x
    bame_train_step(layers, x, labels, 0, config, SGD(0.1, weight_decay=0.01))
    regrown = layer.mask & ~old_mask
    assert regrown.any()
    np.testing.assert_allclose(layer.weight[regrown], -0.1 * dense_grad[regrown], rtol=1e-12)
    assert (layer.velocity[~layer.mask & old_mask] == 0).all()  # pruned: momentum reset


def test_score_arguments_are_validated():
    """A negative or NaN look-ahead step or curvature would silently invert the ranking."""
    weight, grad = np.array([[1.0, 1.0, 0.0, 0.0]]), np.array([[0.0, 0.5, 2.0, 0.0]])
    mask, candidates = np.array([[True, True, False, False]]), np.array([[True]])
    for name, value in (
        ("curvature", -5.0),
        ("curvature", math.inf),
        ("lookahead_step", -1.0),
        ("lookahead_step", math.nan),
    ):
        with pytest.raises(ValueError, match=name):
            block_scores(weight, mask, grad, candidates, n=2, m=4, **{name: value})
        with pytest.raises(ValueError, match=name):
            keep_utility(weight, mask, grad, **{name: value})
    with pytest.raises(ValueError, match="regrow_init='ones'"):
        keep_utility(weight, mask, grad, regrow_init="ones")
    # float64 is the scoring precision; a wider float would be rounded silently.
    with pytest.raises(TypeError, match="weight must be a float16/32/64 array"):
        block_scores(weight.astype(np.longdouble), mask, grad, candidates, n=2, m=4)


OVERFLOWING_SCORES = [
    # Issue 37: 1e308 entries overflow the keep utility (g * w); the message named no argument.
    pytest.param(np.full((1, 4), 1e308), np.full((1, 4), 1e308), "zero", id="utility"),
    # Finite utilities -1e308 (kept) and +1e308 (pruned): R = u_j - u_i overflows.
    pytest.param(
        np.array([[1e154, 1.0, 1e154, 0.0]]),
        np.array([[1e154, 0.0, -1e154, 0.0]]),
        "stale",
        id="R",
    ),
]


@pytest.mark.parametrize(("weight", "grad", "regrow_init"), OVERFLOWING_SCORES)
@pytest.mark.parametrize("implementation", ["block_scores", "evolve_mask", "evolve_mask_reference"])
def test_scores_beyond_float64_name_weight_and_grad(weight, grad, regrow_init, implementation):
    mask = np.array([[True, True, False, False]])
    if implementation == "block_scores":

        def call():
            return block_scores(
                weight, mask, grad, np.array([[True]]), n=2, m=4, regrow_init=regrow_init
            )
    else:
        config = BameConfig(
            n=2,
            m=4,
            t_i=0,
            t_f=10,
            update_interval=1,
            regrow_init=regrow_init,
            curvature=0.0,
            lookahead_step=0.0,
        )
        evolve = evolve_mask if implementation == "evolve_mask" else evolve_mask_reference

        def call():
            return evolve(weight, mask, grad, BameState.initial(mask, 4), 0, config)

    what = "the keep utility" if weight[0, 0] == 1e308 else "a block's loss reduction R"
    with pytest.raises(ValueError, match=rf"^weight and grad are too large: {what} overflows"):
        call()
