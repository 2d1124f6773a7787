"""
The layouts of a conv weight
============================

A conv weight ``[out, in, kh, kw]`` is a GEMM with reduction length ``in * kh * kw``. Which
``m`` entries form a group depends on the layout (:doc:`../specs/conventions`):

* ``"channels"`` (the default for conv, as NVIDIA ASP): ``m`` consecutive **input channels** at
  one kernel position;
* ``"flat"`` (the Bi-Mask code): ``m`` consecutive entries of the row-major flattening of
  ``[in, kh, kw]``, so a group runs along the kernel window first.

:func:`nmref.to_reduction_matrix` turns the weight into the ``[rows, reduction]`` matrix whose
rows are grouped; here each entry of one output filter is coloured by its group.
"""

import matplotlib.pyplot as plt
import numpy as np

import nmref

out_channels, in_channels, kh, kw = 2, 8, 2, 2
weight = np.random.default_rng(0).standard_normal((out_channels, in_channels, kh, kw))
index = np.arange(weight.size, dtype=np.float64).reshape(weight.shape)

fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
for ax, layout in zip(axes, ("channels", "flat"), strict=True):
    matrix = nmref.to_reduction_matrix(index, layout)
    group_of = np.empty(weight.size, dtype=int)
    for row in range(matrix.shape[0]):
        for position, flat in enumerate(matrix[row].astype(int)):
            group_of[flat] = row * (matrix.shape[1] // 4) + position // 4
    groups = group_of.reshape(weight.shape)[0]  # filter 0: [in, kh, kw]
    picture = groups.transpose(1, 0, 2).reshape(kh, in_channels * kw)
    ax.imshow(picture, cmap="tab20", aspect="auto")
    for (r, c), g in np.ndenumerate(picture):
        ax.text(c, r, str(g), ha="center", va="center", fontsize=8)
    for c in range(1, in_channels):
        ax.axvline(c * kw - 0.5, color="w", lw=2)
    ax.set_title(f'layout "{layout}": group of each entry of filter 0')
    ax.set_xticks(
        [c * kw + 0.5 for c in range(in_channels)], [f"in {c}" for c in range(in_channels)]
    )
    ax.set_yticks(range(kh), [f"kh {r}" for r in range(kh)])
    ax.set_xlabel("input channel (each cell block: the kw positions)")
fig.tight_layout()

# %%
# The masks differ accordingly; both are 2:4 in their own grouping:

for layout in ("channels", "flat"):
    mask = nmref.magnitude_mask(weight, 2, 4, layout=layout)
    print(
        layout,
        "kept",
        int(mask.sum()),
        "of",
        mask.size,
        "| 2:4 in this layout:",
        bool(nmref.is_nm(nmref.to_reduction_matrix(mask, layout), 2, 4)),
    )
print(
    "masks equal:",
    np.array_equal(
        nmref.magnitude_mask(weight, 2, 4, layout="channels"),
        nmref.magnitude_mask(weight, 2, 4, layout="flat"),
    ),
)
