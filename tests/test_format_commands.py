"""Tests for ``nmsim compress`` / ``nmsim inspect`` (``nmsim.cli.formats``)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from nmsim.cli import main
from nmsim.cli.formats import (
    _float_to_bf16_bits,
    convert_for_kind,
    load_compressed,
    pattern_histogram,
)
from nmsim.formats.sparse_2to4 import compress_2to4, decompress_2to4, metadata_to_positions


@pytest.fixture
def pruned(tmp_path: Path) -> Path:
    weights = np.zeros((32, 64))
    weights[:, 0::4] = np.arange(1, 17).repeat(2)[:, None] / 8  # exact in fp16/bf16
    weights[:, 3::4] = -0.5
    weights[0, 4:8] = 0  # one all-zero group
    path = tmp_path / "W.npy"
    np.save(path, weights)
    return path


def test_compress_writes_what_compress_2to4_returns(pruned: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.npz"
    assert main(["compress", str(pruned), "--dtype", "fp16", "-o", str(out)]) == 0
    data = load_compressed(out)
    dense = np.load(pruned).astype(np.float16)
    values, metadata = compress_2to4(dense, dtype_kind="fp16")
    np.testing.assert_array_equal(data["values"], values)
    np.testing.assert_array_equal(data["metadata"], metadata)
    assert (data["dtype_kind"], data["layout"], data["shape"]) == ("fp16", "cutlass_sm80", (32, 64))
    np.testing.assert_array_equal(decompress_2to4(data["values"], data["metadata"]), dense)


def test_inspect_prints_histogram_and_decoded_view(
    pruned: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.npz"
    main(["compress", str(pruned), "--dtype", "bf16", "-o", str(out), "--layout", "logical"])
    capsys.readouterr()
    assert main(["inspect", str(out), "--rows", "2", "--groups", "3"]) == 0
    text = capsys.readouterr().out
    assert "32 x 64 bf16, metadata logical" in text
    assert "1001: 0xc         511" in text  # 32 * 16 groups, one of them all zero
    assert "0011: 0xe           1" in text
    assert "under-full groups (a kept slot holds zero): 1 of 512 (1 all zero)" in text
    assert "row    0: 0xc:03 0xe:23 0xc:03" in text


def test_compress_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dense = tmp_path / "dense.npy"
    np.save(dense, np.ones((32, 64)))
    assert main(["compress", str(dense), "--dtype", "fp16", "-o", str(tmp_path / "x.npz")]) == 2
    assert "hold 4 nonzeros" in capsys.readouterr().err
    cube = tmp_path / "cube.npy"
    np.save(cube, np.zeros((2, 32, 64)))
    assert main(["compress", str(cube), "--dtype", "fp16", "-o", str(tmp_path / "x.npz")]) == 2
    assert "needs a 2-D" in capsys.readouterr().err
    fractions = tmp_path / "fractions.npy"
    np.save(fractions, np.full((16, 64), 0.5))
    assert main(["compress", str(fractions), "--dtype", "int8", "-o", str(tmp_path / "y.npz")]) == 2
    assert "integer values in [-128, 127]" in capsys.readouterr().err


def test_inspect_rejects_foreign_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.npz"
    np.savez(other, values=np.zeros(3))
    assert main(["inspect", str(other)]) == 2
    assert "not an nmsim compressed file" in capsys.readouterr().err


def test_conversions() -> None:
    converted, note = convert_for_kind(np.array([[1, -3]], dtype=np.int64), "int8")
    assert converted.dtype == np.int8 and "exactly" in note
    with pytest.raises(ValueError, match=r"\[-128, 127\]"):
        convert_for_kind(np.array([[300]]), "int8")
    converted, note = convert_for_kind(np.array([[1.0, 1 / 3]]), "fp16")
    assert converted.dtype == np.float16 and "1 of 2 values changed" in note
    bits = np.array([[0x3F80]], dtype=np.uint16)
    converted, note = convert_for_kind(bits, "bf16")
    assert converted is bits and note == "uint16 input taken as bf16 bit patterns"


def test_float64_to_bf16_has_no_double_rounding() -> None:
    # Through float32 this value becomes exactly the bf16 tie 1 + 2**-8, which ties-to-even
    # would round down to 1.0; the float64 value is above the tie, so bf16 is 1 + 2**-7.
    above = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8 - 2**-30, 1 + 2**-8])
    assert [hex(b) for b in _float_to_bf16_bits(above)] == ["0x3f81", "0xbf81", "0x3f80", "0x3f80"]


def test_pattern_histogram_fp32() -> None:
    dense = np.zeros((32, 16), dtype=np.float32)
    dense[:, 0] = 1
    _, metadata = compress_2to4(dense, dtype_kind="fp32")
    positions = metadata_to_positions(metadata, dtype_kind="fp32")
    assert pattern_histogram(positions, 2) == {"10": 32, "01": 32 * 7}


def test_subcommands_are_registered(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "compress" in text and "inspect" in text


def test_inspect_rejects_inconsistent_files_and_negative_counts(
    pruned: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression: values with half the rows of the metadata reshaped 'successfully' and
    printed a wrong histogram; negative --rows printed a 'first -1 rows' header."""
    out = tmp_path / "out.npz"
    assert main(["compress", str(pruned), "--dtype", "fp16", "-o", str(out)]) == 0
    good = dict(np.load(out))
    cases = {
        "values": ({**good, "values": good["values"][:16]}, r"values have shape \(16, 32\)"),
        "shape": (
            {**good, "shape": np.array([32, 128])},
            r"values have shape \(32, 32\); the 32 x 128 matrix needs \(32, 64\)",
        ),
        "columns": (
            {**good, "shape": np.array([32, 60])},
            r"recorded shape \(32, 60\) cannot hold fp16 data: it needs 2 dimensions and "
            r"columns divisible by 16",
        ),
        "metadata": (
            {**good, "metadata": good["metadata"][:, :2]},
            r"metadata has shape \(32, 2\)",
        ),
        "dtype": ({**good, "values": good["values"].astype(np.float32)}, "values have dtype"),
    }
    for name, (arrays, message) in cases.items():
        broken = tmp_path / f"{name}.npz"
        np.savez(broken, **arrays)
        capsys.readouterr()
        assert main(["inspect", str(broken)]) == 2, name
        assert re.search(message, capsys.readouterr().err), name
    for flag in ("--rows", "--groups"):
        assert main(["inspect", str(out), flag, "-1"]) == 2
        assert f"{flag}=-1 must be >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "dtype", "said"),
    [
        (70000.0, "fp16", "value 70000.0 at (1, 2) is outside the fp16 range (largest finite "
         "magnitude 65504)"),
        (1e39, "bf16", "value 1e+39 at (1, 2) is outside the bf16 range (largest finite "
         "magnitude 3.38953e+38)"),
        (-1e39, "fp32", "value -1e+39 at (1, 2) is outside the fp32 range (largest finite "
         "magnitude 3.40282e+38)"),
    ],
)  # fmt: skip
def test_compress_refuses_a_finite_value_that_would_become_inf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: float, dtype: str, said: str
) -> None:
    # fp16 turned 70000.0 into inf with only NumPy's RuntimeWarning, and wrote the file
    weights = np.zeros((32, 64))
    weights[1, 2] = value
    path, out = tmp_path / "W.npy", tmp_path / "out.npz"
    np.save(path, weights)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning either
        assert main(["compress", str(path), "--dtype", dtype, "-o", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"nmsim: error: {str(path)!r} as --dtype {dtype}: {said} and would become inf (1 "
        "value(s) do); scale the weights or choose a wider --dtype"
    )
    assert not out.exists()
