r"""Peer: TSENOR (Meng, Makni & Mazumder, NeurIPS 2025), entropic transport plus rounding.

Follows the paper's public description ("TSENOR: Highly-Efficient Algorithm for
Finding Transposable N:M Sparse Masks", arXiv 2505.23949: abstract, and a
secondary summary of its Algorithms 1 and 2: a third-party note on the paper, not the
paper itself; we did not read the full text). Their code
(github.com/mazumder-lab/TSENOR) was not available to us; nothing here is
copied. Float64 NumPy, all tiles at once.

1. **Relaxation** (as summarised): per tile, the exactly-``n``
   problem over :math:`0 \le S \le 1` with row and column sums ``n`` (a
   capacitated transport problem; its LP has integral vertices), regularised by
   entropy:

   .. math::

       \max_S \langle S, s\rangle + \tfrac{1}{\tau} H(S),\quad
       S\mathbf 1 = S^\top \mathbf 1 = n\mathbf 1,\ 0 \le S \le 1 .

2. **Dykstra** (Algorithm 1): start from :math:`S = \exp(\tau s)` and repeat
   ``iterations`` times: scale rows to sum ``n``, scale columns to sum ``n``, then
   the KL projection on :math:`S \le 1` with its Dykstra correction
   :math:`Q` (:math:`P = S \odot Q`, :math:`S = \min(P, 1)`, :math:`Q = P / S`).
3. **Rounding** (Algorithm 2): keep-greedy on the fractional :math:`S` (descending,
   keep while row and column keep fewer than ``n``; equal values lower flat
   index first), then local search: while some row ``i`` and column ``j`` keep
   fewer than ``n``, take the swap ``(i', j')`` with
   :math:`S_{i'j'} = 1, S_{ij'} = S_{i'j} = 0` of greatest gain
   :math:`s_{ij'} + s_{i'j} - s_{i'j'}` over all such ``(i, j, i', j')`` (first in
   lexicographic order among equals); apply it if the gain is positive (it adds
   ``(i, j')`` and ``(i', j)``, drops ``(i', j')``), else stop; at most
   ``local_search_steps`` swaps.

Choices that are ours (their values were not available to us, so uncertain):
each tile's scores are divided by its largest score first (so :math:`\tau` is
scale-free and :math:`\exp` cannot overflow), ``tau=40`` and ``iterations=100``
(picked on |N(0,1)| tiles, tau in {5, 10, 20, 40, 80} and 50, 100 or 300
iterations: ``python benchmarks/audit_transposable.py --tsenor-sweep``; see
``specs/audit.md``), and the local search visits every deficient row-column
pair at once and stops at the first non-positive best gain: the result is then
a valid **at-most-n** mask, which the audit reports as such. The paper reports
1-10% relative error against the optimum.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from nmref.audit._blocks import from_blocks, to_blocks
from nmref.audit._scan import descending_order, keep_scan

__all__ = ["ITERATIONS", "TAU", "dykstra_plan", "local_search", "tsenor_mask"]

TAU = 40.0
ITERATIONS = 100


def dykstra_plan(blocks: NDArray, n: int, *, tau: float = TAU, iterations: int = ITERATIONS):
    """Fractional plans ``(tiles, m, m)`` of the entropic problem (step 2), float64.

    Notes
    -----
    O(iterations tiles m^2).
    """
    values = blocks.astype(np.float64)
    largest = values.max(axis=(1, 2), keepdims=True)
    scaled = np.divide(values, largest, out=np.zeros_like(values), where=largest > 0)
    # exp(tau (s - 1)) in [exp(-tau), 1]: the row scaling removes the constant factor
    plan = np.exp(tau * (scaled - 1.0))
    correction = np.ones_like(plan)
    for _ in range(iterations):
        plan *= n / plan.sum(axis=2, keepdims=True)
        plan *= n / plan.sum(axis=1, keepdims=True)
        projected = plan * correction
        plan = np.minimum(projected, 1.0)
        correction = projected / plan
    return plan


def local_search(kept: NDArray[np.bool_], scores: NDArray, n: int, steps: int) -> None:
    """Step 3's swaps on one tile, in place (``kept`` and ``scores`` are ``m x m``)."""
    for _ in range(steps):
        rows = np.flatnonzero(kept.sum(axis=1) < n)
        columns = np.flatnonzero(kept.sum(axis=0) < n)
        if rows.size == 0 or columns.size == 0:
            return
        # gain[a, b, i', j'] for deficient row rows[a], column columns[b]
        gain = scores[rows][:, None, None, :] + scores[:, columns].T[None, :, :, None] - scores
        allowed = (
            kept[None, None, :, :]
            & ~kept[rows][:, None, None, :]
            & ~kept[:, columns].T[None, :, :, None]
        )
        gain = np.where(allowed, gain, -np.inf)
        best = int(np.argmax(gain))  # first maximum in (a, b, i', j') order
        if not gain.flat[best] > 0:
            return
        a, b, i2, j2 = np.unravel_index(best, gain.shape)
        i, j = rows[a], columns[b]
        kept[i, j2] = kept[i2, j] = True
        kept[i2, j2] = False


def tsenor_mask(
    scores: NDArray,
    n: int,
    m: int,
    *,
    tau: float = TAU,
    iterations: int = ITERATIONS,
    local_search_steps: int | None = None,
) -> NDArray[np.bool_]:
    """TSENOR-style transposable mask of non-negative ``scores`` (whole ``m x m`` tiles).

    Parameters
    ----------
    scores : ndarray, shape (R, C)
        Non-negative, finite; ``R``, ``C`` multiples of ``m``.
    n, m : int
        Pattern.
    tau, iterations : float, int
        Entropy temperature (on scores scaled to [0, 1] per tile) and Dykstra sweeps.
    local_search_steps : int or None
        Most swaps per tile; ``None``: ``n * m`` (more than any tile can use,
        each swap filling one missing row and one missing column entry).

    Returns
    -------
    ndarray of bool, shape (R, C)
        Valid at most ``n`` per tile row and column; exactly ``n`` where the
        rounding filled every row and column.

    Examples
    --------
    >>> tsenor_mask(np.diag([4.0, 3.0, 2.0, 1.0]) + 0.5, 1, 4).astype(int)
    array([[1, 0, 0, 0],
           [0, 1, 0, 0],
           [0, 0, 1, 0],
           [0, 0, 0, 1]])
    """
    values = np.asarray(scores, dtype=np.float64)
    if n == 0:  # the only valid mask; the scaling below would divide 0 by 0
        return np.zeros(values.shape, dtype=bool)
    blocks = to_blocks(values, m)
    plan = dykstra_plan(blocks, n, tau=tau, iterations=iterations)
    kept = keep_scan(descending_order(plan), n, m)
    steps = n * m if local_search_steps is None else local_search_steps
    short = np.flatnonzero((kept.sum(axis=2) < n).any(axis=1))
    for t in short:
        local_search(kept[t], blocks[t], n, steps)
    return from_blocks(kept, values.shape, m)
