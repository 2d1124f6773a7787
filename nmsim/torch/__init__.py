"""nmsim.torch: the torch path, on any device, equal to nmref bit for bit.

Importing this subpackage imports torch; ``import nmsim`` does not. Every
function here returns exactly what its nmref twin returns on the same input
(for bfloat16, on the exact float32 upcast); ``nmsim verify`` and the
conformance kit :mod:`nmref.testing` check it.
"""

from __future__ import annotations

from nmref._deprecation import install_moved_modules

# The rest of what nmsim.torch.training held, so that its old path (an alias of this
# package) still finds every name it had; ``__all__`` stays what it was.
from .functions import BAME_GRADIENT_MODES as BAME_GRADIENT_MODES
from .functions import LAYER_METHODS as LAYER_METHODS
from .functions import (
    METHODS,
    SRSTE_DEFAULT_DECAY,
    BameConv2dFunction,
    BameLinearFunction,
    MaskedWeight,
    sparse_weight,
    srste_gradient,
)
from .functions import BiMaskConv2dFunction as BiMaskConv2dFunction
from .functions import BiMaskLinearFunction as BiMaskLinearFunction
from .functions import GivenMaskWeight as GivenMaskWeight
from .functions import gathered_weight_gradient as gathered_weight_gradient
from .functions import transposable_weight_mask as transposable_weight_mask
from .layers import SparseConv2d, SparseLinear
from .layouts import from_reduction_matrix, to_reduction_matrix
from .masks import SUPPORTED_DTYPES, is_nm, magnitude_mask, nm_mask, to_magnitude_keys
from .model import SparsifyResult, refresh_masks, sparse_layers, sparsify
from .schedule import MethodSchedule
from .steps import step_layers

# training.py was split by concern (functions, layers, model); its names are all here.
install_moved_modules({"nmsim.torch.training": "nmsim.torch"})


def golden_implementation(vector, device: str = "cpu"):
    """The torch implementation (as a NumPy callable) for a golden vector, or None.

    Used by ``nmsim verify`` and the golden-vector tests: picks the function
    named by ``vector.function`` and runs it in ``vector.dtype`` on ``device``.
    """
    from nmref.testing.golden import GoldenVector

    from .adapters import numpy_adapter

    if not isinstance(vector, GoldenVector):
        raise TypeError(
            f"vector must be a nmref.testing.golden.GoldenVector (see load_vectors), "
            f"got {type(vector).__name__}"
        )
    if vector.function == "nm_mask":
        return numpy_adapter(nm_mask, device=device, dtype=vector.dtype)
    if vector.function == "magnitude_mask":
        return numpy_adapter(
            magnitude_mask, device=device, dtype=vector.dtype, layout=vector.layout
        )
    if vector.function == "bimask.backward_mask":
        import torch

        from . import bimask
        from .adapters import torch_dtype

        def backward(weights, n, m):
            weight = torch.from_numpy(weights).to(device=device, dtype=torch_dtype(vector.dtype))
            forward = magnitude_mask(weight, n, m, layout=vector.layout)
            permutation = torch.from_numpy(vector.extras["permutation"]).to(device)
            mask = bimask.backward_mask(weight, forward, permutation, n, m, layout=vector.layout)
            return mask.cpu().numpy()

        return backward
    if vector.function.startswith("transposable_mask["):
        from nmref.testing.golden import transposable_function

        from . import transposable

        method, fill = transposable_function(vector.function)
        return numpy_adapter(
            transposable.transposable_mask,
            device=device,
            dtype=vector.dtype,
            method=method,
            fill=fill,
        )
    return None


__all__ = [
    "METHODS",
    "SRSTE_DEFAULT_DECAY",
    "SUPPORTED_DTYPES",
    "BameConv2dFunction",
    "BameLinearFunction",
    "MaskedWeight",
    "MethodSchedule",
    "SparseConv2d",
    "SparseLinear",
    "SparsifyResult",
    "from_reduction_matrix",
    "golden_implementation",
    "is_nm",
    "magnitude_mask",
    "nm_mask",
    "refresh_masks",
    "sparse_layers",
    "sparse_weight",
    "sparsify",
    "srste_gradient",
    "step_layers",
    "to_magnitude_keys",
    "to_reduction_matrix",
]
