"""Roofline arithmetic, arch-table peaks with provenance, clock parsers (amd-smi on the genuine fixture)."""

from __future__ import annotations

import pytest

from evokernel_mcp.benchmark import clocks, roofline
from evokernel_mcp.errors import BadInput, ParseError


def test_memory_bound_arithmetic():
    # 1 GB in 0.5 ms = 2000 GB/s; peak 4000 GB/s -> bound 0.25 ms, half of roofline
    r = roofline.compute_roofline(0.5, 1e9, 1e9, peak_gbs=4000.0, peak_tflops=1000.0)
    assert r.achieved_gbs == pytest.approx(2000.0) and r.achieved_tflops == pytest.approx(2.0)
    assert r.roofline_ms == pytest.approx(0.25) and r.bound == "memory"
    assert r.fraction_of_roofline == pytest.approx(0.5) and r.gap_ms == pytest.approx(0.25)
    assert r.fraction_of_peak_bandwidth == pytest.approx(0.5)
    assert r.fraction_of_measured_bandwidth is None and r.roofline_datasheet_ms == pytest.approx(0.25)


def test_compute_bound_and_measured_ceilings_win():
    # 16.31 GFLOP, 0.45 GB; datasheet 66.9 TFLOP/s, 3350 GB/s; measured 50 TFLOP/s, 3000 GB/s
    r = roofline.compute_roofline(1.0, 0.45e9, 16.31e9, peak_gbs=3350.0, peak_tflops=66.9,
                                  ceil_gbs=3000.0, ceil_tflops=50.0)
    assert r.bound == "compute"
    assert r.roofline_ms == pytest.approx(16.31e9 / 50e12 * 1e3)
    assert r.roofline_datasheet_ms == pytest.approx(16.31e9 / 66.9e12 * 1e3)
    assert r.fraction_of_measured_tflops == pytest.approx(16.31 / 50.0)
    assert r.fraction_of_peak_tflops == pytest.approx(16.31 / 66.9)


def test_unknown_counts_give_none_not_zero():
    r = roofline.compute_roofline(1.0, None, None, peak_gbs=3350.0)
    assert r.achieved_gbs is None and r.roofline_ms is None and r.fraction_of_roofline is None


@pytest.mark.parametrize("kw", [{"nbytes": -1.0}, {"median": 0.0}, {"median": -1.0}])
def test_roofline_refuses_impossible(kw):
    with pytest.raises(BadInput):
        roofline.compute_roofline(kw.get("median", 1.0), kw.get("nbytes", 1.0), 1.0)


def test_datasheet_peaks_h200_and_mi300x_have_provenance():
    prod = roofline.resolve_product("sm_90", "NVIDIA H200")
    assert prod == "H200_SXM"
    bw, tf = roofline.datasheet_peaks("sm_90", prod, "torch.bfloat16", "matrix")
    assert bw.value == pytest.approx(4800.0) and "arch.yaml#sm_90.products.H200_SXM" in bw.provenance.source
    assert tf.value == pytest.approx(989.4) and "fp16_bf16_tensor_dense" in tf.provenance.detail
    prod = roofline.resolve_product("gfx942", "AMD Instinct MI300X")
    bw, tf = roofline.datasheet_peaks("gfx942", prod, "fp32", "vector")
    assert prod == "MI300X" and bw.value == pytest.approx(5300.0) and tf.value == pytest.approx(163.4)
    assert roofline.resolve_product("sm_90", "NVIDIA H100 80GB HBM3") == "H100_SXM5"
    assert roofline.resolve_product("gfx942", None) == "MI300X"  # arch default


def test_datasheet_peak_missing_is_none():
    _, tf = roofline.datasheet_peaks("sm_90", "H200_SXM", "fp64", "vector")
    assert tf is None
    with pytest.raises(BadInput):
        roofline.datasheet_peaks("sm_90", None, "bf16", "tensor")


def test_amd_smi_clock_text_fixture(rocm_fixtures):
    text = (rocm_fixtures / "amd-smi" / "metric_clock_text_changelog_rocm6.1.1.txt").read_text()
    c = clocks.parse_amd_smi_clock_text(text)
    assert c.mem_mhz == 900.0 and c.sm_mhz == pytest.approx((113 * 7 + 112) / 8) and c.source == "amd-smi"


def test_amd_smi_truncated_and_malformed(rocm_fixtures):
    text = (rocm_fixtures / "amd-smi" / "metric_clock_text_changelog_rocm6.1.1.txt").read_text()
    c = clocks.parse_amd_smi_clock_text(text[: text.index("GFX_1:")])
    assert c.sm_mhz == 113.0 and c.mem_mhz is None
    with pytest.raises(ParseError):
        clocks.parse_amd_smi_clock_text("GPU: 0\n    CLOCK:\n")


def test_nvidia_smi_csv_noheader_nounits():
    # format of `--query-gpu=clocks.sm,clocks.mem --format=csv,noheader,nounits` (one line per GPU)
    c = clocks.parse_nvidia_smi_clocks("1980, 2619\n")
    assert (c.sm_mhz, c.mem_mhz, c.source) == (1980.0, 2619.0, "nvidia-smi")
    c = clocks.parse_nvidia_smi_clocks("[N/A], 2619\n")
    assert c.sm_mhz is None and c.mem_mhz == 2619.0
    with pytest.raises(ParseError):
        clocks.parse_nvidia_smi_clocks("")
    with pytest.raises(ParseError):
        clocks.parse_nvidia_smi_clocks("1980\n")
