"""Models of device discovery: what the parsers return (one per tool) and the query_rocminfo result.

Parser models hold exactly what a tool printed (None = the tool did not print it); DeviceReport is the
merged view the agent reads, each number with provenance.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from evokernel_mcp.models import Model, Provenance, ToolchainInfo

# ---------------------------------------------------------------- parser outputs (pure, per tool)


_ISA_ARCH = re.compile(r"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)(?=:|$)")


class RocmAgent(Model):
    """One HSA agent block of `rocminfo` (a GPU, or a CPU we later drop). Sizes are bytes."""

    agent_number: int | None = Field(default=None, description="N of the 'Agent N' header; None in excerpts.")
    line: int = Field(description="1-based line where the block starts.")
    name: str | None = None
    marketing_name: str | None = None
    vendor_name: str | None = None
    uuid: str | None = None
    device_type: str | None = None
    node: int | None = None
    bdfid: int | None = None
    chip_id: int | None = None
    compute_units: int | None = None
    simds_per_cu: int | None = None
    shader_engines: int | None = None
    wavefront_size: int | None = None
    workgroup_max_size: int | None = None
    max_waves_per_cu: int | None = None
    max_workitems_per_cu: int | None = None
    max_clock_mhz: int | None = None
    cacheline_bytes: int | None = None
    l1_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None
    lds_bytes_per_workgroup: int | None = Field(default=None, description="Size of the GROUP segment pool.")
    global_memory_bytes: int | None = Field(default=None, description="Largest GLOBAL segment pool.")
    isa_names: list[str] = Field(default_factory=list)
    key_lines: dict[str, int] = Field(default_factory=dict, description="field -> 1-based line it came from.")

    @property
    def arch(self) -> str | None:
        return arch_of(self)

    @property
    def is_gpu(self) -> bool:
        if self.device_type is not None:
            return self.device_type.upper() == "GPU"
        return self.arch is not None


class RocminfoReport(Model):
    rock_version: str | None = Field(default=None, description="'ROCk module version X is loaded'.")
    runtime_version: str | None = None
    agents: list[RocmAgent]

    @property
    def gpus(self) -> list[RocmAgent]:
        return [a for a in self.agents if a.is_gpu]


class AmdSmiGpu(Model):
    """The facts we use from one GPU of `amd-smi static` (JSON or text), or of `rocm-smi --json`."""

    tool: str = "amd-smi"
    gpu: int | None = None
    market_name: str | None = None
    target_graphics_version: str | None = None
    num_compute_units: int | None = None
    bdf: str | None = None
    vram_bytes: int | None = None
    vram_type: str | None = None
    max_gfx_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None


class NvsmiGpu(Model):
    """One <gpu> of `nvidia-smi -q -x`."""

    index: int
    pci_bus_id: str | None = None
    product_name: str | None = None
    product_architecture: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    max_sm_clock_mhz: int | None = None
    max_graphics_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    compute_cap: str | None = None


class NvsmiReport(Model):
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[NvsmiGpu]


class TorchDeviceProps(Model):
    """torch.cuda.get_device_properties(i), collected in a subprocess (None = not exposed by this torch)."""

    index: int
    name: str | None = None
    major: int | None = None
    minor: int | None = None
    uuid: str | None = None
    gcn_arch_name: str | None = None
    total_memory: int | None = None
    multi_processor_count: int | None = None
    l2_cache_size: int | None = None
    warp_size: int | None = None
    max_threads_per_multi_processor: int | None = None
    max_threads_per_block: int | None = None
    shared_memory_per_block: int | None = None
    shared_memory_per_block_optin: int | None = None
    shared_memory_per_multiprocessor: int | None = None
    regs_per_multiprocessor: int | None = None
    clock_rate_khz: int | None = None
    memory_clock_rate_khz: int | None = None
    memory_bus_width: int | None = None


class TorchProbe(Model):
    torch_version: str | None = None
    cuda_version: str | None = None
    hip_version: str | None = None
    devices: list[TorchDeviceProps] = Field(default_factory=list)
    error: str | None = None


# ---------------------------------------------------------------- the query_rocminfo result


class Conflict(Model):
    """A live value that contradicts the arch table. Both are returned; trust the live one."""

    field: str
    live_value: float | int | str
    live_source: str
    table_value: float | int | str
    table_source: str = Field(description="resources/gpu_arch/arch.yaml#<key> and its cited source.")
    note: str


class DeviceInfo(Model):
    """One GPU. Sizes in bytes, clocks in MHz, bandwidth in GB/s (1e9 B/s), peaks in TFLOP/s (TOP/s for int)."""

    index: int
    name: str = Field(description="Marketing/product name when known, else the arch name.")
    arch: str | None = Field(default=None, description="gfx90a / gfx942 / gfx950 / sm_90 ...")
    product: str | None = Field(default=None, description="Arch-table product entry matched from the name.")
    isa: list[str] = Field(default_factory=list, description="Full ISA target names (AMD).")
    uuid: str | None = None
    pci_bus_id: str | None = None
    chip_id: int | None = None
    compute_units: int | None = Field(default=None, description="CUs (AMD) or SMs (NVIDIA).")
    simds_per_cu: int | None = Field(default=None, description="SIMDs per CU (AMD) / SM sub-partitions (NVIDIA).")
    shader_engines: int | None = None
    wavefront_size: int | None = Field(default=None, description="Wavefront (AMD) / warp (NVIDIA) size.")
    max_workgroup_size: int | None = None
    max_waves_per_cu: int | None = Field(default=None, description="Resident waves per CU / warps per SM.")
    max_waves_per_simd: int | None = None
    vgprs_per_simd: int | None = Field(default=None, description="AMD: VGPRs per lane per SIMD (unified VGPR+AGPR).")
    max_vgprs_per_wave: int | None = Field(default=None, description="AMD: VGPR+AGPR a wave can address.")
    max_arch_vgprs_per_wave: int | None = None
    sgprs_per_simd: int | None = None
    max_sgprs_per_wave: int | None = None
    registers_per_cu: int | None = Field(default=None, description="NVIDIA: 32-bit registers per SM.")
    max_registers_per_thread: int | None = None
    lds_bytes_per_workgroup: int | None = Field(default=None, description="LDS (AMD GROUP segment) / opt-in "
                                                "shared memory (NVIDIA) one workgroup/block may use.")
    lds_bytes_per_cu: int | None = None
    l1_bytes: int | None = None
    l2_bytes: int | None = Field(default=None, description="As the tool reports it (rocminfo: per XCD on MI300).")
    l3_bytes: int | None = Field(default=None, description="AMD Infinity Cache (MALL).")
    cacheline_bytes: int | None = None
    max_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    memory_bytes: int | None = None
    peak_bandwidth_gbs: float | None = None
    peak_tflops: dict[str, float] = Field(default_factory=dict, description="dtype/pipe -> peak TFLOP/s.")
    conflicts: list[Conflict] = Field(default_factory=list)


class OfflineTarget(Model):
    """A compile target reachable without its GPU, and which compiler path on this machine reaches it."""

    target: str
    vendor: Literal["amd", "nvidia"]
    available: bool = Field(description="True when at least one compiler for it was found here.")
    compilers: list[str] = Field(default_factory=list, description="'name (path)' of each compiler found.")
    in_arch_table: bool = Field(description="Whether resources/gpu_arch/arch.yaml has facts for it.")


class DeviceReport(Model):
    backend: Literal["rocm", "cuda", "none"]
    devices: list[DeviceInfo] = Field(default_factory=list)
    offline_targets: list[OfflineTarget] = Field(default_factory=list)
    provenance: list[Provenance] = Field(default_factory=list)
    tools: list[ToolchainInfo] = Field(default_factory=list, description="Tools that answered, with versions.")
    notes: list[str] = Field(default_factory=list, description="What was tried and why a source was not used.")
    collected_at: str = Field(description="UTC time the facts were collected (ISO 8601).")
    cached: bool = Field(default=False, description="True when this is the per-process cached answer.")


def arch_of(agent: RocmAgent) -> str | None:
    """gfx target of an agent: its Name when that is a gfx name, else the first specific ISA name."""
    if agent.name and re.fullmatch(r"gfx[0-9a-f]+", agent.name):
        return agent.name
    for isa in agent.isa_names:
        m = _ISA_ARCH.search(isa)
        if m:
            return m.group(1)
    return None
