"""Where the warps wait: the `stalls` preset's breakdown as derived values, and one finding naming the top reasons.

NVIDIA (ncu, the metrics of its Warp State Statistics section):
`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio` is how many warps were stalled for <reason>,
on average, per issued instruction; together with `selected` (the warp that issued) the reasons add up to the
warp cycles between two issued instructions of a warp (cycles_per_issue, their sum here). A reason's share of that
total is where a warp's time goes.
AMD (rocprofv3 counters, as rocprof-compute's Wavefront Runtime Stats): `SQ_WAIT_ANY` (waiting on a dependency:
memory of any kind), `SQ_WAIT_INST_ANY` (unable to issue: pipe back-pressure, arbitration) and `SQ_ACTIVE_INST_ANY`
(issuing), each as a share of `SQ_WAVE_CYCLES` (all four count in the same quad-cycles, so the shares need no
scale). Upstream's caveat holds for both vendors: these say how the waves spent their time, not which unit
limits the kernel; read them with the bottleneck finding.
"""

from __future__ import annotations

from evokernel_mcp.profile.models import DerivedValue, Finding

NV_ISSUE = "smsp__issue_active.avg.per_cycle_active"
# reason -> what it means for the kernel and what moves it
NV_REASONS = {
    "long_scoreboard": "waiting for L1TEX data (global, local, texture): put more independent loads in flight "
                       "(a deeper pipeline, asynchronous copies), or remove spills to local memory",
    "short_scoreboard": "waiting for an MIO result (shared memory, special functions): fewer or wider shared-memory "
                        "reads (ldmatrix, 16-byte), fewer bank conflicts",
    "mio_throttle": "the MIO queue (shared memory, special math) is full: fewer, wider shared-memory instructions",
    "lg_throttle": "the local/global memory queue is full: fewer, wider global accesses (16-byte vectors), no spills",
    "barrier": "waiting at a block barrier for the other warps: balance the warps' work, fewer barriers or smaller "
               "blocks",
    "membar": "waiting on a memory fence: fewer fences",
    "gmma": "waiting for a warpgroup MMA (wgmma) to finish",
    "math_pipe_throttle": "an execution pipe is saturated: that pipe bounds the kernel; cut its instructions or move "
                          "work to another pipe",
    "wait": "a fixed-latency dependency: more independent instructions between dependent ones",
    "not_selected": "ready, but another warp issued: the schedulers are busy (issue-bound)",
    "selected": "issuing",
    "dispatch_stall": "the dispatcher held the warp back",
    "drain": "waiting for stores to drain at the warp's exit",
    "no_instruction": "no instruction fetched (instruction cache miss, or after a branch)",
    "branch_resolving": "waiting for a branch target or the branch unit",
    "imc_miss": "waiting for the immediate-constant cache",
    "sleeping": "every thread of the warp sleeping",
    "tex_throttle": "the texture queue is full",
    "misc": "other reasons",
}
NV_METRICS = [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in NV_REASONS] + [NV_ISSUE]
AMD_WAVE = "SQ_WAVE_CYCLES"
AMD_SHARES = {"wave_dependency_wait": ("SQ_WAIT_ANY", "waiting on a dependency (memory of any kind): more loads in "
                                       "flight, fewer waits on each"),
              "wave_issue_wait": ("SQ_WAIT_INST_ANY", "unable to issue (pipe back-pressure, arbitration): fewer "
                                  "instructions on the busiest pipe"),
              "wave_issuing": ("SQ_ACTIVE_INST_ANY", "issuing")}
AMD_COUNTERS = ["GRBM_GUI_ACTIVE", "SQ_WAVES", AMD_WAVE, "SQ_BUSY_CYCLES", "SQ_WAIT_ANY", "SQ_WAIT_INST_ANY",
                "SQ_ACTIVE_INST_ANY", "SQ_ACTIVE_INST_VMEM", "SQ_ACTIVE_INST_LDS", "SQ_ACTIVE_INST_VALU",
                "SQ_WAIT_INST_LDS"]
SHOWN = 3  # reasons named in the finding
MIN_SHARE = 10.0  # % of the cycles between issues: a smaller reason is not named (it stays in the counters)


def _dv(value: float, unit: str, formula: str) -> DerivedValue:
    return DerivedValue(value=round(float(value), 4), unit=unit, formula=formula)


def derive(c: dict[str, float], vendor: str, out: dict[str, DerivedValue]) -> None:
    """Adds stall_<reason> (NVIDIA: warps stalled per issued instruction; only the reasons of at least MIN_SHARE %
    of the cycles between issues, the rest stay in the dispatch's counters), cycles_per_issue and issue_active, or
    the AMD wave shares (% of SQ_WAVE_CYCLES); nothing when the counters were not collected."""
    if vendor == "amd":
        wave = c.get(AMD_WAVE)
        if not wave:
            return
        for key, (counter, _) in AMD_SHARES.items():
            if counter in c:
                out[f"{key}_pct"] = _dv(100 * c[counter] / wave, "%", f"100 * {counter} / {AMD_WAVE}")
        return
    got = {r: c[m] for r in NV_REASONS if (m := f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio") in c}
    total = sum(got.values())
    for reason, v in got.items():
        if total and 100 * v / total >= MIN_SHARE:
            out[f"stall_{reason}"] = _dv(v, "warps/issue",
                                         f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio")
    if total and "selected" in got:  # the sum is the whole interval only with every reason collected
        out["cycles_per_issue"] = _dv(total, "cycles", f"sum of the {len(got)} "
                                      "smsp__average_warps_issue_stalled_*_per_issue_active.ratio")
    if NV_ISSUE in c:
        out["issue_active"] = _dv(100 * c[NV_ISSUE], "%", f"100 * {NV_ISSUE}")


def finding(d: dict[str, DerivedValue]) -> Finding | None:
    """The top reasons with their share of the time and what moves them; None without the stall counters."""
    total = d.get("cycles_per_issue")
    if total is not None and total.value > 0:
        ranked = sorted(((k.removeprefix("stall_"), v.value) for k, v in d.items()
                         if k.startswith("stall_") and k != "stall_selected"), key=lambda kv: -kv[1])
        top = [(r, v) for r, v in ranked if 100 * v / total.value >= MIN_SHARE][:SHOWN]
        if not top:
            return None
        ev: dict[str, float | str] = {"cycles_per_issue": round(total.value, 2)}
        for r, v in top:
            ev[f"stall_{r}"] = round(v, 2)
        (r0, v0), rest = top[0], top[1:]
        text = f"{r0} {100 * v0 / total.value:.0f}%: {NV_REASONS[r0]}"
        if rest:
            text += "; then " + ", ".join(f"{r} {100 * v / total.value:.0f}%" for r, v in rest)
        issue = d.get("issue_active")
        head = f"a warp issues every {total.value:.1f} cycles"
        if issue is not None:
            ev["issue_active"] = round(issue.value, 1)
            head += f" (schedulers issue in {issue.value:.0f}% of active cycles)"
        return Finding(kind="stall", evidence=ev, text=f"{head}; stalled mostly on {text}.")
    shares = [(k.removesuffix("_pct"), v.value) for k, v in d.items()
              if k.removesuffix("_pct") in AMD_SHARES and k.endswith("_pct")]
    if not shares:
        return None
    ev = {f"{k}_pct": round(v, 1) for k, v in shares}
    k, v = max(((k, v) for k, v in shares if k != "wave_issuing"), key=lambda kv: kv[1], default=(None, 0.0))
    if k is None:
        return None
    text = ", ".join(f"{name.replace('_', ' ')} {val:.0f}%" for name, val in shares)
    return Finding(kind="stall", evidence=ev, text=(
        f"wave time ({AMD_WAVE}): {text}; mostly {k.replace('_', ' ')}: {AMD_SHARES[k][1]}."))
