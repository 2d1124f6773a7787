"""The ``marlin-24`` checkpoint format: 4/8-bit 2:4 weights laid out for the Marlin 2:4 kernel.

compressed-tensors' Marlin24 compressor (0.4.0 to 0.14.x; ``specs/checkpoint_formats.md``
section 6) stores one quantised 2:4 weight ``q`` (``n x k``, symmetric, signed, ``bits`` = 4 or
8) and its scales as three tensors:

``<layer>.meta``
    the CUTLASS metadata of ``q`` in the ``sparse-24`` order (``n x k/16`` ``int16``),
    reshaped to ``(k/32, 2n)``;
``<layer>.weight_packed``
    the ``n x k/2`` kept values, transposed to ``(k/2, n)``, offset by ``2**(bits-1)`` to be
    unsigned, cut into 16 x 16 tiles (tile row-major, then the 256 entries of a tile), each
    1024-entry chunk of that order permuted by :func:`weight_permutation`, and packed
    ``32/bits`` per ``int32``, lowest bits first: ``(k/32, 16n bits/32)``;
``<layer>.scale_packed``
    the ``fp16`` scales, ``(groups, n)`` (``groups = k / group_size``, 1 per channel), each
    64-entry chunk permuted by :func:`scale_permutation` when ``group_size < k/2``.

:func:`decode_marlin24` inverts all three; :func:`encode_marlin24` writes them, bit for bit
what the compressor writes (cross-checked against compressed-tensors 0.14.0 in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from nmsim.formats.compressed_tensors import CheckpointFormatError, decode_sparse24

__all__ = [
    "MARLIN_BITS",
    "MarlinDecoded",
    "decode_marlin24",
    "encode_marlin24",
    "marlin24_mask",
    "scale_permutation",
    "weight_permutation",
]

MARLIN_BITS = (4, 8)
_TILE = 16
_CHUNK = 1024  # entries permuted together: 4 tiles of 16 x 16
_SCALE_CHUNK = 64


@cache
def weight_permutation(bits: int) -> np.ndarray:
    """The 1024-entry permutation ``p`` of the Marlin 2:4 layout: chunk ``c`` stores ``x[p]``.

    Entry ``i`` of 32 blocks of 32: for block ``b`` (``column = b // 4``), sub-block ``j`` (0..3),
    half ``h`` (0, 1) and tile row ``t`` from ``(2 (b % 4), 2 (b % 4) + 1, 2 (b % 4) + 8,
    2 (b % 4) + 9)``, the source is ``16 t + 256 (column // 2) + 8 (column % 2) + 4 h + j``;
    then every run of 8 (4 bits: order ``0 2 4 6 1 3 5 7``) or 4 (8 bits: ``0 2 1 3``) is
    interleaved so that a packed ``int32`` holds the values one thread needs.

    >>> weight_permutation(4)[:8].tolist()
    [0, 128, 4, 132, 16, 144, 20, 148]
    """
    if bits not in MARLIN_BITS:
        raise ValueError(f"bits={bits} must be 4 or 8")
    block = np.arange(32)[:, None, None, None]
    sub = np.arange(4)[None, :, None, None]
    half = np.arange(2)[None, None, :, None]
    lane = np.arange(4)[None, None, None, :]
    column = block // 4
    tile_row = 2 * (block % 4) + np.array([0, 1, 8, 9])[lane]
    source = 16 * tile_row + 256 * (column // 2) + 8 * (column % 2) + 4 * half + sub
    order = source.reshape(-1)
    interleave = np.array([0, 2, 4, 6, 1, 3, 5, 7]) if bits == 4 else np.array([0, 2, 1, 3])
    return order.reshape(-1, interleave.size)[:, interleave].reshape(-1)


@cache
def scale_permutation() -> np.ndarray:
    """The 64-entry permutation of grouped scales: in each run of 8, ``0 4 1 5 2 6 3 7``.

    >>> scale_permutation()[:8].tolist()
    [0, 4, 1, 5, 2, 6, 3, 7]
    """
    return (8 * np.arange(8)[:, None] + np.array([0, 4, 1, 5, 2, 6, 3, 7])[None, :]).reshape(-1)


@dataclass(frozen=True)
class MarlinDecoded:
    """One decoded marlin-24 layer.

    Attributes
    ----------
    quantized : numpy.ndarray
        ``(n, k)`` ``int8``, the signed quantised weight (zero outside ``mask``).
    mask : numpy.ndarray
        ``(n, k)`` bool, the stored positions (2 of every 4).
    scales : numpy.ndarray
        ``(groups, n)`` ``float16``, unpermuted: row ``g`` scales columns
        ``g * group_size .. (g + 1) * group_size - 1``.
    bits, group_size : int
    """

    quantized: np.ndarray
    mask: np.ndarray
    scales: np.ndarray
    bits: int
    group_size: int

    def dequantized(self) -> np.ndarray:
        """``quantized * scale`` in float32 (exact: an int of <= 8 bits times an fp16)."""
        scale = np.repeat(self.scales.astype(np.float32), self.group_size, axis=0).T
        return self.quantized.astype(np.float32) * scale


def _check_meta(meta: np.ndarray, tensor: str) -> np.ndarray:
    meta = np.asarray(meta)
    if meta.dtype != np.int16 or meta.ndim != 2 or meta.shape[1] % 2:
        raise CheckpointFormatError(
            f"{tensor}.meta", f"is {meta.dtype} {meta.shape}; marlin-24 stores int16 (k/32, 2n)"
        )
    return meta


def _logical_meta(meta: np.ndarray) -> np.ndarray:
    n, words = meta.shape[1] // 2, 2 * meta.shape[0]
    # torch's resize_ of a contiguous (n, k/16) tensor to (k/32, 2n) keeps the flat order
    return np.ascontiguousarray(meta).reshape(n, words)


def marlin24_mask(
    meta: np.ndarray, weight_packed: np.ndarray, *, tensor: str = "weight"
) -> np.ndarray:
    """The ``(n, k)`` stored-position mask of a marlin-24 layer, from its ``meta``.

    Raises
    ------
    CheckpointFormatError
        ``meta`` not ``int16`` 2-D with an even column count; ``weight_packed`` not ``int32``
        with ``k/32`` rows; the sparse-24 rules on the metadata (first bad group named).
    """
    meta = _check_meta(meta, tensor)
    packed = np.asarray(weight_packed)
    if packed.dtype != np.int32 or packed.ndim != 2 or packed.shape[0] != meta.shape[0]:
        raise CheckpointFormatError(
            f"{tensor}.weight_packed",
            f"is {packed.dtype} {packed.shape}; marlin-24 packs int32 rows of k/32 "
            f"(meta has {meta.shape[0]})",
        )
    logical = _logical_meta(meta)
    n, words = logical.shape
    return decode_sparse24(
        np.zeros((n, 8 * words), np.float16), logical, "fp16", tensor=tensor
    ).mask


def _untile(stored: np.ndarray, half_k: int, n: int) -> np.ndarray:
    """Inverse of the tile order: ``(k/32, 16 n)`` -> ``(k/2, n)``."""
    tiles = stored.reshape(half_k // _TILE, n // _TILE, _TILE, _TILE)
    return tiles.transpose(0, 2, 1, 3).reshape(half_k, n)


def _tile(values: np.ndarray) -> np.ndarray:
    half_k, n = values.shape
    tiles = values.reshape(half_k // _TILE, _TILE, n // _TILE, _TILE)
    return tiles.transpose(0, 2, 1, 3).reshape(half_k // _TILE, n * _TILE)


def _scale_layout(groups: int, k: int) -> tuple[int, bool]:
    group_size = k // groups
    # the compressor compares the group size with k/2 (the transposed weight's row count)
    return group_size, groups > 1 and group_size < k // 2


def decode_marlin24(
    weight_packed: np.ndarray,
    scale_packed: np.ndarray,
    meta: np.ndarray,
    *,
    tensor: str = "weight",
) -> MarlinDecoded:
    """Decode and validate one marlin-24 layer: quantised weight, mask and scales.

    ``n`` and ``k`` come from ``meta`` (``(k/32, 2n)``); ``bits`` from ``weight_packed``'s
    width (``2n`` words: 4 bits, ``4n``: 8 bits); the group size from ``scale_packed``'s rows
    (``k / groups``; one row: per channel).

    Raises
    ------
    CheckpointFormatError
        A dtype or shape that does not fit (``n % 64``, ``k % 32``, ``k`` divisible by the
        group count); the metadata rules of ``sparse-24`` (first bad group named).

    Notes
    -----
    ``O(n k)``. Inverse of :func:`encode_marlin24` (tested bit for bit).
    """
    meta = _check_meta(meta, tensor)
    k, n = 32 * meta.shape[0], meta.shape[1] // 2
    packed = np.asarray(weight_packed)
    if packed.dtype != np.int32 or packed.ndim != 2 or packed.shape[0] != k // 32:
        raise CheckpointFormatError(
            f"{tensor}.weight_packed", f"is {packed.dtype} {packed.shape}; needs int32 (k/32, .)"
        )
    bits = {2 * n: 4, 4 * n: 8}.get(packed.shape[1]) if n else None
    if bits is None:
        raise CheckpointFormatError(
            f"{tensor}.weight_packed",
            f"has {packed.shape[1]} columns; n={n} gives {2 * n} (4 bits) or {4 * n} (8 bits)",
        )
    if n % 64 or k % 32:
        raise CheckpointFormatError(
            f"{tensor}.meta",
            f"gives n={n}, k={k}; the layout needs n % 64 == 0 (metadata bands) and k % 32 == 0",
        )
    scales = np.asarray(scale_packed)
    if scales.dtype != np.float16 or scales.ndim != 2 or scales.shape[1] != n:
        raise CheckpointFormatError(
            f"{tensor}.scale_packed",
            f"is {scales.dtype} {scales.shape}; needs float16 (groups, {n})",
        )
    groups = scales.shape[0]
    if groups == 0 or k % groups:
        raise CheckpointFormatError(
            f"{tensor}.scale_packed", f"has {groups} rows, which do not divide k={k} into groups"
        )
    group_size, permuted = _scale_layout(groups, k)
    if permuted:
        flat = np.empty(groups * n, dtype=np.float16)
        flat.reshape(-1, _SCALE_CHUNK)[:, scale_permutation()] = scales.reshape(-1, _SCALE_CHUNK)
        scales = flat.reshape(groups, n)
    # unpack 32/bits values per word, lowest bits first
    per_word = 32 // bits
    words = packed.view(np.uint32)
    shifts = (bits * np.arange(per_word, dtype=np.uint32))[None, None, :]
    fields = (words[:, :, None] >> shifts) & np.uint32((1 << bits) - 1)
    stored = fields.reshape(k // 32, n * _TILE).astype(np.int16)
    unpermuted = np.empty_like(stored)
    unpermuted.reshape(-1, _CHUNK)[:, weight_permutation(bits)] = stored.reshape(-1, _CHUNK)
    kept = _untile(unpermuted, k // 2, n).T - (1 << (bits - 1))  # (n, k/2), signed
    logical = _logical_meta(meta)
    decoded = decode_sparse24(kept.astype(np.float16), logical, "fp16", tensor=tensor)
    quantized = decoded.dense.astype(np.int8)
    return MarlinDecoded(quantized, decoded.mask, np.ascontiguousarray(scales), bits, group_size)


def encode_marlin24(
    quantized: np.ndarray,
    scales: np.ndarray,
    *,
    bits: int,
    mask: np.ndarray | None = None,
    tensor: str = "weight",
) -> dict[str, np.ndarray]:
    """Write a signed quantised 2:4 weight and its scales in the marlin-24 layout.

    Parameters
    ----------
    quantized : numpy.ndarray
        ``(n, k)`` integers in ``[-2**(bits-1), 2**(bits-1) - 1]`` (any integer dtype), 2:4.
    scales : numpy.ndarray
        ``(groups, n)`` ``float16`` (``k % groups == 0``).
    bits : {4, 8}
    mask : numpy.ndarray, optional
        Stored positions (a decoded layer's); default: the metadata table of ``sparse-24``.

    Returns
    -------
    dict
        ``weight_packed`` (``int32``), ``scale_packed`` (``float16``), ``meta`` (``int16``).

    Raises
    ------
    ValueError
        ``bits`` not 4 or 8; values out of range; shapes (``n % 64``, ``k % 32``).
    CheckpointFormatError
        A group with more than 2 nonzeros, or a mask leaving out a nonzero.
    """
    from nmsim.formats.compressed_tensors import encode_sparse24

    if bits not in MARLIN_BITS:
        raise ValueError(f"bits={bits} must be 4 or 8")
    quantized = np.asarray(quantized)
    if quantized.ndim != 2 or quantized.dtype.kind not in "iu":
        raise TypeError(
            f"quantized must be a 2-D integer array, got {quantized.dtype} {quantized.shape}"
        )
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if quantized.size and (quantized.min() < low or quantized.max() > high):
        raise ValueError(f"quantized values must lie in [{low}, {high}] for bits={bits}")
    n, k = quantized.shape
    if n % 64 or k % 32:
        raise ValueError(f"quantized is {n} x {k}; the layout needs n % 64 == 0 and k % 32 == 0")
    scales = np.asarray(scales)
    groups = scales.shape[0] if scales.ndim == 2 else 0
    if scales.dtype != np.float16 or groups == 0 or scales.shape[1] != n or k % groups:
        raise ValueError(f"scales must be float16 (groups, {n}) with k={k} divisible by groups")
    values, meta = encode_sparse24(quantized.astype(np.float16), "fp16", mask=mask, tensor=tensor)
    unsigned = values.astype(np.int64).T + (1 << (bits - 1))  # (k/2, n), in [0, 2**bits)
    tiled = _tile(unsigned)
    permuted = tiled.reshape(-1, _CHUNK)[:, weight_permutation(bits)].reshape(tiled.shape)
    per_word = 32 // bits
    fields = permuted.astype(np.uint32).reshape(k // 32, -1, per_word)
    shifts = (bits * np.arange(per_word, dtype=np.uint32))[None, None, :]
    words = np.bitwise_or.reduce(fields << shifts, axis=-1).astype(np.uint32)
    _, permute_scales = _scale_layout(groups, k)
    scale_packed = scales.copy()
    if permute_scales:
        scale_packed = scales.reshape(-1, _SCALE_CHUNK)[:, scale_permutation()].reshape(groups, n)
    return {
        "weight_packed": words.view(np.int32),
        "scale_packed": np.ascontiguousarray(scale_packed),
        "meta": np.ascontiguousarray(meta).reshape(k // 32, 2 * n),
    }
