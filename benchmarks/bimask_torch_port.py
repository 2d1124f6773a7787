"""A straightforward torch port of the Bi-Mask authors' per-candidate procedure.

Used only as a **peer** by ``benchmarks/bench_bimask.py`` (speed baseline) and
``tests/test_bimask_torch.py`` (cross-check). It follows the steps of
``get_best_permutation`` / ``get_n_m_backward_matrix`` in ``zyxxmu/Bi-Mask``
(commit e63cd37), written anew: for every candidate it permutes the rows,
sorts every backward group and sums the mask. Groups are taken from the
row-major flattened ``[out, K]`` weight (forward) and ``[K, out]`` weight
(backward), as in the code. Requires torch, so it lives here and not in ``nmref``
(which never imports torch); the test loads it by path.
"""

from __future__ import annotations

import torch


def _keep_largest(magnitudes: torch.Tensor, n: int, m: int, stable: bool) -> torch.Tensor:
    """0/1 float mask keeping the n largest of every m consecutive (flattened) entries."""
    groups = magnitudes.reshape(-1, m)
    dropped = torch.argsort(groups, dim=1, stable=stable)[:, : m - n]
    return torch.ones_like(groups).scatter_(1, dropped, 0.0).reshape(magnitudes.shape)


def code_forward_mask(
    weight: torch.Tensor, n: int, m: int, *, stable: bool = False
) -> torch.Tensor:
    """Forward mask of a ``[out, K]`` weight, groups along the flattened rows."""
    return _keep_largest(weight.detach().abs(), n, m, stable)


def code_permuted_backward_mask(
    weight: torch.Tensor,
    forward: torch.Tensor,
    permutation: torch.Tensor,
    n: int,
    m: int,
    *,
    stable: bool = False,
) -> torch.Tensor:
    """Backward mask in permuted row order (what the code sums per candidate)."""
    forward_permuted = forward[permutation]
    masked = weight.detach()[permutation] * forward_permuted
    by_column = _keep_largest(masked.t().abs().contiguous(), n, m, stable).t()
    return forward_permuted * by_column


def code_search(
    weight: torch.Tensor, n: int, m: int, candidates: torch.Tensor, *, stable: bool = False
) -> tuple[torch.Tensor, list[float]]:
    """Best of the given candidates by backward-kept count; identity if none scores > 0."""
    forward = code_forward_mask(weight, n, m, stable=stable)
    best = torch.arange(weight.shape[0])
    best_score = 0.0
    scores = []
    for permutation in candidates:
        score = float(
            code_permuted_backward_mask(weight, forward, permutation, n, m, stable=stable).sum()
        )
        scores.append(score)
        if score > best_score:
            best, best_score = permutation, score
    return best, scores
