"""nmsim.torch 1-D masks equal nmref bit for bit (rules C1-C7), on every dtype and layout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nmref
from nmref.testing import check_magnitude_mask, check_nm_mask
from nmref.testing.strategies import nm_cases

torch = pytest.importorskip("torch")
import nmsim.torch as nt  # noqa: E402
from nmsim.torch import masks as torch_masks  # noqa: E402
from nmsim.torch.adapters import numpy_adapter  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
ALL_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int64", "uint8")


def _adapter(function, case, device="cpu", **keywords):
    return numpy_adapter(function, device=device, dtype=case.dtype_name, **keywords)


@pytest.mark.slow
@given(nm_cases(dtypes=(*ALL_DTYPES, "bool"), max_m=9))
def test_nm_mask_equals_nmref_on_every_kind_and_dtype(case):
    for device in DEVICES:
        check_nm_mask(_adapter(nt.nm_mask, case, device), [case])


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["channels", "flat"])
@given(data=st.data())
def test_magnitude_mask_equals_nmref_for_conv_layouts(layout, data):
    case = data.draw(nm_cases(dtypes=ALL_DTYPES, layout=layout, max_m=8, max_rows=3))
    check_magnitude_mask(_adapter(nt.magnitude_mask, case, layout=layout), [case], layout=layout)


@pytest.mark.slow
@given(nm_cases(dtypes=ALL_DTYPES, max_m=9))
def test_magnitude_mask_equals_nmref_for_linear_weights(case):
    check_magnitude_mask(_adapter(nt.magnitude_mask, case), [case])


@pytest.mark.parametrize("m", [33, 40, 64])
def test_sort_path_above_the_counting_limit_equals_nmref_on_ties(m):
    rng = np.random.default_rng(m)
    scores = rng.choice(np.array([0.0, -0.0, 1.0, 2.0], dtype=np.float32), (6, 2 * m))
    for n in (0, 1, m // 3, m - 1, m):
        expected = nmref.nm_mask(scores, n, m)
        got = nt.nm_mask(torch.from_numpy(scores), n, m).numpy()
        np.testing.assert_array_equal(got, expected)


def test_bfloat16_is_ranked_on_its_exact_float32_upcast():
    generator = torch.Generator().manual_seed(0)
    weights = (torch.randn(64, 64, generator=generator) * 3).to(torch.bfloat16)
    weights[::3] = weights[::3].round()  # plenty of ties
    got = nt.magnitude_mask(weights, 2, 4).numpy()
    np.testing.assert_array_equal(got, nmref.magnitude_mask(weights.float().numpy(), 2, 4))


@pytest.mark.slow
@pytest.mark.parametrize("path", ["counting", "sorting"])
@given(case=nm_cases(dtypes=(*ALL_DTYPES, "bool"), kinds=("tie_heavy", "zeros", "infinities")))
def test_both_ranking_paths_equal_nmref(path, case):
    """The counting path (used on accelerators) and the sort path (CPU) are both exact."""
    original = torch_masks._use_counting
    torch_masks._use_counting = lambda groups: path == "counting"
    try:
        check_nm_mask(_adapter(nt.nm_mask, case), [case])
        check_magnitude_mask(_adapter(nt.magnitude_mask, case), [case])
    finally:
        torch_masks._use_counting = original


def test_chunked_counting_equals_one_chunk(monkeypatch):
    monkeypatch.setattr(torch_masks, "_use_counting", lambda groups: True)
    scores = torch.randint(-2, 3, (301, 8)).float()
    whole = nt.nm_mask(scores, 3, 8)
    monkeypatch.setattr(torch_masks, "_CHUNK_ELEMENTS", 64 * 7)
    np.testing.assert_array_equal(nt.nm_mask(scores, 3, 8).numpy(), whole.numpy())


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_axis_argument_equals_nmref(axis):
    scores = np.random.default_rng(axis + 5).integers(-3, 4, (8, 8, 8)).astype(np.float32)
    got = nt.nm_mask(torch.from_numpy(scores), 2, 4, axis=axis).numpy()
    np.testing.assert_array_equal(got, nmref.nm_mask(scores, 2, 4, axis=axis))


@pytest.mark.parametrize("length", [1, 5, 6, 7, 13])
def test_pad_remainder_equals_nmref(length):
    scores = np.random.default_rng(length).integers(-2, 3, (3, length)).astype(np.float32)
    for n in range(5):
        got = nt.nm_mask(torch.from_numpy(scores), n, 4, remainder="pad").numpy()
        np.testing.assert_array_equal(got, nmref.nm_mask(scores, n, 4, remainder="pad"))
        weights = torch.from_numpy(scores)
        got = nt.magnitude_mask(weights, n, 4, remainder="pad").numpy()
        np.testing.assert_array_equal(got, nmref.magnitude_mask(scores, n, 4, remainder="pad"))


def test_integer_magnitudes_do_not_overflow():
    for dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        info = torch.iinfo(dtype)
        weights = torch.tensor([[info.min, info.max, info.min + 1, 0]], dtype=dtype)
        assert nt.magnitude_mask(weights, 1, 4).tolist() == [[True, False, False, False]]
        # |min+1| == |max|: a tie, lower index wins.
        assert nt.magnitude_mask(weights[:, 1:3].repeat(1, 2), 1, 4).tolist() == [
            [True, False, False, False]
        ]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: nt.nm_mask(torch.tensor([[1.0, 2.0, float("nan"), 0.0]]), 2, 4),
            ValueError,
            r"scores contains NaN \(first at index \(0, 2\)\)",
        ),
        (
            lambda: nt.magnitude_mask(torch.full((2, 4, 1, 1), float("nan")), 2, 4),
            ValueError,
            r"weights contains NaN \(first at index \(0, 0, 0, 0\)\)",
        ),
        (lambda: nt.nm_mask(torch.zeros(3, 6), 2, 4), ValueError, "multiple of m=4"),
        (lambda: nt.nm_mask(torch.zeros(4), 5, 4), ValueError, "n=5 must be <= m=4"),
        (lambda: nt.nm_mask(torch.zeros(4), 2.0, 4), TypeError, "n=2.0 must be an integer"),
        (lambda: nt.nm_mask(torch.tensor(1.0), 1, 1), ValueError, "at least one dimension"),
        (lambda: nt.nm_mask(torch.zeros(4, dtype=torch.complex64), 2, 4), TypeError, "dtype"),
        (
            lambda: nt.magnitude_mask(torch.zeros(4, 4, 3), 2, 4, layout="linear"),
            ValueError,
            "layout='linear' needs a 2-D",
        ),
        (lambda: nt.nm_mask(torch.zeros(4, 4), 2, 4, axis=2), ValueError, "out of bounds"),
    ],
)
def test_error_rules_match_nmref(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_zero_size_gives_empty_mask():
    assert nt.nm_mask(torch.zeros(0, 8), 2, 4).shape == (0, 8)
    assert nt.magnitude_mask(torch.zeros(0, 8, 3, 3), 2, 4).shape == (0, 8, 3, 3)


def test_output_is_bool_on_the_input_device():
    mask = nt.nm_mask(torch.ones(2, 4, dtype=torch.float16), 2, 4)
    assert mask.dtype == torch.bool and mask.device.type == "cpu"


@pytest.mark.slow
@given(nm_cases(dtypes=("float32", "int8", "bool"), max_m=6))
def test_is_nm_equals_nmref(case):
    for exact in (True, False):
        flipped = nmref.nm_mask(case.scores, case.n, case.m).copy()
        flipped.reshape(-1)[0] ^= True
        for mask in (flipped, case.scores != 0):
            assert nt.is_nm(torch.from_numpy(mask), case.n, case.m, exact=exact) == nmref.is_nm(
                mask, case.n, case.m, exact=exact
            )


def test_layout_round_trip_equals_nmref():
    weights = np.arange(2 * 8 * 3 * 2, dtype=np.float32).reshape(2, 8, 3, 2)
    for layout in ("channels", "flat"):
        matrix = nt.to_reduction_matrix(torch.from_numpy(weights), layout)
        np.testing.assert_array_equal(matrix.numpy(), nmref.to_reduction_matrix(weights, layout))
        back = nt.from_reduction_matrix(matrix, weights.shape, layout)
        np.testing.assert_array_equal(back.numpy(), weights)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_wider_than_8_bits_is_rejected_by_name(dtype):
    # specs/torch.md §1: torch has no ordered uint16/32/64 on every backend, so they raise
    # TypeError naming the argument and the dtype, for masks and magnitude masks alike.
    tensor = torch.zeros(2, 4, dtype=getattr(torch, dtype))
    with pytest.raises(TypeError, match=f"scores must have .* got dtype=torch.{dtype}"):
        nt.nm_mask(tensor, 2, 4)
    with pytest.raises(TypeError, match=f"weights must have .* got dtype=torch.{dtype}"):
        nt.magnitude_mask(tensor, 2, 4)
