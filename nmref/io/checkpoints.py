"""Reading and writing tensor files: ``.npy``, ``.npz``, ``.safetensors`` (and reading ``.pt``).

Tensors are streamed one at a time (``.safetensors`` through memory maps), so a
multi-GB checkpoint is processed in bounded memory. NumPy has no bfloat16, so
BF16 tensors are read as their **exact** float32 upcast (bfloat16 is the top
half of a float32) and reported with ``source_dtype="bfloat16"``. Writes are
atomic (a temporary file in the target folder, then a rename) and never
replace the input file.

PyTorch ``.pt``/``.pth`` state dicts are read (never written) when torch is
installed, with ``torch.load(..., weights_only=True, mmap=True)``: no pickled
code runs, and tensors stay memory-mapped until used. Nested dictionaries are
flattened with ``.`` (``{"model": {"fc.weight": t}}`` gives ``model.fc.weight``);
non-tensor entries are ignored.

Besides streaming everything (:func:`iter_tensors`), :func:`list_tensors` reads
names, shapes and dtypes without the data, and :func:`read_tensor` reads one
tensor by name, so that separate processes can share the work on one file.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from nmref.io.output import output_file, write_output

__all__ = [
    "FORMATS",
    "READ_FORMATS",
    "TensorInfo",
    "TensorNotFoundError",
    "TensorRecord",
    "iter_tensors",
    "list_tensors",
    "read_tensor",
    "read_tensor_rows",
    "write_tensors",
]

FORMATS = (".npy", ".npz", ".safetensors")
READ_FORMATS = (*FORMATS, ".pt", ".pth")


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


@dataclass(frozen=True)
class TensorInfo:
    """Name, shape and stored dtype of one tensor, read without its data."""

    name: str
    shape: tuple[int, ...]
    source_dtype: str


def _suffix(path: Path, argument: str, formats: tuple[str, ...] = FORMATS) -> str:
    suffix = path.suffix.lower()
    if suffix not in formats:
        raise ValueError(f"{argument}={str(path)!r} must end in one of {', '.join(formats)}")
    return suffix


def _safetensors_header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as handle:
        (header_size,) = struct.unpack("<Q", handle.read(8))
        # checked before reading: a lying length (2**63) would ask read() for that much
        if header_size > os.fstat(handle.fileno()).st_size - 8:
            raise ValueError(
                f"its header length {header_size} runs past the end of the file (truncated, "
                "or a lying header)"
            )
        header = json.loads(handle.read(header_size))
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    return header, 8 + header_size


def _safe_open(path: Path) -> object:
    try:
        from safetensors import safe_open
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "reading .safetensors needs the 'safetensors' package: "
            "pip install 'nm-sparsity-ref[io]'"
        ) from error
    return safe_open(str(path), framework="np")


def _bf16_upcast(path: Path, name: str) -> TensorRecord:
    header, data_start = _safetensors_header(path)
    entry = header[name]
    begin, end = entry["data_offsets"]
    raw = np.memmap(
        path, dtype="<u2", mode="r", offset=data_start + begin, shape=((end - begin) // 2,)
    )
    # bfloat16 bits are the high half of the float32 with the same value; shifted in
    # place, so the upcast is one float32 copy (a `<< 16` expression made a second one)
    bits = raw.astype(np.uint32)
    bits <<= 16
    return TensorRecord(name, bits.view(np.float32).reshape(entry["shape"]), "bfloat16")


#: safetensors dtypes read by memory-mapping the file (little-endian, as the format stores).
_MAPPABLE = {
    "BOOL": "|b1",
    "U8": "|u1",
    "I8": "|i1",
    "U16": "<u2",
    "I16": "<i2",
    "U32": "<u4",
    "I32": "<i4",
    "U64": "<u8",
    "I64": "<i8",
    "F16": "<f2",
    "F32": "<f4",
    "F64": "<f8",
}


def _safetensors_record(path: Path, handle: object, name: str) -> TensorRecord:
    """One tensor, memory-mapped read-only where its dtype allows (no copy in memory).

    ``safe_open`` has validated the header and offsets when the file was opened;
    ``get_tensor`` would copy the whole tensor into memory, which doubled the peak of
    reading a large checkpoint.
    """
    kind = handle.get_slice(name).get_dtype()  # type: ignore[attr-defined]
    if kind == "BF16":
        return _bf16_upcast(path, name)
    if kind in _MAPPABLE:
        header, data_start = _safetensors_header(path)
        entry = header[name]
        begin, end = entry["data_offsets"]
        dtype = np.dtype(_MAPPABLE[kind])
        shape = tuple(int(d) for d in entry["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * dtype.itemsize:
            raise ValueError(
                f"tensor {name!r} declares shape {shape} {kind} ({count * dtype.itemsize} "
                f"bytes) but its offsets span {end - begin} bytes"
            )
        if count == 0:
            array = np.zeros(shape, dtype=dtype)
        else:
            array = np.memmap(path, dtype=dtype, mode="r", offset=data_start + begin, shape=shape)
        return TensorRecord(name, array, str(dtype.newbyteorder("=")))
    array = handle.get_tensor(name)  # type: ignore[attr-defined]
    return TensorRecord(name, array, str(array.dtype))


def _iter_safetensors(path: Path) -> Iterator[TensorRecord]:
    with _safe_open(path) as handle:
        for name in handle.keys():
            yield _safetensors_record(path, handle, name)


def _read_safetensors(path: Path, name: str) -> TensorRecord:
    with _safe_open(path) as handle:
        if name not in handle.keys():
            raise _missing(path, name)
        return _safetensors_record(path, handle, name)


def read_tensor_rows(
    path: str | os.PathLike[str], name: str, start: int, stop: int
) -> TensorRecord:
    """Rows ``start:stop`` (first axis) of one tensor; reads only those rows where it can.

    A ``.safetensors`` tensor is memory-mapped over just that row range (BF16 upcast
    only there), so that a row band of a large tensor costs the band, not the tensor
    (``nmref.io.distributed``). Other formats read the tensor and slice it.

    Raises
    ------
    ValueError
        If the tensor has no rows to slice (0-d) or ``0 <= start <= stop`` fails.
    TensorNotFoundError, FileNotFoundError, ImportError
        As :func:`read_tensor`.
    """
    path = _existing(path)
    if path.suffix.lower() != ".safetensors":
        record = read_tensor(path, name)
        return TensorRecord(name, record.array[start:stop], record.source_dtype)
    with _file_errors(path):
        with _safe_open(path) as handle:
            if name not in handle.keys():
                raise _missing(path, name)
            kind = handle.get_slice(name).get_dtype()  # type: ignore[attr-defined]
        header, data_start = _safetensors_header(path)
        entry = header[name]
        shape = tuple(int(d) for d in entry["shape"])
        if not shape or not 0 <= start <= stop:
            raise ValueError(f"tensor {name!r} {shape}: rows {start}:{stop} cannot be read")
        stop = min(stop, shape[0])
        start = min(start, stop)
        if kind not in _MAPPABLE and kind != "BF16":
            record = read_tensor(path, name)
            return TensorRecord(name, record.array[start:stop], record.source_dtype)
        itemsize = 2 if kind == "BF16" else np.dtype(_MAPPABLE[kind]).itemsize
        row_items = int(np.prod(shape[1:], dtype=np.int64))
        band = (stop - start, *shape[1:])
        begin = data_start + entry["data_offsets"][0] + start * row_items * itemsize
        if (stop - start) * row_items == 0:
            dtype = np.float32 if kind == "BF16" else np.dtype(_MAPPABLE[kind])
            return TensorRecord(name, np.zeros(band, dtype), _source_name(kind))
        if kind == "BF16":
            raw = np.memmap(path, dtype="<u2", mode="r", offset=begin, shape=band)
            bits = raw.astype(np.uint32)
            bits <<= 16
            return TensorRecord(name, bits.view(np.float32), "bfloat16")
        dtype = np.dtype(_MAPPABLE[kind])
        array = np.memmap(path, dtype=dtype, mode="r", offset=begin, shape=band)
        return TensorRecord(name, array, _source_name(kind))


def _source_name(kind: str) -> str:
    return "bfloat16" if kind == "BF16" else str(np.dtype(_MAPPABLE[kind]).newbyteorder("="))


def memory_budget() -> int:
    """Largest array (bytes) a reader decompresses into memory: ``NMREF_MEMORY_BUDGET_GIB``
    (default 4 GiB). Memory-mapped formats (``.npy``, ``.safetensors``) are not bounded by it."""
    raw = os.environ.get("NMREF_MEMORY_BUDGET_GIB", "4")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"NMREF_MEMORY_BUDGET_GIB={raw!r} must be a number of GiB") from None
    if not value > 0:
        raise ValueError(f"NMREF_MEMORY_BUDGET_GIB={raw!r} must be > 0")
    return int(value * 2**30)


def read_npy_header(handle: object) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, header bytes)`` of the ``.npy`` stream at ``handle``; reads no data.

    The one place the project parses a ``.npy`` header (``.npz`` members, ``nmsim
    compress``/``inspect``): sizes are checked against it before anything is allocated.
    """
    version = np.lib.format.read_magic(handle)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, _, dtype = read_header(handle)
    if any(size < 0 for size in shape):
        # NumPy parses (-1, 4) as a shape; it describes no array, and -1 elements times
        # the item size would make the size checks below meaningless
        raise ValueError(f"declares shape {tuple(shape)} {dtype}: a negative dimension")
    return tuple(shape), dtype, handle.tell()  # type: ignore[attr-defined]


def _check_npz_members(path: Path, names: Sequence[str] | None = None) -> None:
    """Refuse ``.npz`` members whose header lies about their size or that exceed the budget.

    ``np.load`` trusts a member's header and allocates what it declares before reading: a
    301-byte file declaring a (2**20, 2**20) array asks for 8 TiB. The declared size must
    equal the member's uncompressed size, and fit :func:`memory_budget` (a zip bomb's
    members are honest but huge). Only headers are read.
    """
    budget = memory_budget()
    with zipfile.ZipFile(path) as archive:
        seen: set[str] = set()
        for info in archive.infolist():
            # zipfile reads the last of two same-named members, list_tensors sees both: refuse
            if info.filename in seen:
                raise ValueError(
                    f"member {info.filename.removesuffix('.npy')!r} appears more than once: "
                    "an ambiguous archive"
                )
            seen.add(info.filename)
        for info in archive.infolist():
            name = info.filename.removesuffix(".npy")
            if names is not None and name not in names:
                continue
            with archive.open(info) as handle:
                shape, dtype, header_bytes = read_npy_header(handle)
            declared = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
            if dtype.hasobject:
                continue  # np.load(allow_pickle=False) refuses these itself
            if declared + header_bytes != info.file_size:
                raise ValueError(
                    f"member {name!r} declares shape {tuple(shape)} {dtype} ({declared} bytes) but "
                    f"holds {info.file_size - header_bytes} bytes: a corrupt or lying header"
                )
            if declared > budget:
                raise ValueError(
                    f"member {name!r} ({tuple(shape)} {dtype}) would take {declared / 2**30:.3g} "
                    f"GiB in memory, over the {budget / 2**30:.3g} GiB budget; set "
                    "NMREF_MEMORY_BUDGET_GIB to raise it"
                )


def iter_tensors(path: str | os.PathLike[str]) -> Iterator[TensorRecord]:
    """Yield every tensor of a tensor file (:data:`READ_FORMATS`), one at a time.

    Parameters
    ----------
    path : path-like

    Yields
    ------
    TensorRecord

    Raises
    ------
    ValueError
        If the extension is not one of :data:`READ_FORMATS`, or the file is not
        a valid file of that kind (truncated, corrupt, pickled objects; a
        ``.pt``/``.pth`` that ``torch.save`` did not write: "not a readable
        PyTorch checkpoint").
    FileNotFoundError
        If the file does not exist (a folder, FIFO or device: ``ValueError``).
    ImportError
        For ``.safetensors`` without the safetensors package, ``.pt`` without torch.
    """
    path = _existing(path)
    suffix = path.suffix.lower()
    with _file_errors(path):
        if suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            yield TensorRecord(path.stem, array, str(array.dtype))
        elif suffix == ".npz":
            _check_npz_members(path)
            with np.load(path, allow_pickle=False) as archive:
                for name in archive.files:
                    array = archive[name]
                    yield TensorRecord(name, array, str(array.dtype))
        elif suffix == ".safetensors":
            yield from _iter_safetensors(path)
        else:
            for name, tensor in _torch_tensors(path):
                yield _torch_record(name, tensor)


# ----------------------------------------------------------------------------
# Errors, listing and random access
# ----------------------------------------------------------------------------


def check_regular_file(path: Path, named: str, noun: str = "tensor file") -> None:
    """Refuse a folder, FIFO, socket or device, or a missing path, in one line.

    ``named`` is how the message names the path (``"path='w.npy'"``, ``"checkpoint
    'w.npy'"``). Nothing is opened: a FIFO would block the reader, a device never ends.
    """
    if path.is_file():
        return
    if path.is_dir():
        raise ValueError(f"{named} is a folder, not a {noun}")
    if path.exists():
        raise ValueError(
            f"{named} is not a regular file (a FIFO, socket or device); it is not opened"
        )
    raise FileNotFoundError(f"{named} does not exist")


def _existing(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    _suffix(path, "path", READ_FORMATS)
    check_regular_file(path, f"path={str(path)!r}")
    return path


class TensorNotFoundError(KeyError):
    """:func:`read_tensor` was asked for a name the file does not hold."""

    def __str__(self) -> str:
        return str(self.args[0])


def _missing(path: Path, name: str) -> TensorNotFoundError:
    return TensorNotFoundError(f"path={str(path)!r} has no tensor named {name!r}")


@contextlib.contextmanager
def _file_errors(path: Path) -> Iterator[None]:
    """Turn every reader's own exception for a corrupt file into one ``ValueError``."""
    suffix = path.suffix.lower()
    try:
        yield
    except (TensorNotFoundError, _NotACheckpoint):
        raise
    except (
        zipfile.BadZipFile,
        struct.error,
        UnicodeDecodeError,
        ValueError,  # NumPy's bad headers and its refusal of pickled objects
        KeyError,  # a safetensors header without the fields it needs
        EOFError,
        pickle.UnpicklingError,  # torch's weights_only refusal
    ) as error:
        raise ValueError(
            f"path={str(path)!r} is not a valid {suffix} file: {_first_line(error)}"
        ) from error
    except Exception as error:
        # safetensors raises SafetensorError; torch raises RuntimeError for bad archives.
        if type(error).__name__ == "SafetensorError" or (
            suffix in (".pt", ".pth") and isinstance(error, RuntimeError)
        ):
            raise ValueError(
                f"path={str(path)!r} is not a valid {suffix} file: {_first_line(error)}"
            ) from error
        raise


def _first_line(error: BaseException) -> str:
    """The first line of a message: torch's run to a page, and errors here are one line."""
    if isinstance(error, pickle.UnpicklingError):
        return "it holds pickled objects other than tensors, which weights_only loading refuses"
    lines = str(error).strip().splitlines()
    line = lines[0] if lines else type(error).__name__
    # NumPy's words for a header that lies, in the reader's terms (and without a memory address)
    if line.startswith("mmap length is greater than file size"):
        return "its header declares more data than the file holds (truncated, or a lying header)"
    if line.startswith("malformed node or string"):
        return "its header is not a Python literal (a corrupt or hostile .npy header)"
    return line


_SAFETENSORS_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "U32": "uint32",
    "I32": "int32",
    "U64": "uint64",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


# torch.save writes a zip archive (torch >= 1.6) or, before, a pickle stream opening with
# protocol 2+ (``\x80``) and then torch's magic number pickled as a 10-byte LONG1.
_ZIP_SIGNATURE = b"PK\x03\x04"
_LEGACY_TORCH_MAGIC = b"\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


class _NotACheckpoint(ValueError):
    """A ``.pt``/``.pth`` file that torch.save did not write (say so, not torch's error)."""


def _check_torch_signature(path: Path) -> None:
    """Refuse files that are not PyTorch checkpoints before torch reads them.

    On arbitrary bytes ``torch.load`` fails in ways that mislead: an ``IndexError``
    ("pop from empty list"), or a weights_only refusal that reads as if the file held
    pickled code. A checkpoint starts with a zip signature or with torch's magic number.
    """
    with open(path, "rb") as handle:
        head = handle.read(64)
    if head.startswith(_ZIP_SIGNATURE) or (head[:1] == b"\x80" and _LEGACY_TORCH_MAGIC in head):
        return
    found = "the file is empty" if not head else f"it starts with {head[:8]!r}"
    raise _NotACheckpoint(
        f"path={str(path)!r} is not a readable PyTorch checkpoint: torch.save writes a zip "
        f"archive (or, before torch 1.6, a pickle stream with torch's magic number); {found}"
    )


def _import_torch() -> object:
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            "reading .pt/.pth state dicts needs torch: pip install 'nm-sparsity-ref[torch]'"
        ) from error
    return torch


def _torch_tensors(path: Path) -> list[tuple[str, object]]:
    """``(name, tensor)`` of a ``.pt`` state dict, nested dictionaries flattened with ``.``."""
    torch = _import_torch()
    _check_torch_signature(path)
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as error:
        if "mmap" not in str(error):
            raise
        # Files from torch < 1.6 (not zip archives) cannot be memory-mapped.
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    found: list[tuple[str, object]] = []

    def visit(prefix: str, value: object) -> None:
        if isinstance(value, torch.Tensor):
            found.append((prefix or path.stem, value))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), item)

    visit("", loaded)
    return found


def _torch_record(name: str, tensor: object) -> TensorRecord:
    source = str(tensor.dtype).removeprefix("torch.")
    tensor = tensor.detach()
    if tensor.is_floating_point() and tensor.dtype.itemsize < 4 and source != "float16":
        # bfloat16 and float8 have no NumPy dtype; their float32 upcast is exact.
        tensor = tensor.float()
    return TensorRecord(name, tensor.numpy(), source)


def list_tensors(path: str | os.PathLike[str]) -> list[TensorInfo]:
    """Names, shapes and stored dtypes of every tensor of a file, in file order.

    Reads only headers for ``.npy``, ``.npz`` and ``.safetensors``; a ``.pt``
    file is memory-mapped.

    Raises
    ------
    ValueError, FileNotFoundError, ImportError
        As :func:`iter_tensors`.
    """
    path = _existing(path)
    suffix = path.suffix.lower()
    with _file_errors(path):
        if suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            return [TensorInfo(path.stem, tuple(array.shape), str(array.dtype))]
        if suffix == ".npz":
            infos = []
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    with archive.open(member) as handle:
                        shape, dtype, _ = read_npy_header(handle)
                    name = member.removesuffix(".npy")
                    infos.append(TensorInfo(name, tuple(shape), str(dtype)))
            return infos
        if suffix == ".safetensors":
            header, data_start = _safetensors_header(path)
            size = path.stat().st_size
            infos = []
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                if not isinstance(entry, dict) or not isinstance(entry.get("data_offsets"), list):
                    _safetensors_refusal(path)
                if data_start + entry["data_offsets"][1] > size:
                    raise ValueError(f"tensor {name!r} runs past the end of the file (truncated)")
                dtype = _SAFETENSORS_DTYPES.get(entry["dtype"], entry["dtype"])
                infos.append(TensorInfo(name, tuple(entry["shape"]), dtype))
            # safetensors validates the rest (dtypes, shapes against offsets, overlaps) on
            # opening, as for iter_tensors and read_tensor: the same file, the same refusal
            with _safe_open(path):
                pass
            # safetensors lists tensors sorted by name; match iter_tensors' order.
            return sorted(infos, key=lambda info: info.name)
        return [
            TensorInfo(name, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
            for name, tensor in _torch_tensors(path)
        ]


def _safetensors_refusal(path: Path) -> None:
    """Raise safetensors' own refusal of a malformed header (else a plain one)."""
    with _safe_open(path):
        pass
    raise ValueError("its header has an entry that is not a tensor description")


def read_tensor(path: str | os.PathLike[str], name: str) -> TensorRecord:
    """Read one tensor of a file by name (BF16 as its exact float32 upcast).

    Raises
    ------
    TensorNotFoundError
        (a ``KeyError``) if the file has no tensor ``name``.
    ValueError, FileNotFoundError, ImportError
        As :func:`iter_tensors`.
    """
    path = _existing(path)
    suffix = path.suffix.lower()
    with _file_errors(path):
        if suffix == ".npy":
            if name != path.stem:
                raise _missing(path, name)
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            return TensorRecord(name, array, str(array.dtype))
        if suffix == ".npz":
            _check_npz_members(path, [name])
            with np.load(path, allow_pickle=False) as archive:
                if name not in archive.files:
                    raise _missing(path, name)
                array = archive[name]
            return TensorRecord(name, array, str(array.dtype))
        if suffix == ".safetensors":
            return _read_safetensors(path, name)
        for key, tensor in _torch_tensors(path):
            if key == name:
                return _torch_record(key, tensor)
        raise _missing(path, name)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    Readers never see a half-written file, and a failure leaves ``path``
    untouched and no temporary file behind. The file gets the mode a plain
    ``open()`` would give it, without touching the process umask (safe to call
    from several threads). Write to the yielded path by opening it again (it
    exists and is empty). This replaces an existing ``path``; commands use
    :func:`nmref.io.output.output_file`, which also refuses to clobber, symbolic
    links and inputs.
    """
    with output_file(path, force=True, flag="") as temporary:
        yield temporary


def write_tensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, NDArray],
    *,
    inputs: tuple[str | os.PathLike[str], ...] = (),
    overwrite: bool = False,
    flag: str = "",
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
    flag : str, default ""
        How messages name the destination (the command-line flag, e.g. ``"-o"``);
        by default ``output='...'``.

    Returns
    -------
    Path
        The destination, the file written.

    Raises
    ------
    ValueError
        If the destination is an input, a symbolic link or a folder, exists and
        ``overwrite`` is false (also when another writer creates it meanwhile),
        has an unknown extension, or is ``.npy`` with other than one tensor.
    OSError
        If the system fails while writing (e.g. a full disk); nothing is left behind.

    Notes
    -----
    Written through :func:`nmref.io.output.write_output`: a hidden temporary file in
    the destination's folder, fsynced, then linked (no clobbering) or renamed
    (``overwrite``) onto the destination.
    """
    path = Path(path)
    suffix = _suffix(path, "output")
    name = f"{flag} {str(path)!r}" if flag else f"output={str(path)!r}"
    if suffix == ".npy" and len(tensors) != 1:
        raise ValueError(
            f"{name} is .npy, which holds one tensor, but there are "
            f"{len(tensors)}; use .npz or .safetensors"
        )

    def write(temporary: str) -> None:
        if suffix == ".npy":
            (array,) = tensors.values()
            with open(temporary, "wb") as handle:
                np.save(handle, np.asarray(array), allow_pickle=False)
        elif suffix == ".npz":
            with open(temporary, "wb") as handle:
                np.savez(handle, **{key: np.asarray(a) for key, a in tensors.items()})
        else:
            from safetensors.numpy import save_file

            arrays = {key: np.ascontiguousarray(a) for key, a in tensors.items()}
            try:
                save_file(arrays, temporary)
            except (ValueError, TypeError, OSError):
                raise
            except Exception as error:  # safetensors' own error type, e.g. on a full disk
                raise OSError(f"{error}") from error

    return write_output(
        path, write, force=overwrite, inputs=inputs, flag=flag if flag else "output="
    )
