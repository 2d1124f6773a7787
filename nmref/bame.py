r"""BAME-style block-aware mask evolution: a fully specified, switchable reference.

Implements ``specs/bame.md``. BAME (Yang et al., ICML 2025) keeps forward and
backward N:M-sparse throughout training and adapts the mask by pruning and
regrowing weights inside *blocks* chosen by a joint assessment of accumulated
mask oscillation and expected loss reduction. Only the abstract-level facts of
the paper could be verified; every rule below that the abstract does not fix is
a **named switch** of :class:`BameConfig` with a documented default, so the
reference can be corrected in one place once the paper is read. Treat results
as ``bame_like``, not as a reproduction.

Vocabulary (``specs/bame.md`` section 2)
---------------------------------------
block
    One N:M group: ``m`` consecutive entries of one row of the weight's
    ``[rows, reduction]`` matrix (block ``(r, g)`` covers columns
    ``g*m .. g*m + m - 1`` of row ``r``). Exactly ``n`` are kept at all times.
update step
    ``t_i <= t < t_f`` and ``(t - t_i) % update_interval == 0`` (Algorithm 1's
    ``t_i``, ``t_f``, ``T``).
candidate block
    A block that may change at this update: not frozen by the oscillation rule.
    Only candidate blocks get weight-gradient entries at their pruned
    positions, and only at update steps.
keep utility ``u``
    The estimated loss reduction of having a position kept rather than pruned:
    first-order Taylor terms, a one-step look-ahead term and an isotropic
    curvature term (spec 3.2); a block's expected loss reduction is
    ``sum(u over the new kept set) - sum(u over the old one)``.

The functions are pure: they never modify their arguments. Plain-Python
oracles (``*_reference``) sit beside the vectorised versions and are tested
identical on random and tie-heavy inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Literal, NoReturn

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import (
    as_scores,
    check_choice,
    check_count,
    check_float_dtype,
    check_integer,
    check_real,
    refuse_masked,
)
from nmref.masks import is_nm, nm_mask
from nmref.patterns import check_pattern

__all__ = [
    "BameConfig",
    "BameState",
    "BlockScores",
    "Evolution",
    "adaptation_budget",
    "adapted_fraction",
    "block_scores",
    "candidate_blocks",
    "combined_scores",
    "evolve_mask",
    "evolve_mask_reference",
    "gradient_positions",
    "is_update_step",
    "keep_utility",
    "oscillation_frequency",
    "select_blocks",
    "update_steps",
    "weight_gradient_fraction",
]

FractionSchedule = Literal["cosine", "linear", "constant"]
SwapRule = Literal["single_swap", "reselect"]
RegrowInit = Literal["zero", "stale"]
Oscillation = Literal["revert_rate", "change_rate", "change_ema"]
Combine = Literal["freeze_then_rank", "multiplicative"]
BudgetOf = Literal["candidates", "all"]
StepOrder = Literal["evolve_first", "step_first"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "fraction_schedule": ("cosine", "linear", "constant"),
    "swap_rule": ("single_swap", "reselect"),
    "regrow_init": ("zero", "stale"),
    "oscillation": ("revert_rate", "change_rate", "change_ema"),
    "combine": ("freeze_then_rank", "multiplicative"),
    "budget_of": ("candidates", "all"),
    "step_order": ("evolve_first", "step_first"),
}


# ----------------------------------------------------------------------------
# Configuration and state
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BameConfig:
    """Every choice of the ``bame_like`` reference; defaults are ``specs/bame.md`` section 3.

    Verified by the paper (Algorithm 1 inputs): ``t_i``, ``t_f`` and
    ``update_interval`` (``T``); their values and units are not. Every other
    field is a reconstruction switch (marked ⚑ in the spec).

    Parameters
    ----------
    n, m : int
        Pattern: ``n`` kept in every block of ``m``.
    t_i, t_f : int
        First step at which the mask may adapt, and the step from which it is
        frozen for good (``t_f`` itself never adapts). In optimizer steps.
    update_interval : int
        ``T``: the mask adapts at ``t_i, t_i + T, ...`` below ``t_f``.
    adapt_fraction : float in [0, 1]
        ``alpha``: the fraction of blocks that may adapt at ``t_i``.
    fraction_schedule : {"cosine", "linear", "constant"}
        How the fraction decays from ``alpha`` at ``t_i`` towards 0 at ``t_f``.
    swap_rule : {"single_swap", "reselect"}
        ``"single_swap"``: at most one prune and one regrow per block per
        update. ``"reselect"``: the block takes the ``n`` positions of largest
        keep utility (up to ``n`` swaps).
    regrow_init : {"zero", "stale"}
        Value a regrown weight starts from: 0 (RigL) or the value it had when
        pruned (pruned weights are frozen by the sparse backward, so it is kept).
    lookahead_step : float or None
        ``eta`` of the one-step look-ahead term ``eta * g**2`` in the keep
        utility. ``None`` = the learning rate of the optimizer step that calls
        the evolution (the training step passes it). ``0`` = pure first order.
    curvature : float >= 0
        ``c`` of an isotropic second-order term ``c/2 * w**2`` in the keep
        utility; 0 = pure first order. The default 1.0 is a reconstruction
        choice (spec 3.2): with 0, first-order scores prune large weights whose
        batch gradient points towards zero, which measurably hurt training.
    reset_momentum : bool
        Zero the optimizer momentum at every position whose mask bit changed.
    oscillation : {"revert_rate", "change_rate", "change_ema"}
        The per-block oscillation frequency (spec section 3.3).
    ema_decay : float in [0, 1)
        ``beta`` of ``"change_ema"``.
    freeze_threshold : float
        ``tau``: a block whose oscillation frequency exceeds ``tau`` is frozen
        (not a candidate). ``tau >= 1`` never freezes.
    sticky_freeze : bool
        Once frozen, a block stays frozen until ``t_f``.
    combine : {"freeze_then_rank", "multiplicative"}
        Rank candidate blocks by their expected loss reduction ``R``, or by
        ``R * (1 - frequency) ** product_exponent``.
    product_exponent : float >= 0
        ``gamma`` of ``"multiplicative"``.
    budget_of : {"candidates", "all"}
        Whether the per-update budget ``k(t)`` is a fraction of the candidate
        blocks or of all blocks of the layer.
    step_order : {"evolve_first", "step_first"}
        In the training step (spec 4): evolve the mask with this batch's
        gradient and then take the SGD step on the new mask, or take the SGD
        step on the old mask and then evolve with the updated weights.
    """

    n: int
    m: int
    t_i: int = 0
    t_f: int = 1000
    update_interval: int = 100
    adapt_fraction: float = 0.3
    fraction_schedule: FractionSchedule = "cosine"
    swap_rule: SwapRule = "single_swap"
    regrow_init: RegrowInit = "zero"
    lookahead_step: float | None = None
    curvature: float = 1.0
    reset_momentum: bool = True
    oscillation: Oscillation = "revert_rate"
    ema_decay: float = 0.9
    freeze_threshold: float = 0.5
    sticky_freeze: bool = False
    combine: Combine = "freeze_then_rank"
    product_exponent: float = 1.0
    budget_of: BudgetOf = "candidates"
    step_order: StepOrder = "evolve_first"

    def __post_init__(self) -> None:
        check_pattern(self.n, self.m)
        for name in ("t_i", "t_f", "update_interval"):
            check_integer(getattr(self, name), name)
        if self.t_i < 0:
            raise ValueError(f"t_i={self.t_i} must be >= 0")
        if self.t_f < self.t_i:
            raise ValueError(f"t_f={self.t_f} must be >= t_i={self.t_i}")
        if self.update_interval < 1:
            raise ValueError(f"update_interval={self.update_interval} must be >= 1")
        for name in _CHOICES:
            check_config_choice(name, getattr(self, name))
        _check_real("adapt_fraction", self.adapt_fraction, 0.0, 1.0)
        _check_real("ema_decay", self.ema_decay, 0.0, 1.0, upper_open=True)
        _check_real("freeze_threshold", self.freeze_threshold, 0.0, math.inf)
        _check_real("curvature", self.curvature, 0.0, math.inf)
        _check_real("product_exponent", self.product_exponent, 0.0, math.inf)
        if self.lookahead_step is not None:
            _check_real("lookahead_step", self.lookahead_step, 0.0, math.inf)
        if not isinstance(self.reset_momentum, bool) or not isinstance(self.sticky_freeze, bool):
            raise TypeError("reset_momentum and sticky_freeze must be bool")

    def replace(self, **changes: object) -> BameConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _check_real(
    name: str, value: object, low: float, high: float, *, upper_open: bool = False
) -> None:
    number = check_real(value, name)
    above = number >= high if upper_open else number > high
    if math.isnan(number) or number < low or above:
        bracket = ")" if upper_open else "]"
        raise ValueError(f"{name}={value!r} must lie in [{low}, {high}{bracket}")


# Validators on plain Python values (names, numbers, shapes), never on arrays: the torch
# twins in nmsim.torch.bame call them too, so both paths refuse the same inputs with the
# same words.


def check_config_choice(name: str, value: object) -> None:
    """``value`` is one of the choices of the ``BameConfig`` switch ``name``."""
    check_choice(value, name, _CHOICES[name])


def check_utility_settings(regrow_init: object, lookahead_step: object, curvature: object) -> None:
    """The settings of :func:`keep_utility`."""
    check_config_choice("regrow_init", regrow_init)
    # A negative or NaN step or curvature would silently invert or poison the ranking.
    _check_real("lookahead_step", lookahead_step, 0.0, math.inf, upper_open=True)
    _check_real("curvature", curvature, 0.0, math.inf, upper_open=True)


def check_mask_form(
    name: str, is_bool: bool, dtype: object, shape: tuple[int, ...], m: int
) -> None:
    """A mask in the ``[rows, reduction]`` form, whole blocks of ``m`` per row."""
    if not is_bool:
        raise TypeError(f"{name} must be a bool array, got dtype={dtype}")
    if len(shape) != 2:
        raise ValueError(
            f"{name} must be the 2-D [rows, reduction] matrix (see nmref.layouts), "
            f"got ndim={len(shape)}"
        )
    if shape[1] % m:
        raise ValueError(f"{name}.shape[1]={shape[1]} must be a multiple of m={m}")


def check_operand_shapes(mask_shape: tuple[int, ...], **shapes: tuple[int, ...]) -> None:
    for name, shape in shapes.items():
        if shape != mask_shape:
            raise ValueError(f"{name}.shape={shape} must equal mask.shape={mask_shape}")


def check_candidate_blocks(
    is_bool: bool, dtype: object, shape: tuple[int, ...], mask_shape: tuple[int, ...], m: int
) -> None:
    block_shape = (mask_shape[0], mask_shape[1] // m)
    if not is_bool or shape != block_shape:
        raise ValueError(
            f"candidates must be a bool array of block shape {block_shape}, got {dtype} {shape}"
        )


def raise_candidate_grad(row: int, column: int, m: int) -> NoReturn:
    """``grad[row, column]`` lies in a candidate block and is not finite."""
    raise ValueError(
        f"grad is not finite at ({row}, {column}), a position of candidate block "
        f"({row}, {column // m}); the scores need the gradient at every position of "
        "every candidate block (spec 3.6)"
    )


def check_selection(
    scores_shape: tuple[int, ...], candidates_shape: tuple[int, ...], budget: object
) -> None:
    """The arguments of :func:`select_blocks`, NaN scores aside."""
    if scores_shape != candidates_shape:
        raise ValueError(
            f"scores.shape={scores_shape} must equal candidates.shape={candidates_shape}"
        )
    check_count(budget, "budget")


@dataclass(frozen=True)
class BameState:
    """Per-block oscillation counters of one layer (``specs/bame.md`` section 3.3).

    Arrays are indexed by block ``(row, group)`` of the ``[rows, reduction]``
    matrix, except ``previous_mask`` which has the mask's shape. Counters only
    ever grow; :func:`evolve_mask` returns a new state and never edits this one.

    Attributes
    ----------
    changes : int64 array, shape (rows, groups)
        Updates at which the block's pattern changed.
    reverts : int64 array
        Changes that returned the block to the pattern it had before its
        previous change (A -> B -> A).
    change_ema : float64 array
        Exponential moving average of the 0/1 "changed" indicator.
    frozen : bool array
        Sticky freeze flags (only set when ``sticky_freeze``).
    previous_mask : bool array, shape (rows, reduction)
        Each block's pattern before its most recent change (the initial pattern
        until it first changes).
    num_updates : int
        Update steps taken so far (the denominator of the rates).
    """

    changes: NDArray[np.int64]
    reverts: NDArray[np.int64]
    change_ema: NDArray[np.float64]
    frozen: NDArray[np.bool_]
    previous_mask: NDArray[np.bool_]
    num_updates: int = 0

    @classmethod
    def initial(cls, mask: ArrayLike, m: int) -> BameState:
        """Fresh counters for a layer whose current mask is ``mask`` (2-D, groups of ``m``)."""
        mask_array = _as_mask(mask, m)
        blocks = (mask_array.shape[0], mask_array.shape[1] // m)
        return cls(
            changes=np.zeros(blocks, dtype=np.int64),
            reverts=np.zeros(blocks, dtype=np.int64),
            change_ema=np.zeros(blocks, dtype=np.float64),
            frozen=np.zeros(blocks, dtype=bool),
            previous_mask=mask_array.copy(),
            num_updates=0,
        )

    @property
    def block_shape(self) -> tuple[int, int]:
        return self.changes.shape  # type: ignore[return-value]


def _as_mask(mask: ArrayLike, m: int, name: str = "mask") -> NDArray[np.bool_]:
    array = np.asarray(mask)
    check_mask_form(name, array.dtype == np.bool_, array.dtype, array.shape, m)
    return array


def _blocks(array: NDArray, m: int) -> NDArray:
    """View ``[rows, reduction]`` as ``[rows, groups, m]``."""
    return array.reshape(array.shape[0], array.shape[1] // m, m)


# ----------------------------------------------------------------------------
# Schedule
# ----------------------------------------------------------------------------


def is_update_step(step: int, config: BameConfig) -> bool:
    """Whether the mask adapts at optimizer step ``step`` (Algorithm 1: ``t_i``, ``t_f``, ``T``).

    Examples
    --------
    >>> cfg = BameConfig(2, 4, t_i=10, t_f=40, update_interval=10)
    >>> [t for t in range(50) if is_update_step(t, cfg)]
    [10, 20, 30]
    """
    return config.t_i <= step < config.t_f and (step - config.t_i) % config.update_interval == 0


def check_update_step(step: int, config: BameConfig) -> None:
    if not is_update_step(step, config):
        raise ValueError(
            f"step={step} is not an update step of t_i={config.t_i}, t_f={config.t_f}, "
            f"update_interval={config.update_interval}"
        )


def adapted_fraction(step: int, config: BameConfig) -> float:
    r"""The fraction ``f(t)`` of blocks allowed to adapt at ``step`` (⚑ spec 3.5).

    .. math::

        f(t) = \begin{cases}
          \tfrac{\alpha}{2}\bigl(1 + \cos(\pi p)\bigr) & \text{cosine} \\
          \alpha (1 - p) & \text{linear} \\
          \alpha & \text{constant}
        \end{cases}, \qquad p = \frac{t - t_i}{t_f - t_i},

    and 0 outside ``[t_i, t_f)``.

    Examples
    --------
    >>> cfg = BameConfig(2, 4, t_i=0, t_f=100, adapt_fraction=0.3)
    >>> adapted_fraction(0, cfg), round(adapted_fraction(50, cfg), 12), adapted_fraction(100, cfg)
    (0.3, 0.15, 0.0)
    """
    if not config.t_i <= step < config.t_f:
        return 0.0
    progress = (step - config.t_i) / (config.t_f - config.t_i)
    alpha = float(config.adapt_fraction)
    if config.fraction_schedule == "cosine":
        return alpha / 2.0 * (1.0 + math.cos(math.pi * progress))
    if config.fraction_schedule == "linear":
        return alpha * (1.0 - progress)
    return alpha


def adaptation_budget(step: int, num_candidates: int, num_blocks: int, config: BameConfig) -> int:
    """``k(t) = floor(f(t) * base)``, base = candidate or all blocks (``budget_of``).

    Never more than ``num_candidates`` (only candidates can change).
    """
    base = num_candidates if config.budget_of == "candidates" else num_blocks
    return min(num_candidates, math.floor(adapted_fraction(step, config) * base))


def update_steps(total_steps: int, config: BameConfig) -> list[int]:
    """The update steps among ``0 .. total_steps - 1``."""
    stop = min(int(total_steps), config.t_f)
    return list(range(config.t_i, max(config.t_i, stop), config.update_interval))


def weight_gradient_fraction(
    total_steps: int, config: BameConfig, candidate_fraction: float = 1.0
) -> float:
    r"""Fraction of a dense weight gradient that spec 3.6 computes over a run.

    .. math::

        \frac{n}{m} + \frac{m - n}{m}\, \bar c\, \frac{U}{S}

    with ``S = total_steps``, ``U`` the number of update steps among them and
    ``c-bar = candidate_fraction`` the mean fraction of blocks that are
    candidates at an update step (1 while nothing is frozen). The
    :class:`nmref.bame_training.GradientLedger` of a run measures the same
    quantity; they agree exactly when no block is frozen (tested).

    Examples
    --------
    >>> cfg = BameConfig(2, 4, t_i=0, t_f=4, update_interval=2)
    >>> weight_gradient_fraction(6, cfg)   # 1/2 + 1/2 * 2/6
    0.6666666666666666
    """
    if total_steps <= 0:
        raise ValueError(f"total_steps={total_steps} must be >= 1")
    _check_real("candidate_fraction", candidate_fraction, 0.0, 1.0)
    updates = len(update_steps(total_steps, config))
    density = config.n / config.m
    return density + (1.0 - density) * float(candidate_fraction) * updates / total_steps


# ----------------------------------------------------------------------------
# Oscillation-aware block freezing (OBF)
# ----------------------------------------------------------------------------


def oscillation_frequency(state: BameState, config: BameConfig) -> NDArray[np.float64]:
    """Per-block oscillation frequency in ``[0, 1]`` (⚑ spec 3.3).

    ``"revert_rate"``: ``reverts / max(1, num_updates)``; ``"change_rate"``:
    ``changes / max(1, num_updates)``; ``"change_ema"``: the EMA of the changed
    indicator.
    """
    if config.oscillation == "change_ema":
        return state.change_ema.copy()
    counts = state.reverts if config.oscillation == "revert_rate" else state.changes
    return counts.astype(np.float64) / max(1, state.num_updates)


def candidate_blocks(state: BameState, config: BameConfig) -> NDArray[np.bool_]:
    """Blocks that may adapt at the next update (⚑ spec 3.4).

    A block is a candidate unless its oscillation frequency exceeds
    ``freeze_threshold``, it carries a sticky freeze flag, or (``multiplicative``)
    its weight ``(1 - frequency) ** gamma`` is 0, so that it could never be chosen.
    Only candidates get gradient entries at pruned positions.
    """
    frequency = oscillation_frequency(state, config)
    candidates = (frequency <= config.freeze_threshold) & ~state.frozen
    if config.combine == "multiplicative" and config.product_exponent > 0:
        candidates &= frequency < 1.0
    return candidates


def gradient_positions(mask: ArrayLike, candidates: ArrayLike, m: int) -> NDArray[np.bool_]:
    """Positions whose weight gradient the spec computes at an update step.

    Kept positions of every block plus **all** positions of candidate blocks
    (spec 3.6). At other steps it is ``mask`` alone.
    """
    mask_array = _as_mask(mask, m)
    candidate_array = np.asarray(candidates, dtype=bool)
    expanded = np.repeat(candidate_array, m, axis=1)
    return mask_array | expanded


# ----------------------------------------------------------------------------
# Loss-aware mask adaptation (LMA): scores
# ----------------------------------------------------------------------------


def keep_utility(
    weight: ArrayLike,
    mask: ArrayLike,
    grad: ArrayLike,
    *,
    regrow_init: RegrowInit = "zero",
    lookahead_step: float = 0.0,
    curvature: float = 0.0,
) -> NDArray[np.float64]:
    r"""Per-position keep utility ``u`` (⚑ spec 3.2), computed in float64.

    With ``g`` the gradient of the loss with respect to the *effective* weight
    ``w * mask``, ``v`` the value a position has when kept (``w`` if kept now;
    0 or the stale ``w`` if pruned, by ``regrow_init``), ``eta`` the look-ahead
    step and ``c`` the curvature:

    .. math::

        u = \begin{cases}
          \tfrac{c}{2} w^2 - g w + \eta g^2 & \text{kept} \\
          -g v - \tfrac{c}{2} v^2 + \eta g^2 & \text{pruned}
        \end{cases}

    i.e. the loss reduction of having the position kept rather than pruned, to
    first order (plus the next SGD step's first-order gain ``eta g^2`` and an
    isotropic second-order term). Evaluated exactly in this operation order.

    Entries are computed everywhere; callers pass a gradient that is finite
    where the result is used (NaN elsewhere propagates only to unused entries).
    """
    check_utility_settings(regrow_init, lookahead_step, curvature)
    w = np.asarray(weight, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    kept = np.asarray(mask, dtype=bool)
    half_c = 0.5 * float(curvature)
    eta = float(lookahead_step)
    with np.errstate(invalid="ignore", over="ignore"):
        step_gain = eta * (g * g)
        kept_value = (half_c * (w * w) - g * w) + step_gain
        v = w if regrow_init == "stale" else np.zeros_like(w)
        pruned_value = (-(g * v) - half_c * (v * v)) + step_gain
    return np.where(kept, kept_value, pruned_value)


@dataclass(frozen=True)
class BlockScores:
    """Output of :func:`block_scores`.

    Attributes
    ----------
    reduction : float64 array, shape (rows, groups)
        Expected loss reduction ``R >= 0`` of the block's best adaptation, where
        keeping the current pattern (``R = 0``) is one of the options; 0.0 for
        non-candidate blocks and blocks that cannot change (``n in {0, m}``).
    proposed_mask : bool array, shape (rows, reduction)
        The mask each candidate block would take if ``R > 0``; the current
        pattern wherever ``R = 0``.
    utility : float64 array, shape (rows, reduction)
        The keep utility ``u`` (NaN outside candidate blocks: never computed there).
    """

    reduction: NDArray[np.float64]
    proposed_mask: NDArray[np.bool_]
    utility: NDArray[np.float64]


def _validated_inputs(
    weight: ArrayLike, mask: ArrayLike, grad: ArrayLike, m: int, n: int
) -> tuple[NDArray, NDArray[np.bool_], NDArray]:
    mask_array = _as_mask(mask, m)
    weight_array = np.asarray(weight)
    grad_array = np.asarray(grad)
    for name, array in (("weight", weight_array), ("grad", grad_array)):
        # float64 is the scoring precision: wider floats would be rounded silently.
        check_float_dtype(array, name)
    check_operand_shapes(mask_array.shape, weight=weight_array.shape, grad=grad_array.shape)
    if not is_nm(mask_array, n, m):
        raise ValueError(f"mask must keep exactly n={n} in every block of m={m}")
    if not np.isfinite(weight_array).all():
        raise ValueError("weight must be finite (NaN/inf weights have no loss estimate)")
    return weight_array, mask_array, grad_array


def _check_candidate_grad(grad: NDArray, candidates: NDArray[np.bool_], m: int) -> None:
    """The spec's scores read the gradient at every position of every candidate block."""
    needed = np.repeat(candidates, m, axis=1)
    bad = needed & ~np.isfinite(grad)
    if bad.any():
        raise_candidate_grad(*(int(i) for i in np.argwhere(bad)[0]), m)


def block_scores(
    weight: ArrayLike,
    mask: ArrayLike,
    grad: ArrayLike,
    candidates: ArrayLike,
    *,
    n: int,
    m: int,
    swap_rule: SwapRule = "single_swap",
    regrow_init: RegrowInit = "zero",
    lookahead_step: float = 0.0,
    curvature: float = 0.0,
) -> BlockScores:
    r"""Expected loss reduction of adapting each candidate block (LMA, ⚑ spec 3.2).

    For a block with kept set :math:`K` and keep utilities :math:`u`
    (:func:`keep_utility`), adapting it to a new kept set :math:`S`,
    :math:`|S| = n`, reduces the loss by, to first order,

    .. math::

        R(S) = \sum_{p \in S} u_p - \sum_{p \in K} u_p
             = \sum_{p=0}^{m-1} ([p \in S] - [p \in K])\, u_p ,

    summed in index order. ``"single_swap"`` maximises over one prune ``i``
    and one regrow ``j``: ``i`` = kept position of least ``u`` (ties: the
    **highest** index is pruned, so the lower index stays kept), ``j`` = pruned
    position of largest ``u`` (ties: lowest index), ``R = u_j - u_i``.
    ``"reselect"``: ``S = nm_mask(u, n, m)`` (the maximiser; ties to the lower
    index), ``R = R(S)``. If the best ``R`` is not positive the block keeps its
    pattern and ``R = 0``.

    Parameters
    ----------
    weight : float array, shape (rows, reduction)
        Stored weights (pruned entries hold their stale values).
    mask : bool array, same shape
        Current mask, exactly ``n`` kept per block.
    grad : float array, same shape
        Gradient w.r.t. the effective weight; must be finite at every position
        of every candidate block; may hold NaN elsewhere (it is never read there).
    candidates : bool array, shape (rows, reduction // m)
    n, m : int
    swap_rule, regrow_init, lookahead_step, curvature
        As in :class:`BameConfig`.

    Returns
    -------
    BlockScores

    Raises
    ------
    TypeError
        Non-float weight/grad, non-bool mask.
    ValueError
        Shapes differ; mask not exactly N:M; non-finite weight; gradient not
        finite inside a candidate block; non-finite utility (overflow).

    Notes
    -----
    Complexity O(rows * reduction) for ``single_swap``, plus the
    :func:`nmref.nm_mask` cost for ``reselect``.

    Examples
    --------
    Kept ``{0, 1}``; position 1 would cut the loss if removed (``g*w = 0.5 > 0``),
    position 2 has a large gradient and a look-ahead step of 1:

    >>> s = block_scores(np.array([[1.0, 1.0, 0.0, 0.0]]), np.array([[1, 1, 0, 0]], bool),
    ...                  np.array([[0.0, 0.5, 2.0, 0.0]]), np.array([[True]]),
    ...                  n=2, m=4, lookahead_step=1.0)
    >>> float(s.reduction[0, 0]), s.proposed_mask.astype(int).tolist()
    (4.25, [[1, 0, 1, 0]])
    """
    pattern = check_pattern(n, m)
    weight_array, mask_array, grad_array = _validated_inputs(weight, mask, grad, m, n)
    candidate_array = np.asarray(candidates)
    check_candidate_blocks(
        candidate_array.dtype == np.bool_,
        candidate_array.dtype,
        candidate_array.shape,
        mask_array.shape,
        m,
    )
    check_config_choice("swap_rule", swap_rule)
    check_config_choice("regrow_init", regrow_init)
    _check_candidate_grad(grad_array, candidate_array, m)

    expanded = np.repeat(candidate_array, m, axis=1)
    # Outside candidate blocks the gradient was never computed: substitute 0 so no
    # NaN is touched, then blank the utility there.
    safe_grad = np.where(expanded, grad_array, 0.0)
    utility = keep_utility(
        weight_array,
        mask_array,
        safe_grad,
        regrow_init=regrow_init,
        lookahead_step=lookahead_step,
        curvature=curvature,
    )
    if not np.isfinite(utility[expanded]).all():
        raise ValueError("keep utility overflowed (|g| or |w| too large for float64 products)")
    utility = np.where(expanded, utility, np.nan)

    reduction = np.zeros(candidate_array.shape, dtype=np.float64)
    proposed = mask_array.copy()
    if pattern.n in (0, pattern.m) or not candidate_array.any():
        return BlockScores(reduction, proposed, utility)

    u = _blocks(utility, m)[candidate_array]  # (num_candidates, m)
    kept = _blocks(mask_array, m)[candidate_array]
    if swap_rule == "single_swap":
        new_kept, gain = _single_swap(u, kept)
    else:
        new_kept = nm_mask(u, pattern.n, pattern.m)
        gain = np.zeros(u.shape[0], dtype=np.float64)
        for position in range(m):  # index order, as the spec's sum
            delta = new_kept[:, position].astype(np.int8) - kept[:, position].astype(np.int8)
            # (gain + added) - removed: the oracle's operation order, for identical sums.
            gain = (gain + np.where(delta > 0, u[:, position], 0.0)) - np.where(
                delta < 0, u[:, position], 0.0
            )
    # Keeping the current pattern is always an option (R = 0): a block whose best
    # adaptation does not strictly reduce the estimated loss proposes no change.
    improves = gain > 0
    reduction[candidate_array] = np.where(improves, gain, 0.0)
    block_view = _blocks(proposed, m)
    block_view[candidate_array] = np.where(improves[:, None], new_kept, kept)
    return BlockScores(reduction, proposed, utility)


def _single_swap(
    u: NDArray[np.float64], kept: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
    """Best single prune/regrow per block row of ``u``; ties as in :func:`block_scores`."""
    count, m = u.shape
    # Prune: least utility among kept; ties -> highest index (argmin of the reversed row
    # returns the first, i.e. the highest original index).
    kept_u = np.where(kept, u, np.inf)
    prune = m - 1 - np.argmin(kept_u[:, ::-1], axis=1)
    # Regrow: largest utility among pruned; ties -> lowest index.
    pruned_u = np.where(kept, -np.inf, u)
    regrow = np.argmax(pruned_u, axis=1)
    rows = np.arange(count)
    gain = u[rows, regrow] - u[rows, prune]
    new_kept = kept.copy()
    new_kept[rows, prune] = False
    new_kept[rows, regrow] = True
    return new_kept, gain


def combined_scores(
    reduction: ArrayLike, frequency: ArrayLike, candidates: ArrayLike, config: BameConfig
) -> NDArray[np.float64]:
    """The joint assessment of LMA and OBF (⚑ spec 3.4); 0.0 outside candidates.

    ``freeze_then_rank``: ``R``. ``multiplicative``: ``R * (1 - f) ** gamma``.
    """
    reduction_array = np.asarray(reduction, dtype=np.float64)
    candidate_array = np.asarray(candidates, dtype=bool)
    if config.combine == "freeze_then_rank":
        score = reduction_array.copy()
    else:
        # math.pow per block: NumPy's vectorised power may differ from libm in the
        # last bit on some CPUs, and the oracle must agree exactly.
        gamma = float(config.product_exponent)
        frequency_array = np.asarray(frequency, dtype=np.float64)
        weight = np.array(
            [math.pow(1.0 - f, gamma) for f in frequency_array.ravel().tolist()], dtype=np.float64
        ).reshape(frequency_array.shape)
        score = reduction_array * weight
    return np.where(candidate_array, score, 0.0)


def select_blocks(scores: ArrayLike, candidates: ArrayLike, budget: int) -> NDArray[np.bool_]:
    """The blocks that adapt: the ``budget`` best candidates with a **positive** score.

    Candidates with ``score > 0`` are ordered by ``(-score, row, group)`` (a total
    order, so the result does not depend on any iteration order) and the first
    ``budget`` are taken.

    Parameters
    ----------
    scores : float array, shape (rows, groups)
    candidates : bool array, same shape
    budget : int >= 0

    Returns
    -------
    bool array, shape (rows, groups)

    Examples
    --------
    >>> select_blocks(np.array([[0.5, 2.0, 2.0, -1.0]]), np.ones((1, 4), bool), 2).astype(int)
    array([[0, 1, 1, 0]])
    """
    score_array = as_scores(scores).astype(np.float64)
    refuse_masked(candidates, "candidates")
    candidate_array = np.asarray(candidates)
    if candidate_array.dtype != np.bool_:
        raise TypeError(f"candidates must be a bool array, got dtype={candidate_array.dtype}")
    check_selection(score_array.shape, candidate_array.shape, budget)
    if np.isnan(score_array[candidate_array]).any():
        raise ValueError("scores must not be NaN at candidate blocks")
    flat_scores = score_array.ravel()
    eligible = np.flatnonzero(candidate_array.ravel() & (flat_scores > 0))
    # lexsort: last key is primary -> descending score, then ascending flat index.
    order = eligible[np.lexsort((eligible, -flat_scores[eligible]))]
    selected = np.zeros(flat_scores.size, dtype=bool)
    selected[order[:budget]] = True
    return selected.reshape(score_array.shape)


# ----------------------------------------------------------------------------
# One evolution step
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Evolution:
    """Result of :func:`evolve_mask` (all arrays are new).

    Attributes
    ----------
    mask, weight : arrays, shape (rows, reduction)
        The evolved mask (exactly N:M) and the weights after regrow init.
    velocity : array or None
        Momentum after the reset at changed positions (``None`` if not given).
    state : BameState
        Counters after this update.
    candidates, selected : bool arrays, shape (rows, groups)
        Blocks that were candidates, and those that changed.
    reduction, scores : float64 arrays, shape (rows, groups)
        ``R`` per block and the combined score used for ranking.
    budget : int
        ``k(t)``.
    """

    mask: NDArray[np.bool_]
    weight: NDArray
    velocity: NDArray | None
    state: BameState
    candidates: NDArray[np.bool_]
    selected: NDArray[np.bool_]
    reduction: NDArray[np.float64]
    scores: NDArray[np.float64]
    budget: int


def resolve_lookahead(config: BameConfig, learning_rate: float | None) -> float:
    """The look-ahead step: the config's, else the learning rate (shared with the torch twin)."""
    if config.lookahead_step is not None:
        return float(config.lookahead_step)
    if learning_rate is None:
        raise ValueError(
            "config.lookahead_step is None (= use the optimizer's learning rate), so "
            "learning_rate must be given"
        )
    _check_real("learning_rate", learning_rate, 0.0, math.inf)
    return float(learning_rate)


def check_state(state: BameState, mask: NDArray[np.bool_], m: int) -> None:
    """Every array of ``state`` has the shape ``mask`` implies (shared with the torch twin)."""
    blocks = (mask.shape[0], mask.shape[1] // m)
    for f in fields(state):
        value = getattr(state, f.name)
        if isinstance(value, np.ndarray):
            expected = mask.shape if f.name == "previous_mask" else blocks
            if value.shape != expected:
                raise ValueError(f"state.{f.name}.shape={value.shape} must be {expected}")


def next_state(
    state: BameState,
    old_mask: NDArray[np.bool_],
    new_mask: NDArray[np.bool_],
    config: BameConfig,
) -> BameState:
    """Counters after one update (spec 3.3): changes, reverts, EMA, sticky flags."""
    m = config.m
    old_blocks, new_blocks = _blocks(old_mask, m), _blocks(new_mask, m)
    previous_blocks = _blocks(state.previous_mask, m)
    changed = (old_blocks != new_blocks).any(axis=2)
    reverted = changed & (new_blocks == previous_blocks).all(axis=2)
    previous_mask = state.previous_mask.copy()
    _blocks(previous_mask, m)[changed] = old_blocks[changed]
    beta = float(config.ema_decay)
    updated = BameState(
        changes=state.changes + changed,
        reverts=state.reverts + reverted,
        change_ema=beta * state.change_ema + (1.0 - beta) * changed,
        frozen=state.frozen.copy(),
        previous_mask=previous_mask,
        num_updates=state.num_updates + 1,
    )
    if config.sticky_freeze:
        frequency = oscillation_frequency(updated, config)
        updated = replace(updated, frozen=updated.frozen | (frequency > config.freeze_threshold))
    return updated


def evolve_mask(
    weight: ArrayLike,
    mask: ArrayLike,
    grad: ArrayLike,
    state: BameState,
    step: int,
    config: BameConfig,
    *,
    learning_rate: float | None = None,
    velocity: ArrayLike | None = None,
) -> Evolution:
    """One block-aware mask evolution at update step ``step`` (spec section 3).

    1. Candidates from the oscillation counters (OBF): :func:`candidate_blocks`.
    2. Expected loss reduction per candidate (LMA): :func:`block_scores`.
    3. Joint score (:func:`combined_scores`); the top ``k(t)`` with a positive
       score adapt (:func:`select_blocks`).
    4. Regrown weights start at 0 (``regrow_init="zero"``) or keep their stale
       value; momentum is zeroed where the mask changed (``reset_momentum``).
    5. Counters are updated (:class:`BameState`).

    Parameters
    ----------
    weight, mask, grad
        As in :func:`block_scores`. ``grad`` must be finite at all positions of
        the blocks :func:`candidate_blocks` returns for ``state``
        (:func:`gradient_positions`), and is never read elsewhere.
    state : BameState
        Counters before this update.
    step : int
        Optimizer step; must satisfy :func:`is_update_step`.
    config : BameConfig
    learning_rate : float, optional
        Used as the look-ahead step when ``config.lookahead_step is None``.
    velocity : array, optional
        Optimizer momentum, same shape as ``weight``.

    Returns
    -------
    Evolution

    Raises
    ------
    ValueError
        ``step`` is not an update step; any :func:`block_scores` error; a state
        of the wrong shape; ``learning_rate`` needed but missing.

    Notes
    -----
    Pure: the inputs are not modified. Complexity O(rows * reduction) plus a
    sort of the candidate blocks, O(B log B). Every rule except the update
    schedule's names is a reconstruction (spec section 1); see the switches.

    References
    ----------
    .. [1] Yang et al., "BAME: Block-Aware Mask Evolution for Efficient N:M
       Sparse Training", ICML 2025 (abstract; Algorithm 1 inputs t_i, t_f, T).
    .. [2] Evci et al., "Rigging the Lottery", ICML 2020, Sec. 3 (drop fraction,
       cosine decay, zero-initialised regrowth).

    Examples
    --------
    One 1:2 block; regrowing position 1 (gradient 2, look-ahead step 1) gains
    ``eta * g**2 = 4``; the regrown weight restarts from 0:

    >>> cfg = BameConfig(1, 2, t_f=10, update_interval=1, adapt_fraction=1.0,
    ...                  fraction_schedule="constant", lookahead_step=1.0, curvature=0.0)
    >>> mask = np.array([[True, False]])
    >>> out = evolve_mask(np.array([[0.5, 0.3]]), mask, np.array([[0.0, 2.0]]),
    ...                   BameState.initial(mask, 2), 0, cfg)
    >>> out.mask.tolist(), out.weight.tolist(), out.reduction.tolist()
    ([[False, True]], [[0.5, 0.0]], [[4.0]])
    """
    check_update_step(step, config)
    n, m = config.n, config.m
    weight_array, mask_array, grad_array = _validated_inputs(weight, mask, grad, m, n)
    check_state(state, mask_array, m)
    lookahead = resolve_lookahead(config, learning_rate)

    frequency = oscillation_frequency(state, config)
    candidates = candidate_blocks(state, config)
    scored = block_scores(
        weight_array,
        mask_array,
        grad_array,
        candidates,
        n=n,
        m=m,
        swap_rule=config.swap_rule,
        regrow_init=config.regrow_init,
        lookahead_step=lookahead,
        curvature=config.curvature,
    )
    scores = combined_scores(scored.reduction, frequency, candidates, config)
    budget = adaptation_budget(step, int(candidates.sum()), candidates.size, config)
    selected = select_blocks(scores, candidates, budget)

    new_mask = np.where(np.repeat(selected, m, axis=1), scored.proposed_mask, mask_array)
    changed = new_mask != mask_array
    new_weight = weight_array.copy()
    if config.regrow_init == "zero":
        new_weight[changed & new_mask] = 0
    new_velocity = None
    if velocity is not None:
        new_velocity = np.array(velocity, copy=True)
        if new_velocity.shape != mask_array.shape:
            raise ValueError(f"velocity.shape={new_velocity.shape} must be {mask_array.shape}")
        if config.reset_momentum:
            new_velocity[changed] = 0
    return Evolution(
        mask=new_mask,
        weight=new_weight,
        velocity=new_velocity,
        state=next_state(state, mask_array, new_mask, config),
        candidates=candidates,
        selected=selected,
        reduction=scored.reduction,
        scores=scores,
        budget=budget,
    )


# ----------------------------------------------------------------------------
# Plain-Python oracle: one block at a time, in any visiting order
# ----------------------------------------------------------------------------


def evolve_mask_reference(
    weight: ArrayLike,
    mask: ArrayLike,
    grad: ArrayLike,
    state: BameState,
    step: int,
    config: BameConfig,
    *,
    learning_rate: float | None = None,
    velocity: ArrayLike | None = None,
    visit_order: ArrayLike | None = None,
) -> Evolution:
    """Teaching version of :func:`evolve_mask`: loops over blocks in ``visit_order``.

    Same contract and result as :func:`evolve_mask` (tested bit for bit, for
    random visiting orders); slow. ``visit_order`` is a permutation of the flat
    block indices (C order); the default is ``0, 1, ...``.
    """
    check_update_step(step, config)
    n, m = config.n, config.m
    w, mask_array, g = _validated_inputs(weight, mask, grad, m, n)
    rows, groups = mask_array.shape[0], mask_array.shape[1] // m
    num_blocks = rows * groups
    order = np.arange(num_blocks) if visit_order is None else np.asarray(visit_order)
    if sorted(order.tolist()) != list(range(num_blocks)):
        raise ValueError("visit_order must be a permutation of the flat block indices")
    eta = resolve_lookahead(config, learning_rate)
    half_c = 0.5 * float(config.curvature)

    # Step 1: frequency and candidacy, block by block.
    candidates = np.zeros((rows, groups), dtype=bool)
    reduction = np.zeros((rows, groups), dtype=np.float64)
    scores = np.zeros((rows, groups), dtype=np.float64)
    proposals: dict[tuple[int, int], list[bool]] = {}
    ranked: list[tuple[float, int]] = []
    for flat in order.tolist():
        r, b = divmod(flat, groups)
        f = _block_frequency(state, config, r, b)
        is_candidate = f <= config.freeze_threshold and not state.frozen[r, b]
        if config.combine == "multiplicative" and config.product_exponent > 0:
            is_candidate = is_candidate and f < 1.0
        if not is_candidate:
            continue
        candidates[r, b] = True
        columns = range(b * m, b * m + m)
        kept = [bool(mask_array[r, c]) for c in columns]
        # Step 2: keep utility of every position of the block.
        u = []
        for c, is_kept in zip(columns, kept, strict=True):
            wc, gc = float(w[r, c]), float(g[r, c])
            if not math.isfinite(gc):
                raise ValueError(f"grad is not finite at ({r}, {c}) in a candidate block")
            if is_kept:
                u.append((half_c * (wc * wc) - gc * wc) + eta * (gc * gc))
            else:
                v = wc if config.regrow_init == "stale" else 0.0
                u.append((-(gc * v) - half_c * (v * v)) + eta * (gc * gc))
        # Step 3: best adaptation of this block.
        if n in (0, m):
            new_kept, gain = kept, 0.0
        elif config.swap_rule == "single_swap":
            prune = max((i for i in range(m) if kept[i]), key=lambda i: (-u[i], i))
            regrow = min((j for j in range(m) if not kept[j]), key=lambda j: (-u[j], j))
            gain = u[regrow] - u[prune]
            new_kept = list(kept)
            new_kept[prune], new_kept[regrow] = False, True
        else:
            best = sorted(range(m), key=lambda p: (-u[p], p))[:n]
            new_kept = [p in best for p in range(m)]
            gain = 0.0
            for p in range(m):
                gain = (
                    gain
                    + (u[p] if new_kept[p] and not kept[p] else 0.0)
                    - (u[p] if kept[p] and not new_kept[p] else 0.0)
                )
        if not gain > 0:  # no strict improvement: keep the current pattern
            new_kept, gain = kept, 0.0
        reduction[r, b] = gain
        if config.combine == "freeze_then_rank":
            score = gain
        else:
            score = gain * math.pow(1.0 - f, float(config.product_exponent))
        scores[r, b] = score
        proposals[(r, b)] = new_kept
        if score > 0:
            ranked.append((score, flat))

    # Step 4: the k(t) best positive scores, ties to the lower flat index.
    budget = adaptation_budget(step, int(candidates.sum()), num_blocks, config)
    ranked.sort(key=lambda item: (-item[0], item[1]))
    selected = np.zeros((rows, groups), dtype=bool)
    new_mask = mask_array.copy()
    new_weight = w.copy()
    new_velocity = None if velocity is None else np.array(velocity, copy=True)
    for _, flat in ranked[:budget]:
        r, b = divmod(flat, groups)
        selected[r, b] = True
        for offset, keep in enumerate(proposals[(r, b)]):
            c = b * m + offset
            if keep != bool(mask_array[r, c]):
                new_mask[r, c] = keep
                if keep and config.regrow_init == "zero":
                    new_weight[r, c] = 0
                if new_velocity is not None and config.reset_momentum:
                    new_velocity[r, c] = 0

    # Step 5: counters, block by block.
    changes, reverts = state.changes.copy(), state.reverts.copy()
    ema, frozen = state.change_ema.copy(), state.frozen.copy()
    previous = state.previous_mask.copy()
    beta = float(config.ema_decay)
    for r in range(rows):
        for b in range(groups):
            cols = slice(b * m, b * m + m)
            did_change = bool((new_mask[r, cols] != mask_array[r, cols]).any())
            if did_change:
                changes[r, b] += 1
                if bool((new_mask[r, cols] == previous[r, cols]).all()):
                    reverts[r, b] += 1
                previous[r, cols] = mask_array[r, cols]
            ema[r, b] = beta * ema[r, b] + (1.0 - beta) * float(did_change)
    counted = BameState(changes, reverts, ema, frozen.copy(), previous, state.num_updates + 1)
    if config.sticky_freeze:
        for r in range(rows):
            for b in range(groups):
                if _block_frequency(counted, config, r, b) > config.freeze_threshold:
                    frozen[r, b] = True
    new_state = BameState(changes, reverts, ema, frozen, previous, state.num_updates + 1)
    return Evolution(
        mask=new_mask,
        weight=new_weight,
        velocity=new_velocity,
        state=new_state,
        candidates=candidates,
        selected=selected,
        reduction=reduction,
        scores=scores,
        budget=budget,
    )


def _block_frequency(state: BameState, config: BameConfig, row: int, group: int) -> float:
    """Scalar oscillation frequency of one block (the oracle's version)."""
    if config.oscillation == "change_ema":
        return float(state.change_ema[row, group])
    source = state.reverts if config.oscillation == "revert_rate" else state.changes
    return float(source[row, group]) / max(1, state.num_updates)
