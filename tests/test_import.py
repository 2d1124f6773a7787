"""``import nmref`` / ``import nmsim`` must stay light: no torch, no Numba at import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["nmref", "nmsim"])
def test_import_does_not_load_torch_or_numba(package):
    code = (
        f"import sys, {package}; print(sorted(m for m in ('torch', 'numba') if m in sys.modules))"
    )
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
