"""Sparse training on the torch path: autograd functions, N:M layers and ``sparsify``.

Per-GEMM contract of the 1-D methods (``specs/training.md``; SR-STE per
Zhou et al. 2021, Fig. 2 and ``specs/srste.md`` of nmref):

===========  ==============================  ===================================
GEMM         ``method="ste"``                ``method="srste"``
===========  ==============================  ===================================
Y  (fwd)     ``X (E ⊙ W)^T``                 same
dX (bwd)     ``dY (E ⊙ W)``: forward mask    same
dW (bwd)     ``dY^T X`` (dense, STE)         ``dY^T X + λ (1 − E) ⊙ W``
===========  ==============================  ===================================

``E = magnitude_mask(W, n, m, layout)`` is recomputed from the dense weight at
every forward call, bit for bit the nmref mask (ties: lower index). The dense
gradient is exactly ``grad`` on kept positions and ``grad + dtype(λ) · w`` on
pruned ones, as :func:`nmref.srste.srste_gradient` (one rounding for the
product and one for the sum).

``method="bimask"`` (Zhang et al. 2023; ``specs/bimask.md`` §6): ``Y`` with
``F``, ``dX`` with the backward mask ``B`` of the layer's row permutation
(``update_permutation``), ``dW`` dense plus SR-STE on ``1 − F``.

``method="transposable"`` (Hubara et al. 2021): ``E`` is the exact transposable
mask of ``|W|`` (tiles of ``m`` output x ``m`` input channels), so
``dX = dY (E ⊙ W)`` is N:M along its own reduction axis too; ``dW`` as SR-STE.
``method="bame"`` (BAME-style evolution, ``specs/bame.md`` §3.6, §4; convolutions with
``groups=1``, blocks along the layout's reduction axis):
``Y`` and ``dX`` with the layer's stored mask ``K`` (a buffer, not recomputed);
``dW`` is computed only at the kept positions, plus every position of the
candidate blocks at update steps, as gathered dot products; the other entries
are not computed (0 in ``weight.grad``). ``layer.bame_optimizer_step`` evolves
``K`` with :func:`nmsim.torch.bame.evolve_mask` at update steps and updates the
kept entries only, as :func:`nmref.bame_training.bame_train_step`.
Other methods plug into :data:`METHODS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from nmref.layouts import Layout, to_reduction_shape
from nmref.patterns import Pattern, parse_pattern

from .masks import magnitude_mask

__all__ = [
    "LAYER_METHODS",
    "METHODS",
    "SRSTE_DEFAULT_DECAY",
    "BameConv2dFunction",
    "BameLinearFunction",
    "BiMaskConv2dFunction",
    "BiMaskLinearFunction",
    "GivenMaskWeight",
    "MaskedWeight",
    "SparseConv2d",
    "SparseLinear",
    "SparsifyResult",
    "sparse_weight",
    "sparsify",
    "srste_gradient",
    "transposable_weight_mask",
]

SRSTE_DEFAULT_DECAY = 2e-4  # λ_W of the released SR-STE code (decay=0.0002)


def srste_gradient(
    grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, decay: float
) -> torch.Tensor:
    """``grad + decay * (1 - mask) * weight``, bit for bit as :func:`nmref.srste.srste_gradient`.

    Kept positions get exactly ``grad``; pruned ones ``grad + dtype(decay) * w``.
    ``decay = 0`` returns ``grad`` unchanged (plain STE), so ``-0.0`` and the
    product ``0 * inf`` never appear. Complexity O(size).
    """
    if decay == 0:
        return grad.clone()
    lam = torch.tensor(decay, dtype=weight.dtype, device=weight.device)
    return torch.where(mask, grad, grad + lam * weight)


class MaskedWeight(torch.autograd.Function):
    """``W~ = E ⊙ W`` forward; SR-STE (``decay > 0``) or STE (``decay = 0``) backward.

    ``forward(weight, n, m, layout, decay) -> sparse weight``. Pruned entries
    are set to zero with ``where`` (not multiplied), so an infinite pruned
    weight gives 0, not NaN.
    """

    @staticmethod
    def forward(ctx, weight, n, m, layout, decay):  # type: ignore[override]
        mask = magnitude_mask(weight.detach(), n, m, layout=layout)
        ctx.save_for_backward(weight, mask)
        ctx.decay = decay
        ctx.mark_non_differentiable(mask)
        return torch.where(mask, weight, torch.zeros_like(weight)), mask

    @staticmethod
    def backward(ctx, grad_sparse, _grad_mask):  # type: ignore[override]
        weight, mask = ctx.saved_tensors
        return srste_gradient(grad_sparse, weight, mask, ctx.decay), None, None, None, None


class BiMaskLinearFunction(torch.autograd.Function):
    """Bi-Mask Linear: ``Y = X (W ⊙ F)^T + b``, ``dX = dY (W ⊙ B)``, ``dW = dY^T X + λ(1−F) ⊙ W``.

    ``F`` is the forward magnitude mask, ``B`` the backward mask of
    :func:`nmsim.torch.bimask.backward_mask` for ``permutation`` (Zhang et al.
    2023, Sec. 3; ``specs/bimask.md`` §6). ``dW`` is dense (STE) plus SR-STE.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, permutation, n, m, decay, rank):  # type: ignore[override]
        from .bimask import backward_mask

        forward = magnitude_mask(weight.detach(), n, m, layout="linear")
        backward = backward_mask(
            weight.detach(), forward, permutation, n, m, layout="linear", rank=rank
        )
        ctx.save_for_backward(x, weight, forward, backward)
        ctx.decay, ctx.has_bias = decay, bias is not None
        return F.linear(x, torch.where(forward, weight, torch.zeros_like(weight)), bias)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, weight, forward, backward = ctx.saved_tensors
        zero = torch.zeros_like(weight)
        grad_input = grad_output @ torch.where(backward, weight, zero)
        flat_grad = grad_output.reshape(-1, weight.shape[0])
        grad_sparse = flat_grad.T @ x.reshape(-1, weight.shape[1])
        grad_weight = srste_gradient(grad_sparse, weight, forward, ctx.decay)
        grad_bias = flat_grad.sum(0) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None, None, None


class BiMaskConv2dFunction(torch.autograd.Function):
    """Bi-Mask convolution: forward with ``W ⊙ F``, input gradient with ``W ⊙ B``, dense
    SR-STE weight gradient; masks grouped by ``layout`` (``specs/bimask.md`` §1, D5)."""

    @staticmethod
    def forward(ctx, x, weight, bias, permutation, n, m, decay, rank, layout, conv):  # type: ignore[override]
        from .bimask import backward_mask

        forward = magnitude_mask(weight.detach(), n, m, layout=layout)
        backward = backward_mask(
            weight.detach(), forward, permutation, n, m, layout=layout, rank=rank
        )
        ctx.save_for_backward(x, weight, forward, backward)
        ctx.decay, ctx.has_bias, ctx.conv = decay, bias is not None, conv
        stride, padding, dilation, groups = conv
        sparse = torch.where(forward, weight, torch.zeros_like(weight))
        return F.conv2d(x, sparse, bias, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, weight, forward, backward = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conv
        zero = torch.zeros_like(weight)
        grad_input = torch.nn.grad.conv2d_input(
            x.shape,
            torch.where(backward, weight, zero),
            grad_output,
            stride,
            padding,
            dilation,
            groups,
        )
        grad_sparse = torch.nn.grad.conv2d_weight(
            x, weight.shape, grad_output, stride, padding, dilation, groups
        )
        grad_weight = srste_gradient(grad_sparse, weight, forward, ctx.decay)
        grad_bias = grad_output.sum((0, 2, 3)) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None, None


class BameLinearFunction(torch.autograd.Function):
    """BAME Linear (``specs/bame.md`` §3.6): ``Y = X (K ⊙ W)^T + b``, ``dX = dY (K ⊙ W)``,
    ``dW[r, c] = Σ_b dY[b, r] X[b, c]`` only where ``positions[r, c]`` (0 elsewhere).

    ``positions`` must contain ``mask`` (kept entries are always computed). The
    computed entries are gathered dot products, never a dense ``dY^T X``
    (O(batch * positions.sum()) work, chunked to bound memory).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, mask, positions, mode="gathered"):  # type: ignore[override]
        _check_gradient_mode(mode)
        sparse = torch.where(mask, weight, torch.zeros_like(weight))
        ctx.save_for_backward(x, sparse, positions)
        ctx.has_bias, ctx.mode = bias is not None, mode
        return F.linear(x, sparse, bias)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, sparse, positions = ctx.saved_tensors
        grad_input = grad_output @ sparse
        flat_grad = grad_output.reshape(-1, sparse.shape[0])
        flat_x = x.reshape(-1, sparse.shape[1])
        if ctx.mode == "gathered":
            grad_weight = gathered_weight_gradient(flat_x, flat_grad, positions)
        else:
            grad_weight = torch.where(positions, flat_grad.T @ flat_x, 0.0)
        grad_bias = flat_grad.sum(0) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None


class BameConv2dFunction(torch.autograd.Function):
    """BAME convolution (``groups=1``): ``Y`` and ``dX`` with ``K ⊙ W``; ``dW`` only where
    ``positions`` (weight-shaped), as gathered dot products over the unfolded input
    (``dW[o, j] = Σ_{b,l} dY[b, o, l] · unfold(X)[b, j, l]``, ``j`` the row-major
    ``(c, kh, kw)`` index); 0 elsewhere."""

    @staticmethod
    def forward(ctx, x, weight, bias, mask, positions, conv, mode="gathered"):  # type: ignore[override]
        _check_gradient_mode(mode)
        stride, padding, dilation = conv
        sparse = torch.where(mask, weight, torch.zeros_like(weight))
        ctx.save_for_backward(x, sparse, positions)
        ctx.has_bias, ctx.conv, ctx.mode = bias is not None, conv, mode
        return F.conv2d(x, sparse, bias, stride, padding, dilation)

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, sparse, positions = ctx.saved_tensors
        stride, padding, dilation = ctx.conv
        grad_input = torch.nn.grad.conv2d_input(
            x.shape, sparse, grad_output, stride, padding, dilation
        )
        if ctx.mode == "masked_dense":
            dense = torch.nn.grad.conv2d_weight(
                x, sparse.shape, grad_output, stride, padding, dilation
            )
            grad_bias = grad_output.sum((0, 2, 3)) if ctx.has_bias else None
            return grad_input, torch.where(positions, dense, 0.0), grad_bias, None, None, None, None
        out_channels = sparse.shape[0]
        unfolded = F.unfold(x, sparse.shape[2:], dilation, padding, stride)  # (B, C*k, L)
        flat_x = unfolded.transpose(1, 2).reshape(-1, unfolded.shape[1])
        flat_grad = grad_output.reshape(grad_output.shape[0], out_channels, -1)
        flat_grad = flat_grad.transpose(1, 2).reshape(-1, out_channels)
        grad_weight = gathered_weight_gradient(
            flat_x, flat_grad, positions.reshape(out_channels, -1)
        ).reshape(sparse.shape)
        grad_bias = grad_output.sum((0, 2, 3)) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None, None


BAME_GRADIENT_MODES = ("gathered", "masked_dense")


def _check_gradient_mode(mode: str) -> None:
    if mode not in BAME_GRADIENT_MODES:
        raise ValueError(f"bame_weight_gradient={mode!r} must be one of {BAME_GRADIENT_MODES}")


def gathered_weight_gradient(
    inputs: torch.Tensor, grad_outputs: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """``dW[r, c] = Σ_b grad_outputs[b, r] · inputs[b, c]`` at ``positions`` only, 0 elsewhere.

    Twin of :func:`nmref.bame_training.sparse_weight_gradient` (which writes NaN
    where nothing is computed). Complexity O(batch * positions.sum()).
    """
    out = torch.zeros(positions.shape, dtype=inputs.dtype, device=inputs.device)
    rows, columns = positions.nonzero(as_tuple=True)
    chunk = max(1, (1 << 22) // max(1, inputs.shape[0]))
    for start in range(0, rows.numel(), chunk):
        r, c = rows[start : start + chunk], columns[start : start + chunk]
        out[r, c] = (grad_outputs[:, r] * inputs[:, c]).sum(0)
    return out


def _ste(weight: torch.Tensor, pattern: Pattern, layout: Layout | None, decay: float):
    return MaskedWeight.apply(weight, pattern.n, pattern.m, layout, 0.0)


def _srste(weight: torch.Tensor, pattern: Pattern, layout: Layout | None, decay: float):
    return MaskedWeight.apply(weight, pattern.n, pattern.m, layout, decay)


class GivenMaskWeight(torch.autograd.Function):
    """``W~ = E ⊙ W`` for a given mask ``E``; SR-STE/STE backward (``decay`` 0 is STE)."""

    @staticmethod
    def forward(ctx, weight, mask, decay):  # type: ignore[override]
        ctx.save_for_backward(weight, mask)
        ctx.decay = decay
        return torch.where(mask, weight, torch.zeros_like(weight))

    @staticmethod
    def backward(ctx, grad_sparse):  # type: ignore[override]
        weight, mask = ctx.saved_tensors
        return srste_gradient(grad_sparse, weight, mask, ctx.decay), None, None


def transposable_weight_mask(
    weight: torch.Tensor, n: int, m: int, *, layout: Layout | None = None, method: str = "exact"
) -> torch.Tensor:
    """Transposable N:M mask of ``|w|`` through the weight's layout (``specs/transposable.md``
    T1): tiles span ``m`` output channels x ``m`` input channels (at one kernel tap for
    ``"channels"``), so both the forward and the input-gradient GEMM see N:M groups."""
    from nmref.layouts import default_layout

    from .layouts import from_reduction_matrix, to_reduction_matrix
    from .transposable import transposable_mask

    resolved = default_layout(weight.dim()) if layout is None else layout
    if resolved == "channels" and weight.shape[0] % m:
        raise ValueError(
            f"out={weight.shape[0]} must be a multiple of m={m}: a tile would straddle two "
            "kernel taps"
        )
    magnitudes = to_reduction_matrix(weight.detach(), resolved).abs()
    mask = transposable_mask(magnitudes, n, m, method=method)
    return from_reduction_matrix(mask, tuple(weight.shape), resolved)


def _transposable(weight: torch.Tensor, pattern: Pattern, layout: Layout | None, decay: float):
    mask = transposable_weight_mask(weight, pattern.n, pattern.m, layout=layout)
    return GivenMaskWeight.apply(weight, mask, decay), mask


# method -> f(weight, pattern, layout, decay) -> (sparse weight, mask). Methods from other
# nmref modules register here when those modules exist.
METHODS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "ste": _ste,
    "srste": _srste,
    "transposable": _transposable,
}


# Methods whose GEMMs need more than one sparse weight: implemented by the layers.
LAYER_METHODS: tuple[str, ...] = ("bimask", "bame")


def _check_method(method: str, *, layer: bool = False) -> None:
    allowed = (*METHODS, *LAYER_METHODS) if layer else tuple(METHODS)
    if method not in allowed:
        raise ValueError(f"method={method!r} must be one of {allowed}")


def sparse_weight(
    weight: torch.Tensor,
    pattern: str | Pattern | tuple[int, int] = "2:4",
    *,
    method: str = "srste",
    layout: Layout | None = None,
    decay: float = SRSTE_DEFAULT_DECAY,
) -> torch.Tensor:
    """The sparse weight ``E ⊙ W`` of ``method``, differentiable by that method's rule.

    Parameters
    ----------
    weight : torch.Tensor
        Dense weight, ``[out, in]`` or ``[out, in, *kernel]``.
    pattern : str or Pattern, default "2:4"
        ``n`` kept of every ``m``.
    method : {"ste", "srste", ...}
        A key of :data:`METHODS`.
    layout : {"linear", "channels", "flat"}, optional
        Grouping (``nmref.layouts``); default by ``weight.dim()``.
    decay : float
        SR-STE's λ_W (ignored by ``"ste"``).
    """
    _check_method(method)
    _check_decay(decay)
    sparse, _ = METHODS[method](weight, parse_pattern(pattern), layout, decay)
    return sparse


def _check_decay(decay: float) -> None:
    if isinstance(decay, bool) or not isinstance(decay, int | float):
        raise TypeError(f"decay={decay!r} must be a real number")
    if not decay >= 0 or decay == float("inf"):
        raise ValueError(f"decay={decay!r} must be finite and >= 0")


class _SparseMixin:
    """Shared N:M state of :class:`SparseLinear` and :class:`SparseConv2d`."""

    pattern: Pattern
    method: str
    layout: Layout | None
    decay: float
    weight: nn.Parameter

    def _init_sparse(
        self,
        pattern: str | Pattern | tuple[int, int],
        method: str,
        layout,
        decay: float,
        bame_config=None,
    ) -> None:
        _check_method(method, layer=True)
        _check_decay(decay)
        self.pattern = parse_pattern(pattern)
        self.method = method
        self.layout = layout
        self.decay = float(decay)
        _, length = to_reduction_shape(tuple(self.weight.shape), layout)
        if length % self.pattern.m:
            raise ValueError(
                f"reduction length {length} of weight {tuple(self.weight.shape)} "
                f"(layout={layout!r}) must be a multiple of m={self.pattern.m}"
            )
        out_channels = self.weight.shape[0]
        if method in ("bimask", "transposable") and out_channels % self.pattern.m:
            raise ValueError(
                f"method={method!r} groups m={self.pattern.m} output channels in the backward "
                f"GEMM; out={out_channels} must be a multiple of m"
            )
        if method == "bimask":
            self.register_buffer(
                "permutation", torch.arange(out_channels, device=self.weight.device)
            )
            self.rank = "survivors"
        if method == "bame":
            self._init_bame(bame_config)
        elif bame_config is not None:
            raise ValueError(f"bame_config is only used by method='bame', not {method!r}")

    def _init_bame(self, config) -> None:
        from nmref.bame import BameConfig, BameState

        if isinstance(self, nn.Conv2d) and (
            self.groups != 1 or self.padding_mode != "zeros" or isinstance(self.padding, str)
        ):
            raise ValueError(
                "method='bame' convolutions need groups=1, padding_mode='zeros' and numeric padding"
            )
        n, m = self.pattern
        if config is None:
            config = BameConfig(n, m)
        if not isinstance(config, BameConfig):
            raise TypeError(f"bame_config must be a nmref.bame.BameConfig, got {type(config)}")
        if (config.n, config.m) != (n, m):
            raise ValueError(
                f"bame_config pattern {config.n}:{config.m} must equal pattern={self.pattern}"
            )
        self.bame_config = config
        # "gathered": only the listed dW entries are computed (the spec's GEMM, slow on a
        # CPU); "masked_dense": dense dY^T X, then keep the listed entries (same entries and,
        # on exact data, the same bits; fast wherever a dense GEMM is).
        self.bame_weight_gradient = "gathered"
        with torch.no_grad():
            mask = magnitude_mask(self.weight, n, m, layout=self.layout)
        self.register_buffer("bame_mask", mask)
        self.register_buffer("bame_velocity", torch.zeros_like(self.weight, requires_grad=False))
        if self.bias is not None:
            self.register_buffer("bame_bias_velocity", torch.zeros_like(self.bias.detach()))
        self.bame_state = BameState.initial(self._to_matrix(mask).cpu().numpy(), m)
        self.bame_step = 0

    def _to_matrix(self, tensor: torch.Tensor) -> torch.Tensor:
        """The weight-shaped ``tensor`` as the ``[rows, reduction]`` matrix of the layout."""
        from .layouts import to_reduction_matrix

        return to_reduction_matrix(tensor, self.layout)

    def _from_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        from .layouts import from_reduction_matrix

        return from_reduction_matrix(matrix, tuple(self.weight.shape), self.layout)

    _BAME_STATE_FIELDS = ("changes", "reverts", "change_ema", "frozen", "previous_mask")

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)  # type: ignore[misc]
        if self.method == "bame":
            # The counters and the step are training state: checkpoint them as plain tensors
            # (loadable with weights_only=True) so a resumed run continues bit for bit.
            for name in self._BAME_STATE_FIELDS:
                value = getattr(self.bame_state, name)
                destination[f"{prefix}bame_state.{name}"] = torch.from_numpy(value.copy())
            destination[f"{prefix}bame_state.num_updates"] = torch.tensor(
                self.bame_state.num_updates
            )
            destination[f"{prefix}bame_step"] = torch.tensor(self.bame_step)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        if self.method == "bame":
            from nmref.bame import BameState

            keys = [f"{prefix}bame_state.{name}" for name in self._BAME_STATE_FIELDS]
            extra = [*keys, f"{prefix}bame_state.num_updates", f"{prefix}bame_step"]
            present = [key for key in extra if key in state_dict]
            if len(present) == len(extra):
                arrays = {
                    name: state_dict[key].cpu().numpy().copy()
                    for name, key in zip(self._BAME_STATE_FIELDS, keys, strict=True)
                }
                state = BameState(
                    **arrays, num_updates=int(state_dict[f"{prefix}bame_state.num_updates"])
                )
                self.bame_step = int(state_dict[f"{prefix}bame_step"])
                self.bame_state = state
            elif strict:
                missing_keys.extend(key for key in extra if key not in state_dict)
            state_dict = {key: value for key, value in state_dict.items() if key not in extra}
        super()._load_from_state_dict(  # type: ignore[misc]
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def bame_gradient_positions(self) -> torch.Tensor:
        """Where the next backward computes ``dW`` (``specs/bame.md`` §3.6): the kept
        entries, plus every entry of the candidate blocks if ``bame_step`` is an update step."""
        from nmref.bame import candidate_blocks, is_update_step

        if not is_update_step(self.bame_step, self.bame_config):
            return self.bame_mask
        candidates = candidate_blocks(self.bame_state, self.bame_config)
        expanded = torch.from_numpy(candidates).to(self.bame_mask.device)
        expanded = self._from_matrix(expanded.repeat_interleave(self.pattern.m, dim=1))
        return self.bame_mask | expanded

    @torch.no_grad()
    def bame_update(self, learning_rate: float | None = None):
        """At an update step, evolve the mask from ``weight.grad`` (:func:`nmsim.torch.bame.
        evolve_mask`: regrown weights and their momentum reset, counters advanced); call it
        once per optimizer step after ``backward``. Returns the ``Evolution`` or ``None``
        when ``bame_step`` is not an update step. Does not advance ``bame_step``."""
        from nmref.bame import is_update_step

        from .bame import evolve_mask

        if not is_update_step(self.bame_step, self.bame_config):
            return None
        if self.weight.grad is None:
            raise ValueError("bame_update needs weight.grad: run backward first")
        evolution = evolve_mask(
            self._to_matrix(self.weight.detach()),
            self._to_matrix(self.bame_mask),
            self._to_matrix(self.weight.grad),
            self.bame_state,
            self.bame_step,
            self.bame_config,
            learning_rate=learning_rate,
            velocity=self._to_matrix(self.bame_velocity),
        )
        self.weight.copy_(self._from_matrix(evolution.weight))
        self.bame_mask.copy_(self._from_matrix(evolution.mask))
        self.bame_velocity.copy_(self._from_matrix(evolution.velocity))
        self.bame_state = evolution.state
        return evolution

    @torch.no_grad()
    def bame_sgd_step(
        self, learning_rate: float, momentum: float = 0.9, weight_decay: float = 0.0
    ) -> None:
        """Momentum SGD on the kept entries only: ``v = μv + (g + λw)``, ``w −= lr·v``;
        pruned weights and their momentum untouched; the bias is dense (``specs/bame.md``
        §4 step 4). A stock ``torch.optim.SGD`` would move pruned weights (momentum,
        decay, the candidate entries of ``weight.grad``). Does not advance ``bame_step``."""
        from nmref.bame_training import SGD

        SGD(learning_rate, momentum, weight_decay)  # validates: lr > 0, 0 <= μ < 1, λ >= 0
        kept = self.bame_mask
        grad = self.weight.grad
        if grad is None:
            raise ValueError("bame_sgd_step needs weight.grad: run backward first")
        weight, velocity = self.weight.data, self.bame_velocity
        velocity[kept] = momentum * velocity[kept] + (grad[kept] + weight_decay * weight[kept])
        weight[kept] -= learning_rate * velocity[kept]
        if self.bias is not None and self.bias.grad is not None:
            bias_velocity = self.bame_bias_velocity
            bias_velocity.copy_(momentum * bias_velocity + self.bias.grad)
            self.bias.data.copy_(self.bias.data - learning_rate * bias_velocity)

    def bame_optimizer_step(
        self, learning_rate: float, momentum: float = 0.9, weight_decay: float = 0.0
    ):
        """Steps 3-4 of ``specs/bame.md`` §4 after ``backward``: :meth:`bame_update` and
        :meth:`bame_sgd_step` in ``bame_config.step_order``, then ``bame_step += 1``.
        Returns the ``Evolution`` or ``None`` (not an update step)."""
        from nmref.bame_training import SGD

        SGD(learning_rate, momentum, weight_decay)  # validate before changing anything
        if self.bame_config.step_order == "evolve_first":
            evolution = self.bame_update(learning_rate)
            self.bame_sgd_step(learning_rate, momentum, weight_decay)
        else:
            self.bame_sgd_step(learning_rate, momentum, weight_decay)
            evolution = self.bame_update(learning_rate)
        self.bame_step += 1
        return evolution

    def sparse_weight(self) -> torch.Tensor:
        """``E ⊙ W`` for the current dense weight (differentiable by the method's rule)."""
        if self.method in LAYER_METHODS:
            raise ValueError(f"method={self.method!r} has no single sparse weight")
        sparse, _ = METHODS[self.method](self.weight, self.pattern, self.layout, self.decay)
        return sparse

    @torch.no_grad()
    def mask(self) -> torch.Tensor:
        """The current forward mask ``E`` (bool, shape of the weight)."""
        if self.method == "bame":
            return self.bame_mask.clone()
        if self.method == "transposable":
            n, m = self.pattern
            return transposable_weight_mask(self.weight, n, m, layout=self.layout)
        return magnitude_mask(self.weight, self.pattern.n, self.pattern.m, layout=self.layout)

    @torch.no_grad()
    def backward_mask(self) -> torch.Tensor:
        """The mask of the input-gradient GEMM: ``E`` for STE/SR-STE, Bi-Mask's ``B``."""
        forward = self.mask()
        if self.method != "bimask":
            return forward
        from .bimask import backward_mask

        n, m = self.pattern
        return backward_mask(
            self.weight, forward, self.permutation, n, m, layout=self.layout, rank=self.rank
        )

    @torch.no_grad()
    def update_permutation(
        self, rng, candidates: int = 100, criterion: str = "kept", include_identity: bool = False
    ):
        """Bi-Mask: search a new row permutation (best of ``candidates`` random ones) and keep it.

        Call it every ``T`` steps (``nmref.bimask.is_search_step``). Returns the
        :class:`nmref.bimask.PermutationSearch`.
        """
        if self.method != "bimask":
            raise ValueError(f"update_permutation needs method='bimask', not {self.method!r}")
        from .bimask import search_permutation

        n, m = self.pattern
        result = search_permutation(
            self.weight,
            n,
            m,
            candidates=candidates,
            criterion=criterion,
            include_identity=include_identity,
            rng=rng,
            layout=self.layout,
        )
        self.permutation.copy_(torch.from_numpy(result.permutation))
        return result

    def extra_repr(self) -> str:
        base = super().extra_repr()  # type: ignore[misc]
        decay = f", decay={self.decay:g}" if self.method == "srste" else ""
        layout = f", layout={self.layout!r}" if self.layout else ""
        return f"{base}, pattern={self.pattern}, method={self.method!r}{decay}{layout}"


class SparseLinear(_SparseMixin, nn.Linear):
    """``nn.Linear`` whose weight is N:M sparse in the forward pass (groups along ``in``).

    The dense weight is the parameter; every forward recomputes the mask and
    computes ``F.linear(x, E ⊙ W, bias)``. Gradients follow the method's
    per-GEMM contract (module docstring). ``method="bame"`` keeps its mask in
    the buffer ``bame_mask`` and its counters in ``bame_state``; train it with
    ``loss.backward(); layer.bame_optimizer_step(lr, momentum, weight_decay)``
    (``bame_config``: a :class:`nmref.bame.BameConfig`).

    Examples
    --------
    >>> layer = SparseLinear(8, 4, pattern="2:4", method="srste")
    >>> bool((layer.mask().sum(1) == 4).all())
    True
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        pattern: str | Pattern | tuple[int, int] = "2:4",
        method: str = "srste",
        decay: float = SRSTE_DEFAULT_DECAY,
        bame_config=None,
        device=None,
        dtype=None,
    ) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias, device=device, dtype=dtype)
        self._init_sparse(pattern, method, "linear", decay, bame_config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.method == "bimask":
            n, m = self.pattern
            return BiMaskLinearFunction.apply(
                x, self.weight, self.bias, self.permutation, n, m, self.decay, self.rank
            )
        if self.method == "bame":
            return BameLinearFunction.apply(
                x,
                self.weight,
                self.bias,
                self.bame_mask,
                self.bame_gradient_positions(),
                self.bame_weight_gradient,
            )
        return F.linear(x, self.sparse_weight(), self.bias)

    @classmethod
    def from_dense(cls, linear: nn.Linear, **options) -> SparseLinear:
        """A SparseLinear sharing ``linear``'s parameters (no copy)."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        layer.weight = linear.weight
        layer.bias = linear.bias
        layer._init_sparse(
            options.get("pattern", "2:4"),
            options.get("method", "srste"),
            "linear",
            options.get("decay", SRSTE_DEFAULT_DECAY),
            options.get("bame_config"),
        )
        return layer


class SparseConv2d(_SparseMixin, nn.Conv2d):
    """``nn.Conv2d`` with an N:M sparse weight; groups of input channels by default.

    ``layout="channels"`` (default; NVIDIA ASP, SR-STE ``Sparse_NHWC``) groups
    ``m`` input channels at one (output channel, kernel tap); ``"flat"`` groups
    the row-major ``(in, kh, kw)`` axis. Grouped convolutions are supported as
    the weight ``[out, in/groups, kh, kw]`` is grouped along ``in/groups``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        pattern: str | Pattern | tuple[int, int] = "2:4",
        method: str = "srste",
        layout: Layout = "channels",
        decay: float = SRSTE_DEFAULT_DECAY,
        bame_config=None,
        device=None,
        dtype=None,
    ) -> None:
        nn.Conv2d.__init__(
            self,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device=device,
            dtype=dtype,
        )
        self._init_sparse(pattern, method, layout, decay, bame_config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.method == "bimask":
            if self.padding_mode != "zeros" or isinstance(self.padding, str):
                raise ValueError("method='bimask' needs padding_mode='zeros' and numeric padding")
            n, m = self.pattern
            conv = (self.stride, self.padding, self.dilation, self.groups)
            return BiMaskConv2dFunction.apply(
                x,
                self.weight,
                self.bias,
                self.permutation,
                n,
                m,
                self.decay,
                self.rank,
                self.layout,
                conv,
            )
        if self.method == "bame":
            conv = (self.stride, self.padding, self.dilation)
            return BameConv2dFunction.apply(
                x,
                self.weight,
                self.bias,
                self.bame_mask,
                self.bame_gradient_positions(),
                conv,
                self.bame_weight_gradient,
            )
        return self._conv_forward(x, self.sparse_weight(), self.bias)

    @classmethod
    def from_dense(cls, conv: nn.Conv2d, **options) -> SparseConv2d:
        """A SparseConv2d sharing ``conv``'s parameters and hyperparameters (no copy)."""
        layer = cls.__new__(cls)
        layer.__dict__.update({k: v for k, v in conv.__dict__.items()})
        layer._parameters = dict(conv._parameters)
        layer._buffers = dict(conv._buffers)
        layer._modules = dict(conv._modules)
        layer._init_sparse(
            options.get("pattern", "2:4"),
            options.get("method", "srste"),
            options.get("layout", "channels"),
            options.get("decay", SRSTE_DEFAULT_DECAY),
            options.get("bame_config"),
        )
        return layer


@dataclass(frozen=True)
class SparsifyResult:
    """What :func:`sparsify` did: replaced layer names, and skipped ones with the reason."""

    replaced: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


def sparsify(
    model: nn.Module,
    method: str = "srste",
    pattern: str | Pattern | tuple[int, int] = "2:4",
    *,
    include: str | Callable[[str, nn.Module], bool] | None = None,
    exclude: str | Callable[[str, nn.Module], bool] | None = None,
    decay: float = SRSTE_DEFAULT_DECAY,
    conv_layout: Layout = "channels",
    bame_config=None,
) -> SparsifyResult:
    """Swap eligible ``nn.Linear``/``nn.Conv2d`` layers of ``model`` for sparse ones, in place.

    Parameters are shared (not copied), so an optimizer built before or after
    the call trains the same tensors.

    Parameters
    ----------
    model : nn.Module
    method, pattern, decay
        As :class:`SparseLinear`.
    include, exclude : str (regular expression, ``re.search`` on the qualified
        name) or callable ``(name, module) -> bool``, optional
        Which layers to consider; ``exclude`` wins.
    conv_layout : {"channels", "flat"}, default "channels"
    bame_config : nmref.bame.BameConfig, optional
        ``method="bame"`` only (default ``BameConfig(n, m)``); grouped
        convolutions are skipped with that reason.

    Returns
    -------
    SparsifyResult
        Names replaced, and names skipped with the reason (a reduction length
        that is not a multiple of ``m``, as NVIDIA ASP skips such layers,
        rather than letting groups straddle rows).
    """
    _check_method(method, layer=True)
    parsed = parse_pattern(pattern)

    def matches(rule, name: str, module: nn.Module) -> bool:
        if rule is None:
            return False
        return bool(re.search(rule, name)) if isinstance(rule, str) else bool(rule(name, module))

    replaced: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name, module in list(model.named_modules()):
        if isinstance(module, SparseLinear | SparseConv2d) or not isinstance(
            module, nn.Linear | nn.Conv2d
        ):
            continue
        if include is not None and not matches(include, name, module):
            continue
        if matches(exclude, name, module):
            continue
        if method == "bame" and isinstance(module, nn.Conv2d) and module.groups != 1:
            skipped.append((name, "method='bame' convolutions need groups=1"))
            continue
        layout = "linear" if isinstance(module, nn.Linear) else conv_layout
        _, length = to_reduction_shape(tuple(module.weight.shape), layout)
        if length % parsed.m:
            skipped.append((name, f"reduction length {length} is not a multiple of m={parsed.m}"))
            continue
        if method in ("bimask", "transposable") and module.weight.shape[0] % parsed.m:
            skipped.append(
                (name, f"{module.weight.shape[0]} output channels: not a multiple of m={parsed.m}")
            )
            continue
        options = {"pattern": parsed, "method": method, "decay": decay}
        if method == "bame":
            options["bame_config"] = bame_config
        if isinstance(module, nn.Linear):
            new = SparseLinear.from_dense(module, **options)
        else:
            new = SparseConv2d.from_dense(module, layout=conv_layout, **options)
        _set_submodule(model, name, new)
        replaced.append(name)
    return SparsifyResult(tuple(replaced), tuple(skipped))


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)
