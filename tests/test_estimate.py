"""End-to-end step estimates and the CLI commands that print them."""

from __future__ import annotations

import json

import pytest

from nmsim.cli import main
from nmsim.perf.estimate import estimate_step
from nmsim.perf.flops import MethodOptions
from nmsim.perf.models import Layer


def test_dense_method_is_exactly_dense() -> None:
    e = estimate_step("resnet50", "dense", "2:4", "a100", 64, "fp16")
    assert e.step_s == e.dense_step_s and e.compress_s == 0
    assert e.time_reduction == 1.0 and e.flop_reduction_ideal == 1.0


@pytest.mark.parametrize("method", ["srste", "transposable", "bimask", "bame", "all_sparse"])
def test_time_reduction_trails_the_flop_reduction(method: str) -> None:
    e = estimate_step("resnet50", method, "1:16", "a100", 256, "fp16")
    assert e.time_reduction < e.flop_reduction_hardware <= e.flop_reduction_ideal
    assert e.gemm_time_reduction < 2.0
    assert e.per_gemm_s["weight_grad"] == e.dense_per_gemm_s["weight_grad"]  # never sparse
    assert e.compress_s > 0


def test_incompatible_pattern_is_never_faster() -> None:
    e = estimate_step("bert-base", "transposable", "4:8", "h100-sxm", 32, "bf16")
    assert e.gemm_s == e.dense_gemm_s
    assert e.flop_reduction_ideal > 1.4  # the paper-style count still shows a saving
    assert any("not accelerated" in note for note in e.notes)


def test_amdahl_bounds_the_step_speedup() -> None:
    for fraction in (0.0, 0.25, 0.6):
        e = estimate_step(
            "llama-mlp", "transposable", "2:4", "h100-sxm", 4, "bf16", non_gemm_fraction=fraction
        )
        assert e.non_gemm_s == pytest.approx(e.dense_gemm_s * fraction / (1 - fraction))
        assert e.time_reduction <= e.gemm_time_reduction + 1e-12
        if fraction:
            assert e.time_reduction < 1 / fraction


def test_inference_mode_times_only_the_forward() -> None:
    e = estimate_step("llama-mlp", "srste", "2:4", "a100", 2, "fp16", mode="inference")
    assert set(e.per_gemm_s) == {"forward"}
    assert e.flop_reduction_ideal == pytest.approx(2.0)
    assert 1.0 < e.gemm_time_reduction < 2.0 and e.compress_s == 0
    trained_dense = estimate_step("llama-mlp", "inference_only", "2:4", "a100", 2, "fp16")
    assert trained_dense.time_reduction == 1.0
    deployed = estimate_step(
        "llama-mlp", "inference_only", "2:4", "a100", 2, "fp16", mode="inference"
    )
    assert deployed.gemm_s == e.gemm_s  # pruned after dense training: same deployed model
    asp = estimate_step("llama-mlp", "asp", "2:4", "a100", 2, "fp16", mode="inference")
    assert asp.gemm_s == e.gemm_s


def test_batch_accepts_numpy_integers_and_rejects_other_types() -> None:
    import numpy as np

    plain = estimate_step("llama-mlp", "srste", "2:4", "a100", 8, "fp16")
    numpy_int = estimate_step("llama-mlp", "srste", "2:4", "a100", np.int64(8), "fp16")
    assert numpy_int.step_s == plain.step_s and numpy_int.batch == 8
    for bad in (8.0, "8", True):
        with pytest.raises(TypeError, match="must be a positive integer"):
            estimate_step("llama-mlp", "srste", "2:4", "a100", bad, "fp16")  # type: ignore[arg-type]


def test_first_layer_input_grad_is_skipped_when_asked() -> None:
    layers = (Layer("a", "linear", 256, 256, 64, "stem"), Layer("b", "linear", 256, 256, 64))
    counted = estimate_step(layers, "dense", "2:4", "a100", 8, "fp16")
    skipped = estimate_step(
        layers,
        "dense",
        "2:4",
        "a100",
        8,
        "fp16",
        options=MethodOptions(count_first_layer_input_grad=False),
    )
    assert skipped.dense_per_gemm_s["input_grad"] < counted.dense_per_gemm_s["input_grad"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch": 0}, "batch=0 must be a positive integer"),
        ({"non_gemm_fraction": 1.0}, r"non_gemm_fraction=1\.0 must be in"),
        ({"mode": "serve"}, "mode='serve'"),
        ({"gpu": "tpu"}, "gpu='tpu' is unknown"),
        ({"dtype": "fp8", "gpu": "a100"}, "no tensor-core path for dtype='fp8'"),
        ({"method": "lottery"}, "method='lottery' is unknown"),
    ],
)
def test_bad_input_is_named(kwargs: dict[str, object], match: str) -> None:
    call: dict[str, object] = {
        "model": "resnet18",
        "method": "srste",
        "pattern": "2:4",
        "gpu": "a100",
        "batch": 8,
        "dtype": "fp16",
    }
    call.update(kwargs)
    with pytest.raises(ValueError, match=match):
        estimate_step(**call)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- CLI
def test_gemm_cli_json_parses(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "gemm",
                "--gpu",
                "h100-sxm",
                "-m",
                "4096",
                "-n",
                "4096",
                "-k",
                "4096",
                "--dtype",
                "bf16",
                "--sparse",
                "2:4",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["sparse"]["executed_pattern"] == "2:4"
    assert 1.0 < data["speedup"] < 2.0
    assert data["dense"]["time_s"] / data["sparse"]["time_s"] == pytest.approx(data["speedup"])


def test_gemm_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "gemm",
                "--gpu",
                "a100",
                "-m",
                "4096",
                "-n",
                "8",
                "-k",
                "4096",
                "--dtype",
                "fp16",
                "--sparse",
                "1:16",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "speedup dense/sparse" in out and "not exploited" in out


@pytest.mark.parametrize(("m", "n", "k"), [(4096, 4096, 4096), (8, 8, 64), (64, 8, 4096)])
def test_gemm_cli_speedup_line_uses_the_unrounded_ratio_format(
    m: int, n: int, k: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table's speedup line is format_ratio's: never "1.000x" for a ratio that is not 1."""
    from nmsim.cli.tables import format_ratio
    from nmsim.perf.gemm import gemm_time

    argv = ["gemm", "--gpu", "a100", "-m", str(m), "-n", str(n), "-k", str(k), "--sparse", "2:4"]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("speedup"))
    ratio = gemm_time("a100", m, n, k).time_s / gemm_time("a100", m, n, k, sparse="2:4").time_s
    assert line == f"speedup dense/sparse: {format_ratio(ratio, digits=3)}"
    assert ratio == 1 or line != "speedup dense/sparse: 1.000x"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gemm", "--gpu", "v100", "-m", "8", "-n", "8", "-k", "8"], "gpu='v100' is unknown"),
        (["gemm", "--gpu", "a100", "-m", "0", "-n", "8", "-k", "8"], "m=0 must be a positive"),
        (
            ["gemm", "--gpu", "a100", "-m", "8", "-n", "8", "-k", "8", "--dtype", "fp8"],
            "no tensor-core path",
        ),
        (
            ["gemm", "--gpu", "a100", "-m", "8", "-n", "8", "-k", "8", "--sparse", "4:8"],
            "not accelerated",
        ),
        (["flops", "--model", "alexnet"], "model='alexnet' is unknown"),
    ],
)
def test_cli_errors_are_clear(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_gpus_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {g["key"] for g in data} >= {"h100-sxm", "b200"}
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "unconfirmed" in out and "rtx-4090" in out and "*" in out


def test_estimate_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "estimate",
                "--model",
                "resnet50",
                "--method",
                "bimask",
                "--pattern",
                "2:4",
                "--gpu",
                "a100",
                "--batch",
                "64",
                "--dtype",
                "fp16",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["time_reduction"] < data["flop_reduction_ideal"]
    assert (
        main(
            [
                "estimate",
                "--model",
                "deit-small",
                "--method",
                "srste",
                "--gpu",
                "l40s",
                "--batch",
                "32",
                "--non-gemm-fraction",
                "0.4",
            ]
        )
        == 0
    )
    assert "non-GEMM share of the dense step assumed 40%" in capsys.readouterr().out


# --------------------------------------------------------------------------- oracle
def test_step_equals_the_gemms_and_passes_written_out() -> None:
    """One linear layer, every term recomputed from gemm_time and compress_time_s directly.

    Transposable masks are N:M both ways, so one prune + compress pass yields W and W^T (as
    PyTorch's ``_sparse_semi_structured_tile`` does, and as the calibration point
    a100-mlp-train-weight24 charges it: 16 MiB for two 8 MiB weights); Bi-Mask's separate
    backward mask needs its own pass. SR-STE compresses W only.
    """
    from nmsim.perf.calibration import compress_time_s
    from nmsim.perf.gemm import gemm_time

    out, inp, tokens, batch = 512, 256, 64, 4
    layer = (Layer("w", "linear", out, inp, tokens),)
    rows = tokens * batch

    def t(m: int, n: int, k: int, sparse: str | None = None, **kw: int) -> float:
        return gemm_time("a100", m, n, k, dtype="fp16", sparse=sparse, **kw).time_s

    forward = (out, rows, inp)
    input_grad = (inp, rows, out)
    weight_grad = (out, inp, rows)
    dense = {
        "forward": t(*forward, b_elements=inp * rows),
        "input_grad": t(*input_grad, c_elements=inp * rows),
        "weight_grad": t(*weight_grad, b_elements=inp * rows),
    }
    one_pass = compress_time_s("a100", out * inp * 2)
    options = MethodOptions(keep_dense_roles=())
    for method, sparse_gemms, passes in [
        ("srste", ("forward",), 1),
        ("transposable", ("forward", "input_grad"), 1),
        ("bimask", ("forward", "input_grad"), 2),
    ]:
        e = estimate_step(layer, method, "2:4", "a100", batch, "fp16", options=options)
        assert e.dense_per_gemm_s == pytest.approx(dense, rel=1e-12)
        for gemm in ("forward", "input_grad", "weight_grad"):
            shape = {"forward": forward, "input_grad": input_grad, "weight_grad": weight_grad}[gemm]
            extra = (
                {"b_elements": inp * rows} if gemm != "input_grad" else {"c_elements": inp * rows}
            )
            expected = t(*shape, "2:4" if gemm in sparse_gemms else None, **extra)
            assert e.per_gemm_s[gemm] == pytest.approx(expected, rel=1e-12), (method, gemm)
        assert e.compress_s == pytest.approx(passes * one_pass, rel=1e-12), method
