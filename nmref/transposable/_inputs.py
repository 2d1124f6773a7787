"""The inputs of the transposable API, its oracles and its certificates, checked once."""

from __future__ import annotations

from typing import Literal

from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_scores, check_choice, check_finite_scores, check_tiled_matrix
from nmref.patterns import Pattern, check_pattern

__all__ = ["FILLS", "METHODS", "Fill", "Method", "check_fill", "check_method", "prepare"]

Method = Literal["exact", "brute", "greedy", "greedy-prune"]
METHODS: tuple[str, ...] = ("exact", "brute", "greedy", "greedy-prune")

#: ``"exact"``: exactly n per tile row and column (the papers' problem);
#: ``"at_most"``: at most n (what sparse tensor cores accept). Spec T1.
Fill = Literal["exact", "at_most"]
FILLS: tuple[str, ...] = ("exact", "at_most")


def prepare(
    scores: ArrayLike, n: int, m: int, name: str = "scores", *, check_finite: bool = True
) -> tuple[NDArray, Pattern]:
    """The checked pattern and score matrix (whole tiles; finite unless told not to look).

    ``check_finite=False`` is for callers whose kernels see every value anyway and
    report a NaN or an infinity themselves.
    """
    pattern = check_pattern(n, m)
    array = as_scores(scores, name)
    check_tiled_matrix(array, pattern.m, name)
    if check_finite:
        check_finite_scores(array, name)
    return array, pattern


def check_method(method: str) -> None:
    """``ValueError`` unless ``method`` is one of :data:`METHODS`."""
    check_choice(method, "method", METHODS)


def check_fill(fill: str) -> None:
    """``ValueError`` unless ``fill`` is one of :data:`FILLS`."""
    check_choice(fill, "fill", FILLS)
