"""Time model of one dense or 2:4-sparse tensor-core GEMM on a named GPU.

``C[m, n] = A[m, k] @ B[k, n]``. The sparse operand is always **A**, compressed
along the reduction axis ``k``, because that is the only operand the sparse MMA
instructions accept (PTX ISA, "Sparse matrix storage"). For a PyTorch linear
layer ``Y = X @ W.T`` with a sparse weight, pass ``m = out_features``,
``n = tokens``, ``k = in_features`` (the library computes ``(W @ X.T).T``).

The model (``specs/gemm_model.md``) is a roofline per tile configuration,
minimised over a small set of tile shapes and split-K factors as a library
heuristic would:

.. math::

    t = \\max\\left(\\frac{\\lceil u / S \\rceil \\, 2 T_m T_n \\lceil k/s \\rceil}
                        {(P/S)\\,\\eta_c},\\;
                   \\frac{\\text{bytes}}{B\\,\\eta_m}\\right) + t_0

with ``u = ceil(m/T_m) ceil(n/T_n) s`` work units, ``S`` SMs, peak ``P``
(dense or dense-equivalent sparse), bandwidth ``B``, efficiencies ``eta`` and
per-call overhead ``t_0``. Every factor is a named field of
:class:`GemmParameters`; their default values are fitted by ``nmsim calibrate``
and stored in ``nmsim/data/gemm_parameters.toml``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from nmref._validation import check_positive_integer
from nmref.patterns import Pattern, parse_pattern
from nmsim.perf.gemm_parameters import (
    GemmParameters,
    architecture_key,
    default_parameter_table,
    default_parameters,
)
from nmsim.perf.hardware import DTYPE_BYTES, GPU, Peak, get_gpu, normalize_dtype

__all__ = [
    "SPARSE_LIBRARIES",
    "GemmEstimate",
    "GemmParameters",
    "default_library",
    "default_parameters",
    "gemm_time",
    "hardware_compatible",
    "max_kept_per_hardware_group",
    "metadata_bits_per_kept",
]

#: Bytes per element of the output matrix C, by dtype name.
OUTPUT_BYTES: dict[str, float] = {"fp16": 2, "bf16": 2, "fp32": 4, "int32": 4, "int8": 1}

#: Output dtype when the caller does not name one (what cuBLAS/cuSPARSELt users get by default).
DEFAULT_OUTPUT: dict[str, str] = {
    "fp16": "fp16",
    "bf16": "bf16",
    "tf32": "fp32",
    "fp8": "bf16",
    "int8": "int32",
}

Bound = Literal["compute", "memory", "latency"]

#: Sparse kernel libraries the model is calibrated for.
SPARSE_LIBRARIES: tuple[str, ...] = ("cusparselt", "cutlass")


# --------------------------------------------------------------------------- patterns
def max_kept_per_hardware_group(pattern: Pattern, hardware: Pattern) -> int:
    """Worst-case nonzeros an N:M ``pattern`` can put in one aligned hardware group.

    Aligned hardware groups are ``[j*M_h, (j+1)*M_h)`` along the reduction
    axis; pattern groups are ``[g*M, (g+1)*M)``. Each pattern group may place
    its ``N`` kept entries anywhere inside itself, so a hardware window that
    overlaps a pattern group by ``o`` entries can receive ``min(N, o)`` of them.
    The answer is the maximum over windows of the sum of those terms, computed
    over one period ``lcm(M, M_h)``.

    Complexity: O(lcm(M, M_h)).

    Examples
    --------
    >>> max_kept_per_hardware_group(Pattern(1, 16), Pattern(2, 4))
    1
    >>> max_kept_per_hardware_group(Pattern(4, 8), Pattern(2, 4))
    4
    >>> max_kept_per_hardware_group(Pattern(2, 4), Pattern(1, 2))
    2
    """
    period = math.lcm(pattern.m, hardware.m)
    worst = 0
    for start in range(0, period, hardware.m):
        stop = start + hardware.m
        kept = 0
        group = start // pattern.m
        while group * pattern.m < stop:
            overlap = min(stop, (group + 1) * pattern.m) - max(start, group * pattern.m)
            kept += min(pattern.n, overlap)
            group += 1
        worst = max(worst, kept)
    return worst


def hardware_compatible(pattern: Pattern, hardware: Pattern) -> bool:
    """True when every matrix with the N:M ``pattern`` also satisfies ``hardware``.

    Such a matrix can be stored in the hardware format with explicit zeros, so
    it runs on the sparse tensor cores, but only at the hardware's speed: 1:16
    runs exactly as fast as 2:4.

    Examples
    --------
    >>> hardware_compatible(Pattern(1, 8), Pattern(2, 4))
    True
    >>> hardware_compatible(Pattern(4, 8), Pattern(2, 4))
    False
    """
    return max_kept_per_hardware_group(pattern, hardware) <= hardware.n


def metadata_bits_per_kept(dtype: str) -> int:
    """Metadata bits stored per kept value: 2 (2-bit index) for 8/16-bit, 4 for TF32.

    PTX "Sparse matrix storage": 16/8-bit types store two 2-bit indices per
    4-group; TF32 stores one 4-bit code per 2-group (``specs/formats.md``).
    """
    name = normalize_dtype(dtype)
    if name not in DTYPE_BYTES:
        raise ValueError(
            f"dtype={dtype!r} has no 2:4 (or 1:2) sparse tensor-core format; known: "
            f"{sorted(DTYPE_BYTES)}"
        )
    return 4 if name == "tf32" else 2


# --------------------------------------------------------------------------- the core
def configuration_grid(
    params: GemmParameters, sparse: bool, level: str = "kernel"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidate ``(T_m, T_n, split)`` of one path, tile-major, in the order ties keep."""
    splits = params.sparse_splits(level) if sparse else params.split_k
    tm = np.array([t[0] for t in params.tiles for _ in splits], dtype=np.float64)
    tn = np.array([t[1] for t in params.tiles for _ in splits], dtype=np.float64)
    sp = np.array([s for _ in params.tiles for s in splits], dtype=np.float64)
    return tm, tn, sp


def roofline(
    *,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    sms: np.ndarray,
    dense_flops_per_sm: np.ndarray,
    math_speed: np.ndarray,
    compute_efficiency: np.ndarray,
    dense_compute_efficiency: np.ndarray,
    a_fraction: np.ndarray,
    a_bytes: np.ndarray,
    other_bytes: np.ndarray,
    bandwidth: np.ndarray,
    memory_efficiency: np.ndarray,
    a_memory_efficiency: np.ndarray,
    tile_fixed_k: np.ndarray,
    k_step_s: np.ndarray,
    k_per_step: np.ndarray,
    overhead_s: np.ndarray,
    rate_fraction: np.ndarray,
    balanced_tile_intensity: np.ndarray,
    tm: np.ndarray,
    tn: np.ndarray,
    split: np.ndarray,
) -> dict[str, np.ndarray]:
    """The time model of ``specs/gemm_model.md`` section 4 for many GEMMs at once.

    Every row argument has shape ``(R,)``; ``tm``, ``tn``, ``split`` list the
    ``C`` candidate configurations. Returns, per row, the fastest configuration
    (first in candidate order on ties) and its terms. This one function times
    every GEMM of the package (``gemm_time`` calls it with ``R = 1``; the fit
    with the whole corpus), so the fitted model and the shipped one agree. (The
    fit's line searches repeat its expressions term by term, to keep the terms a
    parameter does not enter: ``nmsim.perf.calibration.staged._StagedPath``, tested to
    give the same bits.)

    Complexity: O(R C) arithmetic.
    """
    col = np.newaxis
    units = np.ceil(m[:, col] / tm) * np.ceil(n[:, col] / tn) * split
    waves = np.ceil(units / sms[:, col])
    intensity = tm * tn / (a_fraction[:, col] * tm + tn)
    # A tensor core issuing at a fraction of its full rate (FP32 accumulate on GeForce) needs
    # that fraction of the operand feed: the intensity that keeps it busy scales the same way.
    balanced = balanced_tile_intensity[:, col] * rate_fraction[:, col]
    feed = np.minimum(1.0, intensity / (balanced * math_speed[:, col]))
    k_split = np.ceil(k[:, col] / split)
    per_tile_flops = 2.0 * tm * tn
    main = k_split / (math_speed[:, col] * compute_efficiency[:, col] * feed)
    fixed = tile_fixed_k[:, col] / dense_compute_efficiency[:, col]
    compute = waves * per_tile_flops * (main + fixed) / dense_flops_per_sm[:, col]
    workspace = np.where(split > 1, 2.0 * 4.0 * m[:, col] * n[:, col] * split, 0.0)
    memory = a_bytes[:, col] / (bandwidth[:, col] * a_memory_efficiency[:, col]) + (
        other_bytes[:, col] + workspace
    ) / (bandwidth[:, col] * memory_efficiency[:, col])
    latency = waves * np.ceil(k_split / k_per_step[:, col]) * k_step_s[:, col]
    total = np.maximum(np.maximum(compute, memory), latency) + overhead_s[:, col]
    best = np.argmin(total, axis=1)
    rows = np.arange(total.shape[0])
    return {
        "time": total[rows, best],
        "compute": compute[rows, best],
        "memory": memory[rows, best],
        "latency": latency[rows, best],
        "workspace": workspace[rows, best],
        "waves": waves[rows, best],
        "index": best,
        "min_compute": compute.min(axis=1),
    }


# --------------------------------------------------------------------------- estimate
@dataclass(frozen=True)
class GemmEstimate:
    """Structured result of :func:`gemm_time` (all times in seconds, sizes in bytes).

    ``achieved_tflops`` is dense-equivalent: ``2 m n k / time``, the number the
    vendor sparse peak is quoted in. ``nonzero_flops`` counts only products
    with a kept weight (``2 m n k * N/M``); hardware executes
    ``executed_flops`` = ``2 m n k * 1/2`` on the sparse path whatever N:M is.

    On the sparse path the estimate also carries the dense GEMM's time under
    the same settings, the ``speedup`` (dense / sparse), its prediction
    interval ``[speedup_low, speedup_high]`` from the cross-validated errors
    of comparable measured rows (``interval_basis`` says which), and a
    ``verdict`` that holds across the interval: ``faster`` (low > 1),
    ``slower`` (high < 1) or ``no gain`` (the interval contains 1).
    ``extrapolated`` is True when the corpus holds no measurement of this GPU.
    """

    gpu: str
    m: int
    n: int
    k: int
    dtype: str
    accumulate: str
    output_dtype: str
    pattern: str | None
    executed_pattern: str | None
    fallback: str | None
    library: str
    level: str
    time_s: float
    compute_time_s: float
    memory_time_s: float
    latency_time_s: float
    overhead_s: float
    bound: Bound
    dense_equivalent_flops: float
    nonzero_flops: float
    executed_flops: float
    achieved_tflops: float
    peak_tflops: float
    bytes_a_values: float
    bytes_a_metadata: float
    bytes_b: float
    bytes_c: float
    bytes_workspace: float
    bytes_total: float
    tile: tuple[int, int]
    split_k: int
    waves: int
    tile_efficiency: float
    wave_efficiency: float
    compute_efficiency: float
    memory_efficiency: float  # of the A operand stream (B and C use the dense value)
    min_compute_time_s: float = 0.0
    dense_time_s: float | None = None
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    verdict: str | None = None
    interval_basis: str | None = None
    extrapolated: bool | None = None
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON dictionary of every field."""
        out = dataclasses.asdict(self)
        out["tile"] = list(self.tile)
        out["notes"] = list(self.notes)
        return out


def default_library(dtype: str) -> str:
    """The sparse library ``torch.sparse.to_sparse_semi_structured`` uses for ``dtype``.

    PyTorch picks the cuSPARSELt subclass unless ``_FORCE_CUTLASS`` is set, and
    cuSPARSELt's subclass has no float32 (TF32) entry, so TF32 runs on CUTLASS
    (``torch/sparse/semi_structured.py``, ``_DTYPE_SHAPE_CONSTRAINTS``).
    """
    return "cutlass" if normalize_dtype(dtype) == "tf32" else "cusparselt"


def gemm_time(
    gpu: str | GPU,
    m: int,
    n: int,
    k: int,
    *,
    dtype: str = "bf16",
    sparse: str | Pattern | None = None,
    accumulate: str | None = None,
    output_dtype: str | None = None,
    incompatible: Literal["error", "dense"] = "error",
    library: str | None = None,
    level: Literal["kernel", "framework"] = "kernel",
    parameters: GemmParameters | None = None,
    b_elements: int | None = None,
    c_elements: int | None = None,
) -> GemmEstimate:
    """Estimate the time of ``C[m, n] = A[m, k] @ B[k, n]`` on ``gpu``.

    Parameters
    ----------
    gpu : str or GPU
        Database key or alias (``"h100-sxm"``); see ``nmsim gpus``.
    m, n, k : int
        GEMM sizes, each >= 1. A (``m x k``) is the operand that may be sparse.
    dtype : str
        Input dtype: ``fp16``, ``bf16``, ``tf32``, ``fp8`` or ``int8``.
    sparse : str or Pattern or None
        N:M pattern of A along ``k`` (``"2:4"``, ``"1:16"``...). None is dense.
        Patterns that fit the hardware pattern for ``dtype`` (2:4, or 1:2 for
        TF32) run on the sparse path stored as that pattern with explicit
        zeros, so they are exactly as fast as it. Others raise, or fall back to
        dense with ``incompatible="dense"``.
    accumulate : str, optional
        Accumulator dtype; default fp32 (int32 for int8).
    output_dtype : str, optional
        Dtype of C; default the input dtype (fp32 for tf32, bf16 for fp8, int32 for int8).
    incompatible : {"error", "dense"}
        What to do with a pattern the hardware cannot accelerate.
    library : {"cusparselt", "cutlass"}, optional
        The sparse kernel library; default what ``torch.sparse.to_sparse_semi_structured``
        uses (:func:`default_library`: cuSPARSELt, CUTLASS for TF32). It selects the
        calibrated sparse parameters; a dense call ignores it except for the
        speedup's dense baseline, which is the same call without ``sparse``.
    level : {"kernel", "framework"}
        ``kernel``: the kernel alone (CUDA events, profiler time). ``framework``:
        a PyTorch call timed from the host, with the per-call dispatch overheads
        (``framework_overhead_us``, and ``sparse_framework_overhead_us`` for the
        sparse tensor subclass).
    parameters : GemmParameters, optional
        Model parameters; default the calibrated table resolved for this GPU's
        architecture, ``library`` and dtype class
        (:func:`nmsim.perf.gemm_parameters.default_parameters`).
    b_elements, c_elements : int, optional
        Elements of B / C actually moved through DRAM when they differ from
        ``k n`` / ``m n``: an implicit-GEMM convolution reads its activation
        once (``C_in H W``), not the ``k x n`` im2col matrix.

    Returns
    -------
    GemmEstimate
        On the sparse path with the dense time, the speedup, its prediction
        interval and verdict (see :class:`GemmEstimate`).

    Raises
    ------
    ValueError
        Unknown GPU; dtype/accumulate pair the GPU lacks; non-positive size;
        ``k`` not divisible by the pattern's group size; a pattern the
        hardware cannot accelerate with ``incompatible="error"``; an unknown
        ``library`` or ``level``.
    TypeError
        Sizes that are not integers; ``parameters`` that are not GemmParameters.

    Notes
    -----
    Complexity O(#tiles x #split_k). Bytes assume ideal reuse (each operand
    read once from DRAM, C written once); L2 re-reads are folded into
    ``*_memory_efficiency``. The sparse A operand costs ``1/2`` of its values
    plus ``metadata_bits_per_kept`` bits per kept value (0.5625 of dense bytes
    for 16-bit types). See ``specs/gemm_model.md``.

    Examples
    --------
    >>> dense = gemm_time("a100", 4096, 4096, 4096, dtype="fp16")
    >>> sparse = gemm_time("a100", 4096, 4096, 4096, dtype="fp16", sparse="2:4")
    >>> 1.0 < dense.time_s / sparse.time_s < 2.0
    True
    >>> sparse.speedup_low <= sparse.speedup <= sparse.speedup_high
    True
    """
    # One step per section of specs/gemm_model.md; each helper's docstring names its section.
    call = _validated_call(
        gpu,
        m,
        n,
        k,
        dtype=dtype,
        accumulate=accumulate,
        output_dtype=output_dtype,
        incompatible=incompatible,
        library=library,
        level=level,
        parameters=parameters,
    )
    pattern = parse_pattern(sparse) if sparse is not None else None
    executed, fallback, notes = _executed_pattern(call, pattern, incompatible)  # section 2
    b_bytes, c_bytes = _b_and_c_bytes(call, b_elements, c_elements)  # section 3
    chosen = _fastest_configuration(call, executed, b_bytes + c_bytes)  # section 4
    speed: dict[str, object] = {}
    if executed is not None:  # section 8: the same call dense, and the speedup's interval
        speed, interval_notes = _speedup_against_dense(call, chosen, b_bytes + c_bytes)
        notes += interval_notes
    return _estimate(
        call,
        pattern=pattern,
        executed=executed,
        fallback=fallback,
        chosen=chosen,
        b_bytes=b_bytes,
        c_bytes=c_bytes,
        speed=speed,
        notes=notes,
    )


# --------------------------------------------------------------------------- the model, by section
@dataclass(frozen=True)
class _GemmCall:
    """One validated :func:`gemm_time` call: what every section of the model reads.

    ``dtype`` and ``output`` are canonical names; ``peak`` is the GPU's tensor-core
    row for the ``(dtype, accumulate)`` pair; ``params`` the resolved parameters.
    """

    gpu: GPU
    m: int
    n: int
    k: int
    dtype: str
    peak: Peak
    output: str
    library: str
    level: str
    params: GemmParameters


def _validated_call(
    gpu: str | GPU,
    m: int,
    n: int,
    k: int,
    *,
    dtype: str,
    accumulate: str | None,
    output_dtype: str | None,
    incompatible: str,
    library: str | None,
    level: str,
    parameters: GemmParameters | None,
) -> _GemmCall:
    """Check :func:`gemm_time`'s arguments (in this order) and resolve the defaults.

    ``specs/gemm_model.md`` section 1 (lookup: an unknown GPU, a dtype/accumulate pair
    the GPU lacks), section 3 (the default output dtype) and section 4.1 (the default
    ``library`` and the calibrated parameters of the GPU's architecture, library and
    dtype class).
    """
    gpu_obj = get_gpu(gpu)
    m = check_positive_integer(m, "m")
    n = check_positive_integer(n, "n")
    k = check_positive_integer(k, "k")
    dtype = normalize_dtype(dtype)
    peak = gpu_obj.peak(dtype, accumulate)
    output = normalize_dtype(output_dtype) if output_dtype is not None else DEFAULT_OUTPUT[dtype]
    if output not in OUTPUT_BYTES:
        raise ValueError(f"output_dtype={output!r} must be one of {sorted(OUTPUT_BYTES)}")
    if incompatible not in ("error", "dense"):
        raise ValueError(f"incompatible={incompatible!r} must be 'error' or 'dense'")
    if level not in ("kernel", "framework"):
        raise ValueError(f"level={level!r} must be 'kernel' or 'framework'")
    library = default_library(dtype) if library is None else library
    if library not in SPARSE_LIBRARIES:
        raise ValueError(f"library={library!r} must be one of {list(SPARSE_LIBRARIES)}")
    if parameters is None:
        params = default_parameter_table().resolve(architecture_key(gpu_obj), library, dtype)
    elif isinstance(parameters, GemmParameters):
        params = parameters
    else:
        raise TypeError(
            f"parameters={parameters!r} must be a GemmParameters (or None for the calibrated ones)"
        )
    return _GemmCall(gpu_obj, m, n, k, dtype, peak, output, library, level, params)


def _executed_pattern(
    call: _GemmCall, pattern: Pattern | None, incompatible: str
) -> tuple[Pattern | None, str | None, list[str]]:
    """The pattern the hardware executes for a requested one: ``(executed, fallback, notes)``.

    ``specs/gemm_model.md`` section 2: a pattern compatible with the hardware pattern
    ``Nh:Mh`` of the dtype runs as ``Nh:Mh`` (a note says when extra sparsity is not
    exploited); an incompatible one raises, or runs dense with ``incompatible="dense"``
    (``fallback="dense"`` and a note). ``k`` must be a multiple of both group sizes.
    ``executed`` is None on the dense path.
    """
    notes: list[str] = []
    if pattern is None:
        return None, None, notes
    hardware = call.peak.sparse_pattern
    k = call.k
    if k % pattern.m or k % hardware.m:
        raise ValueError(
            f"k={k} must be divisible by the pattern group size {pattern.m} "
            f"(and the hardware group {hardware.m}); N:M groups run along k"
        )
    if hardware_compatible(pattern, hardware):
        if pattern.density < hardware.density:
            notes.append(
                f"{pattern} is stored as {hardware} with explicit zeros: the hardware "
                f"skips only {hardware}, so the extra sparsity is not exploited"
            )
        return hardware, None, notes
    if incompatible == "dense":
        notes.append(
            f"{pattern} can put {max_kept_per_hardware_group(pattern, hardware)} nonzeros "
            f"in an aligned group of {hardware.m}; {call.gpu.key} {call.dtype} accelerates only "
            f"{hardware}: modelled as a dense GEMM"
        )
        return None, "dense", notes
    raise ValueError(
        f"sparse={str(pattern)!r} is not accelerated by {call.gpu.key} for "
        f"dtype={call.dtype!r}: the sparse tensor cores need <= {hardware.n} nonzeros in "
        f"every aligned group of {hardware.m}, and {pattern} allows "
        f"{max_kept_per_hardware_group(pattern, hardware)}; prune to a compatible "
        f"pattern (e.g. {hardware}) or pass incompatible='dense'"
    )


def _b_and_c_bytes(
    call: _GemmCall, b_elements: int | None, c_elements: int | None
) -> tuple[float, float]:
    """Bytes of B read and C written, each once (``specs/gemm_model.md`` section 3).

    B is ``k n`` input elements and C ``m n`` output elements, unless ``b_elements`` /
    ``c_elements`` give the counts an implicit-GEMM convolution really moves.
    """
    element = DTYPE_BYTES[call.dtype]
    b_count = (
        call.k * call.n if b_elements is None else check_positive_integer(b_elements, "b_elements")
    )
    c_count = (
        call.m * call.n if c_elements is None else check_positive_integer(c_elements, "c_elements")
    )
    return b_count * element, c_count * OUTPUT_BYTES[call.output]


def _a_operand_bytes(call: _GemmCall, path: Pattern | None) -> tuple[float, float]:
    """Bytes of A's values and of its metadata on one path (``specs/gemm_model.md`` section 3).

    Dense: ``m k s`` and no metadata. Sparse (the executed hardware pattern): the kept
    values ``m k (Nh/Mh) s`` plus :func:`metadata_bits_per_kept` bits per kept value.
    """
    element = DTYPE_BYTES[call.dtype]
    if path is None:
        return call.m * call.k * element, 0.0
    kept = call.m * call.k * path.density
    return kept * element, kept * metadata_bits_per_kept(call.dtype) / 8


def _path_peak_tflops(peak: Peak, path: Pattern | None) -> float:
    """The peak one path runs at (``specs/gemm_model.md`` section 1, the ``sparse_tflops`` item).

    A dense GEMM runs at the dense peak. Vendor tables round dense and sparse peaks
    independently (L40S 362 / 733); the sparse tensor cores run exactly 2x the dense
    math rate, so the sparse peak is capped there.
    """
    if path is None:
        return peak.dense_tflops
    return min(peak.sparse_tflops, 2.0 * peak.dense_tflops)


def _call_overhead_us(params: GemmParameters, sparse_path: bool, level: str) -> float:
    """Fixed microseconds of one call (``specs/gemm_model.md`` section 4, ``overhead``).

    The kernel launch (plus the sparse set-up), and at ``level="framework"`` the host
    dispatch (plus the ``torch.sparse`` subclass's).
    """
    overhead_us = params.launch_overhead_us + (
        params.sparse_extra_overhead_us if sparse_path else 0.0
    )
    if level == "framework":
        overhead_us += params.framework_overhead_us + (
            params.sparse_framework_overhead_us if sparse_path else 0.0
        )
    return overhead_us


def rate_fraction(gpu: GPU, dtype: str, dense_tflops: float) -> float:
    """The dense peak of this accumulate over the GPU's fastest peak for the input dtype.

    1 on data-centre parts; 1/2 for FP32 accumulation on GeForce parts, whose tensor
    cores issue FP16-accumulate MMAs at twice the rate (GA102/Ada whitepapers).
    ``specs/gemm_model.md`` section 4, the ``balanced`` line (``r``).
    """
    fastest = max(p.dense_tflops for p in gpu.peaks if p.input == dtype)
    return dense_tflops / fastest


def _path_inputs(
    call: _GemmCall,
    path: Pattern | None,
    *,
    peak_path: float,
    a_values: float,
    a_metadata: float,
    other_bytes: float,
) -> dict[str, np.ndarray]:
    """The row arguments of :func:`roofline` for one path of one call (``R = 1``).

    ``specs/gemm_model.md`` section 4: the symbols of the formula, each a one-element
    array (the fit passes the same names with one row per corpus row).
    """
    sparse_path = path is not None
    gpu_obj, params, dtype = call.gpu, call.params, call.dtype
    m, k = call.m, call.k
    peak_dense = call.peak.dense_tflops
    sms = int(gpu_obj.sms.value)
    element = DTYPE_BYTES[dtype]
    eff = params.sparse_compute_efficiency if sparse_path else params.dense_compute_efficiency
    a_mem = params.sparse_memory_efficiency if sparse_path else params.dense_memory_efficiency
    overhead_us = _call_overhead_us(params, sparse_path, call.level)
    k_step_ns = params.sparse_k_step_ns if sparse_path else params.dense_k_step_ns
    dense_k_per_step = params.k_step_bytes / element
    values = {
        "m": m,
        "n": call.n,
        "k": k,
        "sms": sms,
        "dense_flops_per_sm": peak_dense * 1e12 / sms,
        "math_speed": peak_path / peak_dense,
        "compute_efficiency": eff,
        "dense_compute_efficiency": params.dense_compute_efficiency,
        "a_fraction": (a_values + a_metadata) / (m * k * element),
        "a_bytes": a_values + a_metadata,
        "other_bytes": other_bytes,
        "bandwidth": gpu_obj.memory_bandwidth_gb_s.value * 1e9,
        "memory_efficiency": params.dense_memory_efficiency,
        "a_memory_efficiency": a_mem,
        "tile_fixed_k": params.tile_fixed_k,
        "k_step_s": k_step_ns * 1e-9,
        # a sparse step walks twice the logical depth: its k-tile holds half the values
        "k_per_step": dense_k_per_step * (1.0 / path.density if sparse_path else 1.0),
        "overhead_s": overhead_us * 1e-6,
        "rate_fraction": (
            rate_fraction(gpu_obj, dtype, peak_dense) if params.feed_follows_issue_rate else 1.0
        ),
        "balanced_tile_intensity": params.balanced_tile_intensity,
    }
    return {name: np.array([float(value)]) for name, value in values.items()}


@dataclass(frozen=True)
class _Configuration:
    """The fastest configuration of one path of one call, and its roofline terms.

    Times in seconds, ``workspace`` in bytes (``specs/gemm_model.md`` sections 3-4);
    ``min_compute_s`` is the smallest compute term over every configuration.
    """

    time_s: float
    compute_s: float
    memory_s: float
    latency_s: float
    overhead_s: float
    min_compute_s: float
    workspace: float
    tile: tuple[int, int]
    split_k: int
    waves: int
    a_values: float
    a_metadata: float
    peak_tflops: float


def _fastest_configuration(
    call: _GemmCall, path: Pattern | None, other_bytes: float
) -> _Configuration:
    """The autotuner's choice on one path (``specs/gemm_model.md`` section 4, "Time").

    ``path`` is the executed hardware pattern, or None for the dense path;
    ``other_bytes`` the bytes of B and C. The tiles and split-K factors of the path
    (:func:`configuration_grid`) are timed by :func:`roofline`, which keeps the fastest.
    """
    a_values, a_metadata = _a_operand_bytes(call, path)
    peak_path = _path_peak_tflops(call.peak, path)
    inputs = _path_inputs(
        call,
        path,
        peak_path=peak_path,
        a_values=a_values,
        a_metadata=a_metadata,
        other_bytes=other_bytes,
    )
    tm, tn, sp = configuration_grid(call.params, sparse=path is not None, level=call.level)
    result = roofline(**inputs, tm=tm, tn=tn, split=sp)
    config = int(result["index"][0])
    return _Configuration(
        time_s=float(result["time"][0]),
        compute_s=float(result["compute"][0]),
        memory_s=float(result["memory"][0]),
        latency_s=float(result["latency"][0]),
        overhead_s=float(inputs["overhead_s"][0]),
        min_compute_s=float(result["min_compute"][0]),
        workspace=float(result["workspace"][0]),
        tile=(int(tm[config]), int(tn[config])),
        split_k=int(sp[config]),
        waves=int(result["waves"][0]),
        a_values=a_values,
        a_metadata=a_metadata,
        peak_tflops=peak_path,
    )


def _bound(chosen: _Configuration) -> Bound:
    """What limits the chosen configuration (``specs/gemm_model.md`` section 4, after the formula).

    ``latency`` when the overhead or the k-step floor is at least the larger of compute
    and memory, else the larger of those two (``compute`` on a tie).
    """
    compute, memory, latency = chosen.compute_s, chosen.memory_s, chosen.latency_s
    if chosen.overhead_s >= max(compute, memory, latency) or latency >= max(compute, memory):
        return "latency"
    return "compute" if compute >= memory else "memory"


def _speedup_against_dense(
    call: _GemmCall, chosen: _Configuration, other_bytes: float
) -> tuple[dict[str, object], list[str]]:
    """The sparse call's speedup over the same call dense, its interval and verdict.

    ``specs/gemm_model.md`` section 8: the interval comes from the cross-validated errors
    of comparable measured rows (:func:`nmsim.perf.intervals.speedup_interval`). Returns
    the :class:`GemmEstimate` fields and the note an extrapolated interval adds.
    """
    from nmsim.perf.intervals import speedup_interval

    dense_time = _fastest_configuration(call, None, other_bytes).time_s
    ratio = dense_time / chosen.time_s
    interval = speedup_interval(call.gpu, n=call.n, speedup=ratio, level=call.level)
    notes = []
    if interval.extrapolated:
        notes.append(
            "the speedup is extrapolated beyond the measured corpus and its interval "
            f"widened ({interval.basis.split('extrapolated: ', 1)[-1].split('; ')[0]})"
        )
    fields = {
        "dense_time_s": dense_time,
        "speedup": ratio,
        "speedup_low": interval.low,
        "speedup_high": interval.high,
        "verdict": interval.verdict,
        "interval_basis": interval.basis,
        "extrapolated": interval.extrapolated,
    }
    return fields, notes


def _estimate(
    call: _GemmCall,
    *,
    pattern: Pattern | None,
    executed: Pattern | None,
    fallback: str | None,
    chosen: _Configuration,
    b_bytes: float,
    c_bytes: float,
    speed: dict[str, object],
    notes: list[str],
) -> GemmEstimate:
    """The :class:`GemmEstimate` of a call: the chosen terms and the derived figures.

    ``specs/gemm_model.md`` section 4 (``achieved_tflops``, ``nonzero_flops``,
    ``executed_flops``); the tile and wave efficiencies are the shares of the padded
    tiles and of the last wave's SMs that do useful work.
    """
    m, n, k = call.m, call.n, call.k
    params, sparse_path = call.params, executed is not None
    tile, split, waves = chosen.tile, chosen.split_k, chosen.waves
    dense_flops = 2.0 * m * n * k
    tiles_mn = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    a_values, a_metadata, workspace = chosen.a_values, chosen.a_metadata, chosen.workspace
    return GemmEstimate(
        gpu=call.gpu.key,
        m=m,
        n=n,
        k=k,
        dtype=call.dtype,
        accumulate=call.peak.accumulate,
        output_dtype=call.output,
        pattern=str(pattern) if pattern is not None else None,
        executed_pattern=str(executed) if executed is not None else None,
        fallback=fallback,
        library=call.library,
        level=call.level,
        time_s=chosen.time_s,
        compute_time_s=chosen.compute_s,
        memory_time_s=chosen.memory_s,
        latency_time_s=chosen.latency_s,
        overhead_s=chosen.overhead_s,
        bound=_bound(chosen),
        dense_equivalent_flops=dense_flops,
        nonzero_flops=dense_flops * (pattern.density if pattern is not None else 1.0),
        executed_flops=dense_flops * (executed.density if executed is not None else 1.0),
        achieved_tflops=dense_flops / chosen.time_s / 1e12,
        peak_tflops=chosen.peak_tflops,
        bytes_a_values=a_values,
        bytes_a_metadata=a_metadata,
        bytes_b=b_bytes,
        bytes_c=c_bytes,
        bytes_workspace=workspace,
        bytes_total=a_values + a_metadata + b_bytes + c_bytes + workspace,
        tile=tile,
        split_k=split,
        waves=waves,
        tile_efficiency=m * n / (tiles_mn * tile[0] * tile[1]),
        wave_efficiency=tiles_mn * split / (waves * int(call.gpu.sms.value)),
        compute_efficiency=(
            params.sparse_compute_efficiency if sparse_path else params.dense_compute_efficiency
        ),
        memory_efficiency=(
            params.sparse_memory_efficiency if sparse_path else params.dense_memory_efficiency
        ),
        min_compute_time_s=chosen.min_compute_s,
        notes=tuple(notes),
        **speed,  # type: ignore[arg-type]
    )
