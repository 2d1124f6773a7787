"""The TOML files ``nmsim calibrate --write`` stores: the parameters and the intervals.

``nmsim/data/gemm_parameters.toml`` (read by
:func:`~nmsim.perf.gemm_parameters.default_parameter_table`) and
``nmsim/data/gemm_intervals.toml`` (read by :mod:`nmsim.perf.intervals`);
``specs/gemm_model.md`` sections 4.1, 6 and 8.
"""

from __future__ import annotations

from typing import Any

from nmsim.perf.gemm_parameters import ParameterTable
from nmsim.perf.intervals import SMALL_N


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
