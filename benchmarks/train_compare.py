"""The seed papers' comparison in miniature: dense, STE, SR-STE, transposable, Bi-Mask and BAME.

Issue 34, item 4. Every method trains the same model from the same initialisation on the same
data order per seed, in a plain PyTorch loop (``torch.optim.SGD``, momentum 0.9, cosine LR
schedule), through ``nmsim.torch.sparsify``:

* data, offline and real: scikit-learn's digits (8x8 images, 1,197 train / 600 test) and
  MNIST-1D (the ``mnist1d`` package generates it: 4,000 train / 1,000 test signals of 40);
* models: an MLP (two hidden layers of 256) and a small CNN (two 3x3 convolutions, 32 and 64
  channels, then a hidden layer of 128); on digits the CNN reads the 8x8 image, on MNIST-1D a
  1x40 image with 1x5 kernels. The first layer of the CNN (one input channel) and every
  classifier stay dense, as in the papers; the other layers are sparse for every method;
* patterns 2:4, 1:4 and 1:16; seeds 0..S-1 (5 by default).

It reports, per dataset, model and pattern: test accuracy (mean +- std over seeds), the paired
difference of each method against SR-STE with its sign count (wins / ties / losses over seeds),
mask flips per epoch of the forward masks (the SAD of SR-STE, Zhou et al. 2021, as a fraction of
the sparse weights), the density of the input-gradient (backward) mask, the training FLOPs
(``nmsim.perf.flops.training_flops``, ideal accounting, relative to dense) and the CPU time.
Sweeps, on the MLPs: SR-STE's decay (2e-5, 2e-4 default, 2e-3) and BAME's schedule (update
interval and t_f); on every model: transposable masks refreshed every step (the paper's 40 is
~0.01% of an ImageNet run, ~one epoch here; at 1:16 it collapses, specs/training.md Appendix A).
The default and the best setting are reported separately (the best is chosen on the test set,
so it is an optimistic bound, labelled as such).

Results go to ``benchmarks/output/train_compare/`` (``runs.jsonl``, one line per run, reused
when present so the script resumes; ``summary.md``; ``summary.json``; ``accuracy.png``;
``curves.png``).

Run: ``python benchmarks/train_compare.py [--seeds 5] [--workers 2]`` (about an hour on 2
cores; ``--quick`` for a few minutes: 2 seeds, digits MLP only).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

OUTPUT = Path(__file__).resolve().parent / "output" / "train_compare"
METHODS = ("dense", "ste", "srste", "transposable", "bimask", "bame")
PATTERNS = ("2:4", "1:4", "1:16")
SRSTE_DECAYS = (2e-5, 2e-4, 2e-3)
# BAME's schedule (specs/bame.md §3.5): update interval T and the end of adaptation t_f as a
# fraction of the run; the paper's values are not given (research notes, V7).
BAME_SCHEDULES = ((25, 0.75), (100, 0.75), (25, 0.5))
EPOCHS = {"digits": 30, "mnist1d": 30}
BATCH = {"digits": 32, "mnist1d": 100}


def load(dataset: str):
    """Train and test arrays (float32 inputs, int64 labels), fixed split."""
    if dataset == "digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = (digits.data / 16.0).astype(np.float32)
        y = digits.target.astype(np.int64)
        order = np.random.default_rng(0).permutation(len(y))
        cut = 1197
        return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]
    from mnist1d.data import get_dataset_args, make_dataset

    data = make_dataset(get_dataset_args())  # the package's defaults, seed included
    return (
        data["x"].astype(np.float32),
        data["y"].astype(np.int64),
        data["x_test"].astype(np.float32),
        data["y_test"].astype(np.int64),
    )


def build(dataset: str, architecture: str):
    from torch import nn

    features = 64 if dataset == "digits" else 40
    if architecture == "mlp":
        return nn.Sequential(
            nn.Linear(features, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 10),
        )  # fmt: skip
    if dataset == "digits":
        shape, kernel, padding, flat = (1, 8, 8), 3, 1, 64 * 2 * 2
    else:
        shape, kernel, padding, flat = (1, 1, 40), (1, 5), (0, 2), 64 * 1 * 10
    pool = 2 if dataset == "digits" else (1, 2)
    return nn.Sequential(
        nn.Unflatten(1, shape),
        nn.Conv2d(1, 32, kernel, padding=padding), nn.ReLU(), nn.MaxPool2d(pool),
        nn.Conv2d(32, 64, kernel, padding=padding), nn.ReLU(), nn.MaxPool2d(pool),
        nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Linear(128, 10),
    )  # fmt: skip


def classifier_name(model) -> str:
    import torch

    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)][-1]


def run(task: dict) -> dict:
    """One training run; returns its record (accuracy per epoch, flips, densities, time)."""
    import torch

    import nmref
    import nmsim.torch as nt

    torch.set_num_threads(1)
    x_train, y_train, x_test, y_test = load(task["dataset"])
    torch.manual_seed(task["seed"])
    model = build(task["dataset"], task["architecture"])
    dense_layers = [classifier_name(model)]
    if task["architecture"] == "cnn":
        dense_layers.append("1")  # the first convolution: one input channel
    epochs, batch = EPOCHS[task["dataset"]], BATCH[task["dataset"]]
    steps_per_epoch = math.ceil(len(y_train) / batch)
    total_steps = epochs * steps_per_epoch
    replaced: tuple[str, ...] = ()
    if task["method"] != "dense":
        settings: dict = {"exclude": lambda name, _: name in dense_layers}
        if task["method"] in ("srste", "transposable", "bimask"):
            settings["decay"] = task.get("decay", 2e-4)
        if task["method"] == "ste":
            settings["decay"] = 0.0
        if task["method"] == "bimask":
            settings["seed"] = task["seed"]
        if "refresh" in task:
            settings["refresh_interval"] = task["refresh"]
        if task["method"] == "bame":
            n, m = nmref.parse_pattern(task["pattern"])
            interval, end = task.get("schedule", BAME_SCHEDULES[0])
            settings["bame_config"] = nmref.BameConfig(
                n, m, t_f=int(end * total_steps), update_interval=interval
            )
        result = nt.sparsify(model, task["method"], task["pattern"], **settings)
        replaced = result.replaced
        if task["method"] == "bame":  # the same entries as "gathered"; a dense GEMM's speed
            for _, layer in nt.sparse_layers(model):
                layer.bame_weight_gradient = "masked_dense"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, total_steps)
    order = np.random.default_rng(1000 + task["seed"])  # the same data order for every method
    xs, ys = torch.from_numpy(x_train), torch.from_numpy(y_train)
    xt, yt = torch.from_numpy(x_test), torch.from_numpy(y_test)
    curve, flips = [], []
    layers = [layer for _, layer in nt.sparse_layers(model)]
    previous = [layer.mask().clone() for layer in layers]
    start = time.process_time()
    for _ in range(epochs):
        permutation = torch.from_numpy(order.permutation(len(y_train)))
        model.train()
        for first in range(0, len(y_train), batch):
            chosen = permutation[first : first + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(xs[chosen]), ys[chosen]).backward()
            optimizer.step()
            scheduler.step()
        model.eval()
        with torch.no_grad():
            curve.append(float((model(xt).argmax(1) == yt).float().mean()))
        current = [layer.mask().clone() for layer in layers]
        if layers:
            changed = sum(int((a != b).sum()) for a, b in zip(previous, current, strict=True))
            flips.append(changed / sum(a.numel() for a in current))
        previous = current
    seconds = time.process_time() - start
    density = None
    if layers:
        kept = sum(int(layer.backward_mask().sum()) for layer in layers)
        density = kept / sum(layer.weight.numel() for layer in layers)
    return {
        **{k: v for k, v in task.items() if k != "schedule"},
        "schedule": list(task["schedule"]) if "schedule" in task else None,
        "sparse_layers": list(replaced),
        "accuracy": curve[-1],
        "curve": curve,
        "flips_per_epoch": statistics.fmean(flips) if flips else 0.0,
        "backward_density": density,
        "cpu_seconds": seconds,
        "steps": total_steps,
    }


def training_flops_ratio(dataset: str, architecture: str, method: str, pattern: str) -> float:
    """Training MACs of the method relative to dense (ideal accounting), sparse layers only
    at the method's densities and the dense layers (first conv, classifier) dense."""
    import torch

    from nmsim.perf.flops import training_flops
    from nmsim.perf.models import layers_from_torch

    model = build(dataset, architecture)
    sample = torch.zeros(1, 64 if dataset == "digits" else 40)
    table = layers_from_torch(model, sample)
    dense_names = {classifier_name(model)} | ({"1"} if architecture == "cnn" else set())
    sparse = [layer for layer in table if layer.name not in dense_names]
    dense = [layer for layer in table if layer.name in dense_names]
    flop_method = {"ste": "srste", "srste": "srste"}.get(method, method)
    total_dense = training_flops(table, "dense", pattern).training_macs
    if method == "dense":
        return 1.0
    macs = training_flops(sparse, flop_method, pattern).training_macs
    macs += training_flops(dense, "dense", pattern).training_macs if dense else 0.0
    return macs / total_dense


def tasks(args: argparse.Namespace) -> list[dict]:
    out = []
    datasets = ("digits",) if args.quick else ("digits", "mnist1d")
    architectures = ("mlp",) if args.quick else ("mlp", "cnn")
    for dataset in datasets:
        for architecture in architectures:
            for seed in range(args.seeds):
                base = {"dataset": dataset, "architecture": architecture, "seed": seed}
                out.append({**base, "method": "dense", "pattern": "dense"})
                for pattern in PATTERNS:
                    for method in METHODS[1:]:
                        out.append({**base, "method": method, "pattern": pattern})
                    if not args.quick:
                        # Transposable masks refreshed every step, on every model: at the
                        # paper's 40 (ImageNet, ~0.01% of a run; here ~one epoch) 1:16 collapses.
                        out.append({**base, "method": "transposable", "pattern": pattern,
                                    "refresh": 1, "sweep": True})  # fmt: skip
                    if args.quick or architecture != "mlp":
                        continue  # the sweeps run on the MLPs (the CNNs cost 3-5x more)
                    for decay in SRSTE_DECAYS:
                        if decay != 2e-4:
                            out.append({**base, "method": "srste", "pattern": pattern,
                                        "decay": decay, "sweep": True})  # fmt: skip
                    for schedule in BAME_SCHEDULES[1:]:
                        out.append({**base, "method": "bame", "pattern": pattern,
                                    "schedule": schedule, "sweep": True})  # fmt: skip
    return out


def key(record: dict) -> str:
    fields = ("dataset", "architecture", "seed", "method", "pattern", "decay", "schedule",
              "refresh")  # fmt: skip
    return json.dumps([record.get(f) if f != "schedule" or record.get(f) is None
                       else list(record[f]) for f in fields])  # fmt: skip


def setting(record: dict) -> str:
    if record["method"] == "srste" and record.get("decay") not in (None, 2e-4):
        return f"decay {record['decay']:g}"
    if record.get("refresh") is not None:
        return f"refresh {record['refresh']}"
    if record["method"] == "bame" and record.get("schedule") not in (None, list(BAME_SCHEDULES[0])):
        interval, end = record["schedule"]
        return f"T={interval}, t_f={end:g}"
    return "default"


def summarise(records: list[dict]) -> dict:
    """Per (dataset, architecture, pattern): per method (default setting), and the best sweep."""
    groups: dict = {}
    for r in records:
        groups.setdefault((r["dataset"], r["architecture"]), []).append(r)
    summary = {}
    for (dataset, architecture), rows in sorted(groups.items()):
        dense = [r["accuracy"] for r in rows if r["method"] == "dense"]
        for pattern in PATTERNS:
            cell = {"dense": _stats(dense)}
            srste = {r["seed"]: r["accuracy"] for r in rows if r["method"] == "srste"
                     and r["pattern"] == pattern and setting(r) == "default"}  # fmt: skip
            for method in METHODS[1:]:
                chosen = [r for r in rows if r["method"] == method and r["pattern"] == pattern]
                by_setting: dict = {}
                for r in chosen:
                    by_setting.setdefault(setting(r), []).append(r)
                if "default" not in by_setting:
                    continue
                default = by_setting["default"]
                entry = _method_entry(default, srste)
                entry["flops"] = training_flops_ratio(dataset, architecture, method, pattern)
                best_name = max(by_setting, key=lambda s: statistics.fmean(
                    r["accuracy"] for r in by_setting[s]))  # fmt: skip
                if len(by_setting) > 1:
                    entry["best_setting"] = best_name
                    entry["best"] = _stats([r["accuracy"] for r in by_setting[best_name]])
                cell[method] = entry
            summary[f"{dataset}/{architecture}/{pattern}"] = cell
    return summary


def _stats(values: list[float]) -> dict:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "n": len(values),
    }


def _method_entry(rows: list[dict], srste: dict[int, float]) -> dict:
    entry = _stats([r["accuracy"] for r in rows])
    paired = [r["accuracy"] - srste[r["seed"]] for r in rows if r["seed"] in srste]
    entry["vs_srste"] = statistics.fmean(paired) if paired else None
    entry["wins_ties_losses"] = [
        sum(d > 0 for d in paired),
        sum(d == 0 for d in paired),
        sum(d < 0 for d in paired),
    ]
    entry["flips_per_epoch"] = statistics.fmean(r["flips_per_epoch"] for r in rows)
    densities = [r["backward_density"] for r in rows if r["backward_density"] is not None]
    entry["backward_density"] = statistics.fmean(densities) if densities else None
    entry["cpu_seconds"] = statistics.fmean(r["cpu_seconds"] for r in rows)
    return entry


def markdown(summary: dict) -> str:
    lines = []
    for name, cell in summary.items():
        dense = cell["dense"]
        lines.append(f"\n### {name} (dense {100 * dense['mean']:.2f} ± {100 * dense['std']:.2f})\n")
        lines.append("| method | accuracy % | vs SR-STE (pts) | W/T/L | best setting (optimistic) "
                     "| flips/epoch | dX mask density | training FLOPs | CPU s |")  # fmt: skip
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for method in METHODS[1:]:
            if method not in cell:
                continue
            e = cell[method]
            best = f"{e['best_setting']}: {100 * e['best']['mean']:.2f}" if "best" in e else ""
            versus = (
                "" if method == "srste" or e["vs_srste"] is None else f"{100 * e['vs_srste']:+.2f}"
            )
            wtl = "" if method == "srste" else "/".join(map(str, e["wins_ties_losses"]))
            lines.append(
                f"| {method} | {100 * e['mean']:.2f} ± {100 * e['std']:.2f} | {versus} | {wtl} "
                f"| {best} | {e['flips_per_epoch']:.4f} | {e['backward_density']:.3f} "
                f"| {e['flops']:.2f}x | {e['cpu_seconds']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def plot(summary: dict, records: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    groups = sorted({n.rsplit("/", 1)[0] for n in names})
    figure, axes = plt.subplots(len(groups), 1, figsize=(9, 2.6 * len(groups)), squeeze=False)
    for axis, group in zip(axes[:, 0], groups, strict=True):
        for p, pattern in enumerate(PATTERNS):
            cell = summary.get(f"{group}/{pattern}", {})
            for k, method in enumerate(METHODS):
                entry = cell.get(method)
                if entry is None:
                    continue
                x = p * (len(METHODS) + 1) + k
                axis.bar(x, 100 * entry["mean"], yerr=100 * entry["std"], color=f"C{k}",
                         label=method if p == 0 else None)  # fmt: skip
        axis.set_xticks([p * (len(METHODS) + 1) + len(METHODS) / 2 for p in range(3)], PATTERNS)
        axis.set_ylabel("test accuracy %")
        axis.set_title(group)
        low = min(100 * e["mean"] for n in names if n.startswith(group) for e in
                  summary[n].values())  # fmt: skip
        axis.set_ylim(max(0, low - 10), 100)
    axes[0, 0].legend(ncol=6, fontsize=8, loc="lower left")
    figure.tight_layout()
    figure.savefig(OUTPUT / "accuracy.png", dpi=110)
    plt.close(figure)
    figure, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=True)
    for axis, pattern in zip(axes, PATTERNS, strict=True):
        for k, method in enumerate(METHODS):
            runs = [r for r in records if r["dataset"] == "mnist1d" and r["architecture"] ==
                    "mlp" and r["method"] == method and setting(r) == "default" and
                    (r["pattern"] == pattern or method == "dense")]  # fmt: skip
            if not runs:
                runs = [r for r in records if r["architecture"] == "mlp" and r["method"] == method
                        and setting(r) == "default" and (r["pattern"] == pattern or
                        method == "dense")]  # fmt: skip
            if runs:
                curve = np.mean([r["curve"] for r in runs], axis=0)
                axis.plot(np.arange(1, len(curve) + 1), 100 * curve, color=f"C{k}", label=method)
        axis.set_title(f"MLP, {pattern} (mean over seeds)")
        axis.set_xlabel("epoch")
    axes[0].set_ylabel("test accuracy %")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(OUTPUT / "curves.png", dpi=110)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="2 seeds, digits MLP, no sweeps")
    args = parser.parse_args()
    if args.quick:
        args.seeds = min(args.seeds, 2)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    log = OUTPUT / ("runs-quick.jsonl" if args.quick else "runs.jsonl")
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            done[key(record)] = record
    todo = [t for t in tasks(args) if key(t) not in done]
    print(f"{len(done)} runs reused, {len(todo)} to run on {args.workers} worker(s)", flush=True)
    started = time.time()
    with ProcessPoolExecutor(args.workers) as pool, open(log, "a") as handle:
        for index, record in enumerate(pool.map(run, todo)):
            done[key(record)] = record
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            if index % 10 == 9:
                print(f"  {index + 1}/{len(todo)} runs, {time.time() - started:.0f} s", flush=True)
    wanted = {key(t) for t in tasks(args)}
    records = [r for k, r in done.items() if k in wanted]
    summary = summarise(records)
    (OUTPUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = markdown(summary)
    (OUTPUT / "summary.md").write_text(text)
    plot(summary, records)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
