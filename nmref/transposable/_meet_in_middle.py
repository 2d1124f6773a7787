"""The exact 2:4 tile search met in the middle: its tables, and the kernel code written from them.

A 4 x 4 transposable 2:4 tile keeps two entries in every row and every column: 90
patterns (Hubara et al. 2021, Sec. 3.1, enumerate them all). Split the tile into rows 0-1
and rows 2-3. Each row keeps one of the 6 column pairs (a *choice*), so each half is one
of 36 pairs of choices, and a half's *column counts* (0, 1 or 2 per column) say how many
entries it keeps per column. A pattern is a pair for rows 0-1 and a pair for rows 2-3
whose column counts add up to 2 in every column. Group the pairs for rows 2-3 by their
column counts (19 *slots*); then the best pattern is the best pair for rows 0-1 plus the
best pair of the slot it needs. That is 36 + 36 candidate sums per tile, not 90 x 4
additions, and every sum is a float64 addition that is exact on tiles the kernel keeps
(spec T5).

Ties. The canonical optimum is the first maximum of the pattern table
(:func:`~nmref.transposable.patterns.pattern_table`, spec T3), which is in lexicographic
order of the four rows' choices. Both lists here are in lexicographic order of their
choice indices, so taking the first maximum over rows 2-3 within each slot, then the
first maximum over rows 0-1 of (pair + its slot's best), returns that same pattern: two
patterns that share rows 0-1 are ordered by rows 2-3, and rows 0-1 decide first.

The kernel (:func:`~nmref.transposable._enumeration_kernels.enumerate_2to4_float32_tiles`)
does not loop over these tables. :func:`best_of_block_source` writes them out as straight-line
code, one line per candidate, which keeps every running maximum in a register and lets
LLVM vectorise across tiles (1.6x-1.8x faster than looping over the tables with the
maxima in memory); ``scripts/generate_kernels.py`` writes it to
``_generated_meet_in_middle.py`` (:mod:`~nmref.transposable._codegen`).
"""

from __future__ import annotations

import numpy as np

from nmref.transposable._codegen import generated_module
from nmref.transposable._driver import _enumeration_tables
from nmref.transposable.patterns import pattern_table

_GENERATED_DOCSTRING = """
The exact 2:4 tile search met in the middle, as straight-line code.

Written from :func:`~nmref.transposable._meet_in_middle.meet_in_middle_tables` by
:mod:`~nmref.transposable._meet_in_middle`, which says why; called by
:func:`~nmref.transposable._enumeration_kernels.enumerate_2to4_float32_tiles`.
"""


def meet_in_middle_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 2:4 half-tile pairs, their slots and their mask words.

    Returns
    -------
    lower : ndarray of int64, shape (36, 3)
        ``(c2, c3, slot)`` per pair for rows 2-3, in lexicographic order of ``(c2, c3)``;
        ``c2`` and ``c3`` index the row choices of ``pattern_table(2, 4)``, and slots are
        numbered in order of first appearance.
    upper : ndarray of int64, shape (36, 3)
        ``(c0, c1, slot)`` per pair for rows 0-1, in lexicographic order; ``slot`` is the
        slot of rows 2-3 that completes it (column counts ``2 - counts(c0) - counts(c1)``).
    lower_words, upper_words : ndarray of uint64, shape (36,)
        The pair's two rows as packed mask bytes, the first row in the low 32 bits.

    Notes
    -----
    Every pair for rows 0-1 has a completion (the complement of each row's choice is a
    choice), so ``upper`` holds all 36 pairs. O(36) time.
    """
    choices = pattern_table(2, 4)[0]
    counts = choices.astype(np.int64)
    # Each row choice as 4 mask bytes in one word, as every enumeration kernel packs them.
    words = _enumeration_tables((2, 4))[2].astype(np.uint64)
    code_powers = 3 ** np.arange(4, dtype=np.int64)
    slot_of: dict[int, int] = {}
    lower = []
    for c2 in range(len(choices)):
        for c3 in range(len(choices)):
            code = int((counts[c2] + counts[c3]) @ code_powers)
            lower.append((c2, c3, slot_of.setdefault(code, len(slot_of))))
    upper = []
    for c0 in range(len(choices)):
        for c1 in range(len(choices)):
            needed = 2 - counts[c0] - counts[c1]
            upper.append((c0, c1, slot_of[int(needed @ code_powers)]))
    lower_array = np.array(lower, dtype=np.int64)
    upper_array = np.array(upper, dtype=np.int64)

    def pair_words(pairs: np.ndarray) -> np.ndarray:
        return words[pairs[:, 0]] | (words[pairs[:, 1]] << np.uint64(32))

    return lower_array, upper_array, pair_words(lower_array), pair_words(upper_array)


def _word_literal(word: int) -> str:
    return f"np.uint64(0x{word >> 32:08X}_{word & 0xFFFFFFFF:08X})"


def best_of_block_source() -> str:
    """Source of the module ``_generated_meet_in_middle``, which holds
    ``_2to4_best_of_block``: the meet in the middle as straight-line code.

    The function reads the 24 pair sums of a block of tiles (``row_sums[row, choice,
    tile]``, the choices in the order of ``pattern_table(2, 4)``) and writes, per tile,
    the kept sum of the canonical optimum and its mask words (rows 0-1 and rows 2-3, as
    :func:`meet_in_middle_tables` packs them). Each candidate replaces the running
    maximum only when it is strictly larger, in table order: the first maximum wins.
    """
    lower, upper, lower_words, upper_words = meet_in_middle_tables()
    choices = pattern_table(2, 4)[0]
    names = " ".join("".join(str(j) for j in np.flatnonzero(choice)) for choice in choices)
    counts = choices.astype(np.int64)
    out = [
        "@numba.njit(cache=True, nogil=True)",
        "def _2to4_best_of_block(row_sums, count, best, words01, words23):  # pragma: no cover",
        '    """Per tile of the block: the canonical 2:4 optimum\'s kept sum and mask words.',
        "",
        "    Generated from :func:`~nmref.transposable._meet_in_middle.meet_in_middle_tables`",
        "    (see that module for the method and why the first maximum is canonical).",
        '    """',
        "    for b in range(count):",
        f"        # s<row><choice>: the row's sum over the choice's columns ({names}).",
    ]
    for row in range(4):
        for choice in range(len(choices)):
            out.append(f"        s{row}{choice} = row_sums[{row}, {choice}, b]")
    out.append("        # Rows 2-3: v<slot> is the slot's first best sum, k<slot> its mask words.")
    seen: set[int] = set()
    for p, (c2, c3, slot) in enumerate(lower):
        word = _word_literal(int(lower_words[p]))
        if slot not in seen:
            seen.add(slot)
            column_counts = "".join(str(c) for c in counts[c2] + counts[c3])
            members = int((lower[:, 2] == slot).sum())
            plural = "pair" if members == 1 else "pairs"
            out.append(f"        # slot {slot}: column counts {column_counts}, {members} {plural}")
            out.append(f"        v{slot} = s2{c2} + s3{c3}")
            out.append(f"        k{slot} = {word}")
            continue
        out.append(f"        x = s2{c2} + s3{c3}")
        out.append(f"        t = x > v{slot}")
        out.append(f"        v{slot} = x if t else v{slot}")
        out.append(f"        k{slot} = {word} if t else k{slot}")
    out.append("        # Rows 0-1: the first best pair plus the best of the slot it needs.")
    for q, (c0, c1, slot) in enumerate(upper):
        word = _word_literal(int(upper_words[q]))
        if q == 0:
            out.append(f"        total = (s0{c0} + s1{c1}) + v{slot}")
            out.append(f"        w01 = {word}")
            out.append(f"        w23 = k{slot}")
            continue
        out.append(f"        x = (s0{c0} + s1{c1}) + v{slot}")
        out.append("        t = x > total")
        out.append("        total = x if t else total")
        out.append(f"        w01 = {word} if t else w01")
        out.append(f"        w23 = k{slot} if t else w23")
    out += [
        "        best[b] = total",
        "        words01[b] = w01",
        "        words23[b] = w23",
    ]
    return generated_module(
        "nmref.transposable._meet_in_middle.best_of_block_source",
        _GENERATED_DOCSTRING,
        ["import numba", "import numpy as np"],
        ["\n".join(out) + "\n"],
    )
