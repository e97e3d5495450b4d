"""Key results per tool, from a tool result (a dict as model_dump(mode='json') gives it).

Each extractor is tolerant: any field may be missing or null (results grow over time, and a job that
failed has little in it). It returns (summary, verdict, failure_class, device) where verdict is 'ok',
'failed', 'pending' or 'info' (profile / trace: facts, not a check).
"""

from __future__ import annotations

import math
from typing import Any

TOOL_ALIASES = {
    "compile": "compile_kernel", "compile_kernel": "compile_kernel",
    "verify": "verify_vs_pytorch", "verify_vs_pytorch": "verify_vs_pytorch",
    "benchmark": "benchmark",
    "profile": "profile_pmc", "profile_pmc": "profile_pmc",
    "trace": "thread_trace", "thread_trace": "thread_trace",
    "evaluate_batch": "evaluate_batch",
}
KERNEL_FIELDS = ("vgpr_count", "agpr_count", "sgpr_count", "registers", "lds_bytes", "dynamic_lds_bytes",
                 "scratch_bytes", "vgpr_spill_count", "sgpr_spill_count", "spill_stores_bytes", "spill_loads_bytes")
Extracted = tuple[dict[str, Any], str, str | None, str | None]


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _pair(v: Any) -> tuple[float, float] | None:
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(_num(x) is not None for x in v):
        return (float(v[0]), float(v[1]))
    return None


def _cut(text: Any, n: int = 300) -> str | None:
    if text is None:
        return None
    s = str(text).strip()
    return s if len(s) <= n else s[: n - 3] + "..."


def _pending(res: dict) -> bool:
    return res.get("state") in ("queued", "running")


def _failed_state(res: dict) -> str | None:
    """'failed'/'cancelled' state or an error -> its class, else None."""
    err = res.get("error") or {}
    if isinstance(err, dict) and err.get("kind"):
        return str(err["kind"])
    if res.get("state") in ("failed", "cancelled"):
        return str(res["state"])
    return None


def compile_summary(res: dict) -> Extracted:
    kernels = []
    for k in (res.get("kernels") or [])[:6]:
        occ = k.get("occupancy") or {}
        row = {"name": k.get("name")}
        row.update({f: k.get(f) for f in KERNEL_FIELDS if k.get(f) is not None})
        for f in ("waves_per_simd", "warps_per_sm", "limiter"):
            if occ.get(f) is not None:
                row[f] = occ[f]
        kernels.append(row)
    errors = [d.get("message") for d in res.get("diagnostics") or [] if d.get("severity", "error") == "error"]
    tc = res.get("toolchain") or {}
    summary = {"ok": res.get("ok"), "target": res.get("target"), "language": res.get("language"),
               "toolchain": " ".join(str(x) for x in (tc.get("name"), tc.get("version")) if x) or None,
               "cached": res.get("cached"), "artifact_id": res.get("artifact_id"), "kernels": kernels,
               "errors": [_cut(e, 200) for e in errors[:3]]}
    ok = res.get("ok")
    verdict = "ok" if ok else ("failed" if ok is False else "info")
    return summary, verdict, ("compile_error" if ok is False else None), res.get("target")


def _verify_failure(res: dict, cases: list[dict]) -> tuple[str, str]:
    kind = _failed_state(res)
    if kind:
        return kind, _cut((res.get("error") or {}).get("message") or res.get("message")) or kind
    bad = [c for c in cases if not c.get("passed")]
    if not cases:
        return "no_cases", "verify ran no case"
    c = bad[0] if bad else cases[0]
    where = f"shape {c.get('shape')} seed {c.get('seed')}"
    checks = [("nan_output", sum(int(x.get("nan_count") or 0) for x in bad), "NaN outputs"),
              ("unwritten_output", sum(int(x.get("unwritten_count") or 0) for x in bad), "outputs never written"),
              ("inputs_mutated", sum(1 for x in bad if x.get("inputs_mutated")), "cases mutated their inputs"),
              ("wrong_output", sum(int(x.get("mismatches") or 0) for x in bad), "mismatching elements"),
              ("nondeterministic", sum(1 for x in bad if x.get("deterministic") is False), "non-deterministic cases")]
    for cls, count, what in checks:
        if count:
            errs = ", ".join(f"{f} {c[f]:.4g}" for f in ("max_abs_err", "max_rel_err") if _num(c.get(f)) is not None)
            return cls, (f"{count} {what}; first at {where}" + (f": {errs}" if errs else "")
                         + (f" ({_cut(c.get('note'), 120)})" if c.get("note") else ""))
    return "wrong_output", f"case failed at {where}" + (f": {_cut(c.get('note'), 160)}" if c.get("note") else "")


def verify_summary(res: dict) -> Extracted:
    cases = [c for c in res.get("cases") or [] if isinstance(c, dict)]

    def worst(field: str) -> float | None:
        vals = [v for v in (_num(c.get(field)) for c in cases) if v is not None]
        return max(vals) if vals else None

    summary = {"passed": res.get("passed"), "state": res.get("state", "done"), "cases": len(cases),
               "failed_cases": sum(1 for c in cases if not c.get("passed")),
               "max_abs_err": worst("max_abs_err"), "max_rel_err": worst("max_rel_err"),
               "rel_l2_err": worst("rel_l2_err"), "shapes": sorted({str(c.get("shape")) for c in cases}),
               "job_id": res.get("job_id"), "device": res.get("device")}
    if res.get("error"):
        err = res["error"]
        summary["error"] = {"kind": err.get("kind"), "message": _cut(err.get("message"))}
    if _pending(res) or (res.get("passed") is None and not _failed_state(res)):
        return summary, "pending", None, res.get("device")
    if res.get("passed"):
        return summary, "ok", None, res.get("device")
    cls, detail = _verify_failure(res, cases)
    summary["failure_detail"] = detail
    return summary, "failed", cls, res.get("device")


def shape_summary(r: dict) -> dict[str, Any]:
    cand, base = r.get("candidate") or {}, r.get("baseline") or {}
    valid = r.get("valid") is not False and r.get("correct_after_timing") is not False
    reason = r.get("invalid_reason") or (None if valid or r.get("valid") is False else "wrong_output_after_timing")
    floor = r.get("noise_floor")
    row = {"shape": r.get("shape"), "median_ms": _num(cand.get("median_ms")),
           "ci_median_ms": _pair(cand.get("ci_median_ms")), "reps": cand.get("reps"),
           "baseline_median_ms": _num(base.get("median_ms")), "baseline_ci_median_ms": _pair(base.get("ci_median_ms")),
           "speedup": _num(r.get("speedup")), "speedup_ci": _pair(r.get("speedup_ci")), "noise": r.get("noise"),
           "valid": valid, "invalid_reason": (reason or "invalid") if not valid else None,
           "invalid_detail": _cut(r.get("invalid_detail"), 200) if not valid else None, "resolved": r.get("resolved"),
           "fraction_of_roofline": _num(r.get("fraction_of_roofline")), "roofline_ms": _num(r.get("roofline_ms")),
           "achieved_gbs": _num(r.get("achieved_gbs")),
           "noise_floor": {k: floor.get(k) for k in ("ratio", "band")} if isinstance(floor, dict) else None,
           "flags": [_cut(f, 160) for f in (r.get("flags") or [])[:3]]}
    return {k: v for k, v in row.items() if v is not None and v != []}


def benchmark_summary(res: dict) -> Extracted:
    shapes = [shape_summary(r) for r in res.get("results") or [] if isinstance(r, dict)]
    summary = {"state": res.get("state", "done"), "shapes": shapes, "device": res.get("device"),
               "timing_method": _cut(res.get("timing_method"), 160), "job_id": res.get("job_id")}
    kind = _failed_state(res)
    if kind:
        summary["error"] = _cut((res.get("error") or {}).get("message") or res.get("message"))
        return summary, "failed", kind, res.get("device")
    if _pending(res) or (not shapes and res.get("job_id")):
        return summary, "pending", None, res.get("device")
    bad = [s for s in shapes if not s.get("valid")]
    if bad or not shapes:
        return summary, "failed", (bad[0].get("invalid_reason") or "invalid") if bad else "no_results", res.get("device")
    return summary, "ok", None, res.get("device")


def _top(d: Any, n: int) -> dict[str, float]:
    items = [(k, _num(v)) for k, v in (d or {}).items()] if isinstance(d, dict) else []
    items = [(k, v) for k, v in items if v is not None]
    return dict(sorted(items, key=lambda kv: -abs(kv[1]))[:n])


def profile_summary(res: dict) -> Extracted:
    dispatches = []
    for d in (res.get("dispatches") or [])[:3]:
        derived = {}
        for name, dv in list((d.get("derived") or {}).items())[:16]:
            if isinstance(dv, dict) and _num(dv.get("value")) is not None:
                derived[name] = {"value": _num(dv["value"]), "unit": dv.get("unit")}
        dispatches.append({"kernel": _cut(d.get("kernel"), 120), "duration_ns": _num(d.get("duration_ns")),
                           "derived": derived, "counters": _top(d.get("counters"), 10)})
    tool = res.get("tool") or {}
    summary = {"state": res.get("state", "done"), "tool": tool.get("name"), "device": res.get("device"),
               "dispatches": dispatches, "artifact_id": res.get("artifact_id"),
               "findings": [_cut(f.get("text"), 240) for f in (res.get("findings") or [])[:5] if isinstance(f, dict)]}
    if _pending(res):
        return summary, "pending", None, res.get("device")
    return summary, "info", None, res.get("device")


def trace_summary(res: dict) -> Extracted:
    hot = [{"instruction": _cut(h.get("instruction"), 80), "class": h.get("class", h.get("klass")),
            "fraction": _num(h.get("fraction"))} for h in (res.get("hot_instructions") or [])[:3]]
    tool = res.get("tool") or {}
    summary = {"state": res.get("state", "done"), "tool": tool.get("name"), "kernel": _cut(res.get("kernel"), 120),
               "class_breakdown": _top(res.get("class_breakdown"), 6),
               "stall_reasons": _top(res.get("stall_reasons"), 5), "hot_instructions": hot,
               "artifact_id": res.get("artifact_id"), "device": res.get("device")}
    return summary, ("pending" if _pending(res) else "info"), None, res.get("device")


def generic_summary(res: dict) -> Extracted:
    keep = {k: v for k, v in res.items() if isinstance(v, (str, int, float, bool)) and k != "provenance"}
    return {k: (_cut(v) if isinstance(v, str) else v) for k, v in list(keep.items())[:20]}, "info", None, None


EXTRACTORS = {"compile_kernel": compile_summary, "verify_vs_pytorch": verify_summary, "benchmark": benchmark_summary,
              "profile_pmc": profile_summary, "thread_trace": trace_summary}


def extract(tool: str, res: dict) -> Extracted:
    return EXTRACTORS.get(TOOL_ALIASES.get(tool, tool), generic_summary)(res)
