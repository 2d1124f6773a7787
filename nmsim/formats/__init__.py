"""nmsim.formats: the 2:4 compressed format of sparse tensor cores and its MMA.

:mod:`nmsim.formats.sparse_2to4` compresses and decompresses 2:4 matrices into the
values and metadata PyTorch's CUTLASS converter produces (``specs/formats.md``);
:mod:`nmsim.formats.mma` multiplies them as the ``mma.sp`` instruction does;
:mod:`nmsim.formats.compressed_tensors`, :mod:`nmsim.formats.marlin24` and
:mod:`nmsim.formats.compressed_checkpoint` read and write the 2:4 checkpoint formats of
compressed-tensors (``specs/checkpoint_formats.md``).
The 2:4 format's public names are exported here too, as before the split.
"""

from __future__ import annotations

# One list of names: this package exports exactly the public API of ``sparse_2to4``.
from nmsim.formats import sparse_2to4
from nmsim.formats.sparse_2to4 import *  # noqa: F403

__all__ = list(sparse_2to4.__all__)
