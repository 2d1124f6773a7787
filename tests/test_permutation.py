"""Channel permutations (``specs/permutation.md``): optimum, searches, twins, errors.

The oracle is brute force over every permutation of the columns, with its own
(vectorised, differently summed) objective; on integer-valued weights every sum
is exact, so the optimum and the tie rule can be compared exactly.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nmref
from nmref.permutation import (
    EXHAUSTIVE_MAX_COLUMNS,
    count_column_partitions,
    permutation_efficacy,
    permutation_objective,
    row_bound,
    search_channel_permutation,
)
from nmref.permutation.partitions import canonical_partitions, canonical_permutation

PATTERNS = [(1, 2), (2, 4), (1, 4), (3, 4), (2, 8), (4, 8)]


def brute_kept(weight: np.ndarray, n: int, m: int, permutations: np.ndarray) -> np.ndarray:
    """Kept magnitude of every permutation (rows of ``permutations``), by sorting."""
    magnitudes = np.abs(weight)[:, permutations]  # (rows, P, C)
    rows, count, columns = magnitudes.shape
    grouped = np.sort(magnitudes.reshape(rows, count, columns // m, m), axis=-1)
    return grouped[..., m - n :].sum(axis=(0, 2, 3))


def integer_weight(rng: np.random.Generator, shape: tuple[int, int], high: int = 4) -> np.ndarray:
    return rng.integers(-high, high + 1, size=shape).astype(np.float64)


# ----------------------------------------------------------------------------
# Counting and canonical forms
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("columns", "m"), [(0, 4), (4, 4), (6, 2), (8, 4), (8, 2), (9, 3), (12, 4)]
)
def test_partition_count_matches_the_enumeration_and_distinct_canonical_forms(columns, m):
    listed = list(canonical_partitions(columns, m))
    assert len(listed) == len(set(listed)) == count_column_partitions(columns, m)
    assert listed == sorted(listed)  # lexicographic order, the identity first
    if columns:
        assert listed[0] == tuple(range(columns))
    if columns <= 8:
        forms = {
            tuple(canonical_permutation(np.array(p), m))
            for p in itertools.permutations(range(columns))
        }
        assert forms == set(listed)


def test_partition_counts_quoted_in_the_spec():
    assert count_column_partitions(8, 4) == 35
    assert count_column_partitions(12, 4) == 5775
    assert count_column_partitions(16, 4) == 2627625
    assert count_column_partitions(20, 4) == math.factorial(20) // (24**5 * 120)
    assert count_column_partitions(16, 8) == 6435


# ----------------------------------------------------------------------------
# The objective
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "m"), PATTERNS)
def test_objective_is_exactly_invariant_under_reordering_inside_and_among_groups(n, m):
    rng = np.random.default_rng(n * 10 + m)
    weight = rng.standard_normal((7, 4 * m)).astype(np.float32)
    permutation = rng.permutation(4 * m)
    value = permutation_objective(weight, n, m, permutation)
    for _ in range(5):
        groups = permutation.reshape(-1, m)[rng.permutation(4)]
        shuffled = np.concatenate([rng.permutation(group) for group in groups])
        assert permutation_objective(weight, n, m, shuffled) == value
    expected = brute_kept(weight.astype(np.float64), n, m, permutation[None])[0]
    np.testing.assert_allclose(value, expected, rtol=1e-12)


def test_objective_doctest_case_by_hand():
    weight = np.array([[4.0, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 1.0]])
    assert permutation_objective(weight, 1, 2) == 10.0
    assert permutation_objective(weight, 1, 2, [0, 2, 1, 3]) == 6.0
    assert row_bound(weight, 1, 2) == 10.0


def test_conv_weights_permute_input_channels():
    rng = np.random.default_rng(3)
    conv = rng.standard_normal((4, 8, 3, 3))
    permutation = rng.permutation(8)
    expected = sum(
        permutation_objective(conv[:, :, i, j], 2, 4, permutation)
        for i in range(3)
        for j in range(3)
    )
    np.testing.assert_allclose(permutation_objective(conv, 2, 4, permutation), expected, rtol=1e-12)
    permuted = conv[:, permutation]
    np.testing.assert_allclose(
        permutation_objective(permuted, 2, 4), permutation_objective(conv, 2, 4, permutation),
        rtol=1e-12,
    )  # fmt: skip


def test_efficacy_is_apex_definition():
    rng = np.random.default_rng(4)
    weight = rng.random((16, 16))
    permutation = rng.permutation(16)
    identity = permutation_objective(weight, 2, 4)
    kept = permutation_objective(weight, 2, 4, permutation)
    bound = row_bound(weight, 2, 4)
    # apex: (base_lost - cur_lost) / (base_lost - optimal_lost), losses from the unpruned total
    total = np.abs(weight).sum()
    apex = ((total - identity) - (total - kept)) / ((total - identity) - (total - bound))
    np.testing.assert_allclose(permutation_efficacy(weight, 2, 4, permutation), apex, rtol=1e-9)
    assert permutation_efficacy(np.ones((2, 4)), 2, 4, [3, 2, 1, 0]) == 1.0  # bound reached


def test_no_permutation_beats_the_row_bound():
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((5, 8))
    every = np.array(list(itertools.permutations(range(8))))
    assert brute_kept(weight, 2, 4, every).max() <= row_bound(weight, 2, 4) * (1 + 1e-12)


# ----------------------------------------------------------------------------
# The certified optimum
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "m", "columns"), [(1, 2, 6), (1, 2, 8), (2, 4, 8), (1, 4, 8), (3, 4, 8)]
)
@pytest.mark.parametrize("implementation", ["numba", "numpy"])
def test_exhaustive_is_the_brute_force_optimum_with_the_lexicographic_tie_rule(
    n, m, columns, implementation
):
    every = np.array(list(itertools.permutations(range(columns))))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        weight = integer_weight(rng, (5, columns), high=2)  # exact sums, many ties
        kept = brute_kept(weight, n, m, every)
        best = kept.max()
        optimal = {tuple(canonical_permutation(p, m)) for p in every[kept == best]}
        result = search_channel_permutation(
            weight, n, m, method="exhaustive", implementation=implementation
        )
        assert result.kept == best
        assert tuple(result.permutation) == min(optimal)  # lexicographically first canonical
        assert result.efficacy <= 1.0


def test_exhaustive_on_floats_matches_brute_force_within_rounding():
    every = np.array(list(itertools.permutations(range(8))))
    rng = np.random.default_rng(11)
    weight = rng.standard_normal((6, 8)).astype(np.float32)
    kept = brute_kept(weight.astype(np.float64), 2, 4, every)
    result = search_channel_permutation(weight, 2, 4, method="exhaustive")
    np.testing.assert_allclose(result.kept, kept.max(), rtol=1e-12)
    best = every[np.argmax(kept)]
    assert set(map(frozenset, best.reshape(-1, 4))) == set(
        map(frozenset, result.permutation.reshape(-1, 4))
    )


def test_exhaustive_refuses_too_many_columns():
    weight = np.ones((2, EXHAUSTIVE_MAX_COLUMNS + 4))
    with pytest.raises(ValueError, match="method='exhaustive' takes in <= 20 input channels"):
        search_channel_permutation(weight, 2, 4, method="exhaustive")


# ----------------------------------------------------------------------------
# Searches: never worse than the start, deterministic, twins equal
# ----------------------------------------------------------------------------

SEARCHES = [
    {"method": "stripes"},
    {"method": "stripes", "stripes_per_group": 3},
    {"method": "swaps"},
    {"method": "stripes", "escape_attempts": 4, "rng": 7},
    {"method": "swaps", "escape_attempts": 4, "rng": 7},
    {"method": "stripes", "block_stripes": 2},
    {"method": "swaps", "block_stripes": 3},
]


def _random_case(seed: int) -> tuple[np.ndarray, int, int]:
    rng = np.random.default_rng(seed)
    n, m = PATTERNS[seed % len(PATTERNS)]
    stripes = int(rng.integers(1, 6 if m <= 4 else 3))  # 4:8 tables are large for NumPy
    rows = int(rng.integers(0, 9))
    if seed % 3 == 0:
        weight = integer_weight(rng, (rows, stripes * m))
    else:
        weight = rng.standard_normal((rows, stripes * m)).astype(
            np.float32 if seed % 2 else np.float64
        )
    return weight, n, m


@pytest.mark.parametrize(
    "options", SEARCHES, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())
)
def test_numba_equals_the_readable_numpy_version_bit_for_bit(options):
    for seed in range(18):
        weight, n, m = _random_case(seed)
        if options.get("stripes_per_group") == 3 and m == 8:
            continue  # 2.6e7 partitions per group: refused
        start = np.random.default_rng(seed + 100).permutation(weight.shape[1])
        fast = search_channel_permutation(weight, n, m, start=start, **options)
        slow = search_channel_permutation(weight, n, m, start=start, implementation="numpy",
                                          **options)  # fmt: skip
        np.testing.assert_array_equal(fast.permutation, slow.permutation)
        assert (fast.kept, fast.moves, fast.rounds, fast.escapes_used) == (
            slow.kept, slow.moves, slow.rounds, slow.escapes_used,
        )  # fmt: skip
        assert fast.kept >= fast.start_kept
        assert fast.kept == permutation_objective(weight, n, m, fast.permutation)
        assert tuple(fast.permutation) == tuple(canonical_permutation(fast.permutation, m))


@pytest.mark.parametrize("implementation", ["numba", "numpy"])
def test_objective_and_exhaustive_twins_equal(implementation):
    from nmref.permutation import _kernels, reference

    for seed in range(12):
        weight, n, m = _random_case(seed)
        if weight.shape[1] > 12:
            continue
        magnitudes = np.ascontiguousarray(np.abs(weight.astype(np.float64)).T)
        order = np.random.default_rng(seed).permutation(weight.shape[1]).astype(np.int64)
        assert _kernels.objective(magnitudes, order, n, m) == reference.objective(
            magnitudes, order, n, m
        )
        if weight.shape[1]:
            fast, fast_value = _kernels.exhaustive(magnitudes, n, m)
            slow, slow_value = reference.exhaustive(magnitudes, n, m)
            np.testing.assert_array_equal(fast, slow)
            assert fast_value == slow_value


@given(
    seed=st.integers(0, 2**32 - 1),
    pattern=st.sampled_from(PATTERNS[:4]),  # m <= 4: the NumPy twin stays fast
    stripes=st.integers(2, 5),
    rows=st.integers(1, 6),
    method=st.sampled_from(["stripes", "swaps"]),
)
def test_searches_never_worse_than_their_start_and_agree_with_numpy(seed, pattern, stripes, rows,
                                                                    method):  # fmt: skip
    n, m = pattern
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((rows, stripes * m))
    start = rng.permutation(stripes * m)
    fast = search_channel_permutation(weight, n, m, method=method, start=start)
    assert fast.kept >= permutation_objective(weight, n, m, start)
    if stripes * m <= 12:
        slow = search_channel_permutation(weight, n, m, method=method, start=start,
                                          implementation="numpy")  # fmt: skip
        np.testing.assert_array_equal(fast.permutation, slow.permutation)
    if stripes * m <= 16:
        optimum = search_channel_permutation(weight, n, m, method="exhaustive")
        assert fast.kept <= optimum.kept


def test_searches_find_the_optimum_where_one_move_reaches_it():
    # Columns 0,1 and 2,3 are large in row 0 and row 1: the identity pairs them badly.
    weight = np.array([[9.0, 9.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
                       [0.0, 0.0, 9.0, 9.0, 0.0, 0.0, 1.0, 1.0]])  # fmt: skip
    for method in ("stripes", "swaps", "exhaustive"):
        result = search_channel_permutation(weight, 1, 4, method=method)
        assert result.kept == 36.0 == result.bound, method
        assert result.efficacy == 1.0


def test_searches_are_deterministic_and_the_seed_matters():
    rng = np.random.default_rng(8)
    weight = rng.standard_normal((8, 32))
    runs = [search_channel_permutation(weight, 2, 4, escape_attempts=20, rng=3) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].permutation, runs[1].permutation)
    generator = search_channel_permutation(weight, 2, 4, escape_attempts=20,
                                           rng=np.random.default_rng(3))  # fmt: skip
    np.testing.assert_array_equal(runs[0].permutation, generator.permutation)
    assert all(run.escapes_used == 20 for run in runs)
    # The escapes start from the converged order and the best order seen is returned.
    plain = search_channel_permutation(weight, 2, 4)
    assert runs[0].kept >= plain.kept
    # They draw from rng: a Generator passed in has moved on.
    used, fresh = np.random.default_rng(3), np.random.default_rng(3)
    search_channel_permutation(weight, 2, 4, escape_attempts=20, rng=used)
    assert used.integers(2**62) != fresh.integers(2**62)


def test_zero_size_and_trivial_patterns():
    for method in ("stripes", "swaps", "exhaustive"):
        empty = search_channel_permutation(np.zeros((3, 0)), 2, 4, method=method)
        assert empty.permutation.shape == (0,) and empty.kept == 0.0
        no_rows = search_channel_permutation(np.zeros((0, 8)), 2, 4, method=method)
        np.testing.assert_array_equal(no_rows.permutation, np.arange(8))
        weight = np.random.default_rng(0).standard_normal((4, 8))
        for n in (0, 4):  # every permutation keeps the same: the start (identity) stays
            result = search_channel_permutation(weight, n, 4, method=method)
            np.testing.assert_array_equal(result.permutation, np.arange(8))
            assert result.efficacy == 1.0


def test_public_api_is_exported():
    for name in ("search_channel_permutation", "permutation_objective", "permutation_efficacy",
                 "count_column_partitions", "ChannelPermutation"):  # fmt: skip
        assert name in nmref.__all__
        assert getattr(nmref, name) is getattr(nmref.permutation, name)


# ----------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: permutation_objective(np.ones((2, 6)), 2, 4), ValueError,
         "6 input channels .* multiple of m=4"),
        (lambda: permutation_objective(np.ones(4), 2, 4), ValueError, "ndim >= 2"),
        (lambda: permutation_objective(np.ones((2, 4), dtype=np.int64), 2, 4), TypeError,
         "weight must be a float16/32/64 array"),
        (lambda: permutation_objective(np.array([[np.nan, 1, 1, 1]]), 2, 4), ValueError,
         "weight contains NaN"),
        (lambda: permutation_objective(np.array([[np.inf, 1, 1, 1]]), 2, 4), ValueError,
         "infinity"),
        (lambda: permutation_objective(np.ones((2, 4)), 5, 4), ValueError, "n=5 must be <= m=4"),
        (lambda: permutation_objective(np.ones((2, 4)), 2.0, 4), TypeError, "n=2.0"),
        (lambda: permutation_objective(np.ones((2, 4)), 2, 4, [0, 1, 1, 3]), ValueError,
         "permutation must be a permutation of range"),
        (lambda: permutation_objective(np.ones((2, 4)), 2, 4, [0.0, 1, 2, 3]), TypeError,
         "permutation must be an integer array"),
        (lambda: permutation_objective(np.ones((2, 4)), 2, 4, [0, 1, 2]), ValueError,
         r"must have shape \(4,\)"),
        (lambda: permutation_objective(np.ones((2, 4, 3, 3)), 2, 4, layout="flat"), ValueError,
         "layout='flat'"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, method="annealing"),
         ValueError, "method='annealing' must be one of"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, escape_attempts=3),
         ValueError, "escape_attempts=3 needs rng"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, escape_attempts=3, rng="x"),
         TypeError, "rng='x' must be a numpy.random.Generator"),
        (lambda: search_channel_permutation(np.ones((2, 32)), 2, 4, escape_attempts=1, rng=0,
                                            block_stripes=2), ValueError,
         "escape_attempts=1 must be 0 with block_stripes=2"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, stripes_per_group=0),
         ValueError, "stripes_per_group=0 must be a positive integer"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, stripes_per_group=3,
                                            block_stripes=2), ValueError,
         "block_stripes=2 must be >= stripes_per_group=3"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 4, 8, stripes_per_group=3),
         ValueError, "partitions per stripe group"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, implementation="cuda"),
         ValueError, "implementation='cuda' must be one of"),
        (lambda: search_channel_permutation(np.ones((2, 8)), 2, 4, start=[0, 1]), ValueError,
         r"start must have shape \(8,\)"),
        (lambda: count_column_partitions(6, 4), ValueError, "columns=6 must be a non-negative "
         "multiple of m=4"),
    ],
)  # fmt: skip
def test_bad_input_names_the_argument_and_the_rule(call, error, message):
    with pytest.raises(error, match=message):
        call()
