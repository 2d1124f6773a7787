"""Numba kernels for transposable N:M masks (exact, brute force and greedy).

The fast twin of :mod:`nmref.flow` and of the brute-force / greedy references
in :mod:`nmref.transposable`; tested to return identical masks. Every jitted
callee lives in this file, so ``cache=True`` cannot serve a stale kernel. No
``fastmath``; ``parallel`` only in the ``*_parallel`` drivers, whose tiles are
independent (each thread runs the same per-tile code, so the result does not
depend on the thread count; tested).

Exact arithmetic
----------------
Every tile is first mapped to **exact int64 units**: with ``e`` the exponent
of the lowest significand bit over the tile's nonzero scores (float64
significands are stripped of trailing zeros first), ``unit = score * 2**-e``
is an integer. When the largest unit needs more than :func:`max_unit_bits`
bits, or a potential would leave ``POTENTIAL_LIMIT``, the tile is reported back
(status 1) and solved by the Python-int reference instead, so no answer ever
depends on rounding or overflow.

Tile status codes: 0 solved here; 1 dynamic range too wide for int64 (solve
exactly in Python); 2 NaN or infinity in the tile (the caller raises).

Speed notes
-----------
The exact kernel loads and starts blocks of tiles one tile per vector lane,
with 2-D ``(entry, lane)`` arrays; the hot loops take no array slices, because
every slice is a new array whose reference count Numba updates atomically
(slices cost the 4:8 kernel ~15%), and for the same reason the per-tile solver
gets its per-node state as one 2-D array (every array argument is refcounted on
every call); indices that are not loop variables are unsigned where it
matters, so Numba emits no negative-index wraparound code (~12% in the direct
moves). Figures: ``benchmarks/bench_transposable.py``.
"""

from __future__ import annotations

import math

import numba
import numpy as np

SOLVED = 0
TOO_WIDE = 1
NOT_FINITE = 2
# Solved exactly from truncated units plus a certificate (mask and potentials
# exact; the kept sum in units is not, the caller recomputes it).
SOLVED_TRUNCATED = 3

# Potentials beyond this make a tile fall back to Python (see _ssp_tile).
POTENTIAL_LIMIT = np.int64(1) << np.int64(58)
# Below every key of the start's selections: with max_unit_bits, |w - u - v|
# < 2**(60 - b) and the keys shifted left by b = ceil(log2 m) stay below 2**60.
BELOW_ALL = -(np.int64(1) << np.int64(62))
# Subtracted from kept entries in the direct moves (|w - u|, |w - v| < 2**58), so
# every kept entry ranks below every dropped one.
KEPT_PENALTY = np.int64(1) << np.int64(60)
# Rows of the per-node state of _ssp_tile: one 2-D array instead of one
# array per field, because Numba updates the reference count of every array
# argument (atomically) on each call.
_ROW_POTENTIAL, _ROW_DISTANCE, _ROW_REACHED, _ROW_PARENT, _ROW_SETTLED, _ROW_KEPT = range(6)
_COLUMN_POTENTIAL, _COLUMN_DISTANCE, _COLUMN_REACHED, _COLUMN_PARENT = range(6, 10)
_COLUMN_SETTLED, _COLUMN_KEPT = 10, 11
# Tiles whose start is computed together, one per vector lane (_start_lanes).
START_LANES = 32


def max_unit_bits(m: int) -> int:
    """Largest unit bit length accepted by the kernels: ``max|unit| < 2**62 / (16 m^2)``.

    Sums of up to ``2 m^2`` units (kept sums, path costs) then stay far below
    2**63. Potentials are additionally guarded at run time (``POTENTIAL_LIMIT``
    in :func:`_ssp_tile`), so int64 overflow cannot happen silently.
    """
    return 62 - (4 + 2 * max(1, (m - 1).bit_length()))


# ----------------------------------------------------------------------------
# Loading a tile as exact integers
# ----------------------------------------------------------------------------

# De Bruijn table for counting trailing zeros of a 64-bit power of two.
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DE_BRUIJN_TABLE = np.array(
    [
        0,
        1,
        48,
        2,
        57,
        49,
        28,
        3,
        61,
        58,
        50,
        42,
        38,
        29,
        17,
        4,
        62,
        55,
        59,
        36,
        53,
        51,
        43,
        22,
        45,
        39,
        33,
        30,
        24,
        18,
        12,
        5,
        63,
        47,
        56,
        27,
        60,
        41,
        37,
        16,
        54,
        35,
        52,
        21,
        44,
        32,
        23,
        11,
        46,
        26,
        40,
        15,
        34,
        20,
        31,
        10,
        25,
        14,
        19,
        9,
        13,
        8,
        7,
        6,
    ],
    dtype=np.int64,
)


@numba.njit(cache=True, nogil=True, inline="always")
def _trailing_zeros(x):  # pragma: no cover - compiled
    """Number of trailing zero bits of a nonzero uint64."""
    lowest = x & (~x + np.uint64(1))
    return _DE_BRUIJN_TABLE[(lowest * _DE_BRUIJN) >> np.uint64(58)]


@numba.njit(cache=True, nogil=True)
def _load_tile(
    bits, r0, c0, m, fraction_bits, max_bits, significand, scale, units
):  # pragma: no cover
    """Decode the IEEE bits of the tile at ``(r0, c0)`` into exact int64 units.

    ``bits`` is a float32 array viewed as uint32 (``fraction_bits=23``) or a
    float64 array viewed as uint64 (``52``). Every finite float is
    ``significand * 2**scale`` with an integer significand; the tile's units are
    those significands shifted to the tile's lowest set bit. Returns
    ``(status, exponent)`` with ``scores = units * 2**exponent`` exactly.
    """
    strip_zeros = fraction_bits > 23
    exponent_mask = (1 << (8 if fraction_bits == 23 else 11)) - 1
    bias = exponent_mask // 2 + fraction_bits
    fraction_mask = (np.uint64(1) << np.uint64(fraction_bits)) - np.uint64(1)
    lowest = 1 << 30
    highest = -(1 << 30)
    for i in range(m):
        for j in range(m):
            word = np.uint64(bits[r0 + i, c0 + j])
            exponent_field = np.int64(word >> np.uint64(fraction_bits)) & exponent_mask
            if exponent_field == exponent_mask:  # NaN or +-inf
                return NOT_FINITE, 0
            fraction = word & fraction_mask
            if exponent_field == 0:
                value_scale = 1 - bias  # subnormal (or zero)
                whole = fraction
            else:
                value_scale = exponent_field - bias
                whole = fraction | (np.uint64(1) << np.uint64(fraction_bits))
            k = i * m + j
            if whole == 0:
                significand[k] = 0
                scale[k] = 0
                continue
            # Upper bound of the top bit (exact for normal numbers).
            top = value_scale + fraction_bits
            if strip_zeros:
                # Only float64 needs this: it lets 53-bit significands with few
                # set bits (floats that came from float32 or integers) fit.
                trailing = _trailing_zeros(whole)
                whole >>= np.uint64(trailing)
                value_scale += trailing
            if value_scale < lowest:
                lowest = value_scale
            if top > highest:
                highest = top
            negative = (word >> np.uint64(8 * (4 if fraction_bits == 23 else 8) - 1)) != 0
            significand[k] = -np.int64(whole) if negative else np.int64(whole)
            scale[k] = value_scale
    if highest < lowest:  # all zero
        for k in range(m * m):
            units[k] = 0
        return SOLVED, 0
    if highest - lowest + 1 > max_bits:
        return TOO_WIDE, lowest
    for k in range(m * m):
        units[k] = significand[k] << (scale[k] - lowest) if significand[k] != 0 else 0
    return SOLVED, lowest


# ----------------------------------------------------------------------------
# Exact solver: successive shortest paths + canonical tie pass (nmref.flow)
# ----------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _load_lanes(
    bits,
    fraction_bits,
    m,
    max_bits,
    r0s,
    c0s,
    block_size,
    words,
    significand,
    scale,
    lowest,
    highest,
    not_finite,
    w_lanes,
):  # pragma: no cover
    """:func:`_load_tile` for a block of tiles at once, one tile per vector lane.

    ``w_lanes[i * m + j, t]`` gets entry ``(i, j)`` of the tile at
    ``(r0s[t], c0s[t])`` in units, for every lane whose tile fits int64 units
    (0 elsewhere). Per lane, ``lowest`` and ``highest`` are the bounds
    :func:`_load_tile` computes (``highest < lowest``: all zero) and
    ``not_finite`` flags NaN or infinity, so the caller decides each tile's
    status exactly as :func:`_load_tile` would. Lanes from ``block_size`` on
    hold an all-zero tile. Branch-free, so the loops over lanes vectorise.
    """
    lanes = w_lanes.shape[1]
    strip_zeros = fraction_bits > 23
    exponent_mask = (1 << (8 if fraction_bits == 23 else 11)) - 1
    bias = exponent_mask // 2 + fraction_bits
    fraction_mask = (np.uint64(1) << np.uint64(fraction_bits)) - np.uint64(1)
    sign_shift = np.uint64(8 * (4 if fraction_bits == 23 else 8) - 1)
    implicit = np.uint64(1) << np.uint64(fraction_bits)
    for t in range(block_size):
        r0 = r0s[t]
        c0 = c0s[t]
        lane = np.uint64(t)
        for i in range(m):
            row = np.uint64(r0 + i)
            for j in range(m):
                words[np.uint64(i * m + j), lane] = np.uint64(bits[row, np.uint64(c0 + j)])
    for t in range(block_size, lanes):
        for k in range(m * m):
            words[k, t] = 0
    for t in range(lanes):
        lowest[t] = 1 << 30
        highest[t] = -(1 << 30)
        not_finite[t] = 0
    for k in range(m * m):
        for t in range(lanes):
            word = words[k, t]
            exponent_field = np.int64(word >> np.uint64(fraction_bits)) & exponent_mask
            not_finite[t] |= np.int64(exponent_field == exponent_mask)
            normal = np.uint64(exponent_field != 0)
            whole = (word & fraction_mask) | (normal * implicit)
            value_scale = max(exponent_field, 1) - bias
            top = value_scale + fraction_bits
            if strip_zeros:
                # Trailing zeros by binary search, without branches.
                for step in (32, 16, 8, 4, 2, 1):
                    low_bits = (np.uint64(1) << np.uint64(step)) - np.uint64(1)
                    low_zero = np.uint64((whole & low_bits) == 0)
                    whole >>= low_zero * np.uint64(step)
                    value_scale += np.int64(low_zero) * step
            nonzero = whole != 0
            lowest[t] = min(lowest[t], value_scale if nonzero else 1 << 30)
            highest[t] = max(highest[t], top if nonzero else -(1 << 30))
            negative = np.int64(word >> sign_shift)
            magnitude = np.int64(whole)
            significand[k, t] = (magnitude ^ -negative) + negative
            scale[k, t] = value_scale
    for k in range(m * m):
        for t in range(lanes):
            fits = np.int64(highest[t] - lowest[t] + 1 <= max_bits) * (1 - not_finite[t])
            # Clamped so that zeros and unused lanes never shift out of range.
            shift = min(max(scale[k, t] - lowest[t], 0), 63)
            w_lanes[k, t] = (significand[k, t] << shift) * fits


@numba.njit(cache=True, nogil=True)
def _selection_network(size, wire):  # pragma: no cover
    """Comparators of Batcher's odd-even merge sort on ``size`` wires (a power
    of two) that decide output ``wire``, in order, as rows ``(a, b)``, a < b.

    Sorting descending (the larger value goes to ``a``), output ``wire`` then
    holds the ``wire``-th largest input (0 = the largest). Comparators that
    cannot reach ``wire`` are left out (a backward pass over the network).
    """
    pairs = np.empty((max(1, size * size), 2), np.int64)
    count = 0
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs[count, 0] = i + j
                        pairs[count, 1] = i + j + k
                        count += 1
            k //= 2
        p *= 2
    needed = np.zeros(size, np.bool_)
    needed[wire] = True
    used = np.zeros(count, np.bool_)
    for c in range(count - 1, -1, -1):
        a = pairs[c, 0]
        b = pairs[c, 1]
        if needed[a] or needed[b]:
            used[c] = True
            needed[a] = True
            needed[b] = True
    return pairs[:count][used]


@numba.njit(cache=True, nogil=True, inline="always")
def _select_lanes(sort, network):  # pragma: no cover
    """Run ``network`` on the wires ``sort[w, :]``, all lanes at once."""
    for c in range(network.shape[0]):
        a = network[c, 0]
        b = network[c, 1]
        for t in range(sort.shape[1]):
            x = sort[a, t]
            y = sort[b, t]
            sort[a, t] = max(x, y)
            sort[b, t] = min(x, y)


@numba.njit(cache=True, nogil=True)
def _start_lanes(
    w_lanes, m, n, network, sort, key_lanes, kept_lanes, row_potential, column_potential, count
):  # pragma: no cover
    """The start of :func:`_ssp_tile` for a block of tiles, one tile per lane.

    ``w_lanes[i * m + j, t]`` is entry ``(i, j)`` of tile ``t``.
    Duals first: ``u[i]`` is the n-th largest of row ``i``. Then every column
    keeps its ``n`` largest by ``w - u`` (ties: lower row) and ``v[j]`` is the
    n-th of them; then every over-full row keeps its ``n`` best kept entries
    by ``w - v`` (ties: lower column) and ``u[i]`` is the n-th of them. This
    partial b-matching satisfies complementary slackness, so only its deficit
    needs augmenting paths. Keys carry the tie-break in their low
    ``index_bits`` bits (``(key << index_bits) | (m - 1 - index)``, all
    distinct), so a selection network finds the n-th key and a comparison the
    kept set. Outputs ``kept_lanes`` (0/1), ``row_potential[i, t]`` (``u``)
    and ``column_potential[j, t]`` (``-v``).
    """
    lanes = w_lanes.shape[1]
    size = sort.shape[0]
    wire = max(n - 1, 0)
    index_bits = np.int64(0)
    while (np.int64(1) << index_bits) < m:
        index_bits += 1
    # --- duals first: u[i] = the n-th largest of row i (the largest if n == 0)
    for i in range(m):
        for j in range(size):
            for t in range(lanes):
                sort[j, t] = w_lanes[i * m + j, t] if j < m else BELOW_ALL
        _select_lanes(sort, network)
        for t in range(lanes):
            row_potential[i, t] = sort[wire, t]
    # --- every column keeps its n largest by w - u (ties: lower row) --------
    for i in range(m):
        for j in range(m):
            for t in range(lanes):
                key_lanes[i * m + j, t] = (
                    (w_lanes[i * m + j, t] - row_potential[i, t]) << index_bits
                ) | (m - 1 - i)
    kept_any = np.int64(n > 0)
    for j in range(m):
        for i in range(size):
            for t in range(lanes):
                sort[i, t] = key_lanes[i * m + j, t] if i < m else BELOW_ALL
        _select_lanes(sort, network)
        for t in range(lanes):
            column_potential[j, t] = -(sort[wire, t] >> index_bits)
        for i in range(m):
            for t in range(lanes):
                kept_lanes[i * m + j, t] = (
                    np.int64(key_lanes[i * m + j, t] >= sort[wire, t]) * kept_any
                )
    if n == 0:
        return
    # --- every over-full row keeps its n best kept entries by w - v ---------
    for i in range(m):
        for j in range(size):
            for t in range(lanes):
                if j < m:
                    # Entries the row does not keep sort below every kept one.
                    key = ((w_lanes[i * m + j, t] + column_potential[j, t]) << index_bits) | (
                        m - 1 - j
                    )
                    key = key if kept_lanes[i * m + j, t] != 0 else BELOW_ALL
                    key_lanes[i * m + j, t] = key
                    sort[j, t] = key
                else:
                    sort[j, t] = BELOW_ALL
        _select_lanes(sort, network)
        # A row with at most n kept entries keeps them all (its n-th key is
        # then its last kept one or lower) and keeps its u.
        for t in range(lanes):
            count[t] = 0
        for j in range(m):
            for t in range(lanes):
                count[t] += kept_lanes[i * m + j, t]
        for t in range(lanes):
            nth = sort[wire, t]
            row_potential[i, t] = (nth >> index_bits) if count[t] > n else row_potential[i, t]
        for j in range(m):
            for t in range(lanes):
                kept_lanes[i * m + j, t] *= np.int64(key_lanes[i * m + j, t] >= sort[wire, t])


@numba.njit(cache=True, nogil=True, inline="always")
def _settle_nearest(nodes, reached, settled, distance, nearest, unreached):  # pragma: no cover
    """Settle the lowest lane of ``nodes[reached]`` at distance ``nearest``; return it.

    ``reached``, ``settled`` and ``distance`` are rows of :func:`_ssp_tile`'s
    state for one side (rows or columns) whose minimum is ``nearest``.
    """
    lane = 0
    while nodes[reached, lane] != nearest:
        lane += 1
    nodes[settled, lane] = 1
    nodes[distance, lane] = nearest
    nodes[reached, lane] = unreached
    return lane


@numba.njit(cache=True, nogil=True)
def _ssp_tile(w, w_t, kept, kept_t, m, n, width, potential, nodes):  # pragma: no cover
    """Successive shortest paths on one tile (see nmref.flow.successive_shortest_paths).

    Tile ``w[i * width + j]`` (int64 units), ``kept`` (int64 0/1) and their
    column-major copies ``w_t``/``kept_t`` are padded to ``width`` lanes
    (a multiple of 16): padded entries are kept in ``kept`` and dropped in
    ``kept_t``, so every relaxation finds them blocked, and the relaxation
    loops have a trip count LLVM vectorises. ``potential`` (2m+2): node 0
    source, 1..m rows, m+1..2m columns, 2m+1 sink; on return
    ``u[i] = potential[1 + i]`` and ``v[j] = -potential[m + 1 + j]`` certify
    ``kept`` (kept entries have ``w >= u + v``, dropped ones ``w <= u + v``).

    Differs from the teaching version only in the start: instead of an empty
    flow it starts from the partial b-matching of :func:`_start_lanes` passed
    in ``kept``, ``potential`` and the kept counts ``nodes[_ROW_KEPT]`` and
    ``nodes[_COLUMN_KEPT]``, which already satisfies complementary slackness,
    so only the deficit, a few of the ``n m`` units on random data, needs
    augmenting paths. The source and sink potentials are reset before every
    Dijkstra (arcs into the source and out of the sink never lie on a
    shortest source-sink path), so the only invariant to keep is non-negative
    reduced cost on row/column arcs. The loops use arithmetic (min, max,
    multiply) instead of branches, because mispredicted branches dominated on
    random data, and run over all ``width`` lanes where they can, so that
    they vectorise.
    ``nodes`` (int64, 12 x ``width``) holds the per-row and per-column state
    (rows ``_ROW_*`` and ``_COLUMN_*``: potential, distance, tentative
    distance, parent, settled, kept count).
    """
    for i in range(width):
        nodes[_ROW_POTENTIAL, i] = potential[1 + i] if i < m else 0
        nodes[_COLUMN_POTENTIAL, i] = potential[m + 1 + i] if i < m else 0
        nodes[_ROW_PARENT, i] = -1
        nodes[_COLUMN_PARENT, i] = 0
    flow = 0
    for i in range(m):
        flow += nodes[_ROW_KEPT, i]
    # --- direct moves: a deficit column takes its best dropped entry when that
    # entry's row has room (lowering v keeps complementary slackness); then the
    # same for deficit rows. These are the length-one augmenting paths, found
    # without a Dijkstra.
    for j in range(m):
        column = np.uint64(j * width)
        while nodes[_COLUMN_KEPT, j] < n:
            # The best dropped entry (kept ones sink below every dropped one).
            best_row = np.int64(0)
            best_value = BELOW_ALL
            for i in range(m):
                k = column + np.uint64(i)
                value = w_t[k] - nodes[_ROW_POTENTIAL, i] - kept_t[k] * KEPT_PENALTY
                best_row += (i - best_row) * np.int64(value > best_value)
                best_value = max(value, best_value)
            if nodes[_ROW_KEPT, best_row] >= n:
                break
            kept[np.uint64(best_row * width + j)] = 1
            kept_t[column + np.uint64(best_row)] = 1
            nodes[_ROW_KEPT, best_row] += 1
            nodes[_COLUMN_KEPT, j] += 1
            flow += 1
            nodes[_COLUMN_POTENTIAL, j] = -best_value
    for i in range(m):
        row = np.uint64(i * width)
        while nodes[_ROW_KEPT, i] < n:
            best_column = np.int64(0)
            best_value = BELOW_ALL
            for j in range(m):
                k = row + np.uint64(j)
                value = w[k] + nodes[_COLUMN_POTENTIAL, j] - kept[k] * KEPT_PENALTY
                best_column += (j - best_column) * np.int64(value > best_value)
                best_value = max(value, best_value)
            if nodes[_COLUMN_KEPT, best_column] >= n:
                break
            kept[row + np.uint64(best_column)] = 1
            kept_t[np.uint64(best_column * width + i)] = 1
            nodes[_ROW_KEPT, i] += 1
            nodes[_COLUMN_KEPT, best_column] += 1
            flow += 1
            nodes[_ROW_POTENTIAL, i] = best_value
    # --- successive shortest paths for the rest ------------------------------
    unreached = np.int64(1) << np.int64(62)  # above every distance (max_unit_bits)
    while flow < n * m:
        # Overflow guard: with |potential| <= 2**58 and |w| < 2**54 every
        # distance and candidate of this Dijkstra stays below 2**62. Should a
        # tile ever exceed it, give it back (the caller solves it in Python).
        # All loops below run over every lane and without branches, so they
        # vectorise; padding lanes (potential 0) are masked out by ``real``.
        over = np.int64(0)
        source_potential = -unreached
        sink_potential = unreached
        for i in range(width):
            row_potential = nodes[_ROW_POTENTIAL, i]
            column_potential = nodes[_COLUMN_POTENTIAL, i]
            over |= np.int64(abs(row_potential) > POTENTIAL_LIMIT)
            over |= np.int64(abs(column_potential) > POTENTIAL_LIMIT)
            # Source/sink potentials that make their arcs' reduced costs >= 0.
            real = np.int64(i < m)
            row_deficit = real * np.int64(nodes[_ROW_KEPT, i] < n)
            column_deficit = real * np.int64(nodes[_COLUMN_KEPT, i] < n)
            source_potential = max(source_potential, row_potential - (1 - row_deficit) * unreached)
            sink_potential = min(
                sink_potential, column_potential + (1 - column_deficit) * unreached
            )
        if over:
            return False
        # ``*_REACHED`` hold tentative distances of unsettled nodes (unreached
        # and settled ones sit at ``unreached``), so picking the next node is a
        # plain minimum scan.
        for i in range(width):
            nodes[_ROW_SETTLED, i] = 0
            nodes[_COLUMN_SETTLED, i] = 0
            nodes[_COLUMN_REACHED, i] = unreached
            deficit = np.int64(i < m) * np.int64(nodes[_ROW_KEPT, i] < n)
            from_source = source_potential - nodes[_ROW_POTENTIAL, i]
            nodes[_ROW_REACHED, i] = deficit * from_source + (1 - deficit) * unreached
            nodes[_ROW_PARENT, i] = -1
        sink_reached = unreached
        sink_parent = -1
        sink_distance = unreached
        while True:
            # Next node: the nearest; ties go to rows, then columns, then the sink.
            best_row_distance = unreached
            best_column_distance = unreached
            for i in range(width):
                best_row_distance = min(best_row_distance, nodes[_ROW_REACHED, i])
                best_column_distance = min(best_column_distance, nodes[_COLUMN_REACHED, i])
            best_distance = min(min(best_row_distance, best_column_distance), sink_reached)
            if best_row_distance == best_distance:
                i = _settle_nearest(
                    nodes, _ROW_REACHED, _ROW_SETTLED, _ROW_DISTANCE, best_distance, unreached
                )
                # A row: arcs to the columns of its dropped entries.
                base = best_distance + nodes[_ROW_POTENTIAL, i]
                row = np.uint64(i * width)  # unsigned: indexing without wraparound code
                for j in range(width):
                    blocked = kept[row + np.uint64(j)] | nodes[_COLUMN_SETTLED, j]
                    # Real arcs have candidate >= 0; a blocked one is lifted to >= unreached.
                    candidate = max(
                        base - w[row + np.uint64(j)] - nodes[_COLUMN_POTENTIAL, j],
                        blocked * unreached,
                    )
                    old = nodes[_COLUMN_REACHED, j]
                    better = np.int64(candidate < old)
                    nodes[_COLUMN_REACHED, j] = min(candidate, old)
                    nodes[_COLUMN_PARENT, j] += (i - nodes[_COLUMN_PARENT, j]) * better
            elif best_column_distance == best_distance:
                j = _settle_nearest(
                    nodes,
                    _COLUMN_REACHED,
                    _COLUMN_SETTLED,
                    _COLUMN_DISTANCE,
                    best_distance,
                    unreached,
                )
                # A column: arcs back to the rows of its kept entries, and to the sink.
                base = best_distance + nodes[_COLUMN_POTENTIAL, j]
                column = np.uint64(j * width)
                for i in range(width):
                    blocked = (1 - kept_t[column + np.uint64(i)]) | nodes[_ROW_SETTLED, i]
                    candidate = max(
                        base + w_t[column + np.uint64(i)] - nodes[_ROW_POTENTIAL, i],
                        blocked * unreached,
                    )
                    old = nodes[_ROW_REACHED, i]
                    better = np.int64(candidate < old)
                    nodes[_ROW_REACHED, i] = min(candidate, old)
                    nodes[_ROW_PARENT, i] += (j - nodes[_ROW_PARENT, i]) * better
                if nodes[_COLUMN_KEPT, j] < n:
                    candidate = base - sink_potential
                    if candidate < sink_reached:
                        sink_reached = candidate
                        sink_parent = j
                        if candidate == best_distance:
                            # Nothing can beat a zero-cost last arc: settle now.
                            sink_distance = candidate
                            break
            else:
                sink_distance = best_distance
                break
        # Over all lanes, without branches, so the loop vectorises; padding
        # lanes keep potential 0.
        for i in range(width):
            real = np.int64(i < m)
            settled = nodes[_ROW_SETTLED, i]
            step = settled * nodes[_ROW_DISTANCE, i] + (1 - settled) * sink_distance
            nodes[_ROW_POTENTIAL, i] += real * step
            settled = nodes[_COLUMN_SETTLED, i]
            step = settled * nodes[_COLUMN_DISTANCE, i] + (1 - settled) * sink_distance
            nodes[_COLUMN_POTENTIAL, i] += real * step
        # Augment: the sink's column gains a unit; walk back keeping the
        # row -> column entries and dropping the column -> row ones.
        j = sink_parent
        nodes[_COLUMN_KEPT, j] += 1
        while True:
            i = nodes[_COLUMN_PARENT, j]
            kept[i * width + j] = 1
            kept_t[j * width + i] = 1
            previous = nodes[_ROW_PARENT, i]
            if previous < 0:
                nodes[_ROW_KEPT, i] += 1
                break
            kept[i * width + previous] = 0
            kept_t[previous * width + i] = 0
            j = previous
        flow += 1
    for i in range(m):
        potential[1 + i] = nodes[_ROW_POTENTIAL, i]
        potential[m + 1 + i] = nodes[_COLUMN_POTENTIAL, i]
        if (
            abs(nodes[_ROW_POTENTIAL, i]) > POTENTIAL_LIMIT
            or abs(nodes[_COLUMN_POTENTIAL, i]) > POTENTIAL_LIMIT
        ):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _truncate_tile(significand, scale, m, max_bits, units, inexact):  # pragma: no cover
    """Floor units of a tile too wide for int64, for the certified path.

    ``significand``/``scale`` are what :func:`_load_tile` decoded. Returns the
    exponent ``e`` of the new units: ``units[k] = floor(score_k / 2**e)``, and
    ``inexact[k]`` says whether the floor dropped nonzero bits.
    """
    lowest = 1 << 30
    highest = -(1 << 30)
    for k in range(m * m):
        if significand[k] != 0:
            top = scale[k] + math.frexp(float(abs(significand[k])))[1] - 1
            if scale[k] < lowest:
                lowest = scale[k]
            if top > highest:
                highest = top
    base = highest + 1 - max_bits
    if base < lowest:
        base = lowest
    for k in range(m * m):
        units[k] = 0
        inexact[k] = False
        magnitude = abs(significand[k])
        if magnitude == 0:
            continue
        shift = scale[k] - base
        if shift >= 0:
            quotient = magnitude << shift
            remainder = np.int64(0)
        elif shift <= -62:
            quotient = np.int64(0)
            remainder = np.int64(1)
        else:
            quotient = magnitude >> (-shift)
            remainder = magnitude & ((np.int64(1) << (-shift)) - 1)
        inexact[k] = remainder != 0
        if significand[k] < 0:
            units[k] = -(quotient + (remainder != 0))  # floor of a negative value
        else:
            units[k] = quotient
    return base


@numba.njit(cache=True, nogil=True)
def _certify_truncated(units, inexact, kept, potential, m):  # pragma: no cover
    """Adjust the potentials until they prove ``kept`` optimal for the true scores.

    With floors ``H`` (``units``) of the true units ``U`` (``H <= U < H + 1``;
    ``U == H`` unless ``inexact``), integer potentials with
    ``u_i + v_j <= H_ij`` on kept entries and ``u_i + v_j >= H_ij + inexact_ij``
    on dropped ones satisfy complementary slackness for ``U`` exactly. These
    are difference constraints, so Bellman-Ford from the current potentials
    finds such potentials or proves there are none (then the tile goes to the
    Python path: its optimum is decided below the truncation, a near tie).
    In node terms: row ``potential[1 + i] = u_i``, column
    ``potential[m + 1 + j] = -v_j``.
    """
    for _ in range(2 * m + 2):
        changed = False
        for i in range(m):
            for j in range(m):
                k = i * m + j
                if kept[k]:
                    bound = potential[m + 1 + j] + units[k]
                    if potential[1 + i] > bound:
                        potential[1 + i] = bound
                        changed = True
                else:
                    bound = potential[1 + i] - units[k] - inexact[k]
                    if potential[m + 1 + j] > bound:
                        potential[m + 1 + j] = bound
                        changed = True
        if not changed:
            for v in range(1, 2 * m + 1):
                if abs(potential[v]) > POTENTIAL_LIMIT:
                    return False
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _canonical_tile(
    w, m, kept, potential, tight, queue, parent_node, parent_entry, truncated, inexact
):  # pragma: no cover
    """Turn the optimal ``kept`` into the canonical (lexicographically greatest) optimum.

    Same pass as nmref.flow.canonical_optimum. Search nodes: rows 0..m-1,
    columns m..2m-1. With ``truncated``, ``w`` are floors of the true units and
    an entry flagged ``inexact`` lies strictly above its floor, so it is never
    tight.
    """
    free_dropped = 0
    for i in range(m):
        for j in range(m):
            slack = w[i * m + j] - potential[1 + i] + potential[m + 1 + j]
            tight[i * m + j] = slack == 0 and not (truncated and inexact[i * m + j])
            if tight[i * m + j] and not kept[i * m + j]:
                free_dropped += 1
    if free_dropped == 0:
        return
    if 2 * m <= 62:
        # Any other optimum differs from ``kept`` by alternating cycles of tight
        # entries (kept: column -> row, dropped: row -> column). Peel nodes
        # without arcs to remaining nodes; if all go, there is no cycle and
        # ``kept`` is the only optimum (the usual case on generic data).
        for v in range(2 * m):
            queue[v] = 0
        for i in range(m):
            for j in range(m):
                k = i * m + j
                if tight[k]:
                    if kept[k]:
                        queue[m + j] |= np.int64(1) << i
                    else:
                        queue[i] |= np.int64(1) << (m + j)
        alive = (np.int64(1) << (2 * m)) - 1
        while alive != 0:
            removed = np.int64(0)
            for v in range(2 * m):
                if queue[v] & alive == 0:
                    removed |= np.int64(1) << v
            removed &= alive
            if removed == 0:
                break
            alive &= ~removed
        if alive == 0:
            return
    for k in range(m * m):
        if kept[k] or not tight[k]:
            continue
        i = k // m
        j = k - i * m
        # A cycle through (i, j) needs a free kept tight entry in column j and in row i.
        possible_column = False
        for a in range(m):
            entry = a * m + j
            if entry > k and kept[entry] and tight[entry]:
                possible_column = True
                break
        possible_row = False
        for b in range(j + 1, m):
            entry = i * m + b
            if kept[entry] and tight[entry]:
                possible_row = True
                break
        if not (possible_column and possible_row):
            continue
        # Breadth-first from column j to row i through free tight entries (> k).
        for v in range(2 * m):
            parent_node[v] = -2
        parent_node[m + j] = -1
        head = 0
        tail = 0
        queue[tail] = m + j
        tail += 1
        found = False
        while head < tail and not found:
            v = queue[head]
            head += 1
            for other in range(m):
                if v >= m:  # column b -> row a through a kept entry
                    a = other
                    b = v - m
                    entry = a * m + b
                    target = a
                    usable = kept[entry]
                else:  # row a -> column b through a dropped entry
                    a = v
                    b = other
                    entry = a * m + b
                    target = m + b
                    usable = not kept[entry]
                if not usable or not tight[entry] or entry <= k:
                    continue
                if parent_node[target] != -2:
                    continue
                parent_node[target] = v
                parent_entry[target] = entry
                if target == i:
                    found = True
                    break
                queue[tail] = target
                tail += 1
        if found:
            kept[k] = True
            v = i
            while parent_node[v] != -1:
                entry = parent_entry[v]
                kept[entry] = not kept[entry]
                v = parent_node[v]


@numba.njit(cache=True, nogil=True)
def _exact_range(
    bits,
    fraction_bits,
    n,
    m,
    max_bits,
    tile_list,
    first,
    last,
    mask,
    status,
    kept_units,
    exponents,
    row_potentials,
    column_potentials,
):  # pragma: no cover
    """Solve the tiles ``tile_list[first:last]`` (row-major tile numbers) exactly.

    Tiles go in blocks of ``START_LANES``: a block is loaded
    (:func:`_load_lanes`) and started (:func:`_start_lanes`) all at once, one
    tile per vector lane, because those steps are the same branch-free
    arithmetic for every tile; then each tile is finished on its own
    (:func:`_ssp_tile`, :func:`_canonical_tile`). A tile too wide for int64
    units is solved on floor units and kept only if :func:`_certify_truncated`
    proves the result exact (status ``SOLVED_TRUNCATED``); otherwise it is
    handed back (``TOO_WIDE``).
    """
    tiles_across = bits.shape[1] // m
    nodes = 2 * m + 2
    lanes = START_LANES
    size = 1
    while size < m:
        size *= 2
    network = _selection_network(size, max(n - 1, 0))
    # Per tile of a block, in the block's tile order:
    block_inexact = np.zeros(lanes * m * m, np.bool_)
    block_code = np.empty(lanes, np.int64)
    block_r0 = np.empty(lanes, np.int64)
    block_c0 = np.empty(lanes, np.int64)
    # Per entry or line, across the block's tiles (lane t = tile t of the block):
    w_lanes = np.zeros((m * m, lanes), np.int64)
    words = np.empty((m * m, lanes), np.uint64)
    significand_lanes = np.empty((m * m, lanes), np.int64)
    scale_lanes = np.empty((m * m, lanes), np.int64)
    lowest = np.empty(lanes, np.int64)
    highest = np.empty(lanes, np.int64)
    not_finite = np.empty(lanes, np.int64)
    key_lanes = np.empty((m * m, lanes), np.int64)
    kept_lanes = np.empty((m * m, lanes), np.int64)
    sort = np.empty((size, lanes), np.int64)
    row_start = np.empty((m, lanes), np.int64)
    column_start = np.empty((m, lanes), np.int64)
    lane_count = np.empty(lanes, np.int64)
    kept = np.empty(m * m, np.bool_)
    tight = np.empty(m * m, np.bool_)
    potential = np.empty(nodes, np.int64)
    units = np.empty(m * m, np.int64)
    inexact = np.zeros(m * m, np.bool_)
    queue = np.empty(2 * m, np.int64)
    parent_node = np.empty(2 * m, np.int64)
    parent_entry = np.empty(2 * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    # The tile again, padded for _ssp_tile, and its solver state (zeroed: the
    # relaxations do arithmetic on the parent rows).
    width = 16 * ((m + 15) // 16)
    w_padded = np.zeros(m * width, np.int64)
    w_t_padded = np.zeros(m * width, np.int64)
    kept_padded = np.ones(m * width, np.int64)  # padding: kept, so never an arc
    kept_t_padded = np.zeros(m * width, np.int64)  # padding: dropped, so never an arc
    nodes = np.zeros((12, width), np.int64)
    for block in range(first, last, lanes):
        block_size = min(lanes, last - block)
        for b in range(block_size):
            t = tile_list[block + b]
            block_r0[b] = (t // tiles_across) * m
            block_c0[b] = (t % tiles_across) * m
        _load_lanes(
            bits,
            fraction_bits,
            m,
            max_bits,
            block_r0,
            block_c0,
            block_size,
            words,
            significand_lanes,
            scale_lanes,
            lowest,
            highest,
            not_finite,
            w_lanes,
        )
        # Each tile's status, as _load_tile decides it; too wide tiles are
        # truncated from their lane's decoded significands into their lane.
        for b in range(block_size):
            t = tile_list[block + b]
            if not_finite[b]:
                code = NOT_FINITE
                exponent = 0
            elif highest[b] < lowest[b]:
                code = SOLVED
                exponent = 0
            elif highest[b] - lowest[b] + 1 > max_bits:
                for k in range(m * m):
                    significand[k] = significand_lanes[k, b]
                    scale[k] = scale_lanes[k, b]
                exponent = _truncate_tile(significand, scale, m, max_bits, units, inexact)
                code = SOLVED_TRUNCATED
                for k in range(m * m):
                    w_lanes[k, b] = units[k]
                    block_inexact[b * m * m + k] = inexact[k]
            else:
                code = SOLVED
                exponent = lowest[b]
            status[t] = code
            exponents[t] = exponent
            block_code[b] = code
        _start_lanes(
            w_lanes,
            m,
            n,
            network,
            sort,
            key_lanes,
            kept_lanes,
            row_start,
            column_start,
            lane_count,
        )
        for b in range(block_size):
            code = block_code[b]
            if code != SOLVED and code != SOLVED_TRUNCATED:
                continue
            t = tile_list[block + b]
            r0 = block_r0[b]
            c0 = block_c0[b]
            truncated = code == SOLVED_TRUNCATED
            if truncated:
                for k in range(m * m):
                    inexact[k] = block_inexact[b * m * m + k]
            # The tile out of its lane, row- and column-major.
            for i in range(m):
                nodes[_ROW_KEPT, i] = 0
                nodes[_COLUMN_KEPT, i] = 0
                potential[1 + i] = row_start[i, b]
                potential[m + 1 + i] = column_start[i, b]
            lane = np.uint64(b)
            for i in range(m):
                for j in range(m):
                    # Unsigned: no negative-index wraparound code in this hot copy.
                    entry = np.uint64(i * m + j)
                    row_major = np.uint64(i * width + j)
                    column_major = np.uint64(j * width + i)
                    keep = kept_lanes[entry, lane]
                    kept_padded[row_major] = keep
                    kept_t_padded[column_major] = keep
                    unit = w_lanes[entry, lane]
                    units[entry] = unit
                    w_padded[row_major] = unit
                    w_t_padded[column_major] = unit
                    nodes[_ROW_KEPT, i] += keep
                    nodes[_COLUMN_KEPT, j] += keep
            ok = _ssp_tile(
                w_padded, w_t_padded, kept_padded, kept_t_padded, m, n, width, potential, nodes
            )
            for i in range(m):
                for j in range(m):
                    kept[np.uint64(i * m + j)] = kept_padded[np.uint64(i * width + j)] != 0
            if ok and truncated:
                ok = _certify_truncated(units, inexact, kept, potential, m)
            if not ok:
                status[t] = TOO_WIDE
                continue
            _canonical_tile(
                units,
                m,
                kept,
                potential,
                tight,
                queue,
                parent_node,
                parent_entry,
                truncated,
                inexact,
            )
            total = np.int64(0)
            for i in range(m):
                row_potentials[t, i] = potential[1 + i]
                column_potentials[t, i] = -potential[m + 1 + i]
                row = np.uint64(r0 + i)
                for j in range(m):
                    keep = kept[np.uint64(i * m + j)]
                    mask[row, np.uint64(c0 + j)] = keep
                    total += units[np.uint64(i * m + j)] * np.int64(keep)
            kept_units[t] = total


@numba.njit(cache=True, nogil=True)
def exact_tiles(
    bits,
    fraction_bits,
    n,
    m,
    max_bits,
    tile_list,
    mask,
    status,
    kept_units,
    exponents,
    row_potentials,
    column_potentials,
):  # pragma: no cover
    """Canonical optimal mask of the listed aligned m x m tiles (one thread).

    Outputs per tile ``t`` (row-major tile number): ``status[t]``, the kept sum
    ``kept_units[t] * 2**exponents[t]`` (exact when the status is ``SOLVED``)
    and the certificate potentials in the same units.
    """
    _exact_range(
        bits,
        fraction_bits,
        n,
        m,
        max_bits,
        tile_list,
        0,
        len(tile_list),
        mask,
        status,
        kept_units,
        exponents,
        row_potentials,
        column_potentials,
    )


@numba.njit(cache=True, nogil=True, parallel=True)
def exact_tiles_parallel(
    bits,
    fraction_bits,
    n,
    m,
    max_bits,
    tile_list,
    chunks,
    mask,
    status,
    kept_units,
    exponents,
    row_potentials,
    column_potentials,
):  # pragma: no cover
    """:func:`exact_tiles` split into ``chunks`` independent ranges of tiles, run in parallel."""
    count = len(tile_list)
    for c in numba.prange(chunks):
        _exact_range(
            bits,
            fraction_bits,
            n,
            m,
            max_bits,
            tile_list,
            count * c // chunks,
            count * (c + 1) // chunks,
            mask,
            status,
            kept_units,
            exponents,
            row_potentials,
            column_potentials,
        )


# ----------------------------------------------------------------------------
# Brute force over a canonical pattern table (first maximum wins)
# ----------------------------------------------------------------------------


# Tiles per block in the enumeration: the pattern loop runs across the tiles of
# a block, which the compiler can vectorise.
ENUMERATION_BLOCK = 64


@numba.njit(cache=True, nogil=True, inline="always")
def _start_with_pattern_zero(row_sums, patterns, m, block, best_sum, best):  # pragma: no cover
    """Make pattern 0 the running best of each of ``block`` tiles."""
    for b in range(block):
        best[b] = 0
        best_sum[b] = 0
        for i in range(m):
            best_sum[b] += row_sums[i, patterns[0, i], b]


@numba.njit(cache=True, nogil=True, inline="always")
def _scan_patterns(row_sums, patterns, m, block, first, total, best_sum, best):  # pragma: no cover
    """Patterns ``first..`` against the running best; strictly greater replaces,
    so the earliest maximal pattern (canonical order) stays."""
    for p in range(first, patterns.shape[0]):
        row = row_sums[0, patterns[p, 0]]
        for b in range(block):
            total[b] = row[b]
        for i in range(1, m):
            row = row_sums[i, patterns[p, i]]
            for b in range(block):
                total[b] += row[b]
        for b in range(block):
            better = total[b] > best_sum[b]
            best_sum[b] = total[b] if better else best_sum[b]
            best[b] = p if better else best[b]


@numba.njit(cache=True, nogil=True, inline="always")
def _unit_row_sums(units, m, n, choice_columns, row_sums, b):  # pragma: no cover
    """``row_sums[i, c, b]``: the kept sum of row ``i`` of a tile under row choice ``c``."""
    for i in range(m):
        for c in range(choice_columns.shape[0]):
            s = np.int64(0)
            for k in range(n):
                s += units[i * m + choice_columns[c, k]]
            row_sums[i, c, b] = s


@numba.njit(cache=True, nogil=True)
def _enumerate_range(
    bits,
    fraction_bits,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    first,
    last,
    mask,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """Best pattern of tiles ``first..last-1``; the first maximum in table order wins.

    ``choice_columns`` (C, >= n) int: the kept columns of each of the
    C = comb(m, n) row patterns; ``patterns`` (K, m) int: for each tile pattern
    the row-pattern index of every row, in the canonical order (so the first
    maximum is the canonical optimum). Tiles go in blocks of
    ``ENUMERATION_BLOCK``: first every row sum of every tile of the block, then
    each pattern's sum for all tiles of the block at once (strictly greater
    replaces, so the earliest maximal pattern stays).
    """
    tiles_across = bits.shape[1] // m
    choice_count = choice_columns.shape[0]
    block = ENUMERATION_BLOCK
    units = np.empty(m * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    row_sums = np.zeros((m, choice_count, block), np.int64)
    total = np.empty(block, np.int64)
    best_sum = np.empty(block, np.int64)
    best = np.empty(block, np.int64)
    for start in range(first, last, block):
        count = min(block, last - start)
        for b in range(count):
            t = start + b
            code, exponent = _load_tile(
                bits,
                (t // tiles_across) * m,
                (t % tiles_across) * m,
                m,
                fraction_bits,
                max_bits,
                significand,
                scale,
                units,
            )
            status[t] = code
            exponents[t] = exponent
            _unit_row_sums(units, m, n, choice_columns, row_sums, b)
        _start_with_pattern_zero(row_sums, patterns, m, block, best_sum, best)
        _scan_patterns(row_sums, patterns, m, block, 1, total, best_sum, best)
        for b in range(count):
            t = start + b
            r0 = (t // tiles_across) * m
            c0 = (t % tiles_across) * m
            _write_pattern(mask, r0, c0, m, n, choice_columns, patterns, best[b])
            kept_units[t] = best_sum[b]


@numba.njit(cache=True, nogil=True)
def float64_exact_binades(m):  # pragma: no cover
    """Widest float32 tile summed exactly in float64, in binades.

    A tile whose largest and smallest nonzero magnitudes have exponent fields
    at most this far apart holds multiples of its smallest value's lowest bit
    below ``2**(binades + 24)`` of them; a sum of up to ``m*m`` such values stays
    below ``2**53`` of them (``carry_bits = max(1, ceil(log2(m*m)))``), so
    float64 adds it exactly.
    """
    carry_bits = 1
    while (1 << carry_bits) < m * m:
        carry_bits += 1
    return 53 - 24 - carry_bits


@numba.njit(cache=True, nogil=True)
def _enumerate_tile_units(
    bits, r0, c0, m, n, max_bits, choice_columns, patterns, significand, scale, units, scratch
):  # pragma: no cover
    """One tile of the enumeration on exact int64 units: ``(status, exponent, best, sum)``.

    ``scratch`` is a :func:`_one_tile_scratch`: a block of one tile for the
    same row sums and pattern scan as :func:`_enumerate_range`.
    """
    row_sums, total, best_sum, best = scratch
    code, exponent = _load_tile(bits, r0, c0, m, 23, max_bits, significand, scale, units)
    if code != SOLVED:
        return code, exponent, 0, np.int64(0)
    _unit_row_sums(units, m, n, choice_columns, row_sums, 0)
    _start_with_pattern_zero(row_sums, patterns, m, 1, best_sum, best)
    _scan_patterns(row_sums, patterns, m, 1, 1, total, best_sum, best)
    return code, exponent, best[0], best_sum[0]


@numba.njit(cache=True, nogil=True)
def _one_tile_scratch(m, choice_count):  # pragma: no cover
    """Buffers of :func:`_enumerate_tile_units`: row sums, total, best sum, best."""
    return (
        np.zeros((m, choice_count, 1), np.int64),
        np.empty(1, np.int64),
        np.empty(1, np.int64),
        np.empty(1, np.int64),
    )


@numba.njit(cache=True, nogil=True)
def _enumerate_float32_range(
    bits,
    floats,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    choice_words,
    first,
    last,
    mask,
    mask_words,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """:func:`_enumerate_range` for float32 scores, summing in float64.

    Same answer as the int64 units (sums are exact, so every comparison is),
    without decoding bits: a block holds up to ``ENUMERATION_BLOCK`` tiles of
    one tile row, loaded column-of-the-tile by column-of-the-tile so that every
    inner loop runs across the tiles of the block and vectorises. A tile that
    spans more than :func:`float64_exact_binades` binades, or holds a
    subnormal, NaN or infinity, is redone on int64 units (:func:`_enumerate_tile_units`). For
    ``m == 4`` the pattern sum is unrolled and a tile row of the mask is
    written as one uint32 (``choice_words``: the row choices as 4 bytes).
    """
    tiles_across = bits.shape[1] // m
    choice_count = choice_columns.shape[0]
    pattern_count = patterns.shape[0]
    block = ENUMERATION_BLOCK
    exact_binades = float64_exact_binades(m)
    no_magnitude = np.uint32(0xFFFFFFFF)
    values = np.zeros((m * m, block), np.float64)
    magnitudes = np.empty((m * m, block), np.uint32)
    row_sums = np.empty((m, choice_count, block), np.float64)
    total = np.empty(block, np.float64)
    best_sum = np.empty(block, np.float64)
    best = np.empty(block, np.int64)
    high = np.empty(block, np.uint32)
    low = np.empty(block, np.uint32)
    units = np.empty(m * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    unit_scratch = _one_tile_scratch(m, choice_count)
    start = first
    while start < last:
        tile_row = start // tiles_across
        count = min(block, last - start, (tile_row + 1) * tiles_across - start)
        r0 = tile_row * m
        first_column = (start - tile_row * tiles_across) * m
        for i in range(m):
            for j in range(m):
                k = i * m + j
                for b in range(count):
                    values[k, b] = np.float64(floats[r0 + i, first_column + b * m + j])
                    magnitudes[k, b] = bits[r0 + i, first_column + b * m + j] & np.uint32(
                        0x7FFFFFFF
                    )
                for b in range(count, block):
                    values[k, b] = 0.0
        # Largest and smallest nonzero magnitude: their bit patterns order like the values.
        for b in range(count):
            high[b] = magnitudes[0, b]
            low[b] = magnitudes[0, b] if magnitudes[0, b] != 0 else no_magnitude
        for k in range(1, m * m):
            for b in range(count):
                x = magnitudes[k, b]
                high[b] = max(high[b], x)
                low[b] = min(low[b], x if x != 0 else no_magnitude)
        for i in range(m):
            for c in range(choice_count):
                target = row_sums[i, c]
                source = values[i * m + choice_columns[c, 0]]
                for b in range(block):
                    target[b] = source[b] if n > 0 else 0.0
                for k in range(1, n):
                    source = values[i * m + choice_columns[c, k]]
                    for b in range(block):
                        target[b] += source[b]
        _start_with_pattern_zero(row_sums, patterns, m, block, best_sum, best)
        # Strictly greater replaces, so the earliest maximal pattern stays.
        if m == 4:
            for p in range(1, pattern_count):
                row0 = row_sums[0, patterns[p, 0]]
                row1 = row_sums[1, patterns[p, 1]]
                row2 = row_sums[2, patterns[p, 2]]
                row3 = row_sums[3, patterns[p, 3]]
                for b in range(block):
                    pattern_sum = (row0[b] + row1[b]) + (row2[b] + row3[b])
                    better = pattern_sum > best_sum[b]
                    best_sum[b] = pattern_sum if better else best_sum[b]
                    best[b] = p if better else best[b]
        else:
            _scan_patterns(row_sums, patterns, m, block, 1, total, best_sum, best)
        for b in range(count):
            t = start + b
            c0 = first_column + b * m
            high_field = np.int64(high[b] >> np.uint32(23))
            low_field = np.int64(low[b] >> np.uint32(23))
            p = best[b]
            if high[b] == 0:  # all zero: the first pattern, sum 0
                status[t] = SOLVED
                exponents[t] = 0
                kept_units[t] = 0
            elif high_field == 255 or low_field == 0 or high_field - low_field > exact_binades:
                code, exponent, p, units_sum = _enumerate_tile_units(
                    bits, r0, c0, m, n, max_bits, choice_columns, patterns,
                    significand, scale, units, unit_scratch,
                )  # fmt: skip
                status[t] = code
                exponents[t] = exponent
                kept_units[t] = units_sum
                if code != SOLVED:
                    continue
            else:
                # The exponent _load_tile would give: the smallest magnitude's lowest bit.
                exponent = low_field - 150
                status[t] = SOLVED
                exponents[t] = exponent
                kept_units[t] = np.int64(math.ldexp(best_sum[b], -exponent))
            if m == 4:
                for i in range(4):
                    mask_words[r0 + i, c0 // 4] = choice_words[patterns[p, i]]
            else:
                _write_pattern(mask, r0, c0, m, n, choice_columns, patterns, p)
        start += count


@numba.njit(cache=True, nogil=True)
def _write_pattern(mask, r0, c0, m, n, choice_columns, patterns, p):  # pragma: no cover
    """Write tile pattern ``p`` of the table into the mask at ``(r0, c0)``."""
    for i in range(m):
        for j in range(m):
            mask[r0 + i, c0 + j] = False
        for k in range(n):
            mask[r0 + i, c0 + choice_columns[patterns[p, i], k]] = True


@numba.njit(cache=True, nogil=True)
def _enumerate_any_range(
    bits,
    floats,
    fraction_bits,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    choice_words,
    first,
    last,
    mask,
    mask_words,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """The float64-sum enumeration for float32 scores, the int64 one otherwise."""
    if fraction_bits == 23:
        _enumerate_float32_range(
            bits, floats, m, n, max_bits, choice_columns, patterns, choice_words,
            first, last, mask, mask_words, status, kept_units, exponents,
        )  # fmt: skip
    else:
        _enumerate_range(
            bits, fraction_bits, m, n, max_bits, choice_columns, patterns,
            first, last, mask, status, kept_units, exponents,
        )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def enumerate_tiles(
    bits,
    floats,
    fraction_bits,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    choice_words,
    mask,
    mask_words,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """Canonical optimum of every tile by enumeration (one thread).

    ``floats`` is ``bits`` viewed as float32 (any float32 array when ``bits``
    are float64's); ``mask_words`` is ``mask`` viewed as uint32 when ``m == 4``.
    """
    tiles = (bits.shape[0] // m) * (bits.shape[1] // m)
    _enumerate_any_range(
        bits, floats, fraction_bits, m, n, max_bits, choice_columns, patterns, choice_words,
        0, tiles, mask, mask_words, status, kept_units, exponents,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True, parallel=True)
def enumerate_tiles_parallel(
    bits,
    floats,
    fraction_bits,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    choice_words,
    chunks,
    mask,
    mask_words,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """:func:`enumerate_tiles` split into ``chunks`` independent ranges run in parallel."""
    tiles = (bits.shape[0] // m) * (bits.shape[1] // m)
    for c in numba.prange(chunks):
        _enumerate_any_range(
            bits, floats, fraction_bits, m, n, max_bits, choice_columns, patterns,
            choice_words, tiles * c // chunks, tiles * (c + 1) // chunks, mask, mask_words,
            status, kept_units, exponents,
        )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def masked_tiles(
    bits, fraction_bits, m, max_bits, mask, status, kept_units, exponents
):  # pragma: no cover
    """Exact kept sum of ``mask`` in every tile, as ``kept_units * 2**exponents``.

    Uses the same tile units as the solvers, so a gap is a difference of
    integers with a common exponent.
    """
    tiles_across = bits.shape[1] // m
    tiles = (bits.shape[0] // m) * tiles_across
    units = np.empty(m * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    for t in range(tiles):
        r0 = (t // tiles_across) * m
        c0 = (t % tiles_across) * m
        code, exponent = _load_tile(
            bits, r0, c0, m, fraction_bits, max_bits, significand, scale, units
        )
        status[t] = code
        exponents[t] = exponent
        total = np.int64(0)
        if code == SOLVED:
            for i in range(m):
                for j in range(m):
                    if mask[r0 + i, c0 + j]:
                        total += units[i * m + j]
        kept_units[t] = total


# ----------------------------------------------------------------------------
# Greedy approximations (Hubara et al. 2021, Sec. 4.2): keep form and prune form
# ----------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _rank(key, m, i):  # pragma: no cover
    """Place of ``key[i]`` in ``key[:m]`` sorted descending, lower index first.

    Counting (O(m), branch-free, a reduction LLVM vectorises) instead of
    sorting: an insertion sort mispredicts its branches on random data.
    """
    x = key[i]
    place = np.int64(0)
    for a in range(m):
        y = key[a]
        place += np.int64(y > x) + np.int64(y == x) * np.int64(a < i)
    return place


@numba.njit(cache=True, nogil=True)
def greedy_tiles(bits, kind, n, m, prune_form, mask):  # pragma: no cover
    """Greedy mask of every tile; the scores must be finite (checked by the caller).

    ``bits`` (uint64) are the scores' bits: of float64 (``kind`` 0), int64
    (1) or uint64 (2) scores. Each becomes an unsigned key that orders like
    the score and is equal exactly where the scores are (float64: -0.0 as
    0.0, negative bits reversed; int64: sign bit flipped).

    Order: descending score, lower flat index first among equals. Keep form
    scans it from the front and keeps an entry while its row and column keep
    fewer than ``n``. Prune form scans it from the back and prunes an entry
    while its row or its column has pruned fewer than ``m - n``. Tiles of up
    to 64 entries get their order by counting ranks (O(m^4), branch-free);
    larger ones by a stable least-significant-digit radix sort of the
    complemented keys (8 passes of one byte, O(m^2) each, no allocation):
    ascending complements are descending scores, and stability keeps the
    lower index first among equals.
    """
    tiles_across = bits.shape[1] // m
    tiles = (bits.shape[0] // m) * tiles_across
    sign = np.uint64(1) << np.uint64(63)
    size = m * m
    tile_keys = np.empty(size, np.uint64)
    sorted_keys = np.empty(size, np.uint64)
    order = np.empty(size, np.int64)
    sorted_order = np.empty(size, np.int64)
    start = np.empty(256, np.int64)
    row_count = np.empty(m, np.int64)
    column_count = np.empty(m, np.int64)
    for t in range(tiles):
        r0 = (t // tiles_across) * m
        c0 = (t % tiles_across) * m
        for i in range(m):
            row = np.uint64(r0 + i)
            for j in range(m):
                b = bits[row, np.uint64(c0 + j)]
                if kind == 0:
                    b *= np.uint64(b != sign)  # -0.0 is 0.0
                    b = ~b if b >= sign else b | sign
                elif kind == 1:
                    b ^= sign
                tile_keys[np.uint64(i * m + j)] = b
        if size <= 64:
            for k in range(size):
                order[_rank(tile_keys, size, k)] = k
        else:
            for k in range(size):
                tile_keys[k] = ~tile_keys[k]
                order[k] = k
            for byte in range(8):
                shift = np.uint64(8 * byte)
                for d in range(256):
                    start[d] = 0
                for k in range(size):
                    start[np.int64((tile_keys[k] >> shift) & np.uint64(255))] += 1
                if start[np.int64((tile_keys[0] >> shift) & np.uint64(255))] == size:
                    continue  # one digit value throughout: this pass would not move anything
                total = np.int64(0)
                for d in range(256):
                    count = start[d]
                    start[d] = total
                    total += count
                for k in range(size):
                    d = np.int64((tile_keys[k] >> shift) & np.uint64(255))
                    sorted_keys[start[d]] = tile_keys[k]
                    sorted_order[start[d]] = order[k]
                    start[d] += 1
                for k in range(size):
                    tile_keys[k] = sorted_keys[k]
                    order[k] = sorted_order[k]
        for i in range(m):
            row_count[i] = 0
            column_count[i] = 0
        if not prune_form:
            for i in range(m):
                for j in range(m):
                    mask[r0 + i, c0 + j] = False
            for position in range(size):
                k = order[position]
                i = k // m
                j = k % m
                if row_count[i] < n and column_count[j] < n:
                    mask[r0 + i, c0 + j] = True
                    row_count[i] += 1
                    column_count[j] += 1
        else:
            for i in range(m):
                for j in range(m):
                    mask[r0 + i, c0 + j] = True
            for position in range(size - 1, -1, -1):
                k = order[position]
                i = k // m
                j = k % m
                if row_count[i] < m - n or column_count[j] < m - n:
                    mask[r0 + i, c0 + j] = False
                    row_count[i] += 1
                    column_count[j] += 1
