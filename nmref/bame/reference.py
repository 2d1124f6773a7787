"""Plain-Python oracle of :func:`~nmref.bame.evolve.evolve_mask` (``specs/bame.md`` section 3).

One block at a time, in any visiting order, with scalar arithmetic in the
vectorised version's operation order; tested equal to it bit for bit. Slow and
meant to be read.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from nmref.bame.config import BameConfig, BameState, raise_score_overflow
from nmref.bame.evolve import Evolution, resolve_lookahead
from nmref.bame.schedule import adaptation_budget, check_update_step
from nmref.bame.scores import _validated_inputs

__all__ = ["evolve_mask_reference"]


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
        if not all(math.isfinite(x) for x in u):
            raise_score_overflow("the keep utility")
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
        if not math.isfinite(gain):
            raise_score_overflow("a block's loss reduction R")
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
