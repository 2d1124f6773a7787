"""How many worker processes a command starts: what was asked, at most the usable cores.

``nmref mask --workers N`` (a local Dask cluster) and ``nmsim report --workers N`` (a pool
of forked processes) once started every worker asked for: ``--workers 1000000`` started
processes until the machine's OOM killer fired, and orphans outlived the command;
``--workers 24`` on 2 cores started 24 processes that only competed for the 2 cores. The
tensors are independent and every worker is single-threaded, so more processes than the
cores this process may run on cannot finish sooner. :func:`capped_workers` is the one rule:
at most :func:`usable_cores`, said in one line on stderr when it cuts the request. A pool
worker runs :func:`die_with_parent` first: a command killed with SIGKILL runs no cleanup, and
its workers would otherwise wait on their queue for ever.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["capped_workers", "die_with_parent", "usable_cores"]


def usable_cores() -> int:
    """The CPU cores this process may run on (at least 1).

    Its CPU affinity (``os.process_cpu_count`` on Python 3.13+, ``os.sched_getaffinity``
    on Linux), else the machine's count (``os.cpu_count``). A container's CPU quota is not
    read: a pool that size is still bounded.
    """
    count = None
    if hasattr(os, "process_cpu_count"):
        count = os.process_cpu_count()
    elif hasattr(os, "sched_getaffinity"):
        count = len(os.sched_getaffinity(0))
    return max(count or os.cpu_count() or 1, 1)


def capped_workers(requested: int, *, flag: str = "--workers", notice: TextIO | None = None) -> int:
    """``requested`` worker processes, capped at :func:`usable_cores`.

    Parameters
    ----------
    requested : int
        The count asked for (``--workers N``).
    flag : str, default "--workers"
        How the notice and the error name the request.
    notice : text stream, optional
        Where the one-line notice of a cap goes (default ``sys.stderr``).

    Returns
    -------
    int
        ``min(requested, usable_cores())``.

    Raises
    ------
    ValueError
        If ``requested < 1``.

    Examples
    --------
    >>> capped_workers(1)
    1
    """
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise TypeError(f"{flag}={requested!r} must be an integer")
    if requested < 1:
        raise ValueError(f"{flag} {requested} must be >= 1")
    cores = usable_cores()
    if requested <= cores:
        return requested
    print(
        f"{flag} {requested}: capped at {cores}, the CPU cores this process may use",
        file=notice if notice is not None else sys.stderr,
    )
    return cores


def die_with_parent(parent: int) -> None:
    """Have the kernel end this worker process when its parent dies (Linux; else nothing).

    Give it as a pool's ``initializer`` with ``initargs=(os.getpid(),)``: ``parent`` is the
    process that started the pool, so that a parent gone before the request took effect is
    noticed too.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return
    if os.getppid() != parent:
        os._exit(1)
