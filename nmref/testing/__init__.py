"""nmref.testing: a conformance kit for N:M sparsity implementations.

Point it at *your* implementation (NumPy, torch on any device, JAX, a C++ or
CUDA kernel behind a Python callable) and it checks it against the spec in
``specs/``: every output valid, every output equal to the nmref reference bit
for bit, invalid input rejected. A failure raises :class:`ConformanceError`
whose message is the first counterexample, written for a human::

    from nmref.testing import check_nm_mask
    check_nm_mask(lambda scores, n, m: my_kernel(scores, n, m))

Contents
--------
- :mod:`nmref.testing.cases`: deterministic case families (``standard_cases``).
- :mod:`nmref.testing.strategies`: hypothesis strategies (needs hypothesis).
- checks: :func:`check_nm_mask`, :func:`check_magnitude_mask`,
  :func:`check_mask_error_rules`, :func:`check_sparse_training`,
  :func:`check_transposable_mask`,
  :func:`~nmref.testing.golden.check_golden_vectors` (in :mod:`nmref.testing.golden`).

This package imports NumPy and nmref only (hypothesis only in ``strategies``):
never torch, so it can test any framework.
"""

from __future__ import annotations

from nmref.testing.cases import (
    DTYPE_NAMES,
    KINDS,
    PATTERNS,
    Case,
    generate_cases,
    round_to_bfloat16,
    standard_cases,
)
from nmref.testing.masks import (
    check_magnitude_mask,
    check_mask_error_rules,
    check_nm_mask,
    compare_masks,
)
from nmref.testing.report import ConformanceError, Failure, Report
from nmref.testing.training import TRAINING_METHODS, check_sparse_training, training_cases
from nmref.testing.transposable import check_transposable_mask, transposable_cases

__all__ = [
    "DTYPE_NAMES",
    "KINDS",
    "PATTERNS",
    "TRAINING_METHODS",
    "Case",
    "ConformanceError",
    "Failure",
    "Report",
    "check_magnitude_mask",
    "check_mask_error_rules",
    "check_nm_mask",
    "check_sparse_training",
    "check_transposable_mask",
    "compare_masks",
    "generate_cases",
    "round_to_bfloat16",
    "standard_cases",
    "training_cases",
    "transposable_cases",
]
