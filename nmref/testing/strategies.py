"""Hypothesis strategies for conformance testing of N:M implementations.

Every strategy draws :class:`~nmref.testing.cases.Case` objects (a NumPy input,
a pattern and the dtype to run in), so that a property test reads::

    from hypothesis import given
    from nmref.testing import check_nm_mask
    from nmref.testing.strategies import nm_cases

    @given(nm_cases(kinds=("tie_heavy",), dtypes=("bfloat16",)))
    def test_my_kernel(case):
        check_nm_mask(my_kernel, [case])

and hypothesis shrinks a failure to a small counterexample. Kinds are those of
:data:`nmref.testing.cases.KINDS`: ``tie_free`` (distinct magnitudes in every
row), ``tie_heavy`` (a handful of values, signed zeros included), ``zeros``
(mostly +-0), ``infinities`` (+-inf and the extremes of the dtype) and
``random``. ``bfloat16`` cases are float32 arrays of bfloat16-representable
values (rule C5).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nmref.testing.cases import KINDS, Case, numpy_dtype, round_to_bfloat16

__all__ = ["nm_cases", "patterns", "weights"]

FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
DEFAULT_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int64", "uint8")


def patterns(max_m: int = 8) -> st.SearchStrategy[tuple[int, int]]:
    """``(n, m)`` with ``1 <= m <= max_m`` and ``0 <= n <= m``."""
    return st.integers(1, max_m).flatmap(lambda m: st.tuples(st.integers(0, m), st.just(m)))


def _float_elements(dtype_name: str, allow_infinity: bool) -> st.SearchStrategy[float]:
    width = {"float16": 16, "bfloat16": 32, "float32": 32, "float64": 64}[dtype_name]
    return st.floats(allow_nan=False, allow_infinity=allow_infinity, width=width)


def _elements(dtype_name: str, kind: str) -> st.SearchStrategy:
    dtype = numpy_dtype(dtype_name)
    is_float = dtype_name in FLOAT_NAMES
    if dtype.kind == "b":
        return st.booleans()
    if kind == "tie_heavy":
        if is_float:
            return st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, -2.0])
        return st.sampled_from([0, 1, 2] if dtype.kind == "u" else [0, 1, -1, 2, -2])
    if kind == "zeros":
        zero = st.sampled_from([0.0, -0.0]) if is_float else st.just(0)
        other = _float_elements(dtype_name, False) if is_float else _integer_elements(dtype)
        return st.one_of(zero, zero, zero, other)
    if kind == "infinities":
        if is_float:
            big = float(np.finfo(np.float32 if dtype_name == "bfloat16" else dtype).max)
            specials = [np.inf, -np.inf, big, -big, 0.0, -0.0, 1.0]
            return st.one_of(st.sampled_from(specials), _float_elements(dtype_name, True))
        info = np.iinfo(dtype)
        return st.sampled_from(sorted({int(info.min), int(info.max), int(info.min) + 1, 0, 1}))
    if kind == "random":
        return _float_elements(dtype_name, False) if is_float else _integer_elements(dtype)
    raise ValueError(f"kind={kind!r} must be one of {KINDS}")


def _integer_elements(dtype: np.dtype) -> st.SearchStrategy[int]:
    info = np.iinfo(dtype)
    return st.integers(int(info.min), int(info.max))


@st.composite
def _tie_free(draw, dtype_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct magnitudes in every window of up to ``bound`` consecutive entries, random signs.

    ``bound`` is the count of small integers the dtype holds exactly (127 for
    int8, 256 for bfloat16); larger arrays repeat the distinct values cyclically,
    so every group of ``m <= bound`` consecutive entries is still tie-free.
    """
    dtype = numpy_dtype(dtype_name)
    size = int(np.prod(shape))
    # Integers below these bounds are exact in the dtype: distinct stays distinct.
    bound = {"bfloat16": 256, "float16": 2048, "int8": 127, "uint8": 255}.get(dtype_name, 10**6)
    count = min(size, bound)
    distinct = draw(st.lists(st.integers(1, bound), min_size=count, max_size=count, unique=True))
    magnitudes = np.resize(np.array(distinct, dtype=np.float64), size)
    values = np.array(magnitudes, dtype=np.float64).reshape(shape)
    if dtype.kind != "u":
        signs = draw(hnp.arrays(np.bool_, shape))
        values = np.where(signs, -values, values)
    if dtype_name == "bfloat16":
        return round_to_bfloat16(values.astype(np.float32))
    return values.astype(dtype)


@st.composite
def weights(
    draw,
    shape: tuple[int, ...],
    *,
    dtype_name: str = "float32",
    kind: str = "random",
) -> np.ndarray:
    """An array of ``shape`` of one kind and dtype (bfloat16: float32 storage)."""
    if kind == "tie_free" and dtype_name != "bool":
        return draw(_tie_free(dtype_name, shape))
    if kind == "tie_free":
        kind = "random"
    storage = numpy_dtype(dtype_name)
    array = draw(hnp.arrays(storage, shape, elements=_elements(dtype_name, kind)))
    if dtype_name == "bfloat16":
        array = round_to_bfloat16(array)
    return array


@st.composite
def nm_cases(
    draw,
    *,
    dtypes: tuple[str, ...] = DEFAULT_DTYPES,
    kinds: tuple[str, ...] = KINDS,
    max_m: int = 8,
    max_rows: int = 4,
    max_groups: int = 4,
    layout: str | None = None,
) -> Case:
    """A :class:`Case`: pattern, shape (a multiple of ``m`` along the grouped axis), input.

    With ``layout=None`` or ``"linear"`` the input is 2-D ``(rows, groups*m)``;
    with ``"channels"``/``"flat"`` it is a 4-D convolution weight whose
    layout's reduction length is a multiple of ``m``.
    """
    n, m = draw(patterns(max_m))
    dtype_name = draw(st.sampled_from(dtypes))
    kind = draw(st.sampled_from(kinds))
    rows = draw(st.integers(1, max_rows))
    groups = draw(st.integers(1, max_groups))
    if layout in (None, "linear"):
        shape: tuple[int, ...] = (rows, groups * m)
    elif layout in ("channels", "flat"):
        kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        shape = (rows, groups * m, *kernel)
    else:
        raise ValueError(f"layout={layout!r} must be None, 'linear', 'channels' or 'flat'")
    scores = draw(weights(shape, dtype_name=dtype_name, kind=kind))
    return Case(scores, n, m, kind, dtype_name, layout)
