"""nmref: exact reference algorithms for N:M structured sparsity.

Conventions (``specs/conventions.md``): ``n`` entries are **kept** in every
group of ``m`` consecutive entries along the reduction axis; ties go to the
lower index; NaN is an error. ``import nmref`` neither imports torch nor
compiles Numba kernels; kernels compile on first use.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# first, before anything heavy: a Ctrl-C while the command starts is one line, exit 130
from nmref import _startup  # noqa: F401
from nmref._deprecation import install_moved_modules
from nmref.adaprune import adaprune_layer, relative_output_error
from nmref.bame import (
    BameConfig,
    BameState,
    block_scores,
    evolve_mask,
    evolve_mask_reference,
    select_blocks,
)
from nmref.divergence import (
    flip_rate,
    mask_flips,
    mask_transitions,
    sparse_architecture_divergence,
)
from nmref.diversity import count_transposable_patterns, mask_diversity
from nmref.layouts import (
    LAYOUTS,
    default_layout,
    from_reduction_matrix,
    to_reduction_matrix,
    to_reduction_shape,
)
from nmref.masks import (
    is_nm,
    magnitude_mask,
    nm_mask,
    nm_mask_reference,
    nm_violations,
    to_magnitudes,
)
from nmref.patterns import Pattern, check_pattern, parse_pattern
from nmref.permutation import (
    ChannelPermutation,
    count_column_partitions,
    permutation_efficacy,
    permutation_objective,
    search_channel_permutation,
)
from nmref.srste import sgd_step, srste_gradient, srste_step, srste_train
from nmref.transposable import (
    is_transposable,
    optimality_gap,
    transposable_certificate,
    transposable_mask,
    transposable_mask_reference,
    transposable_optimum,
    transposable_patterns,
    transposable_weight_mask,
    verify_certificate,
)

# Old public paths of moved modules: they import, with a DeprecationWarning, for one release.
install_moved_modules(
    {
        "nmref.flow": "nmref.transposable.flow",
        # Files, checkpoints and the command line moved to rooms of their own (issue 38).
        "nmref.checkpoints": "nmref.io.checkpoints",
        "nmref.sharded": "nmref.io.sharded",
        "nmref.distributed": "nmref.io.distributed",
        "nmref._output": "nmref.io.output",
        "nmref._safetensors_writer": "nmref.io.safetensors_writer",
        "nmref._progress": "nmref.io.progress",
        "nmref._compile_notice": "nmref.io.compile_notice",
        "nmref._cli_messages": "nmref.cli.messages",
        "nmref.audit.command": "nmref.cli.audit",
        # BAME and Bi-Mask became packages, one concept per module (issue 38).
        "nmref.bame_training": "nmref.bame.training",
        "nmref._bimask_kernels": "nmref.bimask._kernels",
    }
)


def __getattr__(name: str) -> object:
    # ``nmref.audit`` (the certified audit of transposable approximations, specs/audit.md)
    # loads on first use: ``import nmref`` stays as light as it was.
    if name == "audit":
        import importlib

        return importlib.import_module("nmref.audit")
    raise AttributeError(f"module 'nmref' has no attribute {name!r}")


def __dir__() -> list[str]:
    # dir(nmref) and tab completion: the API and the subpackages, not the names this file
    # imports to build them (annotations, PackageNotFoundError, version, ...)
    import types

    packages = [
        name
        for name, value in globals().items()
        if isinstance(value, types.ModuleType) and not name.startswith("_")
    ]
    return sorted({*__all__, "audit", *packages})


try:
    __version__ = version("nm-sparsity-ref")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "LAYOUTS",
    "BameConfig",
    "BameState",
    "ChannelPermutation",
    "Pattern",
    "__version__",
    "adaprune_layer",
    "block_scores",
    "check_pattern",
    "count_column_partitions",
    "count_transposable_patterns",
    "default_layout",
    "evolve_mask",
    "evolve_mask_reference",
    "flip_rate",
    "from_reduction_matrix",
    "is_nm",
    "is_transposable",
    "magnitude_mask",
    "mask_diversity",
    "mask_flips",
    "mask_transitions",
    "nm_mask",
    "nm_mask_reference",
    "nm_violations",
    "optimality_gap",
    "parse_pattern",
    "permutation_efficacy",
    "permutation_objective",
    "relative_output_error",
    "search_channel_permutation",
    "select_blocks",
    "sgd_step",
    "sparse_architecture_divergence",
    "srste_gradient",
    "srste_step",
    "srste_train",
    "to_magnitudes",
    "to_reduction_matrix",
    "to_reduction_shape",
    "transposable_certificate",
    "transposable_mask",
    "transposable_mask_reference",
    "transposable_optimum",
    "transposable_patterns",
    "transposable_weight_mask",
    "verify_certificate",
]
