"""Weight layouts: mapping a weight tensor to its ``[rows, reduction]`` matrix and back.

N:M groups always run along the **reduction** axis of the GEMM the weight takes
part in (``specs/conventions.md``, rule C3). Every layout here maps a weight to a
2-D matrix whose last axis is that reduction axis, so that groups of ``m``
consecutive entries of one matrix row are exactly the layout's groups. Groups
never straddle rows.

Layouts
-------
``"linear"``
    A Linear weight ``[out, in]`` is its own matrix; groups run along ``in``.
``"channels"`` (default for ``ndim > 2``)
    A convolution weight ``[out, in, *kernel]`` is permuted to
    ``[*kernel, out, in]`` and reshaped to ``(prod(kernel) * out, in)``. Groups
    are ``m`` consecutive input channels at one ``(out, kernel position)``: the
    NVIDIA ASP and SR-STE ``Sparse_NHWC`` convention. Rows are ordered kernel
    position first, then output channel, as in ASP, so ``m`` consecutive rows
    are ``m`` consecutive output channels at one kernel position -- the
    direction along which the input-gradient GEMM reduces (used by
    transposable masks).
``"flat"``
    ``[out, in, *kernel]`` is reshaped row-major to ``(out, in * prod(kernel))``;
    groups run along the flattened ``(in, *kernel)`` axis of one output row:
    the Bi-Mask code and original SR-STE ``Sparse`` convention, except that
    here a row length that is not a multiple of ``m`` is an error instead of
    groups silently crossing into the next output channel.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import LAYOUTS, check_integer, check_layout, check_shape

__all__ = ["LAYOUTS", "Layout", "default_layout", "from_reduction_matrix", "to_reduction_matrix"]

Layout = Literal["linear", "channels", "flat"]


def default_layout(ndim: int) -> Layout:
    """Return the default layout for a weight of ``ndim`` dimensions.

    ``"linear"`` for 2-D weights, ``"channels"`` for convolution weights (3-D and up).

    Raises
    ------
    ValueError
        If ``ndim < 2``.
    """
    ndim = check_integer(ndim, "ndim")
    if ndim < 2:
        raise ValueError(f"weight must have ndim >= 2 to have a layout, got ndim={ndim}")
    return "linear" if ndim == 2 else "channels"


def to_reduction_matrix(weight: ArrayLike, layout: Layout | None = None) -> NDArray:
    """Map a weight to the 2-D ``[rows, reduction]`` matrix of its layout.

    Parameters
    ----------
    weight : array_like, shape (out, in) or (out, in, *kernel)
        Linear or convolution weight (PyTorch's ``[out, in, kh, kw]`` order).
    layout : {"linear", "channels", "flat"}, optional
        Defaults to :func:`default_layout` of ``weight.ndim``.

    Returns
    -------
    ndarray, shape (rows, reduction)
        A new C-contiguous array (or a view when no permutation is needed).

    Raises
    ------
    ValueError
        If the layout is unknown or does not fit ``weight.ndim``.

    Notes
    -----
    Complexity: O(size) for the copy a permutation needs.

    Examples
    --------
    >>> w = np.arange(2 * 4 * 1 * 2).reshape(2, 4, 1, 2)
    >>> to_reduction_matrix(w, "channels")[0]    # out=0, kernel=(0, 0): 4 input channels
    array([0, 2, 4, 6])
    >>> to_reduction_matrix(w, "flat")[0]        # out=0: (in, kh, kw) flattened
    array([0, 1, 2, 3, 4, 5, 6, 7])
    """
    array = np.asarray(weight)
    if layout is None:
        layout = default_layout(array.ndim)
    check_layout(layout, array.ndim)
    if layout == "linear":
        return array
    # Explicit shapes (never -1): a zero-size dimension makes -1 ambiguous.
    shape = to_reduction_shape(array.shape, layout)
    if layout == "flat":
        return array.reshape(shape)
    # channels: [out, in, *kernel] -> [*kernel, out, in]
    kernel_axes = tuple(range(2, array.ndim))
    permuted = np.transpose(array, (*kernel_axes, 0, 1))
    return np.ascontiguousarray(permuted).reshape(shape)


def from_reduction_matrix(
    matrix: ArrayLike, shape: tuple[int, ...], layout: Layout | None = None
) -> NDArray:
    """Inverse of :func:`to_reduction_matrix`: map a matrix back to a weight's shape.

    Parameters
    ----------
    matrix : array_like, shape (rows, reduction)
    shape : tuple of int
        The original weight shape.
    layout : {"linear", "channels", "flat"}, optional
        The layout used in the forward mapping; defaults to :func:`default_layout`.

    Returns
    -------
    ndarray of the given shape

    Raises
    ------
    ValueError
        If the layout is unknown or the matrix does not have the size the
        layout implies for ``shape``.
    """
    array = np.asarray(matrix)
    shape = check_shape(shape, "shape")
    if layout is None:
        layout = default_layout(len(shape))
    check_layout(layout, len(shape))
    expected = to_reduction_shape(shape, layout)
    if array.shape != expected:
        raise ValueError(
            f"matrix shape {array.shape} does not match layout={layout!r} of weight shape "
            f"{shape}: expected {expected}"
        )
    if layout == "linear":
        return array
    if layout == "flat":
        return array.reshape(shape)
    kernel = shape[2:]
    permuted = array.reshape(*kernel, shape[0], shape[1])
    ndim = len(shape)
    # [*kernel, out, in] -> [out, in, *kernel]
    inverse = (ndim - 2, ndim - 1, *range(ndim - 2))
    return np.ascontiguousarray(np.transpose(permuted, inverse))


def to_reduction_shape(shape: tuple[int, ...], layout: Layout | None = None) -> tuple[int, int]:
    """Shape of the ``[rows, reduction]`` matrix of a weight of ``shape``.

    Examples
    --------
    >>> to_reduction_shape((64, 32, 3, 3), "channels")
    (576, 32)
    >>> to_reduction_shape((64, 32, 3, 3), "flat")
    (64, 288)
    """
    shape = check_shape(shape, "shape")
    if layout is None:
        layout = default_layout(len(shape))
    check_layout(layout, len(shape))
    if layout == "linear":
        return (shape[0], shape[1])
    kernel_size = int(np.prod(shape[2:], dtype=np.int64))
    if layout == "flat":
        return (shape[0], shape[1] * kernel_size)
    return (kernel_size * shape[0], shape[1])
