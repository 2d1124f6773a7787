"""Kernel driver of the transposable masks: prepares the scores, runs the Numba kernels.

The API in :mod:`nmref.transposable` calls this module; only this module talks to
the kernels (one file per solver: :mod:`~nmref.transposable._flow_kernels`,
:mod:`~nmref.transposable._enumeration_kernels`,
:mod:`~nmref.transposable._greedy_kernels`), and it solves the tiles that a
kernel hands back with the Python-int reference. The kernel modules are imported
on first use: importing numba costs ~0.3 s.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from nmref._validation import check_finite_scores
from nmref.patterns import Pattern
from nmref.transposable import flow
from nmref.transposable._kernel_contract import (
    NEEDS_UNITS,
    NOT_FINITE,
    SOLVED,
    SOLVED_TRUNCATED,
    TOO_WIDE,
    max_unit_bits,
)
from nmref.transposable.patterns import (
    BRUTE_MAX_M,
    brute_tile,
    brute_tile_at_most,
    pattern_table,
)
from nmref.transposable.tiles import dyadic, exact_integer_tile, kept_total, rounded

# Warn when this many tiles need the (slow) Python-int path.
_SLOW_TILES_WARNING = 64


# Tests set this to run 2:4 float32 tiles through the 90-pattern scan instead of the
# meet-in-the-middle kernel, to compare the two.
_SCAN_2TO4 = False

# At or below this pattern count the "exact" method enumerates patterns (faster
# than the flow solver and exact by construction).
ENUMERATION_MAX_PATTERNS = 90


def kernel_bits(array: NDArray) -> tuple[NDArray, int] | None:
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


class ExactResult(NamedTuple):
    mask: NDArray[np.bool_]
    # per tile, (R/m, C/m): the exact kept sum rounded once, +-inf beyond float64's range
    # (callers that report it refuse that: spec T6); NaN where not asked for (sums=False)
    kept_sum: NDArray[np.float64]
    kept_units: NDArray[np.int64]  # per tile (row-major), valid where status is SOLVED
    exponents: NDArray[np.int64]
    kept_exact: dict[int, tuple[int, int]]  # tiles solved in Python: (units, exponent)
    row_potentials: NDArray[np.float64] | None
    column_potentials: NDArray[np.float64] | None
    # per tile, as the kernels left it: SOLVED, SOLVED_TRUNCATED (certified from truncated
    # units), TOO_WIDE (solved in Python; so are retried SOLVED tiles, see _finish)
    status: NDArray[np.int8]


def solve_exact(
    array: NDArray,
    pattern: Pattern,
    *,
    method: str = "exact",
    parallel: bool = False,
    potentials: bool = False,
    sums: bool = True,
) -> ExactResult:
    """Kernel driver for the exact methods; tiles the kernels cannot solve go to Python."""
    n, m = pattern
    rows, columns = array.shape
    tile_rows, tile_columns = rows // m, columns // m
    tiles = tile_rows * tile_columns
    # Every entry is written: by a kernel, or by the Python path for the tiles
    # a kernel hands back.
    mask = np.empty(array.shape, dtype=bool)
    status = np.full(tiles, TOO_WIDE, dtype=np.int8)
    kept_units = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    # The certificate duals per tile, only when asked for (the flow kernel then skips them).
    dual_tiles = tiles if potentials else 0
    row_units = np.zeros((dual_tiles, m), dtype=np.int64)
    column_units = np.zeros((dual_tiles, m), dtype=np.int64)
    prepared = kernel_bits(array) if tiles else None
    # method="flow" (private) forces the flow kernel, so tests can compare it
    # with the enumeration on small m.
    use_enumeration = method == "brute" or (
        method == "exact" and not potentials and enumeration_is_fast(pattern)
    )
    if prepared is not None:
        bits, fraction_bits = prepared
        if use_enumeration:
            _enumerate(
                bits, fraction_bits, pattern, *_enumeration_tables(pattern), parallel,
                mask, status, kept_units, exponents, sums,
            )  # fmt: skip
        else:
            _flow_tiles(
                bits, fraction_bits, pattern, np.arange(tiles, dtype=np.int64),
                parallel, mask, status, kept_units, exponents, row_units, column_units,
            )  # fmt: skip
        if method == "exact":
            # Tiles too wide for the enumeration's int64 units: the flow kernel's
            # certified truncated path solves most of them exactly.
            wide = np.flatnonzero(status == TOO_WIDE)
            if use_enumeration and len(wide):
                _flow_tiles(
                    bits, fraction_bits, pattern, wide.astype(np.int64), parallel,
                    mask, status, kept_units, exponents, row_units, column_units,
                )  # fmt: skip

    def python_solver(units):
        if method == "brute":
            return brute_tile(units, pattern)[0], None, None
        return flow.solve_tile(units, n)

    return _finish(
        array, pattern, mask, status, kept_units, exponents, row_units, column_units,
        python_solver, potentials=potentials, sums=sums,
    )  # fmt: skip


def _enumeration_tables(pattern: Pattern) -> tuple:
    """``(choice_columns, table, choice_words)`` of the enumeration kernels."""
    n, m = pattern
    choices, table = pattern_table(n, m)
    choice_columns = np.zeros((len(choices), max(n, 1)), dtype=np.int64)
    for index, choice in enumerate(choices):
        choice_columns[index, :n] = np.flatnonzero(choice)
    # Each row choice as 4 mask bytes in one word (used when m == 4).
    choice_words = (choices[:, :4].astype(np.uint32) << (8 * np.arange(min(m, 4)))).sum(
        axis=1, dtype=np.uint32
    )
    return choice_columns, table, choice_words


def exact_start(
    bits: NDArray, fraction_bits: int, pattern: Pattern, shape: tuple, parallel: bool, start: str
) -> tuple:
    """The exactly-``n`` start of the at-most kernel: ``(mask, status, exponents, u, v)``.

    ``start="flow"``: the flow kernel's canonical optimum and its duals in units.
    ``"enumeration"`` (``m <= 4``): the enumeration's optimum (several times faster
    there) without its duals; in their place duals that certify nothing (``min u + min v
    = -1 < 0``), so the at-most kernel always runs its Bellman-Ford, which decides the
    mask from any start (O(m^3); spec T2). ``"none"``: empty arrays, every tile runs the
    at-most successive shortest paths.
    """
    m = pattern.m
    tiles = (shape[0] // m) * (shape[1] // m)
    if start == "none":
        return (
            np.zeros((0, 0), dtype=bool),
            np.zeros(0, dtype=np.int8),
            np.zeros(0, dtype=np.int64),
            np.zeros((0, 0), dtype=np.int64),
            np.zeros((0, 0), dtype=np.int64),
        )
    exact = (
        np.empty(shape, dtype=bool),
        np.full(tiles, TOO_WIDE, dtype=np.int8),
        np.zeros(tiles, dtype=np.int64),
        np.zeros((tiles, m), dtype=np.int64),
        np.full((tiles, m), -1 if start == "enumeration" else 0, dtype=np.int64),
    )
    kept_units = np.zeros(tiles, dtype=np.int64)
    if start == "enumeration":
        _enumerate(
            bits, fraction_bits, pattern, *_enumeration_tables(pattern), parallel,
            exact[0], exact[1], kept_units, exact[2],
        )  # fmt: skip
    else:
        _flow_tiles(
            bits, fraction_bits, pattern, np.arange(tiles, dtype=np.int64), parallel,
            exact[0], exact[1], kept_units, exact[2], exact[3], exact[4],
        )  # fmt: skip
    return exact


def solve_at_most(
    array: NDArray,
    pattern: Pattern,
    *,
    method: str = "exact",
    parallel: bool = False,
    potentials: bool = False,
    from_exact: bool = True,
    sums: bool = True,
) -> ExactResult:
    """Kernel driver for the at-most-``n`` fill (spec T1-T3, ``fill="at_most"``).

    ``method="exact"``: the Numba kernel
    :mod:`~nmref.transposable._at_most_kernels` (O(n m^3) per tile plus the tie
    pass; tiles too wide for int64 units by its certified truncated path, status
    ``SOLVED_TRUNCATED``, whose kept sums :func:`_finish` recomputes); tiles it hands
    back (no certificate on truncated units: a near tie) go to the readable
    :func:`nmref.transposable.flow.solve_tile_at_most`, which returns the same
    canonical mask. ``"brute"``:
    :func:`~nmref.transposable.patterns.brute_tile_at_most` (``m <= 4``), in Python.
    ``from_exact=False`` (for tests) skips the exactly-``n`` kernel that runs first and
    solves every tile by the at-most successive shortest paths. 2:4 float32 scores
    without potentials go to the at-most meet-in-the-middle enumeration
    (:func:`~nmref.transposable._enumeration_kernels.enumerate_2to4_at_most_float32_tiles`)
    instead, and only the tiles it hands back (``NEEDS_UNITS``) to the at-most kernel.
    ``sums=False`` (the mask alone): no kept sums in float64, and no recomputation of the
    truncated tiles' sums with Python ints.
    """
    n, m = pattern
    rows, columns = array.shape
    tiles = (rows // m) * (columns // m)
    mask = np.zeros(array.shape, dtype=bool)
    status = np.full(tiles, TOO_WIDE, dtype=np.int8)
    kept_units = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    row_units = np.zeros((tiles, m), dtype=np.int64)
    column_units = np.zeros((tiles, m), dtype=np.int64)
    prepared = kernel_bits(array) if tiles and method == "exact" else None
    if prepared is not None:
        from nmref.transposable import _at_most_kernels as kernels

        bits, fraction_bits = prepared
        tile_list = np.arange(tiles, dtype=np.int64)
        enumerated = from_exact and not potentials and fraction_bits == 23 and (n, m) == (2, 4)
        if enumerated:
            _enumerate_at_most_2to4(bits, parallel, mask, status, kept_units, exponents)
            tile_list = np.flatnonzero(status == NEEDS_UNITS).astype(np.int64)
            status[tile_list] = TOO_WIDE
        if enumerated or not from_exact or n == 0:
            # (The few tiles the enumeration hands back: an exactly-n start would be
            # computed for every tile.)
            start = "none"
        elif not potentials and enumeration_is_fast(pattern):
            start = "enumeration"
        else:
            start = "flow"
        exact = exact_start(bits, fraction_bits, pattern, array.shape, parallel, start)
        arguments = (bits, fraction_bits, n, m, max_unit_bits(m), tile_list)
        outputs = (mask, status, kept_units, exponents, row_units, column_units)
        if not len(tile_list):
            pass
        elif parallel:
            import numba

            chunks = 4 * numba.get_num_threads()
            kernels.at_most_tiles_parallel(*arguments, chunks, exact, *outputs)
        else:
            kernels.at_most_tiles(*arguments, exact, *outputs)
    else:
        check_finite_scores(array, "scores")

    def python_solver(units):
        if method == "brute" and not potentials:
            return brute_tile_at_most(units, n, m)[0], None, None
        return flow.solve_tile_at_most(units, n)

    return _finish(
        array, pattern, mask, status, kept_units, exponents, row_units, column_units,
        python_solver, potentials=potentials, sums=sums, retry_unrepresentable=True,
    )  # fmt: skip


def _enumerate_at_most_2to4(bits, parallel, mask, status, kept_units, exponents) -> None:
    """Run the at-most 2:4 float32 enumeration (serial or parallel) on every tile."""
    from nmref.transposable import _enumeration_kernels as kernels

    tables = kernels.at_most_2to4_tables()
    outputs = (mask.view(np.uint32), status, kept_units, exponents)
    floats = bits.view(np.float32)
    if parallel:
        import numba

        chunks = 4 * numba.get_num_threads()
        kernels.enumerate_2to4_at_most_float32_tiles_parallel(
            bits, floats, tables, chunks, *outputs, kernels.scratch_2to4_at_most(chunks)
        )
    else:
        kernels.enumerate_2to4_at_most_float32_tiles(
            bits, floats, tables, 0, len(status), *outputs, kernels.scratch_2to4_at_most()
        )


def _finish(
    array: NDArray,
    pattern: Pattern,
    mask: NDArray[np.bool_],
    status: NDArray[np.int8],
    kept_units: NDArray[np.int64],
    exponents: NDArray[np.int64],
    row_units: NDArray[np.int64],
    column_units: NDArray[np.int64],
    python_solver,
    *,
    potentials: bool,
    sums: bool,
    retry_unrepresentable: bool = False,
) -> ExactResult:
    """Kernel outputs to an :class:`ExactResult`; the tiles a kernel handed back are solved
    by ``python_solver(units) -> (kept, u or None, v or None)`` on Python ints.

    ``retry_unrepresentable``: tiles whose kernel potentials float64 cannot hold are
    solved by ``python_solver`` too (the at-most fill: its kernel duals need not be the
    readable solver's, whose may be representable; the mask is the same).
    """
    m = pattern.m
    rows, columns = array.shape
    tile_rows, tile_columns = rows // m, columns // m
    tiles = tile_rows * tile_columns
    if (status == NOT_FINITE).any():
        # The kernels see every value, so the caller may skip its own pass over
        # the scores; this names the first bad index.
        check_finite_scores(array, "scores")
    if sums:
        with np.errstate(over="ignore"):
            # A kept sum beyond float64's range rounds to inf, as IEEE rounding of the exact
            # sum does (units below 2**63 at an exponent of at least -1074: one rounding).
            kept_sum = np.ldexp(kept_units.astype(np.float64), exponents.astype(np.int32))
    else:
        # Not computed (the 2:4 kernel may not even write the units): callers that need
        # sums ask for them.
        kept_sum = np.full(tiles, np.nan)
    # Exact kept sums per tile as (units, exponent): Python ints only where needed.
    kept_exact: dict[int, tuple[int, int]] = {}
    row_potentials = column_potentials = None
    retried = 0
    truncated = np.flatnonzero(status == SOLVED_TRUNCATED)
    solved = (status == SOLVED) | (status == SOLVED_TRUNCATED)
    if sums:
        # The mask of a certified truncated tile is exact; its kept sum in floor
        # units is not, so recompute it from the scores with Python ints.
        for t in truncated:
            tile_row, tile_column = divmod(int(t), tile_columns)
            r0, c0 = tile_row * m, tile_column * m
            units, exponent = exact_integer_tile(array[r0 : r0 + m, c0 : c0 + m])
            total = kept_total(units, mask[r0 : r0 + m, c0 : c0 + m])
            kept_exact[int(t)] = (total, exponent)
            kept_sum[t] = rounded(dyadic(total, exponent))
    if potentials:
        if retry_unrepresentable:
            # Kernel duals that float64 cannot hold: the readable solver's may fit.
            fits = _representable(row_units, exponents) & _representable(column_units, exponents)
            retried = int(np.count_nonzero(solved & ~fits))
            solved &= fits
        row_potentials = _exact_float_array(row_units, exponents, solved)
        row_potentials = row_potentials.reshape(tile_rows, tile_columns, m)
        row_potentials = row_potentials.transpose(0, 2, 1).reshape(rows, tile_columns).copy()
        column_potentials = _exact_float_array(column_units, exponents, solved).reshape(
            tile_rows, columns
        )
    slow = np.flatnonzero(~solved)
    if len(slow) >= _SLOW_TILES_WARNING:
        # Name the two causes apart: tiles a kernel handed back, and (at most, with
        # certificates) tiles whose kernel duals float64 cannot hold.
        why = (
            f"{len(slow) - retried} could not be solved with int64 arithmetic (near ties below "
            "2**-50 of a tile's largest score, or integers above 2**53)"
        )
        if retried:
            why += f", {retried} have kernel certificate duals that float64 cannot hold"
        warnings.warn(
            f"{len(slow)} of {tiles} tiles are solved exactly in Python, about 1000x slower: "
            f"{why}.",
            RuntimeWarning,
            stacklevel=4,
        )
    for t in slow:
        tile_row, tile_column = divmod(int(t), tile_columns)
        r0, c0 = tile_row * m, tile_column * m
        # Dynamic range too wide for int64: the same algorithm on Python ints.
        units, exponent = exact_integer_tile(array[r0 : r0 + m, c0 : c0 + m])
        kept, u, v = python_solver(units)
        if potentials:
            assert row_potentials is not None and column_potentials is not None
            assert u is not None and v is not None
            row_potentials[r0 : r0 + m, tile_column] = _exact_floats(u, exponent)
            column_potentials[tile_row, c0 : c0 + m] = _exact_floats(v, exponent)
        mask[r0 : r0 + m, c0 : c0 + m] = kept
        total = kept_total(units, kept)
        kept_exact[int(t)] = (total, exponent)
        if sums:
            kept_sum[t] = rounded(dyadic(total, exponent))
    return ExactResult(
        mask,
        kept_sum.reshape(tile_rows, tile_columns),
        kept_units,
        exponents,
        kept_exact,
        row_potentials,
        column_potentials,
        status,
    )


def _enumerate(
    bits,
    fraction_bits,
    pattern,
    choice_columns,
    table,
    choice_words,
    parallel,
    mask,
    status,
    kept_units,
    exponents,
    sums=True,
) -> None:
    """Run the enumeration kernels (serial or parallel) on every tile.

    2:4 float32 scores go to the meet-in-the-middle kernel
    (:func:`~nmref.transposable._enumeration_kernels.enumerate_2to4_float32_tiles`; it
    leaves the kept units and exponents alone when ``sums`` is false); other float32 scores
    go to the float64-sum kernel first and only the tiles it hands
    back (``NEEDS_UNITS``) to the int64-units kernel, so each call compiles only the
    kernels its scores need.
    """
    from nmref.transposable import _enumeration_kernels as kernels

    n, m = pattern
    tiles = len(status)
    chunks = 1
    if parallel:
        import numba

        chunks = 4 * numba.get_num_threads()
    if fraction_bits == 23 and (n, m) == (2, 4) and not _SCAN_2TO4:
        floats = bits.view(np.float32)
        outputs = (mask.view(np.uint32), status, kept_units, exponents)
        if parallel:
            kernels.enumerate_2to4_float32_tiles_parallel(
                bits, floats, chunks, sums, *outputs, kernels.scratch_2to4(chunks)
            )
        else:
            kernels.enumerate_2to4_float32_tiles(
                bits, floats, 0, tiles, sums, *outputs, kernels.scratch_2to4()
            )
        tile_list = np.flatnonzero(status == NEEDS_UNITS).astype(np.int64)
    elif fraction_bits == 23:
        floats = bits.view(np.float32)
        mask_words = mask.view(np.uint32) if m == 4 else np.empty((0, 0), np.uint32)
        tables = (choice_columns, table, choice_words)
        outputs = (mask, mask_words, status, kept_units, exponents)
        if parallel:
            scratch = kernels.float32_scratch(m, len(choice_columns), chunks)
            kernels.enumerate_float32_tiles_parallel(
                bits, floats, m, n, *tables, chunks, *outputs, scratch
            )
        else:
            scratch = kernels.float32_scratch(m, len(choice_columns))
            kernels.enumerate_float32_tiles(
                bits, floats, m, n, *tables, 0, tiles, *outputs, scratch
            )
        tile_list = np.flatnonzero(status == NEEDS_UNITS).astype(np.int64)
    else:
        tile_list = np.arange(tiles, dtype=np.int64)
    if not len(tile_list):
        return
    arguments = (bits, fraction_bits, m, n, max_unit_bits(m), choice_columns, table, tile_list)
    outputs = (mask, status, kept_units, exponents)
    if parallel:
        kernels.enumerate_tiles_parallel(*arguments, chunks, *outputs)
    else:
        kernels.enumerate_tiles(*arguments, 0, len(tile_list), *outputs)


def _flow_tiles(
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
    from nmref.transposable import _flow_kernels

    n, m = pattern
    max_bits = max_unit_bits(m)
    if parallel:
        import numba

        _flow_kernels.exact_tiles_parallel(
            bits, fraction_bits, n, m, max_bits, tile_list, 4 * numba.get_num_threads(),
            mask, status, kept_units, exponents, row_units, column_units,
            _flow_kernels.size_token(m),
        )  # fmt: skip
    else:
        _flow_kernels.exact_tiles(
            bits, fraction_bits, n, m, max_bits, tile_list,
            mask, status, kept_units, exponents, row_units, column_units,
            _flow_kernels.size_token(m),
        )  # fmt: skip


def masked_units(array: NDArray, pattern: Pattern, mask: NDArray[np.bool_]):
    """Exact kept units per tile of ``mask`` (status 0) in the solver's tile units."""
    from nmref.transposable import _enumeration_kernels

    tiles = (array.shape[0] // pattern.m) * (array.shape[1] // pattern.m)
    units = np.zeros(tiles, dtype=np.int64)
    exponents = np.zeros(tiles, dtype=np.int64)
    status = np.full(tiles, TOO_WIDE, dtype=np.int8)
    prepared = kernel_bits(array) if tiles else None
    if prepared is not None:
        bits, fraction_bits = prepared
        _enumeration_kernels.masked_tiles(
            bits, fraction_bits, pattern.m, max_unit_bits(pattern.m), mask, status,
            units, exponents,
        )  # fmt: skip
    return units, exponents, status


def enumeration_is_fast(pattern: Pattern) -> bool:
    if pattern.m > BRUTE_MAX_M:
        return False
    return len(pattern_table(pattern.n, pattern.m)[1]) <= ENUMERATION_MAX_PATTERNS


def _representable(units: NDArray[np.int64], exponents: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Per tile: whether every ``units * 2**exponent`` of its row is exact in float64."""
    with np.errstate(over="ignore", under="ignore"):  # inf (or a lost bit) is not exact
        values = np.ldexp(units.astype(np.float64), exponents.astype(np.int32)[:, None])
        back = np.ldexp(values, -exponents.astype(np.int32)[:, None])
    # A unit count >= 2**53 is still exact when its low bits are zero (4.0 next to 1.1 in
    # float64 is 2**54 units): test the int64 -> float64 conversion itself, then the scaling.
    as_float = units.astype(np.float64)
    with np.errstate(invalid="ignore"):
        exact = (as_float.astype(np.int64) == units) & (back == as_float)
    return exact.all(axis=1)


def _exact_float_array(
    units: NDArray[np.int64], exponents: NDArray[np.int64], solved: NDArray[np.bool_]
) -> NDArray[np.float64]:
    """``units * 2**exponents`` (per tile row) as float64, refusing to round."""
    with np.errstate(over="ignore", under="ignore"):  # refused below where it rounds
        values = np.ldexp(units.astype(np.float64), exponents.astype(np.int32)[:, None])
    if not _representable(units, exponents)[solved].all():
        raise ValueError(
            "scores: a certificate potential is not representable in float64; the tile's "
            "dynamic range is too wide for a float64 certificate"
        )
    return values


def _exact_floats(units, exponent: int) -> NDArray[np.float64]:
    """``units * 2**exponent`` as float64, refusing to round (or to overflow)."""
    values = []
    for unit in units:
        exact = dyadic(unit, exponent)
        value = rounded(exact)
        if not np.isfinite(value) or Fraction(value) != exact:
            raise ValueError(
                "scores: a certificate potential is not representable in float64; the tile's "
                "dynamic range is too wide for a float64 certificate"
            )
        values.append(value)
    return np.array(values, dtype=np.float64)


def exact_mask(
    array: NDArray, pattern: Pattern, *, method: str, parallel: bool
) -> NDArray[np.bool_]:
    """The exact (or brute) mask alone: small serial calls by NumPy enumeration, else kernels.

    Both give the canonical optimum (:mod:`~nmref.transposable._small` says when NumPy may).
    """
    if method in ("exact", "brute") and not parallel:
        from nmref.transposable import _small

        mask = _small.exact_mask(array, pattern)
        if mask is not None:
            return mask
    return solve_exact(array, pattern, method=method, parallel=parallel, sums=False).mask


def greedy_mask(array: NDArray, pattern: Pattern, prune_form: bool) -> NDArray[np.bool_]:
    """Greedy mask of every tile (NumPy for small calls, else the kernel); scores finite."""
    from nmref.transposable import _small

    small = _small.greedy_mask(array, pattern, prune_form)
    if small is not None:
        return small
    from nmref.transposable import _greedy_kernels

    # Only comparisons matter: the kernel turns the bits of float64, int64 or
    # uint64 scores into unsigned keys that order like them (three variants).
    if array.dtype == np.float32:
        # Its own bits (kind 3): no float64 copy, and 32-bit keys (fewer radix passes).
        bits, kind = np.ascontiguousarray(array).view(np.uint32), 3
    elif array.dtype.kind == "u" and array.dtype.itemsize == 8:
        bits, kind = array, 2
    elif array.dtype.kind in "iu" and array.size and np.abs(array).max() > 2**53:
        bits, kind = array.astype(np.int64, copy=False).view(np.uint64), 1
    else:
        bits, kind = np.ascontiguousarray(array, dtype=np.float64).view(np.uint64), 0
    mask = np.zeros(array.shape, dtype=bool)
    if array.size:
        _greedy_kernels.greedy_tiles(
            np.ascontiguousarray(bits), kind, pattern.n, pattern.m, prune_form, mask,
            _greedy_kernels.greedy_scratch(pattern.m),
        )  # fmt: skip
    return mask
