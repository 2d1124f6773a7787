"""Model folders and sharded ``.safetensors`` (issue 18 item 1): reading, validating, writing.

Every test builds a tiny model folder in ``tmp_path``: two or three shards, an index,
a ``config.json``, float32, float16 and bfloat16 weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from nmref.cli import main as nmref_main
from nmref.io.checkpoints import iter_tensors, list_tensors, read_tensor
from nmref.io.safetensors_writer import PlannedTensor, stream_safetensors
from nmref.io.sharded import INDEX_NAME, is_model_input, open_model

ROOT = Path(__file__).resolve().parents[1]


def _bf16_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values that are bfloat16 values (low 16 bits zero)."""
    bits = rng.standard_normal(shape, dtype=np.float32).view(np.uint32) & 0xFFFF0000
    return bits.view(np.float32)


def _shard(path: Path, tensors: dict[str, np.ndarray], bf16: tuple[str, ...] = ()) -> None:
    planned = [
        PlannedTensor(name, array.shape, "bfloat16" if name in bf16 else str(array.dtype))
        for name, array in sorted(tensors.items())
    ]
    stream_safetensors(str(path), planned, iter(sorted(tensors.items())))


def _model(folder: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a 3-shard model folder; returns every tensor (bf16 ones as float32 values)."""
    rng = np.random.default_rng(seed)
    shards = {
        "model-00001-of-00003.safetensors": {
            "embed_tokens.weight": rng.standard_normal((8, 16)).astype(np.float32),
            "layers.0.q.weight": _bf16_values(rng, (16, 16)),
            "layers.0.norm": np.ones(16, np.float32),
        },
        "model-00002-of-00003.safetensors": {
            "layers.0.mlp.weight": rng.standard_normal((8, 16)).astype(np.float16),
            "layers.1.q.weight": _bf16_values(rng, (16, 32)),
        },
        "model-00003-of-00003.safetensors": {
            "layers.1.mlp.weight": rng.standard_normal((32, 16)).astype(np.float32),
            "layers.1.step": np.arange(4, dtype=np.int64).reshape(2, 2),
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    everything = {}
    for shard, tensors in shards.items():
        _shard(folder / shard, tensors, bf16=("layers.0.q.weight", "layers.1.q.weight"))
        weight_map.update(dict.fromkeys(tensors, shard))
        everything.update(tensors)
    index = {"metadata": {"total_size": 1234}, "weight_map": weight_map}
    (folder / INDEX_NAME).write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps({"_name_or_path": "org/tiny-llama"}))
    return everything


def _merged(folder: Path, target: Path) -> Path:
    """The model's tensors in one .safetensors file (read back through the readers)."""
    records = list(open_model(folder).records())
    _shard(
        target,
        {r.name: np.asarray(r.array) for r in records},
        bf16=tuple(r.name for r in records if r.source_dtype == "bfloat16"),
    )
    return target


def _index(folder: Path) -> dict:
    return json.loads((folder / INDEX_NAME).read_text())


def _rewrite_index(folder: Path, change) -> None:
    document = _index(folder)
    change(document)
    (folder / INDEX_NAME).write_text(json.dumps(document))


# ----------------------------------------------------------------------------
# The streaming writer
# ----------------------------------------------------------------------------


def test_streamed_safetensors_reads_back_equal_through_safetensors_itself(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {
        "a": rng.standard_normal((3, 5)).astype(np.float32),
        "b": rng.standard_normal((7,)) > 0,
        "c": rng.integers(-5, 5, (2, 2, 2)).astype(np.int8),
        "d": np.zeros((0, 4), np.float16),
        "e": _bf16_values(rng, (4, 4)),
    }
    path = tmp_path / "s.safetensors"
    stream_safetensors(
        str(path), [PlannedTensor("e", (4, 4), "bfloat16")], iter([("e", tensors["e"])])
    )
    np.testing.assert_array_equal(read_tensor(path, "e").array, tensors["e"])
    planned = [PlannedTensor(k, v.shape, str(v.dtype)) for k, v in tensors.items() if k != "e"]
    stream_safetensors(
        str(path), planned, ((k, v) for k, v in tensors.items() if k != "e"), {"who": "test"}
    )
    with safe_open(str(path), framework="np") as handle:  # safetensors validates the header
        assert handle.metadata() == {"who": "test"}
        for name in ("a", "b", "c", "d"):
            got = handle.get_tensor(name)
            assert got.dtype == tensors[name].dtype
            np.testing.assert_array_equal(got, tensors[name])
    # the same values as safetensors' own writer
    save_file({k: v for k, v in tensors.items() if k != "e"}, str(tmp_path / "ref.safetensors"))
    for record in iter_tensors(tmp_path / "ref.safetensors"):
        np.testing.assert_array_equal(read_tensor(path, record.name).array, record.array)


def test_streamed_writer_refuses_values_that_are_not_bfloat16(tmp_path):
    with pytest.raises(ValueError, match="not all bfloat16 values"):
        stream_safetensors(
            str(tmp_path / "x.safetensors"),
            [PlannedTensor("w", (1,), "bfloat16")],
            iter([("w", np.array([1.1], np.float32))]),
        )


# ----------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------


def test_model_folder_lists_and_reads_every_shard_in_order(tmp_path):
    tensors = _model(tmp_path / "m")
    for given in (tmp_path / "m", tmp_path / "m" / INDEX_NAME):
        assert is_model_input(given)
        model = open_model(given)
        assert model.name == "org/tiny-llama"
        assert len(model.shards) == 3
        names = [info.name for info in model.infos()]
        assert sorted(names) == sorted(tensors)
        for shard in model.shards:  # shard order, each shard sorted by name
            in_shard = [i.name for i, s in model.tensors if s == shard]
            assert in_shard == [i.name for i in list_tensors(tmp_path / "m" / shard)]
        for record in model.records():
            np.testing.assert_array_equal(record.array, tensors[record.name])
        dtypes = {info.name: info.source_dtype for info in model.infos()}
        assert dtypes["layers.1.q.weight"] == "bfloat16"
        assert dtypes["layers.0.mlp.weight"] == "float16"


def test_an_empty_folder_named_like_a_checkpoint_is_not_a_model(tmp_path):
    (tmp_path / "w.safetensors").mkdir()
    assert not is_model_input(tmp_path / "w.safetensors")


def test_a_folder_with_only_model_safetensors_is_a_one_shard_model(tmp_path):
    folder = tmp_path / "single"
    folder.mkdir()
    save_file({"w": np.ones((4, 8), np.float32)}, str(folder / "model.safetensors"))
    model = open_model(folder)
    assert model.index is None and model.shards == ("model.safetensors",)
    assert model.name == "single"


HOSTILE_INDEXES = {
    "missing shard": (
        lambda d: d["weight_map"].update({"layers.1.step": "model-00009-of-00003.safetensors"}),
        "is missing from the model folder",
    ),
    "traversal": (
        lambda d: d["weight_map"].update({"layers.1.step": "../outside.safetensors"}),
        "outside the model folder (path traversal)",
    ),
    "absolute": (
        lambda d: d["weight_map"].update({"layers.1.step": "/etc/passwd"}),
        "outside the model folder (path traversal)",
    ),
    "sub-folder": (
        lambda d: d["weight_map"].update({"layers.1.step": "sub/x.safetensors"}),
        "no sub-folders",
    ),
    "wrong shard": (
        lambda d: d["weight_map"].update({"layers.1.step": "model-00001-of-00003.safetensors"}),
        "puts tensor 'layers.1.step' in 'model-00001-of-00003.safetensors' but it is in",
    ),
    "unlisted tensor": (
        lambda d: d["weight_map"].pop("layers.1.step"),
        "holds tensor 'layers.1.step', which the weight_map does not list",
    ),
    "tensor the shards lack": (
        lambda d: d["weight_map"].update({"ghost.weight": "model-00001-of-00003.safetensors"}),
        "puts tensor 'ghost.weight' in 'model-00001-of-00003.safetensors', which does not",
    ),
    "no weight_map": (lambda d: d.pop("weight_map"), "has no weight_map object"),
    "not a shard name": (
        lambda d: d["weight_map"].update({"layers.1.step": 7}),
        "must be shard file names",
    ),
    "not safetensors": (
        lambda d: d["weight_map"].update({"layers.1.step": "config.json"}),
        "must be a .safetensors file",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_INDEXES))
def test_a_bad_index_is_one_line_exit_2_for_every_command(tmp_path, capsys, case):
    from nmsim.cli import main as nmsim_main

    change, message = HOSTILE_INDEXES[case]
    _model(tmp_path / "m")
    (tmp_path / "outside.safetensors").write_bytes(b"")
    _rewrite_index(tmp_path / "m", change)
    runs = [
        (nmref_main, ["mask", str(tmp_path / "m"), "--pattern", "2:4", "-o", str(tmp_path / "o")]),
        (nmref_main, ["check", str(tmp_path / "m"), "--pattern", "2:4"]),
        (nmsim_main, ["report", str(tmp_path / "m"), "--quiet", "--methods", "1d"]),
    ]
    for main, argv in runs:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err, (argv[0], err)
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []


def test_a_tensor_in_two_shards_is_refused_as_ambiguous(tmp_path):
    _model(tmp_path / "m")
    shard = tmp_path / "m" / "model-00003-of-00003.safetensors"
    _shard(
        shard,
        {
            "layers.1.mlp.weight": np.ones((32, 16), np.float32),
            "layers.1.q.weight": np.ones((16, 32), np.float32),
            "layers.1.step": np.zeros((2, 2), np.int64),
        },
    )
    with pytest.raises(ValueError, match=r"'layers\.1\.q\.weight' is in two shards"):
        open_model(tmp_path / "m")


def test_an_index_naming_a_tensor_twice_is_refused(tmp_path):
    _model(tmp_path / "m")
    text = (tmp_path / "m" / INDEX_NAME).read_text()
    doubled = text.replace('"weight_map": {', '"weight_map": {"layers.1.step": "x.safetensors", ')
    (tmp_path / "m" / INDEX_NAME).write_text(doubled)
    with pytest.raises(ValueError, match=r"names 'layers\.1\.step' twice"):
        open_model(tmp_path / "m")


def test_a_symlinked_shard_pointing_out_of_the_folder_is_refused(tmp_path):
    _model(tmp_path / "m")
    shard = tmp_path / "m" / "model-00003-of-00003.safetensors"
    shard.rename(tmp_path / "elsewhere.safetensors")
    shard.symlink_to(tmp_path / "elsewhere.safetensors")
    with pytest.raises(ValueError, match="resolves outside the model folder"):
        open_model(tmp_path / "m")


# ----------------------------------------------------------------------------
# nmref mask / check on a model
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--transposable"], ["--apply"]])
def test_sharded_mask_equals_the_single_file_mask_bit_for_bit(tmp_path, capsys, extra):
    _model(tmp_path / "m")
    merged = _merged(tmp_path / "m", tmp_path / "merged.safetensors")
    argv = ["--pattern", "2:4", *extra]
    assert nmref_main(["mask", str(tmp_path / "m"), "-o", str(tmp_path / "out"), *argv]) == 0
    assert nmref_main(["mask", str(merged), "-o", str(tmp_path / "one.safetensors"), *argv]) == 0
    capsys.readouterr()
    index = _index(tmp_path / "out")
    single = {r.name: r for r in iter_tensors(tmp_path / "one.safetensors")}
    assert sorted(index["weight_map"]) == sorted(single)
    source = open_model(tmp_path / "m")
    for name, shard in index["weight_map"].items():
        assert shard == next(s for i, s in source.tensors if i.name == name)  # same layout
        got = read_tensor(tmp_path / "out" / shard, name)
        np.testing.assert_array_equal(got.array, single[name].array)
        if "--apply" in extra:  # masked weights keep the stored dtype (bf16 stays bf16)
            assert got.source_dtype == source.read(name).source_dtype
        else:
            assert got.array.dtype == np.bool_
    sizes = sum((tmp_path / "out" / s).stat().st_size for s in set(index["weight_map"].values()))
    assert 0 < index["metadata"]["total_size"] < sizes
    assert (tmp_path / "out" / "config.json").exists() == ("--apply" in extra)
    check = ["check", str(tmp_path / "out"), "--pattern", "2:4"]
    assert nmref_main(check + (["--transposable"] if "--transposable" in extra else [])) == 0


def test_include_and_exclude_select_across_shards(tmp_path, capsys):
    _model(tmp_path / "m")
    argv = ["mask", str(tmp_path / "m"), "--pattern", "2:4", "-o", str(tmp_path / "out")]
    assert nmref_main([*argv, "--include", r"\.q\.", "--exclude", "layers.0"]) == 0
    assert "1 tensor(s) in 1 shard(s)" in capsys.readouterr().out
    assert list(_index(tmp_path / "out")["weight_map"]) == ["layers.1.q.weight"]
    assert (
        nmref_main(["check", str(tmp_path / "m"), "--pattern", "2:4", "--include", "nothing"]) == 2
    )
    assert "passes --include 'nothing'" in capsys.readouterr().err


def test_check_finds_a_violation_in_a_later_shard(tmp_path, capsys):
    _model(tmp_path / "m")
    assert (
        nmref_main(["mask", str(tmp_path / "m"), "--pattern", "2:4", "-o", str(tmp_path / "o")])
        == 0
    )
    shard = tmp_path / "o" / "model-00003-of-00003.safetensors"
    mask = read_tensor(shard, "layers.1.mlp.weight").array.copy()
    mask[5, :4] = True
    _shard(shard, {"layers.1.mlp.weight": mask})
    capsys.readouterr()
    assert nmref_main(["check", str(tmp_path / "o"), "--pattern", "2:4"]) == 1
    assert "'layers.1.mlp.weight'" in capsys.readouterr().err


def test_sharded_output_is_not_replaced_without_force_nor_a_foreign_folder_with_it(
    tmp_path, capsys
):
    _model(tmp_path / "m")
    argv = ["mask", str(tmp_path / "m"), "--pattern", "2:4", "-o", str(tmp_path / "out")]
    assert nmref_main(argv) == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    assert nmref_main(argv) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    (tmp_path / "out" / "notes.txt").write_text("mine")
    assert nmref_main([*argv, "--force"]) == 2
    assert "holds 'notes.txt'" in capsys.readouterr().err
    (tmp_path / "out" / "notes.txt").unlink()
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    for target in (tmp_path / "m", tmp_path):  # the input, or a folder holding it
        assert nmref_main([*argv[:-1], str(target), "--force"]) == 2
        assert "is or holds an input" in capsys.readouterr().err
    assert nmref_main([*argv, "--force", "--apply"]) == 0
    assert (tmp_path / "out" / "config.json").exists()


def test_a_failure_midway_leaves_the_previous_output_and_no_temporary_folder(
    tmp_path, capsys, monkeypatch
):
    _model(tmp_path / "m")
    argv = ["mask", str(tmp_path / "m"), "--pattern", "2:4", "-o", str(tmp_path / "out")]
    assert nmref_main(argv) == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    import nmref.cli.mask

    calls = []
    real = nmref.cli.mask._mask_of

    def interrupted(record, args):
        calls.append(record.name)
        if len(calls) == 3:  # the second shard is being written
            raise KeyboardInterrupt
        return real(record, args)

    monkeypatch.setattr(nmref.cli.mask, "_mask_of", interrupted)
    assert nmref_main([*argv, "--force"]) == 130
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["m", "out"]
    # a fresh target: nothing at all
    calls.clear()
    assert nmref_main([*argv[:-1], str(tmp_path / "new")]) == 130
    assert sorted(os.listdir(tmp_path)) == ["m", "out"]
    capsys.readouterr()


def test_mask_error_in_a_later_shard_is_one_line_and_writes_nothing(tmp_path, capsys):
    _model(tmp_path / "m")
    argv = ["mask", str(tmp_path / "m"), "--pattern", "3:6", "-o", str(tmp_path / "out")]
    assert nmref_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "multiple of m=6" in err
    assert sorted(os.listdir(tmp_path)) == ["m"]


# ----------------------------------------------------------------------------
# nmsim report on a model
# ----------------------------------------------------------------------------


def test_report_on_a_model_equals_the_report_on_its_merged_file(tmp_path):
    from nmsim.report.build import ReportSettings, build_report
    from tests.report_schema import SCHEMA, validate

    _model(tmp_path / "m")
    merged = _merged(tmp_path / "m", tmp_path / "merged.safetensors")
    settings = ReportSettings(methods=("1d", "transposable"), include="layers")
    sharded = build_report(str(tmp_path / "m"), settings)
    single = build_report(str(merged), settings)
    assert validate(json.loads(json.dumps(sharded)), SCHEMA) == []
    assert sharded["checkpoint"]["kind"] == "model"
    assert sharded["checkpoint"]["name"] == "org/tiny-llama"
    by_name = {e["name"]: e for e in single["tensors"]}
    assert sorted(by_name) == sorted(e["name"] for e in sharded["tensors"])
    for entry in sharded["tensors"]:
        assert entry == by_name[entry["name"]]
    assert sharded["totals"]["tensors"] == single["totals"]["tensors"]
    # two worker processes read the shards themselves: same document
    assert (
        build_report(str(tmp_path / "m" / INDEX_NAME), settings, workers=2)["tensors"]
        == (sharded["tensors"])
    )


MEMORY_PROBE = """
import contextlib, io, resource, sys
from nmref.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    main(["mask", sys.argv[1], "--pattern", "2:4", "-o", sys.argv[2] + "-warm"])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with contextlib.redirect_stdout(io.StringIO()):
    status = main(["mask", sys.argv[1], "--pattern", "2:4", "-o", sys.argv[2], "--apply"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(status, before * 1024, after * 1024)
"""


@pytest.mark.slow
def test_sharded_mask_memory_is_bounded_by_the_largest_tensor(tmp_path):
    shape = (512, 2048)  # 2 MiB as bf16, 4 MiB as its float32 upcast
    folder = tmp_path / "big"
    folder.mkdir()
    weight_map = {}
    rng = np.random.default_rng(0)
    for s in range(4):
        name = f"model-{s + 1:05d}-of-00004.safetensors"
        names = [f"layers.{s}.{k}.weight" for k in range(12)]
        planned = [PlannedTensor(n, shape, "bfloat16") for n in names]
        stream_safetensors(
            str(folder / name), planned, ((n, _bf16_values(rng, shape)) for n in names)
        )
        weight_map.update(dict.fromkeys(names, name))
    (folder / INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}))
    model_bytes = sum((folder / s).stat().st_size for s in set(weight_map.values()))
    upcast_bytes = int(np.prod(shape)) * 4
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(folder), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    status, before, after = (int(x) for x in result.stdout.split())
    assert status == 0
    # A few working copies of one tensor (upcast, |w|, mask, masked copy), never a shard.
    assert after - before < 8 * upcast_bytes, (after - before, upcast_bytes)
    assert after - before < model_bytes / 4


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "bool"])
def test_read_tensor_rows_equals_slicing_the_whole_tensor(tmp_path, dtype):
    from nmref.io.checkpoints import read_tensor_rows

    rng = np.random.default_rng(9)
    if dtype == "bfloat16":
        values = _bf16_values(rng, (12, 5))
    elif dtype == "bool":
        values = rng.standard_normal((12, 5)) > 0
    else:
        values = rng.standard_normal((12, 5)).astype(dtype)
    path = tmp_path / "r.safetensors"
    _shard(
        path, {"a": np.ones((3, 3), np.float32), "w": values}, bf16=("w",) * (dtype == "bfloat16")
    )
    whole = read_tensor(path, "w")
    for start, stop in [(0, 12), (4, 8), (11, 12), (5, 5), (8, 99)]:
        band = read_tensor_rows(path, "w", start, stop)
        assert band.source_dtype == whole.source_dtype
        np.testing.assert_array_equal(band.array, whole.array[start:stop])
    npz = tmp_path / "r.npz"
    np.savez(npz, w=values)
    np.testing.assert_array_equal(read_tensor_rows(npz, "w", 2, 6).array, values[2:6])


def test_check_transposable_with_model_weights_prints_each_gap(tmp_path, capsys):
    _model(tmp_path / "m")
    out = str(tmp_path / "t")
    argv = ["--pattern", "2:4", "--transposable", "--include", "layers"]
    assert nmref_main(["mask", str(tmp_path / "m"), "-o", out, *argv]) == 0
    capsys.readouterr()
    assert nmref_main(["check", out, *argv, "--weights", str(tmp_path / "m")]) == 0
    lines = capsys.readouterr().out.splitlines()
    gaps = [line for line in lines if "optimality gap 0 (0.0000%" in line]
    assert len(gaps) == 4  # exact masks: no gap, for each of the four masked weights


def test_two_folder_writers_racing_without_force_exactly_one_wins(tmp_path):
    import threading

    from nmref.io.output import output_folder

    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def write(tag: str) -> None:
        try:
            with output_folder(tmp_path / "out") as folder:
                folder.write("a.json", lambda p: Path(p).write_text(tag))
                barrier.wait(timeout=10)  # both have built their hidden folder
            outcomes.append(tag)
        except ValueError as error:
            outcomes.append(f"refused: {error}")

    threads = [threading.Thread(target=write, args=(tag,)) for tag in ("x", "y")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if not o.startswith("refused")]
    assert len(winners) == 1, outcomes
    assert "exists; pass --force" in next(o for o in outcomes if o.startswith("refused"))
    assert (tmp_path / "out" / "a.json").read_text() == winners[0]
    assert os.listdir(tmp_path) == ["out"]  # no hidden folder left behind


@pytest.mark.slow
def test_sigterm_during_a_sharded_write_leaves_the_previous_output(tmp_path):
    import signal
    import time

    folder = tmp_path / "m"
    folder.mkdir()
    rng = np.random.default_rng(11)
    weight_map = {}
    for s in range(4):
        name = f"model-{s + 1:05d}-of-00004.safetensors"
        tensor = f"layers.{s}.weight"
        _shard(folder / name, {tensor: rng.standard_normal((512, 1024)).astype(np.float32)})
        weight_map[tensor] = name
    (folder / INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}))
    out = tmp_path / "out"
    out.mkdir()
    (out / INDEX_NAME).write_text("previous")  # a file the writer owns (issue 37: no other)
    command = [sys.executable, "-m", "nmref", "mask", str(folder), "-o", str(out), "--force"]
    command += ["--pattern", "2:4", "--transposable", "--quiet"]
    child = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        hidden = [p for p in os.listdir(tmp_path) if p.startswith(".out.")]
        if hidden and os.listdir(tmp_path / hidden[0]):  # a shard is being written
            break
        time.sleep(0.02)
    assert child.poll() is None, "finished before it could be interrupted"
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM, err
    assert sorted(os.listdir(tmp_path)) == ["m", "out"]
    assert [p.name for p in out.iterdir()] == [INDEX_NAME]
    assert (out / INDEX_NAME).read_text() == "previous"


@pytest.mark.parametrize("extra", [[], ["--apply"], ["--transposable", "--apply"]])
def test_streamed_single_file_output_equals_the_in_memory_writer(tmp_path, capsys, extra):
    """``-o x.safetensors`` from a .safetensors input is streamed; ``-o x.npz`` still holds
    every tensor and writes with NumPy: the same tensors, values and dtypes."""
    _model(tmp_path / "m")
    merged = _merged(tmp_path / "m", tmp_path / "merged.safetensors")
    argv = ["mask", str(merged), "--pattern", "2:4", *extra]
    assert nmref_main([*argv, "-o", str(tmp_path / "streamed.safetensors")]) == 0
    assert nmref_main([*argv, "-o", str(tmp_path / "held.npz")]) == 0
    capsys.readouterr()
    held = {r.name: r.array for r in iter_tensors(tmp_path / "held.npz")}
    streamed = {r.name: r.array for r in iter_tensors(tmp_path / "streamed.safetensors")}
    assert sorted(held) == sorted(streamed)
    for name, array in held.items():
        assert streamed[name].dtype == array.dtype, name
        np.testing.assert_array_equal(streamed[name], array)


def test_the_streaming_writer_never_casts_silently(tmp_path):
    with pytest.raises(ValueError, match="is float64, planned float32"):
        stream_safetensors(
            str(tmp_path / "x.safetensors"),
            [PlannedTensor("w", (2,), "float32")],
            iter([("w", np.zeros(2))]),
        )
