"""Transposable N:M masks on the torch path: exact (batched brute force, lockstep min-cost
flow) and greedy, on any device, equal to ``nmref.transposable`` bit for bit.

Follows ``specs/transposable.md`` of nmref (Hubara et al., "Accelerated Sparse Neural
Training: A Provable and Efficient Method to Find N:M Transposable Masks", NeurIPS
2021, Sec. 4): every row and every column of every aligned ``m x m`` tile keeps exactly
``n`` entries (keep form of the greedy: at most ``n``), maximising the kept score sum.

* ``"brute"`` (``m <= 5``; ``"exact"`` for ``m <= 4``): every tile is scored against
  every valid pattern at once (one matrix product), and the **first** pattern of maximal
  sum in canonical order wins: the lexicographically greatest row-major keep vector among the optima
  (spec T3). Sums are exact: each tile is scaled by a power of two to integer "units"
  (spec T5) below ``2**(53 - ceil(log2(m*m)))``, so float64 products and sums of units
  are exact in any order; tiles whose units need more bits (a huge exponent spread,
  most genuine float64 inputs) are solved exactly on the host with Python integers.
* ``"greedy"`` (keep form) and ``"greedy-prune"`` (the paper's Sec. 4.2 prune form):
  ``m*m`` lockstep steps over all tiles; the scan order is a stable descending sort (ties:
  lower flat index first), so only comparisons are involved.
* ``"exact"`` for ``m > 4``: min-cost flow by successive shortest paths, run in lockstep
  over all tiles with tensor operations (Bellman-Ford on each tile's tiny residual graph),
  then the canonical tie pass of spec T3 (row-major, switch an entry on iff a zero-cost
  alternating cycle through it exists among later entries). Units must fit
  ``52 - ceil(log2(2m + 2))`` bits (47 for m = 8) so that every path sum is exact; other
  tiles raise ``ValueError`` (nmref's host path handles them). O(n m^4 + m^5) per tile.
* ``method="exact"`` on a CUDA tensor (``m <= 64``, both fills), where Numba can run CUDA
  kernels (the ``cuda`` extra): nmref's CUDA kernel (``backend="cuda"``, one thread per
  tile) reads the tensor through ``__cuda_array_interface__``, without a copy to the host
  (bfloat16 is upcast to float32 on the device, exactly), and the mask stays on the
  device. Elsewhere the solvers below run, with the same mask.
* ``fill="at_most"`` (spec T1: at most ``n`` per tile row and column, what sparse tensor
  cores accept), ``method="exact"`` or ``"brute"``: the scores go to the host and
  ``nmref.transposable.transposable_mask(..., fill="at_most")`` (its Numba kernel, or brute
  force for ``m <= 4``) answers; the mask comes back on the scores' device. Same canonical
  mask as nmref by construction; bfloat16 reaches the host as float32, which holds it exactly.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import torch

from nmref.patterns import check_pattern

from .masks import SUPPORTED_DTYPES, check_no_nan

__all__ = [
    "BRUTE_MAX_M",
    "is_transposable",
    "transposable_mask",
    "transposable_patterns",
]

BRUTE_MAX_M = 5
INF = float("inf")
# Tile entries per chunk of the flow solver (about 16 float64 temporaries of this size).
_FLOW_CHUNK_ENTRIES = 1 << 26
METHODS = ("exact", "brute", "greedy", "greedy-prune")
FILLS = ("exact", "at_most")


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
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} must be bool, integer or float, got dtype={tensor.dtype}")
    if tensor.dim() != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(tensor.shape)}")
    rows, columns = tensor.shape
    if rows % m or columns % m:
        raise ValueError(
            f"{name} shape {tuple(tensor.shape)}: both dimensions must be multiples of m={m} "
            "(tiles are m x m)"
        )
    check_no_nan(tensor, name)
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
    floor = lsb.amin(dim=1, keepdim=True)
    top = torch.where(nonzero, exponent, torch.iinfo(torch.int32).min).amax(dim=1, keepdim=True)
    span = top - floor
    fits = ~nonzero.any(dim=1) | (span[:, 0] <= max_bits)
    safe_floor = torch.where(fits[:, None] & nonzero.any(dim=1, keepdim=True), floor, 0)
    # Two halves: 2**1074 (a subnormal tile's scale) overflows float64, its square root does not.
    half = torch.div(safe_floor, 2, rounding_mode="floor")
    units = torch.ldexp(
        torch.ldexp(values, -half.to(torch.float64)), -(safe_floor - half).to(torch.float64)
    )
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


def _exact_by_flow(tiles: torch.Tensor, n: int, m: int) -> torch.Tensor:
    if tiles.shape[0] == 0:
        return torch.zeros(tiles.shape, dtype=torch.bool, device=tiles.device)
    # Paths have at most 2m + 1 arcs: keep every sum of that many units exact in float64.
    max_bits = 52 - math.ceil(math.log2(2 * m + 2))
    units, fits = _exact_units(tiles, max_bits)
    if not bool(fits.all()):
        first = int((~fits).nonzero()[0, 0])
        raise ValueError(
            f"tile {first} (row-major over tiles) needs more than {max_bits} bits of exact "
            "integer units (a huge exponent spread, typical of float64 noise): pass float32 "
            "scores, or use nmref.transposable, whose host path is exact for any input"
        )
    units = units.reshape(-1, m, m)
    # Chunks of tiles bound the (tiles, m, m) float64 temporaries of Bellman-Ford.
    chunk = max(1, _FLOW_CHUNK_ENTRIES // (m * m))
    parts = [_flow(units[start : start + chunk], n, m) for start in range(0, len(units), chunk)]
    return torch.cat(parts).reshape(-1, m * m)


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


def _min_and_first_index(values: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``values.min(dim)``: the minimum and the index of its first occurrence.

    ``amin`` and ``argmin`` (first occurrence too) rather than ``min(dim)``: on the CPU,
    ``min(dim)`` opens a parallel region even for a (tiles, 8, 8) tensor, and on a busy
    2-core machine each call took 25 ms against 10 us (``nmsim verify``'s exact rows ran
    400 s; profiled in issue 37).
    """
    return values.amin(dim=dim), values.argmin(dim=dim)


def _bellman_ford(units, kept, allowed, dist_r0, rounds):
    """Lockstep shortest paths on the residual graph of every tile.

    Arcs: r_i -> c_j for dropped allowed entries (cost -u_ij), c_j -> r_i for kept allowed
    entries (cost +u_ij). dist_r0: (T, m) initial row distances (inf = not a start).
    Returns dist_r, dist_c, pred_r (column index or -1), pred_c (row index or -1).
    """
    T, m, _ = units.shape
    inf = torch.tensor(INF, dtype=units.dtype, device=units.device)
    cost_rc = torch.where(~kept & allowed, -units, inf)  # [t, i, j]
    cost_cr = torch.where(kept & allowed, units, inf)  # [t, i, j]: arc c_j -> r_i
    dist_r = dist_r0.clone()
    dist_c = torch.full((T, m), INF, dtype=units.dtype, device=units.device)
    pred_r = torch.full((T, m), -1, dtype=torch.int64, device=units.device)
    pred_c = torch.full((T, m), -1, dtype=torch.int64, device=units.device)
    for _ in range(rounds):
        via = dist_r[:, :, None] + cost_rc  # (T, i, j)
        best, arg = _min_and_first_index(via, 1)  # over i
        better = best < dist_c
        dist_c = torch.where(better, best, dist_c)
        pred_c = torch.where(better, arg, pred_c)
        via = dist_c[:, None, :] + cost_cr  # (T, i, j)
        best, arg = _min_and_first_index(via, 2)  # over j
        better = best < dist_r
        dist_r = torch.where(better, best, dist_r)
        pred_r = torch.where(better, arg, pred_r)
    return dist_r, dist_c, pred_r, pred_c


def _flip_path(kept, pred_r, pred_c, end_column, active, m):
    """Walk back from column `end_column` flipping entries; returns the start row."""
    T = kept.shape[0]
    tiles = torch.arange(T, device=kept.device)
    column = end_column.clone()
    start = torch.full((T,), -1, dtype=torch.int64, device=kept.device)
    walking = active.clone()
    for _ in range(2 * m + 2):
        if not bool(walking.any()):
            break
        row = pred_c[tiles, column]
        kept[tiles[walking], row[walking], column[walking]] = True
        previous = pred_r[tiles, row]
        done = walking & (previous < 0)
        start = torch.where(done, row, start)
        cont = walking & (previous >= 0)
        kept[tiles[cont], row[cont], previous[cont]] = False
        column = torch.where(cont, previous, column)
        walking = cont
    return start


def _flow(units: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """Canonical optimum of every tile by successive shortest paths, in lockstep.

    ``units``: ``(T, m, m)`` float64 holding exact integers small enough that every path
    sum is exact. Phase 1 pushes ``n*m`` units of flow along shortest augmenting paths
    (Bellman-Ford on the residual graph: dropped entries are arcs row -> column of cost
    ``-u``, kept entries arcs column -> row of cost ``+u``); the flow is then optimal.
    Phase 2 (spec T3) scans entries in row-major order and switches a dropped entry on
    iff a zero-cost alternating cycle through it exists among entries of larger flat
    index; toggling it keeps every count and the optimum, and fixes the entry, so the
    result is the lexicographically greatest optimal keep vector.
    """
    T = units.shape[0]
    device = units.device
    kept = torch.zeros((T, m, m), dtype=torch.bool, device=device)
    all_allowed = torch.ones((T, m, m), dtype=torch.bool, device=device)
    tiles = torch.arange(T, device=device)
    everyone = torch.ones(T, dtype=torch.bool, device=device)
    for _ in range(n * m):
        row_flow = kept.sum(dim=2)
        column_flow = kept.sum(dim=1)
        dist_r0 = torch.where(row_flow < n, 0.0, INF).to(units.dtype)
        _, dist_c, pred_r, pred_c = _bellman_ford(units, kept, all_allowed, dist_r0, m + 1)
        end_dist = torch.where(column_flow < n, dist_c, INF)
        end_column = end_dist.argmin(dim=1)
        _flip_path(kept, pred_r, pred_c, end_column, everyone, m)
    # Canonical pass: row-major, switch a dropped entry on if a zero-cost alternating cycle
    # through it exists among entries of larger flat index.
    flat = torch.arange(m * m, device=device).reshape(m, m)
    for k in range(m * m):
        i, j = divmod(k, m)
        active = ~kept[:, i, j]
        if not bool(active.any()):
            continue
        allowed = (flat > k).expand(T, m, m)
        # Path c_j -> ... -> r_i: start at column j with distance 0: one half-round first.
        dist_c0 = torch.full((T, m), INF, dtype=units.dtype, device=device)
        dist_c0[:, j] = 0.0
        # Reuse BF by starting from rows reachable from column j via kept arcs.
        cost_cr = torch.where(kept & allowed, units, INF)
        dist_r0 = dist_c0[:, None, :] + cost_cr
        start_dist, start_arg = _min_and_first_index(dist_r0, 2)
        dist_r, dist_c, pred_r, pred_c = _bellman_ford(units, kept, allowed, start_dist, m + 1)
        # pred_r for rows reached directly from column j: mark with the column index j.
        direct = (pred_r < 0) & torch.isfinite(start_dist)
        pred_r = torch.where(direct, start_arg, pred_r)
        switch = active & (dist_r[:, i] == units[:, i, j])
        if bool(switch.any()):
            # Flip: entry (i, j) on, then walk back from row i to column j.
            kept[tiles[switch], i, j] = True
            row = torch.full((T,), i, dtype=torch.int64, device=device)
            walking = switch.clone()
            for _ in range(2 * m + 2):
                if not bool(walking.any()):
                    break
                column = pred_r[tiles, row]  # kept arc c_column -> r_row: drop it
                kept[tiles[walking], row[walking], column[walking]] = False
                cont = walking & (column != j)
                previous_row = pred_c[tiles, column]  # dropped arc r_prev -> c_column: keep it
                kept[tiles[cont], previous_row[cont], column[cont]] = True
                row = torch.where(cont, previous_row, row)
                walking = cont
    return kept


def transposable_mask(
    scores: torch.Tensor, n: int, m: int, *, method: str = "exact", fill: str = "exact"
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
    fill : {"exact", "at_most"}
        ``"exact"``: exactly ``n`` per tile row and column. ``"at_most"`` (exact or
        brute only): at most ``n``, solved by nmref on the host (module notes).

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
    if fill not in FILLS:
        raise ValueError(f"fill={fill!r} must be one of {FILLS}")
    tensor = _check_scores(scores, pattern.m)
    if method == "exact" and _runs_cuda_kernel(tensor, pattern.m):
        return _cuda_kernel_mask(tensor, pattern.n, pattern.m, fill)
    if fill == "at_most":
        return _at_most_on_host(tensor, pattern.n, pattern.m, method)
    tiles = _to_tiles(tensor, pattern.m)
    if method == "brute" or (method == "exact" and pattern.m <= 4):
        if pattern.m > BRUTE_MAX_M:
            raise ValueError(
                f"method='brute' needs m <= {BRUTE_MAX_M}; use method='exact' for larger m"
            )
        kept = _brute(tiles, pattern.n, pattern.m)
    elif method == "exact":
        kept = _exact_by_flow(tiles, pattern.n, pattern.m)
    else:
        kept = _greedy(tiles, pattern.n, pattern.m, prune_form=method == "greedy-prune")
    return _from_tiles(kept, tuple(tensor.shape), pattern.m)


def _runs_cuda_kernel(tensor: torch.Tensor, m: int) -> bool:
    """Whether nmref's CUDA kernel answers: a CUDA tensor, ``m <= 64``, and Numba able to
    run CUDA kernels (elsewhere the torch solvers answer, with the same mask)."""
    if not tensor.is_cuda or m > 64:
        return False
    from nmref.transposable._cuda_driver import unavailable_reason

    return unavailable_reason() is None


def _cuda_kernel_mask(tensor: torch.Tensor, n: int, m: int, fill: str) -> torch.Tensor:
    """``method="exact"`` by nmref's CUDA kernel, on the tensor's own device memory."""
    from nmref.transposable import transposable_mask as nmref_mask

    scores = tensor.detach()
    if scores.dtype == torch.bfloat16:
        scores = scores.float()  # exact; Numba has no bfloat16 arrays
    with torch.cuda.device(scores.device):
        # The kernel runs on Numba's stream: let the work that wrote the scores finish.
        torch.cuda.current_stream().synchronize()
        mask = nmref_mask(scores, n, m, fill=fill, backend="cuda")  # type: ignore[arg-type]
        return torch.as_tensor(mask, device=scores.device)


def _at_most_on_host(tensor: torch.Tensor, n: int, m: int, method: str) -> torch.Tensor:
    """``fill="at_most"`` by nmref on the host; the mask back on ``tensor``'s device."""
    from nmref.transposable import transposable_mask as host_mask

    host = tensor.detach().cpu()
    if host.dtype == torch.bfloat16:
        host = host.to(torch.float32)  # exact: every bfloat16 is a float32
    # nmref raises for greedy methods with fill="at_most" and names the rule.
    mask = host_mask(host.numpy(), n, m, method=method, fill="at_most")  # type: ignore[arg-type]
    return torch.from_numpy(mask).to(tensor.device)


def is_transposable(mask: torch.Tensor, n: int, m: int, *, exact: bool = True) -> bool:
    """Whether every row and column of every ``m x m`` tile keeps ``n`` (at most ``n``)."""
    pattern = check_pattern(n, m)
    tensor = torch.as_tensor(mask)
    if tensor.dim() != 2 or tensor.shape[0] % m or tensor.shape[1] % m:
        raise ValueError(f"mask shape {tuple(tensor.shape)} must be 2-D with multiples of m={m}")
    tiles = (_to_tiles(tensor != 0, pattern.m)).reshape(-1, m, m).to(torch.int64)
    counts = torch.cat([tiles.sum(dim=1), tiles.sum(dim=2)], dim=1)
    return bool((counts == pattern.n).all() if exact else (counts <= pattern.n).all())
