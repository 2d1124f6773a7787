"""N:M sparse ``nn.Linear`` and ``nn.Conv2d``, trained by a method of :mod:`nmsim.torch.functions`.

The dense weight is the parameter; the forward pass uses its N:M sparse form and
the gradients follow the per-GEMM contract of the method (:mod:`nmsim.torch.functions`).
Bi-Mask layers hold their row permutation, BAME layers their mask and counters, as
buffers and state that a checkpoint saves and restores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nmref.layouts import Layout, to_reduction_shape
from nmref.patterns import Pattern, parse_pattern

from .functions import (
    LAYER_METHODS,
    METHODS,
    SRSTE_DEFAULT_DECAY,
    BameConv2dFunction,
    BameLinearFunction,
    BiMaskConv2dFunction,
    BiMaskLinearFunction,
    check_decay,
    check_method,
    transposable_weight_mask,
)
from .masks import magnitude_mask

__all__ = ["SparseConv2d", "SparseLinear"]


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
        check_method(method, layer=True)
        check_decay(decay)
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

    def _init_from_options(self, layout: Layout, options: dict) -> None:
        """:meth:`_init_sparse` from ``from_dense``'s keyword options, with the defaults of
        the constructors."""
        self._init_sparse(
            options.get("pattern", "2:4"),
            options.get("method", "srste"),
            layout,
            options.get("decay", SRSTE_DEFAULT_DECAY),
            options.get("bame_config"),
        )

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
        from nmref.bame.training import SGD

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
        from nmref.bame.training import SGD

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
    per-GEMM contract (:mod:`nmsim.torch.functions`). ``method="bame"`` keeps its mask in
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
        layer._init_from_options("linear", options)
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
        layer._init_from_options(options.get("layout", "channels"), options)
        return layer
