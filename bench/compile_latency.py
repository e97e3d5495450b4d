"""Cold and warm compile_kernel latency on this machine.

Cold = cache miss in a fresh state dir (a new compiler subprocess); warm = the same call again, served by
the content-addressed cache (median of WARM_REPS). Targets: Triton gfx942/gfx950/sm_90, HIP gfx942/gfx950,
CUDA sm_90. Writes bench/results/compile_latency_<date>.md and .json (also under $OUT when set).

Run from the repo root: `python3 bench/compile_latency.py` (PYTHONPATH=. if the package is not installed).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WARM_REPS = 20

TRITON_SRC = '''\
import triton
import triton.language as tl


@triton.jit
def small_mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)
'''
TRITON_ARGS = {"signature": {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "K": "i32"},
               "constexprs": {"BM": 64, "BN": 64, "BK": 32}, "options": {"num_warps": 4}}

HIP_SRC = '''\
#include <hip/hip_runtime.h>
extern "C" __global__ void __launch_bounds__(256) lds_fma(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float tile[256];
  int t = threadIdx.x;
  tile[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  float a = tile[(t + 1) & 255], b = tile[(t + 7) & 255];
  __builtin_amdgcn_sched_group_barrier(0x100, 2, 0);
  y[blockIdx.x * 256 + t] = __builtin_fmaf(a, b, y[blockIdx.x * 256 + t]);
}
'''
CUDA_SRC = HIP_SRC.replace("#include <hip/hip_runtime.h>\n", "").replace(
    "  __builtin_amdgcn_sched_group_barrier(0x100, 2, 0);\n", "")

CASES = [
    ("triton", "gfx942", TRITON_SRC, "small_mm", TRITON_ARGS),
    ("triton", "gfx950", TRITON_SRC, "small_mm", TRITON_ARGS),
    ("triton", "sm_90", TRITON_SRC, "small_mm", TRITON_ARGS),
    ("hip", "gfx942", HIP_SRC, "lds_fma", {"options": {"workgroup_size": 256}}),
    ("hip", "gfx950", HIP_SRC, "lds_fma", {"options": {"workgroup_size": 256}}),
    ("cuda", "sm_90", CUDA_SRC, "lds_fma", {"options": {"workgroup_size": 256}}),
]


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("triton", "torch", "mcp", "evokernel-mcp"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def run_case(language, target, src, kernel, kw) -> dict:
    import anyio

    from evokernel_mcp.compile.api import compile_kernel

    call = lambda: compile_kernel(src, language, kernel, target, **kw)  # noqa: E731
    t0 = time.perf_counter()
    r = anyio.run(call)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(WARM_REPS):
        t0 = time.perf_counter()
        w = anyio.run(call)
        warm.append(time.perf_counter() - t0)
        assert w.cached
    k = r.kernels[0] if r.kernels else None
    return {"language": language, "target": target, "ok": r.ok, "toolchain": f"{r.toolchain.name} {r.toolchain.version}",
            "cold_s": round(cold, 3), "warm_median_ms": round(statistics.median(warm) * 1000, 3),
            "warm_max_ms": round(max(warm) * 1000, 3),
            "kernel": k.model_dump(include={"name", "vgpr_count", "sgpr_count", "registers", "lds_bytes",
                                            "dynamic_lds_bytes"}) if k else None,
            "diagnostics": [d.message for d in r.diagnostics if d.severity == "error"]}


def _markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"# compile_kernel latency ({meta['date']})", "",
             f"- host: {meta['host']}; CPUs: {meta['cpus']}; GPU: {meta['gpu']}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}",
             f"- cold = first call in a fresh state dir (compiler subprocess); warm = cached repeat, median of "
             f"{WARM_REPS}", "", "| language | target | ok | cold (s) | warm median (ms) | warm max (ms) | toolchain |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['language']} | {r['target']} | {r['ok']} | {r['cold_s']} | {r['warm_median_ms']} | "
                     f"{r['warm_max_ms']} | {r['toolchain']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    os.environ["EVOKERNEL_HOME"] = tempfile.mkdtemp(prefix="evokernel_bench_")  # a script, not the server
    sys.path.insert(0, str(REPO))
    rows = [run_case(*c) for c in CASES]
    gpu = "none"
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except Exception:  # noqa: BLE001
        pass
    meta = {"date": dt.datetime.now().isoformat(timespec="seconds"), "host": platform.node(),
            "cpus": os.cpu_count(), "platform": platform.platform(), "gpu": gpu, "versions": _versions()}
    stem = f"compile_latency_{dt.date.today().isoformat()}"
    dirs = [REPO / "bench" / "results"] + ([Path(os.environ["OUT"])] if os.environ.get("OUT") else [])
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
        (d / f"{stem}.md").write_text(_markdown(meta, rows))
    print(_markdown(meta, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
