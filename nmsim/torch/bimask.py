"""Bi-Mask on the torch path: backward masks, permutation scores and search, equal to
:mod:`nmref.bimask` bit for bit (``specs/bimask.md``).

Zhang et al., "Bi-directional Masks for Efficient N:M Sparse Training", ICML
2023, Sec. 3. The forward mask ``F`` is :func:`nmsim.torch.magnitude_mask`; the
backward mask ``B`` keeps, in every block of ``m`` consecutive *permuted*
output rows of one column, the ``n`` forward survivors of largest ``|w|``
(ties: lower permuted position); a permutation is scored by the number of
weights ``B`` keeps (``"kept"``, the code) or of blocks with at most ``n``
survivors (``"eligible"``, the paper's wording). The authors' flattened
grouping across columns (``straddle=True`` in nmref) is not provided here.
"""

from __future__ import annotations

import numpy as np
import torch

from nmref.bimask.inputs import check_backward_groups
from nmref.bimask.random_search import PermutationSearch, evaluated_permutations
from nmref.bimask.settings import check_criterion, check_rank
from nmref.layouts import Layout, default_layout
from nmref.patterns import check_pattern

from .layouts import from_reduction_matrix, to_reduction_matrix
from .masks import check_no_nan, nm_mask

__all__ = ["backward_mask", "score_permutations", "search_permutation"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Bound on the gathered (candidates, out, width) survivor tensor of one chunk, in bytes.
_CHUNK_BYTES = 1 << 26


def _as_weight(weight: torch.Tensor, name: str = "weight") -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        weight = torch.as_tensor(weight)
    if weight.dtype not in _FLOATS:
        raise TypeError(f"{name} must be float16/bfloat16/float32/float64, got {weight.dtype}")
    if weight.dim() < 2:
        raise ValueError(f"{name} must have ndim >= 2, got {weight.dim()}")
    check_no_nan(weight, name)
    return weight


def _as_survivors(mask: torch.Tensor, shape: tuple[int, ...], device) -> torch.Tensor:
    mask = torch.as_tensor(mask, device=device)
    if tuple(mask.shape) != shape:
        raise ValueError(f"forward_mask has shape {tuple(mask.shape)}, expected {shape}")
    if mask.dtype != torch.bool:
        if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("forward_mask must hold only 0 and 1 (or be bool)")
        mask = mask != 0
    return mask


def _to_blocks(tensor: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Weight-shaped tensor -> ``(taps, out, reduction)`` (as nmref.bimask)."""
    matrix = to_reduction_matrix(tensor, layout)
    taps = int(np.prod(tensor.shape[2:], dtype=np.int64)) if layout == "channels" else 1
    return matrix.reshape(taps, tensor.shape[0], matrix.shape[1])


def _check_permutations(permutations: torch.Tensor, size: int, name: str) -> torch.Tensor:
    if permutations.dtype.is_floating_point or permutations.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer array, got dtype={permutations.dtype}")
    permutations = permutations.to(torch.int64)
    expected = torch.arange(size, device=permutations.device)
    if permutations.shape[-1:] != (size,) or not bool(
        (torch.sort(permutations, dim=-1).values == expected).all()
    ):
        raise ValueError(f"{name} must be permutation(s) of range({size})")
    return permutations


def backward_mask(
    weight: torch.Tensor,
    forward_mask: torch.Tensor,
    permutation: torch.Tensor,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    rank: str = "survivors",
) -> torch.Tensor:
    """Bi-Mask backward mask ``B`` (torch twin of :func:`nmref.bimask.backward_mask`).

    ``B ⊆ F``; N:M (at most ``n``) along permuted output rows; every block
    keeps ``min(nnz_F(block), n)`` (``rank="survivors"``). Complexity
    O(size * m), all tensor operations.
    """
    pattern = check_pattern(n, m)
    check_rank(rank)
    weight = _as_weight(weight)
    shape = tuple(weight.shape)
    resolved = default_layout(len(shape)) if layout is None else layout
    survivors = _to_blocks(_as_survivors(forward_mask, shape, weight.device), resolved)
    order = _check_permutations(
        torch.as_tensor(permutation, device=weight.device), shape[0], "permutation"
    )
    check_backward_groups(shape[0], weight.numel(), pattern, False)
    magnitudes = _to_blocks(weight, resolved).abs()
    survivors_permuted = survivors[:, order, :]
    magnitudes_permuted = magnitudes[:, order, :]
    floor = -torch.inf if rank == "survivors" else 0.0
    keys = torch.where(
        survivors_permuted, magnitudes_permuted, torch.full_like(magnitudes_permuted, floor)
    )
    chosen = nm_mask(keys.movedim(1, -1), pattern.n, pattern.m).movedim(-1, 1)
    kept_permuted = chosen & survivors_permuted
    kept = torch.empty_like(kept_permuted)
    kept[:, order, :] = kept_permuted
    taps, out_channels, width = kept.shape
    return from_reduction_matrix(kept.reshape(taps * out_channels, width), shape, resolved)


def score_permutations(
    forward_mask: torch.Tensor,
    permutations: torch.Tensor,
    n: int,
    m: int,
    *,
    criterion: str = "kept",
    layout: Layout | None = None,
) -> torch.Tensor:
    """Scores of many candidate permutations at once (torch twin of
    :func:`nmref.bimask.score_permutations`), batched over candidates.

    Returns an int64 tensor of shape ``(num_candidates,)`` on the mask's
    device. Complexity O(num_candidates * size) additions, in chunks of at
    most 64 MiB of gathered survivors.
    """
    pattern = check_pattern(n, m)
    check_criterion(criterion)
    mask = torch.as_tensor(forward_mask)
    if mask.dim() < 2:
        raise ValueError(f"forward_mask must have ndim >= 2, got {mask.dim()}")
    shape = tuple(mask.shape)
    resolved = default_layout(len(shape)) if layout is None else layout
    survivors = _to_blocks(_as_survivors(mask, shape, mask.device), resolved)
    out_channels = shape[0]
    candidates = torch.as_tensor(permutations, device=mask.device)
    if candidates.dim() != 2 or candidates.shape[1] != out_channels:
        raise ValueError(
            f"permutations must have shape (num_candidates, {out_channels}), "
            f"got {tuple(candidates.shape)}"
        )
    candidates = _check_permutations(candidates, out_channels, "permutations")
    check_backward_groups(out_channels, mask.numel(), pattern, False)
    # One row per output channel: (out, taps * reduction) survivor bytes.
    rows = survivors.movedim(1, 0).reshape(out_channels, -1).to(torch.uint8)
    scores = torch.zeros(candidates.shape[0], dtype=torch.int64, device=mask.device)
    if rows.numel() == 0 or candidates.shape[0] == 0:
        return scores
    chunk = max(1, _CHUNK_BYTES // rows.numel())
    for start in range(0, candidates.shape[0], chunk):
        picked = candidates[start : start + chunk]  # (k, out)
        # Survivors per block: add the m permuted rows of every block, slot by slot
        # (int16 counts are exact for m < 2**15; each slot is one gather of whole rows).
        slots = picked.reshape(picked.shape[0], -1, pattern.m)
        counts = rows[slots[:, :, 0]].to(torch.int16)
        for slot in range(1, pattern.m):
            counts += rows[slots[:, :, slot]]
        if criterion == "kept":
            values = counts.clamp(max=pattern.n).sum(dim=(1, 2), dtype=torch.int64)
        else:
            values = (counts <= pattern.n).sum(dim=(1, 2), dtype=torch.int64)
        scores[start : start + chunk] = values
    return scores


def search_permutation(
    weight: torch.Tensor,
    n: int,
    m: int,
    *,
    candidates: int | np.ndarray | torch.Tensor = 100,
    criterion: str = "kept",
    include_identity: bool = False,
    rng: np.random.Generator | int | None = None,
    layout: Layout | None = None,
) -> PermutationSearch:
    """Bi-Mask's search: the first best of ``K`` random permutations, scored on the device.

    Candidates are drawn exactly as :func:`nmref.bimask.search_permutation`
    draws them (``rng.permutation(out)`` in order, on the host), so the same
    ``rng`` state gives the same result on every device. Returns nmref's
    :class:`~nmref.bimask.PermutationSearch` (NumPy arrays).
    """
    check_pattern(n, m)
    check_criterion(criterion)
    weight = _as_weight(weight)
    if isinstance(candidates, torch.Tensor):
        candidates = candidates.cpu()
        if candidates.dtype == torch.bfloat16:  # no NumPy twin; still refused as not integer
            candidates = candidates.float()
        candidates = candidates.numpy()
    evaluated = evaluated_permutations(candidates, weight.shape[0], rng, include_identity)

    from .masks import magnitude_mask

    forward = magnitude_mask(weight, n, m, layout=layout)
    scores = score_permutations(
        forward,
        torch.from_numpy(evaluated).to(weight.device),
        n,
        m,
        criterion=criterion,
        layout=layout,
    )
    best = int(torch.argmax(scores))  # the first maximiser, as the code's strict ">"
    scores_host = scores.cpu().numpy()
    return PermutationSearch(
        evaluated[best].copy(), int(scores_host[best]), evaluated, scores_host, best, criterion
    )
