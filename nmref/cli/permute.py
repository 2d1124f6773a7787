"""``nmref permute``: channel permutations of a model folder for N:M pruning, the same
function, written atomically (``specs/permutation.md``, P10)."""

from __future__ import annotations

import argparse
from pathlib import Path

from nmref.cli.common import CommandError, pattern_argument
from nmref.io.checkpoints import iter_tensors, write_tensors
from nmref.io.output import check_output

__all__ = ["add_parser", "run_permute"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nmref permute`` to the ``nmref`` parser."""
    permute = subparsers.add_parser(
        "permute", help="permute the channels of a model folder for N:M (same function)"
    )
    permute.add_argument("model", help="folder with config.json and model.safetensors")
    permute.add_argument("-o", "--output", required=True, help="output .safetensors/.npz file")
    permute.add_argument(
        "--pattern", type=pattern_argument, required=True, help="N:M, N kept of M, e.g. 2:4"
    )
    permute.add_argument("--method", choices=("stripes", "swaps"), default="stripes",
                         help="search (specs/permutation.md P5; default stripes)")  # fmt: skip
    permute.add_argument(
        "--block-stripes", type=int, default=8,
        help="stripe groups within blocks of this many stripes (P6; default 8; 0: no blocks)",
    )  # fmt: skip
    permute.add_argument("--force", action="store_true", help="replace an existing output")
    permute.set_defaults(func=run_permute)


def run_permute(args: argparse.Namespace) -> int:
    """``nmref permute``: channel permutations of a model folder, written atomically."""
    import json

    from nmref._json_toml import load_json
    from nmref.io.checkpoints import check_regular_file
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
        config = load_json(config_path.read_text(encoding="utf-8"), repr(str(config_path)))
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
