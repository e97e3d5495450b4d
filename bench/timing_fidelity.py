"""Timing fidelity on a GPU: does our cold-cache median match ncu's gpu__time_duration?

Three bandwidth-bound Triton axpy kernels (out = a*x + y, fp32, 12 bytes per element) sized from the
device's measured copy bandwidth to about 8 us, 45 us and 365 us. For each:
  - ncu: gpu__time_duration.sum with --cache-control all --clock-control none (the 'true' kernel time),
    median over several launches, from a child run of this file (--ncu-child);
  - ours, direct: evokernel_mcp.benchmark.timing.time_device (cold cache), 5 independent runs with each
    clock: the activity clock (kernel timestamps from CUPTI via torch.profiler, the default) and device
    events minus the empty event pair (the default before the activity clock);
  - ours, tool path: 5 calls of evokernel_mcp.benchmark.api.benchmark (runner pool, all 3 sizes per call);
  - triton.testing.do_bench(return_mode="median") for comparison.
Acceptance: ours within 3 % of ncu at 45 and 365 us, within 10 % at 8 us; the 5 medians
spread < 2 % at 45 and 365 us.

Run on the GPU machine from the repo root:  PYTHONPATH=. python3 bench/timing_fidelity.py
Writes bench/results/timing_fidelity_<device>_<date>.{md,json} (and copies under $OUT when set), plus
the raw ncu CSV and nvidia-smi lines as $OUT/timing_fidelity_raw_<date>.txt. Prints a short table last.
Options: --skip-tool, --skip-ncu, --runs N, --tag T (suffix of the result files).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import glob
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("EVOKERNEL_DEVICES", "cuda:0")  # the tool path's runner pool: this script's own process

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

TARGETS_US = (8, 45, 365)
NAMES = ("axpy_8us", "axpy_45us", "axpy_365us")
BLOCK = 1024
T_START = time.monotonic()
BUDGET_S = 330


@triton.jit
def _axpy_body(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def axpy_8us(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    _axpy_body(x_ptr, y_ptr, out_ptr, a, n, BLOCK)


@triton.jit
def axpy_45us(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    _axpy_body(x_ptr, y_ptr, out_ptr, a, n, BLOCK)


@triton.jit
def axpy_365us(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    _axpy_body(x_ptr, y_ptr, out_ptr, a, n, BLOCK)


KERNELS = {"axpy_8us": axpy_8us, "axpy_45us": axpy_45us, "axpy_365us": axpy_365us}

CANDIDATE_SRC = '''
import torch
import triton
import triton.language as tl


@triton.jit
def axpy_tool(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def run(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    axpy_tool[(triton.cdiv(n, 1024),)](x, y, out, 2.0, n, BLOCK=1024)
    return out
'''
REFERENCE_SRC = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x, y):
        return 2.0 * x + y


def get_inputs():
    return [torch.randn(1 << 20), torch.randn(1 << 20)]


def get_init_inputs():
    return []
'''


def launcher(name: str):
    k = KERNELS[name]
    return lambda x, y, out: k[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, 2.0, x.numel(), BLOCK=BLOCK)


def left_s() -> float:
    return BUDGET_S - (time.monotonic() - T_START)


# ----------------------------------------------------------------------------- sizing
def copy_bandwidth_gbs() -> float:
    src = torch.randn(256 << 20, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return 2 * src.numel() * 4 / (statistics.median(ts) * 1e-3) / 1e9


def sizes_for(gbs: float) -> dict[str, int]:
    return {name: max(BLOCK, int(t * 1e-6 * gbs * 1e9 / 12) // BLOCK * BLOCK) for name, t in zip(NAMES, TARGETS_US)}


def tensors(n: int, copies: int = 1) -> list[tuple]:
    return [(torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.empty(n, device="cuda"))
            for _ in range(copies)]


# ----------------------------------------------------------------------------- ncu
def ncu_child(sizes: dict[str, int], launches: int) -> None:
    for name, n in sizes.items():
        fn, (x, y, out) = launcher(name), tensors(n)[0]
        for _ in range(launches):
            fn(x, y, out)
        torch.cuda.synchronize()


def find_ncu() -> str | None:
    cands = [os.environ.get("NCU", ""), shutil.which("ncu") or "", "/usr/local/cuda/bin/ncu"]
    cands += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


UNIT_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def parse_ncu_csv(text: str) -> dict[str, list[float]]:
    """ncu --csv (details page) -> kernel name -> gpu__time_duration.sum values in ns."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV header ('\"ID\",...') in ncu output")
    out: dict[str, list[float]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = (row.get("Kernel Name") or "").split("(")[0].strip()
        unit = (row.get("Metric Unit") or "nsecond").strip()
        val = float((row.get("Metric Value") or "nan").replace(",", ""))
        out.setdefault(name, []).append(val * UNIT_NS.get(unit, float("nan")))
    return out


def run_ncu(sizes: dict[str, int], raw: list[str]) -> tuple[dict[str, float], str | None]:
    ncu = find_ncu()
    if ncu is None:
        return {}, "ncu not found (set NCU=/path/to/ncu)"
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    argv = [ncu, "--cache-control", "all", "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
            "--csv", "--print-units", "base", "-k", "regex:axpy_", sys.executable, __file__, "--ncu-child",
            "--sizes", json.dumps(sizes)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=max(30, min(150, left_s() - 60)), env=env)
    except subprocess.TimeoutExpired:
        return {}, "ncu timed out"
    raw.append("$ " + " ".join(argv) + "\n" + p.stdout + "\n--- stderr ---\n" + p.stderr[-4000:])
    try:
        vals = parse_ncu_csv(p.stdout)
    except ValueError as e:
        return {}, f"ncu rc={p.returncode}: {e}; stderr tail: {p.stderr[-500:]}"
    return {k: statistics.median(v) / 1e3 for k, v in vals.items() if v}, (version[0] if version else None)


# ----------------------------------------------------------------------------- ours, direct + do_bench
def ours_direct(sizes: dict[str, int], runs: int) -> dict[str, dict]:
    """Per kernel and clock ('activity', 'events'): 5 medians of timing.time_device, cold cache."""
    from evokernel_mcp.benchmark import flush, stats, timing

    l2, mall, _ = flush.cache_bytes(0)
    flusher = flush.CacheFlusher(0)
    out: dict[str, dict] = {"activity": {}, "events": {}}
    for name, n in sizes.items():
        k = flush.copies_for(3 * 4 * n, l2 + mall, torch.cuda.mem_get_info()[0])
        sets = tensors(n, k)
        fn = launcher(name)
        for timer in ("activity", "events"):
            meds, over, reps, used, ev_meds = [], [], [], [], []
            for _ in range(runs):
                opt = timing.TimingOptions(min_reps=50, max_time_s=1.0, target_rel_ci=0.002,
                                           timer="auto" if timer == "activity" else "events",
                                           subtract_overhead=timer == "events")
                r = timing.time_device(fn, sets, opt, flusher=flusher)
                s = stats.summarize(r.times_ms)
                meds.append(s.median_ms * 1e3)
                over.append((r.event_overhead_ms or 0.0) * 1e3)
                reps.append(s.reps)
                used.append(r.timer)
                ev_meds.append((r.extra.get("event_median_ms") or float("nan")) * 1e3)
            out[timer][name] = {"n": n, "copies": k, "medians_us": meds, "event_overhead_us": over, "reps": reps,
                                "median_us": statistics.median(meds), "spread": stats.spread(meds),
                                "timer_used": used, "event_medians_same_reps_us": ev_meds,
                                "note": r.extra.get("activity_timer_unused"), "method": r.method}
        del sets
    return out


def do_bench_medians(sizes: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, n in sizes.items():
        fn, (x, y, o) = launcher(name), tensors(n)[0]
        vals = [triton.testing.do_bench(lambda: fn(x, y, o), warmup=25, rep=200, return_mode="median")
                for _ in range(3)]
        out[name] = statistics.median(vals) * 1e3
    return out


# ----------------------------------------------------------------------------- tool path
def write_task(sizes: dict[str, int], d: Path) -> Path:
    t = d / "axpy_fidelity"
    t.mkdir(parents=True, exist_ok=True)
    (t / "reference.py").write_text(REFERENCE_SRC)
    (t / "task.md").write_text("axpy fidelity task (generated by bench/timing_fidelity.py)\n")
    shape_sets = "\n".join(f"  {name}: {{N: {n}}}" for name, n in sizes.items())
    (t / "task.yaml").write_text(
        "name: axpy_fidelity\nsummary: out = 2*x + y, fp32\nreference: reference.py\ninputs:\n"
        "  - {name: x, shape: [N], dtype: float32, dist: normal}\n  - {name: y, shape: [N], dtype: float32, "
        f"dist: normal}}\nshape_sets:\n{shape_sets}\nflops: \"2*N\"\nbytes: \"12*N\"\n")
    return t


def ours_tool(sizes: dict[str, int], runs: int) -> tuple[dict[str, dict], dict]:
    import anyio

    from evokernel_mcp.app import close_app
    from evokernel_mcp.benchmark import stats
    from evokernel_mcp.benchmark.api import benchmark

    task_dir = write_task(sizes, Path(tempfile.mkdtemp(prefix="evk_fidelity_")))
    meds: dict[str, list[float]] = {n: [] for n in sizes}
    meta: dict = {}

    async def main():
        for i in range(runs):
            if left_s() < 25:
                meta["stopped_early"] = f"after {i} calls (time budget)"
                break
            r = await benchmark(candidate=CANDIDATE_SRC, task=str(task_dir), min_reps=50, max_time_s=0.6,
                                target_rel_ci=0.002, wait_s=300, timeout_s=300, compute_unit="vector")
            if r.error is not None:
                meta["error"] = r.error.model_dump()
                break
            for sr in r.results:
                meds[sr.shape].append(sr.candidate.median_ms * 1e3)
                ti = sr.candidate_timing
                meta.setdefault("timer", {}).setdefault(sr.shape, []).append(ti.timer if ti else None)
                if ti and ti.launch_cost_ms is not None:
                    meta.setdefault("launch_cost_us", {})[sr.shape] = ti.launch_cost_ms * 1e3
                    meta.setdefault("kernel_span_us", {}).setdefault(sr.shape, []).append(
                        ti.kernel_span_median_ms * 1e3)
                if ti and ti.timer_note:
                    meta.setdefault("timer_note", {})[sr.shape] = ti.timer_note
                meta.setdefault("flags", {})[sr.shape] = sr.flags
                meta.setdefault("fraction_of_roofline", {})[sr.shape] = sr.fraction_of_roofline
            meta.update(clocks=r.clocks.model_dump() if r.clocks else None, versions=r.versions, device=r.device)
        await close_app()

    anyio.run(main)
    out = {k: {"medians_us": v, "median_us": statistics.median(v), "spread": stats.spread(v)}
           for k, v in meds.items() if v}
    return out, meta


# ----------------------------------------------------------------------------- report
def nvsmi(raw: list[str]) -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    q = [exe, "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv,noheader,nounits", "-i", "0"]
    p = subprocess.run(q, capture_output=True, text=True)
    c = subprocess.run([exe, "--query-gpu=clocks.sm,clocks.mem", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True)
    raw.append("$ " + " ".join(q) + "\n" + p.stdout + "$ nvidia-smi --query-gpu=clocks.sm,clocks.mem "
               "--format=csv,noheader,nounits -i 0\n" + c.stdout)
    parts = [s.strip() for s in p.stdout.strip().split(",")]
    return dict(zip(("name", "driver", "sm_mhz", "mem_mhz"), parts)) if len(parts) == 4 else {"raw": p.stdout}


def verdict(ours: float | None, ncu: float | None, tol: float) -> tuple[float | None, bool | None]:
    if ours is None or not ncu:
        return None, None
    err = ours / ncu - 1
    return err, abs(err) <= tol


def table(rep: dict) -> list[str]:
    rows = ["| kernel | N | ncu us | ours(tool) us | err | spread | tool: span us + launch cost us | "
            "direct span us | err | spread | direct events-overhead us | err | spread | do_bench us | err | pass |",
            "|" + "---|" * 16]
    for name, tol in zip(NAMES, (0.10, 0.03, 0.03)):
        a, ev, t = (rep["direct"].get("activity", {}).get(name, {}), rep["direct"].get("events", {}).get(name, {}),
                    rep["tool"].get(name, {}))
        ncu, db = rep["ncu_us"].get(name), rep["do_bench_us"].get(name)
        best = t or a
        e, ok = verdict(best.get("median_us"), ncu, tol)
        ok = ok and (name == "axpy_8us" or best.get("spread", 1) < 0.02) if ok is not None else None
        rep.setdefault("acceptance", {})[name] = {"tolerance": tol, "rel_err": e, "pass": ok,
                                                  "measured_by": "tool" if t else "direct activity"}
        f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
        pct = lambda o: "-" if o is None or not ncu else f"{(o / ncu - 1) * 100:+.1f}%"  # noqa: E731
        sp = lambda x: "-" if "spread" not in x else f"{x['spread'] * 100:.2f}%"  # noqa: E731
        meta = rep.get("tool_meta") or {}
        spans, lc = (meta.get("kernel_span_us") or {}).get(name), (meta.get("launch_cost_us") or {}).get(name)
        split = f"{statistics.median(spans):.2f} + {lc:.2f}" if spans and lc is not None else "-"
        rows.append(f"| {name} | {a.get('n', '-')} | {f(ncu, 2)} | {f(t.get('median_us'), 2)} | "
                    f"{pct(t.get('median_us'))} | {sp(t)} | {split} | {f(a.get('median_us'), 2)} | "
                    f"{pct(a.get('median_us'))} | "
                    f"{sp(a)} | {f(ev.get('median_us'), 2)} | {pct(ev.get('median_us'))} | {sp(ev)} | {f(db, 2)} | "
                    f"{pct(db)} | {ok} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ncu-child", action="store_true")
    ap.add_argument("--sizes", default="{}")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-tool", action="store_true")
    ap.add_argument("--skip-ncu", action="store_true")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    if args.ncu_child:
        return ncu_child(json.loads(args.sizes), 7)
    if not torch.cuda.is_available():
        sys.exit("timing_fidelity needs a GPU")
    raw: list[str] = []
    rep: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
                 "cuda": torch.version.cuda, "python": platform.python_version(), "nvidia_smi_before": nvsmi(raw)}
    rep["copy_gbs"] = copy_bandwidth_gbs()
    sizes = sizes_for(rep["copy_gbs"])
    rep["sizes"] = sizes
    print(f"copy bandwidth {rep['copy_gbs']:.0f} GB/s; sizes {sizes}", flush=True)
    rep["direct"] = ours_direct(sizes, args.runs)
    print("direct done", {c: {k: round(v["median_us"], 2) for k, v in d.items()} for c, d in rep["direct"].items()},
          flush=True)
    rep["do_bench_us"] = do_bench_medians(sizes)
    rep["ncu_us"], rep["ncu_version"] = ({}, "skipped") if args.skip_ncu else run_ncu(sizes, raw)
    print("ncu", rep["ncu_us"], rep["ncu_version"], flush=True)
    rep["tool"], rep["tool_meta"] = ({}, {"skipped": True}) if args.skip_tool or left_s() < 40 else \
        _safe(lambda: ours_tool(sizes, args.runs))
    rep["nvidia_smi_after"] = nvsmi(raw)
    rep["wall_s"] = time.monotonic() - T_START
    rep["tag"] = args.tag
    write(rep, table(rep), raw)


def _safe(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the direct path's numbers are still worth writing
        return {}, {"error": f"{type(e).__name__}: {e}"}


def write(rep: dict, rows: list[str], raw: list[str]) -> None:
    day = rep["date"][:10]
    dev = rep["device"].replace("NVIDIA ", "").replace(" ", "_") + (f"_{rep['tag']}" if rep.get("tag") else "")
    md = [f"# Timing fidelity: {rep['device']}, {rep['date']}", "",
          f"torch {rep['torch']}, triton {rep['triton']}, CUDA {rep['cuda']}, driver "
          f"{rep['nvidia_smi_before'].get('driver')}, ncu {rep.get('ncu_version')}, python {rep['python']}; "
          f"copy bandwidth {rep['copy_gbs']:.0f} GB/s; wall {rep['wall_s']:.0f} s", "",
          "ncu: gpu__time_duration.sum, --cache-control all --clock-control none, median of 7 launches. "
          "ours: cold-cache median. tool = 5 benchmark() calls with default options (activity clock: kernel "
          "span from CUPTI via torch.profiler + the launch cost ncu counts, measured once per device on a "
          "1-element kernel); direct = 5 timing.time_device runs per clock: 'span' = bare kernel span, "
          "'events' = device events minus the empty event pair. spread = (max-min)/median of the 5 medians. "
          "do_bench: triton.testing.do_bench median.", "", *rows, "",
          f"Acceptance: {json.dumps(rep.get('acceptance'))}", "",
          f"Tool-path notes: {json.dumps(rep.get('tool_meta'))}"]
    text = "\n".join(md) + "\n"
    targets = [REPO / "bench" / "results"] + ([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])
    for d in targets:
        d.mkdir(parents=True, exist_ok=True)
        (d / f"timing_fidelity_{dev}_{day}.md").write_text(text)
        (d / f"timing_fidelity_{dev}_{day}.json").write_text(json.dumps(rep, indent=1, default=str))
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / f"timing_fidelity_raw_{day}.txt").write_text("\n\n".join(raw))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
