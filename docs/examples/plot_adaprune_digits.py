"""
AdaPrune on digits: unstructured 50% to N:M, by Adam and by the exact optimum
=============================================================================

Hubara et al. (NeurIPS 2021) convert a model pruned without structure to N:M "with little to
no training": per layer, mask, absorb the pruned mass into the kept weights, then fit the
kept weights so that the layer's outputs on a small calibration set stay those of the
unstructured layer, with Adam (:doc:`../specs/adaprune`). With the mask fixed that fit is a
least-squares problem per output row, which :func:`nmref.adaprune.reconstruct_exact` solves
exactly; :func:`nmref.adaprune.reconstruct_adam` runs the paper's Adam and reports its gap to
that optimum.

The model is the digits MLP that ships with ``nmsim`` (64 -> 256 -> 128 -> 10), pruned to 50%
per layer by magnitude, then every layer is converted with the 1-D mask. Calibration: 200
training images (the authors' count); accuracy on the 449 held-out test images of the split
``scripts/train_digits.py`` made. ``benchmarks/adaprune_digits.py`` adds the transposable
masks and the paper's keep-first-and-last policy (spec Appendix A).
"""

from importlib import resources

import matplotlib.pyplot as plt
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
from sklearn.datasets import load_digits

from nmref.adaprune import adaprune_layer, relative_output_error

path = str(resources.files("nmsim") / "data" / "digits_mlp.safetensors")
params = {name: value.astype(np.float64) for name, value in load_file(path).items()}
with safe_open(path, "np") as handle:
    metadata = handle.metadata()

# The split of scripts/train_digits.py: the first draw of its generator is a permutation,
# whose first quarter is the test set.
digits = load_digits()
x, y = digits.data / 16.0, digits.target
order = np.random.default_rng(int(metadata["seed"])).permutation(len(x))
test, fit = order[: round(0.25 * len(x))], order[round(0.25 * len(x)) :]
names = ("fc1", "fc2", "fc3")


def forward(model, inputs):
    """Every layer's input, and the logits."""
    layer_inputs = []
    for index, name in enumerate(names):
        layer_inputs.append(inputs)
        z = inputs @ model[f"{name}.weight"].T + model[f"{name}.bias"]
        inputs = np.maximum(z, 0.0) if index < 2 else z
    return layer_inputs, inputs


def accuracy(model):
    return float(np.mean(np.argmax(forward(model, x[test])[1], axis=1) == y[test]))


assert f"{accuracy(params):.4f}" == metadata["test_accuracy"]  # the split is reproduced

# Unstructured 50% per layer, the model to convert (the source): the half of smallest |w|
# is zeroed, ties to the lower flat index.
source = dict(params)
for name in names:
    weight = params[f"{name}.weight"].ravel().copy()
    weight[np.argsort(np.abs(weight), kind="stable")[: weight.size // 2]] = 0.0
    source[f"{name}.weight"] = weight.reshape(params[f"{name}.weight"].shape)
calibration, _ = forward(source, x[fit[:200]])
held_out, _ = forward(source, x[test])

methods = {
    "mask only": {"absorb": False, "reconstruction": "none"},
    "absorb": {"reconstruction": "none"},
    "AdaPrune (Adam)": {"reconstruction": "adam"},
    "exact": {"reconstruction": "exact"},
    "exact, ridge 1e-2": {"reconstruction": "exact", "ridge": 1e-2},
}


def convert(n, m, options, inputs=calibration):
    model, errors, gaps = dict(source), [], []
    for index, name in enumerate(names):
        weight, bias = source[f"{name}.weight"], source[f"{name}.bias"]
        result = adaprune_layer(weight, inputs[index], m, n=n, bias=bias, rng=index, **options)
        model[f"{name}.weight"], model[f"{name}.bias"] = result.weight, result.bias
        errors.append(
            relative_output_error(
                weight, result.weight, held_out[index], bias=bias, new_bias=result.bias
            )
        )
        if result.gap is not None:
            gaps.append(result.gap / result.exact_objective)
    return accuracy(model), errors, gaps


print(f"dense {100 * accuracy(params):.2f}%, unstructured 50% {100 * accuracy(source):.2f}%")
patterns = ((2, 4), (4, 8), (1, 4))
table = {}
for n, m in patterns:
    for label, options in methods.items():
        acc, errors, gaps = convert(n, m, options)
        table[(n, m, label)] = acc
        gap = "" if not gaps else "  Adam gap " + " / ".join(f"{100 * g:.0f}%" for g in gaps)
        print(
            f"{n}:{m} {label:<18} test {100 * acc:5.2f}%  held-out rel. err "
            + " / ".join(f"{e:.3f}" for e in errors)
            + gap
        )

# How many calibration images: the exact optimum of fc2 (128 kept weights per row) is
# under-determined below 128 images and badly conditioned near it; a small ridge steadies it.
sizes = (16, 32, 64, 128, 200, 400, len(fit))
sweep = {}
for label in ("exact", "exact, ridge 1e-2"):
    sweep[label] = [
        convert(2, 4, methods[label], forward(source, x[fit[:count]])[0])[1][1] for count in sizes
    ]

fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8))
width = 0.16
for offset, label in enumerate(methods):
    values = [100 * table[(n, m, label)] for n, m in patterns]
    ax.bar(np.arange(3) + (offset - 2) * width, values, width, label=label)
ax.axhline(100 * accuracy(source), color="k", lw=1, ls="--", label="unstructured 50%")
ax.set_xticks(np.arange(3), [f"{n}:{m}" for n, m in patterns])
ax.set_ylim(70, 100)
ax.set_ylabel("held-out test accuracy (%)")
ax.set_title("every layer converted, 1-D masks, 200 calibration images")
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
for label, values in sweep.items():
    bx.plot(sizes, values, marker="o", label=label)
bx.axvline(128, color="grey", lw=1, ls=":")
bx.text(135, max(sweep["exact"]) * 0.6, "128 kept weights per row", color="grey", fontsize=8)
bx.set_xscale("log")
bx.set_xlabel("calibration images")
bx.set_ylabel("fc2 held-out relative output error (2:4)")
bx.set_title("the exact optimum needs enough calibration data")
bx.legend()
fig.tight_layout()
