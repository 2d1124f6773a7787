r"""``audit``: every method on the same tiles, against certified optima (spec A1-A5).

For a score matrix ``s`` (``|w|`` of a weight) and a pattern ``n:m``, each method
returns a mask; the audit classifies it (exactly ``n``, at most ``n``, invalid),
and for a valid mask computes per tile

.. math::

    \mathrm{gap}_t = \mathrm{OPT}_t - \textstyle\sum_{ij \in t} S_{ij} s_{ij} \;\ge 0,

against the optimum of the fill the mask is valid for (the exactly-``n``
optimum for an exactly-``n`` mask; the at-most-``n`` optimum otherwise, or for
every mask with ``fill="at_most"``), exactly and rounded once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_scores, check_choice, check_finite_scores, check_tiled_matrix
from nmref.audit._blocks import flat_tiles, to_blocks
from nmref.audit.methods import METHODS, Method
from nmref.audit.reference import exact_difference, optima
from nmref.audit.result import AuditResult, MethodReport, relative
from nmref.audit.validity import classify_mask
from nmref.patterns import Pattern, parse_pattern

__all__ = ["AUDIT_FILLS", "audit"]

AUDIT_FILLS = ("exact", "at_most")
_LARGEST_EXACT_INTEGER = 2**53


def audit(
    matrix: ArrayLike,
    pattern: str | Pattern | tuple[int, int],
    *,
    methods: Sequence[str] | Mapping[str, Callable] | None = None,
    fill: str = "exact",
    kind: str = "weights",
) -> AuditResult:
    """Audit transposable ``n:m`` methods on the aligned tiles of one matrix.

    Parameters
    ----------
    matrix : array_like, shape (R, C)
        A weight (``kind="weights"``: scores are ``|w|``) or non-negative scores
        (``kind="scores"``). Finite; ``R``, ``C`` multiples of ``m``.
    pattern : str or (n, m)
        ``"8:16"`` or ``(8, 16)``.
    methods : sequence of names, or mapping name -> callable, optional
        Names from :data:`nmref.audit.METHODS` (default: all); a method not
        defined for the pattern (2:4-only peers) is listed in ``skipped``. A
        mapping runs your own methods instead: ``callable(scores, weights, n, m) -> mask``.
    fill : {"exact", "at_most"}, default "exact"
        ``"exact"``: an exactly-``n`` mask is scored against the exactly-``n``
        optimum, any other valid mask against the at-most-``n`` optimum (never
        a negative gap; ``beats_exact_tiles`` says where it keeps more than the
        exactly-``n`` optimum). ``"at_most"``: every valid mask against the
        at-most-``n`` optimum (what sparse tensor cores accept).
    kind : {"weights", "scores"}, default "weights"

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        If the pattern, shape, fill, kind or a method name is invalid; if a
        value is NaN or infinite; if ``kind="scores"`` and a score is negative;
        if an integer score exceeds 2**53 in magnitude (not exact in float64); if
        the sum of ``|matrix|`` exceeds half of float64's largest value (sums would
        overflow).
    TypeError
        If the dtype is not bool, integer or float.

    Notes
    -----
    Two exact solves (``n:m`` and the padded ``n:2m``, spec A3), then per method
    its own cost plus O(R C) for validity and gaps (``math.fsum`` only on tiles
    where the mask differs from the reference).

    Examples
    --------
    >>> tile = np.array([[9, 8, 0, 0], [7, 0, 6, 0], [0, 5, 4, 0], [0, 0, 0, 0]])
    >>> result = audit(tile, "2:4", methods=["exact", "greedy"])
    >>> [(r.name, r.validity.kind, r.reference, r.total_gap, r.beats_exact_tiles)
    ...  for r in result.methods]
    [('exact', 'exact', 'exact', 0.0, 0), ('greedy', 'at_most', 'at_most', 0.0, 1)]
    """
    parsed = parse_pattern(pattern)
    n, m = parsed
    check_choice(fill, "fill", AUDIT_FILLS)
    check_choice(kind, "kind", ("weights", "scores"))
    weights = as_scores(matrix, "matrix")
    if weights.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {weights.shape}")
    check_tiled_matrix(weights, parsed.m, "matrix")
    check_finite_scores(weights, "matrix")
    if (
        weights.dtype.kind in "iu"
        and weights.size
        and np.abs(weights).max() > _LARGEST_EXACT_INTEGER
    ):
        raise ValueError("matrix: integer values above 2**53 in magnitude are not exact in float64")
    with np.errstate(over="ignore"):
        magnitude = float(np.abs(weights).sum(dtype=np.float64))
    if not magnitude <= np.finfo(np.float64).max / 2:
        # Then no kept sum, gap or total below can overflow (nor math.fsum's partials).
        raise ValueError(
            f"matrix: the sum of |matrix| is beyond float64's range (above "
            f"{np.finfo(np.float64).max / 2:.4g}); the audit reports kept sums, gaps and "
            "totals in float64 (spec A1): scale the matrix down"
        )
    if kind == "scores" and weights.size and weights.min() < 0:
        raise ValueError(
            "kind='scores' needs non-negative scores (pass a weight with kind='weights')"
        )
    scores = np.abs(weights).astype(np.float64) if weights.dtype.kind != "f" else np.abs(weights)
    chosen, skipped = _resolve(methods, n, m)

    best = optima(scores, n, m)
    blocks = to_blocks(scores, m)
    exact_total = math.fsum(best.exact_value.tolist())
    at_most_total = math.fsum(best.at_most_value.tolist())
    better = int((exact_difference(blocks, best.at_most_mask, best.exact_mask) > 0).sum())

    reports = []
    for method in chosen:
        start = time.perf_counter()
        mask = np.asarray(method.function(scores, weights, n, m))
        seconds = time.perf_counter() - start
        if mask.shape != scores.shape:
            raise ValueError(
                f"method {method.name!r} returned shape {mask.shape}, not {scores.shape}"
            )
        reports.append(_score(method, mask, blocks, best, fill, parsed, seconds))
    return AuditResult(
        (n, m),
        (int(scores.shape[0]), int(scores.shape[1])),
        len(blocks),
        fill,
        exact_total,
        at_most_total,
        better,
        tuple(reports),
        skipped,
    )


def _resolve(methods, n: int, m: int) -> tuple[list[Method], dict[str, str]]:
    if methods is None:
        requested = [METHODS[name] for name in METHODS]
    elif isinstance(methods, Mapping):
        requested = [
            Method(str(name), "user method", function) for name, function in methods.items()
        ]
    else:
        requested = []
        for name in methods:
            if name not in METHODS:
                known = ", ".join(METHODS)
                raise ValueError(f"methods={name!r} is not a known method (known: {known})")
            requested.append(METHODS[name])
    chosen, skipped = [], {}
    for method in requested:
        if method.defined_for(n, m):
            chosen.append(method)
        else:
            skipped[method.name] = f"defined for 2:4 only, not {n}:{m}"
    return chosen, skipped


def _score(method: Method, mask, blocks, best, fill: str, pattern: Pattern, seconds: float):
    n, m = pattern
    validity = classify_mask(mask, n, m)
    kept = to_blocks(np.asarray(mask, dtype=bool), m)
    if validity.kind == "invalid":
        empty = np.zeros(0, dtype=np.float64)
        return MethodReport(
            method.name,
            method.follows,
            validity,
            None,
            empty,
            empty,
            math.nan,
            math.nan,
            0,
            0,
            _non_canonical(kept, best.exact_mask),
            seconds,
        )
    reference = "exact" if validity.kind == "exact" and fill == "exact" else "at_most"
    if reference == "exact":
        reference_mask, optimum = best.exact_mask, best.exact_value
    else:
        reference_mask, optimum = best.at_most_mask, best.at_most_value
    gap = exact_difference(blocks, reference_mask, kept)
    total = _exact_total(blocks, reference_mask, kept, gap)
    reference_total = math.fsum(optimum.tolist())
    beats = 0
    if validity.kind == "at_most":
        beats = int((exact_difference(blocks, kept, best.exact_mask) > 0).sum())
    if (gap < 0).any():  # cannot happen for a certified optimum: say so loudly if it does
        raise RuntimeError(f"negative gap for method {method.name!r}: the reference is wrong")
    return MethodReport(
        method.name,
        method.follows,
        validity,
        reference,
        gap,
        relative(gap, optimum),
        total,
        total / reference_total if reference_total else 0.0,
        beats,
        int((gap > 0).sum()),
        _non_canonical(kept, best.exact_mask),
        seconds,
    )


def _non_canonical(kept, canonical) -> int:
    return int(flat_tiles(kept != canonical).any(axis=1).sum())


def _exact_total(blocks, reference_mask, kept, gap: NDArray) -> float:
    """Whole-matrix gap, exact then rounded once (not the sum of rounded tile gaps)."""
    differ = np.flatnonzero(gap != 0)
    if differ.size == 0:
        return 0.0
    signs = reference_mask[differ].astype(np.int8) - kept[differ].astype(np.int8)
    return math.fsum((blocks[differ].astype(np.float64) * signs).ravel().tolist())
