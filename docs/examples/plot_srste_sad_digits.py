"""
SR-STE vs STE: mask flips and SAD over training on digits
=========================================================

Zhou et al. (ICLR 2021) train N:M networks with the straight-through estimator (STE: the dense
weights get the gradient of the sparse ones, the mask is recomputed every step) and add a
decay on the pruned weights (SR-STE, ``lambda_W``) to stop masks from flipping back and forth.
The Sparse Architecture Divergence (SAD) counts those changes.

Here a softmax classifier ``[10, 64]`` on scikit-learn's digits is trained 2:4 with
:func:`nmref.srste_train` (plain SGD, full batch) at three decays; :func:`nmref.mask_flips`
counts changed entries per step and :func:`nmref.sparse_architecture_divergence` the drift from
the first mask (:doc:`../specs/srste`). A toy, not ImageNet: it shows the mechanism.
"""

import itertools

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import nmref

digits = load_digits()
x = digits.data / 16.0
y = np.eye(10)[digits.target]
train = np.arange(len(x)) % 3 != 0
test = ~train


def grad_fn(w):
    """Gradient of the mean cross-entropy at the (sparse) weights ``w``."""
    logits = x[train] @ w.T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return (p - y[train]).T @ x[train] / train.sum()


w0 = np.random.default_rng(0).standard_normal((10, 64)) * 0.01
steps = 150
runs = {}
for label, decay in (("STE", 0.0), ("SR-STE 2e-4", 2e-4), ("SR-STE 0.2", 0.2)):
    weight, masks = nmref.srste_train(w0, grad_fn, 2, 4, steps, lr=0.5, decay=decay)
    flips = [nmref.mask_flips(a, b) for a, b in itertools.pairwise(masks)]
    drift = nmref.sparse_architecture_divergence(masks, reference="first")
    sparse = weight * nmref.magnitude_mask(weight, 2, 4)
    accuracy = float(np.mean(np.argmax(x[test] @ sparse.T, axis=1) == digits.target[test]))
    runs[label] = (flips, drift, accuracy)
    print(
        f"{label:<12} total flips {sum(flips):5d}, drift from the first mask {drift[-1]:4d}, "
        f"2:4 test accuracy {100 * accuracy:.1f}%"
    )

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
for label, (flips, drift, accuracy) in runs.items():
    ax.plot(np.arange(1, len(flips) + 1), flips, label=f"{label} ({100 * accuracy:.1f}%)")
    bx.plot(np.arange(1, len(drift) + 1), drift, label=label)
ax.set_yscale("symlog")
ax.set_xlabel("step")
ax.set_ylabel("mask flips at this step (SAD to the previous mask)")
ax.legend(title="method (test acc.)")
bx.set_xlabel("step")
bx.set_ylabel("SAD to the first mask")
bx.legend()
fig.suptitle("2:4 softmax regression on digits: SR-STE's decay calms the mask")
fig.tight_layout()
