"""Issue 37, data loss and wrong output: what an output target can never be, and names that
must come back from a file as they were written.

Each class of the issue is one parametrised test over every writer (``nmref mask`` to a file
and to a sharded folder, ``nmref permute``, ``nmsim compress``, ``nmsim convert``, ``nmsim
report --out``, ``nmref demo --out`` and the library's ``write_tensors``), with the failing
input of the issue written literally among the cases. ``specs/errors.md`` section 3.1 states
the rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.numpy import save_file

from nmref.cli import main as nmref_main
from nmref.io.checkpoints import list_tensors, read_tensor, write_tensors
from nmref.io.output import write_output
from nmsim.cli import main as nmsim_main

VICTIM = b"victim: must survive\n"


def _two_of_four(rows: int = 8, columns: int = 16) -> np.ndarray:
    """fp16 weights that are 2:4 along the rows (exact in fp16)."""
    weights = np.zeros((rows, columns), np.float16)
    weights[:, 0::4] = 1.5
    weights[:, 3::4] = -0.25
    return weights


def _single_model(folder: Path) -> Path:
    """``MODEL_DIR``: config.json and one model.safetensors."""
    folder.mkdir()
    save_file({"l.weight": _two_of_four()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return folder


def _sharded_model(folder: Path) -> Path:
    """``MODEL_DIR`` with an index and two shards."""
    folder.mkdir()
    weight_map = {}
    for number, tensor in ((1, "a.weight"), (2, "b.weight")):
        shard = f"model-0000{number}-of-00002.safetensors"
        save_file({tensor: _two_of_four().astype(np.float32)}, str(folder / shard))
        weight_map[tensor] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text("{}")
    return folder


def _files(folder: Path) -> dict[str, object]:
    """Every entry of ``folder`` (recursively): a digest of each regular file's bytes (a
    short diff when a test fails), the kind of anything else."""
    found: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        mode = os.lstat(path).st_mode
        found[str(path.relative_to(folder))] = (
            hashlib.sha256(path.read_bytes()).hexdigest()
            if stat.S_ISREG(mode)
            else stat.S_IFMT(mode)
        )
    return found


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. The output is never a file the input reads (shards, index, config), with or without --force
# ---------------------------------------------------------------------------------------------

SHARD_1, SHARD_2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"
REPORT = ("report", "--methods", "1d", "--quiet")


def _own_input_case(case: str, t: Path) -> tuple[object, list[str]]:
    """The command line of one case: it writes over a file its input reads, the input given
    as a model folder or as the index file; the command must refuse with exit 2."""
    single, sharded = t / "M", t / "S"
    if case.startswith(
        ("mask folder -o its model", "permute", "convert folder -o its model", "adaprune")
    ):
        _single_model(single)
    elif not case.startswith("report"):
        _sharded_model(sharded)
    mask = ["mask", "--pattern", "2:4", "--force"]
    permute = ["permute", "--pattern", "2:4", "--force"]
    if case == "mask folder -o its model.safetensors":  # the example
        return nmref_main, [*mask, str(single), "-o", str(single / "model.safetensors")]
    if case == "mask folder -o its shard":
        return nmref_main, [*mask, str(sharded), "-o", str(sharded / SHARD_2)]
    if case == "mask index -o its shard":  # ... and the same through the index file
        return nmref_main, [*mask, str(sharded / INDEX), "-o", str(sharded / SHARD_1)]
    if case == "mask index -o its shard --apply":
        return nmref_main, [*mask, "--apply", str(sharded / INDEX), "-o", str(sharded / SHARD_2)]
    if case == "permute -o its model.safetensors":
        return nmref_main, [*permute, str(single), "-o", str(single / "model.safetensors")]
    if case == "adaprune folder -o its model.safetensors":
        calibration = _calibration(t / "x.npz", "l.weight")
        argv = ["adaprune", str(single), "--pattern", "2:4", "--calibration", calibration]
        return nmref_main, [*argv, "--force", "-o", str(single / "model.safetensors")]
    if case == "convert folder -o its model.safetensors":
        target = str(single / "model.safetensors")
        return nmsim_main, ["convert", str(single), target, "--to", "dense", "--force"]
    if case == "convert folder -o its shard":
        target = str(sharded / SHARD_1)
        return nmsim_main, ["convert", str(sharded), target, "--to", "dense", "--force"]
    if case == "report MODEL_DIR --out MODEL_DIR":
        model = _single_model(single)
        return nmsim_main, [*REPORT, str(model), "--out", str(model), "--force"]
    if case == "report index --out its folder":
        model = _sharded_model(sharded)
        return nmsim_main, [*REPORT, str(model / INDEX), "--out", str(model), "--force"]
    assert case == "report shard --out its folder"
    model = _single_model(single)
    return nmsim_main, [*REPORT, str(model / "model.safetensors"), "--out", str(model), "--force"]


OWN_INPUT_CASES = [
    "mask folder -o its model.safetensors",
    "mask folder -o its shard",
    "mask index -o its shard",
    "mask index -o its shard --apply",
    "permute -o its model.safetensors",
    "adaprune folder -o its model.safetensors",
    "convert folder -o its model.safetensors",
    "convert folder -o its shard",
    "report MODEL_DIR --out MODEL_DIR",
    "report index --out its folder",
    "report shard --out its folder",
]


@pytest.mark.parametrize("case", OWN_INPUT_CASES)
def test_no_writer_replaces_a_file_its_input_reads_even_with_force(tmp_path, capsys, case):
    main, argv = _own_input_case(case, tmp_path)
    before = _files(tmp_path)
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "input" in line, line
    assert _files(tmp_path) == before  # every shard, index and config byte for byte


def test_compress_refuses_an_output_hard_linked_to_its_input(tmp_path, capsys):
    weights = tmp_path / "w.npy"
    np.save(weights, _two_of_four())
    os.link(weights, tmp_path / "out.npz")
    argv = ["compress", str(weights), "--dtype", "fp16", "-o", str(tmp_path / "out.npz")]
    assert nmsim_main([*argv, "--force"]) == 2
    assert "is an input file" in _one_line(capsys.readouterr().err)
    assert np.load(weights).shape == (8, 16)


@pytest.mark.parametrize("given", ["folder", "index"])
def test_write_tensors_refuses_a_file_of_an_input_folder(tmp_path, given):
    model = _sharded_model(tmp_path / "S")
    inputs = (model,) if given == "folder" else (model / INDEX,)
    victim = model / "unlisted.safetensors"  # a folder reader may open it: protected too
    victim.write_bytes(VICTIM)
    before = _files(model)
    for target in (model / SHARD_1, victim):
        with pytest.raises(ValueError, match="is an input file"):
            write_tensors(target, {"w": np.ones(2)}, inputs=inputs, overwrite=True, flag="-o")
    assert _files(model) == before
    # a new file beside the model is no file the model reads: written
    assert write_tensors(model / "new.safetensors", {"w": np.ones(2)}, inputs=inputs).exists()


# ---------------------------------------------------------------------------------------------
# 2. A FIFO, socket or device is never replaced by a file, with or without --force
# ---------------------------------------------------------------------------------------------


def _make_node(path: Path, kind: str) -> object:
    if kind == "fifo":
        os.mkfifo(path)
        return None
    if kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        try:
            server.bind(str(path))
        except OSError as error:  # a path too long for a socket address
            pytest.skip(f"cannot bind a unix socket here: {error}")
        return server
    try:  # a character device like /dev/null (needs root)
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except (PermissionError, OSError) as error:
        pytest.skip(f"cannot make a device node here: {error}")
    return None


# writer -> (main, argv given the target path). The target is a non-regular file.
NODE_WRITERS = {
    "mask -o x.npz": lambda t, out: (
        nmref_main,
        ["mask", str(_single_model(t / "M")), "--pattern", "2:4", "-o", str(out)],
    ),
    "mask -o x.safetensors (streamed)": lambda t, out: (
        nmref_main,
        ["mask", str(_single_model(t / "M")), "--pattern", "2:4", "-o", str(out)],
    ),
    "permute -o x.safetensors": lambda t, out: (
        nmref_main,
        ["permute", str(_single_model(t / "M")), "--pattern", "2:4", "-o", str(out)],
    ),
    "adaprune -o x.safetensors": lambda t, out: (
        nmref_main,
        [
            "adaprune",
            str(_single_model(t / "M")),
            "--pattern",
            "2:4",
            "--calibration",
            _calibration(t / "x.npz", "l.weight"),
            "-o",
            str(out),
        ],
    ),
    "compress -o x.npz": lambda t, out: (
        nmsim_main,
        ["compress", str(_npy(t / "w.npy")), "--dtype", "fp16", "-o", str(out)],
    ),
    "convert OUT.safetensors": lambda t, out: (
        nmsim_main,
        ["convert", str(_single_model(t / "M")), str(out), "--to", "sparse-24-bitmask"],
    ),
}
NODE_SUFFIX = {
    "mask -o x.npz": ".npz",
    "mask -o x.safetensors (streamed)": ".safetensors",
    "permute -o x.safetensors": ".safetensors",
    "adaprune -o x.safetensors": ".safetensors",
    "compress -o x.npz": ".npz",
    "convert OUT.safetensors": ".safetensors",
}


def _calibration(path: Path, name: str) -> str:
    """Layer inputs for ``nmref adaprune``: 256 rows for the layer ``name`` (128 inputs)."""
    rows = np.random.default_rng(5).standard_normal((256, 128)).astype(np.float32)
    np.savez(path, **{name: rows})
    return str(path)


def _npy(path: Path) -> Path:
    np.save(path, _two_of_four())
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
@pytest.mark.parametrize("writer", sorted(NODE_WRITERS))
def test_no_writer_replaces_a_fifo_socket_or_device(tmp_path, capsys, writer, kind, force):
    target = tmp_path / f"o{NODE_SUFFIX[writer]}"
    keep = _make_node(target, kind)
    try:
        main, argv = NODE_WRITERS[writer](tmp_path, target)
        assert main(argv + (["--force"] if force else [])) == 2
        line = _one_line(capsys.readouterr().err)
        assert "is not a regular file" in line and repr(str(target)) in line
        assert "--force" in line
        assert not stat.S_ISREG(os.lstat(target).st_mode)  # still the node it was
        assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []
    finally:
        if keep is not None:
            keep.close()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("name", ["report.json", "report.csv", "mask_heatmap.png"])
def test_report_out_refuses_a_folder_holding_a_fifo_named_like_its_file(
    tmp_path, capsys, name, force
):
    folder = tmp_path / "d"
    folder.mkdir()
    os.mkfifo(folder / name)
    argv = ["report", "--quiet", "--methods", "1d", "--out", str(folder)]
    assert nmsim_main(argv + (["--force"] if force else [])) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--out file {str(folder / name)!r} is not a regular file" in line
    assert stat.S_ISFIFO(os.lstat(folder / name).st_mode)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_write_output_with_force_refuses_a_fifo_made_while_writing(tmp_path):
    target = tmp_path / "o.bin"

    def write(temporary: str) -> None:
        Path(temporary).write_bytes(b"new")
        os.mkfifo(target)  # appears after the first check

    with pytest.raises(ValueError, match="is not a regular file"):
        write_output(target, write, force=True)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert os.listdir(tmp_path) == ["o.bin"]


# ---------------------------------------------------------------------------------------------
# 4. Tensor names: every name comes back from the file as written, or is refused in one line
# ---------------------------------------------------------------------------------------------

# names NumPy's savez took as its own keywords, NUL bytes zip cuts names at, the safetensors
# metadata key, names that look like member suffixes, paths, non-UTF-8 (a surrogate)
HOSTILE_NAMES = [
    ["allow_pickle", "w"],
    ["file", "w"],
    ["args", "kwds"],
    ["w\x00a", "w\x00b"],
    ["w\x00"],
    ["__metadata__"],
    ["__metadata__", "w"],
    ["w.npy", "w"],
    ["w.npy.npy", "w.npy"],
    [".npy", ""],
    ["a/b", "../c", "/d"],
    ["a\\b"],
    ["caf\u00e9", "\u2603"],
    ["\udcff"],
]


def _round_trip_or_refused(path: Path, names: list[str]) -> None:
    tensors = {name: np.full((2, 3), index, np.float32) for index, name in enumerate(names)}
    try:
        write_tensors(path, tensors)
    except ValueError as error:
        assert "\n" not in str(error) and repr(str(path)) in str(error)
        assert not path.exists() and os.listdir(path.parent) == []
        return
    assert sorted(info.name for info in list_tensors(path)) == sorted(names)
    for name, array in tensors.items():
        np.testing.assert_array_equal(read_tensor(path, name).array, array)


@pytest.mark.parametrize("names", HOSTILE_NAMES, ids=repr)
@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_every_tensor_name_round_trips_or_is_refused(tmp_path, names, suffix):
    _round_trip_or_refused(tmp_path / f"o{suffix}", names)


@given(names=st.lists(st.text(max_size=12), min_size=1, max_size=4, unique=True))
@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_any_tensor_names_round_trip_or_are_refused(tmp_path_factory, suffix, names):
    folder = tmp_path_factory.mktemp("names")
    _round_trip_or_refused(folder / f"o{suffix}", names)


def test_npz_writer_refuses_the_names_that_do_not_round_trip(tmp_path):
    """The checker has power: these exact names are refused (a NUL, not UTF-8), the others
    written; the .safetensors writer refuses ``__metadata__`` and non-UTF-8 names."""
    for names in (["w\x00a", "w\x00b"], ["\udcff"]):
        with pytest.raises(ValueError, match="tensor name"):
            write_tensors(tmp_path / "o.npz", {n: np.ones(1) for n in names})
    for names in (["__metadata__"], ["\udcff"]):
        with pytest.raises(ValueError, match="tensor name"):
            write_tensors(tmp_path / "o.safetensors", {n: np.ones(1) for n in names})
    assert os.listdir(tmp_path) == []


def _safetensors_input(path: Path, names: list[str]) -> Path:
    save_file({name: _two_of_four().astype(np.float32) for name in names}, str(path))
    return path


def test_mask_writes_a_tensor_named_allow_pickle_into_an_npz(tmp_path, capsys):
    # the issue: "allow_pickle" was silently dropped while the CLI said "wrote 2 tensor(s)"
    source = _safetensors_input(tmp_path / "in.safetensors", ["allow_pickle", "w"])
    assert nmref_main(["mask", str(source), "--pattern", "2:4", "-o", str(tmp_path / "o.npz")]) == 0
    assert "wrote masks of 2 tensor(s)" in capsys.readouterr().out
    assert sorted(i.name for i in list_tensors(tmp_path / "o.npz")) == ["allow_pickle", "w"]
    assert nmref_main(["check", str(tmp_path / "o.npz"), "--pattern", "2:4"]) == 0


def test_mask_writes_a_tensor_named_file_into_an_npz(tmp_path, capsys):
    # the issue: "savez() got multiple values for argument 'file'"
    source = _safetensors_input(tmp_path / "in.safetensors", ["file", "w"])
    assert nmref_main(["mask", str(source), "--pattern", "2:4", "-o", str(tmp_path / "o.npz")]) == 0
    assert sorted(i.name for i in list_tensors(tmp_path / "o.npz")) == ["file", "w"]


def test_mask_refuses_nul_bytes_that_would_give_two_npz_members_named_w(tmp_path, capsys):
    # the issue: tensors "w\x00a" and "w\x00b" became two members named w; check exited 0
    source = _safetensors_input(tmp_path / "in.safetensors", ["w\x00a", "w\x00b"])
    out = tmp_path / "o.npz"
    assert nmref_main(["mask", str(source), "--pattern", "2:4", "-o", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "tensor name" in line and repr(str(out)) in line
    assert not out.exists()


def test_mask_refuses_an_npz_member_metadata_as_a_safetensors_tensor(tmp_path, capsys):
    # the issue: an .npz member __metadata__ gave a .safetensors nobody can read
    source = tmp_path / "in.npz"
    np.savez(source, __metadata__=_two_of_four().astype(np.float32))
    for out in (tmp_path / "o.safetensors",):
        assert nmref_main(["mask", str(source), "--pattern", "2:4", "-o", str(out)]) == 2
        assert "'__metadata__' is reserved" in _one_line(capsys.readouterr().err)
        assert not out.exists()


def test_stream_safetensors_refuses_a_tensor_named_metadata_and_twice_the_same_name(tmp_path):
    from nmref.io.safetensors_writer import PlannedTensor, stream_safetensors

    path = tmp_path / "o.safetensors"
    for names in (["__metadata__"], ["w", "w"]):
        planned = [PlannedTensor(name, (1,), "float32") for name in names]
        arrays = iter([(name, np.ones(1, np.float32)) for name in names])
        with pytest.raises(ValueError, match=r"__metadata__|two tensors"):
            stream_safetensors(str(path), planned, arrays)
        assert not path.exists()


@pytest.mark.parametrize("command", ["check", "mask"])
def test_npz_members_w_npy_and_w_are_refused_not_read_as_one_tensor(tmp_path, capsys, command):
    # the issue: members "w.npy" and "w" both became tensor "w" (one silently dropped)
    source = tmp_path / "in.npz"
    with zipfile.ZipFile(source, "w") as archive:
        for member, rows in (("w.npy", 4), ("w", 8)):
            with archive.open(member, "w") as handle:
                np.lib.format.write_array(handle, np.ones((rows, 8), np.float32))
    argv = [command, str(source), "--pattern", "2:4"]
    if command == "mask":
        argv += ["-o", str(tmp_path / "o.npz")]
    assert nmref_main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "'w.npy' and 'w' are both read as tensor 'w'" in line
    with pytest.raises(ValueError, match="both read as tensor"):
        list_tensors(source)


def test_mask_refuses_two_input_tensors_read_under_one_name(tmp_path, capsys):
    pytest.importorskip("torch")
    import torch

    source = tmp_path / "in.pt"
    weight = torch.ones(8, 16)
    torch.save({"a.b": weight, "a": {"b": weight * 2}}, source)
    out = tmp_path / "o.npz"
    assert nmref_main(["mask", str(source), "--pattern", "2:4", "-o", str(out)]) == 2
    assert "two tensors read as 'a.b'" in _one_line(capsys.readouterr().err)
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# 5. A user's files are never replaced by a name the writer did not choose for them
# ---------------------------------------------------------------------------------------------


def test_demo_out_refuses_to_replace_a_users_example_npz_without_force(tmp_path, capsys):
    # the issue: nmref demo --out DIR silently replaced DIR/example.npz
    (tmp_path / "example.npz").write_bytes(VICTIM)
    assert nmref_main(["demo", "--out", str(tmp_path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{str(tmp_path / 'example.npz')!r} exists; pass --force" in line
    assert (tmp_path / "example.npz").read_bytes() == VICTIM
    assert os.listdir(tmp_path) == ["example.npz"]


def test_demo_out_refuses_before_writing_when_only_the_mask_file_exists(tmp_path, capsys):
    (tmp_path / "example-mask-2of4.npz").write_bytes(VICTIM)
    assert nmref_main(["demo", "--out", str(tmp_path)]) == 2
    assert "example-mask-2of4.npz' exists" in _one_line(capsys.readouterr().err)
    assert os.listdir(tmp_path) == ["example-mask-2of4.npz"]
    assert nmref_main(["demo", "--out", str(tmp_path), "--force"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["example-mask-2of4.npz", "example.npz"]


@pytest.mark.parametrize(
    "unrelated",
    [
        {"other-model.safetensors": b"someone's weights"},
        {"notes.json": b"{}"},
        {"model.safetensors.index.json.bak": b"{}"},
        {"old-model-00009-of-00009.safetensors": b"x", "tokenizer.json": b"{}"},
    ],
    ids=lambda files: ",".join(files),
)
def test_sharded_force_never_deletes_files_the_writer_did_not_write(tmp_path, capsys, unrelated):
    # the issue: a sharded -o DIR --force deleted unrelated .safetensors/.json files in DIR
    model = _sharded_model(tmp_path / "S")
    out = tmp_path / "out"
    argv = ["mask", str(model), "--pattern", "2:4", "-o", str(out)]
    assert nmref_main(argv) == 0
    for name, data in unrelated.items():
        (out / name).write_bytes(data)
    before = _files(out)
    assert nmref_main([*argv, "--force"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "refusing to replace a folder that is not" in line
    assert any(f"holds {name!r}" in line for name in unrelated)
    assert _files(out) == before
    assert sorted(os.listdir(tmp_path)) == ["S", "out"]


def test_sharded_output_into_an_existing_empty_folder_needs_no_force(tmp_path):
    model = _sharded_model(tmp_path / "S")
    (tmp_path / "out").mkdir()
    assert nmref_main(["mask", str(model), "--pattern", "2:4", "-o", str(tmp_path / "out")]) == 0
    assert sorted(os.listdir(tmp_path / "out")) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]


def _builtin_names() -> list[str]:
    from nmsim.report.build import INSTALLED_CHECKPOINTS
    from nmsim.report.zoo import ZOO

    return sorted([*ZOO, *INSTALLED_CHECKPOINTS])


@pytest.mark.parametrize("name", _builtin_names())
@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_local_path_named_like_a_builtin_model_is_never_shadowed(
    tmp_path, capsys, monkeypatch, name, kind
):
    # the issue: a local folder llama-mlp, resnet50 or minilm was silently the built-in model
    monkeypatch.chdir(tmp_path)
    if kind == "folder":
        _single_model(tmp_path / name)
    else:
        (tmp_path / name).write_bytes(b"x")
    assert nmsim_main(["report", name, "--methods", "1d", "--quiet"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{name!r} is both a built-in model and a {kind}" in line
    assert repr(os.path.join(".", name)) in line


def test_a_local_model_folder_named_like_a_builtin_is_read_as_dot_slash_name(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    _single_model(tmp_path / "llama-mlp")
    assert nmsim_main(["report", "./llama-mlp", "--methods", "1d", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not report["checkpoint"]["synthetic"]
    assert [entry["name"] for entry in report["tensors"]] == ["l.weight"]


# ---------------------------------------------------------------------------------------------
# 3. nmsim report --out publishes its folder as one set, or not at all
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def previous_report(tmp_path_factory):
    """A checkpoint and the report folder of ``nmsim report w.npz --out out`` (made once)."""
    pytest.importorskip("matplotlib")
    folder = tmp_path_factory.mktemp("report")
    np.savez(folder / "w.npz", **{"fc.weight": _two_of_four(16, 32).astype(np.float32)})
    argv = ["report", str(folder / "w.npz"), "--methods", "1d", "--quiet"]
    assert nmsim_main([*argv, "--out", str(folder / "out")]) == 0
    return folder


def _copy_report(previous: Path, tmp_path: Path) -> tuple[list[str], Path]:
    import shutil

    shutil.copy(previous / "w.npz", tmp_path / "w.npz")
    shutil.copytree(previous / "out", tmp_path / "out")
    argv = ["report", str(tmp_path / "w.npz"), "--methods", "1d", "--quiet", "--pattern", "1:4"]
    return [*argv, "--out", str(tmp_path / "out"), "--force"], tmp_path / "out"


@pytest.mark.slow
@pytest.mark.parametrize("blocker", ["dangling symlink", "folder"])
def test_report_out_refuses_a_fifth_file_it_cannot_write_before_writing_the_first(
    tmp_path, capsys, previous_report, blocker
):
    # the issue: a dangling symlink or a folder named like the 5th file failed after 4 files
    argv, out = _copy_report(previous_report, tmp_path)
    fifth = out / "mask_heatmap.png"
    fifth.unlink()
    if blocker == "folder":
        fifth.mkdir()
    else:
        fifth.symlink_to(tmp_path / "nowhere.png")
    before = _files(out)
    assert nmsim_main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"--out file {str(fifth)!r} is" in line
    assert _files(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out", "w.npz"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("interruption", "after", "status"),
    [
        ("OSError (a full disk)", 4, 2),  # the 5th file fails
        ("SIGINT", 1, 130),  # Ctrl-C after report.json
        ("SIGTERM", 1, 128 + 15),
    ],
)
def test_report_out_interrupted_after_some_files_leaves_the_previous_report_whole(
    tmp_path, capsys, monkeypatch, previous_report, interruption, after, status
):
    # the issue: report.json new, the plots old (exit 2/130/143): a mix of two reports
    import errno
    import signal

    from nmref.io import output

    argv, out = _copy_report(previous_report, tmp_path)
    before = _files(out)
    real = output._fsync_file
    calls = []

    def fsync_file(temporary: str) -> None:  # each file, complete, before it is published
        calls.append(temporary)
        if len(calls) <= after:
            return real(temporary)
        if interruption == "SIGINT":
            raise KeyboardInterrupt
        if interruption == "SIGTERM":
            os.kill(os.getpid(), signal.SIGTERM)  # the writer's handler ends the write
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), temporary)

    monkeypatch.setattr(output, "_fsync_file", fsync_file)
    if interruption == "SIGTERM":
        with pytest.raises(SystemExit) as ended:
            nmsim_main(argv)
        assert ended.value.code == status
    else:
        assert nmsim_main(argv) == status
    assert len(calls) == after + 1
    assert _files(out) == before  # the previous report, every file of it
    assert sorted(os.listdir(tmp_path)) == ["out", "w.npz"]  # no hidden folder either
    capsys.readouterr()


@pytest.mark.slow
def test_report_out_replaces_the_whole_previous_report(tmp_path, capsys, previous_report):
    argv, out = _copy_report(previous_report, tmp_path)
    assert nmsim_main(argv) == 0
    assert json.loads((out / "report.json").read_text())["settings"]["pattern"] == "1:4"
    assert sorted(os.listdir(tmp_path)) == ["out", "w.npz"]
    (out / "notes.txt").write_text("mine")  # a folder holding a user's file is not replaced
    assert nmsim_main(argv) == 2
    assert "holds 'notes.txt', which this command does not write" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_a_file_the_input_folder_does_not_read_may_be_replaced_in_it(tmp_path, capsys):
    # the guard protects what a model folder's readers open (.safetensors, .json), not all
    model = _single_model(tmp_path / "M")
    argv = ["mask", str(model), "--pattern", "2:4", "-o", str(model / "masks.npz")]
    assert nmref_main(argv) == 0
    assert nmref_main([*argv, "--force"]) == 0
    assert nmref_main([*argv[:-1], str(model / "masks.safetensors")]) == 0
    capsys.readouterr()
    assert nmref_main([*argv[:-1], str(model / "masks.safetensors"), "--force"]) == 2
    assert "is an input file" in _one_line(capsys.readouterr().err)
