"""``nmref mask`` and ``nmsim report`` on a Dask cluster (issue 18 item 5): the same bits
as one process, large tensors in row bands, failed tasks retried without loss or
duplication. A 2-worker ``LocalCluster`` with threads (fast to start) is shared."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from nmref.cli import main as nmref_main
from nmref.io import distributed
from nmref.io.checkpoints import read_tensor
from nmref.io.distributed import MaskOptions, dask_client, distributed_masks, row_bands
from nmref.io.sharded import INDEX_NAME, open_model
from tests.test_sharded_checkpoints import _model

#: Attempts per task of :func:`_flaky` (module level: Dask pickles tasks by reference).
ATTEMPTS: dict[tuple, int] = {}
_LOCK = threading.Lock()


def _flaky(task: tuple) -> np.ndarray:
    """Fail the first attempt of every task, as a task whose worker died does."""
    key = (task[1], task[2])
    with _LOCK:
        ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
        first = ATTEMPTS[key] == 1
    if first:
        raise ConnectionError("worker lost")
    return distributed._run(task)


@pytest.fixture(scope="module")
def client():
    with dask_client("local-threads", 2) as client:
        yield client


def _items(folder: Path) -> list[tuple[str, str, tuple[int, ...]]]:
    model = open_model(folder)
    return [
        (str(folder / shard), info.name, info.shape)
        for info, shard in model.tensors
        if len(info.shape) >= 2 and info.source_dtype.startswith(("float", "bfloat"))
    ]


def test_row_bands_are_whole_tiles_and_cover_every_row():
    options = MaskOptions(2, 4, "auto", True, "exact", "error")
    bands = row_bands((40, 16), options, band_elements=100)
    assert bands == [(0, 4), (4, 8), (8, 12), (12, 16), (16, 20), (20, 24), (24, 28),
                     (28, 32), (32, 36), (36, 40)]  # fmt: skip
    assert row_bands((40, 16), options, band_elements=10**6) is None  # small: one task
    assert row_bands((42, 16), options, band_elements=100) is None  # rows not whole tiles
    assert row_bands((8, 4, 3, 3), options, band_elements=1) is None  # a convolution
    wide = row_bands((64, 64), MaskOptions(4, 8, "auto", False, "exact", "error"), 1000)
    assert all((stop - start) % 8 == 0 for start, stop in wide) and wide[-1][1] == 64


@pytest.mark.parametrize(
    "options",
    [
        MaskOptions(2, 4, "auto", False, "exact", "error"),
        MaskOptions(2, 4, "auto", True, "exact", "error"),
        MaskOptions(4, 8, "auto", True, "greedy", "error"),
    ],
    ids=["1d", "transposable-exact", "greedy-4of8"],
)
def test_banded_masks_on_two_workers_equal_one_process_bit_for_bit(tmp_path, client, options):
    _model(tmp_path / "m", seed=3)
    if options.m == 8:  # tensors whose shapes take 8 x 8 tiles
        _model(tmp_path / "m", seed=4)
    items = [item for item in _items(tmp_path / "m") if options.m == 4 or item[2][1] % 8 == 0]
    got = dict(distributed_masks(client, items, options, band_elements=64))
    assert list(got) == [name for _, name, _ in items]  # in order, each once
    for path, name, _ in items:
        expected = distributed.tensor_mask(path, name, options)
        assert got[name].dtype == np.bool_
        np.testing.assert_array_equal(got[name], expected)


def test_a_failing_task_is_retried_and_nothing_is_lost_or_duplicated(tmp_path, client):
    _model(tmp_path / "m", seed=5)
    items = _items(tmp_path / "m")
    options = MaskOptions(2, 4, "auto", True, "exact", "error")
    ATTEMPTS.clear()
    got = list(distributed_masks(client, items, options, band_elements=64, task=_flaky))
    assert [name for name, _ in got] == [name for _, name, _ in items]
    attempts = dict(ATTEMPTS)
    assert all(count == 2 for count in attempts.values())  # each task ran again, once
    assert len(attempts) > len(items)  # banded: more tasks than tensors
    for (path, name, _), (_, mask) in zip(items, got, strict=True):
        np.testing.assert_array_equal(mask, distributed.tensor_mask(path, name, options))


def test_a_refused_tensor_gives_the_one_process_error(tmp_path, client):
    _model(tmp_path / "m", seed=6)
    items = _items(tmp_path / "m")
    options = MaskOptions(3, 6, "auto", False, "exact", "error")
    with pytest.raises(ValueError) as one:
        for path, name, _ in items:
            distributed.tensor_mask(path, name, options)
    with pytest.raises(ValueError) as many:
        list(distributed_masks(client, items, options, band_elements=64))
    assert str(many.value) == str(one.value)


@pytest.mark.parametrize("extra", [[], ["--transposable", "--apply"]])
def test_nmref_mask_on_a_local_cluster_writes_the_same_bytes(tmp_path, capsys, extra):
    _model(tmp_path / "m", seed=7)
    base = ["mask", str(tmp_path / "m"), "--pattern", "2:4", *extra]
    assert nmref_main([*base, "-o", str(tmp_path / "one")]) == 0
    cluster = ["--scheduler", "local-threads", "--workers", "2"]
    assert nmref_main([*base, "-o", str(tmp_path / "two"), *cluster]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "two").iterdir())
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    # and a single-file output from the cluster equals the one-process single file
    assert nmref_main([*base, "-o", str(tmp_path / "one.safetensors")]) == 0
    assert nmref_main([*base, "-o", str(tmp_path / "two.safetensors"), *cluster]) == 0
    one = read_tensor(tmp_path / "one.safetensors", "layers.1.q.weight").array
    np.testing.assert_array_equal(
        one, read_tensor(tmp_path / "two.safetensors", "layers.1.q.weight").array
    )
    assert json.loads((tmp_path / "two" / INDEX_NAME).read_text())["weight_map"]


def test_report_on_a_cluster_is_the_same_document(tmp_path, client):
    from nmsim.report.build import ReportSettings, build_report

    _model(tmp_path / "m", seed=8)
    settings = ReportSettings(methods=("1d", "transposable", "bimask"), bimask_candidates=5)
    alone = build_report(str(tmp_path / "m"), settings)
    assert build_report(str(tmp_path / "m"), settings, client=client) == alone


def _dies_once(task: tuple) -> np.ndarray:
    """Kill the worker process on the first attempt of the first band (a marker file says
    it happened; module level so that worker processes import it)."""
    marker = Path(task[0]).parent / f".died-{task[1]}"
    if task[2] is not None and task[2][0] == 0 and not marker.exists():
        marker.write_text("x")
        os._exit(1)  # the worker process dies mid-task
    return distributed._run(task)


@pytest.mark.slow
def test_a_worker_process_that_dies_mid_task_loses_nothing(tmp_path):
    _model(tmp_path / "m", seed=9)
    items = _items(tmp_path / "m")
    options = MaskOptions(2, 4, "auto", False, "exact", "error")
    with dask_client("local", 2) as client:
        got = list(distributed_masks(client, items, options, band_elements=64, task=_dies_once))
    died = sorted(p.name for p in (tmp_path / "m").iterdir() if p.name.startswith(".died-"))
    assert died  # at least one worker really died
    assert [name for name, _ in got] == [name for _, name, _ in items]
    for (path, name, _), (_, mask) in zip(items, got, strict=True):
        np.testing.assert_array_equal(mask, distributed.tensor_mask(path, name, options))


def test_nmsim_report_on_a_local_cluster_prints_the_same_json(tmp_path, capsys):
    from nmsim.cli import main as nmsim_main

    _model(tmp_path / "m", seed=10)
    base = ["report", str(tmp_path / "m"), "--json", "--quiet", "--methods", "1d,transposable"]
    assert nmsim_main(base) == 0
    alone = capsys.readouterr().out
    assert nmsim_main([*base, "--scheduler", "local-threads", "--workers", "2"]) == 0
    assert capsys.readouterr().out == alone
