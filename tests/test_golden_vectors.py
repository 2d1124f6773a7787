"""Golden vectors (nmref/testing/data/vectors): stored, reproducible, and matched by every implementation."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

import nmref
from nmref.testing.golden import (
    check_golden_vectors,
    default_vectors_dir,
    load_vectors,
    nmref_implementation,
)

VECTORS = default_vectors_dir()
GENERATOR = Path(__file__).resolve().parents[1] / "scripts" / "golden" / "make_vectors.py"


def _generator():
    spec = importlib.util.spec_from_file_location("make_vectors", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manifest_lists_every_file_and_digests_match():
    manifest = json.loads((VECTORS / "manifest.json").read_text())
    listed = {entry["file"] for entry in manifest["vectors"]}
    assert listed == {path.name for path in VECTORS.glob("*.npz")}
    assert len(list(load_vectors(VECTORS))) == len(listed) >= 34


def test_generator_reproduces_the_stored_arrays():
    files, manifest = _generator().build()
    stored = {vector.name: vector for vector in load_vectors(VECTORS)}
    assert sorted(stored) == sorted(entry["name"] for entry in manifest["vectors"])
    for entry in manifest["vectors"]:
        with np.load(io.BytesIO(files[entry["file"]]), allow_pickle=False) as fresh:
            np.testing.assert_array_equal(fresh["input"], stored[entry["name"]].input)
            np.testing.assert_array_equal(fresh["expected"], stored[entry["name"]].expected)
            for key, value in (stored[entry["name"]].extras or {}).items():
                np.testing.assert_array_equal(fresh[key], value)


def test_vectors_are_valid_and_bfloat16_inputs_are_representable():
    for vector in load_vectors(VECTORS):
        assert vector.expected.dtype == np.bool_
        if vector.function == "nm_mask":
            assert nmref.is_nm(vector.expected, vector.n, vector.m)
        elif vector.function.startswith("transposable_mask["):
            from nmref.transposable import is_transposable

            exact = vector.function == "transposable_mask[exact]"
            assert is_transposable(vector.expected, vector.n, vector.m, exact=exact)
        elif vector.function == "bimask.backward_mask":
            forward = nmref.magnitude_mask(vector.input, vector.n, vector.m, layout=vector.layout)
            assert not (vector.expected & ~forward).any()  # B is inside F
            assert sorted(vector.extras["permutation"]) == list(range(vector.input.shape[0]))
        else:
            matrix = nmref.to_reduction_matrix(vector.expected, vector.layout)
            assert nmref.is_nm(matrix, vector.n, vector.m)
        if vector.dtype == "bfloat16":
            bits = vector.input.view(np.uint32)
            assert not (bits & 0xFFFF).any(), vector.name


def test_nmref_matches_the_golden_vectors():
    assert check_golden_vectors(nmref_implementation, VECTORS).cases >= 20


@pytest.mark.slow
def test_torch_matches_the_golden_vectors():
    pytest.importorskip("torch")
    import torch

    from nmsim.torch import golden_implementation

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        report = check_golden_vectors(lambda v, d=device: golden_implementation(v, d), VECTORS)
        assert report.cases >= 20


def test_a_changed_file_is_caught_by_its_digest(tmp_path: Path):
    for path in VECTORS.iterdir():
        if path.suffix in (".npz", ".json"):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    victim = sorted(tmp_path.glob("*.npz"))[0]
    with np.load(victim, allow_pickle=False) as arrays:
        flipped = ~arrays["expected"]
        np.savez_compressed(victim, input=arrays["input"], expected=flipped)
    with pytest.raises(ValueError, match="SHA-256 differs"):
        list(load_vectors(tmp_path))
