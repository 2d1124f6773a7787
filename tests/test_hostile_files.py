"""Every command that reads files, run over the hostile-file corpus (issue 20, item 3).

``scripts/hostile_files.py`` writes the corpus: truncated, empty and header-lying
``.safetensors``/``.npy``/``.npz`` files, a zip bomb, object arrays, ``.pt`` files whose pickles
would create a marker file, folders named like checkpoints, and hostile names. Each command
(``nmref mask``, ``nmref check`` with the file as the mask and as ``--weights``, ``nmsim
report``, ``nmsim compress``, ``nmsim inspect``, ``nmsim calibrate --corpus``, ``nmsim
convert``, ``nmref audit``, ``nmref explain``, ``nmref permute``, ``nmref adaprune``) must exit 2
on each entry with exactly one stderr line naming the file (as the message prints it: ``repr``,
so escapes are escaped) and the problem, no traceback, nothing written (neither the
``-o``/``--out`` target nor a temporary file), the input byte-identical, and the marker never
created. ``specs/errors.md`` section 5 describes the corpus.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nmref.cli import main as nmref_main
from nmsim.cli import main as nmsim_main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "hostile_files.py"
# the zip bomb inflates to 32 MiB; a 0.01 GiB (10.7 MB) budget refuses it before inflating
BUDGET_GIB = "0.01"
# the commands that read .pt/.pth through torch (nmsim compress/inspect read only NumPy files)
TORCH = ("mask", "check", "check-weights", "report", "audit", "explain", "adaprune")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _load_script():
    spec = importlib.util.spec_from_file_location("hostile_files", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["hostile_files"] = module
    spec.loader.exec_module(module)
    return module


hostile = _load_script()


VALID_MASK: Path = Path()
#: Valid calibration inputs for nmref adaprune (outside the corpus): 4 features per row.
CALIBRATION: Path = Path()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    global VALID_MASK, CALIBRATION
    folder = tmp_path_factory.mktemp("hostile")
    entries = hostile.write_corpus(folder)
    # a valid transposable 2:4 mask for nmref check --weights HOSTILE (outside the corpus)
    VALID_MASK = tmp_path_factory.mktemp("mask") / "w.npy"
    tile = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], np.float32)
    np.save(VALID_MASK, tile)
    CALIBRATION = VALID_MASK.parent / "inputs.npy"
    np.save(CALIBRATION, np.random.default_rng(0).standard_normal((8, 4)))
    return folder, entries


def _name(entry) -> str:
    return entry.name if isinstance(entry.name, str) else os.fsdecode(entry.name)


def _digest(path: Path) -> str:
    if path.is_dir():
        return "folder:" + ",".join(sorted(os.listdir(path)))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(folder: Path) -> set[str]:
    return set(os.listdir(folder))


def _argv(command: str, name: str, out: Path) -> tuple[object, list[str]]:
    """The command line; ``--`` before the input so names such as ``-o.npz`` stay inputs."""
    if command == "mask":
        return nmref_main, ["mask", "--pattern", "2:4", "-o", str(out / "m.npz"), "--", name]
    if command == "check":
        return nmref_main, ["check", "--pattern", "2:4", "--", name]
    if command == "check-weights":
        mask = str(VALID_MASK)
        # --weights=NAME: a name such as -o.npz must not be read as a flag
        return nmref_main, [
            "check",
            "--pattern",
            "2:4",
            "--transposable",
            f"--weights={name}",
            mask,
        ]
    if command == "report":
        report = str(out / "report")
        return nmsim_main, ["report", "--methods", "1d", "--quiet", "--out", report, "--", name]
    if command == "compress":
        return nmsim_main, ["compress", "--dtype", "fp16", "-o", str(out / "c.npz"), "--", name]
    if command == "permute":
        target = str(out / "p.safetensors")
        return nmref_main, ["permute", "--pattern", "2:4", "-o", target, "--", name]
    if command == "adaprune":
        # the hostile file as MODEL; its layers lack inputs, so --skip-uncalibrated reads them
        target = str(out / "a.safetensors")
        return nmref_main, [
            "adaprune", "--pattern", "2:4", "--calibration", str(CALIBRATION),
            "--skip-uncalibrated", "--quiet", "-o", target, "--", name,
        ]  # fmt: skip
    if command == "explain":
        return nmref_main, ["explain", "transposable", "--pattern", "2:4", "--", name]
    if command == "audit":
        return nmref_main, ["audit", "--pattern", "2:4", "--", name]
    if command == "calibrate":
        return nmsim_main, ["calibrate", "--no-cv", f"--corpus={name}"]
    if command == "convert":
        target = str(out / "c.safetensors")
        return nmsim_main, ["convert", "--to", "sparse-24-bitmask", "--", name, target]
    return nmsim_main, ["inspect", "--", name]


def _runs():
    module = hostile
    # the entries are known without writing: _entries only builds bytes
    names = [e for e, _ in module._entries(Path("/nonexistent") / module.MARKER)]
    return [(e, c) for e in names for c in module.COMMANDS]


RUNS = _runs()


@pytest.mark.parametrize(
    ("entry", "command"),
    RUNS,
    ids=[f"{c}-{ascii(_name(e))[1:-1]}" for e, c in RUNS],
)
def test_every_command_refuses_every_hostile_file(
    corpus, entry, command, tmp_path, capsys, monkeypatch
):
    folder, _ = corpus
    monkeypatch.setenv("NMREF_MEMORY_BUDGET_GIB", BUDGET_GIB)
    monkeypatch.chdir(folder)  # relative names, printed as given
    name = _name(entry)
    path = folder / name
    before, listing = _digest(path), _listing(folder)
    out = tmp_path  # fresh and empty: -o m.npz / c.npz and --out report/ go here
    main, argv = _argv(command, name, out)
    status = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert _digest(path) == before, "the input changed"
    assert _listing(folder) == listing, "a file appeared in or vanished from the input folder"
    assert not (folder / hostile.MARKER).exists(), "a pickle was executed"
    if command in entry.handled:
        # npz_object_and_float.npz: nmsim report reads headers first and analyses only float
        # weights with ndim >= 2 (specs/report.md), so the object member is skipped unread and
        # the report of the 2:4 weight succeeds; the pickle never runs (checked above).
        assert status == 0, captured.err
        # nmsim report lists skipped tensors in its table; nmref adaprune on stderr
        listed = captured.out + captured.err if command == "adaprune" else captured.out
        assert "skipped" in listed and "object" in listed
        return
    expected = 2
    if not HAVE_TORCH and path.is_file() and path.suffix in (".pt", ".pth") and command in TORCH:
        expected = 3  # reading a .pt needs torch: an environment error (specs/errors.md)
    assert status == expected, (status, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    (line,) = lines
    assert line.startswith(("nmref: error: ", "nmsim: error: ")), line
    if expected == 3:
        assert "needs torch" in line and os.listdir(out) == []
        return
    assert repr(name)[1:-1] in line, f"{line!r} does not name {name!r}"
    problem = line.split(repr(name)[1:-1], 1)[1]
    assert len(problem.strip(" ':")) > 10, f"{line!r} does not say what is wrong"
    # nothing written: no -o file, no --out folder, no temporary file beside them
    assert os.listdir(out) == [], os.listdir(out)


def test_the_corpus_is_small_fast_and_repeatable(tmp_path):
    # the pickles name the marker by its absolute path: write twice into the same folder
    first = hostile.write_corpus(tmp_path / "c")
    (tmp_path / "c").rename(tmp_path / "first")
    hostile.write_corpus(tmp_path / "c")
    total = 0
    for entry in first:
        raw = entry.name if isinstance(entry.name, bytes) else os.fsencode(entry.name)
        a = os.path.join(os.fsencode(tmp_path / "first"), raw)
        b = os.path.join(os.fsencode(tmp_path / "c"), raw)
        if os.path.isdir(a):
            assert os.path.isdir(b)
            continue
        with open(a, "rb") as one, open(b, "rb") as two:
            data = one.read()
            assert data == two.read(), entry.name
        total += len(data)
    assert total < 20 * 2**20
    assert len({e.name for e in first}) == len(first)
    kinds = {os.fsdecode(e.name).rsplit(".", 1)[-1] for e in first}
    assert {"safetensors", "npy", "npz", "pt", "pth"} <= kinds


def test_the_zip_bomb_inflates_past_the_test_budget(corpus):
    folder, _ = corpus
    import zipfile

    with zipfile.ZipFile(folder / "npz_bomb.npz") as archive:
        (info,) = archive.infolist()
    assert info.file_size > float(BUDGET_GIB) * 2**30 > (folder / "npz_bomb.npz").stat().st_size


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["nmref", "check", "--pattern", "2:4", "--", "npz_bomb.npz"], "npz_bomb.npz"),
        (["nmsim", "inspect", "--", "name_with\nnewline.npy"], "name_with\nnewline.npy"),
        (["nmsim", "report", "--quiet", "--", "pt_zip_pickle.pt"], "pt_zip_pickle.pt"),
        (["nmref", "mask", "--pattern", "2:4", "-o", "OUT.npz", "--", "-o.npz"], "-o.npz"),
    ],
    ids=[
        "nmref-check-bomb",
        "nmsim-inspect-newline-name",
        "nmsim-report-pickle",
        "nmref-mask-dash-name",
    ],
)
def test_real_processes_refuse_in_one_line(corpus, argv, name):
    folder, _ = corpus
    if name.endswith(".pt") and not HAVE_TORCH:
        pytest.skip("reading a .pt needs torch (without it: exit 3, checked in-process)")
    program, *rest = argv
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NMREF_MEMORY_BUDGET_GIB": BUDGET_GIB,
    }
    before = _digest(folder / name)
    result = subprocess.run(
        [sys.executable, "-m", program, *rest],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert repr(name)[1:-1] in line
    assert _digest(folder / name) == before
    assert not (folder / hostile.MARKER).exists()
    assert not (folder / "OUT.npz").exists()


# ---------------------------------------------------------------------------------------------
# Regression tests for what the corpus broke (nmsim compress / inspect read with np.load)
# ---------------------------------------------------------------------------------------------


def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    return hostile._npy_header(descr, shape)


@pytest.mark.parametrize("command", ["compress", "inspect"])
def test_compress_and_inspect_refuse_an_npy_declaring_2_20_by_2_20_float64(
    tmp_path, capsys, command
):
    # nmsim inspect lying.npy: np.load allocated the declared 8 TiB (MemoryError traceback)
    path = tmp_path / "lying.npy"
    path.write_bytes(_npy_header("<f8", (2**20, 2**20)) + bytes(64))
    extra = ["--dtype", "fp16", "-o", str(tmp_path / "o.npz")] if command == "compress" else []
    assert nmsim_main([command, str(path), *extra]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{str(path)!r}: cannot read it: its header declares more data than" in line
    assert not (tmp_path / "o.npz").exists()


def test_inspect_refuses_a_compressed_npz_whose_values_member_lies(tmp_path, capsys):
    # values.npy declares (2**20, 2**20) float16 in a 301-byte-class archive: 2 TiB asked for
    path = tmp_path / "c.npz"
    path.write_bytes(
        hostile._zip(
            {
                "values.npy": _npy_header("<f2", (2**20, 2**20)) + bytes(64),
                "metadata.npy": hostile._npy(np.zeros((4, 1), np.uint16)),
                "dtype_kind.npy": hostile._npy(np.array("fp16")),
                "layout.npy": hostile._npy(np.array("cutlass_sm80")),
                "shape.npy": hostile._npy(np.array([4, 8], np.int64)),
                "format.npy": hostile._npy(np.array("nmsim-2to4-v1")),
            }
        )
    )
    assert nmsim_main(["inspect", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "member 'values' declares shape (1048576, 1048576) float16" in line


def test_inspect_refuses_a_zip_bomb_over_the_memory_budget(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NMREF_MEMORY_BUDGET_GIB", BUDGET_GIB)
    path = tmp_path / "bomb.npz"
    path.write_bytes(hostile._bomb())
    assert nmsim_main(["inspect", str(path)]) == 2
    line = capsys.readouterr().err.strip()
    assert "over the 0.01 GiB budget; set NMREF_MEMORY_BUDGET_GIB to raise it" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x80\x02}q\x00.", "a pickle, which is never loaded"),
        (b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ", "neither a .npy array nor an .npz archive"),
    ],
    ids=["pickle", "safetensors-bytes"],
)
def test_compress_names_what_a_non_numpy_file_is_not_pickled_object_data(
    tmp_path, capsys, content, expected
):
    # np.load said "This file contains pickled (object) data" of any non-NumPy bytes
    path = tmp_path / "w.npy"
    path.write_bytes(content)
    assert (
        nmsim_main(["compress", str(path), "--dtype", "fp16", "-o", str(tmp_path / "o.npz")]) == 2
    )
    line = capsys.readouterr().err.strip()
    assert expected in line and "pickled (object) data" not in line


def test_inspect_escapes_a_name_with_an_escape_byte_in_its_messages(tmp_path, capsys):
    # 'x\x1b[31m.npz' is not an nmsim compressed file: the name reached the terminal raw
    path = tmp_path / "x\x1b[31m.npz"
    np.savez(path, w=np.zeros(2))
    assert nmsim_main(["inspect", str(path)]) == 2
    line = capsys.readouterr().err
    assert "\x1b" not in line and "\\x1b[31m.npz' is not an nmsim compressed file" in line


def test_npy_header_that_is_an_expression_is_named_without_a_memory_address(tmp_path, capsys):
    # "malformed node or string on line 1: <ast.Call object at 0x7f...>"
    path = tmp_path / "code.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00\x40\x00" + b"__import__('os').getcwd()".ljust(63) + b"\n")
    assert nmref_main(["check", str(path), "--pattern", "2:4"]) == 2
    line = capsys.readouterr().err.strip()
    assert "its header is not a Python literal" in line and "0x" not in line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("command", hostile.COMMANDS)
def test_a_fifo_or_device_named_like_a_checkpoint_is_never_opened(
    tmp_path, capsys, monkeypatch, corpus, command
):
    # mkfifo w.npy; ln -s /dev/zero z.npz: nmref said "does not exist or is not a file",
    # nmsim compress/inspect "is empty" (opening the FIFO would block until a writer came)
    os.mkfifo(tmp_path / "w.npy")
    names = ["w.npy"]
    if os.path.exists("/dev/zero"):
        os.symlink("/dev/zero", tmp_path / "z.npz")
        names.append("z.npz")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    for name in names:
        main, argv = _argv(command, name, out)
        status = main(argv)
        (line,) = capsys.readouterr().err.strip().splitlines()
        # permute takes a model folder: a file of any kind is refused before it is opened
        expected = "must be a model folder" if command == "permute" else "is not a regular file"
        assert status == 2 and f"{name!r}" in line and expected in line, line
        assert os.listdir(out) == []


def test_an_npz_with_two_members_named_w_is_refused_not_read_as_one_of_them(tmp_path, capsys):
    # zip with w.npy (4x4) then w.npy (8x8): nmref mask wrote the mask of one of them, exit 0
    path = tmp_path / "dup.npz"
    path.write_bytes(hostile._duplicate_members())
    out = tmp_path / "m.npz"
    assert nmref_main(["mask", str(path), "--pattern", "2:4", "-o", str(out)]) == 2
    line = capsys.readouterr().err.strip()
    assert "member 'w' appears more than once: an ambiguous archive" in line
    assert not out.exists()


def test_compress_calls_an_npz_without_members_an_npz_archive(tmp_path, capsys):
    # np.savez(path) with no arrays starts with the zip end record PK\x05\x06, not PK\x03\x04:
    # compress said "neither a .npy array nor an .npz archive"
    path = tmp_path / "empty.npz"
    np.savez(path)
    assert (
        nmsim_main(["compress", str(path), "--dtype", "fp16", "-o", str(tmp_path / "o.npz")]) == 2
    )
    assert "is an .npz archive (0 array(s))" in capsys.readouterr().err
