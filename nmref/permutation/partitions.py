"""Column partitions into groups of ``m``: counting and enumerating them canonically.

Two permutations of the columns that put the same *sets* of columns into the
groups prune the same way: the order inside a group and the order of the groups
do not change which magnitudes N:M pruning keeps (``specs/permutation.md``,
P2). A partition is therefore written in **canonical form**: every group sorted
ascending, groups ordered by their smallest column. Canonical permutations are
enumerated here in lexicographic order, so "the first one" is well defined and
the identity comes first.

The count is the multinomial ``C! / ((m!)**G * G!)`` with ``G = C / m``
(Pool & Yu 2021, Sec. 3, count the same equivalence classes).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "canonical_partitions",
    "canonical_permutation",
    "count_column_partitions",
    "local_partition_table",
]


#: Above this many columns :func:`count_column_partitions` refuses (its factorials would take
#: minutes and gigabytes; no search enumerates anything near that).
COUNT_MAX_COLUMNS = 1 << 16


def count_column_partitions(columns: int, m: int) -> int:
    """Number of distinct partitions of ``columns`` columns into groups of ``m``.

    Distinct up to the order inside each group and the order of the groups:
    ``columns! / ((m!)**G * G!)`` with ``G = columns / m`` (an exact ``int``).

    Parameters
    ----------
    columns : int
        Number of columns, a multiple of ``m``.
    m : int
        Group size, ``>= 1``.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        If an argument is not an integer.
    ValueError
        If ``m < 1``, ``columns < 0`` or ``columns`` is not a multiple of ``m``.

    Notes
    -----
    O(columns) big-integer multiplications.

    Examples
    --------
    >>> count_column_partitions(8, 4)      # two groups of four: 8! / (4!**2 * 2!)
    35
    >>> count_column_partitions(16, 4)
    2627625
    """
    from nmref._validation import check_integer

    columns = check_integer(columns, "columns")
    m = check_integer(m, "m")
    if m < 1:
        raise ValueError(f"m={m} must be >= 1")
    if columns < 0 or columns % m:
        raise ValueError(f"columns={columns} must be a non-negative multiple of m={m}")
    groups = columns // m
    if groups == 0:
        return 1  # the empty partition (and factorial(m) of a huge m is never needed)
    if columns > COUNT_MAX_COLUMNS:
        raise ValueError(
            f"columns={columns}: the count has about {columns} * log10({columns}) digits; "
            f"counting stops at columns <= {COUNT_MAX_COLUMNS}"
        )
    return math.factorial(columns) // (math.factorial(m) ** groups * math.factorial(groups))


def canonical_permutation(permutation: NDArray, m: int) -> NDArray[np.int64]:
    """The canonical form of ``permutation``'s partition into groups of ``m`` (P2).

    Sort every group of ``m`` consecutive entries, then order the groups by their
    first (smallest) entry. O(C log C).
    """
    groups = np.sort(np.asarray(permutation, dtype=np.int64).reshape(-1, m), axis=1)
    order = np.argsort(groups[:, 0], kind="stable") if len(groups) else np.zeros(0, np.int64)
    return groups[order].reshape(-1)


def canonical_partitions(columns: int, m: int) -> Iterator[tuple[int, ...]]:
    """Every canonical permutation of ``range(columns)``, in lexicographic order.

    The first group holds the smallest remaining column and ``m - 1`` others
    chosen in lexicographic order; recursively for the rest. The identity comes
    first. Yields :func:`count_column_partitions` tuples.
    """

    def extend(remaining: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if not remaining:
            yield ()
            return
        first, rest = remaining[0], remaining[1:]
        for others in itertools.combinations(rest, m - 1):
            chosen = set(others)
            left = tuple(c for c in rest if c not in chosen)
            for tail in extend(left):
                yield (first, *others, *tail)

    yield from extend(tuple(range(columns)))


def local_partition_table(stripes: int, m: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Tables for the exhaustive search of one stripe group of ``stripes * m`` columns.

    Returns ``(subsets, partitions)``: ``subsets`` is ``(S, m)``, every ``m``-subset
    of ``range(stripes * m)`` in lexicographic order; ``partitions`` is
    ``(P, stripes)``, every canonical partition (lexicographic order, the identity
    first) as indices into ``subsets``, one per group in canonical group order.
    """
    width = stripes * m
    subsets = np.array(list(itertools.combinations(range(width), m)), dtype=np.int64)
    subsets = subsets.reshape(-1, m)
    index = {tuple(int(c) for c in row): i for i, row in enumerate(subsets)}
    rows = []
    for permutation in canonical_partitions(width, m):
        rows.append([index[permutation[g * m : (g + 1) * m]] for g in range(stripes)])
    return subsets, np.array(rows, dtype=np.int64).reshape(-1, stripes)
