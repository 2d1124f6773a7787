"""The conformance suites of the torch path, as a registry that ``nmsim verify`` runs.

Each :class:`Suite` checks one algorithm of :mod:`nmsim.torch` against its
nmref reference with the kit :mod:`nmref.testing`, for one dtype on one device.
An algorithm added to the torch path registers its suite here with
:func:`register`; ``nmsim verify`` then prints it as rows of its table.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

from nmref.testing import (
    Report,
    check_magnitude_mask,
    check_mask_error_rules,
    check_nm_mask,
    check_sparse_training,
)

from . import masks
from .adapters import numpy_adapter, training_adapter

__all__ = ["FLOAT_DTYPES", "SUITES", "Suite", "register", "run_suite"]

FLOAT_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")
MASK_DTYPES: tuple[str, ...] = (*FLOAT_DTYPES, "int8", "int64", "uint8")


@dataclass(frozen=True)
class Suite:
    """One algorithm's conformance suite.

    Attributes
    ----------
    name : str
        Row label (``"nm_mask"``, ``"magnitude_mask[channels]"``, ...).
    dtypes : tuple of str
        Dtypes it runs for (kit names; ``"-"`` for dtype-free checks).
    run : callable
        ``run(dtype, device, quick) -> Report``.
    """

    name: str
    dtypes: tuple[str, ...]
    run: Callable[[str, str, bool], Report]


SUITES: dict[str, Suite] = {}


def register(suite: Suite) -> Suite:
    """Add ``suite`` to :data:`SUITES` (replacing one of the same name)."""
    SUITES[suite.name] = suite
    return suite


def run_suite(name: str, dtype: str, device: str, quick: bool = False) -> Report:
    """Run one registered suite and return its report (never raises on mismatch)."""
    return SUITES[name].run(dtype, device, quick)


def _nm_mask(dtype: str, device: str, quick: bool) -> Report:
    impl = numpy_adapter(masks.nm_mask, device=device, dtype=dtype)
    return check_nm_mask(impl, dtype=dtype, quick=quick, raise_on_failure=False)


def _magnitude_mask(layout: str | None, dtype: str, device: str, quick: bool) -> Report:
    impl = numpy_adapter(masks.magnitude_mask, device=device, dtype=dtype, layout=layout)
    return check_magnitude_mask(
        impl, layout=layout, dtype=dtype, quick=quick, raise_on_failure=False
    )


def _error_rules(dtype: str, device: str, quick: bool) -> Report:
    report = check_mask_error_rules(
        numpy_adapter(masks.nm_mask, device=device), raise_on_failure=False
    )
    magnitude = check_mask_error_rules(
        numpy_adapter(masks.magnitude_mask, device=device),
        function="magnitude_mask",
        raise_on_failure=False,
    )
    report.extend(magnitude)
    return report


register(Suite("nm_mask", (*MASK_DTYPES, "bool"), _nm_mask))
for _layout in ("linear", "channels", "flat"):
    register(
        Suite(
            f"magnitude_mask[{_layout}]",
            MASK_DTYPES,
            functools.partial(_magnitude_mask, _layout),
        )
    )
register(Suite("mask error rules", ("-",), _error_rules))


def _training(method: str, dtype: str, device: str, quick: bool) -> Report:
    decay = 0.25 if method == "srste" else 0.0
    report = Report(f"{method} training step")
    for layer in ("linear", "conv1x1"):
        impl = training_adapter(method, decay=decay, device=device, layer=layer)
        report.extend(
            check_sparse_training(
                impl, method=method, decay=decay, dtype=dtype, raise_on_failure=False
            )
        )
    return report


for _method in ("ste", "srste"):
    register(
        Suite(
            f"{_method} training step",
            ("float32", "float64"),
            functools.partial(_training, _method),
        )
    )


def _bimask_backward(layout: str, dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.bimask import check_bimask_backward_mask

    from . import bimask
    from .adapters import torch_dtype

    def impl(w, forward, permutation, n, m):
        weight = torch.from_numpy(w).to(device=device, dtype=torch_dtype(dtype))
        mask = bimask.backward_mask(
            weight,
            torch.from_numpy(forward).to(device),
            torch.from_numpy(permutation).to(device),
            n,
            m,
            layout=layout,
        )
        return mask.cpu().numpy()

    return check_bimask_backward_mask(
        impl, dtype=dtype, layout=layout, quick=quick, raise_on_failure=False
    )


def _bimask_scores(layout: str, dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.bimask import check_permutation_scores

    from . import bimask

    report = Report(f"bimask permutation scores[{layout}]")
    for criterion in ("kept", "eligible"):

        def impl(forward, permutations, n, m, criterion):
            scores = bimask.score_permutations(
                torch.from_numpy(forward).to(device),
                torch.from_numpy(permutations).to(device),
                n,
                m,
                criterion=criterion,
                layout=layout,
            )
            return scores.cpu().numpy()

        report.extend(
            check_permutation_scores(
                impl, criterion=criterion, layout=layout, quick=quick, raise_on_failure=False
            )
        )
    return report


def _bimask_training(dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.bimask import check_bimask_training

    from .layers import SparseConv2d, SparseLinear

    def impl(x, w, dy, permutation, n, m, conv=False):
        weight = torch.from_numpy(w).to(device)
        inputs = torch.from_numpy(x).to(device).requires_grad_(True)
        options = {"pattern": (n, m), "method": "bimask", "decay": 0.25, "dtype": weight.dtype}
        if conv:
            module = SparseConv2d(w.shape[1], w.shape[0], 1, bias=False, **options).to(device)
            with torch.no_grad():
                module.weight.copy_(weight[:, :, None, None])
        else:
            module = SparseLinear(w.shape[1], w.shape[0], bias=False, **options).to(device)
            with torch.no_grad():
                module.weight.copy_(weight)
        module.permutation.copy_(torch.from_numpy(permutation))
        y = module(inputs[:, :, None, None])[:, :, 0, 0] if conv else module(inputs)
        y.backward(torch.from_numpy(dy).to(device))
        grad_w = module.weight.grad.reshape(w.shape)
        return y.detach().cpu().numpy(), inputs.grad.cpu().numpy(), grad_w.cpu().numpy()

    report = check_bimask_training(impl, dtype=dtype, raise_on_failure=False)
    report.extend(
        check_bimask_training(
            functools.partial(impl, conv=True), dtype=dtype, raise_on_failure=False
        )
    )
    return report


def _register_bimask() -> None:
    try:
        import nmref.bimask  # noqa: F401
    except ImportError:  # Bi-Mask not in this build of nmref
        return
    for layout in ("linear", "channels"):
        register(
            Suite(
                f"bimask backward_mask[{layout}]",
                FLOAT_DTYPES,
                functools.partial(_bimask_backward, layout),
            )
        )
    register(
        Suite(
            "bimask permutation scores",
            ("-",),
            lambda dtype, device, quick: _bimask_scores("linear", dtype, device, quick),
        )
    )
    register(Suite("bimask training step", ("float32", "float64"), _bimask_training))


_register_bimask()


def _bame_scores(dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.bame import check_bame_block_scores

    from . import bame

    report = Report("bame block_scores")
    for swap_rule in ("single_swap", "reselect"):
        for regrow_init in ("zero", "stale"):

            def impl(w, mask, grad, candidates, n, m, rule=swap_rule, init=regrow_init):
                result = bame.block_scores(
                    torch.from_numpy(w).to(device),
                    torch.from_numpy(mask).to(device),
                    torch.from_numpy(grad).to(device),
                    torch.from_numpy(candidates).to(device),
                    n=n,
                    m=m,
                    swap_rule=rule,
                    regrow_init=init,
                    lookahead_step=0.5,
                    curvature=1.0,
                )
                fields = (result.reduction, result.proposed_mask, result.utility)
                return tuple(t.cpu().numpy() for t in fields)

            report.extend(
                check_bame_block_scores(
                    impl, swap_rule=swap_rule, regrow_init=regrow_init, raise_on_failure=False
                )
            )
    return report


def _bame_select(dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.bame import check_select_blocks

    from . import bame

    def impl(scores, candidates, budget):
        selected = bame.select_blocks(
            torch.from_numpy(scores).to(device), torch.from_numpy(candidates).to(device), budget
        )
        return selected.cpu().numpy()

    return check_select_blocks(impl, raise_on_failure=False)


def _bame_training(dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.bame import check_bame_training

    from .functions import BameLinearFunction

    def impl(x, w, mask, dy, positions):
        tensors = [torch.from_numpy(a).to(device) for a in (x, w, mask, dy, positions)]
        x_t, w_t, mask_t, dy_t, positions_t = tensors
        x_t.requires_grad_(True)
        w_t.requires_grad_(True)
        y = BameLinearFunction.apply(x_t, w_t, None, mask_t, positions_t)
        y.backward(dy_t)
        return tuple(t.detach().cpu().numpy() for t in (y, x_t.grad, w_t.grad))

    return check_bame_training(impl, dtype=dtype, raise_on_failure=False)


def _register_bame() -> None:
    try:
        import nmref.bame  # noqa: F401
    except ImportError:  # BAME not in this build of nmref
        return
    register(Suite("bame block_scores", ("float64",), _bame_scores))
    register(Suite("bame select_blocks", ("float64",), _bame_select))
    register(Suite("bame training step", ("float32", "float64"), _bame_training))


_register_bame()


def _transposable(method: str, dtype: str, device: str, quick: bool) -> Report:
    from nmref.testing.transposable import check_transposable_mask

    from . import transposable

    def impl(scores, n, m):
        tensor = torch.from_numpy(scores).to(device)
        if dtype == "bfloat16":
            tensor = tensor.to(torch.bfloat16)
        return transposable.transposable_mask(tensor, n, m, method=method).cpu().numpy()

    return check_transposable_mask(
        impl, method=method, dtype=dtype, quick=quick, raise_on_failure=False
    )


# Without nmref.transposable the kit can check validity only; the row name says so.
_TRANSPOSABLE_SUFFIX = "" if importlib.util.find_spec("nmref.transposable") else " (validity)"
for _method in ("exact", "greedy", "greedy-prune"):
    register(
        Suite(
            f"transposable_mask[{_method}]{_TRANSPOSABLE_SUFFIX}",
            ("float16", "bfloat16", "float32", "int8"),
            functools.partial(_transposable, _method),
        )
    )
