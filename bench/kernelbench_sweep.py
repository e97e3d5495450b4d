"""All 100 KernelBench level-1 problems, unchanged, through the MCP client on a GPU.

    PYTHONPATH=. python3 bench/kernelbench_sweep.py [--kb ../shared/kernelbench/level1] [--only 19,23,51]
        [--part 1/4] [--seeds 2] [--max-time-s 0.5] [--overrides-scale 0] [--no-benchmark]

Per problem, with the server built in-process (`Client(build_server())`): verify the same-code candidate
(the file + `class ModelNew(Model): pass`; must pass every seed and the signed probe), verify a perturbed
one (outputs * 1.01 + 1e-3, indices + 1; must fail), benchmark the same-code candidate (must complete;
its interval should hold 1). Records the verdicts, wall times, the bar, the error kind/message, and
the GPU's peak memory while the problem ran (nvidia-smi / amd-smi sampled every 0.2 s: the runner's
torch.cuda.max_memory_allocated is not visible here; the sample is the whole device's used memory).
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
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class GpuMemSampler:
    """Peak used GPU memory (MiB, the whole device) sampled with nvidia-smi (or amd-smi) in a thread."""

    def __init__(self, period_s: float = 0.2):
        self.period_s, self.peak_mib, self._stop = period_s, None, threading.Event()
        self.tool = "nvidia-smi" if shutil.which("nvidia-smi") else None

    def _read(self) -> float | None:
        try:
            out = subprocess.run([self.tool, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout
            return max(float(x) for x in out.split())
        except (OSError, ValueError, subprocess.SubprocessError):
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            v = self._read()
            if v is not None:
                self.peak_mib = v if self.peak_mib is None else max(self.peak_mib, v)
            self._stop.wait(self.period_s)

    def __enter__(self) -> "GpuMemSampler":
        if self.tool:
            self._t = threading.Thread(target=self._loop, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.tool:
            self._t.join(timeout=10)


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
                budget_s: float = 0.0) -> list:
    from mcp import Client

    from evokernel_mcp.kb_candidates import perturbed, same_code
    from evokernel_mcp.overrides import scaled_overrides
    from evokernel_mcp.server import build_server

    rows = []
    async with Client(build_server()) as c:
        t_start = time.perf_counter()
        for f in files:
            if budget_s and time.perf_counter() - t_start > budget_s:
                print(f"budget of {budget_s:.0f} s spent: {f.name} and later not run", flush=True)
                break
            src = f.read_text()
            ov = scaled_overrides(src, max_elems=scale) if scale else None
            base = {"reference": src, "wait_s": wait_s, "timeout_s": 600, **({"overrides": ov} if ov else {})}
            row: dict = {"problem": f.name, "overrides": ov}
            t_all = time.perf_counter()
            with GpuMemSampler() as mem:
                b, t, e, x = await call_tool(c, "verify_vs_pytorch",
                                             {**base, "candidate": same_code(src), "seeds": seeds})
                row["same"] = {**_verdict(b, e, x), "wall_s": round(t, 2)}
                b, t, e, x = await call_tool(c, "verify_vs_pytorch", {**base, "candidate": perturbed(src), "seeds": 1,
                                                                  "probe": False, "stop_on_first_failure": True})
                row["perturbed"] = {**_verdict(b, e, x), "wall_s": round(t, 2)}
                if bench:
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
            row["wall_s"] = round(time.perf_counter() - t_all, 2)
            sc = row["benchmark"].get("speedup_ci") if bench else None
            row["ok"] = (row["same"]["passed"] is True and row["perturbed"]["passed"] is False
                         and (not bench or row["benchmark"]["completed"]))
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
             "| problem | same-code | perturbed | benchmark | speedup [CI] | peak GPU MiB | wall s | error |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.get("benchmark") or {}
        ci = b.get("speedup_ci")
        sp = f"{b['speedup']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if b.get("speedup") and ci else "-"
        err = r["same"]["error"] or r["perturbed"]["error"] or b.get("error") or ""
        lines.append(f"| {r['problem']} | {r['same']['passed']} ({r['same']['wall_s']} s) | "
                     f"{r['perturbed']['passed']} ({r['perturbed']['wall_s']} s) | {b.get('completed', '-')} "
                     f"({b.get('wall_s', '-')} s) | {sp} | {r['peak_gpu_mem_mib']} | {r['wall_s']} | "
                     f"{str(err)[:160].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kb")
    ap.add_argument("--only", help="comma-separated problem numbers, e.g. 19,23,51")
    ap.add_argument("--part", help="i/n: every n-th problem starting at the i-th (split the sweep)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--max-time-s", type=float, default=0.5)
    ap.add_argument("--overrides-scale", type=int, default=0)
    ap.add_argument("--wait-s", type=float, default=300)
    ap.add_argument("--no-benchmark", action="store_true")
    ap.add_argument("--budget-s", type=float, default=0.0,
                    help="start no new problem after this many seconds (0 = no limit); the results still get written")
    ap.add_argument("--combine", nargs="+", type=Path, help="merge the JSON results of several parts into one table")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    a = ap.parse_args()
    if a.combine:
        return combine(a.combine, a.tag)
    kb = _kb_dir(a.kb)
    files = _select(sorted(kb.glob("*.py"), key=lambda p: int(p.name.split("_")[0])), a.only, a.part)
    t0 = time.perf_counter()
    rows = anyio.run(sweep, files, a.seeds, a.max_time_s, a.overrides_scale, not a.no_benchmark, a.wait_s,
                     a.budget_s)
    v = versions()
    device = v.get("device", "cpu").replace("NVIDIA ", "").replace(" ", "-")
    date = dt.date.today().isoformat()
    meta = {"device": device, "date": date, "versions": v, "seeds": a.seeds, "max_time_s": a.max_time_s,
            "overrides_scale": a.overrides_scale, "problems": len(rows), "ok": sum(r["ok"] for r in rows),
            "wall_s": time.perf_counter() - t0, "only": a.only, "part": a.part}
    stem = f"kernelbench_sweep_{device}_{date}" + (f"_part-{a.part.replace('/', '-of-')}" if a.part else "") + \
        ("_only" if a.only else "") + (f"_{a.tag}" if a.tag else "")
    _write(stem, meta, rows)
    print(f"{meta['ok']}/{meta['problems']} right in {meta['wall_s']:.0f} s -> bench/results/{stem}.md")


def _write(stem: str, meta: dict, rows: list) -> None:
    for d in filter(None, [REPO / "bench" / "results", Path(os.environ["OUT"]) if os.environ.get("OUT") else None]):
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        (d / f"{stem}.md").write_text(_markdown(meta, rows))


def combine(paths: list[Path], tag: str) -> None:
    """One table from the parts (each run in its own device call); a problem run twice keeps its last row."""
    metas, by_problem = [], {}
    for p in paths:
        d = json.loads(p.read_text())
        metas.append(d["meta"])
        for r in d["rows"]:
            by_problem[r["problem"]] = r
    rows = sorted(by_problem.values(), key=lambda r: int(r["problem"].split("_")[0]))
    m0 = metas[0]
    meta = {**m0, "problems": len(rows), "ok": sum(r["ok"] for r in rows), "wall_s": sum(m["wall_s"] for m in metas),
            "only": None, "part": f"combined from {len(paths)} runs: " + ", ".join(p.name for p in paths)}
    stem = f"kernelbench_sweep_{m0['device']}_{m0['date']}_combined" + (f"_{tag}" if tag else "")
    _write(stem, meta, rows)
    print(f"{meta['ok']}/{meta['problems']} right; {meta['wall_s']:.0f} s of sweeping -> bench/results/{stem}.md")


if __name__ == "__main__":
    main()
