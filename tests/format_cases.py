"""Random test matrices in every element type of the 2:4 formats (shared by the format tests)."""

from __future__ import annotations

import numpy as np

from nmsim.formats.sparse_2to4 import format_spec, nonzero_mask


def random_elements(
    rng: np.random.Generator, kind: str, shape: tuple[int, ...], *, bf16_nans: bool = True
) -> np.ndarray:
    """Random elements of ``kind``: any bit pattern except signalling NaNs.

    PyTorch's CPU converter quietens fp16/fp32 signalling NaNs and rewrites every bf16 NaN to
    ``0xFFFF``, so inputs meant for the comparison with torch pass ``bf16_nans=False``.
    """
    if kind == "int8":
        return rng.integers(-128, 128, size=shape).astype(np.int8)
    if kind == "fp32":
        bits = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
        nan = (bits & 0x7F800000) == 0x7F800000
        bits[nan] |= 0x00400000  # quiet any NaN: PyTorch's CPU gather quietens signalling ones
        return bits.view(np.float32)
    bits = rng.integers(0, 2**16, size=shape).astype(np.uint16)
    exponent = 0x7C00 if kind == "fp16" else 0x7F80
    quiet = 0x0200 if kind == "fp16" else 0x0040
    special = (bits & exponent) == exponent
    bits[special] |= quiet
    if kind == "bf16" and not bf16_nans:
        bits[special] = (bits[special] & 0x8000) | 0x7F80  # infinities instead
    return bits if kind == "bf16" else bits.view(np.float16)


def zero_of(kind: str, negative: bool = False) -> np.generic:
    dtype = format_spec(kind).storage_dtype
    if kind == "bf16":
        return np.uint16(0x8000 if negative else 0)
    if kind == "int8" or not negative:
        return dtype.type(0)
    return dtype.type(-0.0)


def random_sparse(
    rng: np.random.Generator,
    kind: str,
    shape: tuple[int, int],
    *,
    fill: float = 1.0,
    negative_zeros: bool = False,
    bf16_nans: bool = True,
) -> np.ndarray:
    """A random valid 2:4 (fp32: 1:2) matrix; ``fill`` is the chance a kept slot is nonzero."""
    spec = format_spec(kind)
    rows, columns = shape
    groups = columns // spec.group_size
    # A random choice of kept positions per group, then some kept slots turned to zero.
    order = np.argsort(rng.random((rows, groups, spec.group_size)), axis=-1)
    keep = np.zeros((rows, groups, spec.group_size), dtype=bool)
    np.put_along_axis(keep, order[..., : spec.kept_per_group], True, axis=-1)
    keep &= rng.random(keep.shape) < fill
    elements = random_elements(rng, kind, shape, bf16_nans=bf16_nans)
    elements[~nonzero_of(elements, kind)] = 1 if kind != "bf16" else 0x3F80  # no stray zeros
    zero = zero_of(kind, negative=negative_zeros)
    dense = np.where(keep.reshape(shape), elements, zero)
    if negative_zeros and kind != "int8":
        # Mix +0.0 and -0.0 among the zeros.
        plus = rng.random(shape) < 0.5
        dense = np.where(~keep.reshape(shape) & plus, zero_of(kind), dense)
    return dense.astype(spec.storage_dtype)


def nonzero_of(array: np.ndarray, kind: str) -> np.ndarray:
    return nonzero_mask(array, kind)


def bits_of(array: np.ndarray) -> np.ndarray:
    """Bit patterns, so that NaN and -0.0 compare exactly."""
    return array.view(f"u{array.dtype.itemsize}")


def aligned_shape(kind: str, row_blocks: int, column_blocks: int) -> tuple[int, int]:
    spec = format_spec(kind)
    return spec.row_multiple * row_blocks, spec.column_multiple * column_blocks
