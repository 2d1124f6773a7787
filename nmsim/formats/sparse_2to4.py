"""Bit-exact 2:4 compressed formats consumed by sparse tensor cores (CUTLASS sm80 layout).

A dense ``m x k`` matrix ``A`` whose every group of 4 consecutive entries of a row holds at
most 2 nonzeros (1 of every 2 for fp32/TF32) is stored as two arrays:

``values``
    ``m x k/2`` kept entries, in the dtype of ``A``, each group's two entries in increasing
    column order.
``metadata``
    one 4-bit *nibble* per group giving the two kept positions (bits 1:0 = first position,
    bits 3:2 = second), packed low nibble first into ``int16`` words (fp16, bf16, fp32) or
    ``int32`` words (int8), then permuted into the CUTLASS sm80 storage order.

Every constant (the 16-entry nibble table, word sizes, alignment) is data in
``nmsim/data/sparse_2to4_formats.json`` and is documented, with its source, in
``specs/formats.md``. The arrays produced here equal, bit for bit, what
``torch.sparse._semi_structured_conversions.sparse_semi_structured_from_dense_cutlass`` returns
under torch 2.13 for every input that torch handles correctly; unlike torch, a group with too
many nonzeros is an error, not a silent drop.

``import nmsim.formats`` needs only NumPy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

import numpy as np

DtypeKind = Literal["fp16", "bf16", "fp32", "int8"]
MetadataLayout = Literal["cutlass_sm80", "logical"]

DTYPE_KINDS: tuple[str, ...] = ("fp16", "bf16", "fp32", "int8")
METADATA_LAYOUTS: tuple[str, ...] = ("cutlass_sm80", "logical")
NIBBLE_TABLES: tuple[str, ...] = ("torch-2.13", "torch-legacy")
OVERFULL_POLICIES: tuple[str, ...] = ("error", "drop")

_STORAGE_DTYPE_TO_KIND = {
    np.dtype(np.float16): "fp16",
    np.dtype(np.uint16): "bf16",
    np.dtype(np.float32): "fp32",
    np.dtype(np.int8): "int8",
}


# ---------------------------------------------------------------------------------------------
# The format's constants, loaded from the data file the spec documents
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FormatSpec:
    """Constants of the compressed format for one element type (one row of the spec's table).

    Attributes
    ----------
    dtype_kind : str
        ``"fp16"``, ``"bf16"``, ``"fp32"`` (TF32 1:2 sparsity) or ``"int8"``.
    storage_dtype : numpy.dtype
        dtype of ``dense`` and ``values``; bf16 travels as raw ``uint16`` bit patterns.
    group_size, kept_per_group : int
        4 and 2 for 2:4; 2 and 1 for the fp32 1:2 mode.
    metadata_dtype : numpy.dtype
        ``int16`` or ``int32``: the word the nibbles are packed into.
    nibbles_per_word, dense_columns_per_word : int
        Nibbles in one metadata word, and how many dense columns they describe.
    band_rows : int
        Height of the row-interleave band of the sm80 reordering (32 or 16).
    row_multiple, column_multiple : int
        What ``m`` and ``k`` must be divisible by for the ``cutlass_sm80`` layout.
    torch_min_shape : tuple of int
        The smallest ``(m, k)`` PyTorch's CUTLASS tensor subclass accepts (stricter still).
    """

    dtype_kind: str
    storage_dtype: np.dtype
    group_size: int
    kept_per_group: int
    metadata_dtype: np.dtype
    nibbles_per_word: int
    dense_columns_per_word: int
    band_rows: int
    row_multiple: int
    column_multiple: int
    torch_min_shape: tuple[int, int]

    @property
    def unsigned_metadata_dtype(self) -> np.dtype:
        """The unsigned twin of ``metadata_dtype`` (the same bits, read without sign)."""
        return np.dtype(np.uint16) if self.metadata_dtype.itemsize == 2 else np.dtype(np.uint32)


@dataclass(frozen=True)
class NibbleTable:
    """The nibble chosen for each of the 16 nonzero patterns of a group of 4.

    Attributes
    ----------
    name : str
        ``"torch-2.13"`` (current PyTorch, the default) or ``"torch-legacy"``.
    kept : numpy.ndarray
        ``(16, 2)`` positions ``(first, second)`` stored for nonzero code ``c``, where bit ``i``
        of ``c`` is set when position ``i`` of the group is nonzero.
    nibble : numpy.ndarray
        ``(16,)`` ``first | second << 2``.
    """

    name: str
    kept: np.ndarray
    nibble: np.ndarray


@cache
def _format_data() -> dict[str, Any]:
    text = resources.files("nmsim").joinpath("data/sparse_2to4_formats.json").read_text("utf-8")
    return json.loads(text)


def nonzero_code(nonzero: str) -> int:
    """The 4-bit code of a group's nonzero pattern written left to right (column 0 first).

    Position ``i`` of the string (0 = leftmost = lowest column) becomes bit ``i`` of the code,
    so ``"1000"`` (only column 0 nonzero) is code 1 and ``"0011"`` is code 12.

    >>> nonzero_code("1000"), nonzero_code("0011")
    (1, 12)
    """
    if len(nonzero) != 4 or set(nonzero) - {"0", "1"}:
        raise ValueError(f"nonzero must be 4 characters of 0/1, got {nonzero!r}")
    return sum(1 << i for i, flag in enumerate(nonzero) if flag == "1")


@cache
def nibble_table(name: str = "torch-2.13") -> NibbleTable:
    """The nibble table ``name`` (one of ``NIBBLE_TABLES``) as lookup arrays."""
    if name not in NIBBLE_TABLES:
        raise ValueError(f"nibble_table must be one of {NIBBLE_TABLES}, got {name!r}")
    kept = np.zeros((16, 2), dtype=np.uint8)
    nibble = np.zeros(16, dtype=np.uint8)
    for entry in _format_data()["nibble_tables"][name]["entries"]:
        code = nonzero_code(entry["nonzero"])
        kept[code] = entry["kept"]
        nibble[code] = int(entry["nibble"], 16)
    kept.setflags(write=False)
    nibble.setflags(write=False)
    return NibbleTable(name=name, kept=kept, nibble=nibble)


@cache
def format_spec(dtype_kind: str) -> FormatSpec:
    """The constants of ``dtype_kind`` (one of ``DTYPE_KINDS``)."""
    if dtype_kind not in DTYPE_KINDS:
        raise ValueError(f"dtype_kind must be one of {DTYPE_KINDS}, got {dtype_kind!r}")
    row = _format_data()["dtype_kinds"][dtype_kind]
    return FormatSpec(
        dtype_kind=dtype_kind,
        storage_dtype=np.dtype(row["storage_dtype"]),
        group_size=row["group_size"],
        kept_per_group=row["kept_per_group"],
        metadata_dtype=np.dtype(row["metadata_dtype"]),
        nibbles_per_word=row["nibbles_per_word"],
        dense_columns_per_word=row["dense_columns_per_word"],
        band_rows=row["band_rows"],
        row_multiple=row["row_multiple"],
        column_multiple=row["column_multiple"],
        torch_min_shape=tuple(row["torch_min_shape"]),
    )


def dtype_kind_of(values: np.ndarray) -> str:
    """The ``dtype_kind`` implied by a storage dtype (``uint16`` is read as raw bf16)."""
    kind = _STORAGE_DTYPE_TO_KIND.get(np.asarray(values).dtype)
    if kind is None:
        raise TypeError(
            f"values has dtype {np.asarray(values).dtype}; expected float16 (fp16), uint16 "
            "(bf16 bit patterns), float32 (fp32/TF32) or int8"
        )
    return kind


# ---------------------------------------------------------------------------------------------
# bf16 as raw bits
# ---------------------------------------------------------------------------------------------


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bf16 (round to nearest, ties to even) and return the bit patterns.

    NaN becomes the quiet NaN ``0x7FC0`` (PyTorch 2.13 on CPU gives ``0xFFFF``; both are NaN);
    infinities and signed zeros are kept; overflow rounds to infinity.

    >>> float32_to_bf16_bits(np.array([1.0, -2.0, 1.00390625], dtype=np.float32))
    array([16256, 49152, 16256], dtype=uint16)
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise TypeError(f"x must be float32, got {x.dtype} (convert explicitly first)")
    bits = x.view(np.uint32).astype(np.uint64)
    # Round half to even on the 16 dropped bits: add 0x7FFF plus the lowest kept bit.
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    out[np.isnan(x)] = 0x7FC0
    return out


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact float32 values of bf16 bit patterns (``uint16``).

    >>> bf16_bits_to_float32(np.array([0x3F80, 0xC000], dtype=np.uint16))
    array([ 1., -2.], dtype=float32)
    """
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bits must be uint16 bf16 bit patterns, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------------------------
# Validation shared by compress and decompress
# ---------------------------------------------------------------------------------------------


def _check_layout(layout: str) -> None:
    if layout not in METADATA_LAYOUTS:
        raise ValueError(f"layout must be one of {METADATA_LAYOUTS}, got {layout!r}")


def check_shape(rows: int, columns: int, dtype_kind: str, layout: str = "cutlass_sm80") -> None:
    """Raise ``ValueError`` unless a dense ``rows x columns`` matrix fits the format.

    ``layout="logical"`` (metadata words in plain row-major order) needs only whole metadata
    words per row; ``"cutlass_sm80"`` also needs whole row-interleave bands and an even number
    of words per row (the 2x2 swizzle). Both are spelled out in ``specs/formats.md``.
    """
    spec = format_spec(dtype_kind)
    _check_layout(layout)
    word = spec.dense_columns_per_word
    if columns % word:
        raise ValueError(
            f"dense has {columns} columns; {dtype_kind} metadata words cover {word} columns "
            f"each, so the number of columns must be divisible by {word} (pad with zero columns)"
        )
    if layout == "cutlass_sm80":
        if rows % spec.row_multiple:
            raise ValueError(
                f"dense has {rows} rows; the cutlass_sm80 layout interleaves {dtype_kind} "
                f"metadata rows in bands of {spec.band_rows}, so the number of rows must be "
                f"divisible by {spec.row_multiple} (pad with zero rows or use layout='logical')"
            )
        if columns % spec.column_multiple:
            raise ValueError(
                f"dense has {columns} columns; the cutlass_sm80 layout swizzles metadata words "
                f"in 2x2 blocks, so a row needs an even number of {word}-column words: the "
                f"number of columns must be divisible by {spec.column_multiple} (pad with zero "
                "columns or use layout='logical'); PyTorch's converter fails with an index "
                "error here"
            )


def _as_storage_array(name: str, array: Any, spec: FormatSpec) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype != spec.storage_dtype:
        hint = " (bf16 is passed as raw uint16 bit patterns)" if spec.dtype_kind == "bf16" else ""
        raise TypeError(
            f"{name} has dtype {array.dtype}; dtype_kind={spec.dtype_kind!r} needs "
            f"{spec.storage_dtype}{hint}; convert explicitly, nothing is cast silently"
        )
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (rows, reduction columns), got shape {array.shape}; "
            "flatten conv weights with nmref.layouts.to_reduction_matrix first"
        )
    return np.ascontiguousarray(array)


def nonzero_mask(dense: np.ndarray, dtype_kind: str) -> np.ndarray:
    """Which entries count as nonzero: ``!= 0`` in the element type (so NaN counts, -0.0 does not).

    For floating-point kinds (bf16 bit patterns included) an entry is zero exactly when all its
    bits but the sign bit are clear, which is ``x != 0`` in IEEE arithmetic.
    """
    spec = format_spec(dtype_kind)
    dense = np.asarray(dense)
    if spec.dtype_kind == "int8":
        return dense != 0
    # Compare bits rather than floats: the same answer, and NumPy's float16 compare is slow.
    unsigned = np.dtype(f"u{spec.storage_dtype.itemsize}")
    magnitude_bits = unsigned.type((1 << (8 * unsigned.itemsize - 1)) - 1)
    return (dense.view(unsigned) & magnitude_bits) != 0


# ---------------------------------------------------------------------------------------------
# Metadata words: nibble packing and the sm80 storage order
# ---------------------------------------------------------------------------------------------


def metadata_storage_offset(row: int, word: int, rows: int, dtype_kind: str) -> int:
    """Flat storage position of logical metadata word ``(row, word)`` in the sm80 layout.

    The three steps of CUTLASS ``reorder_meta`` plus ``ColumnMajorInterleaved<2>`` storage,
    written for one word (the vectorised :func:`metadata_storage_offsets` must agree):

    1. inside each band of ``B`` rows (32 for int16 words, 16 for int32), row ``8a + b``
       moves to row ``(B/8) b + a``;
    2. in every 2x2 block of (row, word) positions the two off-diagonal entries swap;
    3. words are stored column-major in panels of two columns: offset
       ``(word // 2) * 2 * rows + 2 * row + word % 2``.

    >>> [metadata_storage_offset(r, 0, 32, "fp16") for r in (0, 8, 1)]
    [0, 1, 8]
    """
    band = format_spec(dtype_kind).band_rows
    row = (row // band) * band + (row % 8) * (band // 8) + (row % band) // 8
    if row % 2 == 0 and word % 2 == 1:
        row, word = row + 1, word - 1
    elif row % 2 == 1 and word % 2 == 0:
        row, word = row - 1, word + 1
    return (word // 2) * 2 * rows + 2 * row + word % 2


def metadata_storage_offsets(rows: int, words_per_row: int, dtype_kind: str) -> np.ndarray:
    """Vectorised :func:`metadata_storage_offset` for every word of a ``rows x words`` matrix.

    Returns an ``int64`` array of shape ``(rows, words_per_row)``; it is a permutation of
    ``range(rows * words_per_row)`` when ``rows`` is a multiple of the band and
    ``words_per_row`` is even. Complexity ``O(rows * words_per_row)``.
    """
    band = format_spec(dtype_kind).band_rows
    row = np.arange(rows, dtype=np.int64)[:, None]
    word = np.arange(words_per_row, dtype=np.int64)[None, :]
    row = (row // band) * band + (row % 8) * (band // 8) + (row % band) // 8
    row, word = np.broadcast_arrays(row, word)
    down = ((row % 2 == 0) & (word % 2 == 1)).astype(np.int64)
    up = ((row % 2 == 1) & (word % 2 == 0)).astype(np.int64)
    row = row + down - up
    word = word - down + up
    return (word // 2) * 2 * rows + 2 * row + word % 2


def reorder_metadata(words: np.ndarray, dtype_kind: str) -> np.ndarray:
    """Logical row-major metadata words -> the sm80 storage order (same shape and dtype)."""
    words = np.asarray(words)
    rows, per_row = words.shape
    check_shape(rows, per_row * format_spec(dtype_kind).dense_columns_per_word, dtype_kind)
    stored = np.empty(words.size, dtype=words.dtype)
    stored[metadata_storage_offsets(rows, per_row, dtype_kind).ravel()] = words.ravel()
    return stored.reshape(rows, per_row)


def unreorder_metadata(stored: np.ndarray, dtype_kind: str) -> np.ndarray:
    """Inverse of :func:`reorder_metadata`."""
    stored = np.asarray(stored)
    rows, per_row = stored.shape
    check_shape(rows, per_row * format_spec(dtype_kind).dense_columns_per_word, dtype_kind)
    offsets = metadata_storage_offsets(rows, per_row, dtype_kind)
    return np.ascontiguousarray(stored).ravel()[offsets]


def pack_nibbles(nibbles: np.ndarray, dtype_kind: str) -> np.ndarray:
    """Pack ``(m, groups)`` nibbles into ``(m, words)`` metadata words, first group lowest.

    Words are returned in the signed metadata dtype (``int16``/``int32``) with the same bits,
    as PyTorch stores them: all-``0xE`` words print as ``-4370``.
    """
    spec = format_spec(dtype_kind)
    nibbles = np.asarray(nibbles)
    rows, groups = nibbles.shape
    per_word = spec.nibbles_per_word
    if groups % per_word:
        raise ValueError(f"{groups} nibbles per row do not fill whole {per_word}-nibble words")
    unsigned = spec.unsigned_metadata_dtype
    slots = nibbles.reshape(rows, groups // per_word, per_word)
    words = np.zeros((rows, groups // per_word), dtype=unsigned)
    for slot in range(per_word):
        words |= slots[:, :, slot].astype(unsigned) << unsigned.type(4 * slot)
    return words.view(spec.metadata_dtype)


def unpack_nibbles(words: np.ndarray, dtype_kind: str) -> np.ndarray:
    """Inverse of :func:`pack_nibbles`: ``(m, words)`` -> ``(m, groups)`` ``uint8`` nibbles."""
    spec = format_spec(dtype_kind)
    words = np.asarray(words)
    if words.dtype.itemsize != spec.metadata_dtype.itemsize or words.dtype.kind not in "iu":
        raise TypeError(
            f"metadata has dtype {words.dtype}; {dtype_kind} metadata is {spec.metadata_dtype}"
        )
    unsigned = words.view(spec.unsigned_metadata_dtype).astype(np.uint64)
    shifts = (4 * np.arange(spec.nibbles_per_word, dtype=np.uint64))[None, None, :]
    nibbles = (unsigned[:, :, None] >> shifts) & np.uint64(0xF)
    rows, per_row = words.shape
    return nibbles.reshape(rows, per_row * spec.nibbles_per_word).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# compress / decompress
# ---------------------------------------------------------------------------------------------


def _group_nonzero_codes(nonzero: np.ndarray, spec: FormatSpec) -> np.ndarray:
    """``(m, groups)`` 4-bit codes of the nonzero pattern of every metadata group."""
    rows = nonzero.shape[0]
    if spec.group_size == 2:
        # A pair of fp32 is encoded as four 16-bit halves, the two halves of an element
        # sharing its flag: pattern (e0, e0, e1, e1).
        nonzero = np.repeat(nonzero, 2, axis=1)
    quads = nonzero.reshape(rows, nonzero.shape[1] // 4, 4).view(np.uint8)
    return quads[..., 0] | quads[..., 1] << 1 | quads[..., 2] << 2 | quads[..., 3] << 3


def _check_compress_arguments(
    dense: np.ndarray, dtype_kind: DtypeKind, layout: MetadataLayout, overfull: str, encoding: str
) -> tuple[FormatSpec, NibbleTable, np.ndarray]:
    """Validate the arguments of a compression; the format, the nibble table and ``dense`` as
    a 2-D array of the storage dtype whose shape the format accepts."""
    spec = format_spec(dtype_kind)
    _check_layout(layout)
    if overfull not in OVERFULL_POLICIES:
        raise ValueError(f"overfull must be one of {OVERFULL_POLICIES}, got {overfull!r}")
    table = nibble_table(encoding)
    dense = _as_storage_array("dense", dense, spec)
    check_shape(dense.shape[0], dense.shape[1], dtype_kind, layout)
    return spec, table, dense


def compress_2to4(
    dense: np.ndarray,
    *,
    dtype_kind: DtypeKind,
    layout: MetadataLayout = "cutlass_sm80",
    overfull: Literal["error", "drop"] = "error",
    encoding: str = "torch-2.13",
) -> tuple[np.ndarray, np.ndarray]:
    """Compress a 2:4 (fp32: 1:2) sparse matrix into tensor-core ``values`` and ``metadata``.

    For every group ``g`` of 4 consecutive entries of row ``r`` (pairs for fp32), with
    nonzero code :math:`c = \\sum_i [A_{r,4g+i} \\neq 0]\\, 2^i`, the table gives kept positions
    :math:`(p_0, p_1) = T(c)`, and

    .. math::

        \\text{values}_{r, 2g+j} = A_{r, 4g + p_j}, \\qquad
        \\text{nibble}_{r,g} = p_0 + 4 p_1 .

    Parameters
    ----------
    dense : numpy.ndarray
        ``(m, k)`` matrix, groups along the last axis (the reduction axis of ``A`` in
        ``A @ B``). dtype must be exactly float16 (fp16), uint16 bf16 bit patterns (bf16),
        float32 (fp32) or int8; nothing is cast.
    dtype_kind : {"fp16", "bf16", "fp32", "int8"}
        Element type. ``"fp32"`` is the TF32 1:2 mode: one kept element per pair.
    layout : {"cutlass_sm80", "logical"}
        Metadata word order: the CUTLASS sm80 storage order PyTorch produces (default), or
        plain row-major words before reordering (no row alignment needed).
    overfull : {"error", "drop"}
        A group with more than 2 nonzeros (fp32: a pair with 2) raises ``ValueError``
        (default). ``"drop"`` reproduces PyTorch, which silently keeps the table's positions
        and loses the rest.
    encoding : {"torch-2.13", "torch-legacy"}
        Which nibble table (``NIBBLE_TABLES``). It decides the nibbles of groups with fewer
        (or more) than 2 nonzeros; groups with exactly 2 encode identically in both.

    Returns
    -------
    values : numpy.ndarray
        ``(m, k/2)``, dtype of ``dense``.
    metadata : numpy.ndarray
        ``(m, k/16)`` int16 (fp16, bf16), ``(m, k/8)`` int16 (fp32) or ``(m, k/32)`` int32
        (int8).

    Raises
    ------
    TypeError
        ``dense`` has the wrong dtype for ``dtype_kind``.
    ValueError
        Unknown option; ``dense`` not 2-D; a shape the layout cannot hold (see
        :func:`check_shape`); an over-full group with ``overfull="error"``.

    Notes
    -----
    Time and memory ``O(m k)``. "Nonzero" means ``!= 0`` in the element type: NaN and
    infinities count as nonzero and are stored bit for bit; ``-0.0`` counts as zero, so it can
    come back from :func:`decompress_2to4` as ``+0.0`` (the round trip is otherwise bitwise
    exact). Under-full groups store the zeros found at the table's positions.

    Examples
    --------
    >>> dense = np.zeros((32, 32), dtype=np.float16)
    >>> dense[:, 2::4] = 1.0; dense[:, 3::4] = 2.0     # every group is 0011
    >>> values, metadata = compress_2to4(dense, dtype_kind="fp16")
    >>> values[0, :4].tolist(), hex(int(metadata[0, 0]) & 0xFFFF)
    ([1.0, 2.0, 1.0, 2.0], '0xeeee')

    References
    ----------
    PyTorch 2.13 ``torch/sparse/_semi_structured_conversions.py``; CUTLASS
    ``tools/util/include/cutlass/util/host_reorder.h``; PTX ISA, "Sparse matrix storage"
    (``mma.sp``). Mishra et al. 2021, "Accelerating Sparse Deep Neural Networks", Sec. 2.
    """
    spec, table, dense = _check_compress_arguments(dense, dtype_kind, layout, overfull, encoding)
    rows, columns = dense.shape

    codes = _group_nonzero_codes(nonzero_mask(dense, dtype_kind), spec)
    if overfull == "error":
        too_many = np.bitwise_count(codes) > 2
        if too_many.any():
            row, group = (int(i) for i in np.argwhere(too_many)[0])
            size, kept = spec.group_size, spec.kept_per_group
            start = size * group
            found = np.count_nonzero(nonzero_mask(dense[row, start : start + size], dtype_kind))
            raise ValueError(
                f"dense is not {kept}:{size} sparse: row {row}, columns "
                f"{start}..{start + size - 1} hold {found} nonzeros (at most {kept} allowed; "
                f"{int(too_many.sum())} such groups in all). "
                "Prune first (nmref.nm_mask), or pass overfull='drop' to reproduce PyTorch, "
                "which drops the extras silently"
            )

    nibbles = table.nibble[codes]  # (m, metadata groups) uint8
    if spec.group_size == 4:
        # The nibble holds the kept positions: bits 1:0 first, bits 3:2 second.
        kept = np.stack((nibbles & 3, nibbles >> 2), axis=-1).astype(np.intp)
        values = np.take_along_axis(dense.reshape(rows, columns // 4, 4), kept, axis=-1)
    else:
        # Slots (0,1) are element 0 and (2,3) element 1: the kept element is first slot // 2.
        element = ((nibbles & 3) >> 1)[..., None].astype(np.intp)
        values = np.take_along_axis(dense.reshape(rows, columns // 2, 2), element, axis=-1)
    values = values.reshape(rows, columns // 2)

    metadata = pack_nibbles(nibbles, dtype_kind)
    if layout == "cutlass_sm80":
        metadata = reorder_metadata(metadata, dtype_kind)
    return values, metadata


def metadata_to_positions(
    metadata: np.ndarray, *, dtype_kind: DtypeKind, layout: MetadataLayout = "cutlass_sm80"
) -> np.ndarray:
    """Decode metadata into the kept positions ``(m, groups, 2)`` (``uint8``, 0..3 each).

    Positions are in units of the 4-slot group (for fp32, 16-bit halves of a pair). Raises
    ``ValueError`` for the nibbles PTX calls invalid (both positions equal) and, for fp32,
    for anything but ``0x4`` (element 0) and ``0xE`` (element 1).
    """
    spec = format_spec(dtype_kind)
    _check_layout(layout)
    metadata = np.asarray(metadata)
    if metadata.ndim != 2:
        raise ValueError(f"metadata must be 2-D, got shape {metadata.shape}")
    if metadata.dtype.itemsize != spec.metadata_dtype.itemsize or metadata.dtype.kind not in "iu":
        raise TypeError(
            f"metadata has dtype {metadata.dtype}; {dtype_kind} metadata is {spec.metadata_dtype}"
        )
    if layout == "cutlass_sm80":
        metadata = unreorder_metadata(metadata, dtype_kind)
    nibbles = unpack_nibbles(metadata, dtype_kind)
    positions = np.stack((nibbles & 3, nibbles >> 2), axis=-1)
    bad = positions[..., 0] == positions[..., 1]
    if spec.group_size == 2:
        bad |= (nibbles != 0x4) & (nibbles != 0xE)
    if bad.any():
        row, group = (int(i) for i in np.argwhere(bad)[0])
        allowed = "0x4 or 0xE" if spec.group_size == 2 else "two different positions"
        raise ValueError(
            f"metadata nibble {int(nibbles[row, group]):#x} at row {row}, group {group} is "
            f"invalid for {dtype_kind} (needs {allowed}; PTX leaves equal positions undefined)"
        )
    return positions


def decompress_2to4(
    values: np.ndarray,
    metadata: np.ndarray,
    *,
    dtype_kind: DtypeKind | None = None,
    layout: MetadataLayout = "cutlass_sm80",
) -> np.ndarray:
    """Rebuild the dense ``(m, k)`` matrix from ``values`` and ``metadata``.

    Every kept value goes to the position its nibble names; all other entries are zero
    (``+0.0``). The inverse of :func:`compress_2to4` for every valid 2:4 (fp32: 1:2) matrix,
    bit for bit except that a ``-0.0`` outside the kept positions comes back as ``+0.0``.

    Parameters
    ----------
    values : numpy.ndarray
        ``(m, k/2)`` kept values.
    metadata : numpy.ndarray
        Metadata words as :func:`compress_2to4` returns them (signed or unsigned words of
        the right size are both accepted).
    dtype_kind : str, optional
        Defaults to the kind implied by ``values.dtype`` (``uint16`` means bf16).
    layout : {"cutlass_sm80", "logical"}
        Order of the metadata words.

    Returns
    -------
    numpy.ndarray
        ``(m, k)`` dense matrix, dtype of ``values``.

    Raises
    ------
    TypeError
        Wrong dtypes.
    ValueError
        Shapes that disagree or do not fit the layout; invalid nibbles (see
        :func:`metadata_to_positions`). Nibbles whose positions are in decreasing order are
        decoded as written (PyTorch does the same; no converter produces them).

    Notes
    -----
    Time and memory ``O(m k)``.
    """
    kind = dtype_kind_of(values) if dtype_kind is None else dtype_kind
    spec = format_spec(kind)
    values = _as_storage_array("values", values, spec)
    metadata = np.asarray(metadata)
    rows, half = values.shape
    columns = 2 * half
    expected = (rows, columns // spec.dense_columns_per_word)
    if columns % spec.dense_columns_per_word == 0 and metadata.shape != expected:
        raise ValueError(
            f"metadata has shape {metadata.shape}; values of shape {values.shape} "
            f"({kind}) need metadata of shape {expected}"
        )
    check_shape(rows, columns, kind, layout)
    positions = metadata_to_positions(metadata, dtype_kind=kind, layout=layout)

    if spec.group_size == 4:
        dense = np.zeros((rows, columns // 4, 4), dtype=spec.storage_dtype)
        pairs = values.reshape(rows, columns // 4, 2)
        np.put_along_axis(dense, positions.astype(np.int64), pairs, axis=-1)
    else:
        dense = np.zeros((rows, columns // 2, 2), dtype=spec.storage_dtype)
        element = positions[..., :1].astype(np.int64) // 2
        np.put_along_axis(dense, element, values.reshape(rows, columns // 2, 1), axis=-1)
    return dense.reshape(rows, columns)


# ---------------------------------------------------------------------------------------------
# The slow oracle: one group, one word at a time
# ---------------------------------------------------------------------------------------------


def compress_2to4_reference(
    dense: np.ndarray,
    *,
    dtype_kind: DtypeKind,
    layout: MetadataLayout = "cutlass_sm80",
    overfull: Literal["error", "drop"] = "error",
    encoding: str = "torch-2.13",
) -> tuple[np.ndarray, np.ndarray]:
    """Plain-Python loops computing exactly what :func:`compress_2to4` computes.

    Reads the nibble table straight from the data file and places each word with the scalar
    :func:`metadata_storage_offset`; meant for tests and for reading, ``O(m k)`` Python steps.
    """
    # The same checks as compress_2to4; the loop reads the nibble table from the data file.
    spec, _, dense = _check_compress_arguments(dense, dtype_kind, layout, overfull, encoding)
    rows, columns = dense.shape
    entries = {
        entry["nonzero"]: entry for entry in _format_data()["nibble_tables"][encoding]["entries"]
    }
    flags = nonzero_mask(dense, dtype_kind)
    values = np.zeros((rows, columns // 2), dtype=spec.storage_dtype)
    words_per_row = columns // spec.dense_columns_per_word
    words = [[0] * words_per_row for _ in range(rows)]
    for row in range(rows):
        for group in range(columns // spec.group_size):
            start = group * spec.group_size
            group_flags = [bool(flags[row, start + i]) for i in range(spec.group_size)]
            if sum(group_flags) > spec.kept_per_group and overfull == "error":
                raise ValueError(f"dense is not 2:4 sparse at row {row}, column {start}")
            if spec.group_size == 2:  # fp32 pair -> four 16-bit halves
                group_flags = [group_flags[0], group_flags[0], group_flags[1], group_flags[1]]
            entry = entries["".join("1" if flag else "0" for flag in group_flags)]
            first, second = entry["kept"]
            if spec.group_size == 4:
                values[row, 2 * group] = dense[row, start + first]
                values[row, 2 * group + 1] = dense[row, start + second]
            else:
                values[row, group] = dense[row, start + first // 2]
            word, slot = divmod(group, spec.nibbles_per_word)
            words[row][word] |= int(entry["nibble"], 16) << (4 * slot)

    bits = 8 * spec.metadata_dtype.itemsize
    signed = [[w - (1 << bits) if w >= 1 << (bits - 1) else w for w in row] for row in words]
    logical = np.array(signed, dtype=spec.metadata_dtype).reshape(rows, words_per_row)
    if layout == "logical":
        return values, logical
    stored = np.zeros(rows * words_per_row, dtype=spec.metadata_dtype)
    for row in range(rows):
        for word in range(words_per_row):
            stored[metadata_storage_offset(row, word, rows, dtype_kind)] = logical[row, word]
    return values, stored.reshape(rows, words_per_row)


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
