"""compressed-tensors 2:4 checkpoint formats (``specs/checkpoint_formats.md``).

Round trips bit for bit, the plain-Python oracles, every validation rule (each error names the
stored tensor and the first bad group), hostile files, the pinned golden checkpoints, ``nmsim
convert``, ``nmsim report`` on compressed checkpoints, and a cross-check against the code of
an older compressed-tensors release (0.14.x still ships the 2:4 functions; skipped with the
reason when it is not installed; install with ``pip install --no-deps
compressed-tensors==0.14.0``: the check needs only torch and NumPy).
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib.util
import json
import re
import struct
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nmsim.formats import sparse_2to4
from nmsim.formats.compressed_checkpoint import (
    FORMATS,
    SafetensorsFile,
    _safetensors_header,
    config_format,
    convert,
    open_checkpoint,
)
from nmsim.formats.compressed_tensors import (
    STORAGE_DTYPES,
    CheckpointFormatError,
    bitmask_mask_reference,
    decode_bitmask,
    decode_bitmask_reference,
    decode_sparse24,
    default_bitmask_mask,
    encode_bitmask,
    encode_sparse24,
    nonzero_flags,
    sparse24_metadata_offset,
    sparse24_metadata_offsets,
    to_float32,
)
from nmsim.formats.marlin24 import (
    decode_marlin24,
    encode_marlin24,
    marlin24_mask,
    scale_permutation,
    weight_permutation,
)

GOLDEN = Path(__file__).parent / "data" / "checkpoint_formats"
KIND_DTYPE = {"fp16": "F16", "bf16": "BF16", "fp32": "F32", "int8": "I8", "fp8_e4m3": "F8_E4M3"}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def random_bits(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    """Raw bit patterns of every kind, NaN/inf/-0.0 included (any bits are a valid element)."""
    storage = STORAGE_DTYPES[kind]
    raw = rng.integers(0, 256, size=(*shape, storage.itemsize), dtype=np.uint8)
    return raw.view(storage).reshape(shape)


def random_24(
    rng: np.random.Generator, rows: int, cols: int, kind: str, *, per_pair: bool = False
) -> np.ndarray:
    """A 2:4 (``per_pair``: 1:2) weight with under-full groups and stray ``-0.0``."""
    dense = random_bits(rng, (rows, cols), kind)
    if per_pair:
        keep = np.zeros((rows, cols // 2, 2), dtype=bool)
        np.put_along_axis(keep, rng.integers(0, 2, size=(rows, cols // 2, 1)), True, axis=-1)
    else:
        keep = np.zeros((rows, cols // 4, 4), dtype=bool)
        order = np.argsort(rng.random((rows, cols // 4, 4)), axis=-1)[..., :2]
        np.put_along_axis(keep, order, True, axis=-1)
    keep = keep.reshape(rows, cols) & (rng.random((rows, cols)) > 0.2)
    zero = np.zeros(1, dtype=STORAGE_DTYPES[kind])
    negative_zero = zero.copy()
    if kind != "int8":
        unsigned = np.dtype(f"u{zero.itemsize}")
        negative_zero.view(unsigned)[0] = 1 << (8 * zero.itemsize - 1)
    fill = np.where(rng.random((rows, cols)) < 0.1, negative_zero[0], zero[0])
    return np.where(keep, dense, fill)


def bits(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_array_equal(bits(a), bits(b))


def without_unstored_negative_zero(dense: np.ndarray, kind: str, mask: np.ndarray) -> np.ndarray:
    """What decoding gives back: a ``-0.0`` outside the stored positions becomes ``+0.0``."""
    out = dense.copy()
    out[~mask & ~nonzero_flags(dense, kind)] = 0
    return out


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> Path:
    entries = [(name, dtype, array.shape) for name, (dtype, array) in tensors.items()]
    with open(path, "wb") as handle:
        handle.write(_safetensors_header(entries, {}))
        for _, array in tensors.values():
            handle.write(np.ascontiguousarray(array).tobytes())
    return path


def read_all(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    file = SafetensorsFile(path)
    return {name: (entry.dtype, np.array(file.array(name))) for name, entry in file.entries.items()}


# ---------------------------------------------------------------------------------------------
# sparse-24-bitmask: the encoding, by hand and by oracle
# ---------------------------------------------------------------------------------------------


def test_bitmask_bit_order_by_hand() -> None:
    # row: [0 3 0 -1 | 5 0 0 0 | 0 0 0 0]: stored positions 1, 3 | 4 + lowest zero 5 | 8, 9
    dense = np.array([[0, 3, 0, -1, 5, 0, 0, 0, 0, 0, 0, 0]], dtype=np.float16)
    out = encode_bitmask(dense, "fp16")
    # bits LSB first: byte 0 = cols 0-7 -> 0b00111010, byte 1 = cols 8-11 -> 0b0011, 4 pad bits
    assert out["bitmask"].tolist() == [[0b00111010, 0b00000011]]
    assert out["bitmask"].dtype == np.uint8
    assert out["compressed"].tolist() == [[3.0, -1.0, 5.0, 0.0, 0.0, 0.0]]
    assert out["shape"].tolist() == [[1], [12]] and out["shape"].dtype == np.int64


@given(
    rows=st.integers(0, 6),
    groups=st.integers(0, 7),
    kind=st.sampled_from(sorted(STORAGE_DTYPES)),
    seed=st.integers(0, 2**32 - 1),
)
def test_bitmask_round_trip_and_oracles(rows: int, groups: int, kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    dense = random_24(rng, rows, 4 * groups, kind)
    mask = default_bitmask_mask(dense, kind)
    np.testing.assert_array_equal(mask, bitmask_mask_reference(dense, kind))
    out = encode_bitmask(dense, kind)
    decoded = decode_bitmask(out["compressed"], out["bitmask"], out["shape"], kind)
    oracle = decode_bitmask_reference(out["compressed"], out["bitmask"], out["shape"], kind)
    np.testing.assert_array_equal(decoded.mask, mask)
    np.testing.assert_array_equal(oracle.mask, mask)
    assert_same_bits(oracle.dense, decoded.dense)
    assert_same_bits(decoded.dense, without_unstored_negative_zero(dense, kind, mask))
    # a decoded layer re-encodes to its own bytes
    again = encode_bitmask(decoded.dense, kind, mask=decoded.mask)
    for key in out:
        assert_same_bits(again[key], out[key])


def test_negative_zero_is_a_zero_and_kept_where_stored() -> None:
    negative = np.float16(-0.0)
    dense = np.array([[negative, 1.5, negative, 2.0, negative, 0, 0, 7]], dtype=np.float16)
    out = encode_bitmask(dense, "fp16")  # 2 nonzeros in group 0: -0.0 does not count
    decoded = decode_bitmask(out["compressed"], out["bitmask"], out["shape"], "fp16")
    # group 1 is completed with its lowest zero, the -0.0 at column 4: its sign bit survives
    assert bits(decoded.dense)[0, 4] == 0x8000
    assert decoded.mask[0].tolist() == [False, True, False, True, True, False, False, True]
    assert bits(decoded.dense)[0, 0] == 0 and bits(decoded.dense)[0, 2] == 0  # unstored: +0.0


# ---------------------------------------------------------------------------------------------
# sparse-24-bitmask: each validation rule
# ---------------------------------------------------------------------------------------------


def _valid_layer() -> dict[str, np.ndarray]:
    dense = random_24(np.random.default_rng(1), 3, 12, "fp16")
    return encode_bitmask(dense, "fp16")


def _decode(parts: dict[str, np.ndarray], kind: str = "fp16") -> None:
    decode_bitmask(parts["compressed"], parts["bitmask"], parts["shape"], kind, tensor="fc")


@pytest.mark.parametrize(
    ("damage", "tensor", "words"),
    [
        (lambda p: p.update(shape=np.array([[3.0], [12.0]])), "fc.shape", "needs integers"),
        (lambda p: p.update(shape=np.array([[3], [12], [1]])), "fc.shape", "2 x 1"),
        (lambda p: p.update(shape=np.array([[-3], [12]])), "fc.shape", "negative"),
        (lambda p: p.update(shape=np.array([[3], [10]])), "fc.shape", "not a multiple of 4"),
        (lambda p: p.update(compressed=p["compressed"].view(np.int16)), "fc.compressed", "dtype"),
        (lambda p: p.update(compressed=p["compressed"][:, :4]), "fc.compressed", "needs (3, 6)"),
        (lambda p: p.update(bitmask=p["bitmask"].astype(np.uint16)), "fc.bitmask", "uint8"),
        (lambda p: p.update(bitmask=p["bitmask"][:, :1]), "fc.bitmask", "(3, 2)"),
    ],
)
def test_bitmask_layout_rules(damage, tensor: str, words: str) -> None:
    parts = _valid_layer()
    damage(parts)
    with pytest.raises(CheckpointFormatError, match=re.escape(words)) as caught:
        _decode(parts)
    assert caught.value.tensor == tensor


def test_bitmask_padding_bits_must_be_zero() -> None:
    parts = _valid_layer()  # 12 columns: byte 1 holds columns 8-11 and 4 padding bits
    parts["bitmask"] = parts["bitmask"].copy()
    parts["bitmask"][2, 1] |= 0b00010000
    with pytest.raises(CheckpointFormatError, match="row 2 sets padding bits after column 11"):
        _decode(parts)


@pytest.mark.parametrize(
    ("flagged", "words"), [(3, "flags 3 of 4; 2:4 keeps at most 2"), (1, "flags 1 of 4")]
)
def test_bitmask_groups_flag_exactly_two(flagged: int, words: str) -> None:
    parts = _valid_layer()
    mask = decode_bitmask(parts["compressed"], parts["bitmask"], parts["shape"], "fp16").mask
    mask[1, 4:8] = [True] * flagged + [False] * (4 - flagged)
    parts["bitmask"] = np.packbits(mask, axis=-1, bitorder="little")
    with pytest.raises(
        CheckpointFormatError, match=f"row 1, group 1 \\(columns 4-7\\) {words}"
    ) as caught:
        _decode(parts)
    assert (caught.value.tensor, caught.value.row, caught.value.group) == ("fc.bitmask", 1, 1)


def test_bitmask_encoder_refuses_overfull_groups_and_lossy_masks() -> None:
    dense = np.zeros((2, 8), dtype=np.float32)
    dense[1, 4:7] = [1.0, 2.0, 3.0]
    with pytest.raises(CheckpointFormatError, match=r"row 1, group 1 .* has 3 nonzeros"):
        encode_bitmask(dense, "fp32", tensor="w")
    dense[1, 6] = 0
    mask = np.zeros((2, 8), dtype=bool)
    mask[:, [0, 1, 6, 7]] = True
    with pytest.raises(CheckpointFormatError, match="row 1, column 4 is nonzero but outside"):
        encode_bitmask(dense, "fp32", mask=mask)
    with pytest.raises(TypeError, match="nothing is cast"):
        encode_bitmask(dense.astype(np.float64), "fp32")
    with pytest.raises(CheckpointFormatError, match="not a multiple of 4"):
        encode_bitmask(np.zeros((2, 6), dtype=np.float32), "fp32")


# ---------------------------------------------------------------------------------------------
# sparse-24 (CUTLASS): round trips and rules
# ---------------------------------------------------------------------------------------------

ALIGNED = {"fp16": (64, 64), "bf16": (64, 32), "fp32": (64, 16), "int8": (64, 128)}


@pytest.mark.parametrize("kind", sorted(ALIGNED))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse24_round_trip(kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, cols = ALIGNED[kind]
    dense = random_24(rng, rows, cols, kind, per_pair=kind == "fp32")
    values, meta = encode_sparse24(dense, kind)
    reference, logical = sparse_2to4.compress_2to4_reference(
        dense, dtype_kind=kind, layout="logical"
    )
    assert_same_bits(values, reference)
    # the storage order, one word at a time (the scalar oracle of the vectorised offsets)
    stored = np.empty(logical.size, dtype=logical.dtype)
    for (row, word), value in np.ndenumerate(logical):
        stored[sparse24_metadata_offset(row, word, rows)] = value
    assert_same_bits(meta, stored.reshape(logical.shape))
    decoded = decode_sparse24(values, meta, kind)
    assert_same_bits(decoded.dense, without_unstored_negative_zero(dense, kind, decoded.mask))
    per = 2 if kind == "fp32" else 4
    counts = decoded.mask.reshape(rows, cols // per, per).sum(axis=-1)
    assert (counts == per // 2).all()
    again = encode_sparse24(decoded.dense, kind, mask=decoded.mask)
    assert_same_bits(again[0], values)
    assert_same_bits(again[1], meta)
    # a bitmask layer's positions carried into sparse-24 and back
    bitmask = encode_bitmask(dense, kind)
    from_bitmask = decode_bitmask(bitmask["compressed"], bitmask["bitmask"], bitmask["shape"], kind)
    if kind != "fp32":
        carried = decode_sparse24(
            *encode_sparse24(from_bitmask.dense, kind, mask=from_bitmask.mask), kind
        )
        np.testing.assert_array_equal(carried.mask, from_bitmask.mask)
        assert_same_bits(carried.dense, from_bitmask.dense)


def _logical(meta: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(meta).ravel()[sparse24_metadata_offsets(*meta.shape)]


def _stored(logical: np.ndarray) -> np.ndarray:
    stored = np.empty(logical.size, dtype=logical.dtype)
    stored[sparse24_metadata_offsets(*logical.shape).ravel()] = logical.ravel()
    return stored.reshape(logical.shape)


def test_sparse24_rules() -> None:
    dense = random_24(np.random.default_rng(3), 64, 64, "fp16")
    values, meta = encode_sparse24(dense, "fp16")
    with pytest.raises(CheckpointFormatError, match="metadata words are int16"):
        decode_sparse24(values, meta.astype(np.int32), "fp16", tensor="fc.weight")
    with pytest.raises(CheckpointFormatError, match="need metadata"):
        decode_sparse24(values, meta[:, :2], "fp16", tensor="fc.weight")
    with pytest.raises(CheckpointFormatError, match="rows divisible by 64") as caught:
        decode_sparse24(values[:32], meta[:32], "fp16", tensor="fc.weight")
    assert caught.value.tensor == "fc.weight.sparse_24_packed_weight"
    with pytest.raises(CheckpointFormatError, match="rows divisible by 64"):
        encode_sparse24(dense[:32], "fp16")
    nibbles = sparse_2to4.unpack_nibbles(_logical(meta), "fp16")
    for nibble, words in ((0x0, "invalid"), (0x1, "p0 < p1")):
        damaged = nibbles.copy()
        damaged[5, 2] = nibble
        stored = _stored(sparse_2to4.pack_nibbles(damaged, "fp16"))
        with pytest.raises(
            CheckpointFormatError, match=f"row 5, group 2: nibble {nibble:#x}"
        ) as caught:
            decode_sparse24(values, stored, "fp16", tensor="fc.weight")
        assert words in str(caught.value)
        assert (caught.value.tensor, caught.value.row, caught.value.group) == (
            "fc.weight.meta",
            5,
            2,
        )
    fp32 = random_24(np.random.default_rng(4), 64, 32, "fp32", per_pair=True)
    values32, meta32 = encode_sparse24(fp32, "fp32")
    nibbles32 = sparse_2to4.unpack_nibbles(_logical(meta32), "fp32")
    nibbles32[0, 0] = 0x9  # positions (1, 2): valid for 2:4, not for the 1:2 mode
    with pytest.raises(CheckpointFormatError, match="0x4 or 0xE"):
        decode_sparse24(values32, _stored(sparse_2to4.pack_nibbles(nibbles32, "fp32")), "fp32")
    with pytest.raises(CheckpointFormatError, match=r"pair 0 .* fp32 sparse-24 is 1:2"):
        encode_sparse24(np.zeros((64, 32), np.float32), "fp32", mask=np.ones((64, 32), bool))


def test_sparse24_offsets_are_a_permutation_unlike_torch_213() -> None:
    for rows, words in ((64, 2), (128, 4)):
        offsets = sparse24_metadata_offsets(rows, words)
        np.testing.assert_array_equal(np.sort(offsets.ravel()), np.arange(rows * words))
        scalar = [[sparse24_metadata_offset(r, w, rows) for w in range(words)] for r in range(rows)]
        np.testing.assert_array_equal(offsets, scalar)
    # compressed-tensors' row order is not PyTorch 2.13's: reading one as the other is wrong
    torch_order = sparse_2to4.metadata_storage_offsets(64, 2, "fp16")
    assert (torch_order != sparse24_metadata_offsets(64, 2)).mean() > 0.5


def test_marlin24_mask_reads_the_resized_metadata() -> None:
    n, k = 64, 128
    dense = random_24(np.random.default_rng(5), n, k, "fp16")
    _, meta = encode_sparse24(dense, "fp16")
    stored = meta.reshape(k // 32, 2 * n)  # torch resize_ of a contiguous tensor: a reshape
    mask = marlin24_mask(stored, np.zeros((k // 32, 2 * n), np.int32), tensor="fc")
    np.testing.assert_array_equal(
        mask, decode_sparse24(*encode_sparse24(dense, "fp16"), "fp16").mask
    )
    with pytest.raises(CheckpointFormatError, match="int32 rows"):
        marlin24_mask(stored, np.zeros((1, 2 * n), np.int32), tensor="fc")


def random_marlin(rng: np.random.Generator, n: int, k: int, bits: int, groups: int):
    quantized = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(n, k))
    keep = np.zeros((n, k // 4, 4), dtype=bool)
    np.put_along_axis(keep, np.argsort(rng.random((n, k // 4, 4)), axis=-1)[..., :2], True, -1)
    quantized = np.where(keep.reshape(n, k), quantized, 0).astype(np.int8)
    scales = (rng.random((groups, n)) + 0.5).astype(np.float16)
    return quantized, scales


def test_marlin24_permutations_are_permutations() -> None:
    for bits in (4, 8):
        np.testing.assert_array_equal(np.sort(weight_permutation(bits)), np.arange(1024))
    np.testing.assert_array_equal(np.sort(scale_permutation()), np.arange(64))
    with pytest.raises(ValueError, match="bits=3 must be 4 or 8"):
        weight_permutation(3)


@pytest.mark.parametrize(("bits", "groups"), [(4, 1), (4, 2), (4, 4), (8, 1), (8, 8)])
def test_marlin24_round_trip(bits: int, groups: int) -> None:
    n, k = 64, 256
    quantized, scales = random_marlin(np.random.default_rng(bits * 10 + groups), n, k, bits, groups)
    stored = encode_marlin24(quantized, scales, bits=bits)
    assert stored["weight_packed"].dtype == np.int32
    assert stored["weight_packed"].shape == (k // 32, 16 * n * bits // 32)
    assert stored["meta"].shape == (k // 32, 2 * n) and stored["scale_packed"].shape == (groups, n)
    decoded = decode_marlin24(stored["weight_packed"], stored["scale_packed"], stored["meta"])
    np.testing.assert_array_equal(decoded.quantized, quantized)
    assert_same_bits(decoded.scales, scales)
    assert (decoded.bits, decoded.group_size) == (bits, k // groups)
    expected = quantized.astype(np.float32) * np.repeat(scales.astype(np.float32), k // groups, 0).T
    np.testing.assert_array_equal(decoded.dequantized(), expected)
    again = encode_marlin24(decoded.quantized, decoded.scales, bits=bits, mask=decoded.mask)
    for key, value in stored.items():
        assert_same_bits(again[key], value)


def test_marlin24_rules() -> None:
    quantized, scales = random_marlin(np.random.default_rng(9), 64, 128, 4, 2)
    stored = encode_marlin24(quantized, scales, bits=4)
    packed, scale, meta = stored["weight_packed"], stored["scale_packed"], stored["meta"]
    with pytest.raises(CheckpointFormatError, match="gives 128 \\(4 bits\\) or 256"):
        decode_marlin24(packed[:, :100], scale, meta, tensor="fc")
    with pytest.raises(CheckpointFormatError, match="do not divide k=128"):
        decode_marlin24(packed, np.zeros((3, 64), np.float16), meta, tensor="fc")
    with pytest.raises(CheckpointFormatError, match="needs float16"):
        decode_marlin24(packed, scale.astype(np.float32), meta, tensor="fc")
    with pytest.raises(ValueError, match="must lie in \\[-8, 7\\]"):
        encode_marlin24(quantized * 2, scales, bits=4)
    with pytest.raises(ValueError, match="n % 64 == 0"):
        encode_marlin24(quantized[:32], scales[:, :32], bits=4)


def test_to_float32_is_exact() -> None:
    table = to_float32(np.arange(256, dtype=np.uint8), "fp8_e4m3")
    assert table[0x7E] == 448.0 and table[0x01] == 2.0**-9 and table[0x80] == 0.0
    assert np.signbit(table[0x80]) and np.isnan(table[0x7F]) and np.isnan(table[0xFF])
    finite = table[np.isfinite(table)]
    assert np.unique(finite[finite > 0]).size == 126  # every positive pattern a distinct value
    halves = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    np.testing.assert_array_equal(
        to_float32(halves, "bf16").view(np.uint32), halves.astype(np.uint32) << 16
    )


# ---------------------------------------------------------------------------------------------
# golden files
# ---------------------------------------------------------------------------------------------


def test_golden_files_are_pinned() -> None:
    pinned = json.loads((GOLDEN / "golden.json").read_text())["sha256"]
    for name, digest in pinned.items():
        assert hashlib.sha256((GOLDEN / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize(
    ("to", "golden"),
    [("sparse-24-bitmask", "golden_sparse24_bitmask"), ("cutlass", "golden_sparse24_cutlass")],
)
def test_golden_encode_and_decode(tmp_path: Path, to: str, golden: str) -> None:
    dense_path = GOLDEN / "golden_dense.safetensors"
    written, _ = convert(dense_path, tmp_path / "out.safetensors", to)
    assert written.read_bytes() == (GOLDEN / f"{golden}.safetensors").read_bytes()
    checkpoint = open_checkpoint(GOLDEN / f"{golden}.safetensors")
    assert checkpoint is not None and checkpoint.format in FORMATS
    dense = read_all(dense_path)
    decoded_names = set()
    for layer in checkpoint.layers:
        decoded = checkpoint.decode(layer)
        dtype, original = dense[layer.name]
        assert dtype == KIND_DTYPE[decoded.kind]
        expected = without_unstored_negative_zero(original, decoded.kind, decoded.mask)
        assert_same_bits(decoded.dense, expected)
        decoded_names.add(layer.name)
    expected_layers = {
        "sparse-24-bitmask": 5,  # fp16, bf16, fp32, int8, fp8
        "sparse-24": 4,  # fp8 stays dense: CUTLASS has no fp8 kind here
    }[checkpoint.format]
    assert len(decoded_names) == expected_layers
    for index, name in checkpoint.passthrough:
        assert_same_bits(np.array(checkpoint.raw(index, name)), dense[name][1])


def test_golden_corners_are_present() -> None:
    dense = read_all(GOLDEN / "golden_dense.safetensors")
    fp16 = dense["layers.0.mlp.up_proj.weight"][1]
    bf16 = dense["layers.0.mlp.down_proj.weight"][1]
    assert np.isinf(fp16).any() and (bits(fp16) == 0x8000).any()
    assert 0x7FC1 in bf16 and 0xFF81 in bf16
    assert dense["layers.0.self_attn.v_proj.weight"][1].shape[1] % 8 == 4


# ---------------------------------------------------------------------------------------------
# checkpoints: config, names, hostile files
# ---------------------------------------------------------------------------------------------


def _bitmask_file(tmp_path: Path, name: str = "model.safetensors") -> Path:
    dense = random_24(np.random.default_rng(6), 32, 64, "fp16")
    parts = encode_bitmask(dense, "fp16")
    return write_safetensors(
        tmp_path / name,
        {
            "fc.compressed": ("F16", parts["compressed"]),
            "fc.bitmask": ("U8", parts["bitmask"]),
            "fc.shape": ("I64", parts["shape"]),
            "fc.bias": ("F16", np.zeros(32, np.float16)),
        },
    )


def test_config_selects_from_the_fixed_table(tmp_path: Path) -> None:
    _bitmask_file(tmp_path)
    config = {"quantization_config": {"sparsity_config": {"format": "sparse-24-bitmask"}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    checkpoint = open_checkpoint(tmp_path)
    assert checkpoint.format == "sparse-24-bitmask" and checkpoint.format_source == "config.json"
    assert [layer.name for layer in checkpoint.layers] == ["fc.weight"]
    before = set(sys.modules)
    for hostile in ("os", "nmsim.formats.sparse_2to4:compress_2to4", "__import__('os')"):
        with pytest.raises(ValueError, match="not a 2:4 format this reader decodes"):
            config_format({"quantization_config": {"sparsity_config": {"format": hostile}}}, "c")
    assert set(sys.modules) == before  # nothing named in a config is imported
    (tmp_path / "config.json").write_text(
        json.dumps({"quantization_config": {"sparsity_config": {"format": "sparse-24"}}})
    )
    with pytest.raises(ValueError, match="says format 'sparse-24' but the tensors are stored as"):
        open_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        open_checkpoint(tmp_path)
    assert (
        config_format({"compression_config": {"sparsity_config": {"format": "dense"}}}, "c") is None
    )
    assert config_format({"quantization_config": {"format": "marlin-24"}}, "c") == "marlin-24"


def test_names_decide_without_config_and_parts_must_be_complete(tmp_path: Path) -> None:
    path = _bitmask_file(tmp_path)
    assert open_checkpoint(path).format_source == "tensor names"
    tensors = read_all(path)
    del tensors["fc.shape"]
    write_safetensors(path, tensors)
    with pytest.raises(
        CheckpointFormatError, match=re.escape("'fc': sparse-24-bitmask layer lacks fc.shape")
    ):
        open_checkpoint(path)
    tensors["fc.row_offsets"] = ("I64", np.zeros(32, np.int64))
    tensors["fc.shape"] = ("I64", np.array([[32], [64]]))
    write_safetensors(path, tensors)
    with pytest.raises(ValueError, match="unstructured 'sparse-bitmask'"):
        open_checkpoint(path)
    plain = write_safetensors(
        tmp_path / "plain.safetensors", {"w": ("F32", np.ones((4, 4), np.float32))}
    )
    assert open_checkpoint(plain) is None


def _raw_file(path: Path, header: bytes, data: bytes = b"", declared: int | None = None) -> Path:
    path.write_bytes(
        struct.pack("<Q", len(header) if declared is None else declared) + header + data
    )
    return path


@pytest.mark.parametrize(
    ("header", "data", "declared", "words"),
    [
        (b"{}", b"", 2**40, "header declares"),
        (b"\xff\xfe", b"", None, "not JSON"),
        (b"[1, 2]", b"", None, "not a JSON object"),
        (
            b'{"a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 64]}}',
            b"\0" * 8,
            None,
            "outside the 8 data bytes",
        ),
        (
            b'{"a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 4]}}',
            b"\0" * 8,
            None,
            "offsets span 4",
        ),
        (
            b'{"a": {"dtype": "F16", "shape": [2, -2], "data_offsets": [0, 8]}}',
            b"\0" * 8,
            None,
            "integers >= 0",
        ),
        (b'{"a": {"dtype": 9, "shape": [2], "data_offsets": [0, 2]}}', b"\0" * 2, None, "dtype 9"),
        (b'{"__metadata__": {"k": 1}}', b"", None, "__metadata__"),
    ],
)
def test_hostile_safetensors_headers(tmp_path: Path, header, data, declared, words) -> None:
    path = _raw_file(tmp_path / "h.safetensors", header, data, declared)
    with pytest.raises(ValueError, match=words):
        SafetensorsFile(path)


def test_hostile_shape_and_shard_names(tmp_path: Path) -> None:
    path = _bitmask_file(tmp_path)
    tensors = read_all(path)
    tensors["fc.shape"] = ("I64", np.array([[2**40], [2**40]]))  # never allocated
    write_safetensors(path, tensors)
    with pytest.raises(CheckpointFormatError, match=r"fc\.compressed.*has shape \(32, 32\)"):
        open_checkpoint(path).decode(open_checkpoint(path).layers[0])
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"fc.compressed": "../elsewhere.safetensors"}})
    )
    with pytest.raises(ValueError, match="outside its folder"):
        open_checkpoint(tmp_path)


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


def _nmsim(*argv: str) -> int:
    from nmsim.cli import main

    return main(list(argv))


def test_convert_round_trips_between_formats(tmp_path: Path, capsys) -> None:
    bitmask = str(GOLDEN / "golden_sparse24_bitmask.safetensors")
    cutlass, back, dense = (str(tmp_path / f"{n}.safetensors") for n in ("c", "b", "d"))
    assert _nmsim("convert", bitmask, cutlass, "--to", "cutlass") == 0
    out = capsys.readouterr().out  # the fp8 layer has no CUTLASS kind: written dense, said so
    assert "layers.0.self_attn.v_proj.weight: kept dense: sparse-24 stores fp16, bf16" in out
    assert read_all(Path(cutlass))["layers.0.self_attn.v_proj.weight"][0] == "F8_E4M3"
    # every layer keeps its stored positions and bits (under-full groups included)
    source, target = open_checkpoint(Path(bitmask)), open_checkpoint(Path(cutlass))
    carried = {layer.name: target.decode(layer) for layer in target.layers}
    assert len(carried) == 4
    for layer in source.layers:
        if layer.name in carried:
            before, after = source.decode(layer), carried[layer.name]
            if before.kind == "fp32":  # 2-of-4 positions do not fit the 1:2 mode: from the weight
                expected = without_unstored_negative_zero(before.dense, "fp32", after.mask)
                assert_same_bits(after.dense, expected)
                continue
            np.testing.assert_array_equal(after.mask, before.mask)
            assert_same_bits(after.dense, before.dense)
    cutlass_golden = str(GOLDEN / "golden_sparse24_cutlass.safetensors")
    assert _nmsim("convert", cutlass_golden, back, "--to", "sparse-24-bitmask") == 0
    assert _nmsim("convert", back, cutlass, "--to", "cutlass", "--force") == 0
    original, again = read_all(Path(cutlass_golden)), read_all(Path(cutlass))
    assert sorted(original) == sorted(again)
    for name in original:  # the stored masks travel: the same bytes after two conversions
        assert original[name][0] == again[name][0]
        assert_same_bits(again[name][1], original[name][1])
    assert _nmsim("convert", back, dense, "--to", "dense") == 0
    assert "wrote" in capsys.readouterr().out
    assert _nmsim("convert", back, dense, "--to", "dense") == 2
    error = capsys.readouterr().err
    assert "exists" in error and "--force" in error
    assert _nmsim("convert", dense, str(tmp_path / "x.safetensors"), "--to", "dense") == 2
    assert "dense already" in capsys.readouterr().err
    assert _nmsim("convert", back, str(tmp_path / "x.npz"), "--to", "dense") == 2
    assert "must end in .safetensors" in capsys.readouterr().err
    before = Path(back).read_bytes()
    assert _nmsim("convert", back, back, "--to", "cutlass", "--force") == 2  # never over an input
    assert "input" in capsys.readouterr().err
    assert Path(back).read_bytes() == before


def test_convert_reports_the_first_bad_group(tmp_path: Path, capsys) -> None:
    path = _bitmask_file(tmp_path)
    tensors = read_all(path)
    mask = np.unpackbits(tensors["fc.bitmask"][1], axis=-1, bitorder="little").astype(bool)
    mask[7, 8:12] = True
    tensors["fc.bitmask"] = ("U8", np.packbits(mask, axis=-1, bitorder="little"))
    write_safetensors(path, tensors)
    assert _nmsim("convert", str(path), str(tmp_path / "o.safetensors"), "--to", "dense") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "'fc.bitmask': row 7, group 2 (columns 8-11) flags 4 of 4" in error
    assert not (tmp_path / "o.safetensors").exists()


# ---------------------------------------------------------------------------------------------
# nmsim report on compressed checkpoints
# ---------------------------------------------------------------------------------------------


def test_report_states_format_checks_masks_and_estimates(tmp_path: Path) -> None:
    from nmsim.report.build import ReportSettings, build_report
    from tests.report_schema import SCHEMA, validate

    settings = ReportSettings(methods=("1d",))
    report = build_report(str(GOLDEN / "golden_sparse24_bitmask.safetensors"), settings)
    assert validate(report, SCHEMA) == []
    statuses = {e["name"]: e["status"] for e in report["tensors"]}
    assert report["checkpoint"]["compressed"]["format"] == "sparse-24-bitmask"
    layers = {e["name"]: e for e in report["tensors"] if "stored_mask" in e}
    assert len(layers) == 5
    query = layers["layers.0.self_attn.q_proj.weight"]
    assert query["status"] == "ok" and query["stored_mask"]["valid"]
    assert (
        query["stored_mask"]["stored"] == 64 * 32 // 2 and query["stored_mask"]["stored_zeros"] > 0
    )
    interval = query["time"]["forward_speedup"]
    assert interval["low"] <= interval["speedup"] <= interval["high"]
    # a valid mask around non-finite weights: the mask is checked, the weights refused
    up = layers["layers.0.mlp.up_proj.weight"]
    assert up["stored_mask"]["valid"] and up["status"] == "error" and "Inf" in up["reason"]
    # a damaged layer: reported as an error naming the tensor and group, the rest analysed
    tensors = read_all(GOLDEN / "golden_sparse24_bitmask.safetensors")
    mask = np.unpackbits(tensors["layers.0.mlp.up_proj.bitmask"][1], axis=-1, bitorder="little")
    mask[3, 0:4] = 1
    tensors["layers.0.mlp.up_proj.bitmask"] = ("U8", np.packbits(mask, axis=-1, bitorder="little"))
    damaged = write_safetensors(tmp_path / "damaged.safetensors", tensors)
    report = build_report(str(damaged), settings)
    assert validate(report, SCHEMA) == []
    entry = next(e for e in report["tensors"] if e["name"] == "layers.0.mlp.up_proj.weight")
    assert entry["status"] == "error" and entry["stored_mask"]["valid"] is False
    assert "row 3, group 0 (columns 0-3) flags 4 of 4" in entry["reason"]
    others = {e["name"]: e["status"] for e in report["tensors"] if e["name"] != entry["name"]}
    assert others == {k: v for k, v in statuses.items() if k != entry["name"]}


def test_report_command_line_names_the_format(capsys) -> None:
    assert (
        _nmsim(
            "report",
            str(GOLDEN / "golden_sparse24_cutlass.safetensors"),
            "--methods",
            "1d",
            "--quiet",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "compressed-tensors sparse-24 checkpoint (format from tensor names): 4 stored 2:4 mask(s) decoded, 4 valid, 0 invalid"
        in out
    )


# ---------------------------------------------------------------------------------------------
# cross-check against compressed-tensors 0.14.x (optional, test-only)
# ---------------------------------------------------------------------------------------------


def _compressed_tensors():
    """The 2:4 functions of an installed compressed-tensors, without importing the package.

    ``import compressed_tensors`` needs transformers; the functions compared need only torch
    and NumPy, so their definitions are compiled from the installed source files (the
    CUTLASS module whole, the bitmask functions one by one).
    """
    torch = pytest.importorskip("torch", reason="the cross-check runs compressed-tensors on torch")
    spec = importlib.util.find_spec("compressed_tensors")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            "compressed-tensors is not installed (optional, test-only: "
            "pip install --no-deps compressed-tensors==0.14.0)"
        )
    from importlib import metadata

    version = metadata.version("compressed-tensors")
    root = Path(spec.submodule_search_locations[0])
    conversions = root / "utils" / "semi_structured_conversions.py"
    bitmask = root / "compressors" / "sparse_compressors" / "sparse_24_bitmask.py"
    if not (conversions.is_file() and bitmask.is_file()):
        pytest.skip(
            f"compressed-tensors {version} no longer ships the 2:4 compressors (0.15 removed them)"
        )
    loaded = importlib.util.spec_from_file_location("_ct_conversions", conversions)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)

    class SparsityStructure(enum.Enum):
        TWO_FOUR = "2:4"

    namespace = {
        "torch": torch,
        "numpy": np,
        "Tensor": torch.Tensor,
        "SparsityStructure": SparsityStructure,
        "FP8_E4M3_DATA": types.SimpleNamespace(dtype=torch.float8_e4m3fn),
        "FP8_DTYPE": torch.float8_e4m3fn,
    }
    wanted = {
        "pack_bitmasks",
        "unpack_bitmasks",
        "get_24_bytemasks",
        "sparse24_bitmask_compress",
        "sparse24_bitmask_decompress",
    }
    for source in (root / "utils" / "helpers.py", bitmask):
        tree = ast.parse(source.read_text())
        body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
        exec(compile(ast.Module(body=body, type_ignores=[]), str(source), "exec"), namespace)
    missing = wanted - set(namespace)
    if missing:
        pytest.skip(f"compressed-tensors {version} lacks {sorted(missing)}")
    return version, module, namespace, torch


TORCH_DTYPES = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "int8": "int8",
    "fp8_e4m3": "float8_e4m3fn",
}


def _to_torch(torch, array: np.ndarray, kind: str):
    tensor = torch.from_numpy(np.ascontiguousarray(bits(array)).astype(bits(array).dtype))
    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32}[array.dtype.itemsize]
    return tensor.view(signed).view(getattr(torch, TORCH_DTYPES[kind]))


def _from_torch(torch, tensor, kind: str) -> np.ndarray:
    signed = {1: torch.int8, 2: torch.int16, 4: torch.int32}[tensor.element_size()]
    raw = tensor.contiguous().view(signed).numpy()
    return raw.view(STORAGE_DTYPES[kind])


@pytest.mark.parametrize("kind", sorted(STORAGE_DTYPES))
def test_cross_check_bitmask_with_compressed_tensors(kind: str) -> None:
    version, _, ct, torch = _compressed_tensors()
    rng = np.random.default_rng(7)
    dense = random_24(rng, 32, 44, kind)  # 44 columns: a padded last byte
    if kind == "int8":
        # upstream ranks by abs(), and abs(-128) overflows to -128 in int8: it would drop -128
        dense[dense == -128] = 127
    ours = encode_bitmask(dense, kind)
    theirs_values, theirs_bitmask = ct["sparse24_bitmask_compress"](
        _to_torch(torch, dense, kind), "2:4"
    )
    theirs_bitmask = theirs_bitmask.numpy()
    assert theirs_bitmask.dtype == np.uint8 and theirs_bitmask.shape == ours["bitmask"].shape
    theirs = decode_bitmask(
        _from_torch(torch, theirs_values, kind), theirs_bitmask, ours["shape"], kind
    )
    # their file decodes here to the weight (positions of under-full groups are torch.topk's)
    assert_same_bits(theirs.dense, without_unstored_negative_zero(dense, kind, theirs.mask))
    # and re-encodes here to their bytes
    again = encode_bitmask(theirs.dense, kind, mask=theirs.mask)
    np.testing.assert_array_equal(again["bitmask"], theirs_bitmask)
    assert_same_bits(again["compressed"], _from_torch(torch, theirs_values, kind))
    # groups with exactly 2 nonzeros: the same bitmask bits from both encoders
    exact = nonzero_flags(dense, kind).reshape(32, 11, 4).sum(-1) == 2
    ours_mask = decode_bitmask(ours["compressed"], ours["bitmask"], ours["shape"], kind).mask
    np.testing.assert_array_equal(
        ours_mask.reshape(32, 11, 4)[exact], theirs.mask.reshape(32, 11, 4)[exact]
    )
    # their decoder reads our bytes to our weight
    try:
        decoded = ct["sparse24_bitmask_decompress"](
            _to_torch(torch, ours["compressed"], kind), torch.from_numpy(ours["bitmask"]), [32, 44]
        )
    except (AssertionError, RuntimeError) as error:
        # releases before 0.10 move a decoded fp8 tensor to CUDA: only that step needs a GPU
        if kind != "fp8_e4m3" or "CUDA" not in str(error):
            raise
        print(f"compressed-tensors {version} decodes fp8 only on CUDA: that step not run")
    else:
        mask = default_bitmask_mask(dense, kind)
        assert_same_bits(
            _from_torch(torch, decoded, kind), without_unstored_negative_zero(dense, kind, mask)
        )
    print(f"cross-checked sparse-24-bitmask {kind} against compressed-tensors {version}")


@pytest.mark.parametrize("kind", sorted(ALIGNED))
def test_cross_check_sparse24_with_compressed_tensors(kind: str) -> None:
    version, conversions, _, torch = _compressed_tensors()
    rng = np.random.default_rng(8)
    rows, cols = ALIGNED[kind]
    dense = random_24(rng, rows, cols, kind, per_pair=kind == "fp32")
    if kind == "bf16":
        # torch's CPU gather rewrites bf16 NaN payloads (specs/formats.md section 9)
        dense[np.isnan(to_float32(dense, kind))] = 0x3F80
    if kind == "fp16":
        dense[np.isnan(dense)] = 1
    if kind == "fp32":
        # torch's CPU decoder scatters fp32 pairs through float16 halves, quietening any half
        # that looks like an fp16 signalling NaN (specs/formats.md section 9)
        halves = dense.view(np.uint16).reshape(*dense.shape, 2)
        signalling = (
            ((halves & 0x7C00) == 0x7C00) & ((halves & 0x3FF) != 0) & ((halves & 0x200) == 0)
        )
        dense[signalling.any(axis=-1)] = 1.0
    values, meta = encode_sparse24(dense, kind)
    their_values, their_meta = conversions.sparse_semi_structured_from_dense_cutlass(
        _to_torch(torch, dense, kind)
    )
    assert_same_bits(values, _from_torch(torch, their_values, kind))
    np.testing.assert_array_equal(meta, their_meta.numpy())  # under-full groups included
    back = conversions.sparse_semi_structured_to_dense_cutlass(their_values, their_meta)
    decoded = decode_sparse24(values, meta, kind)
    assert_same_bits(decoded.dense, _from_torch(torch, back, kind))
    print(f"cross-checked sparse-24 {kind} against compressed-tensors {version}")


def test_unknown_dtypes_are_listed_but_never_read(tmp_path: Path) -> None:
    header = b'{"a": {"dtype": "F8_E5M2", "shape": [2], "data_offsets": [0, 2]}}'
    file = SafetensorsFile(_raw_file(tmp_path / "u.safetensors", header, b"\0\0"))
    assert file.entries["a"].dtype == "F8_E5M2"
    with pytest.raises(ValueError, match="dtype 'F8_E5M2', which this reader does not read"):
        file.array("a")
    assert open_checkpoint(tmp_path / "u.safetensors") is None  # a plain file: not compressed


def test_cross_check_marlin24_with_compressed_tensors() -> None:
    version, conversions, _, torch = _compressed_tensors()
    root = Path(importlib.util.find_spec("compressed_tensors").submodule_search_locations[0])
    permutations_file = root / "utils" / "permutations_24.py"
    loaded = importlib.util.spec_from_file_location("_ct_permutations", permutations_file)
    permutations = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(permutations)

    class QuantizationStrategy(enum.StrEnum):
        GROUP = "group"
        CHANNEL = "channel"

    namespace = {
        "torch": torch,
        "np": np,
        "numpy": np,
        "Tensor": torch.Tensor,
        "QuantizationArgs": object,
        "QuantizationStrategy": QuantizationStrategy,
        "get_permutations_24": permutations.get_permutations_24,
        "sparse_semi_structured_from_dense_cutlass": conversions.sparse_semi_structured_from_dense_cutlass,
    }
    source = root / "compressors" / "sparse_quantized_compressors" / "marlin_24.py"
    wanted = {"compress_weight_24", "marlin_permute_weights", "pack_weight_24", "pack_scales_24"}
    tree = ast.parse(source.read_text())
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    exec(compile(ast.Module(body=body, type_ignores=[]), str(source), "exec"), namespace)
    rng = np.random.default_rng(10)
    for bits, groups in ((4, 1), (4, 4), (8, 2), (8, 8)):
        n, k = 128, 256
        quantized, scales = random_marlin(rng, n, k, bits, groups)
        strategy = QuantizationStrategy.GROUP if groups > 1 else QuantizationStrategy.CHANNEL
        args = types.SimpleNamespace(num_bits=bits, strategy=strategy, group_size=k // groups)
        # the body of Marlin24Compressor.compress for one weight
        values, meta = namespace["compress_weight_24"](
            torch.from_numpy(quantized.astype(np.float16))
        )
        values = values.t().contiguous()
        shape = values.shape
        values += (1 << bits) // 2
        packed = namespace["pack_weight_24"](values, args)
        scale_packed = namespace["pack_scales_24"](
            torch.from_numpy(scales).contiguous(), args, shape
        )
        meta = meta.resize_(meta.shape[1] // 2, meta.shape[0] * 2)
        ours = encode_marlin24(quantized, scales, bits=bits)
        np.testing.assert_array_equal(ours["weight_packed"], packed.numpy())
        assert_same_bits(ours["scale_packed"], scale_packed.numpy())
        np.testing.assert_array_equal(ours["meta"], meta.numpy())
        decoded = decode_marlin24(packed.numpy(), scale_packed.numpy(), meta.numpy())
        np.testing.assert_array_equal(decoded.quantized, quantized)
        assert_same_bits(decoded.scales, scales)
    print(f"cross-checked marlin-24 against compressed-tensors {version}")


def test_marlin24_checkpoint_folder_report_and_convert(tmp_path: Path, capsys) -> None:
    from nmsim.report.build import ReportSettings, build_report
    from tests.report_schema import SCHEMA, validate

    quantized, scales = random_marlin(np.random.default_rng(11), 64, 128, 4, 1)
    stored = encode_marlin24(quantized, scales, bits=4)
    folder = tmp_path / "model"
    folder.mkdir()
    write_safetensors(
        folder / "model.safetensors",
        {
            "fc.weight_packed": ("I32", stored["weight_packed"]),
            "fc.scale_packed": ("F16", stored["scale_packed"]),
            "fc.meta": ("I16", stored["meta"]),
            "fc.bias": ("F16", np.zeros(64, np.float16)),
        },
    )
    config = {"quantization_config": {"quant_method": "compressed-tensors", "format": "marlin-24"}}
    (folder / "config.json").write_text(json.dumps(config))
    checkpoint = open_checkpoint(folder)
    assert (checkpoint.format, checkpoint.format_source) == ("marlin-24", "config.json")
    (layer,) = checkpoint.layers
    assert (layer.name, layer.shape) == ("fc.weight", (64, 128))
    expected = quantized.astype(np.float32) * scales.astype(np.float32).T
    np.testing.assert_array_equal(checkpoint.decode(layer).dense, expected)
    report = build_report(str(folder), ReportSettings(methods=("1d",)))
    assert validate(report, SCHEMA) == []
    entry = next(e for e in report["tensors"] if e["name"] == "fc.weight")
    assert entry["status"] == "ok" and entry["stored_mask"]["valid"]
    out = tmp_path / "dense.safetensors"
    assert _nmsim("convert", str(folder), str(out), "--to", "dense") == 0
    dtype, weight = read_all(out)["fc.weight"]
    assert dtype == "F32"
    np.testing.assert_array_equal(weight, expected)
    assert _nmsim("convert", str(folder), str(tmp_path / "c.safetensors"), "--to", "cutlass") == 2
    assert "converts only --to dense" in capsys.readouterr().err


@given(
    rows=st.integers(0, 5),
    cols=st.integers(0, 20),
    packed_cols=st.integers(0, 4),
    values_cols=st.integers(0, 12),
    shape_dtype=st.sampled_from(["int64", "int32", "float32", "uint8"]),
    half_words=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_decoders_on_garbage_raise_only_format_errors(
    rows: int,
    cols: int,
    packed_cols: int,
    values_cols: int,
    shape_dtype: str,
    half_words: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    compressed = random_bits(rng, (rows, values_cols), "bf16")
    bitmask = rng.integers(0, 256, size=(rows, packed_cols), dtype=np.uint8)
    shape = np.array([[rows], [cols]]).astype(shape_dtype)
    try:
        decoded = decode_bitmask(compressed, bitmask, shape, "bf16")
    except CheckpointFormatError:
        pass
    else:  # accepted: then it is a valid 2:4 layer that re-encodes to the same bytes
        counts = decoded.mask.reshape(rows, -1, 4).sum(-1) if cols else np.full(1, 2)
        assert (counts == 2).all()
        again = encode_bitmask(decoded.dense, "bf16", mask=decoded.mask)
        np.testing.assert_array_equal(again["bitmask"], bitmask)
    # metadata of 0, 32, 64 or 96 columns: aligned, so the nibble rules are what is tested
    meta = rng.integers(-(2**15), 2**15, size=(64, 2 * half_words), dtype=np.int16)
    if seed % 2:
        meta[:] = np.int16(-4370)  # 0xEEEE, positions (2, 3) everywhere: half the layers pass
    values = random_bits(rng, (64, 16 * half_words), "fp16")
    try:
        decoded = decode_sparse24(values, meta, "fp16")
    except CheckpointFormatError:
        pass
    else:
        again = encode_sparse24(decoded.dense, "fp16", mask=decoded.mask)
        np.testing.assert_array_equal(again[1], meta)
    try:
        decode_marlin24(
            rng.integers(-(2**31), 2**31, size=(rows, packed_cols), dtype=np.int32),
            random_bits(rng, (max(rows, 1), 2 * packed_cols), "fp16"),
            meta[: max(rows, 0)],
        )
    except CheckpointFormatError:
        pass


def test_a_tensor_in_two_shards_is_ambiguous(tmp_path: Path) -> None:
    _bitmask_file(tmp_path, "a.safetensors")
    _bitmask_file(tmp_path, "b.safetensors")  # e.g. a converted copy left in the model folder
    with pytest.raises(
        ValueError, match=re.escape("is in both 'a.safetensors' and 'b.safetensors'")
    ):
        open_checkpoint(tmp_path)


def test_report_applies_a_per_row_weight_scale_to_fp8_layers(tmp_path: Path) -> None:
    from nmsim.report.build import ReportSettings, build_report

    rng = np.random.default_rng(12)
    dense = random_24(rng, 64, 64, "fp8_e4m3")
    dense[np.isnan(to_float32(dense, "fp8_e4m3"))] = 0x38  # finite weights: analysed
    parts = encode_bitmask(dense, "fp8_e4m3")
    scale = (rng.random((64, 1)) + 0.5).astype(np.float32)
    path = write_safetensors(
        tmp_path / "fp8.safetensors",
        {
            "fc.compressed": ("F8_E4M3", parts["compressed"]),
            "fc.bitmask": ("U8", parts["bitmask"]),
            "fc.shape": ("I64", parts["shape"]),
            "fc.weight_scale": ("F32", scale),
        },
    )
    report = build_report(str(path), ReportSettings(methods=("1d",)))
    entry = next(e for e in report["tensors"] if e["name"] == "fc.weight")
    assert entry["status"] == "ok" and entry["source_dtype"] == "float8_e4m3fn"
    scaled = np.abs(to_float32(dense, "fp8_e4m3") * scale)
    assert entry["total_magnitude"] == pytest.approx(float(scaled.sum(dtype=np.float64)), rel=1e-6)
    unscaled = float(np.abs(to_float32(dense, "fp8_e4m3")).sum(dtype=np.float64))
    assert entry["total_magnitude"] != pytest.approx(unscaled, rel=1e-3)


# ---------------------------------------------------------------------------------------------
# nmsim convert: the readers' container validation, every layer decoded, no ambiguous output
# (issue 37)
# ---------------------------------------------------------------------------------------------

_F16_64 = np.zeros((64, 64), np.float16).tobytes()  # 8192 bytes
_RECORD = {"dtype": "F16", "shape": [64, 64]}


def _raw_safetensors(path: Path, header: dict, data: bytes) -> Path:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


@pytest.mark.parametrize(
    ("header", "data", "refusal"),
    [
        (  # a gap of 8 bytes between the two tensors
            {
                "a.weight": {**_RECORD, "data_offsets": [0, 8192]},
                "b.weight": {**_RECORD, "data_offsets": [8200, 16392]},
            },
            _F16_64 + b"\0" * 8 + _F16_64,
            "invalid offset for tensor `b.weight`",
        ),
        (  # 8 bytes of garbage after the last tensor
            {"a.weight": {**_RECORD, "data_offsets": [0, 8192]}},
            _F16_64 + b"garbage!",
            "incomplete metadata, file not fully covered",
        ),
        (  # two tensors over the same bytes
            {
                "a.weight": {**_RECORD, "data_offsets": [0, 8192]},
                "b.weight": {**_RECORD, "data_offsets": [0, 8192]},
            },
            _F16_64,
            "invalid offset for tensor `",  # a or b: safetensors' order of equal offsets varies
        ),
    ],
    ids=["gap", "trailing-garbage", "overlap"],
)
def test_convert_applies_the_readers_container_validation(
    tmp_path: Path, capsys, header, data, refusal
) -> None:
    # each was converted, although nmref mask, check, report and audit refuse the same file
    path = _raw_safetensors(tmp_path / "bad.safetensors", header, data)
    assert _nmsim("convert", str(path), str(tmp_path / "o.safetensors"), "--to", "dense") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"nmsim: error: path={str(path)!r} is not a valid .safetensors file: Error while "
        f"deserializing header: {refusal}"
    )
    assert not (tmp_path / "o.safetensors").exists()


def _mixed_formats_file(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Two bitmask layers and two sparse-24 layers in one file, and their dense weights."""
    rng = np.random.default_rng(37)
    dense = {name: random_24(rng, 64, 64, "fp16") for name in ("a", "b", "c", "d")}
    tensors: dict[str, tuple[str, np.ndarray]] = {}
    for name in ("a", "b"):
        parts = encode_bitmask(dense[name], "fp16")
        tensors[f"{name}.compressed"] = ("F16", parts["compressed"])
        tensors[f"{name}.bitmask"] = ("U8", parts["bitmask"])
        tensors[f"{name}.shape"] = ("I64", parts["shape"])
    for name in ("c", "d"):
        values, meta = encode_sparse24(dense[name], "fp16")
        tensors[f"{name}.weight.sparse_24_packed_weight"] = ("F16", values)
        tensors[f"{name}.weight.meta"] = ("I16", meta)
    return write_safetensors(tmp_path / "mixed.safetensors", tensors), dense


def test_convert_decodes_every_layer_of_a_file_that_mixes_formats(tmp_path: Path, capsys) -> None:
    # "1 decoded, 4 copied": the bitmask layers were copied as plain tensors
    path, dense = _mixed_formats_file(tmp_path)
    out = tmp_path / "dense.safetensors"
    assert _nmsim("convert", str(path), str(out), "--to", "dense") == 0
    assert "2 sparse-24-bitmask -> dense, 2 sparse-24 -> dense" in capsys.readouterr().out
    written = read_all(out)
    assert sorted(written) == ["a.weight", "b.weight", "c.weight", "d.weight"]
    for name, weight in dense.items():  # the same values (a stray -0.0 may come back +0.0)
        np.testing.assert_array_equal(written[f"{name}.weight"][1], weight)
    checkpoint = open_checkpoint(path)
    assert [layer.format for layer in checkpoint.layers] == [
        "sparse-24-bitmask",
        "sparse-24-bitmask",
        "sparse-24",
        "sparse-24",
    ]


def test_convert_refuses_to_write_a_layer_both_dense_and_compressed(tmp_path: Path, capsys) -> None:
    # l.weight beside a compressed l: --to sparse-24-bitmask wrote both, an ambiguous checkpoint
    tensors = read_all(_bitmask_file(tmp_path))
    tensors["fc.weight"] = ("F16", random_24(np.random.default_rng(1), 32, 64, "fp16"))
    path = write_safetensors(tmp_path / "both.safetensors", tensors)
    out = tmp_path / "o.safetensors"
    assert _nmsim("convert", str(path), str(out), "--to", "sparse-24-bitmask") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"nmsim: error: OUT {str(out)!r} would hold both 'fc.weight' and 'fc.compressed' "
        "(sparse-24-bitmask): an ambiguous checkpoint (which is the layer's weight?); refused. "
        "Remove one of them from the input"
    )
    assert not out.exists()


def test_convert_of_fp32_2to4_weights_to_cutlass_says_fp32_needs_1_to_2(
    tmp_path: Path, capsys
) -> None:
    # every weight is 2:4, and the message said "no 2-D .weight tensor that is 2:4"
    weight = np.zeros((64, 64), np.float32)
    weight[:, 0::4] = 1.0
    weight[:, 1::4] = 2.0  # columns 0 and 1 of every group: 2:4, and 2 in the first pair
    path = write_safetensors(
        tmp_path / "fp32.safetensors", {"a.weight": ("F32", weight), "b.weight": ("F32", weight)}
    )
    assert _nmsim("convert", str(path), str(tmp_path / "o.safetensors"), "--to", "cutlass") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"nmsim: error: {str(path)!r} has no 2-D '.weight' tensor that sparse-24 can hold (the "
        "first, 'a.weight': fp32 needs 1:2 on the hardware, not 2:4 (sparse-24 stores fp32 as "
        "TF32, one nonzero per pair; row 0, pair 0 (columns 0-1) holds 2 nonzeros; fp32 "
        "sparse-24 is 1:2 (one per pair)); 2:4 fp32 fits --to sparse-24-bitmask, or cast it to "
        "fp16/bf16 first); nothing to convert"
    )
