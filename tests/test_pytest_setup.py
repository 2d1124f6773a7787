"""The suite's own set-up (``tests/conftest.py``): CI's hypothesis profile is random with a
printed seed that replays it, and the session's Numba cache does not outlive the session.

Each case runs pytest in a subprocess on a two-test project that uses a copy of the conftest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Five and two pytest start-ups in subprocesses: over a second each.
pytestmark = pytest.mark.slow

CONFTEST = Path(__file__).with_name("conftest.py")

PROJECT_TEST = """
import os

from hypothesis import given, settings, strategies as st


@settings(max_examples=20)
@given(st.integers(0, 10**12))
def test_draw(value):
    with open(os.environ["DRAWS"], "a") as out:
        out.write(f"{value}\\n")


def test_numba_cache_is_a_folder_of_the_session():
    folder = os.environ["NUMBA_CACHE_DIR"]
    assert os.path.isdir(folder)
    with open(os.path.join(folder, "kernel.nbi"), "w") as out:
        out.write("compiled")
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    shutil.copy(CONFTEST, project / "tests" / "conftest.py")
    (project / "tests" / "test_draws.py").write_text(PROJECT_TEST)
    (project / "pytest.ini").write_text("[pytest]\n")
    return project


def _run(project: Path, temporary: Path, draws: Path, **variables: str) -> tuple[str, list[str]]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NUMBA_CACHE_DIR", "HYPOTHESIS_PROFILE", "NMREF_HYPOTHESIS_SEED")
    }
    env.update(TMPDIR=str(temporary), DRAWS=str(draws), CI="true", **variables)
    draws.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, draws.read_text().split()


def test_ci_profile_is_random_and_its_printed_seed_replays_it(tmp_path):
    # Issue 37: the derandomised ci profile drew the same inputs on every run, so CI never
    # met the two bugs the dev profile found; now each run draws anew from a printed seed.
    project, temporary = _project(tmp_path), tmp_path / "tmp"
    temporary.mkdir()
    output, first = _run(project, temporary, tmp_path / "draws")
    seed = re.search(
        r"hypothesis: profile 'ci', seed (\d+) \(replay: NMREF_HYPOTHESIS_SEED=", output
    )
    assert seed, output
    _, replayed = _run(project, temporary, tmp_path / "draws", NMREF_HYPOTHESIS_SEED=seed[1])
    assert replayed == first
    other = str((int(seed[1]) + 1) % 2**32)
    output, different = _run(project, temporary, tmp_path / "draws", NMREF_HYPOTHESIS_SEED=other)
    assert f"seed {other} " in output
    assert different != first


def test_the_session_numba_cache_is_removed_at_the_end(tmp_path):
    # Issue 37: every run left an nmref-numba-* folder (up to 33 MB) in the temp directory.
    project, temporary = _project(tmp_path), tmp_path / "tmp"
    temporary.mkdir()
    _run(project, temporary, tmp_path / "draws", NMREF_HYPOTHESIS_SEED="7")
    assert not list(temporary.glob("nmref-numba-*"))
    # A cache the caller chose is the caller's: it stays.
    chosen = tmp_path / "chosen-cache"
    chosen.mkdir()
    _run(project, temporary, tmp_path / "draws", NUMBA_CACHE_DIR=str(chosen))
    assert (chosen / "kernel.nbi").exists()
