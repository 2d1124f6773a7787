"""Regenerate nmref/testing/data/golden/transposable.json (run from the repository root).

The inputs are stored literally (never seeds). The expected masks come from
nmref at the time of writing and were checked when written: the exact masks of
every tile with m <= 4 against an itertools brute force of the canonical rule,
and every exact objective against networkx (see tests/test_transposable.py).
Regenerate only when the spec changes, and review the diff.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from nmref.transposable import transposable_mask, transposable_optimum

# Package data: the tests read these files through importlib.resources.
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "nmref" / "testing" / "data" / "golden"


def cases():
    rng = np.random.default_rng(20211206)
    yield "2:4 small integers (tie-heavy)", rng.integers(0, 3, (4, 8)).astype(np.int32), 2, 4
    yield "2:4 float32 N(0,1) signed", rng.standard_normal((8, 8)).astype(np.float32), 2, 4
    yield "1:4 float16 magnitudes", np.abs(rng.standard_normal((4, 8))).astype(np.float16), 1, 4
    yield "3:4 all equal", np.full((4, 4), 0.25, dtype=np.float32), 3, 4
    yield (
        "3:6 float32 rounded to 1/4",
        (np.round(rng.standard_normal((6, 6)) * 4) / 4).astype(np.float32),
        3,
        6,
    )
    yield "4:8 float32 |N(0,1)|", np.abs(rng.standard_normal((8, 16))).astype(np.float32), 4, 8
    yield "4:8 binary ties", rng.integers(0, 2, (8, 8)).astype(np.float64), 4, 8
    yield "8:16 small integers", rng.integers(0, 5, (16, 16)).astype(np.int16), 8, 16


def main() -> None:
    out = []
    for name, scores, n, m in cases():
        methods = ["exact", "greedy", "greedy-prune"] + (["brute"] if m <= 6 else [])
        out.append(
            {
                "name": name,
                "dtype": str(scores.dtype),
                "n": n,
                "m": m,
                "scores": scores.astype(np.float64).tolist()
                if scores.dtype.kind == "f"
                else scores.tolist(),
                "masks": {
                    method: transposable_mask(scores, n, m, method=method).astype(int).tolist()
                    for method in methods
                },
                "optimum": transposable_optimum(scores, n, m).tolist(),
            }
        )
    path = GOLDEN_DIR / "transposable.json"
    path.write_text(json.dumps({"spec": "specs/transposable.md", "cases": out}, indent=None) + "\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main()
