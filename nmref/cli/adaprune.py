"""``nmref adaprune``: convert the layers of a model to N:M and repair their outputs on
calibration inputs (AdaPrune, ``specs/adaprune.md``), written atomically.

Per selected 2-D weight ``[out, in]``: N (given, or chosen from the layer's zeros), the
mask, the start (absorbed mass, unless ``--no-absorb``), the reconstruction on the layer's
calibration inputs (``--reconstruct exact``, the default, or the paper's ``adam``, or
``none``) with the layer's bias re-fitted, and the relative output error before (mask
only) and after. ``nmref.adaprune.adaprune_layer`` does each layer; this module selects
the layers, pairs each with its bias and its inputs, and writes the result.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from nmref.cli.common import (
    MASKABLE,
    CommandError,
    default_skip_reason,
    masked_dtype,
    nothing_selected,
    passes_filters,
    pattern_argument,
    regex_argument,
    report_skipped,
    tensor_error,
)
from nmref.io.checkpoints import FORMATS, TensorInfo, TensorRecord
from nmref.io.output import check_output, check_output_folder
from nmref.io.printable import printable

if TYPE_CHECKING:  # imported when the command runs: building the parser stays light
    from nmref.adaprune import InputGram
    from nmref.io.calibration import CalibrationData

__all__ = ["AUTO", "adaprune_pattern", "add_parser", "run_adaprune"]

#: ``--pattern auto:M``: N is chosen per layer (``nmref.adaprune.choose_n``).
AUTO = "auto"
#: ``--mask`` words -> ``nmref.adaprune`` mask methods.
MASKS = {"nm": "nm", "transposable": "transposable", "at-most": "transposable_at_most"}

DATA_RULE = (
    "layer inputs [rows, in]: an .npz or .safetensors keyed by the weight's name (fc1.weight) "
    "or its module's (fc1), or one .npy array used for every layer whose in equals its "
    "column count"
)


@dataclass(frozen=True)
class AdaPrunePattern:
    """``--pattern``: ``n`` kept of every ``m``, or ``n=None`` for ``auto:M``."""

    n: int | None
    m: int

    def __str__(self) -> str:
        return f"{AUTO if self.n is None else self.n}:{self.m}"


def adaprune_pattern(text: str) -> AdaPrunePattern:
    """Parse ``--pattern``: ``N:M`` with ``1 <= N <= M``, or ``auto:M`` (N chosen per layer).

    Examples
    --------
    >>> adaprune_pattern("2:4"), adaprune_pattern("auto:8")
    (AdaPrunePattern(n=2, m=4), AdaPrunePattern(n=None, m=8))
    """
    if text.lower().startswith(AUTO + ":"):
        digits = text[len(AUTO) + 1 :]
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 6 or int(digits) < 1:
            shown = printable(repr(text if len(text) <= 40 else text[:37] + "..."))
            raise argparse.ArgumentTypeError(
                f"{shown} is not a pattern: auto:M needs a whole M >= 1 (N is then chosen per "
                "layer from its zeros)"
            )
        return AdaPrunePattern(None, int(digits))
    pattern = pattern_argument(text)  # the one N:M rule and its message
    if pattern.n < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: N=0 keeps nothing; AdaPrune keeps 1 <= N <= M of every M (auto:M "
            "chooses N per layer)"
        )
    return AdaPrunePattern(pattern.n, pattern.m)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``nmref adaprune`` to the ``nmref`` parser."""
    sub = subparsers.add_parser(
        "adaprune",
        help="convert a model's layers to N:M and repair their outputs on calibration inputs",
        description=(
            "AdaPrune (specs/adaprune.md): every selected 2-D weight [out, in] is masked to N:M "
            "along in and its kept weights (and its bias NAME.bias, re-fitted) are fitted so "
            "that the layer's outputs on its calibration inputs stay those of the original; "
            "the relative output error before (mask only) and after is printed per layer. "
            f"DATA: {DATA_RULE}."
        ),
    )
    sub.add_argument(
        "model",
        help=".npy, .npz, .safetensors or .pt file, a model folder or a *.safetensors.index.json",
    )
    sub.add_argument(
        "--pattern",
        type=adaprune_pattern,
        required=True,
        metavar="N:M",
        help="N:M with 1 <= N <= M (e.g. 2:4), or auto:M to choose N per layer from its zeros "
        "(the authors' binomial rule, --confidence)",
    )
    sub.add_argument(
        "--calibration", metavar="DATA", required=True, help=f"calibration inputs: {DATA_RULE}"
    )
    sub.add_argument(
        "-o",
        "--output",
        required=True,
        help="output file (.npy/.npz/.safetensors): the converted weights and re-fitted biases; "
        "for a model folder input, a folder (sharded like the input, with config.json)",
    )
    sub.add_argument(
        "--mask",
        choices=tuple(MASKS),
        default="nm",
        help="nm: N largest |w| of every M along in (the paper's; default); transposable: "
        "exactly N per row and column of every M x M tile; at-most: at most N",
    )
    sub.add_argument(
        "--reconstruct",
        choices=("exact", "adam", "none"),
        default="exact",
        help="exact: the least-squares optimum of the kept weights (default); adam: the "
        "paper's 1000 Adam steps (needs the inputs in memory); none: mask (and absorb) only",
    )
    sub.add_argument(
        "--ridge",
        type=float,
        default=0.0,
        metavar="RHO",
        help="relative ridge of the exact reconstruction (default 0, the exact optimum)",
    )
    sub.add_argument(
        "--no-absorb",
        action="store_true",
        help="start from the masked weights, without absorbing the pruned mass",
    )
    sub.add_argument(
        "--fixed-bias",
        action="store_true",
        help="keep each layer's bias as it is (default: re-fit it with the weights)",
    )
    sub.add_argument(
        "--confidence",
        type=float,
        metavar="C",
        help="with --pattern auto:M: the binomial rule's confidence level in (0, 1) (default 0.95)",
    )
    sub.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="with --reconstruct adam: the seed of its batch permutations (default 0)",
    )
    sub.add_argument(
        "--remainder",
        choices=("error", "pad"),
        default="error",
        help="an in not a multiple of M: error, or pad the last group (--mask nm only)",
    )
    sub.add_argument("--include", type=regex_argument, help="only tensors whose name matches")
    sub.add_argument("--exclude", type=regex_argument, help="skip tensors whose name matches")
    sub.add_argument(
        "--embeddings",
        action="store_true",
        help="also select embedding tables (names containing 'embed'), left out by default",
    )
    sub.add_argument(
        "--skip-uncalibrated",
        action="store_true",
        help="mask (and absorb) the selected weights DATA has no inputs for, without "
        "reconstruction (default: an error naming them)",
    )
    sub.add_argument("--force", action="store_true", help="replace an existing output")
    sub.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_argument(
        "--json", action="store_true", help="print the per-layer summary as one JSON document"
    )
    sub.set_defaults(func=run_adaprune)


# ----------------------------------------------------------------------------
# Arguments and the plan: which weights, their biases and their inputs
# ----------------------------------------------------------------------------


def _check_options(args: argparse.Namespace) -> None:
    """Option combinations that would be silently ignored, refused before any reading."""
    if not math.isfinite(args.ridge) or args.ridge < 0:
        raise CommandError(f"--ridge {args.ridge} must be finite and >= 0")
    if args.ridge != 0 and args.reconstruct != "exact":
        raise CommandError("--ridge applies to --reconstruct exact only")
    if args.confidence is not None:
        if args.pattern.n is not None:
            raise CommandError(
                f"--confidence applies to --pattern auto:M only (N is given: {args.pattern})"
            )
        if not 0 < args.confidence < 1:
            raise CommandError(f"--confidence {args.confidence} must be in (0, 1)")
    if args.seed is not None and args.reconstruct != "adam":
        raise CommandError("--seed applies to --reconstruct adam only")
    if args.remainder == "pad" and args.mask != "nm":
        raise CommandError("--remainder pad applies to --mask nm only (M x M tiles never pad)")


@dataclass
class _Layer:
    """One selected weight, with its bias and its calibration entry (or ``None``)."""

    info: TensorInfo
    bias: TensorInfo | None
    inputs: TensorInfo | None


def _listing(path: str) -> tuple[list[TensorInfo], Callable[[str], TensorRecord]]:
    """Every tensor's header of the model, and how to read one tensor by name."""
    from nmref.io.checkpoints import list_tensors, read_tensor
    from nmref.io.sharded import is_model_input, open_model

    if is_model_input(path):
        model = open_model(path)
        return model.infos(), model.read
    return list_tensors(path), lambda name: read_tensor(path, name)


def _plan(args: argparse.Namespace, infos: list[TensorInfo], data: CalibrationData) -> list[_Layer]:
    """The layers to convert, each checked against DATA from the headers (no data read)."""
    names = [info.name for info in infos]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise CommandError(
            f"MODEL {args.model!r} holds two tensors read as {twice!r} (e.g. a nested .pt key "
            "'a': {'b': ...} beside 'a.b'); one would be lost: rename one"
        )
    from nmref.io.calibration import bias_for

    by_name = {info.name: info for info in infos}
    biases = {bias.name for info in infos if (bias := bias_for(info, by_name)) is not None}
    args.skipped, args.filtered_out = [], 0
    layers: list[_Layer] = []
    for info in infos:
        if not passes_filters(info.name, args):
            args.filtered_out += 1
            continue
        reason = default_skip_reason(info.name, args)
        if len(info.shape) < 2 or info.source_dtype not in MASKABLE or reason is not None:
            if info.name not in biases:  # a layer's bias goes with its weight
                why = reason or (
                    f"dtype={info.source_dtype}"
                    if info.source_dtype not in MASKABLE
                    else f"ndim={len(info.shape)}"
                )
                args.skipped.append(f"{info.name} ({why})")
            continue
        if len(info.shape) != 2:
            raise tensor_error(
                info.name,
                info.shape,
                ValueError(
                    "AdaPrune takes 2-D weights [out, in] (a Linear layer); a convolution needs "
                    "the [out, in*kh*kw] matrix of its im2col GEMM and matching patches"
                ),
            )
        bias = bias_for(info, by_name)
        entry = data.entry_for(info.name, int(info.shape[1]))
        if entry is not None:
            try:
                data.check_entry(entry, int(info.shape[1]))
            except (ValueError, TypeError) as error:
                raise CommandError(f"{error} (for {info.name!r} {tuple(info.shape)})") from None
        layers.append(_Layer(info, bias, entry))
    if not layers:
        raise CommandError(
            nothing_selected(args.model, args, args.skipped, "2-D float weights [out, in]")
        )
    missing = [layer for layer in layers if layer.inputs is None]
    if missing and not args.skip_uncalibrated:
        first = missing[0].info
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise CommandError(
            f"no calibration inputs for {first.name!r}{more}: "
            f"{data.missing(first.name, int(first.shape[1]))}; give their inputs in DATA, leave "
            "them out with --exclude, or pass --skip-uncalibrated to mask them without "
            "reconstruction"
        )
    return layers


# ----------------------------------------------------------------------------
# One layer
# ----------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    """A figure for the JSON summary: ``None`` for a missing or non-finite one."""
    return None if value is None or not math.isfinite(value) else float(value)


def _convert(
    args: argparse.Namespace,
    layer: _Layer,
    read: Callable[[str], TensorRecord],
    data: CalibrationData,
    grams: dict[tuple[str, int], InputGram],
) -> tuple[dict[str, NDArray], dict[str, Any]]:
    """The output tensors of one layer, and its summary (the JSON's ``layers[]`` entry)."""
    from nmref.adaprune import (
        DEFAULT_CONFIDENCE,
        absorb_pruned_mass,
        adaprune_layer,
        choose_n,
        starting_mask,
    )

    info = layer.info
    record = read(info.name)
    weight = np.asarray(record.array)
    bias = None if layer.bias is None else np.asarray(read(layer.bias.name).array)
    pattern: AdaPrunePattern = args.pattern
    confidence = DEFAULT_CONFIDENCE if args.confidence is None else args.confidence
    summary: dict[str, Any] = {
        "name": info.name,
        "shape": list(info.shape),
        "bias": None if layer.bias is None else layer.bias.name,
        "inputs": None if layer.inputs is None else layer.inputs.name,
        "rows": None if layer.inputs is None else int(layer.inputs.shape[0]),
    }
    in_features = int(info.shape[1])
    try:
        if layer.inputs is None:  # --skip-uncalibrated: masked (and absorbed), not fitted
            choice = None
            n = pattern.n
            if n is None:
                choice = choose_n(
                    weight, pattern.m, confidence=confidence, remainder=args.remainder
                )
                n = choice.n
            kept = starting_mask(
                weight, n, pattern.m, method=MASKS[args.mask], remainder=args.remainder
            )
            if args.no_absorb:
                new_weight = np.where(kept, weight.astype(np.float64), 0.0)
            else:
                new_weight = absorb_pruned_mass(weight, kept, pattern.m, remainder=args.remainder)
            new_bias = None
            summary.update(
                pattern=f"{n}:{pattern.m}",
                reconstructed=False,
                error_masked=None,
                error_start=None,
                error=None,
            )
        else:
            key = (layer.inputs.name, in_features)
            if args.reconstruct == "adam":
                calibration = data.inputs(layer.inputs, in_features)
            else:  # streamed statistics; a shared .npy serves every layer of this in once
                if key not in grams:
                    grams.clear()  # one set of statistics held at a time
                    grams[key] = data.gram(layer.inputs, in_features)
                calibration = grams[key]
            result = adaprune_layer(
                weight,
                calibration,
                pattern.m,
                n=pattern.n,
                bias=bias,
                mask=MASKS[args.mask],
                confidence=confidence,
                absorb=not args.no_absorb,
                reconstruction=args.reconstruct,
                refit_bias=not args.fixed_bias,
                ridge=args.ridge,
                rng=0 if args.seed is None else args.seed,
                remainder=args.remainder,
            )
            choice = result.choice
            new_weight, new_bias = result.weight, result.bias
            details = result.details
            rank = getattr(details, "rank", None)
            kept_count = getattr(details, "kept", None)
            summary.update(
                pattern=str(result.pattern),
                reconstructed=args.reconstruct != "none",
                error_masked=_finite(result.error_masked),
                error_start=_finite(result.error_start),
                error=_finite(result.error),
                exact_objective=_finite(result.exact_objective),
                gap=_finite(result.gap),
                rank_deficient_rows=(
                    None if rank is None else int(np.count_nonzero(rank < kept_count))
                ),
            )
    except (ValueError, TypeError) as error:
        if str(error).startswith(data.flag):  # DATA's own rule: the message names the file
            raise CommandError(f"{error} (for {info.name!r} {tuple(info.shape)})") from None
        raise tensor_error(info.name, info.shape, error) from error
    if choice is not None:
        summary["choice"] = {
            "reason": choice.reason,
            "zero_fraction": float(choice.zero_fraction),
            "binomial_n": choice.binomial_n,
            "structured_n": choice.structured_n,
            "confidence": choice.confidence,
        }
    outputs = {info.name: _stored(info, new_weight)}
    # a bias is written when it was re-fitted: with a reconstruction, and not --fixed-bias
    refitted = args.reconstruct != "none" and not args.fixed_bias and layer.inputs is not None
    if refitted and new_bias is not None and layer.bias is not None:
        outputs[layer.bias.name] = _stored(layer.bias, new_bias)
    return outputs, summary


def _stored(info: TensorInfo, values: NDArray[np.float64]) -> NDArray:
    """``values`` in the dtype a masked tensor of ``info`` is written in; refused if they
    do not fit it (a reconstructed weight may outgrow float16's range)."""
    dtype = np.dtype(masked_dtype(info.source_dtype))
    with np.errstate(over="ignore"):
        stored = values.astype(dtype)
    if not np.isfinite(stored).all():
        largest = float(np.max(np.abs(values)))
        raise tensor_error(
            info.name,
            info.shape,
            ValueError(f"its new values (largest |x| {largest:.3g}) overflow {dtype}"),
        )
    return stored


# ----------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------


def run_adaprune(args: argparse.Namespace) -> int:
    """``nmref adaprune``: convert every selected layer and write the result atomically."""
    from nmref.io.calibration import CalibrationData
    from nmref.io.progress import WorkProgress, stored_bytes
    from nmref.io.sharded import is_model_input

    _check_options(args)
    folder_output = is_model_input(args.model) and Path(args.output).suffix.lower() not in FORMATS
    inputs = (args.model, args.calibration)
    # Fail before the work when the output cannot be written (checked again on writing).
    if folder_output:
        check_output_folder(args.output, force=args.force, inputs=inputs, flag="-o")
    else:
        check_output(args.output, force=args.force, inputs=inputs, flag="-o")
    data = CalibrationData.open(args.calibration)
    infos, read = _listing(args.model)
    layers = _plan(args, infos, data)

    outputs: dict[str, NDArray] = {}
    summaries: list[dict[str, Any]] = []
    grams: dict[tuple[str, int], InputGram] = {}
    sizes = {layer.info.name: stored_bytes(layer.info.shape, layer.info.source_dtype)
             for layer in layers}  # fmt: skip
    progress = WorkProgress("adaprune", len(layers), sum(sizes.values()), quiet=args.quiet)
    with progress:
        for layer in layers:
            converted, summary = _convert(args, layer, read, data, grams)
            outputs.update(converted)
            summaries.append(summary)
            progress.advance(layer.info.name, sizes[layer.info.name])
    progress.print_summary()
    written = _write(args, outputs, infos, folder_output)
    report_skipped(args.skipped)
    if args.json:
        document = {
            "command": "nmref adaprune",
            "model": args.model,
            "calibration": args.calibration,
            "output": str(written),
            "pattern": str(args.pattern),
            "mask": args.mask,
            "reconstruct": args.reconstruct,
            "absorb": not args.no_absorb,
            "refit_bias": not args.fixed_bias,
            "ridge": args.ridge,
            "layers": summaries,
            "skipped": args.skipped,
        }
        sys.stdout.write(json.dumps(document, indent=2, allow_nan=False) + "\n")
        return 0
    _print_table(args, summaries)
    biases = len(outputs) - len(summaries)
    print(
        f"wrote {len(summaries)} converted weight(s)"
        + (f" and {biases} re-fitted bias(es)" if biases else "")
        + f" to {written}"
    )
    return 0


def _write(
    args: argparse.Namespace, outputs: dict[str, NDArray], infos: list[TensorInfo], folder: bool
) -> Path:
    """The outputs as ``-o``: one tensor file, or a sharded folder beside a model input."""
    if not folder:
        from nmref.io.checkpoints import write_tensors

        return write_tensors(
            args.output,
            outputs,
            inputs=(args.model, args.calibration),
            overwrite=args.force,
            flag="-o",
        )
    from nmref.io.safetensors_writer import PlannedTensor
    from nmref.io.sharded import open_model, write_model

    model = open_model(args.model)
    planned = [
        (shard, PlannedTensor(info.name, info.shape, str(outputs[info.name].dtype)))
        for info, shard in model.tensors
        if info.name in outputs
    ]
    metadata = {"nmref": f"adaprune {args.pattern}, mask {args.mask}, {args.reconstruct}"}
    write_model(
        args.output,
        model,
        planned,
        lambda name: outputs[name],
        force=args.force,
        metadata=metadata,
        copy_config=True,
    )
    return Path(args.output)


def _print_table(args: argparse.Namespace, summaries: list[dict[str, Any]]) -> None:
    """One line per layer: its pattern, rows, and the relative output error before and after."""

    def figure(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    absorb = "" if args.no_absorb else ", absorbed"
    bias = "bias unchanged" if args.fixed_bias or args.reconstruct == "none" else "bias re-fitted"
    print(
        f"pattern {args.pattern}, mask {args.mask}{absorb}, reconstruct {args.reconstruct} "
        f"({bias}), calibration {printable(repr(args.calibration))}"
    )
    width = max(len("tensor"), *(len(printable(s["name"])) for s in summaries))
    header = f"{'tensor':<{width}} {'shape':>11} {'N:M':>6} {'rows':>7} {'mask only':>10} "
    header += f"{'after':>10}" + (f" {'adam gap':>9}" if args.reconstruct == "adam" else "")
    print(header)
    for s in summaries:
        shape = "x".join(str(size) for size in s["shape"])
        rows = "-" if s["rows"] is None else str(s["rows"])
        line = (
            f"{printable(s['name']):<{width}} {shape:>11} {s['pattern']:>6} {rows:>7} "
            f"{figure(s['error_masked']):>10} {figure(s['error']):>10}"
        )
        if args.reconstruct == "adam":
            gap, exact = s.get("gap"), s.get("exact_objective")
            line += f" {'-' if gap is None or not exact else f'{gap / exact:.1%}':>9}"
        print(line)
    uncalibrated = [s["name"] for s in summaries if s["rows"] is None]
    if uncalibrated:
        shown = ", ".join(printable(name) for name in uncalibrated[:5])
        more = f", ... ({len(uncalibrated) - 5} more)" if len(uncalibrated) > 5 else ""
        print(f"masked without reconstruction (no calibration inputs): {shown}{more}")
    print(
        "error: relative output error ||X (W - U)^T + 1 (b - beta)^T||_F / ||X W^T||_F on the "
        "calibration inputs; mask only: U = M * W, bias unchanged"
    )
