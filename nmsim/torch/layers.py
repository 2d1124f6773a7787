"""N:M sparse ``nn.Linear`` and ``nn.Conv2d`` that train in a plain PyTorch loop.

The dense weight is the parameter. The masks are **state**: buffers computed from the weight
when the layer's schedule says so (:mod:`nmsim.torch.schedule`), at the optimizer step
(:mod:`nmsim.torch.steps`), never inside the forward pass. The forward pass only applies them,
so it holds no host work, no device synchronisation and no data-dependent control flow, and
``torch.compile`` traces it whole. The gradients follow the per-GEMM contract of the method
(:mod:`nmsim.torch.functions`, ``specs/torch.md`` §3); the schedule, the step counter and every
random generator are in ``state_dict()``, so a checkpoint resumes bit for bit
(``specs/training.md``).
"""

from __future__ import annotations

import json
import weakref

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nmref._json_toml import load_json
from nmref.layouts import Layout, default_layout, to_reduction_shape
from nmref.patterns import Pattern, parse_pattern

from . import steps
from .functions import (
    LAYER_METHODS,
    SRSTE_DEFAULT_DECAY,
    BameConv2dFunction,
    BameLinearFunction,
    GivenMaskWeight,
    TwoMaskConv2dFunction,
    TwoMaskLinearFunction,
    check_decay,
    check_method,
)
from .masks import magnitude_mask
from .schedule import DEFAULT_BACKWARD_LIMIT, MethodSchedule

__all__ = ["SparseConv2d", "SparseLinear", "host_transposable_mask"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def host_transposable_mask(
    weight: torch.Tensor,
    n: int,
    m: int,
    *,
    layout: Layout | None = None,
    solver: str = "exact",
    fill: str = "exact",
) -> torch.Tensor:
    """The transposable mask of ``|weight|`` by nmref's Numba kernels, on ``weight``'s device.

    Bit for bit :func:`nmsim.torch.transposable_weight_mask` (the lockstep torch solver; both
    equal nmref, float16/bfloat16 through their exact float32 upcast), at the kernel's speed:
    800-1000x the lockstep solver on a CPU (``specs/training.md`` §3). A CPU tensor is read
    without a copy; a CUDA tensor goes through the host.
    """
    from nmref._validation import check_transposable_layout
    from nmref.layouts import from_reduction_matrix, to_reduction_matrix
    from nmref.transposable import transposable_mask
    from nmref.transposable._small import kernels_only

    resolved = default_layout(weight.dim()) if layout is None else layout
    check_transposable_layout(tuple(weight.shape), m, resolved)
    matrix = np.abs(to_reduction_matrix(_host_array(weight), resolved))
    # A layer refreshes again and again: the kernels' compile is paid once, and they are
    # ~10x the NumPy path nmref takes for a single small call (the same masks).
    with kernels_only():
        mask = transposable_mask(matrix, n, m, method=solver, fill=fill)
    shaped = from_reduction_matrix(mask, tuple(weight.shape), resolved)
    return torch.from_numpy(np.ascontiguousarray(shaped)).to(weight.device)


def _host_array(weight: torch.Tensor) -> np.ndarray:
    """``weight`` as a NumPy array on the host; float16/bfloat16 as their exact float32
    upcast (the bit-for-bit rule of the torch path, ``specs/torch.md`` §1)."""
    host = weight.detach().to("cpu")
    if host.dtype in _LOW_PRECISION:
        host = host.float()
    return host.numpy()


def _mask_of(layer: _SparseMixin, weight: torch.Tensor) -> torch.Tensor:
    """The 1-D magnitude mask of a layer's weight: nmref's Numba kernel on a CPU tensor
    (several times the torch kernel's speed there), the torch kernel on any other device;
    the same bits either way (both equal nmref, tested)."""
    n, m = layer.pattern
    if weight.device.type != "cpu":
        return magnitude_mask(weight, n, m, layout=layer.layout)
    from nmref.masks import magnitude_mask as host_magnitude_mask

    mask = host_magnitude_mask(_host_array(weight), n, m, layout=layer.layout)
    return torch.from_numpy(np.ascontiguousarray(mask))


class _SparseMixin:
    """Shared N:M state of :class:`SparseLinear` and :class:`SparseConv2d`."""

    pattern: Pattern
    method: str
    layout: Layout | None
    decay: float
    weight: nn.Parameter
    schedule: MethodSchedule

    def _init_sparse(
        self,
        pattern: str | Pattern | tuple[int, int],
        method: str,
        layout,
        decay: float,
        bame_config=None,
        *,
        refresh_interval: int | None = None,
        transposable_solver: str = "exact",
        transposable_fill: str = "exact",
        permutation_interval: int | None = None,
        permutation_candidates: int | None = None,
        seed: int = 0,
        backward_limit: int = DEFAULT_BACKWARD_LIMIT,
    ) -> None:
        check_method(method, layer=True)
        check_decay(decay)
        self.pattern = parse_pattern(pattern)
        self.method = method
        self.layout = layout
        self.decay = float(decay)
        self.schedule = MethodSchedule.for_method(
            method,
            refresh_interval=refresh_interval,
            permutation_interval=permutation_interval,
            permutation_candidates=permutation_candidates,
            transposable_solver=transposable_solver,
            transposable_fill=transposable_fill,
            backward_limit=backward_limit,
        )
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
        if method != "bame" and bame_config is not None:
            raise ValueError(f"bame_config is only used by method='bame', not {method!r}")
        self.nm_step = 0
        self._backwards_since_step = 0
        self._bame_set_aside: dict[str, torch.Tensor | None] = {}
        if method == "bimask":
            self.register_buffer(
                "permutation", torch.arange(out_channels, device=self.weight.device)
            )
            self.rank = "survivors"
            self.criterion = "kept"
            from nmref._validation import check_integer

            self.seed = check_integer(seed, "seed")
            self.generator = np.random.Generator(np.random.PCG64(self.seed))
        if method == "bame":
            self._init_bame(bame_config)
        else:
            empty = torch.zeros(self.weight.shape, dtype=torch.bool, device=self.weight.device)
            self.register_buffer("nm_mask", empty)
            if method == "bimask":
                self.register_buffer("nm_backward_mask", empty.clone())
        self._attach()
        self._refresh(search=method == "bimask" and self.schedule.searches_at(0))

    def _init_from_options(self, layout: Layout, options: dict) -> None:
        """:meth:`_init_sparse` from ``from_dense``'s keyword options, with the defaults of
        the constructors."""
        options = dict(options)
        options.pop("layout", None)
        self._init_sparse(
            options.pop("pattern", "2:4"),
            options.pop("method", "srste"),
            layout,
            options.pop("decay", SRSTE_DEFAULT_DECAY),
            options.pop("bame_config", None),
            **options,
        )

    # ------------------------------------------------------------------ state of the masks

    def _attach(self) -> None:
        """Link the parameters to this layer (for the optimizer hooks) and count the gradient
        accumulations into the weight (for the never-stepped check)."""
        steps.attach(self, {"weight": self.weight, "bias": self.bias})  # type: ignore[dict-item]
        reference = weakref.ref(self)

        def after_accumulation(parameter: torch.Tensor) -> None:
            layer = reference()
            if layer is not None and layer.weight is parameter:
                layer._after_backward()

        self._accumulation_hook = self.weight.register_post_accumulate_grad_hook(after_accumulation)
        # A weak reference, not the Parameter itself: a Parameter set as an attribute would
        # be registered (and saved) as a second parameter.
        self._attached = weakref.ref(self.weight)

    def _account(self) -> None:
        """Record that the masks are current for the weight as it is now."""
        self._mask_version = (self.weight._version, self.weight.dtype)

    def _is_current(self) -> bool:
        return self._attached() is self.weight and getattr(self, "_mask_version", None) == (
            self.weight._version,
            self.weight.dtype,
        )

    def _ensure_current(self) -> None:
        """Masks of a weight changed outside a step the layer saw (an initialisation, a manual
        update, a new parameter): refresh them now (eager mode only). BAME's mask is evolved
        state, not a function of the weight: a BAME weight changed outside its step is an error."""
        if self._is_current():
            return
        if self._attached() is not self.weight:
            self._attach()
        if self.method == "bame":
            if self.bame_step == 0:
                self._bame_start_from_weight()  # an initialisation before training
            else:
                self._check_bame_weight_unchanged()
            return
        self._refresh(search=False)

    @torch.no_grad()
    def _refresh(self, *, search: bool) -> None:
        """Compute the masks of the current weight (``specs/training.md`` §2)."""
        weight = self.weight.detach()
        if self.method == "bame":
            self._refresh_bame_positions()
            self._account()
            return
        _check_finite_at_refresh(self, weight)
        n, m = self.pattern
        with torch.autocast(weight.device.type, enabled=False):
            if self.method == "transposable":
                mask = host_transposable_mask(
                    weight,
                    n,
                    m,
                    layout=self.layout,
                    solver=self.schedule.transposable_solver,
                    fill=self.schedule.transposable_fill,
                )
            else:
                mask = _mask_of(self, weight)
            self.nm_mask.copy_(mask)
            if self.method == "bimask":
                if search:
                    self._search_permutation()
                from .bimask import backward_mask

                backward = backward_mask(
                    weight, mask, self.permutation, n, m, layout=self.layout, rank=self.rank
                )
                self.nm_backward_mask.copy_(backward)
        self._account()

    def refresh_masks(self) -> None:
        """Recompute the masks of the current weight now (the schedule is not advanced).

        Needed only when the weight changed in a way the layer cannot see while compiled
        (``torch.compile`` skips the staleness check of eager mode)."""
        if self.method == "bame":
            raise ValueError(
                "a BAME mask is evolved state, not a function of the weight: it has nothing "
                "to refresh (it changes through the optimizer step)"
            )
        self._refresh(search=False)

    def _advance(self, *, refresh: bool) -> None:
        """One optimizer step was taken on the weight: count it and refresh on schedule."""
        self.nm_step += 1
        self._backwards_since_step = 0
        due = self.schedule.refreshes_at(self.nm_step)
        search = self.method == "bimask" and self.schedule.searches_at(self.nm_step)
        if refresh and (due or search):
            self._refresh(search=search)
        else:
            self._account()  # the mask stays, by schedule, for the weight as it is now

    def _after_backward(self) -> None:
        """A gradient was accumulated into the weight (post-accumulate-grad hook)."""
        self._backwards_since_step += 1
        if self._backwards_since_step > self.schedule.backward_limit:
            raise RuntimeError(
                f"{self._describe()}: {self._backwards_since_step} gradients accumulated into "
                "its weight without an optimizer step, so its masks never refresh"
                + (" and its mask never evolves" if self.method == "bame" else "")
                + ": pass the layer's parameters to a torch.optim optimizer (or call "
                "nmsim.torch.step_layers(model) after your own update); set "
                "requires_grad=False to freeze it, or raise backward_limit="
                f"{self.schedule.backward_limit} for longer gradient accumulation"
            )
        if not self._is_current() and self._attached() is self.weight:
            # Only a compiled forward skips _ensure_current: it ran on stale masks.
            raise RuntimeError(
                f"{self._describe()}: its weight changed outside an optimizer step since its "
                "masks were computed, and a compiled forward cannot see that: call "
                "layer.refresh_masks() (or nmsim.torch.refresh_masks(model)) after changing "
                "weights, or update them with a torch.optim optimizer"
            )

    def _before_optimizer_step(self, optimizer, roles: dict) -> None:
        if self.method == "bame":
            self._bame_take_out_of_update(optimizer, roles)

    def _after_optimizer_step(self, optimizer, roles: dict) -> None:
        if self.method == "bame":
            self._bame_optimizer_step_from(optimizer, roles)
            return
        self._advance(refresh=True)

    def __getstate__(self) -> dict:
        # The hook handle and the weak reference belong to this object's parameter; a copy
        # (copy.deepcopy, pickling) attaches its own in __setstate__.
        state = self.__dict__.copy()
        state.pop("_accumulation_hook", None)
        state.pop("_attached", None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)  # type: ignore[misc]
        self._attach()
        self._account()  # the copied masks belong to the copied weight

    def _describe(self) -> str:
        return f"{type(self).__name__}(method={self.method!r}, pattern={self.pattern})"

    # ------------------------------------------------------------------ Bi-Mask

    def _search_permutation(self):
        from .bimask import search_permutation

        n, m = self.pattern
        result = search_permutation(
            self.weight.detach(),
            n,
            m,
            candidates=self.schedule.permutation_candidates,
            criterion=self.criterion,
            rng=self.generator,
            layout=self.layout,
        )
        self.permutation.copy_(torch.from_numpy(result.permutation))
        return result

    # ------------------------------------------------------------------ BAME

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
        # on exact data, the same bits; fast wherever a dense GEMM is). A compiled forward
        # uses "masked_dense" (functions._traceable).
        self.bame_weight_gradient = "gathered"
        with torch.no_grad():
            _check_finite_at_refresh(self, self.weight.detach())
            mask = magnitude_mask(self.weight, n, m, layout=self.layout)
        self.register_buffer("bame_mask", mask)
        self.register_buffer("bame_positions", mask.clone())
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

    @torch.no_grad()
    def _bame_start_from_weight(self) -> None:
        """Before its first step, a BAME layer whose weight was set (an initialisation) starts
        from the magnitude mask of that weight, with fresh counters (``specs/training.md`` §2)."""
        from nmref.bame import BameState

        n, m = self.pattern
        _check_finite_at_refresh(self, self.weight.detach())
        mask = magnitude_mask(self.weight.detach(), n, m, layout=self.layout)
        self.bame_mask.copy_(mask)
        self.bame_velocity.zero_()
        self.bame_state = BameState.initial(self._to_matrix(mask).cpu().numpy(), m)
        self._refresh_bame_positions()
        self._account()

    def _refresh_bame_positions(self) -> None:
        """Where the next backward computes ``dW``, as a buffer the forward reads."""
        self.bame_positions.copy_(self.bame_gradient_positions())

    def _check_bame_weight_unchanged(self) -> None:
        raise RuntimeError(
            f"{self._describe()}: its weight changed outside the BAME step (a manual update, "
            "an optimizer that is not torch.optim, or an edit). BAME updates only the kept "
            "weights, with its own momentum (specs/bame.md §4): put the layer's parameters in "
            "a torch.optim.SGD, or call layer.bame_optimizer_step(lr, momentum, weight_decay) "
            "after backward; after a deliberate edit, call layer.bame_accept_weight()"
        )

    def bame_accept_weight(self) -> None:
        """Accept the current weight as BAME's after a deliberate edit outside its step
        (an initialisation, a surgery): the mask and the counters stay as they are."""
        self._account()

    def _bame_group_settings(self, optimizer, group: dict) -> tuple[float, float, float]:
        """``(lr, momentum, weight_decay)`` of ``group``, refusing an optimizer whose update
        is not the momentum SGD BAME applies to its kept weights."""
        if not isinstance(optimizer, torch.optim.SGD):
            raise TypeError(
                f"{self._describe()}: its parameters are in a {type(optimizer).__name__}, but "
                "BAME updates only the kept weights with momentum SGD (specs/bame.md §4): put "
                "the BAME layers' parameters in a torch.optim.SGD (a second optimizer, or a "
                "param group of their own in one SGD, is fine)"
            )
        for name, allowed in (("nesterov", False), ("dampening", 0), ("maximize", False)):
            if group.get(name, allowed) != allowed:
                raise ValueError(
                    f"{self._describe()}: torch.optim.SGD {name}={group[name]!r} is not BAME's "
                    f"update (momentum SGD with {name}={allowed!r}); use a param group with "
                    f"{name}={allowed!r} for the BAME layers"
                )
        return float(group["lr"]), float(group["momentum"]), float(group["weight_decay"])

    def _bame_take_out_of_update(self, optimizer, roles: dict) -> None:
        """Pre-step hook: validate the optimizer, and set the gradients of the layer's
        parameters aside so that the stock update skips them (``grad is None``)."""
        _, group = roles["weight"]
        self._bame_group_settings(optimizer, group)
        self._bame_set_aside = {}
        for role, (parameter, _) in roles.items():
            self._bame_set_aside[role] = parameter.grad
            parameter.grad = None

    def _bame_optimizer_step_from(self, optimizer, roles: dict) -> None:
        """Post-step hook: give the gradients back and take BAME's own step with the
        optimizer's current (scheduled) learning rate, momentum and weight decay."""
        for role, grad in self._bame_set_aside.items():
            getattr(self, role).grad = grad
        self._bame_set_aside = {}
        _, group = roles["weight"]
        lr, momentum, weight_decay = self._bame_group_settings(optimizer, group)
        if self.weight.grad is None:
            self._account()  # nothing reached this layer in this step (no gradient)
            return
        self.bame_optimizer_step(lr, momentum, weight_decay, update_bias="bias" in roles)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)  # type: ignore[misc]
        # The step counter and the random generator are training state: checkpoint them as
        # plain tensors (loadable with weights_only=True) so a resumed run continues bit for bit.
        destination[f"{prefix}nm_step"] = torch.tensor(self.nm_step)
        if self.method == "bimask":
            state = json.dumps(self.generator.bit_generator.state).encode()
            destination[f"{prefix}nm_generator"] = torch.frombuffer(
                bytearray(state), dtype=torch.uint8
            )
        if self.method == "bame":
            for name in self._BAME_STATE_FIELDS:
                value = getattr(self.bame_state, name)
                destination[f"{prefix}bame_state.{name}"] = torch.from_numpy(value.copy())
            destination[f"{prefix}bame_state.num_updates"] = torch.tensor(
                self.bame_state.num_updates
            )
            destination[f"{prefix}bame_step"] = torch.tensor(self.bame_step)

    _BAME_STATE_FIELDS = ("changes", "reverts", "change_ema", "frozen", "previous_mask")

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        extra: list[str] = []
        step_key = f"{prefix}nm_step"
        generator_key = f"{prefix}nm_generator"
        if step_key in state_dict:
            self.nm_step = int(state_dict[step_key])
        extra += [step_key, generator_key]
        if self.method == "bimask" and generator_key in state_dict:
            raw = bytes(state_dict[generator_key].cpu().numpy().tobytes())
            state = load_json(raw.decode(), f"state_dict[{generator_key!r}]")
            self.generator.bit_generator.state = state
        if self.method == "bame":
            from nmref.bame import BameState

            keys = [f"{prefix}bame_state.{name}" for name in self._BAME_STATE_FIELDS]
            bame_extra = [*keys, f"{prefix}bame_state.num_updates", f"{prefix}bame_step"]
            present = [key for key in bame_extra if key in state_dict]
            if len(present) == len(bame_extra):
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
                missing_keys.extend(key for key in bame_extra if key not in state_dict)
            extra += bame_extra
        # Checkpoints written before the masks were state hold no mask buffers: compute them.
        names = [n for n in ("nm_mask", "nm_backward_mask", "bame_positions") if n in self._buffers]
        mask_keys = [f"{prefix}{name}" for name in names]
        absent = [key for key in mask_keys if key not in state_dict]
        state_dict = {key: value for key, value in state_dict.items() if key not in extra}
        super()._load_from_state_dict(  # type: ignore[misc]
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for key in absent:
            if key in missing_keys:
                missing_keys.remove(key)
        if self.method == "bame":
            self._refresh_bame_positions()
            self._account()
        elif absent:
            self._refresh(search=False)
        else:
            self._account()  # the loaded masks belong to the loaded weight

    def _apply(self, fn, recurse=True):
        before = self.weight.dtype
        result = super()._apply(fn, recurse)  # type: ignore[misc]
        if self._attached() is not self.weight:
            self._attach()
        if self.weight.dtype != before and self.method != "bame":
            self._refresh(search=False)  # rounded weights: their masks may differ
        else:
            self._account()  # a move keeps the values, and so the masks
        return result

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
        evolve_mask`: regrown weights and their momentum reset, counters advanced). Returns the
        ``Evolution`` or ``None`` when ``bame_step`` is not an update step. Does not advance
        ``bame_step``. The optimizer step calls it (:meth:`bame_optimizer_step`)."""
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
        self,
        learning_rate: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        *,
        update_bias: bool = True,
    ) -> None:
        """Momentum SGD on the kept entries only: ``v = μv + (g + λw)``, ``w −= lr·v``;
        pruned weights and their momentum untouched; the bias is dense (``specs/bame.md``
        §4 step 4). A stock ``torch.optim.SGD`` would move pruned weights (momentum,
        decay, the candidate entries of ``weight.grad``), which is why the optimizer step
        sets BAME's parameters aside and calls this instead. Does not advance ``bame_step``."""
        from nmref.bame.training import SGD

        SGD(learning_rate, momentum, weight_decay)  # validates: lr > 0, 0 <= μ < 1, λ >= 0
        kept = self.bame_mask
        grad = self.weight.grad
        if grad is None:
            raise ValueError("bame_sgd_step needs weight.grad: run backward first")
        weight, velocity = self.weight.data, self.bame_velocity
        # where, not boolean indexing: the same elementwise operations on the kept entries,
        # without the nonzero() that would synchronise a GPU at every step.
        velocity.copy_(
            torch.where(kept, momentum * velocity + (grad + weight_decay * weight), velocity)
        )
        weight.copy_(torch.where(kept, weight - learning_rate * velocity, weight))
        if update_bias and self.bias is not None and self.bias.grad is not None:
            bias_velocity = self.bame_bias_velocity
            bias_velocity.copy_(momentum * bias_velocity + self.bias.grad)
            self.bias.data.copy_(self.bias.data - learning_rate * bias_velocity)

    def bame_optimizer_step(
        self,
        learning_rate: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        *,
        update_bias: bool = True,
    ):
        """Steps 3-4 of ``specs/bame.md`` §4 after ``backward``: :meth:`bame_update` and
        :meth:`bame_sgd_step` in ``bame_config.step_order``, then ``bame_step += 1``.
        Returns the ``Evolution`` or ``None`` (not an update step).

        A ``torch.optim.SGD`` holding the layer's parameters calls it at every ``step()``
        with its parameter group's settings; call it yourself only for a layer no optimizer
        holds."""
        from nmref.bame.training import SGD

        SGD(learning_rate, momentum, weight_decay)  # validate before changing anything
        if self.bame_config.step_order == "evolve_first":
            evolution = self.bame_update(learning_rate)
            self.bame_sgd_step(learning_rate, momentum, weight_decay, update_bias=update_bias)
        else:
            self.bame_sgd_step(learning_rate, momentum, weight_decay, update_bias=update_bias)
            evolution = self.bame_update(learning_rate)
        self.bame_step += 1
        self.nm_step += 1
        self._backwards_since_step = 0
        with torch.no_grad():
            self._refresh_bame_positions()
        self._account()
        return evolution

    # ------------------------------------------------------------------ what the layer shows

    def sparse_weight(self) -> torch.Tensor:
        """``E ⊙ W`` for the current dense weight (differentiable by the method's rule)."""
        if self.method in LAYER_METHODS:
            raise ValueError(f"method={self.method!r} has no single sparse weight")
        if not torch.compiler.is_compiling():
            self._ensure_current()
        decay = 0.0 if self.method == "ste" else self.decay
        return GivenMaskWeight.apply(self.weight, self.nm_mask, decay)

    @torch.no_grad()
    def mask(self) -> torch.Tensor:
        """The forward mask ``E`` the next forward pass applies (bool, shape of the weight)."""
        self._ensure_current()
        if self.method == "bame":
            return self.bame_mask.clone()
        return self.nm_mask.clone()

    @torch.no_grad()
    def backward_mask(self) -> torch.Tensor:
        """The mask of the input-gradient GEMM: ``E`` for STE/SR-STE/transposable/BAME,
        Bi-Mask's ``B``."""
        self._ensure_current()
        if self.method != "bimask":
            return self.mask()
        return self.nm_backward_mask.clone()

    @torch.no_grad()
    def update_permutation(
        self, rng, candidates: int = 100, criterion: str = "kept", include_identity: bool = False
    ):
        """Bi-Mask: search a new row permutation (best of ``candidates`` random ones) now, with
        ``rng``, and recompute the backward mask. The layer searches on its own schedule
        (``permutation_interval``, with its own generator); this is the manual override.
        Returns the :class:`nmref.bimask.PermutationSearch`.
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
        self._refresh(search=False)
        return result

    def extra_repr(self) -> str:
        base = super().extra_repr()  # type: ignore[misc]
        uses_decay = self.method in ("srste", "bimask", "transposable")
        decay = f", decay={self.decay:g}" if uses_decay else ""
        layout = f", layout={self.layout!r}" if self.layout else ""
        interval = (
            f", refresh_interval={self.schedule.refresh_interval}" if self.method != "bame" else ""
        )
        return f"{base}, pattern={self.pattern}, method={self.method!r}{decay}{layout}{interval}"

    def _forward_masks_current(self) -> None:
        if not torch.compiler.is_compiling():
            self._ensure_current()


def _check_finite_at_refresh(layer: _SparseMixin, weight: torch.Tensor) -> None:
    """NaN weights have no magnitude order; the exact transposable solver also needs finite
    ones (``specs/transposable.md``). One error naming the layer and the step."""
    if layer.method == "transposable":
        bad = not bool(torch.isfinite(weight).all())
        rule = "finite weights (the exact transposable solver scores |w|)"
    else:
        bad = bool(torch.isnan(weight).any())
        rule = "no NaN weight (NaN has no magnitude to rank)"
    if bad:
        raise ValueError(
            f"{layer._describe()}: at optimizer step {layer.nm_step} its weight holds "
            f"non-finite values; a mask refresh needs {rule}: the training diverged (lower the "
            "learning rate, clip gradients, or use a GradScaler under fp16)"
        )


class SparseLinear(_SparseMixin, nn.Linear):
    """``nn.Linear`` whose weight is N:M sparse in the forward pass (groups along ``in``).

    The dense weight is the parameter; the masks are buffers refreshed on the method's
    schedule at the optimizer step, and the forward computes ``F.linear(x, E ⊙ W, bias)``.
    Gradients follow the method's per-GEMM contract (:mod:`nmsim.torch.functions`). Train it
    in a plain loop: ``opt = torch.optim.SGD(model.parameters(), ...)``, ``opt.zero_grad();
    loss.backward(); opt.step()`` (``specs/training.md``).

    Parameters
    ----------
    in_features, out_features, bias, device, dtype
        As ``nn.Linear``.
    pattern : str, Pattern or (n, m), default "2:4"
    method : {"ste", "srste", "transposable", "bimask", "bame"}, default "srste"
    decay : float, default 2e-4
        SR-STE's λ (``"srste"``, ``"transposable"``, ``"bimask"``).
    bame_config : nmref.bame.BameConfig, optional
        ``"bame"`` only.
    refresh_interval : int, optional
        Optimizer steps between mask refreshes; default the method's (``"transposable"``:
        40, Hubara et al. 2021; the others 1; ``"bame"`` schedules itself through
        ``bame_config``). :mod:`nmsim.torch.schedule` lists the defaults and their sources.
    transposable_solver : {"exact", "greedy"}, default "exact"
        ``"transposable"``: the optimal mask, or the paper's 2-approximation.
    transposable_fill : {"exact", "at_most"}, default "exact"
        ``"transposable"``: exactly n per row and column of every tile, or the best mask with
        at most n (what sparse hardware accepts).
    permutation_interval, permutation_candidates : int, optional
        ``"bimask"``: steps between permutation searches (default 100) and random candidates
        per search (default 10; the README runs of the paper use 100).
    seed : int, default 0
        ``"bimask"``: seed of the layer's own generator of candidate permutations.
    backward_limit : int, default 1000
        Gradient accumulations without an optimizer step before the layer raises.

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
        **schedule,
    ) -> None:
        nn.Linear.__init__(self, in_features, out_features, bias, device=device, dtype=dtype)
        self._init_sparse(pattern, method, "linear", decay, bame_config, **schedule)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._forward_masks_current()
        if self.method == "bimask":
            return TwoMaskLinearFunction.apply(
                x, self.weight, self.bias, self.nm_mask, self.nm_backward_mask, self.decay
            )
        if self.method == "bame":
            return BameLinearFunction.apply(
                x,
                self.weight,
                self.bias,
                self.bame_mask,
                self.bame_positions,
                self.bame_weight_gradient,
            )
        decay = 0.0 if self.method == "ste" else self.decay
        return F.linear(x, GivenMaskWeight.apply(self.weight, self.nm_mask, decay), self.bias)

    @classmethod
    def from_dense(cls, linear: nn.Linear, **options) -> SparseLinear:
        """A SparseLinear sharing ``linear``'s parameters (no copy); ``options`` as the
        constructor's keywords."""
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
    Training, masks and settings as :class:`SparseLinear`.
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
        **schedule,
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
        if method == "bimask" and (padding_mode != "zeros" or isinstance(self.padding, str)):
            raise ValueError("method='bimask' needs padding_mode='zeros' and numeric padding")
        self._init_sparse(pattern, method, layout, decay, bame_config, **schedule)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._forward_masks_current()
        if self.method == "bimask":
            conv = (self.stride, self.padding, self.dilation, self.groups)
            return TwoMaskConv2dFunction.apply(
                x,
                self.weight,
                self.bias,
                self.nm_mask,
                self.nm_backward_mask,
                self.decay,
                conv,
            )
        if self.method == "bame":
            conv = (self.stride, self.padding, self.dilation)
            return BameConv2dFunction.apply(
                x,
                self.weight,
                self.bias,
                self.bame_mask,
                self.bame_positions,
                conv,
                self.bame_weight_gradient,
            )
        decay = 0.0 if self.method == "ste" else self.decay
        sparse = GivenMaskWeight.apply(self.weight, self.nm_mask, decay)
        return self._conv_forward(x, sparse, self.bias)

    @classmethod
    def from_dense(cls, conv: nn.Conv2d, **options) -> SparseConv2d:
        """A SparseConv2d sharing ``conv``'s parameters and hyperparameters (no copy)."""
        if options.get("method") == "bimask" and (
            conv.padding_mode != "zeros" or isinstance(conv.padding, str)
        ):
            raise ValueError("method='bimask' needs padding_mode='zeros' and numeric padding")
        layer = cls.__new__(cls)
        layer.__dict__.update({k: v for k, v in conv.__dict__.items()})
        layer._parameters = dict(conv._parameters)
        layer._buffers = dict(conv._buffers)
        layer._modules = dict(conv._modules)
        layer._init_from_options(options.get("layout", "channels"), options)
        return layer
