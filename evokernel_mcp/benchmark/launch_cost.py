"""The fixed per-launch cost that Nsight Compute counts in a kernel's duration and the activity records do not.

The activity clock (activity.py) reads the kernel's own start and end timestamps. ncu's
gpu__time_duration, the reference the issue names for 'true' kernel time, also counts the front end's
work to start and retire a launch: on an H200 a 1-element fill kernel lasts ~0.6 us in the activity records
and ~1.5 us to ncu, and the same ~0.7-1.0 us separates the two clocks for 9, 42 and 348 us kernels
(bench/results/activity_gap_probe_*). So, once per device (cached with the ceilings), we measure that
offset on the device itself with the real profiler:

    launch_cost = median ncu gpu__time_duration(tiny kernel) - median activity span(tiny kernel)

and the benchmark adds it to every activity-clock time (add_launch_cost, on by default), so its times
are in ncu's terms; the bare span is reported alongside. Without ncu (or on ROCm, where rocprofv3's kernel
trace reads the same dispatch timestamps as the activity records) nothing is added and the result says so.

The ncu side runs this module as a child: `python -m evokernel_mcp.benchmark.launch_cost --child`.
"""

from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

NCU_LAUNCHES = 15
SKIP = 3
TIMEOUT_S = 120.0


@dataclass
class LaunchCost:
    us: float | None
    detail: str


def ncu_argv(ncu: str) -> list[str]:
    return [ncu, "--cache-control", "all", "--clock-control", "none", "--target-processes", "all",
            "--metrics", "gpu__time_duration.sum", "--launch-skip", str(SKIP), "--launch-count", str(NCU_LAUNCHES),
            "--csv", "--page", "raw", "--print-units", "base",
            sys.executable, "-m", "evokernel_mcp.benchmark.launch_cost", "--child"]


def ncu_durations_us(csv_text: str) -> list[float]:
    """gpu__time_duration.sum of every profiled launch (us) from an ncu raw-page CSV (base units: ns)."""
    from evokernel_mcp.profile.ncu_parsers import parse_ncu_raw_csv

    rows = parse_ncu_raw_csv(csv_text, "launch_cost ncu raw csv")
    return [r.counters["gpu__time_duration.sum"] / 1e3 for r in rows if "gpu__time_duration.sum" in r.counters]


def activity_span_us() -> tuple[float | None, str]:
    """Median activity span of a 1-element fill after a cache flush (the benchmark's own loop)."""
    import torch

    from evokernel_mcp.benchmark import stats, timing

    t = torch.empty(1, device="cuda")
    opt = timing.TimingOptions(min_reps=200, max_reps=2000, max_time_s=0.5, target_rel_ci=0.002)
    run = timing.time_device(lambda: t.fill_(1.0), [()], opt)
    if run.timer != "activity":
        return None, run.extra.get("activity_timer_unused") or "activity clock unavailable"
    return stats.summarize(run.times_ms).median_ms * 1e3, "ok"


def measure(backend: str) -> LaunchCost:
    """Runner side: the launch cost of this runner's device, or None with the reason."""
    if backend != "cuda":
        return LaunchCost(None, "not calibrated on ROCm: times are kernel spans, the dispatch timestamps "
                          "rocprofv3 --kernel-trace reports (not verified on AMD hardware)")
    from evokernel_mcp.errors import EvoError
    from evokernel_mcp.profile.ncu import find_ncu
    from evokernel_mcp.subproc import run_sync

    try:
        ncu, version = find_ncu()
    except EvoError as e:
        return LaunchCost(None, f"ncu not found, nothing added: {str(e)[:200]}")
    span, why = activity_span_us()
    if span is None:
        return LaunchCost(None, f"no activity span, nothing added: {why}")
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        res = run_sync(ncu_argv(ncu), timeout_s=TIMEOUT_S, env=env, tool="ncu")
        vals = ncu_durations_us(res.stdout)
    except Exception as e:  # noqa: BLE001 - no permission for counters, timeout, parse error: nothing added
        return LaunchCost(None, f"ncu calibration failed, nothing added: {type(e).__name__}: {str(e)[:300]}")
    if len(vals) < 3:
        return LaunchCost(None, f"ncu profiled {len(vals)} launches (rc {res.returncode}), nothing added")
    ncu_us = statistics.median(vals)
    cost = max(ncu_us - span, 0.0)
    return LaunchCost(cost, f"{cost:.3f} us = ncu gpu__time_duration {ncu_us:.3f} us (median of {len(vals)} "
                      f"launches, --cache-control all --clock-control none, {version or 'ncu'}) - activity span "
                      f"{span:.3f} us (median, benchmark loop) of a 1-element fill kernel on this device")


def _child() -> None:
    import torch

    t = torch.empty(1, device="cuda")
    for _ in range(SKIP + NCU_LAUNCHES):
        t.fill_(1.0)
    torch.cuda.synchronize()


if __name__ == "__main__" and "--child" in sys.argv:
    _child()
