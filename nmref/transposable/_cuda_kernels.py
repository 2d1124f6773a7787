"""CUDA kernels of the exact transposable mask (Numba CUDA): one thread per tile.

The GPU twin of the CPU kernels (:mod:`~nmref.transposable._flow_kernels`,
:mod:`~nmref.transposable._at_most_kernels`), written for reading rather than speed, and
tested equal to them bit for bit (``tests/test_transposable_cuda.py``, in Numba's CUDA
simulator). :mod:`~nmref.transposable._cuda_driver` prepares the inputs and launches
:func:`tile_kernel`; only this module imports ``numba.cuda``.

Every thread solves one ``m x m`` tile on its own, in four steps (``specs/transposable.md``,
T2, T3, T5 and T10):

1. **Units** (:func:`_load_units`): the tile's IEEE bits decoded into exact int64 units,
   the same integers as the CPU kernels' (``_flow_start._load_lanes``); a tile wider than
   ``max_unit_bits(m)`` bits is handed back (``TOO_WIDE``: the host solves it), one with
   NaN or an infinity is reported (``NOT_FINITE``: the driver raises the host's error).
2. **Flow** (successive shortest paths, Dijkstra with potentials on the ``2m + 2`` nodes
   ``s, r_1..r_m, c_1..c_m, t``; :func:`_shortest_path`). The exactly-``n`` flow starts
   from the partial b-matching of spec T2's fast kernel (:func:`_start`: every column keeps
   its top ``n`` by ``w - u``, over-full rows their top ``n`` by ``w - v``), which
   satisfies complementary slackness, and augments its deficit. ``fill="at_most"`` keeps
   that optimum where it has at-most duals (a shift of its own where ``min u + min v >= 0``,
   as the CPU kernel checks first, else Bellman-Ford); where keeping fewer is strictly
   better it starts again from zero flow, as the readable solver
   does, stops at the first path of cost ``>= 0``, and takes its duals from Bellman-Ford
   on the final residual network (:func:`_at_most_duals`, the port of
   ``flow.at_most_duals``).
3. **Ties** (:func:`_canonical`): the canonical pass of spec T3 on the tight entries of the
   duals, row-major, switching a dropped tight entry on iff an alternating path through
   later tight entries closes (through the extra node ``Z`` for the at-most fill), with
   rows and columns as 64-bit sets (``m <= 64``).
4. The mask bits of the tile, and its status.

Integers only: units below ``2**max_unit_bits(m)``, potentials guarded at ``2**58`` as on
the CPU (a tile beyond is handed back), so no sum overflows int64 and nothing is rounded.
A tile's answer depends on its scores alone (one thread, a fixed order of steps), never on
the launch configuration or on other tiles.

Kernels are compiled per ``m`` (:func:`tile_kernel`), so that the per-thread arrays have
constant sizes: ``m * m`` int64 units (32 KiB of local memory at ``m = 64``) and a few
arrays of ``2m + 2``; for ``m <= UNROLLED_MAX_M`` the loops over ``m`` are unrolled too.
No ``fastmath``. The builtins ``min`` and ``max`` are not used: Numba's CUDA target (0.68)
fails to type them on int64 inside device functions.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from nmref.transposable._kernel_contract import NOT_FINITE, SOLVED, TOO_WIDE

__all__ = ["MAX_M", "THREADS_PER_BLOCK", "tile_kernel"]

#: Largest tile: rows and columns are sets of at most 64 bits.
MAX_M = 64
#: Threads (tiles) per block of :func:`tile_kernel`.
THREADS_PER_BLOCK = 64

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
# Above and below every key, distance and potential (all stay below 2**60 in magnitude).
_TOP = np.int64(1) << np.int64(62)
_BOTTOM = -_TOP
# The CPU kernels' guard (``_flow_kernels.POTENTIAL_LIMIT``): potentials beyond it hand the
# tile back, so that no distance can reach 2**62.
_POTENTIAL_LIMIT = np.int64(1) << np.int64(58)


# ----------------------------------------------------------------------------
# 64-bit sets of rows or columns
# ----------------------------------------------------------------------------


@cuda.jit(device=True)
def _bit(index):
    """The set ``{index}``."""
    return _ONE << np.uint64(index)


@cuda.jit(device=True)
def _bits_from(start, m):
    """The set ``{start, ..., m - 1}`` (empty when ``start >= m``)."""
    if start >= m:
        return _ZERO
    return (_ALL >> np.uint64(64 - m + start)) << np.uint64(start)


@cuda.jit(device=True)
def _lowest_index(bits):
    """Index of the lowest element of a non-empty set."""
    lowest = bits & (~bits + _ONE)
    return np.int64(cuda.popc(lowest - _ONE))


@cuda.jit(device=True)
def _has(bits, index):
    return ((bits >> np.uint64(index)) & _ONE) != _ZERO


@cuda.jit(device=True)
def _toggle(a, b, kept_rows, kept_columns, row_count, column_count):
    """Keep the dropped entry ``(a, b)``, or drop the kept one."""
    if _has(kept_rows[a], b):
        row_count[a] -= 1
        column_count[b] -= 1
    else:
        row_count[a] += 1
        column_count[b] += 1
    kept_rows[a] ^= _bit(b)
    kept_columns[b] ^= _bit(a)


# ----------------------------------------------------------------------------
# Step 1: exact int64 units (spec T5), as the CPU kernels decode them
# ----------------------------------------------------------------------------


@cuda.jit(device=True)
def _decode(word, fraction_bits):
    """``(significand, scale, top, special)`` of one IEEE word (float32 or float64 bits).

    The value is ``significand * 2**scale`` exactly; ``top`` bounds its highest bit (as
    ``_flow_start._load_lanes`` computes it); ``special`` flags NaN and infinities.
    float64 significands lose their trailing zero bits (float32 ones keep them), as on
    the CPU, so the tile's width (and which tiles are handed back) is the same.
    """
    if fraction_bits == 23:
        exponent_mask = np.int64(255)
        sign_shift = np.uint64(31)
    else:
        exponent_mask = np.int64(2047)
        sign_shift = np.uint64(63)
    bias = exponent_mask // 2 + fraction_bits
    shift = np.uint64(fraction_bits)
    exponent_field = np.int64(word >> shift) & exponent_mask
    whole = word & ((_ONE << shift) - _ONE)
    if exponent_field != 0:
        whole |= _ONE << shift
    scale = (exponent_field if exponent_field > 1 else np.int64(1)) - bias
    top = scale + fraction_bits
    if fraction_bits > 23 and whole != _ZERO:
        while (whole & _ONE) == _ZERO:
            whole >>= _ONE
            scale += 1
    magnitude = np.int64(whole)
    if ((word >> sign_shift) & _ONE) != _ZERO:
        magnitude = -magnitude
    return magnitude, scale, top, exponent_field == exponent_mask


@cuda.jit(device=True)
def _load_units(bits, fraction_bits, m, max_bits, r0, c0, w):
    """Tile ``(r0, c0)`` into ``w[i * m + j]`` as int64 units; its status.

    ``SOLVED`` (units written), ``NOT_FINITE`` or ``TOO_WIDE`` (units beyond
    ``max_bits`` bits: the tile's nonzero magnitudes span too many binades).
    """
    lowest = np.int64(1) << np.int64(30)
    highest = -lowest
    special = False
    # Two passes over the tile (bounds, then units) in one loop: one call site of _decode.
    for entry in range(2 * m * m):
        i = (entry // m) % m
        j = entry % m
        value, scale, top, not_finite = _decode(np.uint64(bits[r0 + i, c0 + j]), fraction_bits)
        if entry < m * m:
            special = special or not_finite
            if value != 0:
                if scale < lowest:
                    lowest = scale
                if top > highest:
                    highest = top
            continue
        if entry == m * m:
            if special:
                return NOT_FINITE
            if highest - lowest + 1 > max_bits:
                return TOO_WIDE
        if value != 0:
            value = value << (scale - lowest)
        w[i * m + j] = value
    return SOLVED


# ----------------------------------------------------------------------------
# Step 2: the flow (spec T2)
# ----------------------------------------------------------------------------


@cuda.jit(device=True)
def _index_bits(m):
    """``ceil(log2 m)``: low key bits that carry the tie-break index."""
    bits = 0
    while (1 << bits) < m:
        bits += 1
    return np.int64(bits)


@cuda.jit(device=True)
def _start(w, m, n, potential, kept_rows, kept_columns, row_count, column_count):
    """The exactly-``n`` start of spec T2's fast kernel (one column pass, one row pass).

    ``u_i`` = the ``n``-th largest score of row ``i``; every column keeps its ``n``
    largest ``w - u`` (ties: lower row) and ``v_j`` is the ``n``-th of them; every
    over-full row then keeps its ``n`` largest kept ``w - v`` (ties: lower column) and
    ``u_i`` becomes the ``n``-th of them (it can only rise, so the row's dropped entries
    stay slack). Kept entries have ``w >= u + v``, dropped ones ``w <= u + v``: the
    successive shortest paths need only augment the deficit. Keys carry the tie-break
    in their low bits, ``(key << b) | (m - 1 - index)``, so all keys of a line differ;
    selection by ``n`` passes of "largest below the last", O(n m) per line.
    """
    b = _index_bits(m)
    for i in range(m):
        previous = _TOP
        for _ in range(n):
            best = _BOTTOM
            for j in range(m):
                key = (w[i * m + j] << b) | (m - 1 - j)
                if key < previous and key > best:
                    best = key
            previous = best
        potential[1 + i] = previous >> b
    for j in range(m):
        previous = _TOP
        for _ in range(n):
            best = _BOTTOM
            for i in range(m):
                key = ((w[i * m + j] - potential[1 + i]) << b) | (m - 1 - i)
                if key < previous and key > best:
                    best = key
            previous = best
        potential[m + 1 + j] = -(previous >> b)
        for i in range(m):
            key = ((w[i * m + j] - potential[1 + i]) << b) | (m - 1 - i)
            if key >= previous:
                _toggle(i, j, kept_rows, kept_columns, row_count, column_count)
    for i in range(m):
        if row_count[i] <= n:
            continue
        previous = _TOP
        for _ in range(n):
            best = _BOTTOM
            for j in range(m):
                if (kept_rows[i] >> np.uint64(j)) & _ONE:
                    key = ((w[i * m + j] + potential[m + 1 + j]) << b) | (m - 1 - j)
                    if key < previous and key > best:
                        best = key
            previous = best
        potential[1 + i] = previous >> b
        for j in range(m):
            if (kept_rows[i] >> np.uint64(j)) & _ONE:
                key = ((w[i * m + j] + potential[m + 1 + j]) << b) | (m - 1 - j)
                if key < previous:
                    _toggle(i, j, kept_rows, kept_columns, row_count, column_count)


@cuda.jit(device=True)
def _shortest_path(w, m, n, potential, kept_rows, kept_columns, row_count, column_count, distance,
                   parent):  # fmt: skip
    """Dijkstra from ``s`` on reduced costs until ``t`` is settled; True if it is.

    Nodes: 0 ``s``, ``1..m`` rows, ``m+1..2m`` columns, ``2m+1`` ``t``. Arcs: ``s -> r_i``
    (row with room, cost 0), ``r_i -> c_j`` (dropped entry: keep it, cost ``-w``),
    ``c_j -> r_i`` (kept entry: drop it, cost ``+w``), ``c_j -> t`` (column with room).
    The potentials of ``s`` and ``t`` are recomputed first (the largest row potential
    with room, the smallest column potential with room), which makes the arcs out of ``s``
    and into ``t`` non-negative; the row/column arcs are by the invariant. Then the
    distances are added to the potentials (unsettled nodes: ``t``'s), which keeps the
    invariant. Dense, O(m^2). ``distance[t] - potential[s] + potential[t]`` (read before
    the update) is the path's true cost.
    """
    sink = 2 * m + 1
    source_potential = _BOTTOM
    sink_potential = _TOP
    for i in range(m):
        if row_count[i] < n:
            if potential[1 + i] > source_potential:
                source_potential = potential[1 + i]
        if column_count[i] < n:
            if potential[m + 1 + i] < sink_potential:
                sink_potential = potential[m + 1 + i]
    if source_potential == _BOTTOM or sink_potential == _TOP:
        return False
    potential[0] = source_potential
    potential[sink] = sink_potential
    for x in range(2 * m + 2):
        distance[x] = _TOP
        parent[x] = -1
    distance[0] = 0
    for i in range(m):
        if row_count[i] < n:
            distance[1 + i] = source_potential - potential[1 + i]
            parent[1 + i] = 0
    settled_rows = _ZERO
    settled_columns = _ZERO
    while True:
        # The unsettled node nearest to s (lowest number among equals).
        # (Sets are tested inline in the loops here: a device function call costs the
        # simulator far more than the test.)
        best = -1
        best_distance = _TOP
        for i in range(m):
            if not (settled_rows >> np.uint64(i)) & _ONE and distance[1 + i] < best_distance:
                best = 1 + i
                best_distance = distance[1 + i]
        for j in range(m):
            if not (settled_columns >> np.uint64(j)) & _ONE:
                if distance[m + 1 + j] < best_distance:
                    best = m + 1 + j
                    best_distance = distance[m + 1 + j]
        if distance[sink] < best_distance:
            best = sink
            best_distance = distance[sink]
        if best < 0:
            return False
        if best == sink:
            break
        if best <= m:
            i = best - 1
            settled_rows |= _ONE << np.uint64(i)
            open_columns = ~(kept_rows[i] | settled_columns)  # dropped entries, unsettled
            for j in range(m):
                if (open_columns >> np.uint64(j)) & _ONE:
                    reduced = potential[best] - w[i * m + j] - potential[m + 1 + j]
                    if best_distance + reduced < distance[m + 1 + j]:
                        distance[m + 1 + j] = best_distance + reduced
                        parent[m + 1 + j] = best
        else:
            j = best - m - 1
            settled_columns |= _ONE << np.uint64(j)
            open_rows = kept_columns[j] & ~settled_rows  # kept entries, unsettled
            for i in range(m):
                if (open_rows >> np.uint64(i)) & _ONE:
                    reduced = potential[best] + w[i * m + j] - potential[1 + i]
                    if best_distance + reduced < distance[1 + i]:
                        distance[1 + i] = best_distance + reduced
                        parent[1 + i] = best
            if column_count[j] < n:
                reduced = potential[best] - sink_potential
                if best_distance + reduced < distance[sink]:
                    distance[sink] = best_distance + reduced
                    parent[sink] = best
    # What :func:`_augment` adds to the potentials: the distance of a settled node, t's
    # for the others.
    for i in range(m):
        if not (settled_rows >> np.uint64(i)) & _ONE:
            distance[1 + i] = distance[sink]
        if not (settled_columns >> np.uint64(i)) & _ONE:
            distance[m + 1 + i] = distance[sink]
    return True


@cuda.jit(device=True)
def _augment(m, potential, distance, parent, kept_rows, kept_columns, row_count, column_count):
    """Add the distances to the row and column potentials and push one unit along the
    path in ``parent``; False if a potential leaves the guard (the tile is handed back)."""
    sink = 2 * m + 1
    for x in range(1, 2 * m + 1):
        potential[x] += distance[x]
        if potential[x] > _POTENTIAL_LIMIT or potential[x] < -_POTENTIAL_LIMIT:
            return False
    # The path alternates s, row, column, row, ..., column, t; toggling its entries adds
    # one kept entry to its first row and its last column and leaves the others' counts.
    node = parent[sink]
    while node != 0:
        previous = parent[node]
        if previous == 0:
            break
        if previous <= m:  # row -> column: keep the entry
            _toggle(previous - 1, node - m - 1, kept_rows, kept_columns, row_count, column_count)
        else:  # column -> row: drop the entry
            _toggle(node - 1, previous - m - 1, kept_rows, kept_columns, row_count, column_count)
        node = previous
    return True


@cuda.jit(device=True)
def _at_most_duals(w, m, n, kept_rows, row_count, column_count, distance):
    """Duals ``u, v >= 0`` of an optimal at-most-``n`` mask (``flow.at_most_duals``).

    Bellman-Ford, every node starting at 0, on the final residual network with the
    bypass ``s -> t`` (and ``t -> s`` while fewer than ``n m`` entries are kept), the arcs
    ``s -> r_i`` (room), ``r_i -> s`` (a kept entry), ``c_j -> t`` (room), ``t -> c_j`` (a
    kept entry), and the entries. The distances it converges to are the unique shortest
    distances from a virtual root, whatever the order of the arcs: the readable
    solver's. Then ``u_i = d(r_i) - d(s)``, ``v_j = d(s) - d(c_j)`` (0 on a line keeping
    nothing), written as ``distance[1 + i] = u_i`` and ``distance[m + 1 + j] = -v_j`` (the
    sign of a column potential, as :func:`_canonical` reads them). False if the
    mask is not optimal (a negative cycle; never for the solver's mask). O(m^3).
    """
    sink = 2 * m + 1
    total = 0
    for i in range(m):
        total += row_count[i]
    for x in range(2 * m + 2):
        distance[x] = 0
    converged = False
    for _ in range(2 * m + 2):
        changed = False
        if distance[0] < distance[sink]:
            distance[sink] = distance[0]
            changed = True
        if total < n * m and distance[sink] < distance[0]:
            distance[0] = distance[sink]
            changed = True
        for i in range(m):
            row = 1 + i
            if row_count[i] < n and distance[0] < distance[row]:
                distance[row] = distance[0]
                changed = True
            if row_count[i] > 0 and distance[row] < distance[0]:
                distance[0] = distance[row]
                changed = True
            for j in range(m):
                column = m + 1 + j
                if (kept_rows[i] >> np.uint64(j)) & _ONE:
                    if distance[column] + w[i * m + j] < distance[row]:
                        distance[row] = distance[column] + w[i * m + j]
                        changed = True
                elif distance[row] - w[i * m + j] < distance[column]:
                    distance[column] = distance[row] - w[i * m + j]
                    changed = True
        for j in range(m):
            column = m + 1 + j
            if column_count[j] < n and distance[column] < distance[sink]:
                distance[sink] = distance[column]
                changed = True
            if column_count[j] > 0 and distance[sink] < distance[column]:
                distance[column] = distance[sink]
                changed = True
        if not changed:
            converged = True
            break
    if not converged:
        return False
    for i in range(m):
        row = 1 + i
        distance[row] = 0 if row_count[i] == 0 else distance[row] - distance[0]
        column = m + 1 + i
        distance[column] = 0 if column_count[i] == 0 else distance[column] - distance[0]
    return True


# ----------------------------------------------------------------------------
# Step 3: the canonical optimum among ties (spec T3)
# ----------------------------------------------------------------------------


@cuda.jit(device=True)
def _switch_on(i, j, m, n, kept_rows, kept_columns, tight_rows, tight_columns, row_count,
               column_count, zero_rows, zero_columns, with_z, queue, parent):  # fmt: skip
    """Keep the dropped tight entry ``(i, j)`` if some optimum keeps it with every earlier
    choice: a path from column ``j`` to row ``i`` through later tight entries (columns to
    rows through kept ones, rows to columns through dropped ones) and, with ``with_z``
    (the at-most fill), the node ``Z``: ``column -> Z`` (room), ``row -> Z`` (``u = 0``),
    ``Z -> row`` (room), ``Z -> column`` (``v = 0``). The path's entries and ``(i, j)``
    are toggled. Breadth-first over sets of rows and columns; which path is found does not
    change the final mask (it is the unique lexicographically greatest optimum). True if
    switched on.
    """
    z = 2 * m
    all_columns = _bits_from(0, m)
    later_rows = _bits_from(i + 1, m)
    visited_rows = _ZERO
    visited_columns = _bit(j)
    z_seen = not with_z
    queue[0] = m + j
    parent[m + j] = -1
    head = 0
    tail = 1
    found = False
    while head < tail and not found:
        x = queue[head]
        head += 1
        if x == z:
            room = _ZERO
            for a in range(m):
                if row_count[a] < n:
                    room |= _bit(a)
            rows = room & ~visited_rows
            columns = zero_columns & ~visited_columns
        elif x >= m:
            b = x - m
            free = later_rows
            if b > j:
                free |= _bit(i)
            rows = kept_columns[b] & tight_columns[b] & free & ~visited_rows
            columns = _ZERO
            if not z_seen and column_count[b] < n:
                z_seen = True
                parent[z] = x
                queue[tail] = z
                tail += 1
        else:
            a = x
            if a > i:
                free = all_columns
            elif a == i:
                free = _bits_from(j + 1, m)
            else:
                free = _ZERO
            rows = _ZERO
            columns = ~kept_rows[a] & tight_rows[a] & free & ~visited_columns
            if not z_seen and _has(zero_rows, a):
                z_seen = True
                parent[z] = x
                queue[tail] = z
                tail += 1
        visited_rows |= rows
        visited_columns |= columns
        while rows != _ZERO:
            a = _lowest_index(rows)
            rows ^= _bit(a)
            parent[a] = x
            if a == i:
                found = True
                break
            queue[tail] = a
            tail += 1
        while columns != _ZERO and not found:
            b = _lowest_index(columns)
            columns ^= _bit(b)
            parent[m + b] = x
            queue[tail] = m + b
            tail += 1
    if not found:
        return False
    _toggle(i, j, kept_rows, kept_columns, row_count, column_count)
    node = i
    while node != m + j:
        previous = parent[node]
        if previous != z and node != z:
            if node < m:  # column previous -> row node: a kept entry, dropped now
                _toggle(node, previous - m, kept_rows, kept_columns, row_count, column_count)
            else:  # row previous -> column node: a dropped entry, kept now
                _toggle(previous, node - m, kept_rows, kept_columns, row_count, column_count)
        node = previous
    return True


@cuda.jit(device=True)
def _canonical(w, m, n, duals, kept_rows, kept_columns, tight_rows, tight_columns, row_count,
               column_count, with_z, queue, parent):  # fmt: skip
    """The lexicographically greatest row-major optimum (spec T3), from any optimum.

    ``duals[1 + i]`` is ``u_i`` and ``duals[m + 1 + j]`` is ``-v_j``; an entry is tight iff
    ``w = u + v``. Only tight entries differ between optima (complementary slackness with
    any optimal duals); scanning row-major, each dropped tight entry is switched on iff
    :func:`_switch_on` finds its path. O(m) bit operations per search, O(m^3) per tile.
    """
    zero_rows = _ZERO
    zero_columns = _ZERO
    for i in range(m):
        tight_rows[i] = _ZERO
        tight_columns[i] = _ZERO
    for i in range(m):
        if duals[1 + i] == 0:
            zero_rows |= _ONE << np.uint64(i)
        if duals[m + 1 + i] == 0:
            zero_columns |= _ONE << np.uint64(i)
        for j in range(m):
            if w[i * m + j] - duals[1 + i] + duals[m + 1 + j] == 0:
                tight_rows[i] |= _ONE << np.uint64(j)
                tight_columns[j] |= _ONE << np.uint64(i)
    for i in range(m):
        for j in range(m):
            if ((tight_rows[i] & ~kept_rows[i]) >> np.uint64(j)) & _ONE:
                _switch_on(i, j, m, n, kept_rows, kept_columns, tight_rows, tight_columns,
                           row_count, column_count, zero_rows, zero_columns, with_z, queue,
                           parent)  # fmt: skip


# ----------------------------------------------------------------------------
# One tile, both fills
# ----------------------------------------------------------------------------


@cuda.jit(device=True)
def _augment_paths(w, m, n, units, stop_at_zero, potential, distance, parent, kept_rows,
                   kept_columns, row_count, column_count):  # fmt: skip
    """Up to ``units`` successive shortest paths; with ``stop_at_zero``, stop before the
    first path of cost ``>= 0`` (the at-most fill: the bypass is then as cheap). The number
    pushed, or -1 where a potential leaves the guard (the tile is handed back)."""
    sink = 2 * m + 1
    for pushed in range(units):
        if not _shortest_path(w, m, n, potential, kept_rows, kept_columns, row_count,
                              column_count, distance, parent):  # fmt: skip
            return pushed
        if stop_at_zero and distance[sink] - potential[0] + potential[sink] >= 0:
            return pushed
        if not _augment(m, potential, distance, parent, kept_rows, kept_columns, row_count,
                        column_count):  # fmt: skip
            return -1
    return units


@cuda.jit(device=True)
def _solve(w, m, n, at_most, potential, distance, parent, queue, kept_rows, kept_columns,
           tight_rows, tight_columns, row_count, column_count):  # fmt: skip
    """The canonical optimum of one tile into ``kept_rows``; False: hand the tile back.

    Phase 0, both fills: an exactly-``n`` optimum, from :func:`_start` then the deficit by
    shortest paths; its duals are ``u_i = potential[1 + i]``, ``v_j = -potential[m + 1 +
    j]``. For ``fill="at_most"`` that mask is at-most optimal iff it has at-most duals:
    where ``min u + min v >= 0`` the shift ``(u - min u, v + min u)`` is one (every line is
    full, so no zero condition applies: spec T2), else :func:`_at_most_duals` decides.
    Where keeping fewer is strictly better, phase 1: successive shortest paths from zero
    flow (row potentials 0, column ``j`` at minus its largest score), stopping before the
    first path of cost ``>= 0``, and :func:`_at_most_duals`. Then the canonical pass
    (:func:`_canonical`; with ``Z`` for the at-most fill) on the duals in ``distance``.
    (Written as a loop over the phases so that each step has one call site: the CUDA
    compiler inlines every call, and the kernel's size is its compile time.)
    """
    if n == 0:
        return True
    phase = 0
    while True:
        if phase == 0:
            _start(w, m, n, potential, kept_rows, kept_columns, row_count, column_count)
            units = n * m
            for i in range(m):
                units -= row_count[i]
        else:
            for i in range(m):
                kept_rows[i] = _ZERO
                kept_columns[i] = _ZERO
                row_count[i] = 0
                column_count[i] = 0
                potential[1 + i] = 0
            for j in range(m):
                largest = w[j]
                for i in range(1, m):
                    if w[i * m + j] > largest:
                        largest = w[i * m + j]
                potential[m + 1 + j] = -largest
            units = n * m
        pushed = _augment_paths(w, m, n, units, phase == 1, potential, distance, parent,
                                kept_rows, kept_columns, row_count, column_count)  # fmt: skip
        if pushed < 0 or (phase == 0 and pushed < units):
            return False
        certified = False
        if phase == 0:
            lowest_u = potential[1]
            highest_column = potential[m + 1]  # min v = -max potential(c_j)
            for i in range(1, m):
                if potential[1 + i] < lowest_u:
                    lowest_u = potential[1 + i]
                if potential[m + 1 + i] > highest_column:
                    highest_column = potential[m + 1 + i]
            shift = lowest_u if at_most else 0
            certified = not at_most or lowest_u - highest_column >= 0
            for i in range(m):
                distance[1 + i] = potential[1 + i] - shift
                distance[m + 1 + i] = potential[m + 1 + i] - shift
        if not certified:
            certified = _at_most_duals(w, m, n, kept_rows, row_count, column_count, distance)
        if certified:
            break
        if phase == 1:
            return False
        phase = 1
    _canonical(w, m, n, distance, kept_rows, kept_columns, tight_rows, tight_columns,
               row_count, column_count, at_most, queue, parent)  # fmt: skip
    return True


#: Tiles up to this size are solved with ``m`` a compile-time constant (loops unrolled);
#: larger ones with ``m`` a run-time value (an unrolled 64 x 64 solver is a very large
#: kernel to compile).
UNROLLED_MAX_M = 8


@cuda.jit(device=True)
def _solve_tile(bits, fraction_bits, m, n, max_bits, at_most, tile, mask, w, potential,
                distance, parent, queue, kept_rows, kept_columns, tight_rows, tight_columns,
                row_count, column_count):  # fmt: skip
    """Steps 1-4 for one tile (row-major tile number ``tile``); its status."""
    tile_columns = bits.shape[1] // m
    r0 = (tile // tile_columns) * m
    c0 = (tile % tile_columns) * m
    code = _load_units(bits, fraction_bits, m, max_bits, r0, c0, w)
    if code != SOLVED:
        return code
    for i in range(m):
        kept_rows[i] = _ZERO
        kept_columns[i] = _ZERO
        row_count[i] = 0
        column_count[i] = 0
    if not _solve(w, m, n, at_most, potential, distance, parent, queue, kept_rows,
                  kept_columns, tight_rows, tight_columns, row_count, column_count):  # fmt: skip
        return TOO_WIDE
    for i in range(m):
        for j in range(m):
            mask[r0 + i, c0 + j] = ((kept_rows[i] >> np.uint64(j)) & _ONE) != _ZERO
    return SOLVED


@functools.cache
def tile_kernel(m: int):
    """The kernel for ``m x m`` tiles (compiled on first launch; per-thread arrays sized
    for ``m``).

    ``kernel[blocks, THREADS_PER_BLOCK](bits, fraction_bits, m, n, max_bits, at_most,
    mask, status, counts)``: ``bits`` the scores' IEEE bits (2-D uint32 for float32,
    uint64 for float64, any strides), one thread per tile in row-major tile order; writes
    the tile's entries of ``mask`` (bool, the shape of ``bits``) where it solves the tile,
    ``status[tile]`` always, and counts the tiles it does not solve in ``counts[0]`` and
    those with NaN or an infinity in ``counts[1]``. ``m`` is passed again at launch: the
    kernel reads it there when ``m > UNROLLED_MAX_M``.
    """
    entries = m * m
    nodes = 2 * m + 2
    width = m
    unrolled = m <= UNROLLED_MAX_M

    @cuda.jit
    def kernel(bits, fraction_bits, size, n, max_bits, at_most, mask, status, counts):
        tile = cuda.grid(1)
        if tile >= status.shape[0]:
            return
        w = cuda.local.array(entries, np.int64)
        potential = cuda.local.array(nodes, np.int64)
        distance = cuda.local.array(nodes, np.int64)
        parent = cuda.local.array(nodes, np.int64)
        queue = cuda.local.array(nodes, np.int64)
        kept_rows = cuda.local.array(width, np.uint64)
        kept_columns = cuda.local.array(width, np.uint64)
        tight_rows = cuda.local.array(width, np.uint64)
        tight_columns = cuda.local.array(width, np.uint64)
        row_count = cuda.local.array(width, np.int64)
        column_count = cuda.local.array(width, np.int64)
        if unrolled:
            code = _solve_tile(bits, fraction_bits, width, n, max_bits, at_most, tile, mask, w,
                               potential, distance, parent, queue, kept_rows, kept_columns,
                               tight_rows, tight_columns, row_count, column_count)  # fmt: skip
        else:
            code = _solve_tile(bits, fraction_bits, size, n, max_bits, at_most, tile, mask, w,
                               potential, distance, parent, queue, kept_rows, kept_columns,
                               tight_rows, tight_columns, row_count, column_count)  # fmt: skip
        status[tile] = code
        if code != SOLVED:
            cuda.atomic.add(counts, 0, 1)
            if code == NOT_FINITE:
                cuda.atomic.add(counts, 1, 1)

    return kernel


# ----------------------------------------------------------------------------
# Plumbing of the driver: dtypes the kernel does not decode, tiles it hands back
# ----------------------------------------------------------------------------


@cuda.jit
def convert(values, out):
    """``out = values`` elementwise (float16, bool, integers to float32 or float64: exact
    by the driver's choice of ``out``'s dtype)."""
    index = cuda.grid(1)
    columns = values.shape[1]
    if index < values.shape[0] * columns:
        out[index // columns, index % columns] = values[index // columns, index % columns]


@cuda.jit
def count_outside(values, low, high, outside):
    """Count the entries of ``values`` below ``low`` or above ``high`` into ``outside[0]``."""
    index = cuda.grid(1)
    columns = values.shape[1]
    if index < values.shape[0] * columns:
        value = values[index // columns, index % columns]
        if value < low or value > high:
            cuda.atomic.add(outside, 0, 1)


@cuda.jit
def gather_tiles(values, tiles, m, out):
    """``out[k * m + i, j]`` = entry ``(i, j)`` of tile ``tiles[k]`` (row-major tile order)."""
    index = cuda.grid(1)
    if index < out.shape[0] * m:
        k = index // (m * m)
        i = (index // m) % m
        j = index % m
        tile_columns = values.shape[1] // m
        r0 = (tiles[k] // tile_columns) * m
        c0 = (tiles[k] % tile_columns) * m
        out[k * m + i, j] = values[r0 + i, c0 + j]


@cuda.jit
def scatter_tiles(kept, tiles, m, mask):
    """The inverse of :func:`gather_tiles`, into ``mask``."""
    index = cuda.grid(1)
    if index < kept.shape[0] * m:
        k = index // (m * m)
        i = (index // m) % m
        j = index % m
        tile_columns = mask.shape[1] // m
        r0 = (tiles[k] // tile_columns) * m
        c0 = (tiles[k] % tile_columns) * m
        mask[r0 + i, c0 + j] = kept[k * m + i, j]
