"""Helpers every ``nmref`` command shares: the one-line error, argument types, the tensor
filters and the eligibility rule, the progress bar over selected tensors.

Public inside :mod:`nmref.cli` (the command modules import them); not part of the library's API.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Iterator

from nmref.cli.messages import pattern_argument
from nmref.io.checkpoints import TensorRecord
from nmref.io.narrow_floats import NARROW_FLOATS
from nmref.io.printable import printable
from nmref.io.progress import WorkProgress
from nmref.io.selection import embedding_skip_reason
from nmref.layouts import LAYOUTS, default_layout

__all__ = [
    "MASKABLE",
    "CommandError",
    "add_filters",
    "default_skip_reason",
    "masked_dtype",
    "nothing_selected",
    "passes_filters",
    "pattern_argument",
    "progress_for",
    "regex_argument",
    "report_skipped",
    "resolved_layout",
    "selected_records",
    "tensor_error",
    "tile_count",
]


class CommandError(Exception):
    """An error reported to the user as one line, exit status 2."""


#: Stored dtypes ``nmref mask`` computes masks of (the float dtypes the readers give; bfloat16,
#: float8 and float4 are read as their exact float32 values).
MASKABLE = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    *(narrow.name for narrow in NARROW_FLOATS.values()),
)


def masked_dtype(source_dtype: str) -> str:
    """The dtype of ``np.where(mask, weights, 0)`` for weights read from ``source_dtype``: the
    stored dtype a command writes masked (or reconstructed) weights in."""
    # bfloat16, float8 and float4 are read as float32 (nmref.io.checkpoints)
    return source_dtype if source_dtype in ("float16", "float32", "float64") else "float32"


def regex_argument(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {error}") from error


def add_filters(sub: argparse.ArgumentParser, *, weights: bool = False) -> None:
    """Add ``--pattern``, ``--layout``, ``--remainder``, ``--include``, ``--exclude``, and for a
    command that reads weights (``weights=True``) ``--embeddings``
    (:mod:`nmref.io.selection`, the rule ``nmsim report`` applies too)."""
    sub.add_argument(
        "--pattern", type=pattern_argument, required=True, help="N:M, N kept of M, e.g. 2:4"
    )
    sub.add_argument(
        "--layout",
        choices=("auto", *LAYOUTS),
        default="auto",
        help="grouping of each tensor (auto: linear for 2-D, channels for conv)",
    )
    sub.add_argument(
        "--remainder",
        choices=("error", "pad"),
        default="error",
        help="a reduction length not a multiple of M: error, or pad the last group",
    )
    sub.add_argument("--include", type=regex_argument, help="only tensors whose name matches")
    sub.add_argument("--exclude", type=regex_argument, help="skip tensors whose name matches")
    if weights:
        sub.add_argument(
            "--embeddings",
            action="store_true",
            help="also select embedding tables (names containing 'embed'), left out by default "
            "as in nmsim report",
        )


def passes_filters(name: str, args: argparse.Namespace) -> bool:
    if args.include is not None and not args.include.search(name):
        return False
    return args.exclude is None or not args.exclude.search(name)


def default_skip_reason(name: str, args: argparse.Namespace) -> str | None:
    """Why the default selection leaves out a tensor the name filters passed, or ``None``.

    Commands that read weights have ``--embeddings``; a command without it (``check`` reads
    masks) checks every tensor it is given.
    """
    return embedding_skip_reason(name, embeddings=getattr(args, "embeddings", True))


def tensor_error(name: str, shape: tuple[int, ...], error: Exception) -> CommandError:
    """The one-line error for a tensor the command cannot process, naming ``--exclude``."""
    exclude = shlex.quote(f"^{re.escape(name)}$")
    return CommandError(
        f"tensor {name!r} {tuple(shape)}: {error}; leave it out with --exclude {exclude}"
    )


def selected_records(
    path: str, args: argparse.Namespace, *, need_float: bool, skipped: list[str]
) -> Iterator[TensorRecord]:
    from nmref.io.sharded import iter_input

    args.filtered_out = 0
    for record in iter_input(path):
        if not passes_filters(record.name, args):
            args.filtered_out += 1
            continue
        reason = default_skip_reason(record.name, args)
        if reason is not None:
            skipped.append(f"{record.name} ({reason})")
            continue
        if record.array.ndim < 2:
            skipped.append(f"{record.name} (ndim={record.array.ndim})")
            continue
        if need_float and record.array.dtype.kind != "f":
            skipped.append(f"{record.name} (dtype={record.source_dtype})")
            continue
        yield record


def progress_for(
    path: str, args: argparse.Namespace, *, need_float: bool, label: str
) -> WorkProgress:
    """A progress bar over the tensors :func:`selected_records` will yield (headers only)."""
    from nmref.io.checkpoints import list_tensors
    from nmref.io.progress import WorkProgress, stored_bytes
    from nmref.io.sharded import is_model_input, open_model

    infos = open_model(path).infos() if is_model_input(path) else list_tensors(path)
    chosen = [
        info
        for info in infos
        if passes_filters(info.name, args)
        and default_skip_reason(info.name, args) is None
        and len(info.shape) >= 2
        and (not need_float or info.source_dtype in MASKABLE)
    ]
    tiles = sum(tile_count(info.shape, args) for info in chosen)
    total = sum(stored_bytes(info.shape, info.source_dtype) for info in chosen)
    return WorkProgress(label, len(chosen), total, tiles, quiet=args.quiet)


def tile_count(shape: tuple[int, ...], args: argparse.Namespace) -> int:
    """M x M tiles of a tensor (the exact transposable solver's unit of work), else 0."""
    if not args.transposable:
        return 0
    count = 1
    for size in shape:
        count *= int(size)
    return count // (args.pattern.m * args.pattern.m)


def nothing_selected(path: str, args: argparse.Namespace, skipped: list[str], need: str) -> str:
    """Why no tensor was processed: the name filters, or the eligibility rule."""
    if not skipped and args.filtered_out:
        filters = " and ".join(
            f"--{flag} {getattr(args, flag).pattern!r}"
            for flag in ("include", "exclude")
            if getattr(args, flag) is not None
        )
        return (
            f"no tensor of {path!r} passes {filters} ({args.filtered_out} tensor(s) "
            "filtered out by name)"
        )
    if skipped:
        more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        return f"no eligible tensor in {path!r} (need {need}); skipped {skipped[0]}{more}"
    return f"no eligible tensor in {path!r} (need {need})"


def resolved_layout(args: argparse.Namespace, ndim: int) -> str:
    return default_layout(ndim) if args.layout == "auto" else args.layout


def report_skipped(skipped: list[str]) -> None:
    if skipped:
        more = f", ... ({len(skipped) - 5} more)" if len(skipped) > 5 else ""
        shown = ", ".join(skipped[:5]) + more
        # names come from files: a NUL or an escape byte is shown escaped, never raw
        print(f"skipped {len(skipped)} tensor(s) not eligible: {printable(shown)}", file=sys.stderr)
