"""Benchmark: reading a ``.safetensors`` file of many small tensors is linear in their number.

A file of n tensors of 4 x 4 float32 (n = 1,000, 10,000, 100,000; the last a 14 MB file
with a 10 MB header) is read three ways by ``nmref.io.checkpoints``, each from a cold
header cache: ``list_tensors``; ``iter_tensors`` (every array summed, so that its bytes
are read); ``read_tensor`` by name for every tensor (how ``nmsim report`` and the streamed
``nmref mask`` read). The peer, measured in the same run, is safetensors' own
``safe_open`` + ``get_tensor`` over every key. Prints the cost per tensor in microseconds,
its ratio to the peer's, and the growth of the per-tensor cost from the smallest file to
the largest: near 1 is linear; it was about n-fold (quadratic) while every tensor re-parsed
the header (issue 37: 1k / 2k / 4k / 8k tensors took 4.2 / 10.4 / 63 / > 120 s in ``nmref
mask``). ``--commands`` adds ``nmref mask FILE -o OUT.safetensors`` end to end (in this
process, masks included; the first count also pays Numba's compilation).

Run: ``python benchmarks/bench_many_tensors.py [--counts 1000 10000 100000] [--commands]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nmref.io import checkpoints


def write_file(path: Path, count: int) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {
        f"layer.{i}.weight": rng.standard_normal((4, 4)).astype(np.float32) for i in range(count)
    }
    save_file(tensors, str(path))


def cold(function: Callable[..., object], *args: object) -> float:
    """Seconds of one call with nmref's header cache emptied first (the parse is counted)."""
    checkpoints._INDEXES.clear()
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def read_all_by_name(path: Path) -> None:
    for info in checkpoints.list_tensors(path):
        checkpoints.read_tensor(path, info.name).array.sum()


def iterate(path: Path) -> None:
    for record in checkpoints.iter_tensors(path):
        record.array.sum()


def peer(path: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as handle:
        for name in handle.keys():
            handle.get_tensor(name).sum()


def mask_command(path: Path, folder: str) -> None:
    from nmref.cli import main

    out = os.path.join(folder, "masks.safetensors")
    with contextlib.redirect_stdout(io.StringIO()):  # its "wrote masks of ..." line
        code = main(["mask", str(path), "--pattern", "2:4", "-o", out, "--force", "--quiet"])
    if code != 0:
        raise SystemExit(f"nmref mask exited {code}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--commands", action="store_true", help="also time nmref mask")
    args = parser.parse_args()
    cases: OrderedDict[str, Callable[[Path], object]] = OrderedDict(
        [
            ("list_tensors", checkpoints.list_tensors),
            ("iter_tensors", iterate),
            ("read_tensor by name", read_all_by_name),
            ("peer: safe_open + get_tensor", peer),
        ]
    )
    print(f"per-tensor cost in microseconds; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    per_tensor: dict[str, list[float]] = {name: [] for name in cases}
    if args.commands:
        per_tensor["nmref mask -o .safetensors"] = []
    with tempfile.TemporaryDirectory() as folder:
        for count in args.counts:
            path = Path(folder) / f"many{count}.safetensors"
            write_file(path, count)
            size = path.stat().st_size / 2**20
            cells = []
            for name, function in cases.items():
                seconds = cold(function, path)
                per_tensor[name].append(1e6 * seconds / count)
                cells.append(f"{name} {per_tensor[name][-1]:.1f}")
            if args.commands:
                seconds = cold(mask_command, path, folder)
                per_tensor["nmref mask -o .safetensors"].append(1e6 * seconds / count)
                cells.append(f"nmref mask {per_tensor['nmref mask -o .safetensors'][-1]:.1f}")
            print(f"{count:>7} tensors ({size:.1f} MiB): " + ", ".join(cells))
            path.unlink()
    peer_costs = per_tensor["peer: safe_open + get_tensor"]
    print("\nratio to the peer per tensor (< 1: nmref is faster), and growth of the per-tensor")
    print(f"cost from {args.counts[0]} to {args.counts[-1]} tensors (1: linear):")
    for name, costs in per_tensor.items():
        ratios = ", ".join(f"{c / p:.2f}" for c, p in zip(costs, peer_costs, strict=True))
        print(f"  {name}: x peer {ratios}; growth {costs[-1] / costs[0]:.2f}")


if __name__ == "__main__":
    main()
