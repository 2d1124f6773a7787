"""The exact GELU, ``x * Phi(x)``, element-wise in float64 (a Numba ufunc).

BERT's ``hidden_act = "gelu"`` is the erf form, ``0.5 x (1 + erf(x / sqrt(2)))`` (Hendrycks
and Gimpel 2016), not the tanh approximation. NumPy has no ``erf``, and a Python-level
``math.erf`` over a ``[tokens, 1536]`` array costs seconds per layer, so the scalar formula is
compiled once into a ufunc (``cache=True``: the only callee, ``math.erf``, is Numba's own).
Imported lazily by :mod:`nmsim.encoders.minilm`, so ``import nmsim`` does not load Numba.
"""

from __future__ import annotations

import math

import numba

__all__ = ["gelu"]

_SQRT_TWO = math.sqrt(2.0)


@numba.vectorize(["float64(float64)"], cache=True)
def gelu(x: float) -> float:  # pragma: no cover - compiled
    """``0.5 x (1 + erf(x / sqrt(2)))``; ``erf`` is accurate to a few ulp (libm's)."""
    return 0.5 * x * (1.0 + math.erf(x / _SQRT_TWO))
