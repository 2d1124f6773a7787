"""Readable NumPy versions of the channel-permutation kernels (``specs/permutation.md``).

Every function here has a twin of the same name and signature in
:mod:`nmref.permutation._kernels`, compiled with Numba, and the two return the
same bits (tested on many random inputs). The arithmetic order is part of the
spec (P3) so that this is possible: a group's kept magnitude adds, in every row,
the ``n`` largest magnitudes from the largest down, then the rows in order
into 8 interleaved running sums (row ``r`` into lane ``r % 8``), then the
lanes in order (``np.cumsum`` is a strictly sequential sum, unlike ``np.sum``); a partition's
value adds its groups from the last canonical group to the first.

The inputs are prepared by the driver in :mod:`nmref.permutation`: ``magnitudes``
is ``|W|`` of the reduction matrix, **transposed** to ``(columns, rows)`` and
float64, so that one column is one contiguous row of the array.

This module is also the "straightforward NumPy implementation" that
``benchmarks/bench_permutation.py`` times the kernels against.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import NDArray

from nmref.permutation.partitions import canonical_partitions

#: Interleaved running sums over the rows of a group (P3.1).
LANES = 8

__all__ = ["exhaustive", "group_value", "group_values", "objective", "search"]


def group_values(magnitudes: NDArray[np.float64], groups: NDArray, n: int) -> NDArray[np.float64]:
    """Kept magnitude of every group (row of ``groups``): per row of the matrix, its ``n``
    largest magnitudes from the largest down, then the rows in order (P3).

    ``groups`` is ``(G, m)`` column indices. O(G * rows * m log m), vectorised.
    """
    groups = np.asarray(groups)
    if n == 0 or magnitudes.shape[1] == 0 or groups.size == 0:
        return np.zeros(len(groups))  # reshape(0, -1) of no groups would be ambiguous
    groups = groups.reshape(len(groups), -1)
    blocks = magnitudes[groups].astype(np.float64)  # (G, m, rows)
    largest_first = np.sort(blocks, axis=1)[:, ::-1][:, :n]
    row_kept = np.cumsum(largest_first, axis=1)[:, -1]  # (G, rows)
    # Row r goes to lane r % LANES (zero padding adds exact zeros), then the lanes in order.
    padded = np.pad(row_kept, ((0, 0), (0, -row_kept.shape[1] % LANES)))
    lanes = np.cumsum(padded.reshape(len(groups), -1, LANES), axis=1)[:, -1, :]
    return np.cumsum(lanes, axis=1)[:, -1]


def group_value(magnitudes: NDArray[np.float64], columns: NDArray, n: int) -> float:
    """Kept magnitude of one group (:func:`group_values` of one row)."""
    return float(group_values(magnitudes, np.asarray(columns)[None], n)[0])


def _reverse_sum(values: NDArray[np.float64]) -> float:
    """Sequential sum from the last entry to the first (the partition value, P3)."""
    if len(values) == 0:
        return 0.0
    return float(np.cumsum(values[::-1])[-1])


def objective(magnitudes: NDArray[np.float64], permutation: NDArray, n: int, m: int) -> float:
    """Kept magnitude of the column order ``permutation`` (P1, summed as P3)."""
    groups = np.asarray(permutation).reshape(-1, m)
    values = group_values(magnitudes, groups, n)
    if len(groups) == 0:
        return 0.0
    order = np.argsort(groups.min(axis=1), kind="stable")
    return _reverse_sum(values[order])


def exhaustive(magnitudes: NDArray[np.float64], n: int, m: int) -> tuple[NDArray[np.int64], float]:
    """The certified optimum: try every canonical partition, first maximum wins (P4).

    O(count_column_partitions(C, m) * C / m) additions after O(C choose m) group
    values (each O(rows * m log m)).
    """
    columns = magnitudes.shape[0]
    cache: dict[tuple[int, ...], float] = {}
    best: tuple[int, ...] | None = None
    best_value = 0.0
    for permutation in canonical_partitions(columns, m):
        values = []
        for g in range(columns // m):
            group = permutation[g * m : (g + 1) * m]
            if group not in cache:
                cache[group] = group_value(magnitudes, np.array(group), n)
            values.append(cache[group])
        value = _reverse_sum(np.array(values))
        if best is None or value > best_value:
            best, best_value = permutation, value
    return np.array(best, dtype=np.int64), best_value


def _stripe_columns(permutation: NDArray, stripe: int, m: int) -> NDArray:
    return permutation[stripe * m : (stripe + 1) * m]


def _evaluate_partitions(
    magnitudes: NDArray, permutation: NDArray, stripes: NDArray, n: int, m: int,
    subsets: NDArray, partitions: NDArray,
) -> tuple[float, int]:  # fmt: skip
    """Best canonical re-partition of the columns of ``stripes``: (improvement, index)."""
    local = np.concatenate([_stripe_columns(permutation, s, m) for s in stripes])
    subset_values = group_values(magnitudes, local[subsets], n)
    # One row per partition, its groups from the last to the first, summed in sequence.
    values = np.cumsum(subset_values[partitions][:, ::-1], axis=1)[:, -1]
    best = int(np.argmax(values))  # the first maximum; the identity (index 0) on ties
    if not values[best] > values[0]:
        return 0.0, 0
    return float(values[best] - values[0]), best


def _evaluate_swaps(
    magnitudes: NDArray, permutation: NDArray, stripes: NDArray, n: int, m: int,
    stripe_values: NDArray, local_stripes: NDArray,
) -> tuple[float, int]:  # fmt: skip
    """Best exchange of one column of stripe 0 with one of stripe 1: (gain, 1 + a * m + b)."""
    first = _stripe_columns(permutation, stripes[0], m)
    second = _stripe_columns(permutation, stripes[1], m)
    current = stripe_values[local_stripes[0]] + stripe_values[local_stripes[1]]
    # Row a * m + b: column a of the first stripe exchanged with column b of the second.
    exchanged_first = np.repeat(first[None], m * m, axis=0)
    exchanged_second = np.repeat(second[None], m * m, axis=0)
    a, b = np.divmod(np.arange(m * m), m)
    exchanged_first[np.arange(m * m), a] = second[b]
    exchanged_second[np.arange(m * m), b] = first[a]
    values = group_values(magnitudes, exchanged_first, n) + group_values(
        magnitudes, exchanged_second, n
    )
    best = int(np.argmax(values))  # the first maximum
    if not values[best] > current:
        return 0.0, 0
    return float(values[best] - current), 1 + best


def search(
    magnitudes: NDArray[np.float64],
    n: int,
    m: int,
    permutation: NDArray[np.int64],
    stripes: NDArray[np.int64],
    stripes_per_group: int,
    swaps: bool,
    subsets: NDArray[np.int64],
    partitions: NDArray[np.int64],
    escapes: NDArray[np.int64],
    max_rounds: int,
) -> tuple[NDArray[np.int64], int, int, int, bool]:
    """Pool & Yu's greedy rounds over stripe groups (P5, P6); returns the best order seen.

    ``stripes`` are the stripe positions that take part (all of them, or one
    block); a stripe group is ``stripes_per_group`` of them (combinations in
    lexicographic order). ``swaps`` chooses the move: the best single column
    exchange (channel swaps, two stripes) or the best re-partition of all the
    group's columns (``subsets`` and ``partitions`` of
    :func:`~nmref.permutation.partitions.local_partition_table`). ``escapes`` is
    ``(E, 3)``: stripe group, column of its first stripe, column of its last
    stripe, one row per bounded regression. Returns ``(permutation, moves,
    escapes_used, rounds, converged)``.
    """
    permutation = permutation.copy()
    groups = np.array(
        list(itertools.combinations(range(len(stripes)), stripes_per_group)), dtype=np.int64
    ).reshape(-1, stripes_per_group)
    stripe_values = group_values(magnitudes, permutation.reshape(-1, m)[stripes], n)
    improvement = np.zeros(len(groups))
    choice = np.zeros(len(groups), dtype=np.int64)
    dirty = np.ones(len(groups), dtype=bool)
    best_permutation, best_total = permutation.copy(), _forward_sum(stripe_values)
    moves = escapes_used = rounds = 0
    converged = False
    while rounds < max_rounds:
        rounds += 1
        # 1. Re-evaluate the stripe groups a stripe of which changed in the last round.
        for g in np.flatnonzero(dirty):
            members = stripes[groups[g]]
            if swaps:
                improvement[g], choice[g] = _evaluate_swaps(
                    magnitudes, permutation, members, n, m, stripe_values, groups[g]
                )
            else:
                improvement[g], choice[g] = _evaluate_partitions(
                    magnitudes, permutation, members, n, m, subsets, partitions
                )
        # 2. Apply the best moves first, at most one per stripe in a round.
        used = np.zeros(len(stripes), dtype=bool)
        applied = 0
        for g in np.argsort(-improvement, kind="stable"):
            if not improvement[g] > 0:
                break
            if used[groups[g]].any():
                continue
            members = stripes[groups[g]]
            if swaps:
                a, b = divmod(int(choice[g]) - 1, m)
                first, second = members[0] * m + a, members[1] * m + b
                permutation[[first, second]] = permutation[[second, first]]
                used[groups[g]] = True
            else:
                local = np.concatenate([_stripe_columns(permutation, s, m) for s in members])
                for j, s in enumerate(members):
                    subset = subsets[partitions[choice[g], j]]
                    permutation[s * m : (s + 1) * m] = local[subset]
                    if not np.array_equal(subset, np.arange(j * m, (j + 1) * m)):
                        used[groups[g][j]] = True
            applied += 1
        # 3. Converged: spend a bounded regression (a forced swap), or stop.
        if applied == 0:
            if escapes_used == len(escapes):
                converged = True
                break
            g, a, b = (int(x) for x in escapes[escapes_used])
            escapes_used += 1
            low, high = groups[g][0], groups[g][-1]
            first, second = stripes[low] * m + a, stripes[high] * m + b
            permutation[[first, second]] = permutation[[second, first]]
            used[[low, high]] = True
        moves += applied
        for j in np.flatnonzero(used):
            stripe_values[j] = group_value(
                magnitudes, _stripe_columns(permutation, stripes[j], m), n
            )
        dirty = used[groups].any(axis=1)
        total = _forward_sum(stripe_values)
        if total > best_total:
            best_permutation, best_total = permutation.copy(), total
    return best_permutation, moves, escapes_used, rounds, converged


def _forward_sum(values: NDArray[np.float64]) -> float:
    """Sequential sum in stripe order (the search's own bookkeeping of its best order)."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0
