"""The design of a fit: corpus rows as arrays, the parameter slots, the vectorised times.

``specs/gemm_model.md`` sections 4 and 6. :func:`_design` turns rows into the static
per-row arrays of each path (dense, sparse at kernel level, sparse at framework level)
and lists the parameter *slots*: one global value per fitted parameter and one per
scope with enough rows, each row gathering the finest slot that applies to it.
:func:`_times` evaluates :func:`nmsim.perf.gemm.roofline` on every row for given slot
values: the same arithmetic as :func:`~nmsim.perf.gemm.gemm_time` (tested).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from nmsim.perf.calibration.parameters import FITTED, MIN_SCOPE_ROWS, STRUCTURE
from nmsim.perf.corpus import Measurement
from nmsim.perf.gemm import (
    DEFAULT_OUTPUT,
    OUTPUT_BYTES,
    configuration_grid,
    default_library,
    metadata_bits_per_kept,
    rate_fraction,
    roofline,
)
from nmsim.perf.gemm_parameters import (
    SCOPED_FIELDS,
    GemmParameters,
    dtype_class,
    scope_pattern,
    scopes_of,
)
from nmsim.perf.hardware import DTYPE_BYTES, get_gpu

#: Weight of a row by its source's trust (a low-trust source counts half).
TRUST_WEIGHT: dict[str, float] = {"high": 1.0, "medium": 1.0, "low": 0.5}


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
