"""Conformance reports: counts for the verify table and the first counterexample, readable."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from nmref.testing.cases import Case

__all__ = ["ConformanceError", "Failure", "Report"]

# How many failures a report keeps in full (the first is the one shown).
_KEPT_FAILURES = 5
# Inputs up to this size are printed in full in a counterexample.
_PRINT_LIMIT = 64


def format_values(values: NDArray) -> str:
    """``[a, b, ...]`` of a 1-D array: 0/1 for a mask, else each value's shortest exact text."""
    if values.dtype == np.bool_:
        return "[" + ", ".join(str(int(v)) for v in values) + "]"
    # str() of a NumPy scalar is the shortest text that round-trips in its own dtype.
    return "[" + ", ".join(str(v) for v in values) + "]"


def input_repr(array: NDArray, name: str = "input") -> str:
    """``input = np.array([...], dtype=...)``, to paste into a test (if not too large)."""
    if array.size > _PRINT_LIMIT:
        return f"({name} of shape {array.shape} not printed; the failing part is above)"
    with np.printoptions(threshold=_PRINT_LIMIT, linewidth=100):
        return f"{name} = np." + repr(array).replace("\n", "\n  ")


class ConformanceError(AssertionError):
    """An implementation disagrees with the spec; the message is the first counterexample."""


@dataclass(frozen=True)
class Failure:
    """One failing case: what was checked, on what input, and why it failed."""

    check: str
    case: Case | None
    message: str

    def __str__(self) -> str:
        header = f"{self.check}: {self.case.describe()}" if self.case is not None else self.check
        return f"{header}\n{self.message}"


@dataclass
class Report:
    """The outcome of one check over many cases.

    Attributes
    ----------
    check : str
        Name of the check (``"nm_mask"``, ``"magnitude_mask[channels]"``, ...).
    cases : int
        Number of cases run.
    mismatches : int
        Number of cases whose output broke the spec (invalid, different from
        the reference, wrong error, or an exception).
    max_gap : float
        Largest objective gap seen: reference kept-score sum minus the
        implementation's (0 when they agree; finite cases only).
    failures : list of Failure
        The first few failures, in the order found.
    """

    check: str
    cases: int = 0
    mismatches: int = 0
    max_gap: float = 0.0
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no case failed (and at least one ran)."""
        return self.mismatches == 0 and self.cases > 0

    def add(self, failure: Failure | None, gap: float = 0.0) -> None:
        """Record one case: ``failure`` is None when it passed."""
        self.cases += 1
        if math.isfinite(gap):
            self.max_gap = max(self.max_gap, gap)
        if failure is not None:
            self.mismatches += 1
            if len(self.failures) < _KEPT_FAILURES:
                self.failures.append(failure)

    def extend(self, other: Report) -> None:
        """Fold another report's counts and failures into this one."""
        self.cases += other.cases
        self.mismatches += other.mismatches
        self.max_gap = max(self.max_gap, other.max_gap)
        room = _KEPT_FAILURES - len(self.failures)
        self.failures.extend(other.failures[: max(room, 0)])

    def summary(self) -> str:
        """One line: check, cases, mismatches, max gap."""
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"{self.check}: {verdict}: {self.cases} cases, {self.mismatches} mismatches, "
            f"max gap {self.max_gap:g}"
        )

    def __str__(self) -> str:
        if not self.failures:
            return self.summary()
        return f"{self.summary()}\nfirst counterexample:\n{self.failures[0]}"

    def raise_for_failure(self) -> Report:
        """Raise :class:`ConformanceError` with the first counterexample, or return self."""
        if self.cases == 0:
            raise ConformanceError(f"{self.check}: no cases were run")
        if not self.ok:
            raise ConformanceError(str(self))
        return self
