"""Tests for ``nmsim.formats.mma``: sparse MMA equals the masked dense product (specs/formats.md)."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmsim.formats import mma
from nmsim.formats.mma import (
    WarpFragments,
    accumulation_error_bound,
    fragment_coordinates,
    load_warp_fragments,
    metadata_lanes,
    metadata_register,
    mma_sp,
    mma_sp_tiled,
    mma_sp_warp,
    tf32_round,
)
from nmsim.formats.sparse_2to4 import (
    DTYPE_KINDS,
    METADATA_LAYOUTS,
    bf16_bits_to_float32,
    compress_2to4,
    float32_to_bf16_bits,
    format_spec,
    nonzero_mask,
    pack_nibbles,
    unreorder_metadata,
)
from tests.format_cases import random_sparse

# ---------------------------------------------------------------------------------------------
# Helpers: integer-valued operands of every kind, and an independent dense reference
# ---------------------------------------------------------------------------------------------


def encode(integers: np.ndarray, kind: str) -> np.ndarray:
    """Small integers stored in the element type of ``kind`` (exactly representable)."""
    if kind == "bf16":
        return float32_to_bf16_bits(integers.astype(np.float32))
    return integers.astype(format_spec(kind).storage_dtype)


def decode(stored: np.ndarray, kind: str) -> np.ndarray:
    """Exact float64 (int64 for int8) values of stored elements."""
    if kind == "bf16":
        return bf16_bits_to_float32(stored).astype(np.float64)
    if kind == "int8" or stored.dtype == np.uint8:
        return stored.astype(np.int64)
    return stored.astype(np.float64)


def integer_operands(
    rng: np.random.Generator, kind: str, m: int, k: int, n: int, fill: float = 0.8
) -> tuple[np.ndarray, np.ndarray]:
    """A valid 2:4 ``a`` and a dense ``b``, integer-valued, in the element type of ``kind``."""
    pattern = nonzero_mask(random_sparse(rng, kind, (m, k), fill=fill), kind)
    low, high = (-128, 128) if kind == "int8" else (-16, 17)
    integers = rng.integers(low, high, size=(m, k))
    integers[integers == 0] = 1
    a = encode(np.where(pattern, integers, 0), kind)
    b = encode(rng.integers(low, high, size=(k, n)), kind)
    return a, b


def shape_for(kind: str, row_blocks: int, column_blocks: int) -> tuple[int, int]:
    spec = format_spec(kind)
    return spec.row_multiple * row_blocks, spec.column_multiple * column_blocks


# ---------------------------------------------------------------------------------------------
# Whole-matrix mma_sp
# ---------------------------------------------------------------------------------------------


@given(
    kind=st.sampled_from(DTYPE_KINDS),
    row_blocks=st.integers(1, 2),
    column_blocks=st.integers(1, 3),
    n=st.integers(1, 20),
    layout=st.sampled_from(METADATA_LAYOUTS),
    with_c=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_mma_sp_equals_masked_dense_product_on_integers(
    kind: str, row_blocks: int, column_blocks: int, n: int, layout: str, with_c: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    m, k = shape_for(kind, row_blocks, column_blocks)
    a, b = integer_operands(rng, kind, m, k, n)
    values, metadata = compress_2to4(a, dtype_kind=kind, layout=layout)  # type: ignore[arg-type]
    accumulator = np.int32 if kind == "int8" else np.float32
    c = rng.integers(-1000, 1000, size=(m, n)).astype(accumulator) if with_c else None
    d = mma_sp(values, metadata, b, c=c, layout=layout)  # type: ignore[arg-type]
    expected = decode(a, kind) @ decode(b, kind) + (0 if c is None else c)
    assert d.dtype == accumulator
    np.testing.assert_array_equal(d, expected.astype(accumulator))


def test_fp16_accumulator_on_integers() -> None:
    rng = np.random.default_rng(1)
    a, b = integer_operands(rng, "fp16", 32, 64, 8)
    values, metadata = compress_2to4(a, dtype_kind="fp16")
    d = mma_sp(values, metadata, b, accumulate="fp16")
    assert d.dtype == np.float16
    np.testing.assert_array_equal(d, (decode(a, "fp16") @ decode(b, "fp16")).astype(np.float16))


def test_int8_times_uint8() -> None:
    rng = np.random.default_rng(2)
    a, _ = integer_operands(rng, "int8", 16, 64, 8)
    b = rng.integers(0, 256, size=(64, 8)).astype(np.uint8)
    values, metadata = compress_2to4(a, dtype_kind="int8")
    np.testing.assert_array_equal(
        mma_sp(values, metadata, b), a.astype(np.int64) @ b.astype(np.int64)
    )


def test_int32_wraps_unless_saturating() -> None:
    a = np.zeros((16, 64), dtype=np.int8)
    a[:, 0] = 100
    b = np.full((64, 8), 100, dtype=np.int8)
    values, metadata = compress_2to4(a, dtype_kind="int8")
    c = np.full((16, 8), 2**31 - 5000, dtype=np.int32)
    wrapped = mma_sp(values, metadata, b, c=c)
    assert wrapped[0, 0] == 2**31 - 5000 + 10000 - 2**32
    assert mma_sp(values, metadata, b, c=c, saturate=True)[0, 0] == 2**31 - 1


def test_random_floats_are_correctly_rounded() -> None:
    """Against math.fsum of the exact products (an independent summation)."""
    rng = np.random.default_rng(3)
    a = random_sparse(rng, "fp16", (32, 64), fill=0.9)
    a = np.where(np.isfinite(a), a, np.float16(1))
    b = rng.standard_normal((64, 4)).astype(np.float16)
    values, metadata = compress_2to4(a, dtype_kind="fp16")
    d = mma_sp(values, metadata, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for i in range(32):
        for j in range(4):
            exact = math.fsum(a64[i] * b64[:, j])
            assert abs(float(d[i, j]) - exact) <= np.spacing(np.float32(abs(exact))), (i, j)


def truncating_fp32_sum(products: np.ndarray) -> np.float32:
    """A deliberately different accumulation: left to right, rounding toward zero in fp32."""
    total = 0.0
    for product in products:
        exact = total + float(product)
        rounded = float(np.float32(exact))
        if abs(rounded) > abs(exact):  # step back one ulp toward zero
            rounded = float(np.nextafter(np.float32(rounded), np.float32(0)))
        total = rounded
    return np.float32(total)


def test_error_bound_covers_a_truncating_sequential_accumulator() -> None:
    rng = np.random.default_rng(4)
    a = random_sparse(rng, "bf16", (32, 64), fill=1.0, bf16_nans=False)
    finite = np.isfinite(bf16_bits_to_float32(a)) & (np.abs(bf16_bits_to_float32(a)) < 1e4)
    a = np.where(finite, a, np.uint16(0x3F80))
    b = float32_to_bf16_bits(rng.standard_normal((64, 3)).astype(np.float32))
    values, metadata = compress_2to4(a, dtype_kind="bf16")
    d = mma_sp(values, metadata, b).astype(np.float64)
    bound = accumulation_error_bound(values, metadata, b)
    a64, b64 = decode(a, "bf16"), decode(b, "bf16")
    for i in range(32):
        for j in range(3):
            order = rng.permutation(64)
            gpu_like = truncating_fp32_sum((a64[i] * b64[:, j])[order])
            assert abs(float(gpu_like) - d[i, j]) <= bound[i, j]
    assert (bound > 0).all()


def test_checker_power_wrong_layout_gives_wrong_products() -> None:
    rng = np.random.default_rng(5)
    a, b = integer_operands(rng, "fp16", 64, 64, 8, fill=1.0)
    values, metadata = compress_2to4(a, dtype_kind="fp16")
    right = mma_sp(values, metadata, b)
    try:
        wrong = mma_sp(values, metadata, b, layout="logical")
    except ValueError:
        return  # decoding the sm80 words as logical hit an invalid nibble: also detected
    assert not np.array_equal(wrong, right)


def test_tf32_inputs() -> None:
    x = np.array(
        [1 + 2**-11 + 2**-20, 1 + 2**-11, -(1 + 2**-11), 1 + 2**-12, np.inf], dtype=np.float32
    )
    assert tf32_round(x, "truncate").tolist() == [1.0, 1.0, -1.0, 1.0, np.inf]
    assert tf32_round(x, "round").tolist()[:4] == [1 + 2**-10, 1 + 2**-10, -(1 + 2**-10), 1.0]
    rng = np.random.default_rng(6)
    a = np.where(rng.random((32, 16)) < 0.5, rng.standard_normal((32, 16)), 0).astype(np.float32)
    a[:, 1::2] = np.where(a[:, 0::2] != 0, 0, a[:, 1::2])
    b = rng.standard_normal((16, 4)).astype(np.float32)
    values, metadata = compress_2to4(a, dtype_kind="fp32")
    for mode in ("truncate", "round"):
        d = mma_sp(values, metadata, b, tf32_inputs=mode)  # type: ignore[arg-type]
        expected = tf32_round(a, mode).astype(np.float64) @ tf32_round(b, mode).astype(np.float64)
        np.testing.assert_array_equal(d, expected.astype(np.float32))


def test_mma_sp_errors() -> None:
    a = np.zeros((32, 32), dtype=np.float16)
    values, metadata = compress_2to4(a, dtype_kind="fp16")
    with pytest.raises(TypeError, match="b has dtype float32"):
        mma_sp(values, metadata, np.zeros((32, 8), dtype=np.float32))
    with pytest.raises(
        ValueError, match=r"b must have shape \(32, n\) to multiply A, which has 32 c"
    ):
        mma_sp(values, metadata, np.zeros((16, 8), dtype=np.float16))
    with pytest.raises(ValueError, match="not available for bf16"):
        mma_sp(values.view(np.uint16), metadata, np.zeros((32, 8), np.uint16), accumulate="fp16")
    with pytest.raises(ValueError, match="not available for fp16"):
        mma_sp(values, metadata, np.zeros((32, 8), dtype=np.float16), accumulate="int32")
    with pytest.raises(TypeError, match="c has dtype float16"):
        mma_sp(values, metadata, np.zeros((32, 8), np.float16), c=np.zeros((32, 8), np.float16))
    bad = metadata.copy()
    bad[0, 0] = 0  # nibble 0x0: invalid
    with pytest.raises(ValueError, match="invalid"):
        mma_sp(values, bad, np.zeros((32, 8), dtype=np.float16))
    with pytest.raises(ValueError, match="exact"):
        accumulation_error_bound(
            np.zeros((16, 32), np.int8), np.zeros((16, 2), np.int32), np.zeros((64, 8), np.int8)
        )


# ---------------------------------------------------------------------------------------------
# One warp
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["m16n8k16", "m16n8k32"])
def test_fragment_coordinates_cover_each_tile_once(shape: str) -> None:
    k = 16 if shape == "m16n8k16" else 32
    where = fragment_coordinates(shape)  # type: ignore[arg-type]
    for name, tile_shape in {"a": (16, k // 2), "b": (k, 8), "c": (16, 8)}.items():
        cells = where[name].reshape(-1, 2)
        assert len({tuple(cell) for cell in cells.tolist()}) == tile_shape[0] * tile_shape[1]
        assert cells[:, 0].max() == tile_shape[0] - 1 and cells[:, 1].max() == tile_shape[1] - 1


def test_fragment_coordinates_literal_lanes() -> None:
    where = fragment_coordinates("m16n8k32")
    # Lane 5: group 1, thread 1.
    assert where["a"][5].tolist() == [
        [1, 2],
        [1, 3],
        [9, 2],
        [9, 3],
        [1, 10],
        [1, 11],
        [9, 10],
        [9, 11],
    ]
    assert where["b"][5].tolist() == [
        [2, 1],
        [3, 1],
        [10, 1],
        [11, 1],
        [18, 1],
        [19, 1],
        [26, 1],
        [27, 1],
    ]
    assert where["c"][5].tolist() == [[1, 2], [1, 3], [9, 2], [9, 3]]


def test_metadata_lanes() -> None:
    assert metadata_lanes("m16n8k16", 0).tolist() == [0, 4, 8, 12, 16, 20, 24, 28]
    assert metadata_lanes("m16n8k16", 3).tolist() == [3, 7, 11, 15, 19, 23, 27, 31]
    assert metadata_lanes("m16n8k32", 1)[:4].tolist() == [2, 3, 6, 7]
    with pytest.raises(ValueError, match="selector 2 is not allowed for m16n8k32"):
        metadata_lanes("m16n8k32", 2)


def warp_tile(rng: np.random.Generator, kind: str, k: int):
    """One 16 x k tile: integer-valued a (2:4), b, c and a's logical compressed form."""
    a, b = integer_operands(rng, kind, 16, k, 8)
    values, words = compress_2to4(a, dtype_kind=kind, layout="logical")  # type: ignore[arg-type]
    c = rng.integers(-50, 50, size=(16, 8)).astype(np.float32)
    return a, b, c, values, words


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
@pytest.mark.parametrize(("shape", "selectors"), [("m16n8k16", range(4)), ("m16n8k32", range(2))])
def test_warp_mma_equals_tile_product(kind: str, shape: str, selectors: range) -> None:
    rng = np.random.default_rng(8)
    k = 16 if shape == "m16n8k16" else 32
    a, b, c, values, words = warp_tile(rng, kind, k)
    expected = (decode(a, kind) @ decode(b, kind) + c).astype(np.float32)
    where = fragment_coordinates(shape)  # type: ignore[arg-type]
    for selector in selectors:
        fragments = load_warp_fragments(values, words, b, c, shape=shape, selector=selector)  # type: ignore[arg-type]
        d = mma_sp_warp(fragments, shape=shape, dtype_kind=kind, selector=selector)  # type: ignore[arg-type]
        tile = np.zeros((16, 8), dtype=np.float32)
        tile[where["c"][..., 0], where["c"][..., 1]] = d
        np.testing.assert_array_equal(tile, expected)


def test_warp_ignores_metadata_of_unselected_lanes_and_reads_selected_ones() -> None:
    rng = np.random.default_rng(9)
    _, b, c, values, words = warp_tile(rng, "fp16", 32)
    fragments = load_warp_fragments(values, words, b, c, shape="m16n8k32", selector=1)
    reference = mma_sp_warp(fragments, shape="m16n8k32", dtype_kind="fp16", selector=1)
    e = fragments.e.copy()
    unselected = np.setdiff1d(np.arange(32), metadata_lanes("m16n8k32", 1))
    e[unselected] = rng.integers(0, 2**32, size=unselected.size, dtype=np.uint64).astype(np.uint32)
    shuffled = WarpFragments(a=fragments.a, b=fragments.b, c=fragments.c, e=e)
    np.testing.assert_array_equal(
        mma_sp_warp(shuffled, shape="m16n8k32", dtype_kind="fp16", selector=1), reference
    )
    # The same registers read with the other selector hit the 0xFFFFFFFF filler: invalid.
    with pytest.raises(ValueError, match="invalid"):
        mma_sp_warp(fragments, shape="m16n8k32", dtype_kind="fp16", selector=0)


def test_warp_metadata_register_literal() -> None:
    """Lane 4g holds row g's word in bits 15:0 and row g+8's in bits 31:16."""
    words = np.zeros((16, 2), dtype=np.uint16)
    words[:, 0] = 0x4444
    words[:, 1] = 0xEEEE
    words[3, 0], words[11, 0] = 0x8888, 0xDDDD
    b = np.zeros((32, 8), dtype=np.float16)
    fragments = load_warp_fragments(
        np.zeros((16, 16), np.float16), words.view(np.int16), b, np.zeros((16, 8), np.float32),
        shape="m16n8k32",
    )  # fmt: skip
    assert hex(int(fragments.e[12])) == "0xdddd8888"  # lane 12: group 3, first of the pair
    assert hex(int(fragments.e[13])) == "0xeeeeeeee"  # lane 13: columns 16..31
    assert int(fragments.e[14]) == 0xFFFFFFFF  # not a metadata lane with selector 0


@pytest.mark.parametrize("rows", [32, 64, 96])
def test_sm80_storage_gives_each_lane_one_word(rows: int) -> None:
    """metadata_register (one 32-bit read of the sm80 storage) == the PTX lane layout."""
    rng = np.random.default_rng(rows)
    a = random_sparse(rng, "fp16", (rows, 96), fill=0.7)
    _, stored = compress_2to4(a, dtype_kind="fp16")
    logical = unreorder_metadata(stored, "fp16")
    for tile_row in range(rows // 16):
        for tile_k in range(3):
            fragments = load_warp_fragments(
                np.zeros((16, 16), np.float16),
                logical[16 * tile_row : 16 * tile_row + 16, 2 * tile_k : 2 * tile_k + 2],
                np.zeros((32, 8), np.float16),
                np.zeros((16, 8), np.float32),
                shape="m16n8k32",
            )
            for lane in metadata_lanes("m16n8k32", 0):
                register = metadata_register(stored, tile_row=tile_row, tile_k=tile_k, lane=lane)
                assert register == int(fragments.e[lane]), (tile_row, tile_k, lane)


def test_metadata_register_rejects_lanes_without_metadata() -> None:
    stored = np.zeros((32, 2), dtype=np.int16)
    with pytest.raises(ValueError, match="lane 2 carries no metadata"):
        metadata_register(stored, tile_row=0, tile_k=0, lane=2)


def test_metadata_register_rejects_tiles_outside_the_matrix() -> None:
    """Regression: tile_row=-1 wrapped around through a negative index and returned another
    tile's word; tile_k past the end raised a bare IndexError."""
    stored = np.zeros((32, 2), dtype=np.int16)
    for tile_row, tile_k in [(-1, 0), (2, 0), (0, -1), (0, 1)]:
        with pytest.raises(
            ValueError, match=r"tile \(tile_row=.*\) is outside the matrix: 32 rows"
        ):
            metadata_register(stored, tile_row=tile_row, tile_k=tile_k, lane=0)
    with pytest.raises(ValueError, match="rows divisible by 32 and an even number of words"):
        metadata_register(np.zeros((16, 2), dtype=np.int16), tile_row=0, tile_k=0, lane=0)


@pytest.mark.parametrize("kind", ["fp16", "bf16"])
def test_tiled_equals_whole_matrix_on_integers(kind: str) -> None:
    rng = np.random.default_rng(10)
    a, b = integer_operands(rng, kind, 64, 64, 16)
    values, metadata = compress_2to4(a, dtype_kind=kind)
    c = rng.integers(-9, 9, size=(64, 16)).astype(np.float32)
    np.testing.assert_array_equal(
        mma_sp_tiled(values, metadata, b, c=c), mma_sp(values, metadata, b, c=c)
    )


def test_tiled_floats_within_bound() -> None:
    rng = np.random.default_rng(11)
    a = random_sparse(rng, "fp16", (32, 128), fill=1.0)
    a = np.where(np.isfinite(a) & (np.abs(a) < 100), a, np.float16(0.5))
    b = rng.standard_normal((128, 8)).astype(np.float16)
    values, metadata = compress_2to4(a, dtype_kind="fp16")
    whole = mma_sp(values, metadata, b).astype(np.float64)
    tiled = mma_sp_tiled(values, metadata, b).astype(np.float64)
    assert (np.abs(tiled - whole) <= accumulation_error_bound(values, metadata, b)).all()


def test_warp_errors() -> None:
    zeros = np.zeros((16, 16), np.float16)
    with pytest.raises(ValueError, match="shape must be one of"):
        fragment_coordinates("m16n8k8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"values_tile must have shape \(16, 8\)"):
        load_warp_fragments(
            zeros,
            np.zeros((16, 1), np.int16),
            np.zeros((16, 8)),
            np.zeros((16, 8)),
            shape="m16n8k16",
        )
    fragments = load_warp_fragments(
        zeros, pack_nibbles(np.full((16, 8), 0x4, np.uint8), "fp16"),
        np.zeros((32, 8), np.float16), np.zeros((16, 8), np.float32), shape="m16n8k32",
    )  # fmt: skip
    with pytest.raises(ValueError, match="fp16/bf16 inputs only"):
        mma_sp_warp(fragments, shape="m16n8k32", dtype_kind="int8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="m % 32 == 0"):
        mma_sp_tiled(
            np.zeros((32, 16), np.float16),
            np.zeros((32, 2), np.int16),
            np.zeros((32, 4), np.float16),
        )


def test_doctests() -> None:
    result = doctest.testmod(mma, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_pipeline_from_nmref_mask() -> None:
    """nmref masks a dense weight; nmsim compresses it; mma_sp equals the masked matmul."""
    import nmref

    rng = np.random.default_rng(12)
    weights = rng.integers(-20, 21, size=(64, 128)).astype(np.float16)
    mask = nmref.magnitude_mask(weights, 2, 4)
    pruned = np.where(mask, weights, np.float16(0))
    values, metadata = compress_2to4(pruned, dtype_kind="fp16")
    activations = rng.integers(-20, 21, size=(128, 16)).astype(np.float16)
    expected = (weights.astype(np.float64) * mask) @ activations.astype(np.float64)
    np.testing.assert_array_equal(
        mma_sp(values, metadata, activations), expected.astype(np.float32)
    )


def test_options_that_do_not_apply_are_rejected_not_ignored() -> None:
    """Regression: a misspelt tf32_inputs with fp16 values, or saturate=True with a float
    accumulator, used to be accepted and silently ignored."""
    a = np.zeros((32, 32), dtype=np.float16)
    values, metadata = compress_2to4(a, dtype_kind="fp16")
    b = np.zeros((32, 8), dtype=np.float16)
    with pytest.raises(ValueError, match="tf32_inputs must be one of"):
        mma_sp(values, metadata, b, tf32_inputs="rnd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tf32_inputs must be one of"):
        accumulation_error_bound(values, metadata, b, tf32_inputs="rnd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="saturate=True applies to int32 accumulation only"):
        mma_sp(values, metadata, b, saturate=True)
    with pytest.raises(TypeError, match="saturate=1 must be a bool"):
        mma_sp(values, metadata, b, saturate=1)  # type: ignore[arg-type]


def test_warp_fragments_of_another_type_are_rejected_not_cast() -> None:
    """Regression: bf16 bit patterns (uint16) handed to mma_sp_warp as fp16 were cast
    numerically (0x3F80 became 16256.0) and multiplied without complaint."""
    one_bf16 = np.full((16, 16), 0x3F80, dtype=np.uint16)  # 1.0 in bf16
    words = pack_nibbles(np.full((16, 8), 0x4, np.uint8), "bf16")
    fragments = load_warp_fragments(
        one_bf16, words, np.full((32, 8), 0x3F80, np.uint16), np.zeros((16, 8), np.float32),
        shape="m16n8k32",
    )  # fmt: skip
    assert mma_sp_warp(fragments, shape="m16n8k32", dtype_kind="bf16")[0, 0] == 16.0
    with pytest.raises(TypeError, match=r"fragments\.a has dtype uint16; fp16 needs float16"):
        mma_sp_warp(fragments, shape="m16n8k32", dtype_kind="fp16")
    with pytest.raises(TypeError, match=r"fragments\.c has dtype float32; accumulate='fp16'"):
        mma_sp_warp(
            WarpFragments(a=fragments.a.view(np.float16), b=fragments.b.view(np.float16),
                          c=fragments.c, e=fragments.e),
            shape="m16n8k32", dtype_kind="fp16", accumulate="fp16",
        )  # fmt: skip
