"""Hugging Face model folders and sharded ``.safetensors`` checkpoints, read and written.

A model folder holds ``config.json`` and either ``model.safetensors`` or
``model.safetensors.index.json`` plus the shards its ``weight_map`` names
(``{"weight_map": {tensor name: shard file name}, "metadata": {...}}``). This module
validates such an input (``specs/errors.md`` section 6: every shard inside the
folder, present, and every tensor in exactly the one shard the index names), lists
its tensors from the shards' headers only, and reads one tensor at a time from the
memory-mapped shard, so memory is bounded by the largest tensor whatever the
model's size. :func:`write_model` writes a sharded output (one shard per input
shard, with its own index) through :func:`nmref.io.output.output_folder`: the whole
folder appears at once, or the previous one stays.

Nothing named in ``config.json`` or the index is imported or executed; both are read
as JSON, with a size limit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from numpy.typing import NDArray

from nmref._json_toml import load_json
from nmref.io.checkpoints import (
    TensorInfo,
    TensorRecord,
    check_regular_file,
    list_tensors,
    read_tensor,
)
from nmref.io.output import output_folder
from nmref.io.safetensors_writer import PlannedTensor, stream_safetensors

__all__ = [
    "INDEX_NAME",
    "INDEX_SUFFIX",
    "ModelCheckpoint",
    "is_model_input",
    "open_model",
    "write_model",
]

INDEX_SUFFIX = ".safetensors.index.json"
INDEX_NAME = "model" + INDEX_SUFFIX
SINGLE_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
#: An index or config larger than this is refused unread (real ones are ~100 KB).
JSON_LIMIT_BYTES = 64 * 2**20


@dataclass(frozen=True)
class ModelCheckpoint:
    """A validated model folder: where each tensor lives, in reading order.

    Attributes
    ----------
    root : Path
        The folder.
    index : Path or None
        The ``*.safetensors.index.json`` read, or None for a single ``model.safetensors``.
    tensors : tuple of (TensorInfo, str)
        Every tensor and the name of its shard; shards in sorted order, each shard's
        tensors sorted by name (the order ``safetensors`` lists them).
    metadata : dict
        The index's ``metadata`` (empty without an index).
    config : dict
        ``config.json`` as JSON (empty when absent).
    """

    root: Path
    index: Path | None
    tensors: tuple[tuple[TensorInfo, str], ...]
    metadata: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    @property
    def shards(self) -> tuple[str, ...]:
        """Shard file names, in reading order."""
        return tuple(dict.fromkeys(shard for _, shard in self.tensors))

    @property
    def name(self) -> str:
        """The model's name: ``config.json``'s ``_name_or_path``, else the folder's name."""
        named = self.config.get("_name_or_path")
        if isinstance(named, str) and named.strip():
            return named.strip()
        return self.root.resolve().name or str(self.root)

    def infos(self) -> list[TensorInfo]:
        """Every tensor's name, shape and stored dtype (headers only)."""
        return [info for info, _ in self.tensors]

    def shard_path(self, name: str) -> Path:
        """The shard file holding tensor ``name``."""
        for info, shard in self.tensors:
            if info.name == name:
                return self.root / shard
        raise KeyError(f"{str(self.root)!r} has no tensor named {name!r}")

    def read(self, name: str) -> TensorRecord:
        """One tensor (memory-mapped; BF16 as its exact float32 upcast)."""
        return read_tensor(self.shard_path(name), name)

    def records(self) -> Iterator[TensorRecord]:
        """Every tensor, one at a time, in reading order."""
        for info, shard in self.tensors:
            yield read_tensor(self.root / shard, info.name)


def is_model_input(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a model folder or a ``*.safetensors.index.json`` to read as one.

    A folder counts when it holds ``config.json``, an index or a ``.safetensors`` file
    (an empty folder named ``w.safetensors`` is not one, and is refused as a folder).
    """
    path = Path(path)
    if path.name.lower().endswith(INDEX_SUFFIX):
        return True
    if not path.is_dir():
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(
        n == CONFIG_NAME or n.lower().endswith((".safetensors", INDEX_SUFFIX)) for n in names
    )


def _read_json(path: Path, what: str) -> dict:
    """A JSON object from ``path``; duplicate keys refused (the last would silently win)."""
    check_regular_file(path, f"{what} {str(path)!r}", noun="JSON file")
    if path.stat().st_size > JSON_LIMIT_BYTES:
        raise ValueError(
            f"{what} {str(path)!r} is over {JSON_LIMIT_BYTES // 2**20} MiB; refused unread"
        )

    def unique(pairs: list[tuple[str, object]]) -> dict:
        seen: dict[str, object] = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(f"{what} {str(path)!r} names {key!r} twice")
            seen[key] = value
        return seen

    try:
        value = load_json(
            path.read_bytes().decode("utf-8"), f"{what} {str(path)!r}", object_pairs_hook=unique
        )
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} {str(path)!r} is not a JSON object")
    return value


def _shard_inside(root: Path, shard: object, index: Path) -> str:
    """Refuse a shard name that is not a ``.safetensors`` file inside ``root``."""
    where = f"index {str(index)!r}"
    if not isinstance(shard, str) or not shard:
        raise ValueError(f"{where}: weight_map values must be shard file names, got {shard!r}")
    candidate = root / shard
    if os.path.isabs(shard) or ".." in Path(shard).parts:
        raise ValueError(
            f"{where}: shard {shard!r} is outside the model folder (path traversal); refused"
        )
    if Path(shard).name != shard or "\\" in shard:
        raise ValueError(
            f"{where}: shard {shard!r} must be a file name in the model folder (no sub-folders)"
        )
    try:
        inside = root.resolve() in candidate.resolve().parents
    except (OSError, RuntimeError):  # a symbolic-link loop
        inside = False
    if not inside:
        raise ValueError(
            f"{where}: shard {shard!r} resolves outside the model folder (a symbolic link "
            "out of it); refused"
        )
    if not shard.lower().endswith(".safetensors"):
        raise ValueError(f"{where}: shard {shard!r} must be a .safetensors file")
    if not candidate.exists():
        raise ValueError(f"{where}: shard {shard!r} is missing from the model folder")
    check_regular_file(candidate, f"{where}: shard {shard!r}", noun="shard file")
    return shard


def _from_index(index: Path, config: dict) -> ModelCheckpoint:
    root = index.parent
    where = f"index {str(index)!r}"
    document = _read_json(index, "index")
    weight_map = document.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{where} has no weight_map object naming each tensor's shard")
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: metadata must be a JSON object")
    shards = sorted({_shard_inside(root, shard, index) for shard in weight_map.values()})
    holder: dict[str, str] = {}
    tensors: list[tuple[TensorInfo, str]] = []
    for shard in shards:
        for info in list_tensors(root / shard):
            if info.name in holder:
                raise ValueError(
                    f"{where}: tensor {info.name!r} is in two shards, {holder[info.name]!r} "
                    f"and {shard!r}; ambiguous, refused"
                )
            holder[info.name] = shard
            listed = weight_map.get(info.name)
            if listed is None:
                raise ValueError(
                    f"{where}: shard {shard!r} holds tensor {info.name!r}, which the "
                    "weight_map does not list"
                )
            if listed != shard:
                raise ValueError(
                    f"{where}: weight_map puts tensor {info.name!r} in {listed!r} but it is in "
                    f"{shard!r}"
                )
            tensors.append((info, shard))
    for name, shard in weight_map.items():
        if name not in holder:
            raise ValueError(
                f"{where}: weight_map puts tensor {name!r} in {shard!r}, which does not hold it"
            )
    return ModelCheckpoint(root, index, tuple(tensors), dict(metadata), config)


def open_model(path: str | os.PathLike[str]) -> ModelCheckpoint:
    """Validate and list a model folder or a ``*.safetensors.index.json``; reads headers only.

    Parameters
    ----------
    path : path-like
        A folder holding ``model.safetensors.index.json`` (or one other
        ``*.safetensors.index.json``, or ``model.safetensors``, or exactly one
        ``.safetensors`` file), or an index file itself.

    Returns
    -------
    ModelCheckpoint

    Raises
    ------
    ValueError
        One line naming the index and the rule: a shard outside the folder (an
        absolute path, ``..``, a symbolic link out of it), missing, not a regular
        ``.safetensors`` file or corrupt; a tensor in two shards, in another shard
        than the index says, or in a shard but not in the index; an index that is
        not a JSON object with a ``weight_map``, names a key twice, or is over
        64 MiB; a folder with no weights or with several indexes.
    FileNotFoundError
        If ``path`` does not exist.

    Notes
    -----
    Time O(shards + tensors): each shard's header is read once; no tensor data.
    """
    path = Path(path)
    if path.name.lower().endswith(INDEX_SUFFIX):
        check_regular_file(path, f"index {str(path)!r}", noun="index file")
        config_path = path.parent / CONFIG_NAME
        config = _read_json(config_path, "config") if config_path.exists() else {}
        return _from_index(path, config)
    if not path.exists():
        raise FileNotFoundError(f"model folder {str(path)!r} does not exist")
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} is not a model folder")
    config_path = path / CONFIG_NAME
    config = _read_json(config_path, "config") if config_path.exists() else {}
    if (path / INDEX_NAME).exists():
        return _from_index(path / INDEX_NAME, config)
    indexes = sorted(n for n in os.listdir(path) if n.lower().endswith(INDEX_SUFFIX))
    if len(indexes) > 1:
        raise ValueError(
            f"model folder {str(path)!r} holds {len(indexes)} indexes ({', '.join(indexes)}); "
            "name the one to read"
        )
    if indexes:
        return _from_index(path / indexes[0], config)
    singles = [SINGLE_NAME] if (path / SINGLE_NAME).exists() else []
    singles = singles or sorted(n for n in os.listdir(path) if n.lower().endswith(".safetensors"))
    if len(singles) != 1:
        found = f"{len(singles)} .safetensors files and no index" if singles else "no weights"
        raise ValueError(
            f"model folder {str(path)!r} has {found}: it needs {SINGLE_NAME} or {INDEX_NAME}"
        )
    single = path / singles[0]
    check_regular_file(single, f"shard {str(single)!r}", noun="shard file")
    tensors = tuple((info, singles[0]) for info in list_tensors(single))
    return ModelCheckpoint(path, None, tensors, {}, config)


def iter_input(path: str | os.PathLike[str]) -> Iterator[TensorRecord]:
    """Every tensor of a tensor file or a model folder / index, one at a time."""
    if is_model_input(path):
        yield from open_model(path).records()
        return
    from nmref.io.checkpoints import iter_tensors

    yield from iter_tensors(path)


def write_model(
    target: str | os.PathLike[str],
    model: ModelCheckpoint,
    planned: Sequence[tuple[str, PlannedTensor]],
    compute: Callable[[str], NDArray],
    *,
    force: bool = False,
    metadata: dict[str, str] | None = None,
    copy_config: bool = False,
    on_tensor: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write a sharded output folder: one shard per input shard, and its own index.

    Parameters
    ----------
    target : path-like
        The folder to create (``force``: replace; only a folder holding nothing but files
        this writer writes, its shard names, the index and ``config.json``, is ever
        replaced; an empty folder is used without ``force``).
    model : ModelCheckpoint
        The input; its folder is refused as (or inside) ``target``.
    planned : sequence of (shard name, PlannedTensor)
        The output tensors and the input shard each comes from, in reading order.
    compute : callable
        ``compute(name)`` returns the output tensor ``name``; called once per tensor,
        in order, so that only one output tensor is held at a time.
    metadata : dict, optional
        ``__metadata__`` of every shard and the index's ``metadata`` (with ``total_size``).
    copy_config : bool
        Copy ``config.json`` too (a masked-weights output is still that model).
    on_tensor : callable, optional
        Called with each tensor's name once it is written (progress display).

    Returns
    -------
    list of Path
        The files written, under their final names.

    Notes
    -----
    Time O(bytes); memory one output tensor. The index is written when the input had
    one (a single ``model.safetensors`` gives a single one). Atomic as a whole
    (:func:`nmref.io.output.output_folder`).
    """
    by_shard: dict[str, list[PlannedTensor]] = {}
    for shard, tensor in planned:
        by_shard.setdefault(shard, []).append(tensor)
    written: list[Path] = []
    total = 0
    weight_map: dict[str, str] = {}
    # the names this writer may put in the folder: --force replaces a folder holding no other
    owned = {*by_shard, INDEX_NAME, CONFIG_NAME}
    with output_folder(target, force=force, inputs=(model.root,), flag="-o", owned=owned) as folder:
        for shard, tensors in by_shard.items():
            sizes: list[int] = []
            writer = _shard_writer(tensors, compute, metadata, on_tensor, sizes)
            written.append(folder.write(shard, writer))
            total += sizes[0]
            weight_map.update((tensor.name, shard) for tensor in tensors)
        if model.index is not None:
            document = {
                "metadata": {**(metadata or {}), "total_size": total},
                "weight_map": dict(sorted(weight_map.items())),
            }
            data = (json.dumps(document, indent=2) + "\n").encode()
            written.append(folder.write(INDEX_NAME, lambda p: Path(p).write_bytes(data)))
        if copy_config and (model.root / CONFIG_NAME).is_file():
            config = (model.root / CONFIG_NAME).read_bytes()
            written.append(folder.write(CONFIG_NAME, lambda p: Path(p).write_bytes(config)))
    return written


def _shard_writer(
    tensors: list[PlannedTensor],
    compute: Callable[[str], NDArray],
    metadata: dict[str, str] | None,
    on_tensor: Callable[[str], None] | None,
    sizes: list[int],
) -> Callable[[str], None]:
    """``write(temporary)`` streaming one shard's tensors; appends the data size to ``sizes``."""

    def arrays() -> Iterator[tuple[str, NDArray]]:
        for tensor in tensors:
            array = compute(tensor.name)
            if on_tensor is not None:  # counted once computed: writing it is the quick part
                on_tensor(tensor.name)
            yield tensor.name, array

    def write(temporary: str) -> None:
        sizes.append(stream_safetensors(temporary, tensors, arrays(), metadata))

    return write
