"""
The 2:4 compressed operand: values, 2-bit metadata, and ``mma.sp`` on it
========================================================================

Sparse tensor cores take a 2:4 matrix as its kept **values** (half the columns) plus
**metadata**: for every group of 4, the two 2-bit positions of its kept entries, a 4-bit nibble
packed low nibble first into 16-bit words (fp16/bf16), then stored in the CUTLASS sm80 order
(:doc:`../specs/formats`). :func:`nmsim.compress_2to4` writes exactly PyTorch 2.13's bits and
:func:`nmsim.mma_sp` multiplies from them, as ``mma.sp`` does (Mishra et al. 2021).
"""

import matplotlib.pyplot as plt
import numpy as np

import nmref
import nmsim

rng = np.random.default_rng(0)
dense = rng.standard_normal((32, 32)).astype(np.float16)
dense = dense * nmref.magnitude_mask(dense, 2, 4)
values, logical = nmsim.compress_2to4(dense, dtype_kind="fp16", layout="logical")
stored_values, stored = nmsim.compress_2to4(dense, dtype_kind="fp16")  # cutlass_sm80 order
print(
    "dense",
    dense.shape,
    "-> values",
    values.shape,
    values.dtype,
    "+ metadata",
    logical.shape,
    logical.dtype,
)

word = int(logical[0, 0]) & 0xFFFF
print(f"row 0, metadata word 0 = 0x{word:04X} = {word:016b}")
for g in range(4):
    nibble = (word >> (4 * g)) & 0xF
    p0, p1 = nibble & 0b11, nibble >> 2
    group = dense[0, 4 * g : 4 * g + 4]
    print(
        f"group {g}: {np.array2string(group, precision=3)} -> nibble {nibble:04b} = positions "
        f"({p0}, {p1}), values {np.array2string(values[0, 2 * g : 2 * g + 2], precision=3)}"
    )

# %%
# The same nibbles drawn: each group of 4 with its kept entries, the two 2-bit indices and the
# two stored values.

fig, ax = plt.subplots(figsize=(10, 3.2))
for g in range(4):
    nibble = (word >> (4 * g)) & 0xF
    positions = (nibble & 0b11, nibble >> 2)
    for k in range(4):
        x0 = 5 * g + k
        kept = k in positions
        ax.add_patch(plt.Rectangle((x0, 1.2), 0.95, 0.95, color="C1" if kept else "0.9"))
        ax.text(
            x0 + 0.47,
            1.67,
            f"{float(dense[0, 4 * g + k]):.2f}",
            ha="center",
            va="center",
            fontsize=8,
        )
    for slot, position in enumerate(positions):
        x0 = 5 * g + 2 * slot
        ax.add_patch(plt.Rectangle((x0, 0), 1.9, 0.8, color="C0", alpha=0.25))
        ax.text(
            x0 + 0.95,
            0.4,
            f"{position:02b} | {float(values[0, 2 * g + slot]):.2f}",
            ha="center",
            va="center",
            fontsize=8,
        )
    ax.text(5 * g + 2, 2.45, f"group {g}: nibble {nibble:04b}", ha="center", fontsize=9)
ax.text(-0.3, 1.67, "dense", ha="right", va="center")
ax.text(-0.3, 0.4, "index | value", ha="right", va="center")
ax.set_xlim(-3.2, 20)
ax.set_ylim(-0.2, 2.8)
ax.axis("off")
ax.set_title(f"row 0, first metadata word 0x{word:04X} (low nibble = group 0)")
fig.tight_layout()

# %%
# ``mma_sp`` reads only the values and the (sm80-ordered) metadata; with fp32 accumulation it
# agrees with the dense product, and the values are the same in both layouts.

b = rng.standard_normal((32, 8)).astype(np.float16)
product = nmsim.mma_sp(stored_values, stored, b)
reference = dense.astype(np.float64) @ b.astype(np.float64)
print("values equal in both layouts:", np.array_equal(values, stored_values))
print("metadata words moved by the sm80 order:", int((logical != stored).sum()), "of", logical.size)
print(f"max |mma_sp - exact product| = {np.abs(product - reference).max():.2e} (fp32 accumulate)")
print(
    "decompress(compress(A)) == A:",
    np.array_equal(nmsim.decompress_2to4(stored_values, stored, dtype_kind="fp16"), dense),
)
