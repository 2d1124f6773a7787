"""Numba kernels of the brute force: every canonical pattern of a tile, first maximum wins.

The fast twin of :func:`nmref.transposable.patterns.brute_tile`, used for
``method="brute"`` and, where ``K(m, n) <= 90``, for ``method="exact"``; tested
to return the same masks as the reference. Tiles are loaded as exact int64
units (the scheme of :mod:`nmref.transposable._flow_kernels`); the loader
:func:`_load_tile` lives here, with both of its users (the enumeration and
:func:`masked_tiles`, the kept sum of a given mask in the same units). The one
jitted callee from another file is the generated 2:4 search
(:mod:`~nmref.transposable._generated_meet_in_middle`), whose digest in
``CACHE_DEPENDS`` keeps ``cache=True`` from serving a stale kernel
(:mod:`~nmref.transposable._codegen`). No ``fastmath``; ``parallel`` only in the
``*_parallel`` drivers.

Every buffer is its own argument (Numba has no cheap struct of arrays), so the
long parameter lists repeat from one level to the next; the float32 variant
keeps its own block loop because it sums in float64 instead of int64 units. Its
scratch buffers come from the caller (:func:`float32_scratch`), so that a cold
first call does not compile one allocation function per buffer type.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from nmref.transposable._generated_meet_in_middle import _2to4_best_of_block
from nmref.transposable._kernel_contract import NEEDS_UNITS, NOT_FINITE, SOLVED, TOO_WIDE

# Digests of the files whose jitted functions the cached kernels here call; written by
# scripts/generate_kernels.py, so that a change there changes this file and Numba's cache.
CACHE_DEPENDS = {
    "_generated_meet_in_middle.py": "sha256:b1cdc73d38b4fdb348aba41413253b3d",
}

# ----------------------------------------------------------------------------
# Loading a tile as exact integers
# ----------------------------------------------------------------------------

# De Bruijn table for counting trailing zeros of a 64-bit power of two.
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DE_BRUIJN_TABLE = np.array(
    [
        0,
        1,
        48,
        2,
        57,
        49,
        28,
        3,
        61,
        58,
        50,
        42,
        38,
        29,
        17,
        4,
        62,
        55,
        59,
        36,
        53,
        51,
        43,
        22,
        45,
        39,
        33,
        30,
        24,
        18,
        12,
        5,
        63,
        47,
        56,
        27,
        60,
        41,
        37,
        16,
        54,
        35,
        52,
        21,
        44,
        32,
        23,
        11,
        46,
        26,
        40,
        15,
        34,
        20,
        31,
        10,
        25,
        14,
        19,
        9,
        13,
        8,
        7,
        6,
    ],
    dtype=np.int64,
)


@numba.njit(cache=True, nogil=True, inline="always")
def _trailing_zeros(x):  # pragma: no cover - compiled
    """Number of trailing zero bits of a nonzero uint64."""
    lowest = x & (~x + np.uint64(1))
    return _DE_BRUIJN_TABLE[(lowest * _DE_BRUIJN) >> np.uint64(58)]


@numba.njit(cache=True, nogil=True)
def _load_tile(
    bits, r0, c0, m, fraction_bits, max_bits, significand, scale, units
):  # pragma: no cover
    """Decode the IEEE bits of the tile at ``(r0, c0)`` into exact int64 units.

    ``bits`` is a float32 array viewed as uint32 (``fraction_bits=23``) or a
    float64 array viewed as uint64 (``52``). Every finite float is
    ``significand * 2**scale`` with an integer significand; the tile's units are
    those significands shifted to the tile's lowest set bit. Returns
    ``(status, exponent)`` with ``scores = units * 2**exponent`` exactly.
    """
    strip_zeros = fraction_bits > 23
    exponent_mask = (1 << (8 if fraction_bits == 23 else 11)) - 1
    bias = exponent_mask // 2 + fraction_bits
    fraction_mask = (np.uint64(1) << np.uint64(fraction_bits)) - np.uint64(1)
    lowest = 1 << 30
    highest = -(1 << 30)
    for i in range(m):
        for j in range(m):
            word = np.uint64(bits[r0 + i, c0 + j])
            exponent_field = np.int64(word >> np.uint64(fraction_bits)) & exponent_mask
            if exponent_field == exponent_mask:  # NaN or +-inf
                return NOT_FINITE, 0
            fraction = word & fraction_mask
            if exponent_field == 0:
                value_scale = 1 - bias  # subnormal (or zero)
                whole = fraction
            else:
                value_scale = exponent_field - bias
                whole = fraction | (np.uint64(1) << np.uint64(fraction_bits))
            k = i * m + j
            if whole == 0:
                significand[k] = 0
                scale[k] = 0
                continue
            # Upper bound of the top bit (exact for normal numbers).
            top = value_scale + fraction_bits
            if strip_zeros:
                # Only float64 needs this: it lets 53-bit significands with few
                # set bits (floats that came from float32 or integers) fit.
                trailing = _trailing_zeros(whole)
                whole >>= np.uint64(trailing)
                value_scale += trailing
            if value_scale < lowest:
                lowest = value_scale
            if top > highest:
                highest = top
            negative = (word >> np.uint64(8 * (4 if fraction_bits == 23 else 8) - 1)) != 0
            significand[k] = -np.int64(whole) if negative else np.int64(whole)
            scale[k] = value_scale
    if highest < lowest:  # all zero
        for k in range(m * m):
            units[k] = 0
        return SOLVED, 0
    if highest - lowest + 1 > max_bits:
        return TOO_WIDE, lowest
    for k in range(m * m):
        units[k] = significand[k] << (scale[k] - lowest) if significand[k] != 0 else 0
    return SOLVED, lowest


# ----------------------------------------------------------------------------
# Brute force over a canonical pattern table (first maximum wins)
# ----------------------------------------------------------------------------


# Tiles per block in the enumeration: the pattern loop runs across the tiles of
# a block, which the compiler can vectorise.
ENUMERATION_BLOCK = 64


@numba.njit(cache=True, nogil=True, inline="always")
def _start_with_pattern_zero(row_sums, patterns, m, block, best_sum, best):  # pragma: no cover
    """Make pattern 0 the running best of each of ``block`` tiles."""
    for b in range(block):
        best[b] = 0
        best_sum[b] = 0
        for i in range(m):
            best_sum[b] += row_sums[i, patterns[0, i], b]


@numba.njit(cache=True, nogil=True, inline="always")
def _scan_patterns(row_sums, patterns, m, block, first, total, best_sum, best):  # pragma: no cover
    """Patterns ``first..`` against the running best; strictly greater replaces,
    so the earliest maximal pattern (canonical order) stays."""
    for p in range(first, patterns.shape[0]):
        row = row_sums[0, patterns[p, 0]]
        for b in range(block):
            total[b] = row[b]
        for i in range(1, m):
            row = row_sums[i, patterns[p, i]]
            for b in range(block):
                total[b] += row[b]
        for b in range(block):
            better = total[b] > best_sum[b]
            best_sum[b] = total[b] if better else best_sum[b]
            best[b] = p if better else best[b]


@numba.njit(cache=True, nogil=True, inline="always")
def _unit_row_sums(units, m, n, choice_columns, row_sums, b):  # pragma: no cover
    """``row_sums[i, c, b]``: the kept sum of row ``i`` of a tile under row choice ``c``."""
    for i in range(m):
        for c in range(choice_columns.shape[0]):
            s = np.int64(0)
            for k in range(n):
                s += units[i * m + choice_columns[c, k]]
            row_sums[i, c, b] = s


@numba.njit(cache=True, nogil=True)
def enumerate_tiles(
    bits,
    fraction_bits,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    tile_list,
    first,
    last,
    mask,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """Best pattern of the tiles ``tile_list[first:last]`` on exact int64 units (one thread).

    Tiles are numbered row-major; the first maximum in table order wins.
    ``choice_columns`` (C, >= n) int: the kept columns of each of the
    C = comb(m, n) row patterns; ``patterns`` (K, m) int: for each tile pattern
    the row-pattern index of every row, in the canonical order (so the first
    maximum is the canonical optimum). Tiles go in blocks of
    ``ENUMERATION_BLOCK``: first every row sum of every tile of the block, then
    each pattern's sum for all tiles of the block at once (strictly greater
    replaces, so the earliest maximal pattern stays).
    """
    tiles_across = bits.shape[1] // m
    choice_count = choice_columns.shape[0]
    block = ENUMERATION_BLOCK
    units = np.empty(m * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    row_sums = np.zeros((m, choice_count, block), np.int64)
    total = np.empty(block, np.int64)
    best_sum = np.empty(block, np.int64)
    best = np.empty(block, np.int64)
    for start in range(first, last, block):
        count = min(block, last - start)
        for b in range(count):
            t = tile_list[start + b]
            code, exponent = _load_tile(
                bits,
                (t // tiles_across) * m,
                (t % tiles_across) * m,
                m,
                fraction_bits,
                max_bits,
                significand,
                scale,
                units,
            )
            status[t] = code
            exponents[t] = exponent
            _unit_row_sums(units, m, n, choice_columns, row_sums, b)
        _start_with_pattern_zero(row_sums, patterns, m, block, best_sum, best)
        _scan_patterns(row_sums, patterns, m, block, 1, total, best_sum, best)
        for b in range(count):
            t = tile_list[start + b]
            r0 = (t // tiles_across) * m
            c0 = (t % tiles_across) * m
            _write_pattern(mask, r0, c0, m, n, choice_columns, patterns, best[b])
            kept_units[t] = best_sum[b]


@numba.njit(cache=True, nogil=True, parallel=True)
def enumerate_tiles_parallel(
    bits,
    fraction_bits,
    m,
    n,
    max_bits,
    choice_columns,
    patterns,
    tile_list,
    chunks,
    mask,
    status,
    kept_units,
    exponents,
):  # pragma: no cover
    """:func:`enumerate_tiles` over all of ``tile_list``, in ``chunks`` ranges run in parallel."""
    tiles = tile_list.shape[0]
    for c in numba.prange(chunks):
        enumerate_tiles(
            bits, fraction_bits, m, n, max_bits, choice_columns, patterns, tile_list,
            tiles * c // chunks, tiles * (c + 1) // chunks, mask, status, kept_units, exponents,
        )  # fmt: skip


@numba.njit(cache=True, nogil=True, inline="always")
def float64_exact_binades(m):  # pragma: no cover
    """Widest float32 tile summed exactly in float64, in binades.

    A tile whose largest and smallest nonzero magnitudes have exponent fields
    at most this far apart holds multiples of its smallest value's lowest bit
    below ``2**(binades + 24)`` of them; a sum of up to ``m*m`` such values stays
    below ``2**53`` of them (``carry_bits = max(1, ceil(log2(m*m)))``), so
    float64 adds it exactly.
    """
    carry_bits = 1
    while (1 << carry_bits) < m * m:
        carry_bits += 1
    return 53 - 24 - carry_bits


@numba.njit(cache=True, nogil=True)
def enumerate_float32_tiles(
    bits,
    floats,
    m,
    n,
    choice_columns,
    patterns,
    choice_words,
    first,
    last,
    mask,
    mask_words,
    status,
    kept_units,
    exponents,
    scratch,
):  # pragma: no cover
    """Tiles ``first..last-1`` of float32 scores (one thread), summing in float64.

    Same answer as :func:`enumerate_tiles` on int64 units (sums are exact, so
    every comparison is), without decoding bits: a block holds up to
    ``ENUMERATION_BLOCK`` tiles of one tile row, loaded column-of-the-tile by
    column-of-the-tile so that every inner loop runs across the tiles of the
    block and vectorises. ``floats`` is ``bits`` viewed as float32. A tile that
    spans more than :func:`float64_exact_binades` binades, or holds a subnormal,
    NaN or infinity, gets status ``NEEDS_UNITS`` and is left for the caller to
    redo with :func:`enumerate_tiles` (a separate kernel, so that scores without
    such tiles never compile the int64 path). For ``m == 4`` the pattern sum is
    unrolled and a tile row of the mask is written as one uint32
    (``mask_words``: ``mask`` viewed as uint32; ``choice_words``: the row
    choices as 4 bytes). ``scratch`` is :func:`float32_scratch` (``chunks=None``).
    """
    tiles_across = bits.shape[1] // m
    choice_count = choice_columns.shape[0]
    pattern_count = patterns.shape[0]
    block = ENUMERATION_BLOCK
    exact_binades = float64_exact_binades(m)
    no_magnitude = np.uint32(0xFFFFFFFF)
    values, magnitudes, row_sums, total, best_sum, best, high, low = scratch
    start = first
    while start < last:
        tile_row = start // tiles_across
        count = min(block, last - start, (tile_row + 1) * tiles_across - start)
        r0 = tile_row * m
        first_column = (start - tile_row * tiles_across) * m
        for i in range(m):
            for j in range(m):
                k = i * m + j
                for b in range(count):
                    values[k, b] = np.float64(floats[r0 + i, first_column + b * m + j])
                    magnitudes[k, b] = bits[r0 + i, first_column + b * m + j] & np.uint32(
                        0x7FFFFFFF
                    )
                for b in range(count, block):
                    values[k, b] = 0.0
        # Largest and smallest nonzero magnitude: their bit patterns order like the values.
        for b in range(count):
            high[b] = magnitudes[0, b]
            low[b] = magnitudes[0, b] if magnitudes[0, b] != 0 else no_magnitude
        for k in range(1, m * m):
            for b in range(count):
                x = magnitudes[k, b]
                high[b] = max(high[b], x)
                low[b] = min(low[b], x if x != 0 else no_magnitude)
        for i in range(m):
            for c in range(choice_count):
                target = row_sums[i, c]
                source = values[i * m + choice_columns[c, 0]]
                for b in range(block):
                    target[b] = source[b] if n > 0 else 0.0
                for k in range(1, n):
                    source = values[i * m + choice_columns[c, k]]
                    for b in range(block):
                        target[b] += source[b]
        _start_with_pattern_zero(row_sums, patterns, m, block, best_sum, best)
        # Strictly greater replaces, so the earliest maximal pattern stays.
        if m == 4:
            for p in range(1, pattern_count):
                row0 = row_sums[0, patterns[p, 0]]
                row1 = row_sums[1, patterns[p, 1]]
                row2 = row_sums[2, patterns[p, 2]]
                row3 = row_sums[3, patterns[p, 3]]
                for b in range(block):
                    pattern_sum = (row0[b] + row1[b]) + (row2[b] + row3[b])
                    better = pattern_sum > best_sum[b]
                    best_sum[b] = pattern_sum if better else best_sum[b]
                    best[b] = p if better else best[b]
        else:
            _scan_patterns(row_sums, patterns, m, block, 1, total, best_sum, best)
        for b in range(count):
            t = start + b
            c0 = first_column + b * m
            high_field = np.int64(high[b] >> np.uint32(23))
            low_field = np.int64(low[b] >> np.uint32(23))
            p = best[b]
            if high[b] == 0:  # all zero: the first pattern, sum 0
                status[t] = SOLVED
                exponents[t] = 0
                kept_units[t] = 0
            elif high_field == 255 or low_field == 0 or high_field - low_field > exact_binades:
                status[t] = NEEDS_UNITS
                continue
            else:
                # The exponent _load_tile would give: the smallest magnitude's lowest bit.
                exponent = low_field - 150
                status[t] = SOLVED
                exponents[t] = exponent
                # int(): under NUMBA_DISABLE_JIT the fields are NumPy ints, which
                # math.ldexp refuses.
                kept_units[t] = np.int64(math.ldexp(best_sum[b], -int(exponent)))
            if m == 4:
                for i in range(4):
                    mask_words[r0 + i, c0 // 4] = choice_words[patterns[p, i]]
            else:
                _write_pattern(mask, r0, c0, m, n, choice_columns, patterns, p)
        start += count


@numba.njit(cache=True, nogil=True, parallel=True)
def enumerate_float32_tiles_parallel(
    bits,
    floats,
    m,
    n,
    choice_columns,
    patterns,
    choice_words,
    chunks,
    mask,
    mask_words,
    status,
    kept_units,
    exponents,
    scratch,
):  # pragma: no cover
    """:func:`enumerate_float32_tiles` over every tile, in ``chunks`` ranges run in parallel.

    ``scratch`` is :func:`float32_scratch` with ``chunks``: one set of buffers per chunk.
    """
    tiles = (bits.shape[0] // m) * (bits.shape[1] // m)
    values, magnitudes, row_sums, total, best_sum, best, high, low = scratch
    for c in numba.prange(chunks):
        enumerate_float32_tiles(
            bits, floats, m, n, choice_columns, patterns, choice_words,
            tiles * c // chunks, tiles * (c + 1) // chunks, mask, mask_words,
            status, kept_units, exponents,
            (values[c], magnitudes[c], row_sums[c], total[c], best_sum[c], best[c], high[c],
             low[c]),
        )  # fmt: skip


def float32_scratch(m: int, choice_count: int, chunks: int | None = None) -> tuple:
    """Buffers of :func:`enumerate_float32_tiles`, with a leading axis of ``chunks`` if given.

    Allocated here rather than in the kernel: on a cold cache every distinct
    ``np.empty``/``np.zeros`` signature inside a kernel is one more function to
    compile (~0.05-0.3 s each), which a first run would pay for (issue 17).
    Values, magnitudes, row sums, pattern total, best sum, best pattern, and the
    largest and smallest magnitude of each tile of a block.
    """
    lead = () if chunks is None else (chunks,)
    block = ENUMERATION_BLOCK
    return (
        np.zeros((*lead, m * m, block), np.float64),
        np.empty((*lead, m * m, block), np.uint32),
        np.empty((*lead, m, choice_count, block), np.float64),
        np.empty((*lead, block), np.float64),
        np.empty((*lead, block), np.float64),
        np.empty((*lead, block), np.int64),
        np.empty((*lead, block), np.uint32),
        np.empty((*lead, block), np.uint32),
    )


# ----------------------------------------------------------------------------
# 2:4 on float32 scores: the same first maximum, met in the middle
# ----------------------------------------------------------------------------


# Tiles per block of the 2:4 kernel (16 to 256 ran within 10% of each other; the pair
# sums of 64 tiles take 12 KiB, well inside L1).
BLOCK_2TO4 = 64


def scratch_2to4(chunks: int | None = None) -> tuple:
    """Buffers of :func:`enumerate_2to4_float32_tiles` (leading axis ``chunks`` if given).

    Pair sums of each row, per-row largest and smallest magnitude, the kept sums and the
    packed mask words of the two row pairs.
    """
    lead = () if chunks is None else (chunks,)
    block = BLOCK_2TO4
    return (
        np.empty((*lead, 4, 6, block), np.float64),
        np.empty((*lead, 4, block), np.uint32),
        np.empty((*lead, 4, block), np.uint32),
        np.empty((*lead, block), np.float64),
        np.empty((*lead, block), np.uint64),
        np.empty((*lead, block), np.uint64),
    )


# _POWERS_OF_TWO[k + 128] = 2**k, k = -128..171: the kept units of a float32 tile,
# best_sum * 2**-exponent, without a libm call per tile (-exponent = 150 - the smallest
# exponent field; 278 - field indexes it for every field 0..255).
_POWERS_OF_TWO = np.ldexp(1.0, np.arange(-128, 172)).astype(np.float64)


@numba.njit(cache=True, nogil=True, inline="always")
def _2to4_row_magnitudes(row_bits, count, i, row_high, row_low):  # pragma: no cover
    """Largest and smallest nonzero float32 magnitude (as bits) of row ``i`` of each tile."""
    no_magnitude = np.uint32(0xFFFFFFFF)
    magnitude = np.uint32(0x7FFFFFFF)
    for b in range(count):
        m0 = row_bits[4 * b] & magnitude
        m1 = row_bits[4 * b + 1] & magnitude
        m2 = row_bits[4 * b + 2] & magnitude
        m3 = row_bits[4 * b + 3] & magnitude
        row_high[i, b] = max(max(m0, m1), max(m2, m3))
        # Zeros count as the largest uint32, so the minimum is the smallest nonzero
        # (a select, not a wrapping subtraction: NumPy warns on that without the JIT).
        l0 = m0 if m0 != 0 else no_magnitude
        l1 = m1 if m1 != 0 else no_magnitude
        l2 = m2 if m2 != 0 else no_magnitude
        l3 = m3 if m3 != 0 else no_magnitude
        row_low[i, b] = min(min(l0, l1), min(l2, l3))


@numba.njit(cache=True, nogil=True, inline="always")
def _2to4_words_out(mask_words, r0, column, count, words01, words23):  # pragma: no cover
    """Write the packed mask bytes of rows 0-1 and 2-3 of ``count`` tiles of one tile row."""
    for i in range(4):
        out = mask_words[r0 + i, column : column + count]
        source_words = words01 if i < 2 else words23
        shift = np.uint64(32 * (i % 2))
        for b in range(count):
            out[b] = np.uint32(source_words[b] >> shift)


@numba.njit(cache=True, nogil=True, inline="always")
def _2to4_status_out(
    start, count, row_high, row_low, best, key_scale, binades, sums, status, kept_units, exponents
):  # pragma: no cover
    """Status (``NEEDS_UNITS`` where the tile spans more than ``binades`` binades, so that
    its float64 sums may be inexact) and, with ``sums``, the kept units of tiles ``start ..
    start + count - 1``: ``best * 2**-exponent`` when ``key_scale`` is 0 (``best`` is the
    kept sum), else ``best / key_scale`` (``best`` is already in units times that power
    of two).
    """
    exact_binades = binades
    status_out = status[start : start + count]
    exponent_out = exponents[start : start + count]
    kept_out = kept_units[start : start + count]
    for b in range(count):
        high = max(max(row_high[0, b], row_high[1, b]), max(row_high[2, b], row_high[3, b]))
        low = min(min(row_low[0, b], row_low[1, b]), min(row_low[2, b], row_low[3, b]))
        high_field = np.int64(high >> np.uint32(23))
        low_field = np.int64(low >> np.uint32(23))
        zero = high == 0
        wide = (high_field == 255) | (low_field == 0) | (high_field - low_field > exact_binades)
        status_out[b] = SOLVED if zero or not wide else NEEDS_UNITS
        if sums:
            exponent_out[b] = 0 if zero else low_field - 150
            # Clamped: all-zero tiles (low_field 511) read an entry they do not use.
            if key_scale == 0.0:
                units = best[b] * _POWERS_OF_TWO[min(max(278 - low_field, 0), 299)]
            else:
                units = best[b] / key_scale
            kept_out[b] = 0 if zero or wide else np.int64(units)


@numba.njit(cache=True, nogil=True)
def enumerate_2to4_float32_tiles(
    bits, floats, first, last, sums, mask_words, status, kept_units, exponents, scratch
):  # pragma: no cover
    """:func:`enumerate_float32_tiles` for 2:4, in 36 + 36 candidate sums per tile, not 90.

    Same answer (tested): the first maximum of the canonical table, on the same exact
    float64 sums and with the same ``NEEDS_UNITS`` rule. The search itself is
    :func:`_2to4_best_of_block`, generated from
    :func:`~nmref.transposable._meet_in_middle.meet_in_middle_tables`. A block holds up to
    ``BLOCK_2TO4`` tiles of one tile row; its rows are read as 1-D slices so that the
    loads of a tile's four entries vectorise. ``sums=False`` skips the kept units and
    exponents (only the mask and the status are written).
    """
    row_sums, row_high, row_low, best, words01, words23 = scratch
    tiles_across = bits.shape[1] // 4
    start = first
    while start < last:
        tile_row = start // tiles_across
        count = min(BLOCK_2TO4, last - start, (tile_row + 1) * tiles_across - start)
        r0 = tile_row * 4
        c0 = (start - tile_row * tiles_across) * 4
        for i in range(4):
            row = floats[r0 + i, c0 : c0 + 4 * count]
            for b in range(count):
                x0 = np.float64(row[4 * b])
                x1 = np.float64(row[4 * b + 1])
                x2 = np.float64(row[4 * b + 2])
                x3 = np.float64(row[4 * b + 3])
                # The order of the row choices of pattern_table(2, 4).
                row_sums[i, 0, b] = x0 + x1
                row_sums[i, 1, b] = x0 + x2
                row_sums[i, 2, b] = x0 + x3
                row_sums[i, 3, b] = x1 + x2
                row_sums[i, 4, b] = x1 + x3
                row_sums[i, 5, b] = x2 + x3
            _2to4_row_magnitudes(bits[r0 + i, c0 : c0 + 4 * count], count, i, row_high, row_low)
        _2to4_best_of_block(row_sums, count, best, words01, words23)
        _2to4_words_out(mask_words, r0, c0 // 4, count, words01, words23)
        _2to4_status_out(
            start, count, row_high, row_low, best, 0.0, float64_exact_binades(4),
            sums, status, kept_units, exponents,
        )  # fmt: skip
        start += count


@numba.njit(cache=True, nogil=True, parallel=True)
def enumerate_2to4_float32_tiles_parallel(
    bits, floats, chunks, sums, mask_words, status, kept_units, exponents, scratch
):  # pragma: no cover
    """:func:`enumerate_2to4_float32_tiles` over every tile, ``chunks`` ranges in parallel."""
    tiles = (bits.shape[0] // 4) * (bits.shape[1] // 4)
    for c in numba.prange(chunks):
        enumerate_2to4_float32_tiles(
            bits, floats, tiles * c // chunks, tiles * (c + 1) // chunks, sums,
            mask_words, status, kept_units, exponents,
            (scratch[0][c], scratch[1][c], scratch[2][c], scratch[3][c], scratch[4][c],
             scratch[5][c]),
        )  # fmt: skip


# ----------------------------------------------------------------------------
# 2:4 at most, on float32 scores: the same first maximum, met in the middle
# ----------------------------------------------------------------------------

# Row choices of the at-most 2:4 kernel in canonical order (descending bits, column 0
# most significant): the columns each keeps, -1 for none. The kernel's row sums are
# written out in this order (test_at_most_2to4_choices_are_the_canonical_row_order).
AT_MOST_2TO4_CHOICES = np.array(
    [(0, 1), (0, 2), (0, 3), (0, -1), (1, 2), (1, 3), (1, -1), (2, 3), (2, -1), (3, -1), (-1, -1)],
    dtype=np.int64,
)
# Tiles per block of the at-most 2:4 kernel: each of its passes over the lanes has a fixed
# cost per block (64 and 128 were slower).
BLOCK_2TO4_AT_MOST = 256


def at_most_2to4_tables() -> tuple:
    """Tables of :func:`enumerate_2to4_at_most_float32_tiles`.

    A valid at-most 2:4 tile is a pair of row choices (at most 2 columns each) for rows
    0-1 and a pair for rows 2-3 whose column counts add up to at most 2 in every column.
    Pairs are numbered in lexicographic order of their choices (``p = 11 a + c``), the
    order of :func:`~nmref.transposable.patterns.at_most_pattern_table`. Column counts
    (0..2 per column) are coded in base 3 (81 *slots*). Pairs for rows 2-3 are grouped by
    their counts; the kernel then takes, for every capacity vector ``r``, the first
    maximum over all slots ``<= r`` componentwise (a prefix maximum along each of the
    four axes of the 3 x 3 x 3 x 3 lattice); a pair for rows 0-1 with counts ``k`` needs
    the capacity ``2 - k``.

    Returns ``(lower, upper, final, upper_capacity, lower_words, upper_words)``:
    ``lower[p] = (a, c, slot, source plane, target plane)``, ``upper[q] = (a, c, capacity,
    source plane, target plane)``, ``final[slot]`` the plane that holds a slot's last
    result (2 for the 31 slots no pair reaches: they stay at -inf), and the pairs' packed
    mask bytes (the first row in the low 32 bits). The running maxima are kept in two
    planes alternately, and plane 2 holds -inf for a slot's first candidate, because a
    select stored back to the address it loaded becomes a masked store, which is slow on
    x86.
    """
    choices = AT_MOST_2TO4_CHOICES
    counts = np.zeros((len(choices), 4), dtype=np.int64)
    for index, columns in enumerate(choices):
        for column in columns:
            if column >= 0:
                counts[index, column] = 1
    powers = 3 ** np.arange(4, dtype=np.int64)
    words = (counts.astype(np.uint64) << (np.uint64(8) * np.arange(4, dtype=np.uint64))).sum(
        axis=1, dtype=np.uint64
    )
    seen = np.zeros(81, dtype=np.int64)
    lower = []
    upper = []
    for a in range(len(choices)):
        for c in range(len(choices)):
            slot = int((counts[a] + counts[c]) @ powers)
            k = int(seen[slot])
            lower.append((a, c, slot, 2 if k == 0 else (k - 1) % 2, k % 2))
            seen[slot] = k + 1
            q = len(upper)
            capacity = int((2 - counts[a] - counts[c]) @ powers)
            upper.append((a, c, capacity, 2 if q == 0 else (q - 1) % 2, q % 2))
    final = np.where(seen > 0, (seen - 1) % 2, 2).astype(np.int64)
    lower_array = np.array(lower, dtype=np.int64)
    upper_array = np.array(upper, dtype=np.int64)
    return (
        lower_array,
        upper_array,
        final,
        np.ascontiguousarray(upper_array[:, 2]),
        words[lower_array[:, 0]] | (words[lower_array[:, 1]] << np.uint64(32)),
        words[upper_array[:, 0]] | (words[upper_array[:, 1]] << np.uint64(32)),
    )


def scratch_2to4_at_most(chunks: int | None = None) -> tuple:
    """Buffers of :func:`enumerate_2to4_at_most_float32_tiles` (leading axis ``chunks``).

    Scaled row sums of the 11 choices, per-row largest and smallest magnitude, per-tile
    scales, the slot keys (three planes), the capacity keys (two planes) and their
    completions without the pair number, the overall keys (three planes) and kept sums,
    the plane of each capacity's key, and the packed mask words of the two row pairs.
    """
    lead = () if chunks is None else (chunks,)
    block = BLOCK_2TO4_AT_MOST
    slot_key = np.empty((*lead, 3, 81, block), np.float64)
    slot_key[..., 2, :, :] = -np.inf
    best = np.empty((*lead, 3, block), np.float64)
    best[..., 2, :] = -np.inf
    return (
        np.empty((*lead, 4, 11, block), np.float64),
        np.empty((*lead, 4, block), np.uint32),
        np.empty((*lead, 4, block), np.uint32),
        np.empty((*lead, block), np.float64),
        slot_key,
        np.empty((*lead, 2, 81, block), np.float64),
        np.empty((*lead, 81, block), np.float64),
        best,
        np.empty((*lead, block), np.float64),
        np.zeros((*lead, 81), np.int64),
        np.empty((*lead, block), np.uint64),
        np.empty((*lead, block), np.uint64),
    )


# Index bits of the at-most 2:4 kernel's keys (lower pair numbers 0..120), and the widest
# tile it sums as keys: units of the tile's lowest bit times 2**7 plus an index must stay
# below 2**53 for sums of up to 16 entries (wider tiles get NEEDS_UNITS).
_KEY_INDEX = 128.0
_KEY_BINADES = 53 - 24 - 4 - 7


@numba.njit(cache=True, nogil=True)
def enumerate_2to4_at_most_float32_tiles(
    bits,
    floats,
    tables,
    first,
    last,
    mask_words,
    status,
    kept_units,
    exponents,
    scratch,
):  # pragma: no cover
    """First maximum of the 7343 at-most 2:4 patterns of every tile, in O(121 + 324 + 121).

    The same answer as :func:`~nmref.transposable.patterns.brute_tile_at_most` (tested):
    the first maximum in canonical order. Rows 2-3: the best pair per slot of column
    counts; then, per capacity vector, the best over every slot below it (axis by axis:
    ``best[r] = max(best[r], best[r - e_j])``); then rows 0-1: the first best pair plus
    the best completion within the capacity it leaves (:func:`at_most_2to4_tables`, whose
    ``tables`` this takes).

    Ties among completions must go to the lowest pair number (patterns that share rows
    0-1 are ordered by their rows 2-3 pair), so a completion is compared as one exact
    float64 *key*: its sum in units of the tile's lowest bit, times 128, plus ``127 -
    p``. Keys of different pairs always differ, so every comparison above is a plain
    maximum, and the sum is the key rounded down to a multiple of 128. Keys are exact
    integers below ``2**53`` when the tile spans at most ``_KEY_BINADES`` binades;
    wider tiles (and NaN, infinity, subnormals) get ``NEEDS_UNITS``. Writes the mask,
    the status, the kept units and the exponents.
    """
    lower, upper, final, upper_capacity, lower_words, upper_words = tables
    (
        row_sums,
        row_high,
        row_low,
        scale,
        slot_key,
        capacity_key,
        completion,
        best,
        best_total,
        where,
        words01,
        words23,
    ) = scratch
    tiles_across = bits.shape[1] // 4
    block = BLOCK_2TO4_AT_MOST
    last_plane = upper[upper.shape[0] - 1, 4]
    # 2**(7 - e) for the tile's lowest bit 2**e, e = low_field - 150, from the table.
    scale_offset = 128 + 7 + 150
    start = first
    while start < last:
        tile_row = start // tiles_across
        count = min(block, last - start, (tile_row + 1) * tiles_across - start)
        r0 = tile_row * 4
        c0 = (start - tile_row * tiles_across) * 4
        lanes = min(block, (count + 7) // 8 * 8)
        for i in range(4):
            _2to4_row_magnitudes(bits[r0 + i, c0 : c0 + 4 * count], count, i, row_high, row_low)
        for b in range(count):
            low = min(min(row_low[0, b], row_low[1, b]), min(row_low[2, b], row_low[3, b]))
            # Clamped: all-zero tiles (low_field 511) read an entry they do not use.
            low_field = min(np.int64(low >> np.uint32(23)), 255)
            scale[b] = _POWERS_OF_TWO[scale_offset - low_field]
        for i in range(4):
            row = floats[r0 + i, c0 : c0 + 4 * count]
            for b in range(count):
                # Exact: a power-of-two scaling of a tile that is not too wide.
                x0 = np.float64(row[4 * b]) * scale[b]
                x1 = np.float64(row[4 * b + 1]) * scale[b]
                x2 = np.float64(row[4 * b + 2]) * scale[b]
                x3 = np.float64(row[4 * b + 3]) * scale[b]
                # The order of AT_MOST_2TO4_CHOICES.
                row_sums[i, 0, b] = x0 + x1
                row_sums[i, 1, b] = x0 + x2
                row_sums[i, 2, b] = x0 + x3
                row_sums[i, 3, b] = x0
                row_sums[i, 4, b] = x1 + x2
                row_sums[i, 5, b] = x1 + x3
                row_sums[i, 6, b] = x1
                row_sums[i, 7, b] = x2 + x3
                row_sums[i, 8, b] = x2
                row_sums[i, 9, b] = x3
                row_sums[i, 10, b] = 0.0
            for b in range(count, lanes):
                for c in range(11):
                    row_sums[i, c, b] = 0.0
        # --- rows 2-3: the best key of every slot (planes alternate per candidate)
        for p in range(lower.shape[0]):
            a = lower[p, 0]
            c = lower[p, 1]
            slot = lower[p, 2]
            source = lower[p, 3]
            target = lower[p, 4]
            index = np.float64(127 - p)
            for b in range(lanes):
                key = (row_sums[2, a, b] + row_sums[3, c, b]) + index
                old = slot_key[source, slot, b]
                slot_key[target, slot, b] = key if key > old else old
        # --- the best key over every slot below each capacity, one axis at a time:
        # best[r] = max(best[r], best[r - e_j]) where r_j > 0. Each update writes the
        # plane its node's value is not in (``where``), so no update stores back where it
        # loaded; nodes with r_j = 0 keep their value where it is.
        for r in range(81):
            where[r] = 0
            f = final[r]
            for b in range(lanes):
                capacity_key[0, r, b] = slot_key[f, r, b]
        for axis in range(4):
            step = 3**axis
            for r in range(81):
                if (r // step) % 3 == 0:
                    continue
                source = where[r]
                target = 1 - source
                other_plane = where[r - step]
                below = r - step
                for b in range(lanes):
                    key = capacity_key[source, r, b]
                    other = capacity_key[other_plane, below, b]
                    capacity_key[target, r, b] = other if other > key else key
                where[r] = target
        for r in range(81):
            plane = where[r]
            for b in range(lanes):
                # The completion's sum, in the same scaled units as the row sums.
                completion[r, b] = np.floor(capacity_key[plane, r, b] / _KEY_INDEX) * _KEY_INDEX
        # --- rows 0-1: the best pair plus its best completion, again as keys (pair
        # numbers 0..120 in the low bits: ties go to the lowest)
        for q in range(upper.shape[0]):
            a = upper[q, 0]
            c = upper[q, 1]
            capacity = upper[q, 2]
            source = upper[q, 3]
            target = upper[q, 4]
            index = np.float64(127 - q)
            for b in range(lanes):
                key = ((row_sums[0, a, b] + row_sums[1, c, b]) + completion[capacity, b]) + index
                old = best[source, b]
                best[target, b] = key if key > old else old
        for b in range(count):
            key = best[last_plane, b]
            total = np.floor(key / _KEY_INDEX) * _KEY_INDEX
            index = key - total
            # Clamped: a NaN tile (NEEDS_UNITS) must not index out of range.
            q = min(max(127 - np.int64(index) if index == index else 0, 0), 120)
            capacity = upper_capacity[q]
            index = capacity_key[where[capacity], capacity, b] - completion[capacity, b]
            p = min(max(127 - np.int64(index) if index == index else 0, 0), 120)
            best_total[b] = total
            words01[b] = upper_words[q]
            words23[b] = lower_words[p]
        _2to4_words_out(mask_words, r0, c0 // 4, count, words01, words23)
        _2to4_status_out(
            start, count, row_high, row_low, best_total, _KEY_INDEX, _KEY_BINADES,
            True, status, kept_units, exponents,
        )  # fmt: skip
        start += count


@numba.njit(cache=True, nogil=True, parallel=True)
def enumerate_2to4_at_most_float32_tiles_parallel(
    bits, floats, tables, chunks, mask_words, status, kept_units, exponents, scratch
):  # pragma: no cover
    """:func:`enumerate_2to4_at_most_float32_tiles` over every tile, ``chunks`` ranges in
    parallel."""
    tiles = (bits.shape[0] // 4) * (bits.shape[1] // 4)
    for c in numba.prange(chunks):
        enumerate_2to4_at_most_float32_tiles(
            bits, floats, tables, tiles * c // chunks, tiles * (c + 1) // chunks,
            mask_words, status, kept_units, exponents,
            (scratch[0][c], scratch[1][c], scratch[2][c], scratch[3][c], scratch[4][c],
             scratch[5][c], scratch[6][c], scratch[7][c], scratch[8][c], scratch[9][c],
             scratch[10][c], scratch[11][c]),
        )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _write_pattern(mask, r0, c0, m, n, choice_columns, patterns, p):  # pragma: no cover
    """Write tile pattern ``p`` of the table into the mask at ``(r0, c0)``."""
    for i in range(m):
        for j in range(m):
            mask[r0 + i, c0 + j] = False
        for k in range(n):
            mask[r0 + i, c0 + choice_columns[patterns[p, i], k]] = True


@numba.njit(cache=True, nogil=True)
def masked_tiles(
    bits, fraction_bits, m, max_bits, mask, status, kept_units, exponents
):  # pragma: no cover
    """Exact kept sum of ``mask`` in every tile, as ``kept_units * 2**exponents``.

    Uses the same tile units as the solvers, so a gap is a difference of
    integers with a common exponent.
    """
    tiles_across = bits.shape[1] // m
    tiles = (bits.shape[0] // m) * tiles_across
    units = np.empty(m * m, np.int64)
    significand = np.empty(m * m, np.int64)
    scale = np.empty(m * m, np.int64)
    for t in range(tiles):
        r0 = (t // tiles_across) * m
        c0 = (t % tiles_across) * m
        code, exponent = _load_tile(
            bits, r0, c0, m, fraction_bits, max_bits, significand, scale, units
        )
        status[t] = code
        exponents[t] = exponent
        total = np.int64(0)
        if code == SOLVED:
            for i in range(m):
                for j in range(m):
                    if mask[r0 + i, c0 + j]:
                        total += units[i * m + j]
        kept_units[t] = total
