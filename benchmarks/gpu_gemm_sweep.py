"""Dense vs 2:4-sparse GEMM sweep on one CUDA GPU, written as a gemm corpus TOML file.

GEMM view (the corpus schema's): ``C[m, n] = A[m, k] @ B[k, n]`` with A the SPARSE operand,
2:4 along k. A is a weight ``W[out, in]`` (m = out, k = in, row-major, k contiguous) and B
holds n tokens: ``B = X.t()`` for activations ``X[n, k]`` (so B is column-major, k
contiguous, as in ``nn.Linear``). How the torch calls map to it:

* dense: ``torch.mm(W, B)`` (fp16/bf16), ``torch._int_mm(W, B)`` (int8 -> int32),
  ``torch._scaled_mm(W, B, scale_a, scale_b, out_dtype=bf16)`` (fp8 e4m3 -> bf16), all with
  the pruned W (2:4 zeros stored explicitly);
* sparse, framework level: ``torch.mm(Ws, B)`` (``torch._scaled_mm(Ws, B, ...)`` for fp8)
  with ``Ws`` = ``SparseSemiStructuredTensorCUSPARSELT.from_dense(W)`` (what
  ``to_sparse_semi_structured`` returns by default) or
  ``SparseSemiStructuredTensorCUTLASS.from_dense(W)`` (what it returns with
  ``SparseSemiStructuredTensor._FORCE_CUTLASS = True``). torch then pads B's n (and k) up to
  the backend's dense minimum, calls the kernel, and narrows C back;
* sparse, kernel level: the kernel call the subclass makes, on B pre-padded by this script:
  ``torch._cslt_sparse_mm(Ws.packed, B)`` (alg_id 0, as the subclass uses) and
  ``torch._sparse_semi_structured_mm(Ws.packed, Ws.meta, B)``.

Two timing levels, each its own row (``level``):

* ``kernel``: CUDA events around R back-to-back calls, per-call time = elapsed / R, the median
  (and IQR) over ``--repeats`` such groups. A ``torch.cuda._sleep`` kernel is queued before
  the start event, long enough for the host to queue all R calls behind it, so the GPU runs
  them without host gaps; a group where the host was still queueing when the sleep ended is
  counted in ``gpu_starved_repeats``.
* ``framework``: ``time.perf_counter`` around single calls with ``torch.cuda.synchronize``
  before and after, median (and IQR) over 2 x ``--repeats`` calls.

Weights are rotated over enough copies to exceed 3 x the L2 size, so a repeated call does not
find its weight in L2 (decode GEMMs are weight-streaming). Each (shape, dtype, library) is
checked once against an fp32 product of the pruned weight; a failed check is recorded under
``[[failures]]`` instead of a row. Unsupported (dtype, library) pairs are recorded under
``[[skips]]`` with the reason. ``--budget-s`` stops the sweep cleanly; the file is rewritten
every ~20 s and at the end, so a killed run still leaves its rows.

``--dry-run`` needs no GPU: builds the full plan, prints its size and the estimated time (from
nmsim's own GEMM model, ``nmsim.perf.gemm.gemm_time``), times dense ``torch.mm`` on the CPU for
two small shapes (sparse skipped: no CPU 2:4 kernel) and writes a corpus file with
``dry_run = true`` in its source.

Run: ``python benchmarks/gpu_gemm_sweep.py`` (full plan, default 420 s budget),
``python benchmarks/gpu_gemm_sweep.py --shapes quick --dtypes fp16,int8``, or
``python benchmarks/gpu_gemm_sweep.py --dry-run --out /tmp/sweep.toml``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

_START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# --------------------------------------------------------------------------- plan
# LLM projections as (m = out_features, k = in_features): Llama-2-7B attention / MLP
# (4096x4096, 11008x4096, 4096x11008), Mistral-7B / Llama-3-8B MLP (14336x4096, 4096x14336),
# Llama-2/3-70B attention and MLP up (8192x8192, 28672x8192).
PROJECTIONS: tuple[tuple[int, int], ...] = (
    (4096, 4096),
    (11008, 4096),
    (4096, 11008),
    (14336, 4096),
    (4096, 14336),
    (8192, 8192),
    (28672, 8192),
)
DECODE_N = (1, 2, 4, 8, 16, 32, 64)
PREFILL_N = (512, 1024, 2048, 4096, 8192, 16384)
SQUARES = (1024, 2048, 4096, 8192, 16384)
# (m, n, k): one dimension far from the others.
TALL_SKINNY: tuple[tuple[int, int, int], ...] = (
    (65536, 256, 1024),
    (65536, 1024, 256),
    (1024, 65536, 1024),
    (1024, 1024, 65536),
    (256, 16384, 16384),
    (16384, 256, 16384),
    (16384, 16384, 256),
    (128, 4096, 32768),
)
QUICK_PROJECTIONS = PROJECTIONS[:3]
QUICK_N = (1, 16, 64, 2048, 8192)
QUICK_SQUARES = (4096, 8192)

DTYPES = ("fp16", "bf16", "int8", "fp8")
LIBRARIES = ("cusparselt", "cutlass")
# Strictest sparse-operand minimums over both backends and all dtypes in the installed torch
# (SparseSemiStructuredTensorCUTLASS int8: k % 128; cuSPARSELt int8/fp8: m % 32).
M_MULTIPLE = 32
K_MULTIPLE = 128

# Per-measurement bookkeeping assumed by the time estimate (not a measured figure).
EST_SETUP_S = 0.03
EST_HOST_CALL_S = 30e-6

KERNEL_TARGET_US = 1000.0  # GPU time aimed at per group of R back-to-back calls
MAX_CALLS_PER_REPEAT = 100
MAX_COPIES = 32
WRITE_EVERY_S = 20.0

TOLERANCE = {"fp16": 2e-2, "bf16": 3e-2, "fp8": 3e-2, "int8": 0.0}


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    family: str

    @property
    def label(self) -> str:
        return f"{self.family} m={self.m} n={self.n} k={self.k}"


def validate_shape(shape: Shape) -> None:
    """Raise ValueError unless the shape suits every backend's 2:4 sparse operand."""
    if min(shape.m, shape.n, shape.k) < 1:
        raise ValueError(f"{shape.label}: sizes must be positive")
    if shape.m % M_MULTIPLE:
        raise ValueError(f"{shape.label}: m must be a multiple of {M_MULTIPLE}")
    if shape.k % K_MULTIPLE:
        raise ValueError(f"{shape.label}: k must be a multiple of {K_MULTIPLE} (2:4 along k)")


def plan_shapes(which: str) -> list[Shape]:
    """The sweep's shapes, the quick subset first so a budget stop keeps the core."""
    quick: list[Shape] = []
    for m, k in QUICK_PROJECTIONS:
        for n in QUICK_N:
            family = "decode" if n <= max(DECODE_N) else "prefill"
            quick.append(Shape(m, n, k, family))
    quick += [Shape(s, s, s, "square") for s in QUICK_SQUARES]
    if which == "quick":
        shapes = quick
    elif which == "full":
        rest: list[Shape] = []
        for m, k in PROJECTIONS:
            rest += [Shape(m, n, k, "decode") for n in DECODE_N]
        for m, k in PROJECTIONS:
            rest += [Shape(m, n, k, "prefill") for n in PREFILL_N]
        rest += [Shape(s, s, s, "square") for s in SQUARES]
        rest += [Shape(m, n, k, "tall-skinny") for m, n, k in TALL_SKINNY]
        seen = {(s.m, s.n, s.k) for s in quick}
        shapes = quick + [s for s in rest if (s.m, s.n, s.k) not in seen]
    else:
        raise ValueError(f"--shapes must be quick or full, got {which!r}")
    for shape in shapes:
        validate_shape(shape)
    return shapes


# --------------------------------------------------------------------------- GPU keys
_GPU_RULES: tuple[tuple[str, str], ...] = (
    (r"gh200", "gh200"),
    (r"h200 nvl", "h200-nvl"),
    (r"h200", "h200"),
    (r"h800", "h800"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100", "h100-sxm"),
    (r"a100.*pcie.*80|a100 80gb pcie", "a100-pcie-80gb"),
    (r"a100.*pcie", "a100-pcie-40gb"),
    (r"a100.*80", "a100-sxm4-80gb"),
    (r"a100", "a100-sxm4-40gb"),
    (r"b200", "b200"),
    (r"l40s", "l40s"),
    (r"\bl40\b", "l40"),
    (r"\bl4\b", "l4"),
    (r"\ba10\b", "a10"),
    (r"\ba30\b", "a30"),
    (r"\ba40\b", "a40"),
    (r"rtx 6000 ada", "rtx-6000-ada"),
    (r"rtx a6000", "rtx-a6000"),
    (r"rtx a5000", "rtx-a5000"),
    (r"rtx a4000", "rtx-a4000"),
    (r"rtx 4070 ti super", "rtx-4070-ti-super"),
    (r"rtx 3080 ti", "rtx-3080-ti"),
    (r"rtx (30[6-9]0|40[6-9]0)( ti)?\b", ""),
    (r"orin", "jetson-agx-orin"),
)


def kebab(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def gpu_key(device_name: str) -> str:
    """Map torch.cuda.get_device_name() to the schema's fixed GPU key (else a kebab key)."""
    name = device_name.lower().replace("nvidia", " ").replace("geforce", " ")
    name = re.sub(r"\s+", " ", name).strip()
    for pattern, key in _GPU_RULES:
        match = re.search(pattern, name)
        if match:
            return key or kebab(match.group(0))
    return kebab(name)


# --------------------------------------------------------------------------- TOML writer
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite float {value!r} cannot be written")
        return repr(value)
    if isinstance(value, str):
        out = []
        for ch in value:
            if ch == "\\":
                out.append("\\\\")
            elif ch == '"':
                out.append('\\"')
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\t":
                out.append("\\t")
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def toml_dumps(tables: dict[str, list[dict[str, Any]]]) -> str:
    """Arrays of flat tables (values: str, int, float, bool, lists of those); None is left out."""
    lines: list[str] = []
    for name, entries in tables.items():
        for entry in entries:
            lines.append(f"[[{name}]]")
            for key, value in entry.items():
                if value is None:
                    continue
                if not re.fullmatch(r"[A-Za-z0-9_-]+", key):
                    raise ValueError(f"bad TOML key {key!r}")
                lines.append(f"{key} = {_toml_value(value)}")
            lines.append("")
    return "\n".join(lines)


def write_corpus(path: Path, tables: dict[str, list[dict[str, Any]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(toml_dumps(tables), encoding="utf-8")
    os.replace(tmp, path)


def _dtype_name(torch: Any, dtype: Any) -> str:
    names = {
        torch.int32: "int32",
        torch.int8: "int8",
        torch.float16: "fp16",
        torch.bfloat16: "bf16",
        torch.float32: "fp32",
    }
    return names.get(dtype, str(dtype).replace("torch.", ""))


# --------------------------------------------------------------------------- statistics
@dataclass
class Timing:
    median_us: float
    iqr_us: float
    min_us: float
    samples: int
    calls_per_sample: int
    starved: int = 0

    @classmethod
    def of(cls, samples_us: Sequence[float], calls: int, starved: int = 0) -> Timing:
        if len(samples_us) >= 2:
            q1, _, q3 = statistics.quantiles(samples_us, n=4, method="inclusive")
        else:
            q1 = q3 = samples_us[0]
        return cls(
            statistics.median(samples_us), q3 - q1, min(samples_us), len(samples_us), calls, starved
        )


# --------------------------------------------------------------------------- estimate
def estimate_gemm_s(shape: Shape, dtype: str, sparse: bool, gpu: str) -> float:
    """GEMM time from nmsim's own model (the repository's estimate, not a measurement)."""
    from nmsim.perf.gemm import gemm_time

    pattern = "2:4" if sparse else None
    try:
        return gemm_time(gpu, shape.m, shape.n, shape.k, dtype=dtype, sparse=pattern).time_s
    except ValueError:  # a pair the GPU entry lacks: the H200 entry has every dtype
        return gemm_time("h200", shape.m, shape.n, shape.k, dtype=dtype, sparse=pattern).time_s


def estimate_group_s(
    shape: Shape, dtype: str, libraries: Sequence[str], repeats: int, gpu: str, copies: int = 4
) -> float:
    """Estimated wall time of one (shape, dtype) group: dense + each library, both levels."""
    total = EST_SETUP_S
    for impl in ("dense", *libraries):
        t = estimate_gemm_s(shape, dtype, impl != "dense", gpu)
        calls_r = max(1, min(MAX_CALLS_PER_REPEAT, math.ceil(KERNEL_TARGET_US * 1e-6 / t)))
        kernel_calls = copies + 3 + copies + repeats * calls_r
        framework_calls = 2 * repeats + 2
        total += t * (kernel_calls + framework_calls + 3)
        total += EST_HOST_CALL_S * (repeats * calls_r * 1.5 + framework_calls * 2)
        total += EST_SETUP_S
    return total


# --------------------------------------------------------------------------- environment
def nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.stdout.strip().splitlines()
    return first[0].strip() if out.returncode == 0 and first else None


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def cusparselt_version(torch: Any) -> tuple[int | None, str]:
    try:
        raw = torch.backends.cusparselt.version()
    except Exception:
        raw = None
    if raw is None:
        return None, "not available"
    return raw, f"{raw // 1000}.{(raw % 1000) // 100}.{raw % 100}"


class _Stop(Exception):
    """Raised by the SIGTERM handler so the sweep stops and writes what it has."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop(f"signal {signum}")


# --------------------------------------------------------------------------- progress
class Progress:
    """rich progress bar when rich is installed and wanted, plain lines otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar = None
        self._plain_every = max(1, total // 20)
        self._done = 0
        self.total = total
        if enabled:
            try:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    TextColumn,
                    TimeElapsedColumn,
                )
                from rich.progress import Progress as RichProgress

                self._bar = RichProgress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                )
                self._task = self._bar.add_task("sweep", total=total)
                self._bar.start()
            except ImportError:
                self._bar = None

    def advance(self, text: str) -> None:
        self._done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=text)
        elif self._done % self._plain_every == 0 or self._done == self.total:
            print(f"[{self._done}/{self.total}] {text}", flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_summary(rows: list[dict[str, Any]], failures: int, skips: int, use_rich: bool) -> None:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["dtype"], row["library"], row["level"]), []).append(row)
    header = ("dtype", "library", "level", "rows", "median dense/sparse", "min", "max")
    table_rows = []
    for (dtype, library, level), items in sorted(groups.items()):
        ratios = [r["dense_us"] / r["sparse_us"] for r in items if r.get("sparse_us")]
        if ratios:
            cells = (
                f"{statistics.median(ratios):.2f}",
                f"{min(ratios):.2f}",
                f"{max(ratios):.2f}",
            )
        else:
            cells = ("-", "-", "-")
        table_rows.append((dtype, library, level, str(len(items)), *cells))
    if use_rich:
        try:
            from rich.console import Console
            from rich.table import Table

            table = Table(title=f"GEMM sweep: {len(rows)} rows, {failures} failures, {skips} skips")
            for column in header:
                table.add_column(column)
            for cells in table_rows:
                table.add_row(*cells)
            Console().print(table)
            return
        except ImportError:
            pass
    print(f"GEMM sweep: {len(rows)} rows, {failures} failures, {skips} skips")
    print(" | ".join(header))
    for cells in table_rows:
        print(" | ".join(cells))


def print_reasons(skips: list[dict[str, Any]], failures: list[dict[str, Any]]) -> None:
    """One line per skip; failures counted per (dtype, library, level) with the first reason."""
    for entry in skips:
        print(f"skip {entry['dtype']}/{entry['library']}: {entry['reason'][:200]}")
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for entry in failures:
        grouped.setdefault((entry["dtype"], entry["library"], entry["level"]), []).append(entry)
    for (dtype, library, level), items in sorted(grouped.items()):
        first = items[0]
        where = f"m={first.get('m')} n={first.get('n')} k={first.get('k')}"
        print(
            f"failed {dtype}/{library}/{level}: {len(items)} shapes, first {where}: "
            f"{first['reason'][:200]}"
        )


# --------------------------------------------------------------------------- the sweep
@dataclass
class Impl:
    """One way of computing C for a (shape, dtype): dense baseline or a sparse library."""

    name: str
    kernel_fns: list[Callable[[], Any]]
    framework_fns: list[Callable[[], Any]]
    kernel_call: str
    framework_call: str
    kernel_n: int  # n the kernel-level call computes (B padded by this script)
    framework_n: int  # n the kernel behind the framework call computes (torch's own padding)
    copies: int
    out_dtype: str = ""
    check: dict[str, Callable[[], Any]] = field(default_factory=dict)


@dataclass
class Sweep:
    args: argparse.Namespace
    torch: Any
    device: Any
    source_id: str
    gpu: str
    gpu_as_printed: str
    versions: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    skips: list[dict[str, Any]] = field(default_factory=list)
    cycles_per_us: float = 0.0
    l2_bytes: int = 0

    # ------------------------------------------------------------------ records
    def fail(self, shape: Shape | None, dtype: str, library: str, level: str, reason: str) -> None:
        entry: dict[str, Any] = {
            "source": self.source_id,
            "dtype": dtype,
            "library": library,
            "level": level,
            "reason": reason[:500],
        }
        if shape is not None:
            entry.update(m=shape.m, n=shape.n, k=shape.k, family=shape.family)
        self.failures.append(entry)

    def skip(self, dtype: str, library: str, reason: str) -> None:
        self.skips.append(
            {"source": self.source_id, "dtype": dtype, "library": library, "reason": reason[:500]}
        )

    def add_row(
        self,
        shape: Shape,
        dtype: str,
        library: str,
        level: str,
        dense: Impl,
        dense_t: Timing,
        sparse: Impl | None,
        sparse_t: Timing | None,
        *,
        note: str,
        check_err: float | None,
        sparse_reason: str | None = None,
    ) -> None:
        v = self.versions
        if sparse is None:
            detail = "not run"
        elif library == "cusparselt":
            detail = (
                f"torch.sparse.to_sparse_semi_structured (SparseSemiStructuredTensorCUSPARSELT, "
                f"alg_id 0); cuSPARSELt {v['cusparselt']}; torch {v['torch']}; CUDA {v['cuda']}"
            )
        else:
            detail = (
                "torch.sparse.to_sparse_semi_structured, CUTLASS backend "
                f"(SparseSemiStructuredTensorCUTLASS); torch {v['torch']}; CUDA {v['cuda']}"
            )
        call = (
            (dense.kernel_call, sparse.kernel_call if sparse else "skipped")
            if level == "kernel"
            else (dense.framework_call, sparse.framework_call if sparse else "skipped")
        )
        dense_n = dense.kernel_n if level == "kernel" else dense.framework_n
        sparse_n = (
            (sparse.kernel_n if level == "kernel" else sparse.framework_n) if sparse else None
        )
        source_dims = (
            f"W (A): {shape.m} x {shape.k}, 2:4 along k; X: {shape.n} x {shape.k}, B = X.t(); "
            f"dense: {call[0]}; sparse: {call[1]}"
        )
        number = len(self.rows) + 1
        timed_on_gpu = level == "kernel" and self.device.type == "cuda"
        row: dict[str, Any] = {
            "id": f"{self.source_id}-{number:04d}",
            "source": self.source_id,
            "gpu": self.gpu,
            "gpu_as_printed": self.gpu_as_printed,
            "dtype": dtype,
            "out_dtype": sparse.out_dtype if sparse else dense.out_dtype,
            "library": library,
            "library_detail": detail,
            "dense_library": "cublas" if self.device.type == "cuda" else "other",
            "level": level,
            "m": shape.m,
            "n": shape.n,
            "k": shape.k,
            "source_dims": source_dims,
            "count": 1,
            "dense_us": round(dense_t.median_us, 4),
            "sparse_us": round(sparse_t.median_us, 4) if sparse_t else None,
            "tags": ["dry-run"] if self.args.dry_run else [],
            "quote": (
                f"{level}: dense median {dense_t.median_us:.3f} us"
                + (f", sparse median {sparse_t.median_us:.3f} us" if sparse_t else "")
                + f" over {dense_t.samples} samples"
            ),
            "note": note,
            "family": shape.family,
            "dense_iqr_us": round(dense_t.iqr_us, 4),
            "sparse_iqr_us": round(sparse_t.iqr_us, 4) if sparse_t else None,
            "dense_min_us": round(dense_t.min_us, 4),
            "sparse_min_us": round(sparse_t.min_us, 4) if sparse_t else None,
            "samples": dense_t.samples,
            "dense_calls_per_sample": dense_t.calls_per_sample,
            "sparse_calls_per_sample": sparse_t.calls_per_sample if sparse_t else None,
            "dense_gpu_starved_samples": dense_t.starved if timed_on_gpu else None,
            "sparse_gpu_starved_samples": sparse_t.starved if timed_on_gpu and sparse_t else None,
            "dense_out_dtype": dense.out_dtype,
            "dense_n_computed": dense_n,
            "sparse_n_computed": sparse_n,
            "weight_copies_dense": dense.copies,
            "weight_copies_sparse": sparse.copies if sparse else None,
            "check_rel_err": None if check_err is None else float(f"{check_err:.3g}"),
            "sparse_skip_reason": sparse_reason,
        }
        self.rows.append(row)

    # ------------------------------------------------------------------ timing
    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def calibrate_sleep(self) -> None:
        torch = self.torch
        cycles = 2_000_000
        for _ in range(3):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            elapsed_us = start.elapsed_time(end) * 1e3
        self.cycles_per_us = cycles / max(elapsed_us, 1e-3)

    def kernel_samples(
        self, fns: list[Callable[[], Any]], calls: int, samples: int, host_us: float
    ) -> tuple[list[float], int, float]:
        """Per-call GPU times (us) of `samples` groups of `calls` back-to-back calls."""
        torch = self.torch
        out: list[float] = []
        starved = 0
        host_per_call = host_us
        for _ in range(samples):
            if self.device.type != "cuda":
                t0 = time.perf_counter()
                for i in range(calls):
                    fns[i % len(fns)]()
                out.append((time.perf_counter() - t0) * 1e6 / calls)
                continue
            sleep_us = min(host_per_call * calls * 1.5 + 50.0, 200_000.0)
            pre = torch.cuda.Event(enable_timing=True)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            pre.record()
            torch.cuda._sleep(int(sleep_us * self.cycles_per_us))
            start.record()
            t0 = time.perf_counter()
            for i in range(calls):
                fns[i % len(fns)]()
            enqueue_us = (time.perf_counter() - t0) * 1e6
            end.record()
            end.synchronize()
            slept_us = pre.elapsed_time(start) * 1e3
            if enqueue_us > slept_us:
                starved += 1
            host_per_call = max(host_per_call, enqueue_us / calls)
            out.append(start.elapsed_time(end) * 1e3 / calls)
        return out, starved, host_per_call

    def measure_kernel(self, fns: list[Callable[[], Any]]) -> Timing:
        repeats = self.args.repeats
        for fn in fns:  # warm-up: every copy once, then a few more
            fn()
        for i in range(3):
            fns[i % len(fns)]()
        self.sync()
        first, _, host_us = self.kernel_samples(fns, len(fns), 1, EST_HOST_CALL_S * 1e6)
        per_call = max(first[0], 1e-3)
        calls = max(1, min(MAX_CALLS_PER_REPEAT, math.ceil(KERNEL_TARGET_US / per_call)))
        samples, starved, _ = self.kernel_samples(fns, calls, repeats, host_us)
        return Timing.of(samples, calls, starved)

    def measure_framework(self, fns: list[Callable[[], Any]]) -> Timing:
        samples = []
        fns[0]()
        self.sync()
        for i in range(2 * self.args.repeats):
            fn = fns[i % len(fns)]
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            samples.append((time.perf_counter() - t0) * 1e6)
        return Timing.of(samples, 1)

    # ------------------------------------------------------------------ data
    def torch_dtype(self, dtype: str) -> Any:
        torch = self.torch
        return {
            "fp16": torch.float16,
            "bf16": torch.bfloat16,
            "int8": torch.int8,
            "fp8": getattr(torch, "float8_e4m3fn", None),
        }[dtype]

    def copies_for(self, nbytes: int) -> int:
        if self.device.type != "cuda" or nbytes <= 0:
            return 1
        return max(1, min(MAX_COPIES, math.ceil(3 * self.l2_bytes / nbytes)))

    def make_weight(self, shape: Shape, dtype: str) -> Any:
        """A random m x k weight pruned 2:4 along k (two kept per group of four by magnitude)."""
        torch = self.torch
        m, k = shape.m, shape.k
        if dtype == "int8":
            w = torch.randint(-1, 2, (m, k), device=self.device, dtype=torch.int8)
            score = torch.rand(m, k, device=self.device)
        else:
            base = torch.bfloat16 if dtype == "bf16" else torch.float16
            w = torch.randn(m, k, device=self.device, dtype=base)
            score = w.float().abs()
        keep = score.view(m, k // 4, 4).topk(2, dim=-1).indices
        mask = torch.zeros(m, k // 4, 4, device=self.device, dtype=torch.bool)
        mask.scatter_(-1, keep, True)
        w = (
            w * mask.view(m, k).to(w.dtype)
            if dtype != "int8"
            else torch.where(mask.view(m, k), w, torch.zeros_like(w))
        )
        if dtype == "fp8":
            w = w.to(self.torch_dtype("fp8"))
        return w.contiguous()

    def make_activations(self, shape: Shape, dtype: str, *, bounded: bool = False) -> Any:
        """X[n, k]; int8 `bounded` data has 64 nonzero k positions so no sum passes 127."""
        torch = self.torch
        n, k = shape.n, shape.k
        if dtype == "int8":
            x = torch.randint(-1, 2, (n, k), device=self.device, dtype=torch.int8)
            if bounded:
                keep = torch.zeros(k, device=self.device, dtype=torch.bool)
                keep[torch.randperm(k, device=self.device)[:64]] = True
                x = torch.where(keep, x, torch.zeros_like(x))
            return x.contiguous()
        base = torch.bfloat16 if dtype == "bf16" else torch.float16
        x = torch.randn(n, k, device=self.device, dtype=base)
        return x.to(self.torch_dtype("fp8")).contiguous() if dtype == "fp8" else x

    def padded_b(self, x: Any, multiple: int) -> tuple[Any, int]:
        """B = X.t() with n padded (zero tokens) up to `multiple`; column-major like X.t()."""
        n = x.shape[0]
        n_pad = -(-n // multiple) * multiple
        if n_pad == n:
            return x.t(), n
        xp = self.torch.zeros((n_pad, x.shape[1]), device=x.device, dtype=x.dtype)
        xp[:n] = x
        return xp.t(), n_pad

    # ------------------------------------------------------------------ impls
    def dense_impl(self, dtype: str, w: Any, x: Any, x_check: Any) -> Impl:
        torch = self.torch
        copies = self.copies_for(w.numel() * w.element_size())
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        if dtype in ("fp16", "bf16"):
            b, nb = x.t(), x.shape[0]
            fns = [partial(torch.mm, wc, b) for wc in ws]
            return Impl(
                "dense",
                fns,
                fns,
                "torch.mm(W, B)",
                "torch.mm(W, B)",
                nb,
                nb,
                copies,
                dtype,
                {"framework": partial(torch.mm, w, x_check.t())},
            )
        if dtype == "int8":
            b, nb = self.padded_b(x, 8)
            bc, _ = self.padded_b(x_check, 8)
            fns = [partial(torch._int_mm, wc, b) for wc in ws]
            call = (
                f"torch._int_mm(W, B) -> int32, B padded to n={nb} (torch._int_mm needs n % 8 == 0)"
            )
            return Impl(
                "dense",
                fns,
                fns,
                call,
                call,
                nb,
                nb,
                copies,
                "int32",
                {"framework": partial(torch._int_mm, w, bc)},
            )
        # fp8: per-tensor scales of 1.0, bf16 out, B column-major as _scaled_mm requires
        b, nb = self.padded_b(x, 16)
        bc, _ = self.padded_b(x_check, 16)
        one = torch.ones((), device=self.device, dtype=torch.float32)
        kw = {"out_dtype": torch.bfloat16}
        fns = [partial(torch._scaled_mm, wc, b, one, one, **kw) for wc in ws]
        call = f"torch._scaled_mm(W, B, 1.0, 1.0, out_dtype=bf16), B padded to n={nb}"
        return Impl(
            "dense",
            fns,
            fns,
            call,
            call,
            nb,
            nb,
            copies,
            "bf16",
            {"framework": partial(torch._scaled_mm, w, bc, one, one, **kw)},
        )

    def sparse_impl(self, library: str, dtype: str, w: Any, x: Any, x_check: Any) -> Impl:
        torch = self.torch
        from torch.sparse import (
            SparseSemiStructuredTensorCUSPARSELT,
            SparseSemiStructuredTensorCUTLASS,
        )

        cls = (
            SparseSemiStructuredTensorCUSPARSELT
            if library == "cusparselt"
            else SparseSemiStructuredTensorCUTLASS
        )
        tdtype = self.torch_dtype(dtype)
        if tdtype not in cls._DTYPE_SHAPE_CONSTRAINTS:
            raise NotImplementedError(f"{cls.__name__} has no {tdtype} entry in this torch")
        multiple = cls._DTYPE_SHAPE_CONSTRAINTS[tdtype].dense_min_cols
        copies = self.copies_for(w.numel() * w.element_size() * 9 // 16)
        first = cls.from_dense(w)
        wss = [first] + [cls.from_dense(w.clone()) for _ in range(copies - 1)]
        b_pad, n_pad = self.padded_b(x, multiple)
        bc_pad, _ = self.padded_b(x_check, multiple)
        b, bc = x.t(), x_check.t()
        one = torch.ones((), device=self.device, dtype=torch.float32)

        # kernel level: the call the subclass makes, on B padded here
        if library == "cusparselt":
            kw: dict[str, Any] = {}
            if dtype == "fp8":
                kw = {"out_dtype": torch.bfloat16}
            elif dtype == "int8" and self.int32_out_ok(first, bc_pad):
                kw = {"out_dtype": torch.int32}

            def make_k(s: Any, bb: Any) -> Callable[[], Any]:
                return partial(torch._cslt_sparse_mm, s.packed, bb, **kw)

            extra = {torch.bfloat16: ", out_dtype=bf16", torch.int32: ", out_dtype=int32"}
            kernel_call = f"torch._cslt_sparse_mm(packed, B{extra.get(kw.get('out_dtype'), '')})"
        else:

            def make_k(s: Any, bb: Any) -> Callable[[], Any]:
                return partial(torch._sparse_semi_structured_mm, s.packed, s.meta, bb)

            kernel_call = "torch._sparse_semi_structured_mm(packed, meta, B)"
        try:
            out = make_k(first, bc_pad)()
            self.sync()
        except Exception:  # one retry with B row-major, else it raises
            b_pad, bc_pad = b_pad.contiguous(), bc_pad.contiguous()
            out = make_k(first, bc_pad)()
            self.sync()
            kernel_call += " (B row-major: the column-major call raised)"
        kernel_call += f", B padded to n={n_pad}" if n_pad != x.shape[0] else ""
        out_dtype = _dtype_name(torch, out.dtype)
        del out
        kfns = [make_k(s, b_pad) for s in wss]

        # framework level: the user-facing call through the subclass (torch pads n itself)
        if dtype == "fp8":
            ffns = [
                partial(torch._scaled_mm, s, b, one, one, None, None, torch.bfloat16) for s in wss
            ]
            framework_call = f"torch._scaled_mm(Ws, B, 1.0, 1.0, None, None, bf16) ({cls.__name__})"
            check_fw = partial(torch._scaled_mm, first, bc, one, one, None, None, torch.bfloat16)
        else:
            ffns = [partial(torch.mm, s, b) for s in wss]
            framework_call = f"torch.mm(Ws, B) ({cls.__name__})"
            check_fw = partial(torch.mm, first, bc)
        check = {"kernel": make_k(first, bc_pad), "framework": check_fw}
        return Impl(
            library, kfns, ffns, kernel_call, framework_call, n_pad, n_pad, copies, out_dtype, check
        )

    def int32_out_ok(self, ws: Any, b: Any) -> bool:
        try:
            self.torch._cslt_sparse_mm(ws.packed, b, out_dtype=self.torch.int32)
            self.sync()
            return True
        except Exception:
            return False

    # ------------------------------------------------------------------ checks
    def reference(self, w: Any, x_check: Any, n: int) -> tuple[Any, Any]:
        torch = self.torch
        cols = torch.linspace(0, n - 1, min(n, 256), device=self.device).round().long().unique()
        ref = w.float() @ x_check[cols].float().t()
        return ref, cols

    def check_err(self, fn: Callable[[], Any], ref: Any, cols: Any) -> tuple[float, str]:
        """Max |C - ref| / max |ref| over the reference columns, and C's dtype."""
        out = fn()
        n_ref = int(cols.max().item()) + 1
        if out.dim() != 2 or out.shape[0] != ref.shape[0] or out.shape[1] < n_ref:
            raise RuntimeError(f"result shape {tuple(out.shape)} does not match C[m, n]")
        got = out[:, cols].float()
        scale = max(ref.abs().max().item(), 1e-6)
        return (got - ref).abs().max().item() / scale, _dtype_name(self.torch, out.dtype)

    # ------------------------------------------------------------------ one group
    def run_group(self, shape: Shape, dtype: str, libraries: dict[str, list[str]]) -> None:
        """Dense baseline and each library at its working levels for one (shape, dtype)."""
        torch = self.torch
        w = self.make_weight(shape, dtype)
        x = self.make_activations(shape, dtype)
        x_check = self.make_activations(shape, dtype, bounded=True) if dtype == "int8" else x
        ref, cols = self.reference(w, x_check, shape.n)
        tol = TOLERANCE[dtype]
        try:
            dense = self.dense_impl(dtype, w, x, x_check)
            err_d, _ = self.check_err(dense.check["framework"], ref, cols)
        except Exception as exc:  # recorded, the sweep goes on
            for library in libraries:
                self.fail(shape, dtype, library, "both", f"dense baseline: {exc!r}")
            return
        if not err_d <= tol:
            for library in libraries:
                self.fail(shape, dtype, library, "both", f"dense check rel err {err_d:.3g} > {tol}")
            return
        dense_t = {
            "kernel": self.measure_kernel(dense.kernel_fns),
            "framework": self.measure_framework(dense.framework_fns),
        }
        for library, levels in libraries.items():
            try:
                sparse = self.sparse_impl(library, dtype, w, x, x_check)
            except Exception as exc:
                self.fail(shape, dtype, library, "both", f"sparse setup: {exc!r}")
                continue
            for level in levels:
                try:
                    err, sparse.out_dtype = self.check_err(sparse.check[level], ref, cols)
                except Exception as exc:
                    self.fail(shape, dtype, library, level, f"sparse call: {exc!r}")
                    continue
                if not err <= tol:
                    self.fail(shape, dtype, library, level, f"check rel err {err:.3g} > {tol}")
                    continue
                try:
                    fns = sparse.kernel_fns if level == "kernel" else sparse.framework_fns
                    sparse_t = (
                        self.measure_kernel(fns)
                        if level == "kernel"
                        else self.measure_framework(fns)
                    )
                except Exception as exc:
                    self.fail(shape, dtype, library, level, f"timing: {exc!r}")
                    continue
                note = (
                    "kernel: CUDA events around R back-to-back calls behind a sleep kernel, "
                    "per-call median over samples; weights rotated over copies > 3x L2"
                    if level == "kernel"
                    else "framework: perf_counter around one call with synchronize before and "
                    "after, median over samples; weights rotated over copies > 3x L2"
                )
                note += "; dense baseline on the pruned weight (zeros stored)"
                self.add_row(
                    shape,
                    dtype,
                    library,
                    level,
                    dense,
                    dense_t[level],
                    sparse,
                    sparse_t,
                    note=note,
                    check_err=err,
                )
            del sparse
        del dense, w, x, x_check, ref
        torch.cuda.empty_cache()

    # ------------------------------------------------------------------ probes
    def probe(
        self, dtypes: Sequence[str], libraries: Sequence[str]
    ) -> dict[str, dict[str, list[str]]]:
        """dtype -> library -> levels that work on this GPU (m = k = 256, n = 16, checked);
        everything else is recorded as a skip with its reason."""
        torch = self.torch
        cap = torch.cuda.get_device_capability(self.device)
        ok: dict[str, dict[str, list[str]]] = {}
        tiny = Shape(256, 16, 256, "probe")
        for dtype in dtypes:
            tol = TOLERANCE[dtype]
            tdtype = self.torch_dtype(dtype)
            if tdtype is None:
                for library in libraries:
                    self.skip(dtype, library, "this torch has no float8_e4m3fn")
                continue
            if dtype == "fp8" and tuple(cap) < (8, 9):
                for library in libraries:
                    self.skip(dtype, library, f"fp8 needs compute capability >= 8.9, GPU has {cap}")
                continue
            try:
                w = self.make_weight(tiny, dtype)
                x = self.make_activations(tiny, dtype)
                xc = self.make_activations(tiny, dtype, bounded=True) if dtype == "int8" else x
                ref, cols = self.reference(w, xc, tiny.n)
                dense = self.dense_impl(dtype, w, x, xc)
                err, _ = self.check_err(dense.check["framework"], ref, cols)
                if not err <= tol:
                    raise RuntimeError(f"dense probe rel err {err:.3g} > {tol}")
            except Exception as exc:
                for library in libraries:
                    self.skip(dtype, library, f"dense baseline fails on this GPU: {exc!r}")
                continue
            ok[dtype] = {}
            for library in libraries:
                if library == "cusparselt" and not torch.backends.cusparselt.is_available():
                    self.skip(dtype, library, "torch.backends.cusparselt.is_available() is False")
                    continue
                try:
                    sparse = self.sparse_impl(library, dtype, w, x, xc)
                except Exception as exc:
                    self.skip(dtype, library, f"probe m=k=256 n=16 setup failed: {exc!r}")
                    continue
                levels = []
                for level in ("kernel", "framework"):
                    try:
                        err, _ = self.check_err(sparse.check[level], ref, cols)
                        if not err <= tol:
                            raise RuntimeError(f"rel err {err:.3g} > {tol}")
                        levels.append(level)
                    except Exception as exc:
                        self.skip(dtype, library, f"{level} level: probe failed: {exc!r}")
                if levels:
                    ok[dtype][library] = levels
            if not ok[dtype]:
                del ok[dtype]
        return ok


# --------------------------------------------------------------------------- dry run
def dry_run_rows(sweep: Sweep, shapes: Sequence[Shape], dtypes: Sequence[str]) -> None:
    """CPU stand-in: dense torch.mm for two small plan shapes; sparse skipped with reason."""
    torch = sweep.torch
    reason = "dry run on CPU: no 2:4 sparse kernel (to_sparse_semi_structured needs CUDA)"
    cpu_dtypes = [d for d in dtypes if d in ("fp16", "bf16")] or ["fp16"]
    for dtype in dtypes:
        if dtype not in cpu_dtypes:
            sweep.skip(dtype, "other", "dry run: the CPU stand-in times fp16/bf16 torch.mm only")
    small = sorted(shapes, key=lambda s: s.m * s.n * s.k)[:2]
    for shape in small:
        for dtype in cpu_dtypes:
            tdtype = sweep.torch_dtype(dtype)
            w = torch.randn(shape.m, shape.k, dtype=tdtype)
            x = torch.randn(shape.n, shape.k, dtype=tdtype)
            fns = [partial(torch.mm, w, x.t())]
            dense = Impl(
                "dense",
                fns,
                fns,
                "torch.mm(W, B) on CPU",
                "torch.mm(W, B) on CPU",
                shape.n,
                shape.n,
                1,
                dtype,
            )
            for level in ("kernel", "framework"):
                if level == "kernel":
                    samples, _, _ = sweep.kernel_samples(fns, 3, sweep.args.repeats, 0.0)
                    timing = Timing.of(samples, 3)
                else:
                    timing = sweep.measure_framework(fns)
                sweep.add_row(
                    shape,
                    dtype,
                    "other",
                    level,
                    dense,
                    timing,
                    None,
                    None,
                    note="dry run: CPU stand-in, not a GPU measurement; "
                    + (
                        "kernel level timed with perf_counter around 3 back-to-back calls"
                        if level == "kernel"
                        else "framework level: perf_counter per call"
                    ),
                    check_err=None,
                    sparse_reason=reason,
                )


def run_plan(
    sweep: Sweep,
    groups: Sequence[tuple[Shape, str]],
    supported: dict[str, dict[str, list[str]]],
    est_gpu: str,
    deadline: float,
    state: dict[str, Any],
    progress: Progress,
    flush: Callable[[], None],
) -> None:
    """Run the (shape, dtype) groups in order until done or the budget would be passed.

    Before each group its estimated time (nmsim model, scaled by measured / estimated so far)
    must fit before `deadline`; `state` holds groups done and the stop reason; `flush` writes
    the corpus file every WRITE_EVERY_S seconds."""
    torch = sweep.torch
    last_write = time.perf_counter()
    est_sum = spent_sum = 0.0
    in_a_row = 0
    for shape, dtype in groups:
        libs = supported[dtype]
        need = estimate_group_s(shape, dtype, list(libs), sweep.args.repeats, est_gpu)
        scale = max(1.0, spent_sum / est_sum) if est_sum > 0 else 1.5
        if time.perf_counter() + need * scale > deadline - 2.0:
            state["stopped"] = f"budget: {len(groups) - state['done']} groups not run"
            break
        t_group = time.perf_counter()
        try:
            sweep.run_group(shape, dtype, libs)
            in_a_row = 0
        except Exception as exc:  # OOM, or a CUDA error outside the per-call guards
            for library in libs:
                sweep.fail(shape, dtype, library, "both", f"group raised: {exc!r}")
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
            in_a_row += 1
            if in_a_row >= 5:  # a sticky CUDA error: the rest would fail the same way
                state["stopped"] = f"5 groups in a row raised, last: {exc!r}"[:300]
                break
        est_sum += need
        spent_sum += time.perf_counter() - t_group
        state["done"] += 1
        progress.advance(f"{shape.label} {dtype}")
        if time.perf_counter() - last_write > WRITE_EVERY_S:
            flush()
            last_write = time.perf_counter()


# --------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", choices=("quick", "full"), default="full")
    parser.add_argument(
        "--dtypes", default=",".join(DTYPES), help="comma list of " + ",".join(DTYPES)
    )
    parser.add_argument(
        "--libraries", default=",".join(LIBRARIES), help="comma list of " + ",".join(LIBRARIES)
    )
    parser.add_argument("--repeats", type=int, default=10, help="samples per kernel-level median")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop after this many s")
    parser.add_argument(
        "--out", type=Path, default=None, help="default gemm_corpus_sweep_<gpu>.toml"
    )
    parser.add_argument("--dry-run", action="store_true", help="CPU only: plan, estimate, stand-in")
    parser.add_argument("--estimate-gpu", default=None, help="nmsim GPU key for the estimate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-rich", action="store_true", help="plain progress output")
    args = parser.parse_args(argv)
    args.dtypes = _choices(args.dtypes, DTYPES, "--dtypes")
    args.libraries = _choices(args.libraries, LIBRARIES, "--libraries")
    if args.repeats < 2:
        parser.error("--repeats must be >= 2 (the IQR needs two samples)")
    if args.budget_s <= 0:
        parser.error("--budget-s must be positive")
    return args


def _choices(text: str, allowed: Iterable[str], flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise SystemExit(f"{flag}: unknown {bad or 'empty list'}; choose from {list(allowed)}")
    return list(dict.fromkeys(items))


def _rich_wanted(args: argparse.Namespace) -> bool:
    if args.no_rich:
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    deadline = _START + args.budget_s
    import torch

    torch.manual_seed(args.seed)
    shapes = plan_shapes(args.shapes)
    use_cuda = not args.dry_run
    if use_cuda and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run on a machine without a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda" if use_cuda else "cpu")
    device_name = torch.cuda.get_device_name(device) if use_cuda else "CPU (dry run)"
    key = gpu_key(device_name) if use_cuda else "cpu"
    est_gpu = args.estimate_gpu or key
    try:
        from nmsim.perf.hardware import get_gpu

        get_gpu(est_gpu)
    except Exception:
        est_gpu = "h200"
    plan_groups = [(s, d) for s in shapes for d in args.dtypes]
    estimate = sum(
        estimate_group_s(s, d, args.libraries, args.repeats, est_gpu) for s, d in plan_groups
    )
    plan_rows = len(plan_groups) * len(args.libraries) * 2
    print(
        f"plan: {len(shapes)} shapes x {len(args.dtypes)} dtypes x {len(args.libraries)} libraries "
        f"x 2 levels = {plan_rows} rows at most; estimated {estimate:.0f} s on {est_gpu} "
        f"(nmsim model + assumed per-call overheads); budget {args.budget_s:.0f} s",
        flush=True,
    )

    now = _dt.datetime.now(_dt.UTC)
    raw_cslt, cslt = cusparselt_version(torch)
    versions = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "cusparselt": cslt,
    }
    source_id = f"sweep-{key}-{now.strftime('%Y%m%dt%H%M%S')}"
    out_path = args.out or Path(f"gemm_corpus_sweep_{key}.toml")
    source: dict[str, Any] = {
        "id": source_id,
        "title": f"nmsim benchmarks/gpu_gemm_sweep.py on {device_name}",
        "url": "benchmarks/gpu_gemm_sweep.py",
        "kind": "sweep",
        "where": f"the [[rows]] of {out_path.name}, written by benchmarks/gpu_gemm_sweep.py",
        "convention": (
            "C[m, n] = A[m, k] @ B[k, n], A = the 2:4-sparse weight W[out, in] (m = out, k = in, "
            "2:4 along k), B = X.t() for activations X[n tokens, k]; sparse call torch.mm(Ws, B) "
            "with Ws from to_sparse_semi_structured (or _scaled_mm for fp8)"
        ),
        "trust": "low" if args.dry_run else "high",
        "trust_note": (
            "dry run on CPU: plumbing check, no GPU numbers"
            if args.dry_run
            else "own measurement in this repository, versions recorded, correctness checked"
        ),
        "dry_run": args.dry_run,
        "gpu": device_name,
        "gpu_key": key,
        "driver": nvidia_driver() or "not found (no nvidia-smi)",
        "cuda": versions["cuda"],
        "torch": versions["torch"],
        "cusparselt": cslt,
        "cusparselt_version_int": raw_cslt,
        "date": now.isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "commit": git_commit(),
        "shapes": args.shapes,
        "plan_shapes": len(shapes),
        "plan_groups": len(plan_groups),
        "plan_rows_max": plan_rows,
        "estimated_s": round(estimate, 1),
        "estimate_gpu": est_gpu,
        "budget_s": args.budget_s,
        "repeats": args.repeats,
        "dtypes": list(args.dtypes),
        "libraries": list(args.libraries),
        "kernel_target_us": KERNEL_TARGET_US,
        "max_calls_per_sample": MAX_CALLS_PER_REPEAT,
        "framework_samples": 2 * args.repeats,
        "check_tolerance": ", ".join(f"{d} {t:g}" for d, t in TOLERANCE.items()),
        "check_metric": "max |C - ref| / max |ref| over up to 256 columns, ref = fp32 product",
    }
    sweep = Sweep(args, torch, device, source_id, key, device_name, versions)
    state: dict[str, Any] = {"done": 0, "stopped": ""}

    def tables() -> dict[str, list[dict[str, Any]]]:
        src = dict(source)
        src.update(
            elapsed_s=round(time.perf_counter() - _START, 1),
            groups_done=state["done"],
            rows_written=len(sweep.rows),
            stopped_early=bool(state["stopped"]),
            stop_reason=state["stopped"] or None,
        )
        return {
            "sources": [src],
            "rows": sweep.rows,
            "failures": sweep.failures,
            "skips": sweep.skips,
        }

    def flush() -> None:
        write_corpus(out_path, tables())

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    progress: Progress | None = None
    try:
        if args.dry_run:
            dry_run_rows(sweep, shapes, args.dtypes)
        else:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            sweep.l2_bytes = int(
                getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
            )
            source["l2_bytes"] = sweep.l2_bytes
            sweep.calibrate_sleep()
            source["sleep_cycles_per_us"] = round(sweep.cycles_per_us, 1)
            supported = sweep.probe(args.dtypes, args.libraries)
            groups = [(s, d) for s, d in plan_groups if supported.get(d)]
            progress = Progress(len(groups), _rich_wanted(args))
            run_plan(sweep, groups, supported, est_gpu, deadline, state, progress, flush)
    except (KeyboardInterrupt, _Stop) as exc:
        state["stopped"] = f"interrupted: {exc!r}"
    finally:
        if progress is not None:
            progress.close()
        signal.signal(signal.SIGTERM, previous)
        write_corpus(out_path, tables())
    print_summary(sweep.rows, len(sweep.failures), len(sweep.skips), _rich_wanted(args))
    print_reasons(sweep.skips, sweep.failures)
    print(
        f"wrote {out_path}: {len(sweep.rows)} rows, {len(sweep.failures)} failures, "
        f"{len(sweep.skips)} skips in {time.perf_counter() - _START:.1f} s"
        + (f" (stopped: {state['stopped']})" if state["stopped"] else ""),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
