"""Checks for transposable N:M mask implementations (``specs/transposable.md``).

``check_transposable_mask(impl, method=...)`` calls ``impl(scores, n, m)`` on 2-D score
matrices whose both dimensions are multiples of ``m`` and checks

* validity: every row and column of every ``m x m`` tile keeps exactly ``n`` (exact
  methods) or at most ``n`` (greedy methods, which may under-fill);
* equality with ``nmref.transposable.transposable_mask`` of the same method, bit for bit
  (the canonical optimum of spec T3 for exact methods), when that module is present;
* the optimality gap (``nmref.transposable.optimality_gap``, against the exactly-n optimum
  for the exact methods and the at-most-n optimum for the greedy ones), reported as ``max gap``.

Without ``nmref.transposable`` only validity is checked (the report's name says so).

A counterexample reads like the 1-D kit's (:mod:`nmref.testing.masks`): the tile and the row or
column that breaks the rule (or the first entry that differs from nmref), the tile's scores,
nmref's mask and the implementation's side by side, why, and the tile (and a small input
whole) as ``np.array(...)`` to paste into a test; tiles are independent, so the tile alone
reproduces the failure.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from nmref._validation import check_choice
from nmref.testing.cases import DTYPE_NAMES, Case, generate_cases
from nmref.testing.report import Failure, Report, format_values, input_repr

__all__ = ["check_transposable_mask", "transposable_cases"]

_PATTERNS = ((2, 4), (1, 4), (3, 4), (0, 4), (4, 4), (1, 2), (1, 3), (2, 3), (4, 8), (2, 8))


def transposable_cases(dtype: str = "float32", *, quick: bool = False) -> list[Case]:
    """Cases whose rows and columns are multiples of ``m`` (non-finite values replaced)."""
    check_choice(dtype, "dtype", DTYPE_NAMES)
    count = len(_PATTERNS) * (1 if quick else 3)
    rng = np.random.default_rng([3, 8])
    cases = []
    for kind in ("tie_free", "tie_heavy", "zeros", "random"):
        for case in generate_cases(kind, dtype, count, seed=3, patterns=_PATTERNS):
            tiles = int(rng.integers(1, 3))
            rows = np.resize(case.scores, (tiles * case.m, case.scores.shape[1]))
            scores = np.abs(rows) if rng.random() < 0.5 else rows
            if scores.dtype.kind == "f":
                scores = np.where(np.isfinite(scores), scores, 0).astype(scores.dtype)
            cases.append(Case(scores, case.n, case.m, kind, dtype, None, case.label))
    return cases


def _tile_counts(mask: NDArray, m: int) -> NDArray:
    """Kept entries per tile line: ``[a, b, k]`` is row ``k`` of tile ``(a, b)`` for ``k < m``,
    column ``k - m`` for ``k >= m``."""
    rows, columns = mask.shape
    # tiles[a, b, i, j] is entry (i, j) of tile (a, b): a row sums over j, a column over i
    tiles = mask.reshape(rows // m, m, columns // m, m).swapaxes(1, 2).astype(np.int64)
    return np.concatenate([tiles.sum(axis=3), tiles.sum(axis=2)], axis=-1)


def _tile_lines(scores: NDArray, masks: dict[str, NDArray]) -> list[str]:
    """The tile's scores and masks side by side, one tile row per line."""
    columns = {"scores": scores, **masks}
    cells = {title: [format_values(row) for row in matrix] for title, matrix in columns.items()}
    widths = {title: max(len(title) + 1, *map(len, rows)) for title, rows in cells.items()}
    lines = ["    " + "    ".join(f"{title}:".ljust(widths[title]) for title in cells).rstrip()]
    for index in range(scores.shape[0]):
        row = (cells[title][index].ljust(widths[title]) for title in cells)
        lines.append("    " + "    ".join(row).rstrip())
    return lines


def _tile_failure(
    check: str,
    case: Case,
    got: NDArray,
    expected: NDArray | None,
    tile: tuple[int, int],
    headline: str,
    why: str,
) -> Failure:
    """A counterexample as the 1-D kit gives one: the tile's scores, expected and got masks,
    why, and the input to paste into a test (the tile alone reproduces it: tiles are
    independent)."""
    m = case.m
    rows = slice(tile[0] * m, tile[0] * m + m)
    columns = slice(tile[1] * m, tile[1] * m + m)
    masks = {} if expected is None else {"expected": expected[rows, columns]}
    masks["got"] = got[rows, columns]
    lines = [
        f"  {headline}",
        *_tile_lines(case.scores[rows, columns], masks),
        f"  why: {why}",
        f"  {input_repr(case.scores[rows, columns], 'tile')}",
    ]
    if case.scores.shape != (m, m):
        lines.append(f"  {input_repr(case.scores)}")
    return Failure(check, case, "\n".join(lines))


def _why_different(exact: bool, gap: float) -> str:
    if not exact:
        return "greedy scan order: descending score, lower flat index first (spec T4)"
    if gap > 0:
        return f"it keeps {gap:g} less than the optimum: valid but not optimal (spec T1)"
    return (
        "the kept sums are equal but the masks differ: among optimal masks the canonical one "
        "keeps the greatest row-major keep bits (spec T3)"
    )


def check_transposable_mask(
    impl: Callable[[NDArray, int, int], object],
    *,
    method: str = "exact",
    dtype: str = "float32",
    quick: bool = False,
    cases: list[Case] | None = None,
    raise_on_failure: bool = True,
) -> Report:
    """Check ``impl(scores, n, m)`` as a transposable-mask method (module docstring).

    ``method`` is one of ``nmref.transposable.METHODS``: it says which validity rule and
    which reference mask apply, so an unknown name is a ``ValueError``, never a guess.
    """
    check_choice(method, "method", ("exact", "brute", "greedy", "greedy-prune"))
    if cases is None:
        check_choice(dtype, "dtype", DTYPE_NAMES)
    try:
        from nmref import transposable as reference
    except ImportError:  # the reference has not landed in this build: validity only
        reference = None
    exact = method in ("exact", "brute")
    check = f"transposable_mask[{method}]" + ("" if reference else " (validity only)")
    report = Report(check)
    for case in cases if cases is not None else transposable_cases(dtype, quick=quick):
        scores, n, m = case.scores, case.n, case.m
        try:
            got = np.asarray(impl(scores, n, m)).astype(bool)
        except Exception as error:  # an exception on valid input is a failure to report
            report.add(Failure(check, case, f"  raised {type(error).__name__}: {error}"))
            continue
        if got.shape != scores.shape:
            report.add(Failure(check, case, f"  output shape {got.shape}, expected {scores.shape}"))
            continue
        counts = _tile_counts(got, m)
        bad = counts != n if exact else counts > n
        expected = None
        if reference is not None:
            expected = reference.transposable_mask(scores, n, m, method=method)
        if bad.any():
            a, b, k = (int(i) for i in np.argwhere(bad)[0])
            line = f"row {k}" if k < m else f"column {k - m}"
            kept = int(counts[a, b, k])
            rule = "exactly" if exact else "at most"
            report.add(
                _tile_failure(
                    check,
                    case,
                    got,
                    expected,
                    (a, b),
                    f"tile ({a}, {b}) (rows {a * m}..{a * m + m - 1}, columns "
                    f"{b * m}..{b * m + m - 1}): {line} keeps {kept}",
                    f"every row and every column of an m x m tile must keep {rule} {n} "
                    f"(spec T1); {int(bad[a, b].sum())} of the {2 * m} lines of this tile and "
                    f"{int(bad.any(axis=2).sum())} of {bad.shape[0] * bad.shape[1]} tiles break it",
                )
            )
            continue
        gap = 0.0
        failure = None
        if reference is not None:
            # Exact methods are scored against the exactly-n optimum, greedy (at-most) masks
            # against the at-most-n optimum: a gap is never negative (spec T6).
            fill = "exact" if exact else "at_most"
            gap = float(reference.optimality_gap(scores, got, n, m, fill=fill).total)
            if not np.array_equal(got, expected):
                index = tuple(int(i) for i in np.argwhere(got != expected)[0])
                tile = (index[0] // m, index[1] // m)
                differ = (got != expected).reshape(got.shape[0] // m, m, -1, m).any(axis=(1, 3))
                failure = _tile_failure(
                    check,
                    case,
                    got,
                    expected,
                    tile,
                    f"tile {tile} differs from nmref's first at entry {index} "
                    f"({int(differ.sum())} of {differ.size} tiles differ); objective gap {gap:g}",
                    _why_different(exact, gap),
                )
        report.add(failure, gap)
    if raise_on_failure:
        report.raise_for_failure()
    return report
