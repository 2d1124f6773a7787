"""Files of ``nmsim report --out DIR``: the JSON, a CSV, and PNG plots.

DIR is published as one set (:func:`nmref.io.output.output_folder`): every file is
rendered, written into a hidden folder beside DIR and fsynced, and only then is that
folder swapped in for DIR. A failure on any file, Ctrl-C or SIGTERM leave DIR as it
was (its previous report, complete) and nothing beside it; never a mix of new and
old files. DIR is the report's own folder: an existing one is replaced only with
``force`` and only when it holds nothing but report files (:data:`REPORT_FILES`,
regular files; a link, folder, FIFO or any other file in it is refused with or
without ``force``); an existing empty folder is used without ``force``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nmref.io.output import check_output_folder, output_folder
from nmref.layouts import to_reduction_matrix
from nmref.masks import magnitude_mask
from nmref.patterns import parse_pattern

__all__ = ["REPORT_FILES", "check_out", "csv_rows", "csv_text", "planned_files", "write_outputs"]

JSON_NAME = "report.json"
CSV_NAME = "report.csv"
KEPT_PLOT = "kept_fraction.png"
SPEEDUP_PLOT = "speedup.png"
HEATMAP_PLOT = "mask_heatmap.png"
ERROR_PLOT = "output_error.png"
#: Every file ``--out`` may hold: ``--force`` replaces a folder holding nothing else.
REPORT_FILES = (JSON_NAME, CSV_NAME, KEPT_PLOT, SPEEDUP_PLOT, HEATMAP_PLOT, ERROR_PLOT)


#: CSV column -> field of a tensor's ``time.forward_speedup`` block.
FORWARD_SPEEDUP_COLUMNS = {
    "fwd_speedup": "speedup",
    "fwd_speedup_low": "low",
    "fwd_speedup_high": "high",
    "fwd_verdict": "verdict",
    "fwd_extrapolated": "extrapolated",
}


def csv_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per tensor: shape facts, per-method kept fraction, FLOPs and time, and
    the inference forward-GEMM speedup with its prediction interval and verdict."""
    methods = report["settings"]["methods"]
    rows = []
    for entry in report["tensors"]:
        align = entry["alignment"] or {}
        row: dict[str, Any] = {
            "name": entry["name"],
            "shape": "x".join(str(s) for s in entry["shape"]),
            "parameters": entry["parameters"],
            "status": entry["status"],
            "reason": entry["reason"] or "",
            "layout": entry["layout"] or "",
            "groups_fit": align.get("groups_fit", ""),
            "tiles_fit": align.get("tiles_fit", ""),
        }
        if report["checkpoint"].get("compressed"):
            stored = entry.get("stored_mask") or {}
            row["stored_mask_valid"] = stored.get("valid", "")
            row["stored_zeros"] = stored.get("stored_zeros", "")
        for key in methods:
            result = entry["methods"].get(key) or {}
            row[f"{key}_kept_fraction"] = result.get("kept_fraction", "")
            if key == "transposable":
                row["transposable_at_most_kept_fraction"] = result.get("at_most_kept_fraction", "")
            if key == "greedy":
                row["greedy_optimality_gap"] = result.get("optimality_gap", "")
        for cost, label in (("flops", "flops"), ("time", "seconds")):
            block = entry[cost] or {}
            row[f"dense_{label}"] = (block.get("dense") or {}).get("total", "")
            for key in methods:
                method = (block.get("methods") or {}).get(key) or {}
                row[f"{key}_{label}"] = method.get("total", "")
            if cost == "flops":
                for key in methods:
                    method = (block.get("executed") or {}).get(key) or {}
                    row[f"{key}_executed_flops"] = method.get("total", "")
        # Inference forward-GEMM speedup with its prediction interval (empty: runs dense).
        speedup = (entry["time"] or {}).get("forward_speedup") or {}
        for column, field in FORWARD_SPEEDUP_COLUMNS.items():
            row[column] = speedup.get(field, "")
        if "calibration" in report:  # R11; a report without --calibration keeps its columns
            row.update(_error_columns(entry, methods))
        rows.append(row)
    return rows


#: Output-error field -> CSV column suffix (``1d_output_error``, ``1d_reconstructed_error``).
FIELD_COLUMNS = (("masked", "output_error"), ("reconstructed", "reconstructed_error"))


def _error_columns(entry: dict[str, Any], methods: list[str]) -> dict[str, Any]:
    """The output-error columns of one tensor (empty where not measured)."""
    block = entry.get("output_error") or {}
    row: dict[str, Any] = {
        "calibration_samples": block.get("samples") or "",
        "output_error_reason": block.get("reason") or "",
    }
    for key in methods:
        result = (block.get("methods") or {}).get(key) or {}
        prefixes = ("", "at_most_") if key == "transposable" else ("",)
        for prefix in prefixes:
            for field, column in FIELD_COLUMNS:
                value = result.get(prefix + field)
                row[f"{key}_{prefix}{column}"] = "" if value is None else value
    return row


def csv_text(report: dict[str, Any]) -> str:
    """:func:`csv_rows` as CSV text (full precision: Python's shortest round-trip floats)."""
    rows = csv_rows(report)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else ["name"])
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def planned_files(report: dict[str, Any], directory: Path) -> list[Path]:
    """The files :func:`write_outputs` would write for this report."""
    names = [JSON_NAME, CSV_NAME, KEPT_PLOT, HEATMAP_PLOT]
    if report["totals"]["time"] is not None:
        names.insert(3, SPEEDUP_PLOT)
    if "calibration" in report:
        names.append(ERROR_PLOT)
    return [directory / name for name in names]


def check_out(
    directory: str | os.PathLike[str],
    *,
    force: bool = False,
    inputs: tuple[str | os.PathLike[str], ...] = (),
) -> None:
    """Refuse ``--out DIR`` now, before the work, by the rules of :func:`write_outputs`.

    Raises
    ------
    ValueError
        If DIR is a file, a symbolic link, ``.``/``..``, is or holds an input, holds
        anything but regular report files (:data:`REPORT_FILES`), or holds report
        files and ``force`` is false.
    """
    directory = Path(directory)
    if directory.name in ("", ".", ".."):
        raise ValueError(
            f"--out {str(directory)!r} must name the report's own folder (not '.' or '..'); "
            "it is replaced as a whole"
        )
    if directory.exists() and not directory.is_dir() and not directory.is_symlink():
        raise ValueError(f"--out {str(directory)!r} exists and is not a folder")
    parent = directory.parent if str(directory.parent) else Path(".")
    if not parent.is_dir():
        return  # created on writing; nothing there to replace
    check_output_folder(directory, force=True, inputs=inputs, flag="--out", owned=REPORT_FILES)
    held = [name for name in REPORT_FILES if (directory / name).exists()]
    if held and not force:
        raise ValueError(
            f"--out {str(directory)!r} already holds {', '.join(held)}; "
            "choose another folder or pass --force to replace them"
        )


def _file_writer(data: bytes) -> Callable[[str], None]:
    """``write(temporary)`` putting ``data`` in the file (one file of the folder)."""

    def write(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            handle.write(data)

    return write


def _drawable(text: str) -> str:
    """``text`` as matplotlib can draw it: a file name that is not valid UTF-8 arrives with
    surrogate escapes (os.fsdecode), which the font renderer refuses; show its bytes as
    ``\\xff`` escapes instead, and control characters the same way."""
    from nmsim.report.text import printable

    return printable(text)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display is ever needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure: Any) -> bytes:
    """The laid-out ``figure`` as PNG bytes; the figure is closed.

    ``bbox_inches="tight"`` grows the canvas to every label, so none is clipped.
    """
    buffer = io.BytesIO()
    # Fixed metadata: the same report gives byte-identical PNGs.
    figure.savefig(
        buffer,
        format="png",
        dpi=110,
        metadata={"Software": None},
        bbox_inches="tight",
        pad_inches=0.15,
    )
    _pyplot().close(figure)
    return buffer.getvalue()


#: Layers drawn per plot; a larger model's plot says how many it leaves out.
MAX_PLOTTED_LAYERS = 80

VERDICT_COLOURS = {"faster": "tab:green", "slower": "tab:red", "no gain": "tab:gray"}


def _model_title(report: dict[str, Any]) -> str:
    """The model's name for titles (never a site-packages path)."""
    checkpoint = report["checkpoint"]
    name = checkpoint.get("name") or Path(checkpoint["source"]).name
    return _drawable(name) + (" [synthetic weights]" if checkpoint["synthetic"] else "")


def _layers(report: dict[str, Any], need_time: bool = False) -> tuple[list[dict], str]:
    """The analysed tensors to draw (at most :data:`MAX_PLOTTED_LAYERS`) and a title note."""
    entries = [e for e in report["tensors"] if e["status"] == "ok" and (e["time"] or not need_time)]
    note = ""
    if len(entries) > MAX_PLOTTED_LAYERS:
        note = f" (first {MAX_PLOTTED_LAYERS} of {len(entries)} layers)"
        entries = entries[:MAX_PLOTTED_LAYERS]
    return entries, note


def _layer_axes(count: int, panels: int) -> tuple[Any, Any]:
    """A figure of ``panels`` side-by-side axes sharing one row per layer (top to bottom)."""
    height = max(2.6, 0.24 * count + 1.4)
    figure, axes = _pyplot().subplots(
        1,
        panels,
        figsize=(4.6 * panels + 1.6, height),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    return figure, axes[0]


def _label_layers(axes: Any, names: list[str]) -> None:
    axes.set_yticks(np.arange(len(names)))
    axes.set_yticklabels([_drawable(n) for n in names], fontsize=7)
    axes.set_ylim(len(names) - 0.5, -0.5)  # first layer on top
    axes.grid(axis="x", linewidth=0.4, alpha=0.5)


def _legend_above(axes: Any, **options: Any) -> None:
    """A legend in one row above the axes, off the data (constrained layout makes room)."""
    handles = options.pop("handles", None) or axes.get_legend_handles_labels()[0]
    title = options.pop("title", None)
    axes.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=min(len(handles), 4),
        fontsize=7,
        title=title,
        title_fontsize=7,
        frameon=False,
    )


def _kept_value(entry: dict[str, Any], key: str) -> float:
    result = entry["methods"].get(key) or {}
    value = result.get("kept_fraction")
    return np.nan if value is None else 100.0 * value


def _kept_plot(report: dict[str, Any]) -> bytes:
    """Kept |w| per layer: 1-D N:M on a zoomed axis, and every other method as its
    difference from 1-D (percentage points), where the differences are visible."""
    columns = report["columns"]
    methods = [k for k in report["settings"]["methods"] if columns[k]["available"]]
    entries, note = _layers(report)
    pattern = report["settings"]["pattern"]
    names = [e["name"] for e in entries]
    positions = np.arange(len(entries))
    base = "1d" if "1d" in methods else methods[0]
    others = [k for k in methods if k != base]
    figure, panels = _layer_axes(len(entries), 2 if others else 1)
    left = panels[0]
    values = np.array([_kept_value(e, base) for e in entries])
    left.plot(values, positions, "o", color="black", markersize=4)
    finite = values[np.isfinite(values)]
    if finite.size:  # zoomed: the spread between layers, not 0..100%
        low, high = float(finite.min()), float(finite.max())
        margin = max(0.1 * (high - low), 0.05)
        left.set_xlim(low - margin, high + margin)
    left.set_xlabel(f"kept |w| with {columns[base]['title']} (%)")
    _label_layers(left, names)
    if others:
        axes = panels[1]
        height = 0.8 / len(others)
        for index, key in enumerate(others):
            difference = np.array([_kept_value(e, key) for e in entries]) - values
            axes.barh(
                positions - 0.4 + height * (index + 0.5),
                difference,
                height,
                label=columns[key]["title"],
            )
        axes.axvline(0.0, color="black", linewidth=0.8)
        axes.set_xlabel(f"difference from {columns[base]['title']} (percentage points)")
        _legend_above(axes)
        axes.grid(axis="x", linewidth=0.4, alpha=0.5)
    missing = int(np.sum(~np.isfinite(values)))
    if missing:
        note += f"; no marker: {columns[base]['title']} does not fit ({missing} layer(s))"
    figure.suptitle(f"{_model_title(report)}: kept |w| per layer at {pattern}{note}", fontsize=10)
    return _png(figure)


def _speedup_plot(report: dict[str, Any]) -> bytes:
    """Per-layer inference speedup of the forward GEMM with its prediction interval (the
    GEMM model's), coloured by verdict, the model total, and training-step speedups."""
    from matplotlib.lines import Line2D

    settings = report["settings"]
    columns = report["columns"]
    methods = [k for k in settings["methods"] if columns[k]["available"]]
    entries, note = _layers(report, need_time=True)
    total = report["totals"]["time"].get("forward_speedup")
    rows = [(e["name"], e["time"].get("forward_speedup")) for e in entries]
    rows.append(("model total (forward GEMMs)", total))
    names = [name for name, _ in rows]
    figure, (forward, training) = _layer_axes(len(rows), 2)
    for position, (_, block) in enumerate(rows):
        if block is None:
            forward.plot(1.0, position, "|", color="silver", markersize=8)  # runs dense
            continue
        colour = VERDICT_COLOURS.get(block["verdict"], "tab:blue")
        forward.errorbar(
            block["speedup"],
            position,
            xerr=[[block["speedup"] - block["low"]], [block["high"] - block["speedup"]]],
            fmt="D" if position == len(rows) - 1 else "o",
            color=colour,
            ecolor=colour,
            capsize=2,
            markersize=4,
        )
    forward.axvline(1.0, color="black", linewidth=0.8)
    forward.margins(x=0.05)  # the 1.0 line and interval ends off the frame
    coverage = next((b["coverage"] for _, b in rows if b and b.get("coverage")), None)
    interval = f"{coverage:.0%} prediction interval" if coverage else "prediction interval"
    forward.set_xlabel(f"inference speedup, forward GEMM at {settings['pattern']}\n({interval})")
    handles = [
        Line2D([], [], marker="o", linestyle="", color=colour, label=verdict)
        for verdict, colour in VERDICT_COLOURS.items()
    ]
    _legend_above(forward, handles=handles, title="verdict")
    _label_layers(forward, names)
    for index, key in enumerate(methods):
        speedups = []
        for entry in entries:
            method = entry["time"]["methods"].get(key) or entry["time"]["dense"]
            speedups.append(entry["time"]["dense"]["total"] / method["total"])
        block = report["totals"]["time"]["methods"].get(key)
        speedups.append(block["speedup"] if block else np.nan)
        training.plot(
            speedups,
            np.arange(len(rows)) + (index - (len(methods) - 1) / 2) * 0.15,
            "os^v"[index % 4],
            markersize=4,
            label=columns[key]["title"],
        )
    training.axvline(1.0, color="black", linewidth=0.8)
    training.margins(x=0.05)
    training.set_xlabel("training-step GEMM speedup, fwd + dX + dW\n(point estimates)")
    _legend_above(training)
    training.grid(axis="x", linewidth=0.4, alpha=0.5)
    figure.suptitle(
        f"{_model_title(report)}: estimated speedup on {settings['gpu']}, {settings['dtype']}, "
        f"{settings['batch_tokens']} tokens{note}",
        fontsize=10,
    )
    return _png(figure)


def _error_value(entry: dict[str, Any], key: str, field: str) -> float:
    result = ((entry.get("output_error") or {}).get("methods") or {}).get(key) or {}
    value = result.get(field)
    return np.nan if value is None else float(value)


def _error_plot(report: dict[str, Any]) -> bytes:
    """Per layer and method, the relative output error with the mask only (hollow) and after
    exact reconstruction (filled), joined by a line; layers without inputs are left blank."""
    columns = report["columns"]
    methods = [k for k in report["settings"]["methods"] if columns[k]["available"]]
    entries, note = _layers(report)
    names = [e["name"] for e in entries]
    figure, (axes,) = _layer_axes(len(entries), 1)
    colours = _pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    spread = 0.6 / max(len(methods), 1)
    for index, key in enumerate(methods):
        colour = colours[index % len(colours)]
        offset = (index - (len(methods) - 1) / 2) * spread
        masked = np.array([_error_value(e, key, "masked") for e in entries])
        fitted = np.array([_error_value(e, key, "reconstructed") for e in entries])
        positions = np.arange(len(entries)) + offset
        axes.hlines(positions, fitted, masked, color=colour, linewidth=0.8)
        axes.plot(masked, positions, "o", mfc="none", color=colour, markersize=4)
        # Bi-Mask's layer computes with its forward mask (the backward one is for dX only)
        label = "Bi-Mask forward" if key == "bimask" else columns[key]["title"]
        axes.plot(fitted, positions, "o", color=colour, markersize=4, label=label)
    axes.axvline(0.0, color="black", linewidth=0.8)
    axes.set_xlabel(
        "relative output error on the calibration inputs\n(hollow: mask only; filled: after "
        "exact reconstruction)"
    )
    _legend_above(axes)
    _label_layers(axes, names)
    source = _drawable(report["calibration"]["source"])
    figure.suptitle(
        f"{_model_title(report)}: output error per layer at {report['settings']['pattern']}, "
        f"calibration {source}{note}",
        fontsize=10,
    )
    return _png(figure)


def _heatmap(report: dict[str, Any], weights: dict[str, np.ndarray]) -> bytes:
    from matplotlib.ticker import MaxNLocator

    pattern = parse_pattern(report["settings"]["pattern"])
    figure, axes = _pyplot().subplots(figsize=(6.4, 4.2))
    if not weights:
        axes.text(0.5, 0.5, "no tensor with a 1-D mask", ha="center", va="center")
        axes.set_axis_off()
    else:
        ((name, weight),) = weights.items()
        entry = next(e for e in report["tensors"] if e["name"] == name)
        layout = entry["layout"]
        mask = magnitude_mask(weight, pattern.n, pattern.m, layout=layout)
        # A corner small enough to see single groups (and M x M tiles).
        rows, cols = 4 * pattern.m, 8 * pattern.m
        matrix = to_reduction_matrix(np.abs(weight), layout)[:rows, :cols].astype(np.float64)
        kept = to_reduction_matrix(mask, layout)[:rows, :cols]
        shown = np.where(kept, matrix, np.nan)
        image = axes.imshow(shown, cmap="viridis", interpolation="nearest")
        figure.colorbar(image, ax=axes, label="|w| of kept entries (pruned: blank)", shrink=0.8)
        axes.set_title(
            # one fact per line: a long tensor name must not run into the colour bar
            f"{_model_title(report)}\n{_drawable(name)} [{layout}]\n1-D {pattern} mask, "
            f"top-left {kept.shape[0]}x{kept.shape[1]}",
            fontsize=9,
        )
        for edge in range(pattern.m, kept.shape[1], pattern.m):
            axes.axvline(edge - 0.5, color="black", linewidth=0.6)
        for edge in range(pattern.m, kept.shape[0], pattern.m):
            axes.axhline(edge - 0.5, color="gray", linewidth=0.4, linestyle=":")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel(f"reduction axis (solid lines: groups of M={pattern.m})")
        axes.set_ylabel("row (dotted: M x M tiles)")
    figure.tight_layout()
    return _png(figure)


def write_outputs(
    report: dict[str, Any],
    directory: str | os.PathLike[str],
    heatmap_weight: dict[str, np.ndarray],
    *,
    force: bool = False,
    inputs: tuple[str | os.PathLike[str], ...] = (),
) -> list[Path]:
    """Write the JSON, CSV and plots as the folder ``directory``, all at once.

    The files are rendered first, then written into a hidden folder beside
    ``directory`` and published as one set (:func:`nmref.io.output.output_folder`):
    ``directory`` holds the complete new report, or (after any error, Ctrl-C or
    SIGTERM) exactly what it held before. Its parent folders are created if missing.

    Raises
    ------
    ValueError
        As :func:`check_out`.
    OSError
        If the system fails while writing (nothing is published).
    """
    directory = Path(directory)
    check_out(directory, force=force, inputs=inputs)
    paths = planned_files(report, directory)
    contents = {
        JSON_NAME: (json.dumps(report, indent=1, allow_nan=False) + "\n").encode(),
        CSV_NAME: csv_text(report).encode(),
        KEPT_PLOT: _kept_plot(report),
        HEATMAP_PLOT: _heatmap(report, heatmap_weight),
    }
    if report["totals"]["time"] is not None:
        contents[SPEEDUP_PLOT] = _speedup_plot(report)
    if "calibration" in report:
        contents[ERROR_PLOT] = _error_plot(report)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with output_folder(
        directory, force=force, inputs=inputs, flag="--out", owned=REPORT_FILES
    ) as folder:
        written = [folder.write(path.name, _file_writer(contents[path.name])) for path in paths]
    return written
