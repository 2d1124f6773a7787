"""Reading and writing tensor files: ``.npy``, ``.npz``, ``.safetensors`` (and reading ``.pt``).

Tensors are streamed one at a time (``.safetensors`` through memory maps), so a
multi-GB checkpoint is processed in bounded memory. NumPy has no bfloat16, so
BF16 tensors are read as their **exact** float32 upcast (bfloat16 is the top
half of a float32) and reported with ``source_dtype="bfloat16"``; float8 and
float4 tensors likewise (:mod:`nmref.io.narrow_floats`). ``.npy``/``.npz``
arrays come in native byte order; raw-byte (void) arrays are refused. Writes are
atomic (a temporary file in the target folder, then a rename) and never
replace the input file.

PyTorch ``.pt``/``.pth`` state dicts are read (never written) when torch is
installed, with ``torch.load(..., weights_only=True, mmap=True)``: no pickled
code runs, and tensors stay memory-mapped until used. Nested dictionaries are
flattened with ``.`` (``{"model": {"fc.weight": t}}`` gives ``model.fc.weight``);
non-tensor entries are ignored.

Besides streaming everything (:func:`iter_tensors`), :func:`list_tensors` reads
names, shapes and dtypes without the data, and :func:`read_tensor` reads one
tensor by name, so that separate processes can share the work on one file. A
``.safetensors`` header is parsed, validated and the file mapped once, then reused
while the file is unchanged: reading n tensors by name costs O(n), not O(n^2).

One memory rule covers every format (:func:`check_memory_budget`): a tensor built in
memory (an ``.npz`` member, a ``.pt`` view whose strides repeat bytes) must fit
``NMREF_MEMORY_BUDGET_GIB``, checked on its logical size before it is built; one whose
every byte is the file's own, memory-mapped, costs what the file holds.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import pickle
import struct
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from nmref._json_toml import load_json
from nmref.io.narrow_floats import NARROW_FLOATS
from nmref.io.narrow_floats import decode as decode_narrow_float
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
        header = load_json(handle.read(header_size), "its header")
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


@dataclass(frozen=True)
class _SafetensorsIndex:
    """A ``.safetensors`` file's header, validated: ``entries`` maps each tensor's name to
    its record (``dtype``, ``shape``, ``data_offsets``); the data starts at ``data_start``
    of ``data``, the whole file mapped read-only once (one ``np.memmap`` per tensor cost
    more than the mask of a small tensor)."""

    entries: dict[str, dict]
    data_start: int
    data: mmap.mmap | bytes

    def array(self, dtype: np.dtype | str, begin: int, shape: tuple[int, ...]) -> NDArray:
        """The read-only array of ``shape`` at byte ``begin`` of the data (no copy)."""
        dtype = np.dtype(dtype)
        count = math.prod(shape)
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        offset = self.data_start + begin
        return np.frombuffer(self.data, dtype=dtype, count=count, offset=offset).reshape(shape)


#: Headers parsed lately, keyed by the file's identity (device, inode, size, times), so that
#: reading a file tensor by tensor parses its header once. Parsed per tensor, a file of n
#: tensors cost O(n^2): 100,000 small tensors (a 10 MB header) ran for hours.
_INDEXES: OrderedDict[tuple[int, ...], _SafetensorsIndex] = OrderedDict()
_INDEXES_KEPT = 4
_INDEXES_LOCK = threading.Lock()


def _unlock_after_fork() -> None:
    """A forked child gets a fresh lock: one held by another thread at the fork stays held."""
    global _INDEXES_LOCK
    _INDEXES_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_after_fork)


def _safetensors_index(path: Path) -> _SafetensorsIndex:
    """The validated header of ``path``: read once, reused while the file is unchanged.

    The container check every reader applies (``nmsim convert`` too): every entry a tensor
    record inside the file, then safetensors' own validation on opening (known dtypes,
    shapes against offsets, offsets that tile the data: no gap, overlap or trailing bytes).
    The file is known by device, inode, size and times: one rewritten in place to the same
    size within the filesystem's timestamp granularity would be served stale (every writer
    here replaces a file, giving it a new inode).
    """
    status = os.stat(path)
    key = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
    with _INDEXES_LOCK:
        index = _INDEXES.get(key)
        if index is not None:
            _INDEXES.move_to_end(key)
            return index
    header, data_start = _safetensors_header(path)
    header.pop("__metadata__", None)
    for name, entry in header.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("data_offsets"), list):
            _safetensors_refusal(path)
        if data_start + entry["data_offsets"][1] > status.st_size:
            raise ValueError(f"tensor {name!r} runs past the end of the file (truncated)")
    # safetensors validates the rest (dtypes, shapes against offsets, gaps and overlaps)
    with _safe_open(path):
        pass
    with open(path, "rb") as handle:
        # mmap refuses an empty file; a header-only file has no data to map
        size = os.fstat(handle.fileno()).st_size
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    index = _SafetensorsIndex(header, data_start, data)
    with _INDEXES_LOCK:
        _INDEXES[key] = index
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return index


def check_safetensors_file(path: str | os.PathLike[str]) -> None:
    """Apply the readers' container validation to a ``.safetensors`` file (headers only).

    Raises
    ------
    ValueError
        Naming the path, if the header is not JSON tensor records, a record runs past the
        file, or safetensors refuses it (gaps, overlaps, trailing bytes, a shape that does
        not match its offsets, an unknown dtype).
    FileNotFoundError
        As :func:`iter_tensors`.
    """
    path = _existing(path)
    with _file_errors(path):
        _safetensors_index(path)


def _bf16_upcast(path: Path, index: _SafetensorsIndex, name: str) -> TensorRecord:
    entry = index.entries[name]
    begin, end = entry["data_offsets"]
    raw = index.array("<u2", begin, ((end - begin) // 2,))
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


def _safetensors_record(path: Path, index: _SafetensorsIndex, name: str) -> TensorRecord:
    """One tensor, memory-mapped read-only where its dtype allows (no copy in memory).

    The header was validated once (:func:`_safetensors_index`); ``get_tensor`` would copy
    the whole tensor into memory, which doubled the peak of reading a large checkpoint.
    """
    kind = index.entries[name]["dtype"]
    if kind == "BF16":
        return _bf16_upcast(path, index, name)
    if kind in _MAPPABLE:
        entry = index.entries[name]
        begin, end = entry["data_offsets"]
        dtype = np.dtype(_MAPPABLE[kind])
        shape = tuple(int(d) for d in entry["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * dtype.itemsize:
            raise ValueError(
                f"tensor {name!r} declares shape {shape} {kind} ({count * dtype.itemsize} "
                f"bytes) but its offsets span {end - begin} bytes"
            )
        array = index.array(dtype, begin, shape)
        return TensorRecord(name, array, str(dtype.newbyteorder("=")))
    if kind in NARROW_FLOATS:  # float8/float4: no NumPy dtype; exact float32 values
        entry = index.entries[name]
        begin, end = entry["data_offsets"]
        raw = index.array("|u1", begin, (end - begin,))
        try:
            values = decode_narrow_float(raw, kind, tuple(int(d) for d in entry["shape"]))
        except ValueError as error:
            raise ValueError(f"tensor {name!r} {error}") from None
        return TensorRecord(name, values, NARROW_FLOATS[kind].name)
    if kind != "C64":  # safetensors' NumPy reader has no dtype for the rest (F6_E2M3, ...)
        raise _UnreadableDtype(
            f"path={str(path)!r}: tensor {name!r} is stored as {kind}, which nmref cannot "
            f"read (it reads {', '.join(sorted({*_SAFETENSORS_DTYPES, 'C64'}))})"
        )
    with _safe_open(path) as handle:
        array = handle.get_tensor(name)  # type: ignore[attr-defined]
    return TensorRecord(name, array, str(array.dtype))


def _iter_safetensors(path: Path) -> Iterator[TensorRecord]:
    index = _safetensors_index(path)
    for name in sorted(index.entries):  # safetensors' order: by name
        yield _safetensors_record(path, index, name)


def _read_safetensors(path: Path, name: str) -> TensorRecord:
    index = _safetensors_index(path)
    if name not in index.entries:
        raise _missing(path, name)
    return _safetensors_record(path, index, name)


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
        index = _safetensors_index(path)
        if name not in index.entries:
            raise _missing(path, name)
        entry, data_start = index.entries[name], index.data_start
        kind = entry["dtype"]
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
            raw = index.array("<u2", begin - data_start, band)
            bits = raw.astype(np.uint32)
            bits <<= 16
            return TensorRecord(name, bits.view(np.float32), "bfloat16")
        dtype = np.dtype(_MAPPABLE[kind])
        array = index.array(dtype, begin - data_start, band)
        return TensorRecord(name, array, _source_name(kind))


def _source_name(kind: str) -> str:
    return "bfloat16" if kind == "BF16" else str(np.dtype(_MAPPABLE[kind]).newbyteorder("="))


class _BadBudgetSetting(ValueError):
    """``NMREF_MEMORY_BUDGET_GIB`` is not a usable number: the environment's fault, never
    reported as a fault of the file being read."""


def memory_budget() -> int:
    """Largest tensor (bytes) a reader builds in memory: ``NMREF_MEMORY_BUDGET_GIB``
    (default 4 GiB). The rule that applies it is :func:`check_memory_budget`.

    Raises
    ------
    ValueError
        Naming the variable, if it is not a finite number of GiB above 0 (``inf``,
        ``1e400``, ``nan``, text).
    """
    raw = os.environ.get("NMREF_MEMORY_BUDGET_GIB", "4")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise _BadBudgetSetting(
            f"NMREF_MEMORY_BUDGET_GIB={raw!r} must be a finite number of GiB above 0 "
            "(the largest tensor a reader builds in memory; default 4)"
        )
    return int(value * 2**30)


class _OverBudget(ValueError):
    """A valid file holding a tensor over the memory budget (not "not a valid file")."""


def check_memory_budget(what: str, logical_bytes: int, *, mapped_bytes: int = 0) -> None:
    """The one memory rule of every reader, applied before a tensor is materialised.

    A tensor whose logical size (elements times item size, as stored) is all distinct bytes
    of the file, memory-mapped (``logical_bytes <= mapped_bytes``: ``.npy``,
    ``.safetensors``, a ``.pt`` tensor whose strides repeat no byte), costs what the file
    holds and is not bounded. Any other is built in memory and must fit
    :func:`memory_budget`: an ``.npz`` member (inflated), a ``.pt`` view whose strides
    repeat its bytes (``torch.zeros(1).expand(40000, 40000)``: a 1.6 KB file, 6.4 GB
    logical).

    Raises
    ------
    ValueError
        ``"{what} would take X GiB in memory, over the B GiB budget; set
        NMREF_MEMORY_BUDGET_GIB to raise it"``; or naming the variable when it is not a
        number (:func:`memory_budget`).
    """
    budget = memory_budget()
    if logical_bytes <= mapped_bytes or logical_bytes <= budget:
        return
    raise _OverBudget(
        f"{what} would take {logical_bytes / 2**30:.3g} GiB in memory, over the "
        f"{budget / 2**30:.3g} GiB budget; set NMREF_MEMORY_BUDGET_GIB to raise it"
    )


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


#: The zip compression methods Python's zipfile reads.
_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


def _check_zip_member(info: zipfile.ZipInfo, tensor: str) -> None:
    """Refuse a member zipfile cannot open, before it is opened: zipfile's own errors are a
    ``RuntimeError`` and a ``NotImplementedError`` that name neither the file nor the member."""
    if info.flag_bits & 0x1:
        raise ValueError(
            f"member {tensor!r} is encrypted, and nothing here asks for passwords (extract it "
            "and save the arrays again with numpy.savez)"
        )
    if info.compress_type not in _ZIP_METHODS:
        raise ValueError(
            f"member {tensor!r} is compressed with zip method {info.compress_type}, which "
            "Python's zipfile cannot read (stored, deflate, bzip2 and lzma are read)"
        )


def _check_npz_members(path: Path, names: Sequence[str] | None = None) -> None:
    """Refuse ``.npz`` members whose header lies about their size or that exceed the budget.

    ``np.load`` trusts a member's header and allocates what it declares before reading: a
    301-byte file declaring a (2**20, 2**20) array asks for 8 TiB. The declared size must
    equal the member's uncompressed size, and fit :func:`memory_budget` (a zip bomb's
    members are honest but huge). Only headers are read.
    """
    with zipfile.ZipFile(path) as archive:
        seen: dict[str, str] = {}
        for info in archive.infolist():
            # zipfile reads the last of two same-named members, list_tensors sees both; and
            # members 'w' and 'w.npy' are both read as tensor 'w' (one would be lost): refuse
            tensor = info.filename.removesuffix(".npy")
            _check_zip_member(info, tensor)
            if info.filename == seen.get(tensor):
                raise ValueError(f"member {tensor!r} appears more than once: an ambiguous archive")
            if tensor in seen:
                raise ValueError(
                    f"members {seen[tensor]!r} and {info.filename!r} are both read as tensor "
                    f"{tensor!r}: an ambiguous archive"
                )
            seen[tensor] = info.filename
        for tensor, member in seen.items():
            # members 'w.npy.npy' and 'w.npy': NumPy reads tensor 'w.npy' from the second
            if tensor != member and tensor in seen.values():
                raise ValueError(
                    f"member {member!r} is tensor {tensor!r}, but NumPy reads that name from "
                    f"member {tensor!r}: an ambiguous archive"
                )
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
            # inflated into memory, never mapped: the budget applies whatever the file's size
            check_memory_budget(f"member {name!r} ({tuple(shape)} {dtype})", declared)


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
            yield _numpy_record(path, path.stem, array)
        elif suffix == ".npz":
            _check_npz_members(path)
            with np.load(path, allow_pickle=False) as archive:
                for name in archive.files:
                    yield _numpy_record(path, name, archive[name])
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
    memory_budget()  # a bad NMREF_MEMORY_BUDGET_GIB is refused whatever the format
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
    except (TensorNotFoundError, _NotACheckpoint, _UnreadableDtype, _BadBudgetSetting):
        raise
    except _OverBudget as error:
        raise _OverBudget(f"path={str(path)!r}: {error}") from None
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


class _UnreadableDtype(ValueError):
    """A tensor of a dtype no reader here can give as numbers (the message names the file)."""


def _native(dtype: np.dtype) -> np.dtype:
    """``dtype`` in the machine's byte order (``>f4`` -> ``float32``); Numba reads no other."""
    return dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype


def _numpy_record(path: Path, name: str, array: NDArray) -> TensorRecord:
    """A ``.npy``/``.npz`` array as a record: in native byte order, and numbers.

    A big-endian member (``>f4``) reached the Numba kernels, which refuse it ("Unsupported
    array dtype >f4"). A void dtype is raw bytes or records: NumPy saves float8 and bfloat16
    arrays of ml_dtypes and JAX as ``|V1``/``|V2`` without their format, so no reader can
    tell which numbers they were.
    """
    if array.dtype.kind == "V":
        raise _UnreadableDtype(
            f"path={str(path)!r}: tensor {name!r} has dtype {array.dtype}, raw bytes or "
            "records rather than numbers (NumPy saves float8 and bfloat16 arrays as |V1/|V2 "
            "without their format); store them in .safetensors (F8_E4M3, F8_E5M2, BF16) or "
            "as float32"
        )
    native = _native(array.dtype)
    if native != array.dtype:
        array = array.astype(native)
    return TensorRecord(name, array, str(native))


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
    **{kind: narrow.name for kind, narrow in NARROW_FLOATS.items()},
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
    _check_torch_budget(name, tensor, source)
    tensor = tensor.detach()
    if source == "float4_e2m1fn_x2":  # two codes per byte; torch cannot widen them itself
        raw = tensor.contiguous().view(_import_torch().uint8).numpy()  # type: ignore[attr-defined]
        shape = (*raw.shape[:-1], 2 * raw.shape[-1]) if raw.ndim else (2,)
        values = decode_narrow_float(raw.reshape(-1), "F4", shape)
        return TensorRecord(name, values, "float4_e2m1fn")
    if tensor.is_floating_point() and tensor.dtype.itemsize < 4 and source != "float16":
        # bfloat16 and float8 have no NumPy dtype; their float32 upcast is exact.
        tensor = tensor.float()
    return TensorRecord(name, tensor.numpy(), source)


def _check_torch_budget(name: str, tensor: object, source: str) -> None:
    """:func:`check_memory_budget` for a ``.pt`` tensor, before anything is built from it.

    A view's distinct bytes are the span its strides reach; a stride-0 view (``expand``)
    or overlapping strides repeat bytes, so its logical size exceeds its span.
    """
    itemsize = tensor.element_size()  # type: ignore[attr-defined]
    shape = tuple(int(size) for size in tensor.shape)  # type: ignore[attr-defined]
    strides = tuple(int(stride) for stride in tensor.stride())  # type: ignore[attr-defined]
    logical = math.prod(shape) * itemsize
    span = 0
    if logical:
        span = (1 + sum((s - 1) * abs(t) for s, t in zip(shape, strides, strict=True))) * itemsize
    check_memory_budget(
        f"tensor {name!r} ({shape} {source}, strides {strides} over {span} stored bytes)",
        logical,
        mapped_bytes=span,
    )


def _torch_info(name: str, tensor: object) -> TensorInfo:
    """What :func:`_torch_record` will give, from the tensor's metadata."""
    source = str(tensor.dtype).removeprefix("torch.")  # type: ignore[attr-defined]
    shape = tuple(tensor.shape)  # type: ignore[attr-defined]
    if source == "float4_e2m1fn_x2":
        return TensorInfo(name, (*shape[:-1], 2 * shape[-1]) if shape else (2,), "float4_e2m1fn")
    return TensorInfo(name, shape, source)


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
            return [TensorInfo(path.stem, tuple(array.shape), str(_native(array.dtype)))]
        if suffix == ".npz":
            _check_npz_members(path, ())  # the member rules only (two members, one name)
            infos = []
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    with archive.open(member) as handle:
                        shape, dtype, _ = read_npy_header(handle)
                    name = member.removesuffix(".npy")
                    infos.append(TensorInfo(name, tuple(shape), str(_native(dtype))))
            return infos
        if suffix == ".safetensors":
            # validated as for iter_tensors and read_tensor: the same file, the same refusal
            index = _safetensors_index(path)
            infos = [
                TensorInfo(
                    name,
                    tuple(entry["shape"]),
                    _SAFETENSORS_DTYPES.get(entry["dtype"], entry["dtype"]),
                )
                for name, entry in index.entries.items()
            ]
            # safetensors lists tensors sorted by name; match iter_tensors' order.
            return sorted(infos, key=lambda info: info.name)
        return [_torch_info(name, tensor) for name, tensor in _torch_tensors(path)]


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
            return _numpy_record(path, name, array)
        if suffix == ".npz":
            _check_npz_members(path, [name])
            with np.load(path, allow_pickle=False) as archive:
                if name not in archive.files:
                    raise _missing(path, name)
                array = archive[name]
            return _numpy_record(path, name, array)
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


#: Timestamp of every ``.npz`` member written here: the same tensors give the same bytes.
_NPZ_DATE = (1980, 1, 1, 0, 0, 0)


def _npz_members(tensors: Mapping[str, NDArray], name: str) -> list[tuple[str, NDArray]]:
    """``(member name, array)`` of an ``.npz`` holding ``tensors``: ``NAME.npy`` each.

    Every tensor name must come back from the archive as it was given (the readers strip
    one ``.npy``): ``zipfile`` cuts a name at a NUL byte (two names would become one
    member) and can store only UTF-8 names. ``np.savez(**tensors)`` is not used: its own
    keywords (``file``, ``allow_pickle``) would capture tensors of those names.
    """
    members = []
    for key, array in tensors.items():
        if not isinstance(key, str):
            raise ValueError(f"{name}: tensor name {key!r} must be a string")
        member = f"{key}.npy"
        try:
            member.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{name}: tensor name {key!r} is not valid UTF-8; .npz member names must be"
            ) from None
        if zipfile.ZipInfo(member).filename != member:
            raise ValueError(
                f"{name}: tensor name {key!r} cannot be an .npz member name (a NUL byte, or "
                "a path separator zip rewrites); it would not be read back as written"
            )
        members.append((member, np.asarray(array)))
    names = {member for member, _ in members}
    for key in tensors:
        if key in names:  # 'w.npy' beside 'w': NumPy would read 'w.npy' from the member of 'w'
            raise ValueError(
                f"{name}: tensor names {key!r} and {key.removesuffix('.npy')!r} cannot both "
                "be in an .npz (NumPy reads the first from the second's member); rename one "
                "or write .safetensors"
            )
    return members


def _write_npz(path: str, members: Sequence[tuple[str, NDArray]]) -> None:
    """An uncompressed ``.npz`` (as ``np.savez``) of ``members``; never pickles."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for member, array in members:
            info = zipfile.ZipInfo(member, date_time=_NPZ_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, array, allow_pickle=False)


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
        If the destination is an input (or a file of an input folder), a symbolic
        link, a folder, a FIFO or device, exists and ``overwrite`` is false (also
        when another writer creates it meanwhile), has an unknown extension, or is
        ``.npy`` with other than one tensor; if a tensor name would not be read back
        as written (``.npz``: a NUL byte, not UTF-8; ``.safetensors``:
        ``__metadata__``, not UTF-8), before anything is written; if an array holds
        Python objects (never pickled).
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

    if suffix == ".npz":
        members = _npz_members(tensors, name)
    elif suffix == ".safetensors":
        from nmref.io.safetensors_writer import check_safetensors_names

        try:
            check_safetensors_names(tensors)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None

    def write(temporary: str) -> None:
        if suffix == ".npy":
            (array,) = tensors.values()
            with open(temporary, "wb") as handle:
                np.save(handle, np.asarray(array), allow_pickle=False)
        elif suffix == ".npz":
            _write_npz(temporary, members)
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
