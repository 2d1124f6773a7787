"""
The GEMM model: 2:4 speedup against shape, with measured points and intervals
=============================================================================

:func:`nmsim.gemm_time` models one dense and one 2:4 GEMM on a named GPU (roofline with tile
and wave quantisation, the compressed operand, fixed costs; :doc:`../specs/gemm_model`) and
gives the speedup with an 80 % prediction interval from the measured corpus's residuals. Here:
square ``m = n = k`` bf16 GEMMs on an A100 PCIe 80 GB, with the corpus's measured cuSPARSELt
speedups on that GPU and dtype (``nmsim/data/gemm_corpus/``) drawn as points.
"""

import matplotlib.pyplot as plt
import numpy as np

import nmsim
from nmsim.perf.corpus import load_corpus

gpu, dtype = "a100-pcie-80gb", "bf16"
sizes = 2 ** np.arange(6, 17)
estimates = [nmsim.gemm_time(gpu, int(s), int(s), int(s), dtype=dtype, sparse="2:4") for s in sizes]
for s, e in zip(sizes, estimates, strict=True):
    print(f"m=n=k={s:5d}: {e.speedup:.2f}x [{e.speedup_low:.2f}, {e.speedup_high:.2f}] {e.verdict}")

_, measurements = load_corpus()
points = [
    r
    for r in measurements
    if r.gpu == gpu and r.dtype == dtype and r.library == "cusparselt" and r.level == "kernel"
]
square = [r for r in points if r.m == r.n == r.k]
print(f"{len(points)} measured {gpu} {dtype} cuSPARSELt kernel rows, {len(square)} square")

# %%
# Left: the model and its interval on square shapes, with the square measurements. Right: every
# measured shape of that GPU and dtype against the model's prediction for it.

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
ax.fill_between(
    sizes,
    [e.speedup_low for e in estimates],
    [e.speedup_high for e in estimates],
    alpha=0.25,
    label="80% prediction interval",
)
ax.plot(sizes, [e.speedup for e in estimates], "o-", label="model")
if square:
    ax.plot([r.m for r in square], [r.speedup for r in square], "kx", label="measured")
ax.axhline(1, color="0.5", lw=1)
ax.set_xscale("log", base=2)
ax.set_xlabel("m = n = k")
ax.set_ylabel("2:4 speedup over dense")
ax.set_title(f"{gpu}, {dtype}")
ax.legend()
predicted = [nmsim.gemm_time(gpu, r.m, r.n, r.k, dtype=dtype, sparse="2:4").speedup for r in points]
bx.plot(predicted, [r.speedup for r in points], ".", alpha=0.6)
low, high = 0.5, 2.0
bx.plot([low, high], [low, high], "k--", lw=1)
bx.set_xlim(low, high)
bx.set_ylim(low, high)
bx.set_xlabel("model speedup")
bx.set_ylabel("measured speedup")
bx.set_title(f"{len(points)} measured shapes")
fig.tight_layout()
errors = np.abs(np.array(predicted) / np.array([r.speedup for r in points]) - 1)
print(
    f"median |model / measured - 1| on these rows: {100 * np.median(errors):.1f}% "
    "(in-sample: the model was fitted on the corpus)"
)

# %%
# How many measured shapes fall inside the model's 80 % interval? The intervals come from
# cross-validated residuals over many GPUs, so on one GPU's rows the share can differ from 80 %
# (here the large square shapes measure below the model).

inside = 0
for r in points:
    e = nmsim.gemm_time(gpu, r.m, r.n, r.k, dtype=dtype, sparse="2:4")
    inside += e.speedup_low <= r.speedup <= e.speedup_high
print(f"{inside} of {len(points)} measured shapes inside the 80% interval")
