"""One block-aware mask evolution step, :func:`evolve_mask` (``specs/bame.md`` section 3).

Candidates (:mod:`~nmref.bame.freezing`), scores (:mod:`~nmref.bame.scores`),
selection (:mod:`~nmref.bame.selection`), regrow initialisation and momentum
reset (3.7), and the counters of the next :class:`~nmref.bame.config.BameState`
(3.3). Vectorised; the plain-Python oracle is :mod:`nmref.bame.reference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.bame.config import BameConfig, BameState, _blocks, _check_real
from nmref.bame.freezing import candidate_blocks, oscillation_frequency
from nmref.bame.schedule import adaptation_budget, check_update_step
from nmref.bame.scores import _validated_inputs, block_scores
from nmref.bame.selection import combined_scores, select_blocks

__all__ = ["Evolution", "check_state", "evolve_mask", "next_state", "resolve_lookahead"]


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
