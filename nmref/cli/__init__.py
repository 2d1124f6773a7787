"""The ``nmref`` command line: compute and check N:M masks of tensor files.

One module per command (:mod:`~nmref.cli.mask`, :mod:`~nmref.cli.check`,
:mod:`~nmref.cli.audit`, :mod:`~nmref.cli.permute`, :mod:`~nmref.cli.adaprune`,
:mod:`~nmref.cli.demo`, :mod:`~nmref.cli.explain`), each adding its sub-parser and running it;
the helpers they share (the one-line :class:`~nmref.cli.common.CommandError`, the filters, the
progress bar) are in :mod:`nmref.cli.common`. Files are read and written by :mod:`nmref.io`.

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
``nmref adaprune MODEL --pattern 2:4 --calibration DATA -o OUT``
    Convert every selected 2-D weight to N:M and fit its kept weights (and bias) so that
    the layer's outputs on its calibration inputs stay those of the original (AdaPrune,
    ``specs/adaprune.md``); print the relative output error per layer, mask only and after.
``nmref demo``
    Mask and check a small built-in example checkpoint.

Eligible tensors have ``ndim >= 2`` (weights of GEMMs); ``mask`` also requires a
floating dtype. ``--include`` / ``--exclude`` filter tensor names by regular
expression. Errors are one line on stderr and exit status 2.

``IN`` (and ``MASK``, ``--weights``) may be a Hugging Face model folder or a
``*.safetensors.index.json`` (:mod:`nmref.io.sharded`): the index is validated, tensors
are read one at a time, and ``mask`` writes a sharded ``-o`` folder with its own
index (or, for ``-o`` ending in a tensor-file suffix, one file). ``--scheduler
ADDRESS`` / ``--workers N`` compute the masks on a Dask cluster
(:mod:`nmref.io.distributed`), the same bits. A progress bar and a summary line go to
stderr when it is a terminal (``--quiet``: none).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nmref.cli.common import CommandError
from nmref.cli.messages import OneLineParser

__all__ = ["CommandError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Build the ``nmref`` argument parser."""
    from nmref import __version__

    # the commands are imported here, not at the top: nmsim imports nmref.cli.messages for
    # its parser without loading every nmref command
    from nmref.cli import adaprune, audit, check, demo, explain, mask, permute

    parser = OneLineParser(prog="nmref", description="Exact N:M sparsity masks.")
    parser.add_argument("--version", action="version", version=f"nmref {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    mask.add_parser(subparsers)
    check.add_parser(subparsers)
    audit.add_parser(subparsers)
    permute.add_parser(subparsers)
    adaprune.add_parser(subparsers)
    demo.add_parser(subparsers, run_command=main)
    explain.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``nmref``; returns the exit status (0 ok, 1 invalid mask, 2 error, 130 interrupted)."""
    from nmref._startup import restore_interrupt
    from nmref.cli.messages import command_parser, in_flag_words, was_interrupted
    from nmref.io.printable import printable

    try:
        restore_interrupt()  # from here a Ctrl-C unwinds as KeyboardInterrupt (nmref/_startup.py)
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("nmref: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    from nmref.io.compile_notice import compile_notice

    try:
        with compile_notice("nmref", quiet=getattr(args, "quiet", False)):
            return int(args.func(args))
    except ImportError as error:
        # an optional dependency the command needs is missing: the environment, not the input
        print(f"nmref: error: {printable(str(error))}", file=sys.stderr)
        return 3
    except (CommandError, ValueError, TypeError, OSError, SystemError) as error:
        if was_interrupted(error):  # a Ctrl-C inside a Numba kernel arrives as a SystemError
            print("nmref: interrupted", file=sys.stderr)
            return 130
        if isinstance(error, SystemError):
            raise
        message = in_flag_words(str(error), command_parser(parser, args.command))
        print(f"nmref: error: {printable(message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nmref: interrupted", file=sys.stderr)
        return 130
