"""Runtime occupancy from the arch table (resources/gpu_arch/arch.yaml), with every limit and its arithmetic.

AMD (gfx90a/gfx942/gfx950): each limit in waves per SIMD; a workgroup's waves are spread over the CU's SIMDs and
the whole workgroup must fit on one CU, so the result is workgroups/CU = min over the per-CU limits, times
waves per workgroup / SIMDs per CU (the ROCm formula, S4 in the table). NVIDIA (sm_90): each limit in warps
per SM, after cuda_occupancy.h (S19): registers per warp rounded up to the allocation granule, per
sub-partition; shared memory per block + 1 KB reserved, rounded to the allocation granule.
No constant lives here: every number is read from the arch table.
"""

from __future__ import annotations

import math

from evokernel_mcp.arch.table import value
from evokernel_mcp.compile.models import Occupancy
from evokernel_mcp.errors import BadInput


def _roundup(x: int, g: int) -> int:
    return -(-x // g) * g


def _sgpr_waves(arch: str, sgprs: int) -> tuple[int, str]:
    table = value(arch, "sgpr_occupancy_limit")  # {'<=80': 10, '<=88': 9, '<=100': 8, '>100': 7}
    for key, waves in sorted(((k, v) for k, v in table.items() if k.startswith("<=")), key=lambda kv: int(kv[0][2:])):
        if sgprs <= int(key[2:]):
            return int(waves), key
    key = next(k for k in table if k.startswith(">"))
    return int(table[key]), key


def amd_occupancy(arch: str, *, vgpr_count: int, sgpr_count: int | None, lds_bytes: int, workgroup_size: int,
                  waves_per_eu: int | None = None, lds_per_cu_bytes: int | None = None) -> Occupancy:
    """Waves per SIMD for one kernel: VGPR (unified VGPR+AGPR), SGPR, LDS, workgroup slots, waves_per_eu caps."""
    if workgroup_size < 1 or vgpr_count < 0 or lds_bytes < 0:
        raise BadInput("workgroup_size must be >= 1, vgpr_count and lds_bytes >= 0")
    wave, simds = value(arch, "wavefront_size"), value(arch, "simds_per_cu")
    max_waves = value(arch, "max_waves_per_simd")
    wpg = math.ceil(workgroup_size / wave)
    limits: dict[str, int] = {"max_waves": max_waves}
    explain = [f"waves per workgroup = ceil({workgroup_size} / {wave}) = {wpg}; {simds} SIMDs per CU",
               f"max_waves: {max_waves} waves/SIMD (hardware wave slots)"]
    wg_limits: dict[str, int] = {}  # workgroups per CU per limit (CU-level limits)

    g, file_ = value(arch, "vgpr_alloc_granule"), value(arch, "vgprs_per_lane_per_simd_unified")
    alloc = _roundup(max(vgpr_count, 1), g)
    limits["vgpr"] = min(max_waves, file_ // alloc) if alloc <= value(arch, "max_vgprs_per_wave_total") else 0
    explain.append(f"vgpr: roundup({vgpr_count}, {g}) = {alloc} VGPRs (VGPR+AGPR) per lane; floor({file_} / {alloc})"
                   f" = {file_ // alloc}, capped at {max_waves} -> {limits['vgpr']} waves/SIMD")
    if sgpr_count is not None:
        limits["sgpr"], key = _sgpr_waves(arch, sgpr_count)
        limits["sgpr"] = min(limits["sgpr"], max_waves)
        explain.append(f"sgpr: {sgpr_count} SGPRs ({key}) -> {limits['sgpr']} waves/SIMD (capped at {max_waves})")
    else:
        explain.append("sgpr: SGPR count unknown, not a limit here")

    lds_cu = lds_per_cu_bytes if lds_per_cu_bytes is not None else value(arch, "lds_per_cu_kib") * 1024
    src = "live device" if lds_per_cu_bytes is not None else "arch table"
    if lds_bytes > 0:
        lg = value(arch, "lds_alloc_granule_bytes")
        lds_alloc = _roundup(lds_bytes, lg)
        wg_limits["lds"] = lds_cu // lds_alloc
        limits["lds"] = math.ceil(wg_limits["lds"] * wpg / simds)
        explain.append(f"lds: roundup({lds_bytes}, {lg}) = {lds_alloc} B per workgroup; floor({lds_cu} B per CU "
                       f"({src}) / {lds_alloc}) = {wg_limits['lds']} workgroups/CU; "
                       f"ceil({wg_limits['lds']} * {wpg} waves / {simds} SIMDs) = {limits['lds']} waves/SIMD")
    else:
        explain.append("lds: no LDS, not a limit")

    if wpg > 1:
        slots = value(arch, "max_workgroups_per_cu_barrier_limit")
        wg_limits["workgroup_slots"] = slots
        limits["workgroup_slots"] = math.ceil(slots * wpg / simds)
        explain.append(f"workgroup_slots: ceil({slots} workgroups/CU with barriers (>1 wave) * {wpg} / {simds}) = "
                       f"{limits['workgroup_slots']} waves/SIMD")
    if waves_per_eu:
        limits["waves_per_eu"] = waves_per_eu
        explain.append(f"waves_per_eu: compiler attribute caps occupancy at {waves_per_eu} waves/SIMD")

    per_simd = min(v for k, v in limits.items() if k not in wg_limits)
    wg_limits["per_simd_limits"] = per_simd * simds // wpg
    wg_per_cu = min(wg_limits.values())
    waves = min(math.ceil(wg_per_cu * wpg / simds), per_simd)  # on the busiest SIMD
    # ties: the hardware cap first (nothing in the kernel binds), then VGPRs (the usual lever)
    limiter = min(limits, key=lambda k: (limits[k], {"max_waves": 0, "vgpr": 1}.get(k, 2)))
    explain.append(f"result: workgroups/CU = min({', '.join(f'{k} {v}' for k, v in wg_limits.items())}) = "
                   f"{wg_per_cu}; waves/SIMD (busiest SIMD) = min(ceil({wg_per_cu} * {wpg} / {simds}), {per_simd})"
                   f" = {waves}; "
                   f"binding limit: {limiter}")
    return Occupancy(waves_per_simd=waves, workgroups_per_cu=wg_per_cu, limiter=limiter, limits=limits,
                     explain=explain)


def nvidia_occupancy(arch: str, *, registers_per_thread: int, shared_bytes_per_block: int,
                     threads_per_block: int) -> Occupancy:
    """Warps per SM for one kernel: registers, shared memory (+1 KB reserved per block), threads, blocks."""
    if threads_per_block < 1 or registers_per_thread < 0 or shared_bytes_per_block < 0:
        raise BadInput("threads_per_block must be >= 1, registers and shared bytes >= 0")
    ws = value(arch, "warp_size")
    if threads_per_block > value(arch, "max_threads_per_block"):
        raise BadInput(f"{threads_per_block} threads per block exceeds {value(arch, 'max_threads_per_block')}")
    wpb = math.ceil(threads_per_block / ws)
    max_warps, max_blocks = value(arch, "max_warps_per_sm"), value(arch, "max_blocks_per_sm")
    blocks: dict[str, int] = {"threads": max_warps // wpb, "blocks": max_blocks}
    explain = [f"warps per block = ceil({threads_per_block} / {ws}) = {wpb}",
               f"threads: floor({max_warps} warps/SM / {wpb}) = {blocks['threads']} blocks",
               f"blocks: {max_blocks} blocks/SM"]
    if registers_per_thread > 0:
        g, sub, nsub = (value(arch, k) for k in ("register_alloc_granule_per_warp", "registers_per_subpartition",
                                                 "sm_subpartitions"))
        per_warp = _roundup(registers_per_thread * ws, g)
        warps_sub = sub // per_warp if registers_per_thread <= value(arch, "max_registers_per_thread") else 0
        blocks["registers"] = warps_sub * nsub // wpb
        explain.append(f"registers: roundup({registers_per_thread} * {ws}, {g}) = {per_warp} per warp; "
                       f"floor({sub} / {per_warp}) = {warps_sub} warps per sub-partition * {nsub} = "
                       f"{warps_sub * nsub} warps; / {wpb} = {blocks['registers']} blocks")
    sm = value(arch, "smem_per_sm_max_kb") * 1024
    res = value(arch, "smem_reserved_per_block_kb") * 1024
    sg = value(arch, "smem_alloc_granule_bytes")
    per_block = _roundup(shared_bytes_per_block + res, sg)
    blocks["shared_memory"] = sm // per_block
    explain.append(f"shared_memory: roundup({shared_bytes_per_block} + {res} reserved, {sg}) = {per_block} B; "
                   f"floor({sm} B (max carveout) / {per_block}) = {blocks['shared_memory']} blocks")
    limits = {k: v * wpb for k, v in blocks.items()}
    nblocks = min(blocks.values())
    limiter = min(limits, key=lambda k: (limits[k], k == "blocks"))
    explain.append(f"result: blocks/SM = min({', '.join(f'{k} {v}' for k, v in blocks.items())}) = {nblocks}; "
                   f"warps/SM = {nblocks} * {wpb} = {nblocks * wpb}; binding limit: {limiter}")
    return Occupancy(warps_per_sm=nblocks * wpb, blocks_per_sm=nblocks, limiter=limiter, limits=limits,
                     explain=explain)
