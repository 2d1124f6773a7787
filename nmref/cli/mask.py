"""``nmref mask``: the N:M (or transposable) masks of every eligible tensor of a file or a
model folder, written atomically; on a Dask cluster when asked, the same bits."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from nmref.cli.common import (
    MASKABLE,
    CommandError,
    add_filters,
    default_skip_reason,
    masked_dtype,
    nothing_selected,
    passes_filters,
    progress_for,
    report_skipped,
    resolved_layout,
    selected_records,
    tensor_error,
    tile_count,
)
from nmref.io.checkpoints import FORMATS, TensorInfo, TensorRecord, write_tensors
from nmref.io.output import check_output, check_output_folder
from nmref.io.progress import WorkProgress, stored_bytes
from nmref.masks import magnitude_mask
from nmref.patterns import Pattern

__all__ = ["add_parser", "run_mask"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nmref mask`` to the ``nmref`` parser."""
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
    add_filters(mask, weights=True)
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
        help="N > 1: a local Dask cluster of N single-threaded worker processes (at most the "
        "CPU cores this process may use: more is capped, and said)",
    )
    mask.set_defaults(func=run_mask)


def run_mask(args: argparse.Namespace) -> int:
    """``nmref mask``: compute masks of every eligible tensor and write them atomically."""
    from nmref.io.sharded import is_model_input

    pattern: Pattern = args.pattern
    if args.workers < 1:
        raise CommandError(f"--workers {args.workers} must be >= 1")
    if args.scheduler in (None, "local", "local-threads"):
        from nmref.io.workers import capped_workers

        # a local cluster: never more worker processes than cores (one line says so)
        args.workers = capped_workers(args.workers)
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
    progress = progress_for(args.input, args, need_float=True, label="masking")
    if _distributed(args):
        items = _listed(args, skipped)
        with _masks_in_order(args, items) as compute, progress:
            for _, info in items:
                _keep(outputs, info.name, compute(info.name), args)
                progress.advance(
                    info.name,
                    stored_bytes(info.shape, info.source_dtype),
                    tile_count(info.shape, args),
                )
    else:
        progress = _masked_here(args, outputs, skipped, progress)
    progress.print_summary()
    if not outputs:
        raise CommandError(
            nothing_selected(args.input, args, skipped, "ndim >= 2 and a float dtype")
        )
    written = write_tensors(
        args.output, outputs, inputs=(args.input,), overwrite=args.force, flag="-o"
    )
    report_skipped(skipped)
    what = "masked weights" if args.apply else "masks"
    print(f"wrote {what} of {len(outputs)} tensor(s), pattern {pattern}, to {written}")
    return 0


def _mask_of(record: TensorRecord, args: argparse.Namespace) -> np.ndarray:
    """The mask (or, with ``--apply``, the masked weights) of one tensor."""
    pattern: Pattern = args.pattern
    layout = resolved_layout(args, record.array.ndim)
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
        raise tensor_error(record.name, record.array.shape, error) from error
    return np.where(mask, record.array, 0) if args.apply else mask


def _distributed(args: argparse.Namespace) -> bool:
    """Whether ``nmref mask`` runs on a Dask cluster (``--scheduler``, or ``--workers`` > 1)."""
    return args.scheduler is not None or args.workers > 1


@contextlib.contextmanager
def _masks_in_order(
    args: argparse.Namespace, items: list[tuple[str, TensorInfo]]
) -> Iterator[Callable[[str], np.ndarray]]:
    """``compute(name)`` for ``items`` (``(path, info)``), called in their order.

    On a Dask cluster (:mod:`nmref.io.distributed`) the masks are computed ahead by the
    workers, large tensors in row bands; here, one at a time. The same bits either way.
    """
    from nmref.io.checkpoints import read_tensor

    paths = {info.name: path for path, info in items}
    if not _distributed(args):
        yield lambda name: _mask_of(read_tensor(paths[name], name), args)
        return
    from nmref.io.distributed import MaskOptions, dask_client, distributed_masks

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
                raise tensor_error(name, shapes[name], error) from error
            if got != name:  # pragma: no cover - the stream keeps the order it was given
                raise RuntimeError(f"distributed masks out of order: {got!r} for {name!r}")
            if args.apply:
                return np.where(mask, read_tensor(paths[name], name).array, 0)
            return mask

        yield compute


def _maskable(info: TensorInfo, args: argparse.Namespace, skipped: list[str]) -> bool:
    """Whether ``nmref mask`` masks this tensor; counts what the filters leave out in
    ``args.filtered_out`` and records why a selected tensor is skipped."""
    if not passes_filters(info.name, args):
        args.filtered_out += 1
    elif (reason := default_skip_reason(info.name, args)) is not None:
        skipped.append(f"{info.name} ({reason})")
    elif len(info.shape) < 2:
        skipped.append(f"{info.name} (ndim={len(info.shape)})")
    elif info.source_dtype not in MASKABLE:
        skipped.append(f"{info.name} (dtype={info.source_dtype})")
    else:
        return True
    return False


def _run_mask_sharded(args: argparse.Namespace) -> int:
    """``nmref mask MODEL_FOLDER -o OUT_FOLDER``: a sharded output with its own index.

    Tensors are planned from the shards' headers, then read, masked and written one
    at a time (memory: one tensor); the folder appears whole or not at all.
    """
    from nmref.io.safetensors_writer import PlannedTensor
    from nmref.io.sharded import open_model, write_model

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
            nothing_selected(args.input, args, skipped, "ndim >= 2 and a float dtype")
        )
    what = "masked weights" if args.apply else "masks"
    metadata = {
        "nmref": f"{what}, pattern {pattern}" + (" transposable" if args.transposable else "")
    }
    tiles = {t.name: tile_count(t.shape, args) for _, t in planned}
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
    report_skipped(skipped)
    shards = sum(path.suffix == ".safetensors" for path in written)
    print(
        f"wrote {what} of {len(planned)} tensor(s) in {shards} shard(s), pattern {pattern}, "
        f"to {Path(args.output)}"
    )
    return 0


def _run_mask_streamed(args: argparse.Namespace) -> int:
    """``.safetensors`` (or model) in, one ``.safetensors`` out, one tensor in memory at a time.

    The output's tensors are planned from the input's headers and streamed into the
    file as they are computed (:mod:`nmref.io.safetensors_writer`), so memory is one
    tensor, not the model. Same tensors and values as holding them all: masks are
    ``bool``; masked weights have the dtype ``np.where(mask, weights, 0)`` gives (BF16
    read as its float32 upcast stays float32, as ever for a single-file output).
    """
    from nmref.io.safetensors_writer import PlannedTensor, stream_safetensors

    pattern: Pattern = args.pattern
    skipped: list[str] = []
    items = _listed(args, skipped)
    if not items:
        raise CommandError(
            nothing_selected(args.input, args, skipped, "ndim >= 2 and a float dtype")
        )
    planned = [
        PlannedTensor(
            info.name, info.shape, masked_dtype(info.source_dtype) if args.apply else "bool"
        )
        for _, info in items
    ]
    sizes = {info.name: stored_bytes(info.shape, info.source_dtype) for _, info in items}
    progress = WorkProgress(
        "masking",
        len(items),
        sum(sizes.values()),
        sum(tile_count(info.shape, args) for _, info in items),
        quiet=args.quiet,
    )

    def arrays(compute: Callable[[str], np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        for _, info in items:
            array = compute(info.name)
            progress.advance(info.name, sizes[info.name], tile_count(info.shape, args))
            yield info.name, array

    from nmref.io.output import write_output

    with _masks_in_order(args, items) as compute, progress:
        written = write_output(
            args.output,
            lambda temporary: stream_safetensors(temporary, planned, arrays(compute)),
            force=args.force,
            inputs=(args.input,),
            flag="-o",
        )
    progress.print_summary()
    report_skipped(skipped)
    what = "masked weights" if args.apply else "masks"
    print(f"wrote {what} of {len(items)} tensor(s), pattern {pattern}, to {written}")
    return 0


def _listed(args: argparse.Namespace, skipped: list[str]) -> list[tuple[str, TensorInfo]]:
    """The eligible tensors of ``args.input`` from its headers (the cluster reads the data)."""
    from nmref.io.checkpoints import list_tensors
    from nmref.io.sharded import is_model_input, open_model

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


def _keep(
    outputs: dict[str, np.ndarray], name: str, array: np.ndarray, args: argparse.Namespace
) -> None:
    """Add one output tensor; two input tensors read under one name are an error (the
    second would silently replace the first: "wrote 2 tensor(s)" of 3)."""
    if name in outputs:
        raise CommandError(
            f"{args.input!r} holds two tensors read as {name!r} (e.g. a nested .pt key "
            "'a': {'b': ...} beside 'a.b'); one would be lost: rename one"
        )
    outputs[name] = array


def _masked_here(
    args: argparse.Namespace,
    outputs: dict[str, np.ndarray],
    skipped: list[str],
    progress: WorkProgress,
) -> WorkProgress:
    """Mask every selected tensor of ``args.input`` in this process, one at a time."""
    with progress:
        for record in selected_records(args.input, args, need_float=True, skipped=skipped):
            _keep(outputs, record.name, _mask_of(record, args), args)
            progress.advance(
                record.name,
                stored_bytes(record.array.shape, record.source_dtype),
                tile_count(record.array.shape, args),
            )
    return progress
