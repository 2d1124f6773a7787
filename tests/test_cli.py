"""Tests of the ``nmref`` command line (in-process through ``main`` and as a module)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nmref
from nmref.cli import main
from nmref.io.checkpoints import iter_tensors, write_tensors

ROOT = Path(__file__).resolve().parents[1]


def _checkpoint(path: Path) -> Path:
    rng = np.random.default_rng(7)
    tensors = {
        "fc.weight": rng.standard_normal((8, 16)).astype(np.float32),
        "fc.bias": rng.standard_normal(8).astype(np.float32),
        "conv.weight": rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
        "steps": np.arange(8, dtype=np.int64).reshape(2, 4),
    }
    return write_tensors(path, tensors)


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_mask_then_check(tmp_path, capsys, suffix):
    weights = _checkpoint(tmp_path / f"w{suffix}")
    masks = tmp_path / f"m{suffix}"
    assert main(["mask", str(weights), "--pattern", "2:4", "-o", str(masks)]) == 0
    records = {r.name: r.array for r in iter_tensors(masks)}
    # 1-D and integer tensors are skipped and reported.
    assert set(records) == {"fc.weight", "conv.weight"}
    assert "skipped 2 tensor(s)" in capsys.readouterr().err
    source = {r.name: r.array for r in iter_tensors(weights)}
    for name, mask in records.items():
        np.testing.assert_array_equal(mask, nmref.magnitude_mask(source[name], 2, 4))
    assert main(["check", str(masks), "--pattern", "2:4"]) == 0
    assert "OK: 2 tensor(s) keep exactly 2 of every 4" in capsys.readouterr().out
    # The weights themselves are dense: check must fail on them.
    assert main(["check", str(weights), "--pattern", "2:4", "--include", "fc"]) == 1


def test_mask_npy_and_apply(tmp_path):
    weights = write_tensors(tmp_path / "w.npy", {"w": np.arange(16.0).reshape(2, 8) - 7})
    out = tmp_path / "masked.npy"
    assert main(["mask", str(weights), "--pattern", "1:4", "--apply", "-o", str(out)]) == 0
    (record,) = iter_tensors(out)
    np.testing.assert_array_equal(
        record.array, [[-7, 0, 0, 0, -3, 0, 0, 0], [0, 0, 0, 4, 0, 0, 0, 8]]
    )


def test_check_names_the_first_violating_tensor_and_group(tmp_path, capsys):
    mask = np.zeros((4, 8), dtype=bool)
    mask[:, [0, 1, 4, 5]] = True
    mask[2, 6] = True  # row 2, group 1 keeps 3
    path = write_tensors(
        tmp_path / "m.npz", {"good": np.array([[1, 1, 0, 0], [0, 1, 0, 1]], bool), "bad": mask}
    )
    assert main(["check", str(path), "--pattern", "2:4"]) == 1
    error = capsys.readouterr().err
    assert "tensor 'bad'" in error and "group 1 of row 2" in error and "keeps 3 of 4" in error
    assert main(["check", str(path), "--pattern", "2:4", "--include", "good"]) == 0
    assert main(["check", str(path), "--pattern", "3:4", "--relaxed", "--exclude", "good"]) == 0


def test_check_reports_conv_groups_in_original_coordinates(tmp_path, capsys):
    weights = np.ones((4, 8, 3, 3), dtype=np.float32)
    mask = nmref.magnitude_mask(weights, 2, 4)
    mask[1, 4, 2, 0] = ~mask[1, 4, 2, 0]
    path = write_tensors(tmp_path / "m.npz", {"conv": mask})
    assert main(["check", str(path), "--pattern", "2:4"]) == 1
    assert "entries from index (1, 4, 2, 0)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["mask", "{w}", "--pattern", "5:4", "-o", "{d}/o.npz"],
            "argument --pattern: '5:4' is not an N:M pattern: N=5 must be <= M=4",
        ),
        (["mask", "{w}", "--pattern", "2:4", "-o", "{w}"], "is an input file"),
        (["mask", "{d}/missing.npz", "--pattern", "2:4", "-o", "{d}/o.npz"], "does not exist"),
        (["mask", "{w}", "--pattern", "2:3", "-o", "{d}/o.npz"], "multiple of m=3"),
        (["mask", "{w}", "--pattern", "2:4", "-o", "{d}/o.bin"], "must end in one of"),
        (
            ["mask", "{w}", "--pattern", "2:4", "-o", "{d}/o.npz", "--include", "nothing"],
            "passes --include 'nothing'",
        ),
        (["check", "{w}", "--pattern", "2:4", "--include", "("], "invalid regular expression"),
    ],
)
def test_errors_are_one_line_without_traceback(tmp_path, capsys, arguments, message):
    weights = _checkpoint(tmp_path / "w.npz")
    argv = [a.format(w=weights, d=tmp_path) for a in arguments]
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse usage errors
        status = exit_.code
    assert status == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error
    assert not (tmp_path / "o.npz").exists()


def test_existing_output_needs_force(tmp_path, capsys):
    weights = _checkpoint(tmp_path / "w.npz")
    out = tmp_path / "o.npz"
    assert main(["mask", str(weights), "--pattern", "2:4", "-o", str(out)]) == 0
    assert main(["mask", str(weights), "--pattern", "1:4", "-o", str(out)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert main(["mask", str(weights), "--pattern", "1:4", "-o", str(out), "--force"]) == 0


def test_demo_runs(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path)]) == 0
    output = capsys.readouterr().out
    assert "OK: 2 tensor(s) keep exactly 2 of every 4" in output


@pytest.mark.slow
def test_python_dash_m_from_another_directory(tmp_path):
    environment = dict(os.environ)
    # Works installed (CI) and from a source tree alike.
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), environment.get("PYTHONPATH")])
    )
    result = subprocess.run(
        [sys.executable, "-m", "nmref", "demo", "--out", str(tmp_path)],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "keep exactly 2 of every 4" in result.stdout


def test_transposable_mask_then_check(tmp_path, capsys):
    from nmref.transposable import transposable_weight_mask

    rng = np.random.default_rng(3)
    weights = write_tensors(
        tmp_path / "w.npz",
        {
            "fc.weight": rng.standard_normal((16, 32)).astype(np.float32),
            "conv.weight": rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
        },
    )
    masks = tmp_path / "t.npz"
    argv = ["mask", str(weights), "--pattern", "4:8", "--transposable", "-o", str(masks)]
    assert main(argv) == 0
    source = {r.name: r.array for r in iter_tensors(weights)}
    for record in iter_tensors(masks):
        expected = transposable_weight_mask(source[record.name], 4, 8)
        np.testing.assert_array_equal(record.array, expected)
    assert main(["check", str(masks), "--pattern", "4:8", "--transposable"]) == 0
    assert "in every row and column of every tile" in capsys.readouterr().out
    # A 1-D mask is N:M along rows but not along tile columns.
    one_d = tmp_path / "one_d.npz"
    assert main(["mask", str(weights), "--pattern", "4:8", "-o", str(one_d)]) == 0
    capsys.readouterr()
    assert main(["check", str(one_d), "--pattern", "4:8", "--transposable"]) == 1
    error = capsys.readouterr().err
    assert "INVALID" in error and "tile (" in error and "column counts" in error


def test_transposable_greedy_passes_only_the_relaxed_check(tmp_path, capsys):
    weights = write_tensors(
        tmp_path / "w.npz", {"w": np.random.default_rng(5).standard_normal((64, 64))}
    )
    greedy = tmp_path / "g.npz"
    argv = ["mask", str(weights), "--pattern", "4:8", "--transposable", "--method", "greedy"]
    assert main([*argv, "-o", str(greedy)]) == 0
    assert main(["check", str(greedy), "--pattern", "4:8", "--transposable", "--relaxed"]) == 0
    # The keep-form greedy under-fills some tile on this input (exact check fails).
    assert main(["check", str(greedy), "--pattern", "4:8", "--transposable"]) == 1


def test_transposable_check_prints_the_optimality_gap_given_the_weights(tmp_path, capsys):
    from nmref.transposable import optimality_gap

    weights = np.random.default_rng(8).standard_normal((32, 32)).astype(np.float32)
    source = write_tensors(tmp_path / "w.npz", {"w": weights})
    for method in ("exact", "greedy"):
        out = tmp_path / f"{method}.npz"
        argv = ["mask", str(source), "--pattern", "4:8", "--transposable", "--method", method]
        assert main([*argv, "-o", str(out)]) == 0
        capsys.readouterr()
        check = ["check", str(out), "--pattern", "4:8", "--transposable", "--relaxed"]
        assert main([*check, "--weights", str(source)]) == 0
        printed = capsys.readouterr().out
        (record,) = iter_tensors(out)
        gap = optimality_gap(np.abs(weights), record.array, 4, 8).total
        assert f"w: optimality gap {gap:.6g}" in printed
        assert (gap == 0) == (method == "exact")
    assert main(["check", str(out), "--pattern", "4:8", "--weights", str(source)]) == 2
    assert "--weights needs --transposable" in capsys.readouterr().err


def test_include_nomatch_blames_the_filter_not_the_dtypes(tmp_path: Path, capsys) -> None:
    """Issue 20: ``--include nomatch`` said "need ndim >= 2 and a float dtype"."""
    weights = tmp_path / "w.npz"
    write_tensors(weights, {"w": np.ones((8, 8), dtype=np.float32)})
    assert (
        main(
            [
                "mask",
                str(weights),
                "--pattern",
                "2:4",
                "--include",
                "nomatch",
                "-o",
                str(tmp_path / "m.npz"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "passes --include 'nomatch' (1 tensor(s) filtered out by name)" in err
    assert not (tmp_path / "m.npz").exists()


def test_check_on_a_greedy_transposable_mask_says_relaxed_exists(tmp_path: Path, capsys) -> None:
    """Issue 20: ``nmref check`` on a greedy (under-filled) mask failed without naming --relaxed."""
    from nmref.transposable import transposable_mask

    scores = np.abs(np.random.default_rng(1).standard_normal((8, 8)))
    greedy = transposable_mask(scores, 2, 4, method="greedy")
    assert greedy.sum() < 32  # under-filled: this is the case the message is for
    path = tmp_path / "g.npz"
    write_tensors(path, {"w": greedy.astype(np.float32)})
    for extra in (["--transposable"], []):
        assert main(["check", str(path), "--pattern", "2:4", *extra]) == 1
        assert "--relaxed accepts at most N kept" in capsys.readouterr().err
    assert main(["check", str(path), "--pattern", "2:4", "--transposable", "--relaxed"]) == 0


def test_cli_errors_speak_flags_not_python_arguments(tmp_path: Path, capsys) -> None:
    """Issue 20: CLI errors said ``remainder='pad'`` instead of ``--remainder pad``."""
    weights = tmp_path / "odd.npz"
    write_tensors(weights, {"w": np.ones((8, 6), dtype=np.float32)})
    assert main(["mask", str(weights), "--pattern", "2:4", "-o", str(tmp_path / "o.npz")]) == 2
    err = capsys.readouterr().err
    assert "--remainder pad" in err and "remainder='pad'" not in err
    assert "m=4" in err  # not a flag: left as it is


def test_nmsim_errors_speak_flags_too(capsys) -> None:
    from nmsim.cli import main as nmsim_main

    assert (
        nmsim_main(["gemm", "--gpu", "a100", "-m", "64", "-n", "64", "-k", "64", "--sparse", "4:8"])
        == 2
    )
    err = capsys.readouterr().err
    assert "--incompatible dense" in err and "incompatible='dense'" not in err
    assert "--sparse 4:8" in err


def test_check_relaxed_weights_never_prints_a_negative_gap(tmp_path: Path, capsys) -> None:
    """Issue 20: ``nmref check --relaxed --weights`` printed negative gaps for greedy masks
    (``s=np.abs(np.random.default_rng(1).standard_normal((8,8)))``, greedy 2:4 -> -0.1308)."""
    from nmref.transposable import transposable_mask

    scores = np.abs(np.random.default_rng(1).standard_normal((8, 8)))
    greedy = transposable_mask(scores, 2, 4, method="greedy")
    weights, masks = tmp_path / "w.npz", tmp_path / "g.npz"
    write_tensors(weights, {"w": scores})
    write_tensors(masks, {"w": greedy.astype(np.float64)})
    argv = [
        "check",
        str(masks),
        "--pattern",
        "2:4",
        "--transposable",
        "--relaxed",
        "--weights",
        str(weights),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    gap = float(out.split("optimality gap ")[1].split(" ")[0])
    assert gap >= 0 and "at most 2 per row and column" in out
