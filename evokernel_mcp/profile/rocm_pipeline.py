"""The AMD profiling pipelines (rocprofv3 counters and ATT) with the guards of rocprof_safe.py:
counter groups run combined first, then pass by pass with bisection when a run hangs, aborts or cannot
be scheduled; the ATT run is retried on a wider CU/SE selection when the traced CU caught no wave.
Degraded outcomes come back as results with `degraded` and the reasons, never as zero counters."""

from __future__ import annotations

import shutil
from pathlib import Path

from evokernel_mcp import artifacts
from evokernel_mcp.errors import ParseError
from evokernel_mcp.models import Provenance
from evokernel_mcp.profile import rocprof_safe as safe
from evokernel_mcp.profile import rocprofv3
from evokernel_mcp.profile.models import Finding, TraceResult

# (target CU, SE mask) tried in turn when the traced CU caught no wave (GEAK: --att-wide; CU 0, SEs 0-3 then 0-7)
ATT_WIDER = ((0, "0xF"), (0, "0xFF"))


def _clear(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)


async def _session(launch, argv: list[str], out_rel: str, timeout_s: float, files_in: dict[str, str] | None = None,
                   binds: list[str] | None = None) -> safe.RunOutcome:
    """One rocprofv3 run over the sandboxed candidate; its files under launch.workdir/out_rel. A failure of the
    profiled child itself (the candidate raised, a limit) ends the pipeline (collect.SessionFailed)."""
    res = await launch.run(argv, timeout_s=timeout_s, files_in=files_in or {}, collect=[out_rel],
                           binds=[*rocprofv3.binds(argv[0]), *(binds or [])])
    if res.timed_out:
        return safe.RunOutcome("timeout", None, res.stderr, f"rocprofv3 did not finish within {timeout_s:g} s and "
                               "was killed (a hang: the collection is DEGRADED, not zero)")
    return safe.classify(res.returncode, res.stderr)


async def counter_runs(exe: str, launch, passes: list[list[str]], kfilter: str | None,
                       iteration_range: str) -> tuple[safe.GroupRuns, list[str], str]:
    """Collect every group, pass by pass (bisected when a run hangs, aborts or cannot be scheduled): each pass
    is one run of a fresh sandboxed child (rocprofv3 reruns its application once per `pmc:` line, and a child
    serves one run). Returns (runs, the first argv, all stderr)."""
    out_dir = launch.workdir / "rocprof"
    budget = safe.Budget.start(launch.timeout_s, getattr(launch, "pass_timeout_s", None))
    argvs: list[list[str]] = []
    stderrs: list[str] = []
    counter = iter(range(1, 10_000))

    async def run_one(group: list[str], timeout_s: float):
        k = next(counter)
        rel, inp = f"rocprof/run_{k:02d}", f"pmc_input_run{k:02d}.txt"
        argv = rocprofv3.counter_argv(exe, Path(inp), Path(rel), kfilter, iteration_range)
        argvs.append(argv)
        res = await _session(launch, argv, rel, timeout_s, {inp: rocprofv3.input_file_text([group])})
        stderrs.append(f"--- {' '.join(map(str, argv[:3]))} ... ({res.kind})\n{res.stderr}")
        if not res.ok:
            _clear(launch.workdir / rel)
        return res, out_dir / f"run_{k:02d}"

    runs = await safe.collect_groups(passes, run_one, budget)
    return runs, argvs[0] if argvs else [exe], "\n".join(stderrs)


def missing_counters(requested: list[str], dispatches, dropped: dict[str, str], stderr: str) -> dict[str, str]:
    """Requested counters absent from every dispatch (rocprofv3 skips what a device lacks), with the reason."""
    seen = {k for d in dispatches for k in d.counters}
    why = ("requested, but rocprofv3 reported no value for it (its stderr says 'Unable to find all counters': "
           "not available on this device/driver)" if "Unable to find all counters" in stderr
           else "requested, but absent from rocprofv3's output")
    return {c: dropped.get(c, why) for c in requested if c not in seen}


def degrade_findings(reasons: list[str], missing: dict[str, str]) -> list[Finding]:
    if not reasons and not missing:
        return []
    text = "DEGRADED collection: " + "; ".join(reasons or ["some counters are missing"])
    if missing:
        text += f". Not collected (absent, not zero): {', '.join(sorted(missing))}"
    return [Finding(kind="note", text=text[:1500], evidence={"counters_not_collected": float(len(missing))})]


# ---------------------------------------------------------------- ATT

def _waves_in(ui: Path, read_att_dir) -> tuple[list, str, list[str]] | None:
    """Rows of a decoder dir when it holds executed instructions, else None (no wave on the traced CU)."""
    try:
        rows, kernel, notes = read_att_dir(ui)
    except (ParseError, OSError, KeyError, TypeError, ValueError):
        return None
    if not any(r.hits > 0 or r.cycles > 0 for r in rows if not r.is_label):
        return None
    return rows, kernel, notes


def att_attempts(target_cu: int, se_mask: str) -> list[tuple[int, str]]:
    """The agent's selection first, then wider ones (SE masks that include the agent's)."""
    out = [(target_cu, se_mask)]
    try:
        base = int(se_mask, 16)
    except ValueError:
        base = 0
    for cu, mask in ATT_WIDER:
        if (cu, mask) not in out and int(mask, 16) | base == int(mask, 16):  # never narrower than the agent's
            out.append((cu, mask))
    return out


def degraded_trace(tool_info: dict, kfilter: str | None, reasons: list[str], notes: list[str],
                   files: dict[str, str]) -> TraceResult:
    aid = artifacts.put("thread_trace", files | {"degraded.txt": "\n".join(reasons) + "\n"},
                        detail="rocprofv3 ATT: degraded (no usable trace); stderr and outputs kept")
    return TraceResult(tool=tool_info, kernel=None, degraded=True, degraded_reasons=reasons,
                       notes=notes + [f"kernel filter: {kfilter!r}"], artifact_id=aid,
                       message="No usable thread trace: " + "; ".join(reasons),
                       provenance=[Provenance(field="degraded_reasons", source="rocprofv3",
                                              detail=f"{tool_info.get('version') or 'version unknown'}; "
                                              "exit status / output files of each attempt")])


async def trace_rocm(launch, kernel_regex: str | None, top_n: int, *, target_cu: int, se_mask: str, simd_select: str,
                     buffer_size: str, att_library_path: str | None, read_att_dir, trace_result,
                     short_argv) -> TraceResult:
    exe, ver = rocprofv3.find_rocprofv3()
    lib = rocprofv3.find_att_library(att_library_path)
    notes: list[str] = []
    kfilter, ksrc = safe.effective_filter(kernel_regex, launch.spec.get("candidate", ""))
    notes.append(f"kernel filter {kfilter!r} ({ksrc})")
    budget = safe.Budget.start(launch.timeout_s, getattr(launch, "pass_timeout_s", None))
    rng = f"[{int(launch.spec.get('warmup', 1)) + 1}]"
    files: dict[str, str] = {}
    reasons: list[str] = []
    argv: list[str] = []
    for i, (cu, mask) in enumerate(att_attempts(target_cu, se_mask)):
        rel = "att" if i == 0 else f"att_retry{i}"
        out_dir = launch.workdir / rel
        argv = rocprofv3.att_argv(exe, Path(rel), kfilter, rng, target_cu=cu, se_mask=mask, simd_select=simd_select,
                                  buffer_size=buffer_size, library_dir=lib)
        res = await _session(launch, argv, rel, budget.for_run(), binds=[lib] if lib else None)
        files |= {f"attempt{i}_{k}": v for k, v in rocprofv3.collect_files(out_dir).items()} if out_dir.exists() else {}
        files[f"attempt{i}_rocprofv3_stderr.txt"] = res.stderr[-200_000:]
        if res.kind == "failed":
            safe.raise_failed(res)
        if not res.ok:
            reasons.append(f"attempt {i + 1} (CU {cu}, SE mask {mask}): {res.reason}")
            break
        for ui in rocprofv3.find_att_dirs(out_dir):
            got = _waves_in(ui, read_att_dir)
            if got is None:
                continue
            rows, kernel, more = got
            if i:
                notes.append(f"the traced CU caught no wave with CU {target_cu} / SE mask {se_mask}; traced CU {cu} "
                             f"/ SE mask {mask} instead (attempt {i + 1})")
            dirs = rocprofv3.find_att_dirs(out_dir)
            if len(dirs) > 1:
                more.append(f"{len(dirs)} traced dispatches; summarized {ui.name}")
            keep = rocprofv3.collect_files(out_dir) | {"rocprofv3_stderr.txt": res.stderr[-200_000:]}
            return trace_result(rows, "amd", kernel, "rocprofv3", exe, ver, argv, top_n, keep, notes + more)
        reasons.append(f"attempt {i + 1} (CU {cu}, SE mask {mask}): no wave of a matching dispatch ran on the "
                       "traced CU (no decoder output with executed instructions)")
        if budget.left() < 5:
            reasons.append("time budget used up before a wider attempt")
            break
    info = {"name": "rocprofv3", "version": ver, "path": exe, "command": short_argv(argv)}
    return degraded_trace(info, kfilter, reasons, notes, files)

