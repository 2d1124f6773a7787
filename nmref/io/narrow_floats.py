"""Float8 and float4 tensors of ``.safetensors`` files, read as their exact float32 values.

NumPy has no float8 or float4 dtype (``safetensors``' NumPy reader asks for
``numpy.float8_e4m3fn`` and fails). Each of these formats has at most 256 codes, so the
value of every code is computed once from the format's definition (sign, exponent, mantissa,
bias and special codes) into a float32 table, and a tensor is read by indexing that table with
its stored bytes. Every value of these formats is a float32 exactly: like BF16, the upcast
loses nothing, and the stored dtype is reported beside it (``source_dtype``).

=============  ==================  ====================  ====  ===============================
safetensors    ``source_dtype``    sign/exponent/mant.   bias  special codes
=============  ==================  ====================  ====  ===============================
``F8_E4M3``    ``float8_e4m3fn``   1 / 4 / 3             7     S.1111.111 NaN; no inf (OCP)
``F8_E5M2``    ``float8_e5m2``     1 / 5 / 2             15    exponent 31: inf or NaN (IEEE)
``F8_E4M3FNUZ`` ``float8_e4m3fnuz`` 1 / 4 / 3            8     0x80 NaN; no inf, no -0
``F8_E5M2FNUZ`` ``float8_e5m2fnuz`` 1 / 5 / 2            16    0x80 NaN; no inf, no -0
``F8_E8M0``    ``float8_e8m0fnu``  0 / 8 / 0             127   0xFF NaN (MX block scales)
``F4``         ``float4_e2m1fn``   1 / 2 / 1             1     none; two codes per byte
=============  ==================  ====================  ====  ===============================

``F4`` packs two codes per byte, element ``2i`` in the low nibble and ``2i + 1`` in the high
one (PyTorch's ``float4_e2m1fn_x2``, the OCP MX layout); the header's shape counts elements.

What is read is what is stored. A quantized checkpoint keeps its scales in other tensors
(``weight_scale``, ``weight_scale_inv``, block scales): they are not applied, so a magnitude
mask of the stored values ranks entries as the dequantized weight does only inside one scale
block (per-tensor scales: everywhere). References: OCP 8-bit Floating Point Specification
(OFP8) rev. 1.0, 2023; OCP Microscaling Formats (MX) v1.0, 2023, Sec. 5.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import NDArray

__all__ = ["NARROW_FLOATS", "NarrowFloat", "decode", "decode_table"]


@dataclass(frozen=True)
class NarrowFloat:
    """One float8/float4 format: its NumPy-style name and the fields of its codes."""

    name: str
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    #: "ieee" (top exponent: inf or NaN), "fn" (all-ones code NaN, no inf),
    #: "fnuz" (0x80 NaN, no inf, no -0), "e8m0" (0xFF NaN), "none" (every code finite)
    specials: str

    @property
    def bits(self) -> int:
        return self.sign_bits + self.exponent_bits + self.mantissa_bits


#: safetensors dtype code -> format (the formats safetensors >= 0.6 writes).
NARROW_FLOATS: dict[str, NarrowFloat] = {
    "F8_E4M3": NarrowFloat("float8_e4m3fn", 1, 4, 3, 7, "fn"),
    "F8_E5M2": NarrowFloat("float8_e5m2", 1, 5, 2, 15, "ieee"),
    "F8_E4M3FNUZ": NarrowFloat("float8_e4m3fnuz", 1, 4, 3, 8, "fnuz"),
    "F8_E5M2FNUZ": NarrowFloat("float8_e5m2fnuz", 1, 5, 2, 16, "fnuz"),
    "F8_E8M0": NarrowFloat("float8_e8m0fnu", 0, 8, 0, 127, "e8m0"),
    "F4": NarrowFloat("float4_e2m1fn", 1, 2, 1, 1, "none"),
}


@cache
def decode_table(kind: str) -> NDArray[np.float32]:
    """The float32 value of every code of the format ``kind`` (a safetensors dtype code).

    Examples
    --------
    >>> decode_table("F8_E4M3")[[0x00, 0x01, 0x38, 0x7E, 0xC0]].tolist()
    [0.0, 0.001953125, 1.0, 448.0, -2.0]
    >>> decode_table("F4").tolist()[:8]
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    """
    fmt = NARROW_FLOATS[kind]
    values = []
    exponent_top = (1 << fmt.exponent_bits) - 1
    for code in range(1 << fmt.bits):
        negative = fmt.sign_bits and code >> (fmt.bits - 1)
        exponent = (code >> fmt.mantissa_bits) & exponent_top
        mantissa = code & ((1 << fmt.mantissa_bits) - 1)
        if exponent == 0 and fmt.specials != "e8m0":  # subnormals: no implicit leading 1
            value = math.ldexp(mantissa, 1 - fmt.bias - fmt.mantissa_bits)
        else:
            value = math.ldexp((1 << fmt.mantissa_bits) + mantissa, exponent - fmt.bias)
            value = math.ldexp(value, -fmt.mantissa_bits)
        if fmt.specials == "ieee" and exponent == exponent_top:
            value = math.inf if mantissa == 0 else math.nan
        elif (
            fmt.specials == "fn"
            and exponent == exponent_top
            and mantissa == (1 << fmt.mantissa_bits) - 1
        ):
            value = math.nan
        elif fmt.specials == "fnuz" and code == 1 << (fmt.bits - 1):
            value = math.nan  # the code of -0 is NaN in the "unsigned zero" formats
        elif fmt.specials == "e8m0" and code == 0xFF:
            value = math.nan
        values.append(-value if negative else value)
    table = np.array(values, dtype=np.float32)
    table.flags.writeable = False
    return table


def decode(raw: NDArray[np.uint8], kind: str, shape: tuple[int, ...]) -> NDArray[np.float32]:
    """The float32 values of the codes in ``raw`` (the tensor's bytes), shaped ``shape``.

    Raises
    ------
    ValueError
        If ``raw`` does not hold exactly the bytes ``shape`` needs in this format.
    """
    count = math.prod(shape)
    table = decode_table(kind)
    if NARROW_FLOATS[kind].bits == 4:
        if count % 2 or raw.size != count // 2:
            raise ValueError(
                f"declares shape {shape} {kind} ({count} codes, two per byte) but its offsets "
                f"span {raw.size} bytes"
            )
        values = np.empty(count, dtype=np.float32)
        values[0::2] = table[raw & 0x0F]  # element 2i: the low nibble
        values[1::2] = table[raw >> 4]
        return values.reshape(shape)
    if raw.size != count:
        raise ValueError(
            f"declares shape {shape} {kind} ({count} bytes) but its offsets span {raw.size} bytes"
        )
    return table[raw].reshape(shape)
