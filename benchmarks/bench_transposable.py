"""Benchmark: exact transposable N:M masks, nmref against the solvers people use.

Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_transposable.py            # 1024x1024
    PYTHONPATH=. python benchmarks/bench_transposable.py --sizes 1024 4096

For each size and pattern (2:4, 4:8, 8:16, 16:32, 32:64) on a float32 N(0,1)
matrix scored by |w| it times, in the same run:

* nmref ``exact`` (one thread and ``--threads`` threads: the thread ratio is
  printed), ``exact`` with ``fill="at_most"``, ``greedy``, ``greedy-prune`` and
  ``brute`` (2:4);
* peers: OR-Tools ``SimpleMinCostFlow`` with every tile in one graph (and, for
  the at-most fill, the same graph with one slack node per tile), SciPy
  ``linprog(method="highs")`` batched (block-diagonal LPs of 1024 tiles),
  networkx ``min_cost_flow`` per tile (as the authors' code does), and for 2:4
  a NumPy 90-pattern matmul + argmax (apex/Hu et al. style).

``--scores near-tie`` replaces the |N(0,1)| matrix by near-tie tiles: every 64x64 block
is ``c + k ulp(c)`` with ``k`` in 0..3 and ``c`` one of 1e-12, 1, 1e12 (float64: values
1 ulp apart, which no int64 unit scaling of a 16x16 tile holds with room for sums, so
nmref solves them with Python ints, spec T5). Use small sizes::

    PYTHONPATH=. python benchmarks/bench_transposable.py --scores near-tie --dtype float64 \
        --sizes 64 --patterns 4:16 8:16 12:16 --repeats 1 --skip-peers "SciPy HiGHS (batched LP)"

Slow peers run on a prefix of the tiles that fits ``--peer-budget`` seconds
and are extrapolated linearly (marked ``~``). Every peer's objective is
checked against nmref's on the tiles it solved. Times are medians of
``--repeats`` runs; Numba compile time is reported separately (first call
minus median). Ratios are peer time / nmref exact time (one thread): above 1
means nmref is faster. Per core: run under ``taskset -c 0`` (the nmref serial
rows then use one core; the ``threads`` row needs two: ``taskset -c 0,1``), and
a line per case gives nmref exact's entries/s and tiles/s on one thread and the
``threads``/one-thread speed ratio, beside OR-Tools' on the same tiles.

Compiled or loaded: without ``NUMBA_CACHE_DIR`` the script compiles every kernel into a
fresh cache, and the kernels then run in the process that compiled them, which on the
2-core machines of this project runs the flow kernel 20-30% slower than a process that
loads the same kernels from the cache (8:16, 8192x8192: 47M against 59M-64M entries/s;
cause not found, spec Appendix A). The figures in the spec come from a process that
loaded them: fill a cache first, then run again with the same cache::

    export NUMBA_CACHE_DIR=/tmp/nmref-bench-cache
    PYTHONPATH=. python benchmarks/bench_transposable.py --sizes 256 --repeats 1 --skip-peers all
    PYTHONPATH=. taskset -c 0,1 python benchmarks/bench_transposable.py --sizes 8192 --repeats 3
"""

from __future__ import annotations

import os

# One BLAS thread, so that the NumPy peer runs on one core like nmref's serial
# kernels (the targets are per core). Set BENCH_BLAS_THREADS to change.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, os.environ.get("BENCH_BLAS_THREADS", "1"))

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from nmref.transposable import transposable_mask, transposable_patterns  # noqa: E402
from nmref.transposable._small import kernels_only  # noqa: E402


def median_time(function: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(first call, median of the next ``repeats`` calls) in seconds."""
    start = time.perf_counter()
    function()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def tiles_of(scores: np.ndarray, m: int) -> np.ndarray:
    rows, columns = scores.shape
    return scores.reshape(rows // m, m, columns // m, m).transpose(0, 2, 1, 3).reshape(-1, m, m)


def kept_per_tile(scores: np.ndarray, mask: np.ndarray, m: int) -> np.ndarray:
    return tiles_of(np.where(mask, scores.astype(np.float64), 0.0), m).sum(axis=(1, 2))


# ----------------------------------------------------------------------------
# Peers. Each solves the first ``count`` tiles and returns their kept sums.
# ----------------------------------------------------------------------------


def integer_costs(tiles: np.ndarray) -> np.ndarray:
    # Peers need integer costs (nmref itself is exact, spec T5): a relative scale 2**40 / max,
    # because a fixed x1e6 would create artificial ties on small weights.
    scale = 2.0**40 / max(float(tiles.max()), 1e-300)
    return np.rint(tiles.astype(np.float64) * scale).astype(np.int64)


def ortools_peer(tiles: np.ndarray, n: int) -> np.ndarray:
    from ortools.graph.python import min_cost_flow

    count, m, _ = tiles.shape
    costs = integer_costs(tiles)
    solver = min_cost_flow.SimpleMinCostFlow()
    tile_index = np.repeat(np.arange(count), m * m)
    row = np.tile(np.repeat(np.arange(m), m), count)
    column = np.tile(np.tile(np.arange(m), m), count)
    tails = tile_index * 2 * m + row
    heads = tile_index * 2 * m + m + column
    arcs = solver.add_arcs_with_capacity_and_unit_cost(
        tails, heads, np.ones(tails.size, dtype=np.int64), -costs.ravel()
    )
    supplies = np.tile(np.concatenate([np.full(m, n), np.full(m, -n)]), count)
    solver.set_nodes_supplies(np.arange(2 * m * count), supplies)
    status = solver.solve()
    assert status == solver.OPTIMAL, status
    flows = solver.flows(arcs).reshape(count, m, m).astype(bool)
    return np.where(flows, tiles.astype(np.float64), 0).sum(axis=(1, 2))


def ortools_at_most_peer(tiles: np.ndarray, n: int) -> np.ndarray:
    """OR-Tools on the at-most fill: per tile one slack node takes a row's unused units
    (row -> slack, capacity n) and hands them to columns (slack -> column, capacity n)."""
    from ortools.graph.python import min_cost_flow

    count, m, _ = tiles.shape
    costs = integer_costs(tiles)
    solver = min_cost_flow.SimpleMinCostFlow()
    nodes = 2 * m + 1  # rows, columns, the slack node
    tile_index = np.repeat(np.arange(count), m * m)
    row = np.tile(np.repeat(np.arange(m), m), count)
    column = np.tile(np.tile(np.arange(m), m), count)
    arcs = solver.add_arcs_with_capacity_and_unit_cost(
        tile_index * nodes + row,
        tile_index * nodes + m + column,
        np.ones(tile_index.size, dtype=np.int64),
        -costs.ravel(),
    )
    slack = np.repeat(np.arange(count) * nodes + 2 * m, m)
    line = np.tile(np.arange(m), count) + np.repeat(np.arange(count) * nodes, m)
    zeros = np.zeros(slack.size, dtype=np.int64)
    capacity = np.full(slack.size, n, dtype=np.int64)
    solver.add_arcs_with_capacity_and_unit_cost(line, slack, capacity, zeros)
    solver.add_arcs_with_capacity_and_unit_cost(slack, line + m, capacity, zeros)
    supplies = np.tile(np.concatenate([np.full(m, n), np.full(m, -n), [0]]), count)
    solver.set_nodes_supplies(np.arange(nodes * count), supplies)
    status = solver.solve()
    assert status == solver.OPTIMAL, status
    flows = solver.flows(arcs).reshape(count, m, m).astype(bool)
    return np.where(flows, tiles.astype(np.float64), 0).sum(axis=(1, 2))


def highs_peer(tiles: np.ndarray, n: int, batch: int = 1024) -> np.ndarray:
    from scipy.optimize import linprog
    from scipy.sparse import block_diag, csr_matrix, vstack

    count, m, _ = tiles.shape
    rows = csr_matrix(np.kron(np.eye(m), np.ones(m)))
    columns = csr_matrix(np.kron(np.ones(m), np.eye(m)))
    one = vstack([rows, columns])
    result = []
    for start in range(0, count, batch):
        chunk = tiles[start : start + batch]
        k = len(chunk)
        solution = linprog(
            -chunk.astype(np.float64).ravel(),
            A_eq=block_diag([one] * k, format="csr"),
            b_eq=np.full(2 * m * k, n),
            bounds=(0, 1),
            method="highs-ds",
        )
        assert solution.status == 0
        kept = np.rint(solution.x).reshape(k, m, m)
        result.append((kept * chunk).sum(axis=(1, 2)))
    return np.concatenate(result)


def networkx_peer(tiles: np.ndarray, n: int) -> np.ndarray:
    import networkx as nx

    count, m, _ = tiles.shape
    costs = integer_costs(tiles)
    result = np.empty(count)
    for t in range(count):
        graph = nx.DiGraph()
        for i in range(m):
            graph.add_node(i, demand=-n)
            graph.add_node(m + i, demand=n)
        for i in range(m):
            for j in range(m):
                graph.add_edge(i, m + j, weight=-int(costs[t, i, j]), capacity=1)
        flows = nx.min_cost_flow(graph)
        result[t] = sum(
            float(tiles[t, i, j]) for i in range(m) for j in range(m) if flows[i][m + j]
        )
    return result


def numpy_patterns_peer(tiles: np.ndarray, n: int) -> np.ndarray:
    m = tiles.shape[1]
    patterns = transposable_patterns(n, m).reshape(-1, m * m).astype(np.float32)
    flat = tiles.reshape(len(tiles), m * m)
    best = np.argmax(flat @ patterns.T, axis=1)
    return (flat.astype(np.float64) * patterns[best]).sum(axis=1)


PEERS: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "OR-Tools SimpleMinCostFlow (one graph)": ortools_peer,
    "OR-Tools SimpleMinCostFlow, fill='at_most' (one graph)": ortools_at_most_peer,
    "SciPy HiGHS (batched LP)": highs_peer,
    "networkx min_cost_flow (per tile)": networkx_peer,
    "NumPy 90-pattern matmul+argmax": numpy_patterns_peer,
}


def run_peer(name, peer, tiles, n, budget, repeats, reference):
    """Time a peer on a prefix of tiles that fits the budget; extrapolate to all."""
    total = len(tiles)
    count = min(total, 256)
    while True:
        start = time.perf_counter()
        kept = peer(tiles[:count], n)
        elapsed = time.perf_counter() - start
        # Grow the prefix until it is all tiles or long enough to time well.
        if count == total or elapsed * 4 > budget / 4:
            break
        count = min(total, count * 4)
    if count == total and elapsed * repeats < budget:
        _, elapsed = median_time(lambda: peer(tiles, n), repeats)
    seconds = elapsed * total / count
    # Integer-scaled peers may return another optimal mask among near-ties; the
    # objective must agree to the scaling resolution.
    error = float(np.max(np.abs(kept - reference[:count]) / np.maximum(1.0, reference[:count])))
    return seconds, count < total, count, error


def time_at_most(
    scores: np.ndarray, n: int, m: int, budget: float, repeats: int
) -> tuple[float, int]:
    """Seconds for ``fill="at_most"`` on all of ``scores``, timed on the first tile rows
    that fit ``budget`` and extrapolated (its kernel has no speed target yet)."""
    # Compile outside the clock: through the kernels, because a call this small would
    # otherwise take the NumPy small-input path and leave the kernels to the first timed call.
    with kernels_only():
        transposable_mask(scores[:m, : 4 * m], n, m, fill="at_most")
    rows = m
    while True:
        # Untimed first: a larger prefix can reach kernels the smaller one did not (a tile
        # handed back to the at-most flow kernel), whose compile must not be extrapolated.
        transposable_mask(scores[:rows], n, m, fill="at_most")
        start = time.perf_counter()
        transposable_mask(scores[:rows], n, m, fill="at_most")
        elapsed = time.perf_counter() - start
        if rows >= scores.shape[0] or elapsed * 4 > budget / 4:
            break
        rows = min(scores.shape[0], rows * 4)
    if rows == scores.shape[0] and elapsed * repeats < budget:
        _, elapsed = median_time(lambda: transposable_mask(scores, n, m, fill="at_most"), repeats)
    return elapsed * scores.shape[0] / rows, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024])
    parser.add_argument("--patterns", nargs="+", default=["2:4", "4:8", "8:16", "16:32", "32:64"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peer-budget", type=float, default=20.0, help="seconds per slow peer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-peers", nargs="*", default=[], help="peer names, or 'all'")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument(
        "--scores",
        default="abs-normal",
        choices=("abs-normal", "near-tie"),
        help="|N(0,1)| (default) or near-tie tiles 1 ulp apart (see the module docstring)",
    )
    args = parser.parse_args()

    # A fresh Numba cache unless one is given, so the first call measures a cold compile
    # (and the rest run in the compiling process: see the module docstring).
    os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="bench-numba-"))
    import numba

    print(
        f"numba {numba.__version__}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
        f"BLAS threads {os.environ['OPENBLAS_NUM_THREADS']}"
    )
    rng = np.random.default_rng(0)
    for size in args.sizes:
        if args.scores == "near-tie":
            scores = near_tie_scores(size, args.dtype, rng)
        else:
            scores = np.abs(rng.standard_normal((size, size)).astype(args.dtype))
        for text in args.patterns:
            n, m = (int(x) for x in text.split(":"))
            bench_case(scores, n, m, args)


def near_tie_scores(size: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """``c + k ulp(c)``, ``k`` in 0..3, with ``c`` one of 1e-12, 1, 1e12 per 64x64 block."""
    block = min(size, 64)
    scores = np.empty((size, size), dtype=dtype)
    for r in range(0, size, block):
        for c in range(0, size, block):
            base = np.asarray(10.0 ** rng.choice([-12, 0, 12]), dtype=dtype)
            steps = rng.integers(0, 4, (block, block))
            scores[r : r + block, c : c + block] = base + steps * np.spacing(base)
    return scores


def bench_case(scores: np.ndarray, n: int, m: int, args: argparse.Namespace) -> None:
    import numba

    tiles = tiles_of(scores, m)
    total = len(tiles)
    rows = []
    compile_exact, exact = median_time(lambda: transposable_mask(scores, n, m), args.repeats)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    compile_parallel, parallel = median_time(
        lambda: transposable_mask(scores, n, m, parallel=True), args.repeats
    )
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    rows.append(("nmref exact (1 thread)", exact, False, 0.0))
    rows.append((f"nmref exact ({args.threads} threads, parallel=True)", parallel, False, 0.0))
    at_most, at_most_rows = time_at_most(scores, n, m, args.peer_budget, args.repeats)
    extrapolated = at_most_rows < scores.shape[0]
    label = "nmref exact fill='at_most' (1 thread)"
    label += f" [{at_most_rows} rows]" if extrapolated else ""
    rows.append((label, at_most, extrapolated, 0.0))
    # Brute force is the literal oracle: on float64 it runs on Python ints (slow).
    brute = ("brute",) if m <= 4 and scores.dtype != np.float64 else ()
    for method in ("greedy", "greedy-prune", *brute):
        _, seconds = median_time(
            lambda method=method: transposable_mask(scores, n, m, method=method), args.repeats
        )
        rows.append((f"nmref {method}", seconds, False, 0.0))
    reference = kept_per_tile(scores, transposable_mask(scores, n, m), m)
    # The at-most reference on the tile rows the OR-Tools at-most peer may reach.
    at_most_reference = kept_per_tile(
        scores[:at_most_rows], transposable_mask(scores[:at_most_rows], n, m, fill="at_most"), m
    )
    ortools_seconds = None
    for name, peer in PEERS.items():
        skipped = name in args.skip_peers or "all" in args.skip_peers
        if skipped or ("90-pattern" in name and (n, m) != (2, 4)):
            continue
        if peer is ortools_at_most_peer:
            # Only the tiles with an at-most reference (the prefix timed above).
            prefix = tiles[: len(at_most_reference)]
            seconds, extrapolated, count, error = run_peer(
                name, peer, prefix, n, args.peer_budget, args.repeats, at_most_reference
            )
            seconds *= total / len(prefix)
            extrapolated = extrapolated or len(prefix) < total
        else:
            seconds, extrapolated, count, error = run_peer(
                name, peer, tiles, n, args.peer_budget, args.repeats, reference
            )
        if peer is ortools_peer:
            ortools_seconds = (seconds, extrapolated)
        label = name + (f" [{count} tiles]" if extrapolated else "")
        rows.append((label, seconds, extrapolated, error))
    size = f"{scores.shape[0]}x{scores.shape[1]}"
    print(
        f"\n{size} {scores.dtype} {'|N(0,1)|' if args.scores == 'abs-normal' else 'near-tie'}, "
        f"{n}:{m}: {total} tiles; "
        f"Numba compile (first call minus median; ~0 once an earlier case compiled the "
        f"same kernels): exact {max(compile_exact - exact, 0.0):.2f} s, "
        f"parallel {max(compile_parallel - parallel, 0.0):.2f} s"
    )
    print(
        f"{'method':58s} {'seconds':>10s} {'tiles/s':>12s} {'ms/tile':>9s} {'peer/exact':>11s}"
        f" {'max rel obj err':>16s}"
    )
    for name, seconds, extrapolated, error in rows:
        mark = "~" if extrapolated else " "
        print(
            f"{name:58s} {mark}{seconds:9.4f} {total / seconds:12.0f} "
            f"{1e3 * seconds / total:9.3f} {seconds / exact:11.2f} {error:16.1e}"
        )
    entries = scores.size
    summary = (
        f"SUMMARY {n}:{m} {size}: nmref exact 1 thread {entries / exact / 1e6:.2f}M entries/s, "
        f"{total / exact / 1e6:.3f}M tiles/s; {args.threads} threads / 1 thread "
        f"{exact / parallel:.2f}x"
    )
    if ortools_seconds is not None:
        seconds, extrapolated = ortools_seconds
        mark = "~" if extrapolated else ""
        summary += (
            f"; OR-Tools {mark}{entries / seconds / 1e6:.2f}M entries/s, "
            f"OR-Tools/nmref {mark}{seconds / exact:.1f}x"
        )
    print(summary)


if __name__ == "__main__":
    main()
