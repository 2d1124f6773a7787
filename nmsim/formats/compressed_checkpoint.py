"""Reading and writing compressed-tensors 2:4 checkpoints (``.safetensors`` files and folders).

:func:`open_checkpoint` finds a checkpoint's format, from ``config.json``
(``quantization_config.sparsity_config.format``, or ``quantization_config.format`` for
``marlin-24``) when given a model folder, otherwise from its tensor names, and groups the
stored tensors into layers. A ``format`` string only selects a decoder from the fixed table
:data:`FORMATS`: nothing named in a config is ever imported or executed. :func:`convert`
rewrites a checkpoint as dense weights, ``sparse-24-bitmask`` or ``sparse-24`` (CUTLASS),
streaming one layer at a time, through the project's atomic writer (``nmref.io.output``).

Values are read as raw bits (bf16 as ``uint16``, fp8 e4m3 as ``uint8``) by memory-mapping
the file after checking its header, so decoding and re-encoding are exact to the bit.
Spec: ``specs/checkpoint_formats.md``.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nmref._json_toml import load_json
from nmsim.formats.compressed_tensors import (
    SPARSE24_KINDS,
    CheckpointFormatError,
    Decoded,
    decode_bitmask,
    decode_sparse24,
    encode_bitmask,
    encode_sparse24,
    nonzero_flags,
)
from nmsim.formats.marlin24 import decode_marlin24

__all__ = [
    "CONVERT_TARGETS",
    "FORMATS",
    "CompressedCheckpoint",
    "Layer",
    "SafetensorsFile",
    "convert",
    "open_checkpoint",
]

#: safetensors dtype -> (NumPy dtype of the raw bits, element kind of values or None).
DTYPES: dict[str, tuple[str, str | None]] = {
    "F16": ("<f2", "fp16"),
    "BF16": ("<u2", "bf16"),
    "F32": ("<f4", "fp32"),
    "I8": ("|i1", "int8"),
    "F8_E4M3": ("|u1", "fp8_e4m3"),
    "F64": ("<f8", None),
    "BOOL": ("|b1", None),
    "U8": ("|u1", None),
    "I16": ("<i2", None),
    "U16": ("<u2", None),
    "I32": ("<i4", None),
    "U32": ("<u4", None),
    "I64": ("<i8", None),
    "U64": ("<u8", None),
}
_KIND_TO_DTYPE = {kind: name for name, (_, kind) in DTYPES.items() if kind is not None}

#: The fixed table of 2:4 formats: the stored suffixes of one layer (after ``<layer>``).
FORMATS: dict[str, tuple[str, ...]] = {
    "sparse-24-bitmask": (".compressed", ".bitmask", ".shape"),
    "sparse-24": (".weight.sparse_24_packed_weight", ".weight.meta"),
    "marlin-24": (".weight_packed", ".scale_packed", ".meta"),
}
#: Formats a checkpoint may name that hold no 2:4 layer (read as plain tensors).
DENSE_FORMATS = ("dense",)
#: ``nmsim convert --to`` choices; ``cutlass`` writes the ``sparse-24`` format.
CONVERT_TARGETS = {
    "dense": "dense",
    "sparse-24-bitmask": "sparse-24-bitmask",
    "cutlass": "sparse-24",
}

_INTEGER_DTYPES = ("I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64")
_HEADER_LIMIT = 100 * 2**20  # safetensors' own limit on the JSON header
_CONFIG_LIMIT = 16 * 2**20


# ---------------------------------------------------------------------------------------------
# safetensors, raw
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One tensor of a ``.safetensors`` file: dtype name, shape and byte range of its data."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsFile:
    """A ``.safetensors`` file whose header is checked before any data is mapped.

    Every entry must name a dtype of :data:`DTYPES`, a shape of non-negative integers and
    a byte range inside the file whose length is the shape's size times the item size; the
    header must be a JSON object under 100 MiB. Tensors are memory-mapped read-only.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        # the wording of nmref's readers: "path='x' is not a valid .safetensors file: ..."
        where = f"path={str(self.path)!r} is not a valid .safetensors file"
        if not self.path.is_file():
            raise ValueError(f"path={str(self.path)!r} is not a regular file")
        size = self.path.stat().st_size
        with open(self.path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ValueError(f"{where}: shorter than 8 bytes")
            (header_size,) = struct.unpack("<Q", prefix)
            if header_size > min(_HEADER_LIMIT, size - 8):
                raise ValueError(
                    f"{where}: its header declares {header_size} bytes (file {size} bytes, "
                    f"limit {_HEADER_LIMIT})"
                )
            raw = handle.read(header_size)
        try:
            header = load_json(raw, f"{where}: its header")
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{where}: its header is not JSON") from None
        if not isinstance(header, dict):
            raise ValueError(f"{where}: its header is not a JSON object")
        self.data_start = 8 + header_size
        data_size = size - self.data_start
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise ValueError(f"{where}: __metadata__ must map names to strings")
        self.metadata: dict[str, str] = metadata
        self.entries: dict[str, Entry] = {}
        for name, item in header.items():
            self.entries[name] = self._entry(where, name, item, data_size)
        # the container check every nmref reader applies (gaps, overlaps, trailing bytes,
        # unknown dtypes): the checks above are per entry, and a file they pass was converted
        # although every other command refused it
        from nmref.io.checkpoints import check_safetensors_file

        check_safetensors_file(self.path)

    @staticmethod
    def _entry(where: str, name: str, item: Any, data_size: int) -> Entry:
        bad = f"{where}: tensor {name!r}"
        if not isinstance(item, dict):
            raise ValueError(f"{bad} has no dtype/shape/data_offsets record")
        dtype, shape, offsets = item.get("dtype"), item.get("shape"), item.get("data_offsets")
        if not isinstance(dtype, str):
            raise ValueError(f"{bad} has dtype {dtype!r}, not a name")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ValueError(f"{bad} has shape {shape!r}; needs a list of integers >= 0")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size
        ):
            raise ValueError(
                f"{bad} has data_offsets {offsets!r} outside the {data_size} data bytes"
            )
        if dtype not in DTYPES:
            # a dtype this reader does not map (F8_E5M2, F4, ...): listed, never read
            return Entry(dtype, tuple(shape), offsets[0], offsets[1])
        itemsize = np.dtype(DTYPES[dtype][0]).itemsize
        needed = math.prod(shape) * itemsize
        if offsets[1] - offsets[0] != needed:
            raise ValueError(
                f"{bad} declares shape {shape} {dtype} ({needed} bytes) but its offsets span "
                f"{offsets[1] - offsets[0]} bytes"
            )
        return Entry(dtype, tuple(shape), offsets[0], offsets[1])

    def array(self, name: str) -> np.ndarray:
        """The raw-bit array of tensor ``name`` (read-only memory map; zeros if empty)."""
        entry = self.entries[name]
        if entry.dtype not in DTYPES:
            raise ValueError(
                f"path={str(self.path)!r}: tensor {name!r} has dtype {entry.dtype!r}, which this "
                f"reader does not read (it reads {', '.join(DTYPES)})"
            )
        dtype = np.dtype(DTYPES[entry.dtype][0])
        if entry.begin == entry.end:
            return np.zeros(entry.shape, dtype=dtype.newbyteorder("="))
        mapped = np.memmap(
            self.path,
            dtype=dtype,
            mode="r",
            offset=self.data_start + entry.begin,
            shape=entry.shape,
        )
        return mapped.view(dtype.newbyteorder("=")) if dtype.byteorder == "<" else mapped


def _safetensors_header(tensors: list[tuple[str, str, tuple[int, ...]]], metadata: dict) -> bytes:
    """Header bytes (length prefix included) for tensors stored back to back in this order."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, dtype, shape in tensors:
        size = math.prod(shape) * np.dtype(DTYPES[dtype][0]).itemsize
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(text)) + text


# ---------------------------------------------------------------------------------------------
# A checkpoint: files, format, layers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One compressed weight: ``name`` is the dense weight's name (``<prefix>.weight``)."""

    name: str
    prefix: str
    parts: dict[str, tuple[int, str]]  # suffix -> (file index, tensor name)
    shape: tuple[int, int]
    kind: str
    format: str  # one of FORMATS: a checkpoint may store its layers in several


@dataclass
class CompressedCheckpoint:
    """A checkpoint whose 2:4 layers are stored in one of :data:`FORMATS`."""

    format: str
    format_source: str
    files: list[SafetensorsFile]
    layers: list[Layer]
    passthrough: list[tuple[int, str]] = field(default_factory=list)

    def raw(self, file_index: int, name: str) -> np.ndarray:
        return self.files[file_index].array(name)

    def _part(self, layer: Layer, suffix: str) -> np.ndarray:
        return self.raw(*layer.parts[suffix])

    def decode(self, layer: Layer) -> Decoded:
        """Decode and validate one layer, in its own format (``marlin-24``: dequantised, as
        float32)."""
        if layer.format == "sparse-24-bitmask":
            return decode_bitmask(
                self._part(layer, ".compressed"),
                self._part(layer, ".bitmask"),
                self._part(layer, ".shape"),
                layer.kind,
                tensor=layer.prefix,
            )
        if layer.format == "sparse-24":
            return decode_sparse24(
                self._part(layer, ".weight.sparse_24_packed_weight"),
                self._part(layer, ".weight.meta"),
                layer.kind,
                tensor=f"{layer.prefix}.weight",
            )
        marlin = decode_marlin24(
            self._part(layer, ".weight_packed"),
            self._part(layer, ".scale_packed"),
            self._part(layer, ".meta"),
            tensor=layer.prefix,
        )
        # quantised ints times fp16 scales are exact in float32
        return Decoded(dense=marlin.dequantized(), mask=marlin.mask, kind="fp32")

    def mask(self, layer: Layer) -> np.ndarray:
        """The stored 2:4 positions of one layer, validated."""
        return self.decode(layer).mask

    def summary(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "format_source": self.format_source,
            "layers": len(self.layers),
            "files": [f.path.name for f in self.files],
        }


def _files_of(path: Path) -> tuple[list[Path], Path | None]:
    """The ``.safetensors`` files of ``path`` and the config.json to read (folders only)."""
    if path.is_file():
        if path.suffix.lower() != ".safetensors":
            raise ValueError(f"{str(path)!r}: compressed checkpoints are .safetensors files")
        return [path], None
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} does not exist")
    config = path / "config.json"
    index = path / "model.safetensors.index.json"
    if index.is_file():
        data = _read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(
            isinstance(v, str) for v in weight_map.values()
        ):
            raise ValueError(f"{str(index)!r}: weight_map must map tensor names to file names")
        names = sorted(set(weight_map.values()))
        for name in names:
            # a shard is a file in this folder: no path separators, no '..'
            if Path(name).name != name or name in ("", ".", ".."):
                raise ValueError(f"{str(index)!r} names shard {name!r} outside its folder")
        files = [path / name for name in names]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{str(path)!r} holds no .safetensors file")
    return files, config if config.is_file() else None


def _read_json(path: Path) -> Any:
    if path.stat().st_size > _CONFIG_LIMIT:
        raise ValueError(f"{str(path)!r} is over {_CONFIG_LIMIT} bytes; not read")
    try:
        return load_json(path.read_bytes(), repr(str(path)))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{str(path)!r} is not valid JSON") from None


def config_format(config: Any, where: str) -> str | None:
    """The 2:4 format a config.json names, or None; the string is only looked up in a table.

    Reads ``quantization_config`` (else ``compression_config``, a key early releases define):
    its ``sparsity_config.format``, else its own ``format`` when that is ``marlin-24``.
    """
    if not isinstance(config, dict):
        raise ValueError(f"{where} is not a JSON object")
    block = config.get("quantization_config", config.get("compression_config"))
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValueError(f"{where}: quantization_config must be an object")
    sparsity = block.get("sparsity_config") or {}
    if not isinstance(sparsity, dict):
        raise ValueError(f"{where}: quantization_config.sparsity_config must be an object")
    name = sparsity.get("format")
    if name is None and block.get("format") == "marlin-24":
        return "marlin-24"
    if name is None:
        return None
    if not isinstance(name, str):
        raise ValueError(f"{where}: sparsity_config.format must be a string, got {name!r}")
    if name in DENSE_FORMATS:
        return None
    if name not in FORMATS:
        raise ValueError(
            f"{where}: sparsity_config.format {name!r} is not a 2:4 format this reader decodes "
            f"(known: {', '.join(FORMATS)}, or dense)"
        )
    return name


def _formats_from_names(names: list[str]) -> list[str]:
    """Every 2:4 format whose tensor names appear, in :data:`FORMATS` order.

    A file may store layers in several (a bitmask layer beside sparse-24 ones): each is
    decoded in its own, never copied as if it were a plain tensor.
    """
    endings = {n.rsplit(".", 1)[-1] for n in names if "." in n}
    found = []
    if {"compressed", "bitmask"} <= endings:
        if "row_offsets" in endings and "sparse_24_packed_weight" not in endings:
            raise ValueError(
                "the tensors are in compressed-tensors' unstructured 'sparse-bitmask' format "
                "(.row_offsets), not a 2:4 format"
            )
        found.append("sparse-24-bitmask")
    if "sparse_24_packed_weight" in endings:
        found.append("sparse-24")
    if {"weight_packed", "scale_packed", "meta"} <= endings:
        found.append("marlin-24")
    return found


def _layer_shape(
    fmt: str, parts: dict[str, tuple[int, str]], files: list[SafetensorsFile], prefix: str
) -> tuple[tuple[int, int], str]:
    def entry(suffix: str) -> Entry:
        index, name = parts[suffix]
        return files[index].entries[name]

    if fmt == "sparse-24-bitmask":
        values = entry(".compressed")
        stored = entry(".shape")
        if stored.dtype not in _INTEGER_DTYPES or math.prod(stored.shape) != 2:
            raise CheckpointFormatError(
                f"{prefix}.shape", f"is {stored.dtype} {list(stored.shape)}; needs 2 integers"
            )
        index, name = parts[".shape"]
        rows, cols = (int(v) for v in files[index].array(name).ravel())
        if rows < 0 or cols < 0:
            raise CheckpointFormatError(f"{prefix}.shape", f"holds a negative size {[rows, cols]}")
    elif fmt == "sparse-24":
        values = entry(".weight.sparse_24_packed_weight")
        if len(values.shape) != 2:
            raise CheckpointFormatError(f"{prefix}.weight.sparse_24_packed_weight", "must be 2-D")
        rows, cols = values.shape[0], 2 * values.shape[1]
    else:
        values = entry(".weight_packed")
        meta = entry(".meta")
        if len(meta.shape) != 2:
            raise CheckpointFormatError(f"{prefix}.meta", "must be 2-D")
        rows, cols = meta.shape[1] // 2, 32 * meta.shape[0]
        return (rows, cols), "fp32"  # decoded as the dequantised float32 weight
    kind = DTYPES.get(values.dtype, ("", None))[1]
    if kind is None:
        raise CheckpointFormatError(
            f"{prefix}{FORMATS[fmt][0]}",
            f"has dtype {values.dtype}; values are F16, BF16, F32, I8 or F8_E4M3",
        )
    return (rows, cols), kind


def open_checkpoint(path: str | os.PathLike[str]) -> CompressedCheckpoint | None:
    """Open a compressed-tensors 2:4 checkpoint; None when it holds no 2:4 layer.

    Parameters
    ----------
    path : path-like
        A ``.safetensors`` file (format from its tensor names) or a model folder
        (``config.json`` and ``model.safetensors.index.json`` or ``*.safetensors``).

    Raises
    ------
    ValueError
        An unreadable file or config; a config naming a format outside :data:`FORMATS`;
        a config that disagrees with the tensor names; a layer missing one of its tensors
        (:class:`~nmsim.formats.compressed_tensors.CheckpointFormatError` names it).

    Notes
    -----
    Reads headers and each bitmask layer's 2-integer ``.shape``; no weight data.
    """
    path = Path(path)
    paths, config_path = _files_of(path)
    declared = None
    if config_path is not None:
        declared = config_format(_read_json(config_path), f"{str(config_path)!r}")
    files = [SafetensorsFile(p) for p in paths]
    names = [(i, n) for i, f in enumerate(files) for n in f.entries]
    owner: dict[str, int] = {}
    for index, name in names:
        if name in owner:
            raise ValueError(
                f"tensor {name!r} is in both {files[owner[name]].path.name!r} and "
                f"{files[index].path.name!r}: which one is meant is ambiguous"
            )
        owner[name] = index
    found = _formats_from_names([n for _, n in names])
    if declared is None and not found:
        return None
    if declared is not None and found and declared not in found:
        raise ValueError(
            f"{str(config_path)!r} says format {declared!r} but the tensors are stored as "
            f"{found[0]!r}"
        )
    formats = found or [declared]
    source = "config.json" if declared else "tensor names"
    # the longest suffix first: sparse-24's '.weight.meta' is not marlin-24's '.meta'
    suffixes = sorted(
        ((suffix, fmt) for fmt in formats for suffix in FORMATS[fmt]), key=lambda s: -len(s[0])
    )
    groups: dict[tuple[str, str], dict[str, tuple[int, str]]] = {}
    passthrough: list[tuple[int, str]] = []
    for index, name in names:
        for suffix, fmt in suffixes:
            if name.endswith(suffix) and len(name) > len(suffix):
                groups.setdefault((fmt, name[: -len(suffix)]), {})[suffix] = (index, name)
                break
        else:
            passthrough.append((index, name))
    if not groups:
        fmt = formats[0]
        raise ValueError(
            f"{str(path)!r}: config.json says format {fmt!r} but no tensor ends in "
            f"{FORMATS[fmt][0]!r}"
        )
    layers = []
    stored_as: dict[str, str] = {}
    for (fmt, prefix), parts in groups.items():
        missing = [s for s in FORMATS[fmt] if s not in parts]
        if missing:
            raise CheckpointFormatError(
                prefix, f"{fmt} layer lacks {', '.join(prefix + s for s in missing)}"
            )
        if prefix in stored_as:
            raise CheckpointFormatError(
                prefix,
                f"is stored twice, as {stored_as[prefix]} and as {fmt}: which one is the "
                "layer is ambiguous",
            )
        stored_as[prefix] = fmt
        shape, kind = _layer_shape(fmt, parts, files, prefix)
        layers.append(Layer(f"{prefix}.weight", prefix, parts, shape, kind, fmt))
    return CompressedCheckpoint(" + ".join(formats), source, files, layers, passthrough)


# ---------------------------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------------------------

_Producer = Callable[[], dict[str, np.ndarray]]


@dataclass(frozen=True)
class _Planned:
    """The output tensors of one input tensor or layer, and how to make them."""

    entries: list[tuple[str, str, tuple[int, ...]]]  # (name, dtype, shape) in write order
    produce: _Producer
    note: str


def _encoded_entries(
    target: str, prefix: str, rows: int, cols: int, kind: str
) -> list[tuple[str, str, tuple[int, ...]]]:
    dtype = _KIND_TO_DTYPE[kind]
    if target == "dense":
        return [(f"{prefix}.weight", dtype, (rows, cols))]
    if target == "sparse-24-bitmask":
        return [
            (f"{prefix}.compressed", dtype, (rows, cols // 2)),
            (f"{prefix}.bitmask", "U8", (rows, -(-cols // 8))),
            (f"{prefix}.shape", "I64", (2, 1)),
        ]
    from nmsim.formats.sparse_2to4 import format_spec

    spec = format_spec(kind)
    meta = "I32" if spec.metadata_dtype.itemsize == 4 else "I16"
    return [
        (f"{prefix}.weight.sparse_24_packed_weight", dtype, (rows, cols // 2)),
        (f"{prefix}.weight.meta", meta, (rows, cols // spec.dense_columns_per_word)),
    ]


def _encode(
    target: str, prefix: str, dense: np.ndarray, kind: str, mask: np.ndarray | None
) -> dict[str, np.ndarray]:
    if target == "dense":
        return {f"{prefix}.weight": dense}
    if target == "sparse-24-bitmask":
        out = encode_bitmask(dense, kind, mask=mask, tensor=f"{prefix}.weight")
        return {f"{prefix}.{key}": value for key, value in out.items()}
    if mask is not None and kind == "fp32":
        pairs = mask.reshape(mask.shape[0], -1, 2).sum(axis=-1)
        if (pairs != 1).any():
            # fp32 sparse-24 is 1:2: a 2:4 bitmask's positions may not fit it, the weight may
            mask = None
    values, meta = encode_sparse24(dense, kind, mask=mask, tensor=f"{prefix}.weight")
    return {f"{prefix}.weight.sparse_24_packed_weight": values, f"{prefix}.weight.meta": meta}


def _kept_dense(error: CheckpointFormatError, kind: str, target: str) -> str:
    """The note of a weight that stays dense because ``target`` cannot hold it.

    fp32 is the one kind whose sparse tensor-core mode is not 2:4: ``sparse-24`` stores it as
    TF32 1:2 (one nonzero per pair), so a perfectly 2:4 fp32 weight does not fit; say that,
    not "not 2:4".
    """
    if kind == "fp32" and target == "sparse-24" and error.row is not None:
        return (
            f"kept dense: fp32 needs 1:2 on the hardware, not 2:4 (sparse-24 stores fp32 as "
            f"TF32, one nonzero per pair; {error}); 2:4 fp32 fits --to sparse-24-bitmask, or "
            "cast it to fp16/bf16 first"
        )
    return f"kept dense: {error}"


def _copy(files: list[SafetensorsFile], index: int, name: str) -> _Planned:
    entry = files[index].entries[name]
    return _Planned(
        [(name, entry.dtype, entry.shape)], lambda: {name: files[index].array(name)}, "copied"
    )


def _plan(source: Path, target: str) -> tuple[list[_Planned], str]:
    checkpoint = open_checkpoint(source)
    plans: list[_Planned] = []
    if checkpoint is not None:
        if target != "dense" and any(layer.format == "marlin-24" for layer in checkpoint.layers):
            raise ValueError(
                f"{str(source)!r} is marlin-24 (quantised): it converts only --to dense, "
                "which writes the dequantised float32 weights"
            )
        for layer in checkpoint.layers:
            rows, cols = layer.shape
            decoded = checkpoint.decode(layer)  # validates; run again when writing
            layer_target, note = target, f"{layer.format} -> {target}"
            if target == "sparse-24" and layer.kind not in SPARSE24_KINDS:
                layer_target = "dense"
                note = f"kept dense: sparse-24 stores {', '.join(SPARSE24_KINDS)}, not {layer.kind}"
            else:
                try:
                    _encode(target, layer.prefix, decoded.dense, decoded.kind, decoded.mask)
                except CheckpointFormatError as error:
                    # e.g. an fp32 2:4 layer, which sparse-24's 1:2 mode cannot hold
                    layer_target, note = "dense", _kept_dense(error, decoded.kind, target)

            def produce(layer: Layer = layer, to: str = layer_target) -> dict[str, np.ndarray]:
                again = checkpoint.decode(layer)
                return _encode(to, layer.prefix, again.dense, again.kind, again.mask)

            entries = _encoded_entries(layer_target, layer.prefix, rows, cols, layer.kind)
            plans.append(_Planned(entries, produce, note))
        if target != "dense" and all(p.note.startswith("kept dense") for p in plans):
            raise ValueError(
                f"{str(source)!r}: no layer fits {target} (the first: {plans[0].note}); "
                "nothing to convert"
            )
        plans += [_copy(checkpoint.files, i, n) for i, n in checkpoint.passthrough]
        return plans, f"{checkpoint.format} (from {checkpoint.format_source})"
    if target == "dense":
        raise ValueError(f"{str(source)!r} holds no compressed 2:4 layer; it is dense already")
    paths, _ = _files_of(source)
    files = [SafetensorsFile(p) for p in paths]
    encoded = 0
    for index, file in enumerate(files):
        for name, entry in file.entries.items():
            kind = DTYPES.get(entry.dtype, ("", None))[1]
            if not (name.endswith(".weight") and len(entry.shape) == 2 and kind is not None):
                plans.append(_copy(files, index, name))
                continue
            prefix = name[: -len(".weight")]
            if target == "sparse-24" and kind not in SPARSE24_KINDS:
                copied = _copy(files, index, name)
                note = f"kept dense: sparse-24 stores {', '.join(SPARSE24_KINDS)}, not {kind}"
                plans.append(_Planned(copied.entries, copied.produce, note))
                continue
            try:
                _encode(target, prefix, file.array(name), kind, None)
            except CheckpointFormatError as error:
                copied = _copy(files, index, name)
                note = _kept_dense(error, kind, target)
                plans.append(_Planned(copied.entries, copied.produce, note))
                continue
            encoded += 1

            def produce(
                file: SafetensorsFile = file,
                name: str = name,
                prefix: str = prefix,
                kind: str = kind,
            ) -> dict[str, np.ndarray]:
                return _encode(target, prefix, file.array(name), kind, None)

            rows, cols = entry.shape
            plans.append(
                _Planned(
                    _encoded_entries(target, prefix, rows, cols, kind),
                    produce,
                    f"dense -> {target}",
                )
            )
    if encoded == 0:
        kept = [p for p in plans if p.note.startswith("kept dense")]
        # the first weight's own reason: "not 2:4" was said of fp32 weights that all were
        why = ""
        if kept:
            name = kept[0].entries[0][0]
            reason = kept[0].note.removeprefix("kept dense: ").replace(f"tensor {name!r}: ", "")
            why = f" (the first, {name!r}: {reason})"
        raise ValueError(
            f"{str(source)!r} has no 2-D '.weight' tensor that {target} can hold{why}; "
            "nothing to convert"
        )
    return plans, "dense"


def _refuse_ambiguous_layers(names: set[str], flag: str, output: Path) -> None:
    """Refuse an output holding a layer twice: dense ``L.weight`` beside compressed ``L.*``.

    A reader could not tell which is the layer's weight (``--to sparse-24-bitmask`` of a
    file holding ``l.weight`` and a compressed ``l`` once wrote both). A format is known
    by its values tensor (``.compressed``, ``.weight.sparse_24_packed_weight``,
    ``.weight_packed``), never by a generic ending such as ``.meta``.
    """
    for name in sorted(names):
        for fmt, suffixes in FORMATS.items():
            prefix = name[: -len(suffixes[0])]
            if name.endswith(suffixes[0]) and prefix and f"{prefix}.weight" in names:
                raise ValueError(
                    f"{flag} {str(output)!r} would hold both {prefix + '.weight'!r} and "
                    f"{name!r} ({fmt}): an ambiguous checkpoint (which is the layer's weight?); "
                    "refused. Remove one of them from the input"
                )


def convert(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    to: str,
    *,
    force: bool = False,
    flag: str = "OUT",
) -> tuple[Path, list[tuple[str, str]]]:
    """Rewrite a checkpoint as dense, ``sparse-24-bitmask`` or ``sparse-24`` (``to="cutlass"``).

    A compressed input is decoded layer by layer and re-encoded with its own stored mask,
    so converting between the two compressed formats and back gives the original bytes
    (except an fp32 bitmask layer whose positions are not 1 per pair: its ``sparse-24``
    positions are chosen from the weight, which must be 1:2). A
    dense input has every 2-D ``*.weight`` tensor that is 2:4 (and, for ``cutlass``, aligned)
    encoded; other tensors are copied bit for bit. The output is one ``.safetensors`` file
    written through :func:`nmref.io.output.write_output` (complete or not at all).

    Returns
    -------
    path : Path
        The file written.
    notes : list of (str, str)
        Per input tensor or layer, what was done (``"copied"``, ``"kept dense: ..."``).

    Raises
    ------
    ValueError
        ``to`` unknown; an unreadable or invalid input (first bad group named); ``output``
        not ``.safetensors``, existing without ``force``, or an input.

    Notes
    -----
    Two passes over the input (validate, then write): memory is one layer's arrays.
    """
    from nmref.io.output import check_output, write_output

    if to not in CONVERT_TARGETS:
        raise ValueError(f"to={to!r} must be one of {tuple(CONVERT_TARGETS)}")
    target = CONVERT_TARGETS[to]
    source, output = Path(source), Path(output)
    if output.suffix.lower() != ".safetensors":
        raise ValueError(f"{flag} {str(output)!r} must end in .safetensors")
    inputs = _files_of(source)[0] if source.exists() else []
    check_output(output, force=force, inputs=inputs, flag=flag)
    plans, origin = _plan(source, target)
    entries = [e for plan in plans for e in plan.entries]
    seen: set[str] = set()
    for name, _, _ in entries:
        if name in seen:
            raise ValueError(f"two output tensors would be named {name!r}")
        seen.add(name)
    _refuse_ambiguous_layers(seen, flag, output)
    metadata = {"format": "pt", "nmsim_converted_from": origin}
    if target != "dense":
        metadata["compressed_tensors_format"] = target

    def write(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            handle.write(_safetensors_header(entries, metadata))
            for plan in plans:
                arrays = plan.produce()
                for name, dtype, shape in plan.entries:
                    array = np.ascontiguousarray(arrays[name])
                    expected = np.dtype(DTYPES[dtype][0])
                    if array.shape != shape or array.dtype.itemsize != expected.itemsize:
                        raise RuntimeError(f"internal: {name} is {array.dtype} {array.shape}")
                    handle.write(array.astype(expected, copy=False).tobytes())

    written = write_output(output, write, force=force, inputs=inputs, flag=flag)
    notes = [(plan.entries[0][0], plan.note) for plan in plans]
    return written, notes


def iter_layers(checkpoint: CompressedCheckpoint) -> Iterator[tuple[Layer, Decoded]]:
    """Each layer decoded, in file order (bounded memory: one layer at a time)."""
    for layer in checkpoint.layers:
        yield layer, checkpoint.decode(layer)


def stored_mask_summary(checkpoint: CompressedCheckpoint, layer: Layer) -> dict[str, Any]:
    """The report's ``stored_mask`` block of one layer: format, validity, kept and zero slots."""
    decoded = checkpoint.decode(layer)
    mask = decoded.mask
    groups = mask.size // 4
    out: dict[str, Any] = {
        "format": layer.format,
        "valid": True,
        "groups": int(groups),
        "stored": int(np.count_nonzero(mask)),
    }
    zero_slots = mask & ~nonzero_flags(decoded.dense, decoded.kind)
    out["stored_zeros"] = int(np.count_nonzero(zero_slots))
    return out
