"""One safe way to write a user-named output file, shared by every command.

:func:`output_file` (a context manager) and :func:`write_output` (its one-call form)
write to a fresh hidden file in the target's folder, flush and ``fsync`` it, and only
then make the final name point at it:

* without ``force`` by ``os.link(temporary, target)``, which fails if ``target``
  exists, so of two writers racing for one name exactly one succeeds and the other
  gets the "exists; pass --force" error (no check-then-rename window);
* with ``force`` by ``os.replace``, atomic on POSIX and Windows.

Before anything is written the target is refused if it is a symbolic link (writing
"through" it would destroy the file it points to), a folder, not a regular file (a FIFO,
socket or device: replacing it with a file is never what was meant, with or without
``force``), or the same file (inode) as any file an input reads: the input itself and,
for an input that is a folder (a model folder) or a ``*.index.json``, every
``.safetensors`` and ``.json`` file directly in that folder (its shards, index and
config). On any error, ``KeyboardInterrupt`` or ``SIGTERM``/``SIGHUP`` (a handler is
installed only while writing, in the main thread, and only where the signal had its
default action; the previous one is restored after) the temporary file is removed:
the target holds its previous complete content or the new complete content, never a
part. A ``SIGTERM`` ends the process after the clean-up with ``SystemExit(128 +
signal)``, the status a shell reports for a killed process.

:func:`output_folder` does the same for a folder of files (a sharded checkpoint, a
report): built hidden beside the target, then published as one set. With ``force``
it replaces only a folder holding nothing but the files its writer owns.

Temporaries are named ``.TARGET.HOST-PID-RANDOM.tmp...`` (HOST: a hash of the host
name; PID: the writer's process). A writer killed by ``SIGKILL`` (no clean-up can
run) leaves its temporary behind; the next write of the same target removes every
such temporary of its own host whose PID no longer runs (:func:`remove_stale`).

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
import re
import secrets
import signal
import socket
import stat
import threading
import zlib
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

__all__ = [
    "FolderWriter",
    "check_output",
    "check_output_folder",
    "output_file",
    "output_folder",
    "remove_stale",
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


#: What the readers of a folder input open in it: shards, indexes, ``config.json``.
_READ_FROM_FOLDERS = (".safetensors", ".json")


def _files_read(source: PathLike) -> Iterator[str]:
    """The files reading ``source`` may open: itself; for a folder (a model folder), every
    ``.safetensors`` and ``.json`` file directly in it; for a ``*.index.json``, also those
    of its folder (the shards and ``config.json`` it reads). Generous on purpose: a file
    the input might read is never replaced, whichever of them the reader picks."""
    try:
        path = os.fspath(source)
    except TypeError:
        return
    yield path
    folder = None
    if os.path.isdir(path):
        folder = path
    elif os.path.basename(path).lower().endswith(".index.json"):
        folder = os.path.dirname(path) or "."
    if folder is None:
        return
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name.lower().endswith(_READ_FROM_FOLDERS):
            yield entry.path


def _same_file_as_an_input(target_stat: os.stat_result, inputs: Sequence[PathLike]) -> str | None:
    """The input (or the file of an input folder) that is ``target``, if any."""
    for source in inputs:
        for path in _files_read(source):
            try:
                source_stat = os.stat(path)
            except (OSError, ValueError):  # missing, or a name the system refuses
                continue
            if (source_stat.st_dev, source_stat.st_ino) == (target_stat.st_dev, target_stat.st_ino):
                if path == os.fspath(source):
                    return repr(path)
                return f"{path!r}, read through {os.fspath(source)!r}"
    return None


def _not_regular(name: str) -> ValueError:
    return ValueError(
        f"{name} is not a regular file (a FIFO, socket or device); refusing to replace it "
        "with a file, with or without --force (give a file path)"
    )


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
    if target_stat is not None and not stat.S_ISREG(target_stat.st_mode):
        raise _not_regular(name)
    if target_stat is not None:
        source = _same_file_as_an_input(target_stat, inputs)
        if source is not None:
            raise ValueError(f"{name} is an input file ({source}); refusing to write over it")
        if not force:
            raise ValueError(f"{name} exists; pass --force to replace it")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{name}: its folder {str(parent)!r} does not exist")


# ----------------------------------------------------------------------------
# Temporaries: named after their writer, so that a later run can prove them dead
# ----------------------------------------------------------------------------


def _host_tag() -> str:
    """8 hex digits naming this host (a PID means nothing on another machine)."""
    return f"{zlib.crc32(socket.gethostname().encode('utf-8', 'replace')):08x}"


def _temporary_name(target: Path, ending: str) -> str:
    """``.TARGET.HOST-PID-RANDOM<ending>``: a fresh hidden name beside ``target``."""
    return f".{target.name}.{_host_tag()}-{os.getpid()}-{secrets.token_hex(6)}{ending}"


def _process_is_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs here (False when it cannot be told)."""
    if os.name != "posix" or pid <= 0:
        return False  # os.kill(pid, 0) would end the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it runs, as another user
        return False
    return False


def remove_stale(target: PathLike) -> list[str]:
    """Remove the temporaries that dead writers of ``target`` left beside it; their names.

    A writer ended by ``SIGKILL`` (or a power cut) cannot remove its hidden temporary
    file or folder. Each is named ``.TARGET.HOST-PID-RANDOM.tmp...`` (or ``.old``); one
    is removed only when HOST is this host and no process PID runs here any more, so a
    writer that is still running (this one, another one racing for the same name, one
    on another machine sharing the folder) never loses its temporary. A dead writer's
    ``.old`` folder (a previous folder output moved aside, where no atomic swap exists)
    is put back as ``target`` when ``target`` is missing (it was killed between its two
    renames), else removed. Best effort: what cannot be removed is left.
    """
    target = Path(target)
    folder = target.parent if str(target.parent) else Path(".")
    pattern = re.compile(
        re.escape(f".{target.name}.{_host_tag()}-") + r"(\d+)-[0-9a-f]{12}(\.tmp.*|\.old)",
        re.DOTALL,
    )
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or int(found.group(1)) == os.getpid():
            continue
        if not _process_is_gone(int(found.group(1))):
            continue
        try:
            if found.group(2) == ".old" and not os.path.lexists(target):
                os.rename(entry.path, target)  # the only copy of the previous output
                continue
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(Path(entry.path))
            else:
                os.unlink(entry.path)
        except OSError:
            continue
        removed.append(entry.name)
    return removed


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
        candidate = directory / _temporary_name(target, f".tmp{target.suffix}")
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
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISLNK(mode):
            raise ValueError(f"{name} became a symbolic link while writing; refusing it")
        if mode is not None and not stat.S_ISREG(mode):
            raise _not_regular(name)
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
        Files or folders being read; a ``target`` that is one of them, or (for a
        folder or a ``*.index.json``) a ``.safetensors`` or ``.json`` file directly in
        that folder (same inode, through any name or hard link), is refused, with or
        without ``force``.
    flag : str, default "-o"
        How error messages name the target (the command-line flag); "" for none.

    Write by opening the yielded path again (it exists and is empty) or by letting a
    library create it afresh at that path. The file gets the mode a plain ``open()``
    would give it, without touching the process umask.

    Raises
    ------
    ValueError
        If ``target`` is a symbolic link, a folder, not a regular file (a FIFO or
        device, also with ``force``), a file an input reads, exists without ``force``
        or its folder is missing.
    OSError
        If the system fails while writing (full disk, permissions).
    """
    target = Path(target)
    name = _describe(flag, target)
    _refuse_unsafe_target(target, inputs, force, name)
    remove_stale(target)
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


def _refuse_unsafe_folder(
    target: Path,
    inputs: Sequence[PathLike],
    force: bool,
    name: str,
    owned: Collection[str] | None = None,
    flag: str = "-o",
) -> None:
    """The folder version of :func:`_refuse_unsafe_target`.

    Also refuses a folder that holds an input, and an existing folder holding anything
    but regular files the writer owns (``owned``, its file names; None: any
    ``.safetensors``/``.json`` file): those would be deleted by replacing it. An
    existing folder that is empty is used without ``force``.
    """
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
            raise ValueError(f"{name} exists and is not a folder (this output is a folder)")
        entries = sorted(os.scandir(target), key=lambda entry: entry.name)
        for entry in entries:
            entry_name = _describe(f"{flag} file" if flag else "", Path(entry.path))
            if entry.is_symlink():
                raise ValueError(
                    f"{entry_name} is a symbolic link; refusing to replace {name} "
                    "(remove the link, or choose another folder)"
                )
            if not entry.is_file(follow_symlinks=False):
                kind = "a folder" if entry.is_dir() else "not a regular file"
                raise ValueError(
                    f"{entry_name} is {kind}; refusing to replace {name}, with or without "
                    "--force (remove it, or choose another folder)"
                )
            if owned is None and not entry.name.endswith(_REPLACEABLE_SUFFIXES):
                raise ValueError(
                    f"{name} holds {entry.name!r}, not a .safetensors or .json file; refusing "
                    "to replace a folder that is not a checkpoint output"
                )
            if owned is not None and entry.name not in owned:
                raise ValueError(
                    f"{name} holds {entry.name!r}, which this command does not write; "
                    "refusing to replace a folder that is not its output (remove it, or "
                    "choose another folder)"
                )
        if entries and not force:
            raise ValueError(f"{name} exists; pass --force to replace it")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{name}: its folder {str(parent)!r} does not exist")


def check_output_folder(
    target: PathLike,
    *,
    force: bool = False,
    inputs: Sequence[PathLike] = (),
    flag: str = "-o",
    owned: Collection[str] | None = None,
) -> None:
    """Refuse ``target`` now, by the rules of :func:`output_folder` (checked again there)."""
    target = Path(target)
    _refuse_unsafe_folder(target, inputs, force, _describe(flag, target), owned, flag)


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
    owned: Collection[str] | None = None,
) -> Iterator[FolderWriter]:
    """Build a folder of files hidden beside ``target``; publish it whole on success.

    The files go into a fresh hidden folder in ``target``'s parent, each through
    :func:`write_output` (fsynced). Then, without ``force``, ``target`` is reserved
    with ``os.mkdir`` (or, if it is an empty folder already, used as it is) and the
    hidden folder renamed onto the empty reservation (a rename onto a folder that is
    no longer empty fails: of two racing writers exactly one wins); with ``force`` an
    existing ``target`` is swapped with the new folder in one step (Linux
    ``renameat2``; elsewhere two renames, between which ``target`` is briefly absent)
    and the old one removed. On any error, Ctrl-C or SIGTERM the hidden folder is
    removed: ``target`` holds its previous complete content or the new one (or, only
    in that two-rename window, nothing), never a mix. A writer killed by ``SIGKILL``
    leaves its hidden folder, which the next write removes (:func:`remove_stale`).

    Parameters
    ----------
    owned : collection of str, optional
        Every file name this writer may put in ``target``. An existing ``target`` is
        replaced only when it holds nothing else (no other file, folder or link), so
        ``force`` never deletes a file it did not write. None: any
        ``.safetensors``/``.json`` file counts as owned.

    Raises
    ------
    ValueError
        If ``target`` is a symbolic link, a file, is or holds an input, exists and is
        not empty without ``force``, holds a file not in ``owned``, a folder, a
        symbolic link or a FIFO or device, or its parent is missing.
    OSError
        If the system fails while writing.
    """
    target = Path(target)
    name = _describe(flag, target)
    _refuse_unsafe_folder(target, inputs, force, name, owned, flag)
    parent = target.parent if str(target.parent) else Path(".")
    remove_stale(target)
    with _signals_end_the_write():
        for _ in range(100):
            temporary = parent / _temporary_name(target, ".tmp")
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
            _publish_folder(temporary, target, force, name, owned, flag)
            published = True
            _fsync_folder(parent)
        finally:
            if not published:
                _remove_tree(temporary)


def _publish_folder(
    temporary: Path,
    target: Path,
    force: bool,
    name: str,
    owned: Collection[str] | None,
    flag: str,
) -> None:
    if not force or not target.exists():
        try:
            os.mkdir(target)
            reserved = True
        except FileExistsError:
            reserved = False  # an empty folder (checked on entry): the rename below decides
        try:
            os.replace(temporary, target)  # onto the empty reservation
        except OSError as error:
            if reserved:
                with contextlib.suppress(OSError):
                    os.rmdir(target)
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise ValueError(f"{name} exists; pass --force to replace it") from None
            raise
        return
    _refuse_unsafe_folder(target, (), True, name, owned, flag)  # it may have changed while writing
    if _exchange(str(temporary), str(target)):
        _remove_tree(temporary)  # now the old content
        return
    old = target.parent / _temporary_name(target, ".old")
    os.replace(target, old)
    try:
        os.replace(temporary, target)
    except OSError:
        os.replace(old, target)
        raise
    _remove_tree(old)
