"""The at-most 2:4 float32 kernel: a meet-in-the-middle enumeration of the 7343 patterns.

Spec T5 (at most): the first maximum of the canonical at-most table, on exact float64
keys; tiles it cannot sum exactly go to the at-most flow kernel.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.patterns import check_pattern
from nmref.transposable import _enumeration_kernels as kernels
from nmref.transposable import transposable_mask, transposable_optimum
from nmref.transposable._driver import solve_at_most
from nmref.transposable._kernel_contract import NEEDS_UNITS, SOLVED
from nmref.transposable.patterns import at_most_pattern_table

PATTERN = check_pattern(2, 4)


def test_at_most_2to4_choices_are_the_canonical_row_order():
    """The kernel's hard-coded row sums follow AT_MOST_2TO4_CHOICES, which must be the
    rows of the canonical table: subsets of at most 2 columns, descending bits."""
    subsets = [bits for bits in itertools.product((True, False), repeat=4) if sum(bits) <= 2]
    columns = [tuple(j for j in range(4) if bits[j]) for bits in subsets]
    listed = [tuple(int(j) for j in row if j >= 0) for row in kernels.AT_MOST_2TO4_CHOICES]
    assert listed == columns


def test_the_tables_enumerate_the_canonical_at_most_patterns_in_order():
    """Upper pairs in order, each with every lower pair that fits its capacity, in order,
    are exactly the 7343 patterns of at_most_pattern_table(2, 4), in canonical order."""
    lower, upper, final, upper_capacity, lower_words, upper_words = kernels.at_most_2to4_tables()
    np.testing.assert_array_equal(upper_capacity, upper[:, 2])

    def digits(code: int) -> np.ndarray:
        return np.array([(code // 3**j) % 3 for j in range(4)])

    def rows(word: np.uint64) -> np.ndarray:
        raw = np.array([word], dtype=np.uint64).view(np.uint8)
        return raw.reshape(2, 4).astype(bool)

    tiles = []
    for q in range(len(upper)):
        capacity = digits(int(upper[q, 2]))
        for p in range(len(lower)):
            if (digits(int(lower[p, 2])) <= capacity).all():
                tiles.append(np.concatenate([rows(upper_words[q]), rows(lower_words[p])]))
    np.testing.assert_array_equal(np.array(tiles), at_most_pattern_table(2, 4))
    # final[slot]: 2 (never written) exactly for the slots no lower pair reaches.
    reached = np.zeros(81, dtype=bool)
    reached[lower[:, 2]] = True
    np.testing.assert_array_equal(final == 2, ~reached)


def _cases(seed: int, shape: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(shape).astype(np.float32)
    magnitudes = np.exp2(rng.uniform(-140, 100, shape)).astype(np.float32)  # incl. subnormals
    significands = rng.integers(2**23, 2**24, shape).astype(np.float64)
    # Spreads around the kernel's key limit (_KEY_BINADES = 18) and the float64 one (25).
    spread = rng.choice([0, 17, 18, 19, 26], shape, p=[0.6, 0.1, 0.1, 0.1, 0.1])
    cases = [
        np.abs(noise),
        noise,
        noise - 1.0,  # many lines keep fewer than 2
        -np.abs(noise),  # every tile keeps nothing
        np.round(noise * 2).clip(-8, 7),  # int4-like: tie-heavy
        rng.integers(0, 2, shape),  # binary: ties everywhere
        rng.integers(-1, 2, shape),
        np.zeros(shape),
        np.where(rng.random(shape) < 0.3, 0, np.abs(noise)),
        np.where(rng.random(shape) < 0.5, -0.0, 0.0),  # signed zeros
        magnitudes,
        (noise.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32),  # bfloat16-like
        significands * np.exp2(-spread.astype(np.float64)),
    ]
    return [np.ascontiguousarray(case, dtype=np.float32) for case in cases]


def _brute(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # brute force runs in Python
        result = solve_at_most(scores, PATTERN, method="brute")
    return result.mask, result.kept_sum


@pytest.mark.parametrize("shape", [(8, 4 * 7), (4, 4 * 101), (4, 4 * 300)])
def test_the_at_most_2to4_kernel_equals_brute_force(shape):
    """Masks and exact kept sums equal brute force (and the at-most successive shortest
    paths alone), serially and in parallel, on 13 kinds of float32 tiles; 7, 101 and 300
    tiles per tile row make blocks shorter than, and split across, the kernel's block of
    256 tiles."""
    for scores in _cases(sum(shape), shape):
        expected_mask, expected_sum = _brute(scores)
        for parallel in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # tiles too wide for int64
                result = solve_at_most(scores, PATTERN, parallel=parallel)
            np.testing.assert_array_equal(result.mask, expected_mask)
            np.testing.assert_array_equal(result.kept_sum, expected_sum)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            flow = solve_at_most(scores, PATTERN, from_exact=False)
        np.testing.assert_array_equal(flow.mask, expected_mask)


def test_tiles_the_kernel_cannot_key_exactly_are_handed_back():
    """A tile spanning more binades than the keys hold, a subnormal and an infinity get
    NEEDS_UNITS from the kernel; the driver solves the first two exactly and raises on
    the third, as for every other method."""
    scores = np.abs(np.random.default_rng(3).standard_normal((4, 16))).astype(np.float32)
    scores[0, 4] = 2.0**20  # tile 1: 20 binades above its other entries
    scores[1, 9] = np.float32(1e-40)  # tile 2: a subnormal
    tiles = 4
    tables = kernels.at_most_2to4_tables()
    mask = np.zeros(scores.shape, dtype=bool)
    status = np.full(tiles, 99, dtype=np.int8)
    kept = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    kernels.enumerate_2to4_at_most_float32_tiles(
        scores.view(np.uint32), scores, tables, 0, tiles, mask.view(np.uint32),
        status, kept, exponents, kernels.scratch_2to4_at_most(),
    )  # fmt: skip
    assert status.tolist() == [SOLVED, NEEDS_UNITS, NEEDS_UNITS, SOLVED]
    expected_mask, expected_sum = _brute(scores)
    result = solve_at_most(scores, PATTERN)
    np.testing.assert_array_equal(result.mask, expected_mask)
    np.testing.assert_array_equal(result.kept_sum, expected_sum)
    scores[2, 13] = np.inf
    with pytest.raises(ValueError, match="scores"):
        transposable_mask(scores, 2, 4, fill="at_most")


def test_the_worked_example_keeps_six():
    """The issue's tile: exactly 2 keeps 5.0, at most 2 keeps 6.0."""
    tile = np.array([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]], dtype=np.float32)
    assert transposable_optimum(tile, 2, 4).sum() == 5.0
    assert transposable_optimum(tile, 2, 4, fill="at_most").sum() == 6.0
    np.testing.assert_array_equal(transposable_mask(tile, 2, 4, fill="at_most"), _brute(tile)[0])


@given(
    st.lists(
        st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0, 0.5, 3.0, 1.5, -2.5, 1e-3, 7.0]),
        min_size=32,
        max_size=32,
    )
)
def test_tie_heavy_tiles_take_the_first_maximum(values):
    """Few distinct values, so most tiles have many optimal patterns: the kernel must pick
    the canonical (first) one, as brute force does."""
    scores = np.array(values, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(
        transposable_mask(scores, 2, 4, fill="at_most"), _brute(scores)[0]
    )
