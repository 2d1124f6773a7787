"""Tests for transposable N:M masks (specs/transposable.md).

Contracts, each checked against every implementation it applies to:
validity, optimality against independent solvers (an itertools brute force
written here, scipy HiGHS, networkx), the canonical tie rule (masks, not only
objectives), greedy bounds, invariances, certificates, errors, golden vectors.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import itertools
import json
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.masks import nm_mask
from nmref.patterns import check_pattern
from nmref.transposable import (
    exact_integer_tile,
    flow,
    is_transposable,
    optimality_gap,
    transposable_certificate,
    transposable_mask,
    transposable_mask_reference,
    transposable_optimum,
    transposable_patterns,
    transposable_weight_mask,
    verify_certificate,
)
from nmref.transposable._driver import solve_exact as _solve_exact  # the flow kernel on its own
from nmref.transposable._enumeration_kernels import float64_exact_binades
from nmref.transposable._flow_start import START_LANES
from nmref.transposable._kernel_contract import TOO_WIDE
from nmref.transposable._selection_networks import _selection_network
from nmref.transposable._small import kernels_only
from nmref.transposable.patterns import pattern_table

GOLDEN = importlib.resources.files("nmref.testing") / "data" / "golden" / "transposable.json"


@pytest.fixture(autouse=True)
def _kernels_for_every_call():
    """These tests pin the kernels: small calls would otherwise take the NumPy path, which
    tests/test_transposable_small.py checks against them."""
    with kernels_only():
        yield


EXACT_METHODS = ("exact", "brute")


# ----------------------------------------------------------------------------
# Independent oracles
# ----------------------------------------------------------------------------


def lexmax_brute(tile, n: int) -> tuple[Fraction, np.ndarray]:
    """Best (kept sum, then lexicographically greatest row-major keep bits), by itertools."""
    m = len(tile)
    values = [
        [
            Fraction(float(x)) if isinstance(x, float | np.floating) else Fraction(int(x))
            for x in row
        ]
        for row in np.asarray(tile).tolist()
    ]
    best = None
    for rows in itertools.product(itertools.combinations(range(m), n), repeat=m):
        counts = [0] * m
        for chosen in rows:
            for j in chosen:
                counts[j] += 1
        if any(c != n for c in counts):
            continue
        bits = tuple(int(j in rows[i]) for i in range(m) for j in range(m))
        total = sum(values[i][j] for i in range(m) for j in rows[i])
        if best is None or (total, bits) > best:
            best = (total, bits)
    assert best is not None
    return best[0], np.array(best[1], dtype=bool).reshape(m, m)


def tile_values(array: np.ndarray, m: int):
    for r in range(0, array.shape[0], m):
        for c in range(0, array.shape[1], m):
            yield r // m, c // m, array[r : r + m, c : c + m]


def kept_sum_exact(tile, kept) -> Fraction:
    units, exponent = exact_integer_tile(tile)
    m = len(units)
    total = sum(units[i][j] for i in range(m) for j in range(m) if kept[i, j])
    return Fraction(total) * Fraction(2) ** exponent


# ----------------------------------------------------------------------------
# Strategies: tie-heavy and generic score matrices for m <= 4
# ----------------------------------------------------------------------------


@st.composite
def score_matrices(draw, max_m: int = 4):
    m = draw(st.integers(1, max_m))
    n = draw(st.integers(0, m))
    tiles_down = draw(st.integers(1, 2))
    tiles_across = draw(st.integers(1, 2))
    shape = (m * tiles_down, m * tiles_across)
    kind = draw(st.sampled_from(["small-int", "binary", "float32", "float16", "float64", "signed"]))
    size = shape[0] * shape[1]
    if kind == "small-int":
        data = draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
        array = np.array(data, dtype=np.int32)
    elif kind == "binary":
        data = draw(st.lists(st.sampled_from([0.0, 0.5]), min_size=size, max_size=size))
        array = np.array(data, dtype=np.float32)
    elif kind == "float16":
        data = draw(st.lists(st.floats(0, 4, width=16), min_size=size, max_size=size))
        array = np.array(data, dtype=np.float16)
    elif kind == "signed":
        data = draw(st.lists(st.integers(-2, 2), min_size=size, max_size=size))
        array = np.array(data, dtype=np.int8)
    else:
        width = 32 if kind == "float32" else 64
        data = draw(st.lists(st.floats(-8, 8, width=width), min_size=size, max_size=size))
        array = np.array(data, dtype=np.float32 if width == 32 else np.float64)
    return array.reshape(shape), n, m


# ----------------------------------------------------------------------------
# Exactness and the canonical tie rule
# ----------------------------------------------------------------------------


@pytest.mark.slow
@given(score_matrices())
def test_every_exact_method_returns_the_canonical_mask(case):
    """exact == brute == readable exact == readable brute == itertools lexmax, bit for bit."""
    scores, n, m = case
    expected = np.zeros(scores.shape, dtype=bool)
    for tile_row, tile_column, tile in tile_values(scores, m):
        _, best = lexmax_brute(tile, n)
        expected[tile_row * m : (tile_row + 1) * m, tile_column * m : (tile_column + 1) * m] = best
    for method in EXACT_METHODS:
        np.testing.assert_array_equal(transposable_mask(scores, n, m, method=method), expected)
        np.testing.assert_array_equal(
            transposable_mask_reference(scores, n, m, method=method), expected
        )


@pytest.mark.slow
@given(score_matrices())
def test_flow_kernel_and_certificate_match_enumeration(case):
    """The Numba flow solver (used for m > 4 and certificates) gives the enumeration's mask."""
    scores, n, m = case
    expected = transposable_mask(scores, n, m)
    flow_mask = _solve_exact(np.asarray(scores), check_pattern(n, m), method="flow").mask
    np.testing.assert_array_equal(flow_mask, expected)
    try:
        certificate = transposable_certificate(scores, n, m)
    except ValueError as error:
        # Documented limit: a potential is a sum of scores, and a sum of float64 scores can need
        # more than 53 bits even on a narrow range (3 - 1.1 + ... at 2**-52 resolution). Only
        # float64 tiles or tiles spanning a wide range may hit it; narrower dtypes never do.
        assert "not representable in float64" in str(error)
        nonzero = np.abs(scores[scores != 0].astype(np.float64))
        assert scores.dtype == np.float64 or np.log2(nonzero.max()) - np.log2(nonzero.min()) > 20
        return
    np.testing.assert_array_equal(certificate.mask, expected)
    assert verify_certificate(scores, *certificate, n, m)


def test_certificate_of_a_narrow_float64_tile_with_many_units():
    # 1.1 needs 52 significand bits, so 4.0 is 2**54 units: exactly representable, and the
    # certificate must not be refused (found by hypothesis: "not representable in float64").
    scores = np.array([[0, 0, 0, 0], [0, 0, 4, 1.1]])
    for n in (0, 1, 2):
        certificate = transposable_certificate(scores, n, 2)
        np.testing.assert_array_equal(certificate.mask, transposable_mask(scores, n, 2))
        assert verify_certificate(scores, *certificate, n, 2)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_flow_kernel_equals_enumeration_on_many_tiles(n):
    """4096 tiles each of noise, int4-like quantised values, and bf16-like values."""
    rng = np.random.default_rng(n)
    noise = rng.standard_normal((256, 256)).astype(np.float32)
    quantised = np.round(noise * 2).clip(-8, 7).astype(np.float32)
    bfloat_like = (noise.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    for scores in (np.abs(noise), quantised, np.abs(quantised), bfloat_like):
        expected = transposable_mask(scores, n, 4, method="brute")
        flow_mask = _solve_exact(scores, check_pattern(n, 4), method="flow").mask
        np.testing.assert_array_equal(flow_mask, expected)
        np.testing.assert_array_equal(transposable_mask(scores, n, 4), expected)


def _exact_results_agree(first, second) -> None:
    """Same masks, kept sums and (where the kernels solved the tile) kept units."""
    np.testing.assert_array_equal(first.mask, second.mask)
    np.testing.assert_array_equal(first.kept_sum, second.kept_sum)
    assert first.kept_exact == second.kept_exact
    kernel_tiles = np.ones(len(first.kept_units), dtype=bool)
    kernel_tiles[list(first.kept_exact)] = False
    np.testing.assert_array_equal(first.kept_units[kernel_tiles], second.kept_units[kernel_tiles])
    np.testing.assert_array_equal(first.exponents[kernel_tiles], second.exponents[kernel_tiles])


def _2to4_float32_cases(seed: int, shape: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(shape).astype(np.float32)
    magnitudes = np.exp2(rng.uniform(-140, 100, shape)).astype(np.float32)  # incl. subnormals
    significands = rng.integers(2**23, 2**24, shape).astype(np.float64)
    spread = rng.choice([0, 25, 26], shape, p=[0.8, 0.1, 0.1])  # at and past the float64 limit
    cases = [
        np.abs(noise),
        noise,
        np.round(noise * 2).clip(-8, 7),  # int4-like: tie-heavy
        rng.integers(0, 2, shape),  # binary: ties everywhere
        np.zeros(shape),
        np.where(rng.random(shape) < 0.3, 0, np.abs(noise)),
        magnitudes,
        (noise.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32),  # bfloat16-like
        significands * np.exp2(-spread.astype(np.float64)),
    ]
    return [np.ascontiguousarray(case, dtype=np.float32) for case in cases]


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("shape", [(8, 4 * 7), (12, 4 * 101), (8, 4 * 300)])
def test_2to4_meet_in_the_middle_equals_the_pattern_scan(monkeypatch, shape, parallel):
    """2:4 float32 tiles: the meet-in-the-middle kernel returns what the 90-pattern scan does.

    Both take the first maximum of the canonical table on exact float64 sums, and hand the
    same tiles to the int64 path; shapes of 7, 101 and 300 tiles per tile row make blocks
    shorter than, and split across, the kernel's block of tiles.
    """
    pattern = check_pattern(2, 4)
    from nmref.transposable import _driver

    for scores in _2to4_float32_cases(sum(shape), shape):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # tiles too wide for int64 units
            monkeypatch.setattr(_driver, "_SCAN_2TO4", True)
            scanned = _solve_exact(scores, pattern, parallel=parallel)
            monkeypatch.setattr(_driver, "_SCAN_2TO4", False)
            met = _solve_exact(scores, pattern, parallel=parallel)
            with kernels_only():
                np.testing.assert_array_equal(transposable_mask(scores, 2, 4), met.mask)
        _exact_results_agree(scanned, met)
    bad = _2to4_float32_cases(1, shape)[0]
    bad[3, 5] = np.nan
    with pytest.raises(ValueError, match="scores"):
        _solve_exact(bad, pattern, parallel=parallel)


def test_meet_in_the_middle_pairs_are_the_pattern_table_in_order():
    """Every rows 0-1 pair, then every rows 2-3 pair of the slot it needs, both in table
    order, lists the 90 canonical patterns in canonical order, with their mask words: so
    the first maximum over that nesting is the first maximum of the table (spec T3)."""
    from nmref.transposable._meet_in_middle import meet_in_middle_tables

    choices, table = pattern_table(2, 4)[:2]
    lower, upper, lower_words, upper_words = meet_in_middle_tables()
    listed, masks = [], []
    for c0, c1, slot in upper:
        for c2, c3, lower_slot in lower:
            if lower_slot == slot:
                listed.append((c0, c1, c2, c3))
    np.testing.assert_array_equal(np.array(listed), table)
    for q, slot in enumerate(upper[:, 2]):
        for p in np.flatnonzero(lower[:, 2] == slot):
            words = np.array([upper_words[q], lower_words[p]], dtype=np.uint64)
            masks.append(words.view(np.uint8).reshape(4, 4).astype(bool))
    np.testing.assert_array_equal(np.array(masks), choices[table])


def _generate_kernels_script():
    path = Path(__file__).resolve().parents[1] / "scripts" / "generate_kernels.py"
    spec = importlib.util.spec_from_file_location("generate_kernels", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_generated_kernel_files_and_cache_digests_are_current():
    """Every generated kernel file is what its writer produces from today's tables, and
    every ``CACHE_DEPENDS`` digest matches its file (rerun
    ``python scripts/generate_kernels.py``)."""
    script = _generate_kernels_script()
    expected = script.expected_files()
    assert set(script.GENERATED) <= set(expected)
    for path, text in expected.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is out of date"


def test_the_generator_check_fails_on_a_stale_generated_file(monkeypatch, capsys):
    """``--check`` exits 1 when a generated file differs from its writer's output, and
    names the file; it writes nothing."""
    script = _generate_kernels_script()
    path = next(iter(script.GENERATED))
    writer = script.GENERATED[path]
    monkeypatch.setitem(script.GENERATED, path, lambda: writer() + "# edited\n")
    monkeypatch.setattr(sys, "argv", ["generate_kernels.py", "--check"])
    before = path.read_text(encoding="utf-8")
    assert script.main() == 1
    assert f"{path.name}: out of date" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == before


@pytest.mark.slow
@given(score_matrices())
def test_the_2to4_kernel_returns_the_canonical_mask(case):
    scores, _, _ = case
    scores = np.asarray(scores, dtype=np.float32)
    rows, columns = scores.shape
    scores = np.tile(scores, (4 // np.gcd(rows, 4), 4 // np.gcd(columns, 4)))
    expected = transposable_mask(scores, 2, 4, method="brute")
    with kernels_only():
        np.testing.assert_array_equal(transposable_mask(scores, 2, 4), expected)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("n", "m"), [(2, 4), (1, 4), (3, 4), (4, 4), (1, 3), (2, 3), (1, 2), (1, 1)]
)
def test_float32_enumeration_equals_the_int64_units_on_wide_and_odd_tiles(n, m):
    """float32 tiles are summed in float64 (T5): tiles too wide for that, with subnormals,
    zeros or mixed signs are redone on int64 units; float64 copies of the same values take
    the int64 path throughout, so masks and exact kept sums must agree tile for tile."""
    rng = np.random.default_rng(1000 + 10 * m + n)
    shape = (6 * m, 7 * m)  # 7 tiles across: blocks and parallel chunks split tile rows
    magnitudes = np.exp2(rng.uniform(-140, 100, shape)).astype(np.float32)  # incl. subnormals
    narrow = np.exp2(rng.uniform(-10, 10, shape)).astype(np.float32)
    signs = rng.choice([-1.0, 1.0], shape).astype(np.float32)
    zeros = rng.random(shape) < 0.2
    # Full 24-bit significands two exponents apart: at the float64 limit and one binade past.
    limit = float64_exact_binades(m)
    assert limit == {1: 28, 2: 27, 3: 25, 4: 25}[m]  # spec T5: 29 - max(1, ceil(log2(m*m)))
    significands = rng.integers(2**23, 2**24, shape).astype(np.float64)
    spread = rng.choice([0, limit, limit + 1], shape, p=[0.86, 0.07, 0.07])
    edge = (significands * np.exp2(-spread.astype(np.float64))).astype(np.float32)
    assert (edge.astype(np.float64) == significands * np.exp2(-spread.astype(np.float64))).all()
    for scores in (
        magnitudes * signs,
        np.where(zeros, 0, narrow),
        np.where(zeros, 0, magnitudes),
        edge,
        edge * signs,
    ):
        scores = np.ascontiguousarray(scores, dtype=np.float32)
        as_float64 = scores.astype(np.float64)
        expected = transposable_mask(as_float64, n, m)
        np.testing.assert_array_equal(transposable_mask(scores, n, m), expected)
        np.testing.assert_array_equal(transposable_mask(scores, n, m, parallel=True), expected)
        np.testing.assert_array_equal(transposable_mask(scores, n, m, method="brute"), expected)
        np.testing.assert_array_equal(
            transposable_optimum(scores, n, m), transposable_optimum(as_float64, n, m)
        )
        # The gap compares the solver's kept units with the mask's, exactly: a rounded
        # float64 sum would show as a nonzero gap of the optimal mask.
        gap = optimality_gap(scores, expected, n, m)
        assert gap.total == 0 and not gap.per_tile.any()
    with pytest.raises(ValueError, match="NaN"):
        bad = narrow.copy()
        bad[m, 2 * m] = np.nan
        transposable_mask(bad, n, m)


def _run_network(network, values):
    values = values.copy()
    for a, b in network:
        high = np.maximum(values[..., a], values[..., b])
        values[..., b] = np.minimum(values[..., a], values[..., b])
        values[..., a] = high
    return values


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 2, 4, 8, 16])
def test_selection_network_selects_on_every_0_1_input(size):
    """By the 0-1 principle, a comparator network that puts the k-th largest on wire k
    for all 2**size inputs of zeros and ones does so for every input."""
    inputs = (np.arange(2**size)[:, None] >> np.arange(size)) & 1
    expected = -np.sort(-inputs, axis=1)
    for wire in range(size):
        network = _selection_network(size, wire)
        assert network.shape[1] == 2 and (network[:, 0] < network[:, 1]).all()
        np.testing.assert_array_equal(_run_network(network, inputs)[:, wire], expected[:, wire])
    # Pruning only drops comparators: no selection needs more than Batcher's full sorting
    # network ((k^2 - k + 4) 2^(k-2) - 1 comparators for 2^k wires), the largest and the
    # smallest need a tournament of size - 1, and a middle wire fewer than the full network.
    if size >= 4:
        k = size.bit_length() - 1
        full = (k * k - k + 4) * 2 ** (k - 2) - 1
        lengths = [len(_selection_network(size, wire)) for wire in range(size)]
        assert max(lengths) <= full
        assert lengths[0] == lengths[-1] == size - 1
        if size >= 8:
            assert lengths[size // 2 - 1] < full


def test_selection_network_on_32_wires_and_ties():
    rng = np.random.default_rng(32)
    values = rng.integers(-3, 4, (2000, 32))
    expected = -np.sort(-values, axis=1)
    for wire in (0, 7, 15, 31):
        got = _run_network(_selection_network(32, wire), values)[:, wire]
        np.testing.assert_array_equal(got, expected[:, wire])


@pytest.mark.parametrize("size", [1, 2, 4, 8, 16, 32])
def test_unrolled_selection_networks_equal_the_sorted_wire(size):
    """The straight-line networks (up to 16 wires) put the same value on their wire as a
    sort does, on ties, extreme keys and every lane count; larger sizes have none."""
    from nmref.transposable._flow_start import BELOW_ALL
    from nmref.transposable._generated_networks import _select_unrolled
    from nmref.transposable._unrolled_networks import UNROLLED_WIRES

    assert UNROLLED_WIRES == 16
    rng = np.random.default_rng(size)
    for lanes in (1, 5, 8, START_LANES):
        values = rng.integers(-3, 4, (size, lanes)).astype(np.int64)
        values[:, 0] = BELOW_ALL  # the key that pads wires beyond m, in every wire of lane 0
        values[0, -1] = -BELOW_ALL - 1
        expected = -np.sort(-values, axis=0)
        for wire in range(size):
            sort = values.copy()
            ran = _select_unrolled(sort, wire)
            assert ran == (2 <= size <= UNROLLED_WIRES)
            if ran:
                np.testing.assert_array_equal(sort[wire], expected[wire])


@pytest.mark.parametrize("native", [False, True])
def test_both_forms_of_the_network_loop_select_the_same_key(monkeypatch, native):
    """The loop over a network's comparators takes int64 max/min where the target has
    AVX-512 and the sign of a difference elsewhere (NATIVE_INT64_MIN_MAX, frozen into the
    compiled kernel): both put the sorted value on the wire, on ties and on keys near
    both ends of the range the start uses (|keys| < 2**62)."""
    from nmref.transposable import _flow_start

    monkeypatch.setattr(_flow_start, "NATIVE_INT64_MIN_MAX", native)
    rng = np.random.default_rng(int(native))
    for size in (32, 64):  # sizes without an unrolled network: the loop runs
        values = rng.integers(-3, 4, (size, 9)).astype(np.int64)
        values[:, 0] = _flow_start.BELOW_ALL
        values[: size // 2, 1] = -_flow_start.BELOW_ALL - 1
        values[size // 2 :, 1] = _flow_start.BELOW_ALL
        expected = -np.sort(-values, axis=0)
        for wire in (0, 1, size // 2 - 1, size // 2, size - 1):
            sort = values.copy()
            network = _selection_network(size, wire)
            # The Python function reads the flag at call time; the compiled one froze it.
            _flow_start._select_lanes.py_func(sort, network, wire)
            np.testing.assert_array_equal(sort[wire], expected[wire], err_msg=f"wire {wire}")


def test_the_network_loop_form_follows_numbas_target_features(monkeypatch):
    """NATIVE_INT64_MIN_MAX comes from the features Numba compiles for: NUMBA_CPU_FEATURES
    when set (Numba keys its cache on the same features, so the flag cannot go stale)."""
    from numba.core import config

    from nmref.transposable import _flow_start

    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+avx512f,+fma")
    assert _flow_start._compiles_with_avx512()
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,-avx512f,+fma")
    assert not _flow_start._compiles_with_avx512()
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+avx512vl")  # no avx512f itself
    assert not _flow_start._compiles_with_avx512()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [8, 16])
def test_the_size_specialised_flow_kernel_equals_the_generic_one(m, dtype):
    """m = 8 and 16 run a kernel compiled with m as a constant (size_token); the generic
    kernel must give every output bit for bit: masks, status, kept units, exponents and
    potentials, for every n."""
    from nmref.transposable import _flow_kernels
    from nmref.transposable._driver import kernel_bits
    from nmref.transposable._kernel_contract import max_unit_bits

    assert _flow_kernels.size_token(m) == (0,) * m and _flow_kernels.size_token(m + 1) == ()
    rng = np.random.default_rng(m)
    scores = np.abs(rng.standard_normal((3 * m, (START_LANES + 5) * m)))
    tiles = scores.reshape(3, m, -1, m).swapaxes(1, 2)  # a view
    tiles[0, 1] = 0.0
    tiles[0, 2] = rng.integers(0, 2, (m, m))  # ties everywhere
    tiles[1, 3] *= np.exp2(rng.uniform(-60, 60, (m, m)))  # too wide: truncated units
    scores = scores.astype(dtype)
    bits, fraction_bits = kernel_bits(scores)
    count = (scores.shape[0] // m) * (scores.shape[1] // m)
    for n in range(m + 1):
        outputs = []
        for token in ((), _flow_kernels.size_token(m)):
            out = (
                np.zeros(scores.shape, dtype=bool),
                np.full(count, TOO_WIDE, dtype=np.int8),
                np.zeros(count, dtype=np.int64),
                np.zeros(count, dtype=np.int64),
                np.zeros((count, m), dtype=np.int64),
                np.zeros((count, m), dtype=np.int64),
            )
            _flow_kernels.exact_tiles(
                bits, fraction_bits, n, m, max_unit_bits(m), np.arange(count, dtype=np.int64),
                *out, token,
            )  # fmt: skip
            outputs.append(out)
        for generic, specialised in zip(*outputs, strict=True):
            np.testing.assert_array_equal(specialised, generic, err_msg=f"n={n}")
    # Two compiled kernels, not one: the token's type selects its own.
    tokens = {signature[-1] for signature in _flow_kernels.exact_tiles.signatures}
    assert len(tokens) >= 2
    with pytest.raises(ValueError, match="token"):  # the other size's token (compiled anyway)
        _flow_kernels.exact_tiles(
            bits, fraction_bits, 1, m, max_unit_bits(m), np.arange(count, dtype=np.int64),
            *outputs[0], _flow_kernels.size_token(24 - m),
        )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(4, 8), (3, 6), (1, 2), (8, 16)])
def test_blocks_of_tiles_mixing_every_kind_of_tile(n, m):
    """The kernel loads and starts blocks of tiles at once (START_LANES, 8 for 16x16 tiles):
    zero, too-wide (truncated and Python) and tie-heavy tiles inside one block, in a tile
    count that is no multiple of the block, must each get the mask the readable solver gives
    that tile alone."""
    rng = np.random.default_rng(100 * m + n)
    tiles_down, tiles_across = 3, START_LANES // 2 + 3
    scores = rng.standard_normal((tiles_down * m, tiles_across * m))
    tiles = scores.reshape(tiles_down, m, tiles_across, m).swapaxes(1, 2)  # a view
    tiles[0, 1] = 0.0
    tiles[0, 2] = rng.integers(0, 2, (m, m))
    tiles[1, 3] *= np.exp2(rng.uniform(-60, 60, (m, m)))  # floor units plus certificate
    tiles[1, 4] = 1.0  # float64: decided 92 binades down, below the truncation: Python path
    tiles[1, 4, m - 1] = 2.0**-40 * (1 + rng.permutation(m) * 2.0**-52)
    tiles[2, -1] = -np.abs(tiles[2, -1])
    for dtype in (np.float64, np.float32):
        values = scores.astype(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the near tie's Python fallback
            fast = _solve_exact(values, check_pattern(n, m), method="flow").mask
            parallel = _solve_exact(values, check_pattern(n, m), method="flow", parallel=True)
        np.testing.assert_array_equal(parallel.mask, fast)
        for tile_row, tile_column, tile in tile_values(values, m):
            expected = transposable_mask_reference(tile, n, m)
            got = fast[tile_row * m : (tile_row + 1) * m, tile_column * m : (tile_column + 1) * m]
            np.testing.assert_array_equal(got, expected, err_msg=f"tile {tile_row, tile_column}")


@pytest.mark.parametrize(("n", "m"), [(2, 5), (3, 5), (3, 6), (2, 6)])
def test_exact_equals_brute_for_m_5_and_6(n, m):
    rng = np.random.default_rng(m * 10 + n)
    for scores in (
        rng.integers(0, 3, (m, 2 * m)).astype(np.float32),  # tie-heavy
        rng.standard_normal((m, 2 * m)).astype(np.float32),
    ):
        exact = transposable_mask(scores, n, m)
        np.testing.assert_array_equal(exact, transposable_mask(scores, n, m, method="brute"))
        np.testing.assert_array_equal(exact, transposable_mask_reference(scores, n, m))


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (3, 4), (4, 8), (2, 8), (8, 16), (3, 7)])
def test_numba_flow_equals_readable_flow_on_ties_and_noise(n, m):
    rng = np.random.default_rng(n + 100 * m)
    cases = [
        rng.standard_normal((2 * m, 3 * m)).astype(np.float32),
        rng.integers(0, 2, (2 * m, 3 * m)).astype(np.float32),
        np.ones((m, m), dtype=np.float32),
        np.zeros((m, m)),
        np.abs(rng.standard_normal((m, 2 * m))).astype(np.float16),
        rng.integers(-3, 4, (m, m)),
    ]
    for scores in cases:
        fast = transposable_mask(scores, n, m)
        assert is_transposable(fast, n, m)
        np.testing.assert_array_equal(fast, transposable_mask_reference(scores, n, m))
        parallel = transposable_mask(scores, n, m, parallel=True)
        np.testing.assert_array_equal(parallel, fast)


@pytest.mark.parametrize(("n", "m"), [(2, 4), (1, 4), (3, 4), (2, 3)])
def test_all_equal_tile_gives_the_first_canonical_pattern(n, m):
    first = transposable_patterns(n, m)[0]
    for value in (0.0, 1.0, -2.5):
        for method in EXACT_METHODS:
            np.testing.assert_array_equal(
                transposable_mask(np.full((m, m), value), n, m, method=method), first
            )


def test_arange_tile_all_patterns_tie_and_the_first_wins():
    # s[i, j] = 4i + j: every valid pattern keeps the same sum (60), a pure tie.
    scores = np.arange(16.0).reshape(4, 4)
    for method in EXACT_METHODS:
        np.testing.assert_array_equal(
            transposable_mask(scores, 2, 4, method=method), transposable_patterns(2, 4)[0]
        )
    assert transposable_optimum(scores, 2, 4)[0, 0] == 60.0


def test_canonical_order_is_descending_keep_bits():
    patterns = transposable_patterns(2, 4).reshape(90, 16).astype(int)
    keys = [int("".join(map(str, p)), 2) for p in patterns]
    assert keys == sorted(keys, reverse=True)
    assert len(set(keys)) == 90


@pytest.mark.parametrize(
    ("n", "m", "count"), [(2, 4, 90), (1, 4, 24), (3, 4, 24), (2, 5, 2040), (3, 6, 297200)]
)
def test_pattern_counts_match_the_diversity_dp(n, m, count):
    patterns = transposable_patterns(n, m)
    assert len(patterns) == count
    assert (patterns.sum(axis=1) == n).all() and (patterns.sum(axis=2) == n).all()


def test_wide_dynamic_range_tiles_use_the_exact_python_path():
    # 2**-60 next to 2**60 needs > 120 bits: the kernel hands the tile to Python ints.
    rng = np.random.default_rng(7)
    scores = rng.standard_normal((8, 8))
    scores[0, 0] = 2.0**60
    scores[5, 6] = 2.0**-60
    scores[1, 1] = 3 * 2.0**-60
    for n, m in [(2, 4), (4, 8)]:
        fast = transposable_mask(scores, n, m)
        np.testing.assert_array_equal(fast, transposable_mask_reference(scores, n, m))
    # Tiny differences must still decide: the 2**40 diagonal is kept whatever the rest
    # holds, and only the 2**-70-sized entries choose the other kept entry of each line.
    tiny = 2.0**-70 * (1 + np.random.default_rng(8).permutation(16).reshape(4, 4))
    tie = np.where(np.eye(4, dtype=bool), 2.0**40, tiny)
    expected = lexmax_brute(tie, 2)[1]
    all_tiny_equal = lexmax_brute(np.where(np.eye(4, dtype=bool), 2.0**40, 2.0**-70), 2)[1]
    assert not np.array_equal(expected, all_tiny_equal)  # the tiny terms do decide
    for method in EXACT_METHODS:
        np.testing.assert_array_equal(transposable_mask(tie, 2, 4, method=method), expected)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(2, 4), (4, 8), (8, 16)])
def test_float64_scores_take_the_certified_fast_path(n, m):
    # 53-bit significands: too wide for int64 units; solved on floor units and
    # certified exactly (no warning means no tile fell back to Python).
    rng = np.random.default_rng(m)
    for scores in (
        np.abs(rng.standard_normal((4 * m, 4 * m))),
        rng.standard_normal((4 * m, 4 * m)) * np.exp(rng.normal(0, 5, (4 * m, 4 * m))),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            fast = transposable_mask(scores, n, m)
            parallel = transposable_mask(scores, n, m, parallel=True)
        np.testing.assert_array_equal(fast, transposable_mask_reference(scores, n, m))
        np.testing.assert_array_equal(parallel, fast)
        assert optimality_gap(scores, fast, n, m).total == 0.0


def test_near_ties_below_the_truncation_warn_and_stay_exact():
    # Row 3 differs only 92 binades below the largest entry: the floor units
    # cannot see it, the certificate fails, and the Python path decides.
    tile = np.ones((4, 4))
    tile[3] = 2.0**-40 * (1 + np.array([0, 1, 3, 2]) * 2.0**-52)
    expected = lexmax_brute(tile, 2)[1]
    assert expected[3].tolist() == [False, False, True, True]
    scores = np.tile(tile, (8, 8))  # 64 tiles: enough to warn
    with pytest.warns(RuntimeWarning, match="solved exactly in Python"):
        fast = transposable_mask(scores, 2, 4)
    np.testing.assert_array_equal(fast, np.tile(expected, (8, 8)))


def test_large_int64_scores_are_exact():
    big = 2**62
    scores = np.array([[big, big - 1, 0, 1]] * 4, dtype=np.int64)
    scores[2] = [0, 1, big, big - 1]
    scores[3] = [1, 0, big - 1, big]
    mask = transposable_mask(scores, 2, 4)
    np.testing.assert_array_equal(mask, transposable_mask_reference(scores, 2, 4))
    assert is_transposable(mask, 2, 4)


# ----------------------------------------------------------------------------
# Optimality against independent solvers
# ----------------------------------------------------------------------------


def highs_optimum(tile: np.ndarray, n: int) -> float:
    from scipy.optimize import linprog

    m = tile.shape[0]
    rows = np.kron(np.eye(m), np.ones(m))
    columns = np.kron(np.ones(m), np.eye(m))
    result = linprog(
        -tile.astype(np.float64).ravel(),
        A_eq=np.vstack([rows, columns]),
        b_eq=np.full(2 * m, n),
        bounds=(0, 1),
        method="highs",
    )
    assert result.status == 0
    return -result.fun


def networkx_optimum(tile: np.ndarray, n: int) -> Fraction:
    import networkx as nx

    units, exponent = exact_integer_tile(tile)
    m = len(units)
    graph = nx.DiGraph()
    for i in range(m):
        graph.add_node(("r", i), demand=-n)
        graph.add_node(("c", i), demand=n)
        for j in range(m):
            graph.add_edge(("r", i), ("c", j), weight=-units[i][j], capacity=1)
    cost = nx.min_cost_flow_cost(graph)  # integer weights: exact
    return Fraction(-cost) * Fraction(2) ** exponent


@pytest.mark.slow
@pytest.mark.parametrize(("n", "m"), [(2, 4), (4, 8), (3, 8), (8, 16)])
def test_optimum_matches_highs_and_networkx(n, m):
    rng = np.random.default_rng(n * 31 + m)
    cases = [
        np.abs(rng.standard_normal((2 * m, 2 * m))).astype(np.float32),
        rng.integers(0, 4, (m, 2 * m)).astype(np.float32),
        rng.standard_normal((m, m)),
    ]
    for scores in cases:
        optimum = transposable_optimum(scores, n, m)
        mask = transposable_mask(scores, n, m)
        for tile_row, tile_column, tile in tile_values(scores, m):
            kept = mask[tile_row * m : (tile_row + 1) * m, tile_column * m : (tile_column + 1) * m]
            exact = kept_sum_exact(tile, kept)
            assert exact == networkx_optimum(tile, n)
            assert optimum[tile_row, tile_column] == float(exact)
            assert highs_optimum(tile, n) == pytest.approx(float(exact), rel=1e-9, abs=1e-9)


@pytest.mark.slow
@given(score_matrices())
def test_optimum_is_at_most_the_row_only_and_column_only_optima(case):
    scores, n, m = case
    optimum = transposable_optimum(scores, n, m)
    values = scores.astype(np.float64)
    for axis in (1, 0):
        one_d = np.where(nm_mask(scores, n, m, axis=axis), values, 0.0)
        per_tile = one_d.reshape(scores.shape[0] // m, m, scores.shape[1] // m, m).sum(axis=(1, 3))
        assert (optimum <= per_tile + 1e-9 * (1 + np.abs(per_tile))).all()


@pytest.mark.slow
@given(score_matrices(), st.randoms(use_true_random=False))
def test_optimum_is_invariant_under_permutations_inside_a_tile(case, random):
    scores, n, m = case
    tile = scores[:m, :m]
    row_order = list(range(m))
    column_order = list(range(m))
    random.shuffle(row_order)
    random.shuffle(column_order)
    permuted = tile[row_order][:, column_order]
    assert transposable_optimum(permuted, n, m)[0, 0] == transposable_optimum(tile, n, m)[0, 0]
    # The optimal mask moves with the entries up to ties: its kept sum is optimal.
    assert (
        optimality_gap(
            permuted, transposable_mask(tile, n, m)[row_order][:, column_order], n, m
        ).total
        == 0.0
    )


# ----------------------------------------------------------------------------
# Greedy approximations
# ----------------------------------------------------------------------------


@given(score_matrices())
def test_greedy_fast_equals_reference(case):
    scores, n, m = case
    for method in ("greedy", "greedy-prune"):
        np.testing.assert_array_equal(
            transposable_mask(scores, n, m, method=method),
            transposable_mask_reference(scores, n, m, method=method),
        )


@pytest.mark.parametrize(("n", "m"), [(2, 4), (3, 8), (4, 8), (8, 16), (5, 16)])
def test_greedy_kernel_orders_equal_the_reference_on_both_sides_of_64_entries(n, m):
    # Tiles of <= 64 entries are ordered by counting ranks, larger ones by a stable radix
    # sort of unsigned keys made from the scores' bits (float64, int64 and uint64 variants).
    rng = np.random.default_rng(m + n)
    for scores in (
        rng.standard_normal((2 * m, 2 * m)).astype(np.float32),
        rng.integers(-2, 3, (2 * m, 2 * m)).astype(np.float64),
        np.where(rng.random((m, 2 * m)) < 0.5, 0.0, -0.0),
        rng.integers(-3, 3, (m, m), dtype=np.int64) * 2**60,
        rng.integers(2**64 - 4, 2**64 - 1, (m, m), dtype=np.uint64, endpoint=True),
        rng.choice([-5e-324, 0.0, -0.0, 5e-324, -1.0, 1.0, -1e308, 1e308], (m, 2 * m)),
        np.full((m, m), -2.5),
        # float32 keys (kind 3): signed zeros, subnormals, ties and both signs.
        rng.choice(
            np.array([-1e-45, 0.0, -0.0, 1e-45, -1.0, 1.0, -3e38, 3e38], np.float32), (m, m)
        ),
        np.round(rng.standard_normal((2 * m, 2 * m)) * 2).astype(np.float32),
    ):
        for method in ("greedy", "greedy-prune"):
            with kernels_only():
                kernel = transposable_mask(scores, n, m, method=method)
            np.testing.assert_array_equal(
                kernel, transposable_mask_reference(scores, n, m, method=method)
            )


@pytest.mark.parametrize(("n", "m"), [(2, 4), (4, 8), (1, 4), (8, 16)])
def test_greedy_bounds(n, m):
    rng = np.random.default_rng(m + n)
    for scores in (
        np.abs(rng.standard_normal((4 * m, 4 * m))).astype(np.float32),
        rng.integers(0, 3, (2 * m, 2 * m)).astype(np.float32),
        rng.exponential(size=(2 * m, 2 * m)) ** 4,
    ):
        optimum = transposable_optimum(scores, n, m)
        values = scores.astype(np.float64)

        def per_tile(kept, values=values, shape=scores.shape):
            tiles = np.where(kept, values, 0).reshape(shape[0] // m, m, shape[1] // m, m)
            return tiles.sum(axis=(1, 3))

        keep = transposable_mask(scores, n, m, method="greedy")
        assert is_transposable(keep, n, m, exact=False)
        assert (per_tile(keep) >= 0.5 * optimum - 1e-9).all()
        prune = transposable_mask(scores, n, m, method="greedy-prune")
        # The pruned set is an edge cover: >= m - n pruned, so <= n kept per row/column.
        assert is_transposable(prune, n, m, exact=False)
        total = per_tile(np.ones_like(prune))
        assert (total - per_tile(prune) <= 2 * (total - optimum) + 1e-9).all()


def test_greedy_regression_arange_4x4_is_transposable():
    """structured_transposable_masks issue #1: approx2 broke on a 4x4 arange."""
    scores = np.arange(16, dtype=np.float32).reshape(4, 4)
    mask = transposable_mask(scores, 2, 4, method="greedy")
    assert is_transposable(mask, 2, 4, exact=False)
    assert optimality_gap(scores, mask, 2, 4).total == 0.0


# ----------------------------------------------------------------------------
# Oracle functions and certificates
# ----------------------------------------------------------------------------


def test_optimality_gap_and_checker_power():
    rng = np.random.default_rng(3)
    scores = np.abs(rng.standard_normal((64, 64))).astype(np.float32)
    exact = transposable_mask(scores, 4, 8)
    gap = optimality_gap(scores, exact, 4, 8)
    assert gap.total == 0.0 and (gap.per_tile == 0).all()
    greedy = transposable_mask(scores, 4, 8, method="greedy")
    greedy_gap = optimality_gap(scores, greedy, 4, 8)
    assert greedy_gap.total > 0 and (greedy_gap.per_tile >= 0).all()
    # A deliberately wrong "exact" solver: swap an alternating 2x2 square.
    wrong = exact.copy()
    for r, c in itertools.product(range(0, 64, 8), range(0, 64, 8)):
        tile = wrong[r : r + 8, c : c + 8]
        for i, j, k, q in itertools.product(range(8), repeat=4):
            if tile[i, j] and tile[k, q] and not tile[i, q] and not tile[k, j]:
                tile[i, j] = tile[k, q] = False
                tile[i, q] = tile[k, j] = True
                break
    assert is_transposable(wrong, 4, 8)
    assert optimality_gap(scores, wrong, 4, 8).total > 0
    certificate = transposable_certificate(scores, 4, 8)
    assert verify_certificate(scores, *certificate, 4, 8)
    assert not verify_certificate(scores, wrong, *certificate[1:], 4, 8)
    shifted = certificate.row_potentials.copy()
    shifted[0, 0] += 1.0
    assert not verify_certificate(
        scores, certificate.mask, shifted, certificate.column_potentials, 4, 8
    )


def test_certificate_on_python_path_and_readable_certificate():
    units = [[5, 1, 4, 4], [2, 2, 2, 2], [0, 7, 3, 3], [9, 0, 0, 1]]
    kept, u, v = flow.solve_tile(units, 2)
    assert flow.certifies_optimal(units, kept, 2, u, v)
    kept[0][0] = not kept[0][0]
    assert not flow.certifies_optimal(units, kept, 2, u, v)


def test_gap_rejects_overfull_masks():
    with pytest.raises(ValueError, match="more than n=2"):
        optimality_gap(np.ones((4, 4)), np.ones((4, 4), dtype=bool), 2, 4)


@pytest.mark.parametrize("exact", [True, False])
def test_is_transposable(exact):
    mask = transposable_patterns(2, 4)[5]
    assert is_transposable(np.tile(mask, (2, 3)), 2, 4, exact=exact)
    under = mask.copy()
    under[0, np.flatnonzero(under[0])[0]] = False
    assert is_transposable(under, 2, 4, exact=exact) is (not exact)
    one_d = nm_mask(np.arange(16.0).reshape(4, 4), 2, 4)  # rows fine, columns not
    assert not is_transposable(one_d, 2, 4, exact=exact)


# ----------------------------------------------------------------------------
# Weights through layouts
# ----------------------------------------------------------------------------


def test_weight_mask_linear_and_conv():
    rng = np.random.default_rng(5)
    linear = rng.standard_normal((8, 16)).astype(np.float32)
    mask = transposable_weight_mask(linear, 2, 4)
    np.testing.assert_array_equal(mask, transposable_mask(np.abs(linear), 2, 4))
    conv = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    conv_mask = transposable_weight_mask(conv, 2, 4)
    assert conv_mask.shape == conv.shape
    for kh, kw in itertools.product(range(3), range(3)):
        tap = conv_mask[:, :, kh, kw]  # [out, in] at one kernel tap
        assert is_transposable(tap, 2, 4)
        np.testing.assert_array_equal(tap, transposable_mask(np.abs(conv[:, :, kh, kw]), 2, 4))
    with pytest.raises(ValueError, match="out channels"):
        transposable_weight_mask(rng.standard_normal((6, 4, 3, 3)), 2, 4)


def test_weight_mask_bad_arguments_name_the_argument_and_the_weight_index():
    conv = np.ones((4, 4, 3, 3))
    # The pattern is checked before the shape rule uses m (was ZeroDivisionError / a bare TypeError).
    with pytest.raises(ValueError, match="m=0 must be >= 1"):
        transposable_weight_mask(conv, 2, 0)
    with pytest.raises(TypeError, match="m='4' must be an integer"):
        transposable_weight_mask(conv, 2, "4")
    # NaN is located in the weight the caller passed, not in the internal reduction matrix.
    conv[1, 2, 0, 1] = np.nan
    with pytest.raises(ValueError, match=r"weight contains NaN at index \(1, 2, 0, 1\)"):
        transposable_weight_mask(conv, 2, 4)
    with pytest.raises(ValueError, match=r"weight contains NaN at index \(1, 2, 0, 1\)"):
        transposable_weight_mask(conv, 2, 4, method="greedy")


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: transposable_mask(np.ones((4, 4)), 5, 4), ValueError, "n=5 must be <= m=4"),
        (lambda: transposable_mask(np.ones((4, 6)), 2, 4), ValueError, "multiples of m=4"),
        (lambda: transposable_mask(np.ones((4, 4, 4)), 2, 4), ValueError, "must be 2-D"),
        (lambda: transposable_mask(np.ones(4), 2, 4), ValueError, "must be 2-D"),
        (lambda: transposable_mask(np.array([[np.nan] * 4] * 4), 2, 4), ValueError, "NaN at index"),
        (lambda: transposable_mask(np.array([[np.inf] * 4] * 4), 2, 4), ValueError, "infinity"),
        (lambda: transposable_mask(np.ones((4, 4)), 2, 4, method="ilp"), ValueError, "method="),
        (lambda: transposable_mask(np.ones((8, 8)), 4, 8, method="brute"), ValueError, "m <= 6"),
        (lambda: transposable_mask(np.ones((4, 4), dtype=complex), 2, 4), TypeError, "dtype"),
        (lambda: transposable_mask(np.ones((4, 4)), 2.0, 4), TypeError, "integer"),
        (lambda: transposable_optimum(np.ones((3, 4)), 2, 4), ValueError, "multiples"),
        (lambda: is_transposable(np.ones((4, 5)), 2, 4), ValueError, "multiples"),
        (lambda: transposable_patterns(4, 8), ValueError, "too large"),
    ],
)
def test_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_readable_flow_solver_rejects_bad_n_and_ragged_tiles():
    # n > m made successive_shortest_paths loop forever; a ragged tile raised IndexError.
    with pytest.raises(ValueError, match="n=3 must be <= m=2"):
        flow.solve_tile([[1, 2], [3, 4]], 3)
    with pytest.raises(ValueError, match="n=-1 must be >= 0"):
        flow.successive_shortest_paths([[1, 2], [3, 4]], -1)
    with pytest.raises(ValueError, match="square"):
        flow.solve_tile([[1, 2], [3]], 1)
    assert flow.solve_tile([], 0) == ([], [], [])


def test_nan_is_an_error_for_every_method():
    scores = np.ones((4, 4))
    scores[2, 1] = np.nan
    for method in ("exact", "brute", "greedy", "greedy-prune"):
        with pytest.raises(ValueError, match=r"NaN at index \(2, 1\)"):
            transposable_mask(scores, 2, 4, method=method)
        with pytest.raises(ValueError, match="NaN"):
            transposable_mask_reference(scores, 2, 4, method=method)


@pytest.mark.parametrize("method", ["exact", "brute", "greedy", "greedy-prune"])
def test_zero_size_and_trivial_n(method):
    assert transposable_mask(np.zeros((0, 8)), 2, 4, method=method).shape == (0, 8)
    scores = np.random.default_rng(0).standard_normal((4, 8))
    assert not transposable_mask(scores, 0, 4, method=method).any()
    assert transposable_mask(scores, 4, 4, method=method).all()


def test_negative_zero_equals_zero():
    scores = np.zeros((4, 4))
    scores[0, 0] = -0.0
    np.testing.assert_array_equal(transposable_mask(scores, 2, 4), transposable_patterns(2, 4)[0])


# ----------------------------------------------------------------------------
# Golden vectors
# ----------------------------------------------------------------------------


def test_golden_vectors():
    cases = json.loads(GOLDEN.read_text())["cases"]
    assert len(cases) >= 6
    for case in cases:
        scores = np.array(case["scores"], dtype=case["dtype"])
        n, m = case["n"], case["m"]
        for method, expected in case["masks"].items():
            np.testing.assert_array_equal(
                transposable_mask(scores, n, m, method=method).astype(int),
                np.array(expected),
                err_msg=f"{case['name']} {method}",
            )
        np.testing.assert_array_equal(
            transposable_optimum(scores, n, m), np.array(case["optimum"], dtype=np.float64)
        )
