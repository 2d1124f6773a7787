"""``list_tensors`` / ``read_tensor`` and ``.pt`` reading in ``nmref.io.checkpoints``."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from nmref.io.checkpoints import (
    TensorNotFoundError,
    iter_tensors,
    list_tensors,
    read_tensor,
    write_tensors,
)


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "b.weight": rng.standard_normal((4, 8)).astype(np.float32),
        "a.bias": rng.standard_normal(4),
        "c.int": np.arange(6, dtype=np.int16).reshape(2, 3),
    }


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_listing_and_random_access_agree_with_streaming(tmp_path, suffix):
    path = write_tensors(tmp_path / f"w{suffix}", _tensors())
    streamed = list(iter_tensors(path))
    listed = list_tensors(path)
    assert [i.name for i in listed] == [r.name for r in streamed]
    for info, record in zip(listed, streamed, strict=True):
        assert info.shape == record.array.shape
        assert info.source_dtype == record.source_dtype
        again = read_tensor(path, info.name)
        np.testing.assert_array_equal(again.array, record.array)
        assert again.array.dtype == record.array.dtype


def test_npy_is_one_tensor_named_after_the_file(tmp_path):
    path = write_tensors(tmp_path / "only.npy", {"x": np.ones((2, 4), np.float16)})
    (info,) = list_tensors(path)
    assert (info.name, info.shape, info.source_dtype) == ("only", (2, 4), "float16")
    assert read_tensor(path, "only").array.dtype == np.float16


def test_bfloat16_safetensors_read_by_name_is_the_exact_upcast(tmp_path):
    bits = np.array([[0x3F80, 0xC000, 0x0001, 0x7F7F]], dtype=np.uint16)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [1, 4], "data_offsets": [0, 8]}})
    path = tmp_path / "bf.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + bits.tobytes())
    (info,) = list_tensors(path)
    assert info.source_dtype == "bfloat16"
    record = read_tensor(path, "w")
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(record.array, expected)
    assert record.array[0, 0] == 1.0 and record.array[0, 1] == -2.0


def test_missing_name_is_a_key_error_naming_the_file(tmp_path):
    path = write_tensors(tmp_path / "w.npz", _tensors())
    with pytest.raises(TensorNotFoundError, match="has no tensor named 'nope'") as caught:
        read_tensor(path, "nope")
    assert isinstance(caught.value, KeyError)


def test_truncated_safetensors_is_caught_when_listing(tmp_path):
    path = write_tensors(tmp_path / "w.safetensors", _tensors())
    data = path.read_bytes()
    path.write_bytes(data[:-8])
    with pytest.raises(ValueError, match="runs past the end of the file"):
        list_tensors(path)


def test_pt_state_dicts_nested_bf16_and_legacy_format(tmp_path):
    torch = pytest.importorskip("torch")
    weight = torch.tensor([[1.5, -2.0], [0.0078125, 3.0]], dtype=torch.bfloat16)
    state = {"model": {"fc.weight": weight, "fc.bias": torch.zeros(2)}, "epoch": 3}
    for legacy in (False, True):
        path = tmp_path / f"m{int(legacy)}.pt"
        torch.save(state, path, _use_new_zipfile_serialization=not legacy)
        listed = list_tensors(path)
        assert [(i.name, i.shape, i.source_dtype) for i in listed] == [
            ("model.fc.weight", (2, 2), "bfloat16"),
            ("model.fc.bias", (2,), "float32"),
        ]
        record = read_tensor(path, "model.fc.weight")
        assert record.array.dtype == np.float32 and record.source_dtype == "bfloat16"
        np.testing.assert_array_equal(record.array, weight.float().numpy())
        names = [r.name for r in iter_tensors(path)]
        assert names == ["model.fc.weight", "model.fc.bias"]


def test_a_bare_tensor_pt_file_is_named_after_the_file(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save(torch.ones(3, 4), tmp_path / "lonely.pt")
    (info,) = list_tensors(tmp_path / "lonely.pt")
    assert info.name == "lonely" and info.shape == (3, 4)
