#!/usr/bin/env python3
"""Probe (GPU): two ways to take the launch cost out of a cold-cache event timing, against ncu.

A: events tight around the kernel after the flush, minus an empty event pair (the benchmark's default until the
activity clock replaced it).
B: differencing: median of [event, flush, kernel, event] minus median of [event, flush, event]; the
   kernel's launch overlaps the flush, as back-to-back kernels do.
Uses bench/timing_fidelity.py's axpy kernels and ncu run. Prints a table and JSON."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import timing_fidelity as tf  # noqa: E402

from evokernel_mcp.benchmark import flush  # noqa: E402
from evokernel_mcp.benchmark import timing as t  # noqa: E402


def windows(calls, flusher, api, cyc, n, with_kernel, start):
    ev = api["Event"]
    st = [ev(enable_timing=True) for _ in range(n)]
    en = [ev(enable_timing=True) for _ in range(n)]
    torch.cuda._sleep(int(2 * n * 0.05 * cyc))
    for i in range(n):
        api["record"](st[i])
        flusher.flush()
        if with_kernel:
            calls[(start + i) % len(calls)]()
        api["record"](en[i])
    api["sync"]()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(st, en)]


def main() -> None:
    api = t.bind_event_api()
    flusher = flush.CacheFlusher(torch.device("cuda", 0))
    cyc = t.sleep_cycles_per_ms(api)
    sizes = tf.sizes_for(tf.copy_bandwidth_gbs())
    out = {}
    for name, n in sizes.items():
        l2, mall, _ = flush.cache_bytes(0)
        sets = tf.tensors(n, flush.copies_for(12 * n, l2 + mall, torch.cuda.mem_get_info()[0]))
        fn = tf.launcher(name)
        calls = [(lambda a=a: fn(*a)) for a in sets]
        for c in calls[:3]:
            c()
        w1, w2, a = [], [], []
        for r in range(6):
            w1 += windows(calls, flusher, api, cyc, 60, True, r * 60)
            w2 += windows(calls, flusher, api, cyc, 60, False, 0)
            a += [x * 1e3 for x in t.timed_batch(calls, r * 60, 60, flusher, api, cyc, 20e-6)]
        empty = t.event_overhead_ms(flusher, api, 100) * 1e3
        opt = t.TimingOptions(min_reps=50, max_time_s=1.0, target_rel_ci=0.002, subtract_overhead=True)
        c_med = statistics.median(t.time_device(fn, sets, opt, flusher=flusher).times_ms) * 1e3
        t.MAX_BATCH = 60
        opt60 = t.TimingOptions(min_reps=50, max_time_s=1.0, target_rel_ci=0.002, subtract_overhead=True)
        d_med = statistics.median(t.time_device(fn, sets, opt60, flusher=flusher).times_ms) * 1e3
        t.MAX_BATCH = 2000
        out[name] = {"n": n, "A_us": statistics.median(a) - empty, "A_raw_us": statistics.median(a),
                     "C_time_device_us": c_med, "D_time_device_batch60_us": d_med,
                     "B_us": statistics.median(w1) - statistics.median(w2),
                     "flush_us": statistics.median(w2), "empty_pair_us": empty}
        del sets, calls
    ncu, ver = tf.run_ncu(sizes, [])
    print("| kernel | ncu us | A us | A err | B us | B err | C us | C err | D us | D err | flush us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in out.items():
        nc = ncu.get(name)
        r["ncu_us"] = nc
        err = (lambda v: f"{100 * (v / nc - 1):+.1f}%") if nc else (lambda v: "-")
        print(f"| {name} | {nc} | {r['A_us']:.2f} | {err(r['A_us'])} | {r['B_us']:.2f} | {err(r['B_us'])} | "
              f"{r['C_time_device_us']:.2f} | {err(r['C_time_device_us'])} | {r['D_time_device_batch60_us']:.2f} | "
              f"{err(r['D_time_device_batch60_us'])} | {r['flush_us']:.1f} |")
    print(json.dumps({"device": torch.cuda.get_device_name(0), "ncu": ver, "results": out}, indent=1))


if __name__ == "__main__":
    main()
