"""Transposable N:M masks on the torch path: batched brute force and greedy, on any device.

Follows ``specs/transposable.md`` of nmref (Hubara et al., "Accelerated Sparse Neural
Training: A Provable and Efficient Method to Find N:M Transposable Masks", NeurIPS
2021, Sec. 4): every row and every column of every aligned ``m x m`` tile keeps exactly
``n`` entries (keep form of the greedy: at most ``n``), maximising the kept score sum.

* ``"brute"`` / ``"exact"`` (``m <= 5``): every tile is scored against every valid pattern
  at once (one matrix product), and the **first** pattern of maximal sum in canonical
  order wins: the lexicographically greatest row-major keep vector among the optima
  (spec T3). Sums are exact: each tile is scaled by a power of two to integer "units"
  (spec T5) below ``2**(53 - ceil(log2(m*m)))``, so float64 products and sums of units
  are exact in any order; tiles whose units need more bits (a huge exponent spread,
  most genuine float64 inputs) are solved exactly on the host with Python integers.
* ``"greedy"`` (keep form) and ``"greedy-prune"`` (the paper's Sec. 4.2 prune form):
  ``m*m`` lockstep steps over all tiles; the scan order is a stable descending sort (ties:
  lower flat index first), so only comparisons are involved.

The exact solver for ``m > 5`` (min-cost flow) is not ported; use
``nmref.transposable`` on the host.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import torch

from nmref.patterns import check_pattern

from .masks import _check_no_nan

__all__ = [
    "BRUTE_MAX_M",
    "is_transposable",
    "transposable_mask",
    "transposable_patterns",
]

BRUTE_MAX_M = 5
METHODS = ("exact", "brute", "greedy", "greedy-prune")
_SUPPORTED = (
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


@functools.lru_cache(maxsize=16)
def _pattern_table(n: int, m: int) -> np.ndarray:
    """Valid tile patterns, canonical order (descending row-major keep bits), ``(K, m*m)``."""
    rows = []
    for choice in itertools.combinations(range(m), n):  # lexicographic = descending bits
        row = np.zeros(m, dtype=bool)
        row[list(choice)] = True
        rows.append(row)
    table = [
        np.concatenate(combo)
        for combo in itertools.product(rows, repeat=m)
        if (np.sum(combo, axis=0) == n).all()
    ]
    return np.array(table, dtype=bool).reshape(-1, m * m)


def transposable_patterns(n: int, m: int) -> torch.Tensor:
    """Every valid transposable ``m x m`` pattern in canonical order, ``(K, m, m)`` bool.

    ``K(4, 2) = 90``; the first pattern keeps the lowest flat indices. ``m <= 5``.
    """
    pattern = check_pattern(n, m)
    if pattern.m > BRUTE_MAX_M:
        raise ValueError(f"m={pattern.m} is too large to enumerate patterns (needs m <= 5)")
    return torch.from_numpy(_pattern_table(pattern.n, pattern.m)).reshape(-1, m, m)


def _check_scores(scores: torch.Tensor, m: int, name: str = "scores") -> torch.Tensor:
    tensor = scores if isinstance(scores, torch.Tensor) else torch.as_tensor(scores)
    if tensor.dtype not in _SUPPORTED:
        raise TypeError(f"{name} must be bool, integer or float, got dtype={tensor.dtype}")
    if tensor.dim() != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(tensor.shape)}")
    rows, columns = tensor.shape
    if rows % m or columns % m:
        raise ValueError(
            f"{name} shape {tuple(tensor.shape)}: both dimensions must be multiples of m={m} "
            "(tiles are m x m)"
        )
    _check_no_nan(tensor, name)
    if tensor.is_floating_point() and bool(torch.isinf(tensor).any()):
        first = int(torch.isinf(tensor.reshape(-1)).nonzero()[0, 0])
        index = tuple(int(i) for i in np.unravel_index(first, tuple(tensor.shape)))
        raise ValueError(f"{name} contains inf (first at index {index}); the objective is a sum")
    return tensor


def _to_tiles(tensor: torch.Tensor, m: int) -> torch.Tensor:
    rows, columns = tensor.shape
    return tensor.reshape(rows // m, m, columns // m, m).permute(0, 2, 1, 3).reshape(-1, m * m)


def _from_tiles(tiles: torch.Tensor, shape: tuple[int, int], m: int) -> torch.Tensor:
    rows, columns = shape
    return tiles.reshape(rows // m, columns // m, m, m).permute(0, 2, 1, 3).reshape(rows, columns)


def _exact_units(tiles: torch.Tensor, max_bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer units (as float64) of every tile and a flag for tiles that fit ``max_bits``.

    Units are ``x / 2**L`` with ``L`` the tile's lowest set bit exponent: exact integers.
    """
    if not tiles.is_floating_point():
        values = tiles.to(torch.int64)
        fits = (values.abs() < (1 << max_bits)).all(dim=1) & (values != -(2**63)).all(dim=1)
        return values.to(torch.float64) * fits[:, None], fits
    values = tiles.to(torch.float64)  # exact for every float dtype
    mantissa, exponent = torch.frexp(
        values
    )  # |x| = |mantissa| * 2**exponent, 0.5 <= |mantissa| < 1
    integer = (mantissa * 2.0**53).to(torch.int64)  # exact: 53-bit significand
    lowest = integer & -integer
    trailing = torch.frexp(lowest.to(torch.float64)).exponent - 1  # exact: a power of two
    nonzero = values != 0
    lsb = torch.where(nonzero, exponent - 53 + trailing, torch.iinfo(torch.int32).max)
    floor = lsb.min(dim=1, keepdim=True).values
    top = torch.where(nonzero, exponent, torch.iinfo(torch.int32).min).max(dim=1, keepdim=True)
    span = top.values - floor
    fits = ~nonzero.any(dim=1) | (span[:, 0] <= max_bits)
    safe_floor = torch.where(fits[:, None] & nonzero.any(dim=1, keepdim=True), floor, 0)
    units = torch.ldexp(values, -safe_floor.to(torch.float64))
    return torch.where(fits[:, None], units, 0.0), fits


def _host_brute(tile: list, patterns: np.ndarray) -> int:
    """Index of the first maximal pattern, exact rational sums (the slow, exact path)."""
    values = [Fraction(v) if isinstance(v, float) else int(v) for v in tile]
    best, best_index = None, 0
    for index, pattern in enumerate(patterns):
        total = sum((values[k] for k in np.flatnonzero(pattern)), start=Fraction(0))
        if best is None or total > best:
            best, best_index = total, index
    return best_index


def _brute(tiles: torch.Tensor, n: int, m: int) -> torch.Tensor:
    table = _pattern_table(n, m)
    patterns = torch.from_numpy(table).to(tiles.device)
    if tiles.shape[0] == 0:
        return torch.zeros(tiles.shape, dtype=torch.bool, device=tiles.device)
    max_bits = 53 - math.ceil(math.log2(max(m * m, 2)))
    units, fits = _exact_units(tiles, max_bits)
    # Integer units below 2**max_bits: every product with 0/1 and every sum of at most
    # m*m of them is exact in float64, in any summation order.
    sums = units @ patterns.to(torch.float64).T
    best = torch.argmax(sums, dim=1)  # the first maximum: canonical order
    slow = (~fits).nonzero()[:, 0].tolist()
    if slow:
        host = tiles[slow].cpu()
        host_values = host.tolist() if host.is_floating_point() else host.to(torch.int64).tolist()
        picks = [_host_brute(tile, table) for tile in host_values]
        best[slow] = torch.tensor(picks, dtype=best.dtype, device=best.device)
    return patterns[best]


def _greedy(tiles: torch.Tensor, n: int, m: int, prune_form: bool) -> torch.Tensor:
    keys = tiles.to(torch.uint8) if tiles.dtype == torch.bool else tiles
    if keys.is_floating_point():
        keys = torch.where(keys == 0, torch.zeros_like(keys), keys)  # -0.0 ties 0.0
    # Descending score, lower flat index first among equals.
    order = torch.sort(keys, dim=1, descending=True, stable=True).indices
    count = tiles.shape[0]
    device = tiles.device
    # Flat views: one gather and one scatter per step instead of 2-D advanced indexing.
    row_count = torch.zeros(count * m, dtype=torch.int64, device=device)
    column_count = torch.zeros(count * m, dtype=torch.int64, device=device)
    selected = torch.zeros(count * m * m, dtype=torch.bool, device=device)
    base = torch.arange(count, device=device) * m
    order = order + (base * m)[:, None]  # flat entry indices into `selected`
    steps = range(m * m - 1, -1, -1) if prune_form else range(m * m)
    limit = m - n if prune_form else n
    for step in steps:
        entry = order[:, step]
        local = entry - base * m
        row_slot = base + local // m
        column_slot = base + local % m
        rows_used = row_count[row_slot]
        columns_used = column_count[column_slot]
        if prune_form:  # prune while the row or the column has pruned fewer than m - n
            take = (rows_used < limit) | (columns_used < limit)
        else:  # keep while the row and the column keep fewer than n
            take = (rows_used < limit) & (columns_used < limit)
        selected[entry] = take
        row_count[row_slot] = rows_used + take
        column_count[column_slot] = columns_used + take
    selected = selected.reshape(count, m * m)
    return ~selected if prune_form else selected


def transposable_mask(
    scores: torch.Tensor, n: int, m: int, *, method: str = "exact"
) -> torch.Tensor:
    """Transposable N:M mask of a 2-D score matrix (tiles ``m x m``), on any device.

    Parameters
    ----------
    scores : torch.Tensor, shape (R, C), R and C multiples of ``m``
        bool, integer or float scores (``|w|`` for magnitude pruning), finite.
    n, m : int
    method : {"exact", "brute", "greedy", "greedy-prune"}
        ``"exact"`` and ``"brute"`` are the canonical optimum (``m <= 5``); the greedy
        forms are the 2-approximations of spec T4.

    Returns
    -------
    torch.Tensor of bool, shape (R, C)

    Notes
    -----
    Complexity: brute O(K(m, n) * m^2) per tile in one batched product (K(4, 2) = 90);
    greedy O(m^2 log m) per tile in ``m^2`` lockstep steps.
    """
    pattern = check_pattern(n, m)
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {METHODS}")
    tensor = _check_scores(scores, pattern.m)
    tiles = _to_tiles(tensor, pattern.m)
    if method in ("exact", "brute"):
        if pattern.m > BRUTE_MAX_M:
            raise ValueError(
                f"method={method!r} on the torch path needs m <= {BRUTE_MAX_M}; "
                "use nmref.transposable for larger m"
            )
        kept = _brute(tiles, pattern.n, pattern.m)
    else:
        kept = _greedy(tiles, pattern.n, pattern.m, prune_form=method == "greedy-prune")
    return _from_tiles(kept, tuple(tensor.shape), pattern.m)


def is_transposable(mask: torch.Tensor, n: int, m: int, *, exact: bool = True) -> bool:
    """Whether every row and column of every ``m x m`` tile keeps ``n`` (at most ``n``)."""
    pattern = check_pattern(n, m)
    tensor = torch.as_tensor(mask)
    if tensor.dim() != 2 or tensor.shape[0] % m or tensor.shape[1] % m:
        raise ValueError(f"mask shape {tuple(tensor.shape)} must be 2-D with multiples of m={m}")
    tiles = (_to_tiles(tensor != 0, pattern.m)).reshape(-1, m, m).to(torch.int64)
    counts = torch.cat([tiles.sum(dim=1), tiles.sum(dim=2)], dim=1)
    return bool((counts == pattern.n).all() if exact else (counts <= pattern.n).all())
