"""Staged timing: the fit's line searches, bit for bit the vectorised loss, but faster.

A line search moves one slot and holds every other one, so the fit times its rows in
stages: the (configurations x rows) arrays of :func:`nmsim.perf.gemm.roofline` that no
fitted value changes are computed once per fit, and the roofline terms the moving
parameter does not enter once per line search. Every array is computed with the
expression ``roofline`` uses, in the same order, so the times, the losses and the fitted
values are bit for bit those of evaluating
:func:`~nmsim.perf.calibration.loss._row_losses` on every trial
(``tests/test_calibration.py`` checks every slot's line search against it and against
:func:`~nmsim.perf.calibration.loss._penalty`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nmsim.perf.calibration.design import _Block, _Design, _values
from nmsim.perf.calibration.loss import (
    _losses_of_times,
    _Measured,
    _penalty_term,
    _scoped_slots,
)

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
