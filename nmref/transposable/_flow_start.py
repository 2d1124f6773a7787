"""Numba kernels of the flow solver's start: blocks of tiles loaded and started one per lane.

The exact solver (:mod:`~nmref.transposable._flow_kernels`) takes its tiles in blocks of
:func:`_block_lanes` tiles. Two of its steps are the same branch-free arithmetic for every
tile, so they run on a whole block at once, one tile per vector lane, with 2-D ``(entry,
lane)`` arrays: loading the tiles as exact int64 units (:func:`_load_lanes`) and the start
(:func:`_start_lanes`: potentials by dual coordinate descent, then a kept set that
satisfies complementary slackness, so that the shortest paths need only augment its
deficit). Each tile is then finished on its own in :mod:`~nmref.transposable._flow_kernels`,
which calls into this file; the ``CACHE_DEPENDS`` digests keep Numba's cache of both files
current (:mod:`~nmref.transposable._codegen` says why). No ``fastmath``, no ``parallel``.

Speed notes
-----------
The start finds the ``n``-th largest key of every row and column with a selection network
(:func:`~nmref.transposable._selection_networks._selection_network`). Networks of up to
16 wires run as generated straight-line code (:mod:`~nmref.transposable._generated_networks`,
written by :mod:`~nmref.transposable._unrolled_networks`), so that their wires stay in
registers; larger networks loop over the comparators. A select stored back to the address
it was loaded from (``x[k] = min(x[k], y)``) is turned by LLVM into a masked store, which
is slow on the x86 cores this runs on, so that loop takes maxima and minima from the sign
of a difference, except on targets with AVX-512, which have int64 vector minimum and
maximum instructions, so that no select (and no masked store) is left: it takes
``max``/``min`` there (``NATIVE_INT64_MIN_MAX``; the same values either way). The hot
loops take no array slices (every slice is a new array whose reference count Numba updates
atomically). And 16x16 tiles are loaded and started in blocks of 8 instead of 32
(:func:`_block_lanes`), which keeps each per-entry lane array at 16 KiB, as for 8x8 tiles
in blocks of 32. Figures: ``benchmarks/bench_transposable.py``.
"""

from __future__ import annotations

import numba
import numpy as np

from nmref.transposable._generated_networks import _select_unrolled

# Digests of the files whose jitted functions the cached kernels here call; written by
# scripts/generate_kernels.py, so that a change there changes this file and Numba's cache.
CACHE_DEPENDS = {
    "_generated_networks.py": "sha256:b8eb687d7415e306b0a3a7a555cf147e",
}

# Below every key of the start's selections. With units below 2**B (B =
# max_unit_bits(m) = 58 - 2 b, b = ceil(log2 m)), every pass of the start adds at
# most one bit: |u|, |v| < 2**(B + 4) after its five passes, so its keys, shifted left
# by b, stay below 2**(62 - b) and differences of two keys fit int64.
BELOW_ALL = -(np.int64(1) << np.int64(62))
# Tiles whose start is computed together, one per vector lane (_start_lanes), except for
# 16x16 tiles (_block_lanes).
START_LANES = 32
# Rounds of dual coordinate descent in the start before the kept set is built (see
# _start_lanes). One round cuts the mean deficit the shortest paths must augment on
# |N(0,1)| tiles from 6.5 to 4.0 units at 8:16 and from 41 to 20 at 32:64; more
# rounds gain little (3.7 and 16) for their cost.
DUAL_ROUNDS = 1


def _compiles_with_avx512() -> bool:
    """Whether Numba compiles for a target with AVX-512F (``NUMBA_CPU_FEATURES``, else the
    host's features as Numba reads them). Numba keys its cache on those features too, so a
    kernel compiled with one value of ``NATIVE_INT64_MIN_MAX`` is never loaded with the other."""
    from numba.core import codegen, config

    features = config.CPU_FEATURES
    if features is None:
        features = codegen.get_host_cpu_features()
    return "+avx512f" in str(features).split(",")


# int64 vector min/max are single instructions with AVX-512 (vpminsq/vpmaxsq), so the
# selection network's loop takes them (with the branch-free settle of _settle_nearest:
# 8:16 1.04x, 32:64 1.1x on one core); without AVX-512 LLVM lowers them to selects, and a
# select stored back where it was loaded becomes a masked store (10 more masked stores in
# the AVX2 code of _start_lanes), so the loop keeps the sign-of-difference form there.
NATIVE_INT64_MIN_MAX = _compiles_with_avx512()


@numba.njit(cache=True, nogil=True, inline="always")
def _static_size(m, token):  # pragma: no cover
    """``m``, as a compile-time constant where ``token`` carries it
    (:func:`~nmref.transposable._flow_kernels.size_token`)."""
    return len(token) if len(token) > 0 else m


@numba.njit(cache=True, nogil=True, inline="always")
def _block_lanes(m):  # pragma: no cover
    """Tiles per block of :func:`_load_lanes` and :func:`_start_lanes` (one per lane).

    32, and 8 for 16x16 tiles: each per-entry lane array (``m * m`` entries x lanes x 8
    bytes) is then 16 KiB, as for 8x8 tiles, instead of 64 KiB (8:16 1.07x on one core).
    Fewer lanes were slower for 8x8 (16: 0.8x) and larger tiles (8 for 32x32: 0.78x),
    and so were 4 lanes for 16x16 (0.85x).
    """
    return 8 if m == 16 else START_LANES


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
    token,
):  # pragma: no cover
    """``_load_tile`` for a block of tiles at once, one tile per vector lane.

    ``w_lanes[i * m + j, t]`` gets entry ``(i, j)`` of the tile at
    ``(r0s[t], c0s[t])`` in units, for every lane whose tile fits int64 units
    (0 elsewhere). Per lane, ``lowest`` and ``highest`` are the bounds
    :func:`~nmref.transposable._enumeration_kernels._load_tile` computes
    (``highest < lowest``: all zero) and ``not_finite`` flags NaN or infinity, so
    the caller decides each tile's status exactly as ``_load_tile`` would. Lanes
    from ``block_size`` on hold an all-zero tile. Branch-free, so the loops over
    lanes vectorise.
    """
    m = _static_size(m, token)
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


@numba.njit(cache=True, nogil=True, inline="always")
def _select_lanes(sort, network, wire):  # pragma: no cover
    """Run ``network`` on the wires ``sort[w, :]``, all lanes at once.

    Only ``sort[wire, :]`` is defined afterwards. ``network`` must be
    ``_selection_network(sort.shape[0], wire)``: networks of up to 16 wires run as
    the straight-line code written from that network (``_select_unrolled``; the same
    value on ``wire``, tested) and ``network`` itself is then not read.
    """
    if _select_unrolled(sort, wire):
        return
    for c in range(network.shape[0]):
        a = network[c, 0]
        b = network[c, 1]
        for t in range(sort.shape[1]):
            x = sort[a, t]
            y = sort[b, t]
            if NATIVE_INT64_MIN_MAX:
                sort[a, t] = max(x, y)
                sort[b, t] = min(x, y)
            else:
                # max and min by the sign of the difference (|keys| < 2**62): selects
                # stored back where they were loaded would become (slow) masked stores.
                difference = y - x
                up = difference & ~(difference >> np.int64(63))
                sort[a, t] = x + up
                sort[b, t] = y - up


@numba.njit(cache=True, nogil=True)
def _start_lanes(
    w_lanes,
    m,
    n,
    network,
    sort,
    key_lanes,
    kept_lanes,
    row_potential,
    column_potential,
    count,
    row_kept,
    column_kept,
    token,
):  # pragma: no cover
    """The start of ``_ssp_tile`` for a block of tiles, one tile per lane.

    ``w_lanes[i * m + j, t]`` is entry ``(i, j)`` of tile ``t``; the start it computes
    is passed to :func:`~nmref.transposable._flow_kernels._ssp_tile` tile by tile.
    Duals first: ``u[i]`` is the n-th largest of row ``i``, improved by
    ``DUAL_ROUNDS`` rounds of coordinate descent on the dual (``v[j]`` the n-th
    largest of column ``j`` of ``w - u``, then ``u[i]`` the n-th largest of
    row ``i`` of ``w - v``). Then every column
    keeps its ``n`` largest by ``w - u`` (ties: lower row) and ``v[j]`` is the
    n-th of them; then every over-full row keeps its ``n`` best kept entries
    by ``w - v`` (ties: lower column) and ``u[i]`` is the n-th of them. This
    partial b-matching satisfies complementary slackness, so only its deficit
    needs augmenting paths. Keys carry the tie-break in their low
    ``index_bits`` bits (``(key << index_bits) | (m - 1 - index)``, all
    distinct), so a selection network finds the n-th key and a comparison the
    kept set. Outputs ``kept_lanes`` (0/1), ``row_potential[i, t]`` (``u``),
    ``column_potential[j, t]`` (``-v``) and the kept counts per row and column
    (``row_kept``, ``column_kept``), summed here across lanes rather than in the
    per-tile copy, where a count stored and reloaded per entry was a chain of
    store-to-load latencies.
    """
    m = _static_size(m, token)
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
        _select_lanes(sort, network, wire)
        for t in range(lanes):
            row_potential[i, t] = sort[wire, t]
    # --- dual coordinate descent: v[j] = the n-th largest of column j of w - u,
    # then u[i] = the n-th largest of row i of w - v (each exactly minimises the dual
    # over that coordinate); any u keeps the construction below correct
    for _ in range(DUAL_ROUNDS):
        for j in range(m):
            for i in range(size):
                for t in range(lanes):
                    below = BELOW_ALL
                    sort[i, t] = w_lanes[i * m + j, t] - row_potential[i, t] if i < m else below
            _select_lanes(sort, network, wire)
            for t in range(lanes):
                column_potential[j, t] = -sort[wire, t]
        for i in range(m):
            for j in range(size):
                for t in range(lanes):
                    below = BELOW_ALL
                    sort[j, t] = w_lanes[i * m + j, t] + column_potential[j, t] if j < m else below
            _select_lanes(sort, network, wire)
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
        _select_lanes(sort, network, wire)
        for t in range(lanes):
            column_potential[j, t] = -(sort[wire, t] >> index_bits)
        for i in range(m):
            for t in range(lanes):
                kept_lanes[i * m + j, t] = (
                    np.int64(key_lanes[i * m + j, t] >= sort[wire, t]) * kept_any
                )
    for i in range(m):
        for t in range(lanes):
            row_kept[i, t] = 0
            column_kept[i, t] = 0
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
        _select_lanes(sort, network, wire)
        # A row with at most n kept entries keeps them all (its n-th key is
        # then its last kept one or lower) and keeps its u.
        for t in range(lanes):
            count[t] = 0
        for j in range(m):
            for t in range(lanes):
                count[t] += kept_lanes[i * m + j, t]
        for t in range(lanes):
            nth = sort[wire, t]
            new = nth >> index_bits
            keep_old = np.int64(count[t] <= n)
            row_potential[i, t] = new + ((row_potential[i, t] - new) & -keep_old)
        for j in range(m):
            for t in range(lanes):
                keep = kept_lanes[i * m + j, t] * np.int64(key_lanes[i * m + j, t] >= sort[wire, t])
                kept_lanes[i * m + j, t] = keep
                row_kept[i, t] += keep
                column_kept[j, t] += keep
