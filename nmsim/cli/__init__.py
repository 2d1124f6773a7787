"""The ``nmsim`` command line.

Each subcommand lives in its own module and registers through ``SUBCOMMANDS``:
a module named there provides ``add_parser(subparsers)`` (which sets
``func`` on its parser) so that this file stays a thin dispatcher and imports
nothing heavy until a subcommand runs. One module per command family
(:mod:`~nmsim.cli.formats`, :mod:`~nmsim.cli.perf`, :mod:`~nmsim.cli.report`,
:mod:`~nmsim.cli.verify`);
they share :mod:`~nmsim.cli.tables` for cells, ratios and JSON, never each other.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from nmref.cli.messages import OneLineParser

# Modules that provide ``add_parser(subparsers) -> None``; each registers one or
# more subcommands whose ``func(args) -> int`` runs them.
SUBCOMMANDS: tuple[str, ...] = (
    "nmsim.cli.formats",
    "nmsim.cli.perf",
    "nmsim.cli.report",
    "nmsim.cli.verify",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered subcommand."""
    from nmsim import __version__

    parser = OneLineParser(
        prog="nmsim",
        description="Sparse tensor-core model for N:M sparsity: formats, GEMM time, FLOPs.",
    )
    parser.add_argument("--version", action="version", version=f"nmsim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``nmsim``; returns the process exit code (2 error, 3 environment, 130 interrupted)."""
    from nmref._startup import restore_interrupt
    from nmref.cli.messages import command_parser, in_flag_words, was_interrupted
    from nmref.io.printable import printable

    try:
        restore_interrupt()  # from here a Ctrl-C unwinds as KeyboardInterrupt (nmref/_startup.py)
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("nmsim: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except ImportError as error:
        # an optional dependency the command needs is missing: the environment, not the input
        print(f"nmsim: error: {printable(str(error))}", file=sys.stderr)
        return 3
    except (ValueError, TypeError, OSError, KeyError, SystemError) as error:
        if was_interrupted(error):  # a Ctrl-C inside a Numba kernel arrives as a SystemError
            print("nmsim: interrupted", file=sys.stderr)
            return 130
        if isinstance(error, SystemError):
            raise
        message = in_flag_words(str(error), command_parser(parser, args.command))
        print(f"nmsim: error: {printable(message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nmsim: interrupted", file=sys.stderr)
        return 130
