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
    """The table's speedup line is format_ratio's: never "1.000x" for a ratio that is not 1.

    The point value comes first, then its prediction interval and the verdict.
    """
    from nmsim.cli.tables import format_ratio
    from nmsim.perf.gemm import gemm_time

    argv = ["gemm", "--gpu", "a100", "-m", str(m), "-n", str(n), "-k", str(k), "--sparse", "2:4"]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("speedup"))
    sparse = gemm_time("a100", m, n, k, sparse="2:4")
    ratio = gemm_time("a100", m, n, k).time_s / sparse.time_s
    assert line.startswith(f"speedup dense/sparse: {format_ratio(ratio, digits=3)} [")
    assert line.endswith(f"-> {sparse.verdict}")
    assert ratio == 1 or not line.startswith("speedup dense/sparse: 1.000x")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gemm", "--gpu", "v100", "-m", "8", "-n", "8", "-k", "8"], "--gpu v100 is unknown"),
        (["gemm", "--gpu", "a100", "-m", "0", "-n", "8", "-k", "8"], "m=0 must be a positive"),
        (
            ["gemm", "--gpu", "a100", "-m", "8", "-n", "8", "-k", "8", "--dtype", "fp8"],
            "no tensor-core path",
        ),
        (
            ["gemm", "--gpu", "a100", "-m", "8", "-n", "8", "-k", "8", "--sparse", "4:8"],
            "not accelerated",
        ),
        (["flops", "--model", "alexnet"], "--model alexnet is unknown"),
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


# --------------------------------------------------------------------------- intervals
def _measured_and_extrapolated_gpus() -> tuple[str | None, str | None]:
    """A GPU the corpus measured and one it did not (each None if there is none), bf16-capable."""
    from nmsim.perf.hardware import list_gpus
    from nmsim.perf.intervals import default_interval_table

    measured = default_interval_table().measured_gpus
    keys = [g.key for g in list_gpus() if any(p.input == "bf16" for p in g.peaks)]
    return (
        next((k for k in keys if k in measured), None),
        next((k for k in keys if k not in measured), None),
    )


def _check_intervals(e: object) -> None:
    from nmsim.perf.intervals import verdict

    assert e.gemm_s_low <= e.gemm_s <= e.gemm_s_high
    assert e.step_s_low <= e.step_s <= e.step_s_high
    assert e.gemm_time_reduction_low <= e.gemm_time_reduction <= e.gemm_time_reduction_high
    assert e.time_reduction_low <= e.time_reduction <= e.time_reduction_high
    for gemm, point in e.per_gemm_s.items():
        assert e.per_gemm_s_low[gemm] <= point <= e.per_gemm_s_high[gemm], gemm
    assert e.gemm_verdict == verdict(e.gemm_time_reduction_low, e.gemm_time_reduction_high)
    assert e.verdict == verdict(e.time_reduction_low, e.time_reduction_high)
    if e.verdict == "faster":
        assert e.time_reduction_low > 1
    elif e.verdict == "slower":
        assert e.time_reduction_high < 1
    else:
        assert e.verdict == "no gain" and e.time_reduction_low <= 1 <= e.time_reduction_high
    data = e.as_dict()
    json.dumps(data)
    for name in (
        "time_reduction_low",
        "time_reduction_high",
        "gemm_time_reduction_low",
        "gemm_time_reduction_high",
        "verdict",
        "gemm_verdict",
        "extrapolated",
        "interval_basis",
    ):
        assert name in data


@pytest.mark.parametrize(
    ("model", "method", "pattern", "gpu", "batch", "dtype", "mode"),
    [
        ("resnet50", "srste", "2:4", "a100", 64, "fp16", "train"),
        ("bert-base", "transposable", "2:4", "h100-sxm", 8, "bf16", "train"),
        ("llama-mlp", "bimask", "2:4", "a100", 2, "fp16", "train"),
        ("llama-mlp", "srste", "2:4", "h100-sxm", 1, "bf16", "inference"),
        ("bert-base", "transposable", "4:8", "h100-sxm", 8, "bf16", "train"),
    ],
)
def test_step_intervals_contain_the_point_and_the_verdicts_follow_them(
    model: str, method: str, pattern: str, gpu: str, batch: int, dtype: str, mode: str
) -> None:
    e = estimate_step(model, method, pattern, gpu, batch, dtype, mode=mode)  # type: ignore[arg-type]
    _check_intervals(e)
    if pattern == "4:8":  # not accelerated: every GEMM is a point, nothing to widen
        assert e.sparse_gemms == 0 and e.interval_basis is None
        assert e.gemm_s_low == e.gemm_s == e.gemm_s_high
    else:
        assert e.sparse_gemms > 0 and "interval" in e.interval_basis
        assert e.gemm_s_low < e.gemm_s < e.gemm_s_high
        assert e.interval_coverage is not None and 0 < e.interval_coverage < 1


def test_dense_method_has_a_point_interval() -> None:
    e = estimate_step("resnet18", "dense", "2:4", "a100", 16, "fp16")
    assert e.gemm_s_low == e.gemm_s == e.gemm_s_high
    assert e.step_s_low == e.step_s == e.step_s_high
    assert e.time_reduction_low == e.time_reduction_high == 1.0
    assert e.verdict == "no gain" and e.sparse_gemms == 0
    assert e.interval_basis is None and e.extrapolated is False


def test_step_interval_is_the_sum_of_the_gemm_interval_ends_written_out() -> None:
    """One linear layer, transposable 2:4: forward and dX sparse, dW dense.

    The sparse GEMMs' time intervals are [dense/speedup_high, dense/speedup_low] from
    gemm_time itself; the step's ends are their sums plus the point dW, non-GEMM and
    compress times.
    """
    from nmsim.perf.calibration import compress_time_s
    from nmsim.perf.gemm import gemm_time
    from nmsim.perf.intervals import verdict

    out, inp, tokens, batch = 512, 256, 64, 4
    rows = tokens * batch
    layer = (Layer("w", "linear", out, inp, tokens),)
    options = MethodOptions(keep_dense_roles=())
    e = estimate_step(layer, "transposable", "2:4", "a100", batch, "fp16", options=options)

    def g(m: int, n: int, k: int, sparse: str | None = None, **kw: int):
        return gemm_time("a100", m, n, k, dtype="fp16", sparse=sparse, **kw)

    forward = g(out, rows, inp, "2:4", b_elements=inp * rows)
    input_grad = g(inp, rows, out, "2:4", c_elements=inp * rows)
    weight_grad = g(out, inp, rows, b_elements=inp * rows).time_s
    for sparse in (forward, input_grad):
        assert sparse.speedup_low <= sparse.speedup <= sparse.speedup_high
    low = (
        forward.dense_time_s / forward.speedup_high
        + input_grad.dense_time_s / input_grad.speedup_high
        + weight_grad
    )
    high = (
        forward.dense_time_s / forward.speedup_low
        + input_grad.dense_time_s / input_grad.speedup_low
        + weight_grad
    )
    assert e.per_gemm_s_low == pytest.approx(
        {
            "forward": forward.dense_time_s / forward.speedup_high,
            "input_grad": input_grad.dense_time_s / input_grad.speedup_high,
            "weight_grad": weight_grad,
        },
        rel=1e-12,
    )
    assert e.gemm_s_low == pytest.approx(low, rel=1e-12)
    assert e.gemm_s_high == pytest.approx(high, rel=1e-12)
    dense_gemm = forward.dense_time_s + input_grad.dense_time_s + weight_grad
    assert e.dense_gemm_s == pytest.approx(dense_gemm, rel=1e-12)
    non_gemm = dense_gemm * 0.25 / 0.75
    compress = compress_time_s("a100", out * inp * 2)
    assert e.step_s_low == pytest.approx(low + non_gemm + compress, rel=1e-12)
    assert e.step_s_high == pytest.approx(high + non_gemm + compress, rel=1e-12)
    assert e.gemm_time_reduction_low == pytest.approx(dense_gemm / high, rel=1e-12)
    assert e.gemm_time_reduction_high == pytest.approx(dense_gemm / low, rel=1e-12)
    step_low = (dense_gemm + non_gemm) / (high + non_gemm + compress)
    step_high = (dense_gemm + non_gemm) / (low + non_gemm + compress)
    assert e.time_reduction_low == pytest.approx(step_low, rel=1e-12)
    assert e.time_reduction_high == pytest.approx(step_high, rel=1e-12)
    assert e.verdict == verdict(step_low, step_high)
    assert e.sparse_gemms == 2
    assert e.extrapolated is forward.extrapolated
    assert e.interval_basis == forward.interval_basis  # both GEMMs share one basis here


def _fixed_interval_table(monkeypatch: pytest.MonkeyPatch, low: float, high: float) -> None:
    """Every GPU measured, every regime with log-residual quantiles [low, high]."""
    import dataclasses

    from nmsim.perf import intervals
    from nmsim.perf.hardware import list_gpus

    base = intervals.default_interval_table()
    quantiles = intervals.ResidualQuantiles(100, low, high)
    table = dataclasses.replace(
        base,
        measured_gpus=frozenset(g.key for g in list_gpus()),
        min_n={},
        groups={},
        pooled={"small-n": quantiles, "large-n": quantiles},
        minimum_rows=1,
    )
    monkeypatch.setattr(intervals, "default_interval_table", lambda: table)


def test_verdicts_follow_the_interval_not_the_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """Independent of the shipped calibration: the interval table is fixed here."""
    big = (Layer("w", "linear", 8192, 8192, 1),)
    decode = (Layer("w", "linear", 64, 4096, 1),)
    options = MethodOptions(keep_dense_roles=())

    def run(layers: tuple[Layer, ...], batch: int):
        # decode through torch.sparse (framework level), where published decode numbers are
        return estimate_step(
            layers,
            "srste",
            "2:4",
            "a100",
            batch,
            "fp16",
            mode="inference",
            options=options,
            level="framework" if batch < 64 else "kernel",
        )

    _fixed_interval_table(monkeypatch, 0.0, 0.0)  # a zero-width interval is the point
    e = run(big, 8192)
    assert e.gemm_s_low == pytest.approx(e.gemm_s, rel=1e-12)
    assert e.gemm_s_high == pytest.approx(e.gemm_s, rel=1e-12)
    assert e.gemm_time_reduction > 1.05 and e.verdict == "faster"
    _fixed_interval_table(monkeypatch, -0.01, 0.01)
    assert run(big, 8192).verdict == "faster"
    slow = run(decode, 8)
    assert slow.gemm_time_reduction < 0.9 and slow.verdict == "slower"
    _fixed_interval_table(monkeypatch, -5.0, 5.0)  # wide enough to contain 1 either way
    assert run(big, 8192).verdict == "no gain" and run(decode, 8).verdict == "no gain"
    assert run(big, 8192).extrapolated is False


def test_an_unmeasured_gpu_is_flagged_extrapolated() -> None:
    measured, unmeasured = _measured_and_extrapolated_gpus()
    if unmeasured is None:
        pytest.skip("every GPU of the database has a corpus row")
    e = estimate_step("bert-base", "srste", "2:4", unmeasured, 8, "bf16")
    assert e.extrapolated is True and "extrapolated" in e.interval_basis
    assert any("extrapolated" in note for note in e.notes)
    _check_intervals(e)
    if measured is not None:
        m = estimate_step("bert-base", "srste", "2:4", measured, 8, "bf16")
        assert m.extrapolated is False and "extrapolated" not in m.interval_basis


def test_library_and_level_reach_every_gemm() -> None:
    """Each GEMM equals gemm_time called with the same library and level."""
    from nmsim.perf.gemm import gemm_time

    out, inp, tokens, batch = 512, 256, 64, 4
    rows = tokens * batch
    layer = (Layer("w", "linear", out, inp, tokens),)
    options = MethodOptions(keep_dense_roles=())
    for library, level in [(None, "kernel"), ("cutlass", "framework"), ("cusparselt", "framework")]:
        e = estimate_step(
            layer,
            "srste",
            "2:4",
            "a100",
            batch,
            "fp16",
            options=options,
            library=library,
            level=level,  # type: ignore[arg-type]
        )
        assert e.level == level and e.library == (library or "cusparselt")

        call = {"dtype": "fp16", "library": library, "level": level}

        def g(m: int, n: int, k: int, sparse: str | None = None, **kw: object) -> float:
            return gemm_time("a100", m, n, k, sparse=sparse, **call, **kw).time_s  # noqa: B023

        expected = {
            "forward": g(out, rows, inp, "2:4", b_elements=inp * rows),
            "input_grad": g(inp, rows, out, c_elements=inp * rows),
            "weight_grad": g(out, inp, rows, b_elements=inp * rows),
        }
        assert e.per_gemm_s == pytest.approx(expected, rel=1e-12), (library, level)
        assert e.dense_per_gemm_s["forward"] == pytest.approx(
            g(out, rows, inp, b_elements=inp * rows), rel=1e-12
        )
    with pytest.raises(ValueError, match="library='cublas'"):
        estimate_step(layer, "srste", "2:4", "a100", 4, "fp16", library="cublas")
    with pytest.raises(ValueError, match="level='host'"):
        estimate_step(layer, "srste", "2:4", "a100", 4, "fp16", level="host")  # type: ignore[arg-type]


def test_estimate_cli_prints_the_interval_and_the_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["estimate", "--model", "llama-mlp", "--method", "transposable", "--gpu", "a100"]
    argv += ["--batch", "4", "--dtype", "fp16"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] in ("faster", "slower", "no gain")
    assert data["time_reduction_low"] <= data["time_reduction"] <= data["time_reduction_high"]
    assert data["library"] == "cusparselt" and data["level"] == "kernel"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"verdict: step time {data['verdict']}" in out
    assert f"{data['interval_coverage']:.0%} interval" in out
    assert all(f"interval: {basis}" in out for basis in data["interval_basis"].split(" | "))
    assert main([*argv, "--json", "--library", "cutlass", "--level", "framework"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["library"] == "cutlass" and other["level"] == "framework"
    direct = estimate_step(
        "llama-mlp",
        "transposable",
        "2:4",
        "a100",
        4,
        "fp16",
        library="cutlass",
        level="framework",
    )
    assert other["step_s"] == direct.step_s and other["step_s_high"] == direct.step_s_high


def test_estimate_cli_says_extrapolated(capsys: pytest.CaptureFixture[str]) -> None:
    _, unmeasured = _measured_and_extrapolated_gpus()
    if unmeasured is None:
        pytest.skip("every GPU of the database has a corpus row")
    argv = ["estimate", "--model", "bert-base", "--gpu", unmeasured, "--batch", "8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("verdict:"))
    assert "extrapolated" in line
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["extrapolated"] is True
