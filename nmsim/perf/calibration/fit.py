"""The fit: bounded coordinate descent with golden-section line searches, and predictions.

``specs/gemm_model.md`` section 6, "Fit": every slot of the design is moved in turn, in a
fixed order, by a golden-section search within its parameter's bounds; a move is kept only
if the loss does not rise. Deterministic, from fixed starts; the values are rounded to 4
significant digits so that a refit reproduces the shipped file exactly.
:func:`predict_rows` gives the speedups of a fitted table through
:func:`~nmsim.perf.gemm.gemm_time` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from nmsim.perf.calibration.design import _GLOBAL, _Design, _design, _subset
from nmsim.perf.calibration.loss import _row_losses
from nmsim.perf.calibration.parameters import _FITTED_BY_NAME, STRUCTURE
from nmsim.perf.calibration.points import derive_compress_fraction
from nmsim.perf.calibration.staged import _Line, _Staged, _StagedPenalty
from nmsim.perf.corpus import Measurement
from nmsim.perf.gemm import default_library, gemm_time
from nmsim.perf.gemm_parameters import GemmParameters, ParameterTable


def _golden(f: Callable[[float], float], lo: float, hi: float, iterations: int) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return c if fc <= fd else d


def _reach(design: _Design) -> list[np.ndarray]:
    """Indices of the rows each slot's value reaches (through any parameter's gather)."""
    return [
        np.flatnonzero(np.any([g == i for g in design.gather.values()], axis=0))
        for i in range(len(design.slots))
    ]


def _fit_slots(design: _Design, *, sweeps: int, iterations: int) -> np.ndarray:
    x = np.array([_FITTED_BY_NAME[name].start for name, _ in design.slots], dtype=np.float64)
    row_loss = _row_losses(design, x)
    # rows each slot reaches: a line search re-times only those (same arithmetic, so the
    # result is what evaluating the whole loss would give)
    reach = _reach(design)
    staged = [_Staged(_subset(design, rows)) for rows in reach]
    penalty = _StagedPenalty(design)
    for _ in range(sweeps):
        for i, (name, _) in enumerate(design.slots):
            f = _FITTED_BY_NAME[name]
            rows = reach[i]
            others = float(np.sum(row_loss)) - float(np.sum(row_loss[rows]))
            line = staged[i].line(x, i)
            shrinkage = penalty.line(x, i)

            def loss_at(
                value: float,
                i: int = i,
                line: _Line = line,
                shrinkage: Callable[[np.ndarray], float] = shrinkage,
                others: float = others,
            ) -> float:
                trial = x.copy()
                trial[i] = value
                return others + float(np.sum(line(value))) + shrinkage(trial)

            current = loss_at(x[i])
            value = _golden(loss_at, f.low, f.high, iterations)
            # golden section may land on a worse local point; never accept a worse loss
            if loss_at(value) <= current:
                x[i] = value
                row_loss[rows] = line(value)
    return x


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def fit_table(
    rows: Sequence[Measurement],
    *,
    sweeps: int = 4,
    iterations: int = 24,
    compress_bandwidth_fraction: float | None = None,
) -> ParameterTable:
    """Fit the scoped parameters on corpus rows.

    Parameters
    ----------
    rows : sequence of Measurement
        Rows to fit (use :func:`fitted_rows` to drop excluded ones).
    sweeps, iterations : int
        Coordinate-descent sweeps and golden-section steps per coordinate.
    compress_bandwidth_fraction : float, optional
        Carried into the table; default derived from the measured compress point.

    Returns
    -------
    ParameterTable
        Values rounded to 4 significant digits, so a refit reproduces the
        shipped file digit for digit.

    Notes
    -----
    Each parameter gets a global value and, at its finest scope
    (:data:`~nmsim.perf.gemm_parameters.SCOPED_FIELDS`), one value per scope
    with at least :data:`MIN_SCOPE_ROWS` rows, shrunk toward the global
    value. Cost: ``sweeps * slots * (iterations + 3)`` loss evaluations, each
    O(rows the slot reaches x configurations).
    """
    usable = list(rows)
    if not usable:
        raise ValueError("rows must contain at least one measurement to fit")
    design = _design(usable)
    x = _fit_slots(design, sweeps=sweeps, iterations=iterations)
    base: dict[str, float] = {}
    overrides: dict[tuple[str, str, str], dict[str, float]] = {}
    for (name, scope), value in zip(design.slots, x, strict=True):
        if scope == _GLOBAL:
            base[name] = _round(value)
        else:
            overrides.setdefault(scope, {})[name] = _round(value)
    fraction = (
        derive_compress_fraction()
        if compress_bandwidth_fraction is None
        else compress_bandwidth_fraction
    )
    structure = STRUCTURE.replace(compress_bandwidth_fraction=round(fraction, 6))
    sources = sorted({r.source for r in usable})
    return ParameterTable(
        base=base,
        overrides=dict(sorted(overrides.items())),
        structure=structure,
        provenance=f"fitted by nmsim calibrate on {len(usable)} corpus rows from "
        f"{len(sources)} sources",
    )


def predict_rows(rows: Sequence[Measurement], table: ParameterTable | GemmParameters) -> np.ndarray:
    """Modelled speedups of ``rows`` through :func:`~nmsim.perf.gemm.gemm_time`."""
    out = []
    for r in rows:
        library = r.library if r.library != "other" else default_library(r.dtype)
        if isinstance(table, ParameterTable):
            params = table.resolve(r.architecture, library, r.dtype)  # architecture = sm_XX
        else:
            params = table
        estimate = gemm_time(
            r.gpu,
            r.m,
            r.n,
            r.k,
            dtype=r.dtype,
            sparse="1:2" if r.dtype == "tf32" else "2:4",
            library=library,
            level=r.level,  # type: ignore[arg-type]
            parameters=params,
        )
        assert estimate.dense_time_s is not None
        out.append(estimate.dense_time_s / estimate.time_s)
    return np.array(out, dtype=np.float64)
