"""The argument checks of nmref: one function per rule, one message per rule.

Every public function of nmref refuses bad input through these, so that the same
mistake reads the same everywhere (``specs/conventions.md``: NaN is an error, dtypes
are never cast lossily, ``bool`` is not an integer). The twins in ``nmsim.torch``
call them too where a rule is about plain values rather than arrays.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "LAYOUTS",
    "NAN_HAS_NO_MAGNITUDE",
    "NAN_HAS_NO_RANK",
    "REMAINDERS",
    "as_float_array",
    "as_scores",
    "check_axis",
    "check_choice",
    "check_count",
    "check_finite_scores",
    "check_float_dtype",
    "check_integer",
    "check_layout",
    "check_no_nan",
    "check_nonnegative",
    "check_positive_integer",
    "check_real",
    "check_remainder",
    "check_tiled_matrix",
    "check_transposable_layout",
    "is_integer",
    "raise_nan",
]

#: The weight layouts of ``specs/conventions.md`` (C6), re-exported by :mod:`nmref.layouts`.
LAYOUTS: tuple[str, ...] = ("linear", "channels", "flat")
#: What :func:`nmref.masks.nm_mask` does with a grouped axis that is not a multiple of ``m``.
REMAINDERS: tuple[str, ...] = ("error", "pad")
#: Why a NaN is fatal, the end of :func:`raise_nan`'s message: for ranking scores...
NAN_HAS_NO_RANK = "NaN has no rank, so no mask can be chosen"
#: ...and for magnitude masks of a weight.
NAN_HAS_NO_MAGNITUDE = "NaN has no magnitude, so no mask can be chosen"


# ----------------------------------------------------------------------------
# Plain values: integers, reals, choices
# ----------------------------------------------------------------------------


def is_integer(value: object) -> bool:
    """Whether ``value`` is an integer (Python or NumPy); ``True``/``False`` are not."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_integer(value: object, name: str) -> int:
    """``value`` as an ``int``; ``TypeError`` if it is not an integer (:func:`is_integer`)."""
    if not is_integer(value):
        raise TypeError(f"{name}={value!r} must be an integer")
    return int(value)  # type: ignore[call-overload]


def check_count(value: object, name: str, *, minimum: int = 0) -> int:
    """``value`` as an ``int >= minimum``; anything else (a float too) is a ``ValueError``.

    For counts and sizes, whose callers have always answered a wrong type and a wrong
    value with the same ``ValueError``.
    """
    if not is_integer(value) or value < minimum:  # type: ignore[operator]
        wanted = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        raise ValueError(f"{name}={value!r} must be {wanted}")
    return int(value)  # type: ignore[call-overload]


def check_shape(shape: object, name: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ``int``; ``2.5`` or ``-1`` would be truncated or
    wrap around if passed on, so they are refused (``TypeError`` / ``ValueError``)."""
    if is_integer(shape):
        shape = (shape,)
    try:
        dims = tuple(shape)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name}={shape!r} must be a tuple of integers") from None
    for axis, size in enumerate(dims):
        if not is_integer(size):
            raise TypeError(f"{name}[{axis}]={size!r} must be an integer (in {name}={dims!r})")
        if size < 0:
            raise ValueError(f"{name}[{axis}]={size!r} must be >= 0 (in {name}={dims!r})")
    return tuple(int(size) for size in dims)


def check_permutation(permutation: object, size: int, name: str, *, entry: str) -> NDArray[np.intp]:
    """``permutation`` as an ``intp`` permutation of ``range(size)``, one ``entry`` each
    (``"output channel"``, ``"input channel"``); ``TypeError``/``ValueError`` naming it."""
    array = np.asarray(permutation)
    if size == 0 and array.shape == (0,):
        return np.zeros(0, dtype=np.intp)  # np.asarray([]) is float64
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype={array.dtype}")
    if array.shape != (size,):
        raise ValueError(
            f"{name} must have shape ({size},) (one entry per {entry}), got {array.shape}"
        )
    if not np.array_equal(np.sort(array), np.arange(size)):
        raise ValueError(f"{name} must be a permutation of range({size})")
    return array.astype(np.intp)


def check_positive_integer(value: object, name: str) -> int:
    """``value`` as an ``int >= 1``: ``TypeError`` for a non-integer, ``ValueError`` below 1."""
    if not is_integer(value):
        raise TypeError(f"{name}={value!r} must be a positive integer")
    if value < 1:  # type: ignore[operator]
        raise ValueError(f"{name}={value!r} must be a positive integer")
    return int(value)  # type: ignore[call-overload]


def check_real(value: object, name: str) -> float:
    """``value`` as a ``float``; ``TypeError`` unless it is a real number (not ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} must be a real number")
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64
        raise ValueError(f"{name}={value!r} is beyond the float64 range") from None


def check_nonnegative(value: object, name: str) -> float:
    """``value`` as a finite ``float >= 0`` (:func:`check_real`, then ``ValueError``)."""
    number = check_real(value, name)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{name}={value!r} must be finite and >= 0")
    return number


def check_choice(value: object, name: str, choices: Sequence[object]) -> int:
    """Index of ``value`` in ``choices``; ``ValueError`` naming them if it is not there."""
    if value not in choices:
        raise ValueError(f"{name}={value!r} must be one of {choices}")
    return list(choices).index(value)


# ----------------------------------------------------------------------------
# Arrays: dtypes, NaN and infinities
# ----------------------------------------------------------------------------


def refuse_masked(values: object, name: str) -> None:
    """``TypeError`` for a numpy masked array: ``np.asarray`` would drop its mask silently."""
    if isinstance(values, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a numpy masked array; its mask would be ignored. Pass "
            f"{name}.filled(value) with the value masked entries should have"
        )


def refuse_torch_surprises(values: object, name: str) -> None:
    """``TypeError`` for torch tensors NumPy cannot take as they are, naming the fix.

    nmref never imports torch; a CPU tensor converts through ``np.asarray``, but one that
    requires grad, lives on another device (``cuda``, ``meta``) or is bfloat16 would fail
    inside torch with torch's own words.
    """
    if not type(values).__module__.startswith("torch"):
        return
    if getattr(values, "requires_grad", False):
        raise TypeError(
            f"{name} is a torch tensor that requires grad: pass {name}.detach() (nmref "
            "computes masks, not gradients; nmsim.torch has the autograd path)"
        )
    device = getattr(values, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise TypeError(
            f"{name} is a torch tensor on device {device.type!r}: nmref works on host "
            f"arrays; pass {name}.cpu(), or use nmsim.torch on the device"
        )
    if str(getattr(values, "dtype", "")) == "torch.bfloat16":
        raise TypeError(
            f"{name} is a bfloat16 torch tensor, which NumPy has no dtype for: pass "
            f"{name}.float() (exact), or use nmsim.torch"
        )


def as_scores(scores: ArrayLike, name: str = "scores") -> NDArray:
    """``scores`` as an ndarray of a dtype the rules allow (C5), without lossy casts."""
    refuse_masked(scores, name)
    refuse_torch_surprises(scores, name)
    array = np.asarray(scores)
    kind = array.dtype.kind
    if kind not in "biuf" or (kind == "f" and array.dtype.itemsize > 8):
        raise TypeError(
            f"{name} must have a bool, integer or float16/32/64 dtype, got dtype={array.dtype}"
        )
    return array


def check_float_dtype(array: NDArray, name: str) -> None:
    """``TypeError`` unless ``array`` is float16/32/64 (wider floats would be rounded)."""
    if array.dtype.kind != "f" or array.dtype.itemsize > 8:
        raise TypeError(f"{name} must be a float16/32/64 array, got dtype={array.dtype}")


def as_float_array(values: ArrayLike, name: str, why: str | None = None) -> NDArray[np.floating]:
    """``values`` as a float16/32/64 ndarray without NaN (:func:`check_no_nan`)."""
    refuse_masked(values, name)
    refuse_torch_surprises(values, name)
    array = np.asarray(values)
    check_float_dtype(array, name)
    check_no_nan(array, name, why)
    return array


def raise_nan(shape: tuple[int, ...], flat_index: int, name: str, why: str | None = None) -> None:
    """Raise the ``ValueError`` for a NaN at ``flat_index``, with the reason it is fatal."""
    index = tuple(int(i) for i in np.unravel_index(flat_index, shape))
    reason = f"; {why}" if why else ""
    raise ValueError(f"{name} contains NaN (first at index {index}){reason}")


def check_no_nan(array: NDArray, name: str, why: str | None = None) -> None:
    """:func:`raise_nan` for the first NaN of ``array``, if it holds one."""
    if array.dtype.kind == "f" and np.isnan(array).any():
        raise_nan(array.shape, int(np.flatnonzero(np.isnan(array))[0]), name, why)


def check_finite_scores(array: NDArray, name: str) -> None:
    """``ValueError`` naming the first NaN or infinity: a transposable objective is a sum."""
    if array.dtype.kind != "f":
        return
    finite = np.isfinite(array)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        value = array[index]
        what = "NaN" if np.isnan(value) else "an infinity"
        raise ValueError(
            f"{name} contains {what} at index {index}; transposable masks need finite "
            "scores (the objective is a sum)"
        )


# ----------------------------------------------------------------------------
# Axes, grouping and layouts
# ----------------------------------------------------------------------------


def check_axis(axis: object, ndim: int) -> int:
    """``axis`` as a non-negative axis of an ``ndim``-dimensional array."""
    checked = check_integer(axis, "axis")
    if not -ndim <= checked < ndim:
        raise ValueError(f"axis={axis} is out of bounds for an array of ndim={ndim}")
    return checked % ndim


def check_remainder(length: int, m: int, axis: int, remainder: str) -> None:
    """The remainder policy, and a grouped axis of ``length`` that fits groups of ``m``."""
    check_choice(remainder, "remainder", REMAINDERS)
    if remainder == "error" and length % m != 0:
        raise ValueError(
            f"length {length} of the grouped axis (axis={axis}) must be a multiple of "
            f"m={m} (or choose the padding policy remainder='pad')"
        )


def check_layout(layout: str, ndim: int) -> None:
    """A known layout (C6) that fits a weight of ``ndim`` dimensions."""
    check_choice(layout, "layout", LAYOUTS)
    if ndim < 2:
        raise ValueError(f"weight must have ndim >= 2, got ndim={ndim}")
    if layout == "linear" and ndim != 2:
        raise ValueError(
            f"layout='linear' needs a 2-D [out, in] weight, got ndim={ndim}; "
            "use layout='channels' or 'flat' for convolution weights"
        )


def check_tiled_matrix(array: NDArray, m: int, name: str) -> None:
    """A 2-D matrix made of whole aligned ``m x m`` tiles (transposable masks)."""
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (rows, columns), got ndim={array.ndim}; "
            "for Linear/Conv weights use transposable_weight_mask"
        )
    rows, columns = array.shape
    if rows % m or columns % m:
        raise ValueError(
            f"{name}.shape={array.shape}: both dimensions must be multiples of m={m} "
            f"(a transposable mask is made of aligned {m}x{m} tiles)"
        )


def check_transposable_layout(shape: tuple[int, ...], m: int, layout: str) -> None:
    """The ``"channels"`` rule of transposable masks: ``out`` is a multiple of ``m``.

    The ``"channels"`` matrix stacks kernel taps; a tile that straddled two taps would
    not be N:M in ``W^T``.
    """
    if layout == "channels" and len(shape) > 2 and shape[0] % m:
        raise ValueError(
            f"weight.shape[0]={shape[0]} (out channels) must be a multiple of m={m} for "
            "layout='channels': a transposable tile spans m output channels at one kernel tap"
        )
