"""nmsim.torch: the torch path, on any device, equal to nmref bit for bit.

Importing this subpackage imports torch; ``import nmsim`` does not. Every
function here returns exactly what its nmref twin returns on the same input
(for bfloat16, on the exact float32 upcast); ``nmsim verify`` and the
conformance kit :mod:`nmref.testing` check it.
"""

from __future__ import annotations

from .layouts import from_reduction_matrix, to_reduction_matrix
from .masks import SUPPORTED_DTYPES, is_nm, magnitude_mask, nm_mask, to_magnitude_keys

__all__ = [
    "SUPPORTED_DTYPES",
    "from_reduction_matrix",
    "is_nm",
    "magnitude_mask",
    "nm_mask",
    "to_magnitude_keys",
    "to_reduction_matrix",
]
