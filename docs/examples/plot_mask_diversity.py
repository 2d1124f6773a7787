"""
Mask diversity
==============

How many distinct masks each structure allows, per element, at density 1/2 (Hubara et al.
2021, Sec. 3): unstructured ``C(T, T/2)``, 1-D N:M ``C(m, n)^(T/m)`` and transposable
``K(m, n)^(T/m^2)``, where ``K(m, n)`` counts the ``m x m`` 0/1 matrices with ``n`` ones in every
row and column (:func:`nmref.count_transposable_patterns`, exact integers;
:func:`nmref.mask_diversity`). More diversity means a mask closer to the unconstrained one can
be found; transposable masks pay for their sparse backward pass with fewer choices.
"""

import math

import matplotlib.pyplot as plt

import nmref

size = 256
ms = [2, 4, 8]
per_element = {"unstructured": [], "nm": [], "transposable": []}
for m in ms:
    n = m // 2
    for structure in per_element:
        count = nmref.mask_diversity(structure, n, m, size)
        per_element[structure].append(math.log10(count) / size)

for m in ms:
    print(f"K({m}, {m // 2}) = {nmref.count_transposable_patterns(m, m // 2)}")

# %%
# Left: density 1/2 at growing ``m``. Right: ``n:8`` at every density; transposable masks have
# the fewest choices everywhere, and 1-D N:M is in between.

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
for structure, values in per_element.items():
    ax.plot(ms, values, "o-", label=structure)
    for m, value in zip(ms, values, strict=True):
        ax.annotate(
            f"{value:.3f}", (m, value), textcoords="offset points", xytext=(4, 4), fontsize=8
        )
ax.set_xscale("log", base=2)
ax.set_xticks(ms, [f"{m // 2}:{m}" for m in ms])
ax.set_xlabel("pattern (density 1/2)")
ax.set_ylabel(f"log10(number of masks) per element, T = {size}")
ax.set_title("mask diversity")
ax.legend()
fig.tight_layout()

ns = list(range(1, 8))
for structure in ("unstructured", "nm", "transposable"):
    values = [math.log10(nmref.mask_diversity(structure, n, 8, size)) / size for n in ns]
    bx.plot(ns, values, "o-", label=structure)
bx.set_xticks(ns, [f"{n}:8" for n in ns])
bx.set_xlabel("pattern")
bx.set_ylabel("log10(masks) per element")
bx.set_title("n:8 at every density")
bx.legend()
fig.tight_layout()
