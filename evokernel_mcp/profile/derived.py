"""Derived metrics per dispatch, each with its unit and formula in counter names.

`DeviceSpec` carries the peaks used for percentages (from the live device or the arch table; its
`source` goes into provenance). Nothing is computed when an input counter is missing (no stand-in zeros).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evokernel_mcp.profile import stalls
from evokernel_mcp.profile.models import DerivedValue

MFMA_FLOPS_PER_MOP = 512  # rocprofiler-compute: one SQ_INSTS_VALU_MFMA_MOPS_* unit = 512 FLOPs


@dataclass(frozen=True)
class DeviceSpec:
    arch: str
    vendor: str  # "amd" | "nvidia"
    compute_units: int | None = None
    num_xcc: int = 1
    simds_per_cu: int = 4
    max_waves_per_cu: int | None = None
    peak_gbs: float | None = None
    peak_tflops: dict[str, float] = field(default_factory=dict)
    source: str = "arch table"


def _dv(value: float, unit: str, formula: str) -> DerivedValue:
    return DerivedValue(value=round(float(value), 4), unit=unit, formula=formula)


def _amd(c: dict[str, float], dur: float | None, spec: DeviceSpec, out: dict[str, DerivedValue],
         compile_waves_per_cu: float | None) -> None:
    xcc = max(spec.num_xcc, 1)
    gui = c.get("GRBM_GUI_ACTIVE")
    gui_f = f"GRBM_GUI_ACTIVE/{xcc}" if xcc > 1 else "GRBM_GUI_ACTIVE"
    cycles = gui / xcc if gui else None  # the CSV value is summed over XCCs
    cus = spec.compute_units
    if "FETCH_SIZE" in c and "WRITE_SIZE" in c:
        b = (c["FETCH_SIZE"] + c["WRITE_SIZE"]) * 1024
        out["dram_bytes"] = _dv(b, "bytes", "(FETCH_SIZE + WRITE_SIZE) * 1024")
        if dur:
            gbs = b / dur
            out["dram_gbs"] = _dv(gbs, "GB/s", "(FETCH_SIZE + WRITE_SIZE) * 1024 / duration_ns")
            if spec.peak_gbs:
                out["dram_pct_of_peak"] = _dv(100 * gbs / spec.peak_gbs, "%",
                                              f"100 * dram_gbs / {spec.peak_gbs:g} (peak GB/s, {spec.source})")
    if "TCC_HIT_sum" in c and "TCC_MISS_sum" in c and (c["TCC_HIT_sum"] + c["TCC_MISS_sum"]) > 0:
        out["l2_hit_rate"] = _dv(100 * c["TCC_HIT_sum"] / (c["TCC_HIT_sum"] + c["TCC_MISS_sum"]), "%",
                                 "100 * TCC_HIT_sum / (TCC_HIT_sum + TCC_MISS_sum)")
    if cycles and cus:
        simds = cus * spec.simds_per_cu
        if "SQ_ACTIVE_INST_VALU" in c:
            out["valu_busy"] = _dv(100 * c["SQ_ACTIVE_INST_VALU"] * 4 / simds / cycles, "%",
                                   f"100 * SQ_ACTIVE_INST_VALU * 4 / {simds} SIMDs / ({gui_f})")
        if "SQ_VALU_MFMA_BUSY_CYCLES" in c:
            out["mfma_busy"] = _dv(100 * c["SQ_VALU_MFMA_BUSY_CYCLES"] / simds / cycles, "%",
                                   f"100 * SQ_VALU_MFMA_BUSY_CYCLES / {simds} SIMDs / ({gui_f})")
        if "SQ_ACCUM_PREV_HIRES" in c:
            waves = c["SQ_ACCUM_PREV_HIRES"] / cycles / cus
            out["mean_waves_per_cu"] = _dv(waves, "waves", f"SQ_ACCUM_PREV_HIRES / ({gui_f}) / {cus} CUs")
            if spec.max_waves_per_cu:
                out["achieved_occupancy"] = _dv(100 * waves / spec.max_waves_per_cu, "%",
                                                f"100 * mean_waves_per_cu / {spec.max_waves_per_cu}")
            if compile_waves_per_cu:
                out["occupancy_vs_compile_limit"] = _dv(100 * waves / compile_waves_per_cu, "%",
                                                        f"100 * mean_waves_per_cu / {compile_waves_per_cu:g} "
                                                        "(compile-time waves per CU)")
    lds_act = c.get("SQ_LDS_IDX_ACTIVE") or c.get("SQ_ACTIVE_INST_LDS")
    if "SQ_LDS_BANK_CONFLICT" in c and lds_act:
        den = "SQ_LDS_IDX_ACTIVE" if c.get("SQ_LDS_IDX_ACTIVE") else "SQ_ACTIVE_INST_LDS"
        out["lds_bank_conflict_rate"] = _dv(100 * c["SQ_LDS_BANK_CONFLICT"] / lds_act, "%",
                                            f"100 * SQ_LDS_BANK_CONFLICT / {den}")
    mops = [k for k in c if k.startswith("SQ_INSTS_VALU_MFMA_MOPS_") and k not in _INT_MOPS]
    if mops:
        out["flops"] = _dv(MFMA_FLOPS_PER_MOP * sum(c[k] for k in mops), "FLOP",
                           f"{MFMA_FLOPS_PER_MOP} * (" + " + ".join(sorted(mops)) + ") (MFMA only)")
    imops = [k for k in c if k in _INT_MOPS]
    if imops:  # integer MFMA work: operations, not FLOPs (no FLOP roofline is drawn from them)
        out["int_mfma_ops"] = _dv(MFMA_FLOPS_PER_MOP * sum(c[k] for k in imops), "OP",
                                  f"{MFMA_FLOPS_PER_MOP} * (" + " + ".join(sorted(imops)) + ") (integer MFMA)")


_INT_MOPS = ("SQ_INSTS_VALU_MFMA_MOPS_I8",)
_NV_FLOP = {"fp32": ("ffma", "fadd", "fmul"), "fp16": ("hfma", "hadd", "hmul"), "fp64": ("dfma", "dadd", "dmul")}


def _nvidia(c: dict[str, float], dur: float | None, spec: DeviceSpec, out: dict[str, DerivedValue]) -> None:
    rd, wr = c.get("dram__bytes_read.sum"), c.get("dram__bytes_write.sum")
    if rd is not None and wr is not None:
        out["dram_bytes"] = _dv(rd + wr, "bytes", "dram__bytes_read.sum + dram__bytes_write.sum")
        if dur:
            gbs = (rd + wr) / dur
            out["dram_gbs"] = _dv(gbs, "GB/s", "(dram__bytes_read.sum + dram__bytes_write.sum) / "
                                  "gpu__time_duration.sum[ns]")
            if spec.peak_gbs:
                out["dram_gbs_pct_of_table_peak"] = _dv(100 * gbs / spec.peak_gbs, "%",
                                                        f"100 * dram_gbs / {spec.peak_gbs:g} ({spec.source})")
    for name, metric in (("dram_pct_of_peak", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                         ("sm_throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                         ("memory_throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
                         ("tensor_pipe_busy", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"),
                         ("l2_hit_rate", "lts__t_sector_hit_rate.pct"),
                         ("l1_hit_rate", "l1tex__t_sector_hit_rate.pct"),
                         ("achieved_occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active")):
        if metric in c:
            out[name] = _dv(c[metric], "%", metric)
    if "sm__maximum_warps_per_active_cycle_pct" in c and "sm__warps_active.avg.pct_of_peak_sustained_active" in c \
            and c["sm__maximum_warps_per_active_cycle_pct"] > 0:
        out["occupancy_vs_compile_limit"] = _dv(
            100 * c["sm__warps_active.avg.pct_of_peak_sustained_active"] / c["sm__maximum_warps_per_active_cycle_pct"],
            "%", "100 * sm__warps_active.avg.pct_of_peak_sustained_active / sm__maximum_warps_per_active_cycle_pct")
    conf, wav = c.get("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"), \
        c.get("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    if conf is not None and wav:
        out["lds_bank_conflict_rate"] = _dv(100 * conf / wav, "%", "100 * l1tex__data_bank_conflicts_pipe_lsu_mem_"
                                            "shared.sum / l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    terms, total = [], 0.0
    for ops in _NV_FLOP.values():
        for op in ops:
            m = f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
            if m in c:
                k = 2 if op.endswith("fma") else 1
                total += k * c[m]
                terms.append(f"{k}*{m}" if k > 1 else m)
    tensor = [m for m in NV_TENSOR_FLOP if m in c]
    if tensor:
        out["tensor_flops"] = _dv(sum(c[m] for m in tensor), "FLOP", " + ".join(tensor)
                                  + " (ncu counts tensor-pipe ops as FLOPs: an FMA is 2)")
    itensor = [m for m in NV_TENSOR_INT if m in c]
    if itensor and sum(c[m] for m in itensor) > 0:
        out["tensor_int_ops"] = _dv(sum(c[m] for m in itensor), "OP", " + ".join(itensor) + " (integer MMA)")
    if terms or tensor:
        what = ("CUDA cores + tensor pipe" if terms and tensor else "tensor pipe only; CUDA-core FLOPs not "
                "collected" if tensor else "CUDA cores only; tensor-pipe FLOPs not collected")
        formula = " + ".join(terms + (["tensor_flops"] if tensor else []))
        out["flops"] = _dv(total + (out["tensor_flops"].value if tensor else 0.0), "FLOP", f"{formula} ({what})")


# ncu tensor-pipe op counters (names as recorded on an H200, Nsight Compute 2025.3.1; the per-source-type
# aggregates over HMMA and HGMMA, dense) -> the arch-table peak their FLOPs are measured against.
NV_TENSOR_FLOP = {
    "sm__ops_path_tensor_src_fp16.sum": ("fp16_bf16_tensor_dense",),
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": ("fp16_bf16_tensor_dense",),
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum": ("tf32_tensor_dense",),
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum": ("fp8_tensor_dense",),
    "sm__ops_path_tensor_src_fp64.sum": ("fp64_tensor",),
}
NV_TENSOR_INT = ("sm__ops_path_tensor_src_int8.sum",)
_NV_CORE_PEAK = {"ffma": ("fp32", "fp32_vector"), "fadd": ("fp32", "fp32_vector"), "fmul": ("fp32", "fp32_vector"),
                 "hfma": ("fp16_vector",), "hadd": ("fp16_vector",), "hmul": ("fp16_vector",),
                 "dfma": ("fp64_vector",), "dadd": ("fp64_vector",), "dmul": ("fp64_vector",)}


# Dense per-cycle peak of each tensor FLOP counter, device-wide (ncu `.peak_sustained`, recorded on an H200: bf16
# 540,672 = 4,096 FLOP/SM/cycle, the dense HGMMA rate); times the measured SM clock it stands in for a peak the arch
# table lacks (e.g. TF32 on the H200 row).
NV_TENSOR_PEAK = {
    "sm__ops_path_tensor_src_fp16.sum": "sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum":
        "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum":
        "sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
    "sm__ops_path_tensor_src_fp8_sparsity_off.sum": "sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained",
    "sm__ops_path_tensor_src_fp64.sum": "sm__ops_path_tensor_src_fp64.sum.peak_sustained",
}
NV_SM_CLOCK = "sm__cycles_elapsed.avg.per_second"


def _nvidia_peak(c: dict[str, float], spec: DeviceSpec) -> tuple[str | None, float | None, str | None]:
    """(peak names, FLOP-weighted peak TFLOP/s, why none) for the FLOPs counted: each kind of work against
    its own peak (time = sum flops_i / peak_i), so a TF32 GEMM is measured against the TF32 tensor peak and an
    FFMA loop against the FP32 peak. A tensor peak missing from the arch table comes from ncu's own dense
    peak per cycle times the measured SM clock, when both were collected."""
    work: list[tuple[str, float, str | None, float | None]] = []
    for op, keys in _NV_CORE_PEAK.items():
        m = f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"
        if c.get(m):
            k = _first_peak(keys, spec)
            work.append((m, (2 if op.endswith("fma") else 1) * c[m], k, spec.peak_tflops.get(k) if k else None))
    for m, keys in NV_TENSOR_FLOP.items():
        if c.get(m):
            k = _first_peak(keys, spec)
            if k:
                work.append((m, c[m], k, spec.peak_tflops[k]))
            elif c.get(NV_TENSOR_PEAK[m]) and c.get(NV_SM_CLOCK):
                work.append((m, c[m], f"{keys[0]} = {NV_TENSOR_PEAK[m]} * {NV_SM_CLOCK}",
                             c[NV_TENSOR_PEAK[m]] * c[NV_SM_CLOCK] / 1e12))
            else:
                work.append((m, c[m], None, None))
    if not work:
        return None, None, None
    missing = sorted({m for m, _, _, p in work if not p})
    if missing:
        return None, None, (f"no peak in the arch table ({spec.source}) for the work counted by "
                            + ", ".join(missing))
    total = sum(f for _, f, _, _ in work)
    peak = total / sum(f / p for _, f, _, p in work)
    return "+".join(sorted({k for _, _, k, _ in work})), peak, None


def _first_peak(keys: tuple[str, ...], spec: DeviceSpec) -> str | None:
    return next((k for k in keys if spec.peak_tflops.get(k)), None)


# MFMA MOPS counter suffix -> arch-table peak keys (first present wins), so a bf16 GEMM is measured against the
# bf16 matrix peak, not the device's highest (fp8/fp4) one.
_MOPS_PEAK = {"F16": ("fp16_matrix",), "BF16": ("bf16_matrix",), "F32": ("fp32_matrix",),
              "F64": ("fp64_matrix",), "F8": ("fp8_matrix", "fp8_matrix_scaled"),
              "XF32": ("tf32_xf32",), "F6F4": ("fp6_fp4_matrix",)}


def _amd_mfma_peak(counters: dict[str, float], spec: DeviceSpec) -> tuple[str | None, float | None]:
    """Peak TFLOP/s for the MFMA work counted: per dtype, weighted by its FLOPs (time = sum flops_i / peak_i).
    None when a counted dtype has no peak in the table (no roofline rather than one against the wrong peak)."""
    work: dict[str, tuple[str, float]] = {}
    for k, v in counters.items():
        if k.startswith("SQ_INSTS_VALU_MFMA_MOPS_") and k not in _INT_MOPS and v > 0:
            dt = k.removeprefix("SQ_INSTS_VALU_MFMA_MOPS_")
            key = next((p for p in _MOPS_PEAK.get(dt, ()) if spec.peak_tflops.get(p)), None)
            if key is None:
                return None, None
            work[dt] = (key, v)
    if not work:
        return None, None
    total = sum(v for _, v in work.values())
    peak = total / sum(v / spec.peak_tflops[key] for key, v in work.values())
    return "+".join(sorted(key for key, _ in work.values())), peak


def _peak_for_counted_flops(spec: DeviceSpec, counters: dict[str, float]) -> tuple[str | None, float | None,
                                                                                 str | None]:
    """The peak that matches the FLOPs the counters count (NVIDIA: CUDA-core and tensor-pipe work, each against
    its own peak; AMD: MFMA ops per dtype against the matrix peak of those dtypes), and why there is none."""
    if not spec.peak_tflops:
        return None, None, f"no peak TFLOP/s in the arch table ({spec.source})"
    if spec.vendor != "amd":
        return _nvidia_peak(counters, spec)
    name, peak = _amd_mfma_peak(counters, spec)
    return name, peak, None if peak else f"no matrix peak in the arch table ({spec.source}) for a counted dtype"


BUSY_PCT = 1.0  # a matrix pipe busier than this did work that a FLOP count without its counters would miss


def _uncounted_matrix_work(counters: dict[str, float], out: dict[str, DerivedValue], vendor: str) -> str | None:
    if vendor == "amd":
        busy = out.get("mfma_busy")
        counted = any(k.startswith("SQ_INSTS_VALU_MFMA_MOPS_") for k in counters)
        what = "MFMA", "SQ_INSTS_VALU_MFMA_MOPS_* (preset 'compute')"
    else:
        busy = out.get("tensor_pipe_busy")
        counted = any(m in counters for m in NV_TENSOR_FLOP)
        what = "tensor pipe", "sm__ops_path_tensor_src_* (presets 'overview' and 'compute')"
    if busy is not None and busy.value >= BUSY_PCT and not counted:
        return (f"roofline does not apply: the {what[0]} is {busy.value:.0f}% busy but its FLOPs were not "
                f"collected ({what[1]}); a FLOP count without them understates the work")
    return None


def derive_with_notes(counters: dict[str, float], duration_ns: float | None, spec: DeviceSpec,
                      compile_waves_per_cu: float | None = None) -> tuple[dict[str, DerivedValue], list[str]]:
    """Derived metrics, and notes saying why the roofline is absent where it does not apply."""
    out: dict[str, DerivedValue] = {}
    notes: list[str] = []
    if spec.vendor == "amd":
        _amd(counters, duration_ns, spec, out, compile_waves_per_cu)
    else:
        _nvidia(counters, duration_ns, spec, out)
    stalls.derive(counters, spec.vendor, out)
    gap = _uncounted_matrix_work(counters, out, spec.vendor)
    if gap:
        notes.append(gap)
        return out, notes
    if "flops" in out and out["flops"].value > 0 and out.get("dram_bytes") and out["dram_bytes"].value > 0:
        ai = out["flops"].value / out["dram_bytes"].value
        out["arithmetic_intensity"] = _dv(ai, "FLOP/byte", "flops / dram_bytes")
        peak_name, peak, why = _peak_for_counted_flops(spec, counters)
        if why:
            notes.append(f"roofline does not apply: {why}")
        if peak and not spec.peak_gbs:
            notes.append(f"roofline does not apply: no peak GB/s in the arch table ({spec.source})")
        if peak and spec.peak_gbs:
            ridge = peak * 1e3 / spec.peak_gbs
            out["roofline_ridge_point"] = _dv(ridge, "FLOP/byte", f"{peak:g} TFLOP/s ({peak_name}) * 1e3 / "
                                              f"{spec.peak_gbs:g} GB/s ({spec.source})")
            if duration_ns:
                achieved = out["flops"].value / duration_ns / 1e3
                attainable = min(peak, ai * spec.peak_gbs / 1e3)
                out["roofline_fraction"] = _dv(100 * achieved / attainable, "%",
                                               "100 * (flops / duration_ns / 1e3) / min(peak_tflops, "
                                               f"arithmetic_intensity * peak_gbs / 1e3); peak_tflops = {peak:.4g} "
                                               f"({peak_name})")
    return out, notes


def derive(counters: dict[str, float], duration_ns: float | None, spec: DeviceSpec,
           compile_waves_per_cu: float | None = None) -> dict[str, DerivedValue]:
    return derive_with_notes(counters, duration_ns, spec, compile_waves_per_cu)[0]
