"""Numba kernel of the greedy transposable masks (keep form and prune form).

The fast twin of :func:`nmref.transposable.greedy.greedy_tile`; tested to
return identical masks. Every jitted callee lives in this file, so
``cache=True`` cannot serve a stale kernel. No ``fastmath``, no ``parallel``.
"""

from __future__ import annotations

import numba
import numpy as np

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
def greedy_tiles(bits, kind, n, m, prune_form, mask, scratch):  # pragma: no cover
    """Greedy mask of every tile; the scores must be finite (checked by the caller).

    ``bits`` are the scores' bits: uint64 of float64 (``kind`` 0), int64
    (1) or uint64 (2) scores, or uint32 of float32 scores (3). Each becomes an
    unsigned key that orders like the score and is equal exactly where the
    scores are (floats: -0.0 as 0.0, negative bits reversed; int64: sign bit
    flipped); float32 keys fit in 32 bits, so the radix sort skips the upper
    four bytes (a byte that is the same throughout costs no pass).

    Order: descending score, lower flat index first among equals. Keep form
    scans it from the front and keeps an entry while its row and column keep
    fewer than ``n``. Prune form scans it from the back and prunes an entry
    while its row or its column has pruned fewer than ``m - n``. Tiles of up
    to 64 entries get their order by counting ranks (O(m^4), branch-free);
    larger ones by a stable least-significant-digit radix sort of the
    complemented keys (8 passes of one byte, O(m^2) each, no allocation):
    ascending complements are descending scores, and stability keeps the
    lower index first among equals. ``scratch`` is :func:`greedy_scratch`.
    """
    tiles_across = bits.shape[1] // m
    tiles = (bits.shape[0] // m) * tiles_across
    sign = np.uint64(1) << np.uint64(63)
    sign32 = np.uint64(1) << np.uint64(31)
    low32 = np.uint64(0xFFFFFFFF)
    size = m * m
    tile_keys, sorted_keys, order, sorted_order, start, row_count, column_count = scratch
    for t in range(tiles):
        r0 = (t // tiles_across) * m
        c0 = (t % tiles_across) * m
        for i in range(m):
            row = np.uint64(r0 + i)
            for j in range(m):
                b = np.uint64(bits[row, np.uint64(c0 + j)])
                if kind == 3:
                    b *= np.uint64(b != sign32)  # -0.0 is 0.0
                    b = (~b & low32) if b >= sign32 else b | sign32
                elif kind == 0:
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
                # Without branches: whether an entry fits is a coin toss on random data.
                k = order[position]
                i = k // m
                j = k - i * m
                keep = np.int64(row_count[i] < n) & np.int64(column_count[j] < n)
                mask[r0 + i, c0 + j] = keep != 0
                row_count[i] += keep
                column_count[j] += keep
        else:
            for i in range(m):
                for j in range(m):
                    mask[r0 + i, c0 + j] = True
            for position in range(size - 1, -1, -1):
                k = order[position]
                i = k // m
                j = k - i * m
                prune = np.int64(row_count[i] < m - n) | np.int64(column_count[j] < m - n)
                mask[r0 + i, c0 + j] = prune == 0
                row_count[i] += prune
                column_count[j] += prune


def greedy_scratch(m: int) -> tuple:
    """Buffers of :func:`greedy_tiles`: keys and order of a tile (and their radix-sorted
    copies), the radix digit starts, and the per-row and per-column counts.

    Allocated in Python rather than in the kernel: on a cold cache every distinct
    ``np.empty`` signature inside a kernel is one more function to compile, which a
    first run would pay for.
    """
    size = m * m
    return (
        np.empty(size, np.uint64),
        np.empty(size, np.uint64),
        np.empty(size, np.int64),
        np.empty(size, np.int64),
        np.empty(256, np.int64),
        np.empty(m, np.int64),
        np.empty(m, np.int64),
    )
