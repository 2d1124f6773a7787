"""Numba kernel of the at-most-``n`` transposable solver (spec T1-T3, ``fill="at_most"``).

The fast twin of :func:`nmref.transposable.flow.solve_tile_at_most`: the same
optimum and the same canonical mask (the lexicographically greatest row-major
keep-vector among optimal at-most-``n`` masks), tested equal bit for bit. Every
jitted callee lives in this file, so ``cache=True`` cannot serve a stale kernel;
the status codes come from :mod:`nmref.transposable._kernel_contract`, whose
values never change. No ``fastmath``; ``parallel`` only in
:func:`at_most_tiles_parallel`, whose tiles are independent (the result does not
depend on the thread count; tested).

Per tile (units: exact int64 after one power-of-two scaling, spec T5; a tile too wide
for them takes the certified path of step 4):

0. **The exactly-n optimum first** (:func:`_start_from_exact`): the driver runs the
   exact flow kernel beforehand; its full mask is at-most optimal iff some duals
   ``u, v >= 0`` satisfy complementary slackness, decided by a shift of its duals
   (O(m^2)). Otherwise units are removed from it along shortest sink-to-source
   paths while that gains (:func:`_cancel_toward_fewer`, O(m^2) each; convexity of
   the cheapest cost in the flow value makes the result an at-most optimum), and
   Bellman-Ford (O(m^3)) certifies it. Without the exact kernel's duals (the
   ``m <= 4`` enumeration start) Bellman-Ford decides the full mask, and only tiles
   where keeping fewer is strictly better go to step 1.
1. **Successive shortest paths with the bypass** (spec T2): dense Dijkstra on
   reduced costs over the ``2m + 2`` nodes, stopping when the next shortest
   source-sink path through the rows costs ``>= 0``. O(m^2) per augmentation,
   at most ``n m`` augmentations: O(n m^3).
2. **Duals** ``u, v >= 0``: one more Dijkstra, over every node, on the final
   residual network with the bypass arc ``source -> sink`` (cost 0). Its
   distances ``q`` give ``q(sink) = q(source)``, so ``u_i = q(r_i) - q(s)`` and
   ``v_j = q(s) - q(c_j)`` satisfy the five conditions of the at-most
   certificate (a line keeping nothing is set to 0, which only loosens its
   dropped entries). O(m^2).
3. **Canonical tie pass**, without the readable version's re-solves. Let ``X``
   be the current optimum. A dropped tight entry ``(i, j)`` (``w = u + v``) can
   be switched on, with every earlier entry fixed, iff the directed graph below
   has a path from column ``j`` to row ``i``: columns go to rows through kept
   tight entries, rows to columns through dropped tight entries (all later in
   row-major order than ``(i, j)``), and one extra node ``Z`` has the arcs
   ``column -> Z`` (the column has room), ``row -> Z`` (``u = 0``),
   ``Z -> row`` (the row has room) and ``Z -> column`` (``v = 0``). Why: a path
   avoiding ``Z`` is an alternating cycle, one through ``Z`` an alternating path
   whose ends either gain a unit where a line has room or lose one where its
   dual is 0; toggling either keeps every line at most ``n`` and, all entries
   being tight, changes the kept sum by the signed duals of the ends, i.e. by 0.
   Conversely, any optimal ``Y`` that agrees with the fixed entries and keeps
   ``(i, j)`` differs from ``X`` by alternating trails of tight entries, and the
   trail through ``(i, j)`` ends where ``Y`` gains (so ``X`` had room) or loses
   (so ``Y`` has room and, by complementary slackness with the same optimal
   duals, the dual is 0): such a path. Breadth-first search, O(m^2) per tied
   entry, O(m^4) per tile in the worst case; but first a peel (:func:`_acyclic`)
   shows on generic data that the whole graph has no cycle, and then nothing switches.

4. **Tiles too wide for int64 units: sticky units plus a certificate** (status
   ``SOLVED_TRUNCATED``, as the exact kernel's path of spec T5). With ``b`` the
   exponent the exact kernel truncates to, ``U`` the true scores in units of
   ``2**(b + 1)``, ``H = floor(U)`` and ``e = [U != H]``, steps 0-3 run on the
   **sticky units** ``W = 2 H + e`` (units of ``2**b``, at most ``max_unit_bits``
   bits): exact entries are even, and an inexact one is odd, the midpoint of the
   interval ``(2 H, 2 H + 2)`` that holds ``2 U``. The mask is then kept only with
   **integer** duals ``(u, v)`` in units of ``2**(b + 1)`` that meet the five
   conditions of the at-most certificate for ``U`` itself (:func:`_certify_at_most`):

   * kept entries ``u_i + v_j <= U_ij``, i.e. ``u_i + v_j <= H_ij`` (``u + v`` is
     an integer and ``H = floor(U)``);
   * dropped entries ``u_i + v_j >= U_ij``, i.e. ``u_i + v_j >= H_ij + e_ij``
     (``= ceil(U)``);
   * ``u_i >= 0``, ``v_j >= 0``;
   * ``u_i = 0`` where row ``i`` keeps fewer than ``n``, ``v_j = 0`` where column
     ``j`` does.

   Each is equivalent to the true condition for integer duals, and all are
   difference constraints (an extra node ``z`` at 0 carries the signs and the
   zeros), so Bellman-Ford from the solver's duals halved finds such duals or
   proves there are none; then no integer certificate exists for **any** mask
   (the optimum is decided below the truncation, a near tie), and the tile goes
   back to the readable solver (``TOO_WIDE``). Why the sticky units and not the
   floors: if integer duals ``(u, v)`` certify some mask ``X`` for ``U``, then
   ``(2u, 2v)`` certify ``X`` for ``W`` (``2H <= W`` on kept, ``W <= 2H + 2e`` on
   dropped entries), so they are optimal duals of the ``W`` problem, and every
   ``W``-optimal ``Y`` meets complementary slackness with them: kept
   ``2(u + v) <= W = 2H + e`` gives ``u + v <= H``, dropped ``2(u + v) >= 2H + e``
   gives ``u + v >= H + e``, and a positive dual sits on a full line of ``Y``.
   So whatever optimum steps 0-1 return, the certification fails only where no
   integer certificate exists at all. On floor units it would fail more often:
   a tiny positive score floored to 0 ties with "not keeping" (``H = 0``), the
   solver need not keep it, and a dropped entry with ``e = 1`` on a row and a
   column with room (``u = v = 0``) violates ``u + v >= 1``. The exactly-``n``
   start (step 0) takes the exact kernel's certified truncated optimum (same
   exponent ``b``) and runs the same certification from its shifted duals; a
   failure there only sends the tile to step 1. Step 3 then runs unchanged on
   ``W`` with the duals doubled (``2u, 2v``, the returned potentials, exponent
   ``b``): an entry is tight iff ``W == 2u + 2v``, which an odd ``W`` never is. That
   is the right notion for ``U``: an inexact ``U`` is never an integer, so never
   equals ``u + v``, and against zero duals (``u_i = v_j = 0``) an inexact entry
   is strictly positive (kept, with room) or strictly negative (dropped) in every
   optimum, never a tie to break; an exact entry is tight for ``U`` iff
   ``H = u + v``. The kept sum in sticky units is not exact: the driver recomputes
   it with Python ints (``_driver._finish``), as for the exact fill.

Tile status codes (``_kernel_contract``): ``SOLVED``; ``SOLVED_TRUNCATED`` (step 4:
mask and potentials exact, kept units not); ``TOO_WIDE`` (the step-4 certificate
does not exist, or a potential beyond ``POTENTIAL_LIMIT``: the driver solves the
tile with the readable Python-int solver); ``NOT_FINITE``.
"""

from __future__ import annotations

import numba
import numpy as np

from nmref.transposable._kernel_contract import NOT_FINITE, SOLVED, SOLVED_TRUNCATED, TOO_WIDE

# Potentials beyond this hand the tile back (see _ssp_at_most): with units below
# 2**max_unit_bits(m) every distance then stays below UNREACHED.
POTENTIAL_LIMIT = np.int64(1) << np.int64(58)
UNREACHED = np.int64(1) << np.int64(62)


@numba.njit(cache=True, nogil=True)
def _load_units(bits, r0, c0, m, fraction_bits, max_bits, units):  # pragma: no cover
    """Exact int64 units of the tile at ``(r0, c0)``; returns ``(status, exponent)``.

    ``bits``: float32 viewed as uint32 (``fraction_bits = 23``) or float64 viewed
    as uint64 (``52``). A finite float is ``significand * 2**scale``; the units
    are the significands shifted to the tile's lowest set bit (float64
    significands lose their trailing zeros first, as in
    :mod:`~nmref.transposable._flow_kernels`), and ``scores = units * 2**exponent``.
    """
    exponent_mask = (1 << (8 if fraction_bits == 23 else 11)) - 1
    bias = exponent_mask // 2 + fraction_bits
    fraction_mask = (np.uint64(1) << np.uint64(fraction_bits)) - np.uint64(1)
    sign_shift = np.uint64(8 * (4 if fraction_bits == 23 else 8) - 1)
    lowest = 1 << 30
    highest = -(1 << 30)
    for i in range(m):
        for j in range(m):
            k = i * m + j
            word = np.uint64(bits[r0 + i, c0 + j])
            exponent_field = np.int64(word >> np.uint64(fraction_bits)) & exponent_mask
            if exponent_field == exponent_mask:
                return NOT_FINITE, 0
            whole = word & fraction_mask
            if exponent_field != 0:
                whole |= np.uint64(1) << np.uint64(fraction_bits)
            scale = max(exponent_field, 1) - bias
            units[k] = 0
            if whole == 0:
                continue
            top = scale + fraction_bits
            # float64 only, as the exact kernel (same units and exponent, so its duals
            # can be read here): floats that came from float32 or integers then fit.
            while fraction_bits > 23 and (whole & np.uint64(1)) == 0:
                whole >>= np.uint64(1)
                scale += 1
            lowest = min(lowest, scale)
            highest = max(highest, top)
            magnitude = np.int64(whole)
            units[k] = -magnitude if (word >> sign_shift) != 0 else magnitude
            # The scale waits in ``units`` beside the sign until the tile's lowest is known.
            units[m * m + k] = scale
    if highest < lowest:
        return SOLVED, 0
    if highest - lowest + 1 > max_bits:
        return SOLVED_TRUNCATED, _sticky_units(m, max_bits, units)
    for k in range(m * m):
        if units[k] != 0:
            units[k] <<= units[m * m + k] - lowest
    return SOLVED, lowest


@numba.njit(cache=True, nogil=True)
def _sticky_units(m, max_bits, units):  # pragma: no cover
    """Sticky units ``W = 2 H + e`` of a tile too wide for int64; returns their exponent.

    ``units`` holds what :func:`_load_units` decoded (signed significand ``k``, its
    scale at ``m * m + k``). With ``b`` the exponent the exact kernel's
    ``_truncate_tile`` chooses (the same, so its duals can be read here) and
    ``U = score / 2**(b + 1)``: ``H = floor(U)``, ``e = [U != H]`` and
    ``W = 2 H + e`` in units of ``2**b`` (module docstring, step 4): even where
    exact, odd (the midpoint of ``(2 H, 2 H + 2)``) where the floor dropped bits;
    ``|W| <= 2**max_bits``.
    """
    lowest = 1 << 30
    highest = -(1 << 30)
    for k in range(m * m):
        magnitude = abs(units[k])
        if magnitude != 0:
            scale = units[m * m + k]
            top = scale
            while magnitude > 1:
                magnitude >>= 1
                top += 1
            lowest = min(lowest, scale)
            highest = max(highest, top)
    base = max(highest + 1 - max_bits, lowest)
    coarse = base + 1
    for k in range(m * m):
        magnitude = abs(units[k])
        if magnitude == 0:
            continue
        shift = units[m * m + k] - coarse
        if shift >= 0:
            quotient = magnitude << shift
            remainder = np.int64(0)
        elif shift <= -62:
            quotient = np.int64(0)
            remainder = np.int64(1)
        else:
            quotient = magnitude >> (-shift)
            remainder = magnitude & ((np.int64(1) << (-shift)) - 1)
        sticky = 2 * quotient + np.int64(remainder != 0)
        units[k] = -sticky if units[k] < 0 else sticky
    return base


@numba.njit(cache=True, nogil=True)
def _dijkstra(
    w, m, n, kept, row_count, column_count, potential, distance, parent, settled, full
):  # pragma: no cover
    """One Dijkstra from the source on reduced costs (node 0 source, 1..m rows,
    m+1..2m columns, 2m+1 sink); lowest node index wins ties.

    ``full=False``: stops when the sink is settled, arcs as in the readable solver.
    ``full=True``: settles every node and adds the bypass ``source -> sink`` and the
    residual arcs ``sink -> column`` of columns with a kept entry (for the duals).
    """
    nodes = 2 * m + 2
    sink = 2 * m + 1
    _start_search(0, nodes, distance, parent, settled)
    while True:
        best = _nearest_unsettled(nodes, distance, settled)
        if best < 0:
            return
        settled[best] = 1
        base = distance[best] + potential[best]
        if best == 0:
            for i in range(m):
                if row_count[i] < n:
                    _relax(1 + i, base - potential[1 + i], 0, distance, parent, settled)
            if full:
                _relax(sink, base - potential[sink], 0, distance, parent, settled)
        elif best <= m:
            i = best - 1
            for j in range(m):
                if kept[i * m + j] == 0:
                    candidate = base - w[i * m + j] - potential[m + 1 + j]
                    _relax(m + 1 + j, candidate, best, distance, parent, settled)
        elif best < sink:
            j = best - m - 1
            for i in range(m):
                if kept[i * m + j] != 0:
                    candidate = base + w[i * m + j] - potential[1 + i]
                    _relax(1 + i, candidate, best, distance, parent, settled)
            if column_count[j] < n:
                _relax(sink, base - potential[sink], best, distance, parent, settled)
        else:
            if not full:
                return
            for j in range(m):
                if column_count[j] > 0:
                    _relax(m + 1 + j, base - potential[m + 1 + j], best, distance, parent, settled)


@numba.njit(cache=True, nogil=True, inline="always")
def _start_search(origin, nodes, distance, parent, settled):  # pragma: no cover
    """Reset a dense Dijkstra over ``nodes`` nodes to start from ``origin``."""
    for x in range(nodes):
        distance[x] = UNREACHED
        parent[x] = -1
        settled[x] = 0
    distance[origin] = 0


@numba.njit(cache=True, nogil=True, inline="always")
def _nearest_unsettled(nodes, distance, settled):  # pragma: no cover
    """The unsettled node of least finite distance (lowest index among ties), or -1."""
    best = -1
    best_distance = UNREACHED
    for x in range(nodes):
        if settled[x] == 0 and distance[x] < best_distance:
            best = x
            best_distance = distance[x]
    return best


@numba.njit(cache=True, nogil=True, inline="always")
def _relax(target, candidate, source, distance, parent, settled):  # pragma: no cover
    if settled[target] == 0 and candidate < distance[target]:
        distance[target] = candidate
        parent[target] = source


@numba.njit(cache=True, nogil=True)
def _ssp_at_most(
    w, m, n, kept, row_count, column_count, potential, distance, parent, settled, u, v
):  # pragma: no cover
    """An optimal at-most-``n`` mask of one tile in ``kept`` and duals ``u, v >= 0``.

    Returns False when a potential would leave ``POTENTIAL_LIMIT`` (the caller
    hands the tile back). Start as in the readable solver: zero flow, rows and
    source at potential 0, each column at minus its largest score, the sink at
    the lowest column, so every reduced cost is non-negative.
    """
    sink = 2 * m + 1
    for k in range(m * m):
        kept[k] = 0
    for i in range(m):
        row_count[i] = 0
        column_count[i] = 0
    potential[0] = 0
    lowest_column = UNREACHED
    for j in range(m):
        best = -UNREACHED
        for i in range(m):
            best = max(best, w[i * m + j])
        potential[1 + j] = 0
        potential[m + 1 + j] = -best
        lowest_column = min(lowest_column, -best)
    potential[sink] = lowest_column if m > 0 else 0
    if n == 0:
        for i in range(m):
            best = np.int64(0)
            for j in range(m):
                best = max(best, w[i * m + j])
            u[i] = best
            v[i] = 0
        return True
    while True:
        _dijkstra(
            w, m, n, kept, row_count, column_count, potential, distance, parent, settled, False
        )
        if settled[sink] == 0:
            break
        # True cost of the path: its reduced length plus the potential difference
        # (the source's potential stays 0: its distance is always 0).
        if distance[sink] + potential[sink] >= 0:
            break  # the bypass (cost 0) is at least as cheap; so is every later path
        for x in range(2 * m + 2):
            potential[x] += distance[x] if settled[x] != 0 else distance[sink]
            if abs(potential[x]) > POTENTIAL_LIMIT:
                return False
        j = parent[sink] - m - 1
        column_count[j] += 1
        while True:
            i = parent[m + 1 + j] - 1
            kept[i * m + j] = 1
            previous = parent[1 + i]
            if previous == 0:
                row_count[i] += 1
                break
            j = previous - m - 1
            kept[i * m + j] = 0
    _dijkstra(w, m, n, kept, row_count, column_count, potential, distance, parent, settled, True)
    for x in range(2 * m + 2):
        potential[x] += distance[x]
        if abs(potential[x]) > POTENTIAL_LIMIT:
            return False
    for i in range(m):
        u[i] = potential[1 + i] - potential[0] if row_count[i] > 0 else 0
        v[i] = potential[0] - potential[m + 1 + i] if column_count[i] > 0 else 0
    return True


@numba.njit(cache=True, nogil=True)
def _start_from_exact(
    w,
    m,
    n,
    t,
    exact_mask,
    r0,
    c0,
    exact_u,
    exact_v,
    kept,
    row_count,
    column_count,
    u,
    v,
    truncated,
    potential,
    distance,
    parent,
    settled,
):  # pragma: no cover
    """Start from the exactly-``n`` optimum: an at-most optimum in ``kept``; True if found.

    A full mask (every line keeps ``n``) is at-most optimal iff it has duals
    ``u, v >= 0`` with complementary slackness (spec T2; the zero conditions are
    void on full lines). The exact kernel's duals ``(u, v)`` certify its mask, and
    so does every shift ``(u + c, v - c)``: if ``min u + min v >= 0``, ``c = -min u``
    gives the certificate in O(m^2). Otherwise, when the duals are the exact
    kernel's (they certify the exactly-``n`` optimum; the enumeration start passes
    duals that certify nothing), keeping fewer may be better:
    :func:`_cancel_toward_fewer` drops units along shortest paths while that gains,
    and Bellman-Ford (:func:`_certify_at_most`, O(m^3)) then turns its potentials
    into the at-most certificate. Without such duals, Bellman-Ford from the shifted
    ones decides the full mask exactly (feasible gives the certificate, a negative
    cycle proves that keeping fewer is strictly better: step 1). ``truncated``
    (sticky units, step 4): the shifted duals are only where :func:`_certify_at_most`
    starts, and a failure only sends the tile to step 1.
    """
    lowest_u = exact_u[t, 0]
    lowest_v = exact_v[t, 0]
    for i in range(m):
        lowest_u = min(lowest_u, exact_u[t, i])
        lowest_v = min(lowest_v, exact_v[t, i])
    for i in range(m):
        u[i] = exact_u[t, i] - lowest_u
        v[i] = exact_v[t, i] + lowest_u
        row_count[i] = n
        column_count[i] = n
        for j in range(m):
            kept[i * m + j] = np.int64(exact_mask[r0 + i, c0 + j])
    if lowest_u + lowest_v >= 0 and not truncated:
        return True
    if not truncated and _certifies_exactly_n(w, m, kept, u, v):
        if not _cancel_toward_fewer(
            w, m, n, kept, row_count, column_count, u, v, potential, distance, parent, settled
        ):
            return False
    return _certify_at_most(w, m, n, kept, row_count, column_count, u, v, truncated)


@numba.njit(cache=True, nogil=True)
def _certifies_exactly_n(w, m, kept, u, v):  # pragma: no cover
    """Whether ``(u, v)`` meet complementary slackness with ``kept`` (exactly-``n`` duals:
    kept ``w >= u + v``, dropped ``w <= u + v``). O(m^2)."""
    for i in range(m):
        for j in range(m):
            slack = w[i * m + j] - u[i] - v[j]
            if (slack < 0) if kept[i * m + j] != 0 else (slack > 0):
                return False
    return True


@numba.njit(cache=True, nogil=True)
def _cancel_toward_fewer(
    w, m, n, kept, row_count, column_count, u, v, potential, distance, parent, settled
):  # pragma: no cover
    """From an exactly-``n`` optimum and its duals, drop units while that gains (spec T2).

    The at-most optimum is the cheapest flow of any value up to ``n m`` in the network
    of :func:`_ssp_at_most`, and the cheapest cost is convex in the flow value. So from
    the cheapest flow of value ``n m`` (the exactly-``n`` optimum), removing one unit
    along a shortest path from the sink back to the source in the residual network
    (sink -> column with a kept entry -> row through a kept entry -> column through a
    dropped entry -> ... -> row with a kept entry -> source) gives the cheapest flow of
    value ``n m - 1``, and removals stop gaining for good at the first path of cost
    ``>= 0``. Dijkstra on reduced costs: the duals are potentials (row ``u_i``, column
    ``-v_j``) under which every residual entry arc is non-negative; the sink and source
    potentials are reset before each search so that their arcs are too. O(m^2) per
    removal, usually a few. On return ``kept``, the line counts and ``(u, v)`` (the
    potentials, a start for :func:`_certify_at_most`) describe the result; False when
    a potential would leave ``POTENTIAL_LIMIT``.
    """
    source = 0
    sink = 2 * m + 1
    for i in range(m):
        potential[1 + i] = u[i]
        potential[m + 1 + i] = -v[i]
    while True:
        # Sink arcs go to columns with a kept entry, source arcs come from rows with one.
        potential[sink] = -UNREACHED
        potential[source] = UNREACHED
        for i in range(m):
            if column_count[i] > 0:
                potential[sink] = max(potential[sink], potential[m + 1 + i])
            if row_count[i] > 0:
                potential[source] = min(potential[source], potential[1 + i])
        if potential[source] == UNREACHED:
            break  # nothing kept
        _start_search(sink, 2 * m + 2, distance, parent, settled)
        while True:
            best = _nearest_unsettled(2 * m + 2, distance, settled)
            if best < 0 or best == source:
                break  # the source's distance is final once it is the nearest
            settled[best] = 1
            base = distance[best] + potential[best]
            if best == sink:
                for j in range(m):
                    if column_count[j] > 0:
                        candidate = base - potential[m + 1 + j]
                        _relax(m + 1 + j, candidate, best, distance, parent, settled)
            elif best > m:  # a column: back through its kept entries
                j = best - m - 1
                for i in range(m):
                    if kept[i * m + j] != 0:
                        candidate = base + w[i * m + j] - potential[1 + i]
                        _relax(1 + i, candidate, best, distance, parent, settled)
            else:  # a row: forward through its dropped entries, or back to the source
                i = best - 1
                for j in range(m):
                    if kept[i * m + j] == 0:
                        candidate = base - w[i * m + j] - potential[m + 1 + j]
                        _relax(m + 1 + j, candidate, best, distance, parent, settled)
                if row_count[i] > 0:
                    _relax(source, base - potential[source], best, distance, parent, settled)
        if best < 0:
            break  # no path back to the source
        # The path's true cost: its reduced length minus the end potentials' difference.
        if distance[source] - potential[sink] + potential[source] >= 0:
            break
        for x in range(1, 2 * m + 1):
            potential[x] += distance[x] if settled[x] != 0 else distance[source]
            if abs(potential[x]) > POTENTIAL_LIMIT:
                return False
        # Remove the unit: the last row loses one, each column -> row entry is dropped,
        # each row -> column entry kept, and the first column loses one.
        i = parent[source] - 1
        row_count[i] -= 1
        while True:
            j = parent[1 + i] - m - 1
            kept[i * m + j] = 0
            previous = parent[m + 1 + j]
            if previous == sink:
                column_count[j] -= 1
                break
            i = previous - 1
            kept[i * m + j] = 1
    for i in range(m):
        u[i] = potential[1 + i]
        v[i] = -potential[m + 1 + i]
    return True


@numba.njit(cache=True, nogil=True)
def _certify_at_most(w, m, n, kept, row_count, column_count, u, v, truncated):  # pragma: no cover
    """Bellman-Ford from ``(u, v)`` to duals that prove ``kept`` at-most optimal; True if found.

    The five conditions of the at-most certificate (spec T2) are difference
    constraints on ``x = (u, y, z)`` with ``y = -v`` and one extra node ``z`` (the
    zero): ``u_i - y_j <= c_ij`` on kept entries, ``y_j - u_i <= -d_ij`` on dropped
    ones, ``z <= u_i`` and ``y_j <= z`` (signs), ``u_i <= z`` where row ``i`` has
    room and ``z <= y_j`` where column ``j`` has (zeros). Exact units: ``c = d = w``.
    ``truncated`` (sticky units ``w = 2 H + e``, module docstring step 4): the
    potentials live in units of 2 (the floor units ``H``), with ``c = floor(w / 2) = H``
    and ``d = ceil(w / 2) = H + e``; on return ``u, v`` are back in ``w``'s units
    (even). Relaxing every constraint until nothing changes gives the greatest
    solution below the start, or after ``2m + 2`` rounds (``2m + 1`` nodes) proves a
    negative cycle: no such duals. O(m^2) per round. Sets ``u = u - z``, ``v = z - y``.
    """
    half = np.int64(1) if truncated else np.int64(0)
    z = np.int64(0)
    for i in range(m):
        u[i] >>= half
        v[i] = -(v[i] >> half)  # y = -v, in place
    for _ in range(2 * m + 2):
        changed = False
        for i in range(m):
            for j in range(m):
                k = i * m + j
                if kept[k] != 0:  # u_i <= y_j + c
                    bound = v[j] + (w[k] >> half)
                    if u[i] > bound:
                        u[i] = bound
                        changed = True
                else:  # y_j <= u_i - d
                    bound = u[i] - ((w[k] + half) >> half)
                    if v[j] > bound:
                        v[j] = bound
                        changed = True
        for i in range(m):
            if z > u[i]:  # z <= u_i
                z = u[i]
                changed = True
            if row_count[i] < n and u[i] > z:  # u_i <= z: a row with room has u = 0
                u[i] = z
                changed = True
        for j in range(m):
            if v[j] > z:  # y_j <= z
                v[j] = z
                changed = True
            if column_count[j] < n and z > v[j]:  # z <= y_j: a column with room has v = 0
                z = v[j]
                changed = True
        if not changed:
            for i in range(m):
                u[i] = (u[i] - z) << half
                v[i] = (z - v[i]) << half
                if abs(u[i]) > POTENTIAL_LIMIT or abs(v[i]) > POTENTIAL_LIMIT:
                    return False
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _acyclic(m, n, kept, row_count, column_count, u, v, tight, arcs):  # pragma: no cover
    """Whether the search graph of :func:`_canonical_at_most` (all tight entries, and Z)
    has no cycle; then no entry can be switched on and ``kept`` is already canonical.

    Every switch closes a cycle (the path from column ``j`` to row ``i`` plus the
    dropped tight entry ``(i, j)``), so an acyclic graph admits none. Peels nodes
    without arcs to remaining nodes, on bit sets of ``m <= 64`` bits (int64 bit
    patterns): ``arcs[i]`` the columns row ``i`` reaches, ``arcs[m + j]`` the rows
    column ``j`` reaches. O(m^2) per peeling round; usual on generic data.
    """
    for x in range(2 * m):
        arcs[x] = 0
    z_rows = np.int64(0)  # Z -> rows with room
    z_columns = np.int64(0)  # Z -> columns with v = 0
    for i in range(m):
        bit = np.int64(1) << np.int64(i)
        if row_count[i] < n:
            z_rows |= bit
        if v[i] == 0:
            z_columns |= bit
        for j in range(m):
            k = i * m + j
            if tight[k]:
                if kept[k] != 0:
                    arcs[m + j] |= bit
                else:
                    arcs[i] |= np.int64(1) << np.int64(j)
    everything = np.int64(-1) if m == 64 else (np.int64(1) << np.int64(m)) - 1
    alive_rows = everything
    alive_columns = everything
    alive_z = True
    while True:
        removed_rows = np.int64(0)
        removed_columns = np.int64(0)
        for x in range(m):
            bit = np.int64(1) << np.int64(x)
            if arcs[x] & alive_columns == 0 and not (u[x] == 0 and alive_z):
                removed_rows |= bit
            if arcs[m + x] & alive_rows == 0 and not (column_count[x] < n and alive_z):
                removed_columns |= bit
        removed_rows &= alive_rows
        removed_columns &= alive_columns
        remove_z = alive_z and z_rows & alive_rows == 0 and z_columns & alive_columns == 0
        if removed_rows == 0 and removed_columns == 0 and not remove_z:
            break
        alive_rows &= ~removed_rows
        alive_columns &= ~removed_columns
        alive_z = alive_z and not remove_z
    return alive_rows == 0 and alive_columns == 0 and not alive_z


@numba.njit(cache=True, nogil=True)
def _canonical_at_most(
    w, m, n, kept, row_count, column_count, u, v, tight, queue, parent_node, parent_entry
):  # pragma: no cover
    """Turn the optimal ``kept`` into the canonical at-most optimum (module docstring, step 3).

    Search nodes: rows ``0..m-1``, columns ``m..2m-1``, ``Z = 2m``.
    """
    z = 2 * m
    free_dropped = 0
    for i in range(m):
        for j in range(m):
            k = i * m + j
            tight[k] = w[k] == u[i] + v[j]
            if tight[k] and kept[k] == 0:
                free_dropped += 1
    if free_dropped == 0:
        return
    if m <= 64 and _acyclic(m, n, kept, row_count, column_count, u, v, tight, queue):
        return
    for k in range(m * m):
        if kept[k] != 0 or not tight[k]:
            continue
        i = k // m
        j = k - i * m
        # Column j must gain room or lose a later kept tight entry; so must row i.
        possible = column_count[j] < n
        for a in range(m):
            entry = a * m + j
            possible |= entry > k and kept[entry] != 0 and tight[entry]
        if not possible:
            continue
        possible = row_count[i] < n
        for b in range(j + 1, m):
            entry = i * m + b
            possible |= kept[entry] != 0 and tight[entry]
        if not possible:
            continue
        for x in range(z + 1):
            parent_node[x] = -2
        parent_node[m + j] = -1
        head = 0
        tail = 1
        queue[0] = m + j
        found = False
        while head < tail and not found:
            x = queue[head]
            head += 1
            for y in range(z + 1):
                entry = -1
                if x == z:
                    usable = (y < m and row_count[y] < n) or (m <= y < z and v[y - m] == 0)
                elif x >= m:  # column -> row through a kept entry, or -> Z with room
                    if y < m:
                        entry = y * m + (x - m)
                        usable = kept[entry] != 0
                    else:
                        usable = y == z and column_count[x - m] < n
                else:  # row -> column through a dropped entry, or -> Z with u = 0
                    if m <= y < z:
                        entry = x * m + (y - m)
                        usable = kept[entry] == 0
                    else:
                        usable = y == z and u[x] == 0
                if entry >= 0:
                    usable = usable and tight[entry] and entry > k
                if not usable or parent_node[y] != -2:
                    continue
                parent_node[y] = x
                parent_entry[y] = entry
                if y == i:
                    found = True
                    break
                queue[tail] = y
                tail += 1
        if not found:
            continue
        kept[k] = 1
        row_count[i] += 1
        column_count[j] += 1
        x = i
        while parent_node[x] != -1:
            entry = parent_entry[x]
            if entry >= 0:
                change = 1 - 2 * kept[entry]
                kept[entry] = 1 - kept[entry]
                row_count[entry // m] += change
                column_count[entry % m] += change
            x = parent_node[x]


@numba.njit(cache=True, nogil=True)
def _at_most_range(
    bits,
    fraction_bits,
    n,
    m,
    max_bits,
    tile_list,
    first,
    last,
    exact_mask,
    exact_status,
    exact_exponents,
    exact_u,
    exact_v,
    mask,
    status,
    kept_units,
    exponents,
    row_potentials,
    column_potentials,
):  # pragma: no cover
    """Solve the tiles ``tile_list[first:last]`` (row-major tile numbers); scratch per call.

    ``exact_*``: the exactly-``n`` kernel's results for the same tiles (mask, status,
    exponent, duals ``u`` and ``v`` in units), tried first (:func:`_start_from_exact`);
    ``exact_status`` of length 0 means none (every tile runs :func:`_ssp_at_most`).
    """
    use_exact = len(exact_status) > 0
    tiles_across = bits.shape[1] // m
    nodes = 2 * m + 2
    units = np.zeros(2 * m * m, np.int64)
    kept = np.zeros(m * m, np.int64)
    tight = np.zeros(m * m, np.bool_)
    row_count = np.zeros(m, np.int64)
    column_count = np.zeros(m, np.int64)
    potential = np.zeros(nodes, np.int64)
    distance = np.zeros(nodes, np.int64)
    parent = np.zeros(nodes, np.int64)
    settled = np.zeros(nodes, np.int64)
    u = np.zeros(m, np.int64)
    v = np.zeros(m, np.int64)
    queue = np.zeros(2 * m + 1, np.int64)
    parent_node = np.zeros(2 * m + 1, np.int64)
    parent_entry = np.zeros(2 * m + 1, np.int64)
    for index in range(first, last):
        t = tile_list[index]
        r0 = (t // tiles_across) * m
        c0 = (t % tiles_across) * m
        code, exponent = _load_units(bits, r0, c0, m, fraction_bits, max_bits, units)
        status[t] = code
        exponents[t] = exponent
        if code != SOLVED and code != SOLVED_TRUNCATED:
            continue
        truncated = code == SOLVED_TRUNCATED
        # The exact kernel truncates a too-wide tile to the same exponent (its status is
        # then SOLVED_TRUNCATED too), so its duals are in these units.
        ok = (
            use_exact
            and n > 0
            and exact_status[t] == code
            and exact_exponents[t] == exponent
            and _start_from_exact(
                units, m, n, t, exact_mask, r0, c0, exact_u, exact_v, kept, row_count,
                column_count, u, v, truncated, potential, distance, parent, settled,
            )
        )  # fmt: skip
        if not ok:
            ok = _ssp_at_most(
                units, m, n, kept, row_count, column_count, potential, distance, parent,
                settled, u, v,
            )  # fmt: skip
            if ok and truncated:
                # Optimal for the sticky units; certified for the true scores, or handed back.
                ok = _certify_at_most(units, m, n, kept, row_count, column_count, u, v, True)
        if not ok:
            status[t] = TOO_WIDE
            continue
        _canonical_at_most(
            units, m, n, kept, row_count, column_count, u, v, tight, queue, parent_node,
            parent_entry,
        )  # fmt: skip
        total = np.int64(0)
        for i in range(m):
            row_potentials[t, i] = u[i]
            column_potentials[t, i] = v[i]
            for j in range(m):
                keep = kept[i * m + j] != 0
                mask[r0 + i, c0 + j] = keep
                total += units[i * m + j] * np.int64(keep)
        kept_units[t] = total


@numba.njit(cache=True, nogil=True)
def at_most_tiles(
    bits,
    fraction_bits,
    n,
    m,
    max_bits,
    tile_list,
    exact,
    mask,
    status,
    kept_units,
    exponents,
    row_potentials,
    column_potentials,
):  # pragma: no cover
    """Canonical optimal at-most-``n`` mask of the listed aligned tiles (one thread).

    Per tile ``t`` (row-major): ``status[t]``; where ``SOLVED``, the kept sum
    ``kept_units[t] * 2**exponents[t]`` and the duals ``u``, ``v`` in the same units.
    ``exact``: ``(mask, status, exponents, u, v)`` of the exactly-``n`` kernel, tried
    first (:func:`_start_from_exact`; empty arrays: not used).
    """
    _at_most_range(
        bits, fraction_bits, n, m, max_bits, tile_list, 0, len(tile_list), exact[0], exact[1],
        exact[2], exact[3], exact[4], mask, status, kept_units, exponents, row_potentials,
        column_potentials,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True, parallel=True)
def at_most_tiles_parallel(
    bits,
    fraction_bits,
    n,
    m,
    max_bits,
    tile_list,
    chunks,
    exact,
    mask,
    status,
    kept_units,
    exponents,
    row_potentials,
    column_potentials,
):  # pragma: no cover
    """:func:`at_most_tiles` over ``chunks`` independent ranges of tiles, in parallel."""
    count = len(tile_list)
    for c in numba.prange(chunks):
        _at_most_range(
            bits, fraction_bits, n, m, max_bits, tile_list, count * c // chunks,
            count * (c + 1) // chunks, exact[0], exact[1], exact[2], exact[3], exact[4], mask,
            status, kept_units, exponents, row_potentials, column_potentials,
        )  # fmt: skip
