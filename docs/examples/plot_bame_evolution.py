"""
BAME-style block evolution over training steps
==============================================

Block-aware mask evolution (in the style of BAME, Yang et al., ICML 2025; ``nmref.bame`` is a
fully specified reconstruction, :doc:`../specs/bame`): every ``T`` steps inside the adaptation
window, candidate blocks (groups of ``m``) are scored by the expected loss reduction of
swapping their pattern, the best ``k(t)`` change, and counters of how often each block changed
or reverted steer later choices. Between updates only the kept weights train.

A 2:4 softmax classifier ``[10, 64]`` on scikit-learn's digits, full-batch SGD.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import nmref

digits = load_digits()
x = digits.data / 16.0
y = np.eye(10)[digits.target]
train = np.arange(len(x)) % 3 != 0
test = ~train


def gradient(w):
    logits = x[train] @ w.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return (p - y[train]).T @ x[train] / train.sum()


config = nmref.BameConfig(2, 4, t_i=0, t_f=300, update_interval=20, adapt_fraction=0.3)
weight = np.random.default_rng(0).standard_normal((10, 64)) * 0.1
mask = nmref.magnitude_mask(weight, 2, 4)
weight = weight * mask
state = nmref.BameState.initial(mask, 4)
lr = 0.5
history = []
for step in range(400):
    grad = gradient(weight)
    if nmref.bame.is_update_step(step, config):
        evolution = nmref.evolve_mask(weight, mask, grad, state, step, config, learning_rate=lr)
        history.append(
            (step, int(evolution.candidates.sum()), evolution.budget, int(evolution.selected.sum()))
        )
        mask, weight, state = evolution.mask, evolution.weight, evolution.state
        grad = gradient(weight)
    weight = (weight - lr * grad) * mask  # pruned weights stay at zero
    assert nmref.is_nm(mask, 2, 4)

accuracy = np.mean(np.argmax(x[test] @ weight.T, axis=1) == digits.target[test])
print(f"2:4 test accuracy {100 * accuracy:.1f}% after 400 steps; {len(history)} updates")
for step, candidates, budget, changed in history:
    print(
        f"step {step:3d}: {candidates:3d} candidate blocks, budget k(t) = {budget:3d}, "
        f"{changed:3d} changed"
    )

# %%
# Left: candidates, budget and changed blocks at each update (the budget shrinks on the
# cosine schedule). Right: how often each block (row x group) changed over training.

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 1.4]})
steps, candidates, budgets, changed = map(np.array, zip(*history, strict=True))
ax.plot(steps, candidates, "o-", label="candidate blocks")
ax.plot(steps, budgets, "s--", label="budget k(t)")
ax.bar(steps, changed, width=8, color="C3", alpha=0.6, label="changed")
ax.set_xlabel("training step")
ax.set_ylabel("blocks")
ax.legend()
image = bx.imshow(state.changes, cmap="viridis", aspect="auto")
bx.set_xlabel("group (4 inputs)")
bx.set_ylabel("output row")
bx.set_title("pattern changes per block")
fig.colorbar(image, ax=bx, ticks=range(int(state.changes.max()) + 1), label="changes")
fig.tight_layout()
