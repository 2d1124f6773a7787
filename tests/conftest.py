"""Shared pytest configuration: hypothesis profiles and the Numba cache location.

Profiles (select with ``HYPOTHESIS_PROFILE=...``; ``CI`` set selects ``ci``):

``ci``
    Derandomised, a fixed budget of examples, no deadline (the first Numba
    compile takes seconds), no example database: the same examples every run.
``dev``
    Random, more examples, no deadline; failures are saved to the local database.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, settings

# Point Numba at a per-session cache unless the caller chose one, so a stale
# cache from another checkout is never used.
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="nmref-numba-"))
os.environ.setdefault("MPLBACKEND", "Agg")

settings.register_profile(
    "ci",
    derandomize=True,
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
