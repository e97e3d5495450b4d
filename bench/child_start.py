"""How long a sandboxed CPU child takes to start, forked from the zygote (runtime/zygote.py) and as its own
interpreter (the zygote setting off): wall time from the start to its "ready", and the CPU time the host spent on
it (the host's busy CPU time over the start, /proc/stat: run it on an otherwise idle host).

Each start is one Child as the runner makes it (the sandbox of the best level here, its scratch dir, its cgroup),
one at a time on an otherwise idle host; the zygote's own start (its imports, once per runner) is reported apart.

Run from the repo root:  .venv/bin/python bench/child_start.py [--n 10] [--tag T]
Writes bench/results/child_start_<date>[_T].md (host, date, versions, one row per mode) and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.results_file import write_result  # noqa: E402


def _host_busy_s() -> float:
    """CPU seconds every CPU of the host has spent busy so far (/proc/stat): on an otherwise idle host, what a
    start costs, wherever it runs (bwrap, the stub or the interpreter, the zygote and its forks)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measure(mode: str, n: int) -> dict:
    from evokernel_mcp import settings
    from evokernel_mcp.runtime import child_proc, sandbox, zygote_link

    settings.reset()
    settings._current = settings.Settings.model_validate({**settings.get().model_dump(), "zygote": mode})
    level = sandbox.tool_level()
    first_s = None
    if mode == "auto":  # the zygote's start, once: the first child waits for its imports
        t0 = time.perf_counter()
        c = child_proc.Child("cpu", level)
        c.wait_ready(300)
        first_s = time.perf_counter() - t0
        served = bool(c.info.get("zygote_pid"))
        c.discard()
        if not served:
            return {"mode": mode, "level": level, "error": c.info.get("zygote_refused", "not served")}
    walls, cpus = [], []
    for _ in range(n):
        c0, t0 = _host_busy_s(), time.perf_counter()
        c = child_proc.Child("cpu", level)
        c.wait_ready(300)
        walls.append(time.perf_counter() - t0)
        c.discard()
        cpus.append(_host_busy_s() - c0)
    zygote_link.stop()
    return {"mode": mode, "level": level, "first_s": first_s, "wall": walls, "cpu": cpus}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    os.environ.setdefault("EVOKERNEL_HOME", str(REPO / ".evokernel" / "bench_child_start"))
    import torch

    rows = [measure("auto", args.n), measure("off", args.n)]
    lines = [f"# Sandboxed CPU child start: forked from the zygote, and its own interpreter ({args.n} each)", "",
             f"- host: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; Python {platform.python_version()}, "
             f"torch {torch.__version__}",
             f"- command: `.venv/bin/python bench/child_start.py --n {args.n}" + (f" --tag {args.tag}`" if args.tag
                                                                                 else "`"),
             "- wall: from the Child's start to its ready (and its discard, for the CPU); CPU: the host's busy CPU "
             "time over that, from /proc/stat (the host otherwise idle)", "",
             "| zygote | level | first child (the zygote's imports) s | wall median s | wall max s | CPU median s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['mode']} | {r['level']} | not served: {r['error']} | | | |")
            continue
        first = f"{r['first_s']:.2f}" if r["first_s"] is not None else "-"
        lines.append(f"| {r['mode']} | {r['level']} | {first} | {statistics.median(r['wall']):.2f} | "
                     f"{max(r['wall']):.2f} | {statistics.median(r['cpu']):.2f} |")
    text = "\n".join(lines) + "\n"
    day = datetime.date.today().isoformat()
    out = write_result(f"child_start_{day}{'_' + args.tag if args.tag else ''}.md", text)
    print(text)
    print(f"written: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
