"""nmsim.encoders: real models run in NumPy, to calibrate and judge sparsity on real data.

``minilm.py`` is the all-MiniLM-L6-v2 sentence encoder (a 6-layer BERT): sentence
embeddings, and every Linear layer's inputs for AdaPrune (:mod:`nmref.adaprune`);
``sentences.py`` is English text available offline, split into calibration and held-out
sets. The tokenizer needs the ``minilm`` extra (``pip install 'nm-sparsity-ref[minilm]'``);
importing this package needs nothing beyond ``nmsim``.
"""

from __future__ import annotations

from nmsim.encoders.minilm import (
    LINEAR_LAYERS,
    MiniLM,
    layer_inputs,
    linear_weight_names,
    load_minilm,
    sentence_embeddings,
)
from nmsim.encoders.sentences import SPLITS, calibration_sentences

__all__ = [
    "LINEAR_LAYERS",
    "SPLITS",
    "MiniLM",
    "calibration_sentences",
    "layer_inputs",
    "linear_weight_names",
    "load_minilm",
    "sentence_embeddings",
]
