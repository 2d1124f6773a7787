"""Named parameters of the GEMM time model, and the table that scopes them.

:class:`GemmParameters` is one complete, validated set: what
:func:`nmsim.perf.gemm.gemm_time` needs to time one GEMM. The calibrated model
is a :class:`ParameterTable`: global values plus overrides scoped to an
architecture, a sparse kernel library and a dtype class (never finer, so no
parameter can be a per-measurement fudge factor). ``resolve`` merges them for
one call. ``specs/gemm_model.md`` section 4 gives each parameter's physical
meaning and the scope at which it is fitted.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from nmsim.perf.hardware import GPU, normalize_dtype

__all__ = [
    "DTYPE_CLASSES",
    "GemmParameters",
    "ParameterTable",
    "architecture_key",
    "default_parameter_table",
    "default_parameters",
    "dtype_class",
]

#: Dtype classes: kernels of one class share their efficiencies.
DTYPE_CLASSES: dict[str, str] = {
    "fp16": "16bit",
    "bf16": "16bit",
    "fp8": "fp8",
    "int8": "int8",
    "tf32": "tf32",
}


def architecture_key(gpu: GPU) -> str:
    """The architecture a parameter scope names: the compute capability, ``"sm_80"``.

    Finer than the marketing generation on purpose: sm_80 (A100) and sm_86
    (GA10x) are both "Ampere" but differ in tensor rate per SM and in cache,
    and sm_100 (B200) and sm_120 (GeForce Blackwell) likewise.
    """
    return "sm_" + gpu.compute_capability.replace(".", "")


def dtype_class(dtype: str) -> str:
    """The dtype class (``16bit``, ``fp8``, ``int8``, ``tf32``) of an input dtype."""
    name = normalize_dtype(dtype)
    if name not in DTYPE_CLASSES:
        raise ValueError(f"dtype={dtype!r} must be one of {sorted(DTYPE_CLASSES)}")
    return DTYPE_CLASSES[name]


_EFFICIENCIES = (
    "dense_compute_efficiency",
    "sparse_compute_efficiency",
    "dense_memory_efficiency",
    "sparse_memory_efficiency",
)
_TIMES = (
    "launch_overhead_us",
    "sparse_extra_overhead_us",
    "framework_overhead_us",
    "sparse_framework_overhead_us",
    "dense_k_step_ns",
    "sparse_k_step_ns",
)


@dataclass(frozen=True)
class GemmParameters:
    """The named parameters of the GEMM time model (one resolved set).

    Attributes
    ----------
    dense_compute_efficiency : float
        Fraction of the dense tensor-core peak a dense kernel's main loop
        sustains on a full wave of fed tiles (clocks under load, issue
        bubbles), in (0, 1].
    sparse_compute_efficiency : float
        Same for the sparse kernel, relative to the 2x sparse peak. At most
        ``dense_compute_efficiency``: metadata loads and the narrower k-tiles
        of the sparse kernels cost issue slots the dense loop does not spend,
        and it is what keeps sparse within 2x of the dense compute term.
    dense_memory_efficiency : float
        Fraction of DRAM bandwidth sustained on dense operands, in (0, 1].
    sparse_memory_efficiency : float
        Fraction of DRAM bandwidth at which the compressed A operand (values
        plus metadata) streams; at most ``dense_memory_efficiency``.
    launch_overhead_us : float
        Fixed time of any kernel call (launch, prologue) in microseconds.
    sparse_extra_overhead_us : float
        Additional fixed kernel time of a sparse call (descriptor and
        metadata set-up), >= 0.
    framework_overhead_us : float
        Per-call host time of a framework call (Python, dispatch, allocator)
        added at ``level="framework"`` to dense and sparse calls alike.
    sparse_framework_overhead_us : float
        Additional per-call host time of the sparse framework call: the
        tensor subclass's Python dispatch, padding of the dense operand and
        the output transpose copy of ``torch.sparse`` semi-structured tensors.
    tile_fixed_k : float
        Per-output-tile cost that does not shrink with sparsity (pipeline fill,
        epilogue writing C), as the k-depth of dense main loop it equals. It is
        why a sparse GEMM's speedup grows with ``k``: the sparse main loop is
        up to 2x faster, the fixed part is not.
    dense_k_step_ns, sparse_k_step_ns : float
        Shortest time of one main-loop k-step of a CTA (the load latency a
        pipeline cannot hide when a tile does little work per step), in
        nanoseconds; a step covers ``k_step_bytes`` of ``k`` per row on the
        dense path and twice that logical depth on the sparse path. This
        floor is what makes decode-shaped (small ``n``) sparse GEMMs slow:
        they cannot split ``k`` (``sparse_split_k``), so a few CTAs walk the
        whole reduction one latency-bound step at a time.
    k_step_bytes : int
        Bytes of one row of A consumed per dense k-step (64 fp16 elements).
    tiles : tuple of (int, int)
        Candidate output tiles ``(T_m, T_n)``; the model takes the fastest.
    split_k : tuple of int
        Candidate split-K factors of dense kernels (they must contain 1).
    sparse_split_k : tuple of int or None
        Split-K factors a kernel-level sparse call may use; None means the same
        as ``split_k`` (a benchmark that searches cuSPARSELt's split-K, or the
        CUTLASS profiler's best kernel).
    framework_sparse_split_k : tuple of int or None
        Split-K factors of a framework-level sparse call; None means
        ``sparse_split_k``. ``torch.sparse`` calls cuSPARSELt with
        ``split_k=1`` and its CUTLASS kernels take no split-K, so the calibrated
        value is ``(1,)``: this is what makes decode-shaped sparse calls walk
        the whole reduction in a few CTAs.
    balanced_tile_intensity : float
        Tile intensity ``T_m T_n / (a T_m + T_n)`` (``a`` = stored fraction of
        A) at which an SM's operand feed just keeps the dense tensor cores
        busy at their full issue rate; sparse needs twice it. Fitted.
    feed_follows_issue_rate : bool
        Scale that intensity by the tensor cores' issue rate for the chosen
        accumulator relative to the fastest one (1/2 for FP32 accumulation on
        GeForce parts): cores issuing at half rate need half the feed. False
        reproduces the model before the corpus.
    compress_bandwidth_fraction : float
        Fraction of DRAM bandwidth a runtime prune + compress pass sustains,
        counted on the dense weight bytes (derived from a measured point).
    provenance : str
        How the values were obtained.
    """

    dense_compute_efficiency: float = 0.8
    sparse_compute_efficiency: float = 0.6
    dense_memory_efficiency: float = 0.8
    sparse_memory_efficiency: float = 0.6
    launch_overhead_us: float = 5.0
    sparse_extra_overhead_us: float = 0.0
    framework_overhead_us: float = 0.0
    sparse_framework_overhead_us: float = 0.0
    tile_fixed_k: float = 0.0
    dense_k_step_ns: float = 0.0
    sparse_k_step_ns: float = 0.0
    k_step_bytes: int = 128
    tiles: tuple[tuple[int, int], ...] = (
        (256, 128),
        (128, 256),
        (128, 128),
        (128, 64),
        (64, 128),
        (64, 64),
    )
    split_k: tuple[int, ...] = (1, 2, 4, 8, 16)
    sparse_split_k: tuple[int, ...] | None = None
    framework_sparse_split_k: tuple[int, ...] | None = None
    balanced_tile_intensity: float = 64.0
    feed_follows_issue_rate: bool = True
    compress_bandwidth_fraction: float = 0.1
    provenance: str = "hand-set placeholder"

    def __post_init__(self) -> None:
        for name in _EFFICIENCIES:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
                raise ValueError(f"{name}={value} must be in (0, 1]")
        if self.sparse_compute_efficiency > self.dense_compute_efficiency:
            raise ValueError(
                f"sparse_compute_efficiency={self.sparse_compute_efficiency} must be <= "
                f"dense_compute_efficiency={self.dense_compute_efficiency} (sparse is never "
                "modelled faster than 2x the dense compute term)"
            )
        if self.sparse_k_step_ns < self.dense_k_step_ns:
            raise ValueError(
                f"sparse_k_step_ns={self.sparse_k_step_ns} must be >= dense_k_step_ns="
                f"{self.dense_k_step_ns} (a sparse step moves the same bytes of A plus metadata; "
                "shorter, it would let sparse beat 2x)"
            )
        if self.sparse_memory_efficiency > self.dense_memory_efficiency:
            raise ValueError(
                f"sparse_memory_efficiency={self.sparse_memory_efficiency} must be <= "
                f"dense_memory_efficiency={self.dense_memory_efficiency}"
            )
        for name in (*_TIMES, "tile_fixed_k"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value):
                raise ValueError(f"{name}={value} must be finite and >= 0")
        if not 0.0 < self.compress_bandwidth_fraction <= 1.0:
            raise ValueError(
                f"compress_bandwidth_fraction={self.compress_bandwidth_fraction} must be in (0, 1]"
            )
        if not self.balanced_tile_intensity > 0:
            raise ValueError(f"balanced_tile_intensity={self.balanced_tile_intensity} must be > 0")
        if not isinstance(self.k_step_bytes, int) or self.k_step_bytes < 1:
            raise ValueError(f"k_step_bytes={self.k_step_bytes} must be an integer >= 1")
        if not self.tiles or any(t[0] < 1 or t[1] < 1 for t in self.tiles):
            raise ValueError(f"tiles={self.tiles} must be a non-empty tuple of positive pairs")
        for name in ("split_k", "sparse_split_k", "framework_sparse_split_k"):
            splits = getattr(self, name)
            if splits is None and name != "split_k":
                continue
            if 1 not in splits or any(s < 1 for s in splits):
                raise ValueError(f"{name}={splits} must contain 1 and only positive ints")

    def replace(self, **changes: object) -> GemmParameters:
        """Return a copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def sparse_splits(self, level: str = "kernel") -> tuple[int, ...]:
        """The split-K factors the sparse path may use at ``level``."""
        kernel = self.split_k if self.sparse_split_k is None else self.sparse_split_k
        if level == "framework" and self.framework_sparse_split_k is not None:
            return self.framework_sparse_split_k
        return kernel


#: Fields a table may scope, and the scopes each may have, coarse to fine. A scope is
#: ``architecture/library/dtype-class`` with ``*`` for "any"; a fitted value at a finer scope
#: is shrunk toward the one at the coarser scope it refines (then the global value).
SCOPED_FIELDS: dict[str, tuple[str, ...]] = {
    "dense_compute_efficiency": ("*/*/dtype", "architecture/*/dtype"),
    "dense_memory_efficiency": ("architecture/*/*",),
    "sparse_compute_ratio": ("*/library/dtype", "architecture/library/dtype"),
    "sparse_memory_ratio": ("*/library/dtype", "architecture/library/dtype"),
    "sparse_extra_overhead_us": ("*/library/*",),
    "sparse_framework_overhead_us": ("*/library/*",),
    "sparse_k_step_ratio": ("*/library/*",),
}

#: Fields of the table's global section that are not GemmParameters fields.
RATIO_FIELDS: tuple[str, ...] = (
    "sparse_compute_ratio",
    "sparse_memory_ratio",
    "sparse_k_step_ratio",
)

#: Merge order of scopes (coarse first); each later scope overrides the earlier ones.
SCOPE_ORDER: tuple[tuple[bool, bool, bool], ...] = (
    (False, False, True),
    (True, False, False),
    (False, True, False),
    (True, False, True),
    (False, True, True),
    (True, True, False),
    (True, True, True),
)


def scope_pattern(scope: tuple[str, str, str]) -> str:
    """``("sm_80", "*", "16bit")`` -> ``"architecture/*/dtype"``."""
    names = ("architecture", "library", "dtype")
    return "/".join(name if value != "*" else "*" for value, name in zip(scope, names, strict=True))


def _scope_allowed(field_name: str, scope: tuple[str, str, str]) -> bool:
    return scope_pattern(scope) in SCOPED_FIELDS.get(field_name, ())


def scopes_of(architecture: str, library: str, dclass: str) -> tuple[tuple[str, str, str], ...]:
    """Every non-global scope that applies to one call, in merge order."""
    values = (architecture, library, dclass)
    return tuple(
        tuple(v if used else "*" for v, used in zip(values, mask, strict=True))  # type: ignore[misc]
        for mask in SCOPE_ORDER
    )


@dataclass(frozen=True)
class ParameterTable:
    """Global parameter values plus overrides per (architecture, library, dtype class).

    Attributes
    ----------
    base : dict
        Every field of :class:`GemmParameters` that is a number, plus the
        ratios ``sparse_compute_ratio`` (sparse / dense compute efficiency),
        ``sparse_memory_ratio`` (sparse / dense memory efficiency) and
        ``sparse_k_step_ratio`` (sparse / dense k-step, >= 1), which make the
        sparse terms follow the dense ones they are bounded by.
    overrides : dict
        ``{(architecture, library, dtype_class): {field: value}}``, ``"*"`` for
        any; a field may be scoped only as :data:`SCOPED_FIELDS` lists.
    structure : GemmParameters
        Tiles, split-K sets and the other non-fitted fields.
    provenance : str
    """

    base: dict[str, float]
    overrides: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    structure: GemmParameters = field(default_factory=GemmParameters)
    provenance: str = ""

    def __post_init__(self) -> None:
        for scope, values in self.overrides.items():
            for name in values:
                if not _scope_allowed(name, scope):
                    raise ValueError(
                        f"parameter {name!r} cannot be scoped to {'/'.join(scope)}: its scopes "
                        f"are {list(SCOPED_FIELDS.get(name, ())) or 'global only'}"
                    )

    def values_for(self, architecture: str, library: str, dclass: str) -> dict[str, float]:
        """The merged values for one call: global, then ever narrower scopes."""
        merged = dict(self.base)
        for scope in scopes_of(architecture, library, dclass):
            merged.update(self.overrides.get(scope, {}))
        return merged

    def resolve(self, architecture: str, library: str, dtype: str) -> GemmParameters:
        """A complete :class:`GemmParameters` for one architecture, library and dtype."""
        values = self.values_for(architecture, library, dtype_class(dtype))
        return parameters_from_values(values, self.structure, self.provenance)


def parameters_from_values(
    values: dict[str, float], structure: GemmParameters, provenance: str = ""
) -> GemmParameters:
    """Build :class:`GemmParameters` from merged table values (ratios applied)."""
    dense_c = values["dense_compute_efficiency"]
    dense_m = values["dense_memory_efficiency"]
    fields = {
        name: value
        for name, value in values.items()
        if name not in RATIO_FIELDS and name in GemmParameters.__dataclass_fields__
    }
    fields["sparse_compute_efficiency"] = min(dense_c, dense_c * values["sparse_compute_ratio"])
    fields["sparse_memory_efficiency"] = min(dense_m, dense_m * values["sparse_memory_ratio"])
    fields["sparse_k_step_ns"] = values["dense_k_step_ns"] * max(1.0, values["sparse_k_step_ratio"])
    return structure.replace(**fields, provenance=provenance)


def _scope_key(text: str) -> tuple[str, str, str]:
    parts = text.split("/")
    if len(parts) != 3:
        raise ValueError(f"scope {text!r} must be 'architecture/library/dtype-class'")
    return (parts[0], parts[1], parts[2])


def table_from_toml(raw: dict[str, Any]) -> ParameterTable:
    """Parse the ``gemm_parameters.toml`` structure."""
    structure_raw = dict(raw.get("structure", {}))
    structure_fields: dict[str, Any] = {}
    for name, value in structure_raw.items():
        if name == "tiles":
            structure_fields[name] = tuple((int(a), int(b)) for a, b in value)
        elif name in ("split_k", "sparse_split_k", "framework_sparse_split_k"):
            structure_fields[name] = tuple(int(v) for v in value)
        else:
            structure_fields[name] = value
    base = {name: float(value) for name, value in raw["parameters"].items()}
    structure = GemmParameters(**structure_fields)
    overrides = {
        _scope_key(scope): {name: float(value) for name, value in values.items()}
        for scope, values in raw.get("scoped", {}).items()
    }
    return ParameterTable(
        base=base,
        overrides=overrides,
        structure=structure,
        provenance=str(raw.get("provenance", "")),
    )


@cache
def default_parameter_table() -> ParameterTable:
    """The calibrated table shipped in ``nmsim/data/gemm_parameters.toml``.

    Written by ``nmsim calibrate --write`` from the measured corpus; a test
    refits and compares.
    """
    text = resources.files("nmsim").joinpath("data/gemm_parameters.toml").read_text("utf-8")
    return table_from_toml(tomllib.loads(text))


def default_parameters(
    architecture: str = "sm_80", library: str = "cusparselt", dtype: str = "fp16"
) -> GemmParameters:
    """Calibrated parameters for one architecture (``"sm_80"``), sparse library and dtype."""
    return default_parameter_table().resolve(architecture, library, dtype)
