"""Numba kernels for 1-D N:M masks.

Compiled lazily on first call (``import nmref`` never compiles). Every jitted
callee used here lives in this file, so ``cache=True`` cannot serve a stale
kernel (numba's cache does not track callees in other files). No ``fastmath``
and no ``parallel``: the kernels only compare numbers, and they must give the
same bits as the plain-NumPy reference in :mod:`nmref.masks`.
"""

from __future__ import annotations

import numba
import numpy as np

# Above this group size, ranking by counting (O(m^2) per group) loses to sorting.
RANK_COUNT_MAX_M = 32


# Groups are ranked in chunks, transposed to (m, CHUNK), so that the innermost
# loops run over contiguous groups and vectorise; 256 keeps the chunk in L1.
CHUNK = 256


@numba.njit(cache=True, nogil=True)
def nm_mask_groups(groups, n, use_magnitude, out, values, rank):  # pragma: no cover - compiled
    """Keep the ``n`` largest of every row of ``groups`` (ties: lower index wins).

    ``groups`` is a C-contiguous ``(num_groups, m)`` array with ``m <= 32``,
    ``out`` a boolean array of the same shape; ``values`` and ``rank`` are the
    buffers of :func:`rank_scratch`. Returns the flat index of the first NaN
    (``out`` is then incomplete), or -1. The rank of entry ``i`` is the number
    of entries that beat it: larger ones, and equal ones at a lower index. Entry
    ``i`` is kept iff its rank is below ``n``.
    """
    num_groups, m = groups.shape
    for first in range(0, num_groups, CHUNK):
        count = min(CHUNK, num_groups - first)
        nan_count = 0
        for g in range(count):
            for i in range(m):
                value = groups[first + g, i]
                nan_count += value != value
                values[i, g] = abs(value) if use_magnitude else value
        if nan_count:
            for g in range(count):
                for i in range(m):
                    if groups[first + g, i] != groups[first + g, i]:
                        return (first + g) * m + i
        for i in range(m):
            candidate = values[i]
            for g in range(count):
                rank[g] = 0
            # Equal entries at lower indices beat entry i; at higher indices they do not.
            for j in range(i):
                other = values[j]
                for g in range(count):
                    rank[g] += other[g] >= candidate[g]
            for j in range(i + 1, m):
                other = values[j]
                for g in range(count):
                    rank[g] += other[g] > candidate[g]
            for g in range(count):
                out[first + g, i] = rank[g] < n
    return -1


def rank_scratch(m: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Buffers of :func:`nm_mask_groups`: a transposed chunk of groups and their ranks.

    Allocated in Python rather than in the kernel: on a cold cache every distinct
    ``np.empty`` signature inside a kernel is one more function to compile, which a
    first run would pay for.
    """
    return np.empty((m, CHUNK), dtype=dtype), np.empty(CHUNK, dtype=np.uint8)


@numba.njit(cache=True, nogil=True)
def nm_mask_groups_sorted(groups, n, use_magnitude, out):  # pragma: no cover - compiled
    """Same contract as :func:`nm_mask_groups`, by a stable sort per group (large m)."""
    num_groups, m = groups.shape
    keys = np.empty(m, dtype=groups.dtype)
    for g in range(num_groups):
        row = groups[g]
        for i in range(m):
            value = row[i]
            if value != value:
                return g * m + i
            # Reversed so that an ascending stable sort puts lower original
            # indices last among equal keys: the last n sorted are the kept ones.
            keys[m - 1 - i] = abs(value) if use_magnitude else value
        order = np.argsort(keys, kind="mergesort")
        for i in range(m):
            out[g, i] = False
        for k in range(m - n, m):
            out[g, m - 1 - order[k]] = True
    return -1
