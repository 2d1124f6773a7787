"""Training-FLOP accounting: reproductions, per-layer formulas, conventions, tracing."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmref.patterns import Pattern
from nmsim.cli import main
from nmsim.perf.flops import (
    METHODS,
    MethodOptions,
    assumption_table,
    method_phases,
    training_flops,
)
from nmsim.perf.models import MODELS, Layer, model_layers

IMAGENET = 1_281_167
PATTERNS = ["2:4", "1:4", "2:8", "1:8", "1:16", "4:8"]


def gmacs(layers: tuple[Layer, ...], roles: tuple[str, ...] | None = None) -> float:
    return sum(layer.macs for layer in layers if roles is None or layer.role in roles) / 1e9


# --------------------------------------------------------------------------- tables
def test_resnet50_forward_is_4_089_gmacs_with_0_120_in_stem_and_fc() -> None:
    layers = model_layers("resnet50")
    assert gmacs(layers) == pytest.approx(4.0892, abs=5e-5)
    assert gmacs(layers, ("stem", "head")) == pytest.approx(0.1201, abs=5e-5)
    assert [layer.name for layer in layers if layer.role != "body"] == ["conv1", "fc"]
    assert sum(layer.kind == "conv" for layer in layers) == 53


def test_resnet18_matches_the_notes() -> None:
    layers = model_layers("resnet18")
    assert gmacs(layers) == pytest.approx(1.8141, abs=5e-5)
    assert gmacs(layers, ("body",)) == pytest.approx(1.6955, abs=5e-5)


def test_transformer_tables_count_what_they_should() -> None:
    deit = model_layers("deit-small")
    # 12 blocks x (qkv, scores, values, proj, fc1, fc2) + patch embed + head
    assert len(deit) == 12 * 6 + 2
    assert gmacs(deit) == pytest.approx(4.599, abs=1e-3)
    bert = model_layers("bert-base", seq_len=128)
    per_layer = 128 * (4 * 768 * 768 + 2 * 768 * 3072) + 2 * 128 * 128 * 768
    assert sum(layer.macs for layer in bert) == 12 * per_layer + 768 * 768
    mlp = model_layers("llama-mlp", tokens=10)
    assert sum(layer.macs for layer in mlp) == 10 * 3 * 4096 * 11008


def test_model_options_and_errors() -> None:
    assert gmacs(model_layers("resnet50", image_size=448)) == pytest.approx(4 * 4.0892, rel=1e-3)
    with pytest.raises(ValueError, match="model='vgg' is unknown; built-in models: resnet18"):
        model_layers("vgg")
    with pytest.raises(ValueError, match="image_size=100 must be a multiple of 32"):
        model_layers("resnet50", image_size=100)
    with pytest.raises(ValueError, match="in_features=0 must be an integer >= 1"):
        Layer("x", "linear", 4, 0, 1)


# --------------------------------------------------------------------------- formulas
def all_sparse_options() -> MethodOptions:
    return MethodOptions(keep_dense_roles=())


@pytest.mark.parametrize("pattern", PATTERNS)
def test_per_layer_ratios_match_the_closed_forms(pattern: str) -> None:
    rho = Pattern(*map(int, pattern.split(":"))).density
    expected = {
        "dense": 1.0,
        "inference_only": 1.0,
        "forward_only": (rho + 2) / 3,
        "srste": (rho + 2) / 3,
        "transposable": (2 * rho + 1) / 3,
        "bimask": (2 * rho + 1) / 3,
        "all_sparse": rho,
        "bame": rho,
        "asp": 0.5 + 0.5 * (rho + 2) / 3,
    }
    assert set(expected) == set(METHODS)
    for method, ratio in expected.items():
        report = training_flops("llama-mlp", method, pattern, options=all_sparse_options())
        assert report.ratio == pytest.approx(ratio, rel=1e-12), method


@pytest.mark.slow
@given(
    layers=st.lists(
        st.builds(
            Layer,
            name=st.just("l"),
            kind=st.just("linear"),
            out_features=st.integers(1, 20).map(lambda x: 16 * x),
            in_features=st.integers(1, 40).map(lambda x: 16 * x),
            positions=st.integers(1, 500),
        ),
        min_size=1,
        max_size=6,
    ),
    n=st.integers(0, 16),
)
def test_ratio_is_the_mac_weighted_mean_of_layer_ratios(layers: list[Layer], n: int) -> None:
    pattern = Pattern(n, 16)
    report = training_flops(layers, "transposable", pattern, options=all_sparse_options())
    rho = n / 16
    assert report.ratio == pytest.approx((2 * rho + 1) / 3, rel=1e-12)
    manual = sum(layer.macs * (2 * rho + 1) for layer in layers)
    assert report.training_macs == pytest.approx(manual, rel=1e-12)


def test_dense_resnet50_training_is_3_1e18_flops_for_100_epochs() -> None:
    report = training_flops("resnet50", "dense", examples=IMAGENET, epochs=100)
    assert report.total_training_flops == pytest.approx(3 * 2 * 4.0892e9 * IMAGENET * 100, rel=1e-4)
    assert round(report.total_training_flops / 1e18, 1) == 3.1


@pytest.mark.parametrize(
    ("pattern", "srste", "bimask", "inference"),
    [
        ("2:4", 0.8382, 0.6765, 0.5147),
        ("1:4", 0.7573, 0.5147, 0.2720),
        ("1:16", 0.6967, 0.3934, 0.0900),
    ],
)
def test_resnet50_with_dense_stem_and_fc_matches_the_independent_table(
    pattern: str, srste: float, bimask: float, inference: float
) -> None:
    """Figures computed independently by hand from the papers' accounting (specs/flops.md)."""
    assert training_flops("resnet50", "srste", pattern).ratio == pytest.approx(srste, abs=5e-5)
    report = training_flops("resnet50", "bimask", pattern)
    assert report.ratio == pytest.approx(bimask, abs=5e-5)
    assert report.inference_ratio == pytest.approx(inference, abs=5e-5)


def test_bame_headline_needs_a_stated_assumption_never_a_constant() -> None:
    """bame.md §4.5: 2.37x vs SR-STE at 1:16 means 0.294 x dense training under this
    accounting; the all-sparse reading gives 7.7x, so BAME must charge extra dW work."""
    srste = training_flops("resnet50", "srste", "1:16").training_macs
    literal = training_flops("resnet50", "bame", "1:16")
    assert srste / literal.training_macs == pytest.approx(7.74, abs=0.01)

    def vs_srste(p: float) -> float:
        opts = MethodOptions(bame_update_overhead=p)
        return srste / training_flops("resnet50", "bame", "1:16", options=opts).training_macs

    low, high = 0.0, 1.0  # bisection for the overhead p that yields 2.37x
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if vs_srste(mid) > 2.37 else (low, mid)
    assert low == pytest.approx(0.67, abs=0.01)
    rows = assumption_table("resnet50", "1:16")
    window = next(r for r in rows if "window" in str(r["variant"]))
    assert window["ideal_vs_srste"] == pytest.approx(2.38, abs=0.01)


# --------------------------------------------------------------------------- accountings
def test_hardware_accounting_caps_each_sparse_gemm_at_2x() -> None:
    two_four = training_flops("resnet50", "transposable", "2:4", accounting="hardware")
    for pattern in ("1:8", "1:16", "2:8"):
        hard = training_flops("resnet50", "transposable", pattern, accounting="hardware")
        assert hard.training_macs == two_four.training_macs
        assert (
            training_flops("resnet50", "transposable", pattern).training_macs < hard.training_macs
        )
    incompatible = training_flops("resnet50", "transposable", "4:8", accounting="hardware")
    assert incompatible.ratio == 1.0 and any("not 2:4-compatible" in n for n in incompatible.notes)


def test_output_sparse_weight_gradient_is_dense_on_hardware() -> None:
    hard = training_flops(
        "llama-mlp", "all_sparse", "2:4", accounting="hardware", options=all_sparse_options()
    )
    assert hard.per_gemm_macs["weight_grad"] == sum(
        layer.macs for layer in model_layers("llama-mlp")
    )
    assert hard.ratio == pytest.approx((0.5 + 0.5 + 1) / 3)


# --------------------------------------------------------------------------- conventions
def test_first_layer_input_grad_flag() -> None:
    counted = training_flops("resnet50", "dense")
    skipped = training_flops(
        "resnet50", "dense", options=MethodOptions(count_first_layer_input_grad=False)
    )
    stem = model_layers("resnet50")[0].macs
    assert counted.dense_training_macs - skipped.dense_training_macs == stem
    assert any("first layer" in note for note in skipped.notes)


def test_dense_layers_are_configurable_and_indivisible_sparse_layers_raise() -> None:
    default = training_flops("resnet50", "srste", "2:4")
    head_sparse = training_flops(
        "resnet50", "srste", "2:4", options=MethodOptions(keep_dense_roles=("stem",))
    )
    assert head_sparse.training_macs < default.training_macs
    assert not default.layers[-1].sparse and head_sparse.layers[-1].sparse
    by_name = training_flops(
        "resnet50", "srste", "2:4", options=MethodOptions(keep_dense_names=("layer1.0.conv1",))
    )
    assert by_name.training_macs > default.training_macs
    with pytest.raises(ValueError, match="layer 'conv1': reduction length 147 is not a multiple"):
        training_flops("resnet50", "srste", "2:4", options=MethodOptions(keep_dense_roles=()))
    odd_out = (Layer("odd", "linear", 10, 64, 5),)
    assert training_flops(odd_out, "srste", "2:4", options=all_sparse_options()).ratio < 1
    with pytest.raises(ValueError, match="out_features=10 is not a multiple of M=4"):
        training_flops(odd_out, "bimask", "2:4", options=all_sparse_options())


def test_attention_products_stay_dense_and_keep_three_times_forward() -> None:
    report = training_flops("deit-small", "all_sparse", "2:4")
    attention = [r for r in report.layers if r.role == "attention"]
    assert attention and not any(r.sparse for r in attention)
    assert report.dense_training_macs == pytest.approx(3 * report.dense_forward_macs)
    for row in attention:
        assert row.input_grad_macs == 2 * row.forward_macs and row.weight_grad_macs == 0


def test_phases_sum_to_one_and_asp_has_a_dense_phase() -> None:
    for method in METHODS:
        phases = method_phases(method, "2:4", MethodOptions(bame_window=0.25))
        assert math.isclose(sum(p.fraction for p in phases), 1.0)
    asp = method_phases("asp", "2:4", MethodOptions(asp_dense_fraction=0.3))
    assert [p.fraction for p in asp] == [0.3, 0.7]
    assert asp[0].densities.forward == 1.0 and asp[1].densities.forward == 0.5


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: training_flops("resnet50", "magic"), "method='magic' is unknown"),
        (lambda: training_flops("resnet50", "srste", "5:4"), "n=5 must be <= m=4"),
        (lambda: training_flops("resnet50", "srste", accounting="real"), "accounting='real'"),
        (lambda: training_flops([], "srste"), "model has no layers"),
        (lambda: MethodOptions(bame_window=1.5), "bame_window=1.5"),
        (lambda: MethodOptions(keep_dense_roles=("classifier",)), "'classifier' is not one of"),
        (lambda: training_flops("resnet50", "dense", epochs=0), "epochs=0"),
        (lambda: training_flops("resnet50", "dense", epochs=math.nan), "epochs=nan"),
        (lambda: training_flops("resnet50", "dense", examples=math.inf), "examples=inf"),
    ],
)
def test_bad_input_is_named(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]


# --------------------------------------------------------------------------- CLI
def test_flops_cli_json_parses(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "flops",
                "--model",
                "resnet50",
                "--method",
                "bimask",
                "--pattern",
                "1:16",
                "--json",
                "--compare",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["ideal"]["ratio"] == pytest.approx(0.3934, abs=5e-5)
    assert data["hardware"]["ratio"] == pytest.approx(0.6765, abs=5e-5)
    assert any(row["method"] == "bame" for row in data["assumptions"])


def test_flops_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flops", "--model", "resnet18", "--method", "srste", "--layers"]) == 0
    out = capsys.readouterr().out
    assert "training FLOP reduction" in out and "layer4.1.conv2" in out


def test_every_builtin_model_runs_through_every_method() -> None:
    for model in MODELS:
        for method in METHODS:
            report = training_flops(model, method, "2:4")
            assert 0 < report.ratio <= 1.0
            json.dumps(report.as_dict())


# --------------------------------------------------------------------------- torch tracing
@pytest.mark.slow
def test_layers_from_torch_traces_convs_linears_and_the_rest() -> None:
    torch = pytest.importorskip("torch")
    from nmsim.perf.models import layers_from_torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
            self.grouped = torch.nn.Conv2d(8, 16, 3, padding=1, groups=2)
            self.proj = torch.nn.Linear(16, 32)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.grouped(self.stem(x))  # (B, 16, 8, 8)
            tokens = x.flatten(2).transpose(1, 2)  # (B, 64, 16)
            attention = tokens @ tokens.transpose(1, 2)  # (B, 64, 64): untraced matmul
            h = self.proj(attention @ tokens)  # (B, 64, 32)
            return self.head(h.mean(1))

    layers = layers_from_torch(Net(), torch.zeros(2, 3, 16, 16))
    by_name = {layer.name: layer for layer in layers}
    assert by_name["stem"].role == "stem" and by_name["stem"].macs == 8 * 27 * 64
    assert by_name["stem"].input_positions == 256 and by_name["stem"].kernel_area == 9
    assert by_name["grouped"].count == 2 and by_name["grouped"].macs == 16 * 4 * 9 * 64
    assert by_name["proj"].macs == 32 * 16 * 64
    assert by_name["head"].role == "head" and by_name["head"].macs == 10 * 32
    assert by_name["untraced matmuls"].macs == 2 * 64 * 64 * 16
    report = training_flops(
        layers,
        "srste",
        "2:4",
        options=MethodOptions(keep_dense_roles=("stem", "head", "other")),
        model_name="net",
    )
    assert report.model == "net" and report.ratio < 1


@pytest.mark.slow
def test_layers_from_torch_never_drops_untraced_work_that_does_not_divide_by_the_batch() -> None:
    """Regression: 105 weight-only MACs with batch 2 used to vanish from the table silently."""
    torch = pytest.importorskip("torch")
    from nmsim.perf.models import layers_from_torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.left = torch.nn.Parameter(torch.ones(3, 5))
            self.right = torch.nn.Parameter(torch.ones(5, 7))
            self.proj = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            merged = self.left @ self.right  # (3, 7): independent of the batch
            return self.proj(x) + merged.sum()

    with pytest.raises(ValueError, match=r"105 untraced MACs .* not divisible by batch=2"):
        layers_from_torch(Net(), torch.zeros(2, 8))
    layers = layers_from_torch(Net(), torch.zeros(1, 8))
    assert sum(layer.macs for layer in layers) == 8 * 4 + 105


def test_bame_overhead_from_a_schedule_charges_what_nmref_bame_computes() -> None:
    """dW density rho + p (1 - rho) with p from the schedule == nmref.bame's own fraction."""
    from nmref.bame import BameConfig, weight_gradient_fraction
    from nmsim.perf.flops import bame_update_overhead

    layers = model_layers("llama-mlp", tokens=8)
    for n, m, steps, (t_i, t_f, interval), candidates in [
        (2, 4, 6, (0, 4, 2), 1.0),
        (1, 4, 1140, (0, 855, 20), 1.0),
        (1, 16, 1000, (10, 700, 7), 0.4),
        (2, 8, 50, (60, 90, 5), 1.0),  # no update step
    ]:
        config = BameConfig(n, m, t_i=t_i, t_f=t_f, update_interval=interval)
        p = bame_update_overhead(steps, config, candidates)
        expected = weight_gradient_fraction(steps, config, candidates)
        (phase,) = method_phases("bame", f"{n}:{m}", MethodOptions(bame_update_overhead=p))
        assert phase.densities.weight_grad == pytest.approx(expected, rel=1e-12)
        report = training_flops(
            layers,
            "bame",
            f"{n}:{m}",
            options=MethodOptions(keep_dense_roles=(), bame_update_overhead=p),
        )
        assert report.per_gemm_macs["weight_grad"] == pytest.approx(
            expected * sum(layer.macs for layer in layers), rel=1e-12
        )
    with pytest.raises(TypeError, match=r"must be an nmref\.bame\.BameConfig"):
        bame_update_overhead(10, {"t_i": 0})
    with pytest.raises(ValueError, match="total_steps=0"):
        bame_update_overhead(0, BameConfig(2, 4))
