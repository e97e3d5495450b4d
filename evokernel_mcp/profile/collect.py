"""The profiling pipelines, as plain async functions (no job system here): each profiler run is a session
(Launch.session: the runner op of profile/runner_side.py, a sandboxed child with only the candidate, under the
profiler); its named outputs come back into a harness-only dir, where they are parsed, derived and summarized.
api.py wraps the pipelines in jobs."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from evokernel_mcp import artifacts, settings
from evokernel_mcp.errors import ParseError, ToolFailed, ToolTimeout
from evokernel_mcp.models import ErrorInfo, Provenance
from evokernel_mcp.profile import ncu, rocm_pipeline, rocprof_safe, rocprofv3
from evokernel_mcp.profile.derived import DeviceSpec
from evokernel_mcp.profile.models import (
    CounterDispatch,
    PmcResult,
    TraceInstruction,
    TraceResult,
)
from evokernel_mcp.profile.ncu_parsers import device_names, has_line_info, parse_ncu_raw_csv, parse_ncu_source_csv
from evokernel_mcp.profile.pmc_result import (  # noqa: F401  (the result assembly; tests reach it through here)
    MAX_RESULT_CHARS,
    _device_attributes,
    _pmc_dispatches,
    _pmc_result,
    _pmc_table,
    short_argv,
)
from evokernel_mcp.profile.rocprof_parsers import (
    parse_att_code_json,
    parse_att_filenames,
    parse_att_stats_csv,
    parse_att_wave,
    parse_rocprofv3_agent_info,
)
from evokernel_mcp.profile.trace import classify_amd, classify_sass, summarize, trace_findings

log = logging.getLogger(__name__)
MAX_WAVE_FILES = 64


@dataclass
class SessionOutcome:
    """One profiler run over the sandboxed candidate (profile/runner_side.py): the profiler's exit status
    (None when killed at its time limit), its messages, the exports' outputs, and the profiled child's or the
    reference's failure (error) when there was one. Named output files are under Launch.workdir."""

    returncode: int | None
    timed_out: bool = False
    stderr: str = ""
    exports: list = field(default_factory=list)  # runner_side.ExportOut
    error: ErrorInfo | None = None
    refused: list[str] = field(default_factory=list)


class SessionFailed(Exception):
    """The profiled session could not run the candidate (the reference, the candidate, a limit): the tool
    returns a result with this error (api.py), as verify does."""

    def __init__(self, error: ErrorInfo):
        super().__init__(error.message)
        self.error = error


# session(profiler_argv_before_dashes, *, timeout_s, files_in, collect, exports, export_if) -> SessionOutcome
Session = Callable[..., Awaitable[SessionOutcome]]


@dataclass
class Launch:
    """What a pipeline needs: the spec (candidate, warmup, iters, shape), a harness-only dir where the
    session's named outputs are put, the time limit, and the session runner (a runner op in the server)."""

    spec: dict
    workdir: Path
    timeout_s: float
    session: Session
    pass_timeout_s: float | None = None  # one rocprofv3 run; default min(150, max(30, timeout_s / 4))
    info: dict = field(default_factory=dict)  # what the sessions said about themselves (isolation, limits)

    async def run(self, profiler: list[str], *, timeout_s: float, **kw) -> SessionOutcome:
        out = await self.session(profiler, timeout_s=timeout_s, **kw)
        if out.error is not None:
            raise SessionFailed(out.error)
        return out


def iteration_range(spec: dict) -> str:
    w, n = int(spec.get("warmup", 1)), int(spec.get("iters", 1))
    return f"[{w + 1}-{w + n}]"


def table_spec(arch: str, vendor: str, device_name: str | None = None) -> DeviceSpec:
    """Peaks and unit counts from the arch table for the product named by the product setting
    (EVOKERNEL_PRODUCT), else by the live device name (ncu's device__attribute_display_name, rocprofv3's agent
    Product_Name), else the arch's default product."""
    from evokernel_mcp.arch import table

    forced = settings.get().product
    prod = table.product_for(arch, forced or device_name)  # a product key or a device name

    def pf(key):
        f = table.product_fact(arch, prod, key) if prod else None
        return f.value if f else None
    bw = pf("hbm_bandwidth_tb_s")
    tf = pf("peak_tflops") or {}
    cus = pf("cus") if vendor == "amd" else pf("sms")
    waves = table.value(arch, "max_waves_per_cu") if vendor == "amd" and table.has(arch, "max_waves_per_cu") else None
    why = (f"EVOKERNEL_PRODUCT={forced!r}" if forced else f"live device {device_name!r}" if device_name
           else "arch default (device name not known yet)")
    return DeviceSpec(arch=arch, vendor=vendor, compute_units=cus, max_waves_per_cu=waves,
                      peak_gbs=bw * 1000 if bw else None,
                      peak_tflops={k: float(v) for k, v in tf.items() if isinstance(v, (int, float))},
                      source=f"resources/gpu_arch/arch.yaml#{arch}.products.{prod} ({why})")


def _names_a_product(arch: str, device_name: str | None) -> bool:
    """True when the live name picks a product of the table (and the product setting does not override it)."""
    from evokernel_mcp.arch import table

    return bool(device_name) and not settings.get().product and \
        table.match_product(arch, device_name) is not None


def _amd_spec(base: DeviceSpec, out_dir: Path) -> DeviceSpec:
    """Refine the table spec with the run's agent_info CSV (measured: CUs, XCCs, wave slots)."""
    ai = sorted(out_dir.rglob("*_agent_info.csv"))
    if not ai:
        return base
    gpus = [a for a in parse_rocprofv3_agent_info(ai[0].read_text(), ai[0].name) if a.agent_type == "GPU"]
    if not gpus:
        return base
    g = gpus[0]
    if _names_a_product(base.arch, g.product_name):
        base = table_spec(base.arch, "amd", g.product_name)
    peak, tflops = base.peak_gbs, base.peak_tflops
    if base.compute_units and g.cu_count and g.cu_count != base.compute_units:
        share = g.cu_count / base.compute_units  # e.g. one MI250X GCD = half the package: its peaks too
        peak = peak * share if peak else peak
        tflops = {k: v * share for k, v in tflops.items()}
    return DeviceSpec(arch=g.name, vendor="amd", compute_units=g.cu_count, num_xcc=g.num_xcc,
                      simds_per_cu=max(1, g.simd_count // max(g.cu_count, 1)), max_waves_per_cu=g.max_waves_per_cu,
                      peak_gbs=peak, peak_tflops=tflops,
                      source=f"agent_info.csv ({g.name}, {g.cu_count} CUs) + {base.source}")


async def pmc_rocm(launch: Launch, passes: list[list[str]], kernel_regex: str | None, spec: DeviceSpec,
                   max_dispatches: int, counters: list[str], preset: str | None,
                   compile_waves_per_simd: int | None = None) -> PmcResult:
    exe, ver = rocprofv3.find_rocprofv3()
    notes: list[str] = []
    kfilter, ksrc = rocprof_safe.effective_filter(kernel_regex, launch.spec.get("candidate", ""))
    rng = iteration_range(launch.spec)
    runs, argv, stderr = await rocm_pipeline.counter_runs(exe, launch, passes, kfilter, rng)
    out_dir = launch.workdir / "rocprof"
    merged: list[CounterDispatch] = []
    if runs.collected:
        try:
            raw_passes, trace = rocprofv3.read_counter_passes(out_dir)
        except ParseError:
            if kernel_regex or not kfilter:
                raise
            # the filter was derived from the candidate and matched nothing: profile unfiltered once
            notes.append(f"the derived kernel filter {kfilter!r} matched no dispatch; profiled without a filter")
            _clear(out_dir)
            kfilter, ksrc = None, "none: the derived filter matched no dispatch"
            runs, argv, stderr = await rocm_pipeline.counter_runs(exe, launch, passes, None, rng)
            raw_passes, trace = rocprofv3.read_counter_passes(out_dir) if runs.collected else ([[]], [])
        merged = rocprofv3.merge_passes(raw_passes, trace)
    spec = _amd_spec(spec, out_dir)
    cw = compile_waves_per_simd * spec.simds_per_cu if compile_waves_per_simd else None  # per SIMD -> per CU
    ds = _pmc_dispatches(merged, spec, max_dispatches, cw)
    missing = rocm_pipeline.missing_counters(counters, merged, runs.dropped, stderr)
    reasons = sorted({r for r in runs.dropped.values()})
    if not runs.collected:
        reasons.insert(0, "no counter pass finished")
    files = {"dispatches.jsonl": _pmc_table(merged, spec, cw)}  # first: read_artifact's default file
    files |= {k: v for k, v in rocprofv3.collect_files(launch.workdir).items() if not k.startswith("modules")}
    files |= {"rocprofv3_stderr.txt": stderr[-200_000:]}
    res = _pmc_result("rocprofv3", exe, ver, argv, spec, ds, len(merged), files, counters,
                      [g for g, _ in runs.collected], preset, raw=merged)
    res.notes = notes + runs.notes + res.notes
    res.kernel_filter, res.kernel_filter_source = kfilter, ksrc
    res.counters_not_collected = missing
    res.degraded = bool(missing) or not runs.collected
    res.degraded_reasons = reasons + ([f"{len(missing)} requested counter(s) absent from the output"]
                                      if missing and not reasons else [])
    res.findings = rocm_pipeline.degrade_findings(res.degraded_reasons, missing) + res.findings
    return res


def _clear(d: Path) -> None:
    import shutil

    shutil.rmtree(d, ignore_errors=True)


async def _ncu_session(launch: Launch, exe: str, ver: str | None, argv: list[str], report: str,
                       exports: list[list[str]], optional: tuple[int, ...] = ()) -> tuple[str, list[str | None]]:
    """One ncu session (its messages in its --log-file) and the exports of its report; (log, export stdouts).
    An export whose index is in `optional` may fail (None in its place)."""
    res = await launch.run(argv, timeout_s=launch.timeout_s, collect=[report, ncu.LOG_FILE], exports=exports,
                           export_if=report, binds=ncu.binds(exe))
    log_text = (launch.workdir / ncu.LOG_FILE).read_text(errors="replace") \
        if (launch.workdir / ncu.LOG_FILE).is_file() else ""
    log_text = (log_text + "\n" + res.stderr).strip()
    if res.timed_out:
        raise ToolTimeout("ncu", launch.timeout_s, log_text[-2000:])
    if res.returncode != 0 or "ERR_NVGPUCTRPERM" in log_text:
        hint = ("\nThe profiled process runs sandboxed as an unprivileged user, and this driver lets only admin users "
                "read GPU counters: allow them for all users (NVreg_RestrictProfilingToAdminUsers=0, see NVIDIA's "
                "ERR_NVGPUCTRPERM page)."
                if "ERR_NVGPUCTRPERM" in log_text else "")
        raise ToolFailed("ncu", res.returncode if res.returncode is not None else -1, log_text[-4000:] + hint)
    if not (launch.workdir / report).is_file():
        raise ParseError("ncu", report, version=ver, message="no report written: no kernel matched the filter "
                         f"in the profiled iterations.\nncu output tail:\n{log_text[-2000:]}")
    outs = []
    for i, e in enumerate(res.exports):
        if e.returncode != 0:
            if i in optional:
                outs.append(None)
                continue
            raise ToolFailed("ncu", e.returncode if e.returncode is not None else -1, e.stderr[-4000:])
        outs.append(e.stdout)
    if len(outs) != len(exports):
        raise ToolFailed("ncu", -1, "the report's export did not run")
    return log_text, outs


async def pmc_cuda(launch: Launch, metrics: list[str], kernel_regex: str | None, spec: DeviceSpec,
                   max_dispatches: int, preset: str | None) -> PmcResult:
    exe, ver = ncu.find_ncu()
    report = "pmc.ncu-rep"
    n = int(launch.spec.get("iters", 1)) * 8  # several kernels per launch are possible
    argv = ncu.metrics_argv(exe, Path(report), metrics, kernel_regex, n)
    log_text, (raw,) = await _ncu_session(launch, exe, ver, argv, report, [ncu.raw_export_argv(exe, Path(report))])
    return ncu_pmc_result(raw, log_text, (launch.workdir / report).read_bytes(), exe, ver, argv, spec, metrics,
                          max_dispatches, preset)


def ncu_pmc_result(raw: str, log_text: str, report: bytes, exe: str, ver: str | None, argv: list, spec: DeviceSpec,
                   metrics: list[str], max_dispatches: int, preset: str | None) -> PmcResult:
    """The ncu raw page (and the run's log and report) -> the result: the peaks of the live product, the
    heaviest dispatches, the table of all, static device values once, the artifact."""
    parsed = parse_ncu_raw_csv(raw, "ncu_raw.csv")
    names = device_names(raw, "ncu_raw.csv")
    if names and _names_a_product(spec.arch, names[0]):
        spec = table_spec(spec.arch, "nvidia", names[0])
    ds = _pmc_dispatches(parsed, spec, max_dispatches)
    attrs, attrs_json = _device_attributes(parsed, names)
    files = {"dispatches.jsonl": _pmc_table(parsed, spec),  # first: read_artifact's default file
             "device_attributes.json": attrs_json, "ncu_raw.csv": raw, "ncu_log.txt": log_text[-200_000:],
             "pmc.ncu-rep": report}
    # ncu schedules its own replay passes: passes=[] (the metric list is counters_requested)
    res = _pmc_result("ncu", exe, ver, argv, spec, ds, len(parsed), files, metrics, [], preset, raw=parsed)
    res.device_attributes = attrs
    return res


def _full_table(rows: list[TraceInstruction], vendor: str) -> str:
    cls = classify_amd if vendor == "amd" else classify_sass
    head = "index,class,hits,cycles,stall_cycles,source,instruction\n"
    return head + "".join(f'{r.index},{cls(r.instruction)},{r.hits},{r.cycles:g},'
                          f'{r.stall_cycles if r.stall_cycles is not None else ""},'
                          f'"{r.source or ""}","{r.instruction}"\n' for r in rows if not r.is_label)


def read_att_dir(ui: Path) -> tuple[list[TraceInstruction], str, list[str]]:
    """Per-instruction rows from one decoder output dir: the 7.0 stats CSV beside it, else code.json; stall
    cycles summed from the wave files when the decoder reports none."""
    notes = []
    stats = ui.parent / f"stats_{ui.name}.csv"
    if stats.is_file():
        rows = parse_att_stats_csv(stats.read_text(), stats.name)
        for i, r in enumerate(rows):
            r.index = i
    else:
        rows = parse_att_code_json((ui / "code.json").read_text(), "code.json")
    labels = [r.instruction.lstrip("; ").strip() for r in rows if r.is_label]
    if all(r.stall_cycles is None for r in rows) and (ui / "filenames.json").is_file():
        meta = parse_att_filenames((ui / "filenames.json").read_text(), "filenames.json")
        stall: dict[int, float] = {}
        present = [w for w in meta["waves"] if (ui / w[4]).is_file()][:MAX_WAVE_FILES]
        for w in present:
            wave = parse_att_wave((ui / w[4]).read_text(), w[4])
            for _t, _cat, st, _dur, line in wave.instructions:
                stall[line] = stall.get(line, 0.0) + st
        if present:
            for r in rows:
                r.stall_cycles = stall.get(r.index, 0.0)
            notes.append(f"stall_cycles summed from {len(present)} of {len(meta['waves'])} traced wave files "
                         "(code.json of this decoder version has no Stall column); cycles/hits cover all waves.")
    return rows, (labels[0] if labels else ui.name), notes


def trace_result(rows, vendor, kernel, tool, exe, ver, argv, top_n, files, notes) -> TraceResult:
    breakdown, hot, stall, src, total = summarize(rows, vendor, top_n)
    files = {"instructions.csv": _full_table(rows, vendor)} | dict(files)  # first: read_artifact's default
    aid = artifacts.put("thread_trace", files, detail=f"{tool} {ver or ''}; instructions.csv = full table")
    unit = "latency cycles summed over traced waves" if vendor == "amd" else "warp-stall samples (PC sampling)"
    prov = [Provenance(field="hot_instructions[].cycles", source=tool, detail=f"{ver or 'version unknown'}; {unit}"),
            Provenance(field="class_breakdown", source="evokernel_mcp.profile.trace",
                       detail="sum of cycles per instruction class / total cycles"),
            Provenance(field="findings", source="evokernel_mcp.profile.trace",
                       detail="rules on per-instruction stall samples")]
    return TraceResult(tool={"name": tool, "version": ver, "path": exe, "command": short_argv(argv)},
                       kernel=kernel, cycles_unit=unit, total_cycles=total,
                       instructions_total=sum(1 for r in rows if not r.is_label), class_breakdown=breakdown,
                       hot_instructions=hot, stall_reasons=stall, source_lines=src,
                       findings=trace_findings(rows, vendor),
                       notes=list(notes) + [f"every instruction: read_artifact('{aid}', name='instructions.csv')"],
                       artifact_id=aid, provenance=prov)


async def trace_rocm(launch: Launch, kernel_regex: str | None, top_n: int, *, target_cu: int, se_mask: str,
                     simd_select: str, buffer_size: str, att_library_path: str | None) -> TraceResult:
    return await rocm_pipeline.trace_rocm(launch, kernel_regex, top_n, target_cu=target_cu, se_mask=se_mask,
                                          simd_select=simd_select, buffer_size=buffer_size,
                                          att_library_path=att_library_path, read_att_dir=read_att_dir,
                                          trace_result=trace_result, short_argv=short_argv)


async def trace_cuda(launch: Launch, kernel_regex: str | None, top_n: int) -> TraceResult:
    exe, ver = ncu.find_ncu()
    report = "trace.ncu-rep"
    argv = ncu.source_argv(exe, Path(report), kernel_regex)
    log_text, (sass_src, raw, cuda_src) = await _ncu_session(
        launch, exe, ver, argv, report,
        [ncu.source_export_argv(exe, Path(report)), ncu.raw_export_argv(exe, Path(report)),
         ncu.source_export_argv(exe, Path(report), "cuda,sass")], optional=(2,))
    src, rows, notes = _source_rows(sass_src, cuda_src)
    kernels = parse_ncu_raw_csv(raw, "ncu_raw.csv")
    kernel = kernels[0].kernel if kernels else (kernel_regex or "?")
    files = {"ncu_source_sass.csv": src, "ncu_raw.csv": raw, "ncu_log.txt": log_text[-200_000:],
             "trace.ncu-rep": (launch.workdir / report).read_bytes()}
    return trace_result(rows, "nvidia", kernel, "ncu", exe, ver, argv, top_n, files, notes)


def _source_rows(sass_src: str, cuda_src: str | None) -> tuple[str, list[TraceInstruction], list[str]]:
    """The source page with line info (cuda,sass view: each SASS instruction with its file:line; Triton keeps
    line info in its cubins unless TRITON_DISABLE_LINE_INFO is set), else the SASS view."""
    why = ("no source lines: the kernel's cubin has no line info (Triton: TRITON_DISABLE_LINE_INFO set; CUDA: "
           "compile with -lineinfo); instructions are shown without file:line")
    if cuda_src:
        try:
            rows = parse_ncu_source_csv(cuda_src, "ncu_source_cuda_sass.csv")
            if has_line_info(rows):
                return cuda_src, rows, []
        except ParseError as e:
            log.info("ncu cuda,sass source view unusable: %s", e)
            why = f"no source lines: ncu's source view (cuda,sass) could not be read ({e}); instructions are " \
                  "shown without file:line"
    return sass_src, parse_ncu_source_csv(sass_src, "ncu_source_sass.csv"), [why]
