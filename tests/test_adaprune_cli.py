"""``nmref adaprune`` (issue 35, item 4) and the calibration reader it shares with ``nmsim report``.

Certificates, not only outputs: the written weights are valid N:M by ``nmref check`` and by
``nmref.nm_violations``, they are the library's ``adaprune_layer`` result for the same layer,
the reconstructed error never exceeds the mask-only one, and every refusal is one line, exit
2, with nothing written. The calibration reader's streamed statistics equal the statistics
of all rows at once (``specs/adaprune.md`` A5).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nmref.adaprune import InputGram, adaprune_layer, relative_output_error
from nmref.cli import main
from nmref.io.calibration import CalibrationData
from nmref.masks import nm_violations

DIGITS = Path(__file__).resolve().parents[1] / "nmsim" / "data" / "digits_mlp.safetensors"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        status = main(["adaprune", "--quiet", *argv])
    except SystemExit as stop:  # argparse's own refusals
        status = stop.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _one_line(status: int, err: str) -> str:
    assert status == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _layer(tmp_path: Path, out: int = 8, inputs: int = 16, rows: int = 40, seed: int = 0):
    """A model ``l.weight``/``l.bias`` and keyed calibration inputs for it."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((out, inputs)).astype(np.float32)
    bias = rng.standard_normal(out).astype(np.float32)
    x = rng.standard_normal((rows, inputs))
    np.savez(tmp_path / "model.npz", **{"l.weight": weight, "l.bias": bias})
    np.savez(tmp_path / "calib.npz", l=x)
    return weight, bias, x


def _digits_calibration(path: Path, rows: int = 200) -> dict[str, np.ndarray]:
    """Each layer's inputs on the first ``rows`` digits images (the model's activations),
    saved keyed by module or weight name (both are looked up); returned by weight name."""
    from safetensors.numpy import load_file

    datasets = pytest.importorskip("sklearn.datasets")
    params = {k: v.astype(np.float64) for k, v in load_file(DIGITS).items()}
    x = datasets.load_digits().data[:rows] / 16.0
    h1 = np.maximum(x @ params["fc1.weight"].T + params["fc1.bias"], 0)
    h2 = np.maximum(h1 @ params["fc2.weight"].T + params["fc2.bias"], 0)
    np.savez(path, **{"fc1": x, "fc2.weight": h1, "fc3": h2})
    return {"fc1.weight": x, "fc2.weight": h1, "fc3.weight": h2}


# ---------------------------------------------------------------------------------------------
# Results: valid, the library's, never worse than masking
# ---------------------------------------------------------------------------------------------


def test_the_digits_mlp_becomes_valid_2_4_and_every_layer_fits_better_than_masking(
    tmp_path, capsys
):
    calibration = _digits_calibration(tmp_path / "calib.npz")
    out = tmp_path / "out.safetensors"
    status, stdout, err = _run(
        capsys, str(DIGITS), "--pattern", "2:4", "--calibration", str(tmp_path / "calib.npz"),
        "-o", str(out), "--json",
    )  # fmt: skip
    assert status == 0, err
    document = json.loads(stdout)
    assert [layer["name"] for layer in document["layers"]] == [
        "fc1.weight",
        "fc2.weight",
        "fc3.weight",
    ]
    from safetensors.numpy import load_file

    original = load_file(DIGITS)
    written = load_file(out)
    assert sorted(written) == [f"fc{i}.{p}" for i in (1, 2, 3) for p in ("bias", "weight")]
    for layer in document["layers"]:
        name = layer["name"]
        bias_name = name.replace("weight", "bias")
        assert layer["bias"] == bias_name and layer["rows"] == 200 and layer["pattern"] == "2:4"
        assert layer["error"] <= layer["error_start"] + 1e-12
        assert layer["error"] < layer["error_masked"]
        weight = written[name]
        assert weight.dtype == np.float32  # the input's dtype
        assert len(nm_violations(weight != 0, 2, 4)) == 0
        # the library's own result for this layer, written as float32
        statistics = InputGram.empty(calibration[name].shape[1]).add(calibration[name])
        expected = adaprune_layer(original[name], statistics, 4, n=2, bias=original[bias_name])
        np.testing.assert_array_equal(weight, expected.weight.astype(np.float32))
        np.testing.assert_array_equal(written[bias_name], expected.bias.astype(np.float32))
        assert layer["error"] == pytest.approx(expected.error, rel=1e-9, abs=1e-12)
        assert layer["error_masked"] == pytest.approx(expected.error_masked, rel=1e-9)
    assert main(["check", str(out), "--pattern", "2:4"]) == 0  # nonzero = kept, exactly 2
    capsys.readouterr()


@pytest.mark.parametrize(
    ("mask", "check"),
    [
        ("nm", []),
        ("transposable", ["--transposable"]),
        ("at-most", ["--transposable", "--relaxed"]),
    ],
)
@pytest.mark.parametrize("reconstruct", ["exact", "adam", "none"])
def test_every_mask_and_reconstruction_writes_a_valid_mask_and_never_fits_worse(
    tmp_path, capsys, mask, check, reconstruct
):
    _layer(tmp_path, out=8, inputs=16, rows=60)
    out = tmp_path / "out.npz"
    status, stdout, err = _run(
        capsys, str(tmp_path / "model.npz"), "--pattern", "2:4", "--calibration",
        str(tmp_path / "calib.npz"), "-o", str(out), "--mask", mask, "--reconstruct",
        reconstruct, "--json",
    )  # fmt: skip
    assert status == 0, err
    (layer,) = json.loads(stdout)["layers"]
    written = sorted(np.load(out))
    if reconstruct == "none":  # nothing fitted: the start, and the bias left as it was
        assert layer["error"] == layer["error_start"] and written == ["l.weight"]
    else:
        assert layer["error"] <= layer["error_start"] + 1e-12
        assert written == ["l.bias", "l.weight"]
    if reconstruct == "adam":  # the certificate: Adam never beats the exact optimum
        assert layer["gap"] >= -1e-9 * max(1.0, layer["exact_objective"])
    assert main(["check", str(out), "--pattern", "2:4", *check]) == 0
    capsys.readouterr()


def test_a_model_folder_gives_a_sharded_folder_with_its_config(tmp_path, capsys):
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "model"
    folder.mkdir()
    rng = np.random.default_rng(3)
    save_file(
        {"a.weight": rng.standard_normal((8, 16)).astype(np.float32),
         "a.bias": rng.standard_normal(8).astype(np.float32),
         "norm.weight": np.ones(16, np.float32)},
        str(folder / "model.safetensors"),
    )  # fmt: skip
    (folder / "config.json").write_text('{"model_type": "toy"}')
    np.save(tmp_path / "x.npy", rng.standard_normal((30, 16)).astype(np.float32))
    out = tmp_path / "converted"
    status, stdout, err = _run(
        capsys, str(folder), "--pattern", "2:4", "--calibration", str(tmp_path / "x.npy"),
        "-o", str(out),
    )  # fmt: skip
    assert status == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(load_file(out / "model.safetensors")) == ["a.bias", "a.weight"]
    assert "wrote 1 converted weight(s) and 1 re-fitted bias(es)" in stdout
    assert main(["check", str(out), "--pattern", "2:4"]) == 0
    capsys.readouterr()


def test_a_shared_npy_calibrates_the_layers_of_matching_in_and_the_rest_need_a_flag(
    tmp_path, capsys
):
    rng = np.random.default_rng(4)
    np.savez(
        tmp_path / "m.npz",
        **{"a.weight": rng.standard_normal((8, 16)), "b.weight": rng.standard_normal((4, 8))},
    )
    np.save(tmp_path / "x.npy", rng.standard_normal((20, 16)))
    argv = [str(tmp_path / "m.npz"), "--pattern", "2:4", "--calibration", str(tmp_path / "x.npy")]
    status, _, err = _run(capsys, *argv, "-o", str(tmp_path / "o.npz"))
    line = _one_line(status, err)
    assert "no calibration inputs for 'b.weight'" in line and "has in=8" in line
    assert "--skip-uncalibrated" in line and not (tmp_path / "o.npz").exists()
    status, stdout, err = _run(
        capsys, *argv, "-o", str(tmp_path / "o.npz"), "--skip-uncalibrated", "--json"
    )
    assert status == 0, err
    a, b = json.loads(stdout)["layers"]
    assert a["rows"] == 20 and a["error"] < a["error_masked"]
    assert b["rows"] is None and b["error"] is None and b["reconstructed"] is False
    with np.load(tmp_path / "o.npz") as written:
        # masked with the pruned mass absorbed (the default start), not fitted
        from nmref.adaprune import absorb_pruned_mass, starting_mask

        original = np.load(tmp_path / "m.npz")["b.weight"]
        kept = starting_mask(original, 2, 4)
        np.testing.assert_array_equal(written["b.weight"], absorb_pruned_mass(original, kept, 4))


def test_auto_n_keeps_an_already_2_4_layer_at_2_4_and_a_dense_one_dense(tmp_path, capsys):
    rng = np.random.default_rng(5)
    sparse = rng.standard_normal((8, 16)) * np.tile([1.0, 0.0, 1.0, 0.0], (8, 4))
    np.savez(tmp_path / "m.npz", **{"s.weight": sparse, "d.weight": rng.standard_normal((8, 16))})
    np.save(tmp_path / "x.npy", rng.standard_normal((24, 16)))
    status, stdout, err = _run(
        capsys, str(tmp_path / "m.npz"), "--pattern", "auto:4", "--calibration",
        str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz"), "--json",
    )  # fmt: skip
    assert status == 0, err
    layers = {layer["name"]: layer for layer in json.loads(stdout)["layers"]}
    assert layers["s.weight"]["pattern"] == "2:4"
    assert layers["s.weight"]["choice"]["reason"] == "structured"
    assert layers["s.weight"]["error"] == pytest.approx(0.0, abs=1e-12)  # lossless
    assert layers["d.weight"]["pattern"] == "4:4"  # the rule keeps a dense layer dense


def test_the_table_prints_the_errors_before_and_after(tmp_path, capsys):
    weight, _, x = _layer(tmp_path)
    status, stdout, err = _run(
        capsys, str(tmp_path / "model.npz"), "--pattern", "2:4", "--calibration",
        str(tmp_path / "calib.npz"), "-o", str(tmp_path / "o.npz"), "--no-absorb",
    )  # fmt: skip
    assert status == 0, err
    masked = relative_output_error(weight, np.where(_mask(weight), weight, 0), x)
    line = next(line for line in stdout.splitlines() if line.startswith("l.weight"))
    assert f"{masked:.4f}" in line.split()  # the mask-only figure, as the library gives it
    assert "wrote 1 converted weight(s) and 1 re-fitted bias(es)" in stdout


def _mask(weight: np.ndarray) -> np.ndarray:
    from nmref.adaprune import starting_mask

    return starting_mask(weight, 2, 4)


def test_fixed_bias_writes_no_bias_and_float16_stays_float16(tmp_path, capsys):
    rng = np.random.default_rng(6)
    np.savez(
        tmp_path / "m.npz",
        **{"l.weight": rng.standard_normal((8, 16)).astype(np.float16), "l.bias": np.ones(8)},
    )
    np.save(tmp_path / "x.npy", rng.standard_normal((24, 16)))
    status, _, err = _run(
        capsys, str(tmp_path / "m.npz"), "--pattern", "2:4", "--calibration",
        str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz"), "--fixed-bias",
    )  # fmt: skip
    assert status == 0, err
    with np.load(tmp_path / "o.npz") as written:
        assert list(written) == ["l.weight"] and written["l.weight"].dtype == np.float16


# ---------------------------------------------------------------------------------------------
# Writing: atomic, no overwrite without --force, never over an input
# ---------------------------------------------------------------------------------------------


def test_an_existing_output_needs_force_and_an_input_is_never_overwritten(tmp_path, capsys):
    _layer(tmp_path)
    out = tmp_path / "o.npz"
    out.write_bytes(b"previous")
    argv = [str(tmp_path / "model.npz"), "--pattern", "2:4", "--calibration"]
    status, _, err = _run(capsys, *argv, str(tmp_path / "calib.npz"), "-o", str(out))
    assert "exists; pass --force" in _one_line(status, err)
    assert out.read_bytes() == b"previous"
    for target in ("calib.npz", "model.npz"):  # refused even with --force
        before = (tmp_path / target).read_bytes()
        status, _, err = _run(
            capsys, *argv, str(tmp_path / "calib.npz"), "-o", str(tmp_path / target), "--force"
        )
        assert "is an input file" in _one_line(status, err)
        assert (tmp_path / target).read_bytes() == before
    status, _, err = _run(capsys, *argv, str(tmp_path / "calib.npz"), "-o", str(out), "--force")
    assert status == 0, err
    assert sorted(np.load(out)) == ["l.bias", "l.weight"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the argument and the rule, exit 2, nothing written
# ---------------------------------------------------------------------------------------------


def _bad_calibration(tmp_path: Path, case: str) -> str:
    x = np.random.default_rng(7).standard_normal((40, 16))
    if case == "nan":
        x[3, 2] = np.nan
        np.savez(tmp_path / "bad.npz", l=x)
    elif case == "inf":
        x[39, 15] = -np.inf
        np.save(tmp_path / "bad.npy", x)
        return str(tmp_path / "bad.npy")
    elif case == "empty":
        np.savez(tmp_path / "bad.npz", l=np.zeros((0, 16)))
    elif case == "in":
        np.savez(tmp_path / "bad.npz", l=x[:, :7])
    elif case == "1-D":
        np.savez(tmp_path / "bad.npz", l=x[0])
    elif case == "complex":
        np.savez(tmp_path / "bad.npz", l=x.astype(complex))
    elif case == "suffix":
        (tmp_path / "bad.txt").write_text("a sentence\n")
        return str(tmp_path / "bad.txt")
    elif case == "missing":
        return str(tmp_path / "absent.npz")
    elif case == "no arrays":
        np.savez(tmp_path / "bad.npz")
    return str(tmp_path / "bad.npz")


BAD_CALIBRATION = {
    "nan": "--calibration '{path}': entry 'l' contains NaN at row 3, column 2",
    "inf": "--calibration '{path}' contains an infinity at row 39, column 15",
    "empty": "--calibration '{path}': entry 'l' is empty (0 rows)",
    "in": "--calibration '{path}': entry 'l' has 7 features per row but the weight has in=16",
    "1-D": "--calibration '{path}': entry 'l' must be 2-D [rows, in]",
    "complex": "entry 'l' must be real numbers (bool, integer or float), got dtype complex128",
    "suffix": "--calibration '{path}' must end in one of .npy, .npz, .safetensors",
    "missing": "--calibration: path='{path}' does not exist",
    "no arrays": "--calibration '{path}' holds no arrays",
}


@pytest.mark.parametrize("case", sorted(BAD_CALIBRATION))
def test_bad_calibration_is_one_line_exit_2_and_nothing_is_written(tmp_path, capsys, case):
    _layer(tmp_path)
    path = _bad_calibration(tmp_path, case)
    status, out, err = _run(
        capsys, str(tmp_path / "model.npz"), "--pattern", "2:4", "--calibration", path,
        "-o", str(tmp_path / "o.npz"),
    )  # fmt: skip
    line = _one_line(status, err)
    assert line.startswith("nmref: error: ") and BAD_CALIBRATION[case].format(path=path) in line
    assert out == "" and not (tmp_path / "o.npz").exists()


BAD_ARGUMENTS = [
    (["--pattern", "0:4"], "argument --pattern: '0:4': N=0 keeps nothing"),
    (["--pattern", "5:4"], "argument --pattern: '5:4' is not an N:M pattern: N=5 must be <= M=4"),
    (["--pattern", "auto:0"], "'auto:0' is not a pattern: auto:M needs a whole M >= 1"),
    (["--pattern", "2:4", "--ridge", "-1"], "--ridge -1.0 must be finite and >= 0"),
    (["--pattern", "2:4", "--ridge", "nan"], "--ridge nan must be finite and >= 0"),
    (["--pattern", "2:4", "--ridge", "0.1", "--reconstruct", "adam"], "--ridge applies to"),
    (["--pattern", "2:4", "--confidence", "0.5"], "--confidence applies to --pattern auto:M"),
    (["--pattern", "auto:4", "--confidence", "1"], "--confidence 1.0 must be in (0, 1)"),
    (["--pattern", "2:4", "--seed", "3"], "--seed applies to --reconstruct adam only"),
    (["--pattern", "2:4", "--mask", "transposable", "--remainder", "pad"], "--remainder pad"),
    (["--pattern", "2:4", "--mask", "sgd"], "argument --mask: invalid choice: 'sgd'"),
    (["--pattern", "2:8", "--mask", "transposable"], "both dimensions must be multiples of m=8"),
    (["--pattern", "2:4", "--include", "nothing"], "no tensor of"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_ARGUMENTS, ids=[m for _, m in BAD_ARGUMENTS])
def test_bad_arguments_are_one_line_exit_2(tmp_path, capsys, extra, message):
    _layer(tmp_path, out=12, inputs=12)
    status, out, err = _run(
        capsys, str(tmp_path / "model.npz"), "--calibration", str(tmp_path / "calib.npz"),
        "-o", str(tmp_path / "o.npz"), *extra,
    )  # fmt: skip
    line = _one_line(status, err)
    assert message in line, line
    assert out == "" and not (tmp_path / "o.npz").exists()


def test_a_convolution_is_refused_by_name_with_the_exclude_to_use(tmp_path, capsys):
    np.savez(tmp_path / "m.npz", **{"conv.weight": np.ones((8, 4, 3, 3), np.float32)})
    np.save(tmp_path / "x.npy", np.ones((5, 36)))
    status, _, err = _run(
        capsys, str(tmp_path / "m.npz"), "--pattern", "2:4", "--calibration",
        str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz"),
    )  # fmt: skip
    line = _one_line(status, err)
    assert "tensor 'conv.weight' (8, 4, 3, 3): AdaPrune takes 2-D weights [out, in]" in line
    assert "--exclude '^conv\\.weight$'" in line


def test_a_float16_weight_that_outgrows_its_dtype_is_refused(tmp_path, capsys):
    # reconstruction may grow a kept weight past float16's 65504: refused, not written as inf
    weight = np.full((4, 4), 60000, np.float16)
    np.savez(tmp_path / "m.npz", **{"l.weight": weight})
    x = np.ones((8, 4))
    np.save(tmp_path / "x.npy", x)
    status, _, err = _run(
        capsys, str(tmp_path / "m.npz"), "--pattern", "2:4", "--calibration",
        str(tmp_path / "x.npy"), "-o", str(tmp_path / "o.npz"), "--no-absorb",
    )  # fmt: skip
    assert "overflow float16" in _one_line(status, err)
    assert not (tmp_path / "o.npz").exists()


# ---------------------------------------------------------------------------------------------
# The calibration reader (nmref.io.calibration), shared with nmsim report
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".safetensors"])
def test_streamed_statistics_equal_the_statistics_of_all_rows(tmp_path, monkeypatch, suffix):
    import nmref.io.calibration as calibration

    x = np.random.default_rng(8).standard_normal((103, 6)).astype(np.float32)
    path = tmp_path / f"c{suffix}"
    if suffix == ".npy":
        np.save(path, x)
    elif suffix == ".npz":
        np.savez(path, fc=x)
    else:
        from safetensors.numpy import save_file

        save_file({"fc": x}, str(path))
    monkeypatch.setattr(calibration, "BAND_BYTES", 10 * 6 * 8)  # bands of 10 rows
    data = CalibrationData.open(path)
    entry = data.entry_for("fc.weight", 6)
    assert entry is not None
    streamed = data.gram(entry, 6)
    whole = InputGram.of(x)
    assert streamed.count == 103
    np.testing.assert_allclose(streamed.mean, whole.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(streamed.scatter, whole.scatter, rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(data.inputs(entry, 6), x.astype(np.float64))
    x[57, 4] = np.nan  # the message names the row in the file, not in the band
    np.save(tmp_path / "n.npy", x)
    nan = CalibrationData.open(tmp_path / "n.npy")
    with pytest.raises(ValueError, match=r"contains NaN at row 57, column 4"):
        nan.gram(nan.entries[0], 6)


def test_a_keyed_file_looks_up_the_weight_name_then_the_module_name(tmp_path):
    np.savez(tmp_path / "c.npz", **{"fc1": np.ones((2, 3)), "fc2.weight": np.ones((2, 4))})
    data = CalibrationData.open(tmp_path / "c.npz")
    assert data.entry_for("fc1.weight", 3).name == "fc1"
    assert data.entry_for("fc2.weight", 4).name == "fc2.weight"
    assert data.entry_for("fc3.weight", 3) is None
    assert data.entry_for("fc1", 3).name == "fc1"
    assert "has no entry named 'fc3.weight' or 'fc3'" in data.missing("fc3.weight", 3)
