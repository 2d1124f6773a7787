"""
Training a sparse CNN end to end: every method in a plain PyTorch loop
=======================================================================

A small CNN on scikit-learn's digits, trained 2:4-sparse by each method of
:mod:`nmsim.torch` — STE, SR-STE (Zhou et al. 2021), transposable masks (Hubara et al. 2021),
Bi-Mask (Zhang et al. 2023) and the BAME reconstruction (``specs/bame.md``) — with nothing but
``torch.optim.SGD``, a cosine learning-rate schedule and bfloat16 autocast. The methods own their
schedules (``specs/training.md``): the transposable mask is recomputed every 40 steps by nmref's
exact solver, Bi-Mask searches its row permutation every 100 steps, BAME evolves its mask through
the optimizer's step. Then: a checkpoint resumed bit for bit, and the export of the trained
model (plain layers, a 2:4 checkpoint, weights for ``torch.sparse.to_sparse_semi_structured``,
the report's estimate of the inference speed-up).
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from sklearn.datasets import load_digits

import nmsim.torch as nt
from nmsim.torch.export import masked_model, save_sparse_checkpoint, semi_structured_weights

torch.set_num_threads(1)
digits = load_digits()
x = torch.tensor(digits.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
y = torch.tensor(digits.target)
order = np.random.default_rng(0).permutation(len(y))
train, test = torch.from_numpy(order[:1197]), torch.from_numpy(order[1197:])


def cnn() -> torch.nn.Sequential:
    torch.manual_seed(0)  # the same initial weights for every method
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )  # fmt: skip


EPOCHS, BATCH = 8, 32
STEPS = EPOCHS * -(-len(train) // BATCH)


def train_epochs(model, optimizer, scheduler, epochs, first_epoch=0):
    """The standard loop, under bfloat16 autocast; test accuracy after each epoch."""
    accuracies = []
    for epoch in range(first_epoch, first_epoch + epochs):
        shuffled = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(epoch))]
        model.train()
        for start in range(0, len(shuffled), BATCH):
            batch = shuffled[start : start + BATCH]
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            scheduler.step()
        model.eval()
        with torch.no_grad():
            accuracies.append(float((model(x[test]).argmax(1) == y[test]).float().mean()))
    return accuracies


def setup(method):
    model = cnn()
    if method != "dense":
        # The first convolution (one input channel) and the classifier stay dense.
        result = nt.sparsify(model, method, "2:4", exclude=r"^(0|9)$")
        print(f"{method:>12}: sparse {result.replaced}, skipped {result.skipped}")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, STEPS)
    return model, optimizer, scheduler


# %%
# Every method, the same loop
# ---------------------------
# ``sparsify`` swaps the layers in place; the optimizer built afterwards (or before: the
# parameters are shared) steps their masks too. Nothing else changes in the loop.

curves = {}
for method in ("dense", "ste", "srste", "transposable", "bimask", "bame"):
    model, optimizer, scheduler = setup(method)
    curves[method] = train_epochs(model, optimizer, scheduler, EPOCHS)
    print(f"{method:>12}: test accuracy {100 * curves[method][-1]:.2f}%")

figure, axis = plt.subplots(figsize=(6, 3.5))
for method, curve in curves.items():
    axis.plot(range(1, EPOCHS + 1), [100 * a for a in curve], marker="o", label=method)
axis.set_xlabel("epoch")
axis.set_ylabel("test accuracy (%)")
axis.set_title("Digits CNN, 2:4, bf16 autocast, one seed")
axis.legend(fontsize=8)
figure.tight_layout()

# %%
# A checkpoint resumes bit for bit
# --------------------------------
# The masks, the step counter, Bi-Mask's generator and BAME's counters are in
# ``state_dict()``: train half, save, resume in a fresh model and optimizer, and the
# second half ends exactly where the uninterrupted run does — here for transposable masks,
# saved between two refreshes of the mask.

model, optimizer, scheduler = setup("transposable")
train_epochs(model, optimizer, scheduler, EPOCHS // 2)
folder = Path(tempfile.mkdtemp(prefix="nmsim-tutorial-"))
torch.save(
    {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
     "scheduler": scheduler.state_dict()},
    folder / "half.pt",
)  # fmt: skip
train_epochs(model, optimizer, scheduler, EPOCHS // 2, EPOCHS // 2)  # the uninterrupted run

resumed, resumed_optimizer, resumed_scheduler = setup("transposable")
checkpoint = torch.load(folder / "half.pt", weights_only=True)
resumed.load_state_dict(checkpoint["model"])
resumed_optimizer.load_state_dict(checkpoint["optimizer"])
resumed_scheduler.load_state_dict(checkpoint["scheduler"])
train_epochs(resumed, resumed_optimizer, resumed_scheduler, EPOCHS // 2, EPOCHS // 2)
same = all(
    torch.equal(a, b)
    for a, b in zip(model.state_dict().values(), resumed.state_dict().values(), strict=True)
)
print(f"resumed run equals the uninterrupted one, bit for bit: {same}")

# %%
# Export
# ------
# ``masked_model`` gives plain ``nn.Linear``/``nn.Conv2d`` layers with the pruned weights set to
# zero (the same outputs); ``semi_structured_weights`` gives the 2:4 linear weights in float16,
# checked for the layout ``torch.sparse.to_sparse_semi_structured`` takes (it needs a GPU to
# compress them); ``save_sparse_checkpoint`` writes a compressed-tensors checkpoint and estimates
# the model's speed-up with the calibrated GEMM model of ``nmsim report``.

plain = masked_model(resumed)
with torch.no_grad():
    print("plain model, same outputs:", torch.equal(plain(x[test]), resumed(x[test])))
for name, weight in semi_structured_weights(resumed).items():
    kept = (weight != 0).reshape(weight.shape[0], -1, 4).sum(-1)
    print(
        f"layer {name}: {tuple(weight.shape)} {weight.dtype}, at most {int(kept.max())} of 4 kept"
    )
exported = save_sparse_checkpoint(resumed, folder / "model.safetensors", format="cutlass")
estimate = exported.forward_speedup
print(
    f"wrote {exported.path.name} ({exported.format}); estimated forward speed-up on "
    f"h100-sxm, fp16, 4096 tokens: {estimate['speedup']:.2f}x "
    f"[{estimate['low']:.2f}, {estimate['high']:.2f}], {estimate['verdict']}"
)
