"""What a CUDA context costs the host's driver: fresh processes that create one and exit, one or several
at a time, on one GPU or on two, with driver settings varied; and how context churn delays another
process's driver calls (a job's allocations and maps) on the same GPU or the other one.

    python3 bench/ctx_probe.py [--gpus 0] [--seconds 4] [--conc 1,2,4] [--envs default,conn1] [--latency]

Per (env, concurrency, GPUs): for --seconds, `conc` threads per GPU each start processes back to back. A
process (ctypes on libcuda, no torch) times cuInit, the primary context's retain + make current, and a
first 2 MiB cuMemAlloc, then exits (its context's teardown is in the process wall the parent sees).
--torch: the process instead imports torch and makes its context as a spare does (torch.zeros(1) on cuda).
--latency: a process holding a context times cuMemAlloc + cuMemFree of 2 MiB in a loop, alone, beside churn
on its GPU and (with two GPUs) beside churn on the other one.
Envs: default; connN (CUDA_DEVICE_MAX_CONNECTIONS=N, N = 1, 2, 4); eager (CUDA_MODULE_LOADING=EAGER).
The bare interpreter's start and exit (python -c pass) is printed first, to subtract from a process's wall.
Prints one line per run: processes per second, and p50/p90 of each phase in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

CHILD = r"""
import ctypes, json, sys, time
t0 = time.perf_counter()
cu = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0: raise SystemExit(f"{what} failed: {r}")
ok(cu.cuInit(0), "cuInit"); t1 = time.perf_counter()
dev = ctypes.c_int(); ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p(); ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
ok(cu.cuCtxSetCurrent(ctx), "setcurrent"); t2 = time.perf_counter()
p = ctypes.c_uint64(); ok(cu.cuMemAlloc_v2(ctypes.byref(p), 2 << 20), "alloc"); ok(cu.cuCtxSynchronize(), "sync")
t3 = time.perf_counter()
ok(cu.cuMemFree_v2(p), "free"); ok(cu.cuDevicePrimaryCtxRelease_v2(dev), "release")
t4 = time.perf_counter()
print(json.dumps({"load": t0, "init": t1 - t0, "ctx": t2 - t1, "alloc": t3 - t2, "destroy": t4 - t3}), flush=True)
"""
TORCH_CHILD = r"""
import json, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.init()
t2 = time.perf_counter()
x = torch.empty(1, device="cuda")
t3 = time.perf_counter()
x.fill_(0); torch.cuda.synchronize()
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "cuda_init": t2 - t1, "ctx_malloc": t3 - t2, "first_kernel": t4 - t3}), flush=True)
"""
LATENCY = r"""
import ctypes, json, sys, time
cu = ctypes.CDLL("libcuda.so.1")
cu.cuInit(0); dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 0)
ctx = ctypes.c_void_p(); cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cu.cuCtxSetCurrent(ctx)
p = ctypes.c_uint64(); out = []
end = time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    t = time.perf_counter()
    cu.cuMemAlloc_v2(ctypes.byref(p), 2 << 20); cu.cuMemFree_v2(p)
    out.append(time.perf_counter() - t)
    time.sleep(0.002)
print(json.dumps(out))
"""
ENVS = {"default": {}, "conn1": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "conn2": {"CUDA_DEVICE_MAX_CONNECTIONS": "2"},
        "conn4": {"CUDA_DEVICE_MAX_CONNECTIONS": "4"}, "eager": {"CUDA_MODULE_LOADING": "EAGER"}}


def _env(gpu: int, name: str) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), **ENVS[name]}


def churn(gpus: list[int], conc: int, seconds: float, env: str, torch_mode: bool = False) -> dict[str, list[float]]:
    """conc threads per GPU, each starting processes back to back for `seconds`; phase times per process."""
    rec: dict[str, list[float]] = {"wall": []}
    lock = threading.Lock()
    end = time.monotonic() + seconds
    code = TORCH_CHILD if torch_mode else CHILD

    def loop(gpu: int) -> None:
        while time.monotonic() < end:
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", code], env=_env(gpu, env), capture_output=True, text=True)
            wall = time.perf_counter() - t
            if r.returncode != 0:
                print("[ctx_probe] child failed:", r.stderr.strip()[-300:], file=sys.stderr)
                continue
            d = json.loads(r.stdout.strip().splitlines()[-1])
            with lock:
                rec["wall"].append(wall)
                for k, v in d.items():
                    if k != "load":
                        rec.setdefault(k, []).append(v)

    threads = [threading.Thread(target=loop, args=(g,)) for g in gpus for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rec


def q(xs: list[float], f: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))] * 1e3 if xs else float("nan")


def line(tag: str, rec: dict[str, list[float]], seconds: float) -> str:
    n = len(rec.get("wall", rec.get("lat", [])))
    parts = [f"{k} {q(v, 0.5):.1f}/{q(v, 0.9):.1f}" for k, v in rec.items()]
    return f"[ctx_probe] {tag}: n {n}, {n / seconds:.1f}/s; ms p50/p90: " + ", ".join(parts)


def latency(gpu: int, seconds: float, churn_gpus: list[int], conc: int) -> dict[str, list[float]]:
    p = subprocess.Popen([sys.executable, "-c", LATENCY, str(seconds)], env=_env(gpu, "default"),
                         stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    if churn_gpus:
        churn(churn_gpus, conc, seconds - 0.5, "default")
    out, _ = p.communicate()
    lat = json.loads(out)
    return {"lat": lat, "p99": [q(lat, 0.99) / 1e3], "max": [max(lat)]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--conc", default="1,2,4")
    ap.add_argument("--envs", default="default,conn1")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--latency", action="store_true")
    a = ap.parse_args()
    gpus = [int(g) for g in a.gpus.split(",")]
    print(f"[ctx_probe] python {sys.version.split()[0]}, gpus {gpus}, cpus {os.cpu_count()}", flush=True)
    bare = []
    for _ in range(10):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import ctypes"], check=True)
        bare.append(time.perf_counter() - t)
    print(line("bare interpreter", {"wall": bare}, 1.0), flush=True)
    for env in a.envs.split(","):
        for c in (int(x) for x in a.conc.split(",")):
            sets = [[g] for g in gpus] if len(gpus) == 1 else [[gpus[0]], gpus]
            for gs in sets:
                rec = churn(gs, c, a.seconds, env, a.torch)
                print(line(f"{'torch ' if a.torch else ''}{env} conc {c} per gpu, gpus {gs}", rec, a.seconds), flush=True)
    if a.latency:
        g0 = gpus[0]
        runs = [("alone", [], 0), ("churn same gpu x2", [g0], 2)]
        if len(gpus) > 1:
            runs.append(("churn other gpu x2", [gpus[1]], 2))
        for tag, cg, c in runs:
            rec = latency(g0, a.seconds, cg, c)
            print(line(f"alloc+free 2 MiB on gpu {g0}, {tag}", rec, a.seconds), flush=True)


if __name__ == "__main__":
    main()
