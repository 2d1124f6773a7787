"""The fuzz suite once more with ``NUMBA_DISABLE_JIT=1`` on a small budget (issue 20): the
readable path behind every kernel must give the same outcomes, so it can be debugged.

Compiled, the kernels' int64/uint64 arithmetic wraps (a De Bruijn bit scan multiplies modulo
2**64 on purpose; lanes of a block past its last tile sum whatever they hold and are never
read); run as Python, NumPy warns about the same wraps. Those integer-overflow warnings are
ignored in the kernel modules only (found by CI's randomized profile, seed 338427235); every
other warning is still an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _kernel_wraps_ignored() -> list[str]:
    """``-W`` options: integer wraps inside the kernel modules are not warnings."""
    package = Path(__file__).resolve().parents[2] / "nmref" / "transposable"
    modules = sorted(
        path.stem
        for path in package.glob("_*.py")
        if "kernels" in path.stem or "generated" in path.stem
    )
    options = []
    for module in modules:
        for operation in ("multiply", "add", "subtract", "negative"):
            options += [
                "-W",
                f"ignore:overflow encountered in scalar {operation}:RuntimeWarning:"
                f"nmref.transposable.{module}",
            ]
    return options


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
            *_kernel_wraps_ignored(),
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
