"""The one timing helper of the benchmarks: median wall time of repeated calls.

Benchmarks are scripts (``python benchmarks/x.py``), so Python puts this folder first on
``sys.path`` and they import this module as ``from _timing import median_seconds``.
Medians, not means: one descheduled run on a shared machine must not move the figure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(
    function: Callable[[], object],
    repeats: int,
    *,
    warm_up: bool = True,
    sync: Callable[[], object] | None = None,
) -> float:
    """Median wall time of ``function()`` over ``repeats`` calls, in seconds.

    Parameters
    ----------
    function
        The work to time, called with no arguments.
    repeats
        Timed calls (at least 1).
    warm_up
        Call ``function()`` once, untimed, first (JIT compilation, allocator, caches).
    sync
        Called before starting and before stopping each clock, e.g.
        ``torch.cuda.synchronize`` so that asynchronous device work is inside the timing.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if warm_up:
        function()
    times = []
    for _ in range(repeats):
        if sync is not None:
            sync()
        start = time.perf_counter()
        function()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
