"""What ``nmsim report`` can compute: mask methods and cost models, as a registry.

Every column of the report comes from an entry here. An entry names the public
functions it needs (``"module:attribute"``); when one is missing (the method has
not landed in this installation), the entry is *unavailable*: the report says so
with the reason and leaves the column empty. No entry ever substitutes a number
from elsewhere.

Mask methods (``--methods``) take one tensor and return its kept magnitude and
the SHA-256 of its mask; cost models turn a tensor's shape into training FLOPs
(per GEMM) and estimated GEMM times on a GPU. Definitions: ``specs/report.md``.
"""

from __future__ import annotations

import hashlib
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nmref.layouts import from_reduction_matrix, to_reduction_matrix, to_reduction_shape
from nmref.masks import magnitude_mask
from nmref.patterns import Pattern

__all__ = [
    "COST_MODELS",
    "GEMMS",
    "MASK_METHODS",
    "CostModel",
    "MaskMethod",
    "TensorContext",
    "availability",
    "combine_speedups",
    "gemm_estimate",
    "gemm_seconds",
    "interval_coverage",
    "mask_digest",
]

GEMMS = ("forward", "input_grad", "weight_grad")


def mask_digest(mask: NDArray[np.bool_]) -> str:
    """SHA-256 of a boolean mask: its shape, then its bits packed in C order.

    Two implementations agree on a mask exactly when their digests agree, so a
    researcher can check their own masks against the report without the arrays.
    """
    array = np.ascontiguousarray(mask, dtype=bool)
    digest = hashlib.sha256(repr(tuple(int(s) for s in array.shape)).encode())
    digest.update(np.packbits(array.ravel()).tobytes())
    return digest.hexdigest()


@dataclass
class TensorContext:
    """One weight and what every method needs from it.

    Attributes
    ----------
    name : str
    weight : ndarray of float
        What the methods rank: ``|w|`` of the tensor as read (BF16 already upcast exactly).
        Every method ranks by magnitude, so the sign never changes a mask, and holding one
        array instead of two keeps the report's peak memory near 2-3x the tensor.
    layout : str
        Its layout (``nmref.layouts``).
    pattern : Pattern
    magnitudes : ndarray
        ``|w|`` in the weight's dtype (the same array as ``weight``).
    total_magnitude : float
        ``sum(|weight|)`` accumulated in float64.
    seed : int
        Seed for randomised methods (Bi-Mask's permutation search), already
        combined with the tensor name.
    options : dict
        Method options (``bimask_candidates``).
    results : dict
        Results of methods computed earlier for this tensor (greedy reuses the
        exact transposable optimum).
    masks : dict or None
        When a dict (``nmsim report --calibration``), every method puts the mask that
        computes the layer's outputs in it under its key (``transposable_at_most`` for the
        at-most optimum; Bi-Mask's forward mask), for the output errors; ``None`` (the
        default) keeps no mask, so a report without calibration holds no extra copy.
    """

    name: str
    weight: NDArray
    layout: str
    pattern: Pattern
    magnitudes: NDArray
    total_magnitude: float
    seed: int
    options: dict[str, Any]
    results: dict[str, dict[str, Any]]
    masks: dict[str, NDArray[np.bool_]] | None = None

    def keep(self, key: str, mask: NDArray[np.bool_]) -> None:
        """Hold ``mask`` under ``key`` when the masks are wanted (:attr:`masks`)."""
        if self.masks is not None:
            self.masks[key] = mask

    def kept_magnitude(self, mask: NDArray[np.bool_]) -> float:
        """``sum(|w|)`` over the kept entries of a weight-shaped mask, accumulated in float64."""
        return float(np.sum(self.magnitudes, dtype=np.float64, where=mask))

    def matrix_scores(self) -> NDArray:
        """``|w|`` as the ``[rows, reduction]`` matrix of the tensor's layout."""
        return to_reduction_matrix(self.magnitudes, self.layout)

    def summary(self, mask: NDArray[np.bool_], **extra: Any) -> dict[str, Any]:
        """The fields every mask method reports."""
        kept = self.kept_magnitude(mask)
        fraction = kept / self.total_magnitude if self.total_magnitude > 0 else 1.0
        return {
            "kept_magnitude": kept,
            "kept_fraction": fraction,
            "density": float(np.count_nonzero(mask) / mask.size) if mask.size else 0.0,
            "mask_sha256": mask_digest(mask),
            **extra,
        }


# ----------------------------------------------------------------------------
# Availability
# ----------------------------------------------------------------------------


def availability(requires: tuple[str, ...], provider: str) -> str | None:
    """``None`` when every required ``"module:attribute"`` exists, else the reason it does not.

    ``requires`` declares what an entry's functions import; checking it before a column
    runs is what makes a column *unavailable* (never an error) where a provider is absent.
    The functions import their providers with ordinary imports when they run, so that
    loading this registry loads none of them.
    """
    missing = []
    for requirement in requires:
        module_name, attribute = requirement.split(":")
        try:
            getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError):
            missing.append(requirement.replace(":", "."))
    if not missing:
        return None
    return f"needs {', '.join(missing)} ({provider}), not in this installation"


# ----------------------------------------------------------------------------
# Mask methods
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskMethod:
    """One mask method: a column group of the report.

    ``compute(context)`` returns :meth:`TensorContext.summary` plus its own
    fields, or raises ``ValueError`` when the method does not apply to this
    tensor (the message is reported as the reason).
    """

    key: str
    title: str
    description: str
    requires: tuple[str, ...]
    provider: str
    flops_method: str
    compute: Callable[[TensorContext], dict[str, Any]]

    def unavailable(self) -> str | None:
        """Why this method cannot run here, or ``None``."""
        return availability(self.requires, self.provider)


def _one_d(context: TensorContext) -> dict[str, Any]:
    pattern = context.pattern
    mask = magnitude_mask(context.weight, pattern.n, pattern.m, layout=context.layout)
    context.keep("1d", mask)
    return context.summary(mask)


#: Entries of the score matrix per transposable call (bands of whole tile rows).
TRANSPOSABLE_BAND_ELEMENTS = 1 << 22


def _tile_row_bands(context: TensorContext) -> list[slice]:
    """Row bands of whole tile rows of the ``[rows, reduction]`` matrix.

    Tiles are independent (specs/transposable.md T2), so solving band by band gives the
    same masks as one call while the solver's temporaries stay the size of one band.
    """
    m = context.pattern.m
    rows, columns = to_reduction_shape(tuple(context.weight.shape), context.layout)
    band = max(m, TRANSPOSABLE_BAND_ELEMENTS // max(columns, 1) // m * m)
    return [slice(start, start + band) for start in range(0, rows, band)]


def _transposable_matrix_mask(
    context: TensorContext, method: str, fill: str = "exact"
) -> NDArray[np.bool_]:
    """The transposable mask of ``|w|`` on the layout's ``[rows, reduction]`` matrix."""
    from nmref._validation import check_transposable_layout
    from nmref.transposable import transposable_mask

    pattern = context.pattern
    check_transposable_layout(tuple(context.weight.shape), pattern.m, context.layout)
    scores = context.matrix_scores()
    matrix_mask = np.empty(scores.shape, dtype=bool)
    for rows in _tile_row_bands(context):
        matrix_mask[rows] = transposable_mask(
            scores[rows], pattern.n, pattern.m, method=method, fill=fill
        )
    return matrix_mask


def _transposable_mask(context: TensorContext, method: str, fill: str = "exact"):
    matrix_mask = _transposable_matrix_mask(context, method, fill)
    return from_reduction_matrix(matrix_mask, context.weight.shape, context.layout)


def _transposable_exact(context: TensorContext) -> dict[str, Any]:
    """The exactly-N optimum, and beside it the at-most-N optimum (spec R4: what sparse
    tensor cores accept; never below the exactly-N one)."""
    # one mask at a time (unless kept): the report's peak stays a few copies of the tensor
    mask = _transposable_mask(context, "exact")
    context.keep("transposable", mask)
    result = context.summary(mask)
    mask = _transposable_mask(context, "exact", "at_most")
    context.keep("transposable_at_most", mask)
    at_most = context.summary(mask)
    result.update({f"at_most_{key}": value for key, value in at_most.items()})
    return result


def _transposable_greedy(context: TensorContext) -> dict[str, Any]:
    """Keep-greedy mask; its gap against the at-most-N optimum (spec R4), never negative."""
    from nmref.transposable import optimality_gap

    exact = context.results.get("transposable")
    if exact is None:
        exact = _transposable_exact(context)
    matrix_mask = _transposable_matrix_mask(context, "greedy")
    mask = from_reduction_matrix(matrix_mask, context.weight.shape, context.layout)
    context.keep("greedy", mask)
    result = context.summary(mask)
    optimum = exact["at_most_kept_magnitude"]
    pattern = context.pattern
    # Exact per tile and per band (rounded once each), so >= 0 for the valid at-most mask;
    # by bands of tile rows, as the masks, to bound the solver's temporaries.
    scores = context.matrix_scores()
    missing = math.fsum(
        optimality_gap(scores[rows], matrix_mask[rows], pattern.n, pattern.m, fill="at_most").total
        for rows in _tile_row_bands(context)
    )
    result["optimality_gap"] = min(missing / optimum, 1.0) if optimum > 0 else 0.0
    return result


def _bimask(context: TensorContext) -> dict[str, Any]:
    from nmref.bimask import backward_mask, search_permutation

    pattern = context.pattern
    forward = magnitude_mask(context.weight, pattern.n, pattern.m, layout=context.layout)
    search = search_permutation(
        context.weight,
        pattern.n,
        pattern.m,
        candidates=int(context.options.get("bimask_candidates", 100)),
        rng=np.random.default_rng(context.seed),
        layout=context.layout,
    )
    backward = np.asarray(
        backward_mask(
            context.weight, forward, search.permutation, pattern.n, pattern.m, layout=context.layout
        ),
        dtype=bool,
    )
    # the layer computes its outputs with the forward mask; the backward one is for dX only
    context.keep("bimask", forward)
    result = context.summary(backward)
    result["forward_kept_fraction"] = context.summary(forward)["kept_fraction"]
    result["permutation_score"] = int(search.score)
    return result


MASK_METHODS: dict[str, MaskMethod] = {
    method.key: method
    for method in (
        MaskMethod(
            "1d",
            "1-D N:M",
            "N largest |w| in every M consecutive weights along the reduction axis "
            "(nmref.magnitude_mask; Zhou et al. 2021)",
            ("nmref:magnitude_mask",),
            "nmref core",
            "srste",
            _one_d,
        ),
        MaskMethod(
            "transposable",
            "transposable exact",
            "optimal transposable N:M mask: N per row and per column of every M x M tile "
            "(nmref.transposable.transposable_mask method='exact'; Hubara et al. 2021), and "
            "the optimum keeping at most N (fill='at_most', what sparse tensor cores accept)",
            ("nmref.transposable:transposable_mask",),
            "issue 3",
            "transposable",
            _transposable_exact,
        ),
        MaskMethod(
            "greedy",
            "transposable greedy",
            "greedy transposable N:M mask and its optimality gap against the at-most-N "
            "optimum (nmref.transposable.transposable_mask method='greedy', keep form: "
            "at most N per row and column, so the gap is never negative)",
            ("nmref.transposable:transposable_mask", "nmref.transposable:optimality_gap"),
            "issue 3",
            "transposable",
            _transposable_greedy,
        ),
        MaskMethod(
            "bimask",
            "Bi-Mask backward",
            "Bi-Mask backward mask after the permutation search (nmref.bimask; "
            "Zhang et al. 2023); kept fraction of the backward (input-gradient) mask",
            ("nmref.bimask:search_permutation", "nmref.bimask:backward_mask"),
            "issue 6",
            "bimask",
            _bimask,
        ),
    )
}


# ----------------------------------------------------------------------------
# Cost models
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """FLOP or time accounting for the GEMMs of one weight."""

    key: str
    title: str
    requires: tuple[str, ...]
    provider: str

    def unavailable(self) -> str | None:
        """Why this model cannot run here, or ``None``."""
        return availability(self.requires, self.provider)


COST_MODELS: dict[str, CostModel] = {
    "flops": CostModel(
        "flops",
        "training FLOPs per GEMM",
        ("nmsim.perf.flops:method_phases", "nmsim.perf.flops:gemm_densities"),
        "training-FLOP accounting, issue 5",
    ),
    "time": CostModel(
        "time",
        "estimated GEMM time",
        ("nmsim.perf.gemm:gemm_time", "nmsim.perf.hardware:get_gpu"),
        "GEMM time model and GPU database, issue 5",
    ),
}


def gemm_shapes(shape: tuple[int, ...], tokens: int) -> dict[str, tuple[int, int, int]]:
    """``(m, n, k)`` of the three training GEMMs of a weight, the weight being operand A.

    The weight is ``[out, k_in]`` with ``k_in = prod(shape[1:])`` (a convolution
    as its im2col GEMM) and ``tokens`` activation rows: forward ``Y = W X``
    (``out x tokens x k_in``), input gradient ``dX = W^T dY`` (``k_in x tokens x
    out``), weight gradient ``dW = dY X^T`` (``out x k_in x tokens``).
    """
    out = int(shape[0])
    k_in = int(np.prod(shape[1:], dtype=np.int64))
    return {
        "forward": (out, tokens, k_in),
        "input_grad": (k_in, tokens, out),
        "weight_grad": (out, k_in, tokens),
    }


def method_densities(
    flops_method: str, pattern: Pattern, accounting: str = "ideal"
) -> dict[str, float]:
    """Phase-weighted density of each GEMM for a method (``nmsim.perf.flops``).

    ``accounting="ideal"`` counts only products with a kept weight (N/M);
    ``"hardware"`` counts what a 2:4 sparse tensor core executes
    (``nmsim.perf.flops.gemm_densities``): never below 1/2, dense where the pattern
    or the operand cannot use the sparse path.
    """
    from nmsim.perf.flops import gemm_densities, method_phases

    densities = dict.fromkeys(GEMMS, 0.0)
    for phase in method_phases(flops_method, f"{pattern.n}:{pattern.m}"):
        phase_densities = gemm_densities(phase, pattern, accounting)
        for gemm in GEMMS:
            densities[gemm] += phase.fraction * phase_densities.get(gemm)
    return densities


def gemm_seconds(
    gpu: str, shape: tuple[int, int, int], dtype: str, pattern: Pattern | None
) -> tuple[float, tuple[str, ...]]:
    """Estimated time of one GEMM (``nmsim.perf.gemm.gemm_time``) and the model's notes.

    ``pattern=None`` is dense. Patterns the hardware cannot accelerate run
    dense (``incompatible="dense"``); the notes then say so.
    """
    seconds, notes, _ = gemm_estimate(gpu, shape, dtype, pattern)
    return seconds, notes


def gemm_estimate(
    gpu: str, shape: tuple[int, int, int], dtype: str, pattern: Pattern | None
) -> tuple[float, tuple[str, ...], dict[str, Any] | None]:
    """:func:`gemm_seconds` and, when the GEMM runs sparse, its speedup block.

    The block (``specs/report.md`` R6) is the model's dense / sparse speedup of this
    GEMM with its prediction interval and verdict, as ``gemm_time`` reports them:
    ``speedup``, ``low``, ``high``, ``verdict``, ``extrapolated``, ``basis``,
    ``coverage`` (nominal, of the interval table), ``dense_s`` and ``sparse_s`` (the two
    times the speedup divides). ``None`` for a dense GEMM, a pattern the hardware runs
    dense, a GEMM the model refuses (timed dense, with a note), or a time model without
    intervals.
    """
    from nmsim.perf.gemm import gemm_time

    m, n, k = shape
    sparse = None if pattern is None else f"{pattern.n}:{pattern.m}"
    try:
        estimate = gemm_time(gpu, m, n, k, dtype=dtype, sparse=sparse, incompatible="dense")
    except ValueError as error:
        if sparse is None:
            raise
        # The dense call has the same GPU/dtype/sizes, so what failed is the sparse operand's
        # shape (k not a multiple of the hardware group, e.g. dX of a 10-row head at 1:2): the
        # hardware runs this GEMM dense, one tensor does not end the whole report.
        seconds, notes = gemm_seconds(gpu, shape, dtype, None)
        return seconds, (*notes, f"{m}x{n}x{k} GEMM modelled as dense: {error}"), None
    notes = tuple(str(note) for note in getattr(estimate, "notes", ()))
    return float(estimate.time_s), notes, _speedup_block(estimate)


def _speedup_block(estimate: Any) -> dict[str, Any] | None:
    fields = ("speedup", "speedup_low", "speedup_high", "verdict", "dense_time_s")
    if any(getattr(estimate, name, None) is None for name in fields):
        return None  # dense path, or a time model that does not give intervals
    return {
        "speedup": float(estimate.speedup),
        "low": float(estimate.speedup_low),
        "high": float(estimate.speedup_high),
        "verdict": str(estimate.verdict),
        "extrapolated": bool(getattr(estimate, "extrapolated", False)),
        "basis": str(getattr(estimate, "interval_basis", None) or ""),
        "coverage": interval_coverage(),
        "dense_s": float(estimate.dense_time_s),
        "sparse_s": float(estimate.time_s),
    }


def interval_coverage() -> float | None:
    """Nominal coverage of the shipped speedup intervals (0.8), or None if unknown."""
    try:
        from nmsim.perf.intervals import default_interval_table

        return float(default_interval_table().coverage)
    except (ImportError, AttributeError, OSError, KeyError, ValueError):
        return None


def combine_speedups(pairs: list[tuple[float, dict[str, Any] | None]]) -> dict[str, Any] | None:
    """The speedup block of a sum of GEMMs, from ``(dense seconds, block or None)`` pairs.

    A GEMM without a block runs dense: its point time enters both ends. A sparse GEMM's
    time interval is ``[dense_s / high, dense_s / low]``; the sum's ends are the sums of
    those ends, because the model's errors on one GPU are correlated (the same fitted
    efficiencies time every GEMM) and do not average out: the honest, conservative rule.
    ``None`` when no GEMM has a block. ``basis`` joins the distinct bases with ``" | "``;
    ``tensors`` counts the GEMMs with a block.
    """
    from nmsim.perf.intervals import verdict

    sparse = [block for _, block in pairs if block is not None]
    if not sparse:
        return None
    dense = point = fast = slow = 0.0
    for seconds, block in pairs:
        if block is None:
            dense += seconds
            point += seconds
            fast += seconds
            slow += seconds
            continue
        dense += block["dense_s"]
        point += block["sparse_s"]
        fast += block["dense_s"] / block["high"]
        slow += block["dense_s"] / block["low"]
    low, high = dense / slow, dense / fast
    return {
        "speedup": dense / point,
        "low": low,
        "high": high,
        "verdict": verdict(low, high),
        "extrapolated": any(block["extrapolated"] for block in sparse),
        "basis": " | ".join(dict.fromkeys(block["basis"] for block in sparse)),
        "coverage": sparse[0]["coverage"],
        "dense_s": dense,
        "sparse_s": point,
        "tensors": len(sparse),
    }


def check_gpu(gpu: str) -> str:
    """Validate a GPU name with the GPU database (``nmsim.perf.hardware.get_gpu``)."""
    from nmsim.perf.hardware import get_gpu

    try:
        found = get_gpu(gpu)
    except KeyError as error:
        raise ValueError(str(error).strip("'\"")) from error
    return str(getattr(found, "key", gpu))
