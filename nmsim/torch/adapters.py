"""Adapters that let the NumPy-based conformance kit call torch implementations.

:mod:`nmref.testing` passes NumPy arrays and never imports torch; these wrap a
torch function so that it receives a tensor on the chosen device and dtype and
returns a NumPy mask. A ``"bfloat16"`` case holds float32 values exactly
representable in bfloat16, so the cast here is exact (rule C5).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

__all__ = ["TORCH_DTYPES", "numpy_adapter", "torch_dtype", "training_adapter"]

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def torch_dtype(dtype_name: str) -> torch.dtype:
    """The torch dtype for a kit dtype name (``"bfloat16"`` -> ``torch.bfloat16``)."""
    try:
        return TORCH_DTYPES[dtype_name]
    except KeyError:
        raise ValueError(
            f"dtype_name={dtype_name!r} must be one of {tuple(TORCH_DTYPES)}"
        ) from None


def numpy_adapter(
    function: Callable[..., torch.Tensor],
    *,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
    **keywords: object,
) -> Callable[..., np.ndarray]:
    """Wrap ``function(tensor, n, m, **keywords)`` to take and return NumPy arrays.

    Parameters
    ----------
    function : callable
        A torch implementation, e.g. :func:`nmsim.torch.nm_mask`.
    device : str or torch.device, default "cpu"
        Where the input tensor is placed.
    dtype : str or torch.dtype, optional
        Cast the input to this dtype first (``"bfloat16"`` for bfloat16 cases);
        by default the NumPy dtype's torch twin.
    **keywords
        Passed on to ``function`` (e.g. ``layout="channels"``).

    Returns
    -------
    callable
        ``adapter(array, n, m) -> ndarray`` (the result moved to the CPU).
    """
    target = torch_dtype(dtype) if isinstance(dtype, str) else dtype

    def adapter(array: np.ndarray, n: int, m: int) -> np.ndarray:
        tensor = torch.from_numpy(np.ascontiguousarray(array)).to(device)
        if target is not None:
            tensor = tensor.to(target)
        return function(tensor, n, m, **keywords).cpu().numpy()

    adapter.__name__ = f"{getattr(function, '__name__', 'function')}[{device}]"
    return adapter


def training_adapter(
    method: str, *, decay: float = 0.0, device: str | torch.device = "cpu", layer: str = "linear"
) -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Wrap a sparse layer as ``impl(x, w, dy, n, m) -> (y, dx, dw)`` for the kit.

    Builds a :class:`~nmsim.torch.SparseLinear` (``layer="linear"``) or a 1x1
    :class:`~nmsim.torch.SparseConv2d` (``layer="conv1x1"``, the same GEMM
    through the convolution path) holding ``w``, runs one forward with ``x``
    and one backward with ``dy``, and returns the three GEMM results.
    """
    from .layers import SparseConv2d, SparseLinear

    def adapter(x, w, dy, n, m):
        weight = torch.from_numpy(np.ascontiguousarray(w)).to(device)
        inputs = torch.from_numpy(np.ascontiguousarray(x)).to(device).requires_grad_(True)
        grad_out = torch.from_numpy(np.ascontiguousarray(dy)).to(device)
        options = {"pattern": (n, m), "method": method, "decay": decay}
        if layer == "linear":
            module = SparseLinear(w.shape[1], w.shape[0], bias=False, dtype=weight.dtype, **options)
            with torch.no_grad():
                module.weight.copy_(weight)
            y = module(inputs)
            y.backward(grad_out)
        else:
            module = SparseConv2d(
                w.shape[1], w.shape[0], 1, bias=False, dtype=weight.dtype, **options
            )
            with torch.no_grad():
                module.weight.copy_(weight[:, :, None, None])
            y = module(inputs[:, :, None, None])[:, :, 0, 0]
            y.backward(grad_out)
        grad_w = module.weight.grad.reshape(w.shape)
        return (y.detach().cpu().numpy(), inputs.grad.cpu().numpy(), grad_w.cpu().numpy())

    adapter.__name__ = f"{method}-{layer}[{device}]"
    return adapter
