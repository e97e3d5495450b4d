"""Same code on both sides of benchmark on the CPU path, at the fewest rounds a call makes: how often the runner's
bound on the reported times reads failed at the budget stop (the calls the stop was put off for: the method says
"after N for the runner's bound"), and how often it still failed after the extra rounds (a same-code candidate
judged `time_below_runner_bound`: a false verdict).

The case is the e2e test's (tests/benchmark/test_bench_e2e_cpu.py): a Conv3d model with weights against itself,
min_reps 3 and a budget of 1 us, so every call stops at its budget after the rounds every run makes. Run it on a
loaded host to see the bound's noise (e.g. beside `make test` in another clone): `--busy N` adds N busy-looping
processes of its own.

Run from the repo root:  .venv/bin/python bench/bound_settle_cpu.py [--calls 20] [--busy 0] [--tag T]
Writes bench/results/bound_settle_cpu_<date>[_T].md (host, date, versions, one row per call) and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402

WEIGHTED = (REPO / "tests" / "benchmark" / "candidates" / "conv3d_weighted_ref.py").read_text()  # the e2e test's
SAME = WEIGHTED.replace("class Model(", "class ModelNew(")
SETTLED = re.compile(r"in (\d+) rounds \([a-z_]+(?:, after (\d+) for the runner's bound)?\)")


def _busy() -> None:
    while True:
        pass


async def _one() -> dict:
    from evokernel_mcp.benchmark.api import benchmark

    t0 = time.monotonic()
    res = await benchmark(candidate=SAME, reference=WEIGHTED, min_reps=3, max_time_s=1e-6, wait_s=240,
                          timeout_s=240)
    wall = time.monotonic() - t0
    if res.error is not None:
        return {"wall_s": wall, "error": str(res.error)[:120]}
    r = res.results[0]
    m = SETTLED.search(res.timing_method or "")
    return {"wall_s": wall, "valid": r.valid, "reason": r.invalid_reason or "",
            "rounds": int(m.group(1)) if m else None, "settle_from": int(m.group(2)) if m and m.group(2) else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--busy", type=int, default=0, help="busy-looping processes beside the calls")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    import torch

    from evokernel_mcp.app import close_app

    load = os.getloadavg()[0]
    busy = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(a.busy)]
    for p in busy:
        p.start()
    rows = []
    try:
        for i in range(a.calls):
            rows.append(anyio.run(_one))
            print(i, rows[-1], file=sys.stderr, flush=True)
    finally:
        for p in busy:
            p.terminate()
        anyio.run(close_app)
    n_settle = sum(1 for r in rows if r.get("settle_from") is not None)
    n_invalid = sum(1 for r in rows if r.get("valid") is False)
    n_err = sum(1 for r in rows if "error" in r)
    date = datetime.date.today().isoformat()
    lines = [f"# Same code, runner's bound at the fewest rounds, CPU path ({date})", "",
             f"host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch "
             f"{torch.__version__}; {a.busy} busy processes of this script beside the calls; load average {load:.2f} at "
             "start", "",
             f"command: `.venv/bin/python bench/bound_settle_cpu.py --calls {a.calls} --busy {a.busy}"
             + (f" --tag {a.tag}`" if a.tag else "`"), "",
             f"**{a.calls} calls: the bound read failed at the budget stop in {n_settle} (rounds added), a same-code "
             f"candidate was judged invalid in {n_invalid}, {n_err} errors.**", "",
             "| call | wall s | valid | reason | rounds | stop put off at |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        lines.append(f"| {i} | {r['wall_s']:.1f} | {r.get('valid', r.get('error'))} | {r.get('reason', '')} | "
                     f"{r.get('rounds') or ''} | {r.get('settle_from') or ''} |")
    out = REPO / "bench" / "results" / f"bound_settle_cpu_{date}{'_' + a.tag if a.tag else ''}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
