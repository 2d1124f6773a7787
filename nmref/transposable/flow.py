"""Exact transposable N:M tiles by min-cost flow: the readable reference solver.

One ``m x m`` tile of a transposable N:M mask is a maximum-weight bipartite
**b-matching**: keep ``n`` entries in every row and every column so that the
kept scores sum to the maximum (Hubara et al. 2021, Sec. 4.1). As a flow network
(``specs/transposable.md``, section "Flow network")::

    source --(cap n, cost 0)--> row i --(cap 1, cost -w[i][j])--> column j --(cap n, cost 0)--> sink

a flow of value ``n * m`` of minimum cost is an optimal mask (a unit on
``row i -> column j`` means "keep entry (i, j)"). The constraint matrix is the
incidence matrix of a bipartite graph, hence totally unimodular, so integral
augmentations never lose optimality.

This module solves **one tile in plain Python with exact integers** so that a
reader can follow every step; :mod:`nmref.transposable._flow_kernels` runs the
same algorithm over all tiles in Numba and is tested to return identical masks.

The three steps
---------------
1. :func:`successive_shortest_paths` -- push ``n * m`` units one at a time
   along a shortest path of the residual network (Dijkstra on reduced costs,
   node potentials keep them non-negative). Returns an optimal mask and node
   potentials.
2. The potentials are a **dual certificate**: with ``u[i]`` (rows) and ``v[j]``
   (columns), a valid mask is optimal iff every kept entry has
   ``w[i][j] >= u[i] + v[j]`` and every dropped entry ``w[i][j] <= u[i] + v[j]``
   (:func:`certifies_optimal`, O(m^2)).
3. :func:`~nmref.transposable.ties.canonical_optimum` -- among all optimal
   masks (ties), return the one the spec names: the **lexicographically
   greatest** row-major keep-vector, i.e. scanning entries in row-major order,
   keep each one whenever some optimal mask keeps it together with the choices
   already made. Entries with
   ``w[i][j] = u[i] + v[j]`` ("tight") are the only ones that differ between
   optimal masks; the pass toggles alternating cycles of tight entries.
"""

from __future__ import annotations

from collections.abc import Sequence

from nmref.patterns import check_pattern
from nmref.transposable.ties import canonical_optimum
from nmref.transposable.tiles import Tile

__all__ = [
    "canonical_optimum",
    "certifies_optimal",
    "solve_tile",
    "successive_shortest_paths",
]


def successive_shortest_paths(
    weights: Tile, n: int
) -> tuple[list[list[bool]], list[int], list[int]]:
    """Maximum-weight b-matching of one tile by successive shortest paths.

    Parameters
    ----------
    weights : m x m nested sequence of int
        Exact integer scores (scale floats to integers first; see
        :func:`nmref.transposable.tiles.exact_integer_tile`).
    n : int
        Entries kept in every row and every column, ``0 <= n <= m``.

    Returns
    -------
    kept : list of list of bool
        An optimal mask (not yet the canonical one among ties).
    row_potentials, column_potentials : list of int
        Dual values ``u``, ``v`` with ``w[i][j] >= u[i] + v[j]`` where kept and
        ``<=`` where dropped (see :func:`certifies_optimal`).

    Notes
    -----
    ``n * m`` augmentations, each a dense Dijkstra over the ``2m + 2`` nodes:
    O(n m^3) per tile. Exact because every quantity is a Python int.
    """
    m = len(weights)
    # Unchecked, n > m never finds its n*m-th path and loops forever.
    if m:
        check_pattern(n, m)
    elif n != 0:
        raise ValueError(f"n={n!r} must be 0 for an empty tile")
    if any(len(row) != m for row in weights):
        raise ValueError(
            f"weights must be a square m x m tile, got row lengths "
            f"{[len(row) for row in weights]} for m={m} rows"
        )
    source, sink = 0, 2 * m + 1
    row_node = list(range(1, m + 1))
    column_node = list(range(m + 1, 2 * m + 1))
    node_count = 2 * m + 2

    kept = [[False] * m for _ in range(m)]
    row_kept = [0] * m
    column_kept = [0] * m
    # Cost of keeping (i, j) is -w[i][j]. Reduced cost of an arc a -> b is
    # cost + potential[a] - potential[b]; potentials keep it >= 0 on every
    # residual arc, so Dijkstra applies. Start: rows and source at 0, each
    # column at its most negative incoming cost, the sink at the lowest column.
    potential = [0] * node_count
    for j in range(m):
        potential[column_node[j]] = -max(weights[i][j] for i in range(m))
    potential[sink] = min(potential[column_node[j]] for j in range(m)) if m else 0

    for _ in range(n * m):
        # --- Dijkstra from the source until the sink is settled -------------
        distance: list[int | None] = [None] * node_count
        parent = [-1] * node_count
        settled = [False] * node_count
        distance[source] = 0
        while True:
            # The unsettled node with the smallest distance; lowest index on ties.
            best = -1
            for node in range(node_count):
                if not settled[node] and distance[node] is not None:
                    if best < 0 or distance[node] < distance[best]:  # type: ignore[operator]
                        best = node
            settled[best] = True
            if best == sink:
                break
            base: int = distance[best]  # type: ignore[assignment]
            for target, cost in _residual_arcs(best, weights, kept, row_kept, column_kept, n):
                reduced = cost + potential[best] - potential[target]
                old = distance[target]
                if not settled[target] and (old is None or base + reduced < old):
                    distance[target] = base + reduced
                    parent[target] = best
        # --- new potentials: settled nodes by distance, the rest by the sink's
        sink_distance: int = distance[sink]  # type: ignore[assignment]
        for node in range(node_count):
            d = distance[node]
            potential[node] += d if settled[node] and d is not None else sink_distance
        # --- push one unit along the path ------------------------------------
        node = sink
        while node != source:
            previous = parent[node]
            if 1 <= previous <= m and node > m and node != sink:  # row -> column: keep
                i, j = previous - 1, node - m - 1
                kept[i][j] = True
            elif previous > m and previous != sink and 1 <= node <= m:  # column -> row: drop
                i, j = node - 1, previous - m - 1
                kept[i][j] = False
            elif previous == source:
                row_kept[node - 1] += 1
            elif node == sink:
                column_kept[previous - m - 1] += 1
            node = previous

    row_potentials = [potential[row_node[i]] for i in range(m)]
    column_potentials = [-potential[column_node[j]] for j in range(m)]
    return kept, row_potentials, column_potentials


def _residual_arcs(node, weights, kept, row_kept, column_kept, n):
    """Residual arcs ``(target, cost)`` leaving ``node`` (source, row or column)."""
    m = len(weights)
    if node == 0:  # source -> row i while row i keeps fewer than n
        return [(1 + i, 0) for i in range(m) if row_kept[i] < n]
    if node <= m:  # row i -> column j for every dropped entry (keep it: cost -w)
        i = node - 1
        return [(m + 1 + j, -weights[i][j]) for j in range(m) if not kept[i][j]]
    j = node - m - 1
    # column j -> row i for every kept entry (drop it again: cost +w), and
    # column j -> sink while column j keeps fewer than n.
    arcs = [(1 + i, weights[i][j]) for i in range(m) if kept[i][j]]
    if column_kept[j] < n:
        arcs.append((2 * m + 1, 0))
    return arcs


def certifies_optimal(
    weights: Tile, kept: Sequence[Sequence[bool]], n: int, row_potentials, column_potentials
) -> bool:
    """Whether ``(row_potentials, column_potentials)`` prove ``kept`` optimal.

    True iff ``kept`` has ``n`` entries in every row and column, every kept
    entry has ``w[i][j] >= u[i] + v[j]`` and every dropped one ``<=``. Then
    any valid mask ``Y`` has ``sum_Y w <= n*sum(u) + n*sum(v) + sum(max(w-u-v, 0))
    = sum_kept w`` (LP weak duality), so ``kept`` is optimal. O(m^2).
    Exact for ints and Fractions.
    """
    m = len(weights)
    if any(sum(bool(x) for x in row) != n for row in kept):
        return False
    if any(sum(bool(kept[i][j]) for i in range(m)) != n for j in range(m)):
        return False
    for i in range(m):
        for j in range(m):
            slack = weights[i][j] - row_potentials[i] - column_potentials[j]
            if (kept[i][j] and slack < 0) or (not kept[i][j] and slack > 0):
                return False
    return True


def solve_tile(weights: Tile, n: int) -> tuple[list[list[bool]], list[int], list[int]]:
    """Canonical optimal mask of one tile plus a dual certificate.

    Runs :func:`successive_shortest_paths` then :func:`canonical_optimum`.
    The potentials still certify the canonical mask (it is optimal and uses
    the same complementary-slackness classes).

    Examples
    --------
    >>> kept, u, v = solve_tile([[4, 3, 2, 1], [1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4]], 2)
    >>> [[int(x) for x in row] for row in kept]
    [[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1]]
    """
    kept, row_potentials, column_potentials = successive_shortest_paths(weights, n)
    canonical = canonical_optimum(weights, kept, row_potentials, column_potentials)
    return canonical, row_potentials, column_potentials
