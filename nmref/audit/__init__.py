"""A certified audit of the field's fast transposable N:M approximations.

``audit(weights, "8:16")`` runs nmref's exact and greedy methods and labelled
peers reimplemented from their public descriptions (TSENOR, apex ASP, Hu et al.
2024, PyTorch's 2:4 tile greedy) on the same tiles, classifies each mask
(exactly ``n``, at most ``n``, invalid and where) and reports its optimality gap
against a certified optimum of the matching fill, per tile and per matrix, with
its time. ``specs/audit.md`` fixes every choice; each peer module says what it
follows and where our reading is uncertain.
"""

from __future__ import annotations

from nmref.audit.methods import METHODS, Method, method_names
from nmref.audit.result import (
    AuditResult,
    GapStats,
    MethodReport,
    format_table,
    gap_stats,
    summarize,
)
from nmref.audit.run import AUDIT_FILLS, audit
from nmref.audit.validity import Validity, Violation, classify_mask

__all__ = [
    "AUDIT_FILLS",
    "METHODS",
    "AuditResult",
    "GapStats",
    "Method",
    "MethodReport",
    "Validity",
    "Violation",
    "audit",
    "classify_mask",
    "format_table",
    "gap_stats",
    "method_names",
    "summarize",
]
