"""Probe: how does ncu's gpu__time_duration relate to the kernel timestamps in the activity records?

Hypothesis: ncu's duration = the kernel's activity span + the device's per-launch cost g, where g is the
gap between one kernel's end and the next one's start when launches are queued back to back (host ahead).
For the three fidelity axpy kernels and a 1-program empty kernel, this prints and records:
  act     cold-cache activity median (timing.time_device, timer auto) and the event median of the same reps
  g       median end->start gap of back-to-back launches (warm, host ahead, activity records)
  g_f     median gap between the flush kernel's end and the kernel's start, no events in between
  ncu     gpu__time_duration.sum (--cache-control all --clock-control none), median of 7
Run on the GPU machine: PYTHONPATH=. python3 bench/activity_gap_probe.py  (writes $OUT/activity_gap_probe.json)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import timing_fidelity as tf  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def axpy_empty(x_ptr, n, BLOCK: tl.constexpr):
    pass


def launchers(sizes):
    out = {name: (tf.launcher(name), n) for name, n in sizes.items()}
    out["axpy_empty"] = (lambda x, y, o: axpy_empty[(1,)](x, 1, BLOCK=1), 1024)
    return out


def gaps(fn, args, flusher, n=200):
    from evokernel_mcp.benchmark.activity import TorchActivity

    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with TorchActivity() as s:
        torch.cuda._sleep(50_000_000)
        for _ in range(n):
            fn(*args)
        torch.cuda.synchronize()
    acts = [a for a in s.activities() if "axpy" in a[0]]
    g = [(acts[i + 1][1] - acts[i][2]) / 1e3 for i in range(len(acts) - 1)]
    d = [(a[2] - a[1]) / 1e3 for a in acts]
    with TorchActivity() as s:
        torch.cuda._sleep(50_000_000)
        for _ in range(n):
            flusher.flush()
            fn(*args)
        torch.cuda.synchronize()
    acts = s.activities()
    gf = [(acts[i + 1][1] - acts[i][2]) / 1e3 for i in range(len(acts) - 1)
          if "axpy" in acts[i + 1][0] and "axpy" not in acts[i][0]]
    return statistics.median(g), statistics.median(d), statistics.median(gf), len(acts)


def main():
    if "--ncu-child" in sys.argv:
        sizes = json.loads(sys.argv[sys.argv.index("--sizes") + 1])
        for name, (fn, n) in launchers(sizes).items():
            x, y, o = tf.tensors(n)[0]
            for _ in range(7):
                fn(x, y, o)
        torch.cuda.synchronize()
        return
    from evokernel_mcp.benchmark import flush, stats, timing

    sizes = tf.sizes_for(tf.copy_bandwidth_gbs())
    flusher = flush.CacheFlusher(0)
    rep = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "sizes": sizes, "rows": {}}
    for name, (fn, n) in launchers(sizes).items():
        x, y, o = tf.tensors(n)[0]
        r = timing.time_device(fn, [(x, y, o)], timing.TimingOptions(min_reps=200, max_time_s=1.0,
                                                                    target_rel_ci=0.002), flusher=flusher)
        g, d, gf, nacts = gaps(fn, (x, y, o), flusher)
        rep["rows"][name] = {"timer": r.timer, "act_us": stats.summarize(r.times_ms).median_ms * 1e3,
                             "event_us": (r.extra.get("event_median_ms") or float("nan")) * 1e3,
                             "empty_pair_us": (r.event_overhead_ms or 0) * 1e3, "g_us": g, "warm_dur_us": d,
                             "g_flush_us": gf, "note": r.extra.get("activity_timer_unused")}
    ncu = tf.find_ncu()
    argv = [ncu, "--cache-control", "all", "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
            "--print-units", "base", "-k", "regex:axpy_", sys.executable, __file__, "--ncu-child", "--sizes",
            json.dumps(sizes)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=200,
                       env={**os.environ, "PYTHONPATH": f"{HERE.parent}:{os.environ.get('PYTHONPATH', '')}"})
    vals = tf.parse_ncu_csv(p.stdout)
    for name, row in rep["rows"].items():
        v = vals.get(name)
        row["ncu_us"] = statistics.median(v) / 1e3 if v else None
        if row["ncu_us"]:
            row["ncu_minus_act_us"] = row["ncu_us"] - row["act_us"]
    print(json.dumps(rep, indent=1))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "activity_gap_probe.json").write_text(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
