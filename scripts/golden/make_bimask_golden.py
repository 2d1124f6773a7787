"""Regenerate ``bimask_golden.npz`` (run from the repository root; review the diff!).

The file stores the **input arrays** of each case (never seeds) and the outputs
of :mod:`nmref.bimask` at the time they were pinned; ``tests/test_bimask.py``
checks that the code still produces them. Case ``ties_2of4`` is tie-heavy
(small integers); the worked example of ``specs/bimask.md`` is checked by hand
in ``tests/test_bimask.py::test_backward_mask_small_example_by_hand``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmref import bimask

# Package data: the tests read these files through importlib.resources.
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "nmref" / "testing" / "data" / "golden"


def main() -> None:
    rng = np.random.default_rng(20230607)
    cases = {
        "ties_2of4": (
            rng.integers(-2, 3, size=(8, 8)).astype(np.float32),
            (2, 4),
            "linear",
            rng.permutation(8),
        ),
        "gauss_1of4": (rng.standard_normal((12, 16)), (1, 4), "linear", rng.permutation(12)),
        "conv_channels_2of4": (
            rng.standard_normal((8, 4, 3, 3)).astype(np.float32),
            (2, 4),
            "channels",
            rng.permutation(8),
        ),
        "conv_flat_4of8": (
            rng.standard_normal((16, 8, 1, 2)),
            (4, 8),
            "flat",
            rng.permutation(16),
        ),
    }
    arrays = {}
    for name, (weight, (n, m), layout, permutation) in cases.items():
        forward = bimask.forward_mask(weight, n, m, layout=layout)
        backward = bimask.backward_mask(weight, forward, permutation, n, m, layout=layout)
        scores = [
            bimask.permutation_score(forward, permutation, n, m, criterion=c, layout=layout)
            for c in ("kept", "eligible")
        ]
        arrays |= {
            f"{name}/weight": weight,
            f"{name}/pattern": np.array([n, m]),
            f"{name}/layout": np.array(layout),
            f"{name}/permutation": permutation,
            f"{name}/forward_mask": forward,
            f"{name}/backward_mask": backward,
            f"{name}/scores": np.array(scores),
        }
    np.savez_compressed(GOLDEN_DIR / "bimask_golden.npz", **arrays)


if __name__ == "__main__":
    main()
