"""Bi-Mask on the torch path equals nmref.bimask bit for bit; the bimask layers follow §6."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nmref.bimask as reference
from nmref.testing.bimask import (
    check_bimask_backward_mask,
    check_bimask_training,
    check_permutation_scores,
)

torch = pytest.importorskip("torch")
import nmsim.torch as nt  # noqa: E402
from nmsim.torch import bimask  # noqa: E402
from nmsim.torch.conformance import run_suite  # noqa: E402


@pytest.mark.parametrize("layout", ["linear", "channels", "flat"])
@pytest.mark.parametrize("rank", ["survivors", "masked_magnitude"])
def test_backward_mask_equals_nmref(layout, rank):
    def impl(w, forward, permutation, n, m):
        return bimask.backward_mask(
            torch.from_numpy(w),
            torch.from_numpy(forward),
            torch.from_numpy(permutation),
            n,
            m,
            layout=layout,
            rank=rank,
        ).numpy()

    check_bimask_backward_mask(impl, layout=layout, rank=rank, quick=layout == "flat")


@pytest.mark.parametrize("criterion", ["kept", "eligible"])
@pytest.mark.parametrize("layout", ["linear", "channels"])
def test_permutation_scores_equal_nmref(criterion, layout):
    def impl(forward, permutations, n, m, criterion):
        return bimask.score_permutations(
            torch.from_numpy(forward),
            torch.from_numpy(permutations),
            n,
            m,
            criterion=criterion,
            layout=layout,
        ).numpy()

    check_permutation_scores(impl, criterion=criterion, layout=layout)


def test_scores_are_chunked_without_changing_them(monkeypatch):
    rng = np.random.default_rng(0)
    forward = reference.forward_mask(rng.standard_normal((32, 16)), 2, 4)
    permutations = np.stack([rng.permutation(32) for _ in range(50)])
    whole = bimask.score_permutations(
        torch.from_numpy(forward), torch.from_numpy(permutations), 2, 4
    )
    monkeypatch.setattr(bimask, "_CHUNK_BYTES", 32 * 16 * 3)
    chunked = bimask.score_permutations(
        torch.from_numpy(forward), torch.from_numpy(permutations), 2, 4
    )
    assert torch.equal(whole, chunked)
    expected = reference.score_permutations(forward, permutations, 2, 4)
    np.testing.assert_array_equal(whole.numpy(), expected)


@pytest.mark.slow
@given(
    seed=st.integers(0, 2**32 - 1),
    identity=st.booleans(),
    criterion=st.sampled_from(["kept", "eligible"]),
)
def test_search_equals_nmref_for_the_same_rng(seed, identity, criterion):
    weights = np.random.default_rng(seed).integers(-2, 3, (16, 8)).astype(np.float32)
    expected = reference.search_permutation(
        weights, 2, 4, candidates=12, rng=seed, include_identity=identity, criterion=criterion
    )
    got = bimask.search_permutation(
        torch.from_numpy(weights),
        2,
        4,
        candidates=12,
        rng=seed,
        include_identity=identity,
        criterion=criterion,
    )
    np.testing.assert_array_equal(got.permutation, expected.permutation)
    np.testing.assert_array_equal(got.candidate_scores, expected.candidate_scores)
    assert (got.score, got.best_index) == (expected.score, expected.best_index)


def test_errors_match_the_rules():
    weight = torch.randn(6, 8)
    forward = nt.magnitude_mask(weight, 2, 4)
    with pytest.raises(ValueError, match="out_channels must be a multiple of m"):
        bimask.backward_mask(weight, forward, torch.arange(6), 2, 4)
    weight = torch.randn(8, 8)
    forward = nt.magnitude_mask(weight, 2, 4)
    with pytest.raises(ValueError, match="permutation"):
        bimask.backward_mask(weight, forward, torch.zeros(8, dtype=torch.int64), 2, 4)
    with pytest.raises(ValueError, match="only 0 and 1"):
        bimask.backward_mask(weight, forward.float() * 2, torch.arange(8), 2, 4)
    with pytest.raises(ValueError, match="NaN"):
        bimask.backward_mask(torch.full((8, 8), float("nan")), forward, torch.arange(8), 2, 4)
    with pytest.raises(TypeError, match="float16/bfloat16/float32/float64"):
        bimask.backward_mask(weight.int(), forward, torch.arange(8), 2, 4)


def _refusal(function, *args, **kwargs) -> tuple[type, str]:
    with pytest.raises((TypeError, ValueError)) as caught:
        function(*args, **kwargs)
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize(
    "arguments",
    [
        {"candidates": np.array([[0.0, 1, 2, 3, 4, 5, 6, 7.5]])},  # would truncate to a permutation
        {"candidates": np.arange(8)},  # not (K, out)
        {"candidates": -1, "rng": 0},
        {"candidates": 0, "rng": 0},
        {"candidates": 2, "rng": None},
        {"candidates": 2, "rng": 0, "criterion": "most"},
    ],
)
def test_search_refuses_what_nmref_refuses_with_its_words(arguments):
    """The candidates are drawn and checked by one function of nmref's for both paths."""
    weight = np.random.default_rng(0).standard_normal((8, 8))
    expected = _refusal(reference.search_permutation, weight, 2, 4, **arguments)
    tensors = {
        key: torch.from_numpy(value) if isinstance(value, np.ndarray) else value
        for key, value in arguments.items()
    }
    assert _refusal(bimask.search_permutation, torch.from_numpy(weight), 2, 4, **tensors) == (
        expected
    )


def test_search_accepts_explicit_candidates_in_any_container():
    weight = np.random.default_rng(1).standard_normal((8, 8))
    drawn = np.stack([np.random.default_rng(k).permutation(8) for k in range(3)])
    expected = reference.search_permutation(weight, 2, 4, candidates=drawn, include_identity=True)
    for candidates in (drawn, drawn.tolist(), torch.from_numpy(drawn).to(torch.int32)):
        got = bimask.search_permutation(
            torch.from_numpy(weight), 2, 4, candidates=candidates, include_identity=True
        )
        np.testing.assert_array_equal(got.candidates, expected.candidates)
        np.testing.assert_array_equal(got.candidate_scores, expected.candidate_scores)
    with pytest.raises(ValueError, match=r"rank='largest' must be one of"):
        bimask.backward_mask(
            torch.from_numpy(weight), torch.ones(8, 8), torch.arange(8), 2, 4, rank="largest"
        )


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bimask_layers_follow_the_per_gemm_contract(dtype):
    report = run_suite("bimask training step", dtype, "cpu")
    assert report.ok and report.cases >= 100, str(report)


def test_bimask_layer_search_updates_the_permutation_and_the_backward_mask():
    torch.manual_seed(0)
    layer = nt.SparseLinear(16, 32, pattern="2:4", method="bimask", seed=7)
    # the layer searched at step 0 with its own generator (the authors' CIFAR schedule)
    first = reference.search_permutation(
        layer.weight.detach().numpy(), 2, 4, candidates=10, rng=np.random.default_rng(7)
    )
    assert torch.equal(layer.permutation, torch.from_numpy(first.permutation))
    result = layer.update_permutation(rng=3, candidates=20)
    assert torch.equal(layer.permutation, torch.from_numpy(result.permutation))
    weight = layer.weight.detach().numpy()
    expected = reference.backward_mask(
        weight, reference.forward_mask(weight, 2, 4), result.permutation, 2, 4
    )
    np.testing.assert_array_equal(layer.backward_mask().numpy(), expected)
    assert layer.backward_mask().sum() == result.score  # criterion "kept" = |B|


def test_bimask_conv_input_gradient_uses_the_backward_mask():
    torch.manual_seed(1)
    conv = nt.SparseConv2d(8, 8, 3, padding=1, pattern="2:4", method="bimask", decay=0.0)
    conv.update_permutation(rng=0, candidates=10)
    images = torch.randn(2, 8, 5, 5, requires_grad=True)
    conv(images).sum().backward()
    backward_weight = torch.where(conv.backward_mask(), conv.weight.detach(), 0.0)
    images_reference = images.detach().clone().requires_grad_(True)
    torch.nn.functional.conv2d(images_reference, backward_weight, padding=1).sum().backward()
    assert torch.equal(images.grad, images_reference.grad)
    assert bool((conv.backward_mask() <= conv.mask()).all())


def test_sparsify_with_bimask_skips_layers_whose_outputs_do_not_fill_blocks():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 6))
    result = nt.sparsify(model, "bimask", "2:4")
    assert result.replaced == ("0",)
    assert result.skipped == (("1", "6 output channels: not a multiple of m=4"),)
    model(torch.randn(3, 8)).sum().backward()


def test_training_kit_rejects_a_layer_using_the_forward_mask_for_dx():
    def uni_directional(x, w, dy, permutation, n, m):
        layer = nt.SparseLinear(
            w.shape[1],
            w.shape[0],
            bias=False,
            pattern=(n, m),
            method="srste",
            decay=0.25,
            dtype=torch.float64,
        )
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(w))
        inputs = torch.from_numpy(x).requires_grad_(True)
        y = layer(inputs)
        y.backward(torch.from_numpy(dy))
        return y.detach().numpy(), inputs.grad.numpy(), layer.weight.grad.numpy()

    report = check_bimask_training(uni_directional, raise_on_failure=False)
    assert not report.ok and "dY (W ⊙ B)" in str(report)
