"""BAME-style evolution vs SR-STE on scikit-learn's digits (offline, CPU, about a minute).

A 2-layer MLP 64 -> 128 -> 10 with both Linear weights N:M-sparse is trained
with the same data order, initialisation, optimizer and epochs by

* ``dense``: no mask (reference accuracy);
* ``srste``: SR-STE (Zhou et al., ICLR 2021): magnitude mask recomputed every
  step, dense weight gradient passed straight through, pruned weights decayed
  by ``lambda_w = 2e-4`` (a local baseline written for this comparison);
* ``static``: the initial magnitude mask kept fixed, sparse weight gradient;
* ``bame``: :func:`nmref.bame.training.bame_train_step` with the default
  :class:`nmref.bame.BameConfig` switches.

It prints test accuracy (mean and spread over seeds) and the fraction of
weight-gradient entries each method computed, relative to SR-STE's dense
weight gradient, from :class:`nmref.bame.training.GradientLedger`.

Run: ``PYTHONPATH=. python benchmarks/bame_digits.py [--seeds 3] [--epochs 30]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from sklearn.datasets import load_digits

from nmref.bame import BameConfig, candidate_blocks, is_update_step
from nmref.bame.training import (
    SGD,
    GradientLedger,
    accuracy,
    bame_train_step,
    cross_entropy,
    init_sparse_mlp,
    mlp_forward,
)
from nmref.masks import magnitude_mask

SRSTE_DECAY = 2e-4  # lambda_w of SR-STE (Zhou et al. 2021, Sec. 4)


def load_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1]; a fixed 2/3 train, 1/3 test split."""
    digits = load_digits()
    x = digits.data / 16.0
    y = digits.target
    order = np.random.default_rng(seed).permutation(len(y))
    cut = (2 * len(y)) // 3
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def srste_train_step(layers, x, labels, config, optimizer, ledger) -> float:
    """One SR-STE step: mask by magnitude now, dense weight gradient, decay on pruned weights."""
    for layer in layers:
        layer.mask = magnitude_mask(layer.weight, config.n, config.m)
    activations = mlp_forward(layers, x)
    loss, grad_out = cross_entropy(activations[-1], labels)
    grads = [None] * len(layers)
    for index in range(len(layers) - 1, -1, -1):
        layer = layers[index]
        dense = grad_out.T @ activations[index]
        grads[index] = (
            dense + SRSTE_DECAY * np.where(layer.mask, 0.0, layer.weight),
            grad_out.sum(0),
        )
        ledger.record(np.ones_like(layer.mask), layer.mask, grad_out.shape[0])
        if index:
            grad_out = (grad_out @ layer.effective_weight) * (activations[index] > 0)
    ledger.steps += 1
    for layer, (grad, bias_grad) in zip(layers, grads, strict=True):
        layer.velocity = (
            optimizer.momentum * layer.velocity + grad + optimizer.weight_decay * layer.weight
        )
        layer.weight = layer.weight - optimizer.learning_rate * layer.velocity
        layer.bias_velocity = optimizer.momentum * layer.bias_velocity + bias_grad
        layer.bias = layer.bias - optimizer.learning_rate * layer.bias_velocity
    return loss


def train(method: str, n: int, m: int, seed: int, epochs: int, batch: int = 32, **switches):
    x_train, y_train, x_test, y_test = load_split()
    steps_per_epoch = -(-len(y_train) // batch)
    total = epochs * steps_per_epoch
    optimizer = SGD(learning_rate=0.05, momentum=0.9, weight_decay=5e-4)
    if method == "dense":
        config = BameConfig(m, m, t_i=0, t_f=0)
    elif method == "static":
        config = BameConfig(n, m, t_i=0, t_f=0)
    else:
        # Adapt over the first 3/4 of training every 20 steps; every other switch default.
        config = BameConfig(n, m, t_i=0, t_f=(3 * total) // 4, update_interval=20, **switches)
    rng = np.random.default_rng(seed)
    layers = init_sparse_mlp((64, 128, 10), config, rng)
    ledger = GradientLedger()
    # OBF activity: block-updates whose block was not a candidate (frozen), of all.
    frozen = block_updates = 0
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(y_train))
        for start in range(0, len(order), batch):
            index = order[start : start + batch]
            if method == "srste":
                srste_train_step(layers, x_train[index], y_train[index], config, optimizer, ledger)
            else:
                if is_update_step(step, config):
                    for layer in layers:  # the candidates evolve_mask will use at this step
                        candidates = candidate_blocks(layer.state, config)
                        frozen += int(np.count_nonzero(~candidates))
                        block_updates += candidates.size
                bame_train_step(
                    layers, x_train[index], y_train[index], step, config, optimizer, ledger
                )
            step += 1
    if method == "srste":
        for layer in layers:
            layer.mask = magnitude_mask(layer.weight, n, m)
    changes = sum(int(layer.state.changes.sum()) for layer in layers)
    return accuracy(layers, x_test, y_test), ledger, changes, (frozen, block_updates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    seeds = range(args.seeds)
    print(f"digits, MLP 64-128-10, {args.epochs} epochs, batch 32, seeds {list(seeds)}")
    print(f"{'pattern':8} {'method':9} {'test acc % (mean±sd)':>22} {'dW entries vs SR-STE':>21}")
    dense_accs = [train("dense", 4, 4, s, args.epochs)[0] for s in seeds]
    print(f"{'-':8} {'dense':9} {_fmt(dense_accs):>22} {'1.0000':>21}")
    methods = [
        ("srste", "srste", {}),
        ("static", "static", {}),
        ("bame", "bame", {}),
        # Ablation: pure first-order keep utility (no curvature term), spec 3.2.
        ("bame c=0", "bame", {"curvature": 0.0}),
        # Ablation: SGD step on the old mask, then evolve (spec 4, switch step_order).
        ("bame s-f", "bame", {"step_order": "step_first"}),
    ]
    for n, m in ((2, 4), (1, 4), (1, 8), (1, 16)):
        for label, method, switches in methods:
            started = time.perf_counter()
            runs = [train(method, n, m, s, args.epochs, **switches) for s in seeds]
            fraction = statistics.mean(r[1].fraction for r in runs)
            extra = ""
            if method == "bame":
                ledger = runs[0][1]
                frozen, block_updates = runs[0][3]
                extra = (
                    f"  (seed 0: kept {ledger.kept_entries}, candidate "
                    f"{ledger.candidate_entries}, block changes {runs[0][2]}, "
                    f"frozen {frozen} of {block_updates} block-updates)"
                )
            print(
                f"{f'{n}:{m}':8} {label:9} {_fmt([r[0] for r in runs]):>22} "
                f"{fraction:>21.4f}{extra}  [{time.perf_counter() - started:.1f}s]"
            )
    return 0


def _fmt(values: list[float]) -> str:
    mean = 100 * statistics.mean(values)
    spread = 100 * statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {spread:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
