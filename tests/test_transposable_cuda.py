"""The CUDA backend of the exact transposable mask equals nmref bit for bit (spec T10).

``transposable_mask(..., backend="cuda")`` against the CPU backend on every golden vector, on
hypothesis tiles (ties, integers, float16/bfloat16 upcasts, both fills, m in {4, 8, 16, 32})
and on seeded patterns up to 32:64; tiles handed back to the host; device inputs; the errors.
Two deliberately wrong kernels (no tie pass; a tie pass that may undo earlier choices) must
fail the same assertion.

The kernel tests need Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before
``numba.cuda`` is first imported: ``.ci/run`` runs this file in a pytest of its own) or a
CUDA GPU; elsewhere they are skipped, and only the error tests run. The simulator runs the
kernel as Python, one thread per tile, about 0.05-3 s a tile: sizes here are small.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nmref.testing.golden import check_golden_vectors
from nmref.testing.strategies import weights
from nmref.transposable import _cuda_driver, transposable_mask

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _kernel_runs() -> bool:
    """The simulator, or a GPU Numba can use (the import of numba.cuda waits until asked)."""
    return SIMULATOR or _cuda_driver.unavailable_reason() is None


needs_kernel = pytest.mark.skipif(
    "not _kernel_runs()",
    reason="needs NUMBA_ENABLE_CUDASIM=1 (Numba's CUDA simulator) or a CUDA GPU",
)
needs_simulator = pytest.mark.skipif(
    not SIMULATOR, reason="mutant kernels are Python functions: simulator only"
)

FILLS = ("exact", "at_most")


def assert_cuda_equals_nmref(scores, n: int, m: int, fill: str) -> None:
    """The contract: the CUDA backend's mask is the CPU backend's, bit for bit."""
    expected = transposable_mask(scores, n, m, fill=fill)
    got = transposable_mask(scores, n, m, fill=fill, backend="cuda")
    assert isinstance(got, np.ndarray) and got.dtype == np.bool_
    np.testing.assert_array_equal(got, expected, err_msg=f"{n}:{m} fill={fill!r}\n{scores!r}")


class _DeviceScores:
    """A host array behind ``__cuda_array_interface__``: device memory in the simulator."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @property
    def __cuda_array_interface__(self) -> dict:
        array = self.array
        return {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.ctypes.data, False),
            "strides": None if array.flags.c_contiguous else array.strides,
            "version": 2,
        }


def _on_device(array: np.ndarray):
    """``array`` as an object with ``__cuda_array_interface__`` on the (simulated) device."""
    if SIMULATOR:
        return _DeviceScores(array)
    from numba import cuda

    return cuda.to_device(array)


def _from_device(mask) -> np.ndarray:
    return mask.copy_to_host()


# ----------------------------------------------------------------------------
# Equal to nmref
# ----------------------------------------------------------------------------


@needs_kernel
def test_equals_nmref_on_every_golden_vector():
    checked = []

    def implementation_for(vector):
        if not vector.function.startswith("transposable_mask[exact"):
            return None
        checked.append(vector.name)
        fill = "at_most" if "at_most" in vector.function else "exact"
        return lambda scores, n, m: transposable_mask(scores, n, m, fill=fill, backend="cuda")

    check_golden_vectors(implementation_for)
    # 5 exact and 10 at-most transposable vectors in this release: a manifest that lost
    # them would pass silently.
    assert len(checked) >= 15, checked


KINDS = ("tie_heavy", "tie_free", "zeros", "random")
DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int64", "bool", "float64")


@st.composite
def _cases(draw, m: int):
    n = draw(st.integers(0, m))
    fill = draw(st.sampled_from(FILLS))
    dtype_name = draw(st.sampled_from(DTYPES))
    kind = draw(st.sampled_from(KINDS))
    tile_columns = draw(st.integers(1, 2)) if m <= 8 else 1
    scores = draw(weights((m, m * tile_columns), dtype_name=dtype_name, kind=kind))
    # (bfloat16 rounding of a huge float32 draw gives an infinity: an error on both backends,
    # tested below.)
    assume(scores.dtype.kind != "f" or bool(np.isfinite(scores).all()))
    if fill == "exact" and draw(st.booleans()) and scores.dtype.kind == "f":
        scores = np.abs(scores)  # magnitudes, as transposable_weight_mask scores them
    return scores, n, fill


# Examples per size: the simulator takes seconds per example (a thread per tile, as Python),
# up to about 3 s for a tie-heavy 32x32 tile; the budget keeps CI's lane near a minute (CI's
# randomized profile draws new examples each run).
@needs_kernel
@pytest.mark.parametrize(("m", "examples"), [(4, 15), (8, 10), (16, 4), (32, 2)])
def test_equals_nmref_on_hypothesis_tiles(m, examples):
    @settings(max_examples=examples)
    @given(_cases(m))
    def check(case):
        scores, n, fill = case
        assert_cuda_equals_nmref(scores, n, m, fill)

    check()


def _seeded(kind: str, shape: tuple[int, int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "noise":
        return np.abs(rng.standard_normal(shape)).astype(np.float32)
    if kind == "signed":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "binary":
        return rng.integers(0, 2, shape).astype(np.float32)
    if kind == "small_integers":
        return rng.integers(-2, 3, shape).astype(np.int8)
    if kind == "all_equal":
        return np.ones(shape, dtype=np.float32)
    if kind == "half_zeros":
        values = np.abs(rng.standard_normal(shape)).astype(np.float32)
        return np.where(rng.random(shape) < 0.5, 0.0, values).astype(np.float32)
    raise ValueError(kind)


SEEDED = [
    ((n, m), kind)
    for (n, m) in [(1, 4), (2, 4), (3, 4), (2, 8), (4, 8), (5, 8), (3, 7), (8, 16)]
    for kind in ("noise", "signed", "binary", "small_integers", "all_equal", "half_zeros")
]


@needs_kernel
@pytest.mark.parametrize("fill", FILLS)
@pytest.mark.parametrize(("pattern", "kind"), SEEDED, ids=[f"{n}of{m}-{k}" for (n, m), k in SEEDED])
def test_equals_nmref_on_seeded_patterns(pattern, kind, fill):
    n, m = pattern
    tiles = 2 if m <= 8 else 1
    assert_cuda_equals_nmref(_seeded(kind, (m, tiles * m), seed=m * 16 + n), n, m, fill)


@needs_kernel
@pytest.mark.parametrize(
    ("n", "m", "kind", "fill"),
    [(16, 32, "noise", "exact"), (16, 32, "signed", "at_most"), (32, 64, "noise", "exact")],
)
def test_equals_nmref_on_large_tiles(n, m, kind, fill):
    assert_cuda_equals_nmref(_seeded(kind, (m, m), seed=m), n, m, fill)


# ----------------------------------------------------------------------------
# Tiles handed back to the host, and device inputs
# ----------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize("fill", FILLS)
def test_tiles_too_wide_for_int64_units_are_solved_on_the_host(fill):
    rng = np.random.default_rng(5)
    # float64 noise: 53-bit significands over a few binades need more than 54 bits.
    noise = np.abs(rng.standard_normal((8, 8)))
    # float32 with a 2**-60 entry next to ordinary ones: 60 binades apart.
    wide = np.abs(rng.standard_normal((8, 8))).astype(np.float32)
    wide[0, 0] = 2.0**-60
    for scores in (noise, wide):
        assert_cuda_equals_nmref(scores, 2, 4, fill)


@needs_kernel
@pytest.mark.parametrize(
    "scores",
    [
        np.abs(np.random.default_rng(1).standard_normal((16, 8))).astype(np.float32),
        np.abs(np.random.default_rng(2).standard_normal((8, 16))).astype(np.float32).T,
        np.random.default_rng(3).standard_normal((8, 8)),  # float64: mostly host tiles
        np.random.default_rng(4).integers(0, 3, (8, 8)).astype(np.float16),
        np.random.default_rng(5).integers(0, 2, (8, 8)).astype(bool),
        np.random.default_rng(6).integers(-3, 4, (8, 8)).astype(np.int8),
        np.full((8, 8), 2**60, dtype=np.int64) + np.arange(64).reshape(8, 8),  # > 2**53
        np.full((8, 8), 2**63, dtype=np.uint64) + np.arange(64, dtype=np.uint64).reshape(8, 8),
    ],
    ids=["float32", "transposed", "float64", "float16", "bool", "int8", "int64>2**53", "uint64"],
)
@pytest.mark.parametrize("fill", FILLS)
def test_device_input_gives_the_same_mask_on_the_device(scores, fill):
    expected = transposable_mask(scores, 2, 4, fill=fill)
    got = transposable_mask(_on_device(scores), 2, 4, fill=fill, backend="cuda")
    assert not isinstance(got, np.ndarray)  # a device array
    assert hasattr(got, "copy_to_host") and got.shape == scores.shape
    np.testing.assert_array_equal(_from_device(got), expected)


@needs_kernel
def test_empty_and_extreme_patterns():
    assert transposable_mask(np.zeros((0, 8)), 2, 4, backend="cuda").shape == (0, 8)
    scores = _seeded("signed", (8, 8), 0)
    for n in (0, 4):
        for fill in FILLS:
            assert_cuda_equals_nmref(scores, n, 4, fill)
    assert_cuda_equals_nmref(np.array([[-1.0, 2.0], [0.0, -0.0]]), 1, 1, "at_most")


# ----------------------------------------------------------------------------
# Errors: the CPU path's, and one line without CUDA
# ----------------------------------------------------------------------------


@needs_kernel
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("device", [False, True])
def test_nan_and_infinities_raise_the_cpu_error(bad, device):
    scores = np.ones((8, 8), dtype=np.float32)
    scores[5, 6] = bad
    with pytest.raises(ValueError) as cpu:
        transposable_mask(scores, 2, 4)
    with pytest.raises(ValueError) as gpu:
        transposable_mask(_on_device(scores) if device else scores, 2, 4, backend="cuda")
    assert str(gpu.value) == str(cpu.value)
    assert "(5, 6)" in str(gpu.value)


@needs_kernel
def test_bad_shapes_and_dtypes_raise_the_cpu_errors():
    for scores in (np.ones((4, 6)), np.ones(16), np.ones((4, 4), dtype=np.complex64)):
        for where in (scores, _on_device(scores)):
            with pytest.raises((ValueError, TypeError)) as cpu:
                transposable_mask(scores, 2, 4)
            with pytest.raises(type(cpu.value), match=re.escape(str(cpu.value))):
                transposable_mask(where, 2, 4, backend="cuda")


def test_arguments_are_checked_before_the_device():
    scores = np.ones((4, 4))
    with pytest.raises(ValueError, match=r"backend='tpu' must be one of \('cpu', 'cuda'\)"):
        transposable_mask(scores, 2, 4, backend="tpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="runs method='exact' only"):
        transposable_mask(scores, 2, 4, method="greedy", backend="cuda")
    with pytest.raises(ValueError, match="fill='at_most' applies to method='exact' or 'brute'"):
        transposable_mask(scores, 2, 4, method="greedy", fill="at_most", backend="cuda")
    with pytest.raises(ValueError, match="needs m <= 64"):
        transposable_mask(np.ones((65, 65)), 2, 65, backend="cuda")


def test_without_cuda_the_error_is_one_line(monkeypatch):
    monkeypatch.setattr(
        _cuda_driver, "unavailable_reason", lambda: "no CUDA GPU or driver is visible to Numba"
    )
    with pytest.raises(RuntimeError) as error:
        transposable_mask(np.ones((4, 4)), 2, 4, backend="cuda")
    message = str(error.value)
    assert "\n" not in message and "backend='cuda'" in message and "backend='cpu'" in message


@pytest.mark.skipif("_kernel_runs()", reason="this machine runs CUDA kernels")
def test_a_machine_without_cuda_gets_one_line():
    with pytest.raises(RuntimeError, match="backend='cuda' needs a CUDA GPU") as error:
        transposable_mask(np.ones((4, 4)), 2, 4, backend="cuda")
    assert "\n" not in str(error.value)


# ----------------------------------------------------------------------------
# The checker has power: wrong tie rules must fail the contract
# ----------------------------------------------------------------------------

TIE_CASES = [
    (np.ones((4, 8), dtype=np.float32), 2, 4),
    (np.ones((8, 8), dtype=np.float32), 4, 8),
    (_seeded("binary", (8, 16), 7), 3, 8),
    (_seeded("small_integers", (8, 8), 8), 2, 4),
    (np.zeros((8, 8), dtype=np.float32), 2, 8),
]


def _check_all_ties():
    for scores, n, m in TIE_CASES:
        for fill in FILLS:
            assert_cuda_equals_nmref(scores, n, m, fill)


@needs_kernel
def test_the_tie_cases_pass_with_the_real_kernel():
    _check_all_ties()


@needs_simulator
def test_a_kernel_without_the_tie_pass_fails(monkeypatch):
    """Returns whichever optimum the flow ends at: not the canonical one (spec T3)."""
    from numba import cuda

    from nmref.transposable import _cuda_kernels

    @cuda.jit(device=True)
    def never_switch(*arguments):
        return False

    monkeypatch.setattr(_cuda_kernels, "_switch_on", never_switch)
    with pytest.raises(AssertionError):
        _check_all_ties()


@needs_simulator
def test_a_tie_pass_that_may_undo_earlier_choices_fails(monkeypatch):
    """Lets the alternating paths use entries before the scanned one (the lower flat index
    no longer wins; spec T3)."""
    from numba import cuda

    from nmref.transposable import _cuda_kernels

    bits_from = _cuda_kernels._bits_from

    @cuda.jit(device=True)
    def every_row(start, m):
        return bits_from(0, m)

    monkeypatch.setattr(_cuda_kernels, "_bits_from", every_row)
    with pytest.raises(AssertionError):
        _check_all_ties()


def test_the_torch_path_routes_only_cuda_tensors_to_the_kernel():
    torch = pytest.importorskip("torch")
    from nmsim.torch import transposable as torch_transposable

    assert not torch_transposable._runs_cuda_kernel(torch.ones(4, 4), 4)
    scores = torch.rand(8, 8)
    expected = transposable_mask(scores.numpy(), 2, 4)
    np.testing.assert_array_equal(torch_transposable.transposable_mask(scores, 2, 4), expected)
