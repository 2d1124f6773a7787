"""Ctrl-C while the ``nmref`` or ``nmsim`` command is still starting: one line, exit 130.

A console script (and ``python -m nmref``) imports the packages, NumPy and the command
modules, about a second, before ``main`` runs and can catch anything: a Ctrl-C then printed a
22-line ``KeyboardInterrupt`` traceback. ``nmref/__init__.py`` imports this module before
anything heavy, and importing it calls :func:`quiet_interrupt_while_starting`: when this
process is one of the two commands, a SIGINT handler prints ``<program>: interrupted`` and
exits 130 (nothing has been read or written yet). ``main`` puts Python's own handler back
(:func:`restore_interrupt`) before it does any work, so that a Ctrl-C during the work
unwinds through the writers' cleanup as a ``KeyboardInterrupt``. An import of the library by
anything else (a notebook, a test, a script) changes nothing.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["quiet_interrupt_while_starting", "restore_interrupt"]

PROGRAMS = ("nmref", "nmsim")


def _module_after_dash_m(argv: list[str]) -> str | None:
    """The module of ``python [options] -m MODULE ...``, else ``None``."""
    index = 1
    while index < len(argv):
        argument = argv[index]
        if argument == "-m":
            return argv[index + 1] if index + 1 < len(argv) else None
        if argument in ("-X", "-W"):  # options that take a value
            index += 2
            continue
        if not argument.startswith("-") or argument.startswith("-c"):
            return None  # a script or -c CODE
        index += 1
    return None


def running_program() -> str | None:
    """``"nmref"``/``"nmsim"`` when this process is that command, else ``None``."""
    module = _module_after_dash_m(list(getattr(sys, "orig_argv", ())))
    if module is not None:
        return module if module in PROGRAMS else None
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    name = script.removesuffix(".exe").removesuffix("-script.py")
    main_file = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    # the console script pip writes is the __main__ module, named like the command
    if name in PROGRAMS and os.path.basename(main_file) == script:
        return name
    return None


_starting_program: str | None = None


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    try:
        sys.stderr.write(f"{_starting_program}: interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)  # mid-import: no file is open, nothing to clean up


def quiet_interrupt_while_starting() -> None:
    """Make a Ctrl-C before ``main`` one line and exit 130, when this process is a command."""
    global _starting_program
    import threading

    program = running_program()
    if (
        program is None
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return  # a library import, or SIGINT ignored or handled by whoever started us
    _starting_program = program
    signal.signal(signal.SIGINT, _exit_interrupted)


def restore_interrupt() -> None:
    """Python's own SIGINT handler again, if :func:`quiet_interrupt_while_starting` set one."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is _exit_interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


quiet_interrupt_while_starting()
