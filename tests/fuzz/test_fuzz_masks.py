"""Fuzz: bad and edge inputs to the mask functions get a valid answer or a named error.

For every drawn input, a function MUST either return a valid result equal to the
result on a plain C-ordered, writable ndarray copy of the same values (layout,
strides, order, read-only-ness and list-ness never change an answer), or raise
``ValueError``/``TypeError`` whose message names one of its arguments
(``specs/errors.md``). NaN scores MUST raise. A fixed example budget runs in CI (the
``ci`` hypothesis profile); ``HYPOTHESIS_PROFILE=dev`` runs more.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmref
from nmref.transposable import is_transposable

#: Examples per test: a fixed budget in CI, more with NMREF_FUZZ_EXAMPLES (the long lane).
EXAMPLES = int(os.environ.get("NMREF_FUZZ_EXAMPLES", "100"))

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, 5e-324, 1e-310, 1e308, -1e308, np.inf, -np.inf, np.nan]


@st.composite
def values(draw: st.DrawFn, m: int) -> np.ndarray:
    """A float64 array of 0-5 dimensions (mostly 2-D), its last axis a multiple of m or not."""
    ndim = draw(st.sampled_from([2, 2, 2, 1, 3, 0, 4, 5]))
    shape = []
    for axis in range(ndim):
        if axis == ndim - 1:
            shape.append(draw(st.sampled_from([m, 2 * m, m + 1, 0, 3 * m])))
        elif axis == ndim - 2:
            shape.append(draw(st.sampled_from([m, 2 * m, 1, 0, 3])))
        else:
            shape.append(draw(st.integers(1, 2)))
    size = int(np.prod(shape)) if shape else 1
    base = draw(st.lists(st.floats(-4, 4, allow_nan=False), min_size=size, max_size=size))
    array = np.array(base, dtype=np.float64).reshape(shape)
    if size and draw(st.booleans()):
        index = draw(st.integers(0, size - 1))
        array.reshape(-1)[index] = draw(st.sampled_from(SPECIAL))
    return array


def disguise(array: np.ndarray, how: str) -> object:
    """The same values in another container, dtype, order or memory layout."""
    if how == "list":
        return array.tolist()
    if how == "fortran":
        return np.asfortranarray(array)
    if how == "readonly":
        out = array.copy()
        out.setflags(write=False)
        return out
    if how == "negative-strides" and array.ndim:
        return np.flip(np.flip(array, axis=-1).copy(), axis=-1)
    if how == "non-contiguous" and array.ndim:
        wide = np.repeat(array, 2, axis=-1)
        return wide[..., ::2]
    if how == "float32":
        with np.errstate(over="ignore"):
            return array.astype(np.float32)
    if how == "float16":
        with np.errstate(over="ignore"):
            return array.astype(np.float16)
    if how == "int64":
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(array, posinf=2**62, neginf=-(2**62)).astype(np.int64)
    if how == "bool":
        return array.astype(bool)
    if how == "complex":
        return array.astype(np.complex128)
    if how == "object":
        return array.astype(object)
    return array


HOW = [
    "plain",
    "list",
    "fortran",
    "readonly",
    "negative-strides",
    "non-contiguous",
    "float32",
    "float16",
    "int64",
    "bool",
    "complex",
    "object",
]
BAD_N = [-1, 5, 2.5, True, "2", None]


def canonical(scores: object) -> np.ndarray:
    return np.array(scores, order="C", copy=True)


def names_an_argument(error: BaseException, function: Callable) -> bool:
    text = str(error)
    parameters = set(inspect.signature(function).parameters) | {"scores", "weights", "mask"}
    return any(name in text for name in parameters)


def outcome(function: Callable, *args: object, **kwargs: object) -> tuple[str, object]:
    try:
        return "ok", function(*args, **kwargs)
    except (ValueError, TypeError) as error:
        assert names_an_argument(error, function), f"{function.__name__}: {error!r}"
        return "error", error


def check_mask_call(function: Callable, scores: object, n: object, m: int, **kwargs) -> None:
    kind, result = outcome(function, scores, n, m, **kwargs)
    if kind == "error":
        return
    plain = canonical(scores)
    assert not (plain.dtype.kind == "f" and np.isnan(plain).any()), "NaN scores must raise"
    assert isinstance(result, np.ndarray) and result.dtype == np.bool_
    assert result.shape == plain.shape
    again = function(plain, n, m, **kwargs)
    np.testing.assert_array_equal(result, again)  # same values, same answer


MASK_FUNCTIONS = [nmref.nm_mask, nmref.nm_mask_reference, nmref.magnitude_mask]


@pytest.mark.parametrize("function", MASK_FUNCTIONS, ids=lambda f: f.__name__)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_one_dimensional_masks_answer_validly_or_name_the_argument(
    function: Callable, data: st.DataObject
) -> None:
    m = data.draw(st.sampled_from([2, 4, 8]), label="m")
    array = data.draw(values(m), label="array")
    how = data.draw(st.sampled_from(HOW), label="how")
    n = data.draw(st.one_of(st.integers(0, m), st.sampled_from(BAD_N)), label="n")
    scores = disguise(array, how)
    check_mask_call(function, scores, n, m)
    kind, result = outcome(function, scores, n, m)
    if kind == "ok" and np.ndim(result) == 2 and result.shape[-1] % m == 0:
        counts = np.asarray(result).reshape(result.shape[0], result.shape[1] // m, m).sum(-1)
        assert (counts == n).all()  # exactly n kept in every group


@pytest.mark.parametrize("method", ["exact", "greedy", "brute"])
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_transposable_masks_answer_validly_or_name_the_argument(
    method: str, data: st.DataObject
) -> None:
    m = data.draw(st.sampled_from([2, 4]), label="m")
    array = data.draw(values(m), label="array")
    how = data.draw(st.sampled_from(HOW), label="how")
    n = data.draw(st.one_of(st.integers(0, m), st.sampled_from(BAD_N)), label="n")
    scores = disguise(array, how)
    check_mask_call(nmref.transposable_mask, scores, n, m, method=method)
    kind, result = outcome(nmref.transposable_mask, scores, n, m, method=method)
    if kind == "ok" and np.ndim(result) == 2 and result.size:
        assert is_transposable(result, n, m, exact=method != "greedy")


@settings(max_examples=EXAMPLES)
@given(
    n=st.one_of(st.integers(-2, 10), st.sampled_from([2.5, True, "2", None, np.int8(2)])),
    m=st.one_of(st.integers(-2, 10), st.sampled_from([4.0, False, "4", None, 2**70])),
)
def test_patterns_are_checked_or_the_argument_is_named(n: object, m: object) -> None:
    kind, result = outcome(nmref.check_pattern, n, m)
    if kind == "ok":
        assert 0 <= result.n <= result.m and result.m >= 1
        assert isinstance(n, (int, np.integer)) and not isinstance(n, bool)


@settings(max_examples=EXAMPLES)
@given(text=st.one_of(st.text(max_size=8), st.sampled_from(["2:4", " 2:4 ", "4:2", "2:0", "a:b"])))
def test_pattern_strings_parse_or_say_why(text: str) -> None:
    try:
        pattern = nmref.parse_pattern(text)
    except (ValueError, TypeError) as error:
        assert "pattern" in str(error) or "n=" in str(error) or "m=" in str(error), repr(error)
        return
    assert 0 <= pattern.n <= pattern.m
