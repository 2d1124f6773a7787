"""BAME-style mask evolution on the torch path: the loss-aware block scores (LMA) and the
block selection, equal to :mod:`nmref.bame` bit for bit (``specs/bame.md`` §3.2, §3.5, §3.8).

Only the per-update tensor work is ported: :func:`keep_utility`, :func:`block_scores`
(``single_swap`` and ``reselect``) and :func:`select_blocks`. The per-layer state machine
(oscillation counters, freezing, schedule) is small host-side bookkeeping and stays in
:func:`nmref.bame.evolve_mask`. Everything is computed in float64 in the reference's
operation order (one IEEE operation per tensor op, so no fused multiply-add can differ).
"""

from __future__ import annotations

import torch

from nmref.bame.config import (
    check_candidate_blocks,
    check_config_choice,
    check_mask_form,
    check_operand_shapes,
    check_selection,
    check_utility_settings,
    raise_candidate_grad,
    raise_score_overflow,
)
from nmref.bame.scores import BlockScores
from nmref.patterns import check_pattern

from .masks import is_nm, nm_mask

__all__ = ["block_scores", "evolve_mask", "keep_utility", "select_blocks"]


def keep_utility(
    weight: torch.Tensor,
    mask: torch.Tensor,
    grad: torch.Tensor,
    *,
    regrow_init: str = "zero",
    lookahead_step: float = 0.0,
    curvature: float = 0.0,
) -> torch.Tensor:
    """Per-position keep utility ``u`` in float64 (twin of :func:`nmref.bame.keep_utility`).

    kept: ``(c/2 · w·w − g·w) + η·g·g``; pruned: ``(−(g·v) − c/2 · v·v) + η·g·g`` with ``v``
    = 0 (``regrow_init="zero"``) or the stale ``w``. Same validation of the settings.
    Complexity O(size).
    """
    check_utility_settings(regrow_init, lookahead_step, curvature)
    w = weight.to(torch.float64)
    g = grad.to(torch.float64)
    half_c = 0.5 * float(curvature)
    eta = float(lookahead_step)
    step_gain = eta * (g * g)
    kept_value = (half_c * (w * w) - g * w) + step_gain
    v = w if regrow_init == "stale" else torch.zeros_like(w)
    pruned_value = (-(g * v) - half_c * (v * v)) + step_gain
    return torch.where(mask, kept_value, pruned_value)


def _single_swap(u: torch.Tensor, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    count, m = u.shape
    # Prune the least utility among kept, ties -> highest index: argmin (first) of the flip.
    kept_u = torch.where(kept, u, torch.full_like(u, torch.inf))
    prune = m - 1 - torch.argmin(kept_u.flip(1), dim=1)
    # Regrow the largest utility among pruned, ties -> lowest index (argmax returns the first).
    pruned_u = torch.where(kept, torch.full_like(u, -torch.inf), u)
    regrow = torch.argmax(pruned_u, dim=1)
    rows = torch.arange(count, device=u.device)
    gain = u[rows, regrow] - u[rows, prune]
    new_kept = kept.clone()
    new_kept[rows, prune] = False
    new_kept[rows, regrow] = True
    return new_kept, gain


def block_scores(
    weight: torch.Tensor,
    mask: torch.Tensor,
    grad: torch.Tensor,
    candidates: torch.Tensor,
    *,
    n: int,
    m: int,
    swap_rule: str = "single_swap",
    regrow_init: str = "zero",
    lookahead_step: float = 0.0,
    curvature: float = 0.0,
) -> BlockScores:
    """Expected loss reduction of adapting each candidate block (twin of
    :func:`nmref.bame.block_scores`; returns its :class:`~nmref.bame.BlockScores` with
    tensors). Same validation: mask exactly N:M, weight finite, gradient finite inside
    candidate blocks. Complexity O(rows * reduction) (plus :func:`nm_mask` for ``reselect``).
    """
    pattern = check_pattern(n, m)
    mask_shape = tuple(mask.shape)
    check_mask_form("mask", mask.dtype == torch.bool, mask.dtype, mask_shape, m)
    for name, tensor in (("weight", weight), ("grad", grad)):
        if not tensor.is_floating_point():
            raise TypeError(f"{name} must be a float tensor, got dtype={tensor.dtype}")
    check_operand_shapes(mask_shape, weight=tuple(weight.shape), grad=tuple(grad.shape))
    if not is_nm(mask, n, m):
        raise ValueError(f"mask must keep exactly n={n} in every block of m={m}")
    if not bool(torch.isfinite(weight).all()):
        raise ValueError("weight must be finite (NaN/inf weights have no loss estimate)")
    check_candidate_blocks(
        candidates.dtype == torch.bool, candidates.dtype, tuple(candidates.shape), mask_shape, m
    )
    check_config_choice("swap_rule", swap_rule)
    check_config_choice("regrow_init", regrow_init)
    rows, groups = mask.shape[0], mask.shape[1] // m
    expanded = candidates.repeat_interleave(m, dim=1)
    bad = expanded & ~torch.isfinite(grad)
    if bool(bad.any()):
        raise_candidate_grad(*(int(i) for i in bad.nonzero()[0]), m)
    safe_grad = torch.where(expanded, grad.to(torch.float64), 0.0)
    utility = keep_utility(
        weight,
        mask,
        safe_grad,
        regrow_init=regrow_init,
        lookahead_step=lookahead_step,
        curvature=curvature,
    )
    if not bool(torch.isfinite(utility[expanded]).all()):
        raise_score_overflow("the keep utility")
    utility = torch.where(expanded, utility, torch.nan)
    reduction = torch.zeros((rows, groups), dtype=torch.float64, device=mask.device)
    proposed = mask.clone()
    if pattern.n in (0, pattern.m) or not bool(candidates.any()):
        return BlockScores(reduction, proposed, utility)
    u = utility.reshape(rows, groups, m)[candidates]
    kept = mask.reshape(rows, groups, m)[candidates]
    if swap_rule == "single_swap":
        new_kept, gain = _single_swap(u, kept)
    else:
        new_kept = nm_mask(u, pattern.n, pattern.m)
        gain = torch.zeros(u.shape[0], dtype=torch.float64, device=u.device)
        zero = torch.zeros_like(gain)
        for position in range(m):  # index order, as the reference's sum
            added = new_kept[:, position] & ~kept[:, position]
            removed = kept[:, position] & ~new_kept[:, position]
            gain = (gain + torch.where(added, u[:, position], zero)) - torch.where(
                removed, u[:, position], zero
            )
    if not bool(torch.isfinite(gain).all()):
        raise_score_overflow("a block's loss reduction R")
    improves = gain > 0
    reduction[candidates] = torch.where(improves, gain, 0.0)
    block_view = proposed.reshape(rows, groups, m)
    block_view[candidates] = torch.where(improves[:, None], new_kept, kept)
    return BlockScores(reduction, proposed, utility)


def select_blocks(scores: torch.Tensor, candidates: torch.Tensor, budget: int) -> torch.Tensor:
    """The ``budget`` best candidate blocks with a positive score, ordered by
    ``(-score, row, group)`` (twin of :func:`nmref.bame.select_blocks`)."""
    check_selection(tuple(scores.shape), tuple(candidates.shape), budget)
    flat_scores = scores.to(torch.float64).reshape(-1)
    flat_candidates = candidates.reshape(-1)
    if bool(torch.isnan(flat_scores[flat_candidates]).any()):
        raise ValueError("scores must not be NaN at candidate blocks")
    eligible = torch.nonzero(flat_candidates & (flat_scores > 0)).reshape(-1)
    # A stable descending sort keeps equal scores in ascending flat index: (-score, index).
    order = torch.sort(flat_scores[eligible], descending=True, stable=True).indices
    selected = torch.zeros_like(flat_candidates)
    selected[eligible[order[:budget]]] = True
    return selected.reshape(scores.shape)


def evolve_mask(
    weight: torch.Tensor,
    mask: torch.Tensor,
    grad: torch.Tensor,
    state,
    step: int,
    config,
    *,
    learning_rate: float | None = None,
    velocity: torch.Tensor | None = None,
):
    """One BAME-style mask update with the tensor work on the device (twin of
    :func:`nmref.bame.evolve_mask`, ``specs/bame.md`` §3).

    The per-block counters (:class:`nmref.bame.BameState`), candidates and budget are
    host-side NumPy bookkeeping computed by nmref itself; scores, selection and the
    update of mask, weights and momentum run on ``weight.device``. Returns nmref's
    :class:`~nmref.bame.Evolution` whose ``mask``, ``weight``, ``velocity``,
    ``selected``, ``reduction`` and ``scores`` are tensors, and ``state`` and
    ``candidates`` NumPy arrays. Bit for bit equal to nmref (tested over multi-update
    trajectories and every switch).
    """
    import math

    import numpy as np

    from nmref.bame.evolve import Evolution, check_state, next_state, resolve_lookahead
    from nmref.bame.freezing import candidate_blocks, oscillation_frequency
    from nmref.bame.schedule import adaptation_budget, check_update_step

    check_update_step(step, config)
    n, m = config.n, config.m
    device = weight.device
    lookahead = resolve_lookahead(config, learning_rate)
    host_mask = mask.cpu().numpy()
    check_state(state, host_mask, m)
    frequency = oscillation_frequency(state, config)
    candidates = candidate_blocks(state, config)
    candidates_device = torch.from_numpy(candidates).to(device)
    scored = block_scores(
        weight,
        mask,
        grad,
        candidates_device,
        n=n,
        m=m,
        swap_rule=config.swap_rule,
        regrow_init=config.regrow_init,
        lookahead_step=lookahead,
        curvature=config.curvature,
    )
    if config.combine == "freeze_then_rank":
        combined = scored.reduction.clone()
    else:
        # math.pow per block on the host, as nmref does (libm and vectorised pow may differ).
        gamma = float(config.product_exponent)
        factors = np.array(
            [math.pow(1.0 - f, gamma) for f in frequency.ravel().tolist()], dtype=np.float64
        ).reshape(frequency.shape)
        combined = scored.reduction * torch.from_numpy(factors).to(device)
    scores = torch.where(candidates_device, combined, 0.0)
    budget = adaptation_budget(step, int(candidates.sum()), candidates.size, config)
    selected = select_blocks(scores, candidates_device, budget)
    new_mask = torch.where(selected.repeat_interleave(m, dim=1), scored.proposed_mask, mask)
    changed = new_mask != mask
    new_weight = weight.clone()
    if config.regrow_init == "zero":
        new_weight[changed & new_mask] = 0
    new_velocity = None
    if velocity is not None:
        if velocity.shape != mask.shape:
            raise ValueError(f"velocity.shape={tuple(velocity.shape)} must be {tuple(mask.shape)}")
        new_velocity = velocity.clone()
        if config.reset_momentum:
            new_velocity[changed] = 0
    new_state = next_state(state, host_mask, new_mask.cpu().numpy(), config)
    return Evolution(
        mask=new_mask,
        weight=new_weight,
        velocity=new_velocity,
        state=new_state,
        candidates=candidates,
        selected=selected,
        reduction=scored.reduction,
        scores=scores,
        budget=budget,
    )
