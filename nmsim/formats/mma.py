"""Sparse MMA semantics: ``D = A @ B + C`` with ``A`` given in the compressed 2:4 format.

Two levels, both in NumPy:

* :func:`mma_sp` multiplies a whole compressed matrix: for every kept value the metadata
  names the row of ``B`` it meets, exactly as a sparse tensor core selects ``B`` elements.
* :func:`mma_sp_warp` emulates one PTX ``mma.sp.sync.aligned.m16n8k16`` / ``m16n8k32``
  instruction (fp16/bf16 inputs) on the 32 lanes' registers: the ``A`` fragments, the ``B``
  and ``C`` fragments, the metadata register ``e`` of each lane and the sparsity selector.
  :func:`mma_sp_tiled` runs a whole product through it, tile by tile, with every lane's
  metadata register read as one 32-bit word from the CUTLASS sm80 storage
  (:func:`metadata_register`).

Arithmetic (``specs/formats.md``, section "Arithmetic"): products are exact; the sum is formed
in float64 (int64 for int8) and rounded once to the accumulator type. Integer-valued inputs
therefore give exactly the dense masked product; other inputs differ from a GPU by at most
:func:`accumulation_error_bound`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from nmsim.formats.sparse_2to4 import (
    MetadataLayout,
    bf16_bits_to_float32,
    dtype_kind_of,
    format_spec,
    metadata_to_positions,
    unpack_nibbles,
    unreorder_metadata,
)

Accumulate = Literal["fp32", "fp16", "int32"]
Tf32Inputs = Literal["keep", "truncate", "round"]
WarpShape = Literal["m16n8k16", "m16n8k32"]

ACCUMULATE: tuple[str, ...] = ("fp32", "fp16", "int32")
TF32_INPUTS: tuple[str, ...] = ("keep", "truncate", "round")
WARP_SHAPES: tuple[str, ...] = ("m16n8k16", "m16n8k32")
WARP_SIZE = 32

_ACCUMULATOR_DTYPES = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32}
# Relative error charged to every accumulation step: twice the truncation error of the
# accumulator (2 ulp-of-1), so that a multi-term adder which aligns and truncates addends to
# the largest exponent of its block is covered too; see accumulation_error_bound.
_STEP_ERROR = {"fp32": 2.0**-22, "fp16": 2.0**-9}


# ---------------------------------------------------------------------------------------------
# Element conversions
# ---------------------------------------------------------------------------------------------


def tf32_round(x: np.ndarray, mode: Tf32Inputs = "round") -> np.ndarray:
    """Reduce float32 values to TF32 precision (10 explicit mantissa bits), as float32.

    ``"truncate"`` clears the 13 low mantissa bits; ``"round"`` rounds to nearest with ties away
    from zero, like PTX ``cvt.rna.tf32.f32``; ``"keep"`` returns ``x`` unchanged. NaN and
    infinities pass through unchanged.

    >>> tf32_round(np.array([1 + 2**-11, 1 + 2**-12], dtype=np.float32)).tolist()
    [1.0009765625, 1.0]
    """
    if mode not in TF32_INPUTS:
        raise ValueError(f"tf32_inputs must be one of {TF32_INPUTS}, got {mode!r}")
    x = np.asarray(x, dtype=np.float32)
    if mode == "keep":
        return x
    bits = x.view(np.uint32).astype(np.uint64)
    if mode == "round":
        bits = bits + 0x1000  # half of the dropped 13 bits: ties go away from zero
    rounded = (bits & 0xFFFFE000).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), rounded, x)


def _exact_float64(array: np.ndarray, kind: str, tf32_inputs: Tf32Inputs) -> np.ndarray:
    """The exact real values of stored elements, as float64 (int64 for int8)."""
    if kind == "bf16":
        return bf16_bits_to_float32(array).astype(np.float64)
    if kind == "fp32":
        return tf32_round(array, tf32_inputs).astype(np.float64)
    if kind == "int8":
        return array.astype(np.int64)
    return array.astype(np.float64)


def _check_b(b: np.ndarray, kind: str, rows: int) -> np.ndarray:
    b = np.asarray(b)
    allowed = [format_spec(kind).storage_dtype]
    if kind == "int8":
        allowed.append(np.dtype(np.uint8))  # PTX allows s8 x u8
    if b.dtype not in allowed:
        raise TypeError(
            f"b has dtype {b.dtype}; with {kind} values it must be "
            f"{' or '.join(str(d) for d in allowed)} (bf16 as uint16 bit patterns)"
        )
    if b.ndim != 2 or b.shape[0] != rows:
        raise ValueError(
            f"b must have shape ({rows}, n) to multiply A, which has {rows} columns, got {b.shape}"
        )
    return b


def _check_accumulate(kind: str, accumulate: str | None) -> str:
    default = "int32" if kind == "int8" else "fp32"
    accumulate = default if accumulate is None else accumulate
    if accumulate not in ACCUMULATE:
        raise ValueError(f"accumulate must be one of {ACCUMULATE}, got {accumulate!r}")
    allowed = {"int8": ("int32",), "fp16": ("fp32", "fp16"), "bf16": ("fp32",), "fp32": ("fp32",)}
    if accumulate not in allowed[kind]:
        raise ValueError(
            f"accumulate={accumulate!r} is not available for {kind} inputs (PTX mma.sp "
            f"offers {allowed[kind]})"
        )
    return accumulate


def _check_options(accumulate: str, saturate: object, tf32_inputs: object) -> None:
    """Reject options that would otherwise be ignored for these inputs."""
    if tf32_inputs not in TF32_INPUTS:
        raise ValueError(f"tf32_inputs must be one of {TF32_INPUTS}, got {tf32_inputs!r}")
    if not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"saturate={saturate!r} must be a bool")
    if saturate and accumulate != "int32":
        raise ValueError(
            f"saturate=True applies to int32 accumulation only (PTX .satfinite on s32); "
            f"accumulate={accumulate!r} rounds to the float type"
        )


def _round_to_accumulator(exact: np.ndarray, accumulate: str, saturate: bool) -> np.ndarray:
    if accumulate == "int32":
        if saturate:
            return np.clip(exact, -(2**31), 2**31 - 1).astype(np.int32)
        return (exact & 0xFFFFFFFF).astype(np.uint32).view(np.int32)  # two's-complement wrap
    return exact.astype(_ACCUMULATOR_DTYPES[accumulate])


def _check_c(c: np.ndarray | None, shape: tuple[int, int], accumulate: str) -> np.ndarray | None:
    if c is None:
        return None
    c = np.asarray(c)
    dtype = np.dtype(_ACCUMULATOR_DTYPES[accumulate])
    if c.dtype != dtype:
        raise TypeError(f"c has dtype {c.dtype}; accumulate={accumulate!r} needs {dtype}")
    if c.shape != shape:
        raise ValueError(f"c must have shape {shape}, got {c.shape}")
    return c


# ---------------------------------------------------------------------------------------------
# Whole-matrix product
# ---------------------------------------------------------------------------------------------


def _sparse_product(
    values: np.ndarray, positions: np.ndarray, b: np.ndarray, kind: str, tf32_inputs: Tf32Inputs
) -> np.ndarray:
    """Exact ``sum_j values[i, j] * b[column(i, j), :]`` in float64 (int64 for int8).

    ``column(i, j)`` is the dense column the metadata names for kept value ``j`` of row ``i``
    (:func:`_kept_columns`).
    """
    columns = _kept_columns(positions, format_spec(kind).group_size)
    a = _exact_float64(values, kind, tf32_inputs)
    b_exact = _exact_float64(b, kind if b.dtype != np.uint8 else "int8", tf32_inputs)
    return _gathered_product(a, columns, b_exact)


def _kept_columns(positions: np.ndarray, group_size: int) -> np.ndarray:
    """``(rows, kept)`` dense column of every kept value, from the decoded metadata positions."""
    rows, groups = positions.shape[:2]
    if group_size == 4:
        columns = 4 * np.arange(groups)[None, :, None] + positions.astype(np.int64)
    else:  # fp32: one element per pair; slot // 2 is the element
        columns = 2 * np.arange(groups)[None, :, None] + positions[..., :1].astype(np.int64) // 2
    return columns.reshape(rows, -1)


def _gathered_product(a: np.ndarray, columns: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out[i] = sum_j a[i, j] * b[columns[i, j]]``, in blocks of rows so that the gathered
    rows of ``b`` stay small."""
    rows, kept = a.shape
    out = np.zeros((rows, b.shape[1]), dtype=a.dtype)
    block = max(1, 2**22 // max(1, kept * b.shape[1]))
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        gathered = b[columns[start:stop]]  # (block, kept, n): the B rows each value meets
        out[start:stop] = np.einsum("ik,ikn->in", a[start:stop], gathered)
    return out


def mma_sp(
    values: np.ndarray,
    metadata: np.ndarray,
    b: np.ndarray,
    *,
    c: np.ndarray | None = None,
    dtype_kind: str | None = None,
    layout: MetadataLayout = "cutlass_sm80",
    accumulate: Accumulate | None = None,
    saturate: bool = False,
    tf32_inputs: Tf32Inputs = "keep",
) -> np.ndarray:
    """``A @ B (+ C)`` computed from the compressed ``A``, as a sparse tensor core does.

    .. math::

        D_{i,n} = \\sum_{g} \\sum_{s=0}^{1} \\text{values}_{i,2g+s}\\,
                  B_{4g + p_{i,g,s},\\, n} \\; (+\\, C_{i,n})

    where :math:`p_{i,g,s}` is the position the metadata gives for kept value ``s`` of group
    ``g`` (fp32: one value per pair, :math:`B_{2g + p/2}`).

    Parameters
    ----------
    values, metadata : numpy.ndarray
        The compressed ``A`` (``m x k/2`` values and its metadata) from
        :func:`nmsim.formats.compress_2to4`.
    b : numpy.ndarray
        ``(k, n)`` dense operand in the element type of ``values`` (bf16 as uint16 bits;
        int8 ``values`` also accept uint8 ``b``).
    c : numpy.ndarray, optional
        ``(m, n)`` addend in the accumulator dtype.
    dtype_kind : str, optional
        Defaults to the kind implied by ``values.dtype``.
    layout : {"cutlass_sm80", "logical"}
        Metadata word order.
    accumulate : {"fp32", "fp16", "int32"}, optional
        Accumulator type; defaults to "int32" for int8 and "fp32" otherwise. "fp16" is
        allowed for fp16 inputs only (as in PTX).
    saturate : bool
        int32 only (``ValueError`` otherwise): clamp to the int32 range (PTX
        ``.satfinite``) instead of wrapping.
    tf32_inputs : {"keep", "truncate", "round"}
        fp32 only: use the fp32 inputs as they are (default) or reduce both operands to TF32
        first (see :func:`tf32_round`).

    Returns
    -------
    numpy.ndarray
        ``(m, n)`` in the accumulator dtype (float32, float16 or int32).

    Raises
    ------
    TypeError
        Wrong dtypes of ``values``, ``b`` or ``c``.
    ValueError
        Shapes that disagree; invalid metadata; an accumulator PTX does not offer; an
        unknown ``tf32_inputs``; ``saturate=True`` with a float accumulator.

    Notes
    -----
    Time ``O(m k n / 2)``: only kept values are multiplied. Products are exact in float64
    (at most 48 significant bits); the sum is formed in float64 and rounded once, so the result
    is the correctly rounded ``A @ B + C`` whenever the float64 sum is exact, e.g. for
    integer-valued inputs whose partial sums stay below ``2**53``. GPUs accumulate in fp32 (or
    fp16) in their own order; :func:`accumulation_error_bound` bounds the difference. Integer
    accumulation is exact before the final wrap (or saturation) to int32.

    Examples
    --------
    >>> from nmsim.formats.sparse_2to4 import compress_2to4
    >>> a = np.zeros((32, 32), dtype=np.float16); a[:, 0] = 2; a[:, 3] = 3
    >>> values, metadata = compress_2to4(a, dtype_kind="fp16")
    >>> b = np.ones((32, 8), dtype=np.float16)
    >>> mma_sp(values, metadata, b)[0, :3].tolist()
    [5.0, 5.0, 5.0]

    References
    ----------
    PTX ISA, "Warp-level matrix multiply-accumulate with sparse matrix A" (``mma.sp``);
    Mishra et al. 2021, "Accelerating Sparse Deep Neural Networks", Sec. 2.
    """
    kind = dtype_kind_of(values) if dtype_kind is None else dtype_kind
    spec = format_spec(kind)
    values = np.asarray(values)
    if values.dtype != spec.storage_dtype or values.ndim != 2:
        raise TypeError(
            f"values must be a 2-D {spec.storage_dtype} array for {kind}, got "
            f"{values.dtype} with shape {values.shape}"
        )
    accumulate = _check_accumulate(kind, accumulate)
    _check_options(accumulate, saturate, tf32_inputs)
    rows, columns = values.shape[0], 2 * values.shape[1]
    b = _check_b(b, kind, columns)
    c = _check_c(c, (rows, b.shape[1]), accumulate)
    positions = metadata_to_positions(metadata, dtype_kind=kind, layout=layout)
    if positions.shape[:2] != (rows, columns // spec.group_size):
        raise ValueError(
            f"metadata of shape {np.shape(metadata)} does not describe values {values.shape}"
        )
    exact = _sparse_product(values, positions, b, kind, tf32_inputs)
    if c is not None:
        exact = exact + (c.astype(np.int64) if accumulate == "int32" else c.astype(np.float64))
    return _round_to_accumulator(exact, accumulate, saturate)


def accumulation_error_bound(
    values: np.ndarray,
    metadata: np.ndarray,
    b: np.ndarray,
    *,
    c: np.ndarray | None = None,
    dtype_kind: str | None = None,
    layout: MetadataLayout = "cutlass_sm80",
    accumulate: Accumulate | None = None,
    tf32_inputs: Tf32Inputs = "keep",
) -> np.ndarray:
    """Elementwise bound on ``|D_gpu - mma_sp(...)|`` for floating-point accumulators.

    With ``t`` = number of kept products per row (``k/2``) plus one for ``C``, and ``u`` the
    step error (``2**-22`` for fp32, ``2**-9`` for fp16, i.e. twice the accumulator's
    truncation error):

    .. math::

        |D_{gpu} - D| \\le t\\,u \\sum_j |a_j b_j| + t\\,u\\,|C| + \\tfrac12\\,\\mathrm{ulp}(D)

    It holds for any summation order and grouping when products are exact and every addition
    loses at most ``u`` times the magnitude of the largest addend it sees: sequential adders
    that round or truncate, and multi-term adders that align addends to the block's largest
    exponent and truncate (the behaviour Fasi et al. 2021, "Numerical behavior of NVIDIA
    tensor cores", PeerJ Comput. Sci. 7:e330, report for V100/T4/A100 [not re-measured here]).
    It is a safety bound, not a model: bit-accurate models of specific GPUs exist (Khattak and
    Mikaitis 2025, arXiv 2512.07004) and are not implemented here. It does not cover the TF32
    input reduction: pass the same ``tf32_inputs`` the GPU used.
    """
    kind = dtype_kind_of(values) if dtype_kind is None else dtype_kind
    accumulate = _check_accumulate(kind, accumulate)
    if accumulate == "int32":
        raise ValueError("integer accumulation is exact: the bound is 0")
    _check_options(accumulate, False, tf32_inputs)
    spec = format_spec(kind)
    b = _check_b(b, kind, 2 * np.shape(values)[1])
    positions = metadata_to_positions(metadata, dtype_kind=kind, layout=layout)
    magnitude_values = np.abs(_exact_float64(np.asarray(values), kind, tf32_inputs))
    magnitude_b = np.abs(_exact_float64(b, kind, tf32_inputs))
    # |a| |b| summed through the same gather as the product itself.
    absolute = _gathered_product(
        magnitude_values, _kept_columns(positions, spec.group_size), magnitude_b
    )
    terms = np.shape(values)[1] + 1
    step = _STEP_ERROR[accumulate]
    bound = terms * step * absolute
    result = mma_sp(
        values, metadata, b, c=c, dtype_kind=kind, layout=layout, accumulate=accumulate,  # type: ignore[arg-type]
        tf32_inputs=tf32_inputs,
    ).astype(np.float64)  # fmt: skip
    if c is not None:
        bound = bound + terms * step * np.abs(np.asarray(c, dtype=np.float64))
    ulp = np.spacing(np.abs(result).astype(_ACCUMULATOR_DTYPES[accumulate])).astype(np.float64)
    return bound + ulp / 2


# ---------------------------------------------------------------------------------------------
# One warp: PTX mma.sp.sync.aligned.m16n8k{16,32} with .f16 / .bf16 inputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarpFragments:
    """The registers of the 32 lanes for one ``mma.sp`` (element views, lane-major).

    Attributes
    ----------
    a : numpy.ndarray
        ``(32, K/4)`` kept ``A`` elements per lane (``a0, a1, ...``; 2 per ``.b32`` register).
    b : numpy.ndarray
        ``(32, K/4)`` ``B`` elements per lane (``b0, b1, ...``).
    c : numpy.ndarray
        ``(32, 4)`` accumulator elements per lane (``c0..c3``).
    e : numpy.ndarray
        ``(32,)`` ``uint32`` metadata register per lane; only the lanes the sparsity selector
        names are read.
    """

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    e: np.ndarray


def _warp_k(shape: str) -> int:
    if shape not in WARP_SHAPES:
        raise ValueError(f"shape must be one of {WARP_SHAPES}, got {shape!r}")
    return 16 if shape == "m16n8k16" else 32


def _check_selector(shape: str, selector: int) -> None:
    allowed = range(4) if shape == "m16n8k16" else range(2)
    if selector not in allowed:
        raise ValueError(
            f"sparsity selector {selector} is not allowed for {shape} (PTX allows {list(allowed)})"
        )


def fragment_coordinates(shape: WarpShape) -> dict[str, np.ndarray]:
    """Where each lane's fragment elements sit in the tiles, per the PTX ISA figures.

    Returns ``{"a": (32, K/4, 2), "b": (32, K/4, 2), "c": (32, 4, 2)}`` arrays of
    ``(row, column)``: ``a`` in the compressed ``16 x K/2`` tile, ``b`` in the ``K x 8`` tile,
    ``c`` in the ``16 x 8`` accumulator. With ``group = lane // 4`` and
    ``thread = lane % 4``:

    * ``a_i``: row ``group + 8 * ((i // 2) % 2)``, column ``2 * thread + i % 2 + 8 * (i // 4)``;
    * ``b_i``: row ``2 * thread + i % 2 + 8 * (i // 2)``, column ``group``;
    * ``c_i``: row ``group + 8 * (i // 2)``, column ``2 * thread + i % 2``.
    """
    k = _warp_k(shape)
    lane = np.arange(WARP_SIZE)[:, None]
    group, thread = lane // 4, lane % 4
    i = np.arange(k // 4)[None, :]
    a = np.stack(
        np.broadcast_arrays(group + 8 * ((i // 2) % 2), 2 * thread + i % 2 + 8 * (i // 4)), -1
    )
    b = np.stack(np.broadcast_arrays(2 * thread + i % 2 + 8 * (i // 2), group + 0 * i), -1)
    j = np.arange(4)[None, :]
    c = np.stack(np.broadcast_arrays(group + 8 * (j // 2), 2 * thread + j % 2), -1)
    return {"a": a, "b": b, "c": c}


def metadata_lanes(shape: WarpShape, selector: int = 0) -> np.ndarray:
    """The lanes whose ``e`` register the instruction reads (8 for k16, 16 for k32)."""
    _warp_k(shape)
    _check_selector(shape, selector)
    group = np.arange(8)[:, None]
    if shape == "m16n8k16":
        return (4 * group + selector).ravel()
    return (4 * group + 2 * selector + np.arange(2)[None, :]).ravel()


def load_warp_fragments(
    values_tile: np.ndarray,
    metadata_words_tile: np.ndarray,
    b_tile: np.ndarray,
    c_tile: np.ndarray,
    *,
    shape: WarpShape,
    selector: int = 0,
) -> WarpFragments:
    """Distribute one tile over the 32 lanes' registers (what a kernel's loads must produce).

    Parameters
    ----------
    values_tile : numpy.ndarray
        ``(16, K/2)`` compressed ``A`` (float16, or uint16 bf16 bits).
    metadata_words_tile : numpy.ndarray
        ``(16, K/16)`` logical int16 metadata words of the tile (row-major, not reordered).
    b_tile, c_tile : numpy.ndarray
        ``(K, 8)`` and ``(16, 8)``.
    shape : {"m16n8k16", "m16n8k32"}
    selector : int
        Sparsity selector: which lanes of each group of 4 carry metadata (0..3 for k16,
        0..1 for k32). The other lanes' ``e`` are set to ``0xFFFFFFFF``, which the
        instruction must ignore.

    Notes
    -----
    Lane ``4 g + s`` (k16) or ``4 g + 2 s + p`` (k32, ``p`` = 0, 1) holds in bits 15:0 the
    metadata word of tile row ``g`` for columns ``16 p .. 16 p + 15`` and in bits 31:16 that of
    row ``g + 8`` (PTX ISA sparse ``mma`` metadata figures; LLVM's sm80 integration test
    ``sparse-mma-2-4-f16.mlir`` loads the k32 case the same way).
    """
    k = _warp_k(shape)
    _check_selector(shape, selector)
    values_tile = np.asarray(values_tile)
    if values_tile.shape != (16, k // 2):
        raise ValueError(f"values_tile must have shape (16, {k // 2}) for {shape}")
    words = np.asarray(metadata_words_tile)
    if words.shape != (16, k // 16) or words.dtype.itemsize != 2:
        raise ValueError(f"metadata_words_tile must be (16, {k // 16}) 16-bit words for {shape}")
    b_tile, c_tile = np.asarray(b_tile), np.asarray(c_tile)
    if b_tile.shape != (k, 8) or c_tile.shape != (16, 8):
        raise ValueError(f"b_tile must be ({k}, 8) and c_tile (16, 8) for {shape}")
    where = fragment_coordinates(shape)
    a = values_tile[where["a"][..., 0], where["a"][..., 1]]
    b = b_tile[where["b"][..., 0], where["b"][..., 1]]
    c = c_tile[where["c"][..., 0], where["c"][..., 1]]
    unsigned = words.view(np.uint16).astype(np.uint32)
    e = np.full(WARP_SIZE, 0xFFFFFFFF, dtype=np.uint32)
    for lane in metadata_lanes(shape, selector):
        group, pair = lane // 4, (lane % 4) - (2 * selector if shape == "m16n8k32" else selector)
        e[lane] = unsigned[group, pair] | unsigned[group + 8, pair] << np.uint32(16)
    return WarpFragments(a=a, b=b, c=c, e=e)


def mma_sp_warp(
    fragments: WarpFragments,
    *,
    shape: WarpShape,
    dtype_kind: Literal["fp16", "bf16"],
    selector: int = 0,
    accumulate: Literal["fp32", "fp16"] = "fp32",
) -> np.ndarray:
    """Emulate ``mma.sp.sync.aligned.{shape}.row.col`` on the lanes' registers; returns ``d``.

    Rebuilds the compressed ``A`` tile from the ``a`` fragments and the metadata from the
    ``e`` registers of the lanes :func:`metadata_lanes` names (all other ``e`` are ignored),
    ``B`` and ``C`` from their fragments, and returns the ``(32, 4)`` ``d`` fragments of
    ``A @ B + C`` computed as in :func:`mma_sp` (exact products, one rounding).

    Raises ``ValueError`` for a metadata nibble PTX calls invalid (undefined behaviour on
    hardware), for selectors or accumulators the shape does not offer and for fragments of
    the wrong shape; ``TypeError`` for fragments whose dtype is not the element (``a``,
    ``b``), accumulator (``c``) or ``uint32`` (``e``) type: registers hold bits, nothing is
    cast.
    """
    k = _warp_k(shape)
    _check_selector(shape, selector)
    if dtype_kind not in ("fp16", "bf16"):
        raise ValueError(f"mma_sp_warp emulates fp16/bf16 inputs only, got {dtype_kind!r}")
    accumulate = _check_accumulate(dtype_kind, accumulate)  # type: ignore[assignment]
    spec = format_spec(dtype_kind)
    # Registers hold bits: a fragment of another type would be cast numerically below.
    expected = {
        "a": (spec.storage_dtype, (WARP_SIZE, k // 4), dtype_kind),
        "b": (spec.storage_dtype, (WARP_SIZE, k // 4), dtype_kind),
        "c": (
            np.dtype(_ACCUMULATOR_DTYPES[accumulate]),
            (WARP_SIZE, 4),
            f"accumulate={accumulate!r}",
        ),
        "e": (np.dtype(np.uint32), (WARP_SIZE,), "the metadata register"),
    }
    for name, (dtype, shape_expected, rule) in expected.items():
        array = np.asarray(getattr(fragments, name))
        if array.dtype != dtype:
            raise TypeError(f"fragments.{name} has dtype {array.dtype}; {rule} needs {dtype}")
        if array.shape != shape_expected:
            raise ValueError(f"fragments.{name} must have shape {shape_expected} for {shape}")
    where = fragment_coordinates(shape)
    a_tile = np.zeros((16, k // 2), dtype=spec.storage_dtype)
    a_tile[where["a"][..., 0], where["a"][..., 1]] = fragments.a
    b_tile = np.zeros((k, 8), dtype=spec.storage_dtype)
    b_tile[where["b"][..., 0], where["b"][..., 1]] = fragments.b
    c_tile = np.zeros((16, 8), dtype=_ACCUMULATOR_DTYPES[accumulate])
    c_tile[where["c"][..., 0], where["c"][..., 1]] = fragments.c

    words = np.zeros((16, k // 16), dtype=np.uint16)
    for lane in metadata_lanes(shape, selector):
        group, pair = lane // 4, (lane % 4) - (2 * selector if shape == "m16n8k32" else selector)
        register = int(fragments.e[lane])
        words[group, pair] = register & 0xFFFF
        words[group + 8, pair] = register >> 16
    d_tile = mma_sp(
        a_tile, words.view(np.int16), b_tile, c=c_tile, dtype_kind=dtype_kind,
        layout="logical", accumulate=accumulate,
    )  # fmt: skip
    return d_tile[where["c"][..., 0], where["c"][..., 1]]


def metadata_register(
    stored_metadata: np.ndarray, *, tile_row: int, tile_k: int, lane: int, selector: int = 0
) -> int:
    """Lane ``lane``'s ``e`` register for ``m16n8k32`` tile ``(tile_row, tile_k)``, read as
    ONE aligned 32-bit word of the sm80-ordered fp16/bf16 metadata.

    The sm80 reordering exists so that this read works: rows ``g`` and ``g + 8`` of a 16-row
    tile land in the same band slot and the 2x2 swizzle makes their words adjacent. Word index
    (in ``uint32`` units of the flat storage)::

        tile_k * m + 32 * (row0 // 32) + 4 * group + 2 * ((row0 // 16) % 2) + pair

    with ``row0 = 16 * tile_row``, ``group = lane // 4``, ``pair = lane % 2``. Only lanes
    ``4 g + 2 selector + pair`` carry metadata; others raise ``ValueError``.
    """
    stored = np.ascontiguousarray(stored_metadata)
    if stored.dtype.itemsize != 2 or stored.ndim != 2:
        raise ValueError("stored_metadata must be the 2-D int16 sm80 metadata of fp16/bf16")
    rows, words = stored.shape
    if rows % 32 or words % 2:
        raise ValueError(
            f"stored_metadata of shape {stored.shape} is not sm80 fp16/bf16 metadata: it needs "
            "rows divisible by 32 and an even number of words per row"
        )
    if not (0 <= tile_row < rows // 16 and 0 <= tile_k < words // 2):
        raise ValueError(
            f"tile (tile_row={tile_row}, tile_k={tile_k}) is outside the matrix: {rows} rows "
            f"({rows // 16} row tiles of 16) and {words // 2} k-tiles of 32 columns"
        )
    if lane not in metadata_lanes("m16n8k32", selector):
        raise ValueError(f"lane {lane} carries no metadata with selector {selector}")
    row0 = 16 * tile_row
    index = tile_k * rows + 32 * (row0 // 32) + 4 * (lane // 4) + 2 * ((row0 // 16) % 2) + lane % 2
    return int(stored.view(np.uint16).reshape(-1).view(np.uint32)[index])


def mma_sp_tiled(
    values: np.ndarray,
    metadata: np.ndarray,
    b: np.ndarray,
    *,
    c: np.ndarray | None = None,
    dtype_kind: Literal["fp16", "bf16"] | None = None,
    accumulate: Literal["fp32", "fp16"] = "fp32",
    selector: int = 0,
) -> np.ndarray:
    """Whole ``A @ B (+ C)`` through :func:`mma_sp_warp`, one ``m16n8k32`` tile at a time.

    ``metadata`` must be in the ``cutlass_sm80`` layout: each metadata lane's register is read
    with :func:`metadata_register` (one 32-bit word), the way a CUTLASS kernel loads it. Tiles
    along ``k`` accumulate in order, each rounding to the accumulator (as chained ``mma``
    instructions do), so the result can differ from :func:`mma_sp` by the rounding of the
    partial sums; on integer-valued inputs the two are equal. Pure Python over tiles: for
    tests and teaching, ``O(m n k / 512)`` warp emulations.
    """
    kind = dtype_kind_of(values) if dtype_kind is None else dtype_kind
    if kind not in ("fp16", "bf16"):
        raise ValueError(f"mma_sp_tiled emulates fp16/bf16 inputs only, got {kind!r}")
    values = np.asarray(values)
    rows, columns = values.shape[0], 2 * values.shape[1]
    b = _check_b(b, kind, columns)
    n = b.shape[1]
    if rows % 32 or columns % 32 or n % 8:
        raise ValueError(
            f"mma_sp_tiled needs m % 32 == 0, k % 32 == 0 and n % 8 == 0; got m={rows}, "
            f"k={columns}, n={n}"
        )
    accumulator = np.dtype(_ACCUMULATOR_DTYPES[_check_accumulate(kind, accumulate)])
    c = _check_c(c, (rows, n), accumulate)
    d = np.zeros((rows, n), dtype=accumulator) if c is None else c.copy()
    logical = unreorder_metadata(np.asarray(metadata), kind)
    unpack_nibbles(logical, kind)  # validates the word dtype
    where = fragment_coordinates("m16n8k32")
    for tile_row in range(rows // 16):
        r = slice(16 * tile_row, 16 * tile_row + 16)
        for tile_n in range(n // 8):
            cols = slice(8 * tile_n, 8 * tile_n + 8)
            for tile_k in range(columns // 32):
                fragments = load_warp_fragments(
                    values[r, 16 * tile_k : 16 * tile_k + 16],
                    logical[r, 2 * tile_k : 2 * tile_k + 2],
                    b[32 * tile_k : 32 * tile_k + 32, cols],
                    d[r, cols],
                    shape="m16n8k32",
                    selector=selector,
                )
                e = fragments.e.copy()
                for lane in metadata_lanes("m16n8k32", selector):
                    e[lane] = metadata_register(
                        metadata, tile_row=tile_row, tile_k=tile_k, lane=lane, selector=selector
                    )
                fragments = WarpFragments(a=fragments.a, b=fragments.b, c=fragments.c, e=e)
                out = mma_sp_warp(
                    fragments, shape="m16n8k32", dtype_kind=kind, selector=selector,
                    accumulate=accumulate,
                )  # fmt: skip
                d[r, cols][where["c"][..., 0], where["c"][..., 1]] = out
    return d


__all__ = [
    "ACCUMULATE",
    "TF32_INPUTS",
    "WARP_SHAPES",
    "WarpFragments",
    "accumulation_error_bound",
    "fragment_coordinates",
    "load_warp_fragments",
    "metadata_lanes",
    "metadata_register",
    "mma_sp",
    "mma_sp_tiled",
    "mma_sp_warp",
    "tf32_round",
]
