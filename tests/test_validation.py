"""The argument rules of nmref._validation: one message per rule, the same at every site."""

from __future__ import annotations

import numpy as np
import pytest

import nmref
from nmref import _validation as v


@pytest.mark.parametrize("value", [0, 7, -3, np.int64(5), np.uint8(2)])
def test_integers_pass_as_python_ints(value):
    checked = v.check_integer(value, "k")
    assert checked == value and type(checked) is int


@pytest.mark.parametrize("value", [True, False, 2.0, "3", None, np.float64(1.0)])
def test_bool_float_and_text_are_not_integers(value):
    assert not v.is_integer(value)
    with pytest.raises(TypeError, match=r"^k=.* must be an integer$"):
        v.check_integer(value, "k")


def test_counts_answer_a_wrong_type_and_a_wrong_value_with_one_value_error():
    assert v.check_count(np.int32(0), "size") == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"^size=.* must be a non-negative integer$"):
            v.check_count(bad, "size")
    with pytest.raises(ValueError, match=r"^window=0 must be an integer >= 1$"):
        v.check_count(0, "window", minimum=1)


def test_positive_integers_and_reals():
    assert v.check_positive_integer(np.int64(3), "batch") == 3
    with pytest.raises(TypeError, match=r"^batch=2\.0 must be a positive integer$"):
        v.check_positive_integer(2.0, "batch")
    with pytest.raises(ValueError, match=r"^batch=0 must be a positive integer$"):
        v.check_positive_integer(0, "batch")
    assert v.check_nonnegative(np.float32(0.5), "lr") == 0.5
    with pytest.raises(TypeError, match=r"^lr=True must be a real number$"):
        v.check_nonnegative(True, "lr")
    for bad in (-0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"must be finite and >= 0$"):
            v.check_nonnegative(bad, "lr")


def test_a_choice_returns_its_index_or_names_all_choices():
    assert v.check_choice("eligible", "criterion", ("kept", "eligible")) == 1
    with pytest.raises(
        ValueError, match=r"^criterion='best' must be one of \('kept', 'eligible'\)$"
    ):
        v.check_choice("best", "criterion", ("kept", "eligible"))


def test_nan_messages_name_the_first_nan_and_the_reason():
    array = np.zeros((2, 3))
    array[1, 2] = array[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"^w contains NaN \(first at index \(1, 0\)\)$"):
        v.check_no_nan(array, "w")
    with pytest.raises(ValueError, match=r"\(first at index \(1, 0\)\); NaN has no rank, so no"):
        v.raise_nan(array.shape, 3, "scores", v.NAN_HAS_NO_RANK)
    v.check_no_nan(np.array([1, 2]), "w")  # integers hold no NaN
    with pytest.raises(ValueError, match=r"^w contains an infinity at index \(0, 1\); transpos"):
        v.check_finite_scores(np.array([[0.0, -np.inf]]), "w")


def test_float_arrays_refuse_other_dtypes_before_looking_for_nan():
    with pytest.raises(TypeError, match=r"^g must be a float16/32/64 array, got dtype=int64$"):
        v.as_float_array(np.array([1, 2], dtype=np.int64), "g")
    if np.dtype(np.longdouble).itemsize > 8:
        with pytest.raises(TypeError, match="float16/32/64"):
            v.as_float_array(np.array([np.nan], dtype=np.longdouble), "g")


def test_axis_and_layout_rules():
    assert nmref.LAYOUTS is v.LAYOUTS
    assert v.check_axis(np.int8(-1), 3) == 2
    with pytest.raises(TypeError, match=r"^axis=True must be an integer$"):
        v.check_axis(True, 2)


def test_the_channels_rule_of_transposable_masks_is_one_message():
    v.check_transposable_layout((8, 4, 3, 3), 4, "channels")
    v.check_transposable_layout((6, 8), 4, "linear")  # only the channels layout stacks taps
    expected = (
        r"weight.shape\[0\]=6 \(out channels\) must be a multiple of m=4 for layout='channels'"
    )
    with pytest.raises(ValueError, match=expected):
        v.check_transposable_layout((6, 4, 3, 3), 4, "channels")
    with pytest.raises(ValueError, match=expected):
        nmref.transposable_weight_mask(np.ones((6, 4, 3, 3)), 2, 4)


def test_masked_arrays_are_refused_not_silently_unmasked():
    """Issue 20: masked arrays lost their mask silently in nm_mask, magnitude_mask and
    transposable_mask."""
    import numpy as np
    import pytest

    from nmref import magnitude_mask, nm_mask, transposable_mask

    scores = np.ma.masked_array(np.arange(16, dtype=np.float64).reshape(4, 4), mask=False)
    scores[0, 3] = np.ma.masked
    for call in (
        lambda: nm_mask(scores, 2, 4),
        lambda: magnitude_mask(scores, 2, 4),
        lambda: transposable_mask(scores, 2, 4),
    ):
        with pytest.raises(TypeError, match=r"(scores|weights) is a numpy masked array; its mask"):
            call()


def test_torch_inputs_to_nmref_get_nmref_errors_not_torch_errors():
    """Issue 20: torch inputs to nmref passed torch's own errors through (requires_grad,
    bf16, meta)."""
    import numpy as np
    import pytest

    torch = pytest.importorskip("torch")
    from nmref import magnitude_mask, nm_mask

    grad = torch.ones(4, 8, requires_grad=True)
    with pytest.raises(TypeError, match=r"scores is a torch tensor that requires grad: pass"):
        nm_mask(grad, 2, 4)
    with pytest.raises(TypeError, match=r"bfloat16 torch tensor, which NumPy has no dtype"):
        nm_mask(torch.ones(4, 8, dtype=torch.bfloat16), 2, 4)
    with pytest.raises(TypeError, match=r"torch tensor on device 'meta'"):
        magnitude_mask(torch.ones(4, 8, device="meta"), 2, 4)
    # a plain CPU tensor is an array-like like any other
    assert np.array_equal(
        nm_mask(torch.arange(8.0).reshape(1, 8), 2, 4), nm_mask(np.arange(8.0).reshape(1, 8), 2, 4)
    )
