"""compile_kernel: Triton / HIP C++ / CUDA C++ -> machine code, with the resource report read first.

Orchestration only: validate -> resolve target -> cache lookup -> backend (a subprocess with a time
limit) -> per-kernel analysis (report.py) -> artifact (full assembly/IR/SASS) -> cache store.
"""

from __future__ import annotations

import functools
import inspect
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from pydantic import Field

from evokernel_mcp import artifacts, executables
from evokernel_mcp.compile import cache
from evokernel_mcp.compile.models import BackendOutput, CompileResult
from evokernel_mcp.compile.options import (
    AMD_TARGETS,
    DEFAULT_AMD_TARGET,
    DEFAULT_NVIDIA_TARGET,
    CompileOptions,
    check_target,
    is_amd,
    parse_options,
)
from evokernel_mcp.compile.report import analyze
from evokernel_mcp.compile.specialize import resolve as resolve_specialization
from evokernel_mcp.errors import BadInput
from evokernel_mcp.journal import ExperimentArg, TaskLabelArg, record_result
from evokernel_mcp.models import Provenance
from evokernel_mcp.paths import sub_state_dir
from evokernel_mcp.subproc import probe_version

log = logging.getLogger(__name__)


async def _live_device_arch() -> tuple[str | None, str]:
    """(arch of device 0, how we know) from query_rocminfo; (None, why) when there is no GPU/tool."""
    try:
        from evokernel_mcp.devices.discovery import query_rocminfo
    except ImportError as e:
        return None, f"device discovery unavailable ({e})"
    try:
        rep = query_rocminfo()
        if inspect.isawaitable(rep):
            rep = await rep
    except Exception as e:  # noqa: BLE001 - discovery failing must not block compiling for a default target
        return None, f"query_rocminfo failed: {e}"
    devices = getattr(rep, "devices", None) or []
    if getattr(rep, "backend", "none") == "none" or not devices:
        return None, "query_rocminfo reports no GPU on this host"
    return devices[0].arch, f"query_rocminfo: live device 0 ({getattr(devices[0], 'name', '?')})"


_LIVE: dict[str, tuple[str | None, str]] = {}


async def resolve_target(target: str | None, language: str) -> tuple[str, Provenance]:
    if target:
        t = check_target(target, language)
        return t, Provenance(field="target", source="argument", detail=None)
    if "live" not in _LIVE:  # discovery runs tools: once per process
        _LIVE["live"] = await _live_device_arch()
    arch, how = _LIVE["live"]
    wanted_amd = language == "hip" or (language == "triton" and (arch is None or arch in AMD_TARGETS))
    fallback = DEFAULT_AMD_TARGET if wanted_amd else DEFAULT_NVIDIA_TARGET
    if arch is not None:
        try:
            return check_target(arch, language), Provenance(field="target", source="query_rocminfo", detail=how)
        except BadInput as e:
            how = f"live device {arch} does not fit language={language!r} ({e})"
    return fallback, Provenance(field="target", source="default",
                                detail=f"no target given and no usable live device ({how}); compiled for {fallback}")


@functools.lru_cache(maxsize=8)
def toolchain_key(language: str, target: str) -> str:
    """Identity of the compiler for the cache key, probed once per process (never on the hot path twice)."""
    from evokernel_mcp.compile.triton_backend import triton_version

    if language == "triton":
        return f"triton {triton_version()}"
    if language == "cuda":
        from evokernel_mcp.compile.cuda_backend import nvcc_path, nvcc_version

        return f"nvcc {nvcc_path()} {nvcc_version()}"
    exe = executables.find("hipcc") or executables.find("clang") or "none"
    ver = probe_version(exe) if exe != "none" else None
    return f"hip {exe} {ver} triton {triton_version()}"


def _check_args(language: str, kernel: str, signature: dict | None, constexprs: dict | None) -> None:
    if language != "triton" and (signature or constexprs):
        raise BadInput("signature and constexprs are for language='triton'; for HIP/CUDA the kernel's C++ "
                       "signature is in the source (use -DNAME=VAL flags for compile-time constants).")
    if not kernel.replace("_", "").isalnum():
        raise BadInput(f"kernel {kernel!r} must be a plain identifier (the function's name in the source).")


async def _run_backend(source: str, language: str, kernel: str, target: str, signature: dict | None,
                       constexprs: dict | None, opts: CompileOptions, workdir: Path,
                       specialization: dict[str, str] | None = None) -> BackendOutput:
    if language in ("hip", "cuda"):
        from evokernel_mcp.compile.source_guard import check_dependencies, check_includes

        await anyio.to_thread.run_sync(check_includes, source)  # clang-19's lexer, then its preprocessor
        await anyio.to_thread.run_sync(check_dependencies, source, language, list(opts.flags))
    if language == "triton":
        from evokernel_mcp.compile.triton_backend import compile_triton

        return await compile_triton(source, kernel, target, signature=signature, constexprs=constexprs,
                                    options=opts, workdir=workdir, specialization=specialization)
    if language == "cuda":
        from evokernel_mcp.compile.cuda_backend import compile_cuda

        return await compile_cuda(source, kernel, target, flags=list(opts.flags), workdir=workdir,
                                  timeout_s=opts.timeout_s)
    from evokernel_mcp.compile.hip import compile_hip

    return await anyio.to_thread.run_sync(functools.partial(
        compile_hip, source, kernel, target, flags=list(opts.flags), workdir=workdir, timeout_s=opts.timeout_s))


def _artifact_files(out: BackendOutput, target: str) -> dict[str, str | bytes]:
    """The main listing first (read_artifact's default file): AMDGCN on AMD, SASS on NVIDIA."""
    files: dict[str, str | bytes] = {}
    if is_amd(target):
        if out.asm:
            files["kernel.amdgcn.s"] = out.asm
    else:
        if out.sass:
            files["kernel.sass"] = out.sass
        if out.asm:
            files["kernel.ptx"] = out.asm
    for name, text in out.files.items():
        if name not in files and name not in ("kernel.amdgcn", "kernel.ptx"):
            files[name] = text
    if out.log and "compile.log" not in files:
        files["compile.log"] = out.log
    if out.binary:
        files["kernel.hsaco" if is_amd(target) else "kernel.cubin"] = out.binary
    return files


async def compile_kernel(
    source: Annotated[str, Field(min_length=1, max_length=1_000_000, description=(
        "Triton: a Python module text with @triton.jit kernels (and its imports). HIP/CUDA: C++ source."))],
    language: Annotated[Literal["triton", "hip", "cuda"], Field(description="Source language.")],
    kernel: Annotated[str, Field(min_length=1, max_length=256, description=(
        "The kernel's function name (C++: the unmangled name; other kernels in the source are reported too)."))],
    target: Annotated[str | None, Field(description=(
        "gfx942 (MI300X), gfx950 (MI350X/MI355X), gfx90a (MI250X), sm_90 / sm_90a (H100/H200), sm_80. "
        "Default: the live device; with none, gfx942 for hip/triton and sm_90 for cuda."))] = None,
    signature: Annotated[dict[str, str] | None, Field(description=(
        "Triton only: runtime argument -> type, e.g. {'x_ptr': '*bf16', 'n': 'i32'}."))] = None,
    constexprs: Annotated[dict[str, int | float | bool | str] | None, Field(description=(
        "Triton only: tl.constexpr argument -> value, e.g. {'BLOCK': 1024}."))] = None,
    options: Annotated[dict[str, Any] | None, Field(description=(
        "num_warps, num_stages, waves_per_eu, matrix_instr_nonkdim, kpack, enable_fp_fusion, maxnreg (Triton); "
        "workgroup_size (threads per block, HIP/CUDA occupancy), flags [list, allow-listed: -O0..-O3, "
        "-DNAME=VAL, -ffast-math, -munsafe-fp-atomics, -mcumode, -maxrregcount=N, --use_fast_math ...], "
        "timeout_s (default 120)."))] = None,
    specialize: Annotated[dict[str, int | str] | None, Field(description=(
        "Triton only: how the launch specializes runtime arguments, as Triton's JIT does. Default: every pointer "
        "16-byte aligned and every integer a multiple of 16 (fresh torch tensors, sizes like 1024). Give example "
        "values where the launch differs: {'n': 1000, 'stride_k': 1, 'x_ptr': 'unaligned'}."))] = None,
    experiment: ExperimentArg = None,
    task: TaskLabelArg = None,
) -> CompileResult:
    """Compile a GPU kernel and report what the compiler made of it: registers, LDS, spills, occupancy, ISA mix.

    Call this right after writing or changing a kernel, before verify_vs_pytorch/benchmark: it needs no GPU for
    AMD targets. Per kernel you get VGPR/AGPR/SGPR counts, LDS (static and Triton's dynamic) and scratch bytes,
    spill counts, the runtime occupancy (waves per SIMD on AMD, warps per SM on NVIDIA) with every limit and
    the binding one, and the instruction mix by class (global/DS loads and stores, VALU, MFMA, waitcnt ...).
    The full assembly/IR is stored as an artifact: page it with read_artifact(artifact_id, offset, limit).
    ok=false means compile errors: read diagnostics (line/column in YOUR source) and fix them.
    A repeat of the same compile is served from a cache (cached=true). Call query_rocminfo first to learn the
    live device; read_doc on the gpu_arch pages explains the occupancy rules.
    """
    t0 = time.monotonic()
    opts = parse_options(options, language)
    _check_args(language, kernel, signature, constexprs)
    if specialize and language != "triton":
        raise BadInput("specialize is for language='triton' (Triton's launch specialization).")
    special = resolve_specialization(signature or {}, specialize) if language == "triton" else None
    tgt, tgt_prov = await resolve_target(target, language)
    key = cache.cache_key(source=source, language=language, kernel=kernel, target=tgt, signature=signature,
                          constexprs=constexprs, options={**opts.stable_dict(), "specialization": special},
                          toolchain=toolchain_key(language, tgt))
    journal = {"experiment": experiment, "task": task, "source": source, "arguments": {
        "language": language, "kernel": kernel, "target": tgt, "signature": signature, "constexprs": constexprs,
        "options": options, "specialize": specialize}}
    hit = cache.get(key)
    if hit is not None:  # how the target was chosen belongs to this call, not to the cached compile
        return await record_result("compile_kernel", hit.model_copy(update={
            "compile_time_s": round(time.monotonic() - t0, 4), "provenance": [tgt_prov, *hit.provenance]}), **journal)
    workdir = Path(tempfile.mkdtemp(prefix="c_", dir=sub_state_dir("compile_work")))
    try:
        out = await _run_backend(source, language, kernel, tgt, signature, constexprs, opts, workdir, special)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = _result(out, key, language=language, kernel=kernel, target=tgt, options=opts, t0=t0)
    result.specialization = special
    if out.ok or any(d.line is not None for d in result.diagnostics):  # deterministic: worth caching
        cache.put(key, result)
    result.provenance.insert(0, tgt_prov)
    return await record_result("compile_kernel", result, **journal)


def _result(out: BackendOutput, key: str, *, language: str, kernel: str, target: str, options: CompileOptions,
            t0: float) -> CompileResult:
    diags = list(out.diagnostics)
    prov = [Provenance(field="toolchain", source=out.toolchain.name, detail=out.toolchain.version)]
    kernels = []
    if out.ok:
        ana = analyze(out, language=language, kernel=kernel, target=target, options=options)
        kernels, diags = ana.kernels, diags + ana.diagnostics
        prov += ana.provenance
    files = _artifact_files(out, target)
    aid = artifacts.put("compile", files, detail=f"{language} {kernel} for {target} ({out.toolchain.name})",
                        artifact_id=cache.artifact_id_for(key)) if files else None
    return CompileResult(ok=out.ok, diagnostics=diags, toolchain=out.toolchain, target=target, language=language,
                         artifact_id=aid, artifact_files=list(files), cached=False,
                         compile_time_s=round(time.monotonic() - t0, 3), kernels=kernels, provenance=prov)
