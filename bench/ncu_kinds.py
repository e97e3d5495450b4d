"""Single-kernel times against ncu on four kinds of kernel.

Acceptance: "Single-kernel times within 3 % of ncu for kernels of at least 40 us of four kinds (bandwidth,
reduction, GEMM, convolution), with the clocks shown; where a power-limited GEMM differs from ncu, the result
says why."

Workloads (KernelBench form; the candidate is the same code as ModelNew), see workloads(): x * 2.0 on 2^27
fp32 (~0.25 ms), torch.sum(x, -1) of 16384 x 8192 fp32 (~0.13 ms), bf16 4096^3 a @ b (cuBLAS, ~0.18 ms, may
run at the power cap), cuDNN Conv2d(128, 128, 3) on fp32 NCHW 32x128x64x64 (one implicit-GEMM kernel, or 2-4
when cuDNN converts layouts: the kernels/call column says which; `--kinds depthwise` is a one-kernel spare).
Per kind: (1) the `benchmark` tool through the MCP client (in-process server, as bench/ab_same_code.py):
candidate median [CI], timer, provenance, the result's clocks and verdict; (2) ncu (NCU_FLAGS) on
evokernel_mcp.profile.runner (the tools' own loading path; 3 warm-up calls outside the profiled range, 10 in
it); the main kernel (largest median duration): its median over >= 5 launches. nvidia-smi is read before,
every 0.25 s during, and after both runs.

Run on the GPU machine from the repo root (about 2-4 minutes for all four kinds):
    PYTHONPATH=. python3 bench/ncu_kinds.py [--kinds bandwidth,gemm] [--max-time-s 1.5] [--budget-s 240] [--tag T]
    python3 bench/ncu_kinds.py --dry-run   # no GPU: check the sources, print them and the ncu command line
    python3 bench/ncu_kinds.py --small     # tiny sizes: the plumbing on the CPU path (ncu rows say why empty)
Writes <out-dir>/ncu_kinds_<device>_<date>[_T].{json,md} after every kind (a cut run keeps what it measured)
and the raw ncu output as ..._ncu_<kind>.csv; copies them under $OUT when set; prints the table last.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ab_same_code import make_ref  # noqa: E402
from bench.kernelbench_sweep import call_tool, versions  # noqa: E402
from evokernel_mcp.benchmark.clocks import NOT_SLOWDOWN, read_clocks  # noqa: E402
from evokernel_mcp.kb_candidates import same_code  # noqa: E402
from evokernel_mcp.profile.models import CounterDispatch  # noqa: E402

log = logging.getLogger("ncu_kinds")
KINDS = ("bandwidth", "reduction", "gemm", "convolution")  # the default run; "depthwise" on request (below)
TOL, MIN_US, MIN_LAUNCHES, WARMUP, ITERS = 0.03, 40.0, 5, 3, 10
POWER = {"sw_power_cap", "hw_slowdown", "hw_power_brake_slowdown"}
THERMAL = {"sw_thermal_slowdown", "hw_thermal_slowdown"}
NCU_FLAGS = ["--metrics", "gpu__time_duration.sum", "--cache-control", "all", "--clock-control", "none",
             "--profile-from-start", "off", "--target-processes", "all", "--csv", "--print-units", "base"]


# ----------------------------------------------------------------------------- pure
def workloads(small: bool = False) -> dict[str, dict]:
    """kind -> {source (KernelBench form), unit (roofline compute unit), expect (what one call launches)}.
    "depthwise" is a spare convolution, not in the default run: PyTorch's own kernel (fp32 NCHW depthwise does
    not go to cuDNN), one launch, for when cuDNN's conv2d launches layout conversions beside its kernel."""
    n, (r, c), m = (1 << 14, (64, 256), 128) if small else (1 << 27, (16384, 8192), 4096)
    (b, ch, hw), (dn, dc, dhw) = ((1, 8, 16), (1, 8, 16)) if small else ((32, 128, 64), (32, 256, 112))
    bf = "dtype=torch.bfloat16"

    def conv(shape: tuple, layer: str) -> str:
        return make_ref("x", "return self.conv(x)", f"torch.randn{shape}", init_body=f"        self.conv = {layer}")

    def conv_nhwc(dtype: str) -> str:
        """cuDNN on channels-last data without a layout conversion: the input is made NHWC (N, H, W, C) and the
        forward views it as NCHW by a permute (no copy, channels-last strides); the weight is channels-last."""
        nb = 2 * b
        return make_ref("x", "return self.conv(x.permute(0, 3, 1, 2))",
                    f"torch.randn({nb}, {hw}, {hw}, {ch}, dtype=torch.{dtype})",
                    init_body=f"        self.conv = nn.Conv2d({ch}, {ch}, 3, padding=1, bias=False).to(torch.{dtype})"
                              ".to(memory_format=torch.channels_last)")
    return {
        "bandwidth": {"unit": "vector", "expect": "one elementwise kernel (fp32, 1 GiB moved)",
                      "source": make_ref("x", "return x * 2.0", f"torch.randn({n})")},
        "reduction": {"unit": "vector", "expect": "one reduce kernel (fp32, 512 MiB read)",
                      "source": make_ref("x", "return torch.sum(x, dim=-1)", f"torch.randn({r}, {c})")},
        "gemm": {"unit": "matrix", "expect": "one cuBLAS kernel (bf16 4096^3, compute-bound)",
                 "source": make_ref("a, b", "return a @ b",
                                    f"torch.randn({m}, {m}, {bf}), torch.randn({m}, {m}, {bf})")},
        "convolution": {"unit": "matrix", "expect": "cuDNN conv2d bf16 on channels-last data (an NHWC input viewed as "
                        "NCHW): one implicit-GEMM kernel, no layout conversion",
                        "source": conv_nhwc("bfloat16")},
        "conv_tf32_nhwc": {"unit": "matrix", "expect": "cuDNN conv2d fp32 (TF32) on channels-last data: one kernel",
                           "source": conv_nhwc("float32")},
        "conv_nchw_fp32": {"unit": "matrix", "expect": "cuDNN conv2d fp32 NCHW (TF32): an implicit-GEMM kernel, "
                           "with layout conversions beside it (4 kernels on the H200)",
                           "source": conv((b, ch, hw, hw), f"nn.Conv2d({ch}, {ch}, 3, padding=1, bias=False)")},
        "depthwise": {"unit": "vector", "expect": "one PyTorch conv_depthwise2d kernel (fp32 NCHW 3x3, 411 MB in)",
                      "source": conv((dn, dc, dhw, dhw), f"nn.Conv2d({dc}, {dc}, 3, padding=1, groups={dc}, "
                                     "bias=False)")},
    }


def ours_from_result(body: dict, is_error: bool, text: str | None) -> dict:
    """The benchmark result's fields this comparison reads (structured_content of the tool; None = not reported)."""
    def us(ms: float | None) -> float | None:
        return None if ms is None else ms * 1e3
    res = (body.get("results") or [{}])[0]
    cand, ti, err = res.get("candidate") or {}, res.get("candidate_timing") or {}, body.get("error") or {}
    prov = next((p for p in body.get("provenance") or [] if str(p.get("field", "")).startswith("results[].cand")), {})
    ci = cand.get("ci_median_ms")
    return {"median_us": us(cand.get("median_ms")), "ci_us": [v * 1e3 for v in ci] if ci else None,
            "reps": cand.get("reps"), "kernel_span_us": us(ti.get("kernel_span_median_ms")),
            "launch_cost_us": us(ti.get("launch_cost_ms")), "provenance": prov.get("detail"),
            **{k: ti.get(k) for k in ("timer", "timer_note", "stop_reason")},
            **{k: body.get(k) for k in ("timing_method", "clocks", "device")},
            **{k: res.get(k) for k in ("valid", "invalid_reason", "speedup", "speedup_ci", "clocks_moved", "flags")},
            "error": (f"{err.get('kind')}: {str(err.get('message', ''))[:300]}" if err else text if is_error else None)}


def ncu_main_kernel(ds: list[CounterDispatch], launches: int, min_launches: int = MIN_LAUNCHES) -> dict:
    """The main kernel (largest median gpu__time_duration) of the profiled calls: its median over its launches,
    the kernels one call launched, and `error` when fewer than min_launches of it were profiled."""
    by: dict[str, list[float]] = {}
    for d in ds:
        if d.duration_ns is not None:
            by.setdefault(d.kernel, []).append(d.duration_ns / 1e3)
    if not by:
        return {"error": "no gpu__time_duration.sum value in the ncu output"}
    name = max(by, key=lambda k: statistics.median(by[k]))
    v = by[name]
    out = {"kernel": name, "launches": len(v), "median_us": statistics.median(v), "min_us": min(v), "max_us": max(v),
           "kernels_per_call": sum(len(x) for x in by.values()) / launches,
           "per_call_us": sum(sum(x) for x in by.values()) / launches,
           "kernels": {k: {"launches": len(x), "median_us": statistics.median(x)} for k, x in by.items()}}
    if len(v) < min_launches:
        out["error"] = f"only {len(v)} launches of {name} profiled (need >= {min_launches})"
    return out


def clocks_summary(samples: list[dict]) -> dict:
    """nvidia-smi readings (Clocks dumps) of one run -> sm/mem ranges (the median over busy readings: gpu_idle
    not set), max power and temperature, the slow-down reasons seen in any reading (idle ones left out)."""
    def vals(k: str, of: list[dict] = samples) -> list[float]:
        return [s[k] for s in of if s.get(k) is not None]
    busy = [s for s in samples if "gpu_idle" not in (s.get("throttle_reasons") or [])]
    sm, mem = vals("sm_mhz"), vals("mem_mhz")
    return {"samples": len(samples), "busy_samples": len(busy), "sm_min_mhz": min(sm, default=None),
            "sm_max_mhz": max(sm, default=None), "sm_busy_median_mhz": statistics.median(vals("sm_mhz", busy))
            if vals("sm_mhz", busy) else None, "mem_min_mhz": min(mem, default=None),
            "mem_max_mhz": max(mem, default=None), "power_max_w": max(vals("power_w"), default=None),
            "temp_max_c": max(vals("temperature_c"), default=None),
            "reasons": sorted({r for s in samples for r in (s.get("throttle_reasons") or [])} - NOT_SLOWDOWN)}


def compare(ours_us: float | None, ncu_us: float | None, tol: float = TOL) -> tuple[float | None, bool | None]:
    """(ours / ncu - 1, within tol); (None, None) when either is missing."""
    if ours_us is None or not ncu_us:
        return None, None
    diff = ours_us / ncu_us - 1
    return diff, abs(diff) <= tol


def _f(x: float | None, p: int = 1) -> str:
    return "-" if x is None else f"{x:.{p}f}"


def explain(row: dict, tol: float = TOL) -> str | None:
    """Why ours and ncu differ by more than tol, from the clocks, throttle reasons, kernel count and timer;
    None when they agree."""
    ours, ncu, b, n = row["ours"], row["ncu"], row["bench_clocks"], row["ncu_clocks"]
    if ours.get("median_us") is None:
        return f"no benchmark median: {ours.get('error') or ours.get('invalid_reason') or 'not reported'}"[:300]
    if ncu.get("median_us") is None or ncu.get("error"):
        return f"no ncu median: {ncu.get('error') or 'not measured'}"[:300]
    if row["within"]:
        return None
    reasons = set(row["bench_reasons"])
    sm = (f"sm clock {_f(n.get('sm_max_mhz'), 0)}→{_f(b.get('sm_min_mhz'), 0)} MHz (highest read during ncu → "
          f"lowest during the benchmark)")
    notes = []
    if row["diff"] > 0 and reasons & POWER:
        watts = f", up to {b['power_max_w']:.0f} W" if b.get("power_max_w") else ""
        notes.append(f"power-limited ({', '.join(sorted(reasons & POWER))}): ncu replays one kernel at a time with "
                     f"the cache flushed and the GPU cool between replays, the benchmark runs launches back to back "
                     f"at the power cap; {sm}{watts}")
    elif row["diff"] > 0 and reasons & THERMAL:
        notes.append(f"thermal slow-down ({', '.join(sorted(reasons & THERMAL))}) during the benchmark; {sm}")
    elif b.get("sm_min_mhz") and n.get("sm_max_mhz") and b["sm_min_mhz"] < n["sm_max_mhz"] * (1 - tol):
        notes.append(f"the SM clock was lower during the benchmark, with no throttle reason recorded; {sm}")
    if (ncu.get("kernels_per_call") or 1) > 1.01:
        notes.append(f"one call launches {ncu['kernels_per_call']:g} kernels: the benchmark times the span of all "
                     f"of them, ncu's column is the main kernel only (all: {ncu['per_call_us']:.1f} us per call)")
    if ours.get("timer") not in (None, "activity"):
        notes.append(f"the benchmark used the {ours['timer']} clock ({ours.get('timer_note') or 'no note'})")
    return "; ".join(notes) or "not explained by the recorded clocks, throttle reasons, kernel count or timer"


def make_row(kind: str, wl: dict, ours: dict, ncu: dict, bench_clocks: dict, ncu_clocks: dict) -> dict:
    ncu_us = None if ncu.get("error") else ncu.get("median_us")
    diff, within = compare(ours.get("median_us"), ncu_us)
    own = [c.get("throttle_reasons") or [] for c in (ours.get("clocks") or {}).values() if c]  # the result's readings
    row = {"kind": kind, "expect": wl["expect"], "ours": ours, "ncu": ncu, "bench_clocks": bench_clocks,
           "ncu_clocks": ncu_clocks, "diff": diff, "within": within,
           "at_least_40us": None if ncu_us is None else ncu_us >= MIN_US,
           "bench_reasons": sorted(set(bench_clocks.get("reasons") or []).union(*own) - NOT_SLOWDOWN)}
    row["why"] = explain(row)
    return row


def _clk(c: dict, before: dict | None, after: dict | None) -> str:
    ba = f"{_f((before or {}).get('sm_mhz'), 0)}→{_f((after or {}).get('sm_mhz'), 0)}"
    return (f"sm {ba} (min {_f(c.get('sm_min_mhz'), 0)}) MHz, mem {_f(c.get('mem_max_mhz'), 0)} MHz, "
            f"max {_f(c.get('power_max_w'), 0)} W")


def _yn(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "no")


def to_markdown(meta: dict, rows: list[dict]) -> str:
    v = meta["versions"]
    lines = [f"# Single-kernel times vs ncu, four kinds: {meta['device']}, {meta['date']}", "",
             f"versions: python {v.get('python')}, torch {v.get('torch')}, triton {v.get('triton')}, CUDA "
             f"{v.get('cuda')}, driver {v.get('driver')}, ncu {v.get('ncu')}; benchmark max_time_s "
             f"{meta['max_time_s']}; wall {meta['wall_s']:.0f} s; ceilings {meta.get('ceilings')}", "",
             "ours: the benchmark tool's candidate median [95 % CI] (cold L2; timer, launch cost and provenance in "
             f"the JSON). ncu: gpu__time_duration.sum with `{' '.join(NCU_FLAGS[2:6])}`, median of the main kernel "
             f"(largest median duration) over {ITERS} profiled calls after {WARMUP} warm-ups. diff = ours / ncu - 1. "
             "Clocks: nvidia-smi before→after each run, lowest SM clock and highest power read every 0.25 s during "
             "it; throttle reasons: slow-down reasons seen in any reading.", "",
             "| kind | kernel (ncu) | kernels/call (all us) | ours us [CI] | ncu us (n) | diff | within 3 % | >= 40 us "
             "| clocks, benchmark | clocks, ncu | throttle reasons (benchmark / ncu) | why |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, n, bc, nc = r["ours"], r["ncu"], r["bench_clocks"], r["ncu_clocks"]
        rc, name = o.get("clocks") or {}, str(n.get("kernel") or "-")
        cells = [r["kind"], f"`{name[:60]}{'…' if len(name) > 60 else ''}`", _f(n.get("kernels_per_call"))
                 + (f" ({n['per_call_us']:.1f})" if (n.get("kernels_per_call") or 1) > 1.01 else ""),
                 _f(o.get("median_us")) + (f" [{o['ci_us'][0]:.1f}, {o['ci_us'][1]:.1f}]" if o.get("ci_us") else ""),
                 f"{_f(n.get('median_us'))} ({n.get('launches', '-')})",
                 "-" if r["diff"] is None else f"{r['diff'] * 100:+.2f}%", _yn(r["within"]), _yn(r["at_least_40us"]),
                 _clk(bc, rc.get("before"), rc.get("after")), _clk(nc, nc.get("before"), nc.get("after")),
                 " / ".join(", ".join(x) or "none" for x in (r["bench_reasons"], nc.get("reasons") or [])),
                 (r["why"] or "-").replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    ok = [r["kind"] for r in rows if r["within"] and r["at_least_40us"]]
    lines += ["", f"Within 3 % of ncu at >= 40 us: {len(ok)} of {len(rows)} kinds ({', '.join(ok) or 'none'})."]
    return "\n".join(lines) + "\n"


def stem_for(device: str, date: str, tag: str = "") -> str:
    return f"ncu_kinds_{device}_{date}" + (f"_{tag}" if tag else "")


# ----------------------------------------------------------------------------- I/O
class ClockSampler:
    """nvidia-smi clocks (evokernel_mcp.benchmark.clocks.read_clocks) read before, every period_s during, and
    after a run, in a thread; no readings where nvidia-smi is missing."""

    def __init__(self, period_s: float = 0.25):
        self.period_s, self.samples, self._stop, self.before, self.after = period_s, [], threading.Event(), None, None

    def _read(self) -> dict | None:
        c = read_clocks("cuda", 0)
        self.samples += [c.model_dump()] if c is not None else []
        return self.samples[-1] if c is not None else None

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._read()

    def __enter__(self) -> "ClockSampler":
        self.before = self._read()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join(timeout=15)
        self.after = self._read()

    def summary(self) -> dict:
        return {**clocks_summary(self.samples), "before": self.before, "after": self.after}


async def bench_kind(client, wl: dict, max_time_s: float, left_s: float) -> tuple[dict, dict]:
    args = {"reference": wl["source"], "candidate": same_code(wl["source"]), "max_time_s": max_time_s,
            "compute_unit": wl["unit"], "wait_s": 600, "timeout_s": max(30.0, min(300.0, left_s))}
    with ClockSampler() as cs:
        body, wall, is_error, text = await call_tool(client, "benchmark", args)
    return {**ours_from_result(body, is_error, text), "wall_s": round(wall, 1)}, cs.summary()


def ncu_kind(kind: str, wl: dict, timeout_s: float, raw_path: Path) -> tuple[dict, dict]:
    """ncu on the runner child (subprocess through evokernel_mcp.subproc); the raw stdout is kept at raw_path."""
    from evokernel_mcp.errors import EvoError, ParseError
    from evokernel_mcp.profile.ncu import find_ncu
    from evokernel_mcp.profile.ncu_parsers import parse_ncu_raw_csv
    from evokernel_mcp.profile.runner import LocalLaunch, local_env
    from evokernel_mcp.subproc import run_sync

    spec = {"reference": wl["source"], "candidate": same_code(wl["source"]), "warmup": WARMUP, "iters": ITERS,
            "seed": 0}
    with tempfile.TemporaryDirectory(prefix=f"evk_ncu_{kind}_") as d, ClockSampler() as cs:
        try:
            env = local_env(None)
            argv = [find_ncu()[0], *NCU_FLAGS, "--", *LocalLaunch(spec, env, Path(d), timeout_s).child()]
            res = run_sync(argv, timeout_s=timeout_s, env=env, cwd=d, tool="ncu")
            raw_path.write_text(res.stdout + "\n==STDERR==\n" + res.tail("stderr", 20000))
            if res.returncode != 0:
                out = {"error": f"ncu exited {res.returncode}: {res.tail('stderr', 600)}"}
            else:
                try:
                    out = ncu_main_kernel(parse_ncu_raw_csv(res.stdout, f"ncu --csv ({kind})"), ITERS)
                except ParseError as e:  # ncu prints ==ERROR== lines (e.g. no counter permission) on stdout
                    out = {"error": f"{e}; ncu stdout tail: {res.tail('stdout', 600)}"}
            out["wall_s"] = round(res.duration_s, 1)
        except EvoError as e:
            out = {"error": f"{type(e).__name__}: {e}"[:800]}
    return out, cs.summary()


async def run_all(wls: dict, a, meta: dict, raw_of, save) -> list[dict]:
    from mcp import Client

    from evokernel_mcp.server import build_server

    t0, rows = time.monotonic(), []
    async with Client(build_server()) as client:
        # the ceilings (copy, matmul at the power cap, launch cost) first, so that no kind's clock readings hold them
        body, _, _, text = await call_tool(client, "measure_ceilings", {"wait_s": 600, "timeout_s": 300})
        meta["ceilings"] = {k: body.get(k) for k in ("copy_gbs", "matmul_tflops", "launch_cost_us", "cached")} \
            if not text else text
        for kind, wl in wls.items():
            left = a.budget_s - (time.monotonic() - t0)
            if left < 40:
                log.warning("budget of %.0f s spent: %s and later kinds not run", a.budget_s, kind)
                break
            ours, bclk = await bench_kind(client, wl, a.max_time_s, left)
            log.info("%s: ours %s us (%s)", kind, _f(ours["median_us"], 2), ours.get("error") or ours.get("timer"))
            left = a.budget_s - (time.monotonic() - t0)
            ncu, nclk = await anyio.to_thread.run_sync(ncu_kind, kind, wl, max(30.0, min(180.0, left)), raw_of(kind))
            log.info("%s: ncu %s us (%s)", kind, _f(ncu.get("median_us"), 2), ncu.get("error") or ncu.get("kernel"))
            rows.append(make_row(kind, wl, ours, ncu, bclk, nclk))
            save(rows, time.monotonic() - t0)  # after every kind: a cut run keeps what it measured
    return rows


def collect_meta(a) -> dict:
    from evokernel_mcp.benchmark.clocks import driver_version
    from evokernel_mcp.errors import EvoError
    from evokernel_mcp.profile.ncu import find_ncu

    v = {**versions(), "driver": driver_version("cuda")}
    try:
        v["ncu"] = find_ncu()[1]
    except EvoError as e:
        v["ncu"] = f"not found ({type(e).__name__})"
    return {"device": v.get("device", "cpu").replace("NVIDIA ", "").replace(" ", "-"), "wall_s": 0.0,
            "date": dt.date.today().isoformat(), "versions": v, "max_time_s": a.max_time_s, "budget_s": a.budget_s,
            "small": a.small, "tolerance": TOL, "ncu_flags": NCU_FLAGS, "warmup": WARMUP, "iters": ITERS}


def dry_run(wls: dict) -> None:
    from evokernel_mcp.tasks import check_candidate_source, check_reference_source

    for kind, wl in wls.items():
        check_reference_source(wl["source"])
        check_candidate_source(same_code(wl["source"]))
        print(f"## {kind}: {wl['expect']} (roofline unit {wl['unit']})\n{wl['source']}")
    print("ncu", *NCU_FLAGS, "--", sys.executable, "-m", "evokernel_mcp.profile.runner", "--spec", "<spec.json>")


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"comma-separated, of {','.join(KINDS)},depthwise,conv_tf32_nhwc,conv_nchw_fp32")
    ap.add_argument("--max-time-s", type=float, default=1.5, help="benchmark max_time_s per measured series")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="start no new kind after this many seconds; what was measured is written")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results")
    ap.add_argument("--small", action="store_true", help="tiny sizes for the CPU path (plumbing only)")
    ap.add_argument("--dry-run", action="store_true", help="check and print the workloads; no GPU, no server")
    a = ap.parse_args()
    kinds, all_wls = [k for k in a.kinds.split(",") if k], workloads(a.small)
    if not kinds or set(kinds) - set(all_wls):
        ap.error(f"--kinds: choose from {', '.join(all_wls)}")
    wls = {k: all_wls[k] for k in kinds}
    if a.dry_run:
        return dry_run(wls)
    meta = collect_meta(a)
    stem = stem_for(meta["device"], meta["date"], a.tag)
    dirs = [a.out_dir] + ([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)

    def save(rows: list[dict], wall_s: float) -> None:
        meta["wall_s"] = wall_s
        (a.out_dir / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
        (a.out_dir / f"{stem}.md").write_text(to_markdown(meta, rows))
        for d in dirs[1:]:
            for p in [a.out_dir / f"{stem}.json", a.out_dir / f"{stem}.md", *a.out_dir.glob(f"{stem}_ncu_*.csv")]:
                shutil.copy(p, d / p.name)

    rows = anyio.run(run_all, wls, a, meta, lambda kind: a.out_dir / f"{stem}_ncu_{kind}.csv", save)
    save(rows, meta["wall_s"])
    print(to_markdown(meta, rows))


if __name__ == "__main__":
    main()
