"""``nmsim report --calibration DATA`` (issue 35, item 3; ``specs/report.md`` R11).

The output error of every method's mask, mask only and after exact reconstruction, in the
JSON (checked against the schema), the table, the CSV and the plots. The figures are checked
against ``nmref.adaprune`` called directly on masks computed independently here; a report
with calibration is the report without it plus the new fields (nothing else changes), and a
report without calibration carries none of them.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from nmref.adaprune import InputGram, reconstruct_exact, relative_output_error
from nmref.io.checkpoints import TensorInfo
from nmref.masks import magnitude_mask
from nmsim.cli import main
from nmsim.report.build import ReportSettings, build_report, default_checkpoint_path
from tests.report_schema import SCHEMA, validate

METHODS = ("1d", "transposable", "greedy", "bimask")


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Calibration inputs of the packaged digits MLP (its activations on 200 images), keyed by
    module name; the model's parameters (float64); the inputs by weight name."""
    from safetensors.numpy import load_file

    datasets = pytest.importorskip("sklearn.datasets")
    params = {k: v.astype(np.float64) for k, v in load_file(default_checkpoint_path()).items()}
    x = datasets.load_digits().data[:200] / 16.0
    h1 = np.maximum(x @ params["fc1.weight"].T + params["fc1.bias"], 0)
    h2 = np.maximum(h1 @ params["fc2.weight"].T + params["fc2.bias"], 0)
    path = tmp_path_factory.mktemp("calibration") / "digits_inputs.npz"
    np.savez(path, fc1=x, fc2=h1, fc3=h2)
    return path, params, {"fc1.weight": x, "fc2.weight": h1, "fc3.weight": h2}


@pytest.fixture(scope="module")
def calibrated(digits) -> dict:
    return build_report(None, ReportSettings(methods=METHODS), calibration=str(digits[0]))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["report", "--quiet", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _masks(weight: np.ndarray) -> dict[str, np.ndarray]:
    """Every method's output mask, computed here from the solvers (not the report's code)."""
    from nmref.transposable import transposable_mask

    masks = {"1d": magnitude_mask(weight, 2, 4, layout="linear")}
    masks["bimask"] = masks["1d"]  # its layer computes with the forward (1-D) mask
    if weight.shape[0] % 4 == 0:
        # |w| as the report ranks it (the stored float32): the same kernels, compiled once
        scores = np.abs(weight.astype(np.float32))
        masks["transposable"] = transposable_mask(scores, 2, 4, method="exact")
        masks["transposable_at_most"] = transposable_mask(scores, 2, 4, fill="at_most")
        masks["greedy"] = transposable_mask(scores, 2, 4, method="greedy")
    return masks


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------


def test_the_json_has_the_new_fields_and_validates_against_the_schema(calibrated, digits):
    assert validate(calibrated, SCHEMA) == []
    block = calibrated["calibration"]
    assert block == {
        "source": str(digits[0]),
        "kind": "tensors",
        "sentences": None,
        "reconstruction": block["reconstruction"],
        "tensors": 3,
    }
    assert list(calibrated)[:5] == ["schema", "generator", "checkpoint", "settings", "calibration"]
    for entry in calibrated["tensors"]:
        if entry["status"] != "ok":
            assert "output_error" not in entry
            continue
        error = entry["output_error"]
        assert error["samples"] == 200 and error["reason"] is None
        assert error["inputs"] == entry["name"].removesuffix(".weight")  # the module's key
        assert error["bias"] == entry["name"].replace("weight", "bias")
        assert list(error["methods"]) == list(METHODS)


def test_the_schema_rejects_damaged_output_errors(calibrated):
    damaged = json.loads(json.dumps(calibrated))
    entry = next(e for e in damaged["tensors"] if e["status"] == "ok")
    entry["output_error"]["methods"]["1d"]["masked"] = -0.5
    entry["output_error"]["methods"]["1d"]["extra"] = 1
    damaged["calibration"]["kind"] = "pixels"
    problems = validate(damaged, SCHEMA)
    assert sorted(problems) == [
        "$.calibration.kind: 'pixels' not in ['tensors', 'array', 'text']",
        f"$.tensors[{damaged['tensors'].index(entry)}].output_error.methods.1d: matches none "
        "of anyOf",  # a negative error and an unknown field: not an output_error_result
    ], problems
    entry["output_error"]["methods"]["1d"].pop("extra")
    assert len(validate(damaged, SCHEMA)) == 2  # the negative error alone is refused too


def test_the_figures_are_nmref_adaprune_s_on_independently_computed_masks(calibrated, digits):
    _, params, inputs = digits
    checked = 0
    for entry in calibrated["tensors"]:
        if entry["status"] != "ok":
            continue
        name = entry["name"]
        weight, bias, x = params[name], params[name.replace("weight", "bias")], inputs[name]
        statistics = InputGram.empty(x.shape[1]).add(x)  # what the report streams: one band
        masks = _masks(weight)
        for method, result in entry["output_error"]["methods"].items():
            if "not_applicable" in entry["methods"][method]:  # fc3's 10 rows fill no tile
                assert result is None
                continue
            fields = [("", masks[method])]
            if method == "transposable":
                fields.append(("at_most_", masks["transposable_at_most"]))
            for prefix, mask in fields:
                masked = np.where(mask, weight, 0.0)
                # the same statistics: the same numbers, bit for bit
                assert result[prefix + "masked"] == relative_output_error(
                    weight, masked, statistics
                )
                fitted = reconstruct_exact(weight, mask, statistics, bias=bias)
                assert result[prefix + "reconstructed"] == relative_output_error(
                    weight, fitted.weight, statistics, bias=bias, new_bias=fitted.bias
                )
                # and, from the inputs themselves, the same figures to rounding
                direct = reconstruct_exact(weight, mask, x, bias=bias)
                assert result[prefix + "masked"] == pytest.approx(
                    relative_output_error(weight, masked, x), rel=1e-9
                )
                assert result[prefix + "reconstructed"] == pytest.approx(
                    relative_output_error(
                        weight, direct.weight, x, bias=bias, new_bias=direct.bias
                    ),
                    rel=1e-6,
                    abs=1e-7,
                )
                assert result[prefix + "reconstructed"] <= result[prefix + "masked"]
                assert result[prefix + "rank_deficient_rows"] == int(
                    np.count_nonzero(fitted.rank < fitted.kept)
                )
                checked += 1
    assert checked == 5 + 5 + 1  # fc1, fc2: five masks; fc3 (10 rows fill no tile): 1-D only


def test_calibration_adds_fields_and_changes_nothing_else(calibrated):
    plain = build_report(None, ReportSettings(methods=METHODS))
    assert "calibration" not in plain
    assert all("output_error" not in entry for entry in plain["tensors"])
    stripped = json.loads(json.dumps(calibrated))
    del stripped["calibration"]
    for entry in stripped["tensors"]:
        entry.pop("output_error", None)
    assert json.dumps(stripped) == json.dumps(plain)
    from nmsim.report.files import csv_text

    def rows(report):
        return list(csv.DictReader(io.StringIO(csv_text(report))))

    new = {"calibration_samples", "output_error_reason"}
    for with_errors, without in zip(rows(calibrated), rows(plain), strict=True):
        extra = set(with_errors) - set(without)
        assert {c for c in extra if not c.endswith(("output_error", "reconstructed_error"))} == new
        assert {k: v for k, v in with_errors.items() if k not in extra} == without


def test_without_calibration_the_command_prints_no_new_column(capsys):
    status, table, _ = run(capsys, "--methods", "1d")
    assert status == 0 and "out err" not in table and "output error" not in table
    status, text, _ = run(capsys, "--methods", "1d", "--format", "csv")
    assert status == 0 and "output_error" not in text.splitlines()[0]


# ---------------------------------------------------------------------------------------------
# Table, CSV, plots, workers
# ---------------------------------------------------------------------------------------------


def test_table_csv_and_plot_show_the_json_numbers(digits, tmp_path, capsys):
    path = str(digits[0])
    out = tmp_path / "out"
    status, stdout, err = run(
        capsys, "--methods", "1d,transposable", "--calibration", path, "--out", str(out)
    )
    assert status == 0, err
    report = json.loads((out / "report.json").read_text())
    assert (out / "output_error.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = next(line for line in stdout.splitlines() if "┃ tensor" in line)
    for title in ("out err 1-D", "out err T-exact", "out err T-at-most"):
        assert title in header
    with open(out / "report.csv", newline="") as handle:
        csv_rows = {row["name"]: row for row in csv.DictReader(handle)}
    for entry in report["tensors"]:
        if entry["status"] != "ok":
            continue
        row = next(line for line in stdout.splitlines() if entry["name"] in line)
        result = entry["output_error"]["methods"]["1d"]
        assert f"{result['masked']:.3f} -> {result['reconstructed']:.3f}" in row
        assert float(csv_rows[entry["name"]]["1d_output_error"]) == result["masked"]
        assert float(csv_rows[entry["name"]]["1d_reconstructed_error"]) == result["reconstructed"]
        assert csv_rows[entry["name"]]["calibration_samples"] == "200"
    assert "does not fit" in next(line for line in stdout.splitlines() if "fc3.weight" in line)
    assert "out err X: relative output error" in stdout


def test_a_shared_npy_measures_the_layers_of_its_in_and_says_why_not_the_others(
    digits, tmp_path, capsys
):
    np.save(tmp_path / "pixels.npy", digits[2]["fc1.weight"])
    status, stdout, err = run(
        capsys, "--methods", "1d", "--calibration", str(tmp_path / "pixels.npy"), "--json"
    )
    assert status == 0, err
    report = json.loads(stdout)
    assert validate(report, SCHEMA) == []
    assert report["calibration"]["kind"] == "array" and report["calibration"]["tensors"] == 1
    errors = {e["name"]: e["output_error"] for e in report["tensors"] if e["status"] == "ok"}
    assert errors["fc1.weight"]["reason"] is None and errors["fc1.weight"]["samples"] == 200
    assert errors["fc1.weight"]["inputs"] == "pixels"
    assert "has 64 features per row but 'fc2.weight' has in=256" in errors["fc2.weight"]["reason"]
    assert errors["fc2.weight"]["methods"] == {} and errors["fc2.weight"]["samples"] is None
    status, table, _ = run(capsys, "--methods", "1d", "--calibration", str(tmp_path / "pixels.npy"))
    assert "no output error (--calibration" in table and "fc2.weight" in table


@pytest.mark.slow
def test_two_workers_give_the_same_document_with_calibration(digits, capsys):
    argv = ["--methods", "1d,bimask", "--calibration", str(digits[0]), "--json"]
    _, one, _ = run(capsys, *argv, "--workers", "1")
    _, two, _ = run(capsys, *argv, "--workers", "2")
    assert one == two and "output_error" in one


def test_peak_memory_streams_the_rows_and_never_holds_them(tmp_path):
    # 40,000 rows of 256 features: 41 MB as float32 on disk, 82 MB as float64 in memory. The
    # statistics are streamed in 8 MiB bands: the peak is a few bands and the 256 x 256 matrix.
    import tracemalloc

    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({"l.weight": rng.standard_normal((16, 256)).astype(np.float32)},
              str(tmp_path / "m.safetensors"))  # fmt: skip
    rows = rng.standard_normal((40_000, 256)).astype(np.float32)
    save_file({"l": rows}, str(tmp_path / "x.safetensors"))
    whole = rows.size * 8
    del rows
    settings = ReportSettings(methods=("1d",))
    tracemalloc.start()
    try:
        report = build_report(
            str(tmp_path / "m.safetensors"), settings, calibration=str(tmp_path / "x.safetensors")
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report["tensors"][0]["output_error"]["samples"] == 40_000
    assert peak < whole / 2, (peak, whole)


# ---------------------------------------------------------------------------------------------
# Sentences for the built-in MiniLM (nmsim.encoders.minilm's interface, stood in for)
# ---------------------------------------------------------------------------------------------


def _stand_in_encoder(monkeypatch, calls: list[int]) -> None:
    module = types.ModuleType("nmsim.encoders.minilm")

    def load_minilm():
        return "model"

    def layer_inputs(model, texts, max_rows=None):
        calls.append(len(texts))
        rows = np.arange(3 * len(texts) * 4, dtype=np.float64).reshape(3 * len(texts), 4)
        shared = np.sin(rows)
        return {"a.weight": shared, "b.weight": shared, "unmeasured.weight": shared}

    module.load_minilm, module.layer_inputs = load_minilm, layer_inputs
    monkeypatch.setitem(sys.modules, "nmsim.encoders.minilm", module)


def test_sentences_run_through_the_encoder_in_batches_into_each_layers_statistics(
    tmp_path, monkeypatch
):
    from nmsim.report import output_error

    calls: list[int] = []
    _stand_in_encoder(monkeypatch, calls)
    monkeypatch.setattr(output_error, "SENTENCE_BATCH", 2)
    (tmp_path / "s.txt").write_text("one\n\n two \nthree\nfour\nfive\n", encoding="utf-8")
    layers = [TensorInfo("a.weight", (8, 4), "float32"), TensorInfo("b.weight", (8, 4), "float32")]
    calibration = output_error.open_calibration(str(tmp_path / "s.txt"), "minilm", layers, layers)
    assert calls == [2, 2, 1] and calibration.sentences == 5 and calibration.kind == "text"
    grams = dict(calibration.grams)
    assert sorted(grams) == ["a.weight", "b.weight"]  # what no layer reads is not held
    assert grams["a.weight"].count == 15
    task = calibration.for_tensor("b.weight")
    assert [name for name, _ in task.grams] == ["b.weight"]


@pytest.mark.parametrize(
    ("checkpoint", "text", "module", "message"),
    [
        (None, "a\n", True, "a text file calibrates the built-in minilm model only"),
        ("minilm", "\n  \n", True, "holds no sentences"),
        ("minilm", b"\xff\xfe", True, "is not UTF-8 text"),
        ("minilm", "a\n", False, "sentences need the MiniLM encoder (nmsim.encoders.minilm)"),
    ],
)
def test_sentence_file_errors(tmp_path, monkeypatch, checkpoint, text, module, message):
    from nmsim.report.output_error import open_calibration

    if module:
        _stand_in_encoder(monkeypatch, [])
    else:
        monkeypatch.setitem(sys.modules, "nmsim.encoders.minilm", None)  # import fails
    path = tmp_path / "s.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    error = ImportError if not module else ValueError
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        open_calibration(str(path), checkpoint, [], [])


# ---------------------------------------------------------------------------------------------
# Bad calibration: one line, exit 2, nothing written
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("nan", "--calibration '{path}': entry 'fc2' contains NaN at row 5, column 1"),
        (
            "in",
            "--calibration '{path}': entry 'fc1' has 7 features per row but the weight has in=64",
        ),
        ("empty", "--calibration '{path}': entry 'fc1' is empty (0 rows)"),
        ("no match", "--calibration '{path}': no entry is named after a selected layer"),
        ("npy", "--calibration '{path}' has 3 features per row, the in of no selected layer"),
        ("text", "--calibration '{path}': a text file calibrates the built-in minilm model only"),
    ],
)
def test_bad_calibration_is_one_line_and_exit_2(digits, tmp_path, capsys, case, message):
    inputs = digits[2]
    path = tmp_path / "bad.npz"
    if case == "nan":
        h1 = inputs["fc2.weight"].copy()
        h1[5, 1] = np.nan
        np.savez(path, fc1=inputs["fc1.weight"], fc2=h1)
    elif case == "in":
        np.savez(path, fc1=inputs["fc1.weight"][:, :7])
    elif case == "empty":
        np.savez(path, fc1=np.zeros((0, 64)))
    elif case == "no match":
        np.savez(path, conv1=inputs["fc1.weight"])
    elif case == "npy":
        path = tmp_path / "bad.npy"
        np.save(path, np.ones((4, 3)))
    else:
        path = tmp_path / "bad.txt"
        path.write_text("a sentence\n")
    out = tmp_path / "out"
    status, stdout, err = run(
        capsys, "--methods", "1d", "--calibration", str(path), "--out", str(out)
    )
    assert status == 2 and stdout == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("nmsim: error: ")
    assert message.format(path=path) in lines[0], lines[0]
    assert not out.exists()
