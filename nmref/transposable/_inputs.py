"""The inputs of the transposable API, its oracles and its certificates, checked once."""

from __future__ import annotations

from typing import Literal

from numpy.typing import ArrayLike, NDArray

from nmref._validation import as_scores, check_choice, check_finite_scores, check_tiled_matrix
from nmref.patterns import Pattern, check_pattern

__all__ = ["METHODS", "Method", "check_method", "prepare"]

Method = Literal["exact", "brute", "greedy", "greedy-prune"]
METHODS: tuple[str, ...] = ("exact", "brute", "greedy", "greedy-prune")


def prepare(
    scores: ArrayLike, n: int, m: int, name: str = "scores", *, check_finite: bool = True
) -> tuple[NDArray, Pattern]:
    """The checked pattern and score matrix (whole tiles; finite unless told not to look).

    ``check_finite=False`` is for callers whose kernels see every value anyway and
    report a NaN or an infinity themselves.
    """
    pattern = check_pattern(n, m)
    array = as_scores(scores, name)
    check_tiled_matrix(array, pattern, name)
    if check_finite:
        check_finite_scores(array, name)
    return array, pattern


def check_method(method: str) -> None:
    """``ValueError`` unless ``method`` is one of :data:`METHODS`."""
    check_choice(method, "method", METHODS)
