"""BAME-style block scores and selection on the torch path equal nmref.bame bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nmref
import nmref.bame as reference

torch = pytest.importorskip("torch")
from nmsim.torch import bame  # noqa: E402
from nmsim.torch.conformance import run_suite  # noqa: E402


@pytest.mark.parametrize("name", ["bame block_scores", "bame select_blocks"])
def test_kit_suites_pass(name):
    report = run_suite(name, "float64", "cpu")
    assert report.ok, str(report)


finite = st.floats(-1e3, 1e3, allow_nan=False, width=64)


@pytest.mark.slow
@given(
    data=st.data(),
    swap_rule=st.sampled_from(["single_swap", "reselect"]),
    regrow_init=st.sampled_from(["zero", "stale"]),
    lookahead=st.sampled_from([0.0, 0.1, 0.5]),
    curvature=st.sampled_from([0.0, 1.0, 0.3]),
)
def test_random_float_inputs_give_identical_scores(
    data, swap_rule, regrow_init, lookahead, curvature
):
    """Arbitrary float64 values: the utilities round identically (same operation order)."""
    n, m = data.draw(st.sampled_from([(2, 4), (1, 4), (4, 8), (3, 8)]))
    rows, groups = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    shape = (rows, groups * m)
    weight = data.draw(hnp.arrays(np.float64, shape, elements=finite))
    grad = data.draw(hnp.arrays(np.float64, shape, elements=finite))
    mask = nmref.magnitude_mask(weight, n, m)
    candidates = data.draw(hnp.arrays(np.bool_, (rows, groups)))
    options = dict(
        n=n,
        m=m,
        swap_rule=swap_rule,
        regrow_init=regrow_init,
        lookahead_step=lookahead,
        curvature=curvature,
    )
    expected = reference.block_scores(weight, mask, grad, candidates, **options)
    got = bame.block_scores(
        torch.from_numpy(weight),
        torch.from_numpy(mask),
        torch.from_numpy(grad),
        torch.from_numpy(candidates),
        **options,
    )
    np.testing.assert_array_equal(got.reduction.numpy(), expected.reduction)
    np.testing.assert_array_equal(got.proposed_mask.numpy(), expected.proposed_mask)
    np.testing.assert_array_equal(got.utility.numpy(), expected.utility)


def test_float32_weights_are_scored_on_their_float64_widening():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 8)).astype(np.float32)
    grad = rng.standard_normal((4, 8)).astype(np.float32)
    mask = nmref.magnitude_mask(weight, 2, 4)
    candidates = np.ones((4, 2), dtype=bool)
    expected = reference.block_scores(weight, mask, grad, candidates, n=2, m=4, lookahead_step=0.1)
    got = bame.block_scores(
        torch.from_numpy(weight),
        torch.from_numpy(mask),
        torch.from_numpy(grad),
        torch.from_numpy(candidates),
        n=2,
        m=4,
        lookahead_step=0.1,
    )
    np.testing.assert_array_equal(got.reduction.numpy(), expected.reduction)


def test_errors_match_the_reference_rules():
    weight = torch.ones(2, 4, dtype=torch.float64)
    mask = torch.tensor([[True, True, False, False]] * 2)
    candidates = torch.ones(2, 1, dtype=torch.bool)
    grad = torch.zeros(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="exactly n=2"):
        bame.block_scores(weight, ~mask | mask, grad, candidates, n=2, m=4)
    with pytest.raises(ValueError, match="weight must be finite"):
        bame.block_scores(weight * torch.inf, mask, grad, candidates, n=2, m=4)
    with pytest.raises(ValueError, match=r"grad is not finite at \(0, 1\)"):
        bad = grad.clone()
        bad[0, 1] = torch.nan
        bame.block_scores(weight, mask, bad, candidates, n=2, m=4)
    # NaN outside candidate blocks is never read.
    outside = grad.clone()
    outside[1] = torch.nan
    bame.block_scores(weight, mask, outside, torch.tensor([[True], [False]]), n=2, m=4)
    with pytest.raises(ValueError, match="budget"):
        bame.select_blocks(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool), -1)


def _message(function, *args, **kwargs) -> tuple[type, str]:
    """The exception's type and words; dtypes spelt without torch's ``torch.`` prefix."""
    with pytest.raises((TypeError, ValueError)) as caught:
        function(*args, **kwargs)
    return type(caught.value), str(caught.value).replace("torch.", "")


@pytest.mark.parametrize(
    "change",
    [
        {"mask": np.array([[1, 1, 0, 0]] * 2)},  # not bool
        {"mask": np.ones((2, 4, 1), bool)},  # not 2-D
        {"mask": np.ones((2, 3), bool)},  # partial block
        {"weight": np.ones((2, 8))},
        {"grad": np.ones((1, 4))},
        {"candidates": np.ones((2, 2), bool)},
        {"candidates": np.ones((2, 1), np.int8)},
        {"swap_rule": "greedy"},
        {"regrow_init": "ones"},
        {"lookahead_step": -1.0},
        {"curvature": float("nan")},
        {"lookahead_step": "0.1"},
    ],
)
def test_block_scores_refuses_what_nmref_refuses_with_its_words(change):
    """One set of validators (nmref.bame's) for both paths: same exception, same words."""
    arguments = {
        "weight": np.ones((2, 4)),
        "mask": np.array([[True, True, False, False]] * 2),
        "grad": np.zeros((2, 4)),
        "candidates": np.ones((2, 1), bool),
    }
    settings = {"n": 2, "m": 4}
    for key, value in change.items():
        (arguments if key in arguments else settings)[key] = value
    tensors = {key: torch.from_numpy(value) for key, value in arguments.items()}
    expected = _message(reference.block_scores, **arguments, **settings)
    assert _message(bame.block_scores, **tensors, **settings) == expected


@pytest.mark.parametrize(
    ("scores_shape", "budget"), [((2, 3), 1), ((2, 2), -1), ((2, 2), True), ((2, 2), 1.0)]
)
def test_select_blocks_refuses_what_nmref_refuses_with_its_words(scores_shape, budget):
    candidates = np.ones((2, 2), bool)
    expected = _message(reference.select_blocks, np.ones(scores_shape), candidates, budget)
    got = _message(
        bame.select_blocks, torch.ones(scores_shape), torch.from_numpy(candidates), budget
    )
    assert got == expected


def test_keep_utility_checks_its_settings_as_nmref_does():
    """A misspelt regrow_init used to fall through to 'zero' silently on the torch path."""
    weight, mask, grad = np.ones((1, 4)), np.ones((1, 4), bool), np.zeros((1, 4))
    for settings in ({"regrow_init": "stal"}, {"lookahead_step": -0.5}, {"curvature": True}):
        expected = _message(reference.keep_utility, weight, mask, grad, **settings)
        got = _message(
            bame.keep_utility,
            torch.from_numpy(weight),
            torch.from_numpy(mask),
            torch.from_numpy(grad),
            **settings,
        )
        assert got == expected
    # numpy integer budgets are accepted on both paths
    scores = torch.tensor([[1.0, 2.0]])
    assert bame.select_blocks(scores, torch.ones(1, 2, dtype=torch.bool), np.int64(1)).tolist() == [
        [False, True]
    ]


CONFIGS = [
    {},
    {"swap_rule": "reselect", "regrow_init": "stale", "oscillation": "change_rate"},
    {
        "combine": "multiplicative",
        "freeze_threshold": 1.0,
        "oscillation": "change_ema",
        "product_exponent": 2.0,
    },
    {
        "sticky_freeze": True,
        "freeze_threshold": 0.2,
        "budget_of": "all",
        "fraction_schedule": "linear",
        "reset_momentum": False,
    },
]


@pytest.mark.parametrize(
    "options", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults"
)
@pytest.mark.parametrize("n_m", [(2, 4), (1, 4)])
def test_evolve_mask_trajectory_equals_nmref(options, n_m):
    """Twelve updates with tie-heavy gradients: every field of every Evolution is identical."""
    n, m = n_m
    config = reference.BameConfig(
        n, m, t_i=0, t_f=12, update_interval=1, adapt_fraction=0.6, lookahead_step=0.5, **options
    )
    rng = np.random.default_rng(len(options) * 10 + n)
    weight = rng.integers(-3, 4, (6, 4 * m)) * 0.5
    mask = nmref.magnitude_mask(weight, n, m)
    velocity = rng.standard_normal(weight.shape)
    state = reference.BameState.initial(mask, m)
    t_weight, t_mask = torch.from_numpy(weight), torch.from_numpy(mask)
    t_velocity, t_state = torch.from_numpy(velocity), state
    changes = 0
    for step in range(12):
        grad = rng.integers(-2, 3, weight.shape) * 0.5
        expected = reference.evolve_mask(weight, mask, grad, state, step, config, velocity=velocity)
        got = bame.evolve_mask(
            t_weight, t_mask, torch.from_numpy(grad), t_state, step, config, velocity=t_velocity
        )
        for name in ("mask", "weight", "velocity", "selected", "reduction", "scores"):
            np.testing.assert_array_equal(
                getattr(got, name).numpy(), getattr(expected, name), err_msg=name
            )
        np.testing.assert_array_equal(got.candidates, expected.candidates)
        assert got.budget == expected.budget
        for field in ("changes", "reverts", "change_ema", "frozen", "previous_mask"):
            np.testing.assert_array_equal(getattr(got.state, field), getattr(expected.state, field))
        assert got.state.num_updates == expected.state.num_updates
        changes += int((expected.mask != mask).sum())
        weight, mask, velocity, state = (
            expected.weight,
            expected.mask,
            expected.velocity,
            expected.state,
        )
        t_weight, t_mask, t_velocity, t_state = got.weight, got.mask, got.velocity, got.state
    assert changes > 0  # the trajectory really evolves the mask


@pytest.mark.parametrize(
    ("weight", "grad", "regrow_init", "what"),
    [
        (np.full((1, 4), 1e308), np.full((1, 4), 1e308), "zero", "the keep utility"),
        (
            np.array([[1e154, 1.0, 1e154, 0.0]]),
            np.array([[1e154, 0.0, -1e154, 0.0]]),
            "stale",
            "a block's loss reduction R",
        ),
    ],
)
def test_scores_beyond_float64_are_refused_as_nmref_refuses_them(weight, grad, regrow_init, what):
    # Issue 37: the same one rule and message as nmref.block_scores (tests/test_bame.py).
    mask, candidates = np.array([[True, True, False, False]]), np.array([[True]])
    options = dict(n=2, m=4, regrow_init=regrow_init)
    with pytest.raises(ValueError) as expected:
        reference.block_scores(weight, mask, grad, candidates, **options)
    with pytest.raises(ValueError) as got:
        bame.block_scores(
            torch.from_numpy(weight),
            torch.from_numpy(mask),
            torch.from_numpy(grad),
            torch.from_numpy(candidates),
            **options,
        )
    assert str(got.value) == str(expected.value)
    assert str(got.value).startswith(f"weight and grad are too large: {what} overflows")
