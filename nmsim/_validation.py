"""Argument checks shared by nmsim's modules, so that each rule and its message live once.

Checks of nmref's own rules (patterns, layouts, NaN) stay in nmref; these are the
hardware model's.
"""

from __future__ import annotations

import numbers

__all__ = ["positive_int"]


def positive_int(name: str, value: object) -> int:
    """``value`` as an ``int`` if it is an integer >= 1 (``bool`` is not one).

    Raises
    ------
    TypeError
        ``value`` is not an integer (floats such as ``2.0`` included).
    ValueError
        ``value`` is below 1.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be a positive integer")
    if int(value) < 1:
        raise ValueError(f"{name}={value} must be a positive integer (>= 1)")
    return int(value)
