"""Transposable masks on the torch path against independent oracles (specs/transposable.md
T1, T3-T5), and against nmref.transposable bit for bit when that module is present."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.testing.strategies import weights

torch = pytest.importorskip("torch")
from nmsim.torch import transposable as tt  # noqa: E402
from nmsim.torch.adapters import torch_dtype  # noqa: E402


def _exact(value) -> Fraction:
    return (
        Fraction(float(value)) if isinstance(value, float | np.floating) else Fraction(int(value))
    )


def oracle_tile(tile: np.ndarray, n: int) -> np.ndarray:
    """All m x m 0/1 matrices with row and column sums n; the max of (exact sum, keep bits)."""
    m = tile.shape[0]
    values = [[_exact(v) for v in row] for row in tile.tolist()]
    best_key, best = None, None
    for rows in itertools.product(itertools.combinations(range(m), n), repeat=m):
        columns = [0] * m
        for row in rows:
            for j in row:
                columns[j] += 1
        if any(c != n for c in columns):
            continue
        keep = np.zeros((m, m), dtype=bool)
        for i, row in enumerate(rows):
            keep[i, list(row)] = True
        total = sum((values[i][j] for i in range(m) for j in range(m) if keep[i, j]), Fraction(0))
        key = (total, tuple(keep.ravel().tolist()))  # ties: greatest row-major keep bits
        if best_key is None or key > best_key:
            best_key, best = key, keep
    return best


def oracle_greedy_tile(tile: np.ndarray, n: int, prune_form: bool) -> np.ndarray:
    m = tile.shape[0]
    flat = [_exact(v) for v in tile.ravel().tolist()]
    order = sorted(range(m * m), key=lambda k: (-flat[k], k))
    rows, columns = [0] * m, [0] * m
    if prune_form:
        kept = np.ones(m * m, dtype=bool)
        for k in reversed(order):
            i, j = divmod(k, m)
            if rows[i] < m - n or columns[j] < m - n:
                kept[k] = False
                rows[i] += 1
                columns[j] += 1
    else:
        kept = np.zeros(m * m, dtype=bool)
        for k in order:
            i, j = divmod(k, m)
            if rows[i] < n and columns[j] < n:
                kept[k] = True
                rows[i] += 1
                columns[j] += 1
    return kept.reshape(m, m)


def oracle(scores: np.ndarray, n: int, m: int, method: str) -> np.ndarray:
    mask = np.zeros(scores.shape, dtype=bool)
    for a in range(0, scores.shape[0], m):
        for b in range(0, scores.shape[1], m):
            tile = scores[a : a + m, b : b + m]
            if method == "exact":
                mask[a : a + m, b : b + m] = oracle_tile(tile, n)
            else:
                mask[a : a + m, b : b + m] = oracle_greedy_tile(tile, n, method == "greedy-prune")
    return mask


@st.composite
def tiled(draw, max_m=4):
    m = draw(st.integers(1, max_m))
    n = draw(st.integers(0, m))
    dtype = draw(st.sampled_from(["float16", "bfloat16", "float32", "float64", "int8"]))
    kind = draw(st.sampled_from(["tie_heavy", "tie_free", "zeros", "random"]))
    shape = (m * draw(st.integers(1, 2)), m * draw(st.integers(1, 2)))
    return draw(weights(shape, dtype_name=dtype, kind=kind)), n, m, dtype


def _run(scores, n, m, dtype, method):
    tensor = torch.from_numpy(scores).to(torch_dtype(dtype))
    return tt.transposable_mask(tensor, n, m, method=method).numpy()


@pytest.mark.slow
@given(tiled(), st.sampled_from(["exact", "greedy", "greedy-prune"]))
def test_equals_the_independent_oracles(case, method):
    scores, n, m, dtype = case
    scores = (
        np.where(np.isfinite(scores), scores, 0).astype(scores.dtype)
        if scores.dtype.kind == "f"
        else scores
    )
    got = _run(scores, n, m, dtype, method)
    np.testing.assert_array_equal(got, oracle(scores, n, m, method))
    assert tt.is_transposable(torch.from_numpy(got), n, m, exact=method == "exact")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_exponent_spreads_take_the_exact_host_path(dtype):
    """1e-30 next to 1.0: units would need > 49 bits, so the tile is solved with rationals."""
    scores = torch.tensor(
        [
            [1.0, 1.0, 1e-30, 0.0],
            [1e-30, 1.0, 1.0, 0.0],
            [0.0, 1e-30, 1.0, 1.0],
            [1.0, 0.0, 1e-30, 1.0],
        ],
        dtype=dtype,
    )
    _, fits = tt._exact_units(tt._to_tiles(scores, 4), 49)
    assert not bool(fits.any())
    got = tt.transposable_mask(scores, 2, 4).numpy()
    np.testing.assert_array_equal(got, oracle(scores.numpy(), 2, 4, "exact"))
    # float64 noise: 53-bit significands rarely fit; the answer is still exact.
    noise = torch.from_numpy(np.random.default_rng(0).standard_normal((8, 8)))
    np.testing.assert_array_equal(
        tt.transposable_mask(noise.abs(), 2, 4).numpy(), oracle(noise.abs().numpy(), 2, 4, "exact")
    )


def test_published_greedy_tile_keeps_seven_and_exact_keeps_eight():
    tile = torch.tensor([[3.0, 12, 4, 11], [1, 5, 8, 6], [15, 13, 7, 10], [14, 9, 2, 16]])
    greedy = tt.transposable_mask(tile, 2, 4, method="greedy")
    assert greedy.tolist() == [[0, 1, 0, 1], [0, 0, 1, 0], [1, 1, 0, 0], [1, 0, 0, 1]]
    assert int(greedy.sum()) == 7 and tt.is_transposable(greedy, 2, 4, exact=False)
    assert int(tt.transposable_mask(tile, 2, 4).sum()) == 8
    assert tt.transposable_mask(torch.zeros(4, 4), 2, 4).tolist() == [
        [1, 1, 0, 0],
        [1, 1, 0, 0],
        [0, 0, 1, 1],
        [0, 0, 1, 1],
    ]


def test_patterns_are_canonical_and_counted():
    assert [len(tt.transposable_patterns(n, 4)) for n in range(5)] == [1, 24, 90, 24, 1]
    bits = tt.transposable_patterns(2, 4).reshape(90, 16).int().tolist()
    assert bits == sorted(bits, reverse=True)  # descending row-major keep bits


def test_errors():
    with pytest.raises(ValueError, match="multiples of m=4"):
        tt.transposable_mask(torch.zeros(4, 6), 2, 4)
    with pytest.raises(ValueError, match="NaN"):
        tt.transposable_mask(torch.full((4, 4), float("nan")), 2, 4)
    with pytest.raises(ValueError, match="inf"):
        tt.transposable_mask(torch.full((4, 4), float("inf")), 2, 4)
    with pytest.raises(ValueError, match="m <= 5"):
        tt.transposable_mask(torch.zeros(8, 8), 4, 8, method="brute")
    noise = torch.from_numpy(np.random.default_rng(0).standard_normal((8, 8))).abs()
    with pytest.raises(ValueError, match="pass float32"):
        tt.transposable_mask(noise, 4, 8)
    with pytest.raises(ValueError, match="method="):
        tt.transposable_mask(torch.zeros(4, 4), 2, 4, method="flow")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["exact", "greedy", "greedy-prune"])
@pytest.mark.parametrize("m", [4, 8])
def test_equals_nmref_transposable_when_present(method, m):
    reference = pytest.importorskip("nmref.transposable")
    rng = np.random.default_rng(3)
    for scores in (
        rng.integers(0, 3, (2 * m, 2 * m)).astype(np.float32),
        np.abs(rng.standard_normal((2 * m, 3 * m))).astype(np.float32),
        rng.integers(-2, 3, (m, 2 * m)).astype(np.float16),
    ):
        for n in range(m + 1):
            expected = reference.transposable_mask(scores, n, m, method=method)
            got = tt.transposable_mask(torch.from_numpy(scores), n, m, method=method).numpy()
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("layer", ["linear", "conv"])
def test_transposable_layers_follow_the_per_gemm_contract(layer):
    """Y and dX use the same transposable mask E (so dX's GEMM is N:M too); dW is SR-STE."""
    import nmsim.torch as nt

    generator = torch.Generator().manual_seed(0)
    if layer == "linear":
        module = nt.SparseLinear(
            8, 8, bias=False, method="transposable", decay=0.25, dtype=torch.float64
        )
        inputs = torch.randint(-3, 4, (5, 8), generator=generator).double().requires_grad_(True)
    else:
        module = nt.SparseConv2d(
            8, 8, 1, bias=False, method="transposable", decay=0.25, dtype=torch.float64
        )
        inputs = (
            torch.randint(-3, 4, (5, 8, 1, 1), generator=generator).double().requires_grad_(True)
        )
    with torch.no_grad():
        module.weight.copy_(torch.randint(-3, 4, module.weight.shape, generator=generator).double())
    weight = module.weight.detach().reshape(8, 8)
    mask = tt.transposable_mask(weight.abs(), 2, 4)
    assert torch.equal(module.mask().reshape(8, 8), mask)
    assert tt.is_transposable(mask, 2, 4)
    out = module(inputs)
    grad_out = torch.randint(-3, 4, out.shape, generator=generator).double()
    out.backward(grad_out)
    x, dy = inputs.detach().reshape(5, 8), grad_out.reshape(5, 8)
    sparse = torch.where(mask, weight, 0.0)
    assert torch.equal(out.detach().reshape(5, 8), x @ sparse.T)
    assert torch.equal(inputs.grad.reshape(5, 8), dy @ sparse)
    expected = torch.where(mask, dy.T @ x, dy.T @ x + 0.25 * weight)
    assert torch.equal(module.weight.grad.reshape(8, 8), expected)


def test_sparsify_transposable_skips_layers_whose_outputs_do_not_fill_tiles():
    import nmsim.torch as nt

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 6))
    result = nt.sparsify(model, "transposable", "2:4")
    assert result.replaced == ("0",)
    assert result.skipped == (("1", "6 output channels: not a multiple of m=4"),)
    with pytest.raises(ValueError, match="out=6 must be a multiple of m"):
        nt.SparseLinear(8, 6, method="transposable")


def _flow_mask(scores: torch.Tensor, n: int, m: int) -> torch.Tensor:
    tiles = tt._to_tiles(scores, m)
    return tt._from_tiles(tt._exact_by_flow(tiles, n, m), tuple(scores.shape), m)


@pytest.mark.slow
@given(tiled(max_m=4))
def test_flow_solver_equals_the_oracle_on_small_tiles(case):
    """The lockstep min-cost-flow solver (used for m > 4) on tiles the oracle can enumerate."""
    scores, n, m, dtype = case
    if scores.dtype.kind == "f":
        scores = np.where(np.isfinite(scores), scores, 0).astype(scores.dtype)
    tensor = torch.from_numpy(scores).to(torch_dtype(dtype))
    _, fits = tt._exact_units(tt._to_tiles(tensor, m), 52 - 4)
    if not bool(fits.all()):
        return  # the flow solver refuses such tiles (tested in test_errors)
    np.testing.assert_array_equal(_flow_mask(tensor, n, m).numpy(), oracle(scores, n, m, "exact"))


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(0, 1), (1, 2), (2, 4), (4, 8)])
def test_flow_solver_on_subnormal_float64_tiles(n, m):
    # Regression (hypothesis: [[5e-324]] with n=0 kept its entry): a subnormal tile's units
    # are x * 2**1074, and 2**1074 alone overflows float64.
    rng = np.random.default_rng(m)
    scores = rng.integers(1, 2**40, (2 * m, 2 * m)) * 5e-324
    tensor = torch.from_numpy(scores)
    got = _flow_mask(tensor, n, m).numpy()
    reference = pytest.importorskip("nmref.transposable")
    np.testing.assert_array_equal(got, reference.transposable_mask(scores, n, m))
    if m <= 4:  # the brute-force oracle enumerates C(m, n)**m row choices
        np.testing.assert_array_equal(got, oracle(scores, n, m, "exact"))
    np.testing.assert_array_equal(tt.transposable_mask(tensor, n, m).numpy(), got)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3])
def test_flow_equals_brute_force_for_m5_on_tie_heavy_and_random_tiles(n):
    rng = np.random.default_rng(n)
    for scores in (
        rng.integers(0, 3, (10, 15)).astype(np.float32),
        np.abs(rng.standard_normal((10, 10))).astype(np.float32),
        rng.integers(-2, 3, (5, 10)).astype(np.float32),
    ):
        tensor = torch.from_numpy(scores)
        brute = tt.transposable_mask(tensor, n, 5, method="brute")
        assert torch.equal(_flow_mask(tensor, n, 5), brute)
        assert torch.equal(tt.transposable_mask(tensor, n, 5), brute)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(4, 8), (2, 8), (3, 6), (8, 16)])
def test_flow_reaches_the_lp_optimum_for_larger_m(n, m):
    """The LP over the row/column-sum polytope is integral (totally unimodular): same optimum."""
    from scipy.optimize import linprog

    rng = np.random.default_rng(m + n)
    scores = np.abs(rng.standard_normal((2 * m, m))).astype(np.float32)
    mask = tt.transposable_mask(torch.from_numpy(scores), n, m).numpy()
    assert tt.is_transposable(torch.from_numpy(mask), n, m)
    for a in range(0, 2 * m, m):
        tile = scores[a : a + m].astype(np.float64)
        rows = np.kron(np.eye(m), np.ones(m))
        columns = np.kron(np.ones(m), np.eye(m))
        result = linprog(
            -tile.ravel(),
            A_eq=np.vstack([rows, columns]),
            b_eq=np.full(2 * m, n),
            bounds=(0, 1),
            method="highs",
        )
        kept_sum = float(tile[mask[a : a + m]].sum())
        assert kept_sum == pytest.approx(-result.fun, rel=1e-12, abs=1e-12)


@pytest.mark.slow
def test_flow_returns_the_canonical_optimum_on_ties():
    """All-equal 8x8 tile: every valid mask is optimal; the canonical one keeps the lowest
    flat indices first (block-diagonal pattern)."""
    mask = tt.transposable_mask(torch.ones(8, 8), 4, 8)
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[:4, :4] = expected[4:, 4:] = True
    assert torch.equal(mask, expected)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["linear", "channels", "flat"])
@pytest.mark.parametrize("method", ["exact", "greedy"])
def test_weight_masks_equal_nmref_for_every_layout(layout, method):
    reference = pytest.importorskip("nmref.transposable")
    from nmsim.torch.functions import transposable_weight_mask

    rng = np.random.default_rng(7)
    shape = (
        (8, 16) if layout == "linear" else (8, 8, 3, 2) if layout == "channels" else (8, 4, 2, 2)
    )
    for m in (4, 8):
        weight = rng.integers(-3, 4, shape).astype(np.float32)
        expected = reference.transposable_weight_mask(
            weight, m // 2, m, layout=layout, method=method
        )
        got = transposable_weight_mask(
            torch.from_numpy(weight), m // 2, m, layout=layout, method=method
        )
        np.testing.assert_array_equal(got.numpy(), expected)


def test_accepts_exactly_the_torch_mask_dtypes():
    """The transposable path accepts the same dtypes as nmsim.torch.masks (one shared set)."""
    from nmsim.torch.masks import SUPPORTED_DTYPES

    for dtype in SUPPORTED_DTYPES:
        mask = tt.transposable_mask(torch.ones(4, 4, dtype=dtype), 2, 4)
        assert int(mask.sum()) == 8
    with pytest.raises(TypeError, match="scores must be bool, integer or float"):
        tt.transposable_mask(torch.ones(4, 4, dtype=torch.complex64), 2, 4)


# ---- fill="at_most" (issue 16 item 3) ---------------------------------------------------


@pytest.mark.parametrize("method", ["exact", "brute"])
def test_at_most_fill_equals_nmref_bit_for_bit(method):
    reference = pytest.importorskip("nmref.transposable")
    rng = np.random.default_rng(16)
    patterns = [(2, 4), (1, 4), (3, 4), (0, 4), (4, 4)]
    if method == "exact":
        patterns += [(4, 8), (3, 8), (5, 6)]
    for n, m in patterns:
        for scores in (
            rng.integers(-2, 3, (2 * m, 2 * m)).astype(np.float32),  # tie-heavy, signed
            rng.standard_normal((m, 2 * m)).astype(np.float32),
            rng.integers(0, 2, (2 * m, m)).astype(np.int64),
        ):
            expected = reference.transposable_mask(scores, n, m, method=method, fill="at_most")
            got = tt.transposable_mask(
                torch.from_numpy(scores), n, m, method=method, fill="at_most"
            )
            assert got.dtype == torch.bool and got.device.type == "cpu"
            np.testing.assert_array_equal(got.numpy(), expected)
            assert tt.is_transposable(got, n, m, exact=False)


def test_at_most_fill_on_every_mask_dtype_and_the_issue_tile():
    reference = pytest.importorskip("nmref.transposable")
    from nmsim.torch.masks import SUPPORTED_DTYPES

    tile = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    expected = reference.transposable_mask(tile.numpy(), 2, 4, fill="at_most")
    for dtype in SUPPORTED_DTYPES:
        got = tt.transposable_mask(tile.to(dtype), 2, 4, fill="at_most")
        np.testing.assert_array_equal(got.numpy(), expected)
    # bfloat16 values that float16 cannot hold reach the host exactly (as float32).
    wide = torch.tensor([[3e38, 1e-30, 2.0, 1.0]] * 4, dtype=torch.bfloat16)
    got = tt.transposable_mask(wide, 2, 4, fill="at_most")
    expected = reference.transposable_mask(wide.to(torch.float32).numpy(), 2, 4, fill="at_most")
    np.testing.assert_array_equal(got.numpy(), expected)


def test_at_most_fill_errors():
    with pytest.raises(ValueError, match="fill="):
        tt.transposable_mask(torch.zeros(4, 4), 2, 4, fill="at-most")
    with pytest.raises(ValueError, match="fill='at_most' applies to method='exact' or 'brute'"):
        tt.transposable_mask(torch.zeros(4, 4), 2, 4, method="greedy", fill="at_most")
    with pytest.raises(ValueError, match="NaN"):
        tt.transposable_mask(torch.full((4, 4), float("nan")), 2, 4, fill="at_most")


def test_the_exact_flow_never_takes_min_with_indices(monkeypatch):
    # Issue 37: `Tensor.min(dim)` opens a CPU parallel region even for (tiles, 8, 8): on a busy
    # 2-core machine each of its ~36,000 calls took 25 ms and `nmsim verify`'s exact rows ran
    # 400 s each (amin + argmin: 10 us). The same masks, with min(dim) refused.
    scores = torch.from_numpy(np.random.default_rng(7).random((16, 16), dtype=np.float32))
    expected = tt.transposable_mask(scores, 4, 8)
    plain_min = torch.Tensor.min

    def no_indices(self, *args, **kwargs):
        if args or "dim" in kwargs:
            raise AssertionError("Tensor.min(dim): use amin and argmin")
        return plain_min(self)

    monkeypatch.setattr(torch.Tensor, "min", no_indices)
    got = tt.transposable_mask(scores, 4, 8)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    from nmref.transposable import transposable_mask

    np.testing.assert_array_equal(got.numpy(), transposable_mask(scores.numpy(), 4, 8))
