"""Presets, pass splitting, derived metrics, findings and instruction classing."""

from __future__ import annotations

from pathlib import Path

import pytest

from evokernel_mcp.errors import BadInput
from evokernel_mcp.profile import presets
from evokernel_mcp.profile.derived import DeviceSpec, derive
from evokernel_mcp.profile.findings import classify, findings_for
from evokernel_mcp.profile.models import CounterDispatch, PmcDispatch
from evokernel_mcp.profile.rocprof_parsers import parse_att_code_json, parse_rocprofv3_list_avail
from evokernel_mcp.profile.rocprofv3 import merge_passes
from evokernel_mcp.profile.trace import classify_amd, classify_sass, summarize

ROCM_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocm"

MI300X = DeviceSpec(arch="gfx942", vendor="amd", compute_units=304, num_xcc=8, max_waves_per_cu=32,
                    peak_gbs=5300.0, peak_tflops={"bf16_matrix": 1307.4}, source="test")


@pytest.mark.parametrize("arch", presets.AMD_ARCHES)
@pytest.mark.parametrize("preset", presets.PRESET_NAMES)
def test_presets_valid_and_split(arch, preset):
    names = presets.validate_counters(presets.preset_counters(preset, arch), arch)
    passes = presets.split_passes(names, arch)
    assert sorted(sum(passes, [])) == sorted(names)
    for p in passes:
        used = {}
        for n in p:
            for b, k in presets.counter_cost(n, arch).items():
                used[b] = used.get(b, 0) + k
        assert all(v <= presets.BLOCK_LIMITS.get(b, presets.DEFAULT_BLOCK_LIMIT) for b, v in used.items())


def test_memory_preset_needs_several_passes():
    passes = presets.split_passes(presets.preset_counters("memory", "gfx942"), "gfx942")
    assert len(passes) >= 2
    assert not any("FETCH_SIZE" in p and "WRITE_SIZE" in p for p in passes)  # 3 + 2 TCC slots > 4


def test_arch_specific_names():
    assert "TCC_EA_RDREQ_sum" in presets.known_counters("gfx90a")
    assert "TCC_EA0_RDREQ_sum" not in presets.known_counters("gfx90a")
    assert "GPUBusy" not in presets.known_counters("gfx942")
    assert "SQ_INSTS_VALU_MFMA_MOPS_F6F4" in presets.known_counters("gfx950")
    assert "SQ_INSTS_VALU_MFMA_MOPS_F6F4" not in presets.known_counters("gfx942")


def test_unknown_counter_lists_close_names():
    with pytest.raises(BadInput, match=r"SQ_WAVEZ.*close: .*SQ_WAVES"):
        presets.validate_counters(["SQ_WAVEZ"], "gfx942")
    with pytest.raises(BadInput, match="GPUBusy"):
        presets.validate_counters(["GPUBusy"], "gfx950")


def test_list_avail_drives_cost_of_derived():
    avail = parse_rocprofv3_list_avail((ROCM_FIXTURES / "rocprofv3" / "docs_rocm7.0_list-avail_gfx90a.txt").read_text())
    assert presets.counter_cost("ALUStalledByLDS", "gfx90a", avail) == {"SQ": 2, "GRBM": 1}
    assert presets.counter_cost("SQ_WAVES", "gfx90a", avail) == {"SQ": 1}


def test_ncu_metrics():
    m = presets.ncu_metrics("memory", None)
    assert "dram__bytes_read.sum" in m and "gpu__time_duration.sum" in m
    custom = presets.ncu_metrics(None, ["sm__cycles_elapsed.avg"])
    assert custom == ["sm__cycles_elapsed.avg", "gpu__time_duration.sum", "device__attribute_display_name"]
    with pytest.raises(BadInput):
        presets.ncu_metrics(None, ["SQ_WAVES"])


def _cd(did, kernel, counters, dur=None):
    return CounterDispatch(dispatch_id=did, kernel=kernel, agent="a", grid_size=1, workgroup_size=1,
                           counters=counters, duration_ns=dur)


def test_merge_passes_by_kernel_ordinal():
    p1 = [_cd(1, "a", {"X": 1}, 100), _cd(2, "b", {"X": 2}, 200), _cd(3, "a", {"X": 3}, 300)]
    p2 = [_cd(7, "a", {"Y": 10}), _cd(8, "b", {"Y": 20}), _cd(9, "a", {"Y": 30})]
    m = merge_passes([p1, p2], [])
    assert [(d.kernel, d.counters) for d in m] == [("a", {"X": 1, "Y": 10}), ("b", {"X": 2, "Y": 20}),
                                                   ("a", {"X": 3, "Y": 30})]


def test_derived_amd_memory_bound():
    # 1 GiB moved in 250 us on a 5.3 TB/s device = 81% of peak
    c = {"FETCH_SIZE": 512 * 1024, "WRITE_SIZE": 512 * 1024, "TCC_HIT_sum": 30, "TCC_MISS_sum": 70,
         "GRBM_GUI_ACTIVE": 8 * 500_000, "SQ_ACTIVE_INST_VALU": 304 * 500_000 * 0.1,
         "SQ_ACCUM_PREV_HIRES": 304 * 500_000 * 8.0}
    d = derive(c, 250_000, MI300X)
    assert d["dram_bytes"].value == 1024 ** 3
    assert d["dram_gbs"].value == pytest.approx(1024 ** 3 / 250_000, rel=1e-4)
    assert d["dram_pct_of_peak"].value == pytest.approx(81.03, abs=0.01)
    assert d["l2_hit_rate"].value == 30.0 and "TCC_HIT_sum" in d["l2_hit_rate"].formula
    assert d["valu_busy"].value == pytest.approx(10.0)
    assert d["mean_waves_per_cu"].value == pytest.approx(8.0) and d["achieved_occupancy"].value == 25.0
    bound, f = classify(d)
    assert bound == "memory-bound" and "81%" in f.text and f.evidence["dram_pct_of_peak"] == 81.0


def test_derived_nvidia_and_findings():
    c = {"gpu__time_duration.sum": 1_000_000, "dram__bytes_read.sum": 1e8, "dram__bytes_write.sum": 1e8,
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": 6.0,
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 85.0,
         "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e12,
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": 50, "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": 100,
         "sm__warps_active.avg.pct_of_peak_sustained_active": 12.0}
    spec = DeviceSpec(arch="sm_90", vendor="nvidia", peak_gbs=3350, peak_tflops={"fp32": 66.9}, source="t")
    d = derive(c, 1_000_000, spec)
    assert d["dram_gbs"].value == 200.0 and d["flops"].value == 2e12
    assert d["arithmetic_intensity"].value == 10000.0 and d["lds_bank_conflict_rate"].value == 50.0
    disp = PmcDispatch(kernel="k", duration_ns=1e6, counters=c, derived=d)
    bound, found = findings_for([disp])
    assert bound == "compute-bound"
    kinds = {f.kind for f in found}
    assert {"bottleneck", "lds", "occupancy", "compute"} <= kinds
    assert all(f.evidence for f in found)


def test_latency_bound_and_unknown():
    from evokernel_mcp.profile.models import DerivedValue as DV
    assert classify({})[0] == "unknown"
    d = {"dram_pct_of_peak": DV(value=5, unit="%", formula="x"), "sm_throughput": DV(value=8, unit="%", formula="y")}
    assert classify(d)[0] == "latency-bound"


@pytest.mark.parametrize("ins,cls", [
    ("v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], a[0:3]", "MFMA"), ("s_waitcnt vmcnt(0)", "waitcnt"),
    ("s_nop 0", "NOP"), ("ds_read_b128 v[0:3], v1", "LDS"), ("buffer_load_dwordx4 v[0:3], v0, s[0:3], 0 offen", "VMEM load"),
    ("global_store_dword v[0:1], v2, off", "VMEM store"), ("v_fma_f32 v0, v1, v2, v3", "VALU FMA"),
    ("v_cvt_pk_bf16_f32 v0, v1, v2", "VALU conversion/packing"), ("s_load_dwordx2 s[2:3], s[0:1], 0x0", "SMEM"),
    ("s_cbranch_scc1 5", "branch"), ("s_barrier", "barrier"), ("s_add_u32 s0, s1, s2", "SALU"),
])
def test_classify_amd(ins, cls):
    assert classify_amd(ins) == cls


@pytest.mark.parametrize("ins,cls", [
    ("HMMA.16816.F32.BF16 R4, R8, R12, R4 ;", "tensor (MMA)"), ("FFMA R1, R2, R3, R1 ;", "FP32 FMA/arith"),
    ("@P0 LDG.E.128 R4, desc[UR4][R2.64] ;", "global load"), ("STG.E [R2.64], R4 ;", "global store"),
    ("LDS.128 R4, [R0] ;", "shared memory"), ("F2FP.BF16.F32.PACK_AB R0, R1, R2 ;", "conversion/packing"),
    ("BAR.SYNC.DEFER_BLOCKING 0x0 ;", "sync/barrier"), ("EXIT ;", "branch/control"), ("IMAD R1, R2, R3, R4 ;", "integer/logic"),
])
def test_classify_sass(ins, cls):
    assert classify_sass(ins) == cls


def test_summarize_att_fixture():
    rows = parse_att_code_json((ROCM_FIXTURES / "rocprofv3" / "att_gfx950_rocm6.4_skinny_M128" /
                                "ui_output_agent_1026_dispatch_20" / "code.json").read_text())
    br, hot, stall, src, total = summarize(rows, "amd", top_n=5)
    assert total == 6167428 and sum(br.values()) == pytest.approx(1.0, abs=1e-3)
    assert hot[0].instruction == "s_barrier" and hot[0].cycles == 741412 and hot[0].index == 544
    assert len(hot[0].neighbours) == 4 and hot[0].source_line.endswith("gemm_afp4wfp4.py:140")
    row = next(r for r in rows if r.index == 544)
    assert row.address is not None and hot[0].address == hex(row.address), "the disassembly's address, in hex"
    assert br["MFMA"] > 0.05 and br["barrier"] == pytest.approx(0.2173, abs=1e-4)


def test_compile_waves_per_simd_becomes_occupancy_vs_compile_limit():
    from evokernel_mcp.profile import collect

    c = {"GRBM_GUI_ACTIVE": 8 * 500_000, "SQ_ACCUM_PREV_HIRES": 304 * 500_000 * 8.0}  # 8 waves per CU achieved
    raw = [CounterDispatch(dispatch_id=1, kernel="k", agent="a", grid_size=1, workgroup_size=1, counters=c,
                           duration_ns=250_000)]
    d = collect._pmc_dispatches(raw, MI300X, 3, 3 * MI300X.simds_per_cu)[0].derived  # compile: 3 waves/SIMD
    assert d["occupancy_vs_compile_limit"].value == pytest.approx(100 * 8 / 12)
    assert "compile-time" in d["occupancy_vs_compile_limit"].formula
    assert "occupancy_vs_compile_limit" not in collect._pmc_dispatches(raw, MI300X, 3)[0].derived
