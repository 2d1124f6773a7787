"""One safe way to write a user-named output file, shared by every command.

:func:`output_file` (a context manager) and :func:`write_output` (its one-call form)
write to a fresh hidden file in the target's folder, flush and ``fsync`` it, and only
then make the final name point at it:

* without ``force`` by ``os.link(temporary, target)``, which fails if ``target``
  exists, so of two writers racing for one name exactly one succeeds and the other
  gets the "exists; pass --force" error (no check-then-rename window);
* with ``force`` by ``os.replace``, atomic on POSIX and Windows.

Before anything is written the target is refused if it is a symbolic link (writing
"through" it would destroy the file it points to), a folder, or the same file (inode)
as any input. On any error, ``KeyboardInterrupt`` or ``SIGTERM``/``SIGHUP`` (a
handler is installed only while writing, in the main thread, and only where the
signal had its default action; the previous one is restored after) the temporary
file is removed: the target holds its previous complete content or the new complete
content, never a part. A ``SIGTERM`` ends the process after the clean-up with
``SystemExit(128 + signal)``, the status a shell reports for a killed process.

Errors are one line naming the target as the user wrote it, prefixed with the flag
(``-o 'w.npz' exists; pass --force to replace it``), never the hidden temporary
name; they are ``ValueError`` (refusals) or ``OSError`` (the system failed, e.g. a
full disk), which the command lines turn into exit status 2.

This module imports only the standard library (no numpy, no torch, no nmsim).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

__all__ = ["check_output", "output_file", "write_output"]

PathLike = str | os.PathLike[str]

# Hard links are not offered by every file system (some FUSE and network mounts,
# FAT): there the no-clobber step falls back to an O_EXCL reservation.
_NO_LINK_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EXDEV")
    if hasattr(errno, name)
)


def _describe(flag: str, target: Path) -> str:
    """``-o 'w.npz'``; a flag ending in ``=`` is joined (``output='w.npz'``)."""
    if flag.endswith("="):
        return f"{flag}{str(target)!r}"
    return f"{flag} {str(target)!r}" if flag else repr(str(target))


def _refuse_unsafe_target(target: Path, inputs: Sequence[PathLike], force: bool, name: str) -> None:
    """Raise ``ValueError`` if writing ``target`` could destroy something it should not."""
    if os.path.islink(target):
        raise ValueError(
            f"{name} is a symbolic link; refusing to write through it onto another file "
            "(remove the link or give the real path)"
        )
    try:
        target_stat = os.stat(target)
    except FileNotFoundError:
        target_stat = None
    except NotADirectoryError as error:
        raise ValueError(f"{name}: a parent of it is not a folder") from error
    if target_stat is not None and stat.S_ISDIR(target_stat.st_mode):
        raise ValueError(f"{name} is a folder; give a file name")
    if target_stat is not None:
        for source in inputs:
            try:
                source_stat = os.stat(source)
            except (OSError, TypeError, ValueError):  # missing, or not a path at all
                continue
            if (source_stat.st_dev, source_stat.st_ino) == (target_stat.st_dev, target_stat.st_ino):
                raise ValueError(
                    f"{name} is an input file ({str(source)!r}); refusing to write over it"
                )
        if not force:
            raise ValueError(f"{name} exists; pass --force to replace it")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{name}: its folder {str(parent)!r} does not exist")


def _create_beside(target: Path, name: str) -> tuple[str, int]:
    """Create a new empty hidden file next to ``target``: its path and mode.

    Created with mode 0666 through ``os.open``, so the kernel applies the process
    umask (and any default ACL of the folder) exactly as for a plain ``open()``,
    and the resulting mode is read back with ``stat``. This is why the file is not
    made by ``tempfile.mkstemp``: that one is always private (0600), and knowing
    what to widen it to needs the umask, which Python can only read by setting it
    (``os.umask``): a process-wide change that races with files other threads
    create meanwhile (one of them could be created world-writable).
    """
    directory = target.parent if str(target.parent) else Path(".")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        candidate = directory / f".{target.name}.{secrets.token_hex(6)}.tmp{target.suffix}"
        try:
            descriptor = os.open(candidate, flags, 0o666)
        except FileExistsError:
            continue
        except OSError as error:
            raise _os_error(
                error.errno, f"{name}: cannot create a file in its folder: {error.strerror}"
            ) from None
        try:
            mode = stat.S_IMODE(os.fstat(descriptor).st_mode)
        finally:
            os.close(descriptor)
        return str(candidate), mode
    raise _os_error(errno.EEXIST, f"{name}: no free temporary name in its folder")


def _fsync_file(path: str) -> None:
    descriptor = os.open(path, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_folder(folder: Path) -> None:
    """Make the new name durable; best effort (not possible on Windows)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _commit(temporary: str, target: Path, force: bool, name: str) -> None:
    """Give ``temporary`` the name ``target``: replace with ``force``, else never clobber."""
    if force:
        if os.path.islink(target):
            raise ValueError(f"{name} became a symbolic link while writing; refusing it")
        os.replace(temporary, target)
        return
    try:
        os.link(temporary, target)
    except FileExistsError:
        raise ValueError(f"{name} exists; pass --force to replace it") from None
    except OSError as error:
        if error.errno not in _NO_LINK_ERRNOS:
            raise
        # No hard links here: reserve the name with O_EXCL (still exactly one winner),
        # then move the complete file onto the reservation.
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            raise ValueError(f"{name} exists; pass --force to replace it") from None
        os.replace(temporary, target)
        return
    with contextlib.suppress(OSError):
        os.unlink(temporary)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _signals_end_the_write() -> Iterator[None]:
    """While writing, turn SIGTERM/SIGHUP into an exception so the clean-up runs."""
    installed: list[tuple[int, object]] = []
    if threading.current_thread() is threading.main_thread():
        for signal_name in ("SIGTERM", "SIGHUP"):
            number = getattr(signal, signal_name, None)
            if number is None:
                continue
            try:
                if signal.getsignal(number) is signal.SIG_DFL:
                    installed.append((number, signal.signal(number, _terminate)))
            except (ValueError, OSError):
                continue
    try:
        yield
    finally:
        for number, previous in installed:
            signal.signal(number, previous)  # type: ignore[arg-type]


def _os_error(number: int | None, message: str) -> OSError:
    """An ``OSError`` whose text is ``message`` alone (no ``[Errno n]`` prefix)."""
    error = OSError(message)
    error.errno = number
    return error


def _one_line(error: OSError, temporary: str, target: Path, name: str) -> OSError:
    text = error.strerror or str(error)
    text = text.replace(temporary, str(target))
    return _os_error(error.errno, f"{name}: cannot write: {text}")


def check_output(
    target: PathLike,
    *,
    force: bool = False,
    inputs: Sequence[PathLike] = (),
    flag: str = "-o",
) -> None:
    """Refuse ``target`` now, before the work, by the rules of :func:`output_file`.

    The same checks run again when writing (and the no-clobber step cannot race);
    this only lets a command fail before a long computation.
    """
    target = Path(target)
    _refuse_unsafe_target(target, inputs, force, _describe(flag, target))


@contextlib.contextmanager
def output_file(
    target: PathLike,
    *,
    force: bool = False,
    inputs: Sequence[PathLike] = (),
    flag: str = "-o",
) -> Iterator[str]:
    """Yield a temporary path to write ``target``'s content to; publish it on success.

    Parameters
    ----------
    target : path-like
        The file to create (or, with ``force``, replace).
    force : bool, default False
        Replace an existing ``target``. Without it an existing one is refused, also
        when another writer creates it while this one writes.
    inputs : sequence of path-like
        Files being read; a ``target`` that is one of them (same inode, through any
        name or hard link) is refused, with or without ``force``.
    flag : str, default "-o"
        How error messages name the target (the command-line flag); "" for none.

    Write by opening the yielded path again (it exists and is empty) or by letting a
    library create it afresh at that path. The file gets the mode a plain ``open()``
    would give it, without touching the process umask.

    Raises
    ------
    ValueError
        If ``target`` is a symbolic link, a folder, an input, exists without
        ``force`` or its folder is missing.
    OSError
        If the system fails while writing (full disk, permissions).
    """
    target = Path(target)
    name = _describe(flag, target)
    _refuse_unsafe_target(target, inputs, force, name)
    with _signals_end_the_write():
        temporary, mode = _create_beside(target, name)
        published = False
        try:
            yield temporary
            # Some writers replace the file rather than reopen it (safetensors makes its
            # own, private one): give the result the mode the kernel chose above.
            os.chmod(temporary, mode)
            _fsync_file(temporary)
            _commit(temporary, target, force, name)
            published = True
            _fsync_folder(target.parent if str(target.parent) else Path("."))
        except OSError as error:
            if published:
                return  # the folder could not be synced: the file is there all the same
            raise _one_line(error, temporary, target, name) from None
        finally:
            if not published:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)


def write_output(
    target: PathLike,
    write: Callable[[str], object],
    *,
    force: bool = False,
    inputs: Sequence[PathLike] = (),
    flag: str = "-o",
) -> Path:
    """Run ``write(temporary_path)`` and publish the result as ``target``; returns ``target``.

    See :func:`output_file` for the rules; the returned path is the file written,
    exactly, to print to the user.
    """
    target = Path(target)
    with output_file(target, force=force, inputs=inputs, flag=flag) as temporary:
        write(temporary)
    return target
