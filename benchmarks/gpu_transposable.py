"""Device check of the exact transposable mask on the GPU: verify against nmref, then time it.

One command for whoever is lent a CUDA GPU (issue 36)::

    PYTHONPATH=. python benchmarks/gpu_transposable.py            # about 3-4 min on an H100
    PYTHONPATH=. python benchmarks/gpu_transposable.py --dry-run  # no GPU: the simulator

1. **Verify** ``nmref.transposable_mask(..., backend="cuda")`` (the Numba CUDA kernel, one
   thread per tile) against the CPU backend, bit for bit: every golden vector, then per
   pattern (2:4, 4:8, 8:16, 16:32) 1,000 random tiles of four kinds (|N(0,1)| float32, its
   bfloat16 rounding, tie-heavy integers 0..3, signed integers -2..2) in both fills, from
   NumPy (copied to the device) and, with torch, from a CUDA tensor (read in place). Any
   mismatch: exit 1 after writing the file.
2. **Time** 2:4, 4:8, 8:16 and 16:32 on an 8192x8192 |N(0,1)| matrix in float32 and in
   bfloat16 (a torch CUDA tensor; bfloat16 through ``nmsim.torch.transposable_mask``, which
   upcasts on the device): CUDA events around each call, median of ``--repeats`` after a
   warm-up (the first call compiles the kernel: reported apart). Beside it, in the same run:
   nmref on all the machine's CPU cores (``parallel=True``, Numba threads = cores) and the
   torch path's own exact solver on the GPU (``nmsim.torch.transposable``'s batched brute
   force for m <= 4, its lockstep Bellman-Ford flow above: forced by switching the kernel
   route off; float32), the latter on growing row prefixes within ``--torch-budget-s`` and
   extrapolated linearly when it did not reach the whole matrix (``extrapolated: true``; an
   upper estimate, the time on the prefix a lower bound). ``fill="at_most"`` is timed too,
   float32 only. Every timed GPU mask is compared with the CPU backend's.
3. **Write** one JSON file (``--out``): the GPU, driver, CUDA, Python, NumPy, Numba,
   numba-cuda and torch versions, the verification counts and every timing.

**Goal of this run** (a target, not a test; the file says whether it was met): exact 8:16 on
an 8192x8192 matrix in <= 0.03 s on an H100 or H200, 4x faster than the 0.12 s reported for
TSENOR's approximate solver (NeurIPS 2025, secondary source), and 2:4 at >= 1e9 tiles/s.

``--dry-run`` needs no GPU: it sets ``NUMBA_ENABLE_CUDASIM=1`` (Numba's CUDA simulator, which
runs the kernel as Python on the CPU), verifies the golden vectors and a few tiles per
pattern, times tiny matrices (meaningless figures: the simulator) and writes the file with
``"dry_run": true`` (by default under the system's temporary folder, not in the tree).
A run stops timing new rows when ``--budget-s`` has passed (the file lists what was skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATTERNS = ((2, 4), (4, 8), (8, 16), (16, 32))
GOAL = {
    "exact 8:16 on 8192x8192, seconds (H100/H200)": 0.03,
    "exact 2:4 tiles per second": 1e9,
    "reference": "TSENOR (approximate), 0.12 s for 8192x8192 8:16 on an H100 (secondary source)",
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="Numba's CUDA simulator, tiny sizes")
    parser.add_argument("--size", type=int, default=None, help="matrix side (default 8192)")
    parser.add_argument("--tiles", type=int, default=None, help="random tiles per pattern")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per row")
    parser.add_argument("--torch-budget-s", type=float, default=12.0)
    parser.add_argument("--budget-s", type=float, default=270.0, help="no new timing row after")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    args = parser.parse_args()
    args.size = args.size or (64 if args.dry_run else 8192)
    args.tiles = args.tiles or (8 if args.dry_run else 1000)
    args.repeats = args.repeats or (1 if args.dry_run else 5)
    if args.out is None:
        folder = Path(tempfile.gettempdir()) if args.dry_run else Path("benchmarks/output")
        args.out = folder / (
            "gpu_transposable.dry-run.json" if args.dry_run else "gpu_transposable.json"
        )
    return args


ARGS = parse_args()
if ARGS.dry_run:
    # Before anything imports numba: the simulator is chosen when numba.cuda is first imported.
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numba  # noqa: E402
import numpy as np  # noqa: E402

from nmref.testing.cases import round_to_bfloat16  # noqa: E402
from nmref.testing.golden import check_golden_vectors  # noqa: E402
from nmref.transposable import transposable_mask  # noqa: E402
from nmref.transposable._cuda_driver import unavailable_reason  # noqa: E402

try:
    import torch
except ImportError:  # the file then has no bfloat16 and no torch rows
    torch = None  # type: ignore[assignment]

STARTED = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - STARTED


def log(message: str) -> None:
    print(f"[{elapsed():6.1f}s] {message}", flush=True)


# ----------------------------------------------------------------------------
# The machine
# ----------------------------------------------------------------------------


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=15, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = (
        [part.strip() for part in out.stdout.strip().splitlines()[0].split(",")]
        if (out.returncode == 0 and out.stdout.strip())
        else []
    )
    return dict(zip(("name", "driver", "memory"), fields, strict=False))


def machine() -> dict:
    from numba import cuda

    smi = _nvidia_smi()
    device: dict = {"simulator": ARGS.dry_run, "cpu_cores": os.cpu_count()}
    if ARGS.dry_run:
        device["gpu"] = "Numba CUDA simulator (no GPU)"
    else:
        current = cuda.get_current_device()
        name = current.name.decode() if isinstance(current.name, bytes) else current.name
        device["gpu"] = name
        device["compute_capability"] = list(current.compute_capability)
        device["driver"] = smi.get("driver") or "not found (no nvidia-smi)"
        device["memory"] = smi.get("memory")
        try:
            version = cuda.cudadrv.driver.driver.get_version()
            device["cuda_driver_api"] = ".".join(map(str, version))
        except Exception as error:  # another layout of the CUDA target
            device["cuda_driver_api"] = f"unknown ({type(error).__name__})"
    versions = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_cuda": _package_version("numba-cuda"),
        "numba_cuda_target": getattr(cuda, "implementation", None),
        "torch": torch.__version__ if torch is not None else None,
        "torch_cuda": torch.version.cuda if torch is not None else None,
        "nmref": _package_version("nm-sparsity-ref"),
    }
    return {
        "device": device,
        "versions": versions,
        "platform": platform.platform(),
        "commit": _git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


# ----------------------------------------------------------------------------
# 1. Verify
# ----------------------------------------------------------------------------


def random_tiles(n: int, m: int, tiles: int, seed: int) -> list[tuple[str, np.ndarray]]:
    """The four kinds, ``tiles`` tiles in all, each kind a ``(m, k m)`` matrix.

    (No float64: its tiles go to the host, which ``tests/test_transposable_cuda.py`` checks;
    here they would only add CPU kernels to compile.)
    """
    rng = np.random.default_rng(seed)
    per_kind = max(1, tiles // 4)
    shape = (m, per_kind * m)
    noise = np.abs(rng.standard_normal(shape)).astype(np.float32)
    return [
        ("float32 |N(0,1)|", noise),
        ("bfloat16 |N(0,1)|", round_to_bfloat16(noise[:, ::-1].copy())),
        ("tie-heavy 0..3", rng.integers(0, 4, shape).astype(np.float32)),
        ("signed -2..2", rng.integers(-2, 3, shape).astype(np.float32)),
    ]


def verify() -> dict:
    failures: list[str] = []
    golden: list[str] = []

    def implementation_for(vector):
        if not vector.function.startswith("transposable_mask[exact"):
            return None
        golden.append(vector.name)
        fill = "at_most" if "at_most" in vector.function else "exact"
        return lambda scores, n, m: transposable_mask(scores, n, m, fill=fill, backend="cuda")

    report = check_golden_vectors(implementation_for, raise_on_failure=False)
    if not report.ok:
        failures.append(f"golden vectors: {report.summary()}")
    log(f"golden vectors: {len(golden)} checked, {'ok' if report.ok else 'FAILED'}")
    checked = 0
    sources = ["numpy"] + (["torch"] if torch is not None and not ARGS.dry_run else [])
    for n, m in PATTERNS:
        # The simulator takes seconds per 32x32 tile: fewer tiles of the large patterns.
        tiles = ARGS.tiles if not ARGS.dry_run else max(4, ARGS.tiles // (m // 4) ** 2)
        for kind, scores in random_tiles(n, m, tiles, seed=m):
            for fill in ("exact", "at_most"):
                expected = transposable_mask(scores, n, m, fill=fill, parallel=True)
                for source in sources:
                    if source == "torch":
                        device_scores = torch.as_tensor(scores, device="cuda")
                        got = transposable_mask(device_scores, n, m, fill=fill, backend="cuda")
                        got = got.copy_to_host()
                    else:
                        got = transposable_mask(scores, n, m, fill=fill, backend="cuda")
                    count = scores.size // (m * m)
                    checked += count
                    wrong = _wrong_tiles(got, expected, m)
                    if wrong:
                        failures.append(f"{n}:{m} {kind} {fill} from {source}: {wrong} tiles")
        log(f"{n}:{m}: random tiles checked ({checked} tile solves so far)")
    return {"golden_vectors": len(golden), "tile_solves": checked, "failures": failures}


def _wrong_tiles(got: np.ndarray, expected: np.ndarray, m: int) -> int:
    rows, columns = expected.shape
    differ = (np.asarray(got) != expected).reshape(rows // m, m, columns // m, m)
    return int(differ.any(axis=(1, 3)).sum())


# ----------------------------------------------------------------------------
# 2. Time
# ----------------------------------------------------------------------------


def gpu_seconds(call, repeats: int) -> tuple[float, float]:
    """``(first call, median of repeats)`` in seconds: CUDA events (the simulator: a clock)."""
    from numba import cuda

    def once() -> float:
        if ARGS.dry_run:
            start = time.perf_counter()
            call()
            return time.perf_counter() - start
        cuda.synchronize()
        if torch is not None:
            torch.cuda.synchronize()
        begin, end = cuda.event(), cuda.event()
        begin.record()
        call()
        end.record()
        end.synchronize()
        return cuda.event_elapsed_time(begin, end) / 1000

    first = once()
    return first, statistics.median(once() for _ in range(repeats))


def cpu_seconds(call, repeats: int) -> tuple[float, float, object]:
    """``(first call, median of repeats, the last result)``, wall clock."""
    start = time.perf_counter()
    result = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), result


def to_host(mask) -> np.ndarray:
    if hasattr(mask, "copy_to_host"):
        return mask.copy_to_host()
    if hasattr(mask, "cpu"):
        return mask.cpu().numpy()
    return np.asarray(mask)


def torch_exact_seconds(scores, n: int, m: int, budget: float) -> dict:
    """The torch path's own exact solver (the kernel route switched off) on growing row
    prefixes, while the next one fits ``budget``. Where it stops short of the whole matrix,
    ``seconds`` is the linear extrapolation: an upper estimate where the GPU was not yet
    saturated (the lockstep solver's steps are launches whose cost hardly grows with the
    tiles), and ``seconds_timed`` on ``rows_timed`` rows a lower bound."""
    from nmsim.torch import transposable as torch_transposable

    saved = torch_transposable._runs_cuda_kernel
    torch_transposable._runs_cuda_kernel = lambda tensor, m: False
    try:
        rows = scores.shape[0]
        prefix = max(m, rows // 256 // m * m)
        spent = 0.0
        while True:
            part = scores[:prefix]
            start = time.perf_counter()
            torch_transposable.transposable_mask(part, n, m)
            if part.is_cuda:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            spent += seconds
            if prefix >= rows or spent + 4 * seconds > budget:
                return {
                    "solver": "batched brute force" if m <= 4 else "lockstep flow",
                    "rows_timed": prefix,
                    "seconds_timed": seconds,
                    "seconds": seconds * rows / prefix,
                    "extrapolated": prefix < rows,
                }
            prefix = min(rows, prefix * 4)
    finally:
        torch_transposable._runs_cuda_kernel = saved


def timing_rows(summary: dict) -> list[dict]:
    from numba import cuda

    size = ARGS.size
    rows: list[dict] = []
    rng = np.random.default_rng(0)
    host32 = np.abs(rng.standard_normal((size, size), dtype=np.float32))
    on_gpu = torch is not None and not ARGS.dry_run
    if on_gpu:
        # Torch CUDA tensors, read by the kernel in place (__cuda_array_interface__).
        inputs = {"float32": torch.as_tensor(host32, device="cuda")}
        inputs["bfloat16"] = inputs["float32"].to(torch.bfloat16)
        host = {"float32": host32, "bfloat16": inputs["bfloat16"].float().cpu().numpy()}
    else:
        # No torch (Numba device arrays), or the simulator (NumPy, copied at each call).
        host = {"float32": host32, "bfloat16": round_to_bfloat16(host32)}
        inputs = {k: v if ARGS.dry_run else cuda.to_device(v) for k, v in host.items()}
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for n, m in PATTERNS:
        tiles = (size // m) ** 2
        for dtype, fill in (("float32", "exact"), ("bfloat16", "exact"), ("float32", "at_most")):
            if elapsed() > ARGS.budget_s:
                summary["skipped"].append(f"{n}:{m} {dtype} {fill} (budget)")
                continue
            scores = inputs[dtype]
            if on_gpu and dtype == "bfloat16":
                # nmsim.torch: the bfloat16 tensor upcast to float32 on the device, the kernel.
                from nmsim.torch.transposable import transposable_mask as torch_mask

                def gpu_call(scores=scores, n=n, m=m):
                    return torch_mask(scores, n, m)
            else:

                def gpu_call(scores=scores, n=n, m=m, fill=fill):
                    return transposable_mask(scores, n, m, fill=fill, backend="cuda")

            first, median = gpu_seconds(gpu_call, ARGS.repeats)
            row: dict = {"pattern": f"{n}:{m}", "dtype": dtype, "fill": fill, "size": size}
            row["gpu"] = {"first_call_s": first, "median_s": median, "tiles_per_s": tiles / median}
            first, median, expected = cpu_seconds(
                lambda host=host[dtype], n=n, m=m, fill=fill: transposable_mask(
                    host, n, m, fill=fill, parallel=True
                ),
                ARGS.repeats,
            )
            row["nmref_cpu_parallel"] = {
                "threads": numba.get_num_threads(),
                "first_call_s": first,
                "median_s": median,
                "tiles_per_s": tiles / median,
            }
            # The same mask as the CPU backend on this very matrix (not timed).
            row["gpu"]["wrong_tiles"] = _wrong_tiles(to_host(gpu_call()), expected, m)
            if row["gpu"]["wrong_tiles"]:
                summary["failures"].append(f"timing matrix {n}:{m} {dtype} {fill}: wrong tiles")
            row["gpu_speedup_vs_cpu"] = median / row["gpu"]["median_s"]
            if fill == "exact" and dtype == "float32" and torch is not None:
                torch_scores = inputs["float32"] if on_gpu else torch.as_tensor(host32)
                row["torch_exact"] = torch_exact_seconds(torch_scores, n, m, ARGS.torch_budget_s)
                row["gpu_speedup_vs_torch"] = row["torch_exact"]["seconds"] / row["gpu"]["median_s"]
            rows.append(row)
            torch_text = ""
            if "torch_exact" in row:
                timed = row["torch_exact"]
                torch_text = f", torch {timed['seconds']:.3g} s" + (
                    f" (~, {timed['seconds_timed']:.3g} s on {timed['rows_timed']} rows)"
                    if timed["extrapolated"]
                    else ""
                )
            log(
                f"{n}:{m} {dtype:8s} {fill:7s} GPU {row['gpu']['median_s']:.4g} s "
                f"({row['gpu']['tiles_per_s']:.3g} tiles/s, first call "
                f"{row['gpu']['first_call_s']:.3g} s), CPU x{numba.get_num_threads()} "
                f"{median:.4g} s{torch_text}"
            )
    return rows


def goal_met(rows: list[dict]) -> dict:
    def find(pattern: str) -> dict | None:
        return next(
            (
                r
                for r in rows
                if r["pattern"] == pattern and r["dtype"] == "float32" and r["fill"] == "exact"
            ),
            None,
        )

    met: dict = {}
    if ARGS.dry_run or ARGS.size != 8192:
        return {"note": "not measured: dry run or another size"}
    row = find("8:16")
    if row:
        met["8:16 seconds"] = row["gpu"]["median_s"]
        met["8:16 <= 0.03 s"] = row["gpu"]["median_s"] <= 0.03
    row = find("2:4")
    if row:
        met["2:4 tiles per second"] = row["gpu"]["tiles_per_s"]
        met["2:4 >= 1e9 tiles/s"] = row["gpu"]["tiles_per_s"] >= 1e9
    return met


def main() -> int:
    reason = unavailable_reason()
    if reason is not None:
        print(f"no GPU to check: {reason} (--dry-run runs the simulator)", file=sys.stderr)
        return 2
    record: dict = {"schema": 1, "dry_run": ARGS.dry_run, "command": " ".join(sys.argv)}
    record.update(machine())
    record["goal"] = GOAL
    log(f"device: {record['device']['gpu']}")
    summary = verify()
    summary["skipped"] = []
    record["verification"] = summary
    record["rows"] = timing_rows(summary)
    record["goal_met"] = goal_met(record["rows"])
    record["wall_s"] = elapsed()
    ARGS.out.parent.mkdir(parents=True, exist_ok=True)
    ARGS.out.write_text(json.dumps(record, indent=1) + "\n")
    log(f"wrote {ARGS.out}; goal: {record['goal_met']}")
    if summary["failures"]:
        print("MISMATCHES:\n  " + "\n  ".join(summary["failures"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
