"""nmsim: a model of sparse tensor-core hardware for N:M sparsity.

``import nmsim`` never imports torch; the torch path lives in ``nmsim.torch``
and imports torch when first used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from nmsim.formats import compress_2to4, decompress_2to4
from nmsim.mma import mma_sp

try:
    __version__ = version("nm-sparsity-ref")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

from nmsim.calibration import calibrate
from nmsim.estimate import StepEstimate, estimate_step
from nmsim.flops import METHODS, FlopReport, MethodOptions, training_flops
from nmsim.gemm import GemmEstimate, GemmParameters, gemm_time
from nmsim.hardware import GPU, get_gpu, list_gpus
from nmsim.models import MODELS, Layer, layers_from_torch, model_layers

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
