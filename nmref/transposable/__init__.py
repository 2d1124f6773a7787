r"""Transposable N:M masks: exact, brute force, greedy, and an optimality oracle.

A mask is **transposable N:M** when every aligned ``m x m`` tile keeps exactly
``n`` entries in each of its rows and each of its columns, so that both ``W``
(grouped along rows) and ``W.T`` are N:M (Hubara et al. 2021, Sec. 4). Tiles
are independent; for each one this module solves

.. math::

    \max_{S \in \{0,1\}^{m \times m}} \sum_{ij} S_{ij} s_{ij}
    \quad\text{s.t.}\quad S\mathbf 1 = n\mathbf 1,\ S^\top\mathbf 1 = n\mathbf 1 .

``specs/transposable.md`` fixes every choice; the essentials:

* ``scores`` is a 2-D matrix; both dimensions must be multiples of ``m``.
  Scores are any finite numbers (use :func:`transposable_weight_mask` for
  ``|w|`` of Linear/Conv weights). NaN and infinities are errors.
* **Ties.** Among optimal masks the canonical one is returned: the
  lexicographically greatest row-major keep-vector of the tile ("the lower
  flat index wins"). Every exact method returns it, bit for bit.
* **Fill.** ``fill="exact"`` (default, the papers' problem): exactly ``n``
  per tile row and column. ``fill="at_most"``: at most ``n`` (what sparse
  tensor cores accept; its optimum is never below the exact one, and can be
  above it: 6 against 5 on ``[[1,1,1,0]]*3 + [[0,0,0,0]]`` at 2:4). Both fills
  run Numba kernels tested equal, bit for bit, to the readable solvers.
* **Exact arithmetic.** Scores are compared as exact rationals: each tile is
  scaled by a power of two to integers (int64 in the kernels, Python ints in
  the reference), so rounding never decides a tie.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_scores, check_finite_scores, check_transposable_layout
from nmref.layouts import Layout, from_reduction_matrix, to_reduction_matrix
from nmref.masks import to_bool_mask, to_magnitudes
from nmref.patterns import check_pattern
from nmref.transposable import flow
from nmref.transposable._cuda_driver import Backend, check_backend, cuda_mask
from nmref.transposable._driver import (
    ENUMERATION_MAX_PATTERNS,
    exact_mask,
    greedy_mask,
    masked_units,
    solve_at_most,
    solve_exact,
)
from nmref.transposable._inputs import (
    FILLS,
    METHODS,
    Fill,
    Method,
    check_fill,
    check_method,
    prepare,
)
from nmref.transposable.certificates import (
    Certificate,
    transposable_certificate,
    verify_certificate,
)
from nmref.transposable.greedy import greedy_tile
from nmref.transposable.patterns import (
    BRUTE_AT_MOST_MAX_M,
    BRUTE_MAX_M,
    brute_tile,
    brute_tile_at_most,
    is_transposable,
    transposable_patterns,
)
from nmref.transposable.tiles import dyadic, exact_integer_tile, iter_tiles, kept_total, rounded

__all__ = [
    "BRUTE_AT_MOST_MAX_M",
    "BRUTE_MAX_M",
    "ENUMERATION_MAX_PATTERNS",
    "FILLS",
    "METHODS",
    "Certificate",
    "Fill",
    "Method",
    "OptimalityGap",
    "exact_integer_tile",
    "is_transposable",
    "optimality_gap",
    "transposable_certificate",
    "transposable_mask",
    "transposable_mask_reference",
    "transposable_optimum",
    "transposable_patterns",
    "transposable_weight_mask",
    "verify_certificate",
]


class OptimalityGap(NamedTuple):
    """How far a mask's kept sum is below the optimum.

    Attributes
    ----------
    per_tile : ndarray of float64, shape (R // m, C // m)
        Optimal kept sum minus the mask's kept sum, exact then rounded once.
    total : float
        Sum over tiles (exact, then rounded once).
    """

    per_tile: NDArray[np.float64]
    total: float


def transposable_mask_reference(
    scores: ArrayLike, n: int, m: int, *, method: Method = "exact", fill: Fill = "exact"
) -> NDArray[np.bool_]:
    """Plain-Python transposable mask: the teaching version of :func:`transposable_mask`.

    Same contract, inputs and errors as :func:`transposable_mask`; loops over
    tiles in Python: ``"exact"`` runs :func:`nmref.transposable.flow.solve_tile` on exact
    integers, ``"brute"`` scans :func:`transposable_patterns`, the greedy
    methods sort each tile. Slow; use it as an oracle.

    Examples
    --------
    >>> transposable_mask_reference(np.ones((4, 4)), 2, 4).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 0, 0],
           [0, 0, 1, 1],
           [0, 0, 1, 1]])
    """
    check_method(method)
    array, pattern = prepare(scores, n, m)
    _check_method_fill(method, fill, pattern.m)
    mask = np.zeros(array.shape, dtype=bool)
    for tile_row, tile_column, tile in iter_tiles(array, pattern.m):
        if method in ("greedy", "greedy-prune"):
            kept = greedy_tile(tile, pattern, prune_form=method == "greedy-prune")
        else:
            units, _ = exact_integer_tile(tile)
            if fill == "at_most":
                if method == "brute":
                    kept, _ = brute_tile_at_most(units, pattern.n, pattern.m)
                else:
                    kept, _, _ = flow.solve_tile_at_most(units, pattern.n)
            elif method == "brute":
                kept, _ = brute_tile(units, pattern)
            else:
                kept, _, _ = flow.solve_tile(units, pattern.n)
        r0, c0 = tile_row * pattern.m, tile_column * pattern.m
        mask[r0 : r0 + pattern.m, c0 : c0 + pattern.m] = kept
    return mask


def transposable_mask(
    scores: ArrayLike,
    n: int,
    m: int,
    *,
    method: Method = "exact",
    parallel: bool = False,
    fill: Fill = "exact",
    backend: Backend = "cpu",
) -> NDArray[np.bool_]:
    r"""Transposable N:M mask of a 2-D score matrix.

    Every aligned ``m x m`` tile keeps ``n`` entries in each row and column,
    chosen to maximise the kept sum of scores:

    .. math::

        \max_{S \in \{0,1\}^{m \times m}} \sum_{ij} S_{ij} s_{ij}
        \quad\text{s.t.}\quad S\mathbf 1 = S^\top\mathbf 1 = n\mathbf 1 .

    Parameters
    ----------
    scores : array_like, shape (R, C), bool, int or float16/32/64
        Finite scores; ``R`` and ``C`` multiples of ``m``. For magnitude pruning
        pass ``|w|`` or use :func:`transposable_weight_mask`.
    n : int
        Entries kept per row and per column of every tile, ``0 <= n <= m``.
    m : int
        Tile size.
    method : {"exact", "brute", "greedy", "greedy-prune"}, default "exact"
        ``"exact"``: the optimum, canonical among ties (min-cost flow, or
        pattern enumeration where ``K(m, n) <= 90``; same mask either way).
        ``"brute"``: scan every pattern of :func:`transposable_patterns`
        (``m <= 6``); the same mask as ``"exact"`` (the literal oracle: tiles
        too wide for int64, e.g. most float64 tiles, are scanned with Python
        ints, slowly). ``"greedy"``: the keep-form
        greedy (Hubara et al.'s code, apex ``mn_2d_greedy``): scan by
        descending score, keep while the row and column keep fewer than ``n``;
        may keep fewer than ``n`` (valid only in the relaxed ``<= n`` sense);
        kept sum >= 1/2 optimum for non-negative scores. ``"greedy-prune"``:
        the paper's edge-cover greedy: scan by ascending score, prune while the
        row or the column has pruned fewer than ``m - n``; prunes at least
        ``m - n``; pruned sum <= 2x the optimal pruned sum for non-negative
        scores. Greedy ties: lower flat index kept first.
    parallel : bool, default False
        Split the tiles over Numba's threads (``numba.set_num_threads``). Same
        mask.
    fill : {"exact", "at_most"}, default "exact"
        ``"exact"``: exactly ``n`` per tile row and column (the papers'
        problem; the default, unchanged bit for bit). ``"at_most"``: at most
        ``n`` (what sparse tensor cores accept), maximising the same kept sum;
        canonical among ties by the same rule (lexicographically greatest
        row-major keep-vector, so a tight zero score is kept whenever its row
        and column have room). Only for ``"exact"`` and ``"brute"``
        (``m <= 4``); Numba kernels (spec T2), tiles they hand back by the
        readable Python-int solver.
    backend : {"cpu", "cuda"}, default "cpu"
        ``"cuda"``: ``method="exact"`` by a CUDA kernel (Numba CUDA, one thread per
        tile, ``m <= 64``), the same mask bit for bit. ``scores`` may then also be any
        object with ``__cuda_array_interface__`` (a torch CUDA tensor, a CuPy or Numba
        device array), read on the device without a copy; tiles the kernel cannot hold
        in int64 units (most float64 tiles) are solved on the host. Spec T10.

    Returns
    -------
    mask : ndarray of bool, shape (R, C)
        ``True`` = kept. With ``backend="cuda"`` and device scores: a Numba device
        array (``__cuda_array_interface__``) on the scores' GPU.

    Raises
    ------
    TypeError
        If ``n``/``m`` are not integers or ``scores`` has another dtype.
    ValueError
        If ``n > m``, ``m < 1``, ``n < 0``; if ``scores`` is not 2-D, its shape
        is not a multiple of ``m``, or it holds NaN or an infinity; if
        ``method`` is unknown, or ``"brute"`` with ``m > 6``; if ``fill`` is
        unknown, ``"at_most"`` with a greedy method, or ``"at_most"`` with
        ``"brute"`` and ``m > 4``; if ``backend`` is unknown, or ``"cuda"`` with
        another method than ``"exact"`` or with ``m > 64``.
    RuntimeError
        With ``backend="cuda"`` where Numba cannot run CUDA kernels (one line).

    See Also
    --------
    transposable_certificate
        The optimum with dual potentials that prove it.
    optimality_gap
        How far another mask is from the optimum.
    nmref.explain.explain_transposable
        The solver's steps on one tile, in words.

    Notes
    -----
    Exact: per tile, integer scaling (O(m^2)), a start that satisfies
    complementary slackness, successive shortest paths for the remaining
    units (O(n m^3) worst case), then the canonical tie pass (O(m^2) per tied
    entry). Tiles whose dynamic range exceeds int64 (most float64 tiles) are
    solved on floor units and the result is certified exactly by integer
    potentials (Bellman-Ford on the slackness constraints); only a near tie
    below the truncation sends a tile to the Python-int reference (exact,
    about 1000x slower; a ``RuntimeWarning`` says so when 64 or more tiles go).
    ``fill="at_most"`` has the same certified path (on units that keep one
    sticky bit, with the certificate's sign and zero conditions; spec T2).
    A tile handed back costs O(n m^3 + m^4) on Python ints for either fill
    (successive shortest paths, then the tie pass without re-solves; spec T3).
    Any finite magnitudes are handled, 1e308 and subnormals included: no sum
    is rounded to float64 on the way to the mask (spec T5).

    References
    ----------
    .. [1] Hubara et al., "Accelerated Sparse Neural Training: A Provable and
       Efficient Method to Find N:M Transposable Masks", NeurIPS 2021, Sec. 4.1
       (min-cost flow) and Sec. 4.2 (the 2-approximation).

    Examples
    --------
    >>> scores = np.array([[4, 3, 2, 1],
    ...                    [1, 2, 3, 4],
    ...                    [4, 3, 2, 1],
    ...                    [1, 2, 3, 4]])
    >>> transposable_mask(scores, 2, 4).astype(int)
    array([[1, 1, 0, 0],
           [0, 0, 1, 1],
           [1, 1, 0, 0],
           [0, 0, 1, 1]])
    """
    check_method(method)
    check_backend(backend)
    if backend == "cuda":
        pattern = check_pattern(n, m)
        _check_method_fill(method, fill, pattern.m)
        if method != "exact":
            raise ValueError(f"backend='cuda' runs method='exact' only, not method={method!r}")
        return cuda_mask(scores, pattern, fill=fill, parallel=parallel)
    greedy = method in ("greedy", "greedy-prune")
    # The exact kernels detect NaN/inf themselves (and then raise the same error).
    array, pattern = prepare(scores, n, m, check_finite=greedy)
    _check_method_fill(method, fill, pattern.m)
    if fill == "at_most":
        return solve_at_most(array, pattern, method=method, parallel=parallel, sums=False).mask
    if greedy:
        return greedy_mask(array, pattern, prune_form=method == "greedy-prune")
    return exact_mask(array, pattern, method=method, parallel=parallel)


def _check_method_fill(method: str, fill: str, m: int) -> None:
    check_fill(fill)
    if fill == "at_most" and method not in ("exact", "brute"):
        raise ValueError(
            f"fill='at_most' applies to method='exact' or 'brute', not method={method!r} "
            "(the keep-greedy mask is already valid at most n)"
        )
    if method == "brute" and fill == "exact" and m > BRUTE_MAX_M:
        raise ValueError(f"method='brute' needs m <= {BRUTE_MAX_M}, got m={m}")
    if method == "brute" and fill == "at_most" and m > BRUTE_AT_MOST_MAX_M:
        raise ValueError(
            f"method='brute' with fill='at_most' needs m <= {BRUTE_AT_MOST_MAX_M}, got m={m}"
        )


def transposable_optimum(
    scores: ArrayLike, n: int, m: int, *, fill: Fill = "exact"
) -> NDArray[np.float64]:
    """Optimal kept sum of every tile (exact, then rounded once to float64).

    ``fill="at_most"``: the optimum over masks keeping at most ``n`` per tile row
    and column (never below the ``"exact"`` one).

    Returns
    -------
    ndarray of float64, shape (R // m, C // m)

    Raises
    ------
    ValueError, TypeError
        As :func:`transposable_mask`; ``ValueError`` also when a tile's optimum is
        beyond float64's range (a sum of scores near 1.8e308: spec T6).

    Examples
    --------
    >>> transposable_optimum(np.arange(16.0).reshape(4, 4), 2, 4)
    array([[60.]])
    """
    check_fill(fill)
    array, pattern = prepare(scores, n, m)
    result = solve_at_most(array, pattern) if fill == "at_most" else solve_exact(array, pattern)
    return _reported(result.kept_sum, "optimal kept sum", "transposable_optimum")


def _reported(values: NDArray[np.float64], quantity: str, function: str) -> NDArray[np.float64]:
    """``values`` (exact, rounded once) unless one rounded to +-inf: then spec T6's error."""
    beyond = np.argwhere(~np.isfinite(values))
    if len(beyond):
        where = f"tile {tuple(int(x) for x in beyond[0])}" if values.ndim else "the total"
        raise ValueError(
            f"scores: the {quantity} of {where} is beyond float64's range (magnitude above "
            f"{np.finfo(np.float64).max:.4g}), and {function} reports it as float64, exact "
            "then rounded once (spec T6); the mask itself is unaffected (transposable_mask)"
        )
    return values


def optimality_gap(
    scores: ArrayLike, mask: ArrayLike, n: int, m: int, *, fill: Fill | None = None
) -> OptimalityGap:
    """How much kept score ``mask`` loses against the optimum, per tile and in total.

    The gap is always taken against the optimum of the fill the mask is valid
    for, so it is **never negative**: zero iff the mask is optimal for that fill.

    Parameters
    ----------
    scores : array_like, shape (R, C)
        The scores the mask was meant to maximise.
    mask : array_like of bool, shape (R, C)
        The mask to score.
    fill : {"exact", "at_most"} or None, default None
        ``"exact"``: ``mask`` must keep exactly ``n`` per tile row and column;
        the gap is against the exactly-``n`` optimum. ``"at_most"``: ``mask``
        must keep at most ``n`` (for example a keep-greedy mask, or what a
        sparse tensor core accepts); the gap is against the at-most-``n``
        optimum (readable solver, slow). ``None`` (the call before fills
        existed, unchanged): any mask keeping at most ``n``, against the
        exactly-``n`` optimum, as before; where a tile of an under-filled mask
        keeps *more* than the exactly-``n`` optimum (possible: it is a better
        at-most mask) the gap would be negative, so ``ValueError`` is raised
        instead, naming ``fill="at_most"``.

    Returns
    -------
    OptimalityGap
        ``per_tile`` (float64, (R//m, C//m)) and ``total``: optimum minus the
        mask's kept sum, computed exactly and rounded once; ``>= 0``.

    Raises
    ------
    ValueError
        If the shapes differ; if the mask keeps more than ``n`` in some tile
        row or column; with ``fill="exact"``, if it keeps fewer than ``n``
        somewhere (it is only valid at most ``n``); with ``fill=None``, if the
        gap against the exactly-``n`` optimum would be negative; if a gap or the
        total is beyond float64's range (scores near 1.8e308: spec T6).

    Examples
    --------
    >>> scores = np.arange(16.0).reshape(4, 4)
    >>> optimality_gap(scores, transposable_mask(scores, 2, 4, method="greedy"), 2, 4).total
    0.0
    >>> tile = np.array([[1, 1, 1, 0]] * 3 + [[0, 0, 0, 0]])
    >>> better = transposable_mask(tile, 2, 4, fill="at_most")
    >>> optimality_gap(tile, better, 2, 4, fill="at_most").total
    0.0
    """
    if fill is not None:
        check_fill(fill)
    array, pattern = prepare(scores, n, m)
    kept = np.asarray(mask)
    if kept.shape != array.shape:
        raise ValueError(f"mask.shape={kept.shape} must equal scores.shape={array.shape}")
    # 0.5, 2, -1 or NaN are not "kept": only 0/1 (or bool), as backward_mask demands
    kept = to_bool_mask(kept, "mask")
    if not is_transposable(kept, pattern.n, pattern.m, exact=False):
        raise ValueError(
            f"mask keeps more than n={pattern.n} entries in some row or column of an "
            f"{pattern.m}x{pattern.m} tile; the gap is only defined for masks with at most n"
        )
    if fill == "exact" and not is_transposable(kept, pattern.n, pattern.m, exact=True):
        raise ValueError(
            f"fill='exact' needs exactly n={pattern.n} kept in every row and column of every "
            f"{pattern.m}x{pattern.m} tile (spec T1); this mask keeps fewer somewhere, so it is "
            "valid only at most n: score it with fill='at_most'"
        )
    kept = np.ascontiguousarray(kept, dtype=bool)
    if fill == "at_most":
        gaps = _at_most_gaps(array, pattern, kept)
    else:
        gaps = _exact_gaps(array, pattern, kept)
        if fill is None and any(g < 0 for g in gaps):
            t = next(index for index, g in enumerate(gaps) if g < 0)
            tile = divmod(t, array.shape[1] // pattern.m)
            raise ValueError(
                f"tile {tile} of the mask keeps more than the exactly-n optimum (it keeps fewer "
                f"than n={pattern.n} in some row or column and is a better at-most-n mask): "
                "a gap against the exactly-n optimum would be negative; pass fill='at_most' "
                "(spec T6)"
            )
    shape = (array.shape[0] // pattern.m, array.shape[1] // pattern.m)
    per_tile = np.array([rounded(g) for g in gaps], dtype=np.float64).reshape(shape)
    _reported(per_tile, "gap", "optimality_gap")
    total = _reported(np.array(rounded(sum(gaps, Fraction(0)))), "gap", "optimality_gap")
    return OptimalityGap(per_tile, float(total))


def _exact_gaps(array, pattern, kept) -> list[Fraction]:
    """Exactly-n optimum minus the kept sum, per tile (row-major), as exact rationals."""
    return _gaps(array, pattern, kept, solve_exact(array, pattern))


def _at_most_gaps(array, pattern, kept) -> list[Fraction]:
    """At-most-n optimum minus the kept sum, per tile (row-major), as exact rationals."""
    return _gaps(array, pattern, kept, solve_at_most(array, pattern))


def _gaps(array, pattern, kept, optimum) -> list[Fraction]:
    """``optimum`` (a solver's result) minus the kept sum of ``kept``, per tile, exact."""
    mine_units, mine_exponents, mine_status = masked_units(array, pattern, kept)
    tile_columns = array.shape[1] // pattern.m
    gaps: list[Fraction] = []
    for t in range(len(mine_units)):
        if t in optimum.kept_exact:
            best_value = dyadic(*optimum.kept_exact[t])
        else:
            best_value = dyadic(optimum.kept_units[t], optimum.exponents[t])
        if mine_status[t] == 0:
            # The kernels' exact kept units of the mask, at their own tile exponent.
            gaps.append(best_value - dyadic(mine_units[t], mine_exponents[t]))
            continue
        tile_row, tile_column = divmod(t, tile_columns)
        r0, c0 = tile_row * pattern.m, tile_column * pattern.m
        units, exponent = exact_integer_tile(array[r0 : r0 + pattern.m, c0 : c0 + pattern.m])
        mine = kept_total(units, kept[r0 : r0 + pattern.m, c0 : c0 + pattern.m])
        gaps.append(best_value - dyadic(mine, exponent))
    return gaps


def transposable_weight_mask(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    method: Method = "exact",
    parallel: bool = False,
) -> NDArray[np.bool_]:
    """Transposable N:M magnitude mask of a Linear or Conv weight.

    The weight is mapped to its ``[rows, reduction]`` matrix
    (:func:`nmref.layouts.to_reduction_matrix`), scored by ``|w|``, masked with
    :func:`transposable_mask` and mapped back. With the default layouts a tile
    spans ``m`` output channels x ``m`` input channels (Linear ``[out, in]``;
    Conv ``"channels"``: one kernel tap, so ``out`` must be a multiple of ``m``),
    which makes both the forward GEMM (reduces over ``in``) and the
    input-gradient GEMM (reduces over ``out``) N:M.

    Raises
    ------
    ValueError
        As :func:`transposable_mask` for the reduction matrix; for ``"channels"``
        also if ``out`` is not a multiple of ``m`` (a tile would straddle two
        kernel taps).

    Examples
    --------
    >>> w = np.array([[0.1, -0.9, 0.5, 0.3]] * 4) * np.arange(1, 5)[:, None]
    >>> transposable_weight_mask(w, 2, 4).sum(axis=0)
    array([2, 2, 2, 2])
    """
    pattern = check_pattern(n, m)
    array = as_scores(weight, "weight")
    # Located in the caller's weight, not in the internal reduction matrix.
    check_finite_scores(array, "weight")
    resolved = layout if layout is not None else ("linear" if array.ndim == 2 else "channels")
    check_transposable_layout(array.shape, pattern.m, resolved)
    matrix = to_reduction_matrix(to_magnitudes(array, "weight"), resolved)
    mask = transposable_mask(matrix, n, m, method=method, parallel=parallel)
    return from_reduction_matrix(mask, array.shape, resolved)
