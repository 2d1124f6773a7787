r"""Reference N:M sparse training step with BAME-style mask evolution (NumPy).

Implements ``specs/bame.md`` section 4: a multilayer perceptron whose every
Linear weight is N:M-sparse, trained by SGD with momentum, where

* the forward pass and the data gradient use the masked weight ``W * mask``;
* the weight gradient is **computed only** at kept positions, plus every
  position of the candidate blocks at update steps (spec 3.6); entries that
  are not computed are NaN in the gradient array, so reading one by mistake
  poisons the result instead of passing silently;
* a :class:`GradientLedger` counts the weight-gradient entries actually
  computed, so the saving against a dense weight gradient (SR-STE computes all
  of them every step) is measured, not asserted.

The model is a teaching vehicle: ReLU hidden layers, softmax cross-entropy,
float64. The step mutates the layers in place; everything it calls in
:mod:`nmref.bame` is pure.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref.bame.config import BameConfig, BameState
from nmref.bame.evolve import evolve_mask
from nmref.bame.freezing import candidate_blocks, gradient_positions
from nmref.bame.schedule import is_update_step
from nmref.masks import magnitude_mask

__all__ = [
    "SGD",
    "GradientLedger",
    "SparseLinear",
    "accuracy",
    "bame_train_step",
    "cross_entropy",
    "init_sparse_mlp",
    "mlp_forward",
    "sparse_weight_gradient",
]


@dataclass(frozen=True)
class SGD:
    """SGD with heavy-ball momentum: ``v = mu v + g + wd w``, ``w -= lr v`` (kept entries only)."""

    learning_rate: float
    momentum: float = 0.9
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum={self.momentum} must lie in [0, 1)")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay={self.weight_decay} must be >= 0")


@dataclass
class GradientLedger:
    """Counts of weight-gradient entries computed (one entry = one dot product of length batch).

    Attributes
    ----------
    kept_entries : int
        Entries computed at kept positions.
    candidate_entries : int
        Entries computed at pruned positions of candidate blocks (update steps).
    dense_entries : int
        Entries a dense weight gradient would have computed over the same steps
        (what SR-STE computes).
    multiply_adds : int
        ``sum(entries * batch)``: the weight-gradient GEMM work actually done.
    dense_multiply_adds : int
        The same for a dense weight gradient.
    steps : int
        Training steps recorded.
    """

    kept_entries: int = 0
    candidate_entries: int = 0
    dense_entries: int = 0
    multiply_adds: int = 0
    dense_multiply_adds: int = 0
    steps: int = 0

    @property
    def computed_entries(self) -> int:
        return self.kept_entries + self.candidate_entries

    @property
    def fraction(self) -> float:
        """Computed entries / dense entries (0.0 before any record)."""
        return self.computed_entries / self.dense_entries if self.dense_entries else 0.0

    def record(self, positions: NDArray[np.bool_], mask: NDArray[np.bool_], batch: int) -> None:
        """Add one layer's weight gradient computed at ``positions`` for a batch of ``batch``."""
        kept = int(np.count_nonzero(positions & mask))
        extra = int(np.count_nonzero(positions & ~mask))
        self.kept_entries += kept
        self.candidate_entries += extra
        self.dense_entries += int(positions.size)
        self.multiply_adds += (kept + extra) * int(batch)
        self.dense_multiply_adds += int(positions.size) * int(batch)

    def __str__(self) -> str:
        return (
            f"weight-gradient entries: {self.computed_entries} of {self.dense_entries} dense "
            f"({self.fraction:.4f}; kept {self.kept_entries}, candidate {self.candidate_entries})"
        )


def sparse_weight_gradient(
    inputs: ArrayLike,
    grad_outputs: ArrayLike,
    positions: ArrayLike,
) -> NDArray[np.float64]:
    r"""Weight gradient of a Linear layer, computed **only** at ``positions``.

    .. math::

        \frac{\partial L}{\partial W_{rc}} = \sum_b \delta_{br}\, x_{bc}
        \quad \text{for } (r, c) \in \text{positions},

    with ``x = inputs`` (batch, in) and ``delta = grad_outputs`` (batch, out).

    Returns
    -------
    float64 array, shape (out, in)
        The gradient at ``positions`` and NaN elsewhere (not computed).

    Notes
    -----
    Complexity O(batch * positions.sum()): one length-``batch`` dot product
    per computed entry, gathered, so no dense product is formed.
    """
    x = np.asarray(inputs, dtype=np.float64)
    delta = np.asarray(grad_outputs, dtype=np.float64)
    where = np.asarray(positions, dtype=bool)
    if x.ndim != 2 or delta.ndim != 2 or x.shape[0] != delta.shape[0]:
        raise ValueError(
            f"inputs {x.shape} and grad_outputs {delta.shape} must be (batch, in), (batch, out)"
        )
    if where.shape != (delta.shape[1], x.shape[1]):
        raise ValueError(
            f"positions.shape={where.shape} must be (out, in)={delta.shape[1], x.shape[1]}"
        )
    grad = np.full(where.shape, np.nan)
    rows, columns = np.nonzero(where)
    grad[rows, columns] = np.einsum("bk,bk->k", delta[:, rows], x[:, columns])
    return grad


@dataclass
class SparseLinear:
    """One N:M-sparse Linear layer ``y = x (W * mask)^T + bias`` and its training state.

    ``weight``/``mask``/``velocity`` have shape (out, in); groups run along ``in``
    (the ``"linear"`` layout). Pruned entries of ``weight`` keep their stale values.
    """

    weight: NDArray[np.float64]
    bias: NDArray[np.float64]
    mask: NDArray[np.bool_]
    velocity: NDArray[np.float64]
    bias_velocity: NDArray[np.float64]
    state: BameState

    @property
    def effective_weight(self) -> NDArray[np.float64]:
        return np.where(self.mask, self.weight, 0.0)


def init_sparse_mlp(
    sizes: list[int] | tuple[int, ...], config: BameConfig, rng: np.random.Generator
) -> list[SparseLinear]:
    """He-normal MLP ``sizes[0] -> ... -> sizes[-1]``, masks by magnitude (ties: lower index).

    Every randomness comes from ``rng``; the same Generator state gives the same layers.
    """
    if len(sizes) < 2:
        raise ValueError(f"sizes={sizes!r} needs at least an input and an output size")
    layers = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        weight = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_out, fan_in))
        mask = magnitude_mask(weight, config.n, config.m)
        layers.append(
            SparseLinear(
                weight=weight,
                bias=np.zeros(fan_out),
                mask=mask,
                velocity=np.zeros_like(weight),
                bias_velocity=np.zeros(fan_out),
                state=BameState.initial(mask, config.m),
            )
        )
    return layers


def mlp_forward(layers: list[SparseLinear], x: ArrayLike) -> list[NDArray[np.float64]]:
    """Activations ``[x, h_1, ..., logits]`` (ReLU between layers, masked weights)."""
    activations = [np.asarray(x, dtype=np.float64)]
    for index, layer in enumerate(layers):
        z = activations[-1] @ layer.effective_weight.T + layer.bias
        activations.append(np.maximum(z, 0.0) if index < len(layers) - 1 else z)
    return activations


def cross_entropy(logits: NDArray, labels: ArrayLike) -> tuple[float, NDArray[np.float64]]:
    """Mean softmax cross-entropy and its gradient w.r.t. the logits."""
    label_array = np.asarray(labels)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(logits.shape[0])
    loss = float(-log_probs[rows, label_array].mean())
    grad = np.exp(log_probs)
    grad[rows, label_array] -= 1.0
    return loss, grad / logits.shape[0]


def bame_train_step(
    layers: list[SparseLinear],
    x: ArrayLike,
    labels: ArrayLike,
    step: int,
    config: BameConfig,
    optimizer: SGD,
    ledger: GradientLedger | None = None,
) -> float:
    """One training step with sparse forward and backward and BAME-style evolution (spec 4).

    1. Forward with ``W * mask``; softmax cross-entropy.
    2. Backward: the data gradient uses ``W * mask``; the weight gradient is
       computed at the kept positions, plus all positions of the candidate
       blocks (:func:`nmref.bame.candidate_blocks`) if ``step`` is an update
       step (:func:`nmref.bame.gradient_positions`). Counted in ``ledger``.
    3. At update steps, :func:`nmref.bame.evolve_mask` on each layer (look-ahead
       step = ``optimizer.learning_rate`` unless the config fixes it).
    4. SGD with momentum on the kept entries of the (new) mask; pruned weights
       get no gradient, no decay and no momentum. Biases are dense (not counted).

    With ``config.step_order="step_first"`` steps 3 and 4 swap: SGD on the old
    mask, then the evolution with the updated weights and this batch's gradient.

    Mutates ``layers`` and ``ledger``; returns the batch loss before the update.
    """
    activations = mlp_forward(layers, x)
    loss, grad_out = cross_entropy(activations[-1], labels)
    batch = grad_out.shape[0]
    updating = is_update_step(step, config)

    weight_grads: list[NDArray[np.float64]] = [np.empty(0)] * len(layers)
    bias_grads: list[NDArray[np.float64]] = [np.empty(0)] * len(layers)
    for index in range(len(layers) - 1, -1, -1):
        layer = layers[index]
        if updating:
            positions = gradient_positions(
                layer.mask, candidate_blocks(layer.state, config), config.m
            )
        else:
            positions = layer.mask
        weight_grads[index] = sparse_weight_gradient(activations[index], grad_out, positions)
        bias_grads[index] = grad_out.sum(axis=0)
        if ledger is not None:
            ledger.record(positions, layer.mask, batch)
        if index:
            grad_hidden = grad_out @ layer.effective_weight
            grad_out = grad_hidden * (activations[index] > 0)
    if ledger is not None:
        ledger.steps += 1

    for layer, grad, bias_grad in zip(layers, weight_grads, bias_grads, strict=True):
        if updating and config.step_order == "evolve_first":
            _evolve_layer(layer, grad, step, config, optimizer)
        _sgd_on_kept(layer, grad, bias_grad, optimizer)
        if updating and config.step_order == "step_first":
            _evolve_layer(layer, grad, step, config, optimizer)
    return loss


def _evolve_layer(
    layer: SparseLinear, grad: NDArray, step: int, config: BameConfig, optimizer: SGD
) -> None:
    evolution = evolve_mask(
        layer.weight,
        layer.mask,
        grad,
        layer.state,
        step,
        config,
        learning_rate=optimizer.learning_rate,
        velocity=layer.velocity,
    )
    layer.weight, layer.mask = evolution.weight, evolution.mask
    layer.velocity, layer.state = evolution.velocity, evolution.state  # type: ignore[assignment]


def _sgd_on_kept(layer: SparseLinear, grad: NDArray, bias_grad: NDArray, optimizer: SGD) -> None:
    """Momentum SGD on the kept entries only; pruned entries are not touched at all."""
    kept = layer.mask
    kept_grad = grad[kept]
    if not np.isfinite(kept_grad).all():
        raise RuntimeError("a kept position has no computed gradient (spec 3.6 violated)")
    layer.velocity[kept] = optimizer.momentum * layer.velocity[kept] + (
        kept_grad + optimizer.weight_decay * layer.weight[kept]
    )
    layer.weight[kept] -= optimizer.learning_rate * layer.velocity[kept]
    layer.bias_velocity = optimizer.momentum * layer.bias_velocity + bias_grad
    layer.bias = layer.bias - optimizer.learning_rate * layer.bias_velocity


def accuracy(layers: list[SparseLinear], x: ArrayLike, labels: ArrayLike) -> float:
    """Fraction of ``x`` whose arg-max logit equals the label."""
    logits = mlp_forward(layers, x)[-1]
    return float((logits.argmax(axis=1) == np.asarray(labels)).mean())
