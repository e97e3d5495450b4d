#!/usr/bin/env python3
"""Probe (GPU): what fixed cost do device events add around one kernel, versus ncu's gpu__time_duration?

Measures, with the benchmark's own flush and batching: an empty event pair, an event pair around a one-block
Triton kernel that stores one value, and ncu's gpu__time_duration of that kernel. Prints JSON; used to decide
how benchmark corrects for launch/event overhead (see bench/results/launch_overhead_probe_*)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@triton.jit
def tiny_store(ptr):
    tl.store(ptr, 1.0)


def child() -> None:
    x = torch.zeros(1, device="cuda")
    for _ in range(30):
        tiny_store[(1,)](x)
    torch.cuda.synchronize()


def main() -> None:
    from evokernel_mcp.benchmark import flush
    from evokernel_mcp.benchmark import timing as t

    api = t.bind_event_api()
    dev = torch.device("cuda", 0)
    flusher = flush.CacheFlusher(dev)
    cyc = t.sleep_cycles_per_ms(api)
    x = torch.zeros(1, device="cuda")
    call = lambda: tiny_store[(1,)](x)  # noqa: E731
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    empty = [t.event_overhead_ms(flusher, api, 100) * 1e3 for _ in range(5)]
    pair = []
    for _ in range(5):
        pair += t.timed_batch([call], 0, 100, flusher, api, cyc, 20e-6)
    pair_us = statistics.median(pair) * 1e3
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run(["ncu", "--cache-control", "all", "--clock-control", "none", "--metrics",
                        "gpu__time_duration.sum", "--csv", "--print-units", "base", "-k", "regex:tiny",
                        sys.executable, __file__, "--child"], capture_output=True, text=True, env=env, timeout=120)
    vals = [float(ln.rsplit(",", 1)[-1].strip().strip('"').replace(",", ""))
            for ln in p.stdout.splitlines() if "gpu__time_duration.sum" in ln]
    ncu_us = statistics.median(vals) / 1e3 if vals else None
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "empty_pair_us": statistics.median(empty), "pair_around_tiny_kernel_us": pair_us,
           "ncu_tiny_kernel_us": ncu_us, "ncu_samples": len(vals),
           "offset_us_pair_minus_ncu": (pair_us - ncu_us) if ncu_us else None}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
