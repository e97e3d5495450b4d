"""Counter presets per arch, offline validation of counter names, and splitting into passes.

AMD names come from rocprofiler-sdk counter_defs.yaml as summarized in tests/fixtures/rocm/FORMATS.md §2.8
(gfx90a uses TCC_EA_*, gfx942/gfx950 TCC_EA0_*; GPUBusy/Wavefronts/MemUnitBusy only on gfx90a).
Presets use hardware counters plus the SDK's FETCH_SIZE/WRITE_SIZE (KB moved to/from HBM, evaluated by the
SDK with the per-arch expression), so derived metrics are computed by us with visible formulas.

Pass splitting: rocprofv3 fails a `pmc:` line that does not fit the hardware counter slots, so requests are
split greedily into several `pmc:` lines (one application pass each) under a CONSERVATIVE per-block limit
table (BLOCK_LIMITS, modeled on rocprofiler-compute's per-block perfmon limits; real hardware may allow more).
Derived counters count against the blocks of the counters their expression uses (DERIVED_COST).
On a live device `rocprofv3 --list-avail` replaces the offline name table.
"""

from __future__ import annotations

import difflib
import re

from evokernel_mcp.errors import BadInput
from evokernel_mcp.profile import stalls
from evokernel_mcp.profile.models import AvailList

PRESET_NAMES = ("overview", "memory", "compute", "lds", "occupancy", "stalls")
AMD_ARCHES = ("gfx90a", "gfx942", "gfx950")

# ---------------------------------------------------------------- AMD presets (hardware counters)

_COMMON = {
    "overview": ["GRBM_GUI_ACTIVE", "SQ_WAVES", "SQ_BUSY_CYCLES", "SQ_WAVE_CYCLES", "SQ_INSTS_VALU",
                 "SQ_INSTS_MFMA", "SQ_ACTIVE_INST_VALU", "SQ_VALU_MFMA_BUSY_CYCLES", "SQ_INSTS_LDS",
                 "TCC_HIT_sum", "TCC_MISS_sum", "FETCH_SIZE", "WRITE_SIZE"],
    "memory": ["GRBM_GUI_ACTIVE", "FETCH_SIZE", "WRITE_SIZE", "TCC_HIT_sum", "TCC_MISS_sum",
               "TCP_TCC_READ_REQ_sum", "TCP_TCC_WRITE_REQ_sum", "SQ_INSTS_VMEM_RD", "SQ_INSTS_VMEM_WR",
               "SQ_WAVES"],
    "compute": ["GRBM_GUI_ACTIVE", "SQ_WAVES", "SQ_BUSY_CYCLES", "SQ_INSTS_VALU", "SQ_INSTS_SALU",
                "SQ_INSTS_MFMA", "SQ_ACTIVE_INST_VALU", "SQ_VALU_MFMA_BUSY_CYCLES",
                "SQ_INSTS_VALU_MFMA_MOPS_F16", "SQ_INSTS_VALU_MFMA_MOPS_BF16", "SQ_INSTS_VALU_MFMA_MOPS_F32",
                "SQ_INSTS_VALU_MFMA_MOPS_F64"],
    "lds": ["GRBM_GUI_ACTIVE", "SQ_WAVES", "SQ_INSTS_LDS", "SQ_LDS_BANK_CONFLICT", "SQ_LDS_IDX_ACTIVE",
            "SQ_ACTIVE_INST_LDS", "SQ_WAIT_INST_LDS"],
    "occupancy": ["GRBM_GUI_ACTIVE", "SQ_WAVES", "SQ_LEVEL_WAVES", "SQ_ACCUM_PREV_HIRES", "SQ_WAVE_CYCLES",
                  "SQ_BUSY_CYCLES"],
    "stalls": stalls.AMD_COUNTERS,
}

# Offline name table: every counter our presets use, the common core set of FORMATS.md §2.8, and the
# arch-specific names listed there. Not exhaustive (the SDK defines 442 gfx942 / 652 gfx950 names);
# names outside it are refused offline with close matches, and accepted when --list-avail lists them.
_CORE = set(sum(_COMMON.values(), [])) | {
    "GRBM_COUNT", "SQ_INSTS_SALU", "SQ_INSTS_SMEM", "SQ_INSTS_VMEM", "SQ_INSTS_BRANCH", "SQ_INSTS_VALU_MFMA_MOPS_I8",
    "SQ_INSTS_VALU_MFMA_MOPS_F8", "SQ_WAIT_INST_ANY", "SQ_WAIT_ANY", "SQ_THREAD_CYCLES_VALU", "SQ_ACTIVE_INST_ANY",
    "SQ_ACTIVE_INST_SALU", "SQ_ACTIVE_INST_VMEM", "SQ_INST_CYCLES_VMEM", "TCC_HIT", "TCC_MISS", "TCC_REQ_sum",
    "TCC_READ_sum", "TCC_WRITE_sum", "TCC_EA0_RDREQ_sum", "TCC_EA0_RDREQ_32B_sum", "TCC_EA0_WRREQ_sum",
    "TCC_EA0_WRREQ_64B_sum", "TCC_EA0_WRREQ_LEVEL_sum", "TCP_TOTAL_CACHE_ACCESSES_sum", "TCP_TCC_READ_REQ_sum",
    "TCP_TCC_WRITE_REQ_sum", "VALUUtilization", "OccupancyPercent", "MeanOccupancyPerCU", "TA_BUSY_avr",
    "TA_BUFFER_WAVEFRONTS_sum", "SPI_CS0_NUM_THREADGROUPS", "CPC_CPC_STAT_BUSY",
}
_GFX90A_ONLY = {"GPUBusy", "Wavefronts", "MemUnitBusy", "TCC_EA_RDREQ_sum", "TCC_EA_RDREQ_32B_sum",
                "TCC_EA_WRREQ_sum", "TCC_EA_WRREQ_64B_sum"}
_GFX950_EXTRA = {
    "SQ_INSTS_VALU_MFMA_F6F4", "SQ_INSTS_VALU_MFMA_MOPS_F6F4", "SQ_INSTS_VALU_MFMA_XF32",
    "SQ_INSTS_VALU_MFMA_MOPS_XF32", "SQ_VALU_MFMA_COEXEC_CYCLES", "SQ_ACTIVE_INST_VALU2",
    "SQ_INSTS_VALU_FLOPS_FP16", "SQ_INSTS_VALU_FLOPS_FP32", "SQ_INSTS_VALU_FLOPS_FP64", "SQ_INSTS_VALU_IOPS",
    "SQ_INSTS_LDS_LOAD", "SQ_INSTS_LDS_STORE", "SQ_INSTS_LDS_ATOMIC", "SQ_LDS_CMD_FIFO_FULL",
    "SQ_LDS_DATA_FIFO_FULL", "TCC_READ_SECTORS_sum", "TCC_WRITE_SECTORS_sum", "TCC_EA0_RDREQ_64B_sum",
    "TCC_EA0_RDREQ_128B_sum", "TCP_TCC_READ_REQ_LATENCY_sum", "TCP_TCC_WRITE_REQ_LATENCY_sum",
}


def known_counters(arch: str) -> set[str]:
    if arch not in AMD_ARCHES:
        raise BadInput(f"no offline counter table for {arch!r}; known: {', '.join(AMD_ARCHES)}")
    names = set(_CORE)
    if arch == "gfx90a":
        names = {n for n in names if not n.startswith("TCC_EA0_")} | _GFX90A_ONLY
        names -= {"SQ_INSTS_VALU_MFMA_MOPS_F8"}
    elif arch == "gfx950":
        names |= _GFX950_EXTRA
    return names


def preset_counters(preset: str, arch: str) -> list[str]:
    if preset not in PRESET_NAMES:
        raise BadInput(f"unknown preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}")
    names = list(_COMMON[preset])
    if arch == "gfx90a":
        names = [n for n in names if n != "SQ_INSTS_VALU_MFMA_MOPS_F8"]
    return names


# ---------------------------------------------------------------- pass splitting

BLOCK_LIMITS = {"SQ": 8, "TA": 2, "TD": 2, "TCP": 4, "TCC": 4, "CPC": 2, "CPF": 2, "SPI": 2, "GRBM": 2, "SQC": 2}
DEFAULT_BLOCK_LIMIT = 2
# Hardware counters each derived counter needs, per block (from the SDK expressions, FORMATS.md / counter_defs).
DERIVED_COST = {
    "FETCH_SIZE": {"gfx90a": {"TCC": 2}, "gfx942": {"TCC": 3}, "gfx950": {"TCC": 3}},
    "WRITE_SIZE": {"gfx90a": {"TCC": 2}, "gfx942": {"TCC": 2}, "gfx950": {"TCC": 2}},
    "GPUBusy": {"gfx90a": {"GRBM": 2}},
    "Wavefronts": {"gfx90a": {"SQ": 1}},
    "VALUUtilization": {"*": {"SQ": 3}},
    "OccupancyPercent": {"*": {"SQ": 1, "GRBM": 1}},
    "MeanOccupancyPerCU": {"*": {"SQ": 1, "GRBM": 1}},
    "MemUnitBusy": {"gfx90a": {"TA": 1, "GRBM": 1}},
}
_BLOCK_RE = re.compile(r"^(SQC|SQ|TA|TD|TCP|TCC|CPC|CPF|SPI|GRBM)_")


def counter_cost(name: str, arch: str, avail: AvailList | None = None) -> dict[str, int]:
    """Hardware counter slots per block that `name` needs."""
    if name in DERIVED_COST:
        c = DERIVED_COST[name]
        return dict(c.get(arch) or c.get("*") or {"SQ": 2})
    if avail is not None:
        rec = next((c for c in avail.counters if c.name == name), None)
        if rec is not None and rec.expression:
            cost: dict[str, int] = {}
            for base in set(re.findall(r"[A-Z][A-Z0-9]*_[A-Za-z0-9_]+", rec.expression)):
                m = _BLOCK_RE.match(base)
                blk = m.group(1) if m else "OTHER"
                cost[blk] = cost.get(blk, 0) + 1
            return cost or {"SQ": 1}
        if rec is not None and rec.block:
            return {rec.block: 1}
    m = _BLOCK_RE.match(name)
    return {m.group(1) if m else "OTHER": 1}


def split_passes(counters: list[str], arch: str, avail: AvailList | None = None) -> list[list[str]]:
    """Greedy first-fit of counters into passes under BLOCK_LIMITS; order within a pass kept."""
    passes: list[tuple[list[str], dict[str, int]]] = []
    for name in dict.fromkeys(counters):
        cost = counter_cost(name, arch, avail)
        for blk, n in cost.items():
            if n > BLOCK_LIMITS.get(blk, DEFAULT_BLOCK_LIMIT):
                # A single counter that needs more than the table allows still gets its own pass.
                break
        for names, used in passes:
            if all(used.get(b, 0) + n <= BLOCK_LIMITS.get(b, DEFAULT_BLOCK_LIMIT) for b, n in cost.items()):
                names.append(name)
                for b, n in cost.items():
                    used[b] = used.get(b, 0) + n
                break
        else:
            passes.append(([name], dict(cost)))
    return [names for names, _ in passes]


# ---------------------------------------------------------------- validation

def validate_counters(counters: list[str], arch: str, avail: AvailList | None = None) -> list[str]:
    """Return counters (deduplicated) or raise BadInput naming the unknown ones with close names."""
    if not counters:
        raise BadInput("counters is empty: pass counter names or a preset ("
                       + ", ".join(PRESET_NAMES) + ")")
    names = {c.name for c in avail.counters} if avail and not avail.truncated else known_counters(arch)
    source = "rocprofv3 --list-avail on this device" if avail and not avail.truncated else \
        f"the offline {arch} table (evokernel_mcp/profile/presets.py)"
    bad = [c for c in counters if c not in names]
    if bad:
        hints = []
        for c in bad:
            close = difflib.get_close_matches(c, sorted(names), n=4, cutoff=0.5)
            hints.append(f"{c!r} (close: {', '.join(close) or 'none'})")
        raise BadInput(f"unknown counter(s) for {arch} according to {source}: " + "; ".join(hints)
                       + ". Use a preset, or list counters with `rocprofv3 --list-avail` on the device.")
    return list(dict.fromkeys(counters))


# ---------------------------------------------------------------- NVIDIA (ncu metrics)

NCU_BASE = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed"]
NCU_FLOP = ["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
            "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
            "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
            "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum", "sm__inst_executed_pipe_tensor.sum",
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"]
# Tensor-pipe work in FLOPs (ncu counts an MMA's multiply-add as 2 ops): per source type, dense. Without them a
# GEMM on tensor cores would be counted by its FFMAs alone (derived.py then says the roofline does not apply).
NCU_TENSOR_FLOP = ["sm__ops_path_tensor_src_fp16.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
                   "sm__ops_path_tensor_src_tf32_dst_fp32.sum", "sm__ops_path_tensor_src_fp8_sparsity_off.sum",
                   "sm__ops_path_tensor_src_fp64.sum",
                   # their dense peaks per cycle and the SM clock: the roofline's peak where the arch table has none
                   "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained",
                   "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
                   "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
                   "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained",
                   "sm__ops_path_tensor_src_fp64.sum.peak_sustained", "sm__cycles_elapsed.avg.per_second"]
NCU_PRESETS: dict[str, list[str]] = {
    "overview": NCU_BASE + ["lts__t_sector_hit_rate.pct", "sm__warps_active.avg.pct_of_peak_sustained_active",
                            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
                            "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
                            "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"] + NCU_TENSOR_FLOP,
    "memory": NCU_BASE + ["lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct", "lts__t_bytes.sum",
                          "l1tex__t_bytes.sum"],
    "compute": NCU_BASE + NCU_FLOP + NCU_TENSOR_FLOP + [
        "sm__ops_path_tensor_src_int8.sum", "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active", "smsp__inst_executed.sum"],
    "lds": NCU_BASE + ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
                       "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
                       "smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum"],
    "occupancy": NCU_BASE + ["sm__warps_active.avg.pct_of_peak_sustained_active",
                             "sm__maximum_warps_per_active_cycle_pct", "launch__occupancy_limit_registers",
                             "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_blocks",
                             "launch__registers_per_thread", "launch__block_size", "launch__grid_size"],
    "stalls": NCU_BASE + ["sm__warps_active.avg.pct_of_peak_sustained_active"] + stalls.NV_METRICS,
}
_NCU_NAME_RE = re.compile(r"^[a-z0-9_]+__[a-z0-9_]+(\.[a-z0-9_]+)*$")


def ncu_metrics(preset: str | None, counters: list[str] | None) -> list[str]:
    if counters:
        bad = [c for c in counters if not _NCU_NAME_RE.match(c)]
        if bad:
            raise BadInput(f"not ncu metric names: {bad}; ncu names look like 'dram__bytes_read.sum' "
                           "(list them with `ncu --query-metrics`).")
        names = list(counters)
        if "gpu__time_duration.sum" not in names:
            names.append("gpu__time_duration.sum")
        return list(dict.fromkeys(names + [NCU_DEVICE_NAME]))
    if preset not in NCU_PRESETS:
        raise BadInput(f"unknown preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}")
    return list(dict.fromkeys(NCU_PRESETS[preset] + [NCU_DEVICE_NAME]))


NCU_DEVICE_NAME = "device__attribute_display_name"  # the live product name: the peaks follow it (collect.py)
