"""Rules that turn derived metrics into short findings citing their numbers. Rules, not an LLM.

Bottleneck classification (per dispatch, on percentages of peak):
- memory-bound:  DRAM throughput >= 60% of peak and >= the compute throughput;
- compute-bound: compute throughput (max of SM/VALU/MFMA/tensor-pipe busy) >= 60%;
- latency-bound: both below 40% (neither unit is near saturation: latency, occupancy or launch bound);
- otherwise the larger of the two, reported as "partially".
"""

from __future__ import annotations

from evokernel_mcp.profile import stalls
from evokernel_mcp.profile.derived import BUSY_PCT
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
            f"compute-bound: {cname} {c:.0f}%, DRAM throughput {m:.0f}% of peak. " + _compute_advice(derived)))
    if max(m, c) < LOW:
        return "latency-bound", Finding(kind="bottleneck", evidence=ev, text=(
            f"latency-bound: neither memory ({m:.0f}% of peak DRAM) nor compute ({cname} {c:.0f}%) is near "
            "saturation; raise parallelism/occupancy, overlap loads with math, or the launch is too small."))
    bound: Bound = "memory-bound" if m >= c else "compute-bound"
    return bound, Finding(kind="bottleneck", evidence=ev, text=(
        f"partially {bound}: DRAM throughput {m:.0f}% of peak, {cname} {c:.0f}% (neither saturated)."))


MATRIX_KEYS = ("tensor_pipe_busy", "mfma_busy")
ON_MATRIX = 10.0  # % busy: the kernel already runs on the matrix pipe


def _matrix_busy(d: dict[str, DerivedValue]) -> tuple[str | None, float | None]:
    k = next((k for k in MATRIX_KEYS if k in d), None)
    return (k, d[k].value) if k else (None, None)


def _compute_advice(d: dict[str, DerivedValue]) -> str:
    key, busy = _matrix_busy(d)
    if busy is not None and busy >= ON_MATRIX:
        return (f"It already runs on the matrix pipe ({key.replace('_', ' ')} {busy:.0f}%): cut the work around the "
                "MMAs (address math, conversions, epilogue), overlap loads with MMAs (more stages), or use a lower "
                "precision.")
    if busy is not None:
        return (f"The matrix pipe is idle ({key.replace('_', ' ')} {busy:.0f}%): move the math onto matrix cores "
                "(tl.dot / MFMA / wgmma), use a lower precision, or remove redundant math.")
    return "Use faster instructions (matrix cores, lower precision) or remove redundant math."


def _rules(d: dict[str, DerivedValue], duration_ns: float | None) -> list[Finding]:
    out = []
    key, busy = _matrix_busy(d)
    if busy is not None and busy >= BUSY_SHOWN:
        ev: dict[str, float | str] = {key: round(busy, 1)}
        if "tensor_flops" in d:
            ev["tensor_flops"] = d["tensor_flops"].value
        out.append(Finding(kind="compute", evidence=ev, text=f"{key.replace('_', ' ')} {busy:.0f}% of peak."))
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
        what = "tensor-pipe and CUDA-core FLOPs" if "tensor_flops" in d else "the FLOPs counted"
        out.append(Finding(kind="compute", evidence={"roofline_fraction": round(rf, 1),
                                                     "arithmetic_intensity": _v(d, "arithmetic_intensity")},
                           text=f"at {rf:.0f}% of the roofline for its arithmetic intensity ({what})."))
    return out


BUSY_SHOWN = BUSY_PCT
MAX_FINDING_KERNELS = 3
MIN_TIME_SHARE = 0.10


def _label(d: PmcDispatch) -> str:
    """'void addition_kernel<float>(float*, ...)' -> 'addition_kernel<float> #1' (the evidence keeps the full name)."""
    name = d.kernel.split("(", 1)[0].removeprefix("void ").strip()[:60] or d.kernel[:60]
    return f"{name} #{d.dispatch_id}" if d.dispatch_id is not None else name


def main_dispatches(dispatches: list[PmcDispatch]) -> list[PmcDispatch]:
    """The dispatches findings are about: per kernel name its longest dispatch, kernels ranked by their total
    time, those with at least 10% of all profiled time (always the first), at most 3."""
    if not dispatches:
        return []
    total: dict[str, float] = {}
    longest: dict[str, PmcDispatch] = {}
    for d in dispatches:
        total[d.kernel] = total.get(d.kernel, 0.0) + (d.duration_ns or 0.0)
        if d.kernel not in longest or (d.duration_ns or 0) > (longest[d.kernel].duration_ns or 0):
            longest[d.kernel] = d
    ranked = sorted(total, key=lambda k: -total[k])
    all_time = sum(total.values())
    keep = [k for i, k in enumerate(ranked) if i == 0 or (all_time and total[k] / all_time >= MIN_TIME_SHARE)]
    return [longest[k] for k in keep[:MAX_FINDING_KERNELS]]


def findings_for(dispatches: list[PmcDispatch]) -> tuple[Bound, list[Finding]]:
    """Findings of the dispatches that matter (main_dispatches), each naming its dispatch (kernel and
    index, in the text and the evidence); the bound is that of the heaviest."""
    mains = main_dispatches(dispatches)
    if not mains:
        return "unknown", []
    found: list[Finding] = []
    bound: Bound = "unknown"
    for i, d in enumerate(mains):
        b, f = classify(d.derived)
        if i == 0:
            bound = b
        st = stalls.finding(d.derived) if i == 0 else None  # where the heaviest kernel's warps wait
        fs = ([f] if f else []) + ([st] if st else []) + _rules(d.derived, d.duration_ns) + [
            Finding(kind="compute", evidence={}, text=n) for n in d.notes]
        if not fs and i == 0:
            fs.append(Finding(kind="note", evidence={}, text=(
                "not enough counters to classify the bottleneck; use preset 'overview' or 'memory'.")))
        for x in fs:
            x.text = f"{_label(d)}: {x.text}"
            x.evidence.setdefault("kernel", d.kernel[:80])
            if d.dispatch_id is not None:
                x.evidence.setdefault("dispatch", str(d.dispatch_id))
        found += fs
    return bound, found
