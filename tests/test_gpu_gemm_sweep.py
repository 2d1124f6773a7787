"""benchmarks/gpu_gemm_sweep.py: the --dry-run corpus file (subprocess, CPU only), the plan,
the GPU keys, the TOML writer, and the GPU code path run on the CPU with stand-in kernels."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_gemm_sweep.py"

REQUIRED_ROW_FIELDS = {
    "id": str,
    "source": str,
    "gpu": str,
    "gpu_as_printed": str,
    "dtype": str,
    "library": str,
    "library_detail": str,
    "dense_library": str,
    "level": str,
    "m": int,
    "n": int,
    "k": int,
    "source_dims": str,
    "dense_us": float,
    "tags": list,
    "quote": str,
}
REQUIRED_SOURCE_FIELDS = (
    "id",
    "title",
    "url",
    "kind",
    "where",
    "convention",
    "trust",
    "trust_note",
)


def _load_module():
    spec = importlib.util.spec_from_file_location("gpu_gemm_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


sweep_mod = _load_module()


def _check_row(row: dict, source_id: str, *, gpu_row: bool) -> None:
    for name, kind in REQUIRED_ROW_FIELDS.items():
        assert name in row, f"{row.get('id')}: missing {name}"
        assert isinstance(row[name], kind), f"{row['id']}: {name} = {row[name]!r}"
    assert row["source"] == source_id
    assert row["id"].startswith(source_id + "-")
    assert row["dtype"] in {"fp16", "bf16", "fp8", "int8", "tf32"}
    assert row["library"] in {"cusparselt", "cutlass", "other"}
    assert row["dense_library"] in {"cublas", "cutlass", "other"}
    assert row["level"] in {"kernel", "framework"}
    assert min(row["m"], row["n"], row["k"]) >= 1
    assert row["dense_us"] > 0 and row["dense_iqr_us"] >= 0
    assert row["count"] == 1
    if gpu_row:
        assert row["sparse_us"] > 0 and row["sparse_iqr_us"] >= 0
        assert row["library"] in {"cusparselt", "cutlass"}
    else:
        assert "sparse_us" not in row and row["sparse_skip_reason"]


def test_dry_run_writes_a_valid_corpus(tmp_path):
    out = tmp_path / "sweep.toml"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--dry-run",
            "--repeats",
            "3",
            "--no-rich",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "plan:" in done.stdout and "estimated" in done.stdout
    data = tomllib.loads(out.read_text(encoding="utf-8"))
    (source,) = data["sources"]
    for name in REQUIRED_SOURCE_FIELDS:
        assert isinstance(source[name], str) and source[name], name
    assert source["kind"] == "sweep"
    assert source["dry_run"] is True
    assert source["trust"] in {"high", "medium", "low"}
    assert source["torch"] == torch.__version__
    assert source["cuda"] == (torch.version.cuda or "none")
    assert isinstance(source["cusparselt"], str) and source["cusparselt"]
    assert source["driver"] and source["date"] and "--dry-run" in source["command"]
    assert source["plan_shapes"] >= 60
    assert source["estimated_s"] > 0
    rows = data["rows"]
    assert rows, "the CPU stand-in writes rows"
    assert len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        _check_row(row, source["id"], gpu_row=False)
    assert {r["level"] for r in rows} == {"kernel", "framework"}
    skipped = {s["dtype"] for s in data.get("skips", [])}
    assert {"int8", "fp8"} <= skipped


def test_plan_has_the_required_shapes():
    full = sweep_mod.plan_shapes("full")
    assert len(full) >= 60
    keys = {(s.m, s.n, s.k) for s in full}
    assert len(keys) == len(full)
    for m, k in sweep_mod.PROJECTIONS:
        for n in (1, 2, 4, 8, 16, 32, 64, 512, 16384):
            assert (m, n, k) in keys
    assert {(s, s, s) for s in (1024, 16384)} <= keys
    assert any(s.family == "tall-skinny" for s in full)
    quick = sweep_mod.plan_shapes("quick")
    assert full[: len(quick)] == quick  # the quick subset runs first
    with pytest.raises(ValueError):
        sweep_mod.validate_shape(sweep_mod.Shape(4096, 1, 4100, "x"))
    with pytest.raises(ValueError):
        sweep_mod.validate_shape(sweep_mod.Shape(4100, 1, 4096, "x"))


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 3080 Ti", "rtx-3080-ti"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("Tesla T4", "tesla-t4"),
    ],
)
def test_gpu_key(name, key):
    assert sweep_mod.gpu_key(name) == key


def test_toml_writer_round_trips():
    tables = {
        "sources": [{"id": "s", "title": 'a "quoted" \\ back\nslash\t', "dry_run": True}],
        "rows": [{"id": "s-1", "x": 1.5e-7, "n": 3, "tags": ["a", "b"], "skip": None}],
    }
    data = tomllib.loads(sweep_mod.toml_dumps(tables))
    assert data["sources"][0]["title"] == 'a "quoted" \\ back\nslash\t'
    assert data["rows"][0] == {"id": "s-1", "x": 1.5e-7, "n": 3, "tags": ["a", "b"]}
    with pytest.raises(ValueError):
        sweep_mod.toml_dumps({"rows": [{"x": float("nan")}]})


class _FakeSubclass:
    """Stands in for SparseSemiStructuredTensor{CUSPARSELT,CUTLASS}: a dense copy of the
    weight with `packed` / `meta` attributes, so torch.mm(Ws, B) runs on the CPU."""

    def __init__(self, name, min_cols):
        self.__name__ = name
        self._DTYPE_SHAPE_CONSTRAINTS = {
            d: types.SimpleNamespace(dense_min_cols=c) for d, c in min_cols.items()
        }

    def from_dense(self, w):
        s = w.clone()
        s.packed = w.clone()
        s.meta = torch.zeros(1)
        return s


def test_gpu_path_with_stand_in_kernels(monkeypatch):
    """The probe, the checks, both levels and the rows, with CPU stand-ins for the kernels."""
    import torch.sparse as tsp

    def cslt(packed, b, out_dtype=None, **_):
        return (packed.float() @ b.float()).to(out_dtype or packed.dtype)

    def cutlass(packed, meta, b):
        return (packed.float() @ b.float()).to(
            torch.int32 if packed.dtype == torch.int8 else packed.dtype
        )

    def scaled_mm(a, b, sa, sb, bias=None, scale_result=None, out_dtype=None, **_):
        return (a.float() @ b.float() * sa * sb).to(out_dtype)

    def int_mm(a, b):
        assert b.shape[1] % 8 == 0
        return a.to(torch.int32) @ b.to(torch.int32)

    fp8 = torch.float8_e4m3fn
    cusparselt = _FakeSubclass(
        "CUSPARSELT", {torch.float16: 8, torch.bfloat16: 8, torch.int8: 16, fp8: 16}
    )
    monkeypatch.setattr(tsp, "SparseSemiStructuredTensorCUSPARSELT", cusparselt)
    monkeypatch.setattr(
        tsp, "SparseSemiStructuredTensorCUTLASS", _FakeSubclass("CUTLASS", {torch.float16: 8})
    )
    monkeypatch.setattr(torch, "_cslt_sparse_mm", cslt)
    monkeypatch.setattr(torch, "_sparse_semi_structured_mm", cutlass)
    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    monkeypatch.setattr(torch, "_int_mm", int_mm)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.backends.cusparselt, "is_available", lambda: True)

    args = sweep_mod.parse_args(["--repeats", "2"])
    versions = {"torch": torch.__version__, "cuda": "none", "cusparselt": "stand-in"}
    sweep = sweep_mod.Sweep(args, torch, torch.device("cpu"), "sweep-t", "cpu", "CPU", versions)
    supported = sweep.probe(sweep_mod.DTYPES, sweep_mod.LIBRARIES)
    assert set(supported) == {"fp16", "bf16", "int8", "fp8"}
    assert supported["fp16"] == {
        "cusparselt": ["kernel", "framework"],
        "cutlass": ["kernel", "framework"],
    }
    assert set(supported["int8"]) == {"cusparselt"}  # the stand-in CUTLASS has fp16 only
    assert {(s["dtype"], s["library"]) for s in sweep.skips} == {
        ("bf16", "cutlass"),
        ("int8", "cutlass"),
        ("fp8", "cutlass"),
    }
    shapes = [sweep_mod.Shape(256, 1, 256, "decode"), sweep_mod.Shape(128, 24, 512, "prefill")]
    for shape in shapes:
        for dtype, libraries in supported.items():
            sweep.run_group(shape, dtype, libraries)
    assert sweep.failures == []
    expected = sum(len(levels) for libs in supported.values() for levels in libs.values())
    assert len(sweep.rows) == len(shapes) * expected
    for row in sweep.rows:
        _check_row(row, "sweep-t", gpu_row=True)
        assert row["check_rel_err"] <= sweep_mod.TOLERANCE[row["dtype"]]
    by_key = {(r["dtype"], r["library"], r["level"], r["n"]): r for r in sweep.rows}
    assert by_key[("fp16", "cusparselt", "kernel", 1)]["sparse_n_computed"] == 8
    assert by_key[("int8", "cusparselt", "kernel", 1)]["out_dtype"] == "int32"
    assert by_key[("int8", "cusparselt", "kernel", 1)]["dense_n_computed"] == 8
    assert by_key[("fp8", "cusparselt", "framework", 24)]["out_dtype"] == "bf16"
    data = tomllib.loads(sweep_mod.toml_dumps({"rows": sweep.rows, "skips": sweep.skips}))
    assert len(data["rows"]) == len(sweep.rows)


def test_a_wrong_sparse_result_is_a_failure_not_a_row(monkeypatch):
    import torch.sparse as tsp

    def wrong(packed, b, out_dtype=None, **_):
        return (2 * packed.float() @ b.float()).to(out_dtype or packed.dtype)

    monkeypatch.setattr(
        tsp, "SparseSemiStructuredTensorCUSPARSELT", _FakeSubclass("CUSPARSELT", {torch.float16: 8})
    )
    monkeypatch.setattr(torch, "_cslt_sparse_mm", wrong)
    args = sweep_mod.parse_args(["--repeats", "2"])
    versions = {"torch": torch.__version__, "cuda": "none", "cusparselt": "stand-in"}
    sweep = sweep_mod.Sweep(args, torch, torch.device("cpu"), "sweep-t", "cpu", "CPU", versions)
    sweep.run_group(
        sweep_mod.Shape(128, 8, 256, "decode"), "fp16", {"cusparselt": ["kernel", "framework"]}
    )
    assert [r["level"] for r in sweep.rows] == ["framework"]
    (failure,) = sweep.failures
    assert failure["level"] == "kernel" and "rel err" in failure["reason"]


def _cpu_sweep():
    args = sweep_mod.parse_args(["--repeats", "2"])
    versions = {"torch": torch.__version__, "cuda": "none", "cusparselt": "stand-in"}
    return sweep_mod.Sweep(args, torch, torch.device("cpu"), "sweep-t", "cpu", "CPU", versions)


def test_run_plan_stops_at_the_budget_and_after_repeated_errors(monkeypatch):
    groups = [(s, "fp16") for s in sweep_mod.plan_shapes("quick")]
    supported = {"fp16": {"cusparselt": ["kernel"]}}
    progress = sweep_mod.Progress(len(groups), enabled=False)
    sweep = _cpu_sweep()
    state = {"done": 0, "stopped": ""}
    past = sweep_mod.time.perf_counter()
    sweep_mod.run_plan(sweep, groups, supported, "h200", past, state, progress, lambda: None)
    assert state == {"done": 0, "stopped": f"budget: {len(groups)} groups not run"}

    def boom(shape, dtype, libraries):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(sweep, "run_group", boom)
    state = {"done": 0, "stopped": ""}
    later = sweep_mod.time.perf_counter() + 3600
    sweep_mod.run_plan(sweep, groups, supported, "h200", later, state, progress, lambda: None)
    assert state["done"] == 4 and state["stopped"].startswith("5 groups in a row raised")
    assert len(sweep.failures) == 5 and sweep.rows == []
