"""GPU acceptance check of profile_pmc / thread_trace (CUDA path, ncu). Run on the GPU host from the repo root:

    PYTHONPATH=. python3 bench/profile_check.py

1. benchmark(vector_add, full shape) -> achieved GB/s from bytes/time (the benchmark path);
   profile_pmc(memory preset) on the same Triton kernel -> derived dram_gbs must be within 10 %, bound memory-bound.
2. profile_pmc(compute preset) on a big bf16 matmul and on an FMA-loop Triton kernel -> compute-bound.
3. thread_trace on the vector_add and FMA-loop Triton kernels -> hot instructions, class fractions sum ~1.
Writes bench/results/profile_check_<device>_<date>.{md,json}; with $OUT set, copies them there and saves the
raw ncu outputs of every run under $OUT/ncu_raw/<case>/ (for recorded parser fixtures).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from evokernel_mcp import artifacts  # noqa: E402
from evokernel_mcp.app import close_app  # noqa: E402
from evokernel_mcp.profile import api  # noqa: E402

VECTOR_ADD = (REPO / "resources/reference_kernels/vector_add_triton/kernel.py").read_text()
MATMUL_REF = """import torch
class Model(torch.nn.Module):
    def forward(self, a, b):
        return a @ b
def get_inputs():
    return [torch.randn(8192, 8192).to(torch.bfloat16), torch.randn(8192, 8192).to(torch.bfloat16)]
def get_init_inputs():
    return []
"""
MATMUL_CAND = "def run(a, b):\n    return a @ b\n"
FMA_REF = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.randn(1 << 24)]
def get_init_inputs():
    return []
"""
FMA_CAND = """import torch, triton, triton.language as tl
@triton.jit
def fma_loop_kernel(x_ptr, out_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    acc = tl.load(x_ptr + offs, mask=m)
    for i in range(ITERS):
        acc = acc * 1.0001 + 0.5
    tl.store(out_ptr + offs, acc, mask=m)
def run(x):
    out = torch.empty_like(x)
    fma_loop_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), ITERS=1024, BLOCK=1024)
    return out
"""
DEVICE = os.environ.get("EVOKERNEL_BENCH_DEVICE", "cuda:0")
OUT = os.environ.get("OUT")


def device_name() -> str:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True, timeout=30)
        return r.stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return "unknown"


def save_raw(case: str, artifact_id: str | None) -> None:
    if not OUT or not artifact_id:
        return
    dest = Path(OUT) / "ncu_raw" / case
    dest.mkdir(parents=True, exist_ok=True)
    for f in artifacts.info(artifact_id).files:
        shutil.copy(artifacts.path_of(artifact_id, f.name), dest / f.name)


async def step(results: dict, case: str, coro_fn) -> object | None:
    try:
        res = await coro_fn()
    except Exception as e:  # noqa: BLE001 - record and go on with the other checks
        results[case] = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
        return None
    if getattr(res, "state", "done") != "done":
        results[case] = {"ok": False, "error": f"not finished: {res}"}
        return None
    save_raw(case, getattr(res, "artifact_id", None))
    return res


def pmc_summary(res) -> dict:
    main = max(res.dispatches, key=lambda d: d.duration_ns or 0)
    return {"tool": res.tool.model_dump(exclude={"command"}), "bound": res.bound, "kernel": main.kernel,
            "duration_ns": main.duration_ns, "derived": {k: v.value for k, v in main.derived.items()},
            "findings": [f.text for f in res.findings], "json_tokens_est": len(res.model_dump_json()) / 4,
            "peaks_from": next((p.detail for p in res.provenance if p.field == "dispatches[].derived"), None)}


async def main() -> dict:
    from evokernel_mcp.benchmark.api import benchmark

    r: dict = {"device": device_name(), "date": dt.date.today().isoformat(), "python": sys.version.split()[0]}
    common = {"device": DEVICE, "wait_s": 600, "timeout_s": 600}
    bres = await step(r, "benchmark_vector_add", lambda: benchmark(
        candidate=VECTOR_ADD, task="vector_add", shapes=["full"], device=DEVICE, wait_s=600, timeout_s=600))
    pres = await step(r, "pmc_vector_add_memory", lambda: api.profile_pmc(
        candidate=VECTOR_ADD, task="vector_add", shape="full", preset="memory", kernel_filter="add_kernel", **common))
    if pres is not None:
        s = r["pmc_vector_add_memory"] = {"ok": None, **pmc_summary(pres)}
        bench_gbs = None
        if bres is not None and getattr(bres, "results", None):
            bench_gbs = bres.results[0].achieved_gbs
        prof_gbs = s["derived"].get("dram_gbs")
        s["benchmark_gbs"] = bench_gbs
        s["rel_diff"] = abs(prof_gbs - bench_gbs) / bench_gbs if bench_gbs and prof_gbs else None
        s["ok"] = bool(s["rel_diff"] is not None and s["rel_diff"] <= 0.10 and pres.bound == "memory-bound")
    for case, ref, cand, flt in (("pmc_matmul_bf16_compute", MATMUL_REF, MATMUL_CAND, None),
                                 ("pmc_fma_loop_compute", FMA_REF, FMA_CAND, "fma_loop")):
        res = await step(r, case, lambda ref=ref, cand=cand, flt=flt: api.profile_pmc(
            candidate=cand, reference=ref, preset="compute", kernel_filter=flt, **common))
        if res is not None:
            r[case] = {"ok": res.bound == "compute-bound", **pmc_summary(res)}
    for case, kw in (("trace_vector_add", {"task": "vector_add", "shape": "full", "kernel_filter": "add_kernel"}),
                     ("trace_fma_loop", {"reference": FMA_REF, "kernel_filter": "fma_loop"})):
        cand = VECTOR_ADD if case == "trace_vector_add" else FMA_CAND
        res = await step(r, case, lambda cand=cand, kw=kw: api.thread_trace(candidate=cand, **kw, **common))
        if res is not None:
            tot = sum(res.class_breakdown.values())
            r[case] = {"ok": bool(res.hot_instructions) and abs(tot - 1) < 0.01, "class_sum": tot,
                       "tool": res.tool.model_dump(exclude={"command"}), "kernel": res.kernel,
                       "class_breakdown": res.class_breakdown, "stall_reasons": res.stall_reasons,
                       "hot": [(h.instruction, h.klass, h.cycles) for h in res.hot_instructions[:8]],
                       "json_tokens_est": len(res.model_dump_json(by_alias=True)) / 4}
    await close_app()
    return r


def write(r: dict) -> None:
    dev = "".join(c if c.isalnum() else "_" for c in r["device"]).strip("_")
    stem = f"profile_check_{dev}_{r['date']}"
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(r, indent=1, default=str))
    lines = [f"# profile_check on {r['device']} ({r['date']})", ""]
    for k, v in r.items():
        if isinstance(v, dict):
            lines.append(f"## {k}: {'PASS' if v.get('ok') else 'FAIL' if v.get('ok') is False else 'n/a'}")
            for kk in ("error", "bound", "kernel", "benchmark_gbs", "rel_diff", "class_sum", "findings", "tool"):
                if kk in v:
                    lines.append(f"- {kk}: {v[kk]}")
            if "derived" in v:
                lines.append(f"- derived: {json.dumps(v['derived'])}")
            if "class_breakdown" in v:
                lines.append(f"- class_breakdown: {json.dumps(v['class_breakdown'])}")
            lines.append("")
    (out / f"{stem}.md").write_text("\n".join(lines))
    if OUT:
        for ext in ("json", "md"):
            shutil.copy(out / f"{stem}.{ext}", Path(OUT) / f"{stem}.{ext}")
    print("\n".join(lines))


if __name__ == "__main__":
    write(anyio.run(main))
