"""Transposable N:M training at solver speed: the cost of a training step against SR-STE.

Issue 34, item 2. One model (an MLP, ``--features`` inputs, two hidden layers of ``--width``,
10 classes, batch ``--batch``; every Linear sparse), trained with ``torch.optim.SGD`` in a plain
loop on the CPU. For each configuration the time of one training step (forward, backward,
``opt.step()`` with its mask refresh) is the median over ``--windows`` windows of
``--window`` steps each, so a window always holds the same number of refreshes; the ratio is
against SR-STE 2:4 (its mask refreshed every step, the paper's rule) timed in the same run:

* transposable 2:4 and 1:16 at the paper's refresh interval (40 steps, Hubara et al. 2021)
  and refreshing every step, masks from nmref's exact kernel (``host_transposable_mask``);
* the same 1:16 refreshed every step with the torch path's lockstep solver (what the layers
  did before: every forward), on fewer steps, for scale.

Goal (issue 34, not a test): <= 1.5x SR-STE at the paper's interval, <= 3x refreshing every step.

Run: ``python benchmarks/bench_training_step.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import nmsim.torch as nt
from nmsim.torch import layers as sparse_layers


def build(args: argparse.Namespace, method: str, pattern: str, **settings) -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, 16),
    )
    result = nt.sparsify(model, method, pattern, **settings)
    assert len(result.replaced) == 3, result
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return model, optimizer


def step_seconds(args: argparse.Namespace, model, optimizer, window: int, windows: int) -> float:
    """Median over windows of the mean step time in a window of ``window`` steps."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, args.features, generator=generator)
    y = torch.randint(0, 16, (args.batch,), generator=generator)

    def one_step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(window):  # warm-up: compiles the kernels, fills the allocator
        one_step()
    means = []
    for _ in range(windows):
        start = time.perf_counter()
        for _ in range(window):
            one_step()
        means.append((time.perf_counter() - start) / window)
    return statistics.median(means)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--window", type=int, default=40, help="steps per timed window")
    parser.add_argument("--windows", type=int, default=5, help="timed windows (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"MLP {args.features}-{args.width}-{args.width}-16, batch {args.batch}, SGD, CPU, "
        f"{torch.get_num_threads()} thread(s); median of {args.windows} windows of "
        f"{args.window} steps"
    )
    baseline = step_seconds(args, *build(args, "srste", "2:4"), args.window, args.windows)
    print(f"{'configuration':<52} {'ms/step':>9} {'/ SR-STE':>9}")
    print(f"{'SR-STE 2:4 (mask every step)':<52} {baseline * 1e3:9.3f} {1.0:9.2f}")
    rows = [
        ("transposable 2:4, refresh every 40 steps (paper)", "2:4", 40),
        ("transposable 2:4, refresh every step", "2:4", 1),
        ("transposable 1:16, refresh every 40 steps (paper)", "1:16", 40),
        ("transposable 1:16, refresh every step", "1:16", 1),
    ]
    for label, pattern, interval in rows:
        model, optimizer = build(args, "transposable", pattern, refresh_interval=interval)
        seconds = step_seconds(args, model, optimizer, args.window, args.windows)
        print(f"{label:<52} {seconds * 1e3:9.3f} {seconds / baseline:9.2f}")
    # The lockstep torch solver, as the layers used it before (every forward): few steps.
    original = sparse_layers.host_transposable_mask

    def lockstep(weight, n, m, *, layout=None, solver="exact", fill="exact"):
        return nt.transposable_weight_mask(weight, n, m, layout=layout, method=solver)

    sparse_layers.host_transposable_mask = lockstep
    try:
        model, optimizer = build(args, "transposable", "1:16", refresh_interval=1)
        seconds = step_seconds(args, model, optimizer, 2, 3)
    finally:
        sparse_layers.host_transposable_mask = original
    label = "transposable 1:16, every step, torch lockstep solver"
    print(f"{label:<52} {seconds * 1e3:9.3f} {seconds / baseline:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
