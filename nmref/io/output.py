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

__all__ = [
    "FolderWriter",
    "check_output",
    "check_output_folder",
    "output_file",
    "output_folder",
    "write_output",
]

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


#: Signals received while a handler of :func:`_signals_end_the_write` was installed.
_RECEIVED: list[int] = []


def _terminate(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    raise SystemExit(128 + signum)


def _stop_if_terminated() -> None:
    """Raise the pending ``SystemExit`` before publishing, even if the one the handler
    raised was swallowed (Python ignores exceptions raised inside finalizers, and a
    signal handler can run inside one): a terminated write is never published."""
    if _RECEIVED:
        raise SystemExit(128 + _RECEIVED[0])


@contextlib.contextmanager
def _signals_end_the_write() -> Iterator[None]:
    """While writing, turn SIGTERM/SIGHUP into an exception so the clean-up runs."""
    installed: list[tuple[int, object]] = []
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(getattr(signal, "SIGTERM", signal.SIGINT)) is signal.SIG_DFL:
            _RECEIVED.clear()  # the outermost write (a nested one keeps what it heard)
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
            _stop_if_terminated()
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


# ----------------------------------------------------------------------------
# A folder of files (a sharded checkpoint): built hidden, then published whole
# ----------------------------------------------------------------------------

#: Files a folder output may hold for ``force`` to replace it: anything else means the
#: folder is not an output of ours (a home folder given as ``-o``), and it is kept.
_REPLACEABLE_SUFFIXES = (".safetensors", ".json")


def _exchange(first: str, second: str) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange)
    if result == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.ENOSYS, errno.EINVAL, *_NO_LINK_ERRNOS):
        return False
    raise _os_error(number, os.strerror(number))


def _refuse_unsafe_folder(target: Path, inputs: Sequence[PathLike], force: bool, name: str) -> None:
    """The folder version of :func:`_refuse_unsafe_target`; also refuses replacing a folder
    that holds an input or anything but ``.safetensors``/``.json`` files."""
    if os.path.islink(target):
        raise ValueError(
            f"{name} is a symbolic link; refusing to write through it (give the real path)"
        )
    resolved = target.resolve()
    for source in inputs:
        try:
            source_path = Path(source).resolve()
        except (OSError, TypeError, ValueError):
            continue
        if source_path == resolved or resolved in source_path.parents:
            raise ValueError(f"{name} is or holds an input ({str(source)!r}); refusing to write it")
    if target.exists():
        if not target.is_dir():
            raise ValueError(f"{name} exists and is not a folder (a sharded output is a folder)")
        if not force:
            raise ValueError(f"{name} exists; pass --force to replace it")
        foreign = [
            entry.name
            for entry in os.scandir(target)
            if not entry.is_file(follow_symlinks=False)
            or not entry.name.endswith(_REPLACEABLE_SUFFIXES)
        ]
        if foreign:
            raise ValueError(
                f"{name} holds {foreign[0]!r}, not a .safetensors or .json file; refusing to "
                "replace a folder that is not a checkpoint output"
            )
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{name}: its folder {str(parent)!r} does not exist")


def check_output_folder(
    target: PathLike, *, force: bool = False, inputs: Sequence[PathLike] = (), flag: str = "-o"
) -> None:
    """Refuse ``target`` now, by the rules of :func:`output_folder` (checked again there)."""
    target = Path(target)
    _refuse_unsafe_folder(target, inputs, force, _describe(flag, target))


class FolderWriter:
    """The files of one :func:`output_folder`; each written by :func:`write_output`."""

    def __init__(self, temporary: Path, target: Path, flag: str) -> None:
        self.temporary = temporary
        self.target = target
        self.flag = flag

    def write(self, name: str, write: Callable[[str], object]) -> Path:
        """Write the file ``name`` of the folder with ``write(path)``; returns its final path.

        Errors name the final path (``-o 'out/model-00001-of-00002.safetensors'``), never
        the hidden folder.
        """
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} must be a plain file name inside {self.target}")
        try:
            write_output(self.temporary / name, write, flag=self.flag)
        except (ValueError, OSError) as error:
            text = str(error).replace(str(self.temporary), str(self.target))
            if isinstance(error, ValueError):
                raise ValueError(text) from None
            raise _os_error(error.errno, text) from None
        return self.target / name


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def output_folder(
    target: PathLike,
    *,
    force: bool = False,
    inputs: Sequence[PathLike] = (),
    flag: str = "-o",
) -> Iterator[FolderWriter]:
    """Build a folder of files hidden beside ``target``; publish it whole on success.

    The files go into a fresh hidden folder in ``target``'s parent, each through
    :func:`write_output` (fsynced). Then, without ``force``, ``target`` is reserved
    with ``os.mkdir`` (of two racing writers exactly one wins) and the hidden folder
    renamed onto the empty reservation; with ``force`` an existing ``target`` is
    swapped with the new folder in one step (Linux ``renameat2``; elsewhere two
    renames, between which ``target`` is briefly absent) and the old one removed.
    On any error, Ctrl-C or SIGTERM the hidden folder is removed: ``target`` holds
    its previous complete content or the new one (or, only in that two-rename
    window, nothing), never a mix.

    Raises
    ------
    ValueError
        If ``target`` is a symbolic link, a file, is or holds an input, exists
        without ``force``, holds anything but ``.safetensors``/``.json`` files (so
        ``force`` never removes a folder that is not an output), or its parent is
        missing.
    OSError
        If the system fails while writing.
    """
    target = Path(target)
    name = _describe(flag, target)
    _refuse_unsafe_folder(target, inputs, force, name)
    parent = target.parent if str(target.parent) else Path(".")
    with _signals_end_the_write():
        for _ in range(100):
            temporary = parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
            try:
                os.mkdir(temporary)
                break
            except FileExistsError:
                continue
            except OSError as error:
                raise _os_error(
                    error.errno, f"{name}: cannot create a folder beside it: {error.strerror}"
                ) from None
        else:
            raise _os_error(errno.EEXIST, f"{name}: no free temporary name in its folder")
        published = False
        try:
            yield FolderWriter(temporary, target, flag)
            _fsync_folder(temporary)
            _stop_if_terminated()
            _publish_folder(temporary, target, force, name)
            published = True
            _fsync_folder(parent)
        finally:
            if not published:
                _remove_tree(temporary)


def _publish_folder(temporary: Path, target: Path, force: bool, name: str) -> None:
    if not force or not target.exists():
        try:
            os.mkdir(target)
        except FileExistsError:
            raise ValueError(f"{name} exists; pass --force to replace it") from None
        try:
            os.replace(temporary, target)  # onto the empty reservation
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(target)
            raise
        return
    _refuse_unsafe_folder(target, (), True, name)  # it may have changed while writing
    if _exchange(str(temporary), str(target)):
        _remove_tree(temporary)  # now the old content
        return
    old = target.parent / f".{target.name}.{secrets.token_hex(6)}.old"
    os.replace(target, old)
    try:
        os.replace(temporary, target)
    except OSError:
        os.replace(old, target)
        raise
    _remove_tree(old)
