"""The measured corpus: published dense vs 2:4 GEMM timings, one row per shape.

The corpus lives in ``nmsim/data/gemm_corpus/*.toml`` (shipped in the wheel).
Every file holds ``[[sources]]`` (one public document each: where the numbers
are, how its dimension names map to the GEMM view, how far to trust it) and
``[[rows]]`` (one measured GEMM shape each). The schema is normative text in
``specs/gemm_model.md`` section 7; :func:`load_corpus` enforces it and names
the file and row of the first violation, so a corrupted row never reaches the
fit silently.

GEMM view: ``C[m, n] = A[m, k] @ B[k, n]`` with A the 2:4 operand, grouped
along ``k``. A linear layer ``Y = X @ W.T`` with a sparse weight ``W[out, in]``
and ``X[tokens, in]`` is ``m = out, n = tokens, k = in``.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from nmref._json_toml import load_toml
from nmref.io.checkpoints import check_regular_file
from nmsim.perf.hardware import get_gpu, normalize_dtype

__all__ = [
    "LEVELS",
    "LIBRARIES",
    "CorpusError",
    "Measurement",
    "MeasurementSource",
    "corpus_files",
    "load_corpus",
    "load_corpus_file",
]

#: Sparse kernel libraries a row may name; ``other`` rows are kept but never fitted.
LIBRARIES: tuple[str, ...] = ("cusparselt", "cutlass", "other")

#: ``kernel``: kernel time only; ``framework``: a framework call timed from the host.
LEVELS: tuple[str, ...] = ("kernel", "framework")

SOURCE_KINDS: tuple[str, ...] = (
    "pr",
    "issue",
    "tutorial",
    "blog",
    "paper",
    "docs",
    "csv",
    "code",
    "forum",
    "sweep",
)
TRUST: tuple[str, ...] = ("high", "medium", "low")
ROW_DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp8", "int8", "tf32")

_SOURCE_REQUIRED = ("id", "title", "kind", "where", "convention", "trust", "trust_note")
_ROW_REQUIRED = (
    "id",
    "source",
    "gpu",
    "dtype",
    "library",
    "level",
    "m",
    "n",
    "k",
    "source_dims",
    "quote",
)


class CorpusError(ValueError):
    """A corpus file or row breaks the schema; the message names the file and the row."""


@dataclass(frozen=True)
class MeasurementSource:
    """One public document the corpus copies measurements from."""

    id: str
    title: str
    kind: str
    where: str
    convention: str
    trust: str
    trust_note: str
    url: str = ""
    file: str = ""
    dry_run: bool = False
    document: str = ""


@dataclass(frozen=True)
class Measurement:
    """One published dense vs 2:4 measurement of one GEMM shape.

    ``speedup`` is dense time / sparse time (> 1: the 2:4 GEMM is faster),
    computed from the times where both are printed.
    """

    id: str
    source: str
    gpu: str
    dtype: str
    library: str
    level: str
    m: int
    n: int
    k: int
    speedup: float
    dense_us: float | None = None
    sparse_us: float | None = None
    count: int = 1
    tags: tuple[str, ...] = ()
    trust: str = "medium"
    document: str = ""
    library_detail: str = ""
    dense_library: str = ""
    gpu_as_printed: str = ""
    source_dims: str = ""
    quote: str = ""
    note: str = ""
    file: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def architecture(self) -> str:
        """Architecture key of the row's GPU (compute capability, ``"sm_80"``)."""
        from nmsim.perf.gemm_parameters import architecture_key

        return architecture_key(get_gpu(self.gpu))


def _where(path: str, table: str, index: int, raw: dict[str, Any]) -> str:
    ident = raw.get("id")
    return f"{path}: {table}[{index}]" + (f" (id={ident!r})" if ident is not None else "")


def _positive_int(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CorpusError(f"{where}: {name}={value!r} must be an integer >= 1")
    return value


def _positive_float(value: Any, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CorpusError(f"{where}: {name}={value!r} must be a number")
    if not (math.isfinite(value) and value > 0):
        raise CorpusError(f"{where}: {name}={value!r} must be finite and > 0")
    return float(value)


def _choice(value: Any, name: str, allowed: Sequence[str], where: str) -> str:
    if value not in allowed:
        raise CorpusError(f"{where}: {name}={value!r} must be one of {list(allowed)}")
    return str(value)


def _source(raw: Any, index: int, path: str) -> MeasurementSource:
    if not isinstance(raw, dict):
        raise CorpusError(f"{path}: sources[{index}] must be a table")
    where = _where(path, "sources", index, raw)
    missing = [name for name in _SOURCE_REQUIRED if not raw.get(name)]
    if missing:
        raise CorpusError(f"{where}: missing or empty field(s) {missing}")
    if not raw.get("url") and not raw.get("file"):
        raise CorpusError(f"{where}: a source needs a 'url' or a 'file' (repo and path)")
    return MeasurementSource(
        id=str(raw["id"]),
        title=str(raw["title"]),
        kind=_choice(raw["kind"], "kind", SOURCE_KINDS, where),
        where=str(raw["where"]),
        convention=str(raw["convention"]),
        trust=_choice(raw["trust"], "trust", TRUST, where),
        trust_note=str(raw["trust_note"]),
        url=str(raw.get("url", "")),
        file=str(raw.get("file", "")),
        dry_run=bool(raw.get("dry_run", False)),
        # sources from one document (one benchmark suite run on several machines) share it;
        # document-level CV holds them out together
        document=str(raw.get("document", raw["id"])),
    )


def _row(raw: Any, index: int, path: str, sources: dict[str, MeasurementSource]) -> Measurement:
    if not isinstance(raw, dict):
        raise CorpusError(f"{path}: rows[{index}] must be a table")
    where = _where(path, "rows", index, raw)
    missing = [name for name in _ROW_REQUIRED if raw.get(name) in (None, "")]
    if missing:
        raise CorpusError(f"{where}: missing or empty field(s) {missing}")
    if raw["source"] not in sources:
        raise CorpusError(f"{where}: source={raw['source']!r} is not a source id of this corpus")
    try:
        gpu = get_gpu(str(raw["gpu"])).key
    except ValueError as error:
        raise CorpusError(f"{where}: gpu={raw['gpu']!r} is not in the GPU database") from error
    try:
        dtype = normalize_dtype(str(raw["dtype"]))
    except ValueError as error:
        raise CorpusError(f"{where}: {error}") from error
    dtype = _choice(dtype, "dtype", ROW_DTYPES, where)
    try:
        get_gpu(gpu).peak(dtype)
    except ValueError as error:
        raise CorpusError(f"{where}: {error}") from error
    dense = raw.get("dense_us")
    sparse = raw.get("sparse_us")
    printed = raw.get("speedup")
    if (dense is None) != (sparse is None):
        raise CorpusError(f"{where}: dense_us and sparse_us must be given together")
    if dense is None and printed is None:
        raise CorpusError(f"{where}: needs dense_us and sparse_us, or speedup")
    if dense is not None:
        dense = _positive_float(dense, "dense_us", where)
        sparse = _positive_float(sparse, "sparse_us", where)
        speedup = dense / sparse
        if printed is not None:
            printed = _positive_float(printed, "speedup", where)
            # A printed ratio beside printed times must agree with them to its rounding.
            if abs(printed - speedup) > max(0.011, 0.02 * speedup):
                raise CorpusError(
                    f"{where}: speedup={printed} disagrees with dense_us/sparse_us="
                    f"{speedup:.4f}; fix one of them"
                )
    else:
        speedup = _positive_float(printed, "speedup", where)
    # Beyond 2x is possible (a dense baseline far below its peak: int8 cuBLASLt on Blackwell
    # measures 6x), beyond 10x or below 0.01x is a typo.
    if not 0.01 <= speedup <= 10.0:
        raise CorpusError(f"{where}: speedup={speedup:.4g} is outside [0.01, 10]; a typo?")
    m = _positive_int(raw["m"], "m", where)
    n = _positive_int(raw["n"], "n", where)
    k = _positive_int(raw["k"], "k", where)
    if k % 4:
        raise CorpusError(f"{where}: k={k} must be a multiple of 4 (2:4 groups run along k)")
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise CorpusError(f"{where}: tags={tags!r} must be a list of strings")
    known = set(_ROW_REQUIRED) | {
        "dense_us",
        "sparse_us",
        "speedup",
        "count",
        "tags",
        "library_detail",
        "dense_library",
        "gpu_as_printed",
        "note",
        "out_dtype",
    }
    return Measurement(
        id=str(raw["id"]),
        source=str(raw["source"]),
        gpu=gpu,
        dtype=dtype,
        library=_choice(raw["library"], "library", LIBRARIES, where),
        level=_choice(raw["level"], "level", LEVELS, where),
        m=m,
        n=n,
        k=k,
        speedup=speedup,
        dense_us=dense,
        sparse_us=sparse,
        count=_positive_int(raw.get("count", 1), "count", where),
        tags=tuple(tags),
        trust=sources[raw["source"]].trust,
        document=sources[raw["source"]].document,
        library_detail=str(raw.get("library_detail", "")),
        dense_library=str(raw.get("dense_library", "")),
        gpu_as_printed=str(raw.get("gpu_as_printed", "")),
        source_dims=str(raw["source_dims"]),
        quote=str(raw["quote"]),
        note=str(raw.get("note", "")),
        file=path,
        extra={key: value for key, value in raw.items() if key not in known},
    )


#: A corpus file larger than this is refused before it is read (the shipped ones are < 1 MiB).
CORPUS_MAX_BYTES = 64 * 2**20


def _read_corpus_text(path: Path, name: str) -> str:
    """The text of a user's corpus file, or a :class:`CorpusError` naming it and the problem."""
    try:
        check_regular_file(path, f"corpus file {name}", noun="corpus file")
    except (ValueError, FileNotFoundError) as error:
        raise CorpusError(str(error)) from None
    size = path.stat().st_size
    if size > CORPUS_MAX_BYTES:
        raise CorpusError(
            f"{name}: {size} bytes; a corpus file is TOML text of at most {CORPUS_MAX_BYTES} bytes"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{name}: not UTF-8 text (byte {error.start}): not a corpus file"
        ) from None
    except OSError as error:
        raise CorpusError(f"{name}: cannot be read: {error.strerror}") from None


def load_corpus_file(
    path: str | Path, *, text: str | None = None
) -> tuple[tuple[MeasurementSource, ...], tuple[Measurement, ...]]:
    """Read and validate one corpus file.

    Parameters
    ----------
    path : str or Path
        The file (its name is used in error messages).
    text : str, optional
        The file's text, when it is already read (package data).

    Returns
    -------
    (sources, rows)

    Raises
    ------
    CorpusError
        Naming the file, the table index and the row id of the first violation.
    """
    # repr: a name with a newline or an escape byte stays one printable line
    name = repr(str(path))
    if text is None:
        text = _read_corpus_text(Path(path), name)
    try:
        raw = load_toml(text, name)
    except tomllib.TOMLDecodeError as error:
        raise CorpusError(f"{name}: not valid TOML: {error}") from error
    unknown = sorted(set(raw) - {"sources", "rows", "schema_version"})
    if unknown:
        raise CorpusError(
            f"{name}: unknown top-level key {unknown[0]!r}; a corpus file holds 'sources' "
            "and 'rows' (arrays of tables, [[sources]] and [[rows]])"
        )
    raw_sources = raw.get("sources", [])
    raw_rows = raw.get("rows", [])
    if not raw_sources and not raw_rows:
        raise CorpusError(f"{name}: holds no sources and no rows")
    if not isinstance(raw_sources, list) or not isinstance(raw_rows, list):
        raise CorpusError(f"{name}: 'sources' and 'rows' must be arrays of tables")
    sources = [_source(s, i, name) for i, s in enumerate(raw_sources)]
    by_id = {s.id: s for s in sources}
    if len(by_id) != len(sources):
        raise CorpusError(f"{name}: duplicate source ids")
    dry = {s.id for s in sources if s.dry_run}
    # A dry run's rows (a sweep's --dry-run on a CPU) are not measurements: not validated, dropped.
    rows = [
        _row(r, i, name, by_id)
        for i, r in enumerate(raw_rows)
        if not (isinstance(r, dict) and r.get("source") in dry)
    ]
    return tuple(sources), tuple(rows)


def corpus_files() -> tuple[tuple[str, str], ...]:
    """``(name, text)`` of every shipped corpus file, sorted by name."""
    folder = resources.files("nmsim").joinpath("data/gemm_corpus")
    entries = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".toml")),
        key=lambda entry: entry.name,
    )
    return tuple((f"gemm_corpus/{entry.name}", entry.read_text("utf-8")) for entry in entries)


def _merge(
    parts: Iterable[tuple[tuple[MeasurementSource, ...], tuple[Measurement, ...]]],
) -> tuple[tuple[MeasurementSource, ...], tuple[Measurement, ...]]:
    sources: dict[str, MeasurementSource] = {}
    rows: dict[str, Measurement] = {}
    for part_sources, part_rows in parts:
        for source in part_sources:
            if source.id in sources:
                raise CorpusError(f"source id {source.id!r} appears in two corpus files")
            sources[source.id] = source
        for row in part_rows:
            if row.id in rows:
                raise CorpusError(f"{row.file}: row id {row.id!r} appears twice in the corpus")
            rows[row.id] = row
    return tuple(sources.values()), tuple(rows.values())


@cache
def _shipped() -> tuple[tuple[MeasurementSource, ...], tuple[Measurement, ...]]:
    return _merge(load_corpus_file(name, text=text) for name, text in corpus_files())


def load_corpus(
    paths: Sequence[str | Path] | None = None, *, include_shipped: bool = True
) -> tuple[tuple[MeasurementSource, ...], tuple[Measurement, ...]]:
    """The measured corpus: the shipped files, plus any extra ``paths``.

    Parameters
    ----------
    paths : sequence of path, optional
        Extra corpus files (for example a GPU sweep's output).
    include_shipped : bool
        Start from the shipped corpus (default) or from nothing.

    Returns
    -------
    (sources, rows)
        Rows in file order (files sorted by name). Dry-run sources (a sweep's
        ``--dry-run``) are dropped with their rows: they are not measurements.

    Raises
    ------
    CorpusError
        A schema violation, naming the file and row; or an id used twice.
    """
    parts = [_shipped()] if include_shipped else []
    parts.extend(load_corpus_file(path) for path in paths or ())
    sources, rows = _merge(parts)
    dry = {s.id for s in sources if s.dry_run}
    return (
        tuple(s for s in sources if s.id not in dry),
        tuple(r for r in rows if r.source not in dry),
    )
