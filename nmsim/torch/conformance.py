"""The conformance suites of the torch path, as a registry that ``nmsim verify`` runs.

Each :class:`Suite` checks one algorithm of :mod:`nmsim.torch` against its
nmref reference with the kit :mod:`nmref.testing`, for one dtype on one device.
An algorithm added to the torch path registers its suite here with
:func:`register`; ``nmsim verify`` then prints it as rows of its table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from nmref.testing import (
    Report,
    check_magnitude_mask,
    check_mask_error_rules,
    check_nm_mask,
    check_sparse_training,
)

from . import masks
from .adapters import numpy_adapter, training_adapter

__all__ = ["FLOAT_DTYPES", "SUITES", "Suite", "register", "run_suite"]

FLOAT_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")
MASK_DTYPES: tuple[str, ...] = (*FLOAT_DTYPES, "int8", "int64", "uint8")


@dataclass(frozen=True)
class Suite:
    """One algorithm's conformance suite.

    Attributes
    ----------
    name : str
        Row label (``"nm_mask"``, ``"magnitude_mask[channels]"``, ...).
    dtypes : tuple of str
        Dtypes it runs for (kit names; ``"-"`` for dtype-free checks).
    run : callable
        ``run(dtype, device, quick) -> Report``.
    """

    name: str
    dtypes: tuple[str, ...]
    run: Callable[[str, str, bool], Report]


SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    """Add ``suite`` to :data:`SUITES` (replacing one of the same name)."""
    SUITES[suite.name] = suite
    return suite


def run_suite(name: str, dtype: str, device: str, quick: bool = False) -> Report:
    """Run one registered suite and return its report (never raises on mismatch)."""
    return SUITES[name].run(dtype, device, quick)


def _nm_mask(dtype: str, device: str, quick: bool) -> Report:
    impl = numpy_adapter(masks.nm_mask, device=device, dtype=dtype)
    return check_nm_mask(impl, dtype=dtype, quick=quick, raise_on_failure=False)


def _magnitude_mask(layout: str | None, dtype: str, device: str, quick: bool) -> Report:
    impl = numpy_adapter(masks.magnitude_mask, device=device, dtype=dtype, layout=layout)
    return check_magnitude_mask(
        impl, layout=layout, dtype=dtype, quick=quick, raise_on_failure=False
    )


def _error_rules(dtype: str, device: str, quick: bool) -> Report:
    report = check_mask_error_rules(
        numpy_adapter(masks.nm_mask, device=device), raise_on_failure=False
    )
    magnitude = check_mask_error_rules(
        numpy_adapter(masks.magnitude_mask, device=device),
        function="magnitude_mask",
        raise_on_failure=False,
    )
    report.extend(magnitude)
    return report


register(Suite("nm_mask", (*MASK_DTYPES, "bool"), _nm_mask))
for _layout in ("linear", "channels", "flat"):
    register(
        Suite(
            f"magnitude_mask[{_layout}]",
            MASK_DTYPES,
            functools.partial(_magnitude_mask, _layout),
        )
    )
register(Suite("mask error rules", ("-",), _error_rules))


def _training(method: str, dtype: str, device: str, quick: bool) -> Report:
    decay = 0.25 if method == "srste" else 0.0
    report = Report(f"{method} training step")
    for layer in ("linear", "conv1x1"):
        impl = training_adapter(method, decay=decay, device=device, layer=layer)
        report.extend(
            check_sparse_training(
                impl, method=method, decay=decay, dtype=dtype, raise_on_failure=False
            )
        )
    return report


for _method in ("ste", "srste"):
    register(
        Suite(
            f"{_method} training step",
            ("float32", "float64"),
            functools.partial(_training, _method),
        )
    )
