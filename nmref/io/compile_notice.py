"""Say once, on stderr, that Numba is compiling kernels (a first run's pause is not a hang).

Numba compiles a kernel the first time it is called and keeps the machine code in its
cache (``cache=True``; ``NUMBA_CACHE_DIR``); later runs load it. A first run of
``nmsim report`` pauses for that: cold minus warm CPU time 1.2 s for the packaged
model and 3.8 s for ``minilm`` (``python benchmarks/bench_startup.py --quick``), and
8.7 s of wall time for ``minilm`` on a loaded two-core machine; hence "a few seconds".
:func:`compile_notice` listens to Numba's ``numba:compile`` event, which fires only on
a cache miss, and prints one line the first time it fires. Nothing is printed when
every kernel comes from the cache, with ``quiet``, or when stderr is not a terminal
(logs and tests stay byte-stable).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

__all__ = ["COMPILE_MESSAGE", "compile_notice"]

COMPILE_MESSAGE = "compiling kernels, once per machine, a few seconds (later runs use the cache)"


@contextlib.contextmanager
def compile_notice(
    program: str, *, quiet: bool = False, stream: TextIO | None = None, force: bool = False
) -> Iterator[None]:
    """While active, print ``"<program>: compiling kernels ..."`` once, at the first compilation.

    Parameters
    ----------
    program : str
        Prefix of the line (``"nmsim"``, ``"nmref"``).
    quiet : bool
        Print nothing.
    stream : text stream, optional
        Where to print (default ``sys.stderr``).
    force : bool
        Print even when ``stream`` is not a terminal (tests).
    """
    terminal = getattr(sys.stderr if stream is None else stream, "isatty", lambda: False)()
    if quiet or not (terminal or force):
        yield
        return
    try:
        from numba.core import event
    except ImportError:  # pragma: no cover - numba is a core dependency
        yield
        return

    class _Once(event.Listener):
        said = False

        def on_start(self, event_: object) -> None:
            if not self.said:
                self.said = True
                # sys.stderr looked up now: a live progress bar has replaced it, and
                # prints through its proxy land above the bar
                target = sys.stderr if stream is None else stream
                print(f"{program}: {COMPILE_MESSAGE}", file=target, flush=True)

        def on_end(self, event_: object) -> None:
            pass

    with event.install_listener("numba:compile", _Once()):
        yield
