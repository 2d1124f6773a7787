"""``nmsim compress``, ``nmsim inspect`` and ``nmsim convert``: 2:4 formats on the command line.

``nmsim compress W.npy --dtype fp16 -o out.npz`` writes the values and sm80 metadata of a 2:4
matrix; ``nmsim inspect out.npz`` prints the kept-position histogram and decodes the first
groups. File format: ``specs/formats.md``, section 12. ``nmsim convert IN OUT --to FORMAT``
rewrites a compressed-tensors 2:4 checkpoint (``specs/checkpoint_formats.md``).
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from nmsim.cli.tables import printable

FILE_FORMAT = "nmsim-2to4-v1"


def add_parser(subparsers: Any) -> None:
    """Register ``compress`` and ``inspect`` on the ``nmsim`` command line."""
    from nmsim.formats.sparse_2to4 import DTYPE_KINDS, METADATA_LAYOUTS, OVERFULL_POLICIES

    compress = subparsers.add_parser(
        "compress",
        help="compress a 2:4 sparse matrix (.npy) into tensor-core values + metadata (.npz)",
        description=(
            "Compress a 2-D 2:4 sparse matrix (fp32: 1:2) into the CUTLASS sm80 format that "
            "PyTorch's converter produces (specs/formats.md). Groups run along the last axis."
        ),
    )
    compress.add_argument("input", type=Path, help="2-D .npy array, already pruned to 2:4")
    compress.add_argument("--dtype", required=True, choices=DTYPE_KINDS, help="element type")
    compress.add_argument(
        "-o", "--output", type=Path, required=True, help="output file, must end in .npz"
    )
    compress.add_argument("--force", action="store_true", help="replace an existing output")
    compress.add_argument(
        "--layout",
        choices=METADATA_LAYOUTS,
        default="cutlass_sm80",
        help="metadata layout: cutlass_sm80 (what the sparse kernels read; default) or logical "
        "(row-major, for reading by eye)",
    )
    compress.add_argument(
        "--overfull",
        choices=OVERFULL_POLICIES,
        default="error",
        help="groups with too many nonzeros: error (default) or drop extras as PyTorch does",
    )
    compress.set_defaults(func=run_compress)

    inspect = subparsers.add_parser(
        "inspect",
        help="summarise a compressed .npz: pattern histogram and decoded metadata",
        description="Print the kept-position histogram and decode the first metadata groups.",
    )
    inspect.add_argument("input", type=Path, help=".npz written by nmsim compress")
    inspect.add_argument("--rows", type=int, default=4, help="rows to decode (default 4)")
    inspect.add_argument("--groups", type=int, default=8, help="groups per row (default 8)")
    inspect.set_defaults(func=run_inspect)

    convert = subparsers.add_parser(
        "convert",
        help="convert a 2:4 checkpoint between dense, sparse-24-bitmask and cutlass (sparse-24)",
        description=(
            "Decode, validate and re-encode a compressed-tensors 2:4 checkpoint (a .safetensors "
            "file or a model folder), or encode the 2:4 weights of a dense one. 'cutlass' is "
            "the sparse-24 format (PyTorch's CUTLASS values + sm80 metadata). Compressed "
            "layers keep their stored mask, so bitmask -> cutlass -> bitmask gives the same "
            "bytes (specs/checkpoint_formats.md)."
        ),
    )
    convert.add_argument("input", type=Path, help=".safetensors file or model folder")
    convert.add_argument("output", type=Path, help="output .safetensors file")
    convert.add_argument(
        "--to", required=True, choices=("dense", "sparse-24-bitmask", "cutlass"), help="format"
    )
    convert.add_argument("--force", action="store_true", help="replace an existing output")
    convert.set_defaults(func=run_convert)


# ---------------------------------------------------------------------------------------------
# compress
# ---------------------------------------------------------------------------------------------


def _float_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float16/32/64 to bf16 bits, correctly (no double rounding through float32)."""
    from nmsim.formats.sparse_2to4 import float32_to_bf16_bits

    single = x.astype(np.float32)
    bits = float32_to_bf16_bits(single)
    if x.dtype == np.float64:
        # float64 -> float32 may land exactly on a bf16 tie that the float64 value was not on;
        # settle those ties by the side the float64 value lies on.
        single_bits = single.view(np.uint32)
        tie = ((single_bits & 0xFFFF) == 0x8000) & (x != single) & np.isfinite(single)
        above = np.abs(x) > np.abs(single.astype(np.float64))
        truncated = (single_bits >> 16).astype(np.uint16)
        bits = np.where(tie, np.where(above, truncated + np.uint16(1), truncated), bits)
    return bits.astype(np.uint16)


def convert_for_kind(array: np.ndarray, kind: str) -> tuple[np.ndarray, str]:
    """Convert a loaded array to the storage dtype of ``kind``; returns (array, note).

    Float inputs are rounded to nearest even (reported); integer inputs must convert exactly;
    ``uint16`` input for bf16 is taken as bf16 bit patterns. Anything else raises.
    """
    from nmsim.formats.sparse_2to4 import format_spec

    target = format_spec(kind).storage_dtype
    if kind == "bf16" and array.dtype == np.uint16:
        return array, "uint16 input taken as bf16 bit patterns"
    if array.dtype == target:
        return array, "no conversion"
    if kind == "int8":
        if array.dtype.kind in "iu" or array.dtype.kind == "f":
            as_int = array.astype(np.int8)
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                raise ValueError("input holds NaN or inf; int8 needs finite integers")
            if not np.array_equal(as_int.astype(np.float64), array.astype(np.float64)):
                raise ValueError(
                    "int8 needs integer values in [-128, 127]; the input has others "
                    "(quantise it first)"
                )
            return as_int, f"converted {array.dtype} -> int8 exactly"
        raise ValueError(f"cannot convert {array.dtype} to int8")
    if array.dtype.kind not in "fiu":
        raise ValueError(f"cannot convert {array.dtype} to {kind}")
    source = array.astype(np.float64) if array.dtype.kind in "iu" else array
    with np.errstate(over="ignore"):  # an overflow is refused below, in one line
        if kind == "bf16":
            converted = _float_to_bf16_bits(source)
            from nmsim.formats.sparse_2to4 import bf16_bits_to_float32

            back = bf16_bits_to_float32(converted).astype(np.float64)
        else:
            converted = source.astype(target)
            back = converted.astype(np.float64)
    _refuse_overflow(source, back, kind)
    with np.errstate(invalid="ignore"):
        changed = int(np.count_nonzero((back != source) & ~(np.isnan(back) & np.isnan(source))))
    return converted, (
        f"rounded {array.dtype} -> {kind} (nearest even): {changed} of {array.size} values changed"
    )


def _refuse_overflow(source: np.ndarray, back: np.ndarray, kind: str) -> None:
    """Refuse a finite value that rounds to infinity in ``kind`` (it used to become inf with
    only NumPy's RuntimeWarning): the message names the value, where it is, and the range."""
    with np.errstate(invalid="ignore"):
        overflowed = np.isinf(back) & np.isfinite(source.astype(np.float64))
    if not overflowed.any():
        return
    where = tuple(int(i) for i in np.argwhere(overflowed)[0])
    # bf16's largest finite value is 0x7F7F (about 3.39e38); fp16 and fp32 are NumPy's
    largest = (
        float(np.uint32(0x7F7F0000).view(np.float32))
        if kind == "bf16"
        else float(np.finfo({"fp16": np.float16, "fp32": np.float32}[kind]).max)
    )
    raise ValueError(
        f"value {float(source[where])!r} at {where} is outside the {kind} range "
        f"(largest finite magnitude {largest:g}) and would become inf "
        f"({int(np.count_nonzero(overflowed))} value(s) do); scale the weights or choose a "
        "wider --dtype"
    )


def _read_error(path: Path, error: BaseException) -> ValueError:
    from nmref.io.checkpoints import _first_line

    text = _first_line(error)
    if isinstance(error, EOFError):
        text = "the file is empty or truncated"
    elif isinstance(error, OSError) and error.strerror:
        text = error.strerror.lower()
    return ValueError(f"{str(path)!r}: cannot read it: {text}")


def _load(path: Path, what: str) -> Any:
    """``np.load`` without pickles; every failure is one ``ValueError`` line naming ``path``."""
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a folder; {what}")
    if not path.exists():
        raise ValueError(f"{str(path)!r} does not exist")
    if not path.is_file():
        # a FIFO would block np.load, a device never ends: neither is opened
        raise ValueError(
            f"{str(path)!r} is not a regular file (a FIFO, socket or device); it is not opened"
        )
    if path.stat().st_size == 0:
        raise ValueError(f"{str(path)!r} is empty; {what}")
    with open(path, "rb") as handle:
        magic = handle.read(8)
    # a zip archive starts with a local file header, or, when it has no members, its end record
    is_zip = magic.startswith((b"PK\x03\x04", b"PK\x05\x06"))
    if not is_zip and not magic.startswith(b"\x93NUMPY"):
        # np.load would try these as pickles and say "pickled (object) data" of any bytes.
        found = (
            "a pickle, which is never loaded"
            if magic[:1] == b"\x80"
            else f"neither a .npy array nor an .npz archive (it starts with {magic!r})"
        )
        raise ValueError(f"{str(path)!r}: cannot read it: {found}; {what}")
    # np.load leaves its file open when a zip archive is broken: look first.
    if is_zip and not zipfile.is_zipfile(path):
        raise ValueError(f"{str(path)!r}: cannot read it: a truncated or broken .npz (zip) archive")
    try:
        if is_zip:
            from nmref.io.checkpoints import _check_npz_members

            # refuse members whose header lies about their size, and zip bombs, before inflating
            _check_npz_members(path)
            return np.load(path, allow_pickle=False)
        from nmref.io.checkpoints import read_npy_header

        with open(path, "rb") as handle:
            _, dtype, _ = read_npy_header(handle)
        if dtype.hasobject:
            raise ValueError(
                "it holds Python objects (an object dtype), which are never unpickled "
                "(allow_pickle=False)"
            )
        # memory-mapped: a header declaring more data than the file holds is refused, not
        # allocated (np.load would first allocate what the header declares)
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (EOFError, OSError, ValueError, zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise _read_error(path, error) from None


def load_matrix(path: Path) -> np.ndarray:
    """Read the 2-D ``.npy`` matrix ``nmsim compress`` takes; refuse anything else in one line."""
    loaded = _load(path, "compress needs a 2-D .npy array")
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded:
            names = list(loaded.files)
        if {"values", "metadata", "format"} <= set(names):
            raise ValueError(
                f"{str(path)!r} is already a compressed file (nmsim compress output); "
                "read it with nmsim inspect"
            )
        raise ValueError(
            f"{str(path)!r} is an .npz archive ({len(names)} array(s)); compress needs one "
            "2-D .npy array (save the matrix with numpy.save)"
        )
    if not isinstance(loaded, np.ndarray):
        raise ValueError(f"{str(path)!r} does not hold a numpy array")
    return loaded


def run_compress(args: argparse.Namespace) -> int:
    from nmref.io.output import check_output, write_output
    from nmsim.formats.sparse_2to4 import compress_2to4

    if args.output.suffix.lower() != ".npz":
        raise ValueError(
            f"-o {str(args.output)!r} must end in .npz (nmsim compress writes an .npz archive)"
        )
    # Fail before the work when the output cannot be written (checked again on writing).
    check_output(args.output, force=args.force, inputs=(args.input,), flag="-o")
    array = load_matrix(args.input)
    if array.ndim != 2:
        raise ValueError(
            f"{str(args.input)!r} holds shape {array.shape}; compress needs a 2-D "
            "(rows, reduction) matrix: flatten conv weights with "
            "nmref.layouts.to_reduction_matrix first"
        )
    try:
        dense, note = convert_for_kind(array, args.dtype)
    except ValueError as error:
        raise ValueError(f"{str(args.input)!r} as --dtype {args.dtype}: {error}") from None
    values, metadata = compress_2to4(
        dense, dtype_kind=args.dtype, layout=args.layout, overfull=args.overfull
    )

    def write(temporary: str) -> None:
        # Through a handle: np.savez given a name without .npz would append one.
        with open(temporary, "wb") as handle:
            np.savez(
                handle,
                values=values,
                metadata=metadata,
                dtype_kind=np.array(args.dtype),
                layout=np.array(args.layout),
                shape=np.array(dense.shape, dtype=np.int64),
                format=np.array(FILE_FORMAT),
            )

    written = write_output(args.output, write, force=args.force, inputs=(args.input,), flag="-o")
    print(
        f"{printable(str(args.input))}: {dense.shape[0]} x {dense.shape[1]} {args.dtype} ({note})"
    )
    print(
        f"values {values.shape} {values.dtype}, metadata {metadata.shape} {metadata.dtype} "
        f"[{args.layout}]: {values.nbytes + metadata.nbytes} bytes vs {dense.nbytes} dense"
    )
    print(f"wrote {written}")
    return 0


# ---------------------------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------------------------


def load_compressed(path: Path) -> dict[str, Any]:
    """Read and check a file written by ``nmsim compress``."""
    path = Path(path)
    archive = _load(path, "inspect reads an .npz written by nmsim compress")
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(
            f"{str(path)!r} is a .npy array, not an .npz written by nmsim compress "
            "(compress it first: nmsim compress FILE --dtype KIND -o OUT.npz)"
        )
    with archive as data:
        missing = {"values", "metadata", "dtype_kind", "layout", "shape", "format"} - set(
            data.files
        )
        if missing:
            raise ValueError(
                f"{str(path)!r} is not an nmsim compressed file: missing {sorted(missing)}"
            )
        try:
            file_format = str(data["format"])
            if file_format != FILE_FORMAT:
                raise ValueError(
                    f"{str(path)!r} has format {file_format!r}, expected {FILE_FORMAT!r}"
                )
            loaded = {
                "values": data["values"],
                "metadata": data["metadata"],
                "dtype_kind": str(data["dtype_kind"]),
                "layout": str(data["layout"]),
                "shape": tuple(int(s) for s in data["shape"]),
            }
        except (EOFError, OSError, zipfile.BadZipFile, UnicodeDecodeError) as error:
            raise _read_error(path, error) from None
    _check_consistent(path, loaded)
    return loaded


def _check_consistent(path: Path, data: dict[str, Any]) -> None:
    """The arrays must fit the recorded kind and shape, or every summary would be wrong."""
    from nmsim.formats.sparse_2to4 import format_spec

    spec = format_spec(data["dtype_kind"])
    shape, values, metadata = data["shape"], data["values"], data["metadata"]
    if len(shape) != 2 or shape[1] % spec.dense_columns_per_word:
        raise ValueError(
            f"{str(path)!r}: recorded shape {shape} cannot hold {data['dtype_kind']} data: it "
            f"needs 2 dimensions and columns divisible by {spec.dense_columns_per_word}"
        )
    if values.dtype != spec.storage_dtype:
        raise ValueError(
            f"{str(path)!r}: values have dtype {values.dtype}; {data['dtype_kind']} stores "
            f"{spec.storage_dtype}"
        )
    if values.shape != (shape[0], shape[1] // 2):
        raise ValueError(
            f"{str(path)!r}: values have shape {values.shape}; the {shape[0]} x {shape[1]} matrix "
            f"needs {(shape[0], shape[1] // 2)}"
        )
    expected = (shape[0], shape[1] // spec.dense_columns_per_word)
    if metadata.shape != expected:
        raise ValueError(
            f"{str(path)!r}: metadata has shape {metadata.shape}; the {shape[0]} x {shape[1]} "
            f"{data['dtype_kind']} matrix needs {expected}"
        )


def pattern_histogram(positions: np.ndarray, group_size: int) -> dict[str, int]:
    """Count groups by kept positions, keyed by the kept pattern (``"1100"``, or ``"10"``)."""
    counts: dict[str, int] = {}
    pairs, frequency = np.unique(positions.reshape(-1, 2), axis=0, return_counts=True)
    for (first, second), count in zip(pairs.tolist(), frequency.tolist(), strict=True):
        if group_size == 2:
            key = "10" if first // 2 == 0 else "01"
        else:
            key = "".join("1" if i in (first, second) else "0" for i in range(4))
        counts[key] = counts.get(key, 0) + count
    return counts


def run_inspect(args: argparse.Namespace) -> int:
    from nmsim.formats.sparse_2to4 import format_spec, metadata_to_positions, nonzero_mask

    for flag, count in (("--rows", args.rows), ("--groups", args.groups)):
        if count < 0:
            raise ValueError(f"{flag}={count} must be >= 0")
    data = load_compressed(args.input)
    kind, layout, shape = data["dtype_kind"], data["layout"], data["shape"]
    spec = format_spec(kind)
    values = data["values"]
    positions = metadata_to_positions(data["metadata"], dtype_kind=kind, layout=layout)
    groups = positions.shape[0] * positions.shape[1]
    print(f"{printable(str(args.input))}: {shape[0]} x {shape[1]} {kind}, metadata {layout}")
    print(f"groups of {spec.group_size}: {groups}")
    print("kept positions (pattern: nibble, groups, share):")
    for pattern, count in sorted(pattern_histogram(positions, spec.group_size).items()):
        kept = [i for i, flag in enumerate(pattern) if flag == "1"]
        nibble = (0x4 if kept == [0] else 0xE) if spec.group_size == 2 else kept[0] | kept[1] << 2
        print(f"  {pattern}: {nibble:#x}  {count:>10}  {count / max(groups, 1):7.2%}")
    stored_zero = ~nonzero_mask(values, kind).reshape(positions.shape[0], positions.shape[1], -1)
    per_group = stored_zero.sum(axis=-1)
    print(
        "under-full groups (a kept slot holds zero): "
        f"{int(np.count_nonzero(per_group))} of {groups}"
        + (
            f" ({int(np.count_nonzero(per_group == 2))} all zero)"
            if spec.kept_per_group == 2
            else ""
        )
    )
    rows = min(args.rows, positions.shape[0])
    shown = min(args.groups, positions.shape[1])
    if rows and shown:
        print(f"decoded metadata, first {rows} rows x {shown} groups (nibble:kept positions):")
        for row in range(rows):
            cells = []
            for group in range(shown):
                first, second = (int(p) for p in positions[row, group])
                if spec.group_size == 2:
                    cells.append(f"{first | second << 2:#x}:{first // 2}")
                else:
                    cells.append(f"{first | second << 2:#x}:{first}{second}")
            print(f"  row {row:>4}: " + " ".join(cells))
    return 0


# ---------------------------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------------------------


def run_convert(args: argparse.Namespace) -> int:
    from nmsim.formats.compressed_checkpoint import convert

    if not args.input.exists():
        raise ValueError(f"IN {str(args.input)!r} does not exist")
    if not (args.input.is_dir() or args.input.is_file()):
        raise ValueError(
            f"IN {str(args.input)!r} is not a regular file (a FIFO, socket or device); "
            "it is not opened"
        )
    written, notes = convert(args.input, args.output, args.to, force=args.force, flag="OUT")
    counts: dict[str, int] = {}
    for name, note in notes:
        key = note if not note.startswith("kept dense") else "kept dense"
        counts[key] = counts.get(key, 0) + 1
        if note.startswith("kept dense"):
            print(f"  {printable(name)}: {printable(note)}")
    print(", ".join(f"{count} {what}" for what, count in counts.items()))
    print(f"wrote {printable(str(written))}")
    return 0
