"""Shared pytest configuration: hypothesis profiles and the Numba cache location.

Profiles (select with ``HYPOTHESIS_PROFILE=...``; ``CI`` set selects ``ci``):

``ci``
    Random with a fixed budget of examples and a seed: ``NMREF_HYPOTHESIS_SEED`` (``.ci/run``
    sets and prints it) or, unset, a fresh one printed at the end of the run. The same seed
    draws the same examples (``NMREF_HYPOTHESIS_SEED=S CI=true python -m pytest ...`` replays a
    failure); each CI run tries inputs the last one did not. No deadline (the first Numba
    compile takes seconds), no example database.
``dev``
    Random, more examples, no deadline; failures are saved to the local database
    (``.hypothesis/``) and replayed first until they pass.

A Numba cache made here for the session (``NUMBA_CACHE_DIR`` unset) is removed when the session
ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings

#: The environment variable that seeds the ``ci`` profile.
SEED_VARIABLE = "NMREF_HYPOTHESIS_SEED"

# Point Numba at a per-session cache unless the caller chose one, so a stale
# cache from another checkout is never used; it is removed at the end of the session.
_SESSION_NUMBA_CACHE: str | None = None
if "NUMBA_CACHE_DIR" not in os.environ:
    _SESSION_NUMBA_CACHE = tempfile.mkdtemp(prefix="nmref-numba-")
    os.environ["NUMBA_CACHE_DIR"] = _SESSION_NUMBA_CACHE
os.environ.setdefault("MPLBACKEND", "Agg")

settings.register_profile(
    "ci",
    derandomize=False,
    max_examples=60,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def _ci_seed() -> int | None:
    """The ``ci`` profile's seed: ``NMREF_HYPOTHESIS_SEED``, else a fresh one; None elsewhere."""
    if settings.get_current_profile_name() != "ci":
        return None
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return secrets.randbelow(2**32)
    try:
        return int(text)
    except ValueError:
        raise pytest.UsageError(f"{SEED_VARIABLE}={text!r} must be an integer") from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before hypothesis' own hook reads --hypothesis-seed; an explicit option wins.
    seed = _ci_seed()
    if seed is not None and config.getoption("hypothesis_seed", None) is None:
        config.option.hypothesis_seed = seed
    config.stash[_SEED_KEY] = config.getoption("hypothesis_seed", None)


_SEED_KEY = pytest.StashKey[object]()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    seed = config.stash.get(_SEED_KEY, None)
    if seed is not None:
        terminalreporter.write_line(
            f"hypothesis: profile {settings.get_current_profile_name()!r}, seed {seed} "
            f"(replay: {SEED_VARIABLE}={seed} CI=true python -m pytest ...)"
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_NUMBA_CACHE is not None:
        shutil.rmtree(_SESSION_NUMBA_CACHE, ignore_errors=True)
