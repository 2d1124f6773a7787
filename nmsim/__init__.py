"""nmsim: a model of sparse tensor-core hardware for N:M sparsity.

``import nmsim`` never imports torch; the torch path lives in ``nmsim.torch``
and imports torch when first used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from nmref._deprecation import install_moved_modules
from nmsim.formats.mma import mma_sp
from nmsim.formats.sparse_2to4 import compress_2to4, decompress_2to4

try:
    __version__ = version("nm-sparsity-ref")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

from nmsim.perf.calibration import calibrate
from nmsim.perf.estimate import StepEstimate, estimate_step
from nmsim.perf.flops import METHODS, FlopReport, MethodOptions, training_flops
from nmsim.perf.gemm import GemmEstimate, GemmParameters, gemm_time
from nmsim.perf.hardware import GPU, get_gpu, list_gpus
from nmsim.perf.models import MODELS, Layer, layers_from_torch, model_layers

# The flat modules of earlier releases; each old path warns once and returns the new module.
install_moved_modules(
    {
        "nmsim.calibration": "nmsim.perf.calibration",
        "nmsim.estimate": "nmsim.perf.estimate",
        "nmsim.flops": "nmsim.perf.flops",
        "nmsim.gemm": "nmsim.perf.gemm",
        "nmsim.hardware": "nmsim.perf.hardware",
        "nmsim.models": "nmsim.perf.models",
        "nmsim.mma": "nmsim.formats.mma",
        "nmsim.report_methods": "nmsim.report.methods",
        "nmsim.report_files": "nmsim.report.files",
        "nmsim.report_zoo": "nmsim.report.zoo",
        "nmsim.report_cli": "nmsim.cli.report",
        "nmsim.perf_cli": "nmsim.cli.perf",
        "nmsim.format_commands": "nmsim.cli.formats",
        "nmsim.verify": "nmsim.cli.verify",
    }
)

__all__ = [
    "GPU",
    "METHODS",
    "MODELS",
    "FlopReport",
    "GemmEstimate",
    "GemmParameters",
    "Layer",
    "MethodOptions",
    "StepEstimate",
    "__version__",
    "calibrate",
    "compress_2to4",
    "decompress_2to4",
    "estimate_step",
    "gemm_time",
    "get_gpu",
    "layers_from_torch",
    "list_gpus",
    "mma_sp",
    "model_layers",
    "training_flops",
]


def __dir__() -> list[str]:
    # dir(nmsim) and tab completion: the API and the subpackages, not the names this file
    # imports to build them (annotations, PackageNotFoundError, version, ...)
    import types

    packages = [
        name
        for name, value in globals().items()
        if isinstance(value, types.ModuleType) and not name.startswith("_")
    ]
    return sorted({*__all__, *packages})
