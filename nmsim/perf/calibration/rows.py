"""Which corpus rows the fit uses, and the GPU family each row is reported under.

``specs/gemm_model.md`` section 6, "Fit": rows of a library the model does not cover,
rows with an excluded tag and rows whose measured speedup exceeds 2 stay in the corpus
and in the report with their reason (:func:`exclusion_reason`), but are not fitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from nmsim.perf.corpus import Measurement
from nmsim.perf.hardware import get_gpu

#: Rows with these tags stay in the corpus and in the report, but are not fitted:
#: an older library release known slower than today's, a reported slowdown bug, a whole
#: layer whose time includes non-GEMM work, or numbers the source itself makes doubtful.
EXCLUDED_TAGS: frozenset[str] = frozenset({"historic", "regression", "e2e-layer", "suspect"})


def family(gpu: str) -> str:
    """GPU family used in the CV table: by chip generation (compute capability)."""
    g = get_gpu(gpu)
    major, _, minor = g.compute_capability.partition(".")
    if g.compute_capability == "8.0":
        return "A100/A30 (GA100)"
    if major == "8" and minor in ("6", "7"):
        return "Ampere GA10x"
    if g.compute_capability == "8.9":
        return "Ada"
    if major == "9":
        return "Hopper"
    return "Blackwell" if major in ("10", "12") else g.architecture


#: Measured speedups above this cannot be explained by the sparse tensor cores (2x math,
#: 0.5625x bytes): the dense baseline ran far below its peak. Such rows are reported, not
#: fitted, because the model keeps sparse within 2x of the dense compute term by design.
BEYOND_HARDWARE = 2.0


def exclusion_reason(row: Measurement) -> str | None:
    """Why a corpus row is not fitted (None if it is)."""
    if row.library == "other":
        return "library 'other' (not cuSPARSELt or CUTLASS)"
    tags = sorted(set(row.tags) & EXCLUDED_TAGS)
    if tags:
        return "tagged " + ", ".join(tags)
    if row.speedup > BEYOND_HARDWARE:
        return (
            f"speedup {row.speedup:.2f} > {BEYOND_HARDWARE:g}: the dense baseline is far "
            "below its peak"
        )
    return None


def fitted_rows(rows: Sequence[Measurement]) -> list[Measurement]:
    """Rows the fit and the CV use: a modelled library, no excluded tag, at most 2x."""
    return [r for r in rows if exclusion_reason(r) is None]
