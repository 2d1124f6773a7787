"""The points of ``nmsim/data/calibration.toml``: the qualitative checks and the compress pass.

``specs/gemm_model.md`` section 6, "Checks" (reported pass or fail, never fitted), and
section 4.1, ``compress_bandwidth_fraction``: derived from the measured prune + compress
point, it times the runtime compress pass of a training step (:func:`compress_time_s`).
"""

from __future__ import annotations

import math
import tomllib
from functools import cache
from importlib import resources
from typing import Any

from nmsim.perf.gemm import gemm_time
from nmsim.perf.gemm_parameters import (
    GemmParameters,
    ParameterTable,
    architecture_key,
    default_parameter_table,
)
from nmsim.perf.hardware import get_gpu


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
