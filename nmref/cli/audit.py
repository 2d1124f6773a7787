"""``nmref audit FILE --pattern N:M``: the audit of every eligible tensor of a checkpoint.

Each tensor with ``ndim >= 2`` and a float dtype is mapped to its
``[rows, reduction]`` matrix (``--layout``); one whose dimensions are not
multiples of ``M`` is skipped and listed. Prints one line per tensor and a table
per method over all tensors (pooled tiles, per-matrix distribution), or with
``--json`` one JSON document. Exit 0; errors exit 2 (``specs/errors.md``).
"""

from __future__ import annotations

import argparse
import json

from nmref.audit.methods import METHODS
from nmref.audit.result import format_table, summarize
from nmref.audit.run import AUDIT_FILLS, audit
from nmref.cli.common import (
    CommandError,
    add_filters,
    nothing_selected,
    report_skipped,
    selected_records,
    tensor_error,
)
from nmref.layouts import default_layout, to_reduction_matrix

__all__ = ["add_parser", "parse_methods", "run_audit"]


def parse_methods(text: str) -> list[str]:
    """``--methods a,b``: known names only, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method {unknown[0]!r} (known: {', '.join(METHODS)})"
            if unknown
            else "give at least one method"
        )
    return names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nmref audit`` to the ``nmref`` parser."""
    sub = subparsers.add_parser(
        "audit", help="audit transposable N:M methods against certified optima"
    )
    sub.add_argument("input", help=".npy, .npz or .safetensors file")
    add_filters(sub, weights=True)
    sub.add_argument(
        "--methods",
        type=parse_methods,
        help=f"comma-separated methods (default all: {','.join(METHODS)})",
    )
    sub.add_argument(
        "--fill",
        choices=AUDIT_FILLS,
        default="exact",
        help="reference for exactly-N masks: exact (default) or at_most for every mask",
    )
    sub.add_argument("--json", action="store_true", help="print one JSON document")
    sub.set_defaults(func=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    """``nmref audit``: print the audit of every eligible tensor."""
    pattern = args.pattern
    skipped: list[str] = []
    tensors = []
    results = []
    for record in selected_records(args.input, args, need_float=True, skipped=skipped):
        layout = default_layout(record.array.ndim) if args.layout == "auto" else args.layout
        matrix = to_reduction_matrix(record.array, layout)
        if matrix.shape[0] % pattern.m or matrix.shape[1] % pattern.m:
            skipped.append(
                f"{record.name!r} ([rows, reduction] {matrix.shape} not tiles of {pattern.m})"
            )
            continue
        try:
            result = audit(matrix, pattern, methods=args.methods, fill=args.fill)
        except (ValueError, TypeError) as error:
            raise tensor_error(record.name, record.array.shape, error) from error
        tensors.append(record.name)
        results.append(result)
    if not results:
        raise CommandError(
            nothing_selected(
                args.input, args, skipped, f"ndim >= 2, a float dtype, tiles of {pattern.m}"
            )
        )
    rows = summarize(results)
    if args.json:
        document = {
            "pattern": str(pattern),
            "fill": args.fill,
            "tensors": [
                {"name": name, **r.as_dict()} for name, r in zip(tensors, results, strict=True)
            ],
            "summary": rows,
            "skipped": skipped,
        }
        print(json.dumps(document, indent=2, allow_nan=True))
        return 0
    for name, result in zip(tensors, results, strict=True):
        print(
            f"{name!r} {result.shape[0]}x{result.shape[1]}: {result.tiles} tiles, at-most optimum "
            f"above exactly-{pattern.n} optimum on {result.at_most_better_tiles}"
        )
    not_run = sorted({f"{k} ({v})" for r in results for k, v in r.skipped.items()})
    print(
        f"\npattern {pattern}, fill {args.fill}, {len(results)} tensor(s); gaps in % of the optimum"
    )
    print(format_table(rows))
    if not_run:
        print("not run: " + "; ".join(not_run))
    report_skipped(skipped)
    return 0
