"""Mask diversity: how many masks a sparsity structure allows (exact integers).

Hubara et al. 2021 (Sec. 3, "mask diversity") measure the flexibility of a
sparsity structure by the number of distinct masks it admits for a tensor of
``size`` elements at the same density ``n / m``:

* unstructured, keeping ``size * n / m``:  ``C(size, size * n / m)``;
* 1-D N:M (``size / m`` groups):            ``C(m, n) ** (size / m)``;
* transposable N:M (``size / m^2`` tiles):   ``K(m, n) ** (size / m^2)``,

where ``K(m, n)`` is the number of ``m x m`` 0/1 matrices with every row and
column sum equal to ``n`` (OEIS A058527 for n = m/2, A001499 for n = 2).
Everything is a Python ``int``: exact, no overflow.

A closed form sometimes quoted for ``K`` (``m! (m-1)! ... (m-n+1)!``) is not an
exact count: it gives 144 instead of 90 for 2:4.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

from nmref._validation import check_choice, check_count
from nmref.patterns import check_pattern

__all__ = ["count_transposable_patterns", "mask_diversity"]

Structure = Literal["unstructured", "nm", "transposable"]
STRUCTURES: tuple[str, ...] = ("unstructured", "nm", "transposable")


#: Limits of :func:`count_transposable_patterns`: its recursion is ``m`` deep and its memo
#: holds up to ``C(m + n, n)`` states; beyond these it would exhaust the stack or the clock.
COUNT_MAX_M = 400
COUNT_MAX_STATES = 2_000_000


def count_transposable_patterns(m: int, n: int) -> int:
    """Number ``K(m, n)`` of ``m x m`` 0/1 matrices with all row and column sums ``n``.

    Dynamic programming over rows. The state is how many columns hold
    ``0, 1, ..., n`` ones so far (columns are interchangeable, so only these
    counts matter); a row puts its ``n`` ones into ``x_j`` columns of level
    ``j`` (``sum x_j = n``), in ``prod C(a_j, x_j)`` ways, promoting them to
    level ``j + 1``. Memoised on ``(rows left, state)``.

    Note the argument order ``(m, n)``, as in the issue and OEIS tables;
    everything else in nmref takes ``(n, m)``.

    Parameters
    ----------
    m : int
        Matrix size (the tile size).
    n : int
        Ones per row and per column, ``0 <= n <= m``.

    Returns
    -------
    int

    Raises
    ------
    TypeError, ValueError
        As :func:`nmref.patterns.check_pattern` for ``(n, m)``.

    Notes
    -----
    The number of states is the number of compositions of ``m`` into ``n + 1``
    parts, ``C(m + n, n)``, and each enumerates up to as many promotions:
    polynomial in ``m`` for fixed ``n``. ``K(8, 4)`` takes milliseconds,
    ``K(12, 6)`` about a second and ``K(16, 8)`` tens of seconds.

    Examples
    --------
    >>> count_transposable_patterns(4, 2), count_transposable_patterns(6, 3)
    (90, 297200)
    >>> count_transposable_patterns(8, 4)
    116963796250
    >>> count_transposable_patterns(4, 1)
    24
    """
    pattern = check_pattern(n, m)
    if pattern.n == 0 or pattern.n == pattern.m:
        return 1
    states = math.comb(pattern.m + pattern.n, pattern.n)
    if pattern.m > COUNT_MAX_M or states > COUNT_MAX_STATES:
        raise ValueError(
            f"m={pattern.m}, n={pattern.n}: counting needs about {states} states over {pattern.m} "
            f"rows; this dynamic programme stops at m <= {COUNT_MAX_M} and "
            f"{COUNT_MAX_STATES} states (K(16, 8) is ~{math.comb(24, 8)} states, tens of seconds)"
        )
    start = (pattern.m,) + (0,) * pattern.n  # all m columns hold 0 ones
    return _count_rows(pattern.m, pattern.n, start)


@functools.cache
def _count_rows(rows_left: int, n: int, state: tuple[int, ...]) -> int:
    if rows_left == 0:
        # Every column must have reached level n.
        return 1 if all(count == 0 for count in state[:-1]) else 0
    # Prune: a column at level j needs n - j more ones, one per remaining row.
    for level, count in enumerate(state):
        if count and n - level > rows_left:
            return 0
    total = 0
    for promotion in _promotions(state[:-1], n):
        ways = 1
        for level, chosen in enumerate(promotion):
            ways *= math.comb(state[level], chosen)
        next_state = list(state)
        for level, chosen in enumerate(promotion):
            next_state[level] -= chosen
            next_state[level + 1] += chosen
        total += ways * _count_rows(rows_left - 1, n, tuple(next_state))
    return total


def _promotions(levels: tuple[int, ...], ones: int):
    """All ``(x_0, ..., x_{n-1})`` with ``0 <= x_j <= levels[j]`` and ``sum x_j = ones``."""
    if not levels:
        if ones == 0:
            yield ()
        return
    for chosen in range(min(levels[0], ones) + 1):
        for rest in _promotions(levels[1:], ones - chosen):
            yield (chosen, *rest)


def mask_diversity(structure: Structure, n: int, m: int, size: int) -> int:
    """Number of distinct masks of ``size`` elements with density ``n / m``.

    Parameters
    ----------
    structure : {"unstructured", "nm", "transposable"}
        ``"unstructured"``: any ``size * n / m`` kept entries. ``"nm"``: 1-D
        N:M groups of ``m``. ``"transposable"``: ``m x m`` tiles with ``n`` per
        row and column.
    n, m : int
        The pattern: ``n`` kept of every ``m``.
    size : int
        Number of elements ``T``; a multiple of ``m`` (``"unstructured"``,
        ``"nm"``) or of ``m**2`` (``"transposable"``).

    Returns
    -------
    int
        Exact.

    Raises
    ------
    ValueError
        If ``structure`` is unknown, ``size < 0`` or not a multiple as required.

    References
    ----------
    .. [1] Hubara et al., NeurIPS 2021, Sec. 3 (mask diversity).

    Examples
    --------
    >>> mask_diversity("transposable", 2, 4, 64)   # 90 ** 4
    65610000
    >>> mask_diversity("nm", 2, 4, 64) == 6 ** 16
    True
    >>> mask_diversity("unstructured", 2, 4, 64) == math.comb(64, 32)
    True
    """
    pattern = check_pattern(n, m)
    check_choice(structure, "structure", STRUCTURES)
    size = check_count(size, "size")  # an int: NumPy integers would overflow in the powers
    unit = pattern.m**2 if structure == "transposable" else pattern.m
    if size % unit:
        raise ValueError(f"size={size} must be a multiple of {unit} for structure={structure!r}")
    if structure == "unstructured":
        return math.comb(size, size // pattern.m * pattern.n)
    if structure == "nm":
        return math.comb(pattern.m, pattern.n) ** (size // pattern.m)
    return count_transposable_patterns(pattern.m, pattern.n) ** (size // pattern.m**2)
