"""``nmsim`` subcommands for the hardware model: ``gpus``, ``gemm``, ``flops``,
``estimate`` and ``calibrate``.

Each prints a readable table (rich when installed, plain text otherwise) or,
with ``--json``, one JSON document on stdout.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nmref.cli.messages import pattern_argument
from nmsim.cli.tables import format_ratio, format_value, print_json, print_table

__all__ = ["add_parser"]


# --------------------------------------------------------------------------- output
def _pair(measured: float | None, model: float | None) -> str:
    return f"{format_value(measured)} / {format_value(model)}"


def _flag(value: Any) -> str:
    if value is None:
        return "n/a"
    text = format_value(value.value)
    return text if value.confirmed else text + "*"


# --------------------------------------------------------------------------- gpus
def _run_gpus(args: argparse.Namespace) -> int:
    from nmsim.perf.hardware import list_gpus

    gpus = list_gpus()
    if args.json:
        from dataclasses import asdict

        print_json(
            [
                {
                    **asdict(g),
                    "peaks": [
                        {**asdict(p), "sparse_pattern": str(p.sparse_pattern)} for p in g.peaks
                    ],
                }
                for g in gpus
            ]
        )
        return 0
    rows = []
    for g in gpus:

        def peak(dtype: str, acc: str, g: Any = g) -> str:
            for p in g.peaks:
                if p.input == dtype and p.accumulate == acc:
                    mark = "" if p.confirmed else "*"
                    return f"{format_value(p.dense_tflops)}/{format_value(p.sparse_tflops)}{mark}"
            return "-"

        rows.append(
            [
                g.key,
                g.architecture,
                _flag(g.sms),
                _flag(g.clock_mhz),
                _flag(g.memory_bandwidth_gb_s),
                _flag(g.l2_mb),
                peak("fp16", "fp32"),
                peak("fp16", "fp16"),
                peak("tf32", "fp32"),
                peak("fp8", "fp32"),
                peak("int8", "int32"),
            ]
        )
    print_table(
        "GPUs (TFLOP/s dense/sparse; sparse = dense-equivalent 2:4, TF32 1:2; "
        "* = unconfirmed by a primary source; see nmsim/data/gpus.toml)",
        [
            "gpu",
            "arch",
            "SMs",
            "MHz",
            "GB/s",
            "L2 MB",
            "fp16/fp32acc",
            "fp16/fp16acc",
            "tf32",
            "fp8/fp32acc",
            "int8",
        ],
        rows,
    )
    return 0


# --------------------------------------------------------------------------- gemm
def _interval_text(e: Any) -> str:
    return (
        f"{format_ratio(e.speedup, digits=3)} "
        f"[{format_ratio(e.speedup_low, digits=2)}, {format_ratio(e.speedup_high, digits=2)}]"
    )


def _run_gemm(args: argparse.Namespace) -> int:
    from nmsim.perf.gemm import gemm_time

    common = dict(
        dtype=args.dtype,
        accumulate=args.accumulate,
        output_dtype=args.output_dtype,
        library=args.library,
        level=args.level,
    )
    dense = gemm_time(args.gpu, args.m, args.n, args.k, **common)
    sparse = None
    if args.sparse is not None:
        sparse = gemm_time(
            args.gpu,
            args.m,
            args.n,
            args.k,
            sparse=args.sparse,
            incompatible=args.incompatible,
            **common,
        )
    has_speedup = sparse is not None and sparse.speedup is not None
    if args.json:
        out: dict[str, Any] = {"dense": dense.as_dict()}
        if sparse is not None:
            out["sparse"] = sparse.as_dict()
            out["speedup"] = dense.time_s / sparse.time_s
            if has_speedup:
                out["speedup_interval"] = [sparse.speedup_low, sparse.speedup_high]
                out["verdict"] = sparse.verdict
                out["extrapolated"] = sparse.extrapolated
        print_json(out)
        return 0
    estimates = [("dense", dense)] + ([("sparse " + str(args.sparse), sparse)] if sparse else [])
    fields = [
        ("time (us)", lambda e: e.time_s * 1e6),
        ("bound", lambda e: e.bound),
        ("achieved TFLOP/s (dense-equiv.)", lambda e: e.achieved_tflops),
        ("peak TFLOP/s", lambda e: e.peak_tflops),
        ("executed pattern", lambda e: e.executed_pattern or "dense"),
        ("compute term (us)", lambda e: e.compute_time_s * 1e6),
        ("memory term (us)", lambda e: e.memory_time_s * 1e6),
        ("k-step latency term (us)", lambda e: e.latency_time_s * 1e6),
        ("overhead (us)", lambda e: e.overhead_s * 1e6),
        ("bytes A values", lambda e: e.bytes_a_values),
        ("bytes A metadata", lambda e: e.bytes_a_metadata),
        ("bytes B / C", lambda e: f"{format_value(e.bytes_b)} / {format_value(e.bytes_c)}"),
        ("tile, split-K, waves", lambda e: f"{e.tile[0]}x{e.tile[1]}, {e.split_k}, {e.waves}"),
        ("tile / wave efficiency", lambda e: f"{e.tile_efficiency:.3f} / {e.wave_efficiency:.3f}"),
        (
            "compute / A-memory efficiency",
            lambda e: f"{e.compute_efficiency:.3f} / {e.memory_efficiency:.3f}",
        ),
    ]
    rows = [[name, *(get(e) for _, e in estimates)] for name, get in fields]
    title = (
        f"GEMM C[{args.m},{args.n}] = A[{args.m},{args.k}] B[{args.k},{args.n}] on "
        f"{dense.gpu}, {dense.dtype} (acc {dense.accumulate}), {dense.level} level"
        + (f", sparse library {sparse.library}" if sparse is not None else "")
    )
    print_table(title, ["", *(label for label, _ in estimates)], rows)
    if sparse is not None:
        if has_speedup:
            print(f"speedup dense/sparse: {_interval_text(sparse)} -> {sparse.verdict}")
            print(f"interval: {sparse.interval_basis}")
        else:
            # Never "1.000x" for a ratio that is not 1 (see format_ratio).
            print(f"speedup dense/sparse: {format_ratio(dense.time_s / sparse.time_s, digits=3)}")
        for note in sparse.notes:
            print(f"note: {note}")
    print("model estimate, not a measurement (specs/gemm_model.md)")
    return 0


# --------------------------------------------------------------------------- flops
def _options(args: argparse.Namespace) -> Any:
    from nmsim.perf.flops import MethodOptions

    roles = tuple(r for r in args.keep_dense.split(",") if r) if args.keep_dense else ()
    return MethodOptions(
        keep_dense_roles=roles,
        keep_dense_names=tuple(args.keep_dense_name or ()),
        count_first_layer_input_grad=not args.skip_first_input_grad,
        asp_dense_fraction=args.asp_dense_fraction,
        bame_update_overhead=args.bame_update_overhead,
        bame_window=args.bame_window,
    )


def _run_flops(args: argparse.Namespace) -> int:
    from nmsim.perf.flops import GEMMS, assumption_table, training_flops

    opts = _options(args)
    reports = {
        acc: training_flops(
            args.model,
            args.method,
            args.pattern,
            accounting=acc,
            options=opts,
            examples=args.examples,
            epochs=args.epochs,
        )
        for acc in ("ideal", "hardware")
    }
    table = assumption_table(args.model, args.pattern) if args.compare else None
    if args.json:
        out: dict[str, Any] = {acc: r.as_dict() for acc, r in reports.items()}
        if not args.layers:
            for r in out.values():
                r.pop("layers")
        if table is not None:
            out["assumptions"] = table
        print_json(out)
        return 0
    ideal, hard = reports["ideal"], reports["hardware"]
    print(
        f"{ideal.model}: dense forward {ideal.dense_forward_macs / 1e9:.4f} GMACs/example; "
        f"method {args.method}, pattern {ideal.pattern}"
    )
    print_table(
        "phases (densities of the sparse layers' GEMMs)",
        ["phase", "share", *GEMMS],
        [[p.name, p.fraction, *(p.densities.get(g) for g in GEMMS)] for p in ideal.phases],
    )
    rows = []
    for gemm in GEMMS:
        dense_gemm = sum(layer.dense_macs for layer in ideal.layers)
        rows.append(
            [
                gemm,
                ideal.per_gemm_macs[gemm] / 1e9,
                hard.per_gemm_macs[gemm] / 1e9,
                dense_gemm / 1e9,
            ]
        )
    rows.append(
        [
            "training step",
            ideal.training_macs / 1e9,
            hard.training_macs / 1e9,
            ideal.dense_training_macs / 1e9,
        ]
    )
    print_table(
        "GMACs per example (FLOPs = 2 x MACs)", ["GEMM", "ideal", "2:4 hardware", "dense"], rows
    )
    print_table(
        "summary",
        ["quantity", "ideal", "2:4 hardware"],
        [
            ["training cost / dense", ideal.ratio, hard.ratio],
            ["training FLOP reduction", ideal.reduction, hard.reduction],
            ["inference forward / dense", ideal.inference_ratio, hard.inference_ratio],
            [
                f"total training FLOPs ({args.epochs:g} epochs x {args.examples:g})",
                ideal.total_training_flops,
                hard.total_training_flops,
            ],
            [
                "dense total training FLOPs",
                ideal.dense_total_training_flops,
                hard.dense_total_training_flops,
            ],
        ],
    )
    if args.layers:
        print_table(
            "per layer (MACs per example, phase-weighted, ideal)",
            ["layer", "role", "sparse", "forward", "dX", "dW"],
            [
                [r.name, r.role, r.sparse, r.forward_macs, r.input_grad_macs, r.weight_grad_macs]
                for r in ideal.layers
            ],
        )
    if table is not None:
        print_table(
            f"what each accounting assumption yields ({args.model}, {args.pattern})",
            [
                "method",
                "variant",
                "ideal/dense",
                "vs SR-STE",
                "2:4 hw/dense",
                "hw vs SR-STE",
                "inference",
            ],
            [
                [
                    r["method"],
                    r["variant"],
                    r.get("ideal_ratio"),
                    r.get("ideal_vs_srste"),
                    r.get("hardware_ratio"),
                    r.get("hardware_vs_srste"),
                    r.get("inference_ratio", r.get("error")),
                ]
                for r in table
            ],
        )
    for note in (*ideal.notes, *hard.notes):
        print(f"note: {note}")
    return 0


# --------------------------------------------------------------------------- estimate
def _run_estimate(args: argparse.Namespace) -> int:
    from nmsim.perf.estimate import DEFAULT_NON_GEMM_FRACTION, estimate_step

    fraction = (
        DEFAULT_NON_GEMM_FRACTION if args.non_gemm_fraction is None else args.non_gemm_fraction
    )
    est = estimate_step(
        args.model,
        args.method,
        args.pattern,
        args.gpu,
        args.batch,
        args.dtype,
        mode=args.mode,
        options=_options(args),
        non_gemm_fraction=fraction,
        library=args.library,
        level=args.level,
    )
    if args.json:
        print_json(est.as_dict())
        return 0
    coverage = f"{est.interval_coverage:.0%} " if est.interval_coverage is not None else ""

    def ms_range(low: float, high: float) -> str:
        return f"[{format_value(low * 1e3)}, {format_value(high * 1e3)}]"

    rows = [
        [
            g,
            est.dense_per_gemm_s[g] * 1e3,
            est.per_gemm_s[g] * 1e3,
            ms_range(est.per_gemm_s_low[g], est.per_gemm_s_high[g]),
        ]
        for g in est.per_gemm_s
    ]
    rows += [
        [
            "GEMMs",
            est.dense_gemm_s * 1e3,
            est.gemm_s * 1e3,
            ms_range(est.gemm_s_low, est.gemm_s_high),
        ],
        ["non-GEMM (Amdahl)", est.non_gemm_s * 1e3, est.non_gemm_s * 1e3, "point"],
        ["runtime compress", 0.0, est.compress_s * 1e3, "point"],
        [
            "step",
            est.dense_step_s * 1e3,
            est.step_s * 1e3,
            ms_range(est.step_s_low, est.step_s_high),
        ],
    ]
    print_table(
        f"{est.mode} step of {est.model}, batch {est.batch}, {est.gpu} {est.dtype}, "
        f"{est.level} level, sparse library {est.library}: dense vs {est.method} "
        f"{est.pattern} (ms)",
        ["", "dense", est.method, f"{est.method} {coverage}interval"],
        rows,
    )

    def ratio_range(low: float, high: float) -> str:
        return f"[{format_ratio(low)}, {format_ratio(high)}]"

    marker = " (extrapolated)" if est.extrapolated else ""
    print_table(
        "reduction (dense / method)",
        ["quantity", "value", f"{coverage}interval", "verdict"],
        [
            ["FLOPs, ideal accounting", est.flop_reduction_ideal, "-", "-"],
            ["FLOPs, 2:4 hardware accounting", est.flop_reduction_hardware, "-", "-"],
            [
                "GEMM time (model)",
                est.gemm_time_reduction,
                ratio_range(est.gemm_time_reduction_low, est.gemm_time_reduction_high),
                est.gemm_verdict + marker,
            ],
            [
                "step time (model)",
                est.time_reduction,
                ratio_range(est.time_reduction_low, est.time_reduction_high),
                est.verdict + marker,
            ],
        ],
    )
    print(
        f"verdict: step time {est.verdict}{', extrapolated' if est.extrapolated else ''} "
        f"({format_ratio(est.time_reduction, digits=3)}, {coverage}interval "
        f"{ratio_range(est.time_reduction_low, est.time_reduction_high)})"
    )
    if est.interval_basis is not None:
        for basis in est.interval_basis.split(" | "):
            print(f"interval: {basis}")
    else:
        print("interval: no GEMM runs sparse, so the times are point values")
    for note in est.notes:
        print(f"note: {note}")
    print("model estimate, not a measurement (specs/gemm_model.md)")
    return 0


# --------------------------------------------------------------------------- calibrate
def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _run_calibrate(args: argparse.Namespace) -> int:
    from nmsim.perf.calibration import calibrate, intervals_toml, parameters_toml
    from nmsim.perf.corpus import load_corpus

    if args.write and (args.no_cv or args.fold != "source"):
        raise ValueError(
            "--write needs the leave-one-source-out cross-validation (drop --no-cv and "
            "--fold): the prediction intervals come from its residuals"
        )
    _, rows = load_corpus(args.corpus)
    progress = None
    if not args.json and not args.no_cv:

        def progress(fold: int, folds: int, source: str) -> None:
            print(f"  CV fold {fold + 1}/{folds}: holding out {source}", flush=True)

    report = calibrate(rows, cross_validation=not args.no_cv, progress=progress, fold=args.fold)
    if args.write:
        from nmref.io.output import write_output

        data = Path(__file__).resolve().parent.parent / "data"
        texts = {
            "gemm_parameters.toml": parameters_toml(report.table),
            "gemm_intervals.toml": intervals_toml(report.intervals, report.table.provenance),
        }
        for name, text in texts.items():
            # Complete or untouched: a half-written table would break every later import.
            write_output(
                data / name,
                lambda temporary, text=text: Path(temporary).write_bytes(text.encode("utf-8")),
                force=True,
                flag="--write file",
            )
    if args.json:
        print_json(report.as_dict())
        return 0
    counts = report.corpus_counts
    print_table(
        f"corpus: {counts['rows']} rows ({counts['fitted_rows']} fitted) from "
        f"{counts['sources']} sources",
        ["gpu", "rows"],
        [[gpu, count] for gpu, count in counts["by_gpu"].items()],
    )
    print_table(
        "rows by source",
        ["source", "rows"],
        [[source, count] for source, count in counts["by_source"].items()],
    )
    table = report.table
    print_table(
        f"parameters ({table.provenance})",
        ["parameter", "scope", "value"],
        [[name, "global", value] for name, value in table.base.items()]
        + [
            [name, "/".join(scope), value]
            for scope, values in table.overrides.items()
            for name, value in values.items()
        ],
    )
    if report.summary:
        print_table(
            f"leave-one-{args.fold}-out CV ({report.folds} folds): |predicted/measured - 1| of "
            "the speedup, median / p90 in %",
            ["family", "rows", "sources", "model", "constant", "previous model"],
            [
                [
                    s.group,
                    s.rows,
                    s.sources,
                    f"{_pct(s.model_median)} / {_pct(s.model_p90)}",
                    f"{_pct(s.constant_median)} / {_pct(s.constant_p90)}",
                    f"{_pct(s.legacy_median)} / {_pct(s.legacy_p90)}",
                ]
                for s in report.summary
            ],
        )
    if args.rows:
        print_table(
            "rows: measured vs model speedup (CV = predicted by a fit without the row's source)",
            ["row", "gpu", "lib", "level", "m x n x k", "measured", "fit", "CV", "tags"],
            [
                [
                    r.id,
                    r.gpu,
                    r.library,
                    r.level,
                    f"{r.m}x{r.n}x{r.k}",
                    r.measured,
                    r.predicted,
                    "-" if r.cv_predicted is None else r.cv_predicted,
                    ",".join(r.tags) + ("" if r.fitted else " (not fitted)"),
                ]
                for r in report.rows
            ],
        )
    print_table(
        "qualitative checks",
        ["check", "result", "published statement"],
        [
            [
                c["id"],
                ("pass" if c["passed"] else "FAIL") + f" (model {c['model']:.3f})",
                c["check"],
            ]
            for c in report.checks
        ],
    )
    for warning in report.warnings:
        print(f"warning: {warning}")
    if args.write:
        print("wrote nmsim/data/gemm_parameters.toml and nmsim/data/gemm_intervals.toml")
    return 0


# --------------------------------------------------------------------------- parsers
def _add_library_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--library",
        choices=("cusparselt", "cutlass"),
        default=None,
        help="sparse kernel library (default: what torch.sparse uses: cuSPARSELt, CUTLASS "
        "for tf32)",
    )
    parser.add_argument(
        "--level",
        choices=("kernel", "framework"),
        default="kernel",
        help="kernel time, or a PyTorch call timed from the host (adds dispatch overheads)",
    )


def _add_method_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="resnet50",
        help="built-in model: resnet18, resnet50, deit-small, bert-base, llama-mlp",
    )
    parser.add_argument(
        "--method",
        default="srste",
        help="dense, inference_only, forward_only, srste, asp, transposable, "
        "bimask, bame, all_sparse",
    )
    parser.add_argument(
        "--pattern",
        type=pattern_argument,
        default="2:4",
        metavar="N:M",
        help="N:M pattern, N kept of every M (default 2:4)",
    )
    parser.add_argument(
        "--keep-dense",
        default="stem,head",
        help="comma-separated layer roles kept dense ('' for none)",
    )
    parser.add_argument(
        "--keep-dense-name", action="append", help="a layer name kept dense (repeatable)"
    )
    parser.add_argument(
        "--skip-first-input-grad", action="store_true", help="do not count dX of the first layer"
    )
    parser.add_argument(
        "--asp-dense-fraction",
        type=float,
        default=0.5,
        help="ASP: share of all steps trained dense before the mask (default 0.5)",
    )
    parser.add_argument(
        "--bame-update-overhead",
        type=float,
        default=0.0,
        help="share p of pruned dW entries computed anyway (BAME)",
    )
    parser.add_argument(
        "--bame-window",
        type=float,
        default=0.0,
        help="share of steps with dense dW (BAME adaptation window)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def add_parser(subparsers: Any) -> None:
    """Register ``gpus``, ``gemm``, ``flops``, ``estimate`` and ``calibrate``."""
    p = subparsers.add_parser("gpus", help="list the GPU database")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_gpus)

    p = subparsers.add_parser("gemm", help="time one dense / N:M-sparse GEMM on a GPU")
    p.add_argument(
        "--gpu", required=True, help="GPU name or key, as `nmsim gpus` lists them (e.g. a100)"
    )
    p.add_argument("-m", type=int, required=True, help="rows of A and C (A is the sparse operand)")
    p.add_argument("-n", type=int, required=True, help="columns of B and C")
    p.add_argument("-k", type=int, required=True, help="reduction length")
    p.add_argument(
        "--dtype", default="bf16", help="input dtype of A and B: fp16, bf16, tf32, fp8, int8"
    )
    p.add_argument(
        "--accumulate", default=None, help="accumulator dtype (default fp32; int32 for int8)"
    )
    p.add_argument(
        "--output-dtype",
        default=None,
        help="dtype of C (default the input dtype; fp32 for tf32, bf16 for fp8, int32 for int8)",
    )
    p.add_argument(
        "--sparse",
        type=pattern_argument,
        default=None,
        metavar="N:M",
        help="N:M pattern of A along k (N kept of every M), e.g. 2:4",
    )
    p.add_argument(
        "--incompatible",
        choices=("error", "dense"),
        default="error",
        help="a pattern the sparse tensor cores cannot run: an error (default), or time it dense",
    )
    _add_library_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_gemm)

    p = subparsers.add_parser("flops", help="training FLOPs per GEMM, phase and method")
    _add_method_options(p)
    p.add_argument(
        "--examples",
        type=float,
        default=1_281_167,
        help="training examples per epoch (default 1,281,167: ImageNet-1k)",
    )
    p.add_argument("--epochs", type=float, default=100, help="epochs (default 100)")
    p.add_argument("--layers", action="store_true", help="print every layer")
    p.add_argument(
        "--compare", action="store_true", help="table of every method and accounting assumption"
    )
    p.set_defaults(func=_run_flops)

    p = subparsers.add_parser("estimate", help="step time: GEMMs + non-GEMM (Amdahl)")
    _add_method_options(p)
    p.add_argument(
        "--gpu", required=True, help="GPU name or key, as `nmsim gpus` lists them (e.g. a100)"
    )
    p.add_argument("--batch", type=int, required=True, help="examples per step")
    p.add_argument("--dtype", default="bf16", help="GEMM input dtype: fp16, bf16, tf32, fp8, int8")
    p.add_argument(
        "--mode",
        choices=("train", "inference"),
        default="train",
        help="a training step (forward, dX, dW) or an inference forward",
    )
    p.add_argument(
        "--non-gemm-fraction",
        type=float,
        default=None,
        help="share of the dense step outside GEMMs (default 0.25, an assumption)",
    )
    _add_library_options(p)
    p.set_defaults(func=_run_estimate)

    p = subparsers.add_parser(
        "calibrate", help="fit the GEMM model on the measured corpus and cross-validate it"
    )
    p.add_argument("--no-cv", action="store_true", help="skip the leave-one-source-out refits")
    p.add_argument(
        "--corpus",
        action="append",
        default=[],
        metavar="FILE",
        help="an extra corpus file (e.g. a GPU sweep's output); repeatable",
    )
    p.add_argument("--rows", action="store_true", help="print every corpus row")
    p.add_argument(
        "--fold",
        choices=("source", "document"),
        default="source",
        help="what a CV fold holds out: one source (default) or every source of one document",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="store the fit in nmsim/data/gemm_parameters.toml and the CV intervals in "
        "nmsim/data/gemm_intervals.toml",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run_calibrate)
