"""Calibration of the GEMM time model against published dense vs 2:4 measurements.

The points live in ``nmsim/data/calibration.toml`` with a source each. Points
with ``role = "train"`` fit the free efficiencies of :class:`~nmsim.perf.gemm.GemmParameters`
(``FITTED``); ``role = "test"`` points are held out and reported; ``check``
points are qualitative published statements reported as pass/fail; a leave-one-
out pass refits once per quantitative point. See ``specs/gemm_model.md``.

The fit minimises the sum of squared log errors (dense and sparse times where
both are published, otherwise the speedup) by bounded coordinate descent with
golden-section line searches: deterministic, no SciPy needed.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

from nmsim.perf.gemm import GemmParameters, default_parameters, gemm_time
from nmsim.perf.hardware import get_gpu

__all__ = [
    "ASSUMED",
    "FITTED",
    "CalibrationPoint",
    "CalibrationReport",
    "PointResult",
    "calibrate",
    "compress_time_s",
    "fit_parameters",
    "load_points",
    "predict_point",
]

#: Parameters the fit moves (the published points identify them).
FITTED: tuple[str, ...] = (
    "dense_compute_efficiency",
    "sparse_compute_efficiency",
    "sparse_memory_efficiency",
)

#: Parameters held at a stated assumption because no published point identifies them.
ASSUMED: dict[str, tuple[float, str]] = {
    "dense_memory_efficiency": (
        0.8,
        "no dense memory-bound time is published; 80 % of DRAM peak is a typical GEMV figure [M]",
    ),
    "launch_overhead_us": (
        4.0,
        "a typical CUDA kernel launch and prologue of ~3-5 us; no published point isolates it [M]",
    ),
    "sparse_extra_overhead_us": (0.0, "no published point isolates it"),
}

_BOUNDS = {
    "dense_compute_efficiency": (0.3, 1.0),
    "sparse_ratio": (0.2, 1.0),  # sparse_compute_efficiency / dense_compute_efficiency
    "sparse_memory_ratio": (0.1, 1.0),  # sparse_memory_efficiency / dense_memory_efficiency
}


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a calibration workload (A = ``m x k`` weight, sparse when ``sparse``)."""

    m: int
    n: int
    k: int
    sparse: bool
    count: int = 1


@dataclass(frozen=True)
class CalibrationPoint:
    """One published measurement (see ``nmsim/data/calibration.toml`` for the fields)."""

    id: str
    role: str
    gpu: str
    dtype: str
    source: str
    workload: str = ""
    library: str = ""
    gemms: tuple[Gemm, ...] = ()
    dense_us: float | None = None
    sparse_us: float | None = None
    speedup: float | None = None
    compress_weight_mib: float = 0.0
    max_speedup: float | None = None
    sweep: tuple[int, ...] = ()
    check: str = ""
    reason: str = ""
    note: str = ""
    weight_mib: float | None = None
    time_us: float | None = None
    range_tokens: tuple[int, ...] = ()

    @property
    def measured_speedup(self) -> float | None:
        """Dense time / sparse time as published."""
        if self.speedup is not None:
            return self.speedup
        if self.dense_us is not None and self.sparse_us is not None:
            return self.dense_us / self.sparse_us
        return None


def _point(raw: dict[str, Any]) -> CalibrationPoint:
    gemms = tuple(
        Gemm(int(g["m"]), int(g["n"]), int(g["k"]), bool(g["sparse"]), int(g.get("count", 1)))
        for g in raw.get("gemms", ())
    )
    return CalibrationPoint(
        id=str(raw["id"]),
        role=str(raw["role"]),
        gpu=str(raw["gpu"]),
        dtype=str(raw["dtype"]),
        source=str(raw["source"]),
        workload=str(raw.get("workload", "")),
        library=str(raw.get("library", "")),
        gemms=gemms,
        dense_us=raw.get("dense_us"),
        sparse_us=raw.get("sparse_us"),
        speedup=raw.get("speedup"),
        compress_weight_mib=float(raw.get("compress_weight_mib", 0.0)),
        max_speedup=raw.get("max_speedup"),
        sweep=tuple(int(s) for s in raw.get("sweep", ())),
        check=str(raw.get("check", "")),
        reason=str(raw.get("reason", "")),
        note=str(raw.get("gpu_note", "")),
        weight_mib=raw.get("weight_mib"),
        time_us=raw.get("time_us"),
        range_tokens=tuple(int(t) for t in raw.get("range_tokens", ())),
    )


@cache
def load_points() -> tuple[CalibrationPoint, ...]:
    """All points of ``nmsim/data/calibration.toml``, in file order."""
    text = resources.files("nmsim").joinpath("data/calibration.toml").read_text("utf-8")
    points = tuple(_point(p) for p in tomllib.loads(text)["points"])
    roles = {"train", "test", "check", "overhead", "excluded"}
    for point in points:
        if point.role not in roles:
            raise ValueError(f"calibration point {point.id!r}: role={point.role!r} not in {roles}")
    return points


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
    params = parameters if parameters is not None else default_parameters()
    bandwidth = get_gpu(gpu).memory_bandwidth_gb_s.value * 1e9
    return weight_bytes / (bandwidth * params.compress_bandwidth_fraction)


def derive_compress_fraction(points: Sequence[CalibrationPoint] | None = None) -> float:
    """Fraction of DRAM bandwidth implied by the measured compress point."""
    pts = load_points() if points is None else points
    (point,) = [p for p in pts if p.role == "overhead"]
    assert point.weight_mib is not None and point.time_us is not None
    bandwidth = get_gpu(point.gpu).memory_bandwidth_gb_s.value * 1e9
    return point.weight_mib * 2**20 / (point.time_us * 1e-6 * bandwidth)


@dataclass(frozen=True)
class Prediction:
    """Model times of a point's workload (seconds) and their ratio."""

    dense_s: float
    sparse_s: float

    @property
    def speedup(self) -> float:
        return self.dense_s / self.sparse_s


def predict_point(point: CalibrationPoint, parameters: GemmParameters | None = None) -> Prediction:
    """Model dense and sparse time of a point's GEMM list (sparse adds compress passes)."""
    params = parameters if parameters is not None else default_parameters()
    dense = sparse = 0.0
    for g in point.gemms:
        d = gemm_time(point.gpu, g.m, g.n, g.k, dtype=point.dtype, parameters=params).time_s
        dense += g.count * d
        if g.sparse:
            sparse += (
                g.count
                * gemm_time(
                    point.gpu, g.m, g.n, g.k, dtype=point.dtype, sparse="2:4", parameters=params
                ).time_s
            )
        else:
            sparse += g.count * d
    if point.compress_weight_mib:
        sparse += compress_time_s(point.gpu, point.compress_weight_mib * 2**20, params)
    return Prediction(dense, sparse)


def _sweep_max_speedup(point: CalibrationPoint, params: GemmParameters) -> float:
    best = 0.0
    for m in point.sweep:
        for n in point.sweep:
            for k in point.sweep:
                d = gemm_time(point.gpu, m, n, k, dtype=point.dtype, parameters=params)
                s = gemm_time(
                    point.gpu, m, n, k, dtype=point.dtype, sparse="2:4", parameters=params
                )
                best = max(best, d.time_s / s.time_s)
    return best


def _token_range(point: CalibrationPoint, params: GemmParameters) -> tuple[float, float]:
    """Min and max modelled speedup of ``point.gemms`` with ``n`` set to each token count."""
    speedups = []
    for tokens in point.range_tokens:
        scaled = replace(point, gemms=tuple(replace(g, n=tokens) for g in point.gemms))
        speedups.append(predict_point(scaled, params).speedup)
    return min(speedups), max(speedups)


# --------------------------------------------------------------------------- fitting
def _loss(points: Sequence[CalibrationPoint], params: GemmParameters) -> float:
    total = 0.0
    for point in points:
        pred = predict_point(point, params)
        if point.dense_us is not None and point.sparse_us is not None:
            total += math.log(pred.dense_s / (point.dense_us * 1e-6)) ** 2
            total += math.log(pred.sparse_s / (point.sparse_us * 1e-6)) ** 2
        else:
            measured = point.measured_speedup
            assert measured is not None
            total += math.log(pred.speedup / measured) ** 2
    return total


def _params_from(x: dict[str, float], base: GemmParameters) -> GemmParameters:
    dense_c = x["dense_compute_efficiency"]
    return base.replace(
        dense_compute_efficiency=dense_c,
        sparse_compute_efficiency=min(dense_c, dense_c * x["sparse_ratio"]),
        sparse_memory_efficiency=min(
            base.dense_memory_efficiency, base.dense_memory_efficiency * x["sparse_memory_ratio"]
        ),
    )


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


def fit_parameters(
    points: Sequence[CalibrationPoint], *, sweeps: int = 4, iterations: int = 30
) -> GemmParameters:
    """Fit :data:`FITTED` on ``points`` (the others fixed at :data:`ASSUMED`).

    Parameters
    ----------
    points : sequence of CalibrationPoint
        Quantitative points (with GEMMs and a measured speedup or times).
    sweeps, iterations : int
        Coordinate-descent sweeps and golden-section steps per coordinate.

    Returns
    -------
    GemmParameters
        With ``provenance`` naming the points used.

    Notes
    -----
    The loss is piecewise smooth (tile choice switches), so golden-section
    search finds a local optimum; the start (0.7, 0.7, 0.5) is fixed, so the
    result is deterministic. Cost: ``sweeps * 3 * (iterations + 2)`` loss
    evaluations.
    """
    usable = [p for p in points if p.gemms and p.measured_speedup is not None]
    if not usable:
        raise ValueError("points must contain at least one point with GEMMs and a measurement")
    base = GemmParameters(
        **{name: value for name, (value, _) in ASSUMED.items()},  # type: ignore[arg-type]
        compress_bandwidth_fraction=derive_compress_fraction(),
    )
    x = {"dense_compute_efficiency": 0.7, "sparse_ratio": 0.7, "sparse_memory_ratio": 0.5}
    for _ in range(sweeps):
        for name, (lo, hi) in _BOUNDS.items():

            def loss_at(value: float, name: str = name) -> float:
                return _loss(usable, _params_from({**x, name: value}, base))

            x[name] = _golden(loss_at, lo, hi, iterations)
    fitted = _params_from(x, base)
    # Round the stored values so the data file and a refit agree digit for digit.
    fitted = fitted.replace(
        **{name: round(getattr(fitted, name), 4) for name in FITTED},
        compress_bandwidth_fraction=round(base.compress_bandwidth_fraction, 6),
    )
    return fitted.replace(
        provenance="fitted by nmsim calibrate on: " + ", ".join(p.id for p in usable)
    )


# --------------------------------------------------------------------------- report
@dataclass(frozen=True)
class PointResult:
    """Measured vs predicted for one point (errors are relative, in percent)."""

    id: str
    role: str
    gpu: str
    measured_speedup: float | None
    predicted_speedup: float | None
    speedup_error_pct: float | None
    measured_dense_us: float | None = None
    predicted_dense_us: float | None = None
    measured_sparse_us: float | None = None
    predicted_sparse_us: float | None = None
    loo_predicted_speedup: float | None = None
    loo_error_pct: float | None = None
    passed: bool | None = None
    detail: str = ""
    source: str = ""


@dataclass(frozen=True)
class CalibrationReport:
    """Result of :func:`calibrate`."""

    parameters: GemmParameters
    rows: tuple[PointResult, ...]
    held_out_median_error_pct: float | None
    held_out_max_error_pct: float | None
    loo_median_error_pct: float | None
    loo_max_error_pct: float | None
    train_median_error_pct: float | None
    time_median_error_pct: float | None = None
    time_max_error_pct: float | None = None
    warnings: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON form."""
        from dataclasses import asdict

        out = asdict(self)
        out["parameters"] = {
            key: value
            for key, value in asdict(self.parameters).items()
            if key not in ("tiles", "split_k")
        }
        return out


def _error_pct(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured * 100.0


def _role_fields(
    p: CalibrationPoint, params: GemmParameters, loo_pred: float | None
) -> dict[str, Any]:
    """The fields of ``p``'s :class:`PointResult` that depend on its role.

    ``train``/``test``: measured vs predicted speedup and times (and the leave-one-out
    prediction ``loo_pred``); ``check``: the predicted speedup against its bound;
    ``overhead``: the compression time; other roles: the measured speedup and the reason.
    """
    measured = p.measured_speedup
    if p.role in ("train", "test"):
        assert measured is not None
        pred = predict_point(p, params)
        return {
            "measured_speedup": measured,
            "predicted_speedup": pred.speedup,
            "speedup_error_pct": _error_pct(pred.speedup, measured),
            "measured_dense_us": p.dense_us,
            "predicted_dense_us": pred.dense_s * 1e6,
            "measured_sparse_us": p.sparse_us,
            "predicted_sparse_us": pred.sparse_s * 1e6,
            "loo_predicted_speedup": loo_pred,
            "loo_error_pct": None if loo_pred is None else _error_pct(loo_pred, measured),
            "detail": p.workload,
        }
    unmeasured = {"measured_speedup": None, "predicted_speedup": None, "speedup_error_pct": None}
    if p.role == "check":
        assert p.max_speedup is not None
        value = _sweep_max_speedup(p, params) if p.sweep else predict_point(p, params).speedup
        return {
            **unmeasured,
            "predicted_speedup": value,
            "passed": value <= p.max_speedup,
            "detail": p.check,
        }
    if p.role == "overhead":
        assert p.weight_mib is not None and p.time_us is not None
        predicted = compress_time_s(p.gpu, p.weight_mib * 2**20, params) * 1e6
        return {
            **unmeasured,
            "detail": f"compress {p.weight_mib} MiB: measured {p.time_us} us, "
            f"model {predicted:.1f} us (defines compress_bandwidth_fraction)",
        }
    detail = p.reason
    if p.range_tokens and p.gemms:
        low, high = _token_range(p, params)
        detail += f" | model range {low:.2f}-{high:.2f}x over tokens {p.range_tokens}"
    return {**unmeasured, "measured_speedup": measured, "detail": detail}


def calibrate(
    points: Sequence[CalibrationPoint] | None = None, *, leave_one_out: bool = True
) -> CalibrationReport:
    """Fit on the ``train`` points and report every point.

    Parameters
    ----------
    points : sequence of CalibrationPoint, optional
        Default: the shipped data file.
    leave_one_out : bool
        Also refit once per quantitative point without it and report its
        prediction error (the honest error estimate with this little data).

    Returns
    -------
    CalibrationReport
        ``held_out_*``: relative speedup error over ``test`` points;
        ``loo_*``: over every quantitative point, each predicted by a fit
        that did not see it.
    """
    pts = tuple(load_points() if points is None else points)
    quantitative = [p for p in pts if p.role in ("train", "test")]
    train = [p for p in quantitative if p.role == "train"]
    params = fit_parameters(train)

    loo: dict[str, float] = {}
    if leave_one_out and len(quantitative) > 1:
        for point in quantitative:
            others = [p for p in quantitative if p.id != point.id]
            loo[point.id] = predict_point(point, fit_parameters(others)).speedup

    rows = [
        PointResult(
            id=p.id,
            role=p.role,
            gpu=p.gpu,
            source=p.source,
            **_role_fields(p, params, loo.get(p.id)),
        )
        for p in pts
    ]

    def summary(values: list[float]) -> tuple[float | None, float | None]:
        return (statistics.median(values), max(values)) if values else (None, None)

    held = [
        r.speedup_error_pct for r in rows if r.role == "test" and r.speedup_error_pct is not None
    ]
    loo_errors = [r.loo_error_pct for r in rows if r.loo_error_pct is not None]
    train_errors = [
        r.speedup_error_pct for r in rows if r.role == "train" and r.speedup_error_pct is not None
    ]
    time_errors = [
        _error_pct(predicted, measured)
        for r in rows
        if r.role in ("train", "test")
        for predicted, measured in (
            (r.predicted_dense_us, r.measured_dense_us),
            (r.predicted_sparse_us, r.measured_sparse_us),
        )
        if predicted is not None and measured is not None
    ]
    time_median, time_max = summary(time_errors)
    held_median, held_max = summary(held)
    loo_median, loo_max = summary(loo_errors)
    warnings = [
        f"only {len(held)} held-out point(s) and {len(quantitative)} quantitative points in all: "
        "the error figures are indicative, not a validation",
    ]
    architectures = {get_gpu(p.gpu).architecture for p in quantitative}
    for arch in ("Hopper", "Blackwell", "Ada", "Ampere"):
        count = sum(get_gpu(p.gpu).architecture == arch for p in quantitative)
        if arch not in architectures:
            warnings.append(
                f"no quantitative {arch} point: {arch} estimates are extrapolated "
                "from the fitted efficiencies and the datasheet peaks"
            )
        elif count < 2:
            warnings.append(
                f"{arch}: a single point ({count}); its efficiencies are not validated separately"
            )
    bad_checks = [r.id for r in rows if r.passed is False]
    if bad_checks:
        warnings.append("failed qualitative checks: " + ", ".join(bad_checks))
    return CalibrationReport(
        parameters=params,
        rows=tuple(rows),
        held_out_median_error_pct=held_median,
        held_out_max_error_pct=held_max,
        loo_median_error_pct=loo_median,
        loo_max_error_pct=loo_max,
        train_median_error_pct=statistics.median(train_errors) if train_errors else None,
        time_median_error_pct=time_median,
        time_max_error_pct=time_max,
        warnings=tuple(warnings),
    )


def parameters_toml(params: GemmParameters) -> str:
    """Text of ``nmsim/data/gemm_parameters.toml`` for ``params`` (``calibrate --write``)."""
    lines = [
        "# Written by `nmsim calibrate --write` (nmsim/calibration.py); do not edit by hand.",
        "# FITTED values come from the train points of calibration.toml; the others are",
        "# stated assumptions (see nmsim.calibration.ASSUMED) or derived from a measured point.",
        f'provenance = "{params.provenance}"',
        "",
        "[parameters]",
    ]
    for name in (*FITTED, *ASSUMED, "compress_bandwidth_fraction"):
        lines.append(f"{name} = {getattr(params, name)!r}")
    return "\n".join(lines) + "\n"
