"""Calibration on the measured corpus: reproducible fit, honest CV, baselines, intervals, CLI."""

from __future__ import annotations

import json
import statistics
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from nmsim.cli import main
from nmsim.perf.calibration import (
    _FITTED_BY_NAME,
    LEGACY_PARAMETERS,
    CalibrationReport,
    _design,
    _penalty,
    _reach,
    _row_losses,
    _Staged,
    _StagedPenalty,
    _subset,
    _times,
    calibrate,
    compress_time_s,
    cross_validate,
    exclusion_reason,
    fit_table,
    fitted_rows,
    interval_table,
    load_points,
    parameters_toml,
    predict_rows,
)
from nmsim.perf.corpus import load_corpus
from nmsim.perf.gemm import gemm_time
from nmsim.perf.gemm_parameters import default_parameter_table, table_from_toml
from nmsim.perf.intervals import default_interval_table

SOURCES, ROWS = load_corpus()


@cache
def full_report() -> CalibrationReport:
    """The shipped calibration: fit plus leave-one-source-out CV (about 25 s on one core)."""
    return calibrate()


def small_subset() -> list:
    """Three small sources: enough for a CV with a fold per source, in seconds."""
    wanted = ("pt-ao-issue-174", "pt-blog-sparse-training", "vendor-sparseflow-csv")
    return [r for r in ROWS if r.source in wanted]


# --------------------------------------------------------------------------- the model
def test_the_fit_evaluates_the_same_model_gemm_time_ships() -> None:
    """The vectorised evaluation the fit minimises equals gemm_time on every fitted row."""
    table = default_parameter_table()
    rows = fitted_rows(ROWS)  # the shipped fit's rows: the same slots as the table
    design = _design(rows)
    x = np.array(
        [
            table.base[name] if scope == ("*", "*", "*") else table.overrides[scope][name]
            for name, scope in design.slots
        ]
    )
    dense, sparse = _times(design, x)
    assert np.allclose(dense / sparse, predict_rows(rows, table), rtol=1e-12, atol=0)


def test_the_fit_line_searches_give_bit_for_bit_the_losses_of_the_vectorised_model() -> None:
    """The fit's staged line search equals _row_losses and _penalty of each trial exactly.

    The staging (terms a parameter does not enter kept between trials) is only a speed-up:
    the shipped table is reproduced digit for digit only while it changes no bit.
    """
    design = _design(fitted_rows(ROWS))
    rng = np.random.default_rng(0)
    fitted = [_FITTED_BY_NAME[name] for name, _ in design.slots]
    x = np.array([rng.uniform(f.low, f.high) for f in fitted])
    penalty = _StagedPenalty(design)
    for i, rows in enumerate(_reach(design)):
        part = _subset(design, rows)
        line, shrinkage = _Staged(part).line(x, i), penalty.line(x, i)
        f = fitted[i]
        for value in (x[i], f.low, f.high, rng.uniform(f.low, f.high)):
            trial = x.copy()
            trial[i] = value
            assert line(value).tobytes() == _row_losses(part, trial).tobytes(), design.slots[i]
            assert shrinkage(trial) == _penalty(design, trial), design.slots[i]


def test_previous_model_is_reproduced_exactly_as_the_baseline() -> None:
    """LEGACY_PARAMETERS (every new term off) give the model's outputs before the corpus."""
    path = Path(__file__).parent / "data" / "previous_gemm_model.json"
    for row in json.loads(path.read_text("utf-8")):
        args = (row["gpu"], row["m"], row["n"], row["k"])
        dense = gemm_time(*args, dtype="fp16", parameters=LEGACY_PARAMETERS)
        sparse = gemm_time(*args, dtype="fp16", sparse="2:4", parameters=LEGACY_PARAMETERS)
        assert dense.time_s == pytest.approx(row["dense"], rel=1e-12)
        assert sparse.time_s == pytest.approx(row["sparse"], rel=1e-12)


def test_excluded_rows_are_reported_with_a_reason_and_never_fitted() -> None:
    fitted = {r.id for r in fitted_rows(ROWS)}
    for row in ROWS:
        reason = exclusion_reason(row)
        assert (reason is None) == (row.id in fitted), row.id
        if "historic" in row.tags:
            assert reason is not None and "historic" in reason
        if row.speedup > 2.0 and row.library != "other" and not row.tags:
            assert reason is not None and "dense baseline" in reason


def test_fit_is_deterministic_and_the_file_round_trips() -> None:
    rows = small_subset()
    a = fit_table(rows, sweeps=1, iterations=8)
    b = fit_table(rows, sweeps=1, iterations=8)
    assert a == b
    again = table_from_toml(tomllib.loads(parameters_toml(a)))
    assert again.base == a.base and again.overrides == a.overrides
    assert again.structure == a.structure


def test_cross_validation_is_deterministic_and_holds_each_source_out() -> None:
    rows = small_subset()
    first = cross_validate(rows, sweeps=1, iterations=8)
    second = cross_validate(rows, sweeps=1, iterations=8)
    assert first == second
    assert first.folds == len({r.source for r in rows})
    for row in fitted_rows(rows):
        # the constant baseline is the median of the *other* sources' rows
        others = [r.speedup for r in fitted_rows(rows) if r.source != row.source]
        assert first.constant[row.id] == statistics.median(others)
        assert row.id in first.predicted


def test_fit_recovers_a_known_model_from_its_own_predictions() -> None:
    """Power: rows generated by a known table are fitted back to the same speedups."""
    from dataclasses import replace

    truth = default_parameter_table()
    rows = [r for r in fitted_rows(ROWS) if r.gpu in ("a100-pcie-80gb", "rtx-4090")][::5]
    speedups = predict_rows(rows, truth)
    synthetic = [
        replace(r, speedup=float(s), dense_us=None, sparse_us=None)
        for r, s in zip(rows, speedups, strict=True)
    ]
    refit = fit_table(synthetic, sweeps=2, iterations=16)
    error = np.abs(predict_rows(synthetic, refit) / speedups - 1)
    assert float(np.median(error)) < 0.03


def test_interval_quantiles_bracket_zero_and_pool_by_regime() -> None:
    from nmsim.perf.calibration import RowResult

    def row(i: int, n: int, measured: float, predicted: float) -> RowResult:
        return RowResult(
            id=f"r{i}",
            source="s",
            gpu="a100",
            family="A100",
            dtype="fp16",
            library="cusparselt",
            level="kernel",
            m=1,
            n=n,
            k=4,
            regime="small-n" if n <= 64 else "large-n",
            measured=measured,
            fitted=True,
            predicted=predicted,
            cv_predicted=predicted,
            constant=1.0,
            legacy=1.0,
        )

    rows = [row(i, 4096, 1.0 + 0.01 * i, 1.0) for i in range(20)]  # all under-predicted
    table = interval_table(rows)
    large = table["pooled"]["large-n"]
    assert large["count"] == 20 and large["low"] == 0.0 and large["high"] > 0
    # no small-n rows: the small-n regime pools everything rather than claiming certainty
    assert table["pooled"]["small-n"]["count"] == 20


# --------------------------------------------------------------------------- shipped data
@pytest.mark.slow
def test_shipped_parameters_and_intervals_equal_a_fresh_calibration() -> None:
    report = full_report()
    shipped = default_parameter_table()
    assert report.table.base == shipped.base
    assert report.table.overrides == shipped.overrides
    assert report.table.structure == shipped.structure
    text = resources.files("nmsim").joinpath("data/gemm_intervals.toml").read_text("utf-8")
    raw = tomllib.loads(text)
    for section in ("pooled", "groups"):
        assert raw[section] == report.intervals[section], section
    assert sorted(raw["measured_gpus"]) == report.intervals["measured_gpus"]
    assert default_interval_table().coverage == report.intervals["coverage"]


@pytest.mark.slow
def test_cross_validated_error_beats_both_baselines() -> None:
    """The closing note's CV table: the model must beat a constant and the previous model."""
    summary = {s.group: s for s in full_report().summary}
    overall = summary["all"]
    assert overall.rows >= 80
    assert overall.model_median < overall.constant_median
    assert overall.model_median < overall.legacy_median


@pytest.mark.slow
def test_interval_coverage_on_cross_validated_rows_is_near_nominal() -> None:
    """About 80 % of held-out rows fall inside the interval built from the CV residuals."""
    report = full_report()
    table = default_interval_table()
    from nmsim.perf.hardware import get_gpu

    inside = total = 0
    for r in report.rows:
        if not r.fitted or r.cv_predicted is None:
            continue
        interval = table.interval(get_gpu(r.gpu), r.n, r.cv_predicted)
        inside += interval.low <= r.measured <= interval.high
        total += 1
    assert 0.7 <= inside / total <= 0.95


def test_qualitative_checks_pass_on_the_shipped_model() -> None:
    from nmsim.perf.calibration import _checks

    checks = _checks(default_parameter_table())
    assert {c["id"] for c in checks} == {"a100-gemv-no-speedup", "a100-upper-bound"}
    assert all(c["passed"] for c in checks), checks


def test_workload_and_check_points_keep_their_sources() -> None:
    for point in load_points():
        assert "[R]" in point["source"] or point["role"] == "excluded", point["id"]
        assert point["role"] in ("check", "overhead", "workload", "excluded")


def test_compress_time_reproduces_the_measured_point() -> None:
    (point,) = [p for p in load_points() if p["role"] == "overhead"]
    seconds = compress_time_s(point["gpu"], point["weight_mib"] * 2**20)
    assert seconds * 1e6 == pytest.approx(point["time_us"], rel=1e-4)
    with pytest.raises(ValueError, match="weight_bytes=-1 must be finite"):
        compress_time_s("a100", -1)


# --------------------------------------------------------------------------- CLI
def test_calibrate_cli_without_cv_prints_the_corpus_and_parameters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["calibrate", "--no-cv"]) == 0
    out = capsys.readouterr().out
    assert "corpus:" in out and "rows by source" in out and "parameters" in out


def test_calibrate_cli_json_parses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--no-cv", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["corpus"]["rows"] == len(ROWS)
    assert data["parameters"]["global"]["dense_compute_efficiency"] > 0


def test_calibrate_cli_refuses_to_write_without_cv(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--no-cv", "--write"]) != 0
    assert "--write needs the leave-one-source-out cross-validation" in capsys.readouterr().err


def test_document_folds_hold_out_every_source_of_a_document() -> None:
    rows = [r for r in ROWS if r.document.startswith("UDC-GAC/venom")] + small_subset()
    by_source = cross_validate(rows, sweeps=1, iterations=4)
    by_document = cross_validate(rows, sweeps=1, iterations=4, fold="document")
    documents = {r.document for r in fitted_rows(rows)}
    assert by_document.folds == len(documents) < by_source.folds
    with pytest.raises(ValueError, match="fold='machine' must be 'source' or 'document'"):
        cross_validate(rows, fold="machine")
