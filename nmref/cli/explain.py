"""``nmref explain ALGORITHM FILE --pattern N:M``: print the trace of one algorithm on one
small tensor read from a file (the tracers are :mod:`nmref.explain`)."""

from __future__ import annotations

import argparse
import json

import numpy as np
from numpy.typing import NDArray

from nmref.cli.common import CommandError, pattern_argument
from nmref.explain import (
    ALGORITHMS,
    explain_bimask,
    explain_nm_mask,
    explain_transposable,
    render_text,
)
from nmref.io.checkpoints import iter_tensors

__all__ = ["add_parser", "run_explain"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nmref explain ALGORITHM FILE --pattern N:M [--json]`` to the ``nmref`` parser."""
    explain = subparsers.add_parser(
        "explain", help="print an algorithm's steps on one small input, in plain words"
    )
    explain.add_argument("algorithm", choices=ALGORITHMS, help="the algorithm to trace")
    explain.add_argument("input", help=".npy/.npz/.safetensors file holding one small tensor")
    explain.add_argument("--pattern", type=pattern_argument, required=True, help="N:M, e.g. 2:4")
    explain.add_argument("--name", help="the tensor to use when the file holds several")
    explain.add_argument(
        "--tile",
        default="0,0",
        help="transposable: the tile ROW,COL (in tiles) of a larger matrix (default 0,0)",
    )
    scores = explain.add_mutually_exclusive_group()
    scores.add_argument(
        "--magnitude",
        dest="signed",
        action="store_false",
        default=False,
        help="nm_mask, transposable: rank |values|, as nmref mask ranks weights (the default)",
    )
    scores.add_argument(
        "--signed",
        dest="signed",
        action="store_true",
        help="nm_mask, transposable: rank the values as they are (scores, not weights)",
    )
    explain.add_argument(
        "--candidates", type=int, default=10, help="bimask: random permutations (0: identity)"
    )
    explain.add_argument("--seed", type=int, default=0, help="bimask: seed of the candidates")
    explain.add_argument("--json", action="store_true", help="print the steps as JSON")
    explain.set_defaults(func=run_explain)


def _read_tensor(path: str, name: str | None) -> NDArray:
    records = list(iter_tensors(path))
    if name is not None:
        chosen = [r for r in records if r.name == name]
        if not chosen:
            names = ", ".join(r.name for r in records) or "none"
            raise ValueError(f"{path} has no tensor named {name!r} (it has: {names})")
        return chosen[0].array
    if len(records) != 1:
        names = ", ".join(r.name for r in records) or "none"
        raise ValueError(f"{path} holds {len(records)} tensors ({names}): choose one with --name")
    return records[0].array


def _tile(array: NDArray, where: str, m: int) -> NDArray:
    try:
        row, column = (int(part) for part in where.split(","))
    except ValueError:
        raise ValueError(f"tile={where!r} must be ROW,COL, two integers") from None
    if array.ndim != 2:
        raise ValueError(f"the input must be a 2-D matrix, got shape {array.shape}")
    if array.shape[0] % m or array.shape[1] % m:
        raise ValueError(
            f"the input's shape {array.shape} is not a multiple of m={m} along both axes: "
            "it has no whole tiles to explain"
        )
    rows, columns = array.shape[0] // m, array.shape[1] // m
    if not (0 <= row < rows and 0 <= column < columns):
        raise ValueError(
            f"tile={where!r} is outside the {rows}x{columns} tiles of a {array.shape} matrix "
            f"at m={m}"
        )
    return array[row * m : (row + 1) * m, column * m : (column + 1) * m]


def run_explain(args: argparse.Namespace) -> int:
    """``nmref explain``: print the trace (or ``--json``); exit 0."""
    if args.algorithm == "bimask" and args.signed:
        raise CommandError("--signed applies to nm_mask and transposable; bimask ranks |weights|")
    array = _read_tensor(args.input, args.name)
    n, m = args.pattern.n, args.pattern.m
    if args.algorithm == "transposable":
        tile = _tile(array, args.tile, m)
        explanation = explain_transposable(tile if args.signed else np.abs(tile), n, m)
    elif args.algorithm == "nm_mask":
        explanation = explain_nm_mask(array if args.signed else np.abs(array), n, m)
    else:
        explanation = explain_bimask(array, n, m, candidates=args.candidates, rng=args.seed)
    scores = _scores_used(args)
    if args.json:
        print(json.dumps({"scores": scores[0], **explanation}, indent=1))
    else:
        print(f"Scores: {scores[1]}")
        print(render_text(explanation), end="")
    return 0


def _scores_used(args: argparse.Namespace) -> tuple[str, str]:
    """What the trace ranked: ``(key, sentence)``; the key is the JSON's ``"scores"``."""
    if args.algorithm == "bimask":
        return "magnitude", "|values|, as Bi-Mask ranks weights."
    if args.signed:
        return "signed", "the values as they are (--signed); nmref mask ranks |values| instead."
    return (
        "magnitude",
        "|values|, as nmref mask ranks weights (--signed ranks the values as they are).",
    )
