"""Host side of the GPU backend of :func:`nmref.transposable.transposable_mask`.

``backend="cuda"`` runs :mod:`~nmref.transposable._cuda_kernels` (Numba CUDA, one thread
per tile) and nothing else on the device. This module checks the inputs with the CPU
path's rules (the same errors), turns the scores into the IEEE bits the kernel decodes (a
NumPy array is copied to the device; an object with ``__cuda_array_interface__``, such
as a torch CUDA tensor, is read where it lies), launches the kernel, and solves on the
host, with the CPU backend, the tiles the kernel hands back: tiles whose units need more
than ``max_unit_bits(m)`` bits (spec T5: most float64 tiles), integers beyond ``2**53``,
and tiles whose potentials would leave the kernel's guard. The mask is the same, bit for
bit (``specs/transposable.md``, T10).

``numba.cuda`` is imported on first use only, so ``import nmref`` never loads it.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from nmref._validation import as_scores, check_choice, check_tiled_matrix
from nmref.patterns import Pattern
from nmref.transposable._driver import exact_mask, kernel_bits, solve_at_most
from nmref.transposable._inputs import prepare
from nmref.transposable._kernel_contract import SOLVED, max_unit_bits

__all__ = ["BACKENDS", "Backend", "check_backend", "cuda_mask", "unavailable_reason"]

#: ``"cpu"``: the Numba CPU kernels (the default); ``"cuda"``: the CUDA kernel.
Backend = Literal["cpu", "cuda"]
BACKENDS: tuple[str, ...] = ("cpu", "cuda")

# Largest m of the kernel: rows and columns are 64-bit sets (_cuda_kernels.MAX_M, which
# imports numba.cuda; this module must not).
MAX_M = 64


def check_backend(backend: str) -> None:
    """``ValueError`` unless ``backend`` is one of :data:`BACKENDS`."""
    check_choice(backend, "backend", BACKENDS)


@functools.cache
def unavailable_reason() -> str | None:
    """Why Numba cannot run CUDA kernels here, in a few words; None when it can.

    Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) can: it runs the kernels on the
    CPU, slowly, which is how the tests run without a GPU.
    """
    try:
        from numba import cuda
        from numba.core import config
    except Exception as error:  # a broken numba-cuda install: say so in one line
        return f"numba.cuda cannot be imported ({type(error).__name__}: {error})"
    if config.ENABLE_CUDASIM:
        return None
    if not cuda.is_available():
        return "no CUDA GPU or driver is visible to Numba (numba.cuda.is_available() is False)"
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
    except ImportError:
        pass  # another layout of the CUDA target: compiling will tell
    except Exception:
        return (
            "Numba's CUDA target finds no libNVVM to compile kernels with (install the "
            "`cuda` extra, pip install 'nm-sparsity-ref[cuda]', or a CUDA toolkit)"
        )
    return None


def cuda_mask(
    scores: Any, pattern: Pattern, *, fill: str, parallel: bool, name: str = "scores"
) -> Any:
    """The exact transposable mask of ``scores`` by the CUDA kernel (``method="exact"``).

    Returns a NumPy bool array for host input, and a Numba device array (it has
    ``__cuda_array_interface__``) for device input. ``parallel`` applies to the tiles
    solved on the host. Errors: the CPU path's for bad scores (the first NaN or infinity
    named as there), ``ValueError`` for ``m > 64``, ``RuntimeError`` (one line) where
    Numba cannot run CUDA kernels.
    """
    if pattern.m > MAX_M:
        raise ValueError(
            f"backend='cuda' needs m <= {MAX_M} (rows and columns of a tile are 64-bit sets), "
            f"got m={pattern.m}; use backend='cpu'"
        )
    interface = _cuda_array_interface(scores, name)
    if interface is None:
        # A host array: the CPU path's checks (dtype, 2-D, whole tiles); the kernel sees NaN.
        array, _ = prepare(scores, pattern.n, pattern.m, name, check_finite=False)
        _require_cuda()
        return _host_input(array, pattern, fill, parallel, name)
    _require_cuda()
    device = _device_array(scores, interface)
    as_scores(np.zeros(0, dtype=device.dtype), name)  # the dtype rule of the CPU path
    check_tiled_matrix(device, pattern.m, name)
    return _device_input(device, pattern, fill, parallel, name)


def _require_cuda() -> None:
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(
            f"backend='cuda' needs a CUDA GPU that Numba can use: {reason}; backend='cpu' "
            "gives the same mask"
        )


def _cuda_array_interface(scores: Any, name: str) -> dict | None:
    """``scores.__cuda_array_interface__``, or None for host data."""
    try:
        return scores.__cuda_array_interface__
    except AttributeError:
        return None
    except RuntimeError as error:  # torch: a tensor that requires grad
        raise TypeError(f"{name} cannot be read on the device: {error}") from None


class _HostView:
    """A CUDA array interface read as a host array (the simulator's "device" is host memory)."""

    def __init__(self, interface: dict) -> None:
        self.__array_interface__ = {
            "shape": tuple(interface["shape"]),
            "typestr": interface["typestr"],
            "data": interface["data"],
            "strides": interface.get("strides"),
            "version": 3,
        }


def _device_array(scores: Any, interface: dict) -> Any:
    """``scores`` as a Numba device array, without a copy (in the simulator: a copy)."""
    from numba import cuda

    if hasattr(cuda, "as_cuda_array"):
        return cuda.as_cuda_array(scores)
    return cuda.to_device(np.asarray(_HostView(interface)))


def _host_input(array: NDArray, pattern: Pattern, fill: str, parallel: bool, name: str):
    from numba import cuda

    m = pattern.m
    mask = np.zeros(array.shape, dtype=bool)
    tiles = (array.shape[0] // m) * (array.shape[1] // m)
    prepared = kernel_bits(array) if tiles else None
    if prepared is None:
        # Nothing to solve, or integers beyond 2**53: the host path (as on the CPU backend).
        return _host_tiles(array, pattern, fill, parallel) if tiles else mask
    bits, fraction_bits = prepared
    device_mask, status, handed_back, not_finite = _launch(
        cuda.to_device(np.ascontiguousarray(bits)), fraction_bits, pattern, fill
    )
    if not_finite:
        _raise_not_finite(array, name)
    device_mask.copy_to_host(mask)
    if handed_back:
        tile_rows, tile_columns = np.divmod(
            np.flatnonzero(status.copy_to_host() != SOLVED), array.shape[1] // m
        )
        blocks = _blocks_view(array, m)[tile_rows, :, tile_columns, :]
        kept = _host_tiles(blocks.reshape(-1, m), pattern, fill, parallel)
        _blocks_view(mask, m)[tile_rows, :, tile_columns, :] = kept.reshape(-1, m, m)
    return mask


def _device_input(device: Any, pattern: Pattern, fill: str, parallel: bool, name: str):
    from numba import cuda

    from nmref.transposable import _cuda_kernels as kernels

    m = pattern.m
    rows, columns = device.shape
    tiles = (rows // m) * (columns // m)
    if not tiles:
        return cuda.device_array((rows, columns), dtype=np.bool_)
    prepared = _device_bits(device)
    if prepared is None:
        # Integers beyond 2**53: the host path for every tile, as on the CPU backend.
        mask = _host_tiles(device.copy_to_host(), pattern, fill, parallel)
        return cuda.to_device(mask)
    bits, fraction_bits = prepared
    mask, status, handed_back, not_finite = _launch(bits, fraction_bits, pattern, fill)
    if not_finite:
        _raise_not_finite(device.copy_to_host(), name)
    if handed_back:
        wide = np.flatnonzero(status.copy_to_host() != SOLVED).astype(np.int64)
        device_wide = cuda.to_device(wide)
        gathered = cuda.device_array((len(wide) * m, m), dtype=device.dtype)
        blocks = _blocks(gathered.size)
        kernels.gather_tiles[blocks, kernels.THREADS_PER_BLOCK](device, device_wide, m, gathered)
        kept = _host_tiles(gathered.copy_to_host(), pattern, fill, parallel)
        kernels.scatter_tiles[blocks, kernels.THREADS_PER_BLOCK](
            cuda.to_device(kept), device_wide, m, mask
        )
        cuda.synchronize()
    return mask


def _device_bits(device: Any) -> tuple[Any, int] | None:
    """The IEEE bits of device scores, by :func:`~nmref.transposable._driver.kernel_bits`'s
    rule: float32 and float64 as they are; float16, bool and integers of up to 2 bytes
    converted to float32 on the device, wider integers to float64 (None if one is beyond
    ``2**53``, where only Python ints are exact)."""
    from numba import cuda

    from nmref.transposable import _cuda_kernels as kernels

    if device.dtype == np.float32:
        return device.view(np.uint32), 23
    if device.dtype == np.float64:
        return device.view(np.uint64), 52
    # kernel_bits owns the rule; an empty array of the dtype says which float holds it.
    target = np.float32 if kernel_bits(np.zeros(0, dtype=device.dtype))[1] == 23 else np.float64
    blocks = _blocks(device.size)
    if device.dtype.kind in "iu" and device.dtype.itemsize >= 8:
        outside = cuda.to_device(np.zeros(1, dtype=np.int64))
        low = device.dtype.type(0 if device.dtype.kind == "u" else -(2**53))
        high = device.dtype.type(2**53)
        kernels.count_outside[blocks, kernels.THREADS_PER_BLOCK](device, low, high, outside)
        if outside.copy_to_host()[0]:
            return None
    converted = cuda.device_array(device.shape, dtype=target)
    kernels.convert[blocks, kernels.THREADS_PER_BLOCK](device, converted)
    return converted.view(np.uint32 if target == np.float32 else np.uint64), (
        23 if target == np.float32 else 52
    )


def _launch(bits: Any, fraction_bits: int, pattern: Pattern, fill: str):
    """Run the tile kernel: ``(device mask, device status, handed back, not finite)``."""
    from numba import cuda

    from nmref.transposable import _cuda_kernels as kernels

    n, m = pattern
    rows, columns = bits.shape
    tiles = (rows // m) * (columns // m)
    mask = cuda.device_array((rows, columns), dtype=np.bool_)
    status = cuda.device_array(tiles, dtype=np.int8)
    counts = cuda.to_device(np.zeros(2, dtype=np.int64))
    kernel = kernels.tile_kernel(m)
    kernel[_blocks(tiles), kernels.THREADS_PER_BLOCK](
        bits, fraction_bits, m, n, max_unit_bits(m), fill == "at_most", mask, status, counts
    )
    handed_back, not_finite = (int(x) for x in counts.copy_to_host())
    return mask, status, handed_back, not_finite


def _blocks(threads: int) -> int:
    from nmref.transposable._cuda_kernels import THREADS_PER_BLOCK

    return max(1, math.ceil(threads / THREADS_PER_BLOCK))


def _blocks_view(array: NDArray, m: int) -> NDArray:
    """``array`` as ``(tile rows, m, tile columns, m)``: ``[a, :, b, :]`` is tile ``(a, b)``
    (a view of a contiguous array, so that assigning tiles writes ``array``)."""
    rows, columns = array.shape
    return array.reshape(rows // m, m, columns // m, m)


def _host_tiles(array: NDArray, pattern: Pattern, fill: str, parallel: bool) -> NDArray:
    """The CPU backend's mask of ``array`` (finite scores: the tiles the kernel handed back)."""
    if fill == "at_most":
        return solve_at_most(array, pattern, parallel=parallel).mask
    return exact_mask(array, pattern, method="exact", parallel=parallel)


def _raise_not_finite(array: NDArray, name: str) -> None:
    """The CPU path's error for the first NaN or infinity of ``array``."""
    from nmref._validation import check_finite_scores

    check_finite_scores(np.asarray(array), name)
    raise AssertionError("the kernel saw NaN or an infinity that the host does not")
