"""Benchmark: wall time of ``import nmref`` and ``import nmsim`` in fresh processes.

The foundation's goal is under 0.5 s for ``import nmref`` (no torch, no Numba
compile at import). Prints the median of several fresh interpreter starts, with
the bare interpreter start measured in the same run as the baseline.

Run: ``python benchmarks/bench_import.py [--repeats 7]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _timing import median_seconds


def median_start(code: str, repeats: int) -> float:
    return median_seconds(
        lambda: subprocess.run([sys.executable, "-c", code], check=True), repeats, warm_up=False
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    baseline = median_start("pass", args.repeats)
    numpy_only = median_start("import numpy", args.repeats)
    print(f"bare interpreter start: {baseline:.3f} s")
    print(f"import numpy: {numpy_only - baseline:.3f} s over the bare start")
    for package in ("nmref", "nmsim"):
        total = median_start(f"import {package}", args.repeats)
        print(f"import {package}: {total - baseline:.3f} s over the bare start (goal < 0.5 s)")


if __name__ == "__main__":
    main()
