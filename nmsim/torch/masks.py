"""1-D N:M masks on torch tensors, on any device, equal to :mod:`nmref.masks` bit for bit.

Implements ``specs/conventions.md`` (rules C1-C7) with tensor operations only,
so the same code runs on CPU and CUDA. The rank of an entry is the number of
entries of its group that beat it: larger ones, and equal ones at a lower
index (rule C4). An entry is kept iff its rank is below ``n``. Ranking by
counting comparisons never depends on a sort's tie order, which differs
between ``torch.topk``, unstable sorts and devices.

Scores are compared exactly in their own dtype. bfloat16 and float16 compare
exactly as their float32 upcast would (the upcast is exact and monotone), so a
bfloat16 tensor gets the mask nmref computes from ``x.float()`` (rule C5).
"""

from __future__ import annotations

from typing import Literal

import torch

from nmref._validation import NAN_HAS_NO_RANK, check_axis, check_remainder, raise_nan
from nmref.patterns import Pattern, check_pattern

from .layouts import Layout, from_reduction_matrix, to_reduction_matrix

__all__ = ["SUPPORTED_DTYPES", "is_nm", "magnitude_mask", "nm_mask", "to_magnitude_keys"]

Remainder = Literal["error", "pad"]

#: The tensor dtypes the torch path accepts (``specs/torch.md``; unsigned 16/32/64-bit ones
#: raise ``TypeError``).
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)

# Above this group size, counting (O(m^2) per group) loses to a stable sort.
RANK_COUNT_MAX_M = 32
# Bound on the (groups, m, m) comparison tensor of one chunk, in elements.
_CHUNK_ELEMENTS = 1 << 24


def _as_tensor(scores: object, name: str) -> torch.Tensor:
    if isinstance(scores, torch.Tensor):
        tensor = scores
    else:
        try:
            tensor = torch.as_tensor(scores)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(
                f"{name} must be a torch.Tensor or an array of numbers, got "
                f"{type(scores).__name__} ({error})"
            ) from None
    if tensor.device.type == "meta":
        raise TypeError(
            f"{name} is a meta tensor, which has a shape but no values: a mask depends on "
            "the values, so materialise it on a real device first"
        )
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} must have a bool, (u)int8, int16/32/64 or float16/bfloat16/float32/float64 "
            f"dtype, got dtype={tensor.dtype}"
        )
    return tensor


def check_tensor(value: object, name: str) -> None:
    """``TypeError`` unless ``value`` is a torch tensor (NumPy arrays belong to nmref)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(value).__name__} (nmref takes NumPy "
            "arrays; torch.from_numpy converts one without a copy)"
        )


def check_no_nan(tensor: torch.Tensor, name: str, why: str | None = NAN_HAS_NO_RANK) -> None:
    """Raise nmref's NaN ``ValueError`` (shape and first flat index) if ``tensor`` holds a NaN.

    Shared by every torch algorithm, so that each reports a NaN as its nmref twin does.
    """
    if tensor.is_floating_point() and bool(torch.isnan(tensor).any()):
        first = int(torch.isnan(tensor.reshape(-1)).nonzero()[0, 0])
        raise_nan(tuple(tensor.shape), first, name, why)


def to_magnitude_keys(weights: torch.Tensor) -> torch.Tensor:
    """Keys that order entries by ``|w|`` exactly, without overflow (rule C5).

    Floats map to ``|w|`` (``-0.0`` becomes ``0.0``). Signed integers map to
    ``|w| - 1`` for ``w > 0`` and ``~w = -w - 1`` for ``w <= 0``: the same
    order as ``|w|`` and no overflow at the most negative value (``|-128|``
    does not fit int8, and torch has no ordered uint64). Bools and uint8 are
    returned unchanged.
    """
    check_tensor(weights, "weights")
    if weights.is_floating_point():
        return weights.abs()
    if weights.dtype in (torch.bool, torch.uint8):
        return weights
    return torch.where(weights > 0, weights - 1, torch.bitwise_not(weights))


def _rank_keys(values: torch.Tensor) -> torch.Tensor:
    # bool has no ordered comparison on every backend; -0.0 must equal 0.0 in a sort.
    if values.dtype == torch.bool:
        return values.to(torch.uint8)
    if values.is_floating_point():
        return torch.where(values == 0, torch.zeros_like(values), values)
    return values


def _keep_by_counting(groups: torch.Tensor, keep: int) -> torch.Tensor:
    """``rank < keep`` for every entry of ``groups`` (shape ``(num_groups, m)``)."""
    num_groups, m = groups.shape
    # beats[i, j]: entry j beats entry i. Equal entries at a lower index beat i.
    lower = torch.ones(m, m, dtype=torch.bool, device=groups.device).tril(-1)
    out = torch.empty(groups.shape, dtype=torch.bool, device=groups.device)
    chunk = max(1, _CHUNK_ELEMENTS // (m * m))
    for start in range(0, num_groups, chunk):
        block = groups[start : start + chunk]
        candidate = block.unsqueeze(2)  # (g, i, 1)
        other = block.unsqueeze(1)  # (g, 1, j)
        beats = (other > candidate) | ((other == candidate) & lower)
        out[start : start + chunk] = beats.sum(dim=2) < keep
    return out


def _keep_by_sorting(groups: torch.Tensor, keep: int) -> torch.Tensor:
    """Same result as :func:`_keep_by_counting` by a stable descending sort (large m)."""
    # A stable descending sort keeps equal keys in index order: lower index first.
    order = torch.sort(groups, dim=1, descending=True, stable=True).indices
    out = torch.zeros(groups.shape, dtype=torch.bool, device=groups.device)
    return out.scatter_(1, order[:, :keep], True)


def _use_counting(groups: torch.Tensor) -> bool:
    """Counting on accelerators (exact by construction, whatever a device's sort does with
    ties); the stable sort on the CPU, where it is about 3x faster and provably stable."""
    return groups.device.type != "cpu" and groups.shape[1] <= RANK_COUNT_MAX_M


def _keep_groups(groups: torch.Tensor, keep: int) -> torch.Tensor:
    if _use_counting(groups):
        return _keep_by_counting(groups, keep)
    return _keep_by_sorting(groups, keep)


def _mask_along_last(keys: torch.Tensor, pattern: Pattern) -> torch.Tensor:
    """N:M mask of ``keys`` (already validated and NaN-free) along the last axis."""
    length = keys.shape[-1]
    mask = torch.zeros(keys.shape, dtype=torch.bool, device=keys.device)
    if keys.numel() == 0:
        return mask
    full = (length // pattern.m) * pattern.m
    if full:
        groups = keys[..., :full].reshape(-1, pattern.m)
        mask[..., :full] = _keep_groups(groups, pattern.n).reshape(*keys.shape[:-1], full)
    if full < length:
        # remainder="pad": the partial last group of r entries keeps min(n, r).
        tail = keys[..., full:].reshape(-1, length - full)
        kept = _keep_groups(tail, min(pattern.n, length - full))
        mask[..., full:] = kept.reshape(*keys.shape[:-1], length - full)
    return mask


def nm_mask(
    scores: torch.Tensor, n: int, m: int, *, axis: int = -1, remainder: Remainder = "error"
) -> torch.Tensor:
    """Keep the ``n`` highest scores in every group of ``m`` along ``axis`` (torch, any device).

    Same contract, errors and messages as :func:`nmref.nm_mask`, and the same
    mask bit for bit: ties go to the lower index, ``-0.0 == 0.0``, ``+inf``
    ranks highest, NaN raises ``ValueError``.

    Parameters
    ----------
    scores : torch.Tensor (or array_like)
        bool, uint8, int8/16/32/64, float16, bfloat16, float32 or float64.
    n, m : int
        ``n`` kept of every ``m``.
    axis : int, default -1
        The grouped axis.
    remainder : {"error", "pad"}, default "error"
        Policy for a grouped length that is not a multiple of ``m`` (rule C7).

    Returns
    -------
    torch.Tensor of bool
        Same shape and device as ``scores``; ``True`` = kept.

    Notes
    -----
    Complexity: on accelerators, O(size * m) work by counting comparisons
    for ``m <= 32`` (chunks of at most 2^24 comparisons) and a stable sort
    per group above that; on the CPU, a stable sort per group (O(size log m)).
    Both paths are tested equal on every dtype. No host synchronisation
    except the NaN check.

    Examples
    --------
    >>> nm_mask(torch.tensor([[3.0, 1.0, 3.0, 3.0]]), 2, 4).int()
    tensor([[1, 0, 1, 0]], dtype=torch.int32)
    """
    pattern = check_pattern(n, m)
    tensor = _as_tensor(scores, "scores")
    if tensor.dim() == 0:
        raise ValueError("scores must have at least one dimension")
    axis = check_axis(axis, tensor.dim())
    check_remainder(tensor.shape[axis], pattern.m, axis, remainder)
    check_no_nan(tensor, "scores")
    keys = _rank_keys(tensor.movedim(axis, -1))
    return _mask_along_last(keys, pattern).movedim(-1, axis)


def magnitude_mask(
    weights: torch.Tensor,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    remainder: Remainder = "error",
) -> torch.Tensor:
    """N:M magnitude mask of a Linear or convolution weight, grouped by its layout (torch).

    Same contract as :func:`nmref.magnitude_mask`: keeps the ``n`` entries of
    largest ``|w|`` per group of ``m`` along the layout's reduction axis;
    ``+-inf`` have the largest magnitude; integer magnitudes never overflow.

    Returns
    -------
    torch.Tensor of bool, same shape and device as ``weights``.

    Notes
    -----
    Complexity: O(size * m) for ``m <= 32``.

    Examples
    --------
    >>> magnitude_mask(torch.tensor([[1.0, -4.0, 3.0, -2.0]]), 2, 4).int()
    tensor([[0, 1, 1, 0]], dtype=torch.int32)
    """
    pattern = check_pattern(n, m)
    tensor = _as_tensor(weights, "weights")
    matrix = to_reduction_matrix(tensor, layout)
    check_remainder(matrix.shape[-1], pattern.m, 1, remainder)
    check_no_nan(tensor, "weights")
    keys = _rank_keys(to_magnitude_keys(matrix))
    return from_reduction_matrix(_mask_along_last(keys, pattern), tuple(tensor.shape), layout)


def is_nm(
    mask: torch.Tensor,
    n: int,
    m: int,
    *,
    axis: int = -1,
    exact: bool = True,
    remainder: Remainder = "error",
) -> bool:
    """Whether every group of ``m`` along ``axis`` keeps ``n`` (or at most ``n``) entries.

    Torch twin of :func:`nmref.is_nm`; nonzero entries count as kept.
    """
    pattern = check_pattern(n, m)
    tensor = _as_tensor(mask, "mask")
    if tensor.dim() == 0:
        raise ValueError("mask must have at least one dimension")
    axis = check_axis(axis, tensor.dim())
    length = tensor.shape[axis]
    check_remainder(length, pattern.m, axis, remainder)
    kept = (tensor != 0).movedim(axis, -1)
    num_groups = -(-length // pattern.m)
    padded = torch.zeros(
        (*kept.shape[:-1], num_groups * pattern.m), dtype=torch.int64, device=tensor.device
    )
    padded[..., :length] = kept
    counts = padded.reshape(*kept.shape[:-1], num_groups, pattern.m).sum(dim=-1)
    required = torch.full((num_groups,), pattern.n, dtype=torch.int64, device=tensor.device)
    if length % pattern.m:
        required[-1] = min(pattern.n, length % pattern.m)
    bad = counts != required if exact else counts > pattern.n
    return not bool(bad.any())
