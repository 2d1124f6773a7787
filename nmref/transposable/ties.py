"""The canonical optimum among tied transposable masks, on one tile of exact integers.

``specs/transposable.md`` ("Ties") names one mask among all optimal ones: the
**lexicographically greatest** row-major keep-vector ("the lower flat index
wins"). This module computes it from any optimal mask and a dual certificate
(:func:`nmref.transposable.flow.successive_shortest_paths` gives both), in plain
Python so that a reader can follow the pass; :mod:`nmref.transposable._flow_kernels`
runs the same pass in Numba and is tested to return identical masks.
:func:`canonical_at_most_optimum` is the pass for the at-most-``n`` fill (the twin of
:func:`nmref.transposable._at_most_kernels._canonical_at_most`).
"""

from __future__ import annotations

from collections.abc import Sequence

from nmref.transposable.tiles import Tile

__all__ = ["canonical_at_most_optimum", "canonical_optimum"]


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


def canonical_at_most_optimum(
    weights: Tile, kept: Sequence[Sequence[bool]], row_potentials, column_potentials, n: int
) -> list[list[bool]]:
    """The canonical optimal at-most-``n`` mask: lexicographically greatest row-major.

    Parameters
    ----------
    weights : m x m ints
    kept : m x m bools
        Any optimal at-most-``n`` mask, certified by the potentials.
    row_potentials, column_potentials : sequences of int
        At-most duals for ``kept``
        (:func:`~nmref.transposable.flow.certifies_optimal_at_most`: ``u, v >= 0``,
        zero on lines with room).
    n : int
        Entries kept at most per row and column.

    Returns
    -------
    list of list of bool
        Among all optimal at-most-``n`` masks, the lexicographically greatest
        row-major keep-vector: the same mask as the oracle pass
        :func:`nmref.transposable.flow.canonical_at_most` (tested), without its
        re-solves.

    Notes
    -----
    As in :func:`canonical_optimum`, only tight entries (``w = u + v``) differ between
    optima. Scanning in row-major order, a dropped tight entry ``(i, j)`` is switched on
    iff a path leads from column ``j`` to row ``i`` through free (later) tight entries,
    columns to rows through kept ones and rows to columns through dropped ones, with one
    extra node ``Z`` for the ends of an alternating *path*: ``column -> Z`` where the
    column has room, ``row -> Z`` where ``u = 0``, ``Z -> row`` where the row has room,
    ``Z -> column`` where ``v = 0``. Toggling the path keeps every line at most ``n`` and
    changes the kept sum by the duals of its ends, which are 0; conversely an optimum
    that keeps ``(i, j)`` with every earlier choice differs from the current one by such
    a path (spec T3, "At most n"). One breadth-first search over ``2m + 1`` nodes per
    tied entry: O(m^2) each, **O(m^4) per tile** in the worst case (all entries tied),
    where the oracle pass re-solves a flow per tied entry (O(n m^5)).
    """
    m = len(weights)
    u, v = row_potentials, column_potentials
    current = [list(map(bool, row)) for row in kept]
    row_count = [sum(row) for row in current]
    column_count = [sum(current[i][j] for i in range(m)) for j in range(m)]
    tight = [[weights[i][j] - u[i] - v[j] == 0 for j in range(m)] for i in range(m)]
    for k in range(m * m):
        i, j = divmod(k, m)
        if current[i][j] or not tight[i][j]:
            continue  # already kept (stays kept), or dropped in every optimum
        lines = (row_count, column_count, u, v, n)
        path = _alternating_path_at_most(current, tight, lines, i, j, first_free=k + 1)
        if path is None:
            continue
        for a, b in [(i, j), *path]:
            change = -1 if current[a][b] else 1
            current[a][b] = not current[a][b]
            row_count[a] += change
            column_count[b] += change
    return current


def _alternating_path_at_most(current, tight, lines, i, j, first_free):
    """Entries of a path column ``j`` -> ... -> row ``i`` (through ``Z`` at most once).

    Nodes: rows ``0..m-1``, columns ``m..2m-1``, ``Z = 2m``; arcs as in
    :func:`canonical_at_most_optimum` (entries free: flat index ``>= first_free``).
    Breadth-first, lowest node number first (the kernel's order). Returns the entries
    to toggle (``Z`` arcs use none), or None.
    """
    row_count, column_count, u, v, n = lines
    m = len(current)
    z = 2 * m

    def arcs(x):
        """``(target, entry or None)`` out of node ``x``, targets in increasing order."""
        if x == z:
            return [(a, None) for a in range(m) if row_count[a] < n] + [
                (m + b, None) for b in range(m) if v[b] == 0
            ]
        if x >= m:  # column b -> row a: drop the kept (a, b); -> Z if b has room
            b = x - m
            out = [(a, (a, b)) for a in range(m) if current[a][b]]
            return out + ([(z, None)] if column_count[b] < n else [])
        a = x  # row a -> column b: keep the dropped (a, b); -> Z if u[a] == 0
        out = [(m + b, (a, b)) for b in range(m) if not current[a][b]]
        return out + ([(z, None)] if u[a] == 0 else [])

    parent: dict[int, tuple[int, tuple[int, int] | None] | None] = {m + j: None}
    frontier = [m + j]
    while frontier:
        next_frontier = []
        for x in frontier:
            for y, entry in arcs(x):
                if entry is not None:
                    a, b = entry
                    if not tight[a][b] or a * m + b < first_free:
                        continue
                if y in parent:
                    continue
                parent[y] = (x, entry)
                if y == i:
                    path = []
                    node = y
                    while parent[node] is not None:
                        node, entry = parent[node]  # type: ignore[misc]
                        if entry is not None:
                            path.append(entry)
                    return path
                next_frontier.append(y)
        frontier = next_frontier
    return None
