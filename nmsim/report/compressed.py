"""``nmsim report`` on compressed-tensors 2:4 checkpoints: the source, decoded one layer at a time.

A checkpoint in one of the formats of :data:`nmsim.formats.compressed_checkpoint.FORMATS`
is read through :func:`~nmsim.formats.compressed_checkpoint.open_checkpoint`: each compressed
layer appears under its dense name (``<layer>.weight``) with its dense shape, is decoded and
validated when analysed, and its stored mask is summarised in the tensor's ``stored_mask``
block (format, validity, stored positions, stored zeros). Other tensors (biases, norms,
embeddings) are read as they are. The report's ``checkpoint.compressed`` block states the
format and where it was read from (``specs/report.md``, ``specs/checkpoint_formats.md``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from nmref.io.checkpoints import TensorInfo, TensorRecord
from nmsim.formats.compressed_checkpoint import (
    DTYPES,
    CompressedCheckpoint,
    open_checkpoint,
    stored_mask_summary,
)
from nmsim.formats.compressed_tensors import CheckpointFormatError, to_float32

__all__ = ["compressed_entries", "compressed_source", "load_compressed", "stored_mask"]

#: How a stored element kind is named in the report's ``source_dtype``.
_DTYPE_NAMES = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "int8": "int8",
    "fp8_e4m3": "float8_e4m3fn",
}
_RAW_NAMES = {
    name: _DTYPE_NAMES.get(kind or "", np.dtype(raw).name) for name, (raw, kind) in DTYPES.items()
}


@lru_cache(maxsize=4)
def _open(location: str) -> CompressedCheckpoint:
    checkpoint = open_checkpoint(location)
    if checkpoint is None:
        raise ValueError(f"{location!r} holds no compressed 2:4 layer")
    return checkpoint


def compressed_source(path: Path) -> dict[str, Any] | None:
    """The report's ``checkpoint`` block when ``path`` is a compressed 2:4 checkpoint, else None.

    Only a ``.safetensors`` file or a folder is looked at; anything else is None (the plain
    readers take over and give their own errors).
    """
    if not (path.is_dir() or (path.is_file() and path.suffix.lower() == ".safetensors")):
        return None
    if path.is_dir() and not any(path.glob("*.safetensors")):
        return None  # not a safetensors model folder: the plain readers say what it is
    checkpoint = open_checkpoint(path)
    if checkpoint is None:
        return None
    _open.cache_clear()
    summary = checkpoint.summary()
    return {
        "source": str(path),
        "kind": "file",
        "synthetic": False,
        "description": f"{path.name} (compressed-tensors {checkpoint.format} checkpoint)",
        "metadata": dict(sorted(checkpoint.files[0].metadata.items())),
        "compressed": summary,
    }


def compressed_entries(location: str) -> list[TensorInfo]:
    """Layers under their dense names and shapes and the other tensors, sorted by name (the
    order safetensors lists a file in), without data."""
    checkpoint = _open(location)
    infos = [TensorInfo(x.name, x.shape, _DTYPE_NAMES[x.kind]) for x in checkpoint.layers]
    for index, name in checkpoint.passthrough:
        entry = checkpoint.files[index].entries[name]
        infos.append(TensorInfo(name, entry.shape, _RAW_NAMES.get(entry.dtype, entry.dtype)))
    return sorted(infos, key=lambda info: info.name)


def _layer(checkpoint: CompressedCheckpoint, name: str) -> Any:
    return next((layer for layer in checkpoint.layers if layer.name == name), None)


def _weight_scale(checkpoint: CompressedCheckpoint, layer: Any) -> np.ndarray | None:
    """``<layer>.weight_scale`` as a float32 column, when it is one scale per row or per tensor.

    Quantised 2:4 layers (fp8, int8) keep their scale beside the compressed tensors (vLLM's
    compressed-tensors 2:4 scheme reads it per channel, ``(rows, 1)``, or per tensor).
    """
    name = f"{layer.prefix}.weight_scale"
    found = next(((i, n) for i, n in checkpoint.passthrough if n == name), None)
    if found is None or layer.kind not in ("fp8_e4m3", "int8"):
        return None
    entry = checkpoint.files[found[0]].entries[name]
    rows = layer.shape[0]
    kind = DTYPES.get(entry.dtype, ("", None))[1]
    if kind not in ("fp16", "bf16", "fp32") or entry.shape not in ((rows, 1), (rows,), (1,), ()):
        return None
    scale = to_float32(np.asarray(checkpoint.raw(*found)), kind)
    return scale.reshape(-1, 1) if scale.size == rows else scale.reshape(1, 1)


@lru_cache(maxsize=1)
def _decoded(location: str, name: str) -> tuple[np.ndarray, dict[str, Any]]:
    checkpoint = _open(location)
    layer = _layer(checkpoint, name)
    decoded = checkpoint.decode(layer)
    weight = to_float32(decoded.dense, decoded.kind)
    scale = _weight_scale(checkpoint, layer)
    if scale is not None:
        weight = weight * scale  # float32, rounded: the report's magnitudes, not stored bits
    return weight, stored_mask_summary(checkpoint, layer)


def stored_mask(location: str, name: str) -> tuple[dict[str, Any] | None, str, str | None]:
    """``(stored_mask block or None, status, problem or None)`` for one listed tensor.

    A layer that breaks its format gets ``valid: false``, status ``"error"`` and the message
    naming the stored tensor and the first bad group. ``marlin-24`` layers are analysed as
    their dequantised float32 weights.
    """
    checkpoint = _open(location)
    layer = _layer(checkpoint, name)
    if layer is None:
        return None, "ok", None
    try:
        _, block = _decoded(location, name)
    except CheckpointFormatError as error:
        return (
            {"format": checkpoint.format, "valid": False, "error": str(error)},
            "error",
            str(error),
        )
    return block, "ok", None


def load_compressed(location: str, name: str) -> TensorRecord:
    """One tensor as float32: a layer decoded (exactly), any other tensor as stored."""
    checkpoint = _open(location)
    layer = _layer(checkpoint, name)
    if layer is not None:
        dense, _ = _decoded(location, name)
        return TensorRecord(name, dense, _DTYPE_NAMES[layer.kind])
    index, stored = next((i, n) for i, n in checkpoint.passthrough if n == name)
    entry = checkpoint.files[index].entries[stored]
    raw = checkpoint.raw(index, stored)
    kind = DTYPES.get(entry.dtype, ("", None))[1]
    array = to_float32(np.asarray(raw), kind) if kind in ("bf16", "fp8_e4m3") else np.asarray(raw)
    return TensorRecord(name, array, _RAW_NAMES.get(entry.dtype, entry.dtype))


def compressed_line(report: dict[str, Any]) -> str | None:
    """One line for the table output: the format, where it was read, and the masks' check."""
    block = report["checkpoint"].get("compressed")
    if block is None:
        return None
    masks = [e["stored_mask"] for e in report["tensors"] if e.get("stored_mask")]
    valid = [m for m in masks if m["valid"]]
    line = (
        f"compressed-tensors {block['format']} checkpoint (format from {block['format_source']}): "
        f"{len(masks)} stored 2:4 mask(s) decoded, {len(valid)} valid, "
        f"{len(masks) - len(valid)} invalid"
    )
    stored = sum(m.get("stored", 0) for m in valid)
    zeros = sum(m.get("stored_zeros", 0) for m in valid)
    if stored and any("stored_zeros" in m for m in valid):
        line += f"; {zeros} of {stored} stored slots hold zeros (under-full groups)"
    return line
