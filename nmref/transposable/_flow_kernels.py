"""Numba kernel of the exact transposable solver: min-cost flow plus the canonical tie pass.

The fast twin of :mod:`nmref.transposable.flow` (successive shortest paths) and
:mod:`nmref.transposable.ties` (the canonical optimum among ties); tested to
return identical masks. Blocks of tiles are loaded and started in
:mod:`~nmref.transposable._flow_start`, one tile per vector lane; each tile is
finished here. The jitted callees from other files are covered by their files'
digests in ``CACHE_DEPENDS``, so ``cache=True`` cannot serve a stale kernel
(:mod:`~nmref.transposable._codegen`; the status codes it writes come from
:mod:`nmref.transposable._kernel_contract`, whose values never change).
No ``fastmath``; ``parallel`` only in :func:`exact_tiles_parallel`, whose tiles
are independent (each thread runs the same per-tile code, so the result does
not depend on the thread count; tested).

Exact arithmetic
----------------
Every tile is first mapped to **exact int64 units**: with ``e`` the exponent
of the lowest significand bit over the tile's nonzero scores (float64
significands are stripped of trailing zeros first), ``unit = score * 2**-e``
is an integer. When the largest unit needs more than
:func:`~nmref.transposable._kernel_contract.max_unit_bits` bits, the tile is solved
on sticky units (:func:`_truncate_tile`) and kept only with a certificate for the
true scores (:func:`_certify_truncated`); when no certificate exists, or a potential
would leave ``POTENTIAL_LIMIT``, the tile is reported back (status ``TOO_WIDE``) and
solved by the Python-int reference instead, so no answer ever depends on rounding or
overflow.

Tile status codes: 0 solved here; 1 handed back (solve exactly in Python); 2 NaN or
infinity in the tile (the caller raises); 3 solved here on sticky units and certified
(mask and potentials exact, the kept units not).

Speed notes
-----------
The exact kernel loads and starts blocks of tiles one tile per vector lane,
with 2-D ``(entry, lane)`` arrays (:mod:`~nmref.transposable._flow_start`); the
hot loops take no array slices, because every slice is a new array whose
reference count Numba updates atomically (slices cost the 4:8 kernel ~15%),
and for the same reason the per-tile solver
gets its per-node state as one 2-D array (every array argument is refcounted on
every call); indices that are not loop variables are unsigned where it
matters, so Numba emits no negative-index wraparound code (~12% in the direct
moves). A select stored back to the address it was loaded from (``x[k] =
min(x[k], y)``) is turned by LLVM into a masked store, which is slow on the
x86 cores this runs on (AMD Zen: 20-30% of the 32:64 kernel); the relaxations
and the direct moves therefore take minima, maxima and conditional updates
from the sign of a difference (``d >> 63``), with every operand below
``2**62`` in magnitude so that the difference cannot overflow (the one
exception, the selection network's loop on targets with AVX-512, is in
:mod:`~nmref.transposable._flow_start`).
Figures: ``benchmarks/bench_transposable.py``.

For the same reasons the column and row passes (direct moves, settles) are
written out once per direction rather than shared through a helper over slices,
and every buffer is its own argument (Numba has no cheap struct of arrays): the
repeats that ``duplicates`` lists inside this file are deliberate.

Three more steps are specific to small tiles. Selection networks of up to 16
wires run as generated straight-line code (:mod:`~nmref.transposable._generated_networks`,
written by :mod:`~nmref.transposable._unrolled_networks`), so that their wires stay in
registers. Tiles of a size in ``SPECIALISED_SIZES`` (8 and 16) run a kernel compiled with ``m``
as a constant (:func:`size_token`), in which LLVM unrolls the per-tile loops. Both
return exactly what the generic code returns (tested); together they made 4:8
1.26x faster, and the specialisation alone 8:16 1.05x-1.1x. And 16x16 tiles are
loaded and started in blocks of 8 instead of 32
(:func:`~nmref.transposable._flow_start._block_lanes`), which keeps each per-entry
lane array at 16 KiB, as for 8x8 tiles in blocks of 32.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from nmref.transposable._flow_start import (
    BELOW_ALL,
    _block_lanes,
    _load_lanes,
    _start_lanes,
    _static_size,
)
from nmref.transposable._kernel_contract import NOT_FINITE, SOLVED, SOLVED_TRUNCATED, TOO_WIDE
from nmref.transposable._selection_networks import _selection_network

# Digests of the files whose jitted functions the cached kernels here call; written by
# scripts/generate_kernels.py, so that a change there changes this file and Numba's cache.
CACHE_DEPENDS = {
    "_flow_start.py": "sha256:cba2d7a76a26e3ff89a6748b1061f19a",
    "_selection_networks.py": "sha256:9dde7b0bb8bc761821dc2862a94d0e8c",
}

# Potentials beyond this make a tile fall back to Python (see _ssp_tile).
POTENTIAL_LIMIT = np.int64(1) << np.int64(58)
# Subtracted from kept entries in the direct moves (|w - u|, |w - v| < 2**58), so
# every kept entry ranks below every dropped one.
KEPT_PENALTY = np.int64(1) << np.int64(60)
# Rows of the per-node state of _ssp_tile: one 2-D array instead of one
# array per field, because Numba updates the reference count of every array
# argument (atomically) on each call.
_ROW_POTENTIAL, _ROW_DISTANCE, _ROW_REACHED, _ROW_PARENT, _ROW_SETTLED, _ROW_KEPT = range(6)
_COLUMN_POTENTIAL, _COLUMN_DISTANCE, _COLUMN_REACHED, _COLUMN_PARENT = range(6, 10)
_COLUMN_SETTLED, _COLUMN_KEPT = 10, 11
# Tile sizes with their own compiled kernel, in which m is a compile-time constant (see
# size_token): LLVM then unrolls the per-tile loops, which made the 4:8 tie pass 1.7x
# and the whole 4:8 kernel about 1.15x faster, 8:16 1.07x (one core, 4096x4096 |N(0,1)|);
# larger tiles spend their time in loops long enough for a run-time bound.
SPECIALISED_SIZES = (8, 16)


def size_token(m: int) -> tuple:
    """The last argument of :func:`exact_tiles`: ``m`` zeros for a size in
    ``SPECIALISED_SIZES``, else ``()``. Numba compiles one kernel per argument type, and
    a tuple's length is part of its type, so the kernels read ``m`` from it as a
    constant (:func:`_static_size`); ``()`` leaves ``m`` a run-time value."""
    return (0,) * m if m in SPECIALISED_SIZES else ()


@numba.njit(cache=True, nogil=True, inline="always")
def _padded_width(m):  # pragma: no cover
    """Lanes per row of the padded tile of :func:`_ssp_tile`: ``m`` rounded up to 16."""
    return 16 * ((m + 15) // 16)


@numba.njit(cache=True, nogil=True, inline="always")
def _static_width(width, token):  # pragma: no cover
    """:func:`_padded_width`, as a constant where ``token`` carries ``m``."""
    return _padded_width(len(token)) if len(token) > 0 else width


# ----------------------------------------------------------------------------
# Exact solver: successive shortest paths (nmref.transposable.flow) + canonical tie pass
# ----------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _settle_nearest(nodes, reached, settled, distance, nearest, unreached, m):  # pragma: no cover
    """Settle the lowest lane of ``nodes[reached]`` at distance ``nearest``; return it.

    ``reached``, ``settled`` and ``distance`` are rows of :func:`_ssp_tile`'s
    state for one side (rows or columns) whose minimum over the first ``m`` lanes is
    ``nearest``. The lane is found without a branch (a loop that stops at the first
    match mispredicts its exit once per settle).
    """
    lane = m
    for i in range(m):
        lane = min(lane, i + m * np.int64(nodes[reached, i] != nearest))
    nodes[settled, lane] = 1
    nodes[distance, lane] = nearest
    nodes[reached, lane] = unreached
    return lane


@numba.njit(cache=True, nogil=True)
def _ssp_tile(w, w_t, kept, kept_t, m, n, width, potential, nodes, token):  # pragma: no cover
    """Successive shortest paths on one tile (nmref.transposable.flow.successive_shortest_paths).

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
    m = _static_size(m, token)
    width = _static_width(width, token)
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
                value = w_t[k] - nodes[_ROW_POTENTIAL, i] - ((-kept_t[k]) & KEPT_PENALTY)
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
                value = w[k] + nodes[_COLUMN_POTENTIAL, j] - ((-kept[k]) & KEPT_PENALTY)
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
            nodes[_ROW_REACHED, i] = from_source if deficit else unreached
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
                    nodes, _ROW_REACHED, _ROW_SETTLED, _ROW_DISTANCE, best_distance, unreached, m
                )
                # A row: arcs to the columns of its dropped entries.
                base = best_distance + nodes[_ROW_POTENTIAL, i]
                row = np.uint64(i * width)  # unsigned: indexing without wraparound code
                for j in range(width):
                    blocked = kept[row + np.uint64(j)] | nodes[_COLUMN_SETTLED, j]
                    # Real arcs have candidate >= 0; a blocked one is lifted to >= unreached.
                    candidate = max(
                        base - w[row + np.uint64(j)] - nodes[_COLUMN_POTENTIAL, j],
                        (-blocked) & unreached,
                    )
                    old = nodes[_COLUMN_REACHED, j]
                    parent = nodes[_COLUMN_PARENT, j]
                    # Branch-free min by the sign of the difference (|values| < 2**62): a
                    # select stored back where it was loaded becomes a masked store.
                    difference = candidate - old
                    lower = difference >> np.int64(63)
                    nodes[_COLUMN_REACHED, j] = old + (difference & lower)
                    nodes[_COLUMN_PARENT, j] = parent + ((i - parent) & lower)
            elif best_column_distance == best_distance:
                j = _settle_nearest(
                    nodes,
                    _COLUMN_REACHED,
                    _COLUMN_SETTLED,
                    _COLUMN_DISTANCE,
                    best_distance,
                    unreached,
                    m,
                )
                # A column: arcs back to the rows of its kept entries, and to the sink.
                base = best_distance + nodes[_COLUMN_POTENTIAL, j]
                column = np.uint64(j * width)
                for i in range(width):
                    blocked = (1 - kept_t[column + np.uint64(i)]) | nodes[_ROW_SETTLED, i]
                    candidate = max(
                        base + w_t[column + np.uint64(i)] - nodes[_ROW_POTENTIAL, i],
                        (-blocked) & unreached,
                    )
                    old = nodes[_ROW_REACHED, i]
                    parent = nodes[_ROW_PARENT, i]
                    # Branch-free min by the sign of the difference (|values| < 2**62): a
                    # select stored back where it was loaded becomes a masked store.
                    difference = candidate - old
                    lower = difference >> np.int64(63)
                    nodes[_ROW_REACHED, i] = old + (difference & lower)
                    nodes[_ROW_PARENT, i] = parent + ((j - parent) & lower)
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
            step = nodes[_ROW_DISTANCE, i] if settled else sink_distance
            nodes[_ROW_POTENTIAL, i] += step if i < m else 0
            settled = nodes[_COLUMN_SETTLED, i]
            step = nodes[_COLUMN_DISTANCE, i] if settled else sink_distance
            nodes[_COLUMN_POTENTIAL, i] += step if i < m else 0
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
def _truncate_tile(significand, scale, m, max_bits, units):  # pragma: no cover
    """Sticky units of a tile too wide for int64, for the certified path.

    ``significand``/``scale`` are what :func:`_load_tile` decoded. Returns the
    exponent ``b`` of the new units: with ``U = score / 2**(b + 1)``, ``H = floor(U)``
    and ``e = [U != H]``, ``units[k] = 2 H + e`` in units of ``2**b``:
    even where exact, odd (the midpoint of ``(2 H, 2 H + 2)``) where the floor dropped
    bits, at most ``max_bits`` bits. The at-most kernel's ``_sticky_units`` makes the
    same units (same ``b``), so it can read this kernel's duals.
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
    coarse = base + 1
    for k in range(m * m):
        units[k] = 0
        magnitude = abs(significand[k])
        if magnitude == 0:
            continue
        shift = scale[k] - coarse
        if shift >= 0:
            quotient = magnitude << shift
            remainder = np.int64(0)
        elif shift <= -62:
            quotient = np.int64(0)
            remainder = np.int64(1)
        else:
            quotient = magnitude >> (-shift)
            remainder = magnitude & ((np.int64(1) << (-shift)) - 1)
        # 2 H + e is 2 q + e for a positive score and -(2 q + e) for a negative one
        # (H = -(q + e), the floor).
        sticky = 2 * quotient + np.int64(remainder != 0)
        units[k] = -sticky if significand[k] < 0 else sticky
    return base


@numba.njit(cache=True, nogil=True)
def _certify_truncated(units, kept, potential, m, width):  # pragma: no cover
    """Adjust the potentials until they prove ``kept`` optimal for the true scores.

    ``units`` are the sticky units ``W = 2 H + e`` of :func:`_truncate_tile` (``H``
    the floors of the true units ``U``, ``e = [U != H]``), ``potential`` the duals
    of an optimum for ``W``. Integer potentials (in units of ``U``) with
    ``u_i + v_j <= H_ij`` on kept entries and ``u_i + v_j >= H_ij + e_ij`` on dropped
    ones satisfy complementary slackness for ``U`` exactly. These are difference
    constraints, so Bellman-Ford from the halved potentials finds such potentials or
    proves there are none; on success they are doubled back into ``W``'s units. Why
    the sticky units: if integer duals certify any mask for ``U``, then doubled they
    certify it for ``W``, so they are optimal ``W`` duals, and every ``W`` optimum meets
    complementary slackness with them; so the search fails only where no integer
    certificate exists for any mask (the optimum is decided below the truncation, a
    near tie; the tile goes to the Python path). On floor units a tie between two
    floors could hide which one is larger and fail where a certificate exists. In
    node terms: row ``potential[1 + i] = u_i``, column ``potential[m + 1 + j] = -v_j``.
    """
    for x in range(1, 2 * m + 1):
        potential[x] >>= 1
    for _ in range(2 * m + 2):
        changed = False
        for i in range(m):
            for j in range(m):
                k = i * width + j
                if kept[k]:
                    bound = potential[m + 1 + j] + (units[k] >> 1)  # + H
                    if potential[1 + i] > bound:
                        potential[1 + i] = bound
                        changed = True
                else:
                    bound = potential[1 + i] - ((units[k] + 1) >> 1)  # - (H + e)
                    if potential[m + 1 + j] > bound:
                        potential[m + 1 + j] = bound
                        changed = True
        if not changed:
            for x in range(1, 2 * m + 1):
                potential[x] <<= 1
                if abs(potential[x]) > POTENTIAL_LIMIT:
                    return False
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _canonical_tile(
    w, m, width, kept, potential, tight, queue, parent_node, parent_entry, token
):  # pragma: no cover
    """Turn the optimal ``kept`` into the canonical (lexicographically greatest) optimum.

    Same pass as nmref.transposable.ties.canonical_optimum. Entry ``(i, j)`` of
    ``w``, ``kept`` (int64 0/1) and ``tight`` sits at ``i * width + j``.
    Search nodes: rows 0..m-1, columns m..2m-1. On a truncated tile ``w`` are the
    sticky units of :func:`_truncate_tile` and the potentials are even
    (:func:`_certify_truncated` doubles them), so an inexact (odd) entry lies strictly
    between two floors and is never tight, without a flag.
    """
    m = _static_size(m, token)
    width = _static_width(width, token)
    # Any other optimum differs from ``kept`` by alternating cycles of tight
    # entries (kept: column -> row, dropped: row -> column). Peel nodes
    # without arcs to remaining nodes; if all go, there is no cycle and
    # ``kept`` is the only optimum (the usual case on generic data). Rows
    # and columns are two bit sets of m <= 64 bits (int64 bit patterns):
    # ``queue[i]`` the columns row i reaches, ``queue[m + j]`` the rows
    # column j reaches. Built without branches: which entries are tight is
    # data, and mispredicted branches cost more than the arithmetic.
    for v in range(2 * m):
        queue[v] = 0
    free_dropped = np.int64(0)
    for i in range(m):
        row = np.uint64(i * width)
        row_potential = potential[1 + i]
        reaches = np.int64(0)
        # (Shifts taken mod 64: for m > 64 the bit sets are unused.)
        row_bit = np.int64(1) << np.int64(i & 63)
        for j in range(m):
            k = row + np.uint64(j)
            slack = w[k] - row_potential + potential[m + 1 + j]
            is_tight = np.int64(slack == 0)
            tight[k] = is_tight
            keep = kept[k]
            dropped_tight = is_tight & (1 - keep)
            free_dropped += dropped_tight
            reaches |= dropped_tight << np.int64(j & 63)
            queue[m + j] |= row_bit & -(is_tight & keep)
        queue[i] = reaches
    if free_dropped == 0:
        return
    everything = np.int64(-1) if m >= 64 else (np.int64(1) << np.int64(m)) - 1
    alive_rows = everything
    alive_columns = everything
    while m <= 64 and (alive_rows != 0 or alive_columns != 0):
        removed_rows = np.int64(0)
        removed_columns = np.int64(0)
        for v in range(m):
            bit = np.int64(1) << np.int64(v)
            removed_rows |= bit & -np.int64(queue[v] & alive_columns == 0)
            removed_columns |= bit & -np.int64(queue[m + v] & alive_rows == 0)
        removed_rows &= alive_rows
        removed_columns &= alive_columns
        if removed_rows == 0 and removed_columns == 0:
            break
        alive_rows &= ~removed_rows
        alive_columns &= ~removed_columns
    if m <= 64 and alive_rows == 0 and alive_columns == 0:
        return
    for i in range(m):
        for j in range(m):
            k = i * width + j
            if kept[k] or not tight[k]:
                continue
            # A cycle through (i, j) needs a free kept tight entry in column j and in row i.
            possible_column = False
            for a in range(i + 1, m):
                entry = a * width + j
                if kept[entry] and tight[entry]:
                    possible_column = True
                    break
            possible_row = False
            for b in range(j + 1, m):
                entry = i * width + b
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
                        target = other
                        entry = other * width + (v - m)
                        usable = kept[entry] != 0
                    else:  # row a -> column b through a dropped entry
                        target = m + other
                        entry = v * width + other
                        usable = kept[entry] == 0
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
                kept[k] = 1
                v = i
                while parent_node[v] != -1:
                    entry = parent_entry[v]
                    kept[entry] = 1 - kept[entry]
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
    token,
):  # pragma: no cover
    """Solve the tiles ``tile_list[first:last]`` (row-major tile numbers) exactly.

    Tiles go in blocks of :func:`_block_lanes` tiles: a block is loaded
    (:func:`_load_lanes`) and started (:func:`_start_lanes`) all at once, one
    tile per vector lane, because those steps are the same branch-free
    arithmetic for every tile; then each tile is finished on its own
    (:func:`_ssp_tile`, :func:`_canonical_tile`). A tile too wide for int64
    units is solved on sticky units and kept only if :func:`_certify_truncated`
    proves the result exact (status ``SOLVED_TRUNCATED``); otherwise it is
    handed back (``TOO_WIDE``).
    """
    if len(token) != 0 and len(token) != m:
        raise ValueError("token: size_token(m) must be m zeros or ()")
    m = _static_size(m, token)
    tiles_across = bits.shape[1] // m
    # Potential outputs of no rows: the caller wants the mask alone (saves writing, and
    # page-faulting, 2 m int64 per tile).
    keep_potentials = row_potentials.shape[0] > 0
    nodes = 2 * m + 2
    lanes = _block_lanes(m)
    width = _padded_width(m)
    size = 1
    while size < m:
        size *= 2
    network = _selection_network(size, max(n - 1, 0))
    # Per tile of a block, in the block's tile order:
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
    row_kept_lanes = np.empty((m, lanes), np.int64)
    column_kept_lanes = np.empty((m, lanes), np.int64)
    tight = np.empty(m * width, np.int64)
    potential = np.empty(nodes, np.int64)
    units = np.empty(m * m, np.int64)
    queue = np.empty(2 * m, np.int64)
    parent_node = np.empty(2 * m, np.int64)
    parent_entry = np.empty(2 * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    # The tile again, padded for _ssp_tile, and its solver state (zeroed: the
    # relaxations do arithmetic on the parent rows).
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
            token,
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
                exponent = _truncate_tile(significand, scale, m, max_bits, units)
                code = SOLVED_TRUNCATED
                for k in range(m * m):
                    w_lanes[k, b] = units[k]
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
            row_kept_lanes,
            column_kept_lanes,
            token,
        )
        for b in range(block_size):
            code = block_code[b]
            if code != SOLVED and code != SOLVED_TRUNCATED:
                continue
            t = tile_list[block + b]
            r0 = block_r0[b]
            c0 = block_c0[b]
            truncated = code == SOLVED_TRUNCATED
            # The tile out of its lane, row- and column-major.
            for i in range(m):
                nodes[_ROW_KEPT, i] = row_kept_lanes[i, b]
                nodes[_COLUMN_KEPT, i] = column_kept_lanes[i, b]
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
                    w_padded[row_major] = unit
                    w_t_padded[column_major] = unit
            ok = _ssp_tile(
                w_padded, w_t_padded, kept_padded, kept_t_padded, m, n, width, potential, nodes,
                token,
            )  # fmt: skip
            if truncated and ok:
                ok = _certify_truncated(w_padded, kept_padded, potential, m, width)
            if not ok:
                status[t] = TOO_WIDE
                continue
            _canonical_tile(
                w_padded,
                m,
                width,
                kept_padded,
                potential,
                tight,
                queue,
                parent_node,
                parent_entry,
                token,
            )
            total = np.int64(0)
            if keep_potentials:
                for i in range(m):
                    row_potentials[t, i] = potential[1 + i]
                    column_potentials[t, i] = -potential[m + 1 + i]
            for i in range(m):
                row = np.uint64(r0 + i)
                for j in range(m):
                    k = np.uint64(i * width + j)
                    keep = kept_padded[k]
                    mask[row, np.uint64(c0 + j)] = keep != 0
                    total += w_padded[k] * keep
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
    token,
):  # pragma: no cover
    """Canonical optimal mask of the listed aligned m x m tiles (one thread).

    Outputs per tile ``t`` (row-major tile number): ``status[t]``, the kept sum
    ``kept_units[t] * 2**exponents[t]`` (exact when the status is ``SOLVED``)
    and the certificate potentials in the same units. ``token``: :func:`size_token` of
    ``m`` (the same masks either way; it only selects the compiled kernel).
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
        token,
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
    token,
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
            token,
        )
