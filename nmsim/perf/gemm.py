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
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal

from nmref._validation import check_positive_integer
from nmref.patterns import Pattern, parse_pattern
from nmsim.perf.hardware import DTYPE_BYTES, GPU, get_gpu, normalize_dtype

__all__ = [
    "GemmEstimate",
    "GemmParameters",
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


# --------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class GemmParameters:
    """The named free parameters of the GEMM time model.

    Attributes
    ----------
    dense_compute_efficiency : float
        Fraction of the dense tensor-core peak a dense kernel sustains on a
        full wave of tiles (clock throttling, pipeline bubbles), in (0, 1].
    sparse_compute_efficiency : float
        Same for the sparse kernel, relative to the vendor's 2x sparse peak.
        Constrained ``<= dense_compute_efficiency`` so a sparse GEMM is never
        modelled faster than 2x the dense compute term.
    dense_memory_efficiency : float
        Fraction of DRAM bandwidth a kernel sustains on dense operands, in (0, 1].
    sparse_memory_efficiency : float
        Fraction of DRAM bandwidth at which the **compressed A operand**
        (values + metadata) streams; B, C and the split-K workspace of a sparse
        GEMM stream at ``dense_memory_efficiency``. Constrained
        ``<= dense_memory_efficiency``. Fitted from weight-bound decode GEMMs
        that run slower sparse than dense (the RTX 4090 and A100 decode points of
        ``nmsim/data/calibration.toml``).
    launch_overhead_us : float
        Fixed per-call time (launch, prologue/epilogue) of any GEMM.
    sparse_extra_overhead_us : float
        Additional fixed time of a sparse call (metadata set-up), >= 0.
    tiles : tuple of (int, int)
        Candidate output tiles ``(T_m, T_n)``; the model takes the fastest.
    split_k : tuple of int
        Candidate split-K factors, all allowed for every ``k`` (so time stays
        monotone in ``k``); partial sums cost an FP32 workspace written and
        read once, which is what makes large splits unattractive.
    balanced_tile_intensity : float
        Operand-feed limit of an SM, as the tile intensity
        ``T_m T_n / (a T_m + T_n)`` (elements; ``a`` = stored fraction of A) at
        which a tile just keeps the dense tensor cores busy. A tile below it
        runs at ``intensity / balanced`` of the rate; the sparse path needs
        twice the intensity because its math rate is doubled. Default 64 (a
        128x128 dense tile) is an assumption, not fitted (the published
        points cannot identify it); see ``specs/gemm_model.md``.
    compress_bandwidth_fraction : float
        Fraction of DRAM bandwidth a runtime prune + compress pass sustains,
        counted on the dense weight bytes (derived from a measured point; used
        by :func:`nmsim.perf.calibration.compress_time_s`).
    provenance : str
        How the values were obtained.
    """

    dense_compute_efficiency: float = 0.8
    sparse_compute_efficiency: float = 0.6
    dense_memory_efficiency: float = 0.8
    sparse_memory_efficiency: float = 0.6
    launch_overhead_us: float = 5.0
    sparse_extra_overhead_us: float = 0.0
    tiles: tuple[tuple[int, int], ...] = (
        (256, 128),
        (128, 256),
        (128, 128),
        (128, 64),
        (64, 128),
        (64, 64),
    )
    split_k: tuple[int, ...] = (1, 2, 4, 8, 16)
    balanced_tile_intensity: float = 64.0
    compress_bandwidth_fraction: float = 0.1
    provenance: str = "hand-set placeholder"

    def __post_init__(self) -> None:
        for name in (
            "dense_compute_efficiency",
            "sparse_compute_efficiency",
            "dense_memory_efficiency",
            "sparse_memory_efficiency",
        ):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name}={value} must be in (0, 1]")
        if self.sparse_compute_efficiency > self.dense_compute_efficiency:
            raise ValueError(
                f"sparse_compute_efficiency={self.sparse_compute_efficiency} must be <= "
                f"dense_compute_efficiency={self.dense_compute_efficiency} (sparse is never "
                "modelled faster than 2x the dense compute term)"
            )
        if self.sparse_memory_efficiency > self.dense_memory_efficiency:
            raise ValueError(
                f"sparse_memory_efficiency={self.sparse_memory_efficiency} must be <= "
                f"dense_memory_efficiency={self.dense_memory_efficiency}"
            )
        for name in ("launch_overhead_us", "sparse_extra_overhead_us"):
            if getattr(self, name) < 0 or not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)} must be finite and >= 0")
        if not 0.0 < self.compress_bandwidth_fraction <= 1.0:
            raise ValueError(
                f"compress_bandwidth_fraction={self.compress_bandwidth_fraction} must be in (0, 1]"
            )
        if not self.balanced_tile_intensity > 0:
            raise ValueError(f"balanced_tile_intensity={self.balanced_tile_intensity} must be > 0")
        if not self.tiles or any(t[0] < 1 or t[1] < 1 for t in self.tiles):
            raise ValueError(f"tiles={self.tiles} must be a non-empty tuple of positive pairs")
        if 1 not in self.split_k or any(s < 1 for s in self.split_k):
            raise ValueError(f"split_k={self.split_k} must contain 1 and only positive ints")

    def replace(self, **changes: object) -> GemmParameters:
        """Return a copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


#: Parameters stored in ``nmsim/data/gemm_parameters.toml``.
STORED_PARAMETERS: tuple[str, ...] = (
    "dense_compute_efficiency",
    "sparse_compute_efficiency",
    "dense_memory_efficiency",
    "sparse_memory_efficiency",
    "launch_overhead_us",
    "sparse_extra_overhead_us",
    "compress_bandwidth_fraction",
)


@cache
def default_parameters() -> GemmParameters:
    """The calibrated parameters shipped in ``nmsim/data/gemm_parameters.toml``.

    They are written by ``nmsim calibrate --write`` from the training split of
    ``nmsim/data/calibration.toml``; a test refits and compares.
    """
    text = resources.files("nmsim").joinpath("data/gemm_parameters.toml").read_text("utf-8")
    raw = tomllib.loads(text)
    values = {name: float(raw["parameters"][name]) for name in STORED_PARAMETERS}
    return GemmParameters(**values, provenance=str(raw.get("provenance", "")))  # type: ignore[arg-type]


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
    return 4 if normalize_dtype(dtype) == "tf32" else 2


# --------------------------------------------------------------------------- estimate
@dataclass(frozen=True)
class GemmEstimate:
    """Structured result of :func:`gemm_time` (all times in seconds, sizes in bytes).

    ``achieved_tflops`` is dense-equivalent: ``2 m n k / time``, the number the
    vendor sparse peak is quoted in. ``nonzero_flops`` counts only products
    with a kept weight (``2 m n k * N/M``); hardware executes
    ``executed_flops`` = ``2 m n k * 1/2`` on the sparse path whatever N:M is.
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
    time_s: float
    compute_time_s: float
    memory_time_s: float
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
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON dictionary of every field."""
        out = dataclasses.asdict(self)
        out["tile"] = list(self.tile)
        out["notes"] = list(self.notes)
        return out


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
    parameters : GemmParameters, optional
        Model parameters; default :func:`default_parameters` (calibrated).
    b_elements, c_elements : int, optional
        Elements of B / C actually moved through DRAM when they differ from
        ``k n`` / ``m n``: an implicit-GEMM convolution reads its activation
        once (``C_in H W``), not the ``k x n`` im2col matrix.

    Returns
    -------
    GemmEstimate

    Raises
    ------
    ValueError
        Unknown GPU; dtype/accumulate pair the GPU lacks; non-positive size;
        ``k`` not divisible by the pattern's group size; a pattern the
        hardware cannot accelerate with ``incompatible="error"``.
    TypeError
        Sizes that are not integers.

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
    params = parameters if parameters is not None else default_parameters()

    notes: list[str] = []
    pattern = parse_pattern(sparse) if sparse is not None else None
    executed: Pattern | None = None
    fallback: str | None = None
    if pattern is not None:
        hardware = peak.sparse_pattern
        if k % pattern.m or k % hardware.m:
            raise ValueError(
                f"k={k} must be divisible by the pattern group size {pattern.m} "
                f"(and the hardware group {hardware.m}); N:M groups run along k"
            )
        if hardware_compatible(pattern, hardware):
            executed = hardware
            if pattern.density < hardware.density:
                notes.append(
                    f"{pattern} is stored as {hardware} with explicit zeros: the hardware "
                    f"skips only {hardware}, so the extra sparsity is not exploited"
                )
        elif incompatible == "dense":
            fallback = "dense"
            notes.append(
                f"{pattern} can put {max_kept_per_hardware_group(pattern, hardware)} nonzeros "
                f"in an aligned group of {hardware.m}; {gpu_obj.key} {dtype} accelerates only "
                f"{hardware}: modelled as a dense GEMM"
            )
        else:
            raise ValueError(
                f"sparse={str(pattern)!r} is not accelerated by {gpu_obj.key} for "
                f"dtype={dtype!r}: the sparse tensor cores need <= {hardware.n} nonzeros in "
                f"every aligned group of {hardware.m}, and {pattern} allows "
                f"{max_kept_per_hardware_group(pattern, hardware)}; prune to a compatible "
                f"pattern (e.g. {hardware}) or pass incompatible='dense'"
            )

    # ----- bytes moved (ideal reuse)
    element = DTYPE_BYTES[dtype]
    if executed is None:
        a_values, a_metadata = m * k * element, 0.0
    else:
        kept = m * k * executed.density
        a_values = kept * element
        a_metadata = kept * metadata_bits_per_kept(dtype) / 8
    b_count = k * n if b_elements is None else check_positive_integer(b_elements, "b_elements")
    c_count = m * n if c_elements is None else check_positive_integer(c_elements, "c_elements")
    b_bytes = b_count * element
    c_bytes = c_count * OUTPUT_BYTES[output]

    # ----- rates
    sparse_path = executed is not None
    sms = int(gpu_obj.sms.value)
    # Vendor tables round dense and sparse peaks independently (L40S 362 / 733); the sparse
    # tensor cores run exactly 2x the dense math rate, so the sparse peak is capped at that.
    peak_tflops = (
        min(peak.sparse_tflops, 2.0 * peak.dense_tflops) if sparse_path else peak.dense_tflops
    )
    compute_eff = (
        params.sparse_compute_efficiency if sparse_path else params.dense_compute_efficiency
    )
    memory_eff = params.dense_memory_efficiency
    a_memory_eff = params.sparse_memory_efficiency if sparse_path else memory_eff
    # stored fraction of A's elements (values + metadata) and math speed vs dense
    a_fraction = (a_values + a_metadata) / (m * k * element)
    math_speed = 1.0 / executed.density if executed is not None else 1.0
    flops_per_s_per_sm = peak_tflops * 1e12 / sms * compute_eff
    bytes_per_s = gpu_obj.memory_bandwidth_gb_s.value * 1e9 * memory_eff
    overhead = (
        params.launch_overhead_us + (params.sparse_extra_overhead_us if sparse_path else 0.0)
    ) * 1e-6

    # ----- best tile configuration (what an autotuned library would pick)
    best: tuple[float, float, float, float, tuple[int, int], int, int] | None = None
    for tile in params.tiles:
        tiles_mn = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
        for split in params.split_k:
            units = tiles_mn * split
            waves = math.ceil(units / sms)
            # Operand feed: a small tile reuses each fetched element fewer times, so
            # it cannot keep the tensor cores busy (sparse math runs 2x, so needs 2x).
            intensity = tile[0] * tile[1] / (a_fraction * tile[0] + tile[1])
            feed = min(1.0, intensity / (params.balanced_tile_intensity * math_speed))
            compute = (
                waves * 2.0 * tile[0] * tile[1] * math.ceil(k / split) / (flops_per_s_per_sm * feed)
            )
            workspace = 0.0 if split == 1 else 2.0 * 4.0 * m * n * split
            memory = (a_values + a_metadata) / (bytes_per_s * a_memory_eff / memory_eff) + (
                b_bytes + c_bytes + workspace
            ) / bytes_per_s
            total = max(compute, memory) + overhead
            if best is None or total < best[0]:
                best = (total, compute, memory, workspace, tile, split, waves)
    assert best is not None  # tiles is non-empty and split 1 is always allowed
    total, compute, memory, workspace, tile, split, waves = best

    if overhead >= max(compute, memory):
        bound: Bound = "latency"
    elif compute >= memory:
        bound = "compute"
    else:
        bound = "memory"
    dense_flops = 2.0 * m * n * k
    tiles_mn = math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    return GemmEstimate(
        gpu=gpu_obj.key,
        m=m,
        n=n,
        k=k,
        dtype=dtype,
        accumulate=peak.accumulate,
        output_dtype=output,
        pattern=str(pattern) if pattern is not None else None,
        executed_pattern=str(executed) if executed is not None else None,
        fallback=fallback,
        time_s=total,
        compute_time_s=compute,
        memory_time_s=memory,
        overhead_s=overhead,
        bound=bound,
        dense_equivalent_flops=dense_flops,
        nonzero_flops=dense_flops * (pattern.density if pattern is not None else 1.0),
        executed_flops=dense_flops * (executed.density if executed is not None else 1.0),
        achieved_tflops=dense_flops / total / 1e12,
        peak_tflops=peak_tflops,
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
        wave_efficiency=tiles_mn * split / (waves * sms),
        compute_efficiency=compute_eff,
        memory_efficiency=a_memory_eff,
        notes=tuple(notes),
    )
