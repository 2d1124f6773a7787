"""N:M patterns: parsing and validating ``(n, m)``.

Throughout nmref, ``n`` is the number of **kept** entries in every group of ``m``
consecutive entries (``specs/conventions.md``, rule C1). ``"2:4"`` keeps 2 of 4.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from nmref._validation import check_integer

__all__ = ["Pattern", "check_pattern", "parse_pattern"]


class Pattern(NamedTuple):
    """An N:M pattern: ``n`` kept entries in every group of ``m``.

    Attributes
    ----------
    n : int
        Number of kept entries per group, ``0 <= n <= m``.
    m : int
        Group size, ``m >= 1``.
    """

    n: int
    m: int

    def __str__(self) -> str:
        return f"{self.n}:{self.m}"

    @property
    def density(self) -> float:
        """Fraction of kept entries, ``n / m``."""
        return self.n / self.m


def check_pattern(n: object, m: object) -> Pattern:
    """Validate ``n`` and ``m`` and return them as a :class:`Pattern`.

    Parameters
    ----------
    n, m : int
        Kept count and group size. Any integral type (Python or NumPy) is
        accepted; ``bool`` and floats are not.

    Returns
    -------
    Pattern

    Raises
    ------
    TypeError
        If ``n`` or ``m`` is not an integer.
    ValueError
        If ``m < 1``, ``n < 0`` or ``n > m`` (conventions rule C6).

    Examples
    --------
    >>> check_pattern(2, 4)
    Pattern(n=2, m=4)
    """
    n_int, m_int = check_integer(n, "n"), check_integer(m, "m")
    if m_int < 1:
        raise ValueError(f"m={m_int} must be >= 1")
    if n_int < 0:
        raise ValueError(f"n={n_int} must be >= 0")
    if n_int > m_int:
        raise ValueError(f"n={n_int} must be <= m={m_int}")
    return Pattern(n_int, m_int)


# At most 18 digits a side (below 2**63): a longer number is no group size, and Python refuses
# to convert one of more than 4,300 digits with a message naming no argument.
_PATTERN_RE = re.compile(r"^\s*(\d{1,18})\s*:\s*(\d{1,18})\s*$")


def parse_pattern(text: str | Pattern | tuple[int, int]) -> Pattern:
    """Parse ``"N:M"`` (N kept of every M) into a :class:`Pattern`.

    Parameters
    ----------
    text : str or (int, int)
        ``"2:4"``, ``"4:8"``, ... or an ``(n, m)`` pair. N counts **kept**
        entries; to convert from tools where N counts zeros (Wanda's
        ``prune_n``, Hubara et al.'s "N zeros") use ``m - prune_n``.

    Returns
    -------
    Pattern

    Raises
    ------
    ValueError
        If the text is not of the form ``"<int>:<int>"`` or the numbers break
        the rules of :func:`check_pattern`.

    Examples
    --------
    >>> parse_pattern("2:4")
    Pattern(n=2, m=4)
    >>> parse_pattern("1:16").density
    0.0625
    """
    if isinstance(text, tuple):
        return check_pattern(*text)
    if not isinstance(text, str):
        raise TypeError(f"pattern={text!r} must be a string like '2:4' or an (n, m) tuple")
    match = _PATTERN_RE.match(text)
    if match is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ValueError(
            f"pattern={shown!r} must have the form 'N:M' with N and M whole numbers of at most "
            "18 digits, e.g. '2:4' (N kept of every M)"
        )
    return check_pattern(int(match.group(1)), int(match.group(2)))
