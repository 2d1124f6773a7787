"""nmsim.formats: the 2:4 compressed format of sparse tensor cores and its MMA.

:mod:`nmsim.formats.sparse_2to4` compresses and decompresses 2:4 matrices into the
values and metadata PyTorch's CUTLASS converter produces (``specs/formats.md``);
:mod:`nmsim.formats.mma` multiplies them as the ``mma.sp`` instruction does.
The 2:4 format's public names are exported here too, as before the split.
"""

from __future__ import annotations

from nmsim.formats.sparse_2to4 import (
    DTYPE_KINDS,
    METADATA_LAYOUTS,
    NIBBLE_TABLES,
    FormatSpec,
    NibbleTable,
    bf16_bits_to_float32,
    check_shape,
    compress_2to4,
    compress_2to4_reference,
    decompress_2to4,
    dtype_kind_of,
    float32_to_bf16_bits,
    format_spec,
    metadata_storage_offset,
    metadata_storage_offsets,
    metadata_to_positions,
    nibble_table,
    nonzero_code,
    nonzero_mask,
    pack_nibbles,
    reorder_metadata,
    unpack_nibbles,
    unreorder_metadata,
)

__all__ = [
    "DTYPE_KINDS",
    "METADATA_LAYOUTS",
    "NIBBLE_TABLES",
    "FormatSpec",
    "NibbleTable",
    "bf16_bits_to_float32",
    "check_shape",
    "compress_2to4",
    "compress_2to4_reference",
    "decompress_2to4",
    "dtype_kind_of",
    "float32_to_bf16_bits",
    "format_spec",
    "metadata_storage_offset",
    "metadata_storage_offsets",
    "metadata_to_positions",
    "nibble_table",
    "nonzero_code",
    "nonzero_mask",
    "pack_nibbles",
    "reorder_metadata",
    "unpack_nibbles",
    "unreorder_metadata",
]
