"""Two variants side by side: source diff, resource diff, time deltas with intervals, counter deltas."""

from __future__ import annotations

import difflib
from typing import Any

from evokernel_mcp.journal.analysis import COMPILE, Experiment, Rec
from evokernel_mcp.journal.extract import KERNEL_FIELDS
from evokernel_mcp.journal.models import Delta, ExperimentRow, SourceDiff

RESOURCE_FIELDS = (*KERNEL_FIELDS, "waves_per_simd", "warps_per_sm")


def source_diff(a_sha: str | None, a_text: str | None, b_sha: str | None, b_text: str | None,
                max_lines: int) -> SourceDiff:
    if a_text is None or b_text is None:
        missing = " and ".join(x for x, t in (("a", a_text), ("b", b_text)) if t is None)
        return SourceDiff(a_sha256=a_sha, b_sha256=b_sha, identical=False, lines_total=0,
                          diff=f"(no recorded source for {missing})")
    lines = list(difflib.unified_diff(a_text.splitlines(), b_text.splitlines(), "a", "b", lineterm="", n=2))
    cut = lines[:max_lines]
    return SourceDiff(a_sha256=a_sha, b_sha256=b_sha, identical=a_sha == b_sha, diff="\n".join(cut),
                      lines_total=len(lines), lines_left_off=len(lines) - len(cut))


def _delta(name: str, unit: str | None, a: Any, b: Any, note: str | None = None) -> Delta:
    fa = float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None
    fb = float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else None
    d = Delta(name=name, unit=unit, a=fa, b=fb, note=note)
    if fa is not None and fb is not None:
        d.delta = fb - fa
        d.ratio = fb / fa if fa != 0 else None
    return d


def resource_deltas(ra: list[dict], rb: list[dict]) -> list[Delta]:
    """Kernels matched by name; a single kernel on each side is matched whatever its name."""
    if len(ra) == 1 and len(rb) == 1:
        pairs = [(ra[0], rb[0])]
    else:
        names_b = {k.get("name"): k for k in rb}
        pairs = [(k, names_b[k.get("name")]) for k in ra if k.get("name") in names_b]
    out = []
    for ka, kb in pairs:
        prefix = ka.get("name") if ka.get("name") == kb.get("name") else f"{ka.get('name')}|{kb.get('name')}"
        for f in RESOURCE_FIELDS:
            if ka.get(f) is None and kb.get(f) is None:
                continue
            unit = "bytes" if f.endswith("_bytes") else None
            out.append(_delta(f"{prefix}.{f}", unit, ka.get(f), kb.get(f)))
        if ka.get("limiter") != kb.get("limiter"):
            out.append(Delta(name=f"{prefix}.limiter", note=f"{ka.get('limiter')} -> {kb.get('limiter')}"))
    return out


def time_deltas(a: ExperimentRow, b: ExperimentRow) -> tuple[list[Delta], list[str]]:
    notes = []
    tb = {t.shape: t for t in b.times}
    out = []
    for ta in a.times:
        t2 = tb.get(ta.shape)
        if t2 is None:
            continue
        note = None
        if not (ta.valid and t2.valid):
            note = "not comparable: " + ", ".join(f"{w} invalid ({t.invalid_reason})"
                                                  for w, t in (("a", ta), ("b", t2)) if not t.valid)
        elif ta.device != t2.device:
            note = f"different devices ({ta.device} vs {t2.device})"
        d = _delta(f"{ta.shape}.median_ms", "ms", ta.median_ms, t2.median_ms, note)
        if ta.ci_median_ms and t2.ci_median_ms and ta.ci_median_ms[0] > 0 and ta.ci_median_ms[1] > 0 and d.ratio:
            lo, hi = t2.ci_median_ms[0] / ta.ci_median_ms[1], t2.ci_median_ms[1] / ta.ci_median_ms[0]
            d.ratio_ci = (lo, hi)
            d.verdict = "b faster" if hi < 1 else "a faster" if lo > 1 else "no difference shown"
        out.append(d)
    if not out:
        notes.append("no shape was benchmarked (validly or not) by both variants: no time delta")
    return out, notes


def _profile_metrics(rec: Rec | None) -> dict[str, tuple[float, str | None]]:
    if rec is None:
        return {}
    s = rec.summary
    out: dict[str, tuple[float, str | None]] = {}
    if rec.tool == "profile_pmc":
        for d in (s.get("dispatches") or [])[:1]:
            if d.get("duration_ns") is not None:
                out["duration_ns"] = (d["duration_ns"], "ns")
            for name, v in (d.get("derived") or {}).items():
                out[name] = (v.get("value"), v.get("unit"))
            for name, v in (d.get("counters") or {}).items():
                out.setdefault(name, (v, None))
    else:
        for name, v in (s.get("class_breakdown") or {}).items():
            out[f"trace.class.{name}"] = (v, "fraction")
        for name, v in (s.get("stall_reasons") or {}).items():
            out[f"trace.stall.{name}"] = (v, "fraction")
    return out


def counter_deltas(a: Experiment, b: Experiment, limit: int) -> tuple[list[Delta], int, list[str]]:
    out: list[Delta] = []
    notes = []
    for tool in ("profile_pmc", "thread_trace"):
        ma, mb = _profile_metrics(a.latest(tool, done=True)), _profile_metrics(b.latest(tool, done=True))
        if not ma or not mb:
            if ma or mb:
                notes.append(f"{tool} recorded for only one of the two: no {tool} deltas")
            continue
        for name in [n for n in ma if n in mb]:
            (va, unit), (vb, _) = ma[name], mb[name]
            out.append(_delta(name, unit, va, vb, "single reading each: no interval"))
    out.sort(key=lambda d: -abs((d.ratio or 1.0) - 1.0) if d.ratio is not None else 0.0)
    return out[:limit], max(0, len(out) - limit), notes


def compile_resources(e: Experiment) -> list[dict]:
    comp = e.latest(COMPILE, done=True)
    return (comp.summary.get("kernels") or []) if comp else []
