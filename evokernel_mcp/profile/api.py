"""profile_pmc and thread_trace: typed tool functions. Each checks its inputs and the profiler up front
(clear errors before any job), then runs the pipeline (collect.py) as a job alone on its device; every
profiler run is a runner op over a sandboxed child that loads only the candidate (runner_side.py). A failure
after the checks is a result with `error` (session.py), as verify_vs_pytorch's."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from evokernel_mcp import executables
from evokernel_mcp.errors import BadInput, EvoError, ToolNotFound
from evokernel_mcp.journal import ExperimentArg, journaled
from evokernel_mcp.models import ErrorInfo
from evokernel_mcp.profile import collect, ncu, presets, rocprofv3
from evokernel_mcp.profile.models import PmcResult, TraceResult
from evokernel_mcp.profile.rocprof_parsers import parse_rocprofv3_list_avail
from evokernel_mcp.subproc import run_sync

Preset = Literal["overview", "memory", "compute", "lds", "occupancy", "stalls"]


def _backend(device: str | None) -> str:
    if device and device.startswith("rocm"):
        return "rocm"
    if device and device.startswith("cuda"):
        return "cuda"
    if executables.find("rocprofv3"):
        return "rocm"
    if executables.find("ncu"):
        return "cuda"
    raise ToolNotFound("rocprofv3 or ncu", hint="No profiler found. AMD: " + rocprofv3.INSTALL_HINT + " NVIDIA: "
                       + ncu.INSTALL_HINT)


def _list_avail(exe: str):
    try:
        res = run_sync([exe, "--list-avail"], timeout_s=60, tool="rocprofv3")
    except EvoError:
        return None
    if res.returncode != 0:
        return None
    try:
        return parse_rocprofv3_list_avail(res.stdout + "\n" + res.stderr, "rocprofv3 --list-avail")
    except EvoError:
        return None


def _check_kernel_filter(kernel_filter: str | None) -> None:
    if kernel_filter is None:
        return
    try:
        re.compile(kernel_filter)
    except re.error as e:
        raise BadInput(f"kernel_filter {kernel_filter!r} is not a valid regex ({e}); pass a regex on kernel names, "
                       "e.g. 'matmul' or '^my_kernel$', or leave it out to profile all kernels.") from None


def pick_shape(shapes: list[str] | str | None, shape: str | None) -> str | None:
    """`shapes` is the canonical name (as in verify_vs_pytorch and benchmark); `shape` is still accepted.
    A profile runs one shape set, so a list must name exactly one."""
    names = [shapes] if isinstance(shapes, str) else list(shapes or [])
    if shape is not None:
        if names and names != [shape]:
            raise BadInput(f"shapes={names} and shape={shape!r} disagree: pass only shapes (the canonical name).")
        names = [shape]
    if len(names) > 1:
        raise BadInput(f"a profile runs one shape set; got shapes={names}. Pass one, e.g. shapes=[{names[-1]!r}].")
    return names[0] if names else None


def _spec(task, reference, candidate, warmup, iters, shape=None) -> dict[str, Any]:
    if not candidate.strip():
        raise BadInput("candidate is empty: pass Python source defining run(*inputs) or class ModelNew.")
    if bool(task) == bool(reference):
        raise BadInput("pass exactly one of task (a shipped task name) or reference (KernelBench source).")
    return {"task": task, "reference": reference, "candidate": candidate, "warmup": warmup, "iters": iters,
            "shape": shape}


async def _as_job(kind: str, device: str | None, fn, timeout_s: float, wait_s: float, ctx: Any, model):
    from evokernel_mcp.app import get_app
    from evokernel_mcp.runtime.submit import wait_job

    mgr = get_app().jobs
    job_id = await mgr.submit(kind=kind, device=device, fn=fn, timeout_s=timeout_s)
    out = await wait_job(job_id, wait_s, ctx=ctx, jobs=mgr)
    if out.state == "done":
        out.result.job_id = job_id
        return out.result
    if out.state in ("failed", "cancelled"):  # one failure convention: a result with error, as verify's
        err = out.error or ErrorInfo(kind="internal", message=f"{kind} job {job_id} {out.state} without detail")
        return model(state=out.state, job_id=job_id, device=out.device, error=err,
                     message=f"{kind} job {job_id} {out.state}: {err.message[:500]}")
    return model(state=out.state, job_id=job_id, device=out.device,
                 message=f"Not finished within wait_s={wait_s:g} s. Call job_result('{job_id}', wait_s) to fetch the "
                 "result, job_status to look, cancel_job to stop it.")


def _task(spec: dict[str, Any]):
    from evokernel_mcp.tasks import load_task, task_from_reference

    return load_task(spec["task"]) if spec["task"] else task_from_reference(spec["reference"])


def _job(spec: dict[str, Any], timeout_s: float, pipeline, model):
    """The job function: the pipeline over runner-op sessions (profile/session.py)."""
    from evokernel_mcp.profile import session

    task = _task(spec)
    if spec["shape"] is not None:
        task.shape_set(spec["shape"])  # BadInput for an unknown name, before any job

    async def fn(jctx):
        return await session.run_pipeline(session.launch_for(jctx, task, spec, timeout_s), pipeline, model)
    return fn


async def profile_pmc(
    candidate: Annotated[str, Field(description="Candidate source: run(*inputs) or class ModelNew.")],
    task: Annotated[str | None, Field(description="Shipped task name (or pass reference).")] = None,
    reference: Annotated[str | None, Field(description="KernelBench reference source (or pass task).")] = None,
    shapes: Annotated[list[str] | str | None, Field(description="The one shape set to profile, e.g. ['small']; "
                                                   "default the task's largest (last).")] = None,
    preset: Annotated[Preset | None, Field(description="Counter set; default 'overview' when counters is empty.")] = None,
    counters: Annotated[list[str] | None, Field(description="Explicit counter/metric names instead of a preset.")] = None,
    kernel_filter: Annotated[str | None, Field(description="Regex on kernel names to profile (default: all).")] = None,
    arch: Annotated[str | None, Field(description="AMD arch for offline counter validation when no device "
                                      "listing is available (gfx90a/gfx942/gfx950).")] = None,
    device: Annotated[str | None, Field(description="Device id ('rocm:0', 'cuda:0'); default: the first.")] = None,
    warmup: Annotated[int, Field(ge=0, le=20, description="Unprofiled launches first (compilation, caches).")] = 1,
    iters: Annotated[int, Field(ge=1, le=20, description="Profiled launches.")] = 2,
    max_dispatches: Annotated[int, Field(ge=1, le=50, description="Dispatches shown; all are in the artifact.")] = 3,
    wait_s: Annotated[float, Field(ge=0, le=600, description="Seconds to wait before returning a job_id.")] = 50,
    timeout_s: Annotated[float, Field(ge=10, le=3600, description="Hard limit for the profiler run.")] = 600,
    compile_waves_per_simd: Annotated[int | None, Field(
        ge=1, le=20, description="AMD: compile_kernel's occupancy.waves_per_simd for this kernel; adds "
        "occupancy_vs_compile_limit (achieved waves per CU / the register- and LDS-bound limit), which tells a "
        "launch-size or tail problem from a resource limit. Needs the occupancy preset (SQ_ACCUM_PREV_HIRES).")] = None,
    shape: Annotated[str | None, Field(description="Same as shapes=[shape] (older name; shapes is canonical).")] = None,
    experiment: ExperimentArg = None,
    ctx: Context | None = None,
) -> PmcResult:
    """Read hardware counters of the candidate's kernels (rocprofv3 on AMD, ncu on NVIDIA) and explain the
    bottleneck. Call after benchmark, when you need to know WHY it is slow: returns per dispatch the raw
    counters, derived metrics with formulas (DRAM GB/s, L2 hit %, VALU/MFMA busy %, bank-conflict %,
    occupancy) and findings such as 'memory-bound: DRAM 87% of peak'. Raw files: read_artifact(artifact_id)."""
    spec = _spec(task, reference, candidate, warmup, iters, pick_shape(shapes, shape))
    _check_kernel_filter(kernel_filter)
    if preset and counters:
        raise BadInput("pass preset OR counters, not both.")
    backend = _backend(device)
    preset = None if counters else (preset or "overview")
    if backend == "rocm":
        exe = executables.find("rocprofv3")
        if exe is None:
            raise ToolNotFound("rocprofv3", env_var="ROCPROFV3", hint=rocprofv3.INSTALL_HINT)
        avail = _list_avail(exe)
        the_arch = arch or (avail.arch if avail else None)
        if the_arch not in presets.AMD_ARCHES:
            raise BadInput(f"cannot tell the AMD arch (got {the_arch!r}); pass arch='gfx942' (or gfx90a/gfx950).")
        names = presets.preset_counters(preset, the_arch) if preset else counters
        names = presets.validate_counters(names, the_arch, avail)
        passes = presets.split_passes(names, the_arch, avail)
        dspec = collect.table_spec(the_arch, "amd")

        def pipeline(launch):
            return collect.pmc_rocm(launch, passes, kernel_filter, dspec, max_dispatches, names, preset,
                                    compile_waves_per_simd)
    else:
        if executables.find("ncu") is None:
            raise ToolNotFound("ncu", env_var="NCU", hint=ncu.INSTALL_HINT)
        metrics = presets.ncu_metrics(preset, counters)
        dspec = collect.table_spec("sm_90", "nvidia")

        def pipeline(launch):
            return collect.pmc_cuda(launch, metrics, kernel_filter, dspec, max_dispatches, preset)
    fn = journaled(_job(spec, timeout_s, pipeline, PmcResult), "profile_pmc", experiment=experiment, task=task,
                   source=candidate, arguments={
        "task": task, "reference": reference, "shape": spec["shape"], "preset": preset, "counters": counters,
        "kernel_filter": kernel_filter, "device": device})
    return await _as_job("profile", device, fn, timeout_s + 300, wait_s, ctx, PmcResult)


async def thread_trace(
    candidate: Annotated[str, Field(description="Candidate source: run(*inputs) or class ModelNew.")],
    task: Annotated[str | None, Field(description="Shipped task name (or pass reference).")] = None,
    reference: Annotated[str | None, Field(description="KernelBench reference source (or pass task).")] = None,
    kernel_filter: Annotated[str | None, Field(description="Regex selecting the kernel to trace (recommended).")] = None,
    shapes: Annotated[list[str] | str | None, Field(description="The one shape set to trace, e.g. ['small']; "
                                                   "default the task's largest (last).")] = None,
    top_n: Annotated[int, Field(ge=1, le=100, description="Hot instructions returned.")] = 20,
    device: Annotated[str | None, Field(description="Device id ('rocm:0', 'cuda:0'); default: the first.")] = None,
    warmup: Annotated[int, Field(ge=0, le=20, description="Untraced launches first.")] = 1,
    att_target_cu: Annotated[int, Field(ge=0, description="AMD: CU whose waves are traced.")] = 1,
    att_shader_engine_mask: Annotated[str, Field(description="AMD: SEs traced (hex mask).")] = "0x1",
    att_simd_select: Annotated[str, Field(description="AMD: SIMD mask (gfx9).")] = "0xF",
    att_buffer_size: Annotated[str, Field(description="AMD: trace buffer size in bytes (hex).")] = "0x6000000",
    att_library_path: Annotated[str | None, Field(description="AMD: dir of librocprof-trace-decoder.so.")] = None,
    wait_s: Annotated[float, Field(ge=0, le=600)] = 50,
    timeout_s: Annotated[float, Field(ge=10, le=3600)] = 600,
    shape: Annotated[str | None, Field(description="Same as shapes=[shape] (older name; shapes is canonical).")] = None,
    experiment: ExperimentArg = None,
    ctx: Context | None = None,
) -> TraceResult:
    """Trace one dispatch at instruction level (AMD: rocprofv3 ATT; NVIDIA: ncu SASS warp-stall sampling) and
    show where the cycles go: fraction of cycles per instruction class (VALU FMA, conversions, LDS, VMEM,
    waitcnt, NOP, MFMA ...), the top_n hot instructions with neighbours and source lines, and stall reasons.
    Call after profile_pmc names the bottleneck. Full per-instruction table: read_artifact(artifact_id)."""
    spec = _spec(task, reference, candidate, warmup, 1, pick_shape(shapes, shape))
    _check_kernel_filter(kernel_filter)
    backend = _backend(device)
    if backend == "rocm":
        if executables.find("rocprofv3") is None:
            raise ToolNotFound("rocprofv3", env_var="ROCPROFV3", hint=rocprofv3.INSTALL_HINT)
        rocprofv3.find_att_library(att_library_path)  # clear error before any job

        def pipeline(launch):
            return collect.trace_rocm(launch, kernel_filter, top_n, target_cu=att_target_cu,
                                      se_mask=att_shader_engine_mask, simd_select=att_simd_select,
                                      buffer_size=att_buffer_size, att_library_path=att_library_path)
    else:
        if executables.find("ncu") is None:
            raise ToolNotFound("ncu", env_var="NCU", hint=ncu.INSTALL_HINT)

        def pipeline(launch):
            return collect.trace_cuda(launch, kernel_filter, top_n)
    fn = journaled(_job(spec, timeout_s, pipeline, TraceResult), "thread_trace", experiment=experiment, task=task,
                   source=candidate, arguments={
        "task": task, "reference": reference, "shape": spec["shape"], "kernel_filter": kernel_filter, "top_n": top_n,
        "device": device})
    return await _as_job("trace", device, fn, timeout_s + 300, wait_s, ctx, TraceResult)
