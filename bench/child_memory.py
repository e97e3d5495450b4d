"""What one reference process needs on the device, beside what PyTorch alone needs for the same problem: per
KernelBench problem, a fresh process makes its CUDA context, then runs (each after the allocator's cache is
emptied and its peak reset)

    plain      the problem's forward on its inputs, as a user would run it (torch.no_grad)
    native     verify's reference forward without the float64 copy (verify/refout.reference_outputs, hi=False)
    float64    the same with the float64 copy asked for (hi=True), as a verify case that fits the device does

and reports, in MiB: the context (the device's used bytes after it, the GPU otherwise idle), and per step the
allocator's peak reserved and allocated bytes (the process's peak on the device is the context + reserved).

    python3 bench/child_memory.py --kb .kb/level1 [--only 54,65,...] [--steps plain,native,float64] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, torch
from evokernel_mcp.verify.refout import reference_outputs
src = open(sys.argv[1]).read()
ns = {"__name__": "kb"}
exec(compile(src, sys.argv[1], "exec"), ns)
MiB = 2 ** 20
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
torch.set_default_device("cuda")  # get_inputs' tensors drawn on the device (a 16 GB problem's inputs in seconds)
free, total = torch.cuda.mem_get_info()
row = {"ctx_mib": round((total - free - torch.cuda.memory_reserved()) / MiB)}
torch.manual_seed(0)
model = ns["Model"](*ns["get_init_inputs"]()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
torch.set_default_device(None)
torch.cuda.synchronize()
row["resident_mib"] = round(torch.cuda.memory_allocated() / MiB)
def step(name, fn):
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    try:
        extra = fn()
    except torch.OutOfMemoryError as e:
        extra = {"oom": str(e)[:120]}
    torch.cuda.synchronize()
    row[name] = {"reserved_mib": round(torch.cuda.max_memory_reserved() / MiB),
                 "allocated_mib": round(torch.cuda.max_memory_allocated() / MiB), **(extra or {})}
def plain():
    with torch.no_grad():
        out = model(*inputs)
    del out
def ours(hi):
    r = reference_outputs(model, inputs, hi, "cuda")
    return {"precision": r["precision"][:100], "workspace_mib": round((r["workspace_bytes"] or 0) / MiB)}
steps = {"plain": plain, "native": lambda: ours(False), "float64": lambda: ours(True)}
for name in sys.argv[2].split(","):
    step(name, steps[name])
print(json.dumps(row))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", type=Path, required=True)
    ap.add_argument("--only", default="", help="comma-separated problem numbers (default: all)")
    ap.add_argument("--steps", default="plain,native,float64", help="which of plain, native, float64 to run")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    only = {int(x) for x in a.only.split(",") if x}
    files = sorted(a.kb.glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
    rows = []
    for f in files:
        if only and int(f.name.split("_")[0]) not in only:
            continue
        p = subprocess.run([sys.executable, "-c", CHILD, str(f), a.steps], capture_output=True, text=True, timeout=600)
        lines = p.stdout.strip().splitlines()
        row = json.loads(lines[-1]) if p.returncode == 0 and lines else {"error": p.stderr.strip()[-300:]}
        rows.append({"problem": f.name, **row})
        print(json.dumps(rows[-1]), flush=True)
        if a.out:  # after every problem: a call cut off by its limit keeps what it measured
            a.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
