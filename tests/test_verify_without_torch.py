"""``nmsim verify`` where torch is not installed: nmref against the golden vectors, exit 0."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nmref.testing.golden import default_vectors_dir, file_digest
from nmsim.cli.verify import run_verify

ROOT = Path(__file__).resolve().parents[1]

# A `None` entry in sys.modules makes `import torch` raise ModuleNotFoundError, exactly
# as on a machine where torch was never installed.
WITHOUT_TORCH = (
    "import sys; sys.modules['torch'] = None; "
    "from nmsim.cli import main; raise SystemExit(main(sys.argv[1:]))"
)


def run_without_torch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=900,
        check=False,
    )


@pytest.mark.slow
def test_verify_without_torch_checks_the_golden_vectors_and_exits_zero(tmp_path):
    result = run_without_torch("verify", "--quick", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    skipped = [line for line in lines if "torch" in line]
    assert skipped == ["torch path skipped: torch is not installed (checked nmref only)"]
    assert "not checked" not in result.stdout
    golden = [line for line in lines if line.startswith("golden vectors")]
    shipped = len(json.loads((default_vectors_dir() / "manifest.json").read_text())["vectors"])
    assert len(golden) == 1 and golden[0].split()[4:6] == [str(shipped), "0"], golden
    assert f"ok: {shipped} cases, 0 mismatches" in result.stdout


@pytest.fixture
def no_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)


@pytest.mark.usefixtures("no_torch")
def test_without_torch_a_gpu_device_is_a_clear_error():
    with pytest.raises(ValueError, match="needs torch, which is not installed"):
        run_verify("cuda", quick=True, out=io.StringIO())


@pytest.mark.usefixtures("no_torch")
def test_without_torch_only_a_torch_suite_is_a_clear_error():
    with pytest.raises(ValueError, match="only the golden vectors are checked"):
        run_verify("cpu", quick=True, only="nm_mask", out=io.StringIO())


@pytest.mark.usefixtures("no_torch")
def test_without_torch_missing_vectors_are_an_error_not_a_note(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no manifest\.json"):
        run_verify("cpu", quick=True, vectors=tmp_path, out=io.StringIO())


@pytest.mark.usefixtures("no_torch")
def test_without_torch_a_wrong_vector_fails_with_exit_one(tmp_path):
    source = default_vectors_dir()
    manifest = json.loads((source / "manifest.json").read_text())
    entry = next(e for e in manifest["vectors"] if e["function"] == "nm_mask")
    manifest["vectors"] = [entry]
    with np.load(source / entry["file"], allow_pickle=False) as arrays:
        np.savez_compressed(
            tmp_path / entry["file"], input=arrays["input"], expected=~arrays["expected"]
        )
    entry["sha256"] = file_digest(tmp_path / entry["file"])
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    out = io.StringIO()
    assert run_verify("cpu", quick=True, vectors=tmp_path, out=out) == 1
    text = out.getvalue()
    assert "torch path skipped" in text and "FAILED: " in text
