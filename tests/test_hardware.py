"""GPU database: completeness, provenance flags, internal consistency, lookup errors."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources

import pytest

from nmref.patterns import Pattern
from nmsim.perf.hardware import DTYPE_BYTES, get_gpu, gpu_names, list_gpus, normalize_dtype

ISSUE_GPUS = (
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "l40s",
    "a10",
    "rtx-3090",
    "rtx-4090",
    "b200",
)

# Added for the published dense vs 2:4 measurements (gpus.toml, second block).
ADDED_GPUS = (
    "rtx-a6000",
    "l4",
    "rtx-3060",
    "rtx-4070-ti-super",
    "rtx-3080",
    "rtx-4080",
    "a40",
    "a30",
    "l40",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "h800",
    "gh200",
    "rtx-3070",
    "rtx-4060-ti",
    "rtx-4070",
    "rtx-a4000",
    "rtx-a5000",
    "jetson-agx-orin",
    # Blackwell parts of measured corpus rows (gpus.toml, third block).
    "rtx-5080",
    "gb10",
)
GEFORCE_AMPERE = ("rtx-3090", "rtx-3060", "rtx-3070", "rtx-3080")
GEFORCE_ADA = ("rtx-4090", "rtx-4060-ti", "rtx-4070", "rtx-4070-ti-super", "rtx-4080")
GEFORCE_BLACKWELL = ("rtx-5080",)

# Dense FP16 tensor FLOP per clock per SM (from the architecture whitepapers; not re-read [M]), the accumulate dtype at which
# the part runs at that rate, and GPUs whose datasheet peak is quoted at a boost clock
# slightly above the sustained one (relative tolerance).
FLOP_PER_CLOCK = {
    "a100-sxm4-40gb": (2048, "fp32"),
    "a100-sxm4-80gb": (2048, "fp32"),
    "h100-sxm": (4096, "fp32"),
    "h100-pcie": (4096, "fp32"),
    "h200": (4096, "fp32"),
    "l40s": (1024, "fp32"),
    "a10": (1024, "fp32"),
    "rtx-3090": (1024, "fp16"),
    "rtx-4090": (1024, "fp16"),
    "rtx-a6000": (1024, "fp32"),
    "l4": (1024, "fp32"),
    "rtx-3060": (1024, "fp16"),
    "rtx-4070-ti-super": (1024, "fp16"),
    "rtx-3080": (1024, "fp16"),
    "rtx-4080": (1024, "fp16"),
    "a40": (1024, "fp16"),
    "a30": (2048, "fp32"),
    "l40": (512, "fp32"),
    "a100-pcie-40gb": (2048, "fp32"),
    "a100-pcie-80gb": (2048, "fp32"),
    "h800": (4096, "fp32"),
    "gh200": (4096, "fp32"),
    "rtx-3070": (1024, "fp16"),
    "rtx-4060-ti": (1024, "fp16"),
    "rtx-4070": (1024, "fp16"),
    "rtx-a4000": (1024, "fp32"),
    "rtx-a5000": (1024, "fp32"),
    "jetson-agx-orin": (2048, "fp16"),
    "rtx-5080": (1024, "fp16"),
    # gb10: no clock is published, so it cannot be checked here (clock_mhz is None).
}


def test_database_holds_every_gpu_the_issue_names() -> None:
    assert set(ISSUE_GPUS) <= set(gpu_names())
    assert set(ADDED_GPUS) <= set(gpu_names())


def test_data_file_ships_inside_the_package() -> None:
    assert resources.files("nmsim").joinpath("data/gpus.toml").is_file()


@pytest.mark.parametrize("gpu", ISSUE_GPUS + ADDED_GPUS)
def test_sparse_peak_is_twice_dense_and_pattern_matches_dtype(gpu: str) -> None:
    for peak in get_gpu(gpu).peaks:
        # Vendor tables round independently (L40S: 362 / 733), hence 1.5 %.
        assert peak.sparse_tflops == pytest.approx(2 * peak.dense_tflops, rel=0.015)
        expected = Pattern(1, 2) if peak.input == "tf32" else Pattern(2, 4)
        assert peak.sparse_pattern == expected
        assert peak.input in DTYPE_BYTES


@pytest.mark.parametrize("gpu", sorted(FLOP_PER_CLOCK))
def test_fp16_peak_equals_sms_times_rate_times_clock(gpu: str) -> None:
    """An independent check of the table: peak = SMs x FLOP/clk/SM x clock (within 1.5 %)."""
    rate, accumulate = FLOP_PER_CLOCK[gpu]
    g = get_gpu(gpu)
    assert g.clock_mhz is not None
    computed = g.sms.value * rate * g.clock_mhz.value * 1e6 / 1e12
    assert computed == pytest.approx(g.peak("fp16", accumulate).dense_tflops, rel=0.015)


def test_tf32_is_half_and_int8_twice_fp16_on_datacentre_parts() -> None:
    for gpu in (
        "a100-sxm4-80gb",
        "h100-sxm",
        "h100-pcie",
        "l40s",
        "b200",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "a30",
        "h800",
        "gh200",
        "l4",
        "l40",
        "a40",
    ):
        g = get_gpu(gpu)
        fp16 = g.peak("fp16").dense_tflops
        assert g.peak("tf32").dense_tflops == pytest.approx(fp16 / 2, rel=0.025)  # B200: 1100
        assert g.peak("int8").dense_tflops == pytest.approx(fp16 * 2, rel=0.02)


def test_consumer_cards_halve_fp16_with_fp32_accumulate() -> None:
    for gpu in GEFORCE_AMPERE + GEFORCE_ADA + GEFORCE_BLACKWELL:
        g = get_gpu(gpu)
        assert g.peak("fp16", "fp32").dense_tflops == pytest.approx(
            g.peak("fp16", "fp16").dense_tflops / 2, rel=0.01
        )
        assert g.peak("bf16").dense_tflops == g.peak("fp16", "fp32").dense_tflops
    for gpu in GEFORCE_ADA + GEFORCE_BLACKWELL:
        g = get_gpu(gpu)
        assert g.peak("fp8", "fp32").dense_tflops == pytest.approx(
            g.peak("fp8", "fp16").dense_tflops / 2, rel=0.01
        )
    for gpu in GEFORCE_AMPERE:  # Ampere has no FP8 tensor path
        assert all(p.input != "fp8" for p in get_gpu(gpu).peaks)


def test_workstation_and_datacentre_parts_run_fp32_accumulate_at_full_rate() -> None:
    for gpu in ("a40", "rtx-a6000", "rtx-a4000", "rtx-a5000", "l4", "a30"):
        g = get_gpu(gpu)
        assert g.peak("fp16", "fp32").dense_tflops == g.peak("fp16", "fp16").dense_tflops
        assert g.peak("bf16").dense_tflops == g.peak("fp16", "fp32").dense_tflops


def test_l40_is_half_the_l40s_and_has_no_unsourced_fp16_accumulate_row() -> None:
    l40, l40s = get_gpu("l40"), get_gpu("l40s")
    for dtype in ("bf16", "tf32", "fp8", "int8"):
        assert l40.peak(dtype).dense_tflops == pytest.approx(
            l40s.peak(dtype).dense_tflops / 2, rel=0.025
        )
    with pytest.raises(ValueError, match="accumulate='fp16'"):
        l40.peak("fp16", "fp16")
    assert l40.l2_mb is None


def test_added_gpus_flag_what_no_primary_source_gave() -> None:
    derived = (
        "rtx-a6000",
        "rtx-3060",
        "rtx-3070",
        "rtx-3080",
        "rtx-4060-ti",
        "rtx-4070",
        "rtx-4070-ti-super",
        "rtx-4080",
        "a30",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "h800",
        "gh200",
        "rtx-a5000",
        "rtx-5080",
    )
    for gpu in derived:
        g = get_gpu(gpu)
        assert not g.sms.confirmed and not g.memory_bandwidth_gb_s.confirmed
        assert all(not p.confirmed for p in g.peaks)
    a40 = get_gpu("a40")
    assert a40.memory_bandwidth_gb_s.confirmed and a40.peak("bf16").confirmed
    assert not a40.sms.confirmed and not a40.clock_mhz.confirmed  # type: ignore[union-attr]
    assert "peak fp16/fp32" in a40.unconfirmed_fields  # inferred from the BF16 row
    l40 = get_gpu("l40")
    assert l40.peak("bf16").confirmed and not l40.peak("fp16", "fp32").confirmed
    l4 = get_gpu("l4")
    assert all(p.confirmed for p in l4.peaks if p.accumulate != "fp16")
    assert not l4.peak("fp16", "fp16").confirmed and not l4.sms.confirmed
    orin = get_gpu("jetson-agx-orin")
    assert orin.peak("int8").confirmed and orin.memory_bandwidth_gb_s.confirmed
    assert not orin.sms.confirmed and not orin.peak("fp16", "fp16").confirmed
    with pytest.raises(ValueError, match="available input/accumulate pairs: fp16/fp16, int8/int32"):
        orin.peak("fp16")  # no source gives the FP32-accumulate rate: absent, not guessed
    a4000 = get_gpu("rtx-a4000")
    assert a4000.memory_gb.confirmed and not any(p.confirmed for p in a4000.peaks)


def test_rtx_5080_rates_reproduce_nvidias_ai_tops() -> None:
    """FP4 at 4x the FP16-accumulate rate, sparse, is NVIDIA's 1801 AI TOPS (not a database dtype)."""
    g = get_gpu("5080")
    assert (g.key, g.architecture, g.compute_capability) == ("rtx-5080", "Blackwell", "12.0")
    fp16 = g.peak("fp16", "fp16").dense_tflops
    assert 2 * 4 * fp16 == pytest.approx(1801, rel=0.001)
    assert g.peak("int8").dense_tflops == g.peak("fp8", "fp16").dense_tflops == 2 * fp16
    assert g.peak("tf32").dense_tflops == pytest.approx(fp16 / 4, rel=0.01)


def test_gb10_has_only_the_rows_a_source_supports() -> None:
    g = get_gpu("dgx-spark")
    assert (g.key, g.architecture, g.compute_capability) == ("gb10", "Blackwell", "12.1")
    # NVIDIA's product page: 128 GB unified LPDDR5x at 273 GB/s.
    assert g.memory_gb.confirmed and g.memory_gb.value == 128
    assert g.memory_bandwidth_gb_s.confirmed and g.memory_bandwidth_gb_s.value == 273
    assert not g.sms.confirmed and not g.l2_mb.confirmed  # type: ignore[union-attr]
    assert g.clock_mhz is None  # no source gives it: absent, not guessed
    assert not any(p.confirmed for p in g.peaks)
    # 1 PFLOP FP4 with sparsity = 500 dense; FP16 (FP16 accumulate) is a quarter of it.
    assert g.peak("fp16", "fp16").dense_tflops == pytest.approx(1000 / 2 / 4)
    assert g.peak("fp8", "fp16").dense_tflops == 2 * g.peak("fp16", "fp16").dense_tflops
    # FP32-accumulate, TF32 and INT8 rates are unsourced: absent, not guessed.
    pairs = "available input/accumulate pairs: fp16/fp16, fp8/fp16"
    for dtype in ("fp16", "bf16", "fp8", "tf32", "int8"):
        with pytest.raises(ValueError, match=pairs):
            g.peak(dtype)


def test_unconfirmed_values_are_flagged_as_the_notes_tag_them() -> None:
    for gpu in ("h200", "rtx-3090", "rtx-4090", "a10"):
        g = get_gpu(gpu)
        assert not g.sms.confirmed and not g.memory_bandwidth_gb_s.confirmed
        assert all(not p.confirmed for p in g.peaks)
    b200 = get_gpu("b200")
    assert not b200.sms.confirmed
    assert b200.clock_mhz is None and b200.l2_mb is None  # not confirmed: absent, not guessed
    assert b200.peak("bf16").confirmed
    assert not get_gpu("h100-pcie").clock_mhz.confirmed  # type: ignore[union-attr]
    assert not get_gpu("l40s").l2_mb.confirmed  # type: ignore[union-attr]
    a100 = get_gpu("a100-sxm4-80gb")
    assert a100.sms.confirmed and a100.peak("bf16").confirmed
    assert "peak fp16/fp16" in a100.unconfirmed_fields  # inferred accumulate row


def test_every_number_names_a_resolved_source() -> None:
    for g in list_gpus():
        for field in (g.sms, g.clock_mhz, g.memory_gb, g.memory_bandwidth_gb_s, g.l2_mb):
            if field is not None:
                assert len(field.source) > 20 and math.isfinite(field.value) and field.value > 0
        for p in g.peaks:
            assert len(p.source) > 20


def test_records_are_immutable() -> None:
    g = get_gpu("h100-sxm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.key = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.peaks[0].dense_tflops = 1.0  # type: ignore[misc]


def test_lookup_by_alias_and_case() -> None:
    assert get_gpu("A100").key == "a100-sxm4-80gb"
    assert get_gpu(" H100 ").key == "h100-sxm"
    assert get_gpu(get_gpu("l40s")) is get_gpu("l40s")
    assert normalize_dtype("bfloat16") == "bf16"
    assert get_gpu("h100-sxm").peak("e4m3").input == "fp8"


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"gpu='v100' is unknown; known GPUs: a100-sxm4-40gb"):
        get_gpu("v100")
    with pytest.raises(TypeError, match="gpu=3"):
        get_gpu(3)  # type: ignore[arg-type]


def test_unsupported_dtype_pairs_name_what_exists() -> None:
    with pytest.raises(ValueError, match=r"no tensor-core path for dtype='fp8'.*fp16/fp32"):
        get_gpu("a100").peak("fp8")
    with pytest.raises(ValueError, match="dtype='fp64' is not a tensor-core input dtype"):
        get_gpu("a100").peak("fp64")
    with pytest.raises(ValueError, match="accumulate='fp16'"):
        get_gpu("a100").peak("bf16", "fp16")
