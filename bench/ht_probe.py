"""Which vCPUs share a physical core? A VM may report one thread per core (lscpu) while its vCPUs are hyperthreads
of the host. A pinned busy loop on CPU 0 runs alone, then beside a busy loop on CPU k: a sibling hyperthread
slows it by tens of percent, another core by a few.

    python3 bench/ht_probe.py [--partners 1,2,16,17] [--window-s 0.5] [--load 1,3,7,15,31]

Prints one line per partner (CPU 0's loop rate beside it, relative to alone) and which CPUs are siblings (i and
i + n/2, or 2i and 2i + 1).
--load: CPU 0's loop rate beside N busy loops on CPUs 1..N (the host's answer to load: shared cores, a clock
that drops as more cores run, a hypervisor's steal time, read from /proc/stat over the same window).
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


def _stat() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return (vals[7] if len(vals) > 7 else 0), sum(vals)


def rate(partner: int | None, window: float, others: list[int] = ()) -> float:
    q = mp.Queue()
    ps = [mp.Process(target=spin, args=(0, window, q))]
    if partner is not None:
        ps.append(mp.Process(target=spin, args=(partner, window + 0.2, q)))
    ps += [mp.Process(target=spin, args=(c, window + 0.4, q)) for c in others]
    for p in reversed(ps):
        p.start()
    vals = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return vals[0]  # the CPU-0 loop ends first (the shortest window): its count comes first


def main() -> None:
    ap = argparse.ArgumentParser()
    n = os.cpu_count() or 1
    ap.add_argument("--partners", default=f"1,2,{n // 2},{n // 2 + 1},{n - 1}")
    ap.add_argument("--window-s", type=float, default=0.5)
    ap.add_argument("--load", default="", help="N,N,...: CPU 0 beside N busy loops on CPUs 1..N")
    a = ap.parse_args()
    alone = sorted(rate(None, a.window_s) for _ in range(3))[1]
    for k in [int(x) for x in a.load.split(",") if x and 0 < int(x) < n]:
        s0 = _stat()
        r = sorted(rate(None, a.window_s, list(range(1, k + 1))) for _ in range(3))[1] / alone
        s1 = _stat()
        steal = (s1[0] - s0[0]) / max(1, s1[1] - s0[1])
        print(f"cpu0 beside {k} busy loops: {r:.2f} of alone (steal {steal:.1%} of all CPU time)")
    if a.load and not a.partners:
        return
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
