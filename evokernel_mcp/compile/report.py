"""Per-kernel reports from a backend's output: resources (with provenance), occupancy, ISA summary.

AMD numbers come from the code object's own metadata (.amdgpu_metadata in the AMDGCN assembly);
NVIDIA numbers from ptxas -v (and cuobjdump -res-usage). Occupancy is computed from the arch table
(resources/gpu_arch/arch.yaml) by arch/occupancy.py; the ISA summary by compile/isa.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from evokernel_mcp.compile.models import BackendOutput, KernelReport
from evokernel_mcp.compile.options import CompileOptions, is_amd
from evokernel_mcp.errors import EvoError
from evokernel_mcp.models import Diagnostic, Provenance

log = logging.getLogger(__name__)

OCC_SRC = "resources/gpu_arch/arch.yaml"
CUDA_DEFAULT_BLOCK = 256


@dataclass
class Analysis:
    kernels: list[KernelReport] = field(default_factory=list)
    provenance: list[Provenance] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def prov(self, i: int, fields: str, source: str, detail: str | None = None) -> None:
        self.provenance.append(Provenance(field=f"kernels[{i}].{fields}", source=source, detail=detail))

    def note(self, message: str) -> None:
        self.diagnostics.append(Diagnostic(severity="note", message=message))


def _order(names: list[str], kernel: str) -> list[str]:
    """The requested kernel first, the other kernels of the module after it."""
    from evokernel_mcp.compile.isa import kernel_matches

    return sorted(names, key=lambda n: not kernel_matches(n, kernel))


def analyze(out: BackendOutput, *, language: str, kernel: str, target: str, options: CompileOptions) -> Analysis:
    a = Analysis()
    if is_amd(target):
        _analyze_amd(a, out, language=language, kernel=kernel, target=target, options=options)
    else:
        _analyze_nvidia(a, out, language=language, kernel=kernel, target=target, options=options)
    return a


def _amd_workgroup(a: Analysis, i: int, language: str, meta, facts: dict, options: CompileOptions) -> int | None:
    if language == "triton" and "triton_num_warps" in facts:
        wg = int(facts["triton_num_warps"]) * int(meta.wavefront_size or 64)
        a.prov(i, "occupancy", "triton.compile", f"workgroup = num_warps {facts['triton_num_warps']} x wavefront")
        return wg
    if options.workgroup_size:
        return options.workgroup_size
    wg = meta.max_flat_workgroup_size
    a.note(f"{meta.name}: options.workgroup_size not given; occupancy assumes max_flat_workgroup_size={wg} "
           "(from __launch_bounds__ or the compiler default 1024). Pass options.workgroup_size for your launch.")
    return wg


def _analyze_amd(a: Analysis, out: BackendOutput, *, language: str, kernel: str, target: str,
                 options: CompileOptions) -> None:
    from evokernel_mcp.compile.amd_meta import parse_amdgpu_metadata

    try:
        metas = parse_amdgpu_metadata(out.asm or "")
    except EvoError as e:
        a.note(f"no resource report: {e}")
        return
    by_name = {m.name: m for m in metas}
    src = f"amdgpu metadata (.amdgpu_metadata in the AMDGCN assembly from {out.toolchain.name} " \
          f"{out.toolchain.version or ''})".replace(" )", ")")
    for i, name in enumerate(_order(list(by_name), kernel)):
        m = by_name[name]
        facts = out.resource_usage.get(name, {})
        arch_vgprs = (m.vgpr_count - m.agpr_count) if m.vgpr_count is not None and m.agpr_count else m.vgpr_count
        rep = KernelReport(
            name=name, vgpr_count=m.vgpr_count, arch_vgpr_count=arch_vgprs, agpr_count=m.agpr_count,
            sgpr_count=m.sgpr_count, lds_bytes=m.group_segment_fixed_size, scratch_bytes=m.private_segment_fixed_size,
            vgpr_spill_count=m.vgpr_spill_count, sgpr_spill_count=m.sgpr_spill_count,
            wavefront_size=m.wavefront_size, max_workgroup_size=m.max_flat_workgroup_size)
        a.prov(i, "vgpr_count,agpr_count,sgpr_count,lds_bytes,scratch_bytes,vgpr_spill_count,sgpr_spill_count,"
               "wavefront_size,max_workgroup_size", src, f"kernel {name}; vgpr_count is the unified VGPR+AGPR count")
        if m.agpr_count:
            a.prov(i, "arch_vgpr_count", "computed", "vgpr_count - agpr_count (architected VGPRs, rounded up to 4)")
        if language == "triton" and "triton_shared" in facts:
            rep.dynamic_lds_bytes = int(facts["triton_shared"])
            a.prov(i, "dynamic_lds_bytes", "triton.compile metadata",
                   "metadata.shared: LDS Triton allocates at launch (dynamic; not in group_segment_fixed_size)")
        wg = _amd_workgroup(a, i, language, m, facts, options)
        rep.occupancy = _amd_occupancy(a, i, target, rep, wg, options)
        rep.isa_summary = _isa(a, i, "amdgcn", out.asm or "", name, src)
        a.kernels.append(rep)


def _amd_occupancy(a: Analysis, i: int, target: str, rep: KernelReport, wg: int | None, options: CompileOptions):
    if rep.vgpr_count is None or rep.sgpr_count is None or wg is None:
        return None
    try:
        from evokernel_mcp.arch.occupancy import amd_occupancy

        occ = amd_occupancy(target, vgpr_count=rep.vgpr_count, sgpr_count=rep.sgpr_count,
                            lds_bytes=(rep.lds_bytes or 0) + (rep.dynamic_lds_bytes or 0), workgroup_size=wg,
                            waves_per_eu=options.waves_per_eu or None)
    except (ImportError, EvoError, KeyError, ValueError) as e:
        a.note(f"{rep.name}: occupancy not computed: {e}")
        return None
    a.prov(i, "occupancy", OCC_SRC, f"{target} rules (unified VGPR file, SGPRs, LDS per CU, waves/EU cap); "
           f"workgroup of {wg} threads; inputs from the metadata above")
    return occ


def _isa(a: Analysis, i: int, kind: str, text: str, name: str, src: str):
    if not text:
        return None
    try:
        from evokernel_mcp.compile import isa

        summary = isa.summarize_amdgcn(text, kernel=name) if kind == "amdgcn" else isa.summarize_sass(text, kernel=name)
    except (ImportError, EvoError, ValueError) as e:
        a.note(f"{name}: no ISA summary: {e}")
        return None
    a.prov(i, "isa_summary", f"compile/isa.py over the {kind} text", src)
    return summary


def _nv_workgroup(a: Analysis, i: int, name: str, facts: dict, options: CompileOptions) -> int:
    if "triton_num_warps" in facts:
        a.prov(i, "occupancy", "triton.compile", f"block = num_warps {facts['triton_num_warps']} x 32 threads")
        return int(facts["triton_num_warps"]) * 32
    if options.workgroup_size:
        return options.workgroup_size
    a.note(f"{name}: options.workgroup_size not given; occupancy assumes {CUDA_DEFAULT_BLOCK} threads per block. "
           "Pass options.workgroup_size for your launch.")
    return CUDA_DEFAULT_BLOCK


def _analyze_nvidia(a: Analysis, out: BackendOutput, *, language: str, kernel: str, target: str,
                    options: CompileOptions) -> None:
    names = [n for n in out.resource_usage if "registers" in out.resource_usage[n]]
    if not names:
        a.note("no resource report: neither ptxas -v nor cuobjdump -res-usage listed a kernel")
    for i, name in enumerate(_order(names, kernel)):
        f = out.resource_usage[name]
        dyn = f.get("triton_shared") if language == "triton" else None
        rep = KernelReport(
            name=name, registers=f.get("registers"), lds_bytes=f.get("shared_bytes"), dynamic_lds_bytes=dyn,
            scratch_bytes=f.get("stack_frame_bytes", f.get("local_bytes")), spill_stores_bytes=f.get("spill_stores_bytes"),
            spill_loads_bytes=f.get("spill_loads_bytes"), wavefront_size=32)
        a.prov(i, "registers,lds_bytes,scratch_bytes,spill_stores_bytes,spill_loads_bytes", str(f.get("source")),
               f"{out.toolchain.name} {out.toolchain.version or ''}; scratch_bytes = stack frame per thread".strip())
        if dyn is not None:
            a.prov(i, "dynamic_lds_bytes", "triton.compile metadata", "metadata.shared (dynamic shared memory)")
        wg = _nv_workgroup(a, i, name, f, options)
        rep.occupancy = _nv_occupancy(a, i, target, rep, wg)
        rep.isa_summary = _isa(a, i, "sass", out.sass or "", name, "cuobjdump -sass")
        a.kernels.append(rep)


def _nv_occupancy(a: Analysis, i: int, target: str, rep: KernelReport, threads: int):
    if rep.registers is None:
        return None
    arch = "sm_90" if target.startswith("sm_90") else target
    try:
        from evokernel_mcp.arch.occupancy import nvidia_occupancy

        occ = nvidia_occupancy(arch, registers_per_thread=rep.registers,
                               shared_bytes_per_block=(rep.lds_bytes or 0) + (rep.dynamic_lds_bytes or 0),
                               threads_per_block=threads)
    except (ImportError, EvoError, KeyError, ValueError) as e:
        a.note(f"{rep.name}: occupancy not computed for {target}: {e}")
        return None
    a.prov(i, "occupancy", OCC_SRC, f"{arch} rules (registers, shared memory, warps, blocks per SM); "
           f"block of {threads} threads")
    return occ
