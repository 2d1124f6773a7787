"""The NumPy path of small transposable calls gives the kernels' masks, bit for bit.

Small calls (``m <= 4``, at most ``MAX_TILES`` tiles) run a vectorised enumeration or greedy
scan instead of compiling a kernel. These tests compare the two paths on inputs built to
break it: ties, signed scores, ``-0.0``, integers, float16, and dynamic ranges at the edge
of float64 exactness, where the NumPy path must decline and leave the call to the kernels.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nmref
from nmref.patterns import check_pattern
from nmref.transposable import _small
from nmref.transposable._small import kernels_only

METHODS = ["exact", "brute", "greedy", "greedy-prune"]


def _both_paths(scores, n: int, m: int, method: str) -> tuple[np.ndarray, np.ndarray]:
    with kernels_only():
        kernel = nmref.transposable_mask(scores, n, m, method=method)
    return kernel, nmref.transposable_mask(scores, n, m, method=method)


def _numpy_path(scores, n: int, m: int, method: str):
    array = np.asarray(scores)
    pattern = check_pattern(n, m)
    if method in ("exact", "brute"):
        return _small.exact_mask(array, pattern)
    return _small.greedy_mask(array, pattern, method == "greedy-prune")


@st.composite
def small_calls(draw):
    m = draw(st.sampled_from([1, 2, 3, 4]))
    n = draw(st.integers(0, m))
    rows, columns = m * draw(st.integers(1, 4)), m * draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["ties", "signed", "float16", "int", "zeros", "binades"]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    shape = (rows, columns)
    if kind == "ties":
        scores = rng.integers(0, 3, shape).astype(np.float32)
    elif kind == "signed":
        scores = rng.standard_normal(shape).astype(np.float32)
    elif kind == "float16":
        scores = rng.standard_normal(shape).astype(np.float16)
    elif kind == "int":
        scores = rng.integers(-(2**40), 2**40, shape)
    elif kind == "zeros":
        scores = np.where(rng.random(shape) < 0.5, -0.0, 0.0)
    else:  # float64 across many binades: some tiles exact in float64, some not
        scores = rng.random(shape) * 2.0 ** rng.integers(-40, 40, shape)
    return scores, n, m, draw(st.sampled_from(METHODS))


@given(small_calls())
def test_the_numpy_path_gives_the_kernels_masks(call):
    scores, n, m, method = call
    kernel, public = _both_paths(scores, n, m, method)
    np.testing.assert_array_equal(public, kernel)


@pytest.mark.parametrize("method", METHODS)
def test_the_numpy_path_is_taken_and_matches_the_reference(method):
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 4, (16, 24)).astype(np.float32)  # many ties
    got = _numpy_path(scores, 2, 4, method)
    assert got is not None
    reference_method = "exact" if method == "brute" else method
    np.testing.assert_array_equal(
        got, nmref.transposable_mask_reference(scores, 2, 4, method=reference_method)
    )


def test_sums_that_could_round_in_float64_go_to_the_kernels():
    # 2**60 + 1 is not a float64: enumerating in float64 would see a tie that is not one.
    scores = np.ones((4, 4))
    scores[0, 0] = 2.0**60
    scores[1, 1] = 2.0**-1
    assert _numpy_path(scores, 2, 4, "exact") is None
    kernel, public = _both_paths(scores, 2, 4, "exact")
    np.testing.assert_array_equal(public, kernel)
    # Within 53 bits (with the growth of an 8-term sum) the NumPy path answers.
    scores[0, 0] = 2.0**48
    assert _numpy_path(scores, 2, 4, "exact") is not None


def test_sums_that_would_overflow_go_to_the_kernels():
    scores = np.full((4, 4), 1e308)
    scores[2, 3] = 1.5e308
    assert _numpy_path(scores, 2, 4, "exact") is None
    kernel, public = _both_paths(scores, 2, 4, "exact")
    np.testing.assert_array_equal(public, kernel)


def test_large_integers_go_to_the_kernels():
    scores = np.full((4, 4), 2**53 + 1, dtype=np.int64)
    scores[0, 1] += 1
    assert _numpy_path(scores, 2, 4, "exact") is None
    assert _numpy_path(scores, 2, 4, "greedy") is None


def test_large_or_wide_calls_go_to_the_kernels(monkeypatch):
    scores = np.ones((8, 8), dtype=np.float32)
    assert _numpy_path(scores, 2, 4, "exact") is not None
    assert _numpy_path(scores, 4, 8, "exact") is None  # m = 8: the kernels
    monkeypatch.setattr(_small, "MAX_TILES", 3)  # 4 tiles
    assert _numpy_path(scores, 2, 4, "exact") is None
    assert _numpy_path(scores, 2, 4, "greedy") is None


def test_nan_and_infinity_raise_the_kernels_error():
    for bad in (np.nan, np.inf):
        scores = np.ones((4, 4), dtype=np.float32)
        scores[1, 2] = bad
        with pytest.raises(ValueError) as numpy_error:
            nmref.transposable_mask(scores, 2, 4)
        with kernels_only(), pytest.raises(ValueError) as kernel_error:
            nmref.transposable_mask(scores, 2, 4)
        assert str(numpy_error.value) == str(kernel_error.value)


def test_a_small_call_compiles_no_kernel():
    # The point of the path: a first small call neither imports nor compiles a kernel.
    code = (
        "import sys, numpy as np, nmref\n"
        "w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)\n"
        "for method in ('exact', 'greedy', 'greedy-prune'):\n"
        "    nmref.transposable_mask(np.abs(w), 2, 4, method=method)\n"
        "print(sorted(k for k in sys.modules if k.endswith('_kernels')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_numba_disable_jit_exact_and_brute_2_4_and_1_4_on_float32_float16_bool():
    """Issue 20: ``NUMBA_DISABLE_JIT=1`` broke every exact/brute 2:4 and 1:4 call on
    float32/float16/bool input (``Expected an int as second argument to ldexp``)."""
    import subprocess
    import sys

    code = (
        "import numpy as np, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from nmref.transposable import transposable_mask\n"
        "from nmref.transposable._small import kernels_only\n"
        "s = np.abs(np.random.default_rng(0).standard_normal((8, 8))).astype(np.float32)\n"
        "for method in ('exact', 'brute'):\n"
        "    for n in (2, 1):\n"
        "        for dtype in (np.float32, np.float16, bool):\n"
        "            with kernels_only():\n"
        "                mask = transposable_mask(s.astype(dtype), n, 4, method=method)\n"
        "            assert mask.sum() == 8 * 2 * n\n"
        "print('ok')\n"
    )
    env = {**__import__("os").environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
