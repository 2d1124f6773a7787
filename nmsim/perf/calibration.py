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
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from nmref._validation import check_positive_integer
from nmsim.perf.corpus import Measurement, load_corpus
from nmsim.perf.gemm import (
    DEFAULT_OUTPUT,
    OUTPUT_BYTES,
    configuration_grid,
    default_library,
    gemm_time,
    metadata_bits_per_kept,
    rate_fraction,
    roofline,
)
from nmsim.perf.gemm_parameters import (
    SCOPED_FIELDS,
    GemmParameters,
    ParameterTable,
    architecture_key,
    default_parameter_table,
    dtype_class,
    scope_pattern,
    scopes_of,
)
from nmsim.perf.hardware import DTYPE_BYTES, get_gpu
from nmsim.perf.intervals import SMALL_N, regime

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

#: Rows with these tags stay in the corpus and in the report, but are not fitted:
#: an older library release known slower than today's, a reported slowdown bug, a whole
#: layer whose time includes non-GEMM work, or numbers the source itself makes doubtful.
EXCLUDED_TAGS: frozenset[str] = frozenset({"historic", "regression", "e2e-layer", "suspect"})

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

#: Weight of each printed absolute time's squared log error, beside the speedup's (1).
ABSOLUTE_WEIGHT = 0.05

#: Shrinkage of a scoped value toward its global value (weight on the squared log ratio,
#: or on the squared difference relative to the parameter's range for offsets).
SHRINKAGE = 0.5

#: Structure of the calibrated model (not fitted): a sparse call through torch.sparse never
#: splits k (framework level); a kernel-level benchmark may (cuSPARSELt searches split-K).
STRUCTURE = GemmParameters(sparse_split_k=None, framework_sparse_split_k=(1,))

#: Weight of a row by its source's trust (a low-trust source counts half).
TRUST_WEIGHT: dict[str, float] = {"high": 1.0, "medium": 1.0, "low": 0.5}

#: Minimum rows of a scope before it gets its own value.
MIN_SCOPE_ROWS = 3


# --------------------------------------------------------------------------- families
def family(gpu: str) -> str:
    """GPU family used in the CV table: by chip generation (compute capability)."""
    g = get_gpu(gpu)
    major, _, minor = g.compute_capability.partition(".")
    if g.compute_capability == "8.0":
        return "A100/A30 (GA100)"
    if major == "8" and minor in ("6", "7"):
        return "Ampere GA10x"
    if g.compute_capability == "8.9":
        return "Ada"
    if major == "9":
        return "Hopper"
    return "Blackwell" if major in ("10", "12") else g.architecture


#: Measured speedups above this cannot be explained by the sparse tensor cores (2x math,
#: 0.5625x bytes): the dense baseline ran far below its peak. Such rows are reported, not
#: fitted, because the model keeps sparse within 2x of the dense compute term by design.
BEYOND_HARDWARE = 2.0


def exclusion_reason(row: Measurement) -> str | None:
    """Why a corpus row is not fitted (None if it is)."""
    if row.library == "other":
        return "library 'other' (not cuSPARSELt or CUTLASS)"
    tags = sorted(set(row.tags) & EXCLUDED_TAGS)
    if tags:
        return "tagged " + ", ".join(tags)
    if row.speedup > BEYOND_HARDWARE:
        return (
            f"speedup {row.speedup:.2f} > {BEYOND_HARDWARE:g}: the dense baseline is far "
            "below its peak"
        )
    return None


def fitted_rows(rows: Sequence[Measurement]) -> list[Measurement]:
    """Rows the fit and the CV use: a modelled library, no excluded tag, at most 2x."""
    return [r for r in rows if exclusion_reason(r) is None]


# --------------------------------------------------------------------------- vectorised rows
@dataclass
class _Block:
    """Static per-row arrays of one path (dense or sparse) of many corpus rows."""

    static: dict[str, np.ndarray]
    grid: tuple[np.ndarray, np.ndarray, np.ndarray]
    sparse: bool


def _pattern_density(dtype: str) -> float:
    return 0.5  # 2:4 and 1:2 both keep half


def _block(
    rows: Sequence[Measurement], sparse: bool, structure: GemmParameters, level: str
) -> _Block:
    cols: dict[str, list[float]] = {
        name: []
        for name in (
            "m",
            "n",
            "k",
            "sms",
            "dense_flops_per_sm",
            "math_speed",
            "a_fraction",
            "a_bytes",
            "other_bytes",
            "bandwidth",
            "k_per_step",
            "rate_fraction",
        )
    }
    for r in rows:
        gpu = get_gpu(r.gpu)
        peak = gpu.peak(r.dtype)
        element = DTYPE_BYTES[r.dtype]
        sms = int(gpu.sms.value)
        if sparse:
            kept = r.m * r.k * _pattern_density(r.dtype)
            a_bytes = kept * element + kept * metadata_bits_per_kept(r.dtype) / 8
            peak_path = min(peak.sparse_tflops, 2.0 * peak.dense_tflops)
        else:
            a_bytes = r.m * r.k * element
            peak_path = peak.dense_tflops
        other = r.k * r.n * element + r.m * r.n * OUTPUT_BYTES[DEFAULT_OUTPUT[r.dtype]]
        cols["m"].append(r.m)
        cols["n"].append(r.n)
        cols["k"].append(r.k)
        cols["sms"].append(sms)
        cols["dense_flops_per_sm"].append(peak.dense_tflops * 1e12 / sms)
        cols["math_speed"].append(peak_path / peak.dense_tflops)
        cols["a_fraction"].append(a_bytes / (r.m * r.k * element))
        cols["a_bytes"].append(a_bytes)
        cols["other_bytes"].append(other)
        cols["bandwidth"].append(gpu.memory_bandwidth_gb_s.value * 1e9)
        cols["k_per_step"].append(structure.k_step_bytes / element * (2.0 if sparse else 1.0))
        cols["rate_fraction"].append(
            rate_fraction(gpu, r.dtype, peak.dense_tflops)
            if structure.feed_follows_issue_rate
            else 1.0
        )
    return _Block(
        static={name: np.array(values, dtype=np.float64) for name, values in cols.items()},
        grid=configuration_grid(structure, sparse, level),
        sparse=sparse,
    )


@dataclass
class _Design:
    """Everything a loss evaluation needs: rows, blocks and parameter slots."""

    rows: list[Measurement]
    dense: _Block
    sparse: _Block
    slots: list[tuple[str, tuple[str, str, str]]]  # (name, scope); scope ("*","*","*") = global
    parent: np.ndarray  # slot index each scoped slot is shrunk toward (itself for globals)
    sparse_framework: _Block
    gather: dict[str, np.ndarray]  # name -> slot index per row
    framework: np.ndarray
    measured_speedup: np.ndarray
    measured_dense: np.ndarray  # seconds per GEMM, NaN where not printed
    measured_sparse: np.ndarray
    weight: np.ndarray
    structure: GemmParameters


_GLOBAL = ("*", "*", "*")


def _scope_key(row: Measurement) -> tuple[str, str, str]:
    """``(architecture, library, dtype class)`` of a row: what its scopes are built from."""
    library = row.library if row.library != "other" else default_library(row.dtype)
    return row.architecture, library, dtype_class(row.dtype)


@cache
def _scope_chain(key: tuple[str, str, str], name: str) -> tuple[tuple[str, str, str], ...]:
    """Scopes of ``name`` for rows of scope key ``key``: global first, then coarse to fine.

    Cached: a corpus has a handful of keys, and :func:`_design` asks for every row and
    parameter, once per CV fold.
    """
    allowed = SCOPED_FIELDS.get(name, ())
    chain = [scope for scope in scopes_of(*key) if scope_pattern(scope) in allowed]
    chain.sort(key=lambda scope: allowed.index(scope_pattern(scope)))
    return (_GLOBAL, *chain)


def _design(rows: Sequence[Measurement], structure: GemmParameters = STRUCTURE) -> _Design:
    rows = list(rows)
    slots: list[tuple[str, tuple[str, str, str]]] = []
    index: dict[tuple[str, tuple[str, str, str]], int] = {}
    counts: dict[tuple[str, tuple[str, str, str]], int] = {}
    parents: dict[tuple[str, tuple[str, str, str]], tuple[str, str, str]] = {}
    keys = [_scope_key(row) for row in rows]
    # rows of one scope key have the same chains: count each key once, by its rows, in the
    # order of its last row (so the parent written last is the one the last row writes)
    last = {key: i for i, key in enumerate(keys)}
    multiplicity = {key: keys.count(key) for key in sorted(last, key=last.__getitem__)}
    for fitted in FITTED:
        for key, rows_of_key in multiplicity.items():
            chain = _scope_chain(key, fitted.name)
            for position, scope in enumerate(chain):
                counts[(fitted.name, scope)] = counts.get((fitted.name, scope), 0) + rows_of_key
                if position:
                    parents[(fitted.name, scope)] = chain[position - 1]
    for fitted in FITTED:
        key = (fitted.name, _GLOBAL)
        index[key] = len(slots)
        slots.append(key)
        for pattern in SCOPED_FIELDS.get(fitted.name, ()):
            for (name, scope), count in sorted(counts.items()):
                if (
                    name == fitted.name
                    and scope != _GLOBAL
                    and scope_pattern(scope) == pattern
                    and count >= MIN_SCOPE_ROWS
                ):
                    index[(name, scope)] = len(slots)
                    slots.append((name, scope))
    parent_slot = []
    for name, scope in slots:
        parent = parents.get((name, scope))
        # the nearest coarser scope that has its own value, else the global one
        while parent is not None and (name, parent) not in index:
            parent = parents.get((name, parent))
        parent_slot.append(index[(name, parent if parent is not None else _GLOBAL)])
    gather = {}
    for fitted in FITTED:
        picks = {}
        for key in multiplicity:
            chosen = index[(fitted.name, _GLOBAL)]
            for scope in _scope_chain(key, fitted.name):
                chosen = index.get((fitted.name, scope), chosen)
            picks[key] = chosen
        gather[fitted.name] = np.array([picks[key] for key in keys], dtype=np.int64)
    per_source: dict[str, int] = {}
    for row in rows:
        per_source[row.source] = per_source.get(row.source, 0) + 1

    def seconds(values: list[float | None]) -> np.ndarray:
        return np.array([np.nan if v is None else v * 1e-6 for v in values], dtype=np.float64)

    return _Design(
        rows=rows,
        dense=_block(rows, False, structure, "kernel"),
        sparse=_block(rows, True, structure, "kernel"),
        sparse_framework=_block(rows, True, structure, "framework"),
        slots=slots,
        parent=np.array(parent_slot, dtype=np.int64),
        gather=gather,
        framework=np.array([r.level == "framework" for r in rows]),
        measured_speedup=np.array([r.speedup for r in rows], dtype=np.float64),
        measured_dense=seconds(
            [None if r.dense_us is None else r.dense_us / r.count for r in rows]
        ),
        measured_sparse=seconds(
            [None if r.sparse_us is None else r.sparse_us / r.count for r in rows]
        ),
        # each source weighs sqrt(its rows): many rows count, one table cannot swamp the rest
        weight=np.array([TRUST_WEIGHT[r.trust] / math.sqrt(per_source[r.source]) for r in rows]),
        structure=structure,
    )


def _values(design: _Design, x: np.ndarray) -> dict[str, np.ndarray]:
    return {name: x[idx] for name, idx in design.gather.items()}


def _times(design: _Design, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Modelled dense and sparse seconds of every design row for slot values ``x``."""
    v = _values(design, x)
    dense_c = v["dense_compute_efficiency"]
    dense_m = v["dense_memory_efficiency"]
    sparse_c = np.minimum(dense_c, dense_c * v["sparse_compute_ratio"])
    sparse_m = np.minimum(dense_m, dense_m * v["sparse_memory_ratio"])
    framework = design.framework
    out = []
    for block in (design.dense, design.sparse, design.sparse_framework):
        s = block.sparse
        overhead = v["launch_overhead_us"] + (v["sparse_extra_overhead_us"] if s else 0.0)
        overhead = overhead + np.where(
            framework,
            v["framework_overhead_us"] + (v["sparse_framework_overhead_us"] if s else 0.0),
            0.0,
        )
        tm, tn, sp = block.grid
        result = roofline(
            **block.static,
            compute_efficiency=sparse_c if s else dense_c,
            dense_compute_efficiency=dense_c,
            memory_efficiency=dense_m,
            a_memory_efficiency=sparse_m if s else dense_m,
            tile_fixed_k=v["tile_fixed_k"],
            k_step_s=(
                v["dense_k_step_ns"] * (np.maximum(1.0, v["sparse_k_step_ratio"]) if s else 1.0)
            )
            * 1e-9,
            overhead_s=overhead * 1e-6,
            balanced_tile_intensity=v["balanced_tile_intensity"],
            tm=tm,
            tn=tn,
            split=sp,
        )
        out.append(result["time"])
    # a framework-level sparse call uses the framework's split-K set (torch: k never split)
    return out[0], np.where(framework, out[2], out[1])


def _row_losses(design: _Design, x: np.ndarray) -> np.ndarray:
    """Weighted squared log errors per row: the speedup, plus a quarter of each printed time."""
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


def _subset(design: _Design, rows: np.ndarray) -> _Design:
    """The design restricted to some rows (same slots): a coordinate moves only its rows."""

    def block(b: _Block) -> _Block:
        return _Block({k: v[rows] for k, v in b.static.items()}, b.grid, b.sparse)

    return _Design(
        rows=[design.rows[i] for i in rows],
        dense=block(design.dense),
        sparse=block(design.sparse),
        sparse_framework=block(design.sparse_framework),
        slots=design.slots,
        parent=design.parent,
        gather={k: v[rows] for k, v in design.gather.items()},
        framework=design.framework[rows],
        measured_speedup=design.measured_speedup[rows],
        measured_dense=design.measured_dense[rows],
        measured_sparse=design.measured_sparse[rows],
        weight=design.weight[rows],
        structure=design.structure,
    )


# --------------------------------------------------------------------------- staged timing
# A line search moves one slot and holds every other one, so the fit times its rows in
# stages: the (configurations x rows) arrays of ``roofline`` that no fitted value changes
# are computed once per fit, and the roofline terms the moving parameter does not enter
# once per line search. Every array is computed with the expression ``roofline`` uses, in
# the same order, so the times, the losses and the fitted values are bit for bit those
# of evaluating ``_row_losses`` on every trial (tests/test_calibration.py checks every
# slot's line search against it).

#: The term of the roofline (``_times``) each fitted parameter enters.
_TERM_OF: dict[str, str] = {
    "dense_compute_efficiency": "compute",
    "sparse_compute_ratio": "compute",
    "tile_fixed_k": "compute",
    "balanced_tile_intensity": "compute",
    "dense_memory_efficiency": "memory",
    "sparse_memory_ratio": "memory",
    "dense_k_step_ns": "latency",
    "sparse_k_step_ratio": "latency",
    "launch_overhead_us": "overhead",
    "sparse_extra_overhead_us": "overhead",
    "framework_overhead_us": "overhead",
    "sparse_framework_overhead_us": "overhead",
}

#: Fitted parameters the dense path never reads.
_SPARSE_ONLY = frozenset(
    {
        "sparse_compute_ratio",
        "sparse_memory_ratio",
        "sparse_k_step_ratio",
        "sparse_extra_overhead_us",
        "sparse_framework_overhead_us",
    }
)


def _fastest(
    compute: np.ndarray, memory: np.ndarray, latency: np.ndarray, overhead: np.ndarray
) -> np.ndarray:
    """Time of each row's fastest configuration, as ``roofline`` combines its terms.

    The staged arrays are (configurations x rows), so that the row values broadcast along
    the long contiguous axis and the minimum over configurations is a fast elementwise
    reduction. ``roofline`` picks ``total[rows, argmin(total)]``; the minimum is that
    same element (ties are equal values).
    """
    return (np.maximum(np.maximum(compute, memory), latency) + overhead).min(axis=0)


class _StagedPath:
    """One path of some design rows, with the arrays of ``roofline`` no fitted value changes.

    Every array is (configurations x rows), ``roofline``'s transposed (the elementwise
    arithmetic, and so every value, is the same); per-row values are 1-D.

    Parameters
    ----------
    block : _Block
        The path (dense, sparse kernel level or sparse framework level) of a design.
    rows : numpy.ndarray
        Indices of the design rows timed on this path.
    framework : numpy.ndarray
        The design's framework-level flag of every row.
    """

    def __init__(self, block: _Block, rows: np.ndarray, framework: np.ndarray) -> None:
        s = {name: values[rows] for name, values in block.static.items()}
        tm, tn, split = (values[:, np.newaxis] for values in block.grid)
        self.sparse = block.sparse
        self.rows = rows
        self.framework = framework[rows]
        units = np.ceil(s["m"] / tm) * np.ceil(s["n"] / tn) * split
        waves = np.ceil(units / s["sms"])
        self.intensity = tm * tn / (s["a_fraction"] * tm + tn)
        self.k_split = np.ceil(s["k"] / split)
        self.tile_work = waves * (2.0 * tm * tn)  # waves times the flops of one tile
        workspace = np.where(split > 1, 2.0 * 4.0 * s["m"] * s["n"] * split, 0.0)
        self.other_bytes = s["other_bytes"] + workspace
        self.steps = waves * np.ceil(self.k_split / s["k_per_step"])
        self.rate_fraction = s["rate_fraction"]
        self.math_speed = s["math_speed"]
        self.dense_flops_per_sm = s["dense_flops_per_sm"]
        self.a_bytes = s["a_bytes"]
        self.bandwidth = s["bandwidth"]

    def feed(self, v: dict[str, np.ndarray]) -> np.ndarray:
        """Operand-feed share of the tensor-core rate, for per-row parameter values ``v``."""
        balanced = v["balanced_tile_intensity"] * self.rate_fraction
        return np.minimum(1.0, self.intensity / (balanced * self.math_speed))

    def main(self, v: dict[str, np.ndarray], feed: np.ndarray) -> np.ndarray:
        """Main-loop part of the compute term, in k of the dense loop."""
        dense_c = v["dense_compute_efficiency"]
        c = np.minimum(dense_c, dense_c * v["sparse_compute_ratio"]) if self.sparse else dense_c
        return self.k_split / (self.math_speed * c * feed)

    def compute(self, v: dict[str, np.ndarray], main: np.ndarray) -> np.ndarray:
        """Compute term."""
        fixed = v["tile_fixed_k"] / v["dense_compute_efficiency"]
        return self.tile_work * (main + fixed) / self.dense_flops_per_sm

    def a_memory(self, v: dict[str, np.ndarray]) -> np.ndarray:
        """Memory term of the A operand (per row)."""
        dense_m = v["dense_memory_efficiency"]
        a_m = np.minimum(dense_m, dense_m * v["sparse_memory_ratio"]) if self.sparse else dense_m
        return self.a_bytes / (self.bandwidth * a_m)

    def other_memory(self, v: dict[str, np.ndarray]) -> np.ndarray:
        """Memory term of B, C and the split-K workspace."""
        return self.other_bytes / (self.bandwidth * v["dense_memory_efficiency"])

    def latency(self, v: dict[str, np.ndarray]) -> np.ndarray:
        """Latency term (the shortest k-steps of the waves)."""
        ratio = np.maximum(1.0, v["sparse_k_step_ratio"]) if self.sparse else 1.0
        return self.steps * ((v["dense_k_step_ns"] * ratio) * 1e-9)

    def overhead(self, v: dict[str, np.ndarray]) -> np.ndarray:
        """Fixed seconds of a call (per row)."""
        s = self.sparse
        overhead = v["launch_overhead_us"] + (v["sparse_extra_overhead_us"] if s else 0.0)
        overhead = overhead + np.where(
            self.framework,
            v["framework_overhead_us"] + (v["sparse_framework_overhead_us"] if s else 0.0),
            0.0,
        )
        return overhead * 1e-6


class _PathLine:
    """Times of one staged path as parameter ``name`` moves: what it does not enter is kept.

    Parameters
    ----------
    path : _StagedPath
        The path.
    values : dict
        Per-row values of every parameter (``_values``) of the whole design, at the
        line search's start.
    name : str
        The moving parameter (one value for all the path's rows: they are its slot's).
    """

    def __init__(self, path: _StagedPath, values: dict[str, np.ndarray], name: str) -> None:
        self.path = path
        self.name = name
        self.v = v = {key: value[path.rows] for key, value in values.items()}
        self.term = _TERM_OF[name]
        self.feed = path.feed(v)
        self.main = path.main(v, self.feed)
        self.compute = path.compute(v, self.main)
        self.a_memory = path.a_memory(v)
        self.other_memory = path.other_memory(v)
        self.memory = self.a_memory + self.other_memory
        self.latency = path.latency(v)
        self.overhead = path.overhead(v)
        # a path the parameter does not enter (or with no rows) keeps its times
        moves = path.rows.size > 0 and (path.sparse or name not in _SPARSE_ONLY)
        self.fixed = (
            None if moves else _fastest(self.compute, self.memory, self.latency, self.overhead)
        )
        # the partial maxima _fastest builds before the term that moves
        if self.term == "latency":
            self.peak = np.maximum(self.compute, self.memory)
        elif self.term == "overhead":
            self.peak = np.maximum(np.maximum(self.compute, self.memory), self.latency)

    def times(self, value: float) -> np.ndarray:
        """Time of each of the path's rows with the parameter at ``value``."""
        if self.fixed is not None:
            return self.fixed
        path, v, name = self.path, self.v, self.name
        v[name] = np.full(path.rows.size, value, dtype=np.float64)
        if self.term == "compute":
            if name == "tile_fixed_k":
                main = self.main
            else:
                feed = path.feed(v) if name == "balanced_tile_intensity" else self.feed
                main = path.main(v, feed)
            compute = path.compute(v, main)
            return _fastest(compute, self.memory, self.latency, self.overhead)
        if self.term == "memory":
            other = self.other_memory if name == "sparse_memory_ratio" else path.other_memory(v)
            memory = path.a_memory(v) + other
            return _fastest(self.compute, memory, self.latency, self.overhead)
        # the rest of _fastest after the partial maximum
        if self.term == "latency":
            return (np.maximum(self.peak, path.latency(v)) + self.overhead).min(axis=0)
        return (self.peak + path.overhead(v)).min(axis=0)


class _Staged:
    """A design (the rows one slot reaches) staged for many line-search evaluations.

    A sparse row is timed only on the path its level uses (kernel or framework), where
    ``_times`` times both and keeps one.
    """

    def __init__(self, design: _Design) -> None:
        self.design = design
        self.measured = _Measured.of(design)
        flags = design.framework
        self.kernel = np.flatnonzero(~flags)
        self.framework = np.flatnonzero(flags)
        self.paths = (
            _StagedPath(design.dense, np.arange(flags.size), flags),
            _StagedPath(design.sparse, self.kernel, flags),
            _StagedPath(design.sparse_framework, self.framework, flags),
        )

    def line(self, x: np.ndarray, slot: int) -> _Line:
        """Row losses as slot ``slot`` moves and every other slot stays at ``x``."""
        return _Line(self, x, slot)


class _Line:
    """Row losses of a staged design as one slot moves (see :meth:`_Staged.line`)."""

    def __init__(self, staged: _Staged, x: np.ndarray, slot: int) -> None:
        self.staged = staged
        values = _values(staged.design, x)
        name = staged.design.slots[slot][0]
        self.paths = [_PathLine(path, values, name) for path in staged.paths]

    def __call__(self, value: float) -> np.ndarray:
        """``_row_losses`` of the staged design with the slot at ``value``."""
        staged = self.staged
        dense, kernel, framework = (p.times(value) for p in self.paths)
        sparse = np.empty_like(dense)
        sparse[staged.kernel] = kernel
        sparse[staged.framework] = framework
        return _losses_of_times(staged.measured, dense, sparse)


class _StagedPenalty:
    """The shrinkage penalty as one slot moves: the terms it does not enter are kept."""

    def __init__(self, design: _Design) -> None:
        self.design = design
        self.scoped = _scoped_slots(design)
        # the penalty terms (positions in ``scoped``) each slot enters: its own, if it is
        # scoped, and those of the scopes that refine it
        self.enters = [
            [k for k, j in enumerate(self.scoped) if j == i or design.parent[j] == i]
            for i in range(len(design.slots))
        ]

    def line(self, x: np.ndarray, slot: int) -> Callable[[np.ndarray], float]:
        """``_penalty`` of a trial ``x`` that differs from ``x`` at ``slot`` only."""
        design, scoped = self.design, self.scoped
        moving = self.enters[slot]
        terms = [_penalty_term(design, x, j) for j in scoped]
        first = min(moving, default=len(scoped))
        # the same left-to-right sum as _penalty: the terms before the first moving one
        # add up to the same partial sum whatever the trial
        head = 0.0
        for term in terms[:first]:
            head += term
        tail = terms[first:]

        def penalty(trial: np.ndarray) -> float:
            rest = tail.copy()
            for k in moving:
                rest[k - first] = _penalty_term(design, trial, scoped[k])
            total = head
            for term in rest:
                total += term
            return total

        return penalty


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


# --------------------------------------------------------------------------- CV
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


# --------------------------------------------------------------------------- report
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


# --------------------------------------------------------------------------- checks
@cache
def load_points() -> tuple[dict[str, Any], ...]:
    """The qualitative checks and overhead points of ``nmsim/data/calibration.toml``."""
    text = resources.files("nmsim").joinpath("data/calibration.toml").read_text("utf-8")
    points = tuple(tomllib.loads(text)["points"])
    roles = {"check", "overhead", "workload", "excluded"}
    for point in points:
        if point.get("role") not in roles:
            raise ValueError(
                f"calibration point {point.get('id')!r}: role={point.get('role')!r} not in {roles}"
            )
    return points


def _checks(table: ParameterTable) -> list[dict[str, Any]]:
    out = []
    for point in load_points():
        if point["role"] != "check":
            continue
        gpu = get_gpu(point["gpu"])
        params = table.resolve(architecture_key(gpu), "cusparselt", point["dtype"])
        if "sweep" in point:
            sizes = point["sweep"]
            value = max(
                _speedup(point["gpu"], m, n, k, point["dtype"], params, "kernel")
                for m in sizes
                for n in sizes
                for k in sizes
            )
        else:
            value = min(
                _speedup(point["gpu"], g["m"], g["n"], g["k"], point["dtype"], params, level)
                for g in point["gemms"]
                for level in ("kernel", "framework")
            )
        out.append(
            {
                "id": point["id"],
                "check": point["check"],
                "model": value,
                "passed": value <= point["max_speedup"],
                "source": point["source"],
            }
        )
    return out


def _speedup(
    gpu: str, m: int, n: int, k: int, dtype: str, params: GemmParameters, level: str
) -> float:
    e = gemm_time(gpu, m, n, k, dtype=dtype, sparse="2:4", parameters=params, level=level)  # type: ignore[arg-type]
    assert e.speedup is not None
    return e.speedup


def compress_time_s(
    gpu: str, weight_bytes: float, parameters: GemmParameters | None = None
) -> float:
    """Time of a runtime prune + compress pass over a dense weight of ``weight_bytes``.

    Modelled as a memory-bound pass at ``compress_bandwidth_fraction`` of DRAM
    bandwidth; that fraction is derived from the measured 36 us for an 8 MiB
    weight on A100-80GB (calibration point ``a100-compress`` in
    ``nmsim/data/calibration.toml``, with its source) and transfers to other GPUs by
    bandwidth only (an assumption).
    """
    if not 0 <= weight_bytes < math.inf:  # also rejects NaN
        raise ValueError(f"weight_bytes={weight_bytes} must be finite and >= 0")
    fraction = (
        parameters.compress_bandwidth_fraction
        if parameters is not None
        else default_parameter_table().structure.compress_bandwidth_fraction
    )
    bandwidth = get_gpu(gpu).memory_bandwidth_gb_s.value * 1e9
    return weight_bytes / (bandwidth * fraction)


def derive_compress_fraction() -> float:
    """Fraction of DRAM bandwidth implied by the measured compress point."""
    (point,) = [p for p in load_points() if p["role"] == "overhead"]
    bandwidth = get_gpu(point["gpu"]).memory_bandwidth_gb_s.value * 1e9
    return point["weight_mib"] * 2**20 / (point["time_us"] * 1e-6 * bandwidth)


# --------------------------------------------------------------------------- files
def parameters_toml(table: ParameterTable) -> str:
    """Text of ``nmsim/data/gemm_parameters.toml`` (``nmsim calibrate --write``)."""
    s = table.structure
    lines = [
        "# Written by `nmsim calibrate --write` (nmsim/perf/calibration.py); do not edit by hand.",
        '# [parameters]: global values; [scoped."architecture/library/dtype-class"]: values',
        "# fitted for one scope and shrunk toward the global value (specs/gemm_model.md 4, 6).",
        f'provenance = "{table.provenance}"',
        "",
        "[structure]",
        *([f"sparse_split_k = {list(s.sparse_split_k)}"] if s.sparse_split_k else []),
        f"framework_sparse_split_k = {list(s.framework_sparse_split_k)}",
        f"compress_bandwidth_fraction = {s.compress_bandwidth_fraction!r}",
        "",
        "[parameters]",
    ]
    lines += [f"{name} = {value!r}" for name, value in table.base.items()]
    for scope, values in table.overrides.items():
        lines += ["", f'[scoped."{"/".join(scope)}"]']
        lines += [f"{name} = {value!r}" for name, value in values.items()]
    return "\n".join(lines) + "\n"


def intervals_toml(intervals: dict[str, Any], provenance: str) -> str:
    """Text of ``nmsim/data/gemm_intervals.toml`` (``nmsim calibrate --write``)."""
    lines = [
        "# Written by `nmsim calibrate --write` (nmsim/perf/calibration.py); do not edit by hand.",
        "# Quantiles of log(measured / predicted) speedup of leave-one-source-out predictions,",
        f"# per architecture and regime (small-n: n <= {SMALL_N}); specs/gemm_model.md section 8.",
        f'provenance = "{provenance}"',
        f"coverage = {intervals['coverage']!r}",
        f"minimum_rows = {intervals['minimum_rows']!r}",
        f"extrapolation_widening = {intervals['extrapolation_widening']!r}",
        "measured_gpus = [" + ", ".join(f'"{g}"' for g in intervals["measured_gpus"]) + "]",
    ]
    lines += ["", "[min_n]"] + [f"{k} = {v!r}" for k, v in intervals["min_n"].items()]
    for section in ("pooled", "groups"):
        for key, value in intervals[section].items():
            lines += ["", f'[{section}."{key}"]']
            lines += [f"{name} = {v!r}" for name, v in value.items()]
    return "\n".join(lines) + "\n"
