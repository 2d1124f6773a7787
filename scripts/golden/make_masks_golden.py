"""Regenerate ``nmref/testing/data/golden/masks.json``: golden vectors for 1-D N:M masks.

Expected masks come from brute-force enumeration (``tests/naive.py``), not
from nmref, so the vectors are an independent pin. Inputs are stored as
literal arrays (never seeds). Run from the repository root:

    python scripts/golden/make_masks_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.naive import brute_force_mask  # noqa: E402

# Package data: the tests read these files through importlib.resources.
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "nmref" / "testing" / "data" / "golden"


def case(name, scores, n, m, *, magnitude, dtype="float64", note=""):
    array = np.asarray(scores, dtype=dtype)
    # Magnitudes in a wider type: |int8(-128)| is 128, not -128.
    wide = array.astype(np.int64 if array.dtype.kind in "iu" else np.float64)
    keyed = np.abs(wide) if magnitude else wide
    expected = brute_force_mask(keyed.reshape(-1, array.shape[-1]), n, m).reshape(array.shape)
    return {
        "name": name,
        "function": "magnitude_mask" if magnitude else "nm_mask",
        "n": n,
        "m": m,
        "dtype": dtype,
        "scores": array.tolist(),
        "expected": expected.astype(int).tolist(),
        "note": note,
    }


def main() -> None:
    rng = np.random.default_rng(20210412)  # provenance only: the arrays are stored
    cases = [
        case("all_equal_2of4", [[1, 1, 1, 1]], 2, 4, magnitude=False, note="ties: lower index"),
        case("topk_disagrees", [[3, 1, 3, 3]], 2, 4, magnitude=False, note="topk keeps [2,3]"),
        case("signed_vs_magnitude", [[-5, 1, 2, 0.5]], 2, 4, magnitude=True),
        case("negative_zero", [[-0.0, 0.0, 0.0, -0.0]], 2, 4, magnitude=True),
        case("one_of_four", [[0.1, -0.4, 0.3, 0.2, 7, 7, -7, 1]], 1, 4, magnitude=True),
        case("four_of_eight", rng.integers(-3, 4, (3, 16)).tolist(), 4, 8, magnitude=True),
        case("two_of_four_ties", rng.integers(-2, 3, (4, 12)).tolist(), 2, 4, magnitude=True),
        case("three_of_eight", np.round(rng.standard_normal((2, 16)), 3), 3, 8, magnitude=False),
        case("int8_extreme", [[-128, 127, 1, -1]], 1, 4, magnitude=True, dtype="int8"),
    ]
    path = GOLDEN_DIR / "masks.json"
    path.write_text(json.dumps({"schema_version": 1, "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
