#!/usr/bin/env python3
"""`make demo`: a scripted agent session against evokernel-mcp through the real MCP client (stdio).

It walks the loop the server exists for: device facts -> docs -> compile -> verify -> benchmark ->
profile -> journal, printing a readable summary of each structured result. Every line it prints comes from
what the server returned (or says plainly that it is the demo's own text). Tools that cannot run on this
machine (no GPU, no profiler) say so; the demo keeps going. What a tool accepts is read from the server's
full schema resource (evokernel://tools/{name}): tools/list hides the advanced arguments.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

TRITON_AXPY = '''
import triton
import triton.language as tl

@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, a * x + y, mask=m)
'''

HIP_STENCIL = r'''
#include <hip/hip_runtime.h>
#define TILE 256
__global__ void stencil_lds(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE + 4];
  int i = blockIdx.x * TILE + threadIdx.x;
  tile[threadIdx.x + 2] = i < n ? in[i] : 0.f;
  if (threadIdx.x < 2) {
    tile[threadIdx.x] = i >= 2 ? in[i - 2] : 0.f;
    tile[TILE + 2 + threadIdx.x] = i + TILE < n ? in[i + TILE] : 0.f;
  }
  __syncthreads();
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    acc = fmaf(tile[threadIdx.x + k], 0.2f, acc);
    __builtin_amdgcn_sched_group_barrier(0x100, 1, 0);  // 1 DS read
    __builtin_amdgcn_sched_group_barrier(0x002, 1, 0);  // then 1 VALU
  }
  if (i < n) out[i] = acc;
}
'''

RMSNORM_CANDIDATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.rsqrt(ms + eps) * w
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=m)


def run(x, w):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2)
    _rmsnorm[(x2.shape[0],)](x2, w, out, x2.shape[1], 1e-6, BLOCK=triton.next_power_of_2(x2.shape[1]))
    return out.reshape(x.shape)
'''


def hr(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)))


def show(obj, width: int = 100) -> None:
    text = json.dumps(obj, indent=1, default=str)
    lines = text.splitlines()
    for line in lines[:40]:
        print(textwrap.shorten(line, width=width, placeholder=" ...") if len(line) > width else line)
    if len(lines) > 40:
        print(f"  ... ({len(lines) - 40} more lines)")


async def call(client: Client, tools: set[str], name: str, args: dict):
    """One tool call; a job handle (not finished within wait_s) is followed with job_result to its end."""
    if name not in tools:
        print(f"[{name}] not available in this build")
        return None
    t0 = time.perf_counter()
    r = await client.call_tool(name, args)
    sc = r.structured_content or {}
    while not r.is_error and isinstance(sc.get("job"), dict):
        job_id = sc["job"]["job_id"]
        print(f"[{name}] still running after {time.perf_counter() - t0:.0f} s as job {job_id}; job_result(wait_s=50)")
        r = await client.call_tool("job_result", {"job_id": job_id, "wait_s": 50})
        jr = r.structured_content or {}
        if r.is_error or not jr.get("finished"):
            sc = jr if r.is_error else {"job": {"job_id": job_id}}
            continue
        if jr.get("result") is None:
            print(f"[{name}] job {job_id} ended {jr.get('state')} without a result: {jr.get('error')}")
            return None
        sc = jr["result"]
    dt = time.perf_counter() - t0
    if r.is_error:
        print(f"[{name}] ({dt:.2f} s) tool error (reported to the agent as is_error): {r.content[0].text[:400]}")
        return None
    print(f"[{name}] ({dt:.2f} s)")
    return sc


def device_summary(rep: dict) -> None:
    print(f"backend: {rep['backend']}")
    for d in rep["devices"]:
        print(f"  GPU {d['index']}: {d['name']} ({d['arch']}): {d.get('compute_units')} CUs/SMs, "
              f"wave {d.get('wavefront_size')}, LDS/smem per workgroup {d.get('lds_bytes_per_workgroup')} B, "
              f"L2 {d.get('l2_bytes')} B, max clock {d.get('max_clock_mhz')} MHz, "
              f"memory {d.get('memory_bytes')} B, peak BW {d.get('peak_bandwidth_gbs')} GB/s")
        for c in d.get("conflicts") or []:
            print(f"    CONFLICT: {c}")
    if not rep["devices"]:
        print("  no GPU here; offline compile targets:")
        for t in rep.get("offline_targets") or []:
            print(f"    {t['target']:7s} {'yes' if t['available'] else 'no '}  {'; '.join(t['compilers'])}")
    for note in rep.get("notes") or []:
        print(f"  note: {note}")
    srcs = sorted({p['source'] for p in rep.get('provenance', [])})
    print(f"  provenance sources: {', '.join(srcs)}")


RMSNORM_NO_WEIGHT = RMSNORM_CANDIDATE.replace("y = x * tl.rsqrt(ms + eps) * w", "y = x * tl.rsqrt(ms + eps)")
RMSNORM_SIGNATURE = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "n_cols": "i32", "eps": "fp32"}
RMSNORM_KERNEL = RMSNORM_CANDIDATE.split("def run(")[0]


def demo_journal() -> str:
    """A fresh journal file for this run (so the distilled report at the end is of this run only)."""
    from evokernel_mcp.paths import sub_state_dir

    return str(sub_state_dir("demo_journals") / time.strftime("%Y%m%d-%H%M%S.sqlite3"))


async def full_schemas(client: Client, listing) -> dict[str, dict]:
    """Each tool's full input schema (advanced arguments included) from evokernel://tools/{name}; the listed
    schema where the resource does not answer."""
    out = {}
    for t in listing:
        try:
            res = await client.read_resource(f"evokernel://tools/{t.name}")
            out[t.name] = json.loads(res.contents[0].text)["input_schema"]
        except Exception:  # noqa: BLE001 - the listed schema is the next best answer
            out[t.name] = t.input_schema or {}
    return out


def journal_args(schemas: dict[str, dict], tool: str, label: str) -> dict:
    """experiment (+ task for compile_kernel) when the server's full schema of the tool takes them."""
    props = schemas.get(tool, {}).get("properties", {})
    out = {"experiment": label} if "experiment" in props else {}
    if out and tool == "compile_kernel" and "task" in props:
        out["task"] = "rmsnorm"
    return out


def journal_line(schemas: dict[str, dict], tool: str, label: str, result: dict | None) -> str | None:
    """Print where the call went in the journal, as the server said; returns the journal result id."""
    if result is None:
        return None
    rid = result.get("result_id")
    if "experiment" not in schemas.get(tool, {}).get("properties", {}):
        print(f"  not journaled: {tool} takes no experiment argument in this build")
    elif rid:
        print(f"  journaled as {label}: result {rid}")
    else:
        print(f"  {tool} returned no journal result id for {label}")
    return rid


def verify_reason(res: dict) -> str:
    """Why a verify result failed, from its fields: the error, else the first failing case."""
    err = res.get("error") or {}
    if err:
        return f"{err.get('kind')}: {str(err.get('message', ''))[:200]}"
    bad = [c for c in res.get("cases", []) if not c.get("passed")]
    if not bad:
        return "no case failed"
    c, total = bad[0], sum(int(c.get("mismatches") or 0) for c in bad)
    first = "probe inputs" if c.get("probe") else f"seed {c.get('seed')}"
    return (f"{total} mismatching elements in {len(bad)} of {len(res.get('cases', []))} cases; first: shape "
            f"{c.get('shape')} {first}, {c.get('mismatches')} of them, max_abs_err {c.get('max_abs_err')}")


async def journal_steps(client: Client, tools: set[str], schemas: dict[str, dict]) -> None:
    """8. The journal: a failing variant, its lesson, an open claim, then the distilled report of this run."""
    hr("8. the experiment journal: a second variant that forgets the weight")
    bad = await call(client, tools, "verify_vs_pytorch", {
        "task": "rmsnorm", "candidate": RMSNORM_NO_WEIGHT, "shapes": ["small"], "seeds": 1, "wait_s": 50,
        **journal_args(schemas, "verify_vs_pytorch", "demo/rmsnorm-no-weight")})
    if bad:
        print(f"  passed={bad.get('passed')}" + ("" if bad.get("passed") else f": {verify_reason(bad)}"))
    rid = journal_line(schemas, "verify_vs_pytorch", "demo/rmsnorm-no-weight", bad)
    if "record_note" not in tools:
        return
    await call(client, tools, "record_note", {
        "text": "RMSNorm must multiply by the weight w after normalizing: the variant without it fails verify.",
        "evidence": {"kind": "result", "result_id": rid} if rid else "unverified",
        "experiment": "demo/rmsnorm-no-weight", "kind": "lesson"})
    print("  (next: an unverified claim, to show that the journal keeps claims apart from evidence)")
    await call(client, tools, "record_note", {
        "text": "One program per row is fast enough for N=8192 on MI300X.", "evidence": "unverified",
        "task": "rmsnorm", "kind": "claim"})
    hr("9. distill: the journal of this run, compressed (evokernel://journal/rmsnorm/distilled)")
    try:
        res = await client.read_resource("evokernel://journal/rmsnorm/distilled")
        print(textwrap.indent(res.contents[0].text, "  "))
    except Exception as e:  # noqa: BLE001 - the demo reports and goes on
        print(f"  could not read the distilled journal: {e}")


async def main() -> int:
    env = dict(os.environ)
    env["EVOKERNEL_JOURNAL"] = os.environ["EVOKERNEL_JOURNAL"] = demo_journal()
    params = StdioServerParameters(command=sys.executable, args=["-m", "evokernel_mcp", "serve"], env=env)
    async with Client(params) as client:
        listing = (await client.list_tools()).tools
        tools = {t.name for t in listing}
        schemas = await full_schemas(client, listing)
        hr("tools")
        print(", ".join(sorted(tools)))

        hr("1. query_rocminfo: what am I optimizing for?")
        rep = await call(client, tools, "query_rocminfo", {"refresh": True})
        if rep:
            device_summary(rep)

        hr("2. docs: find one fact, with its source")
        res = await call(client, tools, "search_docs", {"query": "LDS size gfx950", "top_k": 3})
        if res:
            for r in res["results"]:
                print(f"  {r['score']:.2f}  {r['path']}#{r['anchor']}: {r['title']}")
            top = res["results"][0] if res["results"] else None
            if top:
                page = await call(client, tools, "read_doc", {"path": top["path"], "anchor": top["anchor"]})
                if page:
                    print(textwrap.indent(page["text"][:800], "  | "))

        hr("3. compile_kernel: what did the compiler make of it? (Triton -> gfx950, no GPU needed)")
        comp = await call(client, tools, "compile_kernel", {
            "source": TRITON_AXPY, "language": "triton", "kernel": "axpy_kernel", "target": "gfx950",
            "signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "a": "fp32", "n": "i32"},
            "constexprs": {"BLOCK": 1024}, "options": {"num_warps": 4},
        })
        if comp:
            print(f"  ok={comp['ok']} toolchain={comp['toolchain']} cached={comp['cached']} artifact={comp['artifact_id']}")
            for k in comp["kernels"]:
                occ = k.get("occupancy") or {}
                print(f"  {k['name']}: VGPR {k.get('vgpr_count')} SGPR {k.get('sgpr_count')} LDS {k.get('lds_bytes')} B, "
                      f"spills {k.get('vgpr_spill_count')}; occupancy {occ.get('waves_per_simd')} waves/SIMD "
                      f"(limited by {occ.get('limiter')})")
                if k.get("isa_summary"):
                    print(f"  ISA classes: {k['isa_summary'].get('classes')}")
            again = await call(client, tools, "compile_kernel", {
                "source": TRITON_AXPY, "language": "triton", "kernel": "axpy_kernel", "target": "gfx950",
                "signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "a": "fp32", "n": "i32"},
                "constexprs": {"BLOCK": 1024}, "options": {"num_warps": 4},
            })
            if again:
                print(f"  second compile cached={again['cached']}")
            if comp.get("artifact_id"):
                page = await call(client, tools, "read_artifact", {"artifact_id": comp["artifact_id"], "limit": 8})
                if page:
                    print(textwrap.indent(page["text"], "  | "))

        hr("3b. compile_kernel: HIP C++ with an LDS tile and sched_group_barrier, gfx942 vs gfx950")
        for target in ("gfx942", "gfx950"):
            hip = await call(client, tools, "compile_kernel", {
                "source": HIP_STENCIL, "language": "hip", "kernel": "stencil_lds", "target": target,
                "options": {"workgroup_size": 256}})
            if hip:
                for k in hip["kernels"]:
                    occ = k.get("occupancy") or {}
                    print(f"  {target}: {hip['toolchain']['name']}: VGPR {k.get('vgpr_count')} LDS {k.get('lds_bytes')} B "
                          f"-> {occ.get('waves_per_simd')} waves/SIMD (limits {occ.get('limits')}, "
                          f"binding: {occ.get('limiter')})")
                    cls = (k.get("isa_summary") or {}).get("classes", {})
                    print(f"    ds_read {cls.get('ds_read')}, v_fma {cls.get('valu_fma')}, "
                          f"sched_group_barrier {cls.get('sched_group_barrier')}")

        hr("4. tasks")
        tasks = await call(client, tools, "list_tasks", {})
        if tasks:
            show(tasks)

        on_cpu = not (rep or {}).get("devices")
        hr("5. verify_vs_pytorch: a Triton RMSNorm candidate" + (" (no GPU: on the CPU, Triton's interpreter)"
                                                                 if on_cpu else "") + ", journaled as demo/rmsnorm-v1")
        print(f"  journal of this run: {os.environ['EVOKERNEL_JOURNAL']}")
        comp = await call(client, tools, "compile_kernel", {
            "source": RMSNORM_KERNEL, "language": "triton", "kernel": "_rmsnorm", "target": "gfx950",
            "signature": RMSNORM_SIGNATURE, "constexprs": {"BLOCK": 8192},
            **journal_args(schemas, "compile_kernel", "demo/rmsnorm-v1")})
        if comp:
            for k in comp["kernels"]:
                print(f"  compiled {k['name']} for gfx950: VGPR {k.get('vgpr_count')} LDS {k.get('lds_bytes')} B")
            journal_line(schemas, "compile_kernel", "demo/rmsnorm-v1", comp)
        ver = await call(client, tools, "verify_vs_pytorch", {
            "task": "rmsnorm", "candidate": RMSNORM_CANDIDATE, "shapes": ["small"], "seeds": 2, "wait_s": 50,
            **journal_args(schemas, "verify_vs_pytorch", "demo/rmsnorm-v1"),
        })
        if ver:
            print(f"  passed={ver.get('passed')} device={ver.get('device')}"
                  + ("" if ver.get("passed") else f": {verify_reason(ver)}"))
            for c in ver.get("cases", []):
                kind = "probe inputs" if c.get("probe") else f"seed {c.get('seed')}"
                print(f"  {c.get('shape')} {kind}: passed={c.get('passed')} max_abs={c.get('max_abs_err')} "
                      f"rel_l2={c.get('rel_l2_err')} unwritten={c.get('unwritten_count')} "
                      f"deterministic={c.get('deterministic')}")
            journal_line(schemas, "verify_vs_pytorch", "demo/rmsnorm-v1", ver)

        hr("6. benchmark vs PyTorch")
        bench = await call(client, tools, "benchmark", {
            "task": "rmsnorm", "candidate": RMSNORM_CANDIDATE, "shapes": ["small"], "min_reps": 5,
            "max_time_s": 2.0, "wait_s": 50, **journal_args(schemas, "benchmark", "demo/rmsnorm-v1"),
        })
        if bench:
            err = bench.get("error") or {}
            print(f"  state={bench.get('state')}" + (f": {err.get('kind')}: {str(err.get('message'))[:200]}"
                                                      if err else ""))
            for r in bench.get("results", []):
                c, b = r.get("candidate") or {}, r.get("baseline") or {}
                print(f"  {r['shape']}: candidate median {c.get('median_ms')} ms, PyTorch {b.get('median_ms')} ms, "
                      f"speedup {r.get('speedup')} noise={r.get('noise')} flags={r.get('flags')}")
            journal_line(schemas, "benchmark", "demo/rmsnorm-v1", bench)

        hr("7. profile_pmc (needs rocprofv3 or ncu and a GPU)")
        prof = await call(client, tools, "profile_pmc", {
            "task": "rmsnorm", "candidate": RMSNORM_CANDIDATE, "preset": "memory", "shapes": ["small"], "wait_s": 50,
        })
        if prof:
            for f in prof.get("findings", []):
                print(f"  finding: {f['text']}")
        else:
            print("  (the demo's note: a recorded run on an H200 with ncu is in "
                  "bench/results/profile_check_NVIDIA_H200_2026-11-22.md)")
        await journal_steps(client, tools, schemas)
    print("\ndemo finished")
    return 0


if __name__ == "__main__":
    raise SystemExit(anyio.run(main))
