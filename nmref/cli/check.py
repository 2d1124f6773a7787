"""``nmref check``: exit 0 when every eligible tensor of a mask file is N:M (or
transposable), else exit 1 naming the first violating group or tile."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from nmref.cli.common import (
    CommandError,
    add_filters,
    nothing_selected,
    progress_for,
    report_skipped,
    resolved_layout,
    selected_records,
    tile_count,
)
from nmref.io.checkpoints import TensorRecord
from nmref.io.progress import WorkProgress, stored_bytes
from nmref.layouts import to_reduction_matrix
from nmref.masks import nm_violations
from nmref.patterns import Pattern

__all__ = ["add_parser", "run_check"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nmref check`` to the ``nmref`` parser."""
    check = subparsers.add_parser("check", help="check that a mask file is N:M")
    check.add_argument(
        "mask",
        help=".npy, .npz or .safetensors file, model folder or index (nonzero = kept)",
    )
    add_filters(check)
    check.add_argument("--relaxed", action="store_true", help="accept at most N kept per group")
    check.add_argument(
        "--transposable", action="store_true", help="check rows and columns of m x m tiles"
    )
    check.add_argument(
        "--weights",
        help="with --transposable: the weights file, to print each mask's optimality gap",
    )
    check.add_argument("--quiet", action="store_true", help="no progress bar")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """``nmref check``: exit 0 if every eligible tensor is N:M, 1 naming the first violation."""
    from nmref.io.sharded import is_model_input, iter_input, open_model

    pattern: Pattern = args.pattern
    if args.weights is not None and not args.transposable:
        raise CommandError("--weights needs --transposable (it reports the optimality gap)")
    if args.weights is None:
        args.weight_tensors = {}
    elif is_model_input(args.weights):
        args.weight_tensors = _LazyWeights(open_model(args.weights))  # one tensor at a time
    else:
        args.weight_tensors = {r.name: np.asarray(r.array) for r in iter_input(args.weights)}
    skipped: list[str] = []
    progress = progress_for(args.mask, args, need_float=False, label="checking")
    with progress:
        status = _check_all(args, pattern, skipped, progress)
    if status is not None:
        return status
    progress.print_summary()
    checked = progress.done_tensors
    if checked == 0:
        raise CommandError(nothing_selected(args.mask, args, skipped, "ndim >= 2"))
    report_skipped(skipped)
    kind = "at most" if args.relaxed else "exactly"
    where = " in every row and column of every tile" if args.transposable else ""
    print(f"OK: {checked} tensor(s) keep {kind} {pattern.n} of every {pattern.m}{where}")
    return 0


def _check_all(
    args: argparse.Namespace, pattern: Pattern, skipped: list[str], progress: WorkProgress
) -> int | None:
    """Check every selected tensor; the exit status of the first invalid one, else None."""
    for record in selected_records(args.mask, args, need_float=False, skipped=skipped):
        layout = resolved_layout(args, record.array.ndim)
        size = stored_bytes(record.array.shape, record.source_dtype)
        if args.transposable:
            status = _check_transposable(record, layout, pattern, args)
            if status:
                return status
            progress.advance(record.name, size, tile_count(record.array.shape, args))
            continue
        try:
            matrix = to_reduction_matrix(record.array, layout)
            violations = nm_violations(
                matrix, pattern.n, pattern.m, exact=not args.relaxed, remainder=args.remainder
            )
        except (ValueError, TypeError) as error:
            raise CommandError(
                f"tensor {record.name!r} {tuple(record.array.shape)}: {error}"
            ) from error
        if len(violations):
            row, group = (int(i) for i in violations[0])
            entries = matrix[row, group * pattern.m : (group + 1) * pattern.m]
            kept = int(np.count_nonzero(entries))
            rule = f"at most {pattern.n}" if args.relaxed else f"exactly {pattern.n}"
            where = _describe_group(record.array.shape, layout, row, group, pattern.m)
            over = nm_violations(
                matrix, pattern.n, pattern.m, exact=False, remainder=args.remainder
            )
            print(
                f"INVALID: tensor {record.name!r}: {where} keeps {kept} of {pattern.m}, "
                f"expected {rule} ({len(violations)} violating group(s) in this tensor)"
                + _relaxed_hint(args, len(over) == 0),
                file=sys.stderr,
            )
            return 1
        progress.advance(record.name, size)
    return None


def _describe_group(shape: tuple[int, ...], layout: str, row: int, group: int, m: int) -> str:
    """Name a group by its matrix coordinates and the original index of its first entry."""
    flat_indices = to_reduction_matrix(np.arange(int(np.prod(shape))).reshape(shape), layout)
    first = np.unravel_index(int(flat_indices[row, group * m]), shape)
    return (
        f"group {group} of row {row} of the {layout!r} [rows, reduction] matrix "
        f"(entries from index {tuple(int(i) for i in first)})"
    )


def _check_transposable(
    record: TensorRecord, layout: str, pattern: Pattern, args: argparse.Namespace
) -> int:
    """Check one tensor's aligned m x m tiles; print the first bad tile and return 1 if any."""
    n, m = pattern
    try:
        matrix = to_reduction_matrix(record.array, layout)
        rows, columns = matrix.shape
        if rows % m or columns % m:
            raise ValueError(
                f"[rows, reduction] matrix {matrix.shape} of layout {layout!r} must have both "
                f"dimensions multiples of m={m} for m x m tiles"
            )
    except (ValueError, TypeError) as error:
        raise CommandError(
            f"tensor {record.name!r} {tuple(record.array.shape)}: {error}"
        ) from error
    kept = (matrix != 0).reshape(rows // m, m, columns // m, m)
    row_counts = kept.sum(axis=3)  # (tile row, row in tile, tile column)
    column_counts = kept.sum(axis=1)  # (tile row, tile column, column in tile)
    if args.relaxed:
        bad = (row_counts > n).any(axis=1) | (column_counts > n).any(axis=2)
    else:
        bad = (row_counts != n).any(axis=1) | (column_counts != n).any(axis=2)
    if not bad.any():
        if args.weights is not None:
            _print_optimality_gap(record.name, matrix, layout, pattern, args)
        return 0
    tile_row, tile_column = (int(i) for i in np.argwhere(bad)[0])
    rule = f"at most {n}" if args.relaxed else f"exactly {n}"
    print(
        f"INVALID: tensor {record.name!r}: tile ({tile_row}, {tile_column}) of the {layout!r} "
        f"[rows, reduction] matrix (rows {tile_row * m}..{tile_row * m + m - 1}, columns "
        f"{tile_column * m}..{tile_column * m + m - 1}) keeps row counts "
        f"{row_counts[tile_row, :, tile_column].tolist()} and column counts "
        f"{column_counts[tile_row, tile_column].tolist()}, expected {rule} each "
        f"({int(bad.sum())} violating tile(s) in this tensor)"
        + _relaxed_hint(args, bool((row_counts <= n).all() and (column_counts <= n).all())),
        file=sys.stderr,
    )
    return 1


def _relaxed_hint(args: argparse.Namespace, never_over: bool) -> str:
    """A reminder that ``--relaxed`` exists, when every violation keeps fewer than N."""
    if args.relaxed or not never_over:
        return ""
    return (
        "; every group keeps at most N (an under-filled mask, as greedy transposable "
        "masks are): --relaxed accepts at most N kept, which the sparse hardware runs"
    )


def _print_optimality_gap(
    name: str, matrix: np.ndarray, layout: str, pattern: Pattern, args: argparse.Namespace
) -> None:
    """Print how much |w| the mask keeps below the exact transposable optimum."""
    from nmref.transposable import optimality_gap, transposable_optimum

    weights = args.weight_tensors.get(name)
    if weights is None:
        raise CommandError(f"--weights {args.weights!r} has no tensor named {name!r}")
    try:
        scores = np.abs(to_reduction_matrix(weights, layout))
        if scores.shape != matrix.shape:
            raise ValueError(f"weights have shape {weights.shape}, the mask {matrix.shape}")
        # --relaxed accepts at most N kept: measure against the at-most optimum, so the gap
        # of an under-filled (greedy) mask is never negative (specs/transposable.md T6)
        fill = "at_most" if args.relaxed else "exact"
        gap = optimality_gap(scores, matrix != 0, pattern.n, pattern.m, fill=fill)
        optimum = float(transposable_optimum(scores, pattern.n, pattern.m, fill=fill).sum())
    except (ValueError, TypeError) as error:
        raise CommandError(f"tensor {name!r}: {error}") from error
    relative = gap.total / optimum if optimum else 0.0
    print(
        f"{name}: optimality gap {gap.total:.6g} ({relative:.4%} of the optimal kept |w| "
        f"{optimum:.6g}, {'at most' if args.relaxed else 'exactly'} {pattern.n} per row and "
        f"column); worst tile {float(gap.per_tile.max(initial=0.0)):.6g}"
    )


class _LazyWeights:
    """``--weights`` of a model folder: each tensor read when its mask is checked."""

    def __init__(self, model: object) -> None:
        self.model = model
        self.names = {info.name for info in model.infos()}  # type: ignore[attr-defined]

    def get(self, name: str) -> np.ndarray | None:
        if name not in self.names:
            return None
        return np.asarray(self.model.read(name).array)  # type: ignore[attr-defined]
