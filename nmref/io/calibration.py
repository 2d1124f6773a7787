"""Calibration inputs for AdaPrune (``--calibration DATA``): which rows go to which layer.

A layer ``y = W x + b`` with ``W`` ``[out, in]`` is calibrated on its inputs ``X``
``[rows, in]`` (``specs/adaprune.md`` A0). DATA gives them in one of two ways:

* an ``.npz`` or ``.safetensors`` file **keyed by layer**: the inputs of the weight
  ``fc1.weight`` are the entry named ``fc1.weight``, or else ``fc1`` (the module's name,
  the key activations are usually cached under);
* one ``.npy`` array ``[rows, in]``, **shared**: it calibrates every layer whose ``in``
  equals its column count, and no other (an MLP's first layer, or the query, key and value
  projections of a transformer block, which read the same hidden state).

:func:`calibration_key` is the keyed rule, :func:`bias_for` the rule that pairs a weight with
the bias re-fitted beside it.

:meth:`CalibrationData.gram` streams an entry's rows into
:class:`nmref.adaprune.InputGram` in bands of at most :data:`BAND_BYTES` (as float64), so
that memory is the ``in x in`` statistics plus one band: ``.npy`` and ``.safetensors``
entries are memory-mapped and only the band is read; an ``.npz`` member is inflated whole
by NumPy (the project's one memory rule, ``NMREF_MEMORY_BUDGET_GIB``, applies to it).
Every entry is checked as it is read: 2-D, real numbers, at least one row, ``in``
columns, finite. Each rule has its own one-line message naming the flag, the file, the
entry and the rule (``ValueError``; ``TypeError`` for a dtype that is not numbers).

Nothing here depends on a command: ``nmref adaprune`` and ``nmsim report --calibration``
read DATA the same way.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from nmref.adaprune import InputGram
from nmref.io.checkpoints import (
    TensorInfo,
    check_memory_budget,
    list_tensors,
    read_tensor,
    read_tensor_rows,
)

__all__ = [
    "BAND_BYTES",
    "CALIBRATION_FORMATS",
    "CalibrationData",
    "bias_for",
    "calibration_key",
]

#: The files DATA may be.
CALIBRATION_FORMATS = (".npy", ".npz", ".safetensors")
#: Rows are streamed into the statistics in bands of at most this many float64 bytes.
BAND_BYTES = 1 << 23
#: Stored dtypes that hold real numbers (inputs such as pixels may be integers or bool).
_REAL_PREFIXES = ("float", "bfloat", "int", "uint", "bool")


def calibration_key(weight_name: str, keys: Collection[str]) -> str | None:
    """The key of ``keys`` that holds the inputs of the weight ``weight_name``, or ``None``.

    The weight's own name, else its module's (the name without a final ``.weight``): the
    one rule every reader of keyed calibration inputs applies.

    Examples
    --------
    >>> calibration_key("fc1.weight", {"fc1", "fc2"}), calibration_key("fc3.weight", {"fc1"})
    ('fc1', None)
    """
    if weight_name in keys:
        return weight_name
    module = weight_name.removesuffix(".weight")
    return module if module != weight_name and module in keys else None


def bias_for(weight: TensorInfo, infos: Mapping[str, TensorInfo]) -> TensorInfo | None:
    """The bias of the layer whose weight is ``weight``, from a checkpoint's listing ``infos``.

    ``NAME.bias`` beside ``NAME.weight`` when it is a float vector of ``out`` entries (the
    Linear layer ``y = W x + b``); ``None`` otherwise (the layer is fitted without one). The
    one rule of every command that re-fits biases.

    Examples
    --------
    >>> infos = {"fc.bias": TensorInfo("fc.bias", (4,), "float32")}
    >>> bias_for(TensorInfo("fc.weight", (4, 8), "float32"), infos).name
    'fc.bias'
    >>> bias_for(TensorInfo("fc.weight", (5, 8), "float32"), infos) is None  # not out entries
    True
    """
    if len(weight.shape) != 2 or not weight.name.endswith("weight"):
        return None
    bias = infos.get(weight.name[: -len("weight")] + "bias")
    if bias is None or tuple(bias.shape) != (weight.shape[0],):
        return None
    return bias if bias.source_dtype.startswith(("float", "bfloat")) else None


@dataclass(frozen=True)
class CalibrationData:
    """A calibration file, listed from its headers; entries are read when asked for.

    Build it with :meth:`open`. Picklable (a path and the listing), so a worker process
    can read its layer's inputs itself.

    Attributes
    ----------
    path : str
        The file as the user named it.
    entries : tuple of TensorInfo
        Its arrays: names, shapes and stored dtypes.
    flag : str
        How messages name the argument (``"--calibration"``).
    """

    path: str
    entries: tuple[TensorInfo, ...]
    flag: str = "--calibration"

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, flag: str = "--calibration") -> CalibrationData:
        """List DATA's arrays (headers only) and check what can be checked without data.

        Raises
        ------
        ValueError
            A suffix other than ``.npy``/``.npz``/``.safetensors``; a file that is not a
            valid file of its kind; no arrays; a shared ``.npy`` that is not 2-D.
        FileNotFoundError
            A missing file.
        ImportError
            ``.safetensors`` without the safetensors package.
        """
        shown = str(path)
        suffix = Path(shown).suffix.lower()
        if suffix not in CALIBRATION_FORMATS:
            raise ValueError(
                f"{flag} {shown!r} must end in one of {', '.join(CALIBRATION_FORMATS)} (layer "
                "inputs [rows, in] keyed by tensor name, or one .npy array for every layer of "
                "matching in)"
            )
        try:
            entries = tuple(list_tensors(shown))
        except FileNotFoundError as error:
            raise FileNotFoundError(f"{flag}: {error}") from None
        except ValueError as error:
            raise ValueError(f"{flag}: {error}") from None
        data = cls(shown, entries, flag)
        if not entries:
            raise ValueError(f"{data._where()} holds no arrays")
        if data.shared:
            data.check_entry(entries[0], None)
        return data

    # ------------------------------------------------------------------ which entry

    @property
    def shared(self) -> bool:
        """Whether DATA is one ``.npy`` array for every layer of matching ``in``."""
        return Path(self.path).suffix.lower() == ".npy"

    def entry_for(self, weight_name: str, in_features: int) -> TensorInfo | None:
        """The entry holding the inputs of the weight ``weight_name`` ``[out, in_features]``.

        Keyed files: the entry named ``weight_name``, else the one named ``weight_name``
        without its final ``.weight``; a shared ``.npy``: the array when its column count
        is ``in_features``. ``None`` when DATA has no inputs for this layer. A keyed
        entry of the wrong shape is returned (and refused when read): it was meant for
        this layer.
        """
        if self.shared:
            (entry,) = self.entries
            return entry if entry.shape[1] == in_features else None
        by_name = {entry.name: entry for entry in self.entries}
        key = calibration_key(weight_name, by_name)
        return None if key is None else by_name[key]

    def missing(self, weight_name: str, in_features: int) -> str:
        """Why :meth:`entry_for` found no inputs for this layer, in words."""
        if self.shared:
            (entry,) = self.entries
            return (
                f"{self._where()} has {entry.shape[1]} features per row but {weight_name!r} "
                f"has in={in_features} (a .npy calibrates only the layers of matching in)"
            )
        module = weight_name.removesuffix(".weight")
        names = repr(weight_name) + (f" or {module!r}" if module != weight_name else "")
        return f"{self._where()} has no entry named {names}"

    # ------------------------------------------------------------------ reading

    def gram(self, entry: TensorInfo, in_features: int) -> InputGram:
        """The statistics of ``entry``'s rows, streamed in bands (bounded memory).

        Raises
        ------
        ValueError
            Not 2-D; ``in`` columns other than ``in_features``; no rows; NaN or an
            infinity (named by row and column).
        TypeError
            A dtype that is not real numbers.
        """
        self.check_entry(entry, in_features)
        statistics = InputGram.empty(in_features)
        for start, band in self._bands(entry):
            statistics = statistics.add(self._checked(entry, start, band))
        return statistics

    def inputs(self, entry: TensorInfo, in_features: int) -> NDArray[np.float64]:
        """``entry``'s rows as one float64 array (for the Adam form, which samples rows).

        Checked as :meth:`gram`; the float64 copy must fit the memory budget.
        """
        self.check_entry(entry, in_features)
        rows = int(entry.shape[0])
        check_memory_budget(f"{self._where(entry)} as float64", rows * in_features * 8)
        out = np.empty((rows, in_features))
        for start, band in self._bands(entry):
            out[start : start + band.shape[0]] = self._checked(entry, start, band)
        return out

    # ------------------------------------------------------------------ rules

    def _where(self, entry: TensorInfo | None = None) -> str:
        text = f"{self.flag} {self.path!r}"
        return text if entry is None or self.shared else f"{text}: entry {entry.name!r}"

    def check_entry(self, entry: TensorInfo, in_features: int | None) -> None:
        """Refuse ``entry`` by its header: not real numbers, not 2-D, another ``in`` than
        ``in_features`` (``None``: any), no rows. Reads no data (a command checks every
        layer's inputs this way before the work)."""
        where = self._where(entry)
        if not entry.source_dtype.startswith(_REAL_PREFIXES):
            raise TypeError(
                f"{where} must be real numbers (bool, integer or float), got dtype "
                f"{entry.source_dtype}"
            )
        if len(entry.shape) != 2:
            raise ValueError(
                f"{where} must be 2-D [rows, in] (one layer input per row), got shape "
                f"{tuple(entry.shape)}"
            )
        rows, columns = (int(size) for size in entry.shape)
        if in_features is not None and columns != in_features:
            raise ValueError(
                f"{where} has {columns} features per row but the weight has in={in_features}: "
                "a layer [out, in] is calibrated on inputs [rows, in]"
            )
        if rows == 0:
            raise ValueError(f"{where} is empty (0 rows): calibration needs at least one row")

    def _bands(self, entry: TensorInfo) -> Iterator[tuple[int, NDArray]]:
        """``(first row, rows)`` of ``entry`` in bands of at most :data:`BAND_BYTES` float64."""
        rows, columns = (int(size) for size in entry.shape)
        step = max(1, BAND_BYTES // (8 * max(columns, 1)))
        if Path(self.path).suffix.lower() == ".safetensors":
            for start in range(0, rows, step):
                yield start, read_tensor_rows(self.path, entry.name, start, start + step).array
            return
        # .npy: memory-mapped, sliced; .npz: the member, inflated once
        array = read_tensor(self.path, entry.name).array
        for start in range(0, rows, step):
            yield start, array[start : start + step]

    def _checked(self, entry: TensorInfo, start: int, band: NDArray) -> NDArray[np.float64]:
        """``band`` as float64, refused with its row and column if it holds NaN or Inf."""
        values = np.asarray(band, dtype=np.float64)
        finite = np.isfinite(values)
        if not finite.all():
            row, column = (int(i) for i in np.argwhere(~finite)[0])
            what = "NaN" if np.isnan(values[row, column]) else "an infinity"
            raise ValueError(
                f"{self._where(entry)} contains {what} at row {start + row}, column {column}: "
                "calibration inputs must be finite (the objective is a sum of squares)"
            )
        return values
