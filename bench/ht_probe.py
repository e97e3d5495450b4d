"""Which vCPUs share a physical core? A VM may report one thread per core (lscpu) while its vCPUs are hyperthreads
of the host. A pinned busy loop on CPU 0 runs alone, then beside a busy loop on CPU k: a sibling hyperthread
slows it by tens of percent, another core by a few.

    python3 bench/ht_probe.py [--partners 1,2,16,17] [--window-s 0.5]

Prints one line per partner (CPU 0's loop rate beside it, relative to alone) and a suggested split for
EVOKERNEL_SPARE_CPUS / EVOKERNEL_JOB_CPUS when the siblings are i and i + n/2 or 2i and 2i + 1.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time


def spin(cpu: int, seconds: float, q) -> None:
    os.sched_setaffinity(0, {cpu})
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(2000):
            n += 1
    q.put(n)


def rate(partner: int | None, window: float) -> float:
    q = mp.Queue()
    ps = [mp.Process(target=spin, args=(0, window, q))]
    if partner is not None:
        ps.append(mp.Process(target=spin, args=(partner, window + 0.2, q)))
    for p in reversed(ps):
        p.start()
    vals = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return vals[0] if partner is None else min(vals)  # the CPU-0 loop ends first (shorter window)


def main() -> None:
    ap = argparse.ArgumentParser()
    n = os.cpu_count() or 1
    ap.add_argument("--partners", default=f"1,2,{n // 2},{n // 2 + 1},{n - 1}")
    ap.add_argument("--window-s", type=float, default=0.5)
    a = ap.parse_args()
    alone = sorted(rate(None, a.window_s) for _ in range(3))[1]
    rel = {}
    for k in [int(x) for x in a.partners.split(",") if x and 0 < int(x) < n]:
        rel[k] = sorted(rate(k, a.window_s) for _ in range(3))[1] / alone
        print(f"cpu0 beside cpu{k}: {rel[k]:.2f} of alone")
    half, pair = rel.get(n // 2, 1.0), rel.get(1, 1.0)
    if half < 0.85 and half < pair:
        print(f"siblings: i and i+{n // 2}")
    elif pair < 0.85:
        print("siblings: 2i and 2i+1")
    else:
        print("siblings: none seen")


if __name__ == "__main__":
    main()
