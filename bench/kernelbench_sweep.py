"""All 100 KernelBench level-1 problems, unchanged, through the MCP client on a GPU.

    PYTHONPATH=. python3 bench/kernelbench_sweep.py [--kb ../shared/kernelbench/level1] [--only 19,23,51]
        [--part 1/4] [--seeds 1] [--max-time-s 0.5] [--overrides-scale 0] [--no-benchmark] [--ballast-gb 30]

Per problem, with the server built in-process (`Client(build_server())`): verify the same-code candidate
(the file + `class ModelNew(Model): pass`; must pass every seed and the signed probe), verify a perturbed
one (outputs * 1.01 + 1e-3, indices + 1; must fail), benchmark the same-code candidate (must complete;
its interval should hold 1). Records the verdicts, wall times, the bar, the error kind/message, and device
memory while the problem ran, sampled every 0.2 s in a thread:
  peak_ours_mib      the peak of the sum over OUR processes (this one and every descendant: the runner, its
                     children) of nvidia-smi --query-compute-apps used_memory (pynvml where installed), the
                     ballast process left out; where no per-process reading matches our tree (pids of another
                     namespace), the device's used memory minus what was used at the sweep's start
                     (peak_ours_source says so)
  peak_gpu_mem_mib   the peak of the whole device's used memory (nvidia-smi --query-gpu / amd-smi), ballast included
  own_bytes          the problem's own bytes: its inputs + its outputs (shapes from meta tensors, no data)
  floor_bytes        its inputs + the peak of the tensors PyTorch's own forward makes (verify/forward_peak.py,
                     forwards on meta tensors: a lower bound of the reference process's need, no context)
  peak_one_child_mib the largest reading of one reference or candidate child (PyTorch's forward as our children
                     run it, context included); others_at_least_mib = peak_ours - it: what the runner, the idle
                     arm or child and spares held at least at our peak (bench/gpu_memory.py)
and the distributions of peak_ours / own, peak_ours / floor and one child / own over the problems whose own bytes
exceed 1 GB, with the problems over 3x broken down.
`--ballast-gb N` starts a separate process holding N GB of the device (torch.empty) for the sweep's duration:
every problem must then run or say too_big/oom cleanly (the summary counts the error kinds; none may be crash).
Writes bench/results/kernelbench_sweep_<device>_<date>[_part-i-of-n].{md,json} (and a copy under $OUT)
with device, date and versions. `--overrides-scale N` (0 = off) scales sizes down to ~N input elements
(overrides.scaled_overrides) for a dry run on a small machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.gpu_memory import Ballast, GpuMemSampler, timeline_busiest_child_mib  # noqa: E402


def problem_bytes(src: str, overrides: dict | None = None) -> dict:
    """{own_bytes: the problem's inputs + outputs, floor_bytes: its inputs + the peak of the tensors PyTorch's own
    forward makes (verify/forward_peak.py: a lower bound of what the reference's process needs, context left
    out)}, from get_inputs and forwards on meta tensors (no data); None where meta cannot tell."""
    try:
        import torch

        from evokernel_mcp.verify.forward_peak import forward_peak_bytes
        from evokernel_mcp.verify.memory import meta_input_specs, meta_output_specs

        if overrides:
            from evokernel_mcp.overrides import apply_overrides

            src, _ = apply_overrides(src, overrides)
        ns: dict = {"__name__": "kb_problem"}
        exec(compile(src, "<problem>", "exec"), ns)  # noqa: S102 - the KernelBench file this script sweeps
        ins = meta_input_specs(ns["get_inputs"])
        with torch.device("meta"):
            model = ns["Model"](*ns.get("get_init_inputs", list)())
            inputs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype)) for s in ins or []]
        outs = meta_output_specs(model, inputs) if ins is not None else None
        if ins is None or outs is None:
            return {"own_bytes": None, "floor_bytes": None}
        i = sum(s.nbytes() for s in ins)
        peak = forward_peak_bytes(model, inputs)
        return {"own_bytes": i + sum(s.nbytes() for s in outs), "floor_bytes": None if peak is None else i + peak}
    except Exception:  # noqa: BLE001 - a file meta cannot run
        return {"own_bytes": None, "floor_bytes": None}


def _with_floor(r: dict) -> dict:
    """The row with peak_over_floor: our peak over the floor of PyTorch's own forward (problem_bytes)."""
    f, p = r.get("floor_bytes"), r.get("peak_ours_mib")
    return {**r, "peak_over_floor": round(p * 2**20 / f, 2) if f and p else None}


def _with_one_child(r: dict) -> dict:
    """The row with the one-child figures: peak_one_child_mib (the largest reading of one reference or candidate
    process: PyTorch's forward as one of our children runs it, its CUDA context included; from the timeline where
    an older row lacks it), one_child_over_own, and others_at_least_mib = peak of ours - that reading (at our
    peak, the processes other than the busiest child held at least this much: the runner, the idle arm or
    child, spares)."""
    one = r.get("peak_one_child_mib")
    if one is None and r.get("timeline"):
        one = timeline_busiest_child_mib(r["timeline"])
    own, ours = r.get("own_bytes"), r.get("peak_ours_mib")
    return {**r, "peak_one_child_mib": one,
            "one_child_over_own": round(one * 2**20 / own, 2) if one and own else None,
            "others_at_least_mib": round(ours - one) if one and ours else None}


def ratio_summary(rows: list, min_own: int = 10**9, over: str = "own_bytes", num: str = "peak_ours_mib") -> dict:
    """Distribution of `num` (peak_ours_mib, or peak_one_child_mib) / `over` (own_bytes, or floor_bytes) over the
    problems whose own bytes exceed min_own."""
    rs = sorted(r[num] * 2**20 / r[over] for r in rows
                if r.get("own_bytes") and r["own_bytes"] > min_own and r.get(num) and r.get(over))
    if not rs:
        return {"n": 0}

    def q(p: float) -> float:
        return round(rs[min(len(rs) - 1, int(p * (len(rs) - 1) + 0.5))], 2)
    return {"n": len(rs), "min": round(rs[0], 2), "median": q(0.5), "p90": q(0.9), "max": round(rs[-1], 2),
            "over_3x": sum(1 for r in rs if r > 3)}


def kinds_summary(rows: list) -> dict:
    """How many problems ended with each error kind (same-code verify, perturbed verify, benchmark)."""
    out: dict[str, int] = {}
    for r in rows:
        for part in ("same", "perturbed", "benchmark"):
            err = (r.get(part) or {}).get("error")
            if err:
                k = str(err).split(":", 1)[0] if ":" in str(err) else "error"
                out[k] = out.get(k, 0) + 1
    return out


def _kb_dir(arg: str | None) -> Path:
    for p in filter(None, [arg, REPO.parent / "shared" / "kernelbench" / "level1", "/work/shared/kernelbench/level1"]):
        if Path(p).is_dir():
            return Path(p)
    sys.exit("KernelBench level-1 folder not found: pass --kb")


def _select(files: list[Path], only: str | None, part: str | None) -> list[Path]:
    if only:
        want = {int(x) for x in only.split(",") if x.strip()}
        files = [f for f in files if int(f.name.split("_")[0]) in want]
    if part:
        i, n = (int(x) for x in part.split("/"))
        if not 1 <= i <= n:
            sys.exit("--part i/n with 1 <= i <= n")
        files = files[i - 1::n]
    return files


async def call_tool(c, tool: str, args: dict) -> tuple[dict, float, bool, str | None]:
    t0 = time.perf_counter()
    r = await c.call_tool(tool, args)
    body = r.structured_content or {}
    text = None if not r.is_error else "".join(getattr(x, "text", "") for x in r.content)[:500]
    while not r.is_error and body.get("job_id") and body.get("passed", body.get("results")) is None \
            and body.get("state") in ("queued", "running"):  # wait_s ran out: collect the job
        r = await c.call_tool("job_result", {"job_id": body["job_id"], "wait_s": 300})
        body = r.structured_content or {}  # job_result: the tool's own fields at the top level
    return body, time.perf_counter() - t0, r.is_error, text


def _verdict(body: dict, is_error: bool, text: str | None) -> dict:
    err = body.get("error") or {}
    cases = body.get("cases") or []
    failing = [c for c in cases if not c.get("passed")]
    return {"passed": body.get("passed") if not is_error else None, "cases": len(cases),
            "failed_cases": [f"{'probe ' if c.get('probe') else ''}seed {c.get('seed')}: {c.get('mismatches')} "
                             f"mismatches; {c.get('note') or ''}"[:300] for c in failing[:3]],
            "bars": sorted({c.get("bar", "")[:120] for c in cases}), "reference": sorted({str(c.get("reference"))
                                                                                          for c in cases}),
            "error": (f"{err.get('kind')}: {err.get('message', '')[:400]}" if err else text)}


async def sweep(files: list[Path], seeds: int, max_time_s: float, scale: int, bench: bool, wait_s: float,
                budget_s: float = 0.0, exclude: set[int] | None = None, timeline: bool = False,
                sample_s: float = 0.2) -> list:
    from mcp import Client

    from evokernel_mcp.kb_candidates import perturbed, same_code
    from evokernel_mcp.overrides import scaled_overrides
    from evokernel_mcp.server import build_server

    rows = []
    start_mib = GpuMemSampler()._read() if shutil.which("nvidia-smi") else None  # the ballast's and others' share
    async with Client(build_server()) as c:
        t_start = time.perf_counter()
        for f in files:
            if budget_s and time.perf_counter() - t_start > budget_s:
                print(f"budget of {budget_s:.0f} s spent: {f.name} and later not run", flush=True)
                break
            src = f.read_text()
            ov = scaled_overrides(src, max_elems=scale) if scale else None
            base = {"reference": src, "wait_s": wait_s, "timeout_s": 600, **({"overrides": ov} if ov else {})}
            row: dict = {"problem": f.name, "overrides": ov, **problem_bytes(src, ov)}
            t_all = time.perf_counter()
            with GpuMemSampler(period_s=sample_s, exclude=exclude, timeline=timeline) as mem:
                mem.phase = "verify"
                b, t, e, x = await call_tool(c, "verify_vs_pytorch",
                                             {**base, "candidate": same_code(src), "seeds": seeds})
                row["same"] = {**_verdict(b, e, x), "wall_s": round(t, 2)}
                mem.phase = "perturbed"
                b, t, e, x = await call_tool(c, "verify_vs_pytorch", {**base, "candidate": perturbed(src), "seeds": 1,
                                                                  "probe": False, "stop_on_first_failure": True})
                row["perturbed"] = {**_verdict(b, e, x), "wall_s": round(t, 2)}
                if bench:
                    mem.phase = "benchmark"
                    b, t, e, x = await call_tool(c, "benchmark", {**base, "candidate": same_code(src),
                                                              "max_time_s": max_time_s})
                    res = (b.get("results") or [{}])[0]
                    err = b.get("error") or {}
                    row["benchmark"] = {"completed": not e and bool(b.get("results")) and not err,
                                        "wall_s": round(t, 2), "speedup": res.get("speedup"),
                                        "speedup_ci": res.get("speedup_ci"), "valid": res.get("valid"),
                                        "invalid_reason": res.get("invalid_reason"),
                                        "error": (f"{err.get('kind')}: {err.get('message', '')[:300]}" if err else x)}
            row["peak_gpu_mem_mib"] = mem.peak_mib
            row["peak_ours_mib"] = mem.peak_ours_mib
            row["peak_ours_by_phase"] = mem.by_phase  # each phase's peak and our processes' MiB at it
            if mem.timeline is not None:
                row["timeline"] = mem.timeline
            if mem.peak_ours_mib is None and mem.peak_mib is not None and start_mib is not None:
                # no per-process reading matched our tree (pids of another namespace): the device's used
                # memory over what was used before the sweep began (the ballast's share and others' left out)
                row["peak_ours_mib"] = mem.peak_mib - start_mib
                row["peak_ours_source"] = "device used minus used at the sweep's start"
            row["peak_one_child_mib"] = mem.peak_one_child_mib
            row["peak_over_own"] = (round(row["peak_ours_mib"] * 2**20 / row["own_bytes"], 2)
                                    if row["peak_ours_mib"] and row["own_bytes"] else None)
            row = _with_floor(_with_one_child(row))
            row["wall_s"] = round(time.perf_counter() - t_all, 2)
            sc = row["benchmark"].get("speedup_ci") if bench else None
            row["ok"] = (row["same"]["passed"] is True and row["perturbed"]["passed"] is False
                         and (not bench or (row["benchmark"]["completed"] and row["benchmark"]["valid"] is True)))
            row["interval_holds_1"] = bool(sc and sc[0] <= 1.0 <= sc[1]) if bench else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def versions() -> dict:
    out = {"python": platform.python_version()}
    try:
        import torch

        out.update(torch=torch.__version__, cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None),
                   device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
    except Exception as e:  # noqa: BLE001
        out["torch_error"] = repr(e)
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    return out


def _markdown(meta: dict, rows: list) -> str:
    lines = [f"# KernelBench level-1 sweep: {meta['device']}, {meta['date']}", "",
             f"versions: {json.dumps(meta['versions'])}; seeds {meta['seeds']}, benchmark max_time_s "
             f"{meta['max_time_s']}, overrides scale {meta['overrides_scale'] or 'off (unchanged sizes)'}; "
             f"{meta['problems']} problems in {meta['wall_s']:.0f} s; all right: {meta['ok']}/{meta['problems']}", "",
             f"ballast: {meta.get('ballast_gb') or 0:g} GB held by another process; error kinds: "
             f"{json.dumps(meta.get('error_kinds') or {})}", "",
             "peak device memory of our processes / the problem's own bytes (inputs + outputs), problems over 1 GB: "
             f"{json.dumps(meta.get('peak_over_own_over_1gb') or {})}", "",
             "the floor: the problem's inputs + the peak of the tensors PyTorch's own forward makes (forwards on meta "
             "tensors, a lower bound; no CUDA context); floor / own bytes, problems over 1 GB: "
             f"{json.dumps(meta.get('floor_over_own_over_1gb') or {})}; peak of our processes / the floor: "
             f"{json.dumps(meta.get('peak_over_floor_over_1gb') or {})}", "",
             "one child: the largest reading of one reference or candidate process (PyTorch's forward as one of our "
             "children runs it, its CUDA context included) / own bytes, problems over 1 GB: "
             f"{json.dumps(meta.get('one_child_over_own_over_1gb') or {})}; the problems over 3x: one child alone / "
             "own bytes, and what our other processes (the runner, the idle arm or child, spares) held at least at "
             f"our peak: {json.dumps(meta.get('over_3x_breakdown') or {})}", "",
             "| problem | same-code | perturbed | benchmark | speedup [CI] | own MB | floor MB | peak ours MiB | "
             "ours/own | ours/floor | one child MiB | peak ours by phase GiB (verify/perturbed/benchmark) | "
             "peak GPU MiB | wall s | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.get("benchmark") or {}
        ci = b.get("speedup_ci")
        sp = f"{b['speedup']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if b.get("speedup") and ci else "-"
        if b.get("completed") and b.get("valid") is False:
            sp = f"invalid ({b.get('invalid_reason')})"
        err = r["same"]["error"] or r["perturbed"]["error"] or b.get("error") or ""
        lines.append(f"| {r['problem']} | {r['same']['passed']} ({r['same']['wall_s']} s) | "
                     f"{r['perturbed']['passed']} ({r['perturbed']['wall_s']} s) | {b.get('completed', '-')} "
                     f"({b.get('wall_s', '-')} s) | {sp} | "
                     f"{round(r['own_bytes'] / 1e6) if r.get('own_bytes') else '-'} | "
                     f"{round(r['floor_bytes'] / 1e6) if r.get('floor_bytes') else '-'} | {r.get('peak_ours_mib')} | "
                     f"{r.get('peak_over_own')} | {r.get('peak_over_floor')} | {r.get('peak_one_child_mib') or '-'} | "
                     f"{_phases(r)} | {r['peak_gpu_mem_mib']} | "
                     f"{r['wall_s']} | "
                     f"{str(err)[:160].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _phases(r: dict) -> str:
    ph = r.get("peak_ours_by_phase") or {}
    return "/".join(f"{ph[k]['peak_mib'] / 1024:.1f}" if k in ph else "-" for k in ("verify", "perturbed", "benchmark"))


def main() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kb")
    ap.add_argument("--only", help="comma-separated problem numbers, e.g. 19,23,51")
    ap.add_argument("--part", help="i/n: every n-th problem starting at the i-th (split the sweep)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--ballast-gb", type=float, default=0.0,
                    help="a separate process holds this many GB of the device (torch.empty) for the whole sweep")
    ap.add_argument("--max-time-s", type=float, default=0.5)
    ap.add_argument("--overrides-scale", type=int, default=0)
    ap.add_argument("--wait-s", type=float, default=300)
    ap.add_argument("--no-benchmark", action="store_true")
    ap.add_argument("--budget-s", type=float, default=0.0,
                    help="start no new problem after this many seconds (0 = no limit); the results still get written")
    ap.add_argument("--combine", nargs="+", type=Path, help="merge the JSON results of several parts into one table")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    ap.add_argument("--timeline", action="store_true",
                    help="keep every sample (time, phase, our processes' MiB by name) in the JSON rows")
    ap.add_argument("--sample-s", type=float, default=0.2, help="seconds between two readings of device memory")
    a = ap.parse_args()
    if a.combine:
        return combine(a.combine, a.tag, _kb_dir(a.kb))
    kb = _kb_dir(a.kb)
    files = _select(sorted(kb.glob("*.py"), key=lambda p: int(p.name.split("_")[0])), a.only, a.part)
    t0 = time.perf_counter()
    with Ballast(a.ballast_gb) as ballast:
        rows = anyio.run(sweep, files, a.seeds, a.max_time_s, a.overrides_scale, not a.no_benchmark, a.wait_s,
                         a.budget_s, ballast.pids, a.timeline, a.sample_s)
    v = versions()
    device = v.get("device", "cpu").replace("NVIDIA ", "").replace(" ", "-")
    date = dt.date.today().isoformat()
    meta = {"device": device, "date": date, "versions": v, "seeds": a.seeds, "max_time_s": a.max_time_s,
            "overrides_scale": a.overrides_scale, "problems": len(rows), "ok": sum(r["ok"] for r in rows),
            "wall_s": time.perf_counter() - t0, "only": a.only, "part": a.part, "ballast_gb": a.ballast_gb,
            **_summaries(rows)}
    stem = f"kernelbench_sweep_{device}_{date}" + (f"_part-{a.part.replace('/', '-of-')}" if a.part else "") + \
        ("_only" if a.only else "") + (f"_ballast{a.ballast_gb:g}" if a.ballast_gb else "") + \
        (f"_{a.tag}" if a.tag else "")
    _write(stem, meta, rows)
    print(f"{meta['ok']}/{meta['problems']} right in {meta['wall_s']:.0f} s -> bench/results/{stem}.md")


def _write(stem: str, meta: dict, rows: list) -> None:
    for d in filter(None, [REPO / "bench" / "results", Path(os.environ["OUT"]) if os.environ.get("OUT") else None]):
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        (d / f"{stem}.md").write_text(_markdown(meta, rows))


def _summaries(rows: list) -> dict:
    return {"peak_over_own_over_1gb": ratio_summary(rows), "peak_over_floor_over_1gb": ratio_summary(rows, over=
            "floor_bytes"), "floor_over_own_over_1gb": _floor_summary(rows),
            "one_child_over_own_over_1gb": ratio_summary(rows, num="peak_one_child_mib"),
            "over_3x_breakdown": over_3x_breakdown(rows), "error_kinds": kinds_summary(rows)}


def over_3x_breakdown(rows: list, min_own: int = 10**9) -> dict:
    """For the problems over 1 GB whose peak of ours passes 3x their own bytes: how far one child alone went
    (one_child_over_own, sorted) and what the other processes held at least at our peak (others_at_least_mib)."""
    over = [r for r in rows if r.get("own_bytes") and r["own_bytes"] > min_own and (r.get("peak_over_own") or 0) > 3
            and r.get("one_child_over_own")]
    extra = sorted(r["others_at_least_mib"] for r in over)
    return {"n": len(over), "one_child_over_own": sorted(r["one_child_over_own"] for r in over),
            "one_child_over_2_5x": sum(r["one_child_over_own"] > 2.5 for r in over),
            "others_at_least_mib": {"min": extra[0], "median": extra[len(extra) // 2], "max": extra[-1]}
            if extra else None}


def _floor_summary(rows: list) -> dict:
    """The floor of PyTorch's own forward over the problem's own bytes (problems over 1 GB), and how many have a
    floor above 3x / above 2.4x (with the three processes' contexts, ~1.8 GiB, even a harness adding nothing else
    would pass 3x there)."""
    rs = [r["floor_bytes"] / r["own_bytes"] for r in rows
          if r.get("own_bytes") and r["own_bytes"] > 10**9 and r.get("floor_bytes")]
    return {"n": len(rs), "max": round(max(rs), 2) if rs else None, "over_2.4x": sum(x > 2.4 for x in rs),
            "over_3x": sum(x > 3 for x in rs)}


def combine(paths: list[Path], tag: str, kb: Path | None = None) -> None:
    """One table from the parts (each run in its own device call); a problem run twice keeps its last row. A row
    without floor_bytes (an older run) gets it from the problem's file in `kb` (meta tensors, on this host).
    Timelines are read for the one-child figures, then left in the parts' own files."""
    metas, by_problem = [], {}
    for p in paths:
        d = json.loads(p.read_text())
        metas.append(d["meta"])
        for r in d["rows"]:
            by_problem[r["problem"]] = r
    for name, r in by_problem.items():
        if "floor_bytes" not in r and kb is not None and (kb / name).is_file():
            r["floor_bytes"] = problem_bytes((kb / name).read_text(), r.get("overrides"))["floor_bytes"]
        r = _with_floor(_with_one_child(r))
        r.pop("timeline", None)  # it stays in the run's own file
        by_problem[name] = r
    rows = sorted(by_problem.values(), key=lambda r: int(r["problem"].split("_")[0]))
    m0 = metas[-1]  # the newest run names the table (device, date)
    meta = {**m0, "problems": len(rows), "ok": sum(r["ok"] for r in rows), "wall_s": sum(m["wall_s"] for m in metas),
            "only": None, "part": f"combined from {len(paths)} runs: " + ", ".join(p.name for p in paths),
            **_summaries(rows)}
    stem = f"kernelbench_sweep_{m0['device']}_{m0['date']}_combined" + (f"_{tag}" if tag else "")
    _write(stem, meta, rows)
    print(f"{meta['ok']}/{meta['problems']} right; {meta['wall_s']:.0f} s of sweeping -> bench/results/{stem}.md")


if __name__ == "__main__":
    main()
