"""Train the small MLP that ships as ``nmsim report``'s default checkpoint.

A 64 -> 256 -> 128 -> 10 ReLU MLP on scikit-learn's bundled ``load_digits``
(8x8 handwritten digits, 1797 images; no download), trained with plain NumPy
minibatch SGD with momentum. Every hidden width and every reduction length is a
multiple of 16, so every N:M pattern with M in {2, 4, 8, 16} applies to every
weight along its reduction axis; the 10-way head has 10 rows, so it shows how
the report treats a weight whose rows do not fill transposable M x M tiles.

Usage (from the repository root; it is not run at install)::

    python scripts/train_digits.py [--out nmsim/data/digits_mlp.safetensors]

The written file stores float32 weights ``fc{1,2,3}.weight`` ([out, in], PyTorch
order) and ``fc{1,2,3}.bias`` plus string metadata: test accuracy, seed, split,
hyperparameters and this script's path.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

SEED = 20240917
HIDDEN = (256, 128)
EPOCHS = 60
BATCH = 64
LEARNING_RATE = 0.05
MOMENTUM = 0.9
TEST_FRACTION = 0.25


def _init(rng: np.random.Generator, fan_out: int, fan_in: int) -> np.ndarray:
    # He initialisation for ReLU layers.
    return rng.standard_normal((fan_out, fan_in)) * np.sqrt(2.0 / fan_in)


def _forward(params: dict[str, np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    activations = [x]
    layers = len(params) // 2
    for index in range(1, layers + 1):
        z = activations[-1] @ params[f"fc{index}.weight"].T + params[f"fc{index}.bias"]
        activations.append(np.maximum(z, 0.0) if index < layers else z)
    return activations


def accuracy(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of ``x`` whose arg-max logit equals the label."""
    return float(np.mean(np.argmax(_forward(params, x)[-1], axis=1) == y))


def load_data() -> tuple[np.ndarray, np.ndarray]:
    """``load_digits`` features scaled to [0, 1] and their labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data / 16.0, digits.target


def split(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(test, fit)`` indices: the first draw of ``rng`` (a permutation) splits the data."""
    order = rng.permutation(count)
    test_size = round(TEST_FRACTION * count)
    return order[:test_size], order[test_size:]


def train(seed: int = SEED) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Train the MLP; returns float64 parameters and the metadata to store."""
    import sklearn

    x, y = load_data()
    rng = np.random.default_rng(seed)
    test, fit = split(rng, len(x))
    sizes = (x.shape[1], *HIDDEN, 10)
    params: dict[str, np.ndarray] = {}
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), start=1):
        params[f"fc{index}.weight"] = _init(rng, fan_out, fan_in)
        params[f"fc{index}.bias"] = np.zeros(fan_out)
    velocity = {name: np.zeros_like(value) for name, value in params.items()}
    layers = len(sizes) - 1
    for _epoch in range(EPOCHS):
        shuffled = rng.permutation(fit)
        for start in range(0, len(shuffled), BATCH):
            batch = shuffled[start : start + BATCH]
            activations = _forward(params, x[batch])
            logits = activations[-1]
            probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
            probabilities /= probabilities.sum(axis=1, keepdims=True)
            grad = probabilities
            grad[np.arange(len(batch)), y[batch]] -= 1.0
            grad /= len(batch)
            for index in range(layers, 0, -1):
                weight = params[f"fc{index}.weight"]
                grads = {
                    f"fc{index}.weight": grad.T @ activations[index - 1],
                    f"fc{index}.bias": grad.sum(axis=0),
                }
                if index > 1:
                    grad = (grad @ weight) * (activations[index - 1] > 0)
                for name, value in grads.items():
                    velocity[name] = MOMENTUM * velocity[name] - LEARNING_RATE * value
                    params[name] += velocity[name]
    float32 = {name: value.astype(np.float32) for name, value in params.items()}
    metadata = {
        "model": "MLP " + " -> ".join(str(s) for s in sizes) + " (ReLU), PyTorch [out, in] weights",
        "dataset": "sklearn.datasets.load_digits (1797 8x8 images, features / 16)",
        "test_accuracy": f"{accuracy(float32, x[test], y[test]):.4f}",
        "train_accuracy": f"{accuracy(float32, x[fit], y[fit]):.4f}",
        "test_fraction": str(TEST_FRACTION),
        "seed": str(seed),
        "hyperparameters": json.dumps(
            {"epochs": EPOCHS, "batch": BATCH, "lr": LEARNING_RATE, "momentum": MOMENTUM}
        ),
        "script": "scripts/train_digits.py",
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
    }
    return float32, metadata


def main() -> None:
    """Train and write the checkpoint."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1] / "nmsim" / "data" / "digits_mlp.safetensors"
    parser.add_argument("--out", type=Path, default=default)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    from safetensors.numpy import save_file

    params, metadata = train(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(params, str(args.out), metadata=metadata)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    print(json.dumps(metadata, indent=1))


if __name__ == "__main__":
    main()
