"""The at-most-N Numba kernel equals the readable solver bit for bit (issue 16 items 1 and 4).

``transposable_mask(..., fill="at_most")`` runs :mod:`nmref.transposable._at_most_kernels`;
``transposable_mask_reference(..., fill="at_most")`` runs the readable
:func:`nmref.transposable.flow.solve_tile_at_most` (oracle tie pass). Masks, optima and
gaps must agree exactly on tie-heavy integers, zeros, negative scores, float16/32/64, every
``n`` from 0 to ``m``, and the kernel's duals must certify its masks (spec T2).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmref.transposable import (
    flow,
    is_transposable,
    optimality_gap,
    transposable_certificate,
    transposable_mask,
    transposable_mask_reference,
    transposable_optimum,
    verify_certificate,
)
from nmref.transposable._driver import solve_at_most
from nmref.transposable.patterns import brute_tile_at_most
from nmref.transposable.tiles import exact_integer_tile, iter_tiles


def _reference_optimum(scores: np.ndarray, n: int, m: int) -> list[Fraction]:
    """Per tile, the readable solver's kept sum as an exact rational."""
    mask = transposable_mask_reference(scores, n, m, fill="at_most")
    out = []
    for tile_row, tile_column, tile in iter_tiles(scores, m):
        r0, c0 = tile_row * m, tile_column * m
        kept = mask[r0 : r0 + m, c0 : c0 + m]
        out.append(sum((Fraction(float(x)) for x in tile[kept]), Fraction(0)))
    return out


def _assert_kernel_is_readable(scores: np.ndarray, n: int, m: int) -> None:
    """Both kernel paths (from the exactly-n optimum, and SSP alone) == the readable solver."""
    reference = transposable_mask_reference(scores, n, m, fill="at_most")
    expected = _reference_optimum(scores, n, m)
    for from_exact in (True, False):
        kernel = solve_at_most(scores, nm_pattern(n, m), from_exact=from_exact)
        np.testing.assert_array_equal(kernel.mask, reference)
        assert is_transposable(kernel.mask, n, m, exact=False)
        # Totals: the kernel's exact kept units against the readable mask's exact sum.
        for t, value in enumerate(expected):
            if t in kernel.kept_exact:
                got = Fraction(kernel.kept_exact[t][0]) * Fraction(2) ** kernel.kept_exact[t][1]
            else:
                got = Fraction(int(kernel.kept_units[t])) * Fraction(2) ** int(kernel.exponents[t])
            assert got == value, (from_exact, t, got, value)


def nm_pattern(n: int, m: int):
    from nmref.patterns import check_pattern

    return check_pattern(n, m)


@st.composite
def at_most_cases(draw, max_m: int = 6):
    m = draw(st.integers(1, max_m))
    n = draw(st.integers(0, m))
    shape = (m * draw(st.integers(1, 2)), m * draw(st.integers(1, 2)))
    size = shape[0] * shape[1]
    kind = draw(st.sampled_from(["int", "float32", "float16", "float64", "zeros"]))
    if kind == "int":  # tie-heavy, signed, with zeros
        values = draw(st.lists(st.integers(-3, 3), min_size=size, max_size=size))
        return np.array(values, dtype=np.int64).reshape(shape), n, m
    if kind == "zeros":
        values = draw(
            st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0]), min_size=size, max_size=size)
        )
        return np.array(values, dtype=np.float32).reshape(shape), n, m
    pool = [0.0, 0.5, 1.0, -0.25, 2.0, 1e-3, 3.5, -7.0, 0.1]
    values = draw(st.lists(st.sampled_from(pool), min_size=size, max_size=size))
    return np.array(values, dtype=kind).reshape(shape), n, m


@settings(max_examples=80, deadline=None)
@given(at_most_cases())
def test_kernel_equals_the_readable_solver(case):
    scores, n, m = case
    _assert_kernel_is_readable(scores, n, m)
    try:
        certificate = transposable_certificate(scores, n, m, fill="at_most")
    except ValueError as error:
        # Spec T2: duals that float64 cannot hold (0.5 - 0.1 needs 55 bits) are refused,
        # after the readable solver's duals were tried too; only float64 scores get here.
        assert "not representable in float64" in str(error) and scores.dtype == np.float64
        return
    assert verify_certificate(scores, *certificate, n, m, fill="at_most")


def test_the_exact_start_is_taken_decided_and_refused():
    """The three ways a tile goes (spec T2, fast kernel): the exact optimum certified by a
    shift of its duals, certified by Bellman-Ford, or improved by removing units (keeping
    fewer is better)."""
    rng = np.random.default_rng(2)
    scores = np.abs(rng.standard_normal((64, 64))).astype(np.float32)
    from nmref.transposable._driver import solve_exact

    for n, m in ((2, 4), (4, 8)):
        exact = solve_exact(scores, nm_pattern(n, m), method="flow", potentials=True)
        tiles = (64 // m) ** 2
        u = exact.row_potentials.reshape(64 // m, m, 64 // m).transpose(0, 2, 1).reshape(tiles, m)
        v = exact.column_potentials.reshape(tiles, m)
        shifted = u.min(axis=1) + v.min(axis=1) >= 0
        at_most = transposable_optimum(scores, n, m, fill="at_most").ravel()
        better = at_most > exact.kept_sum.ravel()
        # All three kinds occur here, so each path of _start_from_exact is exercised.
        assert shifted.any() and better.any() and (~shifted & ~better).any()
        _assert_kernel_is_readable(scores[: 2 * m], n, m)
        mask = transposable_mask(scores, n, m, fill="at_most")
        np.testing.assert_array_equal(
            mask, solve_at_most(scores, nm_pattern(n, m), from_exact=False).mask
        )


@settings(max_examples=60, deadline=None)
@given(at_most_cases(max_m=4))
def test_kernel_is_brute_force_optimal_and_its_gaps_are_never_negative(case):
    scores, n, m = case
    mask = transposable_mask(scores, n, m, fill="at_most")
    optimum = transposable_optimum(scores, n, m, fill="at_most")
    exact_optimum = transposable_optimum(scores, n, m, fill="exact")
    for tile_row, tile_column, tile in iter_tiles(scores, m):
        units, exponent = exact_integer_tile(tile)
        kept, total = brute_tile_at_most(units, n, m)
        r0, c0 = tile_row * m, tile_column * m
        np.testing.assert_array_equal(mask[r0 : r0 + m, c0 : c0 + m], kept)
        assert optimum[tile_row, tile_column] == float(Fraction(total) * Fraction(2) ** exponent)
    assert (exact_optimum <= optimum).all()
    # Any valid at-most mask (here: the exact-fill mask and the greedy one) has gap >= 0.
    for other in (
        transposable_mask(scores, n, m),
        transposable_mask(scores, n, m, method="greedy"),
    ):
        gap = optimality_gap(scores, other, n, m, fill="at_most")
        assert (gap.per_tile >= 0).all() and gap.total >= 0
    assert optimality_gap(scores, mask, n, m, fill="at_most").total == 0.0


@pytest.mark.parametrize(
    ("n", "m"), [(1, 4), (2, 4), (3, 4), (2, 8), (4, 8), (3, 7), (5, 8), (8, 16)]
)
def test_kernel_equals_readable_on_many_random_inputs(n, m):
    rng = np.random.default_rng(1000 * n + m)
    tiles_per_side = 3 if m <= 8 else 1
    size = m * tiles_per_side
    cases = [
        rng.standard_normal((size, size)).astype(np.float32),
        np.abs(rng.standard_normal((size, size))).astype(np.float32),
        rng.integers(-2, 3, (size, size)).astype(np.float32),  # tie-heavy, signed
        rng.integers(0, 2, (size, size)).astype(np.float64),  # 0/1: ties everywhere
        np.where(rng.random((size, size)) < 0.5, 0.0, rng.standard_normal((size, size))),
        -np.abs(rng.standard_normal((size, size))),  # all negative: keeps nothing
        np.zeros((size, size), dtype=np.float32),
    ]
    if m > 8:
        cases = cases[:2] + cases[4:]  # the readable tie pass is O(n m^5) on 0/1 tiles
    for scores in cases:
        _assert_kernel_is_readable(scores, n, m)
    assert not transposable_mask(cases[-2], n, m, fill="at_most").any()


def test_edge_fills_zero_and_full():
    rng = np.random.default_rng(7)
    scores = rng.integers(-3, 4, (8, 8)).astype(np.float32)
    assert not transposable_mask(scores, 0, 4, fill="at_most").any()
    # n = m: every entry with a non-negative score (zeros are tight and have room).
    np.testing.assert_array_equal(transposable_mask(scores, 4, 4, fill="at_most"), scores >= 0)
    u_v = transposable_certificate(scores, 0, 4, fill="at_most")
    assert verify_certificate(scores, *u_v, 0, 4, fill="at_most")


def test_parallel_equals_serial_for_every_thread_count():
    """Deterministic output regardless of threads (issue 16 item 2), both fills: the
    parallel kernels split the tiles into 4 x threads chunks, so 1 and 2 threads chunk
    differently, and every split must give the serial masks."""
    import numba

    rng = np.random.default_rng(3)
    tie_heavy = rng.integers(-1, 3, (64, 64)).astype(np.float32)
    noise = np.abs(rng.standard_normal((64, 128))).astype(np.float32)
    threads = numba.get_num_threads()
    try:
        for n, m in ((2, 4), (4, 8), (3, 16), (16, 32)):
            for scores in (tie_heavy, noise):
                for fill in ("exact", "at_most"):
                    serial = transposable_mask(scores, n, m, fill=fill)
                    for count in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
                        numba.set_num_threads(count)
                        parallel = transposable_mask(scores, n, m, fill=fill, parallel=True)
                        np.testing.assert_array_equal(serial, parallel)
    finally:
        numba.set_num_threads(threads)


def test_tiles_too_wide_for_int64_are_certified_or_fall_back_to_the_readable_solver():
    # Both wide tiles are beyond max_unit_bits. Next to 1e200 the ordinary scores decide
    # far below the truncation: no certificate, the kernel hands the tile back (TOO_WIDE)
    # and the readable solver answers. The 1e-200 tile is decided above it: certified on
    # truncated units (SOLVED_TRUNCATED; more in test_transposable_atmost_truncated.py).
    # Both have exact kept sums recomputed in Python (kept_exact).
    from nmref.transposable._kernel_contract import SOLVED, SOLVED_TRUNCATED, TOO_WIDE

    rng = np.random.default_rng(5)
    scores = rng.standard_normal((8, 8)).astype(np.float32).astype(np.float64)
    scores[0, 0] = 1e200
    scores[4, 4] = 1e-200
    for from_exact in (True, False):
        result = solve_at_most(scores, nm_pattern(2, 4), from_exact=from_exact)
        assert result.status.tolist() == [TOO_WIDE, SOLVED, SOLVED, SOLVED_TRUNCATED]
        assert set(result.kept_exact) == {0, 3}
    _assert_kernel_is_readable(scores, 2, 4)


def test_gap_uses_the_kernel_optimum():
    rng = np.random.default_rng(11)
    scores = np.abs(rng.standard_normal((32, 32))).astype(np.float32)
    greedy = transposable_mask(scores, 4, 8, method="greedy")
    gap = optimality_gap(scores, greedy, 4, 8, fill="at_most")
    expected = []
    for (tile_row, tile_column, tile), best in zip(
        iter_tiles(scores, 8), _reference_optimum(scores, 4, 8), strict=True
    ):
        kept = greedy[tile_row * 8 : tile_row * 8 + 8, tile_column * 8 : tile_column * 8 + 8]
        expected.append(best - sum((Fraction(float(x)) for x in tile[kept]), Fraction(0)))
    np.testing.assert_array_equal(gap.per_tile.ravel(), [float(g) for g in expected])
    assert gap.total == float(sum(expected, Fraction(0)))
    assert (gap.per_tile >= 0).all()


def test_readable_duals_and_kernel_duals_both_certify():
    tile = [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    kept, u, v = flow.solve_tile_at_most(tile, 2)
    assert flow.certifies_optimal_at_most(tile, kept, 2, u, v)
    certificate = transposable_certificate(np.array(tile, dtype=np.float32), 2, 4, fill="at_most")
    np.testing.assert_array_equal(certificate.mask, np.array(kept))
    assert flow.certifies_optimal_at_most(
        tile, kept, 2, certificate.row_potentials[:, 0].tolist(),
        certificate.column_potentials[0].tolist(),
    )  # fmt: skip


def test_numba_disable_jit_runs_the_same_kernel():
    code = (
        "import numpy as np\n"
        "from nmref.transposable import transposable_mask, transposable_mask_reference\n"
        "rng = np.random.default_rng(0)\n"
        "for n, m in ((2, 4), (3, 6)):\n"
        "    s = rng.integers(-2, 3, (2 * m, 2 * m)).astype(np.float32)\n"
        "    a = transposable_mask(s, n, m, fill='at_most')\n"
        "    b = transposable_mask_reference(s, n, m, fill='at_most')\n"
        "    assert (a == b).all(), (n, m)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_m_4_at_most_from_the_enumeration_start_equals_the_other_paths(n, dtype):
    """m <= 4: the at-most kernel starts from the enumeration's exactly-n mask with duals
    that certify nothing, so Bellman-Ford decides every tile (48 tiles of each kind); same masks as the at-most
    successive shortest paths alone, as brute force and as the flow kernel's start (the
    one certificates use), serially and in parallel."""
    rng = np.random.default_rng(40 + n)
    shape = (8, 4 * 24)
    noise = rng.standard_normal(shape)
    for case in (
        np.abs(noise),
        noise,
        noise - 1.5,  # many lines keep fewer than n
        np.round(noise * 2),  # tie-heavy
        rng.integers(-1, 2, shape),
        np.zeros(shape),
    ):
        scores = np.ascontiguousarray(case, dtype=dtype)
        pattern = nm_pattern(n, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # brute force runs in Python
            expected = solve_at_most(scores, pattern, method="brute").mask
        for parallel in (False, True):
            np.testing.assert_array_equal(
                solve_at_most(scores, pattern, parallel=parallel).mask, expected
            )
            np.testing.assert_array_equal(
                solve_at_most(scores, pattern, parallel=parallel, from_exact=False).mask,
                expected,
            )
        with_duals = solve_at_most(scores, pattern, potentials=True)  # the flow kernel's start
        np.testing.assert_array_equal(with_duals.mask, expected)


@pytest.mark.parametrize(("n", "m"), [(2, 8), (4, 8), (8, 16), (16, 32)])
def test_dropping_units_from_the_exact_optimum_equals_the_at_most_shortest_paths(n, m):
    """Tiles whose exactly-n optimum a dual shift cannot certify start from it and drop
    units along shortest sink-to-source paths while that gains (spec T2, fast kernel):
    same masks and exact kept sums as the at-most successive shortest paths from zero,
    on signed, shifted and tie-heavy scores where keeping fewer is often better."""
    rng = np.random.default_rng(50 + m + n)
    size = 4 * m
    for scores in (
        rng.standard_normal((size, size)).astype(np.float32),
        (rng.standard_normal((size, size)) - 0.5).astype(np.float32),
        rng.integers(-2, 3, (size, size)).astype(np.float32),
        np.abs(rng.standard_normal((size, size))),
    ):
        started = solve_at_most(scores, nm_pattern(n, m))
        alone = solve_at_most(scores, nm_pattern(n, m), from_exact=False)
        np.testing.assert_array_equal(started.mask, alone.mask)
        np.testing.assert_array_equal(started.kept_sum, alone.kept_sum)
        if scores.dtype == np.float32 and scores.min() < 0:
            # Signed scores: keeping fewer is strictly better on some tiles, so the
            # dropping path ran there.
            assert (started.kept_sum > transposable_optimum(scores, n, m)).any()


def test_dropping_units_reaches_the_at_most_optimum_by_itself():
    """_cancel_toward_fewer alone (no Bellman-Ford behind it, which would hide a short
    stop by sending the tile to the slow path) ends at the at-most optimum of every tile:
    its kept sum equals the readable solver's, and it keeps at most n per line."""
    from nmref.transposable import _at_most_kernels as kernels
    from nmref.transposable._driver import solve_exact

    n, m = 4, 8
    rng = np.random.default_rng(77)
    scores = rng.integers(-6, 7, (4 * m, 4 * m)).astype(np.float64)
    exact = solve_exact(scores, nm_pattern(n, m), method="flow", potentials=True)
    tiles_across = scores.shape[1] // m
    u_all = exact.row_potentials.reshape(-1, m, tiles_across).transpose(0, 2, 1).reshape(-1, m)
    v_all = exact.column_potentials.reshape(-1, m)
    dropped_any = False
    for t, (tile_row, tile_column, tile) in enumerate(iter_tiles(scores, m)):
        units, exponent = exact_integer_tile(tile)
        assert exponent == 0  # integer scores: units are the scores
        w = np.array(units, dtype=np.int64).ravel()
        r0, c0 = tile_row * m, tile_column * m
        kept = exact.mask[r0 : r0 + m, c0 : c0 + m].astype(np.int64).ravel()
        u = u_all[t].astype(np.int64).copy()
        v = v_all[t].astype(np.int64).copy()
        assert kernels._certifies_exactly_n(w, m, kept, u, v)
        rows = np.full(m, n, dtype=np.int64)
        columns = np.full(m, n, dtype=np.int64)
        scratch = [np.zeros(2 * m + 2, dtype=np.int64) for _ in range(4)]
        assert kernels._cancel_toward_fewer(w, m, n, kept, rows, columns, u, v, *scratch)
        grid = kept.reshape(m, m)
        assert (grid.sum(axis=1) == rows).all() and (grid.sum(axis=0) == columns).all()
        assert (rows <= n).all() and (columns <= n).all()
        assert int((w * kept).sum()) == _readable_at_most_total(units, n)
        dropped_any |= bool(rows.sum() < n * m)
    assert dropped_any


def _readable_at_most_total(units, n) -> int:
    from nmref.transposable import flow

    kept, _, _ = flow.solve_tile_at_most(units, n)
    return sum(
        x
        for row, keep in zip(units, kept, strict=True)
        for x, k in zip(row, keep, strict=True)
        if k
    )
