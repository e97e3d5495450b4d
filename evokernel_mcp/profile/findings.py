"""Rules that turn derived metrics into short findings citing their numbers. Rules, not an LLM.

Bottleneck classification (per dispatch, on percentages of peak):
- memory-bound:  DRAM throughput >= 60% of peak and >= the compute throughput;
- compute-bound: compute throughput (max of SM/VALU/MFMA/tensor-pipe busy) >= 60%;
- latency-bound: both below 40% (neither unit is near saturation: latency, occupancy or launch bound);
- otherwise the larger of the two, reported as "partially".
"""

from __future__ import annotations

from evokernel_mcp.profile.models import Bound, DerivedValue, Finding, PmcDispatch

HIGH, LOW = 60.0, 40.0
COMPUTE_KEYS = ("sm_throughput", "valu_busy", "mfma_busy", "tensor_pipe_busy")


def _v(d: dict[str, DerivedValue], k: str) -> float | None:
    return d[k].value if k in d else None


def classify(derived: dict[str, DerivedValue]) -> tuple[Bound, Finding | None]:
    mem = _v(derived, "dram_pct_of_peak")
    comp_items = {k: derived[k].value for k in COMPUTE_KEYS if k in derived}
    if mem is None and not comp_items:
        return "unknown", None
    comp_key = max(comp_items, key=comp_items.get) if comp_items else None
    comp = comp_items.get(comp_key) if comp_key else None
    ev: dict[str, float | str] = {}
    if mem is not None:
        ev["dram_pct_of_peak"] = round(mem, 1)
    if comp_key:
        ev[comp_key] = round(comp, 1)
    m, c = mem or 0.0, comp or 0.0
    cname = (comp_key or "compute").replace("_", " ")
    if m >= HIGH and m >= c:
        return "memory-bound", Finding(kind="bottleneck", evidence=ev, text=(
            f"memory-bound: DRAM throughput {m:.0f}% of peak, {cname} {c:.0f}%. Cut bytes moved (fuse, "
            "narrower dtypes, reuse through LDS/L2) before tuning math."))
    if c >= HIGH:
        return "compute-bound", Finding(kind="bottleneck", evidence=ev, text=(
            f"compute-bound: {cname} {c:.0f}%, DRAM throughput {m:.0f}% of peak. Use faster instructions "
            "(matrix cores, lower precision) or remove redundant math."))
    if max(m, c) < LOW:
        return "latency-bound", Finding(kind="bottleneck", evidence=ev, text=(
            f"latency-bound: neither memory ({m:.0f}% of peak DRAM) nor compute ({cname} {c:.0f}%) is near "
            "saturation; raise parallelism/occupancy, overlap loads with math, or the launch is too small."))
    bound: Bound = "memory-bound" if m >= c else "compute-bound"
    return bound, Finding(kind="bottleneck", evidence=ev, text=(
        f"partially {bound}: DRAM throughput {m:.0f}% of peak, {cname} {c:.0f}% (neither saturated)."))


def _rules(d: dict[str, DerivedValue], duration_ns: float | None) -> list[Finding]:
    out = []
    l2 = _v(d, "l2_hit_rate")
    if l2 is not None and l2 < 50 and (_v(d, "dram_pct_of_peak") or 0) > 30:
        out.append(Finding(kind="memory", evidence={"l2_hit_rate": round(l2, 1)}, text=(
            f"low L2 hit rate {l2:.0f}% while DRAM is busy: tiles are re-fetched from HBM; improve reuse "
            "(block/tile order, swizzle program ids).")))
    conf = _v(d, "lds_bank_conflict_rate")
    if conf is not None and conf > 10:
        out.append(Finding(kind="lds", evidence={"lds_bank_conflict_rate": round(conf, 1)}, text=(
            f"LDS/shared-memory bank conflicts: {conf:.0f}% extra cycles per access; pad or swizzle the layout.")))
    occ, lim = _v(d, "achieved_occupancy"), _v(d, "occupancy_vs_compile_limit")
    if occ is not None and occ < 25:
        ev = {"achieved_occupancy": round(occ, 1)}
        hint = "registers/LDS limit waves" if lim is None or lim > 80 else \
            "the grid or tail does not fill the device (achieved is well below the compile-time limit)"
        if lim is not None:
            ev["occupancy_vs_compile_limit"] = round(lim, 1)
        out.append(Finding(kind="occupancy", evidence=ev, text=f"low achieved occupancy {occ:.0f}%: {hint}."))
    if duration_ns is not None and duration_ns < 10_000:
        out.append(Finding(kind="note", evidence={"duration_ns": duration_ns}, text=(
            f"short kernel ({duration_ns / 1000:.1f} us): launch overhead and tail effects dominate; "
            "counters are noisy at this size.")))
    rf = _v(d, "roofline_fraction")
    if rf is not None:
        out.append(Finding(kind="compute", evidence={"roofline_fraction": round(rf, 1),
                                                     "arithmetic_intensity": _v(d, "arithmetic_intensity")},
                           text=f"at {rf:.0f}% of the roofline for its arithmetic intensity."))
    return out


def findings_for(dispatches: list[PmcDispatch]) -> tuple[Bound, list[Finding]]:
    """Findings of the longest dispatch (the one that matters), tagged with its kernel name."""
    timed = [d for d in dispatches if d.duration_ns is not None] or dispatches
    if not timed:
        return "unknown", []
    main = max(timed, key=lambda d: d.duration_ns or 0)
    bound, f = classify(main.derived)
    found = ([f] if f else []) + _rules(main.derived, main.duration_ns)
    for x in found:
        x.evidence.setdefault("kernel", main.kernel[:80])
    if not found:
        found.append(Finding(kind="note", evidence={"kernel": main.kernel[:80]}, text=(
            "not enough counters to classify the bottleneck; use preset 'overview' or 'memory'.")))
    return bound, found
