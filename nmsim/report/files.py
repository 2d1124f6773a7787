"""Files of ``nmsim report --out DIR``: the JSON, a CSV, and PNG plots.

Nothing in DIR is ever replaced silently: every file is checked before the first
is written, and an existing one is an error unless ``force``. Each file is
written to a temporary name and renamed, so a failure leaves no half file.
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

from nmref._output import write_output
from nmref.layouts import to_reduction_matrix
from nmref.masks import magnitude_mask
from nmref.patterns import parse_pattern

__all__ = ["csv_rows", "planned_files", "write_outputs"]

JSON_NAME = "report.json"
CSV_NAME = "report.csv"
KEPT_PLOT = "kept_fraction.png"
SPEEDUP_PLOT = "speedup.png"
HEATMAP_PLOT = "mask_heatmap.png"


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
        rows.append(row)
    return rows


def planned_files(report: dict[str, Any], directory: Path) -> list[Path]:
    """The files :func:`write_outputs` would write for this report."""
    names = [JSON_NAME, CSV_NAME, KEPT_PLOT, HEATMAP_PLOT]
    if report["totals"]["time"] is not None:
        names.insert(3, SPEEDUP_PLOT)
    return [directory / name for name in names]


def _atomic_write(path: Path, data: bytes, *, force: bool, inputs: tuple[Any, ...]) -> Path:
    def write(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            handle.write(data)

    return write_output(path, write, force=force, inputs=inputs, flag="--out file")


def _drawable(text: str) -> str:
    """``text`` as matplotlib can draw it: a file name that is not valid UTF-8 arrives with
    surrogate escapes (os.fsdecode), which the font renderer refuses; show its bytes as
    ``\\xff`` escapes instead, and control characters the same way."""
    from nmsim.cli.tables import printable

    return printable(text)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display is ever needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure: Any) -> bytes:
    """The laid-out ``figure`` as PNG bytes; the figure is closed."""
    figure.tight_layout()
    buffer = io.BytesIO()
    # Fixed metadata: the same report gives byte-identical PNGs.
    figure.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    _pyplot().close(figure)
    return buffer.getvalue()


def _method_bars(
    report: dict[str, Any],
    entries: list[dict[str, Any]],
    value: Callable[[dict[str, Any], str], float],
) -> tuple[Any, Any]:
    """A figure with one group of bars per tensor of ``entries``, one bar per available
    method (``value(entry, method)``), labelled by tensor name; the caller adds the rest."""
    methods = [k for k in report["settings"]["methods"] if report["columns"][k]["available"]]
    figure, axes = _pyplot().subplots(figsize=(max(6.0, 0.35 * len(entries) + 2), 4.2))
    width = 0.8 / max(len(methods), 1)
    positions = np.arange(len(entries))
    for index, key in enumerate(methods):
        values = [value(entry, key) for entry in entries]
        axes.bar(positions + index * width, values, width, label=report["columns"][key]["title"])
    axes.set_xticks(positions + width * (len(methods) - 1) / 2)
    axes.set_xticklabels([e["name"] for e in entries], rotation=70, ha="right", fontsize=7)
    return figure, axes


def _kept_plot(report: dict[str, Any]) -> bytes:
    def kept_fraction(entry: dict[str, Any], key: str) -> float:
        return (entry["methods"].get(key) or {}).get("kept_fraction", np.nan)

    entries = [e for e in report["tensors"] if e["status"] == "ok"]
    figure, axes = _method_bars(report, entries, kept_fraction)
    axes.set_ylabel("kept fraction of |w|")
    # Headroom above 1 keeps the legend off the bars.
    axes.set_ylim(0, 1.4)
    axes.set_yticks(np.linspace(0, 1, 6))
    axes.set_title(
        f"{_drawable(report['checkpoint']['source'])}: kept |w| per layer at "
        f"{report['settings']['pattern']}"
    )
    axes.legend(fontsize=8, loc="upper center", ncol=2)
    return _png(figure)


def _speedup_plot(report: dict[str, Any]) -> bytes:
    def speedup(entry: dict[str, Any], key: str) -> float:
        method_time = entry["time"]["methods"].get(key) or entry["time"]["dense"]
        return entry["time"]["dense"]["total"] / method_time["total"]

    entries = [e for e in report["tensors"] if e["status"] == "ok" and e["time"]]
    figure, axes = _method_bars(report, entries, speedup)
    axes.axhline(1.0, color="black", linewidth=0.8)
    highest = max((bar.get_height() for bar in axes.patches), default=1.0)
    axes.set_ylim(0, 1.6 * max(highest, 1.0))
    axes.set_ylabel("estimated training-step GEMM speedup")
    settings = report["settings"]
    axes.set_title(
        f"{settings['gpu']}, {settings['dtype']}, {settings['batch_tokens']} tokens, "
        f"{settings['pattern']}"
    )
    axes.legend(fontsize=8, loc="upper center", ncol=2)
    return _png(figure)


def _heatmap(report: dict[str, Any], weights: dict[str, np.ndarray]) -> bytes:
    pattern = parse_pattern(report["settings"]["pattern"])
    figure, axes = _pyplot().subplots(figsize=(6.4, 5.0))
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
        figure.colorbar(image, ax=axes, label="|w| of kept entries (pruned: blank)")
        axes.set_title(
            f"{_drawable(name)} [{layout}], 1-D {pattern} mask, top-left "
            f"{kept.shape[0]}x{kept.shape[1]}",
            fontsize=9,
        )
        for edge in range(pattern.m, kept.shape[1], pattern.m):
            axes.axvline(edge - 0.5, color="black", linewidth=0.6)
        for edge in range(pattern.m, kept.shape[0], pattern.m):
            axes.axhline(edge - 0.5, color="gray", linewidth=0.4, linestyle=":")
        axes.set_xlabel(f"reduction axis (solid lines: groups of M={pattern.m})")
        axes.set_ylabel("row (dotted: M x M tiles)")
    return _png(figure)


def write_outputs(
    report: dict[str, Any],
    directory: str | os.PathLike[str],
    heatmap_weight: dict[str, np.ndarray],
    *,
    force: bool = False,
    inputs: tuple[str | os.PathLike[str], ...] = (),
) -> list[Path]:
    """Write the JSON, CSV and plots into ``directory`` (created if missing).

    Each file goes through :func:`nmref._output.write_output`: complete or absent,
    never through a symbolic link, never over one of ``inputs``, and without
    ``force`` never over an existing file (even one created meanwhile).

    Raises
    ------
    ValueError
        If any file exists and ``force`` is false, is a symbolic link or an input,
        or ``directory`` is a file.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--out {str(directory)!r} exists and is not a folder")
    paths = planned_files(report, directory)
    existing = [p.name for p in paths if p.exists()]
    if existing and not force:
        raise ValueError(
            f"--out {str(directory)!r} already holds {', '.join(existing)}; "
            "choose another folder or pass --force to replace them"
        )
    directory.mkdir(parents=True, exist_ok=True)
    rows = csv_rows(report)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else ["name"])
    writer.writeheader()
    writer.writerows(rows)
    contents = {
        JSON_NAME: (json.dumps(report, indent=1, allow_nan=False) + "\n").encode(),
        CSV_NAME: text.getvalue().encode(),
        KEPT_PLOT: _kept_plot(report),
        HEATMAP_PLOT: _heatmap(report, heatmap_weight),
    }
    if report["totals"]["time"] is not None:
        contents[SPEEDUP_PLOT] = _speedup_plot(report)
    return [_atomic_write(path, contents[path.name], force=force, inputs=inputs) for path in paths]
