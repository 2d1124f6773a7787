"""End-to-end step estimate: FLOP reduction next to modelled time reduction (Amdahl).

For each phase of a method (:func:`nmsim.perf.flops.method_phases`) every GEMM of
every layer is timed with :func:`nmsim.perf.gemm.gemm_time`, sparse where the method
sparsifies it **and** the hardware can run it (a weight operand with a
2:4-compatible pattern); the non-GEMM remainder of the step (norms,
activations, optimizer, attention softmax...) is a stated fraction of the
dense step and does not shrink; training adds a runtime prune + compress pass
per sparse weight and step (two for Bi-Mask, whose backward mask differs).
See ``specs/gemm_model.md`` §"Step estimate".

Prediction intervals: every sparse GEMM's :func:`~nmsim.perf.gemm.gemm_time` carries
an interval ``[speedup_low, speedup_high]`` on its speedup over the same dense call,
so its time lies in ``[dense_time / speedup_high, dense_time / speedup_low]``. The
step's GEMM time interval is the **sum of those lower ends and the sum of the upper
ends** (dense GEMMs, the compress pass and the non-GEMM remainder enter as point
values). The model's errors on one GPU are correlated (the same fitted efficiencies
time every GEMM of the step), so they do not average out across GEMMs: summing ends
assumes they move together, the honest and conservative choice; an interval that
assumed independent errors would be narrower than the evidence allows. The
reductions' intervals follow: ``dense / upper end`` to ``dense / lower end``, and
each gets a verdict (:func:`nmsim.perf.intervals.verdict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from nmref._validation import check_positive_integer, check_real
from nmref.patterns import Pattern, parse_pattern
from nmsim.perf.calibration import compress_time_s
from nmsim.perf.flops import (
    GEMMS,
    MethodOptions,
    inference_density,
    is_sparse_layer,
    method_phases,
    training_flops,
)
from nmsim.perf.gemm import (
    SPARSE_LIBRARIES,
    GemmParameters,
    default_library,
    gemm_time,
    hardware_compatible,
)
from nmsim.perf.hardware import DTYPE_BYTES, get_gpu, normalize_dtype
from nmsim.perf.intervals import verdict
from nmsim.perf.models import Layer, resolve_layers

__all__ = ["DEFAULT_NON_GEMM_FRACTION", "StepEstimate", "estimate_step"]

#: Share of a dense step spent outside GEMMs when the caller gives none. An
#: assumption, not a measurement: no published point isolates it
#: (none of the points in ``nmsim/data/calibration.toml`` does).
DEFAULT_NON_GEMM_FRACTION = 0.25

#: Methods whose input gradient uses a different N:M mask than the forward (Bi-Mask's
#: column-wise backward mask), so each step prunes and compresses the weight twice.
SEPARATE_BACKWARD_MASK = frozenset({"bimask"})


@dataclass(frozen=True)
class StepEstimate:
    """Result of :func:`estimate_step` (seconds per step).

    ``gemm_s_low``/``gemm_s_high`` (and ``per_gemm_s_low``/``_high``) bound the method's
    GEMM time: each sparse GEMM contributes the ends of its own prediction interval
    (``dense_time / speedup_high`` and ``dense_time / speedup_low``), every other GEMM its
    point value, and the ends are summed (errors on one GPU are correlated; see the module
    docs). ``step_s_low``/``step_s_high`` add the point non-GEMM and compress times.
    ``gemm_verdict`` and ``verdict`` hold across the GEMM-time and step-time reduction
    intervals: ``faster`` (low > 1), ``slower`` (high < 1), else ``no gain``.
    ``extrapolated`` is True when a sparse GEMM's GPU has no measurement in the corpus;
    ``interval_basis`` lists the distinct bases of the per-GEMM intervals, joined by
    ``" | "`` (None when no GEMM ran sparse: the interval is then the point value),
    ``interval_coverage`` their nominal coverage, ``sparse_gemms`` how many (phase, layer,
    GEMM) timings ran sparse.
    ``library`` and ``level`` are what every GEMM was timed with.
    """

    model: str
    method: str
    pattern: str
    gpu: str
    dtype: str
    batch: int
    mode: str
    dense_gemm_s: float
    gemm_s: float
    non_gemm_s: float
    compress_s: float
    dense_step_s: float
    step_s: float
    dense_per_gemm_s: dict[str, float]
    per_gemm_s: dict[str, float]
    flop_reduction_ideal: float
    flop_reduction_hardware: float
    library: str = ""
    level: str = "kernel"
    gemm_s_low: float = 0.0
    gemm_s_high: float = 0.0
    step_s_low: float = 0.0
    step_s_high: float = 0.0
    per_gemm_s_low: dict[str, float] = field(default_factory=dict)
    per_gemm_s_high: dict[str, float] = field(default_factory=dict)
    sparse_gemms: int = 0
    extrapolated: bool = False
    interval_basis: str | None = None
    interval_coverage: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def time_reduction(self) -> float:
        """Dense step time / method step time."""
        return self.dense_step_s / self.step_s

    @property
    def gemm_time_reduction(self) -> float:
        """Dense GEMM time / method GEMM time (no Amdahl, no compress)."""
        return self.dense_gemm_s / self.gemm_s

    @property
    def gemm_time_reduction_low(self) -> float:
        """Lower end of the GEMM-time reduction: dense GEMM time / ``gemm_s_high``."""
        return self.dense_gemm_s / self.gemm_s_high

    @property
    def gemm_time_reduction_high(self) -> float:
        """Upper end of the GEMM-time reduction: dense GEMM time / ``gemm_s_low``."""
        return self.dense_gemm_s / self.gemm_s_low

    @property
    def time_reduction_low(self) -> float:
        """Lower end of the step-time reduction: dense step time / ``step_s_high``."""
        return self.dense_step_s / self.step_s_high

    @property
    def time_reduction_high(self) -> float:
        """Upper end of the step-time reduction: dense step time / ``step_s_low``."""
        return self.dense_step_s / self.step_s_low

    @property
    def gemm_verdict(self) -> str:
        """Verdict of the GEMM-time reduction interval."""
        return verdict(self.gemm_time_reduction_low, self.gemm_time_reduction_high)

    @property
    def verdict(self) -> str:
        """Verdict of the step-time reduction interval (the one a user trains with)."""
        return verdict(self.time_reduction_low, self.time_reduction_high)

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON form."""
        from dataclasses import asdict

        return {
            **asdict(self),
            "time_reduction": self.time_reduction,
            "time_reduction_low": self.time_reduction_low,
            "time_reduction_high": self.time_reduction_high,
            "verdict": self.verdict,
            "gemm_time_reduction": self.gemm_time_reduction,
            "gemm_time_reduction_low": self.gemm_time_reduction_low,
            "gemm_time_reduction_high": self.gemm_time_reduction_high,
            "gemm_verdict": self.gemm_verdict,
            "notes": list(self.notes),
        }


class _Timed(NamedTuple):
    """One GEMM's time, the ends of its prediction interval, and what the interval rests on."""

    time_s: float
    low_s: float
    high_s: float
    sparse: bool = False
    extrapolated: bool = False
    basis: str | None = None

    def times(self, factor: float) -> _Timed:
        return self._replace(
            time_s=factor * self.time_s, low_s=factor * self.low_s, high_s=factor * self.high_s
        )


def _gemm(
    gpu: str,
    m: int,
    n: int,
    k: int,
    dtype: str,
    pattern: Pattern | None,
    params: GemmParameters | None,
    where: str,
    *,
    library: str | None = None,
    level: str = "kernel",
    b_elements: int | None = None,
    c_elements: int | None = None,
) -> _Timed:
    try:
        estimate = gemm_time(
            gpu,
            m,
            n,
            k,
            dtype=dtype,
            sparse=pattern,
            incompatible="dense",
            library=library,
            level=level,  # type: ignore[arg-type]
            parameters=params,
            b_elements=b_elements,
            c_elements=c_elements,
        )
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    t = estimate.time_s
    if estimate.speedup is None or estimate.dense_time_s is None:
        return _Timed(t, t, t)  # dense, or a pattern the hardware runs dense: a point
    return _Timed(
        t,
        estimate.dense_time_s / estimate.speedup_high,
        estimate.dense_time_s / estimate.speedup_low,
        sparse=True,
        extrapolated=bool(estimate.extrapolated),
        basis=estimate.interval_basis,
    )


def estimate_step(
    model: str | Sequence[Layer],
    method: str,
    pattern: str | Pattern,
    gpu: str,
    batch: int,
    dtype: str = "bf16",
    *,
    mode: Literal["train", "inference"] = "train",
    options: MethodOptions | None = None,
    non_gemm_fraction: float = DEFAULT_NON_GEMM_FRACTION,
    parameters: GemmParameters | None = None,
    model_name: str | None = None,
    library: str | None = None,
    level: Literal["kernel", "framework"] = "kernel",
) -> StepEstimate:
    """Estimate one training (or inference) step, dense vs ``method``.

    Parameters
    ----------
    model : str or sequence of Layer
        Built-in model name or layer table (per example).
    method, pattern : str
        See :data:`nmsim.perf.flops.METHODS`; N:M pattern (N kept of M).
    gpu : str
        Database key.
    batch : int
        Examples per step (>= 1); GEMM ``n`` is ``positions * batch``.
    dtype : str
        Tensor-core input dtype.
    mode : {"train", "inference"}
        ``inference`` times only the forward GEMMs with the deployed mask.
    options : MethodOptions, optional
    non_gemm_fraction : float
        Share of the **dense** step outside GEMMs, in [0, 1); kept unchanged
        by sparsity (Amdahl). Default :data:`DEFAULT_NON_GEMM_FRACTION` is an
        assumption.
    parameters : GemmParameters, optional
        GEMM model parameters (default: calibrated).
    library : {"cusparselt", "cutlass"}, optional
        Sparse kernel library, passed to every :func:`~nmsim.perf.gemm.gemm_time` call
        (default :func:`~nmsim.perf.gemm.default_library` of ``dtype``).
    level : {"kernel", "framework"}
        Kernel time, or PyTorch calls timed from the host (``gemm_time``'s ``level``).

    Returns
    -------
    StepEstimate
        With the GEMM-time and step-time reductions' prediction intervals (the sum of
        the sparse GEMMs' interval ends; see the module docs) and their verdicts.

    Raises
    ------
    ValueError
        Batch < 1; bad fraction, mode, model, method, pattern, library or level; a
        sparse layer whose GEMM reduction length is not a multiple of M.
    TypeError
        A batch that is not an integer.

    Notes
    -----
    The weight gradient ``dW = dY^T X`` has no weight operand: an
    output-sparse ``dW`` (BAME, all-sparse) saves FLOPs on paper but runs
    dense here. Attention products are timed as one dense GEMM with the heads
    and batch folded into ``n`` (an approximation). Grouped convolutions are
    ``count`` separate GEMMs. Complexity O(layers x phases x tile configs).
    """
    batch = check_positive_integer(batch, "batch")
    non_gemm_fraction = check_real(non_gemm_fraction, "non_gemm_fraction")
    if not 0.0 <= non_gemm_fraction < 1.0:
        raise ValueError(f"non_gemm_fraction={non_gemm_fraction} must be in [0, 1)")
    if mode not in ("train", "inference"):
        raise ValueError(f"mode={mode!r} must be 'train' or 'inference'")
    if level not in ("kernel", "framework"):
        raise ValueError(f"level={level!r} must be 'kernel' or 'framework'")
    if library is not None and library not in SPARSE_LIBRARIES:
        raise ValueError(f"library={library!r} must be one of {list(SPARSE_LIBRARIES)}")
    opts = options if options is not None else MethodOptions()
    nm = parse_pattern(pattern)
    dtype = normalize_dtype(dtype)
    gpu_obj = get_gpu(gpu)
    gpu_obj.peak(dtype)  # fail early on an unsupported dtype
    layers, name = resolve_layers(model, model_name)
    phases = method_phases(method, nm, opts)
    if mode == "inference":
        phases = (replace(phases[-1], fraction=1.0),)  # one step with the deployed mask
    hardware = gpu_obj.peak(dtype).sparse_pattern
    runs_sparse = hardware_compatible(nm, hardware)
    notes: list[str] = []
    if method not in ("dense", "inference_only") and not runs_sparse:
        notes.append(
            f"{nm} is not accelerated by {gpu_obj.key} {dtype} (needs {hardware}-"
            "compatible): sparse GEMMs are timed dense"
        )
    first_weight = next((i for i, layer in enumerate(layers) if layer.has_weight), None)
    gemms = GEMMS if mode == "train" else ("forward",)

    dense_per = dict.fromkeys(gemms, 0.0)
    method_per = dict.fromkeys(gemms, 0.0)
    method_low = dict.fromkeys(gemms, 0.0)
    method_high = dict.fromkeys(gemms, 0.0)
    bases: dict[str, None] = {}  # distinct interval bases, in first-seen order
    sparse_count = 0
    extrapolated = False
    compress = 0.0
    calls = {"library": library, "level": level}
    for phase in phases:
        for index, layer in enumerate(layers):
            rows = layer.positions * batch
            sparse_layer = (
                method != "dense"
                and is_sparse_layer(layer, opts)
                and (mode == "inference" or method != "inference_only")
            )
            inference_sparse = mode == "inference" and sparse_layer
            if sparse_layer and layer.in_features % nm.m:
                raise ValueError(
                    f"layer {layer.name!r}: reduction length {layer.in_features} "
                    f"is not a multiple of M={nm.m}"
                )
            sparse_copies = 0  # sparse GEMMs that read this weight (W and/or W^T)
            for gemm in gemms:
                if (
                    gemm == "input_grad"
                    and index == first_weight
                    and not opts.count_first_layer_input_grad
                ):
                    continue
                if not layer.has_weight:
                    shape = (layer.out_features, rows * layer.count, layer.in_features)
                    count = 1 if gemm == "forward" else (2 if gemm == "input_grad" else 0)
                    if count == 0:
                        continue
                    t = (
                        _gemm(gpu_obj.key, *shape, dtype, None, parameters, layer.name, **calls)
                        .times(count)
                        .time_s
                    )
                    dense_per[gemm] += phase.fraction * t
                    method_per[gemm] += phase.fraction * t
                    method_low[gemm] += phase.fraction * t
                    method_high[gemm] += phase.fraction * t
                    continue
                # The activation (or its gradient) is moved once, not as im2col.
                activation = layer.activation_elements * batch // layer.count
                b_el = c_el = None
                if gemm == "forward":
                    shape = (layer.out_features, rows, layer.in_features)
                    b_el = activation
                elif gemm == "input_grad":
                    shape = (layer.in_features, rows, layer.out_features)
                    c_el = activation
                else:
                    shape = (layer.out_features, layer.in_features, rows)
                    b_el = activation
                where = f"layer {layer.name!r} {gemm}"
                dense_t = (
                    _gemm(
                        gpu_obj.key,
                        *shape,
                        dtype,
                        None,
                        parameters,
                        where,
                        **calls,
                        b_elements=b_el,
                        c_elements=c_el,
                    )
                    .times(layer.count)
                    .time_s
                )
                if not sparse_layer:
                    density = 1.0
                elif mode == "inference":
                    density = inference_density(method, nm)  # the deployed mask
                else:
                    density = phase.densities.get(gemm)
                use_sparse = (
                    density < 1.0
                    and gemm != "weight_grad"
                    and (mode == "train" or inference_sparse)
                )
                if use_sparse:
                    timed = _gemm(
                        gpu_obj.key,
                        *shape,
                        dtype,
                        nm,
                        parameters,
                        where,
                        **calls,
                        b_elements=b_el,
                        c_elements=c_el,
                    ).times(layer.count)
                    sparse_copies += 1
                    if timed.sparse:
                        sparse_count += 1
                        extrapolated = extrapolated or timed.extrapolated
                        if timed.basis is not None:
                            bases.setdefault(timed.basis)
                else:
                    timed = _Timed(dense_t, dense_t, dense_t)
                dense_per[gemm] += phase.fraction * dense_t
                method_per[gemm] += phase.fraction * timed.time_s
                # Sum of interval ends (errors on one GPU are correlated; module docs).
                method_low[gemm] += phase.fraction * timed.low_s
                method_high[gemm] += phase.fraction * timed.high_s
            if mode == "train" and runs_sparse and sparse_copies:
                # One pass per mask: a mask that is N:M both ways yields W and W^T from one
                # pass (PyTorch's _sparse_semi_structured_tile; the calibration point
                # a100-mlp-train-weight24 is charged this way). A separate backward mask
                # needs its own pass.
                passes = sparse_copies if method in SEPARATE_BACKWARD_MASK else 1
                weight_bytes = (
                    layer.out_features * layer.in_features * layer.count * DTYPE_BYTES[dtype]
                )
                compress += (
                    phase.fraction * passes * compress_time_s(gpu_obj.key, weight_bytes, parameters)
                )
    if mode == "train" and any(p.sparse_weight_gradient for p in phases):
        notes.append(
            "the output-sparse weight gradient cannot use sparse tensor cores "
            "(no weight operand): timed dense"
        )
    if mode == "train" and method == "inference_only":
        notes.append("inference_only trains dense: no training speedup by construction")

    dense_gemm = sum(dense_per.values())
    method_gemm = sum(method_per.values())
    gemm_low = sum(method_low.values())
    gemm_high = sum(method_high.values())
    non_gemm = dense_gemm * non_gemm_fraction / (1.0 - non_gemm_fraction)
    if mode == "train":
        ideal = training_flops(layers, method, nm, options=opts, model_name=name)
        hard = training_flops(
            layers, method, nm, options=opts, accounting="hardware", model_name=name
        )
        flop_ideal, flop_hardware = ideal.reduction, hard.reduction
    else:
        ideal = training_flops(layers, method, nm, options=opts, model_name=name)
        hard = training_flops(
            layers, method, nm, options=opts, accounting="hardware", model_name=name
        )
        flop_ideal, flop_hardware = 1 / ideal.inference_ratio, 1 / hard.inference_ratio
    notes.append(
        f"non-GEMM share of the dense step assumed {non_gemm_fraction:.0%} (unchanged by sparsity)"
    )
    coverage = None
    if sparse_count:
        from nmsim.perf.intervals import default_interval_table

        coverage = default_interval_table().coverage
        notes.append(
            "speedup interval: the ends of the sparse GEMMs' prediction intervals are summed "
            "(errors on one GPU are correlated); dense GEMMs, compress and non-GEMM time are "
            "point values"
        )
    if extrapolated:
        notes.append(
            f"no measurement of {gpu_obj.key} is in the corpus: the speedups are extrapolated "
            "and their intervals widened"
        )
    return StepEstimate(
        model=name,
        method=method,
        pattern=str(nm),
        gpu=gpu_obj.key,
        dtype=dtype,
        batch=batch,
        mode=mode,
        dense_gemm_s=dense_gemm,
        gemm_s=method_gemm,
        non_gemm_s=non_gemm,
        compress_s=compress,
        dense_step_s=dense_gemm + non_gemm,
        step_s=method_gemm + non_gemm + compress,
        dense_per_gemm_s=dense_per,
        per_gemm_s=method_per,
        flop_reduction_ideal=flop_ideal,
        flop_reduction_hardware=flop_hardware,
        library=default_library(dtype) if library is None else library,
        level=level,
        gemm_s_low=gemm_low,
        gemm_s_high=gemm_high,
        step_s_low=gemm_low + non_gemm + compress,
        step_s_high=gemm_high + non_gemm + compress,
        per_gemm_s_low=method_low,
        per_gemm_s_high=method_high,
        sparse_gemms=sparse_count,
        extrapolated=extrapolated,
        interval_basis=" | ".join(bases) if bases else None,
        interval_coverage=coverage,
        notes=tuple(notes),
    )
