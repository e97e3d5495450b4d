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


def _move_aside(d: Path, failed_root: Path, name: str) -> None:
    if d.exists():
        failed_root.mkdir(parents=True, exist_ok=True)
        shutil.move(str(d), str(failed_root / name))


async def counter_runs(exe: str, launch, env: dict[str, str], passes: list[list[str]], kfilter: str | None,
                       iteration_range: str) -> tuple[safe.GroupRuns, list[str], str]:
    """Collect every group: one combined run when there are several, pass by pass (bisected) when that fails.
    Returns (runs, the first argv, all stderr)."""
    out_dir, failed = launch.workdir / "rocprof", launch.workdir / "rocprof_failed"
    budget = safe.Budget.start(launch.timeout_s, getattr(launch, "pass_timeout_s", None))
    argvs: list[list[str]] = []
    stderrs: list[str] = []

    async def run(lines: list[list[str]], d: Path, inp: Path, timeout_s: float) -> safe.RunOutcome:
        inp.write_text(rocprofv3.input_file_text(lines), encoding="utf-8")
        argv = rocprofv3.counter_argv(exe, inp, d, kfilter, iteration_range, launch.child())
        argvs.append(argv)
        res = await safe.guarded_run(argv, timeout_s=timeout_s, env=env, cwd=launch.workdir)
        stderrs.append(f"--- {' '.join(map(str, argv[:3]))} ... ({res.kind})\n{res.stderr}")
        return res

    if len(passes) > 1:
        res = await run(passes, out_dir, launch.workdir / "pmc_input.txt", budget.for_run(len(passes)))
        if res.ok:
            return safe.GroupRuns(collected=[(p, out_dir) for p in passes]), argvs[0], "\n".join(stderrs)
        if res.kind == "failed":
            safe.raise_failed(res)
        _move_aside(out_dir, failed, "combined")
        note = f"the combined run of {len(passes)} passes failed ({res.reason}); collected pass by pass"
    else:
        note = ""
    counter = iter(range(1, 10_000))

    async def run_one(group: list[str], timeout_s: float):
        k = next(counter)
        d = out_dir / f"run_{k:02d}"
        res = await run([group], d, launch.workdir / f"pmc_input_run{k:02d}.txt", timeout_s)
        if not res.ok:
            _move_aside(d, failed, f"run_{k:02d}")
        return res, d

    runs = await safe.collect_groups(passes, run_one, budget)
    if note:
        runs.notes.insert(0, note)
    return runs, argvs[0], "\n".join(stderrs)


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
    env, notes = safe.single_visibility_env(launch.env)
    kfilter, ksrc = safe.effective_filter(kernel_regex, launch.spec.get("candidate", ""))
    notes.append(f"kernel filter {kfilter!r} ({ksrc})")
    budget = safe.Budget.start(launch.timeout_s, getattr(launch, "pass_timeout_s", None))
    rng = f"[{int(launch.spec.get('warmup', 1)) + 1}]"
    files: dict[str, str] = {}
    reasons: list[str] = []
    argv: list[str] = []
    for i, (cu, mask) in enumerate(att_attempts(target_cu, se_mask)):
        out_dir = launch.workdir / ("att" if i == 0 else f"att_retry{i}")
        argv = rocprofv3.att_argv(exe, out_dir, kfilter, rng, target_cu=cu, se_mask=mask, simd_select=simd_select,
                                  buffer_size=buffer_size, library_dir=lib, child=launch.child())
        res = await safe.guarded_run(argv, timeout_s=budget.for_run(), env=env, cwd=launch.workdir)
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

