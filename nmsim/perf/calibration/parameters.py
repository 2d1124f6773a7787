"""What the calibration fits: the fitted parameters, their bounds and the fixed structure.

``specs/gemm_model.md`` sections 4.1 and 6. :data:`FITTED` lists every fitted parameter
with its bounds and starting value (their scopes are
:data:`~nmsim.perf.gemm_parameters.SCOPED_FIELDS`); :data:`STRUCTURE` holds the model's
structure, which is not fitted; :data:`LEGACY_PARAMETERS` is the previous model, one of
the cross-validation baselines.
"""

from __future__ import annotations

from dataclasses import dataclass

from nmsim.perf.gemm_parameters import GemmParameters

#: The previous model (fitted on four published points, one global parameter set),
#: kept as a baseline: the new structure with every new term switched off.
LEGACY_PARAMETERS = GemmParameters(
    dense_compute_efficiency=0.6639,
    sparse_compute_efficiency=0.5213,
    dense_memory_efficiency=0.8,
    sparse_memory_efficiency=0.3926,
    launch_overhead_us=4.0,
    compress_bandwidth_fraction=0.11428,
    feed_follows_issue_rate=False,
    provenance="the model before the corpus: fitted on a100-cutlass-linear, "
    "a100-mlp-train-weight24, rtx4090-llama2-7b-decode",
)


@dataclass(frozen=True)
class Fitted:
    """One fitted parameter: its name, its finest scope, bounds and starting value."""

    name: str
    low: float
    high: float
    start: float
    meaning: str


#: The fitted parameters (their scopes are :data:`SCOPED_FIELDS`; others are global).
FITTED: tuple[Fitted, ...] = (
    Fitted("dense_compute_efficiency", 0.3, 1.0, 0.75, "dense main-loop share of peak"),
    Fitted("dense_memory_efficiency", 0.3, 1.0, 0.8, "dense DRAM bandwidth share"),
    Fitted("sparse_compute_ratio", 0.3, 1.0, 0.8, "sparse / dense main-loop efficiency"),
    Fitted("sparse_memory_ratio", 0.2, 1.0, 0.8, "compressed-A / dense bandwidth share"),
    Fitted("tile_fixed_k", 0.0, 2048.0, 128.0, "per-tile fixed cost, in k of dense loop"),
    Fitted("balanced_tile_intensity", 8.0, 256.0, 64.0, "tile intensity that feeds the cores"),
    Fitted("dense_k_step_ns", 0.0, 2000.0, 50.0, "shortest dense k-step of a CTA"),
    Fitted("sparse_k_step_ratio", 1.0, 8.0, 1.5, "sparse / dense shortest k-step (>= 1)"),
    Fitted("launch_overhead_us", 0.0, 20.0, 4.0, "fixed time of a kernel call"),
    Fitted("sparse_extra_overhead_us", 0.0, 50.0, 1.0, "extra fixed time of a sparse call"),
    Fitted("framework_overhead_us", 0.0, 100.0, 10.0, "host time of a framework call"),
    Fitted("sparse_framework_overhead_us", 0.0, 400.0, 20.0, "extra host time, sparse subclass"),
)
_FITTED_BY_NAME = {f.name: f for f in FITTED}


#: Structure of the calibrated model (not fitted): a sparse call through torch.sparse never
#: splits k (framework level); a kernel-level benchmark may (cuSPARSELt searches split-K).
STRUCTURE = GemmParameters(sparse_split_k=None, framework_sparse_split_k=(1,))

#: Minimum rows of a scope before it gets its own value.
MIN_SCOPE_ROWS = 3
