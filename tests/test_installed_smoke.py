"""Smoke tests of an installed nmref/nmsim: package data, metadata, CLIs, and no torch needed.

Needs pytest and the installed packages only (no hypothesis, no test helpers), so CI copies
this file out of the tree and runs it against the wheel in a fresh virtual environment
without torch; in the source tree it runs with the rest of the suite.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

import nmref
import nmsim

DISTRIBUTION = "nm-sparsity-ref"


@pytest.mark.parametrize("package", ["nmref", "nmsim"])
def test_py_typed_ships(package):
    assert (importlib.resources.files(package) / "py.typed").is_file()


def test_golden_vectors_and_goldens_ship_as_package_data():
    from nmref.testing.golden import default_vectors_dir, load_vectors

    vectors = default_vectors_dir()
    manifest = json.loads((vectors / "manifest.json").read_text())
    assert len(manifest["vectors"]) >= 34
    assert len(list(load_vectors(vectors))) == len(manifest["vectors"])  # digests checked
    golden = importlib.resources.files("nmref.testing") / "data" / "golden"
    for name in ("masks.json", "transposable.json", "bimask_golden.npz", "srste_golden.npz"):
        assert (golden / name).is_file(), name


def test_nmsim_data_files_ship():
    data = importlib.resources.files("nmsim") / "data"
    schema = json.loads((data / "report.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for name in ("gpus.toml", "calibration.toml", "digits_mlp.safetensors"):
        assert (data / name).is_file(), name


@pytest.mark.parametrize("module", [nmref, nmsim])
def test_version_is_the_distribution_metadata(module):
    assert module.__version__ == importlib.metadata.version(DISTRIBUTION)


@pytest.mark.parametrize("command", ["nmref", "nmsim"])
def test_cli_version_comes_from_metadata(command):
    result = subprocess.run(
        [sys.executable, "-m", command, "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == f"{command} {importlib.metadata.version(DISTRIBUTION)}"


def test_a_mask_is_computed():
    mask = nmref.nm_mask(np.array([[1.0, 4.0, 3.0, 2.0]]), 2, 4)
    assert mask.tolist() == [[False, True, True, False]]


def test_without_torch_the_torch_path_says_what_is_missing():
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    with pytest.raises(ModuleNotFoundError) as raised:
        import nmsim.torch  # noqa: F401
    assert raised.value.name == "torch"
