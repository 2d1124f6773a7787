"""AdaPrune: convert a layer to N:M and repair its function on calibration inputs.

Hubara et al.'s last contribution (NeurIPS 2021): a model pruned without structure (or a
dense one) becomes N:M "with little to no training" by, per layer, choosing N from the
layer's zeros, masking, absorbing the pruned mass into the kept weights, and fitting the
kept weights so that the layer's outputs on a small calibration set stay those of the
original layer. ``specs/adaprune.md`` fixes every choice; this package holds

=============================  ==============================================================
``choose.py``                  :func:`choose_n`, the binomial-tail rule, in exact arithmetic
``start.py``                   :func:`starting_mask` (1-D, transposable exact / at most) and
                               :func:`absorb_pruned_mass`
``gram.py``                    :class:`InputGram`, the calibration statistics, in batches
``exact.py``                   :func:`reconstruct_exact`, the least-squares optimum per row
``adam.py``                    :func:`reconstruct_adam`, the paper's Adam, with its gap
``quality.py``                 :func:`relative_output_error`, :func:`output_error`
``layer.py``                   :func:`adaprune_layer`, the steps in order
``reference.py``               the same in plain loops (the tests' oracle)
=============================  ==============================================================

Weights are ``[out, in]`` (a Linear layer, ``y = W x + b``), grouped along ``in``;
calibration inputs are ``[samples, in]``. Nothing here imports torch.
"""

from __future__ import annotations

from nmref.adaprune.adam import AdamReconstruction, AdamSettings, reconstruct_adam
from nmref.adaprune.choose import DEFAULT_CONFIDENCE, NChoice, binomial_tail, choose_n
from nmref.adaprune.exact import EIGENVALUE_CUTOFF, Reconstruction, reconstruct_exact
from nmref.adaprune.gram import InputGram
from nmref.adaprune.layer import RECONSTRUCTIONS, AdaPruneResult, adaprune_layer
from nmref.adaprune.quality import output_error, relative_output_error
from nmref.adaprune.start import MASK_METHODS, absorb_pruned_mass, starting_mask

__all__ = [
    "DEFAULT_CONFIDENCE",
    "EIGENVALUE_CUTOFF",
    "MASK_METHODS",
    "RECONSTRUCTIONS",
    "AdaPruneResult",
    "AdamReconstruction",
    "AdamSettings",
    "InputGram",
    "NChoice",
    "Reconstruction",
    "absorb_pruned_mass",
    "adaprune_layer",
    "binomial_tail",
    "choose_n",
    "output_error",
    "reconstruct_adam",
    "reconstruct_exact",
    "relative_output_error",
    "starting_mask",
]
