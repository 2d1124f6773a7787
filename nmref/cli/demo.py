"""``nmref demo``: write a small example checkpoint, mask it 2:4 and check the result,
printing each command as it runs."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from nmref.io.checkpoints import iter_tensors, write_tensors
from nmref.io.output import check_output

__all__ = ["add_parser", "run_demo"]

EXAMPLE_NAME = "example.npz"
MASK_NAME = "example-mask-2of4.npz"

#: Runs one ``nmref`` command line and returns its exit status (:func:`nmref.cli.main`).
CommandRunner = Callable[[Sequence[str]], int]


def add_parser(subparsers: argparse._SubParsersAction, run_command: CommandRunner) -> None:
    """Add ``nmref demo``; ``run_command`` runs the steps it shows (the ``nmref`` entry
    point, handed in so that this module does not import the package that imports it)."""
    demo = subparsers.add_parser("demo", help="mask and check a small built-in example")
    demo.add_argument("--out", help="folder for the example files (default: a temporary one)")
    demo.add_argument(
        "--force",
        action="store_true",
        help="replace example.npz and example-mask-2of4.npz already in --out",
    )
    demo.set_defaults(func=lambda args: run_demo(args, run_command))


def run_demo(args: argparse.Namespace, run_command: CommandRunner) -> int:
    """``nmref demo``: write a small example checkpoint, mask it 2:4 and check the result."""
    rng = np.random.default_rng(2021)
    # Synthetic, seeded weights: one Linear and one 3x3 convolution.
    example = {
        "linear.weight": rng.standard_normal((8, 16)).astype(np.float32),
        "conv.weight": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
    }
    directory = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nmref-demo-"))
    force = bool(getattr(args, "force", False))
    if args.out:
        # Both files are refused before either is written: a user's example.npz is never
        # replaced without --force (nor is it replaced and then its mask refused).
        if directory.exists() and not directory.is_dir():
            raise ValueError(f"--out {str(directory)!r} exists and is not a folder")
        for file_name in (EXAMPLE_NAME, MASK_NAME):
            if directory.is_dir():
                check_output(directory / file_name, force=force, flag="--out file")
    directory.mkdir(parents=True, exist_ok=True)
    weights = write_tensors(directory / EXAMPLE_NAME, example, overwrite=force, flag="--out file")
    print(f"example checkpoint (synthetic, seeded): {weights}")
    masks = directory / MASK_NAME
    steps = [
        ["mask", str(weights), "--pattern", "2:4", "-o", str(masks), *(["--force"] * force)],
        ["check", str(masks), "--pattern", "2:4"],
    ]
    for step in steps:
        print("$ nmref " + " ".join(step))
        status = run_command(step)
        if status != 0:
            return status
    linear = example["linear.weight"]
    mask = dict((r.name, r.array) for r in iter_tensors(masks))["linear.weight"]
    kept = float(np.abs(linear[mask]).sum() / np.abs(linear).sum())
    print(f"linear.weight keeps {kept:.1%} of its L1 magnitude at 2:4")
    print("first row |w|:", np.array2string(np.abs(linear[0]), precision=2))
    print("first row mask:", mask[0].astype(int))
    return 0
