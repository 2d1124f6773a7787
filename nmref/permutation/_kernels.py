"""Numba kernels of the channel-permutation searches: the twins of :mod:`.reference`.

Same names, signatures and bits as :mod:`nmref.permutation.reference` (tested
equal on many random inputs): the additions happen in the order the spec fixes
(``specs/permutation.md``, P3). No ``fastmath`` (it would reorder them) and no
``parallel``. Every jitted callee lives in this file, so ``cache=True`` is safe.
Imported on first use only: ``import nmref`` never imports numba.
"""

from __future__ import annotations

import numba
import numpy as np

# Rows are ranked in chunks so that the comparisons run over contiguous rows and vectorise.
CHUNK = 256
# Row sums go to LANES interleaved running sums (P3): independent chains of additions.
LANES = 8


@numba.njit(cache=True, nogil=True)
def _group_value_into(magnitudes, columns, n, work, rank):  # pragma: no cover - compiled
    """Kept magnitude of the group ``columns``; ``work`` is (m + 1, CHUNK), ``rank`` (m, CHUNK).

    ``magnitudes`` may be float32 (weights that are float16/32 are exact in it):
    ranking and selecting are exact in any float type, and the selected values
    are added in float64, so the bits are those of the float64 reference. Row
    ``r`` is added to lane ``r % LANES``; the lanes are added in order (P3).

    Entry ``i`` of a row has rank ``#{j < i: x_j >= x_i} + #{j > i: x_j > x_i}``
    (distinct ranks, ties to the lower index). Slot ``s < n`` is the sum over
    ``i`` of ``x_i if rank_i == s else 0``: exactly the ``s``-th largest value
    (adding zeros is exact), so the slots are then added from the largest down
    (P3). No data-dependent branch: the loops over rows vectorise.
    """
    m = columns.shape[0]
    rows = magnitudes.shape[1]
    total = 0.0
    if n == 0:
        return total
    lanes = np.zeros(LANES)
    if m == 4:
        return _group_value_of_four(magnitudes, columns, n, lanes)
    for start in range(0, rows, CHUNK):
        count = min(CHUNK, rows - start)
        for i in range(m):
            own = magnitudes[columns[i], start : start + count]
            ranks = rank[i]
            for r in range(count):
                ranks[r] = 0
            for j in range(m):
                other = magnitudes[columns[j], start : start + count]
                if j < i:
                    for r in range(count):
                        ranks[r] += other[r] >= own[r]
                elif j > i:
                    for r in range(count):
                        ranks[r] += other[r] > own[r]
        for slot in range(n):
            acc = work[slot]
            for r in range(count):
                acc[r] = 0.0
            for i in range(m):
                own = magnitudes[columns[i], start : start + count]
                ranks = rank[i]
                for r in range(count):
                    if ranks[r] == slot:
                        acc[r] += own[r]
        for r in range(count):
            row = 0.0
            for slot in range(n):
                row += np.float64(work[slot, r])
            lanes[r % LANES] += row  # start is a multiple of LANES
    for lane in range(LANES):
        total += lanes[lane]
    return total


@numba.njit(cache=True, nogil=True)
def _group_value_of_four(magnitudes, columns, n, lanes):  # pragma: no cover - compiled
    """:func:`_group_value_into` for ``m = 4``: a 5-comparator sorting network per row.

    The network yields the row's values in descending order (equal values in either
    order: they are equal), so the sum is the same as the ranking path's (P3).
    """
    first, second, third, fourth = (magnitudes[columns[0]], magnitudes[columns[1]],
                                    magnitudes[columns[2]], magnitudes[columns[3]])  # fmt: skip
    for r in range(magnitudes.shape[1]):
        high01, low01 = max(first[r], second[r]), min(first[r], second[r])
        high23, low23 = max(third[r], fourth[r]), min(third[r], fourth[r])
        largest, smallest = max(high01, high23), min(low01, low23)
        middle_high, middle_low = min(high01, high23), max(low01, low23)
        row = np.float64(largest)
        if n >= 2:
            row += np.float64(max(middle_high, middle_low))
        if n >= 3:
            row += np.float64(min(middle_high, middle_low))
        if n >= 4:
            row += np.float64(smallest)
        lanes[r % LANES] += row
    total = 0.0
    for lane in range(LANES):
        total += lanes[lane]
    return total


@numba.njit(cache=True, nogil=True)
def group_value(magnitudes, columns, n):  # pragma: no cover - compiled
    """Kept magnitude of one group (as :func:`nmref.permutation.reference.group_value`)."""
    return _group_value_into(
        magnitudes,
        columns,
        n,
        np.empty((columns.shape[0] + 1, CHUNK), magnitudes.dtype),
        np.empty((columns.shape[0], CHUNK), np.int32),
    )


@numba.njit(cache=True, nogil=True)
def objective(magnitudes, permutation, n, m):  # pragma: no cover - compiled
    """Kept magnitude of a column order, groups summed last canonical group first."""
    groups = permutation.shape[0] // m
    values = np.empty(groups)
    lowest = np.empty(groups, dtype=np.int64)
    work = np.empty((m + 1, CHUNK), magnitudes.dtype)
    rank = np.empty((m, CHUNK), dtype=np.int32)
    for g in range(groups):
        columns = permutation[g * m : (g + 1) * m]
        values[g] = _group_value_into(magnitudes, columns, n, work, rank)
        lowest[g] = columns.min()
    order = np.argsort(lowest, kind="mergesort")
    total = 0.0
    for g in range(groups - 1, -1, -1):
        total += values[order[g]]
    return total


@numba.njit(cache=True, nogil=True)
def _popcount(mask):  # pragma: no cover - compiled
    count = 0
    while mask:
        mask &= mask - 1
        count += 1
    return count


@numba.njit(cache=True, nogil=True)
def exhaustive(magnitudes, n, m):  # pragma: no cover - compiled
    """The certified optimum by dynamic programming over column sets (P4).

    ``best[S]`` is the largest value of a partition of the set ``S``, where the
    group holding ``min(S)`` comes first: ``value(T) + best[S \\ T]``, the same
    nesting as the reference's sum from the last canonical group to the first.
    Candidates ``T`` are tried in lexicographic order and only a strictly larger
    value replaces the best, so the lexicographically first optimal canonical
    permutation wins, as in the reference's enumeration. O(2**C) memory.
    """
    columns = magnitudes.shape[0]
    size = 1 << columns
    value = np.zeros(size)
    best = np.zeros(size)
    chosen = np.zeros(size, dtype=np.int64)
    work = np.empty((m + 1, CHUNK), magnitudes.dtype)
    rank = np.empty((m, CHUNK), dtype=np.int32)
    # Kept magnitude of every m-subset, indexed by its bit mask.
    index = np.arange(m)
    members = np.empty(m, dtype=np.int64)
    while True:
        mask = 0
        for i in range(m):
            members[i] = index[i]
            mask |= 1 << index[i]
        value[mask] = _group_value_into(magnitudes, members, n, work, rank)
        i = m - 1
        while i >= 0 and index[i] == columns - m + i:
            i -= 1
        if i < 0:
            break
        index[i] += 1
        for j in range(i + 1, m):
            index[j] = index[j - 1] + 1
    rest = np.empty(columns, dtype=np.int64)
    pick = np.empty(max(m - 1, 1), dtype=np.int64)
    for mask in range(1, size):
        if _popcount(mask) % m:
            continue
        low = 0
        while not (mask >> low) & 1:
            low += 1
        count = 0
        for c in range(low + 1, columns):
            if (mask >> c) & 1:
                rest[count] = c
                count += 1
        k = m - 1
        for i in range(k):
            pick[i] = i
        found = False
        while True:
            group = 1 << low
            for i in range(k):
                group |= 1 << rest[pick[i]]
            candidate = value[group] + best[mask ^ group]
            if not found or candidate > best[mask]:
                best[mask] = candidate
                chosen[mask] = group
                found = True
            i = k - 1
            while i >= 0 and pick[i] == count - k + i:
                i -= 1
            if i < 0:
                break
            pick[i] += 1
            for j in range(i + 1, k):
                pick[j] = pick[j - 1] + 1
    permutation = np.empty(columns, dtype=np.int64)
    mask = size - 1
    position = 0
    while mask:
        group = chosen[mask]
        for c in range(columns):
            if (group >> c) & 1:
                permutation[position] = c
                position += 1
        mask ^= group
    return permutation, best[size - 1]


@numba.njit(cache=True, nogil=True)
def _combinations(count, k):  # pragma: no cover - compiled
    total = 1
    for i in range(k):
        total = total * (count - i) // (i + 1)
    if count < k:
        total = 0
    out = np.empty((total, k), dtype=np.int64)
    index = np.arange(k)
    for row in range(total):
        out[row] = index
        i = k - 1
        while i >= 0 and index[i] == count - k + i:
            i -= 1
        if i < 0:
            break
        index[i] += 1
        for j in range(i + 1, k):
            index[j] = index[j - 1] + 1
    return out


@numba.njit(cache=True, nogil=True)
def _evaluate_partitions(
    magnitudes, permutation, members, n, m, subsets, partitions, local, columns, subset_values,
    work, rank,
):  # pragma: no cover - compiled  # fmt: skip
    k = members.shape[0]
    for j in range(k):
        for i in range(m):
            local[j * m + i] = permutation[members[j] * m + i]
    for s in range(subsets.shape[0]):
        for i in range(m):
            columns[i] = local[subsets[s, i]]
        subset_values[s] = _group_value_into(magnitudes, columns, n, work, rank)
    identity = 0.0
    for j in range(k - 1, -1, -1):
        identity += subset_values[partitions[0, j]]
    best_value = identity
    best = 0
    for p in range(1, partitions.shape[0]):
        value = 0.0
        for j in range(k - 1, -1, -1):
            value += subset_values[partitions[p, j]]
        if value > best_value:
            best_value = value
            best = p
    if best == 0:
        return 0.0, 0
    return best_value - identity, best


@numba.njit(cache=True, nogil=True)
def _evaluate_swaps(magnitudes, permutation, members, n, m, stripe_values, local_stripes,
                    first, second, work, rank):  # pragma: no cover - compiled  # fmt: skip
    current = stripe_values[local_stripes[0]] + stripe_values[local_stripes[1]]
    best_value = current
    best = 0
    for a in range(m):
        for b in range(m):
            for i in range(m):
                first[i] = permutation[members[0] * m + i]
                second[i] = permutation[members[1] * m + i]
            moved = first[a]
            first[a] = second[b]
            second[b] = moved
            value = _group_value_into(magnitudes, first, n, work, rank) + _group_value_into(
                magnitudes, second, n, work, rank
            )
            if value > best_value:
                best_value = value
                best = 1 + a * m + b
    if best == 0:
        return 0.0, 0
    return best_value - current, best


@numba.njit(cache=True, nogil=True)
def search(magnitudes, n, m, permutation, stripes, stripes_per_group, swaps, subsets,
           partitions, escapes, max_rounds):  # pragma: no cover - compiled  # fmt: skip
    """Pool & Yu's greedy rounds over stripe groups (as :func:`.reference.search`)."""
    permutation = permutation.copy()
    count = stripes.shape[0]
    k = stripes_per_group
    groups = _combinations(count, k)
    work = np.empty((m + 1, CHUNK), magnitudes.dtype)
    rank = np.empty((m, CHUNK), dtype=np.int32)
    stripe_values = np.empty(count)
    for j in range(count):
        stripe_values[j] = _group_value_into(
            magnitudes, permutation[stripes[j] * m : (stripes[j] + 1) * m], n, work, rank
        )
    improvement = np.zeros(groups.shape[0])
    choice = np.zeros(groups.shape[0], dtype=np.int64)
    dirty = np.ones(groups.shape[0], dtype=np.bool_)
    members = np.empty(k, dtype=np.int64)
    local = np.empty(k * m, dtype=np.int64)
    columns = np.empty(m, dtype=np.int64)
    second = np.empty(m, dtype=np.int64)
    subset_values = np.empty(subsets.shape[0])
    used = np.zeros(count, dtype=np.bool_)
    best_permutation = permutation.copy()
    best_total = 0.0
    for j in range(count):
        best_total += stripe_values[j]
    moves = 0
    escapes_used = 0
    rounds = 0
    converged = False
    while rounds < max_rounds:
        rounds += 1
        for g in range(groups.shape[0]):
            if not dirty[g]:
                continue
            for j in range(k):
                members[j] = stripes[groups[g, j]]
            if swaps:
                improvement[g], choice[g] = _evaluate_swaps(
                    magnitudes, permutation, members, n, m, stripe_values, groups[g],
                    columns, second, work, rank,
                )  # fmt: skip
            else:
                improvement[g], choice[g] = _evaluate_partitions(
                    magnitudes, permutation, members, n, m, subsets, partitions,
                    local, columns, subset_values, work, rank,
                )  # fmt: skip
        used[:] = False
        applied = 0
        # Stable descending order: equal improvements keep the lower group first.
        order = np.argsort(-improvement, kind="mergesort")
        for position in range(order.shape[0]):
            g = order[position]
            if not improvement[g] > 0:
                break
            touched = False
            for j in range(k):
                touched = touched or used[groups[g, j]]
            if touched:
                continue
            if swaps:
                a = (choice[g] - 1) // m
                b = (choice[g] - 1) % m
                first = stripes[groups[g, 0]] * m + a
                other = stripes[groups[g, 1]] * m + b
                moved = permutation[first]
                permutation[first] = permutation[other]
                permutation[other] = moved
                used[groups[g, 0]] = True
                used[groups[g, 1]] = True
            else:
                for j in range(k):
                    for i in range(m):
                        local[j * m + i] = permutation[stripes[groups[g, j]] * m + i]
                for j in range(k):
                    stripe = stripes[groups[g, j]]
                    changed = False
                    for i in range(m):
                        column = subsets[partitions[choice[g], j], i]
                        permutation[stripe * m + i] = local[column]
                        changed = changed or column != j * m + i
                    if changed:
                        used[groups[g, j]] = True
            applied += 1
        if applied == 0:
            if escapes_used == escapes.shape[0]:
                converged = True
                break
            g = escapes[escapes_used, 0]
            low = groups[g, 0]
            high = groups[g, k - 1]
            first = stripes[low] * m + escapes[escapes_used, 1]
            other = stripes[high] * m + escapes[escapes_used, 2]
            escapes_used += 1
            moved = permutation[first]
            permutation[first] = permutation[other]
            permutation[other] = moved
            used[low] = True
            used[high] = True
        moves += applied
        for j in range(count):
            if used[j]:
                stripe_values[j] = _group_value_into(
                    magnitudes, permutation[stripes[j] * m : (stripes[j] + 1) * m], n, work, rank
                )
        for g in range(groups.shape[0]):
            dirty[g] = False
            for j in range(k):
                dirty[g] = dirty[g] or used[groups[g, j]]
        total = 0.0
        for j in range(count):
            total += stripe_values[j]
        if total > best_total:
            best_total = total
            best_permutation[:] = permutation
    return best_permutation, moves, escapes_used, rounds, converged
