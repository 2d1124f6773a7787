"""``nmsim verify``: run the conformance suite and the golden vectors on the torch path.

Prints one row per algorithm x dtype x device (cases, mismatches, max gap) and
exits 1 if any case mismatches, 0 otherwise. While it runs, one progress line per
row goes to stderr as the row finishes, on a terminal or not (``--quiet``: none).
Without torch, nmref itself is checked against the golden vectors shipped in the
package and one line says that the torch path was skipped. Example::

    nmsim verify --device cpu --quick
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["add_parser", "format_table", "run_verify"]

#: The table row (and ``--only`` name) of the golden vectors.
GOLDEN_ROW = "golden vectors"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``verify`` on the ``nmsim`` command line."""
    parser = subparsers.add_parser(
        "verify",
        help="check the torch path against nmref: conformance suite and golden vectors",
        description=(
            "Run the conformance kit (nmref.testing) on every algorithm of nmsim.torch for "
            "every dtype on one device, plus the golden vectors shipped with nmref; print a "
            "table and exit 1 on any mismatch. Without torch, checks nmref against the "
            "golden vectors."
        ),
    )
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, ...")
    parser.add_argument("--quick", action="store_true", help="a shorter suite (about a third)")
    parser.add_argument(
        "--vectors",
        type=Path,
        default=None,
        help="golden vector folder (default: the vectors shipped with nmref)",
    )
    parser.add_argument(
        "--only", default=None, help="run only suites whose name contains this text"
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines on stderr (one per table row)"
    )
    parser.set_defaults(func=_run_command)


def format_table(rows: list[tuple[str, str, str, int, int, float, float]]) -> str:
    """Plain-text table of ``(algorithm, dtype, device, cases, mismatches, max_gap, seconds)``."""
    header = ("algorithm", "dtype", "device", "cases", "mismatches", "max gap", "time s")
    cells = [header] + [
        (a, d, dev, str(c), str(mm), f"{gap:g}", f"{sec:.2f}")
        for a, d, dev, c, mm, gap, sec in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for index, row in enumerate(cells):
        text = "  ".join(
            cell.ljust(width) if column < 3 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        lines.append(text.rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def run_verify(
    device: str = "cpu",
    quick: bool = False,
    vectors: Path | None = None,
    only: str | None = None,
    out=None,
    progress=None,
) -> int:
    """Run every registered suite and the golden vectors; print the table; return the exit code.

    Without torch the torch path cannot run: nmref itself is checked against the
    golden vectors instead, one line says the torch path was skipped, and the exit
    code reflects the vectors alone. ``progress`` (a text stream; the command gives
    stderr) gets one line per table row as the row finishes.
    """
    out = out or sys.stdout
    tell = _Progress(progress)
    try:
        import torch
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise  # a broken torch install is an error, not a missing optional dependency
        return _run_without_torch(device, vectors, only, out, tell)

    from nmref.testing.golden import default_vectors_dir, read_manifest
    from nmsim.torch import conformance, golden_implementation

    torch_device = torch.device(device)
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch.cuda.is_available() is False on this machine")
    device_name = str(torch_device)
    rows = []
    failures = []
    directory = vectors if vectors is not None else default_vectors_dir()
    golden = (not only or only in GOLDEN_ROW) and (directory / "manifest.json").exists()
    planned = [
        (suite, dtype)
        for suite in conformance.SUITES.values()
        if not only or only in suite.name
        for dtype in suite.dtypes
    ]
    tell.total = len(planned) + golden
    for suite, dtype in planned:
        start = time.perf_counter()
        report = suite.run(dtype, device_name, quick)
        seconds = time.perf_counter() - start
        row = (
            suite.name,
            dtype,
            device_name,
            report.cases,
            report.mismatches,
            report.max_gap,
            seconds,
        )
        rows.append(row)
        tell.row(row)
        if not report.ok:
            failures.append(report)
    if vectors is not None:
        read_manifest(vectors)  # a folder the user named must be a vectors folder: say why not
    if not only or only in GOLDEN_ROW:
        if golden:
            row, report = _golden_row(
                lambda vector: golden_implementation(vector, device_name), directory, device_name
            )
            rows.append(row)
            tell.row(row)
            if not report.ok:
                failures.append(report)
        else:
            print(f"golden vectors: no manifest.json in {directory} (not checked)", file=out)
    if not rows:
        names = ", ".join(conformance.SUITES)
        raise ValueError(f"--only {only!r} matches no suite (suites: {names}, {GOLDEN_ROW})")
    print(
        f"nmsim verify: torch {torch.__version__}, device {device_name}"
        + (f" ({torch.cuda.get_device_name(torch_device)})" if torch_device.type == "cuda" else ""),
        file=out,
    )
    return _print_outcome(rows, failures, out)


def _golden_row(implementation_for, directory: Path, device_name: str):
    """Check one implementation against the golden vectors: its table row and report."""
    from nmref.testing.golden import check_golden_vectors

    start = time.perf_counter()
    report = check_golden_vectors(implementation_for, directory, raise_on_failure=False)
    row = (
        GOLDEN_ROW,
        "all",
        device_name,
        report.cases,
        report.mismatches,
        report.max_gap,
        time.perf_counter() - start,
    )
    return row, report


class _Progress:
    """One line per finished table row on a text stream (or nothing without one)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.total = 0
        self.done = 0
        self.started = time.perf_counter()

    def row(self, row: tuple) -> None:
        self.done += 1
        if self.stream is None:
            return
        name, dtype, _, cases, mismatches, _, seconds = row
        elapsed = time.perf_counter() - self.started
        print(
            f"nmsim verify [{self.done}/{self.total}] {name} {dtype}: {cases} cases, "
            f"{mismatches} mismatches, {seconds:.1f} s ({elapsed:.0f} s elapsed)",
            file=self.stream,
            flush=True,
        )


def _run_without_torch(
    device: str, vectors: Path | None, only: str | None, out, tell: _Progress
) -> int:
    """nmref against the golden vectors: what an install without torch can check."""
    from nmref import __version__ as nmref_version
    from nmref.testing.golden import default_vectors_dir, nmref_implementation, read_manifest

    if device != "cpu":
        raise ValueError(f"--device {device}: needs torch, which is not installed")
    if only and only not in GOLDEN_ROW:
        raise ValueError(
            f"--only {only!r}: without torch only the {GOLDEN_ROW} are checked (against nmref)"
        )
    directory = vectors if vectors is not None else default_vectors_dir()
    read_manifest(directory)  # a bad folder: one line naming it and the problem
    # Missing vectors here would leave nothing checked at all: an error, not a note.
    if not (directory / "manifest.json").exists():
        raise FileNotFoundError(f"golden vectors: no manifest.json in {directory}")
    tell.total = 1
    row, report = _golden_row(nmref_implementation, directory, "nmref")
    tell.row(row)
    print(f"nmsim verify: nmref {nmref_version}", file=out)
    print("torch path skipped: torch is not installed (checked nmref only)", file=out)
    return _print_outcome([row], [report] if not report.ok else [], out)


def _print_outcome(rows, failures, out) -> int:
    """Print the table and the verdict; the exit code (1 on any mismatch)."""
    print(format_table(rows), file=out)
    total_cases = sum(row[3] for row in rows)
    total_mismatches = sum(row[4] for row in rows)
    if failures:
        print(f"\nFAILED: {total_mismatches} mismatches in {total_cases} cases", file=out)
        for report in failures:
            print(f"\n{report}", file=out)
        return 1
    print(f"\nok: {total_cases} cases, 0 mismatches", file=out)
    return 0


def _run_command(args: argparse.Namespace) -> int:
    progress = None if args.quiet else sys.stderr
    return run_verify(args.device, args.quick, args.vectors, args.only, progress=progress)
