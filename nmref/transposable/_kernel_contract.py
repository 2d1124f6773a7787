"""What the transposable driver and its Numba kernels agree on: status codes and unit width.

The kernels read the status codes as compile-time constants, and Numba's cache
only watches the file of the cached function: a kernel cached before a change
here would keep the old codes. So these values are never renumbered (a new code
gets a new number).
"""

from __future__ import annotations

# One status per tile, written by the kernels and read by the driver.
SOLVED = 0
# Dynamic range too wide for int64 units: the driver solves the tile with Python ints.
TOO_WIDE = 1
# NaN or an infinity in the tile: the driver raises, naming the first bad index.
NOT_FINITE = 2
# Solved exactly from truncated units plus a certificate (mask and potentials
# exact; the kept sum in units is not, the caller recomputes it).
SOLVED_TRUNCATED = 3
# The float32 enumeration cannot sum this tile exactly in float64 (too wide, subnormal, NaN
# or infinity): the driver redoes it on int64 units, which replace this status.
NEEDS_UNITS = 4


def max_unit_bits(m: int) -> int:
    """Largest unit bit length accepted by the kernels: ``max|unit| < 2**62 / (16 m^2)``.

    Sums of up to ``2 m^2`` units (kept sums, path costs) then stay far below
    2**63. Potentials are additionally guarded at run time (``POTENTIAL_LIMIT`` in
    :func:`nmref.transposable._flow_kernels._ssp_tile`), so int64 overflow cannot
    happen silently.
    """
    return 62 - (4 + 2 * max(1, (m - 1).bit_length()))
