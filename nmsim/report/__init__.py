"""nmsim.report: masks, kept magnitude, training FLOPs and GEMM time for a checkpoint.

:mod:`~nmsim.report.build` reads the tensors and builds the report document
(``specs/report.md``); :mod:`~nmsim.report.methods` is the registry of mask
methods and cost models behind its columns; :mod:`~nmsim.report.zoo` holds the
built-in model shapes; :mod:`~nmsim.report.files` writes the JSON, CSV and plots.
The command line is :mod:`nmsim.cli.report`.
"""

from __future__ import annotations

# One list of names: this package exports exactly the public API of ``build``.
from nmsim.report import build
from nmsim.report.build import *  # noqa: F403

__all__ = list(build.__all__)
