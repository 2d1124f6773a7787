"""Issue 37, messages: every error is one line naming the argument and the rule, exit 2, and
never a traceback (``specs/errors.md`` section 2.1).

Classes, each with the failing inputs of the issue written out:

* argument errors (``--pattern 5:4``, ``--sparse 2:4:8``, an unknown flag): argparse's usage
  dump replaced by one line; a pattern's message says ``N``/``M``, not ``n=``/``m=`` (GEMM
  sizes in ``nmsim gemm``), and a library message speaks in the running command's flags;
* FP8/FP4 safetensors read exactly; ``.npz`` members that are raw bytes, big-endian,
  encrypted or compressed with an unknown method;
* JSON and TOML nested too deep or holding a huge integer (``nmref._json_toml``);
* Ctrl-C while the command imports, and inside a Numba kernel;
* the conformance kit's transposable counterexample;
* help for every option, ``dir(nmref)``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import nmref
from nmref._json_toml import MAX_DEPTH, load_json, load_toml
from nmref.cli import main as nmref_main
from nmref.cli.messages import command_parser, in_flag_words, was_interrupted
from nmref.io.checkpoints import iter_tensors, list_tensors
from nmref.io.narrow_floats import NARROW_FLOATS, decode, decode_table
from nmsim.cli import build_parser as nmsim_parser
from nmsim.cli import main as nmsim_main

ROOT = Path(__file__).resolve().parents[1]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run a command in-process; argparse's exits count as a status."""
    try:
        status = main(argv)
    except SystemExit as stop:
        status = stop.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _one_line(status: int, err: str, expected: int = 2) -> str:
    assert status == expected, err
    assert "Traceback" not in err and "usage:" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. Argument errors: one line, in the command's own flags
# ---------------------------------------------------------------------------------------------

BAD_PATTERNS = ["5:4", "2:0", "-1:4", "2:4:8", "2", "nan:4", "0x2:4", "", "2:", ":4", "2.0:4"]
FORM = "is not an N:M pattern (N kept of every M"


def _pattern_commands(tmp_path: Path) -> list[tuple[object, list[str], str, str]]:
    """(main, argv before the value, flag as the command names it, program words)."""
    weights = tmp_path / "w.npy"
    np.save(weights, np.ones((4, 4), np.float32))
    w = str(weights)
    return [
        (nmref_main, ["mask", w, "-o", str(tmp_path / "o.npz"), "--pattern"], "--pattern", "mask"),
        (nmref_main, ["check", w, "--pattern"], "--pattern", "check"),
        (nmref_main, ["audit", w, "--pattern"], "--pattern", "audit"),
        (nmref_main, ["explain", "transposable", w, "--pattern"], "--pattern", "explain"),
        (
            nmref_main,
            ["permute", str(tmp_path), "-o", "p.npz", "--pattern"],
            "--pattern",
            "permute",
        ),
        (
            nmref_main,
            ["adaprune", w, "--calibration", w, "-o", str(tmp_path / "a.npz"), "--pattern"],
            "--pattern",
            "adaprune",
        ),
        (
            nmsim_main,
            ["gemm", "--gpu", "a100", "-m", "64", "-n", "64", "-k", "64", "--sparse"],
            "--sparse",
            "gemm",
        ),
        (nmsim_main, ["flops", "--pattern"], "--pattern", "flops"),
        (
            nmsim_main,
            ["estimate", "--gpu", "a100", "--batch", "8", "--pattern"],
            "--pattern",
            "estimate",
        ),
    ]


@pytest.mark.parametrize("value", BAD_PATTERNS)
def test_a_bad_pattern_is_one_line_naming_the_flag_and_the_rule_in_every_command(
    tmp_path, capsys, value
):
    # issue 37: `--pattern 5:4` printed a 4-line argparse usage dump; nmsim gemm --sparse 5:4
    # said "n=5 must be <= m=4" although -m/-n are GEMM sizes there
    for main, argv, flag, command in _pattern_commands(tmp_path):
        # --flag=VALUE: argparse reads a separate "-1:4" as a flag of its own
        status, out, err = _run(main, [*argv[:-1], f"{argv[-1]}={value}"], capsys)
        line = _one_line(status, err)
        program = "nmref" if main is nmref_main else "nmsim"
        assert line.startswith(f"{program} {command}: error: argument {flag}: {value!r}"), line
        assert "is not an N:M pattern" in line and "0 <= N <= M and M >= 1" in line, line
        assert not re.search(r"\b[nm]=", line), f"{line!r} names n=/m= (the GEMM sizes)"
        assert out == ""


def test_a_pattern_that_breaks_the_rule_says_which_part_in_n_and_m(tmp_path, capsys):
    argv = ["gemm", "--gpu", "a100", "-m", "64", "-n", "64", "-k", "64", "--sparse", "5:4"]
    status, _, err = _run(nmsim_main, argv, capsys)
    assert _one_line(status, err) == (
        "nmsim gemm: error: argument --sparse: '5:4' is not an N:M pattern: N=5 must be <= "
        "M=4 (N kept of every M, whole numbers with 0 <= N <= M and M >= 1, e.g. 2:4)"
    )
    status, _, err = _run(nmref_main, ["check", "x.npz", "--pattern", "2:0"], capsys)
    assert "argument --pattern: '2:0' is not an N:M pattern: M=0 must be >= 1" in _one_line(
        status, err
    )


def test_a_pattern_of_thousands_of_digits_names_the_pattern_not_pythons_digit_limit(capsys):
    # int("9" * 5000) raises "Exceeds the limit (4300 digits) for integer string conversion"
    with pytest.raises(ValueError, match=r"^pattern='2:9999.*' must have the form 'N:M' with N"):
        nmref.parse_pattern("2:" + "9" * 5000)
    status, _, err = _run(nmref_main, ["check", "x.npz", "--pattern", "2:" + "9" * 5000], capsys)
    line = _one_line(status, err)
    assert "argument --pattern: '2:99999" in line and "is not an N:M pattern" in line, line
    assert "digits for integer" not in line and len(line) < 300, line


@pytest.mark.parametrize(
    ("main", "argv", "words"),
    [
        (nmref_main, ["check", "--pattern", "2:4"], "the following arguments are required: mask"),
        (nmref_main, ["mask", "x.npz", "--pattern", "2:4", "-o"], "argument -o/--output"),
        (nmref_main, ["check", "x.npz", "--pattern", "2:4", "--nope"], "unrecognized arguments"),
        (nmref_main, ["nope"], "invalid choice: 'nope'"),
        (nmref_main, ["check", "x", "--pattern", "2:4", "--layout", "z"], "invalid choice: 'z'"),
        (nmsim_main, ["gemm", "--gpu", "a100", "-m", "x", "-n", "1", "-k", "1"], "argument -m"),
        (nmsim_main, ["report", "--workers", "many"], "argument --workers"),
        (nmsim_main, ["nope"], "invalid choice: 'nope'"),
        # an unrecognized argument is echoed: its escape and newline are shown escaped
        (nmsim_main, ["gpus", "a\x1b[31m\nb"], "unrecognized arguments: a\\x1b[31m\\nb"),
    ],
)
def test_every_argument_error_of_both_commands_is_one_line(capsys, main, argv, words):
    status, _, err = _run(main, argv, capsys)
    line = _one_line(status, err)
    assert words in line and line.startswith(("nmref", "nmsim")), line
    assert not CONTROL.search(err.rstrip("\n")), err


def test_messages_speak_in_the_flags_of_the_command_that_ran(capsys):
    # issue 37: in_flag_words looked at the options of every command, so a library message's
    # pattern='2:4' became "--pattern 2:4" in nmsim gemm, which has no --pattern
    parser = nmsim_parser()
    message = "pattern='2:4' is refused; incompatible='dense' would time it dense"
    assert in_flag_words(message, command_parser(parser, "gemm")) == (
        "pattern='2:4' is refused; --incompatible dense would time it dense"
    )
    assert in_flag_words(message, command_parser(parser, "flops")).startswith("--pattern 2:4")
    argv = ["gemm", "--gpu", "a100", "-m", "64", "-n", "64", "-k", "64", "--sparse", "2:8"]
    status, _, err = _run(nmsim_main, [*argv, "--dtype", "tf32"], capsys)
    line = _one_line(status, err)
    assert "--sparse 2:8 is not accelerated" in line and "--incompatible dense" in line, line
    assert "--pattern" not in line and "--dtype tf32" in line


# ---------------------------------------------------------------------------------------------
# 2. Tensor files: float8 and float4 read exactly; raw-byte, big-endian and unreadable members
# ---------------------------------------------------------------------------------------------


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> Path:
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_decode_tables_hold_the_formats_values_written_out():
    # hand-checked codes of each format (OCP OFP8 Table 1, MX Sec. 5.3.3)
    e4m3, e5m2 = decode_table("F8_E4M3"), decode_table("F8_E5M2")
    assert e4m3[[0x00, 0x01, 0x08, 0x38, 0x7E, 0xC0, 0x80]].tolist() == [
        0.0, 2.0**-9, 2.0**-6, 1.0, 448.0, -2.0, -0.0
    ]  # fmt: skip
    assert np.isnan(e4m3[0x7F]) and np.isnan(e4m3[0xFF]) and np.isfinite(e4m3[0x7C])
    assert e5m2[[0x01, 0x3C, 0x7B, 0x7C, 0xFC]].tolist() == [
        2.0**-16,
        1.0,
        57344.0,
        np.inf,
        -np.inf,
    ]
    assert np.isnan(e5m2[0x7D])
    assert decode_table("F8_E4M3FNUZ")[[0x7F, 0x40]].tolist() == [240.0, 1.0]
    assert np.isnan(decode_table("F8_E4M3FNUZ")[0x80])
    assert decode_table("F8_E8M0")[[0, 127, 128, 254]].tolist() == [2.0**-127, 1.0, 2.0, 2.0**127]
    assert decode_table("F4").tolist() == [
        0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0
    ]  # fmt: skip
    # two F4 codes per byte, element 2i in the low nibble (PyTorch's float4_e2m1fn_x2)
    packed = np.array([0x21, 0xF7], np.uint8)
    assert decode(packed, "F4", (2, 2)).tolist() == [[0.5, 1.0], [6.0, -6.0]]


@pytest.mark.parametrize(
    ("kind", "torch_name"),
    [
        ("F8_E4M3", "float8_e4m3fn"),
        ("F8_E5M2", "float8_e5m2"),
        ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
        ("F8_E5M2FNUZ", "float8_e5m2fnuz"),
        ("F8_E8M0", "float8_e8m0fnu"),
    ],
)
def test_every_float8_code_decodes_to_torchs_value(kind, torch_name):
    # an independent implementation of the same formats: all 256 codes, NaN where torch's NaN
    torch = pytest.importorskip("torch")
    if not hasattr(torch, torch_name):
        pytest.skip(f"torch {torch.__version__} has no {torch_name}")
    theirs = torch.arange(256, dtype=torch.uint8).view(getattr(torch, torch_name)).float().numpy()
    ours = decode_table(kind)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    finite = ~np.isnan(theirs)
    np.testing.assert_array_equal(ours[finite], theirs[finite])
    np.testing.assert_array_equal(np.signbit(ours[finite]), np.signbit(theirs[finite]))
    assert NARROW_FLOATS[kind].name == torch_name


# 4 x 4 F8_E4M3 codes: rows [4, 3, 2, 1], [1, 2, 3, 4], [0.5, 6, 0, -8], [448, -448, 0.125, 1]
E4M3_TILE = bytes(
    [0x48, 0x44, 0x40, 0x38, 0x38, 0x40, 0x44, 0x48, 0x30, 0x4C, 0x00, 0xD0, 0x7E, 0xFE, 0x20, 0x38]
)
E4M3_VALUES = np.array(
    [[4, 3, 2, 1], [1, 2, 3, 4], [0.5, 6, 0, -8], [448, -448, 0.125, 1]], np.float32
)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--pattern", "2:4", "{f}"],
        ["audit", "--pattern", "2:4", "{f}"],
        ["explain", "transposable", "--pattern", "2:4", "{f}"],
        ["mask", "--pattern", "2:4", "-o", "{d}/m.npz", "{f}"],
        ["report", "--quiet", "--methods", "1d", "{f}"],
    ],
    ids=["check", "audit", "explain", "mask-npz", "report"],
)
def test_fp8_safetensors_are_read_by_every_command(tmp_path, capsys, argv):
    # issue 37: AttributeError: module 'numpy' has no attribute 'float8_e4m3fn' in each
    path = _safetensors(tmp_path / "fp8.safetensors", {"w": ("F8_E4M3", [4, 4], E4M3_TILE)})
    main = nmsim_main if argv[0] == "report" else nmref_main
    status, _, err = _run(main, [a.format(f=path, d=tmp_path) for a in argv], capsys)
    assert status in (0, 1), err  # check: 1 (the weights are not a 2:4 mask)
    assert "Traceback" not in err and "float8" not in err, err


def test_fp8_and_fp4_safetensors_are_their_exact_float32_values(tmp_path, capsys):
    f4 = decode_table("F4")
    codes = np.array([[7, 1, 2, 15], [9, 3, 4, 6], [0, 5, 12, 2], [6, 6, 1, 8]], np.uint8)
    packed = (codes.reshape(-1, 2)[:, 0] | codes.reshape(-1, 2)[:, 1] << 4).astype(np.uint8)
    path = _safetensors(
        tmp_path / "q.safetensors",
        {"a": ("F8_E4M3", [4, 4], E4M3_TILE), "b": ("F4", [4, 4], packed.tobytes())},
    )
    records = {r.name: r for r in iter_tensors(path)}
    np.testing.assert_array_equal(records["a"].array, E4M3_VALUES)
    np.testing.assert_array_equal(records["b"].array, f4[codes])
    assert [(r.source_dtype, r.array.dtype) for r in records.values()] == [
        ("float8_e4m3fn", np.float32),
        ("float4_e2m1fn", np.float32),
    ]
    assert [i.source_dtype for i in list_tensors(path)] == ["float8_e4m3fn", "float4_e2m1fn"]
    out = tmp_path / "m.npz"
    assert nmref_main(["mask", str(path), "--pattern", "2:4", "-o", str(out)]) == 0
    masks = {r.name: r.array for r in iter_tensors(out)}
    np.testing.assert_array_equal(masks["a"], nmref.magnitude_mask(E4M3_VALUES, 2, 4))
    np.testing.assert_array_equal(masks["b"], nmref.magnitude_mask(f4[codes], 2, 4))


def test_pt_float4_and_float8_tensors_are_their_exact_float32_values(tmp_path, capsys):
    # torch cannot widen float4_e2m1fn_x2 ("copy_kernel" not implemented), and the message
    # said the .pt file was not valid
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    packed = torch.tensor([[0x21, 0xF7], [0x00, 0x6E]], dtype=torch.uint8)
    path = tmp_path / "q.pt"
    torch.save(
        {
            "f4": packed.view(torch.float4_e2m1fn_x2),
            "f8": torch.tensor([[448.0, -2.0, 0.5, 0.0]]).to(torch.float8_e4m3fn),
        },
        path,
    )
    records = {r.name: r for r in iter_tensors(path)}
    np.testing.assert_array_equal(
        records["f4"].array, [[0.5, 1.0, 6.0, -6.0], [0.0, 0.0, -4.0, 4.0]]
    )
    np.testing.assert_array_equal(records["f8"].array, [[448.0, -2.0, 0.5, 0.0]])
    infos = {i.name: (i.shape, i.source_dtype) for i in list_tensors(path)}
    assert infos == {"f4": ((2, 4), "float4_e2m1fn"), "f8": ((1, 4), "float8_e4m3fn")}
    status, _, err = _run(nmsim_main, ["report", "--quiet", "--methods", "1d", str(path)], capsys)
    assert status == 0, err


def test_a_safetensors_dtype_without_a_reader_is_refused_in_one_line(tmp_path, capsys):
    path = _safetensors(tmp_path / "f6.safetensors", {"w": ("F6_E2M3", [4, 4], bytes(12))})
    status, _, err = _run(nmref_main, ["check", str(path), "--pattern", "2:4"], capsys)
    line = _one_line(status, err)
    assert f"{str(path)!r}: tensor 'w' is stored as F6_E2M3, which nmref cannot read" in line


def _npz_member(path: Path, header_descr: str, payload: bytes, shape=(4, 4)) -> Path:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import hostile_files
    finally:
        sys.path.pop(0)
    path.write_bytes(
        hostile_files._zip({"w.npy": hostile_files._npy_header(header_descr, shape) + payload})
    )
    return path


def test_an_npz_float8_member_saved_as_raw_bytes_is_refused_in_one_line(tmp_path, capsys):
    # ml_dtypes' float8 arrays are saved by numpy.save as '|V1': "float8 arrays in .npz"
    path = _npz_member(tmp_path / "f8.npz", "|V1", bytes(16))
    for argv in (
        ["check", str(path), "--pattern", "2:4"],
        ["explain", "transposable", str(path), "--pattern", "2:4"],  # was: ufunc 'absolute'
        ["mask", str(path), "--pattern", "2:4", "-o", str(tmp_path / "m.npz")],
    ):
        status, _, err = _run(nmref_main, argv, capsys)
        line = _one_line(status, err)
        assert f"{str(path)!r}: tensor 'w' has dtype |V1, raw bytes" in line, line
        assert "F8_E4M3" in line


@pytest.mark.parametrize("suffix", [".npz", ".npy"])
def test_big_endian_arrays_are_read_in_native_byte_order(tmp_path, capsys, suffix):
    # issue 37: nmref mask on a '>f4' member ended in Numba's "Unsupported array dtype >f4";
    # nmsim report skipped it as "not a float" (its dtype name was '>f4')
    weights = np.array([[4, -3, 2, 1], [1, 2, -3, 4], [0.5, 6, 0, -8], [9, 1, 2, 3]], ">f4")
    path = tmp_path / f"w{suffix}"
    if suffix == ".npz":
        np.savez(path, w=weights)
    else:
        np.save(path, weights)
    (record,) = iter_tensors(path)
    assert record.array.dtype == np.dtype("float32") and record.source_dtype == "float32"
    assert list_tensors(path)[0].source_dtype == "float32"
    out = tmp_path / "m.npz"
    argv = ["mask", str(path), "--pattern", "2:4", "--transposable", "-o", str(out)]
    assert nmref_main(argv) == 0, capsys.readouterr().err
    (mask,) = iter_tensors(out)
    np.testing.assert_array_equal(mask.array, nmref.transposable_mask(np.abs(weights), 2, 4))
    status, report, err = _run(
        nmsim_main, ["report", "--quiet", "--methods", "1d", str(path)], capsys
    )
    assert status == 0 and "w" in report, err


def _patched_zip(path: Path, flags: int = 0, method: int | None = None) -> Path:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import hostile_files
    finally:
        sys.path.pop(0)
    valid = hostile_files._zip({"w.npy": hostile_files._npy(np.ones((4, 4), np.float32))})
    path.write_bytes(hostile_files._zip_member_patched(valid, flag_bits=flags, method=method))
    return path


@pytest.mark.parametrize(
    ("flags", "method", "words"),
    [
        (0x1, None, "member 'w' is encrypted"),
        (0, 9, "member 'w' is compressed with zip method 9"),  # deflate64
        (0x1, 99, "member 'w' is encrypted"),  # WinZip AES
    ],
    ids=["encrypted", "deflate64", "aes"],
)
def test_unreadable_npz_members_are_one_line_naming_the_file_and_member(
    tmp_path, capsys, flags, method, words
):
    # zipfile's RuntimeError "File <ZipInfo ...> is encrypted" / NotImplementedError
    # "That compression method is not supported" came as tracebacks
    path = _patched_zip(tmp_path / "z.npz", flags, method)
    runs = [
        (nmref_main, ["check", str(path), "--pattern", "2:4"]),
        (nmsim_main, ["report", "--quiet", str(path)]),
        (nmsim_main, ["inspect", str(path)]),
        (nmsim_main, ["compress", str(path), "--dtype", "fp16", "-o", str(tmp_path / "c.npz")]),
    ]
    for main, argv in runs:
        status, _, err = _run(main, argv, capsys)
        line = _one_line(status, err)
        assert repr(str(path)) in line and words in line, line


# ---------------------------------------------------------------------------------------------
# 3. JSON and TOML: nesting and integer size, in every file a user can hand in
# ---------------------------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5000


def test_load_json_and_load_toml_refuse_in_words_naming_the_file_and_key():
    with pytest.raises(ValueError, match=r"^'c\.json' nests arrays or objects more than 64"):
        load_json('{"a": ' + DEEP + "}", "'c.json'")
    with pytest.raises(ValueError, match=r"^'c\.json' nests"):
        load_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "'c.json'")
    assert load_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "'c.json'") is not None
    with pytest.raises(
        ValueError,
        match=r"^'c\.json', line 2, key 'n\\x00m': an integer of 5000 digits, over the limit",
    ):
        load_json('{"s": "1111",\n "n\\u0000m": ' + HUGE + "}", "'c.json'")
    with pytest.raises(ValueError, match=r"^'c\.toml' nests"):
        load_toml("a = " + DEEP, "'c.toml'")
    with pytest.raises(ValueError, match=r"^'c\.toml', line 3, key 'q q': an integer of 5001"):
        load_toml('[t]\nx = 1\n"q q" = ' + "1_" * 5000 + "1", "'c.toml'")
    # syntax errors stay the parsers' own (the callers name the file around them)
    with pytest.raises(json.JSONDecodeError):
        load_json("{", "'c.json'")


def _model_folder(root: Path, config_text: str) -> Path:
    from safetensors.numpy import save_file

    root.mkdir()
    save_file({"w": np.ones((4, 4), np.float32)}, str(root / "model.safetensors"))
    (root / "config.json").write_text(config_text)
    return root


def _index_folder(root: Path, index_text: str) -> Path:
    from safetensors.numpy import save_file

    root.mkdir()
    save_file({"w": np.ones((4, 4), np.float32)}, str(root / "a.safetensors"))
    (root / "model.safetensors.index.json").write_text(index_text)
    return root


@pytest.mark.parametrize("kind", ["deep", "huge"])
@pytest.mark.parametrize(
    "where",
    ["config", "index", "safetensors-metadata", "corpus", "manifest"],
)
def test_deep_or_huge_json_and_toml_in_user_files_are_one_line(tmp_path, capsys, where, kind):
    # issue 37: a RecursionError traceback, or Python's "Exceeds the limit (4300 digits)"
    # naming no file and no key
    pytest.importorskip("safetensors")
    value = DEEP if kind == "deep" else HUGE
    if where == "config":
        folder = _model_folder(tmp_path / "model", '{"model_type": "llama", "x": ' + value + "}")
        runs = [(nmref_main, ["permute", str(folder), "--pattern", "2:4", "-o", "p.npz"])]
        named = str(folder / "config.json")
    elif where == "index":
        text = '{"metadata": {"x": ' + value + '}, "weight_map": {"w": "a.safetensors"}}'
        folder = _index_folder(tmp_path / "model", text)
        runs = [
            (nmref_main, ["check", str(folder), "--pattern", "2:4"]),
            (nmsim_main, ["report", "--quiet", str(folder)]),
        ]
        named = str(folder / "model.safetensors.index.json")
    elif where == "safetensors-metadata":
        path = tmp_path / "w.safetensors"
        header = ('{"__metadata__": {"x": ' + value + '}, "w": {"dtype": "F32", "shape": [2, 2], '
                  '"data_offsets": [0, 16]}}').encode()  # fmt: skip
        path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
        runs = [
            (nmref_main, ["check", str(path), "--pattern", "2:4"]),
            (nmsim_main, ["report", "--quiet", str(path)]),
            (nmsim_main, ["convert", "--to", "dense", str(path), str(tmp_path / "c.safetensors")]),
        ]
        named = str(path)
    elif where == "corpus":
        path = tmp_path / "corpus.toml"
        path.write_text("schema_version = 1\nx = " + value + "\n")
        runs = [(nmsim_main, ["calibrate", "--no-cv", f"--corpus={path}"])]
        named = str(path)
    else:
        folder = tmp_path / "vectors"
        folder.mkdir()
        (folder / "manifest.json").write_text('{"schema_version": ' + value + "}")
        runs = [(nmsim_main, ["verify", "--only", "golden", "--quiet", "--vectors", str(folder)])]
        named = "manifest.json"
    words = "more than 64 levels deep" if kind == "deep" else "an integer of 5000 digits"
    for main, argv in runs:
        status, _, err = _run(main, argv, capsys)
        line = _one_line(status, err)
        assert words in line and (repr(named) in line or named in line), line
        if kind == "huge":
            assert "key " in line and "sys.set_int_max_str_digits" not in line, line


def test_names_with_nul_and_escape_bytes_are_printed_escaped(tmp_path, capsys):
    # issue 37: "skipped 2 tensor(s) not eligible: bias\x00x (ndim=1)" reached the terminal raw
    rows = np.tile(np.array([1, 1, 0, 0], np.float32), (4, 1)).tobytes()
    path = _safetensors(
        tmp_path / "n.safetensors",
        {
            "a\x00b.weight": ("F32", [4, 4], rows),
            "bias\x00x": ("F32", [4], rows[:16]),
            "e\x1b[31m": ("F32", [2, 2], rows[:16]),
        },
    )
    runs = [
        (nmref_main, ["audit", "--pattern", "2:4", str(path)]),
        (nmref_main, ["check", "--pattern", "2:4", str(path)]),
        (nmref_main, ["mask", "--pattern", "2:4", "-o", str(tmp_path / "m.npz"), str(path)]),
        (nmref_main, ["explain", "transposable", "--pattern", "2:4", str(path)]),
        (nmsim_main, ["report", "--quiet", "--methods", "1d", str(path)]),
    ]
    for main, argv in runs:
        _, out, err = _run(main, argv, capsys)
        assert not CONTROL.search(out + err.replace("\n", "")), (argv, out, err)
        assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# 4. Ctrl-C: while importing, and inside a Numba kernel
# ---------------------------------------------------------------------------------------------


def _numba_interrupt(args: argparse.Namespace) -> int:
    """What CPython raises when SIGINT lands while a compiled function runs."""
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as interrupt:
        raise SystemError(
            "CPUDispatcher(<function search at 0x7f48862a9620>) returned a result with an "
            "exception set"
        ) from interrupt


@pytest.mark.parametrize("program", ["nmref", "nmsim"])
def test_an_interrupt_inside_a_numba_kernel_is_exit_130_in_one_line(monkeypatch, capsys, program):
    # issue 37: nmref permute ended in "SystemError: CPUDispatcher(...) returned a result with
    # an exception set", a 30-line traceback and exit 1
    if program == "nmref":
        import nmref.cli.permute as module

        monkeypatch.setattr(module, "run_permute", _numba_interrupt)
        argv, main = ["permute", "m", "--pattern", "2:4", "-o", "p.npz"], nmref_main
    else:
        import nmsim.cli.perf as module

        monkeypatch.setattr(module, "_run_gpus", _numba_interrupt)
        argv, main = ["gpus"], nmsim_main
    status, _, err = _run(main, argv, capsys)
    assert _one_line(status, err, expected=130) == f"{program}: interrupted"


def test_was_interrupted_follows_causes_and_contexts_only():
    assert was_interrupted(KeyboardInterrupt())
    try:
        _numba_interrupt(argparse.Namespace())
    except SystemError as error:
        assert was_interrupted(error)
    assert not was_interrupted(SystemError("a real bug in an extension"))
    assert not was_interrupted(ValueError("x"))


def _interrupt_while_importing(argv: list[str], tmp_path: Path) -> tuple[int, str]:
    """Start ``argv`` with ``-X importtime``; send SIGINT once ``nmref._startup`` is imported
    (numpy and the algorithms, most of a second, are still to come)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-X", "importtime", *argv],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        seen = []
        assert child.stderr is not None
        for line in child.stderr:
            seen.append(line)
            if line.rstrip().endswith("nmref._startup"):
                child.send_signal(signal.SIGINT)
                break
        seen.append(child.stderr.read())
        child.wait(timeout=120)
    return child.returncode, "".join(seen)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["-m", "nmref", "check", "--pattern", "2:4", "x.npz"], "nmref"),
        (["-m", "nmsim", "gpus"], "nmsim"),
        ([str(Path(sys.executable).with_name("nmref")), "demo"], "nmref"),
    ],
    ids=["python-m-nmref", "python-m-nmsim", "console-script"],
)
def test_ctrl_c_while_the_command_imports_is_one_line_exit_130(tmp_path, argv, program):
    # issue 37: a 22-line KeyboardInterrupt traceback from inside `import numpy`
    if argv[0] != "-m" and not Path(argv[0]).is_file():
        pytest.skip("the console script is not installed beside this interpreter")
    status, err = _interrupt_while_importing(argv, tmp_path)
    mine = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert (status, mine) == (130, [f"{program}: interrupted"]), err[-2000:]
    # it landed during the imports: the command modules were never imported
    assert "nmref.cli.mask" not in err and "nmsim.cli.report" not in err


def test_importing_the_library_never_touches_sigint():
    # a notebook or a test imports nmref: Python's own handler stays (KeyboardInterrupt)
    code = "import signal, nmref, nmsim; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout.strip() == "True", result.stderr


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc for CPU time")
def test_ctrl_c_during_a_permutation_search_is_one_line_exit_130(tmp_path):
    # the real process: the swap search on a 256 x 1024 down projection runs seconds in Numba
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    folder = tmp_path / "llama"
    folder.mkdir()
    save_file(
        {
            "model.layers.0.mlp.gate_proj.weight": rng.standard_normal((1024, 256), np.float32),
            "model.layers.0.mlp.up_proj.weight": rng.standard_normal((1024, 256), np.float32),
            "model.layers.0.mlp.down_proj.weight": rng.standard_normal((256, 1024), np.float32),
        },
        str(folder / "model.safetensors"),
    )
    config = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 256,
              "intermediate_size": 1024, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 128}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    argv = [sys.executable, "-m", "nmref", "permute", str(folder), "--pattern", "2:4",
            "--method", "swaps", "--block-stripes", "0", "-o", str(tmp_path / "p.npz")]  # fmt: skip
    # Fill Numba's cache first (the same kernels on a small layer): a SIGINT that lands in a
    # compile is swallowed by llvmlite's ctypes callback (a known limit, not what this tests).
    small = tmp_path / "small"
    small.mkdir()
    save_file(
        {
            "model.layers.0.mlp.gate_proj.weight": rng.standard_normal((64, 16), np.float32),
            "model.layers.0.mlp.up_proj.weight": rng.standard_normal((64, 16), np.float32),
            "model.layers.0.mlp.down_proj.weight": rng.standard_normal((16, 64), np.float32),
        },
        str(small / "model.safetensors"),
    )
    small_config = {**config, "hidden_size": 16, "intermediate_size": 64, "head_dim": 8}
    (small / "config.json").write_text(json.dumps(small_config))
    warm = [*argv[:4], str(small), *argv[5:-1], str(tmp_path / "warm.npz")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(warm, env=env, capture_output=True, check=True, timeout=600)
    with subprocess.Popen(
        argv,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        deadline = time.monotonic() + 120
        # past the imports, the read and a cached compile: most likely inside the kernel
        while child.poll() is None and _cpu_seconds(child.pid) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    assert (child.returncode, err.strip()) == (130, "nmref: interrupted"), err[-3000:]
    assert not (tmp_path / "p.npz").exists()


# ---------------------------------------------------------------------------------------------
# 5. The conformance kit's transposable counterexample
# ---------------------------------------------------------------------------------------------


def test_the_transposable_kit_names_the_column_and_shows_tile_expected_got_and_input():
    # issue 37: a mask whose rows keep 2 but whose column 0 keeps 4 was reported as
    # "row 0 keeps 4", with no tile, no expected/got and no input to paste
    from nmref.testing import check_transposable_mask
    from nmref.testing.cases import Case

    scores = np.array([[8, 7, 1, 2], [9, 3, 6, 1], [7, 2, 1, 5], [6, 5, 4, 3]], dtype=np.float32)
    wrong = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1], [1, 1, 0, 0]], dtype=bool)
    case = Case(scores, 2, 4, "literal", "float32", None, "issue 37")
    report = check_transposable_mask(lambda s, n, m: wrong, cases=[case], raise_on_failure=False)
    message = str(report.failures[0])
    assert "column 0 keeps 4" in message and "row 0 keeps" not in message, message
    expected = nmref.transposable_mask(scores, 2, 4).astype(int)
    assert "scores:" in message and "expected:" in message and "got:" in message
    assert f"{expected[0].tolist()}" in message  # the expected tile's first row
    assert "[8.0, 7.0, 1.0, 2.0]" in message and "[1, 1, 0, 0]" in message
    assert "tile = np.array([[8., 7., 1., 2.]," in message and "dtype=float32)" in message
    assert "spec T1" in message


def test_the_transposable_kit_says_why_a_valid_mask_differs():
    from nmref.testing import check_transposable_mask
    from nmref.testing.cases import Case

    scores = np.array([[8, 7, 1, 2], [9, 3, 6, 1], [7, 2, 1, 5], [6, 5, 4, 3]], dtype=np.float32)
    valid_but_worse = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]], dtype=bool)
    case = Case(scores, 2, 4, "literal", "float32", None, "issue 37")
    report = check_transposable_mask(
        lambda s, n, m: valid_but_worse, cases=[case], raise_on_failure=False
    )
    message = str(report.failures[0])
    assert "tile (0, 0) differs from nmref's first at entry (0, 1)" in message, message
    assert "it keeps 15 less than the optimum" in message
    assert "valid but not optimal" in message and "expected:" in message, message
    assert "tile = np.array(" in message


# ---------------------------------------------------------------------------------------------
# 6. Help for every option; dir(nmref)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("program", ["nmref", "nmsim"])
def test_every_option_of_every_command_has_help(program):
    # issue 37: nmsim gemm --help showed nothing for --gpu, --dtype, --accumulate, --output-dtype
    from nmref.cli import build_parser as nmref_parser

    parser = nmref_parser() if program == "nmref" else nmsim_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [
        f"{program} {name} {action.option_strings[0] if action.option_strings else action.dest}"
        for name, sub in commands.choices.items()
        for action in sub._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert not missing, missing


def test_dir_of_the_packages_shows_the_api_not_the_imports():
    # issue 37: dir(nmref) listed annotations and PackageNotFoundError
    import nmsim

    for package in (nmref, nmsim):
        shown = set(dir(package))
        assert set(package.__all__) <= shown
        leaked = {"annotations", "PackageNotFoundError", "version", "install_moved_modules"}
        assert not shown & leaked, shown & leaked
    assert "nmref" not in dir(nmref) and "masks" in dir(nmref) and "audit" in dir(nmref)
