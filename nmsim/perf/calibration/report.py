"""``calibrate``: the fit, its cross-validation and the report, with the interval table.

``specs/gemm_model.md`` sections 6 and 8: :func:`calibrate` fits the corpus, runs the
cross-validation, predicts every row with the fitted table and the previous model, and
reports the errors per GPU family beside the baselines (:class:`ErrorSummary`), the
prediction-interval table built from the cross-validated residuals
(:func:`interval_table`) and the qualitative checks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nmref._validation import check_positive_integer
from nmsim.perf.calibration.cross_validation import CrossValidation, RowResult, cross_validate
from nmsim.perf.calibration.fit import fit_table, predict_rows
from nmsim.perf.calibration.parameters import LEGACY_PARAMETERS
from nmsim.perf.calibration.points import _checks
from nmsim.perf.calibration.rows import family, fitted_rows
from nmsim.perf.corpus import Measurement, load_corpus
from nmsim.perf.gemm_parameters import ParameterTable, architecture_key
from nmsim.perf.hardware import get_gpu
from nmsim.perf.intervals import regime


@dataclass(frozen=True)
class ErrorSummary:
    """Median and 90th percentile absolute relative speedup error of one group."""

    group: str
    rows: int
    sources: int
    model_median: float
    model_p90: float
    constant_median: float
    constant_p90: float
    legacy_median: float
    legacy_p90: float


@dataclass(frozen=True)
class CalibrationReport:
    """Result of :func:`calibrate`."""

    table: ParameterTable
    rows: tuple[RowResult, ...]
    summary: tuple[ErrorSummary, ...]
    intervals: dict[str, Any]
    checks: tuple[dict[str, Any], ...]
    corpus_counts: dict[str, Any]
    folds: int
    warnings: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON form."""
        from dataclasses import asdict

        return {
            "parameters": {
                "provenance": self.table.provenance,
                "global": self.table.base,
                "scoped": {"/".join(k): v for k, v in self.table.overrides.items()},
            },
            "rows": [{**asdict(r), "cv_error": r.cv_error} for r in self.rows],
            "summary": [asdict(s) for s in self.summary],
            "intervals": self.intervals,
            "checks": list(self.checks),
            "corpus": self.corpus_counts,
            "folds": self.folds,
            "warnings": list(self.warnings),
        }


def _quantile(values: Sequence[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=np.float64), q, method="linear"))


def _summaries(rows: Sequence[RowResult]) -> tuple[ErrorSummary, ...]:
    scored = [r for r in rows if r.fitted and r.cv_predicted is not None]
    groups: dict[str, list[RowResult]] = {}
    for r in scored:
        groups.setdefault(r.family, []).append(r)
    groups["A100 + Hopper"] = [r for r in scored if r.family in ("A100/A30 (GA100)", "Hopper")]
    groups["all"] = scored
    out = []
    for name in sorted(groups, key=lambda g: (g in ("A100 + Hopper", "all"), g)):
        members = groups[name]
        if not members:
            continue

        def errors(attribute: str, members: list[RowResult] = members) -> list[float]:
            return [abs(getattr(r, attribute) / r.measured - 1) for r in members]

        model, const, legacy = errors("cv_predicted"), errors("constant"), errors("legacy")
        out.append(
            ErrorSummary(
                group=name,
                rows=len(members),
                sources=len({r.source for r in members}),
                model_median=statistics.median(model),
                model_p90=_quantile(model, 0.9),
                constant_median=statistics.median(const),
                constant_p90=_quantile(const, 0.9),
                legacy_median=statistics.median(legacy),
                legacy_p90=_quantile(legacy, 0.9),
            )
        )
    return tuple(out)


#: Interval settings (``specs/gemm_model.md`` section 8).
COVERAGE = 0.8
MINIMUM_INTERVAL_ROWS = 8
EXTRAPOLATION_WIDENING = 1.5


def interval_table(rows: Sequence[RowResult]) -> dict[str, Any]:
    """Residual quantiles per (architecture, regime) and pooled, from the CV rows."""
    lo_q, hi_q = (1 - COVERAGE) / 2, 1 - (1 - COVERAGE) / 2
    scored = [r for r in rows if r.fitted and r.cv_predicted is not None]

    def quantiles(members: list[RowResult]) -> dict[str, Any]:
        residuals = [math.log(r.measured / r.cv_predicted) for r in members]  # type: ignore[operator]
        return {
            "count": len(residuals),
            "low": round(min(0.0, _quantile(residuals, lo_q)), 4),
            "high": round(max(0.0, _quantile(residuals, hi_q)), 4),
        }

    groups: dict[str, list[RowResult]] = {}
    for r in scored:
        groups.setdefault(f"{architecture_key(get_gpu(r.gpu))}/{r.regime}", []).append(r)
    pooled = {}
    for name in ("small-n", "large-n"):
        members = [r for r in scored if r.regime == name] or scored
        pooled[name] = quantiles(members)
    min_n = {
        level: min((r.n for r in scored if r.level == level), default=1)
        for level in ("kernel", "framework")
    }
    return {
        "coverage": COVERAGE,
        "minimum_rows": MINIMUM_INTERVAL_ROWS,
        "extrapolation_widening": EXTRAPOLATION_WIDENING,
        "measured_gpus": sorted({r.gpu for r in scored}),
        "min_n": min_n,
        "pooled": pooled,
        "groups": {key: quantiles(value) for key, value in sorted(groups.items())},
    }


def _checked_rows(rows: object) -> tuple[Measurement, ...]:
    """``rows`` as a non-empty tuple of corpus rows, or the error naming what it holds."""
    if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
        raise TypeError(
            f"rows must be a sequence of nmsim.perf.corpus.Measurement, got {type(rows).__name__}"
        )
    if not rows:
        raise ValueError("rows is empty: there is nothing to fit")
    for index, row in enumerate(rows):
        if not isinstance(row, Measurement):
            raise TypeError(
                f"rows[{index}] is a {type(row).__name__}, not a nmsim.perf.corpus.Measurement "
                "(load rows with nmsim.perf.corpus.load_corpus)"
            )
    return tuple(rows)


def calibrate(
    rows: Sequence[Measurement] | None = None,
    *,
    cross_validation: bool = True,
    sweeps: int = 4,
    iterations: int = 24,
    progress: Any = None,
    fold: str = "source",
) -> CalibrationReport:
    """Fit on the corpus, cross-validate by source, and report.

    Parameters
    ----------
    rows : sequence of Measurement, optional
        Default: the shipped corpus.
    cross_validation : bool
        Run leave-one-source-out CV (one refit per source). Without it the
        report's CV columns are empty.
    sweeps, iterations : int
        Fit effort (see :func:`fit_table`).
    progress : callable, optional
        ``progress(fold, folds, source)`` before each CV refit.
    fold : {"source", "document"}
        What one CV fold holds out (see :func:`cross_validate`).

    Returns
    -------
    CalibrationReport
    """
    if rows is None:
        _sources, rows = load_corpus()
    rows = _checked_rows(rows)
    sweeps = check_positive_integer(sweeps, "sweeps")
    iterations = check_positive_integer(iterations, "iterations")
    if not isinstance(cross_validation, bool | np.bool_):
        raise TypeError(f"cross_validation={cross_validation!r} must be True or False")
    if fold not in ("source", "document"):
        raise ValueError(f"fold={fold!r} must be 'source' or 'document'")
    usable = fitted_rows(rows)
    table = fit_table(usable, sweeps=sweeps, iterations=iterations)
    cv = (
        cross_validate(rows, sweeps=sweeps, iterations=iterations, progress=progress, fold=fold)
        if cross_validation
        else CrossValidation({}, {}, 0)
    )
    predicted = predict_rows(rows, table)
    legacy = predict_rows(rows, LEGACY_PARAMETERS)
    usable_ids = {r.id for r in usable}
    results = tuple(
        RowResult(
            id=r.id,
            source=r.source,
            gpu=r.gpu,
            family=family(r.gpu),
            dtype=r.dtype,
            library=r.library,
            level=r.level,
            m=r.m,
            n=r.n,
            k=r.k,
            regime=regime(r.n),
            measured=r.speedup,
            fitted=r.id in usable_ids,
            predicted=float(p),
            cv_predicted=cv.predicted.get(r.id),
            constant=cv.constant.get(r.id),
            legacy=float(q),
            tags=r.tags,
        )
        for r, p, q in zip(rows, predicted, legacy, strict=True)
    )
    counts: dict[str, Any] = {
        "rows": len(rows),
        "fitted_rows": len(usable),
        "sources": len({r.source for r in rows}),
        "by_gpu": _count(r.gpu for r in rows),
        "by_source": _count(r.source for r in rows),
        "by_library": _count(r.library for r in rows),
        "by_level": _count(r.level for r in rows),
        "by_dtype": _count(r.dtype for r in rows),
    }
    warnings = []
    fitted_families = {family(r.gpu) for r in usable}
    for name in ("A100/A30 (GA100)", "Ampere GA10x", "Ada", "Hopper", "Blackwell"):
        if name not in fitted_families:
            warnings.append(f"no fitted {name} row: its estimates are extrapolated")
    return CalibrationReport(
        table=table,
        rows=results,
        summary=_summaries(results) if cross_validation else (),
        intervals=interval_table(results) if cross_validation else {},
        checks=tuple(_checks(table)),
        corpus_counts=counts,
        folds=cv.folds,
        warnings=tuple(warnings),
    )


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return dict(sorted(out.items(), key=lambda item: (-item[1], item[0])))
