"""Issue 20, data loss and compress/inspect crashes: the one output writer (``nmref.io.output``)
and the commands that write through it (``nmsim compress``, ``nmref mask``, ``nmsim report
--out``). Each test is named after the item it pins, with the input written literally."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from nmref.cli import main as nmref_main
from nmref.io import output as _output
from nmref.io.checkpoints import iter_tensors, write_tensors
from nmref.io.output import output_file, write_output
from nmsim.cli import main as nmsim_main
from nmsim.cli.formats import load_compressed

ROOT = Path(__file__).resolve().parents[1]
VICTIM = b"victim: must survive\n"


def _pruned(path: Path, rows: int = 32, columns: int = 64) -> Path:
    """A 2:4 matrix (exact in fp16), saved as .npy."""
    weights = np.zeros((rows, columns))
    weights[:, 0::4] = 1.5
    weights[:, 3::4] = -0.25
    np.save(path, weights)
    return path


def _compress(*argv: str) -> int:
    return nmsim_main(["compress", *argv])


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- nmsim compress: overwrite, symlink, own input, suffix, printed path ---------------------


def test_compress_refuses_to_overwrite_an_existing_output_without_force(tmp_path, capsys):
    weights = _pruned(tmp_path / "w.npy")
    out = tmp_path / "out.npz"
    out.write_bytes(b"previous output")
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out)) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"-o {str(out)!r} exists; pass --force to replace it" in line
    assert out.read_bytes() == b"previous output"
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out), "--force") == 0
    assert load_compressed(out)["shape"] == (32, 64)
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("force", [False, True])
def test_compress_refuses_to_write_through_a_symlink_onto_another_file(tmp_path, capsys, force):
    # ln -s victim.npy link.npz; nmsim compress w.npy --dtype fp16 -o link.npz
    weights = _pruned(tmp_path / "w.npy")
    victim = tmp_path / "victim.npy"
    victim.write_bytes(VICTIM)
    link = tmp_path / "link.npz"
    link.symlink_to(victim.name)
    argv = [str(weights), "--dtype", "fp16", "-o", str(link)] + (["--force"] if force else [])
    assert _compress(*argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"-o {str(link)!r} is a symbolic link" in line
    assert victim.read_bytes() == VICTIM
    assert link.is_symlink()
    assert _hidden(tmp_path) == []


def test_compress_refuses_a_dangling_symlink_as_output(tmp_path, capsys):
    # ln -s missing.npz link.npz: writing through it would create a file elsewhere
    weights = _pruned(tmp_path / "w.npy")
    link = tmp_path / "link.npz"
    link.symlink_to("missing.npz")
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(link)) == 2
    assert "is a symbolic link" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "missing.npz").exists()


def test_compress_refuses_to_write_over_its_own_input(tmp_path, capsys):
    # nmsim compress w.npy --dtype fp16 -o w.npy  (and the same file under an .npz name)
    weights = _pruned(tmp_path / "w.npy")
    before = weights.read_bytes()
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(weights), "--force") == 2
    assert "must end in .npz" in _one_line(capsys.readouterr().err)
    alias = tmp_path / "alias.npz"
    os.link(weights, alias)  # one inode, two names
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(alias), "--force") == 2
    line = _one_line(capsys.readouterr().err)
    assert f"-o {str(alias)!r} is an input file" in line
    assert weights.read_bytes() == before
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("name", ["w.npy", "out"])
def test_compress_never_writes_w_npy_npz_when_told_w_npy(tmp_path, capsys, name):
    # nmsim compress W.npy --dtype fp16 -o w.npy  used to print "wrote w.npy" and write w.npy.npz
    weights = _pruned(tmp_path / "W.npy")
    target = tmp_path / name
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(target)) == 2
    assert "must end in .npz" in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy"]


def test_compress_prints_the_path_it_wrote(tmp_path, capsys):
    weights = _pruned(tmp_path / "w.npy")
    out = tmp_path / "out.NPZ"
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out)) == 0
    printed = capsys.readouterr().out.splitlines()[-1]
    assert printed == f"wrote {out}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.NPZ", "w.npy"]
    assert load_compressed(out)["dtype_kind"] == "fp16"


def test_compress_refuses_a_folder_as_output(tmp_path, capsys):
    weights = _pruned(tmp_path / "w.npy")
    (tmp_path / "d.npz").mkdir()
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(tmp_path / "d.npz")) == 2
    assert "is a folder" in _one_line(capsys.readouterr().err)


# --- interrupted and failed writes -----------------------------------------------------------


def _savez_that_dies_midway(exception: BaseException):
    real = np.savez

    def savez(handle, **arrays):
        real(handle, **arrays)
        handle.flush()
        handle.seek(0)
        handle.truncate(17)  # a partial archive on disk, then the interruption
        raise exception

    return real, savez


@pytest.mark.parametrize("previous", [b"previous complete output", None])
def test_compress_interrupted_by_ctrl_c_midway_leaves_the_previous_output_or_nothing(
    tmp_path, capsys, monkeypatch, previous
):
    weights = _pruned(tmp_path / "w.npy")
    out = tmp_path / "out.npz"
    if previous is not None:
        out.write_bytes(previous)
    _, savez = _savez_that_dies_midway(KeyboardInterrupt())
    monkeypatch.setattr(np, "savez", savez)
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out), "--force") == 130
    assert _one_line(capsys.readouterr().err) == "nmsim: interrupted"
    if previous is None:
        assert not out.exists()
    else:
        assert out.read_bytes() == previous
    assert _hidden(tmp_path) == []


def test_compress_on_a_full_disk_is_one_line_naming_o_and_leaves_nothing(
    tmp_path, capsys, monkeypatch
):
    weights = _pruned(tmp_path / "w.npy")
    out = tmp_path / "out.npz"
    out.write_bytes(b"previous")

    def full(handle, **arrays):
        handle.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)

    monkeypatch.setattr(np, "savez", full)
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out), "--force") == 2
    line = _one_line(capsys.readouterr().err)
    assert line == f"nmsim: error: -o {str(out)!r}: cannot write: {os.strerror(errno.ENOSPC)}"
    assert ".tmp" not in line
    assert out.read_bytes() == b"previous"
    assert _hidden(tmp_path) == []


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 64 KiB tmpfs (needs root and mount); skipped where it cannot be made."""
    if sys.platform != "linux" or shutil.which("mount") is None:
        pytest.skip("a size-limited tmpfs needs Linux mount")
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_compress_onto_a_really_full_64k_tmpfs_keeps_the_previous_output(
    tmp_path, tiny_filesystem, capsys
):
    weights = _pruned(tmp_path / "w.npy", rows=256, columns=512)  # 128 KiB of fp16 values
    out = tiny_filesystem / "out.npz"
    out.write_bytes(b"previous")
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out), "--force") == 2
    line = _one_line(capsys.readouterr().err)
    assert f"-o {str(out)!r}: cannot write: " in line and ".tmp" not in line
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tiny_filesystem.iterdir()) == ["out.npz"]


def test_write_tensors_safetensors_on_a_really_full_64k_tmpfs_is_an_oserror(tiny_filesystem):
    target = tiny_filesystem / "w.safetensors"
    with pytest.raises(OSError, match=r"output='.*w\.safetensors': cannot write"):
        write_tensors(target, {"w": np.ones((128, 256), np.float32)})
    assert list(tiny_filesystem.iterdir()) == []


_SIGTERM_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from nmref.io.output import write_output

    target, ready = Path(sys.argv[1]), Path(sys.argv[2])

    def write(temporary):
        with open(temporary, "wb") as handle:
            handle.write(b"half of the new output")
            handle.flush()
            ready.write_text(temporary)
            time.sleep(60)
            handle.write(b" and the rest")

    write_output(target, write, force=True)
    """
)


@pytest.mark.parametrize("previous", [b"previous complete output", None])
def test_sigterm_while_writing_leaves_the_previous_output_or_nothing(tmp_path, previous):
    if not hasattr(signal, "SIGTERM") or sys.platform == "win32":
        pytest.skip("needs POSIX signals")
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "w.npz"
    if previous is not None:
        target.write_bytes(previous)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_CHILD, str(target), str(ready)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), child.stderr.read() if child.poll() is not None else "timeout"
        assert Path(ready.read_text()).exists()  # the temporary file is there mid-write
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err
    if previous is None:
        assert list(folder.iterdir()) == []
    else:
        assert sorted(p.name for p in folder.iterdir()) == ["w.npz"]
        assert target.read_bytes() == previous


def test_the_sigterm_handler_is_installed_only_while_writing(tmp_path):
    if not hasattr(signal, "SIGTERM"):
        pytest.skip("needs SIGTERM")
    before = signal.getsignal(signal.SIGTERM)
    seen = []
    write_output(
        tmp_path / "x.bin",
        lambda temporary: seen.append(signal.getsignal(signal.SIGTERM)),
    )
    assert signal.getsignal(signal.SIGTERM) is before
    if before is signal.SIG_DFL:
        assert seen == [_output._terminate]


# --- racing writers ----------------------------------------------------------------------------


def test_two_concurrent_writers_without_force_exactly_one_wins_threads(tmp_path):
    target = tmp_path / "out.npz"
    both_written = threading.Barrier(2, timeout=30)
    results: dict[int, object] = {}

    def writer(index: int) -> None:
        def write(temporary: str) -> None:
            Path(temporary).write_bytes(f"writer {index}".encode())
            both_written.wait()  # both past every check, both about to publish

        try:
            results[index] = write_output(target, write)
        except ValueError as error:
            results[index] = error

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    winners = [i for i, r in results.items() if isinstance(r, Path)]
    losers = [r for r in results.values() if isinstance(r, ValueError)]
    assert len(winners) == 1 and len(losers) == 1
    assert f"-o {str(target)!r} exists; pass --force to replace it" == str(losers[0])
    assert target.read_bytes() == f"writer {winners[0]}".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]


_RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from nmref.io.output import write_output

    target, index, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])

    def write(temporary):
        Path(temporary).write_text("writer " + index)
        time.sleep(max(0.0, start - time.time()))  # publish at the same instant

    try:
        write_output(target, write)
    except ValueError as error:
        print(error, file=sys.stderr)
        sys.exit(2)
    """
)


def test_two_concurrent_writers_without_force_exactly_one_wins_processes(tmp_path):
    target = tmp_path / "out.npz"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.time() + 3.0
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(target), str(i), str(start)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    outcomes = [(r.wait(timeout=120), r.stderr.read()) for r in racers]
    for racer in racers:
        racer.stderr.close()
    assert sorted(code for code, _ in outcomes) == [0, 2, 2, 2]
    winner = next(i for i, (code, _) in enumerate(outcomes) if code == 0)
    assert target.read_text() == f"writer {winner}"
    for code, err in outcomes:
        if code:
            assert err.strip() == f"-o {str(target)!r} exists; pass --force to replace it"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]


def test_two_nmref_mask_runs_without_force_to_the_same_output_cannot_both_succeed(
    tmp_path, monkeypatch, capsys
):
    # nmref mask w.npz --pattern 2:4 -o m.npz  twice at once: both pass the exists-check
    weights = write_tensors(tmp_path / "w.npz", {"w": np.arange(32.0).reshape(4, 8)})
    out = tmp_path / "m.npz"
    both_written = threading.Barrier(2, timeout=30)
    real = np.savez

    def savez(handle, **arrays):
        real(handle, **arrays)
        both_written.wait()

    monkeypatch.setattr(np, "savez", savez)
    statuses: list[int] = []

    def run() -> None:
        statuses.append(nmref_main(["mask", str(weights), "--pattern", "2:4", "-o", str(out)]))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(statuses) == [0, 2]
    assert "exists; pass --force to replace it" in capsys.readouterr().err
    assert [r.name for r in iter_tensors(out)] == ["w"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz", "w.npz"]


# --- nmref mask and nmsim report --out through the same writer ------------------------------


def test_mask_refuses_to_write_through_a_symlink_onto_another_file(tmp_path, capsys):
    # ln -s victim.npz link.npz; nmref mask w.npz --pattern 2:4 -o link.npz --force
    weights = write_tensors(tmp_path / "w.npz", {"w": np.arange(32.0).reshape(4, 8)})
    victim = tmp_path / "victim.npz"
    victim.write_bytes(VICTIM)
    link = tmp_path / "link.npz"
    link.symlink_to(victim)
    argv = ["mask", str(weights), "--pattern", "2:4", "-o", str(link), "--force"]
    assert nmref_main(argv) == 2
    assert f"-o {str(link)!r} is a symbolic link" in _one_line(capsys.readouterr().err)
    assert victim.read_bytes() == VICTIM


def test_mask_prints_the_path_it_wrote(tmp_path, capsys):
    weights = write_tensors(tmp_path / "w.npz", {"w": np.arange(32.0).reshape(4, 8)})
    out = tmp_path / "m.safetensors"
    assert nmref_main(["mask", str(weights), "--pattern", "2:4", "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip().endswith(f"to {out}")
    assert [r.name for r in iter_tensors(out)] == ["w"]


def test_report_out_refuses_a_symlinked_report_json_even_with_force(tmp_path, capsys):
    # mkdir d; ln -s victim.json d/report.json; nmsim report --out d --force
    pytest.importorskip("matplotlib")
    victim = tmp_path / "victim.json"
    victim.write_bytes(VICTIM)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "report.json").symlink_to(victim)
    argv = ["report", "--quiet", "--methods", "1d", "--pattern", "1:4"]
    status = nmsim_main([*argv, "--out", str(folder), "--force"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert f"--out file {str(folder / 'report.json')!r} is a symbolic link" in err
    assert victim.read_bytes() == VICTIM


# --- the writer itself -------------------------------------------------------------------------


def test_write_output_refuses_a_missing_folder_naming_the_o_path(tmp_path):
    target = tmp_path / "no" / "such" / "out.npz"
    with pytest.raises(ValueError, match=r"does not exist") as caught:
        write_output(target, lambda temporary: None)
    assert str(target) in str(caught.value) and ".tmp" not in str(caught.value)


def test_write_output_error_in_the_writer_names_the_o_path_never_the_temporary(tmp_path):
    target = tmp_path / "out.bin"

    def write(temporary: str) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", temporary)

    with pytest.raises(OSError) as caught:
        write_output(target, write)
    assert str(caught.value) == f"-o {str(target)!r}: cannot write: Permission denied"
    assert list(tmp_path.iterdir()) == []


def test_output_file_without_force_keeps_an_existing_file_created_meanwhile(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(ValueError, match="exists; pass --force"):
        with output_file(target) as temporary:
            Path(temporary).write_bytes(b"new")
            target.write_bytes(b"someone else's")  # appears after the first check
    assert target.read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_output_file_without_hard_links_still_has_one_winner(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"

    def no_links(source, destination):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    assert write_output(target, lambda t: Path(t).write_bytes(b"first")) == target
    with pytest.raises(ValueError, match="exists; pass --force"):
        write_output(target, lambda t: Path(t).write_bytes(b"second"))
    assert target.read_bytes() == b"first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


# --- nmsim compress / inspect crashes -> one line, exit 2 ------------------------------------


def test_compress_an_empty_file_is_one_line_not_eoferror(tmp_path, capsys):
    # : > empty.npy; nmsim compress empty.npy --dtype fp16 -o out.npz
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    assert _compress(str(empty), "--dtype", "fp16", "-o", str(tmp_path / "out.npz")) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{str(empty)!r} is empty" in line and "EOFError" not in line
    assert not (tmp_path / "out.npz").exists()


def test_inspect_an_empty_file_is_one_line_not_eoferror(tmp_path, capsys):
    # : > empty.npz; nmsim inspect empty.npz
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    assert nmsim_main(["inspect", str(empty)]) == 2
    assert f"{str(empty)!r} is empty" in _one_line(capsys.readouterr().err)


def test_compress_npz_input_is_one_line_not_npzfile_has_no_attribute_ndim(tmp_path, capsys):
    # python -c "import numpy as np; np.savez('w.npz', w=np.eye(4))"; nmsim compress w.npz ...
    archive = tmp_path / "w.npz"
    np.savez(archive, w=np.eye(4))
    assert _compress(str(archive), "--dtype", "fp16", "-o", str(tmp_path / "out.npz")) == 2
    line = _one_line(capsys.readouterr().err)
    assert "is an .npz archive (1 array(s)); compress needs one 2-D .npy array" in line
    assert "ndim" not in line


def test_compress_its_own_output_says_to_use_inspect(tmp_path, capsys):
    weights = _pruned(tmp_path / "w.npy")
    out = tmp_path / "out.npz"
    assert _compress(str(weights), "--dtype", "fp16", "-o", str(out)) == 0
    capsys.readouterr()
    assert _compress(str(out), "--dtype", "fp16", "-o", str(tmp_path / "again.npz")) == 2
    assert "already a compressed file" in _one_line(capsys.readouterr().err)


def test_inspect_w_npy_is_one_line_not_context_manager_protocol(tmp_path, capsys):
    # nmsim inspect W.npy
    weights = _pruned(tmp_path / "W.npy")
    assert nmsim_main(["inspect", str(weights)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{str(weights)!r} is a .npy array, not an .npz written by nmsim compress" in line
    assert "context manager" not in line


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("truncated.npz", b"PK\x03\x04\x14\x00\x00\x00", "cannot read it"),
        ("garbage.npz", b"not a numpy file at all", "cannot read it"),
        ("header.npy", b"\x93NUMPY\x01\x00", "cannot read it"),
    ],
)
def test_inspect_and_compress_on_broken_files_are_one_line(
    tmp_path, capsys, name, content, message
):
    path = tmp_path / name
    path.write_bytes(content)
    assert nmsim_main(["inspect", str(path)]) == 2
    assert message in _one_line(capsys.readouterr().err)
    assert _compress(str(path), "--dtype", "fp16", "-o", str(tmp_path / "o.npz")) == 2
    assert message in _one_line(capsys.readouterr().err)
    assert path.read_bytes() == content
    assert not (tmp_path / "o.npz").exists()


def test_compress_a_pickled_object_array_is_refused_without_running_it(tmp_path, capsys):
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert _compress(str(path), "--dtype", "fp16", "-o", str(tmp_path / "o.npz")) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(path) in line and "allow_pickle" in line


@pytest.mark.parametrize("command", ["compress", "inspect"])
def test_compress_and_inspect_on_a_folder_or_missing_file_are_one_line(tmp_path, capsys, command):
    extra = ["--dtype", "fp16", "-o", str(tmp_path / "o.npz")] if command == "compress" else []
    (tmp_path / "d.npy").mkdir()
    assert nmsim_main([command, str(tmp_path / "d.npy"), *extra]) == 2
    assert "is a folder" in _one_line(capsys.readouterr().err)
    assert nmsim_main([command, str(tmp_path / "missing.npy"), *extra]) == 2
    assert "does not exist" in _one_line(capsys.readouterr().err)


def test_mask_interrupted_by_ctrl_c_midway_leaves_the_previous_output(
    tmp_path, capsys, monkeypatch
):
    # nmref mask w.npz --pattern 2:4 -o m.npz --force, Ctrl-C while m.npz is being written
    weights = write_tensors(tmp_path / "w.npz", {"w": np.arange(32.0).reshape(4, 8)})
    out = tmp_path / "m.npz"
    out.write_bytes(b"previous complete output")
    import nmref.io.checkpoints

    real = nmref.io.checkpoints._write_npz

    def write_npz(path, members):  # the .npz writer of write_tensors (issue 37: not np.savez)
        real(path, members)
        os.truncate(path, 17)  # a partial archive on disk, then the interruption
        raise KeyboardInterrupt

    monkeypatch.setattr(nmref.io.checkpoints, "_write_npz", write_npz)
    argv = ["mask", str(weights), "--pattern", "2:4", "-o", str(out), "--force"]
    assert nmref_main(argv) == 130
    assert _one_line(capsys.readouterr().err) == "nmref: interrupted"
    assert out.read_bytes() == b"previous complete output"
    assert _hidden(tmp_path) == []
