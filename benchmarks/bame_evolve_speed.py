"""Speed of the vectorised ``evolve_mask`` against its plain-Python oracle (same run, medians).

Both give identical results (tests/test_bame.py); this prints how much faster the
vectorised path is on one mid-size layer per pattern and swap rule, and the absolute
time of the vectorised path on a ResNet-50-sized layer (2048 x 512).

Run: ``PYTHONPATH=. python benchmarks/bame_evolve_speed.py``
"""

from __future__ import annotations

import numpy as np
from _timing import median_seconds

from nmref.bame import BameConfig, BameState, evolve_mask, evolve_mask_reference
from nmref.masks import magnitude_mask


def main() -> int:
    rng = np.random.default_rng(0)
    print(f"{'shape':>12} {'pattern':>7} {'rule':>11} {'oracle s':>9} {'fast s':>8} {'ratio':>7}")
    for (rows, columns), (n, m) in (((128, 256), (2, 4)), ((128, 256), (1, 16))):
        weight = rng.normal(size=(rows, columns))
        grad = rng.normal(size=(rows, columns))
        mask = magnitude_mask(weight, n, m)
        state = BameState.initial(mask, m)
        for rule in ("single_swap", "reselect"):
            config = BameConfig(n, m, t_f=100, update_interval=10, swap_rule=rule)

            def fast(config=config, mask=mask, state=state, weight=weight, grad=grad):
                return evolve_mask(weight, mask, grad, state, 0, config, learning_rate=0.1)

            def slow(config=config, mask=mask, state=state, weight=weight, grad=grad):
                return evolve_mask_reference(
                    weight, mask, grad, state, 0, config, learning_rate=0.1
                )

            fast()  # compile nm_mask's kernel outside the timing
            oracle, vectorised = (
                median_seconds(slow, 3, warm_up=False),
                median_seconds(fast, 7, warm_up=False),
            )
            print(
                f"{f'{rows}x{columns}':>12} {f'{n}:{m}':>7} {rule:>11} {oracle:9.4f} "
                f"{vectorised:8.4f} {oracle / vectorised:6.1f}x"
            )
    weight = rng.normal(size=(2048, 512))
    mask = magnitude_mask(weight, 2, 4)
    config = BameConfig(2, 4, t_f=100, update_interval=10)
    state = BameState.initial(mask, 4)
    grad = rng.normal(size=weight.shape)
    seconds = median_seconds(
        lambda: evolve_mask(weight, mask, grad, state, 0, config, learning_rate=0.1), 5
    )
    print(f"vectorised evolve_mask, 2048x512 at 2:4: {seconds:.3f} s (median of 5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
