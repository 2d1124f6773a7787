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
* **Exact arithmetic.** Scores are compared as exact rationals: each tile is
  scaled by a power of two to integers (int64 in the kernels, Python ints in
  the reference), so rounding never decides a tie.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from fractions import Fraction
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref import flow
from nmref.layouts import Layout, from_reduction_matrix, to_reduction_matrix
from nmref.masks import _as_scores, _Descending, is_nm, to_magnitudes
from nmref.patterns import Pattern, check_pattern

__all__ = [
    "Certificate",
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

Method = Literal["exact", "brute", "greedy", "greedy-prune"]
METHODS: tuple[str, ...] = ("exact", "brute", "greedy", "greedy-prune")

# The brute-force table holds K(m, n) patterns; K(6, 3) = 297200 is the largest
# that is still practical (K(7, 3) = 26.9 million, K(8, 4) = 1.2e11).
BRUTE_MAX_M = 6
# Warn when this many tiles need the (slow) Python-int path.
_SLOW_TILES_WARNING = 64
# At or below this pattern count the "exact" method enumerates patterns (faster
# than the flow solver and exact by construction).
ENUMERATION_MAX_PATTERNS = 90


class Certificate(NamedTuple):
    """An optimal mask with dual potentials proving its optimality.

    Attributes
    ----------
    mask : ndarray of bool, shape (R, C)
    row_potentials : ndarray of float64, shape (R, C // m)
        ``u`` of row ``r`` inside the tile column ``c // m``.
    column_potentials : ndarray of float64, shape (R // m, C)
        ``v`` of column ``c`` inside the tile row ``r // m``.
    """

    mask: NDArray[np.bool_]
    row_potentials: NDArray[np.float64]
    column_potentials: NDArray[np.float64]


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


# ----------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------


def _check_matrix(array: NDArray, pattern: Pattern, name: str) -> None:
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (rows, columns), got ndim={array.ndim}; "
            "for Linear/Conv weights use transposable_weight_mask"
        )
    rows, columns = array.shape
    if rows % pattern.m or columns % pattern.m:
        raise ValueError(
            f"{name}.shape={array.shape}: both dimensions must be multiples of m={pattern.m} "
            f"(a transposable mask is made of aligned {pattern.m}x{pattern.m} tiles)"
        )


def _check_finite(array: NDArray, name: str) -> None:
    if array.dtype.kind != "f":
        return
    finite = np.isfinite(array)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        value = array[index]
        what = "NaN" if np.isnan(value) else "an infinity"
        raise ValueError(
            f"{name} contains {what} at index {index}; transposable masks need finite "
            "scores (the objective is a sum)"
        )


def _prepare(
    scores: ArrayLike, n: int, m: int, name: str = "scores", *, check_finite: bool = True
) -> tuple[NDArray, Pattern]:
    pattern = check_pattern(n, m)
    array = _as_scores(scores, name)
    _check_matrix(array, pattern, name)
    if check_finite:
        _check_finite(array, name)
    return array, pattern


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {METHODS}")


def _tiles(array: NDArray, m: int):
    """Yield ``(tile_row, tile_column, tile)`` in row-major tile order."""
    for tile_row in range(array.shape[0] // m):
        for tile_column in range(array.shape[1] // m):
            r0, c0 = tile_row * m, tile_column * m
            yield tile_row, tile_column, array[r0 : r0 + m, c0 : c0 + m]


# ----------------------------------------------------------------------------
# Exact integers and the canonical pattern order
# ----------------------------------------------------------------------------


def exact_integer_tile(tile: ArrayLike) -> tuple[list[list[int]], int]:
    """Scale a tile of finite scores to exact Python integers.

    Returns ``(units, exponent)`` with ``tile == units * 2**exponent`` exactly.
    Every finite float is a dyadic rational, so one power of two turns the whole
    tile into integers without rounding; sums and comparisons of units are then
    exact, and scaling by a positive constant changes neither the optimum nor
    which masks tie.

    Examples
    --------
    >>> exact_integer_tile([[0.5, 0.25], [1.0, 0.0]])
    ([[2, 1], [4, 0]], -2)
    """
    array = np.asarray(tile)
    if array.dtype.kind in "biu":
        return [[int(x) for x in row] for row in array], 0
    fractions = [[Fraction(float(x)) for x in row] for row in array]
    denominator = max((f.denominator for row in fractions for f in row), default=1)
    units = [[int(f * denominator) for f in row] for row in fractions]
    return units, -(denominator.bit_length() - 1)


@functools.lru_cache(maxsize=32)
def _pattern_table(n: int, m: int) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """Row patterns and tile patterns (as row-pattern indices) in canonical order.

    Row patterns are the ``comb(m, n)`` kept-index tuples in lexicographic
    order, (0, 1) < (0, 2) < ... which is *descending* order of their keep bits
    read left to right. Tile patterns are ordered lexicographically by their row
    pattern indices, i.e. by descending row-major keep bits: the first maximum
    in this order is the canonical optimum.
    """
    row_choices = list(itertools.combinations(range(m), n))
    choice_masks = np.zeros((len(row_choices), m), dtype=bool)
    for index, choice in enumerate(row_choices):
        choice_masks[index, list(choice)] = True
    # Breadth-first over rows, vectorised: expanding every partial pattern by
    # every row choice in order keeps the lexicographic order of the result.
    choice_counts = choice_masks.astype(np.int64)
    table = np.zeros((1, 0), dtype=np.int64)
    counts = np.zeros((1, m), dtype=np.int64)
    for row in range(m - 1):
        rows_left_after = m - row - 1
        new_counts = (counts[:, None, :] + choice_counts[None, :, :]).reshape(-1, m)
        parents = np.repeat(np.arange(len(table)), len(row_choices))
        choices = np.tile(np.arange(len(row_choices)), len(table))
        # Every column must stay <= n and still be able to reach n.
        feasible = ((new_counts <= n) & (n - new_counts <= rows_left_after)).all(axis=1)
        table = np.hstack([table[parents[feasible]], choices[feasible, None]])
        counts = new_counts[feasible]
    # The last row is forced: it fills every column up to n.
    if m:
        powers = 1 << np.arange(m, dtype=np.int64)
        index_of_bits = np.full(1 << m, -1, dtype=np.int64)
        index_of_bits[choice_counts @ powers] = np.arange(len(row_choices))
        last = index_of_bits[(n - counts) @ powers]
        table = np.hstack([table, last[:, None]])
    table = np.ascontiguousarray(table, dtype=np.int64)
    choice_masks.setflags(write=False)
    table.setflags(write=False)
    return choice_masks, table


def transposable_patterns(n: int, m: int) -> NDArray[np.bool_]:
    """Every valid ``m x m`` transposable N:M tile pattern, in canonical order.

    Canonical order: descending row-major keep bits (the pattern that keeps the
    lowest flat indices comes first). There are ``K(m, n)`` patterns
    (:func:`nmref.diversity.count_transposable_patterns`): 90 for 2:4.

    Raises
    ------
    ValueError
        If ``m > 6`` (``K(7, 3)`` is already 26.9 million patterns).

    Examples
    --------
    >>> patterns = transposable_patterns(2, 4)
    >>> len(patterns)
    90
    >>> patterns[0].astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 0, 0],
           [0, 0, 1, 1],
           [0, 0, 1, 1]])
    """
    pattern = check_pattern(n, m)
    if pattern.m > BRUTE_MAX_M:
        raise ValueError(
            f"m={pattern.m} is too large to enumerate patterns (brute force needs m <= 6)"
        )
    choices, table = _pattern_table(pattern.n, pattern.m)
    return choices[table]


# ----------------------------------------------------------------------------
# Reference implementation: one tile at a time, plain Python, exact integers
# ----------------------------------------------------------------------------


def _brute_tile(units: list[list[int]], pattern: Pattern) -> tuple[list[list[bool]], int]:
    """First pattern of maximal kept sum in canonical order (exact ints)."""
    choices, table = _pattern_table(pattern.n, pattern.m)
    best_sum = None
    best_index = 0
    for index, rows in enumerate(table):
        total = sum(units[i][j] for i in range(pattern.m) for j in np.flatnonzero(choices[rows[i]]))
        if best_sum is None or total > best_sum:
            best_sum, best_index = total, index
    rows = table[best_index]
    return [[bool(choices[rows[i]][j]) for j in range(pattern.m)] for i in range(pattern.m)], int(
        best_sum or 0
    )


def _greedy_tile(tile: NDArray, pattern: Pattern, prune_form: bool) -> list[list[bool]]:
    """Greedy of Hubara et al. Sec. 4.2 in keep form or prune form (see the spec)."""
    n, m = pattern
    # Descending score, lower flat index first among equals; exact comparisons.
    order = sorted(range(m * m), key=lambda k: (_Descending(tile[k // m, k % m]), k))
    row_count = [0] * m
    column_count = [0] * m
    if not prune_form:
        kept = [[False] * m for _ in range(m)]
        for k in order:
            i, j = divmod(k, m)
            if row_count[i] < n and column_count[j] < n:
                kept[i][j] = True
                row_count[i] += 1
                column_count[j] += 1
        return kept
    kept = [[True] * m for _ in range(m)]
    for k in reversed(order):  # ascending score, higher flat index first among equals
        i, j = divmod(k, m)
        if row_count[i] < m - n or column_count[j] < m - n:
            kept[i][j] = False
            row_count[i] += 1
            column_count[j] += 1
    return kept


def transposable_mask_reference(
    scores: ArrayLike, n: int, m: int, *, method: Method = "exact"
) -> NDArray[np.bool_]:
    """Plain-Python transposable mask: the teaching version of :func:`transposable_mask`.

    Same contract, inputs and errors as :func:`transposable_mask`; loops over
    tiles in Python: ``"exact"`` runs :func:`nmref.flow.solve_tile` on exact
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
    _check_method(method)
    array, pattern = _prepare(scores, n, m)
    if method == "brute" and pattern.m > BRUTE_MAX_M:
        raise ValueError(f"method='brute' needs m <= {BRUTE_MAX_M}, got m={pattern.m}")
    mask = np.zeros(array.shape, dtype=bool)
    for tile_row, tile_column, tile in _tiles(array, pattern.m):
        if method in ("greedy", "greedy-prune"):
            kept = _greedy_tile(tile, pattern, prune_form=method == "greedy-prune")
        else:
            units, _ = exact_integer_tile(tile)
            if method == "brute":
                kept, _ = _brute_tile(units, pattern)
            else:
                kept, _, _ = flow.solve_tile(units, pattern.n)
        r0, c0 = tile_row * pattern.m, tile_column * pattern.m
        mask[r0 : r0 + pattern.m, c0 : c0 + pattern.m] = kept
    return mask


# ----------------------------------------------------------------------------
# Fast implementation (Numba), tested identical to the reference
# ----------------------------------------------------------------------------


def _kernel_bits(array: NDArray) -> tuple[NDArray, int] | None:
    """IEEE bits the kernels decode exactly, or None when only Python ints are exact."""
    if array.dtype == np.float64:
        return np.ascontiguousarray(array).view(np.uint64), 52
    if array.dtype == np.float32:
        return np.ascontiguousarray(array).view(np.uint32), 23
    if array.dtype.kind == "f" or array.dtype.kind == "b":  # float16 and bool: exact in float32
        return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32), 23
    # Integers: exact in float64 up to 2**53 in magnitude.
    if array.size and array.dtype.itemsize >= 8:
        low, high = int(array.min()), int(array.max())
        if max(abs(low), abs(high)) > 2**53:
            return None
    if array.dtype.itemsize <= 2:
        return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32), 23
    return np.ascontiguousarray(array, dtype=np.float64).view(np.uint64), 52


class _ExactResult(NamedTuple):
    mask: NDArray[np.bool_]
    kept_sum: NDArray[np.float64]  # per tile, (R/m, C/m)
    kept_units: NDArray[np.int64]  # per tile (row-major), valid where status is SOLVED
    exponents: NDArray[np.int64]
    kept_exact: dict[int, tuple[int, int]]  # tiles solved in Python: (units, exponent)
    row_potentials: NDArray[np.float64] | None
    column_potentials: NDArray[np.float64] | None


def _solve_exact(
    array: NDArray,
    pattern: Pattern,
    *,
    method: str = "exact",
    parallel: bool = False,
    potentials: bool = False,
    sums: bool = True,
) -> _ExactResult:
    """Kernel driver for the exact methods; tiles the kernels cannot solve go to Python."""
    from nmref import _flow_kernels as kernels  # deferred: importing numba costs ~0.3 s

    n, m = pattern
    rows, columns = array.shape
    tile_rows, tile_columns = rows // m, columns // m
    tiles = tile_rows * tile_columns
    # Every entry is written: by a kernel, or by the Python path for the tiles
    # a kernel hands back.
    mask = np.empty(array.shape, dtype=bool)
    status = np.full(tiles, kernels.TOO_WIDE, dtype=np.int8)
    kept_units = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    row_units = np.zeros((tiles, m), dtype=np.int64)
    column_units = np.zeros((tiles, m), dtype=np.int64)
    prepared = _kernel_bits(array) if tiles else None
    # method="flow" (private) forces the flow kernel, so tests can compare it
    # with the enumeration on small m.
    use_enumeration = method == "brute" or (
        method == "exact" and not potentials and _enumeration_is_fast(pattern)
    )
    if prepared is not None:
        bits, fraction_bits = prepared
        max_bits = kernels.max_unit_bits(m)
        if use_enumeration:
            choices, table = _pattern_table(n, m)
            choice_columns = np.zeros((len(choices), max(n, 1)), dtype=np.int64)
            for index, choice in enumerate(choices):
                choice_columns[index, :n] = np.flatnonzero(choice)
            # Each row choice as 4 mask bytes in one word (used when m == 4).
            choice_words = (choices[:, :4].astype(np.uint32) << (8 * np.arange(min(m, 4)))).sum(
                axis=1, dtype=np.uint32
            )
            floats = bits.view(np.float32) if fraction_bits == 23 else np.empty((0, 0), np.float32)
            mask_words = mask.view(np.uint32) if m == 4 else np.empty((0, 0), np.uint32)
            arguments = (bits, floats, fraction_bits, m, n, max_bits, choice_columns, table,
                         choice_words)  # fmt: skip
            outputs = (mask, mask_words, status, kept_units, exponents)
            if parallel:
                import numba

                kernels.enumerate_tiles_parallel(*arguments, 4 * numba.get_num_threads(), *outputs)
            else:
                kernels.enumerate_tiles(*arguments, *outputs)
        else:
            _flow_tiles(
                kernels, bits, fraction_bits, pattern, np.arange(tiles, dtype=np.int64),
                parallel, mask, status, kept_units, exponents, row_units, column_units,
            )  # fmt: skip
        if method == "exact":
            # Tiles too wide for the enumeration's int64 units: the flow kernel's
            # certified truncated path solves most of them exactly.
            wide = np.flatnonzero(status == kernels.TOO_WIDE)
            if use_enumeration and len(wide):
                _flow_tiles(
                    kernels, bits, fraction_bits, pattern, wide.astype(np.int64), parallel,
                    mask, status, kept_units, exponents, row_units, column_units,
                )  # fmt: skip
    if (status == kernels.NOT_FINITE).any():
        # The kernels see every value, so the caller may skip its own pass over
        # the scores; this names the first bad index.
        _check_finite(array, "scores")
    kept_sum = np.ldexp(kept_units.astype(np.float64), exponents.astype(np.int32))
    # Exact kept sums per tile as (units, exponent): Python ints only where needed.
    kept_exact: dict[int, tuple[int, int]] = {}
    row_potentials = column_potentials = None
    truncated = np.flatnonzero(status == kernels.SOLVED_TRUNCATED)
    solved = (status == kernels.SOLVED) | (status == kernels.SOLVED_TRUNCATED)
    if sums:
        # The mask of a certified truncated tile is exact; its kept sum in floor
        # units is not, so recompute it from the scores with Python ints.
        for t in truncated:
            tile_row, tile_column = divmod(int(t), tile_columns)
            r0, c0 = tile_row * m, tile_column * m
            units, exponent = exact_integer_tile(array[r0 : r0 + m, c0 : c0 + m])
            kept_tile = mask[r0 : r0 + m, c0 : c0 + m]
            total = sum(units[i][j] for i in range(m) for j in range(m) if kept_tile[i, j])
            kept_exact[int(t)] = (total, exponent)
            kept_sum[t] = float(Fraction(total) * Fraction(2) ** exponent)
    else:
        kept_sum[truncated] = np.nan  # not computed; callers that need sums ask
    if potentials:
        row_potentials = _exact_float_array(row_units, exponents, solved)
        row_potentials = row_potentials.reshape(tile_rows, tile_columns, m)
        row_potentials = row_potentials.transpose(0, 2, 1).reshape(rows, tile_columns).copy()
        column_potentials = _exact_float_array(column_units, exponents, solved).reshape(
            tile_rows, columns
        )
    slow = np.flatnonzero(~solved)
    if len(slow) >= _SLOW_TILES_WARNING:
        warnings.warn(
            f"{len(slow)} of {tiles} tiles could not be solved with int64 arithmetic (near ties "
            "below 2**-50 of a tile's largest score, or integers above 2**53); they are solved "
            "exactly in Python, about 1000x slower.",
            RuntimeWarning,
            stacklevel=3,
        )
    for t in slow:
        tile_row, tile_column = divmod(int(t), tile_columns)
        r0, c0 = tile_row * m, tile_column * m
        # Dynamic range too wide for int64: the same algorithm on Python ints.
        units, exponent = exact_integer_tile(array[r0 : r0 + m, c0 : c0 + m])
        if method == "brute":
            kept, total = _brute_tile(units, pattern)
        else:
            kept, u, v = flow.solve_tile(units, n)
            total = sum(units[i][j] for i in range(m) for j in range(m) if kept[i][j])
            if potentials:
                assert row_potentials is not None and column_potentials is not None
                row_potentials[r0 : r0 + m, tile_column] = _exact_floats(u, exponent)
                column_potentials[tile_row, c0 : c0 + m] = _exact_floats(v, exponent)
        mask[r0 : r0 + m, c0 : c0 + m] = kept
        kept_exact[int(t)] = (total, exponent)
        kept_sum[t] = float(Fraction(total) * Fraction(2) ** exponent)
    return _ExactResult(
        mask,
        kept_sum.reshape(tile_rows, tile_columns),
        kept_units,
        exponents,
        kept_exact,
        row_potentials,
        column_potentials,
    )


def _flow_tiles(
    kernels,
    bits,
    fraction_bits,
    pattern,
    tile_list,
    parallel,
    mask,
    status,
    kept_units,
    exponents,
    row_units,
    column_units,
) -> None:
    """Run the flow kernel (serial or parallel) on the listed tiles."""
    n, m = pattern
    max_bits = kernels.max_unit_bits(m)
    if parallel:
        import numba

        kernels.exact_tiles_parallel(
            bits, fraction_bits, n, m, max_bits, tile_list, 4 * numba.get_num_threads(),
            mask, status, kept_units, exponents, row_units, column_units,
        )  # fmt: skip
    else:
        kernels.exact_tiles(
            bits, fraction_bits, n, m, max_bits, tile_list,
            mask, status, kept_units, exponents, row_units, column_units,
        )  # fmt: skip


def _masked_units(array: NDArray, pattern: Pattern, mask: NDArray[np.bool_]):
    """Exact kept units per tile of ``mask`` (status 0) in the solver's tile units."""
    from nmref import _flow_kernels as kernels

    tiles = (array.shape[0] // pattern.m) * (array.shape[1] // pattern.m)
    units = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    status = np.full(tiles, kernels.TOO_WIDE, dtype=np.int8)
    prepared = _kernel_bits(array) if tiles else None
    if prepared is not None:
        bits, fraction_bits = prepared
        kernels.masked_tiles(
            bits, fraction_bits, pattern.m, kernels.max_unit_bits(pattern.m), mask, status,
            units, exponents,
        )  # fmt: skip
    return units, exponents, status


def _enumeration_is_fast(pattern: Pattern) -> bool:
    if pattern.m > BRUTE_MAX_M:
        return False
    return len(_pattern_table(pattern.n, pattern.m)[1]) <= ENUMERATION_MAX_PATTERNS


def _exact_float_array(
    units: NDArray[np.int64], exponents: NDArray[np.int64], solved: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """``units * 2**exponents`` (per tile row) as float64, refusing to round."""
    values = np.ldexp(units.astype(np.float64), exponents.astype(np.int32)[:, None])
    back = np.ldexp(values, -exponents.astype(np.int32)[:, None])
    # A unit count >= 2**53 is still exact when its low bits are zero (4.0 next to 1.1 in
    # float64 is 2**54 units): test the int64 -> float64 conversion itself, then the scaling.
    as_float = units.astype(np.float64)
    with np.errstate(invalid="ignore"):
        exact = (as_float.astype(np.int64) == units) & (back == as_float)
    if not exact[solved].all():
        raise ValueError(
            "a certificate potential is not representable in float64; the tile's "
            "dynamic range is too wide for a float64 certificate"
        )
    return values


def _exact_floats(units, exponent: int) -> NDArray[np.float64]:
    """``units * 2**exponent`` as float64, refusing to round."""
    values = []
    for unit in units:
        value = float(Fraction(int(unit)) * Fraction(2) ** int(exponent))
        if Fraction(value) != Fraction(int(unit)) * Fraction(2) ** int(exponent):
            raise ValueError(
                "a certificate potential is not representable in float64; the tile's "
                "dynamic range is too wide for a float64 certificate"
            )
        values.append(value)
    return np.array(values, dtype=np.float64)


def transposable_mask(
    scores: ArrayLike,
    n: int,
    m: int,
    *,
    method: Method = "exact",
    parallel: bool = False,
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

    Returns
    -------
    mask : ndarray of bool, shape (R, C)
        ``True`` = kept.

    Raises
    ------
    TypeError
        If ``n``/``m`` are not integers or ``scores`` has another dtype.
    ValueError
        If ``n > m``, ``m < 1``, ``n < 0``; if ``scores`` is not 2-D, its shape
        is not a multiple of ``m``, or it holds NaN or an infinity; if
        ``method`` is unknown, or ``"brute"`` with ``m > 6``.

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
    _check_method(method)
    greedy = method in ("greedy", "greedy-prune")
    # The exact kernels detect NaN/inf themselves (and then raise the same error).
    array, pattern = _prepare(scores, n, m, check_finite=greedy)
    if method == "brute" and pattern.m > BRUTE_MAX_M:
        raise ValueError(f"method='brute' needs m <= {BRUTE_MAX_M}, got m={pattern.m}")
    if greedy:
        return _greedy(array, pattern, prune_form=method == "greedy-prune")
    return _solve_exact(array, pattern, method=method, parallel=parallel, sums=False).mask


def _greedy(array: NDArray, pattern: Pattern, prune_form: bool) -> NDArray[np.bool_]:
    from nmref import _flow_kernels as kernels

    # Only comparisons matter: the kernel turns the bits of float64, int64 or
    # uint64 scores into unsigned keys that order like them (three variants).
    if array.dtype.kind == "u" and array.dtype.itemsize == 8:
        bits, kind = array, 2
    elif array.dtype.kind in "iu" and array.size and np.abs(array).max() > 2**53:
        bits, kind = array.astype(np.int64, copy=False).view(np.uint64), 1
    else:
        bits, kind = np.ascontiguousarray(array, dtype=np.float64).view(np.uint64), 0
    mask = np.zeros(array.shape, dtype=bool)
    if array.size:
        kernels.greedy_tiles(
            np.ascontiguousarray(bits), kind, pattern.n, pattern.m, prune_form, mask
        )
    return mask


# ----------------------------------------------------------------------------
# Oracle functions
# ----------------------------------------------------------------------------


def transposable_optimum(scores: ArrayLike, n: int, m: int) -> NDArray[np.float64]:
    """Optimal kept sum of every tile (exact, then rounded once to float64).

    Returns
    -------
    ndarray of float64, shape (R // m, C // m)

    Raises
    ------
    ValueError, TypeError
        As :func:`transposable_mask`.

    Examples
    --------
    >>> transposable_optimum(np.arange(16.0).reshape(4, 4), 2, 4)
    array([[60.]])
    """
    array, pattern = _prepare(scores, n, m)
    return _solve_exact(array, pattern).kept_sum


def is_transposable(mask: ArrayLike, n: int, m: int, *, exact: bool = True) -> bool:
    """Whether every aligned ``m x m`` tile keeps ``n`` per row and column.

    Parameters
    ----------
    mask : array_like, shape (R, C)
        Nonzero = kept.
    exact : bool, default True
        ``True``: exactly ``n`` per tile row and column. ``False``: at most
        ``n`` (the relaxed form that keep-greedy masks satisfy).

    Raises
    ------
    ValueError
        If ``mask`` is not 2-D or its shape is not a multiple of ``m``.

    Examples
    --------
    >>> cyclic = np.eye(4, dtype=bool) | np.eye(4, k=1, dtype=bool) | np.eye(4, k=-3, dtype=bool)
    >>> is_transposable(cyclic, 2, 4), is_transposable(cyclic, 2, 4, exact=False)
    (True, True)
    """
    pattern = check_pattern(n, m)
    array = np.asarray(mask)
    _check_matrix(array, pattern, "mask")
    return is_nm(array, pattern.n, pattern.m, axis=1, exact=exact) and is_nm(
        array, pattern.n, pattern.m, axis=0, exact=exact
    )


def optimality_gap(scores: ArrayLike, mask: ArrayLike, n: int, m: int) -> OptimalityGap:
    """How much kept score ``mask`` loses against the optimum, per tile and in total.

    Parameters
    ----------
    scores : array_like, shape (R, C)
        The scores the mask was meant to maximise.
    mask : array_like of bool, shape (R, C)
        Any mask keeping at most ``n`` per tile row and column (for example a
        greedy mask, or another implementation's output).

    Returns
    -------
    OptimalityGap
        ``per_tile`` (float64, (R//m, C//m)) and ``total``: optimum minus the
        mask's kept sum, computed exactly and rounded once. Zero everywhere iff
        the mask is optimal (for a mask that is exactly transposable).

    Raises
    ------
    ValueError
        If the shapes differ, or the mask keeps more than ``n`` in some tile
        row or column (its kept sum could then exceed the optimum).

    Examples
    --------
    >>> scores = np.arange(16.0).reshape(4, 4)
    >>> optimality_gap(scores, transposable_mask(scores, 2, 4, method="greedy"), 2, 4).total
    0.0
    """
    array, pattern = _prepare(scores, n, m)
    kept = np.asarray(mask)
    if kept.shape != array.shape:
        raise ValueError(f"mask.shape={kept.shape} must equal scores.shape={array.shape}")
    if not is_transposable(kept, pattern.n, pattern.m, exact=False):
        raise ValueError(
            f"mask keeps more than n={pattern.n} entries in some row or column of an "
            f"{pattern.m}x{pattern.m} tile; the gap is only defined for masks with at most n"
        )
    kept = np.ascontiguousarray(kept, dtype=bool)
    optimum = _solve_exact(array, pattern)
    mine_units, mine_exponents, mine_status = _masked_units(array, pattern, kept)
    tile_columns = array.shape[1] // pattern.m
    gaps: list[Fraction] = []
    for t in range(len(mine_units)):
        if mine_status[t] == 0 and t not in optimum.kept_exact:
            # Same tile loading as the solver: a common exponent, an exact int difference.
            difference = int(optimum.kept_units[t]) - int(mine_units[t])
            gaps.append(Fraction(difference) * Fraction(2) ** int(mine_exponents[t]))
            continue
        tile_row, tile_column = divmod(t, tile_columns)
        r0, c0 = tile_row * pattern.m, tile_column * pattern.m
        units, exponent = exact_integer_tile(array[r0 : r0 + pattern.m, c0 : c0 + pattern.m])
        mine = sum(
            units[i][j] for i in range(pattern.m) for j in range(pattern.m) if kept[r0 + i, c0 + j]
        )
        if t in optimum.kept_exact:
            best, best_exponent = optimum.kept_exact[t]
            best_value = Fraction(best) * Fraction(2) ** best_exponent
        else:
            best_value = Fraction(int(optimum.kept_units[t])) * Fraction(2) ** int(
                optimum.exponents[t]
            )
        gaps.append(best_value - Fraction(mine) * Fraction(2) ** exponent)
    per_tile = np.array([float(g) for g in gaps], dtype=np.float64).reshape(optimum.kept_sum.shape)
    total = sum(gaps, Fraction(0))
    return OptimalityGap(per_tile, float(total))


def transposable_certificate(scores: ArrayLike, n: int, m: int) -> Certificate:
    """The canonical optimal mask and dual potentials that prove it optimal.

    For tile entry ``(i, j)`` with row potential ``u[i]`` and column potential
    ``v[j]``: every kept entry has ``s[i, j] >= u[i] + v[j]`` and every dropped
    entry ``s[i, j] <= u[i] + v[j]``; with the row and column counts that
    proves optimality (LP duality; see :func:`verify_certificate`).

    Raises
    ------
    ValueError
        As :func:`transposable_mask`, or when a potential is not exactly
        representable in float64 (tiles spanning more than ~2^45 in magnitude).

    Examples
    --------
    >>> certificate = transposable_certificate(np.arange(16.0).reshape(4, 4), 2, 4)
    >>> verify_certificate(np.arange(16.0).reshape(4, 4), *certificate, 2, 4)
    True
    """
    array, pattern = _prepare(scores, n, m)
    result = _solve_exact(array, pattern, potentials=True)
    assert result.row_potentials is not None and result.column_potentials is not None
    return Certificate(result.mask, result.row_potentials, result.column_potentials)


def verify_certificate(
    scores: ArrayLike,
    mask: ArrayLike,
    row_potentials: ArrayLike,
    column_potentials: ArrayLike,
    n: int,
    m: int,
) -> bool:
    """Check, exactly, that the potentials prove ``mask`` optimal. O(m^2) per tile.

    True iff ``mask`` is exactly transposable N:M and in every tile each kept
    entry has ``s >= u + v`` and each dropped entry ``s <= u + v``. Then for any
    valid mask ``Y``, ``sum_Y s <= n sum(u) + n sum(v) + sum(max(s - u - v, 0))``,
    which the given mask attains, so no mask keeps more (weak LP duality).

    Comparisons are exact: a float64 test decides all clear cases and the few
    entries within rounding distance are recomputed with rationals.

    Parameters
    ----------
    row_potentials : array_like, shape (R, C // m)
    column_potentials : array_like, shape (R // m, C)

    Raises
    ------
    ValueError
        If the shapes do not fit ``scores`` or a value is not finite.
    """
    array, pattern = _prepare(scores, n, m)
    kept = np.asarray(mask)
    rows, columns = array.shape
    u = np.asarray(row_potentials, dtype=np.float64)
    v = np.asarray(column_potentials, dtype=np.float64)
    if kept.shape != array.shape:
        raise ValueError(f"mask.shape={kept.shape} must equal scores.shape={array.shape}")
    if u.shape != (rows, columns // pattern.m):
        raise ValueError(f"row_potentials.shape={u.shape} must be {(rows, columns // pattern.m)}")
    if v.shape != (rows // pattern.m, columns):
        raise ValueError(
            f"column_potentials.shape={v.shape} must be {(rows // pattern.m, columns)}"
        )
    if not (np.isfinite(u).all() and np.isfinite(v).all()):
        raise ValueError("potentials must be finite")
    if not is_transposable(kept, pattern.n, pattern.m, exact=True):
        return False
    kept = kept.astype(bool)
    row_full = np.repeat(u, pattern.m, axis=1)
    column_full = np.repeat(v, pattern.m, axis=0)
    exact_scores = array.astype(np.float64) if array.dtype.kind == "f" else array
    with np.errstate(over="ignore", invalid="ignore"):
        approx = exact_scores.astype(np.float64) - row_full - column_full
        scale = np.abs(exact_scores.astype(np.float64)) + np.abs(row_full) + np.abs(column_full)
    # |rounding error| < 2 ulp(scale) for two float64 operations; outside that band
    # the sign of approx is the exact sign.
    unsure = np.abs(approx) <= 4 * np.spacing(scale)
    if ((kept & ~unsure & (approx < 0)) | (~kept & ~unsure & (approx > 0))).any():
        return False
    for r, c in np.argwhere(unsure):
        s = (
            Fraction(int(exact_scores[r, c]))
            if array.dtype.kind in "biu"
            else Fraction(float(exact_scores[r, c]))
        )
        slack = s - Fraction(float(row_full[r, c])) - Fraction(float(column_full[r, c]))
        if (kept[r, c] and slack < 0) or (not kept[r, c] and slack > 0):
            return False
    return True


# ----------------------------------------------------------------------------
# Weights: Linear and Conv through the layouts of specs/conventions.md
# ----------------------------------------------------------------------------


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
    array = _as_scores(weight, "weight")
    # Located in the caller's weight, not in the internal reduction matrix.
    _check_finite(array, "weight")
    resolved = layout if layout is not None else ("linear" if array.ndim == 2 else "channels")
    if resolved == "channels" and array.ndim > 2 and array.shape[0] % pattern.m:
        raise ValueError(
            f"weight.shape[0]={array.shape[0]} (out channels) must be a multiple of m={m} for "
            "layout='channels': a transposable tile spans m output channels at one kernel tap"
        )
    matrix = to_reduction_matrix(to_magnitudes(array, "weight"), resolved)
    mask = transposable_mask(matrix, n, m, method=method, parallel=parallel)
    return from_reduction_matrix(mask, array.shape, resolved)
