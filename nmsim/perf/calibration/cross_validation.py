"""Leave-one-source-out cross-validation, and the per-row results it feeds.

``specs/gemm_model.md`` section 6, "Cross-validation": for every source (or, with
``fold="document"``, every document) with fitted rows, the model is refitted on the other
sources' rows and predicts the held-out ones; the constant baseline is the median speedup
of the fold's training rows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nmsim.perf.calibration.fit import fit_table, predict_rows
from nmsim.perf.calibration.rows import fitted_rows
from nmsim.perf.corpus import Measurement


@dataclass(frozen=True)
class RowResult:
    """One corpus row: measured speedup, in-sample and held-out predictions, baselines."""

    id: str
    source: str
    gpu: str
    family: str
    dtype: str
    library: str
    level: str
    m: int
    n: int
    k: int
    regime: str
    measured: float
    fitted: bool
    predicted: float
    cv_predicted: float | None
    constant: float | None
    legacy: float
    tags: tuple[str, ...] = ()

    @property
    def cv_error(self) -> float | None:
        """|CV prediction / measured - 1|."""
        return None if self.cv_predicted is None else abs(self.cv_predicted / self.measured - 1)


@dataclass(frozen=True)
class CrossValidation:
    """Leave-one-source-out predictions of every row (``None`` for rows not fitted)."""

    predicted: dict[str, float]
    constant: dict[str, float]
    folds: int


def cross_validate(
    rows: Sequence[Measurement],
    *,
    sweeps: int = 4,
    iterations: int = 24,
    progress: Any = None,
    fold: str = "source",
) -> CrossValidation:
    """Leave-one-source-out CV: refit without each source, predict its rows.

    A source that is the only one measuring a GPU family still gets a
    prediction: its rows fall back to the pooled parameters (the honest
    extrapolation). ``fold="document"`` holds out every source of one document
    together (a benchmark suite run on several machines). Deterministic.
    """
    if fold not in ("source", "document"):
        raise ValueError(f"fold={fold!r} must be 'source' or 'document'")
    usable = fitted_rows(rows)

    def key(row: Measurement) -> str:
        return row.source if fold == "source" else (row.document or row.source)

    sources = sorted({key(r) for r in usable})
    predicted: dict[str, float] = {}
    constant: dict[str, float] = {}
    for i, source in enumerate(sources):
        train = [r for r in usable if key(r) != source]
        test = [r for r in usable if key(r) == source]
        if progress is not None:
            progress(i, len(sources), source)
        if not train:
            continue
        table = fit_table(train, sweeps=sweeps, iterations=iterations)
        median = statistics.median(r.speedup for r in train)
        for row, value in zip(test, predict_rows(test, table), strict=True):
            predicted[row.id] = float(value)
            constant[row.id] = median
    return CrossValidation(predicted=predicted, constant=constant, folds=len(sources))
