"""Runtime occupancy from the arch table, checked against arithmetic written out by hand."""

from __future__ import annotations

import pytest

from evokernel_mcp.arch.occupancy import amd_occupancy, nvidia_occupancy
from evokernel_mcp.arch.table import value
from evokernel_mcp.errors import BadInput


def test_arch_table_constants_used_below():
    # The hand arithmetic below relies on these table values; if the table changes, redo it.
    for arch in ("gfx942", "gfx950"):
        assert value(arch, "vgpr_alloc_granule") == 8 and value(arch, "vgprs_per_lane_per_simd_unified") == 512
        assert value(arch, "max_waves_per_simd") == 8 and value(arch, "simds_per_cu") == 4
        assert value(arch, "max_workgroups_per_cu_barrier_limit") == 16 and value(arch, "wavefront_size") == 64
    assert value("gfx950", "lds_per_cu_kib") == 160 and value("gfx950", "lds_alloc_granule_bytes") == 1280
    assert value("gfx942", "lds_per_cu_kib") == 64 and value("gfx942", "lds_alloc_granule_bytes") == 512


def test_155_vgprs_32k_lds_256_threads_gfx950():
    o = amd_occupancy("gfx950", vgpr_count=155, sgpr_count=None, lds_bytes=32 * 1024, workgroup_size=256)
    # waves per workgroup = 256 / 64 = 4
    # VGPR: roundup(155, 8) = 160; floor(512 / 160) = 3 waves/SIMD
    # LDS: roundup(32768, 1280) = 33280 B; floor(163840 / 33280) = 4 workgroups/CU -> 4 * 4 / 4 SIMDs = 4 waves/SIMD
    # workgroup slots: 16 workgroups/CU * 4 waves / 4 SIMDs = 16 waves/SIMD
    # max: 8 waves/SIMD.  Binding: VGPR, 3 waves/SIMD; workgroups/CU = floor(3 * 4 / 4) = 3
    assert o.limits == {"max_waves": 8, "vgpr": 3, "lds": 4, "workgroup_slots": 16}
    assert (o.waves_per_simd, o.workgroups_per_cu, o.limiter) == (3, 3, "vgpr")
    assert any("roundup(155, 8) = 160" in e for e in o.explain)
    assert any("floor(163840 B per CU (arch table) / 33280) = 4" in e for e in o.explain)


def test_same_kernel_on_gfx942_is_lds_bound():
    o = amd_occupancy("gfx942", vgpr_count=155, sgpr_count=None, lds_bytes=32 * 1024, workgroup_size=256)
    # VGPR: same 3 waves/SIMD.  LDS: roundup(32768, 512) = 32768; floor(65536 / 32768) = 2 workgroups/CU
    # -> 2 * 4 / 4 = 2 waves/SIMD.  Binding: LDS, 2 waves/SIMD, 2 workgroups/CU.
    assert o.limits == {"max_waves": 8, "vgpr": 3, "lds": 2, "workgroup_slots": 16}
    assert (o.waves_per_simd, o.workgroups_per_cu, o.limiter) == (2, 2, "lds")


def test_live_lds_size_overrides_the_table():
    o = amd_occupancy("gfx942", vgpr_count=155, sgpr_count=None, lds_bytes=32 * 1024, workgroup_size=256,
                      lds_per_cu_bytes=160 * 1024)
    assert o.limits["lds"] == 5 and o.limiter == "vgpr"  # floor(163840 / 32768) = 5 workgroups -> 5 waves/SIMD
    assert any("live device" in e for e in o.explain)


def test_sgpr_and_waves_per_eu_limits():
    o = amd_occupancy("gfx942", vgpr_count=40, sgpr_count=104, lds_bytes=0, workgroup_size=64, waves_per_eu=6)
    # VGPR: roundup(40, 8) = 40; floor(512 / 40) = 12 -> capped at 8.  SGPR 104 (> 100) -> 7.  waves_per_eu = 6.
    # One-wave workgroups: no barrier slot limit.  Binding: waves_per_eu (6).
    assert o.limits == {"max_waves": 8, "vgpr": 8, "sgpr": 7, "waves_per_eu": 6}
    assert (o.waves_per_simd, o.limiter) == (6, "waves_per_eu")
    o = amd_occupancy("gfx90a", vgpr_count=256, sgpr_count=80, lds_bytes=0, workgroup_size=1024)
    # 512 / 256 = 2 waves/SIMD; 16 waves per workgroup -> floor(2 * 4 / 16) = 0 workgroups fit? No: a 1024-thread
    # workgroup needs 16 waves = 4 per SIMD > 2, so it cannot launch at this VGPR count.
    assert o.limits["vgpr"] == 2 and o.workgroups_per_cu == 0 and o.waves_per_simd == 0


def test_lds_too_large_gives_zero():
    o = amd_occupancy("gfx942", vgpr_count=32, sgpr_count=None, lds_bytes=96 * 1024, workgroup_size=256)
    assert o.limits["lds"] == 0 and o.waves_per_simd == 0 and o.limiter == "lds"


def test_nvidia_sm90_register_bound():
    o = nvidia_occupancy("sm_90", registers_per_thread=128, shared_bytes_per_block=48 * 1024, threads_per_block=256)
    # 8 warps/block.  Registers: 128 * 32 = 4096 per warp (granule 256); 16384 / 4096 = 4 warps per sub-partition
    # * 4 = 16 warps -> 2 blocks.  Shared: 49152 + 1024 = 50176 (granule 128); 233472 / 50176 = 4 blocks.
    # Threads: 64 / 8 = 8 blocks.  Blocks: 32.  -> 2 blocks = 16 warps/SM, registers bind.
    assert o.limits == {"threads": 64, "blocks": 256, "registers": 16, "shared_memory": 32}
    assert (o.warps_per_sm, o.blocks_per_sm, o.limiter) == (16, 2, "registers")


def test_nvidia_sm90_shared_memory_bound():
    o = nvidia_occupancy("sm_90", registers_per_thread=32, shared_bytes_per_block=100 * 1024, threads_per_block=128)
    # 4 warps/block.  Registers: 1024 per warp; 16 warps per sub-partition * 4 = 64 warps -> 16 blocks.
    # Shared: 102400 + 1024 = 103424; floor(233472 / 103424) = 2 blocks -> 8 warps/SM.
    assert o.limits["shared_memory"] == 8 and o.limits["registers"] == 64
    assert (o.warps_per_sm, o.limiter) == (8, "shared_memory")


def test_bad_inputs():
    with pytest.raises(BadInput):
        amd_occupancy("gfx942", vgpr_count=10, sgpr_count=None, lds_bytes=0, workgroup_size=0)
    with pytest.raises(BadInput):
        nvidia_occupancy("sm_90", registers_per_thread=32, shared_bytes_per_block=0, threads_per_block=2048)
    with pytest.raises(BadInput):
        amd_occupancy("gfx1234", vgpr_count=10, sgpr_count=None, lds_bytes=0, workgroup_size=64)


def test_small_kernel_is_bound_by_the_hardware_cap_not_by_vgprs():
    # 8 VGPRs -> floor(512/8) = 64, capped at 8 waves/SIMD: nothing in the kernel binds, the cap does
    occ = amd_occupancy("gfx942", vgpr_count=8, sgpr_count=16, lds_bytes=0, workgroup_size=256)
    assert occ.waves_per_simd == 8 and occ.limiter == "max_waves"
