r"""Which N:M a layer gets: the authors' binomial-tail rule, in exact arithmetic (spec A1).

A layer pruned without structure has a fraction ``p`` of zero weights. If its zeros fell
independently, the number of zeros ``Z`` in a group of ``m`` would be binomial,

.. math::

    P(Z \ge k) = \sum_{i=k}^{m} \binom{m}{i} p^i (1 - p)^{m - i} ,

and the authors keep ``n = m - k`` for the largest ``k <= m - 1`` whose tail exceeds the
confidence level: the sparsest pattern that most groups (under the binomial model) already
satisfy. The tail is computed here as an exact rational, so a tie with the confidence level
is decided by the rule (strictly greater), never by rounding.

Two cases the binomial model gets wrong are fixed by the layer's own zeros: a layer that is
already (at most) N:M keeps that N (``structured_n``, the most nonzeros in any group), and
an all-zero layer keeps 1 (N is never 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from nmref._validation import check_positive_integer, check_real, check_remainder
from nmref.adaprune._inputs import as_weight

__all__ = ["DEFAULT_CONFIDENCE", "NChoice", "binomial_tail", "choose_n"]

#: The authors' ``conf_level`` default of ``extract_topk`` (``AdaPrune/utils/adaprune.py``).
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class NChoice:
    """The kept count chosen for one layer, with the numbers that decided it.

    Attributes
    ----------
    n : int
        The choice, ``max(1, min(binomial_n, structured_n))``, in ``1..m``.
    m : int
        Group size.
    confidence : float
        The confidence level used.
    zero_fraction : Fraction
        Exact zeros (``-0.0`` included) over the weight's entries (padding excluded).
    binomial_n : int
        The authors' rule alone: ``m - k`` for the largest ``k <= m - 1`` with
        ``P(Z >= k) > confidence``.
    structured_n : int
        The most nonzero weights in any group (a partial last group counts its real
        entries): the smallest ``n`` for which the layer is already at-most ``n:m``.
    tail : tuple of Fraction
        ``P(Z >= k)`` for ``k = 0..m``, exact.
    """

    n: int
    m: int
    confidence: float
    zero_fraction: Fraction
    binomial_n: int
    structured_n: int
    tail: tuple[Fraction, ...]

    @property
    def reason(self) -> str:
        """Which rule set ``n``: ``"floor"`` (an all-zero layer), ``"structured"`` (the layer's
        own groups are sparser than the binomial rule's pick) or ``"binomial"``."""
        if self.structured_n == 0:
            return "floor"
        return "structured" if self.structured_n < self.binomial_n else "binomial"


def binomial_tail(zero_fraction: Fraction, m: int) -> tuple[Fraction, ...]:
    """``P(Z >= k)`` for ``k = 0..m``, ``Z ~ Binomial(m, zero_fraction)``, as exact fractions.

    Examples
    --------
    >>> [str(t) for t in binomial_tail(Fraction(1, 2), 2)]
    ['1', '3/4', '1/4']
    """
    p = Fraction(zero_fraction)
    terms = [math.comb(m, i) * p**i * (1 - p) ** (m - i) for i in range(m + 1)]
    tails = []
    total = Fraction(0)
    for term in reversed(terms):  # P(Z >= m), P(Z >= m - 1), ...
        total += term
        tails.append(total)
    return tuple(reversed(tails))


def choose_n(
    weight: ArrayLike,
    m: int,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    remainder: str = "error",
) -> NChoice:
    r"""Choose the kept count ``n`` of an ``n:m`` pattern for one layer from its zeros.

    With ``p`` the fraction of zero weights and ``Z ~ Binomial(m, p)`` the zeros of a group
    under independence, the authors' rule is

    .. math::

        k^\star = \max\{k \in 0..m-1 : P(Z \ge k) > c\}, \qquad
        n_{\mathrm{binomial}} = m - k^\star ,

    (``k = 0`` always qualifies, since ``P(Z >= 0) = 1 > c``), and the choice is
    ``n = max(1, min(n_binomial, n_structured))``, where ``n_structured`` is the most
    nonzeros in any group.

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
        The layer's weight (already pruned without structure); groups of ``m`` run along
        ``in``.
    m : int
        Group size, ``m >= 1``.
    confidence : float, default 0.95
        The level ``c``, ``0 < c < 1`` (the authors' default). Compared exactly as the
        float's binary value.
    remainder : {"error", "pad"}, default "error"
        As in :func:`nmref.nm_mask`: with ``"pad"`` a partial last group counts its real
        entries only; the zero fraction never counts padding.

    Returns
    -------
    NChoice

    Raises
    ------
    TypeError
        If ``m`` is not an integer, ``confidence`` not a real number, or ``weight`` not a
        float array.
    ValueError
        If ``m < 1``, ``confidence`` is not in ``(0, 1)``, ``weight`` is not 2-D, is empty,
        holds NaN or an infinity, or ``in`` is not a multiple of ``m`` with
        ``remainder="error"``.

    Notes
    -----
    Exact rational arithmetic: ``p`` is ``zeros / entries``; the tail has denominators up
    to ``entries**m``, so the cost is O(size) to count zeros plus O(m^2) big-integer
    operations, negligible beside the reconstruction.

    Differences from the authors' ``extract_topk``: their tail is a float sum clipped at
    1.0 (a tail within rounding of ``c`` may land on either side; here it cannot); an
    already N:M layer would get ``n = m`` from the binomial rule alone (a 2:4 layer has
    ``p = 1/2`` and ``P(Z >= 1) = 15/16 < 0.95``), which ``structured_n`` corrects; and an
    all-zero layer gets 1 from both rules' floor.

    References
    ----------
    .. [1] Hubara et al., "Accelerated Sparse Neural Training: A Provable and Efficient
       Method to Find N:M Transposable Masks", NeurIPS 2021, the AdaPrune section; code
       ``papers-submission/structured_transposable_masks``, ``AdaPrune/utils/adaprune.py``
       (``extract_topk``).

    Examples
    --------
    A layer whose zeros are already 2:4 keeps 2, though the binomial rule alone says 4:

    >>> choice = choose_n(np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]]), 4)
    >>> choice.n, choice.binomial_n, choice.structured_n, str(choice.zero_fraction)
    (2, 4, 2, '1/2')
    >>> choose_n(np.ones((1, 8)), 4).n       # dense: the rule keeps the layer dense
    4
    """
    m = check_positive_integer(m, "m")
    level = check_real(confidence, "confidence")
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence={confidence!r} must be in (0, 1)")
    matrix = as_weight(weight)
    if matrix.size == 0:
        raise ValueError(f"weight is empty (shape {matrix.shape}): it has no zero fraction")
    out_features, in_features = matrix.shape
    check_remainder(in_features, m, 1, remainder)

    nonzero = matrix != 0  # -0.0 == 0.0, so -0.0 counts as a zero
    zero_fraction = Fraction(int(matrix.size - nonzero.sum()), int(matrix.size))
    tail = binomial_tail(zero_fraction, m)
    exact_level = Fraction(level)
    k_best = max(k for k in range(m) if tail[k] > exact_level)
    binomial_n = m - k_best

    groups = -(-in_features // m)
    padded = np.zeros((out_features, groups * m), dtype=bool)
    padded[:, :in_features] = nonzero
    structured_n = int(padded.reshape(out_features, groups, m).sum(axis=2).max())

    n = max(1, min(binomial_n, structured_n))
    return NChoice(n, m, level, zero_fraction, binomial_n, structured_n, tail)
