"""One DeviceInfo per GPU from the parsed tool outputs: AMD (rocminfo + amd-smi) and NVIDIA (nvidia-smi +
torch). Live values first, then the arch table; conflicts checked after both are in."""

from __future__ import annotations

from evokernel_mcp.devices.cuda import ARCH_BY_FAMILY, sm_arch
from evokernel_mcp.devices.merge import GIB, KIB, MIB, DeviceBuilder, add_peaks, match_product
from evokernel_mcp.devices.models import (
    AmdSmiGpu,
    DeviceInfo,
    NvsmiGpu,
    RocmAgent,
    TorchDeviceProps,
)
from evokernel_mcp.models import Provenance

_ROCMINFO_FIELDS = {  # DeviceInfo field -> (RocmAgent field, rocminfo key for the detail)
    "chip_id": ("chip_id", "Chip ID"), "compute_units": ("compute_units", "Compute Unit"),
    "simds_per_cu": ("simds_per_cu", "SIMDs per CU"), "shader_engines": ("shader_engines", "Shader Engines"),
    "wavefront_size": ("wavefront_size", "Wavefront Size"),
    "max_workgroup_size": ("workgroup_max_size", "Workgroup Max Size"),
    "max_waves_per_cu": ("max_waves_per_cu", "Max Waves Per CU"),
    "lds_bytes_per_workgroup": ("lds_bytes_per_workgroup", "Pool Info: Segment GROUP, Size"),
    "l1_bytes": ("l1_bytes", "Cache Info L1"), "l2_bytes": ("l2_bytes", "Cache Info L2 (per XCD on MI300/MI350)"),
    "l3_bytes": ("l3_bytes", "Cache Info L3 (Infinity Cache)"), "cacheline_bytes": ("cacheline_bytes", "Cacheline Size"),
    "max_clock_mhz": ("max_clock_mhz", "Max Clock Freq. (MHz)"),
}
_AMD_TABLE = {  # DeviceInfo field -> (arch key, scale), used when no tool reported it
    "simds_per_cu": ("simds_per_cu", 1), "wavefront_size": ("wavefront_size", 1),
    "max_waves_per_cu": ("max_waves_per_cu", 1), "max_waves_per_simd": ("max_waves_per_simd", 1),
    "max_workgroup_size": ("max_workgroup_size_threads", 1),
    "vgprs_per_simd": ("vgprs_per_lane_per_simd_unified", 1), "max_vgprs_per_wave": ("max_vgprs_per_wave_total", 1),
    "max_arch_vgprs_per_wave": ("max_arch_vgprs_per_wave", 1), "sgprs_per_simd": ("sgprs_per_simd", 1),
    "max_sgprs_per_wave": ("sgprs_addressable_per_wave", 1),
    "lds_bytes_per_workgroup": ("lds_max_per_workgroup_kib", KIB), "lds_bytes_per_cu": ("lds_per_cu_kib", KIB),
}


def build_amd_device(index: int, agent: RocmAgent, rocminfo_detail: str,
                     smi: AmdSmiGpu | None = None) -> tuple[DeviceInfo, list[Provenance]]:
    b = DeviceBuilder(index, agent.arch)
    b.product = match_product(b.arch, agent.marketing_name or (smi.market_name if smi else None))
    where = f"agent {agent.agent_number}" if agent.agent_number is not None else f"agent block at line {agent.line}"
    b.live("name", agent.marketing_name, "rocminfo", f"{rocminfo_detail}, {where}: Marketing Name")
    b.live("name", smi.market_name if smi else None, smi.tool if smi else "", "asic.market_name")
    arch_key = "Name" if agent.name == agent.arch else "ISA Info: Name"
    b.provenance.append(Provenance(field=b.path("arch"), source="rocminfo", detail=f"{rocminfo_detail}, {where}: "
                                   f"{arch_key}"))
    if b.product:
        b.provenance.append(Provenance(field=b.path("product"), source="rocminfo",
                                       detail=f"arch-table product matched from the name {b.values.get('name')!r}"))
    b.values["isa"] = list(agent.isa_names)
    b.values["uuid"] = agent.uuid
    for field, (attr, key) in _ROCMINFO_FIELDS.items():
        b.live(field, getattr(agent, attr), "rocminfo", f"{rocminfo_detail}, {where}: {key}")
    if smi is not None:
        b.live("memory_bytes", smi.vram_bytes, smi.tool, "VRAM total (amd-smi vram.size, MB = MiB; rocm-smi "
               "'VRAM Total Memory (B)')")
        b.live("max_clock_mhz", smi.max_gfx_clock_mhz, smi.tool, "clock.gfx_*.max_clk")
        b.live("memory_clock_mhz", smi.max_mem_clock_mhz, smi.tool, "clock.mem_*.max_clk")
        b.values["pci_bus_id"] = smi.bdf
    b.live("memory_bytes", agent.global_memory_bytes, "rocminfo",
           f"{rocminfo_detail}, {where}: largest GLOBAL pool Size (usable VRAM)")
    _amd_table_and_checks(b)
    add_peaks(b, "per_cu_flops_per_clk")
    return b.finish()


def _amd_table_and_checks(b: DeviceBuilder) -> None:
    for field, (key, scale) in _AMD_TABLE.items():
        note = ""
        if field == "lds_bytes_per_workgroup" and b.fact(key) is not None and b.values.get(field):
            note = (f"the arch table assumes {b.fact(key).value} KB of LDS per workgroup for {b.arch}; the device "
                    f"reports {b.values[field] / KIB:g} KB. Size LDS tiles by the live value.")
        b.check(field, b.fact(key), scale, note=note)
        b.from_table(field, b.fact(key), scale)
    cus = b.product_fact("cus")
    b.check("compute_units", cus, note=(
        f"the {b.product} entry lists {getattr(cus, 'value', '?')} CUs; this agent exposes "
        f"{b.values.get('compute_units')}: one GCD of a multi-die product or a compute partition (CPX/DPX), or "
        "CUs harvested/disabled. Per-device peaks are scaled to the live CU count."))
    b.check("max_clock_mhz", b.product_fact("peak_clock_ghz"), 1000, rel_tol=0.02)
    hbm, mem = b.product_fact("hbm_gib"), b.values.get("memory_bytes") or 0
    b.check("memory_bytes", hbm, GIB, rel_tol=0.06, note=(
        f"the {b.product} entry lists {getattr(hbm, 'value', '?')} GiB for the whole package; this device "
        f"reports {mem / GIB:.1f} GiB (usable VRAM of one GCD or memory partition, after driver reservations)."))
    b.check("l1_bytes", b.product_fact("l1_vector_cache_kib_per_cu"), KIB)
    b.check("l3_bytes", b.product_fact("infinity_cache_mib"), MIB)
    b.from_table("l1_bytes", b.product_fact("l1_vector_cache_kib_per_cu"), KIB)
    b.from_table("l3_bytes", b.product_fact("infinity_cache_mib"), MIB)
    b.from_table("max_clock_mhz", b.product_fact("peak_clock_ghz"), 1000)
    b.from_table("compute_units", b.product_fact("cus"))
    b.from_table("memory_bytes", b.product_fact("hbm_gib"), GIB)


_TORCH_FIELDS = {  # DeviceInfo field -> (TorchDeviceProps field, torch attribute name)
    "compute_units": ("multi_processor_count", "multi_processor_count"),
    "wavefront_size": ("warp_size", "warp_size"), "max_workgroup_size": ("max_threads_per_block", "max_threads_per_block"),
    "lds_bytes_per_workgroup": ("shared_memory_per_block_optin", "shared_memory_per_block_optin"),
    "lds_bytes_per_cu": ("shared_memory_per_multiprocessor", "shared_memory_per_multiprocessor"),
    "registers_per_cu": ("regs_per_multiprocessor", "regs_per_multiprocessor"),
    "l2_bytes": ("l2_cache_size", "L2_cache_size"), "memory_bytes": ("total_memory", "total_memory"),
}
_NV_TABLE = {
    "wavefront_size": ("warp_size", 1), "max_waves_per_cu": ("max_warps_per_sm", 1),
    "simds_per_cu": ("sm_subpartitions", 1), "max_workgroup_size": ("max_threads_per_block", 1),
    "registers_per_cu": ("registers_per_sm", 1), "max_registers_per_thread": ("max_registers_per_thread", 1),
    "lds_bytes_per_workgroup": ("smem_per_block_max_kb", KIB), "lds_bytes_per_cu": ("smem_per_sm_max_kb", KIB),
}


def build_nvidia_device(index: int, smi: NvsmiGpu | None, props: TorchDeviceProps | None, smi_detail: str,
                        torch_detail: str) -> tuple[DeviceInfo, list[Provenance]]:
    arch_src = None
    arch = sm_arch(props.major, props.minor) if props else None
    if arch:
        arch_src = ("torch", f"{torch_detail}: major.minor {props.major}.{props.minor}")
    elif smi and smi.compute_cap:
        arch, arch_src = "sm_" + smi.compute_cap.replace(".", ""), ("nvidia-smi", f"{smi_detail}: compute_cap")
    elif smi and smi.product_architecture in ARCH_BY_FAMILY:
        arch = ARCH_BY_FAMILY[smi.product_architecture]
        arch_src = ("nvidia-smi", f"{smi_detail}: product_architecture {smi.product_architecture}")
    b = DeviceBuilder(index, arch)
    if arch_src:
        b.provenance.append(Provenance(field=b.path("arch"), source=arch_src[0], detail=arch_src[1]))
    name = (smi.product_name if smi else None) or (props.name if props else None)
    b.product = match_product(b.arch, name)
    if b.product:
        b.provenance.append(Provenance(field=b.path("product"), source="nvidia-smi" if smi else "torch",
                                       detail=f"arch-table product matched from the name {name!r}"))
    if smi is not None:
        b.live("name", smi.product_name, "nvidia-smi", f"{smi_detail}: product_name")
        b.values.update(uuid=smi.uuid, pci_bus_id=smi.pci_bus_id)
        b.live("max_clock_mhz", smi.max_sm_clock_mhz, "nvidia-smi", f"{smi_detail}: max_clocks/sm_clock")
        b.live("memory_clock_mhz", smi.max_mem_clock_mhz, "nvidia-smi", f"{smi_detail}: max_clocks/mem_clock")
    if props is not None:
        b.live("name", props.name, "torch", f"{torch_detail}: name")
        for field, (attr, tattr) in _TORCH_FIELDS.items():
            b.live(field, getattr(props, attr), "torch", f"{torch_detail}: get_device_properties().{tattr}")
        if props.max_threads_per_multi_processor and b.values.get("wavefront_size"):
            b.live("max_waves_per_cu", props.max_threads_per_multi_processor // b.values["wavefront_size"], "torch",
                   f"{torch_detail}: max_threads_per_multi_processor / warp_size")
        if props.clock_rate_khz:
            b.live("max_clock_mhz", props.clock_rate_khz // 1000, "torch", f"{torch_detail}: clock_rate (kHz)")
    if smi is not None:
        b.live("memory_bytes", smi.memory_total_bytes, "nvidia-smi", f"{smi_detail}: fb_memory_usage/total")
    for field, (key, scale) in _NV_TABLE.items():
        b.check(field, b.fact(key), scale)
        b.from_table(field, b.fact(key), scale)
    b.check("compute_units", b.product_fact("sms"))
    b.check("l2_bytes", b.product_fact("l2_mb") or b.fact("l2_mb"), MIB, rel_tol=0.05)
    b.check("memory_bytes", b.product_fact("hbm_gb"), GIB, rel_tol=0.06)
    b.check("max_clock_mhz", b.product_fact("boost_clock_mhz"), rel_tol=0.02, pick="fp32_basis")
    b.from_table("l2_bytes", b.fact("l2_mb"), MIB)
    b.from_table("compute_units", b.product_fact("sms"))
    add_peaks(b, "fp16_tensor_dense_flops_per_clk_per_sm", label="fp16_bf16_tensor_dense")
    return b.finish()
