"""The fit's objective: weighted squared log errors per row, plus the shrinkage penalty.

``specs/gemm_model.md`` section 6, "Fit": the loss of a row is its weight times the squared
log error of the speedup plus :data:`ABSOLUTE_WEIGHT` times those of the printed dense and
sparse times; each scoped value adds :data:`SHRINKAGE` times its squared log ratio to
the value of the scope it refines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nmsim.perf.calibration.design import _GLOBAL, _Design, _times
from nmsim.perf.calibration.parameters import _FITTED_BY_NAME

#: Weight of each printed absolute time's squared log error, beside the speedup's (1).
ABSOLUTE_WEIGHT = 0.05

#: Shrinkage of a scoped value toward its global value (weight on the squared log ratio,
#: or on the squared difference relative to the parameter's range for offsets).
SHRINKAGE = 0.5


def _row_losses(design: _Design, x: np.ndarray) -> np.ndarray:
    """Weighted squared log errors per row: the speedup, plus ABSOLUTE_WEIGHT times each time's."""
    return _losses_of_times(_Measured.of(design), *_times(design, x))


@dataclass(frozen=True)
class _Measured:
    """The measured side of a design's row losses, split once for many evaluations."""

    speedup: np.ndarray
    weight: np.ndarray
    timed: np.ndarray | None  # indices of the rows with printed times; None: every row
    dense: np.ndarray  # the printed seconds of those rows
    sparse: np.ndarray

    @classmethod
    def of(cls, design: _Design) -> _Measured:
        """The measured values of ``design``'s rows."""
        printed = ~np.isnan(design.measured_dense)
        timed = None if printed.all() else np.flatnonzero(printed)
        pick = slice(None) if timed is None else timed
        return cls(
            speedup=design.measured_speedup,
            weight=design.weight,
            timed=timed,
            dense=design.measured_dense[pick],
            sparse=design.measured_sparse[pick],
        )


def _losses_of_times(measured: _Measured, dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
    """:func:`_row_losses` of given modelled dense and sparse seconds of the design rows."""
    speed = np.log(dense / sparse / measured.speedup) ** 2
    timed = measured.timed
    if timed is None:  # every row printed its times (most slots' rows): no scatter needed
        absolute = ABSOLUTE_WEIGHT * (
            np.log(dense / measured.dense) ** 2 + np.log(sparse / measured.sparse) ** 2
        )
    else:
        absolute = np.zeros_like(speed)
        absolute[timed] = ABSOLUTE_WEIGHT * (
            np.log(dense[timed] / measured.dense) ** 2
            + np.log(sparse[timed] / measured.sparse) ** 2
        )
    return measured.weight * (speed + absolute)


def _penalty_term(design: _Design, x: np.ndarray, i: int) -> float:
    """Shrinkage of scoped slot ``i`` toward the value of the scope it refines."""
    g = x[design.parent[i]]
    f = _FITTED_BY_NAME[design.slots[i][0]]
    if f.low > 0:
        return SHRINKAGE * math.log(x[i] / g) ** 2
    return SHRINKAGE * ((x[i] - g) / (f.high - f.low)) ** 2 * 16.0


def _scoped_slots(design: _Design) -> list[int]:
    """Indices of the scoped (non-global) slots, in slot order: the terms of the penalty."""
    return [i for i, (_, scope) in enumerate(design.slots) if scope != _GLOBAL]


def _penalty(design: _Design, x: np.ndarray) -> float:
    """Shrinkage of every scoped value toward the value of the scope it refines."""
    total = 0.0
    for i in _scoped_slots(design):
        total += _penalty_term(design, x, i)
    return total


def _loss(design: _Design, x: np.ndarray) -> float:
    """The fit's objective: row losses plus the shrinkage penalty."""
    return float(np.sum(_row_losses(design, x))) + _penalty(design, x)
