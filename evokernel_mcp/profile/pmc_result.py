"""profile_pmc's result from parsed profiler output: the heaviest dispatches in detail (measured counters only),
a compact table of every dispatch, static device values once, findings naming their dispatch, the artifact
(dispatches.jsonl first, so read_artifact's default is the full table) and the notes that say how to read it."""

from __future__ import annotations

import json

from evokernel_mcp import artifacts
from evokernel_mcp.models import Provenance
from evokernel_mcp.profile.derived import DeviceSpec, derive, derive_with_notes
from evokernel_mcp.profile.findings import findings_for
from evokernel_mcp.profile.models import CounterDispatch, DispatchRow, PmcDispatch, PmcResult
from evokernel_mcp.profile.ncu_parsers import split_static

MAX_RESULT_CHARS = 14_000  # ~3,500 tokens


def _pmc_dispatches(raw: list[CounterDispatch], spec: DeviceSpec, max_dispatches: int,
                    compile_waves_per_cu: float | None = None) -> list[PmcDispatch]:
    """The heaviest (longest) max_dispatches dispatches, longest first, one per kernel name before any repeat
    (a later iteration of the same kernel), with measured counters only (static device values are split off:
    device_attributes)."""
    by_time = sorted(raw, key=lambda d: -(d.duration_ns or 0))
    seen: set[str] = set()
    first = [d for d in by_time if not (d.kernel in seen or seen.add(d.kernel))]
    firsts = {id(d) for d in first}
    heavy = (first + [d for d in by_time if id(d) not in firsts])[:max_dispatches]
    return [_pmc_dispatch(d, spec, compile_waves_per_cu) for d in heavy]


def _pmc_dispatch(d: CounterDispatch, spec: DeviceSpec, compile_waves_per_cu: float | None = None) -> PmcDispatch:
    measured, _static = split_static(d.counters)
    derived, notes = derive_with_notes(d.counters, d.duration_ns, spec, compile_waves_per_cu)
    return PmcDispatch(kernel=d.kernel, dispatch_id=d.dispatch_id, duration_ns=d.duration_ns,
                       grid_size=d.grid_size or None, workgroup_size=d.workgroup_size or None,
                       counters=measured, derived=derived, notes=notes)


HEADLINE = ("dram_pct_of_peak", "sm_throughput", "valu_busy", "tensor_pipe_busy", "mfma_busy", "achieved_occupancy",
            "l2_hit_rate")
MAX_TABLE_ROWS = 40


def _dispatch_table(raw: list[CounterDispatch], spec: DeviceSpec) -> list[DispatchRow]:
    """Every dispatch in launch order: name, index, grid, block, duration, share of time, 4 headline metrics."""
    total = sum(d.duration_ns or 0 for d in raw)
    rows = []
    for d in sorted(raw, key=lambda d: d.dispatch_id):
        der = derive(d.counters, d.duration_ns, spec)
        head = {k: round(der[k].value, 1) for k in HEADLINE if k in der}
        rows.append(DispatchRow(index=d.dispatch_id, kernel=d.kernel[:80],
                                grid=d.grid or (str(d.grid_size) if d.grid_size else None),
                                block=d.block or (str(d.workgroup_size) if d.workgroup_size else None),
                                duration_ns=d.duration_ns,
                                time_pct=round(100 * d.duration_ns / total, 1) if total and d.duration_ns else None,
                                metrics=dict(list(head.items())[:4])))
    return rows


def _device_attributes(raw: list[CounterDispatch], names: list[str]) -> tuple[dict[str, float | str], str]:
    """(a few static device values for the result, all of them as JSON for the artifact)."""
    static: dict[str, float | str] = {}
    for d in raw:
        static.update(split_static(d.counters)[1])
    if names:
        static["device__attribute_display_name"] = names[0]
    short = {k.removeprefix("device__attribute_"): static[k] for k in DEVICE_HEADLINE if k in static}
    return short, json.dumps(static, indent=0, sort_keys=True) + "\n"


DEVICE_HEADLINE = ("device__attribute_display_name", "device__attribute_multiprocessor_count",
                   "device__attribute_clock_rate", "device__attribute_memory_clock_rate",
                   "device__attribute_l2_cache_size", "device__attribute_max_shared_memory_per_block_optin",
                   "device__attribute_compute_capability_major", "device__attribute_compute_capability_minor")


def _pmc_table(raw: list[CounterDispatch], spec: DeviceSpec, compile_waves_per_cu: float | None = None) -> str:
    """dispatches.jsonl: every dispatch in launch order, its measured counters and derived metrics."""
    ds = [_pmc_dispatch(d, spec, compile_waves_per_cu) for d in sorted(raw, key=lambda d: d.dispatch_id)]
    return "\n".join(json.dumps(d.model_dump(mode="json")) for d in ds) + "\n"


def short_argv(argv: list) -> list[str]:
    """The command line with long lists (metric names, pmc lines) elided; the full one is in the artifact."""
    return [a if len(str(a)) <= 160 else f"{str(a)[:60]}...({str(a).count(',') + 1} items)" for a in map(str, argv)]


def _pmc_result(tool, exe, ver, argv, spec, ds, total, files, counters, passes, preset,
                raw: list[CounterDispatch] | None = None) -> PmcResult:
    """The result: the detailed dispatches (heaviest first), the compact table of every dispatch (from raw),
    findings naming their dispatch, and notes with the exact read_artifact call for the full table."""
    files = dict(files) | {"command.txt": " ".join(map(str, argv)) + "\n"}
    table_file = "dispatches.jsonl" if "dispatches.jsonl" in files else next(iter(files))
    aid = artifacts.put("profile_pmc", files, detail=f"{tool} {ver or ''} raw outputs; {table_file} = full table "
                        "(every dispatch: measured counters and derived metrics)")
    call = f"read_artifact('{aid}', name='{table_file}')"
    table = _dispatch_table(raw, spec) if raw else []
    prov = [Provenance(field="dispatches[].counters", source=tool, detail=f"{ver or 'version unknown'}; measured"),
            Provenance(field="dispatches[].duration_ns", source=tool,
                       detail="End_Timestamp - Start_Timestamp" if tool == "rocprofv3" else "gpu__time_duration.sum"),
            Provenance(field="dispatches[].derived", source="evokernel_mcp.profile.derived",
                       detail=f"formulas per value; peaks from {spec.source}"),
            Provenance(field="dispatch_table", source=tool, detail="every dispatch; metrics as dispatches[].derived"),
            Provenance(field="findings", source="evokernel_mcp.profile.findings", detail="rules on derived metrics")]
    res = PmcResult(tool={"name": tool, "version": ver, "path": exe, "command": short_argv(argv)},
                    arch=spec.arch, preset=preset, counters_requested=list(counters), passes=passes, dispatches=ds,
                    dispatches_total=total, dispatch_table=table[:MAX_TABLE_ROWS], artifact_id=aid,
                    provenance=prov)

    def notes():
        out = []
        if len(res.dispatches) < total:
            out.append(f"showing {len(res.dispatches)} of {total} dispatches in detail (the longest first); "
                       f"all are in {call}")
        if len(res.dispatch_table) < len(table):
            out.append(f"dispatch_table shows {len(res.dispatch_table)} of {len(table)} rows; all are in {call}")
        return out

    res.notes = notes()
    res.bound, res.findings = findings_for(res.dispatches)
    wanted = set(counters)
    for d in res.dispatches:  # keep the default output small: first the counters nobody asked for
        if len(res.model_dump_json()) <= MAX_RESULT_CHARS:
            break
        d.counters = {k: v for k, v in d.counters.items() if k in wanted}
    if len(res.model_dump_json()) > MAX_RESULT_CHARS:  # then formulas already given by the first dispatch
        _share_formulas(res.dispatches)
    while len(res.dispatches) > 1 and len(res.model_dump_json()) > MAX_RESULT_CHARS:
        res.dispatches = res.dispatches[:-1]
        res.notes = notes()
        res.bound, res.findings = findings_for(res.dispatches)  # findings only name dispatches that are shown
    while len(res.dispatch_table) > 8 and len(res.model_dump_json()) > MAX_RESULT_CHARS:
        res.dispatch_table = res.dispatch_table[:-4]
        res.notes = notes()
    return res


def _share_formulas(ds: list[PmcDispatch]) -> None:
    """A formula equal to the first dispatch's for the same metric becomes a pointer to it."""
    if not ds:
        return
    first = {k: v.formula for k, v in ds[0].derived.items()}
    for d in ds[1:]:
        for k, v in d.derived.items():
            if first.get(k) == v.formula:
                v.formula = "as in dispatches[0]"
