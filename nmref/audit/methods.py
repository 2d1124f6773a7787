"""The methods the audit runs: nmref's own and the labelled peers, one entry each.

Each entry says what it follows (paper or code), where it is defined (every
``n:m`` or 2:4 only) and how it is called: ``function(scores, weights, n, m)``
returns a bool mask of the scores' shape. ``scores`` are the non-negative
values every method maximises (``|w|`` of a weight); ``weights`` are the signed
values, for the one peer that ranks them (PyTorch's default tile algorithm).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from nmref.audit.apex import apex_best_mask, apex_greedy_mask
from nmref.audit.hu2024 import hu2024_mask
from nmref.audit.pytorch_tile import pytorch_tile_mask, pytorch_tile_signed_mask
from nmref.audit.tsenor import tsenor_mask
from nmref.transposable import transposable_mask

__all__ = ["METHODS", "Method", "method_names"]

MaskFunction = Callable[[NDArray, NDArray, int, int], NDArray[np.bool_]]


class Method(NamedTuple):
    """One audited method."""

    name: str
    follows: str
    function: MaskFunction
    only_2_4: bool = False

    def defined_for(self, n: int, m: int) -> bool:
        """Whether the method is defined for ``n:m``."""
        return not self.only_2_4 or (n, m) == (2, 4)


def _nmref(method: str) -> MaskFunction:
    def run(scores, weights, n, m):
        return transposable_mask(scores, n, m, method=method)

    return run


METHODS: dict[str, Method] = {
    entry.name: entry
    for entry in (
        Method(
            "exact", "nmref exact (min-cost flow; Hubara et al. 2021 Sec. 4.1)", _nmref("exact")
        ),
        Method(
            "greedy",
            "nmref keep-greedy (Hubara et al. 2021 code; apex mn_2d_greedy up to ties)",
            _nmref("greedy"),
        ),
        Method(
            "greedy-prune",
            "nmref 2-approximation (Hubara et al. 2021 Sec. 4.2, edge-cover greedy)",
            _nmref("greedy-prune"),
        ),
        Method(
            "tsenor",
            "peer: TSENOR (Meng et al., NeurIPS 2025), Dykstra + rounding",
            lambda scores, weights, n, m: tsenor_mask(scores, n, m),
        ),
        Method(
            "apex-greedy",
            "peer: apex ASP mn_2d_greedy (sparse_masklib.py)",
            lambda scores, weights, n, m: apex_greedy_mask(scores, n, m),
        ),
        Method(
            "apex-best",
            "peer: apex ASP m4n2_2d_best, 90 patterns, float32",
            lambda scores, weights, n, m: apex_best_mask(scores, n, m),
            only_2_4=True,
        ),
        Method(
            "hu2024",
            "peer: Hu et al. 2024 90-pattern search (2by4-pretrain), float32",
            lambda scores, weights, n, m: hu2024_mask(scores, n, m),
            only_2_4=True,
        ),
        Method(
            "pytorch-tile",
            "peer: PyTorch _sparse_semi_structured_tile, largest_abs_values_greedy",
            lambda scores, weights, n, m: pytorch_tile_mask(scores, n, m),
            only_2_4=True,
        ),
        Method(
            "pytorch-tile-default",
            "peer: PyTorch _sparse_semi_structured_tile, default (signed values)",
            lambda scores, weights, n, m: pytorch_tile_signed_mask(weights, n, m),
            only_2_4=True,
        ),
    )
}


def method_names() -> tuple[str, ...]:
    """Every registered method name, in audit order."""
    return tuple(METHODS)
