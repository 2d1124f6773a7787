"""What the audit reports: per method validity, certified gaps and time (spec A5).

Statistics of a gap sample are its mean, median (p50), 99th percentile (p99,
NumPy's default linear interpolation) and maximum. Relative gaps divide by the
reference optimum of the same tile or matrix (0 where that optimum is 0: a
valid mask cannot keep less than 0 there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.audit.validity import Validity

__all__ = ["AuditResult", "GapStats", "MethodReport", "gap_stats", "summarize"]


class GapStats(NamedTuple):
    """mean, p50, p99, max of a sample (NaN for an empty one)."""

    mean: float
    p50: float
    p99: float
    max: float


def gap_stats(values: ArrayLike) -> GapStats:
    """:class:`GapStats` of ``values`` (1-D float)."""
    sample = np.asarray(values, dtype=np.float64).ravel()
    if sample.size == 0:
        return GapStats(float("nan"), float("nan"), float("nan"), float("nan"))
    p50, p99 = np.percentile(sample, [50, 99])
    return GapStats(float(sample.mean()), float(p50), float(p99), float(sample.max()))


def relative(gaps: NDArray, optimum: NDArray) -> NDArray[np.float64]:
    """``gaps / optimum`` elementwise, 0 where the optimum is 0."""
    gaps = np.asarray(gaps, dtype=np.float64)
    optimum = np.asarray(optimum, dtype=np.float64)
    return np.divide(gaps, optimum, out=np.zeros_like(gaps), where=optimum != 0)


class MethodReport(NamedTuple):
    """One method on one matrix.

    Attributes
    ----------
    name, follows : str
        Registry name and what it follows (paper / code).
    validity : Validity
        Exactly-n, at-most-n or invalid, with tile counts and the first violation.
    reference : {"exact", "at_most"} or None
        The optimum the gaps are taken against: the exactly-n one for an
        exactly-n mask (under ``fill="exact"``), else the at-most-n one; None for
        an invalid mask (no gap).
    tile_gap : ndarray of float64, shape (tiles,) or (0,)
        Certified per-tile gap (exact, rounded once; >= 0).
    tile_relative : ndarray of float64
        ``tile_gap`` over the tile's reference optimum.
    total_gap, relative_gap : float
        Whole matrix: sum of gaps (exact, rounded once) and over the reference total.
    beats_exact_tiles : int
        Tiles where this (at-most) mask keeps more than the exactly-n optimum.
    gap_tiles : int
        Tiles with a nonzero gap (not optimal for the reference fill).
    non_canonical_tiles : int
        Tiles whose mask differs from nmref's canonical exactly-n optimum (for an
        exactly-n mask of zero gap: a tie broken otherwise than rule T3).
    seconds : float
        Wall time of the method's call (this implementation, this machine).
    """

    name: str
    follows: str
    validity: Validity
    reference: str | None
    tile_gap: NDArray[np.float64]
    tile_relative: NDArray[np.float64]
    total_gap: float
    relative_gap: float
    beats_exact_tiles: int
    gap_tiles: int
    non_canonical_tiles: int
    seconds: float

    def as_dict(self) -> dict:
        """JSON-ready summary (no per-tile arrays)."""
        violation = self.validity.first_violation
        return {
            "method": self.name,
            "follows": self.follows,
            "validity": self.validity.kind,
            "tiles_exact": self.validity.exact_tiles,
            "tiles_at_most": self.validity.at_most_tiles,
            "tiles_invalid": self.validity.invalid_tiles,
            "first_violation": None if violation is None else violation._asdict(),
            "reference": self.reference,
            "tile_gap": gap_stats(self.tile_gap)._asdict(),
            "tile_relative_gap": gap_stats(self.tile_relative)._asdict(),
            "total_gap": self.total_gap,
            "relative_gap": self.relative_gap,
            "beats_exact_tiles": self.beats_exact_tiles,
            "gap_tiles": self.gap_tiles,
            "non_canonical_tiles": self.non_canonical_tiles,
            "seconds": self.seconds,
        }


class AuditResult(NamedTuple):
    """Every method on the same tiles of one matrix.

    ``exact_total`` / ``at_most_total``: the optima's kept sums (exact, rounded
    once); ``at_most_better_tiles``: tiles whose at-most-n optimum exceeds the
    exactly-n one; ``skipped``: method name -> why it did not run.
    """

    pattern: tuple[int, int]
    shape: tuple[int, int]
    tiles: int
    fill: str
    exact_total: float
    at_most_total: float
    at_most_better_tiles: int
    methods: tuple[MethodReport, ...]
    skipped: dict[str, str]

    def as_dict(self) -> dict:
        """JSON-ready summary."""
        n, m = self.pattern
        return {
            "pattern": f"{n}:{m}",
            "shape": list(self.shape),
            "tiles": self.tiles,
            "fill": self.fill,
            "exact_optimum_total": self.exact_total,
            "at_most_optimum_total": self.at_most_total,
            "at_most_better_tiles": self.at_most_better_tiles,
            "methods": [report.as_dict() for report in self.methods],
            "skipped": dict(self.skipped),
        }

    def table(self) -> str:
        """Plain-text table, one line per method."""
        return format_table(summarize([self]))


def summarize(results: Sequence[AuditResult]) -> list[dict]:
    """Per method over several matrices: pooled tile gaps and the per-matrix distribution.

    Returns one dict per method (in first-seen order) with ``matrices``,
    ``validity`` (the worst over matrices), tile counts, ``reference`` (the set
    used), pooled per-tile relative-gap stats, per-matrix relative-gap stats,
    the tile counts ``beats_exact_tiles``, ``gap_tiles`` and
    ``non_canonical_tiles``, and ``seconds`` (sum).
    """
    order: list[str] = []
    grouped: dict[str, list[MethodReport]] = {}
    for result in results:
        for report in result.methods:
            if report.name not in grouped:
                order.append(report.name)
                grouped[report.name] = []
            grouped[report.name].append(report)
    rank = {"exact": 0, "at_most": 1, "invalid": 2}
    rows = []
    for name in order:
        reports = grouped[name]
        worst = max((r.validity.kind for r in reports), key=rank.__getitem__)
        valid = [r for r in reports if r.reference is not None]
        tile_relative = np.concatenate([r.tile_relative for r in valid]) if valid else np.zeros(0)
        tile_gap = np.concatenate([r.tile_gap for r in valid]) if valid else np.zeros(0)
        rows.append(
            {
                "method": name,
                "follows": reports[0].follows,
                "matrices": len(reports),
                "validity": worst,
                "tiles_exact": sum(r.validity.exact_tiles for r in reports),
                "tiles_at_most": sum(r.validity.at_most_tiles for r in reports),
                "tiles_invalid": sum(r.validity.invalid_tiles for r in reports),
                "reference": sorted({r.reference for r in valid}),
                "tile_gap": gap_stats(tile_gap)._asdict(),
                "tile_relative_gap": gap_stats(tile_relative)._asdict(),
                "matrix_relative_gap": gap_stats([r.relative_gap for r in valid])._asdict(),
                "beats_exact_tiles": sum(r.beats_exact_tiles for r in reports),
                "gap_tiles": sum(r.gap_tiles for r in reports),
                "non_canonical_tiles": sum(r.non_canonical_tiles for r in reports),
                "seconds": sum(r.seconds for r in reports),
            }
        )
    return rows


def format_table(rows: Sequence[dict]) -> str:
    """Text table of :func:`summarize` rows (relative gaps in percent)."""
    header = (
        f"{'method':<21} {'validity':<8} {'at-most tiles':>13} {'ref':<8} "
        f"{'tile mean%':>10} {'p50%':>8} {'p99%':>8} {'max%':>8} "
        f"{'matrix mean%':>12} {'max%':>8} {'gap tiles':>9} {'beats':>6} {'seconds':>8}"
    )
    lines = [header]
    for row in rows:
        tile, matrix = row["tile_relative_gap"], row["matrix_relative_gap"]
        reference = "/".join(row["reference"]) or "-"
        lines.append(
            f"{row['method']:<21} {row['validity']:<8} {row['tiles_at_most']:>13} {reference:<8} "
            f"{100 * tile['mean']:>10.4f} {100 * tile['p50']:>8.4f} {100 * tile['p99']:>8.4f} "
            f"{100 * tile['max']:>8.4f} {100 * matrix['mean']:>12.4f} {100 * matrix['max']:>8.4f} "
            f"{row['gap_tiles']:>9} {row['beats_exact_tiles']:>6} {row['seconds']:>8.3f}"
        )
    return "\n".join(lines)
