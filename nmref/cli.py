"""The ``nmref`` command line: compute and check N:M masks of tensor files.

``nmref mask IN --pattern 2:4 -o OUT``
    Write the N:M magnitude mask (or, with ``--apply``, the masked weights) of
    every eligible tensor of ``IN``.
``nmref mask IN --pattern 4:8 --transposable [--method exact] -o OUT``
    Transposable masks: n kept per row and per column of every aligned m x m
    tile of the layout's ``[rows, reduction]`` matrix (``specs/transposable.md``).
``nmref check MASK --pattern 2:4 [--transposable]``
    Exit 0 when every eligible tensor of ``MASK`` is N:M (nonzero = kept), else
    exit 1 naming the first violating tensor and group.
``nmref audit IN --pattern 8:16 [--methods ...] [--json]``
    Audit transposable methods (nmref's and labelled peers) against certified
    optima: validity, gap distribution, time (``specs/audit.md``).
``nmref permute MODEL --pattern 2:4 -o OUT``
    Permute the channels of a model folder (``config.json`` + ``model.safetensors``)
    whose layer pairing is known (LLaMA-style MLP and attention v/o), so that N:M
    pruning keeps more magnitude and the model computes the same function; print
    the kept magnitude per layer before and after (``specs/permutation.md``, P10).
``nmref demo``
    Mask and check a small built-in example checkpoint.

Eligible tensors have ``ndim >= 2`` (weights of GEMMs); ``mask`` also requires a
floating dtype. ``--include`` / ``--exclude`` filter tensor names by regular
expression. Errors are one line on stderr and exit status 2.

``IN`` (and ``MASK``, ``--weights``) may be a Hugging Face model folder or a
``*.safetensors.index.json`` (:mod:`nmref.sharded`): the index is validated, tensors
are read one at a time, and ``mask`` writes a sharded ``-o`` folder with its own
index (or, for ``-o`` ending in a tensor-file suffix, one file). ``--scheduler
ADDRESS`` / ``--workers N`` compute the masks on a Dask cluster
(:mod:`nmref.distributed`), the same bits. A progress bar and a summary line go to
stderr when it is a terminal (``--quiet``: none).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from nmref._output import check_output, check_output_folder
from nmref._progress import WorkProgress, stored_bytes
from nmref.checkpoints import FORMATS, TensorInfo, TensorRecord, iter_tensors, write_tensors
from nmref.layouts import LAYOUTS, default_layout, to_reduction_matrix
from nmref.masks import magnitude_mask, nm_violations
from nmref.patterns import Pattern, parse_pattern


class CommandError(Exception):
    """An error reported to the user as one line, exit status 2."""


def _pattern(text: str) -> Pattern:
    try:
        return parse_pattern(text)
    except (ValueError, TypeError) as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {error}") from error


def _selected(
    path: str, args: argparse.Namespace, *, need_float: bool, skipped: list[str]
) -> Iterator[TensorRecord]:
    from nmref.sharded import iter_input

    args.filtered_out = 0
    for record in iter_input(path):
        if not _passes_filters(record.name, args):
            args.filtered_out += 1
            continue
        if record.array.ndim < 2:
            skipped.append(f"{record.name} (ndim={record.array.ndim})")
            continue
        if need_float and record.array.dtype.kind != "f":
            skipped.append(f"{record.name} (dtype={record.source_dtype})")
            continue
        yield record


def _progress_for(
    path: str, args: argparse.Namespace, *, need_float: bool, label: str
) -> WorkProgress:
    """A progress bar over the tensors :func:`_selected` will yield (headers only)."""
    from nmref._progress import WorkProgress, stored_bytes
    from nmref.checkpoints import list_tensors
    from nmref.sharded import is_model_input, open_model

    infos = open_model(path).infos() if is_model_input(path) else list_tensors(path)
    chosen = [
        info
        for info in infos
        if _passes_filters(info.name, args)
        and len(info.shape) >= 2
        and (not need_float or info.source_dtype in _MASKABLE)
    ]
    tiles = sum(_tiles(info.shape, args) for info in chosen)
    total = sum(stored_bytes(info.shape, info.source_dtype) for info in chosen)
    return WorkProgress(label, len(chosen), total, tiles, quiet=args.quiet)


def _tiles(shape: tuple[int, ...], args: argparse.Namespace) -> int:
    """M x M tiles of a tensor (the exact transposable solver's unit of work), else 0."""
    if not args.transposable:
        return 0
    count = 1
    for size in shape:
        count *= int(size)
    return count // (args.pattern.m * args.pattern.m)


def _nothing_selected(path: str, args: argparse.Namespace, skipped: list[str], need: str) -> str:
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
    return f"no eligible tensor in {path!r} (need {need})"


def _layout(args: argparse.Namespace, ndim: int) -> str:
    return default_layout(ndim) if args.layout == "auto" else args.layout


def _report_skipped(skipped: list[str]) -> None:
    if skipped:
        more = f", ... ({len(skipped) - 5} more)" if len(skipped) > 5 else ""
        shown = ", ".join(skipped[:5]) + more
        print(f"skipped {len(skipped)} tensor(s) not eligible: {shown}", file=sys.stderr)


def _mask_of(record: TensorRecord, args: argparse.Namespace) -> np.ndarray:
    """The mask (or, with ``--apply``, the masked weights) of one tensor."""
    pattern: Pattern = args.pattern
    layout = _layout(args, record.array.ndim)
    try:
        if args.transposable:
            from nmref.transposable import transposable_weight_mask

            mask = transposable_weight_mask(
                record.array, pattern.n, pattern.m, layout=layout, method=args.method
            )
        else:
            mask = magnitude_mask(
                record.array, pattern.n, pattern.m, layout=layout, remainder=args.remainder
            )
    except (ValueError, TypeError) as error:
        raise CommandError(
            f"tensor {record.name!r} {tuple(record.array.shape)}: {error}"
        ) from error
    return np.where(mask, record.array, 0) if args.apply else mask


#: Stored dtypes ``nmref mask`` computes masks of (the float dtypes the readers give).
_MASKABLE = ("float16", "bfloat16", "float32", "float64")


def _distributed(args: argparse.Namespace) -> bool:
    """Whether ``nmref mask`` runs on a Dask cluster (``--scheduler``, or ``--workers`` > 1)."""
    return args.scheduler is not None or args.workers > 1


@contextlib.contextmanager
def _masks_in_order(
    args: argparse.Namespace, items: list[tuple[str, TensorInfo]]
) -> Iterator[Callable[[str], np.ndarray]]:
    """``compute(name)`` for ``items`` (``(path, info)``), called in their order.

    On a Dask cluster (:mod:`nmref.distributed`) the masks are computed ahead by the
    workers, large tensors in row bands; here, one at a time. The same bits either way.
    """
    from nmref.checkpoints import read_tensor

    paths = {info.name: path for path, info in items}
    if not _distributed(args):
        yield lambda name: _mask_of(read_tensor(paths[name], name), args)
        return
    from nmref.distributed import MaskOptions, dask_client, distributed_masks

    pattern: Pattern = args.pattern
    options = MaskOptions(
        pattern.n, pattern.m, args.layout, args.transposable, args.method, args.remainder
    )
    shapes = {info.name: tuple(info.shape) for _, info in items}
    with dask_client(args.scheduler, args.workers) as client:
        stream = distributed_masks(
            client, [(path, info.name, info.shape) for path, info in items], options
        )

        def compute(name: str) -> np.ndarray:
            try:
                got, mask = next(stream)
            except (ValueError, TypeError) as error:
                raise CommandError(f"tensor {name!r} {shapes[name]}: {error}") from error
            if got != name:  # pragma: no cover - the stream keeps the order it was given
                raise RuntimeError(f"distributed masks out of order: {got!r} for {name!r}")
            if args.apply:
                return np.where(mask, read_tensor(paths[name], name).array, 0)
            return mask

        yield compute


def _passes_filters(name: str, args: argparse.Namespace) -> bool:
    if args.include is not None and not args.include.search(name):
        return False
    return args.exclude is None or not args.exclude.search(name)


def _maskable(info: TensorInfo, args: argparse.Namespace, skipped: list[str]) -> bool:
    """Whether ``nmref mask`` masks this tensor; counts what the filters leave out in
    ``args.filtered_out`` and records why a selected tensor is skipped."""
    if not _passes_filters(info.name, args):
        args.filtered_out += 1
    elif len(info.shape) < 2:
        skipped.append(f"{info.name} (ndim={len(info.shape)})")
    elif info.source_dtype not in _MASKABLE:
        skipped.append(f"{info.name} (dtype={info.source_dtype})")
    else:
        return True
    return False


def _run_mask_sharded(args: argparse.Namespace) -> int:
    """``nmref mask MODEL_FOLDER -o OUT_FOLDER``: a sharded output with its own index.

    Tensors are planned from the shards' headers, then read, masked and written one
    at a time (memory: one tensor); the folder appears whole or not at all.
    """
    from nmref._safetensors_writer import PlannedTensor
    from nmref.sharded import open_model, write_model

    pattern: Pattern = args.pattern
    check_output_folder(args.output, force=args.force, inputs=(args.input,), flag="-o")
    model = open_model(args.input)
    skipped: list[str] = []
    args.filtered_out = 0
    planned: list[tuple[str, PlannedTensor]] = []
    sizes: dict[str, int] = {}
    for info, shard in model.tensors:
        if _maskable(info, args, skipped):
            dtype = info.source_dtype if args.apply else "bool"
            planned.append((shard, PlannedTensor(info.name, info.shape, dtype)))
            sizes[info.name] = stored_bytes(info.shape, info.source_dtype)
    if not planned:
        raise CommandError(
            _nothing_selected(args.input, args, skipped, "ndim >= 2 and a float dtype")
        )
    what = "masked weights" if args.apply else "masks"
    metadata = {
        "nmref": f"{what}, pattern {pattern}" + (" transposable" if args.transposable else "")
    }
    tiles = {t.name: _tiles(t.shape, args) for _, t in planned}
    progress = WorkProgress(
        "masking", len(planned), sum(sizes.values()), sum(tiles.values()), quiet=args.quiet
    )
    items = [(str(model.root / shard), info) for info, shard in model.tensors if info.name in sizes]
    with _masks_in_order(args, items) as compute, progress:
        written = write_model(
            args.output,
            model,
            planned,
            compute,
            force=args.force,
            metadata=metadata,
            copy_config=args.apply,
            on_tensor=lambda name: progress.advance(name, sizes[name], tiles[name]),
        )
    progress.print_summary()
    _report_skipped(skipped)
    shards = sum(path.suffix == ".safetensors" for path in written)
    print(
        f"wrote {what} of {len(planned)} tensor(s) in {shards} shard(s), pattern {pattern}, "
        f"to {Path(args.output)}"
    )
    return 0


def run_mask(args: argparse.Namespace) -> int:
    """``nmref mask``: compute masks of every eligible tensor and write them atomically."""
    from nmref.sharded import is_model_input

    pattern: Pattern = args.pattern
    if args.workers < 1:
        raise CommandError(f"--workers {args.workers} must be >= 1")
    if is_model_input(args.input) and Path(args.output).suffix.lower() not in FORMATS:
        return _run_mask_sharded(args)
    # Fail before the work when the output cannot be written (checked again on writing).
    check_output(args.output, force=args.force, inputs=(args.input,), flag="-o")
    if Path(args.output).suffix.lower() == ".safetensors" and (
        is_model_input(args.input) or Path(args.input).suffix.lower() == ".safetensors"
    ):
        return _run_mask_streamed(args)
    skipped: list[str] = []
    outputs: dict[str, np.ndarray] = {}
    progress = _progress_for(args.input, args, need_float=True, label="masking")
    if _distributed(args):
        items = _listed(args, skipped)
        with _masks_in_order(args, items) as compute, progress:
            for _, info in items:
                outputs[info.name] = compute(info.name)
                progress.advance(
                    info.name, stored_bytes(info.shape, info.source_dtype), _tiles(info.shape, args)
                )
    else:
        progress = _masked_here(args, outputs, skipped, progress)
    progress.print_summary()
    if not outputs:
        raise CommandError(
            _nothing_selected(args.input, args, skipped, "ndim >= 2 and a float dtype")
        )
    written = write_tensors(
        args.output, outputs, inputs=(args.input,), overwrite=args.force, flag="-o"
    )
    _report_skipped(skipped)
    what = "masked weights" if args.apply else "masks"
    print(f"wrote {what} of {len(outputs)} tensor(s), pattern {pattern}, to {written}")
    return 0


def _run_mask_streamed(args: argparse.Namespace) -> int:
    """``.safetensors`` (or model) in, one ``.safetensors`` out, one tensor in memory at a time.

    The output's tensors are planned from the input's headers and streamed into the
    file as they are computed (:mod:`nmref._safetensors_writer`), so memory is one
    tensor, not the model. Same tensors and values as holding them all: masks are
    ``bool``; masked weights have the dtype ``np.where(mask, weights, 0)`` gives (BF16
    read as its float32 upcast stays float32, as ever for a single-file output).
    """
    from nmref._safetensors_writer import PlannedTensor, stream_safetensors

    pattern: Pattern = args.pattern
    skipped: list[str] = []
    items = _listed(args, skipped)
    if not items:
        raise CommandError(
            _nothing_selected(args.input, args, skipped, "ndim >= 2 and a float dtype")
        )
    planned = [
        PlannedTensor(
            info.name, info.shape, _masked_dtype(info.source_dtype) if args.apply else "bool"
        )
        for _, info in items
    ]
    sizes = {info.name: stored_bytes(info.shape, info.source_dtype) for _, info in items}
    progress = WorkProgress(
        "masking",
        len(items),
        sum(sizes.values()),
        sum(_tiles(info.shape, args) for _, info in items),
        quiet=args.quiet,
    )

    def arrays(compute: Callable[[str], np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        for _, info in items:
            array = compute(info.name)
            progress.advance(info.name, sizes[info.name], _tiles(info.shape, args))
            yield info.name, array

    from nmref._output import write_output

    with _masks_in_order(args, items) as compute, progress:
        written = write_output(
            args.output,
            lambda temporary: stream_safetensors(temporary, planned, arrays(compute)),
            force=args.force,
            inputs=(args.input,),
            flag="-o",
        )
    progress.print_summary()
    _report_skipped(skipped)
    what = "masked weights" if args.apply else "masks"
    print(f"wrote {what} of {len(items)} tensor(s), pattern {pattern}, to {written}")
    return 0


def _masked_dtype(source_dtype: str) -> str:
    """The dtype of ``np.where(mask, weights, 0)`` for weights read from ``source_dtype``."""
    return "float32" if source_dtype == "bfloat16" else source_dtype


def _listed(args: argparse.Namespace, skipped: list[str]) -> list[tuple[str, TensorInfo]]:
    """The eligible tensors of ``args.input`` from its headers (the cluster reads the data)."""
    from nmref.checkpoints import list_tensors
    from nmref.sharded import is_model_input, open_model

    if is_model_input(args.input):
        model = open_model(args.input)
        listing = [(str(model.root / shard), info) for info, shard in model.tensors]
    else:
        listing = [(args.input, info) for info in list_tensors(args.input)]
    args.filtered_out = 0
    items = []
    for path, info in listing:
        if _maskable(info, args, skipped):
            items.append((path, info))
    return items


def _masked_here(
    args: argparse.Namespace,
    outputs: dict[str, np.ndarray],
    skipped: list[str],
    progress: WorkProgress,
) -> WorkProgress:
    """Mask every selected tensor of ``args.input`` in this process, one at a time."""
    with progress:
        for record in _selected(args.input, args, need_float=True, skipped=skipped):
            outputs[record.name] = _mask_of(record, args)
            progress.advance(
                record.name,
                stored_bytes(record.array.shape, record.source_dtype),
                _tiles(record.array.shape, args),
            )
    return progress


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


def run_check(args: argparse.Namespace) -> int:
    """``nmref check``: exit 0 if every eligible tensor is N:M, 1 naming the first violation."""
    from nmref.sharded import is_model_input, iter_input, open_model

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
    progress = _progress_for(args.mask, args, need_float=False, label="checking")
    with progress:
        status = _check_all(args, pattern, skipped, progress)
    if status is not None:
        return status
    progress.print_summary()
    checked = progress.done_tensors
    if checked == 0:
        raise CommandError(_nothing_selected(args.mask, args, skipped, "ndim >= 2"))
    _report_skipped(skipped)
    kind = "at most" if args.relaxed else "exactly"
    where = " in every row and column of every tile" if args.transposable else ""
    print(f"OK: {checked} tensor(s) keep {kind} {pattern.n} of every {pattern.m}{where}")
    return 0


def _check_all(
    args: argparse.Namespace, pattern: Pattern, skipped: list[str], progress: WorkProgress
) -> int | None:
    """Check every selected tensor; the exit status of the first invalid one, else None."""
    for record in _selected(args.mask, args, need_float=False, skipped=skipped):
        layout = _layout(args, record.array.ndim)
        size = stored_bytes(record.array.shape, record.source_dtype)
        if args.transposable:
            status = _check_transposable(record, layout, pattern, args)
            if status:
                return status
            progress.advance(record.name, size, _tiles(record.array.shape, args))
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


def run_permute(args: argparse.Namespace) -> int:
    """``nmref permute``: channel permutations of a model folder, written atomically."""
    import json

    from nmref.checkpoints import check_regular_file
    from nmref.permutation.checkpoint import LLAMA_STYLE, permute_checkpoint

    folder = Path(args.model)
    if not folder.is_dir():
        raise CommandError(f"MODEL {args.model!r} must be a model folder (config.json and "
                           "model.safetensors)")  # fmt: skip
    config_path, weights_path = folder / "config.json", folder / "model.safetensors"
    for path in (config_path, weights_path):
        if not path.exists():
            raise CommandError(f"MODEL {args.model!r} has no {path.name}")
        check_regular_file(path, f"{path.name} of MODEL {args.model!r}", noun="file")
    if args.block_stripes < 0:
        raise CommandError(f"--block-stripes {args.block_stripes} must be >= 0 (0: no blocks)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommandError(f"{str(config_path)!r} is not valid JSON: {error}") from error
    if not isinstance(config, dict):
        raise CommandError(f"{str(config_path)!r} must hold a JSON object")
    check_output(args.output, force=args.force, inputs=(str(weights_path),), flag="-o")
    records = list(iter_tensors(weights_path))
    tensors = {record.name: record.array for record in records}
    try:
        result = permute_checkpoint(
            tensors,
            config,
            args.pattern,
            method=args.method,
            block_stripes=args.block_stripes or None,
        )
    except (ValueError, TypeError) as error:
        raise CommandError(f"{weights_path}: {error}") from error
    written = write_tensors(
        args.output, result.tensors, inputs=(str(weights_path),), overwrite=args.force, flag="-o"
    )
    model_type = config.get("model_type")
    print(f"pattern {args.pattern}, method {args.method}, model_type {model_type!r}")
    if result.layers:
        print(f"{'permuted weight':<44} {'kept before':>12} {'kept after':>12} {'efficacy':>9}")
    for layer in result.layers:
        before, after = layer.kept_before / layer.total, layer.kept_after / layer.total
        print(f"{layer.name:<44} {before:12.4%} {after:12.4%} {layer.efficacy:9.1%}"
              f"   (with {', '.join(layer.partners)})")  # fmt: skip
    why = (
        "no permutation rule for this tensor"
        if model_type in LLAMA_STYLE
        else f"pairing unknown for model_type {model_type!r} (known: {', '.join(LLAMA_STYLE)})"
    )
    for name in result.unknown:
        print(f"not permuted: {name!r}: {why}")
    print(f"wrote {len(result.tensors)} tensor(s) ({len(result.layers)} layer pair(s) permuted) "
          f"to {written}")  # fmt: skip
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """``nmref demo``: write a small example checkpoint, mask it 2:4 and check the result."""
    rng = np.random.default_rng(2021)
    # Synthetic, seeded weights: one Linear and one 3x3 convolution.
    example = {
        "linear.weight": rng.standard_normal((8, 16)).astype(np.float32),
        "conv.weight": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
    }
    directory = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nmref-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    weights = write_tensors(directory / "example.npz", example, overwrite=True)
    print(f"example checkpoint (synthetic, seeded): {weights}")
    masks = directory / "example-mask-2of4.npz"
    steps = [
        ["mask", str(weights), "--pattern", "2:4", "-o", str(masks), "--force"],
        ["check", str(masks), "--pattern", "2:4"],
    ]
    for step in steps:
        print("$ nmref " + " ".join(step))
        status = main(step)
        if status != 0:
            return status
    linear = example["linear.weight"]
    mask = dict((r.name, r.array) for r in iter_tensors(masks))["linear.weight"]
    kept = float(np.abs(linear[mask]).sum() / np.abs(linear).sum())
    print(f"linear.weight keeps {kept:.1%} of its L1 magnitude at 2:4")
    print("first row |w|:", np.array2string(np.abs(linear[0]), precision=2))
    print("first row mask:", mask[0].astype(int))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Build the ``nmref`` argument parser."""
    from nmref import __version__

    parser = argparse.ArgumentParser(prog="nmref", description="Exact N:M sparsity masks.")
    parser.add_argument("--version", action="version", version=f"nmref {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add_filters(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--pattern", type=_pattern, required=True, help="N:M, N kept of M, e.g. 2:4"
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
        sub.add_argument("--include", type=_regex, help="only tensors whose name matches")
        sub.add_argument("--exclude", type=_regex, help="skip tensors whose name matches")

    mask = subparsers.add_parser("mask", help="compute N:M magnitude masks of a tensor file")
    mask.add_argument(
        "input",
        help=".npy, .npz or .safetensors file, a model folder or a *.safetensors.index.json",
    )
    mask.add_argument(
        "-o",
        "--output",
        required=True,
        help="output file (.npy/.npz/.safetensors); for a model folder input, a folder "
        "(sharded like the input, with its own index)",
    )
    add_filters(mask)
    mask.add_argument(
        "--transposable",
        action="store_true",
        help="transposable N:M: n per row and per column of every aligned m x m tile",
    )
    mask.add_argument(
        "--method",
        choices=("exact", "greedy", "greedy-prune", "brute"),
        default="exact",
        help="transposable solver (default exact; see specs/transposable.md)",
    )
    mask.add_argument("--apply", action="store_true", help="write masked weights, not masks")
    mask.add_argument("--force", action="store_true", help="replace an existing output")
    mask.add_argument("--quiet", action="store_true", help="no progress bar")
    mask.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on a dask.distributed cluster (tcp://host:8786), or 'local' for a local "
        "cluster of --workers processes; identical output (needs the [dask] extra)",
    )
    mask.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="N > 1: a local Dask cluster of N single-threaded worker processes",
    )
    mask.set_defaults(func=run_mask)

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

    from nmref.audit.command import add_audit_parser

    add_audit_parser(subparsers, add_filters)
    permute = subparsers.add_parser(
        "permute", help="permute the channels of a model folder for N:M (same function)"
    )
    permute.add_argument("model", help="folder with config.json and model.safetensors")
    permute.add_argument("-o", "--output", required=True, help="output .safetensors/.npz file")
    permute.add_argument(
        "--pattern", type=_pattern, required=True, help="N:M, N kept of M, e.g. 2:4"
    )
    permute.add_argument("--method", choices=("stripes", "swaps"), default="stripes",
                         help="search (specs/permutation.md P5; default stripes)")  # fmt: skip
    permute.add_argument(
        "--block-stripes", type=int, default=8,
        help="stripe groups within blocks of this many stripes (P6; default 8; 0: no blocks)",
    )  # fmt: skip
    permute.add_argument("--force", action="store_true", help="replace an existing output")
    permute.set_defaults(func=run_permute)

    demo = subparsers.add_parser("demo", help="mask and check a small built-in example")
    demo.add_argument("--out", help="folder for the example files (default: a temporary one)")
    demo.set_defaults(func=run_demo)

    from nmref.explain import add_parser as add_explain

    add_explain(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``nmref``; returns the exit status (0 ok, 1 invalid mask, 2 error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    from nmref._compile_notice import compile_notice

    try:
        with compile_notice("nmref", quiet=getattr(args, "quiet", False)):
            return int(args.func(args))
    except ImportError as error:
        # an optional dependency the command needs is missing: the environment, not the input
        print(f"nmref: error: {error}", file=sys.stderr)
        return 3
    except (CommandError, ValueError, TypeError, OSError) as error:
        from nmref._cli_messages import in_flag_words

        print(f"nmref: error: {in_flag_words(str(error), parser)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nmref: interrupted", file=sys.stderr)
        return 130
