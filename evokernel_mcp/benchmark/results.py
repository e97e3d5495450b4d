"""A benchmark's result, built in the server from the runner's raw reply: statistics, speedup, roofline,
clocks, flags and the verdict, per shape set (candidate code never runs here)."""

from __future__ import annotations

from typing import Any

from evokernel_mcp.benchmark import roofline as rl
from evokernel_mcp.benchmark import stats, work
from evokernel_mcp.benchmark.checks import output_checks
from evokernel_mcp.benchmark.models import (
    BenchmarkResult,
    Ceilings,
    ClockReadings,
    Clocks,
    ShapeResult,
    TimingInfo,
    TimingStats,
)
from evokernel_mcp.benchmark.outcome import shapes_outcome, verdict_reason
from evokernel_mcp.errors import BadInput, EvoError
from evokernel_mcp.models import ErrorInfo, Provenance
from evokernel_mcp.runtime.limits import Limits
from evokernel_mcp.runtime.limits import current as limits_here
from evokernel_mcp.runtime.protocol import WorkerReply
from evokernel_mcp.shape_defaults import ShapeChoice
from evokernel_mcp.tasks import Task

SPEEDUP_FLAG_X = 10.0


def _stats_of(run: dict[str, Any], confidence: float) -> TimingStats:
    return stats.summarize(run["times_ms"], confidence)


def add_launch_cost(run: dict[str, Any] | None, ceil: Ceilings | None, enabled: bool) -> dict[str, Any] | None:
    """An activity-clock series with the device's launch cost added to every time (see launch_cost.py);
    other series, or no measured cost, unchanged. The bare span median is kept for the report."""
    if not run or run.get("timer") != "activity":
        return run
    times = run["times_ms"]
    extra = {**(run.get("extra") or {}), "kernel_span_median_ms": stats.summarize(times).median_ms}
    cost = ceil.launch_cost_us if (ceil is not None and enabled) else None
    if cost is None:
        return {**run, "extra": extra}
    extra["launch_cost_ms"] = cost / 1e3
    method = run["method"] + f"; + {cost:.3f} us fixed launch cost per call (ncu-equivalent, measure_ceilings)"
    return {**run, "times_ms": [t + cost / 1e3 for t in times], "extra": extra, "method": method}


def _info(run: dict[str, Any] | None) -> TimingInfo | None:
    if not run:
        return None
    keys = ("stop_reason", "warmup_calls", "copies", "flush_bytes", "event_overhead_ms", "host_timing", "timer")
    extra = run.get("extra") or {}
    notes = "; ".join(str(extra[k]) for k in ("activity_timer_unused", "timers_unified", "copies_note")
                      if extra.get(k))
    return TimingInfo(**{k: run.get(k) for k in keys if run.get(k) is not None},
                      overhead_subtracted=bool(run.get("overhead_subtracted")),
                      event_median_ms=extra.get("event_median_ms"), timer_note=notes or None,
                      kernel_span_median_ms=extra.get("kernel_span_median_ms"),
                      launch_cost_ms=extra.get("launch_cost_ms"))


def _peaks(info: dict[str, Any], dtype: str | None, unit: str) -> tuple[rl.Peak | None, rl.Peak | None]:
    arch = info.get("arch")
    if not arch or not dtype:
        return None, None
    try:
        product = rl.resolve_product(arch, info.get("name"))
        return rl.datasheet_peaks(arch, product, dtype, unit)
    except (BadInput, KeyError):
        return None, None  # an arch the table does not know: no datasheet peaks


def _flags(sr: ShapeResult, cand: dict[str, Any], host: bool) -> list[str]:
    flags = []
    if sr.speedup is not None and sr.speedup > SPEEDUP_FLAG_X:
        flags.append(f"speedup {sr.speedup:.1f}x > {SPEEDUP_FLAG_X:g}x: a person must confirm it (check the "
                     "candidate computes the full problem and is not caching results)")
    checks = (("check_timed", "a timed call's output (its input storage refilled with new values)"),
              ("check_fresh", "the output on fresh inputs"))
    if cand.get("check_probe") is not None:
        checks += (("check_probe", "the output on verify's signed probe inputs"),)
    for key, what in checks:
        chk = cand.get(key) or {}
        if chk.get("passed") is None and key == "check_probe":
            continue  # not judged (the reference cannot run on signed inputs): its note is in check_detail
        if not chk.get("passed"):
            flags.append(f"{what} does NOT match the reference ({chk.get('mismatches')} mismatches, "
                         f"{chk.get('note') or 'see check_detail'}): the timing is of a wrong kernel")
    if sr.fraction_of_roofline is not None and sr.fraction_of_roofline > 1.05 and not host:
        flags.append(f"faster than the roofline bound ({sr.fraction_of_roofline:.2f}x): the byte/FLOP counts, the "
                     "peaks or the candidate's work are wrong")
    if host:
        flags.append("host timing on the CPU path (no GPU): not device time; use for plumbing only")
    return flags


def shape_result(raw: dict[str, Any], task: Task, info: dict[str, Any], ceil: Ceilings | None, unit: str,
                 confidence: float, launch_cost: bool = True, given: dict[str, dict[str, float]] | None = None
                 ) -> ShapeResult:
    """One shape set's ShapeResult from the runner's raw times and checks. `given`: the caller's counts,
    {"flops": {shape: n}, "bytes": {shape: n}} (work.per_shape)."""
    raw = {**raw, "candidate": add_launch_cost(raw["candidate"], ceil, launch_cost),
           "baseline": add_launch_cost(raw.get("baseline"), ceil, launch_cost)}
    host = bool(raw["candidate"].get("host_timing"))
    c = _stats_of(raw["candidate"], confidence)
    b = _stats_of(raw["baseline"], confidence) if raw.get("baseline") else None
    ss = task.shape_set(raw["shape"])
    bw, tf = _peaks(info, raw.get("output_dtype") or (task.inputs[0].dtype if task.inputs else None), unit)
    dtype = rl.norm_dtype(raw.get("output_dtype") or "fp32")
    ceil_gbs = ceil.copy_gbs if ceil and not host else None
    ceil_tf = ceil.matmul_tflops.get(dtype) if ceil and not host and unit == "matrix" else None
    kw = dict(peak_gbs=bw.value if bw else None, peak_tflops=tf.value if tf else None,
              ceil_gbs=ceil_gbs, ceil_tflops=ceil_tf)
    given = given or {}
    counts = work.choose(ss.flops, ss.bytes, task.name, raw.get("work"), (given.get("flops") or {}).get(ss.name),
                         (given.get("bytes") or {}).get(ss.name))
    roof = rl.compute_roofline(c.median_ms, counts.bytes, counts.flops, **kw) if c.median_ms > 0 else None
    base_roof = rl.compute_roofline(b.median_ms, counts.bytes, counts.flops, **kw) if b and b.median_ms > 0 else None
    for r in (roof, base_roof):
        if r is not None:
            r.counts_source, r.counts_note = counts.source, counts.note
            r.peak_note = work.peak_note(r, bw, tf, host, info.get("arch"), dtype, unit)
    # the physical floor that makes a time invalid: from the task's own counts only (work.py says why)
    floor_ms = rl.bound_ms(ss.bytes, ss.flops, kw["peak_gbs"], kw["peak_tflops"])[0]
    sp = stats.speedup(c, b) if b and c.median_ms > 0 else None
    checks, check_detail = output_checks(raw)
    sr = ShapeResult(
        shape=raw["shape"], candidate=c, baseline=b, speedup=sp.speedup if sp else None,
        speedup_ci=sp.speedup_ci if sp else None, noise=sp.noise if sp else None,
        achieved_gbs=roof.achieved_gbs if roof else None, achieved_tflops=roof.achieved_tflops if roof else None,
        roofline_ms=roof.roofline_ms if roof else None,
        fraction_of_roofline=roof.fraction_of_roofline if roof else None, roofline=roof, baseline_roofline=base_roof,
        fraction_of_peak=roof.fraction_of_peak if roof else None,
        candidate_timing=_info(raw["candidate"]), baseline_timing=_info(raw.get("baseline")),
        correct_after_timing=bool((raw.get("check_timed") or {}).get("passed"))
        and bool((raw.get("check_fresh") or {}).get("passed"))
        and (raw.get("check_probe") or {}).get("passed") is not False,
        check_detail=check_detail, checks=checks)
    _paired(sr, raw, confidence)
    _confirmed(sr, raw, confidence)
    sr.clocks_moved = _clocks_moved(raw)
    sr.runner_clock = (raw.get("runner_bound") or {}).get("detail")
    sr.probes_checked = (raw.get("check_probes") or {}).get("checked")
    sr.flags = _flags(sr, raw, host) + [str(n)[:300] for n in raw.get("memory_notes") or []]
    return apply_verdict(sr, raw, floor_ms)


def _paired(sr: ShapeResult, raw: dict[str, Any], confidence: float) -> None:
    """With interleaved rounds (raw['rounds']: arm -> per-round block medians, ms): the paired speedup and
    interval replace the unpaired ones, a control arm gives the noise floor, and `resolved` is set."""
    rounds = raw.get("rounds") or {}
    if rounds.get("baseline") and rounds.get("candidate"):
        s, lo, hi, noise = stats.paired_speedup(rounds["baseline"], rounds["candidate"], confidence)
        sr.speedup, sr.speedup_ci, sr.noise, sr.paired_ci = s, (lo, hi), noise, (lo, hi)
        host = bool((raw.get("candidate") or {}).get("host_timing"))
        least = stats.HOST_BAND_FLOOR if host else stats.DEVICE_BAND_FLOOR
        sr.noise_floor = (stats.noise_floor(rounds["baseline"], rounds["control"], confidence, min_half=least)
                          if rounds.get("control") else stats.least_floor(least))
        # the candidate ran in a process of its own: its interval is only as good as two processes
        # running identical code agree, so the control's band (or the least band) widens it (see stats.widened)
        sr.speedup_ci = stats.widened((lo, hi), sr.noise_floor)
        sr.noise = sr.speedup_ci[0] <= 1.0 <= sr.speedup_ci[1]
    if sr.speedup_ci is not None:
        sr.resolved = stats.resolved(sr.paired_ci or sr.speedup_ci, sr.noise_floor)


def _confirmed(sr: ShapeResult, raw: dict[str, Any], confidence: float) -> None:
    """With confirm: the second fresh process's paired speedup; when its interval and the first one, each widened by
    the noise floor's band (two processes of identical code differ by that much), do not overlap, the claim is not
    confirmed (raw['confirm_failed'] makes the verdict invalid)."""
    conf = raw.get("confirm")
    if not conf:
        return
    rounds = conf.get("rounds") or {}
    if conf.get("error") or not (rounds.get("baseline") and rounds.get("candidate")):
        raw["confirm_failed"] = f"the confirming run failed: {(conf.get('error') or {}).get('message', 'no rounds')}"
        return
    s, lo, hi, _ = stats.paired_speedup(rounds["baseline"], rounds["candidate"], confidence)
    sr.confirm_speedup, sr.confirm_speedup_ci = s, (lo, hi)
    w_lo, w_hi = stats.widened((lo, hi), sr.noise_floor) if sr.noise_floor is not None else (lo, hi)
    if sr.speedup_ci is not None and (w_hi < sr.speedup_ci[0] or w_lo > sr.speedup_ci[1]):
        raw["confirm_failed"] = (f"a second fresh process measured {s:.4g}x [{lo:.4g}, {hi:.4g}], the first "
                                 f"{sr.speedup:.4g}x [{sr.speedup_ci[0]:.4g}, {sr.speedup_ci[1]:.4g}]")


def _clocks_moved(raw: dict[str, Any]) -> bool | None:
    from evokernel_mcp.benchmark.clocks import clocks_moved

    a, b = raw.get("clocks_before"), raw.get("clocks_after")
    if not a or not b:
        return None
    return clocks_moved(Clocks(**a), Clocks(**b))[0]


NULLED = ("speedup", "speedup_ci", "paired_ci", "noise", "resolved", "achieved_gbs", "achieved_tflops",
          "fraction_of_roofline", "fraction_of_peak", "candidate", "roofline")


def apply_verdict(sr: ShapeResult, raw: dict[str, Any], floor_ms: float | None) -> ShapeResult:
    """Set valid / invalid_reason / invalid_detail from verdict.judge_shape; when invalid, null the speedup
    and the candidate's timing figures (kept in raw_invalid, excluded from the default dump)."""
    from evokernel_mcp.benchmark.verdict import judge_shape

    valid, reason, detail = judge_shape(raw, floor_ms)
    sr.valid, sr.invalid_reason, sr.invalid_detail = valid, reason, detail
    if valid:
        return sr
    sr.raw_invalid = {k: (v.model_dump() if hasattr(v, "model_dump") else v)
                      for k in NULLED if (v := getattr(sr, k)) is not None}
    for k in NULLED:
        setattr(sr, k, None)
    sr.flags.insert(0, f"INVALID ({reason}): {detail or ''}"[:600])
    return sr


def _provenance(info: dict[str, Any], method: str | None, ceil: Ceilings | None, unit: str, dtype: str | None,
                task: Task, results: list[ShapeResult] | None = None) -> list[Provenance]:
    dev = f"{info.get('name')} ({info.get('arch') or 'cpu'})"
    method = method or "n/a"
    prov = [Provenance(field="results[].candidate, results[].baseline", source="measured",
                       detail=f"{dev}: {method}; statistics computed in the server from raw times")]
    if task.flops_expr or task.bytes_expr:
        prov.append(Provenance(field="results[].roofline.bytes/flops", source=f"task.yaml of {task.name}",
                               detail=f"bytes = {task.bytes_expr}; flops = {task.flops_expr}"))
    seen = set()
    for r in results or []:
        roof = r.roofline or r.baseline_roofline
        if roof is None or not roof.counts_source or roof.counts_source.count("task.yaml") == 2:
            continue  # the task's own expressions: the entry above
        key = (roof.counts_source, roof.counts_note)
        if key not in seen:
            seen.add(key)
            prov.append(Provenance(field=f"results[{r.shape}].roofline.bytes/flops", source=roof.counts_source,
                                   detail=roof.counts_note))
    bw, tf = _peaks(info, dtype, unit)
    prov += [p.provenance for p in (bw, tf) if p is not None]
    if ceil is not None:
        prov += ceil.provenance
    return prov


def result_from_reply(reply: WorkerReply, task: Task, unit: str, confidence: float,
                      launch_cost: bool = True, choice: ShapeChoice | None = None,
                      given: dict[str, dict[str, float]] | None = None) -> BenchmarkResult:
    """BenchmarkResult of a finished runner op (ok or not); `choice`: the shape sets it was given; `given`: the
    caller's flops/bytes per shape set."""
    r = reply.result or {}
    info = r.get("device_info") or {"name": reply.worker_info.get("device_name")}
    keep = ("kind", "message", "detail", "role", "limit")
    err = reply.error or (ErrorInfo(**{k: v for k, v in r["error"].items() if k in keep})
                          if r.get("error") else None)
    ceil = None
    if isinstance(r.get("ceilings"), dict) and "device" in r["ceilings"]:
        ceil = Ceilings(**r["ceilings"])
    results = []
    for raw in r.get("shapes", []):
        try:
            results.append(shape_result(raw, task, info, ceil, unit, confidence, launch_cost, given))
        except EvoError as e:
            err = err or ErrorInfo(kind="internal", message=f"shape {raw.get('shape')}: {e}")
    dtype = next((x.get("output_dtype") for x in r.get("shapes", []) if x.get("output_dtype")), None)
    clocks = None
    if r.get("clocks_before") or r.get("clocks_after"):
        clocks = ClockReadings(before=Clocks(**r["clocks_before"]) if r.get("clocks_before") else None,
                               after=Clocks(**r["clocks_after"]) if r.get("clocks_after") else None)
    versions = {k: (str(info[k]) if info.get(k) is not None else None)
                for k in ("torch", "triton", "cuda", "hip", "python") if k in info}
    if ceil is not None:
        versions["driver"] = ceil.driver
    raws = r.get("shapes", [])
    method = (add_launch_cost(raws[0]["candidate"], ceil, launch_cost) or {}).get("method") if raws else None
    skipped, err = shapes_outcome(results, err, (r.get("error") or {}).get("shape"), choice)
    res = BenchmarkResult(
        results=results, device=f"{reply.device}: {info.get('name')}", clocks=clocks, versions=versions,
        state="done" if err is None else "failed", error=err, stdout=r.get("stdout", reply.stdout) or None,
        stderr=r.get("stderr", reply.stderr) or None, timing_method=method,
        isolation=(r.get("isolation") or {}).get("level"), shapes_run=[x.shape for x in results],
        shapes_skipped=skipped, shape_rule=choice.rule if choice else None,
        limits=Limits(**(r.get("isolation") or {})["limits"]) if (r.get("isolation") or {}).get("limits")
        else limits_here(),
        provenance=_provenance(info, method, ceil, unit, dtype, task, results))
    res.reason = verdict_reason(res)
    return res
