"""Models of the profile area: parsed profiler records (parser outputs) and the tool results.

Units live in names: *_ns nanoseconds, *_bytes bytes, cycles are shader-clock cycles.
`None` means "not measured".
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from evokernel_mcp.models import ErrorInfo, Model, Provenance
from evokernel_mcp.runtime.limits import Limits

Bound = Literal["memory-bound", "compute-bound", "latency-bound", "unknown"]


# ---------------------------------------------------------------- parsed records (parser outputs)

class KernelDispatchRecord(Model):
    """One row of rocprofv3 `*_kernel_trace.csv` (6.3-dev or 7.0 header)."""

    dispatch_id: int
    kernel: str
    kernel_id: int | None = None
    agent: str
    queue_id: int
    correlation_id: int | None = None
    start_ns: int
    end_ns: int
    duration_ns: int = Field(description="End_Timestamp - Start_Timestamp.")
    grid: tuple[int, int, int] = Field(description="Grid size in work-items (x, y, z).")
    workgroup: tuple[int, int, int]
    lds_bytes: int | None = None
    scratch_bytes: int | None = Field(default=None, description="Private segment bytes per work-item.")
    vgpr_count: int | None = None
    accum_vgpr_count: int | None = None
    sgpr_count: int | None = None


class CounterDispatch(Model):
    """Counters of one dispatch, pivoted from the long counter_collection CSV."""

    dispatch_id: int
    kernel: str
    agent: str
    grid_size: int = Field(description="Product of the grid dims, in work-items.")
    workgroup_size: int
    lds_bytes: int | None = None
    scratch_bytes: int | None = None
    vgpr_count: int | None = None
    accum_vgpr_count: int | None = None
    sgpr_count: int | None = None
    counters: dict[str, float]
    start_ns: int | None = None
    end_ns: int | None = None
    duration_ns: int | None = None
    grid: str | None = Field(default=None, description="Grid dims as the profiler prints them, e.g. '(30208, 6, 1)'.")
    block: str | None = Field(default=None, description="Block (workgroup) dims, e.g. '(128, 1, 1)'.")


class StatsRow(Model):
    """One row of any rocprofv3 `*_stats.csv` (or rocprof v1 results.stats.csv: no Min/Max/StdDev)."""

    name: str
    calls: int
    total_ns: int
    average_ns: float
    percentage: float
    min_ns: int | None = None
    max_ns: int | None = None
    stddev_ns: float | None = None


class AvailCounter(Model):
    """One record of `rocprofv3 --list-avail`."""

    name: str
    description: str = ""
    expression: str | None = Field(default=None, description="Derived counters only.")
    block: str | None = Field(default=None, description="Hardware counters only.")
    dimensions: str | None = None


class AvailList(Model):
    gpu: int | None = None
    arch: str | None = None
    counters: list[AvailCounter]
    truncated: bool = Field(default=False, description="The listing ended with '...'.")


class AgentRecord(Model):
    """One row of `*_agent_info.csv` with the fields we use typed; all raw fields kept."""

    node_id: int
    agent_type: str
    name: str
    cu_count: int
    simd_count: int
    max_waves_per_simd: int
    lds_kib: int
    wavefront_size: int
    num_xcc: int
    device_id: int
    max_clock_mhz: int
    max_waves_per_cu: int
    workgroup_max_size: int
    product_name: str = ""
    fields: dict[str, str]


class TraceInstruction(Model):
    """One ISA/SASS instruction with its per-instruction aggregates (ATT decoder or ncu source page)."""

    index: int = Field(description="Row index in the decoder's listing (code.json line) or the SASS listing.")
    instruction: str
    address: int | None = Field(default=None, description="Vaddr (AMD) or Address (NVIDIA).")
    code_object: int | None = None
    hits: int = 0
    cycles: float = Field(default=0, description="AMD: latency cycles summed over traced waves. NVIDIA: "
                          "warp-stall samples (All Samples).")
    stall_cycles: float | None = Field(default=None, description="AMD: stall cycles; NVIDIA: not-issued samples.")
    idle_cycles: float | None = None
    source: str | None = Field(default=None, description="file:line when debug info exists.")
    source_text: str | None = Field(default=None, description="The source line's text (ncu cuda,sass view).")
    shared_conflict_ways: float | None = Field(default=None, description="NVIDIA: 'L1 Conflicts Shared N-Way'.")
    is_label: bool = Field(default=False, description="A kernel-name row ('; name'), not an instruction.")
    stall_reasons: dict[str, float] = Field(default_factory=dict, description="NVIDIA: samples per stall reason.")


class WaveTrace(Model):
    """One traced wave file (se*_sm*_sl*_wv*.json)."""

    se: str
    cu: int
    simd: int
    slot: int
    wave_id: int
    begin: int
    end: int
    duration_cycles: int
    num_insts: int
    instructions: list[tuple[int, int, int, int, int]] = Field(
        description="[time, category, stall, duration, code_line] per executed instruction.")
    timeline: list[tuple[int, int]] = Field(default_factory=list, description="[state, duration] pairs.")


# ---------------------------------------------------------------- tool results

class ToolInfo(Model):
    name: str = Field(description="'rocprofv3' or 'ncu'.")
    version: str | None = None
    path: str | None = None
    command: list[str] = Field(default_factory=list, description="The profiler command line that ran.")


class DerivedValue(Model):
    value: float
    unit: str
    formula: str = Field(description="How it was computed, in counter names.")


class PmcDispatch(Model):
    kernel: str
    dispatch_id: int | None = None
    duration_ns: float | None = None
    grid_size: int | None = None
    workgroup_size: int | None = None
    counters: dict[str, float] = Field(description="Measured counters only; static device attributes are in "
                                       "the result's device_attributes.")
    derived: dict[str, DerivedValue] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list, description="Why a derived value is absent (e.g. the "
                             "roofline does not apply).")


class DispatchRow(Model):
    """One line of the compact table of every profiled dispatch."""

    index: int | None = Field(default=None, description="The profiler's dispatch id (ncu ID, rocprofv3 Dispatch_Id).")
    kernel: str
    grid: str | None = None
    block: str | None = None
    duration_ns: float | None = None
    time_pct: float | None = Field(default=None, description="Share of all profiled dispatches' time.")
    metrics: dict[str, float] = Field(default_factory=dict, description="3-4 headline derived metrics (% of peak).")


class Finding(Model):
    text: str
    kind: Literal["bottleneck", "memory", "compute", "lds", "occupancy", "note", "stall"] = "note"
    evidence: dict[str, float | str]


class _Outcome(Model):
    """What profile_pmc and thread_trace both answer: the job's state, why it failed, how agent code was held."""

    state: Literal["done", "queued", "running", "failed", "cancelled"] = Field(
        default="done", description="Not 'done': the job outlived wait_s; call job_result(job_id, wait_s).")
    message: str | None = None
    error: ErrorInfo | None = Field(default=None, description="Why no profile came back: the candidate's fault "
                                    "(exception, crash, timeout, oom with the limit and role) or the harness's "
                                    "(harness: the reference or the profiler), as in verify_vs_pytorch.")
    isolation: str | None = Field(default=None, description="How the profiled candidate was contained: bwrap+uid, "
                                  "bwrap or process.")
    limits: Limits | None = Field(default=None, description="Memory, CPU-time and process limits of the processes "
                                  "that ran agent code.")
    tool: ToolInfo | None = None


class PmcResult(_Outcome):
    device: str | None = None
    arch: str | None = None
    preset: str | None = None
    counters_requested: list[str] = Field(default_factory=list)
    passes: list[list[str]] = Field(default_factory=list, description="rocprofv3: counters per application pass (one `pmc:` line "
                                    "each). Empty for ncu, which schedules its own replay passes.")
    dispatches: list[PmcDispatch] = Field(default_factory=list, description="Profiled dispatches in detail: "
                                          "the heaviest (longest) first, at most max_dispatches.")
    dispatches_total: int = 0
    dispatch_table: list[DispatchRow] = Field(default_factory=list, description="Every profiled dispatch in launch "
                                              "order, compact (name, index, grid, block, duration, headline metrics).")
    device_attributes: dict[str, float | str] = Field(default_factory=dict, description="Static device values "
                                                      "(ncu device__attribute_*), once; the full set is in the "
                                                      "artifact's device_attributes.json.")
    bound: Bound = "unknown"
    findings: list[Finding] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    degraded: bool = Field(default=False, description="True when part (or all) of the collection did not finish: "
                           "a profiler hang/abort or a counter group the hardware could not schedule. Missing "
                           "counters are absent (never zero); degraded_reasons says why.")
    degraded_reasons: list[str] = Field(default_factory=list)
    counters_not_collected: dict[str, str] = Field(default_factory=dict, description="Counter -> why it is "
                                                   "missing from every dispatch.")
    kernel_filter: str | None = Field(default=None, description="The kernel-name regex the profiler was given, "
                                      "and how it was chosen (kernel_filter_source).")
    kernel_filter_source: str | None = None
    artifact_id: str | None = Field(default=None, description="Raw profiler files; page with read_artifact.")
    job_id: str | None = None
    result_id: str | None = Field(default=None, description="Journal result id (set when `experiment` was given).")
    provenance: list[Provenance] = Field(default_factory=list)


class HotInstruction(Model):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    index: int
    instruction: str
    address: str | None = Field(default=None, description="The instruction's address (hex: Vaddr on AMD, Address on "
                                "NVIDIA), to find it in a disassembly.")
    klass: str = Field(alias="class", description="Instruction class (VALU FMA, DS, VMEM, waitcnt, NOP ...).")
    cycles: float
    stall_cycles: float | None = None
    hits: int
    source_line: str | None = None
    source_text: str | None = Field(default=None, description="The text of source_line (when the profiler has it).")
    fraction: float = Field(description="Share of all cycles (or samples) of the kernel.")
    neighbours: list[str] = Field(default_factory=list, description="Instructions just before and after.")


class TraceResult(_Outcome):
    kernel: str | None = None
    device: str | None = None
    cycles_unit: str | None = Field(default=None, description="What 'cycles' counts: 'cycles summed over traced waves' (ATT) or "
                             "'warp-stall samples' (ncu).")
    total_cycles: float | None = None
    instructions_total: int = 0
    class_breakdown: dict[str, float] = Field(default_factory=dict, description="Class -> fraction of cycles "
                                              "(sums to ~1).")
    hot_instructions: list[HotInstruction] = Field(default_factory=list)
    stall_reasons: dict[str, float] = Field(default_factory=dict, description="Reason -> fraction of stall cycles/samples.")
    source_lines: dict[str, float] = Field(default_factory=dict, description="Top source lines -> fraction.")
    findings: list[Finding] = Field(default_factory=list, description="Rules on the hot instructions and their "
                                    "stall reasons (waits on tensor cores, global-load scoreboard, barriers, "
                                    "shared-memory bank conflicts), each with its evidence.")
    notes: list[str] = Field(default_factory=list)
    degraded: bool = Field(default=False, description="True when no usable trace came back (profiler hang/abort, "
                           "or no traced wave even after wider CU/SE selections); degraded_reasons says why.")
    degraded_reasons: list[str] = Field(default_factory=list)
    artifact_id: str | None = None
    job_id: str | None = None
    result_id: str | None = Field(default=None, description="Journal result id (set when `experiment` was given).")
    provenance: list[Provenance] = Field(default_factory=list)


__all__ = [
    "AgentRecord", "AvailCounter", "AvailList", "Bound", "CounterDispatch", "DerivedValue", "DispatchRow", "Finding",
    "HotInstruction", "KernelDispatchRecord", "PmcDispatch", "PmcResult", "StatsRow", "ToolInfo",
    "TraceInstruction", "TraceResult", "WaveTrace",
]
