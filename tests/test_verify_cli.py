"""``nmsim verify``: the table, the exit code, and a failure that is reported."""

from __future__ import annotations

import io

import pytest

from nmsim.cli import SUBCOMMANDS, main

torch = pytest.importorskip("torch")
from nmsim.torch import conformance  # noqa: E402


def test_verify_is_registered():
    assert "nmsim.cli.verify" in SUBCOMMANDS


def test_verify_quick_passes_and_prints_the_table(capsys):
    assert main(["verify", "--device", "cpu", "--quick", "--only", "nm_mask"]) == 0
    out = capsys.readouterr().out
    assert "algorithm" in out and "mismatches" in out
    assert "nm_mask" in out and "bfloat16" in out and "golden" not in out
    assert "ok:" in out


def test_verify_prints_one_progress_line_per_row_on_stderr_when_not_a_terminal(capsys):
    # Issue 37: a first run took 7 min 15 s and printed nothing until the end when piped.
    assert main(["verify", "--quick", "--only", "nm_mask"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    dtypes = conformance.SUITES["nm_mask"].dtypes
    assert len(lines) == len(dtypes)
    for index, (line, dtype) in enumerate(zip(lines, dtypes, strict=True), start=1):
        assert line.startswith(f"nmsim verify [{index}/{len(dtypes)}] nm_mask {dtype}: ")
        assert " 0 mismatches, " in line and line.endswith(" s elapsed)")
    assert "nmsim verify [" not in captured.out  # the table stays clean on stdout
    assert main(["verify", "--quick", "--only", "nm_mask", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_verify_exits_one_and_shows_the_counterexample(monkeypatch):
    from nmref.testing import check_nm_mask
    from tests.mutants.implementations import lower_index_loses_ties

    broken = conformance.Suite(
        "broken nm_mask",
        ("float32",),
        lambda dtype, device, quick: check_nm_mask(
            lower_index_loses_ties, dtype=dtype, quick=True, raise_on_failure=False
        ),
    )
    monkeypatch.setitem(conformance.SUITES, broken.name, broken)
    from nmsim.cli.verify import run_verify

    out = io.StringIO()
    assert run_verify("cpu", quick=True, only="broken", out=out) == 1
    text = out.getvalue()
    assert "FAILED" in text and "lower index must win" in text


def test_cuda_without_a_gpu_is_a_clear_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["verify", "--device", "cuda", "--quick"]) == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_quick_over_every_suite_passes_with_zero_mismatches():
    from nmsim.cli.verify import run_verify

    out = io.StringIO()
    assert run_verify("cpu", quick=True, out=out) == 0
    text = out.getvalue()
    for name in conformance.SUITES:
        assert name in text
    assert "golden vectors" in text and ", 0 mismatches" in text


def test_only_that_matches_nothing_is_a_usage_error(capsys):
    assert main(["verify", "--only", "no such suite"]) == 2
    assert "matches no suite" in capsys.readouterr().err
