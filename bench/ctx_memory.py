"""What one idle CUDA process of ours holds on the device, and which driver limits make it up: fresh processes
that make a context in a given way, then wait while the parent reads their device memory (nvidia-smi
--query-compute-apps, the same reading bench/kernelbench_sweep.py sums).

    python3 bench/ctx_memory.py [--out FILE]

Variants: `bare` (ctypes on libcuda: cuInit, the primary context, a 2 MiB cuMemAlloc), `bare_stackN` (the
same with CU_LIMIT_STACK_SIZE set to N bytes a thread), `torch` (torch.zeros(1) on cuda, as a spare),
`torch_blas` (+ one matmul: cuBLAS's handle and workspace), `torch_stackN` (torch, then the stack limit set
through the driver on the same primary context), `torch_blas_stackN`. Each process prints the driver limits
it read (stack, malloc heap, printf FIFO) before and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import ctypes, json, os, sys, time
variant = sys.argv[1]
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0: raise SystemExit(f"{what} failed: {r}")
LIMITS = {"stack": 0, "printf_fifo": 1, "malloc_heap": 2}
def limits():
    out = {}
    for k, v in LIMITS.items():
        n = ctypes.c_size_t(); r = cu.cuCtxGetLimit(ctypes.byref(n), v); out[k] = n.value if r == 0 else f"err {r}"
    return out
stack = None
for part in variant.split("_"):
    if part.startswith("stack"): stack = int(part[5:])
if variant.startswith("bare"):
    ok(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    ok(cu.cuCtxSetCurrent(ctx), "setcurrent")
    p = ctypes.c_uint64(); ok(cu.cuMemAlloc_v2(ctypes.byref(p), 2 << 20), "alloc")
else:
    import torch
    x = torch.zeros(1, device="cuda")
    if "blas" in variant:
        a = torch.randn(256, 256, device="cuda"); (a @ a).sum().item()
    torch.cuda.synchronize()
before = limits()
if stack is not None:
    ok(cu.cuCtxSetLimit(0, ctypes.c_size_t(stack)), "setlimit")
    ok(cu.cuCtxSynchronize(), "sync")
print(json.dumps({"variant": variant, "limits_before": before, "limits_after": limits()}), flush=True)
time.sleep(float(os.environ.get("HOLD_S", "2.5")))
"""


def _used_mib(pid: int) -> float | None:
    text = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=30).stdout
    for line in text.splitlines():
        p, _, m = line.partition(",")
        if p.strip() == str(pid):
            return float(m)
    return None


def measure(variant: str) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, variant], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    time.sleep(0.8)
    mib = _used_mib(proc.pid)
    proc.wait(timeout=60)
    try:
        info = json.loads(line)
    except ValueError:
        info = {"variant": variant, "error": line.strip()[:200]}
    return {**info, "used_mib": mib}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="bare,bare_stack256,bare_stack64,torch,torch_blas,torch_stack256,"
                    "torch_blas_stack256,torch_blas_stack64")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = [measure(v) for v in a.variants.split(",")]
    for r in rows:
        print(json.dumps(r))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
