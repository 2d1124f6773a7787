"""Checks for BAME-style mask evolution kernels (``specs/bame.md`` §3.2, §3.5, §3.8)
against :mod:`nmref.bame`.

* ``check_bame_block_scores``: ``impl(w, mask, grad, candidates, n, m) -> (reduction,
  proposed_mask, utility)``, compared exactly (utility: NaN outside candidate blocks);
* ``check_select_blocks``: ``impl(scores, candidates, budget) -> selected``;
* ``check_bame_training``: ``impl(x, w, mask, dy, positions) -> (y, dx, dw)``, one Linear
  forward/backward under the per-GEMM contract of §3.6 (``dW`` only at ``positions``).

Inputs are tie-heavy (weights and gradients on a small grid, equal scores across blocks), where
the tie rules (prune the highest index, regrow the lowest, blocks in ``(-score, row, group)``
order) decide the answer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nmref.testing.cases import Case
from nmref.testing.report import Failure, Report

__all__ = ["check_bame_block_scores", "check_bame_training", "check_select_blocks"]

_PATTERNS = ((2, 4), (1, 4), (3, 4), (4, 8), (1, 8), (2, 3), (0, 4), (4, 4))


def _cases(count: int, seed: int):
    import nmref

    rng = np.random.default_rng([seed, 7])
    for index in range(count):
        n, m = _PATTERNS[index % len(_PATTERNS)]
        rows, groups = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        shape = (rows, groups * m)
        if index % 3 == 2:
            # Unit weights and gradients: with curvature 1 and look-ahead 0.5 the utilities
            # take three values, so prune and regrow ties decide most adaptations.
            weight = rng.choice([-1.0, 1.0], shape)
            grad = rng.integers(-1, 2, shape).astype(np.float64)
        else:
            weight = rng.integers(-3, 4, shape) * 0.5
            grad = rng.integers(-2, 3, shape) * 0.25
        # Half the cases: the magnitude mask; half: a random exact N:M mask.
        scores = np.abs(weight) if index % 2 else rng.random(shape)
        mask = nmref.nm_mask(scores, n, m)
        candidates = rng.random((rows, groups)) < 0.7
        yield (
            Case(weight, n, m, "tie_heavy", "float64", "linear", f"#{index}"),
            mask,
            grad,
            candidates,
        )


def check_bame_block_scores(
    impl: Callable[..., tuple[object, object, object]],
    *,
    swap_rule: str = "single_swap",
    regrow_init: str = "zero",
    lookahead_step: float = 0.5,
    curvature: float = 1.0,
    count: int = 48,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(w, mask, grad, candidates, n, m)`` against :func:`nmref.bame.block_scores`
    with the given switches (the callable must apply the same switches)."""
    from nmref.bame import block_scores

    check = f"bame block_scores[{swap_rule}]"
    report = Report(check)
    for case, mask, grad, candidates in _cases(count, 0):
        expected = block_scores(
            case.scores,
            mask,
            grad,
            candidates,
            n=case.n,
            m=case.m,
            swap_rule=swap_rule,
            regrow_init=regrow_init,
            lookahead_step=lookahead_step,
            curvature=curvature,
        )
        try:
            got = impl(case.scores, mask, grad, candidates, case.n, case.m)
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        problems = []
        pairs = zip(
            ("reduction", "proposed_mask", "utility"),
            (expected.reduction, expected.proposed_mask, expected.utility),
            got,
            strict=True,
        )
        for name, want, value in pairs:
            array = np.asarray(value)
            if array.shape != want.shape or not np.array_equal(array, want, equal_nan=True):
                problems.append(f"  {name} differs: expected\n    {want!r}\n  got\n    {array!r}")
        if problems:
            problems.append(
                "  why: ties prune the highest index and regrow the lowest; a block changes only "
                "if R > 0 (specs/bame.md §3.2, §3.8)"
            )
            with np.printoptions(threshold=64, linewidth=100):
                problems.append(
                    f"  w = np.{case.scores!r}\n  mask = np.{mask.astype(int)!r}"
                    f"\n  grad = np.{grad!r}\n  candidates = np.{candidates!r}"
                )
        report.add(Failure(check, case, "\n".join(problems)) if problems else None)
    if raise_on_failure:
        report.raise_for_failure()
    return report


def check_select_blocks(
    impl: Callable[..., object], *, count: int = 48, raise_on_failure: bool = True
) -> Report:
    """Check ``impl(scores, candidates, budget)`` against :func:`nmref.bame.select_blocks`."""
    from nmref.bame import select_blocks

    check = "bame select_blocks"
    report = Report(check)
    rng = np.random.default_rng(11)
    for index in range(count):
        shape = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        scores = rng.integers(-1, 4, shape) * 0.5  # many equal scores, some <= 0
        candidates = rng.random(shape) < 0.8
        budget = int(rng.integers(0, scores.size + 2))
        case = Case(scores, 0, 1, "tie_heavy", "float64", None, f"#{index} budget={budget}")
        expected = select_blocks(scores, candidates, budget)
        try:
            got = np.asarray(impl(scores, candidates, budget)).astype(bool)
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        failure = None
        if got.shape != expected.shape or not np.array_equal(got, expected):
            failure = Failure(
                check,
                case,
                (
                    f"  expected {expected.astype(int).tolist()}, got {got.astype(int).tolist()}\n"
                    "  why: positive-score candidates in (-score, row, group) order, first `budget`"
                    f"\n  scores = {scores.tolist()}\n  candidates = {candidates.tolist()}"
                ),
            )
        report.add(failure)
    if raise_on_failure:
        report.raise_for_failure()
    return report


def check_bame_training(
    impl: Callable[..., tuple[object, object, object]],
    *,
    count: int = 24,
    dtype: str = "float64",
    raise_on_failure: bool = True,
) -> Report:
    """Check one BAME Linear step ``impl(x, w, mask, dy, positions) -> (y, dx, dw)``
    (``specs/bame.md`` §3.6, §4 steps 1-2) on small integers, exactly:

    * ``y = x (mask ⊙ w)^T`` and ``dx = dy (mask ⊙ w)`` (the stored mask, both GEMMs);
    * ``dw = dy^T x`` at ``positions`` (the kept entries plus candidate blocks), as
      :func:`nmref.bame.training.sparse_weight_gradient`;
    * ``dw`` is 0 or NaN everywhere else: those entries are never computed, so a dense
      weight gradient (SR-STE's) is rejected.
    """
    import nmref
    from nmref.bame.training import sparse_weight_gradient

    check = "bame training step"
    report = Report(check)
    rng = np.random.default_rng(13)
    for index in range(count):
        n, m = _PATTERNS[index % 6]
        rows, groups, batch = (int(v) for v in rng.integers(1, 5, 3))
        w = rng.integers(-3, 4, (rows, groups * m)).astype(dtype)
        x = rng.integers(-4, 5, (batch, groups * m)).astype(dtype)
        dy = rng.integers(-4, 5, (batch, rows)).astype(dtype)
        # Half the cases a random exact N:M mask (not the magnitude mask: BAME's evolves).
        scores = np.abs(w) if index % 2 else rng.random(w.shape)
        mask = nmref.nm_mask(scores, n, m)
        candidates = rng.random((rows, groups)) < 0.5
        positions = mask | np.repeat(candidates, m, axis=1)
        case = Case(w, n, m, "tie_heavy", dtype, "linear", f"#{index}")
        sparse = np.where(mask, w, 0).astype(w.dtype)
        want_dw = sparse_weight_gradient(x, dy, positions).astype(w.dtype)
        try:
            y, dx, dw = (np.asarray(v) for v in impl(x, w, mask, dy, positions))
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        problems = []
        for name, got, want, why in (
            ("Y", y, x @ sparse.T, "Y must be X (K ⊙ W)^T with the stored mask K"),
            ("dX", dx, dy @ sparse, "dX must be dY (K ⊙ W): sparse backward (K2)"),
        ):
            if got.shape != want.shape or not np.array_equal(got.astype(want.dtype), want):
                problems.append(f"  {name} differs: expected {want.tolist()}, got {got.tolist()}")
                problems.append(f"    why: {why}")
        if dw.shape != w.shape:
            problems.append(f"  dW: shape {dw.shape}, expected {w.shape}")
        else:
            dw = dw.astype(w.dtype)
            if not np.array_equal(dw[positions], want_dw[positions]):
                problems.append(
                    "  dW differs at the computed positions: expected "
                    f"{want_dw[positions].tolist()}, got {dw[positions].tolist()}"
                )
            outside = dw[~positions]
            if not np.all((outside == 0) | np.isnan(outside)):
                problems.append(
                    "  dW has values outside the computed positions: pruned entries of "
                    "non-candidate blocks are never computed (spec 3.6; 0 or NaN expected)"
                )
        if problems:
            with np.printoptions(threshold=64, linewidth=100):
                problems.append(
                    f"  w = np.{w!r}\n  x = np.{x!r}\n  dy = np.{dy!r}"
                    f"\n  mask = np.{mask.astype(int)!r}\n  candidates = np.{candidates!r}"
                )
        report.add(Failure(check, case, "\n".join(problems)) if problems else None)
    if raise_on_failure:
        report.raise_for_failure()
    return report
