"""Tests of tensor-file reading and atomic writing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nmref.io.checkpoints import iter_tensors, write_tensors


def _tensors():
    rng = np.random.default_rng(1)
    return {
        "a.weight": rng.standard_normal((4, 8)).astype(np.float32),
        "b.mask": rng.integers(0, 2, (2, 4)).astype(bool),
    }


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_round_trip(tmp_path, suffix):
    tensors = _tensors()
    path = write_tensors(tmp_path / f"t{suffix}", tensors)
    loaded = {r.name: r.array for r in iter_tensors(path)}
    assert loaded.keys() == tensors.keys()
    for name, array in tensors.items():
        np.testing.assert_array_equal(loaded[name], array)
        assert loaded[name].dtype == array.dtype


def test_npy_holds_one_tensor_named_after_the_file(tmp_path):
    path = write_tensors(tmp_path / "w.npy", {"x": np.eye(4)})
    (record,) = iter_tensors(path)
    assert record.name == "w"
    with pytest.raises(ValueError, match="holds one tensor"):
        write_tensors(tmp_path / "two.npy", _tensors())


def test_bfloat16_is_read_as_its_exact_float32_upcast(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    values = torch.randn(8, 16).to(torch.bfloat16)
    save_file({"w": values, "v": values.float()}, str(tmp_path / "bf.safetensors"))
    records = {r.name: r for r in iter_tensors(tmp_path / "bf.safetensors")}
    assert records["w"].source_dtype == "bfloat16"
    np.testing.assert_array_equal(records["w"].array, values.float().numpy())


def test_writes_refuse_the_input_and_existing_files(tmp_path):
    path = write_tensors(tmp_path / "t.npz", _tensors())
    with pytest.raises(ValueError, match="is an input file"):
        write_tensors(path, _tensors(), inputs=(path,), overwrite=True)
    with pytest.raises(ValueError, match="exists"):
        write_tensors(path, _tensors())
    write_tensors(path, {"only": np.ones((2, 2))}, overwrite=True)
    assert [r.name for r in iter_tensors(path)] == ["only"]
    # No temporary files are left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]


@pytest.mark.parametrize("suffix", [".npz", ".safetensors", ".npy"])
def test_corrupt_files_raise_value_error(tmp_path, suffix):
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not a tensor file")
    with pytest.raises(ValueError, match="bad"):
        list(iter_tensors(path))


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"must end in one of \.npy"):
        list(iter_tensors(tmp_path / "w.bin"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(iter_tensors(tmp_path / "w.npy"))


@pytest.mark.parametrize("suffix", [".npz", ".safetensors", ".npy"])
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_get_the_mode_of_a_plain_open(tmp_path, suffix, umask):
    import os

    tensors = _tensors() if suffix != ".npy" else {"w": np.ones(3)}
    previous = os.umask(umask)
    try:
        path = write_tensors(tmp_path / f"t{suffix}", tensors)
        plain = tmp_path / "plain"
        plain.write_bytes(b"")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", f"t{suffix}"]


def test_atomic_output_never_touches_the_process_umask(tmp_path, monkeypatch):
    """Setting the umask, even to restore it, changes the mode of files other threads
    create meanwhile; atomic_output must not do it at all."""
    import os

    from nmref.io.checkpoints import atomic_output

    def forbidden(mask):
        raise AssertionError(f"os.umask({mask:#o}) called")

    monkeypatch.setattr(os, "umask", forbidden)
    with atomic_output(tmp_path / "out.bin") as temporary:
        Path(temporary).write_bytes(b"data")
    assert (tmp_path / "out.bin").read_bytes() == b"data"
    with pytest.raises(RuntimeError), atomic_output(tmp_path / "other.bin") as temporary:
        Path(temporary).write_bytes(b"half")
        raise RuntimeError("writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


@pytest.mark.parametrize(
    "content",
    [
        b"this is not a checkpoint\n\x00\x01",
        b"\x16\xcf\xa2\xd3\xb8\xd4hO" * 12,  # random bytes: torch read them as a bad pickle
        b"",
    ],
)
@pytest.mark.parametrize("suffix", [".pt", ".pth"])
def test_a_file_torch_did_not_write_is_named_as_such(tmp_path, content, suffix):
    """torch.load said 'pop from empty list' (IndexError) or blamed pickled objects."""
    pytest.importorskip("torch")
    from nmref.io.checkpoints import list_tensors, read_tensor

    path = tmp_path / f"garbage{suffix}"
    path.write_bytes(content)
    expected = re.escape(f"path='{path}' is not a readable PyTorch checkpoint: ")
    expected += ".*(starts with|the file is empty)"
    for read in (lambda: list(iter_tensors(path)), lambda: list_tensors(path)):
        with pytest.raises(ValueError, match=expected):
            read()
    with pytest.raises(ValueError, match=expected):
        read_tensor(path, "w")


@pytest.mark.parametrize("zip_archive", [True, False])
def test_torch_checkpoints_of_both_formats_pass_the_signature_check(tmp_path, zip_archive):
    torch = pytest.importorskip("torch")
    path = tmp_path / "m.pt"
    torch.save({"w": torch.arange(4.0)}, path, _use_new_zipfile_serialization=zip_archive)
    [record] = list(iter_tensors(path))
    assert record.name == "w" and record.array.tolist() == [0.0, 1.0, 2.0, 3.0]


def _lying_npz(path, shape=(2**20, 2**20)):
    """A tiny .npz whose only member's header claims ``shape`` float64 and holds no data."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.npy", header.getvalue())  # the header writer adds the magic
    return path


def test_npz_whose_header_claims_2_20_by_2_20_is_refused_before_allocating(tmp_path):
    """Issue 20: a 301-byte .npz whose header claims (2**20, 2**20) made nmref mask, check and
    nmsim report try to allocate 4 TiB."""
    from nmref.io.checkpoints import iter_tensors, read_tensor

    path = _lying_npz(tmp_path / "lie.npz")
    assert path.stat().st_size < 400
    with pytest.raises(ValueError, match=r"declares shape \(1048576, 1048576\) float64"):
        list(iter_tensors(path))
    with pytest.raises(ValueError, match="a corrupt or lying header"):
        read_tensor(path, "w")


def test_npz_member_over_the_memory_budget_names_the_variable(tmp_path, monkeypatch):
    """A zip bomb's member is honest but huge: refused by the budget, which says how to raise it."""
    from nmref.io.checkpoints import iter_tensors

    path = tmp_path / "big.npz"
    np.savez_compressed(path, w=np.zeros((512, 512)))
    monkeypatch.setenv("NMREF_MEMORY_BUDGET_GIB", "0.0001")
    with pytest.raises(
        ValueError, match=r"over the 0.0001 GiB budget; set NMREF_MEMORY_BUDGET_GIB"
    ):
        list(iter_tensors(path))
    monkeypatch.setenv("NMREF_MEMORY_BUDGET_GIB", "1")
    assert next(iter_tensors(path)).array.shape == (512, 512)
