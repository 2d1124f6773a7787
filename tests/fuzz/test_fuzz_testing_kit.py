"""Fuzz: nmref.testing, the conformance kit, under hostile implementations and arguments.

The kit runs other people's code, so besides bad arguments it must survive what that code
returns: ``None``, lists, the wrong shape or dtype, a transposed or inverted mask, strings,
exceptions of any kind. The contract (``specs/errors.md``): a ``Report`` — passing exactly
when the implementation is the reference, failing with recorded failures otherwise — or,
with ``raise_on_failure=True``, ``ConformanceError`` for a failing one; bad arguments to the
kit itself are ``ValueError``/``TypeError`` naming the argument. The mutant zoo in
``tests/mutants`` covers subtly wrong algorithms; this suite covers broken plumbing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmref
import nmref.testing as kit
from tests.fuzz.test_fuzz_api import names_an_argument, same, two_outcomes
from tests.fuzz.test_fuzz_masks import EXAMPLES
from tests.mutants.implementations import DECAY, _step


def _raises(kind: type[BaseException]) -> Callable[..., Any]:
    def impl(*args: object) -> object:
        raise kind("broken implementation")

    return impl


#: What a broken mask implementation may hand back, by name.
HOSTILE: dict[str, Callable[..., Any]] = {
    "none": lambda s, n, m: None,
    "string": lambda s, n, m: "mask",
    "scalar": lambda s, n, m: True,
    "wrong-shape": lambda s, n, m: np.ones((1, 1), bool),
    "transposed": lambda s, n, m: np.ones(np.shape(s), bool).T,
    "inverted": lambda s, n, m: ~nmref.nm_mask(np.asarray(s, float), n, m),
    "float-mask": lambda s, n, m: np.full(np.shape(s), 0.5),
    "object-mask": lambda s, n, m: np.empty(np.shape(s), dtype=object),
    "complex-mask": lambda s, n, m: np.ones(np.shape(s), complex),
    "runtime-error": _raises(RuntimeError),
    "key-error": _raises(KeyError),
    "zero-division": _raises(ZeroDivisionError),
    "memory-error": _raises(MemoryError),
}

MASK_CHECKS: dict[str, tuple[Callable[..., kit.Report], Callable[..., Any]]] = {
    "check_nm_mask": (kit.check_nm_mask, nmref.nm_mask),
    "check_magnitude_mask": (kit.check_magnitude_mask, nmref.magnitude_mask),
    "check_transposable_mask": (kit.check_transposable_mask, nmref.transposable_mask),
}

BAD_DTYPES = ["float32", "float64", "bool", "float99", "", None, 3, "torch.float32"]
BAD_FLAGS = [True, False, 1, 0, "yes", None, 2.5]


def kit_outcome(check: Callable[..., Any], *args: object, **kwargs: object) -> tuple[str, Any]:
    """A Report, a ConformanceError, or a named ValueError/TypeError: nothing else."""
    try:
        return two_outcomes(check, args, kwargs)
    except kit.ConformanceError as error:
        return "conformance-error", error


@pytest.mark.parametrize("check_name", sorted(MASK_CHECKS))
@settings(max_examples=max(EXAMPLES // 5, 8))
@given(
    how=st.sampled_from(sorted(HOSTILE)),
    dtype=st.sampled_from(BAD_DTYPES),
    raise_on_failure=st.booleans(),
)
def test_mask_checks_survive_broken_implementations(
    check_name: str, how: str, dtype: object, raise_on_failure: bool
) -> None:
    check, _ = MASK_CHECKS[check_name]
    kind, result = kit_outcome(
        check, HOSTILE[how], dtype=dtype, quick=True, raise_on_failure=raise_on_failure
    )
    if kind == "error":
        assert dtype not in kit.DTYPE_NAMES or check_name == "check_transposable_mask"
        return
    if raise_on_failure:
        assert kind == "conformance-error", f"{how} passed {check_name}"
    else:
        assert isinstance(result, kit.Report) and not result.ok, f"{how} passed {check_name}"
        assert result.failures and all(isinstance(f.message, str) for f in result.failures)


@pytest.mark.parametrize("check_name", sorted(MASK_CHECKS))
@settings(max_examples=max(EXAMPLES // 5, 8))
@given(dtype=st.sampled_from(BAD_DTYPES), quick=st.sampled_from(BAD_FLAGS))
def test_mask_checks_pass_the_reference_or_name_the_argument(
    check_name: str, dtype: object, quick: object
) -> None:
    check, reference = MASK_CHECKS[check_name]
    kind, result = kit_outcome(check, reference, dtype=dtype, quick=quick)
    if kind == "ok":
        assert isinstance(result, kit.Report) and result.ok and result.cases > 0
    else:
        assert kind == "error", f"the reference failed {check_name}: {result}"


@settings(max_examples=max(EXAMPLES // 5, 8))
@given(how=st.sampled_from(sorted(HOSTILE)), function=st.sampled_from(["nm_mask", "x", None]))
def test_error_rule_check_survives_broken_implementations(how: str, function: object) -> None:
    kind, result = kit_outcome(
        kit.check_mask_error_rules, HOSTILE[how], function=function, raise_on_failure=False
    )
    if kind == "error":
        assert function != "nm_mask"
    else:
        assert isinstance(result, kit.Report)


def _reference_step(x, w, dy, n, m):
    return _step(x, w, dy, n, m)


TRAINING_IMPLS: dict[str, Callable[..., Any]] = {
    "reference": _reference_step,
    "none": lambda x, w, dy, n, m: None,
    "two-outputs": lambda x, w, dy, n, m: _reference_step(x, w, dy, n, m)[:2],
    "strings": lambda x, w, dy, n, m: ("y", "dx", "dw"),
    "wrong-shapes": lambda x, w, dy, n, m: (x, x, x),
    "runtime-error": _raises(RuntimeError),
    "nan": lambda x, w, dy, n, m: tuple(np.full_like(a, np.nan) for a in _step(x, w, dy, n, m)),
}


@settings(max_examples=max(EXAMPLES // 5, 8))
@given(
    how=st.sampled_from(sorted(TRAINING_IMPLS)),
    method=st.sampled_from(["srste", "ste", "x", None]),
    dtype=st.sampled_from(["float64", "float32", "float99", None]),
)
def test_training_check_survives_broken_implementations(
    how: str, method: object, dtype: object
) -> None:
    kind, result = kit_outcome(
        kit.check_sparse_training,
        TRAINING_IMPLS[how],
        method=method,
        decay=DECAY,
        dtype=dtype,
        raise_on_failure=False,
    )
    if kind == "error":
        assert method not in kit.TRAINING_METHODS or dtype not in ("float64", "float32")
        return
    assert isinstance(result, kit.Report)
    if how == "reference" and method == "srste":
        assert result.ok, result.summary()
    if how != "reference":
        assert not result.ok


@settings(max_examples=EXAMPLES)
@given(
    kind=st.sampled_from([*kit.KINDS, "x", None]),
    dtype=st.sampled_from([*kit.DTYPE_NAMES, "float99", None]),
    count=st.one_of(st.integers(-1, 3), st.sampled_from([2.5, True, "2", None])),
    seed=st.one_of(st.integers(-1, 3), st.sampled_from([2.5, None, 2**70])),
    layout=st.sampled_from([None, "linear", "channels", "flat", "x"]),
)
def test_case_generators_answer_or_name_the_argument(
    kind: object, dtype: object, count: object, seed: object, layout: object
) -> None:
    def generate() -> list[kit.Case]:
        return list(kit.generate_cases(kind, dtype, count, seed=seed, layout=layout))

    try:
        cases = generate()
    except (ValueError, TypeError) as error:
        assert names_an_argument(error, kit.generate_cases), repr(error)
        return
    assert len(cases) == count
    for case in cases:
        assert isinstance(case.scores, np.ndarray) and 0 <= case.n <= case.m
    same([c.scores for c in cases], [c.scores for c in generate()])  # a seed fixes them


@settings(max_examples=max(EXAMPLES // 5, 8))
@given(
    dtype=st.sampled_from([*kit.DTYPE_NAMES, "float99", None]),
    quick=st.sampled_from(BAD_FLAGS),
    count=st.one_of(st.integers(-1, 4), st.sampled_from([2.5, None])),
)
def test_standard_case_lists_answer_or_name_the_argument(
    dtype: object, quick: object, count: object
) -> None:
    for function, args, kwargs in [
        (kit.standard_cases, (dtype,), {"quick": quick}),
        (kit.transposable_cases, (dtype,), {"quick": quick}),
        (kit.training_cases, (count,), {"dtype": dtype}),
    ]:
        kind, cases = two_outcomes(function, args, kwargs)
        if kind == "ok":
            assert isinstance(cases, list) and (cases or count == 0)
            same(len(cases), len(function(*args, **kwargs)))


@settings(max_examples=EXAMPLES)
@given(
    values=st.one_of(
        st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=8).map(
            lambda v: np.array(v, np.float32)
        ),
        st.lists(st.floats(allow_nan=True), max_size=8).map(np.array),
        st.sampled_from([np.array([1, 2], np.int64), np.array([1 + 1j]), [1.0, 2.0], "x", None]),
    )
)
def test_round_to_bfloat16_answers_or_names_the_argument(values: object) -> None:
    kind, result = two_outcomes(kit.round_to_bfloat16, (values,), {})
    if kind == "ok":
        with np.errstate(over="ignore"):
            plain = np.asarray(values).astype(np.float32)
        assert result.dtype == np.float32 and result.shape == plain.shape
        bits = result.view(np.uint32)
        finite = np.isfinite(result)
        assert (bits[finite] & 0xFFFF == 0).all()  # bfloat16: the low 16 bits are zero
        np.testing.assert_array_equal(np.isnan(result), np.isnan(plain))


@settings(max_examples=EXAMPLES)
@given(how=st.sampled_from(sorted(HOSTILE)))
def test_compare_masks_reports_any_output_as_a_failure_or_a_match(how: str) -> None:
    scores = np.array([[3.0, 1.0, 2.0, 0.0], [0.0, 1.0, 1.0, 5.0]])
    case = kit.Case(scores, 2, 4, label="hand-written")
    expected = nmref.nm_mask(scores, 2, 4)
    try:
        got = HOSTILE[how](scores, 2, 4)
    except Exception:  # the implementation raised: the kit never sees an output
        return
    failure, gap = kit.compare_masks("nm_mask", case, got, expected, scores, lambda a: a)
    assert failure is not None and isinstance(failure.message, str), how
    # No gap is defined for an output that is not a mask of the input's shape: NaN says so.
    assert (gap == gap) or "not a 0/1 mask" in failure.message or "shape" in failure.message
