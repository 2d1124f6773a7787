"""When the mask adapts and how many blocks may change (``specs/bame.md`` sections 3.5, 3.6).

The update steps are Algorithm 1's ``t_i``, ``t_f`` and ``T`` (verified by the
paper); the decaying fraction ``f(t)`` and the budget ``k(t)`` are
reconstruction switches (⚑).
"""

from __future__ import annotations

import math

from nmref.bame.config import BameConfig, _check_real

__all__ = [
    "adaptation_budget",
    "adapted_fraction",
    "check_update_step",
    "is_update_step",
    "update_steps",
    "weight_gradient_fraction",
]


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
    :class:`nmref.bame.training.GradientLedger` of a run measures the same
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
