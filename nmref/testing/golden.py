"""Golden vectors: stored inputs and expected outputs that pin the spec's answers.

The vectors ship with nmref as package data (``nmref/testing/data/vectors``), so an
installed wheel carries the whole oracle. ``manifest.json`` lists them; each is an
``.npz`` file (read with ``allow_pickle=False``) holding ``input`` and ``expected``
arrays. A ``"bfloat16"`` vector stores its input as the exact float32 upcast. The
files are written by ``scripts/golden/make_vectors.py`` from the readable reference
and never edited by hand; the manifest records each file's SHA-256.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import io
import json
import os
import stat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from nmref._json_toml import load_json
from nmref.testing.cases import Case
from nmref.testing.masks import compare_masks
from nmref.testing.report import Failure, Report

__all__ = [
    "GoldenVector",
    "check_golden_vectors",
    "default_vectors_dir",
    "load_vectors",
    "nmref_implementation",
    "transposable_function",
]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GoldenVector:
    """One stored vector: the manifest entry and its arrays."""

    name: str
    function: str
    n: int
    m: int
    dtype: str
    layout: str | None
    input: NDArray
    expected: NDArray
    extras: dict[str, NDArray] | None = None
    """Further stored inputs (e.g. ``permutation`` for Bi-Mask backward masks)."""

    def as_case(self) -> Case:
        """The vector as a kit :class:`Case`."""
        return Case(self.input, self.n, self.m, "golden", self.dtype, self.layout, self.name)


def default_vectors_dir() -> Path:
    """The golden vectors shipped with this nmref (package data, found by ``importlib.resources``).

    Returns
    -------
    Path
        ``data/vectors`` of the installed ``nmref.testing`` package, in a wheel
        install and in a source checkout alike.
    """
    vectors = importlib.resources.files("nmref.testing") / "data" / "vectors"
    # nmref is installed as a directory (never as a zip), so the resource is a real
    # folder; callers glob it and hand it to np.load.
    return Path(str(vectors))


def nmref_implementation(vector: GoldenVector) -> Callable[[NDArray, int, int], object]:
    """nmref's fast path for a golden vector, as ``impl(input, n, m)``.

    The function named by ``vector.function``, with the vector's layout, method or
    permutation bound; pass it to :func:`check_golden_vectors` to check nmref itself
    against the stored outputs (what ``nmsim verify`` does without torch).
    """
    import nmref

    if vector.function == "nm_mask":
        return nmref.nm_mask
    if vector.function.startswith("transposable_mask["):
        from nmref.transposable import transposable_mask

        method, fill = transposable_function(vector.function)
        return lambda scores, n, m: transposable_mask(scores, n, m, method=method, fill=fill)
    if vector.function == "bimask.backward_mask":
        from nmref import bimask

        def backward(weights: NDArray, n: int, m: int) -> NDArray:
            forward = bimask.forward_mask(weights, n, m, layout=vector.layout)
            permutation = vector.extras["permutation"]
            return bimask.backward_mask(weights, forward, permutation, n, m, layout=vector.layout)

        return backward
    return lambda weights, n, m: nmref.magnitude_mask(weights, n, m, layout=vector.layout)


def transposable_function(function: str) -> tuple[str, str]:
    """``(method, fill)`` of a ``transposable_mask[METHOD]`` or ``[METHOD,FILL]`` vector.

    Examples
    --------
    >>> transposable_function("transposable_mask[exact,at_most]")
    ('exact', 'at_most')
    """
    method, _, fill = function[len("transposable_mask[") : -1].partition(",")
    return method, fill or "exact"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: What every manifest entry holds, and the type it must have.
_ENTRY_FIELDS = {
    "name": str,
    "file": str,
    "function": str,
    "n": int,
    "m": int,
    "dtype": str,
    "sha256": str,
}


def read_manifest(directory: Path) -> list[dict]:
    """The checked entries of ``directory/manifest.json``.

    A vectors folder may come from anyone (``nmsim verify --vectors``): the manifest must be
    JSON of the known schema, and every ``file`` a plain ``.npz`` name inside the folder, so
    that no entry can make the reader open a path outside it.

    Raises
    ------
    FileNotFoundError
        No folder or no ``manifest.json`` in it.
    ValueError
        The manifest is not UTF-8 JSON of this schema (the message names the entry).
    """
    label = repr(str(directory))
    if not directory.is_dir():
        raise FileNotFoundError(f"vectors folder {label} does not exist or is not a folder")
    path = directory / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"vectors folder {label} has no manifest.json")
    try:
        text = _regular_file_bytes(path, "manifest.json").decode("utf-8")
        manifest = load_json(text, f"{label}/manifest.json")
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{label}/manifest.json is not UTF-8 JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        version = manifest.get("schema_version") if isinstance(manifest, dict) else None
        raise ValueError(
            f"{label}/manifest.json: schema_version={version!r} is not {SCHEMA_VERSION}"
        )
    entries = manifest.get("vectors")
    if not isinstance(entries, list):
        raise ValueError(f"{label}/manifest.json: 'vectors' must be a list of entries")
    for index, entry in enumerate(entries):
        where = f"{label}/manifest.json: vectors[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be an object")
        for key, kind in _ENTRY_FIELDS.items():
            value = entry.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{where}: {key}={value!r} must be a {kind.__name__}")
        name = entry["file"]
        if Path(name).name != name or name in (".", "..") or not name.endswith(".npz"):
            raise ValueError(
                f"{where}: file={name!r} must be a plain .npz file name inside the folder"
            )
    return entries


#: The most bytes a manifest or a vector file (and the arrays it inflates to) may hold: the
#: shipped files are under 20 KB each, and a folder may come from anyone (``--vectors``).
VECTOR_FILE_LIMIT = 16 * 2**20


def _regular_file_bytes(path: Path, what: str, limit: int = VECTOR_FILE_LIMIT) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; else one error line.

    A vector that was a symbolic link to ``/dev/zero`` was read until the machine ran out of
    memory (24 GB), and a FIFO blocked for ever: the kind of file is checked before it is
    opened (following links), and again on the opened descriptor (opened non-blocking,
    should a FIFO replace it meanwhile), and the size before reading.
    """
    label = f"{what} {str(path)!r}"
    if not path.is_file():
        if not path.exists():
            raise FileNotFoundError(f"{label} does not exist")
        raise ValueError(
            f"{label} is not a regular file (a folder, FIFO, socket or device); it is not opened"
        )
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"{label} is not a regular file; it is not read")
        if status.st_size > limit:
            raise ValueError(f"{label} holds {status.st_size} bytes, over the {limit}-byte limit")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{label} grew past the {limit}-byte limit while it was read")
    return data


def _vector_archive(path: Path, data: bytes) -> np.lib.npyio.NpzFile:
    """``np.load`` of a vector file's bytes, its members' inflated sizes checked first."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile as error:
        raise ValueError(f"vector file {str(path)!r} is not an .npz archive: {error}") from None
    if inflated > VECTOR_FILE_LIMIT:
        raise ValueError(
            f"vector file {str(path)!r} inflates to {inflated} bytes, over the "
            f"{VECTOR_FILE_LIMIT}-byte limit"
        )
    return np.load(io.BytesIO(data), allow_pickle=False)


def load_vectors(
    directory: Path | str | None = None, *, verify_digests: bool = True
) -> Iterator[GoldenVector]:
    """Yield the vectors listed in ``directory/manifest.json``.

    Raises
    ------
    FileNotFoundError
        If the manifest or a listed file is missing.
    ValueError
        If the schema version is unknown or a file's SHA-256 differs from the
        manifest (the file was changed without regenerating the manifest); if a listed
        file is not a regular file (a link to a device, a FIFO: never opened) or it or its
        arrays exceed :data:`VECTOR_FILE_LIMIT` bytes.
    """
    directory = Path(directory) if directory is not None else default_vectors_dir()
    for entry in read_manifest(directory):
        path = directory / entry["file"]
        data = _regular_file_bytes(path, "vector file")
        if verify_digests and hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise ValueError(f"{path.name}: SHA-256 differs from manifest.json; regenerate both")
        with _vector_archive(path, data) as arrays:
            try:
                loaded = {k: arrays[k] for k in arrays.files}
                stored_input, expected = loaded.pop("input"), loaded.pop("expected")
            except (ValueError, KeyError, EOFError, MemoryError, zipfile.BadZipFile) as error:
                # a member whose header lies (numpy allocates what it declares), a missing array
                raise ValueError(f"vector file {str(path)!r} cannot be read: {error}") from None
        yield GoldenVector(
            entry["name"],
            entry["function"],
            int(entry["n"]),
            int(entry["m"]),
            entry["dtype"],
            entry.get("layout"),
            stored_input,
            expected,
            loaded,
        )


def check_golden_vectors(
    implementation_for: Callable[[GoldenVector], Callable[[NDArray, int, int], object] | None],
    directory: Path | str | None = None,
    *,
    raise_on_failure: bool = True,
) -> Report:
    """Run an implementation on every golden vector and compare with the stored output.

    Parameters
    ----------
    implementation_for : callable
        Given a vector, returns the callable ``impl(input, n, m)`` to run on
        it (e.g. chosen by ``vector.function`` and ``vector.dtype``), or
        ``None`` to skip that vector (an algorithm the implementation lacks).

    Returns
    -------
    Report
        One case per vector run.
    """
    import nmref

    report = Report("golden vectors")
    for vector in load_vectors(directory):
        impl = implementation_for(vector)
        if impl is None:
            continue
        case = vector.as_case()
        try:
            got = impl(vector.input, vector.n, vector.m)
        except Exception as error:  # any exception on a stored valid input is a failure
            report.add(Failure("golden vectors", case, f"  raised {type(error).__name__}: {error}"))
            continue
        if vector.function not in ("nm_mask", "magnitude_mask"):
            # Masks grouped other than along rows (e.g. Bi-Mask's backward mask): the first
            # differing entry is the clearest report.
            got_array = np.asarray(got)
            failure = None
            if got_array.shape != vector.expected.shape or not np.array_equal(
                got_array.astype(vector.expected.dtype), vector.expected
            ):
                where = (
                    tuple(int(i) for i in np.argwhere(got_array != vector.expected)[0])
                    if got_array.shape == vector.expected.shape
                    else f"shape {got_array.shape}"
                )
                failure = Failure(
                    f"golden {vector.name}", case, f"  differs from the stored output at {where}"
                )
            report.add(failure)
            continue
        if vector.function == "magnitude_mask":
            keys = nmref.to_magnitudes(nmref.to_reduction_matrix(vector.input, vector.layout))

            def to_matrix(mask: NDArray, layout: str | None = vector.layout) -> NDArray:
                return nmref.to_reduction_matrix(mask, layout)
        else:
            length = vector.input.shape[-1]
            keys = vector.input.reshape(-1, length)

            def to_matrix(mask: NDArray, length: int = length) -> NDArray:
                return mask.reshape(-1, length)

        failure, gap = compare_masks(
            f"golden {vector.name}", case, got, vector.expected, keys, to_matrix
        )
        report.add(failure, gap)
    if raise_on_failure:
        report.raise_for_failure()
    return report
