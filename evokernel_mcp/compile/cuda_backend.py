"""CUDA backend (runner only): nvcc -cubin -Xptxas -v for sm_90/sm_80, then cuobjdump for SASS and
resource usage. Also the cubin helpers the Triton backend uses for its NVIDIA targets.

nvcc: $NVCC > CUDA install dirs > /usr/local/cuda-13.0/bin > PATH.
cuobjdump: $CUOBJDUMP > CUDA install dirs > PATH > the copy the Triton wheel ships.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from pathlib import Path

from evokernel_mcp import executables
from evokernel_mcp.compile.diagnostics import parse_nvcc_diagnostics
from evokernel_mcp.compile.models import BackendOutput
from evokernel_mcp.compile.nv_resources import parse_cuobjdump_res_usage, parse_ptxas_verbose
from evokernel_mcp.errors import EvoError, ToolTimeout
from evokernel_mcp.models import Diagnostic, ToolchainInfo
from evokernel_mcp.runtime import sandbox
from evokernel_mcp.subproc import resolve_executable, run_async, run_sync, tail

log = logging.getLogger(__name__)



def _triton_nvidia_bin() -> list[str]:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [str(Path(next(iter(spec.submodule_search_locations))) / "backends" / "nvidia" / "bin")]


@functools.lru_cache(maxsize=1)
def nvcc_path() -> str:
    return executables.require("nvcc", hint="Install the CUDA toolkit (nvcc) to compile language='cuda'.")


@functools.lru_cache(maxsize=1)
def cuobjdump_path() -> str | None:
    return resolve_executable("cuobjdump", env_var="CUOBJDUMP") or resolve_executable(
        "cuobjdump", extra_dirs=_triton_nvidia_bin())


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str | None:
    """'release 13.0, V13.0.88' from nvcc --version (probed once per process)."""
    try:
        out = run_sync([nvcc_path(), "--version"], timeout_s=20, tool="nvcc").stdout
    except EvoError:
        return None
    for line in out.splitlines():
        if "release" in line:
            return line.split("tools,", 1)[-1].strip()
    return out.strip().splitlines()[-1] if out.strip() else None


def sm_arch(target: str) -> str:
    return target  # sm_90, sm_90a, sm_80 are nvcc's own spellings


async def cubin_sass(cubin: Path, timeout_s: float = 60.0) -> tuple[str | None, str | None]:
    """(SASS text, tool used) via cuobjdump -sass; (None, reason) when cuobjdump is absent or fails."""
    exe = cuobjdump_path()
    if exe is None:
        return None, "cuobjdump not found (set CUOBJDUMP); SASS not available"
    res = await run_async([exe, "-sass", str(cubin)], timeout_s=timeout_s, tool="cuobjdump")
    if res.returncode != 0:
        return None, f"cuobjdump -sass failed ({res.returncode}): {tail(res.stderr, 400)}"
    return res.stdout, exe


async def cubin_res_usage(cubin: Path, timeout_s: float = 30.0) -> str | None:
    exe = cuobjdump_path()
    if exe is None:
        return None
    res = await run_async([exe, "-res-usage", str(cubin)], timeout_s=timeout_s, tool="cuobjdump")
    return res.stdout if res.returncode == 0 else None


def resources_from_logs(ptxas_log: str, res_usage: str | None) -> dict[str, dict[str, int | str]]:
    """Per kernel facts: ptxas -v first (spills, user smem), cuobjdump -res-usage fills gaps."""
    out: dict[str, dict[str, int | str]] = {}
    for r in parse_ptxas_verbose(ptxas_log):
        out[r.name] = r.model_dump(exclude_none=True)
    for r in parse_cuobjdump_res_usage(res_usage or ""):
        entry = out.setdefault(r.name, r.model_dump(exclude_none=True))
        entry.setdefault("cuobjdump_shared_bytes", r.shared_bytes or 0)
    return out


async def compile_cuda(source: str, kernel: str, target: str, *, flags: list[str], workdir: Path,
                       timeout_s: float) -> BackendOutput:
    """Compile CUDA C++ to a cubin; diagnostics mapped to the user's lines; SASS + ptxas -v facts."""
    nvcc = nvcc_path()
    toolchain = ToolchainInfo(name="nvcc", version=nvcc_version(), path=nvcc)
    src = workdir / "kernel.cu"
    src.write_text(source, encoding="utf-8")
    cubin = workdir / "kernel.cubin"
    argv = [nvcc, "-cubin", f"-arch={sm_arch(target)}", "-Xptxas", "-v", "-lineinfo", *flags,
            "-o", str(cubin), str(src)]
    argv, env, _level = sandbox.tool_argv(argv, workdir)  # agent source: the compiler runs sandboxed
    try:
        res = await run_async(argv, timeout_s=timeout_s, cwd=workdir, env=env, tool="nvcc")
    except ToolTimeout as e:
        return BackendOutput(ok=False, toolchain=toolchain, log=e.stderr_tail, diagnostics=[Diagnostic(
            message=f"nvcc did not finish within {timeout_s:g} s and was killed; simplify the kernel or raise "
                    "options.timeout_s.")])
    log_text = res.stderr + res.stdout
    diags = parse_nvcc_diagnostics(log_text, str(src))
    if res.returncode != 0 or not cubin.is_file():
        if not any(d.severity == "error" for d in diags):
            diags.append(Diagnostic(message=f"nvcc failed (exit {res.returncode}): {tail(log_text, 1500)}"))
        return BackendOutput(ok=False, toolchain=toolchain, diagnostics=diags, log=log_text)
    sass, sass_tool = await cubin_sass(cubin)
    if sass is None:
        diags.append(Diagnostic(severity="note", message=sass_tool or "no SASS"))
    resources = resources_from_logs(log_text, await cubin_res_usage(cubin))
    return BackendOutput(ok=True, toolchain=toolchain, diagnostics=diags, sass=sass, binary=cubin.read_bytes(),
                         files={"kernel.cu": source, "nvcc.log": log_text}, resource_usage=resources, log=log_text)

