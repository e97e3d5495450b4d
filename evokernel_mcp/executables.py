"""Every external executable, found one way: explicit argument > its environment variable > install dirs
(its own, then ROCm's and CUDA's) > PATH > fixed fallbacks. doctor, the tools that run the executable and the
version reports (cache keys) all call find(), so what doctor reports is what compile_kernel and the profilers
run.

An EVOKERNEL_* variable is a setting (settings.py); the others (HIPCC, NVCC, NCU, ...) are read here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from evokernel_mcp import settings
from evokernel_mcp.errors import ToolNotFound
from evokernel_mcp.subproc import INSTALL_DIRS, resolve_executable


@dataclass(frozen=True)
class Executable:
    key: str
    names: tuple[str, ...]  # tried in order, each in the dirs and then on PATH
    env_var: str | None = None  # names the executable; wins over the search
    dirs: tuple[str, ...] = ()  # searched before the ROCm/CUDA install dirs
    fallbacks: tuple[str, ...] = ()  # absolute paths tried last
    version_args: tuple[str, ...] = ("--version",)
    disables: str = ""  # what is lost without it (doctor)


LLVM19 = "/usr/lib/llvm-19/bin"
EXECUTABLES: dict[str, Executable] = {e.key: e for e in (
    Executable("hipcc", ("hipcc", "amdclang++"), "HIPCC",
               disables="HIP compiles with ROCm's own compiler (the offline clang-19 path is used instead)"),
    Executable("clang", ("clang-19",), settings.ENV["clang"], fallbacks=(f"{LLVM19}/clang",),
               disables="offline HIP compiles for gfx90a/gfx942/gfx950"),
    Executable("ld.lld", ("ld.lld-19", "ld.lld"), dirs=(LLVM19,), disables="linking offline HIP code objects"),
    Executable("rocminfo", ("rocminfo",), "ROCMINFO", version_args=("--help",),
               disables="live AMD device facts (query_rocminfo falls back to the arch table)"),
    Executable("rocprofv3", ("rocprofv3",), "ROCPROFV3", disables="profile_pmc and thread_trace on AMD GPUs"),
    Executable("amd-smi", ("amd-smi",), "AMD_SMI", version_args=("version",),
               disables="live AMD clocks and memory size"),
    Executable("rocm-smi", ("rocm-smi",), disables="legacy AMD clocks (amd-smi preferred)"),
    Executable("nvcc", ("nvcc",), "NVCC",
               dirs=("/usr/local/cuda-13.0/bin", "/usr/local/cuda-12.9/bin", "/usr/local/cuda-12.8/bin"),
               disables="compile_kernel language='cuda'"),
    Executable("ncu", ("ncu",), "NCU", disables="profile_pmc and thread_trace on NVIDIA GPUs"),
    Executable("nvidia-smi", ("nvidia-smi",), "NVIDIA_SMI", disables="live NVIDIA device facts and clocks"),
    Executable("bwrap", ("bwrap",), settings.ENV["bwrap"],
               disables="the bubblewrap sandbox (agent code then runs with rlimits only)"),
)}
_SETTING_OF = {var: field for field, var in settings.ENV.items()}


def _env_value(var: str | None) -> str | None:
    if var is None:
        return None
    if var in _SETTING_OF:
        return getattr(settings.get(), _SETTING_OF[var])
    return os.environ.get(var) or None


def find(key: str, explicit: str | None = None) -> str | None:
    """The path of executable `key` (a key of EXECUTABLES), or None where it is not here."""
    e = EXECUTABLES[key]
    named = explicit or _env_value(e.env_var)
    if named:  # told: that one or nothing
        return resolve_executable(os.path.basename(named), explicit=named) if os.sep in named else \
            resolve_executable(named, extra_dirs=list(e.dirs))
    for name in e.names:
        path = resolve_executable(name, extra_dirs=list(e.dirs))
        if path:
            return path
    return next((p for p in e.fallbacks if os.access(p, os.X_OK)), None)


def searched(key: str) -> list[str]:
    e = EXECUTABLES[key]
    return ([f"${e.env_var}"] if e.env_var else []) + list(e.dirs) + INSTALL_DIRS + ["PATH"] + list(e.fallbacks)


def require(key: str, hint: str = "") -> str:
    """find(key), or ToolNotFound saying where it looked and which variable names it."""
    path = find(key)
    if path is None:
        e = EXECUTABLES[key]
        raise ToolNotFound(e.names[0], searched=searched(key), env_var=e.env_var, hint=hint)
    return path
