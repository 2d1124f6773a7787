"""The GPU database: sparse tensor-core parts, their peaks, and where each number comes from.

The data live in ``nmsim/data/gpus.toml`` (shipped in the wheel) and are loaded
once into frozen dataclasses. Every number is a :class:`Sourced` value that
carries its source and whether the research notes confirm it; unconfirmed
values are never silently promoted (``specs/gemm_model.md``, section "GPU
database").

Peaks are keyed by ``(input dtype, accumulate dtype)`` because consumer parts
(RTX 3090/4090) run FP16 with FP32 accumulation at half the FP16-accumulate
rate. Sparse peaks are vendor dense-equivalent figures (2x dense).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from nmref.patterns import Pattern, parse_pattern

__all__ = [
    "DEFAULT_ACCUMULATE",
    "DTYPE_BYTES",
    "GPU",
    "Peak",
    "Sourced",
    "get_gpu",
    "gpu_names",
    "list_gpus",
    "normalize_dtype",
]

#: Bytes per element of each tensor-core input dtype the database knows.
DTYPE_BYTES: dict[str, float] = {"fp16": 2, "bf16": 2, "tf32": 4, "fp8": 1, "int8": 1}

#: Accumulator used when the caller does not name one.
DEFAULT_ACCUMULATE: dict[str, str] = {
    "fp16": "fp32",
    "bf16": "fp32",
    "tf32": "fp32",
    "fp8": "fp32",
    "int8": "int32",
}

_DTYPE_ALIASES = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float32": "fp32",
    "int32": "int32",
    "s8": "int8",
}


def normalize_dtype(name: str, *, argument: str = "dtype") -> str:
    """Return the canonical short dtype name (``"bfloat16"`` -> ``"bf16"``)."""
    if not isinstance(name, str):
        raise TypeError(f"{argument}={name!r} must be a string such as 'bf16'")
    key = name.strip().lower()
    return _DTYPE_ALIASES.get(key, key)


@dataclass(frozen=True)
class Sourced:
    """A number with its provenance.

    Attributes
    ----------
    value : float
        The number, in the unit named by the field that holds it.
    source : str
        Where it comes from (a document, or how it was derived).
    confirmed : bool
        False when the research notes tag it [M] / unconfirmed.
    """

    value: float
    source: str
    confirmed: bool


@dataclass(frozen=True)
class Peak:
    """Tensor-core peak for one ``(input, accumulate)`` dtype pair.

    Attributes
    ----------
    input, accumulate : str
        Canonical dtype names (``"fp16"``, ``"fp32"``, ...).
    dense_tflops : float
        Dense peak, TFLOP/s (TOPS for int8).
    sparse_tflops : float
        Sparse peak in dense-equivalent TFLOP/s (2x dense on every part listed).
    sparse_pattern : Pattern
        The only pattern the sparse tensor cores accelerate for this input dtype
        (2:4, or 1:2 for TF32). Nothing else runs on the sparse path.
    source : str
    confirmed : bool
    """

    input: str
    accumulate: str
    dense_tflops: float
    sparse_tflops: float
    sparse_pattern: Pattern
    source: str
    confirmed: bool


@dataclass(frozen=True)
class GPU:
    """One GPU of the database (immutable; obtain with :func:`get_gpu`).

    Attributes
    ----------
    key : str
        Canonical name, e.g. ``"h100-sxm"``.
    name, architecture, compute_capability : str
    aliases : tuple of str
    sms : Sourced
        Streaming multiprocessors.
    clock_mhz : Sourced or None
        Clock behind the tensor peak; None where the notes do not confirm one.
    memory_gb, memory_bandwidth_gb_s : Sourced
    l2_mb : Sourced or None
    peaks : tuple of Peak
    """

    key: str
    name: str
    architecture: str
    compute_capability: str
    aliases: tuple[str, ...]
    sms: Sourced
    clock_mhz: Sourced | None
    memory_gb: Sourced
    memory_bandwidth_gb_s: Sourced
    l2_mb: Sourced | None
    peaks: tuple[Peak, ...]

    def peak(self, dtype: str, accumulate: str | None = None) -> Peak:
        """Return the peak for ``dtype`` accumulated in ``accumulate``.

        Raises
        ------
        ValueError
            If this GPU has no tensor-core path for the pair (the message lists
            the pairs it has).
        """
        dtype = normalize_dtype(dtype)
        if dtype not in DTYPE_BYTES:
            raise ValueError(
                f"dtype={dtype!r} is not a tensor-core input dtype; "
                f"use one of {sorted(DTYPE_BYTES)}"
            )
        accumulate = normalize_dtype(
            accumulate if accumulate is not None else DEFAULT_ACCUMULATE[dtype],
            argument="accumulate",
        )
        for peak in self.peaks:
            if peak.input == dtype and peak.accumulate == accumulate:
                return peak
        available = ", ".join(f"{p.input}/{p.accumulate}" for p in self.peaks)
        raise ValueError(
            f"gpu={self.key!r} has no tensor-core path for dtype={dtype!r} with "
            f"accumulate={accumulate!r}; available input/accumulate pairs: {available}"
        )

    @property
    def unconfirmed_fields(self) -> tuple[str, ...]:
        """Names of the fields whose values the notes do not confirm."""
        names = [
            field
            for field in ("sms", "clock_mhz", "memory_gb", "memory_bandwidth_gb_s", "l2_mb")
            if (value := getattr(self, field)) is not None and not value.confirmed
        ]
        names += [f"peak {p.input}/{p.accumulate}" for p in self.peaks if not p.confirmed]
        return tuple(names)


def _sourced(entry: dict[str, Any] | None, sources: dict[str, str]) -> Sourced | None:
    if entry is None:
        return None
    source = str(entry["source"])
    return Sourced(float(entry["value"]), sources.get(source, source), bool(entry["confirmed"]))


def _build_gpu(key: str, entry: dict[str, Any], sources: dict[str, str]) -> GPU:
    peaks = tuple(
        Peak(
            input=normalize_dtype(p["input"]),
            accumulate=normalize_dtype(p["accumulate"]),
            dense_tflops=float(p["dense_tflops"]),
            sparse_tflops=float(p["sparse_tflops"]),
            sparse_pattern=parse_pattern(p["sparse_pattern"]),
            source=sources.get(p["source"], p["source"]),
            confirmed=bool(p["confirmed"]),
        )
        for p in entry["peaks"]
    )
    required = {
        name: _sourced(entry.get(name), sources)
        for name in ("sms", "memory_gb", "memory_bandwidth_gb_s")
    }
    for name, value in required.items():
        if value is None:
            raise ValueError(f"gpus.toml: gpu {key!r} lacks required field {name!r}")
    return GPU(
        key=key,
        name=str(entry["name"]),
        architecture=str(entry["architecture"]),
        compute_capability=str(entry["compute_capability"]),
        aliases=tuple(str(a) for a in entry.get("aliases", ())),
        sms=required["sms"],  # type: ignore[arg-type]
        clock_mhz=_sourced(entry.get("clock_mhz"), sources),
        memory_gb=required["memory_gb"],  # type: ignore[arg-type]
        memory_bandwidth_gb_s=required["memory_bandwidth_gb_s"],  # type: ignore[arg-type]
        l2_mb=_sourced(entry.get("l2_mb"), sources),
        peaks=peaks,
    )


@cache
def _database() -> tuple[dict[str, GPU], dict[str, str]]:
    text = resources.files("nmsim").joinpath("data/gpus.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    sources = {str(k): str(v) for k, v in raw.get("sources", {}).items()}
    gpus = {key: _build_gpu(key, entry, sources) for key, entry in raw["gpus"].items()}
    lookup: dict[str, str] = {}
    for gpu in gpus.values():
        for name in (gpu.key, *gpu.aliases):
            if name in lookup:
                raise ValueError(f"gpus.toml: name {name!r} used by two GPUs")
            lookup[name] = gpu.key
    return gpus, lookup


def list_gpus() -> tuple[GPU, ...]:
    """All GPUs of the database, in file order."""
    return tuple(_database()[0].values())


def gpu_names() -> tuple[str, ...]:
    """Canonical GPU keys, in file order."""
    return tuple(_database()[0])


def get_gpu(name: str | GPU) -> GPU:
    """Look a GPU up by key or alias (case-insensitive); a :class:`GPU` passes through.

    Raises
    ------
    ValueError
        If the name is unknown; the message lists the known keys.

    Examples
    --------
    >>> get_gpu("A100").key
    'a100-sxm4-80gb'
    >>> get_gpu("h100-sxm").peak("bf16").sparse_tflops
    1978.9
    """
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"gpu={name!r} must be a GPU name such as 'h100-sxm'")
    gpus, lookup = _database()
    key = lookup.get(name.strip().lower())
    if key is None:
        raise ValueError(f"gpu={name!r} is unknown; known GPUs: {', '.join(gpus)}")
    return gpus[key]
