"""Write a corpus of hostile tensor files into a folder (issue 20, item 3).

Every file is small and made here from fixed bytes (no network, no randomness, no torch):
truncated, empty and header-lying ``.safetensors``, ``.npy`` and ``.npz`` files, a zip bomb,
object arrays, ``.pt`` files holding pickles whose execution would create a marker file
(:data:`MARKER`, which must never appear), folders named like checkpoints, and names that are
not UTF-8 or hold path characters, escape bytes or a leading dash. Every command that reads
files (``nmref mask``, ``nmref check``, also as ``--weights``, ``nmsim report``, ``nmsim
compress``, ``nmsim inspect``) must refuse each entry with exit status 2 and one line naming
the file, except where an entry's ``handled`` says which command legitimately accepts it and
why.

Usage::

    python scripts/hostile_files.py DIR     # writes the corpus, prints one line per entry

``tests/test_hostile_files.py`` imports :func:`write_corpus` and runs every command over it.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# "check-weights" is nmref check --transposable --weights FILE: the hostile file as the weights;
# "calibrate" is nmsim calibrate --no-cv --corpus FILE: the hostile file as an extra corpus;
# "audit" is nmref audit FILE --pattern 2:4; "explain" is nmref explain transposable FILE;
# "permute" is nmref permute FILE --pattern 2:4 -o OUT (a model folder is expected);
# "adaprune" is nmref adaprune FILE --pattern 2:4 --calibration VALID.npy --skip-uncalibrated -o OUT
COMMANDS = (
    "mask",
    "check",
    "check-weights",
    "report",
    "compress",
    "inspect",
    "calibrate",
    "convert",
    "audit",
    "explain",
    "permute",
    "adaprune",
)
MARKER = "PICKLE-RAN.marker"
# The zip bomb inflates to this many bytes; tests set NMREF_MEMORY_BUDGET_GIB below it.
BOMB_BYTES = 32 * 2**20
_DATE = (2020, 1, 1, 0, 0, 0)  # fixed zip timestamps: the corpus is byte-for-byte repeatable


@dataclass(frozen=True)
class Entry:
    """One hostile file: its name (bytes for non-UTF-8 names), what it is, how it is treated.

    ``refused_by`` are the commands that must exit 2 with one line; ``handled`` maps the
    others to the documented behaviour they show instead.
    """

    name: str | bytes
    what: str
    handled: dict[str, str] = field(default_factory=dict)

    @property
    def refused_by(self) -> tuple[str, ...]:
        return tuple(c for c in COMMANDS if c not in self.handled)


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


def _safetensors(header: object, data: bytes = b"", raw_header: bytes | None = None) -> bytes:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    padding = 64 - (10 + len(header) + 1) % 64
    header += b" " * padding + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _zip(members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compress) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.compress_type = compress
            archive.writestr(info, data)
    return buffer.getvalue()


def _duplicate_members() -> bytes:
    import warnings

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name: the point here
        for rows in (4, 8):
            info = zipfile.ZipInfo("w.npy", date_time=_DATE)
            archive.writestr(info, _npy(np.ones((rows, rows), np.float32)))
    return buffer.getvalue()


def _bomb() -> bytes:
    """An ``.npz`` whose one honest member inflates to :data:`BOMB_BYTES` of zeros."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        info = zipfile.ZipInfo("w.npy", date_time=_DATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        count = BOMB_BYTES // 4
        with archive.open(info, "w", force_zip64=True) as member:
            member.write(_npy_header("<f4", (count // 1024, 1024)))
            chunk = bytes(2**20)
            for _ in range(BOMB_BYTES // len(chunk)):
                member.write(chunk)
    return buffer.getvalue()


def _evil_pickle(marker: Path, protocol: int = 2) -> bytes:
    """A pickle that, if loaded by an unpickler that runs code, creates ``marker``."""

    class Evil:
        def __reduce__(self) -> tuple:
            return (exec, (f"open({str(marker)!r}, 'w').close()",))

    return pickle.dumps({"w": Evil()}, protocol=protocol)


def _evil_open_pickle(marker: Path) -> bytes:
    class Evil:
        def __reduce__(self) -> tuple:
            return (open, (str(marker), "w"))

    return pickle.dumps({"weight": Evil()}, protocol=2)


# torch.save's legacy (pre-1.6) stream starts with protocol 2 and torch's magic number.
_LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."


def _deep_header(depth: int, value: bytes = b"") -> bytes:
    """A safetensors header with one 4x4 F32 tensor and ``__metadata__`` holding ``value``
    inside ``depth`` nested lists."""
    nested = b"[" * depth + value + b"]" * depth
    return (
        b'{"__metadata__": {"x": ' + nested + b"}, "
        b'"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}'
    )


def _zip_member_patched(archive: bytes, *, flag_bits: int = 0, method: int | None = None) -> bytes:
    """``archive`` (one member) with the member's flag bits or compression method rewritten in
    both its local and its central header, as an encrypting or deflate64 zip tool writes."""
    data = bytearray(archive)
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    for offset, header in ((6, local), (8, central)):  # flags at +6 (local), +8 (central)
        flags = struct.unpack_from("<H", data, header + offset)[0]
        struct.pack_into("<H", data, header + offset, flags | flag_bits)
        if method is not None:
            struct.pack_into("<H", data, header + offset + 2, method)  # method follows flags
    return bytes(data)


def _valid_safetensors() -> bytes:
    data = np.arange(16, dtype=np.float32).tobytes()
    return _safetensors({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, data)


def _valid_npz() -> bytes:
    return _zip({"w.npy": _npy(np.arange(16, dtype=np.float32).reshape(4, 4))})


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------

# nmsim report reads only headers to decide what to analyse and skips, with exit 0, tensors
# that are not floating point (specs/report.md): an object-dtype member is never unpickled.
_REPORT_SKIPS = "exit 0: nmsim report skips the non-float tensor (dtype=object) unread"
_ADAPRUNE_SKIPS = (
    "exit 0: nmref adaprune skips the non-float tensor (dtype=object) unread and converts the "
    "float weight"
)


def _entries(marker: Path) -> list[tuple[Entry, bytes | None]]:
    """(entry, contents); contents None makes a folder."""
    f32 = np.arange(16, dtype=np.float32).tobytes()
    header_4x4 = {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}
    valid_st = _valid_safetensors()
    valid_npy = _npy(np.arange(16, dtype=np.float32).reshape(4, 4))
    valid_npz = _valid_npz()
    # a 2:4 pattern (keeps 1, 1, 0, 0 of every 4), so nmref check passes it and reads on
    two_of_four = np.tile(np.array([1, 1, 0, 0], np.float32), (16, 4))
    object_member = _npy_header("|O", (1,)) + _evil_pickle(marker)[2:]
    return [
        # .safetensors
        (Entry("st_empty.safetensors", "empty file"), b""),
        (Entry("st_short.safetensors", "3 bytes, shorter than the length prefix"), b"\x01\x02\x03"),
        (
            Entry("st_header_past_eof.safetensors", "header length 1 MB past the end of the file"),
            struct.pack("<Q", 10**6) + b"{}",
        ),
        (
            Entry("st_header_len_huge.safetensors", "header length 2**63"),
            struct.pack("<Q", 2**63) + b"{}",
        ),
        (
            Entry("st_offsets_past_eof.safetensors", "data_offsets run 48 bytes past the end"),
            _safetensors(header_4x4, f32[:16]),
        ),
        (
            Entry("st_overlap.safetensors", "two tensors whose data_offsets overlap"),
            _safetensors(
                {
                    "a": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
                    "b": {"dtype": "F32", "shape": [4, 4], "data_offsets": [32, 96]},
                },
                f32 + f32[:32],
            ),
        ),
        (
            Entry("st_unknown_dtype.safetensors", "dtype 'Q7' that no reader knows"),
            _safetensors({"w": {"dtype": "Q7", "shape": [4, 4], "data_offsets": [0, 64]}}, f32),
        ),
        (
            Entry("st_not_json.safetensors", "header bytes that are not JSON"),
            _safetensors(None, f32, raw_header=b"not json at all!"),
        ),
        (
            Entry("st_not_utf8.safetensors", "header bytes that are not UTF-8"),
            _safetensors(None, f32, raw_header=b'{"w\xff\xfe": 1}'),
        ),
        (
            Entry("st_header_list.safetensors", "a JSON header that is a list, not an object"),
            _safetensors([1, 2, 3], f32),
        ),
        (
            Entry("st_entry_not_dict.safetensors", "a tensor entry that is a number"),
            _safetensors({"w": 5}, f32),
        ),
        (
            Entry(
                "st_huge_shape.safetensors",
                "shape (2**20, 2**20) F32 declared, 64 bytes of data",
            ),
            _safetensors(
                {"w": {"dtype": "F32", "shape": [2**20, 2**20], "data_offsets": [0, 64]}}, f32
            ),
        ),
        (
            Entry("st_bf16_past_eof.safetensors", "a BF16 tensor whose data runs past the end"),
            _safetensors({"w": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}}, b""),
        ),
        (
            Entry("st_truncated.safetensors", "a valid file cut in half"),
            valid_st[: len(valid_st) // 2],
        ),
        (
            Entry("st_is_npz.safetensors", "an .npz archive under a .safetensors name"),
            valid_npz,
        ),
        # .npy
        (Entry("npy_empty.npy", "empty file"), b""),
        (Entry("npy_bad_magic.npy", "bytes without the NumPy magic"), b"hello, not numpy\n" * 4),
        (Entry("npy_truncated.npy", "a valid 4x4 float32 file cut in its data"), valid_npy[:-20]),
        (
            Entry("npy_header_cut.npy", "the magic and half a header"),
            valid_npy[:40],
        ),
        (
            Entry(
                "npy_lying_header.npy", "header declares (2**20, 2**20) float64, 64 bytes follow"
            ),
            _npy_header("<f8", (2**20, 2**20)) + f32,
        ),
        (
            Entry("npy_header_code.npy", "a header that is a Python expression, not a literal"),
            b"\x93NUMPY\x01\x00"
            + struct.pack("<H", 64)
            + b"__import__('os').getcwd()".ljust(63)
            + b"\n",
        ),
        (
            Entry("npy_object.npy", "object dtype whose pickle would create the marker"),
            object_member,
        ),
        (
            Entry("npy_pickle.npy", "a bare pickle that would create the marker"),
            _evil_pickle(marker),
        ),
        # .npz
        (Entry("npz_empty.npz", "empty file"), b""),
        (Entry("npz_not_zip.npz", "text, not a zip archive"), b"this is not a zip archive\n" * 4),
        (
            Entry("npz_truncated.npz", "a valid archive cut in half"),
            valid_npz[: len(valid_npz) // 2],
        ),
        (
            Entry("npz_lying_member.npz", "member header declares (2**20, 2**20) float64"),
            _zip({"w.npy": _npy_header("<f8", (2**20, 2**20)) + f32}),
        ),
        (
            Entry("npz_member_garbage.npz", "a member that is not an .npy"),
            _zip({"w.npy": b"garbage, not an npy member"}),
        ),
        (
            Entry("npz_bomb.npz", f"deflated zeros inflating to {BOMB_BYTES} bytes"),
            _bomb(),
        ),
        (
            Entry(
                "npz_object.npz", "only an object-dtype member whose pickle would create the marker"
            ),
            _zip({"w.npy": object_member}),
        ),
        (
            Entry(
                "npz_object_and_float.npz",
                "a 16x16 float32 2:4 weight beside an object-dtype member whose pickle would "
                "create the marker",
                {"report": _REPORT_SKIPS, "adaprune": _ADAPRUNE_SKIPS},
            ),
            _zip({"fc.weight.npy": _npy(two_of_four), "w.npy": object_member}),
        ),
        (
            Entry(
                "npz_compressed_lying.npz",
                "an nmsim-compress-shaped archive whose values member lies about its shape",
            ),
            _zip(
                {
                    "values.npy": _npy_header("<f2", (2**20, 2**20)) + f32,
                    "metadata.npy": _npy(np.zeros((4, 1), dtype=np.uint16)),
                    "dtype_kind.npy": _npy(np.array("fp16")),
                    "layout.npy": _npy(np.array("cutlass_sm80")),
                    "shape.npy": _npy(np.array([4, 8], dtype=np.int64)),
                    "format.npy": _npy(np.array("nmsim-2to4-v1")),
                }
            ),
        ),
        (
            Entry("npz_duplicate_member.npz", "two members named w.npy, 4x4 and 8x8"),
            _duplicate_members(),
        ),
        (
            Entry(
                "npz_members_w_and_w_npy.npz",
                "members w.npy (4x4) and w (8x8), both read as tensor w (issue 37)",
            ),
            _zip(
                {
                    "w.npy": _npy(np.ones((4, 4), np.float32)),
                    "w": _npy(np.ones((8, 8), np.float32)),
                }
            ),
        ),
        (Entry("npz_no_members.npz", "a valid zip archive with no members"), _zip({})),
        (
            Entry("npz_negative_shape.npz", "a member declaring shape (-1, 4)"),
            _zip({"w.npy": _npy_header("<f4", (-1, 4)) + f32}),
        ),
        (
            Entry("npy_void_1gb.npy", "one element of a declared 10**9-byte void dtype, no data"),
            _npy_header("|V1000000000", (1,)),
        ),
        (
            Entry("pt_zip_without_data.pt", "a zip without the data.pkl torch.save writes"),
            _zip({"archive/version": b"3\n"}),
        ),
        (
            Entry("npz_traversal.npz", "a member named ../../escape.npy holding garbage"),
            _zip({"../../escape.npy": b"garbage"}),
        ),
        # issue 37, messages: what Python's own readers answered with a traceback or with words
        # naming neither the file nor the member (the corpus test wants one line naming both)
        (
            Entry(
                "st_deep_metadata.safetensors",
                "__metadata__ nested 100,000 lists deep (RecursionError in the JSON parser)",
            ),
            _safetensors(None, f32, raw_header=_deep_header(100_000)),
        ),
        (
            Entry(
                "st_huge_int_metadata.safetensors",
                "__metadata__ holding a 5,000-digit integer (Python's digit limit)",
            ),
            _safetensors(None, f32, raw_header=_deep_header(0, value=b"9" * 5000)),
        ),
        (
            Entry("st_f6_dtype.safetensors", "an F6_E2M3 tensor: no NumPy dtype, no decoder here"),
            _safetensors({"w": {"dtype": "F6_E2M3", "shape": [4, 4], "data_offsets": [0, 12]}})
            + bytes(12),
        ),
        (
            Entry("npz_encrypted.npz", "a member flagged encrypted (zipfile: RuntimeError)"),
            _zip_member_patched(valid_npz, flag_bits=0x1),
        ),
        (
            Entry(
                "npz_deflate64.npz",
                "a member compressed with zip method 9, deflate64 (zipfile: NotImplementedError)",
            ),
            _zip_member_patched(valid_npz, method=9),
        ),
        (
            Entry(
                "npz_void_float8.npz",
                "a float8 array as ml_dtypes saves it: dtype |V1, raw bytes without a format",
            ),
            _zip({"w.npy": _npy_header("|V1", (4, 4)) + bytes(16)}),
        ),
        # .pt / .pth
        (
            Entry("pt_zip_pickle.pt", "a torch.save-style zip whose data.pkl runs exec()"),
            _zip(
                {
                    "archive/data.pkl": _evil_pickle(marker),
                    "archive/byteorder": b"little",
                    "archive/version": b"3\n",
                }
            ),
        ),
        (
            Entry(
                "pt_legacy_pickle.pth", "torch's legacy magic followed by a pickle calling open()"
            ),
            _LEGACY_TORCH_MAGIC + _evil_open_pickle(marker)[2:],
        ),
        (Entry("pt_bare_pickle.pt", "a bare pickle calling exec()"), _evil_pickle(marker)),
        (Entry("pt_empty.pt", "empty file"), b""),
        # folders named like checkpoints
        (Entry("dir_checkpoint.safetensors", "a folder"), None),
        (Entry("dir_checkpoint.npz", "a folder"), None),
        (Entry("dir_checkpoint.npy", "a folder"), None),
        (Entry("dir_checkpoint.pt", "a folder"), None),
        # hostile names (hostile contents too, so that every command must refuse them)
        (Entry(b"name_\xff\xfe_latin.npz", "a non-UTF-8 name; not a zip"), b"not a zip"),
        (Entry(b"name_\xe9t\xe9.npy", "a non-UTF-8 name; truncated .npy"), valid_npy[:-20]),
        (Entry("name_\x1b[31mred\x1b[0m.npz", "escape bytes in the name; not a zip"), b"nope"),
        (
            Entry("name_with\nnewline.npy", "a newline in the name; lying header"),
            _npy_header("<f8", (2**20, 2**20)) + f32,
        ),
        (Entry("-o.npz", "a name that looks like a flag; truncated zip"), valid_npz[:30]),
        (
            Entry("--force.safetensors", "a name that looks like a flag; header past the end"),
            struct.pack("<Q", 10**6) + b"{}",
        ),
        (Entry("name ..\\ a:b|c*?;$(x).npz", "shell and path characters; not a zip"), b"nope"),
    ]


def write_corpus(folder: str | os.PathLike[str]) -> list[Entry]:
    """Write the corpus into ``folder`` (created if missing) and return its entries.

    The marker that a pickle's execution would create is ``folder / MARKER``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder.resolve() / MARKER
    entries = []
    for entry, contents in _entries(marker):
        raw = entry.name if isinstance(entry.name, bytes) else os.fsencode(entry.name)
        target = os.path.join(os.fsencode(folder), raw)
        if contents is None:
            os.makedirs(target, exist_ok=True)
        else:
            with open(target, "wb") as handle:
                handle.write(contents)
        entries.append(entry)
    return entries


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python scripts/hostile_files.py DIR", file=sys.stderr)
        return 2
    entries = write_corpus(argv[0])
    for entry in entries:
        name = entry.name if isinstance(entry.name, str) else os.fsdecode(entry.name)
        handled = "; ".join(f"{c}: {why}" for c, why in entry.handled.items())
        print(
            f"{name!r}: {entry.what}; refused by {', '.join(entry.refused_by)}"
            + (f"; {handled}" if handled else "")
        )
    print(f"{len(entries)} entries in {argv[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
