"""Training-FLOP accounting for N:M sparse training methods, per layer, GEMM and phase.

Every weight layer ``Y = X W^T`` costs three GEMMs per training step, each of
``2 * MACs`` FLOPs: the forward ``Y = X W^T``, the input gradient
``dX = dY W`` and the weight gradient ``dW = dY^T X``. A method is a list of
training **phases** (a fraction of the steps each) that assigns a density to
each of the three GEMMs of the sparse layers; layers kept dense (by default the
stem and the classifier head, as in the Bi-Mask code) and attention products
run at density 1. See ``specs/flops.md`` for every convention.

Two accountings are reported side by side, because papers use the first and
hardware delivers the second:

``ideal``
    A GEMM whose weight operand is N:M **along that GEMM's reduction axis** costs
    ``N/M`` of its dense FLOPs. This is the papers' convention, not a count of
    nonzero products: SR-STE's ``dX = dY (W*mask)`` multiplies by zeros too,
    but its mask runs along ``in``, not along ``out`` (the reduction axis of
    dX), so no structured kernel can skip them and it is counted dense.
``hardware``
    What 2:4 sparse tensor cores can skip: a GEMM whose **weight** operand has a
    2:4-compatible pattern costs ``max(N/M, 1/2)``; an incompatible pattern
    (4:8...) and every output-sparse weight gradient cost 1.

References: Zhou et al. 2021 (SR-STE), Hubara et al. 2021 (transposable masks),
Zhang et al. 2023 (Bi-Mask, Sec. 3), Yang et al. 2025 (BAME, abstract),
Mishra et al. 2021 (ASP). Specs: ``specs/flops.md``, ``specs/bimask.md``, ``specs/bame.md``.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from nmref.patterns import Pattern, parse_pattern
from nmsim.perf.gemm import hardware_compatible
from nmsim.perf.models import Layer, resolve_layers

__all__ = [
    "GEMMS",
    "METHODS",
    "FlopReport",
    "GemmDensities",
    "LayerFlops",
    "MethodOptions",
    "Phase",
    "assumption_table",
    "bame_update_overhead",
    "gemm_densities",
    "hardware_density",
    "inference_density",
    "method_phases",
    "training_flops",
]

#: The three GEMMs of a training step, in order.
GEMMS: tuple[str, ...] = ("forward", "input_grad", "weight_grad")

#: Method names and what they sparsify (the densities are in :func:`method_phases`).
METHODS: dict[str, str] = {
    "dense": "no sparsity",
    "inference_only": "dense training; N:M applied after training (forward sparse at inference)",
    "forward_only": "1-D N:M mask on the forward GEMM only; dense backward",
    "srste": "SR-STE (Zhou et al. 2021): sparse forward, dense dX and dW (STE + decay)",
    "asp": "ASP (Mishra et al. 2021): dense training, prune once, fine-tune with sparse forward",
    "transposable": "transposable N:M mask (Hubara et al. 2021): sparse forward and dX, dense dW",
    "bimask": "Bi-Mask (Zhang et al. 2023): forward mask + separate backward mask, dense dW",
    "bame": "BAME-style (Yang et al. 2025): sparse fwd/dX/dW, candidate-gradient overhead",
    "all_sparse": "all three GEMMs at the pattern density (the literal 'all sparse' reading)",
}

Accounting = Literal["ideal", "hardware"]


@dataclass(frozen=True)
class GemmDensities:
    """Fraction of dense FLOPs of each GEMM of a sparse layer, in [0, 1]."""

    forward: float
    input_grad: float
    weight_grad: float

    def __post_init__(self) -> None:
        for name in GEMMS:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} density={value} must be in [0, 1]")

    def get(self, gemm: str) -> float:
        """Density of ``gemm`` (one of :data:`GEMMS`)."""
        return float(getattr(self, gemm))


@dataclass(frozen=True)
class Phase:
    """A share of the training steps during which a method has fixed densities.

    ``sparse_weight_gradient`` is True when the weight gradient is computed
    only at kept positions (an output-sparse product; no tensor core skips it).
    """

    name: str
    fraction: float
    densities: GemmDensities
    sparse_weight_gradient: bool = False


@dataclass(frozen=True)
class MethodOptions:
    """Knobs of the accounting conventions (each documented in ``specs/flops.md``).

    Attributes
    ----------
    keep_dense_roles : tuple of str
        Layer roles kept dense by the method (default stem and head, as in the
        Bi-Mask and SR-STE ImageNet code). Attention products are always dense.
    keep_dense_names : tuple of str
        Extra layer names kept dense.
    count_first_layer_input_grad : bool
        Count ``dX`` of the first layer, which training never needs (default
        True, the "3 x forward" convention behind 3.1e18 for ResNet-50).
    asp_dense_fraction : float
        ASP: share of all steps spent in dense pre-training (default 0.5:
        train dense, then fine-tune as long with the mask).
    bame_update_overhead : float
        BAME: average share ``p`` of the pruned weight-gradient entries that is
        computed anyway for candidate blocks, so ``dW = rho + p (1 - rho)``.
    bame_window : float
        BAME: share of steps in a mask-adaptation window that charges a dense
        weight gradient (Bi-Mask-like cost); 0 means none.
    """

    keep_dense_roles: tuple[str, ...] = ("stem", "head")
    keep_dense_names: tuple[str, ...] = ()
    count_first_layer_input_grad: bool = True
    asp_dense_fraction: float = 0.5
    bame_update_overhead: float = 0.0
    bame_window: float = 0.0

    def __post_init__(self) -> None:
        for name in ("asp_dense_fraction", "bame_update_overhead", "bame_window"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value} must be in [0, 1]")
        roles = {"stem", "body", "head", "attention", "other"}
        for role in self.keep_dense_roles:
            if role not in roles:
                raise ValueError(f"keep_dense_roles: {role!r} is not one of {sorted(roles)}")


def method_phases(
    method: str, pattern: str | Pattern, options: MethodOptions | None = None
) -> tuple[Phase, ...]:
    """Training phases of ``method`` with an N:M ``pattern`` (density ``rho = N/M``).

    =================  =========  =========  ==================
    method             forward    dX         dW
    =================  =========  =========  ==================
    dense              1          1          1
    inference_only     1          1          1
    forward_only       rho        1          1
    srste              rho        1          1
    asp                1 then rho 1          1
    transposable       rho        rho        1
    bimask             rho        rho        1
    bame               rho        rho        rho + p (1 - rho)
    all_sparse         rho        rho        rho
    =================  =========  =========  ==================

    ``asp`` has a dense pre-training phase (``asp_dense_fraction``);
    ``bame`` optionally a window with dense dW (``bame_window``).

    Raises
    ------
    ValueError
        Unknown method (the message lists the known ones) or bad pattern.
    """
    opts = options if options is not None else MethodOptions()
    rho = parse_pattern(pattern).density
    dense = GemmDensities(1.0, 1.0, 1.0)
    if method in ("dense", "inference_only"):
        return (Phase("dense", 1.0, dense),)
    if method in ("forward_only", "srste"):
        return (Phase("sparse forward", 1.0, GemmDensities(rho, 1.0, 1.0)),)
    if method == "asp":
        phases = [
            Phase("dense pre-training", opts.asp_dense_fraction, dense),
            Phase(
                "sparse fine-tuning", 1.0 - opts.asp_dense_fraction, GemmDensities(rho, 1.0, 1.0)
            ),
        ]
        return tuple(p for p in phases if p.fraction > 0)
    if method in ("transposable", "bimask"):
        return (Phase("sparse forward + dX", 1.0, GemmDensities(rho, rho, 1.0)),)
    if method == "bame":
        weight_grad = rho + opts.bame_update_overhead * (1.0 - rho)
        phases = [
            Phase("adaptation window (dense dW)", opts.bame_window, GemmDensities(rho, rho, 1.0)),
            Phase(
                "sparse fwd + bwd",
                1.0 - opts.bame_window,
                GemmDensities(rho, rho, weight_grad),
                sparse_weight_gradient=True,
            ),
        ]
        return tuple(p for p in phases if p.fraction > 0)
    if method == "all_sparse":
        return (
            Phase("all sparse", 1.0, GemmDensities(rho, rho, rho), sparse_weight_gradient=True),
        )
    raise ValueError(f"method={method!r} is unknown; known methods: {', '.join(METHODS)}")


def bame_update_overhead(
    total_steps: int, config: object, candidate_fraction: float = 1.0
) -> float:
    """``MethodOptions.bame_update_overhead`` implied by a BAME schedule: ``p = c U / S``.

    ``nmref.bame`` computes, besides the kept entries, every weight-gradient entry of every
    candidate block at each update step (``specs/bame.md`` §3.6), a dense-dW share of
    ``n/m + (1 - n/m) c U / S`` over ``S = total_steps`` steps with ``U`` update steps and
    mean candidate fraction ``c``. That is this module's ``rho + p (1 - rho)`` with the
    returned ``p``, so ``MethodOptions(bame_update_overhead=p)`` charges exactly the weight
    gradient the reference implementation computes (``nmref.bame.weight_gradient_fraction``).

    Parameters
    ----------
    total_steps : int
        Optimizer steps of the run, >= 1.
    config : nmref.bame.BameConfig
        The schedule (``t_i``, ``t_f``, ``update_interval``).
    candidate_fraction : float
        Mean share of blocks that are candidates at an update step, in [0, 1] (1 while
        nothing is frozen).

    Examples
    --------
    >>> from nmref.bame import BameConfig
    >>> bame_update_overhead(6, BameConfig(2, 4, t_i=0, t_f=4, update_interval=2))
    0.3333333333333333
    """
    from nmref.bame import BameConfig, update_steps, weight_gradient_fraction

    if not isinstance(config, BameConfig):
        raise TypeError(f"config={config!r} must be an nmref.bame.BameConfig")
    # Validates total_steps and candidate_fraction with the reference's own messages.
    weight_gradient_fraction(total_steps, config, candidate_fraction)
    return float(candidate_fraction) * len(update_steps(total_steps, config)) / total_steps


def inference_density(method: str, pattern: str | Pattern) -> float:
    """Forward density of the deployed model: 1 for ``dense``, else ``N/M``."""
    if method not in METHODS:
        raise ValueError(f"method={method!r} is unknown; known methods: {', '.join(METHODS)}")
    return 1.0 if method == "dense" else parse_pattern(pattern).density


TWO_FOUR = Pattern(2, 4)


def hardware_density(
    density: float, pattern: Pattern, *, weight_operand: bool, hardware: Pattern = TWO_FOUR
) -> float:
    """Density a sparse tensor core actually executes for a GEMM of ideal ``density``.

    Only a GEMM whose weight operand carries the N:M pattern can use the sparse
    path, and then only down to the hardware density (1/2 for 2:4) and only if
    the pattern is ``hardware``-compatible. Everything else is dense.
    """
    if density >= 1.0 or not weight_operand or not hardware_compatible(pattern, hardware):
        return 1.0
    return max(density, hardware.density)


@dataclass(frozen=True)
class LayerFlops:
    """Per-example training MACs of one layer (phase-weighted), dense and by method."""

    name: str
    role: str
    sparse: bool
    dense_macs: float
    forward_macs: float
    input_grad_macs: float
    weight_grad_macs: float

    @property
    def training_macs(self) -> float:
        """Sum of the three GEMMs."""
        return self.forward_macs + self.input_grad_macs + self.weight_grad_macs


@dataclass(frozen=True)
class FlopReport:
    """Result of :func:`training_flops` (MACs per example; FLOPs = 2 x MACs).

    ``ratio`` is method / dense training cost; ``reduction`` its inverse.
    """

    model: str
    method: str
    pattern: str
    accounting: str
    phases: tuple[Phase, ...]
    layers: tuple[LayerFlops, ...]
    dense_forward_macs: float
    dense_training_macs: float
    training_macs: float
    per_gemm_macs: dict[str, float]
    inference_macs: float
    examples: float
    epochs: float
    notes: tuple[str, ...] = field(default=())

    @property
    def ratio(self) -> float:
        """Training cost relative to dense training (same model and accounting)."""
        return self.training_macs / self.dense_training_macs

    @property
    def reduction(self) -> float:
        """Dense training cost / method training cost."""
        return self.dense_training_macs / self.training_macs

    @property
    def inference_ratio(self) -> float:
        """Inference forward cost relative to dense."""
        return self.inference_macs / self.dense_forward_macs

    @property
    def total_training_flops(self) -> float:
        """``2 * training_macs * examples * epochs``."""
        return 2.0 * self.training_macs * self.examples * self.epochs

    @property
    def dense_total_training_flops(self) -> float:
        """Dense counterpart of :attr:`total_training_flops`."""
        return 2.0 * self.dense_training_macs * self.examples * self.epochs

    def as_dict(self) -> dict[str, object]:
        """Plain-JSON form (layers included)."""
        return {
            "model": self.model,
            "method": self.method,
            "pattern": self.pattern,
            "accounting": self.accounting,
            "phases": [
                {"name": p.name, "fraction": p.fraction, **{g: p.densities.get(g) for g in GEMMS}}
                for p in self.phases
            ],
            "dense_forward_macs": self.dense_forward_macs,
            "dense_training_macs": self.dense_training_macs,
            "training_macs": self.training_macs,
            "per_gemm_macs": dict(self.per_gemm_macs),
            "ratio": self.ratio,
            "reduction": self.reduction,
            "inference_macs": self.inference_macs,
            "inference_ratio": self.inference_ratio,
            "examples": self.examples,
            "epochs": self.epochs,
            "total_training_flops": self.total_training_flops,
            "dense_total_training_flops": self.dense_total_training_flops,
            "layers": [
                {**layer.__dict__, "training_macs": layer.training_macs} for layer in self.layers
            ],
            "notes": list(self.notes),
        }


def is_sparse_layer(layer: Layer, options: MethodOptions) -> bool:
    """Whether ``layer`` carries the N:M mask under ``options``."""
    return (
        layer.has_weight
        and layer.role not in options.keep_dense_roles
        and layer.name not in options.keep_dense_names
    )


def gemm_densities(phase: Phase, pattern: Pattern, accounting: Accounting) -> GemmDensities:
    """Densities of one phase under ``accounting`` (see the module docstring)."""
    if accounting == "ideal":
        return phase.densities
    d = phase.densities
    return GemmDensities(
        hardware_density(d.forward, pattern, weight_operand=True),
        hardware_density(d.input_grad, pattern, weight_operand=True),
        hardware_density(d.weight_grad, pattern, weight_operand=not phase.sparse_weight_gradient),
    )


def training_flops(
    model: str | Sequence[Layer],
    method: str,
    pattern: str | Pattern = "2:4",
    *,
    accounting: Accounting = "ideal",
    options: MethodOptions | None = None,
    examples: float = 1_281_167,
    epochs: float = 100,
    model_name: str | None = None,
) -> FlopReport:
    """Training FLOPs of ``model`` under ``method`` with N:M ``pattern``.

    .. math::

        \\text{MACs} = \\sum_{\\text{phases}} f_p \\sum_{\\ell} \\text{MACs}_\\ell
                       (d^{fwd}_{p\\ell} + d^{dX}_{p\\ell} + d^{dW}_{p\\ell})

    with ``d = 1`` for dense layers and the method's densities for sparse ones.

    Parameters
    ----------
    model : str or sequence of Layer
        Built-in name (see :data:`nmsim.perf.models.MODELS`) or a layer table.
    method : str
        One of :data:`METHODS`.
    pattern : str or Pattern
        N:M pattern, N kept of M.
    accounting : {"ideal", "hardware"}
    options : MethodOptions, optional
    examples, epochs : float
        Dataset size and epochs for the totals (default ImageNet-1k train, 100).
    model_name : str, optional
        Label for a layer table.

    Returns
    -------
    FlopReport

    Raises
    ------
    ValueError
        Unknown model/method/accounting, bad pattern, a sparse layer whose
        reduction length is not a multiple of M, an empty table.

    Notes
    -----
    Complexity O(layers x phases). Non-GEMM work (norms, activations, the
    mask computations themselves) is not counted; ``estimate_step`` covers it.

    Examples
    --------
    >>> report = training_flops("resnet50", "srste", "2:4")
    >>> round(report.ratio, 4)
    0.8382
    >>> f"{training_flops('resnet50', 'dense').total_training_flops:.3g}"
    '3.14e+18'
    """
    opts = options if options is not None else MethodOptions()
    if accounting not in ("ideal", "hardware"):
        raise ValueError(f"accounting={accounting!r} must be 'ideal' or 'hardware'")
    for label, count in (("examples", examples), ("epochs", epochs)):
        if isinstance(count, bool) or not isinstance(count, numbers.Real):
            raise TypeError(f"{label}={count!r} must be a number")
        if not (0 < count < math.inf) or count > sys.float_info.max:  # also NaN, 10**400
            raise ValueError(f"{label}={count} must be finite and > 0")
    nm = parse_pattern(pattern)
    layers, name = resolve_layers(model, model_name)
    if not layers:
        raise ValueError("model has no layers")
    phases = method_phases(method, nm, opts)
    notes: list[str] = []

    per_gemm = dict.fromkeys(GEMMS, 0.0)
    rows: list[LayerFlops] = []
    first_weight = next((i for i, layer in enumerate(layers) if layer.has_weight), None)
    dense_training = 0.0
    for index, layer in enumerate(layers):
        sparse = method not in ("dense", "inference_only") and is_sparse_layer(layer, opts)
        if sparse and layer.in_features % nm.m:
            raise ValueError(
                f"layer {layer.name!r}: reduction length {layer.in_features} is not a multiple "
                f"of M={nm.m}; keep it dense with MethodOptions(keep_dense_names=...)"
            )
        if (
            sparse
            and layer.out_features % nm.m
            and any(p.densities.input_grad < 1.0 for p in phases)
        ):
            raise ValueError(
                f"layer {layer.name!r}: {method} makes dX sparse with the mask N:M along the "
                f"output axis, but out_features={layer.out_features} is not a multiple of "
                f"M={nm.m}; keep it dense with MethodOptions(keep_dense_names=...)"
            )
        input_grad_counted = opts.count_first_layer_input_grad or index != first_weight
        # An activation-activation product has two input gradients and no weight gradient.
        dense_gemms = {
            "forward": 1.0,
            "input_grad": float(input_grad_counted) * (1.0 if layer.has_weight else 2.0),
            "weight_grad": float(layer.has_weight),
        }
        totals = dict.fromkeys(GEMMS, 0.0)
        for phase in phases:
            dens = gemm_densities(phase, nm, accounting) if sparse else None
            for gemm in GEMMS:
                factor = dense_gemms[gemm] * (dens.get(gemm) if dens is not None else 1.0)
                totals[gemm] += phase.fraction * factor * layer.macs
        for gemm in GEMMS:
            per_gemm[gemm] += totals[gemm]
        dense_training += layer.macs * sum(dense_gemms.values())
        rows.append(
            LayerFlops(
                layer.name,
                layer.role,
                sparse,
                float(layer.macs),
                totals["forward"],
                totals["input_grad"],
                totals["weight_grad"],
            )
        )

    if not opts.count_first_layer_input_grad:
        notes.append("dX of the first layer is not counted (the input needs no gradient)")
    if any(layer.role == "attention" for layer in layers):
        notes.append(
            "attention score/value products have no weight and stay dense; their "
            "two operand gradients are counted under input_grad"
        )
    if accounting == "hardware" and not hardware_compatible(nm, TWO_FOUR):
        notes.append(
            f"{nm} is not 2:4-compatible: sparse tensor cores cannot run it, "
            "so the hardware accounting charges it as dense"
        )
    elif accounting == "hardware" and nm.density < 0.5:
        notes.append(f"{nm} runs as 2:4 on sparse tensor cores: at most 2x per sparse GEMM")
    dense_forward = float(sum(layer.macs for layer in layers))
    inf_density = inference_density(method, nm)
    if accounting == "hardware" and inf_density < 1.0:
        inf_density = hardware_density(inf_density, nm, weight_operand=True)
    inference = sum(
        layer.macs * (inf_density if method != "dense" and is_sparse_layer(layer, opts) else 1.0)
        for layer in layers
    )
    return FlopReport(
        model=name,
        method=method,
        pattern=str(nm),
        accounting=accounting,
        phases=phases,
        layers=tuple(rows),
        dense_forward_macs=dense_forward,
        dense_training_macs=dense_training,
        training_macs=sum(per_gemm.values()),
        per_gemm_macs=per_gemm,
        inference_macs=float(inference),
        examples=float(examples),
        epochs=float(epochs),
        notes=tuple(notes),
    )


def assumption_table(
    model: str | Sequence[Layer], pattern: str | Pattern, methods: Iterable[str] = tuple(METHODS)
) -> list[dict[str, object]]:
    """Ratios of every method under both accountings, plus BAME readings.

    Shows what each accounting assumption yields instead of quoting one
    headline number (``specs/flops.md``).
    """
    rows: list[dict[str, object]] = []
    baseline = {
        acc: training_flops(model, "srste", pattern, accounting=acc).training_macs
        for acc in ("ideal", "hardware")
    }
    variants: list[tuple[str, str, MethodOptions]] = [(m, "", MethodOptions()) for m in methods]
    variants += [
        ("bame", "p=0.67 (avg. candidate dW)", MethodOptions(bame_update_overhead=0.67)),
        ("bame", "window 80/120 epochs dense dW", MethodOptions(bame_window=80 / 120)),
        ("srste", "head sparse too", MethodOptions(keep_dense_roles=("stem",))),
    ]
    for method, variant, opts in variants:
        try:
            ideal = training_flops(model, method, pattern, options=opts)
            hardware = training_flops(model, method, pattern, options=opts, accounting="hardware")
        except ValueError as error:
            rows.append({"method": method, "variant": variant, "error": str(error)})
            continue
        rows.append(
            {
                "method": method,
                "variant": variant,
                "ideal_ratio": ideal.ratio,
                "ideal_vs_srste": baseline["ideal"] / ideal.training_macs,
                "hardware_ratio": hardware.ratio,
                "hardware_vs_srste": baseline["hardware"] / hardware.training_macs,
                "inference_ratio": ideal.inference_ratio,
                "hardware_inference_ratio": hardware.inference_ratio,
            }
        )
    return rows
