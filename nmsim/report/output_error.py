r"""What each mask of the report does to its layer's function (``nmsim report --calibration``).

The kept fraction of ``|w|`` is a proxy; what decides is the layer's output on real inputs.
For a Linear weight ``W`` ``[out, in]``, a mask ``M`` of the report and the layer's
calibration inputs ``X`` ``[rows, in]`` this module gives, per method (``specs/report.md``
R11, ``specs/adaprune.md`` A6),

.. math::

    \text{masked} = \frac{\lVert X (W - M \circ W)^\top \rVert_F}{\lVert X W^\top \rVert_F},
    \qquad
    \text{reconstructed} = \frac{\lVert X (W - U)^\top + \mathbf 1 (b - \beta)^\top \rVert_F}
                                {\lVert X W^\top \rVert_F},

where ``(U, beta)`` is :func:`nmref.adaprune.reconstruct_exact`'s optimum over the weights
``M`` keeps (and the bias ``NAME.bias`` beside ``NAME.weight``, re-fitted, when the
checkpoint has one): the best any method can do with that mask on these inputs.

Both come from the inputs' statistics (:class:`nmref.adaprune.InputGram`), streamed from
DATA in bands by :class:`nmref.io.calibration.CalibrationData`: memory is the ``in x in``
statistics and one band, never ``X W^T``. DATA is a file of layer inputs (keyed by tensor
name, or one ``.npy`` shared by every layer of matching ``in``) or, for the built-in
``minilm`` model, a text file of sentences that :mod:`nmsim.encoders.minilm` runs through
the encoder, a batch of sentences at a time.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nmref.adaprune import InputGram, reconstruct_exact, relative_output_error
from nmref.io.calibration import CalibrationData, bias_for, calibration_key
from nmref.io.checkpoints import TensorInfo

__all__ = [
    "SENTENCE_BATCH",
    "TEXT_LIMIT_BYTES",
    "Calibration",
    "open_calibration",
    "output_error_block",
]

#: The largest sentence file read (a small calibration set; the encoder runs on all of it).
TEXT_LIMIT_BYTES = 1 << 20
#: Sentences run through the encoder at once: the activations held are one batch's.
SENTENCE_BATCH = 16
#: The built-in model a sentence file calibrates.
TEXT_MODEL = "minilm"


@dataclass(frozen=True)
class Calibration:
    """Where each layer's inputs come from; picklable, so a worker measures its own tensor.

    Attributes
    ----------
    source : str
        DATA as the user named it.
    kind : str
        ``"tensors"`` (keyed ``.npz``/``.safetensors``), ``"array"`` (one ``.npy``) or
        ``"text"`` (sentences through the MiniLM encoder).
    data : CalibrationData or None
        The file of layer inputs (``None`` for text).
    grams : tuple of (str, InputGram)
        For text: the statistics gathered from the encoder, by its tensor names (a task
        gets only its own layer's, :meth:`for_tensor`).
    biases : tuple of (str, TensorInfo)
        Weight name -> the bias re-fitted with it.
    sentences : int or None
        For text: how many sentences.
    """

    source: str
    kind: str
    data: CalibrationData | None = None
    grams: tuple[tuple[str, InputGram], ...] = ()
    biases: tuple[tuple[str, TensorInfo], ...] = ()
    sentences: int | None = None

    def block(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """The document's ``calibration`` block (``specs/report.md`` R11)."""
        measured = [
            entry
            for entry in entries
            if (entry.get("output_error") or {}).get("samples") is not None
        ]
        return {
            "source": self.source,
            "kind": self.kind,
            "sentences": self.sentences,
            "reconstruction": "nmref.adaprune.reconstruct_exact: the least-squares optimum of "
            "the kept weights, with the bias NAME.bias re-fitted where the checkpoint has one",
            "tensors": len(measured),
        }

    def for_tensor(self, name: str) -> Calibration:
        """This calibration with only what tensor ``name`` needs (a task's share)."""
        if not self.grams:
            return self
        key = calibration_key(name, dict(self.grams))
        grams = tuple(item for item in self.grams if item[0] == key)
        biases = tuple(item for item in self.biases if item[0] == name)
        return replace(self, grams=grams, biases=biases)

    def bias_of(self, name: str) -> TensorInfo | None:
        """The bias re-fitted with the weight ``name``, if the checkpoint has one."""
        return dict(self.biases).get(name)

    def statistics(self, info: TensorInfo) -> tuple[InputGram | None, str | None, str | None]:
        """``(statistics, DATA's key, None)`` of a layer's inputs, or ``(None, None, why)``."""
        in_features = int(info.shape[1])
        if self.data is not None:
            entry = self.data.entry_for(info.name, in_features)
            if entry is None:
                return None, None, self.data.missing(info.name, in_features)
            status = os.stat(self.data.path)  # a rewritten file is read again
            stamp = (status.st_ino, status.st_size, status.st_mtime_ns)
            return _file_statistics(self.data, entry, in_features, stamp), entry.name, None
        grams = dict(self.grams)
        key = calibration_key(info.name, grams)
        if key is None:
            return None, None, f"the encoder gave no inputs for {info.name!r}"
        gram = grams[key]
        if gram.in_features != in_features:
            raise ValueError(
                f"--calibration {self.source!r}: the encoder's inputs of {key!r} have "
                f"{gram.in_features} features per row but {info.name!r} has in={in_features}"
            )
        return gram, key, None


@functools.lru_cache(maxsize=1)
def _file_statistics(
    data: CalibrationData, entry: TensorInfo, in_features: int, stamp: tuple[int, ...]
) -> InputGram:
    """DATA's statistics of one entry; the last one is kept, so that a shared ``.npy`` is
    read once for a run of layers of the same ``in`` (one set of statistics held). ``stamp``
    (the file's inode, size and time) only keys the cache."""
    return data.gram(entry, in_features)


def _bias_pairs(infos: list[TensorInfo]) -> tuple[tuple[str, TensorInfo], ...]:
    """Weight name -> its bias (``nmref.io.calibration.bias_for``), for every weight."""
    by_name = {info.name: info for info in infos}
    pairs = ((info.name, bias_for(info, by_name)) for info in infos)
    return tuple((name, bias) for name, bias in pairs if bias is not None)


def open_calibration(
    path: str, checkpoint: str | None, infos: list[TensorInfo], layers: list[TensorInfo]
) -> Calibration:
    """Open DATA for a report and check it against the layers it will measure.

    Parameters
    ----------
    path : str
        ``--calibration``.
    checkpoint : str or None
        The report's CHECKPOINT argument (a sentence file is for ``minilm`` only).
    infos : list of TensorInfo
        Every tensor of the checkpoint (for the biases).
    layers : list of TensorInfo
        The selected 2-D weights whose output error the report will measure.

    Raises
    ------
    ValueError
        DATA's rules (:class:`nmref.io.calibration.CalibrationData`, checked on the headers
        of every entry a layer will read); DATA that calibrates none of ``layers``; a
        sentence file for another model, too large, not UTF-8 or without sentences.
    ImportError
        A sentence file where :mod:`nmsim.encoders.minilm` is not installed.
    """
    biases = _bias_pairs(infos)
    if Path(path).suffix.lower() == ".txt":
        return _text_calibration(path, checkpoint, layers, biases)
    data = CalibrationData.open(path)
    matched = 0
    for info in layers:
        entry = data.entry_for(info.name, int(info.shape[1]))
        if entry is not None:
            data.check_entry(entry, int(info.shape[1]))
            matched += 1
    if layers and not matched:
        if data.shared:
            (entry,) = data.entries
            features = sorted({int(info.shape[1]) for info in layers})
            raise ValueError(
                f"--calibration {path!r} has {entry.shape[1]} features per row, the in of no "
                f"selected layer ({', '.join(map(str, features))}): a .npy calibrates the "
                "layers of matching in"
            )
        names = ", ".join(repr(entry.name) for entry in data.entries[:3])
        raise ValueError(
            f"--calibration {path!r}: no entry is named after a selected layer (entries "
            f"{names}{', ...' if len(data.entries) > 3 else ''}; a layer fc1.weight reads the "
            "entry fc1.weight or fc1)"
        )
    kind = "array" if data.shared else "tensors"
    return Calibration(path, kind, data=data, biases=biases)


def _sentences(path: str) -> list[str]:
    """The non-empty lines of a small UTF-8 text file, stripped."""
    from nmref.io.checkpoints import check_regular_file

    file = Path(path)
    check_regular_file(file, f"--calibration {path!r}", noun="text file")
    size = file.stat().st_size
    if size > TEXT_LIMIT_BYTES:
        raise ValueError(
            f"--calibration {path!r} is {size} bytes, over the {TEXT_LIMIT_BYTES} of a "
            "calibration text (one sentence per line; a few hundred sentences suffice)"
        )
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"--calibration {path!r} is not UTF-8 text: {error.reason}") from None
    sentences = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        raise ValueError(f"--calibration {path!r} holds no sentences (one per line)")
    return sentences


def _text_calibration(
    path: str,
    checkpoint: str | None,
    layers: list[TensorInfo],
    biases: tuple[tuple[str, TensorInfo], ...],
) -> Calibration:
    """Run the sentences through the MiniLM encoder and keep each layer's input statistics."""
    if checkpoint != TEXT_MODEL:
        raise ValueError(
            f"--calibration {path!r}: a text file calibrates the built-in {TEXT_MODEL} model "
            "only (its encoder turns sentences into layer inputs); for another model give "
            "the layer inputs as .npz/.safetensors (keyed by tensor name) or one .npy"
        )
    try:
        from nmsim.encoders.minilm import layer_inputs, load_minilm
    except ImportError as error:
        raise ImportError(
            f"--calibration {path!r}: sentences need the MiniLM encoder "
            f"(nmsim.encoders.minilm), which this installation lacks ({error})"
        ) from error
    sentences = _sentences(path)
    wanted = {info.name for info in layers}
    model = load_minilm()
    grams: dict[str, InputGram] = {}
    for start in range(0, len(sentences), SENTENCE_BATCH):
        batch = sentences[start : start + SENTENCE_BATCH]
        for key, inputs in layer_inputs(model, batch).items():
            if not any(calibration_key(name, (key,)) == key for name in wanted):
                continue  # a tensor the report does not measure: not held
            rows = np.asarray(inputs)
            gram = grams.get(key) or InputGram.empty(int(rows.shape[1]))
            try:
                grams[key] = gram.add(rows)
            except (ValueError, TypeError) as error:
                raise ValueError(
                    f"--calibration {path!r}: the encoder's inputs of {key!r}: {error}"
                ) from None
    return Calibration(
        path, "text", grams=tuple(sorted(grams.items())), biases=biases, sentences=len(sentences)
    )


# ----------------------------------------------------------------------------
# One tensor
# ----------------------------------------------------------------------------


def _figure(value: float) -> float | None:
    """A relative error for the JSON: ``None`` where it is not finite (``X W^T = 0``)."""
    return float(value) if math.isfinite(value) else None


def _errors(
    weight: NDArray[np.float64],
    mask: NDArray[np.bool_],
    statistics: InputGram,
    bias: NDArray[np.float64] | None,
) -> dict[str, Any]:
    """Masked and reconstructed relative output errors of one mask."""
    masked = np.where(mask, weight, 0.0)
    before = relative_output_error(weight, masked, statistics)
    fitted = reconstruct_exact(weight, mask, statistics, bias=bias, refit_bias=True)
    after = relative_output_error(
        weight, fitted.weight, statistics, bias=bias, new_bias=fitted.bias
    )
    return {
        "masked": _figure(before),
        "reconstructed": _figure(after),
        "rank_deficient_rows": int(np.count_nonzero(fitted.rank < fitted.kept)),
    }


def output_error_block(
    calibration: Calibration,
    info: TensorInfo,
    layout: str,
    methods: Collection[str],
    masks: dict[str, NDArray[np.bool_]],
    load: Callable[[TensorInfo], NDArray],
) -> dict[str, Any]:
    """A tensor's ``output_error`` block (``specs/report.md`` R11).

    Parameters
    ----------
    calibration : Calibration
    info : TensorInfo
        The weight.
    layout : str
        Its layout; only ``"linear"`` 2-D weights have inputs ``[rows, in]``.
    methods : collection of str
        The report's methods, in column order.
    masks : dict
        The masks the methods kept (``TensorContext.masks``); a method without one (not
        applicable, unavailable) gets ``null``.
    load : callable
        Reads a tensor of the checkpoint (the signed weight, and its bias).
    """
    block: dict[str, Any] = {
        "samples": None,
        "inputs": None,
        "bias": None,
        "methods": {},
        "reason": None,
    }
    if len(info.shape) != 2 or layout != "linear":
        block["reason"] = (
            "needs a 2-D weight [out, in] in the linear layout (a convolution's inputs are "
            "im2col patches, not given here)"
        )
        return block
    statistics, key, why = calibration.statistics(info)
    if statistics is None:
        block["reason"] = why
        return block
    weight = np.asarray(load(info), dtype=np.float64)
    bias_info = calibration.bias_of(info.name)
    bias = None if bias_info is None else np.asarray(load(bias_info), dtype=np.float64)
    if bias is not None and not np.isfinite(bias).all():
        bias, bias_info = None, None  # a broken bias is not re-fitted (the weight is measured)
    block.update(
        samples=int(statistics.count),
        inputs=key,
        bias=None if bias_info is None else bias_info.name,
    )
    done: dict[str, dict[str, Any]] = {}

    def measure(mask: NDArray[np.bool_]) -> dict[str, Any]:
        # Bi-Mask's forward mask is 1-D's, and an at-most optimum often the exact one:
        # each distinct mask is solved once
        digest = hashlib.sha256(np.packbits(mask).tobytes()).hexdigest()
        if digest not in done:
            done[digest] = _errors(weight, np.asarray(mask, dtype=bool), statistics, bias)
        return dict(done[digest])

    for method in methods:
        mask = masks.get(method)
        if mask is None:
            block["methods"][method] = None
            continue
        result = measure(mask)
        if method == "transposable" and "transposable_at_most" in masks:
            at_most = measure(masks["transposable_at_most"])
            result.update({f"at_most_{key}": value for key, value in at_most.items()})
        block["methods"][method] = result
    return block
