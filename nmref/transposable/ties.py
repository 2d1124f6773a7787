"""The canonical optimum among tied transposable masks, on one tile of exact integers.

``specs/transposable.md`` ("Ties") names one mask among all optimal ones: the
**lexicographically greatest** row-major keep-vector ("the lower flat index
wins"). This module computes it from any optimal mask and a dual certificate
(:func:`nmref.transposable.flow.successive_shortest_paths` gives both), in plain
Python so that a reader can follow the pass; :mod:`nmref.transposable._flow_kernels`
runs the same pass in Numba and is tested to return identical masks.
"""

from __future__ import annotations

from collections.abc import Sequence

from nmref.transposable.tiles import Tile

__all__ = ["canonical_optimum"]


def canonical_optimum(
    weights: Tile, kept: Sequence[Sequence[bool]], row_potentials, column_potentials
) -> list[list[bool]]:
    """The canonical optimal mask: lexicographically greatest row-major keep-vector.

    Parameters
    ----------
    weights : m x m ints
    kept : m x m bools
        Any optimal mask, certified by the potentials.
    row_potentials, column_potentials : sequences of int
        A dual certificate for ``kept`` (:func:`certifies_optimal`).

    Returns
    -------
    list of list of bool
        Among all optimal masks, the one whose row-major sequence of keep bits
        is lexicographically greatest ("lower flat index wins").

    Notes
    -----
    Every optimal mask satisfies complementary slackness with *any* optimal
    dual, so entries with ``w - u - v > 0`` are kept and those with ``< 0``
    dropped in all of them; only tight entries (``== 0``) vary. Scanning entries
    in row-major order, a dropped tight entry ``(i, j)`` can be kept iff the
    tight, not-yet-fixed entries contain an alternating cycle through it: a
    path from column ``j`` back to row ``i`` that leaves a column by a kept
    entry and a row by a dropped entry. Toggling the cycle keeps every row and
    column count and (all entries tight) the objective. O(m^2) per search,
    O(m^4) per tile in the worst case (all entries tied).
    """
    m = len(weights)
    current = [list(map(bool, row)) for row in kept]
    tight = [
        [weights[i][j] - row_potentials[i] - column_potentials[j] == 0 for j in range(m)]
        for i in range(m)
    ]
    for k in range(m * m):
        i, j = divmod(k, m)
        if current[i][j] or not tight[i][j]:
            continue  # already kept (stays kept), or dropped in every optimum
        path = _alternating_path(current, tight, i, j, first_free=k + 1)
        if path is not None:
            current[i][j] = True
            for a, b in path:
                current[a][b] = not current[a][b]
    return current


def _alternating_path(current, tight, i, j, first_free):
    """Entries of a path column ``j`` -> ... -> row ``i`` through free tight entries.

    Free means flat index ``>= first_free``. From a column ``b`` the path may go
    to a row ``a`` where ``(a, b)`` is kept; from a row ``a`` to a column ``b``
    where ``(a, b)`` is dropped. Breadth-first, lowest index first, so the
    result does not depend on anything but the input. Returns the entries to
    toggle, or None.
    """
    m = len(current)
    # Search state: ("col", b) or ("row", a); parents record the entry used.
    parent: dict[tuple[str, int], tuple[tuple[str, int], tuple[int, int]] | None] = {
        ("col", j): None
    }
    frontier = [("col", j)]
    while frontier:
        next_frontier = []
        for kind, index in frontier:
            for other in range(m):
                if kind == "col":
                    a, b, target = other, index, ("row", other)
                    usable = current[a][b]
                else:
                    a, b, target = index, other, ("col", other)
                    usable = not current[a][b]
                if not usable or not tight[a][b] or a * m + b < first_free:
                    continue
                if target in parent:
                    continue
                parent[target] = ((kind, index), (a, b))
                if target == ("row", i):
                    entries = []
                    node = target
                    while parent[node] is not None:
                        previous, entry = parent[node]  # type: ignore[misc]
                        entries.append(entry)
                        node = previous
                    return entries
                next_frontier.append(target)
        frontier = next_frontier
    return None
