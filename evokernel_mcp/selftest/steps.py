"""The self-test steps: each calls ONE tool through the MCP client with its documented arguments and judges
the structured result. A step the host cannot run is a skip with the reason, decided before the call."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from evokernel_mcp import executables
from evokernel_mcp.selftest import sources
from evokernel_mcp.selftest.models import StepResult

PRESETS = ("overview", "memory", "compute", "lds", "occupancy")
LONG_WAIT_S = 50  # per call; longer jobs are followed with job_result


@dataclass
class Ctx:
    client: Any
    quick: bool = False
    step_timeout_s: float = 900.0
    backend: str | None = None
    arch: str | None = None
    has_gpu: bool = False
    artifacts: dict[str, str] = field(default_factory=dict)  # step name -> artifact id (for --capture)
    results: dict[str, dict] = field(default_factory=dict)  # step name -> structured result


class Skip(Exception):
    """The host cannot run this step; the message says why."""


async def call(ctx: Ctx, tool: str, args: dict) -> tuple[bool, dict | str]:
    """(is_error, structured result or error text); a job handle is followed with job_result until done."""
    r = await ctx.client.call_tool(tool, args)
    if r.is_error:
        return True, " ".join(getattr(c, "text", "") for c in r.content)[:1500]
    sc = r.structured_content or {}
    deadline = time.monotonic() + ctx.step_timeout_s
    while sc.get("job_id") and sc.get("state") in ("queued", "running") and time.monotonic() < deadline:
        jr = await ctx.client.call_tool("job_result", {"job_id": sc["job_id"], "wait_s": LONG_WAIT_S})
        if jr.is_error:
            return True, " ".join(getattr(c, "text", "") for c in jr.content)[:1500]
        j = jr.structured_content or {}
        if j.get("finished") or j.get("state") in ("done", "failed", "cancelled"):
            if j.get("state") != "done":
                return True, f"job {sc['job_id']} {j.get('state')}: {j.get('error') or j.get('message')}"
            sc = j  # the tool's own fields, at the top level
    if sc.get("state") in ("queued", "running"):
        return True, f"job {sc.get('job_id')} not finished within {ctx.step_timeout_s:g} s"
    return False, sc


def _target(ctx: Ctx, language: str) -> str:
    """The live device's arch when it can run this language, else an offline target."""
    live = {"cuda": ("cuda",), "hip": ("rocm",), "triton": ("rocm", "cuda")}[language]
    if ctx.backend in live and ctx.arch:
        return ctx.arch
    return "sm_90" if language == "cuda" else "gfx942"


async def query_rocminfo(ctx: Ctx) -> tuple[str, str, dict]:
    err, res = await call(ctx, "query_rocminfo", {"refresh": True})
    if err:
        return "fail", str(res), {}
    devs = res.get("devices") or []
    ctx.results["query_rocminfo"] = res
    ctx.backend, ctx.has_gpu = res.get("backend"), bool(devs)
    ctx.arch = devs[0].get("arch") if devs else None
    if not res.get("provenance"):
        return "fail", "result has no provenance", {}
    if ctx.backend != "none" and not (devs and ctx.arch):
        return "fail", f"backend {ctx.backend} but no device with an arch", {}
    names = [f"{d.get('name')} ({d.get('arch')}, {d.get('compute_units')} CUs/SMs)" for d in devs]
    detail = f"backend {ctx.backend}: " + ("; ".join(names) if names else "no GPU (offline compile targets only)")
    return "pass", detail, {"devices": len(devs), "arch": ctx.arch, "conflicts": sum(len(d.get("conflicts") or [])
                                                                                       for d in devs)}


async def _compile(ctx: Ctx, language: str, source: str, extra: dict) -> tuple[str, str, dict]:
    args = {"source": source, "language": language, "kernel": sources.KERNEL, "target": _target(ctx, language),
            **extra}
    err, res = await call(ctx, "compile_kernel", args)
    if err:
        return "fail", str(res), {}
    ks = [k for k in res.get("kernels") or [] if sources.KERNEL in (k.get("name") or "")]
    if not res.get("ok") or not ks:
        return "fail", f"ok={res.get('ok')} diagnostics={res.get('diagnostics')}"[:800], {}
    k = ks[0]
    ctx.artifacts[f"compile_{language}"] = res.get("artifact_id") or ""
    regs = k.get("vgpr_count") if k.get("vgpr_count") is not None else k.get("registers")
    occ = k.get("occupancy") or {}
    tc = (res.get("toolchain") or {}).get("name")
    return "pass", (f"{res.get('target')} with {tc}: registers {regs}, LDS {k.get('lds_bytes')} B, occupancy "
                    f"{occ.get('waves_per_simd') or occ.get('warps_per_sm')} (limiter {occ.get('limiter')})"), \
        {"registers": regs, "lds_bytes": k.get("lds_bytes"), "target": res.get("target")}


async def compile_triton(ctx: Ctx):
    if not _module("triton"):
        raise Skip("triton is not installed")
    return await _compile(ctx, "triton", sources.TRITON, {"signature": sources.TRITON_SIGNATURE,
                                                          "constexprs": sources.TRITON_CONSTEXPRS,
                                                          "options": {"num_warps": 4}})


async def compile_hip(ctx: Ctx):
    if not (executables.find("hipcc") or executables.find("clang")):
        raise Skip("no HIP compiler (hipcc/amdclang++ or clang-19 with rocm-device-libs)")
    return await _compile(ctx, "hip", sources.HIP, {"options": {"workgroup_size": 256}})


async def compile_cuda(ctx: Ctx):
    if not executables.find("nvcc"):
        raise Skip("no nvcc (CUDA hosts)")
    return await _compile(ctx, "cuda", sources.CUDA, {"options": {"workgroup_size": 256}})


def _shape(ctx: Ctx) -> str:
    return "medium" if ctx.has_gpu else "small"


async def verify(ctx: Ctx):
    if not _module("torch"):
        raise Skip("torch is not installed")
    err, res = await call(ctx, "verify_vs_pytorch", {"task": sources.TASK, "candidate": sources.TRITON,
                                                     "shapes": [_shape(ctx)], "seeds": 2, "wait_s": LONG_WAIT_S})
    if err:
        return "fail", str(res), {}
    cases = res.get("cases") or []
    if not res.get("passed") or not cases:
        return "fail", f"passed={res.get('passed')} error={res.get('error')} cases={cases[:1]}"[:800], {}
    worst = max((c.get("max_abs_err") or 0) for c in cases)
    return "pass", f"{len(cases)} cases on {res.get('device')}, max_abs_err {worst:g}", {"max_abs_err": worst}


async def benchmark(ctx: Ctx):
    if not ctx.has_gpu:
        raise Skip("no GPU: benchmark times device kernels against the roofline")
    err, res = await call(ctx, "benchmark", {"task": sources.TASK, "candidate": sources.TRITON, "shapes": ["medium"],
                                             "max_time_s": 5.0, "wait_s": LONG_WAIT_S})
    if err:
        return "fail", str(res), {}
    rs = res.get("results") or []
    cand = (rs[0].get("candidate") or {}) if rs else {}
    if not rs or rs[0].get("valid") is False or cand.get("median_ms") is None:
        return "fail", f"results={rs[:1]}"[:800], {}
    r = rs[0]
    return "pass", (f"medium: {cand.get('median_ms')} ms vs PyTorch {(r.get('baseline') or {}).get('median_ms')} ms, "
                    f"{r.get('achieved_gbs')} GB/s, {r.get('fraction_of_roofline')} of roofline"), \
        {"median_ms": cand.get("median_ms"), "achieved_gbs": r.get("achieved_gbs")}


def _profiler() -> str | None:
    if executables.find("rocprofv3"):
        return "rocprofv3"
    if executables.find("ncu"):
        return "ncu"
    return None


def profile_step(preset: str):
    async def step(ctx: Ctx):
        if not _profiler():
            raise Skip("no profiler (rocprofv3 on ROCm, ncu on CUDA)")
        err, res = await call(ctx, "profile_pmc", {"task": sources.TASK, "candidate": sources.TRITON,
                                                   "shape": _shape(ctx), "preset": preset,
                                                   "kernel_filter": sources.KERNEL, "wait_s": LONG_WAIT_S})
        if err:
            return "fail", str(res), {}
        ctx.artifacts[f"profile_{preset}"] = res.get("artifact_id") or ""
        ctx.results[f"profile_{preset}"] = res
        ds = res.get("dispatches") or []
        info = {"dispatches": res.get("dispatches_total"), "passes": len(res.get("passes") or [])}
        if res.get("degraded"):
            return "degraded", "; ".join(res.get("degraded_reasons") or [])[:800] + \
                f" (not collected: {sorted(res.get('counters_not_collected') or {})})"[:400], info
        if not ds:
            return "fail", "no dispatch profiled", info
        return "pass", (f"{len(ds[0].get('counters') or {})} counters, {len(ds[0].get('derived') or {})} derived, "
                        f"bound {res.get('bound')}, {info['passes']} passes"), info
    step.__name__ = f"profile_pmc_{preset}"
    return step


async def thread_trace(ctx: Ctx):
    prof = _profiler()
    if not prof:
        raise Skip("no profiler (rocprofv3 + rocprof-trace-decoder on ROCm, ncu on CUDA)")
    if prof == "rocprofv3":
        from evokernel_mcp.errors import ToolNotFound
        from evokernel_mcp.profile.rocprofv3 import find_att_library

        try:
            find_att_library()
        except ToolNotFound:
            raise Skip("the ATT decoder librocprof-trace-decoder.so is not installed (ROCPROF_ATT_LIBRARY_PATH)") \
                from None
    err, res = await call(ctx, "thread_trace", {"task": sources.TASK, "candidate": sources.TRITON,
                                                "shape": _shape(ctx), "kernel_filter": sources.KERNEL, "top_n": 10,
                                                "wait_s": LONG_WAIT_S})
    if err:
        return "fail", str(res), {}
    ctx.artifacts["thread_trace"] = res.get("artifact_id") or ""
    if res.get("degraded"):
        return "degraded", "; ".join(res.get("degraded_reasons") or [])[:800], {}
    hot = res.get("hot_instructions") or []
    if not hot:
        return "fail", "no hot instructions", {}
    top = max((res.get("class_breakdown") or {"?": 0}).items(), key=lambda kv: kv[1])
    return "pass", f"{res.get('kernel')}: {res.get('instructions_total')} instructions, top class {top[0]} " \
        f"{top[1]:.0%}", {"instructions": res.get("instructions_total")}


async def integrity(ctx: Ctx):
    """The exploit corpus replayed against a fresh server of its own (planted secrets, a leak dir)."""
    from evokernel_mcp.integrity.replay import run_integrity

    rep = await run_integrity()
    ctx.results["integrity"] = rep.model_dump(mode="json")
    broke = [r.exploit for r in rep.broken]
    held = len(rep.rows) - len(broke)
    detail = f"{held} of {len(rep.rows)} exploits held on {rep.backend}" + (f"; BROKE: {', '.join(broke)[:600]}"
                                                                           if broke else "")
    return ("fail" if broke else "pass"), detail, {"held": held, "broke": len(broke), "skipped": len(rep.skipped)}


def _module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# (step name, tool, function, slow: skipped by --quick)
STEPS = [("query_rocminfo", "query_rocminfo", query_rocminfo, False),
         ("compile_triton", "compile_kernel", compile_triton, False),
         ("compile_hip", "compile_kernel", compile_hip, False),
         ("compile_cuda", "compile_kernel", compile_cuda, False),
         ("verify", "verify_vs_pytorch", verify, True),
         ("benchmark", "benchmark", benchmark, True),
         *[(f"profile_pmc_{p}", "profile_pmc", profile_step(p), True) for p in PRESETS],
         ("thread_trace", "thread_trace", thread_trace, True),
         ("integrity", "verify_vs_pytorch+benchmark", integrity, True)]


async def run_step(ctx: Ctx, name: str, tool: str, fn, slow: bool) -> StepResult:
    t0 = time.monotonic()
    try:
        if slow and ctx.quick:
            raise Skip("--quick")
        status, detail, data = await fn(ctx)
    except Skip as s:
        return StepResult(name=name, tool=tool, status="skip", detail=str(s))
    except Exception as e:  # noqa: BLE001 - a crashing step is a failure of the self-test row, never of the run
        status, detail, data = "fail", f"{type(e).__name__}: {e}"[:1500], {}
    return StepResult(name=name, tool=tool, status=status, duration_s=round(time.monotonic() - t0, 2),
                      detail=detail, data=data)
