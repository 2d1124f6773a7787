"""The at-most kernel's certified truncated path (spec T2 "Tiles too wide for int64 units,
at most n", T5): tiles whose dynamic range is too wide for int64 units are solved on sticky
units and kept only with an integer certificate for the true scores (status
``SOLVED_TRUNCATED``); tiles without one (near ties below the truncation) go to the readable
solver. Either way the mask is the readable solver's, bit for bit.
"""

from __future__ import annotations

import os
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmref.patterns import check_pattern
from nmref.transposable import (
    flow,
    transposable_certificate,
    transposable_mask,
    transposable_mask_reference,
    verify_certificate,
)
from nmref.transposable._driver import exact_start, kernel_bits, solve_at_most
from nmref.transposable._kernel_contract import SOLVED, SOLVED_TRUNCATED, TOO_WIDE, max_unit_bits
from nmref.transposable.patterns import brute_tile_at_most
from nmref.transposable.tiles import exact_integer_tile, iter_tiles

# Kinds whose tiles the truncated path certifies (here: always), and kinds it often cannot
# at m >= 8, because no integer certificate exists for any mask (checked by enumeration on
# 2:4 examples): signed scores with tiny entries compare two tiny values in a line with room
# (zero dual), scores spread uniformly over 60 binades compare tiny values in full lines,
# and the ordinary values next to 1e300 all lie below the truncation.
CERTIFIED = ("signed64", "abs64", "abs_tiny32")
KINDS = (*CERTIFIED, "tiny32", "tiny64", "spread64", "abs_spread64", "huge_tiny")


def wide_tile(rng: np.random.Generator, m: int, kind: str) -> np.ndarray:
    """One m x m tile too wide for int64 units (m >= 4)."""
    if kind == "signed64":  # float64 significands over a few binades: > max_unit_bits
        return rng.standard_normal((m, m))
    if kind == "abs64":
        return np.abs(rng.standard_normal((m, m)))
    if kind in ("tiny32", "abs_tiny32", "tiny64"):  # ~2**-60-relative spreads: 1/8 tiny
        tile = rng.standard_normal((m, m))
        tiny = rng.random((m, m)) < 0.125
        tiny[-1, -1] = True
        tile = np.where(tiny, tile * np.exp2(-60 - 4 * rng.random((m, m))), tile)
        tile = np.abs(tile) if kind == "abs_tiny32" else tile
        return tile.astype(np.float32) if kind.endswith("32") else tile
    if kind in ("spread64", "abs_spread64"):  # exponents uniform over 60 binades
        tile = rng.standard_normal((m, m)) * np.exp2(rng.uniform(-60, 0, (m, m)))
        return np.abs(tile) if kind == "abs_spread64" else tile
    assert kind == "huge_tiny"  # 1e300, 1e-300 and ordinary values
    tile = rng.standard_normal((m, m))
    tile[0, 0] = 1e300
    tile[-1, -1] = 1e-300
    return tile


def is_too_wide(tile: np.ndarray) -> bool:
    units, _ = exact_integer_tile(tile)
    nonzero = [abs(x) for row in units for x in row if x]
    low = min((x & -x).bit_length() for x in nonzero)  # lowest set bit, as the kernels see it
    return max(x.bit_length() for x in nonzero) - low + 1 > max_unit_bits(len(tile))


def kernel(scores: np.ndarray, n: int, m: int, *, from_exact: bool = True):
    """The at-most kernel alone (as ``_driver.solve_at_most`` runs it, without the Python
    path): ``(mask, status, exponents, row_units, column_units)``, potentials in units."""
    from nmref.transposable import _at_most_kernels

    tiles = (scores.shape[0] // m) * (scores.shape[1] // m)
    bits, fraction_bits = kernel_bits(scores)
    tile_list = np.arange(tiles, dtype=np.int64)
    start = "flow" if from_exact else "none"
    exact = exact_start(bits, fraction_bits, check_pattern(n, m), scores.shape, False, start)
    outputs = (
        np.zeros(scores.shape, dtype=bool),
        np.full(tiles, TOO_WIDE, dtype=np.int8),
        np.zeros(tiles, dtype=np.int64),
        np.zeros(tiles, dtype=np.int64),
        np.zeros((tiles, m), dtype=np.int64),
        np.zeros((tiles, m), dtype=np.int64),
    )
    _at_most_kernels.at_most_tiles(
        bits, fraction_bits, n, m, max_unit_bits(m), tile_list, exact, *outputs
    )
    mask, status, _, exponents, row_units, column_units = outputs
    return mask, status, exponents, row_units, column_units


def certifies_exactly(tile, n, kept, u_units, v_units, exponent) -> bool:
    """The kernel's integer duals prove ``kept`` at-most optimal for the TRUE scores
    (``flow.certifies_optimal_at_most`` on Python ints at a common exponent)."""
    units, tile_exponent = exact_integer_tile(tile)
    low = min(tile_exponent, int(exponent))
    weights = [[x << (tile_exponent - low) for x in row] for row in units]
    u = [int(x) << (int(exponent) - low) for x in u_units]
    v = [int(x) << (int(exponent) - low) for x in v_units]
    return flow.certifies_optimal_at_most(weights, np.asarray(kept).tolist(), n, u, v)


def check_wide_tiles(tiles: list[np.ndarray], n: int, m: int, oracle: str = "readable"):
    """Kernel (both starts) == the oracle on every tile; kernel certificates exact; the
    driver's answer (with its Python path) the same, with exact kept sums; returns the
    kernel statuses of both starts."""
    scores = np.hstack(tiles)
    expected = []
    for tile in tiles:
        units, _ = exact_integer_tile(tile)
        if oracle == "brute":
            expected.append(brute_tile_at_most(units, n, m)[0])
        else:
            expected.append(np.array(flow.solve_tile_at_most(units, n)[0]))
    statuses = []
    for from_exact in (True, False):
        mask, status, exponents, row_units, column_units = kernel(
            scores, n, m, from_exact=from_exact
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            driven = solve_at_most(scores, check_pattern(n, m), from_exact=from_exact)
        np.testing.assert_array_equal(driven.status, status)
        for t, tile in enumerate(tiles):
            got = driven.mask[:, t * m : (t + 1) * m]
            np.testing.assert_array_equal(got, expected[t], err_msg=f"tile {t} {from_exact=}")
            if status[t] in (SOLVED, SOLVED_TRUNCATED):
                np.testing.assert_array_equal(mask[:, t * m : (t + 1) * m], expected[t])
                assert certifies_exactly(
                    tile, n, expected[t], row_units[t], column_units[t], exponents[t]
                ), (t, from_exact)
            # The kept sum of a truncated tile is recomputed exactly (_finish).
            if t in driven.kept_exact:
                total, exponent = driven.kept_exact[t]
            else:
                total, exponent = int(driven.kept_units[t]), int(driven.exponents[t])
            kept = sum((Fraction(float(x)) for x in tile[expected[t]]), Fraction(0))
            assert Fraction(total) * Fraction(2) ** exponent == kept
        statuses.append(status)
    return statuses


@pytest.mark.parametrize(
    ("n", "m", "count"),
    [(2, 4, 6), (4, 8, 3), (8, 16, 2), pytest.param(16, 32, 1, marks=pytest.mark.slow)],
)
def test_wide_tiles_at_most_equal_the_readable_solver(n, m, count):
    rng = np.random.default_rng(100 * m + n)
    kinds = [kind for kind in KINDS for _ in range(count)]
    if m == 32:  # the readable solver on tiles it must answer itself is slow at 16:32
        kinds = [kind for kind in kinds if kind in CERTIFIED]
    tiles = [wide_tile(rng, m, kind) for kind in kinds]
    assert all(is_too_wide(tile) for tile in tiles)
    certified = np.isin(kinds, CERTIFIED)
    for status in check_wide_tiles(tiles, n, m):
        # The fast path really runs: from either start, every tile of the certified kinds
        # is solved on truncated units (none is SOLVED: all are too wide).
        assert (status[certified] == SOLVED_TRUNCATED).all(), status
        assert set(status.tolist()) <= {SOLVED_TRUNCATED, TOO_WIDE}
        if m <= 8:
            assert (status == SOLVED_TRUNCATED).mean() > 0.6, status


def test_wide_tiles_at_most_certificates_verify():
    """``transposable_certificate(..., fill="at_most")`` on wide tiles: the kernel's
    potentials (exact) verify; refused only where float64 cannot hold any."""
    rng = np.random.default_rng(9)
    verified = 0
    for n, m in ((2, 4), (4, 8), (8, 16)):
        for kind in KINDS:
            tile = wide_tile(rng, m, kind)
            try:
                certificate = transposable_certificate(tile, n, m, fill="at_most")
            except ValueError as error:
                assert "not representable in float64" in str(error)
                continue
            assert verify_certificate(tile, *certificate, n, m, fill="at_most")
            verified += 1
    assert verified >= 12


def test_the_1e300_tile_at_most():
    """1e300, 1e-300 and ordinary values: the ordinary values lie far below the truncation.
    Where they decide the optimum there is no certificate (Python path); where they are all
    negative (never kept) the truncated path certifies the tile, keeping the 1e-300 (its
    lines have room: strictly better than not, although its floor unit is 0)."""
    rng = np.random.default_rng(4)
    decided_below = np.abs(wide_tile(rng, 8, "huge_tiny"))
    negative = -np.abs(rng.standard_normal((8, 8)))
    negative[0, 0] = 1e300
    negative[3, 5] = 0.75e300
    negative[7, 7] = 1e-300
    for status in check_wide_tiles([decided_below, negative], 4, 8):
        assert status.tolist() == [TOO_WIDE, SOLVED_TRUNCATED]
    mask = transposable_mask(np.hstack([decided_below, negative]), 4, 8, fill="at_most")
    np.testing.assert_array_equal(mask[:, 8:], negative > 0)


def test_near_ties_below_the_truncation_fall_back_at_most():
    """Certification must fail: row 3 differs only 92 binades below the largest entry and
    every optimum takes two of its entries, which the floor units cannot tell apart (the
    exact fill's test tile in test_transposable.py); and a 1:4 tile whose two matchings of
    a 2 x 2 block differ by 2**-51, both inexact. No integer certificate exists for any
    mask, from either start, and the readable solver decides."""
    tile = np.ones((4, 4))
    tile[3] = 2.0**-40 * (1 + np.array([0, 1, 3, 2]) * 2.0**-52)
    block = np.array([[1 + 2.0**-52, 1 + 2.0**-51], [1 + 2.0**-51, 1 + 2.0**-52]])
    pair = np.full((4, 4), -(2.0**8))
    pair[:2, :2] = block
    for scores, n in ((tile, 2), (pair, 1)):
        assert is_too_wide(scores)
        for status in check_wide_tiles([scores], n, 4):
            assert status.tolist() == [TOO_WIDE]
    expected = np.array(flow.solve_tile_at_most(exact_integer_tile(tile)[0], 2)[0])
    assert expected[3].tolist() == [False, False, True, True]
    assert transposable_mask(pair, 1, 4, fill="at_most")[:2, :2].tolist() == [
        [False, True],
        [True, False],
    ]
    scores = np.tile(tile, (8, 8))  # 64 tiles: the slow path warns
    with pytest.warns(RuntimeWarning, match="solved exactly in Python"):
        fast = transposable_mask(scores, 2, 4, fill="at_most")
    np.testing.assert_array_equal(fast, np.tile(expected, (8, 8)))


def test_parallel_equals_serial_on_wide_tiles_at_most():
    rng = np.random.default_rng(21)
    scores = np.hstack([wide_tile(rng, 8, kind) for kind in KINDS * 2])
    scores = np.vstack([scores, scores[:, ::-1]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        serial = solve_at_most(scores, check_pattern(4, 8))
        parallel = solve_at_most(scores, check_pattern(4, 8), parallel=True)
    np.testing.assert_array_equal(parallel.mask, serial.mask)
    np.testing.assert_array_equal(parallel.status, serial.status)
    assert (serial.status == SOLVED_TRUNCATED).mean() > 0.6


def test_m_64_wide_tile_at_most_is_certified_on_truncated_units():
    """32:64 on float64 tiles (too wide for int64 units at m = 64): certified on truncated
    units from both starts, the same mask; the readable comparison is the slow test below."""
    rng = np.random.default_rng(64)
    tiles = [np.abs(rng.standard_normal((64, 64))), rng.standard_normal((64, 64))]
    masks = []
    for from_exact in (True, False):
        mask, status, exponents, row_units, column_units = kernel(
            np.hstack(tiles), 32, 64, from_exact=from_exact
        )
        assert status.tolist() == [SOLVED_TRUNCATED, SOLVED_TRUNCATED]
        for t, tile in enumerate(tiles):
            kept = mask[:, 64 * t : 64 * (t + 1)]
            assert certifies_exactly(tile, 32, kept, row_units[t], column_units[t], exponents[t])
        masks.append(mask)
    np.testing.assert_array_equal(masks[0], masks[1])


def test_the_exact_start_of_a_truncated_tile_is_in_the_same_units():
    """Step 0 reads the exact kernel's duals only where its exponent equals the at-most
    kernel's; both truncate a too-wide tile to the same ``b`` (float32 and float64, normal
    and subnormal scores), so the exactly-n start is really tried on truncated tiles."""
    from nmref.transposable import _flow_kernels

    rng = np.random.default_rng(8)
    tiles = [wide_tile(rng, 8, kind) for kind in KINDS]
    tiles.append(np.abs(rng.standard_normal((8, 8))) * 2.0**-1060)  # float64 subnormals
    tiles.append(np.abs(rng.standard_normal((8, 8))).astype(np.float32) * np.float32(2.0**-140))
    compared = 0
    for scores in tiles:
        bits, fraction_bits = kernel_bits(scores)
        status = np.full(1, TOO_WIDE, dtype=np.int8)
        exponents = np.zeros(1, dtype=np.int64)
        _flow_kernels.exact_tiles(
            bits, fraction_bits, 4, 8, max_unit_bits(8), np.zeros(1, dtype=np.int64),
            np.empty((8, 8), dtype=bool), status, np.zeros(1, dtype=np.int64), exponents,
            np.zeros((1, 8), dtype=np.int64), np.zeros((1, 8), dtype=np.int64),
            _flow_kernels.size_token(8),
        )  # fmt: skip
        _, at_most_status, at_most_exponents, _, _ = kernel(scores, 4, 8)
        if status[0] == SOLVED_TRUNCATED:
            assert at_most_status[0] in (SOLVED_TRUNCATED, TOO_WIDE)
            assert at_most_exponents[0] == exponents[0]
            compared += 1
    assert compared >= len(KINDS) - 1


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("NMREF_LONG_TESTS"),
    reason="the readable solver takes ~20 s on one 32:64 tile; set NMREF_LONG_TESTS=1 (CI "
    "runs the kernel's own certificate check of this tile, test_m_64_wide_tile_at_most_is_"
    "certified_on_truncated_units)",
)
def test_m_64_wide_tile_at_most_equals_the_readable_solver():
    # The readable solver takes ~20 s on one 32:64 tile (160 s with the oracle tie pass).
    rng = np.random.default_rng(64)
    for status in check_wide_tiles([np.abs(rng.standard_normal((64, 64)))], 32, 64):
        assert status.tolist() == [SOLVED_TRUNCATED]


@st.composite
def small_wide_tiles(draw):
    m = draw(st.integers(2, 4))
    n = draw(st.integers(0, m))
    count = draw(st.integers(1, 3))
    tiles = []
    for _ in range(count):
        # Tie-heavy significands over a range of binades wider than max_unit_bits, with
        # signs, zeros, and 1e300 / 1e-300 now and then.
        significands = st.sampled_from([0, 1, 3, 2**52 + 1, 2**53 - 1, -1, -3, -(2**52 + 3)])
        exponents = st.sampled_from([-120, -70, -64, -60, -2, 0, 1])
        values = [draw(significands) * 2.0 ** draw(exponents) for _ in range(m * m)]
        values[draw(st.integers(0, m * m - 1))] = draw(
            st.sampled_from([1.0 + 2.0**-52, 1e300, -1e300, 0.75])
        )
        values[draw(st.integers(0, m * m - 1))] = draw(
            st.sampled_from([2.0**-70 * (1 + 2.0**-52), 1e-300, -1e-300, 3 * 2.0**-64])
        )
        tiles.append(np.array(values, dtype=np.float64).reshape(m, m))
    return tiles, n, m


@settings(max_examples=120, deadline=None)
@given(small_wide_tiles())
def test_wide_small_tiles_at_most_are_brute_force_optimal(case):
    tiles, n, m = case
    tiles = [tile for tile in tiles if is_too_wide(tile)]
    if tiles:
        check_wide_tiles(tiles, n, m, oracle="brute")


def test_wide_small_tiles_at_most_mostly_take_the_truncated_path():
    """The brute-force comparison is not only exercised through the Python path."""
    statuses = []
    rng = np.random.default_rng(17)
    for index in range(24):
        m = 3 + index % 2
        n = 1 + index % m
        tile = wide_tile(rng, m, KINDS[index % len(KINDS)])
        if is_too_wide(tile):
            statuses.extend(check_wide_tiles([tile], n, m, oracle="brute")[1])
    assert len(statuses) >= 16
    assert np.mean(np.array(statuses) == SOLVED_TRUNCATED) > 0.6, statuses


def test_iter_tiles_and_wide_status_agree_for_a_mixed_matrix():
    """Normal, too-wide and near-tie tiles side by side in one at-most call."""
    rng = np.random.default_rng(5)
    scores = np.abs(rng.standard_normal((8, 16))).astype(np.float32).astype(np.float64)
    scores[:4, 4:8] = wide_tile(rng, 4, "spread64")
    scores[4:, 8:12] = 1.0
    scores[7, 8:12] = 2.0**-40 * (1 + np.array([0, 1, 3, 2]) * 2.0**-52)
    result = solve_at_most(scores, check_pattern(2, 4))
    row_0 = [SOLVED, SOLVED_TRUNCATED, SOLVED, SOLVED]
    assert result.status.tolist() == [*row_0, SOLVED, SOLVED, TOO_WIDE, SOLVED]
    for tile_row, tile_column, tile in iter_tiles(scores, 4):
        expected = flow.solve_tile_at_most(exact_integer_tile(tile)[0], 2)[0]
        got = result.mask[4 * tile_row : 4 * tile_row + 4, 4 * tile_column : 4 * tile_column + 4]
        np.testing.assert_array_equal(got, expected)


# --------------------------------------------------------------------------- exact fill
def _exact_kernel(scores: np.ndarray, n: int, m: int):
    """The exact flow kernel alone: (mask, status) per tile, before any Python fallback."""
    from nmref.transposable import _flow_kernels

    bits, fraction_bits = kernel_bits(scores)
    tiles = (scores.shape[0] // m) * (scores.shape[1] // m)
    mask = np.zeros(scores.shape, dtype=bool)
    status = np.full(tiles, TOO_WIDE, dtype=np.int8)
    kept = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    duals = np.zeros((tiles, m), dtype=np.int64)
    _flow_kernels.exact_tiles(
        bits, fraction_bits, n, m, max_unit_bits(m), np.arange(tiles, dtype=np.int64),
        mask, status, kept, exponents, duals, duals.copy(), _flow_kernels.size_token(m),
    )  # fmt: skip
    return mask, status


def test_exact_fill_a_tie_of_floors_is_certified_on_sticky_units():
    """1:2 on [[2**60, 2**60], [1, 0]] (61 bits: truncated). On floor units both patterns
    keep 2**55 and the canonical tie would pick the diagonal, which is worse by 1 and has
    no certificate (the tile went to the Python path); on sticky units the 1 is odd, so
    the anti-diagonal wins and is certified in the kernel."""
    scores = np.array([[2.0**60, 2.0**60], [1.0, 0.0]])
    mask, status = _exact_kernel(scores, 1, 2)
    assert status.tolist() == [SOLVED_TRUNCATED]
    expected = transposable_mask_reference(scores, 1, 2)
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(expected, [[False, True], [True, False]])
    certificate = transposable_certificate(scores, 1, 2)
    assert verify_certificate(scores, *certificate, 1, 2)


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (4, 8), (3, 8)])
def test_exact_fill_wide_tiles_equal_the_readable_solver(n, m):
    """Wide tiles of every kind, exact fill: the kernel's masks (where it keeps a tile) and
    the driver's (with the Python path behind it) equal the readable solver's; the tiles
    whose optimum is not decided below the truncation stay in the kernel."""
    rng = np.random.default_rng(60 + 8 * n + m)
    statuses = []
    for index in range(16):
        kind = KINDS[index % len(KINDS)]
        tile = wide_tile(rng, m, kind)
        if not is_too_wide(tile):
            continue
        expected = transposable_mask_reference(tile, n, m)
        mask, status = _exact_kernel(tile, n, m)
        if status[0] == SOLVED_TRUNCATED:
            np.testing.assert_array_equal(mask, expected)
        statuses.append((kind, int(status[0])))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the Python path
            np.testing.assert_array_equal(transposable_mask(tile, n, m), expected)
    certified = [status for kind, status in statuses if kind in CERTIFIED]
    assert certified and all(status == SOLVED_TRUNCATED for status in certified), statuses
