"""Fuzz: nmsim's GEMM model and 2:4 format take any input to an answer or a named error."""

from __future__ import annotations

import math
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nmsim import compress_2to4, decompress_2to4, gemm_time
from nmsim.formats.sparse_2to4 import format_spec

EXAMPLES = int(os.environ.get("NMREF_FUZZ_EXAMPLES", "100"))

SIZES = st.one_of(
    st.integers(-3, 70000),
    st.sampled_from([0, 1, 2**40, 1.0, 2.5, True, "64", None, np.int64(64), np.uint8(16)]),
)


@settings(max_examples=EXAMPLES)
@given(
    gpu=st.sampled_from(["a100", "h100-sxm", "rtx-4090", "gb10", "v100", "", "A100 ", 7]),
    m=SIZES,
    n=SIZES,
    k=SIZES,
    dtype=st.sampled_from(["fp16", "bf16", "tf32", "fp8", "int8", "fp4", "float32", "", None]),
    sparse=st.sampled_from([None, "2:4", "1:2", "4:8", "1:16", "5:4", "2:0", "x", (2, 4)]),
    library=st.sampled_from([None, "cusparselt", "cutlass", "cublas"]),
    level=st.sampled_from(["kernel", "framework", "python"]),
)
def test_gemm_time_answers_or_names_the_argument(
    gpu, m, n, k, dtype, sparse, library, level
) -> None:
    try:
        estimate = gemm_time(gpu, m, n, k, dtype=dtype, sparse=sparse, library=library, level=level)
    except (ValueError, TypeError) as error:
        text = str(error)
        assert any(
            word in text
            for word in ("gpu", "m=", "n=", "k=", "dtype", "sparse", "library", "level", "name")
        ), repr(error)
        return
    assert math.isfinite(estimate.time_s) and estimate.time_s > 0
    if estimate.speedup is not None:
        assert estimate.speedup_low <= estimate.speedup <= estimate.speedup_high
        assert estimate.dense_time_s / estimate.time_s <= 2.0 + 1e-12


@st.composite
def dense_operands(draw: st.DrawFn) -> tuple[np.ndarray, str]:
    kind = draw(st.sampled_from(["fp16", "bf16", "int8", "fp32"]))
    spec = format_spec(kind)
    rows = draw(st.sampled_from([spec.row_multiple, 2 * spec.row_multiple, 1, 0]))
    cols = draw(st.sampled_from([spec.column_multiple, 2 * spec.column_multiple, 3, 0]))
    group = spec.group_size
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dense = rng.standard_normal((rows, cols)).astype(np.float32)
    if cols % group == 0 and rows:
        # keep at most kept_per_group per group so the operand is compressible ...
        groups = dense.reshape(rows, cols // group, group)
        order = np.argsort(rng.random(groups.shape), axis=-1)
        groups[order >= spec.kept_per_group] = 0.0
        dense = groups.reshape(rows, cols)
    if draw(st.booleans()) and dense.size:
        dense.reshape(-1)[0] = draw(st.sampled_from([np.nan, np.inf, -0.0, 7.0]))  # ... or not
    if kind == "int8":
        with np.errstate(invalid="ignore"):
            dense = np.clip(np.nan_to_num(dense * 10), -128, 127).astype(np.int8)
    elif kind == "fp16":
        dense = dense.astype(np.float16)
    elif kind == "bf16":
        dense = dense.astype(np.float32)
    return dense, kind


@settings(max_examples=EXAMPLES)
@given(operand=dense_operands(), overfull=st.sampled_from(["error", "drop"]))
def test_compress_round_trips_or_names_the_rule(operand, overfull) -> None:
    dense, kind = operand
    try:
        values, metadata = compress_2to4(dense, dtype_kind=kind, overfull=overfull)  # type: ignore[arg-type]
    except (ValueError, TypeError) as error:
        text = str(error)
        assert any(
            word in text for word in ("dense", "dtype", "shape", "group", "overfull", "rows")
        ), repr(error)
        return
    back = decompress_2to4(values, metadata, dtype_kind=kind)  # type: ignore[arg-type]
    assert back.shape == dense.shape
    if overfull == "error":
        np.testing.assert_array_equal(
            np.asarray(back, dtype=np.float64), np.asarray(dense, dtype=np.float64)
        )
