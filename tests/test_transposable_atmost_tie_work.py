"""The at-most tie pass does O(m^4) work, not a re-solve per tied entry (issue 37).

Near-tie 16x16 float64 tiles (values 1 ulp apart) are too wide for the kernels' int64 units
and go to the readable Python-int solver; its tie pass re-solved a flow per tight entry
(O(n m^5): 5760 Dijkstras, 0.6-1.6 s per tile). These tests count the work instead of
timing it, and check that the pass without re-solves returns the oracle pass's mask, bit
for bit (spec T3, "At most n").
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.patterns import check_pattern
from nmref.transposable import flow, ties, transposable_mask, transposable_mask_reference
from nmref.transposable._driver import solve_at_most
from nmref.transposable._kernel_contract import TOO_WIDE
from nmref.transposable.tiles import exact_integer_tile

# Steps of 1 ulp (0..3) of one near-tie 16x16 tile, written out (seeded draw, rng 2037).
STEPS = np.array(
    [
        [int(x) for x in row]
        for row in [
            "3331030022201212", "0220223222210220", "3331003222212000", "2311031122233012",
            "3232233332302012", "2102220323112102", "2123121112223330", "0222310032201311",
            "1220322233133230", "2022000210313110", "1210223131013300", "0301101202100232",
            "0122302200231111", "3302203210311312", "2131202231132330", "2111132132220020",
        ]
    ]
)  # fmt: skip
NEAR_TIE_TILES = {
    scale: scale + STEPS * np.spacing(scale) for scale in (1e-12, 1.0, 1e12)
}  # values 1 ulp apart, spans of 1e-12 to 1e12


def _counted(function):
    """``function`` that counts its calls in ``.calls`` (a plain function, so that it
    binds as a method when patched onto a class)."""

    def counted(*args, **kwargs):
        counted.calls += 1  # type: ignore[attr-defined]
        return function(*args, **kwargs)

    counted.calls = 0  # type: ignore[attr-defined]
    return counted


def _oracle_mask(units, n):
    """The oracle pass (a re-solve per tight entry) on the readable solver's optimum."""
    m = len(units)
    kept = flow.successive_shortest_paths_at_most(units, [n] * m, [n] * m)
    optimum = sum(units[i][j] for i in range(m) for j in range(m) if kept[i][j])
    u, v = flow.at_most_duals(units, kept, n)
    return np.array(flow.canonical_at_most(units, n, u, v, optimum))


@pytest.mark.parametrize("scale", sorted(NEAR_TIE_TILES))
@pytest.mark.parametrize("n", [2, 8, 12])
def test_near_tie_16x16_at_most_tiles_take_no_re_solves(monkeypatch, scale, n):
    """Issue 37: 0.6-1.6 s per tile in the tie pass's re-solves. Now at most ``n m + 1``
    Dijkstras (the successive shortest paths themselves) and at most one tie search per
    entry (each O(m^2) on ``2m + 1`` nodes): O(n m^3 + m^4) per tile."""
    tile = NEAR_TIE_TILES[scale]
    m = 16
    # The tile does reach the Python-int solver (the kernels hand it back).
    assert solve_at_most(tile, check_pattern(n, m), sums=False).status[0] == TOO_WIDE
    dijkstras = _counted(flow._Network.shortest_paths)
    searches = _counted(ties._alternating_path_at_most)
    monkeypatch.setattr(flow._Network, "shortest_paths", dijkstras)
    monkeypatch.setattr(ties, "_alternating_path_at_most", searches)
    mask = transposable_mask(tile, n, m, fill="at_most")
    assert dijkstras.calls <= n * m + 1  # the oracle pass: thousands (5760 at 8:16)
    assert searches.calls <= m * m
    assert (mask.sum(axis=0) <= n).all() and (mask.sum(axis=1) <= n).all()
    # Positive near-constant scores: every line full (keeping fewer loses a whole score).
    assert mask.sum() == n * m


def test_near_tie_16x16_at_most_tile_equals_the_oracle_pass():
    tile = NEAR_TIE_TILES[1.0]
    units, _ = exact_integer_tile(tile)
    np.testing.assert_array_equal(
        transposable_mask(tile, 2, 16, fill="at_most"), _oracle_mask(units, 2)
    )


def _near_tie_tile(rng: np.random.Generator, m: int, kind: int) -> np.ndarray:
    scale = [1e-12, 1.0, 1e12][kind % 3]
    tile = scale + rng.integers(0, 4, (m, m)) * np.spacing(scale)
    if kind >= 3:  # signed, with zeros and a far smaller value: duals at 0, lines with room
        tile *= rng.choice([-1.0, 1.0, 1.0], (m, m))
        tile[rng.random((m, m)) < 0.25] = 0.0
        tile[rng.random((m, m)) < 0.1] = scale * 1e-12
    return tile


@pytest.mark.parametrize("m", [4, 6, 8])
def test_fast_tie_pass_equals_the_oracle_pass_on_near_tie_tiles(m):
    rng = np.random.default_rng(m)
    for trial in range(12):
        tile = _near_tie_tile(rng, m, trial % 6)
        units, _ = exact_integer_tile(tile)
        for n in range(m + 1):
            expected = _oracle_mask(units, n)
            np.testing.assert_array_equal(flow.solve_tile_at_most(units, n)[0], expected)
            np.testing.assert_array_equal(transposable_mask(tile, n, m, fill="at_most"), expected)


@given(
    m=st.integers(1, 6),
    data=st.data(),
)
def test_fast_tie_pass_equals_the_oracle_pass_on_tie_heavy_integers(m, data):
    n = data.draw(st.integers(0, m))
    values = data.draw(st.lists(st.integers(-2, 3), min_size=m * m, max_size=m * m))
    units = [values[i * m : (i + 1) * m] for i in range(m)]
    kept = flow.successive_shortest_paths_at_most(units, [n] * m, [n] * m)
    u, v = flow.at_most_duals(units, kept, n)
    fast = ties.canonical_at_most_optimum(units, kept, u, v, n)
    np.testing.assert_array_equal(fast, _oracle_mask(units, n))
    assert flow.certifies_optimal_at_most(units, fast, n, u, v)


def test_the_readable_reference_takes_the_fast_pass_too(monkeypatch):
    """``transposable_mask_reference(..., fill="at_most")`` runs the same solver."""
    searches = _counted(ties._alternating_path_at_most)
    monkeypatch.setattr(ties, "_alternating_path_at_most", searches)
    oracle = _counted(flow._forced_optimum)
    monkeypatch.setattr(flow, "_forced_optimum", oracle)
    tile = NEAR_TIE_TILES[1e12][:8, :8]
    transposable_mask_reference(tile, 4, 8, fill="at_most")
    assert oracle.calls == 0 and searches.calls <= 64
