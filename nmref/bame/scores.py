"""Loss-aware mask adaptation, LMA: keep utility and block scores (``specs/bame.md`` section 3.2).

The keep utility ``u`` of every position of a candidate block, and each block's
expected loss reduction ``R`` of its best adaptation, under the ``swap_rule``
switch. Ties follow section 3.8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_float_dtype
from nmref.bame.config import (
    RegrowInit,
    SwapRule,
    _as_mask,
    _blocks,
    check_candidate_blocks,
    check_config_choice,
    check_operand_shapes,
    check_utility_settings,
    raise_candidate_grad,
    raise_score_overflow,
)
from nmref.masks import is_nm, nm_mask
from nmref.patterns import check_pattern

__all__ = ["BlockScores", "block_scores", "keep_utility"]


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
        finite inside a candidate block; a utility or a block's ``R`` beyond float64
        (overflow; the message names weight and grad).

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
        raise_score_overflow("the keep utility")
    utility = np.where(expanded, utility, np.nan)

    reduction = np.zeros(candidate_array.shape, dtype=np.float64)
    proposed = mask_array.copy()
    if pattern.n in (0, pattern.m) or not candidate_array.any():
        return BlockScores(reduction, proposed, utility)

    u = _blocks(utility, m)[candidate_array]  # (num_candidates, m)
    kept = _blocks(mask_array, m)[candidate_array]
    # An overflowing R is refused below, not warned about here.
    with np.errstate(over="ignore"):
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
    if not np.isfinite(gain).all():
        raise_score_overflow("a block's loss reduction R")
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
