"""Configuration and per-layer state of the BAME-style reference (``specs/bame.md`` sections 2, 5).

:class:`BameConfig` holds every switch with its default, :class:`BameState` the
per-block oscillation counters (section 3.3). The argument rules on plain Python
values live here too: :mod:`nmsim.torch.bame` calls the same ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, NoReturn

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_choice, check_count, check_integer, check_real
from nmref.patterns import check_pattern

__all__ = [
    "BameConfig",
    "BameState",
    "check_candidate_blocks",
    "check_config_choice",
    "check_mask_form",
    "check_operand_shapes",
    "check_selection",
    "check_utility_settings",
    "raise_candidate_grad",
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


def raise_score_overflow(what: str) -> NoReturn:
    """The scores of spec 3.2 left float64 (``what``: the keep utility or a block's ``R``)."""
    raise ValueError(
        f"weight and grad are too large: {what} overflows float64 (the scores multiply "
        "grad by weight and grad by grad, spec 3.2); scale them down"
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
