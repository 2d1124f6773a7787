"""Tests of the weight layouts (specs/conventions.md, rule C3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nmref

shapes = st.lists(st.integers(1, 5), min_size=2, max_size=5).map(tuple)


shapes_with_zeros = st.lists(st.integers(0, 5), min_size=2, max_size=5).map(tuple)


@given(shapes_with_zeros, st.sampled_from(["channels", "flat", "linear"]))
def test_round_trip_restores_the_weight(shape, layout):
    if layout == "linear" and len(shape) != 2:
        layout = "flat"
    weight = np.arange(np.prod(shape)).reshape(shape)
    matrix = nmref.to_reduction_matrix(weight, layout)
    assert matrix.shape == nmref.to_reduction_shape(shape, layout)
    np.testing.assert_array_equal(nmref.from_reduction_matrix(matrix, shape, layout), weight)


def test_linear_groups_run_along_in_features():
    weight = np.arange(8).reshape(2, 4)
    np.testing.assert_array_equal(nmref.to_reduction_matrix(weight), weight)


def test_channels_layout_groups_input_channels_at_one_kernel_position():
    out_channels, in_channels, kh, kw = 3, 8, 2, 3
    weight = np.arange(out_channels * in_channels * kh * kw).reshape(
        out_channels, in_channels, kh, kw
    )
    matrix = nmref.to_reduction_matrix(weight, "channels")
    assert matrix.shape == (kh * kw * out_channels, in_channels)
    for y in range(kh):
        for x in range(kw):
            for o in range(out_channels):
                # Rows are ordered (kh, kw, out): m consecutive rows are m output channels.
                np.testing.assert_array_equal(
                    matrix[(y * kw + x) * out_channels + o], weight[o, :, y, x]
                )


def test_flat_layout_groups_the_row_major_flattening_per_output_channel():
    weight = np.arange(2 * 2 * 3 * 3).reshape(2, 2, 3, 3)
    np.testing.assert_array_equal(nmref.to_reduction_matrix(weight, "flat")[1], weight[1].ravel())


def test_conv_magnitude_mask_uses_the_channels_layout_by_default():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 8, 3, 3))
    mask = nmref.magnitude_mask(weight, 2, 4)
    # Every 4 consecutive input channels at fixed (out, kh, kw) keep exactly 2.
    assert (mask.reshape(4, 2, 4, 3, 3).sum(axis=2) == 2).all()
    flat = nmref.magnitude_mask(weight, 2, 4, layout="flat")
    assert (flat.reshape(4, -1, 4).sum(axis=2) == 2).all()
    assert not np.array_equal(mask, flat)


def test_flat_layout_never_straddles_output_rows():
    # 3 * 3 * 3 = 27 entries per output row is not a multiple of 4: an error,
    # not groups crossing into the next output channel as in SR-STE's code.
    with pytest.raises(ValueError, match=r"length 27 .* multiple of m=4"):
        nmref.magnitude_mask(np.ones((4, 3, 3, 3)), 2, 4, layout="flat")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nmref.to_reduction_matrix(np.ones(4)), "ndim >= 2"),
        (lambda: nmref.to_reduction_matrix(np.ones((2, 2, 2)), "linear"), "2-D"),
        (lambda: nmref.to_reduction_matrix(np.ones((2, 2)), "nchw"), "layout='nchw'"),
        (
            lambda: nmref.from_reduction_matrix(np.ones((3, 3)), (2, 2, 1, 1), "channels"),
            "expected",
        ),
    ],
)
def test_layout_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
