"""Same code on both sides of benchmark, CPU path, DEFAULT arguments: a search loop must read "no difference".

N calls (default 8) of benchmark(candidate == baseline == the reference's forward as run(), softmax 512x1024
fp32 and vector_add's medium shape), through the plain tool function with nothing but the task, candidate and
baseline given. Acceptance: `resolved` false in at least 7 of 8 calls per kernel. The wall time of each call
is recorded (a default call must cost at most 1.5x what it cost before the control arm became a default).

Run from the repo root:  .venv/bin/python bench/same_code_cpu.py [--calls 8] [--tag T] [--kernels softmax,add]
Writes bench/results/same_code_cpu_<date>[_T].md (host, date, versions, one row per call) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402

SOFTMAX_REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
'''
SOFTMAX_CAND = "import torch\n\n\ndef run(x):\n    return torch.softmax(x, dim=1)\n"
ADD_CAND = "import torch\n\n\ndef run(x, y):\n    return torch.add(x, y)\n"
KERNELS = {
    "softmax": {"reference": SOFTMAX_REF, "candidate": SOFTMAX_CAND},
    "add": {"task": "vector_add", "candidate": ADD_CAND, "shapes": ["medium"]},
}


async def _one(spec: dict) -> dict:
    from evokernel_mcp.benchmark.api import benchmark

    kw = {k: v for k, v in spec.items() if k != "candidate"}
    t0 = time.monotonic()
    r = await benchmark(candidate=spec["candidate"], baseline=spec["candidate"], wait_s=600, **kw)
    wall = time.monotonic() - t0
    if r.error is not None or not r.results:
        return {"wall_s": wall, "error": str(r.error)[:200]}
    sr = r.results[0]
    nf = getattr(sr, "noise_floor", None)
    if not sr.valid:
        print(f"invalid: {sr.invalid_reason}: {sr.invalid_detail}", file=sys.stderr)
    return {"wall_s": wall, "valid": sr.valid, "reason": sr.invalid_reason, "speedup": sr.speedup,
            "ci": sr.speedup_ci, "paired": sr.paired_ci, "resolved": sr.resolved,
            "band": nf.band if nf is not None else None, "rounds": nf.rounds if nf is not None else None,
            "reps": sr.candidate.reps if sr.candidate else None}


def _fmt(x, nd=4):
    if x is None:
        return "-"
    if isinstance(x, (tuple, list)):
        return "[" + ", ".join(f"{v:.{nd}f}" for v in x) + "]"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--kernels", default="softmax,add")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    import torch

    from evokernel_mcp.app import close_app

    lines = [f"# Same code at default arguments, CPU path ({datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)",
             "", f"host: {platform.node()} ({os.cpu_count()} CPUs), python {platform.python_version()}, "
             f"torch {torch.__version__}; load average {os.getloadavg()[0]:.2f} at start", "",
             "| kernel | call | wall s | valid | speedup | speedup_ci | paired_ci | noise band | rounds | resolved |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    summary = []
    for name in a.kernels.split(","):
        spec = KERNELS[name]
        rows = []
        for i in range(a.calls):
            row = anyio.run(_one, spec)
            rows.append(row)
            why = f" ({row['reason']})" if row.get("reason") else ""
            lines.append(f"| {name} | {i + 1} | {row['wall_s']:.1f} | {row.get('valid', row.get('error'))}{why} | "
                         f"{_fmt(row.get('speedup'))} | {_fmt(row.get('ci'))} | {_fmt(row.get('paired'))} | "
                         f"{_fmt(row.get('band'))} | {_fmt(row.get('rounds'))} | {_fmt(row.get('resolved'))} |")
            print(lines[-1], flush=True)
        held = sum(1 for r in rows if r.get("resolved") is False)
        walls = sorted(r["wall_s"] for r in rows)
        summary.append(f"- {name}: resolved false in {held} of {len(rows)} calls (acceptance: >= 7 of 8); "
                       f"median wall {walls[len(walls) // 2]:.1f} s per call")
    anyio.run(close_app)
    lines += [""] + summary
    text = "\n".join(lines) + "\n"
    print("\n".join(summary))
    out = REPO / "bench" / "results" / f"same_code_cpu_{datetime.date.today()}{'_' + a.tag if a.tag else ''}.md"
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
