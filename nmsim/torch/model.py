"""Whole-model conversion: :func:`sparsify` swaps eligible Linear and Conv2d layers for N:M ones.

The module is not named ``sparsify`` so that ``nmsim.torch.sparsify`` stays the function.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from nmref._validation import check_integer
from nmref.layouts import Layout, to_reduction_shape
from nmref.patterns import Pattern, parse_pattern

from .functions import SRSTE_DEFAULT_DECAY, check_method
from .layers import SparseConv2d, SparseLinear
from .schedule import MethodSchedule

#: The keyword settings of a layer's schedule that :func:`sparsify` passes on.
SCHEDULE_SETTINGS = (
    "refresh_interval",
    "transposable_solver",
    "transposable_fill",
    "permutation_interval",
    "permutation_candidates",
    "backward_limit",
)

__all__ = ["SCHEDULE_SETTINGS", "SparsifyResult", "refresh_masks", "sparse_layers", "sparsify"]


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
    seed: int = 0,
    **schedule,
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
    seed : int, default 0
        ``method="bimask"``: the i-th replaced layer draws its candidate permutations from
        a generator seeded with ``seed + i``.
    **schedule
        The schedule settings of :class:`SparseLinear` (``refresh_interval``,
        ``transposable_solver``, ``transposable_fill``, ``permutation_interval``,
        ``permutation_candidates``, ``backward_limit``), checked before any layer is
        replaced.

    Returns
    -------
    SparsifyResult
        Names replaced, and names skipped with the reason (a reduction length
        that is not a multiple of ``m``, as NVIDIA ASP skips such layers,
        rather than letting groups straddle rows).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for label, rule in (("include", include), ("exclude", exclude)):
        if rule is not None and not isinstance(rule, str) and not callable(rule):
            raise TypeError(
                f"{label}={rule!r} must be a regular expression (str), a callable "
                "(name, module) -> bool, or None"
            )
        if isinstance(rule, str):
            try:
                re.compile(rule)
            except re.error as error:
                raise ValueError(f"{label}={rule!r} is not a regular expression: {error}") from None
    check_method(method, layer=True)
    parsed = parse_pattern(pattern)
    unknown = sorted(set(schedule) - set(SCHEDULE_SETTINGS))
    if unknown:
        raise TypeError(
            f"sparsify() got unknown setting(s) {unknown}; the schedule settings are "
            f"{list(SCHEDULE_SETTINGS)}"
        )
    # Validate once, before the model changes (a bad setting must not leave it half-swapped).
    MethodSchedule.for_method(method, **schedule)
    check_integer(seed, "seed")
    included = 0

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
        included += 1
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
        options = {"pattern": parsed, "method": method, "decay": decay, **schedule}
        if method == "bame":
            options["bame_config"] = bame_config
        if method == "bimask":
            options["seed"] = seed + len(replaced)
        if isinstance(module, nn.Linear):
            new = SparseLinear.from_dense(module, **options)
        else:
            new = SparseConv2d.from_dense(module, layout=conv_layout, **options)
        _set_submodule(model, name, new)
        replaced.append(name)
    if include is not None and not included:
        # a filter that selects nothing is a typo far more often than a wish
        raise ValueError(f"include={include!r} matched no nn.Linear or nn.Conv2d layer of model")
    return SparsifyResult(tuple(replaced), tuple(skipped))


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def sparse_layers(model: nn.Module) -> list[tuple[str, SparseLinear | SparseConv2d]]:
    """The N:M sparse layers of ``model`` with their qualified names, in module order."""
    _check_model(model)
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, SparseLinear | SparseConv2d)
    ]


def refresh_masks(model: nn.Module) -> int:
    """Recompute the masks of every sparse layer of ``model`` from its current weight now
    (schedules are not advanced; BAME layers, whose masks are evolved state, are left as they
    are). Needed only after changing weights under ``torch.compile``, which skips the eager
    staleness check. Returns the number of layers refreshed."""
    _check_model(model)
    count = 0
    for _, layer in sparse_layers(model):
        if layer.method != "bame":
            layer.refresh_masks()
            count += 1
    return count


def _check_model(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
