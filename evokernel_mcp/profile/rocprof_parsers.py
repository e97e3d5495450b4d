"""Pure parsers for rocprofv3 outputs: text -> models.

Formats per ROCm version: tests/fixtures/rocm/FORMATS.md §2-3. Every parser takes the text and a
`where` label (usually the file name) so a ParseError names the file and line/field.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

from evokernel_mcp.errors import ParseError
from evokernel_mcp.profile.models import (
    AgentRecord,
    AvailCounter,
    AvailList,
    CounterDispatch,
    KernelDispatchRecord,
    StatsRow,
    TraceInstruction,
    WaveTrace,
)

TOOL = "rocprofv3"


class Table:
    """A CSV with a normalized header; rows keep their 1-based line numbers for error messages."""

    def __init__(self, text: str, where: str, tool: str = TOOL, required: tuple[str, ...] = ()):
        self.where, self.tool = where, tool
        if not text.strip():
            raise ParseError(tool, f"{where} line 1", message="empty file")
        reader = csv.reader(io.StringIO(text), skipinitialspace=True, strict=True)
        try:
            rows = [(reader.line_num, r) for r in reader]
        except csv.Error as e:
            raise ParseError(tool, f"{where} line {reader.line_num}", message=f"malformed CSV: {e}") from None
        self.header = [h.strip() for h in rows[0][1]]
        missing = [c for c in required if c not in self.header]
        if missing:
            raise ParseError(tool, f"{where} line 1 (header)", message=f"missing column(s) {missing}; "
                             f"header is {self.header}")
        self.rows: list[tuple[int, dict[str, str]]] = []
        for line, r in rows[1:]:
            if not r or all(not c.strip() for c in r):
                continue
            if len(r) != len(self.header):
                raise ParseError(tool, f"{where} line {line}", message=f"{len(r)} fields, header has "
                                 f"{len(self.header)} (truncated or malformed row)")
            self.rows.append((line, dict(zip(self.header, r))))

    def has(self, col: str) -> bool:
        return col in self.header

    def num(self, line: int, row: dict[str, str], col: str, kind: Callable[[str], Any] = int, optional=False):
        if col not in row:
            if optional:
                return None
            raise ParseError(self.tool, f"{self.where} line {line}", message=f"no field {col!r}")
        raw = row[col].strip()
        try:
            if kind is int:
                return int(float(raw)) if ("." in raw or "e" in raw.lower()) else int(raw)
            return kind(raw)
        except ValueError:
            raise ParseError(self.tool, f"{self.where} line {line} field {col}",
                             message=f"{raw!r} is not a number") from None


def _agent(v: str) -> str:
    return v.strip()


# ---------------------------------------------------------------- kernel trace / counters / stats

KERNEL_TRACE_REQUIRED = ("Kind", "Agent_Id", "Queue_Id", "Dispatch_Id", "Kernel_Name", "Start_Timestamp",
                         "End_Timestamp")


def parse_rocprofv3_kernel_trace(text: str, where: str = "kernel_trace.csv") -> list[KernelDispatchRecord]:
    """`*_kernel_trace.csv`, 6.3-dev (Private/Group_Segment_Size) or 7.0 (LDS_Block_Size, VGPR_Count ...)."""
    t = Table(text, where, required=KERNEL_TRACE_REQUIRED)
    out = []
    for line, r in t.rows:
        start, end = t.num(line, r, "Start_Timestamp"), t.num(line, r, "End_Timestamp")
        if end < start:
            raise ParseError(TOOL, f"{where} line {line}", message=f"End_Timestamp {end} < Start_Timestamp {start}")
        lds_col = "LDS_Block_Size" if t.has("LDS_Block_Size") else "Group_Segment_Size"
        scr_col = "Scratch_Size" if t.has("Scratch_Size") else "Private_Segment_Size"
        out.append(KernelDispatchRecord(
            dispatch_id=t.num(line, r, "Dispatch_Id"), kernel=r["Kernel_Name"],
            kernel_id=t.num(line, r, "Kernel_Id", optional=True), agent=_agent(r["Agent_Id"]),
            queue_id=t.num(line, r, "Queue_Id"), correlation_id=t.num(line, r, "Correlation_Id", optional=True),
            start_ns=start, end_ns=end, duration_ns=end - start,
            grid=tuple(t.num(line, r, f"Grid_Size_{a}") for a in "XYZ"),
            workgroup=tuple(t.num(line, r, f"Workgroup_Size_{a}") for a in "XYZ"),
            lds_bytes=t.num(line, r, lds_col, optional=True), scratch_bytes=t.num(line, r, scr_col, optional=True),
            vgpr_count=t.num(line, r, "VGPR_Count", optional=True),
            accum_vgpr_count=t.num(line, r, "Accum_VGPR_Count", optional=True),
            sgpr_count=t.num(line, r, "SGPR_Count", optional=True),
        ))
    return out


COUNTER_REQUIRED = ("Dispatch_Id", "Agent_Id", "Grid_Size", "Kernel_Name", "Workgroup_Size", "Counter_Name",
                    "Counter_Value")


def parse_rocprofv3_counter_collection(text: str, where: str = "counter_collection.csv") -> list[CounterDispatch]:
    """`*_counter_collection.csv` (6.2.2, 6.3-dev, 7.0): long format pivoted to one record per dispatch,
    in order of first appearance."""
    t = Table(text, where, required=COUNTER_REQUIRED)
    by_id: dict[int, CounterDispatch] = {}
    for line, r in t.rows:
        did = t.num(line, r, "Dispatch_Id")
        name = r["Counter_Name"].strip()
        if not name:
            raise ParseError(TOOL, f"{where} line {line} field Counter_Name", message="empty counter name")
        value = t.num(line, r, "Counter_Value", float)
        d = by_id.get(did)
        if d is None:
            start = t.num(line, r, "Start_Timestamp", optional=True)
            end = t.num(line, r, "End_Timestamp", optional=True)
            d = by_id[did] = CounterDispatch(
                dispatch_id=did, kernel=r["Kernel_Name"], agent=_agent(r["Agent_Id"]),
                grid_size=t.num(line, r, "Grid_Size"), workgroup_size=t.num(line, r, "Workgroup_Size"),
                lds_bytes=t.num(line, r, "LDS_Block_Size", optional=True),
                scratch_bytes=t.num(line, r, "Scratch_Size", optional=True),
                vgpr_count=t.num(line, r, "VGPR_Count", optional=True),
                accum_vgpr_count=t.num(line, r, "Accum_VGPR_Count", optional=True),
                sgpr_count=t.num(line, r, "SGPR_Count", optional=True), counters={},
                start_ns=start, end_ns=end,
                duration_ns=(end - start) if start is not None and end is not None else None,
            )
        elif d.kernel != r["Kernel_Name"]:
            raise ParseError(TOOL, f"{where} line {line}", message=f"dispatch {did} has two kernel names")
        # Counter_Value is already reduced over dimensions; a repeated name for one dispatch is summed.
        d.counters[name] = d.counters.get(name, 0.0) + value
    return list(by_id.values())


STATS_REQUIRED = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage")


def parse_rocprofv3_stats(text: str, where: str = "kernel_stats.csv") -> list[StatsRow]:
    """Any `*_stats.csv` of rocprofv3 (kernel/domain/hip_api/memory_copy) or rocprof v1 results.stats.csv."""
    t = Table(text, where, required=STATS_REQUIRED)
    return [StatsRow(
        name=r["Name"], calls=t.num(line, r, "Calls"), total_ns=t.num(line, r, "TotalDurationNs"),
        average_ns=t.num(line, r, "AverageNs", float), percentage=t.num(line, r, "Percentage", float),
        min_ns=t.num(line, r, "MinNs", optional=True), max_ns=t.num(line, r, "MaxNs", optional=True),
        stddev_ns=t.num(line, r, "StdDev", float, optional=True),
    ) for line, r in t.rows]


def parse_rocprofv3_agent_info(text: str, where: str = "agent_info.csv") -> list[AgentRecord]:
    """`*_agent_info.csv` (53 columns); CPU and GPU agents."""
    req = ("Node_Id", "Agent_Type", "Name", "Cu_Count", "Simd_Count", "Max_Waves_Per_Simd", "Lds_Size_In_Kb",
           "Wave_Front_Size", "Num_Xcc", "Device_Id", "Max_Engine_Clk_Fcompute", "Max_Waves_Per_Cu",
           "Workgroup_Max_Size")
    t = Table(text, where, required=req)
    return [AgentRecord(
        node_id=t.num(line, r, "Node_Id"), agent_type=r["Agent_Type"], name=r["Name"],
        cu_count=t.num(line, r, "Cu_Count"), simd_count=t.num(line, r, "Simd_Count"),
        max_waves_per_simd=t.num(line, r, "Max_Waves_Per_Simd"), lds_kib=t.num(line, r, "Lds_Size_In_Kb"),
        wavefront_size=t.num(line, r, "Wave_Front_Size"), num_xcc=t.num(line, r, "Num_Xcc"),
        device_id=t.num(line, r, "Device_Id"), max_clock_mhz=t.num(line, r, "Max_Engine_Clk_Fcompute"),
        max_waves_per_cu=t.num(line, r, "Max_Waves_Per_Cu"), workgroup_max_size=t.num(line, r, "Workgroup_Max_Size"),
        product_name=r.get("Product_Name", ""), fields=dict(r),
    ) for line, r in t.rows]


# ---------------------------------------------------------------- --list-avail

def parse_rocprofv3_list_avail(text: str, where: str = "list-avail.txt") -> AvailList:
    """`rocprofv3 -L/--list-avail` text: blank-line separated records of `Key :\\tvalue` lines."""
    gpu, arch, counters = None, None, []
    cur: dict[str, str] = {}
    truncated = False

    def flush(lineno: int):
        nonlocal cur
        if cur:
            if "Counter_Name" not in cur:
                raise ParseError(TOOL, f"{where} line {lineno}", message=f"record without Counter_Name: {cur}")
            counters.append(AvailCounter(name=cur["Counter_Name"], description=cur.get("Description", ""),
                                         expression=cur.get("Expression"), block=cur.get("Block"),
                                         dimensions=cur.get("Dimensions")))
        cur = {}

    in_counters = False
    for i, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if line.strip() == "...":
            truncated = True
            continue
        if not line.strip():
            flush(i)
            continue
        if ":" not in line:
            raise ParseError(TOOL, f"{where} line {i}", message=f"expected 'Key : value', got {line!r}")
        key, _, val = line.partition(":")
        key, val = key.strip(), val.strip()
        if key == "GPU" and val.isdigit():
            gpu = int(val)
        elif key == "Name" and not cur:
            arch = val
            in_counters = in_counters or line.startswith("Name:")
        elif key in ("Counter_Name", "Description", "Expression", "Block", "Dimensions"):
            if key == "Counter_Name":
                flush(i)
            cur[key] = val
    flush(len(text.splitlines()) + 1)
    if not counters:
        raise ParseError(TOOL, where, message="no Counter_Name records found")
    return AvailList(gpu=gpu, arch=arch, counters=counters, truncated=truncated)


# ---------------------------------------------------------------- ATT (thread trace decoder output)

def parse_att_stats_csv(text: str, where: str = "stats.csv") -> list[TraceInstruction]:
    """Per-instruction stats: 7.0 `stats_ui_output_agent_*_dispatch_*.csv` (CodeObj,Vaddr,Instruction,Hitcount,
    Latency,Stall,Idle,Source) or the May-2025 `att_output.csv` (no Stall/Idle). Rows in file order."""
    t = Table(text, where, required=("CodeObj", "Vaddr", "Instruction", "Hitcount", "Latency"))
    out = []
    for idx, (line, r) in enumerate(t.rows):
        ins = r["Instruction"]
        out.append(TraceInstruction(
            index=idx, instruction=ins, code_object=t.num(line, r, "CodeObj"), address=t.num(line, r, "Vaddr"),
            hits=t.num(line, r, "Hitcount"), cycles=t.num(line, r, "Latency", float),
            stall_cycles=t.num(line, r, "Stall", float, optional=True),
            idle_cycles=t.num(line, r, "Idle", float, optional=True),
            source=(r.get("Source") or None), is_label=ins.lstrip().startswith(";"),
        ))
    return out


def _load_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(TOOL, f"{where} line {e.lineno} column {e.colno}", message=f"malformed JSON: {e.msg}") from None


def parse_att_code_json(text: str, where: str = "code.json") -> list[TraceInstruction]:
    """`code.json` rows [ISA, type(100=label), LineNumber, Source, Codeobj, Vaddr, Hit, Latency(, Stall, Idle)].
    TraceInstruction.index is LineNumber (the index the wave files reference)."""
    data = _load_json(text, where)
    if not isinstance(data, dict) or not isinstance(data.get("code"), list):
        raise ParseError(TOOL, f"{where} field 'code'", message="expected an object with a 'code' list")
    out = []
    for i, row in enumerate(data["code"]):
        if not isinstance(row, list) or len(row) < 8:
            raise ParseError(TOOL, f"{where} code[{i}]", message=f"expected >= 8 fields, got {row!r:.80}")
        try:
            out.append(TraceInstruction(
                index=int(row[2]), instruction=str(row[0]), code_object=int(row[4]), address=int(row[5]),
                hits=int(row[6]), cycles=float(row[7]),
                stall_cycles=float(row[8]) if len(row) > 8 else None,
                idle_cycles=float(row[9]) if len(row) > 9 else None,
                source=str(row[3]) or None, is_label=(row[1] == 100),
            ))
        except (TypeError, ValueError) as e:
            raise ParseError(TOOL, f"{where} code[{i}]", message=f"bad field: {e}") from None
    return out


def parse_att_filenames(text: str, where: str = "filenames.json") -> dict[str, Any]:
    """`filenames.json` -> {version, gfxip, waves: [(se, simd, slot, n, filename, begin, end)]}."""
    data = _load_json(text, where)
    if not isinstance(data, dict) or "wave_filenames" not in data:
        raise ParseError(TOOL, f"{where} field 'wave_filenames'", message="missing")
    waves = []
    try:
        for se, simds in data["wave_filenames"].items():
            for simd, slots in simds.items():
                for slot, ns in slots.items():
                    for n, (fname, begin, end) in ns.items():
                        waves.append((int(se), int(simd), int(slot), int(n), str(fname), int(begin), int(end)))
    except (TypeError, ValueError, AttributeError) as e:
        raise ParseError(TOOL, f"{where} field 'wave_filenames'", message=f"unexpected shape: {e}") from None
    return {"version": data.get("version"), "gfxip": data.get("gfxip"), "gfxv": data.get("gfxv"),
            "counter_names": data.get("counter_names", []), "waves": sorted(waves)}


def parse_att_wave(text: str, where: str = "wave.json") -> WaveTrace:
    """One `se*_sm*_sl*_wv*.json` wave file."""
    data = _load_json(text, where)
    try:
        w = data["wave"]
        return WaveTrace(
            se=str(data["name"]), cu=int(w["cu"]), simd=int(w["simd"]), slot=int(w["slot"]), wave_id=int(w["id"]),
            begin=int(w["begin"]), end=int(w["end"]), duration_cycles=int(data["duration"]),
            num_insts=int(data["num_insts"]), instructions=[tuple(x[:5]) for x in w["instructions"]],
            timeline=[tuple(x[:2]) for x in w.get("timeline", [])],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ParseError(TOOL, f"{where} field {e}", message="missing or malformed wave field") from None


def parse_att_occupancy(text: str, where: str = "occupancy.json") -> dict[str, Any]:
    """`occupancy.json`: per-SE event lists plus 'dispatches' and 'version'. Events are kept raw (packed
    integers in decoder 3.0.0, [time, cu, simd, slot, start, kernel_id] lists in 7.0)."""
    data = _load_json(text, where)
    if not isinstance(data, dict):
        raise ParseError(TOOL, where, message="expected a JSON object")
    se = {k: v for k, v in data.items() if k.isdigit()}
    for k, v in se.items():
        if not isinstance(v, list):
            raise ParseError(TOOL, f"{where} field {k!r}", message="expected a list of events")
    return {"shader_engines": {k: len(v) for k, v in se.items()}, "dispatches": data.get("dispatches", {}),
            "version": data.get("version")}
