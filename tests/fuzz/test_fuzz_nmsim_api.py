"""Fuzz: the rest of nmsim's public functions take any input to an answer or a named error.

Same contract as the rest of ``tests/fuzz`` (``specs/errors.md``): a valid, finite answer,
identical when the call is repeated, or ``ValueError``/``TypeError`` naming the argument.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nmsim
from nmsim.formats.sparse_2to4 import format_spec
from nmsim.perf.corpus import load_corpus
from tests.fuzz.test_fuzz_api import names_an_argument, same, two_outcomes
from tests.fuzz.test_fuzz_masks import EXAMPLES

GPUS = ["a100-sxm4-80gb", "h100-sxm", "rtx-4090", "A100", " h100-sxm", "", "v100x", None, 7]
PATTERNS = ["2:4", "1:2", "4:8", "5:4", "2:0", "x", None, (2, 4), 2.5]
COUNTS = st.one_of(
    st.integers(-2, 4096), st.sampled_from([0, 2**62, 2.5, True, "64", None, np.int64(8)])
)
REALS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, True, "1", None, 10**400]),
)


def positive_and_finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


@settings(max_examples=EXAMPLES)
@given(name=st.one_of(st.sampled_from(GPUS), st.text(max_size=12)))
def test_get_gpu_answers_or_names_the_argument(name: object) -> None:
    kind, gpu = two_outcomes(nmsim.get_gpu, (name,), {})
    if kind == "ok":
        assert gpu is nmsim.get_gpu(gpu.key) and gpu in nmsim.list_gpus()


def test_list_gpus_is_the_same_tuple_every_time() -> None:
    gpus = nmsim.list_gpus()
    assert gpus == nmsim.list_gpus() and len({g.key for g in gpus}) == len(gpus)


@settings(max_examples=EXAMPLES)
@given(
    name=st.sampled_from([*nmsim.MODELS, "resnet", "", None, 3]),
    option=st.sampled_from([{}, {"seq_len": 64}, {"seq_len": -1}, {"seq_len": 2.5}, {"x": 1}]),
)
def test_model_layers_answer_or_name_the_argument(name: object, option: dict) -> None:
    kind, layers = two_outcomes(nmsim.model_layers, (name,), option)
    if kind == "error":
        return
    assert layers and all(layer.macs > 0 for layer in layers)
    same([layer.macs for layer in layers], [x.macs for x in nmsim.model_layers(name, **option)])


@settings(max_examples=EXAMPLES)
@given(
    model=st.sampled_from(["resnet18", "bert-base", "llama-mlp", "x", None, []]),
    method=st.sampled_from([*nmsim.METHODS, "x", None]),
    pattern=st.sampled_from(PATTERNS),
    accounting=st.sampled_from(["ideal", "hardware", "x", None]),
    examples=REALS,
    epochs=REALS,
)
def test_training_flops_answer_or_name_the_argument(
    model, method, pattern, accounting, examples, epochs
) -> None:
    kwargs = {"accounting": accounting, "examples": examples, "epochs": epochs}
    kind, report = two_outcomes(nmsim.training_flops, (model, method, pattern), kwargs)
    if kind == "ok":
        assert positive_and_finite(report.dense_training_macs)
        assert math.isfinite(report.training_macs) and report.training_macs > 0
        same(report, nmsim.training_flops(model, method, pattern, **kwargs))


@settings(max_examples=EXAMPLES)
@given(
    model=st.sampled_from(["resnet18", "llama-mlp", "x", None]),
    method=st.sampled_from([*nmsim.METHODS, "x"]),
    pattern=st.sampled_from(PATTERNS),
    gpu=st.sampled_from(GPUS),
    batch=COUNTS,
    dtype=st.sampled_from(["bf16", "fp16", "fp8", "int8", "tf32", "fp64", None]),
    mode=st.sampled_from(["train", "inference", "x"]),
    non_gemm_fraction=st.one_of(st.sampled_from([0.0, 0.25, 0.99, 1.0, -0.1]), REALS),
)
def test_estimate_step_answers_or_names_the_argument(
    model, method, pattern, gpu, batch, dtype, mode, non_gemm_fraction
) -> None:
    args = (model, method, pattern, gpu, batch, dtype)
    kwargs = {"mode": mode, "non_gemm_fraction": non_gemm_fraction}
    kind, step = two_outcomes(nmsim.estimate_step, args, kwargs)
    if kind == "ok":
        assert positive_and_finite(step.dense_step_s) and positive_and_finite(step.step_s)
        same(step.step_s, nmsim.estimate_step(*args, **kwargs).step_s)


@st.composite
def compressed_operands(draw: st.DrawFn) -> tuple[object, object, str]:
    """values/metadata pairs: honest ones from compress_2to4, then damaged or replaced."""
    kind = draw(st.sampled_from(["fp16", "int8", "fp32"]))
    spec = format_spec(kind)
    rows = spec.row_multiple * draw(st.sampled_from([1, 2]))
    cols = spec.column_multiple * draw(st.sampled_from([1, 2]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dense = rng.integers(-3, 4, (rows, cols)).astype(np.float32)
    groups = dense.reshape(rows, -1, spec.group_size)
    groups[np.argsort(rng.random(groups.shape), axis=-1) >= spec.kept_per_group] = 0
    dense = groups.reshape(rows, cols)
    if kind == "int8":
        dense = dense.astype(np.int8)
    elif kind == "fp16":
        dense = dense.astype(np.float16)
    values, metadata = nmsim.compress_2to4(dense, dtype_kind=kind)
    damage = draw(
        st.sampled_from(
            ["none", "metadata-bits", "short-values", "short-metadata", "float-metadata", "list"]
        )
    )
    if damage == "metadata-bits":
        metadata = metadata.copy()
        metadata.reshape(-1)[0] = np.iinfo(metadata.dtype).max
    elif damage == "short-values":
        values = values[:-1]
    elif damage == "short-metadata":
        metadata = metadata[:, :-1]
    elif damage == "float-metadata":
        metadata = metadata.astype(np.float64)
    elif damage == "list":
        values, metadata = values.tolist(), metadata.tolist()
    return values, metadata, kind


@settings(max_examples=EXAMPLES)
@given(operand=compressed_operands(), layout=st.sampled_from(["cutlass_sm80", "x", None]))
def test_decompress_answers_or_names_the_argument(operand, layout) -> None:
    values, metadata, kind = operand
    kwargs = {"dtype_kind": kind, "layout": layout}
    kind_of, dense = two_outcomes(nmsim.decompress_2to4, (values, metadata), kwargs)
    if kind_of == "ok":
        spec = format_spec(kind)
        groups = np.asarray(dense).reshape(np.shape(dense)[0], -1, spec.group_size)
        assert ((groups != 0).sum(-1) <= spec.kept_per_group).all()  # never over-full
        same(dense, nmsim.decompress_2to4(np.asarray(values), np.asarray(metadata), **kwargs))


@settings(max_examples=EXAMPLES)
@given(
    operand=compressed_operands(),
    b_shape=st.sampled_from(["fit", "short", "3-d", "empty"]),
    accumulate=st.sampled_from([None, "fp32", "fp16", "int32", "x"]),
    saturate=st.sampled_from([False, True, "yes"]),
)
def test_mma_sp_answers_or_names_the_argument(operand, b_shape, accumulate, saturate) -> None:
    values, metadata, kind = operand
    spec = format_spec(kind)
    kept = np.shape(values)[-1] if np.ndim(values) == 2 else 4
    columns = kept * spec.group_size // spec.kept_per_group
    shape = {"fit": (columns, 8), "short": (columns - 1, 8), "3-d": (1, columns, 8)}
    b = np.ones(shape.get(b_shape, (0, 8)), dtype=np.float32)
    if kind == "int8":
        b = b.astype(np.int8)
    elif kind == "fp16":
        b = b.astype(np.float16)
    kwargs = {"dtype_kind": kind, "accumulate": accumulate, "saturate": saturate}
    kind_of, product = two_outcomes(nmsim.mma_sp, (values, metadata, b), kwargs)
    if kind_of == "ok":
        dense = nmsim.decompress_2to4(np.asarray(values), np.asarray(metadata), dtype_kind=kind)
        expected = np.asarray(dense, np.float64) @ np.asarray(b, np.float64)
        # small integers: every accumulation order gives the same exact sums
        np.testing.assert_array_equal(np.asarray(product, np.float64), expected)


@settings(max_examples=EXAMPLES)
@given(
    module=st.sampled_from(["linear", "none", "string", "function"]),
    sample=st.sampled_from(["fit", "wrong-width", "none", "numpy"]),
)
def test_layers_from_torch_answers_or_names_the_argument(module: str, sample: str) -> None:
    torch = pytest.importorskip("torch")
    modules = {
        "linear": torch.nn.Sequential(
            torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)
        ),
        "none": None,
        "string": "resnet18",
        "function": lambda x: x,
    }
    samples = {
        "fit": torch.zeros(3, 8),
        "wrong-width": torch.zeros(3, 5),
        "none": None,
        "numpy": np.zeros((3, 8), np.float32),
    }
    kind, layers = two_outcomes(nmsim.layers_from_torch, (modules[module], samples[sample]), {})
    if kind == "ok":
        assert [layer.macs for layer in layers] == [8 * 4, 4 * 2]  # per example


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sweeps": -1},
        {"sweeps": 2.5},
        {"iterations": 0},
        {"iterations": "24"},
        {"fold": "x"},
        {"fold": None},
        {"cross_validation": "yes"},
    ],
    ids=repr,
)
def test_calibrate_names_a_bad_setting_before_fitting(kwargs: dict) -> None:
    kind, error = two_outcomes(nmsim.calibrate, (load_corpus()[1][:5],), kwargs)
    assert kind == "error" and names_an_argument(error, nmsim.calibrate), error


@pytest.mark.parametrize(
    "rows", [[], [1, 2], "rows", [None], 7], ids=["empty", "ints", "string", "none", "int"]
)
def test_calibrate_names_bad_rows(rows: object) -> None:
    kind, error = two_outcomes(nmsim.calibrate, (rows,), {"cross_validation": False})
    assert kind == "error" and "rows" in str(error), error
