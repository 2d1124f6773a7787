"""Sparse layers inside a plain PyTorch loop: the optimizer step drives their schedules.

``opt = torch.optim.SGD(model.parameters(), ...)``, ``opt.zero_grad(); loss.backward();
opt.step()``: nothing else is needed (``specs/training.md`` §1). When a sparse layer is built,
this module installs two global ``torch.optim`` step hooks, once per process, and marks the
layer's parameters. At every ``step()`` of any ``torch.optim.Optimizer`` the hooks find the
sparse layers whose weight that optimizer holds and let each take its part of the step:

* before the update, a BAME layer takes its parameters out of the optimizer's update (their
  ``grad`` is set aside), because BAME updates only the kept entries, with its own momentum;
* after the update, every layer advances its step counter, refreshes its masks when its
  schedule says so (:mod:`nmsim.torch.schedule`) and, for BAME, applies its masked momentum step
  with the learning rate, momentum and weight decay of the optimizer's parameter group, so LR
  schedulers apply to it as to every other parameter.

A backward hook on each sparse weight counts gradient accumulations; a weight that keeps
receiving gradients but is never stepped by an optimizer raises (a layer left out of every
optimizer does not train as its method says) instead of training silently wrong.

Learning-rate schedulers, ``GradScaler`` (which skips ``step()`` on overflow, and so the
layer's step too) and gradient accumulation work unchanged. A parameter held by two
optimizers advances its layer on each of their steps.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["attach", "sparse_layers_of", "step_layers"]

# id(parameter) -> (weak reference to the parameter, weak reference to its layer, role). Not an
# attribute on the parameter: it would travel with the parameter into pickles and copies.
_OWNERS: dict[int, tuple[weakref.ref, weakref.ref, str]] = {}
_HOOKS: list[Any] = []
# Layers an optimizer holds, found by the pre-hook and used again by the post-hook.
_PENDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def attach(layer: torch.nn.Module, parameters: dict[str, torch.nn.Parameter]) -> None:
    """Record that ``parameters`` (``{"weight": ..., "bias": ...}``) belong to ``layer``, and
    install the optimizer hooks if this is the first sparse layer of the process."""
    _install()
    layer_reference = weakref.ref(layer)
    for role, parameter in parameters.items():
        if parameter is None:
            continue
        key = id(parameter)

        def forget(reference: weakref.ref, key: int = key) -> None:
            entry = _OWNERS.get(key)
            if entry is not None and entry[0] is reference:
                del _OWNERS[key]

        _OWNERS[key] = (weakref.ref(parameter, forget), layer_reference, role)


def _owner(parameter: torch.Tensor) -> tuple[torch.nn.Module, str] | None:
    entry = _OWNERS.get(id(parameter))
    if entry is None or entry[0]() is not parameter:
        return None
    layer = entry[1]()
    return None if layer is None else (layer, entry[2])


def _install() -> None:
    if _HOOKS:
        return
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    _HOOKS.append(register_optimizer_step_pre_hook(_before_step))
    _HOOKS.append(register_optimizer_step_post_hook(_after_step))


def sparse_layers_of(
    optimizer: torch.optim.Optimizer,
) -> dict[torch.nn.Module, dict[str, tuple[torch.nn.Parameter, dict]]]:
    """The sparse layers whose parameters ``optimizer`` holds: ``{layer: {role: (parameter,
    param_group)}}``, ``role`` being ``"weight"`` or ``"bias"``. A layer appears only when the
    optimizer holds its weight (its bias alone is an ordinary dense parameter)."""
    found: dict[torch.nn.Module, dict[str, tuple[torch.nn.Parameter, dict]]] = {}
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            owner = _owner(parameter)
            if owner is None:
                continue
            layer, role = owner
            if getattr(layer, role, None) is not parameter:
                continue  # the layer's parameter was replaced
            found.setdefault(layer, {})[role] = (parameter, group)
    return {layer: roles for layer, roles in found.items() if "weight" in roles}


def _before_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    layers = sparse_layers_of(optimizer)
    _PENDING[optimizer] = layers
    for layer, roles in layers.items():
        layer._before_optimizer_step(optimizer, roles)  # type: ignore[operator]


def _after_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    layers = _PENDING.pop(optimizer, None)
    if layers is None:  # hooks installed between the two halves of a step
        layers = sparse_layers_of(optimizer)
    for layer, roles in layers.items():
        layer._after_optimizer_step(optimizer, roles)  # type: ignore[operator]


def step_layers(model: torch.nn.Module) -> int:
    """Advance every sparse layer of ``model`` by one step as an optimizer step would, for a
    loop that updates the weights without a ``torch.optim`` optimizer (its own update rule, or
    an optimizer from another library). Call it after each update; returns the layers advanced.

    BAME layers are not advanced this way: their update is the masked momentum step, taken
    through a ``torch.optim.SGD`` or ``layer.bame_optimizer_step``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    count = 0
    for layer in _sparse_modules(model):
        if layer.method == "bame":
            raise ValueError(
                "model holds a BAME layer, which step_layers does not update: put its "
                "parameters in a torch.optim.SGD, or call layer.bame_optimizer_step(lr, "
                "momentum, weight_decay)"
            )
        layer._advance(refresh=True)
        count += 1
    return count


def _sparse_modules(model: torch.nn.Module) -> Iterator[Any]:
    for module in model.modules():
        if hasattr(module, "_after_optimizer_step"):
            yield module
