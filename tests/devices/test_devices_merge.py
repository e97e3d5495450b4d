"""Live facts + arch table -> DeviceInfo: values, provenance, conflicts, peaks."""

from __future__ import annotations

from pathlib import Path

from evokernel_mcp.devices.builders import build_amd_device, build_nvidia_device
from evokernel_mcp.devices.cuda import parse_nvidia_smi_xml, parse_torch_probe
from evokernel_mcp.devices.merge import match_product
from evokernel_mcp.devices.models import AmdSmiGpu
from evokernel_mcp.devices.rocm import parse_rocminfo

FIX = Path(__file__).resolve().parents[1] / "fixtures"
ROCMINFO = FIX / "rocm" / "rocminfo"


def _agent(name: str, i: int = 0):
    return parse_rocminfo((ROCMINFO / name).read_text()).gpus[i]


def _sources(prov, index: int = 0) -> dict[str, str]:
    return {p.field.split(".", 1)[1]: p.source for p in prov if p.field.startswith(f"devices[{index}].")}


def test_mi300x_live_values_and_table_fill_with_provenance():
    dev, prov = build_amd_device(0, _agent("mi300x_vf_gfx942_rocm6.2.2.txt"), "rocminfo (test)")
    src = _sources(prov)
    assert dev.product == "MI300X" and dev.arch == "gfx942" and dev.conflicts == []
    assert dev.compute_units == 304 and src["compute_units"] == "rocminfo"
    assert dev.lds_bytes_per_workgroup == 65536 and src["lds_bytes_per_workgroup"] == "rocminfo"
    assert dev.max_waves_per_simd == 8 and src["max_waves_per_simd"] == "resources/gpu_arch/arch.yaml#gfx942.max_waves_per_simd"
    assert dev.max_vgprs_per_wave == 512 and dev.sgprs_per_simd == 800
    assert dev.peak_tflops["bf16_matrix"] == 1307.4 and dev.peak_bandwidth_gbs == 5300.0
    assert src["peak_tflops"].endswith("gfx942.products.MI300X.peak_tflops")
    assert all(p.detail for p in prov if p.source.startswith("resources/gpu_arch/arch.yaml#"))


def test_lds_contradiction_returns_both_values_and_flags_it():
    agent = _agent("mi300x_vf_gfx942_rocm6.2.2.txt").model_copy(update={"lds_bytes_per_workgroup": 163840})
    dev, _ = build_amd_device(0, agent, "rocminfo (test)")
    assert dev.lds_bytes_per_workgroup == 163840  # live wins
    (c,) = [c for c in dev.conflicts if c.field == "lds_bytes_per_workgroup"]
    assert c.live_value == 163840 and c.live_source == "rocminfo" and c.table_value == 65536
    assert c.table_source.startswith("resources/gpu_arch/arch.yaml#gfx942.lds_max_per_workgroup_kib")
    assert "64 KB" in c.note and "160 KB" in c.note


def test_mi250x_gcd_is_half_a_product_peaks_scaled():
    dev, prov = build_amd_device(0, _agent("mi250x_gfx90a_rocm6.2.1.txt"), "rocminfo (test)")
    assert dev.arch == "gfx90a" and dev.compute_units == 110 and dev.product == "MI250X"
    (c,) = [c for c in dev.conflicts if c.field == "compute_units"]
    assert c.live_value == 110 and c.table_value == 220 and "GCD" in c.note
    assert dev.peak_tflops["fp16_matrix"] == 191.5  # 383.0 x 110/220
    assert dev.peak_bandwidth_gbs == 1600.0  # 64 GiB of the product's 128 GiB
    assert "110/220" in next(p.detail for p in prov if p.field == "devices[0].peak_tflops")


def test_gfx950_excerpts_table_lds_and_live_cus():
    dev, prov = build_amd_device(0, _agent("mi355x_gfx950_agent_excerpt_rocm-libraries-9055.txt"), "rocminfo")
    src = _sources(prov)
    assert dev.product == "MI355X" and dev.compute_units == 256 and dev.max_clock_mhz == 2400
    assert dev.lds_bytes_per_workgroup == 163840 and src["lds_bytes_per_workgroup"].endswith(
        "gfx950.lds_max_per_workgroup_kib")
    dev, prov = build_amd_device(0, _agent("gfx950_pool_isa_excerpt_aiter-4457.txt"), "rocminfo")
    assert dev.lds_bytes_per_workgroup == 163840 and _sources(prov)["lds_bytes_per_workgroup"] == "rocminfo"
    assert dev.product is None and dev.name == "gfx950" and dev.peak_tflops == {}  # no CUs/clock: no peaks


def test_peaks_computed_from_live_clock_when_no_product_matches():
    agent = _agent("mi355x_gfx950_agent_excerpt_rocm-libraries-9055.txt").model_copy(
        update={"marketing_name": "AMD Instinct MI3xx engineering sample"})
    dev, prov = build_amd_device(0, agent, "rocminfo")
    assert dev.product is None
    assert dev.peak_tflops["bf16_matrix"] == round(256 * 2400e6 * 4096 / 1e12, 1)
    p = next(p for p in prov if p.field == "devices[0].peak_tflops")
    assert p.source == "computed" and "per_cu_flops_per_clk" in p.detail


def test_amd_smi_memory_wins_over_rocminfo_pool():
    smi = AmdSmiGpu(gpu=0, market_name="AMD Instinct MI300X", vram_bytes=196592 * 1024**2)
    dev, prov = build_amd_device(0, _agent("mi300x_vf_gfx942_rocm6.2.2.txt"), "rocminfo", smi)
    assert dev.memory_bytes == 196592 * 1024**2 and _sources(prov)["memory_bytes"] == "amd-smi"


def test_h200_recordings_nvidia_smi_and_torch():
    smi = parse_nvidia_smi_xml((FIX / "cuda" / "nvidia-smi-q-x_h200.xml").read_text())
    probe = parse_torch_probe((FIX / "cuda" / "torch_props_h200.json").read_text())
    assert smi.driver_version == "580.159.04" and smi.cuda_version == "13.0"
    g = smi.gpus[0]
    assert g.product_name == "NVIDIA H200" and g.memory_total_bytes == 143771 * 1024**2
    assert (g.max_sm_clock_mhz, g.max_mem_clock_mhz, g.pci_bus_id) == (1980, 3201, "00000000:00:06.0")
    dev, prov = build_nvidia_device(0, g, probe.devices[0], "nvidia-smi", "torch 2.11")
    src = _sources(prov)
    assert dev.arch == "sm_90" and dev.product == "H200_SXM" and src["arch"] == "torch"
    assert dev.compute_units == 132 and src["compute_units"] == "torch"
    assert dev.max_clock_mhz == 1980 and src["max_clock_mhz"] == "nvidia-smi"
    assert dev.lds_bytes_per_workgroup == 232448 and dev.max_waves_per_cu == 64 and dev.wavefront_size == 32
    assert dev.memory_bytes == 150109880320 and src["memory_bytes"] == "torch"
    assert dev.l2_bytes == 60 * 1024**2
    (c,) = dev.conflicts  # Hopper tuning guide's 50 MB L2 (H100) vs 60 MiB measured on the H200
    assert c.field == "l2_bytes" and c.table_value == 50 * 1024**2 and c.live_source == "torch"
    assert dev.peak_bandwidth_gbs == 4800.0 and dev.peak_tflops["fp16_bf16_tensor_dense"] == 989.4


def test_h200_without_torch_uses_nvidia_smi_and_table():
    g = parse_nvidia_smi_xml((FIX / "cuda" / "nvidia-smi-q-x_h200.xml").read_text()).gpus[0]
    dev, prov = build_nvidia_device(0, g, None, "nvidia-smi", "torch")
    src = _sources(prov)
    assert dev.arch == "sm_90" and src["arch"] == "nvidia-smi"  # product_architecture Hopper
    assert dev.memory_bytes == 143771 * 1024**2 and src["memory_bytes"] == "nvidia-smi"
    assert dev.compute_units == 132 and src["compute_units"].endswith("H200_SXM.sms")


def test_product_matching():
    assert match_product("gfx942", "AMD Instinct MI300X VF") == "MI300X"
    assert match_product("gfx942", "AMD Instinct MI325X") == "MI325X"
    assert match_product("gfx950", "AMD Instinct MI350X") == "MI350X"
    assert match_product("sm_90", "NVIDIA H100 80GB HBM3") == "H100_SXM5"
    assert match_product("sm_90", "NVIDIA H100 PCIe") is None
    assert match_product("gfx942", "AMD Instinct MI300A") is None
    assert match_product("gfx1100", "Radeon RX 7900 XTX") is None
