"""Step-by-step traces of the algorithms on one small input, in plain words (``nmref explain``).

``nmref explain transposable TILE.npy --pattern 2:4`` prints how the readable solver
(:mod:`nmref.transposable.flow`) finds the optimal transposable mask of one ``m x m`` tile: the
flow network, every augmenting path with the potentials after it, the canonical tie pass
(:mod:`nmref.transposable.ties`) and the dual certificate that proves the result optimal.
``nmref explain nm_mask`` does the same for the 1-D rule (specs/conventions.md) and ``nmref
explain bimask`` for Bi-Mask's backward mask (specs/bimask.md). ``--json`` prints the same steps
as data for tools.

Every explanation is checked against the library before it is returned: the traced mask must
equal :func:`nmref.transposable_mask`, :func:`nmref.nm_mask` or
:func:`nmref.bimask.backward_mask` on the same input, so the words describe what the library
does. The trace only observes the solver (the ``trace`` callback of
:func:`~nmref.transposable.flow.successive_shortest_paths`); it never changes a result.

Indices are 0-based, as everywhere in nmref. Each explainer is meant for small inputs: its cost
is the readable solver's (O(n m^3) per tile for the flow, O(m^4) for the tie pass), and its
output grows with the input, so inputs are limited to :data:`MAX_ENTRIES` entries.
"""

from __future__ import annotations

import itertools
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.patterns import check_pattern

__all__ = [
    "ALGORITHMS",
    "MAX_ENTRIES",
    "explain_bimask",
    "explain_nm_mask",
    "explain_transposable",
    "render_text",
]

#: The algorithms :mod:`nmref.explain` traces (``nmref explain ALGORITHM``).
ALGORITHMS = ("transposable", "nm_mask", "bimask")
#: The most entries an input to explain may have: beyond this the trace is no longer
#: something a person reads.
MAX_ENTRIES = 4096


def _check_small(array: NDArray, name: str) -> None:
    if array.size > MAX_ENTRIES:
        raise ValueError(
            f"{name} has {array.size} entries; explain is for small inputs "
            f"(at most {MAX_ENTRIES}): cut out a piece first"
        )


def _step(title: str, lines: list[str], **data: Any) -> dict[str, Any]:
    return {"title": title, "lines": lines, **data}


def _bits(mask: Any) -> list[list[int]]:
    return [[int(bool(x)) for x in row] for row in mask]


def _grid(rows: list[list[Any]], width: int | None = None) -> list[str]:
    cells = [[str(x) for x in row] for row in rows]
    width = width or max((len(c) for row in cells for c in row), default=1)
    return ["  " + " ".join(c.rjust(width) for c in row) for row in cells]


# --------------------------------------------------------------------------
# Transposable: one tile
# --------------------------------------------------------------------------


def _node_name(node: int, m: int) -> str:
    if node == 0:
        return "source"
    if node <= m:
        return f"row {node - 1}"
    if node <= 2 * m:
        return f"column {node - m - 1}"
    return "sink"


def explain_transposable(tile: ArrayLike, n: int, m: int) -> dict[str, Any]:
    """Trace the exact transposable solver on one ``m x m`` tile.

    Parameters
    ----------
    tile : array_like of real, shape (m, m)
        The scores (``|w|`` for magnitude masks); finite.
    n, m : int
        Kept entries per row and per column of the tile, and the tile size.

    Returns
    -------
    dict
        ``{"algorithm", "pattern", "steps", "result"}``; each step has a ``title``, plain-word
        ``lines`` and the numbers behind them. ``result["mask"]`` equals
        ``nmref.transposable_mask(tile, n, m)``. ``result["kept_sum_scores"]`` is the
        exact kept sum ``kept_sum * 2**exponent`` rounded once to float, or None where
        it is beyond float64's range (scores near 1e308; the exact integers stay).

    Raises
    ------
    ValueError
        If the tile is not ``m x m``, holds NaN or infinity, or the pattern is invalid.

    See Also
    --------
    nmref.transposable_mask, nmref.transposable_certificate

    Notes
    -----
    Hubara et al. 2021, Sec. 4.1; specs/transposable.md (flow network, ties, certificate).
    Complexity O(n m^3) for the augmentations plus O(m^4) for the tie pass.

    Examples
    --------
    >>> e = explain_transposable([[4, 3, 2, 1], [1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4]], 2, 4)
    >>> e["result"]["mask"]
    [[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1]]
    >>> e["result"]["kept_sum"], e["result"]["certified"]
    (28, True)
    """
    from nmref.transposable import transposable_mask
    from nmref.transposable.flow import certifies_optimal, successive_shortest_paths
    from nmref.transposable.ties import _alternating_path, canonical_optimum
    from nmref.transposable.tiles import dyadic, exact_integer_tile

    pattern = check_pattern(n, m)
    n, m = pattern.n, pattern.m
    array = np.asarray(tile)
    if array.shape != (m, m):
        raise ValueError(f"tile must be one {m}x{m} tile for m={m}, got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise TypeError(f"tile must hold real numbers, got dtype {array.dtype}")
    # The library validates (NaN, infinities) and gives the mask the trace must reproduce.
    expected = _bits(transposable_mask(array, n, m))
    units, exponent = exact_integer_tile(array)
    steps = []

    values = array.astype(np.float64).tolist()
    lines = [f"Scores of the {m}x{m} tile (rows 0..{m - 1}, columns 0..{m - 1}):"]
    lines += _grid([[_number(x) for x in row] for row in values])
    if exponent != 0:
        lines.append(
            f"Exact integers: every score is units x 2^{exponent}, so sums and comparisons "
            "below are exact."
        )
        lines += _grid(units)
    lines.append(
        f"Goal: keep exactly {n} entries in every row and every column with the largest total "
        f"score (a maximum-weight {n}-matching of rows to columns)."
    )
    steps.append(_step("input", lines, scores=values, units=units, exponent=exponent))

    lines = [
        f"Nodes: source, rows 0..{m - 1}, columns 0..{m - 1}, sink.",
        f"Arcs: source -> row i (capacity {n}, cost 0); row i -> column j (capacity 1, "
        "cost -w[i][j]: keeping (i, j) gains its score); column j -> sink "
        f"(capacity {n}, cost 0).",
        f"A minimum-cost flow of {n * m} units is an optimal mask: a unit on row i -> column j "
        "means keep (i, j).",
        "Successive shortest paths: push one unit at a time along the cheapest path of the "
        "residual network (Dijkstra on costs made non-negative by node potentials).",
    ]
    steps.append(_step("network", lines, nodes=2 * m + 2, flow=n * m))

    events: list[dict] = []
    kept, row_potentials, column_potentials = successive_shortest_paths(
        units, n, trace=events.append
    )
    start = events[0]["potential"]
    lines = [
        "Start: potential 0 at the source and the rows; each column at minus its largest "
        "incoming score, the sink at the lowest column potential, so every arc's reduced "
        "cost is >= 0.",
        "  column potentials: " + " ".join(str(p) for p in start[m + 1 : 2 * m + 1]),
    ]
    steps.append(_step("start potentials", lines, potential=start))

    current = [[False] * m for _ in range(m)]
    for number, event in enumerate(events[1:], start=1):
        path = event["path"]
        words = " -> ".join(_node_name(node, m) for node in path)
        added, removed = [], []
        for a, b in itertools.pairwise(path):
            if 1 <= a <= m and m < b <= 2 * m:
                added.append((a - 1, b - m - 1))
            elif m < a <= 2 * m and 1 <= b <= m:
                removed.append((b - 1, a - m - 1))
        for i, j in added:
            current[i][j] = True
        for i, j in removed:
            current[i][j] = False
        gain = sum(units[i][j] for i, j in added) - sum(units[i][j] for i, j in removed)
        potential = event["potential"]
        u = potential[1 : m + 1]
        v = [-p for p in potential[m + 1 : 2 * m + 1]]
        lines = [f"path: {words}"]
        change = [f"keep ({i}, {j})" for i, j in added]
        change += [f"drop ({i}, {j}) again" for i, j in removed]
        lines.append("  " + ", ".join(change) + f"; kept sum +{gain}")
        lines.append(f"  potentials after: u (rows) {u}, v (columns) {v}")
        steps.append(
            _step(
                f"augmentation {number} of {n * m}",
                lines,
                path=[_node_name(node, m) for node in path],
                keep=added,
                drop=removed,
                gain=gain,
                row_potentials=u,
                column_potentials=v,
                mask=_bits(current),
            )
        )
    if current != kept:  # the words above must describe what the solver did
        raise RuntimeError("explain: replaying the augmenting paths disagrees with the solver")

    slack = [
        [units[i][j] - row_potentials[i] - column_potentials[j] for j in range(m)] for i in range(m)
    ]
    tight = [[slack[i][j] == 0 for j in range(m)] for i in range(m)]
    lines = [
        "Mask after the augmentations:",
        *_grid(_bits(kept)),
        "Slack w - u - v of every entry: > 0 is kept in every optimal mask, < 0 dropped in "
        "every one; only tight entries (0) can differ between tied optima.",
        *_grid(slack),
        "Canonical rule: among optimal masks, the lexicographically greatest row-major keep "
        "vector (the lower flat index wins). Scan the entries in row-major order; keep a "
        "dropped tight entry when an alternating cycle of free tight entries lets it in.",
    ]
    canonical = [list(map(bool, row)) for row in kept]
    decisions = []
    for k in range(m * m):
        i, j = divmod(k, m)
        if canonical[i][j] or not tight[i][j]:
            continue
        cycle = _alternating_path(canonical, tight, i, j, first_free=k + 1)
        if cycle is None:
            lines.append(f"  ({i}, {j}) tight, dropped: no alternating cycle, stays dropped")
            decisions.append({"entry": [i, j], "kept": False, "toggled": []})
            continue
        canonical[i][j] = True
        for a, b in cycle:
            canonical[a][b] = not canonical[a][b]
        toggled = ", ".join(f"({a}, {b})" for a, b in cycle)
        lines.append(f"  ({i}, {j}) tight, dropped: keep it, toggling {toggled}")
        decisions.append({"entry": [i, j], "kept": True, "toggled": [list(e) for e in cycle]})
    if not decisions:
        lines.append("  no tight entry is dropped: no tied optimum comes before this mask")
    if canonical != canonical_optimum(units, kept, row_potentials, column_potentials):
        raise RuntimeError("explain: replaying the tie pass disagrees with canonical_optimum")
    steps.append(_step("canonical tie pass", lines, slack=slack, decisions=decisions))

    kept_sum = sum(units[i][j] for i in range(m) for j in range(m) if canonical[i][j])
    bound = (
        n * sum(row_potentials)
        + n * sum(column_potentials)
        + sum(max(s, 0) for row in slack for s in row)
    )
    certified = certifies_optimal(units, canonical, n, row_potentials, column_potentials)
    lines = [
        "Final mask:",
        *_grid(_bits(canonical)),
        f"Certificate: row potentials u = {row_potentials}, column potentials v = "
        f"{column_potentials} (units).",
        "Every kept entry has w >= u + v and every dropped one w <= u + v: "
        + ("yes." if certified else "NO."),
        "So no valid mask can keep more than n*sum(u) + n*sum(v) + sum(max(w - u - v, 0)) = "
        f"{bound}, and this mask keeps {kept_sum}: it is optimal (LP duality).",
    ]
    if exponent != 0:
        lines.append(
            f"In score units: kept sum {_number(dyadic(kept_sum, exponent))}; "
            f"u = {[_number(dyadic(x, exponent)) for x in row_potentials]}, "
            f"v = {[_number(dyadic(x, exponent)) for x in column_potentials]}."
        )
    mask = _bits(canonical)
    same = mask == expected
    lines.append("Same mask as nmref.transposable_mask: " + ("yes." if same else "NO."))
    if not same:
        raise RuntimeError("explain: the traced mask differs from nmref.transposable_mask")
    steps.append(_step("certificate", lines, bound=bound, certified=certified))
    return {
        "algorithm": "transposable",
        "pattern": f"{n}:{m}",
        "steps": steps,
        "result": {
            "mask": mask,
            "kept_sum": kept_sum,
            "kept_sum_scores": _float_or_none(dyadic(kept_sum, exponent)),
            "row_potentials": row_potentials,
            "column_potentials": column_potentials,
            "exponent": exponent,
            "certified": certified,
        },
    }


def _float_or_none(x: Fraction) -> float | None:
    """``x`` rounded once to float, or None beyond float64's range (strict JSON has no inf)."""
    from nmref.transposable.tiles import rounded

    value = rounded(x)
    return value if np.isfinite(value) else None


def _number(x: float | int | Fraction) -> str:
    if isinstance(x, Fraction) and abs(x) > Fraction(np.finfo(np.float64).max):
        # An exact sum beyond float64's range (scores near 1e308): its own digits.
        digits = Context(prec=6).divide(Decimal(x.numerator), Decimal(x.denominator))
        return format(digits.normalize(), "g")
    value = float(x)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else f"{value:.6g}"


# --------------------------------------------------------------------------
# 1-D N:M masks
# --------------------------------------------------------------------------


def _python_values(row: NDArray) -> list:
    # Python ints and floats compare exactly (int64 beyond 2**53 included); -0.0 == 0.0.
    if row.dtype.kind in "biu":
        return [int(x) for x in row]
    return [float(x) for x in row]


def explain_nm_mask(scores: ArrayLike, n: int, m: int, *, max_groups: int = 64) -> dict[str, Any]:
    """Trace the 1-D N:M rule on a small 1-D or 2-D input (groups along the last axis).

    Parameters
    ----------
    scores : array_like of real, shape (length,) or (rows, length)
        ``length`` a multiple of ``m``; no NaN (as :func:`nmref.nm_mask`).
    n, m : int
        Keep ``n`` of every ``m`` consecutive scores.
    max_groups : int, default 64
        Groups described in words (the data holds every group).

    Returns
    -------
    dict
        Steps per group (scores, ranking, kept positions, whether a tie decided) and
        ``result["mask"]``, equal to ``nmref.nm_mask(scores, n, m)``.

    Raises
    ------
    ValueError
        As :func:`nmref.nm_mask`, or if the input has more than two dimensions.

    See Also
    --------
    nmref.nm_mask, nmref.nm_mask_reference

    Notes
    -----
    specs/conventions.md (rules C1-C6). Complexity O(size log m).

    Examples
    --------
    >>> e = explain_nm_mask([3.0, 1.0, 3.0, 2.0], 2, 4)
    >>> e["result"]["mask"], e["steps"][1]["tie"]
    ([1, 0, 1, 0], False)
    >>> explain_nm_mask([1.0, 1.0, 1.0, 1.0], 2, 4)["steps"][1]["tie"]
    True
    """
    from nmref.masks import nm_mask

    pattern = check_pattern(n, m)
    n, m = pattern.n, pattern.m
    array = np.asarray(scores)
    if array.ndim not in (1, 2):
        raise ValueError(f"scores must be 1-D or 2-D for explain, got {array.ndim} dimensions")
    _check_small(array, "scores")
    expected = nm_mask(array, n, m)
    rows = array.reshape(1, -1) if array.ndim == 1 else array
    steps = [
        _step(
            "rule",
            [
                f"Groups are {m} consecutive scores along the last axis; keep the {n} largest "
                "of each group (N counts kept entries).",
                "Ranking: by value, larger first; among equal scores the lower index wins; "
                "-0.0 equals 0.0; +Inf is the largest, -Inf the smallest.",
            ],
            n=n,
            m=m,
        )
    ]
    mask = np.zeros(rows.shape, dtype=bool)
    described = 0
    for r, row in enumerate(rows):
        for g in range(rows.shape[1] // m):
            values = _python_values(row[g * m : (g + 1) * m])
            order = sorted(range(m), key=lambda k, v=values: (-v[k], k))
            keep = sorted(order[:n])
            for k in keep:
                mask[r, g * m + k] = True
            tie = 0 < n < m and values[order[n - 1]] == values[order[n]]
            where = f"row {r}, group {g}" if array.ndim == 2 else f"group {g}"
            lines = [
                f"{where} (entries {g * m}..{g * m + m - 1}): scores "
                + ", ".join(_number(x) if abs(x) != float("inf") else str(x) for x in values),
                "  ranked: " + ", ".join(f"#{k}" for k in order) + f"; keep #{keep}",
            ]
            if tie:
                tied = [k for k in range(m) if values[k] == values[order[n - 1]]]
                lines.append(
                    f"  tie at the cut: positions {tied} score the same; the lower index wins"
                )
            if described < max_groups:
                described += 1
            else:
                lines = []
            steps.append(
                _step(
                    where,
                    lines,
                    row=r,
                    group=g,
                    ranking=order,
                    keep=keep,
                    tie=bool(tie),
                )
            )
    total = rows.shape[0] * (rows.shape[1] // m)
    if described < total:
        steps.append(_step("more", [f"({total - described} more groups in --json)"]))
    result = mask.reshape(array.shape)
    if not np.array_equal(result, expected):
        raise RuntimeError("explain: the traced mask differs from nmref.nm_mask")
    flat = result.astype(int).tolist()
    steps.append(_step("result", ["Mask (1 = kept):", *_grid(flat if array.ndim == 2 else [flat])]))
    return {"algorithm": "nm_mask", "pattern": f"{n}:{m}", "steps": steps, "result": {"mask": flat}}


# --------------------------------------------------------------------------
# Bi-Mask: the backward mask
# --------------------------------------------------------------------------


def explain_bimask(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    candidates: int = 10,
    rng: int = 0,
    max_blocks: int = 64,
) -> dict[str, Any]:
    """Trace Bi-Mask's forward mask, permutation search and backward mask on a small weight.

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        A Linear weight; ``in`` and ``out`` multiples of ``m``.
    n, m : int
        The pattern of both masks.
    candidates : int, default 10
        Random permutations tried (:func:`nmref.bimask.search_permutation`, criterion
        ``"kept"``, the authors' code); 0 keeps the identity.
    rng : int, default 0
        Seed of the candidates.
    max_blocks : int, default 64
        Backward blocks described in words (the data holds every block).

    Returns
    -------
    dict
        Steps (forward mask, the search, each backward block) and ``result`` with
        ``forward_mask``, ``permutation`` and ``backward_mask``, the last equal to
        :func:`nmref.bimask.backward_mask` with that permutation.

    Raises
    ------
    ValueError
        If the weight is not 2-D, or as :func:`nmref.bimask.backward_mask`.

    See Also
    --------
    nmref.bimask.backward_mask, nmref.bimask.search_permutation

    Notes
    -----
    Zhang et al. 2023, Sec. 3; specs/bimask.md. Complexity O(K size) for the search plus
    O(size log m) for the blocks.

    Examples
    --------
    >>> w = np.arange(1.0, 17.0).reshape(4, 4)
    >>> e = explain_bimask(w, 2, 4, candidates=0)
    >>> e["result"]["backward_mask"][0], e["result"]["backward_mask"][3]
    ([0, 0, 0, 0], [0, 0, 1, 1])
    """
    from nmref.bimask import backward_mask, forward_mask, permutation_score, search_permutation

    pattern = check_pattern(n, m)
    n, m = pattern.n, pattern.m
    array = np.asarray(weight)
    if array.ndim != 2:
        raise ValueError(f"weight must be a 2-D [out, in] matrix for explain, got {array.shape}")
    _check_small(array, "weight")
    if isinstance(candidates, bool) or not isinstance(candidates, int | np.integer):
        raise TypeError(f"candidates must be an int, got {type(candidates).__name__}")
    if candidates < 0:
        raise ValueError(f"candidates={candidates} must be >= 0")
    forward = forward_mask(array, n, m)
    out = array.shape[0]
    if out % m:
        raise ValueError(f"weight has {out} output rows, not a multiple of m={m}")
    identity = np.arange(out)
    identity_score = permutation_score(forward, identity, n, m)
    steps = [
        _step(
            "forward mask F",
            [
                f"F keeps the {n} largest |w| of every {m} consecutive inputs of each output row "
                "(the 1-D rule; Y = X (W*F)^T runs sparse):",
                *_grid(forward.astype(int).tolist()),
            ],
            forward_mask=forward.astype(int).tolist(),
        )
    ]
    if candidates:
        search = search_permutation(array, n, m, candidates=candidates, rng=rng)
        permutation = search.permutation
        lines = [
            f"The backward mask B is N:M along the output axis, in blocks of {m} consecutive "
            "rows in the order of a row permutation. Bi-Mask draws "
            f"{candidates} random permutations (seed {rng}) and keeps the one whose backward "
            "mask keeps the most forward survivors (criterion 'kept', the authors' code, which "
            "never evaluates the identity).",
            f"  identity keeps {identity_score}; candidate scores "
            f"{search.candidate_scores.tolist()}; best #{search.best_index} keeps "
            f"{search.score}: permutation {permutation.tolist()}",
        ]
        steps.append(
            _step(
                "permutation search",
                lines,
                identity_score=int(identity_score),
                candidate_scores=search.candidate_scores.tolist(),
                best_index=int(search.best_index),
            )
        )
    else:
        permutation = identity
        steps.append(
            _step(
                "permutation",
                [f"Identity permutation (no search): the backward mask keeps {identity_score}."],
                identity_score=int(identity_score),
            )
        )
    magnitude = np.abs(array.astype(np.float64))
    backward = np.zeros(array.shape, dtype=bool)
    described = 0
    blocks = 0
    for column in range(array.shape[1]):
        for b in range(out // m):
            block_rows = [int(r) for r in permutation[b * m : (b + 1) * m]]
            survivors = [p for p, r in enumerate(block_rows) if forward[r, column]]
            # Largest |w| first; the lower permuted position wins ties.
            ranked = sorted(survivors, key=lambda p, c=column: (-magnitude[block_rows[p], c], p))
            keep = sorted(ranked[:n])
            for p in keep:
                backward[block_rows[p], column] = True
            blocks += 1
            lines = []
            if described < max_blocks:
                described += 1
                dropped = [block_rows[p] for p in survivors if p not in keep]
                lines = [
                    f"column {column}, block {b} (rows {block_rows}): forward survivors rows "
                    f"{[block_rows[p] for p in survivors]}"
                    + (
                        f"; more than {n}, keep the {n} largest |w|: rows "
                        f"{[block_rows[p] for p in keep]}, drop rows {dropped}"
                        if len(survivors) > n
                        else f"; at most {n}, keep them all"
                    )
                ]
            steps.append(
                _step(
                    f"column {column}, block {b}",
                    lines,
                    rows=block_rows,
                    survivors=[block_rows[p] for p in survivors],
                    keep=[block_rows[p] for p in keep],
                )
            )
    if described < blocks:
        steps.append(_step("more", [f"({blocks - described} more blocks in --json)"]))
    expected = backward_mask(array, forward, permutation, n, m)
    if not np.array_equal(backward, expected):
        raise RuntimeError("explain: the traced mask differs from nmref.bimask.backward_mask")
    kept = int(backward.sum())
    steps.append(
        _step(
            "backward mask B",
            [
                f"B (a subset of F, used by dX = dY (W*B)) keeps {kept} of the "
                f"{int(forward.sum())} forward survivors:",
                *_grid(backward.astype(int).tolist()),
                "Same mask as nmref.bimask.backward_mask: yes.",
            ],
        )
    )
    return {
        "algorithm": "bimask",
        "pattern": f"{n}:{m}",
        "steps": steps,
        "result": {
            "forward_mask": forward.astype(int).tolist(),
            "permutation": [int(r) for r in permutation],
            "backward_mask": backward.astype(int).tolist(),
            "backward_kept": kept,
        },
    }


# --------------------------------------------------------------------------
# Text and the command line
# --------------------------------------------------------------------------


def render_text(explanation: dict[str, Any]) -> str:
    """The plain-word form of an explanation: each step's title and lines.

    Parameters
    ----------
    explanation : dict
        As returned by :func:`explain_transposable`, :func:`explain_nm_mask` or
        :func:`explain_bimask`.

    Returns
    -------
    str

    Examples
    --------
    >>> print(render_text(explain_nm_mask([0.5, -2.0, 0.5, 0.1], 1, 2)).splitlines()[0])
    nm_mask at 1:2
    """
    out = [f"{explanation['algorithm']} at {explanation['pattern']}"]
    for step in explanation["steps"]:
        if not step["lines"]:
            continue
        out.append("")
        out.append(f"== {step['title']}")
        out.extend(step["lines"])
    return "\n".join(out) + "\n"
