"""Deterministic conformance cases: the inputs every implementation is checked on.

A :class:`Case` is one input (a NumPy array), a pattern, and the dtype the
implementation under test should run in. bfloat16 has no NumPy dtype, so a
``"bfloat16"`` case stores float32 values that are exactly representable in
bfloat16; the reference answer is the one for that float32 array (conventions
rule C5), and an adapter casts it to bfloat16 (exactly) before calling the
implementation.

The families of inputs (``KINDS``) are the ones where implementations are known
to disagree: ties (``torch.topk`` vs a stable sort differ on 44.7% of tie-heavy
rows), signed zeros, infinities, integer extremes, and plain random values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from nmref._validation import check_choice, check_count

__all__ = [
    "DTYPE_NAMES",
    "KINDS",
    "PATTERNS",
    "Case",
    "generate_cases",
    "numpy_dtype",
    "round_to_bfloat16",
    "standard_cases",
]

#: The kinds of generated cases: tie-free, tie-heavy, all zeros, with infinities, random.
KINDS: tuple[str, ...] = ("tie_free", "tie_heavy", "zeros", "infinities", "random")
#: The dtypes the kit generates cases in (kit names; ``bfloat16`` as float32 values).
DTYPE_NAMES: tuple[str, ...] = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
#: Patterns of every shape of the rules: n = 0 and n = m, m = 1, the hardware
#: patterns, an odd m, and m = 40 (above the rank-counting limit, sort path).
PATTERNS: tuple[tuple[int, int], ...] = (
    (2, 4),
    (1, 4),
    (4, 8),
    (2, 8),
    (3, 8),
    (1, 2),
    (0, 4),
    (4, 4),
    (1, 1),
    (2, 3),
    (5, 16),
    (7, 40),
)


@dataclass(frozen=True)
class Case:
    """One conformance input.

    Attributes
    ----------
    scores : ndarray
        The input (weights or scores). For ``dtype_name="bfloat16"`` a float32
        array whose values are all exactly representable in bfloat16.
    n, m : int
        Pattern, ``n`` kept of every ``m``.
    kind : str
        The family the input was drawn from (one of ``KINDS`` or a free label).
    dtype_name : str
        The dtype the implementation runs in (``DTYPE_NAMES``).
    layout : str or None
        For weight checks: the layout whose reduction axis is grouped.
    label : str
        A short name for reports.
    """

    scores: NDArray
    n: int
    m: int
    kind: str = "given"
    dtype_name: str = ""
    layout: str | None = None
    label: str = field(default="")

    def __post_init__(self) -> None:
        if not self.dtype_name:
            name = "bool" if self.scores.dtype == np.bool_ else str(self.scores.dtype)
            object.__setattr__(self, "dtype_name", name)

    def describe(self) -> str:
        """One line naming the case: label, dtype, pattern, shape, layout."""
        layout = f", layout={self.layout}" if self.layout else ""
        label = f"{self.label} " if self.label else ""
        return (
            f"{label}[{self.kind}, {self.dtype_name}] n={self.n}, m={self.m}, "
            f"shape={self.scores.shape}{layout}"
        )


def numpy_dtype(dtype_name: str) -> np.dtype:
    """The NumPy dtype a case of ``dtype_name`` is stored in (bfloat16 -> float32)."""
    check_choice(dtype_name, "dtype_name", DTYPE_NAMES)
    return np.dtype(np.float32 if dtype_name == "bfloat16" else dtype_name)


def round_to_bfloat16(values: NDArray) -> NDArray[np.float32]:
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32.

    The result is exactly representable in bfloat16, so casting it to bfloat16
    and back is the identity. Finite values that round past the bfloat16 range
    become ``+-inf``, as in hardware. NaN is not expected (cases never hold NaN).
    Other real dtypes are cast to float32 first (float64 values are thus rounded twice);
    complex, object and string arrays are a ``TypeError``.
    """
    array = np.asarray(values)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"values must be a real numeric array, got dtype={array.dtype}")
    with np.errstate(over="ignore"):  # beyond float32: +-inf, as the docstring says
        bits = array.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def _finish(values: NDArray, dtype_name: str) -> NDArray:
    """Cast float64 or integer draws to the case dtype without creating NaN."""
    if dtype_name == "bfloat16":
        return round_to_bfloat16(values.astype(np.float32))
    dtype = numpy_dtype(dtype_name)
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return values.astype(dtype)
    return values.astype(dtype)


def _draw(
    rng: np.random.Generator, kind: str, dtype_name: str, shape: tuple[int, ...], m: int
) -> NDArray:
    dtype = numpy_dtype(dtype_name)
    is_float = dtype.kind == "f"
    if dtype.kind == "b":
        return rng.random(shape) < (0.5 if kind != "zeros" else 0.1)
    if kind == "tie_free":
        # Distinct magnitudes inside every group of m (and distinct values).
        size = int(np.prod(shape))
        groups = max(size // m, 1)
        # Integers up to the pool size are exact in the dtype (bfloat16: 256).
        pool = {"int8": 120, "uint8": 250, "bfloat16": 256, "float16": 2048}.get(dtype_name, 1000)
        picks = np.stack(
            [rng.choice(np.arange(1, pool + 1), m, replace=False) for _ in range(groups)]
        )
        magnitudes = picks.reshape(-1)[:size].reshape(shape).astype(np.float64)
        if dtype_name in ("float32", "float64"):
            magnitudes = magnitudes + rng.random(shape) * 0.5
        signs = 1 if dtype.kind == "u" else rng.choice([-1, 1], shape)
        return _finish(magnitudes * signs, dtype_name)
    if kind == "tie_heavy":
        if dtype.kind == "u":
            choices = [0, 1, 2]
        elif is_float:
            choices = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0]
        else:
            choices = [0, 1, -1, 2, -2]
        return _finish(rng.choice(np.array(choices, dtype=np.float64), shape), dtype_name)
    if kind == "zeros":
        values = np.where(rng.random(shape) < 0.8, 0.0, rng.standard_normal(shape))
        if is_float:
            values = np.where((values == 0) & (rng.random(shape) < 0.5), -0.0, values)
        else:
            values = np.round(values * 3)
            if dtype.kind == "u":
                values = np.abs(values)
        return _finish(values, dtype_name)
    if kind == "infinities":
        if is_float:
            info = np.finfo(np.float32 if dtype_name == "bfloat16" else dtype)
            specials = np.array(
                [
                    np.inf,
                    -np.inf,
                    float(info.max),
                    -float(info.max),
                    float(info.tiny),
                    0.0,
                    -0.0,
                    1.0,
                ]
            )
        else:
            info = np.iinfo(dtype)
            specials = np.array(
                [info.min, info.max, info.min + 1, info.max - 1, 0, 1, -1]
                if dtype.kind == "i"
                else [info.max, info.max - 1, 0, 1]
            )
            return rng.choice(specials.astype(object), shape).astype(dtype)
        return _finish(rng.choice(specials, shape), dtype_name)
    if kind == "random":
        if is_float:
            return _finish(rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4), dtype_name)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    raise ValueError(f"kind={kind!r} must be one of {KINDS}")


def _shape_for(rng: np.random.Generator, m: int, layout: str | None) -> tuple[int, ...]:
    groups = int(rng.integers(1, 4))
    if layout in (None, "linear"):
        return (int(rng.integers(1, 6)), groups * m)
    if layout == "channels":
        return (int(rng.integers(1, 4)), groups * m, *rng.integers(1, 4, 2).tolist())
    if layout == "flat":
        # in * kh * kw must be a multiple of m: put the multiple in `in`.
        return (int(rng.integers(1, 4)), groups * m, 1, int(rng.integers(1, 3)))
    raise ValueError(f"layout={layout!r} must be None, 'linear', 'channels' or 'flat'")


def generate_cases(
    kind: str,
    dtype_name: str,
    count: int,
    *,
    seed: int = 0,
    layout: str | None = None,
    patterns: tuple[tuple[int, int], ...] = PATTERNS,
) -> Iterator[Case]:
    """Yield ``count`` cases of one ``kind`` and dtype, cycling through ``patterns``.

    Deterministic: the same arguments give the same arrays on every platform
    (NumPy ``Generator(PCG64(seed))`` streams are stable).
    """
    check_choice(kind, "kind", KINDS)
    numpy_dtype(dtype_name)  # validates the name
    count = check_count(count, "count")
    seed = check_count(seed, "seed")
    rng = np.random.default_rng([seed, KINDS.index(kind), DTYPE_NAMES.index(dtype_name)])
    for index in range(count):
        n, m = patterns[index % len(patterns)]
        shape = _shape_for(rng, m, layout)
        scores = _draw(rng, kind, dtype_name, shape, m)
        yield Case(scores, n, m, kind, dtype_name, layout, label=f"#{index}")


def standard_cases(
    dtype_name: str, *, quick: bool = False, layout: str | None = None, seed: int = 0
) -> list[Case]:
    """The standard suite for one dtype: every kind, ``len(PATTERNS)`` (quick) or 3x as many each.

    ``kind="infinities"`` holds integer extremes for integer dtypes; bool gets
    the kinds that make sense for two values.
    """
    count = len(PATTERNS) * (1 if quick else 3)
    kinds = ("tie_heavy", "zeros", "random") if dtype_name == "bool" else KINDS
    cases: list[Case] = []
    for kind in kinds:
        cases.extend(generate_cases(kind, dtype_name, count, seed=seed, layout=layout))
    return cases
