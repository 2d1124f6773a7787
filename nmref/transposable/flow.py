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

The "at most N" fill (what sparse tensor cores accept)
------------------------------------------------------
:func:`solve_tile_at_most` solves the relaxed problem: keep **at most** ``n``
entries per row and per column, maximising the kept sum. The network changes in
one place: a **bypass arc** ``source -> sink`` of capacity ``n * m`` and cost 0
is added, and the flow value stays ``n * m``. A unit through the bypass is an
unused slot, so every flow of value ``n * m`` is an at-most-``n`` mask and back.
Successive shortest paths on that network is the same algorithm as above that
**stops as soon as the next shortest augmenting path through the rows has cost
>= 0** (the bypass is then at least as cheap; the path costs of successive
shortest paths never decrease, so no later path can be negative either). A path
of cost exactly 0 is not taken: its tie with the bypass is settled by the
canonical pass. Integrality still holds: the constraint matrix is still the
incidence matrix of a bipartite graph (the row and column inequalities with a
slack column each, or equivalently the network with the bypass arc), which is
totally unimodular, so the LP with ``0 <= S <= 1`` has integral vertices.

Duals of the at-most LP are ``u, v >= 0``: kept entries have ``w >= u + v``,
dropped ones ``w <= u + v``, and ``u[i] = 0`` where row ``i`` keeps fewer than
``n`` (same for columns). They come from shortest-path distances on the final
residual network (:func:`at_most_duals`), and :func:`certifies_optimal_at_most`
checks them.

Ties (at most N): the same rule family, the lexicographically greatest
row-major keep-vector among optimal masks. Entries with ``w > u + v`` are kept
and ``w < u + v`` dropped in every optimum; a tight entry is kept iff an optimum
keeps it together with every choice already made. :func:`canonical_at_most`
decides that by re-solving with those choices forced (the oracle pass, the
definition: O(m^2) re-solves of O(n m^3), O(n m^5) per tile in the worst case,
all entries tied); :func:`solve_tile_at_most` uses
:func:`~nmref.transposable.ties.canonical_at_most_optimum` instead, one
alternating-path search per tied entry (O(m^4) per tile), tested equal to the
oracle pass bit for bit. In particular a zero-score entry is tight exactly when
``u[i] = v[j] = 0`` (for instance when its row and its column both have room),
and a tight zero is **kept** whenever the choices already made leave its row and
column room, greedily in row-major order: keeping it costs
nothing, and hardware runs a full group as happily as an under-full one, while
the lexicographic rule keeps the canonical mask a function of the input alone.
The Numba twin is :mod:`nmref.transposable._at_most_kernels` (same masks, tested).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction

from nmref.patterns import check_pattern
from nmref.transposable.ties import canonical_at_most_optimum, canonical_optimum
from nmref.transposable.tiles import Tile

__all__ = [
    "at_most_duals",
    "at_most_optimum",
    "canonical_at_most",
    "canonical_optimum",
    "certifies_optimal",
    "certifies_optimal_at_most",
    "solve_tile",
    "solve_tile_at_most",
    "successive_shortest_paths",
    "successive_shortest_paths_at_most",
]


def successive_shortest_paths(
    weights: Tile, n: int, *, trace: Callable[[dict], None] | None = None
) -> tuple[list[list[bool]], list[int], list[int]]:
    """Maximum-weight b-matching of one tile by successive shortest paths.

    Parameters
    ----------
    weights : m x m nested sequence of int
        Exact integer scores (scale floats to integers first; see
        :func:`nmref.transposable.tiles.exact_integer_tile`).
    n : int
        Entries kept in every row and every column, ``0 <= n <= m``.
    trace : callable, optional
        Called once before the first augmentation with ``{"potential": [...]}``
        and after each one with ``{"path": nodes, "distance": ..., "potential":
        [...]}`` (node numbers: 0 source, ``1..m`` rows, ``m+1..2m`` columns,
        ``2m+1`` sink; copies, so the caller cannot change the run). For
        :mod:`nmref.explain`; the result does not depend on it.

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
    network = _Network(weights, [n] * m, [n] * m, None)
    if trace is not None:
        trace({"potential": list(network.potential)})
    for _ in range(n * m):
        distance, parent, settled = network.shortest_paths()
        network.update_potentials(distance, settled)
        if trace is not None:
            path = [network.sink]
            while path[-1] != 0:
                path.append(parent[path[-1]])
            trace(
                {
                    "path": path[::-1],
                    "distance": distance[network.sink],
                    "potential": list(network.potential),
                }
            )
        network.push(parent)
    potential = network.potential
    row_potentials = [potential[1 + i] for i in range(m)]
    column_potentials = [-potential[m + 1 + j] for j in range(m)]
    return network.kept, row_potentials, column_potentials


class _Network:
    """The residual network of one tile under a partial mask, for successive shortest paths.

    Nodes: 0 the source, ``1..m`` the rows, ``m+1..2m`` the columns, ``2m+1`` the sink.
    Row ``i`` may keep ``row_capacity[i]`` entries, column ``j`` ``column_capacity[j]``,
    and only the ``allowed`` entries (all when None). Shared by both fills: the
    exactly-``n`` solver pushes ``n*m`` units, the at-most one stops early.
    """

    def __init__(self, weights: Tile, row_capacity, column_capacity, allowed) -> None:
        m = len(weights)
        self.weights, self.m = weights, m
        self.row_capacity, self.column_capacity = row_capacity, column_capacity
        self.allowed = allowed if allowed is not None else [[True] * m for _ in range(m)]
        self.kept = [[False] * m for _ in range(m)]
        self.row_kept = [0] * m
        self.column_kept = [0] * m
        self.sink = 2 * m + 1
        # Cost of keeping (i, j) is -w[i][j]. Reduced cost of an arc a -> b is
        # cost + potential[a] - potential[b]; potentials keep it >= 0 on every
        # residual arc, so Dijkstra applies. Start: rows and source at 0, each
        # column at its most negative incoming cost, the sink at the lowest column.
        potential = [0] * (2 * m + 2)
        for j in range(m):
            column = [weights[i][j] for i in range(m) if self.allowed[i][j]]
            potential[m + 1 + j] = -max(column) if column else 0
        potential[self.sink] = min(potential[m + 1 : 2 * m + 1]) if m else 0
        self.potential = potential

    def arcs(self, node: int) -> list[tuple[int, int]]:
        """Residual arcs ``(target, cost)`` leaving ``node`` (source, row or column)."""
        m, weights, kept = self.m, self.weights, self.kept
        if node == 0:  # source -> row i while row i has room
            return [(1 + i, 0) for i in range(m) if self.row_kept[i] < self.row_capacity[i]]
        if node <= m:  # row i -> column j for every dropped entry (keep it: cost -w)
            i = node - 1
            return [
                (m + 1 + j, -weights[i][j])
                for j in range(m)
                if self.allowed[i][j] and not kept[i][j]
            ]
        # column j -> row i for every kept entry (drop it again: cost +w), and
        # column j -> sink while column j has room.
        j = node - m - 1
        out = [(1 + i, weights[i][j]) for i in range(m) if kept[i][j]]
        if self.column_kept[j] < self.column_capacity[j]:
            out.append((self.sink, 0))
        return out

    def shortest_paths(self) -> tuple[list[int | None], list[int], list[bool]]:
        """Dijkstra from the source on reduced costs until the sink is settled (or
        nothing is left to settle). Returns ``(distance, parent, settled)``; O(m^2)."""
        node_count = 2 * self.m + 2
        distance: list[int | None] = [None] * node_count
        parent = [-1] * node_count
        settled = [False] * node_count
        distance[0] = 0
        while True:
            # The unsettled node with the smallest distance; lowest index on ties.
            best = -1
            for node in range(node_count):
                if not settled[node] and distance[node] is not None:
                    if best < 0 or distance[node] < distance[best]:  # type: ignore[operator]
                        best = node
            if best < 0:
                return distance, parent, settled  # the sink is unreachable
            settled[best] = True
            if best == self.sink:
                return distance, parent, settled
            base: int = distance[best]  # type: ignore[assignment]
            for target, cost in self.arcs(best):
                reduced = cost + self.potential[best] - self.potential[target]
                old = distance[target]
                if not settled[target] and (old is None or base + reduced < old):
                    distance[target] = base + reduced
                    parent[target] = best

    def path_cost(self, distance: list[int | None]) -> int:
        """True cost of the shortest source-sink path: reduced length plus potentials."""
        return distance[self.sink] - self.potential[0] + self.potential[self.sink]  # type: ignore[operator]

    def update_potentials(self, distance: list[int | None], settled: list[bool]) -> None:
        """Add the distances (unsettled nodes: the sink's), keeping reduced costs >= 0."""
        sink_distance: int = distance[self.sink]  # type: ignore[assignment]
        for node, d in enumerate(distance):
            self.potential[node] += d if settled[node] and d is not None else sink_distance

    def push(self, parent: list[int]) -> None:
        """Push one unit along the path to the sink in ``parent``."""
        m, node = self.m, self.sink
        while node != 0:
            previous = parent[node]
            if 1 <= previous <= m and node > m and node != self.sink:  # row -> column: keep
                self.kept[previous - 1][node - m - 1] = True
            elif previous > m and previous != self.sink and 1 <= node <= m:  # column -> row
                self.kept[node - 1][previous - m - 1] = False
            elif previous == 0:
                self.row_kept[node - 1] += 1
            elif node == self.sink:
                self.column_kept[previous - m - 1] += 1
            node = previous


def certifies_optimal(
    weights: Tile, kept: Sequence[Sequence[bool]], n: int, row_potentials, column_potentials
) -> bool:
    """Whether ``(row_potentials, column_potentials)`` prove ``kept`` optimal.

    True iff ``kept`` has ``n`` entries in every row and column, every kept
    entry has ``w[i][j] >= u[i] + v[j]`` and every dropped one ``<=``. Then
    any valid mask ``Y`` has ``sum_Y w <= n*sum(u) + n*sum(v) + sum(max(w-u-v, 0))
    = sum_kept w`` (LP weak duality), so ``kept`` is optimal. O(m^2).
    Exact for ints, Fractions and floats alike (:func:`_slackness_holds`); a NaN or an
    infinity certifies nothing (False).
    """
    m = len(weights)
    if any(sum(bool(x) for x in row) != n for row in kept):
        return False
    if any(sum(bool(kept[i][j]) for i in range(m)) != n for j in range(m)):
        return False
    return _slackness_holds(weights, kept, row_potentials, column_potentials)


def _slackness_holds(weights: Tile, kept, row_potentials, column_potentials) -> bool:
    """Kept entries ``w >= u + v``, dropped ones ``w <= u + v``, on the exact values.

    Floats are compared as the rationals they stand for (``w - u - v`` in float64 can
    round a violated condition to a held one, e.g. with potentials near 1e308 that
    cancel); a NaN or an infinity makes it False.
    """
    m = len(weights)
    u = [_exact(x) for x in row_potentials]
    v = [_exact(x) for x in column_potentials]
    if any(x is None for x in u + v):
        return False
    for i in range(m):
        for j in range(m):
            w = _exact(weights[i][j])
            if w is None:
                return False
            slack = w - u[i] - v[j]  # type: ignore[operator]
            if (kept[i][j] and slack < 0) or (not kept[i][j] and slack > 0):
                return False
    return True


def _exact(value) -> int | Fraction | None:
    """An int, a Fraction or a float as an exact number (None if NaN or infinite)."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, Fraction):
        return value
    value = float(value)  # float16/32/64 are exact in float64
    return Fraction(value) if math.isfinite(value) else None


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


# --------------------------------------------------------------------------
# The "at most n" fill
# --------------------------------------------------------------------------


def successive_shortest_paths_at_most(
    weights: Tile,
    row_capacity: Sequence[int],
    column_capacity: Sequence[int],
    allowed: Sequence[Sequence[bool]] | None = None,
) -> list[list[bool]]:
    """A maximum-weight mask keeping at most ``row_capacity[i]`` / ``column_capacity[j]``.

    Successive shortest paths on the network of :func:`successive_shortest_paths`
    with per-row and per-column capacities and only the ``allowed`` entries as
    arcs; it **stops** when the next shortest source-sink path has cost ``>= 0``
    (the bypass arc ``source -> sink`` of cost 0 is then a shortest path: the
    remaining units take it, i.e. stay unused), or when no path is left.

    Returns an optimal mask (not yet the canonical one among ties). O(K m^2)
    for K augmentations (K <= sum of the row capacities).
    """
    m = len(weights)
    if any(len(row) != m for row in weights):
        raise ValueError(
            f"weights must be a square m x m tile, got row lengths "
            f"{[len(row) for row in weights]} for m={m} rows"
        )
    network = _Network(weights, row_capacity, column_capacity, allowed)
    while True:
        distance, parent, settled = network.shortest_paths()
        if not settled[network.sink]:
            break  # no augmenting path is left
        if network.path_cost(distance) >= 0:
            break  # the bypass arc (cost 0) is at least as cheap: stop
        network.update_potentials(distance, settled)
        network.push(parent)
    return network.kept


def at_most_duals(weights: Tile, kept: Sequence[Sequence[bool]], n: int) -> tuple[list, list]:
    """Dual potentials ``u, v >= 0`` proving an optimal at-most-``n`` mask optimal.

    Bellman-Ford (every node starting at distance 0) on the residual network of
    ``kept`` with the bypass arc ``source -> sink`` (cost 0; its reverse exists
    when fewer than ``n * m`` entries are kept). ``kept`` is optimal iff that
    network has no negative cycle; the distances ``d`` then satisfy
    ``w <= d(r_i) - d(c_j)`` on dropped and ``>=`` on kept entries. With
    ``u_i = d(r_i) - d(s)`` and ``v_j = d(s) - d(c_j)``: a row with a kept entry
    has the residual arc ``r_i -> s`` so ``u_i >= 0``, and a non-full one also
    ``s -> r_i`` so ``u_i = 0``; a row keeping nothing is set to ``d(s)``
    (``u_i = 0``), which only loosens its dropped entries. Columns likewise,
    through ``t`` and the bypass (``d(t) = d(s)`` whenever some column is not
    full). O(m^3). ``ValueError`` if ``kept`` is not optimal.
    """
    m = len(weights)
    if n == 0:
        return [max(0, max(row, default=0)) for row in weights], [0] * m
    source, sink = 0, 2 * m + 1
    row_count = [sum(bool(x) for x in row) for row in kept]
    column_count = [sum(bool(kept[i][j]) for i in range(m)) for j in range(m)]
    arcs: list[tuple[int, int, int]] = [(source, sink, 0)]
    if sum(row_count) < n * m:
        arcs.append((sink, source, 0))
    for i in range(m):
        if row_count[i] < n:
            arcs.append((source, 1 + i, 0))
        if row_count[i] > 0:
            arcs.append((1 + i, source, 0))
        for j in range(m):
            if kept[i][j]:
                arcs.append((m + 1 + j, 1 + i, weights[i][j]))
            else:
                arcs.append((1 + i, m + 1 + j, -weights[i][j]))
    for j in range(m):
        if column_count[j] < n:
            arcs.append((m + 1 + j, sink, 0))
        if column_count[j] > 0:
            arcs.append((sink, m + 1 + j, 0))
    d = [0] * (2 * m + 2)
    for _ in range(2 * m + 2):
        changed = False
        for a, b, cost in arcs:
            if d[a] + cost < d[b]:
                d[b] = d[a] + cost
                changed = True
        if not changed:
            break
    else:
        raise ValueError("the mask is not an optimal at-most-n mask (negative cycle)")
    for i in range(m):
        if row_count[i] == 0:
            d[1 + i] = d[source]
    for j in range(m):
        if column_count[j] == 0:
            d[m + 1 + j] = d[source]
    u = [d[1 + i] - d[source] for i in range(m)]
    v = [d[source] - d[m + 1 + j] for j in range(m)]
    return u, v


def certifies_optimal_at_most(
    weights: Tile, kept: Sequence[Sequence[bool]], n: int, row_potentials, column_potentials
) -> bool:
    """Whether ``u, v`` prove the at-most-``n`` mask ``kept`` optimal. O(m^2).

    True iff ``kept`` keeps at most ``n`` per row and column, ``u, v >= 0``,
    ``u[i] = 0`` where row ``i`` keeps fewer than ``n`` (likewise ``v``), kept
    entries have ``w >= u + v`` and dropped ones ``w <= u + v``. Then for any
    at-most-``n`` mask ``Y``: ``sum_Y w = sum_Y (u_i + v_j) + sum_Y (w - u - v)
    <= n sum(u) + n sum(v) + sum(max(w - u - v, 0))`` (``u, v >= 0`` and at most
    ``n`` per line), and ``kept`` attains the bound (its lines with a positive
    dual are full), so no at-most-``n`` mask keeps more (LP weak duality). Exact for
    ints, Fractions and floats, as :func:`certifies_optimal`.
    """
    m = len(weights)
    u, v = row_potentials, column_potentials
    rows = [sum(bool(x) for x in row) for row in kept]
    columns = [sum(bool(kept[i][j]) for i in range(m)) for j in range(m)]
    if any(c > n for c in rows + columns):
        return False
    if not _slackness_holds(weights, kept, u, v):
        return False  # (also: a NaN or an infinity among the values)
    if any(x < 0 for x in list(u) + list(v)):
        return False
    if any(rows[i] < n and u[i] != 0 for i in range(m)):
        return False
    return not any(columns[j] < n and v[j] != 0 for j in range(m))


def at_most_optimum(weights: Tile, n: int) -> int:
    """Optimal kept sum of one tile under the at-most-``n`` fill (exact ints)."""
    m = len(weights)
    kept = successive_shortest_paths_at_most(weights, [n] * m, [n] * m)
    return sum(weights[i][j] for i in range(m) for j in range(m) if kept[i][j])


def canonical_at_most(
    weights: Tile, n: int, row_potentials, column_potentials, optimum: int
) -> list[list[bool]]:
    """The canonical optimal at-most-``n`` mask: lexicographically greatest row-major.

    Scans entries in row-major order. ``w > u + v``: kept (in every optimum);
    ``w < u + v``: dropped (in every optimum); tight: kept iff the remaining
    free entries, with the capacities the fixed choices leave and this entry
    forced in, still reach ``optimum`` (an oracle re-solve by
    :func:`successive_shortest_paths_at_most`). Fixed entries never change, so the
    result is the lexicographically greatest optimum. O(n m^5) worst case.
    """
    m = len(weights)
    decided = [[None] * m for _ in range(m)]  # True kept, False dropped, None free
    for k in range(m * m):
        i, j = divmod(k, m)
        slack = weights[i][j] - row_potentials[i] - column_potentials[j]
        if slack != 0:
            decided[i][j] = slack > 0
            continue
        decided[i][j] = True
        decided[i][j] = _forced_optimum(weights, n, decided) == optimum
    return [[bool(x) for x in row] for row in decided]


def _forced_optimum(weights: Tile, n: int, decided) -> int | None:
    """Best kept sum with the decided entries forced (None if a line is over ``n``)."""
    m = len(weights)
    rows = [n - sum(decided[i][j] is True for j in range(m)) for i in range(m)]
    columns = [n - sum(decided[i][j] is True for i in range(m)) for j in range(m)]
    if min(rows + columns, default=0) < 0:
        return None
    free = [[decided[i][j] is None for j in range(m)] for i in range(m)]
    rest = successive_shortest_paths_at_most(weights, rows, columns, free)
    return sum(
        weights[i][j] for i in range(m) for j in range(m) if decided[i][j] is True or rest[i][j]
    )


def solve_tile_at_most(weights: Tile, n: int) -> tuple[list[list[bool]], list[int], list[int]]:
    """Canonical optimal at-most-``n`` mask of one tile plus a dual certificate.

    :func:`successive_shortest_paths_at_most` (at most ``n m + 1`` Dijkstras, O(n m^3)),
    :func:`at_most_duals` (Bellman-Ford, O(m^3)), then the tie pass
    :func:`~nmref.transposable.ties.canonical_at_most_optimum` (at most ``m^2``
    searches of O(m^2), O(m^4)): **O(n m^3 + m^4) per tile** on exact ints, whatever
    the ties (the oracle pass :func:`canonical_at_most` re-solves per tied entry,
    O(n m^5); same mask, tested).

    Examples
    --------
    >>> kept, u, v = solve_tile_at_most([[1, 1, 1, 0]] * 3 + [[0, 0, 0, 0]], 2)
    >>> [[int(x) for x in row] for row in kept]
    [[1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]]
    """
    m = len(weights)
    if m:
        check_pattern(n, m)
    elif n != 0:
        raise ValueError(f"n={n!r} must be 0 for an empty tile")
    kept = successive_shortest_paths_at_most(weights, [n] * m, [n] * m)
    u, v = at_most_duals(weights, kept, n)
    return canonical_at_most_optimum(weights, kept, u, v, n), u, v
