"""Write a ``.safetensors`` file one tensor at a time (memory: one tensor, not the file).

``safetensors.numpy.save_file`` needs every array in memory at once; a shard of a
7B-parameter checkpoint is several GB. The format is simple enough to stream: an
8-byte little-endian header length, a JSON header giving each tensor's dtype, shape
and ``[begin, end)`` byte offsets into the data that follows (padded with spaces to
a multiple of 8 bytes, as safetensors writes it), then the tensors' bytes, back to
back, in offset order. All shapes and dtypes are known before any data is computed,
so the header is written first and each tensor's bytes are appended as they arrive.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "SAFETENSORS_CODES",
    "PlannedTensor",
    "bfloat16_bits",
    "check_safetensors_names",
    "stream_safetensors",
]

#: The header key safetensors keeps for the file's metadata: never a tensor's name.
METADATA_KEY = "__metadata__"

#: NumPy dtype name -> safetensors dtype code ("bfloat16" is written from uint16 bits).
SAFETENSORS_CODES = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "uint16": "U16",
    "int16": "I16",
    "uint32": "U32",
    "int32": "I32",
    "uint64": "U64",
    "int64": "I64",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
    "float64": "F64",
}

_ITEMSIZE = {"bfloat16": 2}


@dataclass(frozen=True)
class PlannedTensor:
    """A tensor of the file to write: its name, shape and dtype name (a key of the codes)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        """Bytes of its data."""
        itemsize = _ITEMSIZE.get(self.dtype) or np.dtype(self.dtype).itemsize
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize


def bfloat16_bits(array: NDArray[np.float32]) -> NDArray[np.uint16]:
    """The bfloat16 bit patterns of float32 values that are bfloat16 values (exact).

    Raises ``ValueError`` if a value would lose bits (it is not a bfloat16 value).
    """
    bits = np.ascontiguousarray(array, dtype="<f4").view("<u4")
    if np.any(bits & 0xFFFF):
        raise ValueError("values are not all bfloat16 values; refusing to round them")
    return (bits >> 16).astype("<u2")


def check_safetensors_names(names: Iterable[object]) -> None:
    """Refuse tensor names that would not come back from a ``.safetensors`` file as written.

    Raises
    ------
    ValueError
        One line naming the tensor: a name that is not a string, is not valid UTF-8 (a
        lone surrogate, as a non-UTF-8 file name decodes to), is ``__metadata__`` (the
        header's metadata key: a tensor of that name makes a file no reader accepts), or
        is given twice (one would be silently dropped).
    """
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str):
            raise ValueError(f"tensor name {name!r} must be a string")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"tensor name {name!r} is not valid UTF-8; .safetensors names must be"
            ) from None
        if name == METADATA_KEY:
            raise ValueError(
                f"tensor name {name!r} is reserved in .safetensors (the header's metadata "
                "key; no reader accepts such a file); rename the tensor or write .npz"
            )
        if name in seen:
            raise ValueError(f"two tensors would be named {name!r}; one would be lost")
        seen.add(name)


def stream_safetensors(
    path: str,
    planned: Sequence[PlannedTensor],
    arrays: Iterator[tuple[str, NDArray]],
    metadata: dict[str, str] | None = None,
) -> int:
    """Write ``planned`` tensors to ``path``, taking their data from ``arrays`` in order.

    Parameters
    ----------
    path : str
        File to create (a temporary path of :mod:`nmref.io.output`).
    planned : sequence of PlannedTensor
        Every tensor, in the order ``arrays`` yields them (that is the data order).
    arrays : iterator of (name, ndarray)
        Each planned tensor's values, one at a time; BF16 ones as float32 holding
        bfloat16 values (written as their top 16 bits).
    metadata : dict of str to str, optional
        The header's ``__metadata__``.

    Returns
    -------
    int
        Bytes of tensor data written.

    Raises
    ------
    ValueError
        If ``arrays`` yields another name, shape or dtype than planned (BF16: float32
        holding BF16 values), or too few; if a planned name would not be read back
        (:func:`check_safetensors_names`), before anything is written.

    Notes
    -----
    Time O(bytes); memory one tensor (the largest), whatever the file's size.
    """
    check_safetensors_names(tensor.name for tensor in planned)
    header: dict[str, object] = {}
    if metadata:
        header[METADATA_KEY] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for tensor in planned:
        if tensor.dtype not in SAFETENSORS_CODES:
            raise ValueError(f"tensor {tensor.name!r}: dtype {tensor.dtype} cannot be written")
        header[tensor.name] = {
            "dtype": SAFETENSORS_CODES[tensor.dtype],
            "shape": [int(d) for d in tensor.shape],
            "data_offsets": [offset, offset + tensor.nbytes],
        }
        offset += tensor.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        for tensor in planned:
            try:
                name, array = next(arrays)
            except StopIteration:
                raise ValueError(f"tensor {tensor.name!r} was planned but never given") from None
            if name != tensor.name or tuple(array.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"got tensor {name!r} {tuple(array.shape)}, expected {tensor.name!r} "
                    f"{tuple(tensor.shape)}"
                )
            given = np.float32 if tensor.dtype == "bfloat16" else np.dtype(tensor.dtype)
            if np.asarray(array).dtype != given:  # never a silent cast
                raise ValueError(
                    f"tensor {name!r} is {np.asarray(array).dtype}, planned {tensor.dtype}"
                )
            if tensor.dtype == "bfloat16":
                data = bfloat16_bits(array)
            else:
                data = np.ascontiguousarray(array, dtype=np.dtype(tensor.dtype).newbyteorder("<"))
            if data.nbytes != tensor.nbytes:  # pragma: no cover - guarded by the checks above
                raise ValueError(f"tensor {name!r}: {data.nbytes} bytes, planned {tensor.nbytes}")
            handle.write(memoryview(data.reshape(-1)).cast("B"))
    return offset
