"""`evokernel-mcp doctor`: which toolchains are here, their versions, and what a missing one disables."""

from __future__ import annotations

import importlib
import importlib.metadata

from evokernel_mcp.models import Model
from evokernel_mcp.subproc import probe_version, resolve_executable


class ToolStatus(Model):
    name: str
    found: bool
    version: str | None = None
    path: str | None = None
    disables: str | None = None


# (name, candidate executables, version args, env var, what it disables when missing)
EXECUTABLES = [
    ("hipcc", ["hipcc", "amdclang++"], ("--version",), "HIPCC", "HIP compiles with ROCm's own compiler (the offline clang-19 path is used instead)"),
    ("clang", ["clang-19", "clang"], ("--version",), "EVOKERNEL_CLANG", "offline HIP compiles for gfx90a/gfx942/gfx950"),
    ("ld.lld", ["ld.lld-19", "ld.lld"], ("--version",), None, "linking offline HIP code objects"),
    ("rocminfo", ["rocminfo"], ("--help",), "ROCMINFO", "live AMD device facts (query_rocminfo falls back to the arch table)"),
    ("rocprofv3", ["rocprofv3"], ("--version",), "ROCPROFV3", "profile_pmc and thread_trace on AMD GPUs"),
    ("amd-smi", ["amd-smi"], ("version",), "AMD_SMI", "live AMD clocks and memory size"),
    ("rocm-smi", ["rocm-smi"], ("--version",), None, "legacy AMD clocks (amd-smi preferred)"),
    ("nvcc", ["nvcc"], ("--version",), "NVCC", "compile_kernel language='cuda'"),
    ("ncu", ["ncu"], ("--version",), "NCU", "profile_pmc and thread_trace on NVIDIA GPUs"),
    ("nvidia-smi", ["nvidia-smi"], ("--version",), None, "live NVIDIA device facts and clocks"),
]
PY_MODULES = [
    ("torch", "verify_vs_pytorch, benchmark (references run in PyTorch)"),
    ("triton", "compile_kernel language='triton' and Triton candidates"),
]


def _version_line(path: str, args: tuple[str, ...]) -> str | None:
    v = probe_version(path, args)
    return v[:160] if v else None


def check_toolchains() -> list[ToolStatus]:
    out: list[ToolStatus] = []
    for name, cands, args, env_var, disables in EXECUTABLES:
        path = None
        for i, cand in enumerate(cands):
            path = resolve_executable(cand, env_var=env_var if i == 0 else None)
            if path:
                break
        if path:
            out.append(ToolStatus(name=name, found=True, path=path, version=_version_line(path, args)))
        else:
            out.append(ToolStatus(name=name, found=False, disables=disables))
    for mod, disables in PY_MODULES:
        try:
            version = importlib.metadata.version(mod)
            out.append(ToolStatus(name=mod, found=True, version=version))
        except importlib.metadata.PackageNotFoundError:
            out.append(ToolStatus(name=mod, found=False, disables=disables))
    return out
