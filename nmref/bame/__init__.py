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

One concept per module: :mod:`~nmref.bame.config` (:class:`BameConfig`, :class:`BameState`
and the argument rules shared with the torch twin), :mod:`~nmref.bame.schedule` (update steps
and budget, spec 3.5), :mod:`~nmref.bame.freezing` (OBF: candidate blocks, spec 3.1, 3.3),
:mod:`~nmref.bame.scores` (LMA: keep utility and block scores, spec 3.2),
:mod:`~nmref.bame.selection` (joint assessment and selection, spec 3.4),
:mod:`~nmref.bame.evolve` (one evolution step, spec 3), :mod:`~nmref.bame.reference` (the
plain-Python oracle) and :mod:`~nmref.bame.training` (the NumPy training step, spec 4). This
package re-exports the public names of all but the last.
"""

from __future__ import annotations

from nmref.bame.config import BameConfig, BameState
from nmref.bame.evolve import Evolution, evolve_mask
from nmref.bame.freezing import candidate_blocks, gradient_positions, oscillation_frequency
from nmref.bame.reference import evolve_mask_reference
from nmref.bame.schedule import (
    adaptation_budget,
    adapted_fraction,
    is_update_step,
    update_steps,
    weight_gradient_fraction,
)
from nmref.bame.scores import BlockScores, block_scores, keep_utility
from nmref.bame.selection import combined_scores, select_blocks

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
