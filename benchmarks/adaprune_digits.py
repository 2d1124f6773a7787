"""AdaPrune on the packaged digits MLP: unstructured 50% -> N:M, held-out accuracy (offline, CPU).

The model is ``nmsim/data/digits_mlp.safetensors`` (64 -> 256 -> 128 -> 10, ReLU), trained by
``scripts/train_digits.py``; its test split is reproduced here with that script's own
``load_data``/``split`` and seed, and the dense test accuracy is checked against the
accuracy stored in the file's metadata.

1. ``unstructured 50%``: every Linear weight keeps its 50% largest ``|w|`` (per layer,
   ties to the lower flat index). This is the model that is converted (the source).
2. Conversions of the source to 2:4, 4:8 and 1:4, with the masks ``nm`` (1-D, the
   paper), ``transposable`` (exactly N per row and column of every M x M tile) and
   ``transposable_at_most``, by
   ``mask`` (masking only), ``absorb`` (the pruned mass absorbed, no fitting),
   ``adam`` (the paper's AdaPrune: absorb, then Adam 1000 x 50, lr 1e-3 / 1e-2) and
   ``exact`` (absorb as the start, then the exact least-squares optimum per row) and
   ``exact ridge`` (the same with the relative ridge 1e-2 of ``reconstruct_exact``).
   Every layer is converted (fc1, fc2, fc3; below, the paper's keep-first-last policy is
   run too). fc3 has 10 rows, which do not fill M x M tiles, so it gets the 1-D mask in the
   transposable rows. Biases are re-fitted with the weights (the paper trains them).
3. Calibration: the first ``--calibration`` images of the training split (200 by default,
   the authors' one batch of 200 ImageNet images). Each layer's inputs are the source
   model's activations on them, computed once (the paper caches them from the model being
   converted). The per-layer relative output errors are measured on the held-out test
   images' activations of the source model.
4. A calibration-size sweep (2:4, 1-D mask) shows where the least-squares problems are
   under-determined (fewer samples than kept weights per row) and the minimum-norm update
   decides.

Run: ``PYTHONPATH=. python benchmarks/adaprune_digits.py [--calibration 200]`` (about a
minute on one core; the first transposable masks compile Numba kernels).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

from nmref.adaprune import (
    AdamSettings,
    adaprune_layer,
    choose_n,
    relative_output_error,
    starting_mask,
)

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "nmsim" / "data" / "digits_mlp.safetensors"
LAYERS = ("fc1", "fc2", "fc3")
PATTERNS = ((2, 4), (4, 8), (1, 4))
MASKS = ("nm", "transposable", "transposable_at_most")
METHODS = ("mask", "absorb", "adam", "exact", "exact ridge")
#: The relative ridge of the ``exact ridge`` rows (``reconstruct_exact(ridge=...)``).
RIDGE = 1e-2


def _training_script():
    """``scripts/train_digits.py`` as a module: its data, split and seed are the truth."""
    spec = importlib.util.spec_from_file_location(
        "train_digits", ROOT / "scripts" / "train_digits.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_model_and_split():
    """Float64 parameters, the stored test accuracy, and ``(x_fit, y_fit, x_test, y_test)``."""
    script = _training_script()
    params = {name: value.astype(np.float64) for name, value in load_file(CHECKPOINT).items()}
    with safe_open(CHECKPOINT, "np") as handle:
        metadata = handle.metadata()
    x, y = script.load_data()
    test, fit = script.split(np.random.default_rng(int(metadata["seed"])), len(x))
    return params, metadata, (x[fit], y[fit], x[test], y[test])


def forward(params, x):
    """Every layer's input (``inputs[i]`` feeds ``LAYERS[i]``) and the logits."""
    inputs = []
    activation = x
    for index, name in enumerate(LAYERS):
        inputs.append(activation)
        z = activation @ params[f"{name}.weight"].T + params[f"{name}.bias"]
        activation = np.maximum(z, 0.0) if index < len(LAYERS) - 1 else z
    return inputs, activation


def accuracy(params, x, y) -> float:
    return float(np.mean(np.argmax(forward(params, x)[1], axis=1) == y))


def unstructured(params, fraction: float = 0.5):
    """Each layer keeps its ``1 - fraction`` largest ``|w|`` (ties: lower flat index pruned)."""
    pruned = dict(params)
    for name in LAYERS:
        weight = params[f"{name}.weight"]
        order = np.argsort(np.abs(weight).ravel(), kind="stable")
        flat = weight.ravel().copy()
        flat[order[: int(fraction * flat.size)]] = 0.0
        pruned[f"{name}.weight"] = flat.reshape(weight.shape)
    return pruned


_MASKS: dict[tuple, np.ndarray] = {}


def layer_mask(weight, name, n, m, mask):
    """The layer's mask, solved once per (layer, pattern, method); fc3 (10 rows) gets 1-D."""
    method = mask if weight.shape[0] % m == 0 else "nm"
    key = (name, n, m, method)
    if key not in _MASKS:
        _MASKS[key] = starting_mask(weight, n, m, method=method)
    return _MASKS[key]


def convert(source, calibration_inputs, test_inputs, n, m, mask, method, layers, settings):
    """The source model with ``layers`` converted; per-layer held-out errors and Adam gaps."""
    converted = dict(source)
    errors, gaps = {}, {}
    reconstruction = {"mask": "none", "absorb": "none", "exact ridge": "exact"}.get(method, method)
    for index, name in enumerate(LAYERS):
        if name not in layers:
            continue
        weight, bias = source[f"{name}.weight"], source[f"{name}.bias"]
        result = adaprune_layer(
            weight,
            calibration_inputs[index],
            m,
            n=n,
            bias=bias,
            mask=layer_mask(weight, name, n, m, mask),
            absorb=method != "mask",
            reconstruction=reconstruction,
            ridge=RIDGE if method == "exact ridge" else 0.0,
            adam=settings,
            rng=index,
        )
        converted[f"{name}.weight"] = result.weight
        converted[f"{name}.bias"] = result.bias
        errors[name] = relative_output_error(
            weight, result.weight, test_inputs[index], bias=bias, new_bias=result.bias
        )
        if result.gap is not None:
            gaps[name] = result.gap / max(result.exact_objective, 1e-300)
    return converted, errors, gaps


def _row(label, acc, errors, gaps=None):
    cells = [f"{errors[name]:.3f}" if name in errors else "dense" for name in LAYERS]
    gap = ""
    if gaps:
        gap = " / ".join(f"{100 * gaps[name]:.0f}%" for name in LAYERS if name in gaps)
    return f"| {label} | {100 * acc:.2f} | " + " | ".join(cells) + f" | {gap} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=200, help="calibration images")
    parser.add_argument("--iterations", type=int, default=1000, help="Adam iterations")
    args = parser.parse_args()
    begin = time.perf_counter()
    settings = AdamSettings(iterations=args.iterations)

    params, metadata, (x_fit, _, x_test, y_test) = load_model_and_split()
    dense = accuracy(params, x_test, y_test)
    stored = float(metadata["test_accuracy"])
    assert f"{dense:.4f}" == metadata["test_accuracy"], (dense, stored)
    source = unstructured(params)
    source_accuracy = accuracy(source, x_test, y_test)
    calibration_inputs, _ = forward(source, x_fit[: args.calibration])
    test_inputs, _ = forward(source, x_test)

    print(
        f"digits MLP, {len(x_test)} test images; calibration: first {args.calibration} "
        f"of {len(x_fit)} training images\n"
    )
    for m in (4, 8):
        picks = ", ".join(
            f"{name} {choose_n(source[f'{name}.weight'], m).n}:{m}" for name in LAYERS
        )
        print(f"choose_n of the 50% model at m={m} (confidence 0.95): {picks}")
    print()
    header = (
        "| model | test acc. % | rel. err fc1 | fc2 | fc3 | Adam gap to exact "
        "(calibration) |\n|---|---|---|---|---|---|"
    )
    print(header)
    print(_row("dense", dense, {}))
    print(_row("unstructured 50% (source)", source_accuracy, {}))
    for n, m in PATTERNS:
        for mask in MASKS:
            for method in METHODS:
                model, errors, gaps = convert(
                    source, calibration_inputs, test_inputs, n, m, mask, method, LAYERS, settings
                )
                label = f"{n}:{m} {mask} {method}"
                print(_row(label, accuracy(model, x_test, y_test), errors, gaps), flush=True)

    print("\nThe paper's layer policy (first and last layer dense: fc2 only), 1-D masks:\n")
    print(header)
    for n, m in PATTERNS:
        for method in METHODS:
            model, errors, gaps = convert(
                source, calibration_inputs, test_inputs, n, m, "nm", method, ("fc2",), settings
            )
            print(_row(f"{n}:{m} nm {method}", accuracy(model, x_test, y_test), errors, gaps))

    print("\nCalibration size, 2:4 nm, every layer (kept per row: fc1 32, fc2 128, fc3 64):\n")
    sweep = ("adam", "exact", "exact ridge")
    print(
        "| images | "
        + " | ".join(f"{method}: acc. %, rel. err fc1 / fc2 / fc3" for method in sweep)
        + " |\n|---|---|---|---|"
    )
    for count in (16, 32, 64, 128, 200, 400, len(x_fit)):
        inputs, _ = forward(source, x_fit[:count])
        cells = []
        for method in sweep:
            model, errors, _ = convert(
                source, inputs, test_inputs, 2, 4, "nm", method, LAYERS, settings
            )
            figures = " / ".join(f"{errors[name]:.3f}" for name in LAYERS)
            cells.append(f"{100 * accuracy(model, x_test, y_test):.2f}, {figures}")
        print(f"| {count} | " + " | ".join(cells) + " |", flush=True)
    print(f"\ntotal {time.perf_counter() - begin:.1f} s")


if __name__ == "__main__":
    main()
