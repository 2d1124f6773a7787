"""Argument checks shared by the transposable API, its oracles and its certificates."""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.masks import _as_scores
from nmref.patterns import Pattern, check_pattern

Method = Literal["exact", "brute", "greedy", "greedy-prune"]


METHODS: tuple[str, ...] = ("exact", "brute", "greedy", "greedy-prune")


def check_matrix(array: NDArray, pattern: Pattern, name: str) -> None:
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


def check_all_finite(array: NDArray, name: str) -> None:
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


def prepare(
    scores: ArrayLike, n: int, m: int, name: str = "scores", *, check_finite: bool = True
) -> tuple[NDArray, Pattern]:
    pattern = check_pattern(n, m)
    array = _as_scores(scores, name)
    check_matrix(array, pattern, name)
    if check_finite:
        check_all_finite(array, name)
    return array, pattern


def check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r} must be one of {METHODS}")
