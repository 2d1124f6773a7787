"""Fuzz: the rest of nmref's public functions, under the same two-outcome contract.

Every call MUST either return a result equal to the result of the same call on plain,
C-ordered, writable ndarray copies of its array arguments, or raise ``ValueError`` /
``TypeError`` whose message names one of the function's arguments (``specs/errors.md``).
Scalar-only functions get bad and edge scalars instead of arrays; their results must not
depend on whether an integer argument came as a Python or a NumPy integer.
``tests/fuzz/test_fuzz_coverage.py`` checks that every public function is fuzzed somewhere.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmref
from tests.fuzz.test_fuzz_masks import BAD_N, EXAMPLES, HOW, disguise, values

Build = Callable[[object, object, int], tuple[tuple, dict]]

#: Scalars that are wrong for an int argument, or right only in some positions.
BAD_SCALARS: list[object] = [-1, 0, 1, 2, 4, 7, 2.5, True, "2", None, np.int8(2), 2**70, -(2**63)]


def mask_of(array: object, n: object, m: int) -> np.ndarray:
    """A valid N:M mask with the drawn array's shape (the harness's, not under test)."""
    plain = np.asarray(array)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            magnitudes = np.nan_to_num(np.abs(plain).astype(np.float64))
            return nmref.nm_mask(magnitudes, n, m)
        except (ValueError, TypeError, AttributeError, OverflowError):
            return np.zeros(plain.shape, dtype=bool)


def certificate_of(array: object, n: object, m: int) -> tuple[Any, Any, Any]:
    """Some certificate-shaped arguments: a real one when the input allows it, else zeros."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = nmref.transposable_certificate(np.asarray(array, dtype=np.float64), n, m)
        return found.mask, found.row_potentials, found.column_potentials
    except (ValueError, TypeError, OverflowError):
        plain = np.asarray(array)
        return mask_of(array, n, m), np.zeros(plain.shape), np.zeros(plain.shape)


def bame_call(reference: bool) -> Build:
    def build(a: object, n: object, m: int) -> tuple[tuple, dict]:
        mask = mask_of(a, 2, m)
        config = nmref.BameConfig(n=2, m=m, t_i=0, t_f=10, update_interval=1)
        try:
            state = nmref.BameState.initial(mask, m)
        except (ValueError, TypeError):
            state = None  # the call under test must then name `state` or another argument
        return (a, mask, a, state, n if isinstance(n, int) else 0, config), {}

    return build


def calibration_of(a: object) -> object:
    """Calibration inputs with the drawn weight's fan-in (the drawn values themselves when
    the weight is not a matrix: the call must then name an argument)."""
    if np.ndim(a) == 2:
        return np.linspace(-1.0, 1.0, 5 * np.shape(a)[1]).reshape(5, np.shape(a)[1])
    return a


CALLS: dict[str, tuple[Callable, Build]] = {
    "adaprune_layer": (
        nmref.adaprune_layer,
        lambda a, n, m: ((a, calibration_of(a), m), {"n": n}),
    ),
    "relative_output_error": (
        nmref.relative_output_error,
        lambda a, n, m: ((a, mask_of(a, n, m), calibration_of(a)), {}),
    ),
    "block_scores": (
        nmref.block_scores,
        lambda a, n, m: (
            (
                (a, mask_of(a, n, m), a, np.ones((*np.shape(a)[:-1], np.shape(a)[-1] // m), bool)),
                {"n": n, "m": m},
            )
            if np.ndim(a)
            else ((a, a, a, a), {"n": n, "m": m})
        ),
    ),
    "evolve_mask": (nmref.evolve_mask, bame_call(reference=False)),
    "evolve_mask_reference": (nmref.evolve_mask_reference, bame_call(reference=True)),
    "from_reduction_matrix": (
        nmref.from_reduction_matrix,
        lambda a, n, m: ((a, np.shape(a) if np.ndim(a) != 2 else (np.shape(a)[0], 1, 1, -1)), {}),
    ),
    "mask_transitions": (
        nmref.mask_transitions,
        lambda a, n, m: ((mask_of(a, 2, m), mask_of(a, n, m)), {}),
    ),
    "select_blocks": (
        nmref.select_blocks,
        lambda a, n, m: ((a, np.ones(np.shape(a), bool), n), {}),
    ),
    "sgd_step": (
        nmref.sgd_step,
        lambda a, n, m: ((a, a), {"lr": 0.1 if isinstance(n, int) else n, "momentum": 0.9}),
    ),
    "sparse_architecture_divergence": (
        nmref.sparse_architecture_divergence,
        lambda a, n, m: (([mask_of(a, 2, m), mask_of(a, n, m), mask_of(a, 1, m)],), {}),
    ),
    "srste_step": (
        nmref.srste_step,
        lambda a, n, m: ((a, lambda w: np.ones_like(w), n, m), {"lr": 0.1}),
    ),
    "srste_train": (
        nmref.srste_train,
        lambda a, n, m: ((a, lambda w: 0.5 * w, n, m, 2), {"lr": 0.1}),
    ),
    "search_channel_permutation": (
        nmref.search_channel_permutation,
        lambda a, n, m: ((a, n, m), {"method": "swaps", "max_rounds": 20, "rng": 0}),
    ),
    "permutation_objective": (nmref.permutation_objective, lambda a, n, m: ((a, n, m), {})),
    "permutation_efficacy": (
        nmref.permutation_efficacy,
        lambda a, n, m: ((a, n, m, np.arange(np.shape(a)[-1]) if np.ndim(a) else []), {}),
    ),
    "transposable_certificate": (
        nmref.transposable_certificate,
        lambda a, n, m: ((a, n, m), {"fill": "at_most" if m == 2 else "exact"}),
    ),
    "transposable_mask_reference": (
        nmref.transposable_mask_reference,
        lambda a, n, m: ((a, n, m), {"method": "exact"}),
    ),
    "verify_certificate": (
        nmref.verify_certificate,
        lambda a, n, m: ((a, *certificate_of(a, n, m), n, m), {}),
    ),
}


def plain(value: object) -> object:
    """The same values as a plain C-ordered writable ndarray (lists of arrays element-wise)."""
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [plain(item) for item in value]
    if isinstance(value, (list, np.ndarray)) and not isinstance(value, np.ma.MaskedArray):
        try:
            return np.array(value, order="C", copy=True)
        except (ValueError, TypeError):
            return value
    return value


def same(first: Any, second: Any) -> None:
    """Equal results: arrays element for element (NaN equals NaN), records field by field."""
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        assert type(first) is type(second)
        for field in dataclasses.fields(first):
            same(getattr(first, field.name), getattr(second, field.name))
    elif isinstance(first, tuple | list) and not isinstance(first, str):
        assert len(first) == len(second)
        for a, b in zip(first, second, strict=True):
            same(a, b)
    elif isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        a, b = np.asarray(first), np.asarray(second)
        if a.dtype == object or b.dtype == object:
            assert a.shape == b.shape
            assert [repr(x) for x in a.ravel()] == [repr(x) for x in b.ravel()]
        else:
            np.testing.assert_array_equal(a, b)
    else:
        assert first == second or (first != first and second != second)


def names_an_argument(
    error: BaseException, function: Callable, keywords: tuple[str, ...] = ()
) -> bool:
    """Whether the message names one of ``function``'s parameters (or of the keywords it
    was given, for a ``**options`` signature), as a whole word."""
    parameters = set(inspect.signature(function).parameters) - {"args", "kwargs", "options"}
    parameters |= set(keywords)
    parameters |= {"scores", "weights", "weight", "mask", "masks", "pattern", "gpu", "model"}
    if "pattern" in parameters:
        parameters |= {"n", "m"}  # "n=5 must be <= m=4" names the pattern's parts
    text = str(error)
    return any(re.search(rf"\b{re.escape(name)}\b", text) for name in parameters)


def two_outcomes(function: Callable, args: tuple, kwargs: dict) -> tuple[str, Any]:
    """Run the call; a named ValueError/TypeError or a result: nothing else is allowed."""
    try:
        return "ok", function(*args, **kwargs)
    except (ValueError, TypeError) as error:
        assert names_an_argument(error, function, tuple(kwargs)), f"{function.__name__}: {error!r}"
        return "error", error


@pytest.mark.parametrize("name", sorted(CALLS))
@settings(max_examples=max(EXAMPLES // 2, 10))
@given(data=st.data())
def test_array_functions_answer_validly_or_name_the_argument(
    name: str, data: st.DataObject
) -> None:
    function, build = CALLS[name]
    m = data.draw(st.sampled_from([2, 4]), label="m")
    array = data.draw(values(m), label="array")
    how = data.draw(st.sampled_from(HOW), label="how")
    n = data.draw(st.one_of(st.integers(0, m), st.sampled_from(BAD_N)), label="n")
    args, kwargs = build(disguise(array, how), n, m)
    kind, result = two_outcomes(function, args, kwargs)
    if kind == "ok":
        again = function(*(plain(a) for a in args), **kwargs)
        same(result, again)


def as_python(value: object) -> object:
    return int(value) if isinstance(value, np.integer) else value


SCALAR_CALLS: dict[str, tuple[Callable, int, dict]] = {
    # name: (function, how many scalar positional arguments, fixed keyword arguments)
    "count_transposable_patterns": (nmref.count_transposable_patterns, 2, {}),
    "default_layout": (nmref.default_layout, 1, {}),
    "transposable_patterns": (nmref.transposable_patterns, 2, {}),
    "count_column_partitions": (nmref.count_column_partitions, 2, {}),
    "check_pattern": (nmref.check_pattern, 2, {}),
}


@pytest.mark.parametrize("name", sorted(SCALAR_CALLS))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_scalar_functions_answer_or_name_the_argument(name: str, data: st.DataObject) -> None:
    function, arity, kwargs = SCALAR_CALLS[name]
    args = tuple(
        data.draw(st.one_of(st.integers(-2, 6), st.sampled_from(BAD_SCALARS)), label=f"arg{i}")
        for i in range(arity)
    )
    kind, result = two_outcomes(function, args, kwargs)
    if kind == "ok":
        same(result, function(*(as_python(a) for a in args), **kwargs))


@settings(max_examples=EXAMPLES)
@given(
    structure=st.sampled_from(["nm", "transposable", "unstructured", "x", None, 3]),
    n=st.one_of(st.integers(-1, 5), st.sampled_from(BAD_SCALARS)),
    m=st.one_of(st.integers(-1, 5), st.sampled_from(BAD_SCALARS)),
    size=st.one_of(st.integers(-1, 64), st.sampled_from(BAD_SCALARS)),
)
def test_mask_diversity_answers_or_names_the_argument(
    structure: object, n: object, m: object, size: object
) -> None:
    kind, result = two_outcomes(nmref.mask_diversity, (structure, n, m, size), {})
    if kind == "ok":
        assert isinstance(result, int) and result >= 1


@settings(max_examples=EXAMPLES)
@given(
    shape=st.one_of(
        st.lists(st.integers(-1, 5), max_size=5).map(tuple),
        st.sampled_from([(2.5, 4), ("2", 4), None, (True, 4), (2**70, 4), 4]),
    ),
    layout=st.sampled_from([None, "channels", "kernel", "x", 3]),
)
def test_to_reduction_shape_answers_or_names_the_argument(shape: object, layout: object) -> None:
    kind, result = two_outcomes(nmref.to_reduction_shape, (shape, layout), {})
    if kind == "ok":
        rows, reduction = result
        assert isinstance(rows, int) and isinstance(reduction, int)
        assert rows * reduction == int(np.prod(shape))
