"""Result models of compile_kernel (names fixed by docs/api.md; more fields may be added)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evokernel_mcp.models import Diagnostic, Model, Provenance, ToolchainInfo


class Occupancy(Model):
    waves_per_simd: int | None = Field(default=None, description="AMD: resident waves per SIMD (runtime limit).")
    warps_per_sm: int | None = Field(default=None, description="NVIDIA: resident warps per SM.")
    workgroups_per_cu: int | None = Field(default=None, description="AMD: resident workgroups per CU.")
    blocks_per_sm: int | None = Field(default=None, description="NVIDIA: resident blocks per SM.")
    limiter: str = Field(description="Name of the binding limit (a key of `limits`).")
    limits: dict[str, int] = Field(description="Each limit in waves/SIMD (AMD) or warps/SM (NVIDIA).")
    explain: list[str] = Field(default_factory=list, description="The arithmetic behind each limit.")


class IsaSummary(Model):
    total: int = Field(description="Instructions in the kernel body.")
    classes: dict[str, int] = Field(description="Instruction count per class over the whole kernel.")
    hottest_loop: dict[str, int] | None = Field(
        default=None, description="Counts per class in the innermost/largest loop body, when a loop was found.")
    hottest_loop_label: str | None = None
    notable: list[str] = Field(default_factory=list, description="Short remarks (e.g. 'no MFMA', 'dwordx4 loads').")


class KernelReport(Model):
    name: str
    vgpr_count: int | None = Field(default=None, description="AMD: VGPRs (unified VGPR+AGPR on gfx90a+, as in metadata).")
    arch_vgpr_count: int | None = Field(default=None, description="AMD: architected VGPRs only, when known.")
    agpr_count: int | None = None
    sgpr_count: int | None = None
    lds_bytes: int | None = Field(default=None, description="Static LDS / shared memory bytes per workgroup.")
    dynamic_lds_bytes: int | None = None
    scratch_bytes: int | None = Field(default=None, description="Private/local memory bytes per lane/thread.")
    vgpr_spill_count: int | None = None
    sgpr_spill_count: int | None = None
    wavefront_size: int | None = None
    max_workgroup_size: int | None = None
    registers: int | None = Field(default=None, description="NVIDIA: registers per thread.")
    spill_stores_bytes: int | None = Field(default=None, description="NVIDIA: spill store bytes.")
    spill_loads_bytes: int | None = Field(default=None, description="NVIDIA: spill load bytes.")
    occupancy: Occupancy | None = None
    isa_summary: IsaSummary | None = None


class CompileResult(Model):
    ok: bool
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    toolchain: ToolchainInfo
    target: str
    language: Literal["triton", "hip", "cuda"]
    artifact_id: str | None = Field(default=None, description="Full assembly etc.: page with read_artifact.")
    artifact_files: list[str] = Field(default_factory=list)
    cached: bool = False
    compile_time_s: float | None = None
    kernels: list[KernelReport] = Field(default_factory=list)
    specialization: dict[str, str] | None = Field(default=None, description=(
        "Triton: per runtime argument, the launch specialization compiled in (divisible_by_16: a 16-byte-aligned "
        "pointer or an integer multiple of 16; equal_to_1: the constant 1; none), as Triton's JIT applies it."))
    result_id: str | None = Field(default=None, description="Journal result id (set when `experiment` was given).")
    provenance: list[Provenance] = Field(default_factory=list)


class BackendOutput(Model):
    """What one compiler backend (triton / hip / cuda) hands back to compile_kernel before analysis."""

    ok: bool
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    toolchain: ToolchainInfo
    asm: str | None = Field(default=None, description="AMDGCN assembly text (AMD) or PTX (NVIDIA).")
    sass: str | None = Field(default=None, description="NVIDIA: SASS disassembly.")
    binary: bytes | None = Field(default=None, description="HSACO / cubin bytes.")
    files: dict[str, str] = Field(default_factory=dict, description="Extra text files for the artifact (IR, logs).")
    resource_usage: dict[str, dict[str, int | str]] = Field(
        default_factory=dict, description="Per kernel raw resource facts the backend read (e.g. ptxas -v).")
    log: str = ""
