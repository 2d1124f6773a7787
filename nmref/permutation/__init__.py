"""Channel permutations for N:M sparsity (Pool & Yu, NeurIPS 2021).

Permuting the input channels of a weight -- the columns of its reduction matrix
``[rows, in]`` -- changes which channels share an N:M group, hence how much
magnitude N:M pruning keeps. Permuting the output channels of the layer that
feeds it the same way leaves the network's function unchanged, so the gain is
free (``nmref permute`` does it on checkpoints). The objective (P1), the
arithmetic that makes the fast path equal to the readable one bit for bit
(P3), the searches (P4-P6) and the efficacy apex reports (P7) are specified in
``specs/permutation.md``::

    weight [rows, C]        permuted = weight[:, permutation]
      |  groups of m consecutive permuted columns ("stripes")
      v
    kept(permutation) = sum over stripes, rows of the n largest |w| in the stripe

Methods of :func:`search_channel_permutation`:

``"exhaustive"``
    The certified optimum over all ``C! / ((m!)**(C/m) (C/m)!)`` distinct
    partitions (:func:`count_column_partitions`), for ``C <= 20``.
``"stripes"``
    Pool & Yu's stripe-group search (their Sec. 4, apex ``Exhaustive_Search``):
    re-partition ``stripes_per_group`` stripes at a time, best groups first.
``"swaps"``
    The channel-swap local search (TETRIS adapted to N:M, apex ``Channel_Swap``).

Both searches work for any N:M, take optional bounded regressions
(``escape_attempts``, drawn from ``rng``), and return the lexicographically
first canonical permutation of their partition.

References
----------
.. [1] J. Pool, C. Yu, "Channel Permutations for N:M Sparsity", NeurIPS 2021.
   Code: NVIDIA/apex ``apex/contrib/sparsity/permutation_search_kernels``
   (``exhaustive_search.py``, ``channel_swap.py``, ``permutation_utilities.py``)
   and ``permutation_tests/permutation_test.py`` (efficacy).
.. [2] Y. Ji et al., "TETRIS: TilE-matching the TRemendous Irregular
   Sparsity", NeurIPS 2018 (the channel-swap search).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import (
    as_float_array,
    check_choice,
    check_count,
    check_permutation,
    check_positive_integer,
    is_integer,
)
from nmref.layouts import Layout, default_layout, to_reduction_matrix
from nmref.patterns import Pattern, check_pattern
from nmref.permutation.partitions import (
    canonical_permutation,
    count_column_partitions,
    local_partition_table,
)

__all__ = [
    "EXHAUSTIVE_MAX_COLUMNS",
    "ChannelPermutation",
    "count_column_partitions",
    "permutation_efficacy",
    "permutation_objective",
    "row_bound",
    "search_channel_permutation",
]

Method = Literal["exhaustive", "stripes", "swaps"]
Implementation = Literal["numba", "numpy"]
_METHODS = ("exhaustive", "stripes", "swaps")
_IMPLEMENTATIONS = ("numba", "numpy")

#: The exhaustive search keeps two float64/int64 tables of ``2**C`` entries.
EXHAUSTIVE_MAX_COLUMNS = 20
#: Stripe-group tables above this many partitions are refused (3 stripes of 8: 2.6e7).
STRIPE_GROUP_MAX_PARTITIONS = 1_000_000
#: Passes of the blocked stripe search before it gives up converging.
MAX_BLOCK_PASSES = 64


@dataclass(frozen=True)
class ChannelPermutation:
    """Result of :func:`search_channel_permutation`.

    Attributes
    ----------
    permutation : ndarray of int64, shape (C,)
        Canonical (P2): ``weight[:, permutation]`` is the permuted reduction matrix.
    kept : float
        :func:`permutation_objective` of ``permutation``.
    start_kept, identity_kept : float
        The objective of the starting permutation and of the identity.
    bound : float
        :func:`row_bound`, the kept magnitude of per-row unstructured pruning.
    efficacy : float
        :func:`permutation_efficacy` of ``permutation`` (apex's definition, P7).
    method : str
    moves, escapes_used, rounds : int
        Moves applied, bounded regressions spent, search rounds run (0 for
        ``"exhaustive"``).
    converged : bool
        False when a round or pass limit stopped the search.
    """

    permutation: NDArray[np.int64]
    kept: float
    start_kept: float
    identity_kept: float
    bound: float
    efficacy: float
    method: str
    moves: int
    escapes_used: int
    rounds: int
    converged: bool


# ----------------------------------------------------------------------------
# Validation and preparation
# ----------------------------------------------------------------------------


def _magnitudes(weight: ArrayLike, pattern: Pattern, layout: Layout | None) -> NDArray[np.float64]:
    """``|W|`` of the reduction matrix, transposed to ``(columns, rows)``, float64."""
    array = as_float_array(weight, "weight", "NaN has no magnitude, so no permutation is best")
    if array.ndim < 2:
        raise ValueError(f"weight must have ndim >= 2 ([out, in] or [out, in, *kernel]), "
                         f"got ndim={array.ndim}")  # fmt: skip
    resolved = default_layout(array.ndim) if layout is None else layout
    if resolved == "flat":
        raise ValueError(
            "layout='flat' groups (in, *kernel) entries, not input channels; channel "
            "permutations need layout='linear' (2-D) or 'channels'"
        )
    matrix = to_reduction_matrix(array, resolved)
    if not np.isfinite(matrix).all():
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(matrix))[0])
        raise ValueError(
            f"weight contains an infinity (reduction-matrix index {index}); the kept "
            "magnitude is a sum, so channel permutations need finite weights"
        )
    if matrix.shape[1] % pattern.m:
        raise ValueError(
            f"weight has {matrix.shape[1]} input channels (reduction-matrix columns); "
            f"they must be a multiple of m={pattern.m} to form N:M groups"
        )
    # float16/32 magnitudes are exact in float32, which halves the kernels' memory traffic;
    # every sum is float64 all the same (P3).
    exact = np.float32 if matrix.dtype.itemsize <= 4 else np.float64
    return np.ascontiguousarray(np.abs(matrix.astype(exact)).T)


def _check_permutation(permutation: ArrayLike, columns: int, name: str) -> NDArray[np.int64]:
    return check_permutation(permutation, columns, name, entry="input channel").astype(np.int64)


def _implementation(implementation: str) -> ModuleType:
    check_choice(implementation, "implementation", _IMPLEMENTATIONS)
    if implementation == "numpy":
        from nmref.permutation import reference

        return reference
    from nmref.permutation import _kernels  # numba: imported on first use

    return _kernels


def _generator(rng: object) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if is_integer(rng):
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng={rng!r} must be a numpy.random.Generator or an int seed")


# ----------------------------------------------------------------------------
# Objective and efficacy
# ----------------------------------------------------------------------------


def permutation_objective(
    weight: ArrayLike,
    n: int,
    m: int,
    permutation: ArrayLike | None = None,
    *,
    layout: Layout | None = None,
) -> float:
    """Kept magnitude after N:M pruning of the column-permuted weight (P1).

    .. math::

        \\mathrm{kept}(\\pi) = \\sum_{g=0}^{C/m-1} \\sum_{r}
            \\operatorname{top}_n \\{ |W_{r,\\pi(j)}| : gm \\le j < (g+1)m \\}

    Parameters
    ----------
    weight : array_like of float16/32/64, shape (out, in) or (out, in, *kernel)
        Permuted along ``in`` (the reduction-matrix columns of ``layout``).
    n, m : int
        Keep ``n`` of every ``m``.
    permutation : array_like of int, shape (in,), optional
        ``weight[:, permutation]`` is pruned; the identity by default.
    layout : {"linear", "channels"}, optional
        As :func:`nmref.to_reduction_matrix`; ``"flat"`` is refused.

    Returns
    -------
    float
        Summed in float64 in the order of P3: it depends only on the partition,
        so it is exactly invariant under reordering inside or among groups.

    Raises
    ------
    TypeError
        A non-float weight, a non-integer permutation, non-integer ``n``/``m``.
    ValueError
        NaN or infinity, ``in`` not a multiple of ``m``, a permutation of the
        wrong shape or with repeats, ``layout="flat"``.

    Notes
    -----
    O(rows * in * m) (a selection of ``n`` per group and row).

    Examples
    --------
    >>> w = np.array([[4.0, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 1.0]])
    >>> permutation_objective(w, 1, 2)           # groups {0,1}, {2,3}
    10.0
    >>> permutation_objective(w, 1, 2, [0, 2, 1, 3])  # {0,2} and {1,3}: 4 + 2
    6.0
    """
    pattern = check_pattern(n, m)
    magnitudes = _magnitudes(weight, pattern, layout)
    columns = magnitudes.shape[0]
    if permutation is None:
        order = np.arange(columns, dtype=np.int64)
    else:
        order = _check_permutation(permutation, columns, "permutation")
    from nmref.permutation import reference

    return reference.objective(magnitudes, order, pattern.n, pattern.m)


def row_bound(weight: ArrayLike, n: int, m: int, *, layout: Layout | None = None) -> float:
    """Kept magnitude if every row kept its ``in * n / m`` largest entries (P7).

    No column permutation keeps more: every N:M mask keeps exactly that many
    entries per row. apex calls it "50% rows" (the 100% efficacy mark). O(size log in).
    """
    pattern = check_pattern(n, m)
    return _row_bound(_magnitudes(weight, pattern, layout), pattern)


def permutation_efficacy(
    weight: ArrayLike,
    n: int,
    m: int,
    permutation: ArrayLike,
    *,
    layout: Layout | None = None,
) -> float:
    """apex's "efficacy": the share of the identity's loss to the row bound recovered (P7).

    .. math::

        \\mathrm{efficacy}(\\pi) = \\frac{\\mathrm{kept}(\\pi) - \\mathrm{kept}(\\mathrm{id})}
            {\\mathrm{bound} - \\mathrm{kept}(\\mathrm{id})}

    with ``bound`` = :func:`row_bound`; 1.0 when the identity already reaches
    the bound. A fraction (apex prints it times 100). Can be negative (worse
    than the identity); at most 1.

    Raises
    ------
    As :func:`permutation_objective`.

    Examples
    --------
    >>> w = np.array([[4.0, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 1.0]])
    >>> permutation_efficacy(w, 1, 2, [0, 2, 1, 3])   # identity 10 = bound 10
    1.0
    """
    identity = permutation_objective(weight, n, m, layout=layout)
    kept = permutation_objective(weight, n, m, permutation, layout=layout)
    bound = row_bound(weight, n, m, layout=layout)
    return _efficacy(kept, identity, bound)


def _efficacy(kept: float, identity: float, bound: float) -> float:
    if bound == identity:
        return 1.0
    return (kept - identity) / (bound - identity)


# ----------------------------------------------------------------------------
# Searches
# ----------------------------------------------------------------------------


def search_channel_permutation(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    method: Method = "stripes",
    start: ArrayLike | None = None,
    stripes_per_group: int = 2,
    escape_attempts: int = 0,
    block_stripes: int | None = None,
    max_rounds: int = 10_000,
    rng: np.random.Generator | int | None = None,
    layout: Layout | None = None,
    implementation: Implementation = "numba",
) -> ChannelPermutation:
    """Find an input-channel permutation that keeps more magnitude under N:M pruning.

    Maximises :func:`permutation_objective` over permutations of the
    reduction-matrix columns (P4-P6 of ``specs/permutation.md``).

    Parameters
    ----------
    weight : array_like of float16/32/64, shape (out, in) or (out, in, *kernel)
    n, m : int
        Keep ``n`` of every ``m`` (any N:M).
    method : {"stripes", "swaps", "exhaustive"}, default "stripes"
        Pool & Yu's stripe-group search, the channel-swap search, or the
        certified optimum (``in <= EXHAUSTIVE_MAX_COLUMNS``).
    start : array_like of int, shape (in,), optional
        Starting permutation of the searches (the identity by default). The
        result is never worse than it.
    stripes_per_group : int, default 2
        Stripes re-partitioned together by ``"stripes"`` (apex's
        ``stripe_group_size`` is this times ``m`` columns; its default 8 is 2
        stripes of 4). ``"swaps"`` always works on pairs.
    escape_attempts : int, default 0
        Bounded regressions (apex's ``escape_attempts``): when a round applies
        nothing, swap two random columns of a random stripe group and go on;
        the best permutation seen is returned. Needs ``rng``; not with blocks.
    block_stripes : int, optional
        Restrict stripe groups to blocks of this many consecutive stripes,
        alternating the block boundaries between passes (P6); for matrices
        too wide for all ``C(C/m, stripes_per_group)`` groups. ``None``: one block.
    max_rounds : int, default 10000
        Rounds per search (per block); ``converged`` is False if reached.
    rng : numpy.random.Generator or int, optional
        Source of the escape draws; required iff ``escape_attempts > 0``.
    layout : {"linear", "channels"}, optional
    implementation : {"numba", "numpy"}, default "numba"
        The compiled kernels or the readable NumPy twins (same bits, tested).

    Returns
    -------
    ChannelPermutation

    Raises
    ------
    TypeError
        Bad dtypes or non-integer counts, an ``rng`` that is not a Generator or int.
    ValueError
        As :func:`permutation_objective`; an unknown method; ``in`` over
        ``EXHAUSTIVE_MAX_COLUMNS`` for ``"exhaustive"``; escapes without
        ``rng`` or with blocks; a stripe-group table over
        ``STRIPE_GROUP_MAX_PARTITIONS``.

    Notes
    -----
    Complexity: ``"exhaustive"`` O(2**C * C(C-1, m-1)) after O(C(C, m) rows m)
    group values; a stripes round evaluates the stripe groups touching a
    changed stripe, each O(C(k m, m) rows m) with ``k = stripes_per_group``;
    a swaps evaluation is O(m**2 rows m). Deterministic: the same input and
    ``rng`` state give the same permutation.

    Examples
    --------
    >>> w = np.array([[4.0, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 1.0]])
    >>> result = search_channel_permutation(w, 1, 2, method="exhaustive")
    >>> result.permutation.tolist(), result.kept
    ([0, 1, 2, 3], 10.0)
    """
    pattern = check_pattern(n, m)
    check_choice(method, "method", _METHODS)
    kernels = _implementation(implementation)
    stripes_per_group = check_positive_integer(stripes_per_group, "stripes_per_group")
    escape_attempts = check_count(escape_attempts, "escape_attempts")
    max_rounds = check_positive_integer(max_rounds, "max_rounds")
    magnitudes = _magnitudes(weight, pattern, layout)
    columns = magnitudes.shape[0]
    stripes = columns // pattern.m
    if block_stripes is not None:
        block_stripes = check_positive_integer(block_stripes, "block_stripes")
        if block_stripes < stripes_per_group:
            raise ValueError(
                f"block_stripes={block_stripes} must be >= stripes_per_group={stripes_per_group}"
            )
    start_order = (
        np.arange(columns, dtype=np.int64)
        if start is None
        else _check_permutation(start, columns, "start")
    )
    if escape_attempts and rng is None:
        raise ValueError(
            f"escape_attempts={escape_attempts} needs rng (an int seed or a "
            "numpy.random.Generator): there is no hidden global seed"
        )
    blocked = block_stripes is not None and block_stripes < stripes
    if escape_attempts and blocked:
        raise ValueError(
            f"escape_attempts={escape_attempts} must be 0 with block_stripes={block_stripes} "
            f"< {stripes} stripes (escapes are defined for one block)"
        )
    identity = kernels.objective(magnitudes, np.arange(columns, dtype=np.int64), pattern.n,
                                 pattern.m)  # fmt: skip
    start_kept = kernels.objective(magnitudes, start_order, pattern.n, pattern.m)
    moves = escapes_used = rounds = 0
    converged = True

    if method == "exhaustive":
        if columns > EXHAUSTIVE_MAX_COLUMNS:
            raise ValueError(
                f"method='exhaustive' takes in <= {EXHAUSTIVE_MAX_COLUMNS} input channels, got "
                f"{columns} ({count_column_partitions(columns, pattern.m)} partitions); use "
                "method='stripes'"
            )
        if columns == 0:
            order = np.zeros(0, dtype=np.int64)
        else:
            order, _ = kernels.exhaustive(magnitudes, pattern.n, pattern.m)
    else:
        swaps = method == "swaps"
        k = 2 if swaps else stripes_per_group
        if swaps:
            subsets = np.zeros((1, pattern.m), dtype=np.int64)
            partitions = np.zeros((1, k), dtype=np.int64)
        else:
            count = count_column_partitions(k * pattern.m, pattern.m)
            if count > STRIPE_GROUP_MAX_PARTITIONS:
                raise ValueError(
                    f"stripes_per_group={k} with m={pattern.m} has {count} partitions per "
                    f"stripe group, over {STRIPE_GROUP_MAX_PARTITIONS}; use fewer stripes"
                )
            subsets, partitions = local_partition_table(k, pattern.m)
        escapes = np.zeros((0, 3), dtype=np.int64)
        if escape_attempts:
            generator = _generator(rng)
            if stripes >= k:
                draws = [math.comb(stripes, k), pattern.m, pattern.m]
                escapes = np.stack(
                    [generator.integers(0, high, size=escape_attempts) for high in draws], axis=1
                ).astype(np.int64)
        if blocked:
            order, moves, rounds, converged = _blocked_search(
                kernels, magnitudes, pattern, start_order, k, swaps, subsets, partitions,
                max_rounds, block_stripes,
            )  # fmt: skip
        elif stripes >= k:
            found, moves, escapes_used, rounds, converged = kernels.search(
                magnitudes, pattern.n, pattern.m, start_order, np.arange(stripes, dtype=np.int64),
                k, swaps, subsets, partitions, escapes, max_rounds,
            )  # fmt: skip
            order = np.asarray(found, dtype=np.int64)
        else:
            order = start_order
    order = canonical_permutation(order, pattern.m)
    kept = kernels.objective(magnitudes, order, pattern.n, pattern.m)
    if kept < start_kept:  # the searches' bookkeeping sums in another order (P5)
        order = canonical_permutation(start_order, pattern.m)
        kept = start_kept
    bound = _row_bound(magnitudes, pattern)
    return ChannelPermutation(
        permutation=order,
        kept=float(kept),
        start_kept=float(start_kept),
        identity_kept=float(identity),
        bound=bound,
        efficacy=_efficacy(float(kept), float(identity), bound),
        method=method,
        moves=int(moves),
        escapes_used=int(escapes_used),
        rounds=int(rounds),
        converged=bool(converged),
    )


def _row_bound(magnitudes: NDArray[np.float64], pattern: Pattern) -> float:
    columns, rows = magnitudes.shape
    keep = columns // pattern.m * pattern.n
    if keep == 0 or rows == 0:
        return 0.0
    largest_first = np.sort(magnitudes.astype(np.float64), axis=0)[::-1][:keep]
    return float(np.cumsum(np.cumsum(largest_first, axis=0)[-1])[-1])


def _blocked_search(
    kernels: ModuleType, magnitudes: NDArray[np.float64], pattern: Pattern,
    start: NDArray[np.int64], k: int, swaps: bool, subsets: NDArray[np.int64],
    partitions: NDArray[np.int64], max_rounds: int, block_stripes: int,
) -> tuple[NDArray[np.int64], int, int, bool]:  # fmt: skip
    """The search inside blocks of consecutive stripes, block boundaries alternating (P6).

    Pass ``p`` cuts the stripes at ``offset + j * block_stripes`` with ``offset``
    0 on even passes and ``block_stripes // 2`` on odd ones, and runs the search
    to convergence in every piece of at least ``k`` stripes, in stripe order.
    Stops after the first pass from the second on that applies no move.
    """
    stripes = magnitudes.shape[0] // pattern.m
    order = start.copy()
    moves = rounds = 0
    converged = True
    none = np.zeros((0, 3), dtype=np.int64)
    for index in range(MAX_BLOCK_PASSES):
        offset = 0 if index % 2 == 0 else block_stripes // 2
        cuts = [0, *range(offset, stripes, block_stripes), stripes]
        pass_moves = 0
        for low, high in itertools.pairwise(cuts):
            if high - low < k:
                continue
            found, block_moves, _, block_rounds, block_converged = kernels.search(
                magnitudes, pattern.n, pattern.m, order, np.arange(low, high, dtype=np.int64),
                k, swaps, subsets, partitions, none, max_rounds,
            )  # fmt: skip
            order = np.asarray(found, dtype=np.int64)
            pass_moves += int(block_moves)
            rounds += int(block_rounds)
            converged = converged and bool(block_converged)
        moves += pass_moves
        if index >= 1 and pass_moves == 0:
            return order, moves, rounds, converged
    return order, moves, rounds, False
