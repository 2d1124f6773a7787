"""Sparse training on the torch path: the autograd functions and the method registry.

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
product and one for the sum); in bfloat16, nmref's float32 answer rounded once
to bfloat16 (``specs/torch.md`` T1).

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
kept entries only, as :func:`nmref.bame.training.bame_train_step`.
Other methods plug into :data:`METHODS`. The layers that use these functions are
:mod:`nmsim.torch.layers`; :func:`nmsim.torch.model.sparsify` swaps them into a model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from nmref._validation import check_nonnegative
from nmref.layouts import Layout
from nmref.patterns import Pattern, parse_pattern

from .masks import check_no_nan, check_tensor, magnitude_mask

__all__ = [
    "BAME_GRADIENT_MODES",
    "LAYER_METHODS",
    "METHODS",
    "SRSTE_DEFAULT_DECAY",
    "BameConv2dFunction",
    "BameLinearFunction",
    "BiMaskConv2dFunction",
    "BiMaskLinearFunction",
    "GivenMaskWeight",
    "MaskedWeight",
    "TwoMaskConv2dFunction",
    "TwoMaskLinearFunction",
    "check_decay",
    "check_method",
    "gathered_weight_gradient",
    "sparse_weight",
    "srste_gradient",
    "transposable_weight_mask",
]

#: ``decay`` (λ_W) of the released SR-STE code (``decay=0.0002``), as
#: :data:`nmref.srste.SRSTE_DEFAULT_DECAY`.
SRSTE_DEFAULT_DECAY = 2e-4


def srste_gradient(
    grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, decay: float
) -> torch.Tensor:
    """``grad + decay * (1 - mask) * weight``, bit for bit as :func:`nmref.srste.srste_gradient`.

    Kept positions get exactly ``grad``; pruned ones ``grad + dtype(decay) * w``. bfloat16
    has no NumPy twin: its result is nmref's on the float32 upcast, rounded once to bfloat16
    (``specs/torch.md`` T1).
    ``decay = 0`` returns ``grad`` unchanged (plain STE), so ``-0.0`` and the
    product ``0 * inf`` never appear. Complexity O(size).

    Raises
    ------
    TypeError
        A non-tensor, a non-float ``grad``/``weight``, a ``mask`` that is not bool.
    ValueError
        Shapes or devices differ, NaN in ``grad`` or ``weight`` (as in nmref), a
        negative or non-finite ``decay``.
    """
    for name, tensor in (("grad", grad), ("weight", weight), ("mask", mask)):
        check_tensor(tensor, name)
        if name != "mask" and not tensor.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype={tensor.dtype}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got dtype={mask.dtype}")
    if not grad.shape == weight.shape == mask.shape:
        raise ValueError(
            f"grad, weight and mask must have one shape, got {tuple(grad.shape)}, "
            f"{tuple(weight.shape)} and {tuple(mask.shape)}"
        )
    if not grad.device == weight.device == mask.device:
        raise ValueError(
            f"grad, weight and mask must be on one device, got {grad.device}, "
            f"{weight.device} and {mask.device}"
        )
    check_nonnegative(decay, "decay")
    check_no_nan(grad, "grad", why=None)
    check_no_nan(weight, "weight", why=None)
    return _srste_gradient(grad, weight, mask, decay)


def _srste_gradient(
    grad: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, decay: float
) -> torch.Tensor:
    """:func:`srste_gradient` without the checks, for the autograd functions, whose
    operands are built here (a NaN check would cost a device synchronisation per step)."""
    if decay == 0:
        return grad.clone()
    dtype = torch.promote_types(grad.dtype, weight.dtype)
    # bfloat16 has no NumPy twin: its answer is nmref's on the float32 upcast (decay rounded
    # to float32, never to bfloat16), rounded once to bfloat16 (specs/torch.md T1). float16,
    # float32 and float64 compute in their own dtype, as nmref does.
    compute = torch.float32 if dtype == torch.bfloat16 else dtype
    lam = torch.tensor(decay, dtype=compute, device=weight.device)
    pruned = grad.to(compute) + lam * weight.to(compute)
    return torch.where(mask, grad.to(dtype), pruned.to(dtype))


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
        return _srste_gradient(grad_sparse, weight, mask, ctx.decay), None, None, None, None


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
        grad_weight = _srste_gradient(grad_sparse, weight, forward, ctx.decay)
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
        grad_weight = _srste_gradient(grad_sparse, weight, forward, ctx.decay)
        grad_bias = grad_output.sum((0, 2, 3)) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None, None


def _gemm_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype ``torch.autocast`` runs GEMMs in on ``x``'s device, or None outside autocast.

    Custom autograd functions see autocast in ``forward`` only; they record this dtype and run
    the backward GEMMs in it too, as the autocast ``F.linear``/``F.conv2d`` they stand for
    would (``specs/training.md`` §4).
    """
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return None


def _as_gemm(tensor: torch.Tensor | None, dtype: torch.dtype | None) -> torch.Tensor | None:
    return tensor if tensor is None or dtype is None else tensor.to(dtype)


class TwoMaskLinearFunction(torch.autograd.Function):
    """Linear with one mask per GEMM: ``Y = X (F ⊙ W)^T + b``, ``dX = dY (B ⊙ W)``,
    ``dW = dY^T X + λ (1 − F) ⊙ W`` (Bi-Mask's contract, ``specs/bimask.md`` §6, with the
    masks given: the layers compute them at refresh time, outside the step).

    ``forward(x, weight, bias, forward_mask, backward_mask, decay)``. Under ``torch.autocast``
    the GEMMs of both passes run in the autocast dtype; ``dW`` and the SR-STE term are formed in
    the weight's dtype.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, forward_mask, backward_mask, decay):  # type: ignore[override]
        dtype = _gemm_dtype(x)
        sparse = torch.where(forward_mask, weight, torch.zeros_like(weight))
        ctx.save_for_backward(x, weight, forward_mask, backward_mask)
        ctx.decay, ctx.has_bias, ctx.gemm_dtype = decay, bias is not None, dtype
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(_as_gemm(x, dtype), _as_gemm(sparse, dtype), _as_gemm(bias, dtype))

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, weight, forward_mask, backward_mask = ctx.saved_tensors
        dtype = ctx.gemm_dtype
        grad = _as_gemm(grad_output, dtype)
        sparse_backward = torch.where(backward_mask, weight, torch.zeros_like(weight))
        grad_input = (grad @ _as_gemm(sparse_backward, dtype)).to(x.dtype)
        flat_grad = grad.reshape(-1, weight.shape[0])
        grad_sparse = flat_grad.T @ _as_gemm(x, dtype).reshape(-1, weight.shape[1])
        grad_weight = _srste_gradient(grad_sparse.to(weight.dtype), weight, forward_mask, ctx.decay)
        grad_bias = flat_grad.sum(0) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None


class TwoMaskConv2dFunction(torch.autograd.Function):
    """Convolution with one mask per GEMM (as :class:`TwoMaskLinearFunction`): forward with
    ``F ⊙ W``, input gradient with ``B ⊙ W``, dense weight gradient plus SR-STE on ``1 − F``.

    ``forward(x, weight, bias, forward_mask, backward_mask, decay, conv)`` with ``conv =
    (stride, padding, dilation, groups)``.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, forward_mask, backward_mask, decay, conv):  # type: ignore[override]
        dtype = _gemm_dtype(x)
        stride, padding, dilation, groups = conv
        sparse = torch.where(forward_mask, weight, torch.zeros_like(weight))
        ctx.save_for_backward(x, weight, forward_mask, backward_mask)
        ctx.decay, ctx.has_bias, ctx.conv, ctx.gemm_dtype = decay, bias is not None, conv, dtype
        with torch.autocast(x.device.type, enabled=False):
            return F.conv2d(
                _as_gemm(x, dtype),
                _as_gemm(sparse, dtype),
                _as_gemm(bias, dtype),
                stride,
                padding,
                dilation,
                groups,
            )

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, weight, forward_mask, backward_mask = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conv
        dtype = ctx.gemm_dtype
        grad = _as_gemm(grad_output, dtype)
        sparse_backward = torch.where(backward_mask, weight, torch.zeros_like(weight))
        grad_input = torch.nn.grad.conv2d_input(
            x.shape,
            _as_gemm(sparse_backward, dtype),
            grad,
            stride,
            padding,
            dilation,
            groups,
        ).to(x.dtype)
        grad_sparse = torch.nn.grad.conv2d_weight(
            _as_gemm(x, dtype), weight.shape, grad, stride, padding, dilation, groups
        )
        grad_weight = _srste_gradient(grad_sparse.to(weight.dtype), weight, forward_mask, ctx.decay)
        grad_bias = grad.sum((0, 2, 3)) if ctx.has_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None, None


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
        dtype = _gemm_dtype(x)
        sparse = torch.where(mask, weight, torch.zeros_like(weight))
        ctx.save_for_backward(x, sparse, positions)
        ctx.has_bias, ctx.mode, ctx.gemm_dtype = bias is not None, _traceable(mode), dtype
        ctx.weight_dtype = weight.dtype
        with torch.autocast(x.device.type, enabled=False):
            return F.linear(_as_gemm(x, dtype), _as_gemm(sparse, dtype), _as_gemm(bias, dtype))

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        x, sparse, positions = ctx.saved_tensors
        dtype = ctx.gemm_dtype
        grad = _as_gemm(grad_output, dtype)
        grad_input = (grad @ _as_gemm(sparse, dtype)).to(x.dtype)
        flat_grad = grad.reshape(-1, sparse.shape[0])
        flat_x = _as_gemm(x, dtype).reshape(-1, sparse.shape[1])
        if ctx.mode == "gathered":
            grad_weight = gathered_weight_gradient(flat_x, flat_grad, positions)
        else:
            grad_weight = torch.where(positions, flat_grad.T @ flat_x, 0.0)
        grad_bias = flat_grad.sum(0) if ctx.has_bias else None
        return grad_input, grad_weight.to(ctx.weight_dtype), grad_bias, None, None, None


class BameConv2dFunction(torch.autograd.Function):
    """BAME convolution (``groups=1``): ``Y`` and ``dX`` with ``K ⊙ W``; ``dW`` only where
    ``positions`` (weight-shaped), as gathered dot products over the unfolded input
    (``dW[o, j] = Σ_{b,l} dY[b, o, l] · unfold(X)[b, j, l]``, ``j`` the row-major
    ``(c, kh, kw)`` index); 0 elsewhere."""

    @staticmethod
    def forward(ctx, x, weight, bias, mask, positions, conv, mode="gathered"):  # type: ignore[override]
        _check_gradient_mode(mode)
        dtype = _gemm_dtype(x)
        stride, padding, dilation = conv
        sparse = torch.where(mask, weight, torch.zeros_like(weight))
        ctx.save_for_backward(x, sparse, positions)
        ctx.has_bias, ctx.conv, ctx.mode = bias is not None, conv, _traceable(mode)
        ctx.gemm_dtype, ctx.weight_dtype = dtype, weight.dtype
        with torch.autocast(x.device.type, enabled=False):
            return F.conv2d(
                _as_gemm(x, dtype),
                _as_gemm(sparse, dtype),
                _as_gemm(bias, dtype),
                stride,
                padding,
                dilation,
            )

    @staticmethod
    def backward(ctx, grad_output):  # type: ignore[override]
        saved_x, sparse, positions = ctx.saved_tensors
        stride, padding, dilation = ctx.conv
        dtype = ctx.gemm_dtype
        grad = _as_gemm(grad_output, dtype)
        x = _as_gemm(saved_x, dtype)
        grad_input = torch.nn.grad.conv2d_input(
            x.shape, _as_gemm(sparse, dtype), grad, stride, padding, dilation
        ).to(saved_x.dtype)
        grad_bias = grad.sum((0, 2, 3)) if ctx.has_bias else None
        if ctx.mode == "masked_dense":
            dense = torch.nn.grad.conv2d_weight(x, sparse.shape, grad, stride, padding, dilation)
            grad_weight = torch.where(positions, dense, 0.0).to(ctx.weight_dtype)
            return grad_input, grad_weight, grad_bias, None, None, None, None
        out_channels = sparse.shape[0]
        unfolded = F.unfold(x, sparse.shape[2:], dilation, padding, stride)  # (B, C*k, L)
        flat_x = unfolded.transpose(1, 2).reshape(-1, unfolded.shape[1])
        flat_grad = grad.reshape(grad.shape[0], out_channels, -1)
        flat_grad = flat_grad.transpose(1, 2).reshape(-1, out_channels)
        grad_weight = gathered_weight_gradient(
            flat_x, flat_grad, positions.reshape(out_channels, -1)
        ).reshape(sparse.shape)
        return grad_input, grad_weight.to(ctx.weight_dtype), grad_bias, None, None, None, None


BAME_GRADIENT_MODES = ("gathered", "masked_dense")


def _check_gradient_mode(mode: str) -> None:
    if mode not in BAME_GRADIENT_MODES:
        raise ValueError(f"bame_weight_gradient={mode!r} must be one of {BAME_GRADIENT_MODES}")


def _traceable(mode: str) -> str:
    """``"masked_dense"`` while ``torch.compile`` traces: the gathered entries are a
    data-dependent number of dot products (``nonzero``), which a graph cannot hold. The same
    entries, 0 elsewhere (``specs/training.md`` §5)."""
    return "masked_dense" if torch.compiler.is_compiling() else mode


def gathered_weight_gradient(
    inputs: torch.Tensor, grad_outputs: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """``dW[r, c] = Σ_b grad_outputs[b, r] · inputs[b, c]`` at ``positions`` only, 0 elsewhere.

    Twin of :func:`nmref.bame.training.sparse_weight_gradient` (which writes NaN
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
        return _srste_gradient(grad_sparse, weight, mask, ctx.decay), None, None


def transposable_weight_mask(
    weight: torch.Tensor, n: int, m: int, *, layout: Layout | None = None, method: str = "exact"
) -> torch.Tensor:
    """Transposable N:M mask of ``|w|`` through the weight's layout (``specs/transposable.md``
    T1): tiles span ``m`` output channels x ``m`` input channels (at one kernel tap for
    ``"channels"``), so both the forward and the input-gradient GEMM see N:M groups."""
    from nmref._validation import check_transposable_layout
    from nmref.layouts import default_layout

    from .layouts import from_reduction_matrix, to_reduction_matrix
    from .transposable import transposable_mask

    resolved = default_layout(weight.dim()) if layout is None else layout
    check_transposable_layout(tuple(weight.shape), m, resolved)
    magnitudes = to_reduction_matrix(weight.detach(), resolved).abs()
    mask = transposable_mask(magnitudes, n, m, method=method)
    return from_reduction_matrix(mask, tuple(weight.shape), resolved)


def _transposable(weight: torch.Tensor, pattern: Pattern, layout: Layout | None, decay: float):
    mask = transposable_weight_mask(weight, pattern.n, pattern.m, layout=layout)
    return GivenMaskWeight.apply(weight, mask, decay), mask


#: The 1-D methods: ``method -> f(weight, pattern, layout, decay) -> (sparse weight, mask)``.
#: Methods from other nmref modules register here when those modules exist.
METHODS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "ste": _ste,
    "srste": _srste,
    "transposable": _transposable,
}


# Methods whose GEMMs need more than one sparse weight: implemented by the layers.
LAYER_METHODS: tuple[str, ...] = ("bimask", "bame")


def check_method(method: str, *, layer: bool = False) -> None:
    """Raise ``ValueError`` unless ``method`` is a key of :data:`METHODS` (or, for a layer,
    of :data:`LAYER_METHODS`)."""
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
    check_tensor(weight, "weight")
    check_method(method)
    check_decay(decay)
    sparse, _ = METHODS[method](weight, parse_pattern(pattern), layout, decay)
    return sparse


def check_decay(decay: float) -> None:
    """Raise unless SR-STE's ``decay`` is a finite real number >= 0 (``bool`` is not one).

    The rule of :func:`nmref.srste.srste_gradient`, with its messages.
    """
    check_nonnegative(decay, "decay")
