"""Calibration of the GEMM time model on the measured corpus, with honest validation.

``nmsim calibrate`` fits the scoped parameters of
:class:`~nmsim.perf.gemm_parameters.ParameterTable` on every fitted row of the
corpus (``nmsim/data/gemm_corpus/``) and validates the model by
**leave-one-source-out** cross-validation: each source's rows are predicted by
a fit that saw none of them, so a paper or a benchmark cannot vouch for
itself. The errors are reported per GPU family and overall beside two
baselines computed on the same rows: a constant speedup (the median of the
training rows of each fold) and the previous model (four published points,
one global parameter set). The CV residuals become the prediction intervals of
:mod:`nmsim.perf.intervals`. ``specs/gemm_model.md`` sections 6-8.

The fit minimises a weighted sum of squared log errors by bounded coordinate
descent with golden-section line searches from a fixed start: deterministic,
no SciPy needed, about a second per fit (about 25 s for the fit and its
leave-one-source-out CV on one core).

One concept per module, in the order a fit uses them:

- :mod:`~nmsim.perf.calibration.parameters`: what is fitted (bounds, starts, structure)
  and the previous model;
- :mod:`~nmsim.perf.calibration.rows`: which corpus rows are fitted, and their GPU family;
- :mod:`~nmsim.perf.calibration.design`: the rows as arrays, the parameter slots and the
  vectorised times;
- :mod:`~nmsim.perf.calibration.loss`: the objective (row losses and shrinkage);
- :mod:`~nmsim.perf.calibration.staged`: the same losses staged for fast line searches;
- :mod:`~nmsim.perf.calibration.fit`: coordinate descent, and predictions through
  ``gemm_time``;
- :mod:`~nmsim.perf.calibration.cross_validation`: leave-one-source-out refits;
- :mod:`~nmsim.perf.calibration.report`: :func:`calibrate`, the error summaries and the
  prediction-interval table;
- :mod:`~nmsim.perf.calibration.points`: the checks and the compress point of
  ``nmsim/data/calibration.toml``;
- :mod:`~nmsim.perf.calibration.files`: the TOML files ``--write`` stores.

Every name is importable from ``nmsim.perf.calibration`` as before the split.
"""

from __future__ import annotations

# ``name as name``: a name outside ``__all__`` that the single module this package replaced
# also offered (a public helper of a submodule, or a private piece tests/test_calibration.py
# checks on its own). It stays importable from here; new code imports it from its module.
from nmsim.perf.calibration.cross_validation import CrossValidation, RowResult, cross_validate
from nmsim.perf.calibration.design import TRUST_WEIGHT as TRUST_WEIGHT
from nmsim.perf.calibration.design import _design as _design
from nmsim.perf.calibration.design import _subset as _subset
from nmsim.perf.calibration.design import _times as _times
from nmsim.perf.calibration.files import intervals_toml, parameters_toml
from nmsim.perf.calibration.fit import _reach as _reach
from nmsim.perf.calibration.fit import fit_table, predict_rows
from nmsim.perf.calibration.loss import ABSOLUTE_WEIGHT as ABSOLUTE_WEIGHT
from nmsim.perf.calibration.loss import SHRINKAGE as SHRINKAGE
from nmsim.perf.calibration.loss import _penalty as _penalty
from nmsim.perf.calibration.loss import _row_losses as _row_losses
from nmsim.perf.calibration.parameters import _FITTED_BY_NAME as _FITTED_BY_NAME
from nmsim.perf.calibration.parameters import FITTED, LEGACY_PARAMETERS
from nmsim.perf.calibration.parameters import MIN_SCOPE_ROWS as MIN_SCOPE_ROWS
from nmsim.perf.calibration.parameters import STRUCTURE as STRUCTURE
from nmsim.perf.calibration.parameters import Fitted as Fitted
from nmsim.perf.calibration.points import _checks as _checks
from nmsim.perf.calibration.points import compress_time_s, load_points
from nmsim.perf.calibration.points import derive_compress_fraction as derive_compress_fraction
from nmsim.perf.calibration.report import COVERAGE as COVERAGE
from nmsim.perf.calibration.report import EXTRAPOLATION_WIDENING as EXTRAPOLATION_WIDENING
from nmsim.perf.calibration.report import MINIMUM_INTERVAL_ROWS as MINIMUM_INTERVAL_ROWS
from nmsim.perf.calibration.report import CalibrationReport, calibrate
from nmsim.perf.calibration.report import ErrorSummary as ErrorSummary
from nmsim.perf.calibration.report import interval_table as interval_table
from nmsim.perf.calibration.rows import BEYOND_HARDWARE as BEYOND_HARDWARE
from nmsim.perf.calibration.rows import EXCLUDED_TAGS, exclusion_reason, family, fitted_rows
from nmsim.perf.calibration.staged import _Staged as _Staged
from nmsim.perf.calibration.staged import _StagedPenalty as _StagedPenalty

__all__ = [
    "EXCLUDED_TAGS",
    "FITTED",
    "LEGACY_PARAMETERS",
    "CalibrationReport",
    "CrossValidation",
    "RowResult",
    "calibrate",
    "compress_time_s",
    "cross_validate",
    "exclusion_reason",
    "family",
    "fit_table",
    "fitted_rows",
    "intervals_toml",
    "load_points",
    "parameters_toml",
    "predict_rows",
]
