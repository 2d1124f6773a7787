"""Tests for mask diversity and K(m, n) (specs/transposable.md, "Mask diversity")."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.diversity import count_transposable_patterns, mask_diversity


def count_by_enumeration(m: int, n: int) -> int:
    """Independent oracle: enumerate row choices, count column sums."""
    rows = list(itertools.combinations(range(m), n))
    total = 0
    for choice in itertools.product(rows, repeat=m):
        counts = np.zeros(m, dtype=int)
        for row in choice:
            counts[list(row)] += 1
        total += bool((counts == n).all())
    return total


@pytest.mark.parametrize(
    ("m", "n", "expected"),
    [
        (4, 2, 90),
        (6, 3, 297200),
        (8, 4, 116963796250),
        (4, 1, 24),
        (4, 3, 24),
        (8, 2, 187530840),  # OEIS A001499
        (8, 6, 187530840),
        (10, 5, 6736218287430460752),  # OEIS A058527
        (1, 0, 1),
        (1, 1, 1),
        (5, 0, 1),
        (5, 5, 1),
    ],
)
def test_known_values(m, n, expected):
    assert count_transposable_patterns(m, n) == expected


@pytest.mark.slow
@pytest.mark.parametrize(("m", "n"), [(m, n) for m in range(1, 6) for n in range(m + 1)])
def test_dp_equals_enumeration(m, n):
    assert count_transposable_patterns(m, n) == count_by_enumeration(m, n)


@given(st.integers(1, 9), st.data())
def test_complement_symmetry_and_permutations(m, data):
    n = data.draw(st.integers(0, m))
    assert count_transposable_patterns(m, n) == count_transposable_patterns(m, m - n)
    if n == 1:
        assert count_transposable_patterns(m, 1) == math.factorial(m)


def test_closed_form_sometimes_quoted_is_not_the_count():
    # m! (m-1)! ... (m-n+1)! gives 144 for 2:4; the exact count is 90.
    assert math.factorial(4) * math.factorial(3) == 144 != count_transposable_patterns(4, 2)


def test_mask_diversity_formulas():
    assert mask_diversity("unstructured", 2, 4, 64) == math.comb(64, 32)
    assert mask_diversity("nm", 2, 4, 64) == 6**16
    assert mask_diversity("transposable", 2, 4, 64) == 90**4
    assert mask_diversity("transposable", 4, 8, 64) == 116963796250
    assert mask_diversity("nm", 8, 16, 64) == 12870**4
    assert mask_diversity("transposable", 2, 4, 0) == 1
    # Log10 per element, computed independently by hand: 2:4-T 0.122, 4:8-T 0.173, 2:4 0.195.
    per_element = {
        key: math.log10(mask_diversity(*key, 64)) / 64
        for key in [("transposable", 2, 4), ("transposable", 4, 8), ("nm", 2, 4)]
    }
    assert round(per_element[("transposable", 2, 4)], 3) == 0.122
    assert round(per_element[("transposable", 4, 8)], 3) == 0.173
    assert round(per_element[("nm", 2, 4)], 3) == 0.195


def test_numpy_integer_size_is_exact():
    # NumPy integers are integers, as for n and m; the result is still an exact Python int.
    for structure, unit in [("unstructured", 4), ("nm", 4), ("transposable", 16)]:
        expected = mask_diversity(structure, 2, 4, 64 * unit)
        got = mask_diversity(structure, 2, 4, np.int64(64 * unit))
        assert got == expected and type(got) is int


def test_structures_are_ordered_by_freedom():
    for n, m in [(1, 2), (2, 4), (4, 8)]:
        size = 2 * m * m
        unstructured, nm, transposable = (
            mask_diversity(s, n, m, size) for s in ("unstructured", "nm", "transposable")
        )
        assert unstructured > nm > transposable


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("blocks", 2, 4, 64), ValueError, "structure="),
        (("nm", 2, 4, 62), ValueError, "multiple of 4"),
        (("transposable", 2, 4, 24), ValueError, "multiple of 16"),
        (("nm", 2, 4, -4), ValueError, "non-negative"),
        (("nm", 5, 4, 16), ValueError, "n=5 must be <= m=4"),
        (("nm", 2, 4, 16.0), ValueError, "size="),
    ],
)
def test_errors(args, error, message):
    with pytest.raises(error, match=message):
        mask_diversity(*args)
