"""Regenerate ``srste_golden.npz`` (run from the repository root; review the diff!).

Stores the **inputs** (initial weights, regression target) and the outputs of
``nmref.srste.srste_train`` at the time they were pinned: three steps of SR-STE
with momentum and weight decay on the elementwise loss ``0.5 * ||W~ - target||^2``
(gradient ``W~ - target``). Elementwise arithmetic only, so the pinned bits do
not depend on a BLAS; ``tests/test_srste.py::test_golden_trajectory`` checks them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmref import srste

# Package data: the tests read these files through importlib.resources.
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "nmref" / "testing" / "data" / "golden"

SETTINGS = {"lr": 0.1, "decay": 0.05, "momentum": 0.9, "weight_decay": 5e-5}


def main() -> None:
    rng = np.random.default_rng(20210204)
    arrays = {}
    for dtype in (np.float32, np.float64):
        weight = rng.standard_normal((4, 8)).astype(dtype)
        target = rng.standard_normal((4, 8)).astype(dtype)
        final, masks = srste.srste_train(
            weight, lambda sparse, target=target: sparse - target, 2, 4, 3, **SETTINGS
        )
        name = np.dtype(dtype).name
        arrays |= {
            f"{name}/weight": weight,
            f"{name}/target": target,
            f"{name}/final": final,
            f"{name}/masks": np.stack(masks),
        }
    np.savez_compressed(GOLDEN_DIR / "srste_golden.npz", **arrays)


if __name__ == "__main__":
    main()
