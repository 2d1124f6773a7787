"""Write ``bame_evolve.npz``: pinned inputs and outputs of :func:`nmref.bame.evolve_mask`.

The file stores the input arrays themselves (not seeds) and the outputs they gave
when the spec was written; ``tests/test_bame.py::test_golden_vectors`` replays them.
Rerun only when the spec changes on purpose:
``PYTHONPATH=. python scripts/golden/make_bame_golden.py``.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from nmref.bame import BameConfig, BameState, evolve_mask
from nmref.masks import nm_mask

# Package data: the tests read these files through importlib.resources.
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "nmref" / "testing" / "data" / "golden"

CASES = {
    "default_2of4": {"n": 2, "m": 4},
    "reselect_stale_2of8": {"n": 2, "m": 8, "swap_rule": "reselect", "regrow_init": "stale"},
    "multiplicative_ema_1of4": {
        "n": 1,
        "m": 4,
        "combine": "multiplicative",
        "oscillation": "change_ema",
        "freeze_threshold": 0.6,
        "product_exponent": 2.0,
        "budget_of": "all",
    },
    "first_order_ties_2of4": {
        "n": 2,
        "m": 4,
        "curvature": 0.0,
        "lookahead_step": 0.0,
        "regrow_init": "stale",
        "adapt_fraction": 1.0,
    },
}


def main() -> None:
    rng = np.random.default_rng(20250713)
    arrays: dict[str, np.ndarray] = {}
    for name, switches in CASES.items():
        config = BameConfig(t_i=0, t_f=100, update_interval=10, **switches)
        n, m = config.n, config.m
        shape = (3, 4 * m)
        if "ties" in name:
            weight = rng.integers(-2, 3, size=shape).astype(np.float64)
            grad = rng.integers(-2, 3, size=shape).astype(np.float64)
        else:
            weight, grad = rng.normal(size=shape), rng.normal(size=shape)
        mask = nm_mask(np.abs(weight), n, m)
        blocks = (3, 4)
        state = BameState(
            changes=rng.integers(0, 4, size=blocks).astype(np.int64),
            reverts=rng.integers(0, 2, size=blocks).astype(np.int64),
            change_ema=rng.random(blocks),
            frozen=np.zeros(blocks, bool),
            previous_mask=nm_mask(rng.normal(size=shape), n, m),
            num_updates=4,
        )
        velocity = rng.normal(size=shape)
        result = evolve_mask(
            weight, mask, grad, state, 20, config, learning_rate=0.1, velocity=velocity
        )
        switch_items = {k: v for k, v in asdict(config).items()}
        arrays[f"{name}/switch_names"] = np.array(list(switch_items), dtype=str)
        arrays[f"{name}/switch_values"] = np.array(
            [str(v) for v in switch_items.values()], dtype=str
        )
        for key, value in (
            ("weight", weight),
            ("mask", mask),
            ("grad", grad),
            ("velocity", velocity),
            ("step", np.array(20)),
            ("learning_rate", np.array(0.1)),
        ):
            arrays[f"{name}/{key}"] = value
        for f in fields(BameState):
            arrays[f"{name}/state_{f.name}"] = np.asarray(getattr(state, f.name))
        for key in ("mask", "weight", "velocity", "selected", "reduction", "candidates", "scores"):
            arrays[f"{name}/expected_{key}"] = getattr(result, key)
        # The counters after the update are outputs too (oscillation rule, spec 3.3).
        for f in fields(BameState):
            arrays[f"{name}/expected_state_{f.name}"] = np.asarray(getattr(result.state, f.name))
        print(name, "blocks changed:", int(result.selected.sum()), "budget:", result.budget)
    np.savez_compressed(GOLDEN_DIR / "bame_evolve.npz", **arrays)


if __name__ == "__main__":
    main()
