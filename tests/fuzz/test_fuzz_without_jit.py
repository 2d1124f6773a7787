"""The fuzz suite once more with ``NUMBA_DISABLE_JIT=1`` on a small budget (issue 20): the
readable path behind every kernel must give the same outcomes, so it can be debugged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_fuzz_suite_passes_with_numba_disabled() -> None:
    here = Path(__file__).parent
    env = {
        **os.environ,
        "NUMBA_DISABLE_JIT": "1",
        "NMREF_FUZZ_EXAMPLES": "15",
        "HYPOTHESIS_PROFILE": "ci",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(here / "test_fuzz_masks.py"),
            str(here / "test_fuzz_more.py"),
            str(here / "test_fuzz_api.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=here.parent.parent,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
