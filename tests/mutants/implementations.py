"""Deliberately wrong N:M implementations: each makes one mistake seen in real code.

The conformance kit (:mod:`nmref.testing`) must reject every one of them; see
``test_mutants.py``. Every mutant takes NumPy arrays, like any implementation
under test. Where a mutant imitates a library, the docstring says which.
"""

from __future__ import annotations

import numpy as np

import nmref


def _keep_first_in_order(order: np.ndarray, n: int, shape: tuple[int, ...]) -> np.ndarray:
    mask = np.zeros(order.shape, dtype=bool)
    np.put_along_axis(mask, order[:, :n], True, axis=1)
    return mask.reshape(shape)


# --- 1-D masks: nm_mask(scores, n, m) -------------------------------------------------------


def lower_index_loses_ties(scores, n, m):
    """Among equal scores the *higher* index wins (``torch.topk`` on CPU keeps 2, 3 of 1,1,1,1)."""
    scores = np.asarray(scores)
    groups = scores.reshape(-1, m)
    order = np.argsort(groups, axis=1, kind="stable")[:, ::-1]
    return _keep_first_in_order(order, n, scores.shape)


def wrong_axis(scores, n, m):
    """Groups along axis 0 (output channels) instead of the reduction axis."""
    return nmref.nm_mask(np.asarray(scores), n, m, axis=0, remainder="pad")


def groups_straddle_rows(scores, n, m):
    """Reshapes the whole tensor to ``(-1, m)``, as SR-STE's ``Sparse`` does: groups cross rows."""
    nmref.check_pattern(n, m)
    scores = np.asarray(scores)
    if scores.size % m:
        raise ValueError("size not divisible")  # only the total size is checked
    return nmref.nm_mask(scores.reshape(-1, m), n, m).reshape(scores.shape)


def unstable_selection_sort(scores, n, m):
    """A textbook selection sort: swaps move equal keys past each other (unstable)."""
    scores = np.asarray(scores)
    groups = scores.reshape(-1, m)
    orders = []
    for group in groups:
        order = list(range(m))
        for i in range(m):
            best = max(range(i, m), key=lambda j, o=order: (group[o[j]], -j))
            order[i], order[best] = order[best], order[i]
        orders.append(order)
    order_array = np.array(orders, dtype=np.intp).reshape(-1, m)
    return _keep_first_in_order(order_array, n, scores.shape)


def drops_kept_zeros(scores, n, m):
    """Reads the mask back from the masked weight, so a kept zero counts as pruned (under-fills)."""
    scores = np.asarray(scores)
    return nmref.nm_mask(scores, n, m) & (scores != 0)


def negative_zero_below_zero(scores, n, m):
    """Ranks ``-0.0`` below ``0.0`` (a bitwise or radix-sort key), breaking rule C4's tie."""
    scores = np.asarray(scores)
    groups = scores.reshape(-1, m)
    positive_sign = ~np.signbit(groups) if groups.dtype.kind == "f" else np.ones(groups.shape, bool)
    # Descending by (value, sign), then ascending index: lexsort's last key is primary.
    index = np.broadcast_to(np.arange(m), groups.shape)
    order = np.array(
        [
            np.lexsort((index[r], -positive_sign[r].astype(np.int8), -groups[r].astype(np.float64)))
            for r in range(groups.shape[0])
        ]
    ).reshape(-1, m)
    return _keep_first_in_order(order, n, scores.shape)


def lossy_float64_cast(scores, n, m):
    """Compares integer scores as float64, where 2**63 - 1 and 2**63 - 2 collide."""
    scores = np.asarray(scores)
    return nmref.nm_mask(scores.astype(np.float64), n, m)


def bfloat16_compared_in_float16(scores, n, m):
    """Runs bfloat16 (here: float32) scores through float16: large values overflow to inf and tie."""
    scores = np.asarray(scores)
    with np.errstate(over="ignore"):
        narrowed = scores.astype(np.float16) if scores.dtype.kind == "f" else scores
    return nmref.nm_mask(narrowed, n, m)


def nan_treated_as_minus_inf(scores, n, m):
    """Silently ranks NaN lowest instead of raising (rule C6)."""
    scores = np.asarray(scores)
    if scores.dtype.kind == "f":
        scores = np.where(np.isnan(scores), -np.inf, scores)
    return nmref.nm_mask(scores, n, m)


# --- magnitude masks: magnitude_mask(weights, n, m) -----------------------------------------


def signed_instead_of_magnitude(weights, n, m):
    """Ranks by signed value (torchao's default runtime sparsifier, ``algo=""``)."""
    return nmref.nm_mask(np.asarray(weights), n, m)


def flat_instead_of_channels(weights, n, m):
    """Groups a conv weight along the flattened ``(in, kh, kw)`` axis instead of input channels."""
    return nmref.magnitude_mask(np.asarray(weights), n, m, layout="flat")


def integer_abs_overflows(weights, n, m):
    """``abs`` in the input's integer dtype: ``|int8(-128)|`` wraps to -128 and ranks lowest."""
    weights = np.asarray(weights)
    with np.errstate(over="ignore"):
        magnitudes = np.abs(weights)
    return nmref.nm_mask(magnitudes, n, m)


NM_MASK_MUTANTS = {
    "lower_index_loses_ties": (lower_index_loses_ties, "float32"),
    "wrong_axis": (wrong_axis, "float32"),
    "unstable_selection_sort": (unstable_selection_sort, "float32"),
    "drops_kept_zeros": (drops_kept_zeros, "float32"),
    "negative_zero_below_zero": (negative_zero_below_zero, "float32"),
    "lossy_float64_cast": (lossy_float64_cast, "int64"),
    "bfloat16_compared_in_float16": (bfloat16_compared_in_float16, "bfloat16"),
}
ERROR_RULE_MUTANTS = {
    "groups_straddle_rows": groups_straddle_rows,
    "nan_treated_as_minus_inf": nan_treated_as_minus_inf,
}
MAGNITUDE_MUTANTS = {
    "signed_instead_of_magnitude": (signed_instead_of_magnitude, None, "float32"),
    "flat_instead_of_channels": (flat_instead_of_channels, "channels", "float32"),
    "integer_abs_overflows": (integer_abs_overflows, None, "int8"),
}


# --- training steps: impl(x, w, dy, n, m) -> (y, dx, dw), SR-STE with decay 0.25 -------------

DECAY = 0.25


def _step(x, w, dy, n, m, *, backward_mask=None, dense_backward=False, grad_rule="srste"):
    mask = nmref.magnitude_mask(w, n, m)
    sparse = np.where(mask, w, 0)
    y = x @ sparse.T
    if dense_backward:
        dx = dy @ w
    elif backward_mask is not None:
        dx = dy @ np.where(backward_mask, w, 0)
    else:
        dx = dy @ sparse
    grad = dy.T @ x
    if grad_rule == "srste":
        dw = grad + np.where(mask, 0, DECAY * w)
    elif grad_rule == "masked":
        dw = np.where(mask, grad, 0)
    elif grad_rule == "decay_everywhere":
        dw = grad + DECAY * w
    elif grad_rule == "decay_per_sample":
        dw = grad + np.where(mask, 0, DECAY * x.shape[0] * w)
    return y, dx, dw


def backward_mask_not_a_subset(x, w, dy, n, m):
    """dX uses an N:M mask of the *columns* (as if W^T were pruned separately): it keeps
    weights the forward pass pruned, so the two GEMMs see different networks."""
    column_mask = nmref.nm_mask(
        np.abs(w), min(n, w.shape[0]), min(m, w.shape[0]), axis=0, remainder="pad"
    )
    return _step(x, w, dy, n, m, backward_mask=column_mask)


def dense_backward_gemm(x, w, dy, n, m):
    """dX = dY W with the dense weight: the backward GEMM ignores the mask."""
    return _step(x, w, dy, n, m, dense_backward=True)


def masked_weight_gradient(x, w, dy, n, m):
    """dW masked to the kept positions: not a straight-through estimator."""
    return _step(x, w, dy, n, m, grad_rule="masked")


def decay_on_kept_weights_too(x, w, dy, n, m):
    """Plain L2 decay on every weight instead of SR-STE's pruned-only term."""
    return _step(x, w, dy, n, m, grad_rule="decay_everywhere")


def decay_once_per_sample(x, w, dy, n, m):
    """The decay added once per sample (Bi-Mask's DeiT code): effective batch * λ."""
    return _step(x, w, dy, n, m, grad_rule="decay_per_sample")


TRAINING_MUTANTS = {
    "backward_mask_not_a_subset": backward_mask_not_a_subset,
    "dense_backward_gemm": dense_backward_gemm,
    "masked_weight_gradient": masked_weight_gradient,
    "decay_on_kept_weights_too": decay_on_kept_weights_too,
    "decay_once_per_sample": decay_once_per_sample,
}


# --- Bi-Mask backward masks: impl(w, forward_mask, permutation, n, m) -> B --------------------


def bimask_backward_ignores_forward_mask(w, forward, permutation, n, m):
    """Ranks |W| down each permuted column but forgets to intersect with F: B ⊄ F."""
    permuted = np.abs(np.asarray(w, dtype=np.float64))[permutation]
    chosen = nmref.nm_mask(permuted, n, m, axis=0)
    kept = np.empty_like(chosen)
    kept[permutation] = chosen
    return kept


def bimask_backward_unpermuted(w, forward, permutation, n, m):
    """Groups the original (unpermuted) output rows: the permutation is ignored."""
    from nmref.bimask import backward_mask

    return backward_mask(w, forward, np.arange(len(permutation)), n, m)


BIMASK_MUTANTS = {
    "bimask_backward_ignores_forward_mask": bimask_backward_ignores_forward_mask,
    "bimask_backward_unpermuted": bimask_backward_unpermuted,
}


# --- BAME-style evolution kernels ---------------------------------------------------------------


def bame_prunes_the_lowest_index_on_ties(w, mask, grad, candidates, n, m):
    """single_swap that prunes the *lowest* kept index among equal utilities."""
    import nmref.bame as bame

    result = bame.block_scores(
        w, mask, grad, candidates, n=n, m=m, lookahead_step=0.5, curvature=1.0
    )
    u = result.utility.reshape(w.shape[0], -1, m)
    kept = mask.reshape(w.shape[0], -1, m)
    proposed = mask.copy().reshape(w.shape[0], -1, m)
    reduction = np.zeros(candidates.shape)
    for r, g in zip(*np.nonzero(candidates), strict=True):
        if n in (0, m):
            continue
        kept_u = np.where(kept[r, g], u[r, g], np.inf)
        pruned_u = np.where(kept[r, g], -np.inf, u[r, g])
        prune, regrow = int(np.argmin(kept_u)), int(np.argmax(pruned_u))
        gain = u[r, g, regrow] - u[r, g, prune]
        if gain > 0:
            reduction[r, g] = gain
            proposed[r, g, prune], proposed[r, g, regrow] = False, True
    return reduction, proposed.reshape(mask.shape), result.utility


def bame_blocks_in_reverse_index_order(scores, candidates, budget):
    """Breaks score ties by the *higher* (row, group) first."""
    flat = np.asarray(scores, dtype=np.float64).ravel()
    eligible = np.flatnonzero(np.asarray(candidates).ravel() & (flat > 0))
    order = eligible[np.lexsort((-eligible, -flat[eligible]))]
    selected = np.zeros(flat.size, dtype=bool)
    selected[order[:budget]] = True
    return selected.reshape(np.shape(scores))


def bame_dense_weight_gradient(x, w, mask, dy, positions):
    """Computes the whole dW (as SR-STE does) instead of the §3.6 positions only."""
    sparse = np.where(mask, w, 0)
    return x @ sparse.T, dy @ sparse, dy.T @ x


def bame_backward_with_dense_weight(x, w, mask, dy, positions):
    """Input gradient with the dense weight: a dense backward GEMM (K2 violated)."""
    sparse = np.where(mask, w, 0)
    return x @ sparse.T, dy @ w, np.where(positions, dy.T @ x, 0)


# --- transposable masks: impl(scores, n, m) -> mask ------------------------------------------


def transposable_greedy_that_under_fills(scores, n, m):
    """Keep-greedy passed off as exact: a maximal b-matching that may keep fewer than n
    in a row or column (xformers/apex ``*_greedy``; 7 of 8 on a tie-free 4x4 tile)."""
    scores = np.asarray(scores)
    mask = np.zeros(scores.shape, dtype=bool)
    for a in range(0, scores.shape[0], m):
        for b in range(0, scores.shape[1], m):
            tile = scores[a : a + m, b : b + m]
            order = np.argsort(-tile.ravel().astype(np.float64), kind="stable")
            rows, columns = np.zeros(m, int), np.zeros(m, int)
            for k in order:
                i, j = divmod(int(k), m)
                if rows[i] < n and columns[j] < n:
                    mask[a + i, b + j] = True
                    rows[i] += 1
                    columns[j] += 1
    return mask


def transposable_rows_only(scores, n, m):
    """A 1-D N:M mask of the rows only: the transposed GEMM's groups are not N:M."""
    return nmref.nm_mask(np.asarray(scores), n, m)
