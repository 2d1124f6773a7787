"""The 2:4 tensor formats of compressed-tensors checkpoints: decode, validate, re-encode.

llm-compressor wrote 2:4 checkpoints through the ``compressed-tensors`` library in three
layouts, none of which has a maintained reader any more (``specs/checkpoint_formats.md``):

``sparse-24-bitmask``
    per layer ``<layer>.compressed`` (the ``rows x cols/2`` kept values, row-major),
    ``<layer>.bitmask`` (``uint8``, one bit per dense entry, least significant bit first:
    ``numpy.packbits(mask, axis=-1, bitorder="little")``) and ``<layer>.shape``
    (``int64 [[rows], [cols]]``).
``sparse-24``
    per layer ``<layer>.weight.sparse_24_packed_weight`` and ``<layer>.weight.meta``: the
    values and metadata of compressed-tensors' copy of PyTorch's CUTLASS converter, i.e.
    :mod:`nmsim.formats.sparse_2to4` with the ``torch-2.13`` nibble table, stored in an
    older metadata row order (:func:`sparse24_metadata_offset`, bands of 64 rows).
``marlin-24``
    4/8-bit quantised weights permuted for the Marlin 2:4 kernel
    (:mod:`nmsim.formats.marlin24`).

This module works on arrays; :mod:`nmsim.formats.compressed_checkpoint` reads and writes
files. Values travel as raw bits (bf16 as ``uint16``, fp8 e4m3 as ``uint8``) so that every
decode/encode round trip is exact to the bit. Every check raises
:class:`CheckpointFormatError` (a ``ValueError``) naming the tensor and the first bad group.

``import nmsim.formats.compressed_tensors`` needs only NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from nmsim.formats import sparse_2to4

__all__ = [
    "ELEMENT_KINDS",
    "SPARSE24_KINDS",
    "STORAGE_DTYPES",
    "CheckpointFormatError",
    "Decoded",
    "bitmask_mask_reference",
    "decode_bitmask",
    "decode_bitmask_reference",
    "decode_sparse24",
    "default_bitmask_mask",
    "encode_bitmask",
    "encode_sparse24",
    "nonzero_flags",
    "sparse24_metadata_offset",
    "sparse24_metadata_offsets",
    "to_float32",
]

#: Element kinds of stored values and the NumPy dtype holding their raw bits.
STORAGE_DTYPES: dict[str, np.dtype] = {
    "fp16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
    "fp32": np.dtype(np.float32),
    "int8": np.dtype(np.int8),
    "fp8_e4m3": np.dtype(np.uint8),
}
#: Kinds the CUTLASS (``sparse-24``) layout knows; fp32 is its 1:2 (TF32) mode.
SPARSE24_KINDS: tuple[str, ...] = sparse_2to4.DTYPE_KINDS
ELEMENT_KINDS: tuple[str, ...] = tuple(STORAGE_DTYPES)


class CheckpointFormatError(ValueError):
    """A compressed tensor that breaks a rule of its format; the message names tensor and group.

    Attributes
    ----------
    tensor : str
        The stored tensor that breaks the rule.
    row, group : int or None
        The first bad group (row-major order), when the rule is about groups.
    """

    def __init__(
        self, tensor: str, message: str, *, row: int | None = None, group: int | None = None
    ) -> None:
        super().__init__(f"tensor {tensor!r}: {message}")
        self.tensor = tensor
        self.row = row
        self.group = group


@dataclass(frozen=True)
class Decoded:
    """One decoded layer: dense weight (raw bits of ``kind``) and the stored 2:4 mask.

    Attributes
    ----------
    dense : numpy.ndarray
        ``(rows, cols)`` in :data:`STORAGE_DTYPES` ``[kind]``; entries outside ``mask`` are +0.
    mask : numpy.ndarray
        ``(rows, cols)`` bool, the positions the file stores (exactly 2 per group of 4; for
        fp32 ``sparse-24``, 1 per pair). A stored position may hold a zero (an under-full
        group); ``nonzero_flags(dense, kind)`` tells them apart.
    kind : str
        Element kind (a key of :data:`STORAGE_DTYPES`).
    """

    dense: np.ndarray
    mask: np.ndarray
    kind: str


# ---------------------------------------------------------------------------------------------
# Element kinds
# ---------------------------------------------------------------------------------------------


def _check_kind(kind: str, allowed: tuple[str, ...] = ELEMENT_KINDS) -> np.dtype:
    if kind not in allowed:
        raise ValueError(f"kind={kind!r} must be one of {allowed}")
    return STORAGE_DTYPES[kind]


def nonzero_flags(values: np.ndarray, kind: str) -> np.ndarray:
    """Which entries are nonzero in their element type: NaN and inf are, ``-0.0`` is not.

    Floats (bf16 and fp8 bits included) are zero exactly when every bit but the sign bit is
    clear. Complexity ``O(size)``.

    >>> nonzero_flags(np.array([0.0, -0.0, 1.0], dtype=np.float16), "fp16").tolist()
    [False, False, True]
    """
    storage = _check_kind(kind)
    values = np.asarray(values)
    if values.dtype != storage:
        raise TypeError(f"values has dtype {values.dtype}; kind={kind!r} stores {storage}")
    if kind == "int8":
        return values != 0
    unsigned = np.dtype(f"u{storage.itemsize}")
    magnitude = unsigned.type((1 << (8 * storage.itemsize - 1)) - 1)
    return (values.view(unsigned) & magnitude) != 0


@cache
def _fp8_e4m3_table() -> np.ndarray:
    """float32 value of each of the 256 fp8 e4m3fn bit patterns (no inf; NaN at 0x7F, 0xFF)."""
    bits = np.arange(256, dtype=np.int64)
    sign = np.where(bits >> 7, -1.0, 1.0)
    exponent = (bits >> 3) & 0xF
    mantissa = bits & 0x7
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0)
    subnormal = (mantissa / 8.0) * 2.0**-6
    table = sign * np.where(exponent == 0, subnormal, normal)
    table[(exponent == 0xF) & (mantissa == 0x7)] = np.nan
    return table.astype(np.float32)


def to_float32(values: np.ndarray, kind: str) -> np.ndarray:
    """Exact float32 values of stored values (every kind here converts exactly).

    fp8 e4m3 follows the OCP "FN" variant that ``torch.float8_e4m3fn`` implements: bias 7, no
    infinities, NaN at ``S.1111.111``. Quantisation scales are not applied.

    >>> to_float32(np.array([0x38, 0xC0], dtype=np.uint8), "fp8_e4m3").tolist()
    [1.0, -2.0]
    """
    storage = _check_kind(kind)
    values = np.asarray(values)
    if values.dtype != storage:
        raise TypeError(f"values has dtype {values.dtype}; kind={kind!r} stores {storage}")
    if kind == "bf16":
        return sparse_2to4.bf16_bits_to_float32(values)
    if kind == "fp8_e4m3":
        return _fp8_e4m3_table()[values]
    return values.astype(np.float32)


def _storage(name: str, array: np.ndarray, kind: str) -> np.ndarray:
    storage = STORAGE_DTYPES[kind]
    array = np.asarray(array)
    if array.dtype != storage:
        raise TypeError(
            f"{name} has dtype {array.dtype}; kind={kind!r} stores {storage} "
            "(bf16 as uint16 bits, fp8 e4m3 as uint8 bits); nothing is cast"
        )
    if array.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, reduction columns), got shape {array.shape}")
    return array


def _group_counts(mask: np.ndarray) -> np.ndarray:
    rows, cols = mask.shape
    return mask.reshape(rows, cols // 4, 4).sum(axis=-1, dtype=np.int64)


def _first(bad: np.ndarray) -> tuple[int, int]:
    row, group = (int(i) for i in np.argwhere(bad)[0])
    return row, group


def _check_columns(tensor: str, cols: int) -> None:
    if cols % 4:
        raise CheckpointFormatError(
            tensor,
            f"the dense weight has {cols} columns, not a multiple of 4: 2:4 groups would cross "
            "rows (compressed-tensors groups the flattened tensor by 4 and cannot write it)",
        )


# ---------------------------------------------------------------------------------------------
# sparse-24-bitmask
# ---------------------------------------------------------------------------------------------


def default_bitmask_mask(dense: np.ndarray, kind: str, *, tensor: str = "weight") -> np.ndarray:
    """The stored positions :func:`encode_bitmask` chooses: the nonzeros, then the lowest zeros.

    Every group of 4 must hold at most 2 nonzeros; an under-full group is completed with its
    lowest-index zero positions (the project's tie rule). compressed-tensors picks the
    positions of an under-full group with ``torch.topk``, whose choice among equal values is
    unspecified; the decoded weight is the same either way.

    Raises
    ------
    CheckpointFormatError
        A group with more than 2 nonzeros (first one named).
    """
    dense = _storage("dense", dense, kind)
    rows, cols = dense.shape
    _check_columns(tensor, cols)
    nonzero = nonzero_flags(dense, kind)
    counts = _group_counts(nonzero)
    if (counts > 2).any():
        row, group = _first(counts > 2)
        raise CheckpointFormatError(
            tensor,
            f"row {row}, group {group} (columns {4 * group}-{4 * group + 3}) has "
            f"{int(counts[row, group])} nonzeros; 2:4 keeps at most 2",
            row=row,
            group=group,
        )
    quads = nonzero.reshape(rows, cols // 4, 4)
    # Fill with zeros in column order: a zero at position i is taken when fewer than
    # (2 - nonzeros in the group) zeros precede it.
    zeros = ~quads
    zeros_before = np.cumsum(zeros, axis=-1) - zeros
    needed = (2 - counts)[..., None]
    return (quads | (zeros & (zeros_before < needed))).reshape(rows, cols)


def bitmask_mask_reference(dense: np.ndarray, kind: str) -> np.ndarray:
    """Plain-Python :func:`default_bitmask_mask` (the oracle; one group at a time)."""
    dense = _storage("dense", dense, kind)
    nonzero = nonzero_flags(dense, kind)
    rows, cols = dense.shape
    mask = np.zeros((rows, cols), dtype=bool)
    for row in range(rows):
        for group in range(cols // 4):
            chosen = [i for i in range(4) if nonzero[row, 4 * group + i]]
            if len(chosen) > 2:
                raise CheckpointFormatError("weight", "more than 2 nonzeros", row=row, group=group)
            chosen += [i for i in range(4) if not nonzero[row, 4 * group + i]][: 2 - len(chosen)]
            for i in chosen:
                mask[row, 4 * group + i] = True
    return mask


def _check_mask_covers(tensor: str, dense: np.ndarray, kind: str, mask: np.ndarray) -> None:
    lost = nonzero_flags(dense, kind) & ~mask
    if lost.any():
        row, column = (int(i) for i in np.argwhere(lost)[0])
        raise CheckpointFormatError(
            tensor,
            f"row {row}, column {column} is nonzero but outside the given mask (group "
            f"{column // 4}); it would be lost",
            row=row,
            group=column // 4,
        )


def _check_two_per_group(tensor: str, mask: np.ndarray, what: str) -> None:
    counts = _group_counts(mask)
    bad = counts != 2
    if bad.any():
        row, group = _first(bad)
        count = int(counts[row, group])
        rule = (
            "2:4 keeps at most 2"
            if count > 2
            else "the format stores exactly 2 per group (cols/2 values per row)"
        )
        raise CheckpointFormatError(
            tensor,
            f"row {row}, group {group} (columns {4 * group}-{4 * group + 3}) {what} {count} "
            f"of 4; {rule}",
            row=row,
            group=group,
        )


def encode_bitmask(
    dense: np.ndarray,
    kind: str,
    *,
    mask: np.ndarray | None = None,
    tensor: str = "weight",
) -> dict[str, np.ndarray]:
    """Encode a dense 2:4 weight as ``sparse-24-bitmask`` arrays.

    With ``M`` the stored-position mask (exactly 2 per group of 4),

    .. math::

        \\text{compressed}_{r} = (W_{r,c})_{c:\\,M_{r,c}}, \\qquad
        \\text{bitmask}_{r,b} = \\sum_{j=0}^{7} M_{r, 8b+j}\\, 2^j ,

    the last byte of a row padded with zero bits when ``cols % 8 == 4``.

    Parameters
    ----------
    dense : numpy.ndarray
        ``(rows, cols)`` raw bits in :data:`STORAGE_DTYPES` ``[kind]``; ``cols % 4 == 0``.
    kind : str
        Element kind (:data:`ELEMENT_KINDS`).
    mask : numpy.ndarray, optional
        Stored positions, bool ``(rows, cols)``, exactly 2 per group, covering every nonzero
        (a decoded file's :attr:`Decoded.mask` reproduces its bytes). Default
        :func:`default_bitmask_mask`.
    tensor : str
        Name used in error messages.

    Returns
    -------
    dict
        ``compressed`` ``(rows, cols/2)`` of the storage dtype, ``bitmask`` ``uint8``
        ``(rows, ceil(cols/8))`` and ``shape`` ``int64 [[rows], [cols]]``.

    Raises
    ------
    TypeError
        ``dense`` not in the storage dtype of ``kind``; ``mask`` not bool.
    CheckpointFormatError
        ``cols % 4 != 0``, a group with more than 2 nonzeros, a mask that is not exactly 2 of 4
        or leaves out a nonzero (each naming the first bad group).

    Notes
    -----
    ``O(rows * cols)`` time and memory. A ``-0.0`` outside the mask is a zero and decodes as
    ``+0.0``; inside the mask its bits are stored.

    >>> w = np.array([[0, 3, 0, -1, 5, 0, 0, 0]], dtype=np.float16)
    >>> out = encode_bitmask(w, "fp16")
    >>> out["compressed"].tolist(), out["bitmask"].tolist(), out["shape"].ravel().tolist()
    ([[3.0, -1.0, 5.0, 0.0]], [[58]], [1, 8])
    """
    dense = _storage("dense", dense, kind)
    rows, cols = dense.shape
    if mask is None:
        mask = default_bitmask_mask(dense, kind, tensor=tensor)
    else:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask has dtype {mask.dtype}; it must be bool")
        if mask.shape != dense.shape:
            raise ValueError(f"mask has shape {mask.shape}; dense has {dense.shape}")
        _check_columns(tensor, cols)
        _check_two_per_group(tensor, mask, "has")
        _check_mask_covers(tensor, dense, kind, mask)
    compressed = np.ascontiguousarray(dense[mask].reshape(rows, cols // 2))
    bitmask = np.packbits(mask, axis=-1, bitorder="little").reshape(rows, -(-cols // 8))
    shape = np.array([[rows], [cols]], dtype=np.int64)
    return {"compressed": compressed, "bitmask": bitmask, "shape": shape}


def _bitmask_shape(tensor: str, shape: np.ndarray) -> tuple[int, int]:
    shape = np.asarray(shape)
    if shape.dtype.kind not in "iu":
        raise CheckpointFormatError(f"{tensor}.shape", f"has dtype {shape.dtype}; needs integers")
    if shape.size != 2 or shape.ndim not in (1, 2):
        raise CheckpointFormatError(
            f"{tensor}.shape",
            f"has shape {shape.shape}; a 2-D dense shape is stored as [[rows], [cols]] (2 x 1)",
        )
    rows, cols = (int(v) for v in shape.ravel())
    if rows < 0 or cols < 0:
        raise CheckpointFormatError(f"{tensor}.shape", f"holds a negative size {[rows, cols]}")
    return rows, cols


def decode_bitmask(
    compressed: np.ndarray,
    bitmask: np.ndarray,
    shape: np.ndarray,
    kind: str,
    *,
    tensor: str = "weight",
) -> Decoded:
    """Decode and validate one ``sparse-24-bitmask`` layer.

    Checks, in order (the first failure raises): ``shape`` is 2 non-negative integers with
    ``cols % 4 == 0``; ``compressed`` is ``(rows, cols/2)`` of the storage dtype of ``kind``;
    ``bitmask`` is ``uint8`` (``int8`` accepted: same bits) of shape ``(rows, ceil(cols/8))``;
    the padding bits after column ``cols`` are zero; every group of 4 flags exactly 2
    positions. Then the stored values go to the flagged positions in row-major order.

    Parameters
    ----------
    compressed, bitmask, shape : numpy.ndarray
        The layer's three stored tensors.
    kind : str
        Element kind of ``compressed``.
    tensor : str
        The layer prefix, for messages (``<tensor>.bitmask``...).

    Returns
    -------
    Decoded

    Raises
    ------
    CheckpointFormatError
        Any rule above, naming the stored tensor and the first bad row/group.

    Notes
    -----
    ``O(rows * cols)``; equals :func:`decode_bitmask_reference` (tested). ``-0.0`` stored in
    ``compressed`` is kept bit for bit and counts as a zero.
    """
    rows, cols = _bitmask_shape(tensor, shape)
    if cols % 4:
        raise CheckpointFormatError(
            f"{tensor}.shape",
            f"gives {cols} columns, not a multiple of 4: 2:4 groups would cross rows",
        )
    storage = _check_kind(kind)
    compressed = np.asarray(compressed)
    if compressed.dtype != storage:
        raise CheckpointFormatError(
            f"{tensor}.compressed", f"has dtype {compressed.dtype}; {kind} is stored as {storage}"
        )
    if compressed.shape != (rows, cols // 2):
        raise CheckpointFormatError(
            f"{tensor}.compressed",
            f"has shape {compressed.shape}; the {rows} x {cols} weight needs {(rows, cols // 2)}",
        )
    bitmask = np.asarray(bitmask)
    if bitmask.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise CheckpointFormatError(
            f"{tensor}.bitmask", f"has dtype {bitmask.dtype}; bits are packed in uint8"
        )
    packed_cols = -(-cols // 8)
    if bitmask.shape != (rows, packed_cols):
        raise CheckpointFormatError(
            f"{tensor}.bitmask",
            f"has shape {bitmask.shape}; {cols} columns pack into {(rows, packed_cols)} bytes",
        )
    bits = np.unpackbits(bitmask.view(np.uint8), axis=-1, bitorder="little")
    if bits.shape[1] > cols and bits[:, cols:].any():
        row = int(np.argwhere(bits[:, cols:].any(axis=1))[0, 0])
        raise CheckpointFormatError(
            f"{tensor}.bitmask",
            f"row {row} sets padding bits after column {cols - 1} (the last byte's high bits "
            "must be zero)",
            row=row,
        )
    mask = bits[:, :cols].astype(bool)
    _check_two_per_group(f"{tensor}.bitmask", mask, "flags")
    dense = np.zeros((rows, cols), dtype=storage)
    dense[mask] = compressed.reshape(-1)
    return Decoded(dense=dense, mask=mask, kind=kind)


def decode_bitmask_reference(
    compressed: np.ndarray, bitmask: np.ndarray, shape: np.ndarray, kind: str
) -> Decoded:
    """Plain-Python :func:`decode_bitmask` for valid input: bit ``j`` of byte ``b`` is column
    ``8b + j``; values are taken in row-major order of the set bits (the oracle)."""
    rows, cols = (int(v) for v in np.asarray(shape).ravel())
    storage = STORAGE_DTYPES[kind]
    dense = np.zeros((rows, cols), dtype=storage)
    mask = np.zeros((rows, cols), dtype=bool)
    flat = np.asarray(compressed).reshape(-1)
    taken = 0
    for row in range(rows):
        for column in range(cols):
            byte = int(np.asarray(bitmask).view(np.uint8)[row, column // 8])
            if (byte >> (column % 8)) & 1:
                mask[row, column] = True
                dense[row, column] = flat[taken]
                taken += 1
    return Decoded(dense=dense, mask=mask, kind=kind)


# ---------------------------------------------------------------------------------------------
# sparse-24: PyTorch's CUTLASS values + sm80 metadata
# ---------------------------------------------------------------------------------------------


#: Rows of one band of compressed-tensors' metadata row order (both word sizes).
SPARSE24_ROW_BAND = 64


def sparse24_metadata_offset(row: int, word: int, rows: int) -> int:
    """Flat storage position of logical metadata word ``(row, word)`` in a ``sparse-24`` file.

    compressed-tensors (0.4.0 to 0.14.0, ``utils/semi_structured_conversions.py``) stores
    metadata with the 2x2 swizzle and ``ColumnMajorInterleaved<2>`` of PyTorch's converter
    (``specs/formats.md`` section 6, steps 2 and 3) but an older row order, in bands of 64 rows
    for ``int16`` and ``int32`` words alike: row ``r`` of a band moves to
    ``2 (r % 2) + (r % 8) // 4 + 32 ((r % 4) // 2) + 4 (r // 8)``. It differs from PyTorch
    2.13's order (bands of 32 / 16) for every band, so the two are not interchangeable.

    >>> [sparse24_metadata_offset(r, 0, 64) for r in (0, 1, 2, 4)]
    [0, 4, 64, 1]
    """
    band = SPARSE24_ROW_BAND
    local = row % band
    row = (row // band) * band + 2 * (local % 2) + (local % 8) // 4 + 32 * ((local % 4) // 2)
    row += 4 * (local // 8)
    if row % 2 == 0 and word % 2 == 1:
        row, word = row + 1, word - 1
    elif row % 2 == 1 and word % 2 == 0:
        row, word = row - 1, word + 1
    return (word // 2) * 2 * rows + 2 * row + word % 2


def sparse24_metadata_offsets(rows: int, words_per_row: int) -> np.ndarray:
    """Vectorised :func:`sparse24_metadata_offset`: ``int64 (rows, words_per_row)``, a
    permutation when ``rows % 64 == 0`` and ``words_per_row`` is even. ``O(rows * words)``."""
    band = SPARSE24_ROW_BAND
    row = np.arange(rows, dtype=np.int64)[:, None]
    word = np.arange(words_per_row, dtype=np.int64)[None, :]
    local = row % band
    row = (row // band) * band + 2 * (local % 2) + (local % 8) // 4 + 32 * ((local % 4) // 2)
    row = row + 4 * (local // 8)
    row, word = np.broadcast_arrays(row, word)
    down = ((row % 2 == 0) & (word % 2 == 1)).astype(np.int64)
    up = ((row % 2 == 1) & (word % 2 == 0)).astype(np.int64)
    return ((word - down + up) // 2) * 2 * rows + 2 * (row + down - up) + (word - down + up) % 2


def _check_sparse24_shape(tensor: str, rows: int, cols: int, kind: str) -> None:
    spec = sparse_2to4.format_spec(kind)
    if rows % SPARSE24_ROW_BAND or cols % spec.column_multiple:
        raise CheckpointFormatError(
            tensor,
            f"a {rows} x {cols} {kind} weight does not fit sparse-24: its metadata order needs "
            f"rows divisible by {SPARSE24_ROW_BAND} and columns by {spec.column_multiple} "
            "(compressed-tensors' converter fails with an index error otherwise; nothing is "
            "padded)",
        )


def _reorder(words: np.ndarray) -> np.ndarray:
    rows, per_row = words.shape
    stored = np.empty(words.size, dtype=words.dtype)
    stored[sparse24_metadata_offsets(rows, per_row).ravel()] = words.ravel()
    return stored.reshape(rows, per_row)


def _unreorder(stored: np.ndarray) -> np.ndarray:
    rows, per_row = stored.shape
    return np.ascontiguousarray(stored).ravel()[sparse24_metadata_offsets(rows, per_row)]


def _positions_of(mask: np.ndarray, kind: str, tensor: str) -> np.ndarray:
    """``(rows, groups, 2)`` kept positions (in 4-slot units) of a 2-of-4 (fp32: 1-of-2) mask."""
    rows, cols = mask.shape
    if kind == "fp32":
        pairs = mask.reshape(rows, cols // 2, 2)
        counts = pairs.sum(axis=-1)
        if (counts != 1).any():
            row, pair = _first(counts != 1)
            raise CheckpointFormatError(
                tensor,
                f"row {row}, pair {pair} (columns {2 * pair}-{2 * pair + 1}) has "
                f"{int(counts[row, pair])} stored positions; fp32 sparse-24 is 1:2 (one per pair)",
                row=row,
                group=pair,
            )
        # slots (0, 1) hold element 0 and (2, 3) element 1: nibble 0x4 or 0xE
        second = pairs[..., 1].astype(np.uint8)
        return np.stack((2 * second, 2 * second + 1), axis=-1)
    _check_two_per_group(tensor, mask, "has")
    quads = mask.reshape(rows, cols // 4, 4)
    order = np.argsort(~quads, axis=-1, kind="stable")[..., :2]
    return order.astype(np.uint8)


def encode_sparse24(
    dense: np.ndarray,
    kind: str,
    *,
    mask: np.ndarray | None = None,
    tensor: str = "weight",
) -> tuple[np.ndarray, np.ndarray]:
    """Encode a dense 2:4 (fp32: 1:2) weight as ``sparse-24`` (CUTLASS) values and metadata.

    Without ``mask`` this is :func:`nmsim.formats.sparse_2to4.compress_2to4` with the
    ``torch-2.13`` nibble table (the table compressed-tensors' copy of PyTorch's converter
    uses) and ``overfull="error"``. With ``mask`` (a decoded file's :attr:`Decoded.mask`) the
    nibble of every group is ``p0 | p1 << 2`` of its two stored positions ``p0 < p1``, so a
    decoded file re-encodes to its own bytes whatever table wrote it.

    Returns
    -------
    values : numpy.ndarray
        ``(rows, cols/2)``, the storage dtype.
    meta : numpy.ndarray
        ``(rows, cols/16)`` ``int16`` (fp16, bf16), ``(rows, cols/8)`` ``int16`` (fp32) or
        ``(rows, cols/32)`` ``int32`` (int8), in the sparse-24 storage order
        (:func:`sparse24_metadata_offset`).

    Raises
    ------
    TypeError, ValueError
        As :func:`~nmsim.formats.sparse_2to4.compress_2to4` (alignment: rows % 32 (int8: 16),
        cols % 32 (fp32: 16, int8: 64)); :class:`CheckpointFormatError` for a bad group or a
        mask that leaves out a nonzero.

    Notes
    -----
    ``O(rows * cols)``.
    """
    _check_kind(kind, SPARSE24_KINDS)
    dense = _storage("dense", dense, kind)
    rows, cols = dense.shape
    _check_sparse24_shape(tensor, rows, cols, kind)
    if mask is None and kind == "fp32":
        # the TF32 mode keeps 1 of every 2: say so in this format's words
        pairs = nonzero_flags(dense, kind).reshape(rows, cols // 2, 2).sum(axis=-1)
        if (pairs > 1).any():
            row, pair = _first(pairs > 1)
            raise CheckpointFormatError(
                tensor,
                f"row {row}, pair {pair} (columns {2 * pair}-{2 * pair + 1}) holds 2 nonzeros; "
                "fp32 sparse-24 is 1:2 (one per pair)",
                row=row,
                group=pair,
            )
    if mask is None:
        try:
            values, logical = sparse_2to4.compress_2to4(
                dense,
                dtype_kind=kind,  # type: ignore[arg-type]
                layout="logical",
            )
        except ValueError as error:
            raise CheckpointFormatError(tensor, str(error)) from None
        return values, _reorder(logical)
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != dense.shape:
        raise TypeError(f"mask must be bool of shape {dense.shape}, got {mask.dtype} {mask.shape}")
    positions = _positions_of(mask, kind, tensor)
    _check_mask_covers(tensor, dense, kind, mask)
    if kind == "fp32":
        element = (positions[..., :1] // 2).astype(np.intp)
        values = np.take_along_axis(dense.reshape(rows, cols // 2, 2), element, axis=-1)
    else:
        values = np.take_along_axis(
            dense.reshape(rows, cols // 4, 4), positions.astype(np.intp), axis=-1
        )
    nibbles = (positions[..., 0] | (positions[..., 1] << 2)).astype(np.uint8)
    meta = _reorder(sparse_2to4.pack_nibbles(nibbles, kind))
    return np.ascontiguousarray(values.reshape(rows, cols // 2)), meta


def decode_sparse24(
    values: np.ndarray, meta: np.ndarray, kind: str, *, tensor: str = "weight"
) -> Decoded:
    """Decode and validate one ``sparse-24`` layer (CUTLASS values + sm80 metadata).

    Checks: ``values`` 2-D of the storage dtype of ``kind``; ``meta`` of the word dtype and
    shape the kind needs; rows divisible by 64 and columns by 32 (fp32: 16, int8: 64): no
    padding, the converter cannot write other shapes; every nibble names two different positions in
    increasing order (PTX leaves equal positions undefined; no converter writes a decreasing
    pair). The mask is the stored positions, 2 per group of 4 (fp32: 1 per pair).

    Raises
    ------
    CheckpointFormatError
        Naming ``<tensor>.sparse_24_packed_weight`` or ``<tensor>.meta`` and the first bad
        row and group.

    Notes
    -----
    ``O(rows * cols)``; the decoded matrix is
    :func:`~nmsim.formats.sparse_2to4.decompress_2to4`'s.
    """
    storage = _check_kind(kind, SPARSE24_KINDS)
    values = np.asarray(values)
    value_name, meta_name = f"{tensor}.sparse_24_packed_weight", f"{tensor}.meta"
    if values.dtype != storage or values.ndim != 2:
        raise CheckpointFormatError(
            value_name, f"is {values.dtype} {values.shape}; {kind} needs 2-D {storage}"
        )
    spec = sparse_2to4.format_spec(kind)
    meta = np.asarray(meta)
    rows, cols = values.shape[0], 2 * values.shape[1]
    if meta.dtype.kind not in "iu" or meta.dtype.itemsize != spec.metadata_dtype.itemsize:
        raise CheckpointFormatError(
            meta_name, f"has dtype {meta.dtype}; {kind} metadata words are {spec.metadata_dtype}"
        )
    expected = (rows, cols // spec.dense_columns_per_word)
    if cols % spec.dense_columns_per_word or meta.shape != expected:
        raise CheckpointFormatError(
            meta_name,
            f"has shape {meta.shape}; values {values.shape} ({kind}) need metadata "
            f"{expected} with {cols} divisible by {spec.dense_columns_per_word}",
        )
    _check_sparse24_shape(value_name, rows, cols, kind)
    logical = _unreorder(meta)
    nibbles = sparse_2to4.unpack_nibbles(logical, kind)
    first, second = nibbles & 3, nibbles >> 2
    bad = first >= second
    if kind == "fp32":
        bad |= (nibbles != 0x4) & (nibbles != 0xE)
    if bad.any():
        row, group = _first(bad)
        rule = "0x4 or 0xE (fp32 is 1:2)" if kind == "fp32" else "two positions p0 < p1"
        raise CheckpointFormatError(
            meta_name,
            f"row {row}, group {group}: nibble {int(nibbles[row, group]):#x} is invalid (needs "
            f"{rule})",
            row=row,
            group=group,
        )
    dense = sparse_2to4.decompress_2to4(
        values,
        logical,
        dtype_kind=kind,  # type: ignore[arg-type]
        layout="logical",
    )
    positions = np.stack((first, second), axis=-1)
    if kind == "fp32":
        mask = np.zeros((rows, cols // 2, 2), dtype=bool)
        np.put_along_axis(mask, (positions[..., :1] // 2).astype(np.intp), True, axis=-1)
    else:
        mask = np.zeros((rows, cols // 4, 4), dtype=bool)
        np.put_along_axis(mask, positions.astype(np.intp), True, axis=-1)
    return Decoded(dense=dense, mask=mask.reshape(rows, cols), kind=kind)
