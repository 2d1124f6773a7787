"""The conformance kit itself: light import, inputs as advertised, readable reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

import nmref
from nmref.testing import (
    KINDS,
    ConformanceError,
    Report,
    check_nm_mask,
    round_to_bfloat16,
    standard_cases,
)
from nmref.testing.strategies import nm_cases

ROOT = Path(__file__).resolve().parents[1]


def test_import_does_not_load_torch():
    code = "import sys, nmref.testing; print('torch' in sys.modules)"
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def _group_has_ties(group: np.ndarray) -> bool:
    magnitudes = nmref.to_magnitudes(group).astype(np.float64)
    return len(np.unique(magnitudes)) < len(magnitudes)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "uint8"])
def test_standard_cases_are_as_advertised(dtype):
    cases = standard_cases(dtype)
    assert {case.kind for case in cases} == set(KINDS)
    for case in cases:
        assert case.scores.shape[-1] % case.m == 0
        if case.scores.dtype.kind == "f":
            assert not np.isnan(case.scores).any()
        if dtype == "bfloat16":
            assert not (case.scores.view(np.uint32) & 0xFFFF).any()
        if case.kind == "tie_free":
            groups = case.scores.reshape(-1, case.m)
            assert not any(_group_has_ties(group) for group in groups), case.describe()
    assert any(np.isinf(c.scores).any() for c in cases if c.scores.dtype.kind == "f") or (
        np.dtype(cases[0].scores.dtype).kind != "f"
    )


@pytest.mark.slow
@given(nm_cases(dtypes=("float16", "bfloat16", "float32", "int8")))
def test_strategy_cases_are_as_advertised(case):
    assert case.scores.shape[-1] % case.m == 0
    if case.scores.dtype.kind == "f":
        assert not np.isnan(case.scores).any()
    if case.dtype_name == "bfloat16":
        assert case.scores.dtype == np.float32
        assert not (case.scores.view(np.uint32) & 0xFFFF).any()
    if case.kind == "tie_free":
        assert not any(_group_has_ties(g) for g in case.scores.reshape(-1, case.m))


def test_round_to_bfloat16_matches_torch():
    torch = pytest.importorskip("torch")
    values = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 1e3
    values = np.concatenate([values, [3.4e38, -3.4e38, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 0.0, -0.0]])
    values = values.astype(np.float32)
    expected = torch.from_numpy(values).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(round_to_bfloat16(values), expected)


def test_report_counts_and_first_counterexample():
    def wrong_on_ties(scores, n, m):
        return nmref.nm_mask(scores[..., ::-1].copy(), n, m)[..., ::-1]

    report = check_nm_mask(wrong_on_ties, quick=True, raise_on_failure=False)
    assert 0 < report.mismatches < report.cases == len(standard_cases("float32", quick=True))
    text = str(report)
    assert text.startswith("nm_mask: FAILED:")
    assert "expected:" in text and "got:" in text and "input = np.array(" in text
    with pytest.raises(ConformanceError, match="first counterexample"):
        report.raise_for_failure()
    assert len(report.failures) == 5


def test_an_empty_report_is_not_a_pass():
    with pytest.raises(ConformanceError, match="no cases were run"):
        Report("nothing").raise_for_failure()


def test_exceptions_and_bad_outputs_are_failures_not_crashes():
    def raises(scores, n, m):
        raise RuntimeError("kernel launch failed")

    report = check_nm_mask(raises, quick=True, raise_on_failure=False)
    assert report.mismatches == report.cases
    assert "raised RuntimeError: kernel launch failed" in str(report)
    wrong_shape = check_nm_mask(
        lambda s, n, m: nmref.nm_mask(s, n, m)[:1], quick=True, raise_on_failure=False
    )
    assert "output shape" in str(wrong_shape)
    not_binary = check_nm_mask(
        lambda s, n, m: np.full(s.shape, 3), quick=True, raise_on_failure=False
    )
    assert "not a 0/1 mask" in str(not_binary)


def test_keys_near_the_float_maximum_give_a_verdict_not_an_overflow():
    # Found by hypothesis on the torch path: the kit rounded the exact kept sums to float
    # before subtracting, so 2 * 1.7e308 raised OverflowError even when the masks agreed.
    from nmref.testing import Case

    big = np.finfo(np.float64).max
    scores = np.array([[big, big / 2, 1.0, big]])
    case = Case(scores, 2, 4, "huge", "float64", None, "near max")
    agreed = nmref.testing.check_nm_mask(lambda s, n, m: nmref.nm_mask(s, n, m), [case])
    assert agreed.ok and agreed.max_gap == 0.0
    # Keeping [big, 1.0] instead of [big, big]: the gap is big - 1.0, exactly rounded.
    wrong = nmref.testing.check_nm_mask(
        lambda s, n, m: np.array([[True, False, True, False]]), [case], raise_on_failure=False
    )
    assert not wrong.ok and wrong.max_gap == big
