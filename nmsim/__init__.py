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

__all__ = ["__version__", "compress_2to4", "decompress_2to4", "mma_sp"]
