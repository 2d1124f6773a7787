"""Reading and writing tensor files: ``.npy``, ``.npz`` and ``.safetensors``.

Tensors are streamed one at a time (``.safetensors`` through memory maps), so a
multi-GB checkpoint is processed in bounded memory. NumPy has no bfloat16, so
BF16 tensors are read as their **exact** float32 upcast (bfloat16 is the top
half of a float32) and reported with ``source_dtype="bfloat16"``. Writes are
atomic (a temporary file in the target folder, then a rename) and never
replace the input file.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["FORMATS", "TensorRecord", "iter_tensors", "write_tensors"]

FORMATS = (".npy", ".npz", ".safetensors")


@dataclass(frozen=True)
class TensorRecord:
    """One tensor read from a file.

    Attributes
    ----------
    name : str
        Key in the file (``.npy`` files use their file stem).
    array : ndarray
        The values; BF16 tensors are upcast exactly to float32.
    source_dtype : str
        The dtype stored in the file (``"bfloat16"`` for BF16).
    """

    name: str
    array: NDArray
    source_dtype: str


def _suffix(path: Path, argument: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{argument}={str(path)!r} must end in one of {', '.join(FORMATS)}")
    return suffix


def _safetensors_header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(header_size))
    return header, 8 + header_size


def _iter_safetensors(path: Path) -> Iterator[TensorRecord]:
    try:
        from safetensors import safe_open
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "reading .safetensors needs the 'safetensors' package: "
            "pip install 'nm-sparsity-ref[io]'"
        ) from error
    header = None
    with safe_open(str(path), framework="np") as handle:
        for name in handle.keys():
            dtype = handle.get_slice(name).get_dtype()
            if dtype != "BF16":
                array = handle.get_tensor(name)
                yield TensorRecord(name, array, str(array.dtype))
                continue
            if header is None:
                header, data_start = _safetensors_header(path)
            entry = header[name]
            begin, end = entry["data_offsets"]
            raw = np.memmap(
                path, dtype="<u2", mode="r", offset=data_start + begin, shape=((end - begin) // 2,)
            )
            # bfloat16 bits are the high half of the float32 with the same value.
            upcast = (raw.astype(np.uint32) << 16).view(np.float32)
            yield TensorRecord(name, upcast.reshape(entry["shape"]), "bfloat16")


def iter_tensors(path: str | os.PathLike[str]) -> Iterator[TensorRecord]:
    """Yield every tensor of a ``.npy``, ``.npz`` or ``.safetensors`` file, one at a time.

    Parameters
    ----------
    path : path-like

    Yields
    ------
    TensorRecord

    Raises
    ------
    ValueError
        If the extension is not one of ``.npy``, ``.npz``, ``.safetensors``, or
        the file is not a valid file of that kind.
    FileNotFoundError
        If the file does not exist.
    """
    path = Path(path)
    suffix = _suffix(path, "path")
    if not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r} does not exist or is not a file")
    try:
        if suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            yield TensorRecord(path.stem, array, str(array.dtype))
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                for name in archive.files:
                    array = archive[name]
                    yield TensorRecord(name, array, str(array.dtype))
        else:
            yield from _iter_safetensors(path)
    except (zipfile.BadZipFile, struct.error, UnicodeDecodeError, ValueError) as error:
        # ValueError covers NumPy's bad headers and its refusal of pickled objects.
        raise ValueError(f"path={str(path)!r} is not a valid {suffix} file: {error}") from error
    except Exception as error:
        # safetensors raises its own SafetensorError for corrupt files.
        if type(error).__name__ == "SafetensorError":
            raise ValueError(f"path={str(path)!r} is not a valid {suffix} file: {error}") from error
        raise


def _same_file(first: Path, second: Path) -> bool:
    if first.exists() and second.exists():
        return first.samefile(second)
    return first.resolve() == second.resolve()


def write_tensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, NDArray],
    *,
    inputs: tuple[str | os.PathLike[str], ...] = (),
    overwrite: bool = False,
) -> Path:
    """Write tensors atomically to a ``.npy``, ``.npz`` or ``.safetensors`` file.

    Parameters
    ----------
    path : path-like
        Destination; its extension chooses the format. ``.npy`` holds exactly
        one tensor.
    tensors : mapping of str to ndarray
    inputs : tuple of path-like
        Files the tensors were read from; writing over any of them is refused.
    overwrite : bool, default False
        Replace an existing destination (never an input).

    Returns
    -------
    Path
        The destination.

    Raises
    ------
    ValueError
        If the destination is an input, exists and ``overwrite`` is false, has an
        unknown extension, or is ``.npy`` with other than one tensor.
    """
    path = Path(path)
    suffix = _suffix(path, "output")
    for source in inputs:
        if _same_file(path, Path(source)):
            raise ValueError(f"output={str(path)!r} is an input file; refusing to overwrite it")
    if path.exists() and not overwrite:
        raise ValueError(f"output={str(path)!r} exists; pass --force to replace it")
    if suffix == ".npy" and len(tensors) != 1:
        raise ValueError(
            f"output={str(path)!r} is .npy, which holds one tensor, but there are "
            f"{len(tensors)}; use .npz or .safetensors"
        )
    directory = path.parent if str(path.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=directory)
    os.close(descriptor)
    try:
        if suffix == ".npy":
            (array,) = tensors.values()
            with open(temporary, "wb") as handle:
                np.save(handle, np.asarray(array), allow_pickle=False)
        elif suffix == ".npz":
            with open(temporary, "wb") as handle:
                np.savez(handle, **{name: np.asarray(a) for name, a in tensors.items()})
        else:
            from safetensors.numpy import save_file

            save_file({name: np.ascontiguousarray(a) for name, a in tensors.items()}, temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
