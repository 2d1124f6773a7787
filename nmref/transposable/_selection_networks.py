"""Selection networks: Batcher's odd-even merge sort, pruned to the comparators of one output.

The start of the flow kernel (:func:`~nmref.transposable._flow_start._start_lanes`) finds
the ``n``-th largest key of every row and column of a tile with the network of
:func:`_selection_network`, run on a block of tiles at once. The table lives in a file of
its own, apart from the kernels that run it, because
:mod:`~nmref.transposable._unrolled_networks` writes the generated straight-line networks
(:mod:`~nmref.transposable._generated_networks`) from it: the writer must not import the
code it writes. Its callers' ``CACHE_DEPENDS`` cover this file
(:mod:`~nmref.transposable._codegen`).
"""

from __future__ import annotations

import numba
import numpy as np


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
