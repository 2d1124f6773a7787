"""
1-D N:M masks and ties
======================

A 2:4 mask keeps the 2 largest of every 4 consecutive scores along the GEMM reduction axis
(``in`` of a Linear weight ``[out, in]``). The scores here are rounded to one decimal so that
ties are common: among equal scores the **lower index wins**, ``-0.0`` equals ``0.0``, and
``+Inf`` is the largest score (:doc:`../specs/conventions`).
"""

import matplotlib.pyplot as plt
import numpy as np

import nmref

rng = np.random.default_rng(0)
scores = np.round(rng.standard_normal((6, 12)), 0)
scores[2, 4:8] = 1.0  # one group of four equal scores
scores[4, 8:12] = [0.0, -0.0, 0.0, -0.0]  # signed zeros are equal
mask = nmref.nm_mask(scores, 2, 4)
assert nmref.is_nm(mask, 2, 4)

# %%
# The heat map shows the scores; a black frame marks each kept entry and a red dot each group
# where a tie at the cut decided which entries are kept.

fig, ax = plt.subplots(figsize=(8, 4.2))
image = ax.imshow(scores, cmap="coolwarm", vmin=-2.5, vmax=2.5)
for (i, j), value in np.ndenumerate(scores):
    ax.text(
        j,
        i,
        f"{value:+.0f}" if value else ("-0" if np.signbit(value) else "0"),
        ha="center",
        va="center",
        fontsize=8,
    )
    if mask[i, j]:
        ax.add_patch(plt.Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, lw=2))
for i in range(scores.shape[0]):
    for g in range(scores.shape[1] // 4):
        group = scores[i, 4 * g : 4 * g + 4]
        ranked = np.sort(group)[::-1]
        if ranked[1] == ranked[2]:
            ax.plot(4 * g + 1.5, i - 0.5, "o", color="red", markersize=5)
for x in (3.5, 7.5):
    ax.axvline(x, color="k", lw=1)
ax.set_xticks(range(12))
ax.set_xlabel("input (reduction) index: groups of 4")
ax.set_ylabel("output row")
ax.set_title("2:4 mask (framed = kept); red dot: a tie at the cut, lower index won")
fig.colorbar(image, ax=ax, shrink=0.7, label="score")
fig.tight_layout()

# %%
# ``nmref explain nm_mask`` prints the same decisions in words, group by group:

from nmref.explain import explain_nm_mask, render_text  # noqa: E402

print(render_text(explain_nm_mask(scores[2:3], 2, 4)))
