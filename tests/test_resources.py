"""Resources no input can exhaust (issue 37, "Resource exhaustion").

No command starts more processes than asked for and capped at the usable cores, and none
leaves a worker behind when it is killed; a file of n tensors is read in O(n) (its header is
parsed once, counted here, not timed: ``benchmarks/bench_many_tensors.py`` prints the
per-tensor cost); one memory budget covers every format, before a tensor is built; a config
cannot make ``nmref permute`` loop over layers no file holds; a vectors folder cannot hand
``nmsim verify`` a device or a FIFO. Each test writes the failing input of the issue.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nmref.cli import main as nmref_main
from nmref.io import checkpoints, workers
from nmref.io.workers import capped_workers, usable_cores
from nmsim.cli import main as nmsim_main

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _many_tensors(path: Path, count: int, shape: tuple[int, int] = (4, 4)) -> Path:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file(
        {f"layer.{i}.weight": rng.standard_normal(shape).astype(np.float32) for i in range(count)},
        str(path),
    )
    return path


# ---------------------------------------------------------------------------------------------
# Worker processes: requested, capped at the usable cores, never left behind
# ---------------------------------------------------------------------------------------------


def test_capped_workers_cuts_a_request_above_the_cores_and_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(workers, "usable_cores", lambda: 2)
    notice = io.StringIO()
    assert capped_workers(1000000, notice=notice) == 2
    assert notice.getvalue() == (
        "--workers 1000000: capped at 2, the CPU cores this process may use\n"
    )
    notice = io.StringIO()
    assert capped_workers(2, notice=notice) == 2 and capped_workers(1, notice=notice) == 1
    assert notice.getvalue() == ""
    with pytest.raises(ValueError, match="--workers 0 must be >= 1"):
        capped_workers(0)


def test_usable_cores_are_the_cores_this_process_may_run_on():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    assert usable_cores() == len(os.sched_getaffinity(0))


def _children(pid: int) -> list:
    """The worker processes under ``pid`` (multiprocessing's resource tracker is no worker)."""
    import psutil

    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # it ended meanwhile
            continue
    return found


def _peak_workers(command: list[str], cwd: Path) -> tuple[int, subprocess.CompletedProcess]:
    """Run ``command``; the most worker processes it had at once, and how it ended."""
    import psutil

    # into files, not pipes: a pipe nobody reads while polling would block the command
    with open(cwd / "stdout.txt", "w+") as stdout, open(cwd / "stderr.txt", "w+") as stderr:
        process = subprocess.Popen(command, cwd=cwd, env=ENV, stdout=stdout, stderr=stderr)
        peak = 0
        deadline = time.monotonic() + 600
        try:
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    peak = max(peak, len(_children(process.pid)))
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.05)
            process.wait(timeout=max(deadline - time.monotonic(), 1))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stdout.seek(0)
        stderr.seek(0)
        ended = subprocess.CompletedProcess(
            command, process.returncode, stdout.read(), stderr.read()
        )
    return peak, ended


def test_report_with_a_million_workers_starts_no_more_than_the_cores(tmp_path):
    pytest.importorskip("psutil")
    pytest.importorskip("safetensors")
    path = _many_tensors(tmp_path / "w.safetensors", 64, (64, 64))
    command = [sys.executable, "-m", "nmsim", "report", str(path), "--workers", "1000000"]
    peak, run = _peak_workers([*command, "--methods", "1d", "--quiet", "--json"], tmp_path)
    assert run.returncode == 0, run.stderr
    cores = usable_cores()
    # the fork pool started every worker asked for: 1,000,000 processes, then the OOM killer
    assert peak == (cores if cores > 1 else 0)
    assert f"--workers 1000000: capped at {cores}, the CPU cores" in run.stderr


def test_mask_with_a_million_workers_starts_a_cluster_no_larger_than_the_cores(tmp_path):
    pytest.importorskip("psutil")
    pytest.importorskip("distributed")
    pytest.importorskip("safetensors")
    path = _many_tensors(tmp_path / "w.safetensors", 16, (64, 64))
    command = [sys.executable, "-m", "nmref", "mask", str(path), "--pattern", "2:4"]
    command += ["--workers", "1000000", "-o", str(tmp_path / "m.npz"), "--quiet"]
    peak, run = _peak_workers(command, tmp_path)  # it used to hang, starting the cluster
    assert run.returncode == 0, run.stderr
    cores = usable_cores()
    assert 1 <= peak <= cores
    assert f"--workers 1000000: capped at {cores}" in run.stderr


def test_a_report_killed_with_sigkill_leaves_no_worker_behind(tmp_path):
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("safetensors")
    if usable_cores() < 2:
        pytest.skip("needs 2 cores for a pool of 2 workers")
    path = _many_tensors(tmp_path / "w.safetensors", 3000, (64, 64))
    command = [sys.executable, "-m", "nmsim", "report", str(path), "--workers", "2"]
    process = subprocess.Popen(
        [*command, "--methods", "1d", "--quiet", "--json"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pool: list = []
    try:
        deadline = time.monotonic() + 300
        while len(pool) < 2 and process.poll() is None and time.monotonic() < deadline:
            pool = _children(process.pid)
            time.sleep(0.05)
        assert len(pool) == 2, "the pool never started"
        process.send_signal(signal.SIGKILL)  # no cleanup runs in the parent
        process.wait()
        # the workers waited on their queue for ever (orphans of init); now they die with it
        _, alive = psutil.wait_procs(pool, timeout=20)
        assert not alive, [p.pid for p in alive]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for worker in pool:
            try:
                worker.kill()
            except psutil.Error:
                pass


# ---------------------------------------------------------------------------------------------
# A file of n tensors costs O(n): its header is parsed once
# ---------------------------------------------------------------------------------------------

MANY = 200
COMMANDS = {
    "mask": lambda f, o: nmref_main(["mask", f, "--pattern", "2:4", "-o", f"{o}/m.npz"]),
    "mask-streamed": lambda f, o: nmref_main(
        ["mask", f, "--pattern", "2:4", "-o", f"{o}/m.safetensors"]
    ),
    "report": lambda f, o: nmsim_main(["report", f, "--methods", "1d", "--quiet", "--json"]),
    "audit": lambda f, o: nmref_main(["audit", f, "--pattern", "2:4", "--methods", "greedy"]),
    "explain": lambda f, o: nmref_main(
        ["explain", "transposable", f, "--name", "layer.7.weight", "--pattern", "2:4"]
    ),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_file_of_many_tensors_has_its_header_parsed_once(command, tmp_path, monkeypatch, capsys):
    # 1k / 2k / 4k / 8k tensors took 4.2 / 10.4 / 63 / > 120 s: every tensor re-parsed the
    # whole header (and safetensors re-validated it): O(n^2) in the number of tensors
    pytest.importorskip("safetensors")
    path = _many_tensors(tmp_path / "many.safetensors", MANY)
    parses = {"header": 0, "safe_open": 0}
    header, safe_open = checkpoints._safetensors_header, checkpoints._safe_open

    def counted_header(*args):
        parses["header"] += 1
        return header(*args)

    def counted_safe_open(*args):
        parses["safe_open"] += 1
        return safe_open(*args)

    monkeypatch.setattr(checkpoints, "_safetensors_header", counted_header)
    monkeypatch.setattr(checkpoints, "_safe_open", counted_safe_open)
    monkeypatch.setattr(checkpoints, "_INDEXES", type(checkpoints._INDEXES)())
    assert COMMANDS[command](str(path), str(tmp_path)) == 0, capsys.readouterr().err
    assert parses == {"header": 1, "safe_open": 1}


def test_a_changed_file_is_parsed_again_not_served_from_the_cache(tmp_path):
    pytest.importorskip("safetensors")
    path = _many_tensors(tmp_path / "w.safetensors", 3)
    assert len(checkpoints.list_tensors(path)) == 3
    replacement = _many_tensors(tmp_path / "new.safetensors", 5)
    os.replace(replacement, path)
    assert len(checkpoints.list_tensors(path)) == 5
    assert checkpoints.read_tensor(path, "layer.4.weight").array.shape == (4, 4)


# ---------------------------------------------------------------------------------------------
# One memory budget for every format, before the tensor is built
# ---------------------------------------------------------------------------------------------

STRIDE_ZERO_REFUSAL = (
    "path='stride0.pt': tensor 'w' ((40000, 40000) float32, strides (0, 0) over 4 stored "
    "bytes) would take 5.96 GiB in memory, over the 4 GiB budget; set NMREF_MEMORY_BUDGET_GIB "
    "to raise it"
)
READERS = {
    "mask": lambda f: nmref_main(["mask", f, "--pattern", "2:4", "-o", "m.npz"]),
    "audit": lambda f: nmref_main(["audit", f, "--pattern", "2:4"]),
    "explain": lambda f: nmref_main(["explain", "transposable", f, "--pattern", "2:4"]),
    "check": lambda f: nmref_main(["check", f, "--pattern", "2:4"]),
    "report": lambda f: nmsim_main(["report", f, "--methods", "1d", "--quiet"]),
}


@pytest.mark.parametrize("command", list(READERS))
def test_a_stride_zero_pt_tensor_is_refused_before_it_is_built(
    command, tmp_path, monkeypatch, capsys
):
    # a 1.6 KB file, 6.4 GB logical: mask peaked at 8.2 GB, report ran past 120 s, audit tried
    # 23.8 GiB; the budget covered only .npz
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("NMREF_MEMORY_BUDGET_GIB", raising=False)
    monkeypatch.chdir(tmp_path)
    torch.save({"w": torch.zeros(1).expand(40000, 40000)}, "stride0.pt")
    assert READERS[command]("stride0.pt") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(STRIDE_ZERO_REFUSAL)
    assert not (tmp_path / "m.npz").exists()


def test_the_budget_refuses_only_repeated_bytes_over_it(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("NMREF_MEMORY_BUDGET_GIB", raising=False)
    weight = torch.arange(32.0).reshape(8, 4)
    torch.save({"t": weight.t(), "small": torch.ones(1).expand(8, 8)}, tmp_path / "ok.pt")
    records = {r.name: r.array for r in checkpoints.iter_tensors(tmp_path / "ok.pt")}
    # a transposed view repeats no byte, and 256 repeated bytes are within the budget
    np.testing.assert_array_equal(records["t"], weight.numpy().T)
    np.testing.assert_array_equal(records["small"], np.ones((8, 8), np.float32))
    monkeypatch.setenv("NMREF_MEMORY_BUDGET_GIB", str(100 / 2**30))  # 100 bytes
    with pytest.raises(ValueError, match=r"tensor 'small' \(\(8, 8\) float32, strides \(0, 0\)"):
        list(checkpoints.iter_tensors(tmp_path / "ok.pt"))
    # 128 distinct mapped bytes over a 100-byte budget: mapped, not built, so read
    assert checkpoints.read_tensor(tmp_path / "ok.pt", "t").array.shape == (4, 8)


@pytest.mark.parametrize("value", ["inf", "1e400", "-inf", "nan", "lots", "0", "-1"])
def test_a_bad_budget_setting_is_one_error_naming_the_variable(
    value, tmp_path, monkeypatch, capsys
):
    # inf and 1e400 ended in an OverflowError traceback; the message blamed the file being read
    np.savez(tmp_path / "w.npz", w=np.ones((4, 4), np.float32))
    monkeypatch.setenv("NMREF_MEMORY_BUDGET_GIB", value)
    assert nmref_main(["mask", str(tmp_path / "w.npz"), "--pattern", "2:4", "-o", "x.npz"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"nmref: error: NMREF_MEMORY_BUDGET_GIB={value!r} must be a finite number of GiB above "
        "0 (the largest tensor a reader builds in memory; default 4)"
    )


# ---------------------------------------------------------------------------------------------
# nmref permute: bounded by the tensors present, not by the config's count
# ---------------------------------------------------------------------------------------------


def test_permute_with_num_hidden_layers_10_to_the_15_finishes(tmp_path):
    pytest.importorskip("safetensors")
    import json

    from nmref.io.checkpoints import write_tensors
    from tests.test_permute_cli import CONFIG, random_llama

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**CONFIG, "num_hidden_layers": 10**15}))
    write_tensors(model / "model.safetensors", random_llama())
    # range(10**15) looped for ever; a subprocess with a deadline, should it ever again
    output = str(tmp_path / "p.safetensors")
    run = subprocess.run(
        [sys.executable, "-m", "nmref", "permute", str(model), "--pattern", "2:4", "-o", output],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "(4 layer pair(s) permuted)" in run.stdout


def test_permuted_layers_are_the_numbered_ones_present_below_the_count():
    from nmref.permutation.checkpoint import _layer_indices

    names = ["model.layers.3.mlp.x", "model.layers.03.mlp.x", "model.layers.1.a", "lm_head.w"]
    names += ["model.layers.9.a", "model.layers." + "9" * 5000 + ".a"]
    assert _layer_indices(dict.fromkeys(names), 5) == [1, 3]
    assert _layer_indices(dict.fromkeys(names), 10**15) == [1, 3, 9]


# ---------------------------------------------------------------------------------------------
# nmsim verify --vectors: regular files of bounded size only
# ---------------------------------------------------------------------------------------------

WITHOUT_TORCH = (
    "import sys; sys.modules['torch'] = None; "
    "from nmsim.cli import main; raise SystemExit(main(sys.argv[1:]))"
)


def _bounded_verify(folder: Path) -> subprocess.CompletedProcess:
    """``nmsim verify --vectors folder`` with 2 GiB of address space and a deadline: the
    unfixed reader grew to 24 GB on /dev/zero (here: MemoryError) or blocked on a FIFO."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))

    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, "verify", "--vectors", str(folder)],
        capture_output=True,
        text=True,
        env=ENV,
        preexec_fn=limit,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo", "over-16-MiB"])
def test_verify_opens_no_vector_that_is_not_a_small_regular_file(kind, tmp_path):
    import shutil

    from nmref.testing.golden import default_vectors_dir, read_manifest

    folder = tmp_path / "vectors"
    shutil.copytree(default_vectors_dir(), folder)
    name = read_manifest(folder)[0]["file"]
    (folder / name).unlink()
    if kind == "symlink-to-dev-zero":
        (folder / name).symlink_to("/dev/zero")
        said = "is not a regular file (a folder, FIFO, socket or device); it is not opened"
    elif kind == "fifo":
        os.mkfifo(folder / name)
        said = "is not a regular file (a folder, FIFO, socket or device); it is not opened"
    else:
        with open(folder / name, "wb") as handle:
            handle.truncate(17 * 2**20)  # sparse: no disk used
        said = "holds 17825792 bytes, over the 16777216-byte limit"
    run = _bounded_verify(folder)
    assert run.returncode == 2, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert line == f"nmsim: error: vector file {str(folder / name)!r} {said}"
