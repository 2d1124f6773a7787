"""Tests for ``nmsim.formats`` against ``specs/formats.md`` (no torch needed here).

The bit-for-bit comparison with PyTorch's converter lives in ``test_formats_torch.py``.
"""

from __future__ import annotations

import doctest
import importlib.resources
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmsim.formats import sparse_2to4 as formats
from nmsim.formats.sparse_2to4 import (
    DTYPE_KINDS,
    bf16_bits_to_float32,
    check_shape,
    compress_2to4,
    compress_2to4_reference,
    decompress_2to4,
    float32_to_bf16_bits,
    format_spec,
    metadata_storage_offset,
    metadata_storage_offsets,
    metadata_to_positions,
    nibble_table,
    nonzero_code,
    pack_nibbles,
    reorder_metadata,
    unpack_nibbles,
    unreorder_metadata,
)
from tests.format_cases import (
    aligned_shape,
    bits_of,
    nonzero_of,
    random_elements,
    random_sparse,
)

GOLDEN = importlib.resources.files("nmref.testing") / "data" / "golden" / "formats_2to4.npz"
SPEC = Path(__file__).resolve().parents[1] / "specs" / "formats.md"

# The six exact 2-of-4 patterns and their nibbles, written out by hand from the PTX rule
# "bits 1:0 = first kept position, bits 3:2 = second" (not read from the data file).
EXACT_NIBBLES = {"1100": 0x4, "1010": 0x8, "1001": 0xC, "0110": 0x9, "0101": 0xD, "0011": 0xE}


# ---------------------------------------------------------------------------------------------
# The nibble table (spec section 2)
# ---------------------------------------------------------------------------------------------


def test_nonzero_code_reads_left_to_right() -> None:
    assert nonzero_code("1000") == 1
    assert nonzero_code("0001") == 8
    assert nonzero_code("1111") == 15
    with pytest.raises(ValueError, match="4 characters"):
        nonzero_code("101")


@pytest.mark.parametrize("name", formats.NIBBLE_TABLES)
def test_exact_patterns_encode_as_ptx_defines(name: str) -> None:
    table = nibble_table(name)
    for pattern, nibble in EXACT_NIBBLES.items():
        code = nonzero_code(pattern)
        assert table.nibble[code] == nibble
        assert list(table.kept[code]) == [i for i, flag in enumerate(pattern) if flag == "1"]


@pytest.mark.parametrize("name", formats.NIBBLE_TABLES)
def test_every_nibble_is_two_increasing_positions(name: str) -> None:
    table = nibble_table(name)
    for code in range(16):
        first, second = table.kept[code]
        assert 0 <= first < second <= 3
        assert table.nibble[code] == first | second << 2


@pytest.mark.parametrize("name", formats.NIBBLE_TABLES)
def test_underfull_kept_covers_nonzeros_overfull_kept_subset(name: str) -> None:
    table = nibble_table(name)
    for code in range(16):
        nonzeros = {i for i in range(4) if code >> i & 1}
        kept = set(table.kept[code].tolist())
        if len(nonzeros) <= 2:
            assert nonzeros <= kept
        else:
            assert kept < nonzeros


def test_data_file_case_labels_match_the_patterns() -> None:
    data = formats._format_data()
    for table in data["nibble_tables"].values():
        for entry in table["entries"]:
            count = entry["nonzero"].count("1")
            expected = "exact" if count == 2 else "underfull" if count < 2 else "overfull"
            assert entry["case"] == expected, entry
    for kind, row in data["dtype_kinds"].items():
        assert row["column_multiple"] == 2 * row["dense_columns_per_word"], kind
        assert row["row_multiple"] == row["band_rows"], kind
        assert row["source"], kind


def test_current_table_literal() -> None:
    """All 16 rows of the torch-2.13 table, written out as in specs/formats.md."""
    expected = {
        "0000": 0xE, "0001": 0xE, "0010": 0xE, "0011": 0xE,
        "0100": 0x9, "0101": 0xD, "0110": 0x9, "0111": 0xD,
        "1000": 0x8, "1001": 0xC, "1010": 0x8, "1011": 0xC,
        "1100": 0x4, "1101": 0x4, "1110": 0x4, "1111": 0x4,
    }  # fmt: skip
    table = nibble_table("torch-2.13")
    assert {p: int(table.nibble[nonzero_code(p)]) for p in expected} == expected


def legacy_boolean_encoding(m0: bool, m1: bool, m2: bool, m3: bool) -> tuple[int, int]:
    """The bit expressions of PyTorch's first converter, as documented in specs/formats.md."""
    bit0 = not m0 and m1
    bit1 = not m0 and not m1
    bit2 = bit1 or not m2
    bit3 = bit0 or not m1 or m2
    return int(bit0) | int(bit1) << 1, int(bit2) | int(bit3) << 1


def test_legacy_table_is_the_legacy_boolean_expressions() -> None:
    table = nibble_table("torch-legacy")
    for flags in itertools.product([False, True], repeat=4):
        code = sum(1 << i for i, flag in enumerate(flags) if flag)
        assert tuple(table.kept[code]) == legacy_boolean_encoding(*flags)


def test_legacy_and_current_differ_only_off_the_exact_patterns() -> None:
    current, legacy = nibble_table("torch-2.13"), nibble_table("torch-legacy")
    differing = {
        "".join("1" if code >> i & 1 else "0" for i in range(4))
        for code in range(16)
        if current.nibble[code] != legacy.nibble[code]
    }
    assert differing == {"0100", "1000", "0111", "1011", "1110", "1111"}
    assert not differing & set(EXACT_NIBBLES)


def test_spec_table_matches_data() -> None:
    """Every row of the nibble table in specs/formats.md equals the data file."""
    rows = [
        line.split("|")
        for line in SPEC.read_text("utf-8").splitlines()
        if line.startswith("| `") and line.count("|") == 6
    ]
    assert len(rows) == 16, "specs/formats.md must list all 16 patterns"
    current, legacy = nibble_table("torch-2.13"), nibble_table("torch-legacy")
    for cells in rows:
        pattern = cells[1].strip().strip("`")
        code = nonzero_code(pattern)
        assert int(cells[3].strip().strip("`"), 16) == current.nibble[code], pattern
        assert int(cells[5].strip().strip("`"), 16) == legacy.nibble[code], pattern


@pytest.mark.parametrize("kind", ["fp16", "bf16", "int8"])
def test_all_16_group_patterns(kind: str) -> None:
    """Each of the 16 nonzero patterns gives the table's nibble and values (overfull: drop)."""
    spec = format_spec(kind)
    table = nibble_table("torch-2.13")
    rows, columns = 16, 4 * 16  # 16 groups: one per pattern (logical layout: any row count)
    dense = np.zeros((rows, columns), dtype=spec.storage_dtype)
    one = 0x3F80 if kind == "bf16" else 1
    for code in range(16):
        for i in range(4):
            if code >> i & 1:
                dense[:, 4 * code + i] = one * (i + 1) if kind != "bf16" else one + i
    values, words = compress_2to4(dense, dtype_kind=kind, layout="logical", overfull="drop")
    nibbles = unpack_nibbles(words, kind)
    np.testing.assert_array_equal(nibbles[0], table.nibble)
    for code in range(16):
        first, second = table.kept[code]
        assert values[0, 2 * code] == dense[0, 4 * code + first]
        assert values[0, 2 * code + 1] == dense[0, 4 * code + second]
    valid = [code for code in range(16) if code.bit_count() <= 2]
    back = decompress_2to4(values, words, dtype_kind=kind, layout="logical")
    for code in valid:
        np.testing.assert_array_equal(
            back[:, 4 * code : 4 * code + 4], dense[:, 4 * code : 4 * code + 4]
        )


def test_fp32_pairs_use_the_half_pattern() -> None:
    """A pair (e0, e1) is encoded as the 16-bit half pattern (e0, e0, e1, e1)."""
    dense = np.zeros((32, 16), dtype=np.float32)
    dense[:, 0] = 3.0  # pair 0: only element 0 -> 0x4
    dense[:, 3] = 5.0  # pair 1: only element 1 -> 0xE
    #                   pair 2: empty -> 0xE
    dense[:, 6] = 7.0  # pair 3: element 0 -> 0x4
    values, words = compress_2to4(dense, dtype_kind="fp32", layout="logical")
    assert [hex(n) for n in unpack_nibbles(words, "fp32")[0, :4]] == ["0x4", "0xe", "0xe", "0x4"]
    assert values[0, :4].tolist() == [3.0, 5.0, 0.0, 7.0]


# ---------------------------------------------------------------------------------------------
# Words and the sm80 order (spec sections 3 and 4)
# ---------------------------------------------------------------------------------------------


def test_all_0011_fp16_words_are_minus_4370() -> None:
    dense = np.zeros((32, 64), dtype=np.float16)
    dense[:, 2::4] = 1
    dense[:, 3::4] = 1
    _, metadata = compress_2to4(dense, dtype_kind="fp16")
    assert metadata.dtype == np.int16
    assert (metadata == -4370).all()  # 0xEEEE


def test_first_group_in_lowest_nibble() -> None:
    nibbles = np.array([[0x4, 0x8, 0xC, 0x9, 0xD, 0xE, 0x4, 0x8]], dtype=np.uint8)
    assert int(pack_nibbles(nibbles[:, :4], "fp16")[0, 0]) & 0xFFFF == 0x9C84
    assert int(pack_nibbles(nibbles, "int8")[0, 0]) & 0xFFFFFFFF == 0x84ED9C84
    np.testing.assert_array_equal(unpack_nibbles(pack_nibbles(nibbles, "int8"), "int8"), nibbles)


def storage_order(rows: int, words: int, kind: str) -> list[tuple[int, int]]:
    offsets = metadata_storage_offsets(rows, words, kind)
    order: list[tuple[int, int]] = [(-1, -1)] * offsets.size
    for (row, word), offset in np.ndenumerate(offsets):
        order[offset] = (row, word)
    return order


def test_storage_order_int16_literal() -> None:
    assert storage_order(32, 2, "fp16")[:12] == [
        (0, 0), (8, 0), (0, 1), (8, 1), (16, 0), (24, 0), (16, 1), (24, 1),
        (1, 0), (9, 0), (1, 1), (9, 1),
    ]  # fmt: skip


def test_storage_order_int32_literal() -> None:
    assert storage_order(16, 2, "int8")[:6] == [(0, 0), (8, 0), (0, 1), (8, 1), (1, 0), (9, 0)]


@pytest.mark.parametrize("kind", DTYPE_KINDS)
@pytest.mark.parametrize("blocks", [(1, 1), (2, 3), (3, 2)])
def test_storage_offsets_are_a_permutation_and_match_the_scalar_rule(
    kind: str, blocks: tuple[int, int]
) -> None:
    spec = format_spec(kind)
    rows = spec.band_rows * blocks[0]
    words = 2 * blocks[1]
    offsets = metadata_storage_offsets(rows, words, kind)
    np.testing.assert_array_equal(np.sort(offsets.ravel()), np.arange(rows * words))
    scalar = [
        [metadata_storage_offset(r, w, rows, kind) for w in range(words)] for r in range(rows)
    ]
    np.testing.assert_array_equal(offsets, np.array(scalar))


def test_reorder_round_trip() -> None:
    rng = np.random.default_rng(7)
    words = rng.integers(-(2**15), 2**15, size=(64, 6)).astype(np.int16)
    np.testing.assert_array_equal(
        unreorder_metadata(reorder_metadata(words, "fp16"), "fp16"), words
    )


# ---------------------------------------------------------------------------------------------
# compress / decompress contracts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", DTYPE_KINDS)
@pytest.mark.parametrize("layout", formats.METADATA_LAYOUTS)
def test_reference_equals_vectorised(kind: str, layout: str) -> None:
    rng = np.random.default_rng(11)
    for fill in (1.0, 0.5, 0.0):
        dense = random_sparse(rng, kind, aligned_shape(kind, 1, 2), fill=fill)
        values, metadata = compress_2to4(dense, dtype_kind=kind, layout=layout)
        ref_values, ref_metadata = compress_2to4_reference(dense, dtype_kind=kind, layout=layout)
        np.testing.assert_array_equal(bits_of(values), bits_of(ref_values))
        np.testing.assert_array_equal(metadata, ref_metadata)
        assert metadata.dtype == format_spec(kind).metadata_dtype


@pytest.mark.parametrize("kind", DTYPE_KINDS)
def test_reference_equals_vectorised_overfull_drop(kind: str) -> None:
    rng = np.random.default_rng(12)
    dense = random_elements(rng, kind, aligned_shape(kind, 1, 1))
    for encoding in formats.NIBBLE_TABLES:
        fast = compress_2to4(dense, dtype_kind=kind, overfull="drop", encoding=encoding)
        slow = compress_2to4_reference(dense, dtype_kind=kind, overfull="drop", encoding=encoding)
        np.testing.assert_array_equal(bits_of(fast[0]), bits_of(slow[0]))
        np.testing.assert_array_equal(fast[1], slow[1])


@pytest.mark.slow
@given(
    kind=st.sampled_from(DTYPE_KINDS),
    row_blocks=st.integers(1, 3),
    column_blocks=st.integers(1, 3),
    fill=st.sampled_from([1.0, 0.7, 0.3, 0.0]),
    layout=st.sampled_from(formats.METADATA_LAYOUTS),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_is_bitwise(
    kind: str, row_blocks: int, column_blocks: int, fill: float, layout: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    dense = random_sparse(rng, kind, aligned_shape(kind, row_blocks, column_blocks), fill=fill)
    values, metadata = compress_2to4(dense, dtype_kind=kind, layout=layout)
    spec = format_spec(kind)
    assert values.shape == (dense.shape[0], dense.shape[1] // 2)
    assert metadata.shape == (dense.shape[0], dense.shape[1] // spec.dense_columns_per_word)
    back = decompress_2to4(values, metadata, dtype_kind=kind, layout=layout)
    np.testing.assert_array_equal(bits_of(back), bits_of(dense))


@given(kind=st.sampled_from(["fp16", "bf16", "fp32"]), seed=st.integers(0, 2**32 - 1))
def test_round_trip_negative_zero_only_loses_its_sign(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    dense = random_sparse(rng, kind, aligned_shape(kind, 1, 1), fill=0.6, negative_zeros=True)
    values, metadata = compress_2to4(dense, dtype_kind=kind)
    back = decompress_2to4(values, metadata)
    changed = bits_of(back) != bits_of(dense)
    # Only zeros change, and only from -0.0 to +0.0.
    assert not nonzero_of(dense, kind)[changed].any()
    assert not (bits_of(back)[changed]).any()


def test_logical_layout_allows_any_row_count() -> None:
    rng = np.random.default_rng(3)
    dense = random_sparse(rng, "fp16", (5, 16))
    values, metadata = compress_2to4(dense, dtype_kind="fp16", layout="logical")
    assert metadata.shape == (5, 1)
    np.testing.assert_array_equal(decompress_2to4(values, metadata, layout="logical"), dense)


@pytest.mark.parametrize("kind", DTYPE_KINDS)
def test_cutlass_layout_is_the_reordered_logical_layout(kind: str) -> None:
    rng = np.random.default_rng(5)
    dense = random_sparse(rng, kind, aligned_shape(kind, 2, 2), fill=0.8)
    values_l, logical = compress_2to4(dense, dtype_kind=kind, layout="logical")
    values_c, stored = compress_2to4(dense, dtype_kind=kind)
    np.testing.assert_array_equal(bits_of(values_l), bits_of(values_c))
    np.testing.assert_array_equal(reorder_metadata(logical, kind), stored)


@pytest.mark.parametrize("kind", DTYPE_KINDS)
def test_zero_size(kind: str) -> None:
    spec = format_spec(kind)
    for shape in [(0, spec.column_multiple), (spec.row_multiple, 0)]:
        dense = np.zeros(shape, dtype=spec.storage_dtype)
        values, metadata = compress_2to4(dense, dtype_kind=kind)
        assert values.shape == (shape[0], shape[1] // 2)
        assert metadata.shape == (shape[0], shape[1] // spec.dense_columns_per_word)
        assert decompress_2to4(values, metadata, dtype_kind=kind).shape == shape


# ---------------------------------------------------------------------------------------------
# Errors: no silent wrong answers
# ---------------------------------------------------------------------------------------------


def test_overfull_group_raises_naming_the_group() -> None:
    dense = np.zeros((32, 32), dtype=np.float16)
    dense[3, 20:23] = 1
    with pytest.raises(ValueError, match=r"row 3, columns 20\.\.23 hold 3 nonzeros"):
        compress_2to4(dense, dtype_kind="fp16")
    with pytest.raises(ValueError, match="not 2:4"):
        compress_2to4_reference(dense, dtype_kind="fp16")


def test_overfull_fp32_pair_raises() -> None:
    dense = np.zeros((32, 16), dtype=np.float32)
    dense[0, 4:6] = 1
    with pytest.raises(ValueError, match=r"not 1:2 sparse: row 0, columns 4\.\.5"):
        compress_2to4(dense, dtype_kind="fp32")


def test_overfull_drop_keeps_the_table_positions() -> None:
    dense = np.zeros((32, 32), dtype=np.float16)
    dense[:, 0:4] = [1, 2, 3, 4]  # 1111 -> keep (0, 1)
    values, metadata = compress_2to4(dense, dtype_kind="fp16", overfull="drop")
    assert values[0, :2].tolist() == [1, 2]
    assert decompress_2to4(values, metadata)[0, :4].tolist() == [1, 2, 0, 0]


def test_nan_counts_as_nonzero_and_is_kept_bitwise() -> None:
    dense = np.zeros((32, 32), dtype=np.float16)
    signalling_nan = np.array([0x7C01], dtype=np.uint16).view(np.float16)[0]
    dense[0, 1] = signalling_nan
    dense[0, 2] = np.inf
    values, metadata = compress_2to4(dense, dtype_kind="fp16")
    assert bits_of(values)[0, 0] == 0x7C01
    np.testing.assert_array_equal(bits_of(decompress_2to4(values, metadata)), bits_of(dense))
    dense[0, 3] = np.nan  # three "nonzeros"
    with pytest.raises(ValueError, match="3 nonzeros"):
        compress_2to4(dense, dtype_kind="fp16")


@pytest.mark.parametrize(
    ("kind", "shape", "message"),
    [
        ("fp16", (32, 16), "divisible by 32"),  # torch: "index 32 is out of bounds"
        ("fp16", (32, 48), "divisible by 32"),
        ("fp16", (16, 32), "rows must be divisible by 32"),
        ("fp16", (32, 8), "divisible by 16"),
        ("bf16", (40, 64), "rows must be divisible by 32"),
        ("int8", (16, 32), "divisible by 64"),  # torch: "index 16 is out of bounds"
        ("int8", (8, 64), "rows must be divisible by 16"),
        ("fp32", (32, 8), "divisible by 16"),
    ],
)
def test_misaligned_shapes_raise_clear_errors(
    kind: str, shape: tuple[int, int], message: str
) -> None:
    dense = np.zeros(shape, dtype=format_spec(kind).storage_dtype)
    with pytest.raises(ValueError, match=message):
        compress_2to4(dense, dtype_kind=kind)


def test_check_shape_logical_needs_only_whole_words() -> None:
    check_shape(3, 16, "fp16", "logical")
    check_shape(3, 32, "int8", "logical")
    with pytest.raises(ValueError, match="divisible by 32"):
        check_shape(3, 16, "int8", "logical")


@pytest.mark.parametrize(
    ("kind", "array"),
    [
        ("fp16", np.zeros((32, 32), dtype=np.float32)),
        ("bf16", np.zeros((32, 32), dtype=np.float16)),
        ("fp32", np.zeros((32, 16), dtype=np.float64)),
        ("int8", np.zeros((16, 64), dtype=np.uint8)),
    ],
)
def test_wrong_dtype_is_a_type_error(kind: str, array: np.ndarray) -> None:
    with pytest.raises(TypeError, match="nothing is cast silently"):
        compress_2to4(array, dtype_kind=kind)


@pytest.mark.parametrize(
    "compress", [compress_2to4, compress_2to4_reference], ids=["vectorised", "reference"]
)
def test_bad_arguments(compress: Any) -> None:
    """Both implementations reject the same bad options (the reference used to accept any
    ``overfull`` string as 'drop' and raise KeyError for an unknown encoding)."""
    dense = np.zeros((32, 32), dtype=np.float16)
    with pytest.raises(ValueError, match="dtype_kind must be one of"):
        compress(dense, dtype_kind="fp8")
    with pytest.raises(ValueError, match="layout must be one of"):
        compress(dense, dtype_kind="fp16", layout="sm90")
    with pytest.raises(ValueError, match="overfull must be one of"):
        compress(dense, dtype_kind="fp16", overfull="keep")
    with pytest.raises(ValueError, match="nibble_table must be one of"):
        compress(dense, dtype_kind="fp16", encoding="torch-1.0")
    with pytest.raises(ValueError, match="must be 2-D"):
        compress(np.zeros((2, 32, 32), dtype=np.float16), dtype_kind="fp16")


@pytest.mark.parametrize("nibble", [0x0, 0x5, 0xA, 0xF])
def test_decompress_rejects_ptx_invalid_nibbles(nibble: int) -> None:
    words = np.full((32, 2), 0x4444, dtype=np.uint16)
    words[5, 1] = 0x4404 | nibble << 4
    metadata = reorder_metadata(words.view(np.int16), "fp16")
    with pytest.raises(ValueError, match=rf"nibble {nibble:#x} at row 5, group 5 is invalid"):
        decompress_2to4(np.zeros((32, 16), dtype=np.float16), metadata)


def test_decompress_fp32_accepts_only_0x4_and_0xe() -> None:
    words = np.full((32, 2), 0x4E4E, dtype=np.uint16)
    metadata = reorder_metadata(words.view(np.int16), "fp32")
    decompress_2to4(np.zeros((32, 8), dtype=np.float32), metadata)
    words[0, 0] = 0x4E48
    metadata = reorder_metadata(words.view(np.int16), "fp32")
    with pytest.raises(ValueError, match="needs 0x4 or 0xE"):
        decompress_2to4(np.zeros((32, 8), dtype=np.float32), metadata)


def test_decompress_decodes_decreasing_positions_as_written() -> None:
    words = np.full((32, 1), 0x4444, dtype=np.uint16)
    words[0, 0] = 0x4441  # group 0: first value -> position 1, second -> position 0
    values = np.ones((32, 8), dtype=np.float16)
    values[0, :2] = [5, 6]
    dense = decompress_2to4(values, words.view(np.int16), layout="logical")
    assert dense[0, :4].tolist() == [6, 5, 0, 0]


def test_decompress_shape_mismatch() -> None:
    values = np.zeros((32, 16), dtype=np.float16)
    with pytest.raises(ValueError, match=r"need metadata of shape \(32, 2\)"):
        decompress_2to4(values, np.zeros((32, 3), dtype=np.int16))
    with pytest.raises(TypeError, match="metadata is int16"):
        decompress_2to4(values, np.zeros((32, 2), dtype=np.int32))
    with pytest.raises(TypeError, match="expected float16"):
        decompress_2to4(np.zeros((32, 16), dtype=np.float64), np.zeros((32, 2), dtype=np.int16))


def test_metadata_to_positions_shape() -> None:
    dense = np.zeros((32, 32), dtype=np.float16)
    dense[:, 1::4] = 1
    dense[:, 3::4] = 1
    _, metadata = compress_2to4(dense, dtype_kind="fp16")
    positions = metadata_to_positions(metadata, dtype_kind="fp16")
    assert positions.shape == (32, 8, 2)
    assert (positions[..., 0] == 1).all() and (positions[..., 1] == 3).all()


# ---------------------------------------------------------------------------------------------
# Checker power: plausible wrong formats must differ from the real one
# ---------------------------------------------------------------------------------------------


def test_wrong_variants_are_detected() -> None:
    rows, words = 32, 4
    right = metadata_storage_offsets(rows, words, "fp16")
    row = np.arange(rows)[:, None]
    word = np.arange(words)[None, :]
    interleaved = row // 32 * 32 + (row % 8) * 4 + (row % 32) // 8
    no_swizzle = (word // 2) * 2 * rows + 2 * interleaved + word % 2
    assert not np.array_equal(no_swizzle, right)
    no_interleave = metadata_storage_offsets(rows, words, "int8")  # band 16 instead of 32
    assert not np.array_equal(no_interleave, right)
    nibbles = np.array([[0x4, 0x8, 0xC, 0xE]], dtype=np.uint8)
    high_first = sum(int(n) << (4 * (3 - i)) for i, n in enumerate(nibbles[0]))
    assert int(pack_nibbles(nibbles, "fp16")[0, 0]) & 0xFFFF != high_first


# ---------------------------------------------------------------------------------------------
# bf16 helpers
# ---------------------------------------------------------------------------------------------


def test_bf16_rounding_ties_to_even() -> None:
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -(2**-135), np.inf, 3.4e38], dtype=np.float32)
    bits = float32_to_bf16_bits(x)
    assert [hex(b) for b in bits] == ["0x3f80", "0x3f80", "0x3f82", "0x8000", "0x7f80", "0x7f80"]
    assert float32_to_bf16_bits(np.array([np.nan], dtype=np.float32))[0] == 0x7FC0
    np.testing.assert_array_equal(bf16_bits_to_float32(bits[:3]), [1.0, 1.0, 1 + 2**-6])


# ---------------------------------------------------------------------------------------------
# Golden vectors (produced by PyTorch's converter: scripts/golden/make_formats_2to4.py)
# ---------------------------------------------------------------------------------------------


def test_golden_vectors() -> None:
    golden = np.load(GOLDEN)
    kinds = sorted({name.split("/")[0] for name in golden.files})
    assert kinds == sorted(DTYPE_KINDS)
    for kind in kinds:
        dense = golden[f"{kind}/dense"]
        if kind == "bf16":
            dense = dense.view(np.uint16)
        values, metadata = compress_2to4(dense, dtype_kind=kind, overfull="drop")
        np.testing.assert_array_equal(bits_of(values), bits_of(golden[f"{kind}/values"]))
        np.testing.assert_array_equal(metadata, golden[f"{kind}/metadata"])


def test_doctests() -> None:
    result = doctest.testmod(formats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
