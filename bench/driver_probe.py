"""What a GPU's request round trips cost while the host does other work: the runner <-> child channel
(runtime/frames.py with its courier: a pipe, and CUDA VMM allocations passed by fd) timed between this
process and one peer process on the same GPU, alone and beside other load.

    python3 bench/driver_probe.py [--gpu 0] [--other-gpu 1] [--seconds 6] [--loads none,churn,cpu12,pair]

Ops, round robin for --seconds per load, each timed from the request's write to the reply's read:
  ping     a message with no tensor (pipe wake-ups only)
  to4/to64 a 4 / 64 MiB CUDA tensor to the peer (the courier's arena, up to courier.ARENA_BYTES)
  from64   a 64 MiB CUDA tensor back from the peer (the export there, the import here)
  malloc   here, not a round trip: empty_cache, then a fresh 64 MiB CUDA allocation (cudaMalloc)
--transports: instead, a 1/4/16/64 MiB CUDA tensor to the peer by each way frames.py has (arena, vmm, memfd, pipe):
where one way starts to beat another (courier.py's thresholds).
--smi: instead, one reading of this GPU's clocks the way the benchmark reads them (smi: an nvidia-smi process,
benchmark/clocks.py's query) and in process through NVML (nvml: libnvidia-ml by ctypes, initialised once):
what each of a benchmark's clock reads costs, alone and beside the other GPU's work. The first readings of
both are printed, to compare.
Loads:
  none     nothing else
  churn    CUDA contexts started and ended on the other GPU, 3 processes at a time (torch import,
           a context, one profiler session: what a spare's start does)
  cpuN     N busy Python loops
  pair     a second copy of this probe on the other GPU (the same traffic on the second device)
Prints one line per (load, op): n, median and p90 in milliseconds. No sandbox: this is about the host and
the driver, not about our isolation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OPS = ("ping", "to4", "to64", "from64", "malloc")
SIZES = {"to1": 1, "to4": 4, "to16": 16, "to64": 64}  # MiB, for --transports
CHURN = ("import torch; torch.zeros(1, device='cuda')\n"
         "from torch.autograd.profiler import profile\n"
         "with profile(use_cpu=False, use_device='cuda', use_kineto=True): torch.ones(4, device='cuda').sum().item()\n")


def peer(rx: int, tx: int, sock: int) -> None:
    import socket

    import torch

    from evokernel_mcp.runtime import frames
    from evokernel_mcp.runtime.courier import Courier

    torch.zeros(1, device="cuda")
    cour = Courier(socket.socket(fileno=sock))
    rin, wout = os.fdopen(rx, "rb"), os.fdopen(tx, "wb")
    big = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
    while True:
        try:
            msg = frames.read(rin, max_bytes=1 << 40, device="cuda", courier=cour)
        except EOFError:
            return
        out: dict = {"ok": 1}
        if msg.get("op") == "from64":
            out["t"] = big
        frames.write(wout, out, cour)


def smi_probe(seconds: float, gpu: int) -> dict[str, list[float]]:
    import ctypes

    from evokernel_mcp.benchmark.clocks import NVSMI_FULL_ARGS
    from evokernel_mcp.subproc import resolve_executable

    exe = resolve_executable("nvidia-smi")
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    t0 = time.perf_counter()
    rc = lib.nvmlInit_v2()
    handle = ctypes.c_void_p()
    rc = rc or lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(gpu), ctypes.byref(handle))
    print(f"[driver_probe] nvml init rc={rc} in {1e3 * (time.perf_counter() - t0):.1f} ms", flush=True)

    def nvml() -> tuple[int, int]:
        sm, mem = ctypes.c_uint(), ctypes.c_uint()
        lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(sm))  # NVML_CLOCK_SM
        lib.nvmlDeviceGetClockInfo(handle, 2, ctypes.byref(mem))  # NVML_CLOCK_MEM
        return sm.value, mem.value

    def smi() -> str:
        return subprocess.run([exe, *NVSMI_FULL_ARGS, "-i", str(gpu)], capture_output=True, text=True,
                              timeout=30).stdout.strip()

    print(f"[driver_probe] first readings: smi {smi()!r}, nvml (sm, mem) {nvml()}", flush=True)
    times: dict[str, list[float]] = {"smi": [], "nvml": []}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for op, fn in (("smi", smi), ("nvml", nvml)):
            t0 = time.perf_counter()
            fn()
            times[op].append(time.perf_counter() - t0)
    return times


def probe(seconds: float, transports: bool = False) -> dict[str, list[float]]:
    import torch

    from evokernel_mcp.runtime import courier, frames

    torch.zeros(1, device="cuda")
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    ours, theirs = courier.pair()
    p = subprocess.Popen([sys.executable, __file__, "--peer", f"{r1},{w2},{theirs.fileno()}"],
                         pass_fds=(r1, w2, theirs.fileno()))
    os.close(r1), os.close(w2), theirs.close()
    cour = courier.Courier(ours)
    tx, rx = os.fdopen(w1, "wb"), os.fdopen(r2, "rb")
    t4 = torch.ones(4 << 20, dtype=torch.uint8, device="cuda")
    t64 = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
    ops = [f"{w}:{k}" for w in ("arena", "vmm", "memfd", "pipe") for k in SIZES] if transports else list(OPS)
    times: dict[str, list[float]] = {k: [] for k in ops}
    bufs = {k: torch.ones(mib << 20, dtype=torch.uint8, device="cuda") for k, mib in SIZES.items()}

    arena = courier.ARENA_BYTES

    def rt(msg, way: str = "arena") -> None:
        cour.vmm = way in ("arena", "vmm")  # memfd: the courier's way for a tensor when VMM is not there
        courier.ARENA_BYTES = arena if way == "arena" else 0  # vmm: an allocation per tensor
        frames.write(tx, msg, None if way == "pipe" else cour)
        cour.vmm, courier.ARENA_BYTES = True, arena
        frames.read(rx, max_bytes=1 << 40, device="cuda", courier=cour)

    for _ in range(3):  # warm: the peer's context, the VMM library, the allocator
        rt({"op": "ping"}), rt({"op": "to", "t": t4}), rt({"op": "from64"})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for op in ops:
            t0 = time.perf_counter()
            if ":" in op:
                way, k = op.split(":")
                rt({"op": "to", "t": bufs[k]}, way)
            elif op == "ping":
                rt({"op": "ping"})
            elif op == "to4":
                rt({"op": "to", "t": t4})
            elif op == "to64":
                rt({"op": "to", "t": t64})
            elif op == "from64":
                rt({"op": "from64"})
            else:
                torch.cuda.empty_cache()
                x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
                x[:1].zero_()
                torch.cuda.synchronize()
                del x
            times[op].append(time.perf_counter() - t0)
    tx.close()
    p.wait(timeout=30)
    return times


def start_load(load: str, other_gpu: int, seconds: float) -> list[subprocess.Popen]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(other_gpu)}
    if load == "none":
        return []
    if load.startswith("cpu"):
        return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(int(load[3:] or 12))]
    if load == "pair":
        return [subprocess.Popen([sys.executable, __file__, "--seconds", str(seconds + 3), "--loads", "none",
                                  "--quiet"], env=env)]
    if load == "churn":
        loop = (f"import subprocess, sys, time\nend = time.monotonic() + {seconds + 3}\n"
                "while time.monotonic() < end:\n"
                f"    ps = [subprocess.Popen([sys.executable, '-c', {CHURN!r}]) for _ in range(3)]\n"
                "    [p.wait() for p in ps]\n")
        return [subprocess.Popen([sys.executable, "-c", loop], env=env)]
    raise SystemExit(f"unknown load {load!r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--other-gpu", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--loads", default="none,churn,cpu12,pair")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--transports", action="store_true")
    ap.add_argument("--smi", action="store_true")
    ap.add_argument("--peer", default="")
    a = ap.parse_args()
    if a.peer:
        peer(*[int(x) for x in a.peer.split(",")])
        return
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(a.gpu)
    for load in [x for x in a.loads.split(",") if x]:
        procs = start_load(load, a.other_gpu, a.seconds)
        time.sleep(2.0 if procs else 0.0)  # the load's processes get going first
        try:
            times = smi_probe(a.seconds, a.gpu) if a.smi else probe(a.seconds, a.transports)
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
        if a.quiet:
            continue
        for op, v in times.items():
            v = sorted(v)
            print(f"[driver_probe] load={load} op={op} n={len(v)} median_ms={1e3 * statistics.median(v):.2f} "
                  f"p90_ms={1e3 * v[int(0.9 * (len(v) - 1))]:.2f}", flush=True)


if __name__ == "__main__":
    main()
